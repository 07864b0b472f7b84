//! `skiff bench api --fairness`: what API Priority and Fairness does for a well-behaved client
//! while another floods the server. Two users with client certificates from the cluster CA
//! (neither in `system:masters`, so both land in upstream's `global-default` FlowSchema, one
//! flow each) read ConfigMaps through the `view` ClusterRole:
//!
//! - `polite` GETs one ConfigMap every 5 ms, one request at a time;
//! - `flooder` LISTs the namespace's 2,000 ConfigMaps from `--clients` concurrent loops, as
//!   fast as answers come, counting the 429s it gets. Its threads run at nice 19, as if it
//!   were on another machine: on two shared cores, its own reading of the answers would
//!   otherwise take the CPU the server and the polite client need, whatever the server does.
//!
//! The polite client runs alone (`calm`), then under the flood (`flood`), against a server with
//! APF (the default) and then one with `--enable-priority-and-fairness=false` (the in-flight
//! limits only). Each server prints one `api-fairness` line: the polite client's p50/p99 in
//! both phases, `p99_vs_calm`, its failed requests, and the flood's rate and refusals.
//!
//! Where a slow polite request's time went, from the server's metrics over the flood phase:
//! polite has a FlowSchema of its own (at `global-default`'s level, so nothing else changes),
//! so `polite_apf_waits_over_5ms` counts its requests that waited more than 5 ms in their APF
//! queue; `polite_server_over_5ms` counts GETs of ConfigMaps (only polite's) that took the
//! server more than 5 ms from the request's head to its response. A slow request that is in
//! neither waited outside the handlers: for the server to read it, or to write its answer.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use bytes::Bytes;
use futures::future::join_all;
use http::{Method, Request, header};
use kube::client::Body;
use serde_json::{Value, json};

use super::{
    CpuMeter, Emitter, NAMESPACE, Plan, ServerChild, histogram, max_ms, merge, micros, ms, round3,
    send_ok,
};

/// ConfigMaps the flood lists.
const CONFIGMAPS: usize = 2_000;
/// How often the polite client asks.
const POLITE_INTERVAL: Duration = Duration::from_millis(5);

pub(super) async fn run(plan: &Plan, phase: Duration, out: &Emitter) -> Result<()> {
    for apf in [true, false] {
        let tmp = tempfile::tempdir()?;
        let dir = tmp.path().join("api");
        let extra: &[&str] = if apf {
            &[]
        } else {
            &["--enable-priority-and-fairness=false"]
        };
        let mut server = ServerChild::start_with(&dir, None, extra).await?;
        let result = measure(plan, phase, &server, &dir).await;
        server.stop().await;
        let fields = result.with_context(|| format!("fairness with apf={apf}"))?;
        out.emit("api-fairness", merge(json!({"apf": apf}), fields));
    }
    Ok(())
}

async fn measure(
    plan: &Plan,
    phase: Duration,
    server: &ServerChild,
    dir: &std::path::Path,
) -> Result<Value> {
    let admin = kube::Client::try_from(server.config().await?)?;
    setup(&admin).await?;
    let polite = server.user_config(dir, "polite").await?;
    let flooder = server.user_config(dir, "flooder").await?;
    // the polite client has a thread and runtime of its own (its connections are made
    // there), so that its latency is the server's and not time spent behind the flood's
    // tasks in this process
    let apart = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    let niced = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .on_thread_start(|| {
            let tid = rustix::thread::gettid();
            if let Err(e) = rustix::process::setpriority_process(Some(tid), 19) {
                tracing::warn!(error = %e, "the flooder's threads keep their priority");
            }
        })
        .build()?;
    // A kube client queues its requests through a task spawned where the client is made
    // (tower's `Buffer`): each is made on the runtime that uses it, or every polite request
    // would also wait for a turn on this runtime's threads, beside the flood's queue.
    let polite = {
        let _on = apart.enter();
        kube::Client::try_from(polite)?
    };
    let flooder = {
        let _on = niced.enter();
        kube::Client::try_from(flooder)?
    };
    let result = flood(
        plan,
        phase,
        server,
        &admin,
        (&apart, &niced),
        polite,
        flooder,
    )
    .await;
    apart.shutdown_background();
    niced.shutdown_background();
    result
}

/// The polite client's two phases, calm and under the flood, and the line's fields.
async fn flood(
    plan: &Plan,
    phase: Duration,
    server: &ServerChild,
    admin: &kube::Client,
    (apart, niced): (&tokio::runtime::Runtime, &tokio::runtime::Runtime),
    polite: kube::Client,
    flooder: kube::Client,
) -> Result<Value> {
    let polite_phase = |length: Duration| apart.spawn(polite_phase(polite.clone(), length));
    // warms up the connection and the server's caches first
    polite_phase(Duration::from_secs(1)).await??;
    let calm = polite_phase(phase).await??;

    let cpu = CpuMeter {
        processes: vec![
            ("server", server.pid.to_string()),
            ("client", "self".into()),
        ],
    };
    let before = cpu.snapshot();
    let stop = Arc::new(AtomicBool::new(false));
    let (listed, refused, failed) = (
        Arc::new(AtomicUsize::new(0)),
        Arc::new(AtomicUsize::new(0)),
        Arc::new(AtomicUsize::new(0)),
    );
    let loops: Vec<_> = (0..plan.clients)
        .map(|_| {
            let (flooder, stop) = (flooder.clone(), stop.clone());
            let (listed, refused, failed) = (listed.clone(), refused.clone(), failed.clone());
            niced.spawn(async move {
                let path = format!("/api/v1/namespaces/{NAMESPACE}/configmaps");
                while !stop.load(Ordering::Relaxed) {
                    match status_of(&flooder, &path).await {
                        Ok(200) => listed.fetch_add(1, Ordering::Relaxed),
                        Ok(429) => refused.fetch_add(1, Ordering::Relaxed),
                        _ => failed.fetch_add(1, Ordering::Relaxed),
                    };
                }
            })
        })
        .collect();
    // the flood reaches its pace before the polite client is timed
    tokio::time::sleep(Duration::from_secs(1)).await;
    let flood_started = Instant::now();
    let (listed_before, refused_before) = (
        listed.load(Ordering::Relaxed),
        refused.load(Ordering::Relaxed),
    );
    let metrics_before = metrics(admin).await?;
    let flooded = polite_phase(phase).await??;
    let metrics_after = metrics(admin).await?;
    let flood_seconds = flood_started.elapsed().as_secs_f64();
    let flood_lists = listed.load(Ordering::Relaxed) - listed_before;
    let flood_refused = refused.load(Ordering::Relaxed) - refused_before;
    stop.store(true, Ordering::Relaxed);
    join_all(loops).await;
    let calm_p99 = ms(&calm.latency, 0.99);
    let flood_p99 = ms(&flooded.latency, 0.99);
    Ok(merge(
        cpu.used_since(&before),
        json!({
            "configmaps": CONFIGMAPS,
            "flood_clients": plan.clients,
            "phase_s": phase.as_secs(),
            "calm_requests": calm.latency.len(),
            "calm_p50_ms": ms(&calm.latency, 0.5),
            "calm_p99_ms": calm_p99,
            "flood_requests": flooded.latency.len(),
            "flood_p50_ms": ms(&flooded.latency, 0.5),
            "flood_p99_ms": flood_p99,
            "flood_max_ms": max_ms(&flooded.latency),
            "p99_vs_calm": round3(flood_p99 / calm_p99),
            "polite_failed": calm.failed + flooded.failed,
            "flood_lists_per_sec": (flood_lists as f64 / flood_seconds).round(),
            "flood_refused_per_sec": (flood_refused as f64 / flood_seconds).round(),
            "flood_failed": failed.load(Ordering::Relaxed),
            "polite_apf_waits_over_5ms": over(
                (&metrics_before, &metrics_after),
                "apiserver_flowcontrol_request_wait_duration_seconds",
                &["flow_schema=\"bench-polite\"", "execute=\"true\""],
                "0.005",
            ),
            "polite_server_over_5ms": over(
                (&metrics_before, &metrics_after),
                "apiserver_request_duration_seconds",
                &["verb=\"GET\"", "resource=\"configmaps\""],
                "0.005",
            ),
        }),
    ))
}

/// The namespace, its ConfigMaps, and `view` for both users.
async fn setup(admin: &kube::Client) -> Result<()> {
    let post = |path: String, body: Value| {
        let admin = admin.clone();
        async move {
            send_ok(
                &admin,
                Method::POST,
                &path,
                "application/json",
                Bytes::from(body.to_string()),
            )
            .await
        }
    };
    post(
        "/api/v1/namespaces".into(),
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}),
    )
    .await?;
    post(
        "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings".into(),
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": "bench-view"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                        "name": "view"},
            "subjects": [
                {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "polite"},
                {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "flooder"},
            ],
        }),
    )
    .await?;
    post(
        "/apis/flowcontrol.apiserver.k8s.io/v1/flowschemas".into(),
        json!({
            "apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "FlowSchema",
            "metadata": {"name": "bench-polite"},
            "spec": {
                "matchingPrecedence": 500,
                "priorityLevelConfiguration": {"name": "global-default"},
                "distinguisherMethod": {"type": "ByUser"},
                "rules": [{
                    "subjects": [{"kind": "User", "user": {"name": "polite"}}],
                    "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"],
                                       "namespaces": ["*"]}],
                }],
            },
        }),
    )
    .await?;
    let path = format!("/api/v1/namespaces/{NAMESPACE}/configmaps");
    for batch in (0..CONFIGMAPS).collect::<Vec<_>>().chunks(100) {
        let creates = batch.iter().map(|i| {
            post(
                path.clone(),
                json!({"apiVersion": "v1", "kind": "ConfigMap",
                       "metadata": {"name": format!("cm-{i:05}"), "labels": {"app": "bench"}},
                       "data": {"key": "x".repeat(200)}}),
            )
        });
        for created in join_all(creates).await {
            created?;
        }
    }
    Ok(())
}

/// The API server's metrics, as text.
async fn metrics(admin: &kube::Client) -> Result<String> {
    let body = send_ok(admin, Method::GET, "/metrics", "text/plain", Bytes::new()).await?;
    Ok(String::from_utf8_lossy(&body).into_owned())
}

/// How many more observations of histogram `name` (the series with all of `labels`) were
/// above `le` in `after` than in `before`.
fn over((before, after): (&str, &str), name: &str, labels: &[&str], le: &str) -> Option<u64> {
    let sum = |text: &str, suffix: &str, extra: Option<String>| -> Option<u64> {
        let prefix = format!("{name}{suffix}{{");
        let values: Vec<u64> = text
            .lines()
            .filter(|l| l.starts_with(&prefix))
            .filter(|l| labels.iter().all(|want| l.contains(want)))
            .filter(|l| extra.as_ref().is_none_or(|e| l.contains(e.as_str())))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .map(|v| v as u64)
            .collect();
        (!values.is_empty()).then(|| values.iter().sum())
    };
    let above = |text: &str| -> Option<u64> {
        let count = sum(text, "_count", None)?;
        let within = sum(text, "_bucket", Some(format!("le=\"{le}\"")))?;
        Some(count - within)
    };
    Some(above(after)?.saturating_sub(above(before).unwrap_or(0)))
}

struct Phase {
    latency: hdrhistogram::Histogram<u64>,
    failed: usize,
}

/// The polite client's GETs, one every [`POLITE_INTERVAL`], for `length`.
async fn polite_phase(client: kube::Client, length: Duration) -> Result<Phase> {
    let path = format!("/api/v1/namespaces/{NAMESPACE}/configmaps/cm-00000");
    let mut phase = Phase {
        latency: histogram(),
        failed: 0,
    };
    let mut tick = tokio::time::interval(POLITE_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let end = Instant::now() + length;
    while Instant::now() < end {
        tick.tick().await;
        let started = Instant::now();
        match status_of(&client, &path).await {
            Ok(200) => phase.latency.record(micros(started.elapsed()))?,
            _ => phase.failed += 1,
        }
    }
    Ok(phase)
}

/// The status of a GET of `path`, its body read and dropped.
async fn status_of(client: &kube::Client, path: &str) -> Result<u16> {
    let req = Request::builder()
        .method(Method::GET)
        .uri(path)
        .header(header::ACCEPT, "application/json")
        .body(Body::empty())?;
    let resp = client.send(req).await?;
    let status = resp.status().as_u16();
    resp.into_body().collect_bytes().await?;
    Ok(status)
}

#[cfg(test)]
mod tests {
    use super::over;

    #[test]
    fn observations_above_a_bucket_are_counted_between_scrapes() {
        let scrape = |count: u64, fast: u64| {
            format!(
                "h_bucket{{flow_schema=\"p\",execute=\"true\",le=\"0.005\"}} {fast}\n\
                 h_bucket{{flow_schema=\"p\",execute=\"true\",le=\"+Inf\"}} {count}\n\
                 h_count{{flow_schema=\"p\",execute=\"true\"}} {count}\n\
                 h_count{{flow_schema=\"q\",execute=\"true\"}} 99\n"
            )
        };
        let labels = ["flow_schema=\"p\""];
        assert_eq!(
            over((&scrape(10, 9), &scrape(30, 25)), "h", &labels, "0.005"),
            Some(4)
        );
        assert_eq!(over(("", &scrape(3, 3)), "h", &labels, "0.005"), Some(0));
        assert_eq!(over(("", ""), "h", &labels, "0.005"), None);
    }
}
