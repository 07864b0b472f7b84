//! The pods this kubelet runs, as its server sees them: the latest object of each pod the
//! watch delivered ([`PodRegistry`], written by the pod watch, read by `/pods` and to find a
//! pod by namespace and name), and the runtime's containers and sandbox of a pod found again by
//! the labels the kubelet put on them.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use parking_lot::RwLock;

use crate::cri::{ContainerRuntime, ContainerState, PodSandboxState};
use crate::pod_sync::{LABEL_CONTAINER_NAME, LABEL_POD_UID};

/// What the server could not find or read; the message is what the client sees.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("pod {name:?} does not exist")]
    PodNotFound { name: String },
    #[error("container {container:?} not found in pod {pod:?}")]
    NotInSpec { pod: String, container: String },
    #[error("container not found ({container:?})")]
    NoContainer { container: String },
    #[error("previous terminated container {container:?} in pod {pod:?} not found")]
    NoPrevious { pod: String, container: String },
    #[error("pod {pod:?} has no running sandbox")]
    NoSandbox { pod: String },
    #[error(transparent)]
    Runtime(#[from] crate::cri::Error),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The pods bound to this node, by uid: the pod watch inserts and removes, the server reads.
/// One lock, held only to copy in or out.
#[derive(Clone, Default)]
pub struct PodRegistry {
    pods: Arc<RwLock<HashMap<String, Arc<Pod>>>>,
}

impl PodRegistry {
    pub fn upsert(&self, pod: &Arc<Pod>) {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        self.pods.write().insert(uid, pod.clone());
    }

    pub fn remove(&self, uid: &str) {
        self.pods.write().remove(uid);
    }

    /// Every pod, sorted by namespace and name.
    pub fn list(&self) -> Vec<Pod> {
        let pods = self.pods.read();
        let sorted: BTreeMap<(String, String), &Arc<Pod>> = pods
            .values()
            .map(|p| {
                let m = &p.metadata;
                (
                    (
                        m.namespace.clone().unwrap_or_default(),
                        m.name.clone().unwrap_or_default(),
                    ),
                    p,
                )
            })
            .collect();
        sorted.into_values().map(|p| Pod::clone(p)).collect()
    }

    pub fn get(&self, namespace: &str, name: &str) -> Result<Pod> {
        self.pods
            .read()
            .values()
            .find(|p| {
                p.metadata.namespace.as_deref() == Some(namespace)
                    && p.metadata.name.as_deref() == Some(name)
            })
            .map(|p| Pod::clone(p))
            .ok_or_else(|| Error::PodNotFound { name: name.into() })
    }
}

/// Whether the pod's spec has a container (regular, init or ephemeral) of that name.
pub fn has_container(pod: &Pod, name: &str) -> bool {
    let Some(spec) = &pod.spec else { return false };
    spec.containers.iter().any(|c| c.name == name)
        || spec
            .init_containers
            .iter()
            .flatten()
            .any(|c| c.name == name)
        || spec
            .ephemeral_containers
            .iter()
            .flatten()
            .any(|c| c.name == name)
}

fn uid(pod: &Pod) -> String {
    pod.metadata.uid.clone().unwrap_or_default()
}

fn pod_name(pod: &Pod) -> String {
    pod.metadata.name.clone().unwrap_or_default()
}

/// The runtime's instances of a container of the pod, newest first.
async fn instances(
    runtime: &dyn ContainerRuntime,
    pod: &Pod,
    container: &str,
) -> Result<Vec<crate::cri::Container>> {
    let labels = HashMap::from([
        (LABEL_POD_UID.to_string(), uid(pod)),
        (LABEL_CONTAINER_NAME.to_string(), container.to_string()),
    ]);
    let mut found = runtime.list_containers(labels).await?;
    found.sort_by_key(|c| std::cmp::Reverse(c.created_at));
    Ok(found)
}

/// The id of the container's running instance (exec and attach need one).
pub async fn running_container(
    runtime: &dyn ContainerRuntime,
    pod: &Pod,
    container: &str,
) -> Result<String> {
    instances(runtime, pod, container)
        .await?
        .into_iter()
        .find(|c| c.state == ContainerState::ContainerRunning as i32)
        .map(|c| c.id)
        .ok_or_else(|| Error::NoContainer {
            container: container.into(),
        })
}

/// The id of the container's last terminated instance as the pod's status names it
/// (`lastState.terminated.containerID`, without its `runtime://` scheme).
fn last_terminated(pod: &Pod, container: &str) -> Option<String> {
    let status = pod.status.as_ref()?;
    let statuses = [
        &status.container_statuses,
        &status.init_container_statuses,
        &status.ephemeral_container_statuses,
    ];
    let id = statuses
        .into_iter()
        .flatten()
        .flatten()
        .find(|s| s.name == container)?
        .last_state
        .as_ref()?
        .terminated
        .as_ref()?
        .container_id
        .clone()?;
    Some(
        id.split_once("://")
            .map_or(id.clone(), |(_, id)| id.to_string()),
    )
}

/// The id and log file of the container's current instance, or with `previous` of its last
/// terminated one as upstream picks it: the one the pod's status has as `lastState` (the run
/// before the current one, or while the container waits to restart the run that just ended;
/// the container garbage collection keeps it). A relative log path is under the pod's log
/// directory.
pub async fn log_file(
    runtime: &dyn ContainerRuntime,
    pod: &Pod,
    container: &str,
    previous: bool,
    pod_log_dir: &Path,
) -> Result<(String, PathBuf)> {
    let found = instances(runtime, pod, container).await?;
    let picked = if previous {
        last_terminated(pod, container).and_then(|id| found.iter().find(|c| c.id == id))
    } else {
        found.first()
    };
    let Some(c) = picked else {
        return Err(if previous {
            Error::NoPrevious {
                pod: pod_name(pod),
                container: container.into(),
            }
        } else {
            Error::NoContainer {
                container: container.into(),
            }
        });
    };
    let status = runtime.container_status(&c.id).await?;
    Ok((c.id.clone(), pod_log_dir.join(status.log_path)))
}

/// The pod's ready sandbox (port-forward enters its network namespace).
pub async fn ready_sandbox(runtime: &dyn ContainerRuntime, pod: &Pod) -> Result<String> {
    let labels = HashMap::from([(LABEL_POD_UID.to_string(), uid(pod))]);
    runtime
        .list_pod_sandboxes(labels)
        .await?
        .into_iter()
        .filter(|s| s.state == PodSandboxState::SandboxReady as i32)
        .max_by_key(|s| s.created_at)
        .map(|s| s.id)
        .ok_or_else(|| Error::NoSandbox { pod: pod_name(pod) })
}

/// Whether the container is still running (a followed log ends when it is not).
pub async fn is_running(runtime: &dyn ContainerRuntime, id: &str) -> bool {
    runtime
        .container_status(id)
        .await
        .is_ok_and(|s| s.state == ContainerState::ContainerRunning as i32)
}
