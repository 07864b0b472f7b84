//! The scoring shared by `NodeResourcesFit` and `NodeResourcesBalancedAllocation` (upstream's
//! `resourceAllocationScorer`): for each configured resource, what the node would have
//! requested with the pod on it and what it can allocate; and the scorers over those lists
//! (`LeastAllocated`, `MostAllocated`, `RequestedToCapacityRatio`, balanced).

use serde::Deserialize;

use crate::framework::{MAX_NODE_SCORE, NodeInfo, PodInfo};

/// A resource to score and its weight (upstream's `ResourceSpec`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct ResourceSpec {
    pub name: String,
    #[serde(default)]
    pub weight: i64,
}

/// Upstream's default scored resources: cpu and memory, weight 1 each.
pub fn default_resources() -> Vec<ResourceSpec> {
    ["cpu", "memory"]
        .iter()
        .map(|n| ResourceSpec {
            name: n.to_string(),
            weight: 1,
        })
        .collect()
}

/// Checks weights as upstream's validation (1..=100), after giving 0 the default of 1.
pub fn validate_resources(field: &str, resources: &mut [ResourceSpec]) -> Result<(), String> {
    for (i, r) in resources.iter_mut().enumerate() {
        if r.weight == 0 {
            r.weight = 1;
        }
        if !(1..=100).contains(&r.weight) {
            return Err(format!(
                "{field}[{i}].weight: Invalid value: {}: resource weight of {} not in valid range [1, 100]",
                r.weight, r.name
            ));
        }
    }
    Ok(())
}

/// Whether a resource is scored through the node's scalar resources (extended resources,
/// hugepages, attachable volumes): not requested by the pod means not scored.
fn is_scalar(name: &str) -> bool {
    !matches!(name, "cpu" | "memory" | "ephemeral-storage" | "pods")
}

/// The pod's request for each resource: with the scoring defaults for missing CPU and memory
/// unless `use_requested` (upstream's `calculatePodResourceRequestList`).
pub fn pod_request_list(
    pod: &PodInfo,
    resources: &[ResourceSpec],
    use_requested: bool,
) -> Vec<i64> {
    let r = if use_requested {
        &pod.requests
    } else {
        &pod.non_zero_requests
    };
    resources.iter().map(|s| r.get(&s.name)).collect()
}

/// Per-resource amounts for one node's score: on the stack for up to four resources (upstream
/// scores two by default), so scoring thousands of nodes per cycle allocates nothing.
#[derive(Debug, Clone)]
pub enum Amounts {
    Inline([i64; 4], usize),
    Heap(Vec<i64>),
}

impl Amounts {
    fn zeros(n: usize) -> Amounts {
        if n <= 4 {
            Amounts::Inline([0; 4], n)
        } else {
            Amounts::Heap(vec![0; n])
        }
    }
}

impl std::ops::Deref for Amounts {
    type Target = [i64];
    fn deref(&self) -> &[i64] {
        match self {
            Amounts::Inline(a, n) => &a[..*n],
            Amounts::Heap(v) => v,
        }
    }
}

impl std::ops::DerefMut for Amounts {
    fn deref_mut(&mut self) -> &mut [i64] {
        match self {
            Amounts::Inline(a, n) => &mut a[..*n],
            Amounts::Heap(v) => v,
        }
    }
}

/// For each resource, (requested including the pod, allocatable); (0, 0) for resources the
/// node does not have or scalar resources the pod does not ask for.
pub fn requested_and_allocatable(
    node: &NodeInfo,
    resources: &[ResourceSpec],
    pod_requests: &[i64],
    use_requested: bool,
) -> (Amounts, Amounts) {
    let node_requested = if use_requested {
        &node.requested
    } else {
        &node.non_zero_requested
    };
    let mut requested = Amounts::zeros(resources.len());
    let mut allocatable = Amounts::zeros(resources.len());
    for (i, spec) in resources.iter().enumerate() {
        let name = spec.name.as_str();
        let pod = pod_requests[i];
        let (alloc, req) = match name {
            _ if pod == 0 && is_scalar(name) => (0, 0),
            "cpu" | "memory" => (node.allocatable.get(name), node_requested.get(name) + pod),
            "ephemeral-storage" => (
                node.allocatable.ephemeral_storage,
                node.requested.ephemeral_storage + pod,
            ),
            _ => match node.allocatable.scalar.get(name) {
                Some(a) => (*a, node.requested.get(name) + pod),
                None => (0, 0),
            },
        };
        if alloc != 0 {
            allocatable[i] = alloc;
            requested[i] = req;
        }
    }
    (requested, allocatable)
}

/// Weighted mean of per-resource scores over resources the node has (integer division).
fn weighted(
    resources: &[ResourceSpec],
    requested: &[i64],
    allocatable: &[i64],
    per: impl Fn(i64, i64) -> i64,
) -> i64 {
    let (mut score, mut weights) = (0, 0);
    for i in 0..requested.len() {
        if allocatable[i] == 0 {
            continue;
        }
        score += per(requested[i], allocatable[i]) * resources[i].weight;
        weights += resources[i].weight;
    }
    if weights == 0 { 0 } else { score / weights }
}

/// `LeastAllocated`: the free fraction, weighted.
pub fn least_allocated(resources: &[ResourceSpec], requested: &[i64], allocatable: &[i64]) -> i64 {
    weighted(resources, requested, allocatable, |req, cap| {
        if cap == 0 || req > cap {
            0
        } else {
            (cap - req) * MAX_NODE_SCORE / cap
        }
    })
}

/// `MostAllocated`: the used fraction (capped at full), weighted.
pub fn most_allocated(resources: &[ResourceSpec], requested: &[i64], allocatable: &[i64]) -> i64 {
    weighted(resources, requested, allocatable, |req, cap| {
        if cap == 0 {
            0
        } else {
            req.min(cap) * MAX_NODE_SCORE / cap
        }
    })
}

/// A point of the `RequestedToCapacityRatio` shape: utilization 0..=100, score 0..=10.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct ShapePoint {
    pub utilization: i64,
    pub score: i64,
}

/// Upstream's `MaxCustomPriorityScore`: shape scores go up to this and are scaled to 100.
pub const MAX_CUSTOM_PRIORITY_SCORE: i64 = 10;

/// Checks a shape as upstream: at least one point, utilization strictly increasing in
/// 0..=100, score in 0..=10.
pub fn validate_shape(field: &str, shape: &[ShapePoint]) -> Result<(), String> {
    if shape.is_empty() {
        return Err(format!(
            "{field}: Required value: at least one point must be specified"
        ));
    }
    for (i, p) in shape.iter().enumerate() {
        if !(0..=100).contains(&p.utilization) {
            return Err(format!(
                "{field}[{i}].utilization: Invalid value: {}: not in valid range [0, 100]",
                p.utilization
            ));
        }
        if i > 0 && p.utilization <= shape[i - 1].utilization {
            return Err(format!(
                "{field}[{i}].utilization: Invalid value: {}: utilization values must be sorted in increasing order",
                p.utilization
            ));
        }
        if !(0..=MAX_CUSTOM_PRIORITY_SCORE).contains(&p.score) {
            return Err(format!(
                "{field}[{i}].score: Invalid value: {}: not in valid range [0, 10]",
                p.score
            ));
        }
    }
    Ok(())
}

/// The broken linear function through the shape's points (scores already scaled to 100).
fn broken_linear(shape: &[ShapePoint], p: i64) -> i64 {
    for (i, pt) in shape.iter().enumerate() {
        if p <= pt.utilization {
            if i == 0 {
                return pt.score;
            }
            let prev = &shape[i - 1];
            return prev.score
                + (pt.score - prev.score) * (p - prev.utilization)
                    / (pt.utilization - prev.utilization);
        }
    }
    shape.last().map_or(0, |p| p.score)
}

/// `RequestedToCapacityRatio`: each resource's utilization through the shape; resources that
/// score 0 do not count towards the weights; the mean is rounded.
pub fn requested_to_capacity_ratio(
    resources: &[ResourceSpec],
    shape: &[ShapePoint],
    requested: &[i64],
    allocatable: &[i64],
) -> i64 {
    let scaled: Vec<ShapePoint> = shape
        .iter()
        .map(|p| ShapePoint {
            utilization: p.utilization,
            score: p.score * (MAX_NODE_SCORE / MAX_CUSTOM_PRIORITY_SCORE),
        })
        .collect();
    let (mut score, mut weights) = (0i64, 0i64);
    for i in 0..requested.len() {
        let (req, cap) = (requested[i], allocatable[i]);
        if cap == 0 {
            continue;
        }
        let s = if req > cap {
            broken_linear(&scaled, 100)
        } else {
            broken_linear(&scaled, req * 100 / cap)
        };
        if s > 0 {
            score += s * resources[i].weight;
            weights += resources[i].weight;
        }
    }
    if weights == 0 {
        0
    } else {
        (score as f64 / weights as f64).round() as i64
    }
}

/// Balanced allocation: 100 × (1 − the standard deviation of the used fractions).
pub fn balanced(requested: &[i64], allocatable: &[i64]) -> i64 {
    let fractions = || {
        requested
            .iter()
            .zip(allocatable)
            .filter(|(_, a)| **a != 0)
            .map(|(r, a)| (*r as f64 / *a as f64).min(1.0))
    };
    let n = fractions().count();
    let std = match n {
        0 | 1 => 0.0,
        2 => {
            let mut f = fractions();
            let (a, b) = (f.next().unwrap_or(0.0), f.next().unwrap_or(0.0));
            ((a - b) / 2.0).abs()
        }
        n => {
            let mean = fractions().sum::<f64>() / n as f64;
            let var = fractions().map(|f| (f - mean) * (f - mean)).sum::<f64>() / n as f64;
            var.sqrt()
        }
    };
    ((1.0 - std) * MAX_NODE_SCORE as f64) as i64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shape_is_interpolated_between_points() {
        let shape = [
            ShapePoint {
                utilization: 0,
                score: 0,
            },
            ShapePoint {
                utilization: 50,
                score: 50,
            },
            ShapePoint {
                utilization: 100,
                score: 100,
            },
        ];
        for (p, want) in [(0, 0), (25, 25), (50, 50), (75, 75), (100, 100)] {
            assert_eq!(broken_linear(&shape, p), want, "{p}");
        }
    }

    #[test]
    fn balanced_uses_half_the_difference_for_two_resources_and_the_std_beyond() {
        assert_eq!(balanced(&[50, 50], &[100, 100]), 100);
        assert_eq!(balanced(&[20, 60], &[100, 100]), 80);
        // fractions 0.2, 0.4, 0.6: std = sqrt(0.08/3) ≈ 0.1633
        assert_eq!(balanced(&[2, 4, 6], &[10, 10, 10]), 83);
        // a resource the node lacks is left out
        assert_eq!(balanced(&[20, 0], &[100, 0]), 100);
    }
}
