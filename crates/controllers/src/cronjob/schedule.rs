//! CronJob schedules: the standard five cron fields or `@yearly`…`@hourly` (croner, with
//! Vixie cron's day-of-month OR day-of-week), an optional `CRON_TZ=`/`TZ=` prefix or
//! `spec.timeZone` naming an IANA zone (jiff's database; UTC otherwise), and upstream's
//! `mostRecentScheduleTime`: which start times were missed since the last one, how many, and
//! when to look again.

use croner::Cron;
use croner::parser::{CronParser, Seconds, Year};
use jiff::Timestamp;
use jiff::tz::TimeZone;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Error {
    /// The schedule does not parse (upstream's `UnparseableSchedule`).
    #[error("{0}")]
    Unparseable(String),
    /// The time zone is unknown (upstream's `UnknownTimeZone`).
    #[error("unknown time zone {0}")]
    UnknownTimeZone(String),
    /// Two consecutive start times are under a second apart.
    #[error("time difference between two schedules is less than 1 second")]
    TooClose,
}

/// A parsed schedule in its time zone.
#[derive(Debug, Clone)]
pub struct Schedule {
    cron: Cron,
    zone: TimeZone,
}

/// Loads an IANA zone name as Go's `time.LoadLocation` would (`UTC` and `Local` included).
pub fn zone(name: &str) -> Result<TimeZone, Error> {
    match name {
        "" | "UTC" => Ok(TimeZone::UTC),
        "Local" => Ok(TimeZone::system()),
        _ => TimeZone::get(name).map_err(|_| Error::UnknownTimeZone(name.into())),
    }
}

impl Schedule {
    /// Parses `spec.schedule` with `spec.timeZone`.
    pub fn parse(schedule: &str, time_zone: Option<&str>) -> Result<Schedule, Error> {
        let mut text = schedule.trim();
        let mut zone_name = time_zone.map(str::to_string);
        for prefix in ["CRON_TZ=", "TZ="] {
            if let Some(rest) = text.strip_prefix(prefix) {
                let (name, rest) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
                zone_name = Some(name.to_string());
                text = rest.trim();
            }
        }
        let zone = zone(zone_name.as_deref().unwrap_or("UTC"))?;
        if text.starts_with("@every") {
            return Err(Error::Unparseable(format!(
                "unsupported schedule {text:?}: @every is not supported"
            )));
        }
        let cron = CronParser::builder()
            .seconds(Seconds::Disallowed)
            .year(Year::Disallowed)
            .build()
            .parse(text)
            .map_err(|e| Error::Unparseable(e.to_string()))?;
        Ok(Schedule { cron, zone })
    }

    /// The first start time strictly after `t`.
    pub fn next(&self, t: Timestamp) -> Option<Timestamp> {
        let z = t.to_zoned(self.zone.clone());
        self.cron
            .find_next_occurrence(&z, false)
            .ok()
            .map(|z| z.timestamp())
    }

    /// The last start time at or before `t`.
    fn previous(&self, t: Timestamp) -> Option<Timestamp> {
        let z = t.to_zoned(self.zone.clone());
        self.cron
            .find_previous_occurrence(&z, true)
            .ok()
            .map(|z| z.timestamp())
    }

    /// The zone start times are shown in.
    pub fn zone(&self) -> &TimeZone {
        &self.zone
    }
}

/// Upstream's `mostRecentScheduleTime`: start times after `earliest` up to `now` — the most
/// recent one and how many there were.
pub fn most_recent(
    schedule: &Schedule,
    earliest: Timestamp,
    now: Timestamp,
) -> Result<(Option<Timestamp>, u64), Error> {
    let Some(t1) = schedule.next(earliest) else {
        return Ok((None, 0));
    };
    if now < t1 {
        return Ok((None, 0));
    }
    let Some(t2) = schedule.next(t1) else {
        return Ok((Some(t1), 1));
    };
    if now < t2 {
        return Ok((Some(t1), 1));
    }
    let between = t2.duration_since(t1).as_secs();
    if between < 1 {
        return Err(Error::TooClose);
    }
    let elapsed = now.duration_since(t1).as_secs();
    let missed = (elapsed / between) as u64 + 1;
    Ok((schedule.previous(now).or(Some(t2)), missed))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    #[test]
    fn standard_fields_and_nicknames_give_the_next_start() {
        let every = Schedule::parse("* * * * *", None).unwrap();
        assert_eq!(
            every.next(at("2026-01-01T10:00:30Z")),
            Some(at("2026-01-01T10:01:00Z"))
        );
        assert_eq!(
            every.next(at("2026-01-01T10:01:00Z")),
            Some(at("2026-01-01T10:02:00Z"))
        );
        let hourly = Schedule::parse("@hourly", None).unwrap();
        assert_eq!(
            hourly.next(at("2026-01-01T10:00:00Z")),
            Some(at("2026-01-01T11:00:00Z"))
        );
        // day of month OR day of week, as cron has it: the 15th, or a Monday
        let either = Schedule::parse("0 0 15 * MON", None).unwrap();
        assert_eq!(
            either.next(at("2026-01-01T00:00:00Z")),
            Some(at("2026-01-05T00:00:00Z"))
        );
    }

    #[test]
    fn a_time_zone_moves_start_times_and_follows_daylight_saving() {
        let ny = Schedule::parse("0 9 * * *", Some("America/New_York")).unwrap();
        assert_eq!(
            ny.next(at("2026-01-10T00:00:00Z")),
            Some(at("2026-01-10T14:00:00Z"))
        );
        assert_eq!(
            ny.next(at("2026-07-10T00:00:00Z")),
            Some(at("2026-07-10T13:00:00Z"))
        );
        let prefixed = Schedule::parse("CRON_TZ=Asia/Tokyo 0 9 * * *", None).unwrap();
        assert_eq!(
            prefixed.next(at("2026-01-10T00:00:00Z")),
            Some(at("2026-01-11T00:00:00Z"))
        );
    }

    #[test]
    fn bad_schedules_and_zones_are_errors() {
        assert!(matches!(
            Schedule::parse("61 * * * *", None),
            Err(Error::Unparseable(_))
        ));
        assert!(matches!(
            Schedule::parse("* * * * * *", None),
            Err(Error::Unparseable(_))
        ));
        assert_eq!(
            Schedule::parse("* * * * *", Some("Mars/Olympus")).unwrap_err(),
            Error::UnknownTimeZone("Mars/Olympus".into())
        );
    }

    #[test]
    fn missed_start_times_are_counted_and_the_latest_one_given() {
        let every = Schedule::parse("*/5 * * * *", None).unwrap();
        let since = at("2026-01-01T10:00:00Z");
        assert_eq!(
            most_recent(&every, since, at("2026-01-01T10:04:00Z")).unwrap(),
            (None, 0)
        );
        assert_eq!(
            most_recent(&every, since, at("2026-01-01T10:06:00Z")).unwrap(),
            (Some(at("2026-01-01T10:05:00Z")), 1)
        );
        assert_eq!(
            most_recent(&every, since, at("2026-01-01T10:31:00Z")).unwrap(),
            (Some(at("2026-01-01T10:30:00Z")), 6)
        );
        let (_, missed) = most_recent(&every, since, at("2026-01-02T10:00:00Z")).unwrap();
        assert_eq!(missed, 288);
    }
}
