use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::autoscaling::v1::{ScaleSpec, ScaleStatus};
use parking_lot::Mutex;
use serde_json::json;

use super::*;

/// A recording fake: the target's scale, the metrics it serves, and what was written.
#[derive(Default)]
struct Fake {
    replicas: Mutex<i32>,
    metrics: Mutex<Option<Result<Value, String>>>,
    writes: Mutex<Vec<String>>,
    statuses: Mutex<Vec<HorizontalPodAutoscaler>>,
    /// Custom and external metric lists by `{pods/metric | Kind/name/metric |
    /// external/metric}?{metric selector}`; a path without one is not found.
    custom: Mutex<BTreeMap<String, Value>>,
}

impl Fake {
    fn custom(&self, path: &str) -> Result<Value, String> {
        self.custom
            .lock()
            .get(path)
            .cloned()
            .ok_or_else(|| format!("the server could not find the metric {path}"))
    }
}

#[async_trait]
impl Autoscaling for Fake {
    async fn scale(&self, _: &str, target: &CrossVersionObjectReference) -> Result<Scale, String> {
        if target.name == "missing" {
            return Err("deployments.apps \"missing\" not found".into());
        }
        let replicas = *self.replicas.lock();
        Ok(Scale {
            spec: Some(ScaleSpec {
                replicas: Some(replicas),
            }),
            status: Some(ScaleStatus {
                replicas,
                selector: Some("app=burn".into()),
            }),
            ..Default::default()
        })
    }

    async fn set_replicas(
        &self,
        _: &str,
        _: &CrossVersionObjectReference,
        n: i32,
    ) -> Result<(), String> {
        *self.replicas.lock() = n;
        self.writes.lock().push(format!("scale {n}"));
        Ok(())
    }

    async fn pod_metrics(&self, _: &str, selector: &str) -> Result<Value, String> {
        assert_eq!(selector, "app=burn");
        self.metrics
            .lock()
            .clone()
            .expect("metrics set by the test")
    }

    async fn pods_metric(
        &self,
        _: &str,
        selector: &str,
        metric: &str,
        metric_selector: &str,
    ) -> Result<Value, String> {
        assert_eq!(selector, "app=burn");
        self.custom(&format!("pods/{metric}?{metric_selector}"))
    }

    async fn object_metric(
        &self,
        _: &str,
        object: &CrossVersionObjectReference,
        metric: &str,
        metric_selector: &str,
    ) -> Result<Value, String> {
        let path = format!("{}/{}/{metric}?{metric_selector}", object.kind, object.name);
        self.custom(&path)
    }

    async fn external_metric(
        &self,
        _: &str,
        metric: &str,
        metric_selector: &str,
    ) -> Result<Value, String> {
        self.custom(&format!("external/{metric}?{metric_selector}"))
    }

    async fn update_status(&self, hpa: &HorizontalPodAutoscaler) -> Result<(), String> {
        self.statuses.lock().push(hpa.clone());
        Ok(())
    }

    fn event(&self, _: &HorizontalPodAutoscaler, note: Note) {
        self.writes
            .lock()
            .push(format!("event {} {}", note.reason, note.note));
    }
}

fn t(s: i64) -> Timestamp {
    Timestamp::from_second(1_800_000_000 + s).unwrap()
}

fn hpa(target: &str) -> HorizontalPodAutoscaler {
    serde_json::from_value(json!({
        "metadata": {"name": "burn", "namespace": "default", "generation": 1},
        "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": target},
                 "minReplicas": 1, "maxReplicas": 4,
                 "metrics": [{"type": "Resource", "resource": {"name": "cpu",
                              "target": {"type": "Utilization", "averageUtilization": 50}}}]},
    }))
    .unwrap()
}

fn pod(name: &str) -> Arc<Pod> {
    Arc::new(
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "default", "labels": {"app": "burn"}},
            "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "100m"}}}]},
            "status": {"phase": "Running", "startTime": "2026-01-01T00:00:00Z",
                       "conditions": [{"type": "Ready", "status": "True",
                                       "lastTransitionTime": "2026-01-01T00:00:10Z"}]},
        }))
        .unwrap(),
    )
}

fn metrics(cpu: &str) -> Value {
    json!({"kind": "PodMetricsList", "items": [
        {"metadata": {"name": "p1", "namespace": "default"},
         "timestamp": "2027-01-15T08:00:00Z", "window": "15s",
         "containers": [{"name": "c", "usage": {"cpu": cpu, "memory": "1Mi"}}]}]})
}

fn settings() -> Settings {
    Settings {
        calculator: Calculator::default(),
        downscale_stabilization: SignedDuration::from_secs(60),
    }
}

fn condition(status: &HorizontalPodAutoscalerStatus, type_: &str) -> (String, String) {
    let c = status
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == type_)
        .unwrap();
    (c.status.clone(), c.reason.clone().unwrap_or_default())
}

#[tokio::test]
async fn a_busy_target_scales_up_within_its_policies_and_back_down_after_the_window() {
    let fake = Fake::default();
    *fake.replicas.lock() = 1;
    *fake.metrics.lock() = Some(Ok(metrics("200m")));
    let histories = Histories::default();
    let pods = [pod("p1")];
    reconcile(&hpa("web"), &pods, &fake, &histories, &settings(), t(0))
        .await
        .unwrap();
    // 200% of the 50% target on one pod asks for 4: the default scale-up policy allows it
    assert_eq!(*fake.replicas.lock(), 4);
    assert_eq!(
        fake.writes.lock().clone(),
        [
            "scale 4",
            "event SuccessfulRescale New size: 4; reason: cpu resource utilization (percentage of request) above target"
        ]
    );
    let status = fake.statuses.lock().last().unwrap().status.clone().unwrap();
    assert_eq!(
        (status.current_replicas, status.desired_replicas),
        (Some(1), 4)
    );
    assert_eq!(
        condition(&status, "AbleToScale"),
        ("True".into(), "SucceededRescale".into())
    );
    assert_eq!(
        condition(&status, "ScalingActive"),
        ("True".into(), "ValidMetricFound".into())
    );
    assert_eq!(
        condition(&status, "ScalingLimited"),
        ("False".into(), "DesiredWithinRange".into())
    );
    let current = &status.current_metrics.as_ref().unwrap()[0];
    assert_eq!(
        current
            .resource
            .as_ref()
            .unwrap()
            .current
            .average_utilization,
        Some(200)
    );
    assert_eq!(
        current.resource.as_ref().unwrap().current.average_value,
        Some(Quantity("200m".into()))
    );

    // idle: held by the 60 s window, then down to the minimum
    *fake.metrics.lock() = Some(Ok(metrics("0")));
    fake.writes.lock().clear();
    let mut synced = hpa("web");
    synced.status = Some(status);
    reconcile(&synced, &pods, &fake, &histories, &settings(), t(30))
        .await
        .unwrap();
    assert_eq!(*fake.replicas.lock(), 4);
    let status = fake.statuses.lock().last().unwrap().status.clone().unwrap();
    assert_eq!(
        condition(&status, "AbleToScale"),
        ("True".into(), "ScaleDownStabilized".into())
    );
    reconcile(&synced, &pods, &fake, &histories, &settings(), t(61))
        .await
        .unwrap();
    assert_eq!(*fake.replicas.lock(), 1);
    assert_eq!(
        fake.writes.lock().clone(),
        [
            "scale 1",
            "event SuccessfulRescale New size: 1; reason: All metrics below target"
        ]
    );
}

#[tokio::test]
async fn a_missing_target_or_missing_metrics_are_conditions_and_events() {
    let fake = Fake::default();
    *fake.replicas.lock() = 2;
    let histories = Histories::default();
    let e = reconcile(&hpa("missing"), &[], &fake, &histories, &settings(), t(0))
        .await
        .unwrap_err();
    assert_eq!(e, "deployments.apps \"missing\" not found");
    assert_eq!(
        fake.writes.lock().clone(),
        ["event FailedGetScale deployments.apps \"missing\" not found"]
    );
    let status = fake.statuses.lock().last().unwrap().status.clone().unwrap();
    assert_eq!(
        condition(&status, "AbleToScale"),
        ("False".into(), "FailedGetScale".into())
    );

    fake.writes.lock().clear();
    *fake.metrics.lock() = Some(Err(
        "the server is currently unable to handle the request".into()
    ));
    reconcile(
        &hpa("web"),
        &[pod("p1")],
        &fake,
        &histories,
        &settings(),
        t(0),
    )
    .await
    .unwrap_err();
    let error = "failed to get cpu utilization: unable to get metrics for resource cpu: unable to fetch metrics from resource metrics API: the server is currently unable to handle the request";
    assert_eq!(
        fake.writes.lock().clone(),
        [
            format!("event FailedGetResourceMetric {error}"),
            format!(
                "event FailedComputeMetricsReplicas invalid metrics (1 invalid out of 1), first error is: failed to get cpu resource metric value: {error}"
            ),
        ]
    );
    let status = fake.statuses.lock().last().unwrap().status.clone().unwrap();
    assert_eq!(
        condition(&status, "ScalingActive"),
        ("False".into(), "FailedGetResourceMetric".into())
    );
    // nothing scaled
    assert_eq!(*fake.replicas.lock(), 2);
}

#[test]
fn a_partial_behavior_keeps_upstreams_defaults_for_the_rest() {
    let spec: k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscalerBehavior =
        serde_json::from_value(json!({"scaleDown": {"stabilizationWindowSeconds": 10}})).unwrap();
    let b = behavior_of(Some(&spec), SignedDuration::from_mins(5));
    let defaults = Behavior::defaults(SignedDuration::from_mins(5));
    assert_eq!(b.down.window, SignedDuration::from_secs(10));
    assert_eq!(b.down.policies, defaults.down.policies);
    assert_eq!(b.up, defaults.up);
}

/// An HPA of `burn` (2 to 10 replicas) with `metrics`.
fn hpa_with(metrics: Value) -> HorizontalPodAutoscaler {
    serde_json::from_value(json!({
        "metadata": {"name": "burn", "namespace": "default", "generation": 1},
        "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                 "minReplicas": 1, "maxReplicas": 10, "metrics": metrics},
    }))
    .unwrap()
}

/// A custom metrics `MetricValueList` of pods' values, or of one object's.
fn values(kind: &str, values: &[(&str, &str)]) -> Value {
    let items: Vec<Value> = values
        .iter()
        .map(|(name, value)| {
            json!({"describedObject": {"kind": kind, "namespace": "default", "name": name,
                                       "apiVersion": "/v1"},
                   "metricName": "m", "timestamp": "2027-01-15T08:00:00Z", "value": value})
        })
        .collect();
    json!({"kind": "MetricValueList", "apiVersion": "custom.metrics.k8s.io/v1beta2",
           "items": items})
}

/// An `ExternalMetricValueList` of `values`.
fn external(values: &[&str]) -> Value {
    let items: Vec<Value> = values
        .iter()
        .map(|v| {
            json!({"metricName": "queue_depth", "metricLabels": {"queue": "worker"},
                        "timestamp": "2027-01-15T08:00:00Z", "value": v})
        })
        .collect();
    json!({"kind": "ExternalMetricValueList", "apiVersion": "external.metrics.k8s.io/v1beta1",
           "items": items})
}

/// Syncs `hpa` once at 2 replicas with pods p1 and p2 (both ready): the writes and the status.
async fn sync_two(
    fake: &Fake,
    hpa: &HorizontalPodAutoscaler,
) -> (
    Result<(), String>,
    Vec<String>,
    HorizontalPodAutoscalerStatus,
) {
    *fake.replicas.lock() = 2;
    fake.writes.lock().clear();
    let pods = [pod("p1"), pod("p2")];
    let synced = reconcile(hpa, &pods, fake, &Histories::default(), &settings(), t(0)).await;
    let status = fake.statuses.lock().last().unwrap().status.clone().unwrap();
    (synced, fake.writes.lock().clone(), status)
}

#[tokio::test]
async fn a_pods_metric_averages_the_pods_values_against_the_target() {
    let fake = Fake::default();
    fake.custom.lock().insert(
        "pods/qps?".into(),
        values("Pod", &[("p1", "150"), ("p2", "250")]),
    );
    let hpa = hpa_with(json!([{"type": "Pods", "pods": {"metric": {"name": "qps"},
        "target": {"type": "AverageValue", "averageValue": "100"}}}]));
    let (synced, writes, status) = sync_two(&fake, &hpa).await;
    synced.unwrap();
    // an average of 200 against 100 per pod: twice the 2 ready pods
    assert_eq!(
        writes,
        [
            "scale 4",
            "event SuccessfulRescale New size: 4; reason: pods metric qps above target"
        ]
    );
    let current = status.current_metrics.clone().unwrap()[0].clone();
    assert_eq!(current.type_, "Pods");
    let pods = current.pods.unwrap();
    assert_eq!(pods.metric.name, "qps");
    assert_eq!(pods.current.average_value, Some(Quantity("200".into())));
    assert_eq!(
        condition(&status, "ScalingActive"),
        ("True".into(), "ValidMetricFound".into())
    );
}

#[tokio::test]
async fn an_object_metric_scales_by_its_value_or_per_replica_by_its_average() {
    let fake = Fake::default();
    fake.custom.lock().insert(
        "Service/frontend/requests?".into(),
        values("Service", &[("frontend", "300")]),
    );
    let object = |target: Value| {
        hpa_with(
            json!([{"type": "Object", "object": {"metric": {"name": "requests"},
            "describedObject": {"apiVersion": "v1", "kind": "Service", "name": "frontend"},
            "target": target}}]),
        )
    };
    // a value of 300 against 100: the 2 ready pods times 3
    let (synced, writes, status) =
        sync_two(&fake, &object(json!({"type": "Value", "value": "100"}))).await;
    synced.unwrap();
    assert_eq!(
        writes,
        [
            "scale 6",
            "event SuccessfulRescale New size: 6; reason: Service metric requests above target"
        ]
    );
    let current = status.current_metrics.unwrap()[0].object.clone().unwrap();
    assert_eq!(current.described_object.name, "frontend");
    assert_eq!(current.current.value, Some(Quantity("300".into())));

    // an average of 120 per replica: 300 / 120 rounded up, upstream's description included
    let (synced, writes, status) = sync_two(
        &fake,
        &object(json!({"type": "AverageValue", "averageValue": "120"})),
    )
    .await;
    synced.unwrap();
    assert_eq!(
        writes,
        [
            "scale 3",
            "event SuccessfulRescale New size: 3; reason: external metric requests(nil) above target"
        ]
    );
    let current = status.current_metrics.unwrap()[0].object.clone().unwrap();
    assert_eq!(current.current.average_value, Some(Quantity("150".into())));
    assert_eq!(current.current.value, None);
}

#[tokio::test]
async fn an_external_metric_sums_its_values_against_a_value_or_an_average_per_replica() {
    let fake = Fake::default();
    fake.custom.lock().insert(
        "external/queue_depth?queue=worker".into(),
        external(&["20", "30"]),
    );
    let queue = |target: Value| {
        hpa_with(json!([{"type": "External", "external": {
            "metric": {"name": "queue_depth", "selector": {"matchLabels": {"queue": "worker"}}},
            "target": target}}]))
    };
    let described = "external metric queue_depth(&LabelSelector{MatchLabels:map[string]string{queue: worker,},MatchExpressions:[]LabelSelectorRequirement{},})";
    // 50 in all against 10 per replica: 5 replicas, 25 each now
    let (synced, writes, status) = sync_two(
        &fake,
        &queue(json!({"type": "AverageValue", "averageValue": "10"})),
    )
    .await;
    synced.unwrap();
    assert_eq!(
        writes,
        [
            "scale 5".to_string(),
            format!("event SuccessfulRescale New size: 5; reason: {described} above target")
        ]
    );
    let current = status.current_metrics.unwrap()[0].external.clone().unwrap();
    assert_eq!(current.metric.name, "queue_depth");
    assert_eq!(current.current.average_value, Some(Quantity("25".into())));

    // 50 against a value of 25: the 2 ready pods twice over
    let (synced, writes, status) =
        sync_two(&fake, &queue(json!({"type": "Value", "value": "25"}))).await;
    synced.unwrap();
    assert_eq!(writes[0], "scale 4");
    let current = status.current_metrics.unwrap()[0].external.clone().unwrap();
    assert_eq!(current.current.value, Some(Quantity("50".into())));
}

#[tokio::test]
async fn a_missing_custom_metric_stops_scaling_with_upstreams_reason_and_events() {
    let fake = Fake::default();
    let hpa = hpa_with(
        json!([{"type": "Pods", "pods": {"metric": {"name": "missing"},
        "target": {"type": "AverageValue", "averageValue": "1"}}}]),
    );
    let (synced, writes, status) = sync_two(&fake, &hpa).await;
    let error = "unable to get metric missing: unable to fetch metrics from custom metrics API: the server could not find the metric pods/missing?";
    assert_eq!(
        synced.unwrap_err(),
        format!(
            "invalid metrics (1 invalid out of 1), first error is: failed to get pods metric value: {error}"
        )
    );
    assert_eq!(
        writes,
        [
            format!("event FailedGetPodsMetric {error}"),
            format!(
                "event FailedComputeMetricsReplicas invalid metrics (1 invalid out of 1), first error is: failed to get pods metric value: {error}"
            ),
        ]
    );
    let active = status
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == "ScalingActive")
        .unwrap();
    assert_eq!(
        (active.status.as_str(), active.reason.as_deref()),
        ("False", Some("FailedGetPodsMetric"))
    );
    assert_eq!(
        active.message.as_deref(),
        Some(format!("the HPA was unable to compute the replica count: {error}").as_str())
    );
    assert_eq!(*fake.replicas.lock(), 2);

    // an external metric with no values, next to a CPU metric that scales up: the HPA still
    // scales on the CPU, as upstream's, and reports the other
    *fake.metrics.lock() = Some(Ok(json!({"kind": "PodMetricsList", "items": [
        {"metadata": {"name": "p1"}, "timestamp": "2027-01-15T08:00:00Z", "window": "15s",
         "containers": [{"name": "c", "usage": {"cpu": "100m"}}]},
        {"metadata": {"name": "p2"}, "timestamp": "2027-01-15T08:00:00Z", "window": "15s",
         "containers": [{"name": "c", "usage": {"cpu": "100m"}}]}]})));
    fake.custom
        .lock()
        .insert("external/queue_depth?".into(), external(&[]));
    let hpa = hpa_with(json!([
        {"type": "Resource", "resource": {"name": "cpu",
            "target": {"type": "Utilization", "averageUtilization": 50}}},
        {"type": "External", "external": {"metric": {"name": "queue_depth"},
            "target": {"type": "Value", "value": "1"}}}]));
    let (synced, writes, status) = sync_two(&fake, &hpa).await;
    let error = "unable to get external metric default/queue_depth/nil: no metrics returned from external metrics API";
    assert_eq!(
        synced.unwrap_err(),
        format!(
            "invalid metrics (1 invalid out of 2), first error is: failed to get queue_depth external metric value: failed to get external metric queue_depth: {error}"
        )
    );
    assert_eq!(
        writes,
        [
            format!("event FailedGetExternalMetric {error}"),
            "scale 4".into(),
            "event SuccessfulRescale New size: 4; reason: cpu resource utilization (percentage of request) above target".into(),
        ]
    );
    assert_eq!(
        condition(&status, "ScalingActive"),
        ("True".into(), "ValidMetricFound".into())
    );
    // the failed metric's status is empty, as upstream's
    assert_eq!(
        status.current_metrics.clone().unwrap()[1],
        MetricStatus::default()
    );
}

#[tokio::test]
async fn a_missing_object_metric_is_reported_in_upstreams_words() {
    let fake = Fake::default();
    let hpa = hpa_with(
        json!([{"type": "Object", "object": {"metric": {"name": "requests"},
        "describedObject": {"apiVersion": "v1", "kind": "Service", "name": "frontend"},
        "target": {"type": "AverageValue", "averageValue": "1"}}}]),
    );
    let (synced, writes, status) = sync_two(&fake, &hpa).await;
    // upstream's message, the error in the object's name included
    let error = "unable to get metric requests: Service on default frontend/unable to fetch metrics from custom metrics API: the server could not find the metric Service/frontend/requests?";
    assert_eq!(
        writes,
        [
            format!("event FailedGetObjectMetric {error}"),
            format!(
                "event FailedComputeMetricsReplicas invalid metrics (1 invalid out of 1), first error is: failed to get object metric value: failed to get requests object metric: {error}"
            ),
        ]
    );
    assert!(synced.is_err());
    assert_eq!(
        condition(&status, "ScalingActive"),
        ("False".into(), "FailedGetObjectMetric".into())
    );
    assert_eq!(*fake.replicas.lock(), 2);
}
