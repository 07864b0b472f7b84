//! The kubelet's writes to pods through the API server, behind [`PodApi`] so that the pod
//! workers can be tested with [`RecordingPodApi`]: status patches and the final delete.

use async_trait::async_trait;
use k8s_openapi::api::core::v1::{Pod, PodStatus};
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, Preconditions};
use parking_lot::Mutex;
use serde_json::json;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("patching the status of pod {namespace}/{name}: {source}")]
    PatchStatus {
        namespace: String,
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("deleting pod {namespace}/{name}: {source}")]
    Delete {
        namespace: String,
        name: String,
        #[source]
        source: kube::Error,
    },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[async_trait]
pub trait PodApi: Send + Sync {
    /// Writes the pod's status (merge patch on `pods/{name}/status`).
    async fn patch_status(&self, namespace: &str, name: &str, status: &PodStatus) -> Result<()>;
    /// Removes the pod object once its containers are gone: `gracePeriodSeconds=0` with the
    /// uid as precondition, as upstream's status manager does. A pod already gone is success.
    async fn delete_now(&self, namespace: &str, name: &str, uid: &str) -> Result<()>;
}

/// [`PodApi`] through kube-rs.
pub struct KubePodApi {
    pub client: kube::Client,
}

#[async_trait]
impl PodApi for KubePodApi {
    async fn patch_status(&self, namespace: &str, name: &str, status: &PodStatus) -> Result<()> {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        pods.patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({ "status": status })),
        )
        .await
        .map_err(|source| Error::PatchStatus {
            namespace: namespace.into(),
            name: name.into(),
            source,
        })?;
        Ok(())
    }

    async fn delete_now(&self, namespace: &str, name: &str, uid: &str) -> Result<()> {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        let params = DeleteParams {
            grace_period_seconds: Some(0),
            preconditions: Some(Preconditions {
                uid: Some(uid.into()),
                resource_version: None,
            }),
            ..Default::default()
        };
        match pods.delete(name, &params).await {
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

/// A [`PodApi`] that records what it was asked to write.
#[derive(Default)]
pub struct RecordingPodApi {
    /// Guards the record; held for one push or one read.
    pub writes: Mutex<Vec<Write>>,
}

/// One recorded write.
#[derive(Debug, Clone)]
pub enum Write {
    Status {
        name: String,
        status: Box<PodStatus>,
    },
    Delete {
        name: String,
        uid: String,
    },
}

impl RecordingPodApi {
    /// The last status written for `name`.
    pub fn last_status(&self, name: &str) -> Option<PodStatus> {
        self.writes.lock().iter().rev().find_map(|w| match w {
            Write::Status { name: n, status } if n == name => Some((**status).clone()),
            _ => None,
        })
    }

    pub fn deleted(&self) -> Vec<String> {
        self.writes
            .lock()
            .iter()
            .filter_map(|w| match w {
                Write::Delete { name, .. } => Some(name.clone()),
                _ => None,
            })
            .collect()
    }
}

#[async_trait]
impl PodApi for RecordingPodApi {
    async fn patch_status(&self, _namespace: &str, name: &str, status: &PodStatus) -> Result<()> {
        self.writes.lock().push(Write::Status {
            name: name.into(),
            status: Box::new(status.clone()),
        });
        Ok(())
    }

    async fn delete_now(&self, _namespace: &str, name: &str, uid: &str) -> Result<()> {
        self.writes.lock().push(Write::Delete {
            name: name.into(),
            uid: uid.into(),
        });
        Ok(())
    }
}
