//! Unit tests of the `daemonset` controller: its plan per sync, and its writes through a
//! recording fake.

use super::*;
use parking_lot::Mutex;
use serde_json::json;

fn ds(strategy: serde_json::Value) -> DaemonSet {
    serde_json::from_value(json!({"metadata": {"name": "agent", "namespace": "ns",
        "uid": "ds-uid", "generation": 2},
        "spec": {"selector": {"matchLabels": {"app": "agent"}}, "updateStrategy": strategy,
            "template": {"metadata": {"labels": {"app": "agent"}},
                "spec": {"nodeSelector": {"role": "worker"},
                    "containers": [{"name": "c", "image": "i"}]}}}}))
    .unwrap()
}

fn node(name: &str, worker: bool) -> Node {
    let labels = if worker {
        json!({"role": "worker"})
    } else {
        json!({})
    };
    serde_json::from_value(json!({"metadata": {"name": name, "labels": labels}})).unwrap()
}

fn pod(name: &str, node: &str, hash: &str, ready: bool) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "ns", "labels": {"app": "agent",
            HASH_LABEL: hash, TEMPLATE_GENERATION: "1"},
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "agent",
                "uid": "ds-uid", "controller": true}]},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "i"}]},
        "status": {"phase": "Running", "conditions": [{"type": "Ready",
            "status": if ready { "True" } else { "False" },
            "lastTransitionTime": "2026-01-01T00:00:00Z"}]}
    }))
    .unwrap()
}

fn now() -> jiff::Timestamp {
    "2026-01-01T01:00:00Z".parse().unwrap()
}

fn sorted(mut v: Vec<String>) -> Vec<String> {
    v.sort();
    v
}

#[test]
fn every_matching_node_gets_one_pod_and_status_counts_them() {
    let d = ds(json!({}));
    let (n1, n2, n3) = (node("n1", true), node("n2", true), node("other", false));
    let p1 = pod("agent-a", "n1", "h", true);
    let stray = pod("agent-b", "other", "h", true);
    let p = plan(&d, "h", &[&n1, &n2, &n3], &[&p1, &stray], now());
    assert_eq!(p.create_on, vec!["n2"]);
    assert_eq!(
        p.delete,
        vec!["agent-b"],
        "a node that no longer matches loses its pod"
    );
    let s = &p.status;
    assert_eq!(
        (
            s.desired_number_scheduled,
            s.current_number_scheduled,
            s.number_ready,
            s.number_misscheduled
        ),
        (2, 1, 1, 1)
    );
    assert_eq!(
        (s.number_available, s.updated_number_scheduled),
        (Some(1), Some(1))
    );
    assert_eq!(
        (s.number_unavailable, s.observed_generation),
        (Some(1), Some(2))
    );
}

#[test]
fn duplicates_failed_pods_and_pods_of_vanished_or_tainted_nodes_are_deleted() {
    let d = ds(json!({}));
    let mut tainted = node("n2", true);
    tainted.spec = Some(
        serde_json::from_value(json!({"taints": [
        {"key": "evict", "effect": "NoExecute"}]}))
        .unwrap(),
    );
    let mut newer = pod("agent-dup", "n1", "h", true);
    newer.metadata.creation_timestamp =
        Some(serde_json::from_value(json!("2026-01-01T00:05:00Z")).unwrap());
    let mut failed = pod("agent-failed", "n3", "h", false);
    failed.status.as_mut().unwrap().phase = Some("Failed".into());
    let pods = [
        pod("agent-a", "n1", "h", true),
        newer,
        pod("agent-evicted", "n2", "h", true),
        failed,
        pod("agent-gone", "vanished", "h", true),
    ];
    let refs: Vec<&Pod> = pods.iter().collect();
    let p = plan(
        &d,
        "h",
        &[&node("n1", true), &tainted, &node("n3", true)],
        &refs,
        now(),
    );
    assert_eq!(
        sorted(p.delete),
        vec!["agent-dup", "agent-evicted", "agent-failed", "agent-gone"]
    );
    assert!(p.create_on.is_empty());
}

#[test]
fn rolling_update_replaces_at_most_max_unavailable_old_pods() {
    let d = ds(json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}}));
    let nodes = [node("n1", true), node("n2", true), node("n3", true)];
    let nodes: Vec<&Node> = nodes.iter().collect();
    let pods = [
        pod("a", "n1", "old", true),
        pod("b", "n2", "old", true),
        pod("c", "n3", "new", true),
    ];
    let refs: Vec<&Pod> = pods.iter().collect();
    let p = plan(&d, "new", &nodes, &refs, now());
    assert_eq!(p.delete.len(), 1, "{p:?}");
    assert_eq!(p.status.updated_number_scheduled, Some(1));
    // an old pod that is not available goes at once, without using the budget
    let pods = [
        pod("a", "n1", "old", false),
        pod("b", "n2", "old", true),
        pod("c", "n3", "new", true),
    ];
    let refs: Vec<&Pod> = pods.iter().collect();
    let p = plan(&d, "new", &nodes, &refs, now());
    assert_eq!(
        sorted(p.delete),
        vec!["a"],
        "unavailable counts against the budget"
    );
    // with 2 unavailable allowed: both old pods
    let d = ds(json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "67%"}}));
    let pods = [
        pod("a", "n1", "old", true),
        pod("b", "n2", "old", true),
        pod("c", "n3", "new", true),
    ];
    let refs: Vec<&Pod> = pods.iter().collect();
    assert_eq!(
        sorted(plan(&d, "new", &nodes, &refs, now()).delete),
        vec!["a", "b"]
    );
}

#[test]
fn surge_creates_beside_old_pods_and_deletes_them_once_the_new_one_is_available() {
    let d = ds(json!({"type": "RollingUpdate",
        "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}}));
    let nodes = [node("n1", true), node("n2", true)];
    let nodes: Vec<&Node> = nodes.iter().collect();
    let pods = [pod("a", "n1", "old", true), pod("b", "n2", "old", true)];
    let refs: Vec<&Pod> = pods.iter().collect();
    let p = plan(&d, "new", &nodes, &refs, now());
    assert_eq!((p.create_on.len(), p.delete.len()), (1, 0), "{p:?}");
    let mut fresh = pod("a2", "n1", "new", false);
    fresh.metadata.creation_timestamp =
        Some(serde_json::from_value(json!("2026-01-01T00:30:00Z")).unwrap());
    let pods = [
        pod("a", "n1", "old", true),
        fresh.clone(),
        pod("b", "n2", "old", true),
    ];
    let refs: Vec<&Pod> = pods.iter().collect();
    let p = plan(&d, "new", &nodes, &refs, now());
    assert!(p.create_on.is_empty() && p.delete.is_empty(), "{p:?}");
    let ready = pod("a2", "n1", "new", true);
    let pods = [
        pod("a", "n1", "old", true),
        ready,
        pod("b", "n2", "old", true),
    ];
    let refs: Vec<&Pod> = pods.iter().collect();
    let p = plan(&d, "new", &nodes, &refs, now());
    assert_eq!(p.delete, vec!["a"]);
}

#[test]
fn on_delete_leaves_old_pods_alone() {
    let d = ds(json!({"type": "OnDelete"}));
    let n1 = node("n1", true);
    let a = pod("a", "n1", "old", true);
    let p = plan(&d, "new", &[&n1], &[&a], now());
    assert!(p.delete.is_empty() && p.create_on.is_empty());
    assert_eq!(p.status.updated_number_scheduled, None);
}

#[test]
fn min_ready_seconds_delays_availability_and_asks_for_a_requeue() {
    let mut d = ds(json!({}));
    d.spec.as_mut().unwrap().min_ready_seconds = Some(7200);
    let n1 = node("n1", true);
    let a = pod("a", "n1", "h", true);
    let p = plan(&d, "h", &[&n1], &[&a], now());
    assert_eq!(p.status.number_available, None);
    assert_eq!(p.requeue, Some(Duration::from_secs(3600)));
}

#[derive(Default)]
struct Recording {
    writes: Mutex<Vec<String>>,
}

#[async_trait]
impl DaemonSetApi for Recording {
    async fn create_pod(&self, _: &DaemonSet, pod: &Pod) -> kube::Result<String> {
        let node = placement::target_node(pod).unwrap();
        self.writes.lock().push(format!("create pod on {node}"));
        Ok(format!("agent-{node}"))
    }
    async fn delete_pod(&self, _: &DaemonSet, name: &str) -> kube::Result<()> {
        self.writes.lock().push(format!("delete pod {name}"));
        Ok(())
    }
    async fn patch_pod(&self, _: &DaemonSet, name: &str, p: Value) -> kube::Result<()> {
        self.writes
            .lock()
            .push(format!("{} pod {name}", claim::patch_kind(&p)));
        Ok(())
    }
    async fn patch_revision(&self, _: &DaemonSet, name: &str, p: Value) -> kube::Result<()> {
        self.writes
            .lock()
            .push(format!("{} revision {name}", claim::patch_kind(&p)));
        Ok(())
    }
    async fn save_revision(&self, r: &Current) -> kube::Result<()> {
        let kind = if matches!(r, Current::Create(_)) {
            "create"
        } else {
            "renumber"
        };
        self.writes
            .lock()
            .push(format!("{kind} revision {}", r.revision().revision));
        Ok(())
    }
    async fn delete_revision(&self, _: &str, name: &str) -> kube::Result<()> {
        self.writes.lock().push(format!("delete revision {name}"));
        Ok(())
    }
    async fn update_status(&self, _: &DaemonSet, s: &DaemonSetStatus) -> kube::Result<()> {
        self.writes
            .lock()
            .push(format!("status desired={}", s.desired_number_scheduled));
        Ok(())
    }
}

#[tokio::test]
async fn a_sync_writes_the_revision_pods_and_status_and_waits_for_its_pods_to_be_seen() {
    let d = ds(json!({}));
    let n1 = node("n1", true);
    let api = Recording::default();
    let mut pending = Pending::default();
    reconcile(&d, &[&n1], &[], &[], now(), &mut pending, &api)
        .await
        .unwrap();
    assert_eq!(
        *api.writes.lock(),
        vec!["create revision 1", "create pod on n1", "status desired=1"]
    );
    // the informer has not shown the pod yet: no second pod
    api.writes.lock().clear();
    reconcile(&d, &[&n1], &[], &[], now(), &mut pending, &api)
        .await
        .unwrap();
    assert!(
        api.writes.lock().iter().all(|w| !w.contains("pod on")),
        "{:?}",
        api.writes.lock()
    );
    // once it has, syncs act again
    let seen = pod("agent-n1", "n1", "x", true);
    assert!(pending.satisfied(&[&seen], now()));
}

#[tokio::test]
async fn a_matching_orphan_on_a_node_is_adopted_instead_of_a_second_pod_being_created() {
    let d = ds(json!({}));
    let (n1, n2) = (node("n1", true), node("n2", true));
    let mut orphan = pod("agent-x", "n1", "h", true);
    orphan.metadata.owner_references = None;
    let mut other = pod("web-1", "n2", "h", true);
    other.metadata.owner_references = None;
    other.metadata.labels = Some([("app".to_string(), "web".to_string())].into());
    let api = Recording::default();
    let mut pending = Pending::default();
    reconcile(
        &d,
        &[&n1, &n2],
        &[&orphan, &other],
        &[],
        now(),
        &mut pending,
        &api,
    )
    .await
    .unwrap();
    let writes = api.writes.lock().clone();
    assert_eq!(writes[0], "adopt pod agent-x", "{writes:?}");
    let creates: Vec<&String> = writes
        .iter()
        .filter(|w| w.starts_with("create pod"))
        .collect();
    assert_eq!(creates, ["create pod on n2"], "{writes:?}");
}

#[tokio::test]
async fn owned_pods_and_revisions_the_selector_no_longer_matches_are_released() {
    let d = ds(json!({}));
    let n1 = node("n1", true);
    let mut relabelled = pod("agent-a", "n1", "h", true);
    relabelled.metadata.labels = Some([("app".to_string(), "debug".to_string())].into());
    let rev: ControllerRevision = serde_json::from_value(json!({
        "metadata": {"name": "agent-old", "namespace": "ns", "labels": {"app": "other"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "agent",
                "uid": "ds-uid", "controller": true}]},
        "revision": 1}))
    .unwrap();
    let api = Recording::default();
    let mut pending = Pending::default();
    reconcile(
        &d,
        &[&n1],
        &[&relabelled],
        &[&rev],
        now(),
        &mut pending,
        &api,
    )
    .await
    .unwrap();
    let writes = api.writes.lock().clone();
    assert_eq!(
        writes[..4],
        [
            "release pod agent-a",
            "release revision agent-old",
            "create revision 1",
            "create pod on n1"
        ],
        "{writes:?}"
    );
}
