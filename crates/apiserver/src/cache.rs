//! The watch cache: one store watch over every object (`/registry/`) keeps, per resource, the
//! current objects (their stored JSON, with their labels and selectable fields) and a bounded
//! window of recent events, and fans events out to API watchers through a broadcast channel. Lists
//! and watches are served from here without a store round trip per client.
//!
//! An object's JSON is the store's own buffer of it (a shared `Bytes`, see [`Stamped`]): with the
//! embedded store the cache adds no second copy of any object, only its labels and fields.
//!
//! Invariants: `Shared::rv` is the revision every per-resource state is complete up to; an event
//! is appended to a resource's history and sent on its channel under that resource's write lock,
//! so a watcher that snapshots under the read lock and subscribes before releasing it sees every
//! later event exactly once.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::StreamExt;
use parking_lot::{Mutex, RwLock};
use serde_json::Value;
use skiff_apimachinery::catalog::{self, ResourceType};
use skiff_apimachinery::fields;
use skiff_store::{EventKind, KeyRange, RangeRequest, Store, WatchControl, WatchRequest};
use tokio::sync::{broadcast, mpsc, oneshot, watch};

use crate::error::{ApiError, Result};
use crate::stamped::Stamped;
use crate::storage;
use crate::strategy::{self, Strategy, StrategyRef};

/// Events kept per resource for watches that resume from a recent resourceVersion: those of the
/// last [`HISTORY_FRESH`], never fewer than [`HISTORY_MIN`], and beyond that no more than
/// [`HISTORY_MAX`] events or [`HISTORY_BYTES`] of objects (upstream's watch cache keeps 75 s,
/// growing to 100 × 1024 events). A client whose watch ended (its timeout, a reconnect the
/// fairness queues refused and it backed off from) resumes without a relist if it is back within
/// the window; at 5,000 nodes a fixed 10,000 pod events spanned about 15 s.
pub const HISTORY_MIN: usize = 10_000;
/// See [`HISTORY_MIN`].
pub const HISTORY_MAX: usize = 100 * 1024;
/// See [`HISTORY_MIN`].
pub const HISTORY_FRESH: Duration = Duration::from_secs(75);
/// See [`HISTORY_MIN`]: the objects' stored JSON, counted once per event.
pub const HISTORY_BYTES: usize = 128 << 20;
/// Events buffered per resource for live watchers; a watcher that falls further behind is closed
/// and resumes from its last resourceVersion (served from the history). The buffer is allocated
/// whole (48 bytes a slot) when a resource is first watched: 1024 keeps the 52 built-in ones at
/// 2.5 MB, where 4096 took 10 MB of an idle server's 40 MB heap, and a resource nobody watches
/// (most custom resources of a cluster with many CRDs) costs nothing.
const FANOUT: usize = 1024;
/// Events buffered per value of an indexed field (a node's pods, see [`ResourceCache::watch`]):
/// a node's share of the changes is small, and 5,000 nodes' channels take 30 MB.
const INDEXED_FANOUT: usize = 128;
/// A resource's watchers hear of the cache's progress at most this often. Every consistent read
/// that finds the cache behind asks the store for progress; passed on to every watcher each time,
/// the kubelets' consistent lists at 5,000 nodes filled each node's channel with progress alone,
/// and closed thousands of watches as lagging. A watch only needs it for its bookmarks (at most
/// every 5 s) and its resume point.
const PROGRESS_EVERY: Duration = Duration::from_secs(1);

/// One object as the cache holds it.
#[derive(Debug, Clone)]
pub struct Cached {
    pub namespace: String,
    pub name: String,
    pub revision: i64,
    /// The object's stored JSON (without `resourceVersion`, which is `revision`).
    stored: Stamped,
    pub labels: LabelSet,
    /// The kind's own field-selector values (`metadata.name` and `metadata.namespace` are
    /// [`Cached::name`] and [`Cached::namespace`]).
    fields: Box<[(&'static str, Box<str>)]>,
}

/// An object's labels as the cache keeps them: sorted pairs in one allocation. A `BTreeMap`
/// takes a node of about 550 bytes for even one label, and the cache holds every pod's.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LabelSet(Box<[(Box<str>, Box<str>)]>);

impl LabelSet {
    /// The labels of `metadata.labels` (values that are not strings left out).
    fn of(labels: &Value) -> LabelSet {
        let mut pairs: Vec<(Box<str>, Box<str>)> = labels
            .as_object()
            .into_iter()
            .flatten()
            .filter_map(|(k, v)| Some((k.as_str().into(), v.as_str()?.into())))
            .collect();
        pairs.sort_unstable();
        LabelSet(pairs.into_boxed_slice())
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        let i = self.0.binary_search_by(|(k, _)| (**k).cmp(key)).ok()?;
        Some(&self.0[i].1)
    }
}

impl skiff_apimachinery::labels::Labels for LabelSet {
    fn get(&self, key: &str) -> Option<&str> {
        LabelSet::get(self, key)
    }
}

impl Cached {
    /// An object from its stored JSON (`value` of a store key), as of `revision`. The bytes are
    /// kept as they are (shared with whoever else holds them), unless they are not in the stored
    /// form (a `resourceVersion` in them) or the strategy defaults something on read (a custom
    /// resource's schema), then they are encoded again.
    pub fn from_stored(
        strategy: &dyn Strategy,
        value: &Bytes,
        revision: i64,
        key: &[u8],
    ) -> Result<Self> {
        crate::storage::check_readable(value)?;
        let mut object: Value = serde_json::from_slice(value).map_err(|e| {
            ApiError::internal(format!(
                "decoding object at {}: {e}",
                String::from_utf8_lossy(key)
            ))
        })?;
        let stored = match Stamped::new(value.clone()) {
            Ok(_) if strategy.default_on_read(&mut object) => Self::stamped(&object)?,
            Ok(s) => s,
            Err(_) => Self::stamped(&object)?,
        };
        Ok(Self::with_stored(strategy, &object, revision, stored))
    }

    /// An object from its decoded form (its `resourceVersion`, if any, is replaced by
    /// `revision`).
    pub fn from_object(strategy: &dyn Strategy, object: &Value, revision: i64) -> Result<Self> {
        let stored = Self::stamped(object)?;
        Ok(Self::with_stored(strategy, object, revision, stored))
    }

    fn stamped(object: &Value) -> Result<Stamped> {
        let bytes = storage::encode(object);
        Stamped::encoded(bytes).map_err(|e| {
            ApiError::internal(format!("encoding {}: {e:?}", object["metadata"]["name"]))
        })
    }

    fn with_stored(
        strategy: &dyn Strategy,
        object: &Value,
        revision: i64,
        stored: Stamped,
    ) -> Self {
        let meta = &object["metadata"];
        let name = meta["name"].as_str().unwrap_or_default().to_string();
        let namespace = meta["namespace"].as_str().unwrap_or_default().to_string();
        let fields = strategy
            .fields(object)
            .into_iter()
            .map(|(f, v)| (f, v.into_boxed_str()))
            .collect();
        Cached {
            namespace,
            name,
            revision,
            stored,
            labels: LabelSet::of(&meta["labels"]),
            fields,
        }
    }

    /// Appends the object's JSON, with `metadata.resourceVersion` = `revision`.
    pub fn write_json(&self, out: &mut Vec<u8>) {
        self.stored.write(self.revision, out);
    }

    /// The object's JSON, with `metadata.resourceVersion` = `revision`.
    pub fn json(&self) -> Vec<u8> {
        self.stored.to_vec(self.revision)
    }

    /// About how long [`Cached::json`] is.
    pub fn json_len(&self) -> usize {
        self.stored.len_hint()
    }

    /// The object's key below the resource prefix (`namespace/name` or `name`): the order of
    /// store keys, so cache pages and store pages agree.
    pub fn path(&self) -> String {
        if self.namespace.is_empty() {
            self.name.clone()
        } else {
            format!("{}/{}", self.namespace, self.name)
        }
    }

    pub fn field(&self, name: &str) -> Option<&str> {
        match name {
            "metadata.name" => Some(&self.name),
            "metadata.namespace" => Some(&self.namespace),
            _ => self
                .fields
                .iter()
                .find(|(f, _)| *f == name)
                .map(|(_, v)| &**v),
        }
    }

    pub fn object(&self) -> Result<Value> {
        let mut object: Value = serde_json::from_slice(self.stored.stored())
            .map_err(|e| ApiError::internal(format!("decoding cached {}: {e}", self.name)))?;
        storage::set_resource_version(&mut object, self.revision);
        Ok(object)
    }

    /// The fields of the object that `T` declares (`resourceVersion` is not among them): a
    /// loop that reads every object of a type on each change decodes only what it needs.
    pub fn decode<T: serde::de::DeserializeOwned>(&self) -> Result<T> {
        serde_json::from_slice(self.stored.stored())
            .map_err(|e| ApiError::internal(format!("decoding cached {}: {e}", self.name)))
    }
}

/// What happened to an object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    Added,
    Modified,
    Deleted,
}

/// One entry of the event stream of a resource.
#[derive(Debug, Clone)]
pub enum CacheEvent {
    /// An object changed at `object.revision`; `prev` is its state before (absent for adds).
    Object {
        change: Change,
        object: Arc<Cached>,
        prev: Option<Arc<Cached>>,
    },
    /// Everything up to this revision has been sent (for bookmarks).
    Progress(i64),
    /// The cache was listed again at this revision (its store watch could not resume): what
    /// changed before was not sent, so a watch ends here and its client resumes, which from an
    /// older revision is 410 Gone (upstream's cacher ends its watchers when it relists).
    Reset(i64),
}

#[derive(Debug, Default)]
struct State {
    objects: BTreeMap<String, Arc<Cached>>,
    /// Recent events, oldest first, each with when it was applied.
    history: VecDeque<(Instant, CacheEvent)>,
    /// The size of `history`'s objects, as [`event_bytes`] counts it.
    history_bytes: usize,
    /// Events with a revision above this are all in `history`.
    history_floor: i64,
    /// The store revision `objects` is complete up to (advanced after every store batch, under
    /// the write lock, so a snapshot and its revision always agree).
    revision: i64,
    /// The revision of the last change to an object of this resource.
    last_change: i64,
    /// The keys of the objects per non-empty value of the type's indexed field
    /// ([`Strategy::watch_index`]: a node's pods).
    by_index: HashMap<String, BTreeSet<String>>,
    /// When watchers were last told of progress.
    progress_sent: Option<Instant>,
}

impl State {
    /// Appends `event`, applied at `now`, to the history, and lets go of the oldest events that
    /// [`HISTORY_MIN`] and its companions no longer keep.
    fn remember(&mut self, event: CacheEvent, now: Instant) {
        self.history_bytes += event_bytes(&event);
        self.history.push_back((now, event));
        while let Some((at, oldest)) = self.history.front() {
            let len = self.history.len();
            let kept = len <= HISTORY_MIN
                || (len <= HISTORY_MAX
                    && self.history_bytes <= HISTORY_BYTES
                    && now.saturating_duration_since(*at) <= HISTORY_FRESH);
            if kept {
                break;
            }
            self.history_floor = event_revision(oldest);
            self.history_bytes -= event_bytes(oldest);
            self.history.pop_front();
        }
    }

    /// Moves `key` in the index from its `prev` object's value to its `now` object's.
    fn reindex(&mut self, field: &str, key: &str, prev: Option<&Cached>, now: Option<&Cached>) {
        fn value<'a>(c: Option<&'a Cached>, field: &str) -> Option<&'a str> {
            c.and_then(|c| c.field(field)).filter(|v| !v.is_empty())
        }
        let (before, after) = (value(prev, field), value(now, field));
        if before == after {
            return;
        }
        if let Some(before) = before
            && let Some(keys) = self.by_index.get_mut(before)
        {
            keys.remove(key);
            if keys.is_empty() {
                self.by_index.remove(before);
            }
        }
        if let Some(after) = after {
            self.by_index
                .entry(after.to_string())
                .or_default()
                .insert(key.to_string());
        }
    }
}

/// The cache of one resource type.
pub struct ResourceCache {
    pub rt: Arc<ResourceType>,
    /// The type's strategy, for the field-selector values of its objects.
    pub strategy: StrategyRef,
    state: RwLock<State>,
    /// Made by the first watch, under the read lock; events are sent under the write lock, so
    /// no event is sent while it is being made.
    events: OnceLock<broadcast::Sender<CacheEvent>>,
    /// Per value of the type's indexed field ([`Strategy::watch_index`]), the channel of the
    /// watches that select that value; made under the read lock and sent on under the write
    /// lock, as `events`.
    indexed: Mutex<HashMap<String, broadcast::Sender<CacheEvent>>>,
}

impl std::fmt::Debug for ResourceCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResourceCache")
            .field("resource", &self.rt.plural)
            .finish_non_exhaustive()
    }
}

/// A consistent view handed to a reader: the objects at `revision`, and for watchers the
/// receiver subscribed at exactly that point.
pub struct Snapshot {
    pub revision: i64,
    pub objects: Vec<Arc<Cached>>,
}

/// Where a watch starts.
pub enum WatchStart {
    /// The current state as ADDED events, then changes (watch from `""`/`"0"`, or
    /// `sendInitialEvents`).
    Snapshot(Snapshot, broadcast::Receiver<CacheEvent>),
    /// The events after the requested revision, then changes.
    Replay(Vec<CacheEvent>, broadcast::Receiver<CacheEvent>),
}

/// The objects of some resources at one moment, and their changes after it
/// ([`Cacher::subscribe`]).
pub struct Subscription {
    /// One per resource subscribed to, in order.
    pub snapshots: Vec<Snapshot>,
    receivers: Vec<broadcast::Receiver<CacheEvent>>,
}

impl Subscription {
    /// Waits until an object of one of the resources changes (a subscriber that fell behind
    /// counts as a change): true; false once the cache stopped.
    pub async fn changed(&mut self) -> bool {
        self.changed_if(|_, _| true).await
    }

    /// [`Subscription::changed`], counting only the changes `concerns` (given the resource's
    /// index in the subscription) says concern the subscriber, before or after the change.
    pub async fn changed_if(&mut self, concerns: impl Fn(usize, &Cached) -> bool) -> bool {
        loop {
            let next = self.receivers.iter_mut().map(|rx| Box::pin(rx.recv()));
            let (event, index, _) = futures::future::select_all(next).await;
            match event {
                Ok(CacheEvent::Object { object, prev, .. }) => {
                    if concerns(index, &object) || prev.is_some_and(|p| concerns(index, &p)) {
                        return true;
                    }
                }
                Ok(CacheEvent::Reset(_)) | Err(broadcast::error::RecvError::Lagged(_)) => {
                    return true;
                }
                Ok(CacheEvent::Progress(_)) => continue,
                Err(broadcast::error::RecvError::Closed) => return false,
            }
        }
    }
}

impl ResourceCache {
    fn new(rt: Arc<ResourceType>, strategy: StrategyRef) -> Self {
        Self {
            rt,
            strategy,
            state: RwLock::new(State::default()),
            events: OnceLock::new(),
            indexed: Mutex::default(),
        }
    }

    /// The objects of `namespace` that `fields` can select ([`ResourceCache::list_selected`]) as
    /// they were at `revision`, if the cache can tell exactly: no object of this resource changed
    /// since, and the cache has reached it (continue pages of a list then need no store read).
    pub fn list_at(
        &self,
        namespace: &str,
        fields: &fields::Selector,
        revision: i64,
    ) -> Option<Snapshot> {
        let state = self.state.read();
        (state.last_change <= revision && revision <= state.revision).then(|| Snapshot {
            revision,
            objects: self.candidates(&state, namespace, fields),
        })
    }

    /// The revision above which the cache holds every event (a watch from an older one is
    /// expired).
    pub fn history_floor(&self) -> i64 {
        self.state.read().history_floor
    }

    /// One object by its path (`namespace/name` or `name`).
    pub fn get(&self, path: &str) -> Option<Arc<Cached>> {
        self.state.read().objects.get(path).cloned()
    }

    /// The revision of the last change to an object of this resource (authorizers rebuild
    /// their indexes when it moves).
    pub fn last_change(&self) -> i64 {
        self.state.read().last_change
    }

    /// How many objects the cache holds.
    pub fn len(&self) -> usize {
        self.state.read().objects.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The objects of `namespace` (all when empty) at the cache's revision, in key order.
    pub fn list(&self, namespace: &str) -> Snapshot {
        self.list_selected(namespace, &fields::Selector::everything())
    }

    /// [`ResourceCache::list`], of only the objects the field selector `fields` can select when
    /// it pins the type's indexed field (a kubelet's `spec.nodeName=n1`): those filed under the
    /// value, found without a look at the others, as upstream's cacher lists by its indexes.
    /// Otherwise every object of `namespace`; the caller still applies its selectors.
    pub fn list_selected(&self, namespace: &str, fields: &fields::Selector) -> Snapshot {
        let state = self.state.read();
        Snapshot {
            revision: state.revision,
            objects: self.candidates(&state, namespace, fields),
        }
    }

    /// The objects of `namespace` (all when empty) whose indexed field
    /// ([`Strategy::watch_index`]) is `value`, in key order; none for a type without one.
    pub fn indexed(&self, value: &str, namespace: &str) -> Vec<Arc<Cached>> {
        Self::filed_under(&self.state.read(), value, namespace)
    }

    /// The objects of `namespace` that the field selector `fields` can select: those filed under
    /// the value it pins the indexed field to (not empty: objects without a value are not filed),
    /// else all of `namespace`; in key order.
    fn candidates(
        &self,
        state: &State,
        namespace: &str,
        fields: &fields::Selector,
    ) -> Vec<Arc<Cached>> {
        match self.pinned(fields) {
            Some((_, value)) if !value.is_empty() => Self::filed_under(state, value, namespace),
            _ => Self::select(state, namespace),
        }
    }

    /// The type's indexed field and the value `fields` requires of it, if it has one and
    /// requires one.
    fn pinned<'a>(&self, fields: &'a fields::Selector) -> Option<(&'static str, &'a str)> {
        let field = self.strategy.watch_index()?;
        Some((field, fields.single_equality(field)?))
    }

    fn filed_under(state: &State, value: &str, namespace: &str) -> Vec<Arc<Cached>> {
        let Some(keys) = state.by_index.get(value) else {
            return Vec::new();
        };
        let in_namespace = |key: &&String| {
            namespace.is_empty()
                || key
                    .strip_prefix(namespace)
                    .is_some_and(|rest| rest.starts_with('/'))
        };
        keys.iter()
            .filter(in_namespace)
            .filter_map(|key| state.objects.get(key).cloned())
            .collect()
    }

    fn select(state: &State, namespace: &str) -> Vec<Arc<Cached>> {
        if namespace.is_empty() {
            state.objects.values().cloned().collect()
        } else {
            // Keys are `namespace/name`; '0' follows '/' so this is exactly one namespace.
            state
                .objects
                .range(format!("{namespace}/")..format!("{namespace}0"))
                .map(|(_, v)| v.clone())
                .collect()
        }
    }

    /// Starts a watch whose field selector is `fields`: from a snapshot (`from` = None) or after
    /// revision `from`. `None` as the result means the revision is older than the history
    /// window (the caller falls back to the store).
    ///
    /// As upstream's cacher, a watch whose selector requires one value of the type's indexed
    /// field (a kubelet's pods: `spec.nodeName=n1`) is offered only the changes of objects
    /// that have that value before or after them, not every change of the resource.
    pub fn watch(
        &self,
        namespace: &str,
        from: Option<i64>,
        fields: &fields::Selector,
    ) -> Option<WatchStart> {
        let state = self.state.read();
        let pinned = self.pinned(fields);
        let rx = match pinned {
            Some((_, value)) => self
                .indexed
                .lock()
                .entry(value.to_string())
                .or_insert_with(|| broadcast::channel(INDEXED_FANOUT).0)
                .subscribe(),
            None => self
                .events
                .get_or_init(|| broadcast::channel(FANOUT).0)
                .subscribe(),
        };
        match from {
            None => Some(WatchStart::Snapshot(
                Snapshot {
                    revision: state.revision,
                    objects: self.candidates(&state, namespace, fields),
                },
                rx,
            )),
            Some(rv) if rv < state.history_floor => None,
            Some(rv) => {
                let start = state
                    .history
                    .partition_point(|(_, e)| event_revision(e) <= rv);
                // an indexed watch resumes with what it would have been offered live
                let offered = |e: &&CacheEvent| {
                    pinned.is_none_or(|(field, value)| {
                        indexed_values(field, e)
                            .is_none_or(|(now, before)| now == value || before == Some(value))
                    })
                };
                Some(WatchStart::Replay(
                    state
                        .history
                        .range(start..)
                        .map(|(_, e)| e)
                        .filter(offered)
                        .cloned()
                        .collect(),
                    rx,
                ))
            }
        }
    }

    fn apply(&self, key: String, object: Option<Arc<Cached>>, revision: i64) {
        let mut state = self.state.write();
        state.revision = state.revision.max(revision);
        state.last_change = revision;
        let prev = match &object {
            Some(o) => state.objects.insert(key.clone(), o.clone()),
            None => state.objects.remove(&key),
        };
        if let Some(field) = self.strategy.watch_index() {
            state.reindex(field, &key, prev.as_deref(), object.as_deref());
        }
        let event = match (object, prev) {
            (Some(object), None) => CacheEvent::Object {
                change: Change::Added,
                object,
                prev: None,
            },
            (Some(object), Some(prev)) => CacheEvent::Object {
                change: Change::Modified,
                object,
                prev: Some(prev),
            },
            (None, Some(prev)) => {
                // A DELETED event carries the last state stamped with the deletion revision.
                let object = restamp(&prev, revision);
                CacheEvent::Object {
                    change: Change::Deleted,
                    object,
                    prev: Some(prev),
                }
            }
            (None, None) => return,
        };
        state.remember(event.clone(), Instant::now());
        self.send(event);
    }

    fn reset(&self, objects: BTreeMap<String, Arc<Cached>>, revision: i64) {
        let mut state = self.state.write();
        state.by_index.clear();
        if let Some(field) = self.strategy.watch_index() {
            for (key, object) in &objects {
                state.reindex(field, key, None, Some(object));
            }
        }
        state.objects = objects;
        state.history.clear();
        state.history_bytes = 0;
        state.history_floor = revision;
        state.revision = revision;
        state.last_change = revision;
        self.send(CacheEvent::Reset(revision));
    }

    /// Marks everything up to `revision` as applied; with `notify`, tells watchers (bookmarks),
    /// unless they were told less than [`PROGRESS_EVERY`] ago.
    fn advance(&self, revision: i64, notify: bool) {
        let mut state = self.state.write();
        state.revision = state.revision.max(revision);
        if notify
            && state
                .progress_sent
                .is_none_or(|at| at.elapsed() >= PROGRESS_EVERY)
        {
            state.progress_sent = Some(Instant::now());
            self.send(CacheEvent::Progress(state.revision));
        }
    }

    /// Tells the watchers, if there ever were any (call under the write lock).
    fn send(&self, event: CacheEvent) {
        if let Some(field) = self.strategy.watch_index() {
            self.send_indexed(field, &event);
        }
        if let Some(events) = self.events.get() {
            let _ = events.send(event);
        }
    }

    /// Tells the watches indexed by `field`: an object's change goes to those of its value
    /// before and after it, anything else to all of them. A value's channel goes once no watch
    /// is left on it.
    fn send_indexed(&self, field: &str, event: &CacheEvent) {
        let mut indexed = self.indexed.lock();
        let Some((now, before)) = indexed_values(field, event) else {
            indexed.retain(|_, tx| tx.send(event.clone()).is_ok());
            return;
        };
        for value in std::iter::once(now).chain(before.filter(|b| *b != now)) {
            if let Some(tx) = indexed.get(value)
                && tx.send(event.clone()).is_err()
            {
                indexed.remove(value);
            }
        }
    }
}

/// An object event's values of the indexed `field` after and before the change (empty when
/// unset); none for an event that concerns every watch (progress, a relist).
fn indexed_values<'e>(field: &str, event: &'e CacheEvent) -> Option<(&'e str, Option<&'e str>)> {
    let CacheEvent::Object { object, prev, .. } = event else {
        return None;
    };
    let value = |c: &'e Cached| c.field(field).unwrap_or_default();
    Some((value(object), prev.as_deref().map(value)))
}

/// What an event's object adds to the history's size (its stored JSON; an earlier version it
/// carries is another event's object, or soon is no one else's).
fn event_bytes(e: &CacheEvent) -> usize {
    match e {
        CacheEvent::Object { object, .. } => object.json_len(),
        CacheEvent::Progress(_) | CacheEvent::Reset(_) => 0,
    }
}

fn event_revision(e: &CacheEvent) -> i64 {
    match e {
        CacheEvent::Object { object, .. } => object.revision,
        CacheEvent::Progress(rv) | CacheEvent::Reset(rv) => *rv,
    }
}

fn restamp(c: &Cached, revision: i64) -> Arc<Cached> {
    Arc::new(Cached {
        revision,
        ..c.clone()
    })
}

/// A storage id: the first two segments of a key (`core`, `pods`).
type StorageId = (String, String);

/// The caches, by storage id (for store events) and by served type (`(group, plural)`, for
/// requests; two types may share one storage, as the two Event APIs do).
#[derive(Default)]
struct Caches {
    by_storage: HashMap<StorageId, Arc<ResourceCache>>,
    by_type: HashMap<(String, String), Arc<ResourceCache>>,
}

impl Caches {
    /// Adds the cache of a built-in type; types sharing storage (the two Event APIs) share
    /// the cache of the first.
    fn add(&mut self, rt: &Arc<ResourceType>) {
        let cache = self
            .by_storage
            .entry(storage::storage_id(rt))
            .or_insert_with(|| {
                let strategy = StrategyRef::Builtin(strategy::for_resource(rt));
                Arc::new(ResourceCache::new(rt.clone(), strategy))
            })
            .clone();
        self.by_type
            .insert((rt.group.clone(), rt.plural.clone()), cache);
    }
}

/// What the run loop is asked to do besides applying store events.
enum Command {
    /// Add a cache for a type installed at run time, filled as of the loop's revision, and say
    /// when it is in place.
    Install(ResourceType, StrategyRef, oneshot::Sender<Result<()>>),
}

/// The caches of every resource, fed by one store watch.
///
/// The set of caches changes while serving (custom resources). A cache is added only by the
/// run loop, between store batches: it is filled by a store read at the revision every other
/// cache is complete up to, so it then receives exactly the events after it. Removal needs no
/// such care and happens at once; dropping the cache closes its channel, which ends its
/// watches.
pub struct Cacher {
    store: Arc<dyn Store>,
    /// Read by every request and store batch, written on install and removal.
    caches: RwLock<Caches>,
    revision: watch::Sender<i64>,
    control: Mutex<Option<Arc<dyn WatchControl>>>,
    commands: mpsc::UnboundedSender<Command>,
}

impl std::fmt::Debug for Cacher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cacher")
            .field("revision", &*self.revision.borrow())
            .finish_non_exhaustive()
    }
}

impl Cacher {
    /// Lists everything once and starts the watch that keeps the caches current.
    pub async fn start(store: Arc<dyn Store>) -> Result<Arc<Self>> {
        let mut caches = Caches::default();
        for rt in catalog::builtins() {
            caches.add(rt);
        }
        let (commands, requests) = mpsc::unbounded_channel();
        let cacher = Arc::new(Cacher {
            store,
            caches: RwLock::new(caches),
            revision: watch::channel(0).0,
            control: Mutex::new(None),
            commands,
        });
        let revision = cacher.relist().await?;
        let this = cacher.clone();
        tokio::spawn(async move { this.run(revision, requests).await });
        let this = Arc::downgrade(&cacher);
        tokio::spawn(async move {
            // Periodic progress: lets idle resources' watchers get bookmarks and consistent
            // reads find the cache current without an event.
            loop {
                tokio::time::sleep(Duration::from_secs(5)).await;
                let Some(this) = this.upgrade() else { return };
                this.request_progress();
            }
        });
        Ok(cacher)
    }

    /// The cache of a type: built-in types always have one.
    ///
    /// # Panics
    /// For a type installed at run time and since removed; requests use [`Cacher::get`].
    pub fn resource(&self, rt: &ResourceType) -> Arc<ResourceCache> {
        self.get(rt)
            .unwrap_or_else(|| panic!("no watch cache for {}/{}", rt.group, rt.plural))
    }

    /// The objects of `types` now, and their changes from then on: what a controller inside
    /// the API server syncs from and waits on. `None` when one of them is not served.
    pub fn subscribe(&self, types: &[&ResourceType]) -> Option<Subscription> {
        let mut snapshots = Vec::with_capacity(types.len());
        let mut receivers = Vec::with_capacity(types.len());
        for rt in types {
            let Some(WatchStart::Snapshot(snapshot, rx)) =
                self.get(rt)?.watch("", None, &fields::Selector::default())
            else {
                return None;
            };
            snapshots.push(snapshot);
            receivers.push(rx);
        }
        Some(Subscription {
            snapshots,
            receivers,
        })
    }

    /// The cache of a type, if it is served.
    pub fn get(&self, rt: &ResourceType) -> Option<Arc<ResourceCache>> {
        let key = (rt.group.clone(), rt.plural.clone());
        self.caches.read().by_type.get(&key).cloned()
    }

    /// Adds the cache of a type installed at run time and returns once the cache is complete:
    /// from then on, lists and watches of the type are served. A type installed again (its
    /// definition changed) gets a new cache read with its new strategy, and the old one's
    /// watches end, as upstream ends them when a CRD changes.
    pub async fn install(&self, rt: &ResourceType, strategy: StrategyRef) -> Result<()> {
        let (tx, rx) = oneshot::channel();
        self.commands
            .send(Command::Install(rt.clone(), strategy, tx))
            .map_err(|_| ApiError::internal("the watch cache has stopped"))?;
        rx.await
            .map_err(|_| ApiError::internal("the watch cache has stopped"))?
    }

    /// Drops the cache of a type installed at run time: its watches end. The storage's cache
    /// stays while another type still uses it.
    pub fn remove(&self, group: &str, plural: &str) {
        let mut caches = self.caches.write();
        let Some(cache) = caches
            .by_type
            .remove(&(group.to_string(), plural.to_string()))
        else {
            return;
        };
        if !caches.by_type.values().any(|c| Arc::ptr_eq(c, &cache)) {
            let id = storage::storage_id(&cache.rt);
            caches.by_storage.remove(&id);
        }
    }

    /// The cache stored under storage group `g` and resource `p` (a key's first two segments).
    fn find(&self, g: &str, p: &str) -> Option<Arc<ResourceCache>> {
        let id = (g.to_string(), p.to_string());
        self.caches.read().by_storage.get(&id).cloned()
    }

    /// The revision the caches are complete up to.
    pub fn revision(&self) -> i64 {
        *self.revision.borrow()
    }

    /// Every cache with its storage id.
    fn all(&self) -> Vec<(StorageId, Arc<ResourceCache>)> {
        let caches = self.caches.read();
        caches
            .by_storage
            .iter()
            .map(|(id, c)| (id.clone(), c.clone()))
            .collect()
    }

    /// Reads every object of one cache's storage at `revision`.
    async fn load(
        &self,
        rt: &ResourceType,
        strategy: &dyn Strategy,
        revision: i64,
    ) -> Result<BTreeMap<String, Arc<Cached>>> {
        let resp = self
            .store
            .range(RangeRequest {
                range: KeyRange::prefix(storage::prefix(rt, "").into_bytes()),
                revision,
                ..Default::default()
            })
            .await?;
        let mut objects = BTreeMap::new();
        for kv in &resp.kvs {
            match Cached::from_stored(strategy, &kv.value, kv.mod_revision, &kv.key) {
                Ok(c) => {
                    objects.insert(c.path(), Arc::new(c));
                }
                Err(e) => {
                    let key = String::from_utf8_lossy(&kv.key);
                    tracing::warn!(key = %key, error = %e, "skipping undecodable object");
                }
            }
        }
        Ok(objects)
    }

    /// Carries out a command, between store batches: the caches are complete up to
    /// `revision`.
    async fn command(&self, command: Command, revision: i64) {
        match command {
            Command::Install(rt, strategy, done) => {
                let _ = done.send(self.add(rt, strategy, revision).await);
            }
        }
    }

    /// Adds the cache of `rt`, sharing its storage's cache if another type has one, else
    /// filled as of `revision` (replacing the type's own old cache).
    async fn add(&self, rt: ResourceType, strategy: StrategyRef, revision: i64) -> Result<()> {
        let key = (rt.group.clone(), rt.plural.clone());
        let id = storage::storage_id(&rt);
        let shared = {
            let caches = self.caches.read();
            let own = caches.by_type.get(&key);
            caches
                .by_storage
                .get(&id)
                .filter(|c| own.is_none_or(|own| !Arc::ptr_eq(own, c)))
                .cloned()
        };
        let cache = match shared {
            Some(cache) => cache,
            None => {
                let objects = self.load(&rt, &*strategy, revision).await?;
                let cache = Arc::new(ResourceCache::new(Arc::new(rt), strategy));
                cache.reset(objects, revision);
                cache
            }
        };
        let mut caches = self.caches.write();
        caches.by_storage.insert(id, cache.clone());
        caches.by_type.insert(key, cache);
        Ok(())
    }

    async fn relist(&self) -> Result<i64> {
        let resp = self
            .store
            .range(RangeRequest {
                range: KeyRange::prefix(storage::ROOT.as_bytes().to_vec()),
                ..Default::default()
            })
            .await?;
        let all = self.all();
        let mut fresh: HashMap<StorageId, BTreeMap<String, Arc<Cached>>> = HashMap::new();
        for kv in &resp.kvs {
            let key = String::from_utf8_lossy(&kv.key);
            let Some((g, p, _, _)) = storage::parse_key(&key) else {
                continue;
            };
            let Some((id, cache)) = all.iter().find(|((sg, sp), _)| sg == g && sp == p) else {
                continue;
            };
            match Cached::from_stored(&*cache.strategy, &kv.value, kv.mod_revision, &kv.key) {
                Ok(c) => {
                    fresh
                        .entry(id.clone())
                        .or_default()
                        .insert(c.path(), Arc::new(c));
                }
                Err(e) => tracing::warn!(key = %key, error = %e, "skipping undecodable object"),
            }
        }
        for (id, cache) in &all {
            cache.reset(fresh.remove(id).unwrap_or_default(), resp.revision);
        }
        self.revision.send_replace(resp.revision);
        Ok(resp.revision)
    }

    async fn run(
        self: Arc<Self>,
        mut revision: i64,
        mut commands: mpsc::UnboundedReceiver<Command>,
    ) {
        loop {
            let watch = self
                .store
                .watch(WatchRequest {
                    range: KeyRange::prefix(storage::ROOT.as_bytes().to_vec()),
                    start_revision: revision + 1,
                    prev_kv: true,
                    progress_notify: true,
                })
                .await;
            let mut stream = match watch {
                Ok(s) => s,
                Err(e) => {
                    tracing::warn!(error = %e, "watch cache: store watch failed; retrying");
                    tokio::time::sleep(Duration::from_millis(500)).await;
                    continue;
                }
            };
            *self.control.lock() = Some(stream.control());
            loop {
                let batch = tokio::select! {
                    batch = stream.next() => batch,
                    Some(command) = commands.recv() => {
                        self.command(command, revision).await;
                        continue;
                    }
                };
                let Some(batch) = batch else { break };
                match batch {
                    Ok(batch) => {
                        for ev in &batch.events {
                            self.apply(ev);
                        }
                        let progress = batch.events.is_empty();
                        revision = revision.max(reached(&batch));
                        // Lock order: the set of caches, then one cache's state.
                        for cache in self.caches.read().by_storage.values() {
                            cache.advance(revision, progress);
                        }
                        self.revision.send_replace(revision);
                    }
                    Err(skiff_store::Error::WatcherLagged { next_revision }) => {
                        revision = next_revision - 1;
                        break;
                    }
                    // the store no longer has the revisions to resume from: list again
                    Err(e @ skiff_store::Error::Compacted { .. }) => {
                        tracing::warn!(error = %e, "watch cache: relisting");
                        loop {
                            match self.relist().await {
                                Ok(r) => {
                                    revision = r;
                                    break;
                                }
                                Err(e) => {
                                    tracing::warn!(error = %e, "watch cache: relist failed");
                                    tokio::time::sleep(Duration::from_millis(500)).await;
                                }
                            }
                        }
                        break;
                    }
                    // the store went away (or restarted): resume after the last revision
                    // applied, so no change is missed and no watcher disturbed
                    Err(e) => {
                        tracing::warn!(error = %e, revision, "watch cache: store watch ended; resuming");
                        tokio::time::sleep(Duration::from_millis(200)).await;
                        break;
                    }
                }
            }
        }
    }

    fn apply(&self, ev: &skiff_store::Event) {
        let key = String::from_utf8_lossy(&ev.kv.key);
        let Some((g, p, ns, name)) = storage::parse_key(&key) else {
            return;
        };
        let Some(cache) = self.find(g, p) else {
            return;
        };
        let k = if ns.is_empty() {
            name.to_string()
        } else {
            format!("{ns}/{name}")
        };
        match ev.kind {
            EventKind::Put => {
                match Cached::from_stored(
                    &*cache.strategy,
                    &ev.kv.value,
                    ev.kv.mod_revision,
                    &ev.kv.key,
                ) {
                    Ok(c) => cache.apply(k, Some(Arc::new(c)), ev.kv.mod_revision),
                    Err(e) => tracing::warn!(key = %key, error = %e, "skipping undecodable object"),
                }
            }
            EventKind::Delete => cache.apply(k, None, ev.kv.mod_revision),
        }
    }

    fn request_progress(&self) {
        if let Some(c) = self.control.lock().as_ref() {
            c.request_progress();
        }
    }

    /// Waits until the cache has caught up with the store's current revision (a consistent
    /// read, as upstream's consistent list from cache).
    pub async fn wait_fresh(&self) -> Result<i64> {
        let current = self
            .store
            .range(RangeRequest {
                range: KeyRange::key(b"/registry/".to_vec()),
                count_only: true,
                ..Default::default()
            })
            .await?
            .revision;
        self.wait_for(current).await
    }

    /// Waits (up to 3 s, as upstream) until the cache is at `revision` or later.
    pub async fn wait_for(&self, revision: i64) -> Result<i64> {
        let mut rx = self.revision.subscribe();
        if *rx.borrow() >= revision {
            return Ok(*rx.borrow());
        }
        self.request_progress();
        let wait = rx.wait_for(|r| *r >= revision);
        match tokio::time::timeout(Duration::from_secs(3), wait).await {
            Ok(Ok(r)) => Ok(*r),
            _ => Err(ApiError::timeout(format!(
                "Too large resource version: {revision}, current: {}",
                self.revision()
            ))),
        }
    }
}

/// The revision a watch batch takes the cache to: its last event's, or for a batch without
/// events (progress) its header's. A store catching a watch up stamps each batch with its current
/// revision while more of the catch-up is still to come (etcd, and the embedded store's catch-up
/// in chunks): taken as progress, a list could miss those events and a watch resumed after it
/// skip them. Upstream's watcher, too, takes events' revisions and progress notifications'.
fn reached(batch: &skiff_store::WatchBatch) -> i64 {
    match batch.events.last() {
        Some(last) => last.kv.mod_revision,
        None => batch.revision,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use skiff_apimachinery::catalog::lookup;

    #[test]
    fn a_batch_of_events_reaches_its_last_event_and_only_progress_its_header() {
        let event = |rev| skiff_store::Event {
            kind: EventKind::Put,
            kv: skiff_store::KeyValue {
                mod_revision: rev,
                ..Default::default()
            },
            prev_kv: None,
        };
        // a catch-up batch, stamped with the store's revision with more events to come
        let catching_up = skiff_store::WatchBatch {
            revision: 900,
            events: vec![event(10), event(11)],
        };
        assert_eq!(reached(&catching_up), 11);
        let progress = skiff_store::WatchBatch {
            revision: 900,
            events: Vec::new(),
        };
        assert_eq!(reached(&progress), 900);
    }

    use super::*;

    fn pod() -> Value {
        json!({"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": "p", "namespace": "ns", "labels": {"app": "web"},
                            "uid": "u1", "managedFields": [{"manager": "m"}]},
               "spec": {"nodeName": "n1"}, "status": {"phase": "Pending"}})
    }

    #[test]
    fn labels_are_found_whatever_their_order_and_values_not_strings_are_left_out() {
        let set = LabelSet::of(&json!({"z": "1", "a": "2", "m": 3, "k": ""}));
        assert_eq!(set.get("a"), Some("2"));
        assert_eq!(set.get("z"), Some("1"));
        assert_eq!(set.get("k"), Some(""));
        assert_eq!(set.get("m"), None);
        assert_eq!(set.get("b"), None);
        assert_eq!(LabelSet::of(&Value::Null), LabelSet::default());
    }

    #[test]
    fn a_cached_object_shares_the_stored_bytes_instead_of_copying_them() {
        let pods = lookup("", "v1", "pods").unwrap();
        let stored = storage::encode(&pod());
        let c = Cached::from_stored(
            strategy::for_resource(pods),
            &stored,
            7,
            b"/registry/core/pods/ns/p",
        )
        .unwrap();
        assert_eq!(c.stored.stored().as_ptr(), stored.as_ptr());
        assert_eq!(c.labels.get("app"), Some("web"));
        assert_eq!(c.labels.get("tier"), None);
        assert_eq!(c.field("metadata.name"), Some("p"));
        assert_eq!(c.field("metadata.namespace"), Some("ns"));
        assert_eq!(c.field("spec.nodeName"), Some("n1"));
        let mut expected = pod();
        storage::set_resource_version(&mut expected, 7);
        assert_eq!(c.json(), crate::protobuf::order::to_vec(&expected));
        assert_eq!(c.object().unwrap(), expected);
    }

    #[test]
    fn stored_json_with_a_resource_version_is_encoded_again_without_it() {
        let pods = lookup("", "v1", "pods").unwrap();
        let mut with_rv = pod();
        storage::set_resource_version(&mut with_rv, 3);
        let stored = Bytes::from(serde_json::to_vec(&with_rv).unwrap());
        let c = Cached::from_stored(strategy::for_resource(pods), &stored, 9, b"k").unwrap();
        assert_eq!(c.object().unwrap()["metadata"]["resourceVersion"], "9");
        let served: Value = serde_json::from_slice(&c.json()).unwrap();
        assert_eq!(served["metadata"]["resourceVersion"], "9");
    }

    #[test]
    fn a_relist_ends_the_watches_and_what_came_before_it_is_gone() {
        let cache = pod_cache();
        cache.reset(BTreeMap::new(), 5);
        let Some(WatchStart::Snapshot(_, mut rx)) = cache.watch("", None, &everything()) else {
            panic!("a watch from now starts with a snapshot");
        };
        cache.reset(BTreeMap::new(), 9);
        assert!(matches!(rx.try_recv(), Ok(CacheEvent::Reset(9))));
        assert!(
            cache.watch("", Some(6), &everything()).is_none(),
            "resuming from before is 410 Gone"
        );
        assert!(cache.watch("", Some(9), &everything()).is_some());
    }

    fn everything() -> fields::Selector {
        fields::Selector::default()
    }

    /// What a watch's channel holds now: `(change, name)` per object event, `reset` per reset.
    /// An empty cache of pods.
    fn pod_cache() -> ResourceCache {
        let pods = lookup("", "v1", "pods").unwrap();
        let strategy = StrategyRef::Builtin(strategy::for_resource(pods));
        ResourceCache::new(Arc::new(pods.clone()), strategy)
    }

    /// [`pod`] as `ns/name` on `node` (none when empty), cached at `revision`.
    fn pod_on(
        cache: &ResourceCache,
        ns: &str,
        name: &str,
        node: &str,
        revision: i64,
    ) -> Arc<Cached> {
        let mut pod = pod();
        pod["metadata"]["namespace"] = json!(ns);
        pod["metadata"]["name"] = json!(name);
        pod["spec"]["nodeName"] = json!(node);
        Arc::new(Cached::from_object(&*cache.strategy, &pod, revision).unwrap())
    }

    fn received(rx: &mut broadcast::Receiver<CacheEvent>) -> Vec<String> {
        std::iter::from_fn(|| rx.try_recv().ok())
            .map(|e| match e {
                CacheEvent::Object { change, object, .. } => format!("{change:?} {}", object.name),
                CacheEvent::Progress(_) => "progress".into(),
                CacheEvent::Reset(_) => "reset".into(),
            })
            .collect()
    }

    #[test]
    fn the_history_keeps_75_seconds_of_events_within_its_bounds() {
        let cache = pod_cache();
        let one = pod_on(&cache, "ns", "p", "n1", 1);
        let event = |revision: i64| CacheEvent::Object {
            change: Change::Modified,
            object: restamp(&one, revision),
            prev: None,
        };
        let t0 = Instant::now();
        let mut state = State::default();
        let mut revision = 0;
        let mut remember = |state: &mut State, n: usize, at: Instant| {
            for _ in 0..n {
                revision += 1;
                state.remember(event(revision), at);
            }
        };
        // 10,000 events are kept however old, more while they are 75 s old or younger
        remember(&mut state, HISTORY_MIN + 5, t0);
        assert_eq!(state.history.len(), HISTORY_MIN + 5);
        assert_eq!(state.history_floor, 0);
        remember(&mut state, 1, t0 + HISTORY_FRESH);
        assert_eq!(state.history.len(), HISTORY_MIN + 6, "75 s old is fresh");
        remember(&mut state, 1, t0 + HISTORY_FRESH + Duration::from_secs(1));
        assert_eq!(
            state.history.len(),
            HISTORY_MIN,
            "older ones go, down to the least kept"
        );
        assert_eq!(
            state.history_floor, 7,
            "a watch from the revision of the last one gone is 410"
        );
        let counted: usize = state.history.iter().map(|(_, e)| event_bytes(e)).sum();
        assert_eq!(state.history_bytes, counted);

        // at most 102,400 events, however fresh
        let t1 = t0 + 3 * HISTORY_FRESH;
        remember(&mut state, HISTORY_MAX + 10, t1);
        assert_eq!(state.history.len(), HISTORY_MAX);
        assert_eq!(state.history_floor, revision - HISTORY_MAX as i64);

        // and of large objects, at most 128 MiB beyond the least kept
        let mut large = pod();
        large["metadata"]["annotations"] = json!({"filler": "x".repeat(64 << 10)});
        let large = Arc::new(Cached::from_object(&*cache.strategy, &large, 1).unwrap());
        let mut state = State::default();
        for revision in 1..=(HISTORY_MIN as i64 + 5_000) {
            state.remember(
                CacheEvent::Object {
                    change: Change::Modified,
                    object: restamp(&large, revision),
                    prev: None,
                },
                t1,
            );
        }
        let bytes = large.json_len();
        assert_eq!(state.history.len(), HISTORY_MIN, "{bytes} bytes an event");
        assert!(state.history_bytes >= HISTORY_MIN * bytes);
    }

    #[test]
    fn watchers_hear_of_progress_at_most_once_a_second_while_the_revision_moves_on() {
        let cache = pod_cache();
        cache.reset(BTreeMap::new(), 1);
        let Some(WatchStart::Snapshot(_, mut rx)) =
            cache.watch("", None, &fields::Selector::everything())
        else {
            panic!("a watch from now starts with a snapshot");
        };
        let progress = |rx: &mut broadcast::Receiver<CacheEvent>| -> Vec<i64> {
            std::iter::from_fn(|| rx.try_recv().ok())
                .map(|e| event_revision(&e))
                .collect()
        };
        cache.advance(2, true);
        cache.advance(3, true);
        cache.advance(4, false);
        assert_eq!(progress(&mut rx), [2], "one progress a second");
        assert_eq!(cache.list("").revision, 4, "the cache's revision moves on");
        let a_second_ago = Instant::now() - PROGRESS_EVERY;
        cache.state.write().progress_sent = Some(a_second_ago);
        cache.advance(5, true);
        assert_eq!(progress(&mut rx), [5]);
    }

    #[test]
    fn a_watch_of_one_node_is_offered_only_the_changes_of_its_pods() {
        let cache = pod_cache();
        cache.reset(BTreeMap::new(), 1);
        let watch = |selector: &str| {
            let selector = fields::Selector::parse(selector).unwrap();
            match cache.watch("", None, &selector) {
                Some(WatchStart::Snapshot(_, rx)) => rx,
                _ => panic!("a watch from now starts with a snapshot"),
            }
        };
        let (mut n1, mut n2, mut all) = (
            watch("spec.nodeName=n1"),
            watch("spec.nodeName=n2,status.phase!=Failed"),
            watch("spec.nodeName!=n3"),
        );
        let pod_on =
            |name: &str, node: &str, revision: i64| pod_on(&cache, "ns", name, node, revision);
        cache.apply("ns/p".into(), Some(pod_on("p", "", 2)), 2);
        cache.apply("ns/p".into(), Some(pod_on("p", "n1", 3)), 3);
        cache.apply("ns/q".into(), Some(pod_on("q", "n2", 4)), 4);
        cache.apply("ns/p".into(), None, 5);
        assert_eq!(received(&mut n1), ["Modified p", "Deleted p"]);
        assert_eq!(received(&mut n2), ["Added q"]);
        assert_eq!(
            received(&mut all),
            ["Added p", "Modified p", "Added q", "Deleted p"],
            "a selector without one value of the field is offered every change"
        );
        // the pod moving off n2 reaches n2's watch (for it, a deletion)
        cache.apply("ns/q".into(), Some(pod_on("q", "n1", 6)), 6);
        assert_eq!(received(&mut n2), ["Modified q"]);
        assert_eq!(received(&mut n1), ["Modified q"]);
        assert_eq!(received(&mut all), ["Modified q"]);
        // a watch that resumes is offered what it would have been offered live
        let replayed = |selector: &str| {
            let selector = fields::Selector::parse(selector).unwrap();
            let Some(WatchStart::Replay(events, _)) = cache.watch("", Some(2), &selector) else {
                panic!("a watch from a recent revision replays the history");
            };
            let (tx, mut rx) = broadcast::channel(16);
            events.into_iter().for_each(|e| drop(tx.send(e)));
            received(&mut rx)
        };
        assert_eq!(
            replayed("spec.nodeName=n1"),
            ["Modified p", "Deleted p", "Modified q"]
        );
        assert_eq!(replayed("spec.nodeName=n2"), ["Added q", "Modified q"]);
        assert_eq!(
            replayed("spec.nodeName!=n3"),
            ["Modified p", "Added q", "Deleted p", "Modified q"]
        );

        cache.advance(7, true);
        cache.reset(BTreeMap::new(), 8);
        for rx in [&mut n1, &mut n2, &mut all] {
            assert_eq!(received(rx), ["progress", "reset"]);
        }
        drop(n2);
        cache.apply("ns/r".into(), Some(pod_on("r", "n2", 9)), 9);
        assert_eq!(
            cache.indexed.lock().keys().collect::<Vec<_>>(),
            ["n1"],
            "a value's channel goes with its last watch"
        );
    }

    #[test]
    fn the_node_index_follows_pods_as_they_are_bound_moved_deleted_and_relisted() {
        let cache = pod_cache();
        let pod_on = |ns: &str, name: &str, node: &str, revision: i64| {
            pod_on(&cache, ns, name, node, revision)
        };
        let on = |node: &str, ns: &str| -> Vec<String> {
            cache.indexed(node, ns).iter().map(|c| c.path()).collect()
        };
        cache.reset(
            BTreeMap::from([("a/p".to_string(), pod_on("a", "p", "n1", 2))]),
            2,
        );
        assert_eq!(on("n1", ""), ["a/p"]);
        cache.apply("a/q".into(), Some(pod_on("a", "q", "", 3)), 3);
        assert!(on("", "").is_empty(), "unbound pods are not indexed");
        cache.apply("a/q".into(), Some(pod_on("a", "q", "n1", 4)), 4);
        cache.apply("ab/r".into(), Some(pod_on("ab", "r", "n1", 5)), 5);
        assert_eq!(on("n1", ""), ["a/p", "a/q", "ab/r"]);
        assert_eq!(
            on("n1", "a"),
            ["a/p", "a/q"],
            "one namespace, not its prefix"
        );
        // a pod moved (as the index sees it) and one deleted
        cache.apply("a/q".into(), Some(pod_on("a", "q", "n2", 6)), 6);
        cache.apply("a/p".into(), None, 7);
        assert_eq!(on("n1", ""), ["ab/r"]);
        assert_eq!(on("n2", "a"), ["a/q"]);
        assert_eq!(on("n3", ""), Vec::<String>::new());
        // a relist rebuilds it
        cache.reset(BTreeMap::new(), 8);
        assert!(on("n1", "").is_empty() && on("n2", "").is_empty());
        assert!(cache.state.read().by_index.is_empty());
    }

    #[test]
    fn a_list_or_watch_pinned_to_one_node_reads_only_its_pods() {
        let cache = pod_cache();
        let pod_on = |ns: &str, name: &str, node: &str| {
            (format!("{ns}/{name}"), pod_on(&cache, ns, name, node, 2))
        };
        let all = [
            pod_on("a", "p", "n1"),
            pod_on("a", "q", "n2"),
            pod_on("b", "r", "n1"),
            pod_on("b", "s", ""),
        ];
        cache.reset(BTreeMap::from(all), 2);
        let paths = |objects: &[Arc<Cached>]| objects.iter().map(|c| c.path()).collect::<Vec<_>>();
        let listed = |ns: &str, selector: &str| {
            let selector = fields::Selector::parse(selector).unwrap();
            let at = cache
                .list_at(ns, &selector, 2)
                .expect("nothing changed since 2");
            let now = cache.list_selected(ns, &selector);
            assert_eq!(paths(&at.objects), paths(&now.objects));
            let Some(WatchStart::Snapshot(snapshot, _)) = cache.watch(ns, None, &selector) else {
                panic!("a watch from now starts with a snapshot");
            };
            assert_eq!(paths(&snapshot.objects), paths(&now.objects));
            paths(&now.objects)
        };
        assert_eq!(listed("", "spec.nodeName=n1"), ["a/p", "b/r"]);
        assert_eq!(
            listed("b", "spec.nodeName=n1,status.phase!=Failed"),
            ["b/r"]
        );
        assert_eq!(listed("", "spec.nodeName=n9"), Vec::<String>::new());
        // what the index cannot answer is every object of the namespace, for the caller's filter
        assert_eq!(listed("", ""), ["a/p", "a/q", "b/r", "b/s"]);
        assert_eq!(listed("b", "spec.nodeName="), ["b/r", "b/s"]);
        assert_eq!(listed("a", "spec.nodeName!=n1"), ["a/p", "a/q"]);
    }

    #[test]
    fn a_deleted_object_is_restamped_with_the_deletion_revision() {
        let pods = lookup("", "v1", "pods").unwrap();
        let c = Cached::from_object(strategy::for_resource(pods), &pod(), 4).unwrap();
        let gone = restamp(&c, 8);
        assert_eq!(gone.revision, 8);
        let served: Value = serde_json::from_slice(&gone.json()).unwrap();
        assert_eq!(served["metadata"]["resourceVersion"], "8");
        assert_eq!(served["metadata"]["uid"], "u1");
    }
}
