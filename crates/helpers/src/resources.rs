//! Amounts of resources ([`Resource`], upstream's `framework.Resource`), a pod's effective
//! requests ([`pod_requests`], upstream's `component-helpers/resource.PodRequests`), a node's
//! allocatable, and the resources a node lacks for a pod ([`insufficient_resources`], upstream's
//! `noderesources.Fits`), which the scheduler's `NodeResourcesFit` and the kubelet's admission
//! both apply.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, ContainerStatus, Node, Pod};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as K8sQuantity;
use skiff_apimachinery::quantity::Quantity;

/// Amounts of resources (upstream's `framework.Resource`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Resource {
    pub milli_cpu: i64,
    /// Bytes.
    pub memory: i64,
    /// Bytes.
    pub ephemeral_storage: i64,
    /// Pods a node may hold (allocatable only).
    pub allowed_pod_number: i64,
    /// Extended resources and hugepages, by resource name, in units.
    pub scalar: BTreeMap<String, i64>,
}

impl Resource {
    /// From a resource list (`requests`, `limits`, `allocatable`); quantities that do not parse
    /// count as zero (the API server validates them).
    pub fn from_list(list: &BTreeMap<String, K8sQuantity>) -> Resource {
        let mut r = Resource::default();
        for (name, q) in list {
            r.set(name, q);
        }
        r
    }

    fn set(&mut self, name: &str, q: &K8sQuantity) {
        let Ok(q) = Quantity::parse(&q.0) else { return };
        match name {
            "cpu" => self.milli_cpu = q.milli_value(),
            "memory" => self.memory = q.value(),
            "ephemeral-storage" => self.ephemeral_storage = q.value(),
            "pods" => self.allowed_pod_number = q.value(),
            other => {
                self.scalar.insert(other.to_string(), q.value());
            }
        }
    }

    pub fn add(&mut self, other: &Resource) {
        self.milli_cpu += other.milli_cpu;
        self.memory += other.memory;
        self.ephemeral_storage += other.ephemeral_storage;
        self.allowed_pod_number += other.allowed_pod_number;
        for (k, v) in &other.scalar {
            *self.scalar.entry(k.clone()).or_default() += v;
        }
    }

    pub fn sub(&mut self, other: &Resource) {
        self.milli_cpu -= other.milli_cpu;
        self.memory -= other.memory;
        self.ephemeral_storage -= other.ephemeral_storage;
        self.allowed_pod_number -= other.allowed_pod_number;
        for (k, v) in &other.scalar {
            *self.scalar.entry(k.clone()).or_default() -= v;
        }
    }

    /// Each amount raised to `other`'s where that is larger.
    pub fn set_max(&mut self, other: &Resource) {
        self.milli_cpu = self.milli_cpu.max(other.milli_cpu);
        self.memory = self.memory.max(other.memory);
        self.ephemeral_storage = self.ephemeral_storage.max(other.ephemeral_storage);
        self.allowed_pod_number = self.allowed_pod_number.max(other.allowed_pod_number);
        for (k, v) in &other.scalar {
            let e = self.scalar.entry(k.clone()).or_default();
            *e = (*e).max(*v);
        }
    }

    /// The amount of a resource by its API name (`cpu` in millicores, others in units).
    pub fn get(&self, name: &str) -> i64 {
        match name {
            "cpu" => self.milli_cpu,
            "memory" => self.memory,
            "ephemeral-storage" => self.ephemeral_storage,
            "pods" => self.allowed_pod_number,
            other => self.scalar.get(other).copied().unwrap_or(0),
        }
    }
}

/// A node's `status.allocatable` (nothing when it reports none).
pub fn node_allocatable(node: &Node) -> Resource {
    node.status
        .as_ref()
        .and_then(|s| s.allocatable.as_ref())
        .map(Resource::from_list)
        .unwrap_or_default()
}

/// A container's requests; a resource with a limit but no request counts at its limit, as the
/// API server's defaulting would have set it.
fn container_requests(c: &Container) -> Resource {
    let Some(res) = &c.resources else {
        return Resource::default();
    };
    let mut list = res.limits.clone().unwrap_or_default();
    list.extend(res.requests.clone().unwrap_or_default());
    Resource::from_list(&list)
}

/// A pod's effective requests (upstream's `resource.PodRequests`): the containers' sum; each
/// init container's needs at the moment it runs (itself plus the sidecars started before it),
/// taking the largest; sidecars (init containers with `restartPolicy: Always`) also run beside
/// the containers; plus the pod overhead. `per_container` maps each container's requests
/// first (the identity for fit; the scheduler's scoring fills in defaults for missing CPU and
/// memory, as upstream's `NonMissingContainerRequests` option does).
pub fn pod_requests(pod: &Pod, per_container: impl Fn(Resource) -> Resource) -> Resource {
    sum_requests(pod, |c| per_container(container_requests(c)))
}

/// [`pod_requests`] while a resize may be under way (upstream's `UseStatusResources` option,
/// which the scheduler uses): each container counts at the larger of what its spec asks
/// (unless the kubelet found the resize infeasible) and what its status reports allocated and
/// applied.
pub fn pod_requests_in_use(pod: &Pod, per_container: impl Fn(Resource) -> Resource) -> Resource {
    let status = pod.status.as_ref();
    let statuses: Vec<&ContainerStatus> = status
        .into_iter()
        .flat_map(|s| {
            let init = s.init_container_statuses.iter().flatten();
            s.container_statuses.iter().flatten().chain(init)
        })
        .collect();
    let infeasible = status.is_some_and(|s| {
        let pending =
            s.conditions.iter().flatten().any(|c| {
                c.type_ == "PodResizePending" && c.reason.as_deref() == Some("Infeasible")
            });
        pending || s.resize.as_deref() == Some("Infeasible")
    });
    sum_requests(pod, |c| {
        let spec = container_requests(c);
        let status = statuses.iter().find(|s| s.name == c.name);
        let Some((applied, allocated)) =
            status.and_then(|s| Some((s.resources.as_ref()?, s.allocated_resources.as_ref())))
        else {
            return per_container(spec);
        };
        let mut r = Resource::from_list(&applied.requests.clone().unwrap_or_default());
        r.set_max(&Resource::from_list(
            &allocated.cloned().unwrap_or_default(),
        ));
        if !infeasible {
            r.set_max(&spec);
        }
        per_container(r)
    })
}

fn sum_requests(pod: &Pod, requests_of: impl Fn(&Container) -> Resource) -> Resource {
    let Some(spec) = &pod.spec else {
        return Resource::default();
    };
    let mut total = Resource::default();
    for c in &spec.containers {
        total.add(&requests_of(c));
    }
    let mut sidecars = Resource::default();
    let mut init_peak = Resource::default();
    for c in spec.init_containers.iter().flatten() {
        let r = requests_of(c);
        if c.restart_policy.as_deref() == Some("Always") {
            sidecars.add(&r);
            init_peak.set_max(&sidecars);
        } else {
            let mut at_start = r;
            at_start.add(&sidecars);
            init_peak.set_max(&at_start);
        }
    }
    total.add(&sidecars);
    total.set_max(&init_peak);
    if let Some(overhead) = &spec.overhead {
        total.add(&Resource::from_list(overhead));
    }
    total
}

/// One resource a node lacks for a pod (upstream's `InsufficientResource`), with the amounts:
/// what the pod requests, what the node's pods already use, the node's allocatable. For
/// `pods` the amounts are pod counts and the request is 1.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InsufficientResource {
    pub resource: String,
    pub requested: i64,
    pub used: i64,
    pub capacity: i64,
}

/// Upstream's `fitsRequest`: the resources a node whose pods hold `requested` and number
/// `pods` lacks for a pod that requests `requests`, in upstream's order: the pod count, then
/// cpu, memory, ephemeral-storage and the pod's extended resources by name, skipping those
/// `skip` names. A resource is short when the pod requests some and more than the allocatable
/// less what is used.
pub fn insufficient_resources(
    requests: &Resource,
    allocatable: &Resource,
    requested: &Resource,
    pods: usize,
    skip: impl Fn(&str) -> bool,
) -> Vec<InsufficientResource> {
    let mut short = Vec::new();
    let mut check = |resource: &str, want: i64, used: i64, capacity: i64| {
        if want > 0 && want > capacity - used {
            short.push(InsufficientResource {
                resource: resource.to_string(),
                requested: want,
                used,
                capacity,
            });
        }
    };
    check("pods", 1, pods as i64, allocatable.allowed_pod_number);
    check(
        "cpu",
        requests.milli_cpu,
        requested.milli_cpu,
        allocatable.milli_cpu,
    );
    check(
        "memory",
        requests.memory,
        requested.memory,
        allocatable.memory,
    );
    check(
        "ephemeral-storage",
        requests.ephemeral_storage,
        requested.ephemeral_storage,
        allocatable.ephemeral_storage,
    );
    for (name, want) in &requests.scalar {
        if !skip(name) {
            check(name, *want, requested.get(name), allocatable.get(name));
        }
    }
    short
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn sidecars_run_beside_the_containers_and_overhead_is_added() {
        let cpu = |name: &str, amount: &str| json!({"name": name, "image": "busybox", "resources": {"requests": {"cpu": amount}}});
        let mut sidecar = cpu("proxy", "50m");
        sidecar["restartPolicy"] = json!("Always");
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p"},
            "spec": {
                "containers": [cpu("app", "100m")],
                "initContainers": [sidecar, cpu("late-init", "120m")],
                "overhead": {"cpu": "10m"},
            },
        }))
        .unwrap();
        // max(100 + 50, 120 + 50) + 10
        assert_eq!(pod_requests(&pod, |r| r).milli_cpu, 180);
    }

    #[test]
    fn a_pod_being_resized_counts_at_the_larger_of_spec_and_status() {
        let mut pod = json!({
            "metadata": {"name": "p"},
            "spec": {"containers": [{"name": "app", "image": "busybox",
                                     "resources": {"requests": {"cpu": "100m"}}}]},
            "status": {"containerStatuses": [{"name": "app", "image": "", "imageID": "",
                "ready": true, "restartCount": 0, "allocatedResources": {"cpu": "300m"},
                "resources": {"requests": {"cpu": "200m"}}}]},
        });
        let cpu = |pod: &serde_json::Value| {
            pod_requests_in_use(&serde_json::from_value(pod.clone()).unwrap(), |r| r).milli_cpu
        };
        assert_eq!(cpu(&pod), 300, "a shrink still holds what was allocated");
        pod["spec"]["containers"][0]["resources"]["requests"]["cpu"] = json!("1");
        assert_eq!(cpu(&pod), 1000, "a growth is counted at once");
        pod["status"]["conditions"] =
            json!([{"type": "PodResizePending", "status": "True", "reason": "Infeasible"}]);
        assert_eq!(cpu(&pod), 300, "unless the node refused it");
        pod["status"]["containerStatuses"][0]
            .as_object_mut()
            .unwrap()
            .remove("resources");
        assert_eq!(
            cpu(&pod),
            1000,
            "a node that reports no resources: the spec"
        );
    }

    #[test]
    fn a_resource_is_short_only_when_requested_beyond_what_is_left_and_not_skipped() {
        let list = |items: &[(&str, &str)]| {
            Resource::from_list(
                &items
                    .iter()
                    .map(|(k, v)| (k.to_string(), K8sQuantity(v.to_string())))
                    .collect(),
            )
        };
        let allocatable = list(&[("cpu", "2"), ("pods", "3"), ("example.com/gpu", "1")]);
        let requested = list(&[("cpu", "1500m"), ("example.com/gpu", "1")]);
        let pod = list(&[
            ("cpu", "500m"),
            ("example.com/gpu", "1"),
            ("example.com/fpga", "1"),
        ]);
        let names = |short: Vec<InsufficientResource>| {
            short.into_iter().map(|r| r.resource).collect::<Vec<_>>()
        };
        assert_eq!(
            names(insufficient_resources(
                &pod,
                &allocatable,
                &requested,
                2,
                |_| false
            )),
            ["example.com/fpga", "example.com/gpu"],
            "cpu fits exactly; a resource the node lacks is short"
        );
        assert_eq!(
            insufficient_resources(&pod, &allocatable, &requested, 3, |n| n.contains('/')),
            [InsufficientResource {
                resource: "pods".into(),
                requested: 1,
                used: 3,
                capacity: 3,
            }]
        );
    }
}
