//! `NodeResourcesBalancedAllocation`: prefers nodes whose resources would be used in equal
//! fractions with the pod on them (100 × (1 − standard deviation of the fractions)), over
//! the pods' actual requests; best-effort pods skip it.

use std::sync::Arc;

use serde_json::Value;

use super::helper::arg;
use super::resource_allocation::{
    ResourceSpec, balanced, default_resources, pod_request_list, requested_and_allocatable,
    validate_resources,
};
use crate::framework::{
    CycleState, NodeInfo, Plugin, PodInfo, PreScorePlugin, ScorePlugin, Snapshot, Status,
};

pub const NAME: &str = "NodeResourcesBalancedAllocation";

const PRE_SCORE_KEY: &str = "PreScoreNodeResourcesBalancedAllocation";

#[derive(Clone)]
struct PreScoreState(Vec<i64>);

/// The plugin with its `NodeResourcesBalancedAllocationArgs`.
pub struct BalancedAllocation {
    resources: Vec<ResourceSpec>,
}

impl Default for BalancedAllocation {
    /// Upstream's v1 default: cpu and memory, weight 1.
    fn default() -> Self {
        BalancedAllocation {
            resources: default_resources(),
        }
    }
}

impl BalancedAllocation {
    /// From `NodeResourcesBalancedAllocationArgs` (`resources`).
    pub fn from_args(args: Option<&Value>) -> Result<BalancedAllocation, String> {
        let mut pl = BalancedAllocation::default();
        if let Some(resources) = arg::<Vec<ResourceSpec>>(args, "resources")?
            && !resources.is_empty()
        {
            pl.resources = resources;
        }
        validate_resources("resources", &mut pl.resources)?;
        Ok(pl)
    }

    fn score_with(&self, node: &NodeInfo, requests: &[i64]) -> i64 {
        let (req, alloc) = requested_and_allocatable(node, &self.resources, requests, true);
        balanced(&req, &alloc)
    }
}

impl Plugin for BalancedAllocation {
    fn name(&self) -> &'static str {
        NAME
    }
    fn as_pre_score(&self) -> Option<&dyn PreScorePlugin> {
        Some(self)
    }
    fn as_score(&self) -> Option<&dyn ScorePlugin> {
        Some(self)
    }
}

impl PreScorePlugin for BalancedAllocation {
    fn pre_score(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        _: &[Arc<NodeInfo>],
        _: &Snapshot,
    ) -> Status {
        let list = pod_request_list(pod, &self.resources, true);
        if list.iter().all(|r| *r == 0) {
            // Best-effort pods would otherwise all pile onto the same balanced node.
            return Status::skip();
        }
        state.write(PRE_SCORE_KEY, PreScoreState(list));
        Status::success()
    }
}

impl ScorePlugin for BalancedAllocation {
    fn score(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        Ok(match state.read::<PreScoreState>(PRE_SCORE_KEY) {
            Some(PreScoreState(list)) => self.score_with(node, list),
            None => self.score_with(node, &pod_request_list(pod, &self.resources, true)),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::testing::{PodBuilder, node, snapshot};
    use serde_json::json;

    #[test]
    fn nodes_left_evenly_used_score_highest() {
        let pod = PodBuilder::new("p")
            .container("c", &[("cpu", "1"), ("memory", "1Gi")])
            .info();
        let heavy_cpu = PodBuilder::new("e").container("c", &[("cpu", "2")]).info();
        let cases = [
            // 1/4 cpu, 1Gi/4Gi memory: perfectly balanced
            ("balanced", node("a").cpu("4").memory("4Gi").info(&[]), 100),
            // 3/4 cpu, 1/4 memory: std 0.25
            (
                "cpu heavy",
                node("b").cpu("4").memory("4Gi").info(&[heavy_cpu]),
                75,
            ),
            // over-committed fractions are capped at 1
            (
                "overcommitted",
                node("c").cpu("1").memory("4Gi").info(&[]),
                62,
            ),
        ];
        let pl = BalancedAllocation::default();
        for (name, n, want) in cases {
            let mut state = CycleState::default();
            assert!(
                pl.pre_score(&mut state, &pod, &[], &snapshot(vec![]))
                    .is_success()
            );
            assert_eq!(pl.score(&state, &pod, &n).unwrap(), want, "{name}");
        }
    }

    #[test]
    fn best_effort_pods_skip_balanced_scoring() {
        let pod = PodBuilder::new("p").container("c", &[]).info();
        let got = BalancedAllocation::default().pre_score(
            &mut CycleState::default(),
            &pod,
            &[],
            &snapshot(vec![]),
        );
        assert!(got.is_skip());
    }

    #[test]
    fn a_bad_weight_is_an_error_naming_the_field() {
        let args = json!({"resources": [{"name": "cpu", "weight": -1}]});
        let err = BalancedAllocation::from_args(Some(&args)).err().unwrap();
        assert!(err.starts_with("resources[0].weight"), "{err}");
    }
}
