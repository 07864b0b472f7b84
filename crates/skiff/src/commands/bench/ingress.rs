//! `skiff bench ingress`: Skiff's ingress controller against nginx (Debian's package) as the
//! same reverse proxy, to the same pod. Starts `skiff apiserver` and a real `skiff kubelet` as
//! children, runs one backend pod (nginx answering a short body) with its Service and
//! EndpointSlice, starts `skiff ingress` (a child, on a free loopback port) serving an Ingress
//! to it, and nginx (a child, on a free loopback port) proxying to the pod with upstream
//! keep-alive, an access log and the same forwarding headers. One load generator (hyper,
//! `--connections` keep-alive connections, each sending its next request once the last is
//! answered) drives nginx and Skiff's controller in turn, `--seconds` each, for `--rounds`
//! rounds (which goes first alternates: the machine's two cores also run the load generator,
//! the pod and the control plane, whose drift would otherwise favour one of them), then the
//! pod directly as the floor. Prints one JSON line per result:
//!
//! - `ingress-rps`: requests/s and p50/p99 through each proxy over all its rounds (`proxy`:
//!   `skiff`, `nginx`, `direct`), with the CPU the proxy's processes used (cores, and
//!   microseconds per request), the Skiff line with nginx's figures as its peer and the
//!   targets (≥ 1.0× the requests/s, p99 no worse);
//! - `ingress-new-rule`: from creating an Ingress for a new host to its first 200 through
//!   Skiff's controller, `--rule-runs` times (median and max, target ≤ 1 s).
//!
//! Needs root (containerd, CNI) and `nginx` on the PATH (`apt-get install nginx`).

use std::net::SocketAddr;
use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use parking_lot::Mutex;
use serde_json::{Value, json};
use skiff_kubelet::images::BUSYBOX_IMAGE;
use tokio::process::{Child, Command};

use super::api::{CpuMeter, Emitter, ServerChild, histogram, merge, micros, ms, round3};
use super::controllers::{SkiffChild, start_logging};
use super::pods::{KubeletChild, load1, remove_pods};

const NAMESPACE: &str = "ingress-bench";
const NODE: &str = "ingress-bench";
const HOST: &str = "bench.local";
/// The pod's one answer, small, as the body of a typical API response.
const BODY: &str = "hello from the bench pod";

/// Options of `skiff bench ingress`.
#[derive(Debug, Clone, clap::Args)]
pub struct IngressBenchArgs {
    /// Keep-alive connections of the load generator.
    #[arg(long, default_value_t = 64)]
    pub connections: usize,
    /// How long each proxy is driven in each round.
    #[arg(long, default_value_t = 10)]
    pub seconds: u64,
    /// Rounds of driving nginx and Skiff's controller in turn (the first of the two
    /// alternates), so that neither always runs in the other's wake.
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    /// How many new Ingress rules are timed until they serve.
    #[arg(long, default_value_t = 5)]
    pub rule_runs: usize,
}

pub async fn run(args: IngressBenchArgs) -> Result<()> {
    let status = std::fs::read_to_string("/proc/self/status")?;
    if !status.lines().any(|l| l.starts_with("Uid:\t0")) {
        bail!("skiff bench ingress needs root: the kubelet runs containerd and CNI");
    }
    which("nginx").context("skiff bench ingress compares with nginx: apt-get install nginx")?;
    let tmp = tempfile::tempdir()?;
    let mut server = ServerChild::start(&tmp.path().join("api"), None).await?;
    let result = bench(&args, &server, tmp.path()).await;
    server.stop().await;
    result
}

async fn bench(args: &IngressBenchArgs, server: &ServerChild, dir: &Path) -> Result<()> {
    let out = Emitter {
        backend: "embedded".into(),
        cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
    };
    let kubeconfig = dir.join("api/kubeconfig.yaml");
    let client = kube::Client::try_from(server.config().await?)?;
    apply(
        &client,
        json!({"apiVersion": "v1", "kind": "Namespace",
                          "metadata": {"name": NAMESPACE}}),
    )
    .await?;
    let (kubelet, cri) = KubeletChild::start_bench_node(&kubeconfig, dir, NODE).await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    let measured = measure(args, &out, &client, &kubeconfig, dir).await;
    remove_pods(&pods, &cri).await?;
    kubelet.stop().await;
    measured
}

async fn measure(
    args: &IngressBenchArgs,
    out: &Emitter,
    client: &kube::Client,
    kubeconfig: &Path,
    dir: &Path,
) -> Result<()> {
    let pod_addr = start_backend(client).await?;
    let ingress = IngressChild::start(kubeconfig, &dir.join("ingress.log")).await?;
    apply(client, ingress_class()).await?;
    apply(client, ingress_to("bench", HOST)).await?;
    wait_serving(ingress.addr, HOST).await?;
    let nginx = NginxChild::start(dir, pod_addr).await?;
    let driven = async {
        wait_serving(nginx.addr, HOST).await?;
        let mut theirs = Load::default();
        let mut ours = Load::default();
        for round in 0..args.rounds {
            let nginx_first = round % 2 == 0;
            for nginx_now in [nginx_first, !nginx_first] {
                if nginx_now {
                    let pids = nginx.workers();
                    theirs.add(load(nginx.addr, HOST, args, &pids).await?)?;
                } else {
                    ours.add(load(ingress.addr, HOST, args, &[ingress.pid]).await?)?;
                }
            }
        }
        anyhow::Ok((theirs, ours))
    }
    .await;
    nginx.stop().await;
    let (theirs, ours) = driven?;
    let direct = load(pod_addr, HOST, args, &[]).await?;
    let line = |proxy: &str, r: &Load| {
        let mut line = json!({"proxy": proxy, "connections": args.connections,
               "seconds": round3(r.elapsed), "requests": r.requests, "errors": r.errors,
               "failed": r.failed, "first_failure": r.first_failure, "rps": round3(r.rps()),
               "p50_ms": ms(&r.latency, 0.5), "p99_ms": ms(&r.latency, 0.99),
               "load1": load1()});
        if proxy != "direct" {
            line["rounds"] = json!(args.rounds);
            line["cpu_cores"] = json!(round3(r.cpu_s / r.elapsed));
            line["cpu_us_per_request"] = json!(round3(r.cpu_per_request() * 1e6));
        }
        line
    };
    out.emit("ingress-rps", line("direct", &direct));
    out.emit("ingress-rps", line("nginx", &theirs));
    out.emit(
        "ingress-rps",
        merge(
            line("skiff", &ours),
            json!({"peer": "nginx", "peer_rps": round3(theirs.rps()),
                   "peer_p99_ms": ms(&theirs.latency, 0.99),
                   "ratio_rps": round3(ours.rps() / theirs.rps()), "target_ratio_rps": 1.0,
                   "ratio_p99": round3(ms(&ours.latency, 0.99) / ms(&theirs.latency, 0.99)),
                   "target_ratio_p99": 1.0,
                   "ratio_cpu_per_request":
                       round3(ours.cpu_per_request() / theirs.cpu_per_request())}),
        ),
    );

    let mut times = Vec::new();
    for run in 0..args.rule_runs {
        let host = format!("new-{run}.local");
        let started = Instant::now();
        apply(client, ingress_to(&format!("new-{run}"), &host)).await?;
        wait_serving(ingress.addr, &host).await?;
        times.push(started.elapsed());
    }
    times.sort();
    let median = times.get(times.len() / 2).copied().unwrap_or_default();
    let max = times.last().copied().unwrap_or_default();
    out.emit(
        "ingress-new-rule",
        json!({"runs": args.rule_runs, "p50_ms": round3(median.as_secs_f64() * 1e3),
               "max_ms": round3(max.as_secs_f64() * 1e3), "target_ms": 1000,
               "load1": load1()}),
    );
    drop(ingress);
    Ok(())
}

/// Server-side applies `object` (its kind from `apiVersion`/`kind`).
async fn apply(client: &kube::Client, object: Value) -> Result<()> {
    let api_version = object["apiVersion"].as_str().context("an apiVersion")?;
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    let kind = object["kind"].as_str().context("a kind")?;
    let gvk = kube::api::GroupVersionKind::gvk(group, version, kind);
    let (resource, caps) = kube::discovery::pinned_kind(client, &gvk).await?;
    let name = object["metadata"]["name"]
        .as_str()
        .context("a name")?
        .to_string();
    let api: Api<kube::api::DynamicObject> = match object["metadata"]["namespace"].as_str() {
        Some(ns) if caps.scope == kube::discovery::Scope::Namespaced => {
            Api::namespaced_with(client.clone(), ns, &resource)
        }
        _ => Api::all_with(client.clone(), &resource),
    };
    api.patch(
        &name,
        &PatchParams::apply("skiff-bench").force(),
        &Patch::Apply(object),
    )
    .await
    .with_context(|| format!("applying {} {name}", gvk.kind))?;
    Ok(())
}

fn ingress_class() -> Value {
    use skiff_ingress::config::{CLASS, CONTROLLER, DEFAULT_CLASS_ANNOTATION};
    json!({"apiVersion": "networking.k8s.io/v1", "kind": "IngressClass",
           "metadata": {"name": CLASS, "annotations": {DEFAULT_CLASS_ANNOTATION: "true"}},
           "spec": {"controller": CONTROLLER}})
}

fn ingress_to(name: &str, host: &str) -> Value {
    json!({"apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
           "metadata": {"name": name, "namespace": NAMESPACE},
           "spec": {"rules": [{"host": host, "http": {"paths": [
               {"path": "/", "pathType": "Prefix",
                "backend": {"service": {"name": "backend", "port": {"number": 80}}}}]}}]}})
}

/// The backend pod, its Service and the EndpointSlice naming it (no controller manager runs);
/// the pod's address. The pod runs nginx answering every request with [`BODY`] over keep-alive
/// connections, as most real backends do (busybox's httpd, the only server in the offline
/// image, forks a process per connection and closes it after one answer: the backend, not
/// the proxy, would be measured). No nginx image is available offline, so the pod runs the
/// host's nginx from read-only hostPath mounts of `/usr`, `/lib` and `/lib64` (Debian's merged /usr), as
/// user nobody.
async fn start_backend(client: &kube::Client) -> Result<SocketAddr> {
    // nobody cannot write Debian's compiled-in temp and log paths: everything under /tmp
    let conf = format!(
        "worker_processes 1;\npid /tmp/ng/nginx.pid;\nevents {{ worker_connections 4096; }}\n\
         http {{\n  access_log off;\n  keepalive_requests 1000000;\n\
           client_body_temp_path /tmp/ng/body;\n  proxy_temp_path /tmp/ng/proxy;\n\
           fastcgi_temp_path /tmp/ng/fastcgi;\n  uwsgi_temp_path /tmp/ng/uwsgi;\n\
           scgi_temp_path /tmp/ng/scgi;\n\
           server {{ listen 8080; location / {{ return 200 \"{BODY}\\n\"; }} }}\n}}\n"
    );
    let script = "mkdir -p /tmp/ng && echo \"$NGINX_CONF\" > /tmp/ng/nginx.conf && \
                  exec /usr/sbin/nginx -p /tmp/ng -e /tmp/ng/error.log -c /tmp/ng/nginx.conf \
                  -g 'daemon off;'";
    let host_dir = |name: &str, path: &str| json!({"name": name, "hostPath": {"path": path}});
    let mount = |name: &str, path: &str| json!({"name": name, "mountPath": path, "readOnly": true});
    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "backend", "labels": {"app": "backend"}},
        "spec": {"nodeName": NODE, "terminationGracePeriodSeconds": 0,
                 "securityContext": {"runAsUser": 65534, "runAsGroup": 65534},
                 "volumes": [host_dir("usr", "/usr"), host_dir("lib", "/usr/lib"),
                             host_dir("lib64", "/usr/lib64")],
                 "containers": [{"name": "nginx", "image": BUSYBOX_IMAGE,
                                 "imagePullPolicy": "IfNotPresent",
                                 "command": ["/bin/sh", "-c", script],
                                 "env": [{"name": "NGINX_CONF", "value": conf}],
                                 "volumeMounts": [mount("usr", "/usr"), mount("lib", "/lib"),
                                                  mount("lib64", "/lib64")]}]},
    }))?;
    pods.create(&PostParams::default(), &pod).await?;
    let deadline = Instant::now() + Duration::from_secs(60);
    let ip = loop {
        let pod = pods.get("backend").await?;
        let status = pod.status.unwrap_or_default();
        if status.phase.as_deref() == Some("Running")
            && let Some(ip) = status.pod_ip
        {
            break ip;
        }
        if Instant::now() > deadline {
            bail!(
                "the backend pod never ran: {}",
                serde_json::to_string(&status)?
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let addr = SocketAddr::new(ip.parse()?, 8080);
    apply(
        client,
        json!({"apiVersion": "v1", "kind": "Service",
                         "metadata": {"name": "backend", "namespace": NAMESPACE},
                         "spec": {"ports": [{"name": "http", "port": 80, "targetPort": 8080}]}}),
    )
    .await?;
    apply(
        client,
        json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                         "metadata": {"name": "backend-1", "namespace": NAMESPACE,
                                      "labels": {"kubernetes.io/service-name": "backend"}},
                         "addressType": "IPv4",
                         "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
                         "endpoints": [{"addresses": [ip], "conditions": {"ready": true}}]}),
    )
    .await?;
    wait_serving(addr, HOST).await?;
    Ok(addr)
}

/// Waits until `GET /` with `Host: host` at `addr` answers 200.
async fn wait_serving(addr: SocketAddr, host: &str) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok(mut conn) = Conn::open(addr, host).await
            && conn.get().await.is_ok_and(|ok| ok)
        {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("{addr} never answered 200 for {host}");
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// One keep-alive HTTP/1.1 connection of the load generator.
struct Conn {
    sender: hyper::client::conn::http1::SendRequest<Empty<Bytes>>,
    host: String,
}

impl Conn {
    async fn open(addr: SocketAddr, host: &str) -> Result<Conn> {
        let stream = tokio::net::TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
        tokio::spawn(conn);
        Ok(Conn {
            sender,
            host: host.into(),
        })
    }

    /// Waits until the connection can take the next request (hyper's connection task has
    /// finished the last one); false when the server closed it.
    async fn ready(&mut self) -> bool {
        self.sender.ready().await.is_ok()
    }

    /// One GET, its body read; whether it was a 200.
    async fn get(&mut self) -> Result<bool> {
        let req = http::Request::get("/")
            .header(http::header::HOST, &self.host)
            .body(Empty::new())?;
        let response = self.sender.send_request(req).await?;
        let ok = response.status() == http::StatusCode::OK;
        response.into_body().collect().await?;
        Ok(ok)
    }
}

/// What one proxy did under load, over one or more runs.
struct Load {
    /// Answered 200.
    requests: u64,
    /// Answered with another status (a proxy's 502 or 503).
    errors: u64,
    /// Not answered: the connection failed mid-request.
    failed: u64,
    /// Why the first of them failed.
    first_failure: Option<String>,
    /// Seconds driven.
    elapsed: f64,
    /// CPU seconds the proxy's processes used meanwhile.
    cpu_s: f64,
    latency: hdrhistogram::Histogram<u64>,
}

impl Default for Load {
    fn default() -> Load {
        Load {
            requests: 0,
            errors: 0,
            failed: 0,
            first_failure: None,
            elapsed: 0.0,
            cpu_s: 0.0,
            latency: histogram(),
        }
    }
}

impl Load {
    /// Another run's figures added to these.
    fn add(&mut self, run: Load) -> Result<()> {
        self.requests += run.requests;
        self.errors += run.errors;
        self.failed += run.failed;
        if self.first_failure.is_none() {
            self.first_failure = run.first_failure;
        }
        self.elapsed += run.elapsed;
        self.cpu_s += run.cpu_s;
        self.latency.add(&run.latency)?;
        Ok(())
    }

    fn rps(&self) -> f64 {
        self.requests as f64 / self.elapsed
    }

    fn cpu_per_request(&self) -> f64 {
        self.cpu_s / self.requests as f64
    }
}

/// CPU seconds `pids` have used, all their threads together.
fn cpu_seconds(pids: &[u32]) -> f64 {
    let meter = CpuMeter {
        processes: pids.iter().map(|pid| ("p", pid.to_string())).collect(),
    };
    meter.snapshot().into_iter().flatten().sum()
}

/// `args.connections` connections sending requests one after another for `args.seconds`;
/// `pids` are the processes serving them, whose CPU time is measured.
async fn load(addr: SocketAddr, host: &str, args: &IngressBenchArgs, pids: &[u32]) -> Result<Load> {
    let latency = Arc::new(Mutex::new(histogram()));
    let until = Instant::now() + Duration::from_secs(args.seconds);
    let cpu_before = cpu_seconds(pids);
    let started = Instant::now();
    let workers = (0..args.connections).map(|_| {
        let latency = latency.clone();
        async move {
            let (mut requests, mut errors, mut failed) = (0u64, 0u64, 0u64);
            let mut first_failure = None;
            let mut conn = Conn::open(addr, host).await?;
            let mut local = histogram();
            while Instant::now() < until {
                let sent = Instant::now();
                if !conn.ready().await {
                    // the server closed it after its last answer: open another, as a client
                    // would, within this request's time
                    conn = Conn::open(addr, host).await?;
                }
                match conn.get().await {
                    Ok(true) => {
                        requests += 1;
                        local.record(micros(sent.elapsed()))?;
                    }
                    Ok(false) => errors += 1,
                    Err(e) => {
                        failed += 1;
                        first_failure.get_or_insert_with(|| format!("{e:#}"));
                        conn = Conn::open(addr, host).await?;
                    }
                }
            }
            latency.lock().add(&local)?;
            anyhow::Ok((requests, errors, failed, first_failure))
        }
    });
    let results = futures::future::try_join_all(workers).await?;
    let elapsed = started.elapsed().as_secs_f64();
    let cpu_s = cpu_seconds(pids) - cpu_before;
    let requests = results.iter().map(|r| r.0).sum();
    let errors = results.iter().map(|r| r.1).sum();
    let failed = results.iter().map(|r| r.2).sum();
    let first_failure = results.into_iter().find_map(|r| r.3);
    let latency = Arc::try_unwrap(latency)
        .map_err(|_| anyhow::anyhow!("a worker still holds the histogram"))?
        .into_inner();
    Ok(Load {
        requests,
        errors,
        failed,
        first_failure,
        elapsed,
        cpu_s,
        latency,
    })
}

/// `skiff ingress` as a child on a free loopback port.
struct IngressChild {
    _child: SkiffChild,
    pid: u32,
    addr: SocketAddr,
}

impl IngressChild {
    async fn start(kubeconfig: &Path, log: &Path) -> Result<IngressChild> {
        let kubeconfig = kubeconfig.display().to_string();
        let args = [
            "ingress",
            "--node-name",
            NODE,
            "--bind-address",
            "127.0.0.1",
            "--http-port",
            "0",
            "--https-port",
            "0",
            "--kubeconfig",
            &kubeconfig,
        ];
        // its access log on, as in production and as nginx's
        let filter = format!("warn,{}=info", skiff_ingress::access::TARGET);
        let child = start_logging(&std::env::current_exe()?, &args, log, &filter).await?;
        // `skiff ingress ready: node N, http 127.0.0.1:P, https …`
        let addr = child
            .ready
            .split_once("http ")
            .and_then(|(_, rest)| rest.split(',').next())
            .and_then(|a| a.parse().ok())
            .with_context(|| format!("no HTTP address in {:?}", child.ready))?;
        Ok(IngressChild {
            pid: child.pid,
            _child: child,
            addr,
        })
    }
}

/// nginx as the same reverse proxy, a child on a free loopback port.
struct NginxChild {
    child: Child,
    addr: SocketAddr,
}

impl NginxChild {
    async fn start(dir: &Path, upstream: SocketAddr) -> Result<NginxChild> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let prefix = dir.join("nginx");
        std::fs::create_dir_all(prefix.join("logs"))?;
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        // as ingress-nginx configures it: a worker per core, keep-alive to clients and to the
        // upstream, HTTP/1.1 upstream, the same forwarding headers, and a line per request in
        // an access log file, written in batches as Skiff's controller writes its own (16 KiB,
        // at the latest after 100 ms: `skiff::logging`)
        let conf = format!(
            "worker_processes {cores};\npid {pid};\nerror_log {err} warn;\n\
             events {{ worker_connections 4096; }}\n\
             http {{\n  access_log {access} combined buffer=16k flush=100ms;\n  keepalive_requests 1000000;\n\
               upstream backend {{ server {upstream}; keepalive 128; }}\n\
               server {{\n    listen 127.0.0.1:{port};\n    server_name {HOST};\n\
                 location / {{\n      proxy_pass http://backend;\n\
                   proxy_http_version 1.1;\n      proxy_set_header Connection \"\";\n\
                   proxy_set_header Host $host;\n\
                   proxy_set_header X-Forwarded-For $remote_addr;\n\
                   proxy_set_header X-Real-IP $remote_addr;\n\
                   proxy_set_header X-Forwarded-Host $host;\n\
                   proxy_set_header X-Forwarded-Port $server_port;\n\
                   proxy_set_header X-Forwarded-Proto $scheme;\n    }}\n  }}\n}}\n",
            pid = prefix.join("nginx.pid").display(),
            err = prefix.join("logs/error.log").display(),
            access = prefix.join("logs/access.log").display(),
        );
        let conf_path = prefix.join("nginx.conf");
        std::fs::write(&conf_path, conf)?;
        let child = Command::new("nginx")
            .arg("-p")
            .arg(&prefix)
            .arg("-c")
            .arg(&conf_path)
            .args(["-g", "daemon off;"])
            .stdout(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .context("starting nginx")?;
        Ok(NginxChild {
            child,
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
        })
    }
}

impl NginxChild {
    /// The worker processes (the master's children), which serve every connection.
    fn workers(&self) -> Vec<u32> {
        let Some(master) = self.child.id() else {
            return Vec::new();
        };
        let Ok(entries) = std::fs::read_dir("/proc") else {
            return Vec::new();
        };
        entries
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
            .filter(|pid| {
                let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
                // `pid (comm) state ppid …`
                let ppid = stat
                    .rfind(')')
                    .and_then(|end| stat[end + 1..].split_whitespace().nth(1))
                    .and_then(|ppid| ppid.parse::<u32>().ok());
                ppid == Some(master)
            })
            .collect()
    }

    /// SIGTERM (nginx's fast shutdown: the master stops its workers), then wait.
    async fn stop(mut self) {
        if let Some(pid) = self.child.id() {
            let _ = Command::new("kill").arg(pid.to_string()).status().await;
        }
        let _ = self.child.wait().await;
    }
}

/// Whether `binary` is on the PATH.
fn which(binary: &str) -> Result<()> {
    let found = std::process::Command::new("sh")
        .args(["-c", &format!("command -v {binary}")])
        .output()?
        .status
        .success();
    if found {
        Ok(())
    } else {
        bail!("{binary} is not installed")
    }
}
