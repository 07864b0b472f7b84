use super::*;

fn t(ms: i64) -> Timestamp {
    Timestamp::from_millisecond(ms).unwrap()
}

/// What Skiff's kubelet (and upstream's) serves at `/metrics/resource`.
const SCRAPE: &str = r#"# HELP container_cpu_usage_seconds_total [STABLE] Cumulative cpu time consumed by the container in core-seconds
# TYPE container_cpu_usage_seconds_total counter
container_cpu_usage_seconds_total{container="burn",namespace="default",pod="burner"} 2.5 1796378400000
container_cpu_usage_seconds_total{container="half",namespace="default",pod="burner"} 1 1796378400000
# TYPE container_memory_working_set_bytes gauge
container_memory_working_set_bytes{container="burn",namespace="default",pod="burner"} 1024 1796378400001
# TYPE container_start_time_seconds gauge
container_start_time_seconds{container="burn",namespace="default",pod="burner"} 1796378300 1796378400000
# TYPE node_cpu_usage_seconds_total counter
node_cpu_usage_seconds_total 100.5 1796378400000
# TYPE node_memory_working_set_bytes gauge
node_memory_working_set_bytes 4.096e+03 1796378400002
# TYPE pod_cpu_usage_seconds_total counter
pod_cpu_usage_seconds_total{namespace="default",pod="burner"} 3.5 1796378400000
# TYPE resource_scrape_error gauge
resource_scrape_error 0
"#;

#[test]
fn a_kubelets_resource_metrics_are_read_with_their_times() {
    let batch = parse(SCRAPE, t(0)).unwrap();
    assert_eq!(
        batch.node,
        Some(Usage {
            cpu_seconds: 100.5,
            cpu_time: t(1796378400000),
            memory: 4096,
            memory_time: t(1796378400002),
        })
    );
    let key = ContainerKey {
        namespace: "default".into(),
        pod: "burner".into(),
        container: "burn".into(),
    };
    assert_eq!(
        batch.containers[&key],
        ContainerSample {
            usage: Usage {
                cpu_seconds: 2.5,
                cpu_time: t(1796378400000),
                memory: 1024,
                memory_time: t(1796378400001),
            },
            start_time: Some(t(1796378300000)),
        }
    );
    // a container without its memory sample is left out
    assert_eq!(batch.containers.len(), 1);
}

#[test]
fn samples_without_a_time_take_the_scrapes_and_label_values_are_unescaped() {
    let text = "container_cpu_usage_seconds_total{ pod=\"a\\\"b\", container=\"c\\\\d\",namespace=\"n\\nm\" } 1\n\
                container_memory_working_set_bytes{namespace=\"n\\nm\",pod=\"a\\\"b\",container=\"c\\\\d\"} 2\n";
    let batch = parse(text, t(5000)).unwrap();
    let (key, sample) = batch.containers.iter().next().unwrap();
    assert_eq!(
        (
            key.namespace.as_str(),
            key.pod.as_str(),
            key.container.as_str()
        ),
        ("n\nm", "a\"b", "c\\d")
    );
    assert_eq!(sample.usage.cpu_time, t(5000));
    assert_eq!(batch.node, None);
}

#[test]
fn a_malformed_line_is_an_error_naming_it() {
    let bad = [
        ("node_cpu_usage_seconds_total\n", "a sample without a value"),
        (
            "node_cpu_usage_seconds_total abc\n",
            "a value that is not a number",
        ),
        (
            "node_cpu_usage_seconds_total 1 x\n",
            "a timestamp that is not a number",
        ),
        ("x{a=\"b} 1\n", "an unterminated label value"),
        ("x{a=b} 1\n", "a label without a quoted value"),
        (
            "container_cpu_usage_seconds_total{pod=\"p\"} 1\n",
            "a container sample without its labels",
        ),
    ];
    for (text, what) in bad {
        assert_eq!(
            parse(&format!("# comment\n{text}"), t(0)),
            Err(Error::Line { line: 2, what }),
            "{text}"
        );
    }
}
