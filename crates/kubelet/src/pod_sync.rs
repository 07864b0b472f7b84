//! One sync of one pod, as upstream's `SyncPod`: find the pod's sandbox and containers in the
//! runtime by their labels (so a restarted kubelet adopts them), create the sandbox if there is
//! none, pull images as imagePullPolicy says, create and start containers, restart exited ones
//! as restartPolicy says with CrashLoopBackOff (10 s doubling to 5 min), stop the sandbox of a
//! finished pod, and write the status back when it changed. A pod with a deletionTimestamp is
//! stopped within its grace period and then removed from the API server.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use k8s_cri::v1::{
    LinuxContainerConfig, LinuxContainerSecurityContext, LinuxPodSandboxConfig,
    LinuxSandboxSecurityContext, NamespaceMode, NamespaceOption, PortMapping, Protocol,
};
use k8s_openapi::api::core::v1::{Container as ApiContainer, Pod};

use crate::api::{PodApi, PodEvent};
use crate::cri::{
    ContainerConfig, ContainerMetadata, ContainerRuntime, ContainerState, ContainerStatus,
    ImageSpec, KeyValue, PodSandboxConfig, PodSandboxMetadata, PodSandboxState,
};
use crate::status::{self, ContainerView, PodView, Waiting};

/// Labels the kubelet puts on sandboxes and containers (upstream's names), by which it finds
/// them again.
pub const LABEL_POD_UID: &str = "io.kubernetes.pod.uid";
pub const LABEL_POD_NAME: &str = "io.kubernetes.pod.name";
pub const LABEL_POD_NAMESPACE: &str = "io.kubernetes.pod.namespace";
pub const LABEL_CONTAINER_NAME: &str = "io.kubernetes.container.name";

/// How often a pod is looked at when nothing happens (upstream's PLEG relists every second).
pub const RESYNC: Duration = Duration::from_secs(1);
/// How long before retrying a failed image pull or container creation.
pub const RETRY: Duration = Duration::from_secs(10);
/// CrashLoopBackOff: the first restart is immediate, then 10 s doubling up to 5 min.
pub const BACKOFF_INITIAL: Duration = Duration::from_secs(10);
pub const BACKOFF_MAX: Duration = Duration::from_secs(300);

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
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What the worker does after a sync.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Sync again after this long, or sooner if the pod changes.
    Resync(Duration),
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
    /// Container logs go under `<log_dir>/<namespace>_<name>_<uid>/<container>/<attempt>.log`.
    pub log_dir: PathBuf,
    pub clock: Arc<dyn Fn() -> Timestamp + Send + Sync>,
}

/// CrashLoopBackOff's delay before restart number `restarts + 1`.
pub fn backoff(restarts: u32) -> Duration {
    if restarts == 0 {
        return Duration::ZERO;
    }
    let factor = 1u32.checked_shl(restarts - 1).unwrap_or(u32::MAX);
    BACKOFF_INITIAL.saturating_mul(factor).min(BACKOFF_MAX)
}

/// Whether a container that exited with `exit_code` is restarted under `policy`.
pub fn should_restart(policy: &str, exit_code: i32) -> bool {
    match policy {
        "Never" => false,
        "OnFailure" => exit_code != 0,
        _ => true,
    }
}

fn pod_key(pod: &Pod) -> String {
    format!(
        "{}/{}",
        pod.metadata.namespace.as_deref().unwrap_or("default"),
        pod.metadata.name.as_deref().unwrap_or_default()
    )
}

/// The waiting reason the pod's last written status gives for a container.
fn waiting_reason_of(pod: &Pod, container: &str) -> Option<String> {
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

fn uid_labels(uid: &str) -> HashMap<String, String> {
    HashMap::from([(LABEL_POD_UID.to_string(), uid.to_string())])
}

impl SyncContext {
    fn runtime_err(&self, pod: &Pod) -> impl FnOnce(crate::cri::Error) -> Error {
        let pod = pod_key(pod);
        move |source| Error::Runtime { pod, source }
    }

    /// The directory of the pod's container logs.
    pub fn pod_log_dir(&self, pod: &Pod) -> PathBuf {
        let m = &pod.metadata;
        self.log_dir.join(format!(
            "{}_{}_{}",
            m.namespace.as_deref().unwrap_or("default"),
            m.name.as_deref().unwrap_or_default(),
            m.uid.as_deref().unwrap_or_default()
        ))
    }

    /// The sandbox config of a pod; the same every time, as CreateContainer needs it too.
    pub fn sandbox_config(&self, pod: &Pod, attempt: u32) -> PodSandboxConfig {
        let m = &pod.metadata;
        let spec = pod.spec.clone().unwrap_or_default();
        let namespace = m.namespace.clone().unwrap_or_else(|| "default".into());
        let name = m.name.clone().unwrap_or_default();
        let uid = m.uid.clone().unwrap_or_default();
        let mut labels: HashMap<String, String> =
            m.labels.clone().unwrap_or_default().into_iter().collect();
        labels.insert(LABEL_POD_UID.into(), uid.clone());
        labels.insert(LABEL_POD_NAME.into(), name.clone());
        labels.insert(LABEL_POD_NAMESPACE.into(), namespace.clone());
        let port_mappings = spec
            .containers
            .iter()
            .flat_map(|c| c.ports.iter().flatten())
            .filter(|p| p.host_port.unwrap_or(0) > 0)
            .map(|p| PortMapping {
                protocol: match p.protocol.as_deref() {
                    Some("UDP") => Protocol::Udp,
                    Some("SCTP") => Protocol::Sctp,
                    _ => Protocol::Tcp,
                } as i32,
                container_port: p.container_port,
                host_port: p.host_port.unwrap_or(0),
                host_ip: p.host_ip.clone().unwrap_or_default(),
            })
            .collect();
        PodSandboxConfig {
            metadata: Some(PodSandboxMetadata {
                name: name.clone(),
                uid,
                namespace,
                attempt,
            }),
            hostname: spec.hostname.clone().unwrap_or(name),
            log_directory: self.pod_log_dir(pod).display().to_string(),
            port_mappings,
            labels,
            annotations: m
                .annotations
                .clone()
                .unwrap_or_default()
                .into_iter()
                .collect(),
            linux: Some(LinuxPodSandboxConfig {
                security_context: Some(LinuxSandboxSecurityContext {
                    namespace_options: Some(namespace_options(pod)),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn container_config(
        &self,
        pod: &Pod,
        container: &ApiContainer,
        image_ref: &str,
        attempt: u32,
    ) -> ContainerConfig {
        let m = &pod.metadata;
        let labels = HashMap::from([
            (LABEL_POD_UID.to_string(), m.uid.clone().unwrap_or_default()),
            (
                LABEL_POD_NAME.to_string(),
                m.name.clone().unwrap_or_default(),
            ),
            (
                LABEL_POD_NAMESPACE.to_string(),
                m.namespace.clone().unwrap_or_else(|| "default".into()),
            ),
            (LABEL_CONTAINER_NAME.to_string(), container.name.clone()),
        ]);
        let envs = container
            .env
            .iter()
            .flatten()
            .filter_map(|e| {
                e.value.as_ref().map(|v| KeyValue {
                    key: e.name.clone(),
                    value: v.clone(),
                })
            })
            .collect();
        ContainerConfig {
            metadata: Some(ContainerMetadata {
                name: container.name.clone(),
                attempt,
            }),
            image: Some(ImageSpec {
                image: image_ref.into(),
                user_specified_image: container.image.clone().unwrap_or_default(),
                ..Default::default()
            }),
            command: container.command.clone().unwrap_or_default(),
            args: container.args.clone().unwrap_or_default(),
            working_dir: container.working_dir.clone().unwrap_or_default(),
            envs,
            labels,
            annotations: HashMap::from([(
                "io.kubernetes.container.restartCount".to_string(),
                attempt.to_string(),
            )]),
            log_path: format!("{}/{attempt}.log", container.name),
            stdin: container.stdin.unwrap_or(false),
            stdin_once: container.stdin_once.unwrap_or(false),
            tty: container.tty.unwrap_or(false),
            linux: Some(LinuxContainerConfig {
                resources: None,
                security_context: Some(LinuxContainerSecurityContext {
                    namespace_options: Some(namespace_options(pod)),
                    privileged: container
                        .security_context
                        .as_ref()
                        .and_then(|s| s.privileged)
                        .unwrap_or(false),
                    ..Default::default()
                }),
            }),
            ..Default::default()
        }
    }

    /// Makes the image present as imagePullPolicy says, returning its reference or why the
    /// container has to wait, with upstream's events. `Always` falls back to a present image
    /// when the pull fails: there is no registry on an offline machine, and Skiff's built-in
    /// busybox is tagged `latest`. A pull that failed before shows as `ImagePullBackOff`.
    async fn ensure_image(
        &self,
        pod: &Pod,
        container: &ApiContainer,
    ) -> Result<std::result::Result<String, Waiting>> {
        let name = &container.name;
        let image = container.image.clone().unwrap_or_default();
        let policy = container
            .image_pull_policy
            .as_deref()
            .unwrap_or("IfNotPresent");
        let failed = |message: String| {
            let backoff = matches!(
                waiting_reason_of(pod, name).as_deref(),
                Some("ErrImagePull" | "ImagePullBackOff")
            );
            Waiting {
                reason: if backoff {
                    "ImagePullBackOff"
                } else {
                    "ErrImagePull"
                }
                .into(),
                message,
            }
        };
        let present = match self.runtime.image_status(&image).await {
            Ok(found) => found.map(|i| i.id),
            Err(e) => return Ok(Err(failed(e.to_string()))),
        };
        if policy == "Never" || (policy == "IfNotPresent" && present.is_some()) {
            return Ok(match present {
                Some(id) => {
                    let message = format!("Container image \"{image}\" already present on machine");
                    self.api
                        .event(pod, PodEvent::normal("Pulled", name, message))
                        .await;
                    Ok(id)
                }
                None => {
                    let message = format!(
                        "Container image \"{image}\" is not present with pull policy of Never"
                    );
                    let event = PodEvent::warning("ErrImageNeverPull", name, message.clone());
                    self.api.event(pod, event).await;
                    Err(Waiting {
                        reason: "ErrImageNeverPull".into(),
                        message,
                    })
                }
            });
        }
        let pulling = format!("Pulling image \"{image}\"");
        self.api
            .event(pod, PodEvent::normal("Pulling", name, pulling))
            .await;
        let started = std::time::Instant::now();
        match self.runtime.pull_image(&image).await {
            Ok(image_ref) => {
                let message = format!(
                    "Successfully pulled image \"{image}\" in {:.3}s",
                    started.elapsed().as_secs_f64()
                );
                self.api
                    .event(pod, PodEvent::normal("Pulled", name, message))
                    .await;
                Ok(Ok(image_ref))
            }
            Err(e) => match present {
                Some(id) => {
                    tracing::info!(image, error = %e, "pull failed; using the image present");
                    let message = format!(
                        "Container image \"{image}\" already present on machine (pull failed: {e})"
                    );
                    self.api
                        .event(pod, PodEvent::normal("Pulled", name, message))
                        .await;
                    Ok(Ok(id))
                }
                None => {
                    let message = format!("Failed to pull image \"{image}\": {e}");
                    let event = PodEvent::warning("Failed", name, message.clone());
                    self.api.event(pod, event).await;
                    Ok(Err(failed(message)))
                }
            },
        }
    }

    /// Pulls, creates and starts one container; a failure becomes a waiting reason.
    async fn start_container(
        &self,
        pod: &Pod,
        sandbox_id: &str,
        sandbox: &PodSandboxConfig,
        container: &ApiContainer,
        attempt: u32,
    ) -> Result<Option<Waiting>> {
        let name = &container.name;
        let image_ref = match self.ensure_image(pod, container).await? {
            Ok(r) => r,
            Err(waiting) => return Ok(Some(waiting)),
        };
        let _ = std::fs::create_dir_all(self.pod_log_dir(pod).join(name));
        let config = self.container_config(pod, container, &image_ref, attempt);
        let id = match self
            .runtime
            .create_container(sandbox_id, config, sandbox.clone())
            .await
        {
            Ok(id) => id,
            Err(e) => {
                let message = format!("Error: {e}");
                self.api
                    .event(pod, PodEvent::warning("Failed", name, message))
                    .await;
                return Ok(Some(Waiting {
                    reason: "CreateContainerError".into(),
                    message: e.to_string(),
                }));
            }
        };
        let created = format!("Created container: {name}");
        self.api
            .event(pod, PodEvent::normal("Created", name, created))
            .await;
        if let Err(e) = self.runtime.start_container(&id).await {
            let message = format!("Error: {e}");
            self.api
                .event(pod, PodEvent::warning("Failed", name, message))
                .await;
            return Ok(Some(Waiting {
                reason: "RunContainerError".into(),
                message: e.to_string(),
            }));
        }
        let started = format!("Started container {name}");
        self.api
            .event(pod, PodEvent::normal("Started", name, started))
            .await;
        tracing::info!(pod = %pod_key(pod), container = %name, attempt, "started");
        Ok(None)
    }

    /// The pod's containers in the runtime, grouped by container name, newest attempt first,
    /// with their statuses (only the two newest of each name are asked for).
    async fn observe(&self, pod: &Pod) -> Result<HashMap<String, Vec<ContainerStatus>>> {
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
        Ok(by_name)
    }

    /// Syncs the pod once.
    pub async fn sync_pod(&self, pod: &Pod) -> Result<Outcome> {
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
        let spec = pod.spec.clone().unwrap_or_default();
        let policy = spec.restart_policy.as_deref().unwrap_or("Always");
        let already_terminal = matches!(
            pod.status.as_ref().and_then(|s| s.phase.as_deref()),
            Some("Succeeded" | "Failed")
        );
        let now = (self.clock)();
        let mut resync = RESYNC;
        let mut waiting: HashMap<String, Waiting> = HashMap::new();

        let mut containers = self.observe(pod).await?;
        // done: every container ran and none will run again
        let finished = |containers: &HashMap<String, Vec<ContainerStatus>>| {
            already_terminal
                || spec.containers.iter().all(|c| {
                    containers
                        .get(&c.name)
                        .and_then(|h| h.first())
                        .is_some_and(|s| {
                            s.state == ContainerState::ContainerExited as i32
                                && !should_restart(policy, s.exit_code)
                        })
                })
        };

        let sandboxes = self
            .runtime
            .list_pod_sandboxes(uid_labels(&uid))
            .await
            .map_err(self.runtime_err(pod))?;
        let mut ready = sandboxes
            .iter()
            .filter(|s| s.state == PodSandboxState::SandboxReady as i32)
            .max_by_key(|s| s.created_at)
            .map(|s| s.id.clone());

        if ready.is_none() && !finished(&containers) {
            let config = self.sandbox_config(pod, sandboxes.len() as u32);
            let _ = std::fs::create_dir_all(self.pod_log_dir(pod));
            match self.runtime.run_pod_sandbox(config).await {
                Ok(id) => {
                    tracing::info!(pod = %pod_key(pod), sandbox = %id, "sandbox ready");
                    ready = Some(id);
                }
                Err(e) => {
                    tracing::warn!(pod = %pod_key(pod), error = %e, "creating the sandbox failed");
                    for c in &spec.containers {
                        waiting.insert(
                            c.name.clone(),
                            Waiting {
                                reason: "CreatePodSandboxError".into(),
                                message: e.to_string(),
                            },
                        );
                    }
                    resync = RETRY;
                }
            }
        }

        if let Some(sandbox_id) = ready.as_deref()
            && !finished(&containers)
        {
            let attempt = sandboxes.len().saturating_sub(1) as u32;
            let sandbox = self.sandbox_config(pod, attempt);
            let mut changed = false;
            for container in &spec.containers {
                let latest = containers.get(&container.name).and_then(|h| h.first());
                let next_attempt = match latest {
                    None => Some(0),
                    Some(c) if c.state == ContainerState::ContainerRunning as i32 => None,
                    Some(c) if c.state == ContainerState::ContainerCreated as i32 => {
                        // created but never started (a failed start): try the start again
                        if let Err(e) = self.runtime.start_container(&c.id).await {
                            waiting.insert(
                                container.name.clone(),
                                Waiting {
                                    reason: "RunContainerError".into(),
                                    message: e.to_string(),
                                },
                            );
                            resync = resync.max(RETRY);
                        }
                        changed = true;
                        None
                    }
                    Some(c) if !should_restart(policy, c.exit_code) => None,
                    Some(c) => {
                        let restarts = c.metadata.as_ref().map(|m| m.attempt).unwrap_or(0);
                        let delay = backoff(restarts);
                        let finished_at = Timestamp::from_nanosecond(i128::from(c.finished_at))
                            .unwrap_or(Timestamp::UNIX_EPOCH);
                        let elapsed = now
                            .duration_since(finished_at)
                            .try_into()
                            .unwrap_or(Duration::ZERO);
                        if elapsed >= delay {
                            Some(restarts + 1)
                        } else {
                            let m = &pod.metadata;
                            waiting.insert(
                                container.name.clone(),
                                Waiting {
                                    reason: "CrashLoopBackOff".into(),
                                    message: format!(
                                        "back-off {}s restarting failed container={} pod={}_{}({})",
                                        delay.as_secs(),
                                        container.name,
                                        m.name.as_deref().unwrap_or_default(),
                                        m.namespace.as_deref().unwrap_or("default"),
                                        uid
                                    ),
                                },
                            );
                            resync = resync.max(delay - elapsed).min(BACKOFF_MAX);
                            None
                        }
                    }
                };
                if let Some(attempt) = next_attempt {
                    changed = true;
                    // keep the newest exited run (it becomes lastState), remove older ones
                    for old in containers
                        .get(&container.name)
                        .into_iter()
                        .flatten()
                        .skip(1)
                    {
                        let _ = self.runtime.remove_container(&old.id).await;
                    }
                    if let Some(w) = self
                        .start_container(pod, sandbox_id, &sandbox, container, attempt)
                        .await?
                    {
                        waiting.insert(container.name.clone(), w);
                        resync = RETRY;
                    }
                }
            }
            if changed {
                containers = self.observe(pod).await?;
            }
        }

        // a finished pod gives its sandbox (and pod IP) back
        let mut sandbox_status = None;
        if let Some(id) = ready.as_deref() {
            if finished(&containers) {
                self.runtime
                    .stop_pod_sandbox(id)
                    .await
                    .map_err(self.runtime_err(pod))?;
            } else {
                sandbox_status = self.runtime.pod_sandbox_status(id).await.ok();
            }
        }

        let view = PodView {
            sandbox: sandbox_status,
            containers: spec
                .containers
                .iter()
                .map(|c| {
                    let history = containers.get(&c.name);
                    ContainerView {
                        name: c.name.clone(),
                        image: c.image.clone().unwrap_or_default(),
                        current: history.and_then(|h| h.first()).cloned(),
                        previous: history.and_then(|h| h.get(1)).cloned(),
                        waiting: waiting.remove(&c.name),
                    }
                })
                .collect(),
            host_ip: self.host_ip.clone(),
            runtime_name: self.runtime_name.clone(),
        };
        for c in &view.containers {
            if let Some(w) = &c.waiting
                && w.reason == "CrashLoopBackOff"
                && waiting_reason_of(pod, &c.name).as_deref() != Some("CrashLoopBackOff")
            {
                let m = &pod.metadata;
                let message = format!(
                    "Back-off restarting failed container {} in pod {}_{}({uid})",
                    c.name,
                    m.name.as_deref().unwrap_or_default(),
                    m.namespace.as_deref().unwrap_or("default"),
                );
                let event = PodEvent::warning("BackOff", &c.name, message);
                self.api.event(pod, event).await;
            }
        }
        let new_status = status::pod_status(pod, &view, now);
        let old = serde_json::to_value(pod.status.clone().unwrap_or_default()).ok();
        if old != serde_json::to_value(&new_status).ok() {
            self.api
                .patch_status(
                    pod.metadata.namespace.as_deref().unwrap_or("default"),
                    pod.metadata.name.as_deref().unwrap_or_default(),
                    &new_status,
                )
                .await?;
        }
        Ok(Outcome::Resync(resync))
    }

    /// Stops the pod's containers (SIGTERM, SIGKILL after `grace` seconds, all at once), then
    /// its sandboxes, and removes them all with the pod's log directory.
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
        let stops = running
            .iter()
            .map(|c| self.runtime.stop_container(&c.id, grace));
        for r in futures::future::join_all(stops).await {
            match r {
                Err(e) if !e.is_not_found() => return Err(self.runtime_err(pod)(e)),
                _ => {}
            }
        }
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
        tracing::info!(pod = %pod_key(pod), grace, "pod stopped and removed from the runtime");
        Ok(())
    }
}

fn namespace_options(pod: &Pod) -> NamespaceOption {
    let host_network = pod
        .spec
        .as_ref()
        .and_then(|s| s.host_network)
        .unwrap_or(false);
    NamespaceOption {
        network: if host_network {
            NamespaceMode::Node
        } else {
            NamespaceMode::Pod
        } as i32,
        pid: NamespaceMode::Container as i32,
        ipc: NamespaceMode::Pod as i32,
        ..Default::default()
    }
}

#[cfg(test)]
#[path = "pod_sync_tests.rs"]
mod tests;
