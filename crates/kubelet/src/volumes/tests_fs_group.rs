//! The pod's fsGroup across the volume types: which volumes get it, with which mask and
//! policy, and when (the walk itself is tested in `ownership.rs`).

use std::os::unix::fs::{MetadataExt, PermissionsExt};

use super::*;
use crate::volumes::host::RealHost;

fn with_fs_group(mut p: Pod, sc: serde_json::Value) -> Pod {
    p.spec.as_mut().unwrap().security_context = Some(serde_json::from_value(sc).unwrap());
    p
}

fn ownership_calls(h: &Harness) -> Vec<(PathBuf, Ownership)> {
    h.host
        .calls
        .lock()
        .iter()
        .filter_map(|c| match c {
            HostCall::SetOwnership(p, o) => Some((p.clone(), *o)),
            _ => None,
        })
        .collect()
}

fn owner(read_only: bool, policy: ChangePolicy) -> Ownership {
    Ownership {
        group: 2000,
        read_only,
        policy,
    }
}

fn bound_claims(h: &Harness, claims: &[(&str, &str, serde_json::Value)]) {
    for (claim, volume, source) in claims {
        h.api
            .claims
            .lock()
            .insert(claim.to_string(), claim_object(claim, Some(volume), false));
        h.api.volumes.lock().insert(
            volume.to_string(),
            volume_object(volume, claim, source.clone()),
        );
    }
}

#[tokio::test]
async fn emptydir_when_made_projections_when_written_local_volumes_when_mounted_never_host_paths() {
    let h = harness();
    h.host
        .files
        .lock()
        .insert("/mnt/disk".into(), host::FileKind::Directory);
    bound_claims(
        &h,
        &[
            ("local", "local-1", json!({"local": {"path": "/mnt/disk"}})),
            (
                "hostpath",
                "host-1",
                json!({"hostPath": {"path": "/srv/data"}}),
            ),
        ],
    );
    h.api.config_maps.lock().insert(
        "settings".into(),
        BTreeMap::from([("k".into(), "v1".into())]),
    );
    let p = with_fs_group(
        pod(
            json!([{"name": "scratch", "emptyDir": {}},
                   {"name": "cfg", "configMap": {"name": "settings"}},
                   {"name": "local", "persistentVolumeClaim": {"claimName": "local"}},
                   {"name": "hostpath", "persistentVolumeClaim": {"claimName": "hostpath"}},
                   {"name": "node", "hostPath": {"path": "/srv/node"}}]),
            json!([]),
        ),
        json!({"fsGroup": 2000, "fsGroupChangePolicy": "OnRootMismatch"}),
    );
    let first = h.set_up(&p, at(0)).await;
    assert!(first.ready && first.failures.is_empty(), "{first:?}");
    let dir = |plugin: &str, name: &str| h.volumes.plugin_dir("u1", plugin, name);
    // emptyDir and configMap ignore the policy (upstream's plugins pass none); the configMap
    // is read-only to the pod; the local volume is walked as the pod's policy says
    assert_eq!(
        ownership_calls(&h),
        [
            (
                dir(empty_dir::PLUGIN, "scratch"),
                owner(false, ChangePolicy::Always)
            ),
            (
                dir(config_map::PLUGIN, "cfg"),
                owner(true, ChangePolicy::Always)
            ),
            (
                dir(claim::LOCAL_PLUGIN, "local-1"),
                owner(false, ChangePolicy::OnRootMismatch)
            ),
        ]
    );
    // a refresh with nothing new changes nothing
    h.host.calls.lock().clear();
    assert!(h.set_up(&p, at(60)).await.ready);
    assert_eq!(ownership_calls(&h), []);
    // a refresh that rewrites the configMap's files applies the group to them again
    h.api.config_maps.lock().insert(
        "settings".into(),
        BTreeMap::from([("k".into(), "v2".into())]),
    );
    assert!(h.set_up(&p, at(120)).await.ready);
    assert_eq!(
        ownership_calls(&h),
        [(
            dir(config_map::PLUGIN, "cfg"),
            owner(true, ChangePolicy::Always)
        )]
    );
}

#[tokio::test]
async fn without_an_fs_group_or_on_a_read_only_local_volume_nothing_is_changed() {
    let h = harness();
    h.host
        .files
        .lock()
        .insert("/mnt/disk".into(), host::FileKind::Directory);
    bound_claims(
        &h,
        &[("local", "local-1", json!({"local": {"path": "/mnt/disk"}}))],
    );
    let read_only = with_fs_group(
        pod(
            json!([{"name": "local",
                    "persistentVolumeClaim": {"claimName": "local", "readOnly": true}}]),
            json!([]),
        ),
        json!({"fsGroup": 2000}),
    );
    assert!(h.set_up(&read_only, at(0)).await.ready);
    h.volumes.tear_down("u1").unwrap();
    let plain = pod(
        json!([{"name": "local", "persistentVolumeClaim": {"claimName": "local"}},
               {"name": "scratch", "emptyDir": {}}]),
        json!([]),
    );
    assert!(h.set_up(&plain, at(0)).await.ready);
    assert_eq!(ownership_calls(&h), []);
}

#[tokio::test]
async fn a_local_volume_another_pod_has_mounted_is_left_alone_with_a_warning_if_its_group_differs()
{
    let h = harness();
    h.host
        .files
        .lock()
        .insert("/mnt/disk".into(), host::FileKind::Directory);
    h.host.groups.lock().insert("/mnt/disk".into(), 1000);
    bound_claims(
        &h,
        &[("local", "local-1", json!({"local": {"path": "/mnt/disk"}}))],
    );
    let other = h.volumes.pod_dir("u0");
    h.host.mounted.lock().insert(
        other
            .join("volumes")
            .join(claim::LOCAL_PLUGIN)
            .join("local-1"),
    );
    let p = with_fs_group(
        pod(
            json!([{"name": "local", "persistentVolumeClaim": {"claimName": "local"}}]),
            json!([]),
        ),
        json!({"fsGroup": 2000}),
    );
    let result = h.set_up(&p, at(0)).await;
    assert!(result.ready && result.failures.is_empty(), "{result:?}");
    assert_eq!(ownership_calls(&h), []);
    assert_eq!(
        result.warnings,
        [Warning {
            reason: "AlreadyMountedVolume",
            message: "The requested fsGroup is 2000, but the volume local-1 has GID 1000. \
                      The volume may not be shareable."
                .into()
        }]
    );
}

#[tokio::test]
async fn on_the_real_host_files_get_the_group_and_a_token_is_readable_by_its_user_and_group_only() {
    let dir = tempfile::tempdir().unwrap();
    let volumes = VolumeManager::new(dir.path().join("pods"), Arc::new(RealHost), REFRESH);
    let api = RecordingPodApi::default();
    api.config_maps.lock().insert(
        "settings".into(),
        BTreeMap::from([("k".into(), "v1".into())]),
    );
    let p = with_fs_group(
        pod(
            json!([{"name": "cfg", "configMap": {"name": "settings"}},
                   {"name": "scratch", "emptyDir": {}}]),
            json!([]),
        ),
        json!({"fsGroup": 2000}),
    );
    assert!(
        volumes
            .set_up(&api, &p, &BTreeMap::new(), at(0))
            .await
            .ready
    );
    let stat = |path: PathBuf| {
        let m = std::fs::metadata(path).unwrap();
        (m.gid(), m.permissions().mode() & 0o7777)
    };
    let cfg = volumes.plugin_dir("u1", config_map::PLUGIN, "cfg");
    let scratch = volumes.plugin_dir("u1", empty_dir::PLUGIN, "scratch");
    assert_eq!(stat(cfg.join("k")), (2000, 0o644));
    assert_eq!(stat(cfg.clone()), (2000, 0o2755));
    assert_eq!(stat(scratch.clone()), (2000, 0o2777));
    // the emptyDir keeps its setgid bit at a refresh; rewritten files get the group again
    api.config_maps.lock().insert(
        "settings".into(),
        BTreeMap::from([("k".into(), "v2".into())]),
    );
    assert!(
        volumes
            .set_up(&api, &p, &BTreeMap::new(), at(60))
            .await
            .ready
    );
    assert_eq!(std::fs::read_to_string(cfg.join("k")).unwrap(), "v2");
    assert_eq!(stat(cfg.join("k")), (2000, 0o644));
    assert_eq!(stat(scratch), (2000, 0o2777));

    // a token is written 0600 for the pod's user and becomes 0640 with the group, before it
    // is visible
    let token: Pod = with_fs_group(
        pod(
            json!([{"name": "sa", "projected": {"sources": [
                {"serviceAccountToken": {"path": "token"}}]}}]),
            json!([]),
        ),
        json!({"fsGroup": 2000, "runAsUser": 1000}),
    );
    // written as the manager writes it, less the tmpfs a unit test cannot mount
    let sa = volumes.plugin_dir("u1", projected::PLUGIN, "sa");
    let payload = projected::payload(
        &api,
        &token,
        &token.spec.as_ref().unwrap().volumes.as_ref().unwrap()[0]
            .projected
            .clone()
            .unwrap(),
        &BTreeMap::new(),
        &token::TokenCache::default(),
        at(0),
    )
    .await
    .unwrap();
    assert_eq!(payload["token"].mode, 0o600);
    let owner = owner(true, ChangePolicy::Always);
    assert!(atomic_writer::write(&sa, &payload, Some((&RealHost, &owner))).unwrap());
    assert_eq!(stat(sa.join("token")), (2000, 0o640));
    let owner_of = |path: PathBuf| std::fs::metadata(path).unwrap().uid();
    assert_eq!(owner_of(sa.join("token")), 1000);
    // written again unchanged: the mode the group gave it counts as the payload's
    assert!(!atomic_writer::write(&sa, &payload, Some((&RealHost, &owner))).unwrap());
    volumes.tear_down("u1").unwrap();
}

#[tokio::test]
async fn a_host_path_volume_whose_directory_cannot_be_made_fails_naming_the_volume_and_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let volumes = VolumeManager::new(dir.path().join("pods"), Arc::new(RealHost), REFRESH);
    let api = RecordingPodApi::default();
    let file = dir.path().join("file");
    std::fs::write(&file, "").unwrap();
    let bad = file.join("data").display().to_string();
    let good = dir.path().join("good").display().to_string();
    for (claim, volume, path) in [("bad", "bad-pv", &bad), ("good", "good-pv", &good)] {
        api.claims
            .lock()
            .insert(claim.into(), claim_object(claim, Some(volume), false));
        api.volumes.lock().insert(
            volume.into(),
            volume_object(
                volume,
                claim,
                json!({"hostPath": {"path": path, "type": "DirectoryOrCreate"}}),
            ),
        );
    }
    let p = pod(
        json!([{"name": "data", "persistentVolumeClaim": {"claimName": "bad"}}]),
        json!([]),
    );
    let result = volumes.set_up(&api, &p, &BTreeMap::new(), at(0)).await;
    assert!(!result.ready);
    assert_eq!(
        result.failures[0].to_string(),
        format!(
            "MountVolume.SetUp failed for volume \"bad-pv\" : mkdir {}: not a directory",
            file.display()
        )
    );
    // a local-path volume's directory that cannot be made fails the same way
    let mut v = api.volumes.lock()["bad-pv"].clone();
    v.metadata.annotations = Some(BTreeMap::from([(
        "pv.kubernetes.io/provisioned-by".to_string(),
        "skiff.dev/local-path".to_string(),
    )]));
    api.volumes.lock().insert("bad-pv".into(), v);
    let result = volumes.set_up(&api, &p, &BTreeMap::new(), at(10)).await;
    assert_eq!(
        result.failures[0].message,
        format!("mkdir {}: not a directory", file.display())
    );
    // another pod's good claim is not affected
    let mut other = pod(
        json!([{"name": "data", "persistentVolumeClaim": {"claimName": "good"}}]),
        json!([]),
    );
    other.metadata.uid = Some("u2".into());
    let result = volumes.set_up(&api, &other, &BTreeMap::new(), at(10)).await;
    assert!(result.ready && result.failures.is_empty(), "{result:?}");
    assert!(Path::new(&good).is_dir());
}
