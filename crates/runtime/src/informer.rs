//! `informer`: one List+Watch per resource (and per server-side selector) per process, shared by
//! everything in it, as client-go's `SharedInformerFactory`. Each [`Informer`] keeps an indexed
//! [`Cache`] and calls its handlers with every [`Change`] *after* the cache shows it, so a key a
//! handler queues is reconciled against a cache that already has the change.
//!
//! The watch itself is kube-runtime's `watcher` (relist on `410 Gone`, bookmarks, backoff on
//! errors). What this adds: sharing, handlers (a handler added late first sees every cached
//! object as added, as client-go's do), periodic resync, and tombstones for objects that
//! vanished while the watch was down (a relist no longer has them).
//!
//! Handlers run on the informer's task, one change at a time and in order; they must be quick
//! (queue a key, lower an expectation) and never wait.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher::{self, Event};
use kube::{Api, Resource};
use parking_lot::Mutex;
use serde::de::DeserializeOwned;
use tokio::task::AbortHandle;
use tokio::time::Instant;

pub use crate::cache::Cache;

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

/// What resources a process reads: the informers, created on first use and shared.
#[derive(Clone)]
pub struct Informers {
    inner: Arc<FactoryInner>,
}

struct FactoryInner {
    client: kube::Client,
    informers: Mutex<HashMap<InformerKey, Arc<dyn Any + Send + Sync>>>,
    tasks: Mutex<Vec<AbortHandle>>,
}

impl Drop for FactoryInner {
    fn drop(&mut self) {
        for task in self.tasks.get_mut().drain(..) {
            task.abort();
        }
    }
}

/// One informer per type and server-side filter.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct InformerKey {
    kind: TypeId,
    labels: Option<String>,
    fields: Option<String>,
}

impl Informers {
    /// Informers that list and watch with `client`; they stop when the last clone of this
    /// factory is dropped.
    pub fn new(client: kube::Client) -> Informers {
        Informers {
            inner: Arc::new(FactoryInner {
                client,
                informers: Mutex::new(HashMap::new()),
                tasks: Mutex::new(Vec::new()),
            }),
        }
    }

    /// The informer of every `K` in the cluster, started on first use.
    pub fn get<K>(&self) -> Informer<K>
    where
        K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    {
        self.filtered(watcher::Config::default())
    }

    /// The informer of the `K`s `config`'s label and field selectors select (the kubelet's
    /// `spec.nodeName=<node>`), started on first use; one per distinct pair of selectors.
    pub fn filtered<K>(&self, config: watcher::Config) -> Informer<K>
    where
        K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    {
        let key = InformerKey {
            kind: TypeId::of::<K>(),
            labels: config.label_selector.clone(),
            fields: config.field_selector.clone(),
        };
        let mut informers = self.inner.informers.lock();
        if let Some(existing) = informers.get(&key) {
            let shared = existing.clone().downcast::<Shared<K>>().ok();
            return Informer {
                shared: shared.expect("informers are keyed by type"),
            };
        }
        let shared = Arc::new(Shared::default());
        informers.insert(key, shared.clone());
        let api = Api::<K>::all(self.inner.client.clone());
        let task = tokio::spawn(reflect(api, config, shared.clone()));
        self.inner.tasks.lock().push(task.abort_handle());
        Informer { shared }
    }
}

/// A handle on one shared informer.
pub struct Informer<K: Resource<DynamicType = ()>> {
    shared: Arc<Shared<K>>,
}

impl<K: Resource<DynamicType = ()>> Clone for Informer<K> {
    fn clone(&self) -> Self {
        Informer {
            shared: self.shared.clone(),
        }
    }
}

type HandlerFn<K> = Box<dyn FnMut(&Change<K>) + Send>;

struct Handler<K> {
    on_change: HandlerFn<K>,
    resync: Option<(Duration, Instant)>,
}

struct Shared<K: Resource<DynamicType = ()>> {
    cache: Cache<K>,
    /// Held while a change is applied to the cache and dispatched, so that a handler added
    /// meanwhile sees each change exactly once (in the replay or as it happens).
    handlers: Mutex<Vec<Handler<K>>>,
    /// Wakes the informer's task when a handler with a resync period arrives.
    resync_added: tokio::sync::Notify,
}

impl<K: Resource<DynamicType = ()>> Default for Shared<K> {
    fn default() -> Self {
        Shared {
            cache: Cache::default(),
            handlers: Mutex::new(Vec::new()),
            resync_added: tokio::sync::Notify::new(),
        }
    }
}

impl<K: Resource<DynamicType = ()>> Informer<K> {
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
    /// registration, for a consumer that must know where the replay ends).
    pub fn add_handler_then(
        &self,
        on_change: impl FnMut(&Change<K>) + Send + 'static,
        replayed: impl FnOnce(),
    ) {
        let handlers = self.add(Box::new(on_change), None);
        replayed();
        drop(handlers);
    }

    fn add(
        &self,
        mut on_change: HandlerFn<K>,
        resync: Option<Duration>,
    ) -> parking_lot::MutexGuard<'_, Vec<Handler<K>>> {
        let mut handlers = self.shared.handlers.lock();
        for obj in self.shared.cache.state() {
            on_change(&Change::Added(obj));
        }
        handlers.push(Handler {
            on_change,
            resync: resync.map(|period| (period, Instant::now() + period)),
        });
        handlers
    }
}

impl<K: Resource<DynamicType = ()>> Shared<K> {
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
                self.cache.remove(&ObjectRef::from_obj(&obj));
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
                    let change = match before.remove(&ObjectRef::from_obj(new.as_ref())) {
                        None => Change::Added(new),
                        Some(old) if old.meta().resource_version != new.meta().resource_version => {
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

/// The informer's task: watches `api` into `shared` until the factory stops it.
async fn reflect<K>(api: Api<K>, config: watcher::Config, shared: Arc<Shared<K>>)
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
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
                Some(Ok(event)) => shared.apply(event, &mut relist),
                Some(Err(error)) => {
                    tracing::warn!(kind = %K::kind(&()), %error, "informer: watch failed; retrying");
                }
                None => return,
            },
            () = resync => next_resync = shared.resync(Instant::now()),
            () = shared.resync_added.notified() => next_resync = shared.resync(Instant::now()),
        }
    }
}

#[cfg(test)]
#[path = "informer_tests.rs"]
mod tests;
