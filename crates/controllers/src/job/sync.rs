//! One sync of one Job (upstream's `syncJob`): count pods that finished since the last sync,
//! decide whether the Job has failed (backoff limit, active deadline) or met its completions,
//! create or delete pods towards `parallelism` and `completions` (or delete them all when
//! suspended or failing), then record the counts through `status.uncountedTerminatedPods`:
//! a finished pod's uid is written there first, its tracking finalizer removed next, and only
//! then is it moved into `succeeded`/`failed`, so no pod is counted twice or lost across a
//! crash. The terminal condition (`Complete`/`Failed`) follows `SuccessCriteriaMet`/
//! `FailureTarget` once nothing is uncounted and no pod is terminating, as 1.31+ do.

use std::collections::{BTreeSet, HashSet};
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::batch::v1::{Job, JobCondition, JobStatus, UncountedTerminatedPods};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;

use super::{JobApi, JobEvent, Memory, indexes, pods};

/// Upstream's cap on pod creations or deletions in one sync.
const MAX_PER_SYNC: usize = 500;

/// How soon a Job whose store lags behind its pod creations or deletions is looked at again.
const EXPECTATIONS_POLL: Duration = Duration::from_secs(1);

/// Condition types and reasons (upstream's names).
pub const COMPLETE: &str = "Complete";
pub const FAILED: &str = "Failed";
pub const SUCCESS_CRITERIA_MET: &str = "SuccessCriteriaMet";
pub const FAILURE_TARGET: &str = "FailureTarget";
pub const SUSPENDED: &str = "Suspended";

/// Why a Job is finishing: the condition set first and the terminal one it becomes.
#[derive(Debug, Clone, PartialEq)]
struct Finishing {
    success: bool,
    reason: String,
    message: String,
}

impl Finishing {
    fn interim_type(&self) -> &'static str {
        if self.success {
            SUCCESS_CRITERIA_MET
        } else {
            FAILURE_TARGET
        }
    }

    fn terminal_type(&self) -> &'static str {
        if self.success { COMPLETE } else { FAILED }
    }

    fn completions_reached() -> Finishing {
        Finishing {
            success: true,
            reason: "CompletionsReached".into(),
            message: "Reached expected number of succeeded pods".into(),
        }
    }

    fn backoff_limit_exceeded() -> Finishing {
        Finishing {
            success: false,
            reason: "BackoffLimitExceeded".into(),
            message: "Job has reached the specified backoff limit".into(),
        }
    }

    fn deadline_exceeded() -> Finishing {
        Finishing {
            success: false,
            reason: "DeadlineExceeded".into(),
            message: "Job was active longer than specified deadline".into(),
        }
    }
}

fn condition<'a>(conditions: &'a [JobCondition], type_: &str) -> Option<&'a JobCondition> {
    conditions.iter().find(|c| c.type_ == type_)
}

fn is_true(conditions: &[JobCondition], type_: &str) -> bool {
    condition(conditions, type_).is_some_and(|c| c.status == "True")
}

/// Whether the Job has its terminal condition (upstream's `IsJobFinished`).
pub fn finished(job: &Job) -> bool {
    let conditions = job.status.as_ref().and_then(|s| s.conditions.as_deref());
    let conditions = conditions.unwrap_or_default();
    is_true(conditions, COMPLETE) || is_true(conditions, FAILED)
}

/// When the Job finished (its terminal condition's transition), if it has.
pub fn finish_time(job: &Job) -> Option<Timestamp> {
    let conditions = job.status.as_ref()?.conditions.as_deref()?;
    conditions
        .iter()
        .filter(|c| (c.type_ == COMPLETE || c.type_ == FAILED) && c.status == "True")
        .filter_map(|c| c.last_transition_time.as_ref().map(|t| t.0))
        .max()
}

/// Sets a condition as upstream's `ensureJobConditionStatus`: a new one only when True; an
/// existing one moves to `status` (a transition) or takes the new reason and message.
fn ensure_condition(
    conditions: &mut Vec<JobCondition>,
    type_: &str,
    status: &str,
    reason: &str,
    message: &str,
    now: Timestamp,
) {
    match conditions.iter_mut().find(|c| c.type_ == type_) {
        Some(c) => {
            if c.status != status {
                c.status = status.into();
                c.last_transition_time = Some(Time(now));
            } else if c.reason.as_deref() == Some(reason) && c.message.as_deref() == Some(message) {
                return;
            }
            c.reason = Some(reason.into());
            c.message = Some(message.into());
            c.last_probe_time = Some(Time(now));
        }
        None if status == "True" => conditions.push(JobCondition {
            type_: type_.into(),
            status: status.into(),
            reason: Some(reason.into()),
            message: Some(message.into()),
            last_probe_time: Some(Time(now)),
            last_transition_time: Some(Time(now)),
        }),
        None => {}
    }
}

/// What one sync needs to know about the Job's spec.
struct Spec {
    indexed: bool,
    completions: Option<i32>,
    parallelism: i32,
    suspended: bool,
    only_failed_replaced: bool,
    backoff_limit: i32,
    on_failure: bool,
    deadline: Option<i64>,
}

impl Spec {
    fn of(job: &Job) -> Spec {
        let spec = job.spec.clone().unwrap_or_default();
        let restart = spec
            .template
            .spec
            .as_ref()
            .and_then(|s| s.restart_policy.clone());
        Spec {
            indexed: spec.completion_mode.as_deref() == Some("Indexed"),
            completions: spec.completions,
            parallelism: spec.parallelism.unwrap_or(1).max(0),
            suspended: spec.suspend == Some(true),
            only_failed_replaced: spec.pod_replacement_policy.as_deref() == Some("Failed"),
            backoff_limit: spec.backoff_limit.unwrap_or(6),
            on_failure: restart.as_deref() == Some("OnFailure"),
            deadline: spec.active_deadline_seconds,
        }
    }
}

/// Syncs `job` given its pods (those it controls) at `now`; returns when to sync it again
/// regardless of changes (a backoff or deadline), if ever.
pub async fn sync(
    job: &Job,
    all_pods: &[Arc<Pod>],
    now: Timestamp,
    memory: &Memory,
    api: &dyn JobApi,
) -> kube::Result<Option<Duration>> {
    let uid = job.uid().unwrap_or_default();
    if finished(job) {
        for pod in all_pods.iter().filter(|p| pods::has_tracking_finalizer(p)) {
            api.remove_tracking_finalizer(pod).await?;
        }
        memory.forget(&uid);
        return Ok(None);
    }
    let spec = Spec::of(job);
    let mut status = job.status.clone().unwrap_or_default();
    let mut conditions = status.conditions.take().unwrap_or_default();
    let uncounted = status.uncounted_terminated_pods.take().unwrap_or_default();
    let mut uncounted_succeeded = uncounted.succeeded.unwrap_or_default();
    let mut uncounted_failed = uncounted.failed.unwrap_or_default();
    let completions = spec.completions.unwrap_or(0);
    let mut done = indexes::parse(
        status.completed_indexes.as_deref().unwrap_or(""),
        completions,
    );
    let uid_of = |p: &Pod| p.metadata.uid.clone().unwrap_or_default();
    // A pod deleted because its Job was suspended is not a failure.
    let counts_as_failed = |p: &Pod| {
        pods::failed(p, spec.only_failed_replaced)
            && !(spec.suspended && !pods::finished(p) && p.metadata.deletion_timestamp.is_some())
    };

    // 1. pods that finished since the last sync
    let tracked: Vec<&Pod> = all_pods
        .iter()
        .map(|p| p.as_ref())
        .filter(|p| pods::has_tracking_finalizer(p))
        .collect();
    let new_succeeded: Vec<&Pod> = tracked
        .iter()
        .copied()
        .filter(|p| pods::succeeded(p))
        .filter(|p| {
            !uncounted_succeeded.contains(&uid_of(p)) && !uncounted_failed.contains(&uid_of(p))
        })
        .collect();
    let new_failed: Vec<&Pod> = tracked
        .iter()
        .copied()
        .filter(|p| !pods::succeeded(p) && counts_as_failed(p))
        .filter(|p| !uncounted_failed.contains(&uid_of(p)))
        .collect();
    let succeeded_index = |p: &Pod| indexes::of(p).filter(|i| *i < completions);
    let mut done_or_succeeded = done.clone();
    done_or_succeeded.extend(
        all_pods
            .iter()
            .filter(|p| pods::succeeded(p))
            .filter_map(|p| succeeded_index(p)),
    );
    let succeeded = if spec.indexed {
        done_or_succeeded.len() as i32
    } else {
        status.succeeded.unwrap_or(0) + (uncounted_succeeded.len() + new_succeeded.len()) as i32
    };
    let failed = status.failed.unwrap_or(0) + (uncounted_failed.len() + new_failed.len()) as i32;
    let finish = |ps: &[&Pod]| -> Vec<(String, Timestamp)> {
        ps.iter()
            .map(|p| (uid_of(p), pods::finish_time(p, now)))
            .collect()
    };
    let present: HashSet<String> = all_pods.iter().map(|p| uid_of(p)).collect();
    let record = memory.record_finished(
        &uid,
        &finish(&new_succeeded),
        &finish(&new_failed),
        &present,
    );

    if status.start_time.is_none() && !spec.suspended {
        status.start_time = Some(Time(now));
    }
    let started = status.start_time.as_ref().map(|t| t.0);
    let active_pods: Vec<&Pod> = all_pods
        .iter()
        .map(|p| p.as_ref())
        .filter(|p| pods::active(p))
        .collect();
    let terminating_before = all_pods.iter().filter(|p| pods::terminating(p)).count();

    // 2. has it failed?
    let mut finishing = if let Some(c) = conditions.iter().find(|c| {
        (c.type_ == FAILURE_TARGET || c.type_ == SUCCESS_CRITERIA_MET) && c.status == "True"
    }) {
        Some(Finishing {
            success: c.type_ == SUCCESS_CRITERIA_MET,
            reason: c.reason.clone().unwrap_or_default(),
            message: c.message.clone().unwrap_or_default(),
        })
    } else if failed > spec.backoff_limit || past_backoff_limit_on_failure(&spec, &active_pods) {
        Some(Finishing::backoff_limit_exceeded())
    } else if past_deadline(&spec, started, now) {
        Some(Finishing::deadline_exceeded())
    } else {
        None
    };

    // 3. pods to create or delete
    let mut requeue: Option<Duration> = None;
    let mut to_delete: Vec<&Pod> = Vec::new();
    let mut to_create: Vec<Option<i32>> = Vec::new();
    let failing = finishing.as_ref().is_some_and(|f| !f.success);
    if failing {
        to_delete = active_pods.clone();
    } else if job.metadata.deletion_timestamp.is_some() {
        // being deleted: its pods go with it (the garbage collector's work)
    } else if !memory.expectations_met(&uid, all_pods, now) {
        // the store does not show our last creations or deletions yet; look again soon
        requeue = Some(EXPECTATIONS_POLL);
    } else {
        let plan = manage(&spec, &active_pods, all_pods, succeeded, &done_or_succeeded);
        to_delete = plan.0;
        if !plan.1.is_empty() {
            let wait = record.remaining(now);
            if wait.is_zero() {
                to_create = plan.1;
            } else {
                requeue = Some(wait);
            }
        }
    }
    to_delete.truncate(MAX_PER_SYNC);
    to_create.truncate(MAX_PER_SYNC);

    let mut deleted: Vec<&Pod> = Vec::new();
    let mut first_error = None;
    for pod in &to_delete {
        match api.delete_pod(pod).await {
            Ok(()) => {
                deleted.push(pod);
                api.event(
                    job,
                    JobEvent::normal(
                        "SuccessfulDelete",
                        format!("Deleted pod: {}", pod.name_any()),
                    ),
                )
                .await;
            }
            Err(e) => {
                api.event(
                    job,
                    JobEvent::warning("FailedDelete", format!("Error deleting: {e}")),
                )
                .await;
                first_error.get_or_insert(e);
                break;
            }
        }
    }
    memory.expect_deleted(&uid, deleted.iter().map(|p| uid_of(p)), now);
    let mut created = Vec::new();
    for index in to_create {
        match api.create_pod(&pods::new_pod(job, index)).await {
            Ok(pod) => {
                let name = pod.name_any();
                api.event(
                    job,
                    JobEvent::normal("SuccessfulCreate", format!("Created pod: {name}")),
                )
                .await;
                created.push(name);
            }
            Err(e) => {
                api.event(
                    job,
                    JobEvent::warning("FailedCreate", format!("Error creating: {e}")),
                )
                .await;
                first_error.get_or_insert(e);
                break;
            }
        }
    }
    let created_count = created.len();
    memory.expect_created(&uid, created, now);

    let deleted_uids: HashSet<String> = deleted.iter().map(|p| uid_of(p)).collect();
    let still_active: Vec<&Pod> = active_pods
        .iter()
        .copied()
        .filter(|p| !deleted_uids.contains(&uid_of(p)))
        .collect();
    let active = (still_active.len() + created_count) as i32;
    let terminating = (terminating_before + deleted.len()) as i32;
    if finishing.is_none() && complete(&spec, succeeded, active) {
        finishing = Some(Finishing::completions_reached());
    }

    // suspension
    if finishing.is_none() {
        if spec.suspended && !is_true(&conditions, SUSPENDED) {
            ensure_condition(
                &mut conditions,
                SUSPENDED,
                "True",
                "JobSuspended",
                "Job suspended",
                now,
            );
            api.event(job, JobEvent::normal("Suspended", "Job suspended".into()))
                .await;
        } else if !spec.suspended && is_true(&conditions, SUSPENDED) {
            ensure_condition(
                &mut conditions,
                SUSPENDED,
                "False",
                "JobResumed",
                "Job resumed",
                now,
            );
            status.start_time = Some(Time(now));
            api.event(job, JobEvent::normal("Resumed", "Job resumed".into()))
                .await;
        }
    }
    if let Some(f) = &finishing {
        ensure_condition(
            &mut conditions,
            f.interim_type(),
            "True",
            &f.reason,
            &f.message,
            now,
        );
    }

    // 4. count finished pods: uncounted first, then the finalizer, then the counters
    let mut needs_flush = false;
    let mut to_release: Vec<&Pod> = Vec::new();
    for pod in &tracked {
        let puid = uid_of(pod);
        let failed_now = counts_as_failed(pod) || (failing && !pods::succeeded(pod));
        let release = pods::succeeded(pod)
            || failed_now
            || pod.metadata.deletion_timestamp.is_some()
            || finishing.is_some();
        if !release {
            continue;
        }
        to_release.push(pod);
        if pods::succeeded(pod) {
            if uncounted_failed.contains(&puid) {
                continue;
            }
            if spec.indexed {
                if let Some(i) = succeeded_index(pod)
                    && done.insert(i)
                {
                    needs_flush = true;
                }
            } else if !uncounted_succeeded.contains(&puid) {
                uncounted_succeeded.push(puid);
                needs_flush = true;
            }
        } else if failed_now
            && !uncounted_failed.contains(&puid)
            && (!spec.indexed || succeeded_index(pod).is_some())
        {
            uncounted_failed.push(puid);
            needs_flush = true;
        }
    }
    status.active = Some(active);
    status.ready = Some(still_active.iter().filter(|p| pods::ready(p)).count() as i32);
    status.terminating = Some(terminating);
    if spec.indexed {
        status.completed_indexes = Some(indexes::format(&done));
        status.succeeded = Some(done.len() as i32);
    }
    let with_uncounted =
        |status: &JobStatus, conditions: &[JobCondition], s: &[String], f: &[String]| {
            let mut status = status.clone();
            status.conditions = (!conditions.is_empty()).then(|| conditions.to_vec());
            status.uncounted_terminated_pods = Some(UncountedTerminatedPods {
                succeeded: Some(s.to_vec()),
                failed: Some(f.to_vec()),
            });
            status
        };
    let mut current = job.clone();
    if needs_flush {
        current.status = Some(with_uncounted(
            &status,
            &conditions,
            &uncounted_succeeded,
            &uncounted_failed,
        ));
        current = api.update_status(&current).await?;
    }
    let mut released: HashSet<String> = HashSet::new();
    for pod in to_release {
        match api.remove_tracking_finalizer(pod).await {
            Ok(()) => {
                released.insert(uid_of(pod));
            }
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
    }
    let still_tracked: HashSet<String> = tracked
        .iter()
        .map(|p| uid_of(p))
        .filter(|u| !released.contains(u))
        .collect();
    let before = (uncounted_succeeded.len(), uncounted_failed.len());
    uncounted_succeeded.retain(|u| still_tracked.contains(u));
    uncounted_failed.retain(|u| still_tracked.contains(u));
    if !spec.indexed {
        status.succeeded =
            Some(status.succeeded.unwrap_or(0) + (before.0 - uncounted_succeeded.len()) as i32);
    }
    status.failed = Some(status.failed.unwrap_or(0) + (before.1 - uncounted_failed.len()) as i32);

    // 5. the terminal condition, once every pod is counted and none is terminating
    let mut finished_now = None;
    if let Some(f) = &finishing
        && uncounted_succeeded.is_empty()
        && uncounted_failed.is_empty()
        && terminating == 0
    {
        ensure_condition(
            &mut conditions,
            f.terminal_type(),
            "True",
            &f.reason,
            &f.message,
            now,
        );
        if f.success {
            status.completion_time = Some(Time(now));
        }
        finished_now = Some(f.clone());
    }
    let next = with_uncounted(
        &status,
        &conditions,
        &uncounted_succeeded,
        &uncounted_failed,
    );
    if current.status.as_ref() != Some(&next) {
        current.status = Some(next);
        api.update_status(&current).await?;
    }
    if let Some(f) = finished_now {
        let event = if f.success {
            JobEvent::normal("Completed", "Job completed".into())
        } else {
            JobEvent::warning(&f.reason, f.message.clone())
        };
        api.event(job, event).await;
        memory.forget(&uid);
    }
    if let Some(e) = first_error {
        return Err(e);
    }
    if finishing.is_none()
        && let (Some(deadline), Some(start)) = (spec.deadline, status.start_time.as_ref())
        && !spec.suspended
    {
        let end = start.0 + jiff::SignedDuration::from_secs(deadline);
        let left = Duration::try_from(end.duration_since(now)).unwrap_or(Duration::ZERO);
        requeue = Some(requeue.map_or(left, |r| r.min(left)));
    }
    Ok(requeue)
}

/// Upstream's `pastActiveDeadline`.
fn past_deadline(spec: &Spec, started: Option<Timestamp>, now: Timestamp) -> bool {
    match (spec.deadline, started) {
        (Some(deadline), Some(start)) if !spec.suspended => {
            now.duration_since(start) >= jiff::SignedDuration::from_secs(deadline)
        }
        _ => false,
    }
}

/// Upstream's `pastBackoffLimitOnFailure`: restarts of active pods under `OnFailure`.
fn past_backoff_limit_on_failure(spec: &Spec, active: &[&Pod]) -> bool {
    if !spec.on_failure {
        return false;
    }
    let restarts: i32 = active.iter().map(|p| pods::restarts(p)).sum();
    if spec.backoff_limit == 0 {
        restarts > 0
    } else {
        restarts >= spec.backoff_limit
    }
}

fn complete(spec: &Spec, succeeded: i32, active: i32) -> bool {
    match spec.completions {
        None => succeeded > 0 && active == 0,
        Some(c) => succeeded >= c && active == 0,
    }
}

/// Upstream's `manageJob`: which active pods to delete and which pods (by index, for Indexed
/// Jobs) to create.
fn manage<'a>(
    spec: &Spec,
    active: &[&'a Pod],
    all: &[Arc<Pod>],
    succeeded: i32,
    done: &BTreeSet<i32>,
) -> (Vec<&'a Pod>, Vec<Option<i32>>) {
    if spec.suspended {
        return (active.to_vec(), Vec::new());
    }
    let terminating: Vec<&Pod> = all
        .iter()
        .map(|p| p.as_ref())
        .filter(|p| pods::terminating(p))
        .collect();
    let blocking = if spec.only_failed_replaced {
        terminating.len() as i32
    } else {
        0
    };
    let mut keep: Vec<&'a Pod> = active.to_vec();
    let mut delete: Vec<&'a Pod> = Vec::new();
    if spec.indexed {
        let completions = spec.completions.unwrap_or(0);
        // pods with no valid index, a completed one, or a duplicate go first
        let mut seen = BTreeSet::new();
        pods::sort_for_removal(&mut keep);
        keep.reverse();
        let (valid, invalid): (Vec<&Pod>, Vec<&Pod>) = keep.into_iter().partition(|p| {
            indexes::of(p).is_some_and(|i| i < completions && !done.contains(&i) && seen.insert(i))
        });
        keep = valid;
        delete = invalid;
    }
    let want = match spec.completions {
        None if succeeded > 0 => keep.len() as i32,
        None => spec.parallelism,
        Some(c) => (c - succeeded).clamp(0, spec.parallelism),
    };
    if keep.len() as i32 > want {
        pods::sort_for_removal(&mut keep);
        let extra = keep.len() - want.max(0) as usize;
        delete.extend(keep.drain(..extra));
    }
    if !delete.is_empty() {
        return (delete, Vec::new());
    }
    let diff = (want - keep.len() as i32 - blocking).max(0) as usize;
    let create = if spec.indexed {
        let mut taken: BTreeSet<i32> = keep.iter().filter_map(|p| indexes::of(p)).collect();
        if spec.only_failed_replaced {
            taken.extend(terminating.iter().filter_map(|p| indexes::of(p)));
        }
        indexes::first_pending(diff, spec.completions.unwrap_or(0), done, &taken)
            .into_iter()
            .map(Some)
            .collect()
    } else {
        vec![None; diff]
    };
    (Vec::new(), create)
}
