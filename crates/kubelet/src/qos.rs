//! How much the kernel's OOM killer should prefer a container, from its pod's QoS class, as
//! upstream's kubelet sets `oom_score_adj` (`pkg/kubelet/qos/policy.go`): Guaranteed and
//! node-critical pods last, BestEffort first, Burstable in between by memory request.

use k8s_openapi::api::core::v1::{Container, Pod};
use skiff_apimachinery::quantity::Quantity;

/// Guaranteed and node-critical containers: killed last, after the system's own daemons.
const GUARANTEED: i64 = -997;
/// BestEffort containers: killed first.
const BEST_EFFORT: i64 = 1000;

/// The `oom_score_adj` of `container` in `pod` on a node with `memory_capacity` bytes. The
/// pod's QoS class is the one the API server recorded in `status.qosClass` on create.
pub fn oom_score_adj(pod: &Pod, container: &Container, memory_capacity: u64) -> i64 {
    let spec = pod.spec.as_ref();
    if spec.and_then(|s| s.priority_class_name.as_deref()) == Some("system-node-critical") {
        return GUARANTEED;
    }
    match pod.status.as_ref().and_then(|s| s.qos_class.as_deref()) {
        Some("Guaranteed") => return GUARANTEED,
        Some("BestEffort") => return BEST_EFFORT,
        _ => {}
    }
    let request = container
        .resources
        .as_ref()
        .and_then(|r| r.requests.as_ref())
        .and_then(|r| r.get("memory"))
        .and_then(|q| Quantity::parse(&q.0).ok())
        .map_or(0, |q| q.value());
    let capacity = i64::try_from(memory_capacity).unwrap_or(i64::MAX).max(1);
    let adj = 1000 - (1000 * i128::from(request) / i128::from(capacity)) as i64;
    // Burstable stays strictly between Guaranteed and BestEffort
    adj.clamp(1000 + GUARANTEED, BEST_EFFORT - 1)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn pod(qos: &str, class: Option<&str>, request: Option<&str>) -> (Pod, Container) {
        let mut container = json!({"name": "c"});
        if let Some(r) = request {
            container["resources"] = json!({"requests": {"memory": r}});
        }
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p"},
            "spec": {"containers": [container], "priorityClassName": class},
            "status": {"qosClass": qos},
        }))
        .unwrap();
        let c = pod.spec.as_ref().unwrap().containers[0].clone();
        (pod, c)
    }

    const GIB: u64 = 1 << 30;

    #[test]
    fn guaranteed_and_best_effort_get_upstreams_fixed_scores() {
        let (p, c) = pod("Guaranteed", None, Some("1Gi"));
        assert_eq!(oom_score_adj(&p, &c, 4 * GIB), -997);
        let (p, c) = pod("BestEffort", None, None);
        assert_eq!(oom_score_adj(&p, &c, 4 * GIB), 1000);
    }

    #[test]
    fn burstable_scales_with_the_memory_request_and_stays_between_the_two() {
        let (p, c) = pod("Burstable", None, Some("1Gi"));
        assert_eq!(oom_score_adj(&p, &c, 4 * GIB), 750);
        let (p, c) = pod("Burstable", None, Some("8Gi"));
        assert_eq!(oom_score_adj(&p, &c, 4 * GIB), 3);
        let (p, c) = pod("Burstable", None, None);
        assert_eq!(oom_score_adj(&p, &c, 4 * GIB), 999);
    }

    #[test]
    fn node_critical_pods_are_killed_last_whatever_their_class() {
        let (p, c) = pod("BestEffort", Some("system-node-critical"), None);
        assert_eq!(oom_score_adj(&p, &c, 4 * GIB), -997);
    }
}
