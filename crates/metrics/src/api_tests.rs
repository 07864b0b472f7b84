use serde_json::json;

use super::*;

fn labels(pairs: &[(&str, &str)]) -> Labels {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn value(item: impl Serialize) -> Value {
    serde_json::to_value(item).unwrap()
}

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
    let hostname = labels(&[("kubernetes.io/hostname", "n1")]);
    assert_eq!(
        value(node_metrics("n1", &hostname, &m, now)),
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
    let none = Labels::new();
    let pod = pod_metrics("default", "web", &none, &[("z", odd), ("a", m)], now);
    assert_eq!(
        value(pod),
        json!({"kind": "PodMetrics", "apiVersion": "metrics.k8s.io/v1beta1",
               "metadata": {"name": "web", "namespace": "default",
                            "creationTimestamp": "2026-12-04T10:00:20.5Z"},
               "timestamp": "2026-12-04T10:00:15Z", "window": "15.012s",
               "containers": [{"name": "a", "usage": {"cpu": "1234567n", "memory": "10Mi"}},
                              {"name": "z", "usage": {"cpu": "2", "memory": "1k"}}]})
    );
}

#[test]
fn lists_are_written_item_by_item() {
    let parsed = |json: Vec<u8>| serde_json::from_slice::<Value>(&json).unwrap();
    assert_eq!(
        parsed(List::new("NodeMetricsList").finish()),
        json!({"kind": "NodeMetricsList", "apiVersion": "metrics.k8s.io/v1beta1",
               "metadata": {}, "items": []})
    );
    assert_eq!(List::new("NodeMetricsList").first(), None);
    let two = || {
        let mut list = List::new("PodMetricsList");
        list.push(&json!({"name": "one"}));
        list.push(&"two");
        list
    };
    assert_eq!(
        parsed(two().finish())["items"],
        json!([{"name": "one"}, "two"])
    );
    assert_eq!(parsed(two().first().unwrap()), json!({"name": "one"}));
}

#[test]
fn paths_are_the_group_versions_resources() {
    let p = |path| Request::parse(path);
    assert_eq!(p("/apis/metrics.k8s.io/v1beta1"), Some(Request::Resources));
    assert_eq!(
        p("/apis/metrics.k8s.io/v1beta1/nodes/n1"),
        Some(Request::Nodes {
            name: Some("n1".into())
        })
    );
    assert_eq!(
        p("/apis/metrics.k8s.io/v1beta1/namespaces/default/pods"),
        Some(Request::Pods {
            namespace: Some("default".into()),
            name: None
        })
    );
    assert_eq!(
        p("/apis/metrics.k8s.io/v1beta1/pods").unwrap().attributes(),
        Some(("list", "pods", None, None))
    );
    assert_eq!(p("/apis/metrics.k8s.io/v1beta1/services"), None);
    assert_eq!(p("/api/v1/pods"), None);
}

fn stored() -> crate::storage::Storage {
    use crate::scrape::{Batch, ContainerKey, ContainerSample, Usage};
    let at = |s: i64, cpu: f64| Usage {
        cpu_seconds: cpu,
        cpu_time: Timestamp::from_second(s).unwrap(),
        memory: 1024,
        memory_time: Timestamp::from_second(s).unwrap(),
    };
    let batch = |s: i64, cpu: f64| Batch {
        node: Some(at(s, cpu)),
        containers: [(
            ContainerKey {
                namespace: "default".into(),
                pod: "web".into(),
                container: "c".into(),
            },
            ContainerSample {
                usage: at(s, cpu),
                start_time: None,
            },
        )]
        .into(),
    };
    let storage = crate::storage::Storage::default();
    storage.store("n1", batch(1000, 1.0));
    storage.store("n1", batch(1010, 6.0));
    // the same pod on another node's scrapes too (made again there), until n1's next scrape
    storage.store("n3", batch(1000, 1.0));
    storage.store("n3", batch(1010, 6.0));
    storage
}

#[test]
fn answers_select_by_labels_and_leave_out_what_has_no_metrics() {
    let storage = stored();
    let now = Timestamp::from_second(1020).unwrap();
    let zone = labels(&[("zone", "a")]);
    let (web, db) = (labels(&[("app", "web")]), labels(&[("app", "db")]));
    let nodes = [("n1", &zone), ("n2", &zone)];
    let pods = [("default", "web", &web), ("default", "db", &db)];
    let ask = |r: Request, s: Option<&str>| {
        let (code, body) = answer(&r, s, &nodes, &pods, &storage, now);
        (code, serde_json::from_slice::<Value>(&body).unwrap())
    };
    let (code, list) = ask(Request::Nodes { name: None }, Some("zone=a"));
    // n2 was never scraped: not listed
    assert_eq!((code, list["items"].as_array().unwrap().len()), (200, 1));
    assert_eq!(list["items"][0]["usage"]["cpu"], "500m");
    let (code, one) = ask(
        Request::Nodes {
            name: Some("n2".into()),
        },
        None,
    );
    assert_eq!(
        (code, one["message"].as_str().unwrap()),
        (404, "nodemetrics.metrics.k8s.io \"n2\" not found")
    );
    let (_, list) = ask(
        Request::Pods {
            namespace: Some("default".into()),
            name: None,
        },
        Some("app=web"),
    );
    assert_eq!(list["items"].as_array().unwrap().len(), 1, "listed once");
    assert_eq!(list["items"][0]["metadata"]["name"], "web");
    assert_eq!(
        list["items"][0]["metadata"]["labels"],
        json!({"app": "web"})
    );
    assert_eq!(list["items"][0]["containers"][0]["usage"]["cpu"], "500m");
    let (code, one) = ask(
        Request::Pods {
            namespace: Some("default".into()),
            name: Some("web".into()),
        },
        None,
    );
    assert_eq!((code, one["kind"].as_str()), (200, Some("PodMetrics")));
    let (_, none) = ask(
        Request::Pods {
            namespace: None,
            name: None,
        },
        Some("app=db"),
    );
    assert_eq!(none["items"], json!([]));
    let (code, bad) = ask(Request::Nodes { name: None }, Some("a in ("));
    assert_eq!((code, bad["reason"].as_str()), (400, Some("BadRequest")));
}
