//! The recorder: for each resource at most `objects` timelines of at most `per_object` entries
//! each, the least recently recorded timeline of that resource evicted first, the links between
//! timelines (a controller's children, an object's UID as a trace ID), and a live feed of new
//! entries for streaming readers.
//!
//! Invariant: `Inner` is guarded by one `parking_lot` mutex, held only to look up a timeline and
//! push or copy entries (never across an await or a serialization); the live feed is sent on
//! under it so that a reader that copies a timeline and subscribes under the same lock misses
//! nothing and sees nothing twice.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use indexmap::IndexSet;
use parking_lot::Mutex;
use serde::Serialize;
use tokio::sync::broadcast;

use super::stages::{self, Stage};
use super::summary::Links;
use super::{Entry, FILTERED_NAMED, ObjectRef, Watcher, What};

/// Entries a live reader may fall behind by before it is cut off.
const LIVE_BUFFER: usize = 1024;

/// Filtered entries are merged with one this close to the end of a timeline (the other
/// watches' deliveries of the same change sit in between).
const MERGE_WINDOW: usize = 32;

/// Children a timeline names; more are counted (a 10,000-replica ReplicaSet).
pub const CHILDREN_NAMED: usize = 1000;

/// Generations of descendants a trace document shows (a Deployment's ReplicaSets' pods).
pub const DESCENDANT_DEPTH: usize = 3;

/// `entries` in the order things happened (recording order can differ by a few microseconds).
pub fn sorted(entries: &VecDeque<Entry>) -> Vec<Entry> {
    let mut out: Vec<Entry> = entries.iter().cloned().collect();
    out.sort_by_key(|e| (e.time, e.seq));
    out
}

/// One object's recorded history.
#[derive(Debug, Default, Clone)]
pub struct Timeline {
    pub entries: VecDeque<Entry>,
    /// Entries dropped from the front to stay within the bound.
    pub dropped: usize,
    /// Whether the startup stages were observed in the metrics (once, when the pod got Ready).
    pub observed: bool,
    /// The object's UID, as its own writes last said.
    pub uid: Option<String>,
    /// Its controller, as its own writes last said.
    pub owner: Option<ObjectRef>,
    /// The objects it controls, in the order they were first recorded, and how many more (a
    /// set: a ReplicaSet's thousandth pod is not compared with the other 999).
    pub children: IndexSet<ObjectRef>,
    pub more_children: usize,
    touched: u64,
}

/// What a trace shows of a descendant: where it is, how much was recorded and its last word.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Descendant {
    #[serde(flatten)]
    pub object: ObjectRef,
    /// Entries recorded (0 when its timeline was evicted or never started).
    pub steps: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first: Option<jiff::Timestamp>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last: Option<jiff::Timestamp>,
    /// The summary of its own last write (or the controller's line about it).
    pub state: String,
    pub children: Vec<Descendant>,
    #[serde(skip_serializing_if = "is_zero")]
    pub more_children: usize,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

#[derive(Debug, Default)]
struct Inner {
    timelines: HashMap<ObjectRef, Timeline>,
    /// Each resource's timelines by the tick of their last entry (`touched`), least recently
    /// recorded first: eviction takes the first, not a scan of every timeline.
    by_touch: HashMap<String, BTreeMap<u64, ObjectRef>>,
    /// Objects by the trace ID their UID makes.
    traced: HashMap<u128, ObjectRef>,
    /// Bumped on every entry; a timeline's `touched` is the tick of its last entry.
    tick: u64,
    seq: u64,
}

/// One entry of the live feed.
pub type Live = Arc<(ObjectRef, Entry)>;

/// The bounded timelines (see the module doc).
#[derive(Debug)]
pub struct Recorder {
    objects: usize,
    per_object: usize,
    inner: Mutex<Inner>,
    watch_ids: AtomicU64,
    live: broadcast::Sender<Live>,
}

impl Recorder {
    /// A recorder of `objects` timelines per resource of `per_object` entries (both at least 1).
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

    /// Records a write on `object`'s timeline, starting one (and evicting the resource's least
    /// recently written) when `creates`, with the links it makes. Returns the startup stages
    /// when this write made a pod Ready for the first time.
    pub fn record(
        &self,
        object: &ObjectRef,
        creates: bool,
        time: jiff::Timestamp,
        what: What,
        links: Links,
    ) -> Option<Vec<Stage>> {
        let ready = object.is_pod()
            && matches!(&what, What::Write { facts, .. } if facts.became_true.iter().any(|c| c == "Ready"));
        let mut inner = self.inner.lock();
        if !self.push(&mut inner, object, creates, time, what) {
            return None;
        }
        if let Some(id) = links.uid.as_deref().and_then(super::trace_id_of_uid) {
            inner.traced.insert(id, object.clone());
        }
        let timeline = inner.timelines.get_mut(object)?;
        if links.uid.is_some() {
            timeline.uid = links.uid;
            timeline.owner = links.owner;
        }
        if let Some(child) = links.child
            && !timeline.children.contains(&child)
        {
            if timeline.children.len() < CHILDREN_NAMED {
                timeline.children.insert(child);
            } else {
                timeline.more_children += 1;
            }
        }
        if ready && !timeline.observed {
            timeline.observed = true;
            return Some(stages::derive(&sorted(&timeline.entries)));
        }
        None
    }

    /// The object whose UID makes trace ID `id`, if it has a timeline.
    pub fn traced(&self, id: u128) -> Option<ObjectRef> {
        self.inner.lock().traced.get(&id).cloned()
    }

    /// Records a request made on `object`'s behalf (if it still has a timeline).
    pub fn request(&self, object: &ObjectRef, time: jiff::Timestamp, what: What) {
        let mut inner = self.inner.lock();
        self.push(&mut inner, object, false, time, what);
    }

    /// Records that `watcher` was handed the change of `pod` at `revision` as `event`.
    pub fn delivered(
        &self,
        pod: &ObjectRef,
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
        self.push(&mut inner, pod, true, time, what);
    }

    /// Records that `watcher` was offered the change of `pod` at `revision` and its selectors
    /// excluded it: merged into the entry of that change when there is one.
    pub fn filtered(
        &self,
        pod: &ObjectRef,
        revision: i64,
        watcher: &Arc<Watcher>,
        time: jiff::Timestamp,
    ) {
        let mut inner = self.inner.lock();
        let existing = inner.timelines.get_mut(pod).and_then(|timeline| {
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
        self.push(&mut inner, pod, true, time, what);
    }

    /// Appends to `object`'s timeline, within the bound, starting it (and evicting the
    /// resource's least recently recorded one) when `creates`, and tells live readers. `false`
    /// when there is no such timeline and `creates` is not set.
    fn push(
        &self,
        inner: &mut Inner,
        object: &ObjectRef,
        creates: bool,
        time: jiff::Timestamp,
        what: What,
    ) -> bool {
        inner.seq += 1;
        inner.tick += 1;
        let (seq, tick) = (inner.seq, inner.tick);
        if !inner.timelines.contains_key(object) {
            if !creates {
                return false;
            }
            let kept = inner.by_touch.entry(object.resource.clone()).or_default();
            if kept.len() >= self.objects {
                evict_oldest(inner, &object.resource);
            }
            inner.timelines.insert(object.clone(), Timeline::default());
        }
        let Some(timeline) = inner.timelines.get_mut(object) else {
            return false;
        };
        let last = std::mem::replace(&mut timeline.touched, tick);
        if let Some(order) = inner.by_touch.get_mut(&object.resource) {
            let kept = order.remove(&last).unwrap_or_else(|| object.clone());
            order.insert(tick, kept);
        }
        if timeline.entries.len() >= self.per_object {
            timeline.entries.pop_front();
            timeline.dropped += 1;
        }
        let entry = Entry { seq, time, what };
        if self.live.receiver_count() > 0 {
            let _ = self.live.send(Arc::new((object.clone(), entry.clone())));
        }
        timeline.entries.push_back(entry);
        true
    }

    /// A copy of `object`'s timeline.
    pub fn timeline(&self, object: &ObjectRef) -> Option<Timeline> {
        self.inner.lock().timelines.get(object).cloned()
    }

    /// A copy of `object`'s timeline (empty if none yet), its descendants, and the feed of
    /// every later entry.
    pub fn follow(
        &self,
        object: &ObjectRef,
    ) -> (Timeline, Vec<Descendant>, broadcast::Receiver<Live>) {
        let inner = self.inner.lock();
        let timeline = inner.timelines.get(object).cloned().unwrap_or_default();
        let children = descendants(&inner, &timeline, DESCENDANT_DEPTH);
        (timeline, children, self.live.subscribe())
    }

    /// `object`'s descendants, [`DESCENDANT_DEPTH`] generations deep.
    pub fn descendants(&self, object: &ObjectRef) -> Vec<Descendant> {
        let inner = self.inner.lock();
        inner
            .timelines
            .get(object)
            .map(|t| descendants(&inner, t, DESCENDANT_DEPTH))
            .unwrap_or_default()
    }

    /// `object` as a descendant, without its own descendants (a live reader's update).
    pub fn describe(&self, object: &ObjectRef) -> Descendant {
        describe(&self.inner.lock(), object, 0)
    }

    /// Whether `object` descends from `ancestor` within [`DESCENDANT_DEPTH`] generations.
    pub fn descends_from(&self, object: &ObjectRef, ancestor: &ObjectRef) -> bool {
        let inner = self.inner.lock();
        let mut at = object;
        for _ in 0..DESCENDANT_DEPTH {
            match inner.timelines.get(at).and_then(|t| t.owner.as_ref()) {
                Some(owner) if owner == ancestor => return true,
                Some(owner) => at = owner,
                None => return false,
            }
        }
        false
    }

    /// How many timelines are kept.
    pub fn len(&self) -> usize {
        self.inner.lock().timelines.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Drops the least recently recorded timeline of `resource`, and its trace ID.
fn evict_oldest(inner: &mut Inner, resource: &str) {
    let Some((_, oldest)) = inner
        .by_touch
        .get_mut(resource)
        .and_then(BTreeMap::pop_first)
    else {
        return;
    };
    if let Some(t) = inner.timelines.remove(&oldest)
        && let Some(id) = t.uid.as_deref().and_then(super::trace_id_of_uid)
    {
        inner.traced.remove(&id);
    }
}

fn descendants(inner: &Inner, timeline: &Timeline, depth: usize) -> Vec<Descendant> {
    if depth == 0 {
        return Vec::new();
    }
    timeline
        .children
        .iter()
        .map(|child| describe(inner, child, depth - 1))
        .collect()
}

/// `object` as a descendant, with `depth` generations of its own descendants.
fn describe(inner: &Inner, object: &ObjectRef, depth: usize) -> Descendant {
    match inner.timelines.get(object) {
        Some(t) => Descendant {
            object: object.clone(),
            steps: t.entries.len() + t.dropped,
            first: t.entries.front().map(|e| e.time),
            last: t.entries.back().map(|e| e.time),
            state: last_word(object, t),
            children: descendants(inner, t, depth),
            more_children: t.more_children,
        },
        None => Descendant {
            object: object.clone(),
            steps: 0,
            first: None,
            last: None,
            state: "(no timeline kept)".to_string(),
            children: Vec::new(),
            more_children: 0,
        },
    }
}

/// The summary of the last write of `object` itself on its timeline.
fn last_word(object: &ObjectRef, t: &Timeline) -> String {
    t.entries
        .iter()
        .rev()
        .find_map(|e| match &e.what {
            What::Write {
                resource,
                name,
                summary,
                ..
            } if *resource == object.resource && *name == object.name => Some(summary.join(", ")),
            _ => None,
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::summary::Facts;
    use crate::trace::{Client, What};

    fn at(ms: i64) -> jiff::Timestamp {
        jiff::Timestamp::from_millisecond(1_700_000_000_000 + ms).unwrap()
    }

    fn pod(name: &str) -> ObjectRef {
        ObjectRef::pod("ns", name)
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
        r.record(&pod("a"), true, at(1), write(1, &[]), Links::default());
        r.record(&pod("b"), true, at(2), write(2, &[]), Links::default());
        r.record(&pod("a"), true, at(3), write(3, &[]), Links::default());
        r.record(&pod("c"), true, at(4), write(4, &[]), Links::default());
        assert_eq!(r.len(), 2);
        assert!(r.timeline(&pod("a")).is_some() && r.timeline(&pod("c")).is_some());
        assert!(r.timeline(&pod("b")).is_none());
    }

    #[test]
    fn each_resource_evicts_within_its_own_bound() {
        let r = Recorder::new(1, 10);
        let rs = ObjectRef::new("apps", "replicasets", "ns", "r");
        r.record(&pod("a"), true, at(1), write(1, &[]), Links::default());
        r.record(&rs, true, at(2), write(2, &[]), Links::default());
        r.record(&pod("b"), true, at(3), write(3, &[]), Links::default());
        assert!(r.timeline(&pod("a")).is_none(), "the older pod went");
        assert!(r.timeline(&pod("b")).is_some() && r.timeline(&rs).is_some());
        r.record(&pod("b"), true, at(4), write(4, &[]), Links::default());
        assert_eq!(r.len(), 2, "a timeline written again is not counted twice");
    }

    #[test]
    fn a_timeline_keeps_its_newest_entries_and_counts_the_dropped() {
        let r = Recorder::new(5, 3);
        for rv in 1..=5 {
            r.record(&pod("a"), true, at(rv), write(rv, &[]), Links::default());
        }
        let t = r.timeline(&pod("a")).unwrap();
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
        r.record(&pod("a"), false, at(1), write(1, &[]), Links::default());
        assert!(r.is_empty());
    }

    #[test]
    fn a_delivery_recorded_before_its_write_starts_the_timeline_and_sorts_after_it() {
        let r = Recorder::new(5, 5);
        r.delivered(&pod("a"), 1, "ADDED", &watcher(1, ""), at(2));
        r.record(&pod("a"), true, at(1), write(1, &[]), Links::default());
        let t = r.timeline(&pod("a")).unwrap();
        let order: Vec<_> = sorted(&t.entries).iter().map(|e| e.time).collect();
        assert_eq!(order, [at(1), at(2)]);
    }

    #[test]
    fn watches_that_filtered_out_one_change_share_one_entry_and_the_rest_are_counted() {
        let r = Recorder::new(5, 50);
        r.record(&pod("a"), true, at(1), write(7, &[]), Links::default());
        r.delivered(&pod("a"), 7, "ADDED", &watcher(1, ""), at(2));
        for id in 2..(2 + FILTERED_NAMED as u64 + 3) {
            r.filtered(&pod("a"), 7, &watcher(id, "spec.nodeName=n1"), at(3));
        }
        let t = r.timeline(&pod("a")).unwrap();
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
        assert!(
            r.record(&pod("a"), true, at(1), write(1, &[]), Links::default())
                .is_none()
        );
        assert!(
            r.record(
                &pod("a"),
                true,
                at(2),
                write(2, &["Ready"]),
                Links::default()
            )
            .is_some()
        );
        assert!(
            r.record(
                &pod("a"),
                true,
                at(3),
                write(3, &["Ready"]),
                Links::default()
            )
            .is_none()
        );
    }

    #[test]
    fn a_follower_gets_the_timeline_then_every_later_entry() {
        let r = Recorder::new(5, 50);
        r.record(&pod("a"), true, at(1), write(1, &[]), Links::default());
        let (t, _, mut rx) = r.follow(&pod("a"));
        assert_eq!(t.entries.len(), 1);
        r.delivered(&pod("a"), 1, "ADDED", &watcher(1, ""), at(2));
        let next = rx.try_recv().unwrap();
        assert_eq!(next.0, pod("a"));
        assert!(matches!(next.1.what, What::Delivery { event: "ADDED", .. }));
    }

    fn own(uid: &str, owner: Option<&ObjectRef>) -> Links {
        Links {
            uid: Some(uid.into()),
            owner: owner.cloned(),
            child: None,
        }
    }

    fn child(of: &ObjectRef) -> Links {
        Links {
            child: Some(of.clone()),
            ..Links::default()
        }
    }

    #[test]
    fn each_resource_keeps_its_own_bound() {
        let r = Recorder::new(1, 10);
        r.record(&pod("a"), true, at(1), write(1, &[]), Links::default());
        let node = ObjectRef::new("", "nodes", "", "n1");
        r.record(&node, true, at(2), write(2, &[]), Links::default());
        assert!(
            r.timeline(&pod("a")).is_some(),
            "a node does not evict a pod"
        );
        r.record(&pod("b"), true, at(3), write(3, &[]), Links::default());
        assert!(r.timeline(&pod("a")).is_none() && r.timeline(&node).is_some());
        assert_eq!(r.len(), 2);
    }

    #[test]
    fn a_uid_names_its_timeline_as_a_trace_id_until_the_timeline_is_evicted() {
        let r = Recorder::new(1, 10);
        let uid = "6e8bc430-9c3a-11d9-9669-0800200c9a66";
        let id = crate::trace::trace_id_of_uid(uid).unwrap();
        r.record(&pod("a"), true, at(1), write(1, &[]), own(uid, None));
        assert_eq!(r.traced(id), Some(pod("a")));
        r.record(&pod("b"), true, at(2), write(2, &[]), Links::default());
        assert_eq!(r.traced(id), None);
    }

    #[test]
    fn descendants_are_the_children_recorded_on_each_generation() {
        let r = Recorder::new(10, 10);
        let deployment = ObjectRef::new("apps", "deployments", "ns", "web");
        let rs = ObjectRef::new("apps", "replicasets", "ns", "web-1");
        let rs_uid = "00000000-0000-0000-0000-000000000002";
        r.record(
            &deployment,
            true,
            at(1),
            write(1, &[]),
            own("00000000-0000-0000-0000-000000000001", None),
        );
        r.record(
            &rs,
            true,
            at(2),
            write(2, &[]),
            own(rs_uid, Some(&deployment)),
        );
        r.record(&deployment, true, at(2), write(2, &[]), child(&rs));
        r.record(
            &pod("web-1-a"),
            true,
            at(3),
            write(3, &[]),
            own("00000000-0000-0000-0000-000000000003", Some(&rs)),
        );
        r.record(&rs, true, at(3), write(3, &[]), child(&pod("web-1-a")));
        r.record(&rs, true, at(4), write(4, &[]), child(&pod("web-1-gone")));
        let tree = r.descendants(&deployment);
        assert_eq!(tree.len(), 1);
        assert_eq!(tree[0].object, rs);
        assert_eq!(tree[0].steps, 3);
        let pods: Vec<_> = tree[0]
            .children
            .iter()
            .map(|d| (d.object.name.as_str(), d.steps))
            .collect();
        assert_eq!(pods, [("web-1-a", 1), ("web-1-gone", 0)]);
        assert_eq!(tree[0].children[1].state, "(no timeline kept)");
        assert!(r.descends_from(&pod("web-1-a"), &deployment));
        assert!(r.descends_from(&rs, &deployment));
        assert!(!r.descends_from(&deployment, &rs));
    }
}
