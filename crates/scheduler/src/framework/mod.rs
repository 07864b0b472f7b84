//! The scheduling framework (upstream's `pkg/scheduler/framework`): statuses, the types plugins
//! see, the extension-point traits, the runtime that runs a profile's plugins in order, and the
//! pods waiting at Permit.

pub mod class;
pub mod events;
pub mod interface;
pub mod runtime;
pub mod status;
pub mod testing;
pub mod types;
pub mod waiting;

pub use class::{ClassMemo, PodClass};
pub use events::ClusterEvent;
pub use interface::{
    BindPlugin, CycleState, FilterPlugin, FilterRunner, MAX_NODE_SCORE, MIN_NODE_SCORE, NodeScore,
    NodeStatuses, PermitPlugin, Plugin, PostBindPlugin, PostFilterPlugin, PostFilterResult,
    PreBindPlugin, PreEnqueuePlugin, PreFilterPlugin, PreFilterResult, PreScorePlugin,
    QueueSortPlugin, QueuedPodInfo, ReservePlugin, ScorePlugin, StateData,
};
pub use runtime::{Framework, Points};
pub use status::{Code, Status};
pub use types::{
    Claims, ClassCount, HostPort, NamespaceLabels, NodeInfo, NominatedPods, PodInfo, Resource,
    Snapshot, Workloads, is_terminating, pod_namespace,
};
pub use waiting::{WaitingPod, WaitingPods};
