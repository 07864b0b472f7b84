//! `NodeUnschedulable`: a node with `spec.unschedulable` (cordoned) takes only pods that
//! tolerate the `node.kubernetes.io/unschedulable:NoSchedule` taint.

use crate::framework::{ClusterEvent, CycleState, FilterPlugin, NodeInfo, Plugin, PodInfo, Status};

pub const NAME: &str = "NodeUnschedulable";

/// Upstream's `ErrReasonUnschedulable`.
pub const REASON: &str = "node(s) were unschedulable";

const TAINT_KEY: &str = "node.kubernetes.io/unschedulable";

pub struct NodeUnschedulable;

impl Plugin for NodeUnschedulable {
    fn name(&self) -> &'static str {
        NAME
    }
    /// A node added, or one made schedulable (upstream registers Node Add|UpdateNodeTaint).
    fn events(&self) -> ClusterEvent {
        ClusterEvent::NODE_ADD.with(ClusterEvent::NODE_TAINT)
    }
    fn as_filter(&self) -> Option<&dyn FilterPlugin> {
        Some(self)
    }
}

impl FilterPlugin for NodeUnschedulable {
    fn filter(&self, _: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        let cordoned = node
            .node
            .spec
            .as_ref()
            .and_then(|s| s.unschedulable)
            .unwrap_or(false);
        if !cordoned {
            return Status::success();
        }
        let tolerated = pod
            .pod
            .spec
            .as_ref()
            .and_then(|s| s.tolerations.as_ref())
            .into_iter()
            .flatten()
            .any(|t| {
                let key_matches = match t.key.as_deref() {
                    None | Some("") => t.operator.as_deref() == Some("Exists"),
                    Some(k) => k == TAINT_KEY,
                };
                let effect_matches =
                    matches!(t.effect.as_deref(), None | Some("") | Some("NoSchedule"));
                key_matches && effect_matches
            });
        if tolerated {
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
    use k8s_openapi::api::core::v1::Toleration;

    fn toleration(key: &str, operator: &str, effect: &str) -> Toleration {
        Toleration {
            key: (!key.is_empty()).then(|| key.into()),
            operator: Some(operator.into()),
            effect: (!effect.is_empty()).then(|| effect.into()),
            ..Default::default()
        }
    }

    #[test]
    fn cordoned_nodes_reject_pods_unless_they_tolerate_it() {
        let cases = [
            ("schedulable node", false, None, Code::Success),
            (
                "cordoned node",
                true,
                None,
                Code::UnschedulableAndUnresolvable,
            ),
            (
                "tolerates the unschedulable taint",
                true,
                Some(toleration(TAINT_KEY, "Exists", "NoSchedule")),
                Code::Success,
            ),
            (
                "tolerates everything",
                true,
                Some(toleration("", "Exists", "")),
                Code::Success,
            ),
            (
                "tolerates another key",
                true,
                Some(toleration("other", "Exists", "NoSchedule")),
                Code::UnschedulableAndUnresolvable,
            ),
            (
                "tolerates the key for NoExecute only",
                true,
                Some(toleration(TAINT_KEY, "Exists", "NoExecute")),
                Code::UnschedulableAndUnresolvable,
            ),
        ];
        for (name, cordoned, tol, want) in cases {
            let mut n = node("n1");
            if cordoned {
                n = n.unschedulable();
            }
            let mut p = PodBuilder::new("p");
            if let Some(t) = tol {
                p = p.toleration(t);
            }
            let got = NodeUnschedulable.filter(&CycleState::default(), &p.info(), &n.info(&[]));
            assert_eq!(got.code(), want, "{name}");
        }
    }
}
