//! `deployment`: rolls Deployments out through ReplicaSets (upstream's DeploymentController).
//! Each template gets a ReplicaSet `<deployment>-<pod-template-hash>` ([`hash`]); the
//! controller adopts matching orphan ReplicaSets, scales the new one up and the old ones down
//! within `maxSurge`/`maxUnavailable` ([`rolling`]) or all old ones to zero first
//! ([`recreate`]), scales proportionally when the Deployment is resized mid-rollout and while
//! paused ([`sync`]), numbers revisions in `deployment.kubernetes.io/revision`, deletes
//! ReplicaSets beyond `revisionHistoryLimit`, and reports `status` with the `Progressing`,
//! `Available` and `ReplicaFailure` conditions ([`status`]). Rollback needs nothing here:
//! `kubectl rollout undo` copies an old ReplicaSet's template into the Deployment, and the
//! controller finds that ReplicaSet again as the new one.
//!
//! Files: [`mod@self`] (the controller loop, claiming ReplicaSets, the API trait), [`sync`]
//! (finding and creating the new ReplicaSet, scaling, cleanup), [`rolling`], [`recreate`],
//! [`status`], [`hash`], [`util`].

pub mod hash;
mod recreate;
mod rolling;
pub mod status;
pub mod sync;
pub mod util;

#[cfg(test)]
mod tests;

use std::sync::Arc;

use async_trait::async_trait;
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::reflector::ObjectRef;
use kube::{Api, Resource, ResourceExt};
use serde_json::json;
use skiff_runtime::cache::Cache;
use skiff_runtime::controller::{Action, Controller};
use skiff_runtime::events::{Event, EventType, Recorder};
use skiff_runtime::informer::Change;
use skiff_runtime::mutation::MutationCache;
use skiff_runtime::workqueue::WorkQueue;

use crate::{Context, claim, podutil, triggers};
use sync::Syncer;

/// Why a sync failed; each is retried with the key's backoff.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The Deployment's selector does not parse.
    #[error("deployment {key}: invalid selector: {source}")]
    Selector {
        key: String,
        source: skiff_apimachinery::labels::Error,
    },
    /// An API write failed (a conflict means the cache was stale: the next sync re-reads).
    #[error("deployment {key}: {step}: {source}")]
    Api {
        key: String,
        step: String,
        source: kube::Error,
    },
    /// The new ReplicaSet's name is taken by a different template; `collisionCount` was raised.
    #[error("deployment {key}: replica set {name} exists with another template (hash collision)")]
    Collision { key: String, name: String },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The API writes of this controller.
#[async_trait]
pub trait DeploymentApi: Send + Sync {
    async fn create_replica_set(&self, rs: &ReplicaSet) -> kube::Result<ReplicaSet>;
    /// A fresh read (after a create found the name taken).
    async fn get_replica_set(&self, namespace: &str, name: &str) -> kube::Result<ReplicaSet>;
    /// Replaces the ReplicaSet, guarded by its `resourceVersion`.
    async fn update_replica_set(&self, rs: &ReplicaSet) -> kube::Result<ReplicaSet>;
    async fn delete_replica_set(&self, rs: &ReplicaSet) -> kube::Result<()>;
    /// A strategic-merge patch of a ReplicaSet (adoption and release).
    async fn patch_replica_set(
        &self,
        namespace: &str,
        name: &str,
        patch: serde_json::Value,
    ) -> kube::Result<()>;
    /// Replaces the Deployment itself (for its revision annotation), guarded by its
    /// `resourceVersion`.
    async fn update_deployment(&self, d: &Deployment) -> kube::Result<Deployment>;
    /// Replaces the Deployment's status, guarded by its `resourceVersion`.
    async fn update_status(&self, d: &Deployment) -> kube::Result<Deployment>;
    fn event(&self, d: &Deployment, type_: EventType, reason: &str, note: String);
}

pub fn key(d: &Deployment) -> String {
    podutil::key(&d.metadata)
}

/// One sync of one Deployment (upstream's `syncDeployment`) over the ReplicaSets and pods of
/// its namespace.
pub async fn reconcile(
    d: &Deployment,
    namespace_sets: Vec<Arc<ReplicaSet>>,
    namespace_pods: Vec<Arc<Pod>>,
    api: &dyn DeploymentApi,
    now: jiff::Timestamp,
) -> Result<Action> {
    let mut s = Syncer::new(api, d.clone(), now);
    let selector = d.spec.as_ref().map(|spec| &spec.selector);
    let selector = podutil::selector(selector).map_err(|source| Error::Selector {
        key: key(d),
        source,
    })?;
    if selector.is_empty() {
        api.event(
            d,
            EventType::Warning,
            "SelectingAll",
            "This deployment is selecting all pods. A non-empty selector is required.".into(),
        );
        let status = s.d.status.get_or_insert_with(Default::default);
        if status.observed_generation < d.metadata.generation {
            status.observed_generation = d.metadata.generation;
            s.write_status().await?;
        }
        return Ok(Action::AwaitChange);
    }
    let sets = claim_replica_sets(d, &selector, namespace_sets, api).await?;
    if d.metadata.deletion_timestamp.is_some() {
        s.sync_status_only(&sets).await?;
        return Ok(s.action());
    }
    s.check_paused_conditions().await?;
    let paused = d.spec.as_ref().and_then(|spec| spec.paused) == Some(true);
    if paused || s.is_scaling_event(&sets).await? {
        s.sync(&sets).await?;
        return Ok(s.action());
    }
    if util::is_recreate(d) {
        let owned: Vec<&str> = sets
            .iter()
            .filter_map(|rs| rs.metadata.uid.as_deref())
            .collect();
        let pods: Vec<Arc<Pod>> = namespace_pods
            .into_iter()
            .filter(|p| {
                podutil::controller_of(&p.metadata).is_some_and(|r| owned.contains(&&*r.uid))
            })
            .collect();
        s.rollout_recreate(&sets, &pods).await?;
    } else {
        s.rollout_rolling(&sets).await?;
    }
    Ok(s.action())
}

/// Upstream's `ClaimReplicaSets`: the ReplicaSets this Deployment controls after adopting
/// matching orphans and releasing owned ones that no longer match.
async fn claim_replica_sets(
    d: &Deployment,
    selector: &skiff_apimachinery::labels::Selector,
    sets: Vec<Arc<ReplicaSet>>,
    api: &dyn DeploymentApi,
) -> Result<Vec<ReplicaSet>> {
    let uid = d.metadata.uid.clone().unwrap_or_default();
    let deleting = d.metadata.deletion_timestamp.is_some();
    let mut claimed = Vec::new();
    for rs in sets {
        let matches = selector.matches(podutil::labels(&rs.metadata));
        let name = rs.name_any();
        let ns = rs.namespace().unwrap_or_default();
        let rs_uid = rs.metadata.uid.clone().unwrap_or_default();
        let failed = |step: &str, source| Error::Api {
            key: key(d),
            step: format!("{step} replica set {name}"),
            source,
        };
        match podutil::controller_of(&rs.metadata) {
            Some(r) if r.uid == uid => {
                if matches || deleting {
                    claimed.push((*rs).clone());
                    continue;
                }
                let release = json!({"metadata": {
                    "ownerReferences": [{"$patch": "delete", "uid": uid}], "uid": rs_uid}});
                match api.patch_replica_set(&ns, &name, release).await {
                    Ok(()) => {}
                    Err(kube::Error::Api(s)) if s.code == 404 || s.code == 422 => {}
                    Err(e) => return Err(failed("releasing", e)),
                }
            }
            Some(_) => {}
            None => {
                if !matches || deleting || rs.metadata.deletion_timestamp.is_some() {
                    continue;
                }
                let owner = podutil::controller_ref("apps/v1", "Deployment", &d.metadata);
                let adopt = json!({"metadata": {"ownerReferences": [owner], "uid": rs_uid}});
                match api.patch_replica_set(&ns, &name, adopt).await {
                    Ok(()) => {
                        let mut adopted = (*rs).clone();
                        adopted
                            .metadata
                            .owner_references
                            .get_or_insert_with(Vec::new)
                            .push(owner);
                        claimed.push(adopted);
                    }
                    Err(e) if podutil::is_not_found(&e) => {}
                    Err(e) => return Err(failed("adopting", e)),
                }
            }
        }
    }
    Ok(claimed)
}

/// The Deployments whose selector matches an orphan ReplicaSet.
fn matching(rs: &ReplicaSet, store: &Cache<Deployment>) -> Vec<Arc<Deployment>> {
    claim::selecting(&rs.metadata, store, |d| {
        d.spec.as_ref().map(|s| &s.selector)
    })
}

type Queue = WorkQueue<ObjectRef<Deployment>>;

fn enqueue(queue: &Queue, d: &Deployment) {
    queue.add(ObjectRef::from_obj(d));
}

/// Upstream's `addReplicaSet`/`updateReplicaSet`/`deleteReplicaSet`: queues the owner (or, for
/// an orphan, every Deployment that matches it).
fn on_replica_set(change: &Change<ReplicaSet>, store: &Cache<Deployment>, queue: &Queue) {
    match change {
        Change::Added(rs) | Change::Deleted { last: rs, .. } => {
            match claim::controller_in(&rs.metadata, store) {
                Some(d) => enqueue(queue, &d),
                None if podutil::controller_of(&rs.metadata).is_none() => {
                    matching(rs, store).iter().for_each(|d| enqueue(queue, d));
                }
                None => {}
            }
        }
        Change::Updated { old, new } => {
            let (old_ref, new_ref) = (
                podutil::controller_of(&old.metadata),
                podutil::controller_of(&new.metadata),
            );
            if old_ref != new_ref
                && let Some(d) = claim::controller_in(&old.metadata, store)
            {
                enqueue(queue, &d);
            }
            if new_ref.is_some() {
                if let Some(d) = claim::controller_in(&new.metadata, store) {
                    enqueue(queue, &d);
                }
            } else if old.metadata.labels != new.metadata.labels || old_ref != new_ref {
                matching(new, store).iter().for_each(|d| enqueue(queue, d));
            }
        }
    }
}

/// Upstream's `deletePod`: a Recreate Deployment waits for its old pods to be gone.
fn on_pod(
    change: &Change<Pod>,
    sets: &Cache<ReplicaSet>,
    deployments: &Cache<Deployment>,
    queue: &Queue,
) {
    let Change::Deleted { last: pod, .. } = change else {
        return;
    };
    let Some(r) = podutil::controller_of(&pod.metadata) else {
        return;
    };
    let ns = pod.namespace().unwrap_or_default();
    let Some(rs) = sets.get(&ObjectRef::new(&r.name).within(&ns)) else {
        return;
    };
    if let Some(d) = claim::controller_in(&rs.metadata, deployments)
        && util::is_recreate(&d)
    {
        enqueue(queue, &d);
    }
}

struct KubeDeployments {
    client: kube::Client,
    events: Recorder,
    /// Where this controller's writes go, for the next sync to read before the watch brings them.
    written_sets: MutationCache<ReplicaSet>,
    written: MutationCache<Deployment>,
}

impl KubeDeployments {
    fn sets(&self, namespace: &str) -> Api<ReplicaSet> {
        Api::namespaced(self.client.clone(), namespace)
    }

    fn deployments(&self, d: &Deployment) -> Api<Deployment> {
        Api::namespaced(self.client.clone(), &d.namespace().unwrap_or_default())
    }
}

#[async_trait]
impl DeploymentApi for KubeDeployments {
    async fn create_replica_set(&self, rs: &ReplicaSet) -> kube::Result<ReplicaSet> {
        self.sets(&rs.namespace().unwrap_or_default())
            .create(&PostParams::default(), rs)
            .await
    }

    async fn get_replica_set(&self, namespace: &str, name: &str) -> kube::Result<ReplicaSet> {
        self.sets(namespace).get(name).await
    }

    async fn update_replica_set(&self, rs: &ReplicaSet) -> kube::Result<ReplicaSet> {
        let updated = self
            .sets(&rs.namespace().unwrap_or_default())
            .replace(&rs.name_any(), &PostParams::default(), rs)
            .await?;
        self.written_sets.mutated(updated.clone());
        Ok(updated)
    }

    async fn delete_replica_set(&self, rs: &ReplicaSet) -> kube::Result<()> {
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid: rs.metadata.uid.clone(),
                resource_version: None,
            }),
            ..Default::default()
        };
        match self
            .sets(&rs.namespace().unwrap_or_default())
            .delete(&rs.name_any(), &params)
            .await
        {
            Err(e) if podutil::is_not_found(&e) => Ok(()),
            other => other.map(|_| ()),
        }
    }

    async fn patch_replica_set(
        &self,
        namespace: &str,
        name: &str,
        patch: serde_json::Value,
    ) -> kube::Result<()> {
        self.sets(namespace)
            .patch(name, &PatchParams::default(), &Patch::Strategic(patch))
            .await
            .map(|_| ())
    }

    async fn update_deployment(&self, d: &Deployment) -> kube::Result<Deployment> {
        let updated = self
            .deployments(d)
            .replace(&d.name_any(), &PostParams::default(), d)
            .await?;
        self.written.mutated(updated.clone());
        Ok(updated)
    }

    async fn update_status(&self, d: &Deployment) -> kube::Result<Deployment> {
        let updated = self
            .deployments(d)
            .replace_status(&d.name_any(), &PostParams::default(), d)
            .await?;
        self.written.mutated(updated.clone());
        Ok(updated)
    }

    fn event(&self, d: &Deployment, type_: EventType, reason: &str, note: String) {
        let event = Event::new(type_, d.object_ref(&()), reason, note);
        self.events.record(event);
    }
}

/// Runs the controller until the process stops: Deployments are the keys; ReplicaSet changes
/// queue their owner, pod deletions queue Recreate Deployments.
pub async fn run(ctx: Arc<Context>) -> Result<(), crate::Error> {
    let controller = Controller::new("deployment");
    let deployments = ctx.informers.get::<Deployment>();
    let sets = ctx.informers.get::<ReplicaSet>();
    let pods = ctx.informers.get::<Pod>();
    triggers::queue_own_keys(&deployments, controller.queue());
    sets.add_handler({
        let (store, queue) = (deployments.cache().clone(), controller.queue().clone());
        move |change| on_replica_set(change, &store, &queue)
    });
    pods.add_handler({
        let (sets, store) = (sets.cache().clone(), deployments.cache().clone());
        let queue = controller.queue().clone();
        move |change| on_pod(change, &sets, &store, &queue)
    });
    deployments.cache().wait_until_ready().await;
    sets.cache().wait_until_ready().await;
    pods.cache().wait_until_ready().await;
    tracing::info!("deployment: caches synced");
    let (deployments, sets, pods) = (
        MutationCache::new(deployments.cache().clone()),
        MutationCache::new(sets.cache().clone()),
        pods.cache().clone(),
    );
    let api = Arc::new(KubeDeployments {
        client: ctx.client.clone(),
        events: ctx.recorder("deployment-controller"),
        written_sets: sets.clone(),
        written: deployments.clone(),
    });
    controller
        .run(move |key| {
            let api = api.clone();
            let d = deployments.get(&key);
            let (sets, pods) = (sets.clone(), pods.clone());
            async move {
                let Some(d) = d else {
                    return Ok(Action::AwaitChange);
                };
                let ns = d.namespace().unwrap_or_default();
                let sets = sets.namespaced(&ns);
                let pods = if util::is_recreate(&d) {
                    pods.namespaced(&ns)
                } else {
                    Vec::new()
                };
                reconcile(&d, sets, pods, api.as_ref(), jiff::Timestamp::now()).await
            }
        })
        .await;
    Ok(())
}
