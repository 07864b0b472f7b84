//! The applier thread: copies logged batches into the redb file, off the writers' path.
//!
//! A write is durable once the writer thread has appended it to the write-ahead log; readers
//! read the in-memory index. The file is the log's checkpoint: the applier takes every batch the
//! writer has handed over and writes them in one redb commit per round, and deletes the log
//! segments whose batches are all durable in the file. It also runs the file's share of physical
//! compaction (a sweep keeping exactly the records the index still holds), one bounded chunk per
//! round.
//!
//! # Why most rounds do not fsync
//! The log already makes every batch durable, so a round's commit only has to reach the OS
//! (`Durability::None`); the file is made durable (one fsync for all the rounds before) only
//! when the log is about to lose batches (segments deleted), when a checkpoint is asked for,
//! when a sweep chunk commits, and at least every [`PERSIST_INTERVAL`]. A crash rolls the file
//! back to its last durable commit, and opening replays the log over it. Each fsync of the file
//! competes with the writer's log `fdatasync`, which writers wait for; and redb can reuse the
//! pages a commit frees only after a durable commit, so the interval also bounds how far the
//! file grows between two of them.
//!
//! # Why a sweep chunk is a commit of its own
//! redb is copy-on-write: pages a transaction frees are reusable only by later transactions. A
//! commit that both swept old history and wrote a round of new batches would need room for both
//! at once, and with rounds of 100 ms the file then grew by a round of writes each time a sweep
//! shared a commit with one (4.4 → 17.8 MB over 40 rounds of the churn test). So each round
//! runs its sweep chunk alone, before the batches that follow it, which then reuse the pages the
//! sweep freed; and a sweep never starts before the batches that precede it in the log (they may
//! hold history it must drop) are in the file.
//!
//! If a commit fails, the store stops accepting writes (the log still holds everything that was
//! acknowledged, and is replayed on the next open).

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, TryRecvError};

use tokio::sync::oneshot;

use super::Shared;
use super::disk::{Batch, Disk, Sweep};
use super::wal;
use crate::error::Result;

/// Records examined per sweep chunk.
const SWEEP_CHUNK: usize = 1_000;
/// Most messages (commit groups) taken into one round.
const MAX_MESSAGES: usize = 4096;
/// Shortest time between two rounds: the file is a checkpoint, so fewer, larger commits leave
/// the disk to the log, whose fsyncs writers wait for.
const COMMIT_INTERVAL: std::time::Duration = std::time::Duration::from_millis(100);
/// Longest time between two durable commits of the file while rounds run.
const PERSIST_INTERVAL: std::time::Duration = std::time::Duration::from_secs(1);

/// What the writer hands the applier, in log order.
pub(crate) enum Message {
    /// Batches that are durable, in log order, the last of them in log segment `segment`.
    Batches { batches: Vec<Batch>, segment: u64 },
    /// The index no longer holds superseded history below `revision`: sweep the file.
    Sweep { below: i64 },
    /// Answer once every batch before this message is in the file and no sweep is left to do.
    Checkpoint(oneshot::Sender<Result<()>>),
}

pub(crate) struct Applier {
    shared: Arc<Shared>,
    disk: Disk,
    data_dir: PathBuf,
    rx: Receiver<Message>,
    sweep: Option<Sweep>,
    /// Checkpoints whose batches are in the file, waiting for the sweep to finish.
    waiting: Vec<oneshot::Sender<Result<()>>>,
    /// Log segments below this one are deleted.
    removed_below: u64,
    commits: u64,
    last_round: std::time::Instant,
    /// When the file was last made durable, and whether it has commits since that are not.
    last_persisted: std::time::Instant,
    unpersisted: bool,
}

impl Applier {
    pub fn new(shared: Arc<Shared>, disk: Disk, data_dir: PathBuf, rx: Receiver<Message>) -> Self {
        Applier {
            shared,
            disk,
            data_dir,
            rx,
            sweep: None,
            waiting: Vec::new(),
            removed_below: 0,
            commits: 0,
            last_round: std::time::Instant::now(),
            last_persisted: std::time::Instant::now(),
            unpersisted: false,
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
            std::thread::sleep(COMMIT_INTERVAL.saturating_sub(self.last_round.elapsed()));
            while messages.len() < MAX_MESSAGES {
                match self.rx.try_recv() {
                    Ok(msg) => messages.push(msg),
                    Err(_) => break,
                }
            }
            self.last_round = std::time::Instant::now();
            if let Err(e) = self.round(messages) {
                return self.fail(e);
            }
        }
        if let Err(e) = self.persist() {
            self.fail(e);
        }
    }

    fn fail(&self, e: crate::error::Error) {
        let reason = format!("writing the store file failed: {e}");
        tracing::error!(%reason, "refusing further writes");
        *self.shared.failed.lock() = Some(reason);
    }

    /// One round: a chunk of the sweep in progress, then the messages in order (each new sweep
    /// starting right after the batches before it), the batches after the last sweep in one
    /// commit.
    fn round(&mut self, messages: Vec<Message>) -> Result<()> {
        let restarts_sweep = messages.iter().any(|m| matches!(m, Message::Sweep { .. }));
        if !restarts_sweep {
            self.sweep_chunk()?;
        }
        let mut batches = Vec::with_capacity(messages.len());
        let mut last_segment = None;
        for msg in messages {
            match msg {
                Message::Batches {
                    batches: more,
                    segment,
                } => {
                    batches.extend(more);
                    last_segment = Some(segment);
                }
                Message::Sweep { below } => {
                    self.write(&mut batches, last_segment.take())?;
                    self.sweep = Some(Sweep {
                        from: 0,
                        below,
                        max: SWEEP_CHUNK,
                    });
                    self.sweep_chunk()?;
                }
                Message::Checkpoint(reply) => self.waiting.push(reply),
            }
        }
        self.write(&mut batches, last_segment)?;
        if self.sweep.is_none() && !self.waiting.is_empty() {
            self.persist()?;
            for reply in self.waiting.drain(..) {
                let _ = reply.send(Ok(()));
            }
        }
        Ok(())
    }

    /// Commit `batches` (emptying it), durably if the log segments before `last_segment` can
    /// be deleted then (their batches are all in the file) or the file has gone
    /// [`PERSIST_INTERVAL`] without a durable commit; then delete those segments.
    fn write(&mut self, batches: &mut Vec<Batch>, last_segment: Option<u64>) -> Result<()> {
        if batches.is_empty() {
            return Ok(());
        }
        let frees_log = last_segment.filter(|segment| *segment > self.removed_below);
        let durable = frees_log.is_some() || self.last_persisted.elapsed() >= PERSIST_INTERVAL;
        self.disk.write(batches, durable)?;
        batches.clear();
        self.committed(durable);
        if let Some(segment) = frees_log {
            match wal::remove_before(&self.data_dir, segment) {
                Ok(()) => self.removed_below = segment,
                Err(e) => tracing::warn!(error = %e, "removing old log segments failed"),
            }
        }
        Ok(())
    }

    /// Commit the next chunk of the sweep in progress, if there is one.
    fn sweep_chunk(&mut self) -> Result<()> {
        let Some(sweep) = self.sweep else {
            return Ok(());
        };
        let shared = &self.shared;
        let keep = |key: &[u8], rev: i64, sub: u32| shared.index.read().holds(key, rev, sub);
        let swept_to = self.disk.sweep(sweep, &keep)?;
        self.sweep = swept_to.map(|from| Sweep { from, ..sweep });
        self.committed(true);
        if self.sweep.is_none() {
            self.update_size_in_use();
        }
        Ok(())
    }

    /// Make every commit so far durable, if one is not.
    fn persist(&mut self) -> Result<()> {
        if self.unpersisted {
            self.disk.persist()?;
            self.committed(true);
        }
        Ok(())
    }

    fn committed(&mut self, durable: bool) {
        if durable {
            self.last_persisted = std::time::Instant::now();
        }
        self.unpersisted = !durable;
        self.commits += 1;
        if self.commits.is_multiple_of(64) {
            self.update_size_in_use();
        }
    }

    fn update_size_in_use(&self) {
        if let Ok(bytes) = self.disk.size_in_use() {
            self.shared.size_in_use.store(bytes, Ordering::Relaxed);
        }
    }
}
