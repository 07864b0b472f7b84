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
//! when a sweep chunk commits, and at least every [`PERSIST_INTERVAL`] or [`PERSIST_BYTES`]
//! (the fsync writes everything since the last one, and the round waits for it). A crash rolls the file
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
use std::sync::mpsc::{Receiver, Sender, TryRecvError};

use tokio::sync::oneshot;

use super::Shared;
use super::disk::{Batch, Disk, Sweep, record_key};
use super::wal;
use crate::error::Result;

/// Records examined per sweep chunk.
const SWEEP_CHUNK: usize = 1_000;
/// Most messages (commit groups) taken into one round.
const MAX_MESSAGES: usize = 4096;
/// Shortest time between two rounds: the file is a checkpoint, so fewer, larger commits leave
/// the disk to the log, whose fsyncs writers wait for.
const COMMIT_INTERVAL: std::time::Duration = std::time::Duration::from_millis(100);
/// A round this long is logged (the queue from the writers fills while it runs).
const SLOW_ROUND: std::time::Duration = std::time::Duration::from_millis(250);
/// Longest time between two durable commits of the file while rounds run.
const PERSIST_INTERVAL: std::time::Duration = std::time::Duration::from_secs(1);
/// Most record bytes committed between two durable commits: the fsync that makes them durable
/// writes them all, and the round waits for it (16 MiB: about 0.1–0.2 s on this disk).
const PERSIST_BYTES: usize = 16 << 20;

/// Record bytes the syncer may hand the applier before it waits for it: room for the slow
/// rounds (a sweep chunk, the fsync of a durable commit) at the highest write rates, so that
/// writers do not stall behind one; bounded, so that a file that cannot keep up pushes back on
/// the writers instead of memory growing without bound.
const QUEUE_BYTES: usize = 64 << 20;
/// Shortest time between two counts of the space in use (reported by `status`), which is
/// counted at start-up and then only once `status` asked for it: counting reads every page of
/// the file (redb has no cheaper count), the applier's rounds wait meanwhile, and it grows with
/// the file: about 0.23 CPU seconds with 110,000–250,000 records of 1 KiB here, 1.1–3.3 s in
/// the 20,000-pod scale probe (where it ran once a minute before it waited to be asked), and
/// 4.4–7.8 s in the 150,000-pod run, where it followed every sweep before it waited to be asked
/// then too. A finished sweep makes the last count stale, so it is counted at the first ask.
const SIZE_REFRESH_INTERVAL: std::time::Duration = std::time::Duration::from_secs(60);

/// The syncer's end of the queue to the applier.
pub(crate) struct Queue {
    tx: Sender<Message>,
    budget: Arc<Budget>,
}

/// How many record bytes are queued, shared by both ends.
#[derive(Default)]
struct Budget {
    /// Bytes queued, and whether the applier is gone (nothing waits for room then).
    state: parking_lot::Mutex<(usize, bool)>,
    freed: parking_lot::Condvar,
}

/// A queue to an applier, and the applier's end of it.
pub(crate) fn queue() -> (Queue, Inbox) {
    let (tx, rx) = std::sync::mpsc::channel();
    let budget = Arc::new(Budget::default());
    (
        Queue {
            tx,
            budget: budget.clone(),
        },
        Inbox { rx, budget },
    )
}

impl Queue {
    /// Hand `msg` over, first waiting while the batches queued before it hold
    /// [`QUEUE_BYTES`] or more. Returns whether the applier is still there.
    pub fn send(&self, msg: Message) -> bool {
        if let Message::Batches { batches, .. } = &msg {
            let bytes = record_bytes(batches);
            let mut state = self.budget.state.lock();
            while state.0 > 0 && state.0 + bytes > QUEUE_BYTES && !state.1 {
                self.budget.freed.wait(&mut state);
            }
            state.0 += bytes;
        }
        self.tx.send(msg).is_ok()
    }
}

/// The applier's end of the queue; dropping it releases a syncer waiting for room.
pub(crate) struct Inbox {
    rx: Receiver<Message>,
    budget: Arc<Budget>,
}

impl Inbox {
    /// `bytes` of batches are in the file: room for more.
    fn release(&self, bytes: usize) {
        let mut state = self.budget.state.lock();
        state.0 = state.0.saturating_sub(bytes);
        self.budget.freed.notify_all();
    }
}

impl Drop for Inbox {
    fn drop(&mut self) {
        self.budget.state.lock().1 = true;
        self.budget.freed.notify_all();
    }
}

fn record_bytes(batches: &[Batch]) -> usize {
    batches
        .iter()
        .flat_map(|b| &b.records)
        .map(|(_, record)| record.len())
        .sum()
}

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
    inbox: Inbox,
    sweep: Option<Sweep>,
    /// Checkpoints whose batches are in the file, waiting for the sweep to finish.
    waiting: Vec<oneshot::Sender<Result<()>>>,
    /// Log segments below this one are deleted.
    removed_below: u64,
    /// When the space in use was last counted; `None` once a sweep has freed space since.
    size_counted: Option<std::time::Instant>,
    last_round: std::time::Instant,
    /// When the file was last made durable, and whether it has commits since that are not.
    last_persisted: std::time::Instant,
    unpersisted: bool,
    /// Record bytes committed since the last durable commit.
    unpersisted_bytes: usize,
}

impl Applier {
    pub fn new(shared: Arc<Shared>, disk: Disk, data_dir: PathBuf, inbox: Inbox) -> Self {
        Applier {
            shared,
            disk,
            data_dir,
            inbox,
            sweep: None,
            waiting: Vec::new(),
            removed_below: 0,
            size_counted: None,
            last_round: std::time::Instant::now(),
            last_persisted: std::time::Instant::now(),
            unpersisted: false,
            unpersisted_bytes: 0,
        }
    }

    /// Run until the writer is gone and everything it handed over is in the file.
    pub fn run(mut self) {
        self.update_size_in_use();
        loop {
            let first = if self.sweep.is_some() {
                match self.inbox.rx.try_recv() {
                    Ok(msg) => Some(msg),
                    Err(TryRecvError::Empty) => None,
                    Err(TryRecvError::Disconnected) => break,
                }
            } else {
                match self.inbox.rx.recv() {
                    Ok(msg) => Some(msg),
                    Err(_) => break,
                }
            };
            let mut messages: Vec<Message> = first.into_iter().collect();
            std::thread::sleep(COMMIT_INTERVAL.saturating_sub(self.last_round.elapsed()));
            while messages.len() < MAX_MESSAGES {
                match self.inbox.rx.try_recv() {
                    Ok(msg) => messages.push(msg),
                    Err(_) => break,
                }
            }
            self.last_round = std::time::Instant::now();
            if let Err(e) = self.round(messages) {
                return self.fail(e);
            }
            let took = self.last_round.elapsed();
            if took >= SLOW_ROUND {
                tracing::warn!(
                    ?took,
                    sweeping = self.sweep.is_some(),
                    "slow store file commit"
                );
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
        let bytes = record_bytes(batches);
        self.unpersisted_bytes += bytes;
        let durable = frees_log.is_some()
            || self.unpersisted_bytes >= PERSIST_BYTES
            || self.last_persisted.elapsed() >= PERSIST_INTERVAL;
        self.disk.write(batches, durable)?;
        self.release_written(batches);
        self.inbox.release(bytes);
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

    /// `batches` are in the file: the index may let go of the values they superseded.
    fn release_written(&self, batches: &[Batch]) {
        let Some(revision) = batches.iter().map(|b| b.revision).max() else {
            return;
        };
        let records = batches.iter().flat_map(|b| &b.records);
        let written = records.filter_map(|((rev, sub), raw)| Some((record_key(raw)?, *rev, *sub)));
        self.shared.index.write().written(written, revision);
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
        if self.sweep.is_none() {
            self.size_counted = None;
        }
        self.committed(true);
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
            self.unpersisted_bytes = 0;
        }
        self.unpersisted = !durable;
        if self.shared.size_in_use.is_asked()
            && self
                .size_counted
                .is_none_or(|at| at.elapsed() >= SIZE_REFRESH_INTERVAL)
        {
            self.update_size_in_use();
        }
    }

    fn update_size_in_use(&mut self) {
        self.size_counted = Some(std::time::Instant::now());
        if let Ok(bytes) = self.disk.size_in_use() {
            self.shared.size_in_use.set(bytes);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batches(bytes: usize) -> Message {
        Message::Batches {
            batches: vec![Batch {
                records: vec![((2, 0), vec![0; bytes])],
                ..Default::default()
            }],
            segment: 0,
        }
    }

    #[test]
    fn the_queue_holds_the_syncer_back_until_the_applier_frees_room() {
        let (queue, inbox) = queue();
        assert!(queue.send(batches(QUEUE_BYTES - 1)));
        let sender = std::thread::spawn(move || queue.send(batches(2)));
        assert!(matches!(inbox.rx.recv().unwrap(), Message::Batches { .. }));
        // the second waits for room (were it sent, it would arrive well within this wait)
        let wait = std::time::Duration::from_millis(200);
        assert!(inbox.rx.recv_timeout(wait).is_err());
        assert!(!sender.is_finished());
        inbox.release(QUEUE_BYTES - 1);
        assert!(sender.join().unwrap());
        assert!(matches!(inbox.rx.recv().unwrap(), Message::Batches { .. }));
    }

    #[test]
    fn a_message_larger_than_the_queue_passes_alone_and_a_gone_applier_frees_the_syncer() {
        let (queue, inbox) = queue();
        assert!(queue.send(batches(QUEUE_BYTES * 2)));
        let sender = std::thread::spawn(move || queue.send(batches(1)));
        drop(inbox);
        // returns (without this, the join would hang); whether the message was still taken
        // depends on whether it raced the receiver's drop
        sender.join().unwrap();
    }

    #[test]
    fn the_space_in_use_is_counted_again_once_asked_for() {
        let size = super::super::SizeInUse::default();
        size.set(10);
        assert!(!size.is_asked(), "nobody asked yet");
        assert_eq!(size.ask(), 10);
        assert!(size.is_asked());
        size.set(20);
        assert!(!size.is_asked(), "the count answers the question");
        assert_eq!(size.ask(), 20);
    }
}
