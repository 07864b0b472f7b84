//! Cluster events that can make an unschedulable pod schedulable, and which plugins care about
//! which (upstream's `ClusterEvent`, `EventsToRegister` and `podMatchesEvent`). A parked pod
//! returns to the queue only for an event one of the plugins that rejected it registered for,
//! so a node's heartbeat or a pod that changes nothing a plugin reads does not wake every
//! parked pod.

use k8s_openapi::api::core::v1::Node;

/// A set of cluster events (a bitmask).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ClusterEvent(u32);

impl ClusterEvent {
    pub const NONE: ClusterEvent = ClusterEvent(0);
    /// A node was added.
    pub const NODE_ADD: ClusterEvent = ClusterEvent(1);
    /// A node's allocatable resources changed.
    pub const NODE_ALLOCATABLE: ClusterEvent = ClusterEvent(1 << 1);
    /// A node's labels changed.
    pub const NODE_LABEL: ClusterEvent = ClusterEvent(1 << 2);
    /// A node's taints or `spec.unschedulable` changed.
    pub const NODE_TAINT: ClusterEvent = ClusterEvent(1 << 3);
    /// A node's conditions changed (no default plugin registers for it).
    pub const NODE_CONDITION: ClusterEvent = ClusterEvent(1 << 4);
    /// A node's annotations changed (no default plugin registers for it).
    pub const NODE_ANNOTATION: ClusterEvent = ClusterEvent(1 << 5);
    /// A pod was bound to a node (or an assigned pod was added).
    pub const ASSIGNED_POD_ADD: ClusterEvent = ClusterEvent(1 << 6);
    /// An assigned pod was deleted, or finished and so gave its resources back.
    pub const ASSIGNED_POD_DELETE: ClusterEvent = ClusterEvent(1 << 7);
    /// An assigned pod's labels changed (what pod affinity and spreading count).
    pub const ASSIGNED_POD_LABEL: ClusterEvent = ClusterEvent(1 << 8);
    /// A PersistentVolumeClaim was added or changed.
    pub const PVC_CHANGE: ClusterEvent = ClusterEvent(1 << 9);
    /// A PersistentVolume was added or changed.
    pub const PV_CHANGE: ClusterEvent = ClusterEvent(1 << 10);
    /// A StorageClass was added or changed.
    pub const STORAGE_CLASS_CHANGE: ClusterEvent = ClusterEvent(1 << 11);
    /// A CSINode was added or changed.
    pub const CSI_NODE_CHANGE: ClusterEvent = ClusterEvent(1 << 12);
    /// Every event: what a plugin that does not say registers for.
    pub const ALL: ClusterEvent = ClusterEvent(u32::MAX);

    #[must_use]
    pub const fn with(self, other: ClusterEvent) -> ClusterEvent {
        ClusterEvent(self.0 | other.0)
    }

    /// Whether the two sets share an event.
    pub fn intersects(self, other: ClusterEvent) -> bool {
        self.0 & other.0 != 0
    }

    pub fn is_empty(self) -> bool {
        self.0 == 0
    }
}

/// What changed between two versions of a node, as upstream's `nodeSchedulingPropertiesChange`
/// classifies it; a heartbeat that only moves condition timestamps is no event at all.
pub fn node_change(old: Option<&Node>, new: &Node) -> ClusterEvent {
    let Some(old) = old else {
        return ClusterEvent::NODE_ADD;
    };
    let mut event = ClusterEvent::NONE;
    let (os, ns) = (old.spec.as_ref(), new.spec.as_ref());
    if os.and_then(|s| s.unschedulable) != ns.and_then(|s| s.unschedulable)
        || os.and_then(|s| s.taints.as_ref()) != ns.and_then(|s| s.taints.as_ref())
    {
        event = event.with(ClusterEvent::NODE_TAINT);
    }
    if old.metadata.labels != new.metadata.labels {
        event = event.with(ClusterEvent::NODE_LABEL);
    }
    if old.metadata.annotations != new.metadata.annotations {
        event = event.with(ClusterEvent::NODE_ANNOTATION);
    }
    let (ost, nst) = (old.status.as_ref(), new.status.as_ref());
    if ost.and_then(|s| s.allocatable.as_ref()) != nst.and_then(|s| s.allocatable.as_ref()) {
        event = event.with(ClusterEvent::NODE_ALLOCATABLE);
    }
    // conditions by type and status, as upstream compares them (heartbeat times differ always)
    let conditions = |s: Option<&k8s_openapi::api::core::v1::NodeStatus>| {
        let mut c: Vec<(String, String)> = s
            .and_then(|s| s.conditions.as_ref())
            .into_iter()
            .flatten()
            .map(|c| (c.type_.clone(), c.status.clone()))
            .collect();
        c.sort();
        c
    };
    if conditions(ost) != conditions(nst) {
        event = event.with(ClusterEvent::NODE_CONDITION);
    }
    event
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn node(v: serde_json::Value) -> Node {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn a_heartbeat_is_no_event_and_each_property_is_its_own() {
        let base = json!({"metadata": {"name": "n", "labels": {"zone": "a"}},
            "spec": {},
            "status": {"allocatable": {"cpu": "4"},
                       "conditions": [{"type": "Ready", "status": "True",
                                       "lastHeartbeatTime": "2026-01-01T00:00:00Z"}]}});
        let old = node(base.clone());
        assert_eq!(node_change(None, &old), ClusterEvent::NODE_ADD);

        let mut beat = base.clone();
        beat["status"]["conditions"][0]["lastHeartbeatTime"] = json!("2026-01-01T00:00:10Z");
        assert_eq!(node_change(Some(&old), &node(beat)), ClusterEvent::NONE);

        let mut changed = base.clone();
        changed["spec"]["unschedulable"] = json!(true);
        changed["metadata"]["labels"]["zone"] = json!("b");
        changed["status"]["allocatable"]["cpu"] = json!("8");
        let event = node_change(Some(&old), &node(changed));
        for e in [
            ClusterEvent::NODE_TAINT,
            ClusterEvent::NODE_LABEL,
            ClusterEvent::NODE_ALLOCATABLE,
        ] {
            assert!(event.intersects(e));
        }
        assert!(!event.intersects(ClusterEvent::NODE_CONDITION.with(ClusterEvent::NODE_ADD)));

        let mut not_ready = base;
        not_ready["status"]["conditions"][0]["status"] = json!("False");
        assert_eq!(
            node_change(Some(&old), &node(not_ready)),
            ClusterEvent::NODE_CONDITION
        );
    }
}
