//! In-place pod resize (KEP-1287, upstream 1.33), without I/O: whether a pod's new container
//! resources can be allocated ([`check`], upstream's `canResizePod`), what a resize the
//! kubelet allocated does to the running containers and the pod cgroup, in upstream's order
//! ([`plan`], upstream's `computePodResizeAction` and `doPodResizeAction`), the resources a
//! container status reports, and the `ResizeCompleted` event's message. The I/O is
//! [`crate::pod_resize`]'s.

use std::collections::BTreeSet;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{
    Container, ContainerStatus as ApiContainerStatus, Node, Pod, ResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as K8sQuantity;
use serde::Serialize;
use skiff_apimachinery::quantity::{Format, Quantity, format_canonical};
use skiff_component_helpers::resources::{node_allocatable, pod_requests};

use crate::admission;
use crate::allocation::{REASON_DEFERRED, REASON_INFEASIBLE, canonical};
use crate::cgroups::resources::ResourceConfig;
use crate::cri::{ContainerResources, LinuxContainerResources};
use crate::eviction::Condition;
use crate::static_pods::MIRROR_ANNOTATION;

/// Why a resize is not allocated yet: `PodResizePending`'s reason and message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pending {
    /// [`REASON_DEFERRED`]: it may fit later, and is judged again at later syncs and when
    /// other pods leave; [`REASON_INFEASIBLE`]: it cannot fit this node.
    pub reason: &'static str,
    pub message: String,
}

/// Whether `desired` (the pod with its new resources) can have them, beside the node's other
/// active pods as allocated (`others`), as upstream's `canResizePod`: static pods are never
/// resized; requests beyond the node's allocatable are infeasible ("Node didn't have enough
/// capacity: …", memory named first); requests that do not fit beside the other pods now,
/// or a node under pressure, defer the resize with admission's message.
pub fn check(
    desired: &Pod,
    node: &Node,
    others: &[Arc<Pod>],
    pressure: &BTreeSet<Condition>,
) -> Result<(), Pending> {
    let infeasible = |message: String| Pending {
        reason: REASON_INFEASIBLE,
        message,
    };
    let mirror = desired.metadata.annotations.as_ref();
    if mirror.is_some_and(|a| a.contains_key(MIRROR_ANNOTATION)) {
        return Err(infeasible(
            "In-place resize of static-pods is not supported".into(),
        ));
    }
    let allocatable = node_allocatable(node);
    let requests = pod_requests(desired, |r| r);
    let (cpu, memory) = (requests.milli_cpu, requests.memory);
    if memory > allocatable.memory {
        return Err(infeasible(format!(
            "Node didn't have enough capacity: memory, requested: {memory}, capacity: {}",
            allocatable.memory
        )));
    }
    if cpu > allocatable.milli_cpu {
        return Err(infeasible(format!(
            "Node didn't have enough capacity: cpu, requested: {cpu}, capacity: {}",
            allocatable.milli_cpu
        )));
    }
    let uid = desired.metadata.uid.as_deref();
    let others: Vec<Arc<Pod>> = others
        .iter()
        .filter(|p| p.metadata.uid.as_deref() != uid)
        .cloned()
        .collect();
    admission::check_pressure(desired, pressure)
        .and_then(|()| admission::check(desired, node, &others))
        .map_err(|r| Pending {
            reason: REASON_DEFERRED,
            message: r.message,
        })
}

/// The two resources a resize changes in place, in the order upstream resizes them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resource {
    Memory,
    Cpu,
}

/// One step of a resize, taken in order; the first that fails stops the rest (retried at the
/// next sync).
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// Stop the container (a `Killing` event with this message) and start it anew with its
    /// allocated resources, for a resize policy of `RestartContainer`.
    Restart { container: String, message: String },
    /// Set these values of the pod cgroup.
    PodCgroup(ResourceConfig),
    /// Set the container's resources to these (one resource's new values, the other's as
    /// they are), with CRI `UpdateContainerResources`.
    Update {
        container: String,
        resources: ResourceRequirements,
    },
}

/// What the runtime has of one resizable container.
#[derive(Debug, Clone)]
pub struct Running<'a> {
    /// Its allocated spec.
    pub container: &'a Container,
    /// What it was created or last updated with.
    pub actuated: ResourceRequirements,
}

/// A container's CPU request and limit (millicores) and memory request and limit (bytes), as
/// upstream's `containerResources`; 0 where unset.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Amounts {
    cpu_request: i64,
    cpu_limit: i64,
    memory_request: i64,
    memory_limit: i64,
}

fn amount(list: Option<&std::collections::BTreeMap<String, K8sQuantity>>, name: &str) -> i64 {
    let q = list.and_then(|l| l.get(name));
    let q = q.and_then(|q| Quantity::parse(&q.0).ok());
    q.map_or(0, |q| {
        if name == "cpu" {
            q.milli_value()
        } else {
            q.value()
        }
    })
}

impl Amounts {
    fn of(r: &ResourceRequirements) -> Amounts {
        let (requests, limits) = (r.requests.as_ref(), r.limits.as_ref());
        Amounts {
            cpu_request: amount(requests, "cpu"),
            cpu_limit: amount(limits, "cpu"),
            memory_request: amount(requests, "memory"),
            memory_limit: amount(limits, "memory"),
        }
    }
}

/// `current` with `resource`'s request and limit taken from `desired`.
pub fn with_resource(
    current: &ResourceRequirements,
    desired: &ResourceRequirements,
    resource: Resource,
) -> ResourceRequirements {
    let name = match resource {
        Resource::Memory => "memory",
        Resource::Cpu => "cpu",
    };
    let merge = |cur: Option<&std::collections::BTreeMap<String, K8sQuantity>>,
                 want: Option<&std::collections::BTreeMap<String, K8sQuantity>>| {
        let mut out = cur.cloned().unwrap_or_default();
        match want.and_then(|w| w.get(name)) {
            Some(q) => out.insert(name.to_string(), q.clone()),
            None => out.remove(name),
        };
        (!out.is_empty()).then_some(out)
    };
    ResourceRequirements {
        requests: merge(current.requests.as_ref(), desired.requests.as_ref()),
        limits: merge(current.limits.as_ref(), desired.limits.as_ref()),
        claims: None,
    }
}

/// Whether the container's resize policy restarts it when `resource` changes (the default is
/// `NotRequired`).
fn restarts_for(container: &Container, resource: &str) -> bool {
    container
        .resize_policy
        .iter()
        .flatten()
        .any(|p| p.resource_name == resource && p.restart_policy == "RestartContainer")
}

/// The steps that bring the running containers and the pod cgroup (`pod_current`, as set; the
/// allocated pod's `pod_desired`) to the allocated resources, as upstream's
/// `computePodResizeAction` and `doPodResizeAction`: containers whose policy asks for a
/// restart on a changed resource are restarted; then memory, then CPU: a limit that grows is
/// set on the pod cgroup first, a CPU request that shrinks too; then the containers, those
/// shrinking before those growing; then a limit that shrinks and a CPU request that grows on
/// the pod cgroup. A pod limit that is not set (a container without one) is left as it is.
pub fn plan(
    running: &[Running<'_>],
    pod_current: &ResourceConfig,
    pod_desired: &ResourceConfig,
) -> Vec<Step> {
    let mut steps = Vec::new();
    let mut updates: [Vec<(String, ResourceRequirements)>; 2] = Default::default();
    let mut restarted = false;
    for r in running {
        let desired = canonical(r.container.resources.as_ref());
        let (want, have) = (Amounts::of(&desired), Amounts::of(&r.actuated));
        let changed = |resource: &str| match resource {
            "cpu" => (
                want.cpu_limit != have.cpu_limit,
                want.cpu_request != have.cpu_request,
            ),
            _ => (
                want.memory_limit != have.memory_limit,
                want.memory_request != have.memory_request,
            ),
        };
        let restart = ["memory", "cpu"].iter().any(|res| {
            let (limit, request) = changed(res);
            (limit || request) && restarts_for(r.container, res)
        });
        if restart {
            restarted = true;
            steps.push(Step::Restart {
                container: r.container.name.clone(),
                message: format!("Container {} resize requires restart", r.container.name),
            });
            continue;
        }
        // per resource, the limit's change decides the order if the limit changes, else the
        // request's; decreases go first (upstream's markContainerForUpdate)
        let moves = [
            (
                want.memory_limit,
                have.memory_limit,
                want.memory_request,
                have.memory_request,
            ),
            (
                want.cpu_limit,
                have.cpu_limit,
                want.cpu_request,
                have.cpu_request,
            ),
        ];
        for (queue, (w_lim, h_lim, w_req, h_req)) in updates.iter_mut().zip(moves) {
            let (w, h) = if w_lim != h_lim {
                (w_lim, h_lim)
            } else {
                (w_req, h_req)
            };
            let entry = (r.container.name.clone(), desired.clone());
            match w.cmp(&h) {
                std::cmp::Ordering::Less => queue.insert(0, entry),
                std::cmp::Ordering::Greater => queue.push(entry),
                std::cmp::Ordering::Equal => {}
            }
        }
    }
    // each update sets one resource, the other as the container has it by then
    let mut current: std::collections::HashMap<String, ResourceRequirements> = running
        .iter()
        .map(|r| (r.container.name.clone(), r.actuated.clone()))
        .collect();
    for (i, resource) in [Resource::Memory, Resource::Cpu].into_iter().enumerate() {
        let (limit_now, limit_wanted, request_now, request_wanted) = match resource {
            Resource::Memory => (
                pod_current.memory,
                pod_desired.memory.or(pod_current.memory),
                None,
                None,
            ),
            Resource::Cpu => (
                pod_current.cpu_quota,
                pod_desired.cpu_quota.or(pod_current.cpu_quota),
                pod_current.cpu_shares.map(|s| s as i64),
                pod_desired.cpu_shares.map(|s| s as i64),
            ),
        };
        let pod_changes = limit_now != limit_wanted || request_now != request_wanted;
        if updates[i].is_empty() && !pod_changes && !restarted {
            continue;
        }
        // an unlimited pod (no quota: -1 or unset) counts as the largest
        let unlimited = |v: Option<i64>| v.filter(|v| *v > 0).unwrap_or(i64::MAX);
        let (lim_now, lim_want) = (unlimited(limit_now), unlimited(limit_wanted));
        let limit_step = || match resource {
            Resource::Memory => ResourceConfig {
                memory: limit_wanted,
                ..Default::default()
            },
            Resource::Cpu => ResourceConfig {
                cpu_quota: limit_wanted,
                cpu_period: pod_desired.cpu_period.or(pod_current.cpu_period),
                ..Default::default()
            },
        };
        let request_step = || ResourceConfig {
            cpu_shares: pod_desired.cpu_shares,
            ..Default::default()
        };
        if lim_want > lim_now {
            steps.push(Step::PodCgroup(limit_step()));
        }
        if request_wanted < request_now {
            steps.push(Step::PodCgroup(request_step()));
        }
        for (name, desired) in &updates[i] {
            let now = current.get(name).cloned().unwrap_or_default();
            let resources = with_resource(&now, desired, resource);
            current.insert(name.clone(), resources.clone());
            steps.push(Step::Update {
                container: name.clone(),
                resources,
            });
        }
        if lim_want < lim_now {
            steps.push(Step::PodCgroup(limit_step()));
        }
        if request_wanted > request_now {
            steps.push(Step::PodCgroup(request_step()));
        }
    }
    steps
}

/// The resources a running container's status reports (upstream's
/// `convertContainerStatusResources`): the allocated ones, with the CPU limit, CPU request and
/// memory limit the runtime reports in place of theirs; where the runtime reports nothing, the
/// value the last status showed for the same running container.
pub fn status_resources(
    allocated: &ResourceRequirements,
    running: bool,
    reported: Option<&ContainerResources>,
    old: Option<&ApiContainerStatus>,
    container_id: Option<&str>,
) -> ResourceRequirements {
    let mut out = allocated.clone();
    if !running {
        return out;
    }
    let linux = reported.and_then(|r| r.linux.as_ref());
    let old = old.filter(|o| {
        o.container_id.as_deref() == container_id
            && o.state.as_ref().is_some_and(|s| s.running.is_some())
    });
    let old_resources = old.and_then(|o| o.resources.as_ref());
    let keep_old = |list: &mut std::collections::BTreeMap<String, K8sQuantity>,
                    old: Option<&std::collections::BTreeMap<String, K8sQuantity>>,
                    name: &str| {
        if let Some(q) = old.and_then(|o| o.get(name)) {
            list.insert(name.to_string(), q.clone());
        }
    };
    let milli = |m: i64| {
        K8sQuantity(format_canonical(
            i128::from(m) * 1_000_000,
            Format::DecimalSI,
        ))
    };
    if let Some(limits) = out.limits.as_mut() {
        let cpu = linux.filter(|l| l.cpu_period > 0 && l.cpu_quota > 0);
        match cpu
            .map(|l| l.cpu_quota * 1000 / l.cpu_period)
            .filter(|m| *m > 0)
        {
            Some(m) => {
                limits.insert("cpu".into(), milli(m));
            }
            None => keep_old(limits, old_resources.and_then(|r| r.limits.as_ref()), "cpu"),
        }
        match linux.map(|l| l.memory_limit_in_bytes).filter(|m| *m > 0) {
            Some(bytes) => {
                let q = format_canonical(i128::from(bytes) * 1_000_000_000, Format::BinarySI);
                limits.insert("memory".into(), K8sQuantity(q));
            }
            None => keep_old(
                limits,
                old_resources.and_then(|r| r.limits.as_ref()),
                "memory",
            ),
        }
    }
    if let Some(requests) = out.requests.as_mut() {
        // upstream's sharesToMilliCPU: the minimum shares are no request
        let shares = linux.map(|l| l.cpu_shares).filter(|s| *s >= 2);
        match shares.map(|s| (s * 1000 + 1023) / 1024).filter(|m| *m > 0) {
            Some(m) => {
                requests.insert("cpu".into(), milli(m));
            }
            None => keep_old(
                requests,
                old_resources.and_then(|r| r.requests.as_ref()),
                "cpu",
            ),
        }
    }
    out
}

/// A container's CRI resources for `resources` (its allocated ones, or a resize's step).
pub fn linux_resources(
    pod: &Pod,
    container: &Container,
    resources: &ResourceRequirements,
    memory_capacity: u64,
) -> LinuxContainerResources {
    let mut c = container.clone();
    c.resources = Some(resources.clone());
    let mut out = crate::config::linux_resources(&c);
    out.oom_score_adj = crate::qos::oom_score_adj(pod, &c, memory_capacity);
    out
}

/// The `ResizeCompleted` event's message (upstream's `podResizeCompletionMsg`): "Pod resize
/// completed: " and the allocated resources of the pod's containers as JSON.
pub fn completed_message(pod: &Pod) -> String {
    #[derive(Serialize)]
    struct Allocation<'a> {
        name: &'a str,
        resources: ResourceRequirements,
    }
    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    struct Summary<'a> {
        #[serde(skip_serializing_if = "Vec::is_empty")]
        init_containers: Vec<Allocation<'a>>,
        #[serde(skip_serializing_if = "Vec::is_empty")]
        containers: Vec<Allocation<'a>>,
    }
    fn of(c: &Container) -> Allocation<'_> {
        Allocation {
            name: &c.name,
            resources: canonical(c.resources.as_ref()),
        }
    }
    let spec = pod.spec.as_ref();
    let summary = Summary {
        init_containers: spec
            .into_iter()
            .flat_map(|s| s.init_containers.iter().flatten())
            .map(of)
            .collect(),
        containers: spec
            .into_iter()
            .flat_map(|s| &s.containers)
            .map(of)
            .collect(),
    };
    match serde_json::to_string(&summary) {
        Ok(json) => format!("Pod resize completed: {json}"),
        Err(_) => "Pod resize completed".into(),
    }
}

#[cfg(test)]
#[path = "resize_tests.rs"]
mod tests;
