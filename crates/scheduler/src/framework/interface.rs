//! The extension points (upstream's `framework/interface.go`): one trait per point, and
//! [`Plugin`], through which the framework asks a plugin which points it implements.
//!
//! Two points belong to the queue: PreEnqueue decides whether a pod may enter activeQ at all
//! (a gated pod waits among the unschedulable pods until an update lets it in), QueueSort
//! orders activeQ.
//!
//! A scheduling cycle runs, for one pod: PreFilter (once) → Filter (per node) → PostFilter
//! (only when no node fits: preemption) → PreScore (once) → Score (per feasible node, then
//! NormalizeScore per plugin) → Reserve → Permit; the binding cycle then runs, concurrently
//! with the next pod's scheduling cycle: PreBind → Bind → PostBind. Unreserve undoes Reserve
//! when anything after it fails.

use std::any::Any;
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tokio::time::Instant;

use super::events::ClusterEvent;
use super::status::Status;
use super::types::{NodeInfo, PodInfo, Snapshot};

/// The highest score a Score plugin may give after normalizing (upstream's `MaxNodeScore`).
pub const MAX_NODE_SCORE: i64 = 100;
/// The lowest (upstream's `MinNodeScore`).
pub const MIN_NODE_SCORE: i64 = 0;

/// What a plugin keeps in the cycle state: any cloneable value (preemption clones the state to
/// try each node).
pub trait StateData: Any + Send + Sync {
    fn clone_box(&self) -> Box<dyn StateData>;
    fn as_any(&self) -> &dyn Any;
    fn as_any_mut(&mut self) -> &mut dyn Any;
}

impl<T: Any + Clone + Send + Sync> StateData for T {
    fn clone_box(&self) -> Box<dyn StateData> {
        Box::new(self.clone())
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}

/// Data plugins keep for one pod's scheduling cycle, keyed by plugin-chosen names (upstream's
/// `CycleState`), and which plugins PreFilter/PreScore told the framework to skip. A handful
/// of entries, read once per node per plugin: a vector searched by key beats hashing.
#[derive(Default)]
pub struct CycleState {
    data: Vec<(&'static str, Box<dyn StateData>)>,
    pub skip_filter_plugins: Vec<&'static str>,
    pub skip_score_plugins: Vec<&'static str>,
    /// The plugins whose PreFilter named the only nodes worth filtering, for the message of
    /// the nodes left out.
    pub node_set_plugins: Vec<&'static str>,
    /// How long the pod waited in the scheduling queue before this attempt popped it (from when
    /// it entered the queue, so gated time and backoff after earlier attempts included); set by
    /// the scheduling loop, `None` outside it. The DefaultBinder writes it on the Binding.
    pub queue_wait: Option<Duration>,
}

impl Clone for CycleState {
    fn clone(&self) -> Self {
        CycleState {
            data: self
                .data
                .iter()
                .map(|(k, v)| (*k, v.as_ref().clone_box()))
                .collect(),
            skip_filter_plugins: self.skip_filter_plugins.clone(),
            skip_score_plugins: self.skip_score_plugins.clone(),
            node_set_plugins: self.node_set_plugins.clone(),
            queue_wait: self.queue_wait,
        }
    }
}

impl CycleState {
    fn position(&self, key: &str) -> Option<usize> {
        self.data
            .iter()
            .position(|(k, _)| std::ptr::eq(*k, key) || *k == key)
    }

    pub fn write<T: StateData>(&mut self, key: &'static str, value: T) {
        match self.position(key) {
            Some(i) => self.data[i].1 = Box::new(value),
            None => self.data.push((key, Box::new(value))),
        }
    }

    pub fn read<T: Any>(&self, key: &'static str) -> Option<&T> {
        let i = self.position(key)?;
        self.data[i].1.as_ref().as_any().downcast_ref()
    }

    pub fn read_mut<T: Any>(&mut self, key: &'static str) -> Option<&mut T> {
        let i = self.position(key)?;
        self.data[i].1.as_mut().as_any_mut().downcast_mut()
    }
}

/// A plugin; each `as_…` returns itself where the plugin implements that extension point.
pub trait Plugin: Send + Sync {
    /// Upstream's plugin name (`NodeResourcesFit`), used in configuration and messages.
    fn name(&self) -> &'static str;

    /// The cluster events that may make a pod this plugin rejected schedulable (upstream's
    /// `EventsToRegister`); a pod parked by it returns to the queue only for these.
    fn events(&self) -> ClusterEvent {
        ClusterEvent::ALL
    }

    fn as_pre_enqueue(&self) -> Option<&dyn PreEnqueuePlugin> {
        None
    }
    fn as_queue_sort(&self) -> Option<&dyn QueueSortPlugin> {
        None
    }
    fn as_pre_filter(&self) -> Option<&dyn PreFilterPlugin> {
        None
    }
    fn as_filter(&self) -> Option<&dyn FilterPlugin> {
        None
    }
    fn as_post_filter(&self) -> Option<&dyn PostFilterPlugin> {
        None
    }
    fn as_pre_score(&self) -> Option<&dyn PreScorePlugin> {
        None
    }
    fn as_score(&self) -> Option<&dyn ScorePlugin> {
        None
    }
    fn as_reserve(&self) -> Option<&dyn ReservePlugin> {
        None
    }
    fn as_permit(&self) -> Option<&dyn PermitPlugin> {
        None
    }
    fn as_pre_bind(&self) -> Option<&dyn PreBindPlugin> {
        None
    }
    fn as_bind(&self) -> Option<&dyn BindPlugin> {
        None
    }
    fn as_post_bind(&self) -> Option<&dyn PostBindPlugin> {
        None
    }
}

/// Runs whenever a pod would enter activeQ (added, updated, back from backoff or from the
/// unschedulable pods); anything but Success keeps it out, parked among the unschedulable pods
/// with this plugin as the reason, until an update of the pod lets it in (upstream's
/// `PreEnqueuePlugin`). Runs under the queue's lock: it must be quick and must not block.
pub trait PreEnqueuePlugin: Plugin {
    fn pre_enqueue(&self, pod: &PodInfo) -> Status;
}

/// A pod in activeQ as a QueueSort plugin compares it (the fields of upstream's
/// `QueuedPodInfo` the sort reads).
#[derive(Debug, Clone, Copy)]
pub struct QueuedPodInfo<'a> {
    pub pod: &'a PodInfo,
    /// When it (last) entered the queue.
    pub timestamp: Instant,
}

/// Orders activeQ: `less(a, b)` when `a` is to be scheduled before `b` (upstream's
/// `QueueSortPlugin`). A profile has exactly one, and every profile the same one: the queue is
/// shared.
pub trait QueueSortPlugin: Plugin {
    fn less(&self, a: &QueuedPodInfo, b: &QueuedPodInfo) -> bool;
}

/// What PreFilter found: its status, and optionally the only nodes worth filtering.
#[derive(Debug, Clone)]
pub struct PreFilterResult {
    pub status: Status,
    /// `Some(names)`: only these nodes can fit (e.g. NodeAffinity on `metadata.name`).
    pub node_names: Option<BTreeSet<String>>,
}

impl From<Status> for PreFilterResult {
    fn from(status: Status) -> Self {
        PreFilterResult {
            status,
            node_names: None,
        }
    }
}

/// Runs once per cycle before Filter; may precompute into the cycle state, reject the pod,
/// narrow the nodes, or return Skip so its Filter is not run this cycle.
pub trait PreFilterPlugin: Plugin {
    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
    ) -> PreFilterResult;

    /// Preemption's what-if: `other` is added to `node` (a nominated pod); update the state.
    fn add_pod(&self, _state: &mut CycleState, _pod: &PodInfo, _other: &PodInfo, _node: &NodeInfo) {
    }

    /// Preemption's what-if: `other` is removed from `node` (a victim); update the state.
    fn remove_pod(
        &self,
        _state: &mut CycleState,
        _pod: &PodInfo,
        _other: &PodInfo,
        _node: &NodeInfo,
    ) {
    }
}

/// Decides whether the pod can run on one node.
pub trait FilterPlugin: Plugin {
    fn filter(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status;
}

/// Each node's Filter outcome in a cycle where no node fit, for PostFilter and the
/// `FailedScheduling` message.
pub type NodeStatuses = HashMap<String, Status>;

/// What PostFilter (preemption) decided.
#[derive(Debug, Clone)]
pub struct PostFilterResult {
    pub status: Status,
    /// The node the pod is nominated to once the victims are gone.
    pub nominated_node: Option<String>,
    /// Pods to evict from that node.
    pub victims: Vec<Arc<PodInfo>>,
}

/// What Filter can answer for a hypothetical node, for PostFilter plugins that simulate
/// (preemption: "would the pod fit if these pods were gone?").
pub trait FilterRunner: Send + Sync {
    /// Runs the profile's Filter plugins on `node` as given, counting the `nominated` pods of
    /// at least the pod's priority as if they were there (upstream's
    /// `RunFilterPluginsWithNominatedPods`).
    fn filter_with(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        node: &NodeInfo,
        nominated: &[Arc<PodInfo>],
    ) -> Status;
    /// Tells the PreFilter hooks that `other` was removed from `node` (a victim).
    fn remove_pod_from_state(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        other: &PodInfo,
        node: &NodeInfo,
    );
    /// Tells the PreFilter hooks that `other` was added to `node` (a reprieved victim, or a
    /// nominated pod).
    fn add_pod_to_state(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        other: &PodInfo,
        node: &NodeInfo,
    );
}

/// Runs when no node fits (DefaultPreemption).
pub trait PostFilterPlugin: Plugin {
    fn post_filter(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
        statuses: &NodeStatuses,
        filters: &dyn FilterRunner,
    ) -> PostFilterResult;
}

/// Runs once per cycle before Score, with the nodes that passed Filter.
pub trait PreScorePlugin: Plugin {
    fn pre_score(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        nodes: &[Arc<NodeInfo>],
        snapshot: &Snapshot,
    ) -> Status;
}

/// One node's score.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeScore {
    pub name: String,
    pub score: i64,
}

/// Ranks feasible nodes: `score` per node, then `normalize` over all of them into
/// [`MIN_NODE_SCORE`]..=[`MAX_NODE_SCORE`]; the framework multiplies by the plugin's weight.
pub trait ScorePlugin: Plugin {
    fn score(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status>;

    /// Rescales this plugin's scores (upstream's `ScoreExtensions.NormalizeScore`); the
    /// default leaves them as they are.
    fn normalize(&self, _state: &CycleState, _pod: &PodInfo, _scores: &mut [NodeScore]) -> Status {
        Status::success()
    }
}

/// Claims resources for the pod on the chosen node before binding; undone by `unreserve`.
pub trait ReservePlugin: Plugin {
    fn reserve(&self, state: &mut CycleState, pod: &PodInfo, node: &str) -> Status;
    fn unreserve(&self, state: &mut CycleState, pod: &PodInfo, node: &str);
}

/// Approves, denies or delays (Wait, with a timeout) the binding.
pub trait PermitPlugin: Plugin {
    fn permit(&self, state: &CycleState, pod: &PodInfo, node: &str) -> (Status, Duration);
}

/// Work that must finish before the binding (volumes, for instance).
#[async_trait]
pub trait PreBindPlugin: Plugin {
    async fn pre_bind(&self, state: &CycleState, pod: &PodInfo, node: &str) -> Status;
}

/// Binds the pod to the node; Skip passes the pod to the next Bind plugin.
#[async_trait]
pub trait BindPlugin: Plugin {
    async fn bind(&self, state: &CycleState, pod: &PodInfo, node: &str) -> Status;
}

/// Told after a successful binding.
pub trait PostBindPlugin: Plugin {
    fn post_bind(&self, state: &CycleState, pod: &PodInfo, node: &str);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cycle_state_reads_back_what_was_written_by_type() {
        let mut s = CycleState::default();
        s.write("PreFilterNodeResourcesFit", 42u64);
        assert_eq!(s.read::<u64>("PreFilterNodeResourcesFit"), Some(&42));
        assert_eq!(s.read::<String>("PreFilterNodeResourcesFit"), None);
        assert_eq!(s.read::<u64>("missing"), None);
        let copy = s.clone();
        *s.read_mut::<u64>("PreFilterNodeResourcesFit").unwrap() += 1;
        assert_eq!(s.read::<u64>("PreFilterNodeResourcesFit"), Some(&43));
        assert_eq!(copy.read::<u64>("PreFilterNodeResourcesFit"), Some(&42));
    }
}
