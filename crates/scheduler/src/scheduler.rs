//! The scheduling loop (upstream's `scheduleOne`): pop a pod, pick a node from a snapshot of
//! the cache, assume the pod there, and bind it in a task of its own so that the next pod's
//! cycle does not wait for the API round trip. Watch events come in through the `on_*`
//! methods (see `informer`).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use k8s_openapi::api::core::v1::{Node, PersistentVolumeClaim, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use parking_lot::Mutex;
use skiff_apimachinery::labels::Selector;

use crate::algorithm::{Algorithm, FitError, ScheduleError};
use crate::api::ClusterApi;
use crate::cache::Cache;
use crate::framework::events::{self, ClusterEvent};
use crate::framework::{
    Claims, Code, CycleState, Framework, NamespaceLabels, PodInfo, Snapshot, Workloads,
};
use crate::metrics::{Metrics, Outcome};
use crate::nominator::Nominator;
use crate::queue::{Failure, QueuedPod, SchedulingQueue};

/// The scheduler name a pod without `spec.schedulerName` gets (upstream's default).
pub const DEFAULT_SCHEDULER_NAME: &str = "default-scheduler";

/// The attempt in progress: the popped pod, its scheduling cycle, and when the attempt began.
struct Attempt {
    queued: QueuedPod,
    cycle: u64,
    started: Instant,
}

impl Attempt {
    /// How long the pod waited in the queue for this attempt: from when it entered the queue
    /// (gated time and backoff after earlier attempts included) to when this attempt popped it.
    fn queue_wait(&self) -> Duration {
        self.started
            .saturating_duration_since(self.queued.first_seen)
    }
}

struct Profile {
    framework: Arc<Framework>,
    algorithm: Mutex<Algorithm>,
}

/// PodDisruptionBudgets by `namespace/name`, and the list each cycle's snapshot shares.
#[derive(Default)]
struct Budgets {
    by_key: HashMap<String, Arc<PodDisruptionBudget>>,
    list: Arc<Vec<Arc<PodDisruptionBudget>>>,
}

/// One scheduler process's state: profiles, queue, cache.
pub struct Scheduler {
    profiles: HashMap<String, Profile>,
    queue: SchedulingQueue,
    /// Locked briefly by watch handlers and once per cycle to update the snapshot.
    cache: Mutex<Cache>,
    /// Pods preemption nominated to nodes, until they are bound.
    nominator: Mutex<Nominator>,
    /// PodDisruptionBudgets, for preemption.
    pdbs: Mutex<Budgets>,
    /// PersistentVolumeClaims (copied on write: each cycle's snapshot shares them).
    claims: Mutex<Arc<Claims>>,
    /// Namespaces' labels (copied on write: each cycle's snapshot shares them).
    namespaces: Mutex<Arc<NamespaceLabels>>,
    /// Services' and controllers' selectors (copied on write when a selector changes).
    workloads: Mutex<Arc<Workloads>>,
    /// The scheduling loop's view, brought up to date from the cache at each cycle (only the
    /// loop touches it; the mutex makes that visible to the compiler).
    snapshot: Mutex<Snapshot>,
    api: Arc<dyn ClusterApi>,
    pub metrics: Metrics,
}

fn scheduler_name(pod: &Pod) -> &str {
    pod.spec
        .as_ref()
        .and_then(|s| s.scheduler_name.as_deref())
        .unwrap_or(DEFAULT_SCHEDULER_NAME)
}

fn pod_key(pod: &Pod) -> String {
    format!(
        "{}/{}",
        pod.metadata.namespace.as_deref().unwrap_or("default"),
        pod.metadata.name.as_deref().unwrap_or("")
    )
}

fn is_terminal(pod: &Pod) -> bool {
    matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    )
}

impl Scheduler {
    pub fn new(profiles: Vec<Framework>, api: Arc<dyn ClusterApi>) -> Arc<Scheduler> {
        let profiles: HashMap<String, Profile> = profiles
            .into_iter()
            .enumerate()
            .map(|(i, fw)| {
                let seed = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(1, |d| d.as_nanos() as u64)
                    .wrapping_add(i as u64);
                (
                    fw.scheduler_name().to_string(),
                    Profile {
                        framework: Arc::new(fw),
                        algorithm: Mutex::new(Algorithm::new(seed)),
                    },
                )
            })
            .collect();
        let queue = SchedulingQueue::for_profiles(profiles.values().map(|p| &p.framework));
        Arc::new(Scheduler {
            profiles,
            queue,
            cache: Mutex::new(Cache::default()),
            nominator: Mutex::default(),
            pdbs: Mutex::default(),
            claims: Mutex::default(),
            namespaces: Mutex::default(),
            workloads: Mutex::default(),
            snapshot: Mutex::new(Snapshot::default()),
            api,
            metrics: Metrics::default(),
        })
    }

    pub fn queue(&self) -> &SchedulingQueue {
        &self.queue
    }

    /// Runs `f` with the cache locked (tests and metrics).
    pub fn with_cache<T>(&self, f: impl FnOnce(&Cache) -> T) -> T {
        f(&self.cache.lock())
    }

    /// A pod was added or changed.
    pub fn on_pod(&self, pod: Arc<Pod>) {
        let key = pod_key(&pod);
        let assigned = pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.as_deref())
            .is_some_and(|n| !n.is_empty());
        if assigned {
            self.queue.delete(&key);
            self.nominator.lock().remove(&key);
            if is_terminal(&pod) {
                self.cache.lock().remove_pod(&key);
                self.queue.on_event(ClusterEvent::ASSIGNED_POD_DELETE);
            } else {
                let event = self.cache.lock().add_or_update_pod(pod);
                if !event.is_empty() {
                    self.queue.on_event(event);
                }
            }
        } else if pod.metadata.deletion_timestamp.is_some() || is_terminal(&pod) {
            self.queue.delete(&key);
            self.nominator.lock().remove(&key);
        } else if self.profiles.contains_key(scheduler_name(&pod)) {
            let info = Arc::new(PodInfo::new(pod));
            self.nominator.lock().update(info.clone());
            self.queue.add_or_update(info);
        }
    }

    /// A pod was deleted: its resources are free, so parked pods may fit now; if it was
    /// waiting at Permit, it waits no more.
    pub fn on_pod_deleted(&self, pod: &Pod) {
        let key = pod_key(pod);
        if let Some(uid) = pod.metadata.uid.as_deref() {
            for p in self.profiles.values() {
                if let Some(waiting) = p.framework.waiting_pods().get(uid) {
                    waiting.reject("", "removed");
                }
            }
        }
        self.queue.delete(&key);
        self.nominator.lock().remove(&key);
        let was_placed = {
            let mut cache = self.cache.lock();
            let placed = cache.has_pod(&key);
            cache.remove_pod(&key);
            placed
        };
        if was_placed {
            self.queue.on_event(ClusterEvent::ASSIGNED_POD_DELETE);
        }
    }

    /// A node was added or changed: parked pods come back only if what changed is something
    /// their rejecting plugins read (a heartbeat wakes none).
    pub fn on_node(&self, node: Arc<Node>) {
        let event = {
            let mut cache = self.cache.lock();
            let name = node.metadata.name.as_deref().unwrap_or_default();
            let event = events::node_change(cache.node(name).map(|n| n.node.as_ref()), &node);
            cache.add_or_update_node(node);
            event
        };
        self.queue.on_event(event);
    }

    pub fn on_node_deleted(&self, name: &str) {
        self.cache.lock().remove_node(name);
    }

    /// A namespace was added or changed (its labels), or deleted (`None`): pod affinity's
    /// namespace selectors read them.
    pub fn on_namespace(&self, name: &str, labels: Option<BTreeMap<String, String>>) {
        let mut namespaces = self.namespaces.lock();
        let map = Arc::make_mut(&mut namespaces);
        match labels {
            Some(l) => map.insert(name.to_string(), l),
            None => map.remove(name),
        };
    }

    /// A Service's selector, as of an add or change, or `None` once it is deleted (or selects
    /// nothing): default spreading reads them.
    pub fn on_service(
        &self,
        namespace: &str,
        name: &str,
        selector: Option<BTreeMap<String, String>>,
    ) {
        let selector = selector.filter(|s| !s.is_empty());
        let mut workloads = self.workloads.lock();
        let current = workloads.services.get(namespace).and_then(|s| s.get(name));
        if current == selector.as_ref() {
            return;
        }
        let services = &mut Arc::make_mut(&mut workloads).services;
        match selector {
            Some(s) => {
                services
                    .entry(namespace.to_string())
                    .or_default()
                    .insert(name.to_string(), s);
            }
            None => {
                if let Some(in_namespace) = services.get_mut(namespace) {
                    in_namespace.remove(name);
                }
            }
        }
    }

    /// A ReplicaSet's or StatefulSet's selector, or `None` once it is deleted.
    pub fn on_controller(
        &self,
        kind: &str,
        namespace: &str,
        name: &str,
        selector: Option<Selector>,
    ) {
        let key = format!("{kind}/{namespace}/{name}");
        let mut workloads = self.workloads.lock();
        if workloads.controllers.get(&key) == selector.as_ref() {
            return;
        }
        let controllers = &mut Arc::make_mut(&mut workloads).controllers;
        match selector {
            Some(s) => controllers.insert(key, s),
            None => controllers.remove(&key),
        };
    }

    /// A PodDisruptionBudget was added, changed or deleted (`None`): preemption reads them.
    pub fn on_pdb(&self, key: String, pdb: Option<Arc<PodDisruptionBudget>>) {
        let mut pdbs = self.pdbs.lock();
        match pdb {
            Some(p) => pdbs.by_key.insert(key, p),
            None => pdbs.by_key.remove(&key),
        };
        pdbs.list = Arc::new(pdbs.by_key.values().cloned().collect());
    }

    /// A PersistentVolumeClaim was added, changed or deleted (`None`): volume checks read
    /// them, and an added or changed claim may let a parked pod in.
    pub fn on_claim(&self, key: String, claim: Option<Arc<PersistentVolumeClaim>>) {
        let changed = {
            let mut claims = self.claims.lock();
            let claims = Arc::make_mut(&mut claims);
            match claim {
                Some(c) => {
                    claims.insert(key, c);
                    true
                }
                None => {
                    claims.remove(&key);
                    false
                }
            }
        };
        if changed {
            self.queue.on_event(ClusterEvent::PVC_CHANGE);
        }
    }

    /// A PersistentVolume, StorageClass or CSINode was added or changed (`event` says which):
    /// pods the volume plugins rejected may fit now.
    pub fn on_storage_event(&self, event: ClusterEvent) {
        self.queue.on_event(event);
    }

    /// Schedules pods until the queue is closed; flushes backoff every second.
    pub async fn run(self: &Arc<Self>) {
        let flusher = {
            let this = self.clone();
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(Duration::from_secs(1));
                loop {
                    tick.tick().await;
                    this.queue.flush();
                }
            })
        };
        while self.schedule_one().await {}
        flusher.abort();
    }

    /// One scheduling cycle; `false` once the queue is closed.
    pub async fn schedule_one(self: &Arc<Self>) -> bool {
        let Some((queued, cycle)) = self.queue.pop().await else {
            return false;
        };
        let attempt = Attempt {
            queued,
            cycle,
            started: Instant::now(),
        };
        let pod = attempt.queued.info.clone();
        let Some(profile) = self.profiles.get(scheduler_name(&pod.pod)) else {
            self.queue.done(&pod.key);
            return true;
        };
        let fw = profile.framework.clone();
        let mut state = CycleState::default();
        state.queue_wait = Some(attempt.queue_wait());
        let result = {
            let mut snapshot = self.snapshot.lock();
            self.cache.lock().update_snapshot(&mut snapshot);
            snapshot.set_nominated(self.nominator.lock().pods());
            snapshot.set_pdbs(self.pdbs.lock().list.clone());
            snapshot.set_claims(self.claims.lock().clone());
            snapshot.set_namespaces(self.namespaces.lock().clone());
            snapshot.set_workloads(self.workloads.lock().clone());
            profile
                .algorithm
                .lock()
                .schedule(&fw, &mut state, &pod, &snapshot)
        };
        let chosen = match result {
            Ok(r) => r.node,
            Err(e) => {
                let (reason, failure) = match &e {
                    ScheduleError::Plugin(_) => ("SchedulerError", Failure::Error),
                    ScheduleError::NoNodes => (
                        "Unschedulable",
                        Failure::Unschedulable(ClusterEvent::NODE_ADD),
                    ),
                    ScheduleError::Fit(fit) => (
                        "Unschedulable",
                        Failure::Unschedulable(fw.events_of(fit.rejecting_plugins())),
                    ),
                };
                let nominated = match &e {
                    ScheduleError::Fit(fit) => self.nominate(&fw, &pod, fit),
                    _ => None,
                };
                self.fail(&attempt, failure, reason, e.to_string(), nominated);
                return true;
            }
        };

        // assume: the next cycle counts the pod on its node before the binding lands
        let mut placed = (*pod.pod).clone();
        placed.spec.get_or_insert_with(Default::default).node_name = Some(chosen.clone());
        let assumed = Arc::new(PodInfo::new(Arc::new(placed)));
        self.cache.lock().assume(assumed.clone(), &chosen);
        let reserved = fw.run_reserve(&mut state, &assumed, &chosen);
        if !reserved.is_success() {
            self.cache.lock().forget(&pod.key);
            let msg = format!(
                "running Reserve plugin {:?}: {}",
                reserved.plugin(),
                reserved.message()
            );
            self.fail(&attempt, Failure::Error, "SchedulerError", msg, None);
            return true;
        }
        let permit = fw.run_permit(&state, &assumed, &chosen);
        if !matches!(permit.code(), Code::Success | Code::Wait) {
            fw.run_unreserve(&mut state, &assumed, &chosen);
            self.cache.lock().forget(&pod.key);
            let failure = if permit.is_rejected() {
                Failure::Unschedulable(fw.events_of([permit.plugin()]))
            } else {
                Failure::Error
            };
            self.fail(&attempt, failure, "Unschedulable", permit.message(), None);
            return true;
        }
        self.queue.done(&pod.key);
        let this = self.clone();
        tokio::spawn(async move {
            this.bind(fw, state, assumed, chosen, attempt).await;
        });
        true
    }

    /// The binding cycle: PreBind, Bind, PostBind; on failure the pod is forgotten and goes
    /// back to the queue after its backoff.
    async fn bind(
        &self,
        fw: Arc<Framework>,
        mut state: CycleState,
        pod: Arc<PodInfo>,
        node: String,
        attempt: Attempt,
    ) {
        let Attempt {
            queued, started, ..
        } = attempt;
        let mut status = fw.wait_on_permit(&pod).await;
        let mut stage = "Permit";
        if status.is_success() {
            stage = "PreBind";
            status = fw.run_pre_bind(&state, &pod, &node).await;
        }
        if status.is_success() {
            stage = "Bind";
            status = fw.run_bind(&state, &pod, &node).await;
        }
        if status.is_success() {
            fw.run_post_bind(&state, &pod, &node);
            let seconds = started.elapsed().as_secs_f64();
            self.metrics
                .attempt(Outcome::Scheduled, fw.scheduler_name(), seconds);
            self.metrics
                .scheduled(queued.first_seen.elapsed().as_secs_f64());
            self.api.scheduled(&pod, &node).await;
            return;
        }
        tracing::info!(pod = %pod.key, %node, %status, "binding failed");
        fw.run_unreserve(&mut state, &pod, &node);
        self.cache.lock().forget(&pod.key);
        let seconds = started.elapsed().as_secs_f64();
        self.metrics
            .attempt(Outcome::Error, fw.scheduler_name(), seconds);
        self.queue.add_after_failed_binding(
            queued.info.clone(),
            queued.attempts,
            queued.first_seen,
        );
        // a Permit or PreBind plugin's refusal is the pod's lot; anything else is the
        // scheduler's error, worded as upstream's for the step that failed
        let (reason, msg) = if status.is_rejected() {
            ("Unschedulable", status.message())
        } else if stage == "PreBind" {
            (
                "SchedulerError",
                format!(
                    "running PreBind plugin {:?}: {}",
                    status.plugin(),
                    status.message()
                ),
            )
        } else {
            (
                "SchedulerError",
                format!("binding rejected: {}", status.message()),
            )
        };
        self.api.failed(&queued.info, reason, &msg, None).await;
    }

    /// Acts on what preemption decided for a pod no node fits: nominates it (so the room is
    /// kept for it) and evicts the victims in a task of their own, or clears an earlier
    /// nomination. Returns the nomination to write to the pod's status.
    fn nominate(
        self: &Arc<Self>,
        fw: &Framework,
        pod: &Arc<PodInfo>,
        fit: &FitError,
    ) -> Option<String> {
        if fw.has_post_filter() {
            self.metrics.preemption(fit.victims.len());
        }
        let node = fit.nominated_node.clone()?;
        if node.is_empty() {
            self.nominator.lock().remove(&pod.key);
            return Some(node);
        }
        self.nominator.lock().add(pod.clone(), &node);
        let this = self.clone();
        let (pod, victims, profile) = (
            pod.clone(),
            fit.victims.clone(),
            fw.scheduler_name().to_string(),
        );
        let at = node.clone();
        tokio::spawn(async move {
            let evictions = victims
                .iter()
                .map(|v| this.api.preempt(v, &pod, &at, &profile));
            futures::future::join_all(evictions).await;
        });
        Some(node)
    }

    /// Requeues a pod that got no node and reports why (in a task: the loop goes on).
    fn fail(
        self: &Arc<Self>,
        attempt: &Attempt,
        failure: Failure,
        reason: &'static str,
        message: String,
        nominated: Option<String>,
    ) {
        let outcome = match failure {
            Failure::Unschedulable(_) => Outcome::Unschedulable,
            Failure::Error => Outcome::Error,
        };
        let queued = &attempt.queued;
        let profile = scheduler_name(&queued.info.pod);
        self.metrics
            .attempt(outcome, profile, attempt.started.elapsed().as_secs_f64());
        tracing::debug!(pod = %queued.info.key, %message, "pod not scheduled");
        self.queue
            .requeue_failed(&queued.info.key, attempt.cycle, failure);
        let this = self.clone();
        let pod = queued.info.clone();
        tokio::spawn(async move {
            this.api
                .failed(&pod, reason, &message, nominated.as_deref())
                .await;
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{Call, RecordingApi};
    use crate::binder::DefaultBinder;
    use crate::framework::testing::{PodBuilder, node};
    use crate::plugins::node_unschedulable::NodeUnschedulable;

    fn scheduler(api: Arc<RecordingApi>) -> Arc<Scheduler> {
        let fw = Framework::new(
            DEFAULT_SCHEDULER_NAME,
            vec![
                (Arc::new(NodeUnschedulable), 0),
                (Arc::new(DefaultBinder::new(api.clone())), 0),
            ],
        );
        Scheduler::new(vec![fw], api)
    }

    /// Lets spawned binding and reporting tasks run.
    async fn settle() {
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test]
    async fn a_pending_pod_is_bound_to_the_node_that_fits_and_reported() {
        let api = RecordingApi::new();
        let s = scheduler(api.clone());
        s.on_node(Arc::new(node("cordoned").unschedulable().build()));
        s.on_node(Arc::new(node("open").build()));
        s.on_pod(Arc::new(PodBuilder::new("web").build()));
        assert!(s.schedule_one().await);
        settle().await;
        assert_eq!(
            api.calls(),
            vec![
                Call::Bind {
                    pod: "default/web".into(),
                    node: "open".into()
                },
                Call::Scheduled {
                    pod: "default/web".into(),
                    node: "open".into()
                },
            ]
        );
        assert!(s.with_cache(|c| c.is_assumed("default/web")));
        // the watch shows it bound: confirmed
        s.on_pod(Arc::new(PodBuilder::new("web").node_name("open").build()));
        assert!(!s.with_cache(|c| c.is_assumed("default/web")));
    }

    #[tokio::test(start_paused = true)]
    async fn a_pod_no_node_fits_is_reported_and_parked_until_a_node_changes() {
        let api = RecordingApi::new();
        let s = scheduler(api.clone());
        s.on_node(Arc::new(node("n1").unschedulable().build()));
        s.on_pod(Arc::new(PodBuilder::new("web").build()));
        assert!(s.schedule_one().await);
        settle().await;
        assert_eq!(
            api.calls(),
            vec![Call::Failed {
                pod: "default/web".into(),
                reason: "Unschedulable".into(),
                message: "0/1 nodes are available: 1 node(s) were unschedulable.".into(),
            }]
        );
        assert_eq!(s.queue().sizes().unschedulable, 1);
        // a heartbeat (a condition's timestamp) or a new label wakes nothing NodeUnschedulable reads
        let mut beat = node("n1").unschedulable().build();
        beat.status.get_or_insert_with(Default::default).conditions = Some(vec![
            serde_json::from_value(serde_json::json!({"type": "Ready", "status": "True",
                "lastHeartbeatTime": "2026-01-01T00:00:10Z"}))
            .unwrap(),
        ]);
        s.on_node(Arc::new(beat.clone()));
        beat.metadata
            .labels
            .get_or_insert_with(Default::default)
            .insert("zone".into(), "a".into());
        s.on_node(Arc::new(beat));
        assert_eq!(s.queue().sizes().unschedulable, 1);
        s.on_node(Arc::new(node("n1").build()));
        // out of the unschedulable pods, into backoff for the rest of its first second
        assert_eq!(s.queue().sizes().backoff, 1);
        tokio::time::advance(Duration::from_secs(1)).await;
        s.queue().flush();
        assert!(s.schedule_one().await);
        settle().await;
        assert!(api.calls().contains(&Call::Bind {
            pod: "default/web".into(),
            node: "n1".into()
        }));
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_binding_is_forgotten_and_retried_after_backoff() {
        let api = RecordingApi::new();
        api.fail_binds.lock().push("default/web".into());
        let s = scheduler(api.clone());
        s.on_node(Arc::new(node("n1").build()));
        s.on_pod(Arc::new(PodBuilder::new("web").build()));
        assert!(s.schedule_one().await);
        settle().await;
        assert!(!s.with_cache(|c| c.is_assumed("default/web")));
        assert_eq!(s.queue().sizes().backoff, 1);
        api.fail_binds.lock().clear();
        tokio::time::advance(Duration::from_secs(1)).await;
        s.queue().flush();
        assert!(s.schedule_one().await);
        settle().await;
        let binds = api
            .calls()
            .iter()
            .filter(|c| matches!(c, Call::Bind { .. }))
            .count();
        assert_eq!(binds, 2);
        // the retry's queue wait counts from when the pod first entered the queue
        let web = || "default/web".to_string();
        assert_eq!(
            *api.queue_waits.lock(),
            [
                (web(), Some(Duration::ZERO)),
                (web(), Some(Duration::from_secs(1)))
            ]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn the_binding_carries_how_long_the_pod_waited_in_the_queue_failed_attempts_included() {
        let api = RecordingApi::new();
        let s = scheduler(api.clone());
        s.on_node(Arc::new(node("n1").unschedulable().build()));
        s.on_pod(Arc::new(PodBuilder::new("web").build()));
        tokio::time::advance(Duration::from_millis(250)).await;
        assert!(s.schedule_one().await);
        assert_eq!(s.queue().sizes().unschedulable, 1);
        tokio::time::advance(Duration::from_secs(3)).await;
        s.on_node(Arc::new(node("n1").build()));
        s.on_pod(Arc::new(PodBuilder::new("late").build()));
        tokio::time::advance(Duration::from_millis(5)).await;
        assert!(s.schedule_one().await);
        assert!(s.schedule_one().await);
        settle().await;
        let mut waits = api.queue_waits.lock().clone();
        waits.sort();
        assert_eq!(
            waits,
            [
                ("default/late".into(), Some(Duration::from_millis(5))),
                ("default/web".into(), Some(Duration::from_millis(3255))),
            ]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_pod_no_node_fits_preempts_lower_priority_pods_and_its_room_is_kept() {
        use crate::plugins::default_preemption::DefaultPreemption;
        use crate::plugins::node_resources_fit::NodeResourcesFit;
        let api = RecordingApi::new();
        let fw = Framework::new(
            DEFAULT_SCHEDULER_NAME,
            vec![
                (Arc::new(NodeResourcesFit::default()), 1),
                (Arc::new(DefaultPreemption::default()), 0),
                (Arc::new(DefaultBinder::new(api.clone())), 0),
            ],
        );
        let s = Scheduler::new(vec![fw], api.clone());
        let two_cpus = |name: &str, priority: i32| {
            PodBuilder::new(name)
                .container("c", &[("cpu", "2")])
                .priority(priority)
        };
        s.on_node(Arc::new(node("n1").cpu("2").build()));
        let low = two_cpus("low", 1).node_name("n1").build();
        s.on_pod(Arc::new(low.clone()));
        s.on_pod(Arc::new(two_cpus("vip", 100).build()));
        assert!(s.schedule_one().await);
        settle().await;
        // the eviction and the report run in tasks of their own, in either order
        let mut calls = api.calls();
        calls.sort_by_key(|c| format!("{c:?}"));
        assert_eq!(
            calls,
            vec![
                Call::Failed {
                    pod: "default/vip".into(),
                    reason: "Unschedulable".into(),
                    message: "0/1 nodes are available: 1 Insufficient cpu.".into(),
                },
                Call::Preempt {
                    victim: "default/low".into(),
                    preemptor: "default/vip".into(),
                    node: "n1".into(),
                },
            ]
        );
        // the victim goes; a pod of lower priority arriving meanwhile does not take its room
        s.on_pod_deleted(&low);
        s.on_pod(Arc::new(two_cpus("filler", 0).build()));
        assert!(s.schedule_one().await);
        settle().await;
        assert!(
            api.calls().contains(&Call::Failed {
                pod: "default/filler".into(),
                reason: "Unschedulable".into(),
                message: "0/1 nodes are available: 1 Insufficient cpu. preemption: 0/1 nodes are \
                      available: 1 No preemption victims found for incoming pod.."
                    .into(),
            })
        );
        tokio::time::advance(Duration::from_secs(1)).await;
        s.queue().flush();
        assert!(s.schedule_one().await);
        settle().await;
        assert!(api.calls().contains(&Call::Bind {
            pod: "default/vip".into(),
            node: "n1".into()
        }));
    }

    /// A Permit plugin that asks every pod to wait up to 10 s.
    struct Gate;

    impl crate::framework::Plugin for Gate {
        fn name(&self) -> &'static str {
            "Gate"
        }
        fn as_permit(&self) -> Option<&dyn crate::framework::PermitPlugin> {
            Some(self)
        }
    }

    impl crate::framework::PermitPlugin for Gate {
        fn permit(
            &self,
            _: &CycleState,
            _: &PodInfo,
            _: &str,
        ) -> (crate::framework::Status, Duration) {
            (
                crate::framework::Status::new(Code::Wait, Vec::new()),
                Duration::from_secs(10),
            )
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_pod_waiting_at_permit_binds_once_allowed_and_is_turned_away_at_the_timeout() {
        let api = RecordingApi::new();
        let fw = Framework::new(
            DEFAULT_SCHEDULER_NAME,
            vec![
                (Arc::new(Gate), 0),
                (Arc::new(DefaultBinder::new(api.clone())), 0),
            ],
        );
        let s = Scheduler::new(vec![fw], api.clone());
        let waiting = s.profiles[DEFAULT_SCHEDULER_NAME]
            .framework
            .waiting_pods()
            .clone();
        s.on_node(Arc::new(node("n1").build()));
        s.on_pod(Arc::new(PodBuilder::new("allowed").build()));
        assert!(s.schedule_one().await);
        settle().await;
        assert!(api.calls().is_empty(), "{:?}", api.calls());
        let w = waiting.get("uid-allowed").expect("waiting at Permit");
        assert_eq!((w.node.as_str(), w.pending_plugins()), ("n1", vec!["Gate"]));
        assert!(s.with_cache(|c| c.is_assumed("default/allowed")));
        w.allow("Gate");
        settle().await;
        assert!(api.calls().contains(&Call::Bind {
            pod: "default/allowed".into(),
            node: "n1".into()
        }));

        s.on_pod(Arc::new(PodBuilder::new("forgotten").build()));
        assert!(s.schedule_one().await);
        settle().await;
        tokio::time::advance(Duration::from_secs(10)).await;
        settle().await;
        assert!(api.calls().contains(&Call::Failed {
            pod: "default/forgotten".into(),
            reason: "Unschedulable".into(),
            message: "rejected due to timeout after waiting 10s at plugin Gate".into(),
        }));
        assert!(!s.with_cache(|c| c.is_assumed("default/forgotten")));
        assert!(waiting.get("uid-forgotten").is_none());
    }

    #[tokio::test]
    async fn pods_for_other_schedulers_and_bound_pods_are_not_queued() {
        let s = scheduler(RecordingApi::new());
        s.on_pod(Arc::new(
            PodBuilder::new("theirs").scheduler_name("other").build(),
        ));
        s.on_pod(Arc::new(PodBuilder::new("bound").node_name("n1").build()));
        assert_eq!(s.queue().sizes().active, 0);
    }

    /// The default profile, or the profile `yaml` configures.
    fn configured(api: Arc<RecordingApi>, yaml: &str) -> Arc<Scheduler> {
        let config = crate::config::Configuration::parse(yaml).unwrap();
        Scheduler::new(config.frameworks(api.clone()).unwrap(), api)
    }

    fn bound(api: &RecordingApi, name: &str) -> bool {
        api.calls()
            .iter()
            .any(|c| matches!(c, Call::Bind { pod, .. } if pod == &format!("default/{name}")))
    }

    #[tokio::test(start_paused = true)]
    async fn a_gated_pod_is_never_attempted_until_an_update_removes_its_last_gate() {
        let api = RecordingApi::new();
        let s = configured(api.clone(), "");
        s.on_node(Arc::new(node("n1").build()));
        let held = || PodBuilder::new("held");
        s.on_pod(Arc::new(held().scheduling_gates(&["a", "b"]).build()));
        s.on_pod(Arc::new(PodBuilder::new("free").build()));
        // the loop schedules the other pod; the gated one is not popped, and not reported
        assert!(s.schedule_one().await);
        settle().await;
        assert!(bound(&api, "free"));
        assert!(!bound(&api, "held"));
        assert!(
            !api.calls().iter().any(|c| matches!(c, Call::Failed { .. })),
            "{:?}",
            api.calls()
        );
        assert_eq!(s.queue().sizes().gated, 1);
        s.on_pod(Arc::new(held().scheduling_gates(&["b"]).build()));
        assert_eq!(s.queue().sizes().gated, 1);
        s.on_pod(Arc::new(held().build()));
        assert!(s.schedule_one().await);
        settle().await;
        assert!(bound(&api, "held"));
    }

    #[tokio::test(start_paused = true)]
    async fn a_deleted_gated_pod_leaves_the_queue() {
        let s = configured(RecordingApi::new(), "");
        let pod = PodBuilder::new("held").scheduling_gates(&["a"]).build();
        s.on_pod(Arc::new(pod.clone()));
        s.on_pod_deleted(&pod);
        assert_eq!(s.queue().sizes(), crate::queue::QueueSizes::default());
    }

    #[tokio::test(start_paused = true)]
    async fn with_scheduling_gates_disabled_a_gated_pod_is_scheduled() {
        for yaml in [
            "profiles:\n- plugins:\n    preEnqueue:\n      disabled:\n      - name: SchedulingGates\n",
            "profiles:\n- plugins:\n    multiPoint:\n      disabled:\n      - name: SchedulingGates\n",
        ] {
            let api = RecordingApi::new();
            let s = configured(api.clone(), yaml);
            s.on_node(Arc::new(node("n1").build()));
            s.on_pod(Arc::new(
                PodBuilder::new("held").scheduling_gates(&["a"]).build(),
            ));
            assert!(s.schedule_one().await);
            settle().await;
            assert!(bound(&api, "held"), "{yaml}");
        }
    }
}
