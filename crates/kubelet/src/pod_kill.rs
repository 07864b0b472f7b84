//! Stopping a pod in the runtime, as upstream's `KillPod`: its containers get SIGTERM (after
//! their preStop hooks) and SIGKILL once the grace period is over, all at once; then its
//! sandboxes stop, and containers, sandboxes, logs and volumes are removed. Also a pod ended
//! on the kubelet's own initiative (eviction): its Failed status written, its containers
//! stopped, the rest left to its worker's next sync as for any finished pod.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Pod, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::api::PodEvent;
use crate::cri::{Container, ContainerState};
use crate::eviction::Termination;
use crate::hooks::{self, Hook};
use crate::pod_sync::{LABEL_CONTAINER_NAME, Result, SyncContext, pod_key, uid_labels};

impl SyncContext {
    /// Stops the pod's containers (SIGTERM, SIGKILL after `grace` seconds, all at once), then
    /// its sandboxes, and removes them all with the pod's log directory.
    pub async fn kill_pod(&self, pod: &Pod, grace: i64) -> Result<()> {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let containers = self.stop_containers(pod, grace).await?;
        let sandboxes = self
            .runtime
            .list_pod_sandboxes(uid_labels(&uid))
            .await
            .map_err(self.runtime_err(pod))?;
        for s in &sandboxes {
            match self.runtime.stop_pod_sandbox(&s.id).await {
                Err(e) if !e.is_not_found() => return Err(self.runtime_err(pod)(e)),
                _ => {}
            }
        }
        for c in &containers {
            match self.runtime.remove_container(&c.id).await {
                Err(e) if !e.is_not_found() => return Err(self.runtime_err(pod)(e)),
                _ => {}
            }
        }
        for s in &sandboxes {
            match self.runtime.remove_pod_sandbox(&s.id).await {
                Err(e) if !e.is_not_found() => return Err(self.runtime_err(pod)(e)),
                _ => {}
            }
        }
        let _ = std::fs::remove_dir_all(self.pod_log_dir(pod));
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

    /// Stops the pod's running containers (preStop hooks, SIGTERM, SIGKILL after `grace`
    /// seconds, all at once), with a `Killing` event each; returns every container the pod
    /// has in the runtime.
    async fn stop_containers(&self, pod: &Pod, grace: i64) -> Result<Vec<Container>> {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let containers = self
            .runtime
            .list_containers(uid_labels(&uid))
            .await
            .map_err(self.runtime_err(pod))?;
        let running: Vec<_> = containers
            .iter()
            .filter(|c| c.state == ContainerState::ContainerRunning as i32)
            .collect();
        for c in &running {
            if let Some(name) = c.labels.get(LABEL_CONTAINER_NAME) {
                let message = format!("Stopping container {name}");
                self.api
                    .event(pod, PodEvent::normal("Killing", name, message))
                    .await;
            }
        }
        let pod_ip = match self.runtime.list_pod_sandboxes(uid_labels(&uid)).await {
            Ok(sandboxes) => match sandboxes.first() {
                Some(sb) => self
                    .runtime
                    .pod_sandbox_status(&sb.id)
                    .await
                    .ok()
                    .and_then(|s| s.network)
                    .map(|n| n.ip)
                    .unwrap_or_default(),
                None => String::new(),
            },
            Err(_) => String::new(),
        };
        let stops = running.iter().map(|c| {
            let spec = pod.spec.as_ref().and_then(|s| {
                let name = c.labels.get(LABEL_CONTAINER_NAME)?;
                s.containers.iter().find(|sc| &sc.name == name)
            });
            let pod_ip = pod_ip.clone();
            async move {
                let began = std::time::Instant::now();
                let mut grace = grace;
                if let Some(container) = spec
                    && let Some(handler) = Hook::PreStop.of(container)
                    && grace > 0
                {
                    let budget = Duration::from_secs(grace as u64);
                    let hook = hooks::run(
                        self.runtime.as_ref(),
                        handler,
                        container,
                        &c.id,
                        &pod_ip,
                        budget,
                    );
                    if let Err(why) = hook.await {
                        let message = format!("PreStopHook failed: {why}");
                        let reason = Hook::PreStop.failed_reason();
                        let event = PodEvent::warning(reason, &container.name, message);
                        self.api.event(pod, event).await;
                    }
                    grace = hooks::grace_left(grace, began);
                }
                self.runtime.stop_container(&c.id, grace).await
            }
        });
        for r in futures::future::join_all(stops).await {
            match r {
                Err(e) if !e.is_not_found() => return Err(self.runtime_err(pod)(e)),
                _ => {}
            }
        }
        Ok(containers)
    }
}
