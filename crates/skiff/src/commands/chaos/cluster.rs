//! The cluster under test: every component a child process on fixed loopback ports, so that
//! any one can be killed with SIGKILL and started again as a supervisor would.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use futures::future::try_join_all;

use crate::commands::bench::controllers::{SkiffChild, start, start_until};

/// What keeps the cluster's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Backend {
    /// `skiff store serve`, the embedded store behind its etcd v3 facade.
    Embedded,
    /// Three `etcd` members (etcd from `PATH`).
    Etcd,
}

/// What a fault hits: the components the harness kills, and the store's disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Component {
    /// The embedded store's file system, filled (only as root: it is a tmpfs of its own).
    DiskFull,
    /// `skiff store serve`, the embedded store behind its etcd v3 facade.
    Store,
    /// One member of three of an etcd cluster, each member in turn.
    EtcdMember,
    ApiServer,
    Scheduler,
    ControllerManager,
    /// The hollow nodes' `skiff kubelet --hollow` (every node's agent at once).
    Kubelet,
}

impl Backend {
    /// The components killed on this backend.
    fn components(self) -> [Component; 5] {
        let store = match self {
            Backend::Embedded => Component::Store,
            Backend::Etcd => Component::EtcdMember,
        };
        [
            store,
            Component::ApiServer,
            Component::Scheduler,
            Component::ControllerManager,
            Component::Kubelet,
        ]
    }
}

/// Size of the embedded store's tmpfs: room for a 10-minute run's history between compactions
/// many times over (tmpfs takes memory only for what is written).
const STORE_FS_SIZE: &str = "2g";

/// A tmpfs mounted on the embedded store's directory, unmounted when dropped.
struct StoreFs {
    mountpoint: PathBuf,
}

impl StoreFs {
    /// Mounts it (as root only).
    fn mount(mountpoint: &Path) -> Result<StoreFs> {
        if !rustix::process::geteuid().is_root() {
            bail!("--disk-full needs root, to mount a tmpfs for the store");
        }
        std::fs::create_dir_all(mountpoint)?;
        let status = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o"])
            .arg(format!("size={STORE_FS_SIZE},mode=0700"))
            .arg("skiff-chaos-store")
            .arg(mountpoint)
            .status()
            .context("running mount")?;
        if !status.success() {
            bail!(
                "mounting a tmpfs on {} failed: {status}",
                mountpoint.display()
            );
        }
        Ok(StoreFs {
            mountpoint: mountpoint.to_path_buf(),
        })
    }

    fn filler(&self) -> PathBuf {
        self.mountpoint.join("disk-full-filler")
    }
}

impl Drop for StoreFs {
    fn drop(&mut self) {
        // lazily: a store process still dying must not keep it mounted
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.mountpoint)
            .status();
    }
}
/// Members of the etcd cluster on [`Backend::Etcd`].
const ETCD_MEMBERS: usize = 3;

/// An etcd member's loopback ports.
struct Member {
    client_port: u16,
    peer_port: u16,
}

pub struct Cluster {
    exe: PathBuf,
    dir: PathBuf,
    backend: Backend,
    store_addr: String,
    members: Vec<Member>,
    /// The member killed next.
    next_member: usize,
    api_port: u16,
    nodes: usize,
    /// Every running child; an etcd member's is `(EtcdMember, its index)`.
    children: Vec<((Component, usize), SkiffChild)>,
    /// The embedded store's own file system, with the disk-full fault.
    store_fs: Option<StoreFs>,
}

impl Cluster {
    /// Starts every component under `dir`, the API server on a free port, with `nodes` hollow
    /// nodes, on `backend`; with `disk_full`, the embedded store on a tmpfs of its own.
    pub async fn start(
        dir: &Path,
        nodes: usize,
        backend: Backend,
        disk_full: bool,
    ) -> Result<Cluster> {
        let mut members = Vec::new();
        if backend == Backend::Etcd {
            for _ in 0..ETCD_MEMBERS {
                let (client_port, peer_port) = (free_port()?, free_port()?);
                members.push(Member {
                    client_port,
                    peer_port,
                });
            }
        }
        let mut cluster = Cluster {
            exe: std::env::current_exe()?,
            dir: dir.to_path_buf(),
            backend,
            store_addr: format!("127.0.0.1:{}", free_port()?),
            members,
            next_member: 0,
            api_port: free_port()?,
            nodes,
            children: Vec::new(),
            store_fs: None,
        };
        if disk_full {
            if backend != Backend::Embedded {
                bail!("--disk-full fills the embedded store's disk: not with --backend etcd");
            }
            cluster.store_fs = Some(StoreFs::mount(&cluster.store_dir())?);
        }
        if backend == Backend::Etcd {
            // together: a member is ready only once a quorum of them is up
            let members = (0..ETCD_MEMBERS).map(|i| cluster.start_member(i));
            let started = try_join_all(members).await?;
            for (i, child) in started.into_iter().enumerate() {
                cluster.children.push(((Component::EtcdMember, i), child));
            }
        }
        for c in backend.components() {
            if c != Component::EtcdMember {
                cluster.launch(c).await?;
            }
        }
        Ok(cluster)
    }

    /// The faults this cluster takes: a kill of each component, and the disk-full fault if
    /// the store has a tmpfs of its own.
    pub fn faults(&self) -> Vec<Component> {
        let mut faults = self.backend.components().to_vec();
        if self.store_fs.is_some() {
            faults.push(Component::DiskFull);
        }
        faults
    }

    /// Whether the disk-full fault is among the faults.
    pub fn fills_disk(&self) -> bool {
        self.store_fs.is_some()
    }

    /// Fills the store's file system until a write to it fails for want of space.
    pub async fn fill_store_fs(&self) -> Result<()> {
        let filler = self.store_fs.as_ref().context("no store fs")?.filler();
        tokio::task::spawn_blocking(move || {
            use std::io::Write;
            let mut file = std::fs::File::create(&filler)?;
            let chunk = vec![0u8; 1 << 20];
            loop {
                match file.write_all(&chunk).and_then(|()| file.sync_data()) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::StorageFull => return Ok(()),
                    Err(e) => return Err(anyhow::Error::new(e).context("filling the store fs")),
                }
            }
        })
        .await?
    }

    /// Frees the store's file system, and restarts the store as an operator would once space
    /// is back: a store whose write failed refuses writes until it is started again (as etcd,
    /// which exits when its log cannot be written).
    pub async fn free_store_fs(&mut self) -> Result<()> {
        let filler = self.store_fs.as_ref().context("no store fs")?.filler();
        std::fs::remove_file(filler)?;
        self.kill_and_restart(Component::Store).await
    }

    fn store_dir(&self) -> PathBuf {
        self.dir.join("store")
    }

    /// The store's endpoints, as `--datastore-endpoint` takes them.
    fn store_endpoint(&self) -> String {
        match self.backend {
            Backend::Embedded => format!("etcd://{}", self.store_addr),
            Backend::Etcd => {
                let members: Vec<String> = (self.members.iter())
                    .map(|m| format!("127.0.0.1:{}", m.client_port))
                    .collect();
                format!("etcd://{}", members.join(","))
            }
        }
    }

    /// Starts etcd member `i` (with its data from before, if it ran already).
    async fn start_member(&self, i: usize) -> Result<SkiffChild> {
        let peer = |m: &Member| format!("http://127.0.0.1:{}", m.peer_port);
        let initial: Vec<String> = (self.members.iter().enumerate())
            .map(|(j, m)| format!("m{j}={}", peer(m)))
            .collect();
        let member = &self.members[i];
        let client = format!("http://127.0.0.1:{}", member.client_port);
        let data = self.dir.join(format!("etcd-{i}"));
        let args = [
            format!("--name=m{i}"),
            format!("--data-dir={}", data.display()),
            format!("--listen-client-urls={client}"),
            format!("--advertise-client-urls={client}"),
            format!("--listen-peer-urls={}", peer(member)),
            format!("--initial-advertise-peer-urls={}", peer(member)),
            format!("--initial-cluster={}", initial.join(",")),
            "--initial-cluster-state=new".into(),
            "--initial-cluster-token=skiff-chaos".into(),
            // zap's lines on stdout tell when the member serves clients; stderr is its log
            "--logger=zap".into(),
            "--log-outputs=stdout,stderr".into(),
        ];
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let log = self.dir.join(format!("etcd-{i}.log"));
        // etcd logs this once it has joined the cluster and serves clients
        start_until(Path::new("etcd"), &args, &log, "", "serving client traffic")
            .await
            .with_context(|| format!("starting etcd member {i} (etcd from PATH)"))
    }

    pub fn kubeconfig(&self) -> PathBuf {
        self.dir.join("api/kubeconfig.yaml")
    }

    pub async fn client(&self) -> Result<kube::Client> {
        let kubeconfig = kube::config::Kubeconfig::read_from(self.kubeconfig())?;
        let options = kube::config::KubeConfigOptions::default();
        let mut config = kube::Config::from_custom_kubeconfig(kubeconfig, &options).await?;
        // a request to a server that was just killed fails fast instead of hanging
        config.connect_timeout = Some(std::time::Duration::from_secs(2));
        config.read_timeout = Some(std::time::Duration::from_secs(15));
        Ok(kube::Client::try_from(config)?)
    }

    /// Kills `component` with SIGKILL and starts it again (an etcd member: the next in turn).
    pub async fn kill_and_restart(&mut self, component: Component) -> Result<()> {
        let key = match component {
            Component::EtcdMember => {
                self.next_member = (self.next_member + 1) % ETCD_MEMBERS;
                (component, self.next_member)
            }
            _ => (component, 0),
        };
        if let Some(i) = self.children.iter().position(|(k, _)| *k == key) {
            let (_, child) = self.children.swap_remove(i);
            child.stop().await;
        }
        match component {
            Component::EtcdMember => {
                let child = self.start_member(key.1).await?;
                self.children.push((key, child));
                Ok(())
            }
            _ => self.launch(component).await,
        }
    }

    /// Stops every component, the store last (SIGKILL: what a crash leaves must check clean),
    /// and checks the store: on the embedded store, `skiff store check` of its files; on etcd,
    /// that every member holds the same keys and values at the same revision (etcd's
    /// `HashKV`), checked before the members stop. Returns the check's summary and whether it
    /// found the store consistent.
    pub async fn stop_and_check(&mut self) -> Result<(String, bool)> {
        self.children.sort_by_key(|(k, _)| std::cmp::Reverse(*k));
        let stores = [Component::Store, Component::EtcdMember];
        let at = (self.children.iter())
            .position(|((c, _), _)| stores.contains(c))
            .unwrap_or(self.children.len());
        for (_, child) in self.children.drain(..at) {
            child.stop().await;
        }
        let members_checked = match self.backend {
            Backend::Etcd => Some(self.members_agree().await),
            Backend::Embedded => None,
        };
        for (_, child) in self.children.drain(..) {
            child.stop().await;
        }
        match members_checked {
            Some(check) => check,
            None => store_check(&self.store_dir()).await,
        }
    }

    /// Whether the etcd members, once they have reached the same revision, hash their keys and
    /// values alike at it.
    async fn members_agree(&self) -> Result<(String, bool)> {
        let mut clients = Vec::new();
        for m in &self.members {
            let endpoint = format!("127.0.0.1:{}", m.client_port);
            clients.push(etcd_client::Client::connect([endpoint], None).await?);
        }
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        let revision = loop {
            let mut revisions = Vec::new();
            for c in &mut clients {
                let status = c.status().await?;
                revisions.push(status.header().map_or(0, |h| h.revision()));
            }
            if revisions.windows(2).all(|w| w[0] == w[1]) {
                break revisions[0];
            }
            if std::time::Instant::now() > deadline {
                return Ok((
                    format!("members at revisions {revisions:?} after 30 s"),
                    false,
                ));
            }
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        };
        let mut hashes = Vec::new();
        for c in &mut clients {
            hashes.push(c.hash_kv(revision).await?.hash());
        }
        if hashes.windows(2).all(|w| w[0] == w[1]) {
            let n = hashes.len();
            Ok((format!("{n} members agree at revision {revision}"), true))
        } else {
            let summary = format!("members' hashes at revision {revision} differ: {hashes:?}");
            Ok((summary, false))
        }
    }

    async fn launch(&mut self, component: Component) -> Result<()> {
        let path = |p: PathBuf| p.to_string_lossy().into_owned();
        let kubeconfig = path(self.kubeconfig());
        let store = self.store_endpoint();
        let (api_port, nodes) = (self.api_port.to_string(), self.nodes.to_string());
        let args: Vec<String> = match component {
            Component::EtcdMember => bail!("an etcd member is started by `start_member`"),
            Component::DiskFull => bail!("the disk-full fault is not a process"),
            Component::Store => vec![
                "store".into(),
                "serve".into(),
                "--listen".into(),
                self.store_addr.clone(),
                "--data-dir".into(),
                path(self.store_dir()),
            ],
            Component::ApiServer => vec![
                "apiserver".into(),
                "--secure-port".into(),
                api_port,
                "--data-dir".into(),
                path(self.dir.join("api")),
                "--datastore-endpoint".into(),
                store,
            ],
            Component::Scheduler => vec![
                "scheduler".into(),
                "--kubeconfig".into(),
                kubeconfig,
                "--metrics-bind-address".into(),
                "127.0.0.1:0".into(),
            ],
            Component::ControllerManager => vec![
                "controller-manager".into(),
                "--kubeconfig".into(),
                kubeconfig,
                "--metrics-bind-address".into(),
                "127.0.0.1:0".into(),
            ],
            Component::Kubelet => vec![
                "kubelet".into(),
                "--kubeconfig".into(),
                kubeconfig,
                "--hollow".into(),
                "--count".into(),
                nodes,
                "--node-name-prefix".into(),
                "chaos".into(),
                "--data-dir".into(),
                path(self.dir.join("hollow")),
            ],
        };
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let name = serde_json::to_value(component)?;
        let log = self
            .dir
            .join(format!("{}.log", name.as_str().unwrap_or("child")));
        let child = start(&self.exe, &args, &log)
            .await
            .with_context(|| format!("starting {name}"))?;
        self.children.push(((component, 0), child));
        Ok(())
    }
}

/// `skiff store check` of the stopped store in `dir`: its last line, and whether it found the
/// store consistent.
async fn store_check(dir: &Path) -> Result<(String, bool)> {
    let out = tokio::process::Command::new(std::env::current_exe()?)
        .args(["store", "check", "--data-dir"])
        .arg(dir)
        .output()
        .await?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let last = stdout.lines().last().unwrap_or("no output");
    if last == "0 inconsistencies" {
        return Ok((last.to_string(), true));
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    Ok((format!("skiff store check: {stdout}{stderr}"), false))
}

/// A loopback port nothing listens on now.
fn free_port() -> Result<u16> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(listener.local_addr()?.port())
}
