//! Stopping a pod in the runtime, as upstream's `KillPod`: its containers get SIGTERM (after
//! their preStop hooks) and SIGKILL once the grace period is over, all at once; then its
//! containers, sandboxes and logs are removed ([`crate::container_gc::remove_pod`]) and its
//! volumes torn down.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;

use crate::api::PodEvent;
use crate::cri::ContainerState;
use crate::hooks::{self, Hook};
use crate::pod_sync::{LABEL_CONTAINER_NAME, Result, SyncContext, pod_key, uid_labels};

impl SyncContext {
    /// Stops the pod's containers (SIGTERM, SIGKILL after `grace` seconds, all at once), then
    /// removes them, its sandboxes and its log directory.
    pub async fn kill_pod(&self, pod: &Pod, grace: i64) -> Result<()> {
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
        crate::container_gc::remove_pod(self.runtime.as_ref(), &uid, &self.pod_log_dir(pod))
            .await
            .map_err(self.runtime_err(pod))?;
        if let Err(e) = self.volumes.tear_down(&uid) {
            tracing::warn!(pod = %pod_key(pod), error = %e, "tearing down the pod's volumes");
        }
        tracing::info!(pod = %pod_key(pod), grace, "pod stopped and removed from the runtime");
        Ok(())
    }
}
