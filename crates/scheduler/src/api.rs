//! Everything the scheduler writes, behind one trait: bindings, events, the pod's
//! `PodScheduled` condition and nomination, and the eviction of preemption victims. [`KubeApi`] writes through the API server; [`RecordingApi`]
//! records calls for tests and can be told to fail bindings.

use std::sync::Arc;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::{Binding, ObjectReference, Pod};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Api, Patch, PatchParams, PostParams};
use parking_lot::Mutex;
use serde_json::json;

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
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The scheduler's writes.
#[async_trait]
pub trait ClusterApi: Send + Sync {
    /// POSTs a `Binding` to `pods/{name}/binding`.
    async fn bind(&self, pod: &PodInfo, node: &str) -> Result<()>;
    /// A Normal `Scheduled` event: "Successfully assigned ns/pod to node".
    async fn scheduled(&self, pod: &PodInfo, node: &str);
    /// A Warning `FailedScheduling` event, and the pod's `PodScheduled=False` condition with
    /// reason `Unschedulable` (or `SchedulerError`); `nominated` sets `nominatedNodeName`
    /// (`Some("")` clears it).
    async fn failed(&self, pod: &PodInfo, reason: &str, message: &str, nominated: Option<&str>);
    /// Evicts a preemption victim as upstream does: the `DisruptionTarget` condition, the
    /// deletion (with the pod's own grace period), and a Normal `Preempted` event on it.
    async fn preempt(&self, victim: &PodInfo, preemptor: &PodInfo, node: &str, profile: &str);
}

/// Writes through the API server.
pub struct KubeApi {
    client: kube::Client,
    instance: String,
}

impl KubeApi {
    pub fn new(client: kube::Client, instance: String) -> KubeApi {
        KubeApi { client, instance }
    }

    fn pods(&self, pod: &PodInfo) -> Api<Pod> {
        Api::namespaced(self.client.clone(), pod.namespace())
    }

    /// Creates an `events.k8s.io/v1` Event about the pod, named as upstream names them
    /// (`{pod}.{unix nanos in hex}`). Written directly rather than through kube's `Recorder`,
    /// whose deduplication cache is scanned on every publish: one event per pod would make
    /// scheduling quadratic.
    async fn event(&self, pod: &PodInfo, type_: &str, reason: &str, action: &str, note: &str) {
        self.event_related(pod, None, type_, reason, action, note)
            .await;
    }

    /// An event about `pod` that also names `related` (the preemptor of a victim).
    async fn event_related(
        &self,
        pod: &PodInfo,
        related: Option<&PodInfo>,
        type_: &str,
        reason: &str,
        action: &str,
        note: &str,
    ) {
        let now = jiff::Timestamp::now();
        let event = Event {
            metadata: ObjectMeta {
                name: Some(format!("{}.{:x}", pod.name(), now.as_nanosecond())),
                namespace: Some(pod.namespace().into()),
                ..Default::default()
            },
            event_time: Some(MicroTime(now)),
            reporting_controller: Some(REPORTING_CONTROLLER.into()),
            reporting_instance: Some(self.instance.clone()),
            action: Some(action.into()),
            reason: Some(reason.into()),
            note: Some(note.into()),
            type_: Some(type_.into()),
            regarding: Some(reference(pod)),
            related: related.map(reference),
            ..Default::default()
        };
        let events: Api<Event> = Api::namespaced(self.client.clone(), pod.namespace());
        if let Err(e) = events.create(&PostParams::default(), &event).await {
            tracing::warn!(pod = %pod.key, error = %e, "recording event {reason}");
        }
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

/// Now, to the second (condition times are whole seconds).
fn now_seconds() -> jiff::Timestamp {
    let now = jiff::Timestamp::now();
    now.round(jiff::Unit::Second).unwrap_or(now)
}

#[async_trait]
impl ClusterApi for KubeApi {
    async fn bind(&self, pod: &PodInfo, node: &str) -> Result<()> {
        let binding = Binding {
            metadata: ObjectMeta {
                name: Some(pod.name().into()),
                namespace: Some(pod.namespace().into()),
                uid: pod.pod.metadata.uid.clone(),
                ..Default::default()
            },
            target: ObjectReference {
                kind: Some("Node".into()),
                name: Some(node.into()),
                ..Default::default()
            },
        };
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
        self.event(pod, "Normal", "Scheduled", "Binding", &note)
            .await;
    }

    async fn failed(&self, pod: &PodInfo, reason: &str, message: &str, nominated: Option<&str>) {
        self.event(pod, "Warning", "FailedScheduling", "Scheduling", message)
            .await;
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
        self.event_related(
            victim,
            Some(preemptor),
            "Normal",
            "Preempted",
            "Preempting",
            &note,
        )
        .await;
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
}

/// Records calls; bindings of pods named in `fail_binds` fail.
#[derive(Default)]
pub struct RecordingApi {
    pub calls: Mutex<Vec<Call>>,
    pub fail_binds: Mutex<Vec<String>>,
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
    async fn bind(&self, pod: &PodInfo, node: &str) -> Result<()> {
        self.calls.lock().push(Call::Bind {
            pod: pod.key.clone(),
            node: node.into(),
        });
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
}
