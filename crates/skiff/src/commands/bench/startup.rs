//! `skiff bench startup`: `skiff server` as a user starts it, as a child, printing one JSON line
//! per result:
//!
//! - `ready`: seconds from spawning `skiff server` on a fresh data dir (real containerd agent)
//!   to its `ready` line, then again for a restart on the same data dir;
//! - `idle-rss`: the server process's VmRSS after `--idle-seconds` idle (its containerd, a
//!   child process, excluded);
//! - `pods-rss`: the VmRSS of a `skiff server --disable-agent` with `--pods` pods of one
//!   Deployment Running on `--hollow-nodes` hollow nodes (a separate `skiff kubelet --hollow`).
//!
//! The agent's server runs in a network namespace of its own (a veth pair inside it for its node
//! address and default route), so that its proxy, routes and DNS leave the host's alone. Needs
//! root (containerd, CNI, network namespaces). Every line carries the 1-minute load average.

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{ListParams, PostParams};
use serde_json::json;
use skiff_proxy::runner::{HostRunner, OwnedNetns, Runner};
use tokio::io::{AsyncBufReadExt as _, BufReader, Lines};
use tokio::process::{Child, ChildStdout, Command};

use super::api::{Emitter, mb, merge, proc_status_kb, round3};
use super::pods::load1;

/// Options of `skiff bench startup`.
#[derive(Debug, Clone, clap::Args)]
pub struct StartupBenchArgs {
    /// Seconds the server idles before its RSS is read.
    #[arg(long, default_value_t = 60)]
    pub idle_seconds: u64,
    /// Pods of the Deployment on the hollow nodes.
    #[arg(long, default_value_t = 1000)]
    pub pods: usize,
    /// Hollow nodes they run on (110 pods each at most, as upstream's default maxPods).
    #[arg(long, default_value_t = 20)]
    pub hollow_nodes: usize,
}

/// The agent's node address inside the bench's network namespace.
const NODE_IP: &str = "10.254.0.2";

/// A `skiff` child whose stdout is read line by line; SIGTERM, then SIGKILL, when stopped.
struct SkiffChild {
    child: Child,
    pid: u32,
    lines: Lines<BufReader<ChildStdout>>,
}

impl SkiffChild {
    /// Spawns `prefix… skiff args…`; stderr in `log`.
    fn spawn(prefix: &[&str], args: &[String], log: &Path) -> Result<SkiffChild> {
        let exe = std::env::current_exe()?;
        let mut cmd = match prefix.split_first() {
            Some((program, rest)) => {
                let mut cmd = Command::new(program);
                cmd.args(rest).arg(exe);
                cmd
            }
            None => Command::new(exe),
        };
        if std::env::var_os("RUST_LOG").is_none() {
            cmd.env("RUST_LOG", "warn");
        }
        let mut child = cmd
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(log)?)
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting skiff {}", args.join(" ")))?;
        let pid = child.id().context("the child has no pid")?;
        let lines = BufReader::new(child.stdout.take().context("child stdout")?).lines();
        Ok(SkiffChild { child, pid, lines })
    }

    /// Waits for the line containing `ready`, then drains the rest in the background.
    async fn ready(mut self) -> Result<(Child, u32)> {
        while let Some(line) = self.lines.next_line().await? {
            if line.contains("ready") {
                let mut lines = self.lines;
                tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
                return Ok((self.child, self.pid));
            }
        }
        bail!("the child exited before it was ready")
    }
}

/// SIGTERM (the server stops its components and its containerd) and wait.
async fn terminate(child: &mut Child, pid: u32) {
    let _ = std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status();
    if tokio::time::timeout(Duration::from_secs(60), child.wait())
        .await
        .is_err()
    {
        let _ = child.kill().await;
    }
}

/// A `kB` field of the process's `/proc/PID/status` (`VmRSS`, `RssAnon`, `RssFile`).
fn status_kb(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    proc_status_kb(&status, field)
}

/// VmRSS, and its heap (`RssAnon`) and mapped-file (`RssFile`: mostly the binary's code) parts.
fn rss(pid: u32) -> serde_json::Value {
    json!({"rss_mb": mb(status_kb(pid, "VmRSS")),
           "anon_mb": mb(status_kb(pid, "RssAnon")),
           "file_mb": mb(status_kb(pid, "RssFile"))})
}

/// A free loopback port (bound, read, released).
fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

pub async fn run(args: StartupBenchArgs) -> Result<()> {
    let emitter = Emitter {
        backend: "embedded".into(),
        cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
    };
    let dir = tempfile::tempdir()?;
    let result = agent_runs(&args, &emitter, dir.path()).await;
    skiff_kubelet::cleanup::unmount_under(&skiff_kubelet::cleanup::SystemHost, dir.path());
    result?;
    pods_run(&args, &emitter, dir.path()).await
}

/// `ready` twice (fresh, restarted) and `idle-rss`, with the real agent in a namespace.
async fn agent_runs(args: &StartupBenchArgs, emitter: &Emitter, dir: &Path) -> Result<()> {
    let netns = OwnedNetns::create("skiff-bench-startup")?;
    let runner = HostRunner::default();
    let ns = netns.name();
    for cmd in [
        vec!["-n", ns, "link", "set", "lo", "up"],
        vec![
            "-n", ns, "link", "add", "eth0", "type", "veth", "peer", "name", "eth1",
        ],
        vec!["-n", ns, "addr", "add", "10.254.0.2/24", "dev", "eth0"],
        vec!["-n", ns, "link", "set", "eth1", "up"],
        vec!["-n", ns, "link", "set", "eth0", "up"],
        vec!["-n", ns, "route", "add", "default", "dev", "eth0"],
    ] {
        runner.run("ip", &cmd, None)?;
    }
    let nsenter = format!("--net=/var/run/netns/{ns}");
    let prefix = ["nsenter", nsenter.as_str()];
    let data = dir.join("agent");
    let argv: Vec<String> = [
        "server",
        "--data-dir",
        data.to_str().context("utf-8 temp dir")?,
        "--bind-address",
        NODE_IP,
        "--node-name",
        "bench-startup",
    ]
    .map(String::from)
    .to_vec();
    for run in ["fresh", "restart"] {
        let started = Instant::now();
        let (mut child, pid) = SkiffChild::spawn(&prefix, &argv, &dir.join("agent.log"))?
            .ready()
            .await
            .with_context(|| format!("skiff server ({run}); see {}", dir.display()))?;
        let seconds = started.elapsed().as_secs_f64();
        emitter.emit(
            "startup",
            json!({"measure": "ready", "run": run, "seconds": round3(seconds),
                   "target_s": 2, "peer": "k3s: about 50 s (issue 9)", "load1": load1()}),
        );
        if run == "restart" {
            tokio::time::sleep(Duration::from_secs(args.idle_seconds)).await;
            emitter.emit(
                "startup",
                merge(
                    json!({"measure": "idle-rss", "idle_s": args.idle_seconds, "target_mb": 64,
                           "peer": "k3s server: 500 MB to 1.6 GB (issue 9)", "load1": load1()}),
                    rss(pid),
                ),
            );
        }
        terminate(&mut child, pid).await;
    }
    Ok(())
}

/// `pods-rss`: the control plane alone with `--pods` pods Running on hollow nodes.
async fn pods_run(args: &StartupBenchArgs, emitter: &Emitter, dir: &Path) -> Result<()> {
    let data = dir.join("control-plane");
    let data_arg = data.to_str().context("utf-8 temp dir")?.to_string();
    let port = free_port()?.to_string();
    let argv: Vec<String> = [
        "server",
        "--disable-agent",
        "--data-dir",
        &data_arg,
        "--https-port",
        &port,
        "--kube-scheduler-arg",
        "metrics-bind-address=127.0.0.1:0",
        "--kube-controller-manager-arg",
        "metrics-bind-address=127.0.0.1:0",
    ]
    .map(String::from)
    .to_vec();
    let (mut server, pid) = SkiffChild::spawn(&[], &argv, &dir.join("control-plane.log"))?
        .ready()
        .await
        .context("skiff server --disable-agent")?;
    let kubeconfig = data.join("kubeconfig.yaml");
    let hollow_argv: Vec<String> = vec![
        "kubelet".into(),
        "--hollow".into(),
        "--count".into(),
        args.hollow_nodes.to_string(),
        "--node-name-prefix".into(),
        "bench-hollow".into(),
        "--data-dir".into(),
        dir.join("hollow").display().to_string(),
        "--kubeconfig".into(),
        kubeconfig.display().to_string(),
    ];
    let (mut hollow, hollow_pid) = SkiffChild::spawn(&[], &hollow_argv, &dir.join("hollow.log"))?
        .ready()
        .await
        .context("skiff kubelet --hollow")?;
    let client = kube::Client::try_from(super::super::kube_config(&kubeconfig).await?)?;
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "default");
    let deployment: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "bench-startup"},
        "spec": {"replicas": args.pods,
                 "selector": {"matchLabels": {"app": "bench-startup"}},
                 "template": {"metadata": {"labels": {"app": "bench-startup"}},
                              "spec": {"containers": [{"name": "c", "image": "busybox"}]}}},
    }))?;
    let started = Instant::now();
    deployments
        .create(&PostParams::default(), &deployment)
        .await
        .context("creating the Deployment")?;
    let pods: Api<Pod> = Api::namespaced(client, "default");
    let running = ListParams::default()
        .labels("app=bench-startup")
        .fields("status.phase=Running");
    loop {
        let count = pods.list_metadata(&running).await?.items.len();
        if count >= args.pods {
            break;
        }
        if started.elapsed() > Duration::from_secs(600) {
            bail!(
                "only {count} of {} pods Running after 10 minutes",
                args.pods
            );
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let all_running_s = started.elapsed().as_secs_f64();
    emitter.emit(
        "startup",
        merge(
            json!({"measure": "pods-rss", "pods": args.pods, "hollow_nodes": args.hollow_nodes,
                   "hollow_rss_mb": mb(status_kb(hollow_pid, "VmRSS")),
                   "all_running_s": round3(all_running_s), "load1": load1()}),
            rss(pid),
        ),
    );
    terminate(&mut hollow, hollow_pid).await;
    terminate(&mut server, pid).await;
    Ok(())
}
