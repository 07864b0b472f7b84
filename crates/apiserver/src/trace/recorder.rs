//! The recorder: at most `objects` timelines of at most `per_object` entries each, the least
//! recently recorded timeline evicted first, and a live feed of new entries for streaming readers.
//!
//! Invariant: `Inner` is guarded by one `parking_lot` mutex, held only to look up a timeline and
//! push or copy entries (never across an await or a serialization); the live feed is sent on
//! under it so that a reader that copies a timeline and subscribes under the same lock misses
//! nothing and sees nothing twice.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;
use tokio::sync::broadcast;

use super::stages::{self, Stage};
use super::{Entry, FILTERED_NAMED, Watcher, What};

/// Entries a live reader may fall behind by before it is cut off.
const LIVE_BUFFER: usize = 1024;

/// Filtered entries are merged with one this close to the end of a timeline (the other
/// watches' deliveries of the same change sit in between).
const MERGE_WINDOW: usize = 32;

/// `entries` in the order things happened (recording order can differ by a few microseconds).
pub fn sorted(entries: &VecDeque<Entry>) -> Vec<Entry> {
    let mut out: Vec<Entry> = entries.iter().cloned().collect();
    out.sort_by_key(|e| (e.time, e.seq));
    out
}

/// One pod's recorded history.
#[derive(Debug, Default, Clone)]
pub struct Timeline {
    pub entries: VecDeque<Entry>,
    /// Entries dropped from the front to stay within the bound.
    pub dropped: usize,
    /// Whether the startup stages were observed in the metrics (once, when the pod got Ready).
    pub observed: bool,
    touched: u64,
}

#[derive(Debug, Default)]
struct Inner {
    timelines: HashMap<String, Timeline>,
    /// Bumped on every entry; a timeline's `touched` is the tick of its last entry.
    tick: u64,
    seq: u64,
}

/// The bounded timelines (see the module doc).
#[derive(Debug)]
pub struct Recorder {
    objects: usize,
    per_object: usize,
    inner: Mutex<Inner>,
    watch_ids: AtomicU64,
    live: broadcast::Sender<Arc<(String, Entry)>>,
}

impl Recorder {
    /// A recorder of `objects` timelines of `per_object` entries (both at least 1).
    pub fn new(objects: usize, per_object: usize) -> Self {
        Self {
            objects: objects.max(1),
            per_object: per_object.max(1),
            inner: Mutex::default(),
            watch_ids: AtomicU64::new(1),
            live: broadcast::channel(LIVE_BUFFER).0,
        }
    }

    pub fn next_watch_id(&self) -> u64 {
        self.watch_ids.fetch_add(1, Ordering::Relaxed)
    }

    /// Records a write on `key`'s timeline, starting one (and evicting the least recently
    /// written) when `creates`. Returns the startup stages when this write made the pod Ready
    /// for the first time.
    pub fn record(
        &self,
        key: &str,
        creates: bool,
        time: jiff::Timestamp,
        what: What,
    ) -> Option<Vec<Stage>> {
        let ready = matches!(&what, What::Write { facts, .. } if facts.became_true.iter().any(|c| c == "Ready"));
        let mut inner = self.inner.lock();
        if !self.push(&mut inner, key, creates, time, what) {
            return None;
        }
        let timeline = inner.timelines.get_mut(key)?;
        if ready && !timeline.observed {
            timeline.observed = true;
            return Some(stages::derive(&sorted(&timeline.entries)));
        }
        None
    }

    /// Records that `watcher` was handed the change at `revision` as `event`.
    pub fn delivered(
        &self,
        key: &str,
        revision: i64,
        event: &'static str,
        watcher: &Arc<Watcher>,
        time: jiff::Timestamp,
    ) {
        let mut inner = self.inner.lock();
        let what = What::Delivery {
            watch: watcher.clone(),
            event,
            resource_version: revision,
        };
        // a delivery may be recorded before the write that caused it (the handler hears back
        // from the store after the watch cache does), so it starts the timeline too
        self.push(&mut inner, key, true, time, what);
    }

    /// Records that `watcher` was offered the change at `revision` and its selectors excluded
    /// it: merged into the entry of that change when there is one.
    pub fn filtered(
        &self,
        key: &str,
        revision: i64,
        watcher: &Arc<Watcher>,
        time: jiff::Timestamp,
    ) {
        let mut inner = self.inner.lock();
        let existing = inner.timelines.get_mut(key).and_then(|timeline| {
            timeline
                .entries
                .iter_mut()
                .rev()
                .take(MERGE_WINDOW)
                .find_map(|e| match &mut e.what {
                    What::Filtered {
                        resource_version,
                        watches,
                        more,
                    } if *resource_version == revision => Some((watches, more)),
                    _ => None,
                })
        });
        if let Some((watches, more)) = existing {
            if watches.len() < FILTERED_NAMED {
                watches.push(watcher.clone());
            } else {
                *more += 1;
            }
            return;
        }
        let what = What::Filtered {
            resource_version: revision,
            watches: vec![watcher.clone()],
            more: 0,
        };
        self.push(&mut inner, key, true, time, what);
    }

    /// Appends to `key`'s timeline, within the bound, starting it (and evicting the least
    /// recently recorded one) when `creates`, and tells live readers. `false` when there is no
    /// such timeline and `creates` is not set.
    fn push(
        &self,
        inner: &mut Inner,
        key: &str,
        creates: bool,
        time: jiff::Timestamp,
        what: What,
    ) -> bool {
        inner.seq += 1;
        inner.tick += 1;
        let (seq, tick) = (inner.seq, inner.tick);
        if !inner.timelines.contains_key(key) {
            if !creates {
                return false;
            }
            if inner.timelines.len() >= self.objects
                && let Some(oldest) = inner
                    .timelines
                    .iter()
                    .min_by_key(|(_, t)| t.touched)
                    .map(|(k, _)| k.clone())
            {
                inner.timelines.remove(&oldest);
            }
            inner.timelines.insert(key.to_string(), Timeline::default());
        }
        let Some(timeline) = inner.timelines.get_mut(key) else {
            return false;
        };
        timeline.touched = tick;
        if timeline.entries.len() >= self.per_object {
            timeline.entries.pop_front();
            timeline.dropped += 1;
        }
        let entry = Entry { seq, time, what };
        if self.live.receiver_count() > 0 {
            let _ = self.live.send(Arc::new((key.to_string(), entry.clone())));
        }
        timeline.entries.push_back(entry);
        true
    }

    /// A copy of `key`'s timeline.
    pub fn timeline(&self, key: &str) -> Option<Timeline> {
        self.inner.lock().timelines.get(key).cloned()
    }

    /// A copy of `key`'s timeline (empty if none yet) and the feed of every later entry.
    pub fn follow(&self, key: &str) -> (Timeline, broadcast::Receiver<Arc<(String, Entry)>>) {
        let inner = self.inner.lock();
        let timeline = inner.timelines.get(key).cloned().unwrap_or_default();
        (timeline, self.live.subscribe())
    }

    /// How many timelines are kept.
    pub fn len(&self) -> usize {
        self.inner.lock().timelines.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::summary::Facts;
    use crate::trace::{Client, What};

    fn at(ms: i64) -> jiff::Timestamp {
        jiff::Timestamp::from_millisecond(1_700_000_000_000 + ms).unwrap()
    }

    fn write(rv: i64, became_true: &[&str]) -> What {
        What::Write {
            client: Arc::new(Client::new(&Default::default(), "test")),
            verb: "update".into(),
            resource: "pods".into(),
            name: "p".into(),
            subresource: "status".into(),
            resource_version: rv,
            received: at(0),
            summary: vec![],
            facts: Box::new(Facts {
                became_true: became_true.iter().map(|s| s.to_string()).collect(),
                ..Default::default()
            }),
        }
    }

    fn watcher(id: u64, field_selector: &str) -> Arc<Watcher> {
        Arc::new(Watcher {
            id,
            client: Client::new(&Default::default(), "kubelet"),
            namespace: String::new(),
            label_selector: String::new(),
            field_selector: field_selector.into(),
        })
    }

    #[test]
    fn the_least_recently_written_timeline_is_evicted_beyond_the_object_bound() {
        let r = Recorder::new(2, 10);
        r.record("ns/a", true, at(1), write(1, &[]));
        r.record("ns/b", true, at(2), write(2, &[]));
        r.record("ns/a", true, at(3), write(3, &[]));
        r.record("ns/c", true, at(4), write(4, &[]));
        assert_eq!(r.len(), 2);
        assert!(r.timeline("ns/a").is_some() && r.timeline("ns/c").is_some());
        assert!(r.timeline("ns/b").is_none());
    }

    #[test]
    fn a_timeline_keeps_its_newest_entries_and_counts_the_dropped() {
        let r = Recorder::new(5, 3);
        for rv in 1..=5 {
            r.record("ns/a", true, at(rv), write(rv, &[]));
        }
        let t = r.timeline("ns/a").unwrap();
        assert_eq!(t.entries.len(), 3);
        assert_eq!(t.dropped, 2);
        assert!(matches!(
            t.entries[0].what,
            What::Write {
                resource_version: 3,
                ..
            }
        ));
    }

    #[test]
    fn writes_about_an_untracked_pod_start_no_timeline_unless_they_create() {
        let r = Recorder::new(5, 5);
        r.record("ns/a", false, at(1), write(1, &[]));
        assert!(r.is_empty());
    }

    #[test]
    fn a_delivery_recorded_before_its_write_starts_the_timeline_and_sorts_after_it() {
        let r = Recorder::new(5, 5);
        r.delivered("ns/a", 1, "ADDED", &watcher(1, ""), at(2));
        r.record("ns/a", true, at(1), write(1, &[]));
        let t = r.timeline("ns/a").unwrap();
        let order: Vec<_> = sorted(&t.entries).iter().map(|e| e.time).collect();
        assert_eq!(order, [at(1), at(2)]);
    }

    #[test]
    fn watches_that_filtered_out_one_change_share_one_entry_and_the_rest_are_counted() {
        let r = Recorder::new(5, 50);
        r.record("ns/a", true, at(1), write(7, &[]));
        r.delivered("ns/a", 7, "ADDED", &watcher(1, ""), at(2));
        for id in 2..(2 + FILTERED_NAMED as u64 + 3) {
            r.filtered("ns/a", 7, &watcher(id, "spec.nodeName=n1"), at(3));
        }
        let t = r.timeline("ns/a").unwrap();
        assert_eq!(t.entries.len(), 3);
        match &t.entries[2].what {
            What::Filtered {
                resource_version,
                watches,
                more,
            } => {
                assert_eq!(*resource_version, 7);
                assert_eq!(watches.len(), FILTERED_NAMED);
                assert_eq!(watches[0].field_selector, "spec.nodeName=n1");
                assert_eq!(*more, 3);
            }
            other => panic!("expected a filtered entry, got {other:?}"),
        }
    }

    #[test]
    fn stages_are_returned_once_when_the_pod_first_becomes_ready() {
        let r = Recorder::new(5, 50);
        assert!(r.record("ns/a", true, at(1), write(1, &[])).is_none());
        assert!(
            r.record("ns/a", true, at(2), write(2, &["Ready"]))
                .is_some()
        );
        assert!(
            r.record("ns/a", true, at(3), write(3, &["Ready"]))
                .is_none()
        );
    }

    #[test]
    fn a_follower_gets_the_timeline_then_every_later_entry() {
        let r = Recorder::new(5, 50);
        r.record("ns/a", true, at(1), write(1, &[]));
        let (t, mut rx) = r.follow("ns/a");
        assert_eq!(t.entries.len(), 1);
        r.delivered("ns/a", 1, "ADDED", &watcher(1, ""), at(2));
        let next = rx.try_recv().unwrap();
        assert_eq!(next.0, "ns/a");
        assert!(matches!(next.1.what, What::Delivery { event: "ADDED", .. }));
    }
}
