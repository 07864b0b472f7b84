//! Unit tests of the `statefulset` controller: its steps per sync and its writes through a
//! recording fake.

use super::*;
use parking_lot::Mutex;
use serde_json::json;

fn set(replicas: i32, extra: serde_json::Value) -> StatefulSet {
    let mut spec = json!({"replicas": replicas, "serviceName": "db",
        "selector": {"matchLabels": {"app": "db"}},
        "template": {"metadata": {"labels": {"app": "db"}},
            "spec": {"containers": [{"name": "c", "image": "i"}]}}});
    spec.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    serde_json::from_value(
        json!({"metadata": {"name": "db", "namespace": "ns", "uid": "u",
        "generation": 1}, "spec": spec}),
    )
    .unwrap()
}

fn pod(n: i32, hash: &str, ready: bool) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": format!("db-{n}"), "namespace": "ns", "uid": format!("uid-{n}"),
            "labels": {"app": "db", HASH_LABEL: hash},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "db",
                "uid": "u", "controller": true}]},
        "status": {"phase": if ready { "Running" } else { "Pending" },
            "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}]}
    }))
    .unwrap()
}

fn steps(set: &StatefulSet, pods: &[Pod], current: &str, update: &str) -> Vec<Step> {
    let by: BTreeMap<i32, &Pod> = pods
        .iter()
        .map(|p| (identity::ordinal(set, p).unwrap(), p))
        .collect();
    plan(set, &by, current, update)
}

fn create(ordinal: i32) -> Step {
    Step::Create {
        ordinal,
        updated: true,
    }
}

fn delete(n: i32) -> Step {
    Step::Delete {
        name: format!("db-{n}"),
        uid: format!("uid-{n}"),
    }
}

#[test]
fn ordered_ready_creates_one_pod_at_a_time_after_the_previous_is_ready() {
    let s = set(3, json!({}));
    assert_eq!(steps(&s, &[], "h", "h"), vec![create(0)]);
    assert_eq!(steps(&s, &[pod(0, "h", false)], "h", "h"), vec![]);
    assert_eq!(steps(&s, &[pod(0, "h", true)], "h", "h"), vec![create(1)]);
    // a gap is filled first
    assert_eq!(steps(&s, &[pod(1, "h", true)], "h", "h"), vec![create(0)]);
}

#[test]
fn ordered_ready_scales_down_from_the_highest_ordinal_one_at_a_time() {
    let s = set(1, json!({}));
    let pods = [pod(0, "h", true), pod(1, "h", true), pod(2, "h", true)];
    assert_eq!(steps(&s, &pods, "h", "h"), vec![delete(2)]);
    let mut terminating = pod(2, "h", true);
    terminating.metadata.deletion_timestamp = Some(
        k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff::Timestamp::now()),
    );
    let pods = [pod(0, "h", true), pod(1, "h", true), terminating];
    assert_eq!(
        steps(&s, &pods, "h", "h"),
        vec![],
        "waits for the highest to go"
    );
}

#[test]
fn parallel_creates_and_deletes_all_at_once() {
    let s = set(3, json!({"podManagementPolicy": "Parallel"}));
    assert_eq!(
        steps(&s, &[], "h", "h"),
        vec![create(0), create(1), create(2)]
    );
    let s = set(1, json!({"podManagementPolicy": "Parallel"}));
    let pods = [pod(0, "h", false), pod(1, "h", true), pod(2, "h", true)];
    assert_eq!(steps(&s, &pods, "h", "h"), vec![delete(2), delete(1)]);
}

#[test]
fn rolling_update_goes_from_the_highest_ordinal_down_to_the_partition() {
    let s = set(3, json!({}));
    let pods = [
        pod(0, "old", true),
        pod(1, "old", true),
        pod(2, "old", true),
    ];
    assert_eq!(steps(&s, &pods, "old", "new"), vec![delete(2)]);
    let pods = [
        pod(0, "old", true),
        pod(1, "old", true),
        pod(2, "new", false),
    ];
    assert_eq!(
        steps(&s, &pods, "old", "new"),
        vec![],
        "waits for db-2 to be Ready"
    );
    let pods = [
        pod(0, "old", true),
        pod(1, "old", true),
        pod(2, "new", true),
    ];
    assert_eq!(steps(&s, &pods, "old", "new"), vec![delete(1)]);
    let partitioned = set(
        3,
        json!({"updateStrategy": {"type": "RollingUpdate",
        "rollingUpdate": {"partition": 2}}}),
    );
    let pods = [
        pod(0, "old", true),
        pod(1, "old", true),
        pod(2, "new", true),
    ];
    assert_eq!(steps(&partitioned, &pods, "old", "new"), vec![]);
    // below the partition a missing pod comes back at the current revision
    let pods = [pod(1, "old", true), pod(2, "new", true)];
    assert_eq!(
        steps(&partitioned, &pods, "old", "new"),
        vec![Step::Create {
            ordinal: 0,
            updated: false
        }]
    );
    let on_delete = set(3, json!({"updateStrategy": {"type": "OnDelete"}}));
    let pods = [
        pod(0, "old", true),
        pod(1, "old", true),
        pod(2, "old", true),
    ];
    assert_eq!(steps(&on_delete, &pods, "old", "new"), vec![]);
}

#[test]
fn status_counts_replicas_and_completes_the_rollout_when_all_are_updated_and_ready() {
    let s = set(2, json!({}));
    let pods = [pod(0, "old", true), pod(1, "new", false)];
    let refs: Vec<&Pod> = pods.iter().collect();
    let st = status(&s, &refs, "old", "new");
    assert_eq!(
        (
            st.replicas,
            st.ready_replicas,
            st.current_replicas,
            st.updated_replicas
        ),
        (2, Some(1), Some(1), Some(1))
    );
    assert_eq!(st.current_revision.as_deref(), Some("old"));
    let pods = [pod(0, "new", true), pod(1, "new", true)];
    let refs: Vec<&Pod> = pods.iter().collect();
    let st = status(&s, &refs, "old", "new");
    assert_eq!(st.current_revision.as_deref(), Some("new"));
    assert_eq!(
        (st.current_replicas, st.observed_generation),
        (Some(2), Some(1))
    );
}

#[derive(Default)]
struct Recording {
    writes: Mutex<Vec<String>>,
}

#[async_trait]
impl StatefulSetApi for Recording {
    async fn ensure_claim(&self, _: &StatefulSet, c: &PersistentVolumeClaim) -> kube::Result<()> {
        self.writes.lock().push(format!("claim {}", c.name_any()));
        Ok(())
    }
    async fn add_claim_owner(
        &self,
        _: &StatefulSet,
        claim: &str,
        o: &OwnerReference,
    ) -> kube::Result<()> {
        self.writes
            .lock()
            .push(format!("claim {claim} owned by {} {}", o.kind, o.name));
        Ok(())
    }
    async fn create_pod(&self, _: &StatefulSet, p: &Pod) -> kube::Result<()> {
        self.writes.lock().push(format!("create {}", p.name_any()));
        Ok(())
    }
    async fn delete_pod(&self, _: &StatefulSet, name: &str, _: &str) -> kube::Result<()> {
        self.writes.lock().push(format!("delete {name}"));
        Ok(())
    }
    async fn patch_pod(&self, _: &StatefulSet, name: &str, p: Value) -> kube::Result<()> {
        self.writes
            .lock()
            .push(format!("{} pod {name}", claim::patch_kind(&p)));
        Ok(())
    }
    async fn patch_revision(&self, _: &StatefulSet, name: &str, p: Value) -> kube::Result<()> {
        self.writes
            .lock()
            .push(format!("{} revision {name}", claim::patch_kind(&p)));
        Ok(())
    }
    async fn save_revision(&self, r: &Current) -> kube::Result<()> {
        self.writes
            .lock()
            .push(format!("revision {}", r.revision().revision));
        Ok(())
    }
    async fn delete_revision(&self, _: &str, name: &str) -> kube::Result<()> {
        self.writes.lock().push(format!("delete revision {name}"));
        Ok(())
    }
    async fn update_status(&self, _: &StatefulSet, s: &StatefulSetStatus) -> kube::Result<()> {
        self.writes
            .lock()
            .push(format!("status replicas={}", s.replicas));
        Ok(())
    }
}

#[tokio::test]
async fn claims_are_created_before_their_pod() {
    let s = set(
        2,
        json!({"volumeClaimTemplates": [{"metadata": {"name": "data"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}]}),
    );
    let api = Recording::default();
    reconcile(&s, &[], &[], &api).await.unwrap();
    assert_eq!(
        *api.writes.lock(),
        vec![
            "revision 1",
            "claim data-db-0",
            "create db-0",
            "status replicas=0"
        ]
    );
}

#[tokio::test]
async fn scaling_down_with_when_scaled_delete_hands_the_claims_to_their_pod() {
    let templates = json!([{"metadata": {"name": "data"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}]);
    let pods = [pod(0, "h", true), pod(1, "h", true)];
    let refs: Vec<&Pod> = pods.iter().collect();
    for (policy, handed) in [("Delete", true), ("Retain", false)] {
        let s = set(
            1,
            json!({"volumeClaimTemplates": templates.clone(),
            "persistentVolumeClaimRetentionPolicy": {"whenScaled": policy}}),
        );
        let api = Recording::default();
        reconcile(&s, &refs, &[], &api).await.unwrap();
        let writes = api.writes.lock().clone();
        assert_eq!(
            writes.contains(&"claim data-db-1 owned by Pod db-1".to_string()),
            handed,
            "{writes:?}"
        );
        assert!(writes.contains(&"delete db-1".to_string()), "{writes:?}");
        assert!(writes.iter().all(|w| !w.starts_with("delete claim")));
    }
}

fn orphan(pod: &mut Pod) -> &mut Pod {
    pod.metadata.owner_references = None;
    pod
}

#[tokio::test]
async fn orphans_with_a_member_name_are_adopted_instead_of_created_again() {
    let s = set(2, json!({}));
    let mut adopted = pod(0, "h", false);
    let mut stranger = pod(0, "h", true);
    stranger.metadata.name = Some("other-0".into());
    let mut mismatched = pod(1, "h", true);
    mismatched.metadata.labels = Some([("app".to_string(), "web".to_string())].into());
    let pods = [
        orphan(&mut adopted).clone(),
        orphan(&mut stranger).clone(),
        orphan(&mut mismatched).clone(),
    ];
    let refs: Vec<&Pod> = pods.iter().collect();
    let api = Recording::default();
    reconcile(&s, &refs, &[], &api).await.unwrap();
    let writes = api.writes.lock().clone();
    assert_eq!(writes[..2], ["adopt pod db-0", "revision 1"], "{writes:?}");
    // db-0 is the set's now and not Ready: OrderedReady waits for it instead of creating db-0
    assert!(
        writes.iter().all(|w| !w.starts_with("create")),
        "{writes:?}"
    );
    assert!(
        writes.contains(&"status replicas=1".to_string()),
        "{writes:?}"
    );
}

#[tokio::test]
async fn owned_pods_that_no_longer_match_are_released_and_replaced() {
    let s = set(1, json!({}));
    let mut relabelled = pod(0, "h", true);
    relabelled.metadata.labels = Some([("app".to_string(), "debug".to_string())].into());
    let api = Recording::default();
    reconcile(&s, &[&relabelled], &[], &api).await.unwrap();
    let writes = api.writes.lock().clone();
    assert_eq!(
        writes[..3],
        ["release pod db-0", "revision 1", "create db-0"],
        "{writes:?}"
    );
}

#[tokio::test]
async fn a_set_being_deleted_adopts_nothing() {
    let mut s = set(1, json!({}));
    s.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        jiff::Timestamp::now(),
    ));
    let mut p = pod(0, "h", true);
    let api = Recording::default();
    reconcile(&s, &[orphan(&mut p)], &[], &api).await.unwrap();
    assert!(api.writes.lock().is_empty(), "{:?}", api.writes.lock());
}

#[tokio::test]
async fn orphan_revisions_matching_the_selector_are_adopted() {
    let s = set(1, json!({}));
    let rev: ControllerRevision = serde_json::from_value(json!({
        "metadata": {"name": "db-abc", "namespace": "ns", "labels": {"app": "db"}},
        "revision": 1}))
    .unwrap();
    let api = Recording::default();
    reconcile(&s, &[], &[&rev], &api).await.unwrap();
    let writes = api.writes.lock().clone();
    assert!(
        writes.contains(&"adopt revision db-abc".to_string()),
        "{writes:?}"
    );
}
