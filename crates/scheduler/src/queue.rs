//! The scheduling queue (upstream's `PriorityQueue`): pods waiting for a node.
//!
//! - **activeQ**: ready to schedule, highest `spec.priority` first, then oldest (PrioritySort).
//! - **backoffQ**: failed recently; each waits 1 s doubling up to 10 s per attempt before it
//!   returns to activeQ.
//! - **unschedulable**: no node fitted; parked until a cluster event one of the plugins that
//!   rejected it registered for (a node added, a node's labels changed, a pod deleted…:
//!   [`SchedulingQueue::on_event`]) might change that, or for at most 5 minutes.
//!
//! If such an event arrives while a pod is being scheduled, a failure of that attempt sends it
//! to backoffQ rather than parking it, so it is not stranded by an event it missed (upstream's
//! in-flight events).
//!
//! One mutex guards all three; [`SchedulingQueue::pop`] waits on a `Notify`. Time comes from
//! `tokio::time::Instant`, so tests pause and advance it.

use std::cmp::{Ordering as CmpOrdering, Reverse};
use std::collections::{BinaryHeap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::framework::{ClusterEvent, PodInfo};

/// Upstream's `DefaultPodInitialBackoffDuration`.
pub const INITIAL_BACKOFF: Duration = Duration::from_secs(1);
/// Upstream's `DefaultPodMaxBackoffDuration`.
pub const MAX_BACKOFF: Duration = Duration::from_secs(10);
/// Upstream's `DefaultPodMaxInUnschedulablePodsDuration`.
pub const MAX_UNSCHEDULABLE: Duration = Duration::from_secs(5 * 60);

/// A pod in the queue with its scheduling history.
#[derive(Debug, Clone)]
pub struct QueuedPod {
    pub info: Arc<PodInfo>,
    /// Scheduling attempts so far.
    pub attempts: u32,
    /// When it (last) entered the queue, for ordering within a priority.
    pub timestamp: Instant,
    /// When it was first added, for the end-to-end latency.
    pub first_seen: Instant,
    /// When its current backoff ends.
    backoff_until: Instant,
}

/// Where a known pod is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Location {
    Active,
    Backoff,
    Unschedulable {
        since: Instant,
        /// The events that may make it schedulable (those its rejecting plugins registered).
        interest: ClusterEvent,
    },
    /// Popped and being scheduled; `updated` if a newer version arrived meanwhile.
    InFlight {
        updated: bool,
    },
}

struct Entry {
    pod: QueuedPod,
    location: Location,
    /// Bumped on every move, so stale heap entries can be recognised.
    seq: u64,
}

/// activeQ order: priority, then age, then name for a total order.
#[derive(PartialEq, Eq)]
struct ActiveKey {
    priority: i32,
    timestamp: Reverse<Instant>,
    key: Reverse<String>,
    seq: u64,
}

impl Ord for ActiveKey {
    fn cmp(&self, other: &Self) -> CmpOrdering {
        (self.priority, &self.timestamp, &self.key).cmp(&(
            other.priority,
            &other.timestamp,
            &other.key,
        ))
    }
}

impl PartialOrd for ActiveKey {
    fn partial_cmp(&self, other: &Self) -> Option<CmpOrdering> {
        Some(self.cmp(other))
    }
}

#[derive(Default)]
struct Inner {
    pods: HashMap<String, Entry>,
    active: BinaryHeap<ActiveKey>,
    backoff: BinaryHeap<Reverse<(Instant, String, u64)>>,
    next_seq: u64,
    scheduling_cycle: u64,
    /// Pods popped and not yet back or done.
    in_flight: usize,
    /// Events seen while pods were in flight, with the scheduling cycle they came in; cleared
    /// whenever no pod is in flight.
    in_flight_events: Vec<(u64, ClusterEvent)>,
    closed: bool,
}

impl Inner {
    fn put(&mut self, key: &str, location: Location) {
        self.next_seq += 1;
        let seq = self.next_seq;
        let Some(e) = self.pods.get_mut(key) else {
            return;
        };
        e.location = location;
        e.seq = seq;
        match location {
            Location::Active => self.active.push(ActiveKey {
                priority: e.pod.info.priority(),
                timestamp: Reverse(e.pod.timestamp),
                key: Reverse(key.to_string()),
                seq,
            }),
            Location::Backoff => {
                self.backoff
                    .push(Reverse((e.pod.backoff_until, key.to_string(), seq)));
            }
            Location::Unschedulable { .. } | Location::InFlight { .. } => {}
        }
    }

    /// Active if its backoff is over, else backoff.
    fn requeue(&mut self, key: &str, now: Instant) {
        let until = self.pods.get(key).map(|e| e.pod.backoff_until);
        match until {
            Some(until) if until > now => self.put(key, Location::Backoff),
            Some(_) => self.put(key, Location::Active),
            None => {}
        }
    }

    /// An in-flight pod left the flight (failed, done or deleted).
    fn land(&mut self) {
        self.in_flight = self.in_flight.saturating_sub(1);
        if self.in_flight == 0 {
            self.in_flight_events.clear();
        }
    }

    fn counts(&self) -> QueueSizes {
        let mut s = QueueSizes::default();
        for e in self.pods.values() {
            match e.location {
                Location::Active => s.active += 1,
                Location::Backoff => s.backoff += 1,
                Location::Unschedulable { .. } => s.unschedulable += 1,
                Location::InFlight { .. } => s.in_flight += 1,
            }
        }
        s
    }
}

/// How many pods are where (for `/metrics`: `scheduler_pending_pods{queue=…}`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueueSizes {
    pub active: usize,
    pub backoff: usize,
    pub unschedulable: usize,
    pub in_flight: usize,
}

/// Why an attempt failed, which decides where the pod waits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// No node fits: park it until one of these cluster events (or backoff, if one came
    /// during the attempt).
    Unschedulable(ClusterEvent),
    /// Something went wrong (an API error, a failed binding): retry after backoff.
    Error,
}

/// The queue; cheap to share behind an `Arc`.
#[derive(Default)]
pub struct SchedulingQueue {
    inner: Mutex<Inner>,
    ready: Notify,
}

impl SchedulingQueue {
    pub fn new() -> Self {
        Self::default()
    }

    /// A pending pod seen for the first time, or a newer version of one already queued.
    pub fn add_or_update(&self, info: Arc<PodInfo>) {
        let now = Instant::now();
        let mut q = self.inner.lock();
        let key = info.key.clone();
        match q.pods.get_mut(&key) {
            None => {
                q.pods.insert(
                    key.clone(),
                    Entry {
                        pod: QueuedPod {
                            info,
                            attempts: 0,
                            timestamp: now,
                            first_seen: now,
                            backoff_until: now,
                        },
                        location: Location::Active,
                        seq: 0,
                    },
                );
                q.put(&key, Location::Active);
            }
            Some(e) => {
                let unchanged_spec = e.pod.info.pod.spec == info.pod.spec;
                e.pod.info = info;
                match e.location {
                    Location::InFlight { .. } => {
                        e.location = Location::InFlight { updated: true };
                        return;
                    }
                    // an update that may make it schedulable: try again (after its backoff)
                    Location::Unschedulable { .. } if !unchanged_spec => q.requeue(&key, now),
                    // the heaps hold the key; re-push so a priority change takes effect
                    Location::Active => q.put(&key, Location::Active),
                    Location::Backoff | Location::Unschedulable { .. } => return,
                }
            }
        }
        drop(q);
        self.ready.notify_one();
    }

    /// The pod is gone (deleted, or bound by someone else).
    pub fn delete(&self, key: &str) {
        let mut q = self.inner.lock();
        if let Some(e) = q.pods.remove(key)
            && matches!(e.location, Location::InFlight { .. })
        {
            q.land();
        }
    }

    /// Waits for the next pod to schedule; `None` once the queue is closed.
    pub async fn pop(&self) -> Option<(QueuedPod, u64)> {
        loop {
            let notified = self.ready.notified();
            {
                let mut q = self.inner.lock();
                if q.closed {
                    return None;
                }
                while let Some(top) = q.active.pop() {
                    let key = top.key.0;
                    let live = q
                        .pods
                        .get(&key)
                        .is_some_and(|e| e.seq == top.seq && e.location == Location::Active);
                    if !live {
                        continue;
                    }
                    q.scheduling_cycle += 1;
                    q.in_flight += 1;
                    let cycle = q.scheduling_cycle;
                    q.put(&key, Location::InFlight { updated: false });
                    let e = q.pods.get_mut(&key).expect("checked above");
                    e.pod.attempts += 1;
                    return Some((e.pod.clone(), cycle));
                }
            }
            notified.await;
        }
    }

    /// The attempt that popped `key` in `cycle` failed.
    pub fn requeue_failed(&self, key: &str, cycle: u64, failure: Failure) {
        let now = Instant::now();
        let mut q = self.inner.lock();
        let missed = q
            .in_flight_events
            .iter()
            .filter(|(c, _)| *c >= cycle)
            .fold(ClusterEvent::NONE, |all, (_, e)| all.with(*e));
        let Some(e) = q.pods.get_mut(key) else {
            return;
        };
        let Location::InFlight { updated } = e.location else {
            return;
        };
        let exp = e.pod.attempts.saturating_sub(1).min(16);
        let backoff = (INITIAL_BACKOFF * 2u32.pow(exp)).min(MAX_BACKOFF);
        e.pod.backoff_until = now + backoff;
        e.pod.timestamp = now;
        match failure {
            Failure::Unschedulable(interest) if !missed.intersects(interest) && !updated => q.put(
                key,
                Location::Unschedulable {
                    since: now,
                    interest,
                },
            ),
            _ => q.put(key, Location::Backoff),
        }
        q.land();
    }

    /// A pod whose binding failed after it left the queue: back in, after its backoff.
    pub fn add_after_failed_binding(&self, info: Arc<PodInfo>, attempts: u32, first_seen: Instant) {
        let now = Instant::now();
        let exp = attempts.saturating_sub(1).min(16);
        let backoff = (INITIAL_BACKOFF * 2u32.pow(exp)).min(MAX_BACKOFF);
        let mut q = self.inner.lock();
        let key = info.key.clone();
        if q.pods.contains_key(&key) {
            return;
        }
        q.pods.insert(
            key.clone(),
            Entry {
                pod: QueuedPod {
                    info,
                    attempts,
                    timestamp: now,
                    first_seen,
                    backoff_until: now + backoff,
                },
                location: Location::Backoff,
                seq: 0,
            },
        );
        q.put(&key, Location::Backoff);
    }

    /// The attempt succeeded (the pod is assumed and binding): it leaves the queue.
    pub fn done(&self, key: &str) {
        let mut q = self.inner.lock();
        if matches!(
            q.pods.get(key).map(|e| e.location),
            Some(Location::InFlight { .. })
        ) {
            q.pods.remove(key);
            q.land();
        }
    }

    /// A cluster event: the parked pods it may make schedulable (those whose rejecting plugins
    /// registered for it) go back to activeQ, or backoffQ while their backoff lasts; attempts
    /// in flight remember it.
    pub fn on_event(&self, event: ClusterEvent) {
        if event.is_empty() {
            return;
        }
        let now = Instant::now();
        let mut q = self.inner.lock();
        let parked: Vec<String> = q
            .pods
            .iter()
            .filter(|(_, e)| {
                matches!(e.location, Location::Unschedulable { interest, .. } if interest.intersects(event))
            })
            .map(|(k, _)| k.clone())
            .collect();
        for key in &parked {
            q.requeue(key, now);
        }
        if q.in_flight > 0 {
            let cycle = q.scheduling_cycle;
            q.in_flight_events.push((cycle, event));
        }
        drop(q);
        if !parked.is_empty() {
            self.ready.notify_one();
        }
    }

    /// Moves pods whose backoff is over to activeQ, and pods parked for longer than
    /// [`MAX_UNSCHEDULABLE`] back too; run every second.
    pub fn flush(&self) {
        let now = Instant::now();
        let mut q = self.inner.lock();
        let mut moved = false;
        while let Some(Reverse((until, key, seq))) = q.backoff.peek().cloned() {
            if until > now {
                break;
            }
            q.backoff.pop();
            let live = q
                .pods
                .get(&key)
                .is_some_and(|e| e.seq == seq && e.location == Location::Backoff);
            if live {
                q.put(&key, Location::Active);
                moved = true;
            }
        }
        let stale: Vec<String> = q
            .pods
            .iter()
            .filter(|(_, e)| {
                matches!(e.location, Location::Unschedulable { since, .. } if now - since >= MAX_UNSCHEDULABLE)
            })
            .map(|(k, _)| k.clone())
            .collect();
        for key in stale {
            q.requeue(&key, now);
            moved = true;
        }
        drop(q);
        if moved {
            self.ready.notify_one();
        }
    }

    pub fn sizes(&self) -> QueueSizes {
        self.inner.lock().counts()
    }

    /// Wakes every `pop` with `None`.
    pub fn close(&self) {
        self.inner.lock().closed = true;
        self.ready.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::testing::PodBuilder;

    fn pod(name: &str, priority: i32) -> Arc<PodInfo> {
        PodBuilder::new(name).priority(priority).info()
    }

    async fn pop_name(q: &SchedulingQueue) -> (String, u64) {
        let (p, cycle) = q.pop().await.unwrap();
        (p.info.name().to_string(), cycle)
    }

    #[tokio::test(start_paused = true)]
    async fn higher_priority_pods_pop_first_then_the_oldest() {
        let q = SchedulingQueue::new();
        q.add_or_update(pod("old-low", 0));
        tokio::time::advance(Duration::from_millis(1)).await;
        q.add_or_update(pod("new-low", 0));
        q.add_or_update(pod("high", 100));
        assert_eq!(pop_name(&q).await.0, "high");
        assert_eq!(pop_name(&q).await.0, "old-low");
        assert_eq!(pop_name(&q).await.0, "new-low");
    }

    #[tokio::test(start_paused = true)]
    async fn an_unschedulable_pod_waits_for_a_cluster_event() {
        let q = SchedulingQueue::new();
        q.add_or_update(pod("p", 0));
        let (_, cycle) = pop_name(&q).await;
        q.requeue_failed(
            "default/p",
            cycle,
            Failure::Unschedulable(ClusterEvent::ALL),
        );
        assert_eq!(q.sizes().unschedulable, 1);
        tokio::time::advance(Duration::from_secs(30)).await;
        q.flush();
        assert_eq!(q.sizes().unschedulable, 1, "no event, not yet 5 minutes");
        q.on_event(ClusterEvent::ALL);
        assert_eq!(q.sizes().active, 1);
        assert_eq!(pop_name(&q).await.0, "p");
    }

    #[tokio::test(start_paused = true)]
    async fn an_event_during_the_attempt_sends_the_failure_to_backoff() {
        let q = SchedulingQueue::new();
        q.add_or_update(pod("p", 0));
        let (_, cycle) = pop_name(&q).await;
        q.on_event(ClusterEvent::ALL);
        q.requeue_failed(
            "default/p",
            cycle,
            Failure::Unschedulable(ClusterEvent::ALL),
        );
        assert_eq!(q.sizes().backoff, 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_parked_pod_returns_only_for_an_event_its_plugins_registered_for() {
        let q = SchedulingQueue::new();
        q.add_or_update(pod("p", 0));
        let (_, cycle) = pop_name(&q).await;
        // an event it does not care about, while it is in flight: it still parks
        q.on_event(ClusterEvent::NODE_CONDITION);
        let interest = ClusterEvent::NODE_ADD.with(ClusterEvent::NODE_LABEL);
        q.requeue_failed("default/p", cycle, Failure::Unschedulable(interest));
        assert_eq!(q.sizes().unschedulable, 1);
        for other in [
            ClusterEvent::NODE_TAINT,
            ClusterEvent::NODE_CONDITION,
            ClusterEvent::ASSIGNED_POD_ADD,
        ] {
            q.on_event(other);
            assert_eq!(q.sizes().unschedulable, 1, "{other:?}");
        }
        q.on_event(ClusterEvent::NODE_LABEL);
        assert_eq!(q.sizes().unschedulable, 0);

        // one it cares about during the next attempt: backoff, not parked
        tokio::time::advance(Duration::from_secs(10)).await;
        q.flush();
        let (_, cycle) = pop_name(&q).await;
        q.on_event(ClusterEvent::NODE_ADD);
        q.requeue_failed("default/p", cycle, Failure::Unschedulable(interest));
        assert_eq!(q.sizes().backoff, 1);
    }

    #[tokio::test(start_paused = true)]
    async fn backoff_doubles_from_one_second_up_to_ten() {
        let q = SchedulingQueue::new();
        q.add_or_update(pod("p", 0));
        for expected in [1u64, 2, 4, 8, 10, 10] {
            let (_, cycle) = pop_name(&q).await;
            q.requeue_failed("default/p", cycle, Failure::Error);
            tokio::time::advance(Duration::from_millis(expected * 1000 - 1)).await;
            q.flush();
            assert_eq!(
                q.sizes().backoff,
                1,
                "still backing off before {expected} s"
            );
            tokio::time::advance(Duration::from_millis(1)).await;
            q.flush();
            assert_eq!(q.sizes().active, 1, "back after {expected} s");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn parked_pods_return_after_five_minutes() {
        let q = SchedulingQueue::new();
        q.add_or_update(pod("p", 0));
        let (_, cycle) = pop_name(&q).await;
        q.requeue_failed(
            "default/p",
            cycle,
            Failure::Unschedulable(ClusterEvent::ALL),
        );
        tokio::time::advance(MAX_UNSCHEDULABLE).await;
        q.flush();
        assert_eq!(q.sizes().active, 1);
    }

    #[tokio::test(start_paused = true)]
    async fn deleted_and_done_pods_leave_the_queue() {
        let q = SchedulingQueue::new();
        q.add_or_update(pod("gone", 0));
        q.add_or_update(pod("bound", 0));
        q.delete("default/gone");
        assert_eq!(pop_name(&q).await.0, "bound");
        q.done("default/bound");
        assert_eq!(q.sizes(), QueueSizes::default());
        q.close();
        assert!(q.pop().await.is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_binding_returns_the_pod_after_its_backoff() {
        let q = SchedulingQueue::new();
        q.add_after_failed_binding(pod("p", 0), 2, Instant::now());
        assert_eq!(q.sizes().backoff, 1);
        tokio::time::advance(Duration::from_secs(2)).await;
        q.flush();
        assert_eq!(pop_name(&q).await.0, "p");
    }

    #[tokio::test(start_paused = true)]
    async fn an_update_while_in_flight_is_not_parked_on_failure() {
        let q = SchedulingQueue::new();
        q.add_or_update(pod("p", 0));
        let (_, cycle) = pop_name(&q).await;
        q.add_or_update(PodBuilder::new("p").priority(0).label("new", "yes").info());
        q.requeue_failed(
            "default/p",
            cycle,
            Failure::Unschedulable(ClusterEvent::ALL),
        );
        assert_eq!(q.sizes().backoff, 1);
    }
}
