//! Unit tests of the pods table: representative pods and the cells upstream prints for them.

use super::*;
use serde_json::{Value, json};

fn now() -> Timestamp {
    "2024-05-01T12:00:00Z".parse().unwrap()
}

/// The first five cells (NAME READY STATUS RESTARTS AGE) of `pod`.
fn short(pod: Value) -> Vec<Value> {
    cells(&pod, now())[..5].to_vec()
}

fn pod(containers: usize, status: Value) -> Value {
    let containers: Vec<Value> = (0..containers)
        .map(|i| json!({"name": format!("c{i}"), "image": "busybox"}))
        .collect();
    json!({
        "metadata": {"name": "p", "creationTimestamp": "2024-05-01T11:00:00Z"},
        "spec": {"containers": containers},
        "status": status,
    })
}

fn running(ready: bool) -> Value {
    json!({"ready": ready, "restartCount": 0, "state": {"running": {"startedAt": "2024-05-01T11:00:00Z"}}})
}

#[test]
fn a_running_pod_counts_ready_containers_and_recent_restarts() {
    let mut c1 = running(true);
    c1["restartCount"] = json!(3);
    c1["lastState"] = json!({"terminated": {"exitCode": 1, "finishedAt": "2024-05-01T11:55:00Z"}});
    let p = pod(
        2,
        json!({"phase": "Running", "containerStatuses": [running(true), c1]}),
    );
    assert_eq!(
        short(p),
        [
            json!("p"),
            json!("2/2"),
            json!("Running"),
            json!("3 (5m ago)"),
            json!("60m")
        ]
    );
}

#[test]
fn container_states_give_the_status_reason() {
    let cases = [
        (
            json!({"waiting": {"reason": "ContainerCreating"}}),
            "ContainerCreating",
        ),
        (
            json!({"waiting": {"reason": "CrashLoopBackOff"}}),
            "CrashLoopBackOff",
        ),
        (
            json!({"waiting": {"reason": "ImagePullBackOff"}}),
            "ImagePullBackOff",
        ),
        (
            json!({"terminated": {"reason": "Completed", "exitCode": 0}}),
            "Completed",
        ),
        (
            json!({"terminated": {"reason": "OOMKilled", "exitCode": 137}}),
            "OOMKilled",
        ),
        (json!({"terminated": {"exitCode": 2}}), "ExitCode:2"),
        (
            json!({"terminated": {"exitCode": 137, "signal": 9}}),
            "Signal:9",
        ),
        (json!({"waiting": {}}), "Running"),
    ];
    for (state, want) in cases {
        let p = pod(
            1,
            json!({"phase": "Running", "containerStatuses": [{"state": state}]}),
        );
        assert_eq!(short(p)[2], json!(want), "{want}");
    }
}

#[test]
fn a_pod_without_statuses_shows_its_phase_or_reason() {
    assert_eq!(
        short(pod(1, json!({"phase": "Pending"}))),
        [
            json!("p"),
            json!("0/1"),
            json!("Pending"),
            json!("0"),
            json!("60m")
        ]
    );
    let evicted = pod(1, json!({"phase": "Failed", "reason": "Evicted"}));
    assert_eq!(short(evicted)[2], json!("Evicted"));
}

#[test]
fn init_containers_report_progress_and_failures() {
    let spec = json!([{"name": "i0"}, {"name": "i1"}]);
    let done =
        json!({"name": "i0", "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}});
    let cases = [
        (
            json!([{"name": "i0", "state": {"running": {}}}]),
            "Init:0/2",
        ),
        (
            json!([done.clone(), {"name": "i1", "state": {"running": {}}}]),
            "Init:1/2",
        ),
        (
            json!([{"name": "i0", "state": {"waiting": {"reason": "PodInitializing"}}}]),
            "Init:0/2",
        ),
        (
            json!([{"name": "i0", "state": {"waiting": {"reason": "CrashLoopBackOff"}}}]),
            "Init:CrashLoopBackOff",
        ),
        (
            json!([{"name": "i0", "state": {"terminated": {"exitCode": 1, "reason": "Error"}}}]),
            "Init:Error",
        ),
        (
            json!([{"name": "i0", "state": {"terminated": {"exitCode": 3}}}]),
            "Init:ExitCode:3",
        ),
        (
            json!([{"name": "i0", "state": {"terminated": {"exitCode": 1, "signal": 15}}}]),
            "Init:Signal:15",
        ),
    ];
    for (statuses, want) in cases {
        let mut p = pod(
            1,
            json!({"phase": "Pending", "initContainerStatuses": statuses,
                "containerStatuses": [{"state": {"waiting": {"reason": "PodInitializing"}}}]}),
        );
        p["spec"]["initContainers"] = spec.clone();
        assert_eq!(short(p)[2], json!(want), "{want}");
    }
}

#[test]
fn init_restarts_count_only_while_initializing() {
    let mut p = pod(
        1,
        json!({"phase": "Pending",
            "initContainerStatuses": [{"name": "i0", "restartCount": 4,
                "lastState": {"terminated": {"exitCode": 1, "finishedAt": "2024-05-01T11:59:40Z"}},
                "state": {"waiting": {"reason": "CrashLoopBackOff"}}}],
            "containerStatuses": [{"state": {"waiting": {"reason": "PodInitializing"}}}]}),
    );
    p["spec"]["initContainers"] = json!([{"name": "i0"}]);
    assert_eq!(
        short(p.clone())[2..4],
        [json!("Init:CrashLoopBackOff"), json!("4 (20s ago)")]
    );

    // Once the pod is Initialized, only sidecar and app container restarts count.
    p["status"]["conditions"] = json!([{"type": "Initialized", "status": "True"}]);
    assert_eq!(short(p)[2..4], [json!("PodInitializing"), json!("0")]);
}

#[test]
fn started_sidecars_count_as_containers_and_their_restarts_stay() {
    let mut p = pod(
        1,
        json!({"phase": "Running",
            "conditions": [{"type": "Initialized", "status": "True"}, {"type": "Ready", "status": "True"}],
            "initContainerStatuses": [
                {"name": "setup", "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}},
                {"name": "proxy", "started": true, "ready": true, "restartCount": 2,
                 "lastState": {"terminated": {"exitCode": 1, "finishedAt": "2024-05-01T11:00:00Z"}},
                 "state": {"running": {}}}],
            "containerStatuses": [running(true)]}),
    );
    p["spec"]["initContainers"] =
        json!([{"name": "setup"}, {"name": "proxy", "restartPolicy": "Always"}]);
    assert_eq!(
        short(p)[1..4],
        [json!("2/2"), json!("Running"), json!("2 (60m ago)")]
    );
}

#[test]
fn an_unstarted_sidecar_holds_initialization() {
    let mut p = pod(
        1,
        json!({"phase": "Pending",
        "initContainerStatuses": [{"name": "proxy", "started": false, "state": {"running": {}}}]}),
    );
    p["spec"]["initContainers"] = json!([{"name": "proxy", "restartPolicy": "Always"}]);
    assert_eq!(short(p)[1..3], [json!("0/2"), json!("Init:0/1")]);
}

#[test]
fn a_completed_container_beside_a_running_one_is_running_or_not_ready() {
    let completed = json!({"state": {"terminated": {"exitCode": 0, "reason": "Completed"}}});
    let statuses = json!([completed, running(true)]);
    let p = pod(
        2,
        json!({"phase": "Running", "containerStatuses": statuses.clone()}),
    );
    assert_eq!(short(p)[1..3], [json!("1/2"), json!("NotReady")]);
    let p = pod(
        2,
        json!({"phase": "Running", "containerStatuses": statuses,
            "conditions": [{"type": "Ready", "status": "True"}]}),
    );
    assert_eq!(short(p)[2], json!("Running"));
}

#[test]
fn deletion_makes_a_live_pod_terminating_and_a_lost_one_unknown() {
    let mut p = pod(
        1,
        json!({"phase": "Running", "containerStatuses": [running(true)]}),
    );
    p["metadata"]["deletionTimestamp"] = json!("2024-05-01T11:59:00Z");
    assert_eq!(short(p.clone())[2], json!("Terminating"));

    p["status"]["reason"] = json!("NodeLost");
    assert_eq!(short(p.clone())[2], json!("Unknown"));

    let mut done = pod(
        1,
        json!({"phase": "Succeeded", "containerStatuses": [
            {"state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}]}),
    );
    done["metadata"]["deletionTimestamp"] = json!("2024-05-01T11:59:00Z");
    assert_eq!(short(done)[2], json!("Completed"));
}

#[test]
fn a_scheduling_gated_pod_says_so() {
    let p = pod(
        1,
        json!({"phase": "Pending", "conditions": [
            {"type": "PodScheduled", "status": "False", "reason": "SchedulingGated"}]}),
    );
    assert_eq!(short(p)[2], json!("SchedulingGated"));
}

#[test]
fn wide_cells_show_ip_node_nomination_and_readiness_gates() {
    let mut p = pod(
        1,
        json!({"phase": "Running", "podIPs": [{"ip": "10.1.0.7"}, {"ip": "fd00::7"}],
            "nominatedNodeName": "n2",
            "conditions": [{"type": "example.com/lb", "status": "True"},
                           {"type": "example.com/dns", "status": "False"}]}),
    );
    p["spec"]["nodeName"] = json!("n1");
    p["spec"]["readinessGates"] = json!([{"conditionType": "example.com/lb"},
        {"conditionType": "example.com/dns"}, {"conditionType": "example.com/absent"}]);
    assert_eq!(
        cells(&p, now())[5..],
        [json!("10.1.0.7"), json!("n1"), json!("n2"), json!("1/3")]
    );

    let bare = pod(1, json!({"podIP": "10.1.0.9"}));
    assert_eq!(
        cells(&bare, now())[5..],
        [
            json!("10.1.0.9"),
            json!("<none>"),
            json!("<none>"),
            json!("<none>")
        ]
    );
}

#[test]
fn a_pod_without_a_creation_time_has_an_unknown_age() {
    let p = json!({"metadata": {"name": "p"}});
    assert_eq!(
        cells(&p, now()),
        [
            json!("p"),
            json!("0/0"),
            json!(""),
            json!("0"),
            json!("<unknown>"),
            json!("<none>"),
            json!("<none>"),
            json!("<none>"),
            json!("<none>")
        ]
    );
}
