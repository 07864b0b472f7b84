//! What plugins look at: a pod with its resource requests worked out ([`PodInfo`]), a node
//! with the pods on it and what they use ([`NodeInfo`]), and the cluster as one cycle sees it
//! ([`Snapshot`]). Upstream's `framework.PodInfo`, `NodeInfo` and the cache snapshot. The
//! resource amounts, a pod's effective requests and its host ports come from the component
//! helpers, which the kubelet's admission check shares.

use std::any::Any;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use parking_lot::Mutex;

use k8s_openapi::api::core::v1::{Node, PersistentVolumeClaim, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use skiff_apimachinery::labels::Selector;
pub use skiff_component_helpers::ports::{HostPort, host_ports};
pub use skiff_component_helpers::resources::Resource;
use skiff_component_helpers::resources::{node_allocatable, pod_requests_in_use};

use super::class::PodClass;

/// CPU assumed for a container that requests none, when scoring (upstream's
/// `DefaultMilliCPURequest`).
pub const DEFAULT_MILLI_CPU_REQUEST: i64 = 100;
/// Memory assumed for a container that requests none, when scoring (upstream's
/// `DefaultMemoryRequest`, 200 MiB).
pub const DEFAULT_MEMORY_REQUEST: i64 = 200 * 1024 * 1024;

/// The same with upstream's scoring defaults for missing CPU and memory requests.
fn non_zero(mut r: Resource) -> Resource {
    if r.milli_cpu == 0 {
        r.milli_cpu = DEFAULT_MILLI_CPU_REQUEST;
    }
    if r.memory == 0 {
        r.memory = DEFAULT_MEMORY_REQUEST;
    }
    r
}

/// One memoized value on a [`PodInfo`], under its key.
type MemoEntry = (&'static str, Arc<dyn Any + Send + Sync>);

/// A pod with what the plugins keep asking about it computed once.
#[derive(Debug, Clone)]
pub struct PodInfo {
    pub pod: Arc<Pod>,
    /// `namespace/name`.
    pub key: String,
    /// Effective requests, for fit.
    pub requests: Resource,
    /// Effective requests with upstream's defaults for missing CPU and memory, for scoring.
    pub non_zero_requests: Resource,
    /// What plugins derive from the pod once and reuse every cycle (parsed affinity terms),
    /// by plugin-chosen key; shared by clones of this `PodInfo`.
    memo: Arc<Mutex<Vec<MemoEntry>>>,
    class: Arc<PodClass>,
}

impl PodInfo {
    pub fn new(pod: Arc<Pod>) -> PodInfo {
        let requests = pod_requests_in_use(&pod, |r| r);
        let non_zero_requests = pod_requests_in_use(&pod, non_zero);
        PodInfo {
            key: format!("{}/{}", pod_namespace(&pod), name_of(&pod)),
            requests,
            non_zero_requests,
            memo: Arc::default(),
            class: PodClass::of(&pod),
            pod,
        }
    }

    /// The pods alike to this one for label matching (see [`PodClass`]).
    pub fn class(&self) -> &Arc<PodClass> {
        &self.class
    }

    /// What `init` derives from the pod, computed on first use under `key` and kept for as
    /// long as this `PodInfo` lives (upstream keeps parsed affinity terms on its `PodInfo`).
    pub fn memo<T: Any + Send + Sync>(
        &self,
        key: &'static str,
        init: impl FnOnce(&Pod) -> T,
    ) -> Arc<T> {
        let mut memo = self.memo.lock();
        if let Some(v) = memo
            .iter()
            .find(|(k, _)| *k == key)
            .and_then(|(_, v)| v.clone().downcast::<T>().ok())
        {
            return v;
        }
        let v = Arc::new(init(&self.pod));
        memo.retain(|(k, _)| *k != key);
        memo.push((key, v.clone()));
        v
    }

    pub fn name(&self) -> &str {
        name_of(&self.pod)
    }

    pub fn namespace(&self) -> &str {
        pod_namespace(&self.pod)
    }

    pub fn uid(&self) -> &str {
        self.pod.metadata.uid.as_deref().unwrap_or("")
    }

    pub fn labels(&self) -> BTreeMap<String, String> {
        self.pod.metadata.labels.clone().unwrap_or_default()
    }

    /// `spec.schedulerName`: the profile the pod is for (the default scheduler when unset).
    pub fn scheduler_name(&self) -> &str {
        self.pod
            .spec
            .as_ref()
            .and_then(|s| s.scheduler_name.as_deref())
            .unwrap_or(crate::scheduler::DEFAULT_SCHEDULER_NAME)
    }

    /// `spec.priority`, 0 when unset.
    pub fn priority(&self) -> i32 {
        self.pod.spec.as_ref().and_then(|s| s.priority).unwrap_or(0)
    }

    /// `spec.nodeName`, or "" while unassigned.
    pub fn node_name(&self) -> &str {
        self.pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.as_deref())
            .unwrap_or("")
    }

    /// Whether the pod has pod affinity or anti-affinity terms of any kind.
    pub fn has_affinity(&self) -> bool {
        self.class.has_affinity
    }

    /// Whether the pod has required anti-affinity terms.
    pub fn has_required_anti_affinity(&self) -> bool {
        self.class.has_required_anti_affinity
    }
}

fn name_of(pod: &Pod) -> &str {
    pod.metadata.name.as_deref().unwrap_or("")
}

/// A pod's namespace as the framework reads it (`default` when unset).
pub fn pod_namespace(pod: &Pod) -> &str {
    pod.metadata.namespace.as_deref().unwrap_or("default")
}

/// Whether the pod is being deleted (upstream skips such pods when counting for spreading).
pub fn is_terminating(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_some()
}

/// How many of a node's pods have one class; the id is kept here so that counting a node's
/// pods by class reads one vector.
#[derive(Debug, Clone)]
pub struct ClassCount {
    /// [`PodClass::id`].
    pub id: u32,
    pub count: u32,
    /// One of the pods (they are alike): what a plugin asks about the class, it asks it.
    pub pod: Arc<PodInfo>,
}

/// A node and the pods assigned (or assumed) to it (upstream's `framework.NodeInfo`).
#[derive(Debug, Clone)]
pub struct NodeInfo {
    pub node: Arc<Node>,
    pub pods: Vec<Arc<PodInfo>>,
    /// How many of `pods` each class has (see [`ClassCount`]).
    pub classes: Vec<ClassCount>,
    /// How many of `pods` have pod affinity or anti-affinity, and required anti-affinity:
    /// `classes` says the same, but the affinity plugins ask every node each cycle, and a
    /// count is one load where the classes are three pointers away.
    pub pods_with_affinity: u32,
    pub pods_with_required_anti_affinity: u32,
    /// Sum of the pods' requests.
    pub requested: Resource,
    /// Sum of the pods' requests with the scoring defaults.
    pub non_zero_requested: Resource,
    /// `status.allocatable`.
    pub allocatable: Resource,
    /// Host ports the pods use.
    pub used_ports: Vec<HostPort>,
    /// Bumped on every change, so a snapshot can tell what to copy.
    pub generation: u64,
}

impl NodeInfo {
    pub fn new(node: Arc<Node>) -> NodeInfo {
        let allocatable = node_allocatable(&node);
        NodeInfo {
            node,
            pods: Vec::new(),
            classes: Vec::new(),
            pods_with_affinity: 0,
            pods_with_required_anti_affinity: 0,
            requested: Resource::default(),
            non_zero_requested: Resource::default(),
            allocatable,
            used_ports: Vec::new(),
            generation: 0,
        }
    }

    pub fn name(&self) -> &str {
        self.node.metadata.name.as_deref().unwrap_or("")
    }

    pub fn labels(&self) -> BTreeMap<String, String> {
        self.node.metadata.labels.clone().unwrap_or_default()
    }

    /// Replaces the node object (its allocatable may have changed), keeping the pods.
    pub fn set_node(&mut self, node: Arc<Node>) {
        let pods = std::mem::take(&mut self.pods);
        let generation = self.generation;
        *self = NodeInfo::new(node);
        for p in pods {
            self.add_pod(p);
        }
        self.generation = generation + 1;
    }

    pub fn add_pod(&mut self, pod: Arc<PodInfo>) {
        self.requested.add(&pod.requests);
        self.non_zero_requested.add(&pod.non_zero_requests);
        self.used_ports.extend(host_ports(&pod.pod));
        self.pods_with_affinity += u32::from(pod.has_affinity());
        self.pods_with_required_anti_affinity += u32::from(pod.has_required_anti_affinity());
        let id = pod.class.id;
        match self.classes.iter_mut().find(|c| c.id == id) {
            Some(c) => c.count += 1,
            None => self.classes.push(ClassCount {
                id,
                count: 1,
                pod: pod.clone(),
            }),
        }
        self.pods.push(pod);
        self.generation += 1;
    }

    /// Removes the pod with this `namespace/name` key; whether it was there.
    pub fn remove_pod(&mut self, key: &str) -> bool {
        let Some(i) = self.pods.iter().position(|p| p.key == key) else {
            return false;
        };
        let pod = self.pods.swap_remove(i);
        self.requested.sub(&pod.requests);
        self.non_zero_requested.sub(&pod.non_zero_requests);
        for port in host_ports(&pod.pod) {
            if let Some(j) = self.used_ports.iter().position(|p| *p == port) {
                self.used_ports.swap_remove(j);
            }
        }
        self.pods_with_affinity -= u32::from(pod.has_affinity());
        self.pods_with_required_anti_affinity -= u32::from(pod.has_required_anti_affinity());
        let id = pod.class.id;
        if let Some(c) = self.classes.iter().position(|c| c.id == id) {
            self.classes[c].count -= 1;
            match self.pods.iter().find(|p| p.class.id == id) {
                None => {
                    self.classes.swap_remove(c);
                }
                Some(other) if Arc::ptr_eq(&self.classes[c].pod, &pod) => {
                    self.classes[c].pod = other.clone();
                }
                Some(_) => {}
            }
        }
        self.generation += 1;
        true
    }
}

/// The cluster as one scheduling cycle sees it: every node with its pods, frozen for the
/// cycle (upstream's cache `Snapshot`). The name index and image counts are shared with the
/// cache and rebuilt only when nodes come, go or change images, so taking a snapshot costs one
/// reference count per node.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    nodes: Vec<Arc<NodeInfo>>,
    index: Arc<HashMap<String, usize>>,
    images: Arc<HashMap<String, usize>>,
    /// Pods nominated to each node by preemption and not yet bound (upstream's nominator):
    /// Filter counts those of at least the incoming pod's priority as if they were there.
    nominated: Arc<NominatedPods>,
    /// Namespaces' labels, for namespace selectors.
    namespaces: Arc<NamespaceLabels>,
    /// Services and controllers' selectors, for default spreading.
    workloads: Arc<Workloads>,
    /// The cluster's PodDisruptionBudgets, which preemption tries not to violate.
    pdbs: Arc<Vec<Arc<PodDisruptionBudget>>>,
    /// PersistentVolumeClaims by `namespace/name`, for volume checks.
    claims: Arc<Claims>,
    /// The cache's node layout this snapshot was taken at (None: not from a cache).
    layout: Option<u64>,
}

/// PersistentVolumeClaim `namespace/name` → the claim.
pub type Claims = HashMap<String, Arc<PersistentVolumeClaim>>;

/// Namespace name → its labels.
pub type NamespaceLabels = HashMap<String, BTreeMap<String, String>>;

/// What selects pods: the Services (their `spec.selector`, by namespace) and the ReplicaSets
/// and StatefulSets (their `spec.selector`, by `Kind/namespace/name`), for PodTopologySpread's
/// default constraints (upstream's `DefaultSelector` reads the same through listers).
#[derive(Debug, Clone, Default)]
pub struct Workloads {
    pub services: HashMap<String, HashMap<String, BTreeMap<String, String>>>,
    pub controllers: HashMap<String, Selector>,
}

/// Node name → the pods nominated to it.
pub type NominatedPods = HashMap<String, Vec<Arc<PodInfo>>>;

/// Image names a node reports holding.
pub fn node_images(node: &Node) -> impl Iterator<Item = &str> {
    node.status
        .iter()
        .flat_map(|s| s.images.iter().flatten())
        .flat_map(|i| i.names.iter().flatten())
        .map(String::as_str)
}

/// Node name → position, for [`Snapshot`].
pub fn node_index(nodes: &[Arc<NodeInfo>]) -> HashMap<String, usize> {
    nodes
        .iter()
        .enumerate()
        .map(|(i, n)| (n.name().to_string(), i))
        .collect()
}

/// Image name → how many nodes hold it (upstream's `ImageStateSummary.NumNodes`).
pub fn image_counts(nodes: &[Arc<NodeInfo>]) -> HashMap<String, usize> {
    let mut counts = HashMap::new();
    for n in nodes {
        for image in node_images(&n.node) {
            *counts.entry(image.to_string()).or_default() += 1;
        }
    }
    counts
}

impl Snapshot {
    pub fn new(nodes: Vec<Arc<NodeInfo>>) -> Snapshot {
        let index = Arc::new(node_index(&nodes));
        let images = Arc::new(image_counts(&nodes));
        Snapshot::from_parts(nodes, index, images)
    }

    /// A snapshot from parts the caller keeps up to date (the cache).
    pub fn from_parts(
        nodes: Vec<Arc<NodeInfo>>,
        index: Arc<HashMap<String, usize>>,
        images: Arc<HashMap<String, usize>>,
    ) -> Snapshot {
        Snapshot {
            nodes,
            index,
            images,
            nominated: Arc::default(),
            pdbs: Arc::default(),
            claims: Arc::default(),
            namespaces: Arc::default(),
            workloads: Arc::default(),
            layout: None,
        }
    }

    pub(crate) fn with_layout(mut self, layout: u64) -> Snapshot {
        self.layout = Some(layout);
        self
    }

    pub(crate) fn layout(&self) -> Option<u64> {
        self.layout
    }

    pub(crate) fn replace(&mut self, i: usize, node: Arc<NodeInfo>) {
        self.nodes[i] = node;
    }

    pub(crate) fn set_images(&mut self, images: Arc<HashMap<String, usize>>) {
        self.images = images;
    }

    pub fn set_nominated(&mut self, nominated: Arc<NominatedPods>) {
        self.nominated = nominated;
    }

    pub fn set_workloads(&mut self, workloads: Arc<Workloads>) {
        self.workloads = workloads;
    }

    pub fn workloads(&self) -> &Workloads {
        &self.workloads
    }

    pub fn set_namespaces(&mut self, namespaces: Arc<NamespaceLabels>) {
        self.namespaces = namespaces;
    }

    pub fn namespaces(&self) -> Arc<NamespaceLabels> {
        self.namespaces.clone()
    }

    pub fn namespace_labels(&self) -> &NamespaceLabels {
        &self.namespaces
    }

    pub fn set_pdbs(&mut self, pdbs: Arc<Vec<Arc<PodDisruptionBudget>>>) {
        self.pdbs = pdbs;
    }

    pub fn pdbs(&self) -> &[Arc<PodDisruptionBudget>] {
        &self.pdbs
    }

    pub fn set_claims(&mut self, claims: Arc<Claims>) {
        self.claims = claims;
    }

    /// The PersistentVolumeClaim `namespace/name`, if the informer has it.
    pub fn claim(&self, namespace: &str, name: &str) -> Option<&PersistentVolumeClaim> {
        if self.claims.is_empty() {
            return None;
        }
        self.claims
            .get(&format!("{namespace}/{name}"))
            .map(AsRef::as_ref)
    }

    /// The pods nominated to `node` (none, cheaply, while nothing is nominated anywhere).
    pub fn nominated(&self, node: &str) -> &[Arc<PodInfo>] {
        if self.nominated.is_empty() {
            return &[];
        }
        self.nominated.get(node).map_or(&[], Vec::as_slice)
    }

    /// How many nodes hold an image, by any of the names nodes report for it.
    pub fn nodes_with_image(&self, name: &str) -> usize {
        self.images.get(name).copied().unwrap_or(0)
    }

    pub fn nodes(&self) -> &[Arc<NodeInfo>] {
        &self.nodes
    }

    pub fn get(&self, name: &str) -> Option<&Arc<NodeInfo>> {
        self.index.get(name).map(|i| &self.nodes[*i])
    }

    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// Nodes with at least one pod that has pod affinity or anti-affinity.
    pub fn nodes_with_affinity_pods(&self) -> impl Iterator<Item = &Arc<NodeInfo>> {
        self.nodes.iter().filter(|n| n.pods_with_affinity > 0)
    }

    /// Nodes with at least one pod that has required anti-affinity.
    pub fn nodes_with_required_anti_affinity_pods(&self) -> impl Iterator<Item = &Arc<NodeInfo>> {
        self.nodes
            .iter()
            .filter(|n| n.pods_with_required_anti_affinity > 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::testing::{PodBuilder, node};

    #[test]
    fn pod_requests_sum_containers_and_take_the_largest_init_container() {
        let pod = PodBuilder::new("p")
            .container("a", &[("cpu", "100m"), ("memory", "100Mi")])
            .container("b", &[("cpu", "200m")])
            .init_container("init", &[("cpu", "500m"), ("memory", "50Mi")])
            .build();
        let info = PodInfo::new(Arc::new(pod));
        assert_eq!(info.requests.milli_cpu, 500);
        assert_eq!(info.requests.memory, 100 << 20);
        // scoring defaults fill in b's memory (200 MiB)
        assert_eq!(
            info.non_zero_requests.memory,
            (100 << 20) + DEFAULT_MEMORY_REQUEST
        );
    }

    #[test]
    fn node_info_counts_its_pods_by_class_as_they_come_and_go() {
        let mut n = NodeInfo::new(Arc::new(node("n1").build()));
        let web = |name: &str| PodBuilder::new(name).label("app", "class-web").info();
        for name in ["w1", "w2", "w3"] {
            n.add_pod(web(name));
        }
        n.add_pod(PodBuilder::new("d1").label("app", "class-db").info());
        let counts = |n: &NodeInfo| {
            let mut c: Vec<(String, u32)> = n
                .classes
                .iter()
                .map(|c| (c.pod.labels()["app"].clone(), c.count))
                .collect();
            c.sort();
            c
        };
        assert_eq!(
            counts(&n),
            [("class-db".to_string(), 1), ("class-web".to_string(), 3)]
        );
        // removing the class's representative hands the role to another pod of the class
        assert!(n.classes.iter().any(|c| c.pod.name() == "w1"));
        n.remove_pod("default/w1");
        assert!(n.classes.iter().all(|c| c.pod.name() != "w1"));
        n.remove_pod("default/d1");
        assert_eq!(counts(&n), [("class-web".to_string(), 2)]);
        n.remove_pod("default/w2");
        n.remove_pod("default/w3");
        assert!(n.classes.is_empty());
    }

    #[test]
    fn node_info_tracks_requests_and_ports_as_pods_come_and_go() {
        let mut n = NodeInfo::new(Arc::new(node("n1").cpu("2").memory("4Gi").build()));
        assert_eq!(n.allocatable.milli_cpu, 2000);
        let p = PodBuilder::new("web")
            .container("c", &[("cpu", "250m")])
            .host_port(8080)
            .build();
        n.add_pod(Arc::new(PodInfo::new(Arc::new(p))));
        assert_eq!(n.requested.milli_cpu, 250);
        assert_eq!(n.used_ports.len(), 1);
        assert!(n.remove_pod("default/web"));
        assert_eq!(n.requested.milli_cpu, 0);
        assert!(n.used_ports.is_empty());
        assert!(!n.remove_pod("default/web"));
    }

    #[test]
    fn memos_are_computed_once_and_shared_by_clones() {
        let info = PodBuilder::new("p").label("app", "web").info();
        let calls = std::sync::atomic::AtomicUsize::new(0);
        let count = |pod: &Pod| {
            calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            pod.metadata.labels.as_ref().map_or(0, |l| l.len())
        };
        assert_eq!(*info.memo("labels", count), 1);
        let clone = (*info).clone();
        assert_eq!(*clone.memo("labels", count), 1);
        assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 1);
    }
}
