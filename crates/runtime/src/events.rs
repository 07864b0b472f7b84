//! `events`: the one way components record `events.k8s.io/v1` Events, as client-go's event
//! broadcaster and correlator do it. A [`Recorder`] never blocks its caller: events go through
//! a bounded queue (full: dropped, as upstream's) to one task per recorder, which
//! - **aggregates**: more than 10 events about one object with the same type and reason but
//!   different notes within 10 minutes become one, noted `(combined from similar events): …`;
//! - **makes series**: an event identical to one already written (same object and field path,
//!   related object, type, reason, action and note) is not written again: the written one's
//!   `series` counts it (`count`, `lastObservedTime`), so `kubectl describe` shows `(xN over …)`;
//! - **filters spam**: each object gets a burst of 25 writes from one recorder, then one per
//!   5 minutes.
//!
//! `reportingController` is upstream's component name (`kubelet`, `default-scheduler`,
//! `replicaset-controller`), `reportingInstance` the node for a kubelet. (Upstream's kubelet and
//! controller manager write core Events, whose `source` carries the same two; the
//! events.k8s.io API refuses `deprecatedSource` on create.) Writes run concurrently (a few at a
//! time), except that a series' update waits for the write before it.

use std::collections::{BTreeMap, HashMap};
use std::hash::{BuildHasher, Hash};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::{Event as EventObject, EventSeries};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use tokio::sync::{Semaphore, mpsc};
use tokio::time::Instant;

/// Upstream's event queue length (`maxQueuedEvents`).
const QUEUE: usize = 1000;
/// Writes in flight per recorder.
const IN_FLIGHT: usize = 8;
/// Upstream's correlator cache size (`maxLruCacheEntries`), for each of its caches.
const CACHE_ENTRIES: usize = 4096;
/// Upstream's `defaultSpamBurst` and `defaultSpamQPS` (one per 300 s).
const SPAM_BURST: f64 = 25.0;
const SPAM_REFILL: Duration = Duration::from_secs(300);
/// Upstream's `defaultAggregateMaxEvents` and `defaultAggregateIntervalInSeconds`.
const AGGREGATE_MAX: usize = 10;
const AGGREGATE_INTERVAL: Duration = Duration::from_secs(600);
/// Upstream's note prefix of an aggregated event.
const COMBINED: &str = "(combined from similar events): ";

/// `Normal` or `Warning`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventType {
    Normal,
    Warning,
}

impl EventType {
    fn as_str(self) -> &'static str {
        match self {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        }
    }
}

/// Who records: `reportingController` and `reportingInstance`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reporter {
    pub controller: String,
    pub instance: String,
}

/// One occurrence to record.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    pub type_: EventType,
    pub reason: String,
    /// What was done (or failed); the reason unless set.
    pub action: String,
    pub note: String,
    pub regarding: ObjectReference,
    pub related: Option<ObjectReference>,
}

impl Event {
    pub fn new(type_: EventType, regarding: ObjectReference, reason: &str, note: String) -> Event {
        Event {
            type_,
            reason: reason.into(),
            action: reason.into(),
            note,
            regarding,
            related: None,
        }
    }

    pub fn normal(regarding: ObjectReference, reason: &str, note: String) -> Event {
        Event::new(EventType::Normal, regarding, reason, note)
    }

    pub fn warning(regarding: ObjectReference, reason: &str, note: String) -> Event {
        Event::new(EventType::Warning, regarding, reason, note)
    }

    pub fn with_action(mut self, action: &str) -> Event {
        self.action = action.into();
        self
    }

    pub fn with_related(mut self, related: Option<ObjectReference>) -> Event {
        self.related = related;
        self
    }
}

/// Where a component records events; cheap to clone.
#[derive(Clone)]
pub struct Recorder {
    tx: mpsc::Sender<Event>,
}

/// A reference to the Node `name`, for the events a node agent reports about its node.
pub fn node_reference(name: &str) -> ObjectReference {
    ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Node".into()),
        name: Some(name.into()),
        ..Default::default()
    }
}

impl Recorder {
    /// Starts the recorder's writer, which writes through `client` until every clone of the
    /// recorder is dropped.
    pub fn new(client: kube::Client, reporter: Reporter) -> Recorder {
        let (tx, rx) = mpsc::channel(QUEUE);
        tokio::spawn(write(client, reporter, rx));
        Recorder { tx }
    }

    /// Queues one event; never waits (when the queue is full the event is dropped, as
    /// upstream's broadcaster drops it).
    pub fn record(&self, event: Event) {
        if let Err(mpsc::error::TrySendError::Full(event)) = self.tx.try_send(event) {
            tracing::debug!(reason = %event.reason, "event queue full; event dropped");
        }
    }
}

/// The writer: correlates each event, then creates or patches it.
async fn write(client: kube::Client, reporter: Reporter, mut rx: mpsc::Receiver<Event>) {
    let mut correlator = Correlator::default();
    let permits = Arc::new(Semaphore::new(IN_FLIGHT));
    while let Some(event) = rx.recv().await {
        let Some((write, order)) = correlator.correlate(&reporter, event, Instant::now()) else {
            continue;
        };
        // a series' writes go in order: each waits for the one before
        let turn = order.lock_owned().await;
        let Ok(permit) = permits.clone().acquire_owned().await else {
            return;
        };
        let client = client.clone();
        tokio::spawn(async move {
            write.apply(client).await;
            drop((turn, permit));
        });
    }
}

/// One write to the API server.
#[derive(Debug, Clone, PartialEq)]
enum Write {
    Create(EventObject),
    /// A series' new count; the full object to create when the written one is gone (expired).
    Series {
        series: EventSeries,
        object: EventObject,
    },
}

impl Write {
    async fn apply(self, client: kube::Client) {
        let (mut object, series) = match self {
            Write::Create(object) => (object, None),
            Write::Series { series, object } => (object, Some(series)),
        };
        let namespace = object.metadata.namespace.clone().unwrap_or_default();
        let name = object.metadata.name.clone().unwrap_or_default();
        let api: Api<EventObject> = Api::namespaced(client, &namespace);
        let result = match series {
            Some(series) => {
                let patch = Patch::Merge(serde_json::json!({ "series": series }));
                match api.patch(&name, &PatchParams::default(), &patch).await {
                    Err(kube::Error::Api(s)) if s.code == 404 => {
                        object.series = Some(series);
                        api.create(&PostParams::default(), &object).await
                    }
                    other => other,
                }
            }
            None => api.create(&PostParams::default(), &object).await,
        };
        if let Err(error) = result {
            let reason = object.reason.as_deref().unwrap_or_default();
            tracing::debug!(event = %name, reason, %error, "could not record an event");
        }
    }
}

/// The correlator's state: client-go's `EventCorrelator` (aggregator, logger, spam filter),
/// each a cache bounded to [`CACHE_ENTRIES`].
///
/// The caches hold a 128-bit hash of each key ([`Ids`]), not the key: every node agent keeps a
/// correlator, and a hollow-node process thousands of them, each holding an entry or three per
/// event about its pods. With the keys (object references, reasons, notes) and the written
/// Event kept, an entry took about 1.5 KiB of table slot plus its strings; without them a few
/// dozen bytes. A series' Event is made again from the occurrence at hand when it must be
/// created anew, under the name and `eventTime` of the first.
#[derive(Default)]
struct Correlator {
    ids: Ids,
    similar: Bounded<Id, Similar>,
    series: Bounded<Id, Series>,
    spam: Bounded<Id, (f64, Instant)>,
}

/// A key's 128-bit hash: two SipHashes under random keys, so that two keys share an id with
/// a chance of about 2⁻¹²⁸ per pair, and no one can choose keys that do.
type Id = u128;

#[derive(Default)]
struct Ids(std::hash::RandomState, std::hash::RandomState);

impl Ids {
    fn of(&self, key: &impl Hash) -> Id {
        (u128::from(self.0.hash_one(key)) << 64) | u128::from(self.1.hash_one(key))
    }
}

/// The object an event is about, without its resourceVersion (and without its field path
/// unless taken `with_field`).
#[derive(Hash)]
struct ObjectKey<'a> {
    api_version: Option<&'a str>,
    kind: Option<&'a str>,
    namespace: Option<&'a str>,
    name: Option<&'a str>,
    uid: Option<&'a str>,
    field_path: Option<&'a str>,
}

impl<'a> ObjectKey<'a> {
    fn of(r: &'a ObjectReference) -> ObjectKey<'a> {
        ObjectKey {
            api_version: r.api_version.as_deref(),
            kind: r.kind.as_deref(),
            namespace: r.namespace.as_deref(),
            name: r.name.as_deref(),
            uid: r.uid.as_deref(),
            field_path: None,
        }
    }

    fn with_field(r: &'a ObjectReference) -> ObjectKey<'a> {
        ObjectKey {
            field_path: r.field_path.as_deref(),
            ..ObjectKey::of(r)
        }
    }
}

/// Events that differ only in their note (upstream's `EventAggregatorByReasonFunc`).
#[derive(Hash)]
struct SimilarKey<'a> {
    object: &'a ObjectKey<'a>,
    type_: EventType,
    reason: &'a str,
}

/// The distinct notes (their hashes) seen of similar events since the interval began.
struct Similar {
    notes: std::collections::HashSet<u64>,
    since: Instant,
}

/// Identical events: one series.
#[derive(Hash)]
struct SeriesKey<'a> {
    regarding: ObjectKey<'a>,
    related: Option<ObjectKey<'a>>,
    type_: EventType,
    reason: &'a str,
    action: &'a str,
    /// The note, or nothing for the aggregate of similar events.
    note: Option<&'a str>,
}

/// A written event (its `eventTime`, which also names it) and how often it occurred; `order`
/// serialises its writes.
struct Series {
    first: jiff::Timestamp,
    count: i32,
    order: Arc<tokio::sync::Mutex<()>>,
}

impl Correlator {
    /// What to write for `event` (and the lock its series' writes take in turn), or nothing
    /// when the spam filter drops it.
    fn correlate(
        &mut self,
        reporter: &Reporter,
        mut event: Event,
        now: Instant,
    ) -> Option<(Write, Arc<tokio::sync::Mutex<()>>)> {
        let object = ObjectKey::of(&event.regarding);
        let similar = self.ids.of(&SimilarKey {
            object: &object,
            type_: event.type_,
            reason: &event.reason,
        });
        let object = self.ids.of(&object);
        let aggregated = self.aggregate(similar, &mut event, now);
        let key = self.ids.of(&SeriesKey {
            regarding: ObjectKey::with_field(&event.regarding),
            related: event.related.as_ref().map(ObjectKey::with_field),
            type_: event.type_,
            reason: &event.reason,
            action: &event.action,
            note: (!aggregated).then_some(event.note.as_str()),
        });
        let wall = jiff::Timestamp::now();
        let write = match self.series.get_mut(&key) {
            Some(series) => {
                series.count += 1;
                Write::Series {
                    series: EventSeries {
                        count: series.count,
                        last_observed_time: MicroTime(wall),
                    },
                    object: new_object(reporter, &event, series.first),
                }
            }
            None => {
                let series = Series {
                    first: wall,
                    count: 1,
                    order: Arc::default(),
                };
                self.series.insert(key, series);
                Write::Create(new_object(reporter, &event, wall))
            }
        };
        let order = self.series.get_mut(&key)?.order.clone();
        self.allow(object, now).then_some((write, order))
    }

    /// Counts `event` among its similar ones (`similar`); once more than [`AGGREGATE_MAX`]
    /// distinct notes came within the interval, rewrites its note as the combined one and
    /// returns true.
    fn aggregate(&mut self, similar: Id, event: &mut Event, now: Instant) -> bool {
        let note = self.ids.0.hash_one(&event.note);
        let similar = self.similar.get_or_insert_with(similar, || Similar {
            notes: Default::default(),
            since: now,
        });
        if now.duration_since(similar.since) > AGGREGATE_INTERVAL {
            similar.notes.clear();
            similar.since = now;
        }
        similar.notes.insert(note);
        if similar.notes.len() < AGGREGATE_MAX {
            return false;
        }
        event.note = format!("{COMBINED}{}", event.note);
        true
    }

    /// The spam filter: a token bucket per object.
    fn allow(&mut self, object: Id, now: Instant) -> bool {
        let (tokens, at) = self.spam.get_or_insert_with(object, || (SPAM_BURST, now));
        let refill = now.saturating_duration_since(*at).as_secs_f64() / SPAM_REFILL.as_secs_f64();
        *tokens = (*tokens + refill).min(SPAM_BURST);
        *at = now;
        if *tokens >= 1.0 {
            *tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// The Event written for an occurrence first seen at `first`, named as upstream names them
/// (`{object}.{unix nanos in hex}`), in the object's namespace (`default` for a cluster-scoped
/// object).
fn new_object(reporter: &Reporter, event: &Event, first: jiff::Timestamp) -> EventObject {
    let name = event.regarding.name.as_deref().unwrap_or_default();
    let namespace = match event.regarding.namespace.as_deref() {
        Some(ns) if !ns.is_empty() => ns,
        _ => "default",
    };
    EventObject {
        metadata: ObjectMeta {
            name: Some(format!("{name}.{:x}", first.as_nanosecond())),
            namespace: Some(namespace.into()),
            ..Default::default()
        },
        event_time: Some(MicroTime(first)),
        reporting_controller: Some(reporter.controller.clone()),
        reporting_instance: Some(reporter.instance.clone()),
        action: Some(event.action.clone()),
        reason: Some(event.reason.clone()),
        note: Some(event.note.clone()),
        type_: Some(event.type_.as_str().into()),
        regarding: Some(event.regarding.clone()),
        related: event.related.clone(),
        ..Default::default()
    }
}

/// A map that forgets its least recently used entry beyond [`CACHE_ENTRIES`].
struct Bounded<K, V> {
    entries: HashMap<K, (u64, V)>,
    by_use: BTreeMap<u64, K>,
    clock: u64,
    capacity: usize,
}

impl<K, V> Default for Bounded<K, V> {
    fn default() -> Self {
        Bounded {
            entries: HashMap::new(),
            by_use: BTreeMap::new(),
            clock: 0,
            capacity: CACHE_ENTRIES,
        }
    }
}

impl<K: Hash + Eq + Clone, V> Bounded<K, V> {
    fn get_mut(&mut self, key: &K) -> Option<&mut V> {
        let (used, _) = self.entries.get_mut(key)?;
        self.by_use.remove(used);
        self.clock += 1;
        *used = self.clock;
        self.by_use.insert(self.clock, key.clone());
        self.entries.get_mut(key).map(|(_, v)| v)
    }

    fn insert(&mut self, key: K, value: V) {
        self.clock += 1;
        if let Some((used, _)) = self.entries.insert(key.clone(), (self.clock, value)) {
            self.by_use.remove(&used);
        }
        self.by_use.insert(self.clock, key);
        while self.entries.len() > self.capacity {
            let Some((_, oldest)) = self.by_use.pop_first() else {
                break;
            };
            self.entries.remove(&oldest);
        }
    }

    fn get_or_insert_with(&mut self, key: K, value: impl FnOnce() -> V) -> &mut V {
        if !self.entries.contains_key(&key) {
            self.insert(key.clone(), value());
        }
        self.get_mut(&key).expect("just inserted")
    }
}

#[cfg(test)]
#[path = "events_tests.rs"]
mod tests;
