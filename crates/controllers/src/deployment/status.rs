//! A Deployment's status (upstream's `progress.go` and `calculateStatus`): replica counts summed
//! over its ReplicaSets, `Available` (`MinimumReplicasAvailable`/`MinimumReplicasUnavailable`),
//! `Progressing` (`NewReplicaSetCreated`, `FoundNewReplicaSet`, `ReplicaSetUpdated`,
//! `NewReplicaSetAvailable`, `ProgressDeadlineExceeded`, `DeploymentPaused`,
//! `DeploymentResumed`), and `ReplicaFailure` copied from a ReplicaSet.

use std::time::Duration;

use k8s_openapi::api::apps::v1::{Deployment, DeploymentCondition, DeploymentStatus};
use kube::ResourceExt;

use super::Result;
use super::sync::{Sets, Syncer};
use super::util::{self, desired};

/// Upstream's `DeploymentComplete`: every replica updated and available, the spec observed.
pub fn deployment_complete(d: &Deployment, s: &DeploymentStatus) -> bool {
    let want = desired(d);
    s.updated_replicas == Some(want)
        && s.replicas == Some(want)
        && s.available_replicas == Some(want)
        && s.observed_generation >= d.metadata.generation
}

/// Upstream's `DeploymentProgressing`: more updated, ready or available replicas, or fewer old
/// ones, than the last status said.
fn deployment_progressing(d: &Deployment, new: &DeploymentStatus) -> bool {
    let old = d.status.clone().unwrap_or_default();
    let n = |v: Option<i32>| v.unwrap_or(0);
    let old_old = n(old.replicas) - n(old.updated_replicas);
    let new_old = n(new.replicas) - n(new.updated_replicas);
    n(new.updated_replicas) > n(old.updated_replicas)
        || new_old < old_old
        || n(new.ready_replicas) > n(old.ready_replicas)
        || n(new.available_replicas) > n(old.available_replicas)
}

fn deadline(d: &Deployment) -> jiff::SignedDuration {
    let secs = d
        .spec
        .as_ref()
        .and_then(|s| s.progress_deadline_seconds)
        .unwrap_or(600);
    jiff::SignedDuration::from_secs(i64::from(secs))
}

/// Upstream's `DeploymentTimedOut`: the Progressing condition was last updated longer than
/// `progressDeadlineSeconds` ago.
fn timed_out(d: &Deployment, s: &DeploymentStatus, now: jiff::Timestamp) -> bool {
    if !util::has_progress_deadline(d) {
        return false;
    }
    let Some(c) = util::condition(s, "Progressing") else {
        return false;
    };
    match c.reason.as_deref() {
        Some("NewReplicaSetAvailable") => false,
        Some("ProgressDeadlineExceeded") => true,
        _ => c
            .last_update_time
            .as_ref()
            .is_some_and(|t| t.0 + deadline(d) < now),
    }
}

impl Syncer<'_> {
    /// Upstream's `calculateStatus`.
    pub fn calculate_status(&self, sets: &Sets) -> DeploymentStatus {
        let available = util::available_count(sets.all());
        let total = util::replica_count(sets.all());
        let old = self.d.status.clone().unwrap_or_default();
        let mut status = DeploymentStatus {
            observed_generation: self.d.metadata.generation,
            replicas: Some(util::actual_count(sets.all())),
            updated_replicas: Some(util::actual_count(sets.new.iter())),
            ready_replicas: Some(util::ready_count(sets.all())),
            available_replicas: Some(available),
            unavailable_replicas: Some((total - available).max(0)),
            collision_count: old.collision_count,
            conditions: old.conditions.clone(),
            terminating_replicas: old.terminating_replicas,
        };
        let c = if available >= desired(&self.d) - util::max_unavailable(&self.d) {
            util::new_condition(
                "Available",
                "True",
                "MinimumReplicasAvailable",
                "Deployment has minimum availability.".into(),
                self.now,
            )
        } else {
            util::new_condition(
                "Available",
                "False",
                "MinimumReplicasUnavailable",
                "Deployment does not have minimum availability.".into(),
                self.now,
            )
        };
        util::set_condition(&mut status, c);
        status
    }

    /// Upstream's `syncDeploymentStatus`: writes the calculated status if it changed.
    pub async fn sync_deployment_status(&mut self, sets: &Sets) -> Result<()> {
        let status = self.calculate_status(sets);
        if self.d.status.as_ref() == Some(&status) {
            return Ok(());
        }
        self.d.status = Some(status);
        self.write_status().await
    }

    /// Upstream's `syncRolloutStatus`: the calculated status with the Progressing condition
    /// and ReplicaSet failures; requeues a rollout that is neither done nor timed out for
    /// when its deadline passes.
    pub async fn sync_rollout_status(&mut self, sets: &Sets) -> Result<()> {
        let mut status = self.calculate_status(sets);
        if !util::has_progress_deadline(&self.d) {
            util::remove_condition(&mut status, "Progressing");
        }
        let current = util::condition(&status, "Progressing").cloned();
        let complete = status.replicas == status.updated_replicas
            && current.as_ref().and_then(|c| c.reason.as_deref()) == Some("NewReplicaSetAvailable");
        let about = match &sets.new {
            Some(rs) => format!("ReplicaSet {:?}", rs.name_any()),
            None => format!("Deployment {:?}", self.d.name_any()),
        };
        if util::has_progress_deadline(&self.d) && !complete {
            if deployment_complete(&self.d, &status) {
                let message = format!("{about} has successfully progressed.");
                let c = util::new_condition(
                    "Progressing",
                    "True",
                    "NewReplicaSetAvailable",
                    message,
                    self.now,
                );
                util::set_condition(&mut status, c);
            } else if deployment_progressing(&self.d, &status) {
                let message = format!("{about} is progressing.");
                let mut c = util::new_condition(
                    "Progressing",
                    "True",
                    "ReplicaSetUpdated",
                    message,
                    self.now,
                );
                if let Some(current) = &current {
                    if current.status == "True" {
                        c.last_transition_time = current.last_transition_time.clone();
                    }
                    util::remove_condition(&mut status, "Progressing");
                }
                util::set_condition(&mut status, c);
            } else if timed_out(&self.d, &status, self.now) {
                let message = format!("{about} has timed out progressing.");
                let c = util::new_condition(
                    "Progressing",
                    "False",
                    "ProgressDeadlineExceeded",
                    message,
                    self.now,
                );
                util::set_condition(&mut status, c);
            }
        }
        match replica_failure(sets) {
            Some(c) => util::set_condition(&mut status, c),
            None => util::remove_condition(&mut status, "ReplicaFailure"),
        }
        if self.d.status.as_ref() != Some(&status) {
            self.d.status = Some(status.clone());
            self.write_status().await?;
        }
        self.requeue_stuck(&status);
        Ok(())
    }

    /// Upstream's `requeueStuckDeployment`: come back when the progress deadline passes.
    fn requeue_stuck(&mut self, status: &DeploymentStatus) {
        let Some(c) = util::condition(status, "Progressing") else {
            return;
        };
        if !util::has_progress_deadline(&self.d)
            || deployment_complete(&self.d, status)
            || matches!(
                c.reason.as_deref(),
                Some("NewReplicaSetAvailable" | "ProgressDeadlineExceeded")
            )
        {
            return;
        }
        let Some(updated) = c.last_update_time.as_ref() else {
            return;
        };
        let after = (updated.0 + deadline(&self.d)).duration_since(self.now);
        let after = after.unsigned_abs() * u32::from(!after.is_negative()) + Duration::from_secs(1);
        self.requeue = Some(self.requeue.map_or(after, |r| r.min(after)));
    }

    /// Upstream's `checkPausedConditions`: Progressing `Unknown` with `DeploymentPaused` or
    /// `DeploymentResumed` when `spec.paused` changes (unless the rollout already timed out).
    pub async fn check_paused_conditions(&mut self) -> Result<()> {
        if !util::has_progress_deadline(&self.d) {
            return Ok(());
        }
        let paused = self.d.spec.as_ref().and_then(|s| s.paused) == Some(true);
        let status = self.d.status.get_or_insert_with(Default::default);
        let reason = util::condition(status, "Progressing").and_then(|c| c.reason.clone());
        if reason.as_deref() == Some("ProgressDeadlineExceeded") {
            return Ok(());
        }
        let paused_condition = reason.as_deref() == Some("DeploymentPaused");
        let (reason, message) = match (paused, paused_condition) {
            (true, false) => ("DeploymentPaused", "Deployment is paused"),
            (false, true) => ("DeploymentResumed", "Deployment is resumed"),
            _ => return Ok(()),
        };
        let c = util::new_condition("Progressing", "Unknown", reason, message.into(), self.now);
        util::set_condition(status, c);
        self.write_status().await
    }
}

/// Upstream's `getReplicaFailures`: the first True `ReplicaFailure` of the new ReplicaSet, else
/// of any ReplicaSet.
fn replica_failure(sets: &Sets) -> Option<DeploymentCondition> {
    let failure = |rs: &k8s_openapi::api::apps::v1::ReplicaSet| {
        rs.status
            .as_ref()?
            .conditions
            .as_ref()?
            .iter()
            .find(|c| c.type_ == "ReplicaFailure" && c.status == "True")
            .map(|c| DeploymentCondition {
                type_: c.type_.clone(),
                status: c.status.clone(),
                reason: c.reason.clone(),
                message: c.message.clone(),
                last_update_time: c.last_transition_time.clone(),
                last_transition_time: c.last_transition_time.clone(),
            })
    };
    sets.new
        .iter()
        .find_map(failure)
        .or_else(|| sets.all().find_map(failure))
}
