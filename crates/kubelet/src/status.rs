//! Pod status from CRI state, without I/O: init, app and ephemeral container states (waiting,
//! running, terminated), lastState, restartCount, ids; the phase by upstream's rules (`getPhase`); the
//! PodReadyToStartContainers, Initialized, ContainersReady, Ready (with readiness gates) and
//! PodScheduled conditions, after the resize conditions, carrying over the conditions others
//! own; the resources resizable containers run with;
//! pod and host IPs; startTime.

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{
    ContainerState as ApiState, ContainerStateRunning, ContainerStateTerminated,
    ContainerStateWaiting, ContainerStatus as ApiContainerStatus, HostIP, Pod, PodCondition, PodIP,
    PodSpec, PodStatus, ResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::actions::{self, Init};
use crate::cri::{ContainerState, ContainerStatus, PodSandboxStatus};

/// Why the kubelet left a container waiting rather than running it (upstream's reasons).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Waiting {
    /// `ErrImagePull`, `ErrImageNeverPull`, `CrashLoopBackOff`, `CreateContainerError`…
    pub reason: String,
    pub message: String,
}

/// What the kubelet knows about one container of the pod's spec after a sync.
#[derive(Debug, Clone, Default)]
pub struct ContainerView {
    pub name: String,
    /// The image as the spec names it.
    pub image: String,
    /// The latest attempt the runtime has, if any.
    pub current: Option<ContainerStatus>,
    /// The attempt before it, shown as `lastState`.
    pub previous: Option<ContainerStatus>,
    /// Set when the kubelet did not (re)start the container this sync.
    pub waiting: Option<Waiting>,
    /// (started, ready) from its startup and readiness probes, when it is running; None means
    /// a running container is both.
    pub probed: Option<(bool, bool)>,
    /// The requests and limits it runs with (`status.containerStatuses[].resources`), for
    /// containers that can be resized in place.
    pub resources: Option<ResourceRequirements>,
}

/// What the kubelet knows about one pod after a sync.
#[derive(Debug, Clone, Default)]
pub struct PodView {
    /// The pod's ready sandbox, if it has one.
    pub sandbox: Option<PodSandboxStatus>,
    /// One per spec init container, in spec order.
    pub init_containers: Vec<ContainerView>,
    /// One per spec container, in spec order.
    pub containers: Vec<ContainerView>,
    /// One per ephemeral container, in spec order.
    pub ephemeral_containers: Vec<ContainerView>,
    /// Where the init containers are.
    pub init: Init,
    /// The node's IP (`status.hostIP`, and the pod IP of hostNetwork pods).
    pub host_ip: String,
    /// The runtime's name, the scheme of container ids (`containerd://…`).
    pub runtime_name: String,
    /// `PodResizePending` and `PodResizeInProgress`, when the pod has them.
    pub resize_conditions: Vec<PodCondition>,
}

fn time(nanos: i64) -> Option<Time> {
    (nanos > 0)
        .then(|| Timestamp::from_nanosecond(i128::from(nanos)).ok())
        .flatten()
        .map(Time)
}

fn terminated(c: &ContainerStatus, runtime: &str) -> ContainerStateTerminated {
    let unknown = c.state == ContainerState::ContainerUnknown as i32;
    ContainerStateTerminated {
        exit_code: if unknown { 137 } else { c.exit_code },
        reason: Some(if unknown {
            "ContainerStatusUnknown".to_string()
        } else if c.reason.is_empty() {
            if c.exit_code == 0 {
                "Completed"
            } else {
                "Error"
            }
            .to_string()
        } else {
            c.reason.clone()
        }),
        message: (!c.message.is_empty()).then(|| c.message.clone()),
        started_at: time(c.started_at),
        finished_at: time(c.finished_at),
        container_id: Some(format!("{runtime}://{}", c.id)),
        signal: None,
    }
}

fn is_exited(c: &ContainerStatus) -> bool {
    c.state == ContainerState::ContainerExited as i32
        || c.state == ContainerState::ContainerUnknown as i32
}

/// The API status of one container.
pub fn container_status(view: &ContainerView, runtime: &str) -> ApiContainerStatus {
    let waiting = |reason: &str, message: Option<String>| ApiState {
        waiting: Some(ContainerStateWaiting {
            reason: Some(reason.into()),
            message,
        }),
        ..Default::default()
    };
    let last_terminated = |c: &ContainerStatus| ApiState {
        terminated: Some(terminated(c, runtime)),
        ..Default::default()
    };
    let (state, last_state) = match (&view.waiting, &view.current) {
        (Some(w), current) if current.as_ref().is_none_or(is_exited) => (
            waiting(&w.reason, Some(w.message.clone()).filter(|m| !m.is_empty())),
            current.as_ref().map(last_terminated),
        ),
        (_, None) => (waiting("ContainerCreating", None), None),
        (_, Some(c)) => {
            let state = if c.state == ContainerState::ContainerRunning as i32 {
                ApiState {
                    running: Some(ContainerStateRunning {
                        started_at: time(c.started_at),
                    }),
                    ..Default::default()
                }
            } else if c.state == ContainerState::ContainerCreated as i32 {
                waiting("ContainerCreating", None)
            } else {
                last_terminated(c)
            };
            (state, view.previous.as_ref().map(last_terminated))
        }
    };
    let running = state.running.is_some();
    let (started, ready) = view.probed.unwrap_or((true, true));
    let current = view.current.as_ref();
    ApiContainerStatus {
        name: view.name.clone(),
        state: Some(state),
        last_state: Some(last_state.unwrap_or_default()),
        ready: running && ready,
        started: Some(running && started),
        restart_count: current
            .and_then(|c| c.metadata.as_ref())
            .map(|m| m.attempt as i32)
            .unwrap_or(0),
        image: current
            .and_then(|c| c.image.as_ref())
            .map(|i| i.image.clone())
            .filter(|i| !i.is_empty())
            .unwrap_or_else(|| view.image.clone()),
        image_id: current.map(|c| c.image_ref.clone()).unwrap_or_default(),
        container_id: current.map(|c| format!("{runtime}://{}", c.id)),
        resources: view.resources.clone(),
        ..Default::default()
    }
}

/// Upstream's `getPhase` for a pod without init containers: waiting containers keep it
/// Pending; any running one makes it Running; when all have stopped the restart policy decides
/// between Running (they will restart), Succeeded and Failed.
pub fn phase(statuses: &[ApiContainerStatus], restart_policy: &str) -> &'static str {
    let (mut running, mut waiting, mut stopped, mut succeeded) = (0, 0, 0, 0);
    for s in statuses {
        let state = s.state.clone().unwrap_or_default();
        if state.running.is_some() {
            running += 1;
        } else if let Some(t) = &state.terminated {
            stopped += 1;
            if t.exit_code == 0 {
                succeeded += 1;
            }
        } else if s
            .last_state
            .as_ref()
            .is_some_and(|l| l.terminated.is_some())
        {
            // waiting to restart after a previous run
            stopped += 1;
        } else {
            waiting += 1;
        }
    }
    if waiting > 0 {
        return "Pending";
    }
    if running > 0 {
        return "Running";
    }
    if stopped > 0 && stopped == statuses.len() {
        return match restart_policy {
            "Always" => "Running",
            "OnFailure" if stopped == succeeded => "Succeeded",
            "OnFailure" => "Running",
            _ if stopped == succeeded => "Succeeded",
            _ => "Failed",
        };
    }
    "Pending"
}

/// The conditions the kubelet owns; others (readiness gates, `DisruptionTarget`…) belong to
/// whoever set them and are carried over unchanged, as upstream's status manager does.
const KUBELET_CONDITIONS: [&str; 7] = [
    "PodResizePending",
    "PodResizeInProgress",
    "PodReadyToStartContainers",
    "Initialized",
    "Ready",
    "ContainersReady",
    "PodScheduled",
];

/// Why each of the pod's readiness gates holds it back (upstream's messages), from the
/// conditions others set on it.
fn unready_gates(spec: &PodSpec, conditions: &[PodCondition]) -> Vec<String> {
    spec.readiness_gates
        .iter()
        .flatten()
        .filter_map(|gate| {
            let t = &gate.condition_type;
            match conditions.iter().find(|c| &c.type_ == t) {
                None => Some(format!(
                    "corresponding condition of pod readiness gate \"{t}\" does not exist."
                )),
                Some(c) if c.status != "True" => Some(format!(
                    "the status of pod readiness gate \"{t}\" is not \"True\", but {}",
                    c.status
                )),
                Some(_) => None,
            }
        })
        .collect()
}

/// The pod's status after a sync: a terminal phase already written is kept (phases never go
/// back) with its reason and message (an eviction's, a rejection's), condition transition times are carried over when a condition did not change, the pod
/// IP survives the sandbox of a finished pod.
pub fn pod_status(pod: &Pod, view: &PodView, now: Timestamp) -> PodStatus {
    let spec = pod.spec.clone().unwrap_or_default();
    let old = pod.status.clone().unwrap_or_default();
    let container_statuses: Vec<ApiContainerStatus> = view
        .containers
        .iter()
        .map(|c| container_status(c, &view.runtime_name))
        .collect();
    let sidecars: Vec<bool> = spec
        .init_containers
        .iter()
        .flatten()
        .map(actions::is_sidecar)
        .collect();
    let init_statuses: Vec<ApiContainerStatus> = view
        .init_containers
        .iter()
        .zip(sidecars.iter().chain(std::iter::repeat(&false)))
        .map(|(c, &sidecar)| {
            let mut s = container_status(c, &view.runtime_name);
            // an init container is ready once it has completed successfully; a sidecar is
            // ready as an app container is
            if !sidecar {
                s.ready = s
                    .state
                    .as_ref()
                    .and_then(|st| st.terminated.as_ref())
                    .is_some_and(|t| t.exit_code == 0);
            }
            s
        })
        .collect();
    // an ephemeral container has no probes and is never ready: it counts for neither the
    // phase nor the conditions (upstream's prober sets `started` only for the others)
    let ephemeral_statuses: Vec<ApiContainerStatus> = view
        .ephemeral_containers
        .iter()
        .map(|c| ApiContainerStatus {
            ready: false,
            started: None,
            ..container_status(c, &view.runtime_name)
        })
        .collect();
    let restart_policy = spec.restart_policy.as_deref().unwrap_or("Always");
    let phase = match (old.phase.as_deref(), view.init) {
        (Some(p @ ("Succeeded" | "Failed")), _) => p,
        (_, Init::Failed) => "Failed",
        (_, Init::InProgress) => "Pending",
        (_, Init::Done) => phase(&container_statuses, restart_policy),
    }
    .to_string();
    let terminal = phase == "Succeeded" || phase == "Failed";
    let was_terminal = matches!(old.phase.as_deref(), Some("Succeeded" | "Failed"));

    // sidecars count for readiness (upstream lists them first)
    let sidecar_statuses = init_statuses.iter().zip(&sidecars).filter(|(_, s)| **s);
    let unready: Vec<&str> = sidecar_statuses
        .map(|(s, _)| s)
        .chain(&container_statuses)
        .filter(|s| !s.ready)
        .map(|s| s.name.as_str())
        .collect();
    let condition = |type_: &str, ok: bool, reason: Option<&str>, message: Option<String>| {
        let status = if ok { "True" } else { "False" };
        let since = old
            .conditions
            .iter()
            .flatten()
            .find(|c| c.type_ == type_ && c.status == status)
            .and_then(|c| c.last_transition_time.clone())
            .unwrap_or(Time(now));
        PodCondition {
            type_: type_.into(),
            status: status.into(),
            reason: reason.map(String::from),
            message,
            last_transition_time: Some(since),
            last_probe_time: None,
            observed_generation: None,
        }
    };
    let (containers_ready, reason, message) = if terminal {
        (false, Some("PodCompleted"), None)
    } else if unready.is_empty() {
        (true, None, None)
    } else {
        (
            false,
            Some("ContainersNotReady"),
            Some(format!(
                "containers with unready status: [{}]",
                unready.join(" ")
            )),
        )
    };
    let foreign: Vec<PodCondition> = old
        .conditions
        .iter()
        .flatten()
        .filter(|c| !KUBELET_CONDITIONS.contains(&c.type_.as_str()))
        .cloned()
        .collect();
    let ready = match unready_gates(&spec, &foreign) {
        gates if !containers_ready || gates.is_empty() => {
            condition("Ready", containers_ready, reason, message.clone())
        }
        gates => condition(
            "Ready",
            false,
            Some("ReadinessGatesNotReady"),
            Some(gates.join(", ")),
        ),
    };
    let incomplete: Vec<&str> = init_statuses
        .iter()
        .zip(sidecars.iter().chain(std::iter::repeat(&false)))
        .filter(|(s, sidecar)| match sidecar {
            true => s.started != Some(true),
            false => !s.ready,
        })
        .map(|(s, _)| s.name.as_str())
        .collect();
    let initialized = if view.init == Init::Done {
        condition("Initialized", true, None, None)
    } else {
        condition(
            "Initialized",
            false,
            Some("ContainersNotInitialized"),
            Some(format!(
                "containers with incomplete status: [{}]",
                incomplete.join(" ")
            )),
        )
    };
    // the resize conditions first, as upstream lists them; a finished pod has none
    let resizing = view.resize_conditions.iter().filter(|_| !terminal).cloned();
    let mut conditions: Vec<PodCondition> = resizing.collect();
    conditions.extend([
        condition(
            "PodReadyToStartContainers",
            view.sandbox.is_some(),
            None,
            None,
        ),
        initialized,
        ready,
        condition("ContainersReady", containers_ready, reason, message),
        condition("PodScheduled", true, None, None),
    ]);
    conditions.extend(foreign);

    let host_network = spec.host_network.unwrap_or(false);
    let pod_ip = if host_network {
        Some(view.host_ip.clone())
    } else {
        view.sandbox
            .as_ref()
            .and_then(|s| s.network.as_ref())
            .map(|n| n.ip.clone())
            .filter(|ip| !ip.is_empty())
            .or(old.pod_ip.clone())
    };
    PodStatus {
        phase: Some(phase),
        conditions: Some(conditions),
        host_ip: Some(view.host_ip.clone()),
        host_ips: Some(vec![HostIP {
            ip: view.host_ip.clone(),
        }]),
        pod_ips: pod_ip.clone().map(|ip| vec![PodIP { ip }]),
        pod_ip,
        start_time: old.start_time.clone().or(Some(Time(now))),
        container_statuses: Some(container_statuses),
        init_container_statuses: (!init_statuses.is_empty()).then_some(init_statuses),
        ephemeral_container_statuses: (!ephemeral_statuses.is_empty())
            .then_some(ephemeral_statuses),
        qos_class: old.qos_class.clone(),
        reason: old.reason.clone().filter(|_| was_terminal),
        message: old.message.clone().filter(|_| was_terminal),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use k8s_cri::v1::{ContainerMetadata, ImageSpec, PodSandboxNetworkStatus};
    use serde_json::json;

    use super::*;

    fn pod(restart_policy: &str) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": "default", "uid": "u1"},
            "spec": {"restartPolicy": restart_policy,
                     "containers": [{"name": "c", "image": "busybox"}]},
            "status": {"phase": "Pending", "qosClass": "BestEffort"},
        }))
        .unwrap()
    }

    fn cri(id: &str, state: ContainerState, attempt: u32, exit_code: i32) -> ContainerStatus {
        ContainerStatus {
            id: id.into(),
            metadata: Some(ContainerMetadata {
                name: "c".into(),
                attempt,
            }),
            state: state as i32,
            created_at: 1_000_000_000,
            started_at: 2_000_000_000,
            finished_at: if state == ContainerState::ContainerExited {
                3_000_000_000
            } else {
                0
            },
            exit_code,
            image: Some(ImageSpec {
                image: "docker.io/library/busybox:latest".into(),
                ..Default::default()
            }),
            image_ref: "sha256:abc".into(),
            ..Default::default()
        }
    }

    fn view(current: Option<ContainerStatus>, previous: Option<ContainerStatus>) -> PodView {
        PodView {
            sandbox: Some(PodSandboxStatus {
                id: "s1".into(),
                network: Some(PodSandboxNetworkStatus {
                    ip: "10.42.0.7".into(),
                    additional_ips: vec![],
                }),
                ..Default::default()
            }),
            containers: vec![ContainerView {
                name: "c".into(),
                image: "busybox".into(),
                current,
                previous,
                ..Default::default()
            }],
            host_ip: "192.168.1.5".into(),
            runtime_name: "containerd".into(),
            ..Default::default()
        }
    }

    fn condition_of<'a>(status: &'a PodStatus, type_: &str) -> &'a PodCondition {
        status
            .conditions
            .iter()
            .flatten()
            .find(|c| c.type_ == type_)
            .unwrap()
    }

    fn condition(status: &PodStatus, type_: &str) -> String {
        condition_of(status, type_).status.clone()
    }

    #[test]
    fn a_running_container_makes_the_pod_running_and_ready_with_the_sandbox_ip() {
        let now = Timestamp::from_second(10).unwrap();
        let current = cri("abc", ContainerState::ContainerRunning, 0, 0);
        let status = pod_status(&pod("Always"), &view(Some(current), None), now);
        assert_eq!(status.phase.as_deref(), Some("Running"));
        assert_eq!(status.pod_ip.as_deref(), Some("10.42.0.7"));
        assert_eq!(status.pod_ips.as_ref().unwrap()[0].ip, "10.42.0.7");
        assert_eq!(status.host_ip.as_deref(), Some("192.168.1.5"));
        assert_eq!(status.start_time, Some(Time(now)));
        assert_eq!(status.qos_class.as_deref(), Some("BestEffort"));
        let c = &status.container_statuses.as_ref().unwrap()[0];
        assert!(c.ready);
        assert_eq!(c.container_id.as_deref(), Some("containerd://abc"));
        assert_eq!(c.image, "docker.io/library/busybox:latest");
        assert_eq!(c.image_id, "sha256:abc");
        assert!(c.state.as_ref().unwrap().running.is_some());
        for t in ["Initialized", "ContainersReady", "Ready", "PodScheduled"] {
            assert_eq!(condition(&status, t), "True", "{t}");
        }
    }

    #[test]
    fn ephemeral_containers_are_reported_but_count_for_neither_phase_nor_readiness() {
        let now = Timestamp::from_second(10).unwrap();
        let app = cri("abc", ContainerState::ContainerRunning, 0, 0);
        let mut v = view(Some(app), None);
        v.ephemeral_containers = vec![
            ContainerView {
                name: "debugger".into(),
                current: Some(cri("dbg", ContainerState::ContainerRunning, 0, 0)),
                ..Default::default()
            },
            ContainerView {
                name: "done".into(),
                current: Some(cri("old", ContainerState::ContainerExited, 0, 1)),
                ..Default::default()
            },
            ContainerView {
                name: "new".into(),
                image: "busybox".into(),
                ..Default::default()
            },
        ];
        let status = pod_status(&pod("Always"), &v, now);
        assert_eq!(status.phase.as_deref(), Some("Running"));
        assert_eq!(condition(&status, "Ready"), "True");
        let ephemeral = status.ephemeral_container_statuses.unwrap();
        let states: Vec<_> = ephemeral
            .iter()
            .map(|s| {
                let st = s.state.clone().unwrap();
                (
                    s.name.as_str(),
                    s.ready,
                    s.started,
                    st.running.is_some(),
                    st.terminated.map(|t| t.exit_code),
                    st.waiting.and_then(|w| w.reason),
                )
            })
            .collect();
        assert_eq!(
            states,
            [
                ("debugger", false, None, true, None, None),
                ("done", false, None, false, Some(1), None),
                (
                    "new",
                    false,
                    None,
                    false,
                    None,
                    Some("ContainerCreating".into())
                ),
            ]
        );
        assert_eq!(
            ephemeral[0].container_id.as_deref(),
            Some("containerd://dbg")
        );
    }

    #[test]
    fn a_container_not_created_yet_keeps_the_pod_pending_and_not_ready() {
        let status = pod_status(&pod("Always"), &view(None, None), Timestamp::UNIX_EPOCH);
        assert_eq!(status.phase.as_deref(), Some("Pending"));
        let c = &status.container_statuses.as_ref().unwrap()[0];
        assert_eq!(
            c.state
                .as_ref()
                .unwrap()
                .waiting
                .as_ref()
                .unwrap()
                .reason
                .as_deref(),
            Some("ContainerCreating")
        );
        assert_eq!(condition(&status, "Ready"), "False");
        let ready = status
            .conditions
            .as_ref()
            .unwrap()
            .iter()
            .find(|c| c.type_ == "Ready");
        assert_eq!(
            ready.unwrap().message.as_deref(),
            Some("containers with unready status: [c]")
        );
    }

    #[test]
    fn a_container_the_oom_killer_ended_is_reported_oom_killed_in_its_last_state() {
        // containerd's CRI gives the reason when the container's cgroup saw an OOM kill
        let mut killed = cri("old", ContainerState::ContainerExited, 0, 137);
        killed.reason = "OOMKilled".into();
        let running = cri("new", ContainerState::ContainerRunning, 0, 0);
        let status = pod_status(
            &pod("Always"),
            &view(Some(running), Some(killed)),
            Timestamp::UNIX_EPOCH,
        );
        let c = &status.container_statuses.as_ref().unwrap()[0];
        let last = c.last_state.clone().unwrap().terminated.unwrap();
        assert_eq!(
            (last.exit_code, last.reason.as_deref()),
            (137, Some("OOMKilled"))
        );
    }

    #[test]
    fn exit_zero_under_never_is_succeeded_and_exit_one_is_failed() {
        let done = cri("abc", ContainerState::ContainerExited, 0, 0);
        let status = pod_status(
            &pod("Never"),
            &view(Some(done), None),
            Timestamp::UNIX_EPOCH,
        );
        assert_eq!(status.phase.as_deref(), Some("Succeeded"));
        let t = status.container_statuses.as_ref().unwrap()[0]
            .state
            .clone()
            .unwrap()
            .terminated
            .unwrap();
        assert_eq!((t.exit_code, t.reason.as_deref()), (0, Some("Completed")));
        let ready = status
            .conditions
            .as_ref()
            .unwrap()
            .iter()
            .find(|c| c.type_ == "Ready");
        assert_eq!(ready.unwrap().reason.as_deref(), Some("PodCompleted"));

        let failed = cri("abc", ContainerState::ContainerExited, 0, 1);
        let status = pod_status(
            &pod("Never"),
            &view(Some(failed), None),
            Timestamp::UNIX_EPOCH,
        );
        assert_eq!(status.phase.as_deref(), Some("Failed"));
    }

    #[test]
    fn a_crashing_container_in_backoff_is_waiting_with_its_last_run_as_last_state() {
        let crashed = cri("abc", ContainerState::ContainerExited, 2, 1);
        let mut v = view(Some(crashed), None);
        v.containers[0].waiting = Some(Waiting {
            reason: "CrashLoopBackOff".into(),
            message: "back-off 20s restarting failed container".into(),
        });
        let status = pod_status(&pod("Always"), &v, Timestamp::UNIX_EPOCH);
        assert_eq!(status.phase.as_deref(), Some("Running"));
        let c = &status.container_statuses.as_ref().unwrap()[0];
        assert_eq!(c.restart_count, 2);
        let w = c.state.as_ref().unwrap().waiting.as_ref().unwrap();
        assert_eq!(w.reason.as_deref(), Some("CrashLoopBackOff"));
        let last = c.last_state.as_ref().unwrap().terminated.as_ref().unwrap();
        assert_eq!(last.exit_code, 1);
    }

    #[test]
    fn a_restarted_container_shows_its_previous_run_and_restart_count() {
        let now = cri("new", ContainerState::ContainerRunning, 1, 0);
        let before = cri("old", ContainerState::ContainerExited, 0, 2);
        let status = pod_status(
            &pod("Always"),
            &view(Some(now), Some(before)),
            Timestamp::UNIX_EPOCH,
        );
        let c = &status.container_statuses.as_ref().unwrap()[0];
        assert_eq!(c.restart_count, 1);
        let last = c.last_state.as_ref().unwrap().terminated.as_ref().unwrap();
        assert_eq!(last.container_id.as_deref(), Some("containerd://old"));
        assert_eq!(last.exit_code, 2);
    }

    #[test]
    fn a_terminal_phase_is_never_left_and_condition_times_are_kept() {
        let mut p = pod("Never");
        let first = pod_status(
            &p,
            &view(
                Some(cri("abc", ContainerState::ContainerExited, 0, 0)),
                None,
            ),
            Timestamp::from_second(5).unwrap(),
        );
        p.status = Some(first.clone());
        // the sandbox is gone now: the IP and the phase stay
        let mut v = view(None, None);
        v.sandbox = None;
        let second = pod_status(&p, &v, Timestamp::from_second(50).unwrap());
        assert_eq!(second.phase.as_deref(), Some("Succeeded"));
        assert_eq!(second.pod_ip.as_deref(), Some("10.42.0.7"));
        let scheduled = |s: &PodStatus| {
            s.conditions
                .iter()
                .flatten()
                .find(|c| c.type_ == "PodScheduled")
                .unwrap()
                .last_transition_time
                .clone()
        };
        assert_eq!(scheduled(&second), scheduled(&first));
        assert_eq!(second.start_time, first.start_time);

        // an evicted pod keeps the reason and message it was failed with
        let mut evicted = pod("Always");
        let status = evicted.status.as_mut().unwrap();
        status.phase = Some("Failed".into());
        status.reason = Some("Evicted".into());
        status.message = Some("The node was low on resource: memory. ".into());
        let after = pod_status(&evicted, &v, Timestamp::from_second(50).unwrap());
        assert_eq!(after.phase.as_deref(), Some("Failed"));
        assert_eq!(after.reason.as_deref(), Some("Evicted"));
        assert_eq!(
            after.message.as_deref(),
            Some("The node was low on resource: memory. ")
        );
    }

    #[test]
    fn on_failure_restarts_failures_and_completes_on_success() {
        let statuses = |code| {
            vec![container_status(
                &ContainerView {
                    name: "c".into(),
                    current: Some(cri("a", ContainerState::ContainerExited, 0, code)),
                    ..Default::default()
                },
                "containerd",
            )]
        };
        assert_eq!(phase(&statuses(0), "OnFailure"), "Succeeded");
        assert_eq!(phase(&statuses(1), "OnFailure"), "Running");
        assert_eq!(phase(&statuses(0), "Always"), "Running");
    }

    #[test]
    fn a_running_sidecar_initializes_the_pod_and_its_readiness_counts() {
        let mut p = pod("Never");
        p.spec.as_mut().unwrap().init_containers = Some(vec![
            serde_json::from_value(
                json!({"name": "side", "image": "busybox", "restartPolicy": "Always"}),
            )
            .unwrap(),
        ]);
        let mut side = cri("s1", ContainerState::ContainerRunning, 0, 0);
        side.metadata.as_mut().unwrap().name = "side".into();
        let mut v = view(
            Some(cri("abc", ContainerState::ContainerRunning, 0, 0)),
            None,
        );
        v.init_containers = vec![ContainerView {
            name: "side".into(),
            image: "busybox".into(),
            current: Some(side),
            probed: Some((true, false)),
            ..Default::default()
        }];
        let status = pod_status(&p, &v, Timestamp::from_second(10).unwrap());
        assert_eq!(condition(&status, "Initialized"), "True");
        assert_eq!(status.phase.as_deref(), Some("Running"));
        let init = &status.init_container_statuses.as_ref().unwrap()[0];
        assert_eq!((init.started, init.ready), (Some(true), false));
        let ready = condition_of(&status, "Ready");
        assert_eq!(ready.status, "False");
        assert_eq!(
            ready.message.as_deref(),
            Some("containers with unready status: [side]")
        );
    }

    #[test]
    fn readiness_gates_hold_ready_back_until_their_conditions_are_true() {
        let now = Timestamp::from_second(10).unwrap();
        let current = cri("abc", ContainerState::ContainerRunning, 0, 0);
        let mut p = pod("Always");
        p.spec.as_mut().unwrap().readiness_gates = Some(vec![
            serde_json::from_value(json!({"conditionType": "example.com/lb"})).unwrap(),
            serde_json::from_value(json!({"conditionType": "example.com/dns"})).unwrap(),
        ]);
        p.status.as_mut().unwrap().conditions = Some(vec![
            serde_json::from_value(json!({"type": "example.com/dns", "status": "False"})).unwrap(),
        ]);
        let status = pod_status(&p, &view(Some(current.clone()), None), now);
        let ready = condition_of(&status, "Ready");
        assert_eq!(ready.status, "False");
        assert_eq!(ready.reason.as_deref(), Some("ReadinessGatesNotReady"));
        assert_eq!(
            ready.message.as_deref(),
            Some(
                "corresponding condition of pod readiness gate \"example.com/lb\" does not exist., \
                 the status of pod readiness gate \"example.com/dns\" is not \"True\", but False"
            )
        );
        assert_eq!(condition(&status, "ContainersReady"), "True");
        // the gate's own condition is kept as its owner wrote it
        assert_eq!(condition(&status, "example.com/dns"), "False");

        p.status.as_mut().unwrap().conditions = Some(vec![
            serde_json::from_value(json!({"type": "example.com/dns", "status": "True"})).unwrap(),
            serde_json::from_value(json!({"type": "example.com/lb", "status": "True"})).unwrap(),
        ]);
        let status = pod_status(&p, &view(Some(current), None), now);
        assert_eq!(condition(&status, "Ready"), "True");
    }

    #[test]
    fn conditions_others_own_survive_a_status_write() {
        let now = Timestamp::from_second(10).unwrap();
        let mut p = pod("Always");
        p.status.as_mut().unwrap().conditions = Some(vec![
            serde_json::from_value(json!({"type": "DisruptionTarget", "status": "True",
                "reason": "PreemptionByScheduler"}))
            .unwrap(),
            serde_json::from_value(json!({"type": "Ready", "status": "True"})).unwrap(),
        ]);
        let status = pod_status(&p, &view(None, None), now);
        let types: Vec<&str> = status
            .conditions
            .iter()
            .flatten()
            .map(|c| c.type_.as_str())
            .collect();
        assert_eq!(
            types,
            [
                "PodReadyToStartContainers",
                "Initialized",
                "Ready",
                "ContainersReady",
                "PodScheduled",
                "DisruptionTarget"
            ]
        );
        assert_eq!(condition(&status, "Ready"), "False");
    }
}

#[cfg(test)]
mod init_tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_pod_initializing_is_pending_with_its_init_containers_listed_as_incomplete() {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p", "uid": "u"},
            "spec": {"initContainers": [{"name": "setup", "image": "busybox"}],
                     "containers": [{"name": "app", "image": "busybox"}]},
        }))
        .unwrap();
        let view = PodView {
            init_containers: vec![ContainerView {
                name: "setup".into(),
                ..Default::default()
            }],
            containers: vec![ContainerView {
                name: "app".into(),
                waiting: Some(Waiting {
                    reason: "PodInitializing".into(),
                    message: String::new(),
                }),
                ..Default::default()
            }],
            init: Init::InProgress,
            ..Default::default()
        };
        let status = pod_status(&pod, &view, Timestamp::UNIX_EPOCH);
        assert_eq!(status.phase.as_deref(), Some("Pending"));
        let init = status
            .conditions
            .iter()
            .flatten()
            .find(|c| c.type_ == "Initialized")
            .unwrap();
        assert_eq!(init.status, "False");
        assert_eq!(init.reason.as_deref(), Some("ContainersNotInitialized"));
        assert_eq!(
            init.message.as_deref(),
            Some("containers with incomplete status: [setup]")
        );
        assert_eq!(status.init_container_statuses.unwrap()[0].name, "setup");
        let app = &status.container_statuses.unwrap()[0];
        let reason = app
            .state
            .as_ref()
            .unwrap()
            .waiting
            .as_ref()
            .unwrap()
            .reason
            .clone();
        assert_eq!(reason.as_deref(), Some("PodInitializing"));

        let failed = PodView {
            init: Init::Failed,
            ..view
        };
        let status = pod_status(&pod, &failed, Timestamp::UNIX_EPOCH);
        assert_eq!(status.phase.as_deref(), Some("Failed"));
    }
}
