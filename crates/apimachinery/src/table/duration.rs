//! [`human_duration`]: upstream's `duration.HumanDuration` (apimachinery `pkg/util/duration`),
//! the 2–3 significant figures kubectl shows in AGE, DURATION and RESTARTS cells.

use jiff::SignedDuration;

const SECOND: i64 = 1_000_000_000;
const MINUTE: i64 = 60 * SECOND;
const HOUR: i64 = 60 * MINUTE;

/// `d` the way upstream's `HumanDuration` writes it: `0s`…`119s`, `2m3s`…`9m59s`, `10m`…`179m`,
/// `3h4m`…`7h59m`, `8h`…`47h`, `2d3h`…`7d23h`, `8d`…`729d`, `2y12d`…`7y364d`, then `8y`.
///
/// Up to a second in the future reads `0s` (clock skew); further is `<invalid>`. Like Go's
/// `time.Duration`, `d` saturates at about ±292 years.
pub fn human_duration(d: SignedDuration) -> String {
    let nanos = d.as_nanos().clamp(i64::MIN.into(), i64::MAX.into()) as i64;
    let seconds = nanos / SECOND;
    if seconds < -1 {
        return "<invalid>".to_string();
    }
    if seconds < 0 {
        return "0s".to_string();
    }
    if seconds < 2 * 60 {
        return format!("{seconds}s");
    }
    let minutes = nanos / MINUTE;
    if minutes < 10 {
        return with_remainder(minutes, "m", seconds % 60, "s");
    }
    if minutes < 3 * 60 {
        return format!("{minutes}m");
    }
    let hours = nanos / HOUR;
    if hours < 8 {
        return with_remainder(hours, "h", minutes % 60, "m");
    }
    if hours < 48 {
        return format!("{hours}h");
    }
    let days = hours / 24;
    if hours < 24 * 8 {
        return with_remainder(days, "d", hours % 24, "h");
    }
    if hours < 24 * 365 * 2 {
        return format!("{days}d");
    }
    let years = days / 365;
    if hours < 24 * 365 * 8 {
        return with_remainder(years, "y", days % 365, "d");
    }
    format!("{years}y")
}

/// `3h4m`, or `3h` when the smaller unit is zero.
fn with_remainder(big: i64, big_unit: &str, small: i64, small_unit: &str) -> String {
    if small == 0 {
        format!("{big}{big_unit}")
    } else {
        format!("{big}{big_unit}{small}{small_unit}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(s: i64) -> SignedDuration {
        SignedDuration::from_secs(s)
    }

    const M: i64 = 60;
    const H: i64 = 60 * M;
    const D: i64 = 24 * H;

    #[test]
    fn human_duration_matches_upstream_at_every_boundary() {
        let cases = [
            (-2, "<invalid>"),
            (-1, "0s"),
            (0, "0s"),
            (1, "1s"),
            (59, "59s"),
            (119, "119s"),
            (2 * M, "2m"),
            (2 * M + 3, "2m3s"),
            (9 * M + 59, "9m59s"),
            (10 * M, "10m"),
            (10 * M + 59, "10m"),
            (179 * M + 59, "179m"),
            (3 * H, "3h"),
            (3 * H + 4 * M, "3h4m"),
            (7 * H + 59 * M + 59, "7h59m"),
            (8 * H, "8h"),
            (47 * H + 59 * M, "47h"),
            (2 * D, "2d"),
            (2 * D + 3 * H, "2d3h"),
            (7 * D + 23 * H + 59 * M, "7d23h"),
            (8 * D, "8d"),
            (400 * D, "400d"),
            (729 * D + 23 * H, "729d"),
            (730 * D, "2y"),
            (742 * D, "2y12d"),
            (3 * 365 * D + 12 * D, "3y12d"),
            (8 * 365 * D - D, "7y364d"),
            (8 * 365 * D, "8y"),
            (100 * 365 * D, "100y"),
        ];
        for (s, want) in cases {
            assert_eq!(human_duration(secs(s)), want, "{s}s");
        }
    }

    #[test]
    fn a_second_and_a_half_in_the_future_is_still_now() {
        assert_eq!(human_duration(SignedDuration::from_millis(-1500)), "0s");
        assert_eq!(
            human_duration(SignedDuration::from_millis(-2000)),
            "<invalid>"
        );
        assert_eq!(human_duration(SignedDuration::from_millis(1999)), "1s");
    }

    #[test]
    fn durations_beyond_go_range_saturate_like_go() {
        assert_eq!(human_duration(SignedDuration::MAX), "292y");
        assert_eq!(human_duration(SignedDuration::MIN), "<invalid>");
    }
}
