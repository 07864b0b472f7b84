//! The syncer thread: makes logged batches durable, then lets the world see them.
//!
//! The writer thread hands over each batch once its frame is written to the log (or, for a batch
//! that changed nothing, at once). This thread takes every batch waiting, `fdatasync`s the log
//! segments they were written to (one flush for all of them: group commit), and then, batch by
//! batch in log order, advances the committed revision and publishes the events, answers the
//! requests, and hands the batch to the applier thread. Meanwhile the writer goes on with the
//! next batches, so the flush and the writer's CPU work overlap.
//!
//! When requests come one at a time, that overlap has nothing to gain, and the hand-over costs
//! each request a wake-up of this thread: then the writer commits the batch itself, through the
//! same [`Committer`] (see [`Handle::submit`]). Measured in session 17 (BENCHMARKS.md): at one
//! writer the put ratio against etcd rose from 1.21–1.41× to 1.48–1.58× and the p99 fell from
//! 1.1–1.8 ms to 0.7–1.1 ms; at 64 writers the figures did not move (committing every batch in
//! the writer had cost about 8 % there).
//!
//! Physical compaction (dropping superseded history) starts here, through the index in key order,
//! a bounded chunk per round so it never stalls writers for long, and only once the compaction is
//! durable in the log; the applier then sweeps the file of whatever the index no longer holds.

use std::fs::File;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TryRecvError};

use bytes::Bytes;
use parking_lot::Mutex;
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

/// What committing a batch needs, shared by the syncer thread and the writer thread (which
/// commits a batch itself when nothing else is waiting: see [`Handle::submit`]). A batch is
/// only ever committed with this locked, so batches are answered in log order.
pub(crate) struct Committer {
    shared: Arc<Shared>,
    applier: applier::Queue,
    applier_thread: Option<std::thread::JoinHandle<()>>,
    /// In-memory compaction in progress: (compact revision, next key to examine).
    purge: Option<(i64, Bytes)>,
    /// Checkpoints held back until the in-memory compaction in progress has finished (so the
    /// applier gets the sweep that goes with it first).
    checkpoints: Vec<oneshot::Sender<Result<()>>>,
}

/// The syncer thread: commits the batches the writer hands over.
pub(crate) struct Syncer {
    rx: Receiver<Committing>,
    committer: Arc<Mutex<Committer>>,
    /// Batches handed over and not yet committed.
    in_flight: Arc<AtomicUsize>,
}

/// The writer's end: hands batches to the syncer thread, or commits them itself. Dropping it
/// lets the syncer thread finish, which then waits for the applier.
pub(crate) struct Handle {
    // Fields drop in this order: the committer before the channel, so that the syncer thread
    // holds the last reference to it when it sees the channel closed.
    committer: Arc<Mutex<Committer>>,
    in_flight: Arc<AtomicUsize>,
    tx: SyncSender<Committing>,
}

/// A syncer for `committer`, and the writer's handle to it.
pub(crate) fn syncer(committer: Committer, queue: usize) -> (Syncer, Handle) {
    let (tx, rx) = std::sync::mpsc::sync_channel(queue);
    let committer = Arc::new(Mutex::new(committer));
    let in_flight = Arc::new(AtomicUsize::new(0));
    let handle = Handle {
        tx,
        committer: committer.clone(),
        in_flight: in_flight.clone(),
    };
    let syncer = Syncer {
        rx,
        committer,
        in_flight,
    };
    (syncer, handle)
}

impl Handle {
    /// Commit `batch`: in this thread if no other request is waiting (`more_waiting` false) and
    /// the syncer has nothing in hand, else by handing it to the syncer thread.
    ///
    /// Committing here saves a hand-over (a wake-up of the syncer thread) when requests come
    /// one at a time; handing over lets the writer apply the next batch while this one's flush
    /// runs, which is worth more when requests queue up. Batches that start or wait for a
    /// compaction always go to the syncer thread, which carries on the compaction's chunks
    /// between batches.
    pub fn submit(&self, batch: Committing, more_waiting: bool) {
        if !more_waiting && self.in_flight.load(Ordering::Acquire) == 0 {
            let mut committer = self.committer.lock();
            if committer.purge.is_none()
                && batch.batch.compact_revision.is_none()
                && batch.checkpoints.is_empty()
            {
                committer.commit(vec![batch]);
                return;
            }
        }
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        // Waits if the syncer is far behind (backpressure); if it has stopped, the requests'
        // callers see the store as stopped.
        let _ = self.tx.send(batch);
    }
}

impl Syncer {
    /// Run until the writer is gone, then wait for the applier to finish.
    pub fn run(self) {
        loop {
            let purging = self.committer.lock().purge.is_some();
            let first = if purging {
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
            let count = pending.len();
            self.committer.lock().commit(pending);
            self.in_flight.fetch_sub(count, Ordering::AcqRel);
        }
        match Arc::try_unwrap(self.committer) {
            Ok(committer) => committer.into_inner().finish(),
            Err(_) => {
                tracing::warn!("the store's committer is still shared; not waiting for the applier")
            }
        }
    }
}

impl Committer {
    pub fn new(
        shared: Arc<Shared>,
        applier: applier::Queue,
        applier_thread: std::thread::JoinHandle<()>,
    ) -> Self {
        Committer {
            shared,
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

    /// Wait for the applier to finish.
    fn finish(self) {
        let Committer {
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

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicI64;
    use std::sync::mpsc;

    use parking_lot::RwLock;

    use super::*;
    use crate::embedded::index::Index;
    use crate::embedded::watch::Hub;

    fn committer() -> Committer {
        let committed = Arc::new(AtomicI64::new(0));
        let shared = Arc::new(Shared {
            index: RwLock::new(Index::default()),
            file: crate::embedded::disk::tests::empty_file(),
            committed: committed.clone(),
            hub: Arc::new(Hub::new(committed)),
            failed: parking_lot::Mutex::new(None),
            size_in_use: Default::default(),
            min_lease_ttl: 1,
        });
        let (queue, inbox) = applier::queue();
        let applier = std::thread::spawn(move || drop(inbox));
        Committer::new(shared, queue, applier)
    }

    /// A batch of one request at `revision` whose answer is sent on `answers`.
    fn batch(revision: i64, answers: &mpsc::Sender<i64>) -> Committing {
        let answers = answers.clone();
        let mut c = Committing::default();
        c.batch.revision = revision;
        c.done.push((
            None,
            Box::new(move |failure: Option<&str>| {
                assert_eq!(failure, None);
                answers.send(revision).unwrap();
            }),
        ));
        c
    }

    #[test]
    fn a_batch_nothing_waits_behind_is_committed_by_the_writer_and_the_rest_in_log_order() {
        let (syncer, handle) = syncer(committer(), 8);
        let (answers, answered) = mpsc::channel();

        // Nothing else waiting, nothing at the syncer: answered before `submit` returns.
        handle.submit(batch(1, &answers), false);
        assert_eq!(answered.try_recv(), Ok(1));

        // More requests waiting: handed over, so not answered until the syncer thread runs.
        handle.submit(batch(2, &answers), true);
        // Nothing waiting now, but batch 2 is still at the syncer: this one must not overtake it.
        handle.submit(batch(3, &answers), false);
        assert_eq!(answered.try_recv(), Err(mpsc::TryRecvError::Empty));

        let thread = std::thread::spawn(move || syncer.run());
        assert_eq!(answered.recv(), Ok(2));
        assert_eq!(answered.recv(), Ok(3));

        // The syncer has caught up: the writer commits again itself.
        while handle.in_flight.load(Ordering::Acquire) > 0 {
            std::thread::yield_now();
        }
        handle.submit(batch(4, &answers), false);
        assert_eq!(answered.try_recv(), Ok(4));

        drop(handle);
        thread.join().unwrap();
    }

    #[test]
    fn a_batch_that_compacts_goes_to_the_syncer_thread() {
        let (syncer, handle) = syncer(committer(), 8);
        let (answers, answered) = mpsc::channel();
        let mut compacting = batch(1, &answers);
        compacting.batch.compact_revision = Some(1);
        handle.submit(compacting, false);
        assert_eq!(answered.try_recv(), Err(mpsc::TryRecvError::Empty));

        let thread = std::thread::spawn(move || syncer.run());
        assert_eq!(answered.recv(), Ok(1));
        drop(handle);
        thread.join().unwrap();
    }
}
