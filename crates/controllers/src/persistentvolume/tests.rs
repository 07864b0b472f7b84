//! Table-driven tests of `syncClaim` and `syncVolume`, as upstream's binder tests: each case
//! starts from some volumes and claims, syncs one object against a fake cluster whose cache is
//! its store, and compares phases, bindings, annotations and events.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;
use k8s_openapi::api::core::v1::{ObjectReference, PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::ResourceExt;
use parking_lot::Mutex;
use serde_json::{Value, json};

use super::Cluster;
use super::sync::{sync_claim, sync_volume};
use crate::events::Note;

#[derive(Default)]
struct Fake {
    volumes: Mutex<BTreeMap<String, PersistentVolume>>,
    claims: Mutex<BTreeMap<String, PersistentVolumeClaim>>,
    classes: Vec<StorageClass>,
    pods: Vec<Pod>,
    /// `(object, reason, note)` of every event.
    events: Mutex<Vec<(String, String, String)>>,
    queued: Mutex<Vec<String>>,
    revision: AtomicU64,
}

fn conflict() -> kube::Error {
    kube::Error::Api(
        kube::core::Status::failure("conflict", "Conflict")
            .with_code(409)
            .boxed(),
    )
}

impl Fake {
    fn next(&self) -> String {
        (self.revision.fetch_add(1, Ordering::SeqCst) + 100).to_string()
    }

    fn volume_named(&self, name: &str) -> PersistentVolume {
        self.volumes.lock().get(name).cloned().expect(name)
    }

    fn claim_named(&self, name: &str) -> PersistentVolumeClaim {
        let key = format!("ns/{name}");
        self.claims.lock().get(&key).cloned().expect(name)
    }

    fn store_volume(&self, mut volume: PersistentVolume) -> kube::Result<PersistentVolume> {
        let mut volumes = self.volumes.lock();
        let current = volumes.get(&volume.name_any()).expect("volume exists");
        if current.metadata.resource_version != volume.metadata.resource_version {
            return Err(conflict());
        }
        volume.metadata.resource_version = Some(self.next());
        volumes.insert(volume.name_any(), volume.clone());
        Ok(volume)
    }

    fn store_claim(&self, mut claim: PersistentVolumeClaim) -> kube::Result<PersistentVolumeClaim> {
        let mut claims = self.claims.lock();
        let key = format!("ns/{}", claim.name_any());
        let current = claims.get(&key).expect("claim exists");
        if current.metadata.resource_version != claim.metadata.resource_version {
            return Err(conflict());
        }
        claim.metadata.resource_version = Some(self.next());
        claims.insert(key, claim.clone());
        Ok(claim)
    }
}

#[async_trait]
impl Cluster for Fake {
    fn volume(&self, name: &str) -> Option<Arc<PersistentVolume>> {
        self.volumes.lock().get(name).cloned().map(Arc::new)
    }

    fn volumes(&self) -> Vec<Arc<PersistentVolume>> {
        self.volumes
            .lock()
            .values()
            .cloned()
            .map(Arc::new)
            .collect()
    }

    fn claim(&self, namespace: &str, name: &str) -> Option<Arc<PersistentVolumeClaim>> {
        let key = format!("{namespace}/{name}");
        self.claims.lock().get(&key).cloned().map(Arc::new)
    }

    fn class(&self, name: &str) -> Option<Arc<StorageClass>> {
        let found = self.classes.iter().find(|c| c.name_any() == name);
        found.cloned().map(Arc::new)
    }

    fn classes(&self) -> Vec<Arc<StorageClass>> {
        self.classes.iter().cloned().map(Arc::new).collect()
    }

    fn pods_using(&self, namespace: &str, claim: &str) -> Vec<Arc<Pod>> {
        self.pods
            .iter()
            .filter(|p| p.namespace().as_deref() == Some(namespace))
            .filter(|p| crate::triggers::claim_names(p).iter().any(|c| c == claim))
            .cloned()
            .map(Arc::new)
            .collect()
    }

    async fn fetch_claim(
        &self,
        namespace: &str,
        name: &str,
    ) -> kube::Result<Option<PersistentVolumeClaim>> {
        Ok(self.claim(namespace, name).map(|c| c.as_ref().clone()))
    }

    async fn fetch_volume(&self, name: &str) -> kube::Result<Option<PersistentVolume>> {
        Ok(self.volume(name).map(|v| v.as_ref().clone()))
    }

    async fn update_volume(&self, volume: PersistentVolume) -> kube::Result<PersistentVolume> {
        // the main resource's update keeps the stored status
        let status = self.volume_named(&volume.name_any()).status;
        self.store_volume(PersistentVolume { status, ..volume })
    }

    async fn update_volume_status(
        &self,
        volume: PersistentVolume,
    ) -> kube::Result<PersistentVolume> {
        let stored = self.volume_named(&volume.name_any());
        if stored.metadata.resource_version != volume.metadata.resource_version {
            return Err(conflict());
        }
        self.store_volume(PersistentVolume {
            status: volume.status,
            ..stored
        })
    }

    async fn update_claim(
        &self,
        claim: PersistentVolumeClaim,
    ) -> kube::Result<PersistentVolumeClaim> {
        let status = self.claim_named(&claim.name_any()).status;
        self.store_claim(PersistentVolumeClaim { status, ..claim })
    }

    async fn update_claim_status(
        &self,
        claim: PersistentVolumeClaim,
    ) -> kube::Result<PersistentVolumeClaim> {
        let stored = self.claim_named(&claim.name_any());
        if stored.metadata.resource_version != claim.metadata.resource_version {
            return Err(conflict());
        }
        self.store_claim(PersistentVolumeClaim {
            status: claim.status,
            ..stored
        })
    }

    fn event(&self, regarding: ObjectReference, note: Note) {
        let who = regarding.name.unwrap_or_default();
        self.events.lock().push((who, note.reason, note.note));
    }

    fn queue_claim(&self, namespace: &str, name: &str) {
        self.queued.lock().push(format!("{namespace}/{name}"));
    }
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

/// A volume of `size` in `phase` with reclaim policy `Retain`, RWO, no class, `extra` merged.
fn pv(name: &str, size: &str, phase: &str, extra: Value) -> PersistentVolume {
    let mut v = json!({
        "metadata": {"name": name, "resourceVersion": "1"},
        "spec": {"capacity": {"storage": size}, "accessModes": ["ReadWriteOnce"],
                 "persistentVolumeReclaimPolicy": "Retain", "hostPath": {"path": "/data"}},
        "status": {"phase": phase},
    });
    merge(&mut v, extra);
    serde_json::from_value(v).unwrap()
}

/// A volume bound to claim `claim` (uid `uid-<claim>`).
fn bound_pv(name: &str, size: &str, claim: &str, extra: Value) -> PersistentVolume {
    let mut e = json!({"spec": {"claimRef": {"kind": "PersistentVolumeClaim", "apiVersion": "v1",
        "namespace": "ns", "name": claim, "uid": format!("uid-{claim}")}},
        "metadata": {"annotations": {"pv.kubernetes.io/bound-by-controller": "yes"}}});
    merge(&mut e, extra);
    pv(name, size, "Bound", e)
}

/// A Pending claim of `size` (uid `uid-<name>`), RWO, `extra` merged.
fn pvc(name: &str, size: &str, extra: Value) -> PersistentVolumeClaim {
    let mut v = json!({
        "metadata": {"name": name, "namespace": "ns", "uid": format!("uid-{name}"),
                     "resourceVersion": "1"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": size}},
                 "storageClassName": ""},
        "status": {"phase": "Pending"},
    });
    merge(&mut v, extra);
    serde_json::from_value(v).unwrap()
}

/// A claim bound (both annotations, status) to `volume`.
fn bound_pvc(name: &str, size: &str, volume: &str) -> PersistentVolumeClaim {
    pvc(
        name,
        size,
        json!({"metadata": {"annotations": {"pv.kubernetes.io/bind-completed": "yes",
                                            "pv.kubernetes.io/bound-by-controller": "yes"}},
               "spec": {"volumeName": volume}, "status": {"phase": "Bound"}}),
    )
}

fn class(name: &str, provisioner: &str, mode: &str, default: bool) -> StorageClass {
    serde_json::from_value(json!({
        "metadata": {"name": name, "annotations": {
            "storageclass.kubernetes.io/is-default-class": default.to_string()}},
        "provisioner": provisioner, "volumeBindingMode": mode,
    }))
    .unwrap()
}

fn pod(name: &str, claim: &str, node: Option<&str>) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "ns"},
        "spec": {"nodeName": node, "containers": [],
                 "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}]},
    }))
    .unwrap()
}

/// What one case syncs.
enum Sync {
    Claim(&'static str),
    Volume(&'static str),
}

struct Case {
    name: &'static str,
    volumes: Vec<PersistentVolume>,
    claims: Vec<PersistentVolumeClaim>,
    classes: Vec<StorageClass>,
    pods: Vec<Pod>,
    sync: Sync,
    /// Each volume afterwards: name, phase, the uid of its claim (`""`: none or unset).
    expect_volumes: Vec<(&'static str, &'static str, &'static str)>,
    /// Each claim afterwards: name, phase, the volume it names.
    expect_claims: Vec<(&'static str, &'static str, &'static str)>,
    /// Every event: object, reason, note.
    expect_events: Vec<(&'static str, &'static str, &'static str)>,
}

impl Default for Case {
    fn default() -> Self {
        Case {
            name: "",
            volumes: vec![],
            claims: vec![],
            classes: vec![],
            pods: vec![],
            sync: Sync::Claim("c"),
            expect_volumes: vec![],
            expect_claims: vec![],
            expect_events: vec![],
        }
    }
}

async fn run(case: Case) -> Fake {
    let fake = Fake {
        classes: case.classes,
        pods: case.pods,
        ..Default::default()
    };
    for v in case.volumes {
        fake.volumes.lock().insert(v.name_any(), v);
    }
    for c in case.claims {
        fake.claims.lock().insert(format!("ns/{}", c.name_any()), c);
    }
    let result = match case.sync {
        Sync::Claim(name) => sync_claim(&fake, &fake.claim_named(name)).await,
        Sync::Volume(name) => sync_volume(&fake, &fake.volume_named(name)).await,
    };
    result.unwrap_or_else(|e| panic!("{}: {e}", case.name));
    for (name, phase, uid) in case.expect_volumes {
        let v = fake.volume_named(name);
        let got_phase = v.status.as_ref().and_then(|s| s.phase.clone());
        assert_eq!(
            got_phase.as_deref(),
            Some(phase),
            "{}: volume {name}",
            case.name
        );
        let got_uid = v.spec.as_ref().and_then(|s| s.claim_ref.as_ref());
        let got_uid = got_uid.and_then(|r| r.uid.clone()).unwrap_or_default();
        assert_eq!(got_uid, uid, "{}: volume {name}'s claim", case.name);
    }
    for (name, phase, volume) in case.expect_claims {
        let c = fake.claim_named(name);
        let got_phase = c.status.as_ref().and_then(|s| s.phase.clone());
        assert_eq!(
            got_phase.as_deref(),
            Some(phase),
            "{}: claim {name}",
            case.name
        );
        let got = c.spec.as_ref().and_then(|s| s.volume_name.clone());
        assert_eq!(
            got.unwrap_or_default(),
            volume,
            "{}: claim {name}'s volume",
            case.name
        );
    }
    let events: Vec<(String, String, String)> = case
        .expect_events
        .iter()
        .map(|(o, r, n)| (o.to_string(), r.to_string(), n.to_string()))
        .collect();
    assert_eq!(*fake.events.lock(), events, "{}: events", case.name);
    fake
}

fn annotation<K: kube::Resource>(obj: &K, key: &str) -> Option<String> {
    obj.meta().annotations.as_ref()?.get(key).cloned()
}

#[tokio::test]
async fn claims_bind_to_the_volume_upstream_would_pick() {
    let rwx_claim = pvc(
        "c",
        "1Gi",
        json!({"spec": {"accessModes": ["ReadWriteMany"]}}),
    );
    let cases = vec![
        Case {
            name: "smallest match",
            volumes: vec![
                pv("big", "10Gi", "Available", json!({})),
                pv("fit", "2Gi", "Available", json!({})),
                pv("tiny", "500Mi", "Available", json!({})),
            ],
            claims: vec![pvc("c", "1Gi", json!({}))],
            expect_volumes: vec![
                ("fit", "Bound", "uid-c"),
                ("big", "Available", ""),
                ("tiny", "Available", ""),
            ],
            expect_claims: vec![("c", "Bound", "fit")],
            ..Default::default()
        },
        Case {
            name: "pre-bound claim takes the volume it names",
            volumes: vec![
                pv("big", "10Gi", "Available", json!({})),
                pv("fit", "2Gi", "Available", json!({})),
            ],
            claims: vec![pvc("c", "1Gi", json!({"spec": {"volumeName": "big"}}))],
            expect_volumes: vec![("big", "Bound", "uid-c"), ("fit", "Available", "")],
            expect_claims: vec![("c", "Bound", "big")],
            ..Default::default()
        },
        Case {
            name: "pre-bound volume wins over a smaller one",
            volumes: vec![
                pv(
                    "mine",
                    "10Gi",
                    "Available",
                    json!({"spec": {"claimRef": {"namespace": "ns", "name": "c"}}}),
                ),
                pv("fit", "2Gi", "Available", json!({})),
            ],
            claims: vec![pvc("c", "1Gi", json!({}))],
            expect_volumes: vec![("mine", "Bound", "uid-c"), ("fit", "Available", "")],
            expect_claims: vec![("c", "Bound", "mine")],
            ..Default::default()
        },
        Case {
            name: "fewest access modes first",
            volumes: vec![
                pv(
                    "multi",
                    "1Gi",
                    "Available",
                    json!({"spec": {"accessModes": ["ReadWriteOnce", "ReadOnlyMany"]}}),
                ),
                pv("single", "5Gi", "Available", json!({})),
            ],
            claims: vec![pvc("c", "1Gi", json!({}))],
            expect_volumes: vec![("single", "Bound", "uid-c"), ("multi", "Available", "")],
            expect_claims: vec![("c", "Bound", "single")],
            ..Default::default()
        },
        Case {
            name: "access modes mismatch",
            volumes: vec![pv("v", "5Gi", "Available", json!({}))],
            claims: vec![rwx_claim],
            expect_volumes: vec![("v", "Available", "")],
            expect_claims: vec![("c", "Pending", "")],
            expect_events: vec![(
                "c",
                "FailedBinding",
                "no persistent volumes available for this claim and no storage class is set",
            )],
            ..Default::default()
        },
        Case {
            name: "selector",
            volumes: vec![
                pv(
                    "silver",
                    "1Gi",
                    "Available",
                    json!({"metadata": {"labels": {"tier": "silver"}}}),
                ),
                pv(
                    "gold",
                    "5Gi",
                    "Available",
                    json!({"metadata": {"labels": {"tier": "gold"}}}),
                ),
            ],
            claims: vec![pvc(
                "c",
                "1Gi",
                json!({"spec": {"selector": {"matchLabels": {"tier": "gold"}}}}),
            )],
            expect_volumes: vec![("gold", "Bound", "uid-c"), ("silver", "Available", "")],
            expect_claims: vec![("c", "Bound", "gold")],
            ..Default::default()
        },
        Case {
            name: "pre-bound to a volume that is too small",
            volumes: vec![pv("small", "500Mi", "Available", json!({}))],
            claims: vec![pvc("c", "1Gi", json!({"spec": {"volumeName": "small"}}))],
            expect_volumes: vec![("small", "Available", "")],
            expect_claims: vec![("c", "Pending", "small")],
            expect_events: vec![(
                "c",
                "VolumeMismatch",
                "Cannot bind to requested volume \"small\": requested PV is too small",
            )],
            ..Default::default()
        },
        Case {
            name: "pre-bound to a volume another claim has",
            volumes: vec![bound_pv("taken", "1Gi", "other", json!({}))],
            claims: vec![
                pvc("c", "1Gi", json!({"spec": {"volumeName": "taken"}})),
                bound_pvc("other", "1Gi", "taken"),
            ],
            expect_volumes: vec![("taken", "Bound", "uid-other")],
            expect_claims: vec![("c", "Pending", "taken")],
            expect_events: vec![(
                "c",
                "FailedBinding",
                "volume \"taken\" already bound to a different claim.",
            )],
            ..Default::default()
        },
    ];
    for case in cases {
        run(case).await;
    }
}

#[tokio::test]
async fn a_bind_writes_upstreams_annotations_claim_ref_and_status() {
    let fake = run(Case {
        name: "annotations",
        volumes: vec![pv("fit", "2Gi", "Available", json!({}))],
        claims: vec![pvc("c", "1Gi", json!({}))],
        expect_claims: vec![("c", "Bound", "fit")],
        ..Default::default()
    })
    .await;
    let (v, c) = (fake.volume_named("fit"), fake.claim_named("c"));
    assert_eq!(
        annotation(&v, "pv.kubernetes.io/bound-by-controller").as_deref(),
        Some("yes")
    );
    let r = v.spec.unwrap().claim_ref.unwrap();
    assert_eq!(
        (
            r.kind.as_deref(),
            r.api_version.as_deref(),
            r.namespace.as_deref()
        ),
        (Some("PersistentVolumeClaim"), Some("v1"), Some("ns"))
    );
    assert_eq!(
        annotation(&c, "pv.kubernetes.io/bind-completed").as_deref(),
        Some("yes")
    );
    assert_eq!(
        annotation(&c, "pv.kubernetes.io/bound-by-controller").as_deref(),
        Some("yes")
    );
    let status = c.status.unwrap();
    assert_eq!(status.capacity.unwrap()["storage"].0, "2Gi");
    assert_eq!(status.access_modes.unwrap(), ["ReadWriteOnce"]);

    // a claim that named its volume is not "bound by controller"; the volume is
    let fake = run(Case {
        name: "user binding",
        volumes: vec![pv("fit", "2Gi", "Available", json!({}))],
        claims: vec![pvc("c", "1Gi", json!({"spec": {"volumeName": "fit"}}))],
        ..Default::default()
    })
    .await;
    let c = fake.claim_named("c");
    assert_eq!(annotation(&c, "pv.kubernetes.io/bound-by-controller"), None);
    let v = fake.volume_named("fit");
    assert!(annotation(&v, "pv.kubernetes.io/bound-by-controller").is_some());
}

#[tokio::test]
async fn classes_decide_between_waiting_provisioning_and_failing() {
    let external = class("fast", "example.com/fast", "Immediate", false);
    let local = class("local", "example.com/local", "WaitForFirstConsumer", false);
    let waiting = "waiting for first consumer to be created before binding";
    let provisioning = "Waiting for a volume to be created either by the external provisioner \
        'example.com/fast' or manually by the system administrator. If volume creation is \
        delayed, please verify that the provisioner is running and correctly registered.";
    let cases = vec![
        Case {
            name: "class mismatch: the class's provisioner is asked",
            volumes: vec![pv("plain", "5Gi", "Available", json!({}))],
            claims: vec![pvc(
                "c",
                "1Gi",
                json!({"spec": {"storageClassName": "fast"}}),
            )],
            classes: vec![external.clone()],
            expect_volumes: vec![("plain", "Available", "")],
            expect_claims: vec![("c", "Pending", "")],
            expect_events: vec![("c", "ExternalProvisioning", provisioning)],
            ..Default::default()
        },
        Case {
            name: "unknown class",
            claims: vec![pvc(
                "c",
                "1Gi",
                json!({"spec": {"storageClassName": "nosuch"}}),
            )],
            expect_claims: vec![("c", "Pending", "")],
            expect_events: vec![(
                "c",
                "ProvisioningFailed",
                "storageclass.storage.k8s.io \"nosuch\" not found",
            )],
            ..Default::default()
        },
        Case {
            name: "WaitForFirstConsumer waits even with a matching volume",
            volumes: vec![pv(
                "local",
                "5Gi",
                "Available",
                json!({"spec": {"storageClassName": "local"}}),
            )],
            claims: vec![pvc(
                "c",
                "1Gi",
                json!({"spec": {"storageClassName": "local"}}),
            )],
            classes: vec![local.clone()],
            expect_volumes: vec![("local", "Available", "")],
            expect_claims: vec![("c", "Pending", "")],
            expect_events: vec![("c", "WaitForFirstConsumer", waiting)],
            ..Default::default()
        },
        Case {
            name: "WaitForFirstConsumer names the pod waiting to be scheduled",
            claims: vec![pvc(
                "c",
                "1Gi",
                json!({"spec": {"storageClassName": "local"}}),
            )],
            classes: vec![local.clone()],
            pods: vec![pod("web-0", "c", None), pod("done", "c", Some("n1"))],
            expect_claims: vec![("c", "Pending", "")],
            expect_events: vec![(
                "c",
                "WaitForPodScheduled",
                "waiting for pod web-0 to be scheduled",
            )],
            ..Default::default()
        },
        Case {
            name: "WaitForFirstConsumer with a selected node is provisioned",
            claims: vec![pvc(
                "c",
                "1Gi",
                json!({"spec": {"storageClassName": "local"},
                       "metadata": {"annotations": {"volume.kubernetes.io/selected-node": "n1"}}}),
            )],
            classes: vec![local.clone()],
            expect_claims: vec![("c", "Pending", "")],
            expect_events: vec![(
                "c",
                "ExternalProvisioning",
                "Waiting for a volume to be created either by the external provisioner \
                 'example.com/local' or manually by the system administrator. If volume \
                 creation is delayed, please verify that the provisioner is running and \
                 correctly registered.",
            )],
            ..Default::default()
        },
        Case {
            name: "an in-tree provisioner Skiff does not have",
            claims: vec![pvc(
                "c",
                "1Gi",
                json!({"spec": {"storageClassName": "manual"}}),
            )],
            classes: vec![class(
                "manual",
                "kubernetes.io/no-provisioner",
                "Immediate",
                false,
            )],
            expect_claims: vec![("c", "Pending", "")],
            expect_events: vec![(
                "c",
                "ProvisioningFailed",
                "no volume plugin matched name: kubernetes.io/no-provisioner",
            )],
            ..Default::default()
        },
    ];
    for case in cases {
        run(case).await;
    }
    // the provisioner is named on the claim, under both annotations
    let fake = run(Case {
        name: "provisioner annotations",
        claims: vec![pvc(
            "c",
            "1Gi",
            json!({"spec": {"storageClassName": "fast"}}),
        )],
        classes: vec![external],
        expect_events: vec![("c", "ExternalProvisioning", provisioning)],
        ..Default::default()
    })
    .await;
    let c = fake.claim_named("c");
    for key in [
        "volume.kubernetes.io/storage-provisioner",
        "volume.beta.kubernetes.io/storage-provisioner",
    ] {
        assert_eq!(annotation(&c, key).as_deref(), Some("example.com/fast"));
    }
}

#[tokio::test]
async fn a_claim_without_a_class_gets_the_default_one() {
    let mut claim = pvc("c", "1Gi", json!({}));
    claim.spec.as_mut().unwrap().storage_class_name = None;
    let fake = run(Case {
        name: "default class",
        claims: vec![claim],
        classes: vec![
            class("local", "example.com/local", "WaitForFirstConsumer", true),
            class("other", "example.com/other", "Immediate", false),
        ],
        expect_claims: vec![("c", "Pending", "")],
        ..Default::default()
    })
    .await;
    let c = fake.claim_named("c");
    assert_eq!(c.spec.unwrap().storage_class_name.as_deref(), Some("local"));
    // `""` asks for no class: it is left alone and binds to class-less volumes only
    let fake = run(Case {
        name: "explicitly no class",
        claims: vec![pvc("c", "1Gi", json!({}))],
        classes: vec![class(
            "local",
            "example.com/local",
            "WaitForFirstConsumer",
            true,
        )],
        volumes: vec![pv("plain", "1Gi", "Available", json!({}))],
        expect_claims: vec![("c", "Bound", "plain")],
        ..Default::default()
    })
    .await;
    assert_eq!(
        fake.claim_named("c")
            .spec
            .unwrap()
            .storage_class_name
            .as_deref(),
        Some("")
    );
}

#[tokio::test]
async fn volumes_move_through_their_phases_as_upstreams_do() {
    let cases = vec![
        Case {
            name: "a new volume is Available",
            volumes: vec![pv("v", "1Gi", "Pending", json!({}))],
            sync: Sync::Volume("v"),
            expect_volumes: vec![("v", "Available", "")],
            ..Default::default()
        },
        Case {
            name: "Retain: Released once its claim is deleted",
            volumes: vec![bound_pv("v", "1Gi", "gone", json!({}))],
            sync: Sync::Volume("v"),
            expect_volumes: vec![("v", "Released", "uid-gone")],
            ..Default::default()
        },
        Case {
            name: "Delete of a volume no plugin deletes: Failed",
            volumes: vec![bound_pv(
                "v",
                "1Gi",
                "gone",
                json!({"spec": {"persistentVolumeReclaimPolicy": "Delete"}}),
            )],
            sync: Sync::Volume("v"),
            expect_volumes: vec![("v", "Failed", "uid-gone")],
            expect_events: vec![(
                "v",
                "VolumeFailedDelete",
                "host_path deleter only supports /tmp/.+ but received provided /data",
            )],
            ..Default::default()
        },
        Case {
            name: "Delete of a local volume: Failed",
            volumes: vec![bound_pv(
                "v",
                "1Gi",
                "gone",
                json!({"spec": {"persistentVolumeReclaimPolicy": "Delete", "hostPath": null,
                                "local": {"path": "/mnt/disk"}}}),
            )],
            sync: Sync::Volume("v"),
            expect_volumes: vec![("v", "Failed", "uid-gone")],
            expect_events: vec![(
                "v",
                "VolumeFailedDelete",
                "error getting deleter volume plugin for volume \"v\": no deletable volume plugin matched",
            )],
            ..Default::default()
        },
        Case {
            name: "Delete of an externally provisioned volume: left to its provisioner",
            volumes: vec![bound_pv(
                "v",
                "1Gi",
                "gone",
                json!({"spec": {"persistentVolumeReclaimPolicy": "Delete"},
                       "metadata": {"annotations": {"pv.kubernetes.io/provisioned-by": "example.com/p"}}}),
            )],
            sync: Sync::Volume("v"),
            expect_volumes: vec![("v", "Released", "uid-gone")],
            ..Default::default()
        },
        Case {
            name: "Recycle with no recycler: Failed",
            volumes: vec![bound_pv(
                "v",
                "1Gi",
                "gone",
                json!({"spec": {"persistentVolumeReclaimPolicy": "Recycle"}}),
            )],
            sync: Sync::Volume("v"),
            expect_volumes: vec![("v", "Failed", "uid-gone")],
            expect_events: vec![(
                "v",
                "VolumeFailedRecycle",
                "No recycler plugin found for the volume!",
            )],
            ..Default::default()
        },
        Case {
            name: "a Failed volume is not failed again",
            volumes: vec![bound_pv(
                "v",
                "1Gi",
                "gone",
                json!({"spec": {"persistentVolumeReclaimPolicy": "Delete"},
                       "status": {"phase": "Failed"}}),
            )],
            sync: Sync::Volume("v"),
            expect_volumes: vec![("v", "Failed", "uid-gone")],
            ..Default::default()
        },
        Case {
            name: "bound both ways: Bound",
            volumes: vec![bound_pv(
                "v",
                "1Gi",
                "c",
                json!({"status": {"phase": "Available"}}),
            )],
            claims: vec![bound_pvc("c", "1Gi", "v")],
            sync: Sync::Volume("v"),
            expect_volumes: vec![("v", "Bound", "uid-c")],
            ..Default::default()
        },
        Case {
            name: "the controller's binding to a claim bound elsewhere is undone",
            volumes: vec![bound_pv("v", "1Gi", "c", json!({}))],
            claims: vec![bound_pvc("c", "1Gi", "elsewhere")],
            sync: Sync::Volume("v"),
            expect_volumes: vec![("v", "Available", "")],
            ..Default::default()
        },
        Case {
            name: "a bound claim whose volume vanished is Lost",
            claims: vec![bound_pvc("c", "1Gi", "gone")],
            expect_claims: vec![("c", "Lost", "gone")],
            expect_events: vec![(
                "c",
                "ClaimLost",
                "Bound claim has lost its PersistentVolume. Data on the volume is lost!",
            )],
            ..Default::default()
        },
        Case {
            name: "a bound claim whose volume has another claimant is Lost",
            volumes: vec![bound_pv("v", "1Gi", "other", json!({}))],
            claims: vec![bound_pvc("c", "1Gi", "v"), bound_pvc("other", "1Gi", "v")],
            expect_claims: vec![("c", "Lost", "v")],
            expect_events: vec![(
                "c",
                "ClaimMisbound",
                "Two claims are bound to the same volume, this one is bound incorrectly",
            )],
            ..Default::default()
        },
    ];
    for case in cases {
        run(case).await;
    }
}

#[tokio::test]
async fn a_volume_bound_ahead_of_its_claim_queues_the_claim_and_a_failure_keeps_its_message() {
    let fake = run(Case {
        name: "claim not bound yet",
        volumes: vec![bound_pv("v", "1Gi", "c", json!({}))],
        claims: vec![pvc("c", "1Gi", json!({}))],
        sync: Sync::Volume("v"),
        expect_volumes: vec![("v", "Bound", "uid-c")],
        ..Default::default()
    })
    .await;
    assert_eq!(*fake.queued.lock(), ["ns/c"]);

    let fake = run(Case {
        name: "failed delete",
        volumes: vec![bound_pv(
            "v",
            "1Gi",
            "gone",
            json!({"spec": {"persistentVolumeReclaimPolicy": "Delete"}}),
        )],
        sync: Sync::Volume("v"),
        expect_events: vec![(
            "v",
            "VolumeFailedDelete",
            "host_path deleter only supports /tmp/.+ but received provided /data",
        )],
        ..Default::default()
    })
    .await;
    let status = fake.volume_named("v").status.unwrap();
    assert_eq!(
        status.message.as_deref(),
        Some("host_path deleter only supports /tmp/.+ but received provided /data")
    );
}

#[test]
fn a_conflict_is_synced_again_soon_and_other_errors_go_to_the_backoff() {
    use skiff_runtime::controller::Action;
    let conflicted = super::outcome("ns/c", Err(super::sync::Error::Api(conflict())));
    assert!(matches!(
        conflicted,
        Ok(Action::RequeueAfter(d)) if d == super::CONFLICT_RETRY
    ));
    let gone = kube::Error::Api(
        kube::core::Status::failure("gone", "NotFound")
            .with_code(404)
            .boxed(),
    );
    assert!(super::outcome("ns/c", Err(super::sync::Error::Api(gone))).is_err());
    assert!(matches!(
        super::outcome("ns/c", Ok(())),
        Ok(Action::AwaitChange)
    ));
}
