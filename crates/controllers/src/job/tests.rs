//! Unit tests of one Job sync over a recording [`JobApi`] and a fixed clock: pods created
//! towards parallelism and completions, finished pods counted through uncountedTerminatedPods,
//! the terminal conditions and events, the failure backoff, Indexed Jobs, the deadline,
//! suspension and expectations; and what the pod handler queues, and which orphans are released.

use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::batch::v1::{Job, JobStatus};
use k8s_openapi::api::core::v1::Pod;
use parking_lot::Mutex;
use serde_json::{Value, json};

use super::*;

#[derive(Default)]
struct Recording {
    created: Mutex<Vec<Pod>>,
    deleted: Mutex<Vec<String>>,
    released: Mutex<Vec<String>>,
    statuses: Mutex<Vec<JobStatus>>,
    events: Mutex<Vec<JobEvent>>,
}

impl Recording {
    fn reasons(&self) -> Vec<String> {
        self.events
            .lock()
            .iter()
            .map(|e| e.reason.clone())
            .collect()
    }

    fn last_status(&self) -> JobStatus {
        self.statuses
            .lock()
            .last()
            .cloned()
            .expect("a status write")
    }

    fn created_names(&self) -> Vec<String> {
        self.created.lock().iter().map(|p| p.name_any()).collect()
    }
}

#[async_trait]
impl JobApi for Recording {
    async fn create_pod(&self, pod: &Pod) -> kube::Result<Pod> {
        let mut pod = pod.clone();
        let n = self.created.lock().len();
        pod.metadata.name = Some(format!(
            "{}{n}",
            pod.metadata.generate_name.as_deref().unwrap_or_default()
        ));
        self.created.lock().push(pod.clone());
        Ok(pod)
    }

    async fn delete_pod(&self, pod: &Pod) -> kube::Result<()> {
        self.deleted.lock().push(pod.name_any());
        Ok(())
    }

    async fn remove_tracking_finalizer(&self, pod: &Pod) -> kube::Result<()> {
        self.released.lock().push(pod.name_any());
        Ok(())
    }

    async fn update_status(&self, job: &Job) -> kube::Result<Job> {
        self.statuses
            .lock()
            .push(job.status.clone().unwrap_or_default());
        Ok(job.clone())
    }

    async fn event(&self, _job: &Job, event: JobEvent) {
        self.events.lock().push(event);
    }
}

fn now() -> Timestamp {
    Timestamp::from_second(1_800_000_000).unwrap()
}

fn later(secs: i64) -> Timestamp {
    Timestamp::from_second(1_800_000_000 + secs).unwrap()
}

fn job(spec: Value, status: Value) -> Job {
    let mut spec_full = json!({
        "backoffLimit": 6,
        "completionMode": "NonIndexed",
        "parallelism": 1,
        "podReplacementPolicy": "TerminatingOrFailed",
        "template": {"spec": {"restartPolicy": "Never",
                              "containers": [{"name": "c", "image": "busybox"}]}}
    });
    for (k, v) in spec.as_object().unwrap() {
        spec_full[k] = v.clone();
    }
    serde_json::from_value(json!({
        "metadata": {"name": "pi", "namespace": "ns", "uid": "job-uid"},
        "spec": spec_full,
        "status": status,
    }))
    .unwrap()
}

/// A pod of the Job in `phase`, with the tracking finalizer unless `untracked`.
fn pod(name: &str, phase: &str, index: Option<i32>) -> Arc<Pod> {
    let mut p: Pod = serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "ns", "uid": format!("uid-{name}"),
                     "finalizers": [pods::TRACKING_FINALIZER],
                     "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "pi",
                                          "uid": "job-uid", "controller": true}]},
        "status": {"phase": phase},
    }))
    .unwrap();
    if let Some(i) = index {
        p.metadata.annotations =
            Some([(indexes::COMPLETION_INDEX.to_string(), i.to_string())].into());
    }
    Arc::new(p)
}

fn untracked(p: Arc<Pod>) -> Arc<Pod> {
    let mut p = (*p).clone();
    p.metadata.finalizers = None;
    Arc::new(p)
}

fn condition_types(status: &JobStatus) -> Vec<(String, String, Option<String>)> {
    status
        .conditions
        .iter()
        .flatten()
        .map(|c| (c.type_.clone(), c.status.clone(), c.reason.clone()))
        .collect()
}

fn cond(t: &str, reason: &str) -> (String, String, Option<String>) {
    (t.to_string(), "True".to_string(), Some(reason.to_string()))
}

#[tokio::test]
async fn a_new_job_creates_pods_up_to_parallelism_and_starts() {
    let api = Recording::default();
    let j = job(json!({"completions": 3, "parallelism": 2}), json!({}));
    let requeue = sync::sync(&j, &[], now(), &Memory::default(), &api)
        .await
        .unwrap();
    assert_eq!(requeue, None);
    assert_eq!(api.created_names(), vec!["pi-0", "pi-1"]);
    assert_eq!(api.reasons(), vec!["SuccessfulCreate", "SuccessfulCreate"]);
    let status = api.last_status();
    assert_eq!(status.active, Some(2));
    assert_eq!(status.start_time.map(|t| t.0), Some(now()));
    assert!(status.conditions.is_none());
}

#[tokio::test]
async fn pods_the_store_does_not_show_yet_are_not_created_again() {
    let api = Recording::default();
    let memory = Memory::default();
    let j = job(json!({"completions": 3, "parallelism": 2}), json!({}));
    sync::sync(&j, &[], now(), &memory, &api).await.unwrap();
    let stale = sync::sync(&j, &[], now(), &memory, &api).await.unwrap();
    assert_eq!(api.created.lock().len(), 2);
    assert!(stale.is_some(), "unmet expectations poll again");
    // once the store shows them, nothing more is needed
    let seen = [pod("pi-0", "Pending", None), pod("pi-1", "Pending", None)];
    sync::sync(&j, &seen, now(), &memory, &api).await.unwrap();
    assert_eq!(api.created.lock().len(), 2);
}

#[tokio::test]
async fn a_succeeded_pod_is_uncounted_then_released_then_counted() {
    let api = Recording::default();
    let j = job(
        json!({"completions": 3, "parallelism": 2}),
        json!({"startTime": "2027-01-15T08:00:00Z", "active": 2}),
    );
    let pods = [pod("a", "Succeeded", None), pod("b", "Running", None)];
    sync::sync(&j, &pods, now(), &Memory::default(), &api)
        .await
        .unwrap();
    let statuses = api.statuses.lock().clone();
    assert_eq!(statuses.len(), 2, "{statuses:?}");
    let first = statuses[0].uncounted_terminated_pods.clone().unwrap();
    assert_eq!(first.succeeded, Some(vec!["uid-a".to_string()]));
    assert_eq!(statuses[0].succeeded, None);
    assert_eq!(*api.released.lock(), vec!["a"]);
    let last = &statuses[1];
    assert_eq!(last.succeeded, Some(1));
    assert_eq!(
        last.uncounted_terminated_pods.clone().unwrap().succeeded,
        Some(vec![])
    );
    // one more pod for the third completion
    assert_eq!(api.created.lock().len(), 1);
    assert_eq!(last.active, Some(2));
}

#[tokio::test]
async fn reaching_completions_with_nothing_active_completes_the_job() {
    let api = Recording::default();
    let j = job(
        json!({"completions": 2, "parallelism": 2}),
        json!({"startTime": "2027-01-15T08:00:00Z", "succeeded": 1}),
    );
    let pods = [
        untracked(pod("a", "Succeeded", None)),
        pod("b", "Succeeded", None),
    ];
    sync::sync(&j, &pods, now(), &Memory::default(), &api)
        .await
        .unwrap();
    let status = api.last_status();
    assert_eq!(status.succeeded, Some(2));
    assert_eq!(
        condition_types(&status),
        vec![
            cond("SuccessCriteriaMet", "CompletionsReached"),
            cond("Complete", "CompletionsReached")
        ]
    );
    assert_eq!(status.completion_time.clone().map(|t| t.0), Some(now()));
    assert!(api.created.lock().is_empty());
    assert_eq!(api.reasons(), vec!["Completed"]);
    assert!(sync::finished(&Job {
        status: Some(status),
        ..j
    }));
}

#[tokio::test]
async fn a_failure_waits_ten_seconds_before_its_replacement() {
    let api = Recording::default();
    let memory = Memory::default();
    let j = job(
        json!({"backoffLimit": 3}),
        json!({"startTime": "2027-01-15T08:00:00Z"}),
    );
    let requeue = sync::sync(&j, &[pod("a", "Failed", None)], now(), &memory, &api)
        .await
        .unwrap();
    assert_eq!(requeue, Some(Duration::from_secs(10)));
    assert!(api.created.lock().is_empty());
    assert_eq!(api.last_status().failed, Some(1));
    // ten seconds on, the (now counted) failed pod is replaced
    let counted = job(
        json!({"backoffLimit": 3}),
        json!({"startTime": "2027-01-15T08:00:00Z", "failed": 1}),
    );
    let after = untracked(pod("a", "Failed", None));
    sync::sync(&counted, &[after], later(10), &memory, &api)
        .await
        .unwrap();
    assert_eq!(api.created.lock().len(), 1);
}

#[tokio::test]
async fn failures_beyond_the_backoff_limit_fail_the_job_after_its_pods_terminate() {
    let api = Recording::default();
    let j = job(
        json!({"backoffLimit": 1, "parallelism": 2, "completions": 4}),
        json!({"startTime": "2027-01-15T08:00:00Z", "failed": 1}),
    );
    let pods = [pod("a", "Failed", None), pod("b", "Running", None)];
    sync::sync(&j, &pods, now(), &Memory::default(), &api)
        .await
        .unwrap();
    assert_eq!(*api.deleted.lock(), vec!["b"]);
    let status = api.last_status();
    assert_eq!(status.failed, Some(3), "a failed, b deleted while failing");
    assert_eq!(status.terminating, Some(1));
    assert_eq!(
        condition_types(&status),
        vec![cond("FailureTarget", "BackoffLimitExceeded")]
    );
    assert_eq!(api.reasons(), vec!["SuccessfulDelete"]);

    // once b is gone, the Job is Failed
    let api = Recording::default();
    let failing = Job {
        status: Some(JobStatus {
            terminating: Some(1),
            ..status
        }),
        ..j
    };
    sync::sync(&failing, &[], later(5), &Memory::default(), &api)
        .await
        .unwrap();
    let status = api.last_status();
    assert_eq!(
        condition_types(&status),
        vec![
            cond("FailureTarget", "BackoffLimitExceeded"),
            cond("Failed", "BackoffLimitExceeded")
        ]
    );
    assert!(status.completion_time.is_none());
    let events = api.events.lock().clone();
    assert_eq!(
        events,
        vec![JobEvent::warning(
            "BackoffLimitExceeded",
            "Job has reached the specified backoff limit".into()
        )]
    );
}

#[tokio::test]
async fn an_active_deadline_fails_the_job_and_is_waited_for() {
    let api = Recording::default();
    let started = job(
        json!({"activeDeadlineSeconds": 30}),
        json!({"startTime": now().to_string()}),
    );
    let running = [pod("a", "Running", None)];
    let requeue = sync::sync(&started, &running, later(10), &Memory::default(), &api)
        .await
        .unwrap();
    assert_eq!(requeue, Some(Duration::from_secs(20)));
    sync::sync(&started, &running, later(30), &Memory::default(), &api)
        .await
        .unwrap();
    assert_eq!(*api.deleted.lock(), vec!["a"]);
    assert_eq!(
        condition_types(&api.last_status()),
        vec![cond("FailureTarget", "DeadlineExceeded")]
    );
}

#[tokio::test]
async fn an_indexed_job_runs_each_pending_index_once_and_records_completed_indexes() {
    let api = Recording::default();
    let j = job(
        json!({"completionMode": "Indexed", "completions": 5, "parallelism": 3}),
        json!({"startTime": "2027-01-15T08:00:00Z", "completedIndexes": "0"}),
    );
    let pods = [
        pod("pi-1-x", "Succeeded", Some(1)),
        pod("pi-2-x", "Running", Some(2)),
        pod("pi-2-y", "Running", Some(2)),
    ];
    sync::sync(&j, &pods, now(), &Memory::default(), &api)
        .await
        .unwrap();
    // the duplicate of index 2 goes first; nothing is created in the same sync
    assert_eq!(api.deleted.lock().len(), 1);
    assert!(api.created.lock().is_empty());
    let status = api.last_status();
    assert_eq!(status.completed_indexes.as_deref(), Some("0,1"));
    assert_eq!(status.succeeded, Some(2));

    let api = Recording::default();
    let j = job(
        json!({"completionMode": "Indexed", "completions": 5, "parallelism": 3}),
        json!({"startTime": "2027-01-15T08:00:00Z", "completedIndexes": "0,1"}),
    );
    let pods = [pod("pi-2-x", "Running", Some(2))];
    sync::sync(&j, &pods, now(), &Memory::default(), &api)
        .await
        .unwrap();
    assert_eq!(api.created_names(), vec!["pi-3-0", "pi-4-1"]);
    let indexes: Vec<Option<i32>> = api.created.lock().iter().map(indexes::of).collect();
    assert_eq!(indexes, vec![Some(3), Some(4)]);
}

#[tokio::test]
async fn suspending_deletes_active_pods_without_counting_them_as_failed() {
    let api = Recording::default();
    let j = job(
        json!({"suspend": true, "parallelism": 2, "completions": 2}),
        json!({"startTime": "2027-01-15T08:00:00Z"}),
    );
    let running = [pod("a", "Running", None), pod("b", "Pending", None)];
    sync::sync(&j, &running, now(), &Memory::default(), &api)
        .await
        .unwrap();
    assert_eq!(api.deleted.lock().len(), 2);
    let status = api.last_status();
    assert_eq!(
        condition_types(&status),
        vec![cond("Suspended", "JobSuspended")]
    );
    assert_eq!(status.failed, Some(0));
    assert!(api.reasons().contains(&"Suspended".to_string()));
}

#[tokio::test]
async fn a_finished_job_only_releases_pods_still_tracked() {
    let api = Recording::default();
    let j = job(
        json!({}),
        json!({"conditions": [{"type": "Complete", "status": "True"}]}),
    );
    let pods = [
        pod("a", "Succeeded", None),
        untracked(pod("b", "Succeeded", None)),
    ];
    sync::sync(&j, &pods, now(), &Memory::default(), &api)
        .await
        .unwrap();
    assert_eq!(*api.released.lock(), vec!["a"]);
    assert!(api.statuses.lock().is_empty());
}

#[tokio::test]
async fn a_failed_pod_seen_again_in_a_stale_store_does_not_lengthen_the_backoff() {
    let api = Recording::default();
    let memory = Memory::default();
    let j = job(
        json!({"backoffLimit": 3}),
        json!({"startTime": "2027-01-15T08:00:00Z"}),
    );
    let failed = [pod("a", "Failed", None)];
    let first = sync::sync(&j, &failed, now(), &memory, &api).await.unwrap();
    let again = sync::sync(&j, &failed, now(), &memory, &api).await.unwrap();
    assert_eq!(first, Some(Duration::from_secs(10)));
    assert_eq!(again, Some(Duration::from_secs(10)));
}

/// The keys a queue hands out now, in order.
async fn drain<T: skiff_runtime::workqueue::QueueKey>(queue: &WorkQueue<T>) -> Vec<String> {
    let mut keys = Vec::new();
    while !queue.is_empty() {
        let key = queue.get().await.unwrap();
        queue.done(&key);
        keys.push(key.to_string());
    }
    keys
}

#[tokio::test]
async fn a_pod_change_queues_its_job_and_an_orphan_still_tracked_is_queued_for_release() {
    let jobs = Cache::from_objects([job(json!({}), json!({}))]);
    let (queue, orphans) = (JobQueue::new("job"), PodQueue::new("orphans"));
    let mut adopted_elsewhere = (*pod("other-uid", "Running", None)).clone();
    adopted_elsewhere
        .metadata
        .owner_references
        .as_mut()
        .unwrap()[0]
        .uid = "old-job".into();
    for p in [
        pod("mine", "Running", None),
        Arc::new(adopted_elsewhere),
        untracked(Arc::new({
            let mut p = (*pod("bare", "Running", None)).clone();
            p.metadata.owner_references = None;
            p
        })),
    ] {
        on_pod(&Change::Added(p), &jobs, &queue, &orphans);
    }
    assert_eq!(drain(&queue).await.len(), 1, "the pod of the cached Job");
    assert_eq!(
        drain(&orphans).await.len(),
        1,
        "the tracked pod of a Job that is gone"
    );

    let api = Recording::default();
    let orphan = pod("orphan", "Succeeded", None);
    let mut other = (*orphan).clone();
    other.metadata.owner_references.as_mut().unwrap()[0].uid = "old-job".into();
    release_orphan(Some(Arc::new(other)), &jobs, &api)
        .await
        .unwrap();
    release_orphan(Some(pod("adopted", "Running", None)), &jobs, &api)
        .await
        .unwrap();
    release_orphan(None, &jobs, &api).await.unwrap();
    assert_eq!(*api.released.lock(), ["orphan"]);
}
