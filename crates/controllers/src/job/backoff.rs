//! The delay before a Job creates pods again after pods failed (upstream's `backoffRecord`):
//! 10 s after the first failure since the last success, doubling with each further failure,
//! capped at six minutes (the cap the Job documentation gives), counted from the last failure.
//! A success after the last failure resets it. Kept in memory per Job, as upstream does.

use std::time::Duration;

use jiff::Timestamp;

/// The first delay (upstream's `DefaultJobPodFailureBackOff`).
pub const INITIAL: Duration = Duration::from_secs(10);
/// The longest delay.
pub const MAX: Duration = Duration::from_secs(6 * 60);

/// Failures of one Job's pods since its last success.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Record {
    pub failures_after_last_success: u32,
    pub last_failure: Option<Timestamp>,
}

impl Record {
    /// The record after pods newly finished: `succeeded` and `failed` are their finish times.
    pub fn next(self, succeeded: &[Timestamp], failed: &[Timestamp]) -> Record {
        let last_success = succeeded.iter().max().copied();
        let mut record = self;
        if let Some(success) = last_success
            && record.last_failure.is_none_or(|f| success > f)
        {
            record.failures_after_last_success = 0;
        }
        let counted = failed
            .iter()
            .filter(|f| last_success.is_none_or(|s| **f > s))
            .count();
        record.failures_after_last_success += u32::try_from(counted).unwrap_or(u32::MAX);
        if let Some(latest) = failed.iter().max().copied()
            && record.last_failure.is_none_or(|f| latest > f)
        {
            record.last_failure = Some(latest);
        }
        if let Some(success) = last_success
            && record.last_failure.is_some_and(|f| success > f)
        {
            record.failures_after_last_success = 0;
        }
        record
    }

    /// How long to wait at `now` before creating pods.
    pub fn remaining(&self, now: Timestamp) -> Duration {
        let (n, Some(last)) = (self.failures_after_last_success, self.last_failure) else {
            return Duration::ZERO;
        };
        if n == 0 {
            return Duration::ZERO;
        }
        let delay = INITIAL
            .checked_mul(1u32 << (n - 1).min(16))
            .unwrap_or(MAX)
            .min(MAX);
        let elapsed = Duration::try_from(now.duration_since(last)).unwrap_or(Duration::ZERO);
        delay.saturating_sub(elapsed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: i64) -> Timestamp {
        Timestamp::from_second(1_700_000_000 + secs).unwrap()
    }

    #[test]
    fn the_delay_doubles_from_ten_seconds_per_failure_and_caps_at_six_minutes() {
        let mut r = Record::default();
        assert_eq!(r.remaining(at(0)), Duration::ZERO);
        r = r.next(&[], &[at(0)]);
        assert_eq!(r.remaining(at(0)), Duration::from_secs(10));
        assert_eq!(r.remaining(at(4)), Duration::from_secs(6));
        assert_eq!(r.remaining(at(30)), Duration::ZERO);
        r = r.next(&[], &[at(100)]);
        assert_eq!(r.remaining(at(100)), Duration::from_secs(20));
        r = r.next(&[], &[at(200), at(201)]);
        assert_eq!(r.remaining(at(201)), Duration::from_secs(80));
        for _ in 0..20 {
            r = r.next(&[], &[at(300)]);
        }
        assert_eq!(r.remaining(at(300)), MAX);
    }

    #[test]
    fn a_success_after_the_last_failure_resets_the_delay() {
        let r = Record::default().next(&[], &[at(0), at(1)]);
        assert_eq!(r.failures_after_last_success, 2);
        let r = r.next(&[at(5)], &[]);
        assert_eq!(r.remaining(at(5)), Duration::ZERO);
        // a failure after that success counts from one again
        let r = r.next(&[], &[at(9)]);
        assert_eq!(r.remaining(at(9)), Duration::from_secs(10));
        // a success older than the last failure does not reset it
        let r = r.next(&[at(8)], &[]);
        assert_eq!(r.remaining(at(9)), Duration::from_secs(10));
    }
}
