//! What a kubelet checks before it runs a pod bound to its node, with the scheduler's own
//! checks (upstream's `scheduler.AdmissionCheck`, which the kubelet imports): the pod fits the
//! node's allocatable resources beside the pods already admitted there, and NodeAffinity,
//! NodeName and NodePorts pass. Every failure is returned, in upstream's order. The names and
//! reasons of those three plugins live here, and the scheduler's plugins use them.

use k8s_openapi::api::core::v1::{Node, Pod};

use crate::node_affinity::RequiredNodeAffinity;
use crate::ports::{any_conflict, host_ports};
use crate::resources::{Resource, insufficient_resources, node_allocatable, pod_requests};

/// The `NodeAffinity` plugin's name.
pub const NODE_AFFINITY: &str = "NodeAffinity";
/// `NodeAffinity`'s reason when the pod's `nodeSelector` or required node affinity does not
/// match (upstream's `ErrReasonPod`).
pub const NODE_AFFINITY_REASON: &str = "node(s) didn't match Pod's node affinity/selector";
/// The `NodeName` plugin's name.
pub const NODE_NAME: &str = "NodeName";
/// `NodeName`'s reason when the pod names another node (upstream's `ErrReason`).
pub const NODE_NAME_REASON: &str = "node(s) didn't match the requested node name";
/// The `NodePorts` plugin's name.
pub const NODE_PORTS: &str = "NodePorts";
/// `NodePorts`' reason when a host port is taken (upstream's `ErrReason`).
pub const NODE_PORTS_REASON: &str = "node(s) didn't have free ports for the requested pod ports";

/// One reason a pod cannot run on the node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AdmissionFailure {
    /// Not enough of a resource: the pod's request, what admitted pods use, the allocatable.
    Insufficient {
        resource: String,
        requested: i64,
        used: i64,
        capacity: i64,
    },
    /// A plugin's Filter failed with this reason.
    Predicate {
        plugin: &'static str,
        reason: String,
    },
}

/// Whether the pod may run on the node by its `spec.nodeName`: it names none or this one
/// (upstream's `nodename.Fits`).
pub fn node_name_fits(pod: &Pod, node: &Node) -> bool {
    let wanted = pod
        .spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .unwrap_or("");
    wanted.is_empty() || wanted == node.metadata.name.as_deref().unwrap_or("")
}

/// Checks `pod` against `node` holding the `admitted` pods.
pub fn check<'a>(
    pod: &Pod,
    node: &Node,
    admitted: impl IntoIterator<Item = &'a Pod>,
) -> Vec<AdmissionFailure> {
    let mut used = Resource::default();
    let mut pods = 0;
    let mut used_ports = Vec::new();
    for other in admitted {
        used.add(&pod_requests(other, |r| r));
        used_ports.extend(host_ports(other));
        pods += 1;
    }
    let allocatable = node_allocatable(node);
    // Extended resources the node does not have are ignored, as cluster-level resources are
    // (upstream's kubelet removes them from the pod before the check).
    let missing = |name: &str| !allocatable.scalar.contains_key(name);
    let requests = pod_requests(pod, |r| r);
    let mut failures: Vec<AdmissionFailure> =
        insufficient_resources(&requests, &allocatable, &used, pods, missing)
            .into_iter()
            .map(|r| AdmissionFailure::Insufficient {
                resource: r.resource,
                requested: r.requested,
                used: r.used,
                capacity: r.capacity,
            })
            .collect();
    let mut predicate = |plugin: &'static str, reason: &str| {
        failures.push(AdmissionFailure::Predicate {
            plugin,
            reason: reason.to_string(),
        })
    };
    if !RequiredNodeAffinity::of(pod).matches(node) {
        predicate(NODE_AFFINITY, NODE_AFFINITY_REASON);
    }
    if !node_name_fits(pod, node) {
        predicate(NODE_NAME, NODE_NAME_REASON);
    }
    if any_conflict(&host_ports(pod), &used_ports) {
        predicate(NODE_PORTS, NODE_PORTS_REASON);
    }
    failures
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn node(allocatable: Value) -> Node {
        serde_json::from_value(json!({
            "metadata": {"name": "n"},
            "status": {"allocatable": allocatable},
        }))
        .unwrap()
    }

    /// A pod with one container requesting `requests`, and `spec` merged into its spec.
    fn pod(name: &str, requests: Value, spec: Value) -> Pod {
        let mut pod = json!({
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"containers": [{"name": "c", "image": "busybox",
                                     "resources": {"requests": requests}}]},
        });
        for (k, v) in spec.as_object().unwrap() {
            pod["spec"][k] = v.clone();
        }
        serde_json::from_value(pod).unwrap()
    }

    fn host_port(pod: &mut Pod, port: i32) {
        let c = &mut pod.spec.as_mut().unwrap().containers[0];
        c.ports = Some(vec![
            serde_json::from_value(json!({
            "containerPort": port, "hostPort": port, "protocol": "TCP"}))
            .unwrap(),
        ]);
    }

    #[test]
    fn a_fitting_pod_passes_and_each_shortfall_is_reported_with_its_amounts() {
        let mut running = pod("a", json!({"cpu": "1500m", "memory": "1Gi"}), json!({}));
        host_port(&mut running, 8080);
        let n = node(json!({"cpu": "2", "memory": "2Gi", "pods": "2"}));
        let fits = pod("b", json!({"cpu": "500m"}), json!({}));
        assert!(check(&fits, &n, [&running]).is_empty());

        let mut big = pod(
            "c",
            json!({"cpu": "1", "memory": "1Gi", "example.com/gpu": "1"}),
            json!({}),
        );
        host_port(&mut big, 8080);
        assert_eq!(
            check(&big, &n, [&running]),
            vec![
                AdmissionFailure::Insufficient {
                    resource: "cpu".into(),
                    requested: 1000,
                    used: 1500,
                    capacity: 2000,
                },
                AdmissionFailure::Predicate {
                    plugin: "NodePorts",
                    reason: NODE_PORTS_REASON.into(),
                },
            ],
            "memory fits exactly; the gpu is not a resource this node has"
        );
    }

    #[test]
    fn a_full_node_affinity_and_name_mismatches_fail() {
        let n = node(json!({"pods": "1"}));
        let running = pod("a", json!({}), json!({}));
        let elsewhere = pod(
            "p",
            json!({}),
            json!({"nodeSelector": {"disk": "ssd"}, "nodeName": "other"}),
        );
        assert_eq!(
            check(&elsewhere, &n, [&running]),
            vec![
                AdmissionFailure::Insufficient {
                    resource: "pods".into(),
                    requested: 1,
                    used: 1,
                    capacity: 1,
                },
                AdmissionFailure::Predicate {
                    plugin: "NodeAffinity",
                    reason: NODE_AFFINITY_REASON.into(),
                },
                AdmissionFailure::Predicate {
                    plugin: "NodeName",
                    reason: NODE_NAME_REASON.into(),
                },
            ]
        );
    }
}
