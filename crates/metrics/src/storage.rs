//! The last two scrapes of every node and the usage they give, as metrics-server's storage:
//! CPU is the rate between the two samples of a node or container (a container started or
//! restarted since the earlier scrape counts from its start, at zero), memory the later
//! working set; the metric's time is the later sample's, its window the time between them. A
//! pod has metrics only when every container of it in the later scrape has.

use std::collections::HashMap;

use jiff::{SignedDuration, Timestamp};
use parking_lot::RwLock;

use crate::scrape::{Batch, ContainerKey, ContainerSample, Usage};

/// One node's, pod's or container's usage.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Metric {
    /// When the later sample was read.
    pub timestamp: Timestamp,
    /// The time between the samples the rate is taken over.
    pub window: SignedDuration,
    /// CPU in billionths of a core.
    pub cpu_nanocores: u64,
    /// Memory working set in bytes.
    pub memory: u64,
}

/// A pod's containers' usage, by container name.
pub type PodMetric = Vec<(String, Metric)>;

struct Scrapes {
    earlier: Option<Batch>,
    later: Batch,
}

/// Every node's last two scrapes.
#[derive(Default)]
pub struct Storage {
    nodes: RwLock<HashMap<String, Scrapes>>,
}

impl Storage {
    /// Keeps `batch` as `node`'s latest scrape, its previous one as the earlier.
    pub fn store(&self, node: &str, batch: Batch) {
        let mut nodes = self.nodes.write();
        match nodes.get_mut(node) {
            Some(scrapes) => scrapes.earlier = Some(std::mem::replace(&mut scrapes.later, batch)),
            None => {
                let first = Scrapes {
                    earlier: None,
                    later: batch,
                };
                nodes.insert(node.to_string(), first);
            }
        }
    }

    /// Forgets the nodes `keep` does not accept (deleted ones).
    pub fn retain(&self, keep: impl Fn(&str) -> bool) {
        self.nodes.write().retain(|name, _| keep(name));
    }

    /// The node's usage, once it has been scraped twice.
    pub fn node(&self, name: &str) -> Option<Metric> {
        let nodes = self.nodes.read();
        let scrapes = nodes.get(name)?;
        let later = scrapes.later.node?;
        let earlier = scrapes.earlier.as_ref()?.node?;
        metric(Some((earlier.cpu_seconds, earlier.cpu_time)), &later)
    }

    /// Every pod whose containers all have usage, by (namespace, name).
    pub fn pods(&self) -> HashMap<(String, String), PodMetric> {
        let nodes = self.nodes.read();
        let mut out: HashMap<(String, String), PodMetric> = HashMap::new();
        let mut incomplete = Vec::new();
        for scrapes in nodes.values() {
            let Some(earlier) = &scrapes.earlier else {
                continue;
            };
            for (key, sample) in &scrapes.later.containers {
                let pod = (key.namespace.clone(), key.pod.clone());
                match container_metric(earlier, key, sample) {
                    Some(m) => out.entry(pod).or_default().push((key.container.clone(), m)),
                    None => incomplete.push(pod),
                }
            }
        }
        for pod in incomplete {
            out.remove(&pod);
        }
        out
    }
}

/// A container's usage: from its earlier sample, or from its start (at zero CPU) when it
/// started after the earlier scrape (new, or restarted: its counter went back).
fn container_metric(
    earlier: &Batch,
    key: &ContainerKey,
    later: &ContainerSample,
) -> Option<Metric> {
    let before = earlier
        .containers
        .get(key)
        .filter(|e| {
            e.start_time == later.start_time && e.usage.cpu_seconds <= later.usage.cpu_seconds
        })
        .map(|e| (e.usage.cpu_seconds, e.usage.cpu_time));
    let from_start = || {
        let start = later.start_time?;
        let scraped = earlier.node.map(|n| n.cpu_time);
        scraped.is_none_or(|t| start > t).then_some((0.0, start))
    };
    metric(before.or_else(from_start), &later.usage)
}

/// The rate from `earlier` (CPU seconds, when) to `later`, with its memory.
fn metric(earlier: Option<(f64, Timestamp)>, later: &Usage) -> Option<Metric> {
    let (cpu_before, time_before) = earlier?;
    let window = later.cpu_time.duration_since(time_before);
    if window <= SignedDuration::ZERO || later.cpu_seconds < cpu_before {
        return None;
    }
    let cores = (later.cpu_seconds - cpu_before) / window.as_secs_f64();
    Some(Metric {
        timestamp: later.cpu_time,
        window,
        cpu_nanocores: (cores * 1e9).round() as u64,
        memory: later.memory,
    })
}

#[cfg(test)]
#[path = "storage_tests.rs"]
mod tests;
