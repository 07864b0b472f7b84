//! Dead container and sandbox garbage collection, as upstream's (`kuberuntime_gc.go`), and the
//! one place where the kubelet removes containers, sandboxes and container logs: every
//! [`CONTAINER_GC_PERIOD`] the containers that no longer run are grouped by pod and container
//! name; a pod that is gone loses all of them, any other keeps the newest
//! `max_per_pod_container` per name (so that `kubectl logs --previous` has one), at most
//! `max_containers` are kept in all; sandboxes that are not ready and hold no container are
//! removed, but for a pod that still exists its newest one; the log directories of pods that
//! are gone are removed. [`remove_pod`] removes a stopped pod at once (pod deletion).

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;

use crate::api::{PodApi, PodEvent};
use crate::config::LABEL_POD_UID;
use crate::cri::{self, Container, ContainerRuntime, ContainerState, PodSandbox, PodSandboxState};

/// How often dead containers are collected (upstream's `ContainerGCPeriod`).
pub const CONTAINER_GC_PERIOD: Duration = Duration::from_secs(60);

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{step}: {source}")]
    Runtime {
        step: &'static str,
        #[source]
        source: cri::Error,
    },
}

impl Error {
    /// A failed runtime call, with the step it was for.
    fn runtime(step: &'static str) -> impl FnOnce(cri::Error) -> Error {
        move |source| Error::Runtime { step, source }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Which dead containers are kept (upstream's `ContainerGCPolicy`); its `Default` is
/// upstream's kubelet defaults (`--minimum-container-ttl-duration=0`,
/// `--maximum-dead-containers-per-container=1`, `--maximum-dead-containers=-1`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ContainerGcPolicy {
    /// A dead container created less than this long ago is kept.
    pub min_age: Duration,
    /// Dead containers kept per pod and container name; negative: no limit.
    pub max_per_pod_container: i32,
    /// Dead containers kept on the node; negative: no limit.
    pub max_containers: i32,
}

impl Default for ContainerGcPolicy {
    fn default() -> Self {
        ContainerGcPolicy {
            min_age: Duration::ZERO,
            max_per_pod_container: 1,
            max_containers: -1,
        }
    }
}

/// The pods this kubelet has (from its pod informer): `None` until its first list is in,
/// when no pod can be said to be gone.
pub type KnownPods = Arc<dyn Fn() -> Option<HashSet<String>> + Send + Sync>;

/// A dead container as the collection weighs it.
#[derive(Debug, Clone)]
struct Dead {
    id: String,
    created_at: i64,
    attempt: u32,
    /// In an unknown state: stopped before it is removed.
    unknown: bool,
}

/// Garbage collection of one node's dead containers and sandboxes.
pub struct ContainerGc {
    runtime: Arc<dyn ContainerRuntime>,
    policy: ContainerGcPolicy,
    /// The pods' log directories (`<namespace>_<name>_<uid>`) are under it; `None`: not this
    /// collection's to remove (hollow nodes share one directory and write no logs).
    log_dir: Option<PathBuf>,
    pods: KnownPods,
    clock: Arc<dyn Fn() -> Timestamp + Send + Sync>,
}

fn pod_uid(labels: &HashMap<String, String>) -> Option<&str> {
    labels.get(LABEL_POD_UID).map(String::as_str)
}

fn attempt_of(c: &Container) -> u32 {
    c.metadata.as_ref().map_or(0, |m| m.attempt)
}

/// Newest first: by attempt, then creation (upstream's `byAttempt`).
fn newest_first(a: &(u32, i64), b: &(u32, i64)) -> std::cmp::Ordering {
    b.cmp(a)
}

impl ContainerGc {
    pub fn new(
        runtime: Arc<dyn ContainerRuntime>,
        policy: ContainerGcPolicy,
        log_dir: Option<PathBuf>,
        pods: KnownPods,
        clock: Arc<dyn Fn() -> Timestamp + Send + Sync>,
    ) -> ContainerGc {
        ContainerGc {
            runtime,
            policy,
            log_dir,
            pods,
            clock,
        }
    }

    /// Collects every `period` (the first time at once) until the task is dropped; a failed
    /// collection is a `ContainerGCFailed` event on the Node, as upstream's.
    pub async fn run(self: Arc<Self>, period: Duration, api: Arc<dyn PodApi>) {
        let mut tick = tokio::time::interval(period);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            if let Err(e) = self.garbage_collect().await {
                tracing::error!(error = %e, "container garbage collection failed");
                let event = PodEvent::pod_warning("ContainerGCFailed", e.to_string());
                api.node_event(event).await;
            }
        }
    }

    /// One collection (upstream's `GarbageCollect`): dead containers, then sandboxes, then
    /// the log directories of pods that are gone. A container or sandbox that cannot be
    /// removed is logged and tried again next time; listing failures are errors.
    pub async fn garbage_collect(&self) -> Result<()> {
        self.evict_containers().await?;
        self.evict_sandboxes().await?;
        self.evict_pod_log_dirs();
        Ok(())
    }

    async fn containers(&self) -> Result<Vec<Container>> {
        let all = self
            .runtime
            .list_containers(HashMap::new())
            .await
            .map_err(Error::runtime("listing containers"))?;
        Ok(all
            .into_iter()
            .filter(|c| pod_uid(&c.labels).is_some())
            .collect())
    }

    async fn evict_containers(&self) -> Result<()> {
        let containers = self.containers().await?;
        let newest_gc_time = (self.clock)().as_nanosecond()
            - i128::try_from(self.policy.min_age.as_nanos()).unwrap_or(i128::MAX);
        // (pod uid, container name) → its dead containers
        let mut units: HashMap<(String, String), Vec<Dead>> = HashMap::new();
        for c in containers {
            if c.state == ContainerState::ContainerRunning as i32
                || i128::from(c.created_at) > newest_gc_time
            {
                continue;
            }
            let uid = pod_uid(&c.labels).unwrap_or_default().to_string();
            let name = c
                .metadata
                .as_ref()
                .map(|m| m.name.clone())
                .unwrap_or_default();
            units.entry((uid, name)).or_default().push(Dead {
                attempt: attempt_of(&c),
                unknown: c.state == ContainerState::ContainerUnknown as i32,
                created_at: c.created_at,
                id: c.id,
            });
        }
        for unit in units.values_mut() {
            unit.sort_by(|a, b| {
                newest_first(&(a.attempt, a.created_at), &(b.attempt, b.created_at))
            });
        }
        // read after the runtime's list: a pod whose containers were listed was known then
        if let Some(known) = (self.pods)() {
            let gone: Vec<_> = units
                .keys()
                .filter(|(uid, _)| !known.contains(uid))
                .cloned()
                .collect();
            for key in gone {
                let unit = units.remove(&key).unwrap_or_default();
                self.remove_oldest(&unit, unit.len()).await;
            }
        }
        if let Ok(keep) = usize::try_from(self.policy.max_per_pod_container) {
            for unit in units.values_mut() {
                self.keep_newest(unit, keep).await;
            }
        }
        if let Ok(max) = usize::try_from(self.policy.max_containers) {
            let total: usize = units.values().map(Vec::len).sum();
            if total > max {
                // an equal share per unit (at least one), then the oldest of what is left
                let share = (max / units.len().max(1)).max(1);
                for unit in units.values_mut() {
                    self.keep_newest(unit, share).await;
                }
                let mut left: Vec<Dead> = units.into_values().flatten().collect();
                if left.len() > max {
                    left.sort_by(|a, b| {
                        newest_first(&(a.attempt, a.created_at), &(b.attempt, b.created_at))
                    });
                    self.remove_oldest(&left, left.len() - max).await;
                }
            }
        }
        Ok(())
    }

    /// Removes all but the `keep` newest of a unit (sorted newest first).
    async fn keep_newest(&self, unit: &mut Vec<Dead>, keep: usize) {
        if unit.len() > keep {
            self.remove_oldest(unit, unit.len() - keep).await;
            unit.truncate(keep);
        }
    }

    /// Removes the last `n` of `dead` (sorted newest first), oldest first.
    async fn remove_oldest(&self, dead: &[Dead], n: usize) {
        for c in dead.iter().rev().take(n) {
            if c.unknown
                && let Err(e) = self.runtime.stop_container(&c.id, 0).await
            {
                tracing::warn!(container = %c.id, error = %e, "stopping a container in an unknown state before removing it");
                continue;
            }
            if let Err(e) = remove_container(self.runtime.as_ref(), &c.id).await {
                tracing::warn!(container = %c.id, error = %e, "removing a dead container");
            }
        }
    }

    async fn evict_sandboxes(&self) -> Result<()> {
        let containers = self.containers().await?;
        let sandboxes = self
            .runtime
            .list_pod_sandboxes(HashMap::new())
            .await
            .map_err(Error::runtime("listing sandboxes"))?;
        let with_containers: HashSet<&str> = containers
            .iter()
            .map(|c| c.pod_sandbox_id.as_str())
            .collect();
        let mut by_pod: HashMap<&str, Vec<&PodSandbox>> = HashMap::new();
        for s in &sandboxes {
            if let Some(uid) = pod_uid(&s.labels) {
                by_pod.entry(uid).or_default().push(s);
            }
        }
        let known = (self.pods)();
        for (uid, mut group) in by_pod {
            let attempt = |s: &PodSandbox| s.metadata.as_ref().map_or(0, |m| m.attempt);
            group.sort_by(|a, b| {
                newest_first(&(attempt(a), a.created_at), &(attempt(b), b.created_at))
            });
            // a pod that still exists keeps its newest sandbox, even a dead one
            let gone = known.as_ref().is_some_and(|k| !k.contains(uid));
            let skip = usize::from(!gone);
            for s in group.into_iter().skip(skip) {
                let active = s.state == PodSandboxState::SandboxReady as i32
                    || with_containers.contains(s.id.as_str());
                if !active && let Err(e) = remove_sandbox(self.runtime.as_ref(), &s.id).await {
                    tracing::warn!(sandbox = %s.id, error = %e, "removing a dead sandbox");
                }
            }
        }
        Ok(())
    }

    /// Removes the log directories (`<namespace>_<name>_<uid>`) of pods that are gone.
    fn evict_pod_log_dirs(&self) {
        let Some(log_dir) = &self.log_dir else {
            return;
        };
        let Ok(entries) = std::fs::read_dir(log_dir) else {
            return;
        };
        let entries: Vec<_> = entries.flatten().collect();
        // read after the directory: a pod whose directory was listed was known then
        let Some(known) = (self.pods)() else {
            return;
        };
        for entry in entries {
            let name = entry.file_name().to_string_lossy().into_owned();
            let Some((_, uid)) = name.rsplit_once('_') else {
                continue;
            };
            if !known.contains(uid) {
                let path = entry.path();
                match std::fs::remove_dir_all(&path) {
                    Ok(()) => {
                        tracing::info!(dir = %path.display(), "removed the logs of a pod that is gone")
                    }
                    Err(e) => {
                        tracing::warn!(dir = %path.display(), error = %e, "removing a pod's log directory")
                    }
                }
            }
        }
    }
}

/// Removes a container with its log files (upstream's `removeContainer`); one already gone is
/// success.
pub async fn remove_container(runtime: &dyn ContainerRuntime, id: &str) -> Result<(), cri::Error> {
    match runtime.container_status(id).await {
        Ok(status) => {
            let log = Path::new(&status.log_path);
            if log.is_absolute()
                && let Err(e) = crate::log_rotation::remove_logs(log)
            {
                tracing::warn!(container = id, error = %e, "removing a container's logs");
            }
        }
        Err(e) if e.is_not_found() => return Ok(()),
        Err(e) => return Err(e),
    }
    tracing::debug!(container = id, "removing container");
    match runtime.remove_container(id).await {
        Err(e) if !e.is_not_found() => Err(e),
        _ => Ok(()),
    }
}

/// Stops (in case it still runs) and removes a sandbox; one already gone is success.
pub async fn remove_sandbox(runtime: &dyn ContainerRuntime, id: &str) -> Result<(), cri::Error> {
    tracing::debug!(sandbox = id, "removing sandbox");
    for step in [
        runtime.stop_pod_sandbox(id).await,
        runtime.remove_pod_sandbox(id).await,
    ] {
        match step {
            Err(e) if !e.is_not_found() => return Err(e),
            _ => {}
        }
    }
    Ok(())
}

/// Removes everything a stopped pod has in the runtime and on disk: its containers with their
/// logs, its sandboxes, and its log directory (a deleted pod's, at once rather than at the
/// next collection).
pub async fn remove_pod(
    runtime: &dyn ContainerRuntime,
    uid: &str,
    pod_log_dir: &Path,
) -> Result<(), cri::Error> {
    let labels = HashMap::from([(LABEL_POD_UID.to_string(), uid.to_string())]);
    for c in runtime.list_containers(labels.clone()).await? {
        remove_container(runtime, &c.id).await?;
    }
    for s in runtime.list_pod_sandboxes(labels).await? {
        remove_sandbox(runtime, &s.id).await?;
    }
    match std::fs::remove_dir_all(pod_log_dir) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            tracing::warn!(dir = %pod_log_dir.display(), error = %e, "removing a pod's log directory");
        }
        _ => {}
    }
    Ok(())
}

#[cfg(test)]
#[path = "container_gc_tests.rs"]
mod tests;
