use super::super::{NodeStats, PodReference};
use super::*;

fn time() -> Time {
    Time("2026-12-04T10:00:00Z".parse().unwrap())
}

fn cpu(seconds: u64) -> Option<CpuStats> {
    Some(CpuStats {
        time: time(),
        usage_nano_cores: None,
        usage_core_nano_seconds: Some(seconds * 1_000_000_000 + 500_000_000),
    })
}

fn memory(bytes: u64) -> Option<MemoryStats> {
    Some(MemoryStats {
        time: time(),
        available_bytes: None,
        usage_bytes: None,
        working_set_bytes: Some(bytes),
        rss_bytes: None,
        page_faults: None,
        major_page_faults: None,
    })
}

#[test]
fn resource_metrics_carry_each_samples_time_and_upstreams_names() {
    let summary = Summary {
        node: NodeStats {
            node_name: "n".into(),
            system_containers: vec![],
            start_time: time(),
            cpu: cpu(100),
            memory: memory(4096),
            network: None,
            fs: None,
            runtime: None,
            rlimit: None,
        },
        pods: vec![PodStats {
            pod_ref: PodReference {
                name: "web".into(),
                namespace: "default".into(),
                uid: "u".into(),
            },
            start_time: time(),
            containers: vec![ContainerStats {
                name: "c".into(),
                start_time: time(),
                cpu: cpu(2),
                memory: memory(1024),
                rootfs: None,
                logs: None,
            }],
            cpu: cpu(3),
            memory: None,
            network: None,
            volume_stats: vec![],
            ephemeral_storage: None,
            process_stats: None,
        }],
    };
    let ms = "1796378400000";
    let c = r#"{container="c",namespace="default",pod="web"}"#;
    let p = r#"{namespace="default",pod="web"}"#;
    let text = render(Some(&summary));
    let samples: Vec<&str> = text.lines().filter(|l| !l.starts_with('#')).collect();
    assert_eq!(
        samples,
        [
            format!("container_cpu_usage_seconds_total{c} 2.5 {ms}"),
            format!("container_memory_working_set_bytes{c} 1024 {ms}"),
            format!("container_start_time_seconds{c} 1796378400 {ms}"),
            format!("node_cpu_usage_seconds_total 100.5 {ms}"),
            format!("node_memory_working_set_bytes 4096 {ms}"),
            format!("pod_cpu_usage_seconds_total{p} 3.5 {ms}"),
            "resource_scrape_error 0".to_string(),
        ]
    );
    assert!(text.contains(
        "# HELP node_cpu_usage_seconds_total [STABLE] Cumulative cpu time consumed by the node \
         in core-seconds\n# TYPE node_cpu_usage_seconds_total counter\n"
    ));
    // a pod without memory figures has no sample, but its family is declared
    assert!(
        text.contains("# TYPE pod_memory_working_set_bytes gauge\n# HELP resource_scrape_error")
    );

    // a summary that could not be made: no samples, and the error
    let failed = render(None);
    let samples: Vec<&str> = failed.lines().filter(|l| !l.starts_with('#')).collect();
    assert_eq!(samples, ["resource_scrape_error 1"]);
}

#[test]
fn label_values_are_escaped() {
    assert_eq!(escape("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
}
