//! The last two scrapes of every node and the usage they give, as metrics-server's storage:
//! CPU is the rate between the two samples of a node or container (a container started or
//! restarted since the earlier scrape counts from its start, at zero), memory the later
//! working set; the metric's time is the later sample's, its window the time between them. A
//! pod has metrics only when every container of it in the later scrape has.

use std::collections::{BTreeMap, HashMap};

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

/// One node's latest scrape, and what the scrape before it left: each container's earlier
/// sample beside its later one, so that a container's key is kept once (at a thousand nodes of
/// thirty pods, keys are most of what is stored).
struct Scrapes {
    /// Whether the node was scraped before the latest scrape: rates need two.
    twice: bool,
    /// The node's usage in the latest scrape and in the one before.
    node: Option<Usage>,
    earlier_node: Option<Usage>,
    /// The containers of the latest scrape, in (namespace, pod, container) order.
    containers: BTreeMap<ContainerKey, Samples>,
}

/// A container's sample in the latest scrape and, if it was in it, the one before.
struct Samples {
    later: ContainerSample,
    earlier: Option<ContainerSample>,
}

impl Scrapes {
    fn first(batch: Batch) -> Scrapes {
        let containers = batch.containers.into_iter();
        Scrapes {
            twice: false,
            node: batch.node,
            earlier_node: None,
            containers: containers
                .map(|(key, later)| {
                    (
                        key,
                        Samples {
                            later,
                            earlier: None,
                        },
                    )
                })
                .collect(),
        }
    }

    /// Takes `batch` as the latest scrape, the latest as the one before.
    fn advance(&mut self, batch: Batch) {
        let mut before = std::mem::take(&mut self.containers);
        self.containers = batch
            .containers
            .into_iter()
            .map(|(key, later)| {
                let earlier = before.remove(&key).map(|s| s.later);
                (key, Samples { later, earlier })
            })
            .collect();
        self.earlier_node = std::mem::replace(&mut self.node, batch.node);
        self.twice = true;
    }
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
            Some(scrapes) => scrapes.advance(batch),
            None => {
                nodes.insert(node.to_string(), Scrapes::first(batch));
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
        let scrapes = nodes.get(name).filter(|s| s.twice)?;
        let (earlier, later) = (scrapes.earlier_node?, scrapes.node?);
        metric(Some((earlier.cpu_seconds, earlier.cpu_time)), &later)
    }

    /// Calls `visit` with the namespace, name and containers' usage (by container name) of each
    /// pod whose containers in its node's latest scrape all have usage. A pod on two nodes'
    /// scrapes (deleted and made again elsewhere, until the next scrape) is visited for each.
    pub fn for_each_pod(&self, mut visit: impl FnMut(&str, &str, &[(&str, Metric)])) {
        let nodes = self.nodes.read();
        // one pod's containers at a time
        let mut pod: Vec<(&str, Metric)> = Vec::new();
        for scrapes in nodes.values().filter(|s| s.twice) {
            let scraped = scrapes.earlier_node.map(|n| n.cpu_time);
            let mut containers = scrapes.containers.iter().peekable();
            while let Some(&(first, _)) = containers.peek() {
                let same_pod = |(k, _): &(&ContainerKey, &Samples)| {
                    k.namespace == first.namespace && k.pod == first.pod
                };
                pod.clear();
                let mut complete = true;
                while let Some((key, samples)) = containers.next_if(same_pod) {
                    match container_metric(scraped, samples) {
                        Some(m) => pod.push((&key.container, m)),
                        None => complete = false,
                    }
                }
                if complete {
                    visit(&first.namespace, &first.pod, &pod);
                }
            }
        }
    }
}

/// A container's usage: from its earlier sample, or from its start (at zero CPU) when it
/// started after the earlier scrape (at `scraped`; new, or restarted: its counter went back).
fn container_metric(scraped: Option<Timestamp>, samples: &Samples) -> Option<Metric> {
    let later = &samples.later;
    let before = samples
        .earlier
        .filter(|e| {
            e.start_time == later.start_time && e.usage.cpu_seconds <= later.usage.cpu_seconds
        })
        .map(|e| (e.usage.cpu_seconds, e.usage.cpu_time));
    let from_start = || {
        let start = later.start_time?;
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
