//! `skiff kubelet`: the node agent on its own, an ordinary API client (seed 000): it registers
//! its Node, watches the pods bound to it and runs them through containerd's CRI (a managed
//! containerd unless `--container-runtime-endpoint` names one). With `--hollow` it runs
//! `--count` simulated nodes instead, as kubemark's hollow nodes: the same kubelet code against
//! an in-memory runtime, no containerd.

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use skiff_kubelet::hollow::{self, HollowNodes};
use skiff_kubelet::hollow_runtime::Behaviour;
use skiff_kubelet::{Config, Kubelet};

use super::store::shutdown_signal;

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

    /// The pod CIDR of this node's CNI bridge, unless the Node already has `spec.podCIDR`.
    #[arg(long, value_name = "CIDR", default_value = "10.42.0.0/24")]
    pub pod_cidr: String,

    /// The node's InternalIP; detected from the default route when not given.
    #[arg(long, value_name = "IP")]
    pub node_ip: Option<IpAddr>,

    #[command(flatten)]
    pub hollow: HollowArgs,
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

    /// Hollow node `i` gets the `i`-th /24 of this range as its pod CIDR (unless its Node
    /// has one); its InternalIP is the range's `.1`, its pods' IPs `.2` onwards.
    #[arg(
        long,
        value_name = "CIDR",
        default_value = "10.64.0.0/10",
        requires = "hollow"
    )]
    pub cluster_cidr: String,

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

pub async fn run(args: KubeletArgs) -> anyhow::Result<()> {
    let node_name = args.node_name.clone().unwrap_or_default();
    if node_name.is_empty() && !args.hollow.hollow {
        return Err(super::UsageError("--node-name must not be empty".into()).into());
    }
    let client = kube::Client::try_from(super::kube_config(&args.kubeconfig).await?)?;
    std::fs::create_dir_all(&args.data_dir)
        .with_context(|| format!("creating {}", args.data_dir.display()))?;
    if args.hollow.hollow {
        return run_hollow(client, args).await;
    }
    let config = Config {
        node_name,
        data_dir: args.data_dir,
        pod_cidr: args.pod_cidr,
        node_ip: args.node_ip,
        container_runtime_endpoint: args.container_runtime_endpoint,
        ..Config::default()
    };
    let kubelet = Kubelet::start(client, config).await?;
    let r = &kubelet.ready;
    println!(
        "skiff kubelet ready: node {} registered ({}, pod CIDR {}); runtime {} at {}",
        r.node, r.node_ip, r.pod_cidr, r.runtime_version, r.endpoint
    );
    kubelet.run(shutdown_signal()).await?;
    Ok(())
}

async fn run_hollow(client: kube::Client, args: KubeletArgs) -> anyhow::Result<()> {
    let h = args.hollow;
    if !(0.0..=1.0).contains(&h.hollow_failure_rate) {
        return Err(
            super::UsageError("--hollow-failure-rate must be between 0 and 1".into()).into(),
        );
    }
    let config = hollow::Config {
        count: h.count,
        prefix: h.node_name_prefix,
        cluster_cidr: h.cluster_cidr,
        behaviour: Behaviour {
            startup_delay: Duration::from_millis(h.hollow_startup_delay_ms),
            failure_rate: h.hollow_failure_rate,
            stop_delay: Duration::from_millis(h.hollow_stop_delay_ms),
        },
        log_dir: args.data_dir.join("hollow/logs/pods"),
    };
    let nodes = HollowNodes::start(client, config).await?;
    let names = nodes.names();
    println!(
        "skiff kubelet ready: {} hollow nodes registered ({} … {})",
        names.len(),
        names.first().map_or("", String::as_str),
        names.last().map_or("", String::as_str),
    );
    nodes.run(shutdown_signal()).await;
    Ok(())
}
