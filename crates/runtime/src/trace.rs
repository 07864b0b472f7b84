//! Trace context for requests made on an object's behalf: a W3C `traceparent` header whose
//! trace ID is the object's UID (a UUID is the trace ID's 128 bits). The API server's lifecycle
//! trace puts such requests on that object's timeline (`skiff trace KIND NAME`); an API server
//! without it ignores the header, as kube-apiserver does with tracing off.

use std::sync::atomic::{AtomicU64, Ordering};

/// Span IDs: unique per process is enough to tell two requests of one trace apart.
static SPANS: AtomicU64 = AtomicU64::new(1);

/// `traceparent` for a request on behalf of the object with `uid`, sampled; `None` when `uid`
/// is not a UUID.
pub fn traceparent(uid: &str) -> Option<http::HeaderValue> {
    let id: String = uid.chars().filter(|c| *c != '-').collect();
    if id.len() != 32 || !id.bytes().all(|b| b.is_ascii_hexdigit()) || id.bytes().all(|b| b == b'0')
    {
        return None;
    }
    let span = SPANS.fetch_add(1, Ordering::Relaxed);
    http::HeaderValue::from_str(&format!("00-{}-{span:016x}-01", id.to_ascii_lowercase())).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_trace_id_is_the_uid_and_each_request_has_its_own_span() {
        let uid = "6E8BC430-9C3A-11D9-9669-0800200C9A66";
        let (a, b) = (traceparent(uid).unwrap(), traceparent(uid).unwrap());
        let a = a.to_str().unwrap();
        assert!(a.starts_with("00-6e8bc4309c3a11d996690800200c9a66-"), "{a}");
        assert!(a.ends_with("-01") && a.len() == 55, "{a}");
        assert_ne!(a, b.to_str().unwrap());
        assert_eq!(traceparent("not-a-uid"), None);
        assert_eq!(traceparent("00000000-0000-0000-0000-000000000000"), None);
    }
}
