//! The scheduler's view of nodes and the pods on them (upstream's `internal/cache`), including
//! **assumed** pods: a pod is added to its chosen node the moment the decision is made, so the
//! next cycle already counts it while the binding is still in flight; it is confirmed when the
//! watch shows it bound, or forgotten if the binding fails.
//!
//! `NodeInfo`s are shared with snapshots through `Arc`: a change copies only the node it
//! touches (`Arc::make_mut`), and a snapshot is a vector of `Arc`s.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, Pod};

use crate::framework::{NodeInfo, PodInfo, Snapshot};

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
    nodes: HashMap<String, Arc<NodeInfo>>,
    /// Node names in the order they were added, so snapshots list nodes stably.
    order: Vec<String>,
    pods: HashMap<String, PodState>,
    /// Pods seen bound to a node the cache does not have yet, kept until the node appears.
    orphans: HashMap<String, Vec<Arc<PodInfo>>>,
}

impl Cache {
    pub fn add_or_update_node(&mut self, node: Arc<Node>) {
        let name = node.metadata.name.clone().unwrap_or_default();
        match self.nodes.get_mut(&name) {
            Some(info) => Arc::make_mut(info).set_node(node),
            None => {
                let mut info = NodeInfo::new(node);
                for pod in self.orphans.remove(&name).unwrap_or_default() {
                    info.add_pod(pod);
                }
                self.nodes.insert(name.clone(), Arc::new(info));
                self.order.push(name);
            }
        }
    }

    /// Removes a node; its pods stay known (they are deleted by their own events).
    pub fn remove_node(&mut self, name: &str) {
        if let Some(info) = self.nodes.remove(name) {
            self.order.retain(|n| n != name);
            if !info.pods.is_empty() {
                self.orphans.insert(name.to_string(), info.pods.clone());
            }
        }
    }

    fn place(&mut self, node: &str, pod: Arc<PodInfo>) {
        match self.nodes.get_mut(node) {
            Some(info) => Arc::make_mut(info).add_pod(pod),
            None => self.orphans.entry(node.to_string()).or_default().push(pod),
        }
    }

    fn unplace(&mut self, node: &str, key: &str) {
        match self.nodes.get_mut(node) {
            Some(info) => {
                Arc::make_mut(info).remove_pod(key);
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
    pub fn add_or_update_pod(&mut self, pod: Arc<Pod>) {
        let info = Arc::new(PodInfo::new(pod));
        let node = info.node_name().to_string();
        if node.is_empty() {
            return;
        }
        if let Some(old) = self.pods.remove(&info.key) {
            let (PodState::Assumed { node: old } | PodState::Bound { node: old }) = old;
            self.unplace(&old, &info.key);
        }
        self.pods
            .insert(info.key.clone(), PodState::Bound { node: node.clone() });
        self.place(&node, info);
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
        self.nodes.get(name)
    }

    /// Keys of every pod placed on a node (bound or assumed).
    pub fn pod_keys(&self) -> HashSet<String> {
        self.pods.keys().cloned().collect()
    }

    /// The nodes as they are now, for one scheduling cycle.
    pub fn snapshot(&self) -> Snapshot {
        Snapshot::new(
            self.order
                .iter()
                .filter_map(|n| self.nodes.get(n).cloned())
                .collect(),
        )
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
    fn a_forgotten_pod_frees_its_node() {
        let mut c = cache_with(&["n1"]);
        c.assume(
            PodBuilder::new("p").container("c", &[("cpu", "1")]).info(),
            "n1",
        );
        c.forget("default/p");
        assert_eq!(cpu_requested(&c, "n1"), 0);
        assert!(c.pod_keys().is_empty());
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
