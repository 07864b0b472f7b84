//! `skiff bench controllers`: the workload controllers end to end. Starts `skiff apiserver`,
//! hollow nodes (`skiff kubelet --hollow`), `skiff scheduler` and `skiff controller-manager
//! --controllers replicaset,deployment` as children, creates a Deployment of `--replicas` pods
//! and watches: the time until every pod exists, until every pod is bound, and until the
//! Deployment is available; then changes its template and times the rolling update (maxSurge
//! 25%, maxUnavailable 25%) until `kubectl rollout status` would succeed. Prints one JSON line,
//! with the CPU seconds each process used.

use std::collections::HashSet;
use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::watcher::{self, Event};
use parking_lot::Mutex;
use serde_json::json;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use super::api::{CpuMeter, Emitter, ServerChild, ensure_open_files, merge, round3};

/// Options of `skiff bench controllers`.
#[derive(Debug, Clone, clap::Args)]
pub struct ControllersBenchArgs {
    /// Replicas of the Deployment.
    #[arg(long, default_value_t = 1000)]
    pub replicas: usize,
    /// Hollow nodes (110 pods each).
    #[arg(long, default_value_t = 20)]
    pub nodes: usize,
    /// Seconds to wait for each phase before giving up.
    #[arg(long, default_value_t = 300)]
    pub timeout_s: u64,
}

const NAMESPACE: &str = "default";
const NAME: &str = "bench";

/// A `skiff` child process, killed when dropped.
struct SkiffChild {
    _child: Child,
    pid: u32,
}

/// Starts `skiff ARGS` (stderr into `log`) and waits for its ready line.
async fn start(args: &[&str], log: &Path) -> Result<SkiffChild> {
    let mut child = Command::new(std::env::current_exe()?)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(log)?)
        .env(
            "RUST_LOG",
            std::env::var("RUST_LOG").unwrap_or("warn".into()),
        )
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("starting skiff {}", args[0]))?;
    let pid = child.id().context("child has no pid")?;
    let mut lines = BufReader::new(child.stdout.take().context("stdout")?).lines();
    while let Some(line) = lines.next_line().await? {
        if line.contains("ready") {
            tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
            return Ok(SkiffChild { _child: child, pid });
        }
    }
    bail!(
        "skiff {} exited before it was ready; see {}",
        args[0],
        log.display()
    )
}

fn deployment(replicas: usize) -> Deployment {
    serde_json::from_value(json!({
        "metadata": {"name": NAME},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": NAME}},
                 "strategy": {"type": "RollingUpdate",
                              "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}},
                 "template": {"metadata": {"labels": {"app": NAME}},
                              "spec": {"terminationGracePeriodSeconds": 0,
                                       "containers": [{"name": "c",
                                           "image": "registry.k8s.io/pause:3.10"}]}}},
    }))
    .expect("a deployment")
}

/// Whether the Deployment's rollout is done as `kubectl rollout status` judges it.
fn rolled_out(d: &Deployment, replicas: usize) -> bool {
    let n = Some(replicas as i32);
    d.status.as_ref().is_some_and(|s| {
        s.observed_generation >= d.metadata.generation
            && s.updated_replicas == n
            && s.replicas == n
            && s.available_replicas == n
    })
}

pub async fn run(args: ControllersBenchArgs) -> Result<()> {
    ensure_open_files(4 * args.nodes + 1024)?;
    let tmp = tempfile::tempdir()?;
    let mut server = ServerChild::start(&tmp.path().join("api"), None).await?;
    let result = bench(&args, &server, tmp.path()).await;
    server.stop().await;
    if result.is_err() {
        eprintln!(
            "skiff bench controllers: logs kept in {}",
            tmp.keep().display()
        );
    }
    result
}

async fn bench(args: &ControllersBenchArgs, server: &ServerChild, dir: &Path) -> Result<()> {
    let out = Emitter {
        backend: "embedded".into(),
        cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
    };
    let kubeconfig = dir.join("api/kubeconfig.yaml");
    let kubeconfig = kubeconfig.to_str().context("path")?;
    let hollow_dir = dir.join("hollow");
    let count = args.nodes.to_string();
    let nodes = start(
        &[
            "kubelet",
            "--kubeconfig",
            kubeconfig,
            "--hollow",
            "--count",
            &count,
            "--node-name-prefix",
            "bench",
            "--data-dir",
            hollow_dir.to_str().context("path")?,
        ],
        &dir.join("hollow.log"),
    )
    .await?;
    let scheduler = start(
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
    let cm = start(
        &[
            "controller-manager",
            "--kubeconfig",
            kubeconfig,
            "--controllers",
            "replicaset,deployment",
            "--leader-elect",
            "false",
        ],
        &dir.join("controller-manager.log"),
    )
    .await?;
    let cpu = CpuMeter {
        processes: vec![
            ("server", server.pid.to_string()),
            ("controller_manager", cm.pid.to_string()),
            ("scheduler", scheduler.pid.to_string()),
            ("hollow_nodes", nodes.pid.to_string()),
        ],
    };
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
    let limit = Duration::from_secs(args.timeout_s);
    let n = args.replicas;
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), NAMESPACE);

    let before = cpu.snapshot();
    let start_at = Instant::now();
    deployments
        .create(&PostParams::default(), &deployment(n))
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

    let before = cpu.snapshot();
    let update_at = Instant::now();
    let image = json!({"spec": {"template": {"spec": {"containers": [
        {"name": "c", "image": "registry.k8s.io/pause:3.9"}]}}}});
    let updated = deployments
        .patch(NAME, &PatchParams::default(), &Patch::Strategic(image))
        .await
        .context("updating the template")?;
    let generation = updated.metadata.generation;
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
    pod_watch.abort();
    deploy_watch.abort();
    let prefix = |v: serde_json::Value, p: &str| -> serde_json::Value {
        match v {
            serde_json::Value::Object(m) => m
                .into_iter()
                .map(|(k, v)| (format!("{p}_{k}"), v))
                .collect::<serde_json::Map<_, _>>()
                .into(),
            other => other,
        }
    };
    out.emit(
        "controllers",
        merge(
            merge(
                json!({
                    "replicas": n,
                    "nodes": args.nodes,
                    "pods_created_s": round3(created_s),
                    "pods_bound_s": round3(bound_s),
                    "target_pods_bound_s": 2,
                    "available_s": round3(available_s),
                    "rolling_update_s": round3(rollout_s),
                    "target_rolling_update_s": 10,
                }),
                prefix(create_cpu, "create"),
            ),
            prefix(rollout_cpu, "update"),
        ),
    );
    Ok(())
}
