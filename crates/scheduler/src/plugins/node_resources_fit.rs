//! `NodeResourcesFit`: a pod fits a node only if the node's allocatable minus what its pods
//! request covers the pod's requests and it has room for one more pod (PreFilter, Filter: one
//! reason per short resource); nodes are ranked by the scoring strategy (`LeastAllocated`
//! by default, `MostAllocated`, `RequestedToCapacityRatio`) over the configured resources.

use std::collections::BTreeSet;
use std::sync::Arc;

use serde::Deserialize;
use serde_json::Value;
use skiff_component_helpers::resources::insufficient_resources;

use super::helper::arg;
use super::resource_allocation::{
    ResourceSpec, ShapePoint, default_resources, least_allocated, most_allocated, pod_request_list,
    requested_and_allocatable, requested_to_capacity_ratio, validate_resources, validate_shape,
};
use crate::framework::{
    ClusterEvent, CycleState, FilterPlugin, NodeInfo, Plugin, PodInfo, PreFilterPlugin,
    PreFilterResult, PreScorePlugin, Resource, ScorePlugin, Snapshot, Status,
};

pub const NAME: &str = "NodeResourcesFit";

/// Upstream's reason when the node is at its `pods` allocatable.
pub const REASON_TOO_MANY_PODS: &str = "Too many pods";

/// Upstream's reason for one short resource (`Insufficient cpu`, `Insufficient example.com/gpu`).
pub fn insufficient(resource: &str) -> String {
    format!("Insufficient {resource}")
}

const PRE_FILTER_KEY: &str = "PreFilterNodeResourcesFit";
const PRE_SCORE_KEY: &str = "PreScoreNodeResourcesFit";

#[derive(Clone)]
struct PreFilterState(Resource);

#[derive(Clone)]
struct PreScoreState(Vec<i64>);

/// How nodes are ranked (upstream's `ScoringStrategyType`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Strategy {
    /// Prefer nodes with the most free capacity (the default).
    LeastAllocated,
    /// Prefer the fullest nodes (bin packing).
    MostAllocated,
    /// Score utilization through a piecewise linear shape.
    RequestedToCapacityRatio(Vec<ShapePoint>),
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct StrategyArgs {
    #[serde(rename = "type", default)]
    kind: String,
    #[serde(default)]
    resources: Vec<ResourceSpec>,
    requested_to_capacity_ratio: Option<ShapeArgs>,
}

#[derive(Deserialize)]
struct ShapeArgs {
    #[serde(default)]
    shape: Vec<ShapePoint>,
}

/// The plugin with its `NodeResourcesFitArgs`.
pub struct NodeResourcesFit {
    ignored_resources: BTreeSet<String>,
    ignored_resource_groups: BTreeSet<String>,
    strategy: Strategy,
    resources: Vec<ResourceSpec>,
}

impl Default for NodeResourcesFit {
    /// Upstream's v1 defaults: `LeastAllocated` over cpu and memory, weight 1.
    fn default() -> Self {
        NodeResourcesFit {
            ignored_resources: BTreeSet::new(),
            ignored_resource_groups: BTreeSet::new(),
            strategy: Strategy::LeastAllocated,
            resources: default_resources(),
        }
    }
}

impl NodeResourcesFit {
    /// From `NodeResourcesFitArgs` (`ignoredResources`, `ignoredResourceGroups`,
    /// `scoringStrategy`).
    pub fn from_args(args: Option<&Value>) -> Result<NodeResourcesFit, String> {
        let mut pl = NodeResourcesFit::default();
        if let Some(r) = arg::<Vec<String>>(args, "ignoredResources")? {
            pl.ignored_resources = r.into_iter().collect();
        }
        if let Some(groups) = arg::<Vec<String>>(args, "ignoredResourceGroups")? {
            for (i, g) in groups.iter().enumerate() {
                if g.contains('/') {
                    return Err(format!(
                        "ignoredResourceGroups[{i}]: Invalid value: {g:?}: resource group name can't contain '/'"
                    ));
                }
            }
            pl.ignored_resource_groups = groups.into_iter().collect();
        }
        if let Some(s) = arg::<StrategyArgs>(args, "scoringStrategy")? {
            pl.strategy = match s.kind.as_str() {
                "LeastAllocated" => Strategy::LeastAllocated,
                "MostAllocated" => Strategy::MostAllocated,
                "RequestedToCapacityRatio" => {
                    let shape = s
                        .requested_to_capacity_ratio
                        .map(|r| r.shape)
                        .unwrap_or_default();
                    validate_shape("scoringStrategy.requestedToCapacityRatio.shape", &shape)?;
                    Strategy::RequestedToCapacityRatio(shape)
                }
                other => {
                    return Err(format!(
                        "scoringStrategy.type: Unsupported value: {other:?}: supported values: \"LeastAllocated\", \"MostAllocated\", \"RequestedToCapacityRatio\""
                    ));
                }
            };
            if !s.resources.is_empty() {
                pl.resources = s.resources;
            }
            validate_resources("scoringStrategy.resources", &mut pl.resources)?;
        }
        Ok(pl)
    }

    fn ignored(&self, name: &str) -> bool {
        if !is_extended_resource(name) {
            return false;
        }
        let group = name.split('/').next().unwrap_or("");
        self.ignored_resources.contains(name) || self.ignored_resource_groups.contains(group)
    }

    /// Upstream's `fitsRequest`: the reasons the pod does not fit, empty if it does.
    fn insufficient(&self, pod: &Resource, node: &NodeInfo) -> Vec<String> {
        let short = insufficient_resources(
            pod,
            &node.allocatable,
            &node.requested,
            node.pods.len(),
            |name| self.ignored(name),
        );
        short
            .into_iter()
            .map(|r| match r.resource.as_str() {
                "pods" => REASON_TOO_MANY_PODS.to_string(),
                name => insufficient(name),
            })
            .collect()
    }

    fn score_with(&self, node: &NodeInfo, pod_requests: &[i64]) -> i64 {
        let (req, alloc) = requested_and_allocatable(node, &self.resources, pod_requests, false);
        match &self.strategy {
            Strategy::LeastAllocated => least_allocated(&self.resources, &req, &alloc),
            Strategy::MostAllocated => most_allocated(&self.resources, &req, &alloc),
            Strategy::RequestedToCapacityRatio(shape) => {
                requested_to_capacity_ratio(&self.resources, shape, &req, &alloc)
            }
        }
    }
}

/// Upstream's `IsExtendedResourceName`: a domain-prefixed name outside `kubernetes.io`.
fn is_extended_resource(name: &str) -> bool {
    name.contains('/') && !name.contains("kubernetes.io/") && !name.starts_with("requests.")
}

impl Plugin for NodeResourcesFit {
    fn name(&self) -> &'static str {
        NAME
    }
    /// Room appears: a node added or grown, or a pod gone (upstream: Node Add|UpdateNodeAllocatable|UpdateNodeLabel|UpdateNodeTaint, Pod Delete).
    fn events(&self) -> ClusterEvent {
        ClusterEvent::NODE_ADD
            .with(ClusterEvent::NODE_ALLOCATABLE)
            .with(ClusterEvent::NODE_LABEL)
            .with(ClusterEvent::NODE_TAINT)
            .with(ClusterEvent::ASSIGNED_POD_DELETE)
    }
    fn as_pre_filter(&self) -> Option<&dyn PreFilterPlugin> {
        Some(self)
    }
    fn as_filter(&self) -> Option<&dyn FilterPlugin> {
        Some(self)
    }
    fn as_pre_score(&self) -> Option<&dyn PreScorePlugin> {
        Some(self)
    }
    fn as_score(&self) -> Option<&dyn ScorePlugin> {
        Some(self)
    }
}

impl PreFilterPlugin for NodeResourcesFit {
    fn pre_filter(&self, state: &mut CycleState, pod: &PodInfo, _: &Snapshot) -> PreFilterResult {
        state.write(PRE_FILTER_KEY, PreFilterState(pod.requests.clone()));
        Status::success().into()
    }
}

impl FilterPlugin for NodeResourcesFit {
    fn filter(&self, state: &CycleState, _: &PodInfo, node: &NodeInfo) -> Status {
        let Some(PreFilterState(requests)) = state.read::<PreFilterState>(PRE_FILTER_KEY) else {
            return Status::error(format!(
                "error reading {PRE_FILTER_KEY:?} from cycleState: not found"
            ));
        };
        let reasons = self.insufficient(requests, node);
        if reasons.is_empty() {
            Status::success()
        } else {
            Status::new(crate::framework::Code::Unschedulable, reasons)
        }
    }
}

impl PreScorePlugin for NodeResourcesFit {
    fn pre_score(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        _: &[Arc<NodeInfo>],
        _: &Snapshot,
    ) -> Status {
        let list = pod_request_list(pod, &self.resources, false);
        state.write(PRE_SCORE_KEY, PreScoreState(list));
        Status::success()
    }
}

impl ScorePlugin for NodeResourcesFit {
    fn score(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        Ok(match state.read::<PreScoreState>(PRE_SCORE_KEY) {
            Some(PreScoreState(list)) => self.score_with(node, list),
            None => self.score_with(node, &pod_request_list(pod, &self.resources, false)),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::Code;
    use crate::framework::testing::{PodBuilder, node, snapshot};
    use serde_json::json;

    fn filter(pl: &NodeResourcesFit, pod: &PodInfo, node: &NodeInfo) -> Status {
        let mut state = CycleState::default();
        pl.pre_filter(&mut state, pod, &snapshot(vec![]));
        pl.filter(&state, pod, node)
    }

    #[test]
    fn each_short_resource_is_its_own_reason() {
        let existing = PodBuilder::new("e")
            .container("c", &[("cpu", "1500m"), ("memory", "1Gi")])
            .info();
        let n = || {
            node("n")
                .cpu("2")
                .memory("2Gi")
                .resource("ephemeral-storage", "10Gi")
                .resource("example.com/gpu", "1")
                .pods("2")
                .info(std::slice::from_ref(&existing))
        };
        type Case<'a> = (&'a str, &'a [(&'a str, &'a str)], &'a [&'a str]);
        let cases: [Case; 7] = [
            ("fits", &[("cpu", "500m"), ("memory", "1Gi")], &[]),
            ("no requests fit anywhere with room", &[], &[]),
            ("cpu", &[("cpu", "600m")], &["Insufficient cpu"]),
            (
                "cpu and memory",
                &[("cpu", "1"), ("memory", "2Gi")],
                &["Insufficient cpu", "Insufficient memory"],
            ),
            (
                "ephemeral storage",
                &[("ephemeral-storage", "11Gi")],
                &["Insufficient ephemeral-storage"],
            ),
            (
                "extended resource",
                &[("example.com/gpu", "2")],
                &["Insufficient example.com/gpu"],
            ),
            (
                "resource the node lacks",
                &[("example.com/fpga", "1")],
                &["Insufficient example.com/fpga"],
            ),
        ];
        for (name, requests, want) in cases {
            let pod = PodBuilder::new("p").container("c", requests).info();
            let got = filter(&NodeResourcesFit::default(), &pod, &n());
            assert_eq!(got.reasons(), want, "{name}");
            let code = if want.is_empty() {
                Code::Success
            } else {
                Code::Unschedulable
            };
            assert_eq!(got.code(), code, "{name}");
        }
    }

    #[test]
    fn a_full_node_has_too_many_pods_even_for_a_pod_requesting_nothing() {
        let e = PodBuilder::new("e").info();
        let n = node("n").pods("1").info(&[e]);
        let got = filter(
            &NodeResourcesFit::default(),
            &PodBuilder::new("p").info(),
            &n,
        );
        assert_eq!(got.reasons(), ["Too many pods"]);
    }

    #[test]
    fn ignored_extended_resources_and_groups_are_not_checked() {
        let args = json!({"ignoredResources": ["example.com/gpu"], "ignoredResourceGroups": ["vendor.io"]});
        let pl = NodeResourcesFit::from_args(Some(&args)).unwrap();
        let pod = PodBuilder::new("p")
            .container(
                "c",
                &[
                    ("example.com/gpu", "1"),
                    ("vendor.io/nic", "1"),
                    ("other.io/x", "1"),
                ],
            )
            .info();
        let got = filter(&pl, &pod, &node("n").info(&[]));
        assert_eq!(got.reasons(), ["Insufficient other.io/x"]);
    }

    fn score(pl: &NodeResourcesFit, pod: &PodInfo, n: &NodeInfo) -> i64 {
        let mut state = CycleState::default();
        let snap = snapshot(vec![]);
        assert!(pl.pre_score(&mut state, pod, &[], &snap).is_success());
        pl.score(&state, pod, n).unwrap()
    }

    #[test]
    fn strategies_score_as_upstream() {
        // node: 4 cpu, 8Gi; existing 1 cpu, 2Gi; pod 1 cpu, 2Gi → 50% used of both
        let existing = PodBuilder::new("e")
            .container("c", &[("cpu", "1"), ("memory", "2Gi")])
            .info();
        let pod = PodBuilder::new("p")
            .container("c", &[("cpu", "1"), ("memory", "2Gi")])
            .info();
        let n = node("n").cpu("4").memory("8Gi").info(&[existing]);
        let rtcr = json!({"scoringStrategy": {"type": "RequestedToCapacityRatio",
            "requestedToCapacityRatio": {"shape": [{"utilization": 0, "score": 0}, {"utilization": 100, "score": 10}]}}});
        let weighted = json!({"scoringStrategy": {"type": "MostAllocated",
            "resources": [{"name": "cpu", "weight": 3}, {"name": "memory", "weight": 1}]}});
        let cases = [
            ("least allocated", json!({}), 50),
            (
                "most allocated",
                json!({"scoringStrategy": {"type": "MostAllocated"}}),
                50,
            ),
            ("requested to capacity ratio", rtcr, 50),
            ("weighted", weighted, 50),
        ];
        for (name, args, want) in cases {
            let pl = NodeResourcesFit::from_args(Some(&args)).unwrap();
            assert_eq!(score(&pl, &pod, &n), want, "{name}");
        }
    }

    #[test]
    fn scoring_counts_pods_without_requests_at_the_defaults() {
        // 100m and 200Mi assumed for a container without requests
        let pod = PodBuilder::new("p").container("c", &[]).info();
        let n = node("n").cpu("1").memory("2000Mi").info(&[]);
        let pl = NodeResourcesFit::default();
        // cpu: (1000-100)*100/1000 = 90; memory: (2000-200)*100/2000 = 90
        assert_eq!(score(&pl, &pod, &n), 90);
        let most = NodeResourcesFit::from_args(Some(
            &json!({"scoringStrategy": {"type": "MostAllocated"}}),
        ))
        .unwrap();
        assert_eq!(score(&most, &pod, &n), 10);
    }

    #[test]
    fn bad_args_name_the_field() {
        let cases = [
            (
                json!({"scoringStrategy": {"type": "Random"}}),
                "scoringStrategy.type",
            ),
            (
                json!({"scoringStrategy": {"type": "LeastAllocated", "resources": [{"name": "cpu", "weight": 101}]}}),
                "scoringStrategy.resources[0].weight",
            ),
            (
                json!({"scoringStrategy": {"type": "RequestedToCapacityRatio"}}),
                "scoringStrategy.requestedToCapacityRatio.shape",
            ),
            (json!({"ignoredResources": "gpu"}), "ignoredResources"),
            (
                json!({"ignoredResourceGroups": ["a/b"]}),
                "ignoredResourceGroups[0]",
            ),
        ];
        for (args, field) in cases {
            let err = NodeResourcesFit::from_args(Some(&args)).err().unwrap();
            assert!(err.starts_with(field), "{err}");
        }
    }
}
