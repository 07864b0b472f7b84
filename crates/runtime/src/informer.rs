//! `informer`: one List+Watch per resource (and per server-side selector) per process, shared by
//! everything in it, as client-go's `SharedInformerFactory`. Each [`Informer`] keeps an indexed
//! [`Cache`] and calls its handlers with every [`Change`] *after* the cache shows it, so a key a
//! handler queues is reconciled against a cache that already has the change.
//!
//! Informers are typed ([`Informers::get`]: `Pod`, `Node`, …) or, for resources known only
//! through discovery (custom resources, say), metadata-only ([`Informers::metadata`]: each
//! object's `PartialObjectMetadata`, as client-go's metadata informers); both kinds work alike,
//! except that a metadata informer stops when nothing holds it any more.
//!
//! The watch itself is kube-runtime's `watcher` (relist on `410 Gone`, bookmarks, backoff on
//! errors). What this adds: sharing, handlers (a handler added late first sees every cached
//! object as added, as client-go's do), periodic resync, and tombstones for objects that
//! vanished while the watch was down (a relist no longer has them).
//!
//! Handlers run on the informer's task, one change at a time and in order; they must be quick
//! (queue a key, lower an expectation) and never wait.
//!
//! Cached objects carry no `metadata.managedFields` (upstream's controller manager and
//! scheduler trim them from their informers the same way, `TrimManagedFields`): nothing reads
//! them from a cache, and they are often most of a small object's size. A component that needs
//! little of each object asks for a transformed informer ([`Informers::transformed`], client-go's
//! `SetTransform`): each object is made into the compact form it keeps as it arrives, from a list
//! page or a watch event, and the whole object is dropped before the next one is read.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::fmt::Debug;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use futures::StreamExt;
use kube::api::DynamicObject;
use kube::core::{NamespaceResourceScope, PartialObjectMeta};
use kube::discovery::ApiResource;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use kube::{Api, Resource};
use parking_lot::Mutex;
use serde::de::DeserializeOwned;
use tokio::task::AbortHandle;
use tokio::time::Instant;

use crate::cache::Key;
pub use crate::cache::{Cache, Cached};

/// One change the cache has applied.
#[derive(Debug)]
pub enum Change<K> {
    /// A new object (also every object of the first list, and of the cache for a late handler).
    Added(Arc<K>),
    /// An object that changed; `old` is what the cache held before. A resync delivers the
    /// same object as both.
    Updated { old: Arc<K>, new: Arc<K> },
    /// An object that is gone. `final_state_unknown` when the watch missed its deletion and a
    /// relist found it missing: `last` is then the last state this process saw (client-go's
    /// `DeletedFinalStateUnknown`).
    Deleted {
        last: Arc<K>,
        final_state_unknown: bool,
    },
}

impl<K> Change<K> {
    /// The newest state the change knows of the object.
    pub fn object(&self) -> &Arc<K> {
        match self {
            Change::Added(obj) | Change::Updated { new: obj, .. } => obj,
            Change::Deleted { last, .. } => last,
        }
    }
}

/// A built-in (typed) kind an informer can follow.
pub trait Kind:
    Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static
{
}

impl<K> Kind for K where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static
{
}

/// What resources a process reads: the informers, created on first use and shared.
#[derive(Clone)]
pub struct Informers {
    inner: Arc<FactoryInner>,
}

struct FactoryInner {
    client: kube::Client,
    informers: Mutex<HashMap<InformerKey, Running>>,
}

/// One started informer: its [`Shared`] state (type-erased) and its task, aborted when the
/// entry is dropped (with the factory, or when the last handle of a metadata informer goes).
struct Running {
    shared: Arc<dyn Any + Send + Sync>,
    task: AbortHandle,
    /// A metadata informer's lease, held by its handles.
    lease: Option<Weak<Lease>>,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// One informer per type (and, for an untyped one, resource), server-side filter and transform.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct InformerKey {
    kind: TypeId,
    /// A transformed informer's transform (its type: each closure has its own).
    transform: Option<TypeId>,
    /// The group, version and plural of an untyped informer's resource.
    resource: Option<(String, String, String)>,
    /// The namespace a namespaced informer lists and watches in (else all).
    namespace: Option<String>,
    labels: Option<String>,
    fields: Option<String>,
}

impl InformerKey {
    fn metadata(resource: &ApiResource) -> InformerKey {
        InformerKey {
            kind: TypeId::of::<PartialObjectMeta<DynamicObject>>(),
            transform: None,
            resource: Some((
                resource.group.clone(),
                resource.version.clone(),
                resource.plural.clone(),
            )),
            namespace: None,
            labels: None,
            fields: None,
        }
    }
}

/// Held by every handle on a metadata informer: the last one dropped stops its watch and takes
/// it out of the factory (a resource no longer served, its CRD deleted, is no longer watched).
struct Lease {
    factory: Weak<FactoryInner>,
    key: InformerKey,
}

impl Drop for Lease {
    fn drop(&mut self) {
        let Some(factory) = self.factory.upgrade() else {
            return;
        };
        let mut informers = factory.informers.lock();
        // unless a handle taken meanwhile started the resource's informer again
        let dead = |r: &Running| r.lease.as_ref().is_some_and(|l| l.strong_count() == 0);
        let stopped = match informers.get(&self.key) {
            Some(running) if dead(running) => informers.remove(&self.key),
            _ => None,
        };
        drop(informers);
        // dropped unlocked: its handlers may hold handles, whose leases lock the factory
        drop(stopped);
    }
}

impl Informers {
    /// Informers that list and watch with `client`; they stop when the last clone of this
    /// factory is dropped.
    pub fn new(client: kube::Client) -> Informers {
        Informers {
            inner: Arc::new(FactoryInner {
                client,
                informers: Mutex::new(HashMap::new()),
            }),
        }
    }

    /// The informer of every `K` in the cluster, started on first use.
    pub fn get<K>(&self) -> Informer<K>
    where
        K: Kind,
    {
        self.filtered(watcher::Config::default())
    }

    /// The informer of the `K`s `config`'s label and field selectors select (the kubelet's
    /// `spec.nodeName=<node>`), started on first use; one per distinct pair of selectors.
    pub fn filtered<K>(&self, config: watcher::Config) -> Informer<K>
    where
        K: Kind,
    {
        let key = InformerKey {
            kind: TypeId::of::<K>(),
            transform: None,
            resource: None,
            namespace: None,
            labels: config.label_selector.clone(),
            fields: config.field_selector.clone(),
        };
        let api = Api::all(self.inner.client.clone());
        self.informer(key, api, &(), config, false, std::convert::identity)
    }

    /// The informer of the `K`s `config` selects, caching what `transform` makes of each
    /// (client-go's `SetTransform`): it runs on each object as it arrives, from a list page or
    /// a watch event, before the cache or any handler sees it, so that a component needing
    /// little of each object (a metrics server: pods' names and labels) keeps only that.
    /// Started on first use, apart from the untransformed informer of the same `K`s; shared by
    /// whoever asks with the same selectors and transform (told by its type: every closure has
    /// its own, so users share one through a function that makes it).
    pub fn transformed<K, T, F>(&self, config: watcher::Config, transform: F) -> Informer<T>
    where
        K: Kind,
        T: Cached + Send + Sync + 'static,
        F: Fn(K) -> T + Send + 'static,
    {
        let key = InformerKey {
            kind: TypeId::of::<K>(),
            transform: Some(TypeId::of::<F>()),
            resource: None,
            namespace: None,
            labels: config.label_selector.clone(),
            fields: config.field_selector.clone(),
        };
        let api = Api::all(self.inner.client.clone());
        self.informer(key, api, &(), config, false, transform)
    }

    /// The metadata-only informer of every object of `resource` in the cluster (client-go's
    /// metadata informers: lists and watches ask for `PartialObjectMetadata`), started on first
    /// use and shared by everyone who asks for the same group, version and plural.
    ///
    /// Unlike a typed informer, it runs only while some handle on it is held: once the last
    /// one is dropped (a handler holding one keeps it), its watch stops and the factory forgets
    /// it, so that a resource no longer served (its CRD deleted) is no longer watched. Its
    /// handlers should be removed first ([`Informer::remove_handler`]).
    pub fn metadata(&self, resource: &ApiResource) -> Informer<PartialObjectMeta<DynamicObject>> {
        let key = InformerKey::metadata(resource);
        let config = watcher::Config::default();
        let api = Api::all_with(self.inner.client.clone(), resource);
        self.informer(key, api, resource, config, true, std::convert::identity)
    }

    /// The informer of the one `K` named `name` in `namespace`: a list and watch in the
    /// namespace with the field selector `metadata.name=<name>`, as the kubelet follows each
    /// ConfigMap and Secret its pods use (upstream's watch-based manager; the Node authorizer
    /// allows a node to read them one at a time). Like a metadata informer it runs only while
    /// some handle on it is held.
    pub fn object<K>(&self, namespace: &str, name: &str) -> Informer<K>
    where
        K: Kind + Resource<Scope = NamespaceResourceScope>,
    {
        let fields = format!("metadata.name={name}");
        let key = InformerKey {
            kind: TypeId::of::<K>(),
            transform: None,
            resource: None,
            namespace: Some(namespace.to_string()),
            labels: None,
            fields: Some(fields.clone()),
        };
        let api = Api::namespaced(self.inner.client.clone(), namespace);
        let config = watcher::Config::default().fields(&fields);
        self.informer(key, api, &(), config, true, std::convert::identity)
    }

    /// Whether the metadata informer of `resource` is running (some handle on it is held).
    pub fn watches_metadata(&self, resource: &ApiResource) -> bool {
        let informers = self.inner.informers.lock();
        let running = informers.get(&InformerKey::metadata(resource));
        running.is_some_and(|r| r.lease.as_ref().is_some_and(|l| l.strong_count() > 0))
    }

    /// The informer under `key`, started (listing and watching `api`'s `K`s of `dyntype`,
    /// cached as `transform` makes them) if there is none; `leased` for one that stops with its
    /// last handle. `key` names the transform: the same key, the same `T`.
    fn informer<K, T>(
        &self,
        key: InformerKey,
        api: Api<K>,
        dyntype: &K::DynamicType,
        config: watcher::Config,
        leased: bool,
        transform: impl Fn(K) -> T + Send + 'static,
    ) -> Informer<T>
    where
        K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
        T: Cached + Send + Sync + 'static,
    {
        let mut informers = self.inner.informers.lock();
        if let Some(running) = informers.get(&key) {
            let lease = match &running.lease {
                None => Some(None),
                Some(lease) => lease.upgrade().map(Some),
            };
            // else its last handle is being dropped: it is replaced
            if let Some(lease) = lease {
                let shared = running.shared.clone().downcast::<Shared<T>>().ok();
                return Informer {
                    shared: shared.expect("informers are keyed by type"),
                    _lease: lease,
                };
            }
        }
        let shared = Arc::new(Shared::default());
        let kind = K::kind(dyntype).into_owned();
        let config = with_watch_timeout(config, fastrand::f64());
        let task = tokio::spawn(reflect(api, config, transform, shared.clone(), kind));
        let lease = leased.then(|| {
            Arc::new(Lease {
                factory: Arc::downgrade(&self.inner),
                key: key.clone(),
            })
        });
        let running = Running {
            shared: shared.clone(),
            task: task.abort_handle(),
            lease: lease.as_ref().map(Arc::downgrade),
        };
        let replaced = informers.insert(key, running);
        drop(informers);
        drop(replaced);
        Informer {
            shared,
            _lease: lease,
        }
    }
}

/// A handle on one shared informer.
pub struct Informer<K> {
    shared: Arc<Shared<K>>,
    /// A metadata informer's: it runs while some handle holds this.
    _lease: Option<Arc<Lease>>,
}

impl<K> Clone for Informer<K> {
    fn clone(&self) -> Self {
        Informer {
            shared: self.shared.clone(),
            _lease: self._lease.clone(),
        }
    }
}

/// Names a handler for [`Informer::remove_handler`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct HandlerId(u64);

type HandlerFn<K> = Box<dyn FnMut(&Change<K>) + Send>;

struct Handler<K> {
    id: HandlerId,
    on_change: HandlerFn<K>,
    resync: Option<(Duration, Instant)>,
}

struct Shared<K> {
    cache: Cache<K>,
    /// Held while a change is applied to the cache and dispatched, so that a handler added
    /// meanwhile sees each change exactly once (in the replay or as it happens).
    handlers: Mutex<Vec<Handler<K>>>,
    /// Wakes the informer's task when a handler with a resync period arrives.
    resync_added: tokio::sync::Notify,
}

impl<K: Cached> Default for Shared<K> {
    fn default() -> Self {
        Shared {
            cache: Cache::default(),
            handlers: Mutex::new(Vec::new()),
            resync_added: tokio::sync::Notify::new(),
        }
    }
}

impl<K: Cached> Informer<K> {
    /// The informer's cache.
    pub fn cache(&self) -> &Cache<K> {
        &self.shared.cache
    }

    /// Calls `on_change` with every change from now on; it first sees every object already
    /// cached as [`Change::Added`].
    pub fn add_handler(&self, on_change: impl FnMut(&Change<K>) + Send + 'static) {
        drop(self.add(Box::new(on_change), None));
    }

    /// As [`Informer::add_handler`], and every `period` the handler also sees each cached object
    /// as an update to itself (client-go's resync), so that a controller revisits every object.
    pub fn add_handler_with_resync(
        &self,
        period: Duration,
        on_change: impl FnMut(&Change<K>) + Send + 'static,
    ) {
        drop(self.add(Box::new(on_change), Some(period)));
        self.shared.resync_added.notify_one();
    }

    /// As [`Informer::add_handler`], and `replayed` runs once the handler has seen every
    /// cached object, before it sees any later change (client-go's `HasSynced` of a handler's
    /// registration, for a consumer that must know where the replay ends). Returns the
    /// handler's id, for [`Informer::remove_handler`].
    pub fn add_handler_then(
        &self,
        on_change: impl FnMut(&Change<K>) + Send + 'static,
        replayed: impl FnOnce(),
    ) -> HandlerId {
        let handlers = self.add(Box::new(on_change), None);
        replayed();
        handlers.last().expect("just added").id
    }

    /// Stops calling the handler `id` (client-go's `RemoveEventHandler`); once this returns it
    /// sees no more changes. Not to be called from a handler (they run under the same lock).
    pub fn remove_handler(&self, id: HandlerId) {
        let removed = {
            let mut handlers = self.shared.handlers.lock();
            let at = handlers.iter().position(|h| h.id == id);
            at.map(|at| handlers.remove(at))
        };
        // dropped unlocked: it may hold handles, whose leases lock the factory
        drop(removed);
    }

    fn add(
        &self,
        mut on_change: HandlerFn<K>,
        resync: Option<Duration>,
    ) -> parking_lot::MutexGuard<'_, Vec<Handler<K>>> {
        static NEXT_ID: AtomicU64 = AtomicU64::new(0);
        let mut handlers = self.shared.handlers.lock();
        for obj in self.shared.cache.state() {
            on_change(&Change::Added(obj));
        }
        handlers.push(Handler {
            id: HandlerId(NEXT_ID.fetch_add(1, Ordering::Relaxed)),
            on_change,
            resync: resync.map(|period| (period, Instant::now() + period)),
        });
        handlers
    }
}

impl<K: Cached> Shared<K> {
    fn dispatch(handlers: &mut [Handler<K>], change: Change<K>) {
        for handler in handlers.iter_mut() {
            (handler.on_change)(&change);
        }
    }

    /// Applies one watch event to the cache and tells the handlers; `relist` gathers a list.
    fn apply(&self, event: Event<K>, relist: &mut Vec<Arc<K>>) {
        let mut handlers = self.handlers.lock();
        match event {
            Event::Apply(obj) => {
                let new = Arc::new(obj);
                let change = match self.cache.insert(new.clone()) {
                    Some(old) => Change::Updated { old, new },
                    None => Change::Added(new),
                };
                Self::dispatch(&mut handlers, change);
            }
            Event::Delete(obj) => {
                self.cache.remove(&Key::of(&obj));
                let change = Change::Deleted {
                    last: Arc::new(obj),
                    final_state_unknown: false,
                };
                Self::dispatch(&mut handlers, change);
            }
            Event::Init => relist.clear(),
            Event::InitApply(obj) => relist.push(Arc::new(obj)),
            Event::InitDone => {
                let listed = std::mem::take(relist);
                let mut before = self.cache.replace(listed.clone());
                for new in listed {
                    let change = match before.remove(&Key::of(new.as_ref())) {
                        None => Change::Added(new),
                        Some(old) if changed(old.as_ref(), new.as_ref()) => {
                            Change::Updated { old, new }
                        }
                        Some(_) => continue,
                    };
                    Self::dispatch(&mut handlers, change);
                }
                for (_, last) in before {
                    let change = Change::Deleted {
                        last,
                        final_state_unknown: true,
                    };
                    Self::dispatch(&mut handlers, change);
                }
                self.cache.mark_ready();
            }
        }
    }

    /// Resyncs the handlers that are due; returns when the next one is.
    fn resync(&self, now: Instant) -> Option<Instant> {
        let mut handlers = self.handlers.lock();
        let due: Vec<usize> = (0..handlers.len())
            .filter(|&i| matches!(handlers[i].resync, Some((_, at)) if at <= now))
            .collect();
        if !due.is_empty() {
            let objects = self.cache.state();
            for i in due {
                let handler = &mut handlers[i];
                for obj in &objects {
                    (handler.on_change)(&Change::Updated {
                        old: obj.clone(),
                        new: obj.clone(),
                    });
                }
                if let Some((period, at)) = &mut handler.resync {
                    *at = now + *period;
                }
            }
        }
        handlers.iter().filter_map(|h| h.resync.map(|r| r.1)).min()
    }
}

/// Whether a relist found `new` changed from the `old` the cache held: another
/// `resourceVersion`, or a form that keeps none.
fn changed<K: Cached>(old: &K, new: &K) -> bool {
    new.cache_version().is_none() || old.cache_version() != new.cache_version()
}

/// The shortest watch an informer asks for (client-go's reflector: `minWatchTimeout`).
const MIN_WATCH_TIMEOUT: Duration = Duration::from_secs(300);

/// `config` with a watch timeout of [`MIN_WATCH_TIMEOUT`] lengthened by `jitter` (0–1) of
/// itself, unless it names one: 5–10 minutes, as client-go's reflector picks. kube-rs asks for
/// 290 s for every watch, so a process that starts thousands of informers at once (hollow nodes,
/// each watching its pods) had them all time out and resume in the same second, and the server's
/// fairness queues refused most of the herd until their resume points had left its history.
fn with_watch_timeout(config: watcher::Config, jitter: f64) -> watcher::Config {
    if config.timeout.is_some() {
        return config;
    }
    let seconds = MIN_WATCH_TIMEOUT.as_secs_f64() * (1.0 + jitter.clamp(0.0, 1.0));
    config.timeout(seconds as u32)
}

/// The informer's task: watches `api` (of `kind`s) into `shared`, each object as `transform`
/// makes it, until the factory stops it. An `Api<PartialObjectMeta<_>>` lists and watches
/// metadata only. Lists are paged (`watcher::Config`'s 500 objects a page, as client-go's): an
/// object is transformed as its page is read, so that a page's whole objects are all that is
/// ever held of a large list.
async fn reflect<K, T>(
    api: Api<K>,
    config: watcher::Config,
    transform: impl Fn(K) -> T,
    shared: Arc<Shared<T>>,
    kind: String,
) where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    T: Cached,
{
    let stream = watcher::watcher(api, config).default_backoff();
    futures::pin_mut!(stream);
    let mut relist = Vec::new();
    let mut next_resync = None;
    loop {
        let resync = async {
            match next_resync {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            event = stream.next() => match event {
                Some(Ok(event)) => shared.apply(cached(event, &transform), &mut relist),
                Some(Err(error)) => {
                    tracing::warn!(%kind, %error, "informer: watch failed; retrying");
                }
                None => return,
            },
            () = resync => next_resync = shared.resync(Instant::now()),
            () = shared.resync_added.notified() => next_resync = shared.resync(Instant::now()),
        }
    }
}

/// The event with its object as the cache keeps it: without `managedFields`, transformed.
fn cached<K: Resource, T>(event: Event<K>, transform: impl Fn(K) -> T) -> Event<T> {
    let keep = |mut obj: K| {
        obj.meta_mut().managed_fields = None;
        transform(obj)
    };
    match event {
        Event::Apply(obj) => Event::Apply(keep(obj)),
        Event::Delete(obj) => Event::Delete(keep(obj)),
        Event::Init => Event::Init,
        Event::InitApply(obj) => Event::InitApply(keep(obj)),
        Event::InitDone => Event::InitDone,
    }
}

#[cfg(test)]
#[path = "informer_tests.rs"]
mod tests;
