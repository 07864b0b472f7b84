//! Which pod goes first, as upstream's `helpers.go` ranks them: for memory, pods using more
//! than they request, then lower priority, then usage above request; for disk the same with
//! ephemeral storage; for pids, lower priority, then more processes. A pod with no usage
//! figures goes first. Critical pods (static and mirror pods, priority at or above
//! `system-cluster-critical`'s) are never evicted. Also the eviction message, with
//! upstream's wording.

use std::cmp::Ordering;
use std::collections::HashMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use skiff_apimachinery::quantity::{Format, Quantity, format_canonical};
use skiff_component_helpers::resources::pod_requests;

use super::signals::PodUsage;
use crate::kubelet_config::Signal;
use crate::static_pods::MIRROR_ANNOTATION;

/// Priorities from here up are system-critical (upstream's `SystemCriticalPriority`).
const SYSTEM_CRITICAL_PRIORITY: i32 = 2_000_000_000;

/// The resource a signal is about (upstream's `signalToResource`).
pub fn resource_of(signal: Signal) -> &'static str {
    match signal {
        Signal::MemoryAvailable | Signal::AllocatableMemoryAvailable => "memory",
        Signal::NodeFsAvailable | Signal::ImageFsAvailable => "ephemeral-storage",
        Signal::NodeFsInodesFree | Signal::ImageFsInodesFree => "inodes",
        Signal::PidAvailable => "pids",
    }
}

/// Upstream's `IsCriticalPod`: static pods (here, their mirror pods) and pods of
/// system-critical priority, which eviction spares and pressure admits.
pub fn is_critical(pod: &Pod) -> bool {
    let mirror = pod
        .metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(MIRROR_ANNOTATION));
    mirror || priority(pod) >= SYSTEM_CRITICAL_PRIORITY
}

fn priority(pod: &Pod) -> i32 {
    pod.spec.as_ref().and_then(|s| s.priority).unwrap_or(0)
}

fn uid(pod: &Pod) -> &str {
    pod.metadata.uid.as_deref().unwrap_or_default()
}

/// The pods that may be evicted to reclaim what `signal` measures, first to go first.
pub fn rank(signal: Signal, pods: &[Arc<Pod>], usage: &HashMap<String, PodUsage>) -> Vec<Arc<Pod>> {
    let mut ranked: Vec<Arc<Pod>> = pods.iter().filter(|p| !is_critical(p)).cloned().collect();
    let found = |p: &Pod| usage.get(uid(p));
    // pods without figures first (upstream's `cmpBool(!p1Found, !p2Found)`)
    let unknown_first = |a: &Pod, b: &Pod| found(b).is_none().cmp(&found(a).is_none());
    let by_priority = |a: &Pod, b: &Pod| priority(a).cmp(&priority(b));
    match resource_of(signal) {
        "memory" | "ephemeral-storage" => {
            let memory = resource_of(signal) == "memory";
            // usage above requests (below them: negative)
            let over = |p: &Pod| {
                let u = found(p)?;
                let requests = pod_requests(p, |r| r);
                let (used, requested) = if memory {
                    (u.memory(), requests.memory)
                } else {
                    (u.ephemeral_storage(), requests.ephemeral_storage)
                };
                Some(i128::from(used) - i128::from(requested))
            };
            ranked.sort_by(|a, b| {
                unknown_first(a, b)
                    .then_with(|| {
                        // those using more than they request first
                        let exceeds = |p: &Pod| over(p).is_some_and(|o| o > 0);
                        exceeds(b).cmp(&exceeds(a))
                    })
                    .then_with(|| by_priority(a, b))
                    .then_with(|| over(b).cmp(&over(a)))
            });
        }
        "pids" => {
            let processes = |p: &Pod| found(p).and_then(|u| u.processes).unwrap_or(0);
            ranked.sort_by(|a, b| {
                unknown_first(a, b)
                    .then_with(|| by_priority(a, b))
                    .then_with(|| processes(b).cmp(&processes(a)))
            });
        }
        // inodes: upstream ranks by disk usage of inodes, which containerd does not report
        // per container; by priority alone
        _ => ranked.sort_by(|a, b| unknown_first(a, b).then_with(|| by_priority(a, b))),
    }
    ranked
}

/// How upstream prints an amount of `resource` it built itself (`resource.NewQuantity`):
/// bytes in binary units, inodes and pids as decimals.
pub fn format_amount(resource: &str, amount: i64) -> String {
    let format = match resource {
        "memory" | "ephemeral-storage" => Format::BinarySI,
        _ => Format::DecimalSI,
    };
    format_canonical(i128::from(amount) * 1_000_000_000, format)
}

/// A threshold's quantity as upstream prints it: a value given in the configuration keeps its
/// form (`100Mi`, `500M`, `1k`), a percentage becomes bytes in binary units.
pub fn format_threshold(amount: i64, from_percentage: bool) -> String {
    let format = if from_percentage || amount % 1024 == 0 || amount % 1000 != 0 {
        Format::BinarySI
    } else {
        Format::DecimalSI
    };
    format_canonical(i128::from(amount) * 1_000_000_000, format)
}

/// Upstream's eviction message: "The node was low on resource: memory. Threshold quantity:
/// 100Mi, available: 80Mi. Container c was using 200Mi, request is 0, has larger consumption
/// of memory. " — a sentence for each container using more than it requests.
pub fn eviction_message(
    resource: &str,
    pod: &Pod,
    usage: Option<&PodUsage>,
    threshold: Option<(String, String)>,
) -> String {
    let mut message = format!("The node was low on resource: {resource}. ");
    if let Some((quantity, available)) = threshold {
        message += &format!("Threshold quantity: {quantity}, available: {available}. ");
    }
    let Some(usage) = usage else { return message };
    let spec = pod.spec.clone().unwrap_or_default();
    for c in &usage.containers {
        let Some(container) = spec.containers.iter().find(|s| s.name == c.name) else {
            continue;
        };
        let used = match resource {
            "memory" => c.memory,
            "ephemeral-storage" => c.rootfs.zip(c.logs).map(|(r, l)| r + l),
            _ => None,
        };
        let Some(used) = used.and_then(|u| i64::try_from(u).ok()) else {
            continue;
        };
        let request = container
            .resources
            .as_ref()
            .and_then(|r| r.requests.as_ref())
            .and_then(|r| r.get(resource))
            .and_then(|q| Quantity::parse(&q.0).ok());
        if used.cmp(&request.map_or(0, |q| q.value())) == Ordering::Greater {
            message += &format!(
                "Container {} was using {}, request is {}, has larger consumption of {resource}. ",
                c.name,
                format_amount(resource, used),
                request.map_or("0".into(), |q| format_canonical(q.nano_value(), q.format())),
            );
        }
    }
    message
}
