//! `skiff bench controllers`: the workload controllers end to end. Starts `skiff apiserver`,
//! hollow nodes (`skiff kubelet --hollow`), `skiff scheduler` and `skiff controller-manager
//! --controllers LIST` (every default controller unless told, so it holds all its watches as in
//! production) as children, creates a Deployment of `--replicas` pods and watches: the time
//! until every pod exists, until every pod is bound, and until the Deployment is available; then
//! changes its template and times the rolling update (maxSurge 25%, maxUnavailable 25%) until
//! `kubectl rollout status` would succeed.
//!
//! Prints one `controllers` line per run with the CPU seconds each process used per phase and
//! over the whole workload, the controller manager's RSS at the end of the run (VmRSS, VmHWM),
//! and the watches it holds: the API server's `apiserver_longrunning_requests` per resource,
//! scraped before the controller manager starts and again once its watches have settled, the
//! difference being its own ([`watches`]).
//!
//! Last, what the controller manager's watches of pod events cost the API server. The scheduler
//! and the benchmark's own watches stop (the hollow nodes keep their nodes Ready), so that the
//! controller manager and the hollow nodes are the only pod watchers; then, [`TOUCH_PAIRS`]
//! times, every pod's annotation is changed once while the controller manager runs and once
//! after it stopped (it starts again for the next pair). Each pair starts with one more change
//! while the controller manager runs, not counted, so that what it still had to do (the end of
//! the rolling update, or its start-up) is not counted as the cost of its pod events. Per phase the API server's CPU seconds
//! and its `apiserver_watch_events_total` and `_sizes_sum` for Pods are read: the differences
//! between the phases of a pair are the pod events (and bytes) the server sent the controller
//! manager (`cm_pod_watch_events`, `cm_pod_watch_mb`) and the CPU that cost it
//! (`server_cpu_pod_events_s`, with each pair's figure, so the noise shows).
//!
//! With `--baseline PATH` the same run happens twice in one invocation, the controller manager
//! started first from the `skiff` binary PATH (`"build": "before"`), then from this one
//! (`"after"`); the API server, scheduler and hollow nodes come from this binary in both, so the
//! runs differ by the controller manager alone. A `controllers-compare` line gives each figure
//! of both and its ratio before ÷ after (above 1: the current build uses less, or is faster).

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Event as CoreEvent, Pod};
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher::{self, Event};
use parking_lot::Mutex;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use super::api::{
    CpuMeter, Emitter, ServerChild, ensure_open_files, mb, merge, prefixed, proc_status_kb, round3,
};
use crate::commands::UsageError;

/// Options of `skiff bench controllers`.
#[derive(Debug, Clone, clap::Args)]
pub struct ControllersBenchArgs {
    /// Replicas of the Deployment.
    #[arg(long, default_value_t = 1000)]
    pub replicas: usize,
    /// Hollow nodes (110 pods each) [default: 20, or one per 80 replicas if that is more, so
    /// the rolling update's 25% surge fits].
    #[arg(long)]
    pub nodes: Option<usize>,
    /// The controller manager's `--controllers` (`*`: every controller on by default).
    #[arg(long, default_value = "*")]
    pub controllers: String,
    /// A `skiff` binary of another build (the commit a change starts from): the run happens
    /// first with the controller manager started from it, then from this binary, and a
    /// comparison line follows.
    #[arg(long, value_name = "PATH")]
    pub baseline: Option<PathBuf>,
    /// Seconds to wait for each phase before giving up.
    #[arg(long, default_value_t = 300)]
    pub timeout_s: u64,
}

const NAMESPACE: &str = "default";
const NAME: &str = "bench";
/// Pods a hollow node takes (the kubelet's `--max-pods` default, as upstream's).
pub(super) const PODS_PER_NODE: usize = 110;
/// How long the watch counts must stay the same to count as settled, and how long to wait
/// for that at most.
const SETTLED: Duration = Duration::from_secs(3);
const SETTLE_LIMIT: Duration = Duration::from_secs(60);

/// Hollow nodes for `args`: as given, else 20 or one per 80 replicas (the surge of a rolling
/// update, 125% of the replicas, then fits in 110 pods a node); fewer than the replicas need
/// is a usage error.
fn node_count(args: &ControllersBenchArgs) -> Result<usize, UsageError> {
    let nodes = args.nodes.unwrap_or(args.replicas.div_ceil(80).max(20));
    let need = args.replicas.div_ceil(PODS_PER_NODE);
    if nodes < need {
        return Err(UsageError(format!(
            "--nodes {nodes}: {} replicas need at least {need} hollow nodes of {PODS_PER_NODE} pods",
            args.replicas
        )));
    }
    Ok(nodes)
}

/// A `skiff` child process, killed when dropped.
pub(crate) struct SkiffChild {
    child: Child,
    pub(crate) pid: u32,
    /// Its ready line.
    pub(crate) ready: String,
}

impl SkiffChild {
    /// Kills the child and waits for it to be gone, so the next run has the cores to itself.
    pub(crate) async fn stop(mut self) {
        let _ = self.child.kill().await;
    }
}

/// Starts `EXE ARGS` (stderr into `log`, warnings only unless `RUST_LOG` says otherwise) and
/// waits for its ready line.
pub(crate) async fn start(exe: &Path, args: &[&str], log: &Path) -> Result<SkiffChild> {
    let filter = std::env::var("RUST_LOG").unwrap_or("warn".into());
    start_logging(exe, args, log, &filter).await
}

/// [`start`] with the child's log filter (`RUST_LOG`) given. The log is appended to, so that
/// it keeps what a child restarted with the same log said before.
pub(super) async fn start_logging(
    exe: &Path,
    args: &[&str],
    log: &Path,
    filter: &str,
) -> Result<SkiffChild> {
    start_until(exe, args, log, filter, "ready").await
}

/// [`start_logging`], waiting for the first line on the child's stdout that contains `marker`
/// (a skiff component's ready line says "ready"; other programs say it otherwise).
pub(crate) async fn start_until(
    exe: &Path,
    args: &[&str],
    log: &Path,
    filter: &str,
    marker: &str,
) -> Result<SkiffChild> {
    let mut child = Command::new(exe)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(log)?,
        )
        .env("RUST_LOG", filter)
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("starting {} {}", exe.display(), args[0]))?;
    let pid = child.id().context("child has no pid")?;
    let mut lines = BufReader::new(child.stdout.take().context("stdout")?).lines();
    while let Some(line) = lines.next_line().await? {
        if line.contains(marker) {
            tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
            return Ok(SkiffChild {
                child,
                pid,
                ready: line,
            });
        }
    }
    bail!(
        "{} {} exited before it was ready; see {}",
        exe.display(),
        args[0],
        log.display()
    )
}

/// Starts `count` hollow nodes named `<prefix>-<i>` (`exe kubelet --hollow`, with `extra`
/// arguments) against the API server of `kubeconfig`, their data under `dir/hollow` and their
/// log in `dir/hollow.log`, and waits until every node has registered.
pub(crate) async fn start_hollow(
    exe: &Path,
    kubeconfig: &str,
    count: usize,
    prefix: &str,
    dir: &Path,
    extra: &[&str],
) -> Result<SkiffChild> {
    let count = count.to_string();
    let data = dir.join("hollow");
    let data = data.to_str().context("path")?;
    let args = [
        "kubelet",
        "--kubeconfig",
        kubeconfig,
        "--hollow",
        "--count",
        &count,
        "--node-name-prefix",
        prefix,
        "--data-dir",
        data,
    ];
    start(exe, &[&args[..], extra].concat(), &dir.join("hollow.log")).await
}

/// A Deployment of pause pods named `name` that rolls 25 % at a time and whose pods stop at
/// once.
pub(crate) fn deployment(name: &str, replicas: usize) -> Deployment {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                 "strategy": {"type": "RollingUpdate",
                              "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}},
                 "template": {"metadata": {"labels": {"app": name}},
                              "spec": {"terminationGracePeriodSeconds": 0,
                                       "containers": [{"name": "c",
                                           "image": "registry.k8s.io/pause:3.10"}]}}},
    }))
    .expect("a deployment")
}

/// Starts a rolling update of the Deployment `name` (made by [`deployment`]) by changing its
/// pod template's image; the Deployment's new generation.
pub(crate) async fn roll(deployments: &Api<Deployment>, name: &str) -> Result<Option<i64>> {
    let image = json!({"spec": {"template": {"spec": {"containers": [
        {"name": "c", "image": "registry.k8s.io/pause:3.9"}]}}}});
    let updated = deployments
        .patch(name, &PatchParams::default(), &Patch::Strategic(image))
        .await
        .context("updating the template")?;
    Ok(updated.metadata.generation)
}

/// Whether the Deployment's rollout is done as `kubectl rollout status` judges it.
pub(crate) fn rolled_out(d: &Deployment, replicas: usize) -> bool {
    let n = Some(replicas as i32);
    d.status.as_ref().is_some_and(|s| {
        s.observed_generation >= d.metadata.generation
            && s.updated_replicas == n
            && s.replicas == n
            && s.available_replicas == n
    })
}

/// Whether `exe controller-manager` takes `--metrics-bind-address`.
async fn serves_metrics(exe: &Path) -> Result<bool> {
    let help = Command::new(exe)
        .args(["controller-manager", "--help"])
        .output()
        .await
        .context("running controller-manager --help")?;
    Ok(String::from_utf8_lossy(&help.stdout).contains("--metrics-bind-address"))
}

/// Pairs of phases (controller manager running, then stopped) in which every pod is changed once,
/// to measure the API server's work for the controller manager's pod events.
const TOUCH_PAIRS: usize = 3;
/// Pod changes in flight while touching.
const TOUCH_IN_FLIGHT: usize = 32;
/// How long after its last change a phase still counts: the events of the last changes are
/// still being sent when the change returns.
const TOUCH_DRAIN: Duration = Duration::from_secs(1);

/// The names of the pods in the benchmark's namespace.
async fn pod_names(client: &kube::Client) -> Result<Vec<String>> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    let list = pods.list_metadata(&Default::default()).await?;
    Ok(list
        .items
        .into_iter()
        .filter_map(|p| p.metadata.name)
        .collect())
}

/// What the API server did in one touch phase.
#[derive(Debug, Clone, Copy, Default)]
struct Touched {
    server_cpu_s: f64,
    /// Pod events it sent to watchers, and their bytes.
    events: f64,
    bytes: f64,
}

/// Changes an annotation of every pod in `names` once (a pod event for every pod watcher);
/// returns the API server's CPU seconds (`server`) and the pod events it sent meanwhile.
async fn touch_pods(
    client: &kube::Client,
    names: &[String],
    tag: &str,
    server: &CpuMeter,
) -> Result<Touched> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    let (events, bytes) = watches::pod_events_sent(client).await?;
    let before = server.snapshot();
    let patch = json!({"metadata": {"annotations": {"bench.skiff.dev/touch": tag}}});
    let patches = names.iter().map(|name| {
        let (pods, patch) = (&pods, Patch::Merge(&patch));
        async move { pods.patch(name, &PatchParams::default(), &patch).await }
    });
    let mut results = futures::stream::iter(patches).buffer_unordered(TOUCH_IN_FLIGHT);
    while let Some(result) = results.next().await {
        result.context("changing a pod's annotation")?;
    }
    tokio::time::sleep(TOUCH_DRAIN).await;
    let server_cpu_s = server.used_since(&before)["server_cpu_s"]
        .as_f64()
        .context("the API server's CPU time")?;
    let (events_after, bytes_after) = watches::pod_events_sent(client).await?;
    Ok(Touched {
        server_cpu_s,
        events: events_after - events,
        bytes: bytes_after - bytes,
    })
}

/// What one run is compared on, in the `controllers-compare` line.
const COMPARED: [&str; 13] = [
    "cm_rss_mb",
    "cm_peak_mb",
    "cm_cpu_s",
    "server_cpu_s",
    "server_cpu_pod_events_s",
    "cm_pod_watch_events",
    "cm_pod_watch_mb",
    "cm_pod_watches",
    "cm_watches_total",
    "pods_created_s",
    "pods_bound_s",
    "available_s",
    "rolling_update_s",
];

pub async fn run(args: ControllersBenchArgs) -> Result<()> {
    let nodes = node_count(&args)?;
    ensure_open_files(4 * nodes + 1024)?;
    let out = Emitter {
        backend: "embedded".into(),
        cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
    };
    let current = std::env::current_exe()?;
    let Some(baseline) = &args.baseline else {
        let line = run_one(&args, nodes, &current).await?;
        out.emit("controllers", line);
        return Ok(());
    };
    if !baseline.is_file() {
        return Err(UsageError(format!("--baseline {}: no such file", baseline.display())).into());
    }
    let mut lines = Vec::new();
    for (build, exe) in [("before", baseline), ("after", &current)] {
        let line = run_one(&args, nodes, exe)
            .await
            .with_context(|| format!("the {build} run ({})", exe.display()))?;
        let line = merge(
            json!({"build": build, "exe": exe.display().to_string()}),
            line,
        );
        out.emit("controllers", line.clone());
        lines.push(line);
    }
    out.emit("controllers-compare", compare(&lines[0], &lines[1]));
    Ok(())
}

/// The `controllers-compare` fields: each [`COMPARED`] figure before and after, and its ratio
/// before ÷ after where both are there and after is not zero.
fn compare(before: &Value, after: &Value) -> Value {
    let mut fields = serde_json::Map::new();
    fields.insert("replicas".into(), after["replicas"].clone());
    fields.insert("nodes".into(), after["nodes"].clone());
    for key in COMPARED {
        let (b, a) = (before[key].as_f64(), after[key].as_f64());
        fields.insert(format!("{key}_before"), before[key].clone());
        fields.insert(format!("{key}_after"), after[key].clone());
        if let (Some(b), Some(a)) = (b, a)
            && a != 0.0
        {
            fields.insert(format!("{key}_ratio"), json!(round3(b / a)));
        }
    }
    // issue 30: one Pod watch per process, RSS and API server CPU for pod events each at
    // least 3x lower
    fields.insert("target_pod_watches".into(), json!(1));
    fields.insert("target_cm_pod_watch_events_ratio".into(), json!(3));
    fields.insert("target_cm_rss_ratio".into(), json!(3));
    fields.insert("target_server_cpu_pod_events_ratio".into(), json!(3));
    Value::Object(fields)
}

/// One run with the controller manager started from `cm_exe` (every other child from this
/// binary): its `controllers` line.
async fn run_one(args: &ControllersBenchArgs, nodes: usize, cm_exe: &Path) -> Result<Value> {
    let tmp = tempfile::tempdir()?;
    let exe = std::env::current_exe()?;
    let mut server = ServerChild::start_from(&exe, &tmp.path().join("api"), None, &[]).await?;
    let result = bench(args, nodes, &exe, cm_exe, &server, tmp.path()).await;
    server.stop().await;
    if result.is_err() {
        eprintln!(
            "skiff bench controllers: logs kept in {}",
            tmp.keep().display()
        );
    }
    result
}

async fn bench(
    args: &ControllersBenchArgs,
    nodes: usize,
    exe: &Path,
    cm_exe: &Path,
    server: &ServerChild,
    dir: &Path,
) -> Result<Value> {
    let kubeconfig = dir.join("api/kubeconfig.yaml");
    let kubeconfig = kubeconfig.to_str().context("path")?;
    let hollow = start_hollow(exe, kubeconfig, nodes, "bench", dir, &[]).await?;
    let scheduler = start(
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
    let client = kube::Client::try_from(server.config().await?)?;

    // pods as a watch sees them: created, and bound
    let seen: Arc<Mutex<(HashSet<String>, HashSet<String>)>> = Arc::default();
    let (counts_tx, mut counts) = tokio::sync::watch::channel((0usize, 0usize));
    let pod_watch = {
        let seen = seen.clone();
        let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
        tokio::spawn(async move {
            let stream = watcher::watcher(pods, watcher::Config::default());
            futures::pin_mut!(stream);
            while let Some(Ok(e)) = stream.next().await {
                let (Event::Apply(p) | Event::InitApply(p)) = e else {
                    continue;
                };
                let name = p.metadata.name.clone().unwrap_or_default();
                let bound = p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some();
                let mut s = seen.lock();
                s.0.insert(name.clone());
                if bound {
                    s.1.insert(name);
                }
                let _ = counts_tx.send((s.0.len(), s.1.len()));
            }
        })
    };
    let (deploy_tx, mut deploy) = tokio::sync::watch::channel(None::<Deployment>);
    let deploy_watch = {
        let deployments: Api<Deployment> = Api::namespaced(client.clone(), NAMESPACE);
        tokio::spawn(async move {
            let stream = watcher::watcher(deployments, watcher::Config::default());
            futures::pin_mut!(stream);
            while let Some(Ok(e)) = stream.next().await {
                if let Event::Apply(d) | Event::InitApply(d) = e {
                    let _ = deploy_tx.send(Some(d));
                }
            }
        })
    };

    // every watch but the controller manager's is open (the hollow nodes', the scheduler's,
    // this benchmark's two) once the count settles
    let others = watches::settled(&client, &BTreeMap::new()).await?.watches;
    let mut cm_args = vec![
        "controller-manager",
        "--kubeconfig",
        kubeconfig,
        "--controllers",
        &args.controllers,
        "--leader-elect",
        "false",
    ];
    // a baseline from before the controller manager served metrics has no such flag
    if serves_metrics(cm_exe).await? {
        cm_args.extend(["--metrics-bind-address", "127.0.0.1:0"]);
    }
    let cm = start(cm_exe, &cm_args, &dir.join("controller-manager.log")).await?;
    let synced = watches::settled(&client, &others).await?;
    let cm_watches = watches::difference(&others, &synced.watches);
    let cm_rss_synced = proc_status(cm.pid, "VmRSS");

    let cpu = CpuMeter {
        processes: vec![
            ("server", server.pid.to_string()),
            ("controller_manager", cm.pid.to_string()),
            ("scheduler", scheduler.pid.to_string()),
            ("hollow_nodes", hollow.pid.to_string()),
        ],
    };
    let limit = Duration::from_secs(args.timeout_s);
    let n = args.replicas;
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), NAMESPACE);

    let workload = cpu.snapshot();
    let before = workload.clone();
    let traffic = watches::traffic(&client).await?;
    let start_at = Instant::now();
    deployments
        .create(&PostParams::default(), &deployment(NAME, n))
        .await
        .context("creating the deployment")?;
    tokio::time::timeout(limit, counts.wait_for(|(created, _)| *created >= n))
        .await
        .context("waiting for the pods to be created")??;
    let created_s = start_at.elapsed().as_secs_f64();
    tokio::time::timeout(limit, counts.wait_for(|(_, bound)| *bound >= n))
        .await
        .context("waiting for the pods to be bound")??;
    let bound_s = start_at.elapsed().as_secs_f64();
    tokio::time::timeout(
        limit,
        deploy.wait_for(|d| d.as_ref().is_some_and(|d| rolled_out(d, n))),
    )
    .await
    .context("waiting for the deployment to be available")??;
    let available_s = start_at.elapsed().as_secs_f64();
    let create_cpu = cpu.used_since(&before);
    let create_traffic = watches::traffic(&client).await?;

    let before = cpu.snapshot();
    let update_at = Instant::now();
    let generation = roll(&deployments, NAME).await?;
    let done = tokio::time::timeout(
        limit,
        deploy.wait_for(|d| {
            d.as_ref().is_some_and(|d| {
                d.metadata.generation >= generation
                    && d.status.as_ref().and_then(|s| s.observed_generation) >= generation
                    && rolled_out(d, n)
            })
        }),
    )
    .await
    .map(|r| r.map(|_| ()));
    if done.is_err() {
        let status = deploy.borrow().as_ref().and_then(|d| d.status.clone());
        bail!("the rolling update did not finish; the deployment's status: {status:?}");
    }
    done??;
    let rollout_s = update_at.elapsed().as_secs_f64();
    let rollout_cpu = cpu.used_since(&before);
    let update_traffic = watches::traffic(&client).await?;
    let workload_cpu = cpu.used_since(&workload);
    let events = events_by_reason(&client, NAMESPACE).await?;
    let cm_status = std::fs::read_to_string(format!("/proc/{}/status", cm.pid))
        .context("reading the controller manager's /proc status")?;
    let cm_total_cpu = proc_cpu_seconds(cm.pid);

    // what the controller manager's pod events cost the API server: the scheduler and this
    // benchmark's watches stop, so that only the controller manager and the hollow nodes watch
    // pods; then each pair changes every pod with the controller manager running, and again
    // once it has stopped
    pod_watch.abort();
    deploy_watch.abort();
    scheduler.stop().await;
    let names = pod_names(&client).await?;
    let server_cpu = CpuMeter {
        processes: vec![("server", server.pid.to_string())],
    };
    let mut running = Some(cm);
    let mut pairs = Vec::new();
    for pair in 0..TOUCH_PAIRS {
        let cm = match running.take() {
            Some(cm) => cm,
            None => {
                let without = watches::scrape(&client).await?;
                let log = dir.join(format!("controller-manager-{pair}.log"));
                let cm = start(cm_exe, &cm_args, &log).await?;
                watches::settled(&client, &without).await?;
                cm
            }
        };
        touch_pods(&client, &names, &format!("warm-up-{pair}"), &server_cpu).await?;
        let with = touch_pods(&client, &names, &format!("with-cm-{pair}"), &server_cpu).await?;
        cm.stop().await;
        let without =
            touch_pods(&client, &names, &format!("without-cm-{pair}"), &server_cpu).await?;
        pairs.push((with, without));
    }
    hollow.stop().await;
    let sum = |f: fn(&Touched) -> f64| -> (f64, f64) {
        pairs.iter().fold((0.0, 0.0), |(w, wo), (with, without)| {
            (w + f(with), wo + f(without))
        })
    };
    let (cpu_with, cpu_without) = sum(|t| t.server_cpu_s);
    let (events_with, events_without) = sum(|t| t.events);
    let (bytes_with, bytes_without) = sum(|t| t.bytes);
    let cpu_pairs: Vec<f64> = pairs
        .iter()
        .map(|(with, without)| round3(with.server_cpu_s - without.server_cpu_s))
        .collect();

    let total: i64 = cm_watches.values().sum();
    let line = json!({
        "replicas": n,
        "nodes": nodes,
        "controllers": args.controllers,
        "pods_created_s": round3(created_s),
        "pods_bound_s": round3(bound_s),
        "target_pods_bound_s": 2,
        "available_s": round3(available_s),
        "rolling_update_s": round3(rollout_s),
        "target_rolling_update_s": 10,
        // the controller manager at the end of the run, and right after its watches settled
        "cm_rss_mb": mb(proc_status_kb(&cm_status, "VmRSS")),
        "cm_peak_mb": mb(proc_status_kb(&cm_status, "VmHWM")),
        "cm_rss_synced_mb": mb(cm_rss_synced),
        // CPU over the whole workload (create to rolled out); the controller manager's from
        // its start too (its initial lists included)
        "cm_cpu_s": workload_cpu["controller_manager_cpu_s"],
        "cm_total_cpu_s": cm_total_cpu.map(round3),
        "server_cpu_s": workload_cpu["server_cpu_s"],
        // the pod events and what sending them cost the API server, summed over the pairs
        "pod_events": names.len() * TOUCH_PAIRS,
        "server_cpu_pod_events_s": round3(cpu_with - cpu_without),
        "server_cpu_pod_events_pairs_s": cpu_pairs,
        "server_cpu_pod_events_with_cm_s": round3(cpu_with),
        "server_cpu_pod_events_without_cm_s": round3(cpu_without),
        "cm_pod_watch_events": events_with - events_without,
        "cm_pod_watch_mb": round3((bytes_with - bytes_without) / 1e6),
        "pod_watch_events_with_cm": events_with,
        "pod_watch_events_without_cm": events_without,
        "scheduler_cpu_s": workload_cpu["scheduler_cpu_s"],
        "hollow_nodes_cpu_s": workload_cpu["hollow_nodes_cpu_s"],
        // the watches the API server holds for the controller manager
        "cm_pod_watches": cm_watches.get("pods").copied().unwrap_or(0),
        "cm_watches_total": total,
        "cm_watches": cm_watches,
        "other_watches_total": others.values().sum::<i64>(),
        "watches_settled_s": round3(synced.after.as_secs_f64()),
        "watches_settled": synced.settled,
        // what the API server did per phase: watch events sent per kind, writes per verb and
        // resource
        "create_traffic": watches::difference_f64(&traffic, &create_traffic),
        "update_traffic": watches::difference_f64(&create_traffic, &update_traffic),
        // the Events at the end of the rolling update: "component reason" → [objects,
        // occurrences]
        "events": events,
    });
    Ok(merge(
        merge(line, prefixed(create_cpu, "create")),
        prefixed(rollout_cpu, "update"),
    ))
}

/// The Events of `namespace` by reporting component and reason: how many objects, and how
/// many occurrences (an aggregated event or a series counts each).
pub(super) async fn events_by_reason(
    client: &kube::Client,
    namespace: &str,
) -> Result<BTreeMap<String, [u64; 2]>> {
    let events: Api<CoreEvent> = Api::namespaced(client.clone(), namespace);
    let mut by_reason = BTreeMap::new();
    let mut params = ListParams::default().limit(1000);
    loop {
        let page = events.list(&params).await.context("listing events")?;
        for e in &page.items {
            let component = e
                .reporting_component
                .clone()
                .filter(|c| !c.is_empty())
                .or_else(|| e.source.as_ref().and_then(|s| s.component.clone()))
                .unwrap_or_default();
            let key = format!("{component} {}", e.reason.as_deref().unwrap_or_default());
            let occurrences = e
                .series
                .as_ref()
                .and_then(|s| s.count)
                .or(e.count)
                .unwrap_or(1);
            let entry: &mut [u64; 2] = by_reason.entry(key).or_default();
            entry[0] += 1;
            entry[1] += u64::try_from(occurrences.max(1)).unwrap_or(1);
        }
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => return Ok(by_reason),
        }
    }
}

/// A `kB` field of `/proc/PID/status`.
fn proc_status(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    proc_status_kb(&status, field)
}

/// CPU seconds a process used since it started.
fn proc_cpu_seconds(pid: u32) -> Option<f64> {
    let meter = CpuMeter {
        processes: vec![("p", pid.to_string())],
    };
    meter.snapshot().into_iter().next().flatten()
}

/// The API server's open watches and traffic, from its `/metrics`.
pub(super) mod watches {
    use std::collections::BTreeMap;
    use std::time::Duration;

    use anyhow::{Context, Result};
    use tokio::time::Instant;

    use super::{SETTLE_LIMIT, SETTLED};

    const GAUGE: &str = "apiserver_longrunning_requests";

    /// Open watches per resource, as the gauge `apiserver_longrunning_requests` counts them
    /// (summed over any labels besides `resource`).
    pub(super) fn parse(text: &str) -> BTreeMap<String, i64> {
        let mut watches = BTreeMap::new();
        for line in text.lines() {
            let Some(rest) = line.strip_prefix(GAUGE) else {
                continue;
            };
            let Some(rest) = rest.strip_prefix('{') else {
                continue;
            };
            let Some((labels, value)) = rest.split_once('}') else {
                continue;
            };
            let Ok(value) = value.trim().parse::<f64>() else {
                continue;
            };
            let resource = labels
                .split(',')
                .find_map(|l| l.trim().strip_prefix("resource=\""))
                .and_then(|v| v.strip_suffix('"'))
                .unwrap_or_default();
            *watches.entry(resource.to_string()).or_default() += value as i64;
        }
        watches
    }

    /// `after - before` per resource, the resources whose count did not change left out.
    pub(super) fn difference(
        before: &BTreeMap<String, i64>,
        after: &BTreeMap<String, i64>,
    ) -> BTreeMap<String, i64> {
        let mut diff = BTreeMap::new();
        for key in before.keys().chain(after.keys()) {
            let d = after.get(key).unwrap_or(&0) - before.get(key).unwrap_or(&0);
            if d != 0 {
                diff.insert(key.clone(), d);
            }
        }
        diff
    }

    async fn metrics(client: &kube::Client) -> Result<String> {
        let req = http::Request::get("/metrics").body(Vec::new())?;
        client
            .request_text(req)
            .await
            .context("GET /metrics of the API server")
    }

    /// Open watches per resource now.
    pub(super) async fn scrape(client: &kube::Client) -> Result<BTreeMap<String, i64>> {
        Ok(parse(&metrics(client).await?))
    }

    /// The value of the sample `series` (name and labels, as exposed), 0 if absent.
    pub(super) fn sample(text: &str, series: &str) -> f64 {
        text.lines()
            .find_map(|l| {
                l.strip_prefix(series)?
                    .strip_prefix(' ')?
                    .trim()
                    .parse()
                    .ok()
            })
            .unwrap_or(0.0)
    }

    /// The API server's work so far: watch events sent per kind (`events Pod`), requests per
    /// verb and resource (`PATCH pods`, `LIST pods`) and watchers closed for falling behind
    /// (`terminated watchers pods`), from `apiserver_watch_events_total`,
    /// `apiserver_request_total` and `apiserver_terminated_watchers_total`.
    pub(in crate::commands::bench) async fn traffic(
        client: &kube::Client,
    ) -> Result<BTreeMap<String, f64>> {
        Ok(parse_traffic(&metrics(client).await?))
    }

    pub(super) fn parse_traffic(text: &str) -> BTreeMap<String, f64> {
        let mut traffic = BTreeMap::new();
        for line in text.lines() {
            let Some((series, value)) = line.rsplit_once(' ') else {
                continue;
            };
            let Ok(value) = value.parse::<f64>() else {
                continue;
            };
            let Some((name, labels)) = series.split_once('{') else {
                continue;
            };
            let labels = labels.strip_suffix('}').unwrap_or(labels);
            let label = |key: &str| {
                labels
                    .split(',')
                    .find_map(|l| l.strip_prefix(key)?.strip_prefix("=\"")?.strip_suffix('"'))
                    .unwrap_or_default()
            };
            let key = match name {
                "apiserver_watch_events_total" => format!("events {}", label("kind")),
                "apiserver_request_total" => format!("{} {}", label("verb"), label("resource")),
                "apiserver_terminated_watchers_total" => {
                    format!("terminated watchers {}", label("resource"))
                }
                _ => continue,
            };
            *traffic.entry(key).or_default() += value;
        }
        traffic
    }

    /// `after - before` per key, the keys that did not change left out.
    pub(in crate::commands::bench) fn difference_f64(
        before: &BTreeMap<String, f64>,
        after: &BTreeMap<String, f64>,
    ) -> BTreeMap<String, f64> {
        after
            .iter()
            .map(|(k, a)| (k.clone(), a - before.get(k).unwrap_or(&0.0)))
            .filter(|(_, d)| *d != 0.0)
            .collect()
    }

    /// Pod events the API server has sent to watchers, and their bytes, so far
    /// (`apiserver_watch_events_total` and `apiserver_watch_events_sizes_sum`).
    pub(super) async fn pod_events_sent(client: &kube::Client) -> Result<(f64, f64)> {
        let text = metrics(client).await?;
        let labels = r#"{group="",version="v1",kind="Pod"}"#;
        Ok((
            sample(&text, &format!("apiserver_watch_events_total{labels}")),
            sample(&text, &format!("apiserver_watch_events_sizes_sum{labels}")),
        ))
    }

    /// Watch counts once they have settled.
    pub(super) struct Settled {
        pub(super) watches: BTreeMap<String, i64>,
        /// How long after the call they settled (or the limit).
        pub(super) after: Duration,
        /// Whether they did settle: false if they still changed at [`SETTLE_LIMIT`].
        pub(super) settled: bool,
    }

    /// Scrapes every 250 ms until the counts differ from `from` and then stay the same for
    /// [`SETTLED`]; gives up after [`SETTLE_LIMIT`] with the last counts.
    pub(super) async fn settled(
        client: &kube::Client,
        from: &BTreeMap<String, i64>,
    ) -> Result<Settled> {
        let start = Instant::now();
        let mut last = scrape(client).await?;
        let mut since = Instant::now();
        loop {
            tokio::time::sleep(Duration::from_millis(250)).await;
            let now = scrape(client).await?;
            if now != last {
                (last, since) = (now, Instant::now());
            } else if last != *from && since.elapsed() >= SETTLED {
                return Ok(Settled {
                    watches: last,
                    after: since - start,
                    settled: true,
                });
            }
            if start.elapsed() >= SETTLE_LIMIT {
                eprintln!(
                    "skiff bench controllers: the API server's watch counts still changed after \
                     {SETTLE_LIMIT:?}; using the last ones"
                );
                return Ok(Settled {
                    watches: last,
                    after: start.elapsed(),
                    settled: false,
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(replicas: usize, nodes: Option<usize>) -> ControllersBenchArgs {
        ControllersBenchArgs {
            replicas,
            nodes,
            controllers: "*".into(),
            baseline: None,
            timeout_s: 300,
        }
    }

    #[test]
    fn nodes_default_to_twenty_or_room_for_the_surge() {
        assert_eq!(node_count(&args(1000, None)).unwrap(), 20);
        assert_eq!(node_count(&args(10_000, None)).unwrap(), 125);
        assert_eq!(node_count(&args(500, Some(5))).unwrap(), 5);
    }

    #[test]
    fn too_few_nodes_for_the_replicas_is_a_usage_error() {
        let e = node_count(&args(10_000, Some(90))).unwrap_err();
        assert!(e.0.contains("at least 91"), "{}", e.0);
    }

    #[test]
    fn watch_gauges_are_read_per_resource() {
        let text = "# HELP apiserver_longrunning_requests Gauge of all active long-running\n\
                    # TYPE apiserver_longrunning_requests gauge\n\
                    apiserver_longrunning_requests{resource=\"pods\"} 14\n\
                    apiserver_longrunning_requests{resource=\"nodes\"} 3\n\
                    apiserver_longrunning_requests{verb=\"WATCH\",resource=\"pods\"} 2\n\
                    apiserver_request_total{verb=\"LIST\",resource=\"pods\"} 9\n";
        let w = watches::parse(text);
        assert_eq!(w.get("pods"), Some(&16));
        assert_eq!(w.get("nodes"), Some(&3));
        assert_eq!(w.len(), 2);
    }

    #[test]
    fn watch_event_samples_are_read_by_series() {
        let text = "apiserver_watch_events_total{group=\"\",version=\"v1\",kind=\"Pod\"} 30000\n\
                    apiserver_watch_events_total{group=\"apps\",version=\"v1\",kind=\"Deployment\"} 7\n\
                    apiserver_watch_events_sizes_sum{group=\"\",version=\"v1\",kind=\"Pod\"} 1.5e7\n";
        let pod = r#"{group="",version="v1",kind="Pod"}"#;
        let events = watches::sample(text, &format!("apiserver_watch_events_total{pod}"));
        let bytes = watches::sample(text, &format!("apiserver_watch_events_sizes_sum{pod}"));
        assert_eq!((events, bytes), (30000.0, 1.5e7));
        assert_eq!(watches::sample(text, "apiserver_watch_events_total{}"), 0.0);
    }

    #[test]
    fn traffic_is_watch_events_per_kind_requests_per_resource_and_terminated_watchers() {
        let text = "apiserver_watch_events_total{group=\"\",version=\"v1\",kind=\"Pod\"} 30\n\
                    apiserver_request_total{verb=\"PATCH\",group=\"\",version=\"v1\",resource=\"pods\",subresource=\"status\",code=\"200\"} 4\n\
                    apiserver_request_total{verb=\"PATCH\",group=\"\",version=\"v1\",resource=\"pods\",subresource=\"\",code=\"409\"} 1\n\
                    apiserver_request_total{verb=\"LIST\",group=\"\",version=\"v1\",resource=\"pods\",subresource=\"\",code=\"200\"} 9\n\
                    apiserver_terminated_watchers_total{resource=\"pods\"} 2\n\
                    apiserver_longrunning_requests{resource=\"pods\"} 7\n";
        let t = watches::parse_traffic(text);
        assert_eq!(
            t,
            BTreeMap::from([
                ("events Pod".to_string(), 30.0),
                ("PATCH pods".to_string(), 5.0),
                ("LIST pods".to_string(), 9.0),
                ("terminated watchers pods".to_string(), 2.0),
            ])
        );
    }

    #[test]
    fn the_controller_managers_watches_are_the_difference() {
        let before = BTreeMap::from([("pods".to_string(), 101), ("nodes".to_string(), 1)]);
        let after = BTreeMap::from([
            ("pods".to_string(), 115),
            ("nodes".to_string(), 1),
            ("jobs".to_string(), 1),
        ]);
        let d = watches::difference(&before, &after);
        assert_eq!(
            d,
            BTreeMap::from([("pods".to_string(), 14), ("jobs".to_string(), 1)])
        );
    }

    #[test]
    fn the_comparison_gives_before_after_and_their_ratio() {
        let before = json!({"replicas": 10, "nodes": 20, "cm_rss_mb": 300.0, "cm_pod_watches": 14,
                            "server_cpu_s": 0.0});
        let after = json!({"replicas": 10, "nodes": 20, "cm_rss_mb": 100.0, "cm_pod_watches": 1,
                           "server_cpu_s": 0.0});
        let c = compare(&before, &after);
        assert_eq!(c["cm_rss_mb_before"], json!(300.0));
        assert_eq!(c["cm_rss_mb_after"], json!(100.0));
        assert_eq!(c["cm_rss_mb_ratio"], json!(3.0));
        assert_eq!(c["cm_pod_watches_ratio"], json!(14.0));
        assert!(c.get("server_cpu_s_ratio").is_none(), "no ratio over zero");
        assert!(
            c.get("cm_cpu_s_ratio").is_none(),
            "no ratio without figures"
        );
    }
}
