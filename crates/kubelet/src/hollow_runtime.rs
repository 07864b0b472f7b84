//! The runtime of a hollow node: [`HollowRuntime`] implements [`ContainerRuntime`] in memory,
//! so the real pod workers run against it with no containerd. Sandboxes get pod IPs from the
//! node's pod CIDR ([`crate::hollow_ipam`]), released when the sandbox stops; every image is
//! present; containers run until stopped, except that a container whose command and args are
//! exactly `true` exits 0, `false` exits 1, and `sh -c "exit N"` exits N right after it starts
//! ([`scripted_exit`]), so that Jobs finish. An ephemeral container with a target joins it
//! only if the target runs in the same sandbox, as containerd checks. [`Behaviour`] adds a startup delay, a failure mix
//! and a stop delay. Nothing is recorded, so a hollow node's memory stays flat however long it
//! runs.

use std::collections::{BTreeSet, HashMap};
use std::net::Ipv4Addr;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use jiff::Timestamp;
use parking_lot::{Mutex, MutexGuard};

use crate::config::{LABEL_CONTAINER_NAME, LABEL_POD_UID};
use k8s_cri::v1::NamespaceMode;

use crate::cri::{
    AttachRequest, AuthConfig, Container, ContainerConfig, ContainerResources, ContainerRuntime,
    ContainerState, ContainerStatus, Error, ExecRequest, ExecResult, FilesystemUsage, Image,
    LinuxContainerResources, PodSandbox, PodSandboxConfig, PodSandboxState, PodSandboxStatus,
    PodState, PortForwardRequest, Result, VersionResponse, image_spec,
};
use crate::hollow_ipam::{Cidr, IpPool};
use crate::images::{BUSYBOX_IMAGE, PAUSE_IMAGE};

/// The runtime name a hollow node reports (`hollow://0.1.0`) and container ids carry.
pub const RUNTIME_NAME: &str = "hollow";
pub const RUNTIME_VERSION: &str = "0.1.0";

/// How hollow pods behave (flags of `skiff kubelet --hollow`).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Behaviour {
    /// How long `RunPodSandbox` takes: a pod's sandbox, network and image work. Zero by
    /// default: pods are Running as soon as the kubelet has synced them.
    pub startup_delay: Duration,
    /// The fraction (0 to 1) of containers that exit with code 1 as soon as they start, on
    /// every attempt (so they go to CrashLoopBackOff, or fail the pod under restartPolicy
    /// Never). Which ones is decided by a hash of the pod uid and container name: the same
    /// pods fail on every run.
    pub failure_rate: f64,
    /// How long a container takes to exit after SIGTERM; a container still running when the
    /// grace period ends is killed (exit code 137). Zero by default.
    pub stop_delay: Duration,
}

struct Sandbox {
    config: PodSandboxConfig,
    ready: bool,
    /// The pod IP while the sandbox holds one.
    ip: Option<Ipv4Addr>,
    created_at: i64,
}

struct HollowContainer {
    sandbox: String,
    status: ContainerStatus,
    /// The code it exits with as soon as it starts: its [`scripted_exit`], or 1 if it is in
    /// the failure mix; `None` runs until stopped.
    exit_on_start: Option<i32>,
}

struct State {
    ips: IpPool,
    next_id: u64,
    sandboxes: HashMap<String, Sandbox>,
    containers: HashMap<String, HollowContainer>,
    /// Pod uid (its label) → the ids of its sandboxes and containers: the kubelet lists one
    /// pod's on every sync, which must not scan the whole node.
    by_pod: HashMap<String, BTreeSet<String>>,
    /// Bumped by every change (see [`HollowRuntime::change`]): the PLEG lists only when it moved.
    generation: u64,
}

impl State {
    fn index(&mut self, labels: &HashMap<String, String>, id: &str) {
        if let Some(uid) = labels.get(LABEL_POD_UID) {
            self.by_pod
                .entry(uid.clone())
                .or_default()
                .insert(id.to_string());
        }
    }

    fn unindex(&mut self, labels: &HashMap<String, String>, id: &str) {
        if let Some(uid) = labels.get(LABEL_POD_UID)
            && let Some(ids) = self.by_pod.get_mut(uid)
        {
            ids.remove(id);
            if ids.is_empty() {
                self.by_pod.remove(uid);
            }
        }
    }

    /// Why a container cannot join the process namespace its config names (an ephemeral
    /// container's `NamespaceMode::Target`), as containerd's `validateTargetContainer` says:
    /// the target must be a running container of the same sandbox.
    fn invalid_target(&self, sandbox_id: &str, config: &ContainerConfig) -> Option<String> {
        let namespaces = config
            .linux
            .as_ref()?
            .security_context
            .as_ref()?
            .namespace_options
            .as_ref()?;
        if namespaces.pid != NamespaceMode::Target as i32 {
            return None;
        }
        let target = &namespaces.target_id;
        let Some(c) = self.containers.get(target) else {
            return Some(format!("container {target:?} does not exist"));
        };
        if c.sandbox != sandbox_id {
            return Some(format!(
                "container {target:?} (sandbox {}) does not belong to sandbox {sandbox_id}",
                c.sandbox
            ));
        }
        (c.status.state != ContainerState::ContainerRunning as i32)
            .then(|| format!("container {target:?} is not running"))
    }

    /// The ids that may match `labels`: those of its pod when it names one, else all.
    fn candidates<'a, T>(
        &'a self,
        labels: &HashMap<String, String>,
        all: &'a HashMap<String, T>,
    ) -> Box<dyn Iterator<Item = (&'a String, &'a T)> + 'a> {
        match labels.get(LABEL_POD_UID) {
            Some(uid) => Box::new(
                self.by_pod
                    .get(uid)
                    .into_iter()
                    .flatten()
                    .filter_map(|id| all.get_key_value(id)),
            ),
            None => Box::new(all.iter()),
        }
    }
}

/// One hollow node's runtime. Its lock guards all its state and is never held across an
/// await (delays sleep outside it).
pub struct HollowRuntime {
    behaviour: Behaviour,
    clock: Arc<dyn Fn() -> Timestamp + Send + Sync>,
    state: Mutex<State>,
}

fn no_streaming(method: &'static str) -> Error {
    Error::Call {
        method,
        status: tonic::Status::unimplemented("hollow nodes do not stream"),
    }
}

fn not_found(method: &'static str, id: &str) -> Error {
    Error::Call {
        method,
        status: tonic::Status::not_found(format!("{id} not found")),
    }
}

fn labels_match(have: &HashMap<String, String>, want: &HashMap<String, String>) -> bool {
    want.iter().all(|(k, v)| have.get(k) == Some(v))
}

/// Whether a container is in the failing fraction: FNV-1a of its pod uid and name, as a
/// number in [0, 1).
fn in_failing_fraction(uid: &str, container: &str, rate: f64) -> bool {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in uid.bytes().chain([b'/']).chain(container.bytes()) {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    ((h >> 11) as f64 / (1u64 << 53) as f64) < rate
}

/// The exit code of a container whose command line (command then args) is one a hollow node
/// recognises: `["true"]` exits 0, `["false"]` exits 1, `["sh", "-c", "exit N"]` exits N
/// (0–255). Any other command line runs until stopped.
pub fn scripted_exit(command: &[String], args: &[String]) -> Option<i32> {
    let line: Vec<&str> = command.iter().chain(args).map(String::as_str).collect();
    match line.as_slice() {
        ["true"] => Some(0),
        ["false"] => Some(1),
        ["sh", "-c", script] => {
            let code = script.trim().strip_prefix("exit")?.trim();
            code.parse::<u8>().ok().map(i32::from)
        }
        _ => None,
    }
}

impl HollowRuntime {
    pub fn new(
        pod_cidr: Cidr,
        behaviour: Behaviour,
        clock: Arc<dyn Fn() -> Timestamp + Send + Sync>,
    ) -> HollowRuntime {
        HollowRuntime {
            behaviour,
            clock,
            state: Mutex::new(State {
                ips: IpPool::new(pod_cidr),
                next_id: 0,
                sandboxes: HashMap::new(),
                containers: HashMap::new(),
                by_pod: HashMap::new(),
                generation: 0,
            }),
        }
    }

    /// The state, to change it: every change to sandboxes and containers goes through here, so
    /// that the PLEG sees it.
    fn change(&self) -> MutexGuard<'_, State> {
        let mut s = self.state.lock();
        s.generation += 1;
        s
    }

    fn now(&self) -> i64 {
        i64::try_from((self.clock)().as_nanosecond()).unwrap_or(i64::MAX)
    }

    /// Marks a running container exited with `code` at `now`.
    fn exit(c: &mut HollowContainer, code: i32, now: i64) {
        if c.status.state == ContainerState::ContainerRunning as i32 {
            c.status.state = ContainerState::ContainerExited as i32;
            c.status.finished_at = now;
            c.status.exit_code = code;
            c.status.reason = if code == 0 { "Completed" } else { "Error" }.into();
        }
    }
}

#[async_trait]
impl ContainerRuntime for HollowRuntime {
    async fn version(&self) -> Result<VersionResponse> {
        Ok(VersionResponse {
            version: "0.1.0".into(),
            runtime_name: RUNTIME_NAME.into(),
            runtime_version: RUNTIME_VERSION.into(),
            runtime_api_version: "v1".into(),
        })
    }

    /// Any runtime handler is accepted: a hollow node simulates one runtime whatever the
    /// pod's RuntimeClass.
    async fn run_pod_sandbox(&self, config: PodSandboxConfig, _handler: &str) -> Result<String> {
        tokio::time::sleep(self.behaviour.startup_delay).await;
        let now = self.now();
        let mut s = self.change();
        let ip = s.ips.allocate().map_err(|e| Error::Call {
            method: "RunPodSandbox",
            status: tonic::Status::resource_exhausted(e.to_string()),
        })?;
        s.next_id += 1;
        let id = format!("sandbox-{}", s.next_id);
        let sandbox = Sandbox {
            config,
            ready: true,
            ip: Some(ip),
            created_at: now,
        };
        s.index(&sandbox.config.labels, &id);
        s.sandboxes.insert(id.clone(), sandbox);
        Ok(id)
    }

    async fn stop_pod_sandbox(&self, id: &str) -> Result<()> {
        let now = self.now();
        let s = &mut *self.change();
        let sandbox = s
            .sandboxes
            .get_mut(id)
            .ok_or_else(|| not_found("StopPodSandbox", id))?;
        sandbox.ready = false;
        if let Some(ip) = sandbox.ip.take() {
            s.ips.release(ip);
        }
        for c in s.containers.values_mut().filter(|c| c.sandbox == id) {
            HollowRuntime::exit(c, 137, now);
        }
        Ok(())
    }

    async fn remove_pod_sandbox(&self, id: &str) -> Result<()> {
        let s = &mut *self.change();
        if let Some(sb) = s.sandboxes.remove(id) {
            s.unindex(&sb.config.labels, id);
            if let Some(ip) = sb.ip {
                s.ips.release(ip);
            }
        }
        let gone: Vec<String> = s
            .containers
            .iter()
            .filter(|(_, c)| c.sandbox == id)
            .map(|(cid, _)| cid.clone())
            .collect();
        for cid in gone {
            if let Some(c) = s.containers.remove(&cid) {
                s.unindex(&c.status.labels, &cid);
            }
        }
        Ok(())
    }

    async fn pod_sandbox_status(&self, id: &str) -> Result<PodSandboxStatus> {
        let s = self.state.lock();
        let sb = s
            .sandboxes
            .get(id)
            .ok_or_else(|| not_found("PodSandboxStatus", id))?;
        Ok(PodSandboxStatus {
            id: id.into(),
            metadata: sb.config.metadata.clone(),
            state: if sb.ready {
                PodSandboxState::SandboxReady
            } else {
                PodSandboxState::SandboxNotready
            } as i32,
            created_at: sb.created_at,
            network: Some(k8s_cri::v1::PodSandboxNetworkStatus {
                ip: sb.ip.map(|ip| ip.to_string()).unwrap_or_default(),
                additional_ips: vec![],
            }),
            labels: sb.config.labels.clone(),
            annotations: sb.config.annotations.clone(),
            ..Default::default()
        })
    }

    async fn list_pod_sandboxes(&self, labels: HashMap<String, String>) -> Result<Vec<PodSandbox>> {
        let s = self.state.lock();
        Ok(s.candidates(&labels, &s.sandboxes)
            .filter(|(_, sb)| labels_match(&sb.config.labels, &labels))
            .map(|(id, sb)| PodSandbox {
                id: id.clone(),
                metadata: sb.config.metadata.clone(),
                state: if sb.ready {
                    PodSandboxState::SandboxReady
                } else {
                    PodSandboxState::SandboxNotready
                } as i32,
                created_at: sb.created_at,
                labels: sb.config.labels.clone(),
                annotations: sb.config.annotations.clone(),
                runtime_handler: String::new(),
            })
            .collect())
    }

    async fn create_container(
        &self,
        sandbox_id: &str,
        config: ContainerConfig,
        _sandbox: PodSandboxConfig,
    ) -> Result<String> {
        let now = self.now();
        let mut s = self.change();
        if !s.sandboxes.get(sandbox_id).is_some_and(|sb| sb.ready) {
            return Err(not_found("CreateContainer", sandbox_id));
        }
        if let Some(why) = s.invalid_target(sandbox_id, &config) {
            return Err(Error::Call {
                method: "CreateContainer",
                status: tonic::Status::unknown(format!("invalid target container: {why}")),
            });
        }
        let label = |k: &str| config.labels.get(k).map(String::as_str).unwrap_or_default();
        let exit_on_start = scripted_exit(&config.command, &config.args).or_else(|| {
            in_failing_fraction(
                label(LABEL_POD_UID),
                label(LABEL_CONTAINER_NAME),
                self.behaviour.failure_rate,
            )
            .then_some(1)
        });
        s.next_id += 1;
        let id = format!("container-{}", s.next_id);
        let image = config.image.clone().unwrap_or_default();
        let resources = config.linux.and_then(|l| l.resources);
        let status = ContainerStatus {
            id: id.clone(),
            metadata: config.metadata,
            // reported back, as containerd does: a resize completes on hollow nodes too
            resources: resources.map(|linux| ContainerResources {
                linux: Some(linux),
                windows: None,
            }),
            state: ContainerState::ContainerCreated as i32,
            created_at: now,
            image_ref: format!("sha256:{}", image.image.len()),
            image: Some(image),
            labels: config.labels,
            annotations: config.annotations,
            log_path: config.log_path,
            ..Default::default()
        };
        s.index(&status.labels, &id);
        s.containers.insert(
            id.clone(),
            HollowContainer {
                sandbox: sandbox_id.into(),
                status,
                exit_on_start,
            },
        );
        Ok(id)
    }

    async fn start_container(&self, id: &str) -> Result<()> {
        let now = self.now();
        let mut s = self.change();
        let c = s
            .containers
            .get_mut(id)
            .ok_or_else(|| not_found("StartContainer", id))?;
        c.status.state = ContainerState::ContainerRunning as i32;
        c.status.started_at = now;
        if let Some(code) = c.exit_on_start {
            HollowRuntime::exit(c, code, now);
        }
        Ok(())
    }

    async fn stop_container(&self, id: &str, timeout_seconds: i64) -> Result<()> {
        if !self.state.lock().containers.contains_key(id) {
            return Err(not_found("StopContainer", id));
        }
        let grace = Duration::from_secs(timeout_seconds.max(0) as u64);
        let killed = self.behaviour.stop_delay > grace;
        tokio::time::sleep(self.behaviour.stop_delay.min(grace)).await;
        let now = self.now();
        if let Some(c) = self.change().containers.get_mut(id) {
            HollowRuntime::exit(c, if killed { 137 } else { 143 }, now);
        }
        Ok(())
    }

    async fn remove_container(&self, id: &str) -> Result<()> {
        let s = &mut *self.change();
        if let Some(c) = s.containers.remove(id) {
            s.unindex(&c.status.labels, id);
        }
        Ok(())
    }

    /// From the state itself: the lists copy every object's labels and annotations, which at
    /// a relist a second was half of 5,000 hollow nodes' CPU with 150,000 pods.
    fn generation(&self) -> Option<u64> {
        Some(self.state.lock().generation)
    }

    async fn pod_states(&self) -> Result<Vec<PodState>> {
        let s = self.state.lock();
        let sandboxes = s.sandboxes.iter().map(|(id, sb)| {
            let state = if sb.ready {
                PodSandboxState::SandboxReady
            } else {
                PodSandboxState::SandboxNotready
            };
            (&sb.config.labels, id, state as i32)
        });
        let containers = s
            .containers
            .values()
            .map(|c| (&c.status.labels, &c.status.id, c.status.state));
        Ok(sandboxes
            .chain(containers)
            .filter_map(|(labels, id, state)| {
                Some(PodState {
                    pod_uid: labels.get(LABEL_POD_UID)?.clone(),
                    id: id.clone(),
                    state,
                })
            })
            .collect())
    }

    async fn list_containers(&self, labels: HashMap<String, String>) -> Result<Vec<Container>> {
        let s = self.state.lock();
        Ok(s.candidates(&labels, &s.containers)
            .map(|(_, c)| c)
            .filter(|c| labels_match(&c.status.labels, &labels))
            .map(|c| Container {
                id: c.status.id.clone(),
                pod_sandbox_id: c.sandbox.clone(),
                metadata: c.status.metadata.clone(),
                image: c.status.image.clone(),
                image_ref: c.status.image_ref.clone(),
                state: c.status.state,
                created_at: c.status.created_at,
                labels: c.status.labels.clone(),
                annotations: c.status.annotations.clone(),
                image_id: String::new(),
            })
            .collect())
    }

    async fn container_status(&self, id: &str) -> Result<ContainerStatus> {
        let s = self.state.lock();
        s.containers
            .get(id)
            .map(|c| c.status.clone())
            .ok_or_else(|| not_found("ContainerStatus", id))
    }

    async fn update_container_resources(
        &self,
        id: &str,
        resources: LinuxContainerResources,
    ) -> Result<()> {
        let mut s = self.change();
        let c = s
            .containers
            .get_mut(id)
            .ok_or_else(|| not_found("UpdateContainerResources", id))?;
        c.status.resources = Some(ContainerResources {
            linux: Some(resources),
            windows: None,
        });
        Ok(())
    }

    /// Commands in a running hollow container succeed (exec probes and hooks pass).
    async fn exec_sync(&self, id: &str, _cmd: Vec<String>, _timeout: i64) -> Result<ExecResult> {
        let s = self.state.lock();
        match s.containers.get(id) {
            Some(c) if c.status.state == ContainerState::ContainerRunning as i32 => {
                Ok(ExecResult::default())
            }
            _ => Err(not_found("ExecSync", id)),
        }
    }

    /// Hollow nodes have no streaming server: `kubectl exec`, `attach` and `port-forward`
    /// to their pods are refused.
    async fn exec(&self, _request: ExecRequest) -> Result<String> {
        Err(no_streaming("Exec"))
    }

    async fn attach(&self, _request: AttachRequest) -> Result<String> {
        Err(no_streaming("Attach"))
    }

    async fn port_forward(&self, _request: PortForwardRequest) -> Result<String> {
        Err(no_streaming("PortForward"))
    }

    /// The built-in images, as a real Skiff node has them.
    async fn list_images(&self) -> Result<Vec<Image>> {
        Ok([PAUSE_IMAGE, BUSYBOX_IMAGE]
            .into_iter()
            .map(|name| Image {
                id: format!("sha256:{}", name.len()),
                repo_tags: vec![name.into()],
                size: 1_000_000,
                ..Default::default()
            })
            .collect())
    }

    /// Every image is present on a hollow node.
    async fn image_status(&self, image: &str) -> Result<Option<Image>> {
        Ok(Some(Image {
            id: format!("sha256:{}", image.len()),
            repo_tags: vec![image.into()],
            spec: Some(image_spec(image)),
            ..Default::default()
        }))
    }

    async fn pull_image(&self, image: &str, _auth: Option<AuthConfig>) -> Result<String> {
        Ok(format!("sha256:{}", image.len()))
    }

    /// Hollow images take no room and stay present: removing one changes nothing.
    async fn remove_image(&self, _image: &str) -> Result<()> {
        Ok(())
    }

    /// A hollow node has no image filesystem (hollow nodes run no image garbage collection).
    async fn image_fs_info(&self) -> Result<Vec<FilesystemUsage>> {
        Ok(Vec::new())
    }

    /// Hollow containers write no logs.
    async fn reopen_container_log(&self, _id: &str) -> Result<()> {
        Ok(())
    }
}

#[cfg(test)]
#[path = "hollow_runtime_tests.rs"]
mod tests;
