//! kill -9 while clients write: every acknowledged write is there after a restart, no
//! transaction is half applied, and `skiff store check` finds the files consistent after every
//! kill. Drives the real `skiff store serve` child process through its etcd v3 gRPC API with
//! the `etcd-client` crate, over 20 kill/restart cycles.

use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use etcd_client::{Client, Txn, TxnOp};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::Mutex;

const WRITERS: usize = 8;
const CYCLES: usize = 20;

/// A running `skiff store serve`.
struct Server {
    child: Child,
    endpoint: String,
}

impl Server {
    async fn start(dir: &std::path::Path) -> Server {
        let mut child = Command::new(env!("CARGO_BIN_EXE_skiff"))
            .args(["store", "serve", "--listen", "127.0.0.1:0", "--data-dir"])
            .arg(dir)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .expect("start skiff store serve");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let ready = tokio::time::timeout(Duration::from_secs(60), async {
            while let Some(line) = lines.next_line().await.expect("read stdout") {
                if line.contains("ready") {
                    return line;
                }
            }
            panic!("skiff store serve exited before it was ready");
        })
        .await
        .expect("skiff store serve did not become ready");
        let endpoint = ready
            .split_whitespace()
            .find(|w| w.starts_with("127.0.0.1:"))
            .expect("ready line names the address")
            .trim_end_matches(|c: char| !c.is_ascii_digit())
            .to_string();
        // keep draining stdout so the child never blocks on a full pipe
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Server { child, endpoint }
    }

    async fn kill_9(mut self) {
        self.child.start_kill().expect("SIGKILL");
        self.child.wait().await.expect("reap");
    }
}

/// `skiff store check` on the stopped store in `dir`: it must exit 0 with no inconsistency.
async fn check(dir: &std::path::Path, cycle: usize) {
    let out = Command::new(env!("CARGO_BIN_EXE_skiff"))
        .args(["store", "check", "--data-dir"])
        .arg(dir)
        .output()
        .await
        .expect("run skiff store check");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.ends_with("0 inconsistencies\n"),
        "cycle {cycle}: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn key(writer: usize, half: &str) -> String {
    format!("/crash/{writer}/{half}")
}

async fn read(client: &mut Client, key: &str) -> Option<u64> {
    let resp = client.get(key, None).await.expect("get");
    resp.kvs()
        .first()
        .map(|kv| kv.value_str().unwrap().parse().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_writes_survive_twenty_kill_9_restarts() {
    let dir = tempfile::tempdir().unwrap();
    // per writer: the last sequence number whose transaction was acknowledged
    let acked: Arc<Vec<Mutex<u64>>> = Arc::new((0..WRITERS).map(|_| Mutex::new(0)).collect());
    let mut max_acked_revision = 0i64;
    let mut total_acked = 0u64;

    for cycle in 0..CYCLES {
        let server = Server::start(dir.path()).await;
        let mut client = Client::connect([server.endpoint.as_str()], None)
            .await
            .expect("connect");

        // Everything acknowledged before the last kill is there, and each pair is whole.
        let status = client.status().await.expect("status");
        let revision = status.header().expect("header").revision();
        assert!(
            revision >= max_acked_revision,
            "cycle {cycle}: revision went back"
        );
        let mut next = Vec::new();
        for w in 0..WRITERS {
            let a = read(&mut client, &key(w, "a")).await.unwrap_or(0);
            let b = read(&mut client, &key(w, "b")).await.unwrap_or(0);
            assert_eq!(
                a, b,
                "cycle {cycle}: writer {w}'s transaction was half applied"
            );
            let acked = *acked[w].lock().await;
            // an unacknowledged in-flight write may or may not have landed, nothing older
            assert!(
                a == acked || a == acked + 1,
                "cycle {cycle}: writer {w} lost {acked} (has {a})"
            );
            next.push(a + 1);
        }

        // Concurrent writers, then kill -9 mid-stream.
        let mut tasks = Vec::new();
        for (w, first) in next.into_iter().enumerate() {
            let mut client = client.clone();
            let acked = acked.clone();
            tasks.push(tokio::spawn(async move {
                let mut max_rev = 0;
                let mut count = 0;
                for seq in first.. {
                    let v = seq.to_string();
                    let txn = Txn::new().and_then([
                        TxnOp::put(key(w, "a"), v.clone(), None),
                        TxnOp::put(key(w, "b"), v, None),
                    ]);
                    match client.txn(txn).await {
                        Ok(resp) => {
                            *acked[w].lock().await = seq;
                            max_rev = resp.header().map_or(0, |h| h.revision());
                            count += 1;
                        }
                        Err(_) => break, // the server is gone
                    }
                }
                (max_rev, count)
            }));
        }
        // vary the moment of the kill across cycles
        tokio::time::sleep(Duration::from_millis(100 + (cycle as u64 * 37) % 250)).await;
        server.kill_9().await;
        for t in tasks {
            let (rev, count) = t.await.unwrap();
            max_acked_revision = max_acked_revision.max(rev);
            total_acked += count;
        }
        check(dir.path(), cycle).await;
    }
    assert!(
        total_acked > (CYCLES * WRITERS) as u64,
        "writes were acknowledged: {total_acked}"
    );

    // A final clean start sees the last state too.
    let server = Server::start(dir.path()).await;
    let mut client = Client::connect([server.endpoint.as_str()], None)
        .await
        .unwrap();
    for w in 0..WRITERS {
        let a = read(&mut client, &key(w, "a")).await.unwrap_or(0);
        assert!(a >= *acked[w].lock().await);
    }
    server.kill_9().await;
}
