//! Skiff's local-path volumes end to end: a real `skiff apiserver`, `skiff controller-manager`
//! (the PersistentVolume binder, the local-path provisioner, the protection controllers) and a
//! `skiff kubelet` with its managed containerd. A claim of the default class `local-path`
//! (as `skiff server` applies it) placed on the node (its `selected-node` annotation set here,
//! as the scheduler's volume binding sets it: no scheduler runs, the pods name their node; see
//! `volume_binding.rs` for the scheduler's part) gets a volume under the directory the
//! kubelet publishes; a pod writes to it (a subPath too), and once that pod is deleted a second
//! pod, mounting the claim read-only, reads the data and cannot write; deleting the claim
//! removes the volume's directory and then the volume. A pod whose claim does not exist waits
//! with upstream's message in a FailedMount event. Needs root (containerd, CNI): skips
//! otherwise, and fails instead under `CI=true`.
//!
//! On the same kind of cluster: a pod with `fsGroup: 2000` finds its emptyDir, configMap and
//! `local` persistent volume given group 2000 (and its processes in that group), and its
//! local-path volume (a hostPath volume, which upstream never changes) left as it is; a pod
//! whose persistent volume's directory cannot be created (a hostPath `DirectoryOrCreate` below
//! a regular file) stays ContainerCreating with a FailedMount event naming the file in the
//! way, while another pod with a good claim on the node runs, and starts once the file is
//! gone.
//!
//! A second test starts `skiff server --disable-agent` (no root needed): it applies the default
//! class `local-path`, puts it back on its next start after a user deleted it (as k3s re-applies
//! its packaged manifests), and applies none with `--disable local-storage`.

mod support;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command};

use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams};
use serde_json::json;
use skiff_controllers::localpath::{CLASS, PROVISIONER};
use support::cluster::{controller_manager, local_path_class};
use support::node::{KubeletProcess, finished, in_phase, unsupported};
use support::{ApiServer, Backend, KUBECTL_133, create, eventually, kube_client, run};

const NODE: &str = "local-path-e2e";

fn pod(name: &str, read_only: bool, script: &str) -> serde_json::Value {
    json!({
        "metadata": {"name": name},
        "spec": {
            "nodeName": NODE, "restartPolicy": "Never", "automountServiceAccountToken": false,
            "volumes": [{"name": "data",
                         "persistentVolumeClaim": {"claimName": "data", "readOnly": read_only}}],
            "containers": [{"name": "c", "image": "busybox", "command": ["sh", "-c", script],
                            "volumeMounts": [
                                {"name": "data", "mountPath": "/data"},
                                {"name": "data", "mountPath": "/sub", "subPath": "logs"}]}],
        },
    })
}

/// Runs the pod to completion and asserts that it succeeded; then deletes it and waits until
/// it is gone.
async fn run_pod(pods: &Api<Pod>, kubelet: &KubeletProcess, object: serde_json::Value) {
    let created = create(pods, object).await;
    let name = created.metadata.name.clone().unwrap();
    let uid = created.metadata.uid.clone().unwrap();
    let log = kubelet
        .data()
        .join(format!("logs/pods/default_{name}_{uid}/c/0.log"));
    let phase = eventually(&format!("{name} to finish"), || finished(pods, &name)).await;
    assert_eq!(phase, "Succeeded", "{name}'s log:\n{}", support::read(&log));
    pods.delete(&name, &DeleteParams::default()).await.unwrap();
    eventually(&format!("{name} to be gone"), || async {
        matches!(pods.get_opt(&name).await, Ok(None)).then_some(())
    })
    .await;
}

#[test]
fn a_local_path_claim_keeps_its_data_across_pods_and_goes_with_its_volume() {
    if let Some(why) = unsupported() {
        support::skip(&why);
        return;
    }
    let api = ApiServer::start(Backend::Embedded);
    let _cm = controller_manager(&api, &[]);
    let kubelet = KubeletProcess::start(&api, NODE);
    run(async {
        let c = kube_client(&api).await;
        let pods: Api<Pod> = Api::namespaced(c.clone(), "default");
        let claims: Api<PersistentVolumeClaim> = Api::namespaced(c.clone(), "default");
        let volumes: Api<PersistentVolume> = Api::all(c.clone());
        let classes: Api<StorageClass> = Api::all(c.clone());
        let nodes: Api<Node> = Api::all(c.clone());

        // the kubelet publishes where its local-path volumes live
        let storage: PathBuf = kubelet.data().join("storage");
        let node = nodes.get(NODE).await.unwrap();
        assert_eq!(
            node.metadata.annotations.unwrap()["skiff.dev/local-path-dir"],
            storage.display().to_string()
        );

        // the class `skiff server` applies
        create(&classes, local_path_class()).await;
        // DefaultStorageClass admission reads classes from the watch cache: wait until it
        // defaults claims (a probe claim per try, deleted at once)
        let mut tries = 0;
        eventually("claims to get the default class", || {
            tries += 1;
            let (claims, name) = (claims.clone(), format!("probe-{tries}"));
            async move {
                let probe = create(
                    &claims,
                    json!({"metadata": {"name": name},
                           "spec": {"accessModes": ["ReadWriteOnce"],
                                    "resources": {"requests": {"storage": "1Gi"}}}}),
                )
                .await;
                claims
                    .delete(&name, &DeleteParams::default())
                    .await
                    .unwrap();
                probe.spec?.storage_class_name.filter(|c| c == CLASS)
            }
        })
        .await;
        // a claim naming no class gets the default one and waits for its first consumer
        let claim = create(
            &claims,
            json!({"metadata": {"name": "data"},
                   "spec": {"accessModes": ["ReadWriteOnce"],
                            "resources": {"requests": {"storage": "1Gi"}}}}),
        )
        .await;
        assert_eq!(
            claim.spec.unwrap().storage_class_name.as_deref(),
            Some(CLASS)
        );
        let uid = claim.metadata.uid.unwrap();

        // a pod whose claim does not exist waits with upstream's message
        create(&pods, {
            let mut p = pod("orphan", false, "true");
            p["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"] = json!("nosuch");
            p
        })
        .await;
        let message = api.first_event_message("orphan", "FailedMount").await;
        assert_eq!(
            message,
            "MountVolume.SetUp failed for volume \"data\" : error processing PVC default/nosuch: \
             failed to fetch PVC from API server: persistentvolumeclaims \"nosuch\" not found"
        );
        pods.delete("orphan", &DeleteParams::default())
            .await
            .unwrap();

        // the scheduler's volume binding places it; here the test does
        claims
            .patch(
                "data",
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"annotations": {
                    "volume.kubernetes.io/selected-node": NODE}}})),
            )
            .await
            .unwrap();
        let name = format!("pvc-{uid}");
        eventually("the claim to be bound", || async {
            let c = claims.get("data").await.ok()?;
            (c.status?.phase.as_deref() == Some("Bound")).then_some(())
        })
        .await;
        let volume = volumes.get(&name).await.unwrap();
        let dir = storage.join(format!("{name}_default_data"));
        let spec = volume.spec.clone().unwrap();
        assert_eq!(
            spec.host_path.as_ref().unwrap().path,
            dir.display().to_string()
        );
        assert_eq!(
            spec.persistent_volume_reclaim_policy.as_deref(),
            Some("Delete")
        );
        assert_eq!(spec.storage_class_name.as_deref(), Some(CLASS));
        assert_eq!(
            volume.metadata.annotations.unwrap()["pv.kubernetes.io/provisioned-by"],
            PROVISIONER
        );
        let affinity = serde_json::to_value(spec.node_affinity).unwrap();
        assert_eq!(
            affinity["required"]["nodeSelectorTerms"][0]["matchExpressions"][0]["values"],
            json!([NODE])
        );
        let events = api.kubectl(
            KUBECTL_133,
            &[
                "get",
                "events",
                "--field-selector",
                "involvedObject.name=data",
                "-o",
                "jsonpath={range .items[*]}{.reason}{\"\\n\"}{end}",
            ],
        );
        for reason in ["Provisioning", "ProvisioningSucceeded"] {
            assert!(events.lines().any(|l| l == reason), "{events}");
        }
        // nothing on the node yet: the directory comes with the first pod
        assert!(!dir.exists());

        run_pod(
            &pods,
            &kubelet,
            pod(
                "writer",
                false,
                "echo kept > /data/file && echo sub > /sub/line",
            ),
        )
        .await;
        let mode = std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o777);
        assert_eq!(support::read(&dir.join("file")), "kept\n");
        assert_eq!(support::read(&dir.join("logs/line")), "sub\n");

        run_pod(
            &pods,
            &kubelet,
            pod(
                "reader",
                true,
                "test \"$(cat /data/file)\" = kept && test \"$(cat /sub/line)\" = sub && \
                 ! touch /data/other 2>/dev/null",
            ),
        )
        .await;
        assert!(!dir.join("other").exists());

        // the claim goes: the binder releases the volume, the node removes its directory and
        // then the volume
        claims
            .delete("data", &DeleteParams::default())
            .await
            .unwrap();
        eventually("the volume to be deleted", || async {
            matches!(volumes.get_opt(&name).await, Ok(None)).then_some(())
        })
        .await;
        assert!(!dir.exists(), "{} is still there", dir.display());
        assert!(storage.exists());
    });
}

/// A claim of `class` (no class: `""`), pre-bound to `volume` when given.
fn claim(name: &str, class: &str, volume: Option<&str>) -> serde_json::Value {
    let mut c = json!({"metadata": {"name": name},
                       "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": class,
                                "resources": {"requests": {"storage": "1Gi"}}}});
    if let Some(v) = volume {
        c["spec"]["volumeName"] = json!(v);
    }
    c
}

/// A static volume of 1Gi with `source` (`hostPath` or `local`), on `NODE`.
fn static_volume(name: &str, source: serde_json::Value) -> serde_json::Value {
    let mut v = json!({"metadata": {"name": name},
        "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                 "persistentVolumeReclaimPolicy": "Retain",
                 "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                     {"key": "kubernetes.io/hostname", "operator": "In", "values": [NODE]}]}]}}}});
    for (k, val) in source.as_object().unwrap() {
        v["spec"][k] = val.clone();
    }
    v
}

/// Waits until every claim is bound.
async fn bound(claims: &Api<PersistentVolumeClaim>, names: &[&str]) {
    for name in names {
        eventually(&format!("{name} to be bound"), || async {
            let c = claims.get(name).await.ok()?;
            (c.status?.phase.as_deref() == Some("Bound")).then_some(())
        })
        .await;
    }
}

/// Deletes the pods and waits until they are gone (before the kubelet goes).
async fn delete_pods(pods: &Api<Pod>, names: &[&str]) {
    for name in names {
        pods.delete(name, &DeleteParams::default()).await.unwrap();
    }
    for name in names {
        eventually(&format!("{name} to be gone"), || async {
            matches!(pods.get_opt(name).await, Ok(None)).then_some(())
        })
        .await;
    }
}

/// Checks run in the fsGroup pod: each prints what failed before exiting 1.
const FS_GROUP_CHECKS: &str = r#"
check() { if ! sh -c "$1"; then echo "FAIL: $1"; exit 1; fi; }
echo "groups: $(id -G); scratch $(stat -c %g:%a /scratch); disk $(stat -c %g:%a /disk); lp $(stat -c %g:%a /lp)"
check 'id -G | tr " " "\n" | grep -qx 2000'
check 'test "$(stat -c %g /scratch)" = 2000'
check 'test "$(stat -c %g /disk)" = 2000'
check 'test "$(stat -L -c %g /cfg/k)" = 2000'
check 'touch /disk/new && test "$(stat -c %g /disk/new)" = 2000'
check 'test "$(stat -c %g /lp)" = 0 && touch /lp/new'
echo all checks passed
"#;

#[test]
fn a_pods_fs_group_owns_its_empty_dir_config_map_and_local_volume_but_not_its_host_path_volume() {
    if let Some(why) = unsupported() {
        support::skip(&why);
        return;
    }
    let api = ApiServer::start(Backend::Embedded);
    let _cm = controller_manager(&api, &[]);
    let kubelet = KubeletProcess::start(&api, NODE);
    run(async {
        let c = kube_client(&api).await;
        let pods: Api<Pod> = Api::namespaced(c.clone(), "default");
        let claims: Api<PersistentVolumeClaim> = Api::namespaced(c.clone(), "default");
        let volumes: Api<PersistentVolume> = Api::all(c.clone());
        let classes: Api<StorageClass> = Api::all(c.clone());
        let config_maps: Api<k8s_openapi::api::core::v1::ConfigMap> =
            Api::namespaced(c.clone(), "default");

        // a `local` volume on a directory of the node, root's as a new disk's would be
        let disk = kubelet.data().join("disk");
        std::fs::create_dir_all(disk.join("inner")).unwrap();
        std::fs::set_permissions(&disk, std::fs::Permissions::from_mode(0o755)).unwrap();
        let path = disk.display().to_string();
        create(
            &volumes,
            static_volume("disk", json!({"local": {"path": path}})),
        )
        .await;
        create(&claims, claim("disk", "", Some("disk"))).await;
        // a local-path claim, placed on the node as the scheduler would
        create(&classes, local_path_class()).await;
        let mut lp = claim("lp", CLASS, None);
        lp["metadata"]["annotations"] = json!({"volume.kubernetes.io/selected-node": NODE});
        create(&claims, lp).await;
        create(
            &config_maps,
            json!({"metadata": {"name": "cfg"}, "data": {"k": "v"}}),
        )
        .await;
        bound(&claims, &["disk", "lp"]).await;

        let created = create(
            &pods,
            json!({
                "metadata": {"name": "grouped"},
                "spec": {
                    "nodeName": NODE, "restartPolicy": "Never",
                    "automountServiceAccountToken": false,
                    "securityContext": {"fsGroup": 2000},
                    "volumes": [
                        {"name": "scratch", "emptyDir": {}},
                        {"name": "cfg", "configMap": {"name": "cfg"}},
                        {"name": "disk", "persistentVolumeClaim": {"claimName": "disk"}},
                        {"name": "lp", "persistentVolumeClaim": {"claimName": "lp"}}],
                    "containers": [{"name": "c", "image": "busybox",
                                    "command": ["sh", "-c", FS_GROUP_CHECKS],
                                    "volumeMounts": [
                                        {"name": "scratch", "mountPath": "/scratch"},
                                        {"name": "cfg", "mountPath": "/cfg"},
                                        {"name": "disk", "mountPath": "/disk"},
                                        {"name": "lp", "mountPath": "/lp"}]}],
                },
            }),
        )
        .await;
        let uid = created.metadata.uid.unwrap();
        let log = kubelet
            .data()
            .join(format!("logs/pods/default_grouped_{uid}/c/0.log"));
        let phase = eventually("grouped to finish", || finished(&pods, "grouped")).await;
        assert_eq!(
            phase,
            "Succeeded",
            "pod log:\n{}\nkubelet log:\n{}",
            support::read(&log),
            kubelet.log()
        );
        // on the node: the local volume's root and inner directory got the group, the mask
        // and setgid; the local-path directory is as the provisioner made it
        let stat = |p: &Path| {
            let m = std::fs::metadata(p).unwrap();
            (m.gid(), m.permissions().mode() & 0o7777)
        };
        assert_eq!(stat(&disk), (2000, 0o2775));
        assert_eq!(stat(&disk.join("inner")), (2000, 0o2775));
        let volume = claims
            .get("lp")
            .await
            .unwrap()
            .spec
            .unwrap()
            .volume_name
            .unwrap();
        let lp_dir = kubelet.data().join(format!("storage/{volume}_default_lp"));
        assert_eq!(stat(&lp_dir), (0, 0o777));
        delete_pods(&pods, &["grouped"]).await;
    });
}

#[test]
fn a_volume_whose_directory_cannot_be_made_keeps_its_pod_creating_and_affects_no_other_pod() {
    if let Some(why) = unsupported() {
        support::skip(&why);
        return;
    }
    let api = ApiServer::start(Backend::Embedded);
    let _cm = controller_manager(&api, &[]);
    let kubelet = KubeletProcess::start(&api, NODE);
    run(async {
        let c = kube_client(&api).await;
        let pods: Api<Pod> = Api::namespaced(c.clone(), "default");
        let claims: Api<PersistentVolumeClaim> = Api::namespaced(c.clone(), "default");
        let volumes: Api<PersistentVolume> = Api::all(c.clone());

        // the blocked volume's directory would be below a regular file
        let blocker = kubelet.data().join("blocker");
        std::fs::write(&blocker, "").unwrap();
        let good = kubelet.data().join("good");
        for (name, path) in [("blocked", blocker.join("data")), ("good", good.clone())] {
            let path = path.display().to_string();
            let source = json!({"hostPath": {"path": path, "type": "DirectoryOrCreate"}});
            create(&volumes, static_volume(name, source)).await;
            create(&claims, claim(name, "", Some(name))).await;
        }
        bound(&claims, &["blocked", "good"]).await;
        let pod = |name: &str, claim: &str| {
            json!({"metadata": {"name": name},
                   "spec": {"nodeName": NODE, "automountServiceAccountToken": false,
                            "terminationGracePeriodSeconds": 1,
                            "volumes": [{"name": "data",
                                         "persistentVolumeClaim": {"claimName": claim}}],
                            "containers": [{"name": "c", "image": "busybox",
                                            "command": ["sh", "-c",
                                                        "touch /data/ok && exec sleep 3600"],
                                            "volumeMounts": [{"name": "data",
                                                              "mountPath": "/data"}]}]}})
        };
        create(&pods, pod("stuck", "blocked")).await;
        create(&pods, pod("fine", "good")).await;

        // upstream's FailedMount, naming the volume and what is in the way
        let message = api.first_event_message("stuck", "FailedMount").await;
        assert_eq!(
            message,
            format!(
                "MountVolume.SetUp failed for volume \"blocked\" : mkdir {}: not a directory",
                blocker.display()
            )
        );
        // the other pod runs and uses its volume
        eventually("fine to run", || in_phase(&pods, "fine", "Running")).await;
        eventually("fine to write to its volume", || async {
            good.join("ok").exists().then_some(())
        })
        .await;
        // the stuck pod is ContainerCreating, as kubectl shows it
        let line = api.kubectl(KUBECTL_133, &["get", "pod", "stuck", "--no-headers"]);
        let cells: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(cells[..3], ["stuck", "0/1", "ContainerCreating"], "{line}");
        assert!(!blocker.join("data").exists());

        // the cause removed, the retry mounts the volume and the pod starts
        std::fs::remove_file(&blocker).unwrap();
        eventually("stuck to run", || in_phase(&pods, "stuck", "Running")).await;
        eventually("stuck to write to its volume", || async {
            blocker.join("data/ok").exists().then_some(())
        })
        .await;
        delete_pods(&pods, &["stuck", "fine"]).await;
    });
}

/// A `skiff server --disable-agent` on `dir`, once ready, and its stdout (kept open); SIGTERM
/// and wait on drop.
struct Server(Child, std::sync::mpsc::Receiver<String>);

impl Server {
    fn start(dir: &Path, extra: &[&str]) -> Server {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port()
            .to_string();
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_skiff"));
        cmd.arg("server")
            .arg("--data-dir")
            .arg(dir)
            .args(["--disable-agent", "--https-port", &port])
            .args(["--kube-scheduler-arg", "metrics-bind-address=127.0.0.1:0"])
            .args([
                "--kube-controller-manager-arg",
                "metrics-bind-address=127.0.0.1:0",
            ])
            .args(extra);
        let log = std::fs::File::create(dir.with_extension("log")).unwrap();
        let mut child = cmd
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(log)
            .spawn()
            .expect("start skiff server");
        let lines = support::line_reader(child.stdout.take().unwrap());
        let server = Server(child, lines);
        support::expect_line(&server.1, |l| l.contains("ready"));
        server
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.0.id().to_string())
            .status();
        let _ = self.0.wait();
    }
}

fn kubectl(dir: &Path, args: &[&str]) -> String {
    let out = support::run_guarded(
        Command::new(KUBECTL_133)
            .arg("--kubeconfig")
            .arg(dir.join("kubeconfig.yaml"))
            .args(args)
            .env("HOME", dir.join("kubectl-home")),
    );
    let (stdout, stderr) = support::output_text(&out);
    assert!(out.status.success(), "kubectl {args:?}: {stderr}{stdout}");
    stdout
}

/// The cells of `kubectl get storageclass`'s line for `local-path`, if there is one.
fn class_line(dir: &Path) -> Option<Vec<String>> {
    let table = kubectl(dir, &["get", "storageclass", "--no-headers"]);
    table
        .lines()
        .find(|l| l.starts_with("local-path"))
        .map(|l| {
            l.split("  ")
                .map(str::trim)
                .filter(|c| !c.is_empty())
                .map(String::from)
                .collect()
        })
}

#[test]
fn skiff_server_applies_the_default_local_path_class_on_every_start_unless_disabled() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("server");
    {
        let _server = Server::start(&data, &[]);
        let cells = class_line(&data).expect("a local-path class");
        assert_eq!(
            cells[..5],
            [
                "local-path (default)",
                "skiff.dev/local-path",
                "Delete",
                "WaitForFirstConsumer",
                "false"
            ]
        );
        kubectl(&data, &["delete", "storageclass", "local-path"]);
        assert!(class_line(&data).is_none());
    }
    {
        let _server = Server::start(&data, &[]);
        assert!(class_line(&data).is_some(), "re-applied at the next start");
    }
    let other = dir.path().join("disabled");
    let _server = Server::start(&other, &["--disable", "local-storage"]);
    assert!(class_line(&other).is_none());
}
