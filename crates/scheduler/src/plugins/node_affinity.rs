//! `NodeAffinity`: a pod fits nodes matching its `nodeSelector` and required node affinity
//! (PreFilter narrows to the nodes named by `matchFields metadata.name`, Filter checks), and
//! prefers nodes matching its weighted preferred terms (PreScore, Score, normalized). The
//! profile may add affinity for every pod (`addedAffinity`).

use std::collections::BTreeSet;
use std::sync::Arc;

use k8s_openapi::api::core::v1::NodeAffinity as K8sNodeAffinity;
use serde_json::Value;
use skiff_component_helpers::admission;
use skiff_component_helpers::node_affinity::{NodeSelector, PreferredTerms, RequiredNodeAffinity};

use super::helper::{arg, normalize_to_max, pod_spec};
use crate::framework::{
    ClusterEvent, CycleState, FilterPlugin, NodeInfo, NodeScore, Plugin, PodInfo, PreFilterPlugin,
    PreFilterResult, PreScorePlugin, ScorePlugin, Snapshot, Status,
};

pub const NAME: &str = admission::NODE_AFFINITY;

/// Upstream's `ErrReasonPod` (the kubelet's admission fails with it too).
pub const REASON_POD: &str = admission::NODE_AFFINITY_REASON;
/// Upstream's `errReasonEnforced`: the profile's `addedAffinity` rejected the node.
pub const REASON_ENFORCED: &str = "node(s) didn't match scheduler-enforced node affinity";
/// Upstream's `errReasonConflict`: the terms name disjoint sets of nodes.
pub const REASON_CONFLICT: &str = "pod affinity terms conflict";

const PRE_FILTER_KEY: &str = "PreFilterNodeAffinity";
const PRE_SCORE_KEY: &str = "PreScoreNodeAffinity";

#[derive(Clone)]
struct PreScoreState {
    preferred: Option<PreferredTerms>,
}

/// The plugin with its `NodeAffinityArgs`.
#[derive(Default)]
pub struct NodeAffinity {
    added_required: Option<NodeSelector>,
    added_preferred: Option<PreferredTerms>,
}

impl NodeAffinity {
    /// From `NodeAffinityArgs` (`addedAffinity`).
    pub fn from_args(args: Option<&Value>) -> Result<NodeAffinity, String> {
        let Some(added) = arg::<K8sNodeAffinity>(args, "addedAffinity")? else {
            return Ok(NodeAffinity::default());
        };
        let added_required = added
            .required_during_scheduling_ignored_during_execution
            .as_ref()
            .map(NodeSelector::parse)
            .transpose()
            .map_err(|e| {
                format!("addedAffinity.requiredDuringSchedulingIgnoredDuringExecution.{e}")
            })?;
        let added_preferred = added
            .preferred_during_scheduling_ignored_during_execution
            .as_deref()
            .map(PreferredTerms::parse)
            .transpose()
            .map_err(|e| {
                format!("addedAffinity.preferredDuringSchedulingIgnoredDuringExecution{e}")
            })?;
        Ok(NodeAffinity {
            added_required,
            added_preferred,
        })
    }
}

fn required_terms(pod: &PodInfo) -> Option<&k8s_openapi::api::core::v1::NodeSelector> {
    pod_spec(&pod.pod)
        .affinity
        .as_ref()?
        .node_affinity
        .as_ref()?
        .required_during_scheduling_ignored_during_execution
        .as_ref()
}

fn preferred_terms(pod: &PodInfo) -> Result<Option<PreferredTerms>, String> {
    let terms = pod_spec(&pod.pod)
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|na| {
            na.preferred_during_scheduling_ignored_during_execution
                .as_deref()
        });
    terms.map(PreferredTerms::parse).transpose()
}

impl Plugin for NodeAffinity {
    fn name(&self) -> &'static str {
        NAME
    }
    /// A node added or its labels changed (upstream: Node Add|UpdateNodeLabel).
    fn events(&self) -> ClusterEvent {
        ClusterEvent::NODE_ADD.with(ClusterEvent::NODE_LABEL)
    }
    fn as_pre_filter(&self) -> Option<&dyn PreFilterPlugin> {
        Some(self)
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

impl PreFilterPlugin for NodeAffinity {
    fn pre_filter(&self, state: &mut CycleState, pod: &PodInfo, _: &Snapshot) -> PreFilterResult {
        let required = required_terms(pod);
        if required.is_none()
            && self.added_required.is_none()
            && pod_spec(&pod.pod).node_selector.is_none()
        {
            return Status::skip().into();
        }
        state.write(PRE_FILTER_KEY, RequiredNodeAffinity::of(&pod.pod));
        let Some(required) = required else {
            return Status::success().into();
        };
        if required.node_selector_terms.is_empty() {
            return Status::success().into();
        }
        // Terms are ORed: the pod can only go to named nodes if every term names some.
        let mut names: BTreeSet<String> = BTreeSet::new();
        for term in &required.node_selector_terms {
            let mut term_names: Option<BTreeSet<String>> = None;
            for r in term.match_fields.iter().flatten() {
                if r.key != "metadata.name" || r.operator != "In" {
                    continue;
                }
                let set: BTreeSet<String> = r.values.iter().flatten().cloned().collect();
                term_names = Some(match term_names {
                    None => set,
                    Some(prev) => prev.intersection(&set).cloned().collect(),
                });
            }
            let Some(term_names) = term_names else {
                return Status::success().into();
            };
            names.extend(term_names);
        }
        if names.is_empty() {
            return Status::unresolvable(REASON_CONFLICT).into();
        }
        PreFilterResult {
            status: Status::success(),
            node_names: Some(names),
        }
    }
}

impl FilterPlugin for NodeAffinity {
    fn filter(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        if let Some(added) = &self.added_required
            && !added.matches(&node.node)
        {
            return Status::unresolvable(REASON_ENFORCED);
        }
        let matched = match state.read::<RequiredNodeAffinity>(PRE_FILTER_KEY) {
            Some(r) => r.matches(&node.node),
            None => RequiredNodeAffinity::of(&pod.pod).matches(&node.node),
        };
        if matched {
            Status::success()
        } else {
            Status::unresolvable(REASON_POD)
        }
    }
}

impl PreScorePlugin for NodeAffinity {
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
        let preferred = match preferred_terms(pod) {
            Ok(p) => p,
            Err(e) => return Status::error(e),
        };
        if preferred.is_none() && self.added_preferred.is_none() {
            return Status::skip();
        }
        state.write(PRE_SCORE_KEY, PreScoreState { preferred });
        Status::success()
    }
}

impl ScorePlugin for NodeAffinity {
    fn score(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        let mut count = self
            .added_preferred
            .as_ref()
            .map_or(0, |p| p.score(&node.node));
        match state.read::<PreScoreState>(PRE_SCORE_KEY) {
            Some(s) => count += s.preferred.as_ref().map_or(0, |p| p.score(&node.node)),
            None => {
                let p = preferred_terms(pod).map_err(Status::error)?;
                count += p.map_or(0, |p| p.score(&node.node));
            }
        }
        Ok(count)
    }

    fn normalize(&self, _: &CycleState, _: &PodInfo, scores: &mut [NodeScore]) -> Status {
        normalize_to_max(false, scores);
        Status::success()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::Code;
    use crate::framework::testing::{PodBuilder, node, snapshot};
    use k8s_openapi::api::core::v1::{
        Affinity, NodeSelector as K8sSel, NodeSelectorRequirement, NodeSelectorTerm,
        PreferredSchedulingTerm,
    };
    use serde_json::json;

    fn req(key: &str, op: &str, values: &[&str]) -> NodeSelectorRequirement {
        NodeSelectorRequirement {
            key: key.into(),
            operator: op.into(),
            values: (!values.is_empty()).then(|| values.iter().map(|v| v.to_string()).collect()),
        }
    }

    fn labels_term(r: NodeSelectorRequirement) -> NodeSelectorTerm {
        NodeSelectorTerm {
            match_expressions: Some(vec![r]),
            match_fields: None,
        }
    }

    fn names_term(names: &[&str]) -> NodeSelectorTerm {
        NodeSelectorTerm {
            match_expressions: None,
            match_fields: Some(vec![req("metadata.name", "In", names)]),
        }
    }

    fn required(terms: Vec<NodeSelectorTerm>) -> Affinity {
        Affinity {
            node_affinity: Some(K8sNodeAffinity {
                required_during_scheduling_ignored_during_execution: Some(K8sSel {
                    node_selector_terms: terms,
                }),
                preferred_during_scheduling_ignored_during_execution: None,
            }),
            ..Default::default()
        }
    }

    fn run_filter(pl: &NodeAffinity, p: &PodInfo, n: &NodeInfo) -> Status {
        let mut state = CycleState::default();
        let pre = pl.pre_filter(&mut state, p, &snapshot(vec![]));
        if pre.status.is_skip() {
            return Status::success();
        }
        pl.filter(&state, p, n)
    }

    #[test]
    fn nodes_must_match_the_node_selector_and_required_affinity() {
        let n = || node("n1").label("zone", "a").label("disk", "ssd").info(&[]);
        let cases = [
            ("nothing asked", PodBuilder::new("p"), Code::Success),
            (
                "selector matches",
                PodBuilder::new("p").node_selector("zone", "a"),
                Code::Success,
            ),
            (
                "selector does not match",
                PodBuilder::new("p").node_selector("zone", "b"),
                Code::UnschedulableAndUnresolvable,
            ),
            (
                "affinity matches",
                PodBuilder::new("p").affinity(required(vec![labels_term(req(
                    "disk",
                    "In",
                    &["ssd"],
                ))])),
                Code::Success,
            ),
            (
                "selector matches but affinity does not",
                PodBuilder::new("p")
                    .node_selector("zone", "a")
                    .affinity(required(vec![labels_term(req("disk", "NotIn", &["ssd"]))])),
                Code::UnschedulableAndUnresolvable,
            ),
            (
                "no terms match nothing",
                PodBuilder::new("p").affinity(required(vec![])),
                Code::UnschedulableAndUnresolvable,
            ),
        ];
        for (name, p, want) in cases {
            let got = run_filter(&NodeAffinity::default(), &p.info(), &n());
            assert_eq!(got.code(), want, "{name}");
            if want != Code::Success {
                assert_eq!(got.message(), REASON_POD, "{name}");
            }
        }
    }

    #[test]
    fn pre_filter_narrows_to_the_nodes_named_in_every_term() {
        type Case<'a> = (&'a str, Vec<NodeSelectorTerm>, Option<&'a [&'a str]>, Code);
        let cases: [Case; 4] = [
            (
                "one term naming two nodes",
                vec![names_term(&["n1", "n2"])],
                Some(&["n1", "n2"]),
                Code::Success,
            ),
            (
                "terms are unioned",
                vec![names_term(&["n1"]), names_term(&["n3"])],
                Some(&["n1", "n3"]),
                Code::Success,
            ),
            (
                "a term without names allows every node",
                vec![names_term(&["n1"]), labels_term(req("zone", "Exists", &[]))],
                None,
                Code::Success,
            ),
            (
                "requirements of one term are intersected",
                vec![NodeSelectorTerm {
                    match_expressions: None,
                    match_fields: Some(vec![
                        req("metadata.name", "In", &["n1"]),
                        req("metadata.name", "In", &["n2"]),
                    ]),
                }],
                None,
                Code::UnschedulableAndUnresolvable,
            ),
        ];
        for (name, terms, want_names, want_code) in cases {
            let p = PodBuilder::new("p").affinity(required(terms)).info();
            let got = NodeAffinity::default().pre_filter(
                &mut CycleState::default(),
                &p,
                &snapshot(vec![]),
            );
            assert_eq!(got.status.code(), want_code, "{name}");
            let got_names: Option<Vec<&str>> = got
                .node_names
                .as_ref()
                .map(|s| s.iter().map(String::as_str).collect());
            assert_eq!(got_names.as_deref(), want_names, "{name}");
        }
    }

    #[test]
    fn added_affinity_is_enforced_for_every_pod() {
        let args = json!({"addedAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [{"key": "pool", "operator": "In", "values": ["batch"]}]}]
        }}});
        let pl = NodeAffinity::from_args(Some(&args)).unwrap();
        let p = PodBuilder::new("p").info();
        let other = node("n1").label("pool", "web").info(&[]);
        let got = run_filter(&pl, &p, &other);
        assert_eq!(got.code(), Code::UnschedulableAndUnresolvable);
        assert_eq!(got.message(), REASON_ENFORCED);
        let batch = node("n2").label("pool", "batch").info(&[]);
        assert!(run_filter(&pl, &p, &batch).is_success());
    }

    #[test]
    fn bad_added_affinity_is_an_error_naming_the_field() {
        let args = json!({"addedAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [{"key": "pool", "operator": "Near"}]}]
        }}});
        let err = NodeAffinity::from_args(Some(&args)).err().unwrap();
        assert!(err.starts_with("addedAffinity.required"), "{err}");
        let err = NodeAffinity::from_args(Some(&json!({"addedAffinity": 3})))
            .err()
            .unwrap();
        assert!(err.starts_with("addedAffinity: "), "{err}");
    }

    #[test]
    fn preferred_terms_add_their_weights_and_normalize_to_the_best_node() {
        let pt = |w, k: &str, v: &str| PreferredSchedulingTerm {
            weight: w,
            preference: labels_term(req(k, "In", &[v])),
        };
        let aff = Affinity {
            node_affinity: Some(K8sNodeAffinity {
                preferred_during_scheduling_ignored_during_execution: Some(vec![
                    pt(2, "zone", "a"),
                    pt(6, "disk", "ssd"),
                ]),
                ..Default::default()
            }),
            ..Default::default()
        };
        let pod = PodBuilder::new("p").affinity(aff).info();
        let snap = snapshot(vec![
            node("none").info(&[]),
            node("zone").label("zone", "a").info(&[]),
            node("both")
                .label("zone", "a")
                .label("disk", "ssd")
                .info(&[]),
        ]);
        let pl = NodeAffinity::default();
        let mut state = CycleState::default();
        assert!(
            pl.pre_score(&mut state, &pod, snap.nodes(), &snap)
                .is_success()
        );
        let mut scores: Vec<NodeScore> = snap
            .nodes()
            .iter()
            .map(|n| NodeScore {
                name: n.name().into(),
                score: pl.score(&state, &pod, n).unwrap(),
            })
            .collect();
        assert_eq!(
            scores.iter().map(|s| s.score).collect::<Vec<_>>(),
            [0, 2, 8]
        );
        pl.normalize(&state, &pod, &mut scores);
        assert_eq!(
            scores.iter().map(|s| s.score).collect::<Vec<_>>(),
            [0, 25, 100]
        );
        let plain = PodBuilder::new("q").info();
        assert!(
            pl.pre_score(&mut state, &plain, snap.nodes(), &snap)
                .is_skip()
        );
    }
}
