use std::time::{Duration, Instant};

use serde_json::json;

use super::*;

fn time() -> Time {
    Time("2026-12-04T10:00:00Z".parse().unwrap())
}

#[test]
fn a_rate_needs_two_samples_a_second_apart_and_a_counter_that_did_not_go_back() {
    let rates = Rates::default();
    let t0 = Instant::now();
    assert_eq!(rates.rate("c", t0, 1_000_000_000), None);
    // half a core over two seconds
    let t1 = t0 + Duration::from_secs(2);
    assert_eq!(rates.rate("c", t1, 2_000_000_000), Some(500_000_000));
    // a look within the window keeps the last rate and the last sample
    let t2 = t1 + Duration::from_millis(10);
    assert_eq!(rates.rate("c", t2, 2_000_000_001), Some(500_000_000));
    let t3 = t1 + Duration::from_secs(1);
    assert_eq!(rates.rate("c", t3, 4_000_000_000), Some(2_000_000_000));
    // a new cgroup of the same name: its counter restarts
    let t4 = t3 + Duration::from_secs(1);
    assert_eq!(rates.rate("c", t4, 5), None);
    rates.retain(|k| k != "c");
    assert_eq!(rates.rate("c", t4 + Duration::from_secs(5), 10), None);
}

#[test]
fn a_summary_is_serialized_with_upstreams_field_names() {
    let summary = Summary {
        node: NodeStats {
            node_name: "n".into(),
            system_containers: vec![],
            start_time: time(),
            cpu: Some(CpuStats {
                time: time(),
                usage_nano_cores: Some(5),
                usage_core_nano_seconds: Some(6),
            }),
            memory: None,
            network: Some(NetworkStats {
                time: time(),
                default: InterfaceStats {
                    name: "eth0".into(),
                    rx_bytes: Some(1),
                    ..Default::default()
                },
                interfaces: vec![],
            }),
            fs: None,
            runtime: None,
            rlimit: Some(RlimitStats {
                time: time(),
                maxpid: Some(100),
                curproc: Some(7),
            }),
        },
        pods: vec![PodStats {
            pod_ref: PodReference {
                name: "p".into(),
                namespace: "ns".into(),
                uid: "u".into(),
            },
            start_time: time(),
            containers: vec![],
            cpu: None,
            memory: Some(MemoryStats {
                time: time(),
                available_bytes: None,
                usage_bytes: Some(3),
                working_set_bytes: Some(2),
                rss_bytes: Some(1),
                page_faults: None,
                major_page_faults: None,
            }),
            network: None,
            volume_stats: vec![VolumeStats {
                fs: FsStats::used(time(), 9),
                name: "data".into(),
                pvc_ref: Some(PvcReference {
                    name: "claim".into(),
                    namespace: "ns".into(),
                }),
            }],
            ephemeral_storage: Some(FsStats::used(time(), 4)),
            process_stats: Some(ProcessStats {
                process_count: Some(2),
            }),
        }],
    };
    let t = "2026-12-04T10:00:00Z";
    assert_eq!(
        serde_json::to_value(&summary).unwrap(),
        json!({
            "node": {
                "nodeName": "n", "startTime": t,
                "cpu": {"time": t, "usageNanoCores": 5, "usageCoreNanoSeconds": 6},
                "network": {"time": t, "name": "eth0", "rxBytes": 1},
                "rlimit": {"time": t, "maxpid": 100, "curproc": 7},
            },
            "pods": [{
                "podRef": {"name": "p", "namespace": "ns", "uid": "u"},
                "startTime": t,
                "containers": [],
                "memory": {"time": t, "usageBytes": 3, "workingSetBytes": 2, "rssBytes": 1},
                "volume": [{"time": t, "usedBytes": 9, "name": "data",
                            "pvcRef": {"name": "claim", "namespace": "ns"}}],
                "ephemeral-storage": {"time": t, "usedBytes": 4},
                "process_stats": {"process_count": 2},
            }],
        })
    );
    // and read back, as clients (metrics-server, the scraper) read it
    let back: Summary = serde_json::from_value(serde_json::to_value(&summary).unwrap()).unwrap();
    assert_eq!(back, summary);
}
