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
