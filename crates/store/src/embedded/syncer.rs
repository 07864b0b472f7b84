//! The syncer thread: makes logged batches durable, then lets the world see them.
//!
//! The writer thread hands over each batch once its frame is written to the log (or, for a batch
//! that changed nothing, at once). This thread takes every batch waiting, `fdatasync`s the log
//! segments they were written to (one flush for all of them: group commit), and then, batch by
//! batch in log order, advances the committed revision and publishes the events, answers the
//! requests, and hands the batch to the applier thread. Meanwhile the writer goes on with the
//! next batches, so the flush and the writer's CPU work overlap.
//!
//! Physical compaction (dropping superseded history) starts here, through the index in key order,
//! a bounded chunk per round so it never stalls writers for long, and only once the compaction is
//! durable in the log; the applier then sweeps the file of whatever the index no longer holds.

use std::fs::File;
use std::sync::Arc;
use std::sync::mpsc::{Receiver, TryRecvError};

use bytes::Bytes;
use tokio::sync::oneshot;

use super::Shared;
use super::applier;
use super::disk::Batch;
use super::writer::Origin;
use crate::error::{Error, Result};
use crate::types::Event;

/// Work per in-memory compaction chunk: keys examined plus history entries removed.
const PURGE_CHUNK: usize = 10_000;
/// A wait or step this long is logged: writers are held up by it.
const SLOW: std::time::Duration = std::time::Duration::from_millis(50);

/// Answers a request once its batch is durable (`None`) or has failed (`Some(reason)`).
pub(crate) type Completion = Box<dyn FnOnce(Option<&str>) + Send>;

/// A batch the writer has applied to the index and written to the log, on its way to being
/// durable.
#[derive(Default)]
pub(crate) struct Committing {
    pub batch: Batch,
    pub events: Vec<Event>,
    /// One per request, in order, with where its caller waits.
    pub done: Vec<(Option<Origin>, Completion)>,
    /// Checkpoint requests in the batch, answered by the applier.
    pub checkpoints: Vec<oneshot::Sender<Result<()>>>,
    /// The log segment and file its frame went to; `None` if it wrote nothing (or the write
    /// failed: the store is then marked failed).
    pub logged: Option<(u64, Arc<File>)>,
}

pub(crate) struct Syncer {
    shared: Arc<Shared>,
    rx: Receiver<Committing>,
    applier: applier::Queue,
    applier_thread: Option<std::thread::JoinHandle<()>>,
    /// In-memory compaction in progress: (compact revision, next key to examine).
    purge: Option<(i64, Bytes)>,
    /// Checkpoints held back until the in-memory compaction in progress has finished (so the
    /// applier gets the sweep that goes with it first).
    checkpoints: Vec<oneshot::Sender<Result<()>>>,
}

impl Syncer {
    pub fn new(
        shared: Arc<Shared>,
        rx: Receiver<Committing>,
        applier: applier::Queue,
        applier_thread: std::thread::JoinHandle<()>,
    ) -> Self {
        Syncer {
            shared,
            rx,
            applier,
            applier_thread: Some(applier_thread),
            purge: None,
            checkpoints: Vec::new(),
        }
    }

    /// Resume physical compaction of history below `revision` (after a restart).
    pub fn resume_purge(&mut self, revision: i64) {
        if revision > 0 {
            self.purge = Some((revision, Bytes::new()));
        }
    }

    /// Run until the writer is gone, then wait for the applier to finish.
    pub fn run(mut self) {
        loop {
            let first = if self.purge.is_some() {
                match self.rx.try_recv() {
                    Ok(c) => Some(c),
                    Err(TryRecvError::Empty) => None,
                    Err(TryRecvError::Disconnected) => break,
                }
            } else {
                match self.rx.recv() {
                    Ok(c) => Some(c),
                    Err(_) => break,
                }
            };
            let mut pending: Vec<Committing> = first.into_iter().collect();
            pending.extend(self.rx.try_iter());
            self.commit(pending);
        }
        let Syncer {
            applier,
            applier_thread,
            ..
        } = self;
        drop(applier);
        if let Some(thread) = applier_thread {
            let _ = thread.join();
        }
    }

    fn commit(&mut self, pending: Vec<Committing>) {
        let failure = self.sync(&pending);
        let mut durable = Vec::with_capacity(pending.len());
        let mut last_segment = None;
        for c in pending {
            self.checkpoints.extend(c.checkpoints);
            if failure.is_some() {
                answer(c.done, failure.as_deref());
                continue;
            }
            self.shared.hub.publish(c.batch.revision, &c.events);
            answer(c.done, None);
            if let Some(revision) = c.batch.compact_revision {
                self.purge = Some((revision, Bytes::new()));
            }
            if let Some((segment, _)) = c.logged {
                durable.push(c.batch);
                last_segment = Some(segment);
            }
        }
        // Hand the durable batches to the applier as one message, so that its queue bounds
        // commit groups, not batches (waits if it is that far behind: backpressure).
        if let Some(segment) = last_segment {
            let started = std::time::Instant::now();
            let _ = self.applier.send(applier::Message::Batches {
                batches: durable,
                segment,
            });
            let waited = started.elapsed();
            if waited >= SLOW {
                tracing::warn!(?waited, "the store file's applier is behind: writes waited");
            }
        }
        // Only now, with the compaction durable in the log, may the index drop history for it:
        // the applier's sweep drops from the file whatever the index no longer holds.
        let mut swept_index_below = None;
        if failure.is_none()
            && let Some((revision, from)) = self.purge.take()
        {
            let started = std::time::Instant::now();
            let next = self
                .shared
                .index
                .write()
                .purge(revision, &from, PURGE_CHUNK)
                .1;
            let took = started.elapsed();
            if took >= SLOW {
                tracing::warn!(?took, "a chunk of in-memory compaction held the index");
            }
            match next {
                Some(from) => self.purge = Some((revision, from)),
                None => swept_index_below = Some(revision),
            }
        }
        if let Some(below) = swept_index_below {
            let _ = self.applier.send(applier::Message::Sweep { below });
        }
        if self.purge.is_none() || failure.is_some() {
            for reply in std::mem::take(&mut self.checkpoints) {
                match &failure {
                    None => {
                        let _ = self.applier.send(applier::Message::Checkpoint(reply));
                    }
                    Some(reason) => drop(reply.send(Err(Error::Unavailable(reason.clone())))),
                }
            }
        }
    }

    /// Flush every log file the batches were written to, once each; why that failed, if it did
    /// or if the store had already failed (a batch whose frame could not be written).
    fn sync(&self, pending: &[Committing]) -> Option<String> {
        if let Some(reason) = self.shared.failed.lock().clone() {
            return Some(reason);
        }
        let mut files: Vec<(&Arc<File>, i64)> = Vec::new();
        for c in pending {
            if let Some((_, file)) = &c.logged {
                match files.last_mut() {
                    Some((last, revision)) if Arc::ptr_eq(last, file) => {
                        *revision = c.batch.revision
                    }
                    _ => files.push((file, c.batch.revision)),
                }
            }
        }
        for (file, revision) in files {
            if let Err(e) = file.sync_data() {
                let reason = format!("logging revision {revision} failed: {e}");
                tracing::error!(%reason, "store commit failed; refusing further writes");
                *self.shared.failed.lock() = Some(reason.clone());
                return Some(reason);
            }
        }
        None
    }
}

/// Answers a batch's requests. Waking a task from another thread costs its runtime a syscall
/// (the driver's eventfd) each time, so the requests that came from one thread are answered
/// together by one task spawned on their runtime: that thread is woken once per batch, and the
/// answers wake their tasks locally.
fn answer(done: Vec<(Option<Origin>, Completion)>, failure: Option<&str>) {
    let mut groups: Vec<(Origin, Vec<Completion>)> = Vec::new();
    for (origin, complete) in done {
        match origin {
            None => complete(failure),
            Some(origin) => match groups.iter_mut().find(|(o, _)| o.thread == origin.thread) {
                Some((_, group)) => group.push(complete),
                None => groups.push((origin, vec![complete])),
            },
        }
    }
    for (origin, mut group) in groups {
        if group.len() == 1 {
            (group.remove(0))(failure);
            continue;
        }
        let failure = failure.map(str::to_owned);
        // If that runtime has shut down, the answers are dropped with the task: nobody awaits
        // them any more.
        origin.runtime.spawn(async move {
            for complete in group {
                complete(failure.as_deref());
            }
        });
    }
}
