//! Picking a node for one pod (upstream's `schedulePod`): PreFilter, Filter over enough nodes
//! (upstream's adaptive `percentageOfNodesToScore`, starting where the last cycle stopped),
//! PostFilter when none fits, then PreScore, Score, and the best node (ties broken at random).
//! No I/O: the caller assumes, binds and reports.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::framework::{
    Code, CycleState, Framework, NodeInfo, NodeStatuses, PodInfo, Snapshot, Status,
};

/// Below this many nodes every node is filtered (upstream's `minFeasibleNodesToFind`).
const MIN_FEASIBLE_NODES_TO_FIND: usize = 100;
/// The adaptive percentage never goes below this (upstream's
/// `minFeasibleNodesPercentageToFind`).
const MIN_FEASIBLE_NODES_PERCENTAGE: usize = 5;

/// Upstream's `ErrNoNodesAvailable`.
pub const NO_NODES_AVAILABLE: &str = "no nodes available to schedule pods";

/// How many feasible nodes to find before scoring (upstream's `numFeasibleNodesToFind`):
/// all of them below 100 nodes; otherwise `percentage` of them (0: 50% minus 1% per 125
/// nodes, at least 5%), and never fewer than 100.
pub fn num_feasible_nodes_to_find(percentage: u32, all: usize) -> usize {
    if all < MIN_FEASIBLE_NODES_TO_FIND {
        return all;
    }
    let mut p = percentage as usize;
    if p == 0 {
        p = 50usize
            .saturating_sub(all / 125)
            .max(MIN_FEASIBLE_NODES_PERCENTAGE);
    }
    (all * p.min(100) / 100).max(MIN_FEASIBLE_NODES_TO_FIND)
}

/// Nodes one filtering task takes at a time (upstream's parallelizer takes chunks too).
const FILTER_CHUNK: usize = 32;

/// The threads that help the scheduling thread filter, one per core but one (None on one
/// core, or if they could not be started: then one thread filters).
fn filter_pool() -> Option<&'static rayon::ThreadPool> {
    static POOL: std::sync::OnceLock<Option<rayon::ThreadPool>> = std::sync::OnceLock::new();
    let pool = POOL.get_or_init(|| {
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        if cores < 2 {
            return None;
        }
        rayon::ThreadPoolBuilder::new()
            .num_threads(cores - 1)
            .thread_name(|i| format!("filter-{i}"))
            .build()
            .inspect_err(|e| tracing::warn!("filtering on one thread: {e}"))
            .ok()
    });
    pool.as_ref()
}

/// Runs `filter` on positions `0..all` on up to `parallelism` cores until `want` of them
/// succeed, and returns the outcomes of a prefix `0..k` that holds `want` successes or is
/// everything (upstream's parallel `findNodesThatPassFilters`). Tasks claim whole chunks in
/// order and claim no more once enough fit, so the prefix has no gaps and the result is what
/// filtering one node after another would give; at most a chunk per task is filtered in vain.
fn filter_until<F>(all: usize, want: usize, parallelism: usize, filter: F) -> Vec<Status>
where
    F: Fn(usize) -> Status + Sync,
{
    let pool = filter_pool();
    // the pool's helpers and this thread: one per core (read once, not per cycle)
    let cores = pool.map_or(1, |p| p.current_num_threads() + 1);
    let tasks = cores.min(parallelism).min(all.div_ceil(FILTER_CHUNK));
    let Some(pool) = pool.filter(|_| tasks > 1) else {
        let mut out = Vec::new();
        let mut fit = 0;
        for i in 0..all {
            if fit >= want {
                break;
            }
            let s = filter(i);
            fit += usize::from(s.is_success());
            out.push(s);
        }
        return out;
    };
    let next_chunk = AtomicUsize::new(0);
    let fit = AtomicUsize::new(0);
    let run = || {
        let mut done = Vec::new();
        loop {
            if fit.load(Ordering::Acquire) >= want {
                break;
            }
            let chunk = next_chunk.fetch_add(1, Ordering::AcqRel);
            let from = chunk * FILTER_CHUNK;
            if from >= all {
                break;
            }
            let statuses: Vec<Status> = (from..(from + FILTER_CHUNK).min(all))
                .map(&filter)
                .collect();
            let n = statuses.iter().filter(|s| s.is_success()).count();
            fit.fetch_add(n, Ordering::AcqRel);
            done.push((chunk, statuses));
        }
        done
    };
    // the helpers run on a pool kept for the process: a thread per cycle costs more than
    // filtering a few hundred nodes
    let helped = parking_lot::Mutex::new(Vec::new());
    let mut chunks = pool.in_place_scope(|scope| {
        for _ in 1..tasks {
            scope.spawn(|_| {
                let done = run();
                helped.lock().extend(done);
            });
        }
        run()
    });
    chunks.extend(helped.into_inner());
    chunks.sort_unstable_by_key(|(chunk, _)| *chunk);
    chunks
        .into_iter()
        .flat_map(|(_, statuses)| statuses)
        .collect()
}

/// No node fits: what each node said, for the `FailedScheduling` message (upstream's
/// `FitError`).
#[derive(Debug, Clone)]
pub struct FitError {
    pub num_all_nodes: usize,
    /// Set when PreFilter rejected the pod outright.
    pub pre_filter_msg: Option<String>,
    pub statuses: NodeStatuses,
    /// What preemption said, if it ran.
    pub post_filter_msg: Option<String>,
    /// What preemption decided about the pod's nomination: `Some(node)` to nominate it
    /// there, `Some("")` to clear an earlier one, `None` to leave it.
    pub nominated_node: Option<String>,
    /// The pods to evict from the nominated node, most important first.
    pub victims: Vec<Arc<PodInfo>>,
}

impl FitError {
    /// The plugins that rejected the pod on some node (PreFilter or Filter).
    pub fn rejecting_plugins(&self) -> BTreeSet<&'static str> {
        self.statuses
            .values()
            .filter(|s| s.is_rejected())
            .map(|s| s.plugin())
            .collect()
    }
}

impl fmt::Display for FitError {
    /// `0/5 nodes are available: 3 Insufficient cpu, 2 node(s) had untolerated taint {a: b}.`
    /// with the reasons counted over nodes and sorted as strings, as upstream.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "0/{} nodes are available:", self.num_all_nodes)?;
        match &self.pre_filter_msg {
            Some(msg) => write!(f, " {msg}.")?,
            None => {
                let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
                for status in self.statuses.values() {
                    for reason in status.reasons() {
                        *counts.entry(reason).or_default() += 1;
                    }
                }
                let mut reasons: Vec<String> =
                    counts.iter().map(|(r, n)| format!("{n} {r}")).collect();
                reasons.sort();
                if !reasons.is_empty() {
                    write!(f, " {}.", reasons.join(", "))?;
                }
            }
        }
        if let Some(msg) = &self.post_filter_msg {
            write!(f, " {msg}.")?;
        }
        Ok(())
    }
}

/// Why a pod got no node.
#[derive(Debug, Clone)]
pub enum ScheduleError {
    /// The cluster has no nodes.
    NoNodes,
    /// Nodes exist but none fits.
    Fit(Box<FitError>),
    /// A plugin failed (not the pod's fault); retried with backoff.
    Plugin(Status),
}

impl fmt::Display for ScheduleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ScheduleError::NoNodes => f.write_str(NO_NODES_AVAILABLE),
            ScheduleError::Fit(e) => e.fmt(f),
            ScheduleError::Plugin(s) => {
                write!(
                    f,
                    "running {:?} plugin {:?}: {}",
                    s.code(),
                    s.plugin(),
                    s.message()
                )
            }
        }
    }
}

/// The chosen node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScheduleResult {
    pub node: String,
    /// Nodes filtered.
    pub evaluated: usize,
    /// Of those, nodes that fit.
    pub feasible: usize,
}

/// What a Filter pass found.
struct Feasible {
    /// Nodes that fit.
    nodes: Vec<Arc<NodeInfo>>,
    /// Why each other node does not.
    statuses: NodeStatuses,
    /// Nodes filtered.
    evaluated: usize,
}

/// PostFilter (preemption) when no node fits: its message joins the pod's, and its
/// nomination and victims go to the caller.
fn post_filter(
    fw: &Framework,
    state: &CycleState,
    pod: &PodInfo,
    snapshot: &Snapshot,
    fit: &mut FitError,
) {
    if !fw.has_post_filter() {
        return;
    }
    let r = fw.run_post_filter(state, pod, snapshot, &fit.statuses);
    if !r.status.reasons().is_empty() {
        fit.post_filter_msg = Some(r.status.message());
    }
    fit.nominated_node = r.nominated_node;
    fit.victims = r.victims;
}

/// Per-profile state kept across cycles.
#[derive(Debug)]
pub struct Algorithm {
    /// Where the next Filter pass starts, so nodes are visited round robin.
    next_start: usize,
    /// xorshift state for breaking score ties.
    rng: u64,
}

impl Algorithm {
    pub fn new(seed: u64) -> Algorithm {
        Algorithm {
            next_start: 0,
            rng: seed | 1,
        }
    }

    fn random(&mut self) -> u64 {
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        self.rng
    }

    pub fn schedule(
        &mut self,
        fw: &Framework,
        state: &mut CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
    ) -> Result<ScheduleResult, ScheduleError> {
        if snapshot.is_empty() {
            return Err(ScheduleError::NoNodes);
        }
        let found = match self.find_feasible(fw, state, pod, snapshot) {
            Ok(found) => found,
            Err(ScheduleError::Fit(mut fit)) => {
                post_filter(fw, state, pod, snapshot, &mut fit);
                return Err(ScheduleError::Fit(fit));
            }
            Err(e) => return Err(e),
        };
        let Feasible {
            nodes: feasible,
            statuses,
            evaluated,
        } = found;
        if feasible.is_empty() {
            let mut fit = FitError {
                num_all_nodes: snapshot.len(),
                pre_filter_msg: None,
                statuses,
                post_filter_msg: None,
                nominated_node: None,
                victims: Vec::new(),
            };
            post_filter(fw, state, pod, snapshot, &mut fit);
            return Err(ScheduleError::Fit(Box::new(fit)));
        }
        if feasible.len() == 1 {
            return Ok(ScheduleResult {
                node: feasible[0].name().to_string(),
                evaluated,
                feasible: 1,
            });
        }
        let s = fw.run_pre_score(state, pod, &feasible, snapshot);
        if !s.is_success() {
            return Err(ScheduleError::Plugin(s));
        }
        let scores = fw
            .run_score(state, pod, &feasible)
            .map_err(ScheduleError::Plugin)?;
        // the best score wins; among equals each is picked with equal chance (reservoir)
        let mut best = 0;
        let mut ties = 1u64;
        for i in 1..scores.len() {
            if scores[i].score > scores[best].score {
                best = i;
                ties = 1;
            } else if scores[i].score == scores[best].score {
                ties += 1;
                if self.random().is_multiple_of(ties) {
                    best = i;
                }
            }
        }
        Ok(ScheduleResult {
            node: scores[best].name.clone(),
            evaluated,
            feasible: feasible.len(),
        })
    }

    /// PreFilter, then Filter from `next_start` until enough nodes fit.
    fn find_feasible(
        &mut self,
        fw: &Framework,
        state: &mut CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
    ) -> Result<Feasible, ScheduleError> {
        let pre = fw.run_pre_filter(state, pod, snapshot);
        let mut statuses = NodeStatuses::new();
        if !pre.status.is_success() {
            if pre.status.code() == Code::Error {
                return Err(ScheduleError::Plugin(pre.status));
            }
            return Err(ScheduleError::Fit(Box::new(FitError {
                num_all_nodes: snapshot.len(),
                pre_filter_msg: Some(pre.status.message()),
                statuses: snapshot
                    .nodes()
                    .iter()
                    .map(|n| (n.name().to_string(), pre.status.clone()))
                    .collect(),
                post_filter_msg: None,
                nominated_node: None,
                victims: Vec::new(),
            })));
        }
        let candidates: Vec<Arc<NodeInfo>> = match &pre.node_names {
            Some(names) => {
                // upstream names the plugins that narrowed the nodes, sorted
                let mut narrowing = state.node_set_plugins.clone();
                narrowing.sort_unstable();
                let absent = Status::unresolvable(format!(
                    "node(s) didn't satisfy plugin(s) [{}]",
                    narrowing.join(" ")
                ));
                for n in snapshot.nodes() {
                    if !names.contains(n.name()) {
                        statuses.insert(n.name().to_string(), absent.clone());
                    }
                }
                names
                    .iter()
                    .filter_map(|n| snapshot.get(n).cloned())
                    .collect()
            }
            None => snapshot.nodes().to_vec(),
        };
        let all = candidates.len();
        let want = num_feasible_nodes_to_find(fw.percentage_of_nodes_to_score, all);
        let start = if pre.node_names.is_some() || all == 0 {
            0
        } else {
            self.next_start % all
        };
        let filters = fw.active_filters(state);
        // a pod nominated by an earlier preemption tries its node first (upstream's
        // `evaluateNominatedNode`)
        let nominated = pod
            .pod
            .status
            .as_ref()
            .and_then(|s| s.nominated_node_name.as_deref())
            .filter(|n| {
                pre.node_names
                    .as_ref()
                    .is_none_or(|names| names.contains(*n))
            })
            .and_then(|n| snapshot.get(n));
        let state = &*state;
        let filter = |node: &NodeInfo| {
            fw.run_filters_with_nominated(
                &filters,
                state,
                pod,
                node,
                snapshot.nominated(node.name()),
            )
        };
        if let Some(node) = nominated
            && filter(node).is_success()
        {
            return Ok(Feasible {
                nodes: vec![node.clone()],
                statuses,
                evaluated: 1,
            });
        }
        let mut feasible = Vec::new();
        let mut evaluated = 0;
        let outcomes = filter_until(all, want, fw.parallelism, |i| {
            filter(&candidates[(start + i) % all])
        });
        for (i, s) in outcomes.into_iter().enumerate() {
            if feasible.len() >= want {
                break;
            }
            let node = &candidates[(start + i) % all];
            evaluated += 1;
            if s.is_success() {
                feasible.push(node.clone());
            } else if s.code() == Code::Error {
                return Err(ScheduleError::Plugin(s));
            } else {
                statuses.insert(node.name().to_string(), s);
            }
        }
        if pre.node_names.is_none() && all > 0 {
            self.next_start = (start + evaluated) % all;
        }
        Ok(Feasible {
            nodes: feasible,
            statuses,
            evaluated,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::testing::{PodBuilder, node, snapshot};
    use crate::plugins::node_unschedulable::NodeUnschedulable;

    #[test]
    fn parallel_filtering_gives_what_filtering_one_node_after_another_gives() {
        let fits = |i: usize| {
            if i.is_multiple_of(3) {
                Status::success()
            } else {
                Status::unschedulable(format!("node {i}"))
            }
        };
        for (all, want) in [(1000, 100), (1000, 400), (1000, 1000), (50, 10), (97, 500)] {
            let got = filter_until(all, want, 2, fits);
            // the shortest prefix holding `want` fitting nodes, or every node
            let len = (0..all)
                .filter(|i| i.is_multiple_of(3))
                .nth(want - 1)
                .map_or(all, |i| i + 1);
            assert!(got.len() >= len, "{all}/{want}: {} < {len}", got.len());
            for (i, s) in got.iter().enumerate() {
                assert_eq!(
                    s.is_success(),
                    i.is_multiple_of(3),
                    "{all}/{want}: node {i}"
                );
                if !s.is_success() {
                    assert_eq!(s.message(), format!("node {i}"));
                }
            }
        }
    }

    #[test]
    fn the_adaptive_percentage_matches_upstream() {
        assert_eq!(num_feasible_nodes_to_find(0, 50), 50);
        assert_eq!(num_feasible_nodes_to_find(0, 100), 100);
        // 50 - 1000/125 = 42%
        assert_eq!(num_feasible_nodes_to_find(0, 1000), 420);
        // 50 - 5000/125 = 10%
        assert_eq!(num_feasible_nodes_to_find(0, 5000), 500);
        // floor of 5%
        assert_eq!(num_feasible_nodes_to_find(0, 10_000), 500);
        // never fewer than 100
        assert_eq!(num_feasible_nodes_to_find(1, 1000), 100);
        assert_eq!(num_feasible_nodes_to_find(100, 1000), 1000);
    }

    #[test]
    fn the_fit_error_counts_reasons_over_nodes_sorted_as_upstream() {
        let statuses: NodeStatuses = [
            ("n1", "Insufficient cpu"),
            ("n2", "Insufficient cpu"),
            ("n3", "Insufficient cpu"),
            ("n4", "node(s) had untolerated taint {dedicated: gpu}"),
            ("n5", "node(s) had untolerated taint {dedicated: gpu}"),
        ]
        .into_iter()
        .map(|(n, r)| (n.to_string(), Status::unschedulable(r)))
        .collect();
        let e = FitError {
            num_all_nodes: 5,
            pre_filter_msg: None,
            statuses,
            post_filter_msg: Some(
                "preemption: 0/5 nodes are available: 5 Preemption is not helpful for scheduling."
                    .into(),
            ),
            nominated_node: None,
            victims: Vec::new(),
        };
        // upstream ends the preemption part with a second period
        assert_eq!(
            e.to_string(),
            "0/5 nodes are available: 2 node(s) had untolerated taint {dedicated: gpu}, \
             3 Insufficient cpu. preemption: 0/5 nodes are available: 5 Preemption is not \
             helpful for scheduling.."
        );
    }

    #[test]
    fn an_unschedulable_pod_gets_every_nodes_reason_and_a_fitting_one_gets_a_node() {
        let fw = Framework::new("default-scheduler", vec![(Arc::new(NodeUnschedulable), 0)]);
        let mut alg = Algorithm::new(7);
        let pod = PodBuilder::new("p").info();
        let all_cordoned = snapshot(vec![
            node("n1").unschedulable().info(&[]),
            node("n2").unschedulable().info(&[]),
        ]);
        let err = alg
            .schedule(&fw, &mut CycleState::default(), &pod, &all_cordoned)
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "0/2 nodes are available: 2 node(s) were unschedulable."
        );
        let one_open = snapshot(vec![
            node("n1").unschedulable().info(&[]),
            node("n2").info(&[]),
        ]);
        let r = alg
            .schedule(&fw, &mut CycleState::default(), &pod, &one_open)
            .unwrap();
        assert_eq!((r.node.as_str(), r.evaluated, r.feasible), ("n2", 2, 1));
        assert!(matches!(
            alg.schedule(&fw, &mut CycleState::default(), &pod, &Snapshot::default()),
            Err(ScheduleError::NoNodes)
        ));
    }

    #[test]
    fn nodes_a_pre_filter_left_out_name_the_plugins_that_narrowed_them() {
        use crate::plugins::node_affinity::NodeAffinity;
        let fw = Framework::new(
            "default-scheduler",
            vec![
                (Arc::new(NodeUnschedulable), 0),
                (Arc::new(NodeAffinity::default()), 0),
            ],
        );
        let affinity = serde_json::from_value(serde_json::json!({"nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchFields": [{"key": "metadata.name", "operator": "In",
                                  "values": ["n1"]}]}]}}}))
        .unwrap();
        let pod = PodBuilder::new("p").affinity(affinity).info();
        let nodes = snapshot(vec![
            node("n1").unschedulable().info(&[]),
            node("n2").info(&[]),
        ]);
        let err = Algorithm::new(1)
            .schedule(&fw, &mut CycleState::default(), &pod, &nodes)
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "0/2 nodes are available: 1 node(s) didn't satisfy plugin(s) [NodeAffinity], \
             1 node(s) were unschedulable."
        );
    }

    #[test]
    fn ties_are_broken_among_all_equal_nodes() {
        let fw = Framework::new("default-scheduler", vec![]);
        let mut alg = Algorithm::new(42);
        let nodes = snapshot((0..4).map(|i| node(&format!("n{i}")).info(&[])).collect());
        let pod = PodBuilder::new("p").info();
        let mut picked = std::collections::BTreeSet::new();
        for _ in 0..200 {
            let r = alg
                .schedule(&fw, &mut CycleState::default(), &pod, &nodes)
                .unwrap();
            picked.insert(r.node);
        }
        assert_eq!(picked.len(), 4, "{picked:?}");
    }
}
