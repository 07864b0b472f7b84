//! Flags of `skiff controller-manager` that controllers read, with upstream's
//! kube-controller-manager names and defaults (each field says which flag).

use std::path::PathBuf;
use std::time::Duration;

/// Controller configuration carried by [`crate::Context`].
#[derive(Debug, Clone)]
pub struct Config {
    /// `--root-ca-file`'s PEM contents (or the kubeconfig's cluster CA when the flag is absent),
    /// published as `kube-root-ca.crt`; `None` leaves root-ca-cert-publisher idle.
    pub root_ca: Option<String>,
    /// `--allocate-node-cidrs` (upstream default false; Skiff's is true so that nodes get pod
    /// ranges without extra flags).
    pub allocate_node_cidrs: bool,
    /// `--cluster-cidr` (upstream has no default; Skiff's is `10.42.0.0/16`).
    pub cluster_cidr: String,
    /// `--node-cidr-mask-size` (upstream default 24 for IPv4).
    pub node_cidr_mask_size: u8,
    /// `--node-monitor-grace-period` (upstream default 40 s): how long a node may go without a
    /// Lease renewal or status update before it is marked unknown.
    pub node_monitor_grace_period: Duration,
    /// `--node-monitor-period` (upstream default 5 s): how often node health is checked.
    pub node_monitor_period: Duration,
    /// `--node-startup-grace-period` (upstream default 60 s): the grace a node that never
    /// posted a status gets after it was created.
    pub node_startup_grace_period: Duration,
    /// `--node-eviction-rate` (upstream default 0.1): nodes per second given the NoExecute
    /// not-ready or unreachable taint in a healthy zone, or in a fully disrupted one while
    /// another zone is not.
    pub node_eviction_rate: f32,
    /// `--secondary-node-eviction-rate` (upstream default 0.01): the rate in a partially
    /// disrupted zone of more than `large_cluster_size_threshold` nodes (none in a smaller one).
    pub secondary_node_eviction_rate: f32,
    /// `--unhealthy-zone-threshold` (upstream default 0.55): the share of not-Ready nodes (at
    /// least 3) from which a zone is partially disrupted.
    pub unhealthy_zone_threshold: f32,
    /// `--large-cluster-size-threshold` (upstream default 50): the zone size above which a
    /// partially disrupted zone keeps the secondary rate instead of stopping.
    pub large_cluster_size_threshold: usize,
    /// `--terminated-pod-gc-threshold` (upstream default 12500): terminated pods kept before
    /// pod-garbage-collector deletes the oldest; 0 or less disables that part.
    pub terminated_pod_gc_threshold: i64,
    /// `--max-endpoints-per-slice` (upstream default 100): endpoints per EndpointSlice.
    pub max_endpoints_per_slice: usize,
    /// `--cluster-signing-cert-file` and `--cluster-signing-key-file` (no upstream default):
    /// the CA csrsigning issues certificates with; without both it is off.
    pub cluster_signing_cert_file: Option<PathBuf>,
    pub cluster_signing_key_file: Option<PathBuf>,
    /// `--cluster-signing-duration` (upstream default 8760h): the longest certificate issued.
    pub cluster_signing_duration: Duration,
    /// The horizontal pod autoscaler's flags.
    pub hpa: HpaConfig,
}

/// `--horizontal-pod-autoscaler-*` (upstream's defaults).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HpaConfig {
    /// `-sync-period` (15 s): how often each HPA is synced.
    pub sync_period: Duration,
    /// `-downscale-stabilization` (5 min): the scale-down window of HPAs that set none.
    pub downscale_stabilization: Duration,
    /// `-tolerance` (0.1): the ratio change below which nothing scales.
    pub tolerance: f64,
    /// `-cpu-initialization-period` (5 min): a new pod's CPU counts only once ready within it.
    pub cpu_initialization_period: Duration,
    /// `-initial-readiness-delay` (30 s): readiness changes after a pod starts within it are
    /// taken for its first.
    pub initial_readiness_delay: Duration,
}

impl Default for HpaConfig {
    fn default() -> Self {
        HpaConfig {
            sync_period: Duration::from_secs(15),
            downscale_stabilization: Duration::from_secs(300),
            tolerance: 0.1,
            cpu_initialization_period: Duration::from_secs(300),
            initial_readiness_delay: Duration::from_secs(30),
        }
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            root_ca: None,
            allocate_node_cidrs: true,
            cluster_cidr: "10.42.0.0/16".into(),
            node_cidr_mask_size: 24,
            node_monitor_grace_period: Duration::from_secs(40),
            node_monitor_period: Duration::from_secs(5),
            node_startup_grace_period: Duration::from_secs(60),
            node_eviction_rate: 0.1,
            secondary_node_eviction_rate: 0.01,
            unhealthy_zone_threshold: 0.55,
            large_cluster_size_threshold: 50,
            terminated_pod_gc_threshold: 12500,
            max_endpoints_per_slice: 100,
            cluster_signing_cert_file: None,
            cluster_signing_key_file: None,
            cluster_signing_duration: Duration::from_secs(8760 * 3600),
            hpa: HpaConfig::default(),
        }
    }
}
