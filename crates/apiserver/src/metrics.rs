//! `/metrics` in Prometheus text format with upstream's metric names: requests by verb,
//! resource and code (`apiserver_request_total`), their latency
//! (`apiserver_request_duration_seconds`, and `apiserver_request_sli_duration_seconds` without
//! the time spent in APF's queue and on admission webhooks, see [`crate::timing`]), open
//! watches (`apiserver_longrunning_requests`), and
//! objects per resource (`apiserver_storage_objects`, read off the watch cache at scrape time),
//! the events sent to watchers, counted (`apiserver_watch_events_total`) and sized in bytes
//! (`apiserver_watch_events_sizes`) by group, version and kind, and the watchers closed for
//! falling behind (`apiserver_terminated_watchers_total`).

use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use crate::request::RequestInfo;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    pub verb: String,
    pub group: String,
    pub version: String,
    pub resource: String,
    pub subresource: String,
    pub code: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LatencyLabels {
    pub verb: String,
    pub group: String,
    pub resource: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabels {
    pub group: String,
    pub version: String,
    pub kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct InflightLabels {
    /// `readOnly` or `mutating`, as upstream.
    pub request_kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StageLabels {
    /// One of [`crate::trace::stages::NAMES`].
    pub stage: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResourceLabels {
    pub resource: String,
}

/// The API server's metrics.
pub struct Metrics {
    registry: Mutex<Registry>,
    requests: Family<RequestLabels, Counter>,
    latency: Family<LatencyLabels, Histogram>,
    sli_latency: Family<LatencyLabels, Histogram>,
    pub watches: Family<ResourceLabels, Gauge>,
    terminated_watchers: Family<ResourceLabels, Counter>,
    objects: Family<ResourceLabels, Gauge>,
    watch_events: Family<KindLabels, Counter>,
    watch_event_sizes: Family<KindLabels, Histogram>,
    inflight: Family<InflightLabels, Gauge>,
    startup_stages: Family<StageLabels, Histogram>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

/// Upstream's request latency buckets (seconds).
const BUCKETS: [f64; 12] = [
    0.005, 0.025, 0.05, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 2.0, 5.0, 10.0,
];

/// Upstream's watch event size buckets (bytes): 1 KiB to 128 KiB.
const SIZE_BUCKETS: [f64; 8] = [
    1024.0, 2048.0, 4096.0, 8192.0, 16384.0, 32768.0, 65536.0, 131072.0,
];

/// Pod startup stage buckets (seconds): milliseconds for the API-side steps up to a minute
/// for image pulls.
const STAGE_BUCKETS: [f64; 14] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 15.0, 60.0,
];

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::default();
        let requests = Family::<RequestLabels, Counter>::default();
        let latency = Family::<LatencyLabels, Histogram>::new_with_constructor(
            (|| Histogram::new(BUCKETS)) as fn() -> Histogram,
        );
        let sli_latency = Family::<LatencyLabels, Histogram>::new_with_constructor(
            (|| Histogram::new(BUCKETS)) as fn() -> Histogram,
        );
        let watches = Family::<ResourceLabels, Gauge>::default();
        let terminated_watchers = Family::<ResourceLabels, Counter>::default();
        let objects = Family::<ResourceLabels, Gauge>::default();
        let inflight = Family::<InflightLabels, Gauge>::default();
        let watch_events = Family::<KindLabels, Counter>::default();
        let watch_event_sizes = Family::<KindLabels, Histogram>::new_with_constructor(
            (|| Histogram::new(SIZE_BUCKETS)) as fn() -> Histogram,
        );
        let startup_stages = Family::<StageLabels, Histogram>::new_with_constructor(
            (|| Histogram::new(STAGE_BUCKETS)) as fn() -> Histogram,
        );
        registry.register(
            "skiff_pod_startup_stage_seconds",
            "Seconds each stage of a pod's startup took, as the lifecycle trace derived them, observed once per pod when it became Ready",
            startup_stages.clone(),
        );
        registry.register(
            "apiserver_current_inflight_requests",
            "Maximal number of currently used inflight request limit of this apiserver per request kind in last second",
            inflight.clone(),
        );
        registry.register(
            "apiserver_request",
            "Counter of apiserver requests broken out for each verb, group, version, resource, subresource and HTTP response code",
            requests.clone(),
        );
        registry.register(
            "apiserver_request_duration_seconds",
            "Response latency distribution in seconds for each verb, group and resource",
            latency.clone(),
        );
        registry.register(
            "apiserver_request_sli_duration_seconds",
            "Response latency distribution (not counting webhook duration and priority & fairness queue wait times) in seconds for each verb, group and resource",
            sli_latency.clone(),
        );
        registry.register(
            "apiserver_longrunning_requests",
            "Gauge of all active long-running apiserver requests (watches) by resource",
            watches.clone(),
        );
        registry.register(
            "apiserver_terminated_watchers",
            "Counter of watchers closed due to unresponsiveness broken by resource type",
            terminated_watchers.clone(),
        );
        registry.register(
            "apiserver_storage_objects",
            "Number of stored objects at the time of last check split by kind",
            objects.clone(),
        );
        registry.register(
            "apiserver_watch_events",
            "Number of events sent in watch clients",
            watch_events.clone(),
        );
        registry.register(
            "apiserver_watch_events_sizes",
            "Watch event size distribution in bytes",
            watch_event_sizes.clone(),
        );
        Self {
            registry: Mutex::new(registry),
            requests,
            latency,
            sli_latency,
            watches,
            terminated_watchers,
            objects,
            watch_events,
            watch_event_sizes,
            inflight,
            startup_stages,
        }
    }
}

/// A request's `verb` label as upstream reports it: the HTTP method for a create (`POST`) and
/// an update (`PUT`), the Kubernetes verb in capitals otherwise (`LIST`, `WATCH`, `PATCH`).
fn reported_verb(verb: &str) -> String {
    match verb {
        "create" => "POST".into(),
        "update" => "PUT".into(),
        other => other.to_uppercase(),
    }
}

impl Metrics {
    /// Counts one finished request (watches count when they start streaming) that took
    /// `took`, `excluded` of it waiting on others (see [`crate::timing`]).
    pub fn observe(&self, info: &RequestInfo, code: u16, took: Duration, excluded: Duration) {
        let verb = reported_verb(&info.verb);
        let resource = if info.is_resource_request {
            info.resource.clone()
        } else {
            String::new()
        };
        self.requests
            .get_or_create(&RequestLabels {
                verb: verb.clone(),
                group: info.group.clone(),
                version: info.version.clone(),
                resource: resource.clone(),
                subresource: info.subresource.clone(),
                code: code.to_string(),
            })
            .inc();
        if info.verb != "watch" {
            let labels = LatencyLabels {
                verb,
                group: info.group.clone(),
                resource,
            };
            self.latency
                .get_or_create(&labels)
                .observe(took.as_secs_f64());
            self.sli_latency
                .get_or_create(&labels)
                .observe(took.saturating_sub(excluded).as_secs_f64());
        }
    }

    /// One pod's startup stage (see [`crate::trace::stages`]).
    pub fn observe_startup_stage(&self, stage: &str, seconds: f64) {
        self.startup_stages
            .get_or_create(&StageLabels {
                stage: stage.to_string(),
            })
            .observe(seconds);
    }

    /// Marks a watch open until the returned guard drops.
    pub fn watch_opened(self: &Arc<Self>, resource: &str) -> WatchGuard {
        let labels = ResourceLabels {
            resource: resource.to_string(),
        };
        self.watches.get_or_create(&labels).inc();
        WatchGuard {
            metrics: self.clone(),
            labels,
        }
    }

    /// Counts a watch of `resource` closed because it fell too far behind its events.
    pub fn watcher_terminated(&self, resource: &str) {
        self.terminated_watchers
            .get_or_create(&ResourceLabels {
                resource: resource.to_string(),
            })
            .inc();
    }

    /// The meters of the events one watch of `group/version` `kind` sends: taken once per watch,
    /// so that counting an event costs no label lookup.
    pub fn watch_event_meters(&self, group: &str, version: &str, kind: &str) -> WatchEventMeters {
        let labels = KindLabels {
            group: group.to_string(),
            version: version.to_string(),
            kind: kind.to_string(),
        };
        WatchEventMeters {
            events: self.watch_events.get_or_create(&labels).clone(),
            sizes: self.watch_event_sizes.get_or_create(&labels).clone(),
        }
    }

    /// Adds a metric of another part of the server to the exposition.
    pub fn register(
        &self,
        name: &str,
        help: &str,
        metric: impl prometheus_client::registry::Metric,
    ) {
        self.registry.lock().register(name, help, metric);
    }

    /// Sets the in-flight gauges (read off the limits at scrape time).
    pub fn set_inflight(&self, read_only: usize, mutating: usize) {
        for (kind, n) in [("readOnly", read_only), ("mutating", mutating)] {
            self.inflight
                .get_or_create(&InflightLabels {
                    request_kind: kind.into(),
                })
                .set(n as i64);
        }
    }

    /// The text exposition, with object counts as given.
    pub fn render(&self, objects: &[(&str, usize)]) -> String {
        for (resource, n) in objects {
            self.objects
                .get_or_create(&ResourceLabels {
                    resource: (*resource).to_string(),
                })
                .set(*n as i64);
        }
        let mut out = String::new();
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry.lock());
        out
    }
}

/// An open watch, counted in `apiserver_longrunning_requests` while alive.
pub struct WatchGuard {
    metrics: Arc<Metrics>,
    labels: ResourceLabels,
}

impl Drop for WatchGuard {
    fn drop(&mut self) {
        self.metrics.watches.get_or_create(&self.labels).dec();
    }
}

/// Where one watch counts the events it sends (see [`Metrics::watch_event_meters`]).
#[derive(Debug, Clone)]
pub struct WatchEventMeters {
    events: Counter,
    sizes: Histogram,
}

impl WatchEventMeters {
    /// One event of `bytes` sent.
    pub fn sent(&self, bytes: usize) {
        self.events.inc();
        self.sizes.observe(bytes as f64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_and_watches_show_up_in_the_exposition() {
        let m = Arc::new(Metrics::default());
        let info = RequestInfo {
            is_resource_request: true,
            verb: "list".into(),
            version: "v1".into(),
            resource: "pods".into(),
            ..Default::default()
        };
        m.observe(&info, 200, Duration::from_millis(3), Duration::ZERO);
        let create = RequestInfo {
            verb: "create".into(),
            ..info.clone()
        };
        // 700 ms, of which 680 waiting in a queue or on webhooks
        m.observe(
            &create,
            201,
            Duration::from_millis(700),
            Duration::from_millis(680),
        );
        m.observe_startup_stage("binding", 0.004);
        let guard = m.watch_opened("pods");
        let meters = m.watch_event_meters("", "v1", "Pod");
        meters.sent(1500);
        meters.sent(300);
        let text = m.render(&[("pods", 7)]);
        assert!(text.contains(r#"apiserver_request_total{verb="LIST",group="",version="v1",resource="pods",subresource="",code="200"} 1"#), "{text}");
        // upstream's label for a create is its HTTP method
        assert!(text.contains(r#"apiserver_request_total{verb="POST",group="",version="v1",resource="pods",subresource="",code="201"} 1"#), "{text}");
        assert!(
            text.contains(r#"apiserver_request_duration_seconds_count{verb="POST",group="",resource="pods"} 1"#),
            "{text}"
        );
        for (le, total, sli) in [("0.025", 0, 1), ("0.6", 0, 1), ("0.8", 1, 1)] {
            for (name, count) in [("duration", total), ("sli_duration", sli)] {
                let bucket = format!(
                    r#"apiserver_request_{name}_seconds_bucket{{le="{le}",verb="POST",group="",resource="pods"}} {count}"#
                );
                assert!(text.contains(&bucket), "{bucket} in {text}");
            }
        }
        assert!(
            text.contains(r#"apiserver_longrunning_requests{resource="pods"} 1"#),
            "{text}"
        );
        assert!(
            text.contains(r#"apiserver_storage_objects{resource="pods"} 7"#),
            "{text}"
        );
        assert!(
            text.contains(r#"apiserver_watch_events_total{group="",version="v1",kind="Pod"} 2"#),
            "{text}"
        );
        assert!(
            text.contains(
                r#"apiserver_watch_events_sizes_sum{group="",version="v1",kind="Pod"} 1800"#
            ),
            "{text}"
        );
        assert!(
            text.contains(
                r#"apiserver_watch_events_sizes_bucket{le="1024.0",group="",version="v1",kind="Pod"} 1"#
            ),
            "{text}"
        );
        assert!(
            text.contains(r#"skiff_pod_startup_stage_seconds_count{stage="binding"} 1"#),
            "{text}"
        );
        drop(guard);
        assert!(
            m.render(&[])
                .contains(r#"apiserver_longrunning_requests{resource="pods"} 0"#)
        );
    }
}
