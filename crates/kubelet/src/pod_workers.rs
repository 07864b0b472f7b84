//! The kubelet's pod loop: this node's pods come from a shared informer filtered by the API
//! server (`fieldSelector=spec.nodeName=<node>`); each new one is admitted (or rejected) and
//! gets one worker that syncs it on every change of the object, whenever the [`Pleg`] sees its
//! containers change in the runtime, and when its last sync asked to be called again (a probe
//! or a back-off due, a retry, or `--sync-frequency`). Once the first list is in, the
//! sandboxes, containers and volumes of pods that are gone (deleted while the kubelet was down)
//! are removed. The eviction manager reaches the workers through [`Workers`]: the active pods,
//! and a [`Termination`] carried out by the pod's own worker, so that nothing else runs or
//! restarts the pod's containers meanwhile. Admission records what it admitted a pod with
//! ([`crate::allocation`]); before each sync of a running pod its worker has a resize judged
//! ([`crate::pod_resize`]) and syncs the pod as allocated; a worker that ends forgets its pod's
//! allocation and has the deferred resizes judged again, room having been made.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::{Node, Pod, PodStatus};
use kube::Api;
use kube::runtime::watcher;
use parking_lot::Mutex;
use skiff_runtime::informer::{Change, Informer, Informers};
use tokio::sync::{mpsc, oneshot, watch};

use crate::admission::{self, NodeView};
use crate::allocation::Allocations;
use crate::container_gc::KnownPods;
use crate::eviction::{PodTerminator, Pressure, Termination};
use crate::pleg::Pleg;
use crate::pod_resize::ResizeInputs;
use crate::pod_sync::{LABEL_POD_NAME, LABEL_POD_NAMESPACE, LABEL_POD_UID, Outcome, SyncContext};
use crate::server::pods::PodRegistry;

/// What the pod informer's handler hands the pod loop, in the informer's order.
enum PodUpdate {
    /// A pod as it is now (`present`), or as it was last seen once it is gone (deleted, or
    /// found missing by a relist).
    Pod { pod: Arc<Pod>, present: bool },
    /// Every pod of the first list has been handed over; the uids of those pods.
    Listed(HashSet<String>),
}

fn uid_of(pod: &Pod) -> String {
    pod.metadata.uid.clone().unwrap_or_default()
}

fn is_finished(pod: &Pod) -> bool {
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    matches!(phase, Some("Succeeded" | "Failed"))
}

/// A termination for a worker, with whom to tell once the pod's containers are stopped. Boxed:
/// a channel allocates its first block of 32 slots when it is made, and every pod's worker has
/// one that it almost never uses (8 KiB a pod with the request inline).
type TerminationRequest = Box<(Termination, oneshot::Sender<()>)>;

/// One pod's worker, as the pod loop and the eviction manager reach it.
struct WorkerHandle {
    /// The pod's latest object (None once removed from the API); a change wakes the worker.
    /// Shared, not copied: admission looks at every running pod each time a new one comes.
    mailbox: watch::Sender<Option<Arc<Pod>>>,
    terminations: mpsc::UnboundedSender<TerminationRequest>,
}

/// The pod workers of one kubelet, by pod uid: the pod loop starts and feeds them, the
/// eviction manager lists the active pods and has one terminated. The lock is held only to
/// look up, insert or copy out, never across an await.
#[derive(Clone)]
pub struct Workers {
    handles: Arc<Mutex<HashMap<String, WorkerHandle>>>,
    /// What was allocated to the pods, which is what they hold of the node.
    allocations: Arc<Allocations>,
}

impl Workers {
    pub fn new(allocations: Arc<Allocations>) -> Workers {
        Workers {
            handles: Arc::default(),
            allocations,
        }
    }

    /// The pods whose workers run and have not finished (upstream's active pods), with the
    /// resources allocated to them: admission, resizes and eviction count those.
    pub fn active(&self) -> Vec<Arc<Pod>> {
        let pods: Vec<Arc<Pod>> = self
            .handles
            .lock()
            .values()
            .filter(|w| !w.mailbox.is_closed())
            .filter_map(|w| w.mailbox.borrow().clone())
            .filter(|pod| !is_finished(pod))
            .collect();
        pods.iter()
            .map(|p| self.allocations.allocated_pod(p))
            .collect()
    }

    /// Has the workers of these pods sync them again.
    fn nudge(&self, uids: &[String]) {
        let handles = self.handles.lock();
        for w in uids.iter().filter_map(|uid| handles.get(uid)) {
            w.mailbox.send_modify(|_| {});
        }
    }
}

#[async_trait]
impl PodTerminator for Workers {
    fn active_pods(&self) -> Vec<Arc<Pod>> {
        self.active()
    }

    async fn terminate(&self, pod: &Pod, termination: Termination) -> bool {
        let (done, stopped) = oneshot::channel();
        let sent = self
            .handles
            .lock()
            .get(&uid_of(pod))
            .is_some_and(|w| w.terminations.send(Box::new((termination, done))).is_ok());
        sent && stopped.await.is_ok()
    }
}

/// The informer of the pods bound to `node` (one watch, shared by everyone who asks).
pub(crate) fn node_pods(informers: &Informers, node: &str) -> Informer<Pod> {
    let selector = format!("spec.nodeName={node}");
    informers.filtered::<Pod>(watcher::Config::default().fields(&selector))
}

/// The uids of the pods bound to `node` as its informer has them, once it has listed: for the
/// container garbage collection, which removes what pods that are gone left.
pub(crate) fn known_pods(informers: &Informers, node: &str) -> KnownPods {
    let cache = node_pods(informers, node).cache().clone();
    Arc::new(move || {
        cache
            .is_ready()
            .then(|| cache.state().iter().map(|p| uid_of(p)).collect())
    })
}

/// What the pod loop needs besides the sync context.
pub(crate) struct PodLoop {
    pub client: kube::Client,
    pub informers: Informers,
    pub node_name: String,
    /// What the kubelet server sees.
    pub registry: PodRegistry,
    pub view: NodeView,
    /// The node's pressure conditions, for admission.
    pub pressure: Pressure,
    pub workers: Workers,
}

/// Follows this node's pods (an informer of `informers`), keeps the registry up to date,
/// admits each new pod (or rejects it: node pressure first, then its sysctls, then as
/// [`admission::check`]) and hands it to its worker.
pub(crate) async fn watch_pods(ctx: SyncContext, pod_loop: PodLoop) {
    let PodLoop {
        client,
        informers,
        node_name,
        registry,
        view,
        pressure,
        workers,
    } = pod_loop;
    let nodes: Api<Node> = Api::all(client);
    let pods = node_pods(&informers, &node_name);
    // admission awaits (a Node GET), handlers must not: the handler only forwards
    let (tx, mut rx) = mpsc::unbounded_channel();
    pods.cache().wait_until_ready().await;
    let (listed_tx, cache) = (tx.clone(), pods.cache().clone());
    pods.add_handler_then(
        move |change: &Change<Pod>| {
            let (pod, present) = match change {
                Change::Added(pod) | Change::Updated { new: pod, .. } => (pod, true),
                // a tombstone (missed while the watch was down) is a deletion too
                Change::Deleted { last, .. } => (last, false),
            };
            let pod = pod.clone();
            let _ = tx.send(PodUpdate::Pod { pod, present });
        },
        // the handler has just been handed every cached pod, and nothing later yet
        move || {
            let listed = cache.state().iter().map(|p| uid_of(p)).collect();
            let _ = listed_tx.send(PodUpdate::Listed(listed));
        },
    );
    // pods rejected at admission, until their Failed status comes back through the watch
    let mut rejected: HashSet<String> = HashSet::new();
    let (runtime_tx, mut runtime_changes) = mpsc::unbounded_channel();
    tokio::spawn(Pleg::new(ctx.runtime.clone()).run(runtime_tx));
    loop {
        let update = tokio::select! {
            Some(update) = rx.recv() => update,
            Some(changed) = runtime_changes.recv() => {
                // the worker syncs the pod it has again
                let changed: Vec<String> = changed.into_iter().collect();
                workers.nudge(&changed);
                continue;
            }
            else => return,
        };
        let (pod, present) = match update {
            PodUpdate::Pod { pod, present } => (pod, present),
            PodUpdate::Listed(listed) => {
                // volumes of pods that are gone without a worker (deleted while the kubelet
                // was down); done here, before a new pod's worker can create its directory
                let known =
                    |uid: &str| listed.contains(uid) || workers.handles.lock().contains_key(uid);
                ctx.volumes.tear_down_others(known);
                // and what was allocated to them
                if let Err(e) = ctx.allocations.retain(known) {
                    tracing::warn!(error = %e, "forgetting the allocations of pods that are gone");
                }
                // the sandboxes are listed before any later pod's worker starts, so that the
                // sandbox a new pod's worker creates meanwhile is never taken for an orphan;
                // stopping the orphans (within their grace) does not hold the loop up
                match orphans(&ctx, &listed).await {
                    Ok(found) => {
                        tokio::spawn(remove_orphans(ctx.clone(), found));
                    }
                    Err(e) => tracing::warn!(error = %e, "listing sandboxes to find orphans"),
                }
                continue;
            }
        };
        workers.handles.lock().retain(|_, w| !w.mailbox.is_closed());
        let uid = uid_of(&pod);
        if present {
            registry.upsert(&pod);
        } else {
            registry.remove(&uid);
        }
        if let Some(w) = workers.handles.lock().get(&uid) {
            let _ = w.mailbox.send(present.then_some(pod));
            continue;
        }
        if !present {
            continue;
        }
        if admission::needs_admission(&pod) {
            if rejected.contains(&uid) {
                continue;
            }
            // with what a restarted kubelet had allocated to it, if it had (upstream's AddPod)
            let allocated = ctx.allocations.allocated_pod(&pod);
            // no resize decides meanwhile on room this pod takes
            let decision = ctx.allocations.decision().await;
            // upstream's order: eviction's admission, then sysctls, then the predicates
            let admitted = admission::check_pressure(&allocated, &pressure.get())
                .and_then(|()| ctx.security.sysctls.admit(&allocated));
            let admitted = match admitted {
                Ok(()) => admit(&nodes, &node_name, &view, &allocated, &workers.active()).await,
                rejection => rejection,
            };
            if let Err(r) = admitted {
                drop(decision);
                admission::reject(&ctx, &pod, r).await;
                rejected.insert(uid);
                continue;
            }
            if let Err(e) = ctx.allocations.set_allocated(&allocated) {
                tracing::warn!(pod = ?pod.metadata.name, error = %e, "recording an admitted pod's resources");
            }
        } else if !ctx.allocations.is_allocated(&uid) {
            // started before this kubelet kept allocations: it holds what its spec asks
            if let Err(e) = ctx.allocations.set_allocated(&pod) {
                tracing::warn!(pod = ?pod.metadata.name, error = %e, "recording a pod's resources");
            }
        }
        rejected.remove(&uid);
        let (mailbox, rx) = watch::channel(Some(pod.clone()));
        let (terminations, terminations_rx) = mpsc::unbounded_channel();
        let node = NodeState {
            view: view.clone(),
            pressure: pressure.clone(),
            workers: workers.clone(),
        };
        tokio::spawn(pod_worker(ctx.clone(), node, pod, rx, terminations_rx));
        let handle = WorkerHandle {
            mailbox,
            terminations,
        };
        workers.handles.lock().insert(uid, handle);
    }
}

/// Admits a new pod beside the pods whose workers run and have not finished (`admitted`);
/// before a rejection the Node is read again, in case its labels, taints or allocatable
/// changed since it was last seen.
async fn admit(
    nodes: &Api<Node>,
    node_name: &str,
    view: &NodeView,
    pod: &Pod,
    admitted: &[Arc<Pod>],
) -> std::result::Result<(), admission::Rejection> {
    if admission::check(pod, &view.get(), admitted).is_ok() {
        return Ok(());
    }
    match nodes.get(node_name).await {
        Ok(node) => view.set(node),
        Err(e) => tracing::warn!(error = %e, "reading this node for admission"),
    }
    admission::check(pod, &view.get(), admitted)
}

/// The pods whose sandboxes the runtime has but that are not among `known` (this node's pods
/// at the first list, static pods' mirrors included): pods deleted while this kubelet was down,
/// or left by another kubelet on the same data dir. Each is rebuilt from its sandbox's labels,
/// once however many sandboxes it has.
pub(crate) async fn orphans(
    ctx: &SyncContext,
    known: &HashSet<String>,
) -> Result<Vec<Pod>, crate::cri::Error> {
    let sandboxes = ctx.runtime.list_pod_sandboxes(HashMap::new()).await?;
    let mut seen = HashSet::new();
    let mut found = Vec::new();
    for sandbox in sandboxes {
        let label = |k: &str| sandbox.labels.get(k).cloned();
        let Some(uid) = label(LABEL_POD_UID) else {
            continue;
        };
        if known.contains(&uid) || !seen.insert(uid.clone()) {
            continue;
        }
        let mut pod = Pod::default();
        pod.metadata.uid = Some(uid);
        pod.metadata.name = label(LABEL_POD_NAME);
        pod.metadata.namespace = label(LABEL_POD_NAMESPACE);
        found.push(pod);
    }
    Ok(found)
}

/// Stops and removes the sandboxes, containers (and their network state: stopping a sandbox
/// tears its CNI attachment down) of [`orphans`].
async fn remove_orphans(ctx: SyncContext, orphans: Vec<Pod>) {
    for pod in orphans {
        tracing::info!(pod = ?pod.metadata.name, "removing the containers of a pod that is gone");
        if let Err(e) = ctx.kill_pod(&pod, ORPHAN_GRACE_SECONDS).await {
            tracing::warn!(error = %e, "removing an orphaned pod");
        }
    }
}

/// How long an orphaned pod's containers get after SIGTERM: its spec, and so its grace
/// period, is gone with the object.
const ORPHAN_GRACE_SECONDS: i64 = 2;

/// How often a finished pod's worker asks the API server whether the pod still exists.
const FINISHED_CHECK: Duration = Duration::from_secs(10);

/// A finished (Succeeded or Failed) pod is deleted at once, with nothing for the kubelet to
/// stop, so its removal is seen only as a watch event; a worker whose pod has finished also
/// checks now and then, so that a missed event does not leave its containers behind.
#[derive(Default)]
struct FinishedChecks {
    /// The last sync found the pod finished.
    finished: bool,
    last: Option<tokio::time::Instant>,
}

impl FinishedChecks {
    fn due(&mut self) -> bool {
        if !self.finished {
            return false;
        }
        let now = tokio::time::Instant::now();
        match self.last {
            Some(t) if now.duration_since(t) < FINISHED_CHECK => false,
            _ => {
                self.last = Some(now);
                true
            }
        }
    }
}

async fn still_exists(ctx: &SyncContext, pod: &Pod) -> bool {
    let m = &pod.metadata;
    ctx.api
        .pod_exists(
            m.namespace.as_deref().unwrap_or("default"),
            m.name.as_deref().unwrap_or_default(),
            m.uid.as_deref().unwrap_or_default(),
        )
        .await
        // an error is no evidence that the pod is gone
        .unwrap_or(true)
}

/// The pod with the status the kubelet itself made terminal, if it did, when the object
/// predates that status (the watch can still deliver older versions after the kubelet's
/// write): phases never go back.
fn with_terminal_status(pod: Arc<Pod>, terminal: Option<&PodStatus>) -> Arc<Pod> {
    match terminal {
        Some(status) if !is_finished(&pod) => {
            let mut pod = (*pod).clone();
            pod.status = Some(status.clone());
            Arc::new(pod)
        }
        _ => pod,
    }
}

/// What a worker reads of the node to judge its pod's resize.
#[derive(Clone)]
struct NodeState {
    view: NodeView,
    pressure: Pressure,
    workers: Workers,
}

/// Runs one pod's worker until its pod is gone; then forgets what was allocated to the pod
/// and has the pods whose resize waits for room judged again.
async fn pod_worker(
    ctx: SyncContext,
    node: NodeState,
    pod: Arc<Pod>,
    rx: watch::Receiver<Option<Arc<Pod>>>,
    terminations: mpsc::UnboundedReceiver<TerminationRequest>,
) {
    let uid = uid_of(&pod);
    // the receiver goes with it: the pod is no longer active
    run_worker(&ctx, &node, pod, rx, terminations).await;
    if let Err(e) = ctx.allocations.remove(&uid) {
        tracing::warn!(error = %e, "forgetting a removed pod's allocation");
    }
    node.workers.nudge(&ctx.allocations.deferred());
}

/// The pod as it is to run this sync: a pod that runs has its resize judged first; one being
/// deleted or finished runs (and stops) with what it has.
async fn allocated(ctx: &SyncContext, node: &NodeState, pod: &Arc<Pod>) -> Arc<Pod> {
    if pod.metadata.deletion_timestamp.is_some() || is_finished(pod) {
        return ctx.allocations.allocated_pod(pod);
    }
    let inputs = || {
        let inputs = ResizeInputs {
            node: node.view.get(),
            pressure: node.pressure.get(),
        };
        (inputs, node.workers.active())
    };
    ctx.allocate_resize(pod, inputs).await
}

/// Syncs one pod when its mailbox changes (a new object, or the [`Pleg`]'s nudge) and
/// whenever its last sync asked to be called again; carries out the terminations the
/// kubelet asks for between syncs.
///
/// A worker spends its life waiting, one per pod, so what it holds while it waits is what a
/// pod costs: the syncs it awaits are boxed, or the worker's future would be as large as the
/// largest of them at every moment (17 KiB a pod, measured with 5,000 hollow pods).
async fn run_worker(
    ctx: &SyncContext,
    node: &NodeState,
    mut last: Arc<Pod>,
    mut rx: watch::Receiver<Option<Arc<Pod>>>,
    mut terminations: mpsc::UnboundedReceiver<TerminationRequest>,
) {
    // the pod's probe state lives as long as its worker
    let mut probes = crate::probe::Probes::default();
    let mut finished_checks = FinishedChecks::default();
    // the Failed status written by a termination
    let mut terminal: Option<PodStatus> = None;
    loop {
        let current = rx.borrow_and_update().clone();
        let current = current.map(|pod| with_terminal_status(pod, terminal.as_ref()));
        let delay = match current {
            None => {
                // removed from the API without us (a forced delete): stop what is left
                if let Err(e) = Box::pin(ctx.kill_pod(&last, 0)).await {
                    tracing::warn!(error = %e, "stopping a removed pod");
                }
                return;
            }
            Some(pod) => {
                if finished_checks.due() && !Box::pin(still_exists(ctx, &pod)).await {
                    tracing::info!(pod = ?pod.metadata.name, "a finished pod is gone from the API server");
                    if let Err(e) = Box::pin(ctx.kill_pod(&pod, 0)).await {
                        tracing::warn!(error = %e, "stopping a removed pod");
                    }
                    return;
                }
                let pod = Box::pin(allocated(ctx, node, &pod)).await;
                let result = Box::pin(ctx.sync_pod(&pod, &mut probes)).await;
                last = pod;
                match result {
                    Ok(Outcome::Done) => return,
                    Ok(Outcome::Resync(d)) => d,
                    Ok(Outcome::Finished) => {
                        finished_checks.finished = true;
                        FINISHED_CHECK
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "pod sync failed");
                        Duration::from_secs(2)
                    }
                }
            }
        };
        tokio::select! {
            changed = rx.changed() => if changed.is_err() { return },
            Some(request) = terminations.recv() => {
                let (termination, done) = *request;
                let pod = rx.borrow().clone().unwrap_or_else(|| last.clone());
                let pod = with_terminal_status(pod, terminal.as_ref());
                terminal = Some(Box::pin(ctx.terminate(&pod, &termination)).await);
                let _ = done.send(());
            }
            () = tokio::time::sleep(delay) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    fn future_size<A, B, C, D, E, F>(_: impl Fn(A, B, C, D, E) -> F) -> usize {
        std::mem::size_of::<F>()
    }

    /// What a waiting worker holds is what each pod costs (see `run_worker`).
    #[test]
    fn a_waiting_worker_holds_little() {
        let size = future_size(super::pod_worker);
        assert!(size < 2048, "a pod worker's future takes {size} bytes");
    }
}
