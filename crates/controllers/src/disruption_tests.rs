//! Unit tests of PodDisruptionBudget status with a fake controller scale and `now` passed in.

use std::sync::Arc;

use parking_lot::Mutex;
use serde_json::{Value, json};

use super::*;

#[derive(Default)]
struct Recording {
    replicas: i32,
    written: Mutex<Vec<PodDisruptionBudgetStatus>>,
}

#[async_trait]
impl Budgets for Recording {
    async fn scale(&self, _: &str, _: &str, name: &str) -> kube::Result<Option<(String, i32)>> {
        Ok(Some((format!("uid-{name}"), self.replicas)))
    }

    async fn update_status(&self, pdb: &PodDisruptionBudget) -> kube::Result<()> {
        self.written.lock().push(pdb.status.clone().unwrap());
        Ok(())
    }
}

fn at(s: &str) -> Timestamp {
    s.parse().unwrap()
}

fn pdb(spec: Value, status: Value) -> PodDisruptionBudget {
    let mut full = json!({"selector": {"matchLabels": {"app": "web"}}});
    for (k, v) in spec.as_object().unwrap() {
        full[k] = v.clone();
    }
    serde_json::from_value(json!({
        "metadata": {"name": "web", "namespace": "ns", "generation": 2},
        "spec": full, "status": status,
    }))
    .unwrap()
}

fn pod(name: &str, ready: bool) -> Arc<Pod> {
    Arc::new(
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "ns", "labels": {"app": "web"},
                         "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                                              "name": "web-rs", "uid": "rs", "controller": true}]},
            "status": {"conditions": [{"type": "Ready",
                                       "status": if ready { "True" } else { "False" }}]},
        }))
        .unwrap(),
    )
}

fn pods(ready: usize, unready: usize) -> Vec<Arc<Pod>> {
    (0..ready)
        .map(|i| pod(&format!("r{i}"), true))
        .chain((0..unready).map(|i| pod(&format!("u{i}"), false)))
        .collect()
}

async fn status(spec: Value, pods: &[Arc<Pod>], replicas: i32) -> PodDisruptionBudgetStatus {
    let api = Recording {
        replicas,
        ..Default::default()
    };
    reconcile(
        &pdb(spec, json!({})),
        pods,
        at("2026-01-01T10:00:00Z"),
        &api,
    )
    .await
    .unwrap();
    api.written.lock().last().cloned().unwrap()
}

#[tokio::test]
async fn min_available_as_an_integer_counts_the_selected_pods() {
    let s = status(json!({"minAvailable": 2}), &pods(3, 1), 4).await;
    assert_eq!(
        (
            s.current_healthy,
            s.desired_healthy,
            s.disruptions_allowed,
            s.expected_pods
        ),
        (3, 2, 1, 4)
    );
    assert_eq!(s.observed_generation, Some(2));
    let c = &s.conditions.unwrap()[0];
    assert_eq!(
        (c.type_.as_str(), c.status.as_str(), c.reason.as_str()),
        ("DisruptionAllowed", "True", "SufficientPods")
    );
}

#[tokio::test]
async fn percentages_and_max_unavailable_use_the_controllers_scale_rounding_up() {
    let s = status(json!({"minAvailable": "50%"}), &pods(3, 0), 5).await;
    assert_eq!(
        (s.expected_pods, s.desired_healthy, s.disruptions_allowed),
        (5, 3, 0)
    );
    let c = &s.conditions.unwrap()[0];
    assert_eq!(
        (c.status.as_str(), c.reason.as_str()),
        ("False", "InsufficientPods")
    );
    let s = status(json!({"maxUnavailable": 1}), &pods(3, 0), 3).await;
    assert_eq!(
        (s.expected_pods, s.desired_healthy, s.disruptions_allowed),
        (3, 2, 1)
    );
    let s = status(json!({"maxUnavailable": "34%"}), &pods(3, 0), 3).await;
    assert_eq!((s.desired_healthy, s.disruptions_allowed), (1, 2));
}

#[tokio::test]
async fn a_recent_eviction_counts_as_unhealthy_until_it_times_out() {
    let api = Recording {
        replicas: 3,
        ..Default::default()
    };
    let budget = pdb(
        json!({"minAvailable": 2}),
        json!({"disruptedPods": {"r0": "2026-01-01T09:59:30Z"}}),
    );
    let recheck = reconcile(&budget, &pods(3, 0), at("2026-01-01T10:00:00Z"), &api)
        .await
        .unwrap();
    assert_eq!(recheck, Some(Duration::from_secs(90)));
    let s = api.written.lock().last().cloned().unwrap();
    assert_eq!((s.current_healthy, s.disruptions_allowed), (2, 0));
    reconcile(&budget, &pods(3, 0), at("2026-01-01T10:02:00Z"), &api)
        .await
        .unwrap();
    let s = api.written.lock().last().cloned().unwrap();
    assert_eq!((s.current_healthy, s.disruptions_allowed), (3, 1));
    assert!(s.disrupted_pods.is_none());
}

#[tokio::test]
async fn a_pod_without_a_controller_fails_safe_for_percentages() {
    let mut orphan = (*pod("x", true)).clone();
    orphan.metadata.owner_references = None;
    let s = status(json!({"maxUnavailable": "50%"}), &[Arc::new(orphan)], 1).await;
    assert_eq!(s.disruptions_allowed, 0);
    assert_eq!(s.conditions.unwrap()[0].reason, "SyncFailed");
}

#[test]
fn selectors_match_labels_and_expressions() {
    let labels: BTreeMap<String, String> = [
        ("app".to_string(), "web".to_string()),
        ("tier".to_string(), "a".to_string()),
    ]
    .into();
    let sel: LabelSelector = serde_json::from_value(json!({
        "matchLabels": {"app": "web"},
        "matchExpressions": [{"key": "tier", "operator": "In", "values": ["a", "b"]},
                             {"key": "gone", "operator": "DoesNotExist"}]
    }))
    .unwrap();
    assert!(selects(&sel, &labels));
    let other: LabelSelector = serde_json::from_value(
        json!({"matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["a"]}]}),
    )
    .unwrap();
    assert!(!selects(&other, &labels));
}
