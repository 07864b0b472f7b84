//! Generic ephemeral volumes end to end, on hollow nodes (no root needed): a real `skiff
//! apiserver`, `skiff controller-manager` (ephemeral-volume, the PersistentVolume binder, the
//! garbage collector, pvc-protection, and serviceaccount for the pods' admission) and `skiff
//! scheduler`.
//!
//! A pod with an ephemeral volume of a `WaitForFirstConsumer` class gets its claim
//! `<pod>-<volume>` from the template, owned by the pod; the scheduler puts the pod on the node
//! of the only static local volume that fits, the binder binds the claim to it, and the hollow
//! kubelet runs the pod with it. Deleting the pod deletes the claim (the garbage collector).
//! A claim of that name made beforehand, not owned by the pod, keeps the pod Pending: the
//! controller gives it upstream's `FailedBinding` warning and the scheduler upstream's
//! `(pod is not owner)` reason, and the claim is left as it was; once it is deleted, the pod
//! gets its own claim and is scheduled. Without the ephemeral-volume controller, the pod waits
//! with the scheduler's upstream reason `waiting for ephemeral volume controller to create the
//! persistentvolumeclaim "…"`.
//!
//! With a real kubelet and its containerd (all the default controllers): a pod whose ephemeral
//! volume is of the default class `local-path` gets its claim, which is provisioned on the
//! pod's node; the pod writes to it and finishes, and deleting the pod deletes the claim, its
//! volume and the volume's directory. Needs root (containerd, CNI): skips otherwise, and fails
//! instead under `CI=true`.

mod support;

use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::Api;
use kube::api::DeleteParams;
use serde_json::json;
use skiff_controllers::localpath::CLASS;
use support::cluster::{controller_manager, hollow_nodes, local_path_class, scheduler};
use support::node::{KubeletProcess, finished, unsupported};
use support::{ApiServer, Backend, create, eventually, kube_client, run};

const CONTROLLERS: &str =
    "ephemeral-volume,persistentvolume-binder,garbagecollector,pvc-protection,serviceaccount";

/// A pod with the generic ephemeral volume `scratch` of class `local-storage`, mounted at
/// `/scratch`, that sleeps.
fn pod(name: &str) -> serde_json::Value {
    pod_of_class(name, "local-storage", "sleep 3600")
}

/// A pod with the generic ephemeral volume `scratch` of `class`, mounted at `/scratch`, running
/// `script`.
fn pod_of_class(name: &str, class: &str, script: &str) -> serde_json::Value {
    json!({"metadata": {"name": name},
           "spec": {"restartPolicy": "Never", "automountServiceAccountToken": false,
                    "terminationGracePeriodSeconds": 1,
                    "volumes": [{"name": "scratch", "ephemeral": {"volumeClaimTemplate": {
                        "metadata": {"labels": {"app": name},
                                     "annotations": {"example.com/purpose": "scratch"}},
                        "spec": {"accessModes": ["ReadWriteOnce"],
                                 "storageClassName": class,
                                 "resources": {"requests": {"storage": "1Gi"}}}}}}],
                    "containers": [{"name": "c", "image": "busybox",
                                    "command": ["sh", "-c", script],
                                    "volumeMounts": [{"name": "scratch",
                                                      "mountPath": "/scratch"}]}]}})
}

/// The no-provisioner `WaitForFirstConsumer` class `local-storage`, and its static local
/// volume `name` pinned to `node`.
async fn local_storage(c: &kube::Client, name: &str, node: &str) {
    let classes: Api<StorageClass> = Api::all(c.clone());
    let volumes: Api<PersistentVolume> = Api::all(c.clone());
    create(
        &classes,
        json!({"metadata": {"name": "local-storage"},
               "provisioner": "kubernetes.io/no-provisioner",
               "volumeBindingMode": "WaitForFirstConsumer"}),
    )
    .await;
    create(
        &volumes,
        json!({"metadata": {"name": name},
               "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                        "persistentVolumeReclaimPolicy": "Retain",
                        "storageClassName": "local-storage",
                        "local": {"path": format!("/mnt/disks/{name}")},
                        "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                            {"key": "kubernetes.io/hostname", "operator": "In",
                             "values": [node]}]}]}}}}),
    )
    .await;
}

async fn wait_for_nodes(c: &kube::Client, count: usize) {
    let nodes: Api<Node> = Api::all(c.clone());
    eventually("the hollow nodes", || async {
        (nodes.list(&Default::default()).await.ok()?.items.len() == count).then_some(())
    })
    .await;
}

#[test]
fn an_ephemeral_volume_gets_a_claim_owned_by_its_pod_bound_where_it_runs_and_deleted_with_it() {
    let api = ApiServer::start(Backend::Embedded);
    let _cm = controller_manager(&api, &["--controllers", CONTROLLERS]);
    let _scheduler = scheduler(&api);
    let _hollow = hollow_nodes(&api, "eph", 2);
    run(async {
        let c = kube_client(&api).await;
        let pods: Api<Pod> = Api::namespaced(c.clone(), "default");
        let claims: Api<PersistentVolumeClaim> = Api::namespaced(c.clone(), "default");
        wait_for_nodes(&c, 2).await;
        local_storage(&c, "disk-a", "eph-1").await;

        let created = create(&pods, pod("app")).await;
        let uid = created.metadata.uid.unwrap();

        // the claim, from the template, owned by the pod
        let claim = eventually("the claim app-scratch", || async {
            claims.get_opt("app-scratch").await.ok()?
        })
        .await;
        let meta = serde_json::to_value(&claim.metadata).unwrap();
        assert_eq!(
            meta["ownerReferences"],
            json!([{"apiVersion": "v1", "kind": "Pod", "name": "app", "uid": uid,
                    "controller": true, "blockOwnerDeletion": true}])
        );
        assert_eq!(meta["labels"], json!({"app": "app"}));
        assert_eq!(meta["annotations"]["example.com/purpose"], json!("scratch"));
        let spec = claim.spec.unwrap();
        assert_eq!(spec.storage_class_name.as_deref(), Some("local-storage"));

        // scheduled where its volume is, the claim bound to it, and running there
        let node = eventually("app to be scheduled", || async {
            pods.get("app").await.ok()?.spec?.node_name
        })
        .await;
        assert_eq!(node, "eph-1");
        let bound = eventually("app-scratch to be bound", || async {
            let c = claims.get("app-scratch").await.ok()?;
            (c.status?.phase.as_deref() == Some("Bound")).then_some(())?;
            c.spec?.volume_name
        })
        .await;
        assert_eq!(bound, "disk-a");
        eventually("app to run", || async {
            let phase = pods.get("app").await.ok()?.status?.phase;
            (phase.as_deref() == Some("Running")).then_some(())
        })
        .await;

        // the pod goes, and the garbage collector deletes its claim
        pods.delete("app", &DeleteParams::default()).await.unwrap();
        eventually("app to be gone", || async {
            matches!(pods.get_opt("app").await, Ok(None)).then_some(())
        })
        .await;
        eventually("app-scratch to be deleted", || async {
            matches!(claims.get_opt("app-scratch").await, Ok(None)).then_some(())
        })
        .await;
    });
}

#[test]
fn a_claim_of_that_name_not_owned_by_the_pod_keeps_it_pending_with_a_failed_binding_warning() {
    let api = ApiServer::start(Backend::Embedded);
    let _cm = controller_manager(&api, &["--controllers", CONTROLLERS]);
    let _scheduler = scheduler(&api);
    let _hollow = hollow_nodes(&api, "squat", 2);
    run(async {
        let c = kube_client(&api).await;
        let pods: Api<Pod> = Api::namespaced(c.clone(), "default");
        let claims: Api<PersistentVolumeClaim> = Api::namespaced(c.clone(), "default");
        wait_for_nodes(&c, 2).await;
        local_storage(&c, "disk-a", "squat-0").await;
        create(
            &claims,
            json!({"metadata": {"name": "app-scratch"},
                   "spec": {"accessModes": ["ReadWriteOnce"],
                            "storageClassName": "local-storage",
                            "resources": {"requests": {"storage": "1Gi"}}}}),
        )
        .await;

        create(&pods, pod("app")).await;
        let not_owner = "PVC default/app-scratch was not created for pod default/app \
                         (pod is not owner)";
        // the controller's claim informer may not have the claim yet when the pod arrives: its
        // create then fails with AlreadyExists, and the retry finds the claim is not the pod's
        let expected = format!("ephemeral volume scratch: {not_owner}");
        eventually("the FailedBinding event naming the owner", || async {
            api.event_messages("app", "FailedBinding")
                .contains(&expected)
                .then_some(())
        })
        .await;
        // the scheduler may try the pod before its informer has the claim ("waiting for
        // ephemeral volume controller to create ..."); the claim's arrival requeues it
        eventually("app to be reported unschedulable for the claim", || async {
            let pod = pods.get("app").await.ok()?;
            pod.status?
                .conditions?
                .into_iter()
                .find(|c| c.type_ == "PodScheduled" && c.status == "False")?
                .message
                .filter(|m| m.contains(not_owner))
        })
        .await;
        let pod = pods.get("app").await.unwrap();
        assert_eq!(pod.spec.unwrap().node_name, None);
        assert_eq!(pod.status.unwrap().phase.as_deref(), Some("Pending"));
        // the claim is still nobody's, and not bound to the pod's would-be node
        let claim = claims.get("app-scratch").await.unwrap();
        assert_eq!(claim.metadata.owner_references, None);
        assert_eq!(claim.spec.unwrap().volume_name, None);

        // once that claim is deleted (no scheduled pod uses it), the pod gets its own and runs
        claims
            .delete("app-scratch", &DeleteParams::default())
            .await
            .unwrap();
        let uid = pods.get("app").await.unwrap().metadata.uid.unwrap();
        eventually("the pod's own claim app-scratch", || async {
            let claim = claims.get_opt("app-scratch").await.ok()??;
            let owner = claim.metadata.owner_references?.into_iter().next()?;
            (owner.uid == uid).then_some(())
        })
        .await;
        let node = eventually("app to be scheduled", || async {
            pods.get("app").await.ok()?.spec?.node_name
        })
        .await;
        assert_eq!(node, "squat-0");
    });
}

#[test]
fn a_local_path_ephemeral_volume_is_provisioned_on_the_pods_node_and_goes_with_the_pod() {
    if let Some(why) = unsupported() {
        support::skip(&why);
        return;
    }
    const NODE: &str = "ephemeral-e2e";
    let api = ApiServer::start(Backend::Embedded);
    let _cm = controller_manager(&api, &[]);
    let _scheduler = scheduler(&api);
    let kubelet = KubeletProcess::start(&api, NODE);
    run(async {
        let c = kube_client(&api).await;
        let pods: Api<Pod> = Api::namespaced(c.clone(), "default");
        let claims: Api<PersistentVolumeClaim> = Api::namespaced(c.clone(), "default");
        let volumes: Api<PersistentVolume> = Api::all(c.clone());
        let classes: Api<StorageClass> = Api::all(c.clone());
        // the class `skiff server` applies
        create(&classes, local_path_class()).await;
        create(
            &pods,
            pod_of_class("writer", CLASS, "echo kept > /scratch/file"),
        )
        .await;

        let phase = eventually("writer to finish", || finished(&pods, "writer")).await;
        assert_eq!(phase, "Succeeded", "kubelet log:\n{}", kubelet.log());
        let claim = claims.get("writer-scratch").await.unwrap();
        assert_eq!(
            claim.metadata.annotations.as_ref().unwrap()["volume.kubernetes.io/selected-node"],
            NODE
        );
        let uid = claim.metadata.uid.unwrap();
        let name = format!("pvc-{uid}");
        assert_eq!(
            claim.spec.unwrap().volume_name.as_deref(),
            Some(name.as_str())
        );
        let dir = kubelet
            .data()
            .join("storage")
            .join(format!("{name}_default_writer-scratch"));
        assert_eq!(support::read(&dir.join("file")), "kept\n");

        // the pod goes: its claim is collected, and the volume and its directory with it
        pods.delete("writer", &DeleteParams::default())
            .await
            .unwrap();
        eventually("writer-scratch to be deleted", || async {
            matches!(claims.get_opt("writer-scratch").await, Ok(None)).then_some(())
        })
        .await;
        eventually("the volume to be deleted", || async {
            matches!(volumes.get_opt(&name).await, Ok(None)).then_some(())
        })
        .await;
        assert!(!dir.exists(), "{} is still there", dir.display());
    });
}

#[test]
fn without_the_controller_the_pod_waits_for_its_claim_with_upstreams_reason() {
    let api = ApiServer::start(Backend::Embedded);
    let _cm = controller_manager(
        &api,
        &["--controllers", "persistentvolume-binder,serviceaccount"],
    );
    let _scheduler = scheduler(&api);
    let _hollow = hollow_nodes(&api, "none", 1);
    run(async {
        let c = kube_client(&api).await;
        let pods: Api<Pod> = Api::namespaced(c.clone(), "default");
        wait_for_nodes(&c, 1).await;
        create(&pods, pod("app")).await;
        let reason = eventually("app to be reported unschedulable", || async {
            let pod = pods.get("app").await.ok()?;
            pod.status?
                .conditions?
                .into_iter()
                .find(|c| c.type_ == "PodScheduled" && c.status == "False")?
                .message
        })
        .await;
        assert_eq!(
            reason,
            "0/1 nodes are available: waiting for ephemeral volume controller to create the \
             persistentvolumeclaim \"app-scratch\". preemption: 0/1 nodes are available: 1 \
             Preemption is not helpful for scheduling.."
        );
        assert_eq!(api.event_message("app", "FailedScheduling"), reason);
    });
}
