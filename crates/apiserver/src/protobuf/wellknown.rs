//! The messages whose Go types marshal themselves to JSON, read by hand and formatted as
//! upstream's JSON encoding does: metav1.Time (RFC 3339 seconds), MicroTime (microseconds),
//! Duration (Go duration string), RawExtension and FieldsV1 (raw JSON), resource.Quantity (its
//! string), intstr.IntOrString (number or string), and Go named string slices (ExtraValue).

use serde_json::Value;

use super::schema::Special;
use super::wire::{Decoder, Malformed, Reader, Wire, lossy};
use super::{Error, MAGIC};

/// `time.Time{}.Unix()`: the seconds Go writes for, and reads back as, the zero time.
const GO_ZERO_SECONDS: i64 = -62_135_596_800;

/// The JSON of a special message.
pub fn decode(special: Special, bytes: &[u8], d: &mut Decoder<'_>) -> Result<Value, Error> {
    match special {
        Special::Time => time(bytes, false),
        Special::MicroTime => time(bytes, true),
        Special::Duration => duration(bytes),
        Special::Json => return json(bytes, d),
        Special::Quantity => quantity(bytes),
        Special::IntOrString => int_or_string(bytes),
        Special::Array => array(bytes),
    }
    .map_err(|m| d.fail(m))
}

/// Calls `on` for each field; fields it does not read (returns false) are skipped.
fn read<'a>(
    bytes: &'a [u8],
    mut on: impl FnMut(u32, Wire, &mut Reader<'a>) -> Result<bool, Malformed>,
) -> Result<(), Malformed> {
    let mut r = Reader::new(bytes);
    while let Some((tag, wire)) = r.key()? {
        if !on(tag, wire, &mut r)? {
            r.skip(wire)?;
        }
    }
    Ok(())
}

fn varint(wire: Wire, r: &mut Reader<'_>) -> Result<u64, Malformed> {
    r.expect(wire, Wire::Varint)?;
    r.varint()
}

fn bytes<'a>(wire: Wire, r: &mut Reader<'a>) -> Result<&'a [u8], Malformed> {
    r.expect(wire, Wire::Len)?;
    r.bytes()
}

/// metav1.Time / MicroTime: `{seconds int64 = 1, nanos int32 = 2}`. An empty message is Go's
/// zero time (`null`); Time drops the nanoseconds when reading, MicroTime keeps microseconds.
fn time(b: &[u8], micro: bool) -> Result<Value, Malformed> {
    if b.is_empty() {
        return Ok(Value::Null);
    }
    let (mut seconds, mut nanos) = (0i64, 0i64);
    read(b, |tag, wire, r| {
        match tag {
            1 => seconds = varint(wire, r)? as i64,
            2 => nanos = i64::from(varint(wire, r)? as i32),
            _ => return Ok(false),
        }
        Ok(true)
    })?;
    if !micro {
        nanos = 0;
    }
    // time.Unix normalises nanoseconds outside [0, 1e9)
    let seconds = seconds
        .checked_add(nanos.div_euclid(1_000_000_000))
        .ok_or_else(|| out_of_range(seconds))?;
    let nanos = nanos.rem_euclid(1_000_000_000);
    if seconds == GO_ZERO_SECONDS && nanos == 0 {
        return Ok(Value::Null);
    }
    let t = jiff::Timestamp::from_second(seconds).map_err(|_| out_of_range(seconds))?;
    let dt = t.to_zoned(jiff::tz::TimeZone::UTC).datetime();
    if !(0..=9999).contains(&dt.year()) {
        // Go's Time.MarshalJSON refuses these too
        return Err(out_of_range(seconds));
    }
    let mut s = format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}",
        dt.year(),
        dt.month(),
        dt.day(),
        dt.hour(),
        dt.minute(),
        dt.second()
    );
    if micro {
        s.push_str(&format!(".{:06}", nanos / 1000));
    }
    s.push('Z');
    Ok(Value::String(s))
}

fn out_of_range(seconds: i64) -> Malformed {
    Malformed::Value(format!("time {seconds}s after the epoch is out of range"))
}

/// metav1.Duration: `{duration int64 = 1}` nanoseconds, as Go's `time.Duration.String()`.
fn duration(b: &[u8]) -> Result<Value, Malformed> {
    let mut ns = 0i64;
    read(b, |tag, wire, r| {
        if tag != 1 {
            return Ok(false);
        }
        ns = varint(wire, r)? as i64;
        Ok(true)
    })?;
    Ok(Value::String(go_duration(ns)))
}

/// Go's `time.Duration.String()`: `1h2m3.5s`, `1.5ms`, `0s`.
pub fn go_duration(ns: i64) -> String {
    fn frac(v: u64, prec: u32) -> String {
        let digits = format!("{v:0width$}", width = prec as usize);
        let digits = digits.trim_end_matches('0');
        if digits.is_empty() {
            String::new()
        } else {
            format!(".{digits}")
        }
    }
    if ns == 0 {
        return "0s".into();
    }
    let sign = if ns < 0 { "-" } else { "" };
    let u = ns.unsigned_abs();
    let body = if u < 1_000_000_000 {
        let (prec, unit) = if u < 1_000 {
            (0, "ns")
        } else if u < 1_000_000 {
            (3, "µs")
        } else {
            (6, "ms")
        };
        let scale = 10u64.pow(prec);
        format!("{}{}{unit}", u / scale, frac(u % scale, prec))
    } else {
        let (secs, f) = (u / 1_000_000_000, frac(u % 1_000_000_000, 9));
        let (h, m, s) = (secs / 3600, secs / 60 % 60, secs % 60);
        match (h, m) {
            (0, 0) => format!("{s}{f}s"),
            (0, _) => format!("{m}m{s}{f}s"),
            _ => format!("{h}h{m}m{s}{f}s"),
        }
    };
    format!("{sign}{body}")
}

/// RawExtension / FieldsV1: `{raw bytes = 1}` holding JSON (`null` when absent or empty), or
/// for a RawExtension an embedded protobuf object with its own `k8s\0` envelope.
fn json(b: &[u8], d: &mut Decoder<'_>) -> Result<Value, Error> {
    let mut raw: &[u8] = &[];
    read(b, |tag, wire, r| {
        if tag != 1 {
            return Ok(false);
        }
        raw = bytes(wire, r)?;
        Ok(true)
    })
    .map_err(|m| d.fail(m))?;
    if raw.is_empty() {
        return Ok(Value::Null);
    }
    if raw.starts_with(MAGIC) {
        return super::decode_object(raw, d);
    }
    serde_json::from_slice(raw)
        .map_err(|e| d.fail(Malformed::Value(format!("raw bytes are not JSON: {e}"))))
}

/// resource.Quantity: `{string = 1}`; Go's zero Quantity prints as `0`.
fn quantity(b: &[u8]) -> Result<Value, Malformed> {
    let mut s = String::from("0");
    read(b, |tag, wire, r| {
        if tag != 1 {
            return Ok(false);
        }
        s = lossy(bytes(wire, r)?);
        Ok(true)
    })?;
    Ok(Value::String(s))
}

/// intstr.IntOrString: `{type int64 = 1, intVal int32 = 2, strVal string = 3}`.
fn int_or_string(b: &[u8]) -> Result<Value, Malformed> {
    let (mut ty, mut int_val, mut str_val) = (0i64, 0i32, String::new());
    read(b, |tag, wire, r| {
        match tag {
            1 => ty = varint(wire, r)? as i64,
            2 => int_val = varint(wire, r)? as i32,
            3 => str_val = lossy(bytes(wire, r)?),
            _ => return Ok(false),
        }
        Ok(true)
    })?;
    match ty {
        0 => Ok(Value::from(int_val)),
        1 => Ok(Value::String(str_val)),
        other => Err(Malformed::Value(format!(
            "IntOrString type {other} is neither 0 (int) nor 1 (string)"
        ))),
    }
}

/// A Go named `[]string` (ExtraValue, Verbs): `{repeated string items = 1}`; nil is `null`.
fn array(b: &[u8]) -> Result<Value, Malformed> {
    let mut items = Vec::new();
    read(b, |tag, wire, r| {
        if tag != 1 {
            return Ok(false);
        }
        items.push(Value::String(lossy(bytes(wire, r)?)));
        Ok(true)
    })?;
    Ok(if items.is_empty() {
        Value::Null
    } else {
        Value::Array(items)
    })
}

/// The message bytes of a special type from its JSON (the inverse of [`decode`]).
pub fn encode(special: Special, v: &Value, out: &mut Vec<u8>) -> Result<(), Malformed> {
    use super::encode::{expected, length_delimited, varint_field};
    let text = || v.as_str().ok_or_else(|| expected("a string", v));
    match special {
        Special::Time | Special::MicroTime => {
            let t: jiff::Timestamp = text()?
                .parse()
                .map_err(|e| Malformed::Value(format!("not an RFC 3339 time: {e}")))?;
            varint_field(1, t.as_second() as u64, out);
            let nanos = t.subsec_nanosecond();
            if special == Special::MicroTime && nanos != 0 {
                varint_field(2, i64::from(nanos) as u64, out);
            }
        }
        Special::Duration => {
            let ns = skiff_apimachinery::duration::parse(text()?).map_err(Malformed::Value)?;
            varint_field(1, ns as u64, out);
        }
        Special::Json => length_delimited(1, &super::order::to_vec(v), out),
        Special::Quantity => match v {
            Value::Number(n) => length_delimited(1, n.to_string().as_bytes(), out),
            _ => length_delimited(1, text()?.as_bytes(), out),
        },
        Special::IntOrString => match v {
            Value::String(s) => {
                varint_field(1, 1, out);
                length_delimited(3, s.as_bytes(), out);
            }
            _ => {
                let n = v
                    .as_i64()
                    .and_then(|n| i32::try_from(n).ok())
                    .ok_or_else(|| expected("an int32 or a string", v))?;
                varint_field(1, 0, out);
                varint_field(2, i64::from(n) as u64, out);
            }
        },
        Special::Array => {
            let items = v.as_array().ok_or_else(|| expected("an array", v))?;
            for item in items {
                let s = item.as_str().ok_or_else(|| expected("a string", item))?;
                length_delimited(1, s.as_bytes(), out);
            }
        }
    }
    Ok(())
}
