use std::collections::BTreeMap;

use parking_lot::Mutex;
use serde_json::json;

use super::*;

fn claim(annotations: serde_json::Value) -> PersistentVolumeClaim {
    serde_json::from_value(json!({
        "metadata": {"name": "data", "namespace": "prod", "uid": "u-1",
                     "resourceVersion": "7", "annotations": annotations},
        "spec": {"storageClassName": "local-path", "accessModes": ["ReadWriteOnce"],
                 "resources": {"requests": {"storage": "2Gi"}}},
        "status": {"phase": "Pending"},
    }))
    .unwrap()
}

fn handed_over(node: Option<&str>) -> PersistentVolumeClaim {
    let mut a = json!({ANN_STORAGE_PROVISIONER: PROVISIONER});
    if let Some(n) = node {
        a[ANN_SELECTED_NODE] = json!(n);
    }
    claim(a)
}

fn class(mode: &str) -> StorageClass {
    serde_json::from_value(json!({
        "metadata": {"name": "local-path"}, "provisioner": PROVISIONER,
        "reclaimPolicy": "Delete", "volumeBindingMode": mode,
    }))
    .unwrap()
}

fn node(dir: Option<&str>) -> Arc<Node> {
    let mut n = json!({"metadata": {"name": "n1", "labels": {HOSTNAME_LABEL: "n1"}}});
    if let Some(d) = dir {
        n["metadata"]["annotations"] = json!({ANN_NODE_DIR: d});
    }
    Arc::new(serde_json::from_value(n).unwrap())
}

fn nodes(dir: Option<&str>) -> impl Fn(&str) -> Option<Arc<Node>> {
    let n = node(dir);
    move |name| (name == "n1").then(|| n.clone())
}

#[test]
fn a_placed_claim_gets_a_host_path_volume_under_its_nodes_directory_with_affinity_to_it() {
    let Plan::Create(v) = plan(
        &handed_over(Some("n1")),
        Some(&class("WaitForFirstConsumer")),
        nodes(Some("/var/lib/skiff/storage")),
    ) else {
        panic!("expected a volume");
    };
    let v = serde_json::to_value(*v).unwrap();
    assert_eq!(
        v,
        json!({
            "apiVersion": "v1", "kind": "PersistentVolume",
            "metadata": {"name": "pvc-u-1", "labels": {LABEL_NODE: "n1"},
                         "annotations": {ANN_DYNAMICALLY_PROVISIONED: PROVISIONER}},
            "spec": {
                "capacity": {"storage": "2Gi"},
                "accessModes": ["ReadWriteOnce"],
                "volumeMode": "Filesystem",
                "claimRef": {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                             "namespace": "prod", "name": "data", "uid": "u-1",
                             "resourceVersion": "7"},
                "persistentVolumeReclaimPolicy": "Delete",
                "storageClassName": "local-path",
                "hostPath": {"path": "/var/lib/skiff/storage/pvc-u-1_prod_data",
                             "type": "DirectoryOrCreate"},
                "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                    {"key": "kubernetes.io/hostname", "operator": "In", "values": ["n1"]}]}]}},
            },
        })
    );
}

#[test]
fn claims_not_handed_over_or_not_yet_placed_are_skipped() {
    let wffc = class("WaitForFirstConsumer");
    let n = nodes(Some("/d"));
    assert_eq!(plan(&claim(json!({})), Some(&wffc), &n), Plan::Skip);
    let other = claim(json!({ANN_STORAGE_PROVISIONER: "example.com/nfs",
                             ANN_SELECTED_NODE: "n1"}));
    assert_eq!(plan(&other, Some(&wffc), &n), Plan::Skip);
    assert_eq!(plan(&handed_over(None), Some(&wffc), &n), Plan::Skip);
    let mut bound = handed_over(Some("n1"));
    bound.spec.as_mut().unwrap().volume_name = Some("pvc-u-1".into());
    assert_eq!(plan(&bound, Some(&wffc), &n), Plan::Skip);
}

#[test]
fn an_immediate_class_fails_and_a_missing_node_or_directory_reschedules_with_a_cause() {
    let n = nodes(Some("/d"));
    let Plan::Fail(why) = plan(&handed_over(None), Some(&class("Immediate")), &n) else {
        panic!()
    };
    assert!(why.contains("WaitForFirstConsumer"), "{why}");
    let wffc = class("WaitForFirstConsumer");
    assert_eq!(
        plan(&handed_over(Some("gone")), Some(&wffc), &n),
        Plan::Reschedule("nodes \"gone\" not found".into())
    );
    let Plan::Reschedule(why) = plan(&handed_over(Some("n1")), Some(&wffc), nodes(None)) else {
        panic!()
    };
    assert!(why.contains(ANN_NODE_DIR), "{why}");
    let mut block = handed_over(Some("n1"));
    block.spec.as_mut().unwrap().volume_mode = Some("Block".into());
    assert!(matches!(plan(&block, Some(&wffc), &n), Plan::Fail(_)));
}

#[derive(Default)]
struct Fake {
    created: Mutex<Vec<String>>,
    events: Mutex<Vec<Note>>,
    existing: Mutex<BTreeMap<String, ()>>,
    unselected: Mutex<Vec<String>>,
    refuse: bool,
}

#[async_trait]
impl Cluster for Fake {
    fn class(&self, name: &str) -> Option<Arc<StorageClass>> {
        (name == "local-path").then(|| Arc::new(class("WaitForFirstConsumer")))
    }
    fn node(&self, name: &str) -> Option<Arc<Node>> {
        (name == "n1").then(|| node(Some("/d")))
    }
    fn volume_exists(&self, name: &str) -> bool {
        self.existing.lock().contains_key(name)
    }
    async fn create_volume(&self, volume: &PersistentVolume) -> kube::Result<()> {
        if self.refuse {
            return Err(kube::Error::Api(
                kube::core::Status::failure("forbidden", "Forbidden")
                    .with_code(403)
                    .boxed(),
            ));
        }
        self.created.lock().push(volume.name_any());
        self.existing.lock().insert(volume.name_any(), ());
        Ok(())
    }
    async fn unselect_node(&self, claim: &PersistentVolumeClaim) -> kube::Result<()> {
        if self.refuse {
            return Err(kube::Error::Api(
                kube::core::Status::failure("conflict", "Conflict")
                    .with_code(409)
                    .boxed(),
            ));
        }
        self.unselected.lock().push(claim.name_any());
        Ok(())
    }
    fn event(&self, _regarding: ObjectReference, note: Note) {
        self.events.lock().push(note);
    }
}

fn reasons(f: &Fake) -> Vec<String> {
    f.events.lock().iter().map(|n| n.reason.clone()).collect()
}

#[tokio::test]
async fn a_sync_creates_the_volume_once_with_the_librarys_events() {
    let f = Fake::default();
    let c = handed_over(Some("n1"));
    sync(&f, &c).await.unwrap();
    sync(&f, &c).await.unwrap();
    assert_eq!(*f.created.lock(), ["pvc-u-1"]);
    assert_eq!(reasons(&f), ["Provisioning", "ProvisioningSucceeded"]);
    assert_eq!(
        f.events.lock()[0].note,
        "External provisioner is provisioning volume for claim \"prod/data\""
    );
    assert_eq!(
        f.events.lock()[1].note,
        "Successfully provisioned volume pvc-u-1"
    );
}

#[tokio::test]
async fn a_refused_create_is_a_provisioning_failure_and_an_error_to_retry() {
    let f = Fake {
        refuse: true,
        ..Default::default()
    };
    let err = sync(&f, &handed_over(Some("n1"))).await.unwrap_err();
    assert!(matches!(err, Error::Create { .. }), "{err}");
    assert_eq!(reasons(&f), ["Provisioning", "ProvisioningFailed"]);
    assert!(
        f.events.lock()[1]
            .note
            .starts_with("failed to provision volume with StorageClass \"local-path\": "),
        "{:?}",
        f.events.lock()
    );
}

#[tokio::test]
async fn a_claim_placed_on_a_node_that_is_gone_goes_back_to_the_scheduler() {
    let f = Fake::default();
    sync(&f, &handed_over(Some("gone"))).await.unwrap();
    assert_eq!(*f.unselected.lock(), ["data"], "selected-node removed");
    assert!(f.created.lock().is_empty());
    assert_eq!(reasons(&f), ["ProvisioningFailed"]);
    assert_eq!(
        f.events.lock()[0].note,
        "failed to provision volume with StorageClass \"local-path\": nodes \"gone\" not found"
    );
    // the update that removes it failed: retried
    let f = Fake {
        refuse: true,
        ..Default::default()
    };
    let err = sync(&f, &handed_over(Some("gone"))).await.unwrap_err();
    assert!(matches!(err, Error::Reschedule { .. }), "{err}");
}
