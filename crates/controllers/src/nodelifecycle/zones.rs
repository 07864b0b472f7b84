//! Zones and the rate-limited NoExecute tainting (upstream's `ComputeZoneState`,
//! `handleDisruption` and `RateLimitedTimedQueue`). A node that is not Ready waits in its zone's
//! queue for the NoExecute taint that taint-eviction acts on, behind a token bucket (burst 1)
//! whose rate follows the zone's health: `--node-eviction-rate` when the zone is normal or fully
//! disrupted, `--secondary-node-eviction-rate` when it is partially disrupted and larger than
//! `--large-cluster-size-threshold` (none when smaller). While every zone is fully disrupted the
//! trouble is taken for the control plane's own: no node is tainted, and the NoExecute taints
//! already there are lifted.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::OnceLock;
use std::sync::atomic::AtomicU64;

use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use skiff_runtime::ratelimit::TokenBucket;

use crate::config::Config;

/// The label that keeps a node out of its zone's health (upstream's
/// `LabelNodeExcludeDisruption`); the node is still tainted when not Ready.
pub const EXCLUDE_DISRUPTION: &str = "node.kubernetes.io/exclude-disruption";

/// A zone's health, as upstream's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ZoneState {
    /// Seen for the first time this pass.
    Initial,
    Normal,
    /// At least 3 nodes and `--unhealthy-zone-threshold` of them not Ready.
    PartialDisruption,
    /// No node Ready.
    FullDisruption,
}

/// The zone a node counts in (upstream's `GetZoneKey`): region and zone, the deprecated
/// `failure-domain.beta` labels first; `""` for a node with neither.
pub fn zone_key(node: &Node) -> String {
    let labels = node.labels();
    let label = |beta: &str, ga: &str| {
        labels
            .get(beta)
            .or_else(|| labels.get(ga))
            .map_or("", String::as_str)
    };
    let zone = label(
        "failure-domain.beta.kubernetes.io/zone",
        "topology.kubernetes.io/zone",
    );
    let region = label(
        "failure-domain.beta.kubernetes.io/region",
        "topology.kubernetes.io/region",
    );
    if region.is_empty() && zone.is_empty() {
        String::new()
    } else {
        format!("{region}:\0:{zone}")
    }
}

/// Whether the node stays out of its zone's health.
pub fn excluded(node: &Node) -> bool {
    node.labels().contains_key(EXCLUDE_DISRUPTION)
}

/// The number of nodes not Ready and the zone's state, from each node's readiness.
pub fn zone_state(ready: &[bool], threshold: f32) -> (usize, ZoneState) {
    let not_ready = ready.iter().filter(|r| !**r).count();
    let state = if not_ready == ready.len() && not_ready > 0 {
        ZoneState::FullDisruption
    } else if not_ready > 2 && not_ready as f32 / ready.len() as f32 >= threshold {
        ZoneState::PartialDisruption
    } else {
        ZoneState::Normal
    };
    (not_ready, state)
}

/// The tainting rate of a zone of `size` nodes in `state`.
fn rate(state: ZoneState, size: usize, config: &Config) -> f32 {
    match state {
        ZoneState::PartialDisruption if size > config.large_cluster_size_threshold => {
            config.secondary_node_eviction_rate
        }
        ZoneState::PartialDisruption => 0.0,
        _ => config.node_eviction_rate,
    }
}

/// One zone: its state and its tainting queue.
#[derive(Debug)]
struct Zone {
    state: ZoneState,
    qps: f32,
    /// `None` when the rate is 0: nothing is let through.
    limiter: Option<TokenBucket>,
    queue: VecDeque<String>,
    /// Every node queued since it was last Ready, taken or not, so that a tainted node is not
    /// queued again (upstream's `UniqueQueue` set).
    queued: HashSet<String>,
}

impl Zone {
    fn new(qps: f32) -> Zone {
        Zone {
            state: ZoneState::Initial,
            qps,
            limiter: limiter(qps),
            queue: VecDeque::new(),
            queued: HashSet::new(),
        }
    }

    /// A new rate. A new bucket starts full, unless the old one was empty (upstream's
    /// `SwapLimiter` with burst 1).
    fn set_rate(&mut self, qps: f32) {
        if self.qps == qps {
            return;
        }
        let was_waiting = !self.try_accept();
        self.qps = qps;
        self.limiter = limiter(qps);
        if was_waiting {
            self.try_accept();
        }
    }

    fn try_accept(&self) -> bool {
        self.limiter.as_ref().is_some_and(|l| l.try_take().is_ok())
    }
}

fn limiter(qps: f32) -> Option<TokenBucket> {
    (qps > 0.0).then(|| TokenBucket::new(qps, 1))
}

/// What a disruption pass asks of the caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transition {
    Unchanged,
    /// Every zone is now fully disrupted: lift every node's NoExecute taints.
    EnteredFullDisruption,
    /// Some node is Ready again after a full disruption: every node's grace starts over.
    LeftFullDisruption,
}

/// Every zone's state and queue.
#[derive(Debug, Default)]
pub struct Zones {
    zones: HashMap<String, Zone>,
}

impl Zones {
    fn zone(&mut self, key: &str, config: &Config) -> &mut Zone {
        self.zones
            .entry(key.to_string())
            .or_insert_with(|| Zone::new(config.node_eviction_rate))
    }

    /// Queues a node that is not Ready for its NoExecute taint, unless it was queued since it
    /// was last Ready.
    pub fn enqueue(&mut self, zone: &str, node: &str, config: &Config) {
        let z = self.zone(zone, config);
        if z.queued.insert(node.to_string()) {
            z.queue.push_back(node.to_string());
        }
    }

    /// Drops a node that is Ready or gone from every queue.
    pub fn forget(&mut self, node: &str) {
        for z in self.zones.values_mut() {
            if z.queued.remove(node) {
                z.queue.retain(|n| n != node);
            }
        }
    }

    /// Every node queued since it was last Ready.
    pub fn nodes(&self) -> impl Iterator<Item = &String> {
        self.zones.values().flat_map(|z| z.queued.iter())
    }

    /// Puts a node whose taint could not be written back at the head of its zone's queue.
    pub fn retry(&mut self, zone: &str, node: String) {
        if let Some(z) = self.zones.get_mut(zone) {
            z.queue.push_front(node);
        }
    }

    /// The nodes whose turn has come, with their zones; each takes a token of its zone.
    pub fn take_due(&mut self) -> Vec<(String, String)> {
        let mut due = Vec::new();
        for (key, z) in &mut self.zones {
            while !z.queue.is_empty() && z.try_accept() {
                if let Some(node) = z.queue.pop_front() {
                    due.push((key.clone(), node));
                }
            }
        }
        due
    }

    /// Whether any node waits for its taint.
    pub fn waiting(&self) -> bool {
        self.zones.values().any(|z| !z.queue.is_empty())
    }

    /// One disruption pass (upstream's `handleDisruption`) over each zone's nodes' readiness
    /// (nodes excluded from disruption left out): each zone's state and rate.
    pub fn handle_disruption(
        &mut self,
        ready: &HashMap<String, Vec<bool>>,
        config: &Config,
    ) -> Transition {
        let metrics = metrics();
        let mut states = HashMap::new();
        for (key, nodes) in ready {
            let (unhealthy, state) = zone_state(nodes, config.unhealthy_zone_threshold);
            let labels = ZoneLabels { zone: key.clone() };
            metrics
                .zone_size
                .get_or_create(&labels)
                .set(nodes.len() as i64);
            metrics
                .unhealthy
                .get_or_create(&labels)
                .set(unhealthy as i64);
            let healthy = 100.0 * (nodes.len() - unhealthy) as f64 / nodes.len().max(1) as f64;
            metrics.zone_health.get_or_create(&labels).set(healthy);
            states.insert(key.as_str(), state);
        }
        let full = |s: ZoneState| s == ZoneState::FullDisruption;
        let all_are_full = states.values().all(|s| full(*s));
        let all_were_full = states
            .keys()
            .all(|k| self.zones.get(*k).is_some_and(|z| full(z.state)));
        for (key, z) in &mut self.zones {
            if !ready.contains_key(key) {
                z.state = ZoneState::Initial;
            }
        }
        if all_are_full && all_were_full {
            return Transition::Unchanged;
        }
        if all_are_full {
            for key in states.keys() {
                let z = self.zone(key, config);
                z.set_rate(0.0);
                z.state = ZoneState::FullDisruption;
            }
            for z in self.zones.values_mut() {
                z.queue.clear();
                z.queued.clear();
            }
            return Transition::EnteredFullDisruption;
        }
        for (key, state) in states {
            let size = ready[key].len();
            let z = self.zone(key, config);
            if all_were_full || z.state != state {
                z.set_rate(rate(state, size, config));
                z.state = state;
            }
        }
        if all_were_full {
            Transition::LeftFullDisruption
        } else {
            Transition::Unchanged
        }
    }

    /// The zone's state, `Initial` for one not seen in the last pass.
    pub fn state(&self, zone: &str) -> ZoneState {
        self.zones.get(zone).map_or(ZoneState::Initial, |z| z.state)
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ZoneLabels {
    zone: String,
}

/// Upstream's `node_collector_*` series, served on the controller manager's `/metrics`.
struct Metrics {
    zone_size: Family<ZoneLabels, Gauge>,
    zone_health: Family<ZoneLabels, Gauge<f64, AtomicU64>>,
    unhealthy: Family<ZoneLabels, Gauge>,
    evictions: Family<ZoneLabels, Counter>,
}

fn metrics() -> &'static Metrics {
    static METRICS: OnceLock<Metrics> = OnceLock::new();
    METRICS.get_or_init(|| {
        let m = Metrics {
            zone_size: Family::default(),
            zone_health: Family::default(),
            unhealthy: Family::default(),
            evictions: Family::default(),
        };
        skiff_runtime::metrics::register(
            "node_collector_zone_size",
            "Gauge measuring number of registered Nodes per zones.",
            m.zone_size.clone(),
        );
        skiff_runtime::metrics::register(
            "node_collector_zone_health",
            "Gauge measuring percentage of healthy nodes per zone.",
            m.zone_health.clone(),
        );
        skiff_runtime::metrics::register(
            "node_collector_unhealthy_nodes_in_zone",
            "Gauge measuring number of not Ready Nodes per zones.",
            m.unhealthy.clone(),
        );
        skiff_runtime::metrics::register(
            "node_collector_evictions",
            "Number of Node evictions that happened since current instance of NodeController started.",
            m.evictions.clone(),
        );
        m
    })
}

/// Counts a NoExecute taint written in `zone`.
pub fn count_eviction(zone: &str) {
    metrics()
        .evictions
        .get_or_create(&ZoneLabels { zone: zone.into() })
        .inc();
}

#[cfg(test)]
#[path = "zones_tests.rs"]
mod tests;
