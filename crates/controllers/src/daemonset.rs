//! `daemonset`: one pod of each DaemonSet on every node that should run it (upstream's
//! DaemonSetsController). Each sync first claims the pods and revisions of its namespace
//! ([`crate::claim`]: adopts matching orphans, releases owned ones the selector no longer
//! matches), keeps the template's ControllerRevision current, creates
//! the missing pods (pinned by node affinity, placed by the scheduler), deletes failed,
//! duplicate and evicted ones and those on nodes that are gone, rolls pods to the current
//! revision (RollingUpdate with maxUnavailable/maxSurge; OnDelete replaces only deleted pods),
//! prunes old revisions and writes the status. Where pods go is in [`crate::daemonset_pods`].

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use k8s_openapi::api::apps::v1::{ControllerRevision, DaemonSet, DaemonSetStatus};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::reflector::ObjectRef;
use kube::{Api, Resource, ResourceExt};
use parking_lot::Mutex;
use serde_json::Value;
use skiff_runtime::controller::{Action, Controller};
use skiff_runtime::events::{Event, EventType, Recorder};
use skiff_runtime::informer::Change;

use crate::Context;
use crate::daemonset_pods::{self as placement, TEMPLATE_GENERATION};
use crate::revision::{self, Current, HASH_LABEL};
use crate::{claim, podutil, triggers};

/// The writes this controller makes.
#[async_trait]
pub trait DaemonSetApi: Send + Sync {
    /// Creates a pod; returns its name.
    async fn create_pod(&self, ds: &DaemonSet, pod: &Pod) -> kube::Result<String>;
    async fn delete_pod(&self, ds: &DaemonSet, name: &str) -> kube::Result<()>;
    /// A strategic-merge patch of a pod (adoption and release).
    async fn patch_pod(&self, ds: &DaemonSet, name: &str, patch: Value) -> kube::Result<()>;
    /// A strategic-merge patch of a revision (adoption and release).
    async fn patch_revision(&self, ds: &DaemonSet, name: &str, patch: Value) -> kube::Result<()>;
    /// Creates (`Create`) or renumbers (`Renumber`) a revision.
    async fn save_revision(&self, revision: &Current) -> kube::Result<()>;
    async fn delete_revision(&self, namespace: &str, name: &str) -> kube::Result<()>;
    async fn update_status(&self, ds: &DaemonSet, status: &DaemonSetStatus) -> kube::Result<()>;
}

/// What one sync decides.
#[derive(Debug, Default, PartialEq)]
pub struct Plan {
    /// Nodes to create a pod on.
    pub create_on: Vec<String>,
    /// Pods to delete.
    pub delete: Vec<String>,
    /// The status from the pods as they are.
    pub status: DaemonSetStatus,
    /// When to look again (a pod that becomes available after `minReadySeconds`).
    pub requeue: Option<Duration>,
}

fn ready_since(pod: &Pod) -> Option<jiff::Timestamp> {
    let conditions = pod.status.as_ref()?.conditions.as_ref()?;
    let ready = conditions.iter().find(|c| c.type_ == "Ready")?;
    (ready.status == "True").then(|| {
        ready
            .last_transition_time
            .as_ref()
            .map_or(jiff::Timestamp::UNIX_EPOCH, |t| t.0)
    })
}

/// Upstream's `IsPodAvailable`: Ready for at least `min_ready` seconds; `Err` is the wait left.
fn available(pod: &Pod, min_ready: i64, now: jiff::Timestamp) -> Result<(), Option<Duration>> {
    let since = ready_since(pod).ok_or(None)?;
    let at = since + jiff::SignedDuration::from_secs(min_ready);
    if min_ready == 0 || at <= now {
        Ok(())
    } else {
        Err(Some(Duration::from_secs_f64(
            at.duration_since(now).as_secs_f64().max(0.0),
        )))
    }
}

fn is_updated(ds: &DaemonSet, pod: &Pod, hash: &str) -> bool {
    let labels = pod.labels();
    labels.get(HASH_LABEL).map(String::as_str) == Some(hash)
        || labels.get(TEMPLATE_GENERATION) == ds.metadata.generation.map(|g| g.to_string()).as_ref()
}

fn scaled(v: Option<&IntOrString>, total: usize, default: i32) -> usize {
    match v {
        None => default as usize,
        Some(IntOrString::Int(n)) => (*n).max(0) as usize,
        Some(IntOrString::String(s)) => {
            let pct: usize = s.trim_end_matches('%').parse().unwrap_or(0);
            (pct * total).div_ceil(100)
        }
    }
}

/// Decides one sync of `ds` at revision `hash` from the nodes and the pods it owns.
pub fn plan(
    ds: &DaemonSet,
    hash: &str,
    nodes: &[&Node],
    pods: &[&Pod],
    now: jiff::Timestamp,
) -> Plan {
    let spec = ds.spec.clone().unwrap_or_default();
    let min_ready = i64::from(spec.min_ready_seconds.unwrap_or(0));
    let rolling = spec
        .update_strategy
        .as_ref()
        .and_then(|s| s.type_.as_deref())
        .unwrap_or("RollingUpdate")
        == "RollingUpdate";
    let ru = spec
        .update_strategy
        .as_ref()
        .and_then(|s| s.rolling_update.clone())
        .unwrap_or_default();

    let mut by_node: BTreeMap<String, Vec<&Pod>> = BTreeMap::new();
    let mut out = Plan::default();
    for pod in pods {
        match placement::target_node(pod) {
            Some(n) => by_node.entry(n).or_default().push(pod),
            None => out.delete.push(pod.name_any()),
        }
    }
    for list in by_node.values_mut() {
        list.sort_by_key(|p| {
            (
                p.metadata.creation_timestamp.clone().map(|t| t.0),
                p.name_any(),
            )
        });
    }
    let known: Vec<String> = nodes.iter().map(|n| n.name_any()).collect();
    for (node, list) in &by_node {
        if !known.contains(node) {
            out.delete.extend(
                list.iter()
                    .filter(|p| p.metadata.deletion_timestamp.is_none())
                    .map(|p| p.name_any()),
            );
        }
    }

    let mut status = DaemonSetStatus {
        observed_generation: ds.metadata.generation,
        collision_count: ds.status.as_ref().and_then(|s| s.collision_count),
        ..Default::default()
    };
    let mut requeue: Option<Duration> = None;
    let mut wait = |d: Option<Duration>| {
        if let Some(d) = d {
            requeue = Some(requeue.map_or(d, |r| r.min(d)));
        }
    };
    // nodes whose single running pod the rolling update may replace: (node, pod, updated, available)
    let mut steady: Vec<(String, &Pod, bool, bool)> = Vec::new();
    let mut unavailable = 0usize;
    let max_surge = if rolling {
        scaled(ru.max_surge.as_ref(), 0, 0)
    } else {
        0
    };
    for node in nodes {
        let name = node.name_any();
        let fit = placement::node_fit(ds, node);
        let list = by_node.get(&name).cloned().unwrap_or_default();
        // status, from the oldest pod
        if fit.should_run {
            status.desired_number_scheduled += 1;
            if let Some(pod) = list.first() {
                status.current_number_scheduled += 1;
                if ready_since(pod).is_some() {
                    status.number_ready += 1;
                }
                match available(pod, min_ready, now) {
                    Ok(()) => {
                        status.number_available = Some(status.number_available.unwrap_or(0) + 1)
                    }
                    Err(d) => wait(d),
                }
                if is_updated(ds, pod, hash) {
                    status.updated_number_scheduled =
                        Some(status.updated_number_scheduled.unwrap_or(0) + 1);
                }
            }
        } else if !list.is_empty() {
            status.number_misscheduled += 1;
        }
        // manage
        if !fit.should_continue_running {
            out.delete.extend(
                list.iter()
                    .filter(|p| p.metadata.deletion_timestamp.is_none())
                    .map(|p| p.name_any()),
            );
            continue;
        }
        if !fit.should_run {
            continue;
        }
        if list.is_empty() {
            out.create_on.push(name);
            unavailable += 1;
            continue;
        }
        let mut running: Vec<&Pod> = Vec::new();
        for p in &list {
            if p.metadata.deletion_timestamp.is_some() {
                continue;
            }
            if p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Failed") {
                out.delete.push(p.name_any());
            } else {
                running.push(p);
            }
        }
        if running.len() != list.len() || running.is_empty() {
            unavailable += 1;
        }
        match running.len() {
            0 => {}
            1 => {
                let p = running[0];
                steady.push((
                    name,
                    p,
                    is_updated(ds, p, hash),
                    available(p, min_ready, now).is_ok(),
                ));
            }
            _ if max_surge == 0 => {
                out.delete.extend(running[1..].iter().map(|p| p.name_any()));
                unavailable += 1;
            }
            _ => {
                // surge: keep the oldest updated and the oldest old pod; the old one goes once
                // the updated one is available
                let new = running.iter().find(|p| is_updated(ds, p, hash));
                let old = running.iter().find(|p| !is_updated(ds, p, hash));
                for p in &running {
                    let keep = Some(p) == new || Some(p) == old;
                    if !keep {
                        out.delete.push(p.name_any());
                    }
                }
                if let (Some(new), Some(old)) = (new, old) {
                    match available(new, min_ready, now) {
                        Ok(()) => out.delete.push(old.name_any()),
                        Err(d) => {
                            wait(d);
                            unavailable += 1;
                        }
                    }
                }
            }
        }
    }
    status.number_unavailable =
        Some(status.desired_number_scheduled - status.number_available.unwrap_or(0))
            .filter(|n| *n != 0);

    if rolling {
        let desired = status.desired_number_scheduled.max(0) as usize;
        let max_unavailable = match (
            scaled(ru.max_unavailable.as_ref(), desired, 1),
            scaled(ru.max_surge.as_ref(), desired, 0),
        ) {
            (0, 0) => 1,
            (u, _) => u,
        };
        let max_surge = scaled(ru.max_surge.as_ref(), desired, 0);
        let old: Vec<&(String, &Pod, bool, bool)> = steady.iter().filter(|s| !s.2).collect();
        unavailable += steady.iter().filter(|s| s.2 && !s.3).count();
        if max_surge == 0 {
            // unavailable old pods go at once (and count as unavailable); available ones while
            // the budget allows
            unavailable += old.iter().filter(|s| !s.3).count();
            let mut budget = max_unavailable.saturating_sub(unavailable);
            for (_, pod, _, avail) in old {
                if !avail {
                    out.delete.push(pod.name_any());
                } else if budget > 0 && pod.metadata.deletion_timestamp.is_none() {
                    budget -= 1;
                    out.delete.push(pod.name_any());
                }
            }
        } else {
            // surge: a new pod beside each old one, at most maxSurge at a time
            let surging = by_node
                .values()
                .filter(|l| {
                    l.iter()
                        .filter(|p| p.metadata.deletion_timestamp.is_none())
                        .count()
                        > 1
                })
                .count();
            let mut budget = max_surge.saturating_sub(surging);
            for (node, _, _, avail) in old {
                if !avail {
                    out.create_on.push(node.clone());
                } else if budget > 0 {
                    budget -= 1;
                    out.create_on.push(node.clone());
                }
            }
        }
    }
    out.status = status;
    out.requeue = requeue;
    out
}

/// The pod writes of a DaemonSet's last sync that the pod informer has not shown yet
/// (upstream's expectations): until it has, a sync creates and deletes nothing, so that a lagging
/// cache does not make it create a second pod for a node.
#[derive(Debug, Default, Clone)]
pub struct Pending {
    created: Vec<String>,
    deleted: Vec<String>,
    since: Option<jiff::Timestamp>,
}

/// How long expectations are waited for before a sync acts anyway (upstream's 5 minutes).
const EXPECTATIONS_TIMEOUT: jiff::SignedDuration = jiff::SignedDuration::from_secs(300);

impl Pending {
    /// Whether the pods seen include every pod created and none deleted (still running).
    pub fn satisfied(&self, pods: &[&Pod], now: jiff::Timestamp) -> bool {
        if self.since.is_some_and(|t| t + EXPECTATIONS_TIMEOUT < now) {
            return true;
        }
        let seen = |name: &String| pods.iter().find(|p| p.name_any() == *name);
        self.created.iter().all(|n| seen(n).is_some())
            && self
                .deleted
                .iter()
                .all(|n| seen(n).is_none_or(|p| p.metadata.deletion_timestamp.is_some()))
    }
}

/// Syncs one DaemonSet: claims its pods and revisions among those of its namespace (adopting
/// matching orphans, releasing owned ones its selector no longer matches), then its current
/// revision, its pods (unless `pending` writes are not yet seen), old revisions, its status;
/// `pending` becomes this sync's pod writes.
pub async fn reconcile(
    ds: &DaemonSet,
    nodes: &[&Node],
    namespace_pods: &[&Pod],
    namespace_revisions: &[&ControllerRevision],
    now: jiff::Timestamp,
    pending: &mut Pending,
    api: &dyn DaemonSetApi,
) -> kube::Result<Option<Duration>> {
    if ds.metadata.deletion_timestamp.is_some() {
        return Ok(None);
    }
    let Ok(selector) = podutil::selector(ds.spec.as_ref().map(|s| &s.selector)) else {
        // validation rejects such a selector; nothing can be claimed with it
        return Ok(None);
    };
    let matches = |meta: &kube::api::ObjectMeta| selector.matches(podutil::labels(meta));
    let owner = placement::owner(ds);
    let pods = claim::claim(
        &ds.metadata,
        &owner,
        namespace_pods,
        |p: &Pod| matches(p.meta()),
        Box::new(|name, patch| Box::pin(async move { api.patch_pod(ds, &name, patch).await })),
    )
    .await?;
    let pods: Vec<&Pod> = pods.iter().map(AsRef::as_ref).collect();
    let pods = pods.as_slice();
    let revisions = claim::claim(
        &ds.metadata,
        &owner,
        namespace_revisions,
        |r: &ControllerRevision| matches(r.meta()),
        Box::new(|name, patch| Box::pin(async move { api.patch_revision(ds, &name, patch).await })),
    )
    .await?;
    let revisions: Vec<&ControllerRevision> = revisions.iter().map(AsRef::as_ref).collect();
    let revisions = revisions.as_slice();
    let spec = ds.spec.clone().unwrap_or_default();
    let ns = ds.namespace().unwrap_or_default();
    let current = revision::current(
        placement::owner(ds),
        &ns,
        &ds.name_any(),
        &spec.template,
        &spec.selector.match_labels.clone().unwrap_or_default(),
        ds.status.as_ref().and_then(|s| s.collision_count),
        revisions,
    );
    if !matches!(current, Current::Exists(_)) {
        api.save_revision(&current).await?;
    }
    let hash = revision::hash_of(current.revision());
    let plan = plan(ds, &hash, nodes, pods, now);
    if pending.satisfied(pods, now) {
        *pending = Pending {
            since: Some(now),
            ..Default::default()
        };
        for node in &plan.create_on {
            let name = api
                .create_pod(ds, &placement::new_pod(ds, node, &hash))
                .await?;
            pending.created.push(name);
        }
        for name in &plan.delete {
            api.delete_pod(ds, name).await?;
            pending.deleted.push(name.clone());
        }
    }
    let in_use: Vec<String> = pods
        .iter()
        .filter_map(|p| p.labels().get(HASH_LABEL).cloned())
        .collect();
    let limit = spec.revision_history_limit.unwrap_or(10).max(0) as usize;
    for r in revision::to_prune(revisions, &hash, &in_use, limit) {
        api.delete_revision(&ns, &r.name_any()).await?;
    }
    if ds.status.as_ref() != Some(&plan.status) {
        api.update_status(ds, &plan.status).await?;
    }
    Ok(plan.requeue)
}

struct KubeDaemonSets {
    client: kube::Client,
    recorder: Recorder,
}

impl KubeDaemonSets {
    fn event(&self, ds: &DaemonSet, type_: EventType, reason: &str, note: String) {
        let event = Event::new(type_, ds.object_ref(&()), reason, note);
        self.recorder.record(event);
    }
}

#[async_trait]
impl DaemonSetApi for KubeDaemonSets {
    async fn create_pod(&self, ds: &DaemonSet, pod: &Pod) -> kube::Result<String> {
        let api: Api<Pod> =
            Api::namespaced(self.client.clone(), &ds.namespace().unwrap_or_default());
        match api.create(&PostParams::default(), pod).await {
            Ok(p) => {
                self.event(
                    ds,
                    EventType::Normal,
                    "SuccessfulCreate",
                    format!("Created pod: {}", p.name_any()),
                );
                Ok(p.name_any())
            }
            Err(e) => {
                self.event(
                    ds,
                    EventType::Warning,
                    "FailedCreate",
                    format!("Error creating: {e}"),
                );
                Err(e)
            }
        }
    }

    async fn delete_pod(&self, ds: &DaemonSet, name: &str) -> kube::Result<()> {
        let api: Api<Pod> =
            Api::namespaced(self.client.clone(), &ds.namespace().unwrap_or_default());
        match api.delete(name, &DeleteParams::default()).await {
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
            Err(e) => Err(e),
            Ok(_) => {
                self.event(
                    ds,
                    EventType::Normal,
                    "SuccessfulDelete",
                    format!("Deleted pod: {name}"),
                );
                Ok(())
            }
        }
    }

    async fn patch_pod(&self, ds: &DaemonSet, name: &str, patch: Value) -> kube::Result<()> {
        let api: Api<Pod> =
            Api::namespaced(self.client.clone(), &ds.namespace().unwrap_or_default());
        api.patch(name, &PatchParams::default(), &Patch::Strategic(patch))
            .await
            .map(|_| ())
    }

    async fn patch_revision(&self, ds: &DaemonSet, name: &str, patch: Value) -> kube::Result<()> {
        let api: Api<ControllerRevision> =
            Api::namespaced(self.client.clone(), &ds.namespace().unwrap_or_default());
        api.patch(name, &PatchParams::default(), &Patch::Strategic(patch))
            .await
            .map(|_| ())
    }

    async fn save_revision(&self, current: &Current) -> kube::Result<()> {
        revision::save(&self.client, current).await
    }

    async fn delete_revision(&self, namespace: &str, name: &str) -> kube::Result<()> {
        revision::delete(&self.client, namespace, name).await
    }

    async fn update_status(&self, ds: &DaemonSet, status: &DaemonSetStatus) -> kube::Result<()> {
        let api: Api<DaemonSet> =
            Api::namespaced(self.client.clone(), &ds.namespace().unwrap_or_default());
        crate::status::update(&api, ds, |d| d.status = Some(status.clone()))
            .await
            .map(|_| ())
    }
}

/// Upstream's `--concurrent-daemonset-syncs` default.
const WORKERS: usize = 2;

/// Runs the controller: DaemonSets are the keys; a pod or revision change queues its
/// controlling DaemonSet (an orphan's every DaemonSet whose selector matches it), a node change
/// every DaemonSet.
pub async fn run(ctx: Arc<Context>) -> Result<(), crate::Error> {
    let controller = Controller::new("daemonset").workers(WORKERS);
    // DaemonSet uid → its pending pod writes. Guarded alone; one key is never synced twice at
    // once.
    let pending: Arc<Mutex<HashMap<String, Pending>>> = Arc::default();
    let daemonsets = ctx.informers.get::<DaemonSet>();
    let nodes = ctx.informers.get::<Node>();
    let pods = ctx.informers.get::<Pod>();
    let revisions = ctx.informers.get::<ControllerRevision>();
    claim::index_by_controller(pods.cache());
    claim::index_by_controller(revisions.cache());
    daemonsets.add_handler({
        let pending = pending.clone();
        move |change| {
            if let Change::Deleted { last, .. } = change {
                pending.lock().remove(&last.uid().unwrap_or_default());
            }
        }
    });
    let selector: fn(&DaemonSet) -> Option<&LabelSelector> =
        |o| o.spec.as_ref().map(|s| &s.selector);
    claim::queue_owners(&pods, daemonsets.cache(), controller.queue(), selector);
    claim::queue_owners(&revisions, daemonsets.cache(), controller.queue(), selector);
    let all = daemonsets.cache().clone();
    triggers::queue_mapped_keys(&nodes, controller.queue(), move |_: &Node| {
        let all = all.state();
        all.into_iter().map(|ds| ObjectRef::from_obj(ds.as_ref()))
    });
    nodes.cache().wait_until_ready().await;
    pods.cache().wait_until_ready().await;
    revisions.cache().wait_until_ready().await;
    let api = Arc::new(KubeDaemonSets {
        client: ctx.client.clone(),
        recorder: ctx.recorder("daemonset-controller"),
    });
    let (nodes, pods, revisions) = (
        nodes.cache().clone(),
        pods.cache().clone(),
        revisions.cache().clone(),
    );
    triggers::run_each(controller, &daemonsets, move |ds| {
        let (api, pending) = (api.clone(), pending.clone());
        let nodes = nodes.state();
        let (pods, revisions) = (
            claim::claimable_in(&ds.metadata, &pods),
            claim::claimable_in(&ds.metadata, &revisions),
        );
        async move {
            let uid = ds.uid().unwrap_or_default();
            let nodes: Vec<&Node> = nodes.iter().map(Arc::as_ref).collect();
            let pods: Vec<&Pod> = pods.iter().map(Arc::as_ref).collect();
            let revisions: Vec<&ControllerRevision> = revisions.iter().map(Arc::as_ref).collect();
            let mut state = pending.lock().get(&uid).cloned().unwrap_or_default();
            let now = jiff::Timestamp::now();
            let api = api.as_ref();
            let result = reconcile(&ds, &nodes, &pods, &revisions, now, &mut state, api).await;
            pending.lock().insert(uid, state);
            let requeue = result?;
            Ok::<_, kube::Error>(requeue.map_or(Action::AwaitChange, Action::RequeueAfter))
        }
    })
    .await;
    Ok(())
}

#[cfg(test)]
#[path = "daemonset_tests.rs"]
mod tests;
