//! A StatefulSet with a claim template on real containers: a real `skiff apiserver`,
//! `skiff scheduler` (volume binding), `skiff controller-manager` (every default controller:
//! the StatefulSet controller, the PersistentVolume binder, the local-path provisioner, the
//! protection controllers) and a `skiff kubelet` with its managed containerd. Three replicas
//! each get a local-path volume and write their name into it; a deleted pod's successor reads
//! what its predecessor wrote; scaling down keeps the claims (the default retention policy);
//! deleting the claims deletes their volumes and the volumes' directories. Needs root
//! (containerd, CNI): skips otherwise, and fails instead under `CI=true`.

mod support;

use std::path::{Path, PathBuf};

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams};
use serde_json::json;
use skiff_controllers::localpath::CLASS;
use support::cluster::{controller_manager, local_path_class, scheduler};
use support::node::{KubeletProcess, unsupported};
use support::{ApiServer, Backend, create, eventually, kube_client, run};

const NODE: &str = "sts-volumes-e2e";

/// Each pod writes its name into its volume the first time, and copies what it finds there
/// into `read-back` every time after.
const SCRIPT: &str = "if [ -f /data/name ]; then cp /data/name /data/read-back; \
                      else hostname > /data/name; fi; exec sleep 3600";

fn statefulset(replicas: i32) -> serde_json::Value {
    json!({
        "metadata": {"name": "db"},
        "spec": {
            "replicas": replicas,
            "serviceName": "db",
            "podManagementPolicy": "Parallel",
            "selector": {"matchLabels": {"app": "db"}},
            "template": {
                "metadata": {"labels": {"app": "db"}},
                "spec": {
                    "automountServiceAccountToken": false,
                    "terminationGracePeriodSeconds": 1,
                    "containers": [{"name": "c", "image": "busybox",
                                    "command": ["sh", "-c", SCRIPT],
                                    "volumeMounts": [{"name": "data", "mountPath": "/data"}]}],
                },
            },
            "volumeClaimTemplates": [{
                "metadata": {"name": "data"},
                "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": CLASS,
                         "resources": {"requests": {"storage": "1Gi"}}},
            }],
        },
    })
}

async fn ready_replicas(sets: &Api<StatefulSet>) -> i32 {
    let set = sets.get("db").await.unwrap();
    set.status.and_then(|s| s.ready_replicas).unwrap_or(0)
}

/// The directory of the volume bound to `claim`, once it is bound.
async fn volume_dir(
    claims: &Api<PersistentVolumeClaim>,
    storage: &Path,
    claim: &str,
) -> Option<PathBuf> {
    let c = claims.get(claim).await.ok()?;
    let volume = c.spec?.volume_name.filter(|v| !v.is_empty())?;
    Some(storage.join(format!("{volume}_default_{claim}")))
}

#[test]
fn a_statefulsets_claims_keep_each_replicas_data_across_pods_and_scale_down() {
    if let Some(why) = unsupported() {
        support::skip(&why);
        return;
    }
    let api = ApiServer::start(Backend::Embedded);
    let _cm = controller_manager(&api, &[]);
    let _scheduler = scheduler(&api);
    let kubelet = KubeletProcess::start(&api, NODE);
    run(async {
        let c = kube_client(&api).await;
        let sets: Api<StatefulSet> = Api::namespaced(c.clone(), "default");
        let pods: Api<Pod> = Api::namespaced(c.clone(), "default");
        let claims: Api<PersistentVolumeClaim> = Api::namespaced(c.clone(), "default");
        let volumes: Api<PersistentVolume> = Api::all(c.clone());
        let classes: Api<StorageClass> = Api::all(c.clone());
        let storage = kubelet.data().join("storage");

        // the class `skiff server` applies
        create(&classes, local_path_class()).await;
        create(&sets, statefulset(3)).await;
        eventually("three ready replicas", || async {
            (ready_replicas(&sets).await == 3).then_some(())
        })
        .await;

        // each replica has its own bound claim, and its volume holds what the replica wrote
        let mut dirs = Vec::new();
        for i in 0..3 {
            let claim = format!("data-db-{i}");
            let dir = eventually(&format!("{claim} to be bound"), || {
                volume_dir(&claims, &storage, &claim)
            })
            .await;
            let name = dir.join("name");
            eventually(&format!("db-{i} to write its name"), || async {
                std::fs::read_to_string(&name).ok()
            })
            .await;
            assert_eq!(
                support::read(&name),
                format!("db-{i}\n"),
                "kubelet log:\n{}",
                kubelet.log()
            );
            dirs.push(dir);
        }

        // a deleted pod's successor mounts the same volume and reads its predecessor's data
        let old_uid = pods.get("db-1").await.unwrap().metadata.uid.unwrap();
        pods.delete("db-1", &DeleteParams::default()).await.unwrap();
        eventually("db-1's successor to run", || async {
            let pod = pods.get_opt("db-1").await.ok()??;
            let running = pod.status?.phase.as_deref() == Some("Running");
            (running && pod.metadata.uid.as_deref() != Some(&old_uid)).then_some(())
        })
        .await;
        let read_back = dirs[1].join("read-back");
        eventually("db-1's successor to read the volume", || async {
            std::fs::read_to_string(&read_back).ok()
        })
        .await;
        assert_eq!(support::read(&read_back), "db-1\n");

        // scaling down removes the pods from the top and keeps every claim
        sets.patch(
            "db",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 1}})),
        )
        .await
        .unwrap();
        for gone in ["db-1", "db-2"] {
            eventually(&format!("{gone} to be gone"), || async {
                matches!(pods.get_opt(gone).await, Ok(None)).then_some(())
            })
            .await;
        }
        for i in 0..3 {
            let claim = claims.get(&format!("data-db-{i}")).await.unwrap();
            assert_eq!(claim.status.unwrap().phase.as_deref(), Some("Bound"));
        }
        assert!(dirs[2].join("name").exists());

        // deleting the scaled-away claims deletes their volumes and then their directories
        for i in [1, 2] {
            let claim = format!("data-db-{i}");
            let volume = claims
                .get(&claim)
                .await
                .unwrap()
                .spec
                .unwrap()
                .volume_name
                .unwrap();
            claims
                .delete(&claim, &DeleteParams::default())
                .await
                .unwrap();
            eventually(&format!("{volume} to be deleted"), || async {
                matches!(volumes.get_opt(&volume).await, Ok(None)).then_some(())
            })
            .await;
            assert!(!dirs[i].exists(), "{} is still there", dirs[i].display());
        }
        // the replica left keeps its data
        assert_eq!(support::read(&dirs[0].join("name")), "db-0\n");

        // torn down before the kubelet goes: the set, its last pod and claim
        sets.delete("db", &DeleteParams::default()).await.unwrap();
        pods.delete("db-0", &DeleteParams::default()).await.unwrap();
        eventually("db-0 to be gone", || async {
            matches!(pods.get_opt("db-0").await, Ok(None)).then_some(())
        })
        .await;
    });
}
