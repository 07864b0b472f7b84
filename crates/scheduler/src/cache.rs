//! The scheduler's view of nodes and the pods on them (upstream's `internal/cache`), including
//! **assumed** pods: a pod is added to its chosen node the moment the decision is made, so the
//! next cycle already counts it while the binding is still in flight; it is confirmed when the
//! watch shows it bound, or forgotten if the binding fails.
//!
//! `NodeInfo`s are shared with snapshots through `Arc`: a change copies only the node it
//! touches (`Arc::make_mut`), and a snapshot is a vector of `Arc`s.

use std::collections::HashMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, Pod};

use crate::framework::types::{image_counts, node_images, node_index};
use crate::framework::{ClusterEvent, NodeInfo, PodInfo, Snapshot};

/// Where the cache has a pod.
#[derive(Debug, Clone, PartialEq, Eq)]
enum PodState {
    /// Placed by this scheduler; its binding is not seen yet.
    Assumed { node: String },
    /// Seen bound to `node` by the watch.
    Bound { node: String },
}

/// Nodes, the pods on them, and the assumed pods.
#[derive(Default)]
pub struct Cache {
    /// Nodes in the order they were added, so snapshots list nodes stably.
    nodes: Vec<Arc<NodeInfo>>,
    /// Node name → position in `nodes`; rebuilt when a node comes or goes.
    index: Arc<HashMap<String, usize>>,
    /// Image name → nodes holding it; rebuilt when a node's images change.
    images: Arc<HashMap<String, usize>>,
    pods: HashMap<String, PodState>,
    /// Pods seen bound to a node the cache does not have yet, kept until the node appears.
    orphans: HashMap<String, Vec<Arc<PodInfo>>>,
    /// Positions of nodes changed since [`Cache::update_snapshot`] last ran.
    dirty: Vec<usize>,
    /// Bumped when nodes come or go (positions shift): snapshots are then rebuilt whole.
    layout: u64,
}

impl Cache {
    fn node_mut(&mut self, name: &str) -> Option<&mut NodeInfo> {
        let i = *self.index.get(name)?;
        self.dirty.push(i);
        Some(Arc::make_mut(&mut self.nodes[i]))
    }

    pub fn add_or_update_node(&mut self, node: Arc<Node>) {
        let name = node.metadata.name.clone().unwrap_or_default();
        let images_changed = match self.index.get(&name) {
            Some(&i) => {
                let old: Vec<&str> = node_images(&self.nodes[i].node).collect();
                let changed = old != node_images(&node).collect::<Vec<_>>();
                Arc::make_mut(&mut self.nodes[i]).set_node(node);
                self.dirty.push(i);
                changed
            }
            None => {
                let mut info = NodeInfo::new(node);
                for pod in self.orphans.remove(&name).unwrap_or_default() {
                    info.add_pod(pod);
                }
                let has_images = node_images(&info.node).next().is_some();
                self.nodes.push(Arc::new(info));
                self.index = Arc::new(node_index(&self.nodes));
                self.layout += 1;
                has_images
            }
        };
        if images_changed {
            self.images = Arc::new(image_counts(&self.nodes));
        }
    }

    /// Removes a node; its pods stay known (they are deleted by their own events).
    pub fn remove_node(&mut self, name: &str) {
        let Some(&i) = self.index.get(name) else {
            return;
        };
        let info = self.nodes.remove(i);
        self.index = Arc::new(node_index(&self.nodes));
        self.layout += 1;
        if node_images(&info.node).next().is_some() {
            self.images = Arc::new(image_counts(&self.nodes));
        }
        if !info.pods.is_empty() {
            self.orphans.insert(name.to_string(), info.pods.clone());
        }
    }

    fn place(&mut self, node: &str, pod: Arc<PodInfo>) {
        match self.node_mut(node) {
            Some(info) => info.add_pod(pod),
            None => self.orphans.entry(node.to_string()).or_default().push(pod),
        }
    }

    fn unplace(&mut self, node: &str, key: &str) {
        match self.node_mut(node) {
            Some(info) => {
                info.remove_pod(key);
            }
            None => {
                if let Some(pods) = self.orphans.get_mut(node) {
                    pods.retain(|p| p.key != key);
                }
            }
        }
    }

    /// Counts `pod` on `node` before its binding is seen.
    pub fn assume(&mut self, pod: Arc<PodInfo>, node: &str) {
        let key = pod.key.clone();
        if let Some(old) = self.pods.remove(&key) {
            let (PodState::Assumed { node } | PodState::Bound { node }) = old;
            self.unplace(&node, &key);
        }
        self.place(node, pod);
        self.pods.insert(
            key,
            PodState::Assumed {
                node: node.to_string(),
            },
        );
    }

    /// Drops an assumed pod whose binding failed.
    pub fn forget(&mut self, key: &str) {
        if let Some(PodState::Assumed { node }) = self.pods.get(key).cloned() {
            self.unplace(&node, key);
            self.pods.remove(key);
        }
    }

    /// A pod the watch shows bound to a node (new, updated, or an assumed one confirmed).
    /// Returns the cluster event it makes: an add (the first time the watch shows it bound), a
    /// label change, or none.
    pub fn add_or_update_pod(&mut self, pod: Arc<Pod>) -> ClusterEvent {
        let info = Arc::new(PodInfo::new(pod));
        let node = info.node_name().to_string();
        if node.is_empty() {
            return ClusterEvent::NONE;
        }
        let mut event = ClusterEvent::ASSIGNED_POD_ADD;
        if let Some(old) = self.pods.remove(&info.key) {
            let (PodState::Assumed { node: old_node } | PodState::Bound { node: old_node }) = &old;
            if matches!(old, PodState::Bound { .. }) {
                let labels_before = self
                    .node(old_node)
                    .and_then(|n| n.pods.iter().find(|p| p.key == info.key))
                    .map(|p| p.pod.metadata.labels.clone());
                // a pod on a node not seen yet counts for no plugin: no event
                event = match labels_before {
                    Some(before) if before != info.pod.metadata.labels => {
                        ClusterEvent::ASSIGNED_POD_LABEL
                    }
                    _ => ClusterEvent::NONE,
                };
            }
            let old_node = old_node.clone();
            self.unplace(&old_node, &info.key);
        }
        self.pods
            .insert(info.key.clone(), PodState::Bound { node: node.clone() });
        self.place(&node, info);
        event
    }

    pub fn remove_pod(&mut self, key: &str) {
        if let Some(state) = self.pods.remove(key) {
            let (PodState::Assumed { node } | PodState::Bound { node }) = state;
            self.unplace(&node, key);
        }
    }

    /// Whether the pod is assumed (placed by us, binding not seen yet).
    pub fn is_assumed(&self, key: &str) -> bool {
        matches!(self.pods.get(key), Some(PodState::Assumed { .. }))
    }

    pub fn node_count(&self) -> usize {
        self.nodes.len()
    }

    pub fn node(&self, name: &str) -> Option<&Arc<NodeInfo>> {
        self.nodes.get(*self.index.get(name)?)
    }

    /// Whether the pod is placed on a node (bound or assumed).
    pub fn has_pod(&self, key: &str) -> bool {
        self.pods.contains_key(key)
    }

    /// The nodes as they are now, for one scheduling cycle.
    pub fn snapshot(&self) -> Snapshot {
        Snapshot::from_parts(self.nodes.clone(), self.index.clone(), self.images.clone())
            .with_layout(self.layout)
    }

    /// Brings the scheduling loop's snapshot up to date, copying only the nodes that changed
    /// since the last call (upstream's `UpdateSnapshot`), or everything if nodes came or went.
    /// One caller only: the changes are consumed.
    pub fn update_snapshot(&mut self, snapshot: &mut Snapshot) {
        if snapshot.layout() != Some(self.layout) || snapshot.len() != self.nodes.len() {
            *snapshot = self.snapshot();
        } else {
            for i in self.dirty.drain(..) {
                snapshot.replace(i, self.nodes[i].clone());
            }
            snapshot.set_images(self.images.clone());
        }
        self.dirty.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::testing::{PodBuilder, node};

    fn cache_with(nodes: &[&str]) -> Cache {
        let mut c = Cache::default();
        for n in nodes {
            c.add_or_update_node(Arc::new(node(n).cpu("4").build()));
        }
        c
    }

    fn cpu_requested(c: &Cache, node: &str) -> i64 {
        c.node(node).unwrap().requested.milli_cpu
    }

    #[test]
    fn an_assumed_pod_counts_until_confirmed_by_the_watch() {
        let mut c = cache_with(&["n1"]);
        let pod = PodBuilder::new("p").container("c", &[("cpu", "1")]);
        c.assume(pod.info(), "n1");
        assert!(c.is_assumed("default/p"));
        assert_eq!(cpu_requested(&c, "n1"), 1000);
        let bound = PodBuilder::new("p")
            .container("c", &[("cpu", "1")])
            .node_name("n1")
            .build();
        c.add_or_update_pod(Arc::new(bound));
        assert!(!c.is_assumed("default/p"));
        assert_eq!(cpu_requested(&c, "n1"), 1000, "counted once, not twice");
    }

    #[test]
    fn updates_of_bound_pods_are_an_event_only_when_their_labels_change() {
        let mut c = cache_with(&["n1"]);
        let bound = |app: &str| {
            Arc::new(
                PodBuilder::new("p")
                    .label("app", app)
                    .node_name("n1")
                    .build(),
            )
        };
        assert_eq!(
            c.add_or_update_pod(bound("a")),
            ClusterEvent::ASSIGNED_POD_ADD
        );
        assert_eq!(c.add_or_update_pod(bound("a")), ClusterEvent::NONE);
        assert_eq!(
            c.add_or_update_pod(bound("b")),
            ClusterEvent::ASSIGNED_POD_LABEL
        );
        let assumed = PodBuilder::new("q").info();
        c.assume(assumed, "n1");
        let confirmed = Arc::new(PodBuilder::new("q").node_name("n1").build());
        assert_eq!(
            c.add_or_update_pod(confirmed),
            ClusterEvent::ASSIGNED_POD_ADD
        );
    }

    #[test]
    fn a_forgotten_pod_frees_its_node() {
        let mut c = cache_with(&["n1"]);
        c.assume(
            PodBuilder::new("p").container("c", &[("cpu", "1")]).info(),
            "n1",
        );
        c.forget("default/p");
        assert_eq!(cpu_requested(&c, "n1"), 0);
        assert!(!c.has_pod("default/p"));
    }

    #[test]
    fn snapshots_do_not_change_when_the_cache_does() {
        let mut c = cache_with(&["n1", "n2"]);
        let before = c.snapshot();
        c.assume(
            PodBuilder::new("p").container("c", &[("cpu", "1")]).info(),
            "n2",
        );
        assert_eq!(before.get("n2").unwrap().requested.milli_cpu, 0);
        assert_eq!(c.snapshot().get("n2").unwrap().requested.milli_cpu, 1000);
        let names: Vec<_> = c
            .snapshot()
            .nodes()
            .iter()
            .map(|n| n.name().to_string())
            .collect();
        assert_eq!(names, ["n1", "n2"]);
    }

    #[test]
    fn an_updated_snapshot_matches_a_fresh_one() {
        let mut c = cache_with(&["n1", "n2"]);
        let mut snap = Snapshot::default();
        c.update_snapshot(&mut snap);
        assert_eq!(snap.len(), 2);
        c.assume(
            PodBuilder::new("p").container("c", &[("cpu", "1")]).info(),
            "n2",
        );
        c.update_snapshot(&mut snap);
        assert_eq!(snap.get("n2").unwrap().requested.milli_cpu, 1000);
        c.add_or_update_node(Arc::new(node("n3").cpu("4").build()));
        c.remove_node("n1");
        c.update_snapshot(&mut snap);
        let names: Vec<_> = snap.nodes().iter().map(|n| n.name().to_string()).collect();
        assert_eq!(names, ["n2", "n3"]);
        assert_eq!(snap.get("n2").unwrap().requested.milli_cpu, 1000);
    }

    #[test]
    fn pods_on_an_unknown_node_wait_for_it() {
        let mut c = cache_with(&[]);
        let bound = PodBuilder::new("p")
            .container("c", &[("cpu", "1")])
            .node_name("late")
            .build();
        c.add_or_update_pod(Arc::new(bound));
        c.add_or_update_node(Arc::new(node("late").cpu("4").build()));
        assert_eq!(cpu_requested(&c, "late"), 1000);
        c.remove_pod("default/p");
        assert_eq!(cpu_requested(&c, "late"), 0);
    }

    #[test]
    fn a_node_update_keeps_its_pods() {
        let mut c = cache_with(&["n1"]);
        c.assume(
            PodBuilder::new("p").container("c", &[("cpu", "1")]).info(),
            "n1",
        );
        c.add_or_update_node(Arc::new(node("n1").cpu("8").build()));
        let n = c.node("n1").unwrap();
        assert_eq!(
            (n.allocatable.milli_cpu, n.requested.milli_cpu),
            (8000, 1000)
        );
    }
}
