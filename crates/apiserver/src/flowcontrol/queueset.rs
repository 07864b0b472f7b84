//! One priority level's seats and queues (upstream's `queueset`).
//!
//! A level has a concurrency limit in seats; a request takes one seat or more (a LIST of many
//! objects more) while it runs. An exempt level never waits. A level that rejects takes what
//! fits and refuses the rest. A queuing level puts each request in one of its queues: the
//! request's flow (its FlowSchema and distinguisher) is hashed to a hand of queues (shuffle
//! sharding, so that two flows rarely share all their queues), and the request joins the one
//! with the least work in it; a full queue refuses it. Whenever seats free, queues are served
//! by fair queuing: each queue has a virtual start time that grows by the seat-seconds its
//! requests use, and the waiting queue that is furthest behind goes first; a queue that was
//! idle rejoins at the current virtual time, so it neither gains credit for its idleness nor
//! is starved by busier ones.
//!
//! A level's limit is set from outside: the levels lend idle seats to busy ones
//! ([`super::borrowing`]), judged by the seat demand each level integrates here.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tokio::sync::oneshot;

use super::borrowing::{Demand, Integrator};
use super::rules::Queuing;

/// The service time a seat is assumed to take until its request finishes (then its queue is
/// charged what it really took).
const ESTIMATED_SERVICE: f64 = 1.0;

/// The longest `Retry-After` (seconds), as upstream.
const MAX_RETRY_AFTER: u64 = 32;

/// Why a level refused a request (upstream's `reason` label values).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rejection {
    /// Its queue already held `queueLengthLimit` requests.
    QueueFull,
    /// A level that does not queue had no seat for it.
    ConcurrencyLimit,
    /// It waited in its queue past the wait limit.
    TimeOut,
}

impl Rejection {
    pub fn reason(self) -> &'static str {
        match self {
            Rejection::QueueFull => "queue-full",
            Rejection::ConcurrencyLimit => "concurrency-limit",
            Rejection::TimeOut => "time-out",
        }
    }
}

/// What a level does with requests beyond its limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Exempt,
    Reject,
    Queue(Queuing),
}

pub struct Level {
    pub kind: Kind,
    state: Mutex<State>,
}

impl std::fmt::Debug for Level {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Level")
            .field("kind", &self.kind)
            .finish_non_exhaustive()
    }
}

struct State {
    /// Seats the level may have in use (none for an exempt level).
    limit: u32,
    in_use: u32,
    executing: u32,
    waiting: u32,
    /// Seats the waiting requests ask for.
    waiting_seats: u32,
    /// Seats in use plus seats waiting, over time, and as summarised at the last rebalance.
    demand: Integrator,
    demand_stats: Demand,
    queues: Vec<Queue>,
    /// The virtual start time of the last queue served (see [`State::virtual_time`]).
    virtual_time: f64,
    next_id: u64,
    retry_after: RetryAfter,
}

#[derive(Default)]
struct Queue {
    waiting: VecDeque<Waiter>,
    waiting_seats: u32,
    in_use: u32,
    /// Seat-seconds served (estimated for the requests still running), as virtual time.
    next_start: f64,
}

struct Waiter {
    id: u64,
    seats: u32,
    grant: oneshot::Sender<Seats>,
}

/// Seats held by a running request; released when dropped.
pub struct Seats {
    level: Arc<Level>,
    queue: Option<usize>,
    seats: u32,
    started: Instant,
    /// False for a grant that never reached its request (released by the dispatcher).
    armed: bool,
}

impl std::fmt::Debug for Seats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Seats").field("seats", &self.seats).finish()
    }
}

impl Drop for Seats {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let mut state = self.level.state.lock();
        state.release(self.queue, self.seats, self.started.elapsed());
        self.level.dispatch(&mut state);
    }
}

/// What a level reports about itself (for metrics).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Usage {
    pub limit: u32,
    pub seats_in_use: u32,
    pub executing: u32,
    pub waiting: u32,
}

impl Level {
    pub fn new(kind: Kind, limit: u32) -> Arc<Self> {
        let queues = match kind {
            Kind::Queue(q) => (0..q.queues).map(|_| Queue::default()).collect(),
            _ => Vec::new(),
        };
        Arc::new(Self {
            kind,
            state: Mutex::new(State {
                limit,
                in_use: 0,
                executing: 0,
                waiting: 0,
                waiting_seats: 0,
                demand: Integrator::new(Instant::now()),
                demand_stats: Demand::default(),
                queues,
                virtual_time: 0.0,
                next_id: 0,
                retry_after: RetryAfter::default(),
            }),
        })
    }

    /// A new concurrency limit; waiting requests that now fit start.
    pub fn set_limit(self: &Arc<Self>, limit: u32) {
        let mut state = self.state.lock();
        state.limit = limit;
        self.dispatch(&mut state);
    }

    pub fn usage(&self) -> Usage {
        let state = self.state.lock();
        Usage {
            limit: state.limit,
            seats_in_use: state.in_use,
            executing: state.executing,
            waiting: state.waiting,
        }
    }

    /// The level's seat demand since the last call, folded into its running summary.
    pub fn sample_demand(&self) -> Demand {
        let mut state = self.state.lock();
        let sample = state.demand.reset(Instant::now());
        state.demand_stats.update(sample);
        state.demand_stats
    }

    /// The `Retry-After` (seconds) for a request this level refuses now.
    pub fn retry_after(&self) -> u64 {
        self.state.lock().retry_after.seconds
    }

    /// Seats for a request of `flow` that needs `seats`: at once, after waiting in a queue
    /// (at most `wait_limit`), or refused.
    pub async fn admit(
        self: &Arc<Self>,
        flow: u64,
        seats: u32,
        wait_limit: Duration,
    ) -> Result<Seats, Rejection> {
        let (id, queue, granted) = {
            let mut state = self.state.lock();
            let queuing = match self.kind {
                Kind::Exempt => return Ok(self.take(&mut state, None, seats)),
                Kind::Reject if state.fits(seats) => return Ok(self.take(&mut state, None, seats)),
                Kind::Reject => return Err(state.refuse(Rejection::ConcurrencyLimit)),
                Kind::Queue(q) => q,
            };
            let index = state.choose(flow, queuing.hand_size);
            let queue = &state.queues[index];
            if state.in_use >= state.limit
                && queue.waiting.len() >= queuing.queue_length_limit as usize
            {
                return Err(state.refuse(Rejection::QueueFull));
            }
            let virtual_time = state.virtual_time();
            let (grant, granted) = oneshot::channel();
            state.next_id += 1;
            let id = state.next_id;
            let queue = &mut state.queues[index];
            if queue.waiting.is_empty() && queue.in_use == 0 {
                queue.next_start = queue.next_start.max(virtual_time);
            }
            queue.waiting.push_back(Waiter { id, seats, grant });
            queue.waiting_seats += seats;
            state.waiting += 1;
            state.waiting_seats += seats;
            state.demand_changed();
            self.dispatch(&mut state);
            (id, index, granted)
        };
        // a request that gives up while it waits leaves its waiter behind: the dispatcher
        // finds the grant undeliverable and takes the seats back
        match tokio::time::timeout(wait_limit, granted).await {
            Ok(Ok(seats)) => Ok(seats),
            Ok(Err(_)) => Err(Rejection::TimeOut),
            Err(_) => {
                let mut state = self.state.lock();
                let queue = &mut state.queues[queue];
                match queue.waiting.iter().position(|w| w.id == id) {
                    Some(at) => {
                        let waiter = queue.waiting.remove(at).expect("found above");
                        queue.waiting_seats -= waiter.seats;
                        state.waiting -= 1;
                        state.waiting_seats -= waiter.seats;
                        state.demand_changed();
                        Err(state.refuse(Rejection::TimeOut))
                    }
                    // dispatched as the wait ended
                    None => {
                        drop(state);
                        Err(Rejection::TimeOut)
                    }
                }
            }
        }
    }

    fn take(self: &Arc<Self>, state: &mut State, queue: Option<usize>, seats: u32) -> Seats {
        state.in_use += seats;
        state.executing += 1;
        if let Some(q) = queue {
            let queue = &mut state.queues[q];
            queue.in_use += seats;
            queue.next_start += f64::from(seats) * ESTIMATED_SERVICE;
        }
        state.demand_changed();
        Seats {
            level: self.clone(),
            queue,
            seats,
            started: Instant::now(),
            armed: true,
        }
    }

    /// Starts waiting requests while their seats fit, the queue furthest behind first. A
    /// request wider than what is free waits for it (nothing overtakes it), unless nothing
    /// runs at all.
    fn dispatch(self: &Arc<Self>, state: &mut State) {
        while let Some(index) = state.furthest_behind() {
            let seats = state.queues[index].waiting[0].seats;
            if !state.fits(seats) {
                break;
            }
            let queue = &mut state.queues[index];
            let waiter = queue.waiting.pop_front().expect("a waiting queue");
            queue.waiting_seats -= seats;
            state.waiting -= 1;
            state.waiting_seats -= seats;
            state.virtual_time = state.queues[index].next_start;
            let grant = self.take(state, Some(index), seats);
            if let Err(mut undelivered) = waiter.grant.send(grant) {
                undelivered.armed = false;
                state.release(Some(index), seats, Duration::ZERO);
            }
        }
    }
}

impl State {
    /// Records the seat demand after a change to the seats in use or waiting.
    fn demand_changed(&mut self) {
        self.demand
            .set(f64::from(self.in_use + self.waiting_seats), Instant::now());
    }

    fn fits(&self, seats: u32) -> bool {
        self.in_use == 0 || self.in_use + seats <= self.limit
    }

    /// The queue, of a hand dealt for `flow`, with the least work: seats waiting and in use.
    fn choose(&self, flow: u64, hand_size: u32) -> usize {
        let mut best = (u32::MAX, 0);
        deal(flow, self.queues.len(), hand_size as usize, |i| {
            let q = &self.queues[i];
            let work = q.waiting_seats + q.in_use;
            if work < best.0 {
                best = (work, i);
            }
        });
        best.1
    }

    /// Where a queue that was idle starts: level with the waiting queue furthest behind (the
    /// next to be served), or with the last one served when none waits. Not the queue furthest
    /// ahead: a queue's start time includes the estimate for its requests still running, and
    /// a newcomer must not queue behind those estimates.
    fn virtual_time(&self) -> f64 {
        self.furthest_behind()
            .map_or(self.virtual_time, |i| self.queues[i].next_start)
    }

    /// The waiting queue with the least virtual start time.
    fn furthest_behind(&self) -> Option<usize> {
        self.queues
            .iter()
            .enumerate()
            .filter(|(_, q)| !q.waiting.is_empty())
            .min_by(|(_, a), (_, b)| a.next_start.total_cmp(&b.next_start))
            .map(|(i, _)| i)
    }

    fn release(&mut self, queue: Option<usize>, seats: u32, took: Duration) {
        self.in_use -= seats;
        self.executing -= 1;
        if let Some(q) = queue {
            let queue = &mut self.queues[q];
            queue.in_use -= seats;
            // charge what the request took instead of the estimate
            queue.next_start += f64::from(seats) * (took.as_secs_f64() - ESTIMATED_SERVICE);
        }
        self.demand_changed();
    }

    fn refuse(&mut self, why: Rejection) -> Rejection {
        self.retry_after.dropped(unix_now());
        why
    }
}

/// Deals `hand` distinct cards of a deck of `deck` from `hash` (upstream's shuffle sharding):
/// the hash is read as digits of the mixed radix `deck`, `deck - 1`, …, each digit picking
/// one of the cards not dealt yet.
fn deal(mut hash: u64, deck: usize, hand: usize, mut pick: impl FnMut(usize)) {
    let hand = hand.clamp(1, deck.max(1));
    let mut dealt: Vec<usize> = Vec::with_capacity(hand);
    for i in 0..hand {
        let radix = (deck - i) as u64;
        let mut card = (hash % radix) as usize;
        hash /= radix;
        // the card-th of those left: step over each dealt card at or below it, in order
        let mut at = 0;
        while at < dealt.len() && dealt[at] <= card {
            card += 1;
            at += 1;
        }
        dealt.insert(at, card);
        pick(card);
    }
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The `Retry-After` a level gives refused requests, as upstream adapts it: it starts at one
/// second, doubles (up to [`MAX_RETRY_AFTER`]) when at least three times as many requests as
/// its value were refused in the last that many seconds (at most once per that many
/// seconds), and shrinks by one when fewer than its value were.
#[derive(Debug)]
struct RetryAfter {
    seconds: u64,
    /// Refusals per second, oldest first: (unix second, count).
    history: VecDeque<(u64, u64)>,
    raised_at: u64,
}

impl Default for RetryAfter {
    fn default() -> Self {
        Self {
            seconds: 1,
            history: VecDeque::new(),
            raised_at: 0,
        }
    }
}

impl RetryAfter {
    fn dropped(&mut self, now: u64) {
        match self.history.back_mut() {
            Some((second, count)) if *second == now => {
                *count += 1;
                return;
            }
            _ => {}
        }
        // a new second: reconsider the value over the seconds before it
        let window = self.seconds;
        let recent: u64 = self
            .history
            .iter()
            .filter(|(second, _)| now - second <= window)
            .map(|(_, count)| count)
            .sum();
        if now - self.raised_at >= window && recent >= 3 * window {
            self.seconds = (window * 2).min(MAX_RETRY_AFTER);
            self.raised_at = now;
        } else if recent < window && window > 1 {
            self.seconds -= 1;
        }
        self.history.push_back((now, 1));
        let keep = (2 * self.seconds).min(MAX_RETRY_AFTER);
        while self
            .history
            .front()
            .is_some_and(|(second, _)| now - second > keep)
        {
            self.history.pop_front();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn queuing(queues: u32, hand_size: u32, queue_length_limit: u32) -> Kind {
        Kind::Queue(Queuing {
            queues,
            hand_size,
            queue_length_limit,
        })
    }

    #[test]
    fn a_hand_is_distinct_cards_of_the_deck() {
        for hash in [0u64, 1, 7, 12345, u64::MAX, 0xdead_beef_cafe] {
            let mut hand = Vec::new();
            deal(hash, 8, 4, |c| hand.push(c));
            assert_eq!(hand.len(), 4);
            assert!(hand.iter().all(|c| *c < 8), "{hand:?}");
            let mut sorted = hand.clone();
            sorted.sort();
            sorted.dedup();
            assert_eq!(sorted.len(), 4, "{hash}: {hand:?}");
        }
        // the whole deck, dealt, is a permutation
        let mut all = Vec::new();
        deal(987_654_321, 6, 6, |c| all.push(c));
        all.sort();
        assert_eq!(all, [0, 1, 2, 3, 4, 5]);
        // every card turns up over many hashes
        let mut seen = [false; 16];
        for hash in 0..200u64 {
            deal(hash.wrapping_mul(0x9e37_79b9_7f4a_7c15), 16, 2, |c| {
                seen[c] = true
            });
        }
        assert!(seen.iter().all(|s| *s));
    }

    #[tokio::test]
    async fn an_exempt_level_never_waits_and_a_rejecting_one_refuses_past_its_limit() {
        let exempt = Level::new(Kind::Exempt, 0);
        let held: Vec<_> = futures_held(&exempt, 5).await;
        assert_eq!(exempt.usage().executing, 5);
        drop(held);
        assert_eq!(exempt.usage().executing, 0);

        let reject = Level::new(Kind::Reject, 2);
        let a = reject.admit(1, 1, Duration::ZERO).await.unwrap();
        let b = reject.admit(2, 1, Duration::ZERO).await.unwrap();
        assert_eq!(
            reject.admit(3, 1, Duration::ZERO).await.unwrap_err(),
            Rejection::ConcurrencyLimit
        );
        drop(a);
        let c = reject.admit(3, 1, Duration::ZERO).await.unwrap();
        // a request wider than the limit runs when nothing else does
        drop((b, c));
        let wide = reject.admit(4, 10, Duration::ZERO).await.unwrap();
        assert_eq!(reject.usage().seats_in_use, 10);
        drop(wide);
        assert_eq!(reject.usage().seats_in_use, 0);
    }

    async fn futures_held(level: &Arc<Level>, n: u64) -> Vec<Seats> {
        let mut held = Vec::new();
        for flow in 0..n {
            held.push(level.admit(flow, 1, Duration::ZERO).await.unwrap());
        }
        held
    }

    #[tokio::test]
    async fn waiting_requests_start_as_seats_free_and_a_full_queue_refuses() {
        // one queue of at most two waiting requests, one seat
        let level = Level::new(queuing(1, 1, 2), 1);
        let first = level.admit(1, 1, Duration::from_secs(60)).await.unwrap();
        let second = tokio::spawn({
            let level = level.clone();
            async move { level.admit(1, 1, Duration::from_secs(60)).await }
        });
        let third = tokio::spawn({
            let level = level.clone();
            async move { level.admit(2, 1, Duration::from_secs(60)).await }
        });
        while level.usage().waiting < 2 {
            tokio::task::yield_now().await;
        }
        assert_eq!(
            level
                .admit(3, 1, Duration::from_secs(60))
                .await
                .unwrap_err(),
            Rejection::QueueFull
        );
        drop(first);
        let second = second.await.unwrap().unwrap();
        assert_eq!(level.usage().waiting, 1);
        drop(second);
        let third = third.await.unwrap().unwrap();
        assert_eq!(
            level.usage(),
            Usage {
                limit: 1,
                seats_in_use: 1,
                executing: 1,
                waiting: 0
            }
        );
        drop(third);
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_that_waits_too_long_is_refused_and_leaves_its_queue() {
        let level = Level::new(queuing(4, 2, 10), 1);
        let _running = level.admit(1, 1, Duration::ZERO).await.unwrap();
        let refused = level.admit(2, 1, Duration::from_secs(15)).await;
        assert_eq!(refused.unwrap_err(), Rejection::TimeOut);
        assert_eq!(level.usage().waiting, 0);
        // a request that gives up (its future dropped) is skipped when seats free
        let gave_up = tokio::time::timeout(
            Duration::from_secs(1),
            level.admit(3, 1, Duration::from_secs(3600)),
        );
        assert!(gave_up.await.is_err());
        assert_eq!(level.usage().waiting, 1);
        drop(_running);
        assert_eq!(
            level.usage().seats_in_use,
            0,
            "the undelivered grant came back"
        );
        assert_eq!(level.usage().waiting, 0);
    }

    #[tokio::test]
    async fn a_flooding_flow_does_not_starve_another_one() {
        // one seat; flow 1 queues 40 requests before flow 2 asks for one; each request
        // started hands its seats to the test, which frees them one at a time
        let level = Level::new(queuing(64, 6, 100), 1);
        let running = level.admit(0, 1, Duration::ZERO).await.unwrap();
        let (started, mut starts) = tokio::sync::mpsc::unbounded_channel();
        let ask = |flow: u64| {
            let (level, started) = (level.clone(), started.clone());
            // flows are hashes (small numbers would deal the same hands)
            let hash = flow.wrapping_mul(0x9e37_79b9_7f4a_7c15);
            tokio::spawn(async move {
                let seats = level.admit(hash, 1, Duration::from_secs(60)).await.unwrap();
                started.send((flow, seats)).unwrap();
            })
        };
        for _ in 0..40 {
            ask(1);
        }
        while level.usage().waiting < 40 {
            tokio::task::yield_now().await;
        }
        ask(2);
        while level.usage().waiting < 41 {
            tokio::task::yield_now().await;
        }
        drop(running);
        let mut flood_first = 0;
        let _polite = loop {
            let (flow, seats) = starts.recv().await.unwrap();
            if flow == 2 {
                break seats;
            }
            flood_first += 1;
            drop(seats);
        };
        // the flood holds at most a hand of queues: the newcomer waits for at most one
        // request of each
        assert!(flood_first <= 6, "{flood_first} flood requests went first");
        assert_eq!(level.usage().waiting, 40 - flood_first);
    }

    #[tokio::test]
    async fn a_narrow_newcomer_waits_for_at_most_one_wide_request_of_a_flood() {
        // ten seats; a flood of 5-seat requests (two running, many waiting) from one flow
        let level = Level::new(queuing(64, 6, 100), 10);
        let mix = |flow: u64| flow.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        let (started, mut starts) = tokio::sync::mpsc::unbounded_channel();
        let ask = |flow: u64, seats: u32| {
            let (level, started) = (level.clone(), started.clone());
            tokio::spawn(async move {
                let held = level.admit(mix(flow), seats, Duration::from_secs(60)).await;
                started.send((flow, held.unwrap())).unwrap();
            })
        };
        for _ in 0..30 {
            ask(1, 5);
        }
        let mut running = Vec::new();
        for _ in 0..2 {
            running.push(starts.recv().await.unwrap().1);
        }
        while level.usage().waiting < 28 {
            tokio::task::yield_now().await;
        }
        // the newcomer starts level with the flood's queue furthest behind
        ask(2, 1);
        while level.usage().waiting < 29 {
            tokio::task::yield_now().await;
        }
        let mut flood_first = 0;
        running.remove(0);
        let _polite = loop {
            let (flow, seats) = starts.recv().await.unwrap();
            if flow == 2 {
                break seats;
            }
            flood_first += 1;
            running.push(seats);
            running.remove(0);
        };
        assert!(flood_first <= 1, "{flood_first} flood requests went first");
    }

    #[test]
    fn retry_after_grows_under_sustained_refusals_and_shrinks_after() {
        let mut r = RetryAfter::default();
        for second in 100..110 {
            for _ in 0..10 {
                r.dropped(second);
            }
        }
        assert!(
            r.seconds > 1 && r.seconds <= MAX_RETRY_AFTER,
            "{}",
            r.seconds
        );
        let high = r.seconds;
        for second in (200..400).step_by(40) {
            r.dropped(second);
        }
        assert!(r.seconds < high);
    }
}
