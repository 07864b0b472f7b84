//! One sync of one CronJob (upstream's CronJobControllerV2 `syncCronJob` and
//! `cleanupFinishedJobs`): reconcile `status.active` with the Jobs it owns, start the Job of the
//! most recent missed start time (named `<cronjob>-<start time in minutes since the epoch>`)
//! as `concurrencyPolicy` and `startingDeadlineSeconds` allow, trim finished Jobs to the
//! history limits, and say when the next start time is due.

use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::batch::v1::{CronJob, CronJobStatus, Job};
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};
use kube::ResourceExt;

use super::schedule::{self, Schedule};
use super::{CronJobApi, CronJobEvent};
use crate::job::sync::{COMPLETE, FAILED};

/// Upstream's `nextScheduleDelta`: look a little after the start time, not at it.
const NEXT_SCHEDULE_DELTA: Duration = Duration::from_millis(100);
/// The annotation with a Job's scheduled start time.
pub const SCHEDULED_TIMESTAMP: &str = "batch.kubernetes.io/cronjob-scheduled-timestamp";

/// The name of the Job for the start time `t` (upstream's `getJobName`).
pub fn job_name(cronjob: &CronJob, t: Timestamp) -> String {
    format!("{}-{}", cronjob.name_any(), t.as_second().div_euclid(60))
}

fn condition_true(job: &Job, type_: &str) -> bool {
    let conditions = job.status.as_ref().and_then(|s| s.conditions.as_ref());
    conditions
        .into_iter()
        .flatten()
        .any(|c| c.type_ == type_ && c.status == "True")
}

fn finished(job: &Job) -> Option<&'static str> {
    if condition_true(job, COMPLETE) {
        Some(COMPLETE)
    } else if condition_true(job, FAILED) {
        Some(FAILED)
    } else {
        None
    }
}

fn reference(job: &Job) -> ObjectReference {
    ObjectReference {
        api_version: Some("batch/v1".into()),
        kind: Some("Job".into()),
        name: job.metadata.name.clone(),
        namespace: job.metadata.namespace.clone(),
        uid: job.metadata.uid.clone(),
        resource_version: job.metadata.resource_version.clone(),
        ..Default::default()
    }
}

/// The Job for start time `t` from the CronJob's template (upstream's `getJobFromTemplate2`).
pub fn job_for(cronjob: &CronJob, t: Timestamp, schedule: &Schedule) -> Job {
    let template = cronjob
        .spec
        .as_ref()
        .map(|s| s.job_template.clone())
        .unwrap_or_default();
    let mut meta = template.metadata.unwrap_or_default();
    meta.name = Some(job_name(cronjob, t));
    meta.generate_name = None;
    meta.namespace = cronjob.metadata.namespace.clone();
    let scheduled = t.to_zoned(schedule.zone().clone());
    meta.annotations
        .get_or_insert_with(Default::default)
        .insert(
            SCHEDULED_TIMESTAMP.into(),
            scheduled
                .strftime("%Y-%m-%dT%H:%M:%S%:z")
                .to_string()
                .replace("+00:00", "Z"),
        );
    meta.owner_references = Some(vec![OwnerReference {
        api_version: "batch/v1".into(),
        kind: "CronJob".into(),
        name: cronjob.name_any(),
        uid: cronjob.metadata.uid.clone().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }]);
    Job {
        metadata: meta,
        spec: template.spec,
        status: None,
    }
}

/// Syncs `cronjob` given the Jobs it controls at `now`; returns when the next start is due.
pub async fn sync(
    cronjob: &CronJob,
    jobs: &[Arc<Job>],
    now: Timestamp,
    api: &dyn CronJobApi,
) -> kube::Result<Option<Duration>> {
    let spec = cronjob.spec.clone().unwrap_or_default();
    let mut status = cronjob.status.clone().unwrap_or_default();
    let mut active = status.active.take().unwrap_or_default();
    let in_active =
        |active: &[ObjectReference], uid: &Option<String>| active.iter().any(|r| &r.uid == uid);

    // 1. the active list against the Jobs that exist
    for job in jobs {
        let found = in_active(&active, &job.metadata.uid);
        match finished(job) {
            None if !found => {
                let note = format!(
                    "Saw a job that the controller did not create or forgot: {}",
                    job.name_any()
                );
                api.event(cronjob, CronJobEvent::warning("UnexpectedJob", note))
                    .await;
            }
            Some(condition) => {
                if found {
                    active.retain(|r| r.uid != job.metadata.uid);
                    let note = format!(
                        "Saw completed job: {}, condition: {condition}",
                        job.name_any()
                    );
                    api.event(cronjob, CronJobEvent::normal("SawCompletedJob", note))
                        .await;
                }
                let completed = job.status.as_ref().and_then(|s| s.completion_time.clone());
                if let Some(done) = completed
                    && status
                        .last_successful_time
                        .as_ref()
                        .is_none_or(|t| done.0 > t.0)
                {
                    status.last_successful_time = Some(done);
                }
            }
            None => {}
        }
    }
    let mut kept = Vec::new();
    for r in active {
        let exists = jobs.iter().any(|j| j.metadata.uid == r.uid);
        let name = r.name.clone().unwrap_or_default();
        if exists
            || api
                .job_exists(&cronjob.namespace().unwrap_or_default(), &name, &r.uid)
                .await?
        {
            kept.push(r);
        } else {
            let note = format!("Active job went missing: {name}");
            api.event(cronjob, CronJobEvent::normal("MissingJob", note))
                .await;
        }
    }
    let mut active = kept;

    let requeue = if cronjob.metadata.deletion_timestamp.is_some() || spec.suspend == Some(true) {
        None
    } else {
        start_if_due(cronjob, &spec, &mut status, &mut active, now, api).await?
    };

    // 2. history limits
    cleanup(cronjob, &spec, jobs, &active, api).await?;

    status.active = (!active.is_empty()).then_some(active);
    if cronjob.status.clone().unwrap_or_default() != status {
        let mut next = cronjob.clone();
        next.status = Some(status);
        api.update_status(&next).await?;
    }
    Ok(requeue)
}

async fn start_if_due(
    cronjob: &CronJob,
    spec: &k8s_openapi::api::batch::v1::CronJobSpec,
    status: &mut CronJobStatus,
    active: &mut Vec<ObjectReference>,
    now: Timestamp,
    api: &dyn CronJobApi,
) -> kube::Result<Option<Duration>> {
    if let Some(tz) = spec.time_zone.as_deref()
        && let Err(e) = schedule::zone(tz)
    {
        let note = format!("invalid timeZone: {tz:?}: {e}");
        api.event(cronjob, CronJobEvent::warning("UnknownTimeZone", note))
            .await;
        return Ok(None);
    }
    if spec.time_zone.is_some() && spec.schedule.contains("TZ") {
        let note = format!(
            "CRON_TZ or TZ used in schedule {:?} is not officially supported, see https://kubernetes.io/docs/concepts/workloads/controllers/cron-jobs/ for more details",
            spec.schedule
        );
        api.event(cronjob, CronJobEvent::warning("UnsupportedSchedule", note))
            .await;
    }
    let sched = match Schedule::parse(&spec.schedule, spec.time_zone.as_deref()) {
        Ok(s) => s,
        Err(e) => {
            let note = format!("unparseable schedule: {:?} : {e}", spec.schedule);
            api.event(cronjob, CronJobEvent::warning("UnparseableSchedule", note))
                .await;
            return Ok(None);
        }
    };
    let created = cronjob
        .metadata
        .creation_timestamp
        .as_ref()
        .map_or(now, |t| t.0);
    let last = status.last_schedule_time.as_ref().map(|t| t.0);
    let mut earliest = last.unwrap_or(created);
    if let Some(deadline) = spec.starting_deadline_seconds {
        let limit = now - jiff::SignedDuration::from_secs(deadline);
        earliest = earliest.max(limit);
    }
    let next_in = |from: Timestamp| {
        let (recent, _) =
            schedule::most_recent(&sched, last.unwrap_or(created), now).unwrap_or((None, 0));
        let base = recent.unwrap_or(from);
        sched.next(base).map(|t| {
            Duration::try_from(t.duration_since(now)).unwrap_or_default() + NEXT_SCHEDULE_DELTA
        })
    };
    let scheduled = match schedule::most_recent(&sched, earliest, now) {
        Ok((Some(t), missed)) => {
            if missed > 100 {
                let note = format!(
                    "too many missed start times: {missed}. Set or decrease .spec.startingDeadlineSeconds or check clock skew"
                );
                api.event(cronjob, CronJobEvent::warning("TooManyMissedTimes", note))
                    .await;
            }
            t
        }
        Ok((None, _)) => return Ok(next_in(earliest)),
        Err(e) => {
            let note = format!("invalid schedule: {} : {e}", spec.schedule);
            api.event(cronjob, CronJobEvent::warning("InvalidSchedule", note))
                .await;
            return Ok(None);
        }
    };
    let name = job_name(cronjob, scheduled);
    if active.iter().any(|r| r.name.as_deref() == Some(&name)) || last == Some(scheduled) {
        return Ok(next_in(scheduled));
    }
    let policy = spec.concurrency_policy.as_deref().unwrap_or("Allow");
    if policy == "Forbid" && !active.is_empty() {
        let note =
            "Not starting job because prior execution is running and concurrency policy is Forbid";
        api.event(
            cronjob,
            CronJobEvent::normal("JobAlreadyActive", note.into()),
        )
        .await;
        return Ok(next_in(scheduled));
    }
    if policy == "Replace" {
        for r in std::mem::take(active) {
            let job_name = r.name.clone().unwrap_or_default();
            api.delete_job(&cronjob.namespace().unwrap_or_default(), &job_name)
                .await?;
            let note = format!("Deleted job {job_name}");
            api.event(cronjob, CronJobEvent::normal("SuccessfulDelete", note))
                .await;
        }
    }
    let job = job_for(cronjob, scheduled, &sched);
    match api.create_job(&job).await {
        Ok(created) => {
            let note = format!("Created job {}", created.name_any());
            api.event(cronjob, CronJobEvent::normal("SuccessfulCreate", note))
                .await;
            active.push(reference(&created));
        }
        Err(kube::Error::Api(s)) if s.code == 409 => {
            // created before (by an earlier sync whose status write was lost)
        }
        Err(e) => {
            let note = format!("Error creating job: {e}");
            api.event(cronjob, CronJobEvent::warning("FailedCreate", note))
                .await;
            return Err(e);
        }
    }
    status.last_schedule_time = Some(Time(scheduled));
    Ok(next_in(scheduled))
}

/// Deletes the oldest finished Jobs beyond `successfulJobsHistoryLimit` (3) and
/// `failedJobsHistoryLimit` (1).
async fn cleanup(
    cronjob: &CronJob,
    spec: &k8s_openapi::api::batch::v1::CronJobSpec,
    jobs: &[Arc<Job>],
    active: &[ObjectReference],
    api: &dyn CronJobApi,
) -> kube::Result<()> {
    for (condition, limit) in [
        (COMPLETE, spec.successful_jobs_history_limit.unwrap_or(3)),
        (FAILED, spec.failed_jobs_history_limit.unwrap_or(1)),
    ] {
        let mut done: Vec<&Arc<Job>> = jobs
            .iter()
            .filter(|j| finished(j) == Some(condition))
            .filter(|j| !active.iter().any(|r| r.uid == j.metadata.uid))
            .collect();
        let extra = done.len().saturating_sub(limit.max(0) as usize);
        if extra == 0 {
            continue;
        }
        done.sort_by_key(|j| {
            let s = j.status.as_ref();
            s.and_then(|s| s.start_time.as_ref().map(|t| t.0))
                .or_else(|| j.metadata.creation_timestamp.as_ref().map(|t| t.0))
        });
        for job in done.into_iter().take(extra) {
            api.delete_job(&job.namespace().unwrap_or_default(), &job.name_any())
                .await?;
            let note = format!("Deleted job {}", job.name_any());
            api.event(cronjob, CronJobEvent::normal("SuccessfulDelete", note))
                .await;
        }
    }
    Ok(())
}
