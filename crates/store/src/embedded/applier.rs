//! The applier thread: copies logged batches into the redb file, off the writers' path.
//!
//! A write is durable once the writer thread has appended it to the write-ahead log; readers
//! read the in-memory index. The file is the log's checkpoint: the applier takes every batch the
//! writer has handed over, writes them in one durable redb commit, and then deletes the log
//! segments whose batches are all in the file. It also runs the file's share of physical
//! compaction (a sweep keeping exactly the records the index still holds), one bounded chunk per
//! commit.
//!
//! If a commit fails, the store stops accepting writes (the log still holds everything that was
//! acknowledged, and is replayed on the next open).

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, TryRecvError};

use super::Shared;
use super::disk::{Batch, Disk, Sweep};
use super::wal;

/// Records examined per sweep chunk.
const SWEEP_CHUNK: usize = 1_000;
/// Most messages taken into one commit.
const MAX_MESSAGES: usize = 4096;
/// Shortest time between two commits: the file is a checkpoint, so fewer, larger commits leave
/// the disk to the log, whose fsyncs writers wait for.
const COMMIT_INTERVAL: std::time::Duration = std::time::Duration::from_millis(100);

/// What the writer hands the applier.
pub(crate) enum Message {
    /// A batch that is durable in log segment `segment`.
    Batch { batch: Batch, segment: u64 },
    /// The index no longer holds superseded history below `revision`: sweep the file.
    Sweep { below: i64 },
}

pub(crate) struct Applier {
    shared: Arc<Shared>,
    disk: Disk,
    data_dir: PathBuf,
    rx: Receiver<Message>,
    sweep: Option<Sweep>,
    /// Log segments below this one are deleted.
    removed_below: u64,
    commits: u64,
    last_commit: std::time::Instant,
}

impl Applier {
    pub fn new(shared: Arc<Shared>, disk: Disk, data_dir: PathBuf, rx: Receiver<Message>) -> Self {
        Applier {
            shared,
            disk,
            data_dir,
            rx,
            sweep: None,
            removed_below: 0,
            commits: 0,
            last_commit: std::time::Instant::now(),
        }
    }

    /// Run until the writer is gone and everything it handed over is in the file.
    pub fn run(mut self) {
        self.update_size_in_use();
        loop {
            let first = if self.sweep.is_some() {
                match self.rx.try_recv() {
                    Ok(msg) => Some(msg),
                    Err(TryRecvError::Empty) => None,
                    Err(TryRecvError::Disconnected) => break,
                }
            } else {
                match self.rx.recv() {
                    Ok(msg) => Some(msg),
                    Err(_) => break,
                }
            };
            let mut messages: Vec<Message> = first.into_iter().collect();
            std::thread::sleep(COMMIT_INTERVAL.saturating_sub(self.last_commit.elapsed()));
            while messages.len() < MAX_MESSAGES {
                match self.rx.try_recv() {
                    Ok(msg) => messages.push(msg),
                    Err(_) => break,
                }
            }
            if !self.commit(messages) {
                return;
            }
        }
    }

    /// Commit one round; returns false once the store has failed.
    fn commit(&mut self, messages: Vec<Message>) -> bool {
        let mut batches = Vec::with_capacity(messages.len());
        let mut last_segment = None;
        for msg in messages {
            match msg {
                Message::Batch { batch, segment } => {
                    batches.push(batch);
                    last_segment = Some(segment);
                }
                Message::Sweep { below } => {
                    self.sweep = Some(Sweep {
                        from: 0,
                        below,
                        max: SWEEP_CHUNK,
                    });
                }
            }
        }
        let sweep = self.sweep.take();
        self.last_commit = std::time::Instant::now();
        let shared = &self.shared;
        let keep = |key: &[u8], rev: i64, sub: u32| shared.index.read().holds(key, rev, sub);
        match self.disk.commit(&batches, sweep, &keep) {
            Ok(swept_to) => {
                if let (Some(sweep), Some(from), None) = (sweep, swept_to, &self.sweep) {
                    self.sweep = Some(Sweep { from, ..sweep });
                }
            }
            Err(e) => {
                let reason = format!("writing the store file failed: {e}");
                tracing::error!(%reason, "refusing further writes");
                *self.shared.failed.lock() = Some(reason);
                return false;
            }
        }
        if let Some(segment) = last_segment
            && segment > self.removed_below
        {
            // every batch of the older segments is in the file now
            match wal::remove_before(&self.data_dir, segment) {
                Ok(()) => self.removed_below = segment,
                Err(e) => tracing::warn!(error = %e, "removing old log segments failed"),
            }
        }
        self.commits += 1;
        if self.commits.is_multiple_of(64) || (sweep.is_some() && self.sweep.is_none()) {
            self.update_size_in_use();
        }
        true
    }

    fn update_size_in_use(&self) {
        if let Ok(bytes) = self.disk.size_in_use() {
            self.shared.size_in_use.store(bytes, Ordering::Relaxed);
        }
    }
}
