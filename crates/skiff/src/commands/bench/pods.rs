//! `skiff bench pods`: the kubelet end to end. Starts `skiff apiserver` and a real
//! `skiff kubelet` (with its managed containerd) as children, and prints one JSON line per
//! result:
//!
//! - `pod-startup`: created → Running as a watch sees it, with `spec.nodeName` set (no
//!   scheduler) and the image present: one pod on an idle node (`--single-runs` times, the
//!   median), then `--pods` pods created at once (p50/p99); each line carries its ratio to…
//! - `cri-floor`: the same sandbox and container configs run straight through CRI against the
//!   same containerd (RunPodSandbox, CreateContainer, StartContainer), no Skiff in the path;
//! - `kubelet-rss`: the kubelet's VmRSS while it runs `--rss-pods` pods (the burst's and the
//!   rest);
//! - `eviction`: from `memory.available` crossing a hard threshold to the first pod evicted
//!   (see [`super::eviction`]), `--eviction-runs` times, against the 2 s target;
//! - `hollow`: `--hollow-nodes` hollow nodes in a `skiff kubelet --hollow` child: Lease and
//!   Node writes per second as watches on the API server see them (against the 1 per node per
//!   10 s upstream renews at), the busiest second, and the child's RSS.
//!
//! Needs root (containerd, CNI). Every line carries the 1-minute load average when it was
//! measured: the host's cores are shared.

use std::collections::HashMap;
use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use futures::StreamExt;
use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{DeleteParams, PostParams};
use kube::runtime::watcher::{self, Event};
use kube::{Api, Resource};
use parking_lot::Mutex;
use serde_json::{Value, json};
use skiff_kubelet::cgroups::driver::{CgroupName, Cgroupfs};
use skiff_kubelet::cgroups::fs::RealCgroupFs;
use skiff_kubelet::config::{container_config, sandbox_config};
use skiff_kubelet::cri::{ContainerRuntime, CriClient};
use skiff_kubelet::images::BUSYBOX_IMAGE;
use skiff_kubelet::security_context::{self, ImageUser, NodeSecurity};
use tokio::io::{AsyncBufReadExt as _, BufReader};
use tokio::process::{Child, Command};

use super::api::{
    Emitter, ServerChild, ensure_open_files, histogram, mb, merge, micros, ms, proc_status_kb,
    round3,
};

/// Options of `skiff bench pods`.
#[derive(Debug, Clone, clap::Args)]
pub struct PodBenchArgs {
    /// How many times the single pod (and its floor) is started; the median is reported.
    #[arg(long, default_value_t = 5)]
    pub single_runs: usize,
    /// Pods created at once on the node.
    #[arg(long, default_value_t = 30)]
    pub pods: usize,
    /// Pods the node runs when the kubelet's RSS is read: the `--pods` of the burst, then the
    /// rest created at once.
    #[arg(long, default_value_t = 100)]
    pub rss_pods: usize,
    /// How many times a hard memory threshold is crossed and the eviction timed.
    #[arg(long, default_value_t = 3)]
    pub eviction_runs: usize,
    /// Hollow nodes in the heartbeat run.
    #[arg(long, default_value_t = 1000)]
    pub hollow_nodes: usize,
    /// Seconds over which the hollow nodes' writes are counted (after one renewal period).
    #[arg(long, default_value_t = 30)]
    pub window_s: u64,
}

/// The bench kubelets' hard eviction thresholds: upstream's memory threshold alone, so that
/// a nearly full disk (upstream's `nodefs.available<10%`, `imagefs.available<15%`) does not
/// refuse the bench's pods.
pub(super) const EVICTION_HARD: &str = "memory.available<100Mi";

const NAMESPACE: &str = "pod-bench";
const NODE: &str = "pod-bench";

/// A `skiff kubelet` child (its stderr in `log`); killed when dropped.
pub(super) struct KubeletChild {
    child: Child,
    pub(super) pid: u32,
}

impl KubeletChild {
    /// Starts the benches' one real node: `skiff kubelet` named `node` with its data in `data`,
    /// its own pod range and no pod network routes or nat rules in the host's tables, then
    /// `args`.
    pub(super) async fn start_node(
        kubeconfig: &Path,
        log: &Path,
        node: &str,
        data: &Path,
        args: &[&str],
    ) -> Result<KubeletChild> {
        let data = data.to_str().context("a data dir path")?;
        let mut all = vec![
            "--node-name",
            node,
            "--data-dir",
            data,
            "--pod-cidr",
            "10.42.0.0/24",
            "--flannel-backend",
            "none",
        ];
        all.extend_from_slice(args);
        KubeletChild::start(kubeconfig, log, &all).await
    }

    /// [`KubeletChild::start_node`] as the benches run it: the memory eviction threshold alone
    /// (a nearly full disk must not evict the bench's pods), its data in `dir/kubelet` and its
    /// log in `dir/kubelet.log`; with a CRI client of its containerd.
    pub(super) async fn start_bench_node(
        kubeconfig: &Path,
        dir: &Path,
        node: &str,
    ) -> Result<(KubeletChild, CriClient)> {
        let data = dir.join("kubelet");
        let kubelet = KubeletChild::start_node(
            kubeconfig,
            &dir.join("kubelet.log"),
            node,
            &data,
            &["--eviction-hard", EVICTION_HARD],
        )
        .await?;
        let socket = data.join("containerd/containerd.sock");
        let cri = CriClient::connect(&socket.display().to_string())?;
        Ok((kubelet, cri))
    }

    /// Starts `skiff kubelet ARGS` and waits for its ready line.
    pub(super) async fn start(
        kubeconfig: &Path,
        log: &Path,
        args: &[&str],
    ) -> Result<KubeletChild> {
        let mut child = Command::new(std::env::current_exe()?)
            .arg("kubelet")
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(log)?)
            .env(
                "RUST_LOG",
                std::env::var("RUST_LOG").unwrap_or("warn".into()),
            )
            .kill_on_drop(true)
            .spawn()
            .context("starting skiff kubelet")?;
        let pid = child.id().context("kubelet child has no pid")?;
        let mut lines = BufReader::new(child.stdout.take().context("stdout")?).lines();
        while let Some(line) = lines.next_line().await? {
            if line.contains("ready") {
                tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
                return Ok(KubeletChild { child, pid });
            }
        }
        bail!(
            "skiff kubelet exited before it was ready; see {}",
            log.display()
        )
    }

    /// VmRSS, RssAnon (heap) and RssFile (mapped binary pages, shared with the API server
    /// running the same binary), in kB.
    fn rss_kb(&self) -> [Option<u64>; 3] {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid));
        let status = status.unwrap_or_default();
        ["VmRSS", "RssAnon", "RssFile"].map(|f| proc_status_kb(&status, f))
    }

    /// SIGTERM (a kubelet stops its managed containerd), then wait.
    pub(super) async fn stop(mut self) {
        let _ = Command::new("kill")
            .arg(self.pid.to_string())
            .status()
            .await;
        let _ = self.child.wait().await;
    }
}

pub(super) fn load1() -> Value {
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    load.split_whitespace()
        .next()
        .and_then(|l| l.parse::<f64>().ok())
        .map_or(Value::Null, |l| json!(l))
}

/// The bench pod: busybox sleeping, image present, bound to the node, with the Pod Security
/// Standards' `restricted` security context (a user, no capabilities, no privilege
/// escalation, a read-only root, the runtime's seccomp profile), which the kubelet enforces.
fn pod(name: &str, uid: Option<&str>) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": NAMESPACE, "uid": uid},
        "spec": {"nodeName": NODE, "terminationGracePeriodSeconds": 0,
                 "securityContext": {"runAsNonRoot": true, "runAsUser": 1000,
                                     "seccompProfile": {"type": "RuntimeDefault"}},
                 "containers": [{"name": "app", "image": BUSYBOX_IMAGE,
                                 "imagePullPolicy": "IfNotPresent",
                                 "command": ["sleep", "3600"],
                                 "securityContext": {
                                     "allowPrivilegeEscalation": false,
                                     "readOnlyRootFilesystem": true,
                                     "capabilities": {"drop": ["ALL"]}}}]},
    }))
    .expect("a pod")
}

pub async fn run(args: PodBenchArgs) -> Result<()> {
    let status = std::fs::read_to_string("/proc/self/status")?;
    if !status.lines().any(|l| l.starts_with("Uid:\t0")) {
        bail!("skiff bench pods needs root: the kubelet runs containerd and CNI");
    }
    ensure_open_files(4 * args.hollow_nodes + 256)?;
    let tmp = tempfile::tempdir()?;
    let mut server = ServerChild::start(&tmp.path().join("api"), None).await?;
    let result = bench(&args, &server, tmp.path()).await;
    server.stop().await;
    result
}

async fn bench(args: &PodBenchArgs, server: &ServerChild, dir: &Path) -> Result<()> {
    let out = Emitter {
        backend: "embedded".into(),
        cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
    };
    let kubeconfig = dir.join("api/kubeconfig.yaml");
    let client = kube::Client::try_from(server.config().await?)?;
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    let ns = serde_json::from_value(json!({"metadata": {"name": NAMESPACE}}))?;
    namespaces.create(&PostParams::default(), &ns).await?;

    let data = dir.join("kubelet");
    let (kubelet, cri) = KubeletChild::start_bench_node(&kubeconfig, dir, NODE).await?;
    let image = cri
        .image_status(BUSYBOX_IMAGE)
        .await?
        .context("the built-in busybox image is missing")?
        .id;
    let floor_logs = dir.join("floor-logs");
    let running = RunningWatch::start(client.clone()).await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);

    let (mut kubelet_single, mut floor_single) = (Vec::new(), Vec::new());
    for run in 0..args.single_runs {
        kubelet_single.extend(kubelet_pods(&pods, &running, &format!("single-{run}"), 1).await?);
        remove_pods(&pods, &cri).await?;
        floor_single.extend(floor_pods(&cri, &image, &floor_logs, &format!("s{run}"), 1).await?);
    }
    let median = |v: &mut Vec<Duration>| {
        v.sort();
        v.get(v.len() / 2)
            .map_or(0.0, |d| round3(d.as_secs_f64() * 1000.0))
    };
    let (k1, f1) = (median(&mut kubelet_single), median(&mut floor_single));
    let line = |pods: usize, runs: usize| json!({"pods": pods, "runs": runs, "load1": load1()});
    out.emit(
        "cri-floor",
        merge(line(1, args.single_runs), json!({"p50_ms": f1})),
    );
    out.emit(
        "pod-startup",
        merge(
            line(1, args.single_runs),
            json!({
                "p50_ms": k1, "peer": "cri-floor", "peer_p50_ms": f1,
                "ratio": round3(k1 / f1), "target_ratio": 1.5,
            }),
        ),
    );

    let many = kubelet_pods(&pods, &running, "many", args.pods).await?;
    let rest = args.rss_pods.saturating_sub(args.pods);
    if rest > 0 {
        kubelet_pods(&pods, &running, "rest", rest).await?;
    }
    let mut rss = [None; 3];
    for _ in 0..5 {
        for (max, now) in rss.iter_mut().zip(kubelet.rss_kb()) {
            *max = (*max).max(now);
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    remove_pods(&pods, &cri).await?;
    let floor_many = floor_pods(&cri, &image, &floor_logs, "m", args.pods).await?;
    let (kh, fh) = (hist(&many)?, hist(&floor_many)?);
    out.emit(
        "cri-floor",
        merge(
            line(args.pods, 1),
            json!({"p50_ms": ms(&fh, 0.5), "p99_ms": ms(&fh, 0.99)}),
        ),
    );
    out.emit(
        "pod-startup",
        merge(
            line(args.pods, 1),
            json!({
                "p50_ms": ms(&kh, 0.5), "p99_ms": ms(&kh, 0.99), "peer": "cri-floor",
                "peer_p50_ms": ms(&fh, 0.5), "peer_p99_ms": ms(&fh, 0.99),
                "ratio_p99": round3(ms(&kh, 0.99) / ms(&fh, 0.99)), "target_ratio_p99": 1.25,
            }),
        ),
    );
    out.emit(
        "kubelet-rss",
        merge(
            line(args.pods.max(args.rss_pods), 1),
            json!({"rss_mb": mb(rss[0]), "anon_mb": mb(rss[1]), "file_mb": mb(rss[2]),
                   "target_mb": 40}),
        ),
    );
    running.task.abort();
    kubelet.stop().await;

    super::eviction::eviction(
        &out,
        &client,
        &kubeconfig,
        dir,
        &data,
        NAMESPACE,
        NODE,
        args.eviction_runs,
    )
    .await?;

    hollow(args, &out, &client, &kubeconfig, dir).await
}

fn hist(samples: &[Duration]) -> Result<hdrhistogram::Histogram<u64>> {
    let mut h = histogram();
    for d in samples {
        h.record(micros(*d))?;
    }
    Ok(h)
}

/// When the watch first saw each pod Running.
struct RunningWatch {
    seen: Arc<Mutex<HashMap<String, Instant>>>,
    changed: tokio::sync::watch::Receiver<usize>,
    task: tokio::task::JoinHandle<()>,
}

impl RunningWatch {
    async fn start(client: kube::Client) -> Result<RunningWatch> {
        let seen: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
        let (tx, changed) = tokio::sync::watch::channel(0);
        let (synced_tx, synced) = tokio::sync::oneshot::channel();
        let pods: Api<Pod> = Api::namespaced(client, NAMESPACE);
        let record = seen.clone();
        let task = tokio::spawn(async move {
            let mut synced_tx = Some(synced_tx);
            let stream = watcher::watcher(pods, watcher::Config::default());
            futures::pin_mut!(stream);
            while let Some(Ok(e)) = stream.next().await {
                let pod = match e {
                    Event::Apply(p) => p,
                    Event::InitDone => {
                        synced_tx.take().map(|s| s.send(()));
                        continue;
                    }
                    _ => continue,
                };
                if pod.status.and_then(|s| s.phase).as_deref() == Some("Running") {
                    let name = pod.metadata.name.unwrap_or_default();
                    record.lock().entry(name).or_insert_with(Instant::now);
                    tx.send_modify(|n| *n += 1);
                }
            }
        });
        synced
            .await
            .context("the pod watch ended before it synced")?;
        Ok(RunningWatch {
            seen,
            changed,
            task,
        })
    }
}

/// Creates `count` pods named `<prefix>-<i>` at once and returns each one's created → Running.
async fn kubelet_pods(
    pods: &Api<Pod>,
    running: &RunningWatch,
    prefix: &str,
    count: usize,
) -> Result<Vec<Duration>> {
    let names: Vec<String> = (0..count).map(|i| format!("{prefix}-{i}")).collect();
    let creates = names.iter().map(|name| async move {
        let started = Instant::now();
        pods.create(&PostParams::default(), &pod(name, None))
            .await?;
        anyhow::Ok(started)
    });
    let started = futures::future::try_join_all(creates).await?;
    let mut changed = running.changed.clone();
    let all = tokio::time::timeout(
        Duration::from_secs(120),
        changed.wait_for(|_| names.iter().all(|n| running.seen.lock().contains_key(n))),
    )
    .await;
    if all.is_err() {
        bail!("not all of {count} pods were Running within 120 s");
    }
    let seen = running.seen.lock();
    Ok(names
        .iter()
        .zip(started)
        .map(|(n, t)| seen[n].duration_since(t))
        .collect())
}

/// Deletes every pod of `pods` (grace 0) and waits until the runtime has no sandbox left.
pub(super) async fn remove_pods(pods: &Api<Pod>, cri: &CriClient) -> Result<()> {
    let now = DeleteParams::default().grace_period(0);
    pods.delete_collection(&now, &Default::default()).await?;
    for _ in 0..600 {
        if cri.list_pod_sandboxes(HashMap::new()).await?.is_empty() {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    bail!("the kubelet left sandboxes behind after the pods were deleted")
}

/// The floor: `count` pods' sandboxes and containers, from the configs the kubelet would
/// build, created at once straight through CRI; returns each one's start time, then removes
/// them.
async fn floor_pods(
    cri: &CriClient,
    image: &str,
    logs: &Path,
    prefix: &str,
    count: usize,
) -> Result<Vec<Duration>> {
    let starts = (0..count).map(|i| async move {
        let uid = format!("floor-{prefix}-{i}");
        let p = pod(&uid, Some(&uid));
        let log_dir = logs.join(&uid);
        std::fs::create_dir_all(log_dir.join("app"))?;
        let container = &p.spec.as_ref().context("spec")?.containers[0];
        let started = Instant::now();
        let mut sandbox = sandbox_config(&p, 0, &log_dir, &[]);
        // a cgroup of its own, as the kubelet's pods have (runc makes it; the kubelet's own
        // cgroup writes are its cost)
        if let Some(linux) = sandbox.linux.as_mut() {
            linux.cgroup_parent = floor_cgroup(&uid).to_cgroupfs();
        }
        let id = cri.run_pod_sandbox(sandbox.clone(), "").await?;
        let security = security_context::container(
            &p,
            container,
            &ImageUser::of(None),
            &NodeSecurity::default(),
            &[],
        )
        .map_err(anyhow::Error::msg)?;
        let config = container_config(&p, container, image, 0, Vec::new(), Vec::new(), security);
        let c = cri.create_container(&id, config, sandbox).await?;
        cri.start_container(&c).await?;
        anyhow::Ok((started.elapsed(), id, c))
    });
    let done = futures::future::try_join_all(starts).await?;
    let cgroups = Cgroupfs::new(Arc::new(RealCgroupFs))?;
    for (i, (_, sandbox, container)) in done.iter().enumerate() {
        cri.stop_container(container, 0).await?;
        cri.stop_pod_sandbox(sandbox).await?;
        cri.remove_pod_sandbox(sandbox).await?;
        remove_cgroup(&cgroups, &floor_cgroup(&format!("floor-{prefix}-{i}")));
    }
    remove_cgroup(&cgroups, &CgroupName::parse(FLOOR_CGROUPS));
    Ok(done.into_iter().map(|(d, ..)| d).collect())
}

/// Where the floor's pods' cgroups go, beside the kubelet's `kubepods`.
const FLOOR_CGROUPS: &str = "/skiff-bench-floor";

/// Removes a floor cgroup once its pod is gone; one still busy is left with a warning.
fn remove_cgroup(cgroups: &Cgroupfs, name: &CgroupName) {
    if let Err(e) = cgroups.destroy(name) {
        tracing::warn!(cgroup = %name, error = %e, "removing a floor pod's cgroup");
    }
}

fn floor_cgroup(uid: &str) -> CgroupName {
    CgroupName::parse(FLOOR_CGROUPS).child(&format!("pod{uid}"))
}

/// Writes per second, counted from a watch: each write falls in the second `when` gives it.
fn count_writes<K>(
    api: Api<K>,
    buckets: Arc<Mutex<HashMap<i64, u64>>>,
    when: impl Fn(&K) -> Timestamp + Send + 'static,
) -> tokio::task::JoinHandle<()>
where
    K: Resource<DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + 'static,
{
    tokio::spawn(async move {
        let stream = watcher::watcher(api, watcher::Config::default());
        futures::pin_mut!(stream);
        while let Some(Ok(e)) = stream.next().await {
            if let Event::Apply(object) = e {
                *buckets.lock().entry(when(&object).as_second()).or_default() += 1;
            }
        }
    })
}

/// The hollow run: register the nodes, let one renewal period pass, count their writes.
async fn hollow(
    args: &PodBenchArgs,
    out: &Emitter,
    client: &kube::Client,
    kubeconfig: &Path,
    dir: &Path,
) -> Result<()> {
    let count = args.hollow_nodes.to_string();
    let data = dir.join("hollow");
    let started = Instant::now();
    let child = KubeletChild::start(
        kubeconfig,
        &dir.join("hollow.log"),
        &[
            "--hollow",
            "--count",
            &count,
            "--node-name-prefix",
            "hollow",
            "--data-dir",
            data.to_str().context("path")?,
        ],
    )
    .await?;
    let register_s = started.elapsed().as_secs_f64();
    let origin = Timestamp::now().as_second();
    let (leases, nodes) = (Arc::default(), Arc::default());
    // a Lease's write second is its renewTime, when its node wrote it (delivery under load
    // bunches events); a Node's is when the watch saw it
    let renewed = |l: &Lease| {
        let renew = l.spec.as_ref().and_then(|s| s.renew_time.as_ref());
        renew.map_or_else(Timestamp::now, |t| t.0)
    };
    let tasks = [
        count_writes(
            Api::<Lease>::namespaced(client.clone(), "kube-node-lease"),
            Arc::clone(&leases),
            renewed,
        ),
        count_writes(Api::<Node>::all(client.clone()), Arc::clone(&nodes), |_| {
            Timestamp::now()
        }),
    ];
    // every node renews within one period (10 s plus jitter) of its registration
    let warmup = 12;
    tokio::time::sleep(Duration::from_secs(warmup + args.window_s)).await;
    let [rss, ..] = child.rss_kb();
    let peak = std::fs::read_to_string(format!("/proc/{}/status", child.pid))
        .ok()
        .and_then(|s| proc_status_kb(&s, "VmHWM"));
    for t in tasks {
        t.abort();
    }
    child.stop().await;
    let window = warmup..warmup + args.window_s;
    let in_window = |b: &Arc<Mutex<HashMap<i64, u64>>>| -> (u64, u64) {
        let b = b.lock();
        let per_sec: Vec<u64> = window
            .clone()
            .map(|s| b.get(&(origin + s as i64)).copied().unwrap_or(0))
            .collect();
        (per_sec.iter().sum(), per_sec.into_iter().max().unwrap_or(0))
    };
    let ((lease_total, lease_max), (node_total, _)) = (in_window(&leases), in_window(&nodes));
    let rate = |n: u64| round3(n as f64 / args.window_s as f64);
    out.emit(
        "hollow",
        json!({
            "nodes": args.hollow_nodes, "load1": load1(), "register_s": round3(register_s),
            "window_s": args.window_s,
            "lease_writes_per_sec": rate(lease_total), "node_writes_per_sec": rate(node_total),
            "busiest_second_lease_writes": lease_max,
            "peer": "upstream renew interval (10 s)",
            "peer_lease_writes_per_sec": args.hollow_nodes as f64 / 10.0,
            "rss_mb": mb(rss), "peak_mb": mb(peak), "target_rss_mb": 300,
        }),
    );
    Ok(())
}
