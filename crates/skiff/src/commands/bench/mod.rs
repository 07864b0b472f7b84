//! `skiff bench <what>`: benchmarks that print one JSON object per result, each measured against
//! its peer in the same run where there is one.

pub mod api;
pub mod controllers;
pub mod dns;
pub mod eviction;
pub mod ingress;
pub mod machine;
pub mod metrics;
pub mod netpol;
pub mod pods;
pub mod proxy;
pub mod scale;
pub mod scheduler;
pub mod startup;
pub mod store;
pub mod volumes;

use anyhow::Result;

/// What to benchmark.
#[derive(Debug, clap::Subcommand)]
pub enum BenchCommand {
    /// The API server over HTTPS (a `skiff apiserver` child): pod creates, LIST, memory, watch
    /// delivery.
    Api(api::ApiBenchArgs),
    /// The workload controllers end to end (child apiserver, hollow nodes, scheduler and
    /// controller manager): a Deployment's pods created and bound, then a rolling update.
    Controllers(controllers::ControllersBenchArgs),
    /// The cluster DNS on one core: queries/s and latency percentiles with 1000 Services.
    Dns(dns::DnsBenchArgs),
    /// The ingress controller against nginx as the same reverse proxy to one pod (needs root
    /// and nginx): requests/s and p99 at 64 connections, and the time for a new rule to serve.
    Ingress(ingress::IngressBenchArgs),
    /// Resource metrics: metrics-server's CPU and RSS scraping 1,000 hollow nodes x 30 pods,
    /// the HPA's reaction from a usage change to a scale write, and the kubelet's CPU per
    /// `/stats/summary` at 100 pods (needs root).
    Metrics(metrics::MetricsBenchArgs),
    /// The kubelet end to end: pod startup against the CRI floor, the kubelet's memory, the
    /// time from a hard memory threshold crossed to the first eviction, and hollow nodes'
    /// heartbeat writes and memory (needs root).
    Pods(pods::PodBenchArgs),
    /// The Service dataplane (needs root): 1,000 Services x 10 endpoints programmed in a private
    /// netns in iptables and nftables mode, then one-endpoint changes; 1,000 NetworkPolicies
    /// over 5,000 pods programmed, then one-pod-label changes.
    Proxy(proxy::ProxyBenchArgs),
    /// Upstream's limits on hollow nodes: 5,000 nodes and 150,000 pods from Deployments created,
    /// scheduled and Running, then a rolling update of 10,000 replicas; the API SLOs, the API
    /// server's RSS and CPU, the scheduler's throughput, controller lag, the store's size and
    /// compaction.
    Scale(scale::ScaleBenchArgs),
    /// The scheduler end to end (scheduler_perf's SchedulingBasic): Node objects, pods created
    /// through the API server, bindings observed through a watch.
    Scheduler(scheduler::SchedulerBenchArgs),
    /// `skiff server` as users start it: seconds to ready, idle RSS, RSS with 1000 pods on
    /// hollow nodes (needs root).
    Startup(startup::StartupBenchArgs),
    /// The store: embedded in-process, embedded over gRPC, and a real etcd, all with fsync.
    Store(store::StoreBenchArgs),
    /// Persistent storage: a StatefulSet with a claim per replica on real containerd against
    /// one without (needs root), and claims bound through WaitForFirstConsumer on hollow nodes
    /// with scheduler pods/s against pods without volumes.
    Volumes(volumes::VolumesBenchArgs),
}

pub async fn run(cmd: BenchCommand) -> Result<()> {
    match cmd {
        BenchCommand::Api(args) => api::run(args).await,
        BenchCommand::Controllers(args) => controllers::run(args).await,
        BenchCommand::Dns(args) => dns::run(args).await,
        BenchCommand::Ingress(args) => ingress::run(args).await,
        BenchCommand::Metrics(args) => metrics::run(args).await,
        BenchCommand::Pods(args) => pods::run(args).await,
        BenchCommand::Proxy(args) => proxy::run(args).await,
        BenchCommand::Scale(args) => scale::run(args).await,
        BenchCommand::Scheduler(args) => scheduler::run(args).await,
        BenchCommand::Startup(args) => startup::run(args).await,
        BenchCommand::Store(args) => store::run(args).await,
        BenchCommand::Volumes(args) => volumes::run(args).await,
    }
}
