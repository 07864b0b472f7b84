//! Everything the scheduler writes, behind one trait: bindings (with the pod's queue wait as an
//! annotation), events, the pod's `PodScheduled` condition and nomination, the eviction of
//! preemption victims, and volume binding's updates of PersistentVolumes and claims. [`KubeApi`] writes through the API
//! server; [`RecordingApi`] records calls for tests and can be told to fail bindings and
//! updates.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::{
    Binding, ObjectReference, PersistentVolume, PersistentVolumeClaim, Pod,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, Patch, PatchParams, PostParams};
use parking_lot::Mutex;
use serde_json::json;
use skiff_component_helpers::binding::{ANN_QUEUE_WAIT, format_queue_wait};
use skiff_runtime::events::{Event, Recorder, Reporter};

use crate::framework::PodInfo;

/// Upstream's reporting controller name for scheduler events.
pub const REPORTING_CONTROLLER: &str = "default-scheduler";

/// A write the scheduler could not make.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("binding pod {pod} to node {node}: {message}")]
    Bind {
        pod: String,
        node: String,
        message: String,
    },
    #[error("updating {kind} {name}: {message}")]
    Update {
        kind: &'static str,
        name: String,
        message: String,
    },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The scheduler's writes.
#[async_trait]
pub trait ClusterApi: Send + Sync {
    /// POSTs a `Binding` to `pods/{name}/binding`, with `queue_wait` (how long the pod waited
    /// in the scheduling queue) as its [`ANN_QUEUE_WAIT`] annotation when known.
    async fn bind(&self, pod: &PodInfo, node: &str, queue_wait: Option<Duration>) -> Result<()>;
    /// A Normal `Scheduled` event: "Successfully assigned ns/pod to node".
    async fn scheduled(&self, pod: &PodInfo, node: &str);
    /// A Warning `FailedScheduling` event, and the pod's `PodScheduled=False` condition with
    /// reason `Unschedulable` (or `SchedulerError`); `nominated` sets `nominatedNodeName`
    /// (`Some("")` clears it).
    async fn failed(&self, pod: &PodInfo, reason: &str, message: &str, nominated: Option<&str>);
    /// Evicts a preemption victim as upstream does: the `DisruptionTarget` condition, the
    /// deletion (with the pod's own grace period), and a Normal `Preempted` event on it.
    async fn preempt(&self, victim: &PodInfo, preemptor: &PodInfo, node: &str, profile: &str);
    /// PUTs a PersistentVolume (volume binding's `claimRef`); returns what the server stored.
    async fn update_volume(&self, volume: &PersistentVolume) -> Result<PersistentVolume>;
    /// PUTs a PersistentVolumeClaim (volume binding's `selected-node`); returns what the
    /// server stored.
    async fn update_claim(&self, claim: &PersistentVolumeClaim) -> Result<PersistentVolumeClaim>;
}

/// The API server's own message for an API error (`Operation cannot be fulfilled on …`), else
/// the client's.
fn api_message(e: kube::Error) -> String {
    match e {
        kube::Error::Api(s) => s.message,
        e => e.to_string(),
    }
}

/// Writes through the API server; events go through the scheduler's [`Recorder`].
pub struct KubeApi {
    client: kube::Client,
    events: Recorder,
}

impl KubeApi {
    /// Writes through `client`, reporting events as [`REPORTING_CONTROLLER`] `instance`.
    pub fn new(client: kube::Client, instance: String) -> KubeApi {
        let reporter = Reporter {
            controller: REPORTING_CONTROLLER.into(),
            instance,
        };
        KubeApi {
            events: Recorder::new(client.clone(), reporter),
            client,
        }
    }

    fn pods(&self, pod: &PodInfo) -> Api<Pod> {
        Api::namespaced(self.client.clone(), pod.namespace())
    }
}

fn reference(pod: &PodInfo) -> ObjectReference {
    ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Pod".into()),
        name: Some(pod.name().into()),
        namespace: Some(pod.namespace().into()),
        uid: pod.pod.metadata.uid.clone(),
        resource_version: pod.pod.metadata.resource_version.clone(),
        ..Default::default()
    }
}

/// The Binding of `pod` to `node`; the API server copies its annotations onto the pod.
fn binding(pod: &PodInfo, node: &str, queue_wait: Option<Duration>) -> Binding {
    let annotations =
        queue_wait.map(|w| [(ANN_QUEUE_WAIT.to_string(), format_queue_wait(w))].into());
    Binding {
        metadata: ObjectMeta {
            name: Some(pod.name().into()),
            namespace: Some(pod.namespace().into()),
            uid: pod.pod.metadata.uid.clone(),
            annotations,
            ..Default::default()
        },
        target: ObjectReference {
            kind: Some("Node".into()),
            name: Some(node.into()),
            ..Default::default()
        },
    }
}

/// Now, to the second (condition times are whole seconds).
fn now_seconds() -> jiff::Timestamp {
    let now = jiff::Timestamp::now();
    now.round(jiff::Unit::Second).unwrap_or(now)
}

#[async_trait]
impl ClusterApi for KubeApi {
    async fn bind(&self, pod: &PodInfo, node: &str, queue_wait: Option<Duration>) -> Result<()> {
        let binding = binding(pod, node, queue_wait);
        self.pods(pod)
            .create_subresource::<Binding, serde_json::Value>(
                "binding",
                pod.name(),
                &PostParams::default(),
                &binding,
            )
            .await
            .map(|_| ())
            .map_err(|e| Error::Bind {
                pod: pod.key.clone(),
                node: node.into(),
                message: e.to_string(),
            })
    }

    async fn scheduled(&self, pod: &PodInfo, node: &str) {
        let note = format!("Successfully assigned {} to {node}", pod.key);
        let event = Event::normal(reference(pod), "Scheduled", note);
        self.events.record(event.with_action("Binding"));
    }

    async fn failed(&self, pod: &PodInfo, reason: &str, message: &str, nominated: Option<&str>) {
        let event = Event::warning(reference(pod), "FailedScheduling", message.into());
        self.events.record(event.with_action("Scheduling"));
        let mut status = json!({
            "conditions": [{
                "type": "PodScheduled",
                "status": "False",
                "reason": reason,
                "message": message,
                "lastProbeTime": null,
                "lastTransitionTime": now_seconds().to_string(),
            }],
        });
        match nominated {
            Some("") => status["nominatedNodeName"] = serde_json::Value::Null,
            Some(node) => status["nominatedNodeName"] = json!(node),
            None => {}
        }
        let patch = json!({ "status": status });
        if let Err(e) = self
            .pods(pod)
            .patch_status(
                pod.name(),
                &PatchParams::default(),
                &Patch::Strategic(patch),
            )
            .await
        {
            tracing::debug!(pod = %pod.key, error = %e, "updating the PodScheduled condition");
        }
    }

    async fn preempt(&self, victim: &PodInfo, preemptor: &PodInfo, node: &str, profile: &str) {
        let condition = json!({"status": {"conditions": [{
            "type": "DisruptionTarget",
            "status": "True",
            "reason": "PreemptionByScheduler",
            "message": format!("{profile}: preempting to accommodate a higher priority pod"),
            "lastTransitionTime": now_seconds().to_string(),
        }]}});
        let pods = self.pods(victim);
        if let Err(e) = pods
            .patch_status(
                victim.name(),
                &PatchParams::default(),
                &Patch::Strategic(condition),
            )
            .await
        {
            tracing::debug!(pod = %victim.key, error = %e, "adding the DisruptionTarget condition");
        }
        let deleted = pods
            .delete(victim.name(), &kube::api::DeleteParams::default())
            .await;
        match deleted {
            Ok(_) => {}
            // already gone: its room is free all the same, and there is nothing to report
            Err(kube::Error::Api(e)) if e.code == 404 => return,
            Err(e) => {
                tracing::warn!(pod = %victim.key, error = %e, "deleting a preemption victim");
                return;
            }
        }
        let note = format!("Preempted by pod {} on node {node}", preemptor.uid());
        let event = Event::normal(reference(victim), "Preempted", note);
        let event = event.with_related(Some(reference(preemptor)));
        self.events.record(event.with_action("Preempting"));
    }

    async fn update_volume(&self, volume: &PersistentVolume) -> Result<PersistentVolume> {
        let name = volume.metadata.name.clone().unwrap_or_default();
        Api::<PersistentVolume>::all(self.client.clone())
            .replace(&name, &PostParams::default(), volume)
            .await
            .map_err(|e| Error::Update {
                kind: "PersistentVolume",
                name,
                message: api_message(e),
            })
    }

    async fn update_claim(&self, claim: &PersistentVolumeClaim) -> Result<PersistentVolumeClaim> {
        let name = claim.metadata.name.clone().unwrap_or_default();
        let namespace = claim.metadata.namespace.as_deref().unwrap_or("default");
        Api::<PersistentVolumeClaim>::namespaced(self.client.clone(), namespace)
            .replace(&name, &PostParams::default(), claim)
            .await
            .map_err(|e| Error::Update {
                kind: "PersistentVolumeClaim",
                name: format!("{namespace}/{name}"),
                message: api_message(e),
            })
    }
}

/// One call the scheduler made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Call {
    Bind {
        pod: String,
        node: String,
    },
    Scheduled {
        pod: String,
        node: String,
    },
    Failed {
        pod: String,
        reason: String,
        message: String,
    },
    Preempt {
        victim: String,
        preemptor: String,
        node: String,
    },
    /// A PersistentVolume updated, with the claim (`namespace/name`) its `claimRef` names.
    UpdateVolume {
        volume: String,
        claim: String,
    },
    /// A claim (`namespace/name`) updated, with its `selected-node` annotation.
    UpdateClaim {
        claim: String,
        selected_node: Option<String>,
    },
}

/// Records calls; bindings of pods named in `fail_binds` fail, and so do updates of volumes
/// and claims (by name, `namespace/name` for claims) named in `fail_updates`. An update
/// returns the object with its resource version plus one.
#[derive(Default)]
pub struct RecordingApi {
    pub calls: Mutex<Vec<Call>>,
    /// The queue wait each binding carried, with its pod, in the order of the bindings.
    pub queue_waits: Mutex<Vec<(String, Option<Duration>)>>,
    pub fail_binds: Mutex<Vec<String>>,
    pub fail_updates: Mutex<Vec<String>>,
}

/// The object as a server would store it: its resource version plus one.
fn stored<K: kube::Resource + Clone>(obj: &K) -> K {
    let mut obj = obj.clone();
    let meta = obj.meta_mut();
    let rv: u64 = meta
        .resource_version
        .as_deref()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    meta.resource_version = Some((rv + 1).to_string());
    obj
}

impl RecordingApi {
    pub fn new() -> Arc<RecordingApi> {
        Arc::new(RecordingApi::default())
    }

    pub fn calls(&self) -> Vec<Call> {
        self.calls.lock().clone()
    }
}

#[async_trait]
impl ClusterApi for RecordingApi {
    async fn bind(&self, pod: &PodInfo, node: &str, queue_wait: Option<Duration>) -> Result<()> {
        self.calls.lock().push(Call::Bind {
            pod: pod.key.clone(),
            node: node.into(),
        });
        self.queue_waits.lock().push((pod.key.clone(), queue_wait));
        if self.fail_binds.lock().contains(&pod.key) {
            return Err(Error::Bind {
                pod: pod.key.clone(),
                node: node.into(),
                message: "told to fail".into(),
            });
        }
        Ok(())
    }

    async fn scheduled(&self, pod: &PodInfo, node: &str) {
        self.calls.lock().push(Call::Scheduled {
            pod: pod.key.clone(),
            node: node.into(),
        });
    }

    async fn failed(&self, pod: &PodInfo, reason: &str, message: &str, _: Option<&str>) {
        self.calls.lock().push(Call::Failed {
            pod: pod.key.clone(),
            reason: reason.into(),
            message: message.into(),
        });
    }

    async fn preempt(&self, victim: &PodInfo, preemptor: &PodInfo, node: &str, _: &str) {
        self.calls.lock().push(Call::Preempt {
            victim: victim.key.clone(),
            preemptor: preemptor.key.clone(),
            node: node.into(),
        });
    }

    async fn update_volume(&self, volume: &PersistentVolume) -> Result<PersistentVolume> {
        let name = volume.metadata.name.clone().unwrap_or_default();
        let claim = volume
            .spec
            .as_ref()
            .and_then(|s| s.claim_ref.as_ref())
            .map(|r| {
                format!(
                    "{}/{}",
                    r.namespace.as_deref().unwrap_or(""),
                    r.name.as_deref().unwrap_or("")
                )
            })
            .unwrap_or_default();
        self.calls.lock().push(Call::UpdateVolume {
            volume: name.clone(),
            claim,
        });
        if self.fail_updates.lock().contains(&name) {
            return Err(Error::Update {
                kind: "PersistentVolume",
                name,
                message: "told to fail".into(),
            });
        }
        Ok(stored(volume))
    }

    async fn update_claim(&self, claim: &PersistentVolumeClaim) -> Result<PersistentVolumeClaim> {
        let key = format!(
            "{}/{}",
            claim.metadata.namespace.as_deref().unwrap_or(""),
            claim.metadata.name.as_deref().unwrap_or("")
        );
        let selected_node = claim
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(skiff_component_helpers::volume::ANN_SELECTED_NODE))
            .cloned();
        self.calls.lock().push(Call::UpdateClaim {
            claim: key.clone(),
            selected_node,
        });
        if self.fail_updates.lock().contains(&key) {
            return Err(Error::Update {
                kind: "PersistentVolumeClaim",
                name: key,
                message: "told to fail".into(),
            });
        }
        Ok(stored(claim))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::testing::PodBuilder;

    #[test]
    fn a_binding_carries_the_queue_wait_as_an_annotation_in_decimal_seconds() {
        let pod = PodBuilder::new("web").info();
        let b = binding(&pod, "n1", Some(Duration::from_micros(12_300)));
        assert_eq!(b.metadata.name.as_deref(), Some("web"));
        assert_eq!(b.target.name.as_deref(), Some("n1"));
        let annotations = b.metadata.annotations.unwrap();
        assert_eq!(
            annotations.get("scheduler.skiff.io/queue-wait-seconds"),
            Some(&"0.0123".to_string())
        );
        let unknown = binding(&pod, "n1", None);
        assert_eq!(unknown.metadata.annotations, None);
    }
}
