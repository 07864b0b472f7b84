//! `nodelifecycle` (upstream's NodeLifecycleController): every `--node-monitor-period` each
//! node's health is judged from its Lease in `kube-node-lease` and its Ready heartbeat. A node
//! not heard from for `--node-monitor-grace-period` (by this controller's own clock, as upstream:
//! the timestamps written by the kubelet are only compared for change) gets every condition set
//! to `Unknown` (`NodeStatusUnknown`, "Kubelet stopped posting node status."), a `NodeNotReady`
//! event, and its pods marked not Ready. Taints follow the conditions: the NoSchedule taints of
//! `node.kubernetes.io/not-ready` (Ready False), `unreachable` (Ready Unknown), the pressure
//! conditions, `network-unavailable` and `unschedulable` at once, and go when the condition
//! clears; the NoExecute `not-ready` or `unreachable` taint, which taint-eviction acts on, at the
//! rate its zone's health allows ([`zones`]), and lifted as soon as the node is Ready.

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

use skiff_runtime::cache::Cache;
use skiff_runtime::events::{Event, Recorder, node_reference};

use crate::config::Config;
use crate::{Context, triggers};

pub mod zones;
use zones::{Transition, Zones};

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

fn taints_of(node: &Node) -> &[Taint] {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_deref())
        .unwrap_or_default()
}

/// The NoSchedule taints this controller manages, for the node's conditions now.
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
    out
}

fn managed(t: &Taint) -> bool {
    t.effect == "NoSchedule"
        && (CONDITION_TAINTS.iter().any(|(_, _, k)| *k == t.key) || t.key == UNSCHEDULABLE)
}

/// The node's taints with the managed NoSchedule ones matching its conditions (others kept,
/// existing ones keep their `timeAdded`); `None` when nothing changes.
pub fn desired_taints(node: &Node, now: Timestamp) -> Option<Vec<Taint>> {
    let current = taints_of(node);
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
    (out.as_slice() != current).then_some(out)
}

fn has_no_execute(node: &Node, key: &str) -> bool {
    taints_of(node)
        .iter()
        .any(|t| t.key == key && t.effect == "NoExecute")
}

/// The node's taints with `add` as its only NoExecute `not-ready`/`unreachable` taint (kept with
/// its `timeAdded` when there), or with neither for `None` (upstream's
/// `SwapNodeControllerTaint` and `markNodeAsReachable`); `None` when nothing changes.
pub fn no_execute_taints(node: &Node, add: Option<&str>, now: Timestamp) -> Option<Vec<Taint>> {
    let current = taints_of(node);
    let mut out: Vec<Taint> = current
        .iter()
        .filter(|t| {
            t.effect != "NoExecute"
                || !(t.key == NOT_READY || t.key == UNREACHABLE)
                || Some(t.key.as_str()) == add
        })
        .cloned()
        .collect();
    if let Some(key) = add
        && !has_no_execute(node, key)
    {
        out.push(taint(key, "NoExecute", now));
    }
    (out.as_slice() != current).then_some(out)
}

/// The NoExecute taint a Ready status calls for, and the one it replaces.
fn no_execute_for(ready: &str) -> Option<(&'static str, &'static str)> {
    match ready {
        "False" => Some((NOT_READY, UNREACHABLE)),
        "Unknown" => Some((UNREACHABLE, NOT_READY)),
        _ => None,
    }
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

/// A node's taints as a change wants them, `None` when they already are.
pub type TaintChange<'a> = &'a (dyn Fn(&Node) -> Option<Vec<Taint>> + Sync);

/// The writes this controller makes. A node's writes are conditional on its resourceVersion.
#[async_trait]
pub trait NodeWrites: Send + Sync {
    /// Writes `node`'s conditions; answers its new resourceVersion (`None`: the node is gone).
    async fn set_node_conditions(
        &self,
        node: &Node,
        conditions: Vec<NodeCondition>,
    ) -> kube::Result<Option<String>>;
    /// Writes the taints `change` wants for `node`, and, if someone else changed the node in
    /// between (409), reads it again and applies `change` to that (upstream's
    /// `AddOrUpdateTaintOnNode`: `spec.taints` has no merge key, so a taint added in between
    /// would otherwise be lost). Answers the node as written (`None`: nothing to write, or the
    /// node is gone).
    async fn update_taints(
        &self,
        node: &Node,
        change: TaintChange<'_>,
    ) -> kube::Result<Option<Node>>;
    async fn set_pod_conditions(
        &self,
        pod: &Pod,
        conditions: Vec<PodCondition>,
    ) -> kube::Result<()>;
    /// Records the `NodeNotReady` event of a node this controller saw stop being Ready.
    fn not_ready(&self, node: &Node);
}

/// What the controller keeps between passes: each node's liveness and each zone's queue.
#[derive(Debug, Default)]
pub struct State {
    health: HashMap<String, Health>,
    pub zones: Zones,
}

/// One node as a pass sees it.
pub struct Observed<'a> {
    pub node: &'a Node,
    pub lease: Option<&'a Lease>,
    pub pods: &'a [Arc<Pod>],
}

/// One monitoring pass over one node: health, conditions, taints, pods. Returns the node as
/// this pass left it.
pub async fn monitor(
    seen: Observed<'_>,
    state: &mut State,
    config: &Config,
    now: Timestamp,
    api: &dyn NodeWrites,
) -> kube::Result<Node> {
    let name = seen.node.name_any();
    let observed = ready_of(seen.node).map_or("Unknown", |c| c.status.as_str());
    let h = observe(state.health.get(&name), seen.node, seen.lease, now);
    let mut node = seen.node.clone();
    if silent(&h, &node, config, now)
        && let Some(conditions) = unknown_conditions(&node, now)
    {
        node.metadata.resource_version = api.set_node_conditions(&node, conditions.clone()).await?;
        node.status.get_or_insert_with(Default::default).conditions = Some(conditions);
    }
    state.health.insert(name.clone(), h);
    if let Some(written) = api
        .update_taints(&node, &|n| desired_taints(n, now))
        .await?
    {
        node = written;
    }
    let Some(current) = ready_of(&node).map(|c| c.status.clone()) else {
        return Ok(node);
    };
    // the NoExecute taint goes by the status seen before this pass's write, as upstream's
    match no_execute_for(observed) {
        None => {
            state.zones.forget(&name);
            let lift = |n: &Node| no_execute_taints(n, None, now);
            if let Some(written) = api.update_taints(&node, &lift).await? {
                node = written;
            }
        }
        Some((wanted, opposite)) if has_no_execute(&node, opposite) => {
            let swap = |n: &Node| no_execute_taints(n, Some(wanted), now);
            if let Some(written) = api.update_taints(&node, &swap).await? {
                node = written;
            }
        }
        Some(_) => state.zones.enqueue(&zones::zone_key(&node), &name, config),
    }
    if current != "True" {
        if observed == "True" {
            api.not_ready(&node);
        }
        for pod in seen.pods {
            if let Some(conditions) = not_ready_conditions(pod, now) {
                api.set_pod_conditions(pod, conditions).await?;
            }
        }
    }
    Ok(node)
}

/// Where a pass finds each node's Lease and pods.
pub trait Lookup: Sync {
    fn lease(&self, node: &str) -> Option<Arc<Lease>>;
    fn pods_on(&self, node: &str) -> Vec<Arc<Pod>>;
}

/// One monitoring pass over every node, then over the zones' health (upstream's
/// `monitorNodeHealth`).
pub async fn pass(
    nodes: &[Arc<Node>],
    lookup: &dyn Lookup,
    state: &mut State,
    config: &Config,
    now: Timestamp,
    api: &dyn NodeWrites,
) {
    let names: HashSet<String> = nodes.iter().map(|n| n.name_any()).collect();
    state.health.retain(|name, _| names.contains(name));
    let gone: Vec<String> = state
        .zones
        .nodes()
        .filter(|n| !names.contains(*n))
        .cloned()
        .collect();
    for name in gone {
        state.zones.forget(&name);
    }
    let mut ready: HashMap<String, Vec<bool>> = HashMap::new();
    // the nodes left with a NoExecute taint of this controller's, as written
    let mut tainted = Vec::new();
    for node in nodes {
        let name = node.name_any();
        let lease = lookup.lease(&name);
        let pods = lookup.pods_on(&name);
        let seen = Observed {
            node,
            lease: lease.as_deref(),
            pods: &pods,
        };
        match monitor(seen, state, config, now, api).await {
            Ok(after) => {
                if !zones::excluded(&after) {
                    let is_ready = ready_of(&after).is_some_and(|c| c.status == "True");
                    ready
                        .entry(zones::zone_key(&after))
                        .or_default()
                        .push(is_ready);
                }
                if no_execute_taints(&after, None, now).is_some() {
                    tainted.push(after);
                }
            }
            Err(error) => {
                tracing::warn!(node = %name, %error, "nodelifecycle: will retry next period");
            }
        }
    }
    match state.zones.handle_disruption(&ready, config) {
        Transition::Unchanged => {}
        Transition::EnteredFullDisruption => {
            tracing::info!("nodelifecycle: no node is Ready; evictions stop");
            for node in &tainted {
                let lift = |n: &Node| no_execute_taints(n, None, now);
                if let Err(error) = api.update_taints(node, &lift).await {
                    tracing::warn!(node = %node.name_any(), %error, "nodelifecycle: taints not lifted");
                }
            }
        }
        Transition::LeftFullDisruption => {
            tracing::info!("nodelifecycle: some nodes are Ready again; evictions resume");
            for h in state.health.values_mut() {
                h.probed = now;
            }
        }
    }
}

/// Gives the nodes whose turn has come their NoExecute taint (upstream's
/// `doNoExecuteTaintingPass`), reading each node again from `node_of`.
pub async fn taint_pass(
    state: &mut State,
    node_of: &(dyn Fn(&str) -> Option<Arc<Node>> + Sync),
    now: Timestamp,
    api: &dyn NodeWrites,
) {
    for (zone, name) in state.zones.take_due() {
        let Some(node) = node_of(&name) else { continue };
        let Some(ready) = ready_of(&node) else {
            state.zones.retry(&zone, name);
            continue;
        };
        let Some((wanted, _)) = no_execute_for(&ready.status) else {
            continue;
        };
        let taint = |n: &Node| no_execute_taints(n, Some(wanted), now);
        match api.update_taints(&node, &taint).await {
            Ok(Some(_)) => zones::count_eviction(&zone),
            Ok(None) => {}
            Err(error) => {
                tracing::warn!(node = %name, %error, "nodelifecycle: taint not written, will retry");
                state.zones.retry(&zone, name);
            }
        }
    }
}

struct KubeWrites {
    client: kube::Client,
    recorder: Recorder,
}

fn ok_if_gone(r: kube::Result<impl Sized>) -> kube::Result<()> {
    match r {
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        other => other.map(|_| ()),
    }
}

/// How often a taint write is tried against a node that keeps changing (upstream's
/// `UpdateTaintBackoff` steps).
const TAINT_UPDATE_TRIES: u32 = 5;

/// The resourceVersion a write of a node left, `None` if the node is gone.
fn new_version(r: kube::Result<Node>) -> kube::Result<Option<String>> {
    match r {
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(None),
        other => other.map(|n| n.metadata.resource_version),
    }
}

#[async_trait]
impl NodeWrites for KubeWrites {
    async fn set_node_conditions(
        &self,
        node: &Node,
        conditions: Vec<NodeCondition>,
    ) -> kube::Result<Option<String>> {
        let api: Api<Node> = Api::all(self.client.clone());
        let patch = json!({"metadata": {"resourceVersion": node.resource_version()},
                           "status": {"conditions": conditions}});
        new_version(
            api.patch_status(
                &node.name_any(),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await,
        )
    }

    async fn update_taints(
        &self,
        node: &Node,
        change: TaintChange<'_>,
    ) -> kube::Result<Option<Node>> {
        let api: Api<Node> = Api::all(self.client.clone());
        let name = node.name_any();
        let mut node = node.clone();
        let mut tries = 1;
        loop {
            let Some(taints) = change(&node) else {
                return Ok(None);
            };
            let value = if taints.is_empty() {
                serde_json::Value::Null
            } else {
                json!(taints)
            };
            let patch = json!({"metadata": {"resourceVersion": node.resource_version()},
                               "spec": {"taints": value}});
            match api
                .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Err(kube::Error::Api(s)) if s.code == 404 => return Ok(None),
                Err(kube::Error::Api(s)) if s.code == 409 && tries < TAINT_UPDATE_TRIES => {
                    tries += 1;
                    match api.get_opt(&name).await? {
                        Some(fresh) => node = fresh,
                        None => return Ok(None),
                    }
                }
                written => return written.map(Some),
            }
        }
    }

    async fn set_pod_conditions(
        &self,
        pod: &Pod,
        conditions: Vec<PodCondition>,
    ) -> kube::Result<()> {
        let api: Api<Pod> =
            Api::namespaced(self.client.clone(), &pod.namespace().unwrap_or_default());
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

    fn not_ready(&self, node: &Node) {
        let name = node.name_any();
        let note = format!("Node {name} status is now: NodeNotReady");
        self.recorder
            .record(Event::normal(node_reference(&name), "NodeNotReady", note));
    }
}

struct Caches<'a> {
    leases: &'a Cache<Lease>,
    pods: &'a Cache<Pod>,
}

impl Lookup for Caches<'_> {
    fn lease(&self, node: &str) -> Option<Arc<Lease>> {
        self.leases
            .get(&ObjectRef::new(node).within(LEASE_NAMESPACE))
    }

    fn pods_on(&self, node: &str) -> Vec<Arc<Pod>> {
        triggers::pods_on(self.pods, node)
    }
}

/// How often the queued nodes are looked at for their NoExecute taint (upstream's
/// `NodeEvictionPeriod`).
const TAINT_PERIOD: std::time::Duration = std::time::Duration::from_millis(100);

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
    let api = KubeWrites {
        client: ctx.client.clone(),
        recorder: ctx.recorder("node-controller"),
    };
    let lookup = Caches { leases, pods };
    let node_of = |name: &str| nodes.get(&ObjectRef::new(name));
    let mut state = State::default();
    let mut monitor_tick = tokio::time::interval(ctx.config.node_monitor_period);
    monitor_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut taint_tick = tokio::time::interval(TAINT_PERIOD);
    taint_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = monitor_tick.tick() => {
                let all = nodes.state();
                pass(&all, &lookup, &mut state, &ctx.config, Timestamp::now(), &api).await;
            }
            _ = taint_tick.tick(), if state.zones.waiting() => {
                taint_pass(&mut state, &node_of, Timestamp::now(), &api).await;
            }
        }
    }
}

#[cfg(test)]
mod tests;
