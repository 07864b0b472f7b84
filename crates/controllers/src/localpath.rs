//! `local-path-provisioner`: Skiff's built-in dynamic provisioner for node-local volumes (the
//! role of k3s's local-path provisioner), behaving as upstream's external provisioners built on
//! `sig-storage-lib-external-provisioner` do. A Pending claim that the binder handed to
//! [`PROVISIONER`] (`volume.kubernetes.io/storage-provisioner`) and that the scheduler placed
//! (`volume.kubernetes.io/selected-node`) gets a PersistentVolume `pvc-<claim uid>`: a
//! `hostPath` directory under the directory that node's kubelet publishes
//! ([`ANN_NODE_DIR`]), with node affinity to that node, bound to the claim through its
//! `claimRef`; the binder then binds the claim. Only API objects are written here: the node's
//! kubelet creates the directory when a pod mounts it and removes it (then the volume) once the
//! volume is `Released` with reclaim `Delete`.
//!
//! A class of this provisioner with `volumeBindingMode: Immediate` is refused with a
//! `ProvisioningFailed` event: a node-local volume needs the node the scheduler picks. A claim
//! placed on a node that is gone or publishes no directory is handed back to the scheduler, as
//! the library reschedules: its `selected-node` is removed, so that the scheduler picks again.

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::{
    HostPathVolumeSource, Node, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm,
    ObjectReference, PersistentVolume, PersistentVolumeClaim, PersistentVolumeSpec,
    VolumeNodeAffinity,
};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{Api, ObjectMeta, PostParams};
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};
use skiff_component_helpers::local_path::{ANN_NODE_DIR, LABEL_NODE, is_label_value, volume_dir};
/// The default class's name and its provisioner, for what applies the class (`skiff server`).
pub use skiff_component_helpers::local_path::{CLASS, PROVISIONER};
use skiff_component_helpers::volume::{
    self as helpers, ANN_BETA_STORAGE_PROVISIONER, ANN_DYNAMICALLY_PROVISIONED, ANN_SELECTED_NODE,
    ANN_STORAGE_PROVISIONER,
};
use skiff_runtime::cache::Cache;
use skiff_runtime::controller::{Action, Controller};
use skiff_runtime::events::Recorder;
use skiff_runtime::informer::Change;

use crate::events::Note;
use crate::{Context, triggers};

/// The controller's event source: the provisioner's name, as the library's recorder reports.
pub const COMPONENT: &str = PROVISIONER;
/// The label nodes carry with their host name, which the volume's node affinity requires.
pub const HOSTNAME_LABEL: &str = "kubernetes.io/hostname";

/// What to do with a claim.
#[derive(Debug, Clone, PartialEq)]
pub enum Plan {
    /// Not this provisioner's, already provisioned, bound, or not placed on a node yet:
    /// nothing until the claim changes.
    Skip,
    /// Provisioning cannot proceed (`ProvisioningFailed` with this cause); retried with
    /// backoff, and when the claim or its node changes.
    Fail(String),
    /// Provisioning cannot proceed on the selected node (`ProvisioningFailed` with this
    /// cause): the claim's `selected-node` is removed (the library's `ProvisioningReschedule`).
    Reschedule(String),
    /// Create this volume.
    Create(Box<PersistentVolume>),
}

fn annotation<'a, K: Resource>(object: &'a K, key: &str) -> Option<&'a str> {
    object
        .meta()
        .annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .map(String::as_str)
}

/// Whether the binder handed the claim to this provisioner and it still waits for a volume
/// (the library's `shouldProvision`, less the class checks [`plan`] makes).
pub fn is_ours(claim: &PersistentVolumeClaim) -> bool {
    let unbound = claim
        .spec
        .as_ref()
        .and_then(|s| s.volume_name.as_deref())
        .unwrap_or("")
        .is_empty();
    let provisioner = annotation(claim, ANN_STORAGE_PROVISIONER)
        .or_else(|| annotation(claim, ANN_BETA_STORAGE_PROVISIONER));
    unbound && provisioner == Some(PROVISIONER) && claim.metadata.deletion_timestamp.is_none()
}

/// The name of the volume provisioned for a claim (the library's `pvc-<claim uid>`).
pub fn volume_name(claim: &PersistentVolumeClaim) -> String {
    format!("pvc-{}", claim.metadata.uid.as_deref().unwrap_or(""))
}

/// What to do for `claim` of class `class`; `node` finds a Node by name.
pub fn plan(
    claim: &PersistentVolumeClaim,
    class: Option<&StorageClass>,
    node: impl Fn(&str) -> Option<Arc<Node>>,
) -> Plan {
    if !is_ours(claim) {
        return Plan::Skip;
    }
    let class_name = helpers::claim_class(claim);
    let Some(class) = class else {
        return Plan::Fail(format!(
            "storageclass.storage.k8s.io {class_name:?} not found"
        ));
    };
    if class.provisioner != PROVISIONER {
        return Plan::Skip;
    }
    let Some(selected) = annotation(claim, ANN_SELECTED_NODE) else {
        if helpers::is_delay_binding(class) {
            // the scheduler has not placed the claim's first pod yet
            return Plan::Skip;
        }
        return Plan::Fail(format!(
            "{PROVISIONER} makes node-local volumes and needs the node the scheduler selects: \
             use volumeBindingMode WaitForFirstConsumer"
        ));
    };
    let Some(node) = node(selected) else {
        return Plan::Reschedule(format!("nodes {selected:?} not found"));
    };
    let Some(base) = annotation(node.as_ref(), ANN_NODE_DIR).filter(|d| d.starts_with('/')) else {
        return Plan::Reschedule(format!(
            "node {selected:?} does not publish its local-path directory (annotation \
             {ANN_NODE_DIR}): its kubelet is not Skiff's or is older"
        ));
    };
    match build_volume(claim, class, &node, base) {
        Ok(volume) => Plan::Create(Box::new(volume)),
        Err(message) => Plan::Fail(message),
    }
}

/// The volume for `claim` of `class` on `node`, its directory under `base` (the node's
/// [`ANN_NODE_DIR`]), as the library's `provisionClaimOperation` completes what the
/// provisioner returns.
pub fn build_volume(
    claim: &PersistentVolumeClaim,
    class: &StorageClass,
    node: &Node,
    base: &str,
) -> Result<PersistentVolume, String> {
    let spec = claim.spec.clone().unwrap_or_default();
    if spec.volume_mode.as_deref() == Some("Block") {
        return Err(format!("{PROVISIONER} does not provision block volumes"));
    }
    let Some(storage) = spec
        .resources
        .as_ref()
        .and_then(|r| r.requests.as_ref())
        .and_then(|r| r.get("storage"))
    else {
        return Err("the claim requests no storage".into());
    };
    let name = volume_name(claim);
    let namespace = claim.namespace().unwrap_or_default();
    let node_name = node.name_any();
    let hostname = node
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(HOSTNAME_LABEL))
        .cloned()
        .unwrap_or_else(|| node_name.clone());
    let labels = is_label_value(&node_name)
        .then(|| BTreeMap::from([(LABEL_NODE.to_string(), node_name.clone())]));
    Ok(PersistentVolume {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            labels,
            annotations: Some(BTreeMap::from([(
                ANN_DYNAMICALLY_PROVISIONED.to_string(),
                PROVISIONER.to_string(),
            )])),
            ..Default::default()
        },
        spec: Some(PersistentVolumeSpec {
            capacity: Some(BTreeMap::from([("storage".to_string(), storage.clone())])),
            access_modes: spec.access_modes.clone(),
            volume_mode: Some(spec.volume_mode.unwrap_or_else(|| "Filesystem".into())),
            claim_ref: Some(ObjectReference {
                api_version: Some("v1".into()),
                kind: Some("PersistentVolumeClaim".into()),
                namespace: Some(namespace.clone()),
                name: Some(claim.name_any()),
                uid: claim.metadata.uid.clone(),
                resource_version: claim.metadata.resource_version.clone(),
                ..Default::default()
            }),
            persistent_volume_reclaim_policy: Some(
                class
                    .reclaim_policy
                    .clone()
                    .unwrap_or_else(|| "Delete".into()),
            ),
            storage_class_name: class.metadata.name.clone(),
            mount_options: class.mount_options.clone(),
            host_path: Some(HostPathVolumeSource {
                path: volume_dir(base, &name, &namespace, &claim.name_any()),
                type_: Some("DirectoryOrCreate".into()),
            }),
            node_affinity: Some(VolumeNodeAffinity {
                required: Some(NodeSelector {
                    node_selector_terms: vec![NodeSelectorTerm {
                        match_expressions: Some(vec![NodeSelectorRequirement {
                            key: HOSTNAME_LABEL.into(),
                            operator: "In".into(),
                            values: Some(vec![hostname]),
                        }]),
                        ..Default::default()
                    }],
                }),
            }),
            ..Default::default()
        }),
        status: None,
    })
}

/// What the controller reads and writes.
#[async_trait]
pub trait Cluster: Send + Sync {
    fn class(&self, name: &str) -> Option<Arc<StorageClass>>;
    fn node(&self, name: &str) -> Option<Arc<Node>>;
    fn volume_exists(&self, name: &str) -> bool;
    /// Creates the volume; an existing one of the same name is success (made before).
    async fn create_volume(&self, volume: &PersistentVolume) -> kube::Result<()>;
    /// Removes the claim's `selected-node` (an update over the cached claim, as the library's
    /// `rescheduleProvisioning`).
    async fn unselect_node(&self, claim: &PersistentVolumeClaim) -> kube::Result<()>;
    fn event(&self, regarding: ObjectReference, note: Note);
}

/// Why a sync failed (retried with backoff).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("provisioning claim {claim}: {message}")]
    Provision { claim: String, message: String },
    #[error("rescheduling claim {claim}: removing its selected node: {source}")]
    Reschedule {
        claim: String,
        #[source]
        source: kube::Error,
    },
    #[error("creating persistentvolume {volume} for claim {claim}: {source}")]
    Create {
        claim: String,
        volume: String,
        #[source]
        source: kube::Error,
    },
}

fn failed(class: &str, cause: &str) -> Note {
    Note::warning(
        "ProvisioningFailed",
        format!("failed to provision volume with StorageClass {class:?}: {cause}"),
    )
}

/// One claim's sync.
pub async fn sync(c: &dyn Cluster, claim: &PersistentVolumeClaim) -> Result<(), Error> {
    if !is_ours(claim) || c.volume_exists(&volume_name(claim)) {
        return Ok(());
    }
    let class_name = helpers::claim_class(claim).to_string();
    let key = format!(
        "{}/{}",
        claim.namespace().unwrap_or_default(),
        claim.name_any()
    );
    let class = c.class(&class_name);
    match plan(claim, class.as_deref(), |n| c.node(n)) {
        Plan::Skip => Ok(()),
        Plan::Fail(message) => {
            c.event(claim.object_ref(&()), failed(&class_name, &message));
            Err(Error::Provision {
                claim: key,
                message,
            })
        }
        Plan::Reschedule(message) => {
            c.event(claim.object_ref(&()), failed(&class_name, &message));
            // once the node is removed, the claim waits for the scheduler's next choice
            c.unselect_node(claim)
                .await
                .map_err(|source| Error::Reschedule { claim: key, source })
        }
        Plan::Create(volume) => {
            c.event(
                claim.object_ref(&()),
                Note::normal(
                    "Provisioning",
                    format!("External provisioner is provisioning volume for claim {key:?}"),
                ),
            );
            let name = volume.name_any();
            if let Err(source) = c.create_volume(&volume).await {
                c.event(
                    claim.object_ref(&()),
                    failed(&class_name, &source.to_string()),
                );
                return Err(Error::Create {
                    claim: key,
                    volume: name,
                    source,
                });
            }
            c.event(
                claim.object_ref(&()),
                Note::normal(
                    "ProvisioningSucceeded",
                    format!("Successfully provisioned volume {name}"),
                ),
            );
            Ok(())
        }
    }
}

struct KubeCluster {
    classes: Cache<StorageClass>,
    nodes: Cache<Node>,
    volumes: Cache<PersistentVolume>,
    client: kube::Client,
    recorder: Recorder,
}

#[async_trait]
impl Cluster for KubeCluster {
    fn class(&self, name: &str) -> Option<Arc<StorageClass>> {
        self.classes.get(&ObjectRef::new(name))
    }

    fn node(&self, name: &str) -> Option<Arc<Node>> {
        self.nodes.get(&ObjectRef::new(name))
    }

    fn volume_exists(&self, name: &str) -> bool {
        self.volumes.get(&ObjectRef::new(name)).is_some()
    }

    async fn create_volume(&self, volume: &PersistentVolume) -> kube::Result<()> {
        let api: Api<PersistentVolume> = Api::all(self.client.clone());
        match api.create(&PostParams::default(), volume).await {
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
            other => other.map(|_| ()),
        }
    }

    async fn unselect_node(&self, claim: &PersistentVolumeClaim) -> kube::Result<()> {
        let api: Api<PersistentVolumeClaim> =
            Api::namespaced(self.client.clone(), &claim.namespace().unwrap_or_default());
        let mut unselected = claim.clone();
        if let Some(a) = unselected.metadata.annotations.as_mut() {
            a.remove(ANN_SELECTED_NODE);
        }
        unselected.metadata.managed_fields = None;
        api.replace(&claim.name_any(), &PostParams::default(), &unselected)
            .await
            .map(|_| ())
    }

    fn event(&self, regarding: ObjectReference, note: Note) {
        note.record(&self.recorder, regarding);
    }
}

/// Runs the controller until the process stops: claims are synced when they change, and the
/// claims placed on a node when that node changes (its directory annotation may have come).
pub async fn run(ctx: Arc<Context>) -> Result<(), crate::Error> {
    let claims = ctx.informers.get::<PersistentVolumeClaim>();
    let classes = ctx.informers.get::<StorageClass>();
    let nodes = ctx.informers.get::<Node>();
    let volumes = ctx.informers.get::<PersistentVolume>();
    let controller = Controller::<ObjectRef<PersistentVolumeClaim>>::new("local-path")
        .workers(skiff_runtime::controller::DEFAULT_WORKERS);
    let queue = controller.queue().clone();
    let claim_cache = claims.cache().clone();
    nodes.add_handler(move |change| {
        if let Change::Added(node) | Change::Updated { new: node, .. } = change {
            let name = node.name_any();
            for claim in claim_cache.state() {
                if is_ours(&claim) && annotation(claim.as_ref(), ANN_SELECTED_NODE) == Some(&name) {
                    queue.add(ObjectRef::from_obj(claim.as_ref()));
                }
            }
        }
    });
    classes.cache().wait_until_ready().await;
    nodes.cache().wait_until_ready().await;
    volumes.cache().wait_until_ready().await;
    let cluster = Arc::new(KubeCluster {
        classes: classes.cache().clone(),
        nodes: nodes.cache().clone(),
        volumes: volumes.cache().clone(),
        client: ctx.client.clone(),
        recorder: ctx.recorder(COMPONENT),
    });
    triggers::run_each(
        controller,
        &claims,
        move |claim: Arc<PersistentVolumeClaim>| {
            let cluster = cluster.clone();
            async move {
                sync(cluster.as_ref(), &claim).await?;
                Ok::<_, Error>(Action::AwaitChange)
            }
        },
    )
    .await;
    Ok(())
}

#[cfg(test)]
#[path = "localpath_tests.rs"]
mod tests;
