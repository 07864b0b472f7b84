use std::collections::BTreeMap;

use jiff::{SignedDuration, Timestamp};
use serde_json::json;

use super::host::{HostCall, RecordingHost};
use super::*;
use crate::api::RecordingPodApi;

struct Harness {
    _dir: tempfile::TempDir,
    host: Arc<RecordingHost>,
    api: RecordingPodApi,
    volumes: VolumeManager,
}

fn harness() -> Harness {
    let dir = tempfile::tempdir().unwrap();
    let host = Arc::new(RecordingHost::default());
    let volumes = VolumeManager::new(dir.path().join("pods"), host.clone(), REFRESH);
    Harness {
        _dir: dir,
        host,
        api: RecordingPodApi::default(),
        volumes,
    }
}

fn pod(volumes: serde_json::Value, mounts: serde_json::Value) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": "web", "namespace": "prod", "uid": "u1", "labels": {"app": "web"}},
        "spec": {"containers": [{"name": "c", "volumeMounts": mounts}], "volumes": volumes},
    }))
    .unwrap()
}

fn at(seconds: i64) -> Timestamp {
    Timestamp::UNIX_EPOCH + SignedDuration::from_secs(seconds)
}

impl Harness {
    async fn set_up(&self, pod: &Pod, now: Timestamp) -> SetUp {
        self.volumes
            .set_up(&self.api, pod, &BTreeMap::new(), now)
            .await
    }

    fn read(&self, plugin: &str, name: &str, file: &str) -> String {
        let dir = self.volumes.plugin_dir("u1", plugin, name);
        std::fs::read_to_string(dir.join(file)).unwrap()
    }
}

#[tokio::test]
async fn a_missing_config_map_fails_with_upstream_message_until_it_exists() {
    let h = harness();
    let p = pod(
        json!([{"name": "cfg", "configMap": {"name": "settings"}}]),
        json!([]),
    );
    let first = h.set_up(&p, at(0)).await;
    assert!(!first.ready);
    assert_eq!(
        first.failures[0].to_string(),
        "MountVolume.SetUp failed for volume \"cfg\" : configmap \"settings\" not found"
    );
    assert_eq!(first.retry_in, Some(FIRST_RETRY));
    // not retried before then, and still not ready
    let early = Timestamp::UNIX_EPOCH + SignedDuration::from_millis(200);
    let waiting = h.set_up(&p, early).await;
    assert!(!waiting.ready && waiting.failures.is_empty());
    assert_eq!(waiting.retry_in, Some(Duration::from_millis(300)));
    // each failure in a row doubles the wait, up to RETRY
    let mut t = at(0) + FIRST_RETRY;
    let mut waits = Vec::new();
    for _ in 0..7 {
        let failed = h.set_up(&p, t).await;
        assert_eq!(failed.failures.len(), 1);
        let wait = failed.retry_in.unwrap();
        waits.push(wait.as_millis());
        t += wait;
    }
    assert_eq!(waits, [1000, 2000, 4000, 8000, 10000, 10000, 10000]);
    h.api.config_maps.lock().insert(
        "settings".into(),
        BTreeMap::from([("k".into(), "v".into())]),
    );
    let later = h.set_up(&p, t).await;
    assert!(later.ready && later.failures.is_empty() && later.retry_in.is_none());
    assert_eq!(h.read(config_map::PLUGIN, "cfg", "k"), "v");
}

#[tokio::test]
async fn files_follow_their_sources_at_each_refresh() {
    let h = harness();
    let p = pod(
        json!([{"name": "cfg", "configMap": {"name": "settings"}},
               {"name": "info", "downwardAPI": {"items": [
                   {"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}}]}}]),
        json!([]),
    );
    h.api.config_maps.lock().insert(
        "settings".into(),
        BTreeMap::from([("k".into(), "v1".into())]),
    );
    assert!(h.set_up(&p, at(0)).await.ready);
    assert_eq!(
        h.read(downward_api::PLUGIN, "info", "labels"),
        "app=\"web\""
    );
    h.api.config_maps.lock().insert(
        "settings".into(),
        BTreeMap::from([("k".into(), "v2".into())]),
    );
    h.set_up(&p, at(30)).await;
    assert_eq!(h.read(config_map::PLUGIN, "cfg", "k"), "v1");
    h.set_up(&p, at(60)).await;
    assert_eq!(h.read(config_map::PLUGIN, "cfg", "k"), "v2");
}

#[tokio::test]
async fn secrets_and_projections_live_on_tmpfs_and_teardown_unmounts_and_removes_them() {
    let h = harness();
    let p = pod(
        json!([{"name": "creds", "secret": {"secretName": "s", "defaultMode": 0o400}},
               {"name": "sa", "projected": {"sources": [
                   {"serviceAccountToken": {"path": "token"}}]}},
               {"name": "scratch", "emptyDir": {}}]),
        json!([]),
    );
    h.api.secrets.lock().insert(
        "s".into(),
        BTreeMap::from([("password".into(), "pw".into())]),
    );
    assert!(h.set_up(&p, at(0)).await.ready);
    assert_eq!(h.read(secret::PLUGIN, "creds", "password"), "pw");
    assert_eq!(h.read(projected::PLUGIN, "sa", "token"), "token-1");
    let secret_dir = h.volumes.plugin_dir("u1", secret::PLUGIN, "creds");
    let projected_dir = h.volumes.plugin_dir("u1", projected::PLUGIN, "sa");
    assert_eq!(
        *h.host.calls.lock(),
        [
            HostCall::MountTmpfs(secret_dir.clone(), None),
            HostCall::MountTmpfs(projected_dir.clone(), None)
        ]
    );

    h.volumes.tear_down("u1").unwrap();
    let calls = h.host.calls.lock().clone();
    assert!(calls.contains(&HostCall::Unmount(secret_dir)));
    assert!(calls.contains(&HostCall::Unmount(projected_dir)));
    assert!(!h.volumes.pod_dir("u1").exists());
    assert!(h.volumes.pods_on_disk().is_empty());
}

#[tokio::test]
async fn without_files_the_sources_are_read_and_tokens_requested_but_nothing_written() {
    let mut h = harness();
    h.volumes =
        VolumeManager::new(h._dir.path().join("pods"), h.host.clone(), REFRESH).without_files();
    let p = pod(
        json!([{"name": "creds", "secret": {"secretName": "s"}},
               {"name": "sa", "projected": {"sources": [
                   {"serviceAccountToken": {"path": "token"}}]}}]),
        json!([]),
    );
    assert!(!h.set_up(&p, at(0)).await.ready, "the secret is read");
    h.api.secrets.lock().insert(
        "s".into(),
        BTreeMap::from([("password".into(), "pw".into())]),
    );
    assert!(h.set_up(&p, at(1)).await.ready);
    assert_eq!(h.api.token_requests().len(), 1, "the token is requested");
    assert!(!h.volumes.pod_dir("u1").exists(), "no files");
    assert!(h.host.calls.lock().is_empty(), "no tmpfs");
}

#[tokio::test]
async fn unsupported_volume_types_and_bad_host_paths_fail_by_name() {
    let h = harness();
    let p = pod(
        json!([{"name": "data", "nfs": {"server": "nas", "path": "/export"}},
               {"name": "sock", "hostPath": {"path": "/run/none.sock", "type": "Socket"}}]),
        json!([]),
    );
    let result = h.set_up(&p, at(0)).await;
    let messages: Vec<String> = result.failures.iter().map(|f| f.to_string()).collect();
    assert_eq!(
        messages,
        [
            "MountVolume.SetUp failed for volume \"data\" : skiff does not support nfs volumes",
            "MountVolume.SetUp failed for volume \"sock\" : hostPath type check failed: /run/none.sock is not a socket file",
        ]
    );
}

#[tokio::test]
async fn volume_mounts_become_cri_mounts_with_sub_paths_and_the_hosts_file() {
    let h = harness();
    let p = pod(
        json!([{"name": "cfg", "configMap": {"name": "settings"}},
               {"name": "scratch", "emptyDir": {}},
               {"name": "host", "hostPath": {"path": "/srv/data"}}]),
        json!([{"name": "cfg", "mountPath": "/etc/cfg"},
               {"name": "scratch", "mountPath": "/work", "subPathExpr": "$(POD)/out"},
               {"name": "host", "mountPath": "/data", "readOnly": true,
                "mountPropagation": "HostToContainer"}]),
    );
    h.api
        .config_maps
        .lock()
        .insert("settings".into(), BTreeMap::new());
    assert!(h.set_up(&p, at(0)).await.ready);
    let envs = [crate::cri::KeyValue {
        key: "POD".into(),
        value: "web".into(),
    }];
    let container = &p.spec.as_ref().unwrap().containers[0];
    let hosts = h.volumes.pod_dir("u1").join("etc-hosts");
    let mounts = h
        .volumes
        .container_mounts(&p, container, &envs, Some(&hosts))
        .unwrap();
    let got: Vec<(&str, String, bool)> = mounts
        .iter()
        .map(|m| (m.container_path.as_str(), m.host_path.clone(), m.readonly))
        .collect();
    let vol = |plugin, name| h.volumes.plugin_dir("u1", plugin, name);
    assert_eq!(
        got,
        [
            (
                "/etc/cfg",
                vol(config_map::PLUGIN, "cfg").display().to_string(),
                true
            ),
            (
                "/work",
                vol(empty_dir::PLUGIN, "scratch")
                    .join("web/out")
                    .display()
                    .to_string(),
                false
            ),
            ("/data", "/srv/data".into(), true),
            ("/etc/hosts", hosts.display().to_string(), false),
        ]
    );
    assert!(vol(empty_dir::PLUGIN, "scratch").join("web/out").is_dir());
    assert_eq!(
        mounts[2].propagation,
        MountPropagationCheck::PropagationHostToContainer as i32
    );
}

use k8s_cri::v1::MountPropagation as MountPropagationCheck;

#[test]
fn sub_path_expressions_expand_known_variables_only() {
    let envs = [crate::cri::KeyValue {
        key: "A".into(),
        value: "x".into(),
    }];
    assert_eq!(mounts::expand("$(A)/$(B)/$$(A)", &envs), "x/$(B)/$(A)");
}

#[tokio::test]
async fn directories_of_pods_that_are_gone_are_torn_down_and_others_kept() {
    let h = harness();
    let p = pod(
        json!([{"name": "mem", "emptyDir": {"medium": "Memory"}}]),
        json!([]),
    );
    assert!(h.set_up(&p, at(0)).await.ready);
    std::fs::create_dir_all(h.volumes.pod_dir("gone")).unwrap();
    h.volumes.tear_down_others(|uid| uid == "u1");
    assert_eq!(h.volumes.pods_on_disk(), ["u1"]);
    h.volumes.tear_down_others(|_| false);
    assert!(h.volumes.pods_on_disk().is_empty());
    assert!(h.host.mounted.lock().is_empty());
}

#[tokio::test]
async fn a_host_that_refuses_mounts_fails_the_volume_and_teardown() {
    let h = harness();
    let p = pod(
        json!([{"name": "mem", "emptyDir": {"medium": "Memory"}}]),
        json!([]),
    );
    *h.host.fail.lock() = Some("operation not permitted".into());
    let result = h.set_up(&p, at(0)).await;
    assert!(!result.ready);
    assert_eq!(
        result.failures[0].to_string(),
        "MountVolume.SetUp failed for volume \"mem\" : operation not permitted"
    );
    let err = h.volumes.tear_down("u1").unwrap_err();
    assert!(matches!(err, Error::ListMounts { .. }), "{err}");
    *h.host.fail.lock() = None;
    assert!(h.set_up(&p, at(10)).await.ready);
}

fn claim_object(name: &str, volume: Option<&str>, deleting: bool) -> PersistentVolumeClaim {
    let mut c = json!({"metadata": {"name": name, "namespace": "prod", "uid": format!("uid-{name}")},
                       "status": {"phase": "Pending"}});
    if let Some(v) = volume {
        c["spec"] = json!({"volumeName": v});
        c["status"]["phase"] = json!("Bound");
    }
    if deleting {
        c["metadata"]["deletionTimestamp"] = json!("2024-01-01T00:00:00Z");
    }
    serde_json::from_value(c).unwrap()
}

fn volume_object(name: &str, claim: &str, source: serde_json::Value) -> PersistentVolume {
    let mut v = json!({"metadata": {"name": name},
                       "spec": {"claimRef": {"namespace": "prod", "name": claim,
                                             "uid": format!("uid-{claim}")}}});
    for (k, val) in source.as_object().unwrap() {
        v["spec"][k] = val.clone();
    }
    serde_json::from_value(v).unwrap()
}

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};

#[tokio::test]
async fn hollow_nodes_give_an_existing_claim_a_directory_and_refuse_missing_or_deleted_ones() {
    let dir = tempfile::tempdir().unwrap();
    let volumes = VolumeManager::new(
        dir.path().join("pods"),
        Arc::new(RecordingHost::default()),
        REFRESH,
    )
    .with_claims(claim::Claims::NodeLocal);
    let api = RecordingPodApi::default();
    let add = |name: &str, deleting| {
        api.claims
            .lock()
            .insert(name.into(), claim_object(name, None, deleting))
    };
    add("data-web-0", false);
    add("old", true);
    let p = pod(
        json!([{"name": "data", "persistentVolumeClaim": {"claimName": "data-web-0"}},
               {"name": "gone", "persistentVolumeClaim": {"claimName": "missing"}},
               {"name": "going", "persistentVolumeClaim": {"claimName": "old"}}]),
        json!([]),
    );
    let result = volumes.set_up(&api, &p, &BTreeMap::new(), at(0)).await;
    let messages: Vec<String> = result.failures.iter().map(|f| f.to_string()).collect();
    assert_eq!(
        messages,
        [
            "MountVolume.SetUp failed for volume \"gone\" : error processing PVC prod/missing: failed to fetch PVC from API server: persistentvolumeclaims \"missing\" not found",
            "MountVolume.SetUp failed for volume \"going\" : error processing PVC prod/old: PVC is being deleted",
        ]
    );
    let data = volumes
        .host_path("u1", &p.spec.as_ref().unwrap().volumes.as_ref().unwrap()[0])
        .unwrap();
    assert!(data.ends_with("u1/volumes/skiff.io~claim/data"), "{data:?}");
    assert!(data.is_dir());

    // once the claims exist and are not being deleted, the pod's volumes are ready
    add("missing", false);
    add("old", false);
    let result = volumes.set_up(&api, &p, &BTreeMap::new(), at(60)).await;
    assert!(result.ready && result.failures.is_empty(), "{result:?}");
}

#[tokio::test]
async fn a_claim_volume_waits_for_its_binding_then_mounts_the_local_path_directory() {
    let h = harness();
    let p = pod(
        json!([{"name": "data", "persistentVolumeClaim": {"claimName": "data", "readOnly": true}}]),
        json!([{"name": "data", "mountPath": "/data"},
               {"name": "data", "mountPath": "/logs", "subPathExpr": "$(POD)"}]),
    );
    // no claim yet, then a claim not bound yet: not ready, with upstream's messages
    let first = h.set_up(&p, at(0)).await;
    assert!(!first.ready);
    assert_eq!(
        first.failures[0].to_string(),
        "MountVolume.SetUp failed for volume \"data\" : error processing PVC prod/data: failed to fetch PVC from API server: persistentvolumeclaims \"data\" not found"
    );
    h.api
        .claims
        .lock()
        .insert("data".into(), claim_object("data", None, false));
    let pending = h.set_up(&p, at(10)).await;
    assert_eq!(
        pending.failures[0].message,
        "error processing PVC prod/data: PVC is not bound"
    );
    // bound to a local-path volume: its directory is made 0777 and mounted as it is
    let dir = h._dir.path().join("storage/pvc-1_prod_data");
    let path = dir.display().to_string();
    let mut v = volume_object(
        "pvc-1",
        "data",
        json!({"hostPath": {"path": path, "type": "DirectoryOrCreate"}}),
    );
    v.metadata.annotations = Some(BTreeMap::from([(
        "pv.kubernetes.io/provisioned-by".to_string(),
        "skiff.dev/local-path".to_string(),
    )]));
    h.api.volumes.lock().insert("pvc-1".into(), v);
    h.api
        .claims
        .lock()
        .insert("data".into(), claim_object("data", Some("pvc-1"), false));
    let bound = h.set_up(&p, at(20)).await;
    assert!(bound.ready && bound.failures.is_empty(), "{bound:?}");
    assert_eq!(
        *h.host.calls.lock(),
        [HostCall::CreateDir(dir.clone(), 0o777)]
    );
    let envs = [crate::cri::KeyValue {
        key: "POD".into(),
        value: "web".into(),
    }];
    let container = &p.spec.as_ref().unwrap().containers[0];
    let mounts = h
        .volumes
        .container_mounts(&p, container, &envs, None)
        .unwrap();
    let got: Vec<(&str, String, bool)> = mounts
        .iter()
        .map(|m| (m.container_path.as_str(), m.host_path.clone(), m.readonly))
        .collect();
    // the claim source's readOnly makes every mount of it read-only
    assert_eq!(
        got,
        [
            ("/data", path.clone(), true),
            ("/logs", format!("{path}/web"), true)
        ]
    );
    // the sub path is made on the host, through the host's operations
    assert_eq!(
        h.host.calls.lock().last(),
        Some(&HostCall::CreateDir(dir.join("web"), 0o755))
    );
    // the volume's data outlives the pod
    h.volumes.tear_down("u1").unwrap();
    assert!(
        !h.host
            .calls
            .lock()
            .iter()
            .any(|c| matches!(c, HostCall::RemoveDir(_) | HostCall::Unmount(_)))
    );
}

#[tokio::test]
async fn a_local_volume_is_bind_mounted_into_the_pod_and_unmounted_with_it() {
    let h = harness();
    h.host
        .files
        .lock()
        .insert("/mnt/disk".into(), host::FileKind::Directory);
    h.api
        .claims
        .lock()
        .insert("data".into(), claim_object("data", Some("local-1"), false));
    h.api.volumes.lock().insert(
        "local-1".into(),
        volume_object("local-1", "data", json!({"local": {"path": "/mnt/disk"}})),
    );
    let p = pod(
        json!([{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}]),
        json!([{"name": "data", "mountPath": "/data"}]),
    );
    assert!(h.set_up(&p, at(0)).await.ready);
    // a refresh does not mount it twice
    assert!(h.set_up(&p, at(60)).await.ready);
    let target = h.volumes.plugin_dir("u1", claim::LOCAL_PLUGIN, "local-1");
    assert_eq!(
        *h.host.calls.lock(),
        [HostCall::BindMount {
            source: "/mnt/disk".into(),
            target: target.clone(),
            read_only: false
        }]
    );
    let container = &p.spec.as_ref().unwrap().containers[0];
    let mounts = h
        .volumes
        .container_mounts(&p, container, &[], None)
        .unwrap();
    assert_eq!(mounts[0].host_path, target.display().to_string());
    assert!(!mounts[0].readonly);
    h.volumes.tear_down("u1").unwrap();
    assert_eq!(h.host.calls.lock().last(), Some(&HostCall::Unmount(target)));
    assert!(h.host.mounted.lock().is_empty());
    // a volume whose directory is gone is not mounted
    h.host.files.lock().clear();
    let failed = h.set_up(&p, at(120)).await;
    assert_eq!(
        failed.failures[0].message,
        "path \"/mnt/disk\" does not exist"
    );
}

#[tokio::test]
async fn a_mounted_volumes_gid_annotation_is_an_extra_group_of_the_pod_until_teardown() {
    let h = harness();
    for (claim, volume, dir) in [("a", "pv-a", "/srv/a"), ("b", "pv-b", "/srv/b")] {
        h.host
            .files
            .lock()
            .insert(dir.into(), host::FileKind::Directory);
        h.api
            .claims
            .lock()
            .insert(claim.into(), claim_object(claim, Some(volume), false));
        let mut v = volume_object(volume, claim, json!({"hostPath": {"path": dir}}));
        v.metadata.annotations = Some(BTreeMap::from([(
            claim::VOLUME_GID_ANNOTATION.to_string(),
            "3000".to_string(),
        )]));
        h.api.volumes.lock().insert(volume.into(), v);
    }
    let mut p = pod(
        json!([{"name": "a", "persistentVolumeClaim": {"claimName": "a"}},
               {"name": "b", "persistentVolumeClaim": {"claimName": "b"}}]),
        json!([]),
    );
    assert!(
        h.volumes.extra_supplemental_groups(&p).is_empty(),
        "not mounted yet"
    );
    assert!(h.set_up(&p, at(0)).await.ready);
    assert_eq!(h.volumes.extra_supplemental_groups(&p), [3000], "once");
    p.spec.as_mut().unwrap().security_context =
        Some(serde_json::from_value(json!({"supplementalGroups": [3000]})).unwrap());
    assert!(
        h.volumes.extra_supplemental_groups(&p).is_empty(),
        "a group the pod asks for is not added again"
    );
    p.spec.as_mut().unwrap().security_context = None;
    h.volumes.tear_down("u1").unwrap();
    assert!(h.volumes.extra_supplemental_groups(&p).is_empty());
}

/// `claim` owned by the test pod (`u1`) as its controller, or by nobody.
fn owned(mut claim: PersistentVolumeClaim, by_pod: bool) -> PersistentVolumeClaim {
    if by_pod {
        claim.metadata.owner_references = Some(vec![
            serde_json::from_value(json!({"apiVersion": "v1", "kind": "Pod", "name": "web",
                "uid": "u1", "controller": true, "blockOwnerDeletion": true}))
            .unwrap(),
        ]);
    }
    claim
}

#[tokio::test]
async fn an_ephemeral_volume_mounts_its_claim_once_the_claim_is_the_pods_and_bound() {
    let h = harness();
    h.host
        .files
        .lock()
        .insert("/mnt/disk".into(), host::FileKind::Directory);
    let p = pod(
        json!([{"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}}]),
        json!([{"name": "scratch", "mountPath": "/scratch"}]),
    );
    // the controller has not made the claim yet
    let first = h.set_up(&p, at(0)).await;
    assert_eq!(
        first.failures[0].to_string(),
        "MountVolume.SetUp failed for volume \"scratch\" : error processing PVC prod/web-scratch: failed to fetch PVC from API server: persistentvolumeclaims \"web-scratch\" not found"
    );
    // a bound claim of that name that is not the pod's is refused with upstream's message
    let bound = claim_object("web-scratch", Some("local-1"), false);
    h.api
        .claims
        .lock()
        .insert("web-scratch".into(), owned(bound.clone(), false));
    h.api.volumes.lock().insert(
        "local-1".into(),
        volume_object(
            "local-1",
            "web-scratch",
            json!({"local": {"path": "/mnt/disk"}}),
        ),
    );
    let foreign = h.set_up(&p, at(10)).await;
    assert!(!foreign.ready);
    assert_eq!(
        foreign.failures[0].message,
        "PVC prod/web-scratch was not created for pod prod/web (pod is not owner)"
    );
    assert!(h.host.calls.lock().is_empty());
    // the pod's own claim is mounted like a persistentVolumeClaim volume
    h.api
        .claims
        .lock()
        .insert("web-scratch".into(), owned(bound, true));
    let ready = h.set_up(&p, at(20)).await;
    assert!(ready.ready && ready.failures.is_empty(), "{ready:?}");
    let target = h.volumes.plugin_dir("u1", claim::LOCAL_PLUGIN, "local-1");
    let container = &p.spec.as_ref().unwrap().containers[0];
    let mounts = h
        .volumes
        .container_mounts(&p, container, &[], None)
        .unwrap();
    assert_eq!(mounts[0].container_path, "/scratch");
    assert_eq!(mounts[0].host_path, target.display().to_string());
    assert!(!mounts[0].readonly);
}

#[tokio::test]
async fn hollow_nodes_give_an_ephemeral_volume_a_directory_only_for_the_pods_own_claim() {
    let dir = tempfile::tempdir().unwrap();
    let volumes = VolumeManager::new(
        dir.path().join("pods"),
        Arc::new(RecordingHost::default()),
        REFRESH,
    )
    .with_claims(claim::Claims::NodeLocal);
    let api = RecordingPodApi::default();
    let p = pod(
        json!([{"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}}]),
        json!([]),
    );
    let claim = claim_object("web-scratch", None, false);
    api.claims
        .lock()
        .insert("web-scratch".into(), owned(claim.clone(), false));
    let result = volumes.set_up(&api, &p, &BTreeMap::new(), at(0)).await;
    assert_eq!(
        result.failures[0].message,
        "PVC prod/web-scratch was not created for pod prod/web (pod is not owner)"
    );
    api.claims
        .lock()
        .insert("web-scratch".into(), owned(claim, true));
    let result = volumes.set_up(&api, &p, &BTreeMap::new(), at(60)).await;
    assert!(result.ready && result.failures.is_empty(), "{result:?}");
    let path = volumes
        .host_path("u1", &p.spec.as_ref().unwrap().volumes.as_ref().unwrap()[0])
        .unwrap();
    assert!(
        path.ends_with("u1/volumes/skiff.io~claim/scratch"),
        "{path:?}"
    );
    assert!(path.is_dir());
}

#[path = "tests_fs_group.rs"]
mod fs_group;
