//! `/metrics/resource` (upstream's resource metrics collector): the node's, pods' and
//! containers' cumulative CPU time and memory working set, and the containers' start times,
//! from a CPU-and-memory [`Summary`], each sample with the time it was read (in ms), from
//! which metrics-server computes CPU rates. Written by hand: `prometheus_client`'s encoder
//! has no per-sample timestamps.

use std::fmt::Write;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::{ContainerStats, CpuStats, MemoryStats, PodStats, Summary};

/// The text exposition (format 0.0.4) of `summary`; None: it could not be made (no samples,
/// `resource_scrape_error 1`).
pub fn render(summary: Option<&Summary>) -> String {
    let mut out = Exposition::stable();
    let pods = summary.map_or(&[][..], |s| &s.pods);
    let node = summary.map(|s| &s.node);
    out.family(
        "container_cpu_usage_seconds_total",
        "Cumulative cpu time consumed by the container in core-seconds",
        "counter",
        for_containers(pods, |c| c.cpu.as_ref().and_then(cpu_seconds)),
    );
    out.family(
        "container_memory_working_set_bytes",
        "Current working set of the container in bytes",
        "gauge",
        for_containers(pods, |c| c.memory.as_ref().and_then(working_set)),
    );
    out.family(
        "container_start_time_seconds",
        "Start time of the container since unix epoch in seconds",
        "gauge",
        for_containers(pods, |c| {
            let t = &c.start_time;
            Some((t.0.as_second() as f64, t))
        }),
    );
    out.family(
        "node_cpu_usage_seconds_total",
        "Cumulative cpu time consumed by the node in core-seconds",
        "counter",
        node.and_then(|n| n.cpu.as_ref())
            .and_then(cpu_seconds)
            .map(|(v, t)| (String::new(), v, t.clone())),
    );
    out.family(
        "node_memory_working_set_bytes",
        "Current working set of the node in bytes",
        "gauge",
        node.and_then(|n| n.memory.as_ref())
            .and_then(working_set)
            .map(|(v, t)| (String::new(), v, t.clone())),
    );
    out.family(
        "pod_cpu_usage_seconds_total",
        "Cumulative cpu time consumed by the pod in core-seconds",
        "counter",
        for_pods(pods, |p| p.cpu.as_ref().and_then(cpu_seconds)),
    );
    out.family(
        "pod_memory_working_set_bytes",
        "Current working set of the pod in bytes",
        "gauge",
        for_pods(pods, |p| p.memory.as_ref().and_then(working_set)),
    );
    out.header(
        "resource_scrape_error",
        "1 if there was an error while getting container metrics, 0 otherwise",
        "gauge",
    );
    let _ = writeln!(
        out.text,
        "resource_scrape_error {}",
        u8::from(summary.is_none())
    );
    out.text
}

/// A metric's samples: its labels (`{…}` or empty), value and time.
type Samples = Vec<(String, f64, Time)>;

fn cpu_seconds(cpu: &CpuStats) -> Option<(f64, &Time)> {
    Some((cpu.usage_core_nano_seconds? as f64 / 1e9, &cpu.time))
}

fn working_set(memory: &MemoryStats) -> Option<(f64, &Time)> {
    Some((memory.working_set_bytes? as f64, &memory.time))
}

fn for_containers(
    pods: &[PodStats],
    value: impl Fn(&ContainerStats) -> Option<(f64, &Time)>,
) -> Samples {
    let mut out = Vec::new();
    for pod in pods {
        for c in &pod.containers {
            if let Some((v, t)) = value(c) {
                let labels = format!(
                    "{{container=\"{}\",namespace=\"{}\",pod=\"{}\"}}",
                    escape(&c.name),
                    escape(&pod.pod_ref.namespace),
                    escape(&pod.pod_ref.name)
                );
                out.push((labels, v, t.clone()));
            }
        }
    }
    out
}

fn for_pods(pods: &[PodStats], value: impl Fn(&PodStats) -> Option<(f64, &Time)>) -> Samples {
    pods.iter()
        .filter_map(|pod| {
            let (v, t) = value(pod)?;
            let labels = format!(
                "{{namespace=\"{}\",pod=\"{}\"}}",
                escape(&pod.pod_ref.namespace),
                escape(&pod.pod_ref.name)
            );
            Some((labels, v, t.clone()))
        })
        .collect()
}

/// A label value as the text format wants it.
pub(super) fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// Text exposition with per-sample timestamps (shared with [`super::cadvisor`]).
#[derive(Default)]
pub(super) struct Exposition {
    pub(super) text: String,
    /// Whether help texts carry upstream's `[STABLE]` marker.
    stable: bool,
}

impl Exposition {
    fn stable() -> Exposition {
        Exposition {
            text: String::new(),
            stable: true,
        }
    }

    pub(super) fn header(&mut self, name: &str, help: &str, kind: &str) {
        let marker = if self.stable { "[STABLE] " } else { "" };
        let _ = writeln!(self.text, "# HELP {name} {marker}{help}");
        let _ = writeln!(self.text, "# TYPE {name} {kind}");
    }

    pub(super) fn family(
        &mut self,
        name: &str,
        help: &str,
        kind: &str,
        samples: impl IntoIterator<Item = (String, f64, Time)>,
    ) {
        self.header(name, help, kind);
        for (labels, value, time) in samples {
            let ms = time.0.as_millisecond();
            let _ = writeln!(self.text, "{name}{labels} {value} {ms}");
        }
    }
}

#[cfg(test)]
#[path = "resource_tests.rs"]
mod tests;
