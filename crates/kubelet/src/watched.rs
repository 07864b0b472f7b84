//! The ConfigMaps and Secrets a node's pods use, each followed by a watch of its own, as
//! upstream's kubelet does by default (`configMapAndSecretChangeDetectionStrategy: Watch`, its
//! watch-based manager): a pod's volumes, refreshed every minute, and its environment read them
//! from memory, where a GET on every read made the cluster's `kube-root-ca.crt` alone about 40 %
//! of 500 hollow nodes' requests in `skiff bench scale`.
//!
//! An object's watch starts with its first read and stops once it has not been read for
//! [`MAX_IDLE`] (upstream's manager stops it when the last pod using it is unregistered; a pod
//! whose volumes use it reads it every refresh). A read that finds the watch not yet listed
//! after [`SYNC_WAIT`] (the server slow to answer, or refusing it) fails as upstream's does,
//! and the pod's sync is retried; a GET instead would only add to a loaded server's queue.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::Resource;
use kube::core::NamespaceResourceScope;
use kube::runtime::reflector::ObjectRef;
use parking_lot::Mutex;
use skiff_runtime::informer::{Informer, Informers, Kind};

/// How long an object's watch lives after its last read: well past the volumes' refresh
/// (a minute), so that a pod using it keeps it.
pub const MAX_IDLE: Duration = Duration::from_secs(5 * 60);
/// How long a read waits for a new watch's first list (upstream's is a second; Skiff's
/// benchmarks load the API server until a list may wait seconds in its queue).
pub const SYNC_WAIT: Duration = Duration::from_secs(5);

/// What a read found.
pub enum Lookup<K> {
    /// The object as its watch has it, or `None` when it does not exist.
    Watched(Option<Arc<K>>),
    /// Its watch has not listed it within [`SYNC_WAIT`].
    NotSynced,
}

/// Objects of kind `K`, each read from its own watch.
pub struct Watched<K> {
    informers: Informers,
    held: Mutex<HashMap<(String, String), Held<K>>>,
}

struct Held<K> {
    informer: Informer<K>,
    read: Instant,
}

impl<K> Watched<K>
where
    K: Kind + Resource<Scope = NamespaceResourceScope>,
{
    /// Watches started from `informers` (whose client is the node's).
    pub fn new(informers: Informers) -> Watched<K> {
        Watched {
            informers,
            held: Mutex::default(),
        }
    }

    /// The `K` named `name` in `namespace`; starts its watch on first read, and stops the
    /// watches not read for [`MAX_IDLE`].
    pub async fn get(&self, namespace: &str, name: &str) -> Lookup<K> {
        let now = Instant::now();
        let cache = {
            let mut held = self.held.lock();
            held.retain(|_, h| now.duration_since(h.read) < MAX_IDLE);
            let key = (namespace.to_string(), name.to_string());
            let held = held.entry(key).or_insert_with(|| Held {
                informer: self.informers.object(namespace, name),
                read: now,
            });
            held.read = now;
            held.informer.cache().clone()
        };
        if tokio::time::timeout(SYNC_WAIT, cache.wait_until_ready())
            .await
            .is_err()
        {
            return Lookup::NotSynced;
        }
        Lookup::Watched(cache.get(&ObjectRef::new(name).within(namespace)))
    }
}
