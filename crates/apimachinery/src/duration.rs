//! Go's `time.Duration` text: [`parse`] reads it as `time.ParseDuration` does (`300ms`,
//! `1h2m3.5s`, `-1.5h`, `0`), with its error messages, in nanoseconds. Hand-written: no
//! maintained crate reads Go's exact grammar, and upstream's messages name it.

use crate::validation::gofmt::quote;

/// Nanoseconds per unit, as Go names them.
fn unit(name: &str) -> Option<u64> {
    Some(match name {
        "ns" => 1,
        "us" | "µs" | "μs" => 1_000,
        "ms" => 1_000_000,
        "s" => 1_000_000_000,
        "m" => 60_000_000_000,
        "h" => 3_600_000_000_000,
        _ => return None,
    })
}

/// `[-+]?([0-9]*(\.[0-9]*)?[a-z]+)+` (or `0`) in nanoseconds.
pub fn parse(orig: &str) -> Result<i64, String> {
    let invalid = || format!("time: invalid duration {}", quote(orig));
    let negative = orig.starts_with('-');
    let mut s = orig.strip_prefix(['+', '-']).unwrap_or(orig);
    if s == "0" {
        return Ok(0);
    }
    if s.is_empty() {
        return Err(invalid());
    }
    let mut total: u64 = 0;
    while !s.is_empty() {
        if !s.starts_with(|c: char| c == '.' || c.is_ascii_digit()) {
            return Err(invalid());
        }
        let int_len = s.bytes().take_while(u8::is_ascii_digit).count();
        let whole = &s[..int_len];
        s = &s[int_len..];
        let mut fraction = "";
        if let Some(rest) = s.strip_prefix('.') {
            let len = rest.bytes().take_while(u8::is_ascii_digit).count();
            fraction = &rest[..len];
            s = &rest[len..];
        }
        if whole.is_empty() && fraction.is_empty() {
            return Err(invalid());
        }
        let unit_len = s
            .find(|c: char| c == '.' || c.is_ascii_digit())
            .unwrap_or(s.len());
        if unit_len == 0 {
            return Err(format!("time: missing unit in duration {}", quote(orig)));
        }
        let Some(per) = unit(&s[..unit_len]) else {
            return Err(format!(
                "time: unknown unit {} in duration {}",
                quote(&s[..unit_len]),
                quote(orig)
            ));
        };
        s = &s[unit_len..];
        let whole: u64 = if whole.is_empty() {
            0
        } else {
            whole.parse().map_err(|_| invalid())?
        };
        // the fraction's digits beyond nanosecond precision do not count, as in Go
        let mut part = 0u64;
        let mut scale = 1u64;
        for d in fraction.bytes() {
            if scale > u64::MAX / 10 / per.max(1) {
                break;
            }
            part = part * 10 + u64::from(d - b'0');
            scale *= 10;
        }
        total = whole
            .checked_mul(per)
            .and_then(|v| v.checked_add(part * per / scale))
            .and_then(|v| total.checked_add(v))
            .ok_or_else(invalid)?;
    }
    match (negative, i64::try_from(total)) {
        (false, Ok(n)) => Ok(n),
        (true, Ok(n)) => Ok(-n),
        (true, Err(_)) if total == 1 << 63 => Ok(i64::MIN),
        _ => Err(invalid()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_as_go_reads_them() {
        assert_eq!(parse("0"), Ok(0));
        assert_eq!(parse("300ms"), Ok(300_000_000));
        assert_eq!(parse("1h2m3.5s"), Ok(3_723_500_000_000));
        assert_eq!(parse("-1.5h"), Ok(-5_400_000_000_000));
        assert_eq!(parse("+.5us"), Ok(500));
        assert_eq!(parse("1µs1ns"), Ok(1_001));
        assert_eq!(parse("2562047h47m16.854775807s"), Ok(i64::MAX));
    }

    #[test]
    fn bad_durations_get_gos_messages() {
        assert_eq!(parse(""), Err(r#"time: invalid duration """#.into()));
        assert_eq!(
            parse("10"),
            Err(r#"time: missing unit in duration "10""#.into())
        );
        assert_eq!(
            parse("5d"),
            Err(r#"time: unknown unit "d" in duration "5d""#.into())
        );
        assert_eq!(parse(".s"), Err(r#"time: invalid duration ".s""#.into()));
        assert_eq!(
            parse("9999999999h"),
            Err(r#"time: invalid duration "9999999999h""#.into())
        );
    }
}
