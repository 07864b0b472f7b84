//! The kubelet's writes to pods through the API server, behind [`PodApi`] so that the pod
//! workers can be tested with [`RecordingPodApi`]: status patches, events and the final delete.

use std::collections::BTreeMap;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::{ConfigMap, ObjectReference, Pod, PodStatus, Secret};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams, Preconditions};
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
    #[error("reading {kind} {namespace}/{name}: {source}")]
    Read {
        kind: &'static str,
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
    /// Records an event about the pod (or one of its containers, by `field_path` such as
    /// `spec.containers{web}`) without waiting for the write; failures are logged, never
    /// returned: events are best effort.
    async fn event(&self, pod: &Pod, event: PodEvent);
    /// Whether the pod (this uid) still exists: a check for finished pods, whose deletion is
    /// immediate and seen only through the watch.
    async fn pod_exists(&self, namespace: &str, name: &str, uid: &str) -> Result<bool>;
    /// The data of a ConfigMap, or None if it does not exist.
    async fn config_map(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<BTreeMap<String, String>>>;
    /// The data of a Secret (decoded; bytes that are not UTF-8 are replaced), or None if it
    /// does not exist.
    async fn secret(&self, namespace: &str, name: &str)
    -> Result<Option<BTreeMap<String, String>>>;
    /// Removes the pod object once its containers are gone: `gracePeriodSeconds=0` with the
    /// uid as precondition, as upstream's status manager does. A pod already gone is success.
    async fn delete_now(&self, namespace: &str, name: &str, uid: &str) -> Result<()>;
}

/// Whether an event reports normal operation or a problem (the Event's `type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    Normal,
    Warning,
}

/// One event as upstream's kubelet records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodEvent {
    pub type_: EventType,
    /// `Pulling`, `Pulled`, `Created`, `Started`, `Killing`, `BackOff`, `Failed`…
    pub reason: &'static str,
    pub message: String,
    /// The container it is about (`spec.containers{NAME}`), if any.
    pub field_path: Option<String>,
}

impl PodEvent {
    pub fn normal(reason: &'static str, container: &str, message: String) -> PodEvent {
        PodEvent {
            type_: EventType::Normal,
            reason,
            message,
            field_path: Some(format!("spec.containers{{{container}}}")),
        }
    }

    pub fn warning(reason: &'static str, container: &str, message: String) -> PodEvent {
        PodEvent {
            type_: EventType::Warning,
            ..PodEvent::normal(reason, container, message)
        }
    }
}

/// [`PodApi`] through kube-rs.
pub struct KubePodApi {
    pub client: kube::Client,
    /// The node name: the events' reporting instance.
    pub node: String,
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

    /// An `events.k8s.io/v1` Event named as upstream names them (`{pod}.{unix nanos in hex}`),
    /// reported by `kubelet` on this node.
    async fn event(&self, pod: &Pod, event: PodEvent) {
        let now = jiff::Timestamp::now();
        let namespace = pod
            .metadata
            .namespace
            .clone()
            .unwrap_or_else(|| "default".into());
        let name = pod.metadata.name.clone().unwrap_or_default();
        let object = Event {
            metadata: ObjectMeta {
                name: Some(format!("{name}.{:x}", now.as_nanosecond())),
                namespace: Some(namespace.clone()),
                ..Default::default()
            },
            event_time: Some(MicroTime(now)),
            reporting_controller: Some("kubelet".into()),
            reporting_instance: Some(self.node.clone()),
            action: Some(event.reason.into()),
            reason: Some(event.reason.into()),
            note: Some(event.message),
            type_: Some(
                match event.type_ {
                    EventType::Normal => "Normal",
                    EventType::Warning => "Warning",
                }
                .into(),
            ),
            regarding: Some(ObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Pod".into()),
                name: Some(name.clone()),
                namespace: Some(namespace.clone()),
                uid: pod.metadata.uid.clone(),
                resource_version: pod.metadata.resource_version.clone(),
                field_path: event.field_path,
            }),
            ..Default::default()
        };
        let events: Api<Event> = Api::namespaced(self.client.clone(), &namespace);
        // written in the background, as upstream's event broadcaster does: a pod's start does
        // not wait for three round trips to the API server
        tokio::spawn(async move {
            if let Err(e) = events.create(&PostParams::default(), &object).await {
                tracing::warn!(pod = %format!("{namespace}/{name}"), error = %e, "recording event {}", event.reason);
            }
        });
    }

    async fn pod_exists(&self, namespace: &str, name: &str, uid: &str) -> Result<bool> {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        let found = pods.get_opt(name).await.map_err(|source| Error::Read {
            kind: "pod",
            namespace: namespace.into(),
            name: name.into(),
            source,
        })?;
        Ok(found.is_some_and(|p| p.metadata.uid.as_deref() == Some(uid)))
    }

    async fn config_map(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<BTreeMap<String, String>>> {
        let api: Api<ConfigMap> = Api::namespaced(self.client.clone(), namespace);
        let found = api.get_opt(name).await.map_err(|source| Error::Read {
            kind: "configmap",
            namespace: namespace.into(),
            name: name.into(),
            source,
        })?;
        Ok(found.map(|cm| {
            let mut data = cm.data.unwrap_or_default();
            for (k, v) in cm.binary_data.unwrap_or_default() {
                data.insert(k, String::from_utf8_lossy(&v.0).into_owned());
            }
            data
        }))
    }

    async fn secret(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<BTreeMap<String, String>>> {
        let api: Api<Secret> = Api::namespaced(self.client.clone(), namespace);
        let found = api.get_opt(name).await.map_err(|source| Error::Read {
            kind: "secret",
            namespace: namespace.into(),
            name: name.into(),
            source,
        })?;
        Ok(found.map(|s| {
            let mut data: BTreeMap<String, String> = s
                .data
                .unwrap_or_default()
                .into_iter()
                .map(|(k, v)| (k, String::from_utf8_lossy(&v.0).into_owned()))
                .collect();
            data.extend(s.string_data.unwrap_or_default());
            data
        }))
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

/// A [`PodApi`] that records what it was asked to write and serves the ConfigMaps and
/// Secrets it was given.
#[derive(Default)]
pub struct RecordingPodApi {
    /// Guards the record; held for one push or one read.
    pub writes: Mutex<Vec<Write>>,
    /// ConfigMaps by name (any namespace).
    pub config_maps: Mutex<BTreeMap<String, BTreeMap<String, String>>>,
    /// Secrets by name (any namespace).
    pub secrets: Mutex<BTreeMap<String, BTreeMap<String, String>>>,
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
    Event {
        name: String,
        event: PodEvent,
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

    /// The reasons of the events recorded so far, oldest first.
    pub fn event_reasons(&self) -> Vec<&'static str> {
        self.writes
            .lock()
            .iter()
            .filter_map(|w| match w {
                Write::Event { event, .. } => Some(event.reason),
                _ => None,
            })
            .collect()
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

    async fn event(&self, pod: &Pod, event: PodEvent) {
        self.writes.lock().push(Write::Event {
            name: pod.metadata.name.clone().unwrap_or_default(),
            event,
        });
    }

    async fn pod_exists(&self, _namespace: &str, name: &str, _uid: &str) -> Result<bool> {
        Ok(!self.deleted().contains(&name.to_string()))
    }

    async fn config_map(
        &self,
        _namespace: &str,
        name: &str,
    ) -> Result<Option<BTreeMap<String, String>>> {
        Ok(self.config_maps.lock().get(name).cloned())
    }

    async fn secret(
        &self,
        _namespace: &str,
        name: &str,
    ) -> Result<Option<BTreeMap<String, String>>> {
        Ok(self.secrets.lock().get(name).cloned())
    }

    async fn delete_now(&self, _namespace: &str, name: &str, uid: &str) -> Result<()> {
        self.writes.lock().push(Write::Delete {
            name: name.into(),
            uid: uid.into(),
        });
        Ok(())
    }
}
