//! The API as the controller reads it: the custom metrics API's version fallback and the
//! `traceparent` of one HPA's requests, against an in-process fake API server.

use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::Full;
use parking_lot::Mutex;
use serde_json::json;

use super::*;

/// The paths (with queries) and `traceparent`s the fake was asked for.
type Seen = Arc<Mutex<Vec<(String, Option<String>)>>>;

/// An API whose `custom.metrics.k8s.io` group serves `versions` (none: not registered).
fn fake(versions: &'static [&'static str]) -> (KubeAutoscaling, Seen) {
    let seen = Seen::default();
    let log = seen.clone();
    let service = tower::service_fn(move |req: http::Request<kube::client::Body>| {
        let log = log.clone();
        async move {
            let path = req
                .uri()
                .path_and_query()
                .map(|p| p.to_string())
                .unwrap_or_default();
            let traceparent = req
                .headers()
                .get("traceparent")
                .map(|v| v.to_str().unwrap().to_string());
            log.lock().push((path.clone(), traceparent));
            let root = "/apis/custom.metrics.k8s.io";
            let served = versions
                .iter()
                .find(|v| path.starts_with(&format!("{root}/{v}/")));
            let (status, body) = match served {
                Some(v) => (
                    200,
                    json!({"kind": "MetricValueList", "apiVersion": format!("custom.metrics.k8s.io/{v}"),
                                         "items": [{"describedObject": {"kind": "Pod", "name": "p"}, "value": "1"}]}),
                ),
                None if path == root && !versions.is_empty() => (
                    200,
                    json!({"kind": "APIGroup",
                    "name": "custom.metrics.k8s.io",
                    "versions": versions.iter().map(|v| json!({"groupVersion": format!("custom.metrics.k8s.io/{v}"), "version": v})).collect::<Vec<_>>()}),
                ),
                None => (
                    404,
                    json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                                     "reason": "NotFound", "code": 404, "message": "the server could not find the requested resource"}),
                ),
            };
            let response = http::Response::builder()
                .status(status)
                .header("content-type", "application/json")
                .body(Full::new(Bytes::from(body.to_string())))
                .unwrap();
            Ok::<_, Infallible>(response)
        }
    });
    let client = kube::Client::new(service, "default");
    let api = KubeAutoscaling {
        recorder: Recorder::new(
            client.clone(),
            skiff_runtime::events::Reporter {
                controller: "test".into(),
                instance: "test".into(),
            },
        ),
        client,
        traceparent: None,
    };
    (api, seen)
}

fn paths(seen: &Seen) -> Vec<String> {
    seen.lock().iter().map(|(p, _)| p.clone()).collect()
}

#[tokio::test]
async fn custom_metrics_are_read_at_v1beta2_and_at_v1beta1_from_an_adapter_serving_only_that() {
    let (api, seen) = fake(&["v1beta2", "v1beta1"]);
    let list = api.custom("namespaces/ns/pods/*/qps", &[]).await.unwrap();
    assert_eq!(list["apiVersion"], "custom.metrics.k8s.io/v1beta2");
    assert_eq!(
        paths(&seen),
        ["/apis/custom.metrics.k8s.io/v1beta2/namespaces/ns/pods/*/qps"]
    );

    let (api, seen) = fake(&["v1beta1"]);
    let list = api
        .custom("namespaces/ns/pods/*/qps", &[("labelSelector", "app=web")])
        .await
        .unwrap();
    assert_eq!(list["apiVersion"], "custom.metrics.k8s.io/v1beta1");
    assert_eq!(
        paths(&seen),
        [
            "/apis/custom.metrics.k8s.io/v1beta2/namespaces/ns/pods/*/qps?labelSelector=app%3Dweb",
            "/apis/custom.metrics.k8s.io",
            "/apis/custom.metrics.k8s.io/v1beta1/namespaces/ns/pods/*/qps?labelSelector=app%3Dweb",
        ]
    );
}

#[tokio::test]
async fn an_unregistered_custom_metrics_api_is_upstreams_discovery_error() {
    let (api, _) = fake(&[]);
    let error = api
        .custom("namespaces/ns/pods/*/qps", &[])
        .await
        .unwrap_err();
    assert_eq!(error, "no known available metric versions found");
}

#[tokio::test]
async fn one_hpas_requests_carry_its_uid_as_their_trace_id() {
    let (api, seen) = fake(&["v1beta2"]);
    let mut hpa = HorizontalPodAutoscaler::default();
    hpa.metadata.uid = Some("6e8bc430-9c3a-11d9-9669-0800200c9a66".into());
    api.for_hpa(&hpa)
        .external_metric("ns", "queue", "")
        .await
        .unwrap_err();
    api.external_metric("ns", "queue", "").await.unwrap_err();
    let seen = seen.lock();
    let traced = seen[0].1.as_deref().expect("a traceparent");
    assert!(
        traced.starts_with("00-6e8bc4309c3a11d996690800200c9a66-"),
        "{traced}"
    );
    assert_eq!(seen[1].1, None, "the shared API sends none");
}
