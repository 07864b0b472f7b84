use super::*;
use crate::cri::{ContainerConfig, ContainerMetadata, PodSandboxConfig};
use crate::fake::FakeRuntime;
use parking_lot::Mutex;

struct Setup {
    runtime: Arc<FakeRuntime>,
    now: Arc<Mutex<Timestamp>>,
    rotation: LogRotation,
    dir: tempfile::TempDir,
}

fn setup(max_files: usize) -> Setup {
    let runtime = Arc::new(FakeRuntime::new());
    let now = Arc::new(Mutex::new("2024-01-02T03:04:05Z".parse().unwrap()));
    let clock = now.clone();
    let rotation = LogRotation::new(
        runtime.clone(),
        LogRotatePolicy {
            max_size: 1024,
            max_files,
        },
        Arc::new(move || *clock.lock()),
    );
    Setup {
        runtime,
        now,
        rotation,
        dir: tempfile::tempdir().unwrap(),
    }
}

impl Setup {
    /// A running container logging to `<dir>/c/0.log`; its id and log path.
    async fn container(&self) -> (String, PathBuf) {
        let sandbox = PodSandboxConfig {
            log_directory: self.dir.path().display().to_string(),
            ..Default::default()
        };
        let sandbox_id = self
            .runtime
            .run_pod_sandbox(sandbox.clone(), "")
            .await
            .unwrap();
        let config = ContainerConfig {
            metadata: Some(ContainerMetadata {
                name: "c".into(),
                attempt: 0,
            }),
            log_path: "c/0.log".into(),
            ..Default::default()
        };
        let id = self
            .runtime
            .create_container(&sandbox_id, config, sandbox)
            .await
            .unwrap();
        self.runtime.start_container(&id).await.unwrap();
        let log = self.dir.path().join("c/0.log");
        std::fs::create_dir_all(log.parent().unwrap()).unwrap();
        std::fs::write(&log, "").unwrap();
        (id, log)
    }

    fn later(&self, by: Duration) {
        let mut now = self.now.lock();
        *now += by;
    }

    /// The names of the files in the container's log directory, sorted.
    fn files(&self) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(self.dir.path().join("c"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }
}

fn line(text: &str) -> String {
    format!("2024-01-02T03:04:05Z stdout F {text}\n")
}

fn append(log: &Path, text: &str) {
    let mut f = std::fs::OpenOptions::new().append(true).open(log).unwrap();
    f.write_all(text.as_bytes()).unwrap();
}

#[tokio::test]
async fn a_log_at_its_maximum_size_is_renamed_reopened_compressed_later_and_pruned_to_max_files() {
    let s = setup(3);
    let (id, log) = s.container().await;
    append(&log, &line("small"));
    s.rotation.rotate_logs().await;
    assert_eq!(s.files(), ["0.log"], "below containerLogMaxSize");

    append(&log, &line(&"a".repeat(1024)));
    s.rotation.rotate_logs().await;
    assert_eq!(s.files(), ["0.log", "0.log.20240102-030405"]);
    assert!(
        s.runtime
            .calls()
            .contains(&format!("ReopenContainerLog {id}"))
    );
    assert_eq!(std::fs::read(&log).unwrap(), b"", "the runtime's new file");

    s.later(Duration::from_secs(60));
    append(&log, &line(&"b".repeat(1024)));
    s.rotation.rotate_logs().await;
    assert_eq!(
        s.files(),
        ["0.log", "0.log.20240102-030405.gz", "0.log.20240102-030505"],
        "the older rotated file is compressed, the newest is not"
    );

    s.later(Duration::from_secs(60));
    append(&log, &line("c"));
    append(&log, &line(&"c".repeat(1024)));
    s.rotation.rotate_logs().await;
    assert_eq!(
        s.files(),
        ["0.log", "0.log.20240102-030505.gz", "0.log.20240102-030605"],
        "three files at most: the oldest is gone"
    );
    let all = all_logs(&log).unwrap();
    let text: Vec<u8> = all.iter().flat_map(|f| read_log_file(f).unwrap()).collect();
    let text = String::from_utf8(text).unwrap();
    assert!(text.starts_with(&line(&"b".repeat(1024))), "{text}");
    assert!(text.ends_with(&line(&"c".repeat(1024))), "{text}");
}

#[tokio::test]
async fn a_log_the_runtime_cannot_reopen_is_renamed_back_and_stopped_containers_are_left_alone() {
    let s = setup(5);
    let (id, log) = s.container().await;
    append(&log, &line(&"a".repeat(1024)));
    s.runtime.fail("ReopenContainerLog", tonic::Code::Internal);
    s.rotation.rotate_logs().await;
    assert_eq!(s.files(), ["0.log"]);
    assert!(std::fs::read(&log).unwrap().len() > 1024);

    s.runtime.exit_container(&id, 0);
    let calls = s.runtime.calls().len();
    s.rotation.rotate_logs().await;
    assert_eq!(s.files(), ["0.log"]);
    assert_eq!(
        s.runtime.calls()[calls..],
        ["ListContainers"],
        "a stopped container is not looked at"
    );
}

#[tokio::test]
async fn a_missing_log_is_reopened() {
    let s = setup(5);
    let (id, log) = s.container().await;
    std::fs::remove_file(&log).unwrap();
    s.rotation.rotate_logs().await;
    assert!(log.exists());
    assert!(
        s.runtime
            .calls()
            .contains(&format!("ReopenContainerLog {id}"))
    );
}

#[test]
fn leftovers_of_an_interrupted_compression_are_not_logs_and_removing_a_log_removes_its_files() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("1.log");
    for name in [
        "1.log",
        "1.log.20240101-000000.gz",
        "1.log.20240101-000100",
        "1.log.20240101-000100.gz",
        "1.log.20240101-000200.gz.tmp",
        "1.log.20240101-000300",
        "11.log",
    ] {
        std::fs::write(dir.path().join(name), name).unwrap();
    }
    let names = |files: Vec<PathBuf>| -> Vec<String> {
        files
            .iter()
            .map(|f| f.file_name().unwrap().to_string_lossy().into_owned())
            .collect()
    };
    assert_eq!(
        names(all_logs(&log).unwrap()),
        [
            "1.log.20240101-000000.gz",
            "1.log.20240101-000100.gz",
            "1.log.20240101-000300",
            "1.log"
        ]
    );
    remove_logs(&log).unwrap();
    let left: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(left, ["11.log"]);
    remove_logs(&log).unwrap();
}

#[test]
fn compressed_logs_read_back_as_written() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("0.log.20240101-000000");
    std::fs::write(&log, line("hello")).unwrap();
    compress(&log).unwrap();
    assert!(!log.exists());
    let gz = with_suffix(&log, COMPRESS_SUFFIX);
    assert_ne!(std::fs::read(&gz).unwrap(), line("hello").into_bytes());
    assert_eq!(read_log_file(&gz).unwrap(), line("hello").into_bytes());
}
