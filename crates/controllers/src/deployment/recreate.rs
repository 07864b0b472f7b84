//! The Recreate strategy (upstream's `recreate.go`): scale every old ReplicaSet to zero, wait
//! until none of their pods is left (terminating ones included), then create or scale up the
//! new ReplicaSet.

use std::sync::Arc;

use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::Pod;

use super::Result;
use super::sync::{Sets, Syncer};
use super::util::{self, desired, replicas};

/// Upstream's `oldPodsRunning`: old ReplicaSets report pods, or a pod of theirs is still there
/// and not finished.
fn old_pods_running(sets: &Sets, pods: &[Arc<Pod>]) -> bool {
    if util::actual_count(&sets.old) > 0 {
        return true;
    }
    let new_uid = sets.new.as_ref().and_then(|n| n.metadata.uid.clone());
    pods.iter().any(|p| {
        let owner = crate::podutil::controller_of(&p.metadata).map(|r| r.uid.clone());
        let phase = p.status.as_ref().and_then(|s| s.phase.as_deref());
        owner != new_uid && !matches!(phase, Some("Failed" | "Succeeded"))
    })
}

impl Syncer<'_> {
    /// Upstream's `rolloutRecreate`; `pods` are the pods of the Deployment's ReplicaSets.
    pub async fn rollout_recreate(&mut self, list: &[ReplicaSet], pods: &[Arc<Pod>]) -> Result<()> {
        let mut sets = self.sets(list, false).await?;
        let mut scaled_down = false;
        for rs in sets.old.clone().iter().filter(|rs| replicas(rs) > 0) {
            let (scaled, updated) = self.scale_to(rs, 0).await?;
            scaled_down |= scaled;
            sets.replace(updated);
        }
        if scaled_down || old_pods_running(&sets, pods) {
            return self.sync_rollout_status(&sets).await;
        }
        if sets.new.is_none() {
            sets = self.sets(list, true).await?;
        }
        if let Some(new) = sets.new.clone() {
            let (_, updated) = self.scale_to(&new, desired(&self.d)).await?;
            sets.replace(updated);
        }
        let status = self.d.status.clone().unwrap_or_default();
        if super::status::deployment_complete(&self.d, &status) {
            self.cleanup(&sets.old).await?;
        }
        self.sync_rollout_status(&sets).await
    }
}
