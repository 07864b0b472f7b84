//! Ephemeral containers (`kubectl debug`), as upstream's kubelet runs them: each is run as the
//! container its `EphemeralContainerCommon` is (upstream casts one to the other), once, in the
//! pod's running sandbox, even before the pod is initialized, and never restarted (see
//! [`crate::actions::plan`]); one with a `targetContainerName` joins that container's process
//! namespace (CRI `NamespaceMode::Target`), unless the pod shares one already (its own or the
//! node's). Their statuses are `status.ephemeralContainerStatuses`; they count for neither the
//! pod's phase nor its readiness.

use k8s_openapi::api::core::v1::{Container, EphemeralContainer, PodSpec};

use k8s_cri::v1::{NamespaceMode, NamespaceOption};

use crate::cri::ContainerStatus;

/// The container an ephemeral container is run as. Every field is carried over (a new field
/// of either type does not compile until it is decided here); `targetContainerName` is read by
/// [`target_of`].
pub fn as_container(ephemeral: &EphemeralContainer) -> Container {
    let EphemeralContainer {
        args,
        command,
        env,
        env_from,
        image,
        image_pull_policy,
        lifecycle,
        liveness_probe,
        name,
        ports,
        readiness_probe,
        resize_policy,
        resources,
        restart_policy,
        security_context,
        startup_probe,
        stdin,
        stdin_once,
        target_container_name: _,
        termination_message_path,
        termination_message_policy,
        tty,
        volume_devices,
        volume_mounts,
        working_dir,
    } = ephemeral.clone();
    Container {
        args,
        command,
        env,
        env_from,
        image,
        image_pull_policy,
        lifecycle,
        liveness_probe,
        name,
        ports,
        readiness_probe,
        resize_policy,
        resources,
        restart_policy,
        security_context,
        startup_probe,
        stdin,
        stdin_once,
        termination_message_path,
        termination_message_policy,
        tty,
        volume_devices,
        volume_mounts,
        working_dir,
    }
}

/// The pod's ephemeral containers as the containers they are run as, in spec order.
pub fn containers(spec: &PodSpec) -> Vec<Container> {
    spec.ephemeral_containers
        .iter()
        .flatten()
        .map(as_container)
        .collect()
}

/// The `targetContainerName` of the pod's ephemeral container `name`, if it has one.
pub fn target_of<'a>(spec: &'a PodSpec, name: &str) -> Option<&'a str> {
    spec.ephemeral_containers
        .iter()
        .flatten()
        .find(|c| c.name == name)?
        .target_container_name
        .as_deref()
        .filter(|t| !t.is_empty())
}

/// The runtime id of the target's newest run, whose process namespace the ephemeral container
/// joins (upstream's `getTargetID`: the newest run whatever its state; the runtime refuses one
/// that is not running), or upstream's error when the target has never run.
pub fn target_id(target: &str, runs: Option<&[ContainerStatus]>) -> Result<String, String> {
    runs.and_then(|r| r.first())
        .map(|s| s.id.clone())
        .ok_or_else(|| format!("unable to find target container {target}"))
}

/// Puts a container whose process namespace would be its own into its target's (upstream's
/// `generateLinuxContainerConfig`): with `shareProcessNamespace` or `hostPID` the ephemeral
/// container already shares the pod's or the node's, which it keeps.
pub fn share_target_pid(options: &mut NamespaceOption, target_id: &str) {
    if options.pid == NamespaceMode::Container as i32 {
        options.pid = NamespaceMode::Target as i32;
        options.target_id = target_id.to_string();
    }
}

/// Whether an ephemeral container with this newest run (if any) is to be started: only if it
/// has never been created (upstream's `computePodActions`: ephemeral containers are never
/// restarted).
pub fn due(latest: Option<&ContainerStatus>) -> bool {
    latest.is_none()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn spec() -> PodSpec {
        serde_json::from_value(json!({
            "containers": [{"name": "app", "image": "busybox"}],
            "ephemeralContainers": [
                {"name": "debugger", "image": "busybox", "targetContainerName": "app",
                 "command": ["sh"], "stdin": true, "tty": true},
                {"name": "plain", "image": "busybox"},
            ],
        }))
        .unwrap()
    }

    #[test]
    fn an_ephemeral_container_runs_as_the_container_it_describes() {
        let containers = containers(&spec());
        assert_eq!(containers.len(), 2);
        let c = &containers[0];
        assert_eq!(c.name, "debugger");
        assert_eq!(c.command.as_deref(), Some(&["sh".to_string()][..]));
        assert_eq!((c.stdin, c.tty), (Some(true), Some(true)));
        assert_eq!(target_of(&spec(), "debugger"), Some("app"));
        assert_eq!(target_of(&spec(), "plain"), None);
    }

    #[test]
    fn a_target_joins_only_a_process_namespace_of_the_containers_own() {
        let mut own = NamespaceOption {
            pid: NamespaceMode::Container as i32,
            ..Default::default()
        };
        share_target_pid(&mut own, "abc");
        assert_eq!(
            (own.pid, own.target_id.as_str()),
            (NamespaceMode::Target as i32, "abc")
        );
        for shared in [NamespaceMode::Pod, NamespaceMode::Node] {
            let mut options = NamespaceOption {
                pid: shared as i32,
                ..Default::default()
            };
            share_target_pid(&mut options, "abc");
            assert_eq!(
                (options.pid, options.target_id.as_str()),
                (shared as i32, "")
            );
        }
    }

    #[test]
    fn the_target_is_its_newest_run_and_a_target_that_never_ran_is_an_error() {
        let run = |id: &str| ContainerStatus {
            id: id.into(),
            ..Default::default()
        };
        let runs = [run("new"), run("old")];
        assert_eq!(target_id("app", Some(&runs)).as_deref(), Ok("new"));
        assert_eq!(
            target_id("app", None),
            Err("unable to find target container app".to_string())
        );
    }
}
