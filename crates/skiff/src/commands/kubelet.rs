//! `skiff kubelet`: the node agent on its own, an ordinary API client (seed 000): it registers
//! its Node, watches the pods bound to it and runs them through containerd's CRI (a managed
//! containerd unless `--container-runtime-endpoint` names one).

use std::net::IpAddr;
use std::path::PathBuf;

use anyhow::Context;
use clap::Args;
use skiff_kubelet::{Config, Kubelet};

use super::store::shutdown_signal;

#[derive(Debug, Args)]
pub struct KubeletArgs {
    /// Kubeconfig with the API server's address and the kubelet's credentials.
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: PathBuf,

    /// The Node this kubelet registers and whose pods it runs.
    #[arg(long, value_name = "NAME")]
    pub node_name: String,

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

    /// A directory of static pod manifests, run on this node and mirrored to the API server.
    #[arg(long, value_name = "DIR")]
    pub pod_manifest_path: Option<PathBuf>,

    /// How often the static pod directory is read again, in seconds.
    #[arg(long, value_name = "SECONDS", default_value_t = 20)]
    pub file_check_frequency: u64,
    /// The address the kubelet server (logs, exec, port-forward) listens on.
    #[arg(long, value_name = "IP", default_value = "0.0.0.0")]
    pub address: IpAddr,

    /// The kubelet server's port (0 picks a free one, reported in the Node's status).
    #[arg(long, value_name = "PORT", default_value_t = 10250)]
    pub port: u16,
}

pub async fn run(args: KubeletArgs) -> anyhow::Result<()> {
    if args.node_name.is_empty() {
        return Err(super::UsageError("--node-name must not be empty".into()).into());
    }
    let kube_config = super::kube_config(&args.kubeconfig).await?;
    // the cluster CA signs the API server's client certificate for the kubelet server
    let client_ca = kube_config.root_cert.clone().unwrap_or_default();
    let client = kube::Client::try_from(kube_config)?;
    std::fs::create_dir_all(&args.data_dir)
        .with_context(|| format!("creating {}", args.data_dir.display()))?;
    let config = Config {
        node_name: args.node_name,
        data_dir: args.data_dir,
        pod_cidr: args.pod_cidr,
        node_ip: args.node_ip,
        container_runtime_endpoint: args.container_runtime_endpoint,
        pod_manifest_path: args.pod_manifest_path,
        file_check_frequency: std::time::Duration::from_secs(args.file_check_frequency.max(1)),
        address: args.address,
        port: args.port,
        client_ca,
        ..Config::default()
    };
    let kubelet = Kubelet::start(client, config).await?;
    let r = &kubelet.ready;
    println!(
        "skiff kubelet ready: node {} registered ({}, pod CIDR {}); runtime {} at {}; serving https://{}",
        r.node, r.node_ip, r.pod_cidr, r.runtime_version, r.endpoint, r.server
    );
    kubelet.run(shutdown_signal()).await?;
    Ok(())
}
