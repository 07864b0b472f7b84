//! `/metrics/cadvisor`: the containers' usage under cAdvisor's metric names, as Prometheus
//! scrapes upstream's kubelet for it (`container_cpu_usage_seconds_total`,
//! `container_memory_working_set_bytes`, …), each sample with the time it was read. Made from a
//! full [`Summary`] rather than by cAdvisor: per container the CPU, memory and writable layer;
//! per pod (cAdvisor's pod cgroup, `container=""`) the CPU, memory and each interface's network
//! counters. cAdvisor's `id`, `image` and `name` labels are not known to the Summary and are
//! left out.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::resource::{Exposition, escape};
use super::{ContainerStats, PodStats, Summary};

/// A metric's samples: its labels (`{…}`), value and time.
type Samples = Vec<(String, f64, Time)>;

fn labels(pairs: &[(&str, &str)]) -> String {
    let inner: Vec<String> = pairs
        .iter()
        .map(|(k, v)| format!("{k}=\"{}\"", escape(v)))
        .collect();
    format!("{{{}}}", inner.join(","))
}

/// Per container (`container` its name) and per pod (`container=""`), what `value` reads.
fn per_cgroup(
    pods: &[PodStats],
    container: impl Fn(&ContainerStats) -> Option<(f64, Time)>,
    pod: impl Fn(&PodStats) -> Option<(f64, Time)>,
) -> Samples {
    let mut out = Vec::new();
    for p in pods {
        let (ns, name) = (p.pod_ref.namespace.as_str(), p.pod_ref.name.as_str());
        if let Some((v, t)) = pod(p) {
            out.push((
                labels(&[("container", ""), ("namespace", ns), ("pod", name)]),
                v,
                t,
            ));
        }
        for c in &p.containers {
            if let Some((v, t)) = container(c) {
                let l = labels(&[("container", &c.name), ("namespace", ns), ("pod", name)]);
                out.push((l, v, t));
            }
        }
    }
    out
}

/// Per pod and interface, what `value` reads of the interface's counters.
fn per_interface(
    pods: &[PodStats],
    value: impl Fn(&super::InterfaceStats) -> Option<u64>,
) -> Samples {
    let mut out = Vec::new();
    for p in pods {
        let Some(network) = &p.network else { continue };
        for i in &network.interfaces {
            if let Some(v) = value(i) {
                let l = labels(&[
                    ("container", ""),
                    ("interface", &i.name),
                    ("namespace", &p.pod_ref.namespace),
                    ("pod", &p.pod_ref.name),
                ]);
                out.push((l, v as f64, network.time.clone()));
            }
        }
    }
    out
}

/// The text exposition of `summary` (read with filesystems and network).
pub fn render(summary: &Summary) -> String {
    let pods = &summary.pods;
    let mut out = Exposition::default();
    let cpu = |c: &Option<super::CpuStats>| {
        let c = c.as_ref()?;
        Some((c.usage_core_nano_seconds? as f64 / 1e9, c.time.clone()))
    };
    let memory = |m: &Option<super::MemoryStats>, f: fn(&super::MemoryStats) -> Option<u64>| {
        let m = m.as_ref()?;
        Some((f(m)? as f64, m.time.clone()))
    };
    out.family(
        "container_cpu_usage_seconds_total",
        "Cumulative cpu time consumed in seconds.",
        "counter",
        per_cgroup(pods, |c| cpu(&c.cpu), |p| cpu(&p.cpu)),
    );
    type Read = fn(&super::MemoryStats) -> Option<u64>;
    let memories: [(&str, &str, Read); 3] = [
        (
            "container_memory_working_set_bytes",
            "Current working set in bytes.",
            |m| m.working_set_bytes,
        ),
        (
            "container_memory_usage_bytes",
            "Current memory usage in bytes, including all memory regardless of when it was accessed",
            |m| m.usage_bytes,
        ),
        ("container_memory_rss", "Size of RSS in bytes.", |m| {
            m.rss_bytes
        }),
    ];
    for (name, help, read) in memories {
        out.family(
            name,
            help,
            "gauge",
            per_cgroup(
                pods,
                |c| memory(&c.memory, read),
                |p| memory(&p.memory, read),
            ),
        );
    }
    out.family(
        "container_fs_usage_bytes",
        "Number of bytes that are consumed by the container on this filesystem.",
        "gauge",
        per_cgroup(
            pods,
            |c| {
                let fs = c.rootfs.as_ref()?;
                Some((fs.used_bytes? as f64, fs.time.clone()))
            },
            |_| None,
        ),
    );
    type Counter = fn(&super::InterfaceStats) -> Option<u64>;
    let networks: [(&str, &str, Counter); 4] = [
        (
            "container_network_receive_bytes_total",
            "Cumulative count of bytes received",
            |i| i.rx_bytes,
        ),
        (
            "container_network_receive_errors_total",
            "Cumulative count of errors encountered while receiving",
            |i| i.rx_errors,
        ),
        (
            "container_network_transmit_bytes_total",
            "Cumulative count of bytes transmitted",
            |i| i.tx_bytes,
        ),
        (
            "container_network_transmit_errors_total",
            "Cumulative count of errors encountered while transmitting",
            |i| i.tx_errors,
        ),
    ];
    for (name, help, read) in networks {
        out.family(name, help, "counter", per_interface(pods, read));
    }
    out.family(
        "container_start_time_seconds",
        "Start time of the container since unix epoch in seconds.",
        "gauge",
        per_cgroup(
            pods,
            |c| Some((c.start_time.0.as_second() as f64, c.start_time.clone())),
            |_| None,
        ),
    );
    out.text
}

#[cfg(test)]
mod tests {
    use super::super::{CpuStats, InterfaceStats, NetworkStats, NodeStats, PodReference};
    use super::*;

    #[test]
    fn containers_and_pods_are_named_as_cadvisor_names_them() {
        let time = Time("2026-12-04T10:00:00Z".parse().unwrap());
        let cpu = |s: u64| {
            Some(CpuStats {
                time: time.clone(),
                usage_nano_cores: None,
                usage_core_nano_seconds: Some(s * 1_000_000_000),
            })
        };
        let summary = Summary {
            node: NodeStats {
                node_name: "n".into(),
                system_containers: vec![],
                start_time: time.clone(),
                cpu: None,
                memory: None,
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
                start_time: time.clone(),
                containers: vec![ContainerStats {
                    name: "app".into(),
                    start_time: time.clone(),
                    cpu: cpu(2),
                    memory: None,
                    rootfs: Some(super::super::FsStats::used(time.clone(), 4096)),
                    logs: None,
                }],
                cpu: cpu(3),
                memory: None,
                network: Some(NetworkStats {
                    time: time.clone(),
                    default: InterfaceStats::default(),
                    interfaces: vec![InterfaceStats {
                        name: "eth0".into(),
                        rx_bytes: Some(10),
                        rx_errors: Some(0),
                        tx_bytes: Some(20),
                        tx_errors: Some(0),
                    }],
                }),
                volume_stats: vec![],
                ephemeral_storage: None,
                process_stats: None,
            }],
        };
        let text = render(&summary);
        let ms = time.0.as_millisecond();
        for line in [
            "# TYPE container_cpu_usage_seconds_total counter".to_string(),
            format!(
                "container_cpu_usage_seconds_total{{container=\"\",namespace=\"default\",pod=\"web\"}} 3 {ms}"
            ),
            format!(
                "container_cpu_usage_seconds_total{{container=\"app\",namespace=\"default\",pod=\"web\"}} 2 {ms}"
            ),
            format!(
                "container_fs_usage_bytes{{container=\"app\",namespace=\"default\",pod=\"web\"}} 4096 {ms}"
            ),
            format!(
                "container_network_transmit_bytes_total{{container=\"\",interface=\"eth0\",namespace=\"default\",pod=\"web\"}} 20 {ms}"
            ),
        ] {
            assert!(text.lines().any(|l| l == line), "{line} in\n{text}");
        }
        assert!(!text.contains("[STABLE]"));
    }
}
