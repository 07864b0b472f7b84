//! `expectations`: upstream's `UIDTrackingControllerExpectations` — how many creations and which
//! deletions a controller has issued for one object and not yet seen through its informer. Until
//! they are observed (or [`TIMEOUT`] passes) the controller does not act on that object again, so
//! a lagging watch never makes it create or delete twice. Time is a parameter
//! (`tokio::time::Instant`), so tests drive it with a paused clock.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::time::Instant;

/// Upstream's `ExpectationsTimeout`: unobserved expectations older than this are ignored.
pub const TIMEOUT: Duration = Duration::from_secs(5 * 60);

#[derive(Debug)]
struct Expected {
    adds: i64,
    /// Keys (`namespace/name`) of the pods whose deletion is still to be observed.
    deletes: HashSet<String>,
    set_at: Instant,
}

/// Expectations per controller key (`namespace/name`). The mutex guards only the map; no await
/// happens while it is held.
#[derive(Debug, Default)]
pub struct Expectations {
    map: Mutex<HashMap<String, Expected>>,
}

impl Expectations {
    /// Whether `key` may be acted on: nothing is outstanding, or what is has expired.
    pub fn satisfied(&self, key: &str, now: Instant) -> bool {
        match self.map.lock().get(key) {
            None => true,
            Some(e) => {
                (e.adds <= 0 && e.deletes.is_empty())
                    || now.saturating_duration_since(e.set_at) > TIMEOUT
            }
        }
    }

    /// How long until `key`'s outstanding expectations expire (`None` when satisfied).
    pub fn expires_in(&self, key: &str, now: Instant) -> Option<Duration> {
        if self.satisfied(key, now) {
            return None;
        }
        let set_at = self.map.lock().get(key)?.set_at;
        Some(TIMEOUT.saturating_sub(now.saturating_duration_since(set_at)))
    }

    /// Records that `count` creations were just issued for `key` (replacing what was expected).
    pub fn expect_creations(&self, key: &str, count: usize, now: Instant) {
        self.map.lock().insert(
            key.to_string(),
            Expected {
                adds: count as i64,
                deletes: HashSet::new(),
                set_at: now,
            },
        );
    }

    /// Records that the pods `pod_keys` were just asked to be deleted for `key`.
    pub fn expect_deletions(&self, key: &str, pod_keys: Vec<String>, now: Instant) {
        self.map.lock().insert(
            key.to_string(),
            Expected {
                adds: 0,
                deletes: pod_keys.into_iter().collect(),
                set_at: now,
            },
        );
    }

    /// One creation for `key` was seen (or will never happen: it failed or was skipped).
    pub fn creation_observed(&self, key: &str) {
        if let Some(e) = self.map.lock().get_mut(key) {
            e.adds -= 1;
        }
    }

    /// The deletion of `pod_key` for `key` was seen (or failed); unknown pods change nothing.
    pub fn deletion_observed(&self, key: &str, pod_key: &str) {
        if let Some(e) = self.map.lock().get_mut(key) {
            e.deletes.remove(pod_key);
        }
    }

    /// Forgets `key` (its object was deleted).
    pub fn forget(&self, key: &str) {
        self.map.lock().remove(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn creations_block_until_each_is_observed() {
        let e = Expectations::default();
        let now = Instant::now();
        assert!(e.satisfied("ns/a", now), "nothing expected yet");
        e.expect_creations("ns/a", 2, now);
        assert!(!e.satisfied("ns/a", now));
        e.creation_observed("ns/a");
        assert!(!e.satisfied("ns/a", now));
        e.creation_observed("ns/a");
        assert!(e.satisfied("ns/a", now));
        assert!(e.satisfied("ns/b", now), "keys are independent");
    }

    #[test]
    fn deletions_are_tracked_by_pod_and_observing_one_twice_counts_once() {
        let e = Expectations::default();
        let now = Instant::now();
        e.expect_deletions("ns/a", vec!["ns/p1".into(), "ns/p2".into()], now);
        e.deletion_observed("ns/a", "ns/p1");
        e.deletion_observed("ns/a", "ns/p1");
        e.deletion_observed("ns/a", "ns/other");
        assert!(!e.satisfied("ns/a", now));
        e.deletion_observed("ns/a", "ns/p2");
        assert!(e.satisfied("ns/a", now));
    }

    #[test]
    fn unobserved_expectations_expire_after_five_minutes() {
        let e = Expectations::default();
        let now = Instant::now();
        e.expect_creations("ns/a", 1, now);
        assert_eq!(e.expires_in("ns/a", now), Some(TIMEOUT));
        assert!(!e.satisfied("ns/a", now + TIMEOUT));
        assert!(e.satisfied("ns/a", now + TIMEOUT + Duration::from_millis(1)));
        e.forget("ns/a");
        assert_eq!(e.expires_in("ns/a", now), None);
    }
}
