//! `job`: runs a Job's pods to completion (upstream's JobController, batch/v1). Pods come from
//! the Job's template with its generated labels, an owner reference and the
//! `batch.kubernetes.io/job-tracking` finalizer; `parallelism`, `completions` (NonIndexed and
//! Indexed), `backoffLimit` with a growing delay before replacing failed pods,
//! `activeDeadlineSeconds`, `suspend` and `podReplacementPolicy` are honoured; status counts
//! pods through `uncountedTerminatedPods` and ends in `Complete` or `Failed`.
//!
//! - [`sync`]: one sync of one Job, over the [`JobApi`] writes (a recording fake in tests).
//! - [`pods`]: new pods from the template and how pods are read.
//! - [`indexes`]: completion indexes and `completedIndexes`.
//! - [`backoff`]: the delay after failures.
//!
//! Not done: `podFailurePolicy`, `backoffLimitPerIndex`/`maxFailedIndexes`, `successPolicy`,
//! `managedBy`, and adopting orphan pods that match a Job's selector.

pub mod backoff;
pub mod indexes;
pub mod pods;
pub mod sync;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use jiff::Timestamp;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::reflector::ObjectRef;
use kube::{Api, Resource, ResourceExt};
use parking_lot::Mutex;
use skiff_runtime::cache::Cache;
use skiff_runtime::controller::{Action, Controller};
use skiff_runtime::events::Recorder;
use skiff_runtime::informer::Change;
use skiff_runtime::workqueue::WorkQueue;

use crate::{Context, claim};

/// How long unobserved creations or deletions hold a Job's pod management back at most
/// (upstream's `ExpectationsTimeout`).
const EXPECTATIONS_TIMEOUT: jiff::SignedDuration = jiff::SignedDuration::from_secs(300);

/// An event recorded on a Job.
pub type JobEvent = crate::events::Note;

/// The writes this controller makes.
#[async_trait]
pub trait JobApi: Send + Sync {
    /// Creates a pod (named by `generateName`); returns it as stored.
    async fn create_pod(&self, pod: &Pod) -> kube::Result<Pod>;
    /// Deletes a pod (gone already is not an error).
    async fn delete_pod(&self, pod: &Pod) -> kube::Result<()>;
    /// Removes the tracking finalizer from a pod (gone already is not an error).
    async fn remove_tracking_finalizer(&self, pod: &Pod) -> kube::Result<()>;
    /// Writes `job.status` (guarded by its resourceVersion); returns the stored Job.
    async fn update_status(&self, job: &Job) -> kube::Result<Job>;
    /// Records an event on the Job (best effort).
    async fn event(&self, job: &Job, event: JobEvent);
}

/// What the controller remembers between syncs, per Job uid: the failure backoff and the pods
/// it created or deleted that its pod store does not show yet (upstream's expectations).
#[derive(Default)]
pub struct Memory {
    jobs: Mutex<HashMap<String, PerJob>>,
}

#[derive(Default)]
struct PerJob {
    backoff: backoff::Record,
    /// Finished pods already in `backoff`: a stale store shows a pod as newly finished again
    /// until it sees the pod's finalizer gone, and it must not count twice.
    recorded: HashSet<String>,
    created: HashSet<String>,
    deleted: HashSet<String>,
    since: Option<Timestamp>,
}

impl Memory {
    pub fn backoff(&self, uid: &str) -> backoff::Record {
        self.jobs
            .lock()
            .get(uid)
            .map(|j| j.backoff)
            .unwrap_or_default()
    }

    /// The backoff after `succeeded` and `failed` (finished pods with their finish times)
    /// are recorded, each pod once; `present` are the uids of the Job's pods now.
    fn record_finished(
        &self,
        uid: &str,
        succeeded: &[(String, Timestamp)],
        failed: &[(String, Timestamp)],
        present: &HashSet<String>,
    ) -> backoff::Record {
        let mut jobs = self.jobs.lock();
        let job = jobs.entry(uid.into()).or_default();
        let fresh = |pods: &[(String, Timestamp)], seen: &HashSet<String>| -> Vec<Timestamp> {
            pods.iter()
                .filter(|(u, _)| !seen.contains(u))
                .map(|(_, t)| *t)
                .collect()
        };
        let (s, f) = (
            fresh(succeeded, &job.recorded),
            fresh(failed, &job.recorded),
        );
        job.recorded.retain(|u| present.contains(u));
        job.recorded
            .extend(succeeded.iter().chain(failed).map(|(u, _)| u.clone()));
        job.backoff = job.backoff.next(&s, &f);
        job.backoff
    }

    fn expect_created(&self, uid: &str, names: Vec<String>, now: Timestamp) {
        if !names.is_empty() {
            let mut jobs = self.jobs.lock();
            let job = jobs.entry(uid.into()).or_default();
            job.created.extend(names);
            job.since = Some(now);
        }
    }

    fn expect_deleted(&self, uid: &str, uids: impl Iterator<Item = String>, now: Timestamp) {
        let mut jobs = self.jobs.lock();
        let job = jobs.entry(uid.into()).or_default();
        let before = job.deleted.len();
        job.deleted.extend(uids);
        if job.deleted.len() != before {
            job.since = Some(now);
        }
    }

    /// Whether `pods` shows every creation and deletion made for the Job (or they are too old
    /// to wait for); clears them when it does.
    pub fn expectations_met(&self, uid: &str, pods: &[Arc<Pod>], now: Timestamp) -> bool {
        let mut jobs = self.jobs.lock();
        let Some(job) = jobs.get_mut(uid) else {
            return true;
        };
        let expired = job
            .since
            .is_some_and(|t| now.duration_since(t) >= EXPECTATIONS_TIMEOUT);
        let created = job
            .created
            .iter()
            .all(|n| pods.iter().any(|p| p.metadata.name.as_ref() == Some(n)));
        let deleted = job.deleted.iter().all(|u| {
            !pods
                .iter()
                .any(|p| p.metadata.uid.as_ref() == Some(u) && pods::active(p))
        });
        let met = expired || (created && deleted);
        if met {
            job.created.clear();
            job.deleted.clear();
            job.since = None;
        }
        met
    }

    fn forget(&self, uid: &str) {
        self.jobs.lock().remove(uid);
    }
}

struct KubeJobs {
    client: kube::Client,
    recorder: Recorder,
}

fn gone_is_ok(r: kube::Result<()>) -> kube::Result<()> {
    match r {
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        other => other,
    }
}

fn pods_api(client: &kube::Client, pod: &Pod) -> Api<Pod> {
    Api::namespaced(client.clone(), &pod.namespace().unwrap_or_default())
}

#[async_trait]
impl JobApi for KubeJobs {
    async fn create_pod(&self, pod: &Pod) -> kube::Result<Pod> {
        pods_api(&self.client, pod)
            .create(&PostParams::default(), pod)
            .await
    }

    async fn delete_pod(&self, pod: &Pod) -> kube::Result<()> {
        let dp = DeleteParams {
            preconditions: Some(Preconditions {
                uid: pod.metadata.uid.clone(),
                resource_version: None,
            }),
            ..Default::default()
        };
        let r = pods_api(&self.client, pod)
            .delete(&pod.name_any(), &dp)
            .await;
        gone_is_ok(r.map(|_| ()))
    }

    /// A merge patch of the remaining finalizers pinned to the pod's resourceVersion; on a
    /// conflict the pod is read again and the patch retried.
    async fn remove_tracking_finalizer(&self, pod: &Pod) -> kube::Result<()> {
        let api = pods_api(&self.client, pod);
        let mut current = pod.clone();
        for attempt in 0.. {
            if !pods::has_tracking_finalizer(&current) {
                return Ok(());
            }
            let rest: Vec<&String> = current
                .finalizers()
                .iter()
                .filter(|f| *f != pods::TRACKING_FINALIZER)
                .collect();
            let patch = serde_json::json!({"metadata": {
                "finalizers": rest,
                "resourceVersion": current.resource_version(),
            }});
            let r = api
                .patch(
                    &pod.name_any(),
                    &PatchParams::default(),
                    &Patch::Merge(&patch),
                )
                .await;
            match r {
                Err(kube::Error::Api(s)) if s.code == 409 && attempt < 3 => {
                    // a list by name: the controller's role lists pods but does not get them
                    let by_name =
                        ListParams::default().fields(&format!("metadata.name={}", pod.name_any()));
                    match api.list(&by_name).await?.items.pop() {
                        Some(p) if p.metadata.uid == pod.metadata.uid => current = p,
                        _ => return Ok(()),
                    }
                }
                other => return gone_is_ok(other.map(|_| ())),
            }
        }
        Ok(())
    }

    async fn update_status(&self, job: &Job) -> kube::Result<Job> {
        let api: Api<Job> =
            Api::namespaced(self.client.clone(), &job.namespace().unwrap_or_default());
        api.replace_status(&job.name_any(), &PostParams::default(), job)
            .await
    }

    async fn event(&self, job: &Job, event: JobEvent) {
        event.record(&self.recorder, job.object_ref(&()));
    }
}

/// The pod handler: queues the Job that controls the pod, or, for a pod still holding the
/// tracking finalizer without a Job (upstream's orphan pods), the pod itself for release.
fn on_pod(change: &Change<Pod>, jobs: &Cache<Job>, queue: &JobQueue, orphans: &PodQueue) {
    let pod = change.object();
    match claim::controller_in(&pod.metadata, jobs) {
        Some(job) => queue.add(ObjectRef::from_obj(job.as_ref())),
        None if pods::has_tracking_finalizer(pod) && !matches!(change, Change::Deleted { .. }) => {
            orphans.add(ObjectRef::from_obj(pod.as_ref()));
        }
        None => {}
    }
}

type JobQueue = WorkQueue<ObjectRef<Job>>;
type PodQueue = WorkQueue<ObjectRef<Pod>>;

/// A pod still holding the tracking finalizer without a Job that controls it is released
/// (upstream's `syncOrphanPod`); the caches are read again, as the pod may have been adopted
/// or released since it was queued.
async fn release_orphan(
    pod: Option<Arc<Pod>>,
    jobs: &Cache<Job>,
    api: &dyn JobApi,
) -> kube::Result<Action> {
    let Some(pod) = pod else {
        return Ok(Action::AwaitChange);
    };
    if pods::has_tracking_finalizer(&pod) && claim::controller_in(&pod.metadata, jobs).is_none() {
        api.remove_tracking_finalizer(&pod).await?;
    }
    Ok(Action::AwaitChange)
}

/// Runs the controller: Jobs are the keys; a pod's change queues the Job that controls it, and
/// orphan pods that still hold the tracking finalizer go to a second queue that releases them.
pub async fn run(ctx: Arc<Context>) -> Result<(), crate::Error> {
    let controller = Controller::new("job");
    // upstream runs one orphan-pod worker beside the `--concurrent-job-syncs` ones
    let orphans = Controller::new("job_orphan_pod").workers(1);
    let memory = Arc::new(Memory::default());
    let jobs = ctx.informers.get::<Job>();
    let pods = ctx.informers.get::<Pod>();
    claim::index_by_controller(pods.cache());
    jobs.add_handler({
        let (queue, memory) = (controller.queue().clone(), memory.clone());
        move |change| match change {
            Change::Added(job) | Change::Updated { new: job, .. } => {
                queue.add(ObjectRef::from_obj(job.as_ref()));
            }
            Change::Deleted { last, .. } => memory.forget(&last.uid().unwrap_or_default()),
        }
    });
    pods.add_handler({
        let (queue, orphans) = (controller.queue().clone(), orphans.queue().clone());
        let jobs = jobs.cache().clone();
        move |change| on_pod(change, &jobs, &queue, &orphans)
    });
    jobs.cache().wait_until_ready().await;
    pods.cache().wait_until_ready().await;
    tracing::info!("job: caches synced");
    let api = Arc::new(KubeJobs {
        client: ctx.client.clone(),
        recorder: ctx.recorder("job-controller"),
    });
    let (job_cache, pod_cache) = (jobs.cache().clone(), pods.cache().clone());
    let sync_jobs = controller.run({
        let (api, jobs, pods) = (api.clone(), job_cache.clone(), pod_cache.clone());
        move |key| {
            let (api, memory) = (api.clone(), memory.clone());
            let (job, pods) = (jobs.get(&key), pods.clone());
            async move {
                let Some(job) = job else {
                    return Ok(Action::AwaitChange);
                };
                let pods = claim::controlled_in(&job.metadata, &pods);
                let requeue =
                    sync::sync(&job, &pods, Timestamp::now(), &memory, api.as_ref()).await?;
                Ok::<_, kube::Error>(match requeue {
                    Some(after) => Action::RequeueAfter(after.max(Duration::from_millis(100))),
                    None => Action::AwaitChange,
                })
            }
        }
    });
    let release_orphans = orphans.run(move |key| {
        let (api, jobs) = (api.clone(), job_cache.clone());
        let pod = pod_cache.get(&key);
        async move { release_orphan(pod, &jobs, api.as_ref()).await }
    });
    tokio::join!(sync_jobs, release_orphans);
    Ok(())
}

#[cfg(test)]
mod tests;
