//! `pvc-protection`: a claim being deleted keeps its `kubernetes.io/pvc-protection` finalizer
//! (added on create by the `StorageObjectInUseProtection` admission plugin) while a scheduled
//! pod uses it, by `persistentVolumeClaim.claimName` or as its generic ephemeral volume's claim
//! (`<pod>-<volume>`, owned by the pod, unless the pod is shut down); then the finalizer is
//! removed and the claim goes (upstream's PVCProtectionController). A claim without the
//! finalizer that is not being deleted gets it. "Unused" is decided from the pod cache and
//! confirmed by a live list of the namespace's pods, as upstream does, so a pod the cache has
//! not seen yet still counts.

use std::sync::Arc;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use kube::api::{Api, ListParams, ObjectMeta, PostParams};
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};
use skiff_component_helpers::ephemeral;
use skiff_runtime::cache::Cache;
use skiff_runtime::controller::{Action, Controller};
use skiff_runtime::informer::Change;
use skiff_runtime::workqueue::WorkQueue;

use crate::{Context, podutil, triggers};

/// The finalizer this controller owns.
pub const FINALIZER: &str = "kubernetes.io/pvc-protection";

/// Whether the object is being deleted and still carries `finalizer` (upstream's
/// `IsDeletionCandidate`).
pub fn is_deletion_candidate(meta: &ObjectMeta, finalizer: &str) -> bool {
    meta.deletion_timestamp.is_some() && has_finalizer(meta, finalizer)
}

/// Whether the object is not being deleted and lacks `finalizer` (upstream's
/// `NeedToAddFinalizer`).
pub fn need_to_add_finalizer(meta: &ObjectMeta, finalizer: &str) -> bool {
    meta.deletion_timestamp.is_none() && !has_finalizer(meta, finalizer)
}

fn has_finalizer(meta: &ObjectMeta, finalizer: &str) -> bool {
    meta.finalizers
        .as_ref()
        .is_some_and(|f| f.iter().any(|x| x == finalizer))
}

/// `object` with `finalizer` added or removed.
pub fn with_finalizer<K: Resource + Clone>(object: &K, finalizer: &str, present: bool) -> K {
    let mut out = object.clone();
    let list = out.meta_mut().finalizers.get_or_insert_with(Vec::new);
    list.retain(|f| f != finalizer);
    if present {
        list.push(finalizer.into());
    }
    if list.is_empty() {
        out.meta_mut().finalizers = None;
    }
    out.meta_mut().managed_fields = None;
    out
}

/// The pod is done with its volumes or was force-deleted: deleted with a zero grace period.
fn is_shut_down(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_some()
        && pod.metadata.deletion_grace_period_seconds == Some(0)
}

/// Whether `pod` uses `claim` (upstream's `podUsesPVC`): only a scheduled pod counts (the
/// kubelet refuses to start one whose claim is being deleted); an ephemeral volume's claim
/// counts only if the pod owns it and is not shut down.
pub fn pod_uses_claim(pod: &Pod, claim: &PersistentVolumeClaim) -> bool {
    let spec = pod.spec.as_ref();
    if spec
        .and_then(|s| s.node_name.as_deref())
        .unwrap_or("")
        .is_empty()
    {
        return false;
    }
    let name = claim.name_any();
    spec.and_then(|s| s.volumes.as_ref())
        .into_iter()
        .flatten()
        .any(|v| {
            v.persistent_volume_claim
                .as_ref()
                .is_some_and(|s| s.claim_name == name)
                || (v.ephemeral.is_some()
                    && !is_shut_down(pod)
                    && ephemeral::volume_claim_name(pod, v) == name
                    && ephemeral::volume_is_for_pod(pod, claim).is_ok())
        })
}

/// The reads and writes this controller makes.
#[async_trait]
pub trait Claims: Send + Sync {
    /// The cached pods whose volumes name the claim `namespace/name`.
    fn cached_pods(&self, namespace: &str, name: &str) -> Vec<Arc<Pod>>;
    /// Every pod of the namespace, listed live.
    async fn list_pods(&self, namespace: &str) -> kube::Result<Vec<Pod>>;
    /// Updates the claim (its resourceVersion the precondition).
    async fn update(&self, claim: &PersistentVolumeClaim) -> kube::Result<()>;
}

/// Whether a pod uses the claim: the cache first, then a live list.
pub async fn is_being_used(claim: &PersistentVolumeClaim, api: &dyn Claims) -> kube::Result<bool> {
    let namespace = claim.namespace().unwrap_or_default();
    let cached = api.cached_pods(&namespace, &claim.name_any());
    if cached.iter().any(|p| pod_uses_claim(p, claim)) {
        return Ok(true);
    }
    let live = api.list_pods(&namespace).await?;
    Ok(live.iter().any(|p| pod_uses_claim(p, claim)))
}

/// Removes the finalizer of a deleted claim no pod uses; adds it to a claim that lacks it.
pub async fn reconcile(claim: &PersistentVolumeClaim, api: &dyn Claims) -> kube::Result<()> {
    if is_deletion_candidate(&claim.metadata, FINALIZER) {
        if !is_being_used(claim, api).await? {
            return api.update(&with_finalizer(claim, FINALIZER, false)).await;
        }
        tracing::debug!(claim = %claim.name_any(), "keeping a claim in use");
    }
    if need_to_add_finalizer(&claim.metadata, FINALIZER) {
        return api.update(&with_finalizer(claim, FINALIZER, true)).await;
    }
    Ok(())
}

struct KubeClaims {
    pods: Cache<Pod>,
    client: kube::Client,
}

#[async_trait]
impl Claims for KubeClaims {
    fn cached_pods(&self, namespace: &str, name: &str) -> Vec<Arc<Pod>> {
        triggers::pods_using_claim(&self.pods, namespace, name)
    }

    async fn list_pods(&self, namespace: &str) -> kube::Result<Vec<Pod>> {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        Ok(api.list(&ListParams::default()).await?.items)
    }

    async fn update(&self, claim: &PersistentVolumeClaim) -> kube::Result<()> {
        let namespace = claim.namespace().unwrap_or_default();
        let api: Api<PersistentVolumeClaim> = Api::namespaced(self.client.clone(), &namespace);
        match api
            .replace(&claim.name_any(), &PostParams::default(), claim)
            .await
        {
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
            other => other.map(|_| ()),
        }
    }
}

/// Queues the claims of a pod that may have stopped using them: deleted, terminated or not
/// scheduled (upstream's `enqueuePVCs`).
fn queue_claims_of(pod: &Pod, deleted: bool, queue: &WorkQueue<ObjectRef<PersistentVolumeClaim>>) {
    let unscheduled = pod
        .spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .unwrap_or("")
        .is_empty();
    if !deleted && !podutil::is_terminated(pod) && !unscheduled {
        return;
    }
    let namespace = pod.namespace().unwrap_or_default();
    for claim in triggers::claim_names(pod) {
        queue.add(ObjectRef::new(&claim).within(&namespace));
    }
}

/// Runs the controller (upstream's one worker).
pub async fn run(ctx: Arc<Context>) -> Result<(), crate::Error> {
    let claims = ctx.informers.get::<PersistentVolumeClaim>();
    let pods = ctx.informers.get::<Pod>();
    triggers::index_pods_by_claim(pods.cache());
    let controller =
        Controller::<ObjectRef<PersistentVolumeClaim>>::new("pvcprotection").workers(1);
    let queue = controller.queue().clone();
    claims.add_handler(move |change| {
        if let Change::Added(claim) | Change::Updated { new: claim, .. } = change {
            let meta = &claim.metadata;
            if need_to_add_finalizer(meta, FINALIZER) || is_deletion_candidate(meta, FINALIZER) {
                queue.add(ObjectRef::from_obj(claim.as_ref()));
            }
        }
    });
    let queue = controller.queue().clone();
    pods.add_handler(move |change| match change {
        Change::Added(pod) => queue_claims_of(pod, false, &queue),
        Change::Updated { old, new } => {
            queue_claims_of(new, false, &queue);
            // an update may hide a deleted pod replaced by one of the same name
            if old.metadata.uid != new.metadata.uid {
                queue_claims_of(old, true, &queue);
            }
        }
        Change::Deleted { last, .. } => queue_claims_of(last, true, &queue),
    });
    claims.cache().wait_until_ready().await;
    pods.cache().wait_until_ready().await;
    let api = Arc::new(KubeClaims {
        pods: pods.cache().clone(),
        client: ctx.client.clone(),
    });
    let cache = claims.cache().clone();
    controller
        .run(move |key| {
            let (api, claim) = (api.clone(), cache.get(&key));
            async move {
                if let Some(claim) = claim {
                    reconcile(&claim, api.as_ref()).await?;
                }
                Ok::<_, kube::Error>(Action::AwaitChange)
            }
        })
        .await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use parking_lot::Mutex;
    use serde_json::{Value, json};

    #[derive(Default)]
    struct Recording {
        cached: Vec<Pod>,
        live: Vec<Pod>,
        updated: Mutex<Vec<Option<Vec<String>>>>,
    }

    #[async_trait]
    impl Claims for Recording {
        fn cached_pods(&self, _: &str, name: &str) -> Vec<Arc<Pod>> {
            let uses = |p: &&Pod| triggers::claim_names(p).iter().any(|c| c == name);
            self.cached
                .iter()
                .filter(uses)
                .cloned()
                .map(Arc::new)
                .collect()
        }

        async fn list_pods(&self, _: &str) -> kube::Result<Vec<Pod>> {
            Ok(self.live.clone())
        }

        async fn update(&self, claim: &PersistentVolumeClaim) -> kube::Result<()> {
            self.updated.lock().push(claim.metadata.finalizers.clone());
            Ok(())
        }
    }

    fn claim(deleting: bool, finalizers: Value, extra: Value) -> PersistentVolumeClaim {
        let mut v =
            json!({"metadata": {"name": "data", "namespace": "ns", "finalizers": finalizers}});
        if deleting {
            v["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        }
        if let Some(owners) = extra.get("ownerReferences") {
            v["metadata"]["ownerReferences"] = owners.clone();
        }
        serde_json::from_value(v).unwrap()
    }

    fn pod(name: &str, node: Option<&str>, volume: Value, extra: Value) -> Pod {
        let mut v = json!({"metadata": {"name": name, "namespace": "ns", "uid": format!("uid-{name}")},
            "spec": {"nodeName": node, "containers": [], "volumes": [volume]}});
        if let Value::Object(m) = extra {
            for (k, x) in m {
                v["metadata"][k] = x;
            }
        }
        serde_json::from_value(v).unwrap()
    }

    fn by_name(name: &str) -> Value {
        json!({"name": "v", "persistentVolumeClaim": {"claimName": name}})
    }

    async fn after(claim: &PersistentVolumeClaim, api: &Recording) -> Vec<Option<Vec<String>>> {
        reconcile(claim, api).await.unwrap();
        api.updated.lock().clone()
    }

    #[tokio::test]
    async fn a_deleted_claim_is_released_only_once_no_scheduled_pod_uses_it() {
        let deleting = claim(true, json!([FINALIZER, "example.com/other"]), json!({}));
        // a running pod on a node uses it: kept
        let api = Recording {
            cached: vec![pod("web", Some("n1"), by_name("data"), json!({}))],
            ..Default::default()
        };
        assert!(after(&deleting, &api).await.is_empty());
        // the cache missed it, the live list has it: kept
        let api = Recording {
            live: vec![pod("web", Some("n1"), by_name("data"), json!({}))],
            ..Default::default()
        };
        assert!(after(&deleting, &api).await.is_empty());
        // unscheduled pods and pods using other claims do not count: released
        let api = Recording {
            cached: vec![pod("pending", None, by_name("data"), json!({}))],
            live: vec![pod("other", Some("n1"), by_name("logs"), json!({}))],
            ..Default::default()
        };
        assert_eq!(
            after(&deleting, &api).await,
            [Some(vec!["example.com/other".to_string()])]
        );
    }

    #[tokio::test]
    async fn an_ephemeral_claim_counts_for_its_owning_pod_until_it_shuts_down() {
        let owned = json!({"ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "web",
            "uid": "uid-web", "controller": true}]});
        let mut deleting = claim(true, json!([FINALIZER]), owned);
        deleting.metadata.name = Some("web-scratch".into());
        let eph = json!({"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}});
        let api = Recording {
            live: vec![pod("web", Some("n1"), eph.clone(), json!({}))],
            ..Default::default()
        };
        assert!(after(&deleting, &api).await.is_empty());
        let shut_down = json!({"deletionTimestamp": "2026-01-01T00:00:00Z",
            "deletionGracePeriodSeconds": 0});
        let api = Recording {
            live: vec![pod("web", Some("n1"), eph, shut_down)],
            ..Default::default()
        };
        assert_eq!(after(&deleting, &api).await, [None]);
    }

    #[tokio::test]
    async fn a_claim_missing_the_finalizer_gets_it_and_others_are_left_alone() {
        let api = Recording::default();
        let bare = claim(false, json!(null), json!({}));
        assert_eq!(
            after(&bare, &api).await,
            [Some(vec![FINALIZER.to_string()])]
        );
        let api = Recording::default();
        assert!(
            after(&claim(false, json!([FINALIZER]), json!({})), &api)
                .await
                .is_empty()
        );
        // being deleted without the finalizer: nothing to do
        assert!(
            after(&claim(true, json!([]), json!({})), &api)
                .await
                .is_empty()
        );
    }
}
