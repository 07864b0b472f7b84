//! `skiff proxy`: the kube-proxy of a node, an ordinary API client (seed 001): it watches
//! Services, EndpointSlices and its Node through the API server and programs this host's
//! iptables or nftables.

use skiff_apimachinery::version::user_agent;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::{Args, ValueEnum};
use parking_lot::Mutex;
use skiff_proxy::dataplane::{Context, Dataplane};
use skiff_proxy::healthcheck::{ProxyHealth, ServiceHealth};
use skiff_proxy::iptables::Iptables;
use skiff_proxy::metrics::Metrics;
use skiff_proxy::nftables::Nftables;
use skiff_proxy::proxier::{self, Proxier};
use skiff_proxy::runner::{HostRunner, Runner};
use skiff_proxy::tracker::ChangeTracker;
use skiff_runtime::informer::Informers;
use tokio::sync::Notify;

use super::kubelet::go_duration;
use super::lifecycle::Lifecycle;

/// Which dataplane programs the Services (upstream's `--proxy-mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Mode {
    Iptables,
    Nftables,
}

#[derive(Debug, Args)]
pub struct ProxyArgs {
    /// Kubeconfig with the API server's address and the proxy's credentials
    /// (user `system:kube-proxy`, bound to `system:node-proxier`).
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: PathBuf,

    /// This node's name: its endpoints are local, its addresses serve NodePorts.
    #[arg(long, value_name = "NAME")]
    pub node_name: String,

    /// The dataplane (upstream's default is iptables).
    #[arg(long, value_enum, default_value = "iptables")]
    pub mode: Mode,

    /// The pod network: traffic to a ClusterIP from outside it is masqueraded.
    #[arg(long, value_name = "CIDR", default_value = "10.42.0.0/16", value_parser = parse_cidr)]
    pub cluster_cidr: String,

    /// Where to serve `/metrics` and `/healthz` over plain HTTP (port 0 picks a free one,
    /// printed in the ready line); upstream's default port is 10249.
    #[arg(long, value_name = "IP:PORT", default_value = "127.0.0.1:10249")]
    pub metrics_bind_address: SocketAddr,

    /// Where to serve the proxy's `/healthz` and `/livez` over plain HTTP (port 0 picks a free
    /// one, printed in the ready line). An address that cannot be bound is logged and tried
    /// again every 5 s, as upstream's.
    #[arg(long, value_name = "IP:PORT", default_value = "0.0.0.0:10256")]
    pub healthz_bind_address: SocketAddr,

    /// The least time between two syncs of the rules; changes in between are batched
    /// (upstream's `--iptables-min-sync-period`/`--nftables-min-sync-period`).
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = go_duration)]
    pub min_sync_period: Duration,

    /// Program the rules inside this network namespace (`ip netns exec NAME`) instead of the
    /// host's own.
    #[arg(long, value_name = "NAME")]
    pub netns: Option<String>,
}

/// `a.b.c.d/n`, normalised.
fn parse_cidr(text: &str) -> Result<String, String> {
    let (ip, bits) = text
        .split_once('/')
        .ok_or_else(|| format!("{text}: want an IPv4 CIDR like 10.42.0.0/16"))?;
    let ip: Ipv4Addr = ip.parse().map_err(|e| format!("{text}: {e}"))?;
    let bits: u8 = bits
        .parse()
        .ok()
        .filter(|b| *b <= 32)
        .ok_or_else(|| format!("{text}: the prefix length must be 0 to 32"))?;
    Ok(format!("{ip}/{bits}"))
}

pub async fn run(args: ProxyArgs, lifecycle: Lifecycle) -> anyhow::Result<()> {
    let client = skiff_runtime::http2::client(
        super::kube_config(&args.kubeconfig).await?,
        &user_agent("skiff-proxy"),
    )?;
    let runner: Arc<dyn Runner> = Arc::new(HostRunner::new(args.netns.clone()));
    let dataplane: Box<dyn Dataplane> = match args.mode {
        Mode::Iptables => Box::new(Iptables::new(runner.clone())),
        Mode::Nftables => Box::new(Nftables::new(runner.clone())),
    };
    let metrics = Arc::new(Metrics::default());
    let context = Context {
        cluster_cidr: args.cluster_cidr.clone(),
        node_ips: Vec::new(),
    };
    let proxy_health = Arc::new(ProxyHealth::default());
    let health = Arc::new(ServiceHealth::new(
        tokio::runtime::Handle::current(),
        proxy_health.clone(),
    ));
    let proxier = Proxier::new(dataplane, runner, context, metrics.clone()).with_health(health);

    let tracker = Arc::new(Mutex::new(ChangeTracker::new(&args.node_name)));
    let notify = Arc::new(Notify::new());
    // held until this returns: dropping the factory ends the watches
    let informers = Informers::new(client);
    let synced = skiff_proxy::informer::subscribe(
        &informers,
        &args.node_name,
        tracker.clone(),
        notify.clone(),
    );
    tokio::select! {
        () = synced => {}
        () = lifecycle.stopped() => return Ok(()),
    }

    let metrics_addr = super::metrics::serve(args.metrics_bind_address, &lifecycle, move || {
        metrics.encode()
    })
    .await?;
    let stopped = lifecycle.clone();
    let healthz = proxy_health
        .serve(
            args.healthz_bind_address,
            async move { stopped.stopped().await },
        )
        .await
        .map_or_else(
            || "not bound yet".to_string(),
            |a| format!("http://{a}/healthz"),
        );

    let mode = args.mode;
    let node = args.node_name.clone();
    let announce = lifecycle.clone();
    let ready = move || {
        announce.ready(format!(
            "skiff proxy ready: node {node}, {mode:?} mode; metrics http://{metrics_addr}/metrics; healthz {healthz}"
        ));
    };
    let sync_loop = proxier::run(proxier, tracker, notify, args.min_sync_period, ready);
    tokio::select! {
        () = sync_loop => anyhow::bail!("the sync loop stopped"),
        () = lifecycle.stopped() => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::parse_cidr;

    #[test]
    fn cluster_cidrs_must_be_ipv4_with_a_prefix() {
        assert_eq!(parse_cidr("10.42.0.0/16").unwrap(), "10.42.0.0/16");
        assert!(parse_cidr("10.42.0.0").is_err());
        assert!(parse_cidr("10.42.0.0/33").is_err());
        assert!(parse_cidr("fd00::/64").is_err());
    }
}
