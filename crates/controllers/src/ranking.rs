//! `ranking`: which pods a scale-down deletes first, as upstream's `ActivePodsWithRanks` with its
//! default feature gates (PodDeletionCost, LogarithmicScaleDown): unassigned before assigned,
//! Pending before Unknown before Running, not ready before ready, lower
//! `controller.kubernetes.io/pod-deletion-cost` first, more pods on the same node first, ready
//! more recently first (on a log₂ scale of age), more restarts first, newer first.

use std::cmp::Ordering;
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
    ranked.sort_by(|a, b| compare(a.1, a.0, b.1, b.0, now));
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

/// `Less` of upstream's `ActivePodsWithRanks`, as an ordering (`Less` = delete first).
fn compare(a: &Pod, rank_a: i64, b: &Pod, rank_b: i64, now: jiff::Timestamp) -> Ordering {
    let assigned = |p: &Pod| node_of(p).is_some();
    if assigned(a) != assigned(b) {
        return assigned(a).cmp(&assigned(b));
    }
    let by_phase = phase_ordinal(a).cmp(&phase_ordinal(b));
    if by_phase != Ordering::Equal {
        return by_phase;
    }
    let (ready_a, ready_b) = (podutil::is_ready(a), podutil::is_ready(b));
    if ready_a != ready_b {
        return ready_a.cmp(&ready_b);
    }
    let by_cost = deletion_cost(a).cmp(&deletion_cost(b));
    if by_cost != Ordering::Equal {
        return by_cost;
    }
    if rank_a != rank_b {
        return rank_b.cmp(&rank_a);
    }
    if ready_a && ready_b {
        let since = |p: &Pod| podutil::ready_since(p).flatten();
        if since(a) != since(b) {
            let diff = log_rank(since(a), now) - log_rank(since(b), now);
            return if diff == 0 {
                uid(a).cmp(uid(b))
            } else {
                diff.cmp(&0)
            };
        }
    }
    let by_restarts = restarts(b).cmp(&restarts(a));
    if by_restarts != Ordering::Equal {
        return by_restarts;
    }
    let created = |p: &Pod| p.metadata.creation_timestamp.as_ref().map(|t| t.0);
    if created(a) != created(b) {
        let diff = log_rank(created(a), now) - log_rank(created(b), now);
        return if diff == 0 {
            uid(a).cmp(uid(b))
        } else {
            diff.cmp(&0)
        };
    }
    Ordering::Equal
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
}
