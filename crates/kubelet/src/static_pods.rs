//! Static pods: Pod manifests in a directory (`--pod-manifest-path`) that this kubelet runs
//! without anyone creating them in the API. As upstream names them, each becomes
//! `NAME-NODENAME`, bound to this node, with the `kubernetes.io/config.source: file`,
//! `config.hash` and `config.mirror` annotations and the Node as owner; the kubelet keeps a
//! mirror pod of each in the API server, re-checking the directory every 20 s (upstream's
//! `fileCheckFrequency`): a new manifest creates its mirror pod, a changed one replaces it, a
//! removed one deletes it, and a mirror pod someone deleted comes back.
//!
//! Skiff runs static pods through their mirror pods (the pod watch sees them like any other
//! pod), so unlike upstream they need the API server to start; see docs/compatibility.md.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::Api;
use kube::api::{DeleteParams, ListParams, PostParams};

/// Where a pod came from (upstream's `ConfigSourceAnnotationKey`).
pub const SOURCE_ANNOTATION: &str = "kubernetes.io/config.source";
/// The manifest's hash (upstream's `ConfigHashAnnotationKey`).
pub const HASH_ANNOTATION: &str = "kubernetes.io/config.hash";
/// Marks a mirror pod, with the hash of the static pod it mirrors (`ConfigMirrorAnnotationKey`).
pub const MIRROR_ANNOTATION: &str = "kubernetes.io/config.mirror";
/// How often the manifest directory is read again (upstream's `fileCheckFrequency`).
pub const FILE_CHECK: Duration = Duration::from_secs(20);

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("listing mirror pods of node {node}: {source}")]
    List {
        node: String,
        #[source]
        source: kube::Error,
    },
    #[error("creating mirror pod {namespace}/{name}: {source}")]
    Create {
        namespace: String,
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("deleting mirror pod {namespace}/{name}: {source}")]
    Delete {
        namespace: String,
        name: String,
        #[source]
        source: kube::Error,
    },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The manifests of `dir` as this node's static pods, by file name order; a file that is not
/// a Pod manifest is reported (its path and why) and skipped. Hidden files are ignored, as
/// upstream ignores them.
pub fn read_manifests(dir: &Path, node: &Node) -> (Vec<Pod>, Vec<String>) {
    let mut paths: Vec<_> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_file())
        .filter(|p| {
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or(".");
            !name.starts_with('.')
        })
        .collect();
    paths.sort();
    let (mut pods, mut problems) = (Vec::new(), Vec::new());
    for path in paths {
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) => {
                problems.push(format!("{}: {e}", path.display()));
                continue;
            }
        };
        match serde_yaml::from_str::<Pod>(&text) {
            Ok(pod) if pod.metadata.name.as_deref().is_some_and(|n| !n.is_empty()) => {
                pods.push(static_pod(pod, node, &text));
            }
            Ok(_) => problems.push(format!("{}: the pod has no metadata.name", path.display())),
            Err(e) => problems.push(format!("{}: {e}", path.display())),
        }
    }
    (pods, problems)
}

/// The pod a manifest describes, as this node runs it.
fn static_pod(mut pod: Pod, node: &Node, manifest: &str) -> Pod {
    let node_name = node.metadata.name.clone().unwrap_or_default();
    let hash = hash(manifest);
    let meta = &mut pod.metadata;
    meta.name = Some(format!(
        "{}-{node_name}",
        meta.name.as_deref().unwrap_or_default()
    ));
    if meta.namespace.as_deref().is_none_or(str::is_empty) {
        meta.namespace = Some("default".into());
    }
    let annotations = meta.annotations.get_or_insert_with(BTreeMap::new);
    annotations.insert(SOURCE_ANNOTATION.into(), "file".into());
    annotations.insert(HASH_ANNOTATION.into(), hash.clone());
    annotations.insert(MIRROR_ANNOTATION.into(), hash);
    meta.owner_references = Some(vec![OwnerReference {
        api_version: "v1".into(),
        kind: "Node".into(),
        name: node_name.clone(),
        uid: node.metadata.uid.clone().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: None,
    }]);
    meta.uid = None;
    meta.resource_version = None;
    pod.spec.get_or_insert_with(Default::default).node_name = Some(node_name);
    pod.status = None;
    pod
}

/// A short content hash (upstream hashes the pod object; any stable hash of the manifest
/// serves: it changes exactly when the manifest does).
fn hash(manifest: &str) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, manifest.as_bytes());
    digest.as_ref()[..8]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn mirror_hash(pod: &Pod) -> Option<&str> {
    pod.metadata
        .annotations
        .as_ref()?
        .get(MIRROR_ANNOTATION)
        .map(String::as_str)
}

fn key(pod: &Pod) -> (String, String) {
    (
        pod.metadata.namespace.clone().unwrap_or_default(),
        pod.metadata.name.clone().unwrap_or_default(),
    )
}

/// The API writes the mirror pods need, behind a trait so the sync can be tested.
#[async_trait]
pub trait MirrorApi: Send + Sync {
    /// The pods bound to this node (mirror pods among them).
    async fn node_pods(&self) -> Result<Vec<Pod>>;
    async fn create(&self, pod: &Pod) -> Result<()>;
    async fn delete(&self, namespace: &str, name: &str) -> Result<()>;
}

/// Makes the API's mirror pods match `desired`: missing ones are created, ones of another
/// version (hash) replaced, ones without a manifest any more deleted. Pods of the same name
/// that are not mirror pods are left alone.
pub async fn sync(api: &dyn MirrorApi, desired: &[Pod]) -> Result<()> {
    let existing = api.node_pods().await?;
    let mirrors: BTreeMap<(String, String), &Pod> = existing
        .iter()
        .filter(|p| mirror_hash(p).is_some())
        .map(|p| (key(p), p))
        .collect();
    for pod in desired {
        let k = key(pod);
        match mirrors.get(&k) {
            Some(m)
                if mirror_hash(m) == mirror_hash(pod)
                    && m.metadata.deletion_timestamp.is_none() => {}
            Some(m) if m.metadata.deletion_timestamp.is_some() => {} // recreated once it is gone
            Some(_) => {
                api.delete(&k.0, &k.1).await?;
            }
            None if existing.iter().any(|p| key(p) == k) => {
                tracing::warn!(pod = %format!("{}/{}", k.0, k.1), "a pod that is not a mirror pod has this static pod's name");
            }
            None => api.create(pod).await?,
        }
    }
    for (k, m) in &mirrors {
        if m.metadata.deletion_timestamp.is_none() && !desired.iter().any(|p| &key(p) == k) {
            api.delete(&k.0, &k.1).await?;
        }
    }
    Ok(())
}

/// [`MirrorApi`] through kube-rs.
pub struct KubeMirrorApi {
    pub client: kube::Client,
    pub node: String,
}

#[async_trait]
impl MirrorApi for KubeMirrorApi {
    async fn node_pods(&self) -> Result<Vec<Pod>> {
        let pods: Api<Pod> = Api::all(self.client.clone());
        let params = ListParams::default().fields(&format!("spec.nodeName={}", self.node));
        pods.list(&params)
            .await
            .map(|l| l.items)
            .map_err(|source| Error::List {
                node: self.node.clone(),
                source,
            })
    }

    async fn create(&self, pod: &Pod) -> Result<()> {
        let (namespace, name) = key(pod);
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &namespace);
        match pods.create(&PostParams::default(), pod).await {
            Ok(_) => Ok(()),
            // created meanwhile (a previous sync): the next check compares it
            Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
            Err(source) => Err(Error::Create {
                namespace,
                name,
                source,
            }),
        }
    }

    async fn delete(&self, namespace: &str, name: &str) -> Result<()> {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        match pods.delete(name, &DeleteParams::default()).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
            Err(source) => Err(Error::Delete {
                namespace: namespace.into(),
                name: name.into(),
                source,
            }),
        }
    }
}

/// Reads `dir` and syncs the mirror pods now and then `every` (upstream: [`FILE_CHECK`]).
pub async fn run(api: &dyn MirrorApi, dir: &Path, node: &Node, every: Duration) {
    let mut tick = tokio::time::interval(every);
    loop {
        tick.tick().await;
        let (pods, problems) = read_manifests(dir, node);
        for problem in problems {
            tracing::warn!(%problem, "skipping a static pod manifest");
        }
        if let Err(e) = sync(api, &pods).await {
            tracing::warn!(error = %e, "syncing static pods");
        }
    }
}

#[cfg(test)]
mod tests {
    use parking_lot::Mutex;
    use serde_json::json;

    use super::*;

    #[derive(Default)]
    struct FakeMirrors {
        pods: Mutex<Vec<Pod>>,
        calls: Mutex<Vec<String>>,
    }

    #[async_trait]
    impl MirrorApi for FakeMirrors {
        async fn node_pods(&self) -> Result<Vec<Pod>> {
            Ok(self.pods.lock().clone())
        }
        async fn create(&self, pod: &Pod) -> Result<()> {
            self.calls.lock().push(format!("create {}", key(pod).1));
            self.pods.lock().push(pod.clone());
            Ok(())
        }
        async fn delete(&self, _namespace: &str, name: &str) -> Result<()> {
            self.calls.lock().push(format!("delete {name}"));
            self.pods.lock().retain(|p| key(p).1 != name);
            Ok(())
        }
    }

    fn node() -> Node {
        serde_json::from_value(json!({"metadata": {"name": "n1", "uid": "node-uid"}})).unwrap()
    }

    fn write(dir: &Path, file: &str, image: &str) {
        let manifest = format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\nspec:\n  containers:\n  - name: c\n    image: {image}\n"
        );
        std::fs::write(dir.join(file), manifest).unwrap();
    }

    #[test]
    fn a_manifest_becomes_a_pod_named_for_the_node_annotated_and_owned_by_it() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "web.yaml", "busybox");
        std::fs::write(dir.path().join("broken.yaml"), "kind: [").unwrap();
        std::fs::write(dir.path().join(".hidden.yaml"), "kind: [").unwrap();
        let (pods, problems) = read_manifests(dir.path(), &node());
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(problems[0].contains("broken.yaml"), "{problems:?}");
        let pod = &pods[0];
        assert_eq!(key(pod), ("default".into(), "web-n1".into()));
        assert_eq!(pod.spec.as_ref().unwrap().node_name.as_deref(), Some("n1"));
        let a = pod.metadata.annotations.as_ref().unwrap();
        assert_eq!(a[SOURCE_ANNOTATION], "file");
        assert_eq!(a[HASH_ANNOTATION], a[MIRROR_ANNOTATION]);
        let owner = &pod.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.uid.as_str()),
            ("Node", "node-uid")
        );
    }

    #[tokio::test]
    async fn mirror_pods_follow_the_manifests_and_come_back_when_deleted() {
        let dir = tempfile::tempdir().unwrap();
        let api = FakeMirrors::default();
        write(dir.path(), "web.yaml", "busybox");
        let read = || read_manifests(dir.path(), &node()).0;
        sync(&api, &read()).await.unwrap();
        sync(&api, &read()).await.unwrap();
        assert_eq!(*api.calls.lock(), ["create web-n1"]);

        // a changed manifest replaces its mirror pod (deleted now, created on the next check,
        // once the old one is gone)
        write(dir.path(), "web.yaml", "busybox:1.36");
        sync(&api, &read()).await.unwrap();
        sync(&api, &read()).await.unwrap();
        assert_eq!(
            *api.calls.lock(),
            ["create web-n1", "delete web-n1", "create web-n1"]
        );

        // deleted by someone: back on the next check
        api.pods.lock().clear();
        sync(&api, &read()).await.unwrap();
        assert_eq!(api.calls.lock().last().unwrap(), "create web-n1");

        // a pod of the same name that is not a mirror pod is left alone
        api.pods.lock()[0].metadata.annotations = None;
        api.calls.lock().clear();
        sync(&api, &read()).await.unwrap();
        assert!(api.calls.lock().is_empty());

        // the manifest removed: its mirror pod goes
        api.pods.lock().clear();
        sync(&api, &read()).await.unwrap();
        std::fs::remove_file(dir.path().join("web.yaml")).unwrap();
        sync(&api, &read()).await.unwrap();
        assert_eq!(api.calls.lock().last().unwrap(), "delete web-n1");
    }
}
