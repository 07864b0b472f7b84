//! `DefaultPreemption` (upstream's `defaultpreemption` plugin over `framework/preemption`): the
//! PostFilter that runs when no node fits. It looks for nodes where evicting pods of lower
//! priority would let the pod fit, keeps on each node only the victims it must (reprieving the
//! most important ones first, and those whose eviction would violate a PodDisruptionBudget
//! before the others), picks the node whose eviction hurts least, and returns that node with its
//! victims. Pure: the scheduler nominates the pod and evicts the victims.

use std::cmp::{Ordering, Reverse};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering as AtomicOrdering};

use serde_json::Value;

use k8s_openapi::api::policy::v1::PodDisruptionBudget;

use super::helper::{arg, label_selector, pod_labels};
use crate::algorithm::FitError;
use crate::framework::{
    Code, CycleState, FilterRunner, NodeInfo, NodeStatuses, Plugin, PodInfo, PostFilterPlugin,
    PostFilterResult, Snapshot, Status,
};

pub const NAME: &str = "DefaultPreemption";

/// Upstream's message for a node with no pod of lower priority.
pub const NO_VICTIMS: &str = "No preemption victims found for incoming pod";
/// Upstream's message for nodes where evicting pods cannot help.
pub const NOT_HELPFUL: &str = "Preemption is not helpful for scheduling";

/// The plugin and its args (`DefaultPreemptionArgs`).
#[derive(Debug)]
pub struct DefaultPreemption {
    /// Dry-run at least this percentage of the candidate nodes (default 10).
    pub min_candidate_nodes_percentage: usize,
    /// … and at least this many (default 100).
    pub min_candidate_nodes_absolute: usize,
    /// xorshift state for the node the dry run starts at.
    rng: AtomicU64,
}

impl Default for DefaultPreemption {
    fn default() -> Self {
        DefaultPreemption {
            min_candidate_nodes_percentage: 10,
            min_candidate_nodes_absolute: 100,
            rng: AtomicU64::new(0x9e37_79b9_7f4a_7c15),
        }
    }
}

/// A node where the pod would fit once `victims` are gone.
#[derive(Debug, Clone)]
struct Candidate {
    node: String,
    victims: Victims,
}

/// The pods to evict from one node, and how many of them a PodDisruptionBudget protects.
#[derive(Debug, Clone, Default)]
struct Victims {
    pods: Vec<Arc<PodInfo>>,
    violating: usize,
}

impl DefaultPreemption {
    pub fn from_args(args: Option<&Value>) -> Result<DefaultPreemption, String> {
        let mut pl = DefaultPreemption::default();
        if let Some(p) = arg::<i64>(args, "minCandidateNodesPercentage")? {
            if !(0..=100).contains(&p) {
                return Err(format!(
                    "minCandidateNodesPercentage: Invalid value: {p}: not in valid range [0, 100]"
                ));
            }
            pl.min_candidate_nodes_percentage = p as usize;
        }
        if let Some(a) = arg::<i64>(args, "minCandidateNodesAbsolute")? {
            if a < 0 {
                return Err(format!(
                    "minCandidateNodesAbsolute: Invalid value: {a}: not in valid range [0, inf)"
                ));
            }
            pl.min_candidate_nodes_absolute = a as usize;
        }
        if pl.min_candidate_nodes_percentage == 0 && pl.min_candidate_nodes_absolute == 0 {
            return Err(
                "minCandidateNodesPercentage: Invalid value: 0: cannot be zero at the \
                        same time as minCandidateNodesAbsolute"
                    .into(),
            );
        }
        Ok(pl)
    }

    /// How many candidates to find before choosing (upstream's `calculateNumCandidates`).
    fn num_candidates(&self, nodes: usize) -> usize {
        (nodes * self.min_candidate_nodes_percentage / 100)
            .max(self.min_candidate_nodes_absolute)
            .min(nodes)
    }

    fn random(&self, below: usize) -> usize {
        let mut x = self.rng.load(AtomicOrdering::Relaxed);
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.rng.store(x, AtomicOrdering::Relaxed);
        (x % below.max(1) as u64) as usize
    }
}

impl Plugin for DefaultPreemption {
    fn name(&self) -> &'static str {
        NAME
    }
    fn as_post_filter(&self) -> Option<&dyn PostFilterPlugin> {
        Some(self)
    }
}

impl PostFilterPlugin for DefaultPreemption {
    fn post_filter(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
        statuses: &NodeStatuses,
        filters: &dyn FilterRunner,
    ) -> PostFilterResult {
        if let Err(why) = eligible(pod, snapshot, statuses) {
            return failure(why.to_string(), None);
        }
        let potential: Vec<&Arc<NodeInfo>> = snapshot
            .nodes()
            .iter()
            .filter(|n| {
                statuses
                    .get(n.name())
                    .is_some_and(|s| s.code() != Code::UnschedulableAndUnresolvable)
            })
            .collect();
        let mut dry_run = NodeStatuses::new();
        let mut candidates = Vec::new();
        if !potential.is_empty() {
            let want = self.num_candidates(potential.len());
            let offset = self.random(potential.len());
            for i in 0..potential.len() {
                let node = potential[(offset + i) % potential.len()];
                match select_victims(state, pod, node, snapshot, filters) {
                    Ok(victims) => candidates.push(Candidate {
                        node: node.name().to_string(),
                        victims,
                    }),
                    Err(status) => {
                        dry_run.insert(node.name().to_string(), status);
                    }
                }
                if candidates.len() >= want {
                    break;
                }
            }
        }
        let Some(best) = pick_one(&candidates) else {
            for n in snapshot.nodes() {
                dry_run
                    .entry(n.name().to_string())
                    .or_insert_with(|| Status::unresolvable(NOT_HELPFUL));
            }
            let fit = FitError {
                num_all_nodes: snapshot.len(),
                pre_filter_msg: None,
                statuses: dry_run,
                post_filter_msg: None,
                nominated_node: None,
                victims: Vec::new(),
            };
            // clears a nomination an earlier cycle made
            return failure(fit.to_string(), Some(String::new()));
        };
        let best = candidates.swap_remove(best);
        PostFilterResult {
            status: Status::success(),
            nominated_node: Some(best.node),
            victims: best.victims.pods,
        }
    }
}

fn failure(message: String, nominated_node: Option<String>) -> PostFilterResult {
    PostFilterResult {
        status: Status::unschedulable(format!("preemption: {message}")),
        nominated_node,
        victims: Vec::new(),
    }
}

/// Upstream's `PodEligibleToPreemptOthers`: not with `preemptionPolicy: Never`, and not again
/// while a lower-priority pod on the node it was nominated to is still terminating (its
/// earlier preemption is under way).
fn eligible(
    pod: &PodInfo,
    snapshot: &Snapshot,
    statuses: &NodeStatuses,
) -> Result<(), &'static str> {
    let spec = pod.pod.spec.as_ref();
    if spec.and_then(|s| s.preemption_policy.as_deref()) == Some("Never") {
        return Err("not eligible due to preemptionPolicy=Never.");
    }
    let nominated = pod
        .pod
        .status
        .as_ref()
        .and_then(|s| s.nominated_node_name.as_deref())
        .filter(|n| !n.is_empty());
    let Some(nominated) = nominated else {
        return Ok(());
    };
    if statuses
        .get(nominated)
        .is_some_and(|s| s.code() == Code::UnschedulableAndUnresolvable)
    {
        return Ok(());
    }
    if let Some(node) = snapshot.get(nominated) {
        let terminating_below = node
            .pods
            .iter()
            .any(|p| p.pod.metadata.deletion_timestamp.is_some() && p.priority() < pod.priority());
        if terminating_below {
            return Err("not eligible due to a terminating pod on the nominated node.");
        }
    }
    Ok(())
}

/// Upstream's `SelectVictimsOnNode`: remove every pod of lower priority; if the pod then fits,
/// add them back, those a PodDisruptionBudget protects first, each group most important first,
/// keeping each whose return still lets the pod fit. The rest are the victims.
fn select_victims(
    state: &CycleState,
    pod: &PodInfo,
    node: &NodeInfo,
    snapshot: &Snapshot,
    filters: &dyn FilterRunner,
) -> Result<Victims, Status> {
    let mut potential: Vec<Arc<PodInfo>> = node
        .pods
        .iter()
        .filter(|p| p.priority() < pod.priority())
        .cloned()
        .collect();
    if potential.is_empty() {
        return Err(Status::unresolvable(NO_VICTIMS));
    }
    let mut state = state.clone();
    let mut node = node.clone();
    for p in &potential {
        node.remove_pod(&p.key);
        filters.remove_pod_from_state(&mut state, pod, p, &node);
    }
    let nominated = snapshot.nominated(node.name());
    let fits = filters.filter_with(&state, pod, &node, nominated);
    if !fits.is_success() {
        return Err(fits);
    }
    potential.sort_by(|a, b| more_important(a, b));
    let (violating, non_violating) = split_by_pdb_violation(potential, snapshot.pdbs());
    let mut victims = Victims::default();
    for (group, protected) in [(violating, true), (non_violating, false)] {
        for p in group {
            node.add_pod(p.clone());
            filters.add_pod_to_state(&mut state, pod, &p, &node);
            if !filters
                .filter_with(&state, pod, &node, nominated)
                .is_success()
            {
                node.remove_pod(&p.key);
                filters.remove_pod_from_state(&mut state, pod, &p, &node);
                victims.pods.push(p);
                victims.violating += usize::from(protected);
            }
        }
    }
    if victims.pods.is_empty() {
        return Err(Status::error(format!(
            "expected at least one victim pod on node {:?}",
            node.name()
        )));
    }
    Ok(victims)
}

/// Upstream's `filterPodsWithPDBViolation`: walking the pods in order, each takes one allowed
/// disruption from every budget in its namespace whose (non-empty) selector matches it, unless
/// the budget already counts it as disrupted; a pod that takes a budget below zero would violate
/// it. Returns (violating, not violating), each in the given order.
fn split_by_pdb_violation(
    pods: Vec<Arc<PodInfo>>,
    pdbs: &[Arc<PodDisruptionBudget>],
) -> (Vec<Arc<PodInfo>>, Vec<Arc<PodInfo>>) {
    let selectors: Vec<_> = pdbs
        .iter()
        .map(|pdb| {
            let selector = pdb.spec.as_ref().and_then(|s| s.selector.as_ref());
            label_selector(selector)
                .ok()
                .filter(|s| !s.is_empty() && !s.is_nothing())
        })
        .collect();
    let mut allowed: Vec<i32> = pdbs
        .iter()
        .map(|pdb| pdb.status.as_ref().map_or(0, |s| s.disruptions_allowed))
        .collect();
    let (mut violating, mut fine) = (Vec::new(), Vec::new());
    for p in pods {
        let labels = pod_labels(&p.pod);
        let mut violates = false;
        if !labels.is_empty() {
            for (i, pdb) in pdbs.iter().enumerate() {
                let Some(selector) = &selectors[i] else {
                    continue;
                };
                if pdb.metadata.namespace.as_deref() != Some(p.namespace())
                    || !selector.matches(labels)
                {
                    continue;
                }
                let disrupted = pdb
                    .status
                    .as_ref()
                    .and_then(|s| s.disrupted_pods.as_ref())
                    .is_some_and(|d| d.contains_key(p.name()));
                if disrupted {
                    continue;
                }
                allowed[i] -= 1;
                violates |= allowed[i] < 0;
            }
        }
        if violates {
            violating.push(p);
        } else {
            fine.push(p);
        }
    }
    (violating, fine)
}

/// When a pod started (now if it has not: bound pods that have not started yet are the
/// newest), upstream's `GetPodStartTime`.
fn start_time(p: &PodInfo) -> jiff::Timestamp {
    p.pod
        .status
        .as_ref()
        .and_then(|s| s.start_time.as_ref())
        .map_or_else(jiff::Timestamp::now, |t| t.0)
}

/// Upstream's `MoreImportantPod`: higher priority first, then the one that started earlier.
fn more_important(a: &PodInfo, b: &PodInfo) -> Ordering {
    b.priority()
        .cmp(&a.priority())
        .then_with(|| start_time(a).cmp(&start_time(b)))
}

/// Upstream's `pickOneNodeForPreemption`: a node with no victims at once; otherwise, keeping
/// the best at each step, the fewest PodDisruptionBudget violations, the lowest
/// highest-priority victim, the lowest sum of priorities, the fewest victims, the latest start
/// among the highest-priority victims, then the first.
fn pick_one(candidates: &[Candidate]) -> Option<usize> {
    if candidates.is_empty() {
        return None;
    }
    if let Some(i) = candidates.iter().position(|c| c.victims.pods.is_empty()) {
        return Some(i);
    }
    let mut best: Vec<usize> = (0..candidates.len()).collect();
    let highest = |c: &Candidate| c.victims.pods.iter().map(|v| v.priority()).max();
    keep_min(&mut best, candidates, |c| c.victims.violating);
    keep_min(&mut best, candidates, highest);
    // each victim counts as its priority plus MaxInt32 + 1, so a negative priority still costs
    keep_min(&mut best, candidates, |c| {
        c.victims
            .pods
            .iter()
            .map(|v| i64::from(v.priority()) + i64::from(i32::MAX) + 1)
            .sum::<i64>()
    });
    keep_min(&mut best, candidates, |c| c.victims.pods.len());
    // the latest of the highest-priority victims' earliest starts
    keep_min(&mut best, candidates, |c| {
        let top = highest(c);
        let earliest = c
            .victims
            .pods
            .iter()
            .filter(|v| Some(v.priority()) == top)
            .map(|v| start_time(v))
            .min();
        Reverse(earliest)
    });
    best.first().copied()
}

/// Keeps in `best` only the candidates with the smallest `score` (each scored once: a start
/// time may be "now").
fn keep_min<K: Ord>(
    best: &mut Vec<usize>,
    candidates: &[Candidate],
    score: impl Fn(&Candidate) -> K,
) {
    let scored: Vec<(usize, K)> = best.iter().map(|&i| (i, score(&candidates[i]))).collect();
    let Some(min) = scored.iter().map(|(_, k)| k).min() else {
        return;
    };
    *best = scored
        .iter()
        .filter(|(_, k)| k == min)
        .map(|(i, _)| *i)
        .collect();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::testing::{PodBuilder, node, snapshot};
    use crate::framework::{Framework, NodeInfo};
    use crate::plugins::node_resources_fit::NodeResourcesFit;
    use crate::plugins::node_unschedulable::NodeUnschedulable;
    use serde_json::json;

    fn framework() -> Framework {
        Framework::new(
            "default-scheduler",
            vec![
                (Arc::new(NodeUnschedulable), 0),
                (Arc::new(NodeResourcesFit::default()), 1),
                (Arc::new(DefaultPreemption::default()), 0),
            ],
        )
    }

    /// A pod asking for `cpu` with `priority`, started `started` seconds after the epoch.
    fn pod(name: &str, cpu: &str, priority: i32, started: i64) -> Arc<PodInfo> {
        PodBuilder::new(name)
            .container("c", &[("cpu", cpu)])
            .priority(priority)
            .started_at(started)
            .info()
    }

    /// Runs Filter on every node, then PostFilter, as the algorithm does.
    fn preempt(fw: &Framework, incoming: &PodInfo, nodes: Vec<NodeInfo>) -> PostFilterResult {
        let snap = snapshot(nodes);
        let mut state = CycleState::default();
        fw.run_pre_filter(&mut state, incoming, &snap);
        let statuses: NodeStatuses = snap
            .nodes()
            .iter()
            .map(|n| (n.name().to_string(), fw.run_filter(&state, incoming, n)))
            .filter(|(_, s)| !s.is_success())
            .collect();
        fw.run_post_filter(&state, incoming, &snap, &statuses)
    }

    fn victim_names(r: &PostFilterResult) -> Vec<&str> {
        r.victims.iter().map(|v| v.name()).collect()
    }

    #[test]
    fn evicts_only_the_lower_priority_pods_it_must_on_the_cheapest_node() {
        let fw = framework();
        let incoming = pod("vip", "2", 100, 0);
        // (case, nodes, the node chosen, its victims)
        type Case = (
            &'static str,
            Vec<NodeInfo>,
            Option<&'static str>,
            Vec<&'static str>,
        );
        let cases: Vec<Case> = vec![
            (
                "the lowest highest-priority victim wins",
                vec![
                    node("n1").cpu("2").info(&[pod("a", "2", 50, 1)]),
                    node("n2").cpu("2").info(&[pod("b", "2", 10, 1)]),
                ],
                Some("n2"),
                vec!["b"],
            ),
            (
                "the more important pod is reprieved when evicting the other is enough",
                vec![
                    node("n1")
                        .cpu("4")
                        .info(&[pod("low", "2", 1, 1), pod("mid", "2", 5, 1)]),
                ],
                Some("n1"),
                vec!["low"],
            ),
            (
                "a more important pod is evicted when a less important one would not do",
                vec![
                    node("n1")
                        .cpu("3")
                        .info(&[pod("low", "1", 1, 1), pod("mid", "2", 5, 1)]),
                ],
                Some("n1"),
                vec!["mid"],
            ),
            (
                "then the lowest sum of priorities",
                vec![
                    node("n1")
                        .cpu("2")
                        .info(&[pod("a", "1", 10, 1), pod("b", "1", 10, 1)]),
                    node("n2")
                        .cpu("2")
                        .info(&[pod("c", "1", 10, 1), pod("d", "1", 1, 1)]),
                ],
                Some("n2"),
                vec!["c", "d"],
            ),
            (
                "each victim counts in the sum, so fewer victims cost less",
                vec![
                    node("n1")
                        .cpu("2")
                        .info(&[pod("a", "1", 10, 1), pod("b", "1", 10, 1)]),
                    node("n2").cpu("2").info(&[pod("c", "2", 10, 1)]),
                ],
                Some("n2"),
                vec!["c"],
            ),
            (
                "then the node whose victims started last",
                vec![
                    node("n1").cpu("2").info(&[pod("old", "2", 10, 1)]),
                    node("n2").cpu("2").info(&[pod("new", "2", 10, 500)]),
                ],
                Some("n2"),
                vec!["new"],
            ),
            (
                "pods of equal or higher priority are never victims",
                vec![node("n1").cpu("2").info(&[pod("peer", "2", 100, 1)])],
                None,
                vec![],
            ),
        ];
        for (name, nodes, want_node, want_victims) in cases {
            let r = preempt(&fw, &incoming, nodes);
            assert_eq!(
                r.nominated_node.as_deref().filter(|n| !n.is_empty()),
                want_node,
                "{name}"
            );
            assert_eq!(victim_names(&r), want_victims, "{name}");
            assert_eq!(
                r.status.is_success(),
                want_node.is_some(),
                "{name}: {}",
                r.status
            );
        }
    }

    #[test]
    fn victims_a_disruption_budget_protects_are_spared_where_another_node_will_do() {
        let fw = framework();
        let incoming = pod("vip", "2", 100, 0);
        let guarded = |name: &str| {
            PodBuilder::new(name)
                .label("app", "db")
                .container("c", &[("cpu", "2")])
                .priority(1)
                .started_at(1)
                .info()
        };
        let pdb: PodDisruptionBudget = serde_json::from_value(json!({
            "metadata": {"name": "db", "namespace": "default"},
            "spec": {"selector": {"matchLabels": {"app": "db"}}},
            "status": {"disruptionsAllowed": 0, "currentHealthy": 1, "desiredHealthy": 1,
                       "expectedPods": 1},
        }))
        .unwrap();
        let mut snap = snapshot(vec![
            node("n1").cpu("2").info(&[guarded("db-0")]),
            // a more important victim, but one no budget protects
            node("n2").cpu("2").info(&[pod("batch", "2", 50, 1)]),
        ]);
        snap.set_pdbs(Arc::new(vec![Arc::new(pdb)]));
        let mut state = CycleState::default();
        fw.run_pre_filter(&mut state, &incoming, &snap);
        let statuses: NodeStatuses = snap
            .nodes()
            .iter()
            .map(|n| (n.name().to_string(), fw.run_filter(&state, &incoming, n)))
            .collect();
        let r = fw.run_post_filter(&state, &incoming, &snap, &statuses);
        assert_eq!(r.nominated_node.as_deref(), Some("n2"));
        assert_eq!(victim_names(&r), vec!["batch"]);

        let pods = vec![guarded("a"), guarded("b"), pod("other", "1", 1, 1)];
        let mut allowing: PodDisruptionBudget = (*snap.pdbs()[0]).clone();
        allowing.status.as_mut().unwrap().disruptions_allowed = 1;
        let (violating, fine) = split_by_pdb_violation(pods, &[Arc::new(allowing)]);
        let names = |v: &[Arc<PodInfo>]| v.iter().map(|p| p.name().to_string()).collect::<Vec<_>>();
        assert_eq!(
            (names(&violating), names(&fine)),
            (
                vec!["b".to_string()],
                vec!["a".to_string(), "other".to_string()]
            )
        );
    }

    #[test]
    fn failure_messages_count_nodes_as_upstream() {
        let fw = framework();
        let incoming = pod("vip", "2", 100, 0);
        let r = preempt(
            &fw,
            &incoming,
            vec![
                node("small").cpu("1").info(&[pod("a", "1", 1, 1)]),
                node("busy").cpu("2").info(&[pod("peer", "2", 100, 1)]),
                node("cordoned").cpu("8").unschedulable().info(&[]),
            ],
        );
        assert_eq!(
            r.status.message(),
            "preemption: 0/3 nodes are available: 1 Insufficient cpu, 1 No preemption victims \
             found for incoming pod, 1 Preemption is not helpful for scheduling."
        );
        assert_eq!(r.nominated_node.as_deref(), Some(""));

        let never = PodBuilder::new("polite")
            .container("c", &[("cpu", "2")])
            .priority(100)
            .with_spec(|s| s.preemption_policy = Some("Never".into()))
            .info();
        let r = preempt(
            &fw,
            &never,
            vec![node("n1").cpu("2").info(&[pod("a", "2", 1, 1)])],
        );
        assert_eq!(
            r.status.message(),
            "preemption: not eligible due to preemptionPolicy=Never."
        );
    }

    #[test]
    fn a_pod_waits_while_its_earlier_victims_are_terminating() {
        let fw = framework();
        let mut incoming = (*pod("vip", "2", 100, 0).pod).clone();
        incoming
            .status
            .get_or_insert_with(Default::default)
            .nominated_node_name = Some("n1".into());
        let incoming = PodInfo::new(Arc::new(incoming));
        let mut going = (*pod("going", "2", 1, 1).pod).clone();
        going.metadata.deletion_timestamp = Some(
            k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff::Timestamp::UNIX_EPOCH),
        );
        let r = preempt(
            &fw,
            &incoming,
            vec![
                node("n1")
                    .cpu("2")
                    .info(&[Arc::new(PodInfo::new(Arc::new(going)))]),
            ],
        );
        assert_eq!(
            r.status.message(),
            "preemption: not eligible due to a terminating pod on the nominated node."
        );
    }

    #[test]
    fn pods_nominated_ahead_keep_their_room() {
        let fw = framework();
        let incoming = pod("vip", "2", 100, 0);
        let mut snap = snapshot(vec![node("n1").cpu("4").info(&[pod("low", "2", 1, 1)])]);
        // another pod of higher priority already waits for n1's other 2 cpus plus these
        let ahead = pod("first", "2", 200, 0);
        snap.set_nominated(Arc::new([("n1".to_string(), vec![ahead])].into()));
        let mut state = CycleState::default();
        fw.run_pre_filter(&mut state, &incoming, &snap);
        let n1 = snap.get("n1").unwrap().clone();
        let statuses: NodeStatuses = [(
            "n1".to_string(),
            fw.run_filters_with_nominated(
                &fw.active_filters(&state),
                &state,
                &incoming,
                &n1,
                snap.nominated("n1"),
            ),
        )]
        .into();
        assert!(
            !statuses["n1"].is_success(),
            "the nominated pod takes the free cpu"
        );
        let r = fw.run_post_filter(&state, &incoming, &snap, &statuses);
        assert_eq!(victim_names(&r), vec!["low"]);
    }

    #[test]
    fn args_are_validated_as_upstream() {
        let pl =
            DefaultPreemption::from_args(Some(&json!({"minCandidateNodesAbsolute": 3}))).unwrap();
        assert_eq!(pl.num_candidates(1000), 100);
        assert_eq!(pl.num_candidates(20), 3);
        assert_eq!(pl.num_candidates(2), 2);
        for (args, field) in [
            (
                json!({"minCandidateNodesPercentage": 101}),
                "minCandidateNodesPercentage",
            ),
            (
                json!({"minCandidateNodesAbsolute": -1}),
                "minCandidateNodesAbsolute",
            ),
            (
                json!({"minCandidateNodesPercentage": 0, "minCandidateNodesAbsolute": 0}),
                "minCandidateNodesPercentage",
            ),
        ] {
            let err = DefaultPreemption::from_args(Some(&args)).unwrap_err();
            assert!(err.starts_with(field), "{err}");
        }
    }
}
