//! `metrics.k8s.io/v1beta1` objects as metrics-server serves them: NodeMetrics and PodMetrics
//! with the node's or pod's labels, `creationTimestamp` the time of the request, the metric's
//! `timestamp` and `window` (a Go duration, `15.012s`), CPU in nanocores and memory in bytes as
//! canonical quantities (`1234567n`, `10240Ki`).

use jiff::{SignedDuration, Timestamp};
use serde_json::{Map, Value, json};
use skiff_apimachinery::quantity::{Format, format_canonical};

use crate::storage::{Metric, PodMetric};

pub const GROUP_VERSION: &str = "metrics.k8s.io/v1beta1";

/// A metric's `usage`.
fn usage(m: &Metric) -> Value {
    json!({
        "cpu": format_canonical(i128::from(m.cpu_nanocores), Format::DecimalSI),
        "memory": format_canonical(i128::from(m.memory) * 1_000_000_000, Format::BinarySI),
    })
}

fn metadata(name: &str, namespace: Option<&str>, labels: &Value, now: Timestamp) -> Value {
    let mut meta = Map::new();
    meta.insert("name".into(), name.into());
    if let Some(ns) = namespace {
        meta.insert("namespace".into(), ns.into());
    }
    meta.insert("creationTimestamp".into(), json!(now.to_string()));
    if labels.as_object().is_some_and(|l| !l.is_empty()) {
        meta.insert("labels".into(), labels.clone());
    }
    Value::Object(meta)
}

/// A `NodeMetrics`.
pub fn node_metrics(name: &str, labels: &Value, m: &Metric, now: Timestamp) -> Value {
    json!({
        "kind": "NodeMetrics", "apiVersion": GROUP_VERSION,
        "metadata": metadata(name, None, labels, now),
        "timestamp": seconds(m.timestamp),
        "window": go_duration(m.window),
        "usage": usage(m),
    })
}

/// A `PodMetrics`: its containers in name order, the earliest timestamp and longest window.
pub fn pod_metrics(
    namespace: &str,
    name: &str,
    labels: &Value,
    containers: &PodMetric,
    now: Timestamp,
) -> Value {
    let mut containers = containers.clone();
    containers.sort_by(|a, b| a.0.cmp(&b.0));
    let timestamp = containers
        .iter()
        .map(|(_, m)| m.timestamp)
        .min()
        .unwrap_or(now);
    let window = containers
        .iter()
        .map(|(_, m)| m.window)
        .max()
        .unwrap_or_default();
    json!({
        "kind": "PodMetrics", "apiVersion": GROUP_VERSION,
        "metadata": metadata(name, Some(namespace), labels, now),
        "timestamp": seconds(timestamp),
        "window": go_duration(window),
        "containers": containers
            .iter()
            .map(|(name, m)| json!({"name": name, "usage": usage(m)}))
            .collect::<Vec<_>>(),
    })
}

/// A `NodeMetricsList` or `PodMetricsList` of `items`.
pub fn list(kind: &str, items: Vec<Value>) -> Value {
    json!({"kind": kind, "apiVersion": GROUP_VERSION, "metadata": {}, "items": items})
}

/// RFC 3339 in whole seconds, as `metav1.Time`.
fn seconds(t: Timestamp) -> String {
    Timestamp::from_second(t.as_second())
        .unwrap_or(t)
        .to_string()
}

/// Go's `time.Duration.String()`: `15.012s`, `1m0.5s`, `1h2m3s`, `250ms`, `0s`.
pub fn go_duration(d: SignedDuration) -> String {
    let nanos = d.as_nanos();
    if nanos == 0 {
        return "0s".into();
    }
    let sign = if nanos < 0 { "-" } else { "" };
    let n = nanos.unsigned_abs();
    if n < 1_000_000_000 {
        let (unit, scale) = match n {
            0..1_000 => ("ns", 1),
            1_000..1_000_000 => ("µs", 1_000),
            _ => ("ms", 1_000_000),
        };
        return format!("{sign}{}{unit}", fraction(n, scale));
    }
    let (hours, rest) = (n / 3_600_000_000_000, n % 3_600_000_000_000);
    let (minutes, rest) = (rest / 60_000_000_000, rest % 60_000_000_000);
    let seconds = fraction(rest, 1_000_000_000);
    match (hours, minutes) {
        (0, 0) => format!("{sign}{seconds}s"),
        (0, m) => format!("{sign}{m}m{seconds}s"),
        (h, m) => format!("{sign}{h}h{m}m{seconds}s"),
    }
}

/// `n / scale` with the fraction's trailing zeros dropped (`15012000000 / 1e9` → `15.012`).
fn fraction(n: u128, scale: u128) -> String {
    let (whole, part) = (n / scale, n % scale);
    if part == 0 {
        return whole.to_string();
    }
    let width = scale.ilog10() as usize;
    let digits = format!("{part:0width$}");
    format!("{whole}.{}", digits.trim_end_matches('0'))
}

#[cfg(test)]
#[path = "api_tests.rs"]
mod tests;

/// What a request asks of the metrics API (the path below `/apis/metrics.k8s.io/v1beta1`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// The group version's resources (discovery).
    Resources,
    Nodes {
        name: Option<String>,
    },
    /// `namespace` None: every namespace.
    Pods {
        namespace: Option<String>,
        name: Option<String>,
    },
}

impl Request {
    /// The request a path makes; None for a path the API does not serve.
    pub fn parse(path: &str) -> Option<Request> {
        let rest = path.strip_prefix("/apis/metrics.k8s.io/v1beta1")?;
        let parts: Vec<&str> = rest.split('/').filter(|p| !p.is_empty()).collect();
        let name = |n: &&str| Some(n.to_string());
        Some(match parts.as_slice() {
            [] => Request::Resources,
            ["nodes"] => Request::Nodes { name: None },
            ["nodes", n] => Request::Nodes { name: name(n) },
            ["pods"] => Request::Pods {
                namespace: None,
                name: None,
            },
            ["namespaces", ns, "pods"] => Request::Pods {
                namespace: name(ns),
                name: None,
            },
            ["namespaces", ns, "pods", n] => Request::Pods {
                namespace: name(ns),
                name: name(n),
            },
            _ => return None,
        })
    }

    /// The authorization attributes: verb, resource, namespace, name.
    pub fn attributes(&self) -> Option<(&'static str, &'static str, Option<&str>, Option<&str>)> {
        let verb = |name: &Option<String>| if name.is_some() { "get" } else { "list" };
        match self {
            Request::Resources => None,
            Request::Nodes { name } => Some((verb(name), "nodes", None, name.as_deref())),
            Request::Pods { namespace, name } => {
                Some((verb(name), "pods", namespace.as_deref(), name.as_deref()))
            }
        }
    }
}

/// The `APIResourceList` of the group version.
pub fn resources() -> Value {
    let resource = |name: &str, kind: &str, namespaced: bool| {
        json!({"name": name, "singularName": "", "namespaced": namespaced, "kind": kind,
               "verbs": ["get", "list"]})
    };
    json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": GROUP_VERSION,
           "resources": [resource("nodes", "NodeMetrics", false),
                         resource("pods", "PodMetrics", true)]})
}

/// A `Status` of `code`, as the API server words it.
pub fn status(code: u16, reason: &str, message: &str) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
           "message": message, "reason": reason, "code": code})
}

/// The answer to `request` (code and body): the nodes and pods are the cluster's (for their
/// labels and for what exists), `selector` the `labelSelector` query.
pub fn answer(
    request: &Request,
    selector: Option<&str>,
    nodes: &[(String, Value)],
    pods: &[(String, String, Value)],
    storage: &crate::storage::Storage,
    now: Timestamp,
) -> (u16, Value) {
    let selector = match selector.map(skiff_apimachinery::labels::Selector::parse) {
        None => skiff_apimachinery::labels::Selector::everything(),
        Some(Ok(s)) => s,
        Some(Err(e)) => return (400, status(400, "BadRequest", &e.to_string())),
    };
    let not_found = |resource: &str, name: &str| {
        let message = format!("{resource}.metrics.k8s.io {name:?} not found");
        (404, status(404, "NotFound", &message))
    };
    match request {
        Request::Resources => (200, resources()),
        Request::Nodes { name } => {
            let items: Vec<Value> = nodes
                .iter()
                .filter(|(n, labels)| {
                    name.as_ref().is_none_or(|want| want == n) && selector.matches(labels)
                })
                .filter_map(|(n, labels)| Some(node_metrics(n, labels, &storage.node(n)?, now)))
                .collect();
            match name {
                Some(n) => items
                    .into_iter()
                    .next()
                    .map_or_else(|| not_found("nodemetrics", n), |m| (200, m)),
                None => (200, list("NodeMetricsList", items)),
            }
        }
        Request::Pods { namespace, name } => {
            let metrics = storage.pods();
            let items: Vec<Value> = pods
                .iter()
                .filter(|(ns, n, labels)| {
                    namespace.as_ref().is_none_or(|want| want == ns)
                        && name.as_ref().is_none_or(|want| want == n)
                        && selector.matches(labels)
                })
                .filter_map(|(ns, n, labels)| {
                    let m = metrics.get(&(ns.clone(), n.clone()))?;
                    Some(pod_metrics(ns, n, labels, m, now))
                })
                .collect();
            match name {
                Some(n) => items
                    .into_iter()
                    .next()
                    .map_or_else(|| not_found("podmetrics", n), |m| (200, m)),
                None => (200, list("PodMetricsList", items)),
            }
        }
    }
}
