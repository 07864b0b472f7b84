//! The command line: one module per subcommand.
//!
//! # Layout
//! - [`agent`]: `skiff agent`, joining this machine to a cluster as a node.
//! - [`apiserver`]: `skiff apiserver`, the Kubernetes API server.
//! - [`controller_manager`]: `skiff controller-manager`, the reconcile loops.
//! - [`dns`]: `skiff dns`, the cluster DNS.
//! - [`ingress`]: `skiff ingress`, the node's ingress controller (HTTP and HTTPS ports).
//! - [`metrics_server`]: `skiff metrics-server`, the resource metrics API (metrics-server).
//! - [`kubelet`]: `skiff kubelet`, the node agent running pods through containerd's CRI.
//! - [`killall`]: `skiff killall` and `skiff uninstall`, tearing a node's pods down on this
//!   host (and removing its data dir).
//! - [`proxy`]: `skiff proxy`, the node's Service dataplane (iptables or nftables).
//! - [`network_policy`]: `skiff network-policy`, the node's NetworkPolicy enforcement
//!   (nftables).
//! - [`image`]: `skiff image import`, loading image archives into the node's containerd.
//! - [`scheduler`]: `skiff scheduler`, binding pods to nodes through the API server.
//! - [`server`]: `skiff server`, every component above in one process.
//! - [`lifecycle`]: how a component stops and announces itself, alone or inside the server.
//! - [`metrics`]: the `/metrics` and `/healthz` endpoint of the scheduler, the controller
//!   manager and the proxy.
//! - [`token`]: `skiff token create`, join tokens, and the join policy `skiff server` sets up.
//! - [`store`]: `skiff store serve`, the embedded store behind the etcd v3 gRPC facade.
//! - [`bench`]: `skiff bench <what>`, benchmarks printing one JSON object per result.
//! - [`fuzz`]: `skiff fuzz http`, hostile input against an API server, checked for violations.
//! - [`chaos`]: `skiff chaos`, a cluster's components killed under a workload, checked against
//!   invariants.

pub mod agent;
pub mod apiserver;
pub mod bench;
pub mod chaos;
pub mod controller_manager;
pub mod dns;
pub mod fuzz;
pub mod image;
pub mod ingress;
pub mod killall;
pub mod kubelet;
pub mod lifecycle;
pub mod metrics;
pub mod metrics_server;
pub mod network_policy;
pub mod node_config;
pub mod proxy;
pub mod scheduler;
pub mod server;
pub mod store;
pub mod token;
pub mod trace;

use clap::{Parser, Subcommand};
use lifecycle::Lifecycle;

/// Skiff: a Kubernetes-compatible container orchestrator in one binary.
#[derive(Debug, Parser)]
#[command(name = "skiff", version, propagate_version = true)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// The whole cluster on this machine in one process (k3s's `server`): store, API server,
    /// scheduler, controllers and, unless --disable-agent, a kubelet, the proxy and DNS.
    Server(Box<server::ServerArgs>),
    /// The Kubernetes API server on its own (boxed, as the kubelet's: many flags).
    Apiserver(Box<apiserver::ApiServerArgs>),
    /// The controllers on their own.
    ControllerManager(controller_manager::ControllerManagerArgs),
    /// The cluster DNS on its own.
    Dns(dns::DnsArgs),
    /// The scheduler on its own.
    Scheduler(scheduler::SchedulerArgs),
    /// The node agent on its own (boxed: its flags outweigh every other command's).
    Kubelet(Box<kubelet::KubeletArgs>),
    /// The Service dataplane of a node on its own (kube-proxy).
    Proxy(proxy::ProxyArgs),
    /// The ingress controller of a node on its own (Ingresses on its HTTP and HTTPS ports).
    Ingress(ingress::IngressArgs),
    /// The resource metrics API on its own (metrics-server: `kubectl top`, the HPA).
    MetricsServer(metrics_server::MetricsServerArgs),
    /// The NetworkPolicy enforcement of a node on its own (kube-router's in k3s).
    NetworkPolicy(network_policy::NetworkPolicyArgs),
    /// Container images on this node.
    #[command(subcommand)]
    Image(image::ImageCommand),
    /// The key-value store on its own.
    #[command(subcommand)]
    Store(store::StoreCommand),
    /// Join this machine to a cluster as a node (kubelet and proxy, TLS bootstrap by token).
    Agent(agent::AgentArgs),
    /// Join tokens.
    #[command(subcommand)]
    Token(token::TokenCommand),
    /// Benchmarks, each measured against its peer in the same run.
    #[command(subcommand)]
    Bench(bench::BenchCommand),
    /// Components of a cluster started for the run killed at random under a workload, checked
    /// against invariants (acknowledged writes, watch events, convergence, the store's files).
    Chaos(chaos::ChaosArgs),
    /// Hostile input against a server started for the run, checked for violations.
    #[command(subcommand)]
    Fuzz(fuzz::FuzzCommand),
    /// What the API server recorded of an object's lifecycle across components.
    Trace(trace::TraceCommand),
    /// Stop every pod of the node on --data-dir, remove its network state and mounts
    /// (k3s-killall.sh).
    ///
    /// Stops the Skiff processes and the containerd of the data dir, kills the shims serving
    /// that containerd and the containers under them, removes their network namespaces,
    /// veths, the iptables rules CNI made for them and their pod IP leases, and unmounts every
    /// mount under the data dir. Nothing of other data dirs is touched: the CNI bridge is
    /// removed once no interface is attached to it, and the host's Service, network policy and
    /// pod network rules (KUBE-*, SKIFF-* chains, the `ip skiff` and `inet skiff-netpol`
    /// nftables tables, the VXLAN device `flannel.1`, the pod network's routes) once no other
    /// Skiff node process runs in this network namespace. Prints what it did; a second run
    /// finds nothing left.
    Killall(killall::KillallArgs),
    /// `skiff killall`, then remove the data dir (k3s-uninstall.sh).
    ///
    /// The data dir is removed only if nothing is mounted under it any more.
    Uninstall(killall::KillallArgs),
}

/// A command line that parsed but makes no sense (exit code 2, as clap's own usage errors).
#[derive(Debug)]
pub struct UsageError(pub String);

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

/// The client configuration a component's `--kubeconfig` file describes (its current context).
pub async fn kube_config(path: &std::path::Path) -> anyhow::Result<kube::Config> {
    use anyhow::Context;
    let kubeconfig = kube::config::Kubeconfig::read_from(path)
        .with_context(|| format!("reading {}", path.display()))?;
    kube::Config::from_custom_kubeconfig(kubeconfig, &kube::config::KubeConfigOptions::default())
        .await
        .context("loading the kubeconfig")
}

/// This process's identity among its replicas (a Lease's `holderIdentity`): host name and pid.
pub fn instance_name() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname");
    format!(
        "{}_{}",
        host.as_deref().map_or("skiff", str::trim),
        std::process::id()
    )
}

/// Run the parsed command to completion.
pub async fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Apiserver(args) => apiserver::run(*args, Lifecycle::standalone()).await,
        Command::ControllerManager(args) => {
            controller_manager::run(args, Lifecycle::standalone()).await
        }
        Command::Dns(args) => dns::run(args, Lifecycle::standalone()).await,
        Command::Scheduler(args) => scheduler::run(args, Lifecycle::standalone()).await,
        Command::Kubelet(args) => kubelet::run(*args, Lifecycle::standalone()).await,
        Command::Proxy(args) => proxy::run(args, Lifecycle::standalone()).await,
        Command::Ingress(args) => ingress::run(args, Lifecycle::standalone()).await,
        Command::NetworkPolicy(args) => network_policy::run(args, Lifecycle::standalone()).await,
        Command::MetricsServer(args) => metrics_server::run(args, Lifecycle::standalone()).await,
        Command::Server(args) => server::run(*args).await,
        Command::Image(cmd) => image::run(cmd).await,
        Command::Store(cmd) => store::run(cmd).await,
        Command::Agent(args) => agent::run(args).await,
        Command::Token(cmd) => token::run(cmd).await,
        Command::Bench(cmd) => bench::run(cmd).await,
        Command::Fuzz(cmd) => fuzz::run(cmd).await,
        Command::Chaos(args) => chaos::run(args).await,
        Command::Trace(cmd) => trace::run(cmd).await,
        Command::Killall(args) => killall::killall(args).await,
        Command::Uninstall(args) => killall::uninstall(args).await,
    }
}
