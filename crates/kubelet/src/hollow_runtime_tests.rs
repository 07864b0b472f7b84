//! Unit tests of [`super::HollowRuntime`]: pod IPs from the node's range, the startup delay,
//! failure mix and stop delay in paused time, and the real pod sync running against it.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use serde_json::json;

use super::*;
use crate::api::RecordingPodApi;
use crate::cri::{ContainerMetadata, PodSandboxMetadata};
use crate::hollow_ipam::Cidr;
use crate::pod_sync::{Outcome, SyncContext};

fn runtime(cidr: &str, behaviour: Behaviour) -> HollowRuntime {
    HollowRuntime::new(
        Cidr::parse(cidr).unwrap(),
        behaviour,
        Arc::new(|| Timestamp::UNIX_EPOCH),
    )
}

fn sandbox(uid: &str) -> PodSandboxConfig {
    PodSandboxConfig {
        metadata: Some(PodSandboxMetadata {
            name: format!("pod-{uid}"),
            uid: uid.into(),
            namespace: "default".into(),
            attempt: 0,
        }),
        labels: HashMap::from([(LABEL_POD_UID.to_string(), uid.to_string())]),
        ..Default::default()
    }
}

fn container(uid: &str, name: &str) -> ContainerConfig {
    ContainerConfig {
        metadata: Some(ContainerMetadata {
            name: name.into(),
            attempt: 0,
        }),
        labels: HashMap::from([
            (LABEL_POD_UID.to_string(), uid.to_string()),
            (LABEL_CONTAINER_NAME.to_string(), name.to_string()),
        ]),
        ..Default::default()
    }
}

async fn pod_ip(rt: &HollowRuntime, sandbox: &str) -> String {
    rt.pod_sandbox_status(sandbox)
        .await
        .unwrap()
        .network
        .unwrap()
        .ip
}

/// Runs a sandbox with one container for `uid` and returns the container's status.
async fn start_pod(rt: &HollowRuntime, uid: &str) -> ContainerStatus {
    let sb = rt.run_pod_sandbox(sandbox(uid), "").await.unwrap();
    let id = rt
        .create_container(&sb, container(uid, "app"), sandbox(uid))
        .await
        .unwrap();
    rt.start_container(&id).await.unwrap();
    rt.container_status(&id).await.unwrap()
}

#[tokio::test]
async fn pod_ips_come_from_the_node_range_after_the_gateway_round_robin() {
    let rt = runtime("10.42.3.0/29", Behaviour::default());
    let mut ips = Vec::new();
    let mut sandboxes = Vec::new();
    for uid in ["a", "b", "c", "d", "e"] {
        let sb = rt.run_pod_sandbox(sandbox(uid), "").await.unwrap();
        ips.push(pod_ip(&rt, &sb).await);
        sandboxes.push(sb);
    }
    // .0 is the network, .1 the gateway, .7 the broadcast address
    assert_eq!(
        ips,
        [
            "10.42.3.2",
            "10.42.3.3",
            "10.42.3.4",
            "10.42.3.5",
            "10.42.3.6"
        ]
    );
    let err = rt.run_pod_sandbox(sandbox("f"), "").await.unwrap_err();
    assert!(
        err.to_string()
            .contains("no IP addresses available in range set: 10.42.3.2-10.42.3.6"),
        "{err}"
    );
    // a stopped sandbox gives its address back; the next one is handed out after the last
    rt.stop_pod_sandbox(&sandboxes[1]).await.unwrap();
    assert_eq!(pod_ip(&rt, &sandboxes[1]).await, "");
    let sb = rt.run_pod_sandbox(sandbox("g"), "").await.unwrap();
    assert_eq!(pod_ip(&rt, &sb).await, "10.42.3.3");
}

#[tokio::test(start_paused = true)]
async fn a_sandbox_takes_the_startup_delay() {
    let delay = Duration::from_millis(1500);
    let rt = runtime(
        "10.42.0.0/24",
        Behaviour {
            startup_delay: delay,
            ..Default::default()
        },
    );
    let began = tokio::time::Instant::now();
    rt.run_pod_sandbox(sandbox("a"), "").await.unwrap();
    // paused time advances exactly to the sleep's deadline
    assert_eq!(began.elapsed(), delay);
}

#[tokio::test]
async fn the_failure_mix_fails_its_fraction_of_containers_the_same_way_every_time() {
    let failed = |rate: f64| async move {
        let rt = runtime(
            "10.64.0.0/16",
            Behaviour {
                failure_rate: rate,
                ..Default::default()
            },
        );
        let mut failed = Vec::new();
        for i in 0..1000 {
            let status = start_pod(&rt, &format!("uid-{i}")).await;
            if status.state == ContainerState::ContainerExited as i32 {
                assert_eq!((status.exit_code, status.reason.as_str()), (1, "Error"));
                failed.push(i);
            } else {
                assert_eq!(status.state, ContainerState::ContainerRunning as i32);
            }
        }
        failed
    };
    assert!(failed(0.0).await.is_empty());
    assert_eq!(failed(1.0).await.len(), 1000);
    let quarter = failed(0.25).await;
    assert!((200..300).contains(&quarter.len()), "{}", quarter.len());
    assert_eq!(failed(0.25).await, quarter);
}

#[test]
fn true_false_and_sh_exit_n_are_the_only_scripted_exits() {
    let v = |xs: &[&str]| xs.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert_eq!(scripted_exit(&v(&["true"]), &[]), Some(0));
    assert_eq!(scripted_exit(&v(&["false"]), &[]), Some(1));
    assert_eq!(scripted_exit(&v(&["sh"]), &v(&["-c", "exit 3"])), Some(3));
    assert_eq!(scripted_exit(&[], &v(&["sh", "-c", " exit 0 "])), Some(0));
    assert_eq!(scripted_exit(&v(&["sh", "-c", "exit 256"]), &[]), None);
    assert_eq!(
        scripted_exit(&v(&["sh", "-c", "sleep 1; exit 0"]), &[]),
        None
    );
    assert_eq!(scripted_exit(&v(&["true", "x"]), &[]), None);
    assert_eq!(scripted_exit(&v(&["sleep", "3600"]), &[]), None);
    assert_eq!(scripted_exit(&[], &[]), None);
}

#[tokio::test]
async fn a_scripted_container_exits_with_its_code_when_started() {
    let rt = runtime("10.42.0.0/24", Behaviour::default());
    let run = |command: Vec<String>, uid: &'static str| {
        let rt = &rt;
        async move {
            let sb = rt.run_pod_sandbox(sandbox(uid), "").await.unwrap();
            let config = ContainerConfig {
                command,
                ..container(uid, "app")
            };
            let id = rt
                .create_container(&sb, config, sandbox(uid))
                .await
                .unwrap();
            rt.start_container(&id).await.unwrap();
            let s = rt.container_status(&id).await.unwrap();
            (s.state, s.exit_code, s.reason)
        }
    };
    let exited = ContainerState::ContainerExited as i32;
    let cmd = |xs: &[&str]| xs.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert_eq!(
        run(cmd(&["true"]), "a").await,
        (exited, 0, "Completed".to_string())
    );
    assert_eq!(
        run(cmd(&["sh", "-c", "exit 2"]), "b").await,
        (exited, 2, "Error".to_string())
    );
    let running = run(cmd(&["sleep", "infinity"]), "c").await;
    assert_eq!(running.0, ContainerState::ContainerRunning as i32);
}

#[tokio::test(start_paused = true)]
async fn a_container_slower_to_stop_than_its_grace_period_is_killed_when_it_ends() {
    let rt = runtime(
        "10.42.0.0/24",
        Behaviour {
            stop_delay: Duration::from_secs(5),
            ..Default::default()
        },
    );
    let stop = |grace: i64| {
        let rt = &rt;
        async move {
            let id = start_pod(rt, &format!("uid-{grace}")).await.id;
            let began = tokio::time::Instant::now();
            rt.stop_container(&id, grace).await.unwrap();
            let status = rt.container_status(&id).await.unwrap();
            (began.elapsed(), status.exit_code)
        }
    };
    assert_eq!(stop(2).await, (Duration::from_secs(2), 137));
    assert_eq!(stop(30).await, (Duration::from_secs(5), 143));
}

/// The real pod sync's context over the hollow runtime, with the node's IP `host_ip` and its
/// logs and volumes under `dir`.
fn sync_context(
    rt: &Arc<HollowRuntime>,
    api: &Arc<RecordingPodApi>,
    host_ip: &str,
    dir: &std::path::Path,
) -> SyncContext {
    SyncContext {
        runtime: rt.clone(),
        api: api.clone(),
        host_ip: host_ip.into(),
        runtime_name: RUNTIME_NAME.into(),
        memory_capacity: 4 << 30,
        log_dir: dir.into(),
        clock: Arc::new(|| Timestamp::UNIX_EPOCH),
        volumes: Arc::new(crate::volumes::VolumeManager::new(
            dir.join("pods"),
            Arc::new(crate::volumes::host::RecordingHost::default()),
            crate::volumes::REFRESH,
        )),
        dns: Arc::default(),
        allocatable: Default::default(),
        sync_frequency: crate::volumes::REFRESH,
        security: Default::default(),
        runtime_classes: skiff_runtime::cache::Cache::from_objects([]),
        cgroups: None,
        allocations: Default::default(),
    }
}

/// `config` joining the process namespace of container `target`.
fn targeting(mut config: ContainerConfig, target: &str) -> ContainerConfig {
    let namespaces = k8s_cri::v1::NamespaceOption {
        pid: NamespaceMode::Target as i32,
        target_id: target.into(),
        ..Default::default()
    };
    config.linux = Some(k8s_cri::v1::LinuxContainerConfig {
        security_context: Some(k8s_cri::v1::LinuxContainerSecurityContext {
            namespace_options: Some(namespaces),
            ..Default::default()
        }),
        ..Default::default()
    });
    config
}

#[tokio::test]
async fn a_target_process_namespace_must_be_a_running_container_of_the_same_sandbox() {
    let rt = runtime("10.64.7.0/24", Behaviour::default());
    let app = start_pod(&rt, "a").await;
    let other = start_pod(&rt, "b").await;
    let sandbox_of = |uid: &str| {
        let labels = HashMap::from([(LABEL_POD_UID.to_string(), uid.to_string())]);
        let rt = &rt;
        async move { rt.list_pod_sandboxes(labels).await.unwrap()[0].id.clone() }
    };
    let sb = sandbox_of("a").await;
    let debugger = |target: &str| targeting(container("a", "debugger"), target);
    let joined = rt
        .create_container(&sb, debugger(&app.id), sandbox("a"))
        .await;
    assert!(joined.is_ok(), "{joined:?}");
    for (target, why) in [
        ("nope", "does not exist"),
        (other.id.as_str(), "does not belong to sandbox"),
    ] {
        let err = rt
            .create_container(&sb, debugger(target), sandbox("a"))
            .await
            .unwrap_err();
        assert!(err.to_string().contains(why), "{err}");
    }
    rt.stop_container(&app.id, 0).await.unwrap();
    let err = rt
        .create_container(&sb, debugger(&app.id), sandbox("a"))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("is not running"), "{err}");
}

#[tokio::test]
async fn the_real_pod_sync_runs_an_ephemeral_container_once_in_its_targets_namespace() {
    let rt = Arc::new(runtime("10.64.8.0/24", Behaviour::default()));
    let api = Arc::new(RecordingPodApi::default());
    let logs = tempfile::tempdir().unwrap();
    let ctx = sync_context(&rt, &api, "10.64.8.1", logs.path());
    let mut pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "web", "namespace": "default", "uid": "u3"},
        "spec": {"nodeName": "hollow-8", "containers": [{"name": "c", "image": "nginx"}]},
        "status": {"phase": "Pending"},
    }))
    .unwrap();
    let mut probes = crate::probe::Probes::default();
    ctx.sync_pod(&pod, &mut probes).await.unwrap();
    pod.status = api.last_status("web");

    // kubectl debug adds one that targets `c`; it exits at once and is not run again
    pod.spec.as_mut().unwrap().ephemeral_containers = Some(
        serde_json::from_value(json!([
            {"name": "debugger", "image": "busybox", "targetContainerName": "c",
             "command": ["sh", "-c", "exit 3"]},
        ]))
        .unwrap(),
    );
    for _ in 0..3 {
        ctx.sync_pod(&pod, &mut probes).await.unwrap();
        pod.status = api.last_status("web");
    }
    let status = pod.status.clone().unwrap();
    assert_eq!(status.phase.as_deref(), Some("Running"));
    let debugger = &status.ephemeral_container_statuses.unwrap()[0];
    let exited = debugger.state.as_ref().unwrap().terminated.as_ref();
    assert_eq!(exited.map(|t| t.exit_code), Some(3), "{debugger:?}");
    assert_eq!(debugger.restart_count, 0);
    let labels = HashMap::from([(LABEL_CONTAINER_NAME.to_string(), "debugger".to_string())]);
    assert_eq!(rt.list_containers(labels).await.unwrap().len(), 1);
}

#[tokio::test]
async fn the_real_pod_sync_runs_a_pod_on_the_hollow_runtime_with_an_ip_from_the_range() {
    let rt = Arc::new(runtime("10.64.5.0/24", Behaviour::default()));
    let api = Arc::new(RecordingPodApi::default());
    let logs = tempfile::tempdir().unwrap();
    let ctx = sync_context(&rt, &api, "10.64.5.1", logs.path());
    let mut pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "web", "namespace": "default", "uid": "u1"},
        "spec": {"nodeName": "hollow-5", "containers": [{"name": "c", "image": "nginx"}]},
        "status": {"phase": "Pending"},
    }))
    .unwrap();
    let mut probes = crate::probe::Probes::default();
    let outcome = ctx.sync_pod(&pod, &mut probes).await.unwrap();
    assert!(matches!(outcome, Outcome::Resync(_)));
    let status = api.last_status("web").unwrap();
    assert_eq!(status.phase.as_deref(), Some("Running"));
    assert_eq!(status.pod_ip.as_deref(), Some("10.64.5.2"));
    assert_eq!(status.host_ip.as_deref(), Some("10.64.5.1"));
    let c = &status.container_statuses.unwrap()[0];
    assert!(c.ready && c.state.as_ref().unwrap().running.is_some());
    assert!(c.container_id.as_deref().unwrap().starts_with("hollow://"));

    pod.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        Timestamp::UNIX_EPOCH,
    ));
    let outcome = ctx.sync_pod(&pod, &mut probes).await.unwrap();
    assert_eq!(outcome, Outcome::Done);
    assert_eq!(api.deleted(), ["web"]);
    assert!(rt.list_containers(HashMap::new()).await.unwrap().is_empty());
    assert!(
        rt.list_pod_sandboxes(HashMap::new())
            .await
            .unwrap()
            .is_empty()
    );
}

#[tokio::test]
async fn the_real_pod_sync_finishes_a_pod_whose_container_runs_true() {
    let rt = Arc::new(runtime("10.64.6.0/24", Behaviour::default()));
    let api = Arc::new(RecordingPodApi::default());
    let logs = tempfile::tempdir().unwrap();
    let ctx = sync_context(&rt, &api, "10.64.6.1", logs.path());
    let mut pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "job-x", "namespace": "default", "uid": "u2"},
        "spec": {"nodeName": "hollow-6", "restartPolicy": "Never",
                 "containers": [{"name": "c", "image": "busybox", "command": ["true"]}]},
        "status": {"phase": "Pending"},
    }))
    .unwrap();
    let mut probes = crate::probe::Probes::default();
    for _ in 0..3 {
        ctx.sync_pod(&pod, &mut probes).await.unwrap();
        pod.status = api.last_status("job-x");
    }
    let status = api.last_status("job-x").unwrap();
    assert_eq!(status.phase.as_deref(), Some("Succeeded"), "{status:?}");
}

#[tokio::test]
async fn the_pleg_states_are_what_the_lists_say_without_their_copies() {
    let rt = runtime("10.42.3.0/28", Behaviour::default());
    start_pod(&rt, "a").await;
    let stopped = start_pod(&rt, "b").await;
    rt.stop_container(&stopped.id, 0).await.unwrap();
    // a sandbox the kubelet did not label is not a pod's
    let mut unlabelled = sandbox("c");
    unlabelled.labels.clear();
    rt.run_pod_sandbox(unlabelled, "").await.unwrap();
    let mut direct = rt.pod_states().await.unwrap();
    let mut listed = crate::cri::states_from_lists(&rt).await.unwrap();
    direct.sort();
    listed.sort();
    assert_eq!(direct.len(), 4, "{direct:?}");
    assert_eq!(direct, listed);
}

#[tokio::test]
async fn every_change_moves_the_generation_and_reads_do_not() {
    let rt = runtime("10.244.0.0/24", Behaviour::default());
    let mut seen = vec![rt.generation().unwrap()];
    let mut moved = |rt: &HollowRuntime, what: &str| {
        let g = rt.generation().unwrap();
        assert!(!seen.contains(&g), "{what} moves the generation");
        seen.push(g);
    };
    let sb = rt.run_pod_sandbox(sandbox("u1"), "").await.unwrap();
    moved(&rt, "RunPodSandbox");
    let c = rt
        .create_container(&sb, container("u1", "c"), sandbox("u1"))
        .await
        .unwrap();
    moved(&rt, "CreateContainer");
    rt.start_container(&c).await.unwrap();
    moved(&rt, "StartContainer");

    let before = rt.generation();
    rt.pod_states().await.unwrap();
    rt.container_status(&c).await.unwrap();
    rt.pod_sandbox_status(&sb).await.unwrap();
    rt.list_containers(HashMap::new()).await.unwrap();
    rt.list_pod_sandboxes(HashMap::new()).await.unwrap();
    assert_eq!(rt.generation(), before, "reads leave it");

    rt.stop_container(&c, 0).await.unwrap();
    moved(&rt, "StopContainer");
    rt.remove_container(&c).await.unwrap();
    moved(&rt, "RemoveContainer");
    rt.stop_pod_sandbox(&sb).await.unwrap();
    moved(&rt, "StopPodSandbox");
    rt.remove_pod_sandbox(&sb).await.unwrap();
    moved(&rt, "RemovePodSandbox");
}
