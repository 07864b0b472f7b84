//! What Skiff's scheduler writes on a `Binding` beyond upstream's: how long the pod waited in
//! the scheduling queue, as an annotation. The API server copies a Binding's annotations onto
//! the pod it binds (as upstream's `setPodHostAndAnnotations`), and its lifecycle trace reads
//! this one from the binding write to report the `queue_wait` stage.

use std::time::Duration;

/// The Binding's (and then the pod's) annotation: seconds in decimal (`"0.0123"`, to the
/// microsecond) from when the pod entered the scheduler's queue to when the attempt that bound
/// it was popped (time held by scheduling gates and backoff after earlier failed attempts
/// included).
pub const ANN_QUEUE_WAIT: &str = "scheduler.skiff.io/queue-wait-seconds";

/// `wait` as the annotation's value: decimal seconds to the microsecond, without trailing
/// zeros (`"0.0123"`, `"2"`).
pub fn format_queue_wait(wait: Duration) -> String {
    let text = format!("{}.{:06}", wait.as_secs(), wait.subsec_micros());
    text.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// The annotation's value in seconds; `None` unless it is a finite, non-negative number.
pub fn parse_queue_wait(value: &str) -> Option<f64> {
    value
        .trim()
        .parse::<f64>()
        .ok()
        .filter(|s| s.is_finite() && *s >= 0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_queue_wait_is_written_in_decimal_seconds_to_the_microsecond() {
        assert_eq!(format_queue_wait(Duration::from_micros(12_300)), "0.0123");
        assert_eq!(
            format_queue_wait(Duration::from_nanos(1_500_001_999)),
            "1.500001"
        );
        assert_eq!(format_queue_wait(Duration::from_secs(2)), "2");
        assert_eq!(format_queue_wait(Duration::ZERO), "0");
    }

    #[test]
    fn the_queue_wait_reads_back_and_nonsense_reads_as_nothing() {
        let written = format_queue_wait(Duration::from_micros(12_300));
        assert_eq!(parse_queue_wait(&written), Some(0.0123));
        assert_eq!(parse_queue_wait("0"), Some(0.0));
        for bad in ["", "-1", "NaN", "inf", "12ms"] {
            assert_eq!(parse_queue_wait(bad), None, "{bad:?}");
        }
    }
}
