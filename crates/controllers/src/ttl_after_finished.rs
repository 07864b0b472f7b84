//! `ttl-after-finished`: deletes a finished Job `spec.ttlSecondsAfterFinished` seconds after it
//! finished (upstream's TTLAfterFinishedController). The finish is the transition of its
//! `Complete` or `Failed` condition; before deleting, the Job is read again from the API so a
//! changed TTL is honoured, and the delete is guarded by that read's resourceVersion and uses
//! foreground propagation, so its pods go first.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use jiff::Timestamp;
use k8s_openapi::api::batch::v1::Job;
use kube::api::{DeleteParams, Preconditions, PropagationPolicy};
use kube::{Api, ResourceExt};
use skiff_runtime::controller::{Action, Controller};

use crate::job::sync::finish_time;
use crate::{Context, triggers};

/// The reads and writes this controller makes.
#[async_trait]
pub trait Jobs: Send + Sync {
    /// The Job as the API has it now.
    async fn get(&self, namespace: &str, name: &str) -> kube::Result<Option<Job>>;
    /// Deletes it (foreground) if it is still at `resource_version`.
    async fn delete(&self, namespace: &str, name: &str, resource_version: &str)
    -> kube::Result<()>;
}

/// When `job` expires, if it has a TTL and has finished.
pub fn expires_at(job: &Job) -> Option<Timestamp> {
    if job.metadata.deletion_timestamp.is_some() {
        return None;
    }
    let ttl = job.spec.as_ref()?.ttl_seconds_after_finished?;
    Some(finish_time(job)? + jiff::SignedDuration::from_secs(ttl.into()))
}

fn until(t: Timestamp, now: Timestamp) -> Option<Duration> {
    Duration::try_from(t.duration_since(now))
        .ok()
        .filter(|d| !d.is_zero())
}

/// Deletes `job` if it has expired at `now`; otherwise returns how long until it does.
pub async fn reconcile(
    job: &Job,
    now: Timestamp,
    api: &dyn Jobs,
) -> kube::Result<Option<Duration>> {
    let Some(expiry) = expires_at(job) else {
        return Ok(None);
    };
    if let Some(left) = until(expiry, now) {
        return Ok(Some(left));
    }
    let ns = job.namespace().unwrap_or_default();
    let Some(fresh) = api.get(&ns, &job.name_any()).await? else {
        return Ok(None);
    };
    let Some(expiry) = expires_at(&fresh) else {
        return Ok(None);
    };
    if let Some(left) = until(expiry, now) {
        return Ok(Some(left));
    }
    api.delete(
        &ns,
        &fresh.name_any(),
        &fresh.resource_version().unwrap_or_default(),
    )
    .await?;
    Ok(None)
}

struct KubeJobs(kube::Client);

#[async_trait]
impl Jobs for KubeJobs {
    async fn get(&self, namespace: &str, name: &str) -> kube::Result<Option<Job>> {
        Api::<Job>::namespaced(self.0.clone(), namespace)
            .get_opt(name)
            .await
    }

    async fn delete(
        &self,
        namespace: &str,
        name: &str,
        resource_version: &str,
    ) -> kube::Result<()> {
        let dp = DeleteParams {
            propagation_policy: Some(PropagationPolicy::Foreground),
            preconditions: Some(Preconditions {
                resource_version: Some(resource_version.into()),
                uid: None,
            }),
            ..Default::default()
        };
        match Api::<Job>::namespaced(self.0.clone(), namespace)
            .delete(name, &dp)
            .await
        {
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
            other => other.map(|_| ()),
        }
    }
}

/// Runs the controller over every Job (upstream's `--concurrent-ttl-after-finished-syncs`, 5);
/// each is requeued for its expiry.
pub async fn run(ctx: Arc<Context>) -> Result<(), crate::Error> {
    let api = Arc::new(KubeJobs(ctx.client.clone()));
    let jobs = ctx.informers.get::<Job>();
    let controller = Controller::new("ttl-after-finished");
    triggers::run_each(controller, &jobs, move |job| {
        let api = api.clone();
        async move {
            let requeue = reconcile(&job, Timestamp::now(), api.as_ref()).await?;
            Ok::<_, kube::Error>(requeue.map_or(Action::AwaitChange, Action::RequeueAfter))
        }
    })
    .await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use parking_lot::Mutex;
    use serde_json::json;

    struct Recording {
        current: Option<Job>,
        deleted: Mutex<Vec<(String, String)>>,
    }

    #[async_trait]
    impl Jobs for Recording {
        async fn get(&self, _: &str, _: &str) -> kube::Result<Option<Job>> {
            Ok(self.current.clone())
        }

        async fn delete(&self, _: &str, name: &str, rv: &str) -> kube::Result<()> {
            self.deleted.lock().push((name.into(), rv.into()));
            Ok(())
        }
    }

    fn job(ttl: Option<i32>, finished: Option<&str>, rv: &str) -> Job {
        let conditions: Vec<_> = finished
            .map(|t| json!({"type": "Complete", "status": "True", "lastTransitionTime": t}))
            .into_iter()
            .collect();
        serde_json::from_value(json!({
            "metadata": {"name": "pi", "namespace": "ns", "resourceVersion": rv},
            "spec": {"ttlSecondsAfterFinished": ttl, "template": {}},
            "status": {"conditions": conditions},
        }))
        .unwrap()
    }

    fn at(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    #[tokio::test]
    async fn a_finished_job_waits_out_its_ttl_then_is_deleted_at_the_revision_read() {
        let finished = job(Some(30), Some("2026-01-01T10:00:00Z"), "5");
        let api = Recording {
            current: Some(job(Some(30), Some("2026-01-01T10:00:00Z"), "7")),
            deleted: Mutex::default(),
        };
        let early = reconcile(&finished, at("2026-01-01T10:00:10Z"), &api)
            .await
            .unwrap();
        assert_eq!(early, Some(Duration::from_secs(20)));
        assert!(api.deleted.lock().is_empty());
        reconcile(&finished, at("2026-01-01T10:00:30Z"), &api)
            .await
            .unwrap();
        assert_eq!(
            *api.deleted.lock(),
            vec![("pi".to_string(), "7".to_string())]
        );
    }

    #[tokio::test]
    async fn unfinished_jobs_jobs_without_ttl_and_a_lengthened_ttl_are_kept() {
        let api = Recording {
            current: Some(job(Some(3600), Some("2026-01-01T10:00:00Z"), "7")),
            deleted: Mutex::default(),
        };
        let now = at("2026-01-01T11:00:00Z");
        assert_eq!(
            reconcile(&job(Some(0), None, "1"), now, &api)
                .await
                .unwrap(),
            None
        );
        let no_ttl = job(None, Some("2026-01-01T10:00:00Z"), "1");
        assert_eq!(reconcile(&no_ttl, now, &api).await.unwrap(), None);
        // the cached Job has expired, but the API's has a longer TTL now
        let cached = job(Some(10), Some("2026-01-01T10:00:00Z"), "5");
        let left = reconcile(&cached, at("2026-01-01T10:30:00Z"), &api)
            .await
            .unwrap();
        assert_eq!(left, Some(Duration::from_secs(1800)));
        assert!(api.deleted.lock().is_empty());
    }
}
