//! `ephemeral-volume`: the claim of every generic ephemeral volume (`spec.volumes[].ephemeral`)
//! of a pod that is not being deleted, made from the volume's `volumeClaimTemplate` (its labels,
//! annotations and spec) as `<pod>-<volume>` with the pod as its controlling owner, so that the
//! garbage collector deletes it with the pod (upstream's `pkg/controller/volume/ephemeral`).
//! A claim of that name the pod does not control is an error: the pod gets a `FailedBinding`
//! warning, as it does when a create fails, and is retried with backoff. Pods are looked at
//! when added (their spec cannot change) and when a claim one of them uses is deleted, so that
//! the claim is made again.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, Volume};
use kube::api::{Api, ObjectMeta, PostParams};
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};
use skiff_component_helpers::ephemeral::{volume_claim_name, volume_is_for_pod};
use skiff_runtime::cache::Cache;
use skiff_runtime::controller::{Action, Controller};
use skiff_runtime::events::Recorder;
use skiff_runtime::informer::Change;
use skiff_runtime::workqueue::WorkQueue;

use crate::events::Note;
use crate::{Context, podutil, triggers};

/// The component its events come from (upstream's event source).
pub const COMPONENT: &str = "ephemeral_volume";
/// The reason of the warning a pod gets when one of its claims cannot be made (upstream's
/// `events.FailedBinding`).
pub const FAILED_BINDING: &str = "FailedBinding";

/// Why a pod's ephemeral volume has no claim yet: the volume and what went wrong. The pod is
/// retried with backoff.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    pub volume: String,
    pub message: String,
}

impl Failure {
    /// The warning the pod gets (upstream's `ephemeral volume <volume>: <error>`).
    pub fn note(&self) -> Note {
        Note::warning(
            FAILED_BINDING,
            format!("ephemeral volume {}: {}", self.volume, self.message),
        )
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ephemeral volume {}: {}", self.volume, self.message)
    }
}

/// The reads and writes this controller makes.
#[async_trait]
pub trait Claims: Send + Sync {
    /// The cached claim `namespace/name`.
    fn claim(&self, namespace: &str, name: &str) -> Option<Arc<PersistentVolumeClaim>>;
    /// Creates the claim in `namespace`.
    async fn create(&self, namespace: &str, claim: &PersistentVolumeClaim) -> kube::Result<()>;
}

/// Whether the controller has work for the pod: it is not being deleted and has a generic
/// ephemeral volume (upstream's `enqueuePod` filter).
pub fn wants(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_none()
        && pod
            .spec
            .as_ref()
            .and_then(|s| s.volumes.as_ref())
            .is_some_and(|vs| vs.iter().any(|v| v.ephemeral.is_some()))
}

/// The claim the pod's ephemeral volume gets, or None for another kind of volume (or one
/// without a template, which validation refuses).
pub fn claim_for(pod: &Pod, volume: &Volume) -> Option<PersistentVolumeClaim> {
    let template = volume.ephemeral.as_ref()?.volume_claim_template.as_ref()?;
    let owner = podutil::controller_ref("v1", "Pod", &pod.metadata);
    let non_empty = |m: &Option<BTreeMap<String, String>>| m.clone().filter(|m| !m.is_empty());
    Some(PersistentVolumeClaim {
        metadata: ObjectMeta {
            name: Some(volume_claim_name(pod, volume)),
            namespace: pod.metadata.namespace.clone(),
            owner_references: Some(vec![owner]),
            labels: non_empty(&template.metadata.as_ref().and_then(|m| m.labels.clone())),
            annotations: non_empty(
                &template
                    .metadata
                    .as_ref()
                    .and_then(|m| m.annotations.clone()),
            ),
            ..Default::default()
        },
        spec: Some(template.spec.clone()),
        status: None,
    })
}

/// Makes the claims of the pod's ephemeral volumes that do not exist yet, in the order of its
/// volumes; stops at the first that fails (upstream's `syncHandler`).
pub async fn sync(pod: &Pod, api: &dyn Claims) -> Result<(), Failure> {
    if pod.metadata.deletion_timestamp.is_some() {
        return Ok(());
    }
    let namespace = pod.namespace().unwrap_or_default();
    for volume in pod.spec.iter().flat_map(|s| s.volumes.iter().flatten()) {
        let Some(claim) = claim_for(pod, volume) else {
            continue;
        };
        let fail = |message: String| Failure {
            volume: volume.name.clone(),
            message,
        };
        let name = claim.name_any();
        if let Some(existing) = api.claim(&namespace, &name) {
            volume_is_for_pod(pod, &existing).map_err(fail)?;
            continue;
        }
        if let Err(e) = api.create(&namespace, &claim).await {
            let why = match e {
                kube::Error::Api(s) => s.message,
                e => e.to_string(),
            };
            return Err(fail(format!("create PVC {name}: {why}")));
        }
    }
    Ok(())
}

struct KubeClaims {
    claims: Cache<PersistentVolumeClaim>,
    client: kube::Client,
}

#[async_trait]
impl Claims for KubeClaims {
    fn claim(&self, namespace: &str, name: &str) -> Option<Arc<PersistentVolumeClaim>> {
        self.claims.get(&ObjectRef::new(name).within(namespace))
    }

    async fn create(&self, namespace: &str, claim: &PersistentVolumeClaim) -> kube::Result<()> {
        let api: Api<PersistentVolumeClaim> = Api::namespaced(self.client.clone(), namespace);
        api.create(&PostParams::default(), claim).await.map(|_| ())
    }
}

fn queue_pod(pod: &Pod, queue: &WorkQueue<ObjectRef<Pod>>) {
    if wants(pod) {
        queue.add(ObjectRef::from_obj(pod));
    }
}

/// The pods to look at again once `claim` is deleted: those [`wants`] of the pods whose volumes
/// name it, from a cache [`triggers::index_pods_by_claim`] indexed (upstream's `onPVCDelete`).
pub fn pods_for_deleted_claim(pods: &Cache<Pod>, claim: &PersistentVolumeClaim) -> Vec<Arc<Pod>> {
    let namespace = claim.namespace().unwrap_or_default();
    let mut found = triggers::pods_using_claim(pods, &namespace, &claim.name_any());
    found.retain(|p| wants(p));
    found
}

/// Runs the controller (upstream's five workers, `--concurrent-ephemeralvolume-syncs`).
pub async fn run(ctx: Arc<Context>) -> Result<(), crate::Error> {
    let claims = ctx.informers.get::<PersistentVolumeClaim>();
    let pods = ctx.informers.get::<Pod>();
    triggers::index_pods_by_claim(pods.cache());
    let controller = Controller::<ObjectRef<Pod>>::new(COMPONENT);
    let queue = controller.queue().clone();
    pods.add_handler(move |change| match change {
        Change::Added(pod) => queue_pod(pod, &queue),
        // a pod's spec does not change, but a pod replaced by one of the same name may show as
        // an update when the watch missed the deletion
        Change::Updated { old, new } if old.metadata.uid != new.metadata.uid => {
            queue_pod(new, &queue)
        }
        _ => {}
    });
    let queue = controller.queue().clone();
    let by_claim = pods.cache().clone();
    claims.add_handler(move |change| {
        if let Change::Deleted { last, .. } = change {
            for pod in pods_for_deleted_claim(&by_claim, last) {
                queue.add(ObjectRef::from_obj(pod.as_ref()));
            }
        }
    });
    claims.cache().wait_until_ready().await;
    pods.cache().wait_until_ready().await;
    let api = Arc::new(KubeClaims {
        claims: claims.cache().clone(),
        client: ctx.client.clone(),
    });
    let recorder: Recorder = ctx.recorder(COMPONENT);
    let cache = pods.cache().clone();
    controller
        .run(move |key| {
            let (api, pod, recorder) = (api.clone(), cache.get(&key), recorder.clone());
            async move {
                if let Some(pod) = pod
                    && let Err(failure) = sync(&pod, api.as_ref()).await
                {
                    failure.note().record(&recorder, pod.object_ref(&()));
                    return Err(format!("pod {key}, {failure}"));
                }
                Ok(Action::AwaitChange)
            }
        })
        .await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use parking_lot::Mutex;
    use serde_json::{Value, json};

    use super::*;

    #[derive(Default)]
    struct Recording {
        existing: Vec<PersistentVolumeClaim>,
        refuse: Option<u16>,
        created: Mutex<Vec<PersistentVolumeClaim>>,
    }

    #[async_trait]
    impl Claims for Recording {
        fn claim(&self, namespace: &str, name: &str) -> Option<Arc<PersistentVolumeClaim>> {
            self.existing
                .iter()
                .find(|c| c.name_any() == name && c.namespace().as_deref() == Some(namespace))
                .cloned()
                .map(Arc::new)
        }

        async fn create(&self, _: &str, claim: &PersistentVolumeClaim) -> kube::Result<()> {
            if let Some(code) = self.refuse {
                let message = format!(
                    "persistentvolumeclaims {:?} is forbidden: quota",
                    claim.name_any()
                );
                return Err(kube::Error::Api(Box::new(
                    kube::core::Status::failure(&message, "Forbidden").with_code(code),
                )));
            }
            self.created.lock().push(claim.clone());
            Ok(())
        }
    }

    fn pod(volumes: Value, extra: Value) -> Pod {
        let mut v = json!({"metadata": {"name": "web", "namespace": "prod", "uid": "uid-web"},
            "spec": {"containers": [], "volumes": volumes}});
        if let Value::Object(m) = extra {
            for (k, x) in m {
                v["metadata"][k] = x;
            }
        }
        serde_json::from_value(v).unwrap()
    }

    fn ephemeral(name: &str) -> Value {
        json!({"name": name, "ephemeral": {"volumeClaimTemplate": {
            "metadata": {"labels": {"app": "web"}, "annotations": {"note": "scratch"}},
            "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "local",
                     "resources": {"requests": {"storage": "1Gi"}}}}}})
    }

    fn existing(name: &str, owner_uid: Option<&str>) -> PersistentVolumeClaim {
        let owners = owner_uid.map(|uid| {
            json!([{"apiVersion": "v1", "kind": "Pod", "name": "web", "uid": uid,
                    "controller": true}])
        });
        serde_json::from_value(json!({"metadata": {"name": name, "namespace": "prod",
            "ownerReferences": owners}}))
        .unwrap()
    }

    #[tokio::test]
    async fn each_ephemeral_volume_gets_a_claim_from_its_template_owned_by_the_pod() {
        let api = Recording::default();
        let volumes = json!([ephemeral("scratch"),
            {"name": "data", "persistentVolumeClaim": {"claimName": "shared"}},
            {"name": "tmp", "emptyDir": {}}, ephemeral("cache")]);
        sync(&pod(volumes, json!({})), &api).await.unwrap();
        let created = api.created.lock().clone();
        let got = serde_json::to_value(&created).unwrap();
        let owner = json!([{"apiVersion": "v1", "kind": "Pod", "name": "web", "uid": "uid-web",
                            "controller": true, "blockOwnerDeletion": true}]);
        assert_eq!(
            got,
            json!([
                {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                 "metadata": {"name": "web-scratch", "namespace": "prod",
                              "ownerReferences": owner,
                              "labels": {"app": "web"}, "annotations": {"note": "scratch"}},
                 "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "local",
                          "resources": {"requests": {"storage": "1Gi"}}}},
                {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                 "metadata": {"name": "web-cache", "namespace": "prod",
                              "ownerReferences": owner,
                              "labels": {"app": "web"}, "annotations": {"note": "scratch"}},
                 "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "local",
                          "resources": {"requests": {"storage": "1Gi"}}}}
            ])
        );
    }

    #[tokio::test]
    async fn a_claim_the_pod_owns_already_is_left_alone() {
        let api = Recording {
            existing: vec![existing("web-scratch", Some("uid-web"))],
            ..Default::default()
        };
        sync(&pod(json!([ephemeral("scratch")]), json!({})), &api)
            .await
            .unwrap();
        assert!(api.created.lock().is_empty());
    }

    #[tokio::test]
    async fn a_claim_of_that_name_not_owned_by_the_pod_fails_with_a_failed_binding_warning() {
        // a claim of someone else's, then the claim of an earlier pod of the same name
        for owner in [None, Some("uid-old-web")] {
            let api = Recording {
                existing: vec![existing("web-scratch", owner)],
                ..Default::default()
            };
            let volumes = json!([ephemeral("scratch"), ephemeral("cache")]);
            let failure = sync(&pod(volumes, json!({})), &api).await.unwrap_err();
            assert_eq!(
                failure.note(),
                Note::warning(
                    "FailedBinding",
                    "ephemeral volume scratch: PVC prod/web-scratch was not created for pod \
                     prod/web (pod is not owner)"
                        .into()
                )
            );
            // the volumes after the failing one wait for the retry
            assert!(api.created.lock().is_empty());
        }
    }

    #[tokio::test]
    async fn a_refused_create_names_the_claim_and_the_api_servers_message() {
        let api = Recording {
            refuse: Some(403),
            ..Default::default()
        };
        let failure = sync(&pod(json!([ephemeral("scratch")]), json!({})), &api)
            .await
            .unwrap_err();
        assert_eq!(
            failure.note().note,
            "ephemeral volume scratch: create PVC web-scratch: persistentvolumeclaims \
             \"web-scratch\" is forbidden: quota"
        );
    }

    #[tokio::test]
    async fn a_pod_being_deleted_gets_no_claims_and_is_not_queued() {
        let deleting = pod(
            json!([ephemeral("scratch")]),
            json!({"deletionTimestamp": "2026-01-01T00:00:00Z"}),
        );
        let api = Recording::default();
        sync(&deleting, &api).await.unwrap();
        assert!(api.created.lock().is_empty());
        assert!(!wants(&deleting));
        assert!(wants(&pod(json!([ephemeral("scratch")]), json!({}))));
        assert!(!wants(&pod(
            json!([{"name": "tmp", "emptyDir": {}}]),
            json!({})
        )));
    }

    #[test]
    fn a_deleted_claim_brings_back_the_pods_whose_ephemeral_volume_it_was() {
        let mut other = pod(json!([ephemeral("scratch")]), json!({}));
        other.metadata.name = Some("db".into());
        let deleting = {
            let mut p = pod(
                json!([ephemeral("scratch")]),
                json!({"deletionTimestamp": "2026-01-01T00:00:00Z"}),
            );
            p.metadata.namespace = Some("staging".into());
            p
        };
        let pods = Cache::from_objects([
            pod(json!([ephemeral("scratch")]), json!({})),
            other,
            deleting,
        ]);
        triggers::index_pods_by_claim(&pods);
        let names = |claim: &PersistentVolumeClaim| -> Vec<String> {
            pods_for_deleted_claim(&pods, claim)
                .iter()
                .map(|p| format!("{}/{}", p.namespace().unwrap(), p.name_any()))
                .collect()
        };
        assert_eq!(names(&existing("web-scratch", None)), ["prod/web"]);
        assert!(names(&existing("web-cache", None)).is_empty());
        // the pod being deleted in `staging` wants no claim again
        let mut gone = existing("web-scratch", None);
        gone.metadata.namespace = Some("staging".into());
        assert!(names(&gone).is_empty());
    }
}
