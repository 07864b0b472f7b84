//! InterPodAffinity's required terms: PreFilter counts, per topology domain, the existing pods
//! whose anti-affinity the incoming pod would break, and the pods matching the incoming pod's
//! affinity and anti-affinity; Filter reads the node's domains from those counts.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;

use super::{
    AffinityTerm, InterPodAffinity, Kind, REASON_AFFINITY, REASON_ANTI_AFFINITY,
    REASON_EXISTING_ANTI_AFFINITY, TopologyCounts, existing_terms, matches_all, required_terms,
};
use crate::framework::{
    CycleState, FilterPlugin, NamespaceLabels, NodeInfo, PodInfo, PreFilterPlugin, PreFilterResult,
    Snapshot, Status,
};
use crate::plugins::helper::node_labels;

const PRE_FILTER_KEY: &str = "PreFilterInterPodAffinity";

#[derive(Debug, Clone)]
struct PreFilterState {
    affinity: Vec<AffinityTerm>,
    anti_affinity: Vec<AffinityTerm>,
    /// Domains where an existing pod's required anti-affinity selects the incoming pod.
    existing_anti: TopologyCounts,
    /// Domains holding pods that match every affinity term.
    affinity_counts: TopologyCounts,
    /// Domains holding pods matched by an anti-affinity term.
    anti_counts: TopologyCounts,
    /// Whether the incoming pod matches all its own affinity terms.
    matches_itself: bool,
    /// Namespaces' labels, as the cycle's snapshot had them.
    namespaces: Arc<NamespaceLabels>,
}

impl PreFilterState {
    fn update(&mut self, pod: &Pod, other: &PodInfo, node: &NodeInfo, delta: i64) {
        let (n, ns) = (&node.node, &*self.namespaces);
        let anti = &existing_terms(other).required_anti_affinity;
        self.existing_anti
            .add_matching_terms(anti, pod, n, delta, ns);
        self.affinity_counts
            .add_if_all_match(&self.affinity, &other.pod, n, delta, ns);
        self.anti_counts
            .add_matching_terms(&self.anti_affinity, &other.pod, n, delta, ns);
    }
}

impl PreFilterPlugin for InterPodAffinity {
    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
    ) -> PreFilterResult {
        let parsed = required_terms(&pod.pod, Kind::Affinity)
            .and_then(|a| Ok((a, required_terms(&pod.pod, Kind::AntiAffinity)?)));
        let (affinity, anti_affinity) = match parsed {
            Ok(t) => t,
            Err(e) => return Status::unresolvable(format!("parsing pod: {e}")).into(),
        };
        let ns = snapshot.namespace_labels();
        let mut existing_anti = TopologyCounts::default();
        for node in snapshot.nodes_with_required_anti_affinity_pods() {
            // alike pods (a class) have the same terms: count them together
            for class in &node.classes {
                if !class.pod.has_required_anti_affinity() {
                    continue;
                }
                let terms = &existing_terms(&class.pod).required_anti_affinity;
                let n = i64::from(class.count);
                existing_anti.add_matching_terms(terms, &pod.pod, &node.node, n, ns);
            }
        }
        let mut affinity_counts = TopologyCounts::default();
        let mut anti_counts = TopologyCounts::default();
        if !affinity.is_empty() || !anti_affinity.is_empty() {
            for node in snapshot.nodes() {
                for class in &node.classes {
                    let (other, n) = (&class.pod.pod, i64::from(class.count));
                    affinity_counts.add_if_all_match(&affinity, other, &node.node, n, ns);
                    anti_counts.add_matching_terms(&anti_affinity, other, &node.node, n, ns);
                }
            }
        }
        if existing_anti.is_empty() && affinity.is_empty() && anti_affinity.is_empty() {
            return Status::skip().into();
        }
        let matches_itself = matches_all(&affinity, &pod.pod, ns);
        state.write(
            PRE_FILTER_KEY,
            PreFilterState {
                affinity,
                anti_affinity,
                existing_anti,
                affinity_counts,
                anti_counts,
                matches_itself,
                namespaces: snapshot.namespaces(),
            },
        );
        Status::success().into()
    }

    fn add_pod(&self, state: &mut CycleState, pod: &PodInfo, other: &PodInfo, node: &NodeInfo) {
        if let Some(s) = state.read_mut::<PreFilterState>(PRE_FILTER_KEY) {
            s.update(&pod.pod, other, node, 1);
        }
    }

    fn remove_pod(&self, state: &mut CycleState, pod: &PodInfo, other: &PodInfo, node: &NodeInfo) {
        if let Some(s) = state.read_mut::<PreFilterState>(PRE_FILTER_KEY) {
            s.update(&pod.pod, other, node, -1);
        }
    }
}

impl FilterPlugin for InterPodAffinity {
    fn filter(&self, state: &CycleState, _: &PodInfo, node: &NodeInfo) -> Status {
        let Some(s) = state.read::<PreFilterState>(PRE_FILTER_KEY) else {
            return Status::error(format!(
                "reading {PRE_FILTER_KEY:?} from cycleState: not found"
            ));
        };
        let labels = node_labels(&node.node);
        // Affinity: every term's domain on this node must hold a matching pod, unless no pod
        // anywhere matches and the pod matches its own terms (the first of a group).
        let mut pods_exist = true;
        for t in &s.affinity {
            let Some(value) = labels.get(&t.topology_key) else {
                return Status::unresolvable(REASON_AFFINITY);
            };
            if s.affinity_counts.get(&t.topology_key, value) <= 0 {
                pods_exist = false;
            }
        }
        let first_of_group = s.affinity_counts.is_empty() && s.matches_itself;
        if !pods_exist && !first_of_group {
            return Status::unresolvable(REASON_AFFINITY);
        }
        if !s.anti_counts.is_empty() {
            let blocked = s.anti_affinity.iter().any(|t| {
                labels
                    .get(&t.topology_key)
                    .is_some_and(|v| s.anti_counts.get(&t.topology_key, v) > 0)
            });
            if blocked {
                return Status::unschedulable(REASON_ANTI_AFFINITY);
            }
        }
        if !s.existing_anti.is_empty() && labels.iter().any(|(k, v)| s.existing_anti.get(k, v) > 0)
        {
            return Status::unschedulable(REASON_EXISTING_ANTI_AFFINITY);
        }
        Status::success()
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::term;
    use super::*;
    use crate::framework::Code;
    use crate::framework::testing::{PodBuilder, node, snapshot};
    use k8s_openapi::api::core::v1::{Affinity, PodAffinity, PodAffinityTerm, PodAntiAffinity};
    use std::sync::Arc;

    fn required(affinity: Vec<PodAffinityTerm>, anti: Vec<PodAffinityTerm>) -> Affinity {
        Affinity {
            pod_affinity: (!affinity.is_empty()).then(|| PodAffinity {
                required_during_scheduling_ignored_during_execution: Some(affinity),
                ..Default::default()
            }),
            pod_anti_affinity: (!anti.is_empty()).then(|| PodAntiAffinity {
                required_during_scheduling_ignored_during_execution: Some(anti),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn app(name: &str, app: &str) -> PodBuilder {
        PodBuilder::new(name).label("app", app)
    }

    /// zone a: n1 (db), n2 (empty); zone b: n3 (cache, which repels web in its zone).
    fn cluster() -> Snapshot {
        let cache = app("cache", "cache")
            .affinity(required(vec![], vec![term("zone", "web")]))
            .info();
        snapshot(vec![
            node("n1")
                .label("zone", "a")
                .info(&[app("db", "db").info()]),
            node("n2").label("zone", "a").info(&[]),
            node("n3").label("zone", "b").info(&[cache]),
        ])
    }

    fn filter_all(pod: &PodInfo, snap: &Snapshot) -> Vec<Status> {
        let pl = InterPodAffinity::default();
        let mut state = CycleState::default();
        let pre = pl.pre_filter(&mut state, pod, snap);
        if pre.status.is_skip() {
            return snap.nodes().iter().map(|_| Status::success()).collect();
        }
        assert!(pre.status.is_success(), "{}", pre.status);
        snap.nodes()
            .iter()
            .map(|n| pl.filter(&state, pod, n))
            .collect()
    }

    #[test]
    fn required_terms_admit_and_exclude_domains() {
        use Code::{Success as S, Unschedulable as U, UnschedulableAndUnresolvable as X};
        let cases = [
            ("no terms", app("p", "api"), [S, S, S]),
            (
                "affinity to db's zone",
                app("p", "api").affinity(required(vec![term("zone", "db")], vec![])),
                [S, S, X],
            ),
            (
                "affinity to db's host",
                app("p", "api")
                    .affinity(required(vec![term("kubernetes.io/hostname", "db")], vec![])),
                [S, X, X],
            ),
            (
                "affinity to nothing yet, not matching itself",
                app("p", "api").affinity(required(vec![term("zone", "queue")], vec![])),
                [X, X, X],
            ),
            (
                "the first pod of a self-affine group goes anywhere",
                app("p", "queue").affinity(required(vec![term("zone", "queue")], vec![])),
                [S, S, S],
            ),
            (
                "anti-affinity to db's zone",
                app("p", "api").affinity(required(vec![], vec![term("zone", "db")])),
                [U, U, S],
            ),
            (
                "existing cache repels web from zone b",
                app("p", "web"),
                [S, S, U],
            ),
        ];
        for (name, pod, want) in cases {
            let got: Vec<Code> = filter_all(&pod.info(), &cluster())
                .iter()
                .map(|s| s.code())
                .collect();
            assert_eq!(got, want, "{name}");
        }
    }

    #[test]
    fn reasons_name_which_rule_failed() {
        let snap = cluster();
        let anti =
            app("p", "web").affinity(required(vec![term("zone", "db")], vec![term("zone", "db")]));
        let got = filter_all(&anti.info(), &snap);
        assert_eq!(got[0].message(), REASON_ANTI_AFFINITY);
        assert_eq!(got[2].message(), REASON_AFFINITY);
        let plain = filter_all(&app("p", "web").info(), &snap);
        assert_eq!(plain[2].message(), REASON_EXISTING_ANTI_AFFINITY);
    }

    #[test]
    fn removing_a_victim_lifts_its_anti_affinity_for_preemption() {
        let snap = cluster();
        let pod: Arc<PodInfo> = app("p", "web").info();
        let pl = InterPodAffinity::default();
        let mut state = CycleState::default();
        pl.pre_filter(&mut state, &pod, &snap);
        let n3 = &snap.nodes()[2];
        assert_eq!(pl.filter(&state, &pod, n3).code(), Code::Unschedulable);
        pl.remove_pod(&mut state, &pod, &n3.pods[0], n3);
        assert!(pl.filter(&state, &pod, n3).is_success());
        pl.add_pod(&mut state, &pod, &n3.pods[0], n3);
        assert_eq!(pl.filter(&state, &pod, n3).code(), Code::Unschedulable);
    }
}
