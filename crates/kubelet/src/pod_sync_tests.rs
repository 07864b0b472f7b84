//! Unit tests of [`super::SyncContext::sync_pod`] with the fake runtime and a recording API.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Pod, PodStatus};
use k8s_openapi::api::node::v1::RuntimeClass;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde_json::json;

use super::*;
use crate::api::RecordingPodApi;
use crate::fake::FakeRuntime;

struct Harness {
    probes: parking_lot::Mutex<crate::probe::Probes>,
    runtime: Arc<FakeRuntime>,
    api: Arc<RecordingPodApi>,
    host: Arc<crate::volumes::host::RecordingHost>,
    ctx: SyncContext,
    _logs: tempfile::TempDir,
}

fn harness() -> Harness {
    let runtime = Arc::new(FakeRuntime::new());
    runtime.add_image("busybox");
    let api = Arc::new(RecordingPodApi::default());
    let logs = tempfile::tempdir().unwrap();
    let clock_source = runtime.clone();
    let host = Arc::new(crate::volumes::host::RecordingHost::default());
    let ctx = SyncContext {
        runtime: runtime.clone(),
        api: api.clone(),
        host_ip: "192.168.1.5".into(),
        runtime_name: "containerd".into(),
        memory_capacity: 4 << 30,
        log_dir: logs.path().into(),
        clock: Arc::new(move || clock_source.now()),
        volumes: Arc::new(crate::volumes::VolumeManager::new(
            logs.path().join("pods"),
            host.clone(),
            crate::volumes::REFRESH,
        )),
        dns: Arc::new(crate::dns::DnsSettings {
            cluster_dns: vec!["10.43.0.10".parse().unwrap()],
            ..Default::default()
        }),
        allocatable: Default::default(),
        sync_frequency: crate::volumes::REFRESH,
        security: Default::default(),
        runtime_classes: skiff_runtime::cache::Cache::from_objects([]),
        cgroups: None,
        allocations: Default::default(),
    };
    Harness {
        probes: Default::default(),
        runtime,
        api,
        host,
        ctx,
        _logs: logs,
    }
}

fn pod(restart_policy: &str, pull_policy: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": "web", "namespace": "default", "uid": "u1"},
        "spec": {"nodeName": "n1", "restartPolicy": restart_policy,
                 "terminationGracePeriodSeconds": 7,
                 "containers": [{"name": "c", "image": "busybox",
                                 "imagePullPolicy": pull_policy,
                                 "command": ["sh"], "args": ["-c", "sleep 1"],
                                 "env": [{"name": "A", "value": "1"}]}]},
        "status": {"phase": "Pending", "qosClass": "BestEffort"},
    }))
    .unwrap()
}

impl Harness {
    /// Syncs and feeds the status written back into the pod, as the watch would.
    async fn sync(&self, pod: &mut Pod) -> Outcome {
        let mut probes = std::mem::take(&mut *self.probes.lock());
        let outcome = self.ctx.sync_pod(pod, &mut probes).await.expect("sync");
        *self.probes.lock() = probes;
        if let Some(status) = self.api.last_status("web") {
            pod.status = Some(status);
        }
        outcome
    }

    fn status(&self) -> PodStatus {
        self.api.last_status("web").expect("a status was written")
    }

    fn count(&self, prefix: &str) -> usize {
        self.runtime
            .calls()
            .iter()
            .filter(|c| c.starts_with(prefix))
            .count()
    }
}

fn waiting_reason(status: &PodStatus) -> Option<String> {
    status.container_statuses.as_ref()?[0]
        .state
        .as_ref()?
        .waiting
        .as_ref()?
        .reason
        .clone()
}

#[tokio::test]
async fn a_new_pod_gets_a_sandbox_then_its_container_and_a_running_status() {
    let h = harness();
    let mut pod = pod("Always", "IfNotPresent");
    assert_eq!(
        h.sync(&mut pod).await,
        Outcome::Resync(crate::volumes::REFRESH),
        "nothing is due before the sync frequency: a change to the containers wakes the worker"
    );
    let calls = h.runtime.calls();
    let order: Vec<&str> = calls
        .iter()
        .filter_map(|c| c.split_whitespace().next())
        .filter(|m| ["RunPodSandbox", "CreateContainer", "StartContainer"].contains(m))
        .collect();
    assert_eq!(
        order,
        ["RunPodSandbox", "CreateContainer", "StartContainer"]
    );
    assert_eq!(
        h.count("PullImage"),
        0,
        "IfNotPresent with the image present"
    );
    let status = h.status();
    assert_eq!(status.phase.as_deref(), Some("Running"));
    assert_eq!(status.pod_ip.as_deref(), Some("10.42.0.2"));
    assert_eq!(status.host_ip.as_deref(), Some("192.168.1.5"));
    let cs = &status.container_statuses.as_ref().unwrap()[0];
    assert!(cs.ready);
    assert!(
        cs.container_id
            .as_deref()
            .unwrap()
            .starts_with("containerd://container-")
    );
}

#[tokio::test]
async fn a_second_sync_of_a_running_pod_creates_nothing_and_writes_nothing() {
    let h = harness();
    let mut pod = pod("Always", "IfNotPresent");
    h.sync(&mut pod).await;
    let writes = h.api.writes.lock().len();
    h.sync(&mut pod).await;
    assert_eq!(h.count("RunPodSandbox"), 1);
    assert_eq!(h.count("CreateContainer"), 1);
    assert_eq!(
        h.api.writes.lock().len(),
        writes,
        "an unchanged status is not written"
    );
}

#[tokio::test]
async fn an_exited_container_is_restarted_at_once_then_backs_off_ten_seconds() {
    let h = harness();
    let mut pod = pod("Always", "IfNotPresent");
    h.sync(&mut pod).await;
    let first = h.runtime.containers_named("c")[0].clone();
    h.runtime.exit_container(&first, 1);
    h.sync(&mut pod).await;
    let ids = h.runtime.containers_named("c");
    assert_eq!(ids.len(), 2, "restarted at once, the exited run kept");
    assert_eq!(h.status().container_statuses.unwrap()[0].restart_count, 1);

    h.runtime.exit_container(&ids[1], 1);
    let outcome = h.sync(&mut pod).await;
    assert_eq!(
        h.runtime.containers_named("c").len(),
        2,
        "not restarted yet"
    );
    assert_eq!(
        waiting_reason(&h.status()).as_deref(),
        Some("CrashLoopBackOff")
    );
    assert_eq!(h.status().phase.as_deref(), Some("Running"));
    assert_eq!(
        outcome,
        Outcome::Resync(Duration::from_secs(10)),
        "the next sync is when the back-off ends"
    );

    h.runtime.advance(Duration::from_secs(10));
    h.sync(&mut pod).await;
    let ids = h.runtime.containers_named("c");
    assert_eq!(
        ids.len(),
        3,
        "exited runs stay for the container garbage collection to remove"
    );
    assert_eq!(ids[0], first);
    assert_eq!(h.status().container_statuses.unwrap()[0].restart_count, 2);
}

#[tokio::test]
async fn a_finished_pod_under_never_succeeds_and_gives_its_sandbox_back() {
    let h = harness();
    let mut pod = pod("Never", "IfNotPresent");
    h.sync(&mut pod).await;
    let id = h.runtime.containers_named("c")[0].clone();
    h.runtime.exit_container(&id, 0);
    assert_eq!(h.sync(&mut pod).await, Outcome::Finished);
    assert_eq!(h.status().phase.as_deref(), Some("Succeeded"));
    assert_eq!(h.count("StopPodSandbox"), 1);
    assert_eq!(
        h.status().pod_ip.as_deref(),
        Some("10.42.0.2"),
        "the IP stays in the status"
    );
    h.sync(&mut pod).await;
    assert_eq!(h.count("CreateContainer"), 1, "never restarted");
    assert_eq!(
        h.count("RunPodSandbox"),
        1,
        "no new sandbox for a finished pod"
    );
}

#[tokio::test]
async fn on_failure_restarts_a_failed_container_only() {
    let h = harness();
    let mut pod = pod("OnFailure", "IfNotPresent");
    h.sync(&mut pod).await;
    let id = h.runtime.containers_named("c")[0].clone();
    h.runtime.exit_container(&id, 2);
    h.sync(&mut pod).await;
    assert_eq!(h.count("CreateContainer"), 2);
    let id = h.runtime.containers_named("c")[1].clone();
    h.runtime.exit_container(&id, 0);
    h.sync(&mut pod).await;
    assert_eq!(h.count("CreateContainer"), 2);
    assert_eq!(h.status().phase.as_deref(), Some("Succeeded"));
}

#[tokio::test]
async fn deletion_stops_containers_with_the_grace_period_removes_them_and_deletes_the_pod() {
    let h = harness();
    let mut pod = pod("Always", "IfNotPresent");
    h.sync(&mut pod).await;
    let id = h.runtime.containers_named("c")[0].clone();
    pod.metadata.deletion_timestamp = Some(Time(jiff::Timestamp::UNIX_EPOCH));
    pod.metadata.deletion_grace_period_seconds = Some(7);
    assert_eq!(h.sync(&mut pod).await, Outcome::Done);
    let calls = h.runtime.calls();
    assert!(
        calls.contains(&format!("StopContainer {id} 7")),
        "{calls:?}"
    );
    let pos = |m: &str| calls.iter().position(|c| c.starts_with(m)).unwrap();
    assert!(pos("StopContainer") < pos("StopPodSandbox"));
    assert!(pos("StopPodSandbox") < pos("RemovePodSandbox"));
    assert!(h.runtime.containers_named("c").is_empty());
    assert_eq!(h.api.deleted(), ["web"]);
    assert_eq!(
        h.api.event_reasons().last().map(String::as_str),
        Some("Killing")
    );
}

#[tokio::test]
async fn a_pod_gets_its_cgroup_before_its_sandbox_as_parent_and_loses_it_once_deleted() {
    let mut h = harness();
    let fs = Arc::new(crate::cgroups::fs::FakeCgroupFs::v1());
    let cgroups = crate::cgroups::PodCgroups::start(fs.clone(), "/", -1, &Default::default());
    h.ctx.cgroups = Some(Arc::new(cgroups.unwrap()));
    let mut pod = pod("Always", "IfNotPresent");
    h.sync(&mut pod).await;
    let sandbox = &h.runtime.sandbox_configs()[0];
    assert_eq!(
        sandbox.linux.as_ref().unwrap().cgroup_parent,
        "/kubepods/besteffort/podu1"
    );
    let dir = "/sys/fs/cgroup/memory/kubepods/besteffort/podu1";
    assert!(fs.has_dir(dir));

    pod.metadata.deletion_timestamp = Some(Time(jiff::Timestamp::UNIX_EPOCH));
    assert_eq!(h.sync(&mut pod).await, Outcome::Done);
    assert!(!fs.has_dir(dir));
}

#[tokio::test]
async fn a_pod_whose_cgroup_cannot_be_made_gets_no_sandbox_and_a_warning() {
    let mut h = harness();
    let fs = Arc::new(crate::cgroups::fs::FakeCgroupFs::v1());
    let cgroups = crate::cgroups::PodCgroups::start(fs.clone(), "/", -1, &Default::default());
    h.ctx.cgroups = Some(Arc::new(cgroups.unwrap()));
    fs.fail_writes
        .lock()
        .insert("cpu.shares".into(), "no space left on device".into());
    let pod = pod("Always", "IfNotPresent");
    let err = h
        .ctx
        .sync_pod(&pod, &mut Default::default())
        .await
        .unwrap_err();
    assert!(err.to_string().contains("u1 cgroups exist"), "{err}");
    assert_eq!(h.count("RunPodSandbox"), 0);
    assert_eq!(
        h.api.event_reasons().last().map(String::as_str),
        Some("FailedCreatePodContainer")
    );
}

#[tokio::test]
async fn pull_policies_decide_between_the_image_present_and_a_pull() {
    // Never, image missing: the container waits
    let h = harness();
    let mut p = pod("Always", "Never");
    p.spec.as_mut().unwrap().containers[0].image = Some("missing:1".into());
    h.sync(&mut p).await;
    assert_eq!(
        waiting_reason(&h.status()).as_deref(),
        Some("ErrImageNeverPull")
    );
    assert_eq!(h.count("CreateContainer"), 0);

    // Always: pulls even when present
    let h = harness();
    h.sync(&mut pod("Always", "Always")).await;
    assert_eq!(h.count("PullImage"), 1);
    assert_eq!(h.count("StartContainer"), 1);

    // Always, no registry: the image present is used
    let h = harness();
    h.runtime.fail("PullImage", tonic::Code::Unavailable);
    h.sync(&mut pod("Always", "Always")).await;
    assert_eq!(h.count("StartContainer"), 1);

    // IfNotPresent, missing and the pull fails: ErrImagePull, retried later
    let h = harness();
    h.runtime.fail("PullImage", tonic::Code::Unavailable);
    let mut p = pod("Always", "IfNotPresent");
    p.spec.as_mut().unwrap().containers[0].image = Some("missing:1".into());
    assert_eq!(h.sync(&mut p).await, Outcome::Resync(RETRY));
    assert_eq!(waiting_reason(&h.status()).as_deref(), Some("ErrImagePull"));
    assert_eq!(h.api.event_reasons(), ["Pulling", "Failed"]);
    h.sync(&mut p).await;
    assert_eq!(
        waiting_reason(&h.status()).as_deref(),
        Some("ImagePullBackOff")
    );
}

#[tokio::test]
async fn pulls_use_the_matching_image_pull_secret_and_missing_secrets_are_reported() {
    let h = harness();
    h.api.secrets.lock().insert(
        "regcred".into(),
        BTreeMap::from([(
            ".dockerconfigjson".to_string(),
            r#"{"auths": {"127.0.0.1:5000": {"username": "alice", "password": "pw"}}}"#.to_string(),
        )]),
    );
    let mut p = pod("Always", "Always");
    let spec = p.spec.as_mut().unwrap();
    spec.containers[0].image = Some("127.0.0.1:5000/app:1".into());
    spec.image_pull_secrets = Some(vec![
        serde_json::from_value(json!({"name": "regcred"})).unwrap(),
        serde_json::from_value(json!({"name": "gone"})).unwrap(),
    ]);
    h.sync(&mut p).await;
    let pulls: Vec<String> = h
        .runtime
        .calls()
        .into_iter()
        .filter(|c| c.starts_with("PullImage"))
        .collect();
    assert_eq!(pulls, ["PullImage 127.0.0.1:5000/app:1 as alice"]);
    assert_eq!(
        h.api.event_reasons(),
        [
            "FailedToRetrieveImagePullSecret",
            "Pulling",
            "Pulled",
            "Created",
            "Started"
        ]
    );
}

#[tokio::test]
async fn a_sandbox_that_cannot_be_created_is_reported_and_retried() {
    let h = harness();
    h.runtime.fail("RunPodSandbox", tonic::Code::Internal);
    let mut pod = pod("Always", "IfNotPresent");
    assert_eq!(h.sync(&mut pod).await, Outcome::Resync(RETRY));
    let status = h.status();
    assert_eq!(status.phase.as_deref(), Some("Pending"));
    assert_eq!(
        waiting_reason(&status).as_deref(),
        Some("CreatePodSandboxError")
    );
    assert_eq!(
        h.api.event_messages("FailedCreatePodSandBox"),
        ["Failed to create pod sandbox: rpc error: code = Internal desc = injected failure"]
    );
}

#[tokio::test]
async fn the_sandbox_runs_under_its_runtime_class_handler_and_a_missing_class_fails_it() {
    let h = harness();
    let mut p = pod("Always", "IfNotPresent");
    p.spec.as_mut().unwrap().runtime_class_name = Some("gvisor".into());
    assert_eq!(h.sync(&mut p).await, Outcome::Resync(RETRY));
    assert_eq!(h.count("RunPodSandbox"), 0);
    assert_eq!(
        h.api.event_messages("FailedCreatePodSandBox"),
        [r#"Failed to create pod sandbox: runtimeclass.node.k8s.io "gvisor" not found"#]
    );

    let mut h = harness();
    h.ctx.runtime_classes = skiff_runtime::cache::Cache::from_objects([serde_json::from_value::<
        RuntimeClass,
    >(json!({
        "metadata": {"name": "gvisor"}, "handler": "runsc",
    }))
    .unwrap()]);
    h.sync(&mut p).await;
    assert!(
        h.runtime
            .calls()
            .contains(&"RunPodSandbox default/web runsc".to_string())
    );

    // no runtime here gives pods a user namespace of their own
    let h = harness();
    let mut p = pod("Always", "IfNotPresent");
    p.spec.as_mut().unwrap().host_users = Some(false);
    h.sync(&mut p).await;
    assert_eq!(h.count("RunPodSandbox"), 0);
    assert_eq!(
        h.api.event_messages("FailedCreatePodSandBox"),
        [
            r#"Failed to create pod sandbox: RuntimeClass handler "" does not support user namespaces"#
        ]
    );
}

#[tokio::test]
async fn run_as_non_root_on_a_root_image_is_a_create_container_config_error() {
    let h = harness();
    h.runtime.add_image_with_user("app:root", "0");
    let mut p = pod("Always", "IfNotPresent");
    let spec = p.spec.as_mut().unwrap();
    spec.containers[0].image = Some("app:root".into());
    spec.security_context = serde_json::from_value(json!({"runAsNonRoot": true})).unwrap();
    h.sync(&mut p).await;
    let status = h.status();
    let waiting = status.container_statuses.unwrap()[0]
        .state
        .clone()
        .unwrap()
        .waiting
        .unwrap();
    let message = r#"container has runAsNonRoot and image will run as root (pod: "web_default(u1)", container: c)"#;
    assert_eq!(
        waiting.reason.as_deref(),
        Some("CreateContainerConfigError")
    );
    assert_eq!(waiting.message.as_deref(), Some(message));
    assert_eq!(
        h.api.event_messages("Failed"),
        [format!("Error: {message}")]
    );
    assert_eq!(h.count("CreateContainer"), 0);

    // a non-root numeric user passes, and the container runs as it
    let h = harness();
    h.runtime.add_image_with_user("app:user", "1000:1000");
    p.spec.as_mut().unwrap().containers[0].image = Some("app:user".into());
    h.sync(&mut p).await;
    assert_eq!(h.count("StartContainer"), 1);
}

#[tokio::test]
async fn an_apparmor_profile_on_a_host_without_apparmor_blocks_the_pod() {
    let h = harness();
    let mut p = pod("Always", "IfNotPresent");
    p.spec.as_mut().unwrap().security_context =
        serde_json::from_value(json!({"appArmorProfile": {"type": "RuntimeDefault"}})).unwrap();
    h.sync(&mut p).await;
    let status = h.status();
    assert_eq!(status.phase.as_deref(), Some("Pending"));
    assert_eq!(status.reason.as_deref(), Some("AppArmor"));
    assert_eq!(
        status.message.as_deref(),
        Some("Cannot enforce AppArmor: AppArmor is not enabled on the host")
    );
    assert_eq!(waiting_reason(&status).as_deref(), Some("Blocked"));
    assert_eq!(h.count("RunPodSandbox"), 0);

    let h = harness();
    let mut p = pod("Always", "IfNotPresent");
    p.spec.as_mut().unwrap().security_context =
        serde_json::from_value(json!({"appArmorProfile": {"type": "Unconfined"}})).unwrap();
    h.sync(&mut p).await;
    assert_eq!(h.count("StartContainer"), 1, "Unconfined needs no AppArmor");
}

#[tokio::test]
async fn the_container_gets_the_command_args_env_and_log_path_of_the_spec() {
    let h = harness();
    let mut pod = pod("Always", "IfNotPresent");
    h.sync(&mut pod).await;
    let sandbox = crate::config::sandbox_config(&pod, 0, &h.ctx.pod_log_dir(&pod), &[]);
    assert_eq!(sandbox.labels[LABEL_POD_UID], "u1");
    assert!(sandbox.log_directory.ends_with("default_web_u1"));
    let config = crate::config::container_config(
        &pod,
        &pod.spec.as_ref().unwrap().containers[0],
        "sha256:x",
        3,
        vec![],
        vec![],
        Default::default(),
    );
    assert_eq!(config.command, ["sh"]);
    assert_eq!(config.args, ["-c", "sleep 1"]);
    assert_eq!(config.log_path, "c/3.log");
    assert_eq!(config.labels[LABEL_CONTAINER_NAME], "c");
}

#[tokio::test]
async fn init_containers_complete_before_the_app_container_starts() {
    let h = harness();
    let mut pod = pod("Always", "IfNotPresent");
    pod.spec.as_mut().unwrap().init_containers = Some(vec![
        serde_json::from_value(json!({"name": "setup", "image": "busybox",
                                      "imagePullPolicy": "IfNotPresent"}))
        .unwrap(),
    ]);
    h.sync(&mut pod).await;
    assert_eq!(h.runtime.containers_named("setup").len(), 1);
    assert!(h.runtime.containers_named("c").is_empty(), "the app waits");
    let status = h.status();
    assert_eq!(status.phase.as_deref(), Some("Pending"));
    assert_eq!(waiting_reason(&status).as_deref(), Some("PodInitializing"));

    let setup = h.runtime.containers_named("setup")[0].clone();
    h.runtime.exit_container(&setup, 0);
    h.sync(&mut pod).await;
    assert_eq!(h.runtime.containers_named("c").len(), 1);
    let status = h.status();
    assert_eq!(status.phase.as_deref(), Some("Running"));
    let init = &status.init_container_statuses.as_ref().unwrap()[0];
    assert!(init.ready);
    assert_eq!(
        init.state
            .as_ref()
            .unwrap()
            .terminated
            .as_ref()
            .unwrap()
            .exit_code,
        0
    );
    h.sync(&mut pod).await;
    assert_eq!(
        h.runtime.containers_named("setup").len(),
        1,
        "not run again"
    );
}

#[tokio::test]
async fn a_missing_config_map_holds_the_container_until_it_exists() {
    let h = harness();
    let mut pod = pod("Always", "IfNotPresent");
    pod.spec.as_mut().unwrap().containers[0].env = Some(vec![
        serde_json::from_value(json!({"name": "MODE", "valueFrom":
            {"configMapKeyRef": {"name": "settings", "key": "mode"}}}))
        .unwrap(),
    ]);
    assert_eq!(h.sync(&mut pod).await, Outcome::Resync(RETRY));
    assert_eq!(
        waiting_reason(&h.status()).as_deref(),
        Some("CreateContainerConfigError")
    );
    assert_eq!(h.count("CreateContainer"), 0);

    h.api.config_maps.lock().insert(
        "settings".into(),
        std::collections::BTreeMap::from([("mode".to_string(), "fast".to_string())]),
    );
    h.sync(&mut pod).await;
    assert_eq!(h.count("CreateContainer"), 1);
    assert_eq!(h.status().phase.as_deref(), Some("Running"));
}

#[tokio::test]
async fn readiness_gates_ready_and_a_failing_liveness_probe_restarts_the_container() {
    let h = harness();
    let mut pod = pod("Always", "IfNotPresent");
    let c = &mut pod.spec.as_mut().unwrap().containers[0];
    c.readiness_probe = Some(
        serde_json::from_value(json!({"exec": {"command": ["ready"]}, "periodSeconds": 1}))
            .unwrap(),
    );
    c.liveness_probe = Some(
        serde_json::from_value(json!({"exec": {"command": ["alive"]}, "periodSeconds": 1,
                                      "failureThreshold": 2}))
        .unwrap(),
    );
    // the first sync starts it; the next probes it
    h.sync(&mut pod).await;
    h.runtime.advance(Duration::from_secs(1));
    h.sync(&mut pod).await;
    let cs = &h.status().container_statuses.unwrap()[0];
    assert!(cs.ready, "the readiness probe passed");
    assert_eq!(
        h.status()
            .conditions
            .unwrap()
            .iter()
            .find(|c| c.type_ == "Ready")
            .unwrap()
            .status,
        "True"
    );

    h.runtime.set_exec_exit_code(1);
    h.runtime.advance(Duration::from_secs(1));
    h.sync(&mut pod).await;
    let cs = &h.status().container_statuses.unwrap()[0];
    assert!(cs.ready, "one failure is below the default threshold of 3");
    h.runtime.advance(Duration::from_secs(1));
    h.sync(&mut pod).await;
    // liveness failed twice: stopped, then restarted by the next sync
    assert!(h.api.event_reasons().iter().any(|r| r == "Unhealthy"));
    assert!(h.api.event_reasons().iter().any(|r| r == "Killing"));
    h.runtime.set_exec_exit_code(0);
    h.sync(&mut pod).await;
    assert_eq!(h.runtime.containers_named("c").len(), 2);
    assert_eq!(h.status().container_statuses.unwrap()[0].restart_count, 1);
}

#[tokio::test]
async fn a_probed_pod_is_synced_again_when_its_next_probe_is_due() {
    let h = harness();
    let mut pod = pod("Always", "IfNotPresent");
    pod.spec.as_mut().unwrap().containers[0].readiness_probe = Some(
        serde_json::from_value(json!({"exec": {"command": ["ready"]}, "periodSeconds": 5,
                                      "initialDelaySeconds": 30}))
        .unwrap(),
    );
    let Outcome::Resync(wait) = h.sync(&mut pod).await else {
        panic!("a running pod is synced again")
    };
    // counted from the sync's start: the fake clock ticks a second per runtime call
    assert!(
        wait >= Duration::from_secs(30) && wait <= Duration::from_secs(35),
        "the initial delay after the container started: {wait:?}"
    );
    h.runtime.advance(wait);
    assert_eq!(
        h.sync(&mut pod).await,
        Outcome::Resync(Duration::from_secs(5)),
        "probed: the next one is a period away"
    );
    assert!(h.status().container_statuses.unwrap()[0].ready);
}

#[tokio::test]
async fn a_failed_post_start_hook_stops_the_container_and_pre_stop_runs_before_sigterm() {
    let h = harness();
    let mut pod = pod("Always", "IfNotPresent");
    pod.spec.as_mut().unwrap().containers[0].lifecycle = Some(
        serde_json::from_value(json!({
            "postStart": {"exec": {"command": ["setup"]}},
            "preStop": {"exec": {"command": ["drain"]}},
        }))
        .unwrap(),
    );
    h.runtime.set_exec_exit_code(1);
    h.sync(&mut pod).await;
    assert!(
        h.api
            .event_reasons()
            .iter()
            .any(|r| r == "FailedPostStartHook")
    );
    let first = h.runtime.containers_named("c")[0].clone();
    assert!(
        h.runtime
            .calls()
            .iter()
            .any(|c| c.starts_with(&format!("StopContainer {first}")))
    );

    // restarted at once (and failing again), then backing off; after the back-off, with the
    // hook passing, it stays up
    assert_eq!(
        waiting_reason(&h.status()).as_deref(),
        Some("CrashLoopBackOff")
    );
    h.runtime.set_exec_exit_code(0);
    h.runtime.advance(Duration::from_secs(10));
    h.sync(&mut pod).await;
    let cs = &h.status().container_statuses.unwrap()[0];
    assert_eq!(cs.restart_count, 2);
    assert!(cs.state.as_ref().unwrap().running.is_some());
    pod.metadata.deletion_timestamp = Some(Time(jiff::Timestamp::UNIX_EPOCH));
    pod.metadata.deletion_grace_period_seconds = Some(30);
    assert_eq!(h.sync(&mut pod).await, Outcome::Done);
    let calls = h.runtime.calls();
    let drain = calls
        .iter()
        .rposition(|c| c.ends_with(" drain"))
        .unwrap_or_else(|| panic!("{calls:#?}"));
    let stop = calls
        .iter()
        .rposition(|c| c.starts_with("StopContainer"))
        .unwrap();
    assert!(drain < stop, "{calls:?}");
    assert!(
        calls[stop].ends_with(" 30"),
        "the hook was quick: the grace is intact"
    );
}

#[tokio::test]
async fn a_volume_that_cannot_be_set_up_keeps_the_pod_creating_until_its_source_exists() {
    let mut h = harness();
    h.ctx.dns = Default::default();
    let mut pod = pod("Always", "IfNotPresent");
    let spec = pod.spec.as_mut().unwrap();
    spec.volumes = Some(vec![
        serde_json::from_value(json!({"name": "cfg", "configMap": {"name": "settings"}})).unwrap(),
        serde_json::from_value(json!({"name": "mem", "emptyDir": {"medium": "Memory"}})).unwrap(),
    ]);
    assert_eq!(
        h.sync(&mut pod).await,
        Outcome::Resync(crate::volumes::FIRST_RETRY),
        "volumes are tried again soon"
    );
    assert_eq!(h.count("RunPodSandbox"), 0);
    assert_eq!(
        waiting_reason(&h.status()).as_deref(),
        Some("ContainerCreating")
    );
    assert_eq!(
        h.api.event_messages("FailedMount"),
        ["MountVolume.SetUp failed for volume \"cfg\" : configmap \"settings\" not found"]
    );

    h.api.config_maps.lock().insert(
        "settings".into(),
        std::collections::BTreeMap::from([("k".to_string(), "v".to_string())]),
    );
    h.runtime.advance(crate::volumes::RETRY);
    h.sync(&mut pod).await;
    assert_eq!(h.count("CreateContainer"), 1);
    assert_eq!(h.status().phase.as_deref(), Some("Running"));
    // ClusterFirst without --cluster-dns falls back to the host, with upstream's warning
    assert!(
        h.api
            .event_reasons()
            .iter()
            .any(|r| r == "MissingClusterDNS")
    );

    // deleting the pod tears its volumes down
    h.ctx.kill_pod(&pod, 0).await.unwrap();
    let pod_dir = h.ctx.volumes.pod_dir("u1");
    assert!(!pod_dir.exists());
    assert!(h.host.mounted.lock().is_empty());
}

#[tokio::test]
async fn the_sandbox_gets_the_group_of_the_persistent_volume_the_pod_mounts() {
    let mut h = harness();
    h.ctx.dns = Default::default();
    h.host.files.lock().insert(
        "/srv/data".into(),
        crate::volumes::host::FileKind::Directory,
    );
    h.api.claims.lock().insert(
        "data".into(),
        serde_json::from_value(json!({
            "metadata": {"name": "data", "namespace": "default", "uid": "claim-uid"},
            "spec": {"volumeName": "pv-1"}, "status": {"phase": "Bound"}}))
        .unwrap(),
    );
    h.api.volumes.lock().insert(
        "pv-1".into(),
        serde_json::from_value(json!({
            "metadata": {"name": "pv-1", "annotations": {"pv.beta.kubernetes.io/gid": "3000"}},
            "spec": {"claimRef": {"uid": "claim-uid"}, "hostPath": {"path": "/srv/data"}}}))
        .unwrap(),
    );
    let mut pod = pod("Always", "IfNotPresent");
    let spec = pod.spec.as_mut().unwrap();
    spec.security_context = Some(serde_json::from_value(json!({"fsGroup": 10})).unwrap());
    spec.volumes = Some(vec![
        serde_json::from_value(json!({"name": "data",
                                      "persistentVolumeClaim": {"claimName": "data"}}))
        .unwrap(),
    ]);
    h.sync(&mut pod).await;
    assert_eq!(h.count("StartContainer"), 1);
    let sandbox = &h.runtime.sandbox_configs()[0];
    let sc = sandbox.linux.as_ref().unwrap().security_context.as_ref();
    assert_eq!(sc.unwrap().supplemental_groups, [10, 3000]);
}

#[tokio::test]
async fn a_new_sandbox_is_numbered_after_the_newest_once_older_ones_are_collected() {
    let h = harness();
    let mut pod = pod("Always", "IfNotPresent");
    let sandbox_attempts = || async {
        let mut sandboxes = h
            .runtime
            .list_pod_sandboxes(uid_labels("u1"))
            .await
            .unwrap();
        sandboxes.sort_by_key(|s| s.created_at);
        sandboxes
            .into_iter()
            .map(|s| (s.id, s.metadata.unwrap().attempt))
            .collect::<Vec<_>>()
    };
    h.sync(&mut pod).await;
    let (first, _) = sandbox_attempts().await[0].clone();
    h.runtime.stop_pod_sandbox(&first).await.unwrap();
    h.sync(&mut pod).await;
    let (second, attempt) = sandbox_attempts().await[1].clone();
    assert_eq!(attempt, 1);
    // the garbage collection removes the old one; the runtime's names (with the attempt)
    // must not be used twice
    h.runtime.remove_pod_sandbox(&first).await.unwrap();
    h.runtime.stop_pod_sandbox(&second).await.unwrap();
    h.sync(&mut pod).await;
    let attempts: Vec<u32> = sandbox_attempts()
        .await
        .into_iter()
        .map(|(_, a)| a)
        .collect();
    assert_eq!(attempts, [1, 2]);
}

#[tokio::test]
async fn the_sandboxes_of_pods_the_first_list_did_not_have_are_orphans_once_each() {
    let h = harness();
    let mut known = pod("Always", "IfNotPresent");
    h.sync(&mut known).await;
    let mut gone = pod("Always", "IfNotPresent");
    gone.metadata.name = Some("gone".into());
    gone.metadata.uid = Some("u2".into());
    h.sync(&mut gone).await;
    // its sandbox died and was replaced: two sandboxes, one orphaned pod
    let first = h
        .runtime
        .list_pod_sandboxes(uid_labels("u2"))
        .await
        .unwrap();
    h.runtime.stop_pod_sandbox(&first[0].id).await.unwrap();
    h.sync(&mut gone).await;
    assert_eq!(
        h.runtime
            .list_pod_sandboxes(uid_labels("u2"))
            .await
            .unwrap()
            .len(),
        2
    );

    let listed = std::collections::HashSet::from(["u1".to_string()]);
    let orphans = crate::pod_workers::orphans(&h.ctx, &listed).await.unwrap();
    let found: Vec<_> = orphans
        .iter()
        .map(|p| {
            let m = &p.metadata;
            (m.uid.as_deref(), m.name.as_deref(), m.namespace.as_deref())
        })
        .collect();
    assert_eq!(found, [(Some("u2"), Some("gone"), Some("default"))]);
}

fn with_inits(mut pod: Pod, inits: serde_json::Value) -> Pod {
    pod.spec.as_mut().unwrap().init_containers = Some(serde_json::from_value(inits).unwrap());
    pod
}

#[tokio::test]
async fn a_pod_whose_sandbox_died_runs_its_init_containers_again_in_a_new_one() {
    let h = harness();
    let mut pod = with_inits(
        pod("Always", "IfNotPresent"),
        json!([{"name": "setup", "image": "busybox", "imagePullPolicy": "IfNotPresent"}]),
    );
    h.sync(&mut pod).await;
    h.runtime
        .exit_container(&h.runtime.containers_named("setup")[0], 0);
    h.sync(&mut pod).await;
    let app = h.runtime.containers_named("c")[0].clone();
    let first = h.runtime.sandbox_of(&app).unwrap();

    h.runtime.lose_sandbox(&first);
    h.sync(&mut pod).await;
    assert!(
        h.runtime
            .calls()
            .contains(&format!("StopContainer {app} 7")),
        "what ran in the dead sandbox is stopped, with the pod's grace"
    );
    let setups = h.runtime.containers_named("setup");
    assert_eq!(setups.len(), 2, "the init container runs again");
    let second = h.runtime.sandbox_of(&setups[1]).unwrap();
    assert_ne!(second, first);
    assert_eq!(h.runtime.containers_named("c").len(), 1, "the app waits");
    assert_eq!(
        waiting_reason(&h.status()).as_deref(),
        Some("PodInitializing")
    );

    h.runtime.exit_container(&setups[1], 0);
    h.sync(&mut pod).await;
    let apps = h.runtime.containers_named("c");
    assert_eq!(apps.len(), 2);
    assert_eq!(h.runtime.sandbox_of(&apps[1]), Some(second));
    assert_eq!(h.status().container_statuses.unwrap()[0].restart_count, 1);
}

#[tokio::test]
async fn a_never_pod_whose_sandbox_died_gets_no_second_one() {
    let h = harness();
    let mut pod = pod("Never", "IfNotPresent");
    h.sync(&mut pod).await;
    let app = h.runtime.containers_named("c")[0].clone();
    h.runtime.lose_sandbox(&h.runtime.sandbox_of(&app).unwrap());
    h.sync(&mut pod).await;
    h.sync(&mut pod).await;
    assert_eq!(h.count("RunPodSandbox"), 1);
    assert_eq!(h.runtime.containers_named("c").len(), 1);
    assert_eq!(h.status().phase.as_deref(), Some("Failed"));
}

#[tokio::test]
async fn pod_termination_stops_the_app_containers_then_the_sidecars_last_started_first() {
    let h = harness();
    let sidecar = |name: &str| {
        json!({"name": name, "image": "busybox", "imagePullPolicy": "IfNotPresent",
               "restartPolicy": "Always",
               "lifecycle": {"preStop": {"exec": {"command": ["bye", name]}}}})
    };
    let mut pod = with_inits(
        pod("Always", "IfNotPresent"),
        json!([sidecar("first"), sidecar("second")]),
    );
    h.sync(&mut pod).await;
    let id = |name: &str| h.runtime.containers_named(name)[0].clone();
    let (first, second, app) = (id("first"), id("second"), id("c"));

    pod.metadata.deletion_timestamp = Some(Time(jiff::Timestamp::UNIX_EPOCH));
    pod.metadata.deletion_grace_period_seconds = Some(7);
    assert_eq!(h.sync(&mut pod).await, Outcome::Done);
    let calls = h.runtime.calls();
    let pos = |call: &str| {
        calls
            .iter()
            .position(|c| c.starts_with(call))
            .unwrap_or_else(|| panic!("no {call} in {calls:#?}"))
    };
    // every preStop hook runs at once (the app's stop does not wait for them), each before
    // its own container's stop
    for (id, name) in [(&first, "first"), (&second, "second")] {
        assert!(pos(&format!("ExecSync {id} bye {name}")) < pos(&format!("StopContainer {id}")));
    }
    assert!(pos(&format!("StopContainer {app}")) < pos(&format!("StopContainer {second}")));
    assert!(pos(&format!("StopContainer {second}")) < pos(&format!("StopContainer {first}")));
}

#[tokio::test]
async fn a_failed_liveness_probe_runs_the_containers_pre_stop_hook_before_stopping_it() {
    let h = harness();
    let mut pod = pod("Always", "IfNotPresent");
    let c = &mut pod.spec.as_mut().unwrap().containers[0];
    c.liveness_probe = Some(
        serde_json::from_value(json!({"exec": {"command": ["alive"]}, "periodSeconds": 1,
                                      "failureThreshold": 1}))
        .unwrap(),
    );
    c.lifecycle =
        Some(serde_json::from_value(json!({"preStop": {"exec": {"command": ["drain"]}}})).unwrap());
    h.sync(&mut pod).await;
    let id = h.runtime.containers_named("c")[0].clone();
    h.runtime.set_exec_exit_code(1);
    h.runtime.advance(Duration::from_secs(1));
    h.sync(&mut pod).await;
    let calls = h.runtime.calls();
    let drain = calls
        .iter()
        .position(|c| c == &format!("ExecSync {id} drain"))
        .unwrap_or_else(|| panic!("no preStop hook in {calls:#?}"));
    let stop = calls
        .iter()
        .position(|c| c.starts_with(&format!("StopContainer {id}")))
        .unwrap();
    assert!(drain < stop, "{calls:#?}");
}

#[tokio::test]
async fn the_next_init_container_starts_once_the_sidecars_startup_probe_passed() {
    let h = harness();
    let mut pod = with_inits(
        pod("Always", "IfNotPresent"),
        json!([{"name": "side", "image": "busybox", "imagePullPolicy": "IfNotPresent",
                "restartPolicy": "Always",
                "startupProbe": {"exec": {"command": ["up"]}, "periodSeconds": 1}},
               {"name": "setup", "image": "busybox", "imagePullPolicy": "IfNotPresent"}]),
    );
    h.sync(&mut pod).await;
    assert_eq!(h.runtime.containers_named("side").len(), 1);
    assert!(
        h.runtime.containers_named("setup").is_empty(),
        "the sidecar runs but has not passed its startup probe"
    );
    h.runtime.advance(Duration::from_secs(1));
    assert_eq!(
        h.sync(&mut pod).await,
        Outcome::Resync(MIN_RESYNC),
        "the probe passed: the next init container is due at once"
    );
    assert!(h.runtime.containers_named("setup").is_empty());
    h.sync(&mut pod).await;
    assert_eq!(h.runtime.containers_named("setup").len(), 1);
}

#[tokio::test]
async fn a_terminated_pod_fails_with_its_reason_within_its_grace_and_is_not_restarted() {
    let h = harness();
    let mut pod = pod("Always", "IfNotPresent");
    h.sync(&mut pod).await;
    let id = h.runtime.containers_named("c")[0].clone();
    let termination = crate::eviction::Termination {
        reason: "Evicted".into(),
        message: "The node was low on resource: memory. ".into(),
        condition: Some(k8s_openapi::api::core::v1::PodCondition {
            type_: "DisruptionTarget".into(),
            status: "True".into(),
            reason: Some("TerminationByKubelet".into()),
            ..Default::default()
        }),
        grace_seconds: 1,
    };
    let status = h.ctx.terminate(&pod, &termination).await;
    assert_eq!(h.status(), status);
    assert_eq!(
        (status.phase.as_deref(), status.reason.as_deref()),
        (Some("Failed"), Some("Evicted"))
    );
    let disruption = status.conditions.iter().flatten().last().unwrap();
    assert_eq!(disruption.type_, "DisruptionTarget");
    assert!(disruption.last_transition_time.is_some());
    assert!(h.runtime.calls().contains(&format!("StopContainer {id} 1")));

    // the next sync (of the pod as its worker keeps it) finishes the pod: its sandbox
    // stopped, nothing restarted
    pod.status = Some(status);
    let created = h.count("CreateContainer");
    assert_eq!(h.sync(&mut pod).await, Outcome::Finished);
    assert_eq!(h.count("CreateContainer"), created);
    assert_eq!(h.count("StopPodSandbox"), 1);
    let after = h.status();
    assert_eq!(after.reason.as_deref(), Some("Evicted"));
    assert_eq!(
        after.message.as_deref(),
        Some("The node was low on resource: memory. ")
    );
}

#[path = "pod_resize_tests.rs"]
mod resize;

/// The pod with ephemeral containers `(name, target)` added, as `kubectl debug` adds them.
fn with_debuggers(mut pod: Pod, debuggers: &[(&str, &str)]) -> Pod {
    let containers = debuggers
        .iter()
        .map(|(name, target)| {
            json!({"name": name, "image": "busybox", "targetContainerName": target,
                   "stdin": true, "tty": true})
        })
        .collect::<Vec<_>>();
    pod.spec.as_mut().unwrap().ephemeral_containers =
        Some(serde_json::from_value(json!(containers)).unwrap());
    pod
}

#[tokio::test]
async fn an_ephemeral_container_joins_its_targets_process_namespace_and_is_never_restarted() {
    let h = harness();
    let mut pod = pod("Always", "IfNotPresent");
    h.sync(&mut pod).await;
    let target = h.runtime.containers_named("c")[0].clone();

    let mut pod = with_debuggers(pod, &[("debugger", "c")]);
    h.sync(&mut pod).await;
    let debugger = h.runtime.containers_named("debugger");
    assert_eq!(debugger.len(), 1);
    let config = h.runtime.container_config(&debugger[0]).unwrap();
    assert!(config.stdin && config.tty);
    let namespaces = config
        .linux
        .and_then(|l| l.security_context)
        .and_then(|s| s.namespace_options)
        .unwrap();
    assert_eq!(
        (namespaces.pid, namespaces.target_id.as_str()),
        (k8s_cri::v1::NamespaceMode::Target as i32, target.as_str())
    );
    let status = h.status();
    let ephemeral = &status.ephemeral_container_statuses.as_ref().unwrap()[0];
    assert_eq!(ephemeral.name, "debugger");
    assert!(ephemeral.state.as_ref().unwrap().running.is_some());
    assert!(!ephemeral.ready);
    assert_eq!(status.phase.as_deref(), Some("Running"));
    assert!(
        h.api
            .event_messages("Started")
            .contains(&"Started container debugger".to_string())
    );

    // it exits with a failure under restartPolicy Always: it stays exited
    h.runtime.exit_container(&debugger[0], 1);
    h.runtime.advance(Duration::from_secs(60));
    h.sync(&mut pod).await;
    h.sync(&mut pod).await;
    assert_eq!(h.runtime.containers_named("debugger"), debugger);
    let ephemeral = &h.status().ephemeral_container_statuses.unwrap()[0];
    let exited = ephemeral.state.as_ref().unwrap().terminated.as_ref();
    assert_eq!(exited.map(|t| t.exit_code), Some(1));
}

#[tokio::test]
async fn an_ephemeral_container_whose_target_never_ran_waits_with_upstreams_error() {
    let h = harness();
    let mut pod = pod("Always", "IfNotPresent");
    // an init container that runs on: `c` has not run yet
    pod.spec.as_mut().unwrap().init_containers = Some(vec![
        serde_json::from_value(json!({"name": "setup", "image": "busybox"})).unwrap(),
    ]);
    let mut pod = with_debuggers(pod, &[("debugger", "c")]);
    h.sync(&mut pod).await;
    assert!(h.runtime.containers_named("debugger").is_empty());
    let status = h.status();
    let waiting = status.ephemeral_container_statuses.unwrap()[0]
        .state
        .clone()
        .unwrap()
        .waiting
        .unwrap();
    assert_eq!(
        (waiting.reason.as_deref(), waiting.message.as_deref()),
        (
            Some("CreateContainerConfigError"),
            Some("unable to find target container c")
        )
    );
    assert_eq!(
        h.api.event_messages("Failed"),
        ["Error: unable to find target container c"]
    );
}

#[tokio::test]
async fn a_container_with_volume_devices_waits_with_a_config_error_rather_than_running_without_them()
 {
    let h = harness();
    let mut pod = pod("Always", "IfNotPresent");
    pod.spec.as_mut().unwrap().containers[0].volume_devices = Some(vec![
        serde_json::from_value(json!({"name": "raw", "devicePath": "/dev/xvda"})).unwrap(),
    ]);
    h.sync(&mut pod).await;
    assert!(h.runtime.containers_named("c").is_empty());
    assert_eq!(
        waiting_reason(&h.status()).as_deref(),
        Some("CreateContainerConfigError")
    );
    assert_eq!(
        h.api.event_messages("Failed"),
        ["Error: skiff does not support block volumes (volumeDevices \"raw\")"]
    );
}
