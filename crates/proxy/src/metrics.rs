//! The proxy's `/metrics`, with upstream's names: how long each sync of the rules took
//! (`kubeproxy_sync_proxy_rules_duration_seconds`) and when the last one succeeded
//! (`kubeproxy_sync_proxy_rules_last_timestamp_seconds`).

use std::sync::atomic::AtomicU64;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

pub struct Metrics {
    registry: Mutex<Registry>,
    sync_duration: Histogram,
    last_sync: Gauge<f64, AtomicU64>,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::default();
        // upstream: 1 ms doubling, 15 buckets
        let sync_duration = Histogram::new(exponential_buckets(0.001, 2.0, 15));
        let last_sync = Gauge::<f64, AtomicU64>::default();
        registry.register(
            "kubeproxy_sync_proxy_rules_duration_seconds",
            "SyncProxyRules latency in seconds",
            sync_duration.clone(),
        );
        registry.register(
            "kubeproxy_sync_proxy_rules_last_timestamp_seconds",
            "The last time proxy rules were successfully synced",
            last_sync.clone(),
        );
        Metrics {
            registry: Mutex::new(registry),
            sync_duration,
            last_sync,
        }
    }
}

impl Metrics {
    /// A sync that took `took` succeeded at `at`.
    pub fn synced(&self, took: Duration, at: SystemTime) {
        self.sync_duration.observe(took.as_secs_f64());
        let since_epoch = at.duration_since(UNIX_EPOCH).unwrap_or_default();
        self.last_sync.set(since_epoch.as_secs_f64());
    }

    /// The text exposition format.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        if prometheus_client::encoding::text::encode(&mut out, &self.registry.lock()).is_err() {
            out.clear();
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sync_shows_in_the_duration_histogram_and_timestamp() {
        let metrics = Metrics::default();
        metrics.synced(
            Duration::from_millis(3),
            UNIX_EPOCH + Duration::from_secs(1_700_000_000),
        );
        let text = metrics.encode();
        assert!(text.contains("kubeproxy_sync_proxy_rules_duration_seconds_count 1"));
        assert!(text.contains("kubeproxy_sync_proxy_rules_last_timestamp_seconds 1700000000"));
    }
}
