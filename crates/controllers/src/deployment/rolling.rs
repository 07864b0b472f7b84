//! The RollingUpdate strategy (upstream's `rolling.go`): scale the new ReplicaSet up while the
//! total stays within `replicas + maxSurge`, and old ones down while at least
//! `replicas - maxUnavailable` pods stay available, unhealthy old pods first.

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};

use super::Result;
use super::sync::{Sets, Syncer};
use super::util::{self, desired, replicas};

/// Upstream's `NewRSNewReplicas`: how big the new ReplicaSet may be now.
pub fn new_rs_new_replicas<'a>(
    d: &Deployment,
    all: impl IntoIterator<Item = &'a ReplicaSet>,
    new: &ReplicaSet,
) -> i32 {
    if !util::is_rolling_update(d) {
        return desired(d);
    }
    let rolling = d
        .spec
        .as_ref()
        .and_then(|s| s.strategy.as_ref())
        .and_then(|s| s.rolling_update.as_ref());
    let surge = util::scaled_value(rolling.and_then(|r| r.max_surge.as_ref()), desired(d), true);
    let current = util::replica_count(all);
    let max_total = desired(d) + surge;
    if current >= max_total {
        return replicas(new);
    }
    let up = (max_total - current).min(desired(d) - replicas(new));
    replicas(new) + up
}

impl Syncer<'_> {
    /// Upstream's `rolloutRolling`.
    pub async fn rollout_rolling(&mut self, list: &[ReplicaSet]) -> Result<()> {
        let mut sets = self.sets(list, true).await?;
        if self.reconcile_new(&mut sets).await? {
            return self.sync_rollout_status(&sets).await;
        }
        if self.reconcile_old(&mut sets).await? {
            return self.sync_rollout_status(&sets).await;
        }
        let status = self.d.status.clone().unwrap_or_default();
        if super::status::deployment_complete(&self.d, &status) {
            self.cleanup(&sets.old).await?;
        }
        self.sync_rollout_status(&sets).await
    }

    /// Upstream's `reconcileNewReplicaSet`: whether it scaled the new ReplicaSet.
    async fn reconcile_new(&mut self, sets: &mut Sets) -> Result<bool> {
        let Some(new) = sets.new.clone() else {
            return Ok(false);
        };
        let want = desired(&self.d);
        if replicas(&new) == want {
            return Ok(false);
        }
        let size = if replicas(&new) > want {
            want
        } else {
            new_rs_new_replicas(&self.d, sets.all(), &new)
        };
        let (scaled, updated) = self.scale_to(&new, size).await?;
        sets.replace(updated);
        Ok(scaled)
    }

    /// Upstream's `reconcileOldReplicaSets`: whether it scaled any old ReplicaSet down.
    async fn reconcile_old(&mut self, sets: &mut Sets) -> Result<bool> {
        let old_count = util::replica_count(&sets.old);
        if old_count == 0 {
            return Ok(false);
        }
        let all_count = util::replica_count(sets.all());
        let min_available = desired(&self.d) - util::max_unavailable(&self.d);
        let new_unavailable = sets
            .new
            .as_ref()
            .map_or(0, |n| replicas(n) - util::available(n));
        let max_scaled_down = all_count - min_available - new_unavailable;
        if max_scaled_down <= 0 {
            return Ok(false);
        }
        let cleaned = self.cleanup_unhealthy(sets, max_scaled_down).await?;
        let scaled = self.scale_down_old_for_rolling(sets).await?;
        Ok(cleaned + scaled > 0)
    }

    /// Upstream's `cleanupUnhealthyReplicas`: drops up to `max` unavailable old replicas, oldest
    /// ReplicaSets first.
    async fn cleanup_unhealthy(&mut self, sets: &mut Sets, max: i32) -> Result<i32> {
        let mut old = sets.old.clone();
        old.sort_by(util::by_creation);
        let mut total = 0;
        for rs in &old {
            if total >= max {
                break;
            }
            // (a ReplicaSet just scaled down may report more available than it now wants)
            if replicas(rs) == 0 || replicas(rs) <= util::available(rs) {
                continue;
            }
            let down = (max - total).min(replicas(rs) - util::available(rs));
            let size = replicas(rs) - down;
            if size < 0 {
                continue;
            }
            let (_, updated) = self.scale_to(rs, size).await?;
            sets.replace(updated);
            total += down;
        }
        Ok(total)
    }

    /// Upstream's `scaleDownOldReplicaSetsForRollingUpdate`: scales old ReplicaSets down by as
    /// many available replicas as exceed `replicas - maxUnavailable`, oldest first.
    async fn scale_down_old_for_rolling(&mut self, sets: &mut Sets) -> Result<i32> {
        let min_available = desired(&self.d) - util::max_unavailable(&self.d);
        // A ReplicaSet just scaled down may still report the pods it is deleting as available:
        // count at most its new size (upstream counts `status.availableReplicas` as is).
        let available: i32 = sets
            .all()
            .map(|rs| util::available(rs).min(replicas(rs)))
            .sum();
        if available <= min_available {
            return Ok(0);
        }
        let budget = available - min_available;
        let mut old = sets.old.clone();
        old.sort_by(util::by_creation);
        let mut total = 0;
        for rs in &old {
            if total >= budget {
                break;
            }
            if replicas(rs) == 0 {
                continue;
            }
            let down = replicas(rs).min(budget - total);
            let (_, updated) = self.scale_to(rs, replicas(rs) - down).await?;
            sets.replace(updated);
            total += down;
        }
        Ok(total)
    }
}
