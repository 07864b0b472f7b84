//! The storage objects the volume plugins read, from the shared informers: claims and volumes
//! through assume caches (upstream's `PVCAssumeCache` and `PVAssumeCache`: what VolumeBinding
//! reserved for a pod shows over the informer's copy until the informer brings a newer version
//! or the reservation is undone), StorageClasses, CSINodes, and the nodes and pods the binding
//! cycle checks again while it waits; a signal, raised whenever a claim or volume changes, that
//! waiting binding cycles listen to; and each volume's node affinity, parsed once.
//!
//! Locks: each assume cache's map and the affinity memo are held only for a lookup or an
//! insert, never across another lock or an await.

use std::collections::HashMap;
use std::sync::{Arc, Weak};

use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::{CSINode, StorageClass};
use kube::Resource;
use kube::runtime::reflector::ObjectRef;
use parking_lot::Mutex;
use skiff_component_helpers::node_affinity::NodeSelector;
use skiff_component_helpers::volume::volume_class;
use skiff_runtime::informer::{Cache, Change, Informers, Kind};
use tokio::sync::watch;

/// The index of volumes by class (`""` for none) in the volume cache.
pub const CLASS_INDEX: &str = "storageClassName";

/// A resource version as a number (0 when missing or not a number), for ordering versions of
/// one object.
fn version<K: Resource>(obj: &K) -> u64 {
    skiff_runtime::mutation::version(obj).unwrap_or(0)
}

/// `namespace/name`, or `name` for a cluster-scoped object.
pub fn key_of<K: Resource>(obj: &K) -> String {
    let meta = obj.meta();
    let name = meta.name.as_deref().unwrap_or("");
    match meta.namespace.as_deref() {
        Some(ns) => format!("{ns}/{name}"),
        None => name.to_string(),
    }
}

fn object_ref<K: Resource<DynamicType = ()>>(key: &str) -> ObjectRef<K> {
    match key.split_once('/') {
        Some((ns, name)) => ObjectRef::new(name).within(ns),
        None => ObjectRef::new(key),
    }
}

/// An informer's cache with objects the scheduler assumed written over it: an assumed object
/// is seen until the informer holds a strictly newer version (the write landed, or someone
/// else's did) or it is restored.
pub struct AssumeCache<K> {
    api: Cache<K>,
    /// Assumed objects by key (`namespace/name`, or `name`).
    assumed: Mutex<HashMap<String, Arc<K>>>,
}

impl<K: Kind> AssumeCache<K> {
    pub fn new(api: Cache<K>) -> AssumeCache<K> {
        AssumeCache {
            api,
            assumed: Mutex::default(),
        }
    }

    /// The informer's cache.
    pub fn api(&self) -> &Cache<K> {
        &self.api
    }

    /// The newest the scheduler knows of the object: an assumed version not older than the
    /// informer's, else the informer's (none once the informer has none).
    pub fn get(&self, key: &str) -> Option<Arc<K>> {
        let api = self.api.get(&object_ref(key))?;
        self.newest(key, api)
    }

    fn newest(&self, key: &str, api: Arc<K>) -> Option<Arc<K>> {
        match self.assumed.lock().get(key) {
            Some(a) if version(a.as_ref()) >= version(api.as_ref()) => Some(a.clone()),
            _ => Some(api),
        }
    }

    /// The object as the informer has it, whatever was assumed.
    pub fn get_api(&self, key: &str) -> Option<Arc<K>> {
        self.api.get(&object_ref(key))
    }

    /// The objects filed under `value` in the informer cache's index `index`, each at its
    /// newest.
    pub fn by_index(&self, index: &str, value: &str) -> Vec<Arc<K>> {
        let objects = self.api.by_index(index, value);
        if self.assumed.lock().is_empty() {
            return objects;
        }
        objects
            .into_iter()
            .filter_map(|o| self.newest(&key_of(o.as_ref()), o))
            .collect()
    }

    /// Shows `obj` instead of the informer's version until that is newer (upstream's
    /// `Assume`): the object must exist, and `obj` must not be older than what is seen now.
    pub fn assume(&self, obj: K) -> Result<(), String> {
        let key = key_of(&obj);
        let kind = K::kind(&());
        let Some(current) = self.get(&key) else {
            return Err(format!("could not find {kind} {key:?}"));
        };
        let (stored, new) = (version(current.as_ref()), version(&obj));
        if new < stored {
            return Err(format!(
                "{kind} {key:?} is out of sync (stored: {stored}, assume: {new})"
            ));
        }
        self.assumed.lock().insert(key, Arc::new(obj));
        Ok(())
    }

    /// Forgets what was assumed for `key` (upstream's `Restore`).
    pub fn restore(&self, key: &str) {
        self.assumed.lock().remove(key);
    }

    /// Forgets what was assumed for `key` once the informer's version has overtaken it or the
    /// object is gone (called on each of the informer's changes, so that entries of writes that
    /// landed do not pile up).
    pub fn observe(&self, key: &str) {
        let mut assumed = self.assumed.lock();
        let Some(a) = assumed.get(key) else {
            return;
        };
        let overtaken = match self.api.get(&object_ref(key)) {
            Some(api) => version(api.as_ref()) > version(a.as_ref()),
            None => true,
        };
        if overtaken {
            assumed.remove(key);
        }
    }

    /// How many objects are assumed now.
    pub fn assumed_len(&self) -> usize {
        self.assumed.lock().len()
    }
}

/// A PersistentVolume's required node affinity, parsed.
#[derive(Debug, Clone)]
pub enum Affinity {
    /// None: every node.
    Any,
    /// The nodes the selector matches.
    Nodes(NodeSelector),
    /// A selector that does not parse: no node (upstream's `CheckNodeAffinity` fails).
    Invalid(String),
}

impl Affinity {
    pub fn of(volume: &PersistentVolume) -> Affinity {
        let required = volume
            .spec
            .as_ref()
            .and_then(|s| s.node_affinity.as_ref())
            .and_then(|a| a.required.as_ref());
        match required {
            None => Affinity::Any,
            Some(r) => match NodeSelector::parse(r) {
                Ok(s) => Affinity::Nodes(s),
                Err(e) => Affinity::Invalid(e),
            },
        }
    }

    /// Whether the node may use the volume; why not, in upstream's words.
    pub fn check(&self, node: &Node) -> Result<(), String> {
        match self {
            Affinity::Any => Ok(()),
            Affinity::Nodes(s) if s.matches(node) => Ok(()),
            Affinity::Nodes(_) => Err("no matching NodeSelectorTerms".into()),
            Affinity::Invalid(e) => Err(e.clone()),
        }
    }
}

/// Every cache the volume plugins read, shared by the profiles of one scheduler.
pub struct Volumes {
    pub claims: AssumeCache<PersistentVolumeClaim>,
    pub volumes: AssumeCache<PersistentVolume>,
    pub classes: Cache<StorageClass>,
    pub csi_nodes: Cache<CSINode>,
    pub nodes: Cache<Node>,
    pub pods: Cache<Pod>,
    /// Bumped whenever a claim or volume changes.
    changed: watch::Sender<u64>,
    /// Parsed node affinities by volume name, with the resource version they were parsed at.
    affinities: Mutex<HashMap<String, (u64, Arc<Affinity>)>>,
}

/// The caches [`Volumes`] wraps.
#[derive(Default)]
pub struct Caches {
    pub claims: Cache<PersistentVolumeClaim>,
    pub volumes: Cache<PersistentVolume>,
    pub classes: Cache<StorageClass>,
    pub csi_nodes: Cache<CSINode>,
    pub nodes: Cache<Node>,
    pub pods: Cache<Pod>,
}

impl Volumes {
    /// Over `caches` (tests build them with `Cache::from_objects`; the informers' otherwise).
    pub fn new(caches: Caches) -> Arc<Volumes> {
        caches
            .volumes
            .add_index(CLASS_INDEX, |v| vec![volume_class(v).to_string()]);
        Arc::new(Volumes {
            claims: AssumeCache::new(caches.claims),
            volumes: AssumeCache::new(caches.volumes),
            classes: caches.classes,
            csi_nodes: caches.csi_nodes,
            nodes: caches.nodes,
            pods: caches.pods,
            changed: watch::Sender::new(0),
            affinities: Mutex::default(),
        })
    }

    /// Over the shared informers' caches; claim and volume changes drop assumed versions they
    /// overtake and raise the change signal. The caches do not keep the informers running.
    pub fn from_informers(informers: &Informers) -> Arc<Volumes> {
        let volumes = Volumes::new(Caches {
            claims: informers.get::<PersistentVolumeClaim>().cache().clone(),
            volumes: informers.get::<PersistentVolume>().cache().clone(),
            classes: informers.get::<StorageClass>().cache().clone(),
            csi_nodes: informers.get::<CSINode>().cache().clone(),
            nodes: informers.get::<Node>().cache().clone(),
            pods: informers.get::<Pod>().cache().clone(),
        });
        let weak = Arc::downgrade(&volumes);
        follow::<PersistentVolumeClaim>(informers, weak.clone(), |v, key| v.claims.observe(key));
        follow::<PersistentVolume>(informers, weak, |v, key| {
            v.volumes.observe(key);
            v.affinities.lock().remove(key);
        });
        volumes
    }

    /// Every cache empty (and ready): for profiles built without informers.
    pub fn empty() -> Arc<Volumes> {
        Volumes::new(Caches {
            claims: Cache::from_objects([]),
            volumes: Cache::from_objects([]),
            classes: Cache::from_objects([]),
            csi_nodes: Cache::from_objects([]),
            nodes: Cache::from_objects([]),
            pods: Cache::from_objects([]),
        })
    }

    /// A receiver that sees every later change of a claim or volume.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.changed.subscribe()
    }

    /// Raises the change signal.
    pub fn notify(&self) {
        self.changed.send_modify(|n| *n = n.wrapping_add(1));
    }

    pub fn class(&self, name: &str) -> Option<Arc<StorageClass>> {
        self.classes.get(&ObjectRef::new(name))
    }

    pub fn csi_node(&self, name: &str) -> Option<Arc<CSINode>> {
        self.csi_nodes.get(&ObjectRef::new(name))
    }

    pub fn node(&self, name: &str) -> Option<Arc<Node>> {
        self.nodes.get(&ObjectRef::new(name))
    }

    /// The volume's node affinity, parsed once per version of the volume.
    pub fn affinity(&self, volume: &PersistentVolume) -> Arc<Affinity> {
        let name = volume.metadata.name.as_deref().unwrap_or("");
        let v = version(volume);
        if let Some((at, a)) = self.affinities.lock().get(name)
            && *at == v
        {
            return a.clone();
        }
        let a = Arc::new(Affinity::of(volume));
        self.affinities
            .lock()
            .insert(name.to_string(), (v, a.clone()));
        a
    }
}

/// Calls `observe` with the key of every changed `K` and raises the change signal.
fn follow<K: Kind>(
    informers: &Informers,
    volumes: Weak<Volumes>,
    observe: impl Fn(&Volumes, &str) + Send + 'static,
) {
    informers.get::<K>().add_handler(move |change: &Change<K>| {
        let Some(v) = volumes.upgrade() else {
            return;
        };
        observe(&v, &key_of(change.object().as_ref()));
        v.notify();
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn claim(rv: &str, node: Option<&str>) -> PersistentVolumeClaim {
        let annotations = node.map(|n| json!({"volume.kubernetes.io/selected-node": n}));
        serde_json::from_value(json!({"metadata": {"namespace": "ns", "name": "c",
            "resourceVersion": rv, "annotations": annotations}}))
        .unwrap()
    }

    fn selected(c: &PersistentVolumeClaim) -> Option<&str> {
        c.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get("volume.kubernetes.io/selected-node"))
            .map(String::as_str)
    }

    #[test]
    fn an_assumed_object_shows_until_restored_or_overtaken_by_the_informer() {
        let api = Cache::from_objects([claim("5", None)]);
        let cache = AssumeCache::new(api.clone());
        cache.assume(claim("5", Some("n1"))).unwrap();
        assert_eq!(selected(&cache.get("ns/c").unwrap()), Some("n1"));
        assert_eq!(selected(&cache.get_api("ns/c").unwrap()), None);
        cache.restore("ns/c");
        assert_eq!(selected(&cache.get("ns/c").unwrap()), None);

        cache.assume(claim("5", Some("n1"))).unwrap();
        // the informer's resync of the same version does not hide it
        cache.observe("ns/c");
        assert_eq!(cache.assumed_len(), 1);
        // the write landed: the informer's newer version wins and the entry goes
        api.store(claim("6", Some("n1")));
        cache.observe("ns/c");
        assert_eq!(cache.assumed_len(), 0);
        assert_eq!(
            cache
                .get("ns/c")
                .unwrap()
                .metadata
                .resource_version
                .as_deref(),
            Some("6")
        );
    }

    #[test]
    fn assuming_an_older_version_or_an_unknown_object_fails() {
        let cache = AssumeCache::new(Cache::from_objects([claim("5", None)]));
        let err = cache.assume(claim("4", Some("n1"))).unwrap_err();
        assert_eq!(
            err,
            "PersistentVolumeClaim \"ns/c\" is out of sync (stored: 5, assume: 4)"
        );
        let mut other = claim("5", None);
        other.metadata.name = Some("d".into());
        assert_eq!(
            cache.assume(other).unwrap_err(),
            "could not find PersistentVolumeClaim \"ns/d\""
        );
    }

    #[test]
    fn a_volumes_affinity_is_parsed_once_per_version() {
        let volumes = Volumes::empty();
        let pv: PersistentVolume = serde_json::from_value(json!({
            "metadata": {"name": "v", "resourceVersion": "1"},
            "spec": {"nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": "kubernetes.io/hostname", "operator": "In", "values": ["n1"]}]}]}}}}))
        .unwrap();
        let a = volumes.affinity(&pv);
        assert!(Arc::ptr_eq(&a, &volumes.affinity(&pv)));
        let node = |name: &str| -> Node {
            serde_json::from_value(json!({"metadata": {"name": name,
                "labels": {"kubernetes.io/hostname": name}}}))
            .unwrap()
        };
        assert!(a.check(&node("n1")).is_ok());
        assert_eq!(
            a.check(&node("n2")),
            Err("no matching NodeSelectorTerms".into())
        );
    }
}
