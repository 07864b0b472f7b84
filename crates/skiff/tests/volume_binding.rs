//! The scheduler's volume binding end to end: a real `skiff apiserver`, `skiff controller-manager`
//! (the PersistentVolume binder, the local-path provisioner) and `skiff scheduler`, with nodes.
//!
//! On hollow nodes (no root needed): a pod whose `WaitForFirstConsumer` claim (a
//! `kubernetes.io/no-provisioner` class) only a static local volume pinned to one node can take
//! lands on that node, the scheduler points the volume at the claim and the binder binds it
//! (ten such pods at once each land on their own volume's node); a claim no volume fits keeps
//! its pod Pending with upstream's `didn't find available persistent volumes to bind`, and an
//! unbound `Immediate` claim with `pod has unbound immediate PersistentVolumeClaims`, each in
//! the `FailedScheduling` event and the `PodScheduled` condition (with upstream's double period
//! after preemption's message), until a volume for it appears.
//!
//! On hollow nodes too, a claim of the default class `local-path` is provisioned on the node
//! the scheduler picked, under the (notional) directory the hollow node publishes, binds, and
//! its pod runs; once the pod and the claim are deleted, the hollow node records the removal of
//! the volume's directory (which it never made) and deletes the volume.
//!
//! With a real kubelet and its containerd: a pod using a claim of the default class
//! `local-path` is scheduled, the claim gets the node as `selected-node`, the provisioner makes
//! its volume there, the claim binds and the pod runs and writes to it. Needs root (containerd,
//! CNI): skips otherwise, and fails instead under `CI=true`.

mod support;

use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::Api;
use kube::api::DeleteParams;
use serde_json::json;
use skiff_controllers::localpath::CLASS;
use support::cluster::{controller_manager, hollow_nodes, local_path_class, scheduler};
use support::node::{KubeletProcess, finished, unsupported};
use support::{ApiServer, Backend, KUBECTL_133, create, eventually, kube_client, run};

fn claim(name: &str, class: &str) -> serde_json::Value {
    json!({"metadata": {"name": name},
           "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": class,
                    "resources": {"requests": {"storage": "1Gi"}}}})
}

/// A pod mounting `claim` at `/data`, running `script` (on hollow nodes: running).
fn pod(name: &str, claim: &str, script: &str) -> serde_json::Value {
    json!({"metadata": {"name": name},
           "spec": {"restartPolicy": "Never", "automountServiceAccountToken": false,
                    "terminationGracePeriodSeconds": 1,
                    "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}],
                    "containers": [{"name": "c", "image": "busybox",
                                    "command": ["sh", "-c", script],
                                    "volumeMounts": [{"name": "data", "mountPath": "/data"}]}]}})
}

/// A static local volume of class `local-storage` on `node`.
fn local_volume(name: &str, node: &str) -> serde_json::Value {
    json!({"metadata": {"name": name},
           "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                    "persistentVolumeReclaimPolicy": "Retain",
                    "storageClassName": "local-storage",
                    "local": {"path": format!("/mnt/disks/{name}")},
                    "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                        {"key": "kubernetes.io/hostname", "operator": "In",
                         "values": [node]}]}]}}}})
}

async fn node_of(pods: &Api<Pod>, name: &str) -> Option<String> {
    pods.get(name).await.ok()?.spec?.node_name
}

async fn phase_of(pods: &Api<Pod>, name: &str) -> Option<String> {
    pods.get(name).await.ok()?.status?.phase
}

/// The claim's phase and volume once it is Bound.
async fn bound_to(claims: &Api<PersistentVolumeClaim>, name: &str) -> Option<String> {
    let c = claims.get(name).await.ok()?;
    (c.status?.phase.as_deref() == Some("Bound")).then_some(())?;
    c.spec?.volume_name
}

/// The message of the pod's `PodScheduled=False` condition, once the scheduler has set it.
async fn unschedulable(pods: &Api<Pod>, name: &str) -> Option<String> {
    let pod = pods.get(name).await.ok()?;
    pod.status?
        .conditions?
        .into_iter()
        .find(|c| c.type_ == "PodScheduled" && c.status == "False")?
        .message
}

/// Waits until the pod's PodScheduled=False condition and a FailedScheduling event say
/// `message`. A claim created just before its pod may not be in the scheduler's cache yet when
/// the pod's first attempt fails (`persistentvolumeclaim "…" not found`); the claim's arrival
/// requeues the pod.
async fn reported(api: &ApiServer, pods: &Api<Pod>, name: &str, message: &str) {
    eventually(
        &format!("{name} to be reported with {message:?}"),
        || async { (unschedulable(pods, name).await.as_deref() == Some(message)).then_some(()) },
    )
    .await;
    eventually(&format!("a FailedScheduling event for {name}"), || async {
        let events = failed_scheduling_events(api, name);
        events.lines().any(|e| e == message).then_some(())
    })
    .await;
}

/// The messages of the pod's FailedScheduling events, one a line.
fn failed_scheduling_events(api: &ApiServer, pod: &str) -> String {
    api.kubectl(
        KUBECTL_133,
        &[
            "get",
            "events",
            "--field-selector",
            &format!("involvedObject.name={pod},reason=FailedScheduling"),
            "-o",
            "jsonpath={range .items[*]}{.message}{\"\\n\"}{end}",
        ],
    )
}

#[test]
fn wait_for_first_consumer_claims_bind_static_local_volumes_on_the_nodes_they_pin() {
    let api = ApiServer::start(Backend::Embedded);
    let _cm = controller_manager(&api, &[]);
    let _scheduler = scheduler(&api);
    let _hollow = hollow_nodes(&api, "vb", 3);
    run(async {
        let c = kube_client(&api).await;
        let pods: Api<Pod> = Api::namespaced(c.clone(), "default");
        let claims: Api<PersistentVolumeClaim> = Api::namespaced(c.clone(), "default");
        let volumes: Api<PersistentVolume> = Api::all(c.clone());
        let classes: Api<StorageClass> = Api::all(c.clone());
        let nodes: Api<Node> = Api::all(c.clone());
        eventually("three hollow nodes", || async {
            (nodes.list(&Default::default()).await.ok()?.items.len() == 3).then_some(())
        })
        .await;
        create(
            &classes,
            json!({"metadata": {"name": "local-storage"},
                   "provisioner": "kubernetes.io/no-provisioner",
                   "volumeBindingMode": "WaitForFirstConsumer"}),
        )
        .await;

        // only the volume on vb-2 can take the claim: the pod goes there
        create(&volumes, local_volume("disk-a", "vb-2")).await;
        create(&claims, claim("data", "local-storage")).await;
        create(&pods, pod("app", "data", "sleep 3600")).await;
        let node = eventually("app to be scheduled", || node_of(&pods, "app")).await;
        assert_eq!(node, "vb-2");
        let volume = eventually("data to be bound", || bound_to(&claims, "data")).await;
        assert_eq!(volume, "disk-a");
        let pv = volumes.get("disk-a").await.unwrap();
        let claim_ref = pv.spec.unwrap().claim_ref.unwrap();
        assert_eq!(claim_ref.name.as_deref(), Some("data"));
        assert_eq!(
            pv.metadata.annotations.unwrap()["pv.kubernetes.io/bound-by-controller"],
            "yes"
        );
        eventually("app to run", || async {
            (phase_of(&pods, "app").await.as_deref() == Some("Running")).then_some(())
        })
        .await;

        // ten claims, ten volumes spread over the nodes: each pod goes where its volume is
        for i in 0..10 {
            let host = format!("vb-{}", i % 3);
            create(&volumes, local_volume(&format!("disk-{i}"), &host)).await;
            create(&claims, claim(&format!("many-{i}"), "local-storage")).await;
        }
        for i in 0..10 {
            create(
                &pods,
                pod(&format!("many-{i}"), &format!("many-{i}"), "sleep 3600"),
            )
            .await;
        }
        for i in 0..10 {
            let name = format!("many-{i}");
            let volume =
                eventually(&format!("{name} to be bound"), || bound_to(&claims, &name)).await;
            let pv = volumes.get(&volume).await.unwrap();
            let affinity = serde_json::to_value(pv.spec.unwrap().node_affinity).unwrap();
            let host =
                affinity["required"]["nodeSelectorTerms"][0]["matchExpressions"][0]["values"][0]
                    .as_str()
                    .unwrap()
                    .to_string();
            let node =
                eventually(&format!("{name} to be scheduled"), || node_of(&pods, &name)).await;
            assert_eq!(node, host, "{name} on {volume}");
        }

        // no volume left for this one, and its class provisions none
        create(&claims, claim("none-left", "local-storage")).await;
        create(&pods, pod("stuck", "none-left", "sleep 3600")).await;
        let message = "0/3 nodes are available: 3 node(s) didn't find available persistent \
             volumes to bind. preemption: 0/3 nodes are available: 3 Preemption is not helpful \
             for scheduling..";
        reported(&api, &pods, "stuck", message).await;

        // an Immediate claim the binder cannot bind keeps its pod out of every node
        create(&claims, claim("unbound", "")).await;
        create(&pods, pod("waiting", "unbound", "sleep 3600")).await;
        let message = "0/3 nodes are available: pod has unbound immediate PersistentVolumeClaims. \
             preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling..";
        reported(&api, &pods, "waiting", message).await;
        assert_eq!(node_of(&pods, "waiting").await, None);

        // a volume for it appears: the binder binds the claim and the pod is scheduled
        create(
            &volumes,
            json!({"metadata": {"name": "plain"},
                   "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                            "storageClassName": "",
                            "hostPath": {"path": "/var/lib/skiff-test/plain"}}}),
        )
        .await;
        eventually("waiting to be scheduled", || node_of(&pods, "waiting")).await;
    });
}

#[test]
fn local_path_claims_on_hollow_nodes_are_provisioned_under_their_directory_bind_and_run() {
    let api = ApiServer::start(Backend::Embedded);
    let _cm = controller_manager(&api, &[]);
    let _scheduler = scheduler(&api);
    let _hollow = hollow_nodes(&api, "lp", 2);
    run(async {
        let c = kube_client(&api).await;
        let pods: Api<Pod> = Api::namespaced(c.clone(), "default");
        let claims: Api<PersistentVolumeClaim> = Api::namespaced(c.clone(), "default");
        let volumes: Api<PersistentVolume> = Api::all(c.clone());
        let classes: Api<StorageClass> = Api::all(c.clone());
        let nodes: Api<Node> = Api::all(c.clone());
        eventually("two hollow nodes", || async {
            (nodes.list(&Default::default()).await.ok()?.items.len() == 2).then_some(())
        })
        .await;
        create(&classes, local_path_class()).await;
        let mut uids = Vec::new();
        for i in 0..4 {
            let created = create(&claims, claim(&format!("data-{i}"), CLASS)).await;
            uids.push(created.metadata.uid.unwrap());
            create(
                &pods,
                pod(&format!("app-{i}"), &format!("data-{i}"), "sleep 3600"),
            )
            .await;
        }
        for (i, uid) in uids.iter().enumerate() {
            let (name, claim_name) = (format!("app-{i}"), format!("data-{i}"));
            eventually(&format!("{name} to run"), || async {
                (phase_of(&pods, &name).await.as_deref() == Some("Running")).then_some(())
            })
            .await;
            let volume = eventually(&format!("{claim_name} to be bound"), || {
                bound_to(&claims, &claim_name)
            })
            .await;
            assert_eq!(volume, format!("pvc-{uid}"));
            let node = node_of(&pods, &name).await.unwrap();
            let published = nodes
                .get(&node)
                .await
                .unwrap()
                .metadata
                .annotations
                .unwrap()["skiff.dev/local-path-dir"]
                .clone();
            assert!(
                published.ends_with(&format!("/storage/{node}")),
                "{node} publishes {published}"
            );
            let pv = volumes.get(&volume).await.unwrap();
            let path = pv.spec.unwrap().host_path.unwrap().path;
            assert_eq!(path, format!("{published}/{volume}_default_{claim_name}"));
            assert!(
                !std::path::Path::new(&path).exists(),
                "a hollow node made {path}"
            );
        }

        // deleted: the pods, then the claims, whose volumes the hollow nodes delete
        for i in 0..4 {
            pods.delete(
                &format!("app-{i}"),
                &DeleteParams::default().grace_period(0),
            )
            .await
            .unwrap();
        }
        for i in 0..4 {
            claims
                .delete(&format!("data-{i}"), &DeleteParams::default())
                .await
                .unwrap();
        }
        for uid in &uids {
            let name = format!("pvc-{uid}");
            eventually(&format!("{name} to be deleted"), || async {
                matches!(volumes.get_opt(&name).await, Ok(None)).then_some(())
            })
            .await;
        }
    });
}

#[test]
fn a_local_path_claim_is_provisioned_on_the_node_the_scheduler_picked_and_its_pod_runs() {
    if let Some(why) = unsupported() {
        support::skip(&why);
        return;
    }
    const NODE: &str = "volume-binding-e2e";
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
        let created = create(&claims, claim("data", CLASS)).await;
        let uid = created.metadata.uid.unwrap();
        create(&pods, pod("writer", "data", "echo kept > /data/file")).await;

        let phase = eventually("writer to finish", || finished(&pods, "writer")).await;
        assert_eq!(phase, "Succeeded", "kubelet log:\n{}", kubelet.log());
        assert_eq!(node_of(&pods, "writer").await.as_deref(), Some(NODE));
        let bound = claims.get("data").await.unwrap();
        assert_eq!(
            bound.metadata.annotations.as_ref().unwrap()["volume.kubernetes.io/selected-node"],
            NODE
        );
        let name = format!("pvc-{uid}");
        assert_eq!(
            bound.spec.unwrap().volume_name.as_deref(),
            Some(name.as_str())
        );
        assert_eq!(bound.status.unwrap().phase.as_deref(), Some("Bound"));
        let dir = kubelet
            .data()
            .join("storage")
            .join(format!("{name}_default_data"));
        assert_eq!(support::read(&dir.join("file")), "kept\n");

        // cleaned up: the pod, then the claim, whose volume and directory go with it
        pods.delete("writer", &DeleteParams::default())
            .await
            .unwrap();
        eventually("writer to be gone", || async {
            matches!(pods.get_opt("writer").await, Ok(None)).then_some(())
        })
        .await;
        claims
            .delete("data", &DeleteParams::default())
            .await
            .unwrap();
        eventually("the volume to be deleted", || async {
            matches!(volumes.get_opt(&name).await, Ok(None)).then_some(())
        })
        .await;
        assert!(!dir.exists(), "{} is still there", dir.display());
    });
}
