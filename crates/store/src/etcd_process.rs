//! Starts a real `etcd` (v3.4+) on free loopback ports in a fresh temp dir, for tests and
//! benchmarks; killing and reaping it and removing the dir when dropped.
//!
//! etcd runs with its defaults (fsync on, 1.5 MiB request limit, no auto-compaction) so that
//! measurements against it are fair; only its logging is quietened, into `etcd.log` in the dir.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::net::{Ipv4Addr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use etcd_client::{Client, ConnectOptions};

/// How an [`EtcdProcess`] is started.
#[derive(Debug, Clone)]
pub struct EtcdProcessConfig {
    /// The etcd binary. Default `etcd` from `PATH` (Debian's `etcd-server` puts it in `/usr/bin`).
    pub binary: PathBuf,
    /// How long to wait for etcd to answer a read before giving up. Default 30 s.
    pub startup_timeout: Duration,
    /// Extra flags appended to the command line (e.g. `--quota-backend-bytes=…`).
    pub extra_args: Vec<String>,
}

impl Default for EtcdProcessConfig {
    fn default() -> Self {
        EtcdProcessConfig {
            binary: PathBuf::from("etcd"),
            startup_timeout: Duration::from_secs(30),
            extra_args: Vec::new(),
        }
    }
}

/// Why an [`EtcdProcess`] could not be started.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The temp dir for etcd's data and log could not be created.
    #[error("creating a temp dir for etcd failed: {0}")]
    TempDir(std::io::Error),

    /// No free loopback port could be bound.
    #[error("finding a free loopback port for etcd failed: {0}")]
    FreePort(std::io::Error),

    /// The etcd binary could not be started (not installed, not executable).
    #[error("starting {binary} failed: {source}")]
    Spawn {
        binary: String,
        source: std::io::Error,
    },

    /// etcd exited before it answered; its log says why.
    #[error("etcd for {endpoint} exited before answering ({status}); end of {log}:\n{log_tail}")]
    Exited {
        endpoint: String,
        status: String,
        log: String,
        log_tail: String,
    },

    /// etcd kept running but never answered a read within the startup timeout.
    #[error(
        "etcd at {endpoint} did not answer within {waited:?} (last error: {last_error}); \
         end of {log}:\n{log_tail}"
    )]
    NotReady {
        endpoint: String,
        waited: Duration,
        last_error: String,
        log: String,
        log_tail: String,
    },
}

/// Result of starting an [`EtcdProcess`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A running single-member etcd, serving plain gRPC on `127.0.0.1`. Dropping it kills the process
/// (SIGKILL), waits for it, and removes its temp dir.
pub struct EtcdProcess {
    child: Child,
    client_port: u16,
    log: PathBuf,
    // Dropped after `Drop::drop` has killed the child, so etcd never sees its dir vanish.
    dir: tempfile::TempDir,
}

impl std::fmt::Debug for EtcdProcess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdProcess")
            .field("pid", &self.child.id())
            .field("endpoint", &self.endpoint())
            .field("dir", &self.dir.path())
            .finish()
    }
}

/// Attempts at picking ports: a port found free can be taken by someone else before etcd binds it.
const PORT_ATTEMPTS: usize = 5;

/// Pause between two readiness probes.
const PROBE_INTERVAL: Duration = Duration::from_millis(50);

impl EtcdProcess {
    /// Start `etcd` with the default [`EtcdProcessConfig`] and wait until it answers.
    pub async fn start() -> Result<EtcdProcess> {
        Self::start_with(EtcdProcessConfig::default()).await
    }

    /// Start etcd as configured and wait until it answers a linearizable read (so it has a
    /// leader and accepts writes). Retries with new ports if the chosen ones were taken meanwhile.
    pub async fn start_with(config: EtcdProcessConfig) -> Result<EtcdProcess> {
        let mut attempt = 1;
        loop {
            match Self::start_once(&config).await {
                Err(Error::Exited { log_tail, .. })
                    if attempt < PORT_ATTEMPTS && log_tail.contains("address already in use") =>
                {
                    attempt += 1;
                }
                other => return other,
            }
        }
    }

    async fn start_once(config: &EtcdProcessConfig) -> Result<EtcdProcess> {
        let dir = tempfile::Builder::new()
            .prefix("skiff-etcd-")
            .tempdir()
            .map_err(Error::TempDir)?;
        let (client_port, peer_port) = free_port_pair().map_err(Error::FreePort)?;
        let log = dir.path().join("etcd.log");
        let log_file = File::create(&log).map_err(Error::TempDir)?;
        let client_url = format!("http://127.0.0.1:{client_port}");
        let peer_url = format!("http://127.0.0.1:{peer_port}");
        let child = Command::new(&config.binary)
            .arg("--name=skiff-etcd")
            .arg(format!("--data-dir={}", dir.path().join("data").display()))
            .arg(format!("--listen-client-urls={client_url}"))
            .arg(format!("--advertise-client-urls={client_url}"))
            .arg(format!("--listen-peer-urls={peer_url}"))
            .arg(format!("--initial-advertise-peer-urls={peer_url}"))
            .arg(format!("--initial-cluster=skiff-etcd={peer_url}"))
            .arg("--initial-cluster-state=new")
            // zap to stderr (the log file) at error level: quiet, but startup failures show.
            .args(["--logger=zap", "--log-outputs=stderr", "--log-level=error"])
            .args(&config.extra_args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log_file)
            .spawn()
            .map_err(|source| Error::Spawn {
                binary: config.binary.display().to_string(),
                source,
            })?;
        let mut process = EtcdProcess {
            child,
            client_port,
            log,
            dir,
        };
        process.wait_ready(config.startup_timeout).await?;
        Ok(process)
    }

    /// Probe with a read until etcd answers, it exits, or `timeout` passes.
    async fn wait_ready(&mut self, timeout: Duration) -> Result<()> {
        let endpoint = self.endpoint();
        let started = Instant::now();
        let options = ConnectOptions::new()
            .with_connect_timeout(Duration::from_secs(1))
            .with_timeout(Duration::from_secs(2));
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(self.exited(status));
            }
            let last_error = match Client::connect([endpoint.as_str()], Some(options.clone())).await
            {
                Ok(mut client) => match client.get("skiff-etcd-ready-probe", None).await {
                    Ok(_) => return Ok(()),
                    Err(e) => e.to_string(),
                },
                Err(e) => e.to_string(),
            };
            if started.elapsed() >= timeout {
                return Err(Error::NotReady {
                    endpoint,
                    waited: started.elapsed(),
                    last_error,
                    log: self.log.display().to_string(),
                    log_tail: self.log_tail(),
                });
            }
            tokio::time::sleep(PROBE_INTERVAL).await;
        }
    }

    fn exited(&self, status: ExitStatus) -> Error {
        Error::Exited {
            endpoint: self.endpoint(),
            status: status.to_string(),
            log: self.log.display().to_string(),
            log_tail: self.log_tail(),
        }
    }

    /// The client endpoint, `127.0.0.1:PORT`, as `etcd-client` and `etcdctl --endpoints` take it.
    pub fn endpoint(&self) -> String {
        format!("127.0.0.1:{}", self.client_port)
    }

    /// The temp dir holding etcd's data (`data/`) and log (`etcd.log`).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The process id of etcd.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The last few KiB of etcd's log, for error messages.
    pub fn log_tail(&self) -> String {
        const TAIL: u64 = 4096;
        let mut text = String::new();
        if let Ok(mut file) = File::open(&self.log) {
            let len = file.metadata().map(|m| m.len()).unwrap_or(0);
            let _ = file.seek(SeekFrom::Start(len.saturating_sub(TAIL)));
            let mut buf = Vec::new();
            let _ = file.read_to_end(&mut buf);
            text = String::from_utf8_lossy(&buf).into_owned();
        }
        text
    }
}

impl Drop for EtcdProcess {
    fn drop(&mut self) {
        // Kill fails only if the child has already exited; wait reaps it either way.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Two distinct ports that were free on 127.0.0.1 a moment ago (both held while choosing, so the
/// kernel cannot hand out the same one twice).
fn free_port_pair() -> std::io::Result<(u16, u16)> {
    let a = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
    let b = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
    Ok((a.local_addr()?.port(), b.local_addr()?.port()))
}
