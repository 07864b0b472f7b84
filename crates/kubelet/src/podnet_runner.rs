//! The host commands the pod network ([`crate::podnet`]) runs (`ip`, `bridge`, `iptables`,
//! `iptables-restore`) behind [`Runner`]: [`HostRunner`] runs them, [`RecordingRunner`] records
//! them, answers with canned output and can be told to fail.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Stdio;

use async_trait::async_trait;
use parking_lot::Mutex;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("running {command}: {source}")]
    Spawn {
        command: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{command} failed: {stderr}")]
    Failed { command: String, stderr: String },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// One command: a program, its arguments and what to write to its stdin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cmd {
    pub program: &'static str,
    pub args: Vec<String>,
    pub stdin: Option<String>,
}

impl Cmd {
    pub fn new(program: &'static str, args: &[&str]) -> Cmd {
        Cmd {
            program,
            args: args.iter().map(|a| a.to_string()).collect(),
            stdin: None,
        }
    }

    pub fn stdin(mut self, input: String) -> Cmd {
        self.stdin = Some(input);
        self
    }

    /// Runs the command on this host (in this process's network namespace) and returns its
    /// stdout; a non-zero exit is an error with its stderr. Blocks until it exits.
    pub fn run_on_host(&self) -> Result<String> {
        use std::io::Write;
        let spawn_err = |source| Error::Spawn {
            command: self.line(),
            source,
        };
        let mut child = std::process::Command::new(self.program)
            .args(&self.args)
            .stdin(if self.stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(spawn_err)?;
        if let (Some(input), Some(mut stdin)) = (&self.stdin, child.stdin.take()) {
            stdin.write_all(input.as_bytes()).map_err(spawn_err)?;
        }
        let out = child.wait_with_output().map_err(spawn_err)?;
        if !out.status.success() {
            return Err(Error::Failed {
                command: self.line(),
                stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
            });
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// The command line, as logs and the recording fake show it.
    pub fn line(&self) -> String {
        std::iter::once(self.program)
            .chain(self.args.iter().map(String::as_str))
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// Runs host commands; returns their stdout.
#[async_trait]
pub trait Runner: Send + Sync {
    async fn run(&self, cmd: &Cmd) -> Result<String>;
}

/// Runs the commands on this host (in the kubelet's network namespace).
#[derive(Debug, Default)]
pub struct HostRunner;

#[async_trait]
impl Runner for HostRunner {
    async fn run(&self, cmd: &Cmd) -> Result<String> {
        let owned = cmd.clone();
        tokio::task::spawn_blocking(move || owned.run_on_host())
            .await
            .unwrap_or_else(|e| {
                Err(Error::Spawn {
                    command: cmd.line(),
                    source: std::io::Error::other(e),
                })
            })
    }
}

/// A fake host: records every command, answers from `outputs` (by command line, empty
/// otherwise) and fails the command lines in `failing` (as a non-zero exit).
#[derive(Debug, Default)]
pub struct RecordingRunner {
    pub commands: Mutex<Vec<Cmd>>,
    pub outputs: Mutex<BTreeMap<String, String>>,
    pub failing: Mutex<BTreeSet<String>>,
}

impl RecordingRunner {
    /// Answers `line` with `output` from now on.
    pub fn answer(&self, line: &str, output: &str) {
        self.outputs.lock().insert(line.into(), output.into());
    }

    /// The command lines run so far, and forgets them.
    pub fn take_lines(&self) -> Vec<String> {
        self.commands.lock().drain(..).map(|c| c.line()).collect()
    }
}

#[async_trait]
impl Runner for RecordingRunner {
    async fn run(&self, cmd: &Cmd) -> Result<String> {
        self.commands.lock().push(cmd.clone());
        let line = cmd.line();
        if self.failing.lock().contains(&line) {
            return Err(Error::Failed {
                command: line,
                stderr: "told to fail".into(),
            });
        }
        Ok(self.outputs.lock().get(&line).cloned().unwrap_or_default())
    }
}
