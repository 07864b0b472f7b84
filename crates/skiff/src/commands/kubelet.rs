//! `skiff kubelet`: the node agent on its own, an ordinary API client (seed 000): it registers
//! its Node, watches the pods bound to it and runs them through containerd's CRI (a managed
//! containerd unless `--container-runtime-endpoint` names one). With `--hollow` it runs
//! `--count` simulated nodes instead, as kubemark's hollow nodes: the same kubelet code against
//! an in-memory runtime, no containerd.

use skiff_apimachinery::version::user_agent;
use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use skiff_kubelet::hollow::{self, HollowNodes};
use skiff_kubelet::hollow_runtime::Behaviour;
use skiff_kubelet::{Config, FlannelBackend, Kubelet};

use super::lifecycle::Lifecycle;

#[derive(Debug, Args)]
pub struct KubeletArgs {
    /// Kubeconfig with the API server's address and the kubelet's credentials.
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: PathBuf,

    /// The Node this kubelet registers and whose pods it runs.
    #[arg(long, value_name = "NAME", required_unless_present = "hollow")]
    pub node_name: Option<String>,

    /// Where the kubelet keeps its state: the managed containerd, container logs, images.
    #[arg(long, value_name = "DIR", default_value = "/var/lib/skiff")]
    pub data_dir: PathBuf,

    /// A CRI endpoint (`unix:///run/containerd/containerd.sock`) to use instead of starting
    /// a managed containerd.
    #[arg(long, value_name = "URL")]
    pub container_runtime_endpoint: Option<String>,

    /// The pod CIDR of this node's CNI bridge, unless the Node already has `spec.podCIDR`;
    /// without it the kubelet waits for the controller manager's node-ipam to assign one.
    #[arg(long, value_name = "CIDR")]
    pub pod_cidr: Option<String>,

    /// The node's InternalIP; detected from the default route when not given.
    #[arg(long, value_name = "IP")]
    pub node_ip: Option<IpAddr>,

    /// A directory of static pod manifests, run on this node and mirrored to the API server.
    #[arg(long, value_name = "DIR")]
    pub pod_manifest_path: Option<PathBuf>,

    /// How often the static pod directory is read again, as a Go duration (upstream's `20s`).
    #[arg(long, value_name = "DURATION", default_value = "20s", value_parser = go_duration)]
    pub file_check_frequency: Duration,

    /// The address the kubelet server (logs, exec, port-forward) listens on.
    #[arg(long, value_name = "IP", default_value = "0.0.0.0")]
    pub address: IpAddr,

    /// The kubelet server's port (0 picks a free one, reported in the Node's status).
    #[arg(long, value_name = "PORT", default_value_t = 10250)]
    pub port: u16,

    /// Cluster DNS servers for ClusterFirst pods (comma-separated); without them such pods
    /// use the host's resolv.conf, with a MissingClusterDNS warning.
    #[arg(long, value_name = "IP[,IP]", value_delimiter = ',')]
    pub cluster_dns: Vec<IpAddr>,

    /// The cluster's DNS domain: pods search `NS.svc.DOMAIN svc.DOMAIN DOMAIN`.
    #[arg(long, value_name = "DOMAIN", default_value = "cluster.local")]
    pub cluster_domain: String,

    /// How often volumes from ConfigMaps, Secrets, the downward API and projections are
    /// refreshed, as a Go duration (`1m0s`, `10s`; upstream's default).
    #[arg(long, value_name = "DURATION", default_value = "1m0s", value_parser = go_duration)]
    pub sync_frequency: Duration,

    /// The host's resolv.conf, for `Default` pods and the host part of the search path.
    #[arg(long, value_name = "FILE", default_value = "/etc/resolv.conf")]
    pub resolv_conf: PathBuf,

    /// How pods reach pods on other nodes, as k3s's flag: `host-gw` routes other nodes' pod
    /// CIDRs via their InternalIPs and masquerades traffic leaving the cluster CIDR; `none`
    /// leaves the network to someone else (the CNI bridge masquerades). Hollow nodes have none.
    #[arg(long, value_name = "BACKEND", value_enum, default_value = "host-gw")]
    pub flannel_backend: BackendArg,

    /// The cluster's pod range (default 10.42.0.0/16, k3s's): host-gw does not masquerade
    /// within it. Hollow node `i` gets the `i`-th /24 of it as its pod CIDR (unless its Node
    /// has one), its InternalIP the range's `.1`, its pods' IPs `.2` onwards (default
    /// 10.64.0.0/10, room for many hollow nodes).
    #[arg(long, value_name = "CIDR")]
    pub cluster_cidr: Option<String>,

    #[command(flatten)]
    pub hollow: HollowArgs,
}

/// `--flannel-backend`'s values (see [`FlannelBackend`]).
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum BackendArg {
    HostGw,
    None,
}

/// Hollow mode: simulated nodes for scale tests (kubemark's hollow nodes).
#[derive(Debug, Args)]
pub struct HollowArgs {
    /// Run `--count` hollow nodes in this process: real node registration, heartbeats, pod
    /// watches and pod workers over an in-memory runtime (no containerd, no containers).
    #[arg(long, conflicts_with_all = ["node_name", "container_runtime_endpoint"])]
    pub hollow: bool,

    /// How many hollow nodes.
    #[arg(long, value_name = "K", default_value_t = 1, requires = "hollow")]
    pub count: usize,

    /// Hollow node `i` is named `<prefix>-<i>`.
    #[arg(
        long,
        value_name = "P",
        default_value = "hollow-node",
        requires = "hollow"
    )]
    pub node_name_prefix: String,

    /// How long a hollow pod's sandbox takes to start, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 0, requires = "hollow")]
    pub hollow_startup_delay_ms: u64,

    /// The fraction (0 to 1) of hollow containers that exit with code 1 as soon as they start,
    /// on every attempt (picked by a hash of pod uid and container name).
    #[arg(long, value_name = "F", default_value_t = 0.0, requires = "hollow")]
    pub hollow_failure_rate: f64,

    /// How long a hollow container takes to exit after SIGTERM, in milliseconds; past the
    /// pod's grace period it is killed.
    #[arg(long, value_name = "MS", default_value_t = 0, requires = "hollow")]
    pub hollow_stop_delay_ms: u64,
}

/// jemalloc's configuration for the kubelet: one arena (its few threads rarely allocate at
/// once) and dirty pages returned within a second by a background thread. The kubelet's heap
/// stays at about a third of what jemalloc's defaults (8 arenas on 2 cores, 10 s decay) keep
/// resident; the API server and the store keep the defaults, which cost less CPU per request.
const KUBELET_MALLOC_CONF: &str =
    "narenas:1,background_thread:true,dirty_decay_ms:1000,muzzy_decay_ms:0";

/// The variable tikv-jemallocator's (prefixed) jemalloc reads its configuration from.
const MALLOC_CONF_VAR: &str = "_RJEM_MALLOC_CONF";

/// Re-executes this process with [`KUBELET_MALLOC_CONF`] (see [`use_malloc_conf`]).
pub fn use_small_heap() {
    use_malloc_conf(KUBELET_MALLOC_CONF);
}

/// Re-executes this process with jemalloc configured as `conf` unless a configuration is
/// already set (by an earlier re-exec or the user): jemalloc reads it before `main`, so the
/// running process cannot change it. Returns (and the command runs with the defaults) if exec
/// fails.
pub fn use_malloc_conf(conf: &str) {
    use std::os::unix::process::CommandExt;
    if std::env::var_os(MALLOC_CONF_VAR).is_some() {
        return;
    }
    let Ok(exe) = std::env::current_exe() else {
        return;
    };
    let err = std::process::Command::new(exe)
        .args(std::env::args_os().skip(1))
        .env(MALLOC_CONF_VAR, conf)
        .exec();
    eprintln!("skiff: warning: re-executing with a smaller heap configuration failed: {err}");
}

pub async fn run(args: KubeletArgs, lifecycle: Lifecycle) -> anyhow::Result<()> {
    let node_name = args.node_name.clone().unwrap_or_default();
    if node_name.is_empty() && !args.hollow.hollow {
        return Err(super::UsageError("--node-name must not be empty".into()).into());
    }
    let kube_config = super::kube_config(&args.kubeconfig).await?;
    // the cluster CA signs the API server's client certificate for the kubelet server
    let client_ca = kube_config.root_cert.clone().unwrap_or_default();
    let client = skiff_runtime::http2::client(kube_config, &user_agent("kubelet"))?;
    std::fs::create_dir_all(&args.data_dir)
        .with_context(|| format!("creating {}", args.data_dir.display()))?;
    if args.hollow.hollow {
        return run_hollow(client, args, lifecycle).await;
    }
    let config = Config {
        node_name,
        data_dir: args.data_dir,
        pod_cidr: args.pod_cidr,
        node_ip: args.node_ip,
        container_runtime_endpoint: args.container_runtime_endpoint,
        pod_manifest_path: args.pod_manifest_path,
        file_check_frequency: args.file_check_frequency.max(Duration::from_secs(1)),
        address: args.address,
        port: args.port,
        client_ca,
        cluster_dns: args.cluster_dns,
        cluster_domain: args.cluster_domain,
        resolv_conf: args.resolv_conf,
        flannel_backend: match args.flannel_backend {
            BackendArg::HostGw => FlannelBackend::HostGw,
            BackendArg::None => FlannelBackend::None,
        },
        cluster_cidr: args
            .cluster_cidr
            .unwrap_or_else(|| Config::default().cluster_cidr),
        sync_frequency: args.sync_frequency.max(Duration::from_secs(1)),
        ..Config::default()
    };
    let kubelet = Kubelet::start(client, config).await?;
    let r = &kubelet.ready;
    lifecycle.ready(format!(
        "skiff kubelet ready: node {} registered ({}, pod CIDR {}); runtime {} at {}; serving https://{}",
        r.node, r.node_ip, r.pod_cidr, r.runtime_version, r.endpoint, r.server
    ));
    kubelet.run(lifecycle.stopped()).await?;
    Ok(())
}

async fn run_hollow(
    client: kube::Client,
    args: KubeletArgs,
    lifecycle: Lifecycle,
) -> anyhow::Result<()> {
    let h = args.hollow;
    if !(0.0..=1.0).contains(&h.hollow_failure_rate) {
        return Err(
            super::UsageError("--hollow-failure-rate must be between 0 and 1".into()).into(),
        );
    }
    let config = hollow::Config {
        count: h.count,
        prefix: h.node_name_prefix,
        cluster_cidr: args
            .cluster_cidr
            .unwrap_or_else(|| hollow::Config::default().cluster_cidr),
        behaviour: Behaviour {
            startup_delay: Duration::from_millis(h.hollow_startup_delay_ms),
            failure_rate: h.hollow_failure_rate,
            stop_delay: Duration::from_millis(h.hollow_stop_delay_ms),
        },
        log_dir: args.data_dir.join("hollow/logs/pods"),
        pods_dir: args.data_dir.join("hollow/pods"),
        storage_dir: args.data_dir.join("hollow/storage"),
    };
    let nodes = HollowNodes::start(client, config).await?;
    let names = nodes.names();
    lifecycle.ready(format!(
        "skiff kubelet ready: {} hollow nodes registered ({} … {})",
        names.len(),
        names.first().map_or("", String::as_str),
        names.last().map_or("", String::as_str),
    ));
    nodes.run(lifecycle.stopped()).await;
    Ok(())
}

/// A duration as Go's `time.ParseDuration` reads it (`1m0s`, `90s`, `1h30m`); at least a
/// millisecond.
pub(super) fn go_duration(text: &str) -> Result<Duration, String> {
    let nanos = skiff_apimachinery::duration::parse(text)?;
    u64::try_from(nanos)
        .ok()
        .map(Duration::from_nanos)
        .filter(|d| *d >= Duration::from_millis(1))
        .ok_or_else(|| format!("invalid duration {text:?}: it must be at least 1ms"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations_add_up_their_units() {
        assert_eq!(go_duration("1m0s"), Ok(Duration::from_secs(60)));
        assert_eq!(go_duration("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(go_duration("500ms"), Ok(Duration::from_millis(500)));
        assert!(go_duration("10").is_err());
        assert!(go_duration("0s").is_err());
        assert!(go_duration("5d").is_err());
    }
}
