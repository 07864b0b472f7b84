//! The values a cgroup gets, without I/O, as upstream's kubelet computes them
//! (`pkg/kubelet/cm/helpers_linux.go`): CPU shares and CFS quota from millicores, a pod's
//! cgroup from its requests and limits with its overhead (`ResourceConfigForPod`), the
//! Burstable class's shares from its pods' CPU requests, and the `kubepods` cgroup from the
//! node's capacity less what is reserved.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, Pod};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as K8sQuantity;
use skiff_apimachinery::quantity::Quantity;
use skiff_component_helpers::resources::{Resource, pod_requests};

/// The fewest CPU shares a cgroup gets (the kernel's minimum; also BestEffort's).
pub const MIN_SHARES: u64 = 2;
/// The most CPU shares the kernel takes.
pub const MAX_SHARES: u64 = 262_144;
const SHARES_PER_CPU: i64 = 1024;
/// The CFS period (upstream's `cpuCFSQuotaPeriod` default, 100 ms), in microseconds.
pub const QUOTA_PERIOD_US: u64 = 100_000;
/// The smallest CFS quota (1 ms), in microseconds.
const MIN_QUOTA_US: i64 = 1000;

/// What one cgroup is set to (upstream's `ResourceConfig`); `None` leaves a value as it is.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResourceConfig {
    pub cpu_shares: Option<u64>,
    /// Microseconds per period; -1 is no limit.
    pub cpu_quota: Option<i64>,
    pub cpu_period: Option<u64>,
    /// Bytes; -1 is no limit.
    pub memory: Option<i64>,
    /// Processes; -1 is no limit.
    pub pids_limit: Option<i64>,
}

/// Upstream's QoS classes, from `status.qosClass`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QosClass {
    Guaranteed,
    Burstable,
    BestEffort,
}

impl QosClass {
    /// The class the API server recorded in `status.qosClass` when the pod was created; a pod
    /// without one (a static pod's file) gets it computed as upstream's `ComputePodQOS`.
    pub fn of(pod: &Pod) -> QosClass {
        match pod.status.as_ref().and_then(|s| s.qos_class.as_deref()) {
            Some("Guaranteed") => QosClass::Guaranteed,
            Some("Burstable") => QosClass::Burstable,
            Some("BestEffort") => QosClass::BestEffort,
            _ => compute_qos(pod),
        }
    }
}

fn amount(list: Option<&BTreeMap<String, K8sQuantity>>, resource: &str) -> Option<i64> {
    let q = Quantity::parse(&list?.get(resource)?.0).ok()?;
    let v = if resource == "cpu" {
        q.milli_value()
    } else {
        q.value()
    };
    (v != 0).then_some(v)
}

/// Upstream's `ComputePodQOS`: BestEffort without any CPU or memory request or limit;
/// Guaranteed when every container limits both and requests what it limits; else Burstable.
fn compute_qos(pod: &Pod) -> QosClass {
    let spec = pod.spec.clone().unwrap_or_default();
    let containers: Vec<&Container> = spec
        .containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
        .collect();
    let (mut any, mut guaranteed) = (false, true);
    for c in containers {
        let res = c.resources.clone().unwrap_or_default();
        for r in ["cpu", "memory"] {
            let limit = amount(res.limits.as_ref(), r);
            let request = amount(res.requests.as_ref(), r).or(limit);
            any |= limit.is_some() || request.is_some();
            guaranteed &= limit.is_some() && request == limit;
        }
    }
    if !any {
        QosClass::BestEffort
    } else if guaranteed {
        QosClass::Guaranteed
    } else {
        QosClass::Burstable
    }
}

/// Upstream's `MilliCPUToShares`: 1024 shares a CPU, within the kernel's bounds; no request is
/// the minimum.
pub fn milli_cpu_to_shares(milli_cpu: i64) -> u64 {
    if milli_cpu <= 0 {
        return MIN_SHARES;
    }
    ((milli_cpu * SHARES_PER_CPU / 1000) as u64).clamp(MIN_SHARES, MAX_SHARES)
}

/// Upstream's `MilliCPUToQuota`: the CFS quota of `milli_cpu` over `period` microseconds, at
/// least 1 ms; 0 (no quota) for no limit.
pub fn milli_cpu_to_quota(milli_cpu: i64, period: u64) -> i64 {
    if milli_cpu <= 0 {
        return 0;
    }
    (milli_cpu * period as i64 / 1000).max(MIN_QUOTA_US)
}

/// cgroup v2's `cpu.weight` for v1 shares (runc's `ConvertCPUSharesToCgroupV2Value`, which
/// upstream's kubelet uses): [2, 262144] mapped linearly onto [1, 10000].
pub fn shares_to_weight(shares: u64) -> u64 {
    if shares == 0 {
        return 0;
    }
    1 + (shares.saturating_sub(2) * 9999) / 262_142
}

/// v1 shares for a v2 `cpu.weight`, the inverse of [`shares_to_weight`] (upstream's
/// `CpuWeightToCpuShares`).
pub fn weight_to_shares(weight: u64) -> u64 {
    if weight == 0 {
        return 0;
    }
    2 + ((weight - 1) * 262_142) / 9999
}

/// A pod's limits, as upstream's `PodLimits`: the containers' sum, raised to what each init
/// container needs while it runs (itself and the sidecars started before it), plus the
/// overhead on the resources that have a limit; and whether every container (init containers
/// counted with the sidecars before them) declared a CPU and a memory limit.
fn pod_limits(pod: &Pod) -> (Resource, bool, bool) {
    let spec = pod.spec.clone().unwrap_or_default();
    let limits_of = |c: &Container| {
        Resource::from_list(
            &c.resources
                .as_ref()
                .and_then(|r| r.limits.clone())
                .unwrap_or_default(),
        )
    };
    let (mut cpu_declared, mut memory_declared) = (true, true);
    let mut declared = |r: &Resource| {
        cpu_declared &= r.milli_cpu != 0;
        memory_declared &= r.memory != 0;
    };
    let mut total = Resource::default();
    for c in &spec.containers {
        let r = limits_of(c);
        declared(&r);
        total.add(&r);
    }
    let (mut sidecars, mut init_peak) = (Resource::default(), Resource::default());
    for c in spec.init_containers.iter().flatten() {
        let r = limits_of(c);
        let while_running = if c.restart_policy.as_deref() == Some("Always") {
            total.add(&r);
            sidecars.add(&r);
            sidecars.clone()
        } else {
            let mut at_start = r;
            at_start.add(&sidecars);
            at_start
        };
        declared(&while_running);
        init_peak.set_max(&while_running);
    }
    total.set_max(&init_peak);
    if let Some(overhead) = &spec.overhead {
        let overhead = Resource::from_list(overhead);
        if total.milli_cpu != 0 {
            total.milli_cpu += overhead.milli_cpu;
        }
        if total.memory != 0 {
            total.memory += overhead.memory;
        }
    }
    (total, cpu_declared, memory_declared)
}

/// The CPU a pod requests, in millicores, overhead included (what its QoS class's shares
/// count).
pub fn pod_cpu_request(pod: &Pod) -> i64 {
    pod_requests(pod, |r| r).milli_cpu
}

/// A pod's cgroup, as upstream's `ResourceConfigForPod` with CFS quotas enforced: shares from
/// its requests; a Guaranteed pod also its CPU quota and memory limit, a Burstable pod each of
/// them only when every container declared that limit, a BestEffort pod the minimum shares;
/// and `podPidsLimit` when it is positive.
pub fn pod_resource_config(pod: &Pod, pod_pids_limit: i64) -> ResourceConfig {
    let (limits, cpu_declared, memory_declared) = pod_limits(pod);
    let shares = milli_cpu_to_shares(pod_cpu_request(pod));
    let quota = milli_cpu_to_quota(limits.milli_cpu, QUOTA_PERIOD_US);
    let mut config = match QosClass::of(pod) {
        QosClass::Guaranteed => ResourceConfig {
            cpu_shares: Some(shares),
            cpu_quota: Some(quota),
            cpu_period: Some(QUOTA_PERIOD_US),
            memory: Some(limits.memory),
            pids_limit: None,
        },
        QosClass::Burstable => ResourceConfig {
            cpu_shares: Some(shares),
            cpu_quota: cpu_declared.then_some(quota),
            cpu_period: cpu_declared.then_some(QUOTA_PERIOD_US),
            memory: memory_declared.then_some(limits.memory),
            pids_limit: None,
        },
        QosClass::BestEffort => ResourceConfig {
            cpu_shares: Some(MIN_SHARES),
            ..Default::default()
        },
    };
    if pod_pids_limit > 0 {
        config.pids_limit = Some(pod_pids_limit);
    }
    config
}

/// The `kubepods` cgroup, as upstream's `getCgroupConfig` of the node's allocatable when
/// `enforceNodeAllocatable` has `pods` (its default): capacity less `kubeReserved` and
/// `systemReserved` (not the eviction thresholds, so that eviction acts before the cgroup's
/// limit) as shares, memory limit and pids limit. `capacity` holds `cpu`, `memory` and `pid`
/// (the host's process limit); `reserved` is what [`crate::kubelet_config`] sums.
pub fn node_allocatable_config(
    capacity: &BTreeMap<String, i64>,
    reserved: &BTreeMap<String, Quantity>,
) -> ResourceConfig {
    let left = |resource: &str| {
        let have = capacity.get(resource)?;
        let keep = reserved.get(resource).map_or(0, |q| {
            if resource == "cpu" {
                q.milli_value()
            } else {
                q.value()
            }
        });
        Some((have - keep).max(0))
    };
    ResourceConfig {
        cpu_shares: left("cpu").map(milli_cpu_to_shares),
        memory: left("memory"),
        pids_limit: left("pid"),
        ..Default::default()
    }
}
