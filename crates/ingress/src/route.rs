//! The routing table: which backend serves a request's host and path, with the Ingress API's
//! matching rules. Hosts match exactly or by a `*.` wildcard, which stands for exactly one DNS
//! label (`*.foo.com` matches `bar.foo.com`, not `foo.com` or `baz.bar.foo.com`); rules without
//! a host match every host. An exact host is tried first, then its wildcard, then the host-less
//! rules; the first of them with a matching path wins (as k3s's Traefik, where each rule is a
//! router and a host-less rule still matches any host). Within one host the longest matching
//! path wins, and of two equally long ones the `Exact` path (the Ingress spec's precedence);
//! `Prefix` matches path elements (`/foo` matches `/foo` and `/foo/bar`, not `/foobar`). What
//! matches nothing goes to the default backend, if there is one; otherwise the answer is 404.
//!
//! A table is immutable once built: a change of Ingresses, Services or endpoints builds a new
//! one (see [`crate::config`]) that requests in flight never see half-made.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// How a path rule compares paths.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathType {
    /// The request's path equals the rule's, case-sensitively (a trailing `/` counts).
    Exact,
    /// The rule's path, split by `/`, is an element-wise prefix of the request's; a trailing
    /// `/` on either is ignored. `ImplementationSpecific` is served this way too.
    Prefix,
}

/// Where matching requests go: a Service port's ready endpoints, balanced round-robin.
#[derive(Debug)]
pub struct Backend {
    /// `namespace/name:port`, for the access log and error pages.
    pub name: String,
    /// The ready endpoints (pod address and target port); empty when `unavailable` says why.
    pub endpoints: Vec<SocketAddr>,
    /// Why nothing can serve (missing Service or port, no ready endpoint): answered with 503.
    pub unavailable: Option<String>,
    /// Whether the endpoints speak HTTP/2 without TLS (the Service port's `appProtocol` is
    /// `kubernetes.io/h2c`) rather than HTTP/1.1.
    pub h2c: bool,
    next: AtomicUsize,
}

impl Backend {
    /// A backend serving from `endpoints`; unavailable when there are none.
    pub fn new(name: String, endpoints: Vec<SocketAddr>) -> Backend {
        let unavailable = endpoints
            .is_empty()
            .then(|| format!("service {name} has no ready endpoints"));
        Backend {
            name,
            endpoints,
            unavailable,
            h2c: false,
            next: AtomicUsize::new(0),
        }
    }

    /// This backend, spoken to over h2c when `h2c`.
    pub fn with_h2c(self, h2c: bool) -> Backend {
        Backend { h2c, ..self }
    }

    /// A backend that cannot serve, and why.
    pub fn unavailable(name: String, why: String) -> Backend {
        Backend {
            name,
            endpoints: Vec::new(),
            unavailable: Some(why),
            h2c: false,
            next: AtomicUsize::new(0),
        }
    }

    /// The next endpoint in round-robin order, if there is one.
    pub fn pick(&self) -> Option<SocketAddr> {
        self.pick_untried(&[])
    }

    /// The next endpoint in round-robin order that is not in `tried`, if there is one.
    pub fn pick_untried(&self, tried: &[SocketAddr]) -> Option<SocketAddr> {
        let n = self.endpoints.len();
        if n == 0 {
            return None;
        }
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        (0..n)
            .map(|k| self.endpoints[(start + k) % n])
            .find(|e| !tried.contains(e))
    }
}

/// One path of one host.
#[derive(Debug, Clone)]
struct PathRule {
    /// The rule's path; for `Prefix`, without a trailing `/` (`/` itself stays).
    path: String,
    kind: PathType,
    backend: Arc<Backend>,
}

impl PathRule {
    fn matches(&self, path: &str) -> bool {
        match self.kind {
            PathType::Exact => path == self.path,
            PathType::Prefix => {
                self.path == "/"
                    || path
                        .strip_prefix(self.path.as_str())
                        .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
            }
        }
    }
}

/// The paths of one host, most specific first.
#[derive(Debug, Clone, Default)]
struct Paths(Vec<PathRule>);

impl Paths {
    /// Adds a rule unless an equal one (same path and type) is already there: the first added
    /// wins, and the table is built from the oldest Ingress first.
    fn add(&mut self, path: &str, kind: PathType, backend: Arc<Backend>) {
        let path = match kind {
            PathType::Prefix if path.len() > 1 => path.trim_end_matches('/'),
            _ => path,
        };
        let path = if path.is_empty() { "/" } else { path };
        if self.0.iter().any(|r| r.path == path && r.kind == kind) {
            return;
        }
        let rule = PathRule {
            path: path.to_string(),
            kind,
            backend,
        };
        // longer paths first; at equal length Exact before Prefix; otherwise in insertion order
        let rank = |r: &PathRule| (std::cmp::Reverse(r.path.len()), r.kind == PathType::Prefix);
        let at = self.0.partition_point(|r| rank(r) <= rank(&rule));
        self.0.insert(at, rule);
    }

    fn find(&self, path: &str) -> Option<&Arc<Backend>> {
        self.0.iter().find(|r| r.matches(path)).map(|r| &r.backend)
    }
}

/// Every route the controller serves.
#[derive(Debug, Clone, Default)]
pub struct Table {
    exact: HashMap<String, Paths>,
    /// By the wildcard's suffix: `*.foo.com` is under `foo.com`.
    wildcard: HashMap<String, Paths>,
    any_host: Paths,
    default: Option<Arc<Backend>>,
}

impl Table {
    /// Adds the rule `host` (empty for every host; `*.` for a wildcard) + `path` → `backend`,
    /// unless an earlier rule has the same host, path and type.
    pub fn add(&mut self, host: &str, path: &str, kind: PathType, backend: Arc<Backend>) {
        let host = host.to_ascii_lowercase();
        let paths = if host.is_empty() {
            &mut self.any_host
        } else if let Some(suffix) = host.strip_prefix("*.") {
            self.wildcard.entry(suffix.to_string()).or_default()
        } else {
            self.exact.entry(host).or_default()
        };
        paths.add(path, kind, backend);
    }

    /// Sets the default backend unless one is set (the oldest Ingress's wins).
    pub fn set_default(&mut self, backend: Arc<Backend>) {
        self.default.get_or_insert(backend);
    }

    /// The backend for a request to `host` (a Host header or `:authority`, with or without a
    /// port) and `path`; None: nothing matches (404).
    pub fn route(&self, host: &str, path: &str) -> Option<&Arc<Backend>> {
        let host = strip_port(host);
        // lowercased only when it is not already (a request's host usually is)
        let lowered;
        let host = if host.bytes().any(|b| b.is_ascii_uppercase()) {
            lowered = host.to_ascii_lowercase();
            lowered.as_str()
        } else {
            host
        };
        let exact = self.exact.get(host);
        let wildcard = host
            .split_once('.')
            .filter(|(label, _)| !label.is_empty())
            .and_then(|(_, suffix)| self.wildcard.get(suffix));
        [exact, wildcard, Some(&self.any_host)]
            .into_iter()
            .flatten()
            .find_map(|paths| paths.find(path))
            .or(self.default.as_ref())
    }
}

/// `host` without a `:port` (an IPv6 literal keeps its brackets).
pub fn strip_port(host: &str) -> &str {
    if host.starts_with('[') {
        return host
            .split_once(']')
            .map_or(host, |(h, _)| &host[..=h.len()]);
    }
    host.rsplit_once(':')
        .filter(|(_, port)| port.chars().all(|c| c.is_ascii_digit()))
        .map_or(host, |(h, _)| h)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn backend(name: &str) -> Arc<Backend> {
        Arc::new(Backend::new(
            name.into(),
            vec!["10.0.0.1:80".parse().unwrap()],
        ))
    }

    fn routed<'a>(table: &'a Table, host: &str, path: &str) -> Option<&'a str> {
        table.route(host, path).map(|b| b.name.as_str())
    }

    #[test]
    fn prefix_paths_match_whole_elements_and_ignore_a_trailing_slash() {
        let mut table = Table::default();
        table.add("", "/foo/", PathType::Prefix, backend("foo"));
        for path in ["/foo", "/foo/", "/foo/bar"] {
            assert_eq!(routed(&table, "x", path), Some("foo"), "{path}");
        }
        for path in ["/foobar", "/", "/fo"] {
            assert_eq!(routed(&table, "x", path), None, "{path}");
        }
    }

    #[test]
    fn exact_paths_match_only_themselves() {
        let mut table = Table::default();
        table.add("", "/foo", PathType::Exact, backend("foo"));
        assert_eq!(routed(&table, "x", "/foo"), Some("foo"));
        assert_eq!(routed(&table, "x", "/foo/"), None);
        assert_eq!(routed(&table, "x", "/foo/bar"), None);
    }

    #[test]
    fn the_longest_path_wins_and_exact_beats_prefix_at_equal_length() {
        let mut table = Table::default();
        table.add("a.com", "/", PathType::Prefix, backend("root"));
        table.add("a.com", "/api", PathType::Prefix, backend("api-prefix"));
        table.add("a.com", "/api/v1", PathType::Prefix, backend("v1"));
        table.add("a.com", "/api", PathType::Exact, backend("api-exact"));
        assert_eq!(routed(&table, "a.com", "/api/v1/pods"), Some("v1"));
        assert_eq!(routed(&table, "a.com", "/api"), Some("api-exact"));
        assert_eq!(routed(&table, "a.com", "/api/v2"), Some("api-prefix"));
        assert_eq!(routed(&table, "a.com", "/other"), Some("root"));
    }

    #[test]
    fn the_first_of_two_equal_rules_wins() {
        let mut table = Table::default();
        table.add("a.com", "/x", PathType::Prefix, backend("older"));
        table.add("a.com", "/x/", PathType::Prefix, backend("newer"));
        assert_eq!(routed(&table, "a.com", "/x"), Some("older"));
    }

    #[test]
    fn wildcards_cover_exactly_one_label() {
        let mut table = Table::default();
        table.add("*.foo.com", "/", PathType::Prefix, backend("wild"));
        assert_eq!(routed(&table, "bar.foo.com", "/"), Some("wild"));
        assert_eq!(routed(&table, "BAR.Foo.com:8080", "/"), Some("wild"));
        assert_eq!(routed(&table, "foo.com", "/"), None);
        assert_eq!(routed(&table, "baz.bar.foo.com", "/"), None);
        assert_eq!(routed(&table, ".foo.com", "/"), None);
    }

    #[test]
    fn exact_hosts_come_before_wildcards_and_wildcards_before_hostless_rules() {
        let mut table = Table::default();
        table.add("", "/", PathType::Prefix, backend("any"));
        table.add("*.foo.com", "/", PathType::Prefix, backend("wild"));
        table.add("a.foo.com", "/only", PathType::Prefix, backend("a"));
        assert_eq!(routed(&table, "a.foo.com", "/only/x"), Some("a"));
        // a host whose own paths do not match falls through to the wildcard, then to any host
        assert_eq!(routed(&table, "a.foo.com", "/else"), Some("wild"));
        assert_eq!(routed(&table, "b.foo.com", "/"), Some("wild"));
        assert_eq!(routed(&table, "bar.com", "/"), Some("any"));
    }

    #[test]
    fn unmatched_requests_go_to_the_first_default_backend() {
        let mut table = Table::default();
        table.add("a.com", "/", PathType::Prefix, backend("a"));
        assert_eq!(routed(&table, "b.com", "/"), None);
        table.set_default(backend("first"));
        table.set_default(backend("second"));
        assert_eq!(routed(&table, "b.com", "/"), Some("first"));
        assert_eq!(routed(&table, "a.com", "/"), Some("a"));
    }

    #[test]
    fn ports_are_stripped_from_hosts() {
        assert_eq!(strip_port("a.com:80"), "a.com");
        assert_eq!(strip_port("a.com"), "a.com");
        assert_eq!(strip_port("[::1]:443"), "[::1]");
        assert_eq!(strip_port("[::1]"), "[::1]");
    }

    #[test]
    fn endpoints_are_picked_round_robin() {
        let addrs: Vec<SocketAddr> = vec![
            "10.0.0.1:80".parse().unwrap(),
            "10.0.0.2:80".parse().unwrap(),
        ];
        let b = Backend::new("ns/s:80".into(), addrs.clone());
        let picked: Vec<_> = (0..4).map(|_| b.pick().unwrap()).collect();
        assert_eq!(picked, [addrs[0], addrs[1], addrs[0], addrs[1]]);
        let empty = Backend::new("ns/s:80".into(), vec![]);
        assert_eq!(empty.pick(), None);
        assert_eq!(
            empty.unavailable.as_deref(),
            Some("service ns/s:80 has no ready endpoints")
        );
    }
}
