//! Pods nominated to nodes by preemption and not yet bound (upstream's `nominator`, kept with
//! its scheduling queue): the scheduler records its own nominations at once, and learns the
//! others from `status.nominatedNodeName` in pod watch events. Filter counts a node's
//! nominated pods of at least the incoming pod's priority as if they were there, so the room
//! a preemption made is not taken by a less important pod.

use std::collections::HashMap;
use std::sync::Arc;

use crate::framework::{NominatedPods, PodInfo};

#[derive(Debug, Default)]
pub struct Nominator {
    /// Pod key → its node.
    nodes: HashMap<String, String>,
    /// Node → its nominated pods; copied on write, so each cycle's snapshot shares it.
    pods: Arc<NominatedPods>,
}

impl Nominator {
    /// Nominates `pod` to `node`, replacing an earlier nomination.
    pub fn add(&mut self, pod: Arc<PodInfo>, node: &str) {
        self.remove(&pod.key);
        self.nodes.insert(pod.key.clone(), node.to_string());
        Arc::make_mut(&mut self.pods)
            .entry(node.to_string())
            .or_default()
            .push(pod);
    }

    /// A watch event for an unassigned pod: its `nominatedNodeName` (re)nominates it; without
    /// one, an existing nomination keeps its node with the newer pod object (the event may
    /// predate the status write that carries the nomination, as upstream notes).
    pub fn update(&mut self, pod: Arc<PodInfo>) {
        let from_status = pod
            .pod
            .status
            .as_ref()
            .and_then(|s| s.nominated_node_name.clone())
            .filter(|n| !n.is_empty());
        if let Some(node) = from_status.or_else(|| self.nodes.get(&pod.key).cloned()) {
            self.add(pod, &node);
        }
    }

    /// Forgets the pod's nomination (bound, deleted, or preemption found nothing).
    pub fn remove(&mut self, key: &str) {
        let Some(node) = self.nodes.remove(key) else {
            return;
        };
        let pods = Arc::make_mut(&mut self.pods);
        if let Some(list) = pods.get_mut(&node) {
            list.retain(|p| p.key != key);
            if list.is_empty() {
                pods.remove(&node);
            }
        }
    }

    /// Node → nominated pods, for the cycle's snapshot.
    pub fn pods(&self) -> Arc<NominatedPods> {
        self.pods.clone()
    }

    /// Where the pod is nominated, if anywhere.
    pub fn node_of(&self, key: &str) -> Option<&str> {
        self.nodes.get(key).map(String::as_str)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::testing::PodBuilder;

    fn nominated_to(pod: &str, node: Option<&str>) -> Arc<PodInfo> {
        let mut p = PodBuilder::new(pod).build();
        p.status
            .get_or_insert_with(Default::default)
            .nominated_node_name = node.map(str::to_string);
        Arc::new(PodInfo::new(Arc::new(p)))
    }

    #[test]
    fn nominations_follow_the_pod_and_are_shared_until_changed() {
        let mut n = Nominator::default();
        n.add(PodBuilder::new("vip").info(), "n1");
        let before = n.pods();
        assert_eq!(before["n1"].len(), 1);
        // an event without the status field keeps the in-memory nomination
        n.update(nominated_to("vip", None));
        assert_eq!(n.node_of("default/vip"), Some("n1"));
        // one with another node moves it
        n.update(nominated_to("vip", Some("n2")));
        assert_eq!(n.node_of("default/vip"), Some("n2"));
        assert!(!n.pods().contains_key("n1"));
        assert_eq!(before["n1"].len(), 1, "snapshots keep what they saw");
        // pods nobody nominated stay out
        n.update(nominated_to("other", None));
        assert_eq!(n.node_of("default/other"), None);
        n.remove("default/vip");
        assert!(n.pods().is_empty());
    }
}
