//! `cronjob`: starts a CronJob's Jobs on its schedule (upstream's CronJobControllerV2): cron
//! schedules with time zones, `concurrencyPolicy` Allow/Forbid/Replace,
//! `startingDeadlineSeconds`, `suspend`, the history limits, and `status.active`,
//! `lastScheduleTime`, `lastSuccessfulTime`. Each sync requeues the CronJob for its next start.
//!
//! - [`schedule`]: parsing schedules and counting missed start times.
//! - [`sync`]: one sync of one CronJob over the [`CronJobApi`] writes.
//!
//! Differences: schedules without a time zone are read in UTC (upstream uses the controller
//! manager's local zone); `@every <duration>` is refused as unparseable.

pub mod schedule;
pub mod sync;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use jiff::Timestamp;
use k8s_openapi::api::batch::v1::{CronJob, Job};
use kube::api::{DeleteParams, PostParams, PropagationPolicy};
use kube::runtime::reflector::ObjectRef;
use kube::{Api, Resource, ResourceExt};
use skiff_runtime::controller::{Action, Controller};
use skiff_runtime::events::Recorder;

use crate::{Context, claim, triggers};

/// An event recorded on a CronJob.
pub type CronJobEvent = crate::events::Note;

/// The reads and writes this controller makes beyond its caches.
#[async_trait]
pub trait CronJobApi: Send + Sync {
    async fn create_job(&self, job: &Job) -> kube::Result<Job>;
    /// Deletes a Job and (in the background) its pods; gone already is not an error.
    async fn delete_job(&self, namespace: &str, name: &str) -> kube::Result<()>;
    /// Whether the Job `name` with `uid` exists (read from the API, not the cache).
    async fn job_exists(
        &self,
        namespace: &str,
        name: &str,
        uid: &Option<String>,
    ) -> kube::Result<bool>;
    async fn update_status(&self, cronjob: &CronJob) -> kube::Result<CronJob>;
    async fn event(&self, cronjob: &CronJob, event: CronJobEvent);
}

struct KubeCronJobs {
    client: kube::Client,
    recorder: Recorder,
}

#[async_trait]
impl CronJobApi for KubeCronJobs {
    async fn create_job(&self, job: &Job) -> kube::Result<Job> {
        let api: Api<Job> =
            Api::namespaced(self.client.clone(), &job.namespace().unwrap_or_default());
        api.create(&PostParams::default(), job).await
    }

    async fn delete_job(&self, namespace: &str, name: &str) -> kube::Result<()> {
        let api: Api<Job> = Api::namespaced(self.client.clone(), namespace);
        let dp = DeleteParams {
            propagation_policy: Some(PropagationPolicy::Background),
            ..Default::default()
        };
        match api.delete(name, &dp).await {
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
            other => other.map(|_| ()),
        }
    }

    async fn job_exists(
        &self,
        namespace: &str,
        name: &str,
        uid: &Option<String>,
    ) -> kube::Result<bool> {
        let api: Api<Job> = Api::namespaced(self.client.clone(), namespace);
        Ok(api
            .get_metadata_opt(name)
            .await?
            .is_some_and(|j| &j.metadata.uid == uid))
    }

    async fn update_status(&self, cronjob: &CronJob) -> kube::Result<CronJob> {
        let api: Api<CronJob> = Api::namespaced(
            self.client.clone(),
            &cronjob.namespace().unwrap_or_default(),
        );
        api.replace_status(&cronjob.name_any(), &PostParams::default(), cronjob)
            .await
    }

    async fn event(&self, cronjob: &CronJob, event: CronJobEvent) {
        event.record(&self.recorder, cronjob.object_ref(&()));
    }
}

/// Runs the controller: CronJobs are the keys; a Job's change queues the CronJob that owns it.
pub async fn run(ctx: Arc<Context>) -> Result<(), crate::Error> {
    let controller = Controller::new("cronjob");
    let cronjobs = ctx.informers.get::<CronJob>();
    let jobs = ctx.informers.get::<Job>();
    claim::index_by_controller(jobs.cache());
    triggers::queue_own_keys(&cronjobs, controller.queue());
    jobs.add_handler({
        let (queue, cronjobs) = (controller.queue().clone(), cronjobs.cache().clone());
        move |change| {
            if let Some(owner) = claim::controller_in(&change.object().metadata, &cronjobs) {
                queue.add(ObjectRef::from_obj(owner.as_ref()));
            }
        }
    });
    cronjobs.cache().wait_until_ready().await;
    jobs.cache().wait_until_ready().await;
    tracing::info!("cronjob: caches synced");
    let api = Arc::new(KubeCronJobs {
        client: ctx.client.clone(),
        recorder: ctx.recorder("cronjob-controller"),
    });
    let (cronjobs, jobs) = (cronjobs.cache().clone(), jobs.cache().clone());
    controller
        .run(move |key| {
            let api = api.clone();
            let (cronjob, jobs) = (cronjobs.get(&key), jobs.clone());
            async move {
                let Some(cronjob) = cronjob else {
                    return Ok(Action::AwaitChange);
                };
                let jobs = claim::controlled_in(&cronjob.metadata, &jobs);
                let requeue = sync::sync(&cronjob, &jobs, Timestamp::now(), api.as_ref()).await?;
                Ok::<_, kube::Error>(match requeue {
                    Some(after) => Action::RequeueAfter(after.max(Duration::from_millis(100))),
                    None => Action::AwaitChange,
                })
            }
        })
        .await;
    Ok(())
}

#[cfg(test)]
mod tests;
