//! Overload protection, as upstream's generic filters: the in-flight limits
//! (`--max-requests-inflight`, `--max-mutating-requests-inflight`: beyond them 429 with
//! `Retry-After: 1`) and the request deadline (`--request-timeout`, shortened by a request's
//! `timeout=` query parameter: past it 504). Long-running requests (watches, proxy, and the
//! `attach`, `exec`, `log`, `portforward` and `proxy` subresources) are neither counted nor
//! timed, as upstream's `BasicLongRunningRequestCheck`.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::authn::UserInfo;
use crate::error::ApiError;
use crate::request::RequestInfo;

/// Upstream's `--max-requests-inflight` default.
pub const DEFAULT_MAX_READONLY: usize = 400;
/// Upstream's `--max-mutating-requests-inflight` default.
pub const DEFAULT_MAX_MUTATING: usize = 200;
/// Upstream's `--request-timeout` default.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(60);
/// Cores from which the in-flight limits are upstream's defaults; below, they are that share of
/// them per core (see [`default_limits`]).
pub const UPSTREAM_LIMITS_CORES: usize = 6;

/// The in-flight limits (read-only, mutating) a server on `cores` cores takes when not told:
/// upstream's 400 and 200 from [`UPSTREAM_LIMITS_CORES`] cores, a sixth of them per core below
/// (133 and 66 on two cores).
///
/// Why not upstream's on every machine: the limits bound how many requests execute at once, and
/// requests executing at once share the cores. With 600 on two saturated cores, 300–400
/// requests executed at a time in the 20,000-pod scale run, and each waited its turn for a core
/// after every step (the store's answer, the body's arrival): mutating requests took 1–2 s at
/// p99 there, against 0.6 s with 200 (`BENCHMARKS.md`, session 56). Requests beyond the limit
/// wait in API Priority and Fairness's queues instead, fairly, and that wait is not part of
/// upstream's SLI (`apiserver_request_sli_duration_seconds`).
pub fn default_limits(cores: usize) -> (usize, usize) {
    let cores = cores.clamp(1, UPSTREAM_LIMITS_CORES);
    (
        DEFAULT_MAX_READONLY * cores / UPSTREAM_LIMITS_CORES,
        DEFAULT_MAX_MUTATING * cores / UPSTREAM_LIMITS_CORES,
    )
}

/// Members of this group are never refused for load (upstream: "a system:master is so powerful
/// that they should always get an answer").
const PRIVILEGED_GROUP: &str = "system:masters";

/// The in-flight limits and the deadline of non-long-running requests.
#[derive(Debug, Clone)]
pub struct Limits {
    /// `None` when the limit is 0 (unlimited, as upstream).
    readonly: Option<Arc<Semaphore>>,
    mutating: Option<Arc<Semaphore>>,
    max_readonly: usize,
    max_mutating: usize,
    pub request_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self::new(
            DEFAULT_MAX_READONLY,
            DEFAULT_MAX_MUTATING,
            DEFAULT_REQUEST_TIMEOUT,
        )
    }
}

/// What the limits let a request do.
#[derive(Debug)]
pub enum Admit {
    /// Long-running or exempt: neither counted nor timed by this filter.
    Uncounted,
    /// Counted until the permit drops (with the response).
    Counted(OwnedSemaphorePermit),
}

impl Limits {
    pub fn new(max_readonly: usize, max_mutating: usize, request_timeout: Duration) -> Self {
        let pool = |n: usize| (n > 0).then(|| Arc::new(Semaphore::new(n)));
        Self {
            readonly: pool(max_readonly),
            mutating: pool(max_mutating),
            max_readonly,
            max_mutating,
            request_timeout,
        }
    }

    /// The server's concurrency limit under API Priority and Fairness: the sum of the two
    /// limits, as upstream.
    pub fn server_limit(&self) -> usize {
        self.max_readonly + self.max_mutating
    }

    /// Counted requests in flight now: (read-only, mutating), upstream's
    /// `apiserver_current_inflight_requests`.
    pub fn in_flight(&self) -> (usize, usize) {
        let used = |pool: &Option<Arc<Semaphore>>, max: usize| {
            pool.as_ref()
                .map_or(0, |p| max.saturating_sub(p.available_permits()))
        };
        (
            used(&self.readonly, self.max_readonly),
            used(&self.mutating, self.max_mutating),
        )
    }

    /// Takes an in-flight slot for the request, or refuses it with upstream's 429.
    pub fn admit(&self, info: &RequestInfo, user: &UserInfo) -> Result<Admit, ApiError> {
        if is_long_running(info) {
            return Ok(Admit::Uncounted);
        }
        let pool = if matches!(info.verb.as_str(), "get" | "list" | "watch") {
            &self.readonly
        } else {
            &self.mutating
        };
        let Some(pool) = pool else {
            return Ok(Admit::Uncounted);
        };
        match pool.clone().try_acquire_owned() {
            Ok(permit) => Ok(Admit::Counted(permit)),
            Err(_) if user.groups.iter().any(|g| g == PRIVILEGED_GROUP) => Ok(Admit::Uncounted),
            Err(_) => Err(too_many_requests()),
        }
    }

    /// How long the request may run: `None` for long-running requests; otherwise the server's
    /// timeout, or the request's `timeout=` if shorter. A `timeout` that is not a Go duration
    /// is a 400, as upstream.
    pub fn deadline(
        &self,
        info: &RequestInfo,
        query: &HashMap<String, String>,
    ) -> Result<Option<Duration>, ApiError> {
        if is_long_running(info) {
            return Ok(None);
        }
        let mut timeout = self.request_timeout;
        if let Some(v) = query.get("timeout").filter(|v| !v.is_empty()) {
            let asked = skiff_apimachinery::duration::parse(v).map_err(|e| {
                ApiError::bad_request(format!(
                    "invalid timeout specified in the request URL - {e}"
                ))
            })?;
            // upstream ignores a timeout that is not positive
            if let Ok(asked) = u64::try_from(asked)
                && asked > 0
                && Duration::from_nanos(asked) < timeout
            {
                timeout = Duration::from_nanos(asked);
            }
        }
        Ok(Some(timeout))
    }
}

/// Whether upstream's `BasicLongRunningRequestCheck` calls the request long-running.
pub fn is_long_running(info: &RequestInfo) -> bool {
    matches!(info.verb.as_str(), "watch" | "proxy")
        || matches!(
            info.subresource.as_str(),
            "attach" | "exec" | "proxy" | "log" | "portforward"
        )
}

/// Upstream's refusal past an in-flight limit (as a `Status`; the client retries after the
/// `Retry-After` seconds).
pub fn too_many_requests() -> ApiError {
    let mut e = ApiError::with_code(
        429,
        "TooManyRequests",
        "Too many requests, please try again later.",
    );
    e.details = Some(serde_json::json!({"retryAfterSeconds": 1}));
    e
}

/// Upstream's answer to a request that ran past its deadline.
pub fn timed_out() -> ApiError {
    ApiError::timeout(
        "Timeout: request did not complete within requested timeout - context deadline exceeded",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(verb: &str, subresource: &str) -> RequestInfo {
        RequestInfo {
            is_resource_request: true,
            verb: verb.into(),
            resource: "pods".into(),
            subresource: subresource.into(),
            ..Default::default()
        }
    }

    fn user(group: &str) -> UserInfo {
        UserInfo {
            name: "u".into(),
            uid: String::new(),
            groups: vec![group.into()],
            extra: Default::default(),
        }
    }

    #[test]
    fn past_the_limit_requests_get_429_until_a_slot_frees() {
        let limits = Limits::new(1, 1, DEFAULT_REQUEST_TIMEOUT);
        let held = limits.admit(&info("create", ""), &user("g")).unwrap();
        assert!(matches!(held, Admit::Counted(_)));
        let refused = limits.admit(&info("update", ""), &user("g")).unwrap_err();
        assert_eq!((refused.code, refused.reason), (429, "TooManyRequests"));
        assert_eq!(
            refused.message,
            "Too many requests, please try again later."
        );
        // reads have their own pool; masters are never refused
        assert!(matches!(
            limits.admit(&info("get", ""), &user("g")).unwrap(),
            Admit::Counted(_)
        ));
        assert!(matches!(
            limits
                .admit(&info("patch", ""), &user("system:masters"))
                .unwrap(),
            Admit::Uncounted
        ));
        assert_eq!(limits.in_flight(), (0, 1));
        drop(held);
        assert!(limits.admit(&info("update", ""), &user("g")).is_ok());
        assert_eq!(limits.in_flight(), (0, 0));
    }

    #[test]
    fn long_running_requests_are_neither_counted_nor_timed() {
        let limits = Limits::new(1, 1, DEFAULT_REQUEST_TIMEOUT);
        let _held = limits.admit(&info("get", ""), &user("g")).unwrap();
        for (verb, sub) in [
            ("watch", ""),
            ("get", "log"),
            ("create", "exec"),
            ("get", "portforward"),
        ] {
            assert!(matches!(
                limits.admit(&info(verb, sub), &user("g")).unwrap(),
                Admit::Uncounted
            ));
            assert_eq!(
                limits.deadline(&info(verb, sub), &HashMap::new()).unwrap(),
                None
            );
        }
        let unlimited = Limits::new(0, 0, DEFAULT_REQUEST_TIMEOUT);
        assert!(matches!(
            unlimited.admit(&info("get", ""), &user("g")).unwrap(),
            Admit::Uncounted
        ));
    }

    #[test]
    fn default_limits_are_upstreams_from_six_cores_and_a_sixth_per_core_below() {
        assert_eq!(default_limits(0), (66, 33));
        assert_eq!(default_limits(1), (66, 33));
        assert_eq!(default_limits(2), (133, 66));
        assert_eq!(default_limits(3), (200, 100));
        assert_eq!(default_limits(6), (400, 200));
        assert_eq!(default_limits(64), (400, 200));
    }

    #[test]
    fn the_timeout_parameter_only_shortens_the_deadline() {
        let limits = Limits::default();
        let q = |v: &str| HashMap::from([("timeout".to_string(), v.to_string())]);
        let get = info("get", "");
        assert_eq!(
            limits.deadline(&get, &HashMap::new()).unwrap(),
            Some(Duration::from_secs(60))
        );
        assert_eq!(
            limits.deadline(&get, &q("5s")).unwrap(),
            Some(Duration::from_secs(5))
        );
        assert_eq!(
            limits.deadline(&get, &q("2h")).unwrap(),
            Some(Duration::from_secs(60))
        );
        assert_eq!(
            limits.deadline(&get, &q("-1s")).unwrap(),
            Some(Duration::from_secs(60))
        );
        let bad = limits.deadline(&get, &q("5x")).unwrap_err();
        assert_eq!(bad.code, 400);
        assert!(
            bad.message
                .starts_with("invalid timeout specified in the request URL")
        );
    }
}
