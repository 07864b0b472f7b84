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
    assert_eq!(
        fake.writes.lock().clone(),
        [
            "event FailedGetResourceMetric failed to get cpu utilization: unable to get metrics for resource cpu: unable to fetch metrics from resource metrics API: the server is currently unable to handle the request"
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
