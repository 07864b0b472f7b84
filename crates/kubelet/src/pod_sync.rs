//! One sync of one pod, as upstream's `SyncPod`: find the pod's sandbox and containers in the
//! runtime by their labels (so a restarted kubelet adopts them), create the sandbox if there is
//! none, then carry out the plan of [`crate::actions`] (init containers in order, then app
//! containers; restarts with CrashLoopBackOff; ephemeral containers once): pull images as
//! imagePullPolicy says, create and start containers, with upstream's events; stop the sandbox of a finished pod, and write the
//! status back when it changed. Volumes are set up (and refreshed) before the sandbox: a volume
//! that fails keeps the pod `ContainerCreating` with a `FailedMount` event, and is retried. The
//! sandbox runs under the runtime handler of the pod's RuntimeClass; a sandbox that cannot be
//! created gives upstream's `FailedCreatePodSandBox` event and is retried. A pod that soft
//! admission refuses ([`crate::admission::soft_check`]) runs nothing. A pod with a
//! deletionTimestamp is stopped within its grace period and then removed from the API server,
//! its volumes torn down.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Container as ApiContainer, Pod, PodStatus};
use k8s_openapi::api::node::v1::RuntimeClass;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::runtime::reflector::ObjectRef;
use skiff_runtime::cache::Cache;

use crate::actions::{self, Init, Observed, Step};
use crate::api::{PodApi, PodEvent};
use crate::cri::{ContainerRuntime, ContainerStatus, PodSandboxConfig, PodSandboxState};
use crate::dns::DnsSettings;
use crate::ephemeral;
use crate::probe::{Kind, Probes};
use crate::security_context::NodeSecurity;
use crate::status::{self, ContainerView, PodView, Waiting};
use crate::volumes::VolumeManager;

pub use crate::config::{LABEL_CONTAINER_NAME, LABEL_POD_NAME, LABEL_POD_NAMESPACE, LABEL_POD_UID};

/// The shortest wait a sync asks for (a probe or a back-off due sooner waits this long).
pub const MIN_RESYNC: Duration = Duration::from_millis(500);
/// How long before retrying a failed image pull or container creation.
pub const RETRY: Duration = Duration::from_secs(10);

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("pod {pod}: {source}")]
    Runtime {
        pod: String,
        #[source]
        source: crate::cri::Error,
    },
    #[error(transparent)]
    Api(#[from] crate::api::Error),
    #[error(
        "failed to ensure that the pod: {uid} cgroups exist and are correctly applied: {source}"
    )]
    Cgroups {
        uid: String,
        #[source]
        source: crate::cgroups::Error,
    },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What the worker does after a sync.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Sync again after this long, or sooner if the pod changes.
    Resync(Duration),
    /// The pod has finished (no container will run again): watch for its deletion.
    Finished,
    /// The pod is stopped and removed: the worker ends.
    Done,
}

/// What every sync needs; shared by all pod workers of one kubelet.
#[derive(Clone)]
pub struct SyncContext {
    pub runtime: Arc<dyn ContainerRuntime>,
    pub api: Arc<dyn PodApi>,
    /// The node's IP (`status.hostIP`).
    pub host_ip: String,
    /// The runtime's name, the scheme of container ids.
    pub runtime_name: String,
    /// The node's memory, in bytes (Burstable containers' `oom_score_adj` is relative to it).
    pub memory_capacity: u64,
    /// Container logs go under `<log_dir>/<namespace>_<name>_<uid>/<container>/<attempt>.log`.
    pub log_dir: PathBuf,
    pub clock: Arc<dyn Fn() -> Timestamp + Send + Sync>,
    /// The pods' volumes (and their directories, where /etc/hosts is written).
    pub volumes: Arc<VolumeManager>,
    /// `--cluster-dns`, `--cluster-domain` and the host's resolv.conf.
    pub dns: Arc<DnsSettings>,
    /// The node's allocatable resources (the downward API's default limits).
    pub allocatable: BTreeMap<String, Quantity>,
    /// How long a pod with nothing due waits for its next sync (`--sync-frequency`); changes
    /// of the pod or of its containers sync it at once.
    pub sync_frequency: Duration,
    /// The node's seccomp profile directory, AppArmor support and allowed sysctls.
    pub security: Arc<NodeSecurity>,
    /// The cluster's RuntimeClasses (an informer's cache), whose handlers sandboxes run under.
    pub runtime_classes: Cache<RuntimeClass>,
    /// Pod cgroups in the QoS hierarchy (`cgroupsPerQOS`); None: pods go where the runtime
    /// puts them.
    pub cgroups: Option<Arc<crate::cgroups::PodCgroups>>,
    /// What was allocated to each pod (its containers run with that, not with the spec's),
    /// and the pods' resize conditions.
    pub allocations: Arc<crate::allocation::Allocations>,
}

/// A pod's containers as the runtime has them.
struct Observation {
    /// Runs by container name, newest first (the two newest of each).
    runs: HashMap<String, Vec<ContainerStatus>>,
    /// Each container's sandbox, by container id.
    sandbox_of: HashMap<String, String>,
}

impl Observation {
    /// The ids of the runs in `sandbox` (all of them for None).
    fn in_sandbox(&self, sandbox: Option<&str>) -> HashSet<String> {
        self.runs
            .values()
            .flatten()
            .filter(|s| {
                sandbox.is_none_or(|id| self.sandbox_of.get(&s.id).is_some_and(|of| of == id))
            })
            .map(|s| s.id.clone())
            .collect()
    }
}

pub(crate) fn pod_key(pod: &Pod) -> String {
    format!(
        "{}/{}",
        pod.metadata.namespace.as_deref().unwrap_or("default"),
        pod.metadata.name.as_deref().unwrap_or_default()
    )
}

/// The pod as upstream's messages name it: `name_namespace(uid)`.
pub(crate) fn format_pod(pod: &Pod) -> String {
    let m = &pod.metadata;
    format!(
        "{}_{}({})",
        m.name.as_deref().unwrap_or_default(),
        m.namespace.as_deref().unwrap_or("default"),
        m.uid.as_deref().unwrap_or_default()
    )
}

/// The waiting reason the pod's last written status gives for a container.
pub(crate) fn waiting_reason_of(pod: &Pod, container: &str) -> Option<String> {
    pod.status
        .as_ref()?
        .container_statuses
        .as_ref()?
        .iter()
        .find(|s| s.name == container)?
        .state
        .as_ref()?
        .waiting
        .as_ref()?
        .reason
        .clone()
}

pub(crate) fn uid_labels(uid: &str) -> HashMap<String, String> {
    HashMap::from([(LABEL_POD_UID.to_string(), uid.to_string())])
}

/// The directory of a pod's container logs under the kubelet's log directory
/// (`<namespace>_<name>_<uid>`, as upstream).
pub fn pod_log_dir(log_dir: &Path, pod: &Pod) -> PathBuf {
    let m = &pod.metadata;
    log_dir.join(format!(
        "{}_{}_{}",
        m.namespace.as_deref().unwrap_or("default"),
        m.name.as_deref().unwrap_or_default(),
        m.uid.as_deref().unwrap_or_default()
    ))
}

impl SyncContext {
    pub(crate) fn runtime_err(&self, pod: &Pod) -> impl FnOnce(crate::cri::Error) -> Error {
        let pod = pod_key(pod);
        move |source| Error::Runtime { pod, source }
    }

    /// The directory of the pod's container logs.
    pub fn pod_log_dir(&self, pod: &Pod) -> PathBuf {
        pod_log_dir(&self.log_dir, pod)
    }

    /// Writes the pod's new status, unless it is the one the pod has.
    pub(crate) async fn write_status(&self, pod: &Pod, status: &PodStatus) -> Result<()> {
        let old = serde_json::to_value(pod.status.clone().unwrap_or_default()).ok();
        if old != serde_json::to_value(status).ok() {
            let m = &pod.metadata;
            self.api
                .patch_status(
                    m.namespace.as_deref().unwrap_or("default"),
                    m.name.as_deref().unwrap_or_default(),
                    status,
                )
                .await?;
        }
        Ok(())
    }

    /// The CRI runtime handler of the pod's RuntimeClass, none for a pod without one
    /// (upstream's `LookupRuntimeHandler`), or why the sandbox cannot be made: the class is
    /// missing, or the pod asks for a user namespace (`hostUsers: false`), which no handler of
    /// containerd 1.6 supports.
    fn runtime_handler(&self, pod: &Pod) -> std::result::Result<String, String> {
        let spec = pod.spec.as_ref();
        let name = spec.and_then(|s| s.runtime_class_name.as_deref());
        let handler = match name.filter(|n| !n.is_empty()) {
            None => String::new(),
            Some(name) if !self.runtime_classes.is_ready() => {
                return Err(format!(
                    "failed to lookup RuntimeClass {name}: the RuntimeClasses are not listed yet"
                ));
            }
            Some(name) => match self.runtime_classes.get(&ObjectRef::new(name)) {
                Some(class) => class.handler.clone(),
                None => return Err(format!("runtimeclass.node.k8s.io {name:?} not found")),
            },
        };
        if spec.and_then(|s| s.host_users) == Some(false) {
            return Err(format!(
                "RuntimeClass handler {handler:?} does not support user namespaces"
            ));
        }
        Ok(handler)
    }

    /// The pod's containers in the runtime, grouped by container name, newest attempt first,
    /// with their statuses (only the two newest of each name are asked for), and the sandbox
    /// of each (by container id).
    async fn observe(&self, pod: &Pod) -> Result<Observation> {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let mut listed = self
            .runtime
            .list_containers(uid_labels(&uid))
            .await
            .map_err(self.runtime_err(pod))?;
        listed.sort_by_key(|c| {
            std::cmp::Reverse((c.metadata.as_ref().map(|m| m.attempt), c.created_at))
        });
        let mut by_name: HashMap<String, Vec<ContainerStatus>> = HashMap::new();
        let sandbox_of = listed
            .iter()
            .map(|c| (c.id.clone(), c.pod_sandbox_id.clone()))
            .collect();
        for c in listed {
            let name = c
                .labels
                .get(LABEL_CONTAINER_NAME)
                .cloned()
                .unwrap_or_default();
            let entry = by_name.entry(name).or_default();
            if entry.len() < 2 {
                match self.runtime.container_status(&c.id).await {
                    Ok(s) => entry.push(s),
                    Err(e) if e.is_not_found() => {}
                    Err(e) => return Err(self.runtime_err(pod)(e)),
                }
            }
        }
        Ok(Observation {
            runs: by_name,
            sandbox_of,
        })
    }

    /// Syncs the pod once.
    pub async fn sync_pod(&self, pod: &Pod, probes: &mut Probes) -> Result<Outcome> {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        if pod.metadata.deletion_timestamp.is_some() {
            let spec = pod.spec.clone().unwrap_or_default();
            let grace = pod
                .metadata
                .deletion_grace_period_seconds
                .or(spec.termination_grace_period_seconds)
                .unwrap_or(30);
            self.kill_pod(pod, grace).await?;
            self.api
                .delete_now(
                    pod.metadata.namespace.as_deref().unwrap_or("default"),
                    pod.metadata.name.as_deref().unwrap_or_default(),
                    &uid,
                )
                .await?;
            return Ok(Outcome::Done);
        }
        if let Err(blocked) = crate::admission::soft_check(pod, &self.security) {
            return self.sync_blocked(pod, blocked).await;
        }
        let spec = pod.spec.clone().unwrap_or_default();
        let already_terminal = matches!(
            pod.status.as_ref().and_then(|s| s.phase.as_deref()),
            Some("Succeeded" | "Failed")
        );
        let now = (self.clock)();
        let mut resync = self.sync_frequency;
        let mut waiting: HashMap<String, Waiting> = HashMap::new();
        let all_containers: Vec<&ApiContainer> = spec
            .init_containers
            .iter()
            .flatten()
            .chain(&spec.containers)
            .collect();

        let sandboxes = self
            .runtime
            .list_pod_sandboxes(uid_labels(&uid))
            .await
            .map_err(self.runtime_err(pod))?;
        let attempt_of = |s: &crate::cri::PodSandbox| s.metadata.as_ref().map_or(0, |m| m.attempt);
        let mut ready = sandboxes
            .iter()
            .filter(|s| s.state == PodSandboxState::SandboxReady as i32)
            .max_by_key(|s| s.created_at)
            .map(|s| (s.id.clone(), attempt_of(s)));
        // the container garbage collection removes old sandboxes: numbered after the newest
        let next_attempt = sandboxes
            .iter()
            .map(|s| attempt_of(s) + 1)
            .max()
            .unwrap_or(0);

        let mut seen = self.observe(pod).await?;
        let startup_passed: HashSet<String> = seen
            .runs
            .values()
            .flatten()
            .filter(|s| probes.result(&s.id, Kind::Startup))
            .map(|s| s.id.clone())
            .collect();
        // `sandbox`: the runs of which sandbox count (None: all, to judge a pod without one)
        let plan_for = |seen: &Observation, sandbox: Option<&str>| {
            let in_sandbox = seen.in_sandbox(sandbox);
            let observed = Observed {
                runs: &seen.runs,
                in_sandbox: &in_sandbox,
                startup_passed: &startup_passed,
            };
            let mut plan = actions::plan(pod, observed, now);
            if already_terminal {
                // phases never go back: nothing runs again
                plan.steps.clear();
                plan.finished = true;
            }
            plan
        };
        let mut plan = plan_for(&seen, ready.as_ref().map(|(id, _)| id.as_str()));
        if ready.is_none() {
            // judged on every run: a pod that has finished gets no new sandbox
            plan = plan_for(&seen, None);
        }
        // upstream's kubelet gives a Never pod whose containers ran no second sandbox
        let recreate = spec.restart_policy.as_deref() != Some("Never") || seen.runs.is_empty();

        if !plan.finished {
            self.ensure_cgroup(pod).await?;
        }
        let volumes_ready = plan.finished
            || match self.set_up_volumes(pod, now).await {
                Ok(()) => true,
                Err(retry_in) => {
                    resync = resync.min(retry_in);
                    false
                }
            };

        if ready.is_none() && !plan.finished && !sandboxes.is_empty() {
            // the pod's sandbox died: what still runs of it is stopped first
            let grace = spec.termination_grace_period_seconds.unwrap_or(30);
            self.stop_containers(pod, grace).await?;
            seen = self.observe(pod).await?;
        }
        if ready.is_none() && !plan.finished && volumes_ready && recreate {
            let (config, dns_warning) = self.sandbox_for(pod, next_attempt);
            if let Some(message) = dns_warning {
                let event = PodEvent::pod_warning("MissingClusterDNS", message);
                self.api.event(pod, event).await;
            }
            let _ = std::fs::create_dir_all(self.pod_log_dir(pod));
            let created = match self.runtime_handler(pod) {
                Ok(handler) => self
                    .runtime
                    .run_pod_sandbox(config, &handler)
                    .await
                    .map_err(|e| e.rpc_message()),
                Err(why) => Err(why),
            };
            match created {
                Ok(id) => {
                    tracing::info!(pod = %pod_key(pod), sandbox = %id, "sandbox ready");
                    // nothing has run in it yet: init containers start again from the first
                    plan = plan_for(&seen, Some(&id));
                    ready = Some((id, next_attempt));
                }
                Err(why) => {
                    tracing::warn!(pod = %pod_key(pod), error = %why, "creating the sandbox failed");
                    let message = format!("Failed to create pod sandbox: {why}");
                    let event = PodEvent::pod_warning("FailedCreatePodSandBox", message);
                    self.api.event(pod, event).await;
                    for c in &all_containers {
                        waiting.insert(
                            c.name.clone(),
                            Waiting {
                                reason: "CreatePodSandboxError".into(),
                                message: why.clone(),
                            },
                        );
                    }
                    resync = resync.min(RETRY);
                }
            }
        }

        if let Some((sandbox_id, attempt)) = ready.as_ref().filter(|_| volumes_ready) {
            let (sandbox, _) = self.sandbox_for(pod, *attempt);
            let here = |id: &str| seen.sandbox_of.get(id) == Some(sandbox_id);
            if !plan.finished
                && self
                    .actuate_resize(pod, sandbox_id, &sandbox, &seen.runs, here)
                    .await
            {
                seen = self.observe(pod).await?;
                plan = plan_for(&seen, Some(sandbox_id.as_str()));
            }
            // an init container that is done at once lets the next one start in the same sync
            for _ in 0..=all_containers.len() {
                if plan.finished
                    || !self
                        .take_steps(
                            pod,
                            (sandbox_id, &sandbox),
                            &plan,
                            &seen.runs,
                            &mut waiting,
                            &mut resync,
                        )
                        .await?
                {
                    break;
                }
                seen = self.observe(pod).await?;
                plan = plan_for(&seen, Some(sandbox_id.as_str()));
            }
        }
        // the last plan's back-offs show even when the loop above stopped before acting on it,
        // and the restart comes with the first sync after the back-off
        for (name, step) in &plan.steps {
            if let Some(w) = actions::waiting(step, name, pod) {
                waiting.entry(name.clone()).or_insert(w);
            }
            if let Step::BackOff { left, .. } = step {
                resync = resync.min(*left);
            }
        }
        if plan.init != Init::Done {
            for c in &spec.containers {
                waiting.entry(c.name.clone()).or_insert(Waiting {
                    reason: "PodInitializing".into(),
                    message: String::new(),
                });
            }
        }

        // a finished pod gives its sandbox (and pod IP) back
        let mut sandbox_status = None;
        if let Some((id, _)) = &ready {
            if plan.finished {
                self.runtime
                    .stop_pod_sandbox(id)
                    .await
                    .map_err(self.runtime_err(pod))?;
            } else {
                sandbox_status = self.runtime.pod_sandbox_status(id).await.ok();
            }
        }
        if plan.finished {
            // nothing runs in it any more (upstream removes a terminated pod's cgroup)
            self.remove_cgroup(pod).await;
            crate::pod_resize::clear_finished(&self.allocations, &uid);
        }
        let mut probed: HashMap<String, (bool, bool)> = HashMap::new();
        if sandbox_status.is_some() {
            let pod_ip = if spec.host_network == Some(true) {
                self.host_ip.clone()
            } else {
                sandbox_status
                    .as_ref()
                    .and_then(|s| s.network.as_ref())
                    .map(|n| n.ip.clone())
                    .unwrap_or_default()
            };
            let probed_now = self.probe(pod, &seen.runs, &pod_ip, now, probes).await;
            probed = probed_now.results;
            if let Some(next) = probed_now.next {
                resync = resync.min(next);
            }
            if probed_now.killed {
                seen = self.observe(pod).await?;
            }
            // a sidecar that passed its startup probe just now lets the next init container
            // start: sync again soon rather than at the next probe
            let sidecar_started = spec.init_containers.iter().flatten().any(|c| {
                let run = seen.runs.get(&c.name).and_then(|h| h.first());
                actions::is_sidecar(c)
                    && c.startup_probe.is_some()
                    && run.is_some_and(|r| {
                        !startup_passed.contains(&r.id) && probes.result(&r.id, Kind::Startup)
                    })
            });
            if plan.init == Init::InProgress && sidecar_started {
                resync = MIN_RESYNC;
            }
        }

        let mut view_of = |c: &ApiContainer| {
            let history = seen.runs.get(&c.name);
            let current = history.and_then(|h| h.first()).cloned();
            ContainerView {
                name: c.name.clone(),
                image: c.image.clone().unwrap_or_default(),
                resources: self.status_resources(pod, c, current.as_ref()),
                current,
                previous: history.and_then(|h| h.get(1)).cloned(),
                waiting: waiting.remove(&c.name),
                probed: probed.get(&c.name).copied(),
            }
        };
        let view = PodView {
            sandbox: sandbox_status,
            init_containers: spec
                .init_containers
                .iter()
                .flatten()
                .map(&mut view_of)
                .collect(),
            containers: spec.containers.iter().map(&mut view_of).collect(),
            ephemeral_containers: ephemeral::containers(&spec)
                .iter()
                .map(&mut view_of)
                .collect(),
            init: plan.init,
            host_ip: self.host_ip.clone(),
            runtime_name: self.runtime_name.clone(),
            resize_conditions: self.allocations.conditions(&uid),
        };
        for c in view.init_containers.iter().chain(&view.containers) {
            if let Some(w) = &c.waiting
                && w.reason == "CrashLoopBackOff"
                && waiting_reason_of(pod, &c.name).as_deref() != Some("CrashLoopBackOff")
            {
                let message = format!(
                    "Back-off restarting failed container {} in pod {}",
                    c.name,
                    format_pod(pod)
                );
                let event = PodEvent::warning("BackOff", &c.name, message);
                self.api.event(pod, event).await;
            }
        }
        let new_status = status::pod_status(pod, &view, now);
        self.write_status(pod, &new_status).await?;
        if plan.finished {
            return Ok(Outcome::Finished);
        }
        Ok(Outcome::Resync(resync.max(MIN_RESYNC)))
    }

    /// Carries out a plan's steps in the sandbox (its id and config) with the containers'
    /// `runs` as observed; returns whether a container was started (so the runtime's state
    /// changed).
    async fn take_steps(
        &self,
        pod: &Pod,
        (sandbox_id, sandbox): (&str, &PodSandboxConfig),
        plan: &actions::Plan,
        runs: &HashMap<String, Vec<ContainerStatus>>,
        waiting: &mut HashMap<String, Waiting>,
        resync: &mut Duration,
    ) -> Result<bool> {
        let spec = pod.spec.clone().unwrap_or_default();
        let ephemeral_containers = ephemeral::containers(&spec);
        let mut changed = false;
        for (name, step) in &plan.steps {
            let Some(container) = spec
                .init_containers
                .iter()
                .flatten()
                .chain(&spec.containers)
                .chain(&ephemeral_containers)
                .find(|c| &c.name == name)
            else {
                continue;
            };
            match step {
                Step::Keep => {}
                Step::BackOff { .. } => {
                    if let Some(w) = actions::waiting(step, name, pod) {
                        waiting.insert(name.clone(), w);
                    }
                }
                Step::StartCreated { id } => {
                    changed = true;
                    if let Err(e) = self.runtime.start_container(id).await {
                        let w = Waiting {
                            reason: "RunContainerError".into(),
                            message: e.to_string(),
                        };
                        waiting.insert(name.clone(), w);
                        *resync = (*resync).min(RETRY);
                    }
                }
                Step::Start { attempt } => {
                    changed = true;
                    let target = ephemeral::target_of(&spec, name)
                        .map(|t| ephemeral::target_id(t, runs.get(t).map(Vec::as_slice)))
                        .transpose();
                    let target = match target {
                        Ok(target) => target,
                        Err(problem) => {
                            let w = self.config_error(pod, name, problem).await;
                            waiting.insert(name.clone(), w);
                            *resync = (*resync).min(RETRY);
                            continue;
                        }
                    };
                    // the exited runs stay for lastState and `logs --previous`; the container
                    // garbage collection removes all but the newest
                    if let Some(w) = self
                        .start_container(
                            pod,
                            sandbox_id,
                            sandbox,
                            container,
                            *attempt,
                            target.as_deref(),
                        )
                        .await?
                    {
                        waiting.insert(name.clone(), w);
                        *resync = (*resync).min(RETRY);
                    }
                }
            }
        }
        Ok(changed && waiting.is_empty())
    }
}

#[cfg(test)]
#[path = "pod_sync_tests.rs"]
mod tests;
