//! `skiff bench proxy`: the Service dataplane at scale, no API server needed. In a private
//! network namespace per mode, feeds `services` Services with `endpoints` ready endpoints each
//! through the change tracker (the path the informers drive), times the first full sync of the
//! real rules, then moves one endpoint of one Service `changes` times and times each partial
//! sync. Prints one JSON line per mode (needs root, `ip`, `iptables-restore` and `nft`), then
//! one for the network policy controller ([`super::netpol`]): NetworkPolicies over pods
//! programmed, and one pod label change applied.

use std::net::Ipv4Addr;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context as _, Result, bail};
use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointPort, EndpointSlice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::json;
use skiff_proxy::dataplane::{Context, Dataplane};
use skiff_proxy::iptables::Iptables;
use skiff_proxy::metrics::Metrics;
use skiff_proxy::nftables::Nftables;
use skiff_proxy::proxier::Proxier;
use skiff_proxy::runner::{OwnedNetns, Runner};
use skiff_proxy::tracker::{ChangeTracker, SERVICE_NAME_LABEL};

use super::api::{histogram, micros, ms, round3};
use crate::commands::proxy::Mode;

const NAMESPACE: &str = "bench";
const NODE: &str = "bench-node";

/// Options of `skiff bench proxy`.
#[derive(Debug, Clone, clap::Args)]
pub struct ProxyBenchArgs {
    /// Services to program.
    #[arg(long, default_value_t = 1000)]
    pub services: u32,
    /// Ready endpoints per Service.
    #[arg(long, default_value_t = 10)]
    pub endpoints: u32,
    /// One-endpoint changes to time.
    #[arg(long, default_value_t = 20)]
    pub changes: u32,
    /// Only this mode (both by default).
    #[arg(long, value_enum)]
    pub mode: Option<Mode>,
    /// NetworkPolicies to program (0: no network policy figures).
    #[arg(long, default_value_t = 1000)]
    pub policies: u32,
    /// Pods the NetworkPolicies select and match.
    #[arg(long, default_value_t = 5000)]
    pub pods: u32,
}

/// The `n`th address after `base`.
fn nth(base: Ipv4Addr, n: u32) -> Ipv4Addr {
    Ipv4Addr::from(u32::from(base) + n)
}

fn service(i: u32) -> Service {
    Service {
        metadata: ObjectMeta {
            namespace: Some(NAMESPACE.into()),
            name: Some(format!("svc-{i:05}")),
            ..Default::default()
        },
        spec: Some(ServiceSpec {
            cluster_ip: Some(nth(Ipv4Addr::new(10, 43, 1, 0), i).to_string()),
            type_: Some("ClusterIP".into()),
            ports: Some(vec![ServicePort {
                name: Some("http".into()),
                protocol: Some("TCP".into()),
                port: 80,
                ..Default::default()
            }]),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn slice(i: u32, addresses: &[Ipv4Addr]) -> EndpointSlice {
    EndpointSlice {
        metadata: ObjectMeta {
            namespace: Some(NAMESPACE.into()),
            name: Some(format!("svc-{i:05}-a")),
            labels: Some([(SERVICE_NAME_LABEL.to_string(), format!("svc-{i:05}"))].into()),
            ..Default::default()
        },
        address_type: "IPv4".into(),
        ports: Some(vec![EndpointPort {
            name: Some("http".into()),
            protocol: Some("TCP".into()),
            port: Some(8080),
            ..Default::default()
        }]),
        endpoints: addresses
            .iter()
            .map(|ip| Endpoint {
                addresses: vec![ip.to_string()],
                node_name: Some(NODE.into()),
                ..Default::default()
            })
            .collect(),
    }
}

fn bench_mode(args: &ProxyBenchArgs, mode: Mode) -> Result<serde_json::Value> {
    let netns = OwnedNetns::create(&format!("skiff-benchproxy-{mode:?}").to_lowercase())
        .context("creating a network namespace (the benchmark needs root and iproute2)")?;
    let runner: Arc<dyn Runner> = Arc::new(netns.runner());
    let dataplane: Box<dyn Dataplane> = match mode {
        Mode::Iptables => Box::new(Iptables::new(runner.clone())),
        Mode::Nftables => Box::new(Nftables::new(runner.clone())),
    };
    let mut proxier = Proxier::new(
        dataplane,
        runner,
        Context::default(),
        Arc::new(Metrics::default()),
    );
    let mut tracker = ChangeTracker::new(NODE);
    let mut addresses: Vec<Vec<Ipv4Addr>> = (0..args.services)
        .map(|i| {
            (0..args.endpoints)
                .map(|j| nth(Ipv4Addr::new(10, 42, 0, 1), i * args.endpoints + j))
                .collect()
        })
        .collect();
    for (i, ips) in addresses.iter().enumerate() {
        tracker.service_updated(Arc::new(service(i as u32)));
        tracker.slice_updated(Arc::new(slice(i as u32, ips)));
    }
    let start = Instant::now();
    proxier.apply(tracker.take());
    proxier.sync().context("the initial full sync")?;
    let initial = start.elapsed();

    let mut latencies = histogram();
    for change in 0..args.changes {
        // a different Service each time; its first endpoint moves to a fresh address
        let i = (change * 37 + 11) % args.services;
        addresses[i as usize][0] = nth(Ipv4Addr::new(10, 44, 0, 1), change);
        tracker.slice_updated(Arc::new(slice(i, &addresses[i as usize])));
        let start = Instant::now();
        proxier.apply(tracker.take());
        proxier.sync().context("a one-endpoint sync")?;
        latencies.record(micros(start.elapsed()))?;
    }
    Ok(json!({
        "bench": "proxy",
        "mode": format!("{mode:?}").to_lowercase(),
        "services": args.services,
        "endpoints_per_service": args.endpoints,
        "initial_sync_ms": round3(initial.as_secs_f64() * 1000.0),
        "one_endpoint_change_ms_p50": ms(&latencies, 0.5),
        "p99": ms(&latencies, 0.99),
        "changes": args.changes,
        "build": if cfg!(debug_assertions) { "debug" } else { "release" },
    }))
}

pub async fn run(args: ProxyBenchArgs) -> Result<()> {
    if args.services == 0 || args.endpoints == 0 {
        bail!("--services and --endpoints must be at least 1");
    }
    let modes = match args.mode {
        Some(mode) => vec![mode],
        None => vec![Mode::Iptables, Mode::Nftables],
    };
    for mode in modes {
        let args = args.clone();
        let line = tokio::task::spawn_blocking(move || bench_mode(&args, mode)).await??;
        println!("{line}");
    }
    if args.policies > 0 {
        let (policies, pods, changes) = (args.policies, args.pods.max(1), args.changes);
        let line =
            tokio::task::spawn_blocking(move || super::netpol::bench(policies, pods, changes))
                .await??;
        println!("{line}");
    }
    Ok(())
}
