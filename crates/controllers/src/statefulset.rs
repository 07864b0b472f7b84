//! `statefulset`: the pods `<set>-<start> … <set>-<start+replicas-1>` of each StatefulSet
//! (`spec.ordinals.start`, 0 by default; upstream's StatefulSetController). OrderedReady creates
//! one pod at a time, each Running, Ready and available (`minReadySeconds`) before the next, and
//! scales down from the highest ordinal; Parallel does all at once. A pod's claims
//! (`volumeClaimTemplates`) are created before it and never deleted here: the retention policy
//! puts controller references on them for the garbage collector ([`crate::statefulset_claims`]),
//! the set's (`whenDeleted: Delete`) or, before a pod being scaled away is deleted, the pod's
//! (`whenScaled: Delete`), and moves them when the policy changes. Updates go through
//! ControllerRevisions: RollingUpdate replaces pods from the highest ordinal down to `partition`,
//! up to `maxUnavailable` at a time (upstream's MaxUnavailableStatefulSet), waiting while more
//! pods than that are unavailable; OnDelete replaces only deleted pods. Each sync first claims
//! pods and revisions ([`crate::claim`]): an orphan pod the selector matches that bears one of the
//! set's names is adopted rather than created again.

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
use crate::revision::{self, Current};
use crate::statefulset_claims::{self as retention, ClaimPod};
pub use crate::statefulset_plan::{Rev, Step, View, Why, plan, requeue, status};
use crate::statefulset_pods as identity;
use crate::{claim, podutil, triggers};

/// What can fail in a sync; either way the set is synced again with backoff.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A read or write through the API server failed.
    #[error(transparent)]
    Api(#[from] kube::Error),
    /// A claim a pod needs is being deleted: the pod is not created until it is gone
    /// (upstream's `createPersistentVolumeClaims`).
    #[error("pvc {0} is being deleted")]
    ClaimTerminating(String),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Rewrites a claim's owner references: given the claim as it is, the references it should
/// have, or `None` when it needs no write.
pub type OwnerFix<'a> =
    dyn Fn(&PersistentVolumeClaim) -> Option<Vec<OwnerReference>> + Send + Sync + 'a;

/// The writes this controller makes.
#[async_trait]
pub trait StatefulSetApi: Send + Sync {
    /// Creates a claim of pod `pod`; one that exists already is not an error.
    async fn create_claim(
        &self,
        set: &StatefulSet,
        pod: &str,
        claim: &PersistentVolumeClaim,
    ) -> kube::Result<()>;
    /// Reads the claim and, if `fix` asks for it, updates its owner references (a missing claim
    /// is not an error).
    async fn update_claim_owners(
        &self,
        set: &StatefulSet,
        claim: &str,
        fix: &OwnerFix<'_>,
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
    /// Records an event about the set that the sync itself decides on (a conflicting claim
    /// controller, a pod not created).
    fn event(&self, set: &StatefulSet, type_: EventType, reason: &str, note: String);
}

/// The namespace's objects a sync looks at.
pub struct Namespace<'a> {
    pub pods: &'a [&'a Pod],
    pub revisions: &'a [&'a ControllerRevision],
    pub claims: &'a [&'a PersistentVolumeClaim],
}

/// Creates the claims of the pod with ordinal `n` that do not exist; a claim being deleted is
/// an error (reported as the pod's failed creation when `creating`).
async fn create_claims(
    set: &StatefulSet,
    n: i32,
    view: &View<'_>,
    creating: bool,
    api: &dyn StatefulSetApi,
) -> Result<()> {
    let pod = identity::pod_name(set, n);
    for claim in identity::claims(set, n) {
        let name = claim.name_any();
        match view.claims.get(name.as_str()) {
            None => api.create_claim(set, &pod, &claim).await?,
            Some(c) if c.metadata.deletion_timestamp.is_some() => {
                let err = Error::ClaimTerminating(name);
                if creating {
                    let note = format!(
                        "create Pod {pod} in StatefulSet {} failed error: {err}",
                        set.name_any()
                    );
                    api.event(set, EventType::Warning, "FailedCreate", note);
                }
                return Err(err);
            }
            Some(_) => {}
        }
    }
    Ok(())
}

/// The current and update revisions and their templates.
struct Revisions<'a> {
    current: Rev<'a>,
    update: Rev<'a>,
    current_template: &'a PodTemplateSpec,
    update_template: &'a PodTemplateSpec,
}

/// Makes the writes of `steps` in order, stopping at the first that fails; counts the pods
/// deleted for the rollout in `update_deletions`.
async fn apply(
    set: &StatefulSet,
    steps: Vec<Step>,
    view: &View<'_>,
    revs: &Revisions<'_>,
    api: &dyn StatefulSetApi,
    update_deletions: &mut i32,
) -> Result<()> {
    for step in steps {
        match step {
            Step::Create { ordinal, updated } => {
                create_claims(set, ordinal, view, true, api).await?;
                let (template, rev) = if updated {
                    (revs.update_template, revs.update)
                } else {
                    (revs.current_template, revs.current)
                };
                api.create_pod(set, &identity::new_pod(set, template, ordinal, rev.name))
                    .await?;
            }
            Step::CreateClaims { ordinal } => {
                create_claims(set, ordinal, view, false, api).await?;
            }
            Step::SetClaimOwners {
                claim,
                pod,
                uid,
                in_range,
                conflicting,
            } => {
                if conflicting {
                    let note = format!(
                        "PersistentVolumeClaim {claim} has a conflicting OwnerReference that \
                         acts as a manging controller, the retention policy is ignored for this \
                         claim"
                    );
                    api.event(set, EventType::Warning, "ConflictingController", note);
                }
                let pod = ClaimPod {
                    name: &pod,
                    uid: &uid,
                    in_range,
                };
                let fix = |c: &PersistentVolumeClaim| {
                    (!retention::up_to_date(c, set, &pod))
                        .then(|| retention::wanted_owners(c, set, &pod))
                };
                api.update_claim_owners(set, &claim, &fix).await?;
            }
            Step::Delete { name, uid, why } => {
                api.delete_pod(set, &name, &uid).await?;
                if why == Why::Update {
                    *update_deletions += 1;
                }
            }
        }
    }
    Ok(())
}

/// Syncs one StatefulSet: claims its pods and revisions among those of its namespace (adopting
/// orphans its selector matches, pods only with one of its names; releasing owned ones that no
/// longer match), then its update revision, its pods and claims, old revisions, its status.
/// Asks for another look when a pod is yet to become available.
pub async fn reconcile(
    set: &StatefulSet,
    namespace: &Namespace<'_>,
    now: jiff::Timestamp,
    api: &dyn StatefulSetApi,
) -> Result<Action> {
    if set.metadata.deletion_timestamp.is_some() {
        return Ok(Action::AwaitChange);
    }
    let Ok(selector) = podutil::selector(set.spec.as_ref().map(|s| &s.selector)) else {
        // validation rejects such a selector; nothing can be claimed with it
        return Ok(Action::AwaitChange);
    };
    let matches = |meta: &kube::api::ObjectMeta| selector.matches(podutil::labels(meta));
    let owner = identity::owner(set);
    // upstream's isMemberOf filter: a pod is a member only under one of the set's names
    let pods = claim::claim(
        &set.metadata,
        &owner,
        namespace.pods,
        |p: &Pod| matches(p.meta()) && identity::ordinal(set, p).is_some(),
        Box::new(|name, patch| Box::pin(async move { api.patch_pod(set, &name, patch).await })),
    )
    .await?;
    let pods: Vec<&Pod> = pods.iter().map(AsRef::as_ref).collect();
    let pods = pods.as_slice();
    let revisions = claim::claim(
        &set.metadata,
        &owner,
        namespace.revisions,
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
    let update_name = update_rev.revision().name_any();
    let update_hash = revision::hash_of(update_rev.revision());
    let update = Rev {
        name: &update_name,
        hash: &update_hash,
    };
    // the current revision: the status's, if its revision still exists
    let recorded = set.status.as_ref().and_then(|s| s.current_revision.clone());
    let current_rev = revisions
        .iter()
        .find(|r| Some(r.name_any()) == recorded || Some(revision::hash_of(r)) == recorded);
    let (current_name, current_hash) = current_rev.map_or_else(
        || (update_name.clone(), update_hash.clone()),
        |r| (r.name_any(), revision::hash_of(r)),
    );
    let current = Rev {
        name: &current_name,
        hash: &current_hash,
    };
    let current_template: PodTemplateSpec = current_rev
        .and_then(|r| identity::revision_template(r))
        .unwrap_or_else(|| spec.template.clone());

    let view = View {
        pods: pods
            .iter()
            .filter_map(|p| Some((identity::ordinal(set, p)?, *p)))
            .collect(),
        claims: namespace
            .claims
            .iter()
            .filter_map(|c| Some((c.metadata.name.as_deref()?, *c)))
            .collect(),
        now,
    };
    let revs = Revisions {
        current,
        update,
        current_template: &current_template,
        update_template: &spec.template,
    };
    let mut update_deletions = 0;
    let steps = plan(set, &view, current, update);
    let applied = apply(set, steps, &view, &revs, api, &mut update_deletions).await;
    // the status is written even when a step failed (upstream's performUpdate)
    let status = status(set, &view, current, update, update_deletions);
    if set.status.as_ref() != Some(&status) {
        api.update_status(set, &status).await?;
    }
    // the revisions live pods are at, and the current one, are kept (upstream's truncateHistory)
    let keep: Vec<String> = revisions
        .iter()
        .filter(|r| {
            let (name, hash) = (r.name_any(), revision::hash_of(r));
            let rev = Rev {
                name: &name,
                hash: &hash,
            };
            name == current.name || pods.iter().any(|p| rev.has(p))
        })
        .map(|r| revision::hash_of(r))
        .collect();
    let limit = spec.revision_history_limit.unwrap_or(10).max(0) as usize;
    let mut pruned = Ok(());
    for r in revision::to_prune(revisions, update.hash, &keep, limit) {
        pruned = api.delete_revision(&ns, &r.name_any()).await;
        if pruned.is_err() {
            break;
        }
    }
    // a failed step is the error to report, after the status and the history are done
    applied?;
    pruned?;
    Ok(requeue(set, &view, &status).map_or(Action::AwaitChange, Action::RequeueAfter))
}

struct KubeStatefulSets {
    client: kube::Client,
    recorder: Recorder,
}

impl KubeStatefulSets {
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

/// Conflicts an owner update retries before giving up (client-go's `retry.DefaultBackoff`).
const CLAIM_UPDATE_ATTEMPTS: usize = 5;

#[async_trait]
impl StatefulSetApi for KubeStatefulSets {
    async fn create_claim(
        &self,
        set: &StatefulSet,
        pod: &str,
        claim: &PersistentVolumeClaim,
    ) -> kube::Result<()> {
        let api: Api<PersistentVolumeClaim> = self.api(set);
        let (claim_name, name) = (claim.name_any(), set.name_any());
        match api.create(&PostParams::default(), claim).await {
            Ok(_) => {
                let note =
                    format!("create Claim {claim_name} Pod {pod} in StatefulSet {name} success");
                self.event(set, EventType::Normal, "SuccessfulCreate", note);
                Ok(())
            }
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
            Err(e) => {
                let note = format!(
                    "create Claim {claim_name} for Pod {pod} in StatefulSet {name} failed error: \
                     failed to create PVC {claim_name}: {e}"
                );
                self.event(set, EventType::Warning, "FailedCreate", note);
                Err(e)
            }
        }
    }

    async fn update_claim_owners(
        &self,
        set: &StatefulSet,
        claim: &str,
        fix: &OwnerFix<'_>,
    ) -> kube::Result<()> {
        let api: Api<PersistentVolumeClaim> = self.api(set);
        let mut attempt = 0;
        loop {
            let Some(mut pvc) = api.get_opt(claim).await? else {
                return Ok(());
            };
            let Some(owners) = fix(&pvc) else {
                return Ok(());
            };
            pvc.metadata.owner_references = Some(owners).filter(|o| !o.is_empty());
            // an update, as upstream's: the controller's role grants no patch on claims
            pvc.metadata.managed_fields = None;
            match api.replace(claim, &PostParams::default(), &pvc).await {
                Err(kube::Error::Api(s))
                    if s.code == 409 && attempt + 1 < CLAIM_UPDATE_ATTEMPTS =>
                {
                    attempt += 1;
                }
                result => return result.map(|_| ()),
            }
        }
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
            Err(e) => {
                let note = format!("create Pod {pod_name} in StatefulSet {name} failed error: {e}");
                self.event(set, EventType::Warning, "FailedCreate", note);
                Err(e)
            }
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
        let name = set.name_any();
        match api.delete(pod, &dp).await {
            Ok(_) => {
                let note = format!("delete Pod {pod} in StatefulSet {name} successful");
                self.event(set, EventType::Normal, "SuccessfulDelete", note);
                Ok(())
            }
            Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => Ok(()),
            Err(e) => {
                let note = format!("delete Pod {pod} in StatefulSet {name} failed error: {e}");
                self.event(set, EventType::Warning, "FailedDelete", note);
                Err(e)
            }
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

    fn event(&self, set: &StatefulSet, type_: EventType, reason: &str, note: String) {
        let event = Event::new(type_, set.object_ref(&()), reason, note);
        self.recorder.record(event);
    }
}

/// Runs the controller: StatefulSets are the keys; a pod or revision change queues its
/// controlling StatefulSet, an orphan's every StatefulSet whose selector matches it. Claims are
/// read from their informer, as upstream's claim lister.
pub async fn run(ctx: Arc<Context>) -> Result<(), crate::Error> {
    let controller = Controller::new("statefulset");
    let sets = ctx.informers.get::<StatefulSet>();
    let pods = ctx.informers.get::<Pod>();
    let revisions = ctx.informers.get::<ControllerRevision>();
    let claims = ctx.informers.get::<PersistentVolumeClaim>();
    claim::index_by_controller(pods.cache());
    claim::index_by_controller(revisions.cache());
    let selector: fn(&StatefulSet) -> Option<&LabelSelector> =
        |o| o.spec.as_ref().map(|s| &s.selector);
    claim::queue_owners(&pods, sets.cache(), controller.queue(), selector);
    claim::queue_owners(&revisions, sets.cache(), controller.queue(), selector);
    pods.cache().wait_until_ready().await;
    revisions.cache().wait_until_ready().await;
    claims.cache().wait_until_ready().await;
    let api = Arc::new(KubeStatefulSets {
        client: ctx.client.clone(),
        recorder: ctx.recorder("statefulset-controller"),
    });
    let (pods, revisions, claims) = (
        pods.cache().clone(),
        revisions.cache().clone(),
        claims.cache().clone(),
    );
    triggers::run_each(controller, &sets, move |set| {
        let api = api.clone();
        let ns = set.namespace().unwrap_or_default();
        let (pods, revisions, claims) = (
            claim::claimable_in(&set.metadata, &pods),
            claim::claimable_in(&set.metadata, &revisions),
            claims.namespaced(&ns),
        );
        async move {
            let pods: Vec<&Pod> = pods.iter().map(Arc::as_ref).collect();
            let revisions: Vec<&ControllerRevision> = revisions.iter().map(Arc::as_ref).collect();
            let claims: Vec<&PersistentVolumeClaim> = claims.iter().map(Arc::as_ref).collect();
            let namespace = Namespace {
                pods: &pods,
                revisions: &revisions,
                claims: &claims,
            };
            reconcile(&set, &namespace, jiff::Timestamp::now(), api.as_ref()).await
        }
    })
    .await;
    Ok(())
}

#[cfg(test)]
#[path = "statefulset_tests.rs"]
mod tests;
