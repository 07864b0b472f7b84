//! The kubelet's main loop: start (or connect to) containerd, import the built-in images,
//! register the Node, keep its Lease and status fresh, and run the pod loop
//! ([`crate::pod_workers`]), the kubelet server, the static pods, the pod network across
//! nodes ([`crate::podnet`]), the deletion of released local-path volumes
//! ([`crate::local_path`]), image and container garbage collection ([`crate::image_gc`],
//! [`crate::container_gc`]) and container log rotation ([`crate::log_rotation`]); these read
//! the kubelet's shared informers. The eviction manager ([`crate::eviction`]) watches the
//! node's resources beside them.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, ObjectReference};
use k8s_openapi::api::node::v1::RuntimeClass;
use kube::Api;
use skiff_runtime::events::{Event, Recorder};
use skiff_runtime::informer::Informers;

use crate::admission::NodeView;
use crate::allocation::Allocations;
use crate::api::{KubePodApi, PodApi};
use crate::cgroups::PodCgroups;
use crate::cgroups::fs::RealCgroupFs;
use crate::cgroups::resources::node_allocatable_config;
use crate::container_gc::{CONTAINER_GC_PERIOD, ContainerGc, ContainerGcPolicy};
use crate::containerd::{ContainerdConfig, ManagedContainerd};
use crate::cri::{ContainerRuntime, CriClient};
use crate::dns::{DnsSettings, parse_resolv_conf};
use crate::eviction::signals::{HostStats, StatsProvider};
use crate::eviction::{EvictionManager, GarbageCollectors, Manager, Pressure};
use crate::heartbeat::{self, HostStatus};
use crate::host::HostInfo;
use crate::image_gc::{IMAGE_GC_PERIOD, ImageGcManager, ImageGcPolicy};
use crate::images::{self, CtrImporter};
use crate::kubelet_config::KubeletConfiguration;
use crate::log_rotation::{LogRotatePolicy, LogRotation};
use crate::node;
use crate::pod_sync::SyncContext;
use crate::pod_workers::{PodLoop, Workers};
use crate::podnet::{Backend, PodNetwork, Vxlan};
use crate::podnet_runner::HostRunner;
use crate::security_context::NodeSecurity;
use crate::server::auth::Auth;
use crate::server::pods::PodRegistry;
use crate::server::reviews::ApiReviews;
use crate::server::{KubeletServer, ServerState, tls};
use crate::stats::SummaryProvider;
use crate::stats::host::HostSummary;
use crate::volumes::VolumeManager;
use crate::volumes::host::RealHost;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Allocations(#[from] crate::allocation::Error),
    #[error(transparent)]
    Cgroups(#[from] crate::cgroups::Error),
    #[error(transparent)]
    Config(#[from] crate::kubelet_config::Error),
    #[error(transparent)]
    Containerd(#[from] crate::containerd::Error),
    #[error(transparent)]
    Cri(#[from] crate::cri::Error),
    #[error(transparent)]
    Images(#[from] crate::images::Error),
    #[error(transparent)]
    Node(#[from] crate::node::Error),
    #[error(transparent)]
    PodNet(#[from] crate::podnet::Error),
    #[error(transparent)]
    Server(#[from] crate::server::Error),
    #[error(transparent)]
    ServerTls(#[from] crate::server::tls::Error),
    #[error("--allowed-unsafe-sysctls: {0}")]
    Sysctls(#[from] crate::sysctl::Error),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// How a kubelet runs.
#[derive(Debug, Clone)]
pub struct Config {
    pub node_name: String,
    /// Everything the kubelet keeps: containerd's dirs, logs, built images.
    pub data_dir: PathBuf,
    /// The pod CIDR for the CNI bridge, unless the Node already has `spec.podCIDR`; when unset,
    /// the kubelet waits for node-ipam to give its Node one (upstream's `--pod-cidr` is likewise
    /// only for standalone kubelets).
    pub pod_cidr: Option<String>,
    /// The node's IP; detected from the default route when unset.
    pub node_ip: Option<IpAddr>,
    /// An external CRI endpoint (`unix:///…`); a managed containerd is started when unset.
    pub container_runtime_endpoint: Option<String>,
    pub containerd_binary: PathBuf,
    pub ctr_binary: PathBuf,
    /// The static busybox the built-in images are made of.
    pub busybox: PathBuf,
    /// The cluster CA (DER certificates) that signs the certificates of the kubelet server's
    /// clients, from the kubeconfig. Empty: only bearer tokens authenticate.
    pub client_ca: Vec<Vec<u8>>,
    /// What upstream's `KubeletConfiguration` sets: the server's address, static pods, DNS,
    /// sync frequency, reservations, eviction, garbage collection, log rotation, sysctls.
    pub settings: KubeletConfiguration,
    /// How pods reach pods on other nodes (k3s's `--flannel-backend`).
    pub flannel_backend: FlannelBackend,
    /// The cluster's pod range, which the pod network does not masquerade within
    /// (`--cluster-cidr`).
    pub cluster_cidr: String,
    /// How often images are garbage collected (upstream's fixed `ImageGCPeriod`, 5 m; tests
    /// shorten it).
    pub image_gc_period: Duration,
    /// How often dead containers are garbage collected (upstream's fixed
    /// `ContainerGCPeriod`, 1 m; tests shorten it).
    pub container_gc_period: Duration,
}

/// How pods reach pods on other nodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlannelBackend {
    /// The VXLAN overlay ([`crate::podnet::vxlan`]) and masquerading out of the cluster CIDR;
    /// the CNI bridge does not masquerade, and pods get the VXLAN device's MTU. k3s's default.
    Vxlan,
    /// Routes to other nodes' pod CIDRs via their InternalIPs ([`crate::podnet::host_gw`])
    /// and masquerading out of the cluster CIDR; the CNI bridge does not masquerade.
    HostGw,
    /// No routes between nodes; the CNI bridge masquerades what leaves the node's pod CIDR
    /// (one node, or a network someone else provides).
    None,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            node_name: String::new(),
            data_dir: PathBuf::from("/var/lib/skiff"),
            pod_cidr: None,
            node_ip: None,
            container_runtime_endpoint: None,
            containerd_binary: PathBuf::from("containerd"),
            ctr_binary: PathBuf::from("ctr"),
            busybox: PathBuf::from("/bin/busybox"),
            client_ca: Vec::new(),
            settings: KubeletConfiguration::default(),
            // k3s's default
            flannel_backend: FlannelBackend::Vxlan,
            // k3s's default cluster CIDR
            cluster_cidr: "10.42.0.0/16".into(),
            image_gc_period: IMAGE_GC_PERIOD,
            container_gc_period: CONTAINER_GC_PERIOD,
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
    /// The pod network across nodes, unless `--flannel-backend none`.
    pod_network: Option<PodNetwork>,
    /// What the eviction manager reads: the host and the runtime's stats.
    stats: Arc<dyn StatsProvider>,
    /// Events about this node (`kubelet` on the node).
    events: Recorder,
    /// This kubelet's watches (its pods, RuntimeClasses, the Nodes for the pod network); they
    /// stop with the kubelet.
    informers: Informers,
    /// Image garbage collection, which the eviction manager also asks to free disk
    /// ([`ImageGcManager::delete_unused_images`]).
    image_gc: Arc<ImageGcManager>,
    pub ready: Ready,
}

impl Kubelet {
    /// Starts the runtime, imports the built-in images and registers the Node.
    pub async fn start(client: kube::Client, config: Config) -> Result<Kubelet> {
        // ephemeral storage is measured on the filesystem of the data dir
        let _ = std::fs::create_dir_all(&config.data_dir);
        let host = HostInfo::read(config.node_ip, &config.data_dir);
        // as upstream's container manager, before anything runs: a bad cgroup root stops here
        let cgroups = if config.settings.cgroups_per_qos {
            Some(Arc::new(start_pod_cgroups(&config.settings, &host)?))
        } else {
            None
        };
        let nodes: Api<Node> = Api::all(client.clone());
        let pod_cidr = match node::assigned_pod_cidr(&nodes, &config.node_name).await? {
            Some(cidr) => cidr,
            None => match &config.pod_cidr {
                Some(cidr) => cidr.clone(),
                None => node::await_pod_cidr(&nodes, &config.node_name).await?,
            },
        };
        let pod_network = pod_network(&config, host.ip, &pod_cidr).await?;

        let (managed, endpoint) = match &config.container_runtime_endpoint {
            Some(e) => (None, e.clone()),
            None => {
                let c = ContainerdConfig {
                    dir: config.data_dir.join("containerd"),
                    pod_cidr: pod_cidr.clone(),
                    ip_masq: pod_network.is_none(),
                    mtu: pod_network.as_ref().and_then(PodNetwork::pod_mtu),
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
        let stats: Arc<dyn StatsProvider> = Arc::new(HostStats::new(
            cri.clone(),
            &config.data_dir,
            &config.data_dir.join("logs/pods"),
            &config.settings.cgroup_root,
        ));
        let log_dir = config.data_dir.join("logs/pods");
        let pods = PodRegistry::default();
        let summary: Arc<dyn SummaryProvider> = Arc::new(HostSummary::new(
            &config.node_name,
            cri.clone(),
            pods.clone(),
            cgroups.clone(),
            &config.data_dir,
            &log_dir,
        ));
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

        let (cert, key) = tls::ensure_serving_certificate(
            &config.data_dir.join("pki"),
            &host.hostname,
            &[host.ip, IpAddr::from([127, 0, 0, 1])],
        )?;
        let server = KubeletServer::bind(
            SocketAddr::new(config.settings.address, config.settings.port),
            tls::server_config(&cert, &key, &config.client_ca)?,
            ServerState {
                runtime: runtime.clone(),
                pods: pods.clone(),
                log_dir: log_dir.clone(),
                clock: Timestamp::now,
                auth: Auth::new(
                    Arc::new(ApiReviews::new(client.clone())),
                    config.node_name.clone(),
                ),
                stats: summary,
            },
        )
        .await?;
        let mut config = config;
        // the port the server got (0 picks a free one), reported in the node's status
        config.settings.port = server.local_addr().port();
        let reservation = node::Reservation::of(&config.settings)?;
        let mut status = node::node_status(
            &host,
            &reservation,
            &runtime_version,
            config.settings.port,
            Timestamp::now(),
        );
        status.images = Some(node::node_images(&runtime.list_images().await?));
        let allocatable = status.allocatable.clone().unwrap_or_default();
        let mut object = node::node_object(&config.node_name, &host, &pod_cidr, status);
        // where this node's local-path volumes live, for the provisioner to name in volumes;
        // and how other nodes reach its pods (flannel's annotations)
        let mut annotations = std::collections::BTreeMap::from([(
            crate::local_path::ANN_NODE_DIR.to_string(),
            crate::local_path::node_dir(&config.data_dir)
                .display()
                .to_string(),
        )]);
        annotations.extend(pod_network.iter().flat_map(PodNetwork::node_annotations));
        object.metadata.annotations = Some(annotations);
        let node = node::register(&nodes, object).await?;
        let pod_api = KubePodApi::new(client.clone(), config.node_name.clone());
        let events = pod_api.recorder();
        let api: Arc<dyn PodApi> = Arc::new(pod_api);
        let informers = Informers::new(client.clone());
        let security = NodeSecurity::for_host(&config.data_dir, &config.settings)?;
        // the sandbox and built-in images cannot be pulled again here: never collected
        let image_gc = Arc::new(ImageGcManager::new(
            runtime.clone(),
            api.clone(),
            ImageGcPolicy::from_config(&config.settings),
            vec![images::PAUSE_IMAGE.into(), images::BUSYBOX_IMAGE.into()],
            Arc::new(crate::fs_stats::fs_stats),
            Arc::new(Timestamp::now),
        ));
        let ctx = SyncContext {
            runtime,
            api,
            host_ip: host.ip.to_string(),
            runtime_name: version.runtime_name.clone(),
            memory_capacity: host.memory_bytes,
            log_dir,
            clock: Arc::new(Timestamp::now),
            volumes: Arc::new(VolumeManager::new(
                config.data_dir.join("pods"),
                Arc::new(RealHost),
                config.settings.sync_frequency,
            )),
            dns: Arc::new(DnsSettings {
                cluster_dns: config.settings.cluster_dns.clone(),
                cluster_domain: config.settings.cluster_domain.clone(),
                host: parse_resolv_conf(
                    &std::fs::read_to_string(&config.settings.resolv_conf).unwrap_or_default(),
                ),
                ..Default::default()
            }),
            allocatable,
            sync_frequency: config.settings.sync_frequency,
            security: Arc::new(security),
            runtime_classes: informers.get::<RuntimeClass>().cache().clone(),
            cgroups,
            allocations: Arc::new(Allocations::load(&config.data_dir)?),
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
            pod_network,
            stats,
            events,
            informers,
            image_gc,
            ready,
        })
    }

    /// Serves until `shutdown` completes; then stops the workers and the managed containerd
    /// (pods keep running in their shims, as upstream's kubelet leaves them).
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> Result<()> {
        let pressure = Pressure::default();
        let workers = Workers::new(self.ctx.allocations.clone());
        let status = HostStatus {
            runtime: self.ctx.runtime.clone(),
            runtime_version: self.runtime_version.clone(),
            node_ip: self.config.node_ip,
            data_dir: self.config.data_dir.clone(),
            kubelet_port: self.config.settings.port,
            reservation: node::Reservation::of(&self.config.settings)?,
            pressure: pressure.clone(),
        };
        let informers = self.informers.clone();
        let view = NodeView::new(self.node.clone());
        let heartbeats = tokio::spawn(heartbeat::run(
            self.client.clone(),
            view.clone(),
            status,
            Duration::ZERO,
        ));
        let pods = tokio::spawn(crate::pod_workers::watch_pods(
            self.ctx.clone(),
            PodLoop {
                client: self.client.clone(),
                informers: informers.clone(),
                node_name: self.config.node_name.clone(),
                registry: self.pods.clone(),
                view,
                pressure: pressure.clone(),
                workers: workers.clone(),
            },
        ));
        let container_gc = Arc::new(ContainerGc::new(
            self.ctx.runtime.clone(),
            ContainerGcPolicy::default(),
            Some(self.ctx.log_dir.clone()),
            crate::pod_workers::known_pods(&informers, &self.config.node_name),
            self.ctx.clock.clone(),
        ));
        let container_gc_task = tokio::spawn(
            container_gc
                .clone()
                .run(self.config.container_gc_period, self.ctx.api.clone()),
        );
        let eviction = tokio::spawn(
            EvictionManager {
                manager: Manager::new(&self.config.settings, pressure),
                node: self.config.node_name.clone(),
                stats: self.stats.clone(),
                reclaimer: Arc::new(GarbageCollectors {
                    containers: container_gc,
                    images: self.image_gc.clone(),
                }),
                pods: Arc::new(workers),
                api: self.ctx.api.clone(),
                node_events: node_events(self.events.clone(), &self.node),
            }
            .run(),
        );
        let static_pods = self.config.settings.static_pod_path.clone().map(|dir| {
            let api = crate::static_pods::KubeMirrorApi {
                client: self.client.clone(),
                node: self.config.node_name.clone(),
            };
            let node = self.node.clone();
            let every = self.config.settings.file_check_frequency;
            tokio::spawn(async move { crate::static_pods::run(&api, &dir, &node, every).await })
        });
        let this_node = crate::local_path::NodeDir {
            node: self.config.node_name.clone(),
            dir: crate::local_path::node_dir(&self.config.data_dir),
            host: self.ctx.volumes.host(),
            api: Arc::new(crate::local_path::KubeVolumeApi::new(
                self.client.clone(),
                &self.config.node_name,
            )),
        };
        let local_path = tokio::spawn(crate::local_path::run(informers.clone(), vec![this_node]));
        let pod_network = self
            .pod_network
            .map(|n| tokio::spawn(crate::podnet::run(informers.clone(), n)));
        let image_gc = tokio::spawn(self.image_gc.clone().run(self.config.image_gc_period));
        let log_rotation = LogRotation::new(
            self.ctx.runtime.clone(),
            LogRotatePolicy::from_config(&self.config.settings),
            self.ctx.clock.clone(),
        );
        let log_rotation =
            tokio::spawn(log_rotation.run(self.config.settings.container_log_monitor_interval));
        let server = tokio::spawn(self.server.serve());
        shutdown.await;
        if let Some(task) = pod_network {
            task.abort();
        }
        heartbeats.abort();
        eviction.abort();
        local_path.abort();
        image_gc.abort();
        container_gc_task.abort();
        log_rotation.abort();
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

/// The pod network `--flannel-backend` asks for, set up far enough that the CNI config (the
/// pods' MTU) and the Node (flannel's annotations) can name it: for vxlan, this node's VXLAN
/// device on the interface holding `node_ip`, addressed from `pod_cidr`.
async fn pod_network(
    config: &Config,
    node_ip: IpAddr,
    pod_cidr: &str,
) -> Result<Option<PodNetwork>> {
    let runner = Arc::new(HostRunner);
    let backend = match config.flannel_backend {
        FlannelBackend::None => return Ok(None),
        FlannelBackend::HostGw => Backend::HostGw { public_ip: node_ip },
        FlannelBackend::Vxlan => {
            let IpAddr::V4(ip) = node_ip else {
                return Err(crate::podnet::Error::NodeIp(node_ip).into());
            };
            Backend::Vxlan(Vxlan::setup(runner.as_ref(), ip, pod_cidr).await?)
        }
    };
    let network = PodNetwork::new(runner, &config.node_name, &config.cluster_cidr, backend)?;
    Ok(Some(network))
}

/// Makes `kubepods` under `--cgroup-root` with what the node gives pods (its capacity less
/// `kubeReserved` and `systemReserved`) and the QoS cgroups below it.
fn start_pod_cgroups(settings: &KubeletConfiguration, host: &HostInfo) -> Result<PodCgroups> {
    let mut capacity = BTreeMap::from([
        ("cpu".to_string(), i64::from(host.cpus) * 1000),
        (
            "memory".to_string(),
            i64::try_from(host.memory_bytes).unwrap_or(i64::MAX),
        ),
    ]);
    if let Some(pids) = crate::host::max_pids() {
        capacity.insert("pid".to_string(), pids);
    }
    let kubepods = node_allocatable_config(&capacity, &settings.reserved()?);
    Ok(PodCgroups::start(
        Arc::new(RealCgroupFs),
        &settings.cgroup_root,
        settings.pod_pids_limit,
        &kubepods,
    )?)
}

/// Records events about `node` through `recorder`.
fn node_events(recorder: Recorder, node: &Node) -> crate::eviction::NodeEvents {
    let regarding = ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Node".into()),
        name: node.metadata.name.clone(),
        uid: node.metadata.uid.clone(),
        ..Default::default()
    };
    Arc::new(move |type_, reason, message| {
        recorder.record(Event::new(type_, regarding.clone(), reason, message));
    })
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
