//! `metrics.k8s.io/v1beta1` objects as metrics-server serves them: NodeMetrics and PodMetrics
//! with the node's or pod's labels, `creationTimestamp` the time of the request, the metric's
//! `timestamp` and `window` (a Go duration, `15.012s`), CPU in nanocores and memory in bytes as
//! canonical quantities (`1234567n`, `10240Ki`).

use std::collections::{BTreeMap, HashMap};

use jiff::{SignedDuration, Timestamp};
use serde::Serialize;
use serde_json::{Value, json};
use skiff_apimachinery::labels::Selector;
use skiff_apimachinery::quantity::{Format, format_canonical};

use crate::storage::{Metric, Storage};

pub const GROUP_VERSION: &str = "metrics.k8s.io/v1beta1";

/// A node's or pod's labels.
pub type Labels = BTreeMap<String, String>;

/// A metric's `usage`.
#[derive(Debug, Serialize)]
pub struct Usage {
    cpu: String,
    memory: String,
}

impl Usage {
    fn of(m: &Metric) -> Usage {
        Usage {
            cpu: format_canonical(i128::from(m.cpu_nanocores), Format::DecimalSI),
            memory: format_canonical(i128::from(m.memory) * 1_000_000_000, Format::BinarySI),
        }
    }
}

/// A metrics object's `metadata`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Metadata<'a> {
    name: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    namespace: Option<&'a str>,
    creation_timestamp: String,
    #[serde(skip_serializing_if = "no_labels")]
    labels: &'a Labels,
}

fn no_labels(labels: &&Labels) -> bool {
    labels.is_empty()
}

impl<'a> Metadata<'a> {
    fn new(name: &'a str, namespace: Option<&'a str>, labels: &'a Labels, now: Timestamp) -> Self {
        Metadata {
            name,
            namespace,
            creation_timestamp: now.to_string(),
            labels,
        }
    }
}

/// A `NodeMetrics`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeMetrics<'a> {
    kind: &'static str,
    api_version: &'static str,
    metadata: Metadata<'a>,
    timestamp: String,
    window: String,
    usage: Usage,
}

/// One container's usage in a `PodMetrics`.
#[derive(Debug, Serialize)]
pub struct ContainerMetrics<'a> {
    name: &'a str,
    usage: Usage,
}

/// A `PodMetrics`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PodMetrics<'a> {
    kind: &'static str,
    api_version: &'static str,
    metadata: Metadata<'a>,
    timestamp: String,
    window: String,
    containers: Vec<ContainerMetrics<'a>>,
}

/// A `NodeMetrics`.
pub fn node_metrics<'a>(
    name: &'a str,
    labels: &'a Labels,
    m: &Metric,
    now: Timestamp,
) -> NodeMetrics<'a> {
    NodeMetrics {
        kind: "NodeMetrics",
        api_version: GROUP_VERSION,
        metadata: Metadata::new(name, None, labels, now),
        timestamp: seconds(m.timestamp),
        window: go_duration(m.window),
        usage: Usage::of(m),
    }
}

/// A `PodMetrics` of its containers' usage by name: the containers in name order, the earliest
/// timestamp and longest window.
pub fn pod_metrics<'a>(
    namespace: &'a str,
    name: &'a str,
    labels: &'a Labels,
    containers: &[(&'a str, Metric)],
    now: Timestamp,
) -> PodMetrics<'a> {
    let mut containers = containers.to_vec();
    containers.sort_by(|a, b| a.0.cmp(b.0));
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
    PodMetrics {
        kind: "PodMetrics",
        api_version: GROUP_VERSION,
        metadata: Metadata::new(name, Some(namespace), labels, now),
        timestamp: seconds(timestamp),
        window: go_duration(window),
        containers: containers
            .into_iter()
            .map(|(name, m)| ContainerMetrics {
                usage: Usage::of(&m),
                name,
            })
            .collect(),
    }
}

/// A `NodeMetricsList` or `PodMetricsList`, its JSON written item by item: a list of every
/// pod of a large cluster is never held whole but as its text.
pub struct List {
    out: Vec<u8>,
    items: usize,
    /// Where the first item is in `out`.
    first: std::ops::Range<usize>,
}

impl List {
    pub fn new(kind: &'static str) -> List {
        let head = format!(
            r#"{{"kind":"{kind}","apiVersion":"{GROUP_VERSION}","metadata":{{}},"items":["#
        );
        List {
            out: head.into_bytes(),
            items: 0,
            first: 0..0,
        }
    }

    pub fn push(&mut self, item: &impl Serialize) {
        if self.items > 0 {
            self.out.push(b',');
        }
        let start = self.out.len();
        write_json(&mut self.out, item);
        if self.items == 0 {
            self.first = start..self.out.len();
        }
        self.items += 1;
    }

    /// The list's JSON.
    pub fn finish(mut self) -> Vec<u8> {
        self.out.extend_from_slice(b"]}");
        self.out
    }

    /// The first item's JSON, if there is one.
    pub fn first(self) -> Option<Vec<u8>> {
        (self.items > 0).then(|| self.out[self.first].to_vec())
    }
}

fn write_json(out: &mut Vec<u8>, item: &impl Serialize) {
    // strings, numbers and string maps into memory: nothing that can fail
    serde_json::to_writer(out, item).expect("metrics serialize to JSON");
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

/// The answer to `request`: its code and JSON body. `nodes` (name, labels) and `pods`
/// (namespace, name, labels) are the cluster's, for their labels and for what exists;
/// `selector` is the `labelSelector` query.
pub fn answer(
    request: &Request,
    selector: Option<&str>,
    nodes: &[(&str, &Labels)],
    pods: &[(&str, &str, &Labels)],
    storage: &Storage,
    now: Timestamp,
) -> (u16, Vec<u8>) {
    let json = |code: u16, body: &Value| (code, body.to_string().into_bytes());
    let selector = match selector.map(Selector::parse) {
        None => Selector::everything(),
        Some(Ok(s)) => s,
        Some(Err(e)) => return json(400, &status(400, "BadRequest", &e.to_string())),
    };
    // a list, or the one item a name asks for
    let answer = |list: List, resource: &str, name: &Option<String>| match name {
        None => (200, list.finish()),
        Some(name) => match list.first() {
            Some(item) => (200, item),
            None => {
                let message = format!("{resource}.metrics.k8s.io {name:?} not found");
                json(404, &status(404, "NotFound", &message))
            }
        },
    };
    match request {
        Request::Resources => json(200, &resources()),
        Request::Nodes { name } => {
            let mut list = List::new("NodeMetricsList");
            let selected = nodes.iter().filter(|(n, labels)| {
                name.as_ref().is_none_or(|want| want == n) && selector.matches(*labels)
            });
            for (n, labels) in selected {
                if let Some(m) = storage.node(n) {
                    list.push(&node_metrics(n, labels, &m, now));
                }
            }
            answer(list, "nodemetrics", name)
        }
        Request::Pods { namespace, name } => {
            // by namespace, then name
            let mut selected: HashMap<&str, HashMap<&str, &Labels>> = HashMap::new();
            let matching = pods.iter().filter(|(ns, n, labels)| {
                namespace.as_ref().is_none_or(|want| want == ns)
                    && name.as_ref().is_none_or(|want| want == n)
                    && selector.matches(*labels)
            });
            for (ns, n, labels) in matching {
                selected.entry(ns).or_default().insert(n, labels);
            }
            let mut list = List::new("PodMetricsList");
            storage.for_each_pod(|ns, n, containers| {
                // taken out: a pod on two nodes' scrapes is listed once
                if let Some(labels) = selected.get_mut(ns).and_then(|pods| pods.remove(n)) {
                    list.push(&pod_metrics(ns, n, labels, containers, now));
                }
            });
            answer(list, "podmetrics", name)
        }
    }
}
