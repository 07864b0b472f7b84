//! `statefulset`: the pods `<set>-0 … <set>-(replicas-1)` of each StatefulSet (upstream's
//! StatefulSetController). OrderedReady creates one pod at a time, each Running and Ready before
//! the next, and scales down from the highest ordinal; Parallel does all at once. A pod's claims
//! (`volumeClaimTemplates`) are created before it and never deleted here: the retention policy
//! puts owner references on them for the garbage collector (`whenDeleted: Delete` the set's, at
//! creation; `whenScaled: Delete` the condemned pod's, before the pod is deleted). Updates go through
//! ControllerRevisions: RollingUpdate replaces pods from the highest ordinal down to `partition`,
//! one at a time and waiting for each to be Ready; OnDelete replaces only deleted pods. Each sync
//! first claims pods and revisions ([`crate::claim`]): an orphan pod the selector matches that
//! bears one of the set's names is adopted rather than created again.

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use k8s_openapi::api::apps::v1::{ControllerRevision, StatefulSet, StatefulSetStatus};
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, OwnerReference};
use kube::api::{DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::{Api, Resource, ResourceExt};
use serde_json::Value;
use skiff_runtime::controller::{Action, Controller};
use skiff_runtime::events::{Event, EventType, Recorder};

use crate::Context;
use crate::revision::{self, Current, HASH_LABEL};
use crate::statefulset_pods as identity;
use crate::{claim, podutil, triggers};

/// The writes this controller makes.
#[async_trait]
pub trait StatefulSetApi: Send + Sync {
    /// Creates the claim unless it exists.
    async fn ensure_claim(
        &self,
        set: &StatefulSet,
        claim: &PersistentVolumeClaim,
    ) -> kube::Result<()>;
    /// Adds `owner` to the claim's owner references (a missing claim is not an error).
    async fn add_claim_owner(
        &self,
        set: &StatefulSet,
        claim: &str,
        owner: &OwnerReference,
    ) -> kube::Result<()>;
    /// Creates a pod; one that exists already is not an error.
    async fn create_pod(&self, set: &StatefulSet, pod: &Pod) -> kube::Result<()>;
    /// Deletes the pod with this name and uid (not a newer pod of the same name).
    async fn delete_pod(&self, set: &StatefulSet, name: &str, uid: &str) -> kube::Result<()>;
    /// A strategic-merge patch of a pod (adoption and release).
    async fn patch_pod(&self, set: &StatefulSet, name: &str, patch: Value) -> kube::Result<()>;
    /// A strategic-merge patch of a revision (adoption and release).
    async fn patch_revision(&self, set: &StatefulSet, name: &str, patch: Value)
    -> kube::Result<()>;
    async fn save_revision(&self, revision: &Current) -> kube::Result<()>;
    async fn delete_revision(&self, namespace: &str, name: &str) -> kube::Result<()>;
    async fn update_status(
        &self,
        set: &StatefulSet,
        status: &StatefulSetStatus,
    ) -> kube::Result<()>;
}

/// One write of a sync.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// Create the pod with this ordinal (and its claims) at the current (`false`) or update
    /// (`true`) revision.
    Create { ordinal: i32, updated: bool },
    /// Delete this pod (name, uid).
    Delete { name: String, uid: String },
}

fn running_and_ready(pod: &Pod) -> bool {
    let status = pod.status.as_ref();
    status.and_then(|s| s.phase.as_deref()) == Some("Running")
        && crate::service_pods::is_ready(pod)
        && pod.metadata.deletion_timestamp.is_none()
}

fn hash(pod: &Pod) -> Option<&str> {
    pod.labels().get(HASH_LABEL).map(String::as_str)
}

/// The steps of one sync (upstream's `updateStatefulSet`), given the set's pods by ordinal and
/// its current and update revision hashes.
pub fn plan(
    set: &StatefulSet,
    pods: &BTreeMap<i32, &Pod>,
    current: &str,
    update: &str,
) -> Vec<Step> {
    let spec = set.spec.clone().unwrap_or_default();
    let replicas = spec.replicas.unwrap_or(1).max(0);
    let ordered = spec.pod_management_policy.as_deref() != Some("Parallel");
    let strategy = spec.update_strategy.clone().unwrap_or_default();
    let rolling = strategy.type_.as_deref().unwrap_or("RollingUpdate") == "RollingUpdate";
    let partition = strategy
        .rolling_update
        .and_then(|r| r.partition)
        .unwrap_or(0)
        .max(0);
    let delete = |p: &Pod| Step::Delete {
        name: p.name_any(),
        uid: p.uid().unwrap_or_default(),
    };
    let mut steps = Vec::new();
    // a replacement pod is made at the current revision below the partition, else the update
    let updated_for = |n: i32| !(rolling && n < partition && current != update);

    // 1. the pods that should exist, lowest ordinal first
    for n in 0..replicas {
        match pods.get(&n) {
            None => {
                steps.push(Step::Create {
                    ordinal: n,
                    updated: updated_for(n),
                });
                if ordered {
                    return steps;
                }
            }
            Some(p)
                if p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Failed")
                    && p.metadata.deletion_timestamp.is_none() =>
            {
                steps.push(delete(p));
                if ordered {
                    return steps;
                }
            }
            Some(p) if ordered && !running_and_ready(p) => return steps,
            Some(_) => {}
        }
    }
    // 2. the condemned pods, highest ordinal first
    let condemned: Vec<&&Pod> = pods.range(replicas..).rev().map(|(_, p)| p).collect();
    for p in condemned {
        if p.metadata.deletion_timestamp.is_some() {
            if ordered {
                return steps;
            }
            continue;
        }
        steps.push(delete(p));
        if ordered {
            return steps;
        }
    }
    if !steps.is_empty() && !ordered {
        return steps;
    }
    // 3. rolling update from the highest ordinal down to the partition, one at a time
    if rolling {
        for n in (partition..replicas).rev() {
            let Some(p) = pods.get(&n) else { return steps };
            if hash(p) != Some(update) {
                if p.metadata.deletion_timestamp.is_none() {
                    steps.push(delete(p));
                }
                return steps;
            }
            if !running_and_ready(p) {
                return steps;
            }
        }
    }
    steps
}

/// The status from the pods as they are.
pub fn status(set: &StatefulSet, pods: &[&Pod], current: &str, update: &str) -> StatefulSetStatus {
    let count = |f: &dyn Fn(&Pod) -> bool| pods.iter().filter(|p| f(p)).count() as i32;
    let replicas = count(&|_| true);
    let ready = count(&|p| running_and_ready(p));
    let updated = count(&|p| hash(p) == Some(update));
    let mut current_revision = current.to_string();
    let mut current_replicas = count(&|p| hash(p) == Some(current));
    let wanted = set.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
    // upstream's completeRollingUpdate: every pod updated and ready
    if updated == wanted && ready == wanted && replicas == wanted {
        current_revision = update.to_string();
        current_replicas = updated;
    }
    StatefulSetStatus {
        observed_generation: set.metadata.generation,
        replicas,
        ready_replicas: Some(ready).filter(|n| *n > 0),
        available_replicas: Some(ready),
        current_replicas: Some(current_replicas).filter(|n| *n > 0),
        updated_replicas: Some(updated).filter(|n| *n > 0),
        current_revision: Some(current_revision),
        update_revision: Some(update.to_string()),
        collision_count: set.status.as_ref().and_then(|s| s.collision_count),
        conditions: set.status.as_ref().and_then(|s| s.conditions.clone()),
    }
}

/// Whether `persistentVolumeClaimRetentionPolicy.whenScaled` is `Delete`.
fn delete_claims_when_scaled(set: &StatefulSet) -> bool {
    let spec = set.spec.as_ref();
    let policy = spec.and_then(|s| s.persistent_volume_claim_retention_policy.as_ref());
    policy.and_then(|p| p.when_scaled.as_deref()) == Some("Delete")
}

/// Syncs one StatefulSet: claims its pods and revisions among those of its namespace (adopting
/// orphans its selector matches, pods only with one of its names; releasing owned ones that no
/// longer match), then its update revision, its pods and claims, old revisions, its status.
pub async fn reconcile(
    set: &StatefulSet,
    namespace_pods: &[&Pod],
    namespace_revisions: &[&ControllerRevision],
    api: &dyn StatefulSetApi,
) -> kube::Result<()> {
    if set.metadata.deletion_timestamp.is_some() {
        return Ok(());
    }
    let Ok(selector) = podutil::selector(set.spec.as_ref().map(|s| &s.selector)) else {
        // validation rejects such a selector; nothing can be claimed with it
        return Ok(());
    };
    let matches = |meta: &kube::api::ObjectMeta| selector.matches(podutil::labels(meta));
    let owner = identity::owner(set);
    // upstream's isMemberOf filter: a pod is a member only under one of the set's names
    let pods = claim::claim(
        &set.metadata,
        &owner,
        namespace_pods,
        |p: &Pod| matches(p.meta()) && identity::ordinal(set, p).is_some(),
        Box::new(|name, patch| Box::pin(async move { api.patch_pod(set, &name, patch).await })),
    )
    .await?;
    let pods: Vec<&Pod> = pods.iter().map(AsRef::as_ref).collect();
    let pods = pods.as_slice();
    let revisions = claim::claim(
        &set.metadata,
        &owner,
        namespace_revisions,
        |r: &ControllerRevision| matches(r.meta()),
        Box::new(|name, patch| {
            Box::pin(async move { api.patch_revision(set, &name, patch).await })
        }),
    )
    .await?;
    let revisions: Vec<&ControllerRevision> = revisions.iter().map(AsRef::as_ref).collect();
    let revisions = revisions.as_slice();
    let spec = set.spec.clone().unwrap_or_default();
    let ns = set.namespace().unwrap_or_default();
    let update_rev = revision::current(
        identity::owner(set),
        &ns,
        &set.name_any(),
        &spec.template,
        &spec.selector.match_labels.clone().unwrap_or_default(),
        set.status.as_ref().and_then(|s| s.collision_count),
        revisions,
    );
    if !matches!(update_rev, Current::Exists(_)) {
        api.save_revision(&update_rev).await?;
    }
    let update = revision::hash_of(update_rev.revision());
    // the current revision: the status's, if its revision still exists
    let recorded = set.status.as_ref().and_then(|s| s.current_revision.clone());
    let current_rev = revisions
        .iter()
        .find(|r| Some(r.name_any()) == recorded || Some(revision::hash_of(r)) == recorded);
    let current = current_rev.map_or(update.clone(), |r| revision::hash_of(r));
    let current_template: PodTemplateSpec = current_rev
        .and_then(|r| identity::revision_template(r))
        .unwrap_or_else(|| spec.template.clone());

    let by_ordinal: BTreeMap<i32, &Pod> = pods
        .iter()
        .filter_map(|p| Some((identity::ordinal(set, p)?, *p)))
        .collect();
    for step in plan(set, &by_ordinal, &current, &update) {
        match step {
            Step::Create { ordinal, updated } => {
                for claim in identity::claims(set, ordinal) {
                    api.ensure_claim(set, &claim).await?;
                }
                let (template, hash) = if updated {
                    (&spec.template, &update)
                } else {
                    (&current_template, &current)
                };
                api.create_pod(set, &identity::new_pod(set, template, ordinal, hash))
                    .await?;
            }
            Step::Delete { name, uid } => {
                let condemned = pods
                    .iter()
                    .find(|p| p.name_any() == name)
                    .and_then(|p| identity::ordinal(set, p))
                    .is_some_and(|n| n >= spec.replicas.unwrap_or(1));
                if condemned && delete_claims_when_scaled(set) {
                    // the garbage collector deletes the claims after their pod
                    let owner = OwnerReference {
                        api_version: "v1".into(),
                        kind: "Pod".into(),
                        name: name.clone(),
                        uid: uid.clone(),
                        controller: None,
                        block_owner_deletion: Some(true),
                    };
                    for t in spec.volume_claim_templates.iter().flatten() {
                        let claim = identity::claim_name(&t.name_any(), &name);
                        api.add_claim_owner(set, &claim, &owner).await?;
                    }
                }
                api.delete_pod(set, &name, &uid).await?
            }
        }
    }
    let in_use: Vec<String> = pods
        .iter()
        .filter_map(|p| hash(p).map(str::to_string))
        .collect();
    let mut keep = in_use.clone();
    keep.push(current.clone());
    let limit = spec.revision_history_limit.unwrap_or(10).max(0) as usize;
    for r in revision::to_prune(revisions, &update, &keep, limit) {
        api.delete_revision(&ns, &r.name_any()).await?;
    }
    let status = status(set, pods, &current, &update);
    if set.status.as_ref() != Some(&status) {
        api.update_status(set, &status).await?;
    }
    Ok(())
}

struct KubeStatefulSets {
    client: kube::Client,
    recorder: Recorder,
}

impl KubeStatefulSets {
    fn event(&self, set: &StatefulSet, type_: EventType, reason: &str, note: String) {
        let event = Event::new(type_, set.object_ref(&()), reason, note);
        self.recorder.record(event);
    }

    fn api<K: Resource<Scope = k8s_openapi::NamespaceResourceScope>>(
        &self,
        set: &StatefulSet,
    ) -> Api<K>
    where
        K::DynamicType: Default,
    {
        Api::namespaced(self.client.clone(), &set.namespace().unwrap_or_default())
    }
}

#[async_trait]
impl StatefulSetApi for KubeStatefulSets {
    async fn ensure_claim(
        &self,
        set: &StatefulSet,
        claim: &PersistentVolumeClaim,
    ) -> kube::Result<()> {
        let api: Api<PersistentVolumeClaim> = self.api(set);
        if api.get_metadata_opt(&claim.name_any()).await?.is_some() {
            return Ok(());
        }
        let (pod, name) = (claim.name_any(), set.name_any());
        match api.create(&PostParams::default(), claim).await {
            Ok(_) => {
                let note = format!("create Claim {pod} in StatefulSet {name} success");
                self.event(set, EventType::Normal, "SuccessfulCreate", note);
                Ok(())
            }
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
            Err(e) => Err(e),
        }
    }

    async fn add_claim_owner(
        &self,
        set: &StatefulSet,
        claim: &str,
        owner: &OwnerReference,
    ) -> kube::Result<()> {
        let api: Api<PersistentVolumeClaim> = self.api(set);
        let Some(mut pvc) = api.get_opt(claim).await? else {
            return Ok(());
        };
        let owners = pvc.metadata.owner_references.get_or_insert_default();
        if owners.iter().any(|o| o.uid == owner.uid) {
            return Ok(());
        }
        owners.push(owner.clone());
        // an update, as upstream's: the controller's role grants no patch on claims
        pvc.metadata.managed_fields = None;
        api.replace(claim, &PostParams::default(), &pvc)
            .await
            .map(|_| ())
    }

    async fn create_pod(&self, set: &StatefulSet, pod: &Pod) -> kube::Result<()> {
        let api: Api<Pod> = self.api(set);
        let (pod_name, name) = (pod.name_any(), set.name_any());
        match api.create(&PostParams::default(), pod).await {
            Ok(_) => {
                let note = format!("create Pod {pod_name} in StatefulSet {name} successful");
                self.event(set, EventType::Normal, "SuccessfulCreate", note);
                Ok(())
            }
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
            Err(e) => Err(e),
        }
    }

    async fn delete_pod(&self, set: &StatefulSet, pod: &str, uid: &str) -> kube::Result<()> {
        let api: Api<Pod> = self.api(set);
        let dp = DeleteParams {
            preconditions: Some(Preconditions {
                uid: Some(uid.into()),
                resource_version: None,
            }),
            ..Default::default()
        };
        match api.delete(pod, &dp).await {
            Ok(_) => {
                let note = format!(
                    "delete Pod {pod} in StatefulSet {} successful",
                    set.name_any()
                );
                self.event(set, EventType::Normal, "SuccessfulDelete", note);
                Ok(())
            }
            Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => Ok(()),
            Err(e) => Err(e),
        }
    }

    async fn patch_pod(&self, set: &StatefulSet, name: &str, patch: Value) -> kube::Result<()> {
        let api: Api<Pod> = self.api(set);
        api.patch(name, &PatchParams::default(), &Patch::Strategic(patch))
            .await
            .map(|_| ())
    }

    async fn patch_revision(
        &self,
        set: &StatefulSet,
        name: &str,
        patch: Value,
    ) -> kube::Result<()> {
        let api: Api<ControllerRevision> = self.api(set);
        api.patch(name, &PatchParams::default(), &Patch::Strategic(patch))
            .await
            .map(|_| ())
    }

    async fn save_revision(&self, current: &Current) -> kube::Result<()> {
        revision::save(&self.client, current).await
    }

    async fn delete_revision(&self, namespace: &str, name: &str) -> kube::Result<()> {
        revision::delete(&self.client, namespace, name).await
    }

    async fn update_status(
        &self,
        set: &StatefulSet,
        status: &StatefulSetStatus,
    ) -> kube::Result<()> {
        let api: Api<StatefulSet> = self.api(set);
        crate::status::update(&api, set, |s| s.status = Some(status.clone()))
            .await
            .map(|_| ())
    }
}

/// Runs the controller: StatefulSets are the keys; a pod or revision change queues its
/// controlling StatefulSet, an orphan's every StatefulSet whose selector matches it.
pub async fn run(ctx: Arc<Context>) -> Result<(), crate::Error> {
    let controller = Controller::new("statefulset");
    let sets = ctx.informers.get::<StatefulSet>();
    let pods = ctx.informers.get::<Pod>();
    let revisions = ctx.informers.get::<ControllerRevision>();
    let selector: fn(&StatefulSet) -> Option<&LabelSelector> =
        |o| o.spec.as_ref().map(|s| &s.selector);
    claim::queue_owners(&pods, sets.cache(), controller.queue(), selector);
    claim::queue_owners(&revisions, sets.cache(), controller.queue(), selector);
    pods.cache().wait_until_ready().await;
    revisions.cache().wait_until_ready().await;
    let api = Arc::new(KubeStatefulSets {
        client: ctx.client.clone(),
        recorder: ctx.recorder("statefulset-controller"),
    });
    let (pods, revisions) = (pods.cache().clone(), revisions.cache().clone());
    triggers::run_each(controller, &sets, move |set| {
        let api = api.clone();
        let ns = set.namespace().unwrap_or_default();
        let (pods, revisions) = (pods.namespaced(&ns), revisions.namespaced(&ns));
        async move {
            let pods: Vec<&Pod> = pods.iter().map(Arc::as_ref).collect();
            let revisions: Vec<&ControllerRevision> = revisions.iter().map(Arc::as_ref).collect();
            reconcile(&set, &pods, &revisions, api.as_ref()).await?;
            Ok::<_, kube::Error>(Action::AwaitChange)
        }
    })
    .await;
    Ok(())
}

#[cfg(test)]
#[path = "statefulset_tests.rs"]
mod tests;
