//! `metrics`: the client layer's own Prometheus series, with upstream's names, for the
//! `/metrics` of whichever component runs controllers: per work queue (`name` label) its depth
//! (`workqueue_depth`), adds (`workqueue_adds_total`), rate-limited requeues
//! (`workqueue_retries_total`), how long keys wait (`workqueue_queue_duration_seconds`) and how
//! long reconciles take (`workqueue_work_duration_seconds`). Controllers [`register`] their own.

use std::sync::OnceLock;

use parking_lot::Mutex;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct QueueLabels {
    name: String,
}

fn duration_histogram() -> Histogram {
    // upstream: 10 ns, ×10, 10 buckets
    Histogram::new(exponential_buckets(1e-8, 10.0, 10))
}

struct Families {
    registry: Mutex<Registry>,
    depth: Family<QueueLabels, Gauge>,
    adds: Family<QueueLabels, Counter>,
    retries: Family<QueueLabels, Counter>,
    queue_duration: Family<QueueLabels, Histogram>,
    work_duration: Family<QueueLabels, Histogram>,
}

fn families() -> &'static Families {
    static FAMILIES: OnceLock<Families> = OnceLock::new();
    FAMILIES.get_or_init(|| {
        let histograms = || Family::new_with_constructor(duration_histogram as fn() -> Histogram);
        let (depth, adds, retries) = (Family::default(), Family::default(), Family::default());
        let (queue_duration, work_duration) = (histograms(), histograms());
        let mut registry = Registry::default();
        registry.register(
            "workqueue_depth",
            "Current depth of workqueue",
            depth.clone(),
        );
        registry.register(
            "workqueue_adds",
            "Total number of adds handled by workqueue",
            adds.clone(),
        );
        registry.register(
            "workqueue_retries",
            "Total number of retries handled by workqueue",
            retries.clone(),
        );
        registry.register(
            "workqueue_queue_duration_seconds",
            "How long in seconds an item stays in workqueue before being requested",
            queue_duration.clone(),
        );
        registry.register(
            "workqueue_work_duration_seconds",
            "How long in seconds processing an item from workqueue takes",
            work_duration.clone(),
        );
        Families {
            registry: Mutex::new(registry),
            depth,
            adds,
            retries,
            queue_duration,
            work_duration,
        }
    })
}

/// One queue's series.
pub(crate) struct QueueMetrics {
    pub depth: Gauge,
    pub adds: Counter,
    pub retries: Counter,
    pub queue_duration: Histogram,
    pub work_duration: Histogram,
}

impl QueueMetrics {
    pub fn new(name: &str) -> QueueMetrics {
        let f = families();
        let labels = QueueLabels { name: name.into() };
        QueueMetrics {
            depth: f.depth.get_or_create(&labels).clone(),
            adds: f.adds.get_or_create(&labels).clone(),
            retries: f.retries.get_or_create(&labels).clone(),
            queue_duration: f.queue_duration.get_or_create(&labels).clone(),
            work_duration: f.work_duration.get_or_create(&labels).clone(),
        }
    }
}

/// Adds a component's own series (a controller's, with upstream's name) to those [`encode`]
/// writes.
pub fn register(name: &str, help: &str, metric: impl prometheus_client::registry::Metric) {
    families().registry.lock().register(name, help, metric);
}

/// Every series of this layer, and those [`register`]ed, in Prometheus' text format.
pub fn encode() -> String {
    let mut out = String::new();
    if prometheus_client::encoding::text::encode_registry(&mut out, &families().registry.lock())
        .is_err()
    {
        out.clear();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_queue_s_series_carry_its_name() {
        let m = QueueMetrics::new("metrics-test");
        m.adds.inc();
        m.depth.set(3);
        m.work_duration.observe(0.5);
        let text = encode();
        assert!(
            text.contains("workqueue_adds_total{name=\"metrics-test\"} 1"),
            "{text}"
        );
        assert!(text.contains("workqueue_depth{name=\"metrics-test\"} 3"));
        assert!(text.contains("workqueue_work_duration_seconds_count{name=\"metrics-test\"} 1"));
    }
}
