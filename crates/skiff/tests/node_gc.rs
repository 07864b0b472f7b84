//! The kubelet's housekeeping against the real containerd it manages, with one kubelet whose
//! periods are shortened (`--image-gc-period`, `--container-gc-period`, and upstream's
//! `containerLogMonitorInterval` at its minimum): a container's log rotated at 1Ki keeps
//! `kubectl logs -f` streaming across rotations with no line lost, and `kubectl logs` reads the
//! rotated files before the live one; image garbage collection removes an unused image and
//! keeps the one a pod uses and the built-in ones, reporting `FreeDiskSpaceFailed` on the Node
//! when it cannot reach the low threshold; the container garbage collection removes a
//! crash-looping container's oldest run (with its log) while `kubectl logs --previous` keeps
//! working. Needs root (containerd, CNI); skips otherwise.

mod support;

use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::PostParams;
use serde_json::json;
use support::node::{KubeletProcess, unsupported};
use support::{ApiServer, Backend, HANG_GUARD, KUBECTL_133, eventually, kube_client, run};

const NODE: &str = "nodegc-e2e";
const USED_IMAGE: &str = "localhost/gc-used:1";
const UNUSED_IMAGE: &str = "localhost/gc-unused:1";

/// `KubeletConfiguration`: logs checked every 3 s (upstream's minimum); images collected at
/// any disk usage once 10 s old (time for the pod using one to start).
const CONFIG: &str = "apiVersion: kubelet.config.k8s.io/v1beta1\n\
kind: KubeletConfiguration\n\
containerLogMonitorInterval: 3s\n\
imageGCHighThresholdPercent: 1\n\
imageGCLowThresholdPercent: 0\n\
imageMinimumGCAge: 10s\n";

async fn create(pods: &Api<Pod>, pod: serde_json::Value) {
    pods.create(
        &PostParams::default(),
        &serde_json::from_value(pod).unwrap(),
    )
    .await
    .expect("create pod");
}

/// Two images of their own (distinct ids) over the built-in busybox layer, imported into the
/// kubelet's containerd.
fn import_test_images(kubelet: &KubeletProcess, dir: &Path) {
    let busybox = Path::new("/bin/busybox");
    let applets = skiff_kubelet::images::applets(busybox).expect("busybox applets");
    let image = |name: &str, cmd: &[&str]| skiff_kubelet::images::ImageConfig {
        name: name.into(),
        cmd: cmd.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    };
    // their commands differ, so their ids do
    let images = [
        image(USED_IMAGE, &["sh"]),
        image(UNUSED_IMAGE, &["sh", "-c", "true"]),
    ];
    let archive =
        skiff_kubelet::images::build_images(busybox, &applets, &images).expect("build the images");
    let path = dir.join("gc-images.tar");
    std::fs::write(&path, archive).expect("write the archive");
    kubelet.ctr(&["images", "import", path.to_str().unwrap()]);
    let images = kubelet.ctr(&["images", "ls", "-q"]);
    assert!(
        images.contains(USED_IMAGE) && images.contains(UNUSED_IMAGE),
        "{images}"
    );
}

/// The numbers of `line N …` lines (as kubectl prints them, or in a CRI log file), in order.
fn line_numbers(text: &str) -> Vec<u64> {
    text.lines()
        .filter_map(|l| l.split("line ").nth(1)?.split(' ').next()?.parse().ok())
        .collect()
}

/// The container's log directory of a pod of this kubelet.
async fn log_dir(kubelet: &KubeletProcess, pods: &Api<Pod>, pod: &str, container: &str) -> PathBuf {
    let uid = pods.get(pod).await.unwrap().metadata.uid.unwrap();
    kubelet
        .data()
        .join(format!("logs/pods/default_{pod}_{uid}/{container}"))
}

/// The newest uncompressed rotated file in a container's log directory.
fn newest_rotated(dir: &Path) -> Option<PathBuf> {
    let mut rotated: Vec<PathBuf> = std::fs::read_dir(dir)
        .ok()?
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            let name = p.file_name().unwrap().to_string_lossy();
            name.starts_with("0.log.") && !name.ends_with(".gz")
        })
        .collect();
    rotated.sort();
    rotated.pop()
}

#[test]
fn logs_rotate_under_a_follow_unused_images_go_and_previous_logs_outlive_container_gc() {
    if let Some(why) = unsupported() {
        support::skip(&why);
        return;
    }
    let api = ApiServer::start(Backend::Embedded);
    let scratch = tempfile::tempdir().expect("temp dir");
    let config = scratch.path().join("kubelet-config.yaml");
    std::fs::write(&config, CONFIG).expect("write the config");
    let kubelet = KubeletProcess::start_with(
        &api,
        NODE,
        &[
            "--config",
            config.to_str().unwrap(),
            "--container-log-max-size",
            "1Ki",
            "--container-log-max-files",
            "3",
            "--image-gc-period",
            "2s",
            "--container-gc-period",
            "2s",
        ],
    );
    import_test_images(&kubelet, scratch.path());
    run(async {
        let pods: Api<Pod> = Api::namespaced(kube_client(&api).await, "default");
        // about 100 bytes ten times a second: a rotation at each check
        let chatty = "i=0; while true; do i=$((i+1)); \
                      echo \"line $i $(printf '%090d' 0)\"; sleep 0.1; done";
        let crasher = "n=$(cat /data/n 2>/dev/null || echo 0); n=$((n+1)); echo $n > /data/n; \
                       echo run $n; sleep 1; exit 1";
        for (name, image, script, restart) in [
            ("chatty", "busybox", chatty, "Always"),
            ("crasher", "busybox", crasher, "Always"),
            (
                "user",
                USED_IMAGE,
                "trap 'exit 0' TERM; sleep 3600 & wait",
                "Always",
            ),
        ] {
            create(
                &pods,
                json!({
                    "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
                    "spec": {"nodeName": NODE, "restartPolicy": restart,
                             "terminationGracePeriodSeconds": 1,
                             "volumes": [{"name": "data", "emptyDir": {}}],
                             "containers": [{"name": "c", "image": image,
                                             "imagePullPolicy": "Never",
                                             "command": ["sh", "-c", script],
                                             "volumeMounts": [{"name": "data",
                                                               "mountPath": "/data"}]}]},
                }),
            )
            .await;
        }
        for name in ["chatty", "user"] {
            eventually(&format!("{name} running"), || {
                support::node::in_phase(&pods, name, "Running")
            })
            .await;
        }

        // log rotation under a follow
        let (mut follow, lines) = api.kubectl_stream(KUBECTL_133, &["logs", "-f", "chatty"]);
        let dir = log_dir(&kubelet, &pods, "chatty", "c").await;
        let rotated = eventually("a rotated log", || async { newest_rotated(&dir) }).await;
        let before = *line_numbers(&std::fs::read_to_string(&rotated).unwrap())
            .last()
            .expect("lines in the rotated log");
        let mut followed = Vec::new();
        let deadline = std::time::Instant::now() + HANG_GUARD;
        while followed.last().is_none_or(|n| *n <= before + 20) {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            let line = lines
                .recv_timeout(left)
                .expect("kubectl logs -f goes on after the rotation");
            followed.extend(line_numbers(&line));
        }
        let _ = follow.kill();
        let _ = follow.wait();
        assert!(
            followed.windows(2).all(|w| w[1] == w[0] + 1),
            "no line lost or repeated across the rotation: {followed:?}"
        );

        let tail = line_numbers(&api.kubectl(KUBECTL_133, &["logs", "chatty", "--tail", "5"]));
        assert_eq!(tail.len(), 5, "{tail:?}");
        assert!(tail.windows(2).all(|w| w[1] == w[0] + 1), "{tail:?}");
        assert!(tail[4] > before + 20, "{tail:?}");
        let all = line_numbers(&api.kubectl(KUBECTL_133, &["logs", "chatty"]));
        assert!(
            all.windows(2).all(|w| w[1] > w[0]),
            "rotated files first, in order: {all:?}"
        );
        assert!(
            all[0] <= before && *all.last().unwrap() >= tail[4],
            "the rotated files are read too: {all:?}"
        );
        let files = std::fs::read_dir(&dir)
            .unwrap()
            .flatten()
            .filter(|e| !e.file_name().to_string_lossy().ends_with(".tmp"))
            .count();
        assert!(files <= 3, "containerLogMaxFiles: {files} files");

        // image garbage collection
        let images = eventually("the unused image removed", || async {
            let images = kubelet.ctr(&["images", "ls", "-q"]);
            (!images.contains(UNUSED_IMAGE)).then_some(images)
        })
        .await;
        for kept in [
            USED_IMAGE,
            "docker.io/library/busybox:latest",
            "localhost/pause:3.9",
        ] {
            assert!(images.contains(kept), "{kept} kept: {images}");
        }
        let message = api.first_event_message(NODE, "FreeDiskSpaceFailed").await;
        assert!(
            message.starts_with(
                "Failed to garbage collect required amount of images. Attempted to free "
            ),
            "{message}"
        );

        // container garbage collection under a crash loop
        let crasher_logs = log_dir(&kubelet, &pods, "crasher", "c").await;
        eventually("the crasher's first run collected", || async {
            let restarts =
                pods.get("crasher").await.ok()?.status?.container_statuses?[0].restart_count;
            (restarts >= 2 && !crasher_logs.join("0.log").exists()).then_some(())
        })
        .await;
        let previous = eventually("kubectl logs --previous", || async {
            let out = api.kubectl_output(KUBECTL_133, &["logs", "crasher", "--previous"], None);
            out.status
                .success()
                .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
        })
        .await;
        let run: u64 = previous
            .trim()
            .strip_prefix("run ")
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{previous:?}"));
        assert!(run >= 2, "a run after the collected one: {previous:?}");
    });
}
