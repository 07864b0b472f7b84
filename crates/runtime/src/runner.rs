//! Host commands of the node agents (`iptables-restore`, `iptables`, `nft`, `conntrack`, `ip`)
//! behind the [`Runner`] trait: [`HostRunner`] runs them, optionally inside a network namespace
//! through `ip netns exec`; [`FakeRunner`] records them and can be told to fail. [`OwnedNetns`]
//! is a network namespace of this process's own, for applying real rules off the host's tables.
//! Shared by the proxy and the network policy controller, so that both program the host the
//! same way and are tested against the same fake.

use std::io::Write;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use parking_lot::Mutex;

/// What a host command did wrong.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The command could not be started or fed (missing binary, broken pipe).
    #[error("running {command}: {source}")]
    Spawn {
        command: String,
        source: std::io::Error,
    },
    /// The command exited non-zero; nothing of a restore or `nft -f` transaction applied.
    #[error("{command} exited with {status}: {stderr}")]
    Command {
        command: String,
        status: i32,
        stderr: String,
    },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

pub trait Runner: Send + Sync {
    /// Runs `program args…` with `stdin` and returns its standard output; a non-zero exit is
    /// [`Error::Command`].
    fn run(&self, program: &str, args: &[&str], stdin: Option<&str>) -> Result<String>;
}

/// Runs commands on this host, or in the network namespace `netns` (`ip netns exec NAME …`).
#[derive(Debug, Clone, Default)]
pub struct HostRunner {
    netns: Option<String>,
}

impl HostRunner {
    pub fn new(netns: Option<String>) -> Self {
        HostRunner { netns }
    }
}

/// A network namespace this process created, deleted on drop (also when a test panics): where
/// `skiff bench proxy` and the dataplane tests apply real rules without touching the host's.
#[derive(Debug)]
pub struct OwnedNetns(String);

impl OwnedNetns {
    /// Creates `<prefix>-<pid>-<n>` with `ip netns add` (needs root and iproute2).
    pub fn create(prefix: &str) -> Result<OwnedNetns> {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let name = format!(
            "{prefix}-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        HostRunner::default().run("ip", &["netns", "add", &name], None)?;
        Ok(OwnedNetns(name))
    }

    pub fn name(&self) -> &str {
        &self.0
    }

    /// A runner whose commands run inside the namespace.
    pub fn runner(&self) -> HostRunner {
        HostRunner::new(Some(self.0.clone()))
    }
}

impl Drop for OwnedNetns {
    fn drop(&mut self) {
        let _ = HostRunner::default().run("ip", &["netns", "delete", &self.0], None);
    }
}

impl Runner for HostRunner {
    fn run(&self, program: &str, args: &[&str], stdin: Option<&str>) -> Result<String> {
        let mut command = match &self.netns {
            Some(netns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", netns, program]);
                c
            }
            None => Command::new(program),
        };
        command
            .args(args)
            .stdin(if stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let describe = || format!("{program} {}", args.join(" "));
        let mut child = command.spawn().map_err(|e| Error::Spawn {
            command: describe(),
            source: e,
        })?;
        if let (Some(input), Some(mut pipe)) = (stdin, child.stdin.take()) {
            pipe.write_all(input.as_bytes()).map_err(|e| Error::Spawn {
                command: describe(),
                source: e,
            })?;
        }
        let output = child.wait_with_output().map_err(|e| Error::Spawn {
            command: describe(),
            source: e,
        })?;
        if !output.status.success() {
            return Err(Error::Command {
                command: describe(),
                status: output.status.code().unwrap_or(-1),
                stderr: String::from_utf8_lossy(&output.stderr).trim().to_string(),
            });
        }
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    }
}

/// One command a [`FakeRunner`] saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Call {
    pub program: String,
    pub args: Vec<String>,
    pub stdin: Option<String>,
}

#[derive(Debug, Default)]
struct FakeState {
    calls: Vec<Call>,
    /// Programs whose next runs fail, once per entry.
    failures: Vec<String>,
    /// Standard output per program (e.g. what `iptables-save` prints).
    outputs: Vec<(String, String)>,
}

/// Records every command; succeeds unless told to fail.
#[derive(Debug, Clone, Default)]
pub struct FakeRunner {
    state: Arc<Mutex<FakeState>>,
}

impl FakeRunner {
    pub fn calls(&self) -> Vec<Call> {
        self.state.lock().calls.clone()
    }

    pub fn clear(&self) {
        self.state.lock().calls.clear();
    }

    /// The next run of `program` fails.
    pub fn fail_next(&self, program: &str) {
        self.state.lock().failures.push(program.to_string());
    }

    /// Runs of `program` print `stdout`.
    pub fn set_output(&self, program: &str, stdout: &str) {
        self.state
            .lock()
            .outputs
            .push((program.to_string(), stdout.to_string()));
    }
}

impl Runner for FakeRunner {
    fn run(&self, program: &str, args: &[&str], stdin: Option<&str>) -> Result<String> {
        let mut state = self.state.lock();
        state.calls.push(Call {
            program: program.to_string(),
            args: args.iter().map(|a| a.to_string()).collect(),
            stdin: stdin.map(str::to_string),
        });
        if let Some(i) = state.failures.iter().position(|p| p == program) {
            state.failures.remove(i);
            return Err(Error::Command {
                command: format!("{program} {}", args.join(" ")),
                status: 2,
                stderr: "fake failure".into(),
            });
        }
        Ok(state
            .outputs
            .iter()
            .rev()
            .find(|(p, _)| p == program)
            .map(|(_, out)| out.clone())
            .unwrap_or_default())
    }
}
