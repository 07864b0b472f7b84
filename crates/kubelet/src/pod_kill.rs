//! Stopping a pod in the runtime, as upstream's `KillPod`: its containers' preStop hooks run at
//! once; then the app containers get SIGTERM, and the sidecars (init containers with
//! `restartPolicy: Always`) each once the app containers and the sidecars after it have
//! exited, in reverse order (upstream's termination ordering, 1.29+); SIGKILL comes once the
//! grace period is over. Then its containers, sandboxes and logs are removed
//! ([`crate::container_gc::remove_pod`]), and its cgroup and volumes.
//! [`SyncContext::kill_container`] is one container's part of it, which a failed liveness or
//! startup probe also takes. Also a pod ended on the kubelet's own initiative (eviction): its
//! Failed status written, its containers stopped, the rest left to its worker's next sync as
//! for any finished pod.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use futures::future::join_all;
use k8s_openapi::api::core::v1::{Container as ApiContainer, Pod, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use tokio::sync::watch;

use crate::actions;
use crate::api::PodEvent;
use crate::cri::{Container, ContainerState};
use crate::eviction::Termination;
use crate::hooks::{self, Hook};
use crate::pod_sync::{LABEL_CONTAINER_NAME, Result, SyncContext, pod_key, uid_labels};

/// A container's place in a pod's termination: app containers first, then sidecars, last
/// started first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Turn {
    App,
    /// A sidecar, by its index among the init containers.
    Sidecar(usize),
}

fn turn_of(pod: &Pod, name: &str) -> Turn {
    let inits = pod
        .spec
        .iter()
        .flat_map(|s| s.init_containers.iter().flatten());
    match inits
        .enumerate()
        .find(|(_, c)| c.name == name && actions::is_sidecar(c))
    {
        Some((i, _)) => Turn::Sidecar(i),
        None => Turn::App,
    }
}

/// Whether a container in `turn` must wait for one in `other` to exit before its SIGTERM.
fn waits_for(turn: Turn, other: Turn) -> bool {
    match (turn, other) {
        (Turn::App, _) => false,
        (Turn::Sidecar(_), Turn::App) => true,
        (Turn::Sidecar(i), Turn::Sidecar(j)) => j > i,
    }
}

/// The spec of a pod's container or init container named `name`.
fn spec_of<'a>(pod: &'a Pod, name: &str) -> Option<&'a ApiContainer> {
    let spec = pod.spec.as_ref()?;
    spec.init_containers
        .iter()
        .flatten()
        .chain(&spec.containers)
        .find(|c| c.name == name)
}

impl SyncContext {
    /// Stops one running container as upstream's `killContainer`: its preStop hook (if it has
    /// one and there is grace to run it in, a failure being a `FailedPreStopHook` event), then
    /// `turn` (what it waits for before its SIGTERM, for as long as grace is left), then
    /// SIGTERM and SIGKILL once what is left of `grace` seconds is over. A grace of 0 stops it
    /// at once.
    pub(crate) async fn kill_container(
        &self,
        pod: &Pod,
        container: Option<&ApiContainer>,
        id: &str,
        pod_ip: &str,
        grace: i64,
        turn: impl Future<Output = ()>,
    ) -> crate::cri::Result<()> {
        let began = Instant::now();
        let mut left = grace;
        if let Some(container) = container
            && let Some(handler) = Hook::PreStop.of(container)
            && grace > 0
        {
            let budget = Duration::from_secs(grace as u64);
            let hook = hooks::run(
                self.runtime.as_ref(),
                handler,
                container,
                id,
                pod_ip,
                budget,
            );
            if let Err(why) = hook.await {
                let message = format!("PreStopHook failed: {why}");
                let reason = Hook::PreStop.failed_reason();
                let event = PodEvent::warning(reason, &container.name, message);
                self.api.event(pod, event).await;
            }
            left = hooks::grace_left(grace, began);
        }
        if grace > 0 {
            let _ = tokio::time::timeout(Duration::from_secs(left as u64), turn).await;
            // what the wait took comes off the grace (upstream's minimum of 2 s stays)
            left = left.min(hooks::grace_left(grace, began));
        }
        self.runtime.stop_container(id, left).await
    }

    /// The pod's IP, from its first sandbox (for preStop hooks that reach it).
    pub(crate) async fn pod_ip(&self, uid: &str) -> String {
        let Ok(sandboxes) = self.runtime.list_pod_sandboxes(uid_labels(uid)).await else {
            return String::new();
        };
        let Some(sb) = sandboxes.first() else {
            return String::new();
        };
        let status = self.runtime.pod_sandbox_status(&sb.id).await.ok();
        status
            .and_then(|s| s.network)
            .map(|n| n.ip)
            .unwrap_or_default()
    }

    /// Stops the pod's containers (see the module's doc; SIGKILL after `grace` seconds), then
    /// removes them, its sandboxes, its log directory and its cgroup.
    pub async fn kill_pod(&self, pod: &Pod, grace: i64) -> Result<()> {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        self.stop_containers(pod, grace).await?;
        crate::container_gc::remove_pod(self.runtime.as_ref(), &uid, &self.pod_log_dir(pod))
            .await
            .map_err(self.runtime_err(pod))?;
        self.remove_cgroup(pod).await;
        if let Err(e) = self.volumes.tear_down(&uid) {
            tracing::warn!(pod = %pod_key(pod), error = %e, "tearing down the pod's volumes");
        }
        tracing::info!(pod = %pod_key(pod), grace, "pod stopped and removed from the runtime");
        Ok(())
    }

    /// Ends the pod on the kubelet's own initiative, as upstream's pod worker does for a kill
    /// with a status function: its status written `Failed` with the termination's reason,
    /// message and condition, then its running containers stopped within the grace period.
    /// Returns the status written, which the pod's worker keeps over older objects.
    pub async fn terminate(&self, pod: &Pod, termination: &Termination) -> PodStatus {
        let mut status = pod.status.clone().unwrap_or_default();
        status.phase = Some("Failed".into());
        status.reason = Some(termination.reason.clone());
        status.message = Some(termination.message.clone());
        if let Some(condition) = &termination.condition {
            let mut condition = condition.clone();
            condition
                .last_transition_time
                .get_or_insert(Time((self.clock)()));
            let conditions = status.conditions.get_or_insert_default();
            conditions.retain(|c| c.type_ != condition.type_);
            conditions.push(condition);
        }
        let m = &pod.metadata;
        let namespace = m.namespace.as_deref().unwrap_or("default");
        let name = m.name.as_deref().unwrap_or_default();
        if let Err(e) = self.api.patch_status(namespace, name, &status).await {
            tracing::warn!(pod = %pod_key(pod), error = %e, "writing a terminated pod's status");
        }
        if let Err(e) = self.stop_containers(pod, termination.grace_seconds).await {
            tracing::warn!(pod = %pod_key(pod), error = %e, "stopping a terminated pod's containers");
        }
        status
    }

    /// Removes the pod's cgroup once nothing of it runs (upstream's pod container manager's
    /// `Destroy`); a failure is logged, the cgroup left behind.
    pub(crate) async fn remove_cgroup(&self, pod: &Pod) {
        let Some(cgroups) = &self.cgroups else {
            return;
        };
        let uid = pod.metadata.uid.as_deref().unwrap_or_default();
        if let Err(e) = cgroups.remove_pod(uid).await {
            tracing::warn!(pod = %pod_key(pod), error = %e, "removing the pod's cgroup");
        }
    }

    /// Stops the pod's running containers, in upstream's order (see the module's doc), each
    /// with a `Killing` event; the pod's containers, as listed before.
    pub(crate) async fn stop_containers(&self, pod: &Pod, grace: i64) -> Result<Vec<Container>> {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let containers = self
            .runtime
            .list_containers(uid_labels(&uid))
            .await
            .map_err(self.runtime_err(pod))?;
        let running: Vec<(&str, &str)> = containers
            .iter()
            .filter(|c| c.state == ContainerState::ContainerRunning as i32)
            .filter_map(|c| Some((c.id.as_str(), c.labels.get(LABEL_CONTAINER_NAME)?.as_str())))
            .collect();
        for (_, name) in &running {
            let message = format!("Stopping container {name}");
            self.api
                .event(pod, PodEvent::normal("Killing", name, message))
                .await;
        }
        let pod_ip = self.pod_ip(&uid).await;
        // each container's exit, which the sidecars started before it wait for
        let exits: HashMap<&str, watch::Sender<bool>> = running
            .iter()
            .map(|(id, _)| (*id, watch::Sender::new(false)))
            .collect();
        let stops = running.iter().map(|(id, name)| {
            let turn = turn_of(pod, name);
            let before: Vec<watch::Receiver<bool>> = running
                .iter()
                .filter(|(_, other)| waits_for(turn, turn_of(pod, other)))
                .map(|(other, _)| exits[other].subscribe())
                .collect();
            let wait = async move {
                for mut exited in before {
                    let _ = exited.wait_for(|e| *e).await;
                }
            };
            let exits = &exits;
            let pod_ip = &pod_ip;
            async move {
                let spec = spec_of(pod, name);
                let stopped = self
                    .kill_container(pod, spec, id, pod_ip, grace, wait)
                    .await;
                exits[id].send_replace(true);
                stopped
            }
        });
        for r in join_all(stops).await {
            match r {
                Err(e) if !e.is_not_found() => return Err(self.runtime_err(pod)(e)),
                _ => {}
            }
        }
        Ok(containers)
    }
}
