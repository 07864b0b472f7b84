//! `skiff dns`: the cluster DNS on its own, an ordinary API client: it watches Services and
//! EndpointSlices, answers names under `--cluster-domain` as CoreDNS's kubernetes plugin does
//! and forwards the rest to the host's resolvers (or `--upstream`). It only serves: the
//! `kube-dns` Service with its fixed ClusterIP is created by whoever starts the cluster.

use skiff_apimachinery::version::user_agent;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use clap::Args;
use parking_lot::RwLock;
use skiff_dns::forward::{Forwarder, NetworkExchange, loops_back, resolv_conf_nameservers};
use skiff_dns::handler::Handler;
use skiff_dns::lookup::Zone;
use skiff_dns::metrics::Metrics;
use skiff_dns::records::ClusterRecords;
use skiff_dns::{informer, server};
use skiff_runtime::informer::Informers;

use super::UsageError;
use super::lifecycle::Lifecycle;

#[derive(Debug, Args)]
pub struct DnsArgs {
    /// Kubeconfig with the API server's address and the DNS server's credentials (it needs
    /// list and watch on Services and EndpointSlices).
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: PathBuf,

    /// Where to answer DNS over UDP and TCP (port 0 picks a free one, printed in the ready
    /// line).
    #[arg(long, value_name = "IP:PORT", default_value = "0.0.0.0:53")]
    pub listen: SocketAddr,

    /// The domain the cluster's names live under (the kubelet's `--cluster-domain`).
    #[arg(long, value_name = "DOMAIN", default_value = "cluster.local")]
    pub cluster_domain: String,

    /// A resolver to forward other names to, `IP` or `IP:PORT`, tried in order (repeatable);
    /// default: the nameservers of `--resolv-conf`.
    #[arg(long, value_name = "IP[:PORT]", value_parser = parse_upstream)]
    pub upstream: Vec<SocketAddr>,

    /// The resolv.conf whose nameservers are the upstreams when no `--upstream` is given.
    #[arg(long, value_name = "FILE", default_value = "/etc/resolv.conf")]
    pub resolv_conf: PathBuf,

    /// Where to serve `/metrics`, `/health` and `/ready` over plain HTTP (CoreDNS's
    /// prometheus port 9153; port 0 picks a free one, printed in the ready line).
    #[arg(long, value_name = "IP:PORT", default_value = "127.0.0.1:9153")]
    pub metrics_bind_address: SocketAddr,
}

fn parse_upstream(s: &str) -> Result<SocketAddr, String> {
    if let Ok(addr) = s.parse::<SocketAddr>() {
        return Ok(addr);
    }
    s.parse::<std::net::IpAddr>()
        .map(|ip| SocketAddr::new(ip, 53))
        .map_err(|_| format!("{s:?} is neither IP nor IP:PORT"))
}

pub async fn run(args: DnsArgs, lifecycle: Lifecycle) -> anyhow::Result<()> {
    let zone = Zone::new(&args.cluster_domain).map_err(|e| UsageError(e.to_string()))?;
    let upstreams = if args.upstream.is_empty() {
        let text = std::fs::read_to_string(&args.resolv_conf)
            .with_context(|| format!("reading {}", args.resolv_conf.display()))?;
        resolv_conf_nameservers(&text)
    } else {
        args.upstream.clone()
    };
    if let Some(upstream) = upstreams.iter().find(|u| loops_back(**u, args.listen)) {
        return Err(UsageError(format!(
            "upstream {upstream} is this server's own --listen {}: a forwarding loop; give --upstream",
            args.listen
        ))
        .into());
    }
    let upstream_list = upstreams
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ");
    let forwarder = Forwarder::new(upstreams, NetworkExchange::default())
        .map_err(|e| UsageError(e.to_string()))?;
    let client = skiff_runtime::http2::client(
        super::kube_config(&args.kubeconfig).await?,
        &user_agent("skiff-dns"),
    )?;

    let records = Arc::new(RwLock::new(ClusterRecords::default()));
    // held until this returns: dropping the factory ends the watches
    let informers = Informers::new(client);
    let synced = informer::subscribe(&informers, records.clone());
    tokio::select! {
        () = synced => {}
        () = lifecycle.stopped() => return Ok(()),
    }

    let metrics = Arc::new(Metrics::default());
    let origin = zone.origin().to_string();
    let handler = Handler::new(records.clone(), zone, forwarder, metrics.clone());
    let mut listening = server::listen(handler, args.listen).await?;
    let http = server::serve_http(args.metrics_bind_address, metrics).await?;
    lifecycle.ready(format!(
        "skiff dns ready: {origin} on udp+tcp {} ({} services); upstreams {upstream_list}; metrics http://{http}/metrics",
        listening.addr,
        records.read().service_count(),
    ));
    tokio::select! {
        r = listening.server.block_until_done() => r.context("the DNS server stopped"),
        () = lifecycle.stopped() => {
            listening.server.shutdown_gracefully().await.context("stopping the DNS server")
        }
    }
}
