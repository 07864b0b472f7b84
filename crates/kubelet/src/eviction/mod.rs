//! The eviction manager, as upstream's `pkg/kubelet/eviction`: every 10 s (upstream's
//! monitoring interval) it observes the node's signals ([`signals`]), finds the thresholds of
//! `--eviction-hard` and `--eviction-soft` that are crossed (a soft one for longer than its
//! grace period; one crossed stays so until the signal is `evictionMinimumReclaim` past it),
//! reports MemoryPressure, DiskPressure and PIDPressure (held for
//! `evictionPressureTransitionPeriod` after the last crossing) to the Node status and to
//! admission through [`Pressure`], and, when a threshold is due, first frees what it can on the
//! node ([`NodeReclaimer`], for disk), then evicts one pod, the first of [`rank`]'s order:
//! a Warning `Evicted` event, status `phase: Failed`, `reason: Evicted`, upstream's message and
//! a `DisruptionTarget` condition, its containers stopped within 1 s for a hard threshold and
//! within `evictionMaxPodGracePeriod` (at most the pod's own) for a soft one.
//!
//! Upstream notices a memory threshold between two 10 s looks only with
//! `--kernel-memcg-notification` (off by default), through a cgroup v1 threshold on the root
//! cgroup's `memory.usage_in_bytes`. That threshold is on usage, page cache included: when a
//! pod's growth is met by reclaiming cache (a busy node's usual state), usage stays flat while
//! the working set crosses, and no notification comes. Skiff instead reads `memory.available`
//! itself between looks, every second, and every 100 ms when it is within a tenth of the
//! node's memory of a threshold; a crossing starts a look at once.
//!
//! # Layout
//! - [`signals`]: the signals and the pods' usage, from the host and CRI.
//! - [`rank`]: which pod goes first, critical pods, and the eviction message.

pub mod rank;
pub mod signals;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::{Pod, PodCondition};
use parking_lot::RwLock;
use tokio::time::Instant;

use crate::api::{EventType, PodApi, PodEvent};
use crate::kubelet_config::{KubeletConfiguration, Signal, Threshold, ThresholdValue};
use crate::pod_sync::pod_key;
use signals::{Observation, Observations, StatsProvider};

/// How often the signals are looked at (upstream's `evictionMonitoringPeriod`).
pub const MONITORING_INTERVAL: Duration = Duration::from_secs(10);
/// How long the manager waits for an evicted pod's containers to stop before it looks again
/// (upstream's `podCleanupTimeout`).
pub const POD_CLEANUP_TIMEOUT: Duration = Duration::from_secs(30);
/// The grace period of a pod evicted for a hard threshold (upstream's
/// `immediateEvictionGracePeriodSeconds`).
pub const IMMEDIATE_GRACE_SECONDS: i64 = 1;
/// The reason of an evicted pod's status and event, and of a pod refused under pressure.
pub const REASON: &str = "Evicted";
/// How often `memory.available` is read between looks, and how often when it is close to a
/// threshold.
const MEMORY_POLL: Duration = Duration::from_secs(1);
const MEMORY_POLL_CLOSE: Duration = Duration::from_millis(100);

/// A node condition the eviction manager owns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Condition {
    MemoryPressure,
    DiskPressure,
    PidPressure,
}

impl Condition {
    pub const ALL: [Condition; 3] = [
        Condition::MemoryPressure,
        Condition::DiskPressure,
        Condition::PidPressure,
    ];

    /// The condition's type in the Node status.
    pub fn type_name(self) -> &'static str {
        match self {
            Condition::MemoryPressure => "MemoryPressure",
            Condition::DiskPressure => "DiskPressure",
            Condition::PidPressure => "PIDPressure",
        }
    }

    /// The condition a signal's threshold raises (upstream's `signalToNodeCondition`).
    pub fn of(signal: Signal) -> Condition {
        match signal {
            Signal::MemoryAvailable | Signal::AllocatableMemoryAvailable => {
                Condition::MemoryPressure
            }
            Signal::PidAvailable => Condition::PidPressure,
            _ => Condition::DiskPressure,
        }
    }

    /// Upstream's reason and message for the condition's status (`setters.go`), and the
    /// node event recorded when it turns so.
    pub fn status(self, under_pressure: bool) -> (&'static str, &'static str, &'static str) {
        match (self, under_pressure) {
            (Condition::MemoryPressure, true) => (
                "KubeletHasInsufficientMemory",
                "kubelet has insufficient memory available",
                "NodeHasInsufficientMemory",
            ),
            (Condition::MemoryPressure, false) => (
                "KubeletHasSufficientMemory",
                "kubelet has sufficient memory available",
                "NodeHasSufficientMemory",
            ),
            (Condition::DiskPressure, true) => (
                "KubeletHasDiskPressure",
                "kubelet has disk pressure",
                "NodeHasDiskPressure",
            ),
            (Condition::DiskPressure, false) => (
                "KubeletHasNoDiskPressure",
                "kubelet has no disk pressure",
                "NodeHasNoDiskPressure",
            ),
            (Condition::PidPressure, true) => (
                "KubeletHasInsufficientPID",
                "kubelet has insufficient PID available",
                "NodeHasInsufficientPID",
            ),
            (Condition::PidPressure, false) => (
                "KubeletHasSufficientPID",
                "kubelet has sufficient PID available",
                "NodeHasSufficientPID",
            ),
        }
    }
}

/// The pressure conditions the node is under, written by the eviction manager and read by the
/// heartbeats (the Node status) and admission. Empty on a node without eviction (hollow nodes).
#[derive(Clone, Default)]
pub struct Pressure(Arc<RwLock<BTreeSet<Condition>>>);

impl Pressure {
    pub fn get(&self) -> BTreeSet<Condition> {
        self.0.read().clone()
    }

    /// Replaces the conditions; returns those that changed, with their new state.
    fn set(&self, now: BTreeSet<Condition>) -> Vec<(Condition, bool)> {
        let mut held = self.0.write();
        let changed = held
            .symmetric_difference(&now)
            .map(|c| (*c, now.contains(c)))
            .collect();
        *held = now;
        changed
    }
}

/// Frees disk on the node without evicting pods: upstream's container and image garbage
/// collection (dead containers, unused images), which the eviction manager runs before it
/// evicts for a disk signal.
#[async_trait]
pub trait NodeReclaimer: Send + Sync {
    /// Frees what it can; a failure is logged and eviction goes on.
    async fn reclaim_disk(&self) -> Result<(), String>;
}

/// The kubelet's garbage collectors as the eviction manager's [`NodeReclaimer`], as upstream's
/// disk reclaim functions: dead containers and sandboxes first, then every unused image.
pub struct GarbageCollectors {
    pub containers: Arc<crate::container_gc::ContainerGc>,
    pub images: Arc<crate::image_gc::ImageGcManager>,
}

#[async_trait]
impl NodeReclaimer for GarbageCollectors {
    async fn reclaim_disk(&self) -> Result<(), String> {
        self.containers
            .garbage_collect()
            .await
            .map_err(|e| e.to_string())?;
        let freed = self.images.delete_unused_images().await;
        let freed = freed.map_err(|e| e.to_string())?;
        tracing::info!(freed_bytes = freed, "reclaimed disk from unused images");
        Ok(())
    }
}

/// How the kubelet ends a pod on its own initiative (upstream's `PodTerminator`): the pod's
/// worker writes the Failed status and stops its containers.
#[async_trait]
pub trait PodTerminator: Send + Sync {
    /// The pods admitted whose workers run and have not finished.
    fn active_pods(&self) -> Vec<Arc<Pod>>;
    /// Ends `pod`: status `Failed` with `reason`, `message` and `condition`, its containers
    /// stopped within `grace_seconds`; returns once they are, false when the pod has no
    /// worker any more.
    async fn terminate(&self, pod: &Pod, termination: Termination) -> bool;
}

/// What a kubelet-initiated termination writes and how long it gives the containers.
#[derive(Debug, Clone, PartialEq)]
pub struct Termination {
    pub reason: String,
    pub message: String,
    /// Added to (or replacing the same type in) the pod's conditions.
    pub condition: Option<PodCondition>,
    pub grace_seconds: i64,
}

/// Records an event about this Node: (type, reason, message).
pub type NodeEvents = Arc<dyn Fn(EventType, &'static str, String) + Send + Sync>;

/// The thresholds and what the manager remembers between looks, without I/O.
pub struct Manager {
    thresholds: Vec<Threshold>,
    transition_period: Duration,
    max_pod_grace_seconds: i64,
    pressure: Pressure,
    /// Thresholds (by index) crossed past their grace period and not yet resolved by their
    /// minimum reclaim (upstream's `thresholdsMet`).
    met: Vec<usize>,
    /// When each threshold crossed now was first seen crossed.
    first_observed: BTreeMap<usize, Instant>,
    /// When each pressure condition was last seen.
    conditions_seen: BTreeMap<Condition, Instant>,
}

/// What one look decided.
#[derive(Debug, Default, PartialEq)]
pub struct Look {
    /// The threshold to reclaim for (its grace period over), if any.
    pub reclaim: Option<Threshold>,
    /// Conditions that turned on (true) or off (false).
    pub transitions: Vec<(Condition, bool)>,
}

impl Manager {
    pub fn new(settings: &KubeletConfiguration, pressure: Pressure) -> Manager {
        Manager {
            // validated when the configuration was read
            thresholds: settings.eviction_thresholds().unwrap_or_default(),
            transition_period: settings.eviction_pressure_transition_period,
            max_pod_grace_seconds: settings.eviction_max_pod_grace_period,
            pressure,
            met: Vec::new(),
            first_observed: BTreeMap::new(),
            conditions_seen: BTreeMap::new(),
        }
    }

    /// The thresholds among `candidates` the observations cross (upstream's `thresholdsMet`),
    /// with their minimum reclaim added when `enforce_min_reclaim`.
    fn crossed(
        &self,
        candidates: impl IntoIterator<Item = usize>,
        observations: &Observations,
        enforce_min_reclaim: bool,
    ) -> Vec<usize> {
        candidates
            .into_iter()
            .filter(|&i| {
                let t = &self.thresholds[i];
                let Some(o) = observations.get(&t.signal) else {
                    return false;
                };
                let mut quantity = t.value.amount(o.capacity);
                if enforce_min_reclaim && let Some(reclaim) = t.min_reclaim {
                    quantity += reclaim.amount(o.capacity);
                }
                quantity > o.available
            })
            .collect()
    }

    /// One look at the observations, as upstream's `synchronize` up to the choice of the
    /// threshold to reclaim for: memory before the rest.
    pub fn look(&mut self, now: Instant, observations: &Observations) -> Look {
        let mut crossed = self.crossed(0..self.thresholds.len(), observations, false);
        for i in self.crossed(self.met.clone(), observations, true) {
            if !crossed.contains(&i) {
                crossed.push(i);
            }
        }
        self.first_observed = crossed
            .iter()
            .map(|&i| (i, self.first_observed.get(&i).copied().unwrap_or(now)))
            .collect();
        for &i in &crossed {
            self.conditions_seen
                .insert(Condition::of(self.thresholds[i].signal), now);
        }
        // as upstream, a condition holds while it was seen less than the period ago (so with
        // a period of 0 it is never reported)
        let conditions = self
            .conditions_seen
            .iter()
            .filter(|(_, at)| now.duration_since(**at) < self.transition_period)
            .map(|(c, _)| *c)
            .collect();
        let transitions = self.pressure.set(conditions);
        self.met = self
            .first_observed
            .iter()
            .filter(|(i, at)| {
                let grace = self.thresholds[**i].grace_period.unwrap_or_default();
                now.duration_since(**at) >= grace
            })
            .map(|(i, _)| *i)
            .collect();
        let reclaim = self
            .met
            .iter()
            .min_by_key(|&&i| {
                let signal = self.thresholds[i].signal;
                (
                    Condition::of(signal) != Condition::MemoryPressure,
                    signal,
                    i,
                )
            })
            .map(|&i| self.thresholds[i]);
        Look {
            reclaim,
            transitions,
        }
    }

    /// Whether any threshold is crossed with its minimum reclaim: after node-level reclaim,
    /// whether pods must still be evicted.
    pub fn any_crossed_with_reclaim(&self, observations: &Observations) -> bool {
        !self
            .crossed(0..self.thresholds.len(), observations, true)
            .is_empty()
    }

    /// When the next soft threshold crossed now reaches its grace period.
    fn next_grace_deadline(&self) -> Option<Instant> {
        self.first_observed
            .iter()
            .filter(|(i, _)| !self.met.contains(i))
            .filter_map(|(i, at)| Some(*at + self.thresholds[*i].grace_period?))
            .min()
    }

    /// The `memory.available` thresholds `memory` crosses, and whether it is within a tenth
    /// of the node's memory of one it does not.
    fn memory_state(&self, memory: Option<Observation>) -> (Vec<usize>, bool) {
        let Some(m) = memory else {
            return (Vec::new(), false);
        };
        let observations = Observations::from([(Signal::MemoryAvailable, m)]);
        let crossed = self.crossed(0..self.thresholds.len(), &observations, false);
        let close = self.thresholds.iter().any(|t| {
            t.signal == Signal::MemoryAvailable
                && m.available - t.value.amount(m.capacity) < m.capacity / 10
        });
        (crossed, close)
    }

    /// The grace period a pod evicted for `threshold` gets.
    fn grace_seconds(&self, threshold: &Threshold, pod: &Pod) -> i64 {
        if threshold.is_hard() {
            return IMMEDIATE_GRACE_SECONDS;
        }
        let own = pod
            .spec
            .as_ref()
            .and_then(|s| s.termination_grace_period_seconds)
            .unwrap_or(30);
        self.max_pod_grace_seconds.min(own)
    }
}

/// The running eviction manager: the [`Manager`] fed by a [`StatsProvider`], acting through
/// a [`NodeReclaimer`] and a [`PodTerminator`].
pub struct EvictionManager {
    pub manager: Manager,
    pub node: String,
    pub stats: Arc<dyn StatsProvider>,
    pub reclaimer: Arc<dyn NodeReclaimer>,
    pub pods: Arc<dyn PodTerminator>,
    /// Pod events (`Evicted`).
    pub api: Arc<dyn PodApi>,
    pub node_events: NodeEvents,
}

impl EvictionManager {
    /// Looks at the signals until aborted: every [`MONITORING_INTERVAL`], when a soft
    /// threshold's grace period is over, when `memory.available` crosses a threshold, and
    /// at once after an eviction.
    pub async fn run(mut self) {
        if self.manager.thresholds.is_empty() {
            return;
        }
        loop {
            if self.synchronize().await.is_some() {
                continue;
            }
            let mut wake = Instant::now() + MONITORING_INTERVAL;
            if let Some(grace) = self.manager.next_grace_deadline() {
                wake = wake.min(grace);
            }
            let (before, mut close) = self.manager.memory_state(self.stats.memory_available());
            loop {
                let poll = if close {
                    MEMORY_POLL_CLOSE
                } else {
                    MEMORY_POLL
                };
                let next = (Instant::now() + poll).min(wake);
                tokio::time::sleep_until(next).await;
                if next >= wake {
                    break;
                }
                let (crossed, now_close) = self.manager.memory_state(self.stats.memory_available());
                if crossed != before {
                    tracing::info!("eviction manager: a memory.available threshold was crossed");
                    break;
                }
                close = now_close;
            }
        }
    }

    /// One look (upstream's `synchronize`); the pod evicted, if one was.
    pub async fn synchronize(&mut self) -> Option<Arc<Pod>> {
        let observations = self.stats.observe().await;
        let look = self.manager.look(Instant::now(), &observations);
        for (condition, on) in look.transitions {
            let (_, _, event) = condition.status(on);
            let message = format!("Node {} status is now: {event}", self.node);
            (self.node_events)(EventType::Normal, event, message);
        }
        let threshold = look.reclaim?;
        let resource = rank::resource_of(threshold.signal);
        tracing::info!(resource, "eviction manager: attempting to reclaim");
        (self.node_events)(
            EventType::Warning,
            "EvictionThresholdMet",
            format!("Attempting to reclaim {resource}"),
        );
        if Condition::of(threshold.signal) == Condition::DiskPressure {
            if let Err(e) = self.reclaimer.reclaim_disk().await {
                tracing::info!(resource, error = %e, "eviction manager: reclaiming disk on the node failed");
            }
            if !self
                .manager
                .any_crossed_with_reclaim(&self.stats.observe().await)
            {
                tracing::info!(
                    resource,
                    "eviction manager: able to reduce resource pressure without evicting pods"
                );
                return None;
            }
        }
        let active = self.pods.active_pods();
        if active.is_empty() {
            tracing::warn!(
                "eviction manager: eviction thresholds have been met, but no pods are active to evict"
            );
            return None;
        }
        let usage = self.stats.pod_usage().await;
        let observed = observations.get(&threshold.signal);
        let threshold_info = observed.map(|o| {
            let amount = threshold.value.amount(o.capacity);
            let percentage = matches!(threshold.value, ThresholdValue::Percentage(_));
            (
                rank::format_threshold(amount, percentage),
                rank::format_amount(resource, o.available),
            )
        });
        for pod in rank::rank(threshold.signal, &active, &usage) {
            let uid = pod.metadata.uid.clone().unwrap_or_default();
            let message =
                rank::eviction_message(resource, &pod, usage.get(&uid), threshold_info.clone());
            let termination = Termination {
                reason: REASON.into(),
                message: message.clone(),
                condition: Some(PodCondition {
                    type_: "DisruptionTarget".into(),
                    status: "True".into(),
                    reason: Some("TerminationByKubelet".into()),
                    message: Some(message.clone()),
                    ..Default::default()
                }),
                grace_seconds: self.manager.grace_seconds(&threshold, &pod),
            };
            tracing::info!(pod = %pod_key(&pod), "eviction manager: evicting: {message}");
            self.api
                .event(&pod, PodEvent::pod_warning(REASON, message))
                .await;
            let terminated =
                tokio::time::timeout(POD_CLEANUP_TIMEOUT, self.pods.terminate(&pod, termination))
                    .await;
            match terminated {
                Ok(true) => return Some(pod),
                Ok(false) => continue,
                Err(_) => {
                    tracing::info!(pod = %pod_key(&pod), "eviction manager: timed out waiting for the pod to be cleaned up");
                    return Some(pod);
                }
            }
        }
        tracing::info!("eviction manager: unable to evict any pods from the node");
        None
    }
}

#[cfg(test)]
mod tests;
