//! A profile's plugins, run in order at each extension point (upstream's
//! `frameworkruntime.frameworkImpl`): the first rejection wins at PreFilter and Filter, Score
//! totals are each plugin's normalized score times its weight, Bind stops at the first plugin
//! that does not Skip.

use std::collections::BTreeSet;
use std::sync::Arc;

use super::events::ClusterEvent;
use super::interface::{
    CycleState, FilterRunner, NodeScore, NodeStatuses, Plugin, PostFilterResult, PreFilterResult,
};
use super::status::{Code, Status};
use super::types::{NodeInfo, PodInfo, Snapshot};
use super::waiting::{WaitingPod, WaitingPods};

/// Extension points a plugin runs at in a profile (upstream's per-point plugin lists), as
/// bits: a plugin enabled through `multiPoint` runs at every point it implements; the
/// configuration can take it out of one point or add a plugin to one point only.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Points(u16);

impl Points {
    pub const PRE_FILTER: Points = Points(1);
    pub const FILTER: Points = Points(1 << 1);
    pub const POST_FILTER: Points = Points(1 << 2);
    pub const PRE_SCORE: Points = Points(1 << 3);
    pub const SCORE: Points = Points(1 << 4);
    pub const RESERVE: Points = Points(1 << 5);
    pub const PERMIT: Points = Points(1 << 6);
    pub const PRE_BIND: Points = Points(1 << 7);
    pub const BIND: Points = Points(1 << 8);
    pub const POST_BIND: Points = Points(1 << 9);
    pub const PRE_ENQUEUE: Points = Points(1 << 10);
    pub const QUEUE_SORT: Points = Points(1 << 11);
    pub const ALL: Points = Points((1 << 12) - 1);
    pub const NONE: Points = Points(0);

    pub fn contains(self, other: Points) -> bool {
        self.0 & other.0 == other.0
    }

    pub fn with(self, other: Points) -> Points {
        Points(self.0 | other.0)
    }

    pub fn without(self, other: Points) -> Points {
        Points(self.0 & !other.0)
    }

    /// The points among `self` that `plugin` implements.
    pub fn implemented_by(self, plugin: &dyn Plugin) -> Points {
        let has = [
            (Points::PRE_ENQUEUE, plugin.as_pre_enqueue().is_some()),
            (Points::QUEUE_SORT, plugin.as_queue_sort().is_some()),
            (Points::PRE_FILTER, plugin.as_pre_filter().is_some()),
            (Points::FILTER, plugin.as_filter().is_some()),
            (Points::POST_FILTER, plugin.as_post_filter().is_some()),
            (Points::PRE_SCORE, plugin.as_pre_score().is_some()),
            (Points::SCORE, plugin.as_score().is_some()),
            (Points::RESERVE, plugin.as_reserve().is_some()),
            (Points::PERMIT, plugin.as_permit().is_some()),
            (Points::PRE_BIND, plugin.as_pre_bind().is_some()),
            (Points::BIND, plugin.as_bind().is_some()),
            (Points::POST_BIND, plugin.as_post_bind().is_some()),
        ];
        let implemented = has
            .iter()
            .filter(|(_, yes)| *yes)
            .fold(Points::NONE, |acc, (p, _)| acc.with(*p));
        Points(self.0 & implemented.0)
    }
}

/// One profile: a scheduler name and its plugins per extension point.
pub struct Framework {
    scheduler_name: String,
    plugins: Vec<Arc<dyn Plugin>>,
    /// Where each plugin of `plugins` runs.
    points: Vec<Points>,
    /// Score plugins (indexes into `plugins`) with their weights.
    scores: Vec<(usize, i64)>,
    /// Percentage of nodes to find feasible before scoring; 0 is upstream's adaptive rule.
    pub percentage_of_nodes_to_score: u32,
    /// How many nodes may be filtered at once (threads, at most one per core).
    pub parallelism: usize,
    /// Pods a Permit plugin asked to wait.
    waiting: Arc<WaitingPods>,
}

impl Framework {
    /// A profile from plugins in their run order, each at every point it implements, with
    /// Score weights (ignored for plugins without Score; a Score plugin's weight of 0 becomes
    /// 1, as upstream defaults it).
    pub fn new(scheduler_name: impl Into<String>, plugins: Vec<(Arc<dyn Plugin>, i64)>) -> Self {
        let plugins = plugins
            .into_iter()
            .map(|(p, w)| (p, w, Points::ALL))
            .collect();
        Framework::with_points(scheduler_name, plugins)
    }

    /// A profile from plugins in their run order, each at the points given (those it does not
    /// implement are ignored), with Score weights.
    pub fn with_points(
        scheduler_name: impl Into<String>,
        plugins: Vec<(Arc<dyn Plugin>, i64, Points)>,
    ) -> Self {
        let points: Vec<Points> = plugins
            .iter()
            .map(|(p, _, at)| at.implemented_by(p.as_ref()))
            .collect();
        let scores = plugins
            .iter()
            .enumerate()
            .filter(|(i, _)| points[*i].contains(Points::SCORE))
            .map(|(i, (_, w, _))| (i, (*w).max(1)))
            .collect();
        Framework {
            scheduler_name: scheduler_name.into(),
            plugins: plugins.into_iter().map(|(p, _, _)| p).collect(),
            points,
            scores,
            percentage_of_nodes_to_score: 0,
            parallelism: std::thread::available_parallelism().map_or(1, usize::from),
            waiting: Arc::default(),
        }
    }

    /// The plugins that run at `point`, in order.
    fn at(&self, point: Points) -> impl DoubleEndedIterator<Item = &Arc<dyn Plugin>> {
        self.plugins
            .iter()
            .zip(&self.points)
            .filter(move |(_, at)| at.contains(point))
            .map(|(p, _)| p)
    }

    /// Names of the plugins running at `point`, in order.
    pub fn plugins_at(&self, point: Points) -> Vec<&'static str> {
        self.at(point).map(|p| p.name()).collect()
    }

    pub fn scheduler_name(&self) -> &str {
        &self.scheduler_name
    }

    /// Names of the plugins, in run order.
    pub fn plugin_names(&self) -> Vec<&'static str> {
        self.plugins.iter().map(|p| p.name()).collect()
    }

    /// The events that may undo these plugins' rejections: the union of what each registered
    /// for, and every event when none is known (an unattributed failure).
    pub fn events_of<'a>(&self, plugins: impl IntoIterator<Item = &'a str>) -> ClusterEvent {
        let mut events = ClusterEvent::NONE;
        for name in plugins {
            events = match self.plugins.iter().find(|p| p.name() == name) {
                Some(p) => events.with(p.events()),
                None => ClusterEvent::ALL,
            };
        }
        if events.is_empty() {
            ClusterEvent::ALL
        } else {
            events
        }
    }

    /// PreEnqueue: the first plugin that does not answer Success keeps the pod out of activeQ;
    /// its status names it.
    pub fn run_pre_enqueue(&self, pod: &PodInfo) -> Status {
        for p in self.at(Points::PRE_ENQUEUE) {
            let Some(pe) = p.as_pre_enqueue() else {
                continue;
            };
            let s = pe.pre_enqueue(pod);
            if !s.is_success() {
                return s.with_plugin(p.name());
            }
        }
        Status::success()
    }

    /// The profile's QueueSort plugin (the first, when a hand-built profile has several; the
    /// configuration allows exactly one).
    pub fn queue_sort(&self) -> Option<Arc<dyn Plugin>> {
        self.at(Points::QUEUE_SORT).next().cloned()
    }

    pub fn has_post_filter(&self) -> bool {
        self.at(Points::POST_FILTER).next().is_some()
    }

    /// PreFilter: the first rejection or error stops the cycle; Skip marks the plugin's Filter
    /// to be skipped; node-name sets from several plugins are intersected.
    pub fn run_pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
    ) -> PreFilterResult {
        let mut nodes: Option<BTreeSet<String>> = None;
        for p in self.at(Points::PRE_FILTER) {
            let Some(pf) = p.as_pre_filter() else {
                continue;
            };
            let r = pf.pre_filter(state, pod, snapshot);
            if r.status.is_skip() {
                state.skip_filter_plugins.push(p.name());
                continue;
            }
            if !r.status.is_success() {
                return r.status.with_plugin(p.name()).into();
            }
            if let Some(names) = r.node_names {
                state.node_set_plugins.push(p.name());
                nodes = Some(match nodes {
                    None => names,
                    Some(prev) => prev.intersection(&names).cloned().collect(),
                });
            }
        }
        PreFilterResult {
            status: Status::success(),
            node_names: nodes,
        }
    }

    /// The Filter plugins to run this cycle (those PreFilter did not skip), worked out once
    /// rather than per node.
    pub fn active_filters(&self, state: &CycleState) -> Vec<usize> {
        (0..self.plugins.len())
            .filter(|&i| {
                self.points[i].contains(Points::FILTER)
                    && !state.skip_filter_plugins.contains(&self.plugins[i].name())
            })
            .collect()
    }

    /// Filter on one node with the plugins [`Framework::active_filters`] chose: the first
    /// that does not pass decides.
    pub fn run_filters(
        &self,
        active: &[usize],
        state: &CycleState,
        pod: &PodInfo,
        node: &NodeInfo,
    ) -> Status {
        for &i in active {
            let p = &self.plugins[i];
            let Some(f) = p.as_filter() else { continue };
            let s = f.filter(state, pod, node);
            if !s.is_success() {
                return s.with_plugin(p.name());
            }
        }
        Status::success()
    }

    /// Filter on one node, twice when pods of at least this pod's priority are nominated to
    /// it: once as if they were there, once as it is; the pod must fit both ways (upstream's
    /// `RunFilterPluginsWithNominatedPods`: the nominated pods may or may not arrive).
    pub fn run_filters_with_nominated(
        &self,
        active: &[usize],
        state: &CycleState,
        pod: &PodInfo,
        node: &NodeInfo,
        nominated: &[Arc<PodInfo>],
    ) -> Status {
        let mut ahead = nominated
            .iter()
            .filter(|p| p.key != pod.key && p.priority() >= pod.priority())
            .peekable();
        if ahead.peek().is_some() {
            let mut state_with = state.clone();
            let mut node_with = node.clone();
            for p in ahead {
                node_with.add_pod(p.clone());
                self.add_pod_to_state(&mut state_with, pod, p, &node_with);
            }
            let s = self.run_filters(active, &state_with, pod, &node_with);
            if !s.is_success() {
                return s;
            }
        }
        self.run_filters(active, state, pod, node)
    }

    /// Filter on one node: the first plugin that does not pass decides.
    pub fn run_filter(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        self.run_filters(&self.active_filters(state), state, pod, node)
    }

    /// PostFilter (preemption): the first plugin that succeeds or fails hard decides.
    pub fn run_post_filter(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
        statuses: &NodeStatuses,
    ) -> PostFilterResult {
        let mut last = PostFilterResult {
            status: Status::unschedulable("no PostFilter plugin"),
            nominated_node: None,
            victims: Vec::new(),
        };
        for p in self.at(Points::POST_FILTER) {
            let Some(pf) = p.as_post_filter() else {
                continue;
            };
            let r = pf.post_filter(state, pod, snapshot, statuses, self);
            if r.status.is_success() || r.status.code() == Code::Error {
                return r;
            }
            last = r;
        }
        last
    }

    pub fn run_pre_score(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        nodes: &[Arc<NodeInfo>],
        snapshot: &Snapshot,
    ) -> Status {
        for p in self.at(Points::PRE_SCORE) {
            let Some(ps) = p.as_pre_score() else {
                continue;
            };
            let s = ps.pre_score(state, pod, nodes, snapshot);
            if s.is_skip() {
                state.skip_score_plugins.push(p.name());
            } else if !s.is_success() {
                return s.with_plugin(p.name());
            }
        }
        Status::success()
    }

    /// Score: each plugin scores every node and normalizes; totals are weighted sums, in the
    /// order of `nodes`.
    pub fn run_score(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        nodes: &[Arc<NodeInfo>],
    ) -> Result<Vec<NodeScore>, Status> {
        // one buffer of per-plugin scores, reused by every plugin; weighted sums beside it
        let mut scores: Vec<NodeScore> = nodes
            .iter()
            .map(|n| NodeScore {
                name: n.name().to_string(),
                score: 0,
            })
            .collect();
        let mut totals = vec![0i64; nodes.len()];
        for (i, weight) in &self.scores {
            let p = &self.plugins[*i];
            if state.skip_score_plugins.contains(&p.name()) {
                continue;
            }
            let Some(sp) = p.as_score() else { continue };
            for (slot, n) in scores.iter_mut().zip(nodes) {
                slot.score = sp
                    .score(state, pod, n)
                    .map_err(|s| s.with_plugin(p.name()))?;
            }
            let s = sp.normalize(state, pod, &mut scores);
            if !s.is_success() {
                return Err(s.with_plugin(p.name()));
            }
            for (total, s) in totals.iter_mut().zip(&scores) {
                *total += s.score * weight;
            }
        }
        for (slot, total) in scores.iter_mut().zip(totals) {
            slot.score = total;
        }
        Ok(scores)
    }

    /// Reserve in order; on a failure the plugins reserved so far (and the failing one) are
    /// unreserved in reverse, as upstream.
    pub fn run_reserve(&self, state: &mut CycleState, pod: &PodInfo, node: &str) -> Status {
        for p in self.at(Points::RESERVE) {
            let Some(r) = p.as_reserve() else { continue };
            let s = r.reserve(state, pod, node);
            if !s.is_success() {
                self.run_unreserve(state, pod, node);
                return s.with_plugin(p.name());
            }
        }
        Status::success()
    }

    pub fn run_unreserve(&self, state: &mut CycleState, pod: &PodInfo, node: &str) {
        for p in self.at(Points::RESERVE).rev() {
            if let Some(r) = p.as_reserve() {
                r.unreserve(state, pod, node);
            }
        }
    }

    /// Permit: a rejection wins; plugins that ask to Wait put the pod among the waiting pods
    /// (the binding cycle then waits in [`Framework::wait_on_permit`]).
    pub fn run_permit(&self, state: &CycleState, pod: &PodInfo, node: &str) -> Status {
        let mut waits = Vec::new();
        for p in self.at(Points::PERMIT) {
            let Some(pm) = p.as_permit() else { continue };
            let (s, timeout) = pm.permit(state, pod, node);
            match s.code() {
                Code::Success => {}
                Code::Wait => waits.push((p.name(), timeout)),
                _ => return s.with_plugin(p.name()),
            }
        }
        if waits.is_empty() {
            return Status::success();
        }
        self.waiting.insert(Arc::new(WaitingPod::new(
            pod.uid().to_string(),
            pod.key.clone(),
            node.to_string(),
            waits,
        )));
        Status::new(Code::Wait, Vec::new())
    }

    /// The binding cycle's first step: waits until the pod's waiting Permit plugins allow it
    /// (at once when none asked it to wait).
    pub async fn wait_on_permit(&self, pod: &PodInfo) -> Status {
        let Some(waiting) = self.waiting.get(pod.uid()) else {
            return Status::success();
        };
        let status = waiting.wait().await;
        self.waiting.remove(pod.uid());
        status
    }

    /// Pods waiting at Permit, for plugins to allow or reject.
    pub fn waiting_pods(&self) -> &Arc<WaitingPods> {
        &self.waiting
    }

    pub async fn run_pre_bind(&self, state: &CycleState, pod: &PodInfo, node: &str) -> Status {
        for p in self.at(Points::PRE_BIND) {
            if let Some(pb) = p.as_pre_bind() {
                let s = pb.pre_bind(state, pod, node).await;
                if !s.is_success() {
                    return s.with_plugin(p.name());
                }
            }
        }
        Status::success()
    }

    /// Bind: the first plugin that does not Skip binds (or fails).
    pub async fn run_bind(&self, state: &CycleState, pod: &PodInfo, node: &str) -> Status {
        for p in self.at(Points::BIND) {
            if let Some(b) = p.as_bind() {
                let s = b.bind(state, pod, node).await;
                if !s.is_skip() {
                    return s.with_plugin(p.name());
                }
            }
        }
        Status::error("no Bind plugin bound the pod")
    }

    pub fn run_post_bind(&self, state: &CycleState, pod: &PodInfo, node: &str) {
        for p in self.at(Points::POST_BIND) {
            if let Some(pb) = p.as_post_bind() {
                pb.post_bind(state, pod, node);
            }
        }
    }
}

impl FilterRunner for Framework {
    fn filter_with(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        node: &NodeInfo,
        nominated: &[Arc<PodInfo>],
    ) -> Status {
        self.run_filters_with_nominated(&self.active_filters(state), state, pod, node, nominated)
    }

    fn remove_pod_from_state(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        other: &PodInfo,
        node: &NodeInfo,
    ) {
        for p in self.at(Points::PRE_FILTER) {
            if let Some(pf) = p.as_pre_filter() {
                pf.remove_pod(state, pod, other, node);
            }
        }
    }

    fn add_pod_to_state(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        other: &PodInfo,
        node: &NodeInfo,
    ) {
        for p in self.at(Points::PRE_FILTER) {
            if let Some(pf) = p.as_pre_filter() {
                pf.add_pod(state, pod, other, node);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::interface::{FilterPlugin, PreFilterPlugin, ScorePlugin};
    use crate::framework::testing::{PodBuilder, node, snapshot};

    /// A plugin whose Filter rejects the nodes it is told to and whose Score is fixed per node.
    struct Fake {
        name: &'static str,
        reject: Vec<&'static str>,
        scores: Vec<(&'static str, i64)>,
        only: Option<Vec<&'static str>>,
    }

    impl Plugin for Fake {
        fn name(&self) -> &'static str {
            self.name
        }
        fn as_pre_filter(&self) -> Option<&dyn PreFilterPlugin> {
            Some(self)
        }
        fn as_filter(&self) -> Option<&dyn FilterPlugin> {
            Some(self)
        }
        fn as_score(&self) -> Option<&dyn ScorePlugin> {
            (!self.scores.is_empty()).then_some(self as &dyn ScorePlugin)
        }
    }

    impl PreFilterPlugin for Fake {
        fn pre_filter(&self, _: &mut CycleState, _: &PodInfo, _: &Snapshot) -> PreFilterResult {
            PreFilterResult {
                status: Status::success(),
                node_names: self
                    .only
                    .as_ref()
                    .map(|o| o.iter().map(|s| s.to_string()).collect()),
            }
        }
    }

    impl FilterPlugin for Fake {
        fn filter(&self, _: &CycleState, _: &PodInfo, node: &NodeInfo) -> Status {
            if self.reject.contains(&node.name()) {
                Status::unschedulable(format!("{} says no", self.name))
            } else {
                Status::success()
            }
        }
    }

    impl ScorePlugin for Fake {
        fn score(&self, _: &CycleState, _: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
            Ok(self
                .scores
                .iter()
                .find(|(n, _)| *n == node.name())
                .map_or(0, |(_, s)| *s))
        }
    }

    fn fake(name: &'static str) -> Fake {
        Fake {
            name,
            reject: Vec::new(),
            scores: Vec::new(),
            only: None,
        }
    }

    #[test]
    fn the_first_filter_that_rejects_is_named_in_the_status() {
        let a = Fake {
            reject: vec!["n1"],
            ..fake("A")
        };
        let b = Fake {
            reject: vec!["n1", "n2"],
            ..fake("B")
        };
        let fw = Framework::new(
            "default-scheduler",
            vec![(Arc::new(a), 0), (Arc::new(b), 0)],
        );
        let pod = PodBuilder::new("p").info();
        let state = CycleState::default();
        let s1 = fw.run_filter(&state, &pod, &node("n1").info(&[]));
        assert_eq!((s1.plugin(), s1.message().as_str()), ("A", "A says no"));
        let s2 = fw.run_filter(&state, &pod, &node("n2").info(&[]));
        assert_eq!(s2.plugin(), "B");
        assert!(
            fw.run_filter(&state, &pod, &node("n3").info(&[]))
                .is_success()
        );
    }

    #[test]
    fn scores_are_weighted_and_summed_per_node() {
        let a = Fake {
            scores: vec![("n1", 10), ("n2", 50)],
            ..fake("A")
        };
        let b = Fake {
            scores: vec![("n1", 40), ("n2", 0)],
            ..fake("B")
        };
        let fw = Framework::new(
            "default-scheduler",
            vec![(Arc::new(a), 1), (Arc::new(b), 2)],
        );
        let nodes = snapshot(vec![node("n1").info(&[]), node("n2").info(&[])]);
        let totals = fw
            .run_score(
                &CycleState::default(),
                &PodBuilder::new("p").info(),
                nodes.nodes(),
            )
            .unwrap();
        assert_eq!(
            totals[0],
            NodeScore {
                name: "n1".into(),
                score: 10 + 80
            }
        );
        assert_eq!(
            totals[1],
            NodeScore {
                name: "n2".into(),
                score: 50
            }
        );
    }

    #[test]
    fn pre_filter_node_sets_are_intersected() {
        let a = Fake {
            only: Some(vec!["n1", "n2"]),
            ..fake("A")
        };
        let b = Fake {
            only: Some(vec!["n2", "n3"]),
            ..fake("B")
        };
        let fw = Framework::new(
            "default-scheduler",
            vec![(Arc::new(a), 0), (Arc::new(b), 0)],
        );
        let r = fw.run_pre_filter(
            &mut CycleState::default(),
            &PodBuilder::new("p").info(),
            &Snapshot::default(),
        );
        assert_eq!(r.node_names, Some(["n2".to_string()].into()));
    }
}
