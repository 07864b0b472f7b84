//! Unit tests of the `statefulset` controller: its steps per sync and its writes through a
//! recording fake.

use super::*;
use crate::revision::HASH_LABEL;
use parking_lot::Mutex;
use serde_json::json;
use std::collections::BTreeMap;
use std::time::Duration;

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

fn now() -> jiff::Timestamp {
    "2026-01-01T12:00:00Z".parse().unwrap()
}

/// A Running pod that turned Ready `secs` seconds before [`now`].
fn ready_for(n: i32, hash: &str, secs: i64) -> Pod {
    let mut p = pod(n, hash, true);
    let since = now() - jiff::SignedDuration::from_secs(secs);
    let conditions = p.status.as_mut().unwrap().conditions.as_mut().unwrap();
    conditions[0].last_transition_time =
        Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(since));
    p
}

fn view<'a>(set: &StatefulSet, pods: &'a [Pod], claims: &'a [PersistentVolumeClaim]) -> View<'a> {
    View {
        pods: pods
            .iter()
            .map(|p| (identity::ordinal(set, p).unwrap(), p))
            .collect(),
        claims: claims
            .iter()
            .map(|c| (c.metadata.name.as_deref().unwrap(), c))
            .collect(),
        now: now(),
    }
}

/// A revision whose name is its hash.
fn rev(name: &str) -> Rev<'_> {
    Rev { name, hash: name }
}

fn steps(set: &StatefulSet, pods: &[Pod], current: &str, update: &str) -> Vec<Step> {
    plan(set, &view(set, pods, &[]), rev(current), rev(update))
}

fn create(ordinal: i32) -> Step {
    Step::Create {
        ordinal,
        updated: true,
    }
}

fn delete_for(n: i32, why: Why) -> Step {
    Step::Delete {
        name: format!("db-{n}"),
        uid: format!("uid-{n}"),
        why,
    }
}

fn delete(n: i32) -> Step {
    delete_for(n, Why::ScaledDown)
}

fn update(n: i32) -> Step {
    delete_for(n, Why::Update)
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
    assert_eq!(steps(&s, &pods, "old", "new"), vec![update(2)]);
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
    assert_eq!(steps(&s, &pods, "old", "new"), vec![update(1)]);
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
fn ordered_ready_waits_for_each_pod_to_be_available_for_min_ready_seconds() {
    let s = set(2, json!({"minReadySeconds": 30}));
    assert_eq!(steps(&s, &[ready_for(0, "h", 10)], "h", "h"), vec![]);
    assert_eq!(
        steps(&s, &[ready_for(0, "h", 31)], "h", "h"),
        vec![create(1)]
    );
    // scaling down waits for the pods that stay to be available too
    let s = set(1, json!({"minReadySeconds": 30}));
    let pods = [ready_for(0, "h", 10), ready_for(1, "h", 60)];
    assert_eq!(steps(&s, &pods, "h", "h"), vec![]);
    let pods = [ready_for(0, "h", 60), ready_for(1, "h", 10)];
    assert_eq!(
        steps(&s, &pods, "h", "h"),
        vec![delete(1)],
        "the first unavailable pod itself may go"
    );
}

#[test]
fn rolling_update_waits_for_the_replaced_pod_to_be_available() {
    let s = set(2, json!({"minReadySeconds": 30}));
    let pods = [ready_for(0, "old", 600), ready_for(1, "new", 10)];
    assert_eq!(steps(&s, &pods, "old", "new"), vec![]);
    let pods = [ready_for(0, "old", 600), ready_for(1, "new", 31)];
    assert_eq!(steps(&s, &pods, "old", "new"), vec![update(0)]);
}

#[test]
fn max_unavailable_replaces_that_many_pods_at_once_from_the_top() {
    let parallel = |max: serde_json::Value| {
        set(
            5,
            json!({"podManagementPolicy": "Parallel", "updateStrategy":
                {"type": "RollingUpdate", "rollingUpdate": {"partition": 0, "maxUnavailable": max}}}),
        )
    };
    let old: Vec<Pod> = (0..5).map(|n| pod(n, "old", true)).collect();
    assert_eq!(
        steps(&parallel(json!(2)), &old, "old", "new"),
        vec![update(4), update(3)]
    );
    // a percentage of the replicas, rounded down, at least one
    assert_eq!(
        steps(&parallel(json!("60%")), &old, "old", "new"),
        vec![update(4), update(3), update(2)]
    );
    assert_eq!(
        steps(&parallel(json!("10%")), &old, "old", "new"),
        vec![update(4)]
    );
    // unavailable pods, updated or not, use up the room
    let mut pods = old.clone();
    pods[4] = pod(4, "new", false);
    assert_eq!(
        steps(&parallel(json!(2)), &pods, "old", "new"),
        vec![update(3)]
    );
    pods[0] = pod(0, "old", false);
    assert_eq!(steps(&parallel(json!(2)), &pods, "old", "new"), vec![]);
    // a missing pod counts as unavailable (Parallel creates it in the same sync)
    let pods: Vec<Pod> = (0..4).map(|n| pod(n, "old", true)).collect();
    assert_eq!(
        steps(&parallel(json!(2)), &pods, "old", "new"),
        vec![create(4), update(3)]
    );
}

#[test]
fn max_unavailable_with_ordered_ready_replaces_several_once_all_are_available() {
    let s = set(
        4,
        json!({"updateStrategy": {"type": "RollingUpdate",
            "rollingUpdate": {"partition": 1, "maxUnavailable": 3}}}),
    );
    let old: Vec<Pod> = (0..4).map(|n| pod(n, "old", true)).collect();
    // never below the partition
    assert_eq!(
        steps(&s, &old, "old", "new"),
        vec![update(3), update(2), update(1)]
    );
    // then the replacements come back one at a time, in order, and nothing else is deleted
    let pods = [pod(0, "old", true)];
    assert_eq!(
        steps(&s, &pods, "old", "new"),
        vec![Step::Create {
            ordinal: 1,
            updated: true
        }]
    );
    let pods = [pod(0, "old", true), pod(1, "new", false)];
    assert_eq!(steps(&s, &pods, "old", "new"), vec![]);
}

#[test]
fn ordinals_start_where_the_spec_says_and_the_partition_counts_from_there() {
    let s = set(2, json!({"ordinals": {"start": 5}}));
    assert_eq!(steps(&s, &[], "h", "h"), vec![create(5)]);
    // a pod below the start is scaled away like one above the end
    let pods = [pod(0, "h", true), pod(5, "h", true), pod(6, "h", true)];
    assert_eq!(steps(&s, &pods, "h", "h"), vec![delete(0)]);
    let partitioned = set(
        2,
        json!({"ordinals": {"start": 5}, "updateStrategy": {"type": "RollingUpdate",
            "rollingUpdate": {"partition": 1, "maxUnavailable": 2}}}),
    );
    let pods = [pod(5, "old", true), pod(6, "old", true)];
    assert_eq!(steps(&partitioned, &pods, "old", "new"), vec![update(6)]);
    assert_eq!(
        steps(&partitioned, &[pod(6, "new", true)], "old", "new"),
        vec![Step::Create {
            ordinal: 5,
            updated: false
        }]
    );
}

#[test]
fn without_a_rolling_update_a_missing_pod_below_the_current_replicas_comes_back_current() {
    let mut s = set(3, json!({"updateStrategy": {"type": "RollingUpdate"}}));
    s.status = Some(StatefulSetStatus {
        current_replicas: Some(2),
        ..Default::default()
    });
    let pods = [pod(1, "old", true), pod(2, "new", true)];
    assert_eq!(
        steps(&s, &pods, "old", "new"),
        vec![Step::Create {
            ordinal: 0,
            updated: false
        }]
    );
    let pods = [pod(0, "old", true), pod(1, "old", true)];
    assert_eq!(steps(&s, &pods, "old", "new"), vec![create(2)]);
}

#[test]
fn finished_pods_are_deleted_to_be_created_again() {
    let s = set(2, json!({}));
    let mut done = pod(0, "h", false);
    done.status.as_mut().unwrap().phase = Some("Succeeded".into());
    assert_eq!(
        steps(&s, &[done, pod(1, "h", true)], "h", "h"),
        vec![delete_for(0, Why::Finished)]
    );
}

#[test]
fn status_counts_available_replicas_with_min_ready_seconds_and_asks_for_a_requeue() {
    let s = set(3, json!({"minReadySeconds": 30}));
    let pods = [
        ready_for(0, "h", 60),
        ready_for(1, "h", 20),
        pod(2, "h", false),
    ];
    let v = view(&s, &pods, &[]);
    let st = status(&s, &v, rev("h"), rev("h"), 0);
    assert_eq!(
        (st.replicas, st.ready_replicas, st.available_replicas),
        (3, Some(2), Some(1))
    );
    // db-1 becomes available in ten seconds
    let again = requeue(&s, &v, &st).unwrap();
    assert!(
        again > Duration::from_secs(10) && again < Duration::from_secs(11),
        "{again:?}"
    );
    // without minReadySeconds ready is available and nothing is requeued
    let s = set(3, json!({}));
    let st = status(&s, &v, rev("h"), rev("h"), 0);
    assert_eq!(st.available_replicas, Some(2));
    assert_eq!(requeue(&s, &v, &st), None);
}

#[test]
fn status_leaves_terminating_pods_out_of_current_and_updated_and_counts_update_deletions() {
    let s = set(3, json!({}));
    let mut going = pod(2, "new", true);
    going.metadata.deletion_timestamp =
        Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(now()));
    let pods = [pod(0, "old", true), pod(1, "old", true), going];
    let st = status(&s, &view(&s, &pods, &[]), rev("old"), rev("new"), 1);
    assert_eq!(
        (
            st.replicas,
            st.ready_replicas,
            st.current_replicas,
            st.updated_replicas
        ),
        (3, Some(3), Some(1), None)
    );
    assert_eq!(st.collision_count, Some(0));
    // OnDelete never completes a rollout by itself
    let on_delete = set(1, json!({"updateStrategy": {"type": "OnDelete"}}));
    let pods = [pod(0, "new", true)];
    let st = status(
        &on_delete,
        &view(&on_delete, &pods, &[]),
        rev("old"),
        rev("new"),
        0,
    );
    assert_eq!(st.current_revision.as_deref(), Some("old"));
}

#[test]
fn revisions_go_by_name_and_pods_labelled_with_the_bare_hash_are_at_them_too() {
    let s = set(2, json!({}));
    let update = Rev {
        name: "db-abc",
        hash: "abc",
    };
    let pods = [pod(0, "abc", true), pod(1, "db-abc", true)];
    let v = view(&s, &pods, &[]);
    assert_eq!(plan(&s, &v, rev("db-old"), update), vec![]);
    let st = status(&s, &v, rev("db-old"), update, 0);
    assert_eq!(st.updated_replicas, Some(2));
    assert_eq!(
        (
            st.current_revision.as_deref(),
            st.update_revision.as_deref()
        ),
        (Some("db-abc"), Some("db-abc"))
    );
}

#[test]
fn status_counts_replicas_and_completes_the_rollout_when_all_are_updated_and_ready() {
    let s = set(2, json!({}));
    let pods = [pod(0, "old", true), pod(1, "new", false)];
    let st = status(&s, &view(&s, &pods, &[]), rev("old"), rev("new"), 0);
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
    let st = status(&s, &view(&s, &pods, &[]), rev("old"), rev("new"), 0);
    assert_eq!(st.current_revision.as_deref(), Some("new"));
    assert_eq!(
        (st.current_replicas, st.observed_generation),
        (Some(2), Some(1))
    );
}

#[derive(Default)]
struct Recording {
    writes: Mutex<Vec<String>>,
    /// The claims as the fake API server has them.
    claims: Mutex<BTreeMap<String, PersistentVolumeClaim>>,
    events: Mutex<Vec<String>>,
}

impl Recording {
    fn with_claims(claims: &[PersistentVolumeClaim]) -> Recording {
        let r = Recording::default();
        for c in claims {
            r.claims.lock().insert(c.name_any(), c.clone());
        }
        r
    }

    /// The uids of the owners of a claim as the fake API server has it.
    fn owners(&self, claim: &str) -> Vec<String> {
        let claims = self.claims.lock();
        let refs = claims[claim].metadata.owner_references.clone();
        refs.unwrap_or_default()
            .into_iter()
            .map(|r| r.uid)
            .collect()
    }

    fn writes(&self) -> Vec<String> {
        self.writes.lock().clone()
    }
}

#[async_trait]
impl StatefulSetApi for Recording {
    async fn create_claim(
        &self,
        _: &StatefulSet,
        _: &str,
        c: &PersistentVolumeClaim,
    ) -> kube::Result<()> {
        self.writes.lock().push(format!("claim {}", c.name_any()));
        self.claims.lock().insert(c.name_any(), c.clone());
        Ok(())
    }
    async fn update_claim_owners(
        &self,
        _: &StatefulSet,
        claim: &str,
        fix: &OwnerFix<'_>,
    ) -> kube::Result<()> {
        let mut claims = self.claims.lock();
        let Some(c) = claims.get_mut(claim) else {
            return Ok(());
        };
        if let Some(owners) = fix(c) {
            let kinds: Vec<String> = owners
                .iter()
                .map(|o| format!("{} {}", o.kind, o.name))
                .collect();
            self.writes
                .lock()
                .push(format!("claim {claim} owned by [{}]", kinds.join(", ")));
            c.metadata.owner_references = Some(owners);
        }
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
    fn event(&self, _: &StatefulSet, type_: EventType, reason: &str, note: String) {
        self.events
            .lock()
            .push(format!("{type_:?} {reason} {note}"));
    }
}

/// Syncs `set` over these pods and claims.
async fn sync(
    set: &StatefulSet,
    pods: &[Pod],
    claims: &[PersistentVolumeClaim],
    api: &Recording,
) -> Result<Action> {
    let pods: Vec<&Pod> = pods.iter().collect();
    let claims: Vec<&PersistentVolumeClaim> = claims.iter().collect();
    let namespace = Namespace {
        pods: &pods,
        revisions: &[],
        claims: &claims,
    };
    reconcile(set, &namespace, now(), api).await
}

fn templates() -> serde_json::Value {
    json!([{"metadata": {"name": "data"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}])
}

/// A set with a claim template and this retention policy.
fn with_claims(replicas: i32, when_deleted: &str, when_scaled: &str) -> StatefulSet {
    set(
        replicas,
        json!({"volumeClaimTemplates": templates(),
            "persistentVolumeClaimRetentionPolicy":
                {"whenDeleted": when_deleted, "whenScaled": when_scaled}}),
    )
}

/// Claim `data-db-<n>` with these owner references.
fn claim_of(n: i32, owners: serde_json::Value) -> PersistentVolumeClaim {
    serde_json::from_value(
        json!({"metadata": {"name": format!("data-db-{n}"), "namespace": "ns",
        "ownerReferences": owners}}),
    )
    .unwrap()
}

fn set_owner() -> serde_json::Value {
    json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "db", "uid": "u",
        "controller": true, "blockOwnerDeletion": true})
}

fn pod_owner(n: i32, uid: &str) -> serde_json::Value {
    json!({"apiVersion": "v1", "kind": "Pod", "name": format!("db-{n}"), "uid": uid,
        "controller": true, "blockOwnerDeletion": true})
}

#[tokio::test]
async fn claims_are_created_before_their_pod() {
    let s = set(2, json!({"volumeClaimTemplates": templates()}));
    let api = Recording::default();
    sync(&s, &[], &[], &api).await.unwrap();
    assert_eq!(
        api.writes(),
        vec![
            "revision 1",
            "claim data-db-0",
            "create db-0",
            "status replicas=0"
        ]
    );
    // Retain/Retain: the claim has no owner
    assert!(api.owners("data-db-0").is_empty());
}

#[tokio::test]
async fn with_when_deleted_delete_claims_are_created_under_the_sets_controller_reference() {
    let s = with_claims(1, "Delete", "Retain");
    let api = Recording::default();
    sync(&s, &[], &[], &api).await.unwrap();
    let claims = api.claims.lock();
    let owner = &claims["data-db-0"].owner_references()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.uid.as_str(), owner.controller),
        ("StatefulSet", "u", Some(true))
    );
}

#[tokio::test]
async fn scaling_down_with_when_scaled_delete_hands_the_claims_to_their_pod_first() {
    let pods = [pod(0, "h", true), pod(1, "h", true)];
    let claims = [claim_of(0, json!([])), claim_of(1, json!([]))];
    for (policy, handed) in [("Delete", true), ("Retain", false)] {
        let s = with_claims(1, "Retain", policy);
        let api = Recording::with_claims(&claims);
        sync(&s, &pods, &claims, &api).await.unwrap();
        let writes = api.writes();
        let handing = writes
            .iter()
            .position(|w| w == "claim data-db-1 owned by [Pod db-1]");
        let deleting = writes.iter().position(|w| w == "delete db-1");
        assert_eq!(handing.is_some(), handed, "{writes:?}");
        assert!(deleting.is_some(), "{writes:?}");
        assert!(handing.is_none_or(|h| h < deleting.unwrap()), "{writes:?}");
        let want: Vec<String> = if handed { vec!["uid-1".into()] } else { vec![] };
        assert_eq!(api.owners("data-db-1"), want);
        // the claim of the pod that stays is left alone
        assert!(api.owners("data-db-0").is_empty());
    }
}

#[tokio::test]
async fn scaled_away_claims_go_from_the_set_to_the_pod_when_both_policies_delete() {
    let s = with_claims(1, "Delete", "Delete");
    let pods = [pod(0, "h", true), pod(1, "h", true)];
    let claims = [
        claim_of(0, json!([set_owner()])),
        claim_of(1, json!([set_owner()])),
    ];
    let api = Recording::with_claims(&claims);
    sync(&s, &pods, &claims, &api).await.unwrap();
    assert_eq!(api.owners("data-db-0"), ["u"]);
    assert_eq!(api.owners("data-db-1"), ["uid-1"]);
}

#[tokio::test]
async fn a_changed_policy_updates_the_claims_of_existing_pods() {
    let pods = [pod(0, "h", true), pod(1, "h", true)];
    // Retain -> whenDeleted: Delete: the set becomes the claims' controller
    let bare = [claim_of(0, json!([])), claim_of(1, json!([]))];
    let s = with_claims(2, "Delete", "Retain");
    let api = Recording::with_claims(&bare);
    sync(&s, &pods, &bare, &api).await.unwrap();
    assert_eq!(
        (api.owners("data-db-0"), api.owners("data-db-1")),
        (vec!["u".to_string()], vec!["u".to_string()])
    );
    // and back to Retain: the references go
    let owned = [
        claim_of(0, json!([set_owner()])),
        claim_of(1, json!([set_owner()])),
    ];
    let s = with_claims(2, "Retain", "Retain");
    let api = Recording::with_claims(&owned);
    sync(&s, &pods, &owned, &api).await.unwrap();
    assert!(api.owners("data-db-0").is_empty() && api.owners("data-db-1").is_empty());
    // claims that agree with the policy are not written
    let api = Recording::with_claims(&bare);
    sync(&s, &pods, &bare, &api).await.unwrap();
    assert!(
        api.writes().iter().all(|w| !w.contains("owned by")),
        "{:?}",
        api.writes()
    );
}

#[tokio::test]
async fn a_claim_with_another_controller_is_left_alone_with_a_warning() {
    let s = with_claims(1, "Delete", "Retain");
    let other = json!({"apiVersion": "v1", "kind": "ConfigMap", "name": "x", "uid": "x",
        "controller": true});
    // another controller only: nothing to do
    let claims = [claim_of(0, json!([other.clone()]))];
    let api = Recording::with_claims(&claims);
    sync(&s, &[pod(0, "h", true)], &claims, &api).await.unwrap();
    assert_eq!(api.owners("data-db-0"), ["x"]);
    assert!(api.events.lock().is_empty());
    // another controller besides the set: the set's reference is dropped, with an event
    let claims = [claim_of(0, json!([other, set_owner()]))];
    let api = Recording::with_claims(&claims);
    sync(&s, &[pod(0, "h", true)], &claims, &api).await.unwrap();
    assert_eq!(api.owners("data-db-0"), ["x"]);
    let events = api.events.lock().clone();
    assert!(
        events[0].starts_with("Warning ConflictingController PersistentVolumeClaim data-db-0"),
        "{events:?}"
    );
}

#[tokio::test]
async fn a_pod_whose_claim_an_older_pod_still_owns_waits_for_the_collector() {
    let s = with_claims(2, "Retain", "Delete");
    let claims = [claim_of(1, json!([pod_owner(1, "old-uid")]))];
    let api = Recording::with_claims(&claims);
    sync(&s, &[pod(0, "h", true)], &claims, &api).await.unwrap();
    assert!(
        api.writes().iter().all(|w| !w.starts_with("create")),
        "{:?}",
        api.writes()
    );
    // once it is gone the pod is created with a new claim
    let api = Recording::default();
    sync(&s, &[pod(0, "h", true)], &[], &api).await.unwrap();
    let writes = api.writes();
    assert!(
        writes.contains(&"claim data-db-1".to_string()),
        "{writes:?}"
    );
    assert!(writes.contains(&"create db-1".to_string()), "{writes:?}");
}

#[tokio::test]
async fn a_pod_whose_claim_is_being_deleted_is_not_created() {
    let s = with_claims(1, "Retain", "Retain");
    let mut deleting = claim_of(0, json!([]));
    deleting.metadata.deletion_timestamp =
        Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(now()));
    let api = Recording::with_claims(std::slice::from_ref(&deleting));
    let err = sync(&s, &[], &[deleting], &api).await.unwrap_err();
    assert_eq!(err.to_string(), "pvc data-db-0 is being deleted");
    assert!(!api.writes().contains(&"create db-0".to_string()));
    // the status is written all the same
    assert!(api.writes().contains(&"status replicas=0".to_string()));
    assert_eq!(
        api.events.lock().clone(),
        [
            "Warning FailedCreate create Pod db-0 in StatefulSet db failed error: \
          pvc data-db-0 is being deleted"
        ]
    );
}

#[tokio::test]
async fn a_pending_pod_gets_its_missing_claims_again() {
    let s = with_claims(1, "Delete", "Retain");
    let api = Recording::default();
    sync(&s, &[pod(0, "h", false)], &[], &api).await.unwrap();
    assert!(api.writes().contains(&"claim data-db-0".to_string()));
    assert_eq!(api.owners("data-db-0"), ["u"]);
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
    let api = Recording::default();
    sync(&s, &pods, &[], &api).await.unwrap();
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
    sync(&s, &[relabelled], &[], &api).await.unwrap();
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
    sync(&s, &[orphan(&mut p).clone()], &[], &api)
        .await
        .unwrap();
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
    let namespace = Namespace {
        pods: &[],
        revisions: &[&rev],
        claims: &[],
    };
    reconcile(&s, &namespace, now(), &api).await.unwrap();
    let writes = api.writes.lock().clone();
    assert!(
        writes.contains(&"adopt revision db-abc".to_string()),
        "{writes:?}"
    );
}
