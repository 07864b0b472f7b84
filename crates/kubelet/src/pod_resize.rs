//! In-place pod resize around [`SyncContext::sync_pod`]: before a sync, a pod whose spec
//! resources differ from what was allocated to it has the resize judged
//! ([`SyncContext::allocate_resize`], upstream's `handlePodResourcesResize`): allocated, or
//! left pending (`PodResizePending`, `Deferred` or `Infeasible`) while the pod keeps running
//! with what it has. During the sync, the allocated resources are carried out on the running
//! containers and the pod cgroup ([`SyncContext::actuate_resize`], upstream's
//! `doPodResizeAction`): CRI `UpdateContainerResources`, or a restart for a `RestartContainer`
//! resize policy. A failed step leaves `PodResizeInProgress` with reason `Error` and is tried
//! again at the next sync; once the containers run with what was allocated, the condition goes
//! and a `ResizeCompleted` event says so.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Container, Node, Pod, ResourceRequirements};

use crate::allocation::{self, REASON_ERROR, canonical, resizable, same_resources};
use crate::api::PodEvent;
use crate::cri::{ContainerState, ContainerStatus, PodSandboxConfig};
use crate::eviction::Condition;
use crate::pod_sync::{SyncContext, pod_key};
use crate::resize::{self, Running, Step};

/// What a worker reads to judge its pod's resize, gathered once the allocations are locked.
pub(crate) struct ResizeInputs {
    /// The Node as this kubelet last saw it.
    pub node: Arc<Node>,
    /// The node's pressure conditions.
    pub pressure: BTreeSet<Condition>,
}

impl SyncContext {
    /// The pod as it is to run: with its new resources if a resize is allocated now (or none
    /// is pending), else with those allocated before, its `PodResizePending` condition saying
    /// why (upstream's `handlePodResourcesResize`). `others` lists the node's other active pods,
    /// as allocated; it is read once the allocations are locked against other decisions.
    pub(crate) async fn allocate_resize(
        &self,
        pod: &Arc<Pod>,
        inputs: impl FnOnce() -> (ResizeInputs, Vec<Arc<Pod>>),
    ) -> Arc<Pod> {
        let uid = pod.metadata.uid.as_deref().unwrap_or_default();
        if self.allocations.differing(pod).is_none() {
            self.allocations.clear_pending(uid);
            return pod.clone();
        }
        let _decision = self.allocations.decision().await;
        // judged again under the lock: the answer is for the allocations as they are now
        let Some(as_allocated) = self.allocations.differing(pod) else {
            self.allocations.clear_pending(uid);
            return pod.clone();
        };
        let (inputs, others) = inputs();
        let now = (self.clock)();
        match resize::check(pod, &inputs.node, &others, &inputs.pressure) {
            Ok(()) => {
                if let Err(e) = self.allocations.set_allocated(pod) {
                    tracing::warn!(pod = %pod_key(pod), error = %e, "recording a resize");
                    return Arc::new(as_allocated);
                }
                tracing::info!(pod = %pod_key(pod), "resize allocated");
                self.allocations.clear_pending(uid);
                // a previous resize's error goes with the new attempt
                self.allocations.clear_in_progress(uid);
                self.allocations.set_in_progress(uid, "", "", now);
                pod.clone()
            }
            Err(pending) => {
                tracing::info!(pod = %pod_key(pod), reason = pending.reason, message = %pending.message, "resize not allocated");
                self.allocations
                    .set_pending(uid, pending.reason, &pending.message, now);
                Arc::new(as_allocated)
            }
        }
    }

    /// Brings the pod's running resizable containers (in `sandbox_id`; `runs` newest first by
    /// name) and its cgroup to the allocated resources of `pod`, in upstream's order; the
    /// containers a `RestartContainer` policy restarts are stopped first and started again
    /// last. Then `PodResizeInProgress` says whether anything is left to do (reason `Error`
    /// and the failure's message if a step failed), and its removal comes with a
    /// `ResizeCompleted` event. Returns whether it changed a container (updated or
    /// restarted), so that the runtime's view of them is read again.
    pub(crate) async fn actuate_resize(
        &self,
        pod: &Pod,
        sandbox_id: &str,
        sandbox: &PodSandboxConfig,
        runs: &HashMap<String, Vec<ContainerStatus>>,
        in_sandbox: impl Fn(&str) -> bool,
    ) -> bool {
        let uid = pod.metadata.uid.as_deref().unwrap_or_default();
        let mut running: Vec<(Running<'_>, &ContainerStatus)> = Vec::new();
        for c in resizable(pod) {
            let Some(run) = runs.get(&c.name).and_then(|h| h.first()) else {
                continue;
            };
            if run.state != ContainerState::ContainerRunning as i32 || !in_sandbox(&run.id) {
                continue;
            }
            let actuated = match self.allocations.actuated(uid, &c.name) {
                Some(a) => a,
                None => {
                    // started before the kubelet recorded what it started containers with
                    if let Err(e) = self.allocations.set_actuated(uid, c) {
                        tracing::warn!(pod = %pod_key(pod), error = %e, "recording resources");
                    }
                    canonical(c.resources.as_ref())
                }
            };
            running.push((
                Running {
                    container: c,
                    actuated,
                },
                run,
            ));
        }
        let (pod_current, pod_desired) = match &self.cgroups {
            Some(cgroups) => {
                let desired = cgroups.desired_config(pod);
                (
                    cgroups.pod_config(pod).unwrap_or_else(|| desired.clone()),
                    desired,
                )
            }
            // no pod cgroup to resize
            None => Default::default(),
        };
        let plans: Vec<Running<'_>> = running.iter().map(|(r, _)| r.clone()).collect();
        let steps = resize::plan(&plans, &pod_current, &pod_desired);
        let mut restarted = Vec::new();
        let mut failure = None;
        let changed = steps.iter().any(|s| !matches!(s, Step::PodCgroup(_)));
        for step in steps {
            if let Err(message) = self
                .take_resize_step(pod, &running, &step, &mut restarted)
                .await
            {
                failure = Some(message);
                break;
            }
        }
        // restarted containers start with what was allocated, after the pod cgroup grew
        for (r, run) in running
            .iter()
            .filter(|(r, _)| restarted.contains(&r.container.name))
        {
            let attempt = run.metadata.as_ref().map_or(0, |m| m.attempt) + 1;
            match self
                .start_container(pod, sandbox_id, sandbox, r.container, attempt, None)
                .await
            {
                Ok(None) => {}
                Ok(Some(waiting)) => {
                    failure.get_or_insert(waiting.message);
                }
                Err(e) => {
                    failure.get_or_insert(e.to_string());
                }
            }
        }
        let now = (self.clock)();
        if let Some(message) = failure {
            tracing::warn!(pod = %pod_key(pod), error = %message, "resizing the pod");
            self.allocations
                .set_in_progress(uid, REASON_ERROR, &message, now);
        } else {
            let left = running.iter().any(|(r, _)| {
                let actuated = self.allocations.actuated(uid, &r.container.name);
                !same_resources(r.container.resources.as_ref(), actuated.as_ref())
            });
            if left {
                self.allocations.set_in_progress(uid, "", "", now);
            } else if self.allocations.clear_in_progress(uid) {
                let message = resize::completed_message(pod);
                let event = PodEvent {
                    field_path: None,
                    ..PodEvent::normal("ResizeCompleted", "", message)
                };
                self.api.event(pod, event).await;
            }
        }
        changed
    }

    /// What a container's status reports as its resources (upstream's
    /// `convertContainerStatusResources`): for a resizable container that the runtime has,
    /// the allocated requests and limits, with the CPU and memory the runtime reports it
    /// running with; None for others.
    pub(crate) fn status_resources(
        &self,
        pod: &Pod,
        container: &Container,
        current: Option<&ContainerStatus>,
    ) -> Option<ResourceRequirements> {
        let current = current?;
        if !resizable(pod).any(|c| c.name == container.name) {
            return None;
        }
        let uid = pod.metadata.uid.as_deref().unwrap_or_default();
        let allocated = self
            .allocations
            .allocated(uid, &container.name)
            .unwrap_or_else(|| canonical(container.resources.as_ref()));
        let old = pod.status.as_ref().and_then(|s| {
            let statuses = s.container_statuses.iter().flatten();
            let init = s.init_container_statuses.iter().flatten();
            statuses.chain(init).find(|o| o.name == container.name)
        });
        let id = format!("{}://{}", self.runtime_name, current.id);
        Some(resize::status_resources(
            &allocated,
            current.state == ContainerState::ContainerRunning as i32,
            current.resources.as_ref(),
            old,
            Some(&id),
        ))
    }

    /// One step of a resize; the message of its failure.
    async fn take_resize_step(
        &self,
        pod: &Pod,
        running: &[(Running<'_>, &ContainerStatus)],
        step: &Step,
        restarted: &mut Vec<String>,
    ) -> Result<(), String> {
        let uid = pod.metadata.uid.as_deref().unwrap_or_default();
        let find = |name: &str| running.iter().find(|(r, _)| r.container.name == name);
        match step {
            Step::Restart { container, message } => {
                let Some((r, run)) = find(container) else {
                    return Ok(());
                };
                let event = PodEvent::normal("Killing", container, message.clone());
                self.api.event(pod, event).await;
                let grace = pod
                    .spec
                    .as_ref()
                    .and_then(|s| s.termination_grace_period_seconds)
                    .unwrap_or(30);
                let pod_ip = self.pod_ip(uid).await;
                self.kill_container(pod, Some(r.container), &run.id, &pod_ip, grace, async {})
                    .await
                    .map_err(|e| e.rpc_message())?;
                restarted.push(container.clone());
                Ok(())
            }
            Step::PodCgroup(config) => match &self.cgroups {
                Some(cgroups) => cgroups.set_pod(pod, config).map_err(|e| e.to_string()),
                None => Ok(()),
            },
            Step::Update {
                container,
                resources,
            } => {
                let Some((r, run)) = find(container) else {
                    return Ok(());
                };
                let linux =
                    resize::linux_resources(pod, r.container, resources, self.memory_capacity);
                self.runtime
                    .update_container_resources(&run.id, linux)
                    .await
                    .map_err(|e| e.rpc_message())?;
                let mut updated = r.container.clone();
                updated.resources = Some(resources.clone());
                if let Err(e) = self.allocations.set_actuated(uid, &updated) {
                    tracing::warn!(pod = %pod_key(pod), error = %e, "recording resources");
                }
                Ok(())
            }
        }
    }
}

/// Drops a finished pod's resize conditions, as upstream does for terminal pods.
pub(crate) fn clear_finished(allocations: &allocation::Allocations, uid: &str) {
    allocations.clear_pending(uid);
    allocations.clear_in_progress(uid);
}
