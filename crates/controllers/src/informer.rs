//! `informer`: a kube-runtime reflector store of one kind that also tells a handler what changed
//! (added, updated with the old object, deleted) after the store has applied it, as client-go's
//! shared informer calls its event handlers. Controllers lower their expectations and queue keys
//! from these changes, so a key is only reconciled once the store already shows the change.

use std::collections::HashMap;
use std::fmt::Debug;
use std::sync::Arc;

use futures::StreamExt;
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::watcher::{self, Event};
use kube::{Api, Resource};
use serde::de::DeserializeOwned;

/// One change the store has applied.
#[derive(Debug)]
pub enum Change<K> {
    /// A new object (also every object of the first list).
    Added(Arc<K>),
    /// An object that changed; `old` is what the store held before.
    Updated { old: Arc<K>, new: Arc<K> },
    /// An object that is gone (deleted, or missing from a re-list): its last known state.
    Deleted(Arc<K>),
}

/// Starts watching `api` into a store (on its own task) and returns the store; `handler` sees
/// every change after the store shows it. The store is ready (`wait_until_ready`) after the
/// first full list.
pub fn spawn<K>(
    api: Api<K>,
    config: watcher::Config,
    mut handler: impl FnMut(Change<K>) + Send + 'static,
) -> Store<K>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    let (reader, mut writer) = reflector::store();
    let store = reader.clone();
    tokio::spawn(async move {
        let stream = watcher::watcher(api, config).default_backoff();
        futures::pin_mut!(stream);
        let mut relisted: Vec<ObjectRef<K>> = Vec::new();
        while let Some(event) = stream.next().await {
            let event = match event {
                Ok(event) => event,
                Err(error) => {
                    tracing::warn!(kind = %K::kind(&()), %error, "informer: watch failed; retrying");
                    continue;
                }
            };
            match &event {
                Event::Apply(obj) => {
                    let key = ObjectRef::from_obj(obj);
                    let old = store.get(&key);
                    writer.apply_watcher_event(&event);
                    let Some(new) = store.get(&key) else { continue };
                    handler(match old {
                        Some(old) => Change::Updated { old, new },
                        None => Change::Added(new),
                    });
                }
                Event::Delete(obj) => {
                    writer.apply_watcher_event(&event);
                    handler(Change::Deleted(Arc::new(obj.clone())));
                }
                Event::Init => {
                    relisted.clear();
                    writer.apply_watcher_event(&event);
                }
                Event::InitApply(obj) => {
                    relisted.push(ObjectRef::from_obj(obj));
                    writer.apply_watcher_event(&event);
                }
                Event::InitDone => {
                    let mut before: HashMap<ObjectRef<K>, Arc<K>> = store
                        .state()
                        .into_iter()
                        .map(|o| (ObjectRef::from_obj(o.as_ref()), o))
                        .collect();
                    writer.apply_watcher_event(&event);
                    for key in relisted.drain(..) {
                        let Some(new) = store.get(&key) else { continue };
                        match before.remove(&key) {
                            None => handler(Change::Added(new)),
                            Some(old) => {
                                if old.meta().resource_version != new.meta().resource_version {
                                    handler(Change::Updated { old, new });
                                }
                            }
                        }
                    }
                    for (_, old) in before {
                        handler(Change::Deleted(old));
                    }
                }
            }
        }
    });
    reader
}
