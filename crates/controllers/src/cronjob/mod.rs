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
use futures::StreamExt;
use jiff::Timestamp;
use k8s_openapi::api::batch::v1::{CronJob, Job};
use kube::api::{DeleteParams, PostParams, PropagationPolicy};
use kube::runtime::controller::Action;
use kube::runtime::events::Recorder;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Api, Resource, ResourceExt};
use skiff_runtime::backoff::ItemBackoff;

use crate::{Context, watched};

/// An event recorded on a CronJob.
pub type CronJobEvent = crate::events::Note;

/// The reads and writes this controller makes beyond its stores.
#[async_trait]
pub trait CronJobApi: Send + Sync {
    async fn create_job(&self, job: &Job) -> kube::Result<Job>;
    /// Deletes a Job and (in the background) its pods; gone already is not an error.
    async fn delete_job(&self, namespace: &str, name: &str) -> kube::Result<()>;
    /// Whether the Job `name` with `uid` exists (read from the API, not the store).
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
        event
            .publish(&self.recorder, &cronjob.object_ref(&()), "cronjob")
            .await;
    }
}

struct State {
    api: KubeCronJobs,
    jobs: Store<Job>,
    backoff: ItemBackoff<ObjectRef<CronJob>>,
}

fn owner_key(job: &Job) -> Option<ObjectRef<CronJob>> {
    let owner = watched::controller_of(&job.metadata, "CronJob")?;
    Some(ObjectRef::new(&owner.name).within(&job.namespace()?))
}

async fn reconcile(cronjob: Arc<CronJob>, state: Arc<State>) -> kube::Result<Action> {
    let _ = state.jobs.wait_until_ready().await;
    let (ns, uid) = (cronjob.namespace(), cronjob.uid());
    let jobs: Vec<Arc<Job>> = state
        .jobs
        .state()
        .into_iter()
        .filter(|j| j.namespace() == ns)
        .filter(|j| {
            watched::controller_of(&j.metadata, "CronJob")
                .is_some_and(|o| Some(&o.uid) == uid.as_ref())
        })
        .collect();
    let requeue = sync::sync(&cronjob, &jobs, Timestamp::now(), &state.api).await?;
    state.backoff.forget(&ObjectRef::from(cronjob.as_ref()));
    Ok(match requeue {
        Some(after) => Action::requeue(after.max(Duration::from_millis(100))),
        None => Action::await_change(),
    })
}

/// Runs the controller: CronJobs are the keys; a Job's change queues the CronJob that owns it.
pub async fn run(ctx: Arc<Context>) -> anyhow::Result<()> {
    let client = ctx.client.clone();
    let shared = ctx.informer_client.clone();
    let cronjobs = watched::watch(
        Api::<CronJob>::all(shared.clone()),
        watcher::Config::default(),
    );
    let jobs = watched::watch(Api::<Job>::all(shared.clone()), watcher::Config::default());
    let state = Arc::new(State {
        api: KubeCronJobs {
            client,
            recorder: ctx.recorder(),
        },
        jobs: jobs.store.clone(),
        backoff: ItemBackoff::default(),
    });
    let keys = vec![
        cronjobs.changes.map(|c| ObjectRef::from(&c)).boxed(),
        jobs.changes
            .filter_map(|j| async move { owner_key(&j) })
            .boxed(),
    ];
    watched::run(
        cronjobs.store,
        keys,
        state,
        reconcile,
        |cj: Arc<CronJob>, error: &kube::Error, state: Arc<State>| {
            tracing::warn!(cronjob = %cj.name_any(), %error, "cronjob: will retry");
            Action::requeue(state.backoff.failed(ObjectRef::from(cj.as_ref())))
        },
    )
    .await;
    Ok(())
}

#[cfg(test)]
mod tests;
