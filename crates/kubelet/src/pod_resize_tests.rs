//! Unit tests of [`crate::pod_resize`]: a running pod resized through the pod worker's
//! [`SyncContext::allocate_resize`] and [`SyncContext::sync_pod`], with the fake runtime.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::Node;

use super::*;
use crate::pod_resize::ResizeInputs;

fn burstable(cpu_limit: &str, memory_limit: &str, resize_policy: serde_json::Value) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": "web", "namespace": "default", "uid": "u1"},
        "spec": {"nodeName": "n1", "terminationGracePeriodSeconds": 1,
                 "containers": [{"name": "c", "image": "busybox", "command": ["sleep", "3600"],
                                 "resizePolicy": resize_policy,
                                 "resources": {
                                     "requests": {"cpu": "100m", "memory": "64Mi"},
                                     "limits": {"cpu": cpu_limit, "memory": memory_limit}}}]},
        "status": {"phase": "Pending", "qosClass": "Burstable"},
    }))
    .unwrap()
}

fn node() -> Node {
    serde_json::from_value(json!({
        "metadata": {"name": "n1", "labels": {"kubernetes.io/os": "linux"}},
        "status": {"allocatable": {"cpu": "2", "memory": "4Gi", "pods": "110"}},
    }))
    .unwrap()
}

impl Harness {
    /// Runs the pod as admitted, then syncs it once its spec says `resized`, as the worker
    /// does: the resize judged, then the pod synced as allocated.
    async fn resize(&self, pod: &mut Pod, resized: &Pod) {
        let mut desired = resized.clone();
        desired.status = pod.status.clone();
        let inputs = || {
            let inputs = ResizeInputs {
                node: Arc::new(node()),
                pressure: BTreeSet::new(),
            };
            (inputs, Vec::new())
        };
        let allocated = self.ctx.allocate_resize(&Arc::new(desired), inputs).await;
        let mut allocated = (*allocated).clone();
        self.sync(&mut allocated).await;
        *pod = allocated;
    }

    async fn start(&self, pod: &mut Pod) {
        self.ctx.allocations.set_allocated(pod).unwrap();
        self.sync(pod).await;
        self.sync(pod).await;
        assert_eq!(self.status().phase.as_deref(), Some("Running"));
    }
}

fn limits(status: &PodStatus) -> (String, String) {
    let c = &status.container_statuses.as_ref().unwrap()[0];
    let limits = c.resources.as_ref().unwrap().limits.clone().unwrap();
    (limits["cpu"].0.clone(), limits["memory"].0.clone())
}

fn condition_reasons(status: &PodStatus) -> Vec<(String, Option<String>)> {
    status
        .conditions
        .iter()
        .flatten()
        .filter(|c| c.type_.starts_with("PodResize"))
        .map(|c| (c.type_.clone(), c.reason.clone()))
        .collect()
}

#[tokio::test]
async fn a_resize_that_fits_updates_the_running_container_in_place() {
    let h = harness();
    let mut pod = burstable("200m", "128Mi", json!([]));
    h.start(&mut pod).await;
    assert_eq!(limits(&h.status()), ("200m".into(), "128Mi".into()));

    h.resize(&mut pod, &burstable("300m", "192Mi", json!([])))
        .await;
    let updates: Vec<String> = h
        .runtime
        .calls()
        .into_iter()
        .filter(|c| c.starts_with("UpdateContainerResources"))
        .collect();
    assert_eq!(
        updates,
        [
            // memory first (the CPU as it was), then CPU; the sandbox took id 1
            "UpdateContainerResources container-2 shares=102 quota=20000 memory=201326592",
            "UpdateContainerResources container-2 shares=102 quota=30000 memory=201326592",
        ]
    );
    let status = h.status();
    assert_eq!(limits(&status), ("300m".into(), "192Mi".into()));
    assert_eq!(
        status.container_statuses.as_ref().unwrap()[0].restart_count,
        0
    );
    assert!(condition_reasons(&status).is_empty());
    assert_eq!(
        h.api.event_messages("ResizeCompleted"),
        [
            "Pod resize completed: {\"containers\":[{\"name\":\"c\",\"resources\":{\"limits\":\
          {\"cpu\":\"300m\",\"memory\":\"192Mi\"},\"requests\":{\"cpu\":\"100m\",\"memory\":\
          \"64Mi\"}}}]}"
        ]
    );
    assert_eq!(
        h.ctx
            .allocations
            .allocated("u1", "c")
            .unwrap()
            .limits
            .unwrap()["cpu"]
            .0,
        "300m"
    );
}

#[tokio::test]
async fn a_resize_beyond_the_node_is_pending_infeasible_and_the_pod_keeps_its_resources() {
    let h = harness();
    let mut pod = burstable("200m", "128Mi", json!([]));
    h.start(&mut pod).await;
    let mut too_big = burstable("8", "128Mi", json!([]));
    too_big.spec.as_mut().unwrap().containers[0]
        .resources
        .as_mut()
        .unwrap()
        .requests
        .as_mut()
        .unwrap()
        .insert(
            "cpu".into(),
            k8s_openapi::apimachinery::pkg::api::resource::Quantity("4".into()),
        );
    h.resize(&mut pod, &too_big).await;
    assert_eq!(h.count("UpdateContainerResources"), 0);
    let status = h.status();
    assert_eq!(
        condition_reasons(&status),
        [(
            "PodResizePending".to_string(),
            Some("Infeasible".to_string())
        )]
    );
    let pending = status
        .conditions
        .as_ref()
        .unwrap()
        .iter()
        .find(|c| c.type_ == "PodResizePending");
    assert_eq!(
        pending.unwrap().message.as_deref(),
        Some("Node didn't have enough capacity: cpu, requested: 4000, capacity: 2000")
    );
    assert_eq!(limits(&status), ("200m".into(), "128Mi".into()));

    // asking for what it has again: nothing pending any more
    h.resize(&mut pod, &burstable("200m", "128Mi", json!([])))
        .await;
    assert!(condition_reasons(&h.status()).is_empty());
}

#[tokio::test]
async fn a_restart_container_policy_restarts_the_container_with_its_new_memory() {
    let h = harness();
    let policy = json!([{"resourceName": "memory", "restartPolicy": "RestartContainer"}]);
    let mut pod = burstable("200m", "128Mi", policy.clone());
    h.start(&mut pod).await;
    h.resize(&mut pod, &burstable("200m", "256Mi", policy))
        .await;
    assert_eq!(h.count("UpdateContainerResources"), 0);
    assert!(
        h.api
            .event_messages("Killing")
            .contains(&"Container c resize requires restart".to_string())
    );
    let status = h.status();
    let c = &status.container_statuses.as_ref().unwrap()[0];
    assert_eq!(c.restart_count, 1);
    assert!(c.state.as_ref().unwrap().running.is_some());
    assert_eq!(limits(&status), ("200m".into(), "256Mi".into()));
    assert_eq!(h.api.event_messages("ResizeCompleted").len(), 1);
}

#[tokio::test]
async fn a_failed_update_leaves_the_resize_in_progress_with_its_error_and_is_tried_again() {
    let h = harness();
    let mut pod = burstable("200m", "128Mi", json!([]));
    h.start(&mut pod).await;
    h.runtime
        .fail("UpdateContainerResources", tonic::Code::Unknown);
    h.resize(&mut pod, &burstable("300m", "128Mi", json!([])))
        .await;
    let status = h.status();
    assert_eq!(
        condition_reasons(&status),
        [("PodResizeInProgress".to_string(), Some("Error".to_string()))]
    );
    let in_progress = status
        .conditions
        .as_ref()
        .unwrap()
        .iter()
        .find(|c| c.type_ == "PodResizeInProgress");
    assert_eq!(
        in_progress.unwrap().message.as_deref(),
        Some("rpc error: code = Unknown desc = injected failure")
    );
    assert_eq!(limits(&status), ("200m".into(), "128Mi".into()));
    assert!(h.api.event_messages("ResizeCompleted").is_empty());

    h.runtime.recover("UpdateContainerResources");
    h.resize(&mut pod, &burstable("300m", "128Mi", json!([])))
        .await;
    let status = h.status();
    assert!(condition_reasons(&status).is_empty());
    assert_eq!(limits(&status), ("300m".into(), "128Mi".into()));
    assert_eq!(h.api.event_messages("ResizeCompleted").len(), 1);
}
