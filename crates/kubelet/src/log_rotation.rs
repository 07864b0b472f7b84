//! Container log rotation, as upstream's container log manager (`pkg/kubelet/logs`): every
//! [`CONTAINER_LOG_MONITOR_INTERVAL`] the log of each running container that has reached
//! `containerLogMaxSize` is renamed to `<log>.<YYYYMMDD-hhmmss>` and the runtime is asked to
//! reopen the log path (CRI `ReopenContainerLog`); rotated files but the newest are compressed
//! (`.gz`), and at most `containerLogMaxFiles` files are kept per container, the live one
//! included. [`all_logs`] lists a container's files in order for the log reader, and
//! [`remove_logs`] removes them with the container.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;

use crate::cri::{self, ContainerRuntime, ContainerState};
use crate::kubelet_config::KubeletConfiguration;

/// How often the logs are checked (upstream's `containerLogMonitorInterval` default).
pub const CONTAINER_LOG_MONITOR_INTERVAL: Duration = Duration::from_secs(10);
/// A compressed rotated log's suffix.
const COMPRESS_SUFFIX: &str = ".gz";
/// A file being compressed.
const TMP_SUFFIX: &str = ".tmp";

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("container {id}: {step}: {source}")]
    Runtime {
        id: String,
        step: &'static str,
        #[source]
        source: cri::Error,
    },
    #[error("{step} {path}: {source}")]
    Io {
        step: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

fn io(step: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> Error {
    let path = path.to_path_buf();
    move |source| Error::Io { step, path, source }
}

/// When logs are rotated (upstream's `LogRotatePolicy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogRotatePolicy {
    /// A live log this big or bigger is rotated.
    pub max_size: u64,
    /// Files kept per container, the live one included (at least 2).
    pub max_files: usize,
}

impl LogRotatePolicy {
    /// From `containerLogMaxSize` and `containerLogMaxFiles` (checked when the configuration
    /// was read).
    pub fn from_config(c: &KubeletConfiguration) -> LogRotatePolicy {
        LogRotatePolicy {
            max_size: c.container_log_max_size_bytes().unwrap_or(u64::MAX),
            max_files: c.container_log_max_files.max(2) as usize,
        }
    }
}

/// Rotates the logs of one node's running containers.
pub struct LogRotation {
    runtime: Arc<dyn ContainerRuntime>,
    policy: LogRotatePolicy,
    clock: Arc<dyn Fn() -> Timestamp + Send + Sync>,
}

impl LogRotation {
    pub fn new(
        runtime: Arc<dyn ContainerRuntime>,
        policy: LogRotatePolicy,
        clock: Arc<dyn Fn() -> Timestamp + Send + Sync>,
    ) -> LogRotation {
        LogRotation {
            runtime,
            policy,
            clock,
        }
    }

    /// Checks the logs every `interval` until the task is dropped.
    pub async fn run(self, interval: Duration) {
        tracing::info!(?interval, policy = ?self.policy, "rotating container logs");
        let mut tick = tokio::time::interval(interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            self.rotate_logs().await;
        }
    }

    /// One pass over the running containers; failures are logged, one container's never
    /// stops the others'.
    pub async fn rotate_logs(&self) {
        let containers = match self.runtime.list_containers(Default::default()).await {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(error = %e, "listing containers to rotate their logs");
                return;
            }
        };
        for c in containers {
            // a container that does not run writes nothing more
            if c.state != ContainerState::ContainerRunning as i32 {
                continue;
            }
            if let Err(e) = self.check(&c.id).await {
                tracing::warn!(container = %c.id, error = %e, "rotating a container's log");
            }
        }
    }

    /// Rotates the container's log if it is big enough; a log missing is reopened.
    async fn check(&self, id: &str) -> Result<()> {
        let runtime_err = |step| {
            let id = id.to_string();
            move |source| Error::Runtime { id, step, source }
        };
        let status = self
            .runtime
            .container_status(id)
            .await
            .map_err(runtime_err("reading its status"))?;
        let path = PathBuf::from(status.log_path);
        let size = match std::fs::metadata(&path) {
            Ok(m) => m.len(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                self.runtime
                    .reopen_container_log(id)
                    .await
                    .map_err(runtime_err("reopening its missing log"))?;
                std::fs::metadata(&path)
                    .map_err(io("reading after reopening", &path))?
                    .len()
            }
            Err(e) => return Err(io("reading", &path)(e)),
        };
        if size < self.policy.max_size {
            return Ok(());
        }
        self.rotate(id, &path).await
    }

    /// Removes what an interrupted rotation left and the oldest rotated files beyond the
    /// limit, compresses the rotated files, then renames the live log and has the runtime
    /// reopen it (renamed back if it cannot).
    async fn rotate(&self, id: &str, log: &Path) -> Result<()> {
        let (in_use, unused) = split_rotated(log)?;
        for file in unused {
            std::fs::remove_file(&file).map_err(io("removing unused log", &file))?;
        }
        // the runtime's new file and the one rotated now count too
        let keep = self.policy.max_files.saturating_sub(2);
        let excess = in_use.len().saturating_sub(keep);
        for file in &in_use[..excess] {
            std::fs::remove_file(file).map_err(io("removing old log", file))?;
        }
        for file in &in_use[excess..] {
            if !has_suffix(file, COMPRESS_SUFFIX) {
                let file = file.clone();
                tokio::task::spawn_blocking(move || compress(&file))
                    .await
                    .expect("compressing a log does not panic")?;
            }
        }
        let stamp = (self.clock)().strftime("%Y%m%d-%H%M%S");
        let rotated = with_suffix(log, &format!(".{stamp}"));
        std::fs::rename(log, &rotated).map_err(io("rotating", log))?;
        if let Err(source) = self.runtime.reopen_container_log(id).await {
            // rotated again next time; a failure here loses nothing
            if let Err(e) = std::fs::rename(&rotated, log) {
                tracing::error!(path = %rotated.display(), error = %e, "renaming a rotated log back");
            }
            return Err(Error::Runtime {
                id: id.into(),
                step: "reopening its log",
                source,
            });
        }
        tracing::debug!(container = id, log = %log.display(), "rotated");
        Ok(())
    }
}

fn has_suffix(path: &Path, suffix: &str) -> bool {
    path.as_os_str().to_string_lossy().ends_with(suffix)
}

fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(suffix);
    PathBuf::from(s)
}

/// The files `<log>.*` beside a log, sorted by name (oldest rotation first: the suffix is a
/// timestamp).
fn rotated_files(log: &Path) -> Result<Vec<PathBuf>> {
    let (Some(dir), Some(name)) = (log.parent(), log.file_name()) else {
        return Ok(Vec::new());
    };
    let prefix = format!("{}.", name.to_string_lossy());
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io("listing", dir)(e)),
    };
    let mut files: Vec<PathBuf> = entries
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
        .map(|e| e.path())
        .collect();
    files.sort();
    Ok(files)
}

/// A log's rotated files, split into those in use (oldest first) and what an interrupted
/// compression left (temporary files, and originals whose compressed copy exists).
fn split_rotated(log: &Path) -> Result<(Vec<PathBuf>, Vec<PathBuf>)> {
    let files = rotated_files(log)?;
    let (in_use, unused) = files.iter().cloned().partition(|f| {
        !has_suffix(f, TMP_SUFFIX)
            && (has_suffix(f, COMPRESS_SUFFIX) || !files.contains(&with_suffix(f, COMPRESS_SUFFIX)))
    });
    Ok((in_use, unused))
}

/// Every file of a container's log, oldest first: its rotated files (compressed or not) and
/// then the live one (upstream's `GetAllLogs`).
pub fn all_logs(log: &Path) -> Result<Vec<PathBuf>> {
    let (mut files, _) = split_rotated(log)?;
    files.push(log.to_path_buf());
    Ok(files)
}

/// Removes a container's log with its rotated files (what the container garbage collection
/// removes with the container).
pub fn remove_logs(log: &Path) -> Result<()> {
    for file in rotated_files(log)?.iter().chain([&log.to_path_buf()]) {
        match std::fs::remove_file(file) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(io("removing", file)(e));
            }
            _ => {}
        }
    }
    Ok(())
}

/// The contents of a log file, decompressed if it is a rotated `.gz`.
pub fn read_log_file(path: &Path) -> std::io::Result<Vec<u8>> {
    let data = std::fs::read(path)?;
    if !has_suffix(path, COMPRESS_SUFFIX) {
        return Ok(data);
    }
    let mut out = Vec::new();
    std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&data[..]), &mut out)?;
    Ok(out)
}

/// Compresses `log` to `log.gz` through `log.gz.tmp`, then removes `log`.
fn compress(log: &Path) -> Result<()> {
    let data = std::fs::read(log).map_err(io("reading", log))?;
    let compressed = with_suffix(log, COMPRESS_SUFFIX);
    let tmp = with_suffix(&compressed, TMP_SUFFIX);
    let write = || -> std::io::Result<()> {
        let file = std::fs::File::create(&tmp)?;
        let mut gz = flate2::write::GzEncoder::new(file, flate2::Compression::default());
        gz.write_all(&data)?;
        gz.finish()?.sync_all()?;
        std::fs::rename(&tmp, &compressed)
    };
    if let Err(e) = write() {
        let _ = std::fs::remove_file(&tmp);
        return Err(io("compressing", log)(e));
    }
    std::fs::remove_file(log).map_err(io("removing after compressing", log))
}

#[cfg(test)]
#[path = "log_rotation_tests.rs"]
mod tests;
