//! The `eviction` line of `skiff bench pods` (issue 32's benchmark): how long after the node's
//! `memory.available` crosses a hard threshold the first pod is evicted. A kubelet is started
//! with `--eviction-hard memory.available<X`, X a little below what the host has; a pod then
//! takes enough memory to cross it. The time runs from the first moment the bench sees
//! `memory.available` (read as the kubelet reads it, every 5 ms) below X to the moment a
//! watch sees the pod `Failed` with reason `Evicted`. Each run starts its own kubelet, as the
//! threshold follows the host's memory at that moment.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::PostParams;
use kube::runtime::watcher::{self, Event};
use serde_json::json;
use skiff_kubelet::cri::CriClient;
use skiff_kubelet::eviction::signals::host_memory_available;
use skiff_kubelet::images::BUSYBOX_IMAGE;

use super::api::{Emitter, round3};
use super::pods::{KubeletChild, load1, remove_pods};

const MIB: i64 = 1 << 20;
/// How far below the host's `memory.available` the threshold is set…
const MARGIN: i64 = 256 * MIB;
/// …and how much the pod takes to cross it.
const ALLOCATION_MIB: i64 = 1024;
/// How long a run waits for each step.
const STEP_TIMEOUT: Duration = Duration::from_secs(60);

/// The pod that crosses the threshold: Burstable (a node under memory pressure still admits
/// it), holding `ALLOCATION_MIB` in `dd`'s buffer (filled from /dev/zero, so every page is
/// touched) a moment after it starts.
fn hog(namespace: &str, node: &str, name: &str) -> Result<Pod> {
    let script = format!("sleep 2; dd if=/dev/zero bs={ALLOCATION_MIB}M count=1 | sleep 3600");
    Ok(serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"nodeName": node, "terminationGracePeriodSeconds": 0,
                 "containers": [{"name": "hog", "image": BUSYBOX_IMAGE,
                                 "imagePullPolicy": "IfNotPresent",
                                 "command": ["sh", "-c", script],
                                 "resources": {"requests": {"memory": "1Mi"}}}]},
    }))?)
}

/// Runs the measurement `runs` times with kubelets on `data` (its containerd state kept) and
/// prints the `eviction` line.
#[allow(clippy::too_many_arguments)]
pub(super) async fn eviction(
    out: &Emitter,
    client: &kube::Client,
    kubeconfig: &Path,
    dir: &Path,
    data: &Path,
    namespace: &str,
    node: &str,
    runs: usize,
) -> Result<()> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let mut samples = Vec::new();
    let mut thresholds = Vec::new();
    let socket = data
        .join("containerd/containerd.sock")
        .display()
        .to_string();
    for run in 0..runs {
        let available = host_memory_available()
            .context("memory.available cannot be read on this host")?
            .available;
        let threshold = available - MARGIN;
        let flag = format!("memory.available<{threshold}");
        let kubelet = KubeletChild::start_node(
            kubeconfig,
            &dir.join(format!("eviction-kubelet-{run}.log")),
            node,
            data,
            &["--eviction-hard", &flag],
        )
        .await?;
        let name = format!("hog-{run}");
        let measured = one_run(&pods, namespace, node, &name, threshold).await;
        // the evicted pod's sandbox goes before its kubelet: the pods' shims outlive the
        // kubelet, and a sandbox left running keeps its netns, veth and pod IP on the host
        let removed = match CriClient::connect(&socket) {
            Ok(cri) => remove_pods(&pods, &cri).await,
            Err(e) => Err(e.into()),
        };
        kubelet.stop().await;
        samples.push(measured?);
        removed?;
        thresholds.push(threshold / MIB);
    }
    let mut sorted = samples.clone();
    sorted.sort_by(f64::total_cmp);
    out.emit(
        "eviction",
        json!({
            "runs": runs, "load1": load1(),
            "p50_ms": sorted.get(sorted.len() / 2).copied(),
            "max_ms": sorted.last().copied(),
            "samples_ms": samples, "threshold_mi": thresholds,
            "target_ms": 2000,
        }),
    );
    Ok(())
}

/// One pod created, its memory crossing `threshold`, its eviction; milliseconds from the
/// crossing to the eviction.
async fn one_run(
    pods: &Api<Pod>,
    namespace: &str,
    node: &str,
    name: &str,
    threshold: i64,
) -> Result<f64> {
    let (evicted_tx, evicted) = tokio::sync::oneshot::channel();
    let watched = pods.clone();
    let field = format!("metadata.name={name}");
    let watch = tokio::spawn(async move {
        let stream = watcher::watcher(watched, watcher::Config::default().fields(&field));
        futures::pin_mut!(stream);
        while let Some(Ok(e)) = stream.next().await {
            if let Event::Apply(p) = e {
                let status = p.status.unwrap_or_default();
                if status.phase.as_deref() == Some("Failed")
                    && status.reason.as_deref() == Some("Evicted")
                {
                    let _ = evicted_tx.send(Instant::now());
                    return;
                }
            }
        }
    });
    if host_memory_available().is_none_or(|m| m.available < threshold) {
        watch.abort();
        bail!(
            "the host's memory.available fell below the threshold ({threshold} bytes) before the pod started; run again on a quieter host"
        );
    }
    pods.create(&PostParams::default(), &hog(namespace, node, name)?)
        .await?;
    let crossed = tokio::time::timeout(STEP_TIMEOUT, async {
        loop {
            let available = host_memory_available().map(|m| m.available);
            if available.is_some_and(|a| a < threshold) {
                return Instant::now();
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    let Ok(crossed) = crossed else {
        watch.abort();
        bail!("memory.available never went below the threshold ({threshold} bytes) in 60 s");
    };
    let evicted = tokio::time::timeout(STEP_TIMEOUT, evicted).await;
    watch.abort();
    match evicted {
        Ok(Ok(at)) => Ok(round3(
            at.saturating_duration_since(crossed).as_secs_f64() * 1000.0,
        )),
        _ => bail!("pod {name} was not evicted within 60 s of crossing the threshold"),
    }
}
