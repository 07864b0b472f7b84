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

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use parking_lot::{Mutex, RwLock};
use serde_json::Value;
use skiff_apimachinery::catalog::{RESOURCES, ResourceType};
use skiff_store::{EventKind, KeyRange, RangeRequest, Store, WatchControl, WatchRequest};
use tokio::sync::{broadcast, watch};

use crate::error::{ApiError, Result};
use crate::stamped::Stamped;
use crate::storage;
use crate::strategy;

/// Events kept per resource for watches that resume from a recent resourceVersion.
pub const HISTORY: usize = 10_000;
/// Events buffered per resource for live watchers; a watcher that falls further behind is closed
/// and resumes from its last resourceVersion (served from the history). The buffer is allocated
/// whole for every resource (48 bytes a slot): 1024 keeps the 52 of them at 2.5 MB, where 4096
/// took 10 MB of an idle server's 40 MB heap.
const FANOUT: usize = 1024;

/// One object as the cache holds it.
#[derive(Debug, Clone)]
pub struct Cached {
    pub namespace: String,
    pub name: String,
    pub revision: i64,
    /// The object's stored JSON (without `resourceVersion`, which is `revision`).
    stored: Stamped,
    pub labels: BTreeMap<String, String>,
    /// Field-selector values (`metadata.name`, `metadata.namespace` and the kind's own).
    pub fields: Vec<(&'static str, String)>,
}

impl Cached {
    /// An object from its stored JSON (`value` of a store key), as of `revision`. The bytes are
    /// kept as they are (shared with whoever else holds them), unless they are not in the stored
    /// form (a `resourceVersion` in them), then they are encoded again.
    pub fn from_stored(
        rt: &ResourceType,
        value: &Bytes,
        revision: i64,
        key: &[u8],
    ) -> Result<Self> {
        crate::storage::check_readable(value)?;
        let object: Value = serde_json::from_slice(value).map_err(|e| {
            ApiError::internal(format!(
                "decoding object at {}: {e}",
                String::from_utf8_lossy(key)
            ))
        })?;
        let stored = match Stamped::new(value.clone()) {
            Ok(s) => s,
            Err(_) => Self::stamped(&object)?,
        };
        Ok(Self::with_stored(rt, &object, revision, stored))
    }

    /// An object from its decoded form (its `resourceVersion`, if any, is replaced by
    /// `revision`).
    pub fn from_object(rt: &ResourceType, object: &Value, revision: i64) -> Result<Self> {
        let stored = Self::stamped(object)?;
        Ok(Self::with_stored(rt, object, revision, stored))
    }

    fn stamped(object: &Value) -> Result<Stamped> {
        let bytes = storage::encode(object)?;
        Stamped::encoded(bytes).map_err(|e| {
            ApiError::internal(format!("encoding {}: {e:?}", object["metadata"]["name"]))
        })
    }

    fn with_stored(rt: &ResourceType, object: &Value, revision: i64, stored: Stamped) -> Self {
        let meta = &object["metadata"];
        let name = meta["name"].as_str().unwrap_or_default().to_string();
        let namespace = meta["namespace"].as_str().unwrap_or_default().to_string();
        let labels = meta["labels"]
            .as_object()
            .map(|m| {
                m.iter()
                    .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                    .collect()
            })
            .unwrap_or_default();
        let mut fields = vec![
            ("metadata.name", name.clone()),
            ("metadata.namespace", namespace.clone()),
        ];
        fields.extend(strategy::for_resource(rt).fields(object));
        Cached {
            namespace,
            name,
            revision,
            stored,
            labels,
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

    pub fn field(&self, name: &str) -> Option<String> {
        self.fields
            .iter()
            .find(|(f, _)| *f == name)
            .map(|(_, v)| v.clone())
    }

    pub fn object(&self) -> Result<Value> {
        let mut object: Value = serde_json::from_slice(self.stored.stored())
            .map_err(|e| ApiError::internal(format!("decoding cached {}: {e}", self.name)))?;
        storage::set_resource_version(&mut object, self.revision);
        Ok(object)
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
}

#[derive(Debug, Default)]
struct State {
    objects: BTreeMap<String, Arc<Cached>>,
    history: VecDeque<CacheEvent>,
    /// Events with a revision above this are all in `history`.
    history_floor: i64,
    /// The store revision `objects` is complete up to (advanced after every store batch, under
    /// the write lock, so a snapshot and its revision always agree).
    revision: i64,
    /// The revision of the last change to an object of this resource.
    last_change: i64,
}

/// The cache of one resource type.
pub struct ResourceCache {
    pub rt: &'static ResourceType,
    state: RwLock<State>,
    events: broadcast::Sender<CacheEvent>,
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

impl ResourceCache {
    fn new(rt: &'static ResourceType) -> Self {
        Self {
            rt,
            state: RwLock::new(State::default()),
            events: broadcast::channel(FANOUT).0,
        }
    }

    /// The objects of `namespace` as they were at `revision`, if the cache can tell exactly: no
    /// object of this resource changed since, and the cache has reached it (continue pages of a
    /// list then need no store read).
    pub fn list_at(&self, namespace: &str, revision: i64) -> Option<Snapshot> {
        let state = self.state.read();
        (state.last_change <= revision && revision <= state.revision).then(|| Snapshot {
            revision,
            objects: Self::select(&state, namespace),
        })
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
        let state = self.state.read();
        Snapshot {
            revision: state.revision,
            objects: Self::select(&state, namespace),
        }
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

    /// Starts a watch: from a snapshot (`from` = None) or after revision `from`. `None` as the
    /// result means the revision is older than the history window (the caller falls back to
    /// the store).
    pub fn watch(&self, namespace: &str, from: Option<i64>) -> Option<WatchStart> {
        let state = self.state.read();
        let rx = self.events.subscribe();
        match from {
            None => Some(WatchStart::Snapshot(
                Snapshot {
                    revision: state.revision,
                    objects: Self::select(&state, namespace),
                },
                rx,
            )),
            Some(rv) if rv < state.history_floor => None,
            Some(rv) => {
                let start = state.history.partition_point(|e| event_revision(e) <= rv);
                Some(WatchStart::Replay(
                    state.history.range(start..).cloned().collect(),
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
            Some(o) => state.objects.insert(key, o.clone()),
            None => state.objects.remove(&key),
        };
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
        if state.history.len() >= HISTORY
            && let Some(old) = state.history.pop_front()
        {
            state.history_floor = event_revision(&old);
        }
        state.history.push_back(event.clone());
        let _ = self.events.send(event);
    }

    fn reset(&self, objects: BTreeMap<String, Arc<Cached>>, revision: i64) {
        let mut state = self.state.write();
        state.objects = objects;
        state.history.clear();
        state.history_floor = revision;
        state.revision = revision;
        state.last_change = revision;
    }

    /// Marks everything up to `revision` as applied; with `notify`, tells watchers (bookmarks).
    fn advance(&self, revision: i64, notify: bool) {
        let mut state = self.state.write();
        state.revision = state.revision.max(revision);
        if notify {
            let _ = self.events.send(CacheEvent::Progress(state.revision));
        }
    }
}

fn event_revision(e: &CacheEvent) -> i64 {
    match e {
        CacheEvent::Object { object, .. } => object.revision,
        CacheEvent::Progress(rv) => *rv,
    }
}

fn restamp(c: &Cached, revision: i64) -> Arc<Cached> {
    Arc::new(Cached {
        revision,
        ..c.clone()
    })
}

/// The caches of every resource, fed by one store watch.
pub struct Cacher {
    store: Arc<dyn Store>,
    resources: HashMap<(&'static str, &'static str), Arc<ResourceCache>>,
    by_type: HashMap<(&'static str, &'static str), Arc<ResourceCache>>,
    revision: watch::Sender<i64>,
    control: Mutex<Option<Arc<dyn WatchControl>>>,
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
        let mut resources = HashMap::new();
        let mut by_type = HashMap::new();
        for rt in RESOURCES {
            let id = storage::storage_id(rt);
            // Resources sharing storage (the two Event APIs) share the cache of the first.
            let cache = resources
                .entry(id)
                .or_insert_with(|| Arc::new(ResourceCache::new(rt)))
                .clone();
            by_type.insert((rt.group, rt.plural), cache);
        }
        let cacher = Arc::new(Cacher {
            store,
            resources,
            by_type,
            revision: watch::channel(0).0,
            control: Mutex::new(None),
        });
        let revision = cacher.relist().await?;
        let this = cacher.clone();
        tokio::spawn(async move { this.run(revision).await });
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

    pub fn resource(&self, rt: &ResourceType) -> &Arc<ResourceCache> {
        &self.by_type[&(rt.group, rt.plural)]
    }

    /// The cache stored under storage group `g` and resource `p` (a key's first two segments).
    fn find(
        &self,
        g: &str,
        p: &str,
    ) -> Option<(&(&'static str, &'static str), &Arc<ResourceCache>)> {
        self.resources
            .iter()
            .find(|((rg, rp), _)| *rg == g && *rp == p)
    }

    /// The revision the caches are complete up to.
    pub fn revision(&self) -> i64 {
        *self.revision.borrow()
    }

    async fn relist(&self) -> Result<i64> {
        let resp = self
            .store
            .range(RangeRequest {
                range: KeyRange::prefix(storage::ROOT.as_bytes().to_vec()),
                ..Default::default()
            })
            .await?;
        let mut fresh: HashMap<(&'static str, &'static str), BTreeMap<String, Arc<Cached>>> =
            HashMap::new();
        for kv in &resp.kvs {
            let key = String::from_utf8_lossy(&kv.key);
            let Some((g, p, _, _)) = storage::parse_key(&key) else {
                continue;
            };
            let Some((id, cache)) = self.find(g, p) else {
                continue;
            };
            match Cached::from_stored(cache.rt, &kv.value, kv.mod_revision, &kv.key) {
                Ok(c) => {
                    fresh.entry(*id).or_default().insert(c.path(), Arc::new(c));
                }
                Err(e) => tracing::warn!(key = %key, error = %e, "skipping undecodable object"),
            }
        }
        for (id, cache) in &self.resources {
            cache.reset(fresh.remove(id).unwrap_or_default(), resp.revision);
        }
        self.revision.send_replace(resp.revision);
        Ok(resp.revision)
    }

    async fn run(self: Arc<Self>, mut revision: i64) {
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
            while let Some(batch) = stream.next().await {
                match batch {
                    Ok(batch) => {
                        for ev in &batch.events {
                            self.apply(ev);
                        }
                        revision = revision.max(batch.revision);
                        let progress = batch.events.is_empty();
                        for cache in self.resources.values() {
                            cache.advance(revision, progress);
                        }
                        self.revision.send_replace(revision);
                    }
                    Err(skiff_store::Error::WatcherLagged { next_revision }) => {
                        revision = next_revision - 1;
                        break;
                    }
                    Err(e) => {
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
                }
            }
        }
    }

    fn apply(&self, ev: &skiff_store::Event) {
        let key = String::from_utf8_lossy(&ev.kv.key);
        let Some((g, p, ns, name)) = storage::parse_key(&key) else {
            return;
        };
        let Some((_, cache)) = self.find(g, p) else {
            return;
        };
        let k = if ns.is_empty() {
            name.to_string()
        } else {
            format!("{ns}/{name}")
        };
        match ev.kind {
            EventKind::Put => {
                match Cached::from_stored(cache.rt, &ev.kv.value, ev.kv.mod_revision, &ev.kv.key) {
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

#[cfg(test)]
mod tests {
    use serde_json::json;
    use skiff_apimachinery::catalog::lookup;

    use super::*;

    fn pod() -> Value {
        json!({"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": "p", "namespace": "ns", "labels": {"app": "web"},
                            "uid": "u1", "managedFields": [{"manager": "m"}]},
               "spec": {"nodeName": "n1"}, "status": {"phase": "Pending"}})
    }

    #[test]
    fn a_cached_object_shares_the_stored_bytes_instead_of_copying_them() {
        let pods = lookup("", "v1", "pods").unwrap();
        let stored = storage::encode(&pod()).unwrap();
        let c = Cached::from_stored(pods, &stored, 7, b"/registry/core/pods/ns/p").unwrap();
        assert_eq!(c.stored.stored().as_ptr(), stored.as_ptr());
        assert_eq!(c.labels.get("app").map(String::as_str), Some("web"));
        assert_eq!(c.field("spec.nodeName").as_deref(), Some("n1"));
        let mut expected = pod();
        storage::set_resource_version(&mut expected, 7);
        assert_eq!(c.json(), serde_json::to_vec(&expected).unwrap());
        assert_eq!(c.object().unwrap(), expected);
    }

    #[test]
    fn stored_json_with_a_resource_version_is_encoded_again_without_it() {
        let pods = lookup("", "v1", "pods").unwrap();
        let mut with_rv = pod();
        storage::set_resource_version(&mut with_rv, 3);
        let stored = Bytes::from(serde_json::to_vec(&with_rv).unwrap());
        let c = Cached::from_stored(pods, &stored, 9, b"k").unwrap();
        assert_eq!(c.object().unwrap()["metadata"]["resourceVersion"], "9");
        let served: Value = serde_json::from_slice(&c.json()).unwrap();
        assert_eq!(served["metadata"]["resourceVersion"], "9");
    }

    #[test]
    fn a_deleted_object_is_restamped_with_the_deletion_revision() {
        let pods = lookup("", "v1", "pods").unwrap();
        let c = Cached::from_object(pods, &pod(), 4).unwrap();
        let gone = restamp(&c, 8);
        assert_eq!(gone.revision, 8);
        let served: Value = serde_json::from_slice(&gone.json()).unwrap();
        assert_eq!(served["metadata"]["resourceVersion"], "8");
        assert_eq!(served["metadata"]["uid"], "u1");
    }
}
