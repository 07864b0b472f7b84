//! `skiff bench api --crd`: custom resources against built-in objects, and what many CRDs cost.
//! One API server (embedded store), one JSON line per result:
//!
//! - `api-crd-create`: custom resources (a schema with validation, a default and a CEL rule)
//!   and ConfigMaps of about the same size POSTed by `clients` concurrent clients, each kind in
//!   turn; `vs_configmaps` is the custom resources' throughput as a fraction of the
//!   ConfigMaps'.
//! - `api-crd-establish`: for each of 50 CRDs, the time from its create returning to the first
//!   custom resource of it accepted (POSTed again every 2 ms until 201).
//! - `api-crd-discovery`: with 200 CRDs installed (10 per group, 20 groups: about a cluster
//!   running cert-manager, the Prometheus operator and a few more), aggregated discovery
//!   (`/apis` as kubectl asks for it) and one group version's OpenAPI v3 document, each
//!   fetched `lists` times (at least 10); and the server's RSS growth over the 199 CRDs after
//!   the throughput one.

use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use bytes::Bytes;
use http::{Method, Request, header};
use kube::client::Body;
use serde_json::{Value, json};

use super::{
    CpuMeter, Created, Emitter, NAMESPACE, Plan, ServerChild, create_bodies, histogram, max_ms, mb,
    merge, micros, ms, proc_status_kb, round3, send_ok,
};

/// CRDs installed in all, and over how many groups.
const CRDS: usize = 200;
const GROUPS: usize = 20;
/// Of those, the ones whose time to first object is measured.
const TIMED: usize = 50;
/// Where the throughput CRD lives.
const GROUP: &str = "bench.skiff.dev";

const AGGREGATED: &str = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json";

/// A CRD of `plural` in `group`, kind `Kind` from the plural, with the schema the custom
/// resources of the throughput workload pass.
/// The kind of a bench CRD: its plural, capitalised (`things7` → `Things7`).
fn kind_of(plural: &str) -> String {
    format!("{}{}", plural[..1].to_uppercase(), &plural[1..])
}

fn definition(group: &str, plural: &str) -> Value {
    let kind = kind_of(plural);
    let ports = json!({"type": "array", "items": {
        "type": "object", "required": ["port"],
        "properties": {"name": {"type": "string"},
                       "port": {"type": "integer", "minimum": 1, "maximum": 65535}}}});
    let spec = json!({
        "type": "object",
        "required": ["image"],
        "x-kubernetes-validations": [{"rule": "self.replicas <= self.maxReplicas",
                                      "message": "replicas must not exceed maxReplicas"}],
        "properties": {
            "image": {"type": "string", "maxLength": 256},
            "replicas": {"type": "integer", "minimum": 0, "default": 1},
            "maxReplicas": {"type": "integer", "minimum": 1},
            "mode": {"type": "string", "enum": ["fast", "safe"]},
            "labels": {"type": "object", "additionalProperties": {"type": "string"}},
            "ports": ports,
        },
    });
    let schema = json!({"type": "object", "properties": {
        "spec": spec,
        "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
    }});
    json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.{group}")},
        "spec": {
            "group": group, "scope": "Namespaced",
            "names": {"plural": plural, "singular": plural, "kind": kind},
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "subresources": {"status": {}},
                "additionalPrinterColumns": [
                    {"name": "Replicas", "type": "integer", "jsonPath": ".spec.replicas"}],
                "schema": {"openAPIV3Schema": schema},
            }],
        },
    })
}

/// Custom resource `i` of the throughput CRD.
fn custom_resource(i: usize) -> Vec<u8> {
    let object = json!({
        "apiVersion": format!("{GROUP}/v1"), "kind": "Widgets",
        "metadata": {"name": format!("w-{i:06}"), "namespace": NAMESPACE,
                     "labels": {"app.kubernetes.io/name": "bench", "tier": "backend"}},
        "spec": {"image": "registry.k8s.io/e2e-test-images/agnhost:2.53", "replicas": 2,
                 "maxReplicas": 5, "mode": "safe",
                 "labels": {"team": "storage", "cost-center": "1234"},
                 "ports": [{"name": "http", "port": 8080}, {"name": "metrics", "port": 9090}]},
    });
    serde_json::to_vec(&object).expect("a json! value serializes")
}

/// A ConfigMap of about the custom resource's size.
fn config_map(i: usize) -> Vec<u8> {
    let object = json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": format!("cm-{i:06}"), "namespace": NAMESPACE,
                     "labels": {"app.kubernetes.io/name": "bench", "tier": "backend"}},
        "data": {"image": "registry.k8s.io/e2e-test-images/agnhost:2.53", "replicas": "2",
                 "maxReplicas": "5", "mode": "safe", "team": "storage", "cost-center": "1234",
                 "ports": "http=8080,metrics=9090"},
    });
    serde_json::to_vec(&object).expect("a json! value serializes")
}

fn post_json(value: &Value) -> Bytes {
    Bytes::from(serde_json::to_vec(value).expect("a json! value serializes"))
}

/// POSTs `value` to `path`; fails unless it is accepted.
async fn post(client: &kube::Client, path: &str, value: &Value) -> Result<()> {
    send_ok(
        client,
        Method::POST,
        path,
        "application/json",
        post_json(value),
    )
    .await?;
    Ok(())
}

/// POSTs `body` to `path` until it is accepted; the status of each refusal must be 404 (the
/// resource is not served yet).
async fn post_until_created(client: &kube::Client, path: &str, body: Bytes) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let req = Request::builder()
            .method(Method::POST)
            .uri(path)
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from(body.clone()))?;
        let resp = client.send(req).await?;
        let status = resp.status();
        let _ = resp.into_body().collect_bytes().await?;
        match status.as_u16() {
            201 => return Ok(()),
            404 if Instant::now() < deadline => tokio::time::sleep(Duration::from_millis(2)).await,
            code => bail!("POST {path}: {code} while waiting for the CRD"),
        }
    }
}

fn rate(created: &Created) -> f64 {
    created.ops as f64 / created.elapsed.as_secs_f64()
}

fn created_fields(created: &Created) -> Value {
    json!({
        "count": created.ops,
        "object_bytes": created.body_bytes,
        "ops_per_sec": rate(created).round(),
        "p50_ms": ms(&created.latency, 0.5),
        "p99_ms": ms(&created.latency, 0.99),
        "max_ms": max_ms(&created.latency),
    })
}

fn rss_mb(pid: u32) -> Result<Option<u64>> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    Ok(proc_status_kb(&status, "VmRSS"))
}

pub(super) async fn run(plan: &Plan, out: &Emitter) -> Result<()> {
    let tmp = tempfile::tempdir()?;
    let mut server = ServerChild::start(tmp.path(), None).await?;
    let result = measure(plan, &server, out).await;
    server.stop().await;
    result
}

async fn measure(plan: &Plan, server: &ServerChild, out: &Emitter) -> Result<()> {
    let client = kube::Client::try_from(server.config().await?)?;
    let cpu = CpuMeter {
        processes: vec![
            ("server", server.pid.to_string()),
            ("client", "self".into()),
        ],
    };
    post(
        &client,
        "/api/v1/namespaces",
        &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}),
    )
    .await?;
    // Throughput: ConfigMaps, then custom resources, on the same server.
    post(
        &client,
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
        &definition(GROUP, "widgets"),
    )
    .await?;
    let first = Bytes::from(custom_resource(plan.pods));
    let path = format!("/apis/{GROUP}/v1/namespaces/{NAMESPACE}/widgets");
    post_until_created(&client, &path, first).await?;
    let maps = create_bodies(
        &client,
        plan,
        &cpu,
        &format!("/api/v1/namespaces/{NAMESPACE}/configmaps"),
        (0..plan.pods).map(|i| config_map(i).into()).collect(),
    )
    .await?;
    let customs = create_bodies(
        &client,
        plan,
        &cpu,
        &path,
        (0..plan.pods).map(|i| custom_resource(i).into()).collect(),
    )
    .await?;
    out.emit(
        "api-crd-create",
        json!({
            "clients": plan.clients,
            "custom_resources": merge(customs.cpu.clone(), created_fields(&customs)),
            "configmaps": merge(maps.cpu.clone(), created_fields(&maps)),
            "vs_configmaps": round3(rate(&customs) / rate(&maps)),
        }),
    );

    // Time from a CRD's create to its first custom resource, then the rest of the 200.
    let rss_before = rss_mb(server.pid)?;
    let mut establish = histogram();
    for i in 1..CRDS {
        let group = format!("g{}.{GROUP}", i % GROUPS);
        let plural = format!("things{i}");
        post(
            &client,
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
            &definition(&group, &plural),
        )
        .await?;
        if i > TIMED {
            continue;
        }
        let t = Instant::now();
        let object = json!({"apiVersion": format!("{group}/v1"), "kind": kind_of(&plural),
                            "metadata": {"name": "first"},
                            "spec": {"image": "x", "maxReplicas": 3}});
        let path = format!("/apis/{group}/v1/namespaces/{NAMESPACE}/{plural}");
        post_until_created(&client, &path, post_json(&object)).await?;
        establish.record(micros(t.elapsed()))?;
    }
    out.emit(
        "api-crd-establish",
        json!({
            "crds": establish.len(),
            "p50_ms": ms(&establish, 0.5),
            "p99_ms": ms(&establish, 0.99),
            "max_ms": max_ms(&establish),
        }),
    );

    // Reads with every CRD installed. Established is written after the type is served, so
    // wait for the last one before reading.
    let last = format!(
        "/apis/g{}.{GROUP}/v1/things{}",
        (CRDS - 1) % GROUPS,
        CRDS - 1
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    while send_ok(
        &client,
        Method::GET,
        &last,
        "application/json",
        Bytes::new(),
    )
    .await
    .is_err()
    {
        if Instant::now() > deadline {
            bail!("{last} was never served");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let timed_get = |path: String, accept: &'static str| {
        let client = client.clone();
        async move {
            let mut latency = histogram();
            let mut bytes = 0;
            for _ in 0..plan.lists.max(10) {
                let req = Request::builder()
                    .uri(&path)
                    .header(header::ACCEPT, accept)
                    .body(Body::empty())?;
                let t = Instant::now();
                let resp = client.send(req).await?;
                let status = resp.status();
                let body = resp.into_body().collect_bytes().await?;
                latency.record(micros(t.elapsed()))?;
                if !status.is_success() {
                    bail!("GET {path}: {status}");
                }
                bytes = body.len();
            }
            anyhow::Ok((latency, bytes))
        }
    };
    let (discovery, discovery_bytes) = timed_get("/apis".into(), AGGREGATED).await?;
    let (openapi, openapi_bytes) = timed_get(
        format!("/openapi/v3/apis/g0.{GROUP}/v1"),
        "application/json",
    )
    .await?;
    let rss_after = rss_mb(server.pid)?;
    let growth = match (rss_before, rss_after) {
        (Some(a), Some(b)) => mb(Some(b.saturating_sub(a))),
        _ => Value::Null,
    };
    out.emit(
        "api-crd-discovery",
        json!({
            "crds": CRDS,
            "groups": GROUPS + 1,
            "discovery_bytes": discovery_bytes,
            "discovery_p50_ms": ms(&discovery, 0.5),
            "discovery_p99_ms": ms(&discovery, 0.99),
            "openapi_v3_bytes": openapi_bytes,
            "openapi_v3_p50_ms": ms(&openapi, 0.5),
            "openapi_v3_p99_ms": ms(&openapi, 0.99),
            "rss_before_mb": mb(rss_before),
            "rss_after_mb": mb(rss_after),
            "rss_growth_mb": growth,
            "custom_resources_stored": plan.pods + 1 + TIMED,
        }),
    );
    Ok(())
}
