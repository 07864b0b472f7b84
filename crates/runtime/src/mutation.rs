//! `mutation`: a controller's own writes laid over an informer's [`Cache`] until its watch
//! delivers them (client-go's `MutationCache`, with integer resource versions).
//!
//! A controller that writes an object and is queued again before the watch has brought the write
//! back would otherwise reconcile the copy it has already replaced: it writes the same status a
//! second time, over a resourceVersion that is no longer current, and is refused with a 409.
//! Reading through a `MutationCache` gives it the newer of the two copies.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use kube::Resource;
use kube::runtime::reflector::ObjectRef;
use parking_lot::Mutex;
use tokio::time::Instant;

use crate::cache::{Cache, Key};

/// How long a write is laid over the cache at most (client-go's controllers use a minute): a
/// watch that has not delivered it by then has lost its connection, and the relist decides.
pub const DEFAULT_TTL: Duration = Duration::from_secs(60);

/// An informer's cache with this process's latest successful writes laid over it. Cheap to
/// clone: clones share the writes.
pub struct MutationCache<K> {
    cache: Cache<K>,
    written: Arc<Mutex<HashMap<Key, Written<K>>>>,
    ttl: Duration,
}

struct Written<K> {
    object: Arc<K>,
    version: u64,
    at: Instant,
}

impl<K> Clone for MutationCache<K> {
    fn clone(&self) -> Self {
        MutationCache {
            cache: self.cache.clone(),
            written: self.written.clone(),
            ttl: self.ttl,
        }
    }
}

/// A resourceVersion as the integer Skiff's (and etcd's) are; `None` for any other (which a
/// mutation cache never overrides), for ordering versions of one object.
pub fn version<K: Resource>(obj: &K) -> Option<u64> {
    obj.meta().resource_version.as_deref()?.parse().ok()
}

impl<K: Resource> MutationCache<K> {
    pub fn new(cache: Cache<K>) -> MutationCache<K> {
        MutationCache::with_ttl(cache, DEFAULT_TTL)
    }

    pub fn with_ttl(cache: Cache<K>, ttl: Duration) -> MutationCache<K> {
        MutationCache {
            cache,
            written: Arc::default(),
            ttl,
        }
    }

    /// Records `object` as the server returned it after a successful write.
    pub fn mutated(&self, object: K) {
        let Some(version) = version(&object) else {
            return;
        };
        let now = Instant::now();
        let mut written = self.written.lock();
        written.retain(|_, w| now.duration_since(w.at) < self.ttl);
        let key = Key::of(&object);
        if written.get(&key).is_some_and(|w| w.version >= version) {
            return;
        }
        let object = Arc::new(object);
        written.insert(
            key,
            Written {
                object,
                version,
                at: now,
            },
        );
    }

    /// The object with this key: the cached copy, or this process's write when that is newer.
    /// An object the cache does not hold (not yet added, or deleted) is not returned.
    pub fn get(&self, key: &ObjectRef<K>) -> Option<Arc<K>> {
        self.newer(self.cache.get(key)?)
    }

    /// The objects of one namespace, each the newer of the cached copy and this process's write.
    pub fn namespaced(&self, namespace: &str) -> Vec<Arc<K>> {
        let cached = self.cache.namespaced(namespace);
        if self.written.lock().is_empty() {
            return cached;
        }
        cached.into_iter().filter_map(|o| self.newer(o)).collect()
    }

    /// The cached copy, or the write laid over it while that is newer and not expired; a write
    /// the cache has caught up with is forgotten.
    fn newer(&self, cached: Arc<K>) -> Option<Arc<K>> {
        let mut written = self.written.lock();
        let key = Key::of(cached.as_ref());
        let Some(w) = written.get(&key) else {
            return Some(cached);
        };
        let caught_up = version(cached.as_ref()).is_none_or(|v| v >= w.version);
        if caught_up || w.at.elapsed() >= self.ttl {
            written.remove(&key);
            return Some(cached);
        }
        Some(w.object.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::apps::v1::ReplicaSet;

    fn rs(name: &str, version: &str, replicas: i32) -> ReplicaSet {
        serde_json::from_value(serde_json::json!({
            "metadata": {"namespace": "a", "name": name, "resourceVersion": version},
            "spec": {"replicas": replicas, "selector": {}},
        }))
        .unwrap()
    }

    fn replicas(rs: &ReplicaSet) -> i32 {
        rs.spec.as_ref().and_then(|s| s.replicas).unwrap()
    }

    fn key(name: &str) -> ObjectRef<ReplicaSet> {
        ObjectRef::new(name).within("a")
    }

    #[tokio::test]
    async fn a_write_is_read_until_the_cache_catches_up() {
        let cache = Cache::from_objects([rs("x", "10", 1), rs("y", "11", 1)]);
        let mutations = MutationCache::new(cache.clone());
        mutations.mutated(rs("x", "12", 2));
        assert_eq!(replicas(&mutations.get(&key("x")).unwrap()), 2);
        assert_eq!(replicas(&mutations.get(&key("y")).unwrap()), 1);
        let mut in_namespace: Vec<i32> = mutations
            .namespaced("a")
            .iter()
            .map(|r| replicas(r))
            .collect();
        in_namespace.sort();
        assert_eq!(in_namespace, [1, 2]);

        // an older write does not replace a newer one
        mutations.mutated(rs("x", "11", 5));
        assert_eq!(replicas(&mutations.get(&key("x")).unwrap()), 2);

        // the watch delivers something newer (another writer's): the cache wins from then on
        cache.insert(Arc::new(rs("x", "13", 3)));
        assert_eq!(replicas(&mutations.get(&key("x")).unwrap()), 3);
        assert!(
            mutations.written.lock().is_empty(),
            "the caught-up write is forgotten"
        );
    }

    #[tokio::test]
    async fn an_object_the_cache_does_not_hold_is_not_returned() {
        let cache = Cache::from_objects([rs("x", "10", 1)]);
        let mutations = MutationCache::new(cache.clone());
        mutations.mutated(rs("new", "12", 2));
        assert!(mutations.get(&key("new")).is_none());
        mutations.mutated(rs("x", "12", 2));
        cache.remove(&Key::of(&rs("x", "", 0)));
        assert!(mutations.get(&key("x")).is_none(), "deleted from the cache");
        assert_eq!(mutations.namespaced("a").len(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_write_expires_after_the_ttl() {
        let cache = Cache::from_objects([rs("x", "10", 1)]);
        let mutations = MutationCache::with_ttl(cache, Duration::from_secs(5));
        mutations.mutated(rs("x", "12", 2));
        tokio::time::advance(Duration::from_secs(4)).await;
        assert_eq!(replicas(&mutations.get(&key("x")).unwrap()), 2);
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(replicas(&mutations.get(&key("x")).unwrap()), 1);
    }

    #[tokio::test]
    async fn a_resource_version_that_is_not_an_integer_never_overrides() {
        let cache = Cache::from_objects([rs("x", "10", 1)]);
        let mutations = MutationCache::new(cache);
        mutations.mutated(rs("x", "opaque", 2));
        assert_eq!(replicas(&mutations.get(&key("x")).unwrap()), 1);
    }
}
