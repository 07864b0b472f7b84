use serde_json::json;

use super::*;

#[test]
fn go_durations_are_written_as_go_writes_them() {
    let ms = SignedDuration::from_millis;
    assert_eq!(go_duration(ms(15_012)), "15.012s");
    assert_eq!(go_duration(ms(60_500)), "1m0.5s");
    assert_eq!(go_duration(ms(3_723_000)), "1h2m3s");
    assert_eq!(go_duration(ms(250)), "250ms");
    assert_eq!(go_duration(SignedDuration::from_nanos(1_500)), "1.5µs");
    assert_eq!(go_duration(SignedDuration::ZERO), "0s");
    assert_eq!(go_duration(ms(-2_000)), "-2s");
}

#[test]
fn node_and_pod_metrics_are_served_as_metrics_server_serves_them() {
    let now: Timestamp = "2026-12-04T10:00:20.5Z".parse().unwrap();
    let m = Metric {
        timestamp: "2026-12-04T10:00:15.25Z".parse().unwrap(),
        window: SignedDuration::from_millis(15_012),
        cpu_nanocores: 1_234_567,
        memory: 10 * 1024 * 1024,
    };
    assert_eq!(
        node_metrics("n1", &json!({"kubernetes.io/hostname": "n1"}), &m, now),
        json!({"kind": "NodeMetrics", "apiVersion": "metrics.k8s.io/v1beta1",
               "metadata": {"name": "n1", "creationTimestamp": "2026-12-04T10:00:20.5Z",
                            "labels": {"kubernetes.io/hostname": "n1"}},
               "timestamp": "2026-12-04T10:00:15Z", "window": "15.012s",
               "usage": {"cpu": "1234567n", "memory": "10Mi"}})
    );
    let odd = Metric {
        cpu_nanocores: 2_000_000_000,
        memory: 1000,
        ..m
    };
    let pod = pod_metrics(
        "default",
        "web",
        &json!({}),
        &vec![("z".to_string(), odd), ("a".to_string(), m)],
        now,
    );
    assert_eq!(
        pod,
        json!({"kind": "PodMetrics", "apiVersion": "metrics.k8s.io/v1beta1",
               "metadata": {"name": "web", "namespace": "default",
                            "creationTimestamp": "2026-12-04T10:00:20.5Z"},
               "timestamp": "2026-12-04T10:00:15Z", "window": "15.012s",
               "containers": [{"name": "a", "usage": {"cpu": "1234567n", "memory": "10Mi"}},
                              {"name": "z", "usage": {"cpu": "2", "memory": "1k"}}]})
    );
    assert_eq!(
        list("NodeMetricsList", vec![]),
        json!({"kind": "NodeMetricsList", "apiVersion": "metrics.k8s.io/v1beta1",
               "metadata": {}, "items": []})
    );
}
