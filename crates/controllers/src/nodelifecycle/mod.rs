//! `nodelifecycle` (upstream's NodeLifecycleController, without zones and rate-limited
//! eviction, which upstream also leaves to `taint-eviction-controller`): every
//! `--node-monitor-period` each node's health is judged from its Lease in `kube-node-lease` and
//! its Ready heartbeat. A node not heard from for `--node-monitor-grace-period` (by this
//! controller's own clock, as upstream: the timestamps written by the kubelet are only compared
//! for change) gets every condition set to `Unknown` (`NodeStatusUnknown`, "Kubelet stopped
//! posting node status.") and its pods marked not Ready. Taints follow the conditions:
//! `node.kubernetes.io/unreachable` (Ready Unknown) and `not-ready` (Ready False) as NoExecute
//! and NoSchedule, and the NoSchedule taints of the pressure conditions, `network-unavailable`
//! and `unschedulable`; they go when the condition clears.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use async_trait::async_trait;
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, NodeCondition, Pod, PodCondition, Taint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Patch, PatchParams};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Api, ResourceExt};
use serde_json::json;

use crate::config::Config;
use crate::{Context, triggers};

pub const UNREACHABLE: &str = "node.kubernetes.io/unreachable";
pub const NOT_READY: &str = "node.kubernetes.io/not-ready";
/// The namespace of node Leases.
pub const LEASE_NAMESPACE: &str = "kube-node-lease";

/// The conditions a kubelet posts, which go `Unknown` together.
const NODE_CONDITIONS: &[&str] = &["Ready", "MemoryPressure", "DiskPressure", "PIDPressure"];

/// NoSchedule taints for (condition, status) (upstream's `nodeConditionToTaintKeyStatusMap`).
const CONDITION_TAINTS: &[(&str, &str, &str)] = &[
    ("Ready", "False", NOT_READY),
    ("Ready", "Unknown", UNREACHABLE),
    (
        "MemoryPressure",
        "True",
        "node.kubernetes.io/memory-pressure",
    ),
    ("DiskPressure", "True", "node.kubernetes.io/disk-pressure"),
    ("PIDPressure", "True", "node.kubernetes.io/pid-pressure"),
    (
        "NetworkUnavailable",
        "True",
        "node.kubernetes.io/network-unavailable",
    ),
];
const UNSCHEDULABLE: &str = "node.kubernetes.io/unschedulable";

/// What this controller last observed of one node, and when (its own clock).
#[derive(Debug, Clone, PartialEq)]
pub struct Health {
    /// When a heartbeat or lease renewal was last seen to change.
    pub probed: Timestamp,
    heartbeat: Option<Timestamp>,
    renewed: Option<Timestamp>,
}

fn ready_of(node: &Node) -> Option<&NodeCondition> {
    condition(node, "Ready")
}

fn condition<'a>(node: &'a Node, kind: &str) -> Option<&'a NodeCondition> {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == kind))
}

/// Updates what is known of a node's liveness: a new heartbeat or lease renewal moves `probed`
/// to `now`; a node seen the first time counts as probed now.
pub fn observe(
    prev: Option<&Health>,
    node: &Node,
    lease: Option<&Lease>,
    now: Timestamp,
) -> Health {
    let heartbeat = ready_of(node)
        .and_then(|c| c.last_heartbeat_time.as_ref())
        .map(|t| t.0);
    let renewed = lease
        .and_then(|l| l.spec.as_ref())
        .and_then(|s| s.renew_time.as_ref())
        .map(|t| t.0);
    match prev {
        Some(p) if p.heartbeat == heartbeat && p.renewed == renewed => p.clone(),
        _ => Health {
            probed: now,
            heartbeat,
            renewed,
        },
    }
}

/// Whether a node has not been heard from for longer than its grace period (the startup grace
/// for a node that never posted a Ready condition).
pub fn silent(health: &Health, node: &Node, config: &Config, now: Timestamp) -> bool {
    let grace = if ready_of(node).is_none() {
        config.node_startup_grace_period
    } else {
        config.node_monitor_grace_period
    };
    let grace = SignedDuration::try_from(grace).unwrap_or(SignedDuration::MAX);
    now.duration_since(health.probed) > grace
}

/// The node's conditions with the kubelet's set to Unknown; `None` when they already are.
pub fn unknown_conditions(node: &Node, now: Timestamp) -> Option<Vec<NodeCondition>> {
    let mut conditions = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.clone())
        .unwrap_or_default();
    let mut changed = false;
    for kind in NODE_CONDITIONS {
        match conditions.iter_mut().find(|c| c.type_ == *kind) {
            Some(c) if c.status == "Unknown" => {}
            Some(c) => {
                c.status = "Unknown".into();
                c.reason = Some("NodeStatusUnknown".into());
                c.message = Some("Kubelet stopped posting node status.".into());
                c.last_transition_time = Some(Time(now));
                changed = true;
            }
            None => {
                conditions.push(NodeCondition {
                    type_: kind.to_string(),
                    status: "Unknown".into(),
                    reason: Some("NodeStatusNeverUpdated".into()),
                    message: Some("Kubelet never posted node status.".into()),
                    last_heartbeat_time: Some(Time(now)),
                    last_transition_time: Some(Time(now)),
                });
                changed = true;
            }
        }
    }
    changed.then_some(conditions)
}

fn taint(key: &str, effect: &str, now: Timestamp) -> Taint {
    Taint {
        key: key.into(),
        effect: effect.into(),
        value: None,
        time_added: (effect == "NoExecute").then_some(Time(now)),
    }
}

/// The taints this controller manages, for the node's conditions now.
fn wanted(node: &Node, now: Timestamp) -> Vec<Taint> {
    let mut out = Vec::new();
    for (kind, status, key) in CONDITION_TAINTS {
        if condition(node, kind).is_some_and(|c| c.status == *status) {
            out.push(taint(key, "NoSchedule", now));
        }
    }
    if node
        .spec
        .as_ref()
        .and_then(|s| s.unschedulable)
        .unwrap_or(false)
    {
        out.push(taint(UNSCHEDULABLE, "NoSchedule", now));
    }
    match ready_of(node).map(|c| c.status.as_str()) {
        Some("False") => out.push(taint(NOT_READY, "NoExecute", now)),
        Some("Unknown") => out.push(taint(UNREACHABLE, "NoExecute", now)),
        _ => {}
    }
    out
}

fn managed(t: &Taint) -> bool {
    CONDITION_TAINTS.iter().any(|(_, _, k)| *k == t.key) || t.key == UNSCHEDULABLE
}

/// The node's taints with the managed ones matching its conditions (others kept, existing
/// ones keep their `timeAdded`); `None` when nothing changes.
pub fn desired_taints(node: &Node, now: Timestamp) -> Option<Vec<Taint>> {
    let current = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default();
    let wanted = wanted(node, now);
    let same = |a: &Taint, b: &Taint| a.key == b.key && a.effect == b.effect;
    let mut out: Vec<Taint> = current
        .iter()
        .filter(|t| !managed(t) || wanted.iter().any(|w| same(w, t)))
        .cloned()
        .collect();
    for w in wanted {
        if !out.iter().any(|t| same(t, &w)) {
            out.push(w);
        }
    }
    (out != current).then_some(out)
}

/// The pod's conditions with Ready False (upstream's `MarkPodsNotReady`); `None` if it is not
/// Ready already.
pub fn not_ready_conditions(pod: &Pod, now: Timestamp) -> Option<Vec<PodCondition>> {
    let mut conditions = pod.status.as_ref()?.conditions.clone()?;
    let ready = conditions
        .iter_mut()
        .find(|c| c.type_ == "Ready" && c.status == "True")?;
    ready.status = "False".into();
    ready.last_transition_time = Some(Time(now));
    Some(conditions)
}

/// The writes this controller makes.
#[async_trait]
pub trait NodeWrites: Send + Sync {
    async fn set_node_conditions(
        &self,
        node: &Node,
        conditions: Vec<NodeCondition>,
    ) -> kube::Result<()>;
    async fn set_taints(&self, node: &Node, taints: Vec<Taint>) -> kube::Result<()>;
    async fn set_pod_conditions(
        &self,
        pod: &Pod,
        conditions: Vec<PodCondition>,
    ) -> kube::Result<()>;
}

/// One monitoring pass over one node: health, conditions, taints, pods.
pub async fn monitor(
    node: &Node,
    lease: Option<&Lease>,
    pods: &[Arc<Pod>],
    health: &mut HashMap<String, Health>,
    config: &Config,
    now: Timestamp,
    api: &dyn NodeWrites,
) -> kube::Result<()> {
    let name = node.name_any();
    let h = observe(health.get(&name), node, lease, now);
    let mut node = node.clone();
    if silent(&h, &node, config, now)
        && let Some(conditions) = unknown_conditions(&node, now)
    {
        api.set_node_conditions(&node, conditions.clone()).await?;
        node.status.get_or_insert_with(Default::default).conditions = Some(conditions);
    }
    health.insert(name, h);
    if let Some(taints) = desired_taints(&node, now) {
        api.set_taints(&node, taints).await?;
    }
    if ready_of(&node).is_some_and(|c| c.status != "True") {
        for pod in pods {
            if let Some(conditions) = not_ready_conditions(pod, now) {
                api.set_pod_conditions(pod, conditions).await?;
            }
        }
    }
    Ok(())
}

struct KubeWrites(kube::Client);

fn ok_if_gone(r: kube::Result<impl Sized>) -> kube::Result<()> {
    match r {
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        other => other.map(|_| ()),
    }
}

#[async_trait]
impl NodeWrites for KubeWrites {
    async fn set_node_conditions(
        &self,
        node: &Node,
        conditions: Vec<NodeCondition>,
    ) -> kube::Result<()> {
        let api: Api<Node> = Api::all(self.0.clone());
        let patch = json!({"metadata": {"resourceVersion": node.resource_version()},
                           "status": {"conditions": conditions}});
        ok_if_gone(
            api.patch_status(
                &node.name_any(),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await,
        )
    }

    async fn set_taints(&self, node: &Node, taints: Vec<Taint>) -> kube::Result<()> {
        let api: Api<Node> = Api::all(self.0.clone());
        let value = if taints.is_empty() {
            serde_json::Value::Null
        } else {
            json!(taints)
        };
        let patch = json!({"spec": {"taints": value}});
        ok_if_gone(
            api.patch(
                &node.name_any(),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await,
        )
    }

    async fn set_pod_conditions(
        &self,
        pod: &Pod,
        conditions: Vec<PodCondition>,
    ) -> kube::Result<()> {
        let api: Api<Pod> = Api::namespaced(self.0.clone(), &pod.namespace().unwrap_or_default());
        let patch = json!({"metadata": {"resourceVersion": pod.resource_version()},
                           "status": {"conditions": conditions}});
        ok_if_gone(
            api.patch_status(
                &pod.name_any(),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await,
        )
    }
}

/// Runs the monitor loop until the process stops.
pub async fn run(ctx: Arc<Context>) -> Result<(), crate::Error> {
    let nodes = ctx.informers.get::<Node>();
    let in_lease_namespace =
        watcher::Config::default().fields(&format!("metadata.namespace={LEASE_NAMESPACE}"));
    let leases = ctx.informers.filtered::<Lease>(in_lease_namespace);
    let pods = ctx.informers.get::<Pod>();
    triggers::index_pods_by_node(pods.cache());
    let (nodes, leases, pods) = (nodes.cache(), leases.cache(), pods.cache());
    nodes.wait_until_ready().await;
    leases.wait_until_ready().await;
    pods.wait_until_ready().await;
    let api = KubeWrites(ctx.client.clone());
    let mut health: HashMap<String, Health> = HashMap::new();
    let mut tick = tokio::time::interval(ctx.config.node_monitor_period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let now = Timestamp::now();
        let all = nodes.state();
        let names: HashSet<String> = all.iter().map(|n| n.name_any()).collect();
        health.retain(|name, _| names.contains(name));
        for node in all {
            let name = node.name_any();
            let lease = leases.get(&ObjectRef::new(&name).within(LEASE_NAMESPACE));
            let on_node = triggers::pods_on(pods, &name);
            let r = monitor(
                &node,
                lease.as_deref(),
                &on_node,
                &mut health,
                &ctx.config,
                now,
                &api,
            )
            .await;
            if let Err(error) = r {
                tracing::warn!(node = %name, %error, "nodelifecycle: will retry next period");
            }
        }
    }
}

#[cfg(test)]
#[path = "nodelifecycle_tests.rs"]
mod tests;
