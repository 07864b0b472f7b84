//! The scheduler's `/metrics`, with upstream's names: attempts by result and profile
//! (`scheduler_schedule_attempts_total`), how long each attempt's algorithm took
//! (`scheduler_scheduling_attempt_duration_seconds`), first queueing to binding
//! (`scheduler_pod_scheduling_sli_duration_seconds`), and pods waiting per queue
//! (`scheduler_pending_pods`, gated pods included, read off the queue at scrape time), and
//! preemption (`scheduler_preemption_attempts_total`, `scheduler_preemption_victims`).

use parking_lot::Mutex;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::queue::QueueSizes;

/// What became of one scheduling attempt (upstream's `result` label values).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Scheduled,
    Unschedulable,
    Error,
}

impl Outcome {
    fn label(self) -> &'static str {
        match self {
            Outcome::Scheduled => "scheduled",
            Outcome::Unschedulable => "unschedulable",
            Outcome::Error => "error",
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct AttemptLabels {
    result: String,
    profile: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct QueueLabels {
    queue: String,
}

fn attempt_histogram() -> Histogram {
    // upstream: 1 ms doubling, 15 buckets
    Histogram::new(exponential_buckets(0.001, 2.0, 15))
}

pub struct Metrics {
    registry: Mutex<Registry>,
    attempts: Family<AttemptLabels, Counter>,
    attempt_duration: Family<AttemptLabels, Histogram>,
    sli: Histogram,
    pending: Family<QueueLabels, Gauge>,
    preemption_attempts: Counter,
    preemption_victims: Histogram,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::default();
        let attempts = Family::<AttemptLabels, Counter>::default();
        let attempt_duration = Family::<AttemptLabels, Histogram>::new_with_constructor(
            attempt_histogram as fn() -> Histogram,
        );
        // upstream: 10 ms doubling, 20 buckets
        let sli = Histogram::new(exponential_buckets(0.01, 2.0, 20));
        let pending = Family::<QueueLabels, Gauge>::default();
        registry.register(
            "scheduler_schedule_attempts",
            "Number of attempts to schedule pods, by the result and the profile",
            attempts.clone(),
        );
        registry.register(
            "scheduler_scheduling_attempt_duration_seconds",
            "Scheduling attempt latency in seconds (scheduling algorithm + binding)",
            attempt_duration.clone(),
        );
        registry.register(
            "scheduler_pod_scheduling_sli_duration_seconds",
            "E2e latency for a pod being scheduled, from the time the pod enters the scheduling queue",
            sli.clone(),
        );
        registry.register(
            "scheduler_pending_pods",
            "Number of pending pods, by the queue type",
            pending.clone(),
        );
        let preemption_attempts = Counter::default();
        registry.register(
            "scheduler_preemption_attempts",
            "Total preemption attempts in the cluster till now",
            preemption_attempts.clone(),
        );
        // upstream: 1 doubling, 7 buckets
        let preemption_victims = Histogram::new(exponential_buckets(1.0, 2.0, 7));
        registry.register(
            "scheduler_preemption_victims",
            "Number of selected preemption victims",
            preemption_victims.clone(),
        );
        Metrics {
            registry: Mutex::new(registry),
            attempts,
            attempt_duration,
            sli,
            pending,
            preemption_attempts,
            preemption_victims,
        }
    }
}

impl Metrics {
    /// Counts one attempt of `profile` that took `seconds`.
    pub fn attempt(&self, outcome: Outcome, profile: &str, seconds: f64) {
        let labels = AttemptLabels {
            result: outcome.label().into(),
            profile: profile.into(),
        };
        self.attempts.get_or_create(&labels).inc();
        self.attempt_duration
            .get_or_create(&labels)
            .observe(seconds);
    }

    /// A pod bound `seconds` after it first entered the queue.
    pub fn scheduled(&self, seconds: f64) {
        self.sli.observe(seconds);
    }

    /// PostFilter ran; `victims` pods were chosen for eviction (none when it found no node).
    pub fn preemption(&self, victims: usize) {
        self.preemption_attempts.inc();
        if victims > 0 {
            self.preemption_victims.observe(victims as f64);
        }
    }

    /// Attempts with this outcome so far, over all profiles.
    pub fn count(&self, outcome: Outcome, profiles: &[&str]) -> u64 {
        profiles
            .iter()
            .map(|p| {
                self.attempts
                    .get_or_create(&AttemptLabels {
                        result: outcome.label().into(),
                        profile: (*p).into(),
                    })
                    .get()
            })
            .sum()
    }

    /// The text exposition, with the queue sizes as given.
    pub fn encode(&self, sizes: QueueSizes) -> String {
        for (queue, n) in [
            ("active", sizes.active),
            ("backoff", sizes.backoff),
            ("unschedulable", sizes.unschedulable),
            ("gated", sizes.gated),
        ] {
            self.pending
                .get_or_create(&QueueLabels {
                    queue: queue.into(),
                })
                .set(n as i64);
        }
        let mut out = String::new();
        let registry = self.registry.lock();
        if prometheus_client::encoding::text::encode(&mut out, &registry).is_err() {
            out.clear();
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attempts_and_queue_sizes_appear_under_upstreams_names() {
        let m = Metrics::default();
        m.attempt(Outcome::Scheduled, "default-scheduler", 0.002);
        m.attempt(Outcome::Unschedulable, "default-scheduler", 0.001);
        m.scheduled(0.5);
        let text = m.encode(QueueSizes {
            unschedulable: 3,
            gated: 2,
            ..Default::default()
        });
        assert!(text.contains(
            r#"scheduler_schedule_attempts_total{result="scheduled",profile="default-scheduler"} 1"#
        ), "{text}");
        assert!(
            text.contains(r#"scheduler_pending_pods{queue="unschedulable"} 3"#),
            "{text}"
        );
        assert!(
            text.contains(r#"scheduler_pending_pods{queue="gated"} 2"#),
            "{text}"
        );
        assert!(
            text.contains("scheduler_pod_scheduling_sli_duration_seconds_count 1"),
            "{text}"
        );
        assert_eq!(m.count(Outcome::Unschedulable, &["default-scheduler"]), 1);
    }
}
