//! Cron schedules as CronJob validation reads them: robfig/cron v3's standard parser (five
//! fields of values, ranges, steps, lists and month or weekday names; `@yearly` … `@hourly`
//! and `@every <duration>`; an optional `TZ=`/`CRON_TZ=` prefix), answering with its error
//! texts, and Go's `time.LoadLocation` for time zone names.

/// One field's allowed values and names (robfig's `bounds`).
struct Bounds {
    min: i64,
    max: i64,
    names: &'static [&'static str],
}

const MINUTES: Bounds = Bounds {
    min: 0,
    max: 59,
    names: &[],
};
const HOURS: Bounds = Bounds {
    min: 0,
    max: 23,
    names: &[],
};
const DAYS_OF_MONTH: Bounds = Bounds {
    min: 1,
    max: 31,
    names: &[],
};
/// Month names map to 1–12.
const MONTHS: Bounds = Bounds {
    min: 1,
    max: 12,
    names: &[
        "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
    ],
};
/// Weekday names map to 0–6.
const DAYS_OF_WEEK: Bounds = Bounds {
    min: 0,
    max: 6,
    names: &["sun", "mon", "tue", "wed", "thu", "fri", "sat"],
};

const DESCRIPTORS: [&str; 7] = [
    "@yearly",
    "@annually",
    "@monthly",
    "@weekly",
    "@daily",
    "@midnight",
    "@hourly",
];

/// Go's `%q` of an ordinary string.
fn quote(s: &str) -> String {
    format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
}

/// Go's `time.LoadLocation`: `""` and `UTC` are UTC, `Local` the host's zone, anything else a
/// name in the time zone database; the error is Go's.
pub fn load_location(name: &str) -> Result<(), String> {
    if matches!(name, "" | "UTC" | "Local") {
        return Ok(());
    }
    if name.contains("..") || name.starts_with('/') || name.starts_with('\\') {
        return Err("time: invalid location name".into());
    }
    jiff::tz::TimeZone::get(name)
        .map(drop)
        .map_err(|_| format!("unknown time zone {name}"))
}

/// Parses `spec` as robfig/cron's `ParseStandard` does; `Err` holds its message.
pub fn parse_standard(spec: &str) -> Result<(), String> {
    if spec.is_empty() {
        return Err("empty spec string".into());
    }
    let mut spec = spec;
    if spec.starts_with("TZ=") || spec.starts_with("CRON_TZ=") {
        let eq = spec.find('=').unwrap_or(0);
        // robfig panics without a space after the zone; refusing is kinder.
        let end = spec.find(' ').unwrap_or(spec.len());
        let zone = &spec[eq + 1..end];
        load_location(zone).map_err(|e| format!("provided bad location {zone}: {e}"))?;
        spec = spec[end..].trim();
    }
    if spec.starts_with('@') {
        return parse_descriptor(spec);
    }
    let fields: Vec<&str> = spec.split_whitespace().collect();
    if fields.len() != 5 {
        return Err(format!(
            "expected exactly 5 fields, found {}: [{}]",
            fields.len(),
            fields.join(" ")
        ));
    }
    let bounds = [MINUTES, HOURS, DAYS_OF_MONTH, MONTHS, DAYS_OF_WEEK];
    for (field, bounds) in fields.iter().zip(&bounds) {
        for range in field.split(',').filter(|r| !r.is_empty()) {
            parse_range(range, bounds)?;
        }
    }
    Ok(())
}

fn parse_descriptor(spec: &str) -> Result<(), String> {
    if DESCRIPTORS.contains(&spec) {
        return Ok(());
    }
    match spec.strip_prefix("@every ") {
        Some(duration) => skiff_apimachinery::duration::parse(duration)
            .map(drop)
            .map_err(|e| format!("failed to parse duration {spec}: {e}")),
        None => Err(format!("unrecognized descriptor: {spec}")),
    }
}

/// robfig's `mustParseInt`: Go's `strconv.Atoi`, then no negatives.
fn parse_int(expr: &str) -> Result<i64, String> {
    let digits = expr.strip_prefix(['+', '-']).unwrap_or(expr);
    let err = |why: &str| {
        format!(
            "failed to parse int from {expr}: strconv.Atoi: parsing {}: {why}",
            quote(expr)
        )
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(err("invalid syntax"));
    }
    let n: i64 = expr.parse().map_err(|_| err("value out of range"))?;
    if n < 0 {
        return Err(format!("negative number ({n}) not allowed: {expr}"));
    }
    Ok(n)
}

fn parse_int_or_name(expr: &str, bounds: &Bounds) -> Result<i64, String> {
    let lower = expr.to_lowercase();
    match bounds.names.iter().position(|n| *n == lower) {
        Some(i) => Ok(i as i64 + bounds.min),
        None => parse_int(expr),
    }
}

/// robfig's `getRange`: `*`, `?`, `a`, `a-b`, each optionally `/step`.
fn parse_range(expr: &str, bounds: &Bounds) -> Result<(), String> {
    let range_and_step: Vec<&str> = expr.split('/').collect();
    let low_and_high: Vec<&str> = range_and_step[0].split('-').collect();
    let single = low_and_high.len() == 1;
    let (start, mut end) = if matches!(low_and_high[0], "*" | "?") {
        (bounds.min, bounds.max)
    } else {
        let start = parse_int_or_name(low_and_high[0], bounds)?;
        match low_and_high.len() {
            1 => (start, start),
            2 => (start, parse_int_or_name(low_and_high[1], bounds)?),
            _ => return Err(format!("too many hyphens: {expr}")),
        }
    };
    let step = match range_and_step.len() {
        1 => 1,
        2 => {
            let step = parse_int(range_and_step[1])?;
            if single {
                end = bounds.max;
            }
            step
        }
        _ => return Err(format!("too many slashes: {expr}")),
    };
    if start < bounds.min {
        return Err(format!(
            "beginning of range ({start}) below minimum ({}): {expr}",
            bounds.min
        ));
    }
    if end > bounds.max {
        return Err(format!(
            "end of range ({end}) above maximum ({}): {expr}",
            bounds.max
        ));
    }
    if start > end {
        return Err(format!(
            "beginning of range ({start}) beyond end of range ({end}): {expr}"
        ));
    }
    if step == 0 {
        return Err(format!("step of range should be a positive number: {expr}"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn standard_schedules_and_descriptors_parse() {
        for spec in [
            "*/5 * * * *",
            "0 0 1 1 *",
            "15,45 9-17 * jan-jun MON-fri",
            "5/10 * ? * sun",
            "@hourly",
            "@every 1h30m",
            "TZ=UTC 0 * * * *",
            "CRON_TZ=Europe/Berlin @daily",
        ] {
            assert_eq!(parse_standard(spec), Ok(()), "{spec}");
        }
    }

    #[test]
    fn malformed_schedules_fail_with_robfigs_messages() {
        let cases = [
            ("", "empty spec string"),
            ("* * *", "expected exactly 5 fields, found 3: [* * *]"),
            ("60 * * * *", "end of range (60) above maximum (59): 60"),
            ("* * 0 * *", "beginning of range (0) below minimum (1): 0"),
            ("* * * * 7", "end of range (7) above maximum (6): 7"),
            (
                "5-1 * * * *",
                "beginning of range (5) beyond end of range (1): 5-1",
            ),
            (
                "*/0 * * * *",
                "step of range should be a positive number: */0",
            ),
            ("1-2-3 * * * *", "too many hyphens: 1-2-3"),
            ("*/2/3 * * * *", "too many slashes: */2/3"),
            (
                "x * * * *",
                "failed to parse int from x: strconv.Atoi: parsing \"x\": invalid syntax",
            ),
            ("@fortnightly", "unrecognized descriptor: @fortnightly"),
            (
                "@every 5",
                "failed to parse duration @every 5: time: missing unit in duration \"5\"",
            ),
            (
                "@every 5y",
                "failed to parse duration @every 5y: time: unknown unit \"y\" in duration \"5y\"",
            ),
            (
                "TZ=Mars/Olympus * * * * *",
                "provided bad location Mars/Olympus: unknown time zone Mars/Olympus",
            ),
        ];
        for (spec, want) in cases {
            assert_eq!(parse_standard(spec), Err(want.to_string()), "{spec}");
        }
    }
}
