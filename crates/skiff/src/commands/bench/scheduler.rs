//! `skiff bench scheduler`: upstream scheduler_perf's SchedulingBasic shape end to end (and
//! node-affinity, topology-spread and pod-anti-affinity variants, `--workload`). Starts
//! `skiff apiserver` as a child, creates `nodes` Node objects (no kubelets) through it, runs
//! the scheduler in this process against it over HTTPS (its own watches, bindings and events,
//! as `skiff scheduler` does), creates `pods` pods from 32 clients, and watches them: a pod
//! counts as scheduled when the watch shows it bound. Prints one JSON line: pods/s from the
//! first create to the last binding seen, and the create-to-bound latency percentiles.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::runtime::watcher::{self, Event};
use parking_lot::Mutex;
use serde_json::json;
use skiff_runtime::informer::Informers;
use skiff_scheduler::api::{ClusterApi, KubeApi};
use skiff_scheduler::config::Configuration;
use skiff_scheduler::metrics::Outcome;
use skiff_scheduler::plugins::Handle;
use skiff_scheduler::volumes::Volumes;
use skiff_scheduler::{Scheduler, informer};

use super::api::{
    CpuMeter, Emitter, ServerChild, ensure_open_files, histogram, max_ms, merge, micros, ms,
    round3, send_ok,
};
use http::Method;

/// Options of `skiff bench scheduler`.
#[derive(Debug, Clone, clap::Args)]
pub struct SchedulerBenchArgs {
    /// Node objects to create.
    #[arg(long, default_value_t = 5000)]
    pub nodes: usize,
    /// Pods to schedule.
    #[arg(long, default_value_t = 10_000)]
    pub pods: usize,
    /// Concurrent clients creating nodes and pods.
    #[arg(long, default_value_t = 32)]
    pub clients: usize,
    /// What the pods ask for (scheduler_perf's workloads): `basic` (requests only),
    /// `node-affinity` (required affinity to half the zones), `topology-spread` (maxSkew 1
    /// over zones, DoNotSchedule), `pod-anti-affinity` (preferred anti-affinity by hostname to
    /// pods with the same label).
    #[arg(long, value_enum, default_value = "basic")]
    pub workload: Workload,
    /// The scheduler configuration's `parallelism` (nodes filtered at once; threads are
    /// capped at the cores). Unset: upstream's default, 16.
    #[arg(long)]
    pub parallelism: Option<u32>,
}

/// The pod shapes `--workload` picks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Workload {
    Basic,
    NodeAffinity,
    TopologySpread,
    PodAntiAffinity,
}

impl Workload {
    fn name(self) -> &'static str {
        match self {
            Workload::Basic => "SchedulingBasic",
            Workload::NodeAffinity => "SchedulingNodeAffinity",
            Workload::TopologySpread => "TopologySpreading",
            Workload::PodAntiAffinity => "SchedulingPreferredPodAntiAffinity",
        }
    }

    /// What the workload adds to the pod spec.
    fn spec(self) -> serde_json::Value {
        match self {
            Workload::Basic => json!({}),
            Workload::NodeAffinity => json!({"affinity": {"nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{
                    "matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "In",
                        "values": ["zone-0", "zone-1", "zone-2", "zone-3", "zone-4"]}]}]}}}}),
            Workload::TopologySpread => json!({"topologySpreadConstraints": [{
                "maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
                "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": {"matchLabels": {"app": "bench"}}}]}),
            Workload::PodAntiAffinity => json!({"affinity": {"podAntiAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 100,
                    "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname",
                        "labelSelector": {"matchLabels": {"app": "bench"}}}}]}}}),
        }
    }
}

const NAMESPACE: &str = "sched-bench";

/// A node as scheduler_perf's `node-default.yaml`: 4 CPUs, 32 GiB, 110 pods, in one of ten
/// zones.
fn node_json(i: usize) -> Vec<u8> {
    let name = format!("node-{i:05}");
    serde_json::to_vec(&json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {
            "kubernetes.io/hostname": name,
            "topology.kubernetes.io/zone": format!("zone-{}", i % 10),
        }},
        "status": {
            "capacity": {"cpu": "4", "memory": "32Gi", "pods": "110"},
            "allocatable": {"cpu": "4", "memory": "32Gi", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }))
    .expect("json")
}

/// A pod as scheduler_perf's `pod-default.yaml` (one container requesting 100m CPU and
/// 500 MiB), with what the workload adds.
fn pod_json(i: usize, workload: Workload) -> Vec<u8> {
    let mut pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": format!("pod-{i:05}"), "labels": {"app": "bench"}},
        "spec": {"containers": [{"name": "pause", "image": "registry.k8s.io/pause:3.10",
                                 "resources": {"requests": {"cpu": "100m", "memory": "500Mi"}}}]},
    });
    if let (Some(spec), serde_json::Value::Object(extra)) =
        (pod["spec"].as_object_mut(), workload.spec())
    {
        spec.extend(extra);
    }
    serde_json::to_vec(&pod).expect("json")
}

/// Sends `bodies` to `path` from `clients` concurrent tasks; returns each body's send time by
/// index.
pub(super) async fn create_all(
    client: &kube::Client,
    path: &str,
    bodies: Vec<Vec<u8>>,
    clients: usize,
) -> Result<Vec<Instant>> {
    let mut sent = vec![Instant::now(); bodies.len()];
    let mut results = futures::stream::iter(bodies.into_iter().enumerate())
        .map(|(i, body)| async move {
            let t = Instant::now();
            send_ok(client, Method::POST, path, "application/json", body.into()).await?;
            anyhow::Ok((i, t))
        })
        .buffer_unordered(clients.max(1));
    while let Some(r) = results.next().await {
        let (i, t) = r?;
        sent[i] = t;
    }
    Ok(sent)
}

pub async fn run(args: SchedulerBenchArgs) -> Result<()> {
    ensure_open_files(args.clients + 256)?;
    let tmp = tempfile::tempdir()?;
    let mut server = ServerChild::start(tmp.path(), None).await?;
    let result = bench(&args, &server).await;
    server.stop().await;
    result
}

async fn bench(args: &SchedulerBenchArgs, server: &ServerChild) -> Result<()> {
    let out = Emitter {
        backend: "embedded".into(),
        cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
    };
    let cpu = CpuMeter {
        processes: vec![
            ("server", server.pid.to_string()),
            ("client", "self".into()),
        ],
    };
    let config = server.config().await?;
    let client = kube::Client::try_from(config)?;
    send_ok(
        &client,
        Method::POST,
        "/api/v1/namespaces",
        "application/json",
        serde_json::to_vec(&json!({"apiVersion": "v1", "kind": "Namespace",
                                   "metadata": {"name": NAMESPACE}}))?
        .into(),
    )
    .await?;
    let t = Instant::now();
    create_all(
        &client,
        "/api/v1/nodes",
        (0..args.nodes).map(node_json).collect(),
        args.clients,
    )
    .await
    .context("creating nodes")?;
    let nodes_s = t.elapsed().as_secs_f64();

    // the scheduler, as `skiff scheduler` runs it
    let api: Arc<dyn ClusterApi> = Arc::new(KubeApi::new(client.clone(), "bench".into()));
    let factory = Informers::new(client.clone());
    let handle = Handle {
        api: api.clone(),
        volumes: Volumes::from_informers(&factory),
    };
    let scheduler = Scheduler::new(
        Configuration {
            parallelism: args.parallelism,
            ..Default::default()
        }
        .frameworks_with(&handle)?,
        api,
    );
    drop(handle);
    let (synced_tx, mut synced) = tokio::sync::watch::channel(false);
    // the task holds the factory's only clone: aborting it stops the watches
    let informers = tokio::spawn(informer::run(&factory, scheduler.clone(), synced_tx));
    drop(factory);
    synced.wait_for(|s| *s).await.context("scheduler watches")?;
    let loop_task = {
        let s = scheduler.clone();
        tokio::spawn(async move { s.run().await })
    };

    // bindings as a watch sees them
    let bound: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
    let (all_bound_tx, mut all_bound) = tokio::sync::watch::channel(0usize);
    let watch_task = {
        let bound = bound.clone();
        let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
        tokio::spawn(async move {
            let stream = watcher::watcher(pods, watcher::Config::default());
            futures::pin_mut!(stream);
            while let Some(Ok(e)) = stream.next().await {
                let (Event::Apply(p) | Event::InitApply(p)) = e else {
                    continue;
                };
                let on_node = p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some();
                if on_node {
                    let name = p.metadata.name.clone().unwrap_or_default();
                    let mut b = bound.lock();
                    b.entry(name).or_insert_with(Instant::now);
                    let _ = all_bound_tx.send(b.len());
                }
            }
        })
    };

    let before = cpu.snapshot();
    let start = Instant::now();
    let path = format!("/api/v1/namespaces/{NAMESPACE}/pods");
    let sent = create_all(
        &client,
        &path,
        (0..args.pods).map(|i| pod_json(i, args.workload)).collect(),
        args.clients,
    )
    .await
    .context("creating pods")?;
    let created_s = start.elapsed().as_secs_f64();
    let waited = tokio::time::timeout(
        Duration::from_secs(600),
        all_bound.wait_for(|n| *n >= args.pods),
    )
    .await;
    let cpu_used = cpu.used_since(&before);
    loop_task.abort();
    informers.abort();
    watch_task.abort();
    let bound = bound.lock().clone();
    if waited.is_err() {
        bail!(
            "only {} of {} pods were bound within 600 s",
            bound.len(),
            args.pods
        );
    }
    let last = bound.values().max().copied().unwrap_or(start);
    let span = last.duration_since(start).as_secs_f64();
    let mut latency = histogram();
    for (i, t) in sent.iter().enumerate() {
        if let Some(b) = bound.get(&format!("pod-{i:05}")) {
            latency.record(micros(b.saturating_duration_since(*t)))?;
        }
    }
    let profiles = [skiff_scheduler::DEFAULT_SCHEDULER_NAME];
    let attempts = |o| scheduler.metrics.count(o, &profiles);
    out.emit(
        "scheduler",
        merge(
            cpu_used,
            json!({
                "workload": args.workload.name(),
                "nodes": args.nodes,
                "pods": args.pods,
                "clients": args.clients,
                "parallelism": args.parallelism.unwrap_or(16),
                "nodes_created_s": round3(nodes_s),
                "pods_created_s": round3(created_s),
                "span_s": round3(span),
                "pods_per_sec": (args.pods as f64 / span).round(),
                "p50_ms": ms(&latency, 0.5),
                "p99_ms": ms(&latency, 0.99),
                "max_ms": max_ms(&latency),
                "attempts_unschedulable": attempts(Outcome::Unschedulable),
                "attempts_error": attempts(Outcome::Error),
            }),
        ),
    );
    Ok(())
}
