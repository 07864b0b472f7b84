use super::*;
use crate::config::LABEL_CONTAINER_NAME;
use crate::cri::{ContainerConfig, ContainerMetadata, PodSandboxConfig, PodSandboxMetadata};
use crate::fake::FakeRuntime;
use parking_lot::Mutex;

struct Setup {
    runtime: Arc<FakeRuntime>,
    /// The pods the kubelet knows; `None` before its first list.
    known: Arc<Mutex<Option<HashSet<String>>>>,
    gc: ContainerGc,
    logs: tempfile::TempDir,
}

fn setup(policy: ContainerGcPolicy) -> Setup {
    let runtime = Arc::new(FakeRuntime::new());
    let known = Arc::new(Mutex::new(None));
    let logs = tempfile::tempdir().unwrap();
    let (pods, clock) = (known.clone(), runtime.clone());
    let gc = ContainerGc::new(
        runtime.clone(),
        policy,
        Some(logs.path().to_path_buf()),
        Arc::new(move || pods.lock().clone()),
        Arc::new(move || clock.now()),
    );
    Setup {
        runtime,
        known,
        gc,
        logs,
    }
}

impl Setup {
    fn knows(&self, uids: &[&str]) {
        *self.known.lock() = Some(uids.iter().map(|u| u.to_string()).collect());
    }

    fn pod_log_dir(&self, uid: &str) -> PathBuf {
        self.logs.path().join(format!("ns_pod-{uid}_{uid}"))
    }

    /// A sandbox of pod `uid` (attempt `attempt`), logging under the pod's log directory.
    async fn sandbox(&self, uid: &str, attempt: u32) -> (String, PodSandboxConfig) {
        let config = PodSandboxConfig {
            metadata: Some(PodSandboxMetadata {
                name: format!("pod-{uid}"),
                uid: uid.into(),
                namespace: "ns".into(),
                attempt,
            }),
            labels: HashMap::from([(LABEL_POD_UID.to_string(), uid.to_string())]),
            log_directory: self.pod_log_dir(uid).display().to_string(),
            ..Default::default()
        };
        let id = self
            .runtime
            .run_pod_sandbox(config.clone(), "")
            .await
            .unwrap();
        (id, config)
    }

    /// A container `name` (attempt `attempt`) in the sandbox, started, with a log file and a
    /// rotated one; exited unless `running`.
    async fn container(
        &self,
        (sandbox_id, sandbox): &(String, PodSandboxConfig),
        name: &str,
        attempt: u32,
        running: bool,
    ) -> String {
        let mut labels = sandbox.labels.clone();
        labels.insert(LABEL_CONTAINER_NAME.into(), name.into());
        let config = ContainerConfig {
            metadata: Some(ContainerMetadata {
                name: name.into(),
                attempt,
            }),
            labels,
            log_path: format!("{name}/{attempt}.log"),
            ..Default::default()
        };
        let id = self
            .runtime
            .create_container(sandbox_id, config, sandbox.clone())
            .await
            .unwrap();
        self.runtime.start_container(&id).await.unwrap();
        if !running {
            self.runtime.exit_container(&id, 1);
        }
        let log = Path::new(&sandbox.log_directory).join(format!("{name}/{attempt}.log"));
        std::fs::create_dir_all(log.parent().unwrap()).unwrap();
        std::fs::write(&log, "").unwrap();
        std::fs::write(log.with_extension("log.20240101-000000.gz"), "").unwrap();
        id
    }

    fn log_files(&self, uid: &str, name: &str) -> Vec<String> {
        let mut files: Vec<String> = std::fs::read_dir(self.pod_log_dir(uid).join(name))
            .map(|d| {
                d.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        files.sort();
        files
    }

    async fn sandbox_ids(&self) -> Vec<String> {
        let mut ids: Vec<String> = self
            .runtime
            .list_pod_sandboxes(HashMap::new())
            .await
            .unwrap()
            .into_iter()
            .map(|s| s.id)
            .collect();
        ids.sort();
        ids
    }
}

#[tokio::test]
async fn the_newest_dead_container_of_each_container_is_kept_with_its_logs_and_running_ones_stay() {
    let s = setup(ContainerGcPolicy::default());
    s.knows(&["a"]);
    let sandbox = s.sandbox("a", 0).await;
    let mut c = Vec::new();
    for attempt in 0..3 {
        c.push(s.container(&sandbox, "c", attempt, false).await);
    }
    let running = s.container(&sandbox, "c", 3, true).await;
    let d = s.container(&sandbox, "d", 0, false).await;
    s.gc.garbage_collect().await.unwrap();
    assert_eq!(s.runtime.containers_named("c"), [c[2].clone(), running]);
    assert_eq!(s.runtime.containers_named("d"), [d]);
    assert_eq!(
        s.log_files("a", "c"),
        [
            "2.log",
            "2.log.20240101-000000.gz",
            "3.log",
            "3.log.20240101-000000.gz"
        ],
        "the removed containers' logs, rotated ones too, are gone"
    );
    assert_eq!(s.sandbox_ids().await, [sandbox.0], "the pod's only sandbox");
}

#[tokio::test]
async fn a_deleted_pods_containers_sandboxes_and_logs_go_once_the_pods_are_listed() {
    let s = setup(ContainerGcPolicy::default());
    let kept = s.sandbox("a", 0).await;
    s.container(&kept, "c", 0, true).await;
    let gone = s.sandbox("gone", 0).await;
    let dead = s.container(&gone, "c", 0, false).await;
    s.runtime.stop_pod_sandbox(&gone.0).await.unwrap();

    s.gc.garbage_collect().await.unwrap();
    assert!(
        s.runtime.calls().iter().all(|c| !c.starts_with("Remove")),
        "nothing is gone before the first list"
    );
    assert!(s.pod_log_dir("gone").exists());

    s.knows(&["a"]);
    s.gc.garbage_collect().await.unwrap();
    assert!(s.runtime.container_status(&dead).await.is_err());
    assert_eq!(s.sandbox_ids().await, [kept.0]);
    assert!(!s.pod_log_dir("gone").exists());
    assert!(s.pod_log_dir("a").exists());
}

#[tokio::test]
async fn a_pods_older_dead_sandboxes_go_and_its_newest_and_those_with_containers_stay() {
    let s = setup(ContainerGcPolicy::default());
    s.knows(&["a"]);
    let mut ids = Vec::new();
    for attempt in 0..4 {
        let sandbox = s.sandbox("a", attempt).await;
        if attempt == 1 {
            s.container(&sandbox, "c", 0, false).await;
        }
        s.runtime.stop_pod_sandbox(&sandbox.0).await.unwrap();
        ids.push(sandbox.0);
    }
    s.gc.garbage_collect().await.unwrap();
    let mut kept = vec![ids[1].clone(), ids[3].clone()];
    kept.sort();
    assert_eq!(s.sandbox_ids().await, kept);
}

#[tokio::test]
async fn young_dead_containers_stay_and_the_node_keeps_at_most_max_containers() {
    let s = setup(ContainerGcPolicy {
        min_age: Duration::from_secs(60),
        max_per_pod_container: -1,
        max_containers: 2,
    });
    s.knows(&["a"]);
    let sandbox = s.sandbox("a", 0).await;
    let old: Vec<String> =
        futures::future::join_all((0..2).map(|attempt| s.container(&sandbox, "c", attempt, false)))
            .await;
    let other = s.container(&sandbox, "d", 0, false).await;
    s.gc.garbage_collect().await.unwrap();
    assert_eq!(s.runtime.containers_named("c").len(), 2, "all too young");

    s.runtime.advance(Duration::from_secs(120));
    s.container(&sandbox, "c", 2, false).await;
    s.gc.garbage_collect().await.unwrap();
    let mut left = s.runtime.containers_named("c");
    left.extend(s.runtime.containers_named("d"));
    assert_eq!(
        left.len(),
        3,
        "two old ones kept (one per container), the young one too: {left:?}"
    );
    assert!(!left.contains(&old[0]) && left.contains(&old[1]) && left.contains(&other));
}

#[tokio::test]
async fn removing_a_pod_removes_its_containers_logs_and_sandboxes_and_nothing_else() {
    let s = setup(ContainerGcPolicy::default());
    let a = s.sandbox("a", 0).await;
    s.container(&a, "c", 0, false).await;
    let b = s.sandbox("b", 0).await;
    let other = s.container(&b, "c", 0, true).await;
    remove_pod(s.runtime.as_ref(), "a", &s.pod_log_dir("a"))
        .await
        .unwrap();
    assert_eq!(s.runtime.containers_named("c"), [other]);
    assert_eq!(s.sandbox_ids().await, [b.0]);
    assert!(!s.pod_log_dir("a").exists());
    let calls = s.runtime.calls();
    let pos = |m: &str| calls.iter().position(|c| c.starts_with(m)).unwrap();
    assert!(pos("RemoveContainer") < pos("StopPodSandbox"));
    assert!(pos("StopPodSandbox") < pos("RemovePodSandbox"));
}
