//! The pods table: upstream's `printPod`, whose STATUS cell condenses phase, scheduling gates,
//! init and sidecar containers, container states and deletion into one reason.

use super::duration::human_duration;
use super::value::{
    age, flag, int, keep_latest, list, name, object, opt_bool, present, text, time,
};
use super::{AGE, Column, NAME, Printer};
use jiff::Timestamp;
use serde_json::Value;

pub(super) static PODS: Printer = Printer {
    columns: &[
        NAME,
        Column::new(
            "Ready",
            "string",
            0,
            "Ready containers out of all containers (sidecars included).",
        ),
        Column::new(
            "Status",
            "string",
            0,
            "The pod's phase or the reason that best describes it right now.",
        ),
        Column::new(
            "Restarts",
            "string",
            0,
            "Container restarts, and how long ago the last container restarted.",
        ),
        AGE,
        Column::new("IP", "string", 1, "The pod's first IP address."),
        Column::new("Node", "string", 1, "The node the pod is bound to."),
        Column::new(
            "Nominated Node",
            "string",
            1,
            "The node preemption made room on, before the pod is bound.",
        ),
        Column::new(
            "Readiness Gates",
            "string",
            1,
            "Readiness gates whose condition is True, out of all gates.",
        ),
    ],
    cells,
};

/// Whether the init container called `name` is a sidecar (`restartPolicy: Always`).
fn is_sidecar(init_specs: &[Value], name: &str) -> bool {
    init_specs
        .iter()
        .rev() // a later duplicate name wins, as in upstream's map
        .find(|c| text(c, "/name") == name)
        .is_some_and(|c| text(c, "/restartPolicy") == "Always")
}

fn condition_is_true(conditions: &[Value], type_: &str) -> bool {
    conditions
        .iter()
        .find(|c| text(c, "/type") == type_)
        .is_some_and(|c| text(c, "/status") == "True")
}

/// `Signal:9` or `ExitCode:1`, the reason of a termination that gave none.
fn exit_reason(status: &Value) -> String {
    match int(status, "/state/terminated/signal") {
        0 => format!("ExitCode:{}", int(status, "/state/terminated/exitCode")),
        signal => format!("Signal:{signal}"),
    }
}

fn cells(pod: &Value, now: Timestamp) -> Vec<Value> {
    let phase = text(pod, "/status/phase");
    let conditions = list(pod, "/status/conditions");
    let mut reason = match text(pod, "/status/reason") {
        "" => phase.to_string(),
        r => r.to_string(),
    };
    let gated = conditions
        .iter()
        .any(|c| text(c, "/type") == "PodScheduled" && text(c, "/reason") == "SchedulingGated");
    if gated {
        reason = "SchedulingGated".to_string();
    }

    let init_specs = list(pod, "/spec/initContainers");
    let sidecars = init_specs
        .iter()
        .filter(|c| text(c, "/restartPolicy") == "Always")
        .count();
    let total = list(pod, "/spec/containers").len() + sidecars;
    let mut ready = 0;
    let mut restarts = 0;
    let mut last_restart = None;
    let mut sidecar_restarts = 0;
    let mut last_sidecar_restart = None;

    let mut initializing = false;
    for (i, status) in list(pod, "/status/initContainerStatuses")
        .iter()
        .enumerate()
    {
        let count = int(status, "/restartCount");
        let finished = time(status, "/lastState/terminated/finishedAt");
        restarts += count;
        keep_latest(&mut last_restart, finished);
        let sidecar = is_sidecar(init_specs, text(status, "/name"));
        if sidecar {
            sidecar_restarts += count;
            keep_latest(&mut last_sidecar_restart, finished);
        }
        let terminated = object(status, "/state/terminated").is_some();
        let waiting_reason = text(status, "/state/waiting/reason");
        if terminated && int(status, "/state/terminated/exitCode") == 0 {
            continue; // finished successfully
        }
        if sidecar && opt_bool(status, "/started") == Some(true) {
            if flag(status, "/ready") {
                ready += 1;
            }
            continue; // a started sidecar does not hold up initialization
        }
        reason = if terminated {
            match text(status, "/state/terminated/reason") {
                "" => format!("Init:{}", exit_reason(status)),
                r => format!("Init:{r}"),
            }
        } else if object(status, "/state/waiting").is_some()
            && !waiting_reason.is_empty()
            && waiting_reason != "PodInitializing"
        {
            format!("Init:{waiting_reason}")
        } else {
            format!("Init:{i}/{}", init_specs.len())
        };
        initializing = true;
        break;
    }

    if !initializing || condition_is_true(conditions, "Initialized") {
        restarts = sidecar_restarts;
        last_restart = last_sidecar_restart;
        let mut has_running = false;
        for status in list(pod, "/status/containerStatuses").iter().rev() {
            restarts += int(status, "/restartCount");
            keep_latest(
                &mut last_restart,
                time(status, "/lastState/terminated/finishedAt"),
            );
            let waiting = object(status, "/state/waiting").is_some();
            let terminated = object(status, "/state/terminated").is_some();
            let waiting_reason = text(status, "/state/waiting/reason");
            let terminated_reason = text(status, "/state/terminated/reason");
            if waiting && !waiting_reason.is_empty() {
                reason = waiting_reason.to_string();
            } else if terminated && !terminated_reason.is_empty() {
                reason = terminated_reason.to_string();
            } else if terminated {
                reason = exit_reason(status);
            } else if flag(status, "/ready") && object(status, "/state/running").is_some() {
                has_running = true;
                ready += 1;
            }
        }
        // A pod whose last-listed container completed but another still runs is not done.
        if reason == "Completed" && has_running {
            reason = if conditions
                .iter()
                .any(|c| text(c, "/type") == "Ready" && text(c, "/status") == "True")
            {
                "Running".to_string()
            } else {
                "NotReady".to_string()
            };
        }
    }

    if present(pod, "/metadata/deletionTimestamp") {
        if text(pod, "/status/reason") == "NodeLost" {
            reason = "Unknown".to_string();
        } else if phase != "Succeeded" && phase != "Failed" {
            reason = "Terminating".to_string();
        }
    }

    let restarts = match last_restart {
        Some(t) if restarts != 0 => {
            format!("{restarts} ({} ago)", human_duration(now.duration_since(t)))
        }
        _ => restarts.to_string(),
    };

    // v1 → internal conversion makes `podIP` authoritative over `podIPs`.
    let ip = match text(pod, "/status/podIP") {
        "" => text(pod, "/status/podIPs/0/ip"),
        ip => ip,
    };
    let gates = list(pod, "/spec/readinessGates");
    let readiness_gates = if gates.is_empty() {
        "<none>".to_string()
    } else {
        let passed = gates
            .iter()
            .filter(|g| condition_is_true(conditions, text(g, "/conditionType")))
            .count();
        format!("{passed}/{}", gates.len())
    };
    vec![
        name(pod).into(),
        format!("{ready}/{total}").into(),
        reason.into(),
        restarts.into(),
        age(pod, now),
        or_none(ip).into(),
        or_none(text(pod, "/spec/nodeName")).into(),
        or_none(text(pod, "/status/nominatedNodeName")).into(),
        readiness_gates.into(),
    ]
}

fn or_none(s: &str) -> &str {
    if s.is_empty() { "<none>" } else { s }
}

#[cfg(test)]
#[path = "pod_tests.rs"]
mod tests;
