//! `controller`: N workers reconciling the keys of a [`WorkQueue`], as client-go's controllers
//! run `processNextWorkItem`: success forgets the key's backoff (and may ask for another look
//! later), failure is logged here, once, and the key is queued again rate-limited. A reconcile
//! that panics is a failure of that key, not of the process.

use std::fmt::Display;
use std::panic::AssertUnwindSafe;
use std::time::Duration;

use futures::FutureExt;
use tokio::time::Instant;

use crate::workqueue::{QueueKey, WorkQueue};

/// What a successful reconcile asks for next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Nothing until the key is queued again.
    AwaitChange,
    /// Another look after this long (a deadline the controller tracks), whatever happens.
    RequeueAfter(Duration),
}

/// client-go's usual `--concurrent-*-syncs`.
pub const DEFAULT_WORKERS: usize = 5;

/// A named work queue and the workers that drain it.
pub struct Controller<T> {
    name: &'static str,
    queue: WorkQueue<T>,
    workers: usize,
}

impl<T: QueueKey> Controller<T> {
    /// A controller with client-go's default rate limits and [`DEFAULT_WORKERS`] workers;
    /// `name` labels its queue's metrics and its log lines.
    pub fn new(name: &'static str) -> Controller<T> {
        Controller {
            name,
            queue: WorkQueue::new(name),
            workers: DEFAULT_WORKERS,
        }
    }

    /// With `n` workers (at least one).
    pub fn workers(mut self, n: usize) -> Controller<T> {
        self.workers = n.max(1);
        self
    }

    /// The queue, for the informer handlers that feed it.
    pub fn queue(&self) -> &WorkQueue<T> {
        &self.queue
    }

    /// Runs the workers until the queue is shut down and every queued key is processed.
    pub async fn run<F, Fut, E>(self, reconcile: F)
    where
        F: Fn(T) -> Fut + Clone + Send + Sync + 'static,
        Fut: Future<Output = Result<Action, E>> + Send + 'static,
        E: Display + Send + 'static,
    {
        let mut workers = tokio::task::JoinSet::new();
        for _ in 0..self.workers {
            let queue = self.queue.clone();
            let reconcile = reconcile.clone();
            let name = self.name;
            workers.spawn(async move {
                while let Some(key) = queue.get().await {
                    process(name, &queue, &reconcile, key).await;
                }
            });
        }
        while workers.join_next().await.is_some() {}
    }
}

async fn process<T, F, Fut, E>(name: &str, queue: &WorkQueue<T>, reconcile: &F, key: T)
where
    T: QueueKey,
    F: Fn(T) -> Fut,
    Fut: Future<Output = Result<Action, E>>,
    E: Display,
{
    let started = Instant::now();
    let result = AssertUnwindSafe(reconcile(key.clone()))
        .catch_unwind()
        .await;
    queue
        .metrics()
        .work_duration
        .observe(started.elapsed().as_secs_f64());
    match result {
        Ok(Ok(action)) => {
            queue.forget(&key);
            if let Action::RequeueAfter(after) = action {
                queue.add_after(key.clone(), after);
            }
        }
        Ok(Err(error)) => {
            let failures = queue.failures(&key);
            tracing::warn!(controller = name, %key, failures, %error, "reconcile failed; will retry");
            queue.add_rate_limited(key.clone());
        }
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            tracing::error!(controller = name, %key, panic = what, "reconcile panicked; will retry");
            queue.add_rate_limited(key.clone());
        }
    }
    queue.done(&key);
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use parking_lot::Mutex;

    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("boom")]
    struct Boom;

    /// Each reconcile call: the key and when (ms after the start).
    type Calls = Arc<Mutex<Vec<(&'static str, u128)>>>;

    /// Runs `controller` with `reconcile` on its own task; returns the log of calls.
    fn start<F, Fut>(
        controller: Controller<&'static str>,
        reconcile: F,
    ) -> (WorkQueue<&'static str>, Calls, tokio::task::JoinHandle<()>)
    where
        F: Fn(&'static str) -> Fut + Clone + Send + Sync + 'static,
        Fut: Future<Output = Result<Action, Boom>> + Send + 'static,
    {
        let queue = controller.queue().clone();
        let calls = Arc::new(Mutex::new(Vec::new()));
        let start = Instant::now();
        let log = calls.clone();
        let handle = tokio::spawn(controller.run(move |key| {
            log.lock().push((key, start.elapsed().as_millis()));
            reconcile(key)
        }));
        (queue, calls, handle)
    }

    #[tokio::test(start_paused = true)]
    async fn a_key_is_never_reconciled_by_two_workers_at_once() {
        let running = Arc::new(AtomicUsize::new(0));
        let overlap = Arc::new(AtomicUsize::new(0));
        let (r, o) = (running.clone(), overlap.clone());
        let (queue, calls, handle) = start(Controller::new("dedup").workers(4), move |_| {
            let (r, o) = (r.clone(), o.clone());
            async move {
                if r.fetch_add(1, Ordering::SeqCst) > 0 {
                    o.fetch_add(1, Ordering::SeqCst);
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
                r.fetch_sub(1, Ordering::SeqCst);
                Ok(Action::AwaitChange)
            }
        });
        for _ in 0..3 {
            queue.add("a");
            tokio::time::sleep(Duration::from_millis(30)).await;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        queue.shut_down();
        handle.await.unwrap();
        assert_eq!(overlap.load(Ordering::SeqCst), 0);
        // the first run, then one more for the adds that came while it ran
        assert_eq!(*calls.lock(), [("a", 0), ("a", 100)]);
    }

    #[tokio::test(start_paused = true)]
    async fn failures_back_off_and_a_success_forgets() {
        let attempts = Arc::new(AtomicUsize::new(0));
        let a = attempts.clone();
        let (queue, calls, handle) = start(Controller::new("backoff"), move |_| {
            let n = a.fetch_add(1, Ordering::SeqCst);
            async move {
                if n < 3 {
                    Err(Boom)
                } else {
                    Ok(Action::AwaitChange)
                }
            }
        });
        queue.add("a");
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(*calls.lock(), [("a", 0), ("a", 5), ("a", 15), ("a", 35)]);
        assert_eq!(queue.failures(&"a"), 0, "the success forgot the failures");
        queue.shut_down();
        handle.await.unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn requeue_after_comes_back_and_a_panic_is_a_retried_failure() {
        let attempts = Arc::new(AtomicUsize::new(0));
        let a = attempts.clone();
        let (queue, calls, handle) = start(Controller::new("requeue"), move |key| {
            let n = a.fetch_add(1, Ordering::SeqCst);
            async move {
                match (key, n) {
                    ("p", 0) => panic!("malformed"),
                    ("p", _) => Ok(Action::AwaitChange),
                    _ => Ok(Action::RequeueAfter(Duration::from_secs(10))),
                }
            }
        });
        queue.add("p");
        tokio::time::sleep(Duration::from_millis(100)).await;
        queue.add("r");
        tokio::time::sleep(Duration::from_secs(25)).await;
        assert_eq!(
            *calls.lock(),
            [("p", 0), ("p", 5), ("r", 100), ("r", 10100), ("r", 20100)]
        );
        queue.shut_down();
        handle.await.unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn shutdown_drains_what_is_queued_and_waits_for_running_reconciles() {
        let finished = Arc::new(AtomicUsize::new(0));
        let f = finished.clone();
        let (queue, calls, handle) = start(Controller::new("drain").workers(1), move |_| {
            let f = f.clone();
            async move {
                tokio::time::sleep(Duration::from_secs(1)).await;
                f.fetch_add(1, Ordering::SeqCst);
                Ok(Action::AwaitChange)
            }
        });
        queue.add("a");
        queue.add("b");
        tokio::time::sleep(Duration::from_millis(10)).await;
        queue.shut_down();
        handle.await.unwrap();
        assert_eq!(finished.load(Ordering::SeqCst), 2);
        assert_eq!(calls.lock().len(), 2);
    }
}
