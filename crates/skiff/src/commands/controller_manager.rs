//! `skiff controller-manager`: the reconcile loops on their own, an ordinary API client (seeds
//! 001–003). Replicas elect a leader on upstream's Lease `kube-system/kube-controller-manager`;
//! only the leader runs controllers, and one that loses the lease exits, as upstream's does. With
//! `--use-service-account-credentials` each controller acts as its own ServiceAccount. Every
//! replica, leading or not, serves `/metrics` (the work queues' series) and `/healthz`.

use skiff_apimachinery::version::user_agent;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use clap::Args;
use skiff_controllers::Context;
use skiff_controllers::config::Config;
use skiff_controllers::credentials;
use skiff_runtime::leader::{self, LeaderElector};

use super::kubelet::go_duration;
use super::lifecycle::Lifecycle;

#[derive(Debug, Args)]
pub struct ControllerManagerArgs {
    /// Kubeconfig with the API server's address and the controller manager's credentials.
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: PathBuf,

    /// Controllers to run: `*` is every controller on by default, `name` adds one, `-name`
    /// removes one (upstream's `--controllers`).
    #[arg(long, value_delimiter = ',', default_value = "*")]
    pub controllers: Vec<String>,

    /// Run controllers only while holding the Lease `kube-system/kube-controller-manager`.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, value_name = "BOOL")]
    pub leader_elect: bool,

    /// Give each controller its own identity: the ServiceAccount `kube-system/<controller>`
    /// and a token from its TokenRequest, renewed before it expires (upstream's default is
    /// false: every controller then uses the kubeconfig's credentials).
    #[arg(long, default_value_t = false, action = clap::ArgAction::Set, value_name = "BOOL")]
    pub use_service_account_credentials: bool,

    /// The CA bundle published to every namespace as the ConfigMap `kube-root-ca.crt`; by
    /// default the kubeconfig's cluster CA.
    #[arg(long, value_name = "FILE")]
    pub root_ca_file: Option<PathBuf>,

    /// Assign each Node a pod range from `--cluster-cidr` (upstream's default is false).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, value_name = "BOOL")]
    pub allocate_node_cidrs: bool,

    /// The range node pod ranges are cut from.
    #[arg(long, value_name = "CIDR", default_value = "10.42.0.0/16")]
    pub cluster_cidr: String,

    /// The prefix length of each node's pod range.
    #[arg(long, value_name = "BITS", default_value_t = 24)]
    pub node_cidr_mask_size: u8,

    /// How long a node may go unheard before it is marked unknown.
    #[arg(long, value_name = "DURATION", default_value = "40s", value_parser = go_duration)]
    pub node_monitor_grace_period: Duration,

    /// How often node health is checked.
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = go_duration)]
    pub node_monitor_period: Duration,

    /// The grace a node that never posted its status gets after it was first seen.
    #[arg(long, value_name = "DURATION", default_value = "1m0s", value_parser = go_duration)]
    pub node_startup_grace_period: Duration,

    /// Nodes per second given the NoExecute not-ready or unreachable taint in a healthy zone.
    #[arg(long, value_name = "RATE", default_value_t = 0.1)]
    pub node_eviction_rate: f32,

    /// Nodes per second tainted in a partially disrupted zone larger than
    /// --large-cluster-size-threshold (a smaller one stops).
    #[arg(long, value_name = "RATE", default_value_t = 0.01)]
    pub secondary_node_eviction_rate: f32,

    /// The share of not-Ready nodes (at least 3) from which a zone is partially disrupted.
    #[arg(long, value_name = "FRACTION", default_value_t = 0.55)]
    pub unhealthy_zone_threshold: f32,

    /// The zone size above which a partially disrupted zone keeps the secondary rate.
    #[arg(long, value_name = "N", default_value_t = 50)]
    pub large_cluster_size_threshold: usize,

    /// Terminated pods kept before the oldest are deleted (0 or less: never).
    #[arg(
        long,
        value_name = "N",
        default_value_t = 12500,
        allow_negative_numbers = true
    )]
    pub terminated_pod_gc_threshold: i64,

    /// The most endpoints one EndpointSlice holds (upstream's `--max-endpoints-per-slice`).
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u16).range(1..=1000))]
    pub max_endpoints_per_slice: u16,

    /// The PEM CA certificate csrsigning issues cluster-scoped certificates with; with
    /// `--cluster-signing-key-file` (both or neither; without them csrsigning is off).
    #[arg(long, value_name = "FILE", requires = "cluster_signing_key_file")]
    pub cluster_signing_cert_file: Option<PathBuf>,

    /// The PEM key of `--cluster-signing-cert-file`.
    #[arg(long, value_name = "FILE", requires = "cluster_signing_cert_file")]
    pub cluster_signing_key_file: Option<PathBuf>,

    /// The longest certificate csrsigning issues (a request's `expirationSeconds` may ask for
    /// less).
    #[arg(long, value_name = "DURATION", default_value = "8760h0m0s", value_parser = go_duration)]
    pub cluster_signing_duration: Duration,

    /// How often each HorizontalPodAutoscaler is synced.
    #[arg(long, value_name = "DURATION", default_value = "15s", value_parser = go_duration)]
    pub horizontal_pod_autoscaler_sync_period: Duration,

    /// The scale-down stabilization window of HPAs whose behavior sets none.
    #[arg(long, value_name = "DURATION", default_value = "5m0s", value_parser = go_duration)]
    pub horizontal_pod_autoscaler_downscale_stabilization: Duration,

    /// The usage-to-target ratio change below which an HPA does not scale.
    #[arg(long, value_name = "RATIO", default_value_t = 0.1)]
    pub horizontal_pod_autoscaler_tolerance: f64,

    /// How long after a pod starts its CPU counts only when it is ready and sampled since.
    #[arg(long, value_name = "DURATION", default_value = "5m0s", value_parser = go_duration)]
    pub horizontal_pod_autoscaler_cpu_initialization_period: Duration,

    /// How long after a pod starts a readiness change is taken for its first.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = go_duration)]
    pub horizontal_pod_autoscaler_initial_readiness_delay: Duration,

    /// Where to serve `/metrics` (the work queues' `workqueue_*` series, by queue `name`) and
    /// `/healthz` over plain HTTP (port 0 picks a free one, printed in the ready line). Stands for
    /// upstream's `--bind-address` and `--secure-port` (10257), which serve them over HTTPS with
    /// authentication and authorization delegated to the API server.
    #[arg(long, value_name = "IP:PORT", default_value = "127.0.0.1:10257")]
    pub metrics_bind_address: std::net::SocketAddr,
}

/// The PEM bundle to publish: `--root-ca-file`, else the kubeconfig's current cluster CA.
fn root_ca(args: &ControllerManagerArgs) -> anyhow::Result<Option<String>> {
    use base64::Engine as _;
    if let Some(path) = &args.root_ca_file {
        let pem = std::fs::read_to_string(path)
            .with_context(|| format!("reading --root-ca-file {}", path.display()))?;
        return Ok(Some(pem));
    }
    let kubeconfig = kube::config::Kubeconfig::read_from(&args.kubeconfig)
        .with_context(|| format!("reading {}", args.kubeconfig.display()))?;
    let context = kubeconfig.current_context.as_deref().and_then(|name| {
        kubeconfig
            .contexts
            .iter()
            .find(|c| c.name == name)
            .and_then(|c| c.context.as_ref())
    });
    let cluster = context.and_then(|c| {
        kubeconfig
            .clusters
            .iter()
            .find(|k| k.name == c.cluster)
            .and_then(|k| k.cluster.as_ref())
    });
    let Some(cluster) = cluster else {
        return Ok(None);
    };
    if let Some(data) = &cluster.certificate_authority_data {
        let pem = base64::engine::general_purpose::STANDARD
            .decode(data.trim())
            .context("decoding the kubeconfig's certificate-authority-data")?;
        return Ok(Some(String::from_utf8_lossy(&pem).into_owned()));
    }
    match &cluster.certificate_authority {
        Some(path) => Ok(Some(std::fs::read_to_string(path).with_context(|| {
            format!("reading the kubeconfig's certificate-authority {path}")
        })?)),
        None => Ok(None),
    }
}

const LEASE_NAMESPACE: &str = "kube-system";
/// Upstream's lease name, the one `system:kube-controller-manager` may update.
const LEASE_NAME: &str = "kube-controller-manager";

pub async fn run(args: ControllerManagerArgs, lifecycle: Lifecycle) -> anyhow::Result<()> {
    let selected = skiff_controllers::select(&args.controllers).map_err(super::UsageError)?;
    let kube_config = super::kube_config(&args.kubeconfig).await?;
    let client = skiff_runtime::http2::client_builder(
        kube_config.clone(),
        &user_agent(skiff_controllers::PROGRAM),
    )?
    .with_layer(&skiff_controllers::in_flight_limit())
    .build();
    let credentials = args.use_service_account_credentials.then(|| {
        let issuer = Arc::new(credentials::KubeTokenIssuer(client.clone()));
        credentials::ClientBuilder::new(kube_config, issuer)
    });
    let instance = super::instance_name();
    let config = Config {
        root_ca: root_ca(&args)?,
        allocate_node_cidrs: args.allocate_node_cidrs,
        cluster_cidr: args.cluster_cidr.clone(),
        node_cidr_mask_size: args.node_cidr_mask_size,
        node_monitor_grace_period: args.node_monitor_grace_period,
        node_monitor_period: args.node_monitor_period,
        node_startup_grace_period: args.node_startup_grace_period,
        node_eviction_rate: args.node_eviction_rate,
        secondary_node_eviction_rate: args.secondary_node_eviction_rate,
        unhealthy_zone_threshold: args.unhealthy_zone_threshold,
        large_cluster_size_threshold: args.large_cluster_size_threshold,
        terminated_pod_gc_threshold: args.terminated_pod_gc_threshold,
        max_endpoints_per_slice: args.max_endpoints_per_slice.into(),
        cluster_signing_cert_file: args.cluster_signing_cert_file.clone(),
        cluster_signing_key_file: args.cluster_signing_key_file.clone(),
        cluster_signing_duration: args.cluster_signing_duration,
        hpa: skiff_controllers::config::HpaConfig {
            sync_period: args.horizontal_pod_autoscaler_sync_period,
            downscale_stabilization: args.horizontal_pod_autoscaler_downscale_stabilization,
            tolerance: args.horizontal_pod_autoscaler_tolerance,
            cpu_initialization_period: args.horizontal_pod_autoscaler_cpu_initialization_period,
            initial_readiness_delay: args.horizontal_pod_autoscaler_initial_readiness_delay,
        },
    };
    let ctx = Arc::new(Context::new(client.clone(), &instance).with_config(config));

    let (leading_tx, mut leading) = tokio::sync::watch::channel(!args.leader_elect);
    if args.leader_elect {
        let leases = kube::Api::namespaced(client, LEASE_NAMESPACE);
        let elector = LeaderElector::new(leases, LEASE_NAME, &instance, leader::Config::default());
        tokio::spawn(elector.run(leading_tx));
    }
    let metrics_addr = super::metrics::serve(
        args.metrics_bind_address,
        &lifecycle,
        skiff_runtime::metrics::encode,
    )
    .await?;
    let names: Vec<&str> = selected.iter().map(|d| d.name).collect();
    lifecycle.ready(format!(
        "skiff controller-manager ready: controllers {}; metrics http://{metrics_addr}/metrics",
        names.join(", ")
    ));
    tokio::select! {
        r = leading.wait_for(|l| *l) => { r.context("leader election stopped")?; }
        () = lifecycle.stopped() => return Ok(()),
    }
    tracing::info!(controllers = ?names, "leading; starting controllers");
    tokio::select! {
        r = skiff_controllers::run(ctx, &selected, credentials.as_ref()) => Ok(r?),
        () = lifecycle.stopped() => Ok(()),
        _ = leading.wait_for(|l| !*l) => {
            anyhow::bail!("lost the lease {LEASE_NAMESPACE}/{LEASE_NAME}")
        }
    }
}
