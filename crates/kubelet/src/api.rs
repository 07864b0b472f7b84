//! The kubelet's writes to pods through the API server, behind [`PodApi`] so that the pod
//! workers can be tested with [`RecordingPodApi`]: status patches, events and the final delete;
//! and its reads: ConfigMaps, Secrets, PersistentVolumeClaims, PersistentVolumes and service
//! account tokens (TokenRequest) for env and volumes.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::core::v1::{
    ConfigMap, ObjectReference, PersistentVolume, PersistentVolumeClaim, Pod, PodStatus, Secret,
    ServiceAccount,
};
use kube::api::{DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::core::NamespaceResourceScope;
use kube::{Api, Resource};
use parking_lot::Mutex;
use serde_json::json;
use skiff_runtime::events::{Event, Recorder, Reporter};
use skiff_runtime::informer::{Informers, Kind};

use crate::watched::{Lookup, Watched};

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
    /// Upstream's words, which users know from `FailedMount` events.
    #[error("failed to sync {kind}s cache: timed out waiting for the condition")]
    NotSynced { kind: &'static str },
    #[error("requesting a token for serviceaccount {namespace}/{name}: {source}")]
    TokenRequest {
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

/// A ConfigMap's or Secret's keys and their bytes.
pub type Data = BTreeMap<String, Vec<u8>>;

fn bytes_of(map: BTreeMap<String, String>) -> Data {
    map.into_iter().map(|(k, v)| (k, v.into_bytes())).collect()
}

impl Error {
    /// The API server's own message (`serviceaccounts "x" not found`) when it refused the
    /// request, else the whole error.
    pub fn api_message(&self) -> String {
        match self {
            Error::PatchStatus { source, .. }
            | Error::Read { source, .. }
            | Error::TokenRequest { source, .. }
            | Error::Delete { source, .. } => match source {
                kube::Error::Api(status) => status.message.clone(),
                other => other.to_string(),
            },
            Error::NotSynced { .. } => self.to_string(),
        }
    }
}

#[async_trait]
pub trait PodApi: Send + Sync {
    /// Writes the pod's status (merge patch on `pods/{name}/status`).
    async fn patch_status(&self, namespace: &str, name: &str, status: &PodStatus) -> Result<()>;
    /// Records an event about the pod (or one of its containers, by `field_path` such as
    /// `spec.containers{web}`) without waiting for the write; failures are logged, never
    /// returned: events are best effort.
    async fn event(&self, pod: &Pod, event: PodEvent);
    /// Records an event about this kubelet's Node (image garbage collection, eviction), as
    /// [`PodApi::event`] does for pods; the event's `field_path` is not used.
    async fn node_event(&self, event: PodEvent);
    /// Whether the pod (this uid) still exists: a check for finished pods, whose deletion is
    /// immediate and seen only through the watch.
    async fn pod_exists(&self, namespace: &str, name: &str, uid: &str) -> Result<bool>;
    /// The data of a ConfigMap (`data` and `binaryData`), or None if it does not exist.
    async fn config_map(&self, namespace: &str, name: &str) -> Result<Option<Data>>;
    /// The data of a Secret (decoded `data` and `stringData`), or None if it does not exist.
    async fn secret(&self, namespace: &str, name: &str) -> Result<Option<Data>>;
    /// A PersistentVolumeClaim, or None if it does not exist.
    async fn claim(&self, namespace: &str, name: &str) -> Result<Option<PersistentVolumeClaim>>;
    /// A PersistentVolume, or None if it does not exist.
    async fn volume(&self, name: &str) -> Result<Option<PersistentVolume>>;
    /// Removes the pod object once its containers are gone: `gracePeriodSeconds=0` with the
    /// uid as precondition, as upstream's status manager does. A pod already gone is success.
    async fn delete_now(&self, namespace: &str, name: &str, uid: &str) -> Result<()>;
    /// A token for a service account (`POST serviceaccounts/{name}/token`), with its status.
    async fn token_request(
        &self,
        namespace: &str,
        service_account: &str,
        request: &TokenRequest,
    ) -> Result<TokenRequest>;
}

pub use skiff_runtime::events::EventType;

/// One event as upstream's kubelet records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodEvent {
    pub type_: EventType,
    /// `Pulling`, `Pulled`, `Created`, `Started`, `Killing`, `BackOff`, `Failed`, or an
    /// admission rejection's (`OutOfcpu`, `OutOfexample.com/gpu`, …).
    pub reason: Cow<'static, str>,
    pub message: String,
    /// The container it is about (`spec.containers{NAME}`), if any.
    pub field_path: Option<String>,
}

impl PodEvent {
    pub fn normal(reason: &'static str, container: &str, message: String) -> PodEvent {
        PodEvent {
            type_: EventType::Normal,
            reason: reason.into(),
            message,
            field_path: Some(format!("spec.containers{{{container}}}")),
        }
    }

    /// A warning about the pod as a whole (no container), such as `FailedMount`.
    pub fn pod_warning(reason: impl Into<Cow<'static, str>>, message: String) -> PodEvent {
        PodEvent {
            type_: EventType::Warning,
            reason: reason.into(),
            message,
            field_path: None,
        }
    }

    pub fn warning(reason: &'static str, container: &str, message: String) -> PodEvent {
        PodEvent {
            type_: EventType::Warning,
            ..PodEvent::normal(reason, container, message)
        }
    }
}

/// Status writes and events one kubelet has in flight at most. kube-rs speaks HTTP/1.1, one
/// request per connection at a time, so a burst of pods each writing its status at once opened
/// a TLS connection per pod (a quarter of a hollow node's CPU went to handshakes in `skiff bench
/// controllers`); upstream's kubelet multiplexes over one HTTP/2 connection and writes statuses
/// from one status manager.
const MAX_WRITES_IN_FLIGHT: usize = 8;

/// [`PodApi`] through kube-rs.
pub struct KubePodApi {
    client: kube::Client,
    /// The Node this kubelet runs, which node events are about.
    node: String,
    /// Reports as `kubelet` on this node, as upstream's.
    events: Recorder,
    writes: Arc<tokio::sync::Semaphore>,
    /// The ConfigMaps and Secrets read, each from a watch of its own.
    config_maps: Watched<ConfigMap>,
    secrets: Watched<Secret>,
}

impl KubePodApi {
    pub fn new(client: kube::Client, node: String) -> KubePodApi {
        let reporter = Reporter {
            controller: "kubelet".into(),
            instance: node.clone(),
        };
        let informers = Informers::new(client.clone());
        KubePodApi {
            events: Recorder::new(client.clone(), reporter),
            config_maps: Watched::new(informers.clone()),
            secrets: Watched::new(informers),
            client,
            node,
            writes: Arc::new(tokio::sync::Semaphore::new(MAX_WRITES_IN_FLIGHT)),
        }
    }

    /// The recorder of this node's events (`kubelet` on the node).
    pub fn recorder(&self) -> Recorder {
        self.events.clone()
    }

    /// The `K` `namespace/name` from its watch (see [`Watched`]); `None` when it does not
    /// exist.
    async fn read<K>(
        &self,
        watched: &Watched<K>,
        kind: &'static str,
        namespace: &str,
        name: &str,
    ) -> Result<Option<Arc<K>>>
    where
        K: Kind + Resource<Scope = NamespaceResourceScope>,
    {
        match watched.get(namespace, name).await {
            Lookup::Watched(found) => Ok(found),
            Lookup::NotSynced => Err(Error::NotSynced { kind }),
        }
    }
}

#[async_trait]
impl PodApi for KubePodApi {
    async fn patch_status(&self, namespace: &str, name: &str, status: &PodStatus) -> Result<()> {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        let _permit = self.writes.acquire().await;
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

    /// Recorded in the background, as upstream's event broadcaster does: a pod's start does
    /// not wait for three round trips to the API server.
    async fn event(&self, pod: &Pod, event: PodEvent) {
        let regarding = ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Pod".into()),
            name: pod.metadata.name.clone(),
            namespace: pod.metadata.namespace.clone(),
            uid: pod.metadata.uid.clone(),
            resource_version: pod.metadata.resource_version.clone(),
            field_path: event.field_path,
        };
        let recorded = Event::new(event.type_, regarding, &event.reason, event.message);
        self.events.record(recorded);
    }

    /// About the Node as upstream's kubelet refers to it (its uid is its name).
    async fn node_event(&self, event: PodEvent) {
        let regarding = ObjectReference {
            kind: Some("Node".into()),
            name: Some(self.node.clone()),
            uid: Some(self.node.clone()),
            ..Default::default()
        };
        let recorded = Event::new(event.type_, regarding, &event.reason, event.message);
        self.events.record(recorded);
    }

    async fn pod_exists(&self, namespace: &str, name: &str, uid: &str) -> Result<bool> {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        let found = match pods.get_opt(name).await {
            Ok(found) => found,
            // the Node authorizer refuses pods not bound to this node, a deleted one included
            Err(kube::Error::Api(e)) if e.code == 403 => None,
            Err(source) => {
                return Err(Error::Read {
                    kind: "pod",
                    namespace: namespace.into(),
                    name: name.into(),
                    source,
                });
            }
        };
        Ok(found.is_some_and(|p| p.metadata.uid.as_deref() == Some(uid)))
    }

    async fn config_map(&self, namespace: &str, name: &str) -> Result<Option<Data>> {
        let found = self
            .read(&self.config_maps, "configmap", namespace, name)
            .await?;
        Ok(found.map(|cm| {
            let mut data = bytes_of(cm.data.clone().unwrap_or_default());
            data.extend(
                cm.binary_data
                    .iter()
                    .flatten()
                    .map(|(k, v)| (k.clone(), v.0.clone())),
            );
            data
        }))
    }

    async fn claim(&self, namespace: &str, name: &str) -> Result<Option<PersistentVolumeClaim>> {
        let api: Api<PersistentVolumeClaim> = Api::namespaced(self.client.clone(), namespace);
        api.get_opt(name).await.map_err(|source| Error::Read {
            kind: "persistentvolumeclaim",
            namespace: namespace.into(),
            name: name.into(),
            source,
        })
    }

    async fn volume(&self, name: &str) -> Result<Option<PersistentVolume>> {
        let api: Api<PersistentVolume> = Api::all(self.client.clone());
        api.get_opt(name).await.map_err(|source| Error::Read {
            kind: "persistentvolume",
            namespace: String::new(),
            name: name.into(),
            source,
        })
    }

    async fn secret(&self, namespace: &str, name: &str) -> Result<Option<Data>> {
        let found = self.read(&self.secrets, "secret", namespace, name).await?;
        Ok(found.map(|s| {
            let mut data: Data = s
                .data
                .iter()
                .flatten()
                .map(|(k, v)| (k.clone(), v.0.clone()))
                .collect();
            data.extend(bytes_of(s.string_data.clone().unwrap_or_default()));
            data
        }))
    }

    async fn token_request(
        &self,
        namespace: &str,
        service_account: &str,
        request: &TokenRequest,
    ) -> Result<TokenRequest> {
        let api: Api<ServiceAccount> = Api::namespaced(self.client.clone(), namespace);
        let err = |source| Error::TokenRequest {
            namespace: namespace.into(),
            name: service_account.into(),
            source,
        };
        api.create_subresource("token", service_account, &PostParams::default(), request)
            .await
            .map_err(err)
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
    /// PersistentVolumeClaims by name (any namespace).
    pub claims: Mutex<BTreeMap<String, PersistentVolumeClaim>>,
    /// PersistentVolumes by name.
    pub volumes: Mutex<BTreeMap<String, PersistentVolume>>,
}

/// The name [`RecordingPodApi`] records node events under.
pub const NODE_EVENT: &str = "(node)";

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
    TokenRequest {
        service_account: String,
        request: Box<TokenRequest>,
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
    pub fn event_reasons(&self) -> Vec<String> {
        self.writes
            .lock()
            .iter()
            .filter_map(|w| match w {
                Write::Event { event, .. } => Some(event.reason.to_string()),
                _ => None,
            })
            .collect()
    }

    /// The events recorded so far with the name of the pod they are about ([`NODE_EVENT`]
    /// for the Node's), oldest first.
    pub fn events(&self) -> Vec<(String, PodEvent)> {
        self.writes
            .lock()
            .iter()
            .filter_map(|w| match w {
                Write::Event { name, event } => Some((name.clone(), event.clone())),
                _ => None,
            })
            .collect()
    }

    /// The messages of the events recorded so far with `reason`, oldest first.
    pub fn event_messages(&self, reason: &str) -> Vec<String> {
        let events = self.events().into_iter();
        let with_reason = events.filter(|(_, e)| e.reason == reason);
        with_reason.map(|(_, e)| e.message).collect()
    }

    /// The token requests made so far, oldest first.
    pub fn token_requests(&self) -> Vec<TokenRequest> {
        self.writes
            .lock()
            .iter()
            .filter_map(|w| match w {
                Write::TokenRequest { request, .. } => Some((**request).clone()),
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

    /// Recorded as an event named [`NODE_EVENT`].
    async fn node_event(&self, event: PodEvent) {
        self.writes.lock().push(Write::Event {
            name: NODE_EVENT.into(),
            event,
        });
    }

    async fn pod_exists(&self, _namespace: &str, name: &str, _uid: &str) -> Result<bool> {
        Ok(!self.deleted().contains(&name.to_string()))
    }

    async fn config_map(&self, _namespace: &str, name: &str) -> Result<Option<Data>> {
        Ok(self.config_maps.lock().get(name).cloned().map(bytes_of))
    }

    async fn secret(&self, _namespace: &str, name: &str) -> Result<Option<Data>> {
        Ok(self.secrets.lock().get(name).cloned().map(bytes_of))
    }

    async fn claim(&self, _namespace: &str, name: &str) -> Result<Option<PersistentVolumeClaim>> {
        Ok(self.claims.lock().get(name).cloned())
    }

    async fn volume(&self, name: &str) -> Result<Option<PersistentVolume>> {
        Ok(self.volumes.lock().get(name).cloned())
    }

    async fn delete_now(&self, _namespace: &str, name: &str, uid: &str) -> Result<()> {
        self.writes.lock().push(Write::Delete {
            name: name.into(),
            uid: uid.into(),
        });
        Ok(())
    }

    /// Issues `token-N` (N counting from 1), expiring `expirationSeconds` (default 3600)
    /// after the UNIX epoch.
    async fn token_request(
        &self,
        _namespace: &str,
        service_account: &str,
        request: &TokenRequest,
    ) -> Result<TokenRequest> {
        let mut writes = self.writes.lock();
        writes.push(Write::TokenRequest {
            service_account: service_account.into(),
            request: Box::new(request.clone()),
        });
        let issued = writes
            .iter()
            .filter(|w| matches!(w, Write::TokenRequest { .. }))
            .count();
        let now = jiff::Timestamp::UNIX_EPOCH;
        let seconds = request.spec.expiration_seconds.unwrap_or(3600);
        let mut out = request.clone();
        out.status = Some(k8s_openapi::api::authentication::v1::TokenRequestStatus {
            token: format!("token-{issued}"),
            expiration_timestamp: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                now + jiff::SignedDuration::from_secs(seconds),
            ),
        });
        Ok(out)
    }
}
