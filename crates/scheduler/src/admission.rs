//! What a kubelet checks before it runs a pod bound to its node, with the scheduler's own
//! plugins (upstream's `scheduler.AdmissionCheck`, which the kubelet imports): the pod fits the
//! node's allocatable resources beside the pods already admitted there, and NodeAffinity,
//! NodeName and NodePorts pass. Every failure is returned, in upstream's order.

use crate::framework::{CycleState, FilterPlugin, NodeInfo, PodInfo, PreFilterPlugin, Snapshot};
use crate::plugins::{node_affinity, node_name, node_ports};

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

/// Checks `pod` against `node` (holding the pods admitted before it).
pub fn check(pod: &PodInfo, node: &NodeInfo) -> Vec<AdmissionFailure> {
    let mut failures = insufficient(pod, node);
    let snapshot = Snapshot::default();
    let plugins: [(
        &'static str,
        &dyn FilterPlugin,
        Option<&dyn PreFilterPlugin>,
    ); 3] = [
        (
            node_affinity::NAME,
            &node_affinity::NodeAffinity::default(),
            Some(&node_affinity::NodeAffinity::default()),
        ),
        (node_name::NAME, &node_name::NodeName, None),
        (
            node_ports::NAME,
            &node_ports::NodePorts,
            Some(&node_ports::NodePorts),
        ),
    ];
    for (plugin, filter, pre_filter) in plugins {
        let mut state = CycleState::default();
        if let Some(pre) = pre_filter
            && pre.pre_filter(&mut state, pod, &snapshot).status.is_skip()
        {
            continue;
        }
        let status = filter.filter(&state, pod, node);
        if status.is_rejected() {
            failures.push(AdmissionFailure::Predicate {
                plugin,
                reason: status.message(),
            });
        }
    }
    failures
}

/// Upstream's `fitsRequest` with the amounts: the pod count, then cpu, memory,
/// ephemeral-storage and the extended resources the node has (those it does not have are
/// ignored, as cluster-level resources are).
fn insufficient(pod: &PodInfo, node: &NodeInfo) -> Vec<AdmissionFailure> {
    let (want, alloc, used) = (&pod.requests, &node.allocatable, &node.requested);
    let mut failures = Vec::new();
    let mut short = |resource: &str, requested: i64, used: i64, capacity: i64| {
        if requested > 0 && requested > capacity - used {
            failures.push(AdmissionFailure::Insufficient {
                resource: resource.to_string(),
                requested,
                used,
                capacity,
            });
        }
    };
    short("pods", 1, node.pods.len() as i64, alloc.allowed_pod_number);
    short("cpu", want.milli_cpu, used.milli_cpu, alloc.milli_cpu);
    short("memory", want.memory, used.memory, alloc.memory);
    short(
        "ephemeral-storage",
        want.ephemeral_storage,
        used.ephemeral_storage,
        alloc.ephemeral_storage,
    );
    for (name, requested) in &want.scalar {
        if alloc.scalar.contains_key(name) {
            short(name, *requested, used.get(name), alloc.get(name));
        }
    }
    failures
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::testing::{PodBuilder, node};

    #[test]
    fn a_fitting_pod_passes_and_each_shortfall_is_reported_with_its_amounts() {
        let running = PodBuilder::new("a")
            .container("c", &[("cpu", "1500m"), ("memory", "1Gi")])
            .host_port(8080)
            .info();
        let n = node("n").cpu("2").memory("2Gi").pods("2").info(&[running]);
        let fits = PodBuilder::new("b")
            .container("c", &[("cpu", "500m")])
            .info();
        assert!(check(&fits, &n).is_empty());

        let big = PodBuilder::new("c")
            .container(
                "c",
                &[("cpu", "1"), ("memory", "1Gi"), ("example.com/gpu", "1")],
            )
            .host_port(8080)
            .info();
        assert_eq!(
            check(&big, &n),
            vec![
                AdmissionFailure::Insufficient {
                    resource: "cpu".into(),
                    requested: 1000,
                    used: 1500,
                    capacity: 2000,
                },
                AdmissionFailure::Predicate {
                    plugin: "NodePorts",
                    reason: node_ports::REASON.into(),
                },
            ],
            "memory fits exactly; the gpu is not a resource this node has"
        );
    }

    #[test]
    fn a_full_node_affinity_and_name_mismatches_fail() {
        let n = node("n").pods("1").info(&[PodBuilder::new("a").info()]);
        let elsewhere = PodBuilder::new("p")
            .node_selector("disk", "ssd")
            .node_name("other")
            .info();
        assert_eq!(
            check(&elsewhere, &n),
            vec![
                AdmissionFailure::Insufficient {
                    resource: "pods".into(),
                    requested: 1,
                    used: 1,
                    capacity: 1,
                },
                AdmissionFailure::Predicate {
                    plugin: "NodeAffinity",
                    reason: node_affinity::REASON_POD.into(),
                },
                AdmissionFailure::Predicate {
                    plugin: "NodeName",
                    reason: node_name::REASON.into(),
                },
            ]
        );
    }
}
