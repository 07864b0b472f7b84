//! `skiff bench scale`: upstream's documented limits (5,000 nodes, 150,000 pods) on hollow
//! nodes. Starts `skiff apiserver`, `--nodes` hollow nodes (`skiff kubelet --hollow`), `skiff
//! scheduler` and `skiff controller-manager` as children; creates Deployments of `--pods`
//! replicas in all (one of `--rollout-replicas`, the rest `--per-deployment` each); waits until
//! every pod is Running; lists them all; then rolls the large Deployment to a new template.
//! Each component runs as upstream's identity for it (`system:kube-scheduler`, each controller
//! as its ServiceAccount in `kube-system`, each hollow node `system:node:<name>` by
//! impersonation), so that API Priority and Fairness classifies and bounds their requests as
//! upstream's bootstrap FlowSchemas do; the bench's own client and probe are the admin
//! (exempt).
//!
//! One `scale` line reports, against upstream's SLOs where it has one:
//! - **mutating API calls**: the p99 over POST, PUT, PATCH and DELETE (the bound of the bucket
//!   holding it, as upstream's SLO measurement reads the histogram) of
//!   `apiserver_request_sli_duration_seconds` (the SLI upstream's SLO is measured on: without
//!   the wait in APF's queue and on webhooks), of the whole `apiserver_request_duration_seconds`,
//!   and of the APF wait per priority level, with the requests APF refused per level and
//!   reason; and the p99 a probe sees that updates a ConfigMap every 100 ms throughout (target
//!   ≤ 1 s);
//! - **non-streaming reads**: a cluster-scoped LIST of every pod, whole and in pages of 500,
//!   at full size (target ≤ 30 s);
//! - **the scheduler**: pods bound per second over the creation (overall, and the slowest
//!   10-second window while pods were waiting);
//! - **controller lag**: per Deployment, from its create to its last pod existing (p50, p99,
//!   max);
//! - **the API server**: RSS after the pods ran and at the end (VmRSS, VmHWM; target < 4 GiB),
//!   and its peak by the end of each phase; each process's CPU per phase, and each phase's
//!   requests by verb and resource (a kubelet's relist is a `LIST pods`), watch events, and
//!   watchers closed for falling behind; pods deleted (evicted, say) while creating;
//! - **the store**: once the run is over and the API server killed, the time to open it (the
//!   log replayed), its file's size, a compaction to the last revision with its sweep (timed),
//!   and the size after;
//! - **the machine**: how long a fixed piece of work took before the run and, sampled once a
//!   second, during it (see [`machine`]), and the share of CPU time the hypervisor took during
//!   it, to read runs of other days by.
//!
//! A run whose pods are not all Running within `--timeout-s` still prints a `scale` line, with
//! `"finished": false` and what it got to (pods seen, bound, Running and deleted, APF's waits
//! and refusals, the API server's memory and each process's CPU), and then fails. The pod
//! counts also go to stderr once a minute.
//!
//! `--apiserver-arg` passes flags to the API server child (the in-flight limits, say), so that
//! runs of one build can be compared with another configuration.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use futures::StreamExt;
use hdrhistogram::Histogram;
use http::Method;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::watcher::{self, Event};
use parking_lot::Mutex;
use serde_json::{Value, json};
use skiff_store::{EmbeddedConfig, EmbeddedStore, Store};

use super::api::{
    CpuMeter, Emitter, ServerChild, ensure_open_files, histogram, mb, merge, micros, ms, prefixed,
    proc_status_kb, round3, send_ok,
};
use super::controllers::{
    PODS_PER_NODE, deployment, roll, rolled_out, start, start_hollow, watches,
};
use super::machine::{self, CpuTicks};
use crate::commands::UsageError;

/// Options of `skiff bench scale`.
#[derive(Debug, Clone, clap::Args)]
pub struct ScaleBenchArgs {
    /// Hollow nodes.
    #[arg(long, default_value_t = 5000)]
    pub nodes: usize,
    /// Pods in all, every one from a Deployment.
    #[arg(long, default_value_t = 150_000)]
    pub pods: usize,
    /// Replicas of the Deployment that is rolled at the end (part of `--pods`).
    #[arg(long, default_value_t = 10_000)]
    pub rollout_replicas: usize,
    /// Replicas of each of the other Deployments.
    #[arg(long, default_value_t = 1000)]
    pub per_deployment: usize,
    /// Seconds to wait for each phase before giving up.
    #[arg(long, default_value_t = 3600)]
    pub timeout_s: u64,
    /// A flag for the API server child, as `--apiserver-arg=--max-requests-inflight=100`
    /// (repeatable); the line reports them.
    #[arg(long, value_name = "FLAG", allow_hyphen_values = true)]
    pub apiserver_arg: Vec<String>,
}

const NAMESPACE: &str = "default";
/// The Deployment rolled at the end.
const ROLLED: &str = "rolled";
/// How often the probe writes.
const PROBE_INTERVAL: Duration = Duration::from_millis(100);
/// The scheduler's throughput is also reported over its slowest window of this length.
const WINDOW: Duration = Duration::from_secs(10);
/// Upstream's SLOs.
const MUTATING_P99_SLO_S: f64 = 1.0;
const CLUSTER_LIST_SLO_S: f64 = 30.0;
const RSS_TARGET_MB: u64 = 4096;

/// The Deployments for `args`: (name, replicas), the rolled one first.
fn plan(args: &ScaleBenchArgs) -> Result<Vec<(String, usize)>, UsageError> {
    if args.rollout_replicas > args.pods || args.per_deployment == 0 {
        return Err(UsageError(format!(
            "--rollout-replicas {} must be at most --pods {}, and --per-deployment above 0",
            args.rollout_replicas, args.pods
        )));
    }
    // room for every pod and the rolling update's 25% surge
    let need = (args.pods + args.rollout_replicas.div_ceil(4)).div_ceil(PODS_PER_NODE);
    if args.nodes < need {
        return Err(UsageError(format!(
            "--nodes {}: {} pods (and the rolling update's surge) need at least {need} hollow \
             nodes of {PODS_PER_NODE} pods",
            args.nodes, args.pods
        )));
    }
    let mut plan = vec![(ROLLED.to_string(), args.rollout_replicas)];
    let mut left = args.pods - args.rollout_replicas;
    while left > 0 {
        let n = left.min(args.per_deployment);
        plan.push((format!("d{}", plan.len()), n));
        left -= n;
    }
    Ok(plan)
}

pub async fn run(args: ScaleBenchArgs) -> Result<()> {
    let plan = plan(&args)?;
    // The hollow nodes multiplex their requests and watches on a few HTTP/2 connections
    // (`skiff_runtime::http2::Pool`), so no process holds a descriptor per node.
    ensure_open_files(args.nodes + 4096)?;
    let out = Emitter {
        backend: "embedded".into(),
        cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
    };
    // how fast the machine is today, before anything of the run is started
    let calibration_ms = machine::calibration_ms();
    let ticks = CpuTicks::now();
    let meter = machine::Meter::start();
    let tmp = tempfile::tempdir()?;
    let exe = std::env::current_exe()?;
    let api_dir = tmp.path().join("api");
    let extra: Vec<&str> = args.apiserver_arg.iter().map(String::as_str).collect();
    let mut server = ServerChild::start_from(&exe, &api_dir, None, &extra).await?;
    let result = bench(&args, &plan, &server, tmp.path()).await;
    server.stop().await;
    let during = meter.finish();
    let machine_figures = |during| {
        json!({
            "cpu_calibration_ms": round3(calibration_ms),
            "cpu_calibration_during_ms": during,
            "cpu_steal_pct": CpuTicks::now().steal_pct_since(&ticks),
            "apiserver_args": args.apiserver_arg,
        })
    };
    let result = match result {
        Ok(line) => store_figures(&api_dir.join("store"))
            .await
            .map(|store| merge(merge(line, store), machine_figures(during.clone()))),
        Err(e) => Err(e),
    };
    match result {
        Ok(line) => {
            out.emit("scale", line);
            Ok(())
        }
        Err(e) => {
            if let Some(Unfinished(line)) = e.downcast_ref() {
                // what a run that timed out got to, to compare a slow run by
                out.emit("scale", merge(line.clone(), machine_figures(during)));
            }
            let kept = tmp.keep();
            eprintln!("skiff bench scale: logs kept in {}", kept.display());
            Err(e)
        }
    }
}

/// A run that did not finish within `--timeout-s`, with the figures it got to: reported as a
/// `scale` line with `"finished": false` before the run fails.
#[derive(Debug)]
struct Unfinished(Value);

impl std::fmt::Display for Unfinished {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = &self.0;
        write!(
            f,
            "after {} s: {} pods seen, {} bound, {} Running of {}",
            s["timed_out_after_s"], s["pods_seen"], s["pods_bound"], s["pods_running"], s["pods"]
        )
    }
}

impl std::error::Error for Unfinished {}

/// What the benchmark's pod watch has seen.
#[derive(Default)]
struct Seen {
    /// Per pod: whether it is bound, and whether it is Running.
    pods: HashMap<String, (bool, bool)>,
    /// Per Deployment: pods seen.
    per_deployment: HashMap<String, usize>,
    /// When each Deployment's last pod was first seen.
    complete: HashMap<String, Instant>,
    bound: usize,
    running: usize,
    /// Pods deleted (evicted from NotReady nodes, say) while the run went on.
    deleted: usize,
}

impl Seen {
    fn apply(&mut self, pod: &Pod, replicas: &HashMap<String, usize>) {
        let name = pod.metadata.name.clone().unwrap_or_default();
        let app = pod
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("app"))
            .map_or("", String::as_str);
        let bound = pod.spec.as_ref().is_some_and(|s| s.node_name.is_some());
        let running = pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running");
        let (was_bound, was_running) = self.pods.entry(name).or_insert_with(|| {
            let count = self.per_deployment.entry(app.to_string()).or_default();
            *count += 1;
            if replicas.get(app) == Some(count) {
                self.complete.insert(app.to_string(), Instant::now());
            }
            (false, false)
        });
        self.bound += usize::from(bound && !*was_bound);
        self.running = self.running + usize::from(running) - usize::from(*was_running);
        *was_bound |= bound;
        *was_running = running;
    }

    /// Pods seen, bound, Running and deleted so far.
    fn counts(&self) -> (usize, usize, usize, usize) {
        (self.pods.len(), self.bound, self.running, self.deleted)
    }

    fn delete(&mut self, pod: &Pod) {
        let name = pod.metadata.name.as_deref().unwrap_or_default();
        if let Some((_, running)) = self.pods.remove(name) {
            self.running -= usize::from(running);
            self.deleted += 1;
        }
    }
}

async fn bench(
    args: &ScaleBenchArgs,
    plan: &[(String, usize)],
    server: &ServerChild,
    dir: &std::path::Path,
) -> Result<Value> {
    let exe = std::env::current_exe()?;
    let kubeconfig = dir.join("api/kubeconfig.yaml");
    let kubeconfig = kubeconfig.to_str().context("path")?;
    let client = kube::Client::try_from(server.config().await?)?;

    // each component as itself, so that API Priority and Fairness classifies its requests as
    // upstream's bootstrap FlowSchemas do (an admin's would all be exempt)
    let api_dir = dir.join("api");
    let scheduler_kubeconfig = server
        .kubeconfig_as(&api_dir, "system:kube-scheduler")
        .await?;
    let cm_kubeconfig = server
        .kubeconfig_as(&api_dir, "system:kube-controller-manager")
        .await?;
    let started = Instant::now();
    // as nodes are in a cluster with DNS (k3s's default address): else every pod's sandbox
    // gets a MissingClusterDNS warning, a quarter of the nodes' events
    let node_args = ["--hollow-impersonate-nodes", "--cluster-dns", "10.43.0.10"];
    let hollow = start_hollow(&exe, kubeconfig, args.nodes, "scale", dir, &node_args).await?;
    let nodes_registered_s = started.elapsed().as_secs_f64();
    let metrics = ["--metrics-bind-address", "127.0.0.1:0"];
    let scheduler = start(
        &exe,
        &[
            &[
                "scheduler",
                "--kubeconfig",
                scheduler_kubeconfig.to_str().context("path")?,
            ][..],
            &metrics,
        ]
        .concat(),
        &dir.join("scheduler.log"),
    )
    .await?;
    let cm = start(
        &exe,
        &[
            &[
                "controller-manager",
                "--kubeconfig",
                cm_kubeconfig.to_str().context("path")?,
                "--leader-elect",
                "false",
                "--use-service-account-credentials=true",
            ][..],
            &metrics,
        ]
        .concat(),
        &dir.join("controller-manager.log"),
    )
    .await?;
    let cpu = CpuMeter {
        processes: vec![
            ("server", server.pid.to_string()),
            ("controller_manager", cm.pid.to_string()),
            ("scheduler", scheduler.pid.to_string()),
            ("hollow_nodes", hollow.pid.to_string()),
            ("bench", "self".to_string()),
        ],
    };

    // every pod as a watch sees it
    let replicas: HashMap<String, usize> = plan.iter().cloned().collect();
    let seen: Arc<Mutex<Seen>> = Arc::default();
    let (changed_tx, mut changed) = tokio::sync::watch::channel(());
    let pod_watch = {
        let (seen, replicas) = (seen.clone(), replicas.clone());
        let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
        tokio::spawn(async move {
            let stream = watcher::watcher(pods, watcher::Config::default());
            futures::pin_mut!(stream);
            while let Some(event) = stream.next().await {
                match event {
                    Ok(Event::Apply(p) | Event::InitApply(p)) => seen.lock().apply(&p, &replicas),
                    Ok(Event::Delete(p)) => seen.lock().delete(&p),
                    Ok(_) => continue,
                    Err(e) => tracing::warn!(error = %e, "the benchmark's pod watch failed"),
                }
                let _ = changed_tx.send(());
            }
        })
    };
    // the bound count once a second, for the scheduler's throughput; and once a minute on
    // stderr, to follow a long run by
    let bound_over_time: Arc<Mutex<Vec<(Duration, usize)>>> = Arc::default();
    let sampler = {
        let (seen, samples) = (seen.clone(), bound_over_time.clone());
        let at = Instant::now();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            let mut report = Duration::from_secs(60);
            loop {
                tick.tick().await;
                let (n, bound, running, deleted) = seen.lock().counts();
                let elapsed = at.elapsed();
                samples.lock().push((elapsed, bound));
                if elapsed >= report {
                    report += Duration::from_secs(60);
                    eprintln!(
                        "skiff bench scale: {} s: {n} pods, {bound} bound, {running} Running, \
                         {deleted} deleted",
                        elapsed.as_secs()
                    );
                }
            }
        })
    };
    let probe = Probe::start(client.clone()).await?;

    let limit = Duration::from_secs(args.timeout_s);
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), NAMESPACE);
    let before = cpu.snapshot();
    let traffic = watches::traffic(&client).await?;
    let create_at = Instant::now();
    let mut created_at = HashMap::new();
    for (name, n) in plan {
        deployments
            .create(&PostParams::default(), &deployment(name, *n))
            .await
            .with_context(|| format!("creating Deployment {name}"))?;
        created_at.insert(name.clone(), Instant::now());
    }
    let creates_s = create_at.elapsed().as_secs_f64();
    let total = args.pods;
    // the borrow `wait_for` returns holds the channel's lock: dropped at once, or the watch
    // task's next send would block its thread
    let running = changed.wait_for(|()| seen.lock().running >= total);
    let waited = tokio::time::timeout(limit, async { running.await.map(drop) }).await;
    if waited.is_err() {
        let (pods_seen, pods_bound, pods_running, pods_deleted) = seen.lock().counts();
        let server_metrics = metrics_text(&client).await?;
        let server_status = proc_status(server.pid)?;
        let line = json!({
            "nodes": args.nodes,
            "pods": total,
            "finished": false,
            "timed_out_after_s": limit.as_secs(),
            "pods_seen": pods_seen,
            "pods_bound": pods_bound,
            "pods_running": pods_running,
            "pods_deleted": pods_deleted,
        });
        let line = merge(line, server_state(&server_metrics, &server_status));
        return Err(Unfinished(merge(line, prefixed(cpu.used_since(&before), "create"))).into());
    }
    let running_s = create_at.elapsed().as_secs_f64();
    let deleted_while_creating = seen.lock().deleted;
    let create_cpu = cpu.used_since(&before);
    let create_traffic = watches::traffic(&client).await?;
    let server_rss_running = proc_kb(server.pid, "VmRSS");
    let server_peak_running = proc_kb(server.pid, "VmHWM");
    sampler.abort();
    let lag = {
        let s = seen.lock();
        let mut h = histogram();
        for (name, at) in &created_at {
            if let Some(done) = s.complete.get(name) {
                h.record(micros(done.saturating_duration_since(*at)))?;
            }
        }
        h
    };
    let (throughput, slowest_window) = throughput(&bound_over_time.lock(), total);

    // non-streaming reads at full size
    let before = cpu.snapshot();
    let list_all_s = timed(send_ok(
        &client,
        Method::GET,
        "/api/v1/pods",
        "application/json",
        Default::default(),
    ))
    .await?;
    let list_paged_s = timed(list_paged(&client)).await?;
    let list_cpu = cpu.used_since(&before);
    let server_peak_listed = proc_kb(server.pid, "VmHWM");

    // the rolling update
    let before = cpu.snapshot();
    let update_at = Instant::now();
    let generation = roll(&deployments, ROLLED).await?;
    let n = args.rollout_replicas;
    let mut rolled = tokio::time::interval(Duration::from_secs(1));
    // the Deployment's status as it moves: [s, replicas, updated, ready, available]
    let mut timeline: Vec<[f64; 5]> = Vec::new();
    loop {
        rolled.tick().await;
        let d = deployments.get(ROLLED).await?;
        if let Some(s) = &d.status {
            let [replicas, updated, ready, available] = [
                s.replicas,
                s.updated_replicas,
                s.ready_replicas,
                s.available_replicas,
            ]
            .map(|n| n.unwrap_or(0) as f64);
            let t = (update_at.elapsed().as_secs_f64() * 10.0).round() / 10.0;
            let row = [t, replicas, updated, ready, available];
            if timeline.last().is_none_or(|l| l[1..] != row[1..]) {
                timeline.push(row);
            }
        }
        let observed = d.status.as_ref().and_then(|s| s.observed_generation);
        if observed >= generation && rolled_out(&d, n) {
            break;
        }
        if update_at.elapsed() > limit {
            bail!(
                "the rolling update did not finish in {limit:?}; status: {:?}",
                d.status
            );
        }
    }
    let rollout_s = update_at.elapsed().as_secs_f64();
    let rollout_cpu = cpu.used_since(&before);
    let update_traffic = watches::traffic(&client).await?;
    let probed = probe.stop().await?;
    pod_watch.abort();

    let server_status = proc_status(server.pid)?;
    let server_metrics = metrics_text(&client).await?;
    let hollow_rss = proc_kb(hollow.pid, "VmRSS");
    let cm_rss = proc_kb(cm.pid, "VmRSS");
    let scheduler_rss = proc_kb(scheduler.pid, "VmRSS");
    for child in [cm, scheduler, hollow] {
        child.stop().await;
    }
    let whole_p99 = mutating_p99(&server_metrics, REQUEST_DURATION);
    let sli_p99 = mutating_p99(&server_metrics, REQUEST_SLI_DURATION);
    let line = json!({
        "nodes": args.nodes,
        "pods": total,
        "deployments": plan.len(),
        "nodes_registered_s": round3(nodes_registered_s),
        "deployments_created_s": round3(creates_s),
        "pods_running_s": round3(running_s),
        "pods_per_s": round3(total as f64 / running_s),
        // evicted and replaced, say
        "pods_deleted_while_creating": deleted_while_creating,
        "scheduler_pods_per_s": throughput,
        "scheduler_slowest_10s_pods_per_s": slowest_window,
        "controller_lag_p50_ms": ms(&lag, 0.5),
        "controller_lag_p99_ms": ms(&lag, 0.99),
        "controller_lag_max_ms": round3(lag.max() as f64 / 1000.0),
        "list_pods_all_s": round3(list_all_s),
        "list_pods_paged_s": round3(list_paged_s),
        "target_list_s": CLUSTER_LIST_SLO_S,
        "mutating_p99_s": whole_p99.get("all").map(bound),
        // per verb and resource, where observed
        "mutating_p99_by_resource_s": bounds(&whole_p99),
        // without the wait in APF's queue (and on webhooks), as upstream's SLO reads it
        "mutating_sli_p99_s": sli_p99.get("all").map(bound),
        "mutating_sli_p99_by_resource_s": bounds(&sli_p99),
        // the store's part of the requests' time
        "store_p99_by_operation_s": bounds(&store_p99(&server_metrics)),
        "probe_writes": probed.len(),
        "probe_p50_ms": ms(&probed, 0.5),
        "probe_p99_ms": ms(&probed, 0.99),
        "probe_max_ms": round3(probed.max() as f64 / 1000.0),
        "target_mutating_p99_s": MUTATING_P99_SLO_S,
        "rolling_update_replicas": n,
        "rolling_update_s": round3(rollout_s),
        "rolling_update_timeline": timeline,
        // the requests (relists among them), watch events and closed watchers of each phase
        "create_traffic": watches::difference_f64(&traffic, &create_traffic),
        "update_traffic": watches::difference_f64(&create_traffic, &update_traffic),
    });
    let memory = json!({
        "server_rss_running_mb": mb(server_rss_running),
        // the peak by the end of each phase: creation, the two lists, the rolling update
        "server_peak_running_mb": mb(server_peak_running),
        "server_peak_listed_mb": mb(server_peak_listed),
        "target_server_rss_mb": RSS_TARGET_MB,
        "hollow_nodes_rss_mb": mb(hollow_rss),
        "controller_manager_rss_mb": mb(cm_rss),
        "scheduler_rss_mb": mb(scheduler_rss),
    });
    let line = merge(
        merge(line, memory),
        server_state(&server_metrics, &server_status),
    );
    Ok(merge(
        merge(
            merge(line, prefixed(create_cpu, "create")),
            prefixed(list_cpu, "list"),
        ),
        prefixed(rollout_cpu, "update"),
    ))
}

/// The API server's `/metrics`.
async fn metrics_text(client: &kube::Client) -> Result<String> {
    let body = send_ok(
        client,
        Method::GET,
        "/metrics",
        "text/plain",
        Default::default(),
    )
    .await?;
    Ok(String::from_utf8_lossy(&body).into_owned())
}

/// What the API server's metrics and `/proc/PID/status` say at the end of a run, finished or
/// not: APF's waits and refusals, and the server's RSS and peak.
fn server_state(metrics: &str, status: &str) -> Value {
    json!({
        "apf_wait_p99_by_level_s": bounds(&apf_wait_p99(metrics)),
        "apf_rejected": apf_rejected(metrics),
        "server_rss_mb": mb(proc_status_kb(status, "VmRSS")),
        "server_peak_mb": mb(proc_status_kb(status, "VmHWM")),
    })
}

/// `/proc/PID/status`.
fn proc_status(pid: u32) -> Result<String> {
    Ok(std::fs::read_to_string(format!("/proc/{pid}/status"))?)
}

/// `/proc/PID/status`'s `field`, in kB.
fn proc_kb(pid: u32, field: &str) -> Option<u64> {
    proc_status_kb(&proc_status(pid).ok()?, field)
}

async fn timed<T>(f: impl std::future::Future<Output = Result<T>>) -> Result<f64> {
    let at = Instant::now();
    f.await?;
    Ok(at.elapsed().as_secs_f64())
}

/// Every pod of the cluster in pages of 500, as kubectl and informers list.
async fn list_paged(client: &kube::Client) -> Result<()> {
    let mut token = String::new();
    loop {
        let path = format!("/api/v1/pods?limit=500&continue={token}");
        let page: Value = serde_json::from_slice(
            &send_ok(
                client,
                Method::GET,
                &path,
                "application/json",
                Default::default(),
            )
            .await?,
        )?;
        match page["metadata"]["continue"].as_str() {
            Some(next) if !next.is_empty() => token = super::api::url_escape(next),
            _ => return Ok(()),
        }
    }
}

/// Pods bound per second from the first sample with pods bound to the last, and over the
/// slowest [`WINDOW`] before all `total` were bound.
fn throughput(samples: &[(Duration, usize)], total: usize) -> (f64, f64) {
    let Some(first) = samples.iter().position(|(_, bound)| *bound > 0) else {
        return (0.0, 0.0);
    };
    let last = samples
        .iter()
        .position(|(_, bound)| *bound >= total)
        .unwrap_or(samples.len() - 1);
    let rate = |a: &(Duration, usize), b: &(Duration, usize)| {
        (b.1 - a.1) as f64 / (b.0 - a.0).as_secs_f64().max(f64::EPSILON)
    };
    let overall = rate(&samples[first], &samples[last]);
    let slowest = (first..last)
        .filter_map(|i| {
            let end = samples[i..=last]
                .iter()
                .find(|(at, _)| *at >= samples[i].0 + WINDOW)?;
            Some(rate(&samples[i], end))
        })
        .fold(overall, f64::min);
    (round3(overall), round3(slowest))
}

/// A client that updates one ConfigMap every [`PROBE_INTERVAL`] and records how long each
/// update took.
struct Probe {
    task: tokio::task::JoinHandle<Result<Histogram<u64>>>,
    stop: tokio::sync::oneshot::Sender<()>,
}

impl Probe {
    async fn start(client: kube::Client) -> Result<Probe> {
        let api: Api<ConfigMap> = Api::namespaced(client, NAMESPACE);
        let probe: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "probe"}}))?;
        api.create(&PostParams::default(), &probe).await?;
        let (stop, mut stopped) = tokio::sync::oneshot::channel();
        let task = tokio::spawn(async move {
            let mut h = histogram();
            let mut tick = tokio::time::interval(PROBE_INTERVAL);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            for i in 0u64.. {
                tokio::select! {
                    _ = &mut stopped => break,
                    _ = tick.tick() => {}
                }
                let patch = Patch::Merge(json!({"data": {"n": i.to_string()}}));
                let at = Instant::now();
                api.patch("probe", &PatchParams::default(), &patch).await?;
                h.record(micros(at.elapsed()))?;
            }
            Ok(h)
        });
        Ok(Probe { task, stop })
    }

    async fn stop(self) -> Result<Histogram<u64>> {
        let _ = self.stop.send(());
        self.task.await?
    }
}

/// A sample's labels, as exposed (`verb="POST",resource="pods"`).
struct Labels<'a>(&'a str);

impl Labels<'_> {
    fn get(&self, key: &str) -> &str {
        self.0
            .split(',')
            .find_map(|l| l.strip_prefix(key)?.strip_prefix("=\"")?.strip_suffix('"'))
            .unwrap_or_default()
    }
}

/// The `q` quantile of histogram `name` over the series `select` picks: the upper bound of the
/// first bucket whose cumulative count (summed over those series) reaches `q` of the total, as
/// upstream's SLO measurement reads it; `None` without observations.
fn histogram_quantile(
    text: &str,
    name: &str,
    select: impl Fn(&Labels) -> bool,
    q: f64,
) -> Option<f64> {
    let prefix = format!("{name}_bucket{{");
    let mut buckets: Vec<(f64, f64)> = Vec::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix(&prefix) else {
            continue;
        };
        let Some((labels, value)) = rest.rsplit_once("} ") else {
            continue;
        };
        let labels = Labels(labels);
        if !select(&labels) {
            continue;
        }
        let le = match labels.get("le") {
            "+Inf" => f64::INFINITY,
            le => le.parse().ok()?,
        };
        let count: f64 = value.trim().parse().ok()?;
        match buckets.iter_mut().find(|(bound, _)| *bound == le) {
            Some((_, sum)) => *sum += count,
            None => buckets.push((le, count)),
        }
    }
    buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
    let total = buckets.last()?.1;
    if total == 0.0 {
        return None;
    }
    buckets
        .iter()
        .find(|(_, count)| *count >= q * total)
        .map(|(le, _)| *le)
}

const MUTATING: [&str; 4] = ["POST", "PUT", "PATCH", "DELETE"];
/// A request's whole time in the API server.
const REQUEST_DURATION: &str = "apiserver_request_duration_seconds";
/// The same without its wait in APF's queue and on admission webhooks: what upstream's SLO
/// measurement reads.
const REQUEST_SLI_DURATION: &str = "apiserver_request_sli_duration_seconds";
/// A request's wait in its APF queue.
const APF_WAIT: &str = "apiserver_flowcontrol_request_wait_duration_seconds";
/// Requests APF refused (its queue full, or their wait in it over).
const APF_REJECTED: &str = "apiserver_flowcontrol_rejected_requests_total";
/// A store call's latency.
const STORE_DURATION: &str = "etcd_request_duration_seconds";

/// The p99 of the mutating calls in histogram `name` (one of the request durations): over all
/// of them (`all`), and per verb and resource (`POST pods`).
fn mutating_p99(text: &str, name: &str) -> BTreeMap<String, f64> {
    p99_by(
        text,
        name,
        |l| MUTATING.contains(&l.get("verb")),
        |l| format!("{} {}", l.get("verb"), l.get("resource")),
    )
}

/// The p99 of the requests' wait in APF's queues (those that were let through): over all of
/// them (`all`), and per priority level.
fn apf_wait_p99(text: &str) -> BTreeMap<String, f64> {
    p99_by(
        text,
        APF_WAIT,
        |l| l.get("execute") == "true",
        |l| l.get("priority_level").to_string(),
    )
}

/// The requests APF refused, per priority level and reason (`system queue-full`), where any
/// were.
fn apf_rejected(text: &str) -> BTreeMap<String, u64> {
    let mut rejected = BTreeMap::new();
    for line in text.lines() {
        let Some((labels, n)) = line
            .strip_prefix(APF_REJECTED)
            .and_then(|rest| rest.strip_prefix('{')?.rsplit_once("} "))
        else {
            continue;
        };
        let labels = Labels(labels);
        let key = format!("{} {}", labels.get("priority_level"), labels.get("reason"));
        *rejected.entry(key).or_default() += n.trim().parse::<f64>().unwrap_or(0.0) as u64;
    }
    rejected.retain(|_, n| *n > 0);
    rejected
}

/// The p99 of the store's calls: over all of them (`all`), and per operation and resource
/// (`update leases.coordination.k8s.io`).
fn store_p99(text: &str) -> BTreeMap<String, f64> {
    p99_by(
        text,
        STORE_DURATION,
        |_| true,
        |l| format!("{} {}", l.get("operation"), l.get("type")),
    )
}

/// A bucket's bound as reported: a number, or `"+Inf"` past the last bucket (which JSON has no
/// number for).
fn bound(le: &f64) -> Value {
    if le.is_finite() {
        json!(le)
    } else {
        json!("+Inf")
    }
}

fn bounds(p99: &BTreeMap<String, f64>) -> Value {
    p99.iter().map(|(k, le)| (k.clone(), bound(le))).collect()
}

/// The p99 of histogram `name` over the series `select` picks (`all`), and per value of `key`.
fn p99_by(
    text: &str,
    name: &str,
    select: impl Fn(&Labels) -> bool,
    key: impl Fn(&Labels) -> String,
) -> BTreeMap<String, f64> {
    let keys: BTreeSet<String> = text
        .lines()
        .filter_map(|line| line.strip_prefix(name)?.strip_prefix("_bucket{"))
        .filter_map(|rest| Some(Labels(rest.rsplit_once("} ")?.0)))
        .filter(|l| select(l))
        .map(|l| key(&l))
        .collect();
    let mut p99 = BTreeMap::new();
    if let Some(all) = histogram_quantile(text, name, &select, 0.99) {
        p99.insert("all".to_string(), all);
    }
    for k in keys {
        let this = |l: &Labels| select(l) && key(l) == k;
        if let Some(q) = histogram_quantile(text, name, this, 0.99) {
            p99.insert(k, q);
        }
    }
    p99
}

/// The store once the run is over: the time to open it (the log replayed after the API server's
/// kill), its size, a compaction to the last revision and its sweep, and the size after.
async fn store_figures(dir: &std::path::Path) -> Result<Value> {
    let at = Instant::now();
    let store = EmbeddedStore::open(EmbeddedConfig::new(dir))
        .await
        .with_context(|| format!("opening the store in {}", dir.display()))?;
    let open_s = at.elapsed().as_secs_f64();
    let before = store.status().await?;
    let at = Instant::now();
    store.compact(before.revision).await?;
    store.checkpoint().await?;
    let compact_s = at.elapsed().as_secs_f64();
    let after = store.status().await?;
    Ok(json!({
        "store_open_s": round3(open_s),
        "store_revision": before.revision,
        "store_db_mb": round3(before.db_size as f64 / 1e6),
        "store_compact_s": round3(compact_s),
        "store_db_after_compact_mb": round3(after.db_size as f64 / 1e6),
        "store_in_use_after_compact_mb": round3(after.db_size_in_use as f64 / 1e6),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_plan_puts_the_rolled_deployment_first_and_sums_to_the_pods() {
        let args = ScaleBenchArgs {
            nodes: 100,
            pods: 2500,
            rollout_replicas: 1000,
            per_deployment: 600,
            timeout_s: 1,
            apiserver_arg: Vec::new(),
        };
        let deployments = plan(&args).unwrap();
        assert_eq!(deployments[0], (ROLLED.to_string(), 1000));
        assert_eq!(
            deployments
                .iter()
                .map(|(_, n)| n)
                .copied()
                .collect::<Vec<_>>(),
            [1000, 600, 600, 300]
        );
        let few = ScaleBenchArgs { nodes: 20, ..args };
        assert!(plan(&few).is_err(), "2,750 pods do not fit on 20 nodes");
    }

    #[test]
    fn throughput_is_over_the_binding_span_and_its_slowest_window() {
        let s = |secs: u64, bound: usize| (Duration::from_secs(secs), bound);
        // nothing for 2 s, then 100/s for 20 s except 10/s from 10 s to 20 s
        let mut samples = vec![s(0, 0), s(1, 0)];
        let mut bound = 0;
        for t in 2..=22 {
            bound += if (12..22).contains(&t) { 10 } else { 100 };
            samples.push(s(t, bound));
        }
        let (overall, slowest) = throughput(&samples, bound);
        assert_eq!(overall, round3((bound - 100) as f64 / 20.0));
        assert_eq!(slowest, 10.0);
    }

    #[test]
    fn a_quantile_is_the_bound_of_the_bucket_reaching_it_over_the_selected_series() {
        let text = "\
apiserver_request_duration_seconds_bucket{verb=\"POST\",le=\"0.1\"} 90
apiserver_request_duration_seconds_bucket{verb=\"POST\",le=\"1\"} 99
apiserver_request_duration_seconds_bucket{verb=\"POST\",le=\"+Inf\"} 100
apiserver_request_duration_seconds_bucket{verb=\"PUT\",le=\"0.1\"} 100
apiserver_request_duration_seconds_bucket{verb=\"PUT\",le=\"1\"} 100
apiserver_request_duration_seconds_bucket{verb=\"PUT\",le=\"+Inf\"} 100
apiserver_request_duration_seconds_bucket{verb=\"LIST\",le=\"0.1\"} 0
apiserver_request_duration_seconds_bucket{verb=\"LIST\",le=\"1\"} 0
apiserver_request_duration_seconds_bucket{verb=\"LIST\",le=\"+Inf\"} 100
";
        let name = "apiserver_request_duration_seconds";
        let post = |l: &Labels| l.get("verb") == "POST";
        assert_eq!(histogram_quantile(text, name, post, 0.99), Some(1.0));
        assert_eq!(histogram_quantile(text, name, post, 0.9), Some(0.1));
        let writes = |l: &Labels| matches!(l.get("verb"), "POST" | "PUT");
        // 190 of 200 within 0.1 s: 0.95
        assert_eq!(histogram_quantile(text, name, writes, 0.95), Some(0.1));
        let list = |l: &Labels| l.get("verb") == "LIST";
        assert_eq!(
            histogram_quantile(text, name, list, 0.5),
            Some(f64::INFINITY)
        );
        let none = |l: &Labels| l.get("verb") == "GET";
        assert_eq!(histogram_quantile(text, name, none, 0.99), None);
    }

    #[test]
    fn mutating_calls_are_summed_and_told_apart_by_verb_and_resource() {
        let text = "\
apiserver_request_duration_seconds_bucket{verb=\"POST\",resource=\"pods\",le=\"1\"} 10
apiserver_request_duration_seconds_bucket{verb=\"POST\",resource=\"pods\",le=\"5\"} 10
apiserver_request_duration_seconds_bucket{verb=\"PATCH\",resource=\"pods\",le=\"1\"} 0
apiserver_request_duration_seconds_bucket{verb=\"PATCH\",resource=\"pods\",le=\"5\"} 1
apiserver_request_duration_seconds_bucket{verb=\"GET\",resource=\"pods\",le=\"1\"} 0
apiserver_request_duration_seconds_bucket{verb=\"GET\",resource=\"pods\",le=\"5\"} 100
";
        let p99 = mutating_p99(text, REQUEST_DURATION);
        assert_eq!(
            p99,
            BTreeMap::from([
                ("all".to_string(), 5.0),
                ("PATCH pods".to_string(), 5.0),
                ("POST pods".to_string(), 1.0),
            ])
        );
        assert_eq!(mutating_p99(text, REQUEST_SLI_DURATION), BTreeMap::new());
    }

    #[test]
    fn store_calls_are_told_apart_by_operation_and_resource() {
        let text = "\
etcd_request_duration_seconds_bucket{operation=\"update\",type=\"leases.coordination.k8s.io\",le=\"0.1\"} 0
etcd_request_duration_seconds_bucket{operation=\"update\",type=\"leases.coordination.k8s.io\",le=\"1.0\"} 10
etcd_request_duration_seconds_bucket{operation=\"get\",type=\"pods\",le=\"0.1\"} 980
etcd_request_duration_seconds_bucket{operation=\"get\",type=\"pods\",le=\"1.0\"} 980
";
        assert_eq!(
            store_p99(text),
            BTreeMap::from([
                ("all".to_string(), 1.0),
                ("get pods".to_string(), 0.1),
                ("update leases.coordination.k8s.io".to_string(), 1.0),
            ])
        );
    }

    #[test]
    fn apf_waits_are_told_apart_by_level_and_refused_requests_left_out() {
        let text = "\
apiserver_flowcontrol_request_wait_duration_seconds_bucket{le=\"0.1\",execute=\"true\",flow_schema=\"system-nodes\",priority_level=\"system\"} 99
apiserver_flowcontrol_request_wait_duration_seconds_bucket{le=\"2.0\",execute=\"true\",flow_schema=\"system-nodes\",priority_level=\"system\"} 100
apiserver_flowcontrol_request_wait_duration_seconds_bucket{le=\"0.1\",execute=\"true\",flow_schema=\"kube-controller-manager\",priority_level=\"workload-high\"} 1
apiserver_flowcontrol_request_wait_duration_seconds_bucket{le=\"2.0\",execute=\"true\",flow_schema=\"kube-controller-manager\",priority_level=\"workload-high\"} 1
apiserver_flowcontrol_request_wait_duration_seconds_bucket{le=\"0.1\",execute=\"false\",flow_schema=\"global-default\",priority_level=\"global-default\"} 0
apiserver_flowcontrol_request_wait_duration_seconds_bucket{le=\"2.0\",execute=\"false\",flow_schema=\"global-default\",priority_level=\"global-default\"} 5
";
        assert_eq!(
            apf_wait_p99(text),
            BTreeMap::from([
                // 100 of 101 within 0.1 s: with the 5 refused, 100 of 106
                ("all".to_string(), 0.1),
                ("system".to_string(), 0.1),
                ("workload-high".to_string(), 0.1),
            ])
        );
    }

    #[test]
    fn apf_refusals_are_summed_per_level_and_reason() {
        let text = "\
# TYPE apiserver_flowcontrol_rejected_requests_total counter
apiserver_flowcontrol_rejected_requests_total{flow_schema=\"system-nodes\",priority_level=\"system\",reason=\"queue-full\"} 7
apiserver_flowcontrol_rejected_requests_total{flow_schema=\"system-node-high\",priority_level=\"node-high\",reason=\"time-out\"} 3
apiserver_flowcontrol_rejected_requests_total{flow_schema=\"kube-scheduler\",priority_level=\"workload-high\",reason=\"queue-full\"} 2
apiserver_flowcontrol_rejected_requests_total{flow_schema=\"kube-controller-manager\",priority_level=\"workload-high\",reason=\"queue-full\"} 5
apiserver_flowcontrol_rejected_requests_total{flow_schema=\"system-nodes\",priority_level=\"system\",reason=\"cancelled\"} 0
apiserver_flowcontrol_rejected_requests_total_other{priority_level=\"system\",reason=\"queue-full\"} 100
";
        assert_eq!(
            apf_rejected(text),
            BTreeMap::from([
                ("node-high time-out".to_string(), 3),
                ("system queue-full".to_string(), 7),
                ("workload-high queue-full".to_string(), 7),
            ])
        );
    }

    #[test]
    fn a_quantile_past_the_last_bucket_is_reported_as_infinite() {
        let p99 = BTreeMap::from([("all".to_string(), f64::INFINITY), ("x".to_string(), 0.5)]);
        assert_eq!(bounds(&p99), json!({"all": "+Inf", "x": 0.5}));
    }
}
