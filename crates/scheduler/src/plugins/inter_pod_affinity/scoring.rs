//! InterPodAffinity's preferred terms: PreScore sums, per topology domain, the weights of the
//! incoming pod's preferred terms that existing pods match (anti-affinity subtracts), and of
//! existing pods' terms the incoming pod matches (their required affinity at
//! `hardPodAffinityWeight`); Score reads the node's domains; NormalizeScore maps min..max
//! onto 0..100.

use std::collections::HashMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;

use super::{AffinityTerm, InterPodAffinity, Kind, existing_terms, preferred_terms};
use crate::framework::{
    ClassMemo, CycleState, MAX_NODE_SCORE, NamespaceLabels, NodeInfo, NodeScore, PodInfo,
    PreScorePlugin, ScorePlugin, Snapshot, Status,
};
use crate::plugins::helper::node_labels;

const PRE_SCORE_KEY: &str = "PreScoreInterPodAffinity";

/// Topology key → value → summed weight. The keys are few (the terms'), so they are a vector;
/// the values hash with foldhash (seeded per map), not SipHash: with a hostname term every node
/// is a domain, and hashing them was a tenth of a cycle.
type ScoreMap = Vec<(String, HashMap<String, i64, foldhash::fast::RandomState>)>;

#[derive(Clone)]
struct PreScoreState {
    topology_score: ScoreMap,
}

/// Adds `weight` to the domain `key`=`value`; keys and values are copied only the first time
/// a domain is seen.
fn add_weight(m: &mut ScoreMap, key: &str, value: &str, weight: i64) {
    let i = match m.iter().position(|(k, _)| k == key) {
        Some(i) => i,
        None => {
            m.push((key.to_string(), HashMap::default()));
            m.len() - 1
        }
    };
    let by_value = &mut m[i].1;
    match by_value.get_mut(value) {
        Some(total) => *total += weight,
        None => {
            by_value.insert(value.to_string(), weight);
        }
    }
}

/// The (topology key, weight) of each term of `terms` that `pod` matches, `sign` applied.
fn matching_terms<'a>(
    terms: &'a [(i64, AffinityTerm)],
    sign: i64,
    pod: &'a Pod,
    ns: &'a NamespaceLabels,
) -> impl Iterator<Item = (String, i64)> + 'a {
    terms
        .iter()
        .filter(|(_, t)| t.matches(pod, ns))
        .map(move |(w, t)| (t.topology_key.clone(), w * sign))
}

impl PreScorePlugin for InterPodAffinity {
    fn pre_score(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        nodes: &[Arc<NodeInfo>],
        snapshot: &Snapshot,
    ) -> Status {
        if nodes.is_empty() {
            return Status::success();
        }
        let parsed = preferred_terms(&pod.pod, Kind::Affinity)
            .and_then(|a| Ok((a, preferred_terms(&pod.pod, Kind::AntiAffinity)?)));
        let (affinity, anti) = match parsed {
            Ok(t) => t,
            Err(e) => return Status::error(format!("parsing pod: {e}")),
        };
        let has_constraints = !affinity.is_empty() || !anti.is_empty();
        if self.ignore_preferred_terms_of_existing_pods && !has_constraints {
            return Status::skip();
        }
        let mut m = ScoreMap::new();
        let ns = snapshot.namespace_labels();
        let candidates: Box<dyn Iterator<Item = &Arc<NodeInfo>>> = if has_constraints {
            Box::new(snapshot.nodes().iter())
        } else {
            Box::new(snapshot.nodes_with_affinity_pods())
        };
        // what one existing pod of a class adds to its node's domains, worked out once per class
        let mut adds: ClassMemo<Vec<(String, i64)>> = ClassMemo::default();
        for node in candidates {
            let labels = node_labels(&node.node);
            if labels.is_empty() {
                continue;
            }
            for class in &node.classes {
                let other = &class.pod;
                if !has_constraints && !other.has_affinity() {
                    continue;
                }
                let adds = adds.get_or(class.id, || {
                    self.existing_pod_adds(&affinity, &anti, other, &pod.pod, ns)
                });
                for (key, weight) in adds {
                    if let Some(value) = labels.get(key) {
                        add_weight(&mut m, key, value, weight * i64::from(class.count));
                    }
                }
            }
        }
        if m.is_empty() {
            return Status::skip();
        }
        state.write(PRE_SCORE_KEY, PreScoreState { topology_score: m });
        Status::success()
    }
}

impl InterPodAffinity {
    /// The (topology key, weight) pairs one existing pod adds to its node's domains: the
    /// incoming pod's preferred terms it matches, and its own terms the incoming pod matches.
    fn existing_pod_adds(
        &self,
        affinity: &[(i64, AffinityTerm)],
        anti: &[(i64, AffinityTerm)],
        existing: &PodInfo,
        incoming: &Pod,
        ns: &NamespaceLabels,
    ) -> Vec<(String, i64)> {
        let mut adds: Vec<(String, i64)> = matching_terms(affinity, 1, &existing.pod, ns)
            .chain(matching_terms(anti, -1, &existing.pod, ns))
            .collect();
        if !existing.has_affinity() {
            return adds;
        }
        let terms = existing_terms(existing);
        if self.hard_pod_affinity_weight > 0 {
            adds.extend(
                terms
                    .required_affinity
                    .iter()
                    .filter(|t| t.matches(incoming, ns))
                    .map(|t| (t.topology_key.clone(), self.hard_pod_affinity_weight)),
            );
        }
        if !self.ignore_preferred_terms_of_existing_pods {
            adds.extend(matching_terms(&terms.preferred_affinity, 1, incoming, ns));
            adds.extend(matching_terms(
                &terms.preferred_anti_affinity,
                -1,
                incoming,
                ns,
            ));
        }
        adds
    }
}

impl ScorePlugin for InterPodAffinity {
    fn score(&self, state: &CycleState, _: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        let Some(s) = state.read::<PreScoreState>(PRE_SCORE_KEY) else {
            return Err(Status::error(format!(
                "reading {PRE_SCORE_KEY:?} from cycleState: not found"
            )));
        };
        let labels = node_labels(&node.node);
        let score = s
            .topology_score
            .iter()
            .filter_map(|(key, values)| values.get(labels.get(key)?))
            .sum();
        Ok(score)
    }

    fn normalize(&self, state: &CycleState, _: &PodInfo, scores: &mut [NodeScore]) -> Status {
        let Some(s) = state.read::<PreScoreState>(PRE_SCORE_KEY) else {
            return Status::success();
        };
        if s.topology_score.is_empty() {
            return Status::success();
        }
        let min = scores.iter().map(|s| s.score).min().unwrap_or(0);
        let max = scores.iter().map(|s| s.score).max().unwrap_or(0);
        let diff = max - min;
        for n in scores.iter_mut() {
            n.score = if diff > 0 {
                (MAX_NODE_SCORE as f64 * ((n.score - min) as f64 / diff as f64)) as i64
            } else {
                0
            };
        }
        Status::success()
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::term;
    use super::*;
    use crate::framework::testing::{PodBuilder, node, snapshot};
    use k8s_openapi::api::core::v1::{
        Affinity, PodAffinity, PodAffinityTerm, PodAntiAffinity, WeightedPodAffinityTerm,
    };
    use serde_json::json;

    fn weighted(w: i32, t: PodAffinityTerm) -> WeightedPodAffinityTerm {
        WeightedPodAffinityTerm {
            weight: w,
            pod_affinity_term: t,
        }
    }

    fn preferred(
        aff: Vec<WeightedPodAffinityTerm>,
        anti: Vec<WeightedPodAffinityTerm>,
    ) -> Affinity {
        Affinity {
            pod_affinity: Some(PodAffinity {
                preferred_during_scheduling_ignored_during_execution: Some(aff),
                ..Default::default()
            }),
            pod_anti_affinity: Some(PodAntiAffinity {
                preferred_during_scheduling_ignored_during_execution: Some(anti),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn run(pl: &InterPodAffinity, pod: &PodInfo, snap: &Snapshot) -> Option<Vec<i64>> {
        let mut state = CycleState::default();
        if pl.pre_score(&mut state, pod, snap.nodes(), snap).is_skip() {
            return None;
        }
        let mut scores: Vec<NodeScore> = snap
            .nodes()
            .iter()
            .map(|n| NodeScore {
                name: n.name().into(),
                score: pl.score(&state, pod, n).unwrap(),
            })
            .collect();
        pl.normalize(&state, pod, &mut scores);
        Some(scores.iter().map(|s| s.score).collect())
    }

    fn app(name: &str, app: &str) -> PodBuilder {
        PodBuilder::new(name).label("app", app)
    }

    #[test]
    fn preferred_affinity_and_anti_affinity_weigh_domains() {
        let snap = snapshot(vec![
            node("n1")
                .label("zone", "a")
                .info(&[app("db", "db").info()]),
            node("n2")
                .label("zone", "a")
                .info(&[app("batch", "batch").info()]),
            node("n3").label("zone", "b").info(&[]),
            node("n4")
                .label("zone", "c")
                .info(&[app("batch2", "batch").info()]),
        ]);
        let pod = app("p", "api")
            .affinity(preferred(
                vec![weighted(10, term("zone", "db"))],
                vec![weighted(4, term("kubernetes.io/hostname", "batch"))],
            ))
            .info();
        // raw: n1 10, n2 10 − 4 = 6, n3 0, n4 −4 → (s + 4) × 100 / 14
        let got = run(&InterPodAffinity::default(), &pod, &snap).unwrap();
        assert_eq!(got, [100, 71, 28, 0]);
    }

    #[test]
    fn existing_pods_required_affinity_counts_at_the_hard_weight() {
        let needs_web = app("sidecar", "side")
            .affinity(Affinity {
                pod_affinity: Some(PodAffinity {
                    required_during_scheduling_ignored_during_execution: Some(vec![term(
                        "zone", "web",
                    )]),
                    ..Default::default()
                }),
                ..Default::default()
            })
            .info();
        let snap = snapshot(vec![
            node("n1").label("zone", "a").info(&[needs_web]),
            node("n2").label("zone", "b").info(&[]),
        ]);
        let web = app("w", "web").info();
        assert_eq!(
            run(&InterPodAffinity::default(), &web, &snap).unwrap(),
            [100, 0]
        );
        let off = InterPodAffinity::from_args(Some(&json!({"hardPodAffinityWeight": 0}))).unwrap();
        assert!(run(&off, &web, &snap).is_none());
        // a pod the term does not select gets nothing to score
        assert!(run(&InterPodAffinity::default(), &app("x", "db").info(), &snap).is_none());
    }

    #[test]
    fn existing_preferred_terms_can_be_ignored() {
        let likes_web = app("fan", "fan")
            .affinity(preferred(vec![weighted(5, term("zone", "web"))], vec![]))
            .info();
        let snap = snapshot(vec![
            node("n1").label("zone", "a").info(&[likes_web]),
            node("n2").label("zone", "b").info(&[]),
        ]);
        let web = app("w", "web").info();
        assert_eq!(
            run(&InterPodAffinity::default(), &web, &snap).unwrap(),
            [100, 0]
        );
        let ignore =
            InterPodAffinity::from_args(Some(&json!({"ignorePreferredTermsOfExistingPods": true})))
                .unwrap();
        assert!(run(&ignore, &web, &snap).is_none());
    }
}
