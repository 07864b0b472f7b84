use std::collections::{BTreeMap, HashMap};

use super::*;

fn t(s: i64) -> Timestamp {
    Timestamp::from_second(s).unwrap()
}

fn usage(cpu_seconds: f64, at: i64, memory: u64) -> Usage {
    Usage {
        cpu_seconds,
        cpu_time: t(at),
        memory,
        memory_time: t(at),
    }
}

fn key(pod: &str, container: &str) -> ContainerKey {
    ContainerKey {
        namespace: "default".into(),
        pod: pod.into(),
        container: container.into(),
    }
}

fn batch(node: Usage, containers: &[(ContainerKey, Usage, i64)]) -> Batch {
    Batch {
        node: Some(node),
        containers: containers
            .iter()
            .map(|(k, u, start)| {
                (
                    k.clone(),
                    ContainerSample {
                        usage: *u,
                        start_time: Some(t(*start)),
                    },
                )
            })
            .collect::<BTreeMap<_, _>>(),
    }
}

/// Every pod `for_each_pod` visits, by namespace and name.
fn pods(storage: &Storage) -> HashMap<(String, String), Vec<(String, Metric)>> {
    let mut pods = HashMap::new();
    storage.for_each_pod(|ns, pod, containers| {
        let containers = containers.iter().map(|(c, m)| (c.to_string(), *m));
        let visited = pods.insert((ns.to_string(), pod.to_string()), containers.collect());
        assert_eq!(visited, None, "{ns}/{pod} visited twice");
    });
    pods
}

#[test]
fn usage_is_the_cpu_rate_between_the_last_two_scrapes_and_the_last_memory() {
    let storage = Storage::default();
    storage.store(
        "n1",
        batch(
            usage(100.0, 1000, 10),
            &[(key("p", "c"), usage(5.0, 1000, 7), 900)],
        ),
    );
    // one scrape: no rate yet
    assert_eq!(storage.node("n1"), None);
    assert!(pods(&storage).is_empty());
    storage.store(
        "n1",
        batch(
            usage(115.0, 1015, 20),
            &[(key("p", "c"), usage(12.5, 1015, 8), 900)],
        ),
    );
    assert_eq!(
        storage.node("n1"),
        Some(Metric {
            timestamp: t(1015),
            window: SignedDuration::from_secs(15),
            cpu_nanocores: 1_000_000_000,
            memory: 20,
        })
    );
    let p = ("default".to_string(), "p".to_string());
    assert_eq!(
        pods(&storage)[&p],
        vec![(
            "c".to_string(),
            Metric {
                timestamp: t(1015),
                window: SignedDuration::from_secs(15),
                cpu_nanocores: 500_000_000,
                memory: 8,
            }
        )]
    );
    // a third scrape: the rate is between the second and the third
    storage.store(
        "n1",
        batch(
            usage(145.0, 1025, 30),
            &[(key("p", "c"), usage(22.5, 1025, 9), 900)],
        ),
    );
    assert_eq!(storage.node("n1").unwrap().cpu_nanocores, 3_000_000_000);
    assert_eq!(pods(&storage)[&p][0].1.cpu_nanocores, 1_000_000_000);
    storage.retain(|n| n != "n1");
    assert_eq!(storage.node("n1"), None);
}

#[test]
fn a_container_started_since_the_last_scrape_counts_from_its_start() {
    let storage = Storage::default();
    storage.store(
        "n1",
        batch(
            usage(100.0, 1000, 10),
            &[(key("p", "c"), usage(50.0, 1000, 7), 900)],
        ),
    );
    storage.store(
        "n1",
        batch(
            usage(110.0, 1010, 10),
            &[
                // restarted at 1005: its counter went back, 2 s of CPU in 5 s
                (key("p", "c"), usage(2.0, 1010, 7), 1005),
                // new at 1006: 1 s in 4 s
                (key("q", "c"), usage(1.0, 1010, 7), 1006),
                // started before the earlier scrape yet absent from it: no metric, nor for its pod
                (key("r", "c"), usage(1.0, 1010, 7), 990),
                (key("r", "d"), usage(1.0, 1010, 7), 1006),
            ],
        ),
    );
    let pods = pods(&storage);
    let cpu = |pod: &str| {
        pods[&("default".to_string(), pod.to_string())][0]
            .1
            .cpu_nanocores
    };
    assert_eq!(cpu("p"), 400_000_000);
    assert_eq!(cpu("q"), 250_000_000);
    assert_eq!(pods.get(&("default".to_string(), "r".to_string())), None);
}
