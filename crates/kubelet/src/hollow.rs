//! Hollow kubelets, as kubemark's: many nodes in one process, each the real kubelet's node
//! registration, heartbeats, pod informer and pod workers running against a
//! [`HollowRuntime`] instead of containerd. All nodes share one connection pool, either as one
//! identity or each as itself ([`Clients::per_node`], by impersonation, so that the Node
//! authorizer, NodeRestriction and API Priority and Fairness treat each as the node it is), and
//! run as tokio tasks, no thread per node; their heartbeats start spread over one renewal
//! period so that they do not write in lockstep.
//!
//! Each node takes part in the local-path provisioner's protocol as a real kubelet does, its
//! volumes recorded, not made: it publishes a local-path directory ([`ANN_NODE_DIR`]) that is
//! never created (a pod mounting a claim gets a directory under its own pod directory,
//! [`Claims::NodeLocal`]), and once a volume made on it is `Released` with reclaim `Delete`,
//! its directory's removal is recorded in the node's [`RecordingHost`] and the volume deleted.
//! Recording rather than making keeps a run of thousands of claims off the disk, with nothing
//! to clean up after a killed run, while the API side (the provisioner, the binder, the
//! deleter's events and deletes) is exactly a real node's. For the same reason configMap,
//! secret, downwardAPI and projected volumes are built (their sources read, tokens requested
//! and refreshed) but their files not written ([`VolumeManager::without_files`]).
//!
//! With [`Config::serve`] each node also serves the kubelet API, on a port of its own at one
//! shared address (its InternalIP): the real kubelet server with the same authentication and
//! authorization, its Summary API and resource metrics the synthetic figures of
//! [`HollowSummary`], so that metrics-server, `kubectl top` and the HPA can be run at scale.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use futures::StreamExt;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::{ContainerImage, Node, NodeStatus};
use k8s_openapi::api::node::v1::RuntimeClass;
use kube::Api;
use skiff_runtime::cache::Cache;
use skiff_runtime::informer::Informers;

use crate::admission::NodeView;
use crate::api::KubePodApi;
use crate::container_gc::{CONTAINER_GC_PERIOD, ContainerGc, ContainerGcPolicy};
use crate::cri::ContainerRuntime;
use crate::dns::DnsSettings;
use crate::eviction::Pressure;
use crate::heartbeat::{self, StatusSource};
use crate::hollow_ipam::{Cidr, CidrError};
use crate::hollow_runtime::{Behaviour, HollowRuntime, RUNTIME_NAME, RUNTIME_VERSION};
use crate::host::HostInfo;
use crate::local_path::{ANN_NODE_DIR, KubeVolumeApi, NodeDir};
use crate::node;
use crate::pod_sync::SyncContext;
use crate::pod_workers::Workers;
use crate::security_context::NodeSecurity;
use crate::server::auth::Auth;
use crate::server::pods::PodRegistry;
use crate::server::reviews::ApiReviews;
use crate::server::{KubeletServer, ServerState, tls};
use crate::stats::hollow::HollowSummary;
use crate::volumes::VolumeManager;
use crate::volumes::claim::Claims;
use crate::volumes::host::RecordingHost;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("node {node}: {source}")]
    PodCidr {
        node: String,
        #[source]
        source: CidrError,
    },
    #[error(transparent)]
    Node(#[from] crate::node::Error),
    #[error(transparent)]
    Server(#[from] crate::server::Error),
    #[error("node {node}: its API client: {source}")]
    Client {
        node: String,
        #[source]
        source: kube::Error,
    },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// How the hollow nodes of one process are made.
#[derive(Debug, Clone)]
pub struct Config {
    /// How many nodes.
    pub count: usize,
    /// Node `i` is named `<prefix>-<i>`.
    pub prefix: String,
    /// Node `i` gets the `i`-th /24 of this range as its pod CIDR, unless its Node already
    /// has one.
    pub cluster_cidr: String,
    pub behaviour: Behaviour,
    /// Where the pod workers make their (empty) container log directories.
    pub log_dir: PathBuf,
    /// Where hollow pods' volumes are written (per node); mounts are recorded, not made.
    pub pods_dir: PathBuf,
    /// Node `<name>` publishes `<storage_dir>/<name>` (made absolute) as its local-path
    /// directory; it is never created.
    pub storage_dir: PathBuf,
    /// Whether and where the nodes serve the kubelet API.
    pub serve: Option<Serve>,
    /// `--cluster-dns` and `--cluster-domain` (without a cluster DNS each pod's sandbox gets
    /// upstream's `MissingClusterDNS` warning).
    pub dns: DnsSettings,
}

/// Where hollow nodes serve the kubelet API: each on a free port of `address`, which it reports
/// as its InternalIP (and the port in `daemonEndpoints`).
#[derive(Debug, Clone)]
pub struct Serve {
    pub address: IpAddr,
    /// The CA whose client certificates name users (the cluster CA), DER.
    pub client_ca: Vec<Vec<u8>>,
    /// Where the one serving certificate all nodes share is kept.
    pub pki_dir: PathBuf,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            count: 1,
            prefix: "hollow-node".into(),
            // room for 16384 nodes of /24 each
            cluster_cidr: "10.64.0.0/10".into(),
            behaviour: Behaviour::default(),
            log_dir: PathBuf::from("/var/lib/skiff/hollow/logs/pods"),
            pods_dir: PathBuf::from("/var/lib/skiff/hollow/pods"),
            storage_dir: PathBuf::from("/var/lib/skiff/hollow/storage"),
            serve: None,
            dns: DnsSettings::default(),
        }
    }
}

/// The hollow nodes' API clients.
pub struct Clients {
    /// What the nodes share uses this one: the volume and RuntimeClass informers, the kubelet
    /// servers' reviews, the local-path deleter's informers.
    pub shared: kube::Client,
    /// Node `name`'s own client (for its registration, heartbeats, pod watch, status and
    /// events), or `None` for every node to use `shared`.
    pub per_node: Option<NodeClient>,
}

/// Makes node `name`'s own client.
pub type NodeClient = Box<dyn Fn(&str) -> kube::Result<kube::Client> + Send + Sync>;

/// The size of each node's pod range (upstream's default `--node-cidr-mask-size` for IPv4).
pub const NODE_CIDR_MASK: u8 = 24;
/// How many nodes register at once.
const REGISTER_CONCURRENCY: usize = 16;

/// A hollow node's memory.
const HOLLOW_MEMORY_BYTES: u64 = 16 << 30;

/// What every hollow node reports as its machine: a mid-sized node (4 CPUs, 16 GiB, 100 GiB
/// of disk), named after the node, addressed at its pod range's gateway (or where it serves).
fn hollow_host(name: &str, ip: IpAddr) -> HostInfo {
    HostInfo {
        hostname: name.into(),
        ip,
        cpus: 4,
        memory_bytes: HOLLOW_MEMORY_BYTES,
        ephemeral_storage_bytes: 100 << 30,
        kernel_version: std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .map(|s| s.trim().to_string())
            .unwrap_or_default(),
        os_image: "Skiff hollow node".into(),
        machine_id: format!("hollow-{name}"),
        system_uuid: format!("hollow-{name}"),
        boot_id: format!("hollow-{name}"),
    }
}

/// A hollow node's status: fixed figures, fresh heartbeat times; no I/O.
struct HollowStatus {
    host: HostInfo,
    /// Upstream's defaults: hollow nodes take no kubelet settings.
    reservation: node::Reservation,
    images: Vec<ContainerImage>,
    /// The kubelet server's port (0: none).
    port: u16,
}

impl HollowStatus {
    fn at(&self, now: Timestamp) -> NodeStatus {
        let version = format!("{RUNTIME_NAME}://{RUNTIME_VERSION}");
        let mut status = node::node_status(&self.host, &self.reservation, &version, self.port, now);
        status.images = Some(self.images.clone());
        status
    }
}

#[async_trait]
impl StatusSource for HollowStatus {
    async fn read(&self, _posted: &NodeStatus, now: Timestamp) -> NodeStatus {
        self.at(now)
    }
}

/// One registered hollow node.
struct HollowNode {
    node: Node,
    status: HollowStatus,
    ctx: SyncContext,
    /// Its local-path directory, recording host and volume API, for the deleter.
    local_path: NodeDir,
    /// Its pods as the watch delivers them (the server reads them).
    registry: PodRegistry,
    server: Option<KubeletServer>,
    /// Its own client, and the factory its pod informer comes from.
    client: kube::Client,
    informers: Informers,
}

/// Registered hollow nodes; [`HollowNodes::run`] serves them until shutdown.
pub struct HollowNodes {
    nodes: Vec<HollowNode>,
    /// The factory of what the nodes share: volumes and RuntimeClasses (and, when all nodes
    /// share one client, each node's pod informer, which has its own field selector and so
    /// its own watch). They stop with the factory.
    informers: Informers,
}

impl HollowNodes {
    /// Registers the nodes (a few at a time); returns once all are.
    pub async fn start(clients: Clients, config: Config) -> Result<HollowNodes> {
        let client = clients.shared;
        let cluster = Cidr::parse(&config.cluster_cidr).map_err(|source| Error::PodCidr {
            node: format!("{}-*", config.prefix),
            source,
        })?;
        let informers = Informers::new(client.clone());
        let shared = Shared {
            runtime_classes: informers.get::<RuntimeClass>().cache().clone(),
            // the host's kernel decides the safe sysctls; hollow nodes have no AppArmor
            security: Arc::new(NodeSecurity {
                sysctls: crate::sysctl::Allowlist::new(crate::sysctl::kernel_version(), &[])
                    .expect("the safe sysctls are namespaced"),
                ..NodeSecurity::default()
            }),
            server: match &config.serve {
                Some(serve) => {
                    let (cert, key) = tls::ensure_serving_certificate(
                        &serve.pki_dir,
                        &config.prefix,
                        &[serve.address],
                    )
                    .map_err(crate::server::Error::from)?;
                    let tls = tls::server_config(&cert, &key, &serve.client_ca)
                        .map_err(crate::server::Error::from)?;
                    Some((tls, Arc::new(ApiReviews::new(client.clone()))))
                }
                None => None,
            },
        };
        let nodes: Vec<HollowNode> = futures::stream::iter(0..config.count)
            .map(|i| {
                register(
                    &client,
                    &informers,
                    &clients.per_node,
                    &config,
                    &shared,
                    cluster,
                    i,
                )
            })
            .buffered(REGISTER_CONCURRENCY)
            .collect::<Vec<_>>()
            .await
            .into_iter()
            .collect::<Result<_>>()?;
        Ok(HollowNodes { nodes, informers })
    }

    /// The registered nodes' names, in order.
    pub fn names(&self) -> Vec<String> {
        self.nodes
            .iter()
            .map(|n| n.node.metadata.name.clone().unwrap_or_default())
            .collect()
    }

    /// Serves every node's heartbeats and pods until `shutdown` completes. The first
    /// heartbeats are spread evenly over one renewal period.
    pub async fn run(self, shutdown: impl Future<Output = ()>) {
        let count = self.nodes.len().max(1) as u32;
        let mut tasks = Vec::with_capacity(self.nodes.len() * 3 + 1);
        let informers = self.informers;
        let mut local_path = Vec::with_capacity(self.nodes.len());
        for (i, n) in self.nodes.into_iter().enumerate() {
            local_path.push(n.local_path);
            let name = n.node.metadata.name.clone().unwrap_or_default();
            let offset = node::LEASE_RENEW * i as u32 / count;
            let view = NodeView::new(n.node);
            if let Some(server) = n.server {
                tasks.push(tokio::spawn(server.serve()));
            }
            tasks.push(tokio::spawn(heartbeat::run(
                n.client.clone(),
                view.clone(),
                n.status,
                offset,
            )));
            // dead containers of crash-looping pods would pile up in the hollow runtime
            let gc = Arc::new(ContainerGc::new(
                n.ctx.runtime.clone(),
                ContainerGcPolicy::default(),
                None,
                crate::pod_workers::known_pods(&n.informers, &name),
                n.ctx.clock.clone(),
            ));
            tasks.push(tokio::spawn(gc.run(CONTAINER_GC_PERIOD, n.ctx.api.clone())));
            // no eviction manager: a hollow node is never under pressure
            let pod_loop = crate::pod_workers::PodLoop {
                client: n.client,
                informers: n.informers,
                node_name: name,
                registry: n.registry,
                view,
                pressure: Pressure::default(),
                workers: Workers::new(n.ctx.allocations.clone()),
            };
            tasks.push(tokio::spawn(crate::pod_workers::watch_pods(
                n.ctx, pod_loop,
            )));
        }
        tasks.push(tokio::spawn(crate::local_path::run(informers, local_path)));
        shutdown.await;
        for t in tasks {
            t.abort();
        }
    }
}

/// What every hollow node's pod workers (and servers) share.
struct Shared {
    runtime_classes: Cache<RuntimeClass>,
    security: Arc<NodeSecurity>,
    /// The serving configuration and the authorizer's reviews, with [`Config::serve`].
    server: Option<(rustls::ServerConfig, Arc<ApiReviews>)>,
}

/// Registers hollow node `i` with its own client (from `per_node`, or `shared`): its pod CIDR
/// is the one its Node has, or the `i`-th of the cluster range.
async fn register(
    shared_client: &kube::Client,
    shared_informers: &Informers,
    per_node: &Option<NodeClient>,
    config: &Config,
    shared: &Shared,
    cluster: Cidr,
    i: usize,
) -> Result<HollowNode> {
    let name = format!("{}-{i}", config.prefix);
    let (client, informers) = match per_node {
        Some(make) => {
            let client = make(&name).map_err(|source| Error::Client {
                node: name.clone(),
                source,
            })?;
            (client.clone(), Informers::new(client))
        }
        None => (shared_client.clone(), shared_informers.clone()),
    };
    let nodes: Api<Node> = Api::all(client.clone());
    let assigned = node::assigned_pod_cidr(&nodes, &name).await?;
    let cidr_err = |source| Error::PodCidr {
        node: name.clone(),
        source,
    };
    let pod_cidr = match assigned {
        Some(c) => Cidr::parse(&c).map_err(cidr_err)?,
        None => cluster.subnet(i, NODE_CIDR_MASK).map_err(cidr_err)?,
    };
    let clock: Arc<dyn Fn() -> Timestamp + Send + Sync> = Arc::new(Timestamp::now);
    let runtime = Arc::new(HollowRuntime::new(
        pod_cidr,
        config.behaviour,
        clock.clone(),
    ));
    let images = runtime.list_images().await.unwrap_or_default();
    let gateway = pod_cidr.host(1);
    let registry = PodRegistry::default();
    let (ip, server) = match (&config.serve, &shared.server) {
        (Some(serve), Some((tls, reviews))) => {
            let server = KubeletServer::bind(
                SocketAddr::new(serve.address, 0),
                tls.clone(),
                ServerState {
                    runtime: runtime.clone(),
                    pods: registry.clone(),
                    log_dir: config.log_dir.clone(),
                    clock: Timestamp::now,
                    auth: Auth::new(reviews.clone(), name.clone()),
                    stats: Arc::new(HollowSummary::new(
                        &name,
                        runtime.clone(),
                        registry.clone(),
                        HOLLOW_MEMORY_BYTES,
                    )),
                },
            )
            .await?;
            (serve.address, Some(server))
        }
        _ => (IpAddr::V4(gateway), None),
    };
    let status = HollowStatus {
        host: hollow_host(&name, ip),
        reservation: node::Reservation::default(),
        images: node::node_images(&images),
        port: server.as_ref().map_or(0, |s| s.local_addr().port()),
    };
    let mut object = node::node_object(
        &name,
        &status.host,
        &pod_cidr.to_string(),
        status.at(Timestamp::now()),
    );
    let storage_dir = std::path::absolute(&config.storage_dir)
        .unwrap_or_else(|_| config.storage_dir.clone())
        .join(&name);
    // where its (notional) local-path volumes live, for the provisioner to name in volumes
    object.metadata.annotations = Some(std::collections::BTreeMap::from([(
        ANN_NODE_DIR.to_string(),
        storage_dir.display().to_string(),
    )]));
    let node = node::register(&nodes, object).await?;
    let allocatable = node
        .status
        .as_ref()
        .and_then(|s| s.allocatable.clone())
        .unwrap_or_default();
    let pod_api = KubePodApi::new(client.clone(), name.clone());
    let host = Arc::new(RecordingHost::default());
    let local_path = NodeDir {
        node: name.clone(),
        dir: storage_dir,
        host: host.clone(),
        api: Arc::new(KubeVolumeApi::with_recorder(
            pod_api.recorder(),
            client.clone(),
        )),
    };
    let ctx = SyncContext {
        runtime,
        api: Arc::new(pod_api),
        host_ip: ip.to_string(),
        runtime_name: RUNTIME_NAME.into(),
        memory_capacity: status.host.memory_bytes,
        log_dir: config.log_dir.clone(),
        clock,
        volumes: Arc::new(
            VolumeManager::new(config.pods_dir.join(&name), host, crate::volumes::REFRESH)
                .with_claims(Claims::NodeLocal)
                .without_files(),
        ),
        dns: Arc::new(config.dns.clone()),
        allocatable,
        sync_frequency: crate::volumes::REFRESH,
        security: shared.security.clone(),
        runtime_classes: shared.runtime_classes.clone(),
        // hollow pods have no processes: nothing to put in cgroups
        cgroups: None,
        // hollow pods are admitted again by a restarted hollow node: kept in memory
        allocations: Default::default(),
    };
    Ok(HollowNode {
        node,
        status,
        ctx,
        local_path,
        registry,
        server,
        client,
        informers,
    })
}
