//! `workqueue`: the keys a controller has to reconcile, as client-go's rate-limited work queue.
//!
//! - A key queued while it waits is queued once; a key queued while a worker holds it is handed
//!   out again only after that worker is [`done`](WorkQueue::done) with it, so no key is ever
//!   processed by two workers at once, and no change is lost.
//! - [`add_after`](WorkQueue::add_after) queues a key later (the earliest request wins);
//!   [`add_rate_limited`](WorkQueue::add_rate_limited) queues it after the larger of its own
//!   exponential backoff and the queue's overall token bucket (client-go's
//!   `DefaultControllerRateLimiter`: 5 ms doubling to 1000 s per key, 10 per second with a
//!   burst of 100 overall); [`forget`](WorkQueue::forget) resets the key's backoff.
//! - [`shut_down`](WorkQueue::shut_down) refuses new keys; workers still get the keys already
//!   queued, then `None`.
//!
//! Written here rather than taken from kube-runtime's controller scheduler, which has no
//! overall rate limit, no metrics and no draining shutdown.

use std::collections::{HashMap, HashSet, VecDeque};
use std::fmt::Display;
use std::hash::Hash;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::backoff::ItemBackoff;
use crate::metrics::QueueMetrics;
use crate::ratelimit::TokenBucket;

/// client-go's default controller rate limiter's overall bucket.
pub const OVERALL_QPS: f32 = 10.0;
pub const OVERALL_BURST: u32 = 100;

/// What a queue's keys must be.
pub trait QueueKey: Clone + Eq + Hash + Display + Send + Sync + 'static {}
impl<T: Clone + Eq + Hash + Display + Send + Sync + 'static> QueueKey for T {}

/// A rate-limited, deduplicating work queue; clones share it.
pub struct WorkQueue<T> {
    inner: Arc<Inner<T>>,
}

impl<T> Clone for WorkQueue<T> {
    fn clone(&self) -> Self {
        WorkQueue {
            inner: self.inner.clone(),
        }
    }
}

struct Inner<T> {
    state: Mutex<State<T>>,
    ready: Notify,
    backoff: ItemBackoff<T>,
    bucket: TokenBucket,
    metrics: QueueMetrics,
}

struct State<T> {
    /// Keys waiting for a worker, in order.
    queue: VecDeque<T>,
    /// Keys that need processing (queued, or queued again while processing).
    dirty: HashSet<T>,
    /// Keys a worker holds.
    processing: HashSet<T>,
    /// Keys to queue later, with when; and when each was queued (for the queue-wait metric).
    waiting: HashMap<T, Instant>,
    queued_at: HashMap<T, Instant>,
    shutting_down: bool,
}

impl<T: QueueKey> WorkQueue<T> {
    /// A queue with client-go's default rate limits; `name` labels its metrics.
    pub fn new(name: &str) -> WorkQueue<T> {
        WorkQueue::with_limits(
            name,
            ItemBackoff::default(),
            TokenBucket::new(OVERALL_QPS, OVERALL_BURST),
        )
    }

    pub fn with_limits(name: &str, backoff: ItemBackoff<T>, bucket: TokenBucket) -> WorkQueue<T> {
        WorkQueue {
            inner: Arc::new(Inner {
                state: Mutex::new(State {
                    queue: VecDeque::new(),
                    dirty: HashSet::new(),
                    processing: HashSet::new(),
                    waiting: HashMap::new(),
                    queued_at: HashMap::new(),
                    shutting_down: false,
                }),
                ready: Notify::new(),
                backoff,
                bucket,
                metrics: QueueMetrics::new(name),
            }),
        }
    }

    /// Queues `key` now.
    pub fn add(&self, key: T) {
        let mut state = self.inner.state.lock();
        self.push(&mut state, key);
    }

    fn push(&self, state: &mut State<T>, key: T) {
        if state.shutting_down || !state.dirty.insert(key.clone()) {
            return;
        }
        self.inner.metrics.adds.inc();
        if state.processing.contains(&key) {
            return; // handed out again once its worker is done
        }
        state.queued_at.insert(key.clone(), Instant::now());
        state.queue.push_back(key);
        self.inner.metrics.depth.set(state.queue.len() as i64);
        self.inner.ready.notify_one();
    }

    /// Queues `key` once `delay` has passed (at once if it is zero); an earlier request for
    /// the same key wins.
    pub fn add_after(&self, key: T, delay: Duration) {
        if delay.is_zero() {
            return self.add(key);
        }
        let at = Instant::now() + delay;
        let mut state = self.inner.state.lock();
        if state.shutting_down {
            return;
        }
        let earliest = state.waiting.entry(key).or_insert(at);
        if at < *earliest {
            *earliest = at;
        }
        // a sleeping worker may have to wake earlier than it planned
        self.inner.ready.notify_waiters();
    }

    /// Queues `key` after its backoff and the overall bucket allow it (after a failure).
    pub fn add_rate_limited(&self, key: T) {
        let per_key = self.inner.backoff.failed(key.clone());
        let overall = self.inner.bucket.reserve();
        self.inner.metrics.retries.inc();
        self.add_after(key, per_key.max(overall));
    }

    /// Forgets `key`'s failures (after it was processed successfully).
    pub fn forget(&self, key: &T) {
        self.inner.backoff.forget(key);
    }

    /// How many times in a row `key` has been requeued after a failure.
    pub fn failures(&self, key: &T) -> u32 {
        self.inner.backoff.failures(key)
    }

    /// Keys waiting for a worker now.
    pub fn len(&self) -> usize {
        self.inner.state.lock().queue.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Refuses new keys and drops the delayed ones; the queued ones are still handed out.
    pub fn shut_down(&self) {
        let mut state = self.inner.state.lock();
        state.shutting_down = true;
        state.waiting.clear();
        self.inner.ready.notify_waiters();
    }

    /// The next key to process, waiting for one; `None` once the queue is shut down and empty.
    /// The caller must call [`WorkQueue::done`] with it when finished.
    pub async fn get(&self) -> Option<T> {
        loop {
            let notified = self.inner.ready.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let wake_at = {
                let mut state = self.inner.state.lock();
                self.promote_due(&mut state);
                if let Some(key) = state.queue.pop_front() {
                    state.dirty.remove(&key);
                    state.processing.insert(key.clone());
                    if let Some(at) = state.queued_at.remove(&key) {
                        self.inner
                            .metrics
                            .queue_duration
                            .observe(at.elapsed().as_secs_f64());
                    }
                    self.inner.metrics.depth.set(state.queue.len() as i64);
                    return Some(key);
                }
                if state.shutting_down {
                    // let the other workers see the end too
                    self.inner.ready.notify_one();
                    return None;
                }
                state.waiting.values().min().copied()
            };
            match wake_at {
                Some(at) => {
                    tokio::select! {
                        () = notified => {}
                        () = tokio::time::sleep_until(at) => {}
                    }
                }
                None => notified.await,
            }
        }
    }

    /// Moves the delayed keys that are due into the queue.
    fn promote_due(&self, state: &mut State<T>) {
        if state.waiting.is_empty() {
            return;
        }
        let now = Instant::now();
        let mut due: Vec<(Instant, T)> = state
            .waiting
            .iter()
            .filter(|(_, at)| **at <= now)
            .map(|(key, at)| (*at, key.clone()))
            .collect();
        due.sort_by_key(|(at, _)| *at);
        for (_, key) in due {
            state.waiting.remove(&key);
            self.push(state, key);
        }
    }

    /// Marks `key` processed; if it was queued meanwhile, it is queued again now.
    pub fn done(&self, key: &T) {
        let mut state = self.inner.state.lock();
        state.processing.remove(key);
        if state.dirty.contains(key) {
            state.queued_at.insert(key.clone(), Instant::now());
            state.queue.push_back(key.clone());
            self.inner.metrics.depth.set(state.queue.len() as i64);
            self.inner.ready.notify_one();
        }
    }

    pub(crate) fn metrics(&self) -> &QueueMetrics {
        &self.inner.metrics
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn queue() -> WorkQueue<&'static str> {
        WorkQueue::new("test")
    }

    #[tokio::test(start_paused = true)]
    async fn a_key_queued_twice_is_handed_out_once() {
        let q = queue();
        q.add("a");
        q.add("b");
        q.add("a");
        assert_eq!(q.len(), 2);
        assert_eq!(q.get().await, Some("a"));
        assert_eq!(q.get().await, Some("b"));
        assert!(q.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn a_key_queued_while_held_waits_for_done_and_then_comes_once() {
        let q = queue();
        q.add("a");
        let held = q.get().await.unwrap();
        q.add("a");
        q.add("a");
        assert!(q.is_empty(), "not handed to a second worker while held");
        let second = tokio::spawn({
            let q = q.clone();
            async move { q.get().await }
        });
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(!second.is_finished());
        q.done(&held);
        assert_eq!(second.await.unwrap(), Some("a"));
        q.done(&"a");
        assert!(q.is_empty(), "the two adds while held made one more run");
    }

    #[tokio::test(start_paused = true)]
    async fn add_after_keeps_the_earliest_time() {
        let q = queue();
        let start = Instant::now();
        q.add_after("a", Duration::from_secs(10));
        q.add_after("a", Duration::from_secs(3));
        q.add_after("a", Duration::from_secs(5));
        assert_eq!(q.get().await, Some("a"));
        assert_eq!(start.elapsed(), Duration::from_secs(3));
        q.done(&"a");
        let next = tokio::time::timeout(Duration::from_secs(60), q.get()).await;
        assert!(
            next.is_err(),
            "the later requests were merged into the first"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn failures_back_off_per_key_and_forget_resets() {
        let q = queue();
        let mut waits = Vec::new();
        for _ in 0..4 {
            let start = Instant::now();
            q.add_rate_limited("a");
            let key = q.get().await.unwrap();
            waits.push(start.elapsed().as_millis());
            q.done(&key);
        }
        assert_eq!(waits, [5, 10, 20, 40]);
        assert_eq!(q.failures(&"a"), 4);
        q.forget(&"a");
        let start = Instant::now();
        q.add_rate_limited("a");
        q.get().await.unwrap();
        assert_eq!(start.elapsed().as_millis(), 5);
    }

    #[tokio::test(start_paused = true)]
    async fn the_overall_bucket_spaces_out_a_storm_of_failures() {
        let q = WorkQueue::with_limits(
            "storm",
            ItemBackoff::new(Duration::from_millis(1), Duration::from_secs(1)),
            TokenBucket::new(10.0, 2),
        );
        let start = Instant::now();
        for key in ["a", "b", "c", "d"] {
            q.add_rate_limited(key);
        }
        let mut at = Vec::new();
        for _ in 0..4 {
            let key = q.get().await.unwrap();
            at.push((start.elapsed().as_millis(), key));
            q.done(&key);
        }
        at.sort();
        // two from the burst after their own 1 ms, then one per 100 ms
        assert_eq!(at, [(1, "a"), (1, "b"), (100, "c"), (200, "d")]);
    }

    /// A worker: takes keys until the queue ends; returns them.
    async fn drain(q: WorkQueue<&'static str>) -> Vec<&'static str> {
        let mut got = Vec::new();
        while let Some(k) = q.get().await {
            got.push(k);
            q.done(&k);
        }
        got
    }

    #[tokio::test(start_paused = true)]
    async fn shutdown_hands_out_what_is_queued_then_ends_every_worker() {
        let q = queue();
        q.add("a");
        q.add_after("later", Duration::from_secs(1));
        let idle = tokio::spawn(drain(q.clone()));
        let other = tokio::spawn(drain(q.clone()));
        tokio::task::yield_now().await;
        q.shut_down();
        q.add("refused");
        let mut got = idle.await.unwrap();
        got.extend(other.await.unwrap());
        assert_eq!(got, ["a"]);
    }
}
