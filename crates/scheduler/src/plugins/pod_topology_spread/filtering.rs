//! PodTopologySpread's PreFilter and Filter for `DoNotSchedule` constraints: PreFilter counts
//! matching pods per domain over every eligible node (recounting only changed nodes when
//! every node with the keys is eligible, see `domains`) and keeps each constraint's minimum;
//! Filter then checks `count in the node's domain + self − minimum ≤ maxSkew` in O(constraints).

use std::collections::HashMap;

use skiff_component_helpers::node_affinity::RequiredNodeAffinity;

use super::{
    Constraint, NAME, PodTopologySpread, REASON, REASON_LABEL, count_matching, has_all_keys,
};
use crate::framework::{
    ClassMemo, CycleState, FilterPlugin, NodeInfo, PodInfo, PreFilterPlugin, PreFilterResult,
    Snapshot, Status,
};
use crate::plugins::helper::{node_labels, pod_labels};

const PRE_FILTER_KEY: &str = "PreFilterPodTopologySpread";

#[derive(Debug, Clone)]
struct PreFilterState {
    constraints: Vec<Constraint>,
    /// Per constraint: topology value → matching pods in that domain.
    counts: Vec<HashMap<String, i64>>,
    /// Per constraint: the smallest count over its domains (upstream's critical path).
    minimum: Vec<i64>,
}

impl PreFilterState {
    fn recompute_minimum(&mut self, i: usize) {
        self.minimum[i] = self.counts[i].values().copied().min().unwrap_or(i64::MAX);
    }

    /// The global minimum, or 0 while fewer domains than `minDomains` exist.
    fn min_match(&self, i: usize) -> i64 {
        if (self.counts[i].len() as i64) < self.constraints[i].min_domains {
            0
        } else {
            self.minimum[i]
        }
    }

    fn update(&mut self, pod: &PodInfo, other: &PodInfo, node: &NodeInfo, delta: i64) {
        if other.namespace() != pod.namespace() || !has_all_keys(&node.node, &self.constraints) {
            return;
        }
        let required = RequiredNodeAffinity::of(&pod.pod);
        let labels = node_labels(&node.node);
        for i in 0..self.constraints.len() {
            let c = &self.constraints[i];
            if !c.selector.matches(pod_labels(&other.pod))
                || !c.includes(&pod.pod, &node.node, &required)
            {
                continue;
            }
            let value = labels[&c.topology_key].clone();
            *self.counts[i].entry(value).or_default() += delta;
            self.recompute_minimum(i);
        }
    }
}

impl PreFilterPlugin for PodTopologySpread {
    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
    ) -> PreFilterResult {
        let constraints = match self.constraints(&pod.pod, "DoNotSchedule", snapshot.workloads()) {
            Ok(c) => c,
            Err(e) => return Status::error(e).into(),
        };
        if constraints.is_empty() {
            return Status::skip().into();
        }
        let required = RequiredNodeAffinity::of(&pod.pod);
        let every_node = constraints
            .iter()
            .all(|c| !c.honor_node_taints && (!c.honor_node_affinity || required.is_empty()));
        let counts = if every_node {
            self.domains
                .counts(snapshot.nodes(), pod.namespace(), &constraints)
        } else {
            count_domains(pod, &required, &constraints, snapshot)
        };
        let mut s = PreFilterState {
            minimum: vec![0; constraints.len()],
            constraints,
            counts,
        };
        for i in 0..s.constraints.len() {
            s.recompute_minimum(i);
        }
        state.write(PRE_FILTER_KEY, s);
        Status::success().into()
    }

    fn add_pod(&self, state: &mut CycleState, pod: &PodInfo, other: &PodInfo, node: &NodeInfo) {
        if let Some(s) = state.read_mut::<PreFilterState>(PRE_FILTER_KEY) {
            s.update(pod, other, node, 1);
        }
    }

    fn remove_pod(&self, state: &mut CycleState, pod: &PodInfo, other: &PodInfo, node: &NodeInfo) {
        if let Some(s) = state.read_mut::<PreFilterState>(PRE_FILTER_KEY) {
            s.update(pod, other, node, -1);
        }
    }
}

/// Per constraint: topology value → matching pods, over the nodes that have every
/// constraint's key and that the constraint takes into account for `pod`.
pub(super) fn count_domains(
    pod: &PodInfo,
    required: &RequiredNodeAffinity,
    constraints: &[Constraint],
    snapshot: &Snapshot,
) -> Vec<HashMap<String, i64>> {
    let ns = pod.namespace();
    let mut memos: Vec<ClassMemo<bool>> =
        constraints.iter().map(|_| ClassMemo::default()).collect();
    // keyed by the snapshot's own strings; copied once per domain below
    let mut counts: Vec<HashMap<&str, i64>> = vec![HashMap::new(); constraints.len()];
    for node in snapshot.nodes() {
        if !has_all_keys(&node.node, constraints) {
            continue;
        }
        let labels = node_labels(&node.node);
        for (i, c) in constraints.iter().enumerate() {
            if !c.includes(&pod.pod, &node.node, required) {
                continue;
            }
            let n = count_matching(node, &c.selector, ns, Some(&mut memos[i]));
            *counts[i]
                .entry(labels[&c.topology_key].as_str())
                .or_default() += n;
        }
    }
    counts
        .into_iter()
        .map(|m| m.into_iter().map(|(k, v)| (k.to_string(), v)).collect())
        .collect()
}

impl FilterPlugin for PodTopologySpread {
    fn filter(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        let Some(s) = state.read::<PreFilterState>(PRE_FILTER_KEY) else {
            return Status::error(format!(
                "reading {PRE_FILTER_KEY:?} from cycleState: not found"
            ))
            .with_plugin(NAME);
        };
        let labels = node_labels(&node.node);
        let own = pod_labels(&pod.pod);
        for (i, c) in s.constraints.iter().enumerate() {
            let Some(value) = labels.get(&c.topology_key) else {
                return Status::unresolvable(REASON_LABEL);
            };
            let self_match = i64::from(c.selector.matches(own));
            let matching = s.counts[i].get(value).copied().unwrap_or(0);
            if matching + self_match - s.min_match(i) > c.max_skew {
                return Status::unschedulable(REASON);
            }
        }
        Status::success()
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::spread;
    use super::*;
    use crate::framework::Code;
    use crate::framework::testing::{PodBuilder, node, snapshot};
    use k8s_openapi::api::core::v1::TopologySpreadConstraint;
    use std::sync::Arc;

    fn web(name: &str) -> Arc<PodInfo> {
        PodBuilder::new(name).label("app", "web").info()
    }

    fn pod_with(c: Vec<TopologySpreadConstraint>) -> Arc<PodInfo> {
        PodBuilder::new("new")
            .label("app", "web")
            .with_spec(|s| s.topology_spread_constraints = Some(c))
            .info()
    }

    /// zone a: n1 (2 web pods), n2 (0); zone b: n3 (1 web pod, 1 other); n4 has no zone.
    fn cluster() -> Snapshot {
        snapshot(vec![
            node("n1").label("zone", "a").info(&[web("w1"), web("w2")]),
            node("n2").label("zone", "a").info(&[]),
            node("n3")
                .label("zone", "b")
                .info(&[web("w3"), PodBuilder::new("o").label("app", "db").info()]),
            node("n4").info(&[web("w4")]),
        ])
    }

    fn filter_all(pod: &PodInfo, snap: &Snapshot) -> Vec<Code> {
        let mut state = CycleState::default();
        let pre = PodTopologySpread::default().pre_filter(&mut state, pod, snap);
        assert!(pre.status.is_success(), "{}", pre.status);
        snap.nodes()
            .iter()
            .map(|n| PodTopologySpread::default().filter(&state, pod, n).code())
            .collect()
    }

    #[test]
    fn skew_over_max_rejects_the_fuller_domains() {
        use Code::{Success as S, Unschedulable as U, UnschedulableAndUnresolvable as X};
        type Case = (&'static str, Vec<TopologySpreadConstraint>, [Code; 4]);
        let cases: Vec<Case> = vec![
            // zone a has 2, b has 1: a would be 3 − 1 = 2 > 1
            (
                "zone skew 1",
                vec![spread("zone", 1, "DoNotSchedule", "web")],
                [U, U, S, X],
            ),
            (
                "zone skew 2",
                vec![spread("zone", 2, "DoNotSchedule", "web")],
                [S, S, S, X],
            ),
            // hostname domains: n1 2, n2 0, n3 1 (n4 has the hostname label too: 1)
            (
                "hostname skew 1",
                vec![spread("kubernetes.io/hostname", 1, "DoNotSchedule", "web")],
                [U, S, U, U],
            ),
            (
                "both constraints",
                vec![
                    spread("zone", 2, "DoNotSchedule", "web"),
                    spread("kubernetes.io/hostname", 1, "DoNotSchedule", "web"),
                ],
                [U, S, U, X],
            ),
        ];
        for (name, constraints, want) in cases {
            let got = filter_all(&pod_with(constraints), &cluster());
            assert_eq!(got, want, "{name}");
        }
    }

    #[test]
    fn a_node_without_the_key_gets_the_missing_label_reason() {
        let snap = cluster();
        let pod = pod_with(vec![spread("zone", 1, "DoNotSchedule", "web")]);
        let mut state = CycleState::default();
        PodTopologySpread::default().pre_filter(&mut state, &pod, &snap);
        let got = PodTopologySpread::default().filter(&state, &pod, &snap.nodes()[3]);
        assert_eq!(got.message(), REASON_LABEL);
        let got = PodTopologySpread::default().filter(&state, &pod, &snap.nodes()[0]);
        assert_eq!(got.message(), REASON);
    }

    #[test]
    fn fewer_domains_than_min_domains_make_the_global_minimum_zero() {
        let mut c = spread("zone", 1, "DoNotSchedule", "web");
        c.min_domains = Some(3);
        // zone b: 1 + 1 − 0 = 2 > 1, so even the emptier zone is rejected
        assert_eq!(
            filter_all(&pod_with(vec![c]), &cluster())[2],
            Code::Unschedulable
        );
    }

    #[test]
    fn nodes_outside_the_pods_node_affinity_do_not_count() {
        // Only zone b is eligible: its single domain holds the minimum, so b fits.
        let pod = PodBuilder::new("new")
            .label("app", "web")
            .node_selector("zone", "b")
            .with_spec(|s| {
                s.topology_spread_constraints =
                    Some(vec![spread("zone", 1, "DoNotSchedule", "web")])
            })
            .info();
        assert_eq!(filter_all(&pod, &cluster())[2], Code::Success);
    }

    #[test]
    fn removing_a_victim_updates_the_counts_for_preemption() {
        let snap = cluster();
        let pod = pod_with(vec![spread("zone", 1, "DoNotSchedule", "web")]);
        let pl = PodTopologySpread::default();
        let mut state = CycleState::default();
        pl.pre_filter(&mut state, &pod, &snap);
        assert_eq!(
            pl.filter(&state, &pod, &snap.nodes()[1]).code(),
            Code::Unschedulable
        );
        let n1 = &snap.nodes()[0];
        pl.remove_pod(&mut state, &pod, &n1.pods[0], n1);
        // zone a now 1, zone b 1: a fits
        assert!(pl.filter(&state, &pod, &snap.nodes()[1]).is_success());
        pl.add_pod(&mut state, &pod, &web("again"), n1);
        assert_eq!(
            pl.filter(&state, &pod, &snap.nodes()[1]).code(),
            Code::Unschedulable
        );
    }

    #[test]
    fn pods_without_hard_constraints_skip_the_filter() {
        let pod = pod_with(vec![spread("zone", 1, "ScheduleAnyway", "web")]);
        let got =
            PodTopologySpread::default().pre_filter(&mut CycleState::default(), &pod, &cluster());
        assert!(got.status.is_skip());
    }
}
