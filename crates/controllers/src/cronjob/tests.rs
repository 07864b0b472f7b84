//! Unit tests of one CronJob sync over a recording [`CronJobApi`] with `now` passed in.

use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::batch::v1::{CronJob, CronJobStatus, Job};
use parking_lot::Mutex;
use serde_json::{Value, json};

use super::*;

#[derive(Default)]
struct Recording {
    created: Mutex<Vec<Job>>,
    deleted: Mutex<Vec<String>>,
    statuses: Mutex<Vec<CronJobStatus>>,
    events: Mutex<Vec<CronJobEvent>>,
}

impl Recording {
    fn reasons(&self) -> Vec<String> {
        self.events
            .lock()
            .iter()
            .map(|e| e.reason.clone())
            .collect()
    }

    fn created_names(&self) -> Vec<String> {
        self.created.lock().iter().map(|j| j.name_any()).collect()
    }
}

#[async_trait]
impl CronJobApi for Recording {
    async fn create_job(&self, job: &Job) -> kube::Result<Job> {
        let mut job = job.clone();
        job.metadata.uid = Some(format!("uid-{}", job.name_any()));
        self.created.lock().push(job.clone());
        Ok(job)
    }

    async fn delete_job(&self, _namespace: &str, name: &str) -> kube::Result<()> {
        self.deleted.lock().push(name.into());
        Ok(())
    }

    async fn job_exists(&self, _: &str, _: &str, _: &Option<String>) -> kube::Result<bool> {
        Ok(false)
    }

    async fn update_status(&self, cronjob: &CronJob) -> kube::Result<CronJob> {
        self.statuses
            .lock()
            .push(cronjob.status.clone().unwrap_or_default());
        Ok(cronjob.clone())
    }

    async fn event(&self, _cronjob: &CronJob, event: CronJobEvent) {
        self.events.lock().push(event);
    }
}

fn at(s: &str) -> Timestamp {
    s.parse().unwrap()
}

fn cronjob(spec: Value, status: Value) -> CronJob {
    let mut full = json!({
        "schedule": "* * * * *",
        "concurrencyPolicy": "Allow",
        "suspend": false,
        "successfulJobsHistoryLimit": 3,
        "failedJobsHistoryLimit": 1,
        "jobTemplate": {"metadata": {"labels": {"app": "tick"}},
                        "spec": {"template": {"spec": {"restartPolicy": "Never",
                                 "containers": [{"name": "c", "image": "busybox"}]}}}}
    });
    for (k, v) in spec.as_object().unwrap() {
        full[k] = v.clone();
    }
    serde_json::from_value(json!({
        "metadata": {"name": "tick", "namespace": "ns", "uid": "cj-uid",
                     "creationTimestamp": "2026-01-01T10:00:30Z"},
        "spec": full,
        "status": status,
    }))
    .unwrap()
}

fn child(name: &str, condition: Option<&str>, completed: Option<&str>) -> Arc<Job> {
    let conditions: Vec<Value> = condition
        .map(|c| json!({"type": c, "status": "True"}))
        .into_iter()
        .collect();
    Arc::new(
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "ns", "uid": format!("uid-{name}"),
                         "creationTimestamp": "2026-01-01T10:00:30Z",
                         "ownerReferences": [{"apiVersion": "batch/v1", "kind": "CronJob",
                                              "name": "tick", "uid": "cj-uid", "controller": true}]},
            "status": {"conditions": conditions, "completionTime": completed},
        }))
        .unwrap(),
    )
}

fn active(names: &[&str]) -> Value {
    json!(
        names
            .iter()
            .map(
                |n| json!({"kind": "Job", "name": n, "namespace": "ns", "uid": format!("uid-{n}")})
            )
            .collect::<Vec<_>>()
    )
}

#[tokio::test]
async fn a_due_start_time_creates_its_job_and_requeues_for_the_next() {
    let api = Recording::default();
    let cj = cronjob(json!({}), json!({}));
    let requeue = sync::sync(&cj, &[], at("2026-01-01T10:01:05Z"), &api)
        .await
        .unwrap();
    let minutes = at("2026-01-01T10:01:00Z").as_second() / 60;
    assert_eq!(api.created_names(), vec![format!("tick-{minutes}")]);
    let job = api.created.lock()[0].clone();
    assert_eq!(job.labels()["app"], "tick");
    assert_eq!(
        job.annotations()[sync::SCHEDULED_TIMESTAMP],
        "2026-01-01T10:01:00Z"
    );
    assert_eq!(job.owner_references()[0].kind, "CronJob");
    let status = api.statuses.lock().last().cloned().unwrap();
    assert_eq!(
        status.last_schedule_time.map(|t| t.0),
        Some(at("2026-01-01T10:01:00Z"))
    );
    assert_eq!(status.active.unwrap().len(), 1);
    assert_eq!(requeue, Some(Duration::from_millis(55_100)));
    assert_eq!(api.reasons(), vec!["SuccessfulCreate"]);
}

#[tokio::test]
async fn nothing_is_due_before_the_first_start_time() {
    let api = Recording::default();
    let cj = cronjob(json!({}), json!({}));
    let requeue = sync::sync(&cj, &[], at("2026-01-01T10:00:40Z"), &api)
        .await
        .unwrap();
    assert!(api.created.lock().is_empty());
    assert_eq!(requeue, Some(Duration::from_millis(20_100)));
}

#[tokio::test]
async fn forbid_skips_a_start_while_a_job_is_active_and_replace_deletes_it() {
    let running = child("tick-1", None, None);
    let status = json!({"active": active(&["tick-1"]), "lastScheduleTime": "2026-01-01T10:01:00Z"});
    let now = at("2026-01-01T10:02:01Z");

    let api = Recording::default();
    let cj = cronjob(json!({"concurrencyPolicy": "Forbid"}), status.clone());
    sync::sync(&cj, std::slice::from_ref(&running), now, &api)
        .await
        .unwrap();
    assert!(api.created.lock().is_empty());
    assert_eq!(api.reasons(), vec!["JobAlreadyActive"]);

    let api = Recording::default();
    let cj = cronjob(json!({"concurrencyPolicy": "Replace"}), status);
    sync::sync(&cj, &[running], now, &api).await.unwrap();
    assert_eq!(*api.deleted.lock(), vec!["tick-1"]);
    assert_eq!(api.created.lock().len(), 1);
    let status = api.statuses.lock().last().cloned().unwrap();
    let names: Vec<_> = status.active.unwrap().into_iter().map(|r| r.name).collect();
    assert_eq!(names, vec![Some(api.created_names()[0].clone())]);
}

#[tokio::test]
async fn a_start_time_older_than_the_starting_deadline_is_missed() {
    let api = Recording::default();
    let cj = cronjob(json!({"startingDeadlineSeconds": 10}), json!({}));
    let requeue = sync::sync(&cj, &[], at("2026-01-01T10:05:30Z"), &api)
        .await
        .unwrap();
    assert!(api.created.lock().is_empty());
    assert_eq!(requeue, Some(Duration::from_millis(30_100)));
}

#[tokio::test]
async fn more_than_a_hundred_missed_start_times_are_reported_and_the_latest_started() {
    let api = Recording::default();
    let cj = cronjob(json!({}), json!({}));
    sync::sync(&cj, &[], at("2026-01-02T10:00:30Z"), &api)
        .await
        .unwrap();
    assert_eq!(
        api.reasons(),
        vec!["TooManyMissedTimes", "SuccessfulCreate"]
    );
    let note = api.events.lock()[0].note.clone();
    assert!(
        note.starts_with("too many missed start times: 1440."),
        "{note}"
    );
    let minutes = at("2026-01-02T10:00:00Z").as_second() / 60;
    assert_eq!(api.created_names(), vec![format!("tick-{minutes}")]);
}

#[tokio::test]
async fn a_finished_active_job_leaves_the_active_list_and_sets_last_successful_time() {
    let api = Recording::default();
    let done = child("tick-1", Some("Complete"), Some("2026-01-01T10:01:10Z"));
    let cj = cronjob(
        json!({"suspend": true}),
        json!({"active": active(&["tick-1"]), "lastScheduleTime": "2026-01-01T10:01:00Z"}),
    );
    let requeue = sync::sync(&cj, &[done], at("2026-01-01T10:01:20Z"), &api)
        .await
        .unwrap();
    assert_eq!(requeue, None, "suspended: no next start");
    assert_eq!(api.reasons(), vec!["SawCompletedJob"]);
    let status = api.statuses.lock().last().cloned().unwrap();
    assert!(status.active.is_none());
    assert_eq!(
        status.last_successful_time.map(|t| t.0),
        Some(at("2026-01-01T10:01:10Z"))
    );
}

#[tokio::test]
async fn finished_jobs_beyond_the_history_limits_are_deleted_oldest_first() {
    let api = Recording::default();
    let mut jobs = Vec::new();
    for i in 0..5 {
        let mut j = (*child(&format!("ok-{i}"), Some("Complete"), None)).clone();
        j.status.as_mut().unwrap().start_time =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                at("2026-01-01T10:00:00Z") + jiff::SignedDuration::from_secs(60 * i),
            ));
        jobs.push(Arc::new(j));
    }
    jobs.push(child("bad-0", Some("Failed"), None));
    jobs.push(child("bad-1", Some("Failed"), None));
    let cj = cronjob(json!({"suspend": true}), json!({}));
    sync::sync(&cj, &jobs, at("2026-01-01T11:00:00Z"), &api)
        .await
        .unwrap();
    let deleted = api.deleted.lock().clone();
    assert_eq!(deleted.len(), 3, "{deleted:?}");
    assert_eq!(&deleted[..2], &["ok-0", "ok-1"]);
    assert!(deleted[2].starts_with("bad-"));
}

#[tokio::test]
async fn an_unparseable_schedule_is_reported_and_not_requeued() {
    let api = Recording::default();
    let cj = cronjob(json!({"schedule": "@every 5m"}), json!({}));
    let requeue = sync::sync(&cj, &[], at("2026-01-01T10:05:30Z"), &api)
        .await
        .unwrap();
    assert_eq!(requeue, None);
    assert_eq!(api.reasons(), vec!["UnparseableSchedule"]);
}
