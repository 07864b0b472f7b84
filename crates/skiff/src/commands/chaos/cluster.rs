//! The cluster under test: every component a child process on fixed loopback ports, so that
//! any one can be killed with SIGKILL and started again as a supervisor would.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use crate::commands::bench::controllers::{SkiffChild, start};

/// The components the harness kills.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Component {
    /// `skiff store serve`, the embedded store behind its etcd v3 facade.
    Store,
    ApiServer,
    Scheduler,
    ControllerManager,
    /// The hollow nodes' `skiff kubelet --hollow` (every node's agent at once).
    Kubelet,
}

pub const COMPONENTS: [Component; 5] = [
    Component::Store,
    Component::ApiServer,
    Component::Scheduler,
    Component::ControllerManager,
    Component::Kubelet,
];

pub struct Cluster {
    exe: PathBuf,
    dir: PathBuf,
    store_addr: String,
    api_port: u16,
    nodes: usize,
    children: Vec<(Component, SkiffChild)>,
}

impl Cluster {
    /// Starts every component under `dir`, the API server on a free port, with `nodes` hollow
    /// nodes.
    pub async fn start(dir: &Path, nodes: usize) -> Result<Cluster> {
        let mut cluster = Cluster {
            exe: std::env::current_exe()?,
            dir: dir.to_path_buf(),
            store_addr: format!("127.0.0.1:{}", free_port()?),
            api_port: free_port()?,
            nodes,
            children: Vec::new(),
        };
        for c in COMPONENTS {
            cluster.launch(c).await?;
        }
        Ok(cluster)
    }

    pub fn store_dir(&self) -> PathBuf {
        self.dir.join("store")
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

    /// Kills `component` with SIGKILL and starts it again.
    pub async fn kill_and_restart(&mut self, component: Component) -> Result<()> {
        if let Some(i) = self.children.iter().position(|(c, _)| *c == component) {
            let (_, child) = self.children.swap_remove(i);
            child.stop().await;
        }
        self.launch(component).await
    }

    /// Stops every component, the store last (SIGKILL: what a crash leaves must check clean).
    pub async fn stop(&mut self) {
        self.children.sort_by_key(|(c, _)| std::cmp::Reverse(*c));
        for (_, child) in self.children.drain(..) {
            child.stop().await;
        }
    }

    async fn launch(&mut self, component: Component) -> Result<()> {
        let path = |p: PathBuf| p.to_string_lossy().into_owned();
        let kubeconfig = path(self.kubeconfig());
        let store = format!("etcd://{}", self.store_addr);
        let (api_port, nodes) = (self.api_port.to_string(), self.nodes.to_string());
        let args: Vec<String> = match component {
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
        self.children.push((component, child));
        Ok(())
    }
}

/// A loopback port nothing listens on now.
fn free_port() -> Result<u16> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(listener.local_addr()?.port())
}
