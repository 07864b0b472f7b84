//! The log backend (`--audit-log-path`, `-` for stdout): events are JSON lines, handed to one
//! writer task through a bounded queue so that no request ever waits on the disk (upstream's
//! `--audit-log-mode=batch`: when the queue is full, events are dropped and counted, never
//! blocking). The file rotates by size as upstream's (lumberjack): past `--audit-log-maxsize`
//! megabytes it is renamed `<name>-<UTC time>.<ext>` (`audit-2026-11-30T17-59-01.123.log`) and
//! a new one started; `--audit-log-maxbackup` and `--audit-log-maxage` (days) prune the
//! backups, oldest first.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::sync::mpsc;

/// Upstream's `--audit-log-batch-buffer-size` default: events that may wait for the writer.
pub const QUEUE: usize = 10_000;

/// Lumberjack's size when `--audit-log-maxsize` is 0 (upstream's default).
const DEFAULT_MAX_MEGABYTES: u64 = 100;

/// Where the log goes and how it rotates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    /// `-` is stdout.
    pub path: PathBuf,
    /// Megabytes before rotation; 0 is upstream's default of 100.
    pub max_size_mb: u64,
    /// Backups kept; 0 keeps all.
    pub max_backups: usize,
    /// Days a backup is kept; 0 keeps them regardless of age.
    pub max_age_days: u64,
}

/// The sending side: cheap to clone, never blocks.
#[derive(Debug, Clone)]
pub struct Sink {
    pub(super) tx: mpsc::Sender<Vec<u8>>,
    pub(super) dropped: Arc<AtomicU64>,
}

impl Sink {
    /// Queues one line (without its newline); drops it when the writer is behind by
    /// [`QUEUE`] events.
    pub fn send(&self, line: Vec<u8>) {
        if self.tx.try_send(line).is_err() {
            let n = self.dropped.fetch_add(1, Ordering::Relaxed) + 1;
            if n.is_power_of_two() {
                tracing::warn!(dropped = n, "audit queue full: events dropped");
            }
        }
    }

    /// Events dropped because the queue was full.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}

/// Opens the log and starts its writer task.
pub fn start(options: Options) -> std::io::Result<Sink> {
    let mut out: Box<dyn Write + Send> = if options.path.as_os_str() == "-" {
        Box::new(std::io::stdout())
    } else {
        Box::new(Rotating::open(&options, jiff::Timestamp::now)?)
    };
    let (tx, mut rx) = mpsc::channel::<Vec<u8>>(QUEUE);
    // a blocking thread: file writes block, and this one does nothing else
    tokio::task::spawn_blocking(move || {
        while let Some(mut line) = rx.blocking_recv() {
            line.push(b'\n');
            if let Err(e) = out.write_all(&line) {
                tracing::warn!(error = %e, "writing the audit log");
            }
            if rx.is_empty() {
                let _ = out.flush();
            }
        }
        let _ = out.flush();
    });
    Ok(Sink {
        tx,
        dropped: Arc::default(),
    })
}

/// A file that rotates by size, as lumberjack.
pub struct Rotating {
    path: PathBuf,
    max_bytes: u64,
    max_backups: usize,
    max_age_days: u64,
    file: File,
    size: u64,
    clock: fn() -> jiff::Timestamp,
}

fn open_append(path: &Path) -> std::io::Result<File> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)
}

impl Rotating {
    pub fn open(options: &Options, clock: fn() -> jiff::Timestamp) -> std::io::Result<Self> {
        let mb = if options.max_size_mb == 0 {
            DEFAULT_MAX_MEGABYTES
        } else {
            options.max_size_mb
        };
        Self::with_max_bytes(options, mb * 1024 * 1024, clock)
    }

    /// As [`Rotating::open`] with the size limit in bytes (tests rotate small files).
    pub fn with_max_bytes(
        options: &Options,
        max_bytes: u64,
        clock: fn() -> jiff::Timestamp,
    ) -> std::io::Result<Self> {
        let file = open_append(&options.path)?;
        let size = file.metadata()?.len();
        Ok(Self {
            path: options.path.clone(),
            max_bytes,
            max_backups: options.max_backups,
            max_age_days: options.max_age_days,
            file,
            size,
            clock,
        })
    }

    /// `(stem-, .ext)` of backup names: `audit.log` → (`audit-`, `.log`).
    fn name_parts(&self) -> (String, String) {
        let name = self
            .path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        match name.rfind('.') {
            Some(i) if i > 0 => (format!("{}-", &name[..i]), name[i..].to_string()),
            _ => (format!("{name}-"), String::new()),
        }
    }

    fn stamp(t: jiff::Timestamp) -> String {
        format!(
            "{}.{:03}",
            t.strftime("%Y-%m-%dT%H-%M-%S"),
            t.subsec_millisecond()
        )
    }

    fn dir(&self) -> PathBuf {
        match self.path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
            _ => PathBuf::from("."),
        }
    }

    fn rotate(&mut self) -> std::io::Result<()> {
        self.file.flush()?;
        let (stem, ext) = self.name_parts();
        let now = (self.clock)();
        let mut backup = self.dir().join(format!("{stem}{}{ext}", Self::stamp(now)));
        // two rotations in one millisecond: never overwrite a backup
        let mut n = 1;
        while backup.exists() {
            backup = self
                .dir()
                .join(format!("{stem}{}-{n}{ext}", Self::stamp(now)));
            n += 1;
        }
        std::fs::rename(&self.path, &backup)?;
        self.file = open_append(&self.path)?;
        self.size = 0;
        self.prune(now);
        Ok(())
    }

    /// Removes backups beyond the count and age limits.
    fn prune(&self, now: jiff::Timestamp) {
        let (stem, ext) = self.name_parts();
        let Ok(entries) = std::fs::read_dir(self.dir()) else {
            return;
        };
        let mut backups: Vec<(String, PathBuf)> = entries
            .flatten()
            .filter_map(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                let stamp = name.strip_prefix(&stem)?.strip_suffix(&ext)?.to_string();
                // `2026-11-30T17-59-01.123`: starts with a digit, so `audit-foo.log` is not one
                stamp
                    .starts_with(|c: char| c.is_ascii_digit())
                    .then(|| (stamp, e.path()))
            })
            .collect();
        backups.sort_by(|a, b| b.0.cmp(&a.0));
        let cutoff = (self.max_age_days > 0)
            .then(|| {
                now.checked_sub(jiff::SignedDuration::from_hours(
                    24 * self.max_age_days as i64,
                ))
                .ok()
            })
            .flatten()
            .map(Self::stamp);
        for (i, (stamp, path)) in backups.iter().enumerate() {
            let too_many = self.max_backups > 0 && i >= self.max_backups;
            let too_old = cutoff.as_ref().is_some_and(|c| stamp < c);
            if (too_many || too_old)
                && let Err(e) = std::fs::remove_file(path)
            {
                tracing::warn!(path = %path.display(), error = %e, "removing an old audit log");
            }
        }
    }
}

impl Write for Rotating {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.size > 0 && self.size + buf.len() as u64 > self.max_bytes {
            self.rotate()?;
        }
        let n = self.file.write(buf)?;
        self.size += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.file.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixed() -> jiff::Timestamp {
        "2026-11-30T17:59:01.123Z".parse().unwrap()
    }

    fn files(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn past_the_size_the_log_moves_to_a_timestamped_backup() {
        let dir = tempfile::tempdir().unwrap();
        let options = Options {
            path: dir.path().join("audit.log"),
            max_size_mb: 0,
            max_backups: 0,
            max_age_days: 0,
        };
        let mut log = Rotating::with_max_bytes(&options, 10, fixed).unwrap();
        log.write_all(b"12345678\n").unwrap();
        log.write_all(b"abcdefgh\n").unwrap();
        assert_eq!(
            files(dir.path()),
            ["audit-2026-11-30T17-59-01.123.log", "audit.log"]
        );
        assert_eq!(
            std::fs::read_to_string(dir.path().join("audit-2026-11-30T17-59-01.123.log")).unwrap(),
            "12345678\n"
        );
        assert_eq!(
            std::fs::read_to_string(&options.path).unwrap(),
            "abcdefgh\n"
        );
        // a line longer than the limit still goes into a file of its own
        log.write_all(b"a line longer than ten bytes\n").unwrap();
        assert_eq!(files(dir.path()).len(), 3);
    }

    #[test]
    fn backups_beyond_the_count_or_the_age_are_removed_oldest_first() {
        let dir = tempfile::tempdir().unwrap();
        for old in [
            "audit-2026-11-01T00-00-00.000.log",
            "audit-2026-11-29T00-00-00.000.log",
            "audit-notes.log",
        ] {
            std::fs::write(dir.path().join(old), "x").unwrap();
        }
        let options = Options {
            path: dir.path().join("audit.log"),
            max_size_mb: 0,
            max_backups: 2,
            max_age_days: 7,
        };
        let mut log = Rotating::with_max_bytes(&options, 4, fixed).unwrap();
        log.write_all(b"one\n").unwrap();
        log.write_all(b"two\n").unwrap();
        log.write_all(b"three\n").unwrap();
        assert_eq!(
            files(dir.path()),
            [
                "audit-2026-11-30T17-59-01.123-1.log",
                "audit-2026-11-30T17-59-01.123.log",
                "audit-notes.log",
                "audit.log",
            ]
        );
    }

    #[test]
    fn an_existing_log_is_appended_to() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.log");
        std::fs::write(&path, "before\n").unwrap();
        let options = Options {
            path: path.clone(),
            max_size_mb: 1,
            max_backups: 0,
            max_age_days: 0,
        };
        let mut log = Rotating::open(&options, fixed).unwrap();
        log.write_all(b"after\n").unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "before\nafter\n");
    }
}
