//! The storage, workload, autoscaling, networking and node kinds added beside the original
//! ones, against a real `skiff apiserver` with unmodified kubectl 1.33 and kube-rs: discovery
//! rows, create (client-side and server-side apply), table headers as upstream prints them,
//! defaults, validation errors, patches, watches, explain and deletion.

mod support;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{
    DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams,
};
use kube::{Api, ResourceExt};
use serde_json::json;
use support::{
    ApiServer, Backend, KUBECTL_127, KUBECTL_133, eventually, expect_line, kube_client, run,
};

const STORAGE: &str = r#"
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: fast
  annotations: {storageclass.kubernetes.io/is-default-class: "true"}
provisioner: example.com/ssd
parameters: {type: ssd}
---
apiVersion: v1
kind: PersistentVolume
metadata:
  name: pv-1
spec:
  capacity: {storage: 5Gi}
  accessModes: [ReadWriteOnce]
  storageClassName: fast
  hostPath: {path: /data/pv-1}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: data
spec:
  accessModes: [ReadWriteOnce]
  storageClassName: fast
  resources: {requests: {storage: 1Gi}}
"#;

const CSI: &str = r#"
apiVersion: storage.k8s.io/v1
kind: CSIDriver
metadata: {name: csi.example.com}
spec: {}
---
apiVersion: storage.k8s.io/v1
kind: CSINode
metadata: {name: node-1}
spec:
  drivers: [{name: csi.example.com, nodeID: node-1}]
---
apiVersion: storage.k8s.io/v1
kind: VolumeAttachment
metadata: {name: va-1}
spec:
  attacher: csi.example.com
  nodeName: node-1
  source: {persistentVolumeName: pv-1}
---
apiVersion: storage.k8s.io/v1
kind: CSIStorageCapacity
metadata: {name: cap-1}
storageClassName: fast
capacity: 100Gi
"#;

/// The header of a `kubectl get` table, one entry per column (`ACCESS MODES` stays whole).
fn header(table: &str) -> Vec<String> {
    let line = table.lines().next().unwrap_or("");
    line.split("  ")
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

/// The row of `name` in a `kubectl get` table.
fn row<'a>(table: &'a str, name: &str) -> &'a str {
    table
        .lines()
        .find(|l| l.starts_with(&format!("{name} ")))
        .unwrap_or_else(|| panic!("no row {name} in {table}"))
}

/// `kubectl api-resources` lists each new kind with its short names, group version, scope and
/// kind.
#[test]
fn api_resources_lists_the_new_kinds() {
    let api = ApiServer::start(Backend::Embedded);
    for kubectl in [KUBECTL_133, KUBECTL_127] {
        api_resources(&api, kubectl);
    }
}

fn api_resources(api: &ApiServer, kubectl: &str) {
    let out = api.kubectl(kubectl, &["api-resources"]);
    for (plural, short, version, namespaced, kind) in [
        (
            "persistentvolumeclaims",
            "pvc",
            "v1",
            "true",
            "PersistentVolumeClaim",
        ),
        ("persistentvolumes", "pv", "v1", "false", "PersistentVolume"),
        (
            "storageclasses",
            "sc",
            "storage.k8s.io/v1",
            "false",
            "StorageClass",
        ),
        ("csidrivers", "", "storage.k8s.io/v1", "false", "CSIDriver"),
        ("csinodes", "", "storage.k8s.io/v1", "false", "CSINode"),
        (
            "csistoragecapacities",
            "",
            "storage.k8s.io/v1",
            "true",
            "CSIStorageCapacity",
        ),
        (
            "volumeattachments",
            "",
            "storage.k8s.io/v1",
            "false",
            "VolumeAttachment",
        ),
    ] {
        let cells: Vec<&str> = row(&out, plural).split_whitespace().collect();
        let want: Vec<&str> = [plural, short, version, namespaced, kind]
            .into_iter()
            .filter(|c| !c.is_empty())
            .collect();
        assert_eq!(cells, want, "{out}");
    }
}

/// PersistentVolumes, claims and classes through kubectl: apply, tables, defaults, the
/// protection finalizer, validation, the immutable claim spec, explain, server-side apply and a
/// finalized delete.
#[test]
fn volumes_claims_and_classes_through_kubectl() {
    let api = ApiServer::start(Backend::Embedded);
    let k = KUBECTL_133;
    let applied = api.kubectl_stdin(k, &["apply", "-f", "-"], Some(STORAGE));
    assert_eq!(
        applied.lines().collect::<Vec<_>>(),
        [
            "storageclass.storage.k8s.io/fast created",
            "persistentvolume/pv-1 created",
            "persistentvolumeclaim/data created"
        ]
    );
    let again = api.kubectl_stdin(k, &["apply", "-f", "-"], Some(STORAGE));
    assert!(
        again.contains("persistentvolumeclaim/data unchanged"),
        "{again}"
    );

    let pvcs = api.kubectl(k, &["get", "pvc"]);
    assert_eq!(
        header(&pvcs),
        [
            "NAME",
            "STATUS",
            "VOLUME",
            "CAPACITY",
            "ACCESS MODES",
            "STORAGECLASS",
            "VOLUMEATTRIBUTESCLASS",
            "AGE"
        ]
    );
    let cells: Vec<&str> = row(&pvcs, "data").split_whitespace().collect();
    assert_eq!(cells[..4], ["data", "Pending", "fast", "<unset>"], "{pvcs}");
    let wide = api.kubectl(k, &["get", "pvc", "-o", "wide"]);
    assert!(header(&wide).contains(&"VOLUMEMODE".to_string()), "{wide}");
    assert!(row(&wide, "data").contains("Filesystem"), "{wide}");

    let pvs = api.kubectl(k, &["get", "pv"]);
    assert_eq!(
        header(&pvs),
        [
            "NAME",
            "CAPACITY",
            "ACCESS MODES",
            "RECLAIM POLICY",
            "STATUS",
            "CLAIM",
            "STORAGECLASS",
            "VOLUMEATTRIBUTESCLASS",
            "REASON",
            "AGE"
        ]
    );
    let cells: Vec<&str> = row(&pvs, "pv-1").split_whitespace().collect();
    assert_eq!(
        cells[..6],
        ["pv-1", "5Gi", "RWO", "Retain", "Pending", "fast"],
        "{pvs}"
    );

    let classes = api.kubectl(k, &["get", "sc"]);
    assert_eq!(
        header(&classes),
        [
            "NAME",
            "PROVISIONER",
            "RECLAIMPOLICY",
            "VOLUMEBINDINGMODE",
            "ALLOWVOLUMEEXPANSION",
            "AGE"
        ]
    );
    let cells: Vec<&str> = row(&classes, "fast").split_whitespace().collect();
    assert_eq!(
        cells[..6],
        [
            "fast",
            "(default)",
            "example.com/ssd",
            "Delete",
            "Immediate",
            "false"
        ],
        "{classes}"
    );

    let claim: serde_json::Value =
        serde_json::from_str(&api.kubectl(k, &["get", "pvc", "data", "-o", "json"])).unwrap();
    assert_eq!(claim["spec"]["volumeMode"], "Filesystem");
    assert_eq!(claim["status"]["phase"], "Pending");
    assert_eq!(
        claim["metadata"]["finalizers"],
        json!(["kubernetes.io/pvc-protection"])
    );
    assert!(claim["metadata"].get("generation").is_none(), "{claim}");
    let volume: serde_json::Value =
        serde_json::from_str(&api.kubectl(k, &["get", "pv", "pv-1", "-o", "json"])).unwrap();
    assert_eq!(
        volume["metadata"]["finalizers"],
        json!(["kubernetes.io/pv-protection"])
    );
    assert_eq!(volume["spec"]["volumeMode"], "Filesystem");
    assert_eq!(volume["spec"]["persistentVolumeReclaimPolicy"], "Retain");

    // DefaultStorageClass: a claim naming no class gets the default one.
    let classless = r#"{"apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": "plain"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}"#;
    api.kubectl_stdin(k, &["create", "-f", "-"], Some(classless));
    let class = api.kubectl(
        k,
        &[
            "get",
            "pvc",
            "plain",
            "-o",
            "jsonpath={.spec.storageClassName}",
        ],
    );
    assert_eq!(class, "fast");

    let bad = r#"{"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                  "metadata": {"name": "bad"}, "spec": {"resources": {}}}"#;
    let refused = api.kubectl_fails(k, &["create", "-f", "-"], Some(bad));
    assert!(
        refused.contains("The PersistentVolumeClaim \"bad\" is invalid")
            && refused
                .contains("spec.accessModes: Required value: at least 1 access mode is required")
            && refused.contains("spec.resources[storage]: Required value"),
        "{refused}"
    );
    let grown = api.kubectl_fails(
        k,
        &[
            "patch",
            "pvc",
            "data",
            "--type=merge",
            "-p",
            r#"{"spec":{"resources":{"requests":{"storage":"2Gi"}}}}"#,
        ],
        None,
    );
    assert!(
        grown.contains("spec: Forbidden: spec is immutable after creation except resources.requests and volumeAttributesClassName for bound claims"),
        "{grown}"
    );
    let changed = api.kubectl_fails(
        k,
        &[
            "patch",
            "sc",
            "fast",
            "--type=merge",
            "-p",
            r#"{"parameters":{"type":"hdd"}}"#,
        ],
        None,
    );
    assert!(
        changed.contains("parameters: Forbidden: updates to parameters are forbidden."),
        "{changed}"
    );

    let ssa = r#"{"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                  "metadata": {"name": "data", "labels": {"tier": "db"}},
                  "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "fast",
                           "resources": {"requests": {"storage": "1Gi"}}}}"#;
    let out = api.kubectl_stdin(
        k,
        &["apply", "--server-side", "--force-conflicts", "-f", "-"],
        Some(ssa),
    );
    assert_eq!(out.trim(), "persistentvolumeclaim/data serverside-applied");
    let labelled = api.kubectl(k, &["get", "pvc", "-l", "tier=db", "-o", "name"]);
    assert_eq!(labelled.trim(), "persistentvolumeclaim/data");

    let explain = api.kubectl(k, &["explain", "pvc.spec"]);
    assert!(
        explain.contains("accessModes") && explain.contains("storageClassName"),
        "{explain}"
    );
    let explain = api.kubectl(k, &["explain", "sc"]);
    assert!(explain.contains("provisioner"), "{explain}");

    // The protection finalizer holds the claim until it is removed (no controller here).
    api.kubectl(k, &["delete", "pvc", "data", "--wait=false"]);
    let terminating = api.kubectl(k, &["get", "pvc", "data"]);
    assert!(
        row(&terminating, "data").contains("Terminating"),
        "{terminating}"
    );
    api.kubectl(
        k,
        &[
            "patch",
            "pvc",
            "data",
            "--type=json",
            "-p",
            r#"[{"op":"remove","path":"/metadata/finalizers"}]"#,
        ],
    );
    let gone = api.kubectl_fails(k, &["get", "pvc", "data"], None);
    assert!(
        gone.contains("persistentvolumeclaims \"data\" not found"),
        "{gone}"
    );
}

/// The CSI kinds and volume attachments: created with kubectl, defaults, tables.
#[test]
fn csi_kinds_and_volume_attachments_through_kubectl() {
    let api = ApiServer::start(Backend::Embedded);
    let k = KUBECTL_133;
    let created = api.kubectl_stdin(k, &["create", "-f", "-"], Some(CSI));
    assert_eq!(
        created.lines().collect::<Vec<_>>(),
        [
            "csidriver.storage.k8s.io/csi.example.com created",
            "csinode.storage.k8s.io/node-1 created",
            "volumeattachment.storage.k8s.io/va-1 created",
            "csistoragecapacity.storage.k8s.io/cap-1 created"
        ]
    );
    let drivers = api.kubectl(k, &["get", "csidrivers"]);
    assert_eq!(
        header(&drivers),
        [
            "NAME",
            "ATTACHREQUIRED",
            "PODINFOONMOUNT",
            "STORAGECAPACITY",
            "TOKENREQUESTS",
            "REQUIRESREPUBLISH",
            "MODES",
            "AGE"
        ]
    );
    let cells: Vec<&str> = row(&drivers, "csi.example.com")
        .split_whitespace()
        .collect();
    assert_eq!(
        cells[..7],
        [
            "csi.example.com",
            "true",
            "false",
            "false",
            "<unset>",
            "false",
            "Persistent"
        ],
        "{drivers}"
    );
    let nodes = api.kubectl(k, &["get", "csinodes"]);
    assert_eq!(header(&nodes), ["NAME", "DRIVERS", "AGE"]);
    assert!(
        row(&nodes, "node-1").split_whitespace().nth(1) == Some("1"),
        "{nodes}"
    );
    let attachments = api.kubectl(k, &["get", "volumeattachments"]);
    assert_eq!(
        header(&attachments),
        ["NAME", "ATTACHER", "PV", "NODE", "ATTACHED", "AGE"]
    );
    let cells: Vec<&str> = row(&attachments, "va-1").split_whitespace().collect();
    assert_eq!(
        cells[..5],
        ["va-1", "csi.example.com", "pv-1", "node-1", "false"]
    );
    let capacities = api.kubectl(k, &["get", "csistoragecapacities"]);
    assert_eq!(
        header(&capacities),
        ["NAME", "STORAGECLASSNAME", "CAPACITY", "AGE"]
    );
    let cells: Vec<&str> = row(&capacities, "cap-1").split_whitespace().collect();
    assert_eq!(cells[..3], ["cap-1", "fast", "100Gi"]);
    let moved = api.kubectl_fails(
        k,
        &[
            "patch",
            "volumeattachment",
            "va-1",
            "--type=merge",
            "-p",
            r#"{"spec":{"nodeName":"node-2"}}"#,
        ],
        None,
    );
    assert!(moved.contains("field is immutable"), "{moved}");
    api.kubectl(
        k,
        &[
            "patch",
            "volumeattachment",
            "va-1",
            "--subresource=status",
            "--type=merge",
            "-p",
            r#"{"status":{"attached":true}}"#,
        ],
    );
    let attachments = api.kubectl(k, &["get", "volumeattachments"]);
    assert!(row(&attachments, "va-1").contains("true"), "{attachments}");
}

/// `kubectl get pvc --watch` sees a claim added and deleted.
#[test]
fn kubectl_watches_claims() {
    let api = ApiServer::start(Backend::Embedded);
    let (mut child, lines) = api.kubectl_stream(
        KUBECTL_133,
        &["get", "pvc", "--watch", "--output-watch-events"],
    );
    let claim = r#"{"apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": "w", "finalizers": []},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}"#;
    api.kubectl_stdin(KUBECTL_133, &["create", "-f", "-"], Some(claim));
    expect_line(&lines, |l| {
        l.starts_with("ADDED") && l.contains(" w ") && l.contains("Pending")
    });
    child.kill().ok();
    child.wait().ok();
}

/// kube-rs typed APIs: create, get, list, watch, patch, status, a 422 with upstream's cause, and
/// delete, for claims, volumes and classes.
#[test]
fn typed_clients_read_and_write_the_storage_kinds() {
    let api = ApiServer::start(Backend::Embedded);
    run(async {
        let client = kube_client(&api).await;
        let classes: Api<StorageClass> = Api::all(client.clone());
        let class: StorageClass = serde_json::from_value(json!({
            "metadata": {"name": "slow"}, "provisioner": "example.com/hdd"}))
        .unwrap();
        let class = classes
            .create(&PostParams::default(), &class)
            .await
            .unwrap();
        assert_eq!(class.reclaim_policy.as_deref(), Some("Delete"));
        assert_eq!(class.volume_binding_mode.as_deref(), Some("Immediate"));

        let volumes: Api<PersistentVolume> = Api::all(client.clone());
        let volume: PersistentVolume = serde_json::from_value(json!({
            "metadata": {"name": "pv-9"},
            "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteMany"],
                     "nfs": {"server": "nfs.example.com", "path": "/exports/9"}}}))
        .unwrap();
        volumes
            .create(&PostParams::default(), &volume)
            .await
            .unwrap();
        let listed = volumes.list(&ListParams::default()).await.unwrap();
        assert_eq!(listed.items.len(), 1);
        let status = listed.items[0].status.as_ref().unwrap();
        assert_eq!(status.phase.as_deref(), Some("Pending"));

        let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), "default");
        let mut watch = claims
            .watch(&WatchParams::default(), "0")
            .await
            .unwrap()
            .boxed();
        let claim: PersistentVolumeClaim = serde_json::from_value(json!({
            "metadata": {"name": "c1"},
            "spec": {"accessModes": ["ReadWriteMany"], "storageClassName": "slow",
                     "resources": {"requests": {"storage": "1Gi"}}}}))
        .unwrap();
        let created = claims.create(&PostParams::default(), &claim).await.unwrap();
        assert_eq!(created.finalizers(), ["kubernetes.io/pvc-protection"]);
        match watch.try_next().await.unwrap() {
            Some(WatchEvent::Added(c)) => assert_eq!(c.name_any(), "c1"),
            other => panic!("expected the claim to be added, got {other:?}"),
        }

        // The binder's writes: the volume name once, then the bound status.
        let bind = json!({"spec": {"volumeName": "pv-9"}});
        claims
            .patch("c1", &PatchParams::default(), &Patch::Merge(&bind))
            .await
            .unwrap();
        let bound = json!({"status": {"phase": "Bound", "accessModes": ["ReadWriteMany"],
                                      "capacity": {"storage": "1Gi"}}});
        claims
            .patch_status("c1", &PatchParams::default(), &Patch::Merge(&bound))
            .await
            .unwrap();
        // A bound claim may ask for more storage.
        let grow = json!({"spec": {"resources": {"requests": {"storage": "2Gi"}}}});
        let grown = claims
            .patch("c1", &PatchParams::default(), &Patch::Merge(&grow))
            .await
            .unwrap();
        let requests = grown.spec.unwrap().resources.unwrap().requests.unwrap();
        assert_eq!(requests["storage"].0, "2Gi");
        let table = api.kubectl(KUBECTL_133, &["get", "pvc", "c1"]);
        let cells: Vec<&str> = row(&table, "c1").split_whitespace().collect();
        assert_eq!(
            cells[..6],
            ["c1", "Bound", "pv-9", "1Gi", "RWX", "slow"],
            "{table}"
        );

        let invalid: PersistentVolumeClaim = serde_json::from_value(json!({
            "metadata": {"name": "c2"},
            "spec": {"accessModes": ["ReadWriteOnce"],
                     "resources": {"requests": {"storage": "0"}}}}))
        .unwrap();
        match claims.create(&PostParams::default(), &invalid).await {
            Err(kube::Error::Api(status)) => {
                assert_eq!(status.code, 422);
                assert_eq!(status.reason, "Invalid");
                assert_eq!(
                    status.message,
                    "PersistentVolumeClaim \"c2\" is invalid: spec.resources[storage]: Invalid value: \"0\": must be greater than zero"
                );
            }
            other => panic!("expected 422, got {other:?}"),
        }

        // Deleting leaves the claim terminating until its finalizer goes.
        claims.delete("c1", &DeleteParams::default()).await.unwrap();
        let held = claims.get("c1").await.unwrap();
        assert!(held.metadata.deletion_timestamp.is_some());
        let release = json!({"metadata": {"finalizers": null}});
        claims
            .patch("c1", &PatchParams::default(), &Patch::Merge(&release))
            .await
            .unwrap();
        eventually("the claim to be gone", || {
            let claims = claims.clone();
            async move { claims.get_opt("c1").await.unwrap().is_none().then_some(()) }
        })
        .await;
    });
}

const WORKLOADS: &str = r#"
apiVersion: v1
kind: ReplicationController
metadata: {name: web}
spec:
  template:
    metadata: {labels: {app: web}}
    spec:
      containers: [{name: nginx, image: "nginx:1.27"}]
---
apiVersion: v1
kind: PodTemplate
metadata: {name: tmpl}
template:
  metadata: {labels: {app: batch}}
  spec:
    containers: [{name: work, image: busybox}]
"#;

/// ReplicationControllers and PodTemplates: defaults from the template, tables, `scale`, the
/// `all` category and a selector that misses the template.
#[test]
fn replication_controllers_and_pod_templates_through_kubectl() {
    let api = ApiServer::start(Backend::Embedded);
    let k = KUBECTL_133;
    let created = api.kubectl_stdin(k, &["create", "-f", "-"], Some(WORKLOADS));
    assert_eq!(
        created.lines().collect::<Vec<_>>(),
        [
            "replicationcontroller/web created",
            "podtemplate/tmpl created"
        ]
    );
    let rc: serde_json::Value =
        serde_json::from_str(&api.kubectl(k, &["get", "rc", "web", "-o", "json"])).unwrap();
    assert_eq!(rc["spec"]["selector"], json!({"app": "web"}));
    assert_eq!(rc["metadata"]["labels"], json!({"app": "web"}));
    assert_eq!(rc["spec"]["replicas"], 1);
    assert_eq!(rc["spec"]["template"]["spec"]["restartPolicy"], "Always");

    let table = api.kubectl(k, &["get", "rc"]);
    assert_eq!(
        header(&table),
        ["NAME", "DESIRED", "CURRENT", "READY", "AGE"]
    );
    let cells: Vec<&str> = row(&table, "web").split_whitespace().collect();
    assert_eq!(cells[..4], ["web", "1", "0", "0"], "{table}");
    let scaled = api.kubectl(k, &["scale", "rc", "web", "--replicas=3"]);
    assert_eq!(scaled.trim(), "replicationcontroller/web scaled");
    let wide = api.kubectl(k, &["get", "rc", "web", "-o", "wide"]);
    assert_eq!(
        header(&wide),
        [
            "NAME",
            "DESIRED",
            "CURRENT",
            "READY",
            "AGE",
            "CONTAINERS",
            "IMAGES",
            "SELECTOR"
        ]
    );
    let cells: Vec<&str> = row(&wide, "web").split_whitespace().collect();
    assert_eq!(cells[1], "3", "{wide}");
    assert_eq!(cells[5..], ["nginx", "nginx:1.27", "app=web"], "{wide}");
    let scale: serde_json::Value = serde_json::from_str(&api.kubectl(
        k,
        &[
            "get",
            "--raw",
            "/api/v1/namespaces/default/replicationcontrollers/web/scale",
        ],
    ))
    .unwrap();
    assert_eq!(scale["spec"]["replicas"], 3);
    assert_eq!(scale["status"]["selector"], "app=web");
    let all = api.kubectl(k, &["get", "all"]);
    assert!(all.contains("replicationcontroller/web"), "{all}");

    let templates = api.kubectl(k, &["get", "podtemplates"]);
    assert_eq!(
        header(&templates),
        ["NAME", "CONTAINERS", "IMAGES", "POD LABELS"]
    );
    let cells: Vec<&str> = row(&templates, "tmpl").split_whitespace().collect();
    assert_eq!(cells, ["tmpl", "work", "busybox", "app=batch"]);

    let mismatched = r#"{"apiVersion": "v1", "kind": "ReplicationController",
        "metadata": {"name": "bad"},
        "spec": {"selector": {"app": "db"},
                 "template": {"metadata": {"labels": {"app": "web"}},
                              "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}}"#;
    let refused = api.kubectl_fails(k, &["create", "-f", "-"], Some(mismatched));
    assert!(
        refused.contains("The ReplicationController \"bad\" is invalid: spec.template.metadata.labels: Invalid value: {\"app\":\"web\"}: `selector` does not match template `labels`"),
        "{refused}"
    );
    api.kubectl(k, &["delete", "rc", "web"]);
    api.kubectl(k, &["delete", "podtemplate", "tmpl"]);
    let none = api.kubectl_output(k, &["get", "rc,podtemplates"], None);
    let stderr = String::from_utf8_lossy(&none.stderr);
    assert!(stderr.contains("No resources found"), "{stderr}");
}

/// `kubectl autoscale` of kubectl ≤ 1.32 posts `autoscaling/v1`, 1.33 `autoscaling/v2`: both
/// make one autoscaler, served in both versions, and a v1 client's write keeps what only v2 can
/// say (upstream's round-trip annotations).
#[test]
fn kubectl_autoscale_old_and_new_make_autoscalers_served_in_both_versions() {
    let api = ApiServer::start(Backend::Embedded);
    api.kubectl(
        KUBECTL_133,
        &["create", "deployment", "web", "--image=busybox"],
    );
    for (kubectl, name) in [(KUBECTL_127, "old"), (KUBECTL_133, "new")] {
        let made = api.kubectl(
            kubectl,
            &[
                "autoscale",
                "deployment",
                "web",
                "--max=5",
                "--cpu-percent=40",
                "--name",
                name,
            ],
        );
        assert_eq!(
            made.trim(),
            format!("horizontalpodautoscaler.autoscaling/{name} autoscaled")
        );
    }
    let get = |kubectl: &str, resource: &str| -> serde_json::Value {
        serde_json::from_str(&api.kubectl(kubectl, &["get", resource, "-o", "json"])).unwrap()
    };
    for name in ["old", "new"] {
        let v1 = get(KUBECTL_127, &format!("hpa.v1.autoscaling/{name}"));
        assert_eq!(v1["apiVersion"], "autoscaling/v1");
        assert_eq!(v1["spec"]["targetCPUUtilizationPercentage"], 40, "{v1}");
        assert_eq!(v1["spec"]["scaleTargetRef"]["name"], "web");
        let v2 = get(KUBECTL_133, &format!("hpa.v2.autoscaling/{name}"));
        assert_eq!(
            v2["spec"]["metrics"],
            json!([{"type": "Resource", "resource": {"name": "cpu",
                "target": {"type": "Utilization", "averageUtilization": 40}}}])
        );
        assert_eq!(
            v1["metadata"]["resourceVersion"],
            v2["metadata"]["resourceVersion"]
        );
    }

    // what only v2 says survives a v1 client's read-modify-write
    let behavior = json!({"spec": {"behavior": {"scaleDown": {"stabilizationWindowSeconds": 30}},
        "metrics": [{"type": "Resource", "resource": {"name": "memory",
                         "target": {"type": "AverageValue", "averageValue": "100Mi"}}},
                    {"type": "Resource", "resource": {"name": "cpu",
                         "target": {"type": "Utilization", "averageUtilization": 40}}}]}});
    api.kubectl(
        KUBECTL_133,
        &[
            "patch",
            "hpa.v2.autoscaling",
            "new",
            "--type=merge",
            "-p",
            &behavior.to_string(),
        ],
    );
    let v1 = get(KUBECTL_127, "hpa.v1.autoscaling/new");
    assert!(
        v1["metadata"]["annotations"]["autoscaling.alpha.kubernetes.io/metrics"]
            .as_str()
            .is_some_and(|m| m.contains("memory")),
        "{v1}"
    );
    api.kubectl(
        KUBECTL_127,
        &[
            "patch",
            "hpa.v1.autoscaling",
            "new",
            "--type=merge",
            "-p",
            r#"{"spec": {"maxReplicas": 7}}"#,
        ],
    );
    let v2 = get(KUBECTL_133, "hpa.v2.autoscaling/new");
    assert_eq!(v2["spec"]["maxReplicas"], 7);
    assert_eq!(
        v2["spec"]["behavior"]["scaleDown"]["stabilizationWindowSeconds"],
        30
    );
    assert_eq!(v2["spec"]["metrics"], behavior["spec"]["metrics"], "{v2}");
    assert!(v2["metadata"].get("annotations").is_none(), "{v2}");
    let table = api.kubectl(KUBECTL_127, &["get", "hpa.v1.autoscaling"]);
    assert!(
        row(&table, "new").contains("<unknown>/100Mi, cpu: <unknown>/40%"),
        "{table}"
    );

    // validation speaks v2's field names, as upstream validates the internal object
    let bad = r#"{"apiVersion": "autoscaling/v1", "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "bad"},
        "spec": {"scaleTargetRef": {"kind": "Deployment", "name": "web"},
                 "minReplicas": 3, "maxReplicas": 2}}"#;
    let refused = api.kubectl_fails(KUBECTL_127, &["create", "-f", "-"], Some(bad));
    assert!(
        refused.contains("spec.maxReplicas: Invalid value: 2"),
        "{refused}"
    );
    let garbled = r#"{"apiVersion": "autoscaling/v1", "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "garbled",
                     "annotations": {"autoscaling.alpha.kubernetes.io/metrics": "[{"}},
        "spec": {"scaleTargetRef": {"kind": "Deployment", "name": "web"}, "maxReplicas": 2}}"#;
    let refused = api.kubectl_fails(KUBECTL_127, &["create", "-f", "-"], Some(garbled));
    assert!(
        refused.contains("BadRequest")
            && refused.contains("annotation autoscaling.alpha.kubernetes.io/metrics"),
        "{refused}"
    );
}

const NETWORKING: &str = r#"
apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata: {name: web}
spec:
  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: web}
  maxReplicas: 5
---
apiVersion: networking.k8s.io/v1
kind: IngressClass
metadata: {name: nginx}
spec: {controller: k8s.io/ingress-nginx}
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: db}
spec:
  podSelector: {matchLabels: {app: db}}
  ingress: [{ports: [{port: 5432}]}]
---
apiVersion: node.k8s.io/v1
kind: RuntimeClass
metadata: {name: gvisor}
handler: runsc
"#;

/// Autoscalers, ingress classes, network policies and runtime classes: apply, defaults, tables,
/// `get all`, an invalid autoscaler; ingresses from `kubectl create ingress`, whose body kubectl
/// 1.33 sends as protobuf, then their status.
#[test]
fn autoscaling_networking_and_node_kinds_through_kubectl() {
    let api = ApiServer::start(Backend::Embedded);
    let k = KUBECTL_133;
    let applied = api.kubectl_stdin(k, &["apply", "-f", "-"], Some(NETWORKING));
    assert_eq!(
        applied.lines().collect::<Vec<_>>(),
        [
            "horizontalpodautoscaler.autoscaling/web created",
            "ingressclass.networking.k8s.io/nginx created",
            "networkpolicy.networking.k8s.io/db created",
            "runtimeclass.node.k8s.io/gvisor created"
        ]
    );
    let hpa_only = NETWORKING.split("---").next().unwrap();
    let again = api.kubectl_stdin(k, &["apply", "--server-side", "-f", "-"], Some(hpa_only));
    assert!(
        again.contains("horizontalpodautoscaler.autoscaling/web serverside-applied"),
        "{again}"
    );

    let hpa: serde_json::Value =
        serde_json::from_str(&api.kubectl(k, &["get", "hpa", "web", "-o", "json"])).unwrap();
    assert_eq!(hpa["apiVersion"], "autoscaling/v2");
    assert_eq!(hpa["spec"]["minReplicas"], 1);
    assert_eq!(
        hpa["spec"]["metrics"][0]["resource"]["target"]["averageUtilization"],
        80
    );
    let table = api.kubectl(k, &["get", "hpa"]);
    assert_eq!(
        header(&table),
        [
            "NAME",
            "REFERENCE",
            "TARGETS",
            "MINPODS",
            "MAXPODS",
            "REPLICAS",
            "AGE"
        ]
    );
    let line = row(&table, "web");
    assert!(
        line.contains("Deployment/web") && line.contains("cpu: <unknown>/80%"),
        "{table}"
    );
    let all = api.kubectl(k, &["get", "all"]);
    assert!(
        all.contains("horizontalpodautoscaler.autoscaling/web"),
        "{all}"
    );
    let bad = r#"{"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "bad"},
        "spec": {"scaleTargetRef": {"kind": "Deployment", "name": "web"},
                 "minReplicas": 3, "maxReplicas": 2}}"#;
    let refused = api.kubectl_fails(k, &["create", "-f", "-"], Some(bad));
    assert!(
        refused.contains(
            "spec.maxReplicas: Invalid value: 2: must be greater than or equal to `minReplicas`"
        ),
        "{refused}"
    );

    let classes = api.kubectl(k, &["get", "ingressclass"]);
    assert_eq!(
        header(&classes),
        ["NAME", "CONTROLLER", "PARAMETERS", "AGE"]
    );
    let cells: Vec<&str> = row(&classes, "nginx").split_whitespace().collect();
    assert_eq!(cells[..3], ["nginx", "k8s.io/ingress-nginx", "<none>"]);
    let policies = api.kubectl(k, &["get", "netpol"]);
    assert_eq!(header(&policies), ["NAME", "POD-SELECTOR", "AGE"]);
    assert!(row(&policies, "db").contains("app=db"), "{policies}");
    let policy: serde_json::Value =
        serde_json::from_str(&api.kubectl(k, &["get", "netpol", "db", "-o", "json"])).unwrap();
    assert_eq!(policy["spec"]["policyTypes"], json!(["Ingress"]));
    assert_eq!(policy["spec"]["ingress"][0]["ports"][0]["protocol"], "TCP");
    let runtimes = api.kubectl(k, &["get", "runtimeclass"]);
    assert_eq!(header(&runtimes), ["NAME", "HANDLER", "AGE"]);
    assert!(row(&runtimes, "gvisor").contains("runsc"), "{runtimes}");
    let changed = api.kubectl_fails(
        k,
        &[
            "patch",
            "runtimeclass",
            "gvisor",
            "--type=merge",
            "-p",
            r#"{"handler":"kata"}"#,
        ],
        None,
    );
    assert!(
        changed.contains("handler: Invalid value: \"kata\": field is immutable"),
        "{changed}"
    );

    // kubectl ≥ 1.32 sends the bodies of its create generators as protobuf.
    let out = api.kubectl_output(
        k,
        &[
            "create",
            "ingress",
            "web",
            "--class=nginx",
            "--rule=web.example.com/api*=web:80",
            "-v=8",
        ],
        None,
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(stdout.trim(), "ingress.networking.k8s.io/web created");
    assert!(
        stderr.contains("Content-Type: application/vnd.kubernetes.protobuf"),
        "kubectl sent protobuf: {stderr}"
    );
    let ingress: serde_json::Value =
        serde_json::from_str(&api.kubectl(k, &["get", "ingress", "web", "-o", "json"])).unwrap();
    let path = &ingress["spec"]["rules"][0]["http"]["paths"][0];
    assert_eq!(path["path"], "/api");
    assert_eq!(path["pathType"], "Prefix");
    assert_eq!(
        path["backend"]["service"],
        json!({"name": "web", "port": {"number": 80}})
    );
    assert_eq!(ingress["spec"]["ingressClassName"], "nginx");
    api.kubectl(
        k,
        &[
            "patch",
            "ingress",
            "web",
            "--subresource=status",
            "--type=merge",
            "-p",
            r#"{"status":{"loadBalancer":{"ingress":[{"ip":"192.0.2.10"}]}}}"#,
        ],
    );
    let ingresses = api.kubectl(k, &["get", "ing"]);
    assert_eq!(
        header(&ingresses),
        ["NAME", "CLASS", "HOSTS", "ADDRESS", "PORTS", "AGE"]
    );
    let cells: Vec<&str> = row(&ingresses, "web").split_whitespace().collect();
    assert_eq!(
        cells[..5],
        ["web", "nginx", "web.example.com", "192.0.2.10", "80"]
    );
    let relative = r#"{"apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
        "metadata": {"name": "bad"},
        "spec": {"rules": [{"http": {"paths": [{"path": "api", "pathType": "Prefix",
                  "backend": {"service": {"name": "web", "port": {"number": 80}}}}]}}]}}"#;
    let refused = api.kubectl_fails(k, &["create", "-f", "-"], Some(relative));
    assert!(
        refused.contains(
            "spec.rules[0].http.paths[0].path: Invalid value: \"api\": must be an absolute path"
        ),
        "{refused}"
    );
    let explain = api.kubectl(k, &["explain", "hpa.spec.metrics"]);
    assert!(explain.contains("containerResource"), "{explain}");
    let explain = api.kubectl(k, &["explain", "ingress.spec.rules"]);
    assert!(explain.contains("host"), "{explain}");
}

/// kubectl 1.27 (legacy discovery, its own apply) reads and writes the new kinds with the same
/// server-side tables.
#[test]
fn the_oldest_kubectl_applies_and_lists_the_new_kinds() {
    let api = ApiServer::start(Backend::Embedded);
    let k = KUBECTL_127;
    api.kubectl_stdin(k, &["apply", "-f", "-"], Some(STORAGE));
    api.kubectl_stdin(k, &["apply", "-f", "-"], Some(NETWORKING));
    let pvcs = api.kubectl(k, &["get", "pvc"]);
    assert_eq!(header(&pvcs)[6], "VOLUMEATTRIBUTESCLASS", "{pvcs}");
    let cells: Vec<&str> = row(&pvcs, "data").split_whitespace().collect();
    assert_eq!(cells[..3], ["data", "Pending", "fast"], "{pvcs}");
    let hpas = api.kubectl(k, &["get", "hpa"]);
    assert!(row(&hpas, "web").contains("cpu: <unknown>/80%"), "{hpas}");
    let names = api.kubectl(k, &["get", "sc,pv,runtimeclass,ingressclass", "-o", "name"]);
    assert_eq!(
        names.lines().collect::<Vec<_>>(),
        [
            "storageclass.storage.k8s.io/fast",
            "persistentvolume/pv-1",
            "runtimeclass.node.k8s.io/gvisor",
            "ingressclass.networking.k8s.io/nginx"
        ]
    );
}

/// Each cell of `name`'s row by its column's header: kubectl aligns every column under its
/// header, so a cell is the row's text from its header's start to the next one's (empty cells
/// included, which splitting on whitespace would lose).
fn cells_by_header(table: &str, name: &str) -> Vec<(String, String)> {
    let head = table.lines().next().unwrap_or("");
    let mut starts = Vec::new();
    let mut at = 0;
    for word in head.split("  ").filter(|w| !w.trim().is_empty()) {
        let start = at + head[at..].find(word.trim()).unwrap();
        starts.push((start, word.trim().to_string()));
        at = start + word.trim().len();
    }
    let line = row(table, name);
    starts
        .iter()
        .enumerate()
        .map(|(i, (start, header))| {
            let end = starts.get(i + 1).map_or(line.len(), |(s, _)| *s);
            let cell = line.get(*start..end.min(line.len())).unwrap_or("");
            (header.clone(), cell.trim().to_string())
        })
        .collect()
}

/// `kubectl get pv`, `pvc` and `storageclass` (also `-o wide`) print the API server's tables,
/// so kubectl 1.27 shows what 1.33 shows: upstream 1.33's columns, VolumeAttributesClass
/// included (a column 1.27's own server would not have), VolumeMode only when wide.
#[test]
fn storage_tables_are_upstreams_for_kubectl_1_33_and_1_27() {
    let api = ApiServer::start(Backend::Embedded);
    run(async {
        let c = kube_client(&api).await;
        let classes: Api<StorageClass> = Api::all(c.clone());
        let volumes: Api<PersistentVolume> = Api::all(c.clone());
        let claims: Api<PersistentVolumeClaim> = Api::namespaced(c.clone(), "default");
        let pp = PostParams::default();
        for class in [
            json!({"metadata": {"name": "fast",
                    "annotations": {"storageclass.kubernetes.io/is-default-class": "true"}},
                   "provisioner": "example.com/ssd", "allowVolumeExpansion": true}),
            json!({"metadata": {"name": "slow"}, "provisioner": "example.com/hdd",
                   "reclaimPolicy": "Retain", "volumeBindingMode": "WaitForFirstConsumer"}),
        ] {
            classes
                .create(&pp, &serde_json::from_value(class).unwrap())
                .await
                .unwrap();
        }
        let volume = json!({"metadata": {"name": "pv-bound"},
            "spec": {"capacity": {"storage": "2Gi"},
                     "accessModes": ["ReadOnlyMany", "ReadWriteOnce"],
                     "persistentVolumeReclaimPolicy": "Retain", "storageClassName": "fast",
                     "claimRef": {"namespace": "default", "name": "data-bound"},
                     "hostPath": {"path": "/data/pv-bound"}}});
        volumes
            .create(&pp, &serde_json::from_value(volume).unwrap())
            .await
            .unwrap();
        let status = |s: serde_json::Value| Patch::Merge(json!({"status": s}));
        volumes
            .patch_status(
                "pv-bound",
                &PatchParams::default(),
                &status(json!({"phase": "Bound"})),
            )
            .await
            .unwrap();
        for claim in [
            json!({"metadata": {"name": "data-bound"},
                   "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "fast",
                            "volumeName": "pv-bound",
                            "resources": {"requests": {"storage": "1Gi"}}}}),
            json!({"metadata": {"name": "waiting"},
                   "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "slow",
                            "resources": {"requests": {"storage": "1Gi"}}}}),
        ] {
            claims
                .create(&pp, &serde_json::from_value(claim).unwrap())
                .await
                .unwrap();
        }
        claims
            .patch_status(
                "data-bound",
                &PatchParams::default(),
                &status(json!({"phase": "Bound", "capacity": {"storage": "2Gi"},
                               "accessModes": ["ReadWriteOnce", "ReadOnlyMany"]})),
            )
            .await
            .unwrap();
    });

    let pv_columns = [
        "NAME",
        "CAPACITY",
        "ACCESS MODES",
        "RECLAIM POLICY",
        "STATUS",
        "CLAIM",
        "STORAGECLASS",
        "VOLUMEATTRIBUTESCLASS",
        "REASON",
        "AGE",
    ];
    let pvc_columns = [
        "NAME",
        "STATUS",
        "VOLUME",
        "CAPACITY",
        "ACCESS MODES",
        "STORAGECLASS",
        "VOLUMEATTRIBUTESCLASS",
        "AGE",
    ];
    let sc_columns = [
        "NAME",
        "PROVISIONER",
        "RECLAIMPOLICY",
        "VOLUMEBINDINGMODE",
        "ALLOWVOLUMEEXPANSION",
        "AGE",
    ];
    // a row's cells by column, the age left out (it only has to be there)
    let cells = |table: &str, name: &str| -> Vec<(String, String)> {
        let all = cells_by_header(table, name);
        let age = all.iter().find(|(h, _)| h == "AGE").map(|(_, v)| v.clone());
        assert!(
            age.is_some_and(|a| !a.is_empty()),
            "no age for {name}: {table}"
        );
        all.into_iter().filter(|(h, _)| h != "AGE").collect()
    };
    let want = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(h, v)| (h.to_string(), v.to_string()))
            .collect()
    };
    for k in [KUBECTL_133, KUBECTL_127] {
        for wide in [false, true] {
            let get = |what: &str| {
                let mut args = vec!["get", what];
                if wide {
                    args.extend(["-o", "wide"]);
                }
                api.kubectl(k, &args)
            };
            let with_mode = |columns: &[&str]| -> Vec<String> {
                let mut all: Vec<String> = columns.iter().map(|c| c.to_string()).collect();
                if wide {
                    all.push("VOLUMEMODE".into());
                }
                all
            };
            let mode: &[(&str, &str)] = if wide {
                &[("VOLUMEMODE", "Filesystem")]
            } else {
                &[]
            };

            let pvs = get("pv");
            assert_eq!(header(&pvs), with_mode(&pv_columns), "{k} wide={wide}");
            let bound = [
                ("NAME", "pv-bound"),
                ("CAPACITY", "2Gi"),
                ("ACCESS MODES", "RWO,ROX"),
                ("RECLAIM POLICY", "Retain"),
                ("STATUS", "Bound"),
                ("CLAIM", "default/data-bound"),
                ("STORAGECLASS", "fast"),
                ("VOLUMEATTRIBUTESCLASS", "<unset>"),
                ("REASON", ""),
            ];
            assert_eq!(
                cells(&pvs, "pv-bound"),
                want(&[&bound[..], mode].concat()),
                "{k} wide={wide}: {pvs}"
            );

            let pvcs = get("pvc");
            assert_eq!(header(&pvcs), with_mode(&pvc_columns), "{k} wide={wide}");
            let bound = [
                ("NAME", "data-bound"),
                ("STATUS", "Bound"),
                ("VOLUME", "pv-bound"),
                ("CAPACITY", "2Gi"),
                ("ACCESS MODES", "RWO,ROX"),
                ("STORAGECLASS", "fast"),
                ("VOLUMEATTRIBUTESCLASS", "<unset>"),
            ];
            assert_eq!(
                cells(&pvcs, "data-bound"),
                want(&[&bound[..], mode].concat()),
                "{k} wide={wide}: {pvcs}"
            );
            let waiting = [
                ("NAME", "waiting"),
                ("STATUS", "Pending"),
                ("VOLUME", ""),
                ("CAPACITY", ""),
                ("ACCESS MODES", ""),
                ("STORAGECLASS", "slow"),
                ("VOLUMEATTRIBUTESCLASS", "<unset>"),
            ];
            assert_eq!(
                cells(&pvcs, "waiting"),
                want(&[&waiting[..], mode].concat()),
                "{k} wide={wide}: {pvcs}"
            );

            // a class has no wide-only column
            let scs = get("storageclass");
            let names: Vec<String> = sc_columns.iter().map(|c| c.to_string()).collect();
            assert_eq!(header(&scs), names, "{k} wide={wide}");
            assert_eq!(
                cells(&scs, "fast"),
                want(&[
                    ("NAME", "fast (default)"),
                    ("PROVISIONER", "example.com/ssd"),
                    ("RECLAIMPOLICY", "Delete"),
                    ("VOLUMEBINDINGMODE", "Immediate"),
                    ("ALLOWVOLUMEEXPANSION", "true"),
                ]),
                "{k} wide={wide}: {scs}"
            );
            assert_eq!(
                cells(&scs, "slow"),
                want(&[
                    ("NAME", "slow"),
                    ("PROVISIONER", "example.com/hdd"),
                    ("RECLAIMPOLICY", "Retain"),
                    ("VOLUMEBINDINGMODE", "WaitForFirstConsumer"),
                    ("ALLOWVOLUMEEXPANSION", "false"),
                ]),
                "{k} wide={wide}: {scs}"
            );
        }
    }
}
