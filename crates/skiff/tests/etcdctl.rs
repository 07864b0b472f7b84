//! Debian's unmodified `etcdctl` 3.4 against a real `skiff store serve` process: each test starts
//! its own server on a free loopback port with a fresh data dir, waits for its `ready` line, and
//! asserts on what etcdctl prints. Children are killed when the test ends, pass or fail; a failing
//! test prints the server's log.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, ExitStatus, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::Value;

const ETCDCTL: &str = "/usr/bin/etcdctl";

/// Guards every wait on a child so that a broken server fails a test instead of hanging it.
const HANG_GUARD: Duration = Duration::from_secs(60);

/// A running `skiff store serve`.
struct Skiff {
    child: Child,
    addr: String,
    data_dir: PathBuf,
    log: PathBuf,
    /// Kept open so that the server never writes into a closed pipe.
    _stdout: mpsc::Receiver<String>,
    _dir: Option<tempfile::TempDir>,
}

impl Skiff {
    fn start() -> Skiff {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut skiff = Skiff::start_in(&dir.path().join("data"), &dir.path().join("skiff.log"));
        skiff._dir = Some(dir);
        skiff
    }

    /// Start on `data_dir` (which may already hold a store), logging into `log` (appending).
    fn start_in(data_dir: &Path, log: &Path) -> Skiff {
        let log_file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .expect("log file");
        let mut child = Command::new(env!("CARGO_BIN_EXE_skiff"))
            .args(["store", "serve", "--data-dir"])
            .arg(data_dir)
            .args(["--listen", "127.0.0.1:0"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(log_file)
            .spawn()
            .expect("start skiff");
        let lines = line_reader(child.stdout.take().expect("stdout"));
        let ready = match lines.recv_timeout(HANG_GUARD) {
            Ok(line) => line,
            Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("skiff printed no ready line; its log:\n{}", read(log));
            }
        };
        assert!(
            ready.contains("ready"),
            "first line is the ready line: {ready:?}"
        );
        let addr = ready
            .split(" on ")
            .nth(1)
            .and_then(|rest| rest.split_whitespace().next())
            .unwrap_or_else(|| panic!("no address in the ready line {ready:?}"))
            .to_string();
        assert!(
            addr.starts_with("127.0.0.1:") && !addr.ends_with(":0"),
            "the bound address: {addr}"
        );
        Skiff {
            child,
            addr,
            data_dir: data_dir.to_path_buf(),
            log: log.to_path_buf(),
            _stdout: lines,
            _dir: None,
        }
    }

    fn etcdctl(&self) -> Command {
        let mut cmd = Command::new(ETCDCTL);
        cmd.env("ETCDCTL_API", "3")
            .arg(format!("--endpoints={}", self.addr));
        cmd
    }

    /// Run etcdctl with `args`; return its whole output.
    fn run(&self, args: &[&str]) -> Output {
        self.etcdctl().args(args).output().expect("run etcdctl")
    }

    /// Run etcdctl with `args`, which must succeed; return its stdout.
    fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "etcdctl {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).expect("utf-8 output")
    }

    /// Run etcdctl with `args` and `input` on its stdin; return its whole output.
    fn run_with_stdin(&self, args: &[&str], input: &str) -> Output {
        let mut child = self
            .etcdctl()
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(input.as_bytes())
            .unwrap();
        child.wait_with_output().unwrap()
    }

    /// Run etcdctl with `args` and parse its `-w json` output.
    fn json(&self, args: &[&str]) -> Value {
        let mut all = args.to_vec();
        all.extend(["-w", "json"]);
        serde_json::from_str(&self.ok(&all)).expect("json output")
    }

    /// The store's current revision, from a response header.
    fn revision(&self) -> i64 {
        // (JSON output leaves out a zero revision.)
        self.json(&["get", "/no-such-key"])["header"]["revision"]
            .as_i64()
            .unwrap_or(0)
    }

    /// Start a long-running etcdctl (a watch) whose stdout lines can be read.
    fn spawn(&self, args: &[&str]) -> Running {
        let mut child = self
            .etcdctl()
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let lines = line_reader(child.stdout.take().unwrap());
        let stdin = child.stdin.take();
        Running {
            child,
            lines,
            stdin,
        }
    }

    /// Send SIGTERM and wait for the server to exit.
    fn terminate(&mut self) -> ExitStatus {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
        let deadline = Instant::now() + HANG_GUARD;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "skiff did not exit after SIGTERM"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Skiff {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!(
                "--- skiff log ({}):\n{}",
                self.log.display(),
                read(&self.log)
            );
        }
    }
}

/// A long-running etcdctl; killed when dropped.
struct Running {
    child: Child,
    lines: mpsc::Receiver<String>,
    stdin: Option<ChildStdin>,
}

impl Running {
    fn line(&self) -> String {
        self.lines
            .recv_timeout(HANG_GUARD)
            .expect("etcdctl printed a line")
    }

    fn lines(&self, n: usize) -> Vec<String> {
        (0..n).map(|_| self.line()).collect()
    }

    fn send(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("stdin");
        writeln!(stdin, "{line}").unwrap();
        stdin.flush().unwrap();
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Lines of `out`, read by a thread, so that waits can be bounded.
fn line_reader(out: ChildStdout) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

fn read(path: &Path) -> String {
    let mut s = String::new();
    if let Ok(mut f) = std::fs::File::open(path) {
        let _ = f.read_to_string(&mut s);
    }
    s
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn base64(data: &[u8]) -> String {
    const ABC: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (b[0] as u32) << 16 | (b[1] as u32) << 8 | b[2] as u32;
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ABC[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// `etcdctl txn`'s non-interactive stdin: compares, a blank line, success ops, a blank line,
/// failure ops, a blank line.
fn txn_input(compares: &[&str], success: &[&str], failure: &[&str]) -> String {
    let mut input = String::new();
    for part in [compares, success, failure] {
        for line in part {
            input.push_str(line);
            input.push('\n');
        }
        input.push('\n');
    }
    input
}

/// The lease ID (hex) from `lease grant`'s "lease ID granted with TTL(Ns)".
fn granted_lease(out: &str) -> String {
    let words: Vec<&str> = out.split_whitespace().collect();
    assert_eq!(
        (words[0], words[2]),
        ("lease", "granted"),
        "lease grant output: {out}"
    );
    words[1].to_string()
}

#[test]
fn put_then_get_prints_the_key_and_the_value() {
    let skiff = Skiff::start();
    assert_eq!(skiff.ok(&["put", "/greeting", "hello world"]), "OK\n");
    assert_eq!(skiff.ok(&["get", "/greeting"]), "/greeting\nhello world\n");
    assert_eq!(skiff.ok(&["get", "/missing"]), "");
}

#[test]
fn get_with_prefix_lists_keys_in_order_and_limit_cuts_the_list() {
    let skiff = Skiff::start();
    for (k, v) in [("/p/b", "2"), ("/p/a", "1"), ("/p/c", "3"), ("/q", "other")] {
        skiff.ok(&["put", k, v]);
    }
    assert_eq!(
        skiff.ok(&["get", "--prefix", "/p/"]),
        "/p/a\n1\n/p/b\n2\n/p/c\n3\n"
    );
    assert_eq!(
        skiff.ok(&["get", "--prefix", "/p/", "--limit", "2"]),
        "/p/a\n1\n/p/b\n2\n"
    );
    assert_eq!(
        skiff.ok(&["get", "--prefix", "/p/", "--keys-only"]),
        "/p/a\n\n/p/b\n\n/p/c\n\n"
    );
    let json = skiff.json(&["get", "--prefix", "/p/", "--limit", "1"]);
    assert_eq!(
        (json["count"].as_i64(), json["more"].as_bool()),
        (Some(3), Some(true))
    );
}

#[test]
fn get_from_key_lists_every_key_from_the_given_one_on() {
    let skiff = Skiff::start();
    for k in ["/a", "/b", "/c"] {
        skiff.ok(&["put", k, "v"]);
    }
    assert_eq!(
        skiff.ok(&["get", "--from-key", "/b", "--keys-only"]),
        "/b\n\n/c\n\n"
    );
}

#[test]
fn put_with_prev_kv_prints_the_old_value_and_ignore_value_keeps_it() {
    let skiff = Skiff::start();
    skiff.ok(&["put", "/k", "old"]);
    assert_eq!(
        skiff.ok(&["put", "/k", "new", "--prev-kv"]),
        "OK\n/k\nold\n"
    );
    let lease = granted_lease(&skiff.ok(&["lease", "grant", "60"]));
    skiff.ok(&["put", "/k", "--ignore-value", &format!("--lease={lease}")]);
    let kv = &skiff.json(&["get", "/k"])["kvs"][0];
    assert_eq!(kv["value"].as_str(), Some(base64(b"new").as_str()));
    assert_eq!(
        kv["lease"].as_i64(),
        Some(i64::from_str_radix(&lease, 16).unwrap())
    );
    let out = skiff.run(&["put", "/missing", "--ignore-value"]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("Error: etcdserver: key not found"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn get_sorted_by_modify_revision_descending_lists_the_latest_write_first() {
    let skiff = Skiff::start();
    for k in ["/s/a", "/s/b", "/s/c"] {
        skiff.ok(&["put", k, "v"]);
    }
    skiff.ok(&["put", "/s/a", "again"]);
    let out = skiff.ok(&[
        "get",
        "--prefix",
        "/s/",
        "--order=DESCEND",
        "--sort-by=MODIFY",
        "--keys-only",
    ]);
    assert_eq!(out, "/s/a\n\n/s/c\n\n/s/b\n\n");
}

#[test]
fn get_at_an_old_revision_shows_the_value_written_then() {
    let skiff = Skiff::start();
    let first = skiff.json(&["put", "/r", "one"])["header"]["revision"]
        .as_i64()
        .unwrap();
    skiff.ok(&["put", "/r", "two"]);
    assert_eq!(
        skiff.ok(&["get", "/r", &format!("--rev={first}")]),
        "/r\none\n"
    );
    assert_eq!(skiff.ok(&["get", "/r"]), "/r\ntwo\n");
}

#[test]
fn get_as_json_carries_the_header_revision_and_base64_keys_and_values() {
    let skiff = Skiff::start();
    let put = skiff.json(&["put", "/json/key", "value"]);
    let revision = put["header"]["revision"].as_i64().unwrap();
    let got = skiff.json(&["get", "/json/key"]);
    let header = &got["header"];
    assert_eq!(header["revision"].as_i64(), Some(revision));
    assert_eq!(header["raft_term"].as_u64(), Some(1));
    assert!(
        header["cluster_id"].as_u64().unwrap() != 0 && header["member_id"].as_u64().unwrap() != 0
    );
    let kv = &got["kvs"][0];
    assert_eq!(kv["key"].as_str(), Some(base64(b"/json/key").as_str()));
    assert_eq!(kv["value"].as_str(), Some(base64(b"value").as_str()));
    assert_eq!(
        (kv["create_revision"].as_i64(), kv["mod_revision"].as_i64()),
        (Some(revision), Some(revision))
    );
    assert_eq!(kv["version"].as_i64(), Some(1));
    assert_eq!(got["count"].as_i64(), Some(1));
}

#[test]
fn del_with_prefix_prints_how_many_keys_it_deleted() {
    let skiff = Skiff::start();
    for k in ["/d/1", "/d/2", "/d/3", "/keep"] {
        skiff.ok(&["put", k, "v"]);
    }
    assert_eq!(skiff.ok(&["del", "/d/2"]), "1\n");
    assert_eq!(skiff.ok(&["del", "--prefix", "/d/"]), "2\n");
    assert_eq!(skiff.ok(&["del", "/d/1"]), "0\n");
    assert_eq!(
        skiff.ok(&["get", "--prefix", "/", "--keys-only"]),
        "/keep\n\n"
    );
}

#[test]
fn txn_from_stdin_runs_the_success_branch_when_its_compare_holds() {
    let skiff = Skiff::start();
    skiff.ok(&["put", "/t/state", "idle"]);
    let input = txn_input(
        &[r#"value("/t/state") = "idle""#],
        &["put /t/state busy", "get /t/state"],
        &["put /t/failed yes"],
    );
    let out = skiff.run_with_stdin(&["txn"], &input);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out), "SUCCESS\n\nOK\n\n/t/state\nbusy\n");
    assert_eq!(skiff.ok(&["get", "/t/failed"]), "");
}

#[test]
fn txn_from_stdin_runs_the_failure_branch_when_its_compare_fails() {
    let skiff = Skiff::start();
    skiff.ok(&["put", "/t/state", "busy"]);
    let input = txn_input(
        &[r#"value("/t/state") = "idle""#, r#"mod("/t/state") > "0""#],
        &["put /t/state busy2"],
        &["put /t/failed yes"],
    );
    let out = skiff.run_with_stdin(&["txn"], &input);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out), "FAILURE\n\nOK\n");
    assert_eq!(skiff.ok(&["get", "/t/failed"]), "/t/failed\nyes\n");
    assert_eq!(skiff.ok(&["get", "/t/state"]), "/t/state\nbusy\n");
}

#[test]
fn txn_compares_on_create_revision_to_create_a_key_only_once() {
    let skiff = Skiff::start();
    let input = txn_input(&[r#"create("/t/once") = "0""#], &["put /t/once first"], &[]);
    assert_eq!(
        stdout(&skiff.run_with_stdin(&["txn"], &input)),
        "SUCCESS\n\nOK\n"
    );
    let input = txn_input(
        &[r#"create("/t/once") = "0""#],
        &["put /t/once second"],
        &[],
    );
    assert_eq!(stdout(&skiff.run_with_stdin(&["txn"], &input)), "FAILURE\n");
    assert_eq!(
        skiff.ok(&["get", "/t/once", "--print-value-only"]),
        "first\n"
    );
}

#[test]
fn watch_with_prefix_prints_puts_and_deletes_as_they_happen() {
    let skiff = Skiff::start();
    // Watching from the next revision: nothing written after the watch starts can be missed,
    // however long etcdctl takes to set the watch up.
    let next = skiff.revision() + 1;
    let watch = skiff.spawn(&["watch", "--prefix", "/w/", &format!("--rev={next}")]);
    skiff.ok(&["put", "/other", "x"]);
    skiff.ok(&["put", "/w/a", "1"]);
    skiff.ok(&["del", "/w/a"]);
    assert_eq!(watch.lines(6), ["PUT", "/w/a", "1", "DELETE", "/w/a", ""]);
}

#[test]
fn watch_from_an_old_revision_replays_the_history_of_the_key() {
    let skiff = Skiff::start();
    let first = skiff.json(&["put", "/h", "1"])["header"]["revision"]
        .as_i64()
        .unwrap();
    skiff.ok(&["put", "/h", "2"]);
    skiff.ok(&["put", "/h", "3"]);
    let watch = skiff.spawn(&["watch", "/h", &format!("--rev={}", first + 1), "--prev-kv"]);
    // With --prev-kv etcdctl prints each event's previous key and value before the new ones.
    assert_eq!(
        watch.lines(10),
        ["PUT", "/h", "1", "/h", "2", "PUT", "/h", "2", "/h", "3"]
    );
}

#[test]
fn watch_from_a_compacted_revision_is_canceled_with_etcds_message() {
    let skiff = Skiff::start();
    for v in ["1", "2", "3"] {
        skiff.ok(&["put", "/c", v]);
    }
    let revision = skiff.revision();
    skiff.ok(&["compaction", &revision.to_string()]);
    let out = skiff.run(&["watch", "/c", "--rev=1"]);
    assert!(!out.status.success());
    // etcdctl 3.4 prints both lines on stderr.
    assert_eq!(
        stderr(&out),
        "watch was canceled (etcdserver: mvcc: required revision has been compacted)\n\
         Error: watch is canceled by the server\n"
    );
}

#[test]
fn interactive_watch_answers_a_progress_request_with_the_current_revision() {
    let skiff = Skiff::start();
    let next = skiff.revision() + 1;
    let mut watch = skiff.spawn(&["watch", "-i"]);
    watch.send(&format!("watch /i --rev={next}"));
    skiff.ok(&["put", "/i", "v"]);
    assert_eq!(watch.lines(3), ["PUT", "/i", "v"]);
    skiff.ok(&["put", "/elsewhere", "v"]);
    let revision = skiff.revision();
    watch.send("progress");
    assert_eq!(watch.line(), format!("progress notify: {revision}"));
}

#[test]
fn compaction_makes_older_revisions_unreadable_with_etcds_error() {
    let skiff = Skiff::start();
    let first = skiff.json(&["put", "/k", "1"])["header"]["revision"]
        .as_i64()
        .unwrap();
    let second = skiff.json(&["put", "/k", "2"])["header"]["revision"]
        .as_i64()
        .unwrap();
    assert_eq!(
        skiff.ok(&["compaction", &second.to_string()]),
        format!("compacted revision {second}\n")
    );
    let out = skiff.run(&["get", "/k", &format!("--rev={first}")]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("Error: etcdserver: mvcc: required revision has been compacted"),
        "{}",
        stderr(&out)
    );
    assert_eq!(
        skiff.ok(&["get", "/k", &format!("--rev={second}")]),
        "/k\n2\n"
    );
    let again = skiff.run(&["compaction", &second.to_string()]);
    assert!(
        stderr(&again).contains("required revision has been compacted"),
        "{}",
        stderr(&again)
    );
}

#[test]
fn a_key_put_with_a_lease_lives_while_kept_alive_and_goes_when_the_lease_is_revoked() {
    let skiff = Skiff::start();
    let lease = granted_lease(&skiff.ok(&["lease", "grant", "60"]));
    assert_eq!(
        skiff.ok(&["put", "/l/k", "v", &format!("--lease={lease}")]),
        "OK\n"
    );
    assert_eq!(
        skiff.ok(&["lease", "keep-alive", "--once", &lease]),
        format!("lease {lease} keepalived with TTL(60)\n")
    );
    let ttl = skiff.ok(&["lease", "timetolive", &lease, "--keys"]);
    assert!(
        ttl.starts_with(&format!("lease {lease} granted with TTL(60s), remaining(")),
        "{ttl}"
    );
    assert!(ttl.ends_with("attached keys([/l/k])\n"), "{ttl}");
    let get = skiff.json(&["get", "/l/k"]);
    assert_eq!(
        get["kvs"][0]["lease"].as_i64(),
        Some(i64::from_str_radix(&lease, 16).unwrap())
    );

    assert_eq!(
        skiff.ok(&["lease", "revoke", &lease]),
        format!("lease {lease} revoked\n")
    );
    assert_eq!(skiff.ok(&["get", "/l/k"]), "");
    assert_eq!(
        skiff.ok(&["lease", "timetolive", &lease]),
        format!("lease {lease} already expired\n")
    );
    let out = skiff.run(&["lease", "keep-alive", "--once", &lease]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("etcdserver: requested lease not found"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn lease_keep_alive_renews_the_lease_until_it_is_stopped() {
    let skiff = Skiff::start();
    let lease = granted_lease(&skiff.ok(&["lease", "grant", "3"]));
    // etcdctl renews every TTL/3 seconds and prints each renewal.
    let keep_alive = skiff.spawn(&["lease", "keep-alive", &lease]);
    let renewed = format!("lease {lease} keepalived with TTL(3)");
    assert_eq!(keep_alive.lines(2), [renewed.clone(), renewed]);
}

#[test]
fn lease_list_shows_every_granted_lease() {
    let skiff = Skiff::start();
    let a = granted_lease(&skiff.ok(&["lease", "grant", "30"]));
    let b = granted_lease(&skiff.ok(&["lease", "grant", "40"]));
    let out = skiff.ok(&["lease", "list"]);
    let mut lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.remove(0), "found 2 leases");
    lines.sort();
    let mut want = vec![a.as_str(), b.as_str()];
    want.sort();
    assert_eq!(lines, want);
}

#[test]
fn endpoint_status_as_json_names_this_member_as_leader_at_the_store_revision() {
    let skiff = Skiff::start();
    skiff.ok(&["put", "/x", "y"]);
    let revision = skiff.revision();
    let status = skiff.json(&["endpoint", "status"]);
    let entry = &status[0];
    assert_eq!(entry["Endpoint"].as_str(), Some(skiff.addr.as_str()));
    let st = &entry["Status"];
    assert_eq!(st["header"]["revision"].as_i64(), Some(revision));
    assert_eq!(st["leader"].as_u64(), st["header"]["member_id"].as_u64());
    assert_eq!(st["raftIndex"].as_i64(), Some(revision));
    assert_eq!(st["raftTerm"].as_u64(), Some(1));
    assert!(
        st["version"].as_str().unwrap().starts_with("3.4."),
        "{}",
        st["version"]
    );
    assert!(st["dbSize"].as_i64().unwrap() > 0);
}

#[test]
fn endpoint_health_and_member_list_report_this_server() {
    let skiff = Skiff::start();
    let out = skiff.run(&["endpoint", "health"]);
    assert!(out.status.success(), "{}", stderr(&out));
    // etcdctl 3.4 prints the health line on stderr.
    let all = stdout(&out) + &stderr(&out);
    assert!(all.contains(&format!("{} is healthy", skiff.addr)), "{all}");
    let members = skiff.ok(&["member", "list"]);
    assert!(
        members.contains(&format!(", started, skiff, , http://{}, false", skiff.addr)),
        "{members}"
    );
}

#[test]
fn check_perf_with_the_small_load_gets_no_errors_and_cleans_up_its_keys() {
    let skiff = Skiff::start();
    let out = skiff.run(&["check", "perf", "--load=s", "--prefix=/check-perf-test/"]);
    let text = stdout(&out).replace('\r', "\n");
    // Pass or fail on throughput and latency depends on the machine; errors do not.
    assert!(
        !text.contains("FAIL: too many errors") && !text.contains("ERROR("),
        "{text}"
    );
    assert!(
        text.contains("writes/s") && text.contains("Slowest request") && text.contains("Stddev"),
        "{text}"
    );
    let left = skiff.json(&["get", "--prefix", "/check-perf-test/", "--keys-only"]);
    assert_eq!(
        left["count"].as_i64().unwrap_or(0),
        0,
        "check perf deleted its keys: {left}"
    );
}

#[test]
fn serve_stops_cleanly_on_sigterm_and_keeps_its_data_for_the_next_start() {
    let mut skiff = Skiff::start();
    skiff.ok(&["put", "/durable", "yes"]);
    let status = skiff.terminate();
    assert!(status.success(), "exit status after SIGTERM: {status}");
    let again = Skiff::start_in(&skiff.data_dir, &skiff.log);
    assert_eq!(again.ok(&["get", "/durable"]), "/durable\nyes\n");
}

#[test]
fn serve_with_a_bad_listen_address_exits_with_the_usage_code() {
    let out = Command::new(env!("CARGO_BIN_EXE_skiff"))
        .args([
            "store",
            "serve",
            "--data-dir",
            "/nonexistent",
            "--listen",
            "not-an-address",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("--listen"), "{}", stderr(&out));
}
