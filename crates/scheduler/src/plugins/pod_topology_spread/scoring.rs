//! PodTopologySpread's scoring for `ScheduleAnyway` constraints (and the system defaults):
//! PreScore counts matching pods per (key, value) over eligible nodes, and for hostname on
//! each node to be scored; Score weighs each count by log(domains + 2) and adds
//! `maxSkew − 1`; NormalizeScore turns fewer matching pods into a higher score.
//!
//! Upstream's Score counts a hostname constraint's pods on the node itself. Here PreScore
//! counts them for all the nodes at once, judging each class of alike pods once: at 5,000
//! nodes and 150,000 pods, Score judging every pod of every scored node was 44% of the
//! scheduler's CPU. A key no node to be scored has (the zone under the system defaults, on
//! nodes without zones) is not counted at all: Score never asks for it.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use skiff_component_helpers::node_affinity::RequiredNodeAffinity;

use super::{Constraint, HOSTNAME, PodTopologySpread, count_matching, has_all_keys};
use crate::framework::{
    ClassMemo, CycleState, MAX_NODE_SCORE, NodeInfo, NodeScore, PodInfo, PreScorePlugin,
    ScorePlugin, Snapshot, Status,
};
use crate::plugins::helper::node_labels;

const PRE_SCORE_KEY: &str = "PreScorePodTopologySpread";

#[derive(Clone)]
struct PreScoreState {
    constraints: Vec<Constraint>,
    /// Feasible nodes lacking a topology key (when every key is required): scored 0.
    ignored: HashSet<String>,
    /// Topology key → value → matching pods (non-hostname keys).
    pair_counts: HashMap<String, HashMap<String, i64>>,
    /// Per constraint, for hostname ones: node name → matching pods on it (nodes with none
    /// left out).
    host_counts: Vec<HashMap<String, i64>>,
    /// Per constraint: log(number of domains + 2).
    weights: Vec<f64>,
}

impl PreScorePlugin for PodTopologySpread {
    fn pre_score(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        nodes: &[Arc<NodeInfo>],
        snapshot: &Snapshot,
    ) -> Status {
        if nodes.is_empty() || snapshot.is_empty() {
            return Status::success();
        }
        let constraints = match self.constraints(&pod.pod, "ScheduleAnyway", snapshot.workloads()) {
            Ok(c) => c,
            Err(e) => return Status::error(e),
        };
        if constraints.is_empty() {
            return Status::skip();
        }
        // Nodes may lack the zone label under the system defaults and still spread by host.
        let require_all = pod_has_own_constraints(pod) || !self.system_defaulted;
        let mut ignored = HashSet::new();
        let mut pair_counts: HashMap<String, HashMap<String, i64>> = HashMap::new();
        let mut sizes = vec![0usize; constraints.len()];
        // Keys some feasible node carries with an empty value: only then do nodes without the
        // key (which upstream files under that same empty value) need counting.
        let mut explicit_empty: HashSet<&str> = HashSet::new();
        for n in nodes {
            if require_all && !has_all_keys(&n.node, &constraints) {
                ignored.insert(n.name().to_string());
                continue;
            }
            let labels = node_labels(&n.node);
            for (i, c) in constraints.iter().enumerate() {
                if c.topology_key == HOSTNAME {
                    continue;
                }
                let value = labels.get(&c.topology_key);
                if value.is_some_and(|v| v.is_empty()) {
                    explicit_empty.insert(&c.topology_key);
                }
                let value = value.cloned().unwrap_or_default();
                let by_value = pair_counts.entry(c.topology_key.clone()).or_default();
                if let std::collections::hash_map::Entry::Vacant(e) = by_value.entry(value) {
                    e.insert(0);
                    sizes[i] += 1;
                }
            }
        }
        let weights = constraints
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let size = if c.topology_key == HOSTNAME {
                    nodes.len() - ignored.len()
                } else {
                    sizes[i]
                };
                ((size + 2) as f64).ln()
            })
            .collect();
        let ns = pod.namespace();
        let mut memos: Vec<ClassMemo<bool>> =
            constraints.iter().map(|_| ClassMemo::default()).collect();
        let host_counts = constraints
            .iter()
            .zip(&mut memos)
            .map(|(c, memo)| {
                if c.topology_key != HOSTNAME {
                    return HashMap::new();
                }
                nodes
                    .iter()
                    .filter(|n| !ignored.contains(n.name()))
                    .map(|n| (n, count_matching(n, &c.selector, ns, Some(&mut *memo))))
                    .filter(|(_, count)| *count > 0)
                    .map(|(n, count)| (n.name().to_string(), count))
                    .collect()
            })
            .collect();
        // Score reads a key's count only for a node to be scored with that key, or with none
        // when some such node has it empty
        let counted: Vec<bool> = constraints
            .iter()
            .map(|c| {
                c.topology_key != HOSTNAME
                    && (explicit_empty.contains(c.topology_key.as_str())
                        || pair_counts
                            .get(&c.topology_key)
                            .is_some_and(|values| values.keys().any(|v| !v.is_empty())))
            })
            .collect();
        let required = RequiredNodeAffinity::of(&pod.pod);
        let walked = if counted.contains(&true) {
            snapshot.nodes()
        } else {
            &[]
        };
        for n in walked {
            if require_all && !has_all_keys(&n.node, &constraints) {
                continue;
            }
            let labels = node_labels(&n.node);
            for (i, c) in constraints.iter().enumerate() {
                if !counted[i] || !c.includes(&pod.pod, &n.node, &required) {
                    continue;
                }
                let value = match labels.get(&c.topology_key) {
                    Some(v) => v.as_str(),
                    None if explicit_empty.contains(c.topology_key.as_str()) => "",
                    None => continue,
                };
                let Some(count) = pair_counts
                    .get_mut(&c.topology_key)
                    .and_then(|m| m.get_mut(value))
                else {
                    continue;
                };
                *count += count_matching(n, &c.selector, ns, Some(&mut memos[i]));
            }
        }
        state.write(
            PRE_SCORE_KEY,
            PreScoreState {
                constraints,
                ignored,
                pair_counts,
                host_counts,
                weights,
            },
        );
        Status::success()
    }
}

fn pod_has_own_constraints(pod: &PodInfo) -> bool {
    pod.pod
        .spec
        .as_ref()
        .and_then(|s| s.topology_spread_constraints.as_ref())
        .is_some_and(|c| !c.is_empty())
}

impl ScorePlugin for PodTopologySpread {
    fn score(&self, state: &CycleState, _: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        let Some(s) = state.read::<PreScoreState>(PRE_SCORE_KEY) else {
            return Err(Status::error(format!(
                "reading {PRE_SCORE_KEY:?} from cycleState: not found"
            )));
        };
        if s.ignored.contains(node.name()) {
            return Ok(0);
        }
        let labels = node_labels(&node.node);
        let mut score = 0.0;
        for (i, c) in s.constraints.iter().enumerate() {
            let Some(value) = labels.get(&c.topology_key) else {
                continue;
            };
            let count = if c.topology_key == HOSTNAME {
                s.host_counts[i].get(node.name()).copied().unwrap_or(0)
            } else {
                s.pair_counts
                    .get(&c.topology_key)
                    .and_then(|m| m.get(value))
                    .copied()
                    .unwrap_or(0)
            };
            score += count as f64 * s.weights[i] + (c.max_skew - 1) as f64;
        }
        Ok(score.round() as i64)
    }

    fn normalize(&self, state: &CycleState, _: &PodInfo, scores: &mut [NodeScore]) -> Status {
        let Some(s) = state.read::<PreScoreState>(PRE_SCORE_KEY) else {
            return Status::success();
        };
        let counted = || scores.iter().filter(|n| !s.ignored.contains(&n.name));
        let min = counted().map(|n| n.score).min().unwrap_or(i64::MAX);
        let max = counted().map(|n| n.score).max().unwrap_or(0);
        for n in scores.iter_mut() {
            n.score = if s.ignored.contains(&n.name) {
                0
            } else if max == 0 {
                MAX_NODE_SCORE
            } else {
                MAX_NODE_SCORE * (max + min - n.score) / max
            };
        }
        Status::success()
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::spread;
    use super::*;
    use crate::framework::testing::{PodBuilder, node, snapshot};
    use k8s_openapi::api::core::v1::TopologySpreadConstraint;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

    fn web(name: &str) -> Arc<PodInfo> {
        PodBuilder::new(name).label("app", "web").info()
    }

    fn run(pl: &PodTopologySpread, pod: &PodInfo, snap: &Snapshot) -> Option<Vec<i64>> {
        run_on(pl, pod, snap, snap.nodes())
    }

    /// The scores of `nodes`, the feasible ones among the snapshot's.
    fn run_on(
        pl: &PodTopologySpread,
        pod: &PodInfo,
        snap: &Snapshot,
        nodes: &[Arc<NodeInfo>],
    ) -> Option<Vec<i64>> {
        let mut state = CycleState::default();
        let st = pl.pre_score(&mut state, pod, nodes, snap);
        if st.is_skip() {
            return None;
        }
        let mut scores: Vec<NodeScore> = nodes
            .iter()
            .map(|n| NodeScore {
                name: n.name().into(),
                score: pl.score(&state, pod, n).unwrap(),
            })
            .collect();
        pl.normalize(&state, pod, &mut scores);
        Some(scores.iter().map(|s| s.score).collect())
    }

    /// A pod of ReplicaSet `web-1`, which the system defaults spread.
    fn owned(name: &str) -> Arc<PodInfo> {
        let mut p = PodBuilder::new(name).label("app", "web").build();
        p.metadata.owner_references = Some(vec![OwnerReference {
            kind: "ReplicaSet".into(),
            name: "web-1".into(),
            controller: Some(true),
            ..Default::default()
        }]);
        Arc::new(PodInfo::new(Arc::new(p)))
    }

    /// ReplicaSet `web-1` selects `app=web` in `snap`.
    fn selected_by_web_1(snap: &mut Snapshot) {
        let mut workloads = crate::framework::Workloads::default();
        workloads.controllers.insert(
            "ReplicaSet/default/web-1".into(),
            skiff_apimachinery::labels::Selector::from_set([("app", "web")]),
        );
        snap.set_workloads(Arc::new(workloads));
    }

    fn pod_with(c: Vec<TopologySpreadConstraint>) -> Arc<PodInfo> {
        PodBuilder::new("new")
            .label("app", "web")
            .with_spec(|s| s.topology_spread_constraints = Some(c))
            .info()
    }

    #[test]
    fn domains_with_fewer_matching_pods_score_higher() {
        // zone a: 3 web pods; zone b: 1; zone c: 0; n4 lacks the zone key
        let snap = snapshot(vec![
            node("n1").label("zone", "a").info(&[web("w1"), web("w2")]),
            node("n2").label("zone", "a").info(&[web("w3")]),
            node("n3").label("zone", "b").info(&[web("w4")]),
            node("n5").label("zone", "c").info(&[]),
            node("n4").info(&[web("w5")]),
        ]);
        let pod = pod_with(vec![spread("zone", 1, "ScheduleAnyway", "web")]);
        // weight ln(3 + 2) ≈ 1.609: raw a = round(3×1.609) = 5, b = 2, c = 0
        // normalized: 100 × (5 + 0 − s) / 5; n4 is ignored → 0
        let got = run(&PodTopologySpread::default(), &pod, &snap).unwrap();
        assert_eq!(got, [0, 0, 60, 100, 0]);
    }

    #[test]
    fn hostname_spreading_counts_on_the_node_itself() {
        let snap = snapshot(vec![
            node("n1").info(&[web("w1"), web("w2")]),
            node("n2").info(&[web("w3")]),
            node("n3").info(&[]),
        ]);
        let pod = pod_with(vec![spread(
            "kubernetes.io/hostname",
            2,
            "ScheduleAnyway",
            "web",
        )]);
        // weight ln(5) ≈ 1.609, plus maxSkew − 1 = 1: raw 4, 3, 1
        // normalized: 100 × (4 + 1 − s) / 4 → 25, 50, 100
        let got = run(&PodTopologySpread::default(), &pod, &snap).unwrap();
        assert_eq!(got, [25, 50, 100]);
    }

    #[test]
    fn system_defaults_spread_a_controllers_pods_by_host_even_without_zones() {
        let mut snap = snapshot(vec![
            node("n1").info(&[owned("a"), owned("b")]),
            node("n2").info(&[]),
        ]);
        selected_by_web_1(&mut snap);
        let got = run(&PodTopologySpread::default(), &owned("new"), &snap).unwrap();
        assert!(got[1] > got[0], "{got:?}");
        // a pod nothing selects is not spread by default
        assert!(run(&PodTopologySpread::default(), &web("bare"), &snap).is_none());
    }

    #[test]
    fn system_defaults_count_zones_only_when_a_node_to_score_has_one() {
        let mut snap = snapshot(vec![
            node("zoned")
                .label("topology.kubernetes.io/zone", "a")
                .info(&[owned("a"), owned("b"), owned("c")]),
            node("empty").info(&[]),
            node("one").info(&[owned("d")]),
        ]);
        selected_by_web_1(&mut snap);
        let pl = PodTopologySpread::default();
        // hostname: weight ln(2 + 2), plus maxSkew 3 − 1: raw 2 and round(1.39 + 2) = 3; the
        // zone, which neither node has, adds nothing: 100 × (3 + 2 − raw) / 3
        let unzoned = run_on(&pl, &owned("new"), &snap, &snap.nodes()[1..]).unwrap();
        assert_eq!(unzoned, [100, 66]);
        // with the zoned node, zone a's 3 pods count there (weight ln(1 + 2), maxSkew 5 − 1)
        let all = run_on(&pl, &owned("new"), &snap, snap.nodes()).unwrap();
        assert!(all[0] < all[2] && all[2] < all[1], "{all:?}");
    }

    #[test]
    fn pods_without_soft_constraints_skip_scoring() {
        let pod = pod_with(vec![spread("zone", 1, "DoNotSchedule", "web")]);
        let snap = snapshot(vec![node("n1").info(&[])]);
        assert!(run(&PodTopologySpread::default(), &pod, &snap).is_none());
    }
}
