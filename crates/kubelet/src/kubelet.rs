//! The kubelet's main loop: start (or connect to) containerd, import the built-in images,
//! register the Node, keep its Lease and status fresh, watch this node's pods only
//! (`fieldSelector=spec.nodeName=<node>`, filtered by the API server) and run one worker per
//! pod that syncs it on every change and every second.

use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use tokio::sync::watch;

use crate::admission::{self, NodeView};
use crate::api::KubePodApi;
use crate::containerd::{ContainerdConfig, ManagedContainerd};
use crate::cri::{ContainerRuntime, CriClient};
use crate::dns::{DnsSettings, parse_resolv_conf};
use crate::heartbeat::{self, HostStatus};
use crate::host::HostInfo;
use crate::images::{self, CtrImporter};
use crate::node;
use crate::pod_sync::{LABEL_POD_NAME, LABEL_POD_NAMESPACE, LABEL_POD_UID, Outcome, SyncContext};
use crate::server::pods::PodRegistry;
use crate::server::{KubeletServer, ServerState, tls};
use crate::volumes::VolumeManager;
use crate::volumes::host::RealHost;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Containerd(#[from] crate::containerd::Error),
    #[error(transparent)]
    Cri(#[from] crate::cri::Error),
    #[error(transparent)]
    Images(#[from] crate::images::Error),
    #[error(transparent)]
    Node(#[from] crate::node::Error),
    #[error(transparent)]
    Server(#[from] crate::server::Error),
    #[error(transparent)]
    ServerTls(#[from] crate::server::tls::Error),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// How a kubelet runs.
#[derive(Debug, Clone)]
pub struct Config {
    pub node_name: String,
    /// Everything the kubelet keeps: containerd's dirs, logs, built images.
    pub data_dir: PathBuf,
    /// The pod CIDR for the CNI bridge, unless the Node already has `spec.podCIDR`.
    pub pod_cidr: String,
    /// The node's IP; detected from the default route when unset.
    pub node_ip: Option<IpAddr>,
    /// An external CRI endpoint (`unix:///…`); a managed containerd is started when unset.
    pub container_runtime_endpoint: Option<String>,
    pub containerd_binary: PathBuf,
    pub ctr_binary: PathBuf,
    /// The static busybox the built-in images are made of.
    pub busybox: PathBuf,
    /// A directory of static pod manifests (upstream's `staticPodPath`), if any.
    pub pod_manifest_path: Option<PathBuf>,
    /// How often that directory is read (upstream's `fileCheckFrequency`, 20 s).
    pub file_check_frequency: Duration,
    /// Where the kubelet server listens (upstream's `--address` and `--port`).
    pub address: IpAddr,
    pub port: u16,
    /// The CA (DER certificates) that signs the certificates of the server's clients: the
    /// cluster CA, from the kubeconfig. Empty: every request is answered 401.
    pub client_ca: Vec<Vec<u8>>,
    /// Cluster DNS servers for ClusterFirst pods (`--cluster-dns`); none: the host's.
    pub cluster_dns: Vec<IpAddr>,
    /// `--cluster-domain`.
    pub cluster_domain: String,
    /// How often configMap, secret, downwardAPI and projected volumes are refreshed
    /// (`--sync-frequency`).
    pub sync_frequency: Duration,
    /// The host's resolv.conf, for `Default` pods and the search path (`--resolv-conf`).
    pub resolv_conf: PathBuf,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            node_name: String::new(),
            data_dir: PathBuf::from("/var/lib/skiff"),
            // k3s's default cluster CIDR's first node range
            pod_cidr: "10.42.0.0/24".into(),
            node_ip: None,
            container_runtime_endpoint: None,
            containerd_binary: PathBuf::from("containerd"),
            ctr_binary: PathBuf::from("ctr"),
            busybox: PathBuf::from("/bin/busybox"),
            pod_manifest_path: None,
            file_check_frequency: crate::static_pods::FILE_CHECK,
            // upstream's kubelet defaults
            address: IpAddr::from([0, 0, 0, 0]),
            port: 10250,
            client_ca: Vec::new(),
            cluster_dns: Vec::new(),
            // upstream's conventional clusterDomain and resolvConf
            cluster_domain: "cluster.local".into(),
            sync_frequency: crate::volumes::REFRESH,
            resolv_conf: PathBuf::from("/etc/resolv.conf"),
        }
    }
}

/// What the kubelet reports once its Node is registered.
#[derive(Debug, Clone)]
pub struct Ready {
    pub node: String,
    pub endpoint: String,
    pub runtime_version: String,
    pub node_ip: IpAddr,
    pub pod_cidr: String,
    /// Where the kubelet server listens.
    pub server: SocketAddr,
}

/// A started kubelet: node registered, runtime up. [`Kubelet::run`] serves until shutdown.
pub struct Kubelet {
    client: kube::Client,
    config: Config,
    managed: Option<ManagedContainerd>,
    ctx: SyncContext,
    node: Node,
    runtime_version: String,
    server: KubeletServer,
    pods: PodRegistry,
    pub ready: Ready,
}

impl Kubelet {
    /// Starts the runtime, imports the built-in images and registers the Node.
    pub async fn start(client: kube::Client, config: Config) -> Result<Kubelet> {
        let nodes: Api<Node> = Api::all(client.clone());
        let pod_cidr = node::assigned_pod_cidr(&nodes, &config.node_name)
            .await?
            .unwrap_or_else(|| config.pod_cidr.clone());

        let (managed, endpoint) = match &config.container_runtime_endpoint {
            Some(e) => (None, e.clone()),
            None => {
                let c = ContainerdConfig {
                    dir: config.data_dir.join("containerd"),
                    pod_cidr: pod_cidr.clone(),
                    ..Default::default()
                };
                let m = ManagedContainerd::start(c, config.containerd_binary.clone()).await?;
                let e = m.endpoint();
                (Some(m), e)
            }
        };
        let cri = CriClient::connect(&endpoint)?;
        let version = runtime_version(&cri).await?;
        let runtime_version = format!("{}://{}", version.runtime_name, version.runtime_version);
        let runtime: Arc<dyn ContainerRuntime> = Arc::new(cri);
        if let Some(socket) = crate::cri::socket_path(&endpoint) {
            let importer = CtrImporter {
                ctr: config.ctr_binary.clone(),
                socket,
            };
            images::ensure_builtin(
                runtime.as_ref(),
                &importer,
                &config.busybox,
                &config.data_dir.join("images"),
            )
            .await?;
        }

        let host = HostInfo::read(config.node_ip, &config.data_dir);
        let (cert, key) = tls::ensure_serving_certificate(
            &config.data_dir.join("pki"),
            &host.hostname,
            &[host.ip, IpAddr::from([127, 0, 0, 1])],
        )?;
        let log_dir = config.data_dir.join("logs/pods");
        let pods = PodRegistry::default();
        let server = KubeletServer::bind(
            SocketAddr::new(config.address, config.port),
            tls::server_config(&cert, &key, &config.client_ca)?,
            ServerState {
                runtime: runtime.clone(),
                pods: pods.clone(),
                log_dir: log_dir.clone(),
                clock: Timestamp::now,
            },
        )
        .await?;
        let mut config = config;
        // the port the server got (0 picks a free one), reported in the node's status
        config.port = server.local_addr().port();
        let mut status = node::node_status(&host, &runtime_version, config.port, Timestamp::now());
        status.images = Some(node::node_images(&runtime.list_images().await?));
        let allocatable = status.allocatable.clone().unwrap_or_default();
        let node = node::register(
            &nodes,
            node::node_object(&config.node_name, &host, &pod_cidr, status),
        )
        .await?;
        let ctx = SyncContext {
            runtime,
            api: Arc::new(KubePodApi {
                client: client.clone(),
                node: config.node_name.clone(),
            }),
            host_ip: host.ip.to_string(),
            runtime_name: version.runtime_name.clone(),
            memory_capacity: host.memory_bytes,
            log_dir,
            clock: Arc::new(Timestamp::now),
            volumes: Arc::new(VolumeManager::new(
                config.data_dir.join("pods"),
                Arc::new(RealHost),
                config.sync_frequency,
            )),
            dns: Arc::new(DnsSettings {
                cluster_dns: config.cluster_dns.clone(),
                cluster_domain: config.cluster_domain.clone(),
                host: parse_resolv_conf(
                    &std::fs::read_to_string(&config.resolv_conf).unwrap_or_default(),
                ),
                ..Default::default()
            }),
            allocatable,
        };
        let ready = Ready {
            node: config.node_name.clone(),
            endpoint,
            runtime_version: runtime_version.clone(),
            node_ip: host.ip,
            pod_cidr,
            server: server.local_addr(),
        };
        Ok(Kubelet {
            client,
            config,
            managed,
            ctx,
            node,
            runtime_version,
            server,
            pods,
            ready,
        })
    }

    /// Serves until `shutdown` completes; then stops the workers and the managed containerd
    /// (pods keep running in their shims, as upstream's kubelet leaves them).
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> Result<()> {
        let status = HostStatus {
            runtime: self.ctx.runtime.clone(),
            runtime_version: self.runtime_version.clone(),
            node_ip: self.config.node_ip,
            data_dir: self.config.data_dir.clone(),
            kubelet_port: self.config.port,
        };
        let view = NodeView::new(self.node.clone());
        let heartbeats = tokio::spawn(heartbeat::run(
            self.client.clone(),
            view.clone(),
            status,
            Duration::ZERO,
        ));
        let pods = tokio::spawn(watch_pods(
            self.client.clone(),
            self.config.node_name.clone(),
            self.ctx.clone(),
            self.pods.clone(),
            view,
        ));
        let static_pods = self.config.pod_manifest_path.clone().map(|dir| {
            let api = crate::static_pods::KubeMirrorApi {
                client: self.client.clone(),
                node: self.config.node_name.clone(),
            };
            let node = self.node.clone();
            let every = self.config.file_check_frequency;
            tokio::spawn(async move { crate::static_pods::run(&api, &dir, &node, every).await })
        });
        let server = tokio::spawn(self.server.serve());
        shutdown.await;
        heartbeats.abort();
        pods.abort();
        server.abort();
        if let Some(task) = static_pods {
            task.abort();
        }
        if let Some(m) = self.managed {
            m.stop().await;
        }
        Ok(())
    }
}

/// How long the runtime gets to answer CRI after its socket opened.
const RUNTIME_WAIT: Duration = Duration::from_secs(30);

/// The runtime's version, once CRI answers: a containerd that restarts over existing state opens
/// its socket before its CRI plugin has restored that state, and answers "server is not
/// initialized yet" until then.
async fn runtime_version(cri: &CriClient) -> Result<crate::cri::VersionResponse> {
    let deadline = tokio::time::Instant::now() + RUNTIME_WAIT;
    loop {
        match cri.version().await {
            Ok(v) => return Ok(v),
            Err(e) if tokio::time::Instant::now() < deadline => {
                tracing::debug!(error = %e, "waiting for the runtime's CRI");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// Watches this node's pods, keeps `registry` (what the server sees) up to date, admits each
/// new pod (or rejects it) and hands it to its worker.
pub(crate) async fn watch_pods(
    client: kube::Client,
    node_name: String,
    ctx: SyncContext,
    registry: PodRegistry,
    view: NodeView,
) {
    let nodes: Api<Node> = Api::all(client.clone());
    let pods: Api<Pod> = Api::all(client);
    let selector = format!("spec.nodeName={node_name}");
    let stream =
        watcher::watcher(pods, watcher::Config::default().fields(&selector)).default_backoff();
    let mut stream = std::pin::pin!(stream);
    // pod uid → the worker's mailbox (latest object; None once removed from the API)
    let mut workers: HashMap<String, watch::Sender<Option<Pod>>> = HashMap::new();
    // the uids a (re)list returned, to find what the runtime runs for pods that are gone
    let mut listed: HashSet<String> = HashSet::new();
    // pods rejected at admission, until their Failed status comes back through the watch
    let mut rejected: HashSet<String> = HashSet::new();
    while let Some(event) = stream.next().await {
        let (pod, present) = match event {
            Ok(Event::Apply(pod)) => (pod, true),
            Ok(Event::InitApply(pod)) => {
                listed.insert(pod.metadata.uid.clone().unwrap_or_default());
                (pod, true)
            }
            Ok(Event::Delete(pod)) => (pod, false),
            Ok(Event::Init) => {
                listed.clear();
                continue;
            }
            Ok(Event::InitDone) => {
                // pods deleted while the watch was down (a relist after 410 Gone) are missing
                // from the list: their workers stop what they run, as on a DELETED event
                for (uid, tx) in &workers {
                    if !listed.contains(uid) {
                        let _ = tx.send(None);
                        registry.remove(uid);
                    }
                }
                // volumes of pods that are gone without a worker (deleted while the kubelet
                // was down); done here, before a new pod's worker can create its directory
                ctx.volumes
                    .tear_down_others(|uid| listed.contains(uid) || workers.contains_key(uid));
                tokio::spawn(remove_orphans(ctx.clone(), std::mem::take(&mut listed)));
                continue;
            }
            Err(e) => {
                tracing::warn!(error = %e, "watching pods");
                continue;
            }
        };
        workers.retain(|_, tx| !tx.is_closed());
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        if present {
            registry.upsert(&pod);
        } else {
            registry.remove(&uid);
        }
        match workers.get(&uid) {
            Some(tx) => {
                let _ = tx.send(present.then_some(pod));
            }
            None if present => {
                if admission::needs_admission(&pod) {
                    if rejected.contains(&uid) {
                        continue;
                    }
                    if let Err(r) = admit(&nodes, &node_name, &view, &pod, &workers).await {
                        admission::reject(&ctx, &pod, r).await;
                        rejected.insert(uid);
                        continue;
                    }
                }
                rejected.remove(&uid);
                let (tx, rx) = watch::channel(Some(pod.clone()));
                tokio::spawn(pod_worker(ctx.clone(), pod, rx));
                workers.insert(uid, tx);
            }
            None => {}
        }
    }
}

/// Admits a new pod beside the pods whose workers run and have not finished; before a
/// rejection the Node is read again, in case its labels, taints or allocatable changed since
/// it was last seen.
async fn admit(
    nodes: &Api<Node>,
    node_name: &str,
    view: &NodeView,
    pod: &Pod,
    workers: &HashMap<String, watch::Sender<Option<Pod>>>,
) -> std::result::Result<(), admission::Rejection> {
    let admitted: Vec<Pod> = workers
        .values()
        .filter_map(|tx| tx.borrow().clone())
        .filter(|p| {
            let phase = p.status.as_ref().and_then(|s| s.phase.as_deref());
            !matches!(phase, Some("Succeeded" | "Failed"))
        })
        .collect();
    if admission::check(pod, &view.get(), &admitted).is_ok() {
        return Ok(());
    }
    match nodes.get(node_name).await {
        Ok(node) => view.set(node),
        Err(e) => tracing::warn!(error = %e, "reading this node for admission"),
    }
    admission::check(pod, &view.get(), &admitted)
}

/// Stops and removes sandboxes (and their containers) of pods the API server no longer has:
/// pods deleted while this kubelet was down.
async fn remove_orphans(ctx: SyncContext, known: HashSet<String>) {
    let sandboxes = match ctx.runtime.list_pod_sandboxes(HashMap::new()).await {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(error = %e, "listing sandboxes to find orphans");
            return;
        }
    };
    let mut seen = HashSet::new();
    for sandbox in sandboxes {
        let label = |k: &str| sandbox.labels.get(k).cloned();
        let Some(uid) = label(LABEL_POD_UID) else {
            continue;
        };
        if known.contains(&uid) || !seen.insert(uid.clone()) {
            continue;
        }
        let mut pod = Pod::default();
        pod.metadata.uid = Some(uid);
        pod.metadata.name = label(LABEL_POD_NAME);
        pod.metadata.namespace = label(LABEL_POD_NAMESPACE);
        tracing::info!(pod = ?pod.metadata.name, "removing the containers of a pod that is gone");
        if let Err(e) = ctx.kill_pod(&pod, ORPHAN_GRACE_SECONDS).await {
            tracing::warn!(error = %e, "removing an orphaned pod");
        }
    }
}

/// How long an orphaned pod's containers get after SIGTERM: its spec, and so its grace
/// period, is gone with the object.
const ORPHAN_GRACE_SECONDS: i64 = 2;

/// How often a finished pod's worker asks the API server whether the pod still exists.
const FINISHED_CHECK: Duration = Duration::from_secs(10);

/// A finished (Succeeded or Failed) pod is deleted at once, with nothing for the kubelet to
/// stop, so its removal is seen only as a watch event; a worker whose pod has finished also
/// checks now and then, so that a missed event does not leave its containers behind.
#[derive(Default)]
struct FinishedChecks {
    /// The last sync found the pod finished.
    finished: bool,
    last: Option<tokio::time::Instant>,
}

impl FinishedChecks {
    fn due(&mut self) -> bool {
        if !self.finished {
            return false;
        }
        let now = tokio::time::Instant::now();
        match self.last {
            Some(t) if now.duration_since(t) < FINISHED_CHECK => false,
            _ => {
                self.last = Some(now);
                true
            }
        }
    }
}

async fn still_exists(ctx: &SyncContext, pod: &Pod) -> bool {
    let m = &pod.metadata;
    ctx.api
        .pod_exists(
            m.namespace.as_deref().unwrap_or("default"),
            m.name.as_deref().unwrap_or_default(),
            m.uid.as_deref().unwrap_or_default(),
        )
        .await
        // an error is no evidence that the pod is gone
        .unwrap_or(true)
}

/// Syncs one pod on every change and whenever its last sync asked to be called again.
async fn pod_worker(ctx: SyncContext, mut last: Pod, mut rx: watch::Receiver<Option<Pod>>) {
    // the pod's probe state lives as long as its worker
    let mut probes = crate::probe::Probes::default();
    let mut finished_checks = FinishedChecks::default();
    loop {
        let current = rx.borrow_and_update().clone();
        let delay = match current {
            None => {
                // removed from the API without us (a forced delete): stop what is left
                if let Err(e) = ctx.kill_pod(&last, 0).await {
                    tracing::warn!(error = %e, "stopping a removed pod");
                }
                return;
            }
            Some(pod) => {
                if finished_checks.due() && !still_exists(&ctx, &pod).await {
                    tracing::info!(pod = ?pod.metadata.name, "a finished pod is gone from the API server");
                    if let Err(e) = ctx.kill_pod(&pod, 0).await {
                        tracing::warn!(error = %e, "stopping a removed pod");
                    }
                    return;
                }
                let result = ctx.sync_pod(&pod, &mut probes).await;
                last = pod;
                match result {
                    Ok(Outcome::Done) => return,
                    Ok(Outcome::Resync(d)) => d,
                    Ok(Outcome::Finished) => {
                        finished_checks.finished = true;
                        crate::pod_sync::RESYNC
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "pod sync failed");
                        Duration::from_secs(2)
                    }
                }
            }
        };
        tokio::select! {
            changed = rx.changed() => if changed.is_err() { return },
            () = tokio::time::sleep(delay) => {}
        }
    }
}
