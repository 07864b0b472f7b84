//! A `skiff agent` child joining a node from a network namespace of its own on a test lan
//! ([`super::netns`]), for the join tests (`tests/agent.rs`) and the server's (`tests/server.rs`).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;

use super::netns::NodeNet;
use super::{HANG_GUARD, line_reader};

/// A `skiff agent` child in a node's namespace. Dropping it stops it with SIGTERM (which stops
/// its containerd), kills whatever containers a failed test left, and removes its data dir.
pub struct Agent {
    child: Child,
    /// Its stdout after the ready line (kept so that its writes do not fail).
    lines: mpsc::Receiver<String>,
    /// The node namespace, server and token it was started with.
    command: (NodeNet, String, String, String),
    dir: PathBuf,
    log: PathBuf,
}

impl Agent {
    /// The command line that starts it (for tests that expect it to fail).
    pub fn command(net: &NodeNet, server: &str, token: &str, node: &str, dir: &Path) -> Command {
        let mut cmd = Command::new("nsenter");
        cmd.arg(format!("--net=/var/run/netns/{}", net.namespace))
            .arg(env!("CARGO_BIN_EXE_skiff"))
            .args(["agent", "--server", server, "--token", token])
            .args(["--node-name", node, "--node-ip", &net.ip.to_string()])
            .args(["--kubelet-arg", &super::node::eviction_hard_arg()])
            .arg("--data-dir")
            .arg(dir);
        cmd
    }

    /// Starts the agent as node `node`; its stdout lines up to (and with) its `skiff agent
    /// ready` line.
    pub fn start(
        net: &NodeNet,
        server: &str,
        token: &str,
        node: &str,
        dir: &Path,
    ) -> (Agent, Vec<String>) {
        let log = dir.with_extension("log");
        let cmd = Agent::command(net, server, token, node, dir);
        let (child, lines, seen) = Agent::spawn(cmd, &log);
        let agent = Agent {
            child,
            lines,
            command: (net.clone(), server.into(), token.into(), node.into()),
            dir: dir.to_path_buf(),
            log,
        };
        (agent, seen)
    }

    fn spawn(mut cmd: Command, log: &Path) -> (Child, mpsc::Receiver<String>, Vec<String>) {
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
            .expect("start skiff agent");
        let lines = line_reader(child.stdout.take().expect("stdout"));
        let deadline = std::time::Instant::now() + HANG_GUARD;
        let mut seen = Vec::new();
        while !seen
            .last()
            .is_some_and(|l: &String| l.starts_with("skiff agent ready"))
        {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match lines.recv_timeout(left) {
                Ok(line) => seen.push(line),
                Err(_) => {
                    let _ = child.kill();
                    panic!(
                        "no ready line from skiff agent; its output: {seen:?}\nits log:\n{}",
                        super::read(log)
                    );
                }
            }
        }
        (child, lines, seen)
    }

    /// Stops it (SIGTERM: it stops its containerd, the containers keep running) and starts it
    /// again on the same data dir; the new process's lines up to its ready line.
    pub fn restart(&mut self) -> Vec<String> {
        self.stop();
        let (net, server, token, node) = &self.command;
        let cmd = Agent::command(net, server, token, node, &self.dir);
        let (child, lines, seen) = Agent::spawn(cmd, &self.log);
        self.child = child;
        self.lines = lines;
        seen
    }

    /// SIGTERM, and wait for it to exit.
    pub fn stop(&mut self) {
        if matches!(self.child.try_wait(), Ok(Some(_))) {
            return;
        }
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status();
        let _ = self.child.wait();
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("--- agent log ---\n{}", super::read(&self.log));
        }
        self.stop();
        super::node::clean_up(&self.dir);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
