//! Node-pressure eviction on the real containerd (upstream's eviction manager): with a soft
//! `memory.available` threshold well above what the host has, the kubelet reports
//! MemoryPressure, evicts the BestEffort pod first (Failed, `Evicted`, upstream's message, a
//! `DisruptionTarget` condition and a Warning event) while the Burstable one keeps running,
//! and refuses a new BestEffort pod with "The node had condition: [MemoryPressure]. ". Needs
//! root (containerd, CNI); skips otherwise.

mod support;

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Api;
use serde_json::json;
use support::node::{KubeletProcess, in_phase, unsupported};
use support::{ApiServer, Backend, create, eventually, kube_client, run};

const NODE: &str = "eviction-e2e";

fn pod(name: &str, resources: serde_json::Value, script: &str) -> serde_json::Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "nodeName": NODE,
            "terminationGracePeriodSeconds": 30,
            "containers": [{"name": name, "image": "busybox", "command": ["sh", "-c", script],
                            "resources": resources}],
        },
    })
}

#[test]
fn a_soft_memory_threshold_evicts_the_best_effort_pod_first_and_raises_memory_pressure() {
    if let Some(why) = unsupported() {
        support::skip(&why);
        return;
    }
    let api = ApiServer::start(Backend::Embedded);
    // no hard thresholds: a full disk on the test host must not put the node under pressure
    let mut kubelet = KubeletProcess::start_with(&api, NODE, &["--eviction-hard="]);
    run(async {
        let c = kube_client(&api).await;
        let pods: Api<Pod> = Api::namespaced(c.clone(), "default");
        let nodes: Api<Node> = Api::all(c.clone());

        // the BestEffort pod ignores SIGTERM, so its eviction (30 s of grace) holds the eviction
        // manager until the test is done looking
        let hog: Pod = create(&pods, pod("hog", json!({}), "trap '' TERM; sleep 3600")).await;
        let requests = json!({"requests": {"cpu": "10m", "memory": "64Mi"},
                              "limits": {"memory": "128Mi"}});
        create::<Pod>(&pods, pod("keeper", requests, "sleep 3600")).await;
        for name in ["hog", "keeper"] {
            eventually(&format!("{name} running"), || {
                in_phase(&pods, name, "Running")
            })
            .await;
        }
        assert_eq!(
            hog.status.and_then(|s| s.qos_class).as_deref(),
            Some("BestEffort")
        );

        // memory.available as the kubelet reads it, and a threshold a quarter of the host's
        // memory above it: the node is under pressure from the restarted kubelet's first look to
        // the end of the test, whatever the tests beside this one do with the host's memory
        let memory = skiff_kubelet::eviction::signals::host_memory_available()
            .expect("memory.available of this host");
        let threshold = format!(
            "memory.available<{}",
            memory.available + memory.capacity / 4
        );
        kubelet.restart_with(&[
            "--eviction-hard=",
            "--eviction-soft",
            &threshold,
            "--eviction-soft-grace-period",
            "memory.available=2s",
            "--eviction-pressure-transition-period",
            "30s",
            "--eviction-max-pod-grace-period",
            "30",
        ]);

        let evicted = eventually("the BestEffort pod evicted", || {
            in_phase(&pods, "hog", "Failed")
        })
        .await;
        let status = evicted.status.unwrap();
        assert_eq!(status.reason.as_deref(), Some("Evicted"));
        let message = status.message.unwrap();
        assert!(
            message.starts_with("The node was low on resource: memory. Threshold quantity: ")
                && message.contains(". Container hog was using ")
                && message.ends_with(", request is 0, has larger consumption of memory. "),
            "{message}"
        );
        let disruption = status
            .conditions
            .iter()
            .flatten()
            .find(|c| c.type_ == "DisruptionTarget")
            .expect("a DisruptionTarget condition");
        assert_eq!(
            (disruption.status.as_str(), disruption.reason.as_deref()),
            ("True", Some("TerminationByKubelet"))
        );
        assert_eq!(disruption.message.as_deref(), Some(message.as_str()));
        // the hog's grace period is not over: the Burstable pod has not been ranked yet
        let keeper = pods.get("keeper").await.unwrap().status.unwrap();
        assert_eq!(keeper.phase.as_deref(), Some("Running"));
        assert_eq!(api.first_event_message("hog", "Evicted").await, message);

        let pressure = eventually("MemoryPressure on the node", || async {
            let node = nodes.get(NODE).await.ok()?;
            let conditions = node.status?.conditions?;
            let c = conditions
                .into_iter()
                .find(|c| c.type_ == "MemoryPressure")?;
            (c.status == "True").then_some(c)
        })
        .await;
        assert_eq!(
            pressure.reason.as_deref(),
            Some("KubeletHasInsufficientMemory")
        );
        assert_eq!(
            pressure.message.as_deref(),
            Some("kubelet has insufficient memory available")
        );

        // a new BestEffort pod is refused while the pressure lasts
        create::<Pod>(&pods, pod("late", json!({}), "sleep 3600")).await;
        let late = eventually("the late pod refused", || in_phase(&pods, "late", "Failed")).await;
        let status = late.status.unwrap();
        assert_eq!(status.reason.as_deref(), Some("Evicted"));
        assert_eq!(
            status.message.as_deref(),
            Some("Pod was rejected: The node had condition: [MemoryPressure]. ")
        );
    });
}
