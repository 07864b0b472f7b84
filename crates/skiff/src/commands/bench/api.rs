//! `skiff bench api`: the API server as a client sees it. Starts `skiff apiserver` as a child
//! process (embedded store, or `--backend etcd` against an etcd started in the same run), talks
//! to it over HTTPS with the admin kubeconfig through `kube::Client`, and prints one JSON object
//! per result as it is measured:
//!
//! - `api-create`: pods POSTed by `clients` concurrent clients (throughput, p50/p99);
//! - `api-list`, `api-list-paged`: `GET /api/v1/pods` whole, and with `limit=500` following
//!   `continue` as kubectl does (`ms` is the mean);
//! - `api-rss`: the server's VmRSS and VmHWM from `/proc/PID/status` at start and after each
//!   phase, the RSS split into anonymous (heap) and file-backed (binary) pages (`etcd_rss_mb`
//!   too with `--backend etcd`);
//! - `api-watch`: delivery latency of configmap updates to many concurrent watches, over
//!   HTTP/2 as client-go opens them or one HTTP/1.1 connection each as kube-rs does
//!   ([`watch`]).
//!
//! `--gates` measures the request pipeline's gates instead ([`gates`]), `--crd` custom
//! resources ([`crd`]).
//!
//! Client and server share the host's cores, so every figure includes the client's own work
//! (TLS, HTTP, and JSON where a workload must parse); each line carries `cores`, and the timed
//! lines `server_cpu_s`/`client_cpu_s` (and `etcd_cpu_s`), to say how the cores were split.
//! Request bodies are serialized before the clock starts and sent as raw bytes, so client-side
//! serde does not dominate the create figures.

use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use bytes::Bytes;
use hdrhistogram::Histogram;
use http::{Method, Request, header};
use kube::client::Body;
use serde::Deserialize;
use serde_json::{Value, json};
use skiff_store::etcd_process::EtcdProcess;
use tokio::io::{AsyncBufReadExt as _, BufReader};
use tokio::process::{Child, Command};

use crate::commands::UsageError;

mod crd;
mod fairness;
mod gates;
mod watch;

/// Options of `skiff bench api`.
#[derive(Debug, Clone, clap::Args)]
pub struct ApiBenchArgs {
    /// Store behind the API server: `embedded` (in the server process) or `etcd` (a real etcd
    /// started on loopback for this run).
    #[arg(long, default_value = "embedded")]
    pub backend: String,
    /// Smaller run: 1,000 pods, 100 watchers, 20 updates, 3 lists (each unless given).
    #[arg(long)]
    pub quick: bool,
    /// Pods created in all, warm-up included [default: 10000, quick 1000].
    #[arg(long)]
    pub pods: Option<usize>,
    /// Of those, pods created before the clock starts (connections and TLS sessions warm up)
    /// [default: 10 per client, at most a tenth of the pods].
    #[arg(long)]
    pub warmup: Option<usize>,
    /// Concurrent clients creating pods.
    #[arg(long, default_value_t = 32)]
    pub clients: usize,
    /// Times each LIST form is repeated [default: 10, quick 3].
    #[arg(long)]
    pub lists: Option<usize>,
    /// Concurrent watches of the configmaps in namespace `bench` [default: 1000, quick 100].
    #[arg(long)]
    pub watchers: Option<usize>,
    /// Configmap updates whose delivery is measured [default: 100, quick 20].
    #[arg(long)]
    pub updates: Option<usize>,
    /// Milliseconds between those updates, so the figure is delivery, not a burst.
    #[arg(long, default_value_t = 20)]
    pub update_interval_ms: u64,
    /// How the watches connect: `h2` multiplexes them as client-go does, `http1` opens one
    /// connection per watch as kube-rs does.
    #[arg(long, value_enum, default_value = "h2")]
    pub watch_protocol: watch::Protocol,
    /// Watches per HTTP/2 connection (the API server, like kube-apiserver, allows 100).
    #[arg(long, default_value_t = 100)]
    pub streams_per_connection: usize,
    /// Only the pod creates, through three API servers in turn: without the gates, and with
    /// them (RBAC with 1,000 RoleBindings, the admission chain) for a client certificate and
    /// for a bearer token ([`gates`]).
    #[arg(long)]
    pub gates: bool,
    /// Custom resources instead: their creates against ConfigMaps', the time from a CRD's
    /// create to its first object, and discovery and OpenAPI with 200 CRDs ([`crd`]).
    #[arg(long)]
    pub crd: bool,
    /// API Priority and Fairness instead: a well-behaved client's latency while another floods
    /// the server with LISTs from `--clients` loops, with APF and without ([`fairness`]).
    #[arg(long)]
    pub fairness: bool,
    /// Seconds each phase of `--fairness` lasts.
    #[arg(long, default_value_t = 10)]
    pub phase_seconds: u64,
}

/// `ApiBenchArgs` with the quick/full defaults resolved.
struct Plan {
    pods: usize,
    warmup: usize,
    clients: usize,
    lists: usize,
    watchers: usize,
    updates: usize,
    interval: Duration,
    protocol: watch::Protocol,
    streams_per_connection: usize,
}

impl Plan {
    fn from_args(args: &ApiBenchArgs) -> Plan {
        let pick = |v: Option<usize>, full: usize, quick: usize| {
            v.unwrap_or(if args.quick { quick } else { full })
        };
        let pods = pick(args.pods, 10_000, 1_000);
        let clients = args.clients.max(1);
        Plan {
            pods,
            warmup: args
                .warmup
                .unwrap_or((clients * 10).min(pods / 10))
                .min(pods),
            clients,
            lists: pick(args.lists, 10, 3).max(1),
            watchers: pick(args.watchers, 1_000, 100),
            updates: pick(args.updates, 100, 20),
            interval: Duration::from_millis(args.update_interval_ms),
            protocol: args.watch_protocol,
            streams_per_connection: args.streams_per_connection.max(1),
        }
    }
}

/// Namespace every workload writes in.
const NAMESPACE: &str = "bench";

pub async fn run(args: ApiBenchArgs) -> Result<()> {
    let plan = Plan::from_args(&args);
    ensure_open_files(plan.watchers + plan.clients + 256)?;
    if args.gates || args.crd || args.fairness {
        if args.backend != "embedded" {
            return Err(UsageError(
                "--gates, --crd and --fairness run on the embedded store only".into(),
            )
            .into());
        }
        let out = Emitter {
            backend: args.backend.clone(),
            cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
        };
        if args.fairness {
            let phase = Duration::from_secs(args.phase_seconds.max(1));
            return fairness::run(&plan, phase, &out).await;
        }
        return match args.crd {
            true => crd::run(&plan, &out).await,
            false => gates::run(&plan, &out).await,
        };
    }
    let tmp = tempfile::tempdir()?;
    let etcd = match args.backend.as_str() {
        "embedded" => None,
        "etcd" => Some(
            EtcdProcess::start()
                .await
                .context("starting etcd (Debian etcd-server)")?,
        ),
        other => {
            return Err(
                UsageError(format!("--backend {other:?}: expected embedded or etcd")).into(),
            );
        }
    };
    let endpoint = etcd.as_ref().map(|e| format!("etcd://{}", e.endpoint()));
    let mut server = ServerChild::start(tmp.path(), endpoint.as_deref()).await?;
    let out = Emitter {
        backend: args.backend.clone(),
        cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
    };
    let result = workloads(&plan, &server, &out, etcd.as_ref()).await;
    server.stop().await;
    drop(etcd);
    drop(tmp);
    result
}

async fn workloads(
    plan: &Plan,
    server: &ServerChild,
    out: &Emitter,
    etcd: Option<&EtcdProcess>,
) -> Result<()> {
    let rss = |objects: usize, phase: &str| -> Result<()> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", server.pid))
            .context("reading the apiserver's /proc status")?;
        let mut fields = json!({
            "objects": objects,
            "phase": phase,
            "rss_mb": mb(proc_status_kb(&status, "VmRSS")),
            "peak_mb": mb(proc_status_kb(&status, "VmHWM")),
            // RSS split: heap and other anonymous memory / the mapped binary and files.
            "anon_mb": mb(proc_status_kb(&status, "RssAnon")),
            "file_mb": mb(proc_status_kb(&status, "RssFile")),
        });
        if let Some(etcd) = etcd {
            let status = std::fs::read_to_string(format!("/proc/{}/status", etcd.pid()))?;
            fields["etcd_rss_mb"] = mb(proc_status_kb(&status, "VmRSS"));
        }
        out.emit("api-rss", fields);
        Ok(())
    };
    let mut processes = vec![
        ("server", server.pid.to_string()),
        ("client", "self".into()),
    ];
    if let Some(etcd) = etcd {
        processes.push(("etcd", etcd.pid().to_string()));
    }
    let cpu = CpuMeter { processes };
    let config = server.config().await?;
    let client = kube::Client::try_from(config.clone())?;
    rss(0, "start")?;
    send_ok(
        &client,
        Method::POST,
        "/api/v1/namespaces",
        "application/json",
        Bytes::from(serde_json::to_vec(&json!({
            "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE},
        }))?),
    )
    .await?;

    let created = create_workload(&client, plan, &cpu).await?;
    out.emit(
        "api-create",
        merge(
            created.cpu,
            json!({
                "clients": plan.clients,
                "count": created.ops,
                "warmup": plan.warmup,
                "pod_bytes": created.body_bytes,
                "ops_per_sec": (created.ops as f64 / created.elapsed.as_secs_f64()).round(),
                "p50_ms": ms(&created.latency, 0.5),
                "p99_ms": ms(&created.latency, 0.99),
                "max_ms": max_ms(&created.latency),
            }),
        ),
    );
    rss(plan.pods, "created")?;

    for (bench, paged) in [("api-list", false), ("api-list-paged", true)] {
        let before = cpu.snapshot();
        let list = list_workload(&client, plan, paged).await?;
        out.emit(
            bench,
            merge(cpu.used_since(&before), list.fields(plan.pods)),
        );
    }
    rss(plan.pods, "listed")?;

    if plan.watchers > 0 && plan.updates > 0 {
        let watched = watch::run(&client, &config, plan, &cpu).await?;
        out.emit(
            "api-watch",
            merge(
                watched.cpu,
                json!({
                    "watchers": plan.watchers,
                    "protocol": plan.protocol.name(),
                    "connections": watched.connections,
                    "updates": plan.updates,
                    "interval_ms": plan.interval.as_millis() as u64,
                    "events": watched.delivery.len(),
                    "establish_ms": round3(watched.establish.as_secs_f64() * 1000.0),
                    "span_ms": round3(watched.span.as_secs_f64() * 1000.0),
                    "p50_ms": ms(&watched.delivery, 0.5),
                    "p99_ms": ms(&watched.delivery, 0.99),
                    "max_ms": max_ms(&watched.delivery),
                    "update_p50_ms": ms(&watched.update, 0.5),
                    "update_p99_ms": ms(&watched.update, 0.99),
                }),
            ),
        );
        rss(plan.pods, "watched")?;
    }
    Ok(())
}

/// CPU time the processes of a run use (from `/proc/PID/stat`), so a figure can be read against
/// how the shared cores were split between server, client and etcd.
pub(super) struct CpuMeter {
    /// Field-name prefix and `/proc` entry (`self` for this process).
    pub(super) processes: Vec<(&'static str, String)>,
}

impl CpuMeter {
    pub(super) fn snapshot(&self) -> Vec<Option<f64>> {
        self.processes
            .iter()
            .map(|(_, pid)| {
                let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
                proc_stat_cpu_seconds(&stat)
            })
            .collect()
    }

    /// `{"server_cpu_s": …, "client_cpu_s": …}`: CPU seconds used since `before`.
    pub(super) fn used_since(&self, before: &[Option<f64>]) -> Value {
        let mut used = serde_json::Map::new();
        for ((name, _), (now, then)) in self
            .processes
            .iter()
            .zip(self.snapshot().iter().zip(before))
        {
            if let (Some(now), Some(then)) = (now, then) {
                used.insert(format!("{name}_cpu_s"), json!(round3(now - then)));
            }
        }
        Value::Object(used)
    }
}

/// User plus system CPU seconds of a process from its `/proc/PID/stat` line (fields 14 and 15,
/// in USER_HZ ticks, which Linux fixes at 100 for user space).
fn proc_stat_cpu_seconds(stat: &str) -> Option<f64> {
    // the command name (field 2) may hold spaces; fields after it start at 3 (`state`)
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace().skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some((utime + stime) as f64 / 100.0)
}

/// `b`'s fields added to `a`'s (both objects).
/// `v`'s fields, each name prefixed with `p_` (`cpu_s` → `create_cpu_s`).
pub(super) fn prefixed(v: Value, p: &str) -> Value {
    match v {
        Value::Object(m) => m
            .into_iter()
            .map(|(k, v)| (format!("{p}_{k}"), v))
            .collect::<serde_json::Map<_, _>>()
            .into(),
        other => other,
    }
}

pub(super) fn merge(a: Value, b: Value) -> Value {
    match (a, b) {
        (Value::Object(mut a), Value::Object(b)) => {
            a.extend(b);
            Value::Object(a)
        }
        (_, b) => b,
    }
}

/// Prints result lines, each with the backend and the host's core count.
pub(super) struct Emitter {
    pub(super) backend: String,
    pub(super) cores: usize,
}

impl Emitter {
    pub(super) fn emit(&self, bench: &str, fields: Value) {
        println!("{}", result_line(bench, &self.backend, self.cores, fields));
    }
}

/// One result line: `bench`, `backend` and `cores`, and the workload's own fields.
fn result_line(bench: &str, backend: &str, cores: usize, fields: Value) -> Value {
    let mut line = json!({ "bench": bench, "backend": backend, "cores": cores });
    if let (Some(line), Value::Object(fields)) = (line.as_object_mut(), fields) {
        line.extend(fields);
    }
    line
}

/// Latencies in microseconds, up to a day: at 150,000 pods the creation-to-Running lag of the
/// first pods passes ten minutes.
pub(super) fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 86_400_000_000, 3).expect("valid histogram bounds")
}

pub(super) fn micros(d: Duration) -> u64 {
    (d.as_micros() as u64).max(1)
}

/// The latency at quantile `q` of a histogram in microseconds, in milliseconds.
pub(super) fn ms(h: &Histogram<u64>, q: f64) -> f64 {
    h.value_at_quantile(q) as f64 / 1000.0
}

pub(super) fn max_ms(h: &Histogram<u64>) -> f64 {
    h.max() as f64 / 1000.0
}

/// Milliseconds to the microsecond, as the percentiles are.
pub(super) fn round3(ms: f64) -> f64 {
    (ms * 1000.0).round() / 1000.0
}

/// Kilobytes as megabytes (MiB) with one decimal, or null when the field was missing.
pub(super) fn mb(kb: Option<u64>) -> Value {
    kb.map_or(Value::Null, |kb| json!((kb as f64 / 102.4).round() / 10.0))
}

/// A `kB` field of `/proc/PID/status` (`VmRSS:   123456 kB`).
pub(crate) fn proc_status_kb(status: &str, field: &str) -> Option<u64> {
    status.lines().find_map(|line| {
        let rest = line.strip_prefix(field)?.strip_prefix(':')?;
        rest.split_whitespace().next()?.parse().ok()
    })
}

/// The soft and hard `Max open files` of `/proc/PID/limits` (`None` for `unlimited`).
fn open_files_limit(limits: &str) -> Option<(Option<u64>, Option<u64>)> {
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    let mut words = line["Max open files".len()..].split_whitespace();
    let mut next = || words.next().map(|w| w.parse().ok());
    Some((next()?, next()?))
}

/// Make sure this process (and so the server child, which inherits it) may hold `need` open
/// files: every watch is its own HTTP/1 connection, one descriptor on each side. Without libc,
/// the soft limit is raised towards the hard one with util-linux `prlimit` on our own pid.
pub(super) fn ensure_open_files(need: usize) -> Result<()> {
    let need = need as u64;
    let read = || -> Result<(Option<u64>, Option<u64>)> {
        let limits = std::fs::read_to_string("/proc/self/limits")?;
        open_files_limit(&limits).context("no `Max open files` in /proc/self/limits")
    };
    let (soft, hard) = read()?;
    if soft.is_none_or(|s| s >= need) {
        return Ok(());
    }
    if hard.is_some_and(|h| h < need) {
        bail!(
            "the open-file limit (soft {soft:?}, hard {hard:?}) is below the {need} descriptors \
             this run needs; raise it (`ulimit -n {need}`) or use fewer --watchers"
        );
    }
    let status = std::process::Command::new("prlimit")
        .arg(format!("--pid={}", std::process::id()))
        .arg(format!("--nofile={need}:"))
        .status();
    let (soft, _) = read()?;
    if soft.is_some_and(|s| s < need) {
        bail!(
            "the open-file soft limit {soft:?} is below the {need} descriptors this run needs \
             and `prlimit` could not raise it ({status:?}); run `ulimit -n {need}` first"
        );
    }
    eprintln!("skiff bench api: raised the open-file soft limit to {need}");
    Ok(())
}

/// The `skiff apiserver` child and how to reach it.
pub(crate) struct ServerChild {
    child: Child,
    pub(crate) pid: u32,
    kubeconfig: std::path::PathBuf,
    /// Panics the child reported on its stderr (which is passed on to ours).
    panics: Arc<AtomicUsize>,
}

impl ServerChild {
    /// Start `skiff apiserver` on a free loopback port and wait for its ready line.
    pub(crate) async fn start(
        dir: &std::path::Path,
        endpoint: Option<&str>,
    ) -> Result<ServerChild> {
        Self::start_with(dir, endpoint, &[]).await
    }

    /// [`ServerChild::start`] with more `skiff apiserver` arguments.
    pub(super) async fn start_with(
        dir: &std::path::Path,
        endpoint: Option<&str>,
        extra: &[&str],
    ) -> Result<ServerChild> {
        Self::start_from(&std::env::current_exe()?, dir, endpoint, extra).await
    }

    /// [`ServerChild::start_with`] from the `skiff` binary `exe` rather than this one (a
    /// benchmark comparing two builds starts each build's server).
    pub(super) async fn start_from(
        exe: &std::path::Path,
        dir: &std::path::Path,
        endpoint: Option<&str>,
        extra: &[&str],
    ) -> Result<ServerChild> {
        let mut cmd = Command::new(exe);
        cmd.args(["apiserver", "--secure-port", "0", "--data-dir"])
            .arg(dir)
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        if let Some(endpoint) = endpoint {
            cmd.args(["--datastore-endpoint", endpoint]);
        }
        if std::env::var_os("RUST_LOG").is_none() {
            cmd.env("RUST_LOG", "warn");
        }
        let mut child = cmd
            .spawn()
            .with_context(|| format!("starting {} apiserver", exe.display()))?;
        let pid = child.id().context("apiserver child has no pid")?;
        let panics = Arc::new(AtomicUsize::new(0));
        let mut stderr = BufReader::new(child.stderr.take().context("child stderr")?).lines();
        let counted = panics.clone();
        tokio::spawn(async move {
            while let Ok(Some(line)) = stderr.next_line().await {
                if line.contains("panicked at") {
                    counted.fetch_add(1, Ordering::Relaxed);
                }
                eprintln!("{line}");
            }
        });
        let mut lines = BufReader::new(child.stdout.take().context("child stdout")?).lines();
        while let Some(line) = lines.next_line().await? {
            if line.contains("ready") && line.contains("https://") {
                tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
                tracing::info!(pid, "apiserver child ready");
                return Ok(ServerChild {
                    child,
                    pid,
                    kubeconfig: dir.join("kubeconfig.yaml"),
                    panics,
                });
            }
        }
        bail!("skiff apiserver exited before it was ready")
    }

    /// Client configuration from the admin kubeconfig the server wrote.
    pub(crate) async fn config(&self) -> Result<kube::Config> {
        let kubeconfig = kube::config::Kubeconfig::read_from(&self.kubeconfig)
            .with_context(|| format!("reading {}", self.kubeconfig.display()))?;
        let options = kube::config::KubeConfigOptions::default();
        Ok(kube::Config::from_custom_kubeconfig(kubeconfig, &options).await?)
    }

    /// A kubeconfig for `user`, a client certificate from the cluster CA, written under the
    /// server's data dir `dir`; returns its path.
    pub(super) async fn kubeconfig_as(
        &self,
        dir: &std::path::Path,
        user: &str,
    ) -> Result<std::path::PathBuf> {
        let admin = self.config().await?;
        let pki = skiff_apiserver::pki::Pki::load(&dir.join("tls"))?;
        let path = dir.join(format!("{user}.kubeconfig"));
        pki.write_kubeconfig(&path, &admin.cluster_url.to_string(), user, None)?;
        Ok(path)
    }

    /// A client configuration for `user` (not in `system:masters`), from
    /// [`ServerChild::kubeconfig_as`].
    pub(super) async fn user_config(
        &self,
        dir: &std::path::Path,
        user: &str,
    ) -> Result<kube::Config> {
        let path = self.kubeconfig_as(dir, user).await?;
        let kubeconfig = kube::config::Kubeconfig::read_from(&path)?;
        let options = kube::config::KubeConfigOptions::default();
        Ok(kube::Config::from_custom_kubeconfig(kubeconfig, &options).await?)
    }

    /// Panics the child has reported so far.
    pub(crate) fn panics(&self) -> usize {
        self.panics.load(Ordering::Relaxed)
    }

    /// How the child exited, if it has.
    pub(crate) fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    pub(crate) async fn stop(&mut self) {
        let _ = self.child.kill().await;
    }
}

/// Send one request with a raw body; returns the response body, fully read, if the status is a
/// success, and fails with the body (a `Status`) otherwise.
pub(super) async fn send_ok(
    client: &kube::Client,
    method: Method,
    path: &str,
    content_type: &str,
    body: Bytes,
) -> Result<Bytes> {
    let req = Request::builder()
        .method(method.clone())
        .uri(path)
        .header(header::ACCEPT, "application/json")
        .header(header::CONTENT_TYPE, content_type)
        .body(Body::from(body))?;
    let resp = client.send(req).await?;
    let status = resp.status();
    let body = resp.into_body().collect_bytes().await?;
    if !status.is_success() {
        bail!(
            "{method} {path}: {status}: {}",
            String::from_utf8_lossy(&body)
        );
    }
    Ok(body)
}

async fn get(client: &kube::Client, path: &str) -> Result<Bytes> {
    send_ok(client, Method::GET, path, "application/json", Bytes::new()).await
}

/// A realistic pod, as a Deployment's ReplicaSet would create it: one container with ports,
/// env, resource requests and limits, a probe; labels and an owner-like template hash.
fn pod_json(i: usize) -> Vec<u8> {
    let pod = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": format!("bench-{i:06}"),
            "namespace": NAMESPACE,
            "labels": {
                "app.kubernetes.io/name": "bench",
                "app.kubernetes.io/component": "backend",
                "app.kubernetes.io/version": "1.0.0",
                "pod-template-hash": "7c9d8f6b5d",
                "tier": "backend",
            },
            "annotations": {"kubernetes.io/description": "skiff bench api"},
        },
        "spec": {
            "containers": [{
                "name": "app",
                "image": "registry.k8s.io/e2e-test-images/agnhost:2.53",
                "args": ["netexec", "--http-port=8080"],
                "ports": [{"name": "http", "containerPort": 8080, "protocol": "TCP"}],
                "env": [
                    {"name": "MODE", "value": "bench"},
                    {"name": "LOG_LEVEL", "value": "info"},
                ],
                "resources": {
                    "requests": {"cpu": "100m", "memory": "64Mi"},
                    "limits": {"cpu": "500m", "memory": "128Mi"},
                },
                "readinessProbe": {
                    "httpGet": {"path": "/healthz", "port": 8080},
                    "periodSeconds": 10,
                },
                "volumeMounts": [{"name": "cache", "mountPath": "/var/cache/app"}],
                "imagePullPolicy": "IfNotPresent",
            }],
            "volumes": [{"name": "cache", "emptyDir": {"sizeLimit": "256Mi"}}],
            "restartPolicy": "Always",
            "terminationGracePeriodSeconds": 30,
            "nodeSelector": {"kubernetes.io/os": "linux"},
            "tolerations": [{
                "key": "node.kubernetes.io/not-ready",
                "operator": "Exists",
                "effect": "NoExecute",
                "tolerationSeconds": 300,
            }],
        },
    });
    serde_json::to_vec(&pod).expect("a json! value serializes")
}

/// Throughput and latency of the create workload.
struct Created {
    ops: u64,
    elapsed: Duration,
    latency: Histogram<u64>,
    body_bytes: usize,
    /// CPU each process used while the clock ran.
    cpu: Value,
}

/// `plan.pods` pods created by `plan.clients` concurrent clients (see [`create_bodies`]).
async fn create_workload(client: &kube::Client, plan: &Plan, cpu: &CpuMeter) -> Result<Created> {
    let bodies = (0..plan.pods).map(|i| pod_json(i).into()).collect();
    let path = format!("/api/v1/namespaces/{NAMESPACE}/pods");
    create_bodies(client, plan, cpu, &path, bodies).await
}

/// `bodies` POSTed to `path` by `plan.clients` concurrent clients, the first `plan.warmup` of
/// them before the clock starts. Each client takes the next pre-serialized body and POSTs it.
async fn create_bodies(
    client: &kube::Client,
    plan: &Plan,
    cpu: &CpuMeter,
    path: &str,
    bodies: Vec<Bytes>,
) -> Result<Created> {
    let bodies = Arc::new(bodies);
    let body_bytes = bodies.first().map_or(0, |b| b.len());
    let warmup = plan.warmup.min(bodies.len());
    let phase = |range| create_phase(client, path, &bodies, range, plan.clients);
    phase(0..warmup).await?;
    let before = cpu.snapshot();
    let start = Instant::now();
    let latency = phase(warmup..bodies.len()).await?;
    Ok(Created {
        ops: latency.len(),
        elapsed: start.elapsed(),
        latency,
        body_bytes,
        cpu: cpu.used_since(&before),
    })
}

/// `clients` tasks POST the bodies `range` of `bodies`, each taking the next index; returns
/// their latencies merged.
async fn create_phase(
    client: &kube::Client,
    path: &str,
    bodies: &Arc<Vec<Bytes>>,
    range: std::ops::Range<usize>,
    clients: usize,
) -> Result<Histogram<u64>> {
    let path = path.to_string();
    let next = Arc::new(AtomicUsize::new(range.start));
    let end = range.end;
    // one task per client, so client work spreads over every core as real clients' would
    let tasks: Vec<_> = (0..clients)
        .map(|_| {
            let (client, bodies, next, path) =
                (client.clone(), bodies.clone(), next.clone(), path.clone());
            tokio::spawn(async move {
                let mut latency = histogram();
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= end {
                        break;
                    }
                    let t = Instant::now();
                    let body = bodies[i].clone();
                    send_ok(&client, Method::POST, &path, "application/json", body).await?;
                    latency.record(micros(t.elapsed()))?;
                }
                anyhow::Ok(latency)
            })
        })
        .collect();
    let mut latency = histogram();
    for h in futures::future::try_join_all(tasks).await? {
        latency.add(h?)?;
    }
    Ok(latency)
}

/// What repeated LISTs cost.
struct Listed {
    latency: Histogram<u64>,
    bytes: usize,
    pages: usize,
    items: usize,
}

impl Listed {
    fn fields(&self, objects: usize) -> Value {
        json!({
            "objects": objects,
            "items": self.items,
            "lists": self.latency.len(),
            "pages": self.pages,
            "bytes": self.bytes,
            "ms": round3(self.latency.mean() / 1000.0),
            "p50_ms": ms(&self.latency, 0.5),
            "p99_ms": ms(&self.latency, 0.99),
            "max_ms": max_ms(&self.latency),
        })
    }
}

/// The parts of a list response the paged LIST reads: the continue token and the item count.
#[derive(Deserialize)]
struct ListPage {
    metadata: ListMeta,
    items: Vec<serde::de::IgnoredAny>,
}

#[derive(Deserialize)]
struct ListMeta {
    #[serde(rename = "continue", default)]
    continue_: Option<String>,
}

/// `GET /api/v1/pods` `plan.lists` times, each timed until the body is fully read; `paged`
/// follows `continue` with `limit=500` as kubectl does, and so includes scanning each page for
/// its token. The item count is checked outside the clock.
async fn list_workload(client: &kube::Client, plan: &Plan, paged: bool) -> Result<Listed> {
    let mut latency = histogram();
    let (mut bytes, mut pages, mut items) = (0, 0, 0);
    for _ in 0..plan.lists {
        let t = Instant::now();
        let (mut got_bytes, mut got_pages, mut got_items) = (0, 0, 0);
        if paged {
            let mut token: Option<String> = None;
            loop {
                let path = match &token {
                    None => "/api/v1/pods?limit=500".to_string(),
                    Some(c) => format!("/api/v1/pods?limit=500&continue={}", url_escape(c)),
                };
                let body = get(client, &path).await?;
                let page: ListPage = serde_json::from_slice(&body)?;
                got_bytes += body.len();
                got_pages += 1;
                got_items += page.items.len();
                token = page.metadata.continue_.filter(|c| !c.is_empty());
                if token.is_none() {
                    break;
                }
            }
            latency.record(micros(t.elapsed()))?;
        } else {
            let body = get(client, "/api/v1/pods").await?;
            latency.record(micros(t.elapsed()))?;
            let page: ListPage = serde_json::from_slice(&body)?;
            (got_bytes, got_pages, got_items) = (body.len(), 1, page.items.len());
        }
        if got_items < plan.pods {
            bail!("LIST returned {got_items} pods, expected {}", plan.pods);
        }
        (bytes, pages, items) = (got_bytes, got_pages, got_items);
    }
    Ok(Listed {
        latency,
        bytes,
        pages,
        items,
    })
}

/// Percent-encode a continue token for a query string (tokens are base64, so `+`, `/`, `=`).
pub(super) fn url_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_status_fields_are_read_in_kilobytes() {
        let status = "Name:\tskiff\nVmHWM:\t  204800 kB\nVmRSS:\t  102400 kB\nThreads:\t3\n";
        assert_eq!(proc_status_kb(status, "VmRSS"), Some(102_400));
        assert_eq!(proc_status_kb(status, "VmHWM"), Some(204_800));
        assert_eq!(proc_status_kb(status, "VmSwap"), None);
        assert_eq!(mb(Some(102_400)), json!(100.0));
        assert_eq!(mb(None), Value::Null);
    }

    #[test]
    fn open_file_limits_parse_numbers_and_unlimited() {
        let limits = "Limit                     Soft Limit           Hard Limit           Units\n\
                      Max open files            1024                 524288               files\n\
                      Max locked memory         unlimited            unlimited            bytes\n";
        assert_eq!(open_files_limit(limits), Some((Some(1024), Some(524_288))));
        let unlimited =
            "Max open files            unlimited            unlimited            files\n";
        assert_eq!(open_files_limit(unlimited), Some((None, None)));
        assert_eq!(open_files_limit("Max processes 1 1 processes\n"), None);
    }

    #[test]
    fn percentiles_are_reported_in_milliseconds() {
        let mut h = histogram();
        for us in 1..=100u64 {
            h.record(us * 1000).unwrap();
        }
        // three significant figures: within 0.1% of the recorded value
        assert!((ms(&h, 0.5) - 50.0).abs() < 0.1);
        assert!((ms(&h, 0.99) - 99.0).abs() < 0.1);
        assert!((max_ms(&h) - 100.0).abs() < 0.1);
    }

    #[test]
    fn result_lines_carry_bench_backend_and_cores() {
        let line = result_line("api-list", "etcd", 2, json!({"objects": 10, "ms": 1.5}));
        assert_eq!(
            line,
            json!({"bench": "api-list", "backend": "etcd", "cores": 2, "objects": 10, "ms": 1.5})
        );
    }

    #[test]
    fn the_pod_is_realistic_sized_json_with_a_unique_name() {
        let body = pod_json(42);
        assert!((1000..=1500).contains(&body.len()), "{} bytes", body.len());
        let pod: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(pod["metadata"]["name"], "bench-000042");
        assert_eq!(pod["spec"]["containers"].as_array().unwrap().len(), 1);
    }

    #[test]
    fn cpu_seconds_are_utime_plus_stime_even_with_spaces_in_the_name() {
        let stat = "4242 (tokio worker) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 75 0 0 20 0 9 0";
        assert_eq!(proc_stat_cpu_seconds(stat), Some(3.25));
        assert_eq!(proc_stat_cpu_seconds("garbage"), None);
    }

    #[test]
    fn merged_fields_keep_both_sides() {
        let merged = merge(json!({"server_cpu_s": 1.0}), json!({"p99_ms": 2.0}));
        assert_eq!(merged, json!({"server_cpu_s": 1.0, "p99_ms": 2.0}));
    }

    #[test]
    fn continue_tokens_are_percent_encoded() {
        assert_eq!(url_escape("eyJ2Ijo+/x=="), "eyJ2Ijo%2B%2Fx%3D%3D");
    }

    #[test]
    fn quick_shrinks_only_what_was_not_given() {
        let args = ApiBenchArgs {
            backend: "embedded".into(),
            quick: true,
            pods: None,
            warmup: None,
            clients: 32,
            lists: None,
            watchers: Some(500),
            updates: None,
            update_interval_ms: 20,
            watch_protocol: watch::Protocol::H2,
            streams_per_connection: 100,
            gates: false,
            crd: false,
            fairness: false,
            phase_seconds: 10,
        };
        let plan = Plan::from_args(&args);
        assert_eq!(
            (
                plan.pods,
                plan.warmup,
                plan.watchers,
                plan.updates,
                plan.lists
            ),
            (1000, 100, 500, 20, 3)
        );
    }
}
