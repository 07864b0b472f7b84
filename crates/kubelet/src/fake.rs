//! A recording fake of [`ContainerRuntime`] for unit tests (hollow nodes use
//! [`crate::hollow_runtime`], which records nothing): it keeps sandboxes, containers and images
//! in memory, records every call as one line (`"RunPodSandbox default/web"`), hands out pod IPs
//! from 10.42.0.0/24, and can be told to fail a method or to make a container exit. Images have
//! a size (1000 bytes unless set) and an id derived from their name ([`fake_image_id`]); the
//! image filesystem's usage is whatever the test sets.

use std::collections::{HashMap, HashSet};

use async_trait::async_trait;
use parking_lot::Mutex;

use crate::cri::{
    AttachRequest, AuthConfig, Container, ContainerConfig, ContainerResources, ContainerRuntime,
    ContainerState, ContainerStatus, Error, ExecRequest, ExecResult, FilesystemIdentifier,
    FilesystemUsage, Image, LinuxContainerResources, PodSandbox, PodSandboxConfig, PodSandboxState,
    PodSandboxStatus, PortForwardRequest, Result, UInt64Value, VersionResponse, image_spec,
};

/// The id the fake gives the image named `name`.
pub fn fake_image_id(name: &str) -> String {
    format!("sha256:{name}")
}

/// An image the fake runtime has: its size and the user its config names (`""`: none, root).
#[derive(Debug, Clone)]
struct FakeImage {
    size: u64,
    user: String,
}

impl Default for FakeImage {
    fn default() -> Self {
        FakeImage {
            size: 1000,
            user: String::new(),
        }
    }
}

impl FakeImage {
    fn with_user(user: &str) -> FakeImage {
        FakeImage {
            user: user.into(),
            ..FakeImage::default()
        }
    }

    /// The image as ListImages and ImageStatus show it: its user a uid when numeric, a name
    /// otherwise, as containerd reports them.
    fn cri(&self, name: &str, pinned: bool) -> Image {
        let user = self.user.split(':').next().unwrap_or_default();
        let uid = user
            .parse()
            .ok()
            .map(|value| k8s_cri::v1::Int64Value { value });
        Image {
            id: fake_image_id(name),
            repo_tags: vec![name.into()],
            size: self.size,
            spec: Some(image_spec(name)),
            username: if uid.is_none() {
                user.into()
            } else {
                String::new()
            },
            uid,
            pinned,
            ..Default::default()
        }
    }
}

/// The image filesystem the fake reports: where it is, and the bytes its images use.
const FAKE_IMAGE_FS: &str = "/var/lib/fake/images";

#[derive(Default)]
pub struct FakeRuntime {
    /// Guards all of the fake's state; held only for the duration of one call.
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    calls: Vec<String>,
    failures: HashMap<&'static str, tonic::Code>,
    next_id: u64,
    /// Fake clock for created/started/finished stamps, in nanoseconds; advances 1 s per event.
    now: i64,
    sandboxes: HashMap<String, (PodSandboxConfig, PodSandboxState, String, i64)>,
    containers: HashMap<String, ContainerStatus>,
    /// Container id → sandbox id.
    container_sandbox: HashMap<String, String>,
    /// Container id → the config it was created with.
    container_configs: HashMap<String, ContainerConfig>,
    /// Images present, by name.
    images: HashMap<String, FakeImage>,
    /// Names of the images the runtime pins (CRI `Image.pinned`).
    pinned: HashSet<String>,
    /// The exit code `ExecSync` answers with.
    exec_exit_code: i32,
    /// Where the streaming URLs of `Exec`, `Attach` and `PortForward` point.
    streaming_base: Option<String>,
    /// The generation the fake tells (see [`FakeRuntime::tell_generation`]).
    generation: Option<u64>,
}

impl State {
    fn tick(&mut self) -> i64 {
        self.now += 1_000_000_000;
        self.now
    }

    fn check(&mut self, method: &'static str, what: &str) -> Result<()> {
        self.calls
            .push(format!("{method} {what}").trim_end().to_string());
        match self.failures.get(method) {
            Some(code) => Err(Error::Call {
                method,
                status: tonic::Status::new(*code, "injected failure"),
            }),
            None => Ok(()),
        }
    }
}

fn labels_match(have: &HashMap<String, String>, want: &HashMap<String, String>) -> bool {
    want.iter().all(|(k, v)| have.get(k) == Some(v))
}

/// The streams an `Exec` or `Attach` asked for, as recorded: `tty stdin stdout stderr`.
fn streams(tty: bool, stdin: bool, stdout: bool, stderr: bool) -> String {
    [
        (tty, "tty"),
        (stdin, "stdin"),
        (stdout, "stdout"),
        (stderr, "stderr"),
    ]
    .iter()
    .filter(|(on, _)| *on)
    .map(|(_, name)| *name)
    .collect::<Vec<_>>()
    .join(" ")
}

/// Streaming needs a running container, as containerd's CRI checks.
fn running(s: &State, method: &'static str, id: &str) -> Result<()> {
    match s.containers.get(id) {
        Some(c) if c.state == ContainerState::ContainerRunning as i32 => Ok(()),
        Some(_) => Err(Error::Call {
            method,
            status: tonic::Status::failed_precondition(format!("container {id} is not running")),
        }),
        None => Err(not_found(method, id)),
    }
}

fn not_found(method: &'static str, id: &str) -> Error {
    Error::Call {
        method,
        status: tonic::Status::not_found(format!("{id} not found")),
    }
}

impl FakeRuntime {
    pub fn new() -> FakeRuntime {
        FakeRuntime::default()
    }

    /// Makes the fake tell `generation` as its [`ContainerRuntime::generation`] (by default it
    /// tells none).
    pub fn tell_generation(&self, generation: Option<u64>) {
        self.state.lock().generation = generation;
    }

    /// The calls so far, one line each, oldest first.
    pub fn calls(&self) -> Vec<String> {
        self.state.lock().calls.clone()
    }

    /// Makes every later call of `method` (the CRI name, e.g. `"PullImage"`) fail with `code`.
    pub fn fail(&self, method: &'static str, code: tonic::Code) {
        self.state.lock().failures.insert(method, code);
    }

    /// Makes `method` work again after [`FakeRuntime::fail`].
    pub fn recover(&self, method: &'static str) {
        self.state.lock().failures.remove(method);
    }

    /// Makes every later `ExecSync` exit with `code` (0 until told otherwise).
    pub fn set_exec_exit_code(&self, code: i32) {
        self.state.lock().exec_exit_code = code;
    }

    /// Makes `Exec`, `Attach` and `PortForward` answer URLs under `base` (`http://host:port`)
    /// rather than under `http://127.0.0.1:1`, where nothing listens.
    pub fn set_streaming_base(&self, base: &str) {
        self.state.lock().streaming_base = Some(base.trim_end_matches('/').to_string());
    }

    /// A streaming URL for `kind` (`exec`, `attach`, `portforward`), numbered like the fake's ids.
    fn streaming_url(s: &mut State, kind: &str) -> String {
        s.next_id += 1;
        let base = s
            .streaming_base
            .clone()
            .unwrap_or_else(|| "http://127.0.0.1:1".into());
        format!("{base}/{kind}/token-{}", s.next_id)
    }

    /// Pretends the image is present (1000 bytes).
    pub fn add_image(&self, image: &str) {
        self.add_sized_image(image, 1000);
    }

    /// Pretends the image is present, its config's `User` being `user` (`"1000"`, `"nobody"`).
    pub fn add_image_with_user(&self, image: &str, user: &str) {
        let fake = FakeImage::with_user(user);
        self.state.lock().images.insert(image.to_string(), fake);
    }

    /// Pretends the image is present with this size.
    pub fn add_sized_image(&self, image: &str, size: u64) {
        let fake = FakeImage {
            size,
            ..FakeImage::default()
        };
        self.state.lock().images.insert(image.to_string(), fake);
    }

    /// Makes the runtime report the image as pinned (never to be garbage collected).
    pub fn pin_image(&self, image: &str) {
        self.state.lock().pinned.insert(image.to_string());
    }

    /// The names of the images present, sorted.
    pub fn image_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.state.lock().images.keys().cloned().collect();
        names.sort();
        names
    }

    /// Makes a running container exit with `code`.
    pub fn exit_container(&self, id: &str, code: i32) {
        let mut s = self.state.lock();
        let now = s.tick();
        if let Some(c) = s.containers.get_mut(id) {
            c.state = ContainerState::ContainerExited as i32;
            c.finished_at = now;
            c.exit_code = code;
            c.reason = if code == 0 { "Completed" } else { "Error" }.into();
        }
    }

    /// Makes a sandbox not ready while its containers run on, as when its pause process dies.
    pub fn lose_sandbox(&self, id: &str) {
        if let Some(sb) = self.state.lock().sandboxes.get_mut(id) {
            sb.1 = PodSandboxState::SandboxNotready;
        }
    }

    /// The sandbox a container was created in.
    pub fn sandbox_of(&self, container: &str) -> Option<String> {
        self.state.lock().container_sandbox.get(container).cloned()
    }

    /// The fake's clock, which stamps created/started/finished times (1 s per event).
    pub fn now(&self) -> jiff::Timestamp {
        jiff::Timestamp::from_nanosecond(i128::from(self.state.lock().now))
            .expect("the fake clock stays in range")
    }

    /// Moves the fake's clock forward.
    pub fn advance(&self, by: std::time::Duration) {
        self.state.lock().now += by.as_nanos() as i64;
    }

    /// The ids of the containers named `name`, oldest first.
    pub fn containers_named(&self, name: &str) -> Vec<String> {
        let s = self.state.lock();
        let mut found: Vec<&ContainerStatus> = s
            .containers
            .values()
            .filter(|c| c.metadata.as_ref().is_some_and(|m| m.name == name))
            .collect();
        found.sort_by_key(|c| c.created_at);
        found.into_iter().map(|c| c.id.clone()).collect()
    }

    /// The config a container was created with.
    pub fn container_config(&self, id: &str) -> Option<ContainerConfig> {
        self.state.lock().container_configs.get(id).cloned()
    }

    /// The configs of the sandboxes made, oldest first.
    pub fn sandbox_configs(&self) -> Vec<PodSandboxConfig> {
        let s = self.state.lock();
        let mut found: Vec<_> = s.sandboxes.values().collect();
        found.sort_by_key(|(_, _, _, created)| *created);
        found.into_iter().map(|(c, ..)| c.clone()).collect()
    }
}

#[async_trait]
impl ContainerRuntime for FakeRuntime {
    fn generation(&self) -> Option<u64> {
        self.state.lock().generation
    }

    async fn version(&self) -> Result<VersionResponse> {
        self.state.lock().check("Version", "")?;
        Ok(VersionResponse {
            version: "0.1.0".into(),
            runtime_name: "fake".into(),
            runtime_version: "0.0.1".into(),
            runtime_api_version: "v1".into(),
        })
    }

    async fn run_pod_sandbox(
        &self,
        config: PodSandboxConfig,
        runtime_handler: &str,
    ) -> Result<String> {
        let mut s = self.state.lock();
        let meta = config.metadata.clone().unwrap_or_default();
        s.check(
            "RunPodSandbox",
            &format!("{}/{} {runtime_handler}", meta.namespace, meta.name),
        )?;
        s.next_id += 1;
        let id = format!("sandbox-{}", s.next_id);
        let ip = format!("10.42.0.{}", s.next_id + 1);
        let now = s.tick();
        s.sandboxes
            .insert(id.clone(), (config, PodSandboxState::SandboxReady, ip, now));
        Ok(id)
    }

    async fn stop_pod_sandbox(&self, id: &str) -> Result<()> {
        let mut s = self.state.lock();
        s.check("StopPodSandbox", id)?;
        let now = s.tick();
        let members: Vec<String> = s
            .container_sandbox
            .iter()
            .filter(|(_, sb)| *sb == id)
            .map(|(c, _)| c.clone())
            .collect();
        for c in members {
            if let Some(st) = s.containers.get_mut(&c)
                && st.state == ContainerState::ContainerRunning as i32
            {
                st.state = ContainerState::ContainerExited as i32;
                st.finished_at = now;
                st.exit_code = 137;
            }
        }
        match s.sandboxes.get_mut(id) {
            Some(sb) => {
                sb.1 = PodSandboxState::SandboxNotready;
                Ok(())
            }
            None => Err(not_found("StopPodSandbox", id)),
        }
    }

    async fn remove_pod_sandbox(&self, id: &str) -> Result<()> {
        let mut s = self.state.lock();
        s.check("RemovePodSandbox", id)?;
        s.sandboxes.remove(id);
        let members: Vec<String> = s
            .container_sandbox
            .iter()
            .filter(|(_, sb)| *sb == id)
            .map(|(c, _)| c.clone())
            .collect();
        for c in members {
            s.containers.remove(&c);
            s.container_sandbox.remove(&c);
        }
        Ok(())
    }

    async fn pod_sandbox_status(&self, id: &str) -> Result<PodSandboxStatus> {
        let mut s = self.state.lock();
        s.check("PodSandboxStatus", id)?;
        let (config, state, ip, created) = s
            .sandboxes
            .get(id)
            .ok_or_else(|| not_found("PodSandboxStatus", id))?;
        Ok(PodSandboxStatus {
            id: id.into(),
            metadata: config.metadata.clone(),
            state: *state as i32,
            created_at: *created,
            network: Some(k8s_cri::v1::PodSandboxNetworkStatus {
                ip: ip.clone(),
                additional_ips: vec![],
            }),
            labels: config.labels.clone(),
            annotations: config.annotations.clone(),
            ..Default::default()
        })
    }

    async fn list_pod_sandboxes(&self, labels: HashMap<String, String>) -> Result<Vec<PodSandbox>> {
        let mut s = self.state.lock();
        s.check("ListPodSandbox", "")?;
        Ok(s.sandboxes
            .iter()
            .filter(|(_, (c, ..))| labels_match(&c.labels, &labels))
            .map(|(id, (c, state, _, created))| PodSandbox {
                id: id.clone(),
                metadata: c.metadata.clone(),
                state: *state as i32,
                created_at: *created,
                labels: c.labels.clone(),
                annotations: c.annotations.clone(),
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
        let mut s = self.state.lock();
        let name = config
            .metadata
            .as_ref()
            .map(|m| m.name.clone())
            .unwrap_or_default();
        s.check("CreateContainer", &name)?;
        let Some((sandbox, ..)) = s.sandboxes.get(sandbox_id) else {
            return Err(not_found("CreateContainer", sandbox_id));
        };
        // as containerd: the log path is under the sandbox's log directory
        let log_path = match sandbox.log_directory.as_str() {
            "" => config.log_path.clone(),
            dir => std::path::Path::new(dir)
                .join(&config.log_path)
                .display()
                .to_string(),
        };
        s.next_id += 1;
        let id = format!("container-{}", s.next_id);
        let now = s.tick();
        let image = config.image.clone().unwrap_or_default();
        // reported back in ContainerStatus, as containerd does
        let resources = config.linux.as_ref().and_then(|l| l.resources.clone());
        s.containers.insert(
            id.clone(),
            ContainerStatus {
                id: id.clone(),
                metadata: config.metadata.clone(),
                resources: resources.map(|linux| ContainerResources {
                    linux: Some(linux),
                    windows: None,
                }),
                state: ContainerState::ContainerCreated as i32,
                created_at: now,
                image_ref: fake_image_id(&image.image),
                image: Some(image),
                labels: config.labels.clone(),
                annotations: config.annotations.clone(),
                log_path,
                ..Default::default()
            },
        );
        s.container_sandbox.insert(id.clone(), sandbox_id.into());
        s.container_configs.insert(id.clone(), config);
        Ok(id)
    }

    async fn start_container(&self, id: &str) -> Result<()> {
        let mut s = self.state.lock();
        s.check("StartContainer", id)?;
        let now = s.tick();
        let c = s
            .containers
            .get_mut(id)
            .ok_or_else(|| not_found("StartContainer", id))?;
        c.state = ContainerState::ContainerRunning as i32;
        c.started_at = now;
        Ok(())
    }

    async fn stop_container(&self, id: &str, timeout_seconds: i64) -> Result<()> {
        let mut s = self.state.lock();
        s.check("StopContainer", &format!("{id} {timeout_seconds}"))?;
        let now = s.tick();
        let c = s
            .containers
            .get_mut(id)
            .ok_or_else(|| not_found("StopContainer", id))?;
        if c.state == ContainerState::ContainerRunning as i32 {
            c.state = ContainerState::ContainerExited as i32;
            c.finished_at = now;
            c.exit_code = 143;
            c.reason = "Error".into();
        }
        Ok(())
    }

    async fn remove_container(&self, id: &str) -> Result<()> {
        let mut s = self.state.lock();
        s.check("RemoveContainer", id)?;
        s.containers.remove(id);
        s.container_sandbox.remove(id);
        Ok(())
    }

    async fn list_containers(&self, labels: HashMap<String, String>) -> Result<Vec<Container>> {
        let mut s = self.state.lock();
        s.check("ListContainers", "")?;
        Ok(s.containers
            .values()
            .filter(|c| labels_match(&c.labels, &labels))
            .map(|c| Container {
                id: c.id.clone(),
                pod_sandbox_id: s.container_sandbox.get(&c.id).cloned().unwrap_or_default(),
                metadata: c.metadata.clone(),
                image: c.image.clone(),
                image_ref: c.image_ref.clone(),
                state: c.state,
                created_at: c.created_at,
                labels: c.labels.clone(),
                annotations: c.annotations.clone(),
                image_id: String::new(),
            })
            .collect())
    }

    async fn container_status(&self, id: &str) -> Result<ContainerStatus> {
        let mut s = self.state.lock();
        s.check("ContainerStatus", id)?;
        s.containers
            .get(id)
            .cloned()
            .ok_or_else(|| not_found("ContainerStatus", id))
    }

    async fn update_container_resources(
        &self,
        id: &str,
        resources: LinuxContainerResources,
    ) -> Result<()> {
        let mut s = self.state.lock();
        let what = format!(
            "{id} shares={} quota={} memory={}",
            resources.cpu_shares, resources.cpu_quota, resources.memory_limit_in_bytes
        );
        s.check("UpdateContainerResources", &what)?;
        let c = s
            .containers
            .get_mut(id)
            .ok_or_else(|| not_found("UpdateContainerResources", id))?;
        c.resources = Some(ContainerResources {
            linux: Some(resources),
            windows: None,
        });
        Ok(())
    }

    async fn exec_sync(&self, id: &str, cmd: Vec<String>, _timeout: i64) -> Result<ExecResult> {
        let mut s = self.state.lock();
        s.check("ExecSync", &format!("{id} {}", cmd.join(" ")))?;
        match s.containers.get(id) {
            Some(c) if c.state == ContainerState::ContainerRunning as i32 => Ok(ExecResult {
                exit_code: s.exec_exit_code,
                ..Default::default()
            }),
            _ => Err(not_found("ExecSync", id)),
        }
    }

    async fn exec(&self, r: ExecRequest) -> Result<String> {
        let mut s = self.state.lock();
        let streams = streams(r.tty, r.stdin, r.stdout, r.stderr);
        s.check(
            "Exec",
            &format!("{} {} [{streams}]", r.container_id, r.cmd.join(" ")),
        )?;
        running(&s, "Exec", &r.container_id)?;
        Ok(FakeRuntime::streaming_url(&mut s, "exec"))
    }

    async fn attach(&self, r: AttachRequest) -> Result<String> {
        let mut s = self.state.lock();
        let streams = streams(r.tty, r.stdin, r.stdout, r.stderr);
        s.check("Attach", &format!("{} [{streams}]", r.container_id))?;
        running(&s, "Attach", &r.container_id)?;
        Ok(FakeRuntime::streaming_url(&mut s, "attach"))
    }

    async fn port_forward(&self, r: PortForwardRequest) -> Result<String> {
        let mut s = self.state.lock();
        let ports: Vec<String> = r.port.iter().map(i32::to_string).collect();
        s.check(
            "PortForward",
            &format!("{} {}", r.pod_sandbox_id, ports.join(",")),
        )?;
        if !s.sandboxes.contains_key(&r.pod_sandbox_id) {
            return Err(not_found("PortForward", &r.pod_sandbox_id));
        }
        Ok(FakeRuntime::streaming_url(&mut s, "portforward"))
    }

    async fn list_images(&self) -> Result<Vec<Image>> {
        let mut s = self.state.lock();
        s.check("ListImages", "")?;
        let mut images: Vec<(&String, &FakeImage)> = s.images.iter().collect();
        images.sort_by_key(|(name, _)| *name);
        Ok(images
            .into_iter()
            .map(|(name, image)| image.cri(name, s.pinned.contains(name)))
            .collect())
    }

    async fn image_status(&self, image: &str) -> Result<Option<Image>> {
        let mut s = self.state.lock();
        s.check("ImageStatus", image)?;
        // by name, or by the id the fake gave it
        let found = s
            .images
            .iter()
            .find(|(name, _)| *name == image || fake_image_id(name) == image);
        Ok(found.map(|(name, i)| i.cri(name, s.pinned.contains(name))))
    }

    async fn pull_image(&self, image: &str, auth: Option<AuthConfig>) -> Result<String> {
        let mut s = self.state.lock();
        let user = auth
            .map(|a| format!(" as {}", a.username))
            .unwrap_or_default();
        s.check("PullImage", &format!("{image}{user}"))?;
        s.images.entry(image.into()).or_default();
        Ok(fake_image_id(image))
    }

    /// Removes the image named, or the one whose id it is.
    async fn remove_image(&self, image: &str) -> Result<()> {
        let mut s = self.state.lock();
        s.check("RemoveImage", image)?;
        s.images
            .retain(|name, _| name != image && fake_image_id(name) != image);
        Ok(())
    }

    /// One image filesystem, its usage the sum of the images' sizes.
    async fn image_fs_info(&self) -> Result<Vec<FilesystemUsage>> {
        let mut s = self.state.lock();
        s.check("ImageFsInfo", "")?;
        Ok(vec![FilesystemUsage {
            timestamp: s.now,
            fs_id: Some(FilesystemIdentifier {
                mountpoint: FAKE_IMAGE_FS.into(),
            }),
            used_bytes: Some(UInt64Value {
                value: s.images.values().map(|i| i.size).sum(),
            }),
            inodes_used: None,
        }])
    }

    /// Reopening creates the log file again, as the runtime does.
    async fn reopen_container_log(&self, id: &str) -> Result<()> {
        let mut s = self.state.lock();
        s.check("ReopenContainerLog", id)?;
        let c = s
            .containers
            .get(id)
            .ok_or_else(|| not_found("ReopenContainerLog", id))?;
        if c.state != ContainerState::ContainerRunning as i32 {
            return Err(Error::Call {
                method: "ReopenContainerLog",
                status: tonic::Status::failed_precondition(format!(
                    "container {id} is not running"
                )),
            });
        }
        let path = std::path::Path::new(&c.log_path);
        if path.is_absolute() {
            let _ = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path);
        }
        Ok(())
    }
}
