//! How fast the machine was during a run, so that runs on different days can be read side by
//! side. The same commit ran the usual-size `bench scale` in 73 s one day and in 110 and 135 s
//! the next, with every process's CPU per request up by about the same factor: the virtual
//! machine's cores were slower, not the code. A fixed piece of the API server's own kind of
//! work (a pod's JSON written and read back), timed before the run starts and sampled through
//! it ([`Meter`]), and the share of CPU time the hypervisor took (`steal` in `/proc/stat`)
//! over the run tell such runs apart.

use std::hint::black_box;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use k8s_openapi::api::core::v1::Pod;
use rustix::time::{ClockId, clock_gettime};
use serde_json::{Value, json};

use super::api::{histogram, micros, ms, round3};

/// Round trips timed by [`calibration_ms`].
const ROUNDS: usize = 20_000;
/// Round trips in each of a [`Meter`]'s samples, and how often it takes one: 1–2 ms of one
/// core a second.
const SAMPLE_ROUNDS: usize = ROUNDS / 100;
const SAMPLE_EVERY: Duration = Duration::from_secs(1);

/// Milliseconds one thread takes to write a typical pod as JSON and read it back
/// [`ROUNDS`] times.
pub fn calibration_ms() -> f64 {
    let pod = pod();
    let started = Instant::now();
    round_trips(&pod, ROUNDS);
    started.elapsed().as_secs_f64() * 1000.0
}

/// [`calibration_ms`]'s work sampled through a run. The speed of this machine's cores changes
/// from minute to minute (the same single-threaded work took 0.49–0.94 s within a minute on
/// an idle machine, session 56), so a calibration before the run does not say how fast the
/// cores were during it. Each sample is timed by its thread's CPU time, so that the wait for
/// a core on a saturated machine does not count, and scaled to [`ROUNDS`].
pub struct Meter {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<Histogram<u64>>,
}

impl Meter {
    pub fn start() -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let thread = std::thread::spawn(move || {
            let pod = pod();
            let mut samples = histogram();
            while !stopped.load(Ordering::Relaxed) {
                let started = clock_gettime(ClockId::ThreadCPUTime);
                round_trips(&pod, SAMPLE_ROUNDS);
                let took = Duration::try_from(clock_gettime(ClockId::ThreadCPUTime))
                    .unwrap_or_default()
                    .saturating_sub(Duration::try_from(started).unwrap_or_default());
                let scaled = took * (ROUNDS / SAMPLE_ROUNDS) as u32;
                let _ = samples.record(micros(scaled));
                std::thread::park_timeout(SAMPLE_EVERY);
            }
            samples
        });
        Self { stop, thread }
    }

    /// Stops sampling: `{"p10": …, "p50": …, "p90": …, "samples": n}` in [`calibration_ms`]'s
    /// unit (lower is faster).
    pub fn finish(self) -> Value {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.thread().unpark();
        let samples = self.thread.join().unwrap_or_else(|_| histogram());
        let at = |q| round3(ms(&samples, q));
        json!({"p10": at(0.1), "p50": at(0.5), "p90": at(0.9), "samples": samples.len()})
    }
}

fn pod() -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": "web-7d9c5b7f8-x2x9q", "namespace": "default",
                     "uid": "3c5f1a9e-2b7d-4c1e-9f0a-6d8e7b5c4a3f",
                     "labels": {"app": "web", "pod-template-hash": "7d9c5b7f8"},
                     "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                         "name": "web-7d9c5b7f8", "uid": "0b1c2d3e-4f50-6172-8394-a5b6c7d8e9f0",
                         "controller": true, "blockOwnerDeletion": true}]},
        "spec": {"nodeName": "node-17", "containers": [{"name": "c",
                     "image": "registry.k8s.io/pause:3.10",
                     "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}]},
        "status": {"phase": "Running", "podIP": "10.42.3.17", "conditions": [
            {"type": "Ready", "status": "True", "lastTransitionTime": "2026-12-07T02:00:00Z"}]},
    }))
    .expect("a pod")
}

fn round_trips(pod: &Pod, rounds: usize) {
    for _ in 0..rounds {
        let bytes = serde_json::to_vec(black_box(pod)).expect("a pod serializes");
        let back: Pod = serde_json::from_slice(&bytes).expect("and reads back");
        black_box(back);
    }
}

/// The machine's CPU time counters so far (`/proc/stat`'s `cpu` line, in ticks).
#[derive(Debug, Clone, Copy, Default)]
pub struct CpuTicks {
    total: u64,
    steal: u64,
}

impl CpuTicks {
    /// Now; zeros where `/proc/stat` cannot be read.
    pub fn now() -> Self {
        std::fs::read_to_string("/proc/stat")
            .map(|stat| Self::parse(&stat))
            .unwrap_or_default()
    }

    fn parse(stat: &str) -> Self {
        let fields: Vec<u64> = stat
            .lines()
            .find(|l| l.starts_with("cpu "))
            .map(|l| l.split_whitespace().skip(1).filter_map(|f| f.parse().ok()))
            .into_iter()
            .flatten()
            .collect();
        // user nice system idle iowait irq softirq steal guest guest_nice; guest time is
        // already counted in user and nice
        Self {
            total: fields.iter().take(8).sum(),
            steal: fields.get(7).copied().unwrap_or(0),
        }
    }

    /// The share of the CPU time since `earlier` that the hypervisor took, in percent.
    pub fn steal_pct_since(&self, earlier: &Self) -> f64 {
        let total = self.total.saturating_sub(earlier.total);
        let steal = self.steal.saturating_sub(earlier.steal);
        if total == 0 {
            return 0.0;
        }
        (steal as f64 * 1000.0 / total as f64).round() / 10.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_meter_samples_until_finished_in_the_calibrations_unit() {
        let meter = Meter::start();
        std::thread::sleep(Duration::from_millis(100));
        let figures = meter.finish();
        assert_eq!(figures["samples"], 1, "{figures}");
        let p50 = figures["p50"].as_f64().unwrap();
        // 200 round trips of a pod take well under a second of one core, scaled by 100
        assert!(p50 > 0.0 && p50 < 100_000.0, "{figures}");
        assert_eq!(figures["p10"], figures["p90"]);
    }

    #[test]
    fn steal_is_the_share_of_all_ticks_between_two_readings() {
        let before = CpuTicks::parse("cpu  100 0 50 800 20 0 10 20 0 0\ncpu0 1 2 3\n");
        let after = CpuTicks::parse("cpu  300 0 100 1300 20 0 10 70 0 0\ncpu0 1 2 3\n");
        // 800 ticks passed, 50 of them stolen
        assert_eq!(after.steal_pct_since(&before), 6.3);
        assert_eq!(before.steal_pct_since(&before), 0.0);
        assert_eq!(CpuTicks::parse("no cpu line").steal_pct_since(&before), 0.0);
    }
}
