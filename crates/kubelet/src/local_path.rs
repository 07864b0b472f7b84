//! The node side of Skiff's local-path provisioner: the kubelet publishes the directory under
//! which its local-path volumes live (the Node annotation [`ANN_NODE_DIR`]), and deletes what
//! the provisioner made on this node once it is `Released` with reclaim `Delete`: first the
//! volume's directory, then the PersistentVolume. k3s's provisioner runs a helper pod on the
//! node for this; here the node agent acts on what it watches (a PersistentVolume informer
//! filtered by the label [`LABEL_NODE`]`=<node>`, which the Node authorizer allows a kubelet)
//! and the controller manager never touches a node's disk. Creation needs nothing here: the
//! volume's directory is made when a pod first mounts it ([`crate::volumes::claim`]).
//!
//! Hollow nodes take part too ([`crate::hollow`]): each publishes a notional directory, and one
//! deleter serves all of them through one watch, removing through each node's recording host
//! (the removal is recorded, not done) before it deletes the volume.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::{ObjectReference, PersistentVolume};
use kube::api::{Api, DeleteParams};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};
use skiff_component_helpers::local_path::{DATA_SUBDIR, LABEL_NODE, PROVISIONER, is_below};
use skiff_component_helpers::volume::ANN_DYNAMICALLY_PROVISIONED;
use skiff_runtime::controller::{Action, Controller};
use skiff_runtime::events::{Event, EventType, Recorder, Reporter};
use skiff_runtime::informer::{Change, Informers};

use crate::volumes::host::HostOps;

pub use skiff_component_helpers::local_path::ANN_NODE_DIR;

/// The directory of a kubelet's local-path volumes: `storage` under its data dir (k3s's
/// `/var/lib/rancher/k3s/storage`), absolute.
pub fn node_dir(data_dir: &Path) -> PathBuf {
    std::path::absolute(data_dir)
        .unwrap_or_else(|_| data_dir.to_path_buf())
        .join(DATA_SUBDIR)
}

/// What to do with one volume of this node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Plan {
    /// Not ours to delete (in use, retained, another provisioner's or node's): nothing until
    /// it changes.
    Skip,
    /// Remove this directory, then the volume.
    Delete(PathBuf),
    /// Ours to delete but its path is not below this node's directory: refused with a
    /// `VolumeFailedDelete` event (nothing outside the directory is ever removed).
    Refuse(String),
}

/// Whether `volume` is to be deleted by this node (`node`, whose local-path directory is
/// `dir`), as the external provisioner library's `shouldDelete` decides (`Released`, reclaim
/// `Delete`, made by this provisioner), and on this node.
pub fn plan(volume: &PersistentVolume, node: &str, dir: &Path) -> Plan {
    let annotation = |k: &str| {
        volume
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(k))
            .map(String::as_str)
    };
    let label = volume
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(LABEL_NODE))
        .map(String::as_str);
    let spec = volume.spec.clone().unwrap_or_default();
    let phase = volume.status.as_ref().and_then(|s| s.phase.as_deref());
    if annotation(ANN_DYNAMICALLY_PROVISIONED) != Some(PROVISIONER)
        || label != Some(node)
        || phase != Some("Released")
        || spec.persistent_volume_reclaim_policy.as_deref() != Some("Delete")
    {
        return Plan::Skip;
    }
    let path = spec
        .host_path
        .map(|h| h.path)
        .or(spec.local.map(|l| l.path))
        .unwrap_or_default();
    let base = dir.display().to_string();
    if !is_below(&path, &base) {
        return Plan::Refuse(format!(
            "refusing to remove {path:?}: not below this node's local-path directory {base}"
        ));
    }
    Plan::Delete(PathBuf::from(path))
}

/// The API writes of the deleter.
#[async_trait]
pub trait VolumeApi: Send + Sync {
    /// Deletes the volume (this uid); one already gone is success.
    async fn delete(&self, name: &str, uid: &str) -> Result<(), String>;
    /// Records an event about the volume (best effort).
    fn event(&self, volume: &PersistentVolume, type_: EventType, reason: &str, note: String);
}

/// One sync of one volume.
pub async fn sync(
    volume: &PersistentVolume,
    node: &str,
    dir: &Path,
    host: &dyn HostOps,
    api: &dyn VolumeApi,
) -> Result<(), String> {
    let name = volume.name_any();
    match plan(volume, node, dir) {
        Plan::Skip => Ok(()),
        Plan::Refuse(why) => {
            api.event(volume, EventType::Warning, "VolumeFailedDelete", why);
            Ok(())
        }
        Plan::Delete(path) => {
            if let Err(e) = host.remove_dir_all(&path) {
                let why = format!("removing {}: {e}", path.display());
                api.event(
                    volume,
                    EventType::Warning,
                    "VolumeFailedDelete",
                    why.clone(),
                );
                return Err(why);
            }
            tracing::info!(volume = name, path = %path.display(), "deleted a local-path volume's directory");
            let uid = volume.metadata.uid.as_deref().unwrap_or("");
            api.delete(&name, uid).await.inspect_err(|why| {
                api.event(
                    volume,
                    EventType::Warning,
                    "VolumeFailedDelete",
                    why.clone(),
                );
            })
        }
    }
}

/// [`VolumeApi`] through kube-rs, events as `kubelet` on this node.
pub struct KubeVolumeApi {
    client: kube::Client,
    events: Recorder,
}

impl KubeVolumeApi {
    pub fn new(client: kube::Client, node: &str) -> KubeVolumeApi {
        let reporter = Reporter {
            controller: "kubelet".into(),
            instance: node.into(),
        };
        KubeVolumeApi::with_recorder(Recorder::new(client.clone(), reporter), client)
    }

    /// Records through `events` (the node's pod events' recorder, so that a hollow node
    /// starts no second writer task).
    pub fn with_recorder(events: Recorder, client: kube::Client) -> KubeVolumeApi {
        KubeVolumeApi { events, client }
    }
}

#[async_trait]
impl VolumeApi for KubeVolumeApi {
    async fn delete(&self, name: &str, uid: &str) -> Result<(), String> {
        let api: Api<PersistentVolume> = Api::all(self.client.clone());
        let params = DeleteParams {
            preconditions: (!uid.is_empty()).then(|| kube::api::Preconditions {
                uid: Some(uid.into()),
                resource_version: None,
            }),
            ..Default::default()
        };
        match api.delete(name, &params).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
            Err(e) => Err(format!("deleting persistentvolume {name}: {e}")),
        }
    }

    fn event(&self, volume: &PersistentVolume, type_: EventType, reason: &str, note: String) {
        let regarding: ObjectReference = volume.object_ref(&());
        self.events
            .record(Event::new(type_, regarding, reason, note));
    }
}

/// A node whose released local-path volumes [`run`] deletes.
pub struct NodeDir {
    /// The node's name, as its volumes' [`LABEL_NODE`] label gives it.
    pub node: String,
    /// Its local-path directory (what it publishes as [`ANN_NODE_DIR`]).
    pub dir: PathBuf,
    /// Where its volumes' directories are removed (a hollow node's records the removal).
    pub host: Arc<dyn HostOps>,
    /// Deletes its volumes and records its events.
    pub api: Arc<dyn VolumeApi>,
}

/// The label selector of the volumes of `nodes`: `LABEL_NODE=<node>` for one node (what the
/// Node authorizer lets a kubelet list), every labelled volume for several (hollow nodes, which
/// share one admin client: one watch for all of them rather than one each).
fn selector(nodes: &[NodeDir]) -> String {
    match nodes {
        [one] => format!("{LABEL_NODE}={}", one.node),
        _ => LABEL_NODE.to_string(),
    }
}

/// The node of `nodes` a volume's [`LABEL_NODE`] label names, if any.
fn node_of<'a>(
    nodes: &'a HashMap<String, NodeDir>,
    volume: &PersistentVolume,
) -> Option<&'a NodeDir> {
    let label = volume.metadata.labels.as_ref()?.get(LABEL_NODE)?;
    nodes.get(label)
}

/// Deletes the released local-path volumes of `nodes` for as long as the task runs; none to
/// serve returns at once.
pub async fn run(informers: Informers, nodes: Vec<NodeDir>) {
    if nodes.is_empty() {
        return;
    }
    let config = watcher::Config::default().labels(&selector(&nodes));
    let nodes: Arc<HashMap<String, NodeDir>> =
        Arc::new(nodes.into_iter().map(|n| (n.node.clone(), n)).collect());
    let volumes = informers.filtered::<PersistentVolume>(config);
    let controller = Controller::<ObjectRef<PersistentVolume>>::new("local-path-deleter");
    let queue = controller.queue().clone();
    let ours = nodes.clone();
    volumes.add_handler(move |change| {
        if let Change::Added(v) | Change::Updated { new: v, .. } = change
            && node_of(&ours, v).is_some()
        {
            queue.add(ObjectRef::from_obj(v.as_ref()));
        }
    });
    volumes.cache().wait_until_ready().await;
    let cache = volumes.cache().clone();
    controller
        .run(move |key| {
            let (volume, nodes) = (cache.get(&key), nodes.clone());
            async move {
                if let Some(v) = volume
                    && let Some(n) = node_of(&nodes, &v)
                {
                    sync(&v, &n.node, &n.dir, n.host.as_ref(), n.api.as_ref()).await?;
                }
                Ok::<_, String>(Action::AwaitChange)
            }
        })
        .await;
}

#[cfg(test)]
mod tests {
    use parking_lot::Mutex;
    use serde_json::json;

    use super::*;
    use crate::volumes::host::{HostCall, RecordingHost};

    fn volume(node: &str, phase: &str, policy: &str, path: &str) -> PersistentVolume {
        serde_json::from_value(json!({
            "metadata": {"name": "pvc-1", "uid": "v-1", "labels": {LABEL_NODE: node},
                         "annotations": {ANN_DYNAMICALLY_PROVISIONED: PROVISIONER}},
            "spec": {"persistentVolumeReclaimPolicy": policy,
                     "hostPath": {"path": path, "type": "DirectoryOrCreate"}},
            "status": {"phase": phase},
        }))
        .unwrap()
    }

    const DIR: &str = "/var/lib/skiff/storage";
    const PATH: &str = "/var/lib/skiff/storage/pvc-1_prod_data";

    #[test]
    fn only_released_deletable_volumes_of_this_node_are_deleted() {
        let dir = Path::new(DIR);
        assert_eq!(
            plan(&volume("n1", "Released", "Delete", PATH), "n1", dir),
            Plan::Delete(PATH.into())
        );
        for v in [
            volume("n1", "Bound", "Delete", PATH),
            volume("n1", "Released", "Retain", PATH),
            volume("n2", "Released", "Delete", PATH),
        ] {
            assert_eq!(plan(&v, "n1", dir), Plan::Skip);
        }
        let mut other = volume("n1", "Released", "Delete", PATH);
        other.metadata.annotations = None;
        assert_eq!(plan(&other, "n1", dir), Plan::Skip);
    }

    #[test]
    fn a_path_outside_the_nodes_directory_is_never_removed() {
        let dir = Path::new(DIR);
        for path in [
            "/etc",
            "/var/lib/skiff/storage",
            "/var/lib/skiff/storage/../x",
        ] {
            let v = volume("n1", "Released", "Delete", path);
            assert!(matches!(plan(&v, "n1", dir), Plan::Refuse(_)), "{path}");
        }
    }

    fn node_dir(node: &str) -> NodeDir {
        NodeDir {
            node: node.into(),
            dir: PathBuf::from(format!("/hollow/storage/{node}")),
            host: Arc::new(RecordingHost::default()),
            api: Arc::new(FakeApi::default()),
        }
    }

    #[test]
    fn one_node_watches_its_own_volumes_and_several_watch_every_labelled_one() {
        assert_eq!(selector(&[node_dir("n1")]), format!("{LABEL_NODE}=n1"));
        assert_eq!(selector(&[node_dir("h-0"), node_dir("h-1")]), LABEL_NODE);
    }

    #[test]
    fn a_volume_goes_to_the_node_its_label_names() {
        let nodes: HashMap<String, NodeDir> = ["h-0", "h-1"]
            .map(|n| (n.to_string(), node_dir(n)))
            .into_iter()
            .collect();
        let v = volume("h-1", "Released", "Delete", PATH);
        assert_eq!(node_of(&nodes, &v).map(|n| n.node.as_str()), Some("h-1"));
        assert!(node_of(&nodes, &volume("n9", "Released", "Delete", PATH)).is_none());
        let mut unlabelled = v;
        unlabelled.metadata.labels = None;
        assert!(node_of(&nodes, &unlabelled).is_none());
    }

    #[derive(Default)]
    struct FakeApi {
        deleted: Mutex<Vec<String>>,
        events: Mutex<Vec<(String, String)>>,
        refuse: bool,
    }

    #[async_trait]
    impl VolumeApi for FakeApi {
        async fn delete(&self, name: &str, uid: &str) -> Result<(), String> {
            if self.refuse {
                return Err(format!("deleting persistentvolume {name}: forbidden"));
            }
            self.deleted.lock().push(format!("{name}/{uid}"));
            Ok(())
        }
        fn event(&self, _v: &PersistentVolume, _t: EventType, reason: &str, note: String) {
            self.events.lock().push((reason.into(), note));
        }
    }

    #[tokio::test]
    async fn the_directory_goes_first_then_the_volume() {
        let host = RecordingHost::default();
        let api = FakeApi::default();
        let v = volume("n1", "Released", "Delete", PATH);
        sync(&v, "n1", Path::new(DIR), &host, &api).await.unwrap();
        assert_eq!(*host.calls.lock(), [HostCall::RemoveDir(PATH.into())]);
        assert_eq!(*api.deleted.lock(), ["pvc-1/v-1"]);
        assert!(api.events.lock().is_empty());
    }

    #[tokio::test]
    async fn a_failed_removal_keeps_the_volume_with_an_event_and_is_retried() {
        let host = RecordingHost::default();
        *host.fail.lock() = Some("device or resource busy".into());
        let api = FakeApi::default();
        let v = volume("n1", "Released", "Delete", PATH);
        let err = sync(&v, "n1", Path::new(DIR), &host, &api)
            .await
            .unwrap_err();
        assert!(err.contains("device or resource busy"), "{err}");
        assert!(api.deleted.lock().is_empty());
        assert_eq!(api.events.lock()[0].0, "VolumeFailedDelete");
        // a refused path: an event, nothing removed, nothing retried
        let host = RecordingHost::default();
        let api = FakeApi::default();
        let v = volume("n1", "Released", "Delete", "/etc");
        sync(&v, "n1", Path::new(DIR), &host, &api).await.unwrap();
        assert!(host.calls.lock().is_empty());
        assert_eq!(
            api.events.lock()[0],
            (
                "VolumeFailedDelete".into(),
                "refusing to remove \"/etc\": not below this node's local-path directory /var/lib/skiff/storage".into()
            )
        );
    }
}
