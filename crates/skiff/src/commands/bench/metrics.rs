//! `skiff bench metrics`: what resource metrics cost, and how fast the HPA acts on them. Prints
//! one JSON line per result:
//!
//! - `metrics-pipeline`: `skiff apiserver`, `--nodes` hollow nodes serving the kubelet API
//!   (`skiff kubelet --hollow --hollow-serve-address 127.0.0.1`) with `--pods-per-node` pods
//!   each, and `skiff metrics-server` scraping them every `--resolution-s`: once every node is in
//!   `metrics.k8s.io`, the metrics server's CPU share of one core over `--intervals` scrape
//!   intervals, and its RSS (VmRSS, its peak VmHWM, and its heap and mapped-file parts),
//!   against the 5 % and 64 MB targets; the API server's and the hollow nodes' CPU shares in
//!   the same window beside them.
//! - `hpa-reaction`: on the same cluster, with the controller manager's
//!   `horizontalpodautoscaling` syncing every second (`--horizontal-pod-autoscaler-sync-period
//!   1s`) and the scheduler, `--hpa-runs` times a fresh Deployment of 10 hollow pods at 40 % of
//!   their CPU request under an HPA targeting 50 %: once the HPA reads their usage, every pod's
//!   usage is raised to 100 % (their `hollow.skiff.io/cpu-usage` annotation) and the time from
//!   the last of those writes to the Deployment's scale-up is taken, against one scrape
//!   interval + 1 s.
//! - `kubelet-summary` (needs root; skipped, saying so, without): a real `skiff kubelet` with
//!   its containerd running `--summary-pods` pods, `--summary-requests` sequential requests for
//!   `/stats/summary`, then for `/metrics/resource`, through the API server's node proxy: the
//!   kubelet's and containerd's CPU milliseconds per request (less what they use idle over the
//!   same time) and the requests' p50.
//!
//! Every line carries the 1-minute load average when it was measured: the host's cores are
//! shared.

use std::collections::HashSet;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher::{self, Event};
use kube::{Api, ResourceExt};
use serde_json::{Value, json};
use skiff_kubelet::images::BUSYBOX_IMAGE;
use skiff_kubelet::stats::hollow::ANN_CPU_USAGE;

use super::api::{
    CpuMeter, Emitter, ServerChild, ensure_open_files, mb, merge, proc_status_kb, round3,
};
use super::controllers::{SkiffChild, start, start_hollow};
use super::pods::{KubeletChild, load1, remove_pods};
use crate::commands::server::addons::apply_manifests;

/// Options of `skiff bench metrics`.
#[derive(Debug, Clone, clap::Args)]
pub struct MetricsBenchArgs {
    /// Hollow nodes the metrics server scrapes.
    #[arg(long, default_value_t = 1000)]
    pub nodes: usize,
    /// Pods on each hollow node.
    #[arg(long, default_value_t = 30)]
    pub pods_per_node: usize,
    /// The metrics server's `--metric-resolution`, in seconds.
    #[arg(long, default_value_t = 15)]
    pub resolution_s: u64,
    /// Scrape intervals over which the metrics server's CPU is measured.
    #[arg(long, default_value_t = 4)]
    pub intervals: u32,
    /// HPA reaction runs.
    #[arg(long, default_value_t = 3)]
    pub hpa_runs: usize,
    /// Pods on the real node whose Summary API is timed (0: no real node).
    #[arg(long, default_value_t = 100)]
    pub summary_pods: usize,
    /// Requests for each of `/stats/summary` and `/metrics/resource`.
    #[arg(long, default_value_t = 50)]
    pub summary_requests: usize,
    /// Seconds to wait for each phase before giving up.
    #[arg(long, default_value_t = 600)]
    pub timeout_s: u64,
}

const NAMESPACE: &str = "metrics-bench";
/// The real node's pods' namespace (apart, so that their clean-up leaves the hollow ones).
const REAL_NAMESPACE: &str = "metrics-bench-real";
const PREFIX: &str = "metrics";
/// The HPA runs' Deployment size, and their pods' CPU request in millicores.
const HPA_REPLICAS: usize = 10;
const REQUEST_MILLIS: u64 = 100;

pub async fn run(args: MetricsBenchArgs) -> Result<()> {
    ensure_open_files(4 * args.nodes + 1024)?;
    let tmp = tempfile::tempdir()?;
    let mut server = ServerChild::start(&tmp.path().join("api"), None).await?;
    let out = Emitter {
        backend: "embedded".into(),
        cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
    };
    let result = async {
        pipeline(&args, &out, &server, tmp.path()).await?;
        summary(&args, &out, &server, tmp.path()).await
    }
    .await;
    server.stop().await;
    result
}

/// Polls `check` every 500 ms until it gives a value, for at most `timeout`.
async fn until<T, F: Future<Output = Result<Option<T>>>>(
    what: &str,
    timeout: Duration,
    mut check: impl FnMut() -> F,
) -> Result<T> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = check().await? {
            return Ok(v);
        }
        if Instant::now() > deadline {
            bail!("gave up waiting for {what} after {timeout:?}");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The pods of `namespace` a watch has seen Running, counted as they arrive.
struct RunningCount {
    count: tokio::sync::watch::Receiver<usize>,
    task: tokio::task::JoinHandle<()>,
}

impl RunningCount {
    fn start(client: &kube::Client) -> RunningCount {
        let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
        let (tx, count) = tokio::sync::watch::channel(0);
        let task = tokio::spawn(async move {
            let mut running = HashSet::new();
            let stream = watcher::watcher(pods, watcher::Config::default());
            futures::pin_mut!(stream);
            while let Some(Ok(e)) = stream.next().await {
                let (Event::Apply(p) | Event::InitApply(p)) = e else {
                    continue;
                };
                let phase = p.status.as_ref().and_then(|s| s.phase.as_deref());
                if phase == Some("Running") && running.insert(p.name_any()) {
                    let _ = tx.send(running.len());
                }
            }
        });
        RunningCount { count, task }
    }

    async fn wait_for(&mut self, n: usize, timeout: Duration) -> Result<()> {
        tokio::time::timeout(timeout, self.count.wait_for(|c| *c >= n))
            .await
            .with_context(|| format!("waiting for {n} running pods"))??;
        Ok(())
    }
}

/// A pod sleeping on `node`, requesting `cpu` (none: no request, so that 100 fit on a real
/// node of two cores).
fn bare_pod(namespace: &str, name: &str, node: &str, cpu: Option<&str>) -> Value {
    let resources = cpu.map_or(json!({}), |cpu| json!({"requests": {"cpu": cpu}}));
    json!({"metadata": {"name": name, "namespace": namespace},
           "spec": {"nodeName": node, "terminationGracePeriodSeconds": 0,
                    "containers": [{"name": "app", "image": BUSYBOX_IMAGE,
                                    "imagePullPolicy": "IfNotPresent",
                                    "command": ["sleep", "3600"],
                                    "resources": resources}]}})
}

/// Creates `pods` in `namespace` (32 at a time).
async fn create_pods(client: &kube::Client, namespace: &str, pods: Vec<Value>) -> Result<()> {
    let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
    futures::stream::iter(pods)
        .map(|p| {
            let api = api.clone();
            async move {
                let pod: Pod = serde_json::from_value(p)?;
                api.create(&PostParams::default(), &pod).await?;
                anyhow::Ok(())
            }
        })
        .buffer_unordered(32)
        .try_collect::<Vec<()>>()
        .await?;
    Ok(())
}

async fn create_namespace(client: &kube::Client, name: &str) -> Result<()> {
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    let ns = serde_json::from_value(json!({"metadata": {"name": name}}))?;
    match namespaces.create(&PostParams::default(), &ns).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// The metrics server's registration: an `ExternalName` Service for `localhost` at its port
/// (an endpoint may not be on loopback) and the APIService.
fn registration(port: u16) -> [Value; 2] {
    [
        json!({"apiVersion": "v1", "kind": "Service",
               "metadata": {"name": "metrics-server", "namespace": "kube-system"},
               "spec": {"type": "ExternalName", "externalName": "localhost",
                        "ports": [{"name": "https", "port": port}]}}),
        json!({"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
               "metadata": {"name": "v1beta1.metrics.k8s.io"},
               "spec": {"group": "metrics.k8s.io", "version": "v1beta1",
                        "service": {"namespace": "kube-system", "name": "metrics-server",
                                    "port": port},
                        "insecureSkipTLSVerify": true,
                        "groupPriorityMinimum": 100, "versionPriority": 100}}),
    ]
}

/// How many items a list at `path` of the API holds (0 while it cannot be read).
async fn items(client: &kube::Client, path: &str) -> usize {
    let request = http::Request::get(path).body(Vec::new());
    let Ok(request) = request else { return 0 };
    match client.request::<Value>(request).await {
        Ok(list) => list["items"].as_array().map_or(0, Vec::len),
        Err(_) => 0,
    }
}

/// VmRSS, its peak (VmHWM), and its parts: RssAnon (heap) and RssFile (mapped pages of the
/// binary and libraries).
fn child_rss(pid: u32) -> [Option<u64>; 4] {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    ["VmRSS", "VmHWM", "RssAnon", "RssFile"].map(|f| proc_status_kb(&status, f))
}

async fn pipeline(
    args: &MetricsBenchArgs,
    out: &Emitter,
    server: &ServerChild,
    dir: &Path,
) -> Result<()> {
    let timeout = Duration::from_secs(args.timeout_s);
    let exe = std::env::current_exe()?;
    let kubeconfig = dir.join("api/kubeconfig.yaml");
    let kubeconfig = kubeconfig.to_str().context("path")?;
    let client = kube::Client::try_from(server.config().await?)?;
    create_namespace(&client, NAMESPACE).await?;
    let serve = ["--hollow-serve-address", "127.0.0.1"];
    let hollow = start_hollow(&exe, kubeconfig, args.nodes, PREFIX, dir, &serve).await?;
    let mut running = RunningCount::start(&client);
    let total = args.nodes * args.pods_per_node;
    let started = Instant::now();
    let pods = (0..total)
        .map(|i| {
            let node = format!("{PREFIX}-{}", i % args.nodes);
            bare_pod(NAMESPACE, &format!("p{i}"), &node, Some("100m"))
        })
        .collect();
    create_pods(&client, NAMESPACE, pods).await?;
    running.wait_for(total, timeout).await?;
    eprintln!(
        "skiff bench metrics: {total} pods running on {} hollow nodes after {:.0} s",
        args.nodes,
        started.elapsed().as_secs_f64()
    );

    let resolution = format!("{}s", args.resolution_s);
    let metrics = start(
        &exe,
        &[
            "metrics-server",
            "--kubeconfig",
            kubeconfig,
            "--bind-address",
            "127.0.0.1",
            "--secure-port",
            "0",
            "--metric-resolution",
            &resolution,
        ],
        &dir.join("metrics-server.log"),
    )
    .await?;
    let port: u16 = metrics
        .ready
        .split("https 127.0.0.1:")
        .nth(1)
        .and_then(|rest| rest.split(',').next())
        .and_then(|p| p.parse().ok())
        .with_context(|| format!("no port in {:?}", metrics.ready))?;
    apply_manifests(&client, "skiff-bench", &registration(port)).await?;
    let scraped = Instant::now();
    let nodes_path = "/apis/metrics.k8s.io/v1beta1/nodes";
    until("every node in metrics.k8s.io", timeout, || async {
        Ok((items(&client, nodes_path).await >= args.nodes).then_some(()))
    })
    .await?;
    eprintln!(
        "skiff bench metrics: every node in metrics.k8s.io {:.0} s after the metrics server started",
        scraped.elapsed().as_secs_f64()
    );
    let pods_path = format!("/apis/metrics.k8s.io/v1beta1/namespaces/{NAMESPACE}/pods");
    let pod_metrics = items(&client, &pods_path).await;

    let meter = CpuMeter {
        processes: vec![
            ("metrics_server", metrics.pid.to_string()),
            ("apiserver", server.pid.to_string()),
            ("hollow", hollow.pid.to_string()),
        ],
    };
    let window = Duration::from_secs(args.resolution_s) * args.intervals;
    let before = meter.snapshot();
    tokio::time::sleep(window).await;
    let used = meter.used_since(&before);
    let share = |name: &str| {
        used[format!("{name}_cpu_s")]
            .as_f64()
            .map_or(Value::Null, |s| json!(round3(s / window.as_secs_f64())))
    };
    let [rss, hwm, anon, file] = child_rss(metrics.pid);
    out.emit(
        "metrics-pipeline",
        json!({
            "nodes": args.nodes, "pods": total, "pod_metrics": pod_metrics,
            "resolution_s": args.resolution_s, "window_s": window.as_secs(),
            "scraper_cpu_share": share("metrics_server"), "target_cpu_share": 0.05,
            "scraper_rss_mb": mb(rss), "scraper_hwm_mb": mb(hwm), "target_rss_mb": 64,
            "scraper_anon_mb": mb(anon), "scraper_file_mb": mb(file),
            "apiserver_cpu_share": share("apiserver"), "hollow_cpu_share": share("hollow"),
            "load1": load1(),
        }),
    );

    let result = hpa_reaction(args, out, &exe, kubeconfig, &client, dir, &mut running).await;
    running.task.abort();
    metrics.stop().await;
    hollow.stop().await;
    result
}

fn hpa_objects(name: &str) -> [Value; 2] {
    [
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
               "metadata": {"name": name, "namespace": NAMESPACE},
               "spec": {"replicas": HPA_REPLICAS,
                        "selector": {"matchLabels": {"app": name}},
                        "template": {
                            "metadata": {"labels": {"app": name},
                                         "annotations": {ANN_CPU_USAGE: "40m"}},
                            "spec": {"terminationGracePeriodSeconds": 0,
                                     "containers": [{"name": "app", "image": BUSYBOX_IMAGE,
                                         "resources": {"requests": {"cpu": format!("{REQUEST_MILLIS}m")}}}]}}}}),
        json!({"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
               "metadata": {"name": name, "namespace": NAMESPACE},
               "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment",
                                           "name": name},
                        "minReplicas": HPA_REPLICAS, "maxReplicas": 4 * HPA_REPLICAS,
                        "metrics": [{"type": "Resource", "resource": {"name": "cpu",
                            "target": {"type": "Utilization", "averageUtilization": 50}}}]}}),
    ]
}

/// The HPA's CPU utilisation as it last read it, if it has.
fn read_utilization(hpa: &Value) -> Option<i64> {
    hpa["status"]["currentMetrics"]
        .as_array()?
        .iter()
        .find_map(|m| m["resource"]["current"]["averageUtilization"].as_i64())
}

async fn hpa_reaction(
    args: &MetricsBenchArgs,
    out: &Emitter,
    exe: &Path,
    kubeconfig: &str,
    client: &kube::Client,
    dir: &Path,
    running: &mut RunningCount,
) -> Result<()> {
    let timeout = Duration::from_secs(args.timeout_s);
    let scheduler: SkiffChild = start(
        exe,
        &[
            "scheduler",
            "--kubeconfig",
            kubeconfig,
            "--metrics-bind-address",
            "127.0.0.1:0",
        ],
        &dir.join("scheduler.log"),
    )
    .await?;
    let cm: SkiffChild = start(
        exe,
        &[
            "controller-manager",
            "--kubeconfig",
            kubeconfig,
            "--metrics-bind-address",
            "127.0.0.1:0",
            "--controllers",
            "horizontalpodautoscaling,deployment,replicaset",
            "--horizontal-pod-autoscaler-sync-period",
            "1s",
        ],
        &dir.join("controller-manager.log"),
    )
    .await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), NAMESPACE);
    let hpas: Api<kube::core::DynamicObject> = Api::namespaced_with(
        client.clone(),
        NAMESPACE,
        &kube::core::ApiResource::from_gvk(&kube::core::GroupVersionKind::gvk(
            "autoscaling",
            "v2",
            "HorizontalPodAutoscaler",
        )),
    );
    let mut reactions = Vec::new();
    let mut already = args.nodes * args.pods_per_node;
    for run in 0..args.hpa_runs {
        let name = format!("hpa-{run}");
        apply_manifests(client, "skiff-bench", &hpa_objects(&name)).await?;
        already += HPA_REPLICAS;
        running.wait_for(already, timeout).await?;
        until("the HPA to read its pods' usage", timeout, || async {
            let hpa = serde_json::to_value(hpas.get(&name).await?)?;
            Ok((read_utilization(&hpa) == Some(40)).then_some(()))
        })
        .await?;
        // the usage goes up: the Deployment's replicas are watched from before the change
        let (scaled_tx, scaled) = tokio::sync::oneshot::channel();
        let watch = {
            let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
            let stream = watcher::watcher(deployments.clone(), config);
            tokio::spawn(async move {
                futures::pin_mut!(stream);
                while let Some(Ok(e)) = stream.next().await {
                    let (Event::Apply(d) | Event::InitApply(d)) = e else {
                        continue;
                    };
                    let replicas = d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(0);
                    if replicas > HPA_REPLICAS as i32 {
                        let _ = scaled_tx.send(Instant::now());
                        return;
                    }
                }
            })
        };
        let selected = pods
            .list(&ListParams::default().labels(&format!("app={name}")))
            .await?;
        let patch =
            json!({"metadata": {"annotations": {ANN_CPU_USAGE: format!("{REQUEST_MILLIS}m")}}});
        for pod in &selected.items {
            pods.patch(
                &pod.name_any(),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await?;
        }
        let changed = Instant::now();
        let scaled_at = tokio::time::timeout(timeout, scaled)
            .await
            .context("waiting for the scale-up")??;
        watch.abort();
        reactions.push(scaled_at.duration_since(changed));
        // the scale-up's pods run too before the next run counts running pods
        let replicas = until("the scale-up's pods", timeout, || async {
            let d = deployments.get(&name).await?;
            let status = d.status.unwrap_or_default();
            let want = d.spec.and_then(|s| s.replicas).unwrap_or(0);
            Ok((status.ready_replicas == Some(want)).then_some(want as usize))
        })
        .await?;
        already += replicas - HPA_REPLICAS;
    }
    let seconds: Vec<f64> = reactions.iter().map(|d| round3(d.as_secs_f64())).collect();
    let max = seconds.iter().copied().fold(0.0, f64::max);
    out.emit(
        "hpa-reaction",
        json!({
            "runs": args.hpa_runs, "reaction_s": seconds, "max_s": max,
            "resolution_s": args.resolution_s, "hpa_sync_period_s": 1,
            "target_s": args.resolution_s + 1, "load1": load1(),
        }),
    );
    cm.stop().await;
    scheduler.stop().await;
    Ok(())
}

/// The pid of `parent`'s child named `comm`, if it has one.
fn child_named(parent: u32, comm: &str) -> Option<u32> {
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid: u32 = e.file_name().to_str()?.parse().ok()?;
        let stat = std::fs::read_to_string(e.path().join("stat")).ok()?;
        let name = &stat[stat.find('(')? + 1..stat.rfind(')')?];
        let ppid: u32 = stat[stat.rfind(')')? + 1..]
            .split_whitespace()
            .nth(1)?
            .parse()
            .ok()?;
        (ppid == parent && name == comm).then_some(pid)
    })
}

async fn summary(
    args: &MetricsBenchArgs,
    out: &Emitter,
    server: &ServerChild,
    dir: &Path,
) -> Result<()> {
    if args.summary_pods == 0 {
        return Ok(());
    }
    let status = std::fs::read_to_string("/proc/self/status")?;
    if !status.lines().any(|l| l.starts_with("Uid:\t0")) {
        eprintln!(
            "skiff bench metrics: kubelet-summary skipped: it needs root (the kubelet runs \
             containerd and CNI)"
        );
        return Ok(());
    }
    let timeout = Duration::from_secs(args.timeout_s);
    let node = "metrics-real";
    let client = kube::Client::try_from(server.config().await?)?;
    let kubeconfig = dir.join("api/kubeconfig.yaml");
    let (kubelet, cri) = KubeletChild::start_bench_node(&kubeconfig, dir, node).await?;
    create_namespace(&client, REAL_NAMESPACE).await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), REAL_NAMESPACE);
    let result = async {
        let mine = (0..args.summary_pods)
            .map(|i| bare_pod(REAL_NAMESPACE, &format!("real-{i}"), node, None))
            .collect();
        create_pods(&client, REAL_NAMESPACE, mine).await?;
        let running = ListParams::default().fields("status.phase=Running");
        until("the real node's pods running", timeout, || async {
            let listed = pods.list_metadata(&running).await?;
            Ok((listed.items.len() >= args.summary_pods).then_some(()))
        })
        .await?;
        let containerd =
            child_named(kubelet.pid, "containerd").context("the kubelet's containerd")?;
        let meter = CpuMeter {
            processes: vec![
                ("kubelet", kubelet.pid.to_string()),
                ("containerd", containerd.to_string()),
            ],
        };
        // what they use idle, per second, to take off what the requests' time shows
        let idle_window = Duration::from_secs(10);
        let before = meter.snapshot();
        tokio::time::sleep(idle_window).await;
        let idle = meter.used_since(&before);
        for path in ["stats/summary", "metrics/resource"] {
            let url = format!("/api/v1/nodes/{node}/proxy/{path}");
            let mut latencies = Vec::new();
            let before = meter.snapshot();
            let began = Instant::now();
            for _ in 0..args.summary_requests {
                let request = http::Request::get(url.as_str()).body(Vec::new())?;
                let t = Instant::now();
                let body = client.request_text(request).await?;
                latencies.push(t.elapsed());
                if body.is_empty() {
                    bail!("{path}: an empty answer");
                }
            }
            let took = began.elapsed();
            let used = meter.used_since(&before);
            let per_request = |name: &str| {
                let key = format!("{name}_cpu_s");
                let busy = used[&key].as_f64().unwrap_or(0.0);
                let idle = idle[&key].as_f64().unwrap_or(0.0) * took.as_secs_f64()
                    / idle_window.as_secs_f64();
                json!(round3(
                    (busy - idle).max(0.0) * 1000.0 / args.summary_requests as f64
                ))
            };
            latencies.sort();
            let p50 = latencies[latencies.len() / 2];
            out.emit(
                "kubelet-summary",
                merge(
                    json!({"path": format!("/{path}"), "pods": args.summary_pods,
                           "requests": args.summary_requests,
                           "p50_ms": round3(p50.as_secs_f64() * 1000.0)}),
                    json!({"kubelet_cpu_ms_per_request": per_request("kubelet"),
                           "containerd_cpu_ms_per_request": per_request("containerd"),
                           "load1": load1()}),
                ),
            );
        }
        anyhow::Ok(())
    }
    .await;
    let cleanup = remove_pods(&pods, &cri).await;
    kubelet.stop().await;
    result.and(cleanup)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_utilization_is_read_from_the_hpas_current_metrics() {
        let hpa = json!({"status": {"currentMetrics": [{"type": "Resource",
            "resource": {"name": "cpu", "current": {"averageUtilization": 40}}}]}});
        assert_eq!(read_utilization(&hpa), Some(40));
        assert_eq!(read_utilization(&json!({"status": {}})), None);
    }

    #[test]
    fn a_child_is_found_by_its_parent_and_name() {
        let me = std::process::id();
        let parent = std::os::unix::process::parent_id();
        let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
        let comm = &stat[stat.find('(').unwrap() + 1..stat.rfind(')').unwrap()];
        assert_eq!(child_named(parent, comm), Some(me));
        assert_eq!(child_named(me, "no-such-process"), None);
    }
}
