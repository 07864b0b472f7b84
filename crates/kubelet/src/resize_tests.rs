//! Unit tests of [`super`]: the fit decision, the order of a resize's steps, the resources a
//! status reports and the completion message.

use std::collections::BTreeSet;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{ContainerStatus as ApiContainerStatus, Node, Pod};
use serde_json::{Value, json};

use super::*;
use crate::cgroups::resources::ResourceConfig;

fn node(cpu: &str, memory: &str) -> Node {
    serde_json::from_value(json!({
        "metadata": {"name": "n", "labels": {"kubernetes.io/os": "linux"}},
        "status": {"allocatable": {"cpu": cpu, "memory": memory, "pods": "110"}},
    }))
    .unwrap()
}

fn pod(uid: &str, containers: Value) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": uid, "namespace": "default", "uid": uid},
        "spec": {"nodeName": "n", "containers": containers},
    }))
    .unwrap()
}

fn requesting(uid: &str, cpu: &str, memory: &str) -> Pod {
    pod(
        uid,
        json!([{"name": "c", "image": "busybox",
                "resources": {"requests": {"cpu": cpu, "memory": memory}}}]),
    )
}

fn requirements(requests: Value, limits: Value) -> ResourceRequirements {
    serde_json::from_value(json!({"requests": requests, "limits": limits})).unwrap()
}

#[test]
fn a_resize_beyond_the_allocatable_is_infeasible_and_one_that_does_not_fit_now_deferred() {
    let n = node("2", "1Gi");
    let none = BTreeSet::new();
    let err = |p: &Pod, others: &[Pod]| {
        let others: Vec<Arc<Pod>> = others.iter().cloned().map(Arc::new).collect();
        check(p, &n, &others, &none).unwrap_err()
    };
    assert_eq!(
        err(&requesting("a", "3", "64Mi"), &[]),
        Pending {
            reason: "Infeasible",
            message: "Node didn't have enough capacity: cpu, requested: 3000, capacity: 2000"
                .into()
        }
    );
    assert_eq!(
        err(&requesting("a", "3", "2Gi"), &[]).message,
        "Node didn't have enough capacity: memory, requested: 2147483648, capacity: \
         1073741824",
        "memory is named first"
    );
    let other = requesting("b", "1500m", "64Mi");
    assert_eq!(
        err(&requesting("a", "1", "64Mi"), std::slice::from_ref(&other)),
        Pending {
            reason: "Deferred",
            message: "Node didn't have enough resource: cpu, requested: 1000, used: 1500, \
                      capacity: 2000"
                .into()
        }
    );
    // the pod's own allocation is not counted against it
    let me = requesting("a", "100m", "64Mi");
    let others = vec![Arc::new(me), Arc::new(other)];
    assert!(check(&requesting("a", "500m", "64Mi"), &n, &others, &none).is_ok());

    let disk = BTreeSet::from([Condition::DiskPressure]);
    let under_pressure = check(&requesting("a", "500m", "64Mi"), &n, &[], &disk).unwrap_err();
    assert_eq!(under_pressure.reason, "Deferred");

    let mut mirror = requesting("m", "100m", "64Mi");
    mirror.metadata.annotations = Some([(MIRROR_ANNOTATION.to_string(), "x".into())].into());
    assert_eq!(
        check(&mirror, &n, &[], &none).unwrap_err().message,
        "In-place resize of static-pods is not supported"
    );
}

fn container(name: &str, resources: &ResourceRequirements, policy: Value) -> Container {
    serde_json::from_value(json!({"name": name, "image": "busybox",
                                  "resources": resources, "resizePolicy": policy}))
    .unwrap()
}

/// The steps as short lines: `pod memory=…`, `pod quota=…`, `pod shares=…`, `update c`,
/// `restart c`.
fn lines(steps: &[Step]) -> Vec<String> {
    steps
        .iter()
        .map(|s| match s {
            Step::Restart { container, .. } => format!("restart {container}"),
            Step::PodCgroup(c) => {
                let mut parts = Vec::new();
                if let Some(m) = c.memory {
                    parts.push(format!("memory={m}"));
                }
                if let Some(q) = c.cpu_quota {
                    parts.push(format!("quota={q}"));
                }
                if let Some(s) = c.cpu_shares {
                    parts.push(format!("shares={s}"));
                }
                format!("pod {}", parts.join(" "))
            }
            Step::Update { container, .. } => format!("update {container}"),
        })
        .collect()
}

fn pod_config(shares: u64, quota: i64, memory: i64) -> ResourceConfig {
    ResourceConfig {
        cpu_shares: Some(shares),
        cpu_quota: Some(quota),
        cpu_period: Some(100_000),
        memory: Some(memory),
        pids_limit: None,
    }
}

#[test]
fn growing_limits_go_to_the_pod_cgroup_first_and_shrinking_ones_last() {
    let old = requirements(
        json!({"cpu": "100m", "memory": "64Mi"}),
        json!({"cpu": "200m", "memory": "128Mi"}),
    );
    let new = requirements(
        json!({"cpu": "100m", "memory": "64Mi"}),
        json!({"cpu": "300m", "memory": "192Mi"}),
    );
    let grown = container("c", &new, json!([]));
    let steps = plan(
        &[Running {
            container: &grown,
            actuated: old.clone(),
        }],
        &pod_config(102, 20_000, 128 << 20),
        &pod_config(102, 30_000, 192 << 20),
    );
    assert_eq!(
        lines(&steps),
        [
            "pod memory=201326592",
            "update c",
            "pod quota=30000",
            "update c"
        ]
    );
    // the memory step keeps the CPU the container has; the CPU step brings both
    let Step::Update { resources, .. } = &steps[1] else {
        panic!("an update")
    };
    let limits = resources.limits.as_ref().unwrap();
    assert_eq!(
        (limits["cpu"].0.as_str(), limits["memory"].0.as_str()),
        ("200m", "192Mi")
    );
    let Step::Update { resources, .. } = &steps[3] else {
        panic!("an update")
    };
    assert_eq!(resources.limits.as_ref().unwrap()["cpu"].0, "300m");

    let shrunk = container("c", &old, json!([]));
    let steps = plan(
        &[Running {
            container: &shrunk,
            actuated: new,
        }],
        &pod_config(102, 30_000, 192 << 20),
        &pod_config(102, 20_000, 128 << 20),
    );
    assert_eq!(
        lines(&steps),
        [
            "update c",
            "pod memory=134217728",
            "update c",
            "pod quota=20000"
        ]
    );
}

#[test]
fn containers_that_shrink_go_before_those_that_grow_and_requests_follow_the_limits_order() {
    let small = requirements(json!({"cpu": "100m"}), json!({}));
    let big = requirements(json!({"cpu": "300m"}), json!({}));
    let (a, b) = (
        container("a", &big, json!([])),
        container("b", &small, json!([])),
    );
    let steps = plan(
        &[
            Running {
                container: &a,
                actuated: small.clone(),
            },
            Running {
                container: &b,
                actuated: big.clone(),
            },
        ],
        &pod_config(409, -1, -1),
        &pod_config(409, -1, -1),
    );
    assert_eq!(lines(&steps), ["update b", "update a"]);

    // a CPU request that grows: the pod's shares after the container's
    let grown = container("a", &big, json!([]));
    let steps = plan(
        &[Running {
            container: &grown,
            actuated: small.clone(),
        }],
        &pod_config(102, -1, -1),
        &pod_config(307, -1, -1),
    );
    assert_eq!(lines(&steps), ["update a", "pod shares=307"]);
    let shrunk = container("a", &small, json!([]));
    let steps = plan(
        &[Running {
            container: &shrunk,
            actuated: big,
        }],
        &pod_config(307, -1, -1),
        &pod_config(102, -1, -1),
    );
    assert_eq!(lines(&steps), ["pod shares=102", "update a"]);
}

#[test]
fn a_restart_policy_for_a_changed_resource_restarts_the_container_and_resizes_the_pod() {
    let old = requirements(json!({"memory": "64Mi"}), json!({"memory": "128Mi"}));
    let new = requirements(json!({"memory": "64Mi"}), json!({"memory": "256Mi"}));
    let policy = json!([{"resourceName": "cpu", "restartPolicy": "NotRequired"},
                        {"resourceName": "memory", "restartPolicy": "RestartContainer"}]);
    let c = container("c", &new, policy.clone());
    let steps = plan(
        &[Running {
            container: &c,
            actuated: old.clone(),
        }],
        &pod_config(2, -1, 128 << 20),
        &pod_config(2, -1, 256 << 20),
    );
    assert_eq!(lines(&steps), ["restart c", "pod memory=268435456"]);
    let Step::Restart { message, .. } = &steps[0] else {
        panic!("a restart")
    };
    assert_eq!(message, "Container c resize requires restart");

    // the policy of an unchanged resource does not matter
    let cpu_only = requirements(
        json!({"cpu": "200m", "memory": "64Mi"}),
        json!({"memory": "128Mi"}),
    );
    let c = container("c", &cpu_only, policy);
    let steps = plan(
        &[Running {
            container: &c,
            actuated: requirements(
                json!({"cpu": "100m", "memory": "64Mi"}),
                json!({"memory": "128Mi"}),
            ),
        }],
        &pod_config(2, -1, 128 << 20),
        &pod_config(2, -1, 128 << 20),
    );
    assert_eq!(lines(&steps), ["update c"]);
    // nothing changed, nothing to do
    let same = container("c", &old, json!([]));
    let running = [Running {
        container: &same,
        actuated: old.clone(),
    }];
    assert!(
        plan(
            &running,
            &pod_config(2, -1, 128 << 20),
            &pod_config(2, -1, 128 << 20)
        )
        .is_empty()
    );
}

#[test]
fn a_status_reports_what_the_runtime_runs_else_what_it_last_reported_else_the_allocation() {
    let allocated = requirements(
        json!({"cpu": "150m", "memory": "64Mi"}),
        json!({"cpu": "300m", "memory": "192Mi"}),
    );
    let reported = ContainerResources {
        linux: Some(LinuxContainerResources {
            cpu_period: 100_000,
            cpu_quota: 20_000,
            cpu_shares: 102,
            memory_limit_in_bytes: 128 << 20,
            ..Default::default()
        }),
        windows: None,
    };
    let r = status_resources(
        &allocated,
        true,
        Some(&reported),
        None,
        Some("containerd://a"),
    );
    let (requests, limits) = (r.requests.unwrap(), r.limits.unwrap());
    assert_eq!(requests["cpu"].0, "100m", "102 shares");
    assert_eq!(
        requests["memory"].0, "64Mi",
        "the runtime does not report it"
    );
    assert_eq!(
        (limits["cpu"].0.as_str(), limits["memory"].0.as_str()),
        ("200m", "128Mi")
    );

    assert_eq!(
        status_resources(
            &allocated,
            false,
            Some(&reported),
            None,
            Some("containerd://a")
        ),
        allocated,
        "a container that does not run reports its allocation"
    );
    let old: ApiContainerStatus = serde_json::from_value(json!({
        "name": "c", "image": "busybox", "imageID": "", "ready": true, "restartCount": 0,
        "containerID": "containerd://a", "state": {"running": {}},
        "resources": {"requests": {"cpu": "100m"}, "limits": {"cpu": "200m", "memory": "128Mi"}},
    }))
    .unwrap();
    let r = status_resources(&allocated, true, None, Some(&old), Some("containerd://a"));
    assert_eq!(
        r.limits.unwrap()["cpu"].0,
        "200m",
        "kept from the last status"
    );
    let r = status_resources(&allocated, true, None, Some(&old), Some("containerd://b"));
    assert_eq!(r, allocated, "another container's status is not this one's");
}

#[test]
fn the_completion_message_lists_the_containers_allocated_resources_as_upstream() {
    let p = pod(
        "p",
        json!([{"name": "c", "image": "busybox", "resources": {
            "requests": {"cpu": "0.1", "memory": "64Mi"}, "limits": {"memory": "128Mi"}}}]),
    );
    assert_eq!(
        completed_message(&p),
        "Pod resize completed: {\"containers\":[{\"name\":\"c\",\"resources\":{\"limits\":\
         {\"memory\":\"128Mi\"},\"requests\":{\"cpu\":\"100m\",\"memory\":\"64Mi\"}}}]}"
    );
}
