//! Shared harness of the end-to-end tests: a real `skiff apiserver` process on a free loopback
//! port (over the embedded store or a real etcd started for the test), and real kubectl binaries
//! run against it. Children are killed when the harness is dropped; failures print the server's
//! log.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use skiff_store::etcd_process::EtcdProcess;

pub mod agent;
pub mod cluster;
pub mod crd;
pub mod https;
pub mod netns;
pub mod node;

/// Guards every wait on a child so that a broken server fails a test instead of hanging it.
pub const HANG_GUARD: Duration = Duration::from_secs(60);

/// The kubectl versions the suites run with: the newest and the oldest installed.
pub const KUBECTL_133: &str = "/usr/lib/google-cloud-sdk/bin/kubectl.1.33";
pub const KUBECTL_127: &str = "/usr/lib/google-cloud-sdk/bin/kubectl.1.27";

/// Runs one async test body on a multi-threaded runtime (restarts block a worker), failing it
/// instead of hanging if the server stops answering.
pub fn run(body: impl Future<Output = ()>) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    rt.block_on(async {
        tokio::time::timeout(HANG_GUARD * 3, body)
            .await
            .expect("the test body hung");
    });
}

/// Skips a test this host cannot run, loudly; under `CI=true`, where every prerequisite is
/// installed, fails it instead, so that a missing one never passes unseen.
pub fn skip(why: &str) {
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "CI=true and this host cannot run the test: {why}"
    );
    eprintln!("skipping: {why}");
}

/// A kube client built from the server's admin kubeconfig, exactly as a user's program builds
/// one.
pub async fn kube_client(api: &ApiServer) -> kube::Client {
    kube::Client::try_from(kube_config(api).await).expect("a client")
}

/// Creates the object `object` describes (JSON as a manifest writes it), or fails the test.
pub async fn create<K>(api: &kube::Api<K>, object: serde_json::Value) -> K
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    api.create(
        &kube::api::PostParams::default(),
        &serde_json::from_value(object).unwrap(),
    )
    .await
    .expect("create")
}

/// A kube-rs client that returns 429, 503 and 504 answers as errors: by default kube-rs retries
/// them up to 15 times with backoff growing from 5 ms, minutes in all, so a test that expects
/// one (an eviction a PodDisruptionBudget refuses) would wait that long instead.
pub async fn kube_client_without_retries(api: &ApiServer) -> kube::Client {
    let mut config = kube_config(api).await;
    config.default_retry = false;
    kube::Client::try_from(config).expect("a client")
}

async fn kube_config(api: &ApiServer) -> kube::Config {
    let kubeconfig =
        kube::config::Kubeconfig::read_from(api.kubeconfig()).expect("read the kubeconfig");
    let options = kube::config::KubeConfigOptions::default();
    kube::Config::from_custom_kubeconfig(kubeconfig, &options)
        .await
        .expect("a client config from the kubeconfig")
}

/// Which store the API server runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Embedded,
    Etcd,
}

/// A running `skiff apiserver`.
pub struct ApiServer {
    child: Child,
    pub port: u16,
    pub data_dir: PathBuf,
    log: PathBuf,
    /// Extra `skiff apiserver` flags, kept for restarts.
    args: Vec<String>,
    _stdout: mpsc::Receiver<String>,
    etcd: Option<EtcdProcess>,
    _runtime: Option<tokio::runtime::Runtime>,
    _dir: tempfile::TempDir,
}

impl ApiServer {
    pub fn start(backend: Backend) -> ApiServer {
        Self::start_with(backend, &[])
    }

    /// Starts the server with extra `skiff apiserver` flags (kept across restarts).
    pub fn start_with(backend: Backend, args: &[&str]) -> ApiServer {
        let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        let dir = tempfile::tempdir().expect("temp dir");
        let (etcd, runtime) = match backend {
            Backend::Embedded => (None, None),
            Backend::Etcd => {
                let rt = tokio::runtime::Runtime::new().expect("runtime");
                let etcd = rt.block_on(EtcdProcess::start()).expect("start etcd");
                (Some(etcd), Some(rt))
            }
        };
        let data_dir = dir.path().join("data");
        let log = dir.path().join("apiserver.log");
        let (child, port, stdout) = spawn(&data_dir, &log, etcd.as_ref(), 0, &args);
        ApiServer {
            child,
            port,
            data_dir,
            log,
            args,
            _stdout: stdout,
            etcd,
            _runtime: runtime,
            _dir: dir,
        }
    }

    /// Stops the server (SIGKILL) and starts it again on the same port and data.
    pub fn restart(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let (child, port, stdout) = spawn(
            &self.data_dir,
            &self.log,
            self.etcd.as_ref(),
            self.port,
            &self.args,
        );
        assert_eq!(port, self.port);
        self.child = child;
        self._stdout = stdout;
    }

    /// Stops the server with SIGTERM; its exit code once it has exited.
    pub fn terminate(&mut self) -> Option<i32> {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        self.child.wait().expect("wait for the server").code()
    }

    /// The etcd endpoint (`127.0.0.1:PORT`) the server stores into, on [`Backend::Etcd`].
    pub fn etcd_endpoint(&self) -> Option<String> {
        self.etcd.as_ref().map(EtcdProcess::endpoint)
    }

    pub fn kubeconfig(&self) -> PathBuf {
        self.data_dir.join("kubeconfig.yaml")
    }

    pub fn log(&self) -> String {
        read(&self.log)
    }

    /// Runs `kubectl args…` and returns its output, whatever the exit status.
    pub fn kubectl_output(&self, kubectl: &str, args: &[&str], stdin: Option<&str>) -> Output {
        let mut child = Command::new(kubectl)
            .arg("--kubeconfig")
            .arg(self.kubeconfig())
            .args(args)
            .stdin(if stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .env("HOME", self.data_dir.join("home"))
            .spawn()
            .expect("run kubectl");
        if let Some(input) = stdin {
            child
                .stdin
                .take()
                .expect("stdin")
                .write_all(input.as_bytes())
                .expect("write stdin");
        }
        wait_output(child, HANG_GUARD)
    }

    /// Runs kubectl, asserts success and returns stdout.
    /// Runs `kubectl args` (with `stdin`) until `done` accepts its output: for objects that reach
    /// the API server's plugins through its watch cache (LimitRanges, namespace labels, webhook
    /// configurations, admission policies), a moment after the write that made them returned.
    pub fn kubectl_until(
        &self,
        kubectl: &str,
        args: &[&str],
        stdin: Option<&str>,
        done: impl Fn(&Output) -> bool,
    ) -> Output {
        let deadline = std::time::Instant::now() + HANG_GUARD;
        loop {
            let out = self.kubectl_output(kubectl, args, stdin);
            if done(&out) {
                return out;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "kubectl {args:?} never gave the expected answer: {:?}",
                output_text(&out)
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    pub fn kubectl(&self, kubectl: &str, args: &[&str]) -> String {
        self.kubectl_stdin(kubectl, args, None)
    }

    /// The message of the first event about `object` (by name) with `reason`, as kubectl 1.33
    /// reads it; empty if there is none.
    pub fn event_message(&self, object: &str, reason: &str) -> String {
        self.event_messages(object, reason)
            .into_iter()
            .next()
            .unwrap_or_default()
    }

    /// The messages of the events about `object` with `reason`, in the order the API lists them.
    pub fn event_messages(&self, object: &str, reason: &str) -> Vec<String> {
        let selector = format!("involvedObject.name={object},reason={reason}");
        // as JSON: `jsonpath={.items[0].message}` is an error, not empty, while there is none
        let events = self.kubectl(
            KUBECTL_133,
            &["get", "events", "--field-selector", &selector, "-o", "json"],
        );
        let events: serde_json::Value = serde_json::from_str(&events).expect("an event list");
        events["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|e| e["message"].as_str().map(str::to_string))
            .collect()
    }

    /// Waits for the first event about `object` with `reason`; its message.
    pub async fn first_event_message(&self, object: &str, reason: &str) -> String {
        let what = format!("a {reason} event about {object}");
        eventually(&what, || async {
            let message = self.event_message(object, reason);
            (!message.is_empty()).then_some(message)
        })
        .await
    }

    pub fn kubectl_stdin(&self, kubectl: &str, args: &[&str], stdin: Option<&str>) -> String {
        let out = self.kubectl_output(kubectl, args, stdin);
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(
            out.status.success(),
            "kubectl {args:?} failed: {stderr}\nstdout: {stdout}\nserver log:\n{}",
            tail(&self.log(), 40)
        );
        stdout
    }

    /// `kubectl apply -f -` of `manifest` (kubectl 1.33).
    pub fn apply(&self, manifest: serde_json::Value) -> String {
        self.kubectl_stdin(
            KUBECTL_133,
            &["apply", "-f", "-"],
            Some(&manifest.to_string()),
        )
    }

    /// `kubectl <args…> -o jsonpath=<path>` (kubectl 1.33).
    pub fn jsonpath(&self, args: &[&str], path: &str) -> String {
        let path = format!("jsonpath={path}");
        let mut all = args.to_vec();
        all.extend(["-o", &path]);
        self.kubectl(KUBECTL_133, &all)
    }

    /// Runs kubectl expecting failure and returns stderr.
    pub fn kubectl_fails(&self, kubectl: &str, args: &[&str], stdin: Option<&str>) -> String {
        let out = self.kubectl_output(kubectl, args, stdin);
        assert!(
            !out.status.success(),
            "kubectl {args:?} should fail; stdout: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        String::from_utf8_lossy(&out.stderr).into_owned()
    }

    /// Starts a long-running kubectl (e.g. `get --watch`), its stdout delivered line by line.
    pub fn kubectl_stream(&self, kubectl: &str, args: &[&str]) -> (Child, mpsc::Receiver<String>) {
        let mut child = Command::new(kubectl)
            .arg("--kubeconfig")
            .arg(self.kubeconfig())
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .env("HOME", self.data_dir.join("home"))
            .spawn()
            .expect("run kubectl");
        let lines = line_reader(child.stdout.take().expect("stdout"));
        (child, lines)
    }
}

impl Drop for ApiServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!("--- apiserver log ---\n{}", tail(&self.log(), 80));
        }
    }
}

fn spawn(
    data_dir: &Path,
    log: &Path,
    etcd: Option<&EtcdProcess>,
    port: u16,
    args: &[String],
) -> (Child, u16, mpsc::Receiver<String>) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_skiff"));
    cmd.args(["apiserver", "--data-dir"])
        .arg(data_dir)
        .args(["--secure-port", &port.to_string()])
        .args(args);
    if let Some(etcd) = etcd {
        cmd.arg("--datastore-endpoint")
            .arg(format!("etcd://{}", etcd.endpoint()));
    }
    let (child, ready, lines) = spawn_until_ready(&mut cmd, log);
    let port = ready
        .split("https://127.0.0.1:")
        .nth(1)
        .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no port in the ready line {ready:?}"));
    (child, port, lines)
}

/// Starts a `skiff` command (stdin closed, stderr appended to `log`, `RUST_LOG=info`) and waits
/// for its first line, which must say `ready`: returns the child, that line and the rest of its
/// stdout. A command that prints nothing fails the test with its log.
pub fn spawn_until_ready(cmd: &mut Command, log: &Path) -> (Child, String, mpsc::Receiver<String>) {
    let log_file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .expect("log file");
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(log_file)
        .env("RUST_LOG", "info")
        .spawn()
        .unwrap_or_else(|e| panic!("starting {cmd:?}: {e}"));
    let lines = line_reader(child.stdout.take().expect("stdout"));
    let ready = match lines.recv_timeout(HANG_GUARD) {
        Ok(line) => line,
        Err(_) => {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{cmd:?} printed no ready line; its log:\n{}", read(log));
        }
    };
    assert!(ready.contains("ready"), "the ready line: {ready:?}");
    (child, ready, lines)
}

pub fn line_reader(out: impl Read + Send + 'static) -> mpsc::Receiver<String> {
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

/// Waits for a child's output, killing it after `limit`.
fn wait_output(child: Child, limit: Duration) -> Output {
    let pid = child.id();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(limit) {
        Ok(out) => out.expect("child output"),
        Err(_) => {
            let _ = Command::new("kill").arg("-9").arg(pid.to_string()).status();
            panic!("child {pid} hung for {limit:?}");
        }
    }
}

/// Runs a command to completion (stdin closed, output captured), killing it after [`HANG_GUARD`].
pub fn run_guarded(cmd: &mut Command) -> Output {
    run_guarded_with(cmd, None)
}

/// [`run_guarded`] with `stdin` written to the command (then closed), when given.
pub fn run_guarded_with(cmd: &mut Command, stdin: Option<&str>) -> Output {
    let mut child = cmd
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("starting {cmd:?} failed: {e}"));
    if let Some(input) = stdin {
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(input.as_bytes())
            .expect("write stdin");
    }
    wait_output(child, HANG_GUARD)
}

/// Waits for a line satisfying `pred` on a line stream.
pub fn expect_line(lines: &mpsc::Receiver<String>, pred: impl Fn(&str) -> bool) -> String {
    let deadline = std::time::Instant::now() + HANG_GUARD;
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match lines.recv_timeout(left) {
            Ok(line) if pred(&line) => return line,
            Ok(_) => continue,
            Err(_) => panic!("no matching line within {HANG_GUARD:?}"),
        }
    }
}

/// One plain HTTP/1.0 GET of `path` from `addr` (`host:port`): the whole response, status line
/// and headers included. Panics if the connection fails.
pub fn http_get(addr: &str, path: &str) -> String {
    use std::io::{Read, Write};
    let mut conn =
        std::net::TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect {addr}: {e}"));
    conn.set_read_timeout(Some(HANG_GUARD)).unwrap();
    let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h);
    write!(conn, "GET {path} HTTP/1.0\r\nHost: {host}\r\n\r\n").unwrap();
    let mut response = String::new();
    conn.read_to_string(&mut response)
        .unwrap_or_else(|e| panic!("read the answer from {addr}: {e}"));
    response
}

/// A command's stdout and stderr as text.
pub fn output_text(out: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Runs `skiff bench ARGS` to the end, failing the test if it fails (not under the hang guard:
/// a bench takes longer under load and bounds its own waits); its stdout, and the JSON object on
/// each line of it.
pub fn bench(args: &[&str]) -> (String, Vec<serde_json::Value>) {
    let out = Command::new(env!("CARGO_BIN_EXE_skiff"))
        .arg("bench")
        .args(args)
        .output()
        .expect("run skiff bench");
    let (stdout, stderr) = output_text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let lines = stdout
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    (stdout, lines)
}

pub fn read(path: &Path) -> String {
    let mut s = String::new();
    if let Ok(mut f) = std::fs::File::open(path) {
        let _ = f.read_to_string(&mut s);
    }
    s
}

fn tail(s: &str, n: usize) -> String {
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// Polls every 100 ms until `f` gives a value (bounded by the hang guard, not a timing
/// assertion).
pub async fn eventually<T, F: Future<Output = Option<T>>>(
    what: &str,
    mut f: impl FnMut() -> F,
) -> T {
    let deadline = tokio::time::Instant::now() + HANG_GUARD;
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "gave up waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The index of the first line of `text` containing every one of `parts`.
pub fn line_with(text: &str, parts: &[&str]) -> usize {
    text.lines()
        .position(|l| parts.iter().all(|p| l.contains(p)))
        .unwrap_or_else(|| panic!("no line with {parts:?} in:\n{text}"))
}
