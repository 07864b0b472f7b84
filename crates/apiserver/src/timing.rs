//! Where one request's time goes: how much of it was spent waiting on others (in APF's queue,
//! on admission webhooks), which upstream's SLI latency
//! (`apiserver_request_sli_duration_seconds`) leaves out, and the steps it passed (admitted,
//! body read, admission, store), logged when the request was slow, as upstream's request
//! traces are (`"Create" … (total time: 1.2s): "Object stored in database" 1.1s`).

use std::cell::RefCell;
use std::fmt;
use std::future::Future;
use std::time::{Duration, Instant};

/// A request that takes longer is logged with its steps (upstream's `LogIfLong(500ms)`).
pub const SLOW: Duration = Duration::from_millis(500);

/// Steps kept per request; later ones are dropped.
const STEPS: usize = 12;

/// One request's timing so far.
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    started: Instant,
    excluded: Duration,
    steps: [(&'static str, Duration); STEPS],
    len: usize,
}

impl Timing {
    fn new(started: Instant) -> Self {
        Self {
            started,
            excluded: Duration::ZERO,
            steps: [("", Duration::ZERO); STEPS],
            len: 0,
        }
    }

    /// The time spent waiting on others.
    pub fn excluded(&self) -> Duration {
        self.excluded
    }

    /// The steps passed, each with the time since the one before.
    pub fn steps(&self) -> impl Iterator<Item = (&'static str, Duration)> + '_ {
        let mut last = Duration::ZERO;
        self.steps[..self.len].iter().map(move |&(name, at)| {
            let since = at.saturating_sub(last);
            last = at;
            (name, since)
        })
    }
}

/// `admitted 0.1ms, body read 0.3ms, stored 812.0ms` (each since the step before).
impl fmt::Display for Timing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, (name, since)) in self.steps().enumerate() {
            let sep = if i == 0 { "" } else { ", " };
            write!(f, "{sep}{name} {:.1}ms", since.as_secs_f64() * 1e3)?;
        }
        Ok(())
    }
}

tokio::task_local! {
    static CURRENT: RefCell<Timing>;
}

/// Runs a request's `work` (which began at `started`), and says where its time went.
pub async fn timed<T>(started: Instant, work: impl Future<Output = T>) -> (T, Timing) {
    CURRENT
        .scope(RefCell::new(Timing::new(started)), async {
            let out = work.await;
            (out, CURRENT.with(|t| *t.borrow()))
        })
        .await
}

/// Counts `waited` as spent waiting on others by the request being served, if any.
pub fn exclude(waited: Duration) {
    let _ = CURRENT.try_with(|t| t.borrow_mut().excluded += waited);
}

/// Marks `name` as passed by the request being served, if any.
pub fn step(name: &'static str) {
    let _ = CURRENT.try_with(|t| {
        let mut t = t.borrow_mut();
        if t.len < STEPS {
            let at = t.started.elapsed();
            let len = t.len;
            t.steps[len] = (name, at);
            t.len += 1;
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn waits_and_steps_are_kept_within_the_request_that_took_them() {
        exclude(Duration::from_secs(1)); // outside any request: counted nowhere
        step("nowhere");
        let ((), timing) = timed(Instant::now(), async {
            exclude(Duration::from_millis(10));
            step("admitted");
            tokio::time::sleep(Duration::from_millis(5)).await;
            exclude(Duration::from_millis(5));
            step("stored");
        })
        .await;
        assert_eq!(timing.excluded(), Duration::from_millis(15));
        let steps: Vec<_> = timing.steps().collect();
        assert_eq!(
            steps.iter().map(|(name, _)| *name).collect::<Vec<_>>(),
            ["admitted", "stored"]
        );
        assert!(steps[1].1 >= Duration::from_millis(5), "{steps:?}");
        assert!(timing.to_string().starts_with("admitted "), "{timing}");
        let ((), other) = timed(Instant::now(), async {}).await;
        assert_eq!(
            (other.excluded(), other.steps().count()),
            (Duration::ZERO, 0)
        );
    }

    #[tokio::test]
    async fn steps_beyond_the_bound_are_dropped() {
        let ((), timing) = timed(Instant::now(), async {
            for _ in 0..STEPS + 3 {
                step("again");
            }
        })
        .await;
        assert_eq!(timing.steps().count(), STEPS);
    }
}
