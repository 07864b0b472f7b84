//! `metrics`: what `/metrics` shows, under CoreDNS's metric names (so its dashboards work):
//! requests by protocol, address family and type, their duration, responses by rcode, forwarded
//! requests by upstream, and cache hits and misses. The `zone` label is `.`, as CoreDNS's for its
//! default Corefile's one server block (`.:53`).

/// The `zone` label of every request.
const ZONE: &str = ".";

use parking_lot::Mutex;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    zone: &'static str,
    proto: &'static str,
    family: &'static str,
    r#type: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DurationLabels {
    zone: &'static str,
    r#type: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResponseLabels {
    zone: &'static str,
    rcode: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ForwardLabels {
    to: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CacheLabels {
    r#type: &'static str,
}

/// One request as the metrics see it.
#[derive(Clone, Copy, Debug)]
pub struct Observation {
    /// `udp` or `tcp`.
    pub proto: &'static str,
    /// `1` (IPv4 client) or `2` (IPv6 client), as CoreDNS.
    pub family: &'static str,
    pub qtype: &'static str,
    pub rcode: &'static str,
    pub seconds: f64,
}

/// The server's metrics.
pub struct Metrics {
    /// The registry is only read while encoding; the families inside are lock-free per series.
    registry: Mutex<Registry>,
    requests: Family<RequestLabels, Counter>,
    durations: Family<DurationLabels, Histogram>,
    responses: Family<ResponseLabels, Counter>,
    forwards: Family<ForwardLabels, Counter>,
    cache_hits: Family<CacheLabels, Counter>,
    cache_misses: Counter,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Metrics {
        let mut registry = Registry::with_prefix("coredns");
        let requests = Family::<RequestLabels, Counter>::default();
        registry.register(
            "dns_requests",
            "Counter of DNS requests made per zone, protocol and family.",
            requests.clone(),
        );
        // CoreDNS's buckets: 0.25 ms doubling 16 times
        let durations = Family::<DurationLabels, Histogram>::new_with_constructor(|| {
            Histogram::new(exponential_buckets(0.00025, 2.0, 16))
        });
        registry.register(
            "dns_request_duration_seconds",
            "Histogram of the time (in seconds) each request took per zone.",
            durations.clone(),
        );
        let responses = Family::<ResponseLabels, Counter>::default();
        registry.register(
            "dns_responses",
            "Counter of response status codes.",
            responses.clone(),
        );
        let forwards = Family::<ForwardLabels, Counter>::default();
        registry.register(
            "forward_requests",
            "Counter of requests made per upstream.",
            forwards.clone(),
        );
        let cache_hits = Family::<CacheLabels, Counter>::default();
        registry.register("cache_hits", "The count of cache hits.", cache_hits.clone());
        let cache_misses = Counter::default();
        registry.register(
            "cache_misses",
            "The count of cache misses.",
            cache_misses.clone(),
        );
        Metrics {
            registry: Mutex::new(registry),
            requests,
            durations,
            responses,
            forwards,
            cache_hits,
            cache_misses,
        }
    }
}

impl Metrics {
    /// Counts one answered request.
    pub fn observe(&self, o: Observation) {
        self.requests
            .get_or_create(&RequestLabels {
                zone: ZONE,
                proto: o.proto,
                family: o.family,
                r#type: o.qtype,
            })
            .inc();
        self.durations
            .get_or_create(&DurationLabels {
                zone: ZONE,
                r#type: o.qtype,
            })
            .observe(o.seconds);
        self.responses
            .get_or_create(&ResponseLabels {
                zone: ZONE,
                rcode: o.rcode,
            })
            .inc();
    }

    /// Counts one question sent upstream (`to` is the upstream's address).
    pub fn forwarded(&self, to: std::net::SocketAddr) {
        self.forwards
            .get_or_create(&ForwardLabels { to: to.to_string() })
            .inc();
    }

    /// Counts a cache lookup: a hit (`success` or `denial`, as CoreDNS) or a miss.
    pub fn cache(&self, hit: Option<&'static str>) {
        match hit {
            Some(kind) => {
                self.cache_hits
                    .get_or_create(&CacheLabels { r#type: kind })
                    .inc();
            }
            None => {
                self.cache_misses.inc();
            }
        }
    }

    /// The text exposition format.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        if prometheus_client::encoding::text::encode(&mut out, &self.registry.lock()).is_err() {
            out.clear();
        }
        out
    }
}
