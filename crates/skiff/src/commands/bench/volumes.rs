//! `skiff bench volumes`: persistent storage end to end (issue 31), one JSON line per result.
//!
//! - `volumes-statefulset`, on real containerd: `skiff apiserver`, `skiff scheduler`, `skiff
//!   controller-manager` (every default controller) and a `skiff kubelet` with its managed
//!   containerd as children, the default class `local-path` applied as `skiff server` applies
//!   it. A StatefulSet of `--replicas` busybox pods is created and timed until every replica is
//!   Ready (`readyReplicas`, as the watch sees it), first without claims, then with one
//!   `volumeClaimTemplates` claim each (the default class: `WaitForFirstConsumer`, provisioned
//!   on the node the scheduler picks); the line gives both and their ratio. Once per pod
//!   management policy (`OrderedReady`, upstream's default, then `Parallel`). Each set is
//!   removed (its pods, claims and volumes) before the next.
//! - `volumes-scheduling` and `volumes-claims`, on hollow nodes (a `skiff kubelet --hollow`
//!   child; its own API server, scheduler and controller manager): `--claims` pods without
//!   volumes are created from 32 clients and timed until every one is bound (the peer); they
//!   are deleted, `--claims` claims of the default class are created, then as many pods each
//!   mounting its own claim, timed until every pod is bound and every claim `Bound`. The
//!   scheduling line gives pods/s with volumes against without (their ratio), the claims line
//!   claims bound per second; both with create-to-bound latency percentiles, and the scheduling
//!   line with what the API server did in each phase (watch events per kind, writes per verb
//!   and resource, from its `/metrics`).
//!
//! The containerd part needs root (containerd, CNI); `--only hollow` runs without it.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use futures::StreamExt;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{
    Namespace, PersistentVolume, PersistentVolumeClaim, Pod, ServiceAccount,
};
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::runtime::watcher::{self, Event};
use kube::{Api, Resource};
use parking_lot::Mutex;
use serde_json::{Value, json};
use skiff_kubelet::cri::CriClient;
use skiff_kubelet::images::BUSYBOX_IMAGE;

use super::api::{CpuMeter, Emitter, ServerChild, ensure_open_files, histogram, merge, micros};
use super::api::{ms, round3};
use super::controllers::{SkiffChild, start, start_hollow, watches};
use super::pods::{EVICTION_HARD, KubeletChild, load1, remove_pods};
use super::scheduler::create_all;
use crate::commands::UsageError;
use crate::commands::server::addons::ensure_local_storage;

/// Options of `skiff bench volumes`.
#[derive(Debug, Clone, clap::Args)]
pub struct VolumesBenchArgs {
    /// Replicas of the StatefulSet on real containerd.
    #[arg(long, default_value_t = 20)]
    pub replicas: usize,
    /// Claims (and pods) on the hollow nodes.
    #[arg(long, default_value_t = 1000)]
    pub claims: usize,
    /// Hollow nodes (110 pods each) [default: 20, or as many as the claims need if that is
    /// more].
    #[arg(long)]
    pub hollow_nodes: Option<usize>,
    /// Concurrent clients creating claims and pods on the hollow nodes.
    #[arg(long, default_value_t = 32)]
    pub clients: usize,
    /// Run one part only: `statefulset` (real containerd) or `hollow`.
    #[arg(long, value_enum)]
    pub only: Option<Part>,
    /// Seconds to wait for each phase before giving up.
    #[arg(long, default_value_t = 300)]
    pub timeout_s: u64,
}

/// The parts of the benchmark.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Part {
    Statefulset,
    Hollow,
}

const NAMESPACE: &str = "vol-bench";
/// The real node's name.
const NODE: &str = "vol-bench";
/// Pods a hollow node takes (the kubelet's `--max-pods` default, as upstream's).
const PODS_PER_NODE: usize = 110;
/// The pod management policies a StatefulSet is timed with: upstream's default first.
const POLICIES: [&str; 2] = ["OrderedReady", "Parallel"];

/// Hollow nodes for `args`: as given, else 20 or as many as the claims need; fewer than the
/// pods need is a usage error.
fn hollow_node_count(args: &VolumesBenchArgs) -> Result<usize, UsageError> {
    let need = args.claims.div_ceil(PODS_PER_NODE);
    let nodes = args.hollow_nodes.unwrap_or(need.max(20));
    if nodes < need {
        return Err(UsageError(format!(
            "--hollow-nodes {nodes}: {} claims need at least {need} hollow nodes of \
             {PODS_PER_NODE} pods",
            args.claims
        )));
    }
    Ok(nodes)
}

pub async fn run(args: VolumesBenchArgs) -> Result<()> {
    let nodes = hollow_node_count(&args)?;
    let out = Emitter {
        backend: "embedded".into(),
        cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
    };
    if args.only != Some(Part::Hollow) {
        let status = std::fs::read_to_string("/proc/self/status")?;
        if !status.lines().any(|l| l.starts_with("Uid:\t0")) {
            bail!(
                "skiff bench volumes needs root for its StatefulSet on containerd (containerd, \
                 CNI); `--only hollow` runs the hollow part alone"
            );
        }
        let dir = tempfile::tempdir()?;
        let result = statefulsets(&args, &out, dir.path()).await;
        keep_if_failed(dir, "statefulset", &result);
        result?;
    }
    if args.only != Some(Part::Statefulset) {
        ensure_open_files(4 * nodes + args.clients + 1024)?;
        let dir = tempfile::tempdir()?;
        let result = hollow(&args, nodes, &out, dir.path()).await;
        keep_if_failed(dir, "hollow", &result);
        result?;
    }
    Ok(())
}

/// Keeps `dir` (with the children's logs) if its part failed; removes it otherwise.
fn keep_if_failed(dir: tempfile::TempDir, part: &str, result: &Result<()>) {
    if result.is_err() {
        eprintln!(
            "skiff bench volumes: the {part} part's logs are kept in {}",
            dir.keep().display()
        );
    }
}

/// The API server child, the scheduler and the controller manager (every default controller)
/// against it, its client, and the default class and the bench namespace made.
struct ControlPlane {
    server: ServerChild,
    scheduler: SkiffChild,
    controller_manager: SkiffChild,
    client: kube::Client,
    kubeconfig: String,
}

impl ControlPlane {
    async fn start(dir: &Path) -> Result<ControlPlane> {
        let exe = std::env::current_exe()?;
        let server = ServerChild::start(&dir.join("api"), None).await?;
        let kubeconfig = dir
            .join("api/kubeconfig.yaml")
            .to_str()
            .context("path")?
            .to_string();
        let scheduler = start(
            &exe,
            &["scheduler", "--kubeconfig", &kubeconfig],
            &dir.join("scheduler.log"),
        )
        .await?;
        let controller_manager = start(
            &exe,
            &[
                "controller-manager",
                "--kubeconfig",
                &kubeconfig,
                "--leader-elect",
                "false",
            ],
            &dir.join("controller-manager.log"),
        )
        .await?;
        let client = kube::Client::try_from(server.config().await?)?;
        ensure_local_storage(&client).await?;
        let namespaces: Api<Namespace> = Api::all(client.clone());
        let ns = serde_json::from_value(json!({"metadata": {"name": NAMESPACE}}))?;
        namespaces.create(&PostParams::default(), &ns).await?;
        // pods are admitted once their namespace's default ServiceAccount exists
        let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), NAMESPACE);
        until(
            Duration::from_secs(60),
            "the default ServiceAccount",
            || {
                let accounts = accounts.clone();
                async move { Ok(accounts.get_opt("default").await?.is_some()) }
            },
        )
        .await?;
        Ok(ControlPlane {
            server,
            scheduler,
            controller_manager,
            client,
            kubeconfig,
        })
    }

    fn cpu(&self, more: &[(&'static str, u32)]) -> CpuMeter {
        let mut processes = vec![
            ("server", self.server.pid.to_string()),
            ("scheduler", self.scheduler.pid.to_string()),
            (
                "controller_manager",
                self.controller_manager.pid.to_string(),
            ),
        ];
        processes.extend(more.iter().map(|(name, pid)| (*name, pid.to_string())));
        CpuMeter { processes }
    }

    async fn stop(mut self) {
        self.controller_manager.stop().await;
        self.scheduler.stop().await;
        self.server.stop().await;
    }
}

/// Polls `check` every 100 ms until it says yes; fails after `limit`.
async fn until<F, Fut>(limit: Duration, what: &str, mut check: F) -> Result<()>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<bool>>,
{
    let deadline = Instant::now() + limit;
    loop {
        if check().await? {
            return Ok(());
        }
        if Instant::now() >= deadline {
            bail!("gave up waiting {limit:?} for {what}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A StatefulSet of `replicas` busybox pods, each with a claim of the default class when
/// `claims`.
fn statefulset(name: &str, replicas: usize, policy: &str, claims: bool) -> Value {
    let mut container = json!({"name": "app", "image": BUSYBOX_IMAGE,
                               "imagePullPolicy": "IfNotPresent", "command": ["sleep", "3600"]});
    let mut set = json!({
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "serviceName": name,
            "podManagementPolicy": policy,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"terminationGracePeriodSeconds": 0,
                         "automountServiceAccountToken": false},
            },
        },
    });
    if claims {
        container["volumeMounts"] = json!([{"name": "data", "mountPath": "/data"}]);
        set["spec"]["volumeClaimTemplates"] = json!([{
            "metadata": {"name": "data"},
            "spec": {"accessModes": ["ReadWriteOnce"],
                     "resources": {"requests": {"storage": "1Gi"}}},
        }]);
    }
    set["spec"]["template"]["spec"]["containers"] = json!([container]);
    set
}

/// Whether every one of the set's `replicas` is Ready, as its status says.
fn all_ready(set: &StatefulSet, replicas: usize) -> bool {
    set.status.as_ref().is_some_and(|s| {
        s.observed_generation >= set.metadata.generation
            && s.ready_replicas == Some(replicas as i32)
    })
}

/// The containerd part: one `volumes-statefulset` line per pod management policy.
async fn statefulsets(args: &VolumesBenchArgs, out: &Emitter, dir: &Path) -> Result<()> {
    let plane = ControlPlane::start(dir).await?;
    let data = dir.join("kubelet");
    // its server on a free loopback port (as the e2e tests' kubelets)
    let kubelet = KubeletChild::start_node(
        Path::new(&plane.kubeconfig),
        &dir.join("kubelet.log"),
        NODE,
        &data,
        &[
            "--address",
            "127.0.0.1",
            "--port",
            "0",
            "--node-ip",
            "127.0.0.1",
            "--eviction-hard",
            EVICTION_HARD,
        ],
    )
    .await?;
    let result = async {
        let cri = CriClient::connect(
            &data
                .join("containerd/containerd.sock")
                .display()
                .to_string(),
        )?;
        let cpu = plane.cpu(&[("kubelet", kubelet.pid)]);
        for policy in POLICIES {
            let mut lines = Vec::new();
            for claims in [false, true] {
                let name = format!(
                    "{}-{}",
                    if claims { "claims" } else { "plain" },
                    policy.to_lowercase()
                );
                let before = cpu.snapshot();
                let ready_s =
                    time_statefulset(args, &plane.client, &cri, &name, policy, claims).await?;
                lines.push((ready_s, cpu.used_since(&before)));
            }
            let [(without, _), (with, cpu_with)] = <[_; 2]>::try_from(lines).expect("two runs");
            out.emit(
                "volumes-statefulset",
                merge(
                    json!({
                        "replicas": args.replicas, "policy": policy, "load1": load1(),
                        "ready_s": round3(with), "peer": "no claims",
                        "peer_ready_s": round3(without), "ratio": round3(with / without),
                        "target_ratio": 1.3,
                    }),
                    cpu_with,
                ),
            );
        }
        anyhow::Ok(())
    }
    .await;
    kubelet.stop().await;
    plane.stop().await;
    result
}

/// Creates the StatefulSet and returns the seconds until all its replicas are Ready; then
/// removes it, its pods (and their sandboxes), its claims and their volumes.
async fn time_statefulset(
    args: &VolumesBenchArgs,
    client: &kube::Client,
    cri: &CriClient,
    name: &str,
    policy: &str,
    claims: bool,
) -> Result<f64> {
    let limit = Duration::from_secs(args.timeout_s);
    let sets: Api<StatefulSet> = Api::namespaced(client.clone(), NAMESPACE);
    let set: StatefulSet =
        serde_json::from_value(statefulset(name, args.replicas, policy, claims))?;
    let started = Instant::now();
    sets.create(&PostParams::default(), &set).await?;
    let ready = kube::runtime::wait::await_condition(sets.clone(), name, |s: Option<&_>| {
        s.is_some_and(|s| all_ready(s, args.replicas))
    });
    match tokio::time::timeout(limit, ready).await {
        Ok(r) => {
            r.with_context(|| format!("watching statefulset {name}"))?;
        }
        Err(_) => bail!("statefulset {name} was not Ready within {limit:?}"),
    }
    let ready_s = started.elapsed().as_secs_f64();

    sets.delete(name, &DeleteParams::default()).await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    remove_pods(&pods, cri).await?;
    if claims {
        let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), NAMESPACE);
        claims
            .delete_collection(&DeleteParams::default(), &ListParams::default())
            .await?;
        // the kubelet removes each volume's directory, then the volume
        let volumes: Api<PersistentVolume> = Api::all(client.clone());
        until(limit, "the claims' volumes to be deleted", || {
            let volumes = volumes.clone();
            async move {
                Ok(volumes
                    .list_metadata(&ListParams::default())
                    .await?
                    .items
                    .is_empty())
            }
        })
        .await?;
    }
    Ok(ready_s)
}

/// When a watch first saw each object of a kind in the bench namespace pass a test.
struct FirstSeen {
    seen: Arc<Mutex<HashMap<String, Instant>>>,
    count: tokio::sync::watch::Receiver<usize>,
    task: tokio::task::JoinHandle<()>,
}

impl FirstSeen {
    /// Starts watching the objects with `labels`; returns once the watch has listed.
    async fn start<K>(client: &kube::Client, labels: &str, test: fn(&K) -> bool) -> Result<Self>
    where
        K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
            + Clone
            + serde::de::DeserializeOwned
            + std::fmt::Debug
            + Send
            + 'static,
    {
        let seen: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
        let (count_tx, count) = tokio::sync::watch::channel(0usize);
        let (synced_tx, synced) = tokio::sync::oneshot::channel();
        let api: Api<K> = Api::namespaced(client.clone(), NAMESPACE);
        let config = watcher::Config::default().labels(labels);
        let record = seen.clone();
        let task = tokio::spawn(async move {
            let mut synced_tx = Some(synced_tx);
            let stream = watcher::watcher(api, config);
            futures::pin_mut!(stream);
            while let Some(Ok(e)) = stream.next().await {
                let object = match e {
                    Event::Apply(o) | Event::InitApply(o) => o,
                    Event::InitDone => {
                        synced_tx.take().map(|s| s.send(()));
                        continue;
                    }
                    Event::Delete(_) | Event::Init => continue,
                };
                if test(&object) {
                    let name = object.meta().name.clone().unwrap_or_default();
                    let mut seen = record.lock();
                    seen.entry(name).or_insert_with(Instant::now);
                    let _ = count_tx.send(seen.len());
                }
            }
        });
        synced.await.context("the watch ended before it listed")?;
        Ok(FirstSeen { seen, count, task })
    }

    /// Waits until `n` objects have passed; fails after `limit`.
    async fn wait_for(&self, n: usize, limit: Duration, what: &str) -> Result<()> {
        let mut count = self.count.clone();
        if tokio::time::timeout(limit, count.wait_for(|c| *c >= n))
            .await
            .is_err()
        {
            bail!("only {} of {n} {what} within {limit:?}", *count.borrow());
        }
        Ok(())
    }

    /// The seconds from `start` to the last object seen.
    fn span_s(&self, start: Instant) -> f64 {
        let last = self.seen.lock().values().max().copied().unwrap_or(start);
        last.duration_since(start).as_secs_f64()
    }

    /// Percentiles (ms) of the times from each object's `from` (by name) to when it passed.
    fn latency(&self, from: &[(String, Instant)]) -> Result<(f64, f64)> {
        let mut h = histogram();
        let seen = self.seen.lock();
        for (name, t) in from {
            if let Some(s) = seen.get(name) {
                h.record(micros(s.saturating_duration_since(*t)))?;
            }
        }
        Ok((ms(&h, 0.5), ms(&h, 0.99)))
    }
}

impl Drop for FirstSeen {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn is_scheduled(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.node_name.as_ref())
        .is_some()
}

fn is_bound(claim: &PersistentVolumeClaim) -> bool {
    claim.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound")
}

/// A hollow-node pod of phase `phase`, mounting claim `claim-<i>` when `with_claim`.
fn pod_json(phase: &str, i: usize, with_claim: bool) -> Vec<u8> {
    let mut pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": format!("{phase}-{i:05}"), "labels": {"phase": phase}},
        "spec": {"terminationGracePeriodSeconds": 0, "automountServiceAccountToken": false,
                 "containers": [{"name": "app", "image": BUSYBOX_IMAGE,
                                 "command": ["sleep", "3600"]}]},
    });
    if with_claim {
        pod["spec"]["volumes"] =
            json!([{"name": "data", "persistentVolumeClaim": {"claimName": claim_name(i)}}]);
        pod["spec"]["containers"][0]["volumeMounts"] =
            json!([{"name": "data", "mountPath": "/data"}]);
    }
    serde_json::to_vec(&pod).expect("json")
}

fn claim_name(i: usize) -> String {
    format!("claim-{i:05}")
}

/// A claim of the default class (`local-path`, `WaitForFirstConsumer`).
fn claim_json(i: usize) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": claim_name(i), "labels": {"phase": "volumes"}},
        "spec": {"accessModes": ["ReadWriteOnce"],
                 "resources": {"requests": {"storage": "1Gi"}}},
    }))
    .expect("json")
}

/// One timed batch of pods on the hollow nodes: pods/s from the first create to the last
/// binding, and the create-to-bound percentiles.
struct Scheduled {
    start: Instant,
    sent: Vec<(String, Instant)>,
    pods_per_sec: f64,
    span_s: f64,
    p50_ms: f64,
    p99_ms: f64,
    cpu: Value,
    /// What the API server did meanwhile: watch events sent per kind, writes per verb and
    /// resource.
    traffic: std::collections::BTreeMap<String, f64>,
}

/// Creates `n` pods of `phase` (each with its claim when `with_claims`) and waits until all
/// are bound; `also` is waited for too before the CPU is read.
async fn schedule(
    args: &VolumesBenchArgs,
    plane: &ControlPlane,
    cpu: &CpuMeter,
    phase: &str,
    with_claims: bool,
    also: Option<&FirstSeen>,
) -> Result<Scheduled> {
    let n = args.claims;
    let limit = Duration::from_secs(args.timeout_s);
    let bound = FirstSeen::start(&plane.client, &format!("phase={phase}"), is_scheduled).await?;
    let traffic = watches::traffic(&plane.client).await?;
    let before = cpu.snapshot();
    let start = Instant::now();
    let sent = create_all(
        &plane.client,
        &format!("/api/v1/namespaces/{NAMESPACE}/pods"),
        (0..n).map(|i| pod_json(phase, i, with_claims)).collect(),
        args.clients,
    )
    .await
    .with_context(|| format!("creating the {phase} pods"))?;
    bound.wait_for(n, limit, "pods bound").await?;
    if let Some(also) = also {
        also.wait_for(n, limit, "claims Bound").await?;
    }
    let cpu = cpu.used_since(&before);
    let traffic = watches::difference_f64(&traffic, &watches::traffic(&plane.client).await?);
    let sent: Vec<(String, Instant)> = sent
        .into_iter()
        .enumerate()
        .map(|(i, t)| (format!("{phase}-{i:05}"), t))
        .collect();
    let span_s = bound.span_s(start);
    let (p50_ms, p99_ms) = bound.latency(&sent)?;
    Ok(Scheduled {
        start,
        sent,
        pods_per_sec: round3(n as f64 / span_s.max(1e-3)),
        span_s,
        p50_ms,
        p99_ms,
        cpu,
        traffic,
    })
}

/// The hollow part: the `volumes-scheduling` and `volumes-claims` lines.
async fn hollow(args: &VolumesBenchArgs, nodes: usize, out: &Emitter, dir: &Path) -> Result<()> {
    let plane = ControlPlane::start(dir).await?;
    let exe = std::env::current_exe()?;
    let hollow = start_hollow(&exe, &plane.kubeconfig, nodes, "vol", dir, &[]).await?;
    let result = async {
        let cpu = plane.cpu(&[("hollow_nodes", hollow.pid)]);
        let n = args.claims;
        let limit = Duration::from_secs(args.timeout_s);

        // the peer: as many pods without volumes, then gone
        let plain = schedule(args, &plane, &cpu, "plain", false, None).await?;
        let pods: Api<Pod> = Api::namespaced(plane.client.clone(), NAMESPACE);
        pods.delete_collection(
            &DeleteParams::default().grace_period(0),
            &ListParams::default().labels("phase=plain"),
        )
        .await?;
        until(limit, "the pods without volumes to be gone", || {
            let pods = pods.clone();
            async move {
                Ok(pods
                    .list_metadata(&ListParams::default())
                    .await?
                    .items
                    .is_empty())
            }
        })
        .await?;

        let events_before = super::controllers::events_by_reason(&plane.client, NAMESPACE).await?;
        // the claims first (they wait for their pods), then a pod for each
        let t = Instant::now();
        create_all(
            &plane.client,
            &format!("/api/v1/namespaces/{NAMESPACE}/persistentvolumeclaims"),
            (0..n).map(claim_json).collect(),
            args.clients,
        )
        .await
        .context("creating the claims")?;
        let claims_created_s = t.elapsed().as_secs_f64();
        let bound_claims = FirstSeen::start(&plane.client, "phase=volumes", is_bound).await?;
        let with = schedule(args, &plane, &cpu, "volumes", true, Some(&bound_claims)).await?;
        let claims_span_s = bound_claims.span_s(with.start);
        // each claim from its pod's create
        let claim_sent: Vec<(String, Instant)> = with
            .sent
            .iter()
            .enumerate()
            .map(|(i, (_, t))| (claim_name(i), *t))
            .collect();
        let (claim_p50, claim_p99) = bound_claims.latency(&claim_sent)?;
        // the Events the phase with volumes added: "component reason" → [objects, occurrences]
        let mut events = super::controllers::events_by_reason(&plane.client, NAMESPACE).await?;
        for (key, [objects, occurrences]) in events_before {
            if let Some(e) = events.get_mut(&key) {
                *e = [e[0] - objects.min(e[0]), e[1] - occurrences.min(e[1])];
            }
        }
        events.retain(|_, e| e[0] > 0 || e[1] > 0);

        let common = json!({"pods": n, "nodes": nodes, "clients": args.clients,
                            "load1": load1()});
        out.emit(
            "volumes-scheduling",
            merge(
                merge(
                    common.clone(),
                    json!({
                        "pods_per_sec": with.pods_per_sec, "span_s": round3(with.span_s),
                        "p50_ms": with.p50_ms, "p99_ms": with.p99_ms,
                        "peer": "no volumes", "peer_pods_per_sec": plain.pods_per_sec,
                        "peer_span_s": round3(plain.span_s),
                        "peer_p50_ms": plain.p50_ms, "peer_p99_ms": plain.p99_ms,
                        "ratio": round3(with.pods_per_sec / plain.pods_per_sec),
                        "target_ratio": 0.7,
                        "peer_cpu": plain.cpu,
                        "traffic": with.traffic,
                        "peer_traffic": plain.traffic,
                        "events": events,
                    }),
                ),
                with.cpu,
            ),
        );
        out.emit(
            "volumes-claims",
            merge(
                common,
                json!({
                    "claims": n, "binding_mode": "WaitForFirstConsumer",
                    "claims_created_s": round3(claims_created_s),
                    "span_s": round3(claims_span_s),
                    "claims_bound_per_sec": round3(n as f64 / claims_span_s.max(1e-3)),
                    // from the claim's pod's create to the claim Bound
                    "p50_ms": claim_p50, "p99_ms": claim_p99,
                }),
            ),
        );
        anyhow::Ok(())
    }
    .await;
    hollow.stop().await;
    plane.stop().await;
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(claims: usize, hollow_nodes: Option<usize>) -> VolumesBenchArgs {
        VolumesBenchArgs {
            replicas: 20,
            claims,
            hollow_nodes,
            clients: 32,
            only: None,
            timeout_s: 300,
        }
    }

    #[test]
    fn hollow_nodes_default_to_twenty_or_room_for_the_claims_pods() {
        assert_eq!(hollow_node_count(&args(1000, None)).unwrap(), 20);
        assert_eq!(hollow_node_count(&args(5000, None)).unwrap(), 46);
        assert_eq!(hollow_node_count(&args(100, Some(1))).unwrap(), 1);
        let e = hollow_node_count(&args(1000, Some(5))).unwrap_err();
        assert!(e.0.contains("at least 10"), "{}", e.0);
    }

    #[test]
    fn the_statefulset_with_claims_differs_only_by_its_claim_template_and_mount() {
        let plain: StatefulSet =
            serde_json::from_value(statefulset("s", 5, "Parallel", false)).unwrap();
        let with: StatefulSet =
            serde_json::from_value(statefulset("s", 5, "Parallel", true)).unwrap();
        let (plain, with) = (plain.spec.unwrap(), with.spec.unwrap());
        assert!(plain.volume_claim_templates.is_none());
        let templates = with.volume_claim_templates.clone().unwrap();
        assert_eq!(templates[0].metadata.name.as_deref(), Some("data"));
        // the default class: no storageClassName
        assert!(
            templates[0]
                .spec
                .as_ref()
                .unwrap()
                .storage_class_name
                .is_none()
        );
        let mounts = |s: &k8s_openapi::api::apps::v1::StatefulSetSpec| {
            s.template.spec.as_ref().unwrap().containers[0]
                .volume_mounts
                .clone()
        };
        assert!(mounts(&plain).is_none());
        assert_eq!(mounts(&with).unwrap()[0].name, "data");
        assert_eq!(with.replicas, Some(5));
        assert_eq!(with.pod_management_policy.as_deref(), Some("Parallel"));
    }

    #[test]
    fn a_pod_with_volumes_mounts_its_own_claim() {
        let pod: Pod = serde_json::from_slice(&pod_json("volumes", 7, true)).unwrap();
        let volumes = pod.spec.unwrap().volumes.unwrap();
        let claim = volumes[0].persistent_volume_claim.as_ref().unwrap();
        assert_eq!(claim.claim_name, "claim-00007");
        let plain: Pod = serde_json::from_slice(&pod_json("plain", 7, false)).unwrap();
        assert_eq!(plain.metadata.name.as_deref(), Some("plain-00007"));
        assert!(plain.spec.unwrap().volumes.is_none());
    }
}
