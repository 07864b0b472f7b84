//! `VolumeBinding`: a pod's PersistentVolumeClaims must be bound, or bindable on the node.
//! PreFilter rejects a pod whose `Immediate` claims are not bound yet (the PersistentVolume
//! controller binds those) and narrows the nodes to those its bound local volumes pin; Filter
//! checks bound volumes' node affinity and finds, for each unbound `WaitForFirstConsumer`
//! claim, the smallest available static volume the node may use, or else provisioning by the
//! claim's class; Reserve assumes those bindings in the scheduler's caches (Unreserve forgets
//! them); PreBind writes them (the volume's `claimRef`, the claim's
//! `volume.kubernetes.io/selected-node`) and waits, up to `bindTimeoutSeconds`, until the
//! PersistentVolume controller and the provisioner have bound every claim.
//!
//! No Score: upstream scores only with the `StorageCapacityScoring` feature (alpha, off), or
//! static bindings by utilization with the `VolumeCapacityPriority` feature (alpha, off).

pub mod binder;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use parking_lot::Mutex;
use serde_json::Value;

use super::helper::arg;
use crate::api::ClusterApi;
use crate::framework::{
    ClusterEvent, CycleState, FilterPlugin, NodeInfo, Plugin, PodInfo, PreBindPlugin,
    PreFilterPlugin, PreFilterResult, ReservePlugin, Snapshot, Status,
};
use crate::volumes::Volumes;
use binder::{PodVolumeClaims, PodVolumes};

pub const NAME: &str = "VolumeBinding";

const STATE_KEY: &str = "VolumeBinding";

/// Upstream's default `bindTimeoutSeconds`.
pub const DEFAULT_BIND_TIMEOUT: Duration = Duration::from_secs(600);

/// The pod's claims and what each node offered them, shared by the clones of a cycle's state
/// (upstream keeps a pointer in its cycle state too).
#[derive(Clone)]
struct State(Arc<Inner>);

struct Inner {
    claims: PodVolumeClaims,
    /// What Filter found per node; after Reserve, the chosen node's entry is what was assumed.
    /// Locked per node Filter visits and at Reserve and PreBind.
    by_node: Mutex<HashMap<String, PodVolumes>>,
    /// Reserve found every claim bound already: PreBind has nothing to do.
    all_bound: AtomicBool,
}

pub struct VolumeBinding {
    volumes: Arc<Volumes>,
    api: Arc<dyn ClusterApi>,
    bind_timeout: Duration,
}

impl VolumeBinding {
    pub fn new(volumes: Arc<Volumes>, api: Arc<dyn ClusterApi>) -> VolumeBinding {
        VolumeBinding {
            volumes,
            api,
            bind_timeout: DEFAULT_BIND_TIMEOUT,
        }
    }

    /// With `VolumeBindingArgs`: `bindTimeoutSeconds` (not negative; 600 by default). `shape`
    /// is accepted and unused, as upstream without its scoring features.
    pub fn from_args(
        args: Option<&Value>,
        volumes: Arc<Volumes>,
        api: Arc<dyn ClusterApi>,
    ) -> Result<VolumeBinding, String> {
        let mut pl = VolumeBinding::new(volumes, api);
        if let Some(s) = arg::<i64>(args, "bindTimeoutSeconds")? {
            if s < 0 {
                return Err(format!(
                    "bindTimeoutSeconds: Invalid value: {s}: invalid BindTimeoutSeconds, should not be a negative value"
                ));
            }
            pl.bind_timeout = Duration::from_secs(s as u64);
        }
        Ok(pl)
    }

    pub fn bind_timeout(&self) -> Duration {
        self.bind_timeout
    }
}

impl Plugin for VolumeBinding {
    fn name(&self) -> &'static str {
        NAME
    }
    /// Claims, volumes and classes added or changed; nodes added or relabelled; CSINodes
    /// (upstream also registers taint changes, and CSIDriver and CSIStorageCapacity events).
    fn events(&self) -> ClusterEvent {
        ClusterEvent::PVC_CHANGE
            .with(ClusterEvent::PV_CHANGE)
            .with(ClusterEvent::STORAGE_CLASS_CHANGE)
            .with(ClusterEvent::CSI_NODE_CHANGE)
            .with(ClusterEvent::NODE_ADD)
            .with(ClusterEvent::NODE_LABEL)
            .with(ClusterEvent::NODE_TAINT)
    }
    fn as_pre_filter(&self) -> Option<&dyn PreFilterPlugin> {
        Some(self)
    }
    fn as_filter(&self) -> Option<&dyn FilterPlugin> {
        Some(self)
    }
    fn as_reserve(&self) -> Option<&dyn ReservePlugin> {
        Some(self)
    }
    fn as_pre_bind(&self) -> Option<&dyn PreBindPlugin> {
        Some(self)
    }
}

impl PreFilterPlugin for VolumeBinding {
    fn pre_filter(&self, state: &mut CycleState, pod: &PodInfo, _: &Snapshot) -> PreFilterResult {
        let claims = match binder::pod_volume_claims(&self.volumes, pod) {
            Ok(Some(claims)) => claims,
            Ok(None) => return Status::skip().into(),
            Err(status) => return status.into(),
        };
        let node_names = binder::eligible_nodes(&claims);
        state.write(
            STATE_KEY,
            State(Arc::new(Inner {
                claims,
                by_node: Mutex::default(),
                all_bound: AtomicBool::new(false),
            })),
        );
        PreFilterResult {
            status: Status::success(),
            node_names,
        }
    }
}

impl FilterPlugin for VolumeBinding {
    fn filter(&self, state: &CycleState, _: &PodInfo, node: &NodeInfo) -> Status {
        let Some(s) = state.read::<State>(STATE_KEY) else {
            return Status::error(format!("reading {STATE_KEY:?} from the cycle state"));
        };
        match binder::find_pod_volumes(&self.volumes, &s.0.claims, &node.node) {
            Err(e) => Status::error(e),
            Ok((_, reasons)) if !reasons.is_empty() => Status::new(
                crate::framework::Code::UnschedulableAndUnresolvable,
                reasons.into_iter().map(String::from).collect(),
            ),
            Ok((found, _)) => {
                s.0.by_node.lock().insert(node.name().to_string(), found);
                Status::success()
            }
        }
    }
}

impl ReservePlugin for VolumeBinding {
    fn reserve(&self, state: &mut CycleState, pod: &PodInfo, node: &str) -> Status {
        let Some(s) = state.read::<State>(STATE_KEY) else {
            return Status::success();
        };
        let mut by_node = s.0.by_node.lock();
        let Some(found) = by_node.get(node) else {
            s.0.all_bound.store(true, Ordering::Relaxed);
            return Status::success();
        };
        match binder::assume_pod_volumes(&self.volumes, pod, node, found) {
            Err(e) => Status::error(e),
            Ok(None) => {
                s.0.all_bound.store(true, Ordering::Relaxed);
                Status::success()
            }
            Ok(Some(assumed)) => {
                by_node.insert(node.to_string(), assumed);
                Status::success()
            }
        }
    }

    fn unreserve(&self, state: &mut CycleState, _: &PodInfo, node: &str) {
        let Some(s) = state.read::<State>(STATE_KEY) else {
            return;
        };
        if let Some(assumed) = s.0.by_node.lock().get(node) {
            binder::revert(&self.volumes, assumed);
        }
    }
}

#[async_trait]
impl PreBindPlugin for VolumeBinding {
    async fn pre_bind(&self, state: &CycleState, pod: &PodInfo, node: &str) -> Status {
        let Some(s) = state.read::<State>(STATE_KEY) else {
            return Status::success();
        };
        if s.0.all_bound.load(Ordering::Relaxed) {
            return Status::success();
        }
        let Some(assumed) = s.0.by_node.lock().get(node).cloned() else {
            return Status::error(format!("no pod volumes found for node {node:?}"));
        };
        let bound = binder::bind_pod_volumes(
            &self.volumes,
            self.api.as_ref(),
            pod,
            node,
            &assumed,
            self.bind_timeout,
        )
        .await;
        match bound {
            Ok(()) => Status::success(),
            Err(e) => Status::error(e),
        }
    }
}

#[cfg(test)]
mod tests;
