//! Reading fields out of an object's JSON for the printers: each accessor takes a JSON pointer
//! (`/status/phase`) and falls back to Go's zero value when the field is missing, null or of
//! another type, so printers never fail and never panic.

use super::duration::human_duration;
use jiff::Timestamp;
use serde_json::{Map, Value};

/// The string at `ptr`, `""` otherwise.
pub(super) fn text<'a>(v: &'a Value, ptr: &str) -> &'a str {
    v.pointer(ptr).and_then(Value::as_str).unwrap_or("")
}

/// The integer at `ptr`, if there is one.
pub(super) fn opt_int(v: &Value, ptr: &str) -> Option<i64> {
    v.pointer(ptr).and_then(Value::as_i64)
}

/// The integer at `ptr`, 0 otherwise.
pub(super) fn int(v: &Value, ptr: &str) -> i64 {
    opt_int(v, ptr).unwrap_or(0)
}

/// The boolean at `ptr`, if there is one.
pub(super) fn opt_bool(v: &Value, ptr: &str) -> Option<bool> {
    v.pointer(ptr).and_then(Value::as_bool)
}

/// The boolean at `ptr`, false otherwise.
pub(super) fn flag(v: &Value, ptr: &str) -> bool {
    opt_bool(v, ptr).unwrap_or(false)
}

/// The array at `ptr`, empty otherwise.
pub(super) fn list<'a>(v: &'a Value, ptr: &str) -> &'a [Value] {
    v.pointer(ptr)
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

/// The object at `ptr` (a Go pointer to a struct that is set), if there is one.
pub(super) fn object<'a>(v: &'a Value, ptr: &str) -> Option<&'a Map<String, Value>> {
    v.pointer(ptr).and_then(Value::as_object)
}

/// Whether `ptr` holds anything but null (a Go pointer field that is set).
pub(super) fn present(v: &Value, ptr: &str) -> bool {
    v.pointer(ptr).is_some_and(|x| !x.is_null())
}

/// Number of entries of the object or array at `ptr`, 0 otherwise.
pub(super) fn len(v: &Value, ptr: &str) -> usize {
    match v.pointer(ptr) {
        Some(Value::Object(m)) => m.len(),
        Some(Value::Array(a)) => a.len(),
        _ => 0,
    }
}

/// The timestamp at `ptr`; `None` when missing, unparsable or Go's zero time (`IsZero`).
pub(super) fn time(v: &Value, ptr: &str) -> Option<Timestamp> {
    let t: Timestamp = text(v, ptr).parse().ok()?;
    (t != zero_time()).then_some(t)
}

/// Go's zero `time.Time`, `0001-01-01T00:00:00Z`.
fn zero_time() -> Timestamp {
    Timestamp::from_second(-62_135_596_800).unwrap_or(Timestamp::MIN)
}

/// Upstream's `translateTimestampSince`: the time from `t` to `now`, `<unknown>` without `t`.
pub(super) fn since(t: Option<Timestamp>, now: Timestamp) -> String {
    t.map_or_else(
        || "<unknown>".to_string(),
        |t| human_duration(now.duration_since(t)),
    )
}

/// The AGE cell: time since `metadata.creationTimestamp`.
pub(super) fn age(v: &Value, now: Timestamp) -> Value {
    since(time(v, "/metadata/creationTimestamp"), now).into()
}

/// `metadata.name`.
pub(super) fn name(v: &Value) -> &str {
    text(v, "/metadata/name")
}

/// A string-or-number field as Go prints it (`intstr.IntOrString`, `resource.Quantity`).
pub(super) fn scalar(v: Option<&Value>) -> Option<String> {
    match v? {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// Keeps the later of `latest` and `t` in `latest` (`lastRestartDate.Before(&t)`).
pub(super) fn keep_latest(latest: &mut Option<Timestamp>, t: Option<Timestamp>) {
    if let Some(t) = t
        && latest.is_none_or(|l| l < t)
    {
        *latest = Some(t);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn mistyped_fields_read_as_zero_values() {
        let v = json!({"a": {"s": 1, "n": "1", "b": "true", "l": {}, "o": []}});
        assert_eq!(text(&v, "/a/s"), "");
        assert_eq!(int(&v, "/a/n"), 0);
        assert!(!flag(&v, "/a/b"));
        assert!(list(&v, "/a/l").is_empty());
        assert!(object(&v, "/a/o").is_none());
        assert_eq!(text(&json!(null), "/a"), "");
    }

    #[test]
    fn the_go_zero_time_and_garbage_count_as_no_time() {
        let v = json!({"z": "0001-01-01T00:00:00Z", "g": "soon", "t": "2024-01-01T00:00:00Z"});
        assert_eq!(time(&v, "/z"), None);
        assert_eq!(time(&v, "/g"), None);
        assert!(time(&v, "/t").is_some());
        let now: Timestamp = "2024-01-01T00:05:00Z".parse().unwrap();
        assert_eq!(since(time(&v, "/z"), now), "<unknown>");
        assert_eq!(since(time(&v, "/t"), now), "5m");
    }

    #[test]
    fn present_treats_null_as_unset() {
        let v = json!({"a": null, "b": 0});
        assert!(!present(&v, "/a"));
        assert!(present(&v, "/b"));
        assert!(!present(&v, "/c"));
    }
}
