//! `NodePorts`: a pod that asks for host ports fits only nodes where no other pod holds the
//! same protocol and port on an overlapping address (PreFilter collects the ports, Filter
//! checks them against the node's used ports).

use skiff_component_helpers::admission;
use skiff_component_helpers::ports::{any_conflict, host_ports};

use crate::framework::{
    ClusterEvent, CycleState, FilterPlugin, HostPort, NodeInfo, Plugin, PodInfo, PreFilterPlugin,
    PreFilterResult, Snapshot, Status,
};

pub const NAME: &str = admission::NODE_PORTS;

/// Upstream's `ErrReason` (the kubelet's admission fails with it too).
pub const REASON: &str = admission::NODE_PORTS_REASON;

const PRE_FILTER_KEY: &str = "PreFilterNodePorts";

#[derive(Clone)]
struct PreFilterState(Vec<HostPort>);

pub struct NodePorts;

impl Plugin for NodePorts {
    fn name(&self) -> &'static str {
        NAME
    }
    /// A node added, or a pod holding the port gone (upstream: Node Add, Pod Delete).
    fn events(&self) -> ClusterEvent {
        ClusterEvent::NODE_ADD.with(ClusterEvent::ASSIGNED_POD_DELETE)
    }
    fn as_pre_filter(&self) -> Option<&dyn PreFilterPlugin> {
        Some(self)
    }
    fn as_filter(&self) -> Option<&dyn FilterPlugin> {
        Some(self)
    }
}

impl PreFilterPlugin for NodePorts {
    fn pre_filter(&self, state: &mut CycleState, pod: &PodInfo, _: &Snapshot) -> PreFilterResult {
        let ports = host_ports(&pod.pod);
        if ports.is_empty() {
            return Status::skip().into();
        }
        state.write(PRE_FILTER_KEY, PreFilterState(ports));
        Status::success().into()
    }
}

impl FilterPlugin for NodePorts {
    fn filter(&self, state: &CycleState, _: &PodInfo, node: &NodeInfo) -> Status {
        let Some(PreFilterState(wanted)) = state.read::<PreFilterState>(PRE_FILTER_KEY) else {
            return Status::error(format!(
                "reading {PRE_FILTER_KEY:?} from cycleState: not found"
            ));
        };
        if any_conflict(wanted, &node.used_ports) {
            Status::unschedulable(REASON)
        } else {
            Status::success()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::Code;
    use crate::framework::testing::{PodBuilder, node, snapshot};
    use k8s_openapi::api::core::v1::ContainerPort;

    fn with_port(name: &str, port: i32, protocol: &str, ip: &str) -> PodBuilder {
        PodBuilder::new(name).with_spec(|s| {
            s.containers.push(Default::default());
            s.containers[0].ports = Some(vec![ContainerPort {
                container_port: port,
                host_port: Some(port),
                protocol: Some(protocol.into()),
                host_ip: (!ip.is_empty()).then(|| ip.into()),
                ..Default::default()
            }]);
        })
    }

    #[test]
    fn host_ports_already_taken_on_the_node_reject_the_pod() {
        let cases = [
            (
                "free port",
                with_port("p", 80, "TCP", ""),
                Some(with_port("e", 81, "TCP", "")),
                Code::Success,
            ),
            (
                "same port",
                with_port("p", 80, "TCP", ""),
                Some(with_port("e", 80, "TCP", "")),
                Code::Unschedulable,
            ),
            (
                "other protocol",
                with_port("p", 80, "UDP", ""),
                Some(with_port("e", 80, "TCP", "")),
                Code::Success,
            ),
            (
                "different addresses",
                with_port("p", 80, "TCP", "10.0.0.1"),
                Some(with_port("e", 80, "TCP", "10.0.0.2")),
                Code::Success,
            ),
            (
                "all addresses against one",
                with_port("p", 80, "TCP", "10.0.0.1"),
                Some(with_port("e", 80, "TCP", "0.0.0.0")),
                Code::Unschedulable,
            ),
            (
                "empty node",
                with_port("p", 80, "TCP", ""),
                None,
                Code::Success,
            ),
        ];
        for (name, pod, existing, want) in cases {
            let pods: Vec<_> = existing.into_iter().map(|e| e.info()).collect();
            let n = node("n").info(&pods);
            let p = pod.info();
            let mut state = CycleState::default();
            assert!(
                NodePorts
                    .pre_filter(&mut state, &p, &snapshot(vec![]))
                    .status
                    .is_success()
            );
            let got = NodePorts.filter(&state, &p, &n);
            assert_eq!(got.code(), want, "{name}");
            if want != Code::Success {
                assert_eq!(got.message(), REASON, "{name}");
            }
        }
    }

    #[test]
    fn pods_without_host_ports_skip_the_filter() {
        let got = NodePorts.pre_filter(
            &mut CycleState::default(),
            &PodBuilder::new("p").container("c", &[]).info(),
            &snapshot(vec![]),
        );
        assert!(got.status.is_skip());
    }
}
