//! `ranking`: which pods a scale-down deletes first, as upstream's `ActivePodsWithRanks` with its
//! default feature gates (PodDeletionCost, LogarithmicScaleDown): unassigned before assigned,
//! Pending before Unknown before Running, not ready before ready, lower
//! `controller.kubernetes.io/pod-deletion-cost` first, more pods on the same node first, ready
//! more recently first (on a log₂ scale of age), more restarts first, newer first.

use std::cmp::Reverse;
use std::collections::HashMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;

use crate::podutil;

/// Upstream's `core.PodDeletionCost` annotation.
pub const DELETION_COST: &str = "controller.kubernetes.io/pod-deletion-cost";

/// The first `count` of `pods` to delete; `related` are the pods whose co-location on a node
/// counts (the controller's own pods).
pub fn pods_to_delete(
    pods: &[Arc<Pod>],
    related: &[Arc<Pod>],
    count: usize,
    now: jiff::Timestamp,
) -> Vec<Arc<Pod>> {
    let mut per_node: HashMap<&str, i64> = HashMap::new();
    for p in related {
        if let Some(node) = node_of(p) {
            *per_node.entry(node).or_default() += 1;
        }
    }
    let mut ranked: Vec<(i64, &Arc<Pod>)> = pods
        .iter()
        .map(|p| {
            (
                node_of(p)
                    .and_then(|n| per_node.get(n))
                    .copied()
                    .unwrap_or(0),
                p,
            )
        })
        .collect();
    ranked.sort_by_cached_key(|(rank, p)| sort_key(p, *rank, now));
    ranked
        .into_iter()
        .take(count)
        .map(|(_, p)| p.clone())
        .collect()
}

fn node_of(pod: &Pod) -> Option<&str> {
    pod.spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .filter(|n| !n.is_empty())
}

fn phase_ordinal(pod: &Pod) -> u8 {
    match pod.status.as_ref().and_then(|s| s.phase.as_deref()) {
        Some("Pending") => 0,
        Some("Unknown") => 1,
        Some("Running") => 2,
        _ => 3,
    }
}

fn deletion_cost(pod: &Pod) -> i64 {
    pod.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(DELETION_COST))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn restarts(pod: &Pod) -> i32 {
    pod.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|cs| cs.iter().map(|c| c.restart_count).max())
        .unwrap_or(0)
}

/// log₂ of the age in nanoseconds (-1 for none or the future), upstream's bucketing.
fn log_rank(t: Option<jiff::Timestamp>, now: jiff::Timestamp) -> i64 {
    match t {
        Some(t) if now > t => {
            let nanos = now.duration_since(t).as_nanos() as f64;
            nanos.log2() as i64
        }
        _ => -1,
    }
}

fn uid(pod: &Pod) -> &str {
    pod.metadata.uid.as_deref().unwrap_or("")
}

/// The sort key of upstream's `ActivePodsWithRanks` (smaller = delete first). Upstream compares
/// pairs, breaking ties between ready times in the same log₂ bucket by uid before restarts;
/// that is not a total order, so here equal buckets go on to restarts, creation and uid.
fn sort_key(pod: &Pod, rank: i64, now: jiff::Timestamp) -> impl Ord + use<> {
    let ready = podutil::is_ready(pod);
    let ready_bucket = if ready {
        log_rank(podutil::ready_since(pod).flatten(), now)
    } else {
        -1
    };
    let created = pod.metadata.creation_timestamp.as_ref().map(|t| t.0);
    (
        node_of(pod).is_some(),
        phase_ordinal(pod),
        ready,
        deletion_cost(pod),
        Reverse(rank),
        ready_bucket,
        Reverse(restarts(pod)),
        log_rank(created, now),
        uid(pod).to_string(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(name: &str, node: Option<&str>, phase: &str, ready_at: Option<&str>) -> Arc<Pod> {
        Arc::new(
            serde_json::from_value(json!({
                "metadata": {"name": name, "uid": name,
                             "creationTimestamp": "2026-01-01T00:00:00Z"},
                "spec": {"nodeName": node, "containers": []},
                "status": {"phase": phase, "conditions": ready_at.map(|t| vec![json!({
                    "type": "Ready", "status": "True", "lastTransitionTime": t})])},
            }))
            .unwrap(),
        )
    }

    fn names(pods: &[Arc<Pod>]) -> Vec<&str> {
        pods.iter()
            .map(|p| p.metadata.name.as_deref().unwrap())
            .collect()
    }

    #[test]
    fn unassigned_pending_and_unready_pods_go_first() {
        let now: jiff::Timestamp = "2026-01-02T00:00:00Z".parse().unwrap();
        let pods = vec![
            pod("ready", Some("n1"), "Running", Some("2026-01-01T00:00:01Z")),
            pod("running-unready", Some("n2"), "Running", None),
            pod("unknown", Some("n3"), "Unknown", None),
            pod("pending", Some("n4"), "Pending", None),
            pod("unassigned", None, "Pending", None),
        ];
        let order = pods_to_delete(&pods, &pods, 5, now);
        assert_eq!(
            names(&order),
            [
                "unassigned",
                "pending",
                "unknown",
                "running-unready",
                "ready"
            ]
        );
        assert_eq!(pods_to_delete(&pods, &pods, 2, now).len(), 2);
    }

    #[test]
    fn doubled_up_pods_then_recently_ready_pods_go_first() {
        let now: jiff::Timestamp = "2026-01-02T00:00:00Z".parse().unwrap();
        let old = "2026-01-01T00:00:00Z";
        let pods = vec![
            pod("alone", Some("n1"), "Running", Some(old)),
            pod("shared-a", Some("n2"), "Running", Some(old)),
            pod("shared-b", Some("n2"), "Running", Some(old)),
            pod("fresh", Some("n3"), "Running", Some("2026-01-01T23:59:59Z")),
        ];
        let order = pods_to_delete(&pods, &pods, 4, now);
        assert_eq!(names(&order)[..2], ["shared-a", "shared-b"]);
        assert_eq!(names(&order)[2..], ["fresh", "alone"]);
    }

    #[test]
    fn many_pods_with_close_ready_times_sort_without_panicking() {
        let now: jiff::Timestamp = "2026-01-02T00:00:00Z".parse().unwrap();
        let pods: Vec<Arc<Pod>> = (0..500)
            .map(|i| {
                let ready = format!(
                    "2026-01-01T23:{:02}:{:02}Z",
                    40 + (i * 7) % 20,
                    (i * 13) % 60
                );
                pod(
                    &format!("p{:03}", (i * 37) % 500),
                    Some(["n1", "n2"][i % 2]),
                    "Running",
                    Some(&ready),
                )
            })
            .collect();
        let order = pods_to_delete(&pods, &pods, 500, now);
        assert_eq!(order.len(), 500);
    }
}
