//! `NodeName`: a pod that names a node in `spec.nodeName` fits only that node. (The scheduler
//! only sees such pods when preemption or a test asks; the queue takes unassigned pods.)

use skiff_component_helpers::admission::{self, node_name_fits};

use crate::framework::{ClusterEvent, CycleState, FilterPlugin, NodeInfo, Plugin, PodInfo, Status};

pub const NAME: &str = admission::NODE_NAME;

/// Upstream's `ErrReason` (the kubelet's admission fails with it too).
pub const REASON: &str = admission::NODE_NAME_REASON;

pub struct NodeName;

impl Plugin for NodeName {
    fn name(&self) -> &'static str {
        NAME
    }
    /// Only a new node can have the name (upstream: Node Add).
    fn events(&self) -> ClusterEvent {
        ClusterEvent::NODE_ADD
    }
    fn as_filter(&self) -> Option<&dyn FilterPlugin> {
        Some(self)
    }
}

impl FilterPlugin for NodeName {
    fn filter(&self, _: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        if node_name_fits(&pod.pod, &node.node) {
            Status::success()
        } else {
            Status::unresolvable(REASON)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::Code;
    use crate::framework::testing::{PodBuilder, node};

    #[test]
    fn only_the_named_node_fits_a_pod_that_names_one() {
        let cases = [
            ("no node name", None, "n1", Code::Success),
            ("names this node", Some("n1"), "n1", Code::Success),
            (
                "names another node",
                Some("n2"),
                "n1",
                Code::UnschedulableAndUnresolvable,
            ),
        ];
        for (name, wanted, node_name, want) in cases {
            let mut p = PodBuilder::new("p");
            if let Some(w) = wanted {
                p = p.node_name(w);
            }
            let got = NodeName.filter(
                &CycleState::default(),
                &p.info(),
                &node(node_name).info(&[]),
            );
            assert_eq!(got.code(), want, "{name}");
        }
    }
}
