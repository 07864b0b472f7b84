//! Per-key retry delays for reconcilers, as client-go's `ItemExponentialFailureRateLimiter`: a
//! key's n-th consecutive failure waits `base · 2ⁿ`, capped, and a success forgets the key.
//! The [`workqueue`](crate::workqueue) consults it for every rate-limited requeue.

use std::collections::HashMap;
use std::hash::Hash;
use std::time::Duration;

use parking_lot::Mutex;

/// client-go's default controller rate limiter's per-item bounds.
pub const BASE: Duration = Duration::from_millis(5);
pub const MAX: Duration = Duration::from_secs(1000);

/// Consecutive failures per key.
#[derive(Debug)]
pub struct ItemBackoff<K> {
    base: Duration,
    max: Duration,
    failures: Mutex<HashMap<K, u32>>,
}

impl<K: Eq + Hash> Default for ItemBackoff<K> {
    fn default() -> Self {
        ItemBackoff::new(BASE, MAX)
    }
}

impl<K: Eq + Hash> ItemBackoff<K> {
    pub fn new(base: Duration, max: Duration) -> ItemBackoff<K> {
        ItemBackoff {
            base,
            max,
            failures: Mutex::new(HashMap::new()),
        }
    }

    /// Records one more failure of `key` and returns how long to wait before retrying it.
    pub fn failed(&self, key: K) -> Duration {
        let mut failures = self.failures.lock();
        let n = failures.entry(key).or_insert(0);
        let delay = self
            .base
            .checked_mul(1u32.checked_shl(*n).unwrap_or(u32::MAX))
            .map_or(self.max, |d| d.min(self.max));
        *n = n.saturating_add(1);
        delay
    }

    /// Forgets `key`'s failures (after it reconciled successfully).
    pub fn forget(&self, key: &K) {
        self.failures.lock().remove(key);
    }

    /// How many times in a row `key` has failed.
    pub fn failures(&self, key: &K) -> u32 {
        self.failures.lock().get(key).copied().unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_double_per_failure_up_to_the_cap_and_reset_on_forget() {
        let backoff = ItemBackoff::new(Duration::from_millis(5), Duration::from_secs(1));
        let delays: Vec<_> = (0..10).map(|_| backoff.failed("a")).collect();
        assert_eq!(delays[0], Duration::from_millis(5));
        assert_eq!(delays[1], Duration::from_millis(10));
        assert_eq!(delays[7], Duration::from_millis(640));
        assert_eq!(delays[8], Duration::from_secs(1));
        assert_eq!(delays[9], Duration::from_secs(1));
        assert_eq!(
            backoff.failed("b"),
            Duration::from_millis(5),
            "keys are independent"
        );
        backoff.forget(&"a");
        assert_eq!(backoff.failures(&"a"), 0);
        assert_eq!(backoff.failed("a"), Duration::from_millis(5));
    }

    #[test]
    fn a_key_failing_forever_stays_at_the_cap() {
        let backoff = ItemBackoff::new(Duration::from_millis(5), Duration::from_secs(1000));
        for _ in 0..100 {
            backoff.failed(1);
        }
        assert_eq!(backoff.failed(1), Duration::from_secs(1000));
    }
}
