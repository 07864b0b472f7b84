//! The watch hub: delivers each committed batch of events to every watcher whose range it touches.
//!
//! Every watcher has a bounded channel. The writer thread publishes with `try_send` only, so a
//! slow watcher can never block writers or other watchers: when its channel is about to fill, it
//! gets a final `WatcherLagged` error naming the revision to resume from, and is dropped.
//!
//! Invariant: the committed revision (`Shared::committed`) only advances inside [`Hub::publish`],
//! under the hub lock. A watcher registered under that lock at committed revision `c` therefore
//! receives exactly the events with revision > `c` through its channel; events up to `c` come from
//! the index's history (catch-up). Lock order: hub, then index.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use parking_lot::Mutex;
use tokio::sync::mpsc;

use crate::error::{Error, Result};
use crate::store::WatchControl;
use crate::types::{Event, KeyRange, WatchBatch};

/// What a watcher's channel carries.
pub(crate) type Message = Result<WatchBatch>;

struct Slot {
    range: KeyRange,
    /// Events below this revision are not delivered (a watch may start in the future).
    min_revision: i64,
    prev_kv: bool,
    progress_notify: bool,
    /// Whether anything was sent since the last periodic progress tick.
    active: bool,
    tx: mpsc::Sender<Message>,
}

#[derive(Default)]
struct Inner {
    next_id: u64,
    slots: HashMap<u64, Slot>,
}

/// The set of live watchers. See the module docs.
pub(crate) struct Hub {
    inner: Mutex<Inner>,
    committed: Arc<AtomicI64>,
}

/// Holds the hub lock; lets a new watcher read the committed revision and register atomically.
pub(crate) struct Registration<'a> {
    hub: &'a Hub,
    guard: parking_lot::MutexGuard<'a, Inner>,
}

impl Registration<'_> {
    /// The committed revision; it cannot advance while this registration is alive.
    pub fn committed(&self) -> i64 {
        self.hub.committed.load(Ordering::Acquire)
    }

    /// Register a watcher for events with revision > `committed()` and >= `min_revision`.
    pub fn register(
        mut self,
        range: KeyRange,
        min_revision: i64,
        prev_kv: bool,
        progress_notify: bool,
        tx: mpsc::Sender<Message>,
    ) -> u64 {
        let id = self.guard.next_id;
        self.guard.next_id += 1;
        let slot = Slot {
            range,
            min_revision,
            prev_kv,
            progress_notify,
            active: false,
            tx,
        };
        self.guard.slots.insert(id, slot);
        id
    }
}

impl Hub {
    pub fn new(committed: Arc<AtomicI64>) -> Self {
        Hub {
            inner: Mutex::new(Inner::default()),
            committed,
        }
    }

    /// Take the hub lock to register a watcher.
    pub fn begin_registration(&self) -> Registration<'_> {
        Registration {
            hub: self,
            guard: self.inner.lock(),
        }
    }

    /// Advance the committed revision to `revision` and deliver `events` (all with revision <=
    /// `revision`, in order, `prev_kv` filled) to the watchers they concern.
    pub fn publish(&self, revision: i64, events: &[Event]) {
        let mut inner = self.inner.lock();
        self.committed.store(revision, Ordering::Release);
        if events.is_empty() {
            return;
        }
        inner.slots.retain(|_, slot| {
            let mine: Vec<Event> = events
                .iter()
                .filter(|e| {
                    e.kv.mod_revision >= slot.min_revision && slot.range.contains(&e.kv.key)
                })
                .map(|e| {
                    let mut e = e.clone();
                    if !slot.prev_kv {
                        e.prev_kv = None;
                    }
                    e
                })
                .collect();
            if mine.is_empty() {
                return !slot.tx.is_closed();
            }
            slot.active = true;
            let first = mine[0].kv.mod_revision;
            send(
                slot,
                Ok(WatchBatch {
                    revision,
                    events: mine,
                }),
                first,
            )
        });
    }

    /// Send a progress notification to one watcher.
    pub fn progress(&self, id: u64) {
        let mut inner = self.inner.lock();
        let revision = self.committed.load(Ordering::Acquire);
        if let Some(slot) = inner.slots.get_mut(&id)
            && !send(
                slot,
                Ok(WatchBatch {
                    revision,
                    events: Vec::new(),
                }),
                revision + 1,
            )
        {
            inner.slots.remove(&id);
        }
    }

    /// Periodic progress: notify idle watchers that asked for it.
    pub fn tick(&self) {
        let mut inner = self.inner.lock();
        let revision = self.committed.load(Ordering::Acquire);
        inner.slots.retain(|_, slot| {
            let was_active = std::mem::replace(&mut slot.active, false);
            if !slot.progress_notify || was_active {
                return !slot.tx.is_closed();
            }
            send(
                slot,
                Ok(WatchBatch {
                    revision,
                    events: Vec::new(),
                }),
                revision + 1,
            )
        });
    }

    /// Forget a watcher (its stream was dropped).
    pub fn remove(&self, id: u64) {
        self.inner.lock().slots.remove(&id);
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.inner.lock().slots.len()
    }
}

/// Try to send `msg`; if the channel is closed or has only the last slot left, cut the watcher off
/// (the last slot carries the lag error). Returns whether the watcher stays registered.
fn send(slot: &Slot, msg: Message, resume_from: i64) -> bool {
    if slot.tx.is_closed() {
        return false;
    }
    if slot.tx.capacity() <= 1 {
        let _ = slot.tx.try_send(Err(Error::WatcherLagged {
            next_revision: resume_from,
        }));
        return false;
    }
    slot.tx.try_send(msg).is_ok()
}

/// The [`WatchControl`] of an embedded watch stream: asks the hub for progress, and unregisters
/// the watcher when the stream is dropped.
pub(crate) struct Control {
    pub hub: Arc<Hub>,
    pub id: u64,
}

impl WatchControl for Control {
    fn request_progress(&self) {
        self.hub.progress(self.id);
    }
}

impl Drop for Control {
    fn drop(&mut self) {
        self.hub.remove(self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{EventKind, KeyValue};
    use bytes::Bytes;

    fn event(key: &'static str, rev: i64) -> Event {
        Event {
            kind: EventKind::Put,
            kv: KeyValue {
                key: Bytes::from_static(key.as_bytes()),
                mod_revision: rev,
                ..Default::default()
            },
            prev_kv: None,
        }
    }

    #[test]
    fn a_watcher_gets_only_events_in_its_range() {
        let hub = Hub::new(Arc::new(AtomicI64::new(0)));
        let (tx, mut rx) = mpsc::channel(8);
        hub.begin_registration()
            .register(KeyRange::prefix("/a/"), 0, false, false, tx);
        hub.publish(2, &[event("/a/1", 1), event("/b/1", 2)]);
        let batch = rx.try_recv().unwrap().unwrap();
        assert_eq!(batch.revision, 2);
        assert_eq!(batch.events, vec![event("/a/1", 1)]);
        assert!(rx.try_recv().is_err());
    }

    #[test]
    fn a_slow_watcher_is_cut_off_with_the_revision_to_resume_from() {
        let hub = Hub::new(Arc::new(AtomicI64::new(0)));
        let (slow_tx, mut slow_rx) = mpsc::channel(3);
        let (fast_tx, mut fast_rx) = mpsc::channel(100);
        hub.begin_registration()
            .register(KeyRange::prefix(""), 0, false, false, slow_tx);
        hub.begin_registration()
            .register(KeyRange::prefix(""), 0, false, false, fast_tx);
        for rev in 1..=5 {
            hub.publish(rev, &[event("k", rev)]);
            let got = fast_rx.try_recv().unwrap().unwrap();
            assert_eq!(got.events[0].kv.mod_revision, rev);
        }
        assert_eq!(hub.len(), 1, "the slow watcher was dropped");
        let revs: Vec<_> = std::iter::from_fn(|| slow_rx.try_recv().ok()).collect();
        assert_eq!(revs.len(), 3);
        assert!(revs[0].is_ok() && revs[1].is_ok());
        match &revs[2] {
            Err(Error::WatcherLagged { next_revision }) => assert_eq!(*next_revision, 3),
            other => panic!("expected lag error, got {other:?}"),
        }
    }

    #[test]
    fn progress_carries_the_committed_revision() {
        let hub = Hub::new(Arc::new(AtomicI64::new(0)));
        let (tx, mut rx) = mpsc::channel(8);
        let id = hub
            .begin_registration()
            .register(KeyRange::key("x"), 0, false, false, tx);
        hub.publish(7, &[event("other", 7)]);
        hub.progress(id);
        let batch = rx.try_recv().unwrap().unwrap();
        assert!(batch.is_progress());
        assert_eq!(batch.revision, 7);
    }
}
