//! `servicelb` (Skiff's own, k3s's ServiceLB): a `LoadBalancer` Service without
//! `spec.loadBalancerClass` gets `status.loadBalancer.ingress` with the addresses of the nodes
//! that serve it, and every node's proxy sends traffic to those addresses on the Service's ports
//! to the Service (k3s runs klipper-lb `svclb-*` DaemonSet pods with host ports for this; Skiff's
//! proxy programs the addresses itself, see docs/compatibility.md).
//!
//! Which nodes serve a Service follows k3s's `pkg/cloudprovider/servicelb.go`:
//! - every Ready, schedulable node whose taints a `svclb` pod tolerates; once any node carries
//!   the label [`ENABLE_LB_LABEL`], only nodes with it set to `true` (and with the Service's
//!   [`LB_POOL_LABEL`] value, when the Service has that label);
//! - a node where a port (port and protocol) of the Service is already taken, by an older
//!   LoadBalancer Service served there or by a pod's `hostPort`, is left out (where k3s's
//!   `svclb` pod would stay Pending with `didn't have free ports for the requested pod ports`),
//!   and a Warning event [`PORT_CONFLICT`] on the Service names the node, port and holder;
//! - with `externalTrafficPolicy: Local`, only nodes with a ready pod endpoint are listed;
//! - a node's ExternalIP is listed instead of InternalIPs once any serving node has one, sorted
//!   and in the order of the Service's `ipFamilies`; each entry has `ipMode: VIP`.
//!
//! A status change is announced as k3s does (`UpdatedLoadBalancer`, or
//! `UnAvailableLoadBalancer` when no node is left). A Service that stops being a LoadBalancer
//! loses the status; one with a class belongs to another implementation and is left alone.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::{
    LoadBalancerIngress, LoadBalancerStatus, Node, Pod, Service, ServiceStatus,
};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::runtime::reflector::ObjectRef;
use kube::{Api, Resource, ResourceExt};
use parking_lot::Mutex;
use skiff_component_helpers::ports::host_ports;
use skiff_runtime::controller::{Action, Controller};
use skiff_runtime::events::Recorder;

use crate::events::Note;
use crate::{Context, podutil, triggers};

/// The node label that, once any node has it, limits serving nodes to those set to `true`.
pub const ENABLE_LB_LABEL: &str = "svccontroller.k3s.cattle.io/enablelb";
/// The label (on nodes, and on a Service to choose them) naming a pool of serving nodes.
pub const LB_POOL_LABEL: &str = "svccontroller.k3s.cattle.io/lbpool";
/// The Warning reason of a node left out because one of the Service's ports is taken there.
pub const PORT_CONFLICT: &str = "PortConflict";
/// The events' reporting controller (kube-controller-manager's name for the service
/// load-balancer controller).
pub const COMPONENT: &str = "service-lb-controller";

/// Taints a k3s `svclb` DaemonSet pod tolerates: its own tolerations and those every
/// DaemonSet pod gets (upstream's `AddOrUpdateDaemonPodTolerations`).
const TOLERATED_TAINTS: &[&str] = &[
    "node-role.kubernetes.io/master",
    "node-role.kubernetes.io/control-plane",
    "CriticalAddonsOnly",
    "node.kubernetes.io/not-ready",
    "node.kubernetes.io/unreachable",
    "node.kubernetes.io/disk-pressure",
    "node.kubernetes.io/memory-pressure",
    "node.kubernetes.io/pid-pressure",
    "node.kubernetes.io/unschedulable",
];

/// Whether this controller owns `svc`'s load balancer: `type: LoadBalancer` without a class.
pub fn serves(svc: &Service) -> bool {
    svc.spec.as_ref().is_some_and(|s| {
        s.type_.as_deref() == Some("LoadBalancer") && s.load_balancer_class.is_none()
    })
}

/// A Service port as a host port: protocol (`TCP` by default) and number.
type Port = (String, i32);

fn service_ports(svc: &Service) -> Vec<Port> {
    svc.spec
        .iter()
        .flat_map(|s| s.ports.iter().flatten())
        .map(|p| (p.protocol.clone().unwrap_or_else(|| "TCP".into()), p.port))
        .collect()
}

/// Who holds a port on a node.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Holder {
    /// An older LoadBalancer Service served on that node (`namespace/name`).
    Service(String),
    /// A pod's `hostPort` (`namespace/name`).
    Pod(String),
}

/// A node left out of a Service's addresses, and why.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Conflict {
    pub node: String,
    pub protocol: String,
    pub port: i32,
    pub holder: Holder,
}

impl Conflict {
    /// The event's message.
    pub fn message(&self) -> String {
        let holder = match &self.holder {
            Holder::Service(name) => format!("LoadBalancer Service {name}"),
            Holder::Pod(name) => format!("a hostPort of pod {name}"),
        };
        format!(
            "port {}/{} is already used on node {} by {holder}; node {} does not serve this LoadBalancer",
            self.port, self.protocol, self.node, self.node
        )
    }
}

/// The nodes a Service gets, before its traffic policy narrows them.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Assignment {
    /// Nodes serving the Service, by name.
    pub nodes: BTreeSet<String>,
    /// Eligible nodes left out because a port is taken there.
    pub conflicts: Vec<Conflict>,
}

fn is_ready(node: &Node) -> bool {
    node.status
        .iter()
        .flat_map(|s| s.conditions.iter().flatten())
        .any(|c| c.type_ == "Ready" && c.status == "True")
}

/// Whether a `svclb` pod could run on `node`: Ready, not cordoned, not being deleted, and no
/// NoSchedule/NoExecute taint it does not tolerate.
fn schedulable(node: &Node) -> bool {
    let spec = node.spec.as_ref();
    node.metadata.deletion_timestamp.is_none()
        && is_ready(node)
        && !spec.and_then(|s| s.unschedulable).unwrap_or(false)
        && spec
            .and_then(|s| s.taints.as_ref())
            .into_iter()
            .flatten()
            .all(|t| t.effect == "PreferNoSchedule" || TOLERATED_TAINTS.contains(&t.key.as_str()))
}

/// The nodes `svc` may be served on (k3s's DaemonSet node selector and scheduling).
fn eligible<'a>(svc: &Service, nodes: &'a [Arc<Node>], labelled: bool) -> Vec<&'a Node> {
    let pool = svc.labels().get(LB_POOL_LABEL).filter(|p| !p.is_empty());
    nodes
        .iter()
        .map(Arc::as_ref)
        .filter(|n| schedulable(n))
        .filter(|n| {
            !labelled
                || (n.labels().get(ENABLE_LB_LABEL).map(String::as_str) == Some("true")
                    && pool.is_none_or(|p| n.labels().get(LB_POOL_LABEL) == Some(p)))
        })
        .collect()
}

/// Whether `svc`'s status lists load-balancer addresses.
fn has_addresses(svc: &Service) -> bool {
    svc.status
        .as_ref()
        .and_then(|s| s.load_balancer.as_ref())
        .and_then(|lb| lb.ingress.as_ref())
        .is_some_and(|ingress| !ingress.is_empty())
}

fn service_key(svc: &Service) -> String {
    format!("{}/{}", svc.namespace().unwrap_or_default(), svc.name_any())
}

/// Which nodes every served Service gets, oldest Service first (by creation, then those already
/// serving, then name): a node's ports go to the first Service that asks, after the host ports
/// of the pods there.
pub fn assign(
    services: &[Arc<Service>],
    nodes: &[Arc<Node>],
    pods: &[Arc<Pod>],
) -> BTreeMap<String, Assignment> {
    let labelled = nodes
        .iter()
        .any(|n| n.labels().contains_key(ENABLE_LB_LABEL));
    // (node, protocol, port) → holder
    let mut taken: HashMap<(String, String, i32), Holder> = HashMap::new();
    for pod in pods.iter().filter(|p| !podutil::is_terminated(p)) {
        let Some(node) = pod.spec.as_ref().and_then(|s| s.node_name.clone()) else {
            continue;
        };
        let holder = Holder::Pod(format!(
            "{}/{}",
            pod.namespace().unwrap_or_default(),
            pod.name_any()
        ));
        for hp in host_ports(pod) {
            taken
                .entry((node.clone(), hp.protocol, hp.port))
                .or_insert_with(|| holder.clone());
        }
    }
    let mut ordered: Vec<&Arc<Service>> = services.iter().filter(|s| serves(s)).collect();
    // creation times are whole seconds: of two Services created in one second, the one already
    // serving keeps its ports (as k3s's running svclb pod keeps its host ports)
    ordered.sort_by_key(|s| {
        (
            s.metadata.creation_timestamp.clone().map(|t| t.0),
            !has_addresses(s),
            service_key(s),
        )
    });
    let mut out = BTreeMap::new();
    for svc in ordered {
        let ports = service_ports(svc);
        let mut assignment = Assignment::default();
        for node in eligible(svc, nodes, labelled) {
            let name = node.name_any();
            let clash = ports.iter().find_map(|(protocol, port)| {
                let holder = taken.get(&(name.clone(), protocol.clone(), *port))?;
                Some(Conflict {
                    node: name.clone(),
                    protocol: protocol.clone(),
                    port: *port,
                    holder: holder.clone(),
                })
            });
            match clash {
                Some(conflict) => assignment.conflicts.push(conflict),
                None => {
                    for (protocol, port) in &ports {
                        taken.insert(
                            (name.clone(), protocol.clone(), *port),
                            Holder::Service(service_key(svc)),
                        );
                    }
                    assignment.nodes.insert(name);
                }
            }
        }
        out.insert(service_key(svc), assignment);
    }
    out
}

/// The nodes with a ready pod endpoint of `svc` (k3s's rule for `externalTrafficPolicy:
/// Local`).
fn nodes_with_ready_endpoints(slices: &[Arc<EndpointSlice>]) -> BTreeSet<String> {
    slices
        .iter()
        .flat_map(|s| s.endpoints.iter())
        .filter(|e| {
            e.target_ref.as_ref().and_then(|r| r.kind.as_deref()) == Some("Pod")
                && e.conditions.as_ref().and_then(|c| c.ready) == Some(true)
        })
        .filter_map(|e| e.node_name.clone())
        .collect()
}

/// The status `svc` should have, given the nodes it was assigned and its EndpointSlices.
pub fn status(
    svc: &Service,
    assignment: &Assignment,
    nodes: &[Arc<Node>],
    slices: &[Arc<EndpointSlice>],
) -> LoadBalancerStatus {
    let spec = svc.spec.as_ref();
    let local = spec.and_then(|s| s.external_traffic_policy.as_deref()) == Some("Local");
    let with_endpoints = local.then(|| nodes_with_ready_endpoints(slices));
    let mut internal = BTreeSet::new();
    let mut external = BTreeSet::new();
    for node in nodes {
        let name = node.name_any();
        if !assignment.nodes.contains(&name)
            || with_endpoints.as_ref().is_some_and(|w| !w.contains(&name))
        {
            continue;
        }
        for address in node
            .status
            .iter()
            .flat_map(|s| s.addresses.iter().flatten())
        {
            match address.type_.as_str() {
                "ExternalIP" => external.insert(address.address.clone()),
                "InternalIP" => internal.insert(address.address.clone()),
                _ => false,
            };
        }
    }
    let addresses = if external.is_empty() {
        internal
    } else {
        external
    };
    let families = spec
        .and_then(|s| s.ip_families.clone())
        .filter(|f| !f.is_empty())
        .unwrap_or_else(|| vec!["IPv4".into()]);
    let mut ingress = Vec::new();
    for family in &families {
        let v6 = family == "IPv6";
        ingress.extend(
            addresses
                .iter()
                .filter(|a| {
                    a.parse::<std::net::IpAddr>()
                        .is_ok_and(|ip| ip.is_ipv6() == v6)
                })
                .map(|ip| LoadBalancerIngress {
                    ip: Some(ip.clone()),
                    ip_mode: Some("VIP".into()),
                    ..Default::default()
                }),
        );
    }
    LoadBalancerStatus {
        ingress: (!ingress.is_empty()).then_some(ingress),
    }
}

fn current(svc: &Service) -> LoadBalancerStatus {
    svc.status
        .as_ref()
        .and_then(|s| s.load_balancer.clone())
        .map(|mut lb| {
            lb.ingress = lb.ingress.filter(|i| !i.is_empty());
            lb
        })
        .unwrap_or_default()
}

/// k3s's `ingressToString` as Go prints a `[]string`: `[a b]`.
fn addresses(status: &LoadBalancerStatus) -> String {
    let list: Vec<&str> = status
        .ingress
        .iter()
        .flatten()
        .map(|i| i.ip.as_deref().or(i.hostname.as_deref()).unwrap_or(""))
        .collect();
    format!("[{}]", list.join(" "))
}

/// The writes this controller makes.
#[async_trait]
pub trait Services: Send + Sync {
    /// Replaces `svc`'s `status.loadBalancer` (retried on conflict).
    async fn set_status(&self, svc: &Service, status: &LoadBalancerStatus) -> kube::Result<()>;
    /// Records an event about `svc`.
    fn event(&self, svc: &Service, note: Note);
}

/// Brings `svc`'s status to `want`, announcing a change as k3s does. `None`: the Service is not
/// served (its status is cleared if it is not a LoadBalancer at all).
pub async fn sync_status(
    svc: &Service,
    want: Option<LoadBalancerStatus>,
    api: &dyn Services,
) -> kube::Result<()> {
    let have = current(svc);
    let is_lb = svc.spec.as_ref().and_then(|s| s.type_.as_deref()) == Some("LoadBalancer");
    let want = match want {
        Some(want) => want,
        None if !is_lb => LoadBalancerStatus::default(),
        None => return Ok(()),
    };
    if have == want {
        return Ok(());
    }
    api.set_status(svc, &want).await?;
    if !is_lb {
        return Ok(());
    }
    if want.ingress.is_none() {
        api.event(
            svc,
            Note::warning(
                "UnAvailableLoadBalancer",
                "There are no available nodes for LoadBalancer".into(),
            ),
        );
    } else {
        api.event(
            svc,
            Note::normal(
                "UpdatedLoadBalancer",
                format!(
                    "Updated LoadBalancer with new IPs: {} -> {}",
                    addresses(&have),
                    addresses(&want)
                ),
            ),
        );
    }
    Ok(())
}

/// The port conflicts last reported per Service, so that a conflict is announced once, not
/// on every sync (the recorder would only count repeats).
#[derive(Default)]
pub struct Reported(Mutex<HashMap<String, Vec<Conflict>>>);

impl Reported {
    /// Records a Warning for each conflict of `svc` not reported since it last changed.
    pub fn report(&self, svc: &Service, conflicts: &[Conflict], api: &dyn Services) {
        let mut reported = self.0.lock();
        let known = reported.entry(service_key(svc)).or_default();
        for conflict in conflicts.iter().filter(|c| !known.contains(c)) {
            api.event(svc, Note::warning(PORT_CONFLICT, conflict.message()));
        }
        *known = conflicts.to_vec();
    }

    /// Drops what was reported about the Service `namespace/name` (it was deleted).
    pub fn forget(&self, key: &str) {
        self.0.lock().remove(key);
    }
}

struct KubeServices {
    client: kube::Client,
    recorder: Recorder,
}

#[async_trait]
impl Services for KubeServices {
    async fn set_status(&self, svc: &Service, status: &LoadBalancerStatus) -> kube::Result<()> {
        let api: Api<Service> =
            Api::namespaced(self.client.clone(), &svc.namespace().unwrap_or_default());
        crate::status::update(&api, svc, |s| {
            s.status
                .get_or_insert_with(ServiceStatus::default)
                .load_balancer = Some(status.clone());
        })
        .await
        .map(drop)
    }

    fn event(&self, svc: &Service, note: Note) {
        note.record(&self.recorder, svc.object_ref(&()));
    }
}

/// Runs the controller: every served Service is synced when it, a node, a pod with host ports
/// or one of its EndpointSlices changes (a change can move ports between Services, so the
/// cluster-wide ones queue every served Service).
pub async fn run(ctx: Arc<Context>) -> Result<(), crate::Error> {
    let controller = Controller::new("service-lb");
    let services = ctx.informers.get::<Service>();
    let nodes = ctx.informers.get::<Node>();
    let pods = ctx.informers.get::<Pod>();
    let slices = ctx.informers.get::<EndpointSlice>();
    let all_served = {
        let cache = services.cache().clone();
        move || {
            cache
                .state_filter(serves)
                .iter()
                .map(|s| ObjectRef::from_obj(s.as_ref()))
                .collect::<Vec<_>>()
        }
    };
    triggers::queue_mapped_keys(&services, controller.queue(), {
        let all_served = all_served.clone();
        move |s: &Service| {
            let mut keys = all_served();
            keys.push(ObjectRef::from_obj(s));
            keys
        }
    });
    triggers::queue_mapped_keys(&nodes, controller.queue(), {
        let all_served = all_served.clone();
        move |_: &Node| all_served()
    });
    triggers::queue_mapped_keys(&pods, controller.queue(), {
        let all_served = all_served.clone();
        move |p: &Pod| {
            if host_ports(p).is_empty() {
                Vec::new()
            } else {
                all_served()
            }
        }
    });
    triggers::queue_mapped_keys(&slices, controller.queue(), |s: &EndpointSlice| {
        s.labels()
            .get("kubernetes.io/service-name")
            .map(|name| ObjectRef::new(name).within(&s.namespace().unwrap_or_default()))
    });
    services.cache().wait_until_ready().await;
    nodes.cache().wait_until_ready().await;
    pods.cache().wait_until_ready().await;
    slices.cache().wait_until_ready().await;
    tracing::info!("service-lb: caches synced");
    let api = Arc::new(KubeServices {
        client: ctx.client.clone(),
        recorder: ctx.recorder(COMPONENT),
    });
    let reported = Arc::new(Reported::default());
    let (services, nodes, pods, slices) = (
        services.cache().clone(),
        nodes.cache().clone(),
        pods.cache().clone(),
        slices.cache().clone(),
    );
    controller
        .run(move |key: ObjectRef<Service>| {
            let (api, reported) = (api.clone(), reported.clone());
            let ns = key.namespace.clone().unwrap_or_default();
            let svc = services.get(&key);
            let want = svc.as_ref().filter(|s| serves(s)).map(|svc| {
                let all_nodes = nodes.state();
                let assignments = assign(&services.state(), &all_nodes, &pods.state());
                let assignment = assignments
                    .get(&service_key(svc))
                    .cloned()
                    .unwrap_or_default();
                let own_slices = slices.state_filter(|s| {
                    s.namespace().as_deref() == Some(ns.as_str())
                        && s.labels().get("kubernetes.io/service-name") == Some(&key.name)
                });
                let status = status(svc, &assignment, &all_nodes, &own_slices);
                (status, assignment.conflicts)
            });
            async move {
                let Some(svc) = svc else {
                    reported.forget(&format!("{ns}/{}", key.name));
                    return Ok(Action::AwaitChange);
                };
                let (want, conflicts) = match want {
                    Some((status, conflicts)) => (Some(status), conflicts),
                    None => (None, Vec::new()),
                };
                reported.report(&svc, &conflicts, api.as_ref());
                sync_status(&svc, want, api.as_ref()).await?;
                Ok::<_, kube::Error>(Action::AwaitChange)
            }
        })
        .await;
    Ok(())
}

#[cfg(test)]
#[path = "servicelb_tests.rs"]
mod tests;
