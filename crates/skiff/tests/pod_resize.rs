//! In-place pod resize on the real containerd (KEP-1287 as upstream 1.33 has it): kubectl
//! 1.33's `patch --subresource resize` gives a running Burstable pod a larger CPU and memory
//! limit, and the kubelet sets its container's and its pod's cgroups without a restart, reports
//! the new resources in the container's status and says `ResizeCompleted`; a restarted
//! kubelet keeps what it allocated; a resize asking for more CPU than the node has stays
//! `PodResizePending` (`Infeasible`); a container whose resize policy restarts it for memory is
//! restarted with its new limit. Needs root (containerd, CNI, cgroups v1); skips otherwise.

mod support;

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Api;
use serde_json::{Value, json};
use skiff_apimachinery::quantity::Quantity;
use support::node::{KubeletProcess, cgroup_file, in_phase, unsupported_without_cgroup_v1};
use support::{ApiServer, Backend, KUBECTL_133, create, eventually, kube_client, run};

const NODE: &str = "resize-e2e";

fn burstable(name: &str, resize_policy: Value) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "nodeName": NODE,
            "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "c", "image": "busybox", "command": ["sleep", "3600"],
                            "resizePolicy": resize_policy,
                            "resources": {"requests": {"cpu": "100m", "memory": "64Mi"},
                                          "limits": {"cpu": "200m", "memory": "128Mi"}}}],
        },
    })
}

/// `kubectl patch pod NAME --subresource resize` with these resources for container `c`.
fn resize(api: &ApiServer, name: &str, resources: Value) {
    let patch = json!({"spec": {"containers": [{"name": "c", "resources": resources}]}});
    api.kubectl(
        KUBECTL_133,
        &[
            "patch",
            "pod",
            name,
            "--subresource",
            "resize",
            "-p",
            &patch.to_string(),
        ],
    );
}

/// The container's status: its limits as reported, its restart count and its id.
fn container(pod: &Pod) -> Option<(String, String, i32, String)> {
    let c = pod.status.as_ref()?.container_statuses.as_ref()?.first()?;
    let limits = c.resources.as_ref()?.limits.as_ref()?;
    Some((
        limits.get("cpu")?.0.clone(),
        limits.get("memory")?.0.clone(),
        c.restart_count,
        c.container_id
            .clone()?
            .trim_start_matches("containerd://")
            .to_string(),
    ))
}

/// The pod's resize conditions: (type, reason, message).
fn resize_conditions(pod: &Pod) -> Vec<(String, String, String)> {
    let conditions = pod.status.as_ref().and_then(|s| s.conditions.as_ref());
    conditions
        .into_iter()
        .flatten()
        .filter(|c| c.type_.starts_with("PodResize"))
        .map(|c| {
            let text = |s: &Option<String>| s.clone().unwrap_or_default();
            (c.type_.clone(), text(&c.reason), text(&c.message))
        })
        .collect()
}

#[test]
fn a_running_pod_is_resized_in_place_or_restarted_as_its_policy_says_or_left_pending() {
    if let Some(why) = unsupported_without_cgroup_v1() {
        support::skip(&why);
        return;
    }
    let api = ApiServer::start(Backend::Embedded);
    let mut kubelet = KubeletProcess::start(&api, NODE);
    let burstable_cgroups = format!("{}/kubepods/burstable", kubelet.cgroup_root());
    run(async {
        let c = kube_client(&api).await;
        let pods: Api<Pod> = Api::namespaced(c.clone(), "default");
        let _: Pod = create(&pods, burstable("grow", json!([]))).await;
        let running = eventually("the pod running", || in_phase(&pods, "grow", "Running")).await;
        let uid = running.metadata.uid.clone().unwrap();
        let (_, _, _, id) = container(&running).expect("the container's status");
        let pod_cgroup = format!("{burstable_cgroups}/pod{uid}");
        let container_cgroup = format!("{pod_cgroup}/{id}");
        assert_eq!(
            cgroup_file("cpu", &container_cgroup, "cpu.cfs_quota_us"),
            "20000"
        );
        assert_eq!(cgroup_file("cpu", &pod_cgroup, "cpu.cfs_quota_us"), "20000");

        // larger limits: the pod cgroup first, then the container, in place
        resize(
            &api,
            "grow",
            json!({"requests": {"cpu": "100m", "memory": "64Mi"},
                   "limits": {"cpu": "300m", "memory": "192Mi"}}),
        );
        let resized = eventually("the resize done", || async {
            let pod = pods.get("grow").await.ok()?;
            let (cpu, memory, _, _) = container(&pod)?;
            (cpu == "300m" && memory == "192Mi" && resize_conditions(&pod).is_empty())
                .then_some(pod)
        })
        .await;
        assert_eq!(
            container(&resized).unwrap().2,
            0,
            "resized without a restart"
        );
        assert_eq!(container(&resized).unwrap().3, id, "the same container");
        assert_eq!(
            cgroup_file("cpu", &container_cgroup, "cpu.cfs_quota_us"),
            "30000"
        );
        assert_eq!(
            cgroup_file("memory", &container_cgroup, "memory.limit_in_bytes"),
            (192 << 20).to_string()
        );
        assert_eq!(cgroup_file("cpu", &pod_cgroup, "cpu.cfs_quota_us"), "30000");
        assert_eq!(
            cgroup_file("memory", &pod_cgroup, "memory.limit_in_bytes"),
            (192 << 20).to_string()
        );
        let completed = api.first_event_message("grow", "ResizeCompleted").await;
        assert_eq!(
            completed,
            "Pod resize completed: {\"containers\":[{\"name\":\"c\",\"resources\":{\"limits\":\
             {\"cpu\":\"300m\",\"memory\":\"192Mi\"},\"requests\":{\"cpu\":\"100m\",\"memory\":\
             \"64Mi\"}}}]}"
        );

        // a restarted kubelet runs the pod with what it allocated: nothing to do again
        kubelet.restart();
        eventually("the pod synced by the new kubelet", || async {
            let pod = pods.get("grow").await.ok()?;
            let ready = pod
                .status
                .as_ref()?
                .conditions
                .as_ref()?
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "True");
            ready.then_some(())
        })
        .await;
        let after = pods.get("grow").await.unwrap();
        assert_eq!(
            container(&after).unwrap(),
            ("300m".into(), "192Mi".into(), 0, id.clone())
        );
        assert!(resize_conditions(&after).is_empty());

        // more CPU than the node has: infeasible, the pod keeps what it has
        let nodes: Api<Node> = Api::all(c.clone());
        let allocatable = nodes
            .get(NODE)
            .await
            .unwrap()
            .status
            .unwrap()
            .allocatable
            .unwrap();
        let cpu = Quantity::parse(&allocatable["cpu"].0)
            .unwrap()
            .milli_value();
        resize(
            &api,
            "grow",
            json!({"requests": {"cpu": "1000", "memory": "64Mi"},
                   "limits": {"cpu": "1000", "memory": "192Mi"}}),
        );
        let pending = eventually("the resize pending", || async {
            let pod = pods.get("grow").await.ok()?;
            let conditions = resize_conditions(&pod);
            (!conditions.is_empty()).then_some(conditions)
        })
        .await;
        assert_eq!(
            pending,
            [(
                "PodResizePending".to_string(),
                "Infeasible".to_string(),
                format!(
                    "Node didn't have enough capacity: cpu, requested: 1000000, capacity: {cpu}"
                )
            )]
        );
        assert_eq!(
            cgroup_file("cpu", &container_cgroup, "cpu.cfs_quota_us"),
            "30000"
        );

        // a container that restarts for memory: a new container with the new limit
        let policy = json!([{"resourceName": "memory", "restartPolicy": "RestartContainer"}]);
        let _: Pod = create(&pods, burstable("restart", policy)).await;
        let running = eventually("the second pod running", || {
            in_phase(&pods, "restart", "Running")
        })
        .await;
        let (_, _, _, first) = container(&running).expect("the container's status");
        resize(
            &api,
            "restart",
            json!({"requests": {"cpu": "100m", "memory": "64Mi"},
                   "limits": {"cpu": "200m", "memory": "256Mi"}}),
        );
        let restarted = eventually("the container restarted", || async {
            let pod = pods.get("restart").await.ok()?;
            let status = container(&pod)?;
            let running = pod.status.as_ref()?.container_statuses.as_ref()?[0]
                .state
                .as_ref()?
                .running
                .is_some();
            (status.2 == 1 && running && resize_conditions(&pod).is_empty()).then_some(status)
        })
        .await;
        assert_eq!(
            (restarted.0.as_str(), restarted.1.as_str()),
            ("200m", "256Mi")
        );
        assert_ne!(restarted.3, first, "a new container");
        let uid = running.metadata.uid.unwrap();
        let new_cgroup = format!("{burstable_cgroups}/pod{uid}/{}", restarted.3);
        assert_eq!(
            cgroup_file("memory", &new_cgroup, "memory.limit_in_bytes"),
            (256 << 20).to_string()
        );
        assert_eq!(
            api.event_message("restart", "Killing"),
            "Container c resize requires restart"
        );
    });
    drop(kubelet);
}
