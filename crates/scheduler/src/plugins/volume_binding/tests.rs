use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim, Pod, Volume};
use k8s_openapi::api::storage::v1::StorageClass;
use serde_json::{Value, json};
use skiff_runtime::informer::Cache;

use super::binder::*;
use super::*;
use crate::api::{Call, RecordingApi};
use crate::framework::Code;
use crate::framework::testing::{PodBuilder, node};
use crate::volumes::Caches;

fn parse<K: serde::de::DeserializeOwned>(v: &[Value]) -> Vec<K> {
    v.iter()
        .map(|o| serde_json::from_value(o.clone()).unwrap())
        .collect()
}

/// A cluster's storage: claims, volumes, classes, nodes and pods, as the informers hold them.
struct Cluster {
    volumes: Arc<Volumes>,
    api: Arc<RecordingApi>,
    claims: Cache<PersistentVolumeClaim>,
    pvs: Cache<PersistentVolume>,
}

impl Cluster {
    fn new(claims: &[Value], pvs: &[Value]) -> Cluster {
        let classes = [
            json!({"metadata": {"name": "local"}, "provisioner": NOT_SUPPORTED,
                   "volumeBindingMode": "WaitForFirstConsumer"}),
            json!({"metadata": {"name": "local-path"}, "provisioner": "skiff.dev/local-path",
                   "volumeBindingMode": "WaitForFirstConsumer"}),
            json!({"metadata": {"name": "zonal"}, "provisioner": "zonal.csi",
                   "volumeBindingMode": "WaitForFirstConsumer",
                   "allowedTopologies": [{"matchLabelExpressions": [
                       {"key": "topology.kubernetes.io/zone", "values": ["a"]}]}]}),
            json!({"metadata": {"name": "now"}, "provisioner": "p",
                   "volumeBindingMode": "Immediate"}),
        ];
        let nodes: Vec<Node> = ["n1", "n2"]
            .iter()
            .map(|n| host(n).node.as_ref().clone())
            .collect();
        let claims = Cache::from_objects(parse::<PersistentVolumeClaim>(claims));
        let pvs = Cache::from_objects(parse::<PersistentVolume>(pvs));
        let volumes = Volumes::new(Caches {
            claims: claims.clone(),
            volumes: pvs.clone(),
            classes: Cache::from_objects(parse::<StorageClass>(&classes)),
            csi_nodes: Cache::from_objects([]),
            nodes: Cache::from_objects(nodes),
            pods: Cache::from_objects([pod(&["data"]).pod.as_ref().clone()]),
        });
        Cluster {
            volumes,
            api: RecordingApi::new(),
            claims,
            pvs,
        }
    }

    fn plugin(&self) -> VolumeBinding {
        VolumeBinding::new(self.volumes.clone(), self.api.clone())
    }
}

const NOT_SUPPORTED: &str = "kubernetes.io/no-provisioner";

fn host(name: &str) -> NodeInfo {
    node(name)
        .label("kubernetes.io/hostname", name)
        .label(
            "topology.kubernetes.io/zone",
            if name == "n1" { "a" } else { "b" },
        )
        .info(&[])
}

fn claim(name: &str, class: &str, extra: Value) -> Value {
    let mut c = json!({"metadata": {"namespace": "default", "name": name, "uid": format!("uid-{name}"),
                                    "resourceVersion": "1"},
                       "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": class,
                                "resources": {"requests": {"storage": "1Gi"}}},
                       "status": {"phase": "Pending"}});
    merge(&mut c, extra);
    c
}

fn bound_claim(name: &str, volume: &str) -> Value {
    claim(
        name,
        "local",
        json!({"spec": {"volumeName": volume},
               "metadata": {"annotations": {"pv.kubernetes.io/bind-completed": "yes"}},
               "status": {"phase": "Bound"}}),
    )
}

/// A local volume of class `local` pinned to `host`.
fn local_pv(name: &str, size: &str, host: &str) -> Value {
    json!({"metadata": {"name": name, "resourceVersion": "1"},
           "spec": {"capacity": {"storage": size}, "accessModes": ["ReadWriteOnce"],
                    "storageClassName": "local", "local": {"path": "/mnt/disk"},
                    "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                        {"key": "kubernetes.io/hostname", "operator": "In", "values": [host]}]}]}}},
           "status": {"phase": "Available"}})
}

fn merge(base: &mut Value, patch: Value) {
    match (base, patch) {
        (Value::Object(b), Value::Object(p)) => {
            for (k, v) in p {
                merge(b.entry(k).or_insert(Value::Null), v);
            }
        }
        (b, p) => *b = p,
    }
}

fn pod(claims: &[&str]) -> Arc<PodInfo> {
    PodBuilder::new("p").claims(claims).info()
}

/// PreFilter, then Filter on each of `nodes`: each node's status.
fn filter(pl: &VolumeBinding, pod: &PodInfo, nodes: &[&str]) -> (CycleState, Vec<Status>) {
    let mut state = CycleState::default();
    let pre = pl.pre_filter(&mut state, pod, &Snapshot::default());
    if !pre.status.is_success() {
        return (state, vec![pre.status]);
    }
    let statuses = nodes
        .iter()
        .map(|n| pl.filter(&state, pod, &host(n)))
        .collect();
    (state, statuses)
}

fn messages(statuses: &[Status]) -> Vec<String> {
    statuses.iter().map(Status::message).collect()
}

#[test]
fn pods_without_claims_skip_and_unbound_immediate_claims_are_unresolvable() {
    let c = Cluster::new(&[claim("data", "now", json!({}))], &[]);
    let pl = c.plugin();
    let mut state = CycleState::default();
    let none = PodBuilder::new("plain").info();
    assert!(
        pl.pre_filter(&mut state, &none, &Snapshot::default())
            .status
            .is_skip()
    );
    let (_, got) = filter(&pl, &pod(&["data"]), &["n1"]);
    assert_eq!(got[0].code(), Code::UnschedulableAndUnresolvable);
    assert_eq!(
        got[0].message(),
        "pod has unbound immediate PersistentVolumeClaims"
    );
}

#[test]
fn missing_lost_and_deleted_claims_are_unresolvable_in_upstream_words() {
    let c = Cluster::new(
        &[
            claim(
                "lost",
                "local",
                json!({"spec": {"volumeName": "gone"},
                                          "status": {"phase": "Lost"}}),
            ),
            claim(
                "going",
                "local",
                json!({"metadata": {
                "deletionTimestamp": "2026-01-01T00:00:00Z", "finalizers": ["x"]}}),
            ),
        ],
        &[],
    );
    let pl = c.plugin();
    for (name, want) in [
        ("nosuch", "persistentvolumeclaim \"nosuch\" not found"),
        (
            "lost",
            "persistentvolumeclaim \"lost\" bound to non-existent persistentvolume \"gone\"",
        ),
        ("going", "persistentvolumeclaim \"going\" is being deleted"),
    ] {
        let (_, got) = filter(&pl, &pod(&[name]), &["n1"]);
        assert_eq!(got[0].code(), Code::UnschedulableAndUnresolvable, "{name}");
        assert_eq!(got[0].message(), want);
    }
    let ephemeral = PodBuilder::new("p")
        .with_spec(|s| {
            s.volumes = Some(vec![Volume {
                name: "scratch".into(),
                ephemeral: Some(Default::default()),
                ..Default::default()
            }])
        })
        .info();
    let (_, got) = filter(&pl, &ephemeral, &["n1"]);
    assert_eq!(
        got[0].message(),
        "waiting for ephemeral volume controller to create the persistentvolumeclaim \"p-scratch\""
    );
}

fn ephemeral_pod() -> Arc<PodInfo> {
    PodBuilder::new("p")
        .with_spec(|s| {
            s.volumes = Some(vec![Volume {
                name: "scratch".into(),
                ephemeral: Some(Default::default()),
                ..Default::default()
            }])
        })
        .info()
}

#[test]
fn an_ephemeral_volume_uses_its_claim_only_if_the_pod_controls_it() {
    let owner = |uid: &str| {
        json!({"metadata": {"ownerReferences": [{"apiVersion": "v1", "kind": "Pod",
            "name": "p", "uid": uid, "controller": true}]}})
    };
    let mut foreign = bound_claim("p-scratch", "pv1");
    merge(&mut foreign, owner("uid-earlier-p"));
    let c = Cluster::new(&[foreign], &[local_pv("pv1", "1Gi", "n1")]);
    let (_, got) = filter(&c.plugin(), &ephemeral_pod(), &["n1"]);
    assert_eq!(got[0].code(), Code::UnschedulableAndUnresolvable);
    assert_eq!(
        got[0].message(),
        "PVC default/p-scratch was not created for pod default/p (pod is not owner)"
    );
    // the pod's own claim is used as a persistentVolumeClaim volume's: its volume pins n1
    let mut own = bound_claim("p-scratch", "pv1");
    merge(&mut own, owner("uid-p"));
    let c = Cluster::new(&[own], &[local_pv("pv1", "1Gi", "n1")]);
    let (_, got) = filter(&c.plugin(), &ephemeral_pod(), &["n1", "n2"]);
    assert!(got[0].is_success(), "{:?}", got[0]);
    assert_eq!(got[1].message(), REASON_NODE_CONFLICT);
}

#[test]
fn a_bound_volume_must_admit_the_node_and_exist() {
    let c = Cluster::new(
        &[bound_claim("data", "pv1"), bound_claim("orphan", "nosuch")],
        &[local_pv("pv1", "1Gi", "n1")],
    );
    let pl = c.plugin();
    let mut state = CycleState::default();
    let pre = pl.pre_filter(&mut state, &pod(&["data"]), &Snapshot::default());
    // the local volume pins its node: only n1 is worth filtering
    assert_eq!(pre.node_names, Some(["n1".to_string()].into()));
    let (_, got) = filter(&pl, &pod(&["data"]), &["n1", "n2"]);
    assert!(got[0].is_success());
    assert_eq!(got[1].code(), Code::UnschedulableAndUnresolvable);
    assert_eq!(got[1].message(), REASON_NODE_CONFLICT);
    let (_, got) = filter(&pl, &pod(&["orphan"]), &["n1"]);
    assert_eq!(messages(&got), [REASON_PV_NOT_EXIST]);
}

#[test]
fn a_delayed_claim_takes_the_smallest_static_volume_the_node_may_use() {
    let c = Cluster::new(
        &[
            claim("data", "local", json!({})),
            claim("logs", "local", json!({})),
        ],
        &[
            local_pv("big-n1", "10Gi", "n1"),
            local_pv("small-n1", "2Gi", "n1"),
            local_pv("tiny-n1", "500Mi", "n1"),
            local_pv("only-n2", "5Gi", "n2"),
        ],
    );
    let pl = c.plugin();
    let (state, got) = filter(&pl, &pod(&["data"]), &["n1", "n2"]);
    assert!(got.iter().all(Status::is_success));
    let s = state.read::<State>(STATE_KEY).unwrap();
    let by_node = s.0.by_node.lock();
    let chosen = |n: &str| -> Vec<String> {
        by_node[n]
            .bindings
            .iter()
            .map(|(v, _)| v.metadata.name.clone().unwrap())
            .collect()
    };
    assert_eq!(chosen("n1"), ["small-n1"]);
    assert_eq!(chosen("n2"), ["only-n2"]);
    drop(by_node);
    // two claims never take the same volume: n2 has one for two claims
    let (_, got) = filter(&pl, &pod(&["data", "logs"]), &["n1", "n2"]);
    assert!(got[0].is_success());
    assert_eq!(got[1].code(), Code::UnschedulableAndUnresolvable);
    assert_eq!(got[1].message(), REASON_BIND_CONFLICT);
}

#[test]
fn without_a_static_volume_a_class_that_provisions_admits_nodes_its_topology_allows() {
    let c = Cluster::new(
        &[
            claim("manual", "local", json!({})),
            claim("dynamic", "local-path", json!({})),
            claim("zoned", "zonal", json!({})),
            claim(
                "elsewhere",
                "local-path",
                json!({"metadata": {"annotations": {
                "volume.kubernetes.io/selected-node": "n2"}}}),
            ),
        ],
        &[],
    );
    let pl = c.plugin();
    let (_, got) = filter(&pl, &pod(&["manual"]), &["n1"]);
    assert_eq!(messages(&got), [REASON_BIND_CONFLICT]);
    let (state, got) = filter(&pl, &pod(&["dynamic"]), &["n1", "n2"]);
    assert!(got.iter().all(Status::is_success));
    let s = state.read::<State>(STATE_KEY).unwrap();
    assert_eq!(s.0.by_node.lock()["n1"].provisions.len(), 1);
    let (_, got) = filter(&pl, &pod(&["zoned"]), &["n1", "n2"]);
    assert!(got[0].is_success());
    assert_eq!(messages(&got[1..]), [REASON_BIND_CONFLICT]);
    // a claim already given to a node fits that node only
    let (_, got) = filter(&pl, &pod(&["elsewhere"]), &["n1", "n2"]);
    assert_eq!(messages(&got[..1]), [REASON_BIND_CONFLICT]);
    assert!(got[1].is_success());
}

fn selected_node(c: &PersistentVolumeClaim) -> Option<&str> {
    c.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get("volume.kubernetes.io/selected-node"))
        .map(String::as_str)
}

fn claim_ref_of(v: &PersistentVolume) -> Option<String> {
    let r = v.spec.as_ref()?.claim_ref.as_ref()?;
    Some(format!(
        "{}/{}",
        r.namespace.as_deref()?,
        r.name.as_deref()?
    ))
}

#[test]
fn reserve_assumes_the_bindings_and_unreserve_forgets_them() {
    let c = Cluster::new(
        &[
            claim("data", "local", json!({})),
            claim("scratch", "local-path", json!({})),
        ],
        &[local_pv("pv1", "1Gi", "n1")],
    );
    let pl = c.plugin();
    let p = pod(&["data", "scratch"]);
    let (mut state, got) = filter(&pl, &p, &["n1"]);
    assert!(got[0].is_success());
    assert!(pl.reserve(&mut state, &p, "n1").is_success());
    let pv = c.volumes.volumes.get("pv1").unwrap();
    assert_eq!(claim_ref_of(&pv).as_deref(), Some("default/data"));
    let scratch = c.volumes.claims.get("default/scratch").unwrap();
    assert_eq!(selected_node(&scratch), Some("n1"));
    // the next pod's cycle sees the volume taken
    let (_, other) = filter(&pl, &pod(&["data"]), &["n1"]);
    assert!(other[0].is_success(), "pre-bound to data: {other:?}");
    pl.unreserve(&mut state, &p, "n1");
    assert_eq!(claim_ref_of(&c.volumes.volumes.get("pv1").unwrap()), None);
    assert_eq!(
        selected_node(&c.volumes.claims.get("default/scratch").unwrap()),
        None
    );
}

/// What the PersistentVolume controller does once the scheduler has pointed `pv` at `claim`
/// (or the provisioner has made `pv` for the claim the scheduler gave `selected` node): the
/// volume and the claim bound, newer versions.
fn controller_binds(c: &Cluster, claim: &str, pv: &str, rv: &str, selected: Option<&str>) {
    let mut v = c
        .pvs
        .get(&kube::runtime::reflector::ObjectRef::new(pv))
        .map_or_else(
            || serde_json::from_value(local_pv(pv, "1Gi", "n1")).unwrap(),
            |v| v.as_ref().clone(),
        );
    v.metadata.resource_version = Some(rv.into());
    v.spec.get_or_insert_with(Default::default).claim_ref = Some(
        serde_json::from_value(json!({"namespace": "default", "name": claim,
                                      "uid": format!("uid-{claim}")}))
        .unwrap(),
    );
    c.pvs.store(v);
    let key = kube::runtime::reflector::ObjectRef::new(claim).within("default");
    let mut pvc = c.claims.get(&key).unwrap().as_ref().clone();
    pvc.metadata.resource_version = Some(rv.into());
    pvc.spec.get_or_insert_with(Default::default).volume_name = Some(pv.into());
    let annotations = pvc
        .metadata
        .annotations
        .get_or_insert_with(Default::default);
    annotations.insert("pv.kubernetes.io/bind-completed".into(), "yes".into());
    if let Some(node) = selected {
        annotations.insert("volume.kubernetes.io/selected-node".into(), node.into());
    }
    c.claims.store(pvc);
    c.volumes.notify();
}

async fn settle() {
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
}

#[tokio::test(start_paused = true)]
async fn pre_bind_writes_the_bindings_and_waits_until_the_controller_has_bound_the_claims() {
    let c = Cluster::new(
        &[
            claim("data", "local", json!({})),
            claim("scratch", "local-path", json!({})),
        ],
        &[local_pv("pv1", "1Gi", "n1")],
    );
    let pl = Arc::new(c.plugin());
    let p = pod(&["data", "scratch"]);
    let (mut state, _) = filter(&pl, &p, &["n1"]);
    assert!(pl.reserve(&mut state, &p, "n1").is_success());
    let task = tokio::spawn({
        let (pl, p) = (pl.clone(), p.clone());
        async move { pl.pre_bind(&state, &p, "n1").await }
    });
    settle().await;
    assert_eq!(
        c.api.calls(),
        [
            Call::UpdateVolume {
                volume: "pv1".into(),
                claim: "default/data".into()
            },
            Call::UpdateClaim {
                claim: "default/scratch".into(),
                selected_node: Some("n1".into())
            },
        ]
    );
    assert!(!task.is_finished());
    controller_binds(&c, "data", "pv1", "5", None);
    settle().await;
    assert!(!task.is_finished(), "scratch is not bound yet");
    controller_binds(&c, "scratch", "pvc-scratch", "6", Some("n1"));
    settle().await;
    assert!(task.is_finished());
    assert!(task.await.unwrap().is_success());
}

#[tokio::test(start_paused = true)]
async fn pre_bind_fails_when_provisioning_gives_the_claim_back_or_the_timeout_passes() {
    let c = Cluster::new(&[claim("scratch", "local-path", json!({}))], &[]);
    let pl = Arc::new(
        VolumeBinding::from_args(
            Some(&json!({"bindTimeoutSeconds": 30})),
            c.volumes.clone(),
            c.api.clone(),
        )
        .unwrap(),
    );
    assert_eq!(pl.bind_timeout(), Duration::from_secs(30));
    let p = pod(&["scratch"]);
    let run = |pl: Arc<VolumeBinding>, p: Arc<PodInfo>| {
        let (mut state, _) = filter(&pl, &p, &["n1"]);
        assert!(pl.reserve(&mut state, &p, "n1").is_success());
        tokio::spawn(async move { pl.pre_bind(&state, &p, "n1").await })
    };
    let task = run(pl.clone(), p.clone());
    settle().await;
    // the provisioner could not provision and removed the node, for the pod to be rescheduled
    let key = kube::runtime::reflector::ObjectRef::new("scratch").within("default");
    let mut given_back = c.claims.get(&key).unwrap().as_ref().clone();
    given_back.metadata.resource_version = Some("9".into());
    given_back.metadata.annotations = Some([("other".to_string(), "x".to_string())].into());
    c.claims.store(given_back);
    c.volumes.notify();
    let status = task.await.unwrap();
    assert_eq!(status.code(), Code::Error);
    assert_eq!(
        status.message(),
        "binding volumes: provisioning failed for PVC \"scratch\""
    );

    let task = run(pl.clone(), p.clone());
    tokio::time::advance(Duration::from_secs(31)).await;
    let status = task.await.unwrap();
    assert_eq!(
        status.message(),
        "binding volumes: context deadline exceeded"
    );
}

#[tokio::test]
async fn a_failed_write_is_an_error_and_nothing_stays_assumed() {
    let c = Cluster::new(
        &[claim("data", "local", json!({}))],
        &[local_pv("pv1", "1Gi", "n1")],
    );
    c.api.fail_updates.lock().push("pv1".into());
    let pl = c.plugin();
    let p = pod(&["data"]);
    let (mut state, _) = filter(&pl, &p, &["n1"]);
    assert!(pl.reserve(&mut state, &p, "n1").is_success());
    let status = pl.pre_bind(&state, &p, "n1").await;
    assert_eq!(status.code(), Code::Error);
    assert_eq!(
        status.message(),
        "updating PersistentVolume pv1: told to fail"
    );
    assert_eq!(c.volumes.volumes.assumed_len(), 0);
}

#[tokio::test]
async fn a_pod_whose_claims_are_all_bound_has_nothing_to_bind() {
    let c = Cluster::new(
        &[bound_claim("data", "pv1")],
        &[local_pv("pv1", "1Gi", "n1")],
    );
    let pl = c.plugin();
    let p = pod(&["data"]);
    let (mut state, got) = filter(&pl, &p, &["n1"]);
    assert!(got[0].is_success());
    assert!(pl.reserve(&mut state, &p, "n1").is_success());
    assert!(pl.pre_bind(&state, &p, "n1").await.is_success());
    assert!(c.api.calls().is_empty());
}

#[test]
fn the_scheduler_binds_a_pod_with_a_local_volume_to_the_volumes_node() {
    use crate::config::Configuration;
    use crate::scheduler::Scheduler;
    let c = Cluster::new(
        &[claim("data", "local", json!({}))],
        &[local_pv("pv1", "1Gi", "n2")],
    );
    let handle = crate::plugins::Handle {
        api: c.api.clone(),
        volumes: c.volumes.clone(),
    };
    let frameworks = Configuration::default().frameworks_with(&handle).unwrap();
    let s = Scheduler::new(frameworks, c.api.clone());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap();
    rt.block_on(async {
        for n in ["n1", "n2"] {
            s.on_node(host(n).node.clone());
        }
        s.on_claim("default/data".into(), c.volumes.claims.get("default/data"));
        let p: Pod = pod(&["data"]).pod.as_ref().clone();
        s.on_pod(Arc::new(p));
        assert!(s.schedule_one().await);
        settle().await;
        controller_binds(&c, "data", "pv1", "5", None);
        settle().await;
        let calls = c.api.calls();
        assert_eq!(
            calls[0],
            Call::UpdateVolume {
                volume: "pv1".into(),
                claim: "default/data".into()
            }
        );
        assert!(
            calls.contains(&Call::Bind {
                pod: "default/p".into(),
                node: "n2".into()
            }),
            "{calls:?}"
        );
    });
}
