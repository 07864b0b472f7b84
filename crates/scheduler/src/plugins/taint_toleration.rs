//! `TaintToleration`: a pod fits a node only if it tolerates the node's `NoSchedule` and
//! `NoExecute` taints (Filter), and prefers nodes with fewer `PreferNoSchedule` taints it does
//! not tolerate (PreScore, Score, reversed normalization).

use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, Toleration};
use skiff_component_helpers::tolerations::{
    find_untolerated_taint, is_do_not_schedule, tolerated_by_any,
};

use super::helper::{normalize_to_max, pod_spec};
use crate::framework::{
    ClusterEvent, CycleState, FilterPlugin, NodeInfo, NodeScore, Plugin, PodInfo, PreScorePlugin,
    ScorePlugin, Snapshot, Status,
};

pub const NAME: &str = "TaintToleration";

/// Upstream's untolerated-taint reason, `{key: value}` filled in.
pub fn untolerated_reason(key: &str, value: &str) -> String {
    format!("node(s) had untolerated taint {{{key}: {value}}}")
}

const PRE_SCORE_KEY: &str = "PreScoreTaintToleration";

/// The pod's tolerations that can tolerate `PreferNoSchedule` taints (empty effect or that one).
#[derive(Clone)]
struct PreScoreState {
    tolerations: Vec<Toleration>,
}

pub struct TaintToleration;

fn taints(node: &Node) -> &[k8s_openapi::api::core::v1::Taint] {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_deref())
        .unwrap_or(&[])
}

impl Plugin for TaintToleration {
    fn name(&self) -> &'static str {
        NAME
    }
    /// A node added or its taints changed (upstream: Node Add|UpdateNodeTaint).
    fn events(&self) -> ClusterEvent {
        ClusterEvent::NODE_ADD.with(ClusterEvent::NODE_TAINT)
    }
    fn as_filter(&self) -> Option<&dyn FilterPlugin> {
        Some(self)
    }
    fn as_pre_score(&self) -> Option<&dyn PreScorePlugin> {
        Some(self)
    }
    fn as_score(&self) -> Option<&dyn ScorePlugin> {
        Some(self)
    }
}

impl FilterPlugin for TaintToleration {
    fn filter(&self, _: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        let tolerations = pod_spec(&pod.pod).tolerations.as_deref().unwrap_or(&[]);
        match find_untolerated_taint(taints(&node.node), tolerations, is_do_not_schedule) {
            None => Status::success(),
            Some(t) => {
                Status::unresolvable(untolerated_reason(&t.key, t.value.as_deref().unwrap_or("")))
            }
        }
    }
}

impl PreScorePlugin for TaintToleration {
    fn pre_score(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        nodes: &[Arc<NodeInfo>],
        _: &Snapshot,
    ) -> Status {
        if nodes.is_empty() {
            return Status::success();
        }
        let tolerations = pod_spec(&pod.pod)
            .tolerations
            .iter()
            .flatten()
            .filter(|t| {
                matches!(
                    t.effect.as_deref(),
                    None | Some("") | Some("PreferNoSchedule")
                )
            })
            .cloned()
            .collect();
        state.write(PRE_SCORE_KEY, PreScoreState { tolerations });
        Status::success()
    }
}

impl ScorePlugin for TaintToleration {
    fn score(&self, state: &CycleState, _: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        let Some(s) = state.read::<PreScoreState>(PRE_SCORE_KEY) else {
            return Err(Status::error(format!(
                "reading {PRE_SCORE_KEY:?} from cycleState: not found"
            )));
        };
        let count = taints(&node.node)
            .iter()
            .filter(|t| t.effect == "PreferNoSchedule" && !tolerated_by_any(&s.tolerations, t))
            .count();
        Ok(count as i64)
    }

    fn normalize(&self, _: &CycleState, _: &PodInfo, scores: &mut [NodeScore]) -> Status {
        normalize_to_max(true, scores);
        Status::success()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::Code;
    use crate::framework::testing::{PodBuilder, node, snapshot};

    fn tol(key: &str, operator: &str, value: &str, effect: &str) -> Toleration {
        let opt = |s: &str| (!s.is_empty()).then(|| s.to_string());
        Toleration {
            key: opt(key),
            operator: opt(operator),
            value: opt(value),
            effect: opt(effect),
            toleration_seconds: None,
        }
    }

    #[test]
    fn untolerated_no_schedule_and_no_execute_taints_reject_the_pod() {
        let cases = [
            ("untainted node", node("n"), vec![], Code::Success, ""),
            (
                "untolerated NoSchedule",
                node("n").taint("dedicated", "gpu", "NoSchedule"),
                vec![],
                Code::UnschedulableAndUnresolvable,
                "node(s) had untolerated taint {dedicated: gpu}",
            ),
            (
                "untolerated NoExecute without value",
                node("n").taint("broken", "", "NoExecute"),
                vec![],
                Code::UnschedulableAndUnresolvable,
                "node(s) had untolerated taint {broken: }",
            ),
            (
                "PreferNoSchedule does not filter",
                node("n").taint("soft", "x", "PreferNoSchedule"),
                vec![],
                Code::Success,
                "",
            ),
            (
                "tolerated by key and value",
                node("n").taint("dedicated", "gpu", "NoSchedule"),
                vec![tol("dedicated", "Equal", "gpu", "NoSchedule")],
                Code::Success,
                "",
            ),
            (
                "tolerated with another value",
                node("n").taint("dedicated", "gpu", "NoSchedule"),
                vec![tol("dedicated", "Equal", "cpu", "NoSchedule")],
                Code::UnschedulableAndUnresolvable,
                "node(s) had untolerated taint {dedicated: gpu}",
            ),
        ];
        for (name, n, tols, want, reason) in cases {
            let mut p = PodBuilder::new("p");
            for t in tols {
                p = p.toleration(t);
            }
            let got = TaintToleration.filter(&CycleState::default(), &p.info(), &n.info(&[]));
            assert_eq!(got.code(), want, "{name}");
            assert_eq!(got.message(), reason, "{name}");
        }
    }

    #[test]
    fn nodes_with_fewer_intolerable_prefer_no_schedule_taints_score_higher() {
        let nodes = vec![
            node("clean").info(&[]),
            node("one")
                .taint("a", "1", "PreferNoSchedule")
                .taint("hard", "", "NoSchedule")
                .info(&[]),
            node("two")
                .taint("a", "1", "PreferNoSchedule")
                .taint("b", "2", "PreferNoSchedule")
                .info(&[]),
            node("tolerated")
                .taint("c", "3", "PreferNoSchedule")
                .info(&[]),
        ];
        let snap = snapshot(nodes);
        let pod = PodBuilder::new("p")
            .toleration(tol("c", "Exists", "", "PreferNoSchedule"))
            .toleration(tol("b", "Exists", "", "NoSchedule"))
            .info();
        let mut state = CycleState::default();
        let st = TaintToleration.pre_score(&mut state, &pod, snap.nodes(), &snap);
        assert!(st.is_success());
        let mut scores: Vec<NodeScore> = snap
            .nodes()
            .iter()
            .map(|n| NodeScore {
                name: n.name().to_string(),
                score: TaintToleration.score(&state, &pod, n).unwrap(),
            })
            .collect();
        let raw: Vec<i64> = scores.iter().map(|s| s.score).collect();
        // the NoSchedule toleration of "b" does not count for PreferNoSchedule
        assert_eq!(raw, [0, 1, 2, 0]);
        TaintToleration.normalize(&state, &pod, &mut scores);
        let normalized: Vec<i64> = scores.iter().map(|s| s.score).collect();
        assert_eq!(normalized, [100, 50, 0, 100]);
    }

    #[test]
    fn score_without_pre_score_is_an_error() {
        let got = TaintToleration.score(
            &CycleState::default(),
            &PodBuilder::new("p").info(),
            &node("n").info(&[]),
        );
        assert_eq!(got.unwrap_err().code(), Code::Error);
    }
}
