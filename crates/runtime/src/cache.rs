//! `cache`: the indexed, read-only view of one resource an [`Informer`](crate::informer::Informer)
//! keeps (client-go's `Indexer`): objects by key, by namespace, and by any index a controller adds
//! (pods by node, say), so that a reconcile reads the objects it needs without scanning them all.
//!
//! Written here rather than using kube-runtime's reflector `Store`, which has no indexes: every
//! controller would scan all pods of the cluster on every reconcile.
//!
//! A cache holds API objects, or the compact form a transforming informer makes of each
//! ([`Informers::transformed`](crate::informer::Informers::transformed)): anything [`Cached`].

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use kube::Resource;
use kube::runtime::reflector::ObjectRef;
use parking_lot::RwLock;
use tokio::sync::watch;

/// What an index files an object under (none, one or several values).
pub type IndexFn<K> = Box<dyn Fn(&K) -> Vec<String> + Send + Sync>;

/// The built-in index of every cache: objects by namespace (cluster-scoped ones under `""`).
pub const NAMESPACE_INDEX: &str = "namespace";

/// What a cache needs of what it holds: where to file it and which version of its object it is.
/// Every API object (`kube::Resource`) has it; a compact form of one implements it itself.
pub trait Cached {
    /// Its object's namespace (None when cluster-scoped) and name, which the cache files it by.
    fn cache_key(&self) -> (Option<&str>, &str);

    /// Its object's `resourceVersion`, by which a relist tells a changed object from one it
    /// already has; None for a form that keeps none (a relist then reports it as updated).
    fn cache_version(&self) -> Option<&str>;
}

impl<K: Resource> Cached for K {
    fn cache_key(&self) -> (Option<&str>, &str) {
        let meta = self.meta();
        (
            meta.namespace.as_deref(),
            meta.name.as_deref().unwrap_or_default(),
        )
    }

    fn cache_version(&self) -> Option<&str> {
        self.meta().resource_version.as_deref()
    }
}

/// Where a cache files an object: its namespace and name. Every object of a cache is of one
/// resource, so this is all an [`ObjectRef`] says that tells them apart (without its dynamic
/// type, which for an untyped resource is a whole `ApiResource` per key).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct Key {
    namespace: Option<String>,
    name: String,
}

impl Key {
    pub(crate) fn of<K: Cached>(obj: &K) -> Key {
        let (namespace, name) = obj.cache_key();
        Key {
            namespace: namespace.map(str::to_string),
            name: name.to_string(),
        }
    }

    fn of_ref<K: Resource>(key: &ObjectRef<K>) -> Key {
        Key {
            namespace: key.namespace.clone(),
            name: key.name.clone(),
        }
    }
}

struct Index<K> {
    name: &'static str,
    values: IndexFn<K>,
    keys: HashMap<String, HashSet<Arc<Key>>>,
}

impl<K> Index<K> {
    fn file(&mut self, key: &Arc<Key>, obj: &K) {
        for value in (self.values)(obj) {
            self.keys.entry(value).or_default().insert(key.clone());
        }
    }

    fn unfile(&mut self, key: &Key, obj: &K) {
        for value in (self.values)(obj) {
            if let Some(keys) = self.keys.get_mut(&value) {
                keys.remove(key);
                if keys.is_empty() {
                    self.keys.remove(&value);
                }
            }
        }
    }
}

/// The objects by key and under each index. An object's key is allocated once and shared by
/// the map and every index that files it: with many small objects (a metrics server's
/// thousands of pods' names and labels) keys would otherwise weigh more than the objects.
struct Contents<K> {
    objects: HashMap<Arc<Key>, Arc<K>>,
    indexes: Vec<Index<K>>,
}

impl<K: Cached> Contents<K> {
    fn insert(&mut self, obj: Arc<K>) -> Option<Arc<K>> {
        let key = Arc::new(Key::of(obj.as_ref()));
        let old = self.remove(&key);
        for index in &mut self.indexes {
            index.file(&key, &obj);
        }
        self.objects.insert(key, obj);
        old
    }

    fn remove(&mut self, key: &Key) -> Option<Arc<K>> {
        let old = self.objects.remove(key)?;
        for index in &mut self.indexes {
            index.unfile(key, &old);
        }
        Some(old)
    }
}

/// A shared, cheaply cloned handle on one resource's cached objects (of a typed resource, or an
/// untyped one's: `PartialObjectMeta<DynamicObject>`, whose keys' dynamic type is ignored), or
/// on their compact forms.
pub struct Cache<K> {
    contents: Arc<RwLock<Contents<K>>>,
    ready: watch::Receiver<bool>,
    /// Kept by the cache so that a cache made with [`Cache::from_objects`] stays ready.
    ready_tx: Arc<watch::Sender<bool>>,
}

impl<K> Clone for Cache<K> {
    fn clone(&self) -> Self {
        Cache {
            contents: self.contents.clone(),
            ready: self.ready.clone(),
            ready_tx: self.ready_tx.clone(),
        }
    }
}

impl<K: Cached> Default for Cache<K> {
    fn default() -> Self {
        let (ready_tx, ready) = watch::channel(false);
        let namespace = Index {
            name: NAMESPACE_INDEX,
            values: Box::new(|o: &K| vec![o.cache_key().0.unwrap_or_default().to_string()]),
            keys: HashMap::new(),
        };
        Cache {
            contents: Arc::new(RwLock::new(Contents {
                objects: HashMap::new(),
                indexes: vec![namespace],
            })),
            ready,
            ready_tx: Arc::new(ready_tx),
        }
    }
}

impl<K: Cached> Cache<K> {
    /// A cache that already holds `objects` and is ready (for tests of code that reads caches).
    pub fn from_objects(objects: impl IntoIterator<Item = K>) -> Cache<K> {
        let cache = Cache::default();
        cache.replace(objects.into_iter().map(Arc::new).collect());
        cache.ready_tx.send_replace(true);
        cache
    }

    /// Stores `obj` as if the watch had brought it, telling no handler; returns what it
    /// replaced. For tests of code that reads a cache another party writes (with
    /// [`Cache::from_objects`]); in a running process only the informer writes its cache.
    pub fn store(&self, obj: K) -> Option<Arc<K>> {
        self.insert(Arc::new(obj))
    }

    /// Adds an index; the objects already cached are filed under it at once. A name already
    /// used is replaced.
    pub fn add_index(
        &self,
        name: &'static str,
        values: impl Fn(&K) -> Vec<String> + Send + Sync + 'static,
    ) {
        let mut contents = self.contents.write();
        contents.indexes.retain(|i| i.name != name);
        let mut index = Index {
            name,
            values: Box::new(values),
            keys: HashMap::new(),
        };
        for (key, obj) in &contents.objects {
            index.file(key, obj);
        }
        contents.indexes.push(index);
    }

    /// Every object.
    pub fn state(&self) -> Vec<Arc<K>> {
        self.contents.read().objects.values().cloned().collect()
    }

    /// Every object `predicate` accepts.
    pub fn state_filter(&self, mut predicate: impl FnMut(&K) -> bool) -> Vec<Arc<K>> {
        let contents = self.contents.read();
        contents
            .objects
            .values()
            .filter(|o| predicate(o))
            .cloned()
            .collect()
    }

    /// Some object `predicate` accepts.
    pub fn find(&self, mut predicate: impl FnMut(&K) -> bool) -> Option<Arc<K>> {
        let contents = self.contents.read();
        contents.objects.values().find(|o| predicate(o)).cloned()
    }

    /// The objects filed under `value` in the index `name` (none if there is no such index).
    pub fn by_index(&self, name: &str, value: &str) -> Vec<Arc<K>> {
        let contents = self.contents.read();
        let Some(index) = contents.indexes.iter().find(|i| i.name == name) else {
            return Vec::new();
        };
        index
            .keys
            .get(value)
            .into_iter()
            .flatten()
            .filter_map(|key| contents.objects.get(key).cloned())
            .collect()
    }

    /// The objects of one namespace.
    pub fn namespaced(&self, namespace: &str) -> Vec<Arc<K>> {
        self.by_index(NAMESPACE_INDEX, namespace)
    }

    pub fn len(&self) -> usize {
        self.contents.read().objects.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether the first full list is in.
    pub fn is_ready(&self) -> bool {
        *self.ready.borrow()
    }

    /// Waits for the first full list.
    pub async fn wait_until_ready(&self) {
        let mut ready = self.ready.clone();
        // the sender lives in `self`, so this only ends with the first list
        let _ = ready.wait_for(|r| *r).await;
    }

    pub(crate) fn mark_ready(&self) {
        self.ready_tx
            .send_if_modified(|r| !std::mem::replace(r, true));
    }

    /// Stores `obj`; returns what it replaced.
    pub(crate) fn insert(&self, obj: Arc<K>) -> Option<Arc<K>> {
        self.contents.write().insert(obj)
    }

    pub(crate) fn remove(&self, key: &Key) -> Option<Arc<K>> {
        self.contents.write().remove(key)
    }

    /// Replaces every object (after a list); returns what was held before.
    pub(crate) fn replace(&self, objects: Vec<Arc<K>>) -> HashMap<Arc<Key>, Arc<K>> {
        let mut contents = self.contents.write();
        // sized for the list at once, rather than grown (and copied) a step at a time
        let sized = HashMap::with_capacity(objects.len());
        let before = std::mem::replace(&mut contents.objects, sized);
        for index in &mut contents.indexes {
            index.keys.clear();
        }
        for obj in objects {
            contents.insert(obj);
        }
        before
    }
}

impl<K: Resource> Cache<K> {
    /// The object with this key.
    pub fn get(&self, key: &ObjectRef<K>) -> Option<Arc<K>> {
        self.contents.read().objects.get(&Key::of_ref(key)).cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Pod;

    fn pod(namespace: &str, name: &str, node: &str) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"namespace": namespace, "name": name},
            "spec": {"nodeName": node, "containers": []},
        }))
        .unwrap()
    }

    fn names(pods: Vec<Arc<Pod>>) -> Vec<String> {
        let mut names: Vec<String> = pods
            .iter()
            .map(|p| p.metadata.name.clone().unwrap())
            .collect();
        names.sort();
        names
    }

    fn node_of(p: &Pod) -> Vec<String> {
        p.spec.iter().filter_map(|s| s.node_name.clone()).collect()
    }

    #[test]
    fn indexes_follow_inserts_updates_and_removals() {
        let cache = Cache::from_objects([pod("a", "p1", "n1"), pod("b", "p2", "n1")]);
        cache.add_index("node", node_of);
        assert_eq!(names(cache.by_index("node", "n1")), ["p1", "p2"]);
        assert_eq!(names(cache.namespaced("a")), ["p1"]);

        let old = cache.insert(Arc::new(pod("a", "p1", "n2")));
        assert!(old.is_some());
        assert_eq!(names(cache.by_index("node", "n1")), ["p2"]);
        assert_eq!(names(cache.by_index("node", "n2")), ["p1"]);

        cache.remove(&Key::of_ref(&ObjectRef::<Pod>::new("p2").within("b")));
        assert!(cache.by_index("node", "n1").is_empty());
        assert!(cache.namespaced("b").is_empty());
        assert!(cache.by_index("nosuch", "x").is_empty());

        let before = cache.replace(vec![Arc::new(pod("c", "p3", "n1"))]);
        assert_eq!(before.len(), 1);
        assert_eq!(names(cache.by_index("node", "n1")), ["p3"]);
        assert!(cache.namespaced("a").is_empty());
        assert_eq!(cache.len(), 1);
    }

    #[tokio::test]
    async fn a_cache_is_ready_only_after_its_first_list() {
        let cache = Cache::<Pod>::default();
        assert!(!cache.is_ready());
        let waiter = tokio::spawn({
            let cache = cache.clone();
            async move { cache.wait_until_ready().await }
        });
        cache.mark_ready();
        waiter.await.unwrap();
        assert!(cache.is_ready());
    }
}
