//! ResourceQuota evaluation on JSON objects, shared by the `resourcequota` controller (which
//! fills `status.used`) and the API server's ResourceQuota admission plugin (which charges a
//! create against it): what one object uses (upstream's evaluators in `pkg/quota/v1/evaluator/
//! core`), whether a quota's scopes match it, the pod constraints (`must specify limits.cpu`),
//! and resource lists of quantities summed and written as upstream writes them.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde_json::{Value, json};

use crate::quantity::{Format, Quantity, format_canonical};

/// One quantity in a resource list, kept exactly (billionths) with the format it is written in.
#[derive(Debug, Clone, Copy, Default)]
pub struct Amount {
    pub nanos: i128,
    pub format: Format,
}

impl PartialEq for Amount {
    /// Semantic equality (`1` equals `1000m`), as upstream's `Quantity.Cmp`.
    fn eq(&self, other: &Self) -> bool {
        self.nanos == other.nanos
    }
}

impl Amount {
    /// A whole count (`DecimalSI`).
    pub fn count(n: i64) -> Amount {
        Amount {
            nanos: i128::from(n) * 1_000_000_000,
            format: Format::DecimalSI,
        }
    }

    pub fn parse(s: &str) -> Option<Amount> {
        let q = Quantity::parse(s).ok()?;
        Some(Amount {
            nanos: q.nano_value(),
            format: q.format(),
        })
    }

    /// `self + other`, keeping the format of the first non-zero term (upstream's `Add`).
    pub fn plus(self, other: Amount) -> Amount {
        Amount {
            nanos: self.nanos.saturating_add(other.nanos),
            format: if self.nanos == 0 {
                other.format
            } else {
                self.format
            },
        }
    }

    pub fn minus(self, other: Amount) -> Amount {
        Amount {
            nanos: self.nanos.saturating_sub(other.nanos),
            format: self.format,
        }
    }
}

impl fmt::Display for Amount {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&format_canonical(self.nanos, self.format))
    }
}

/// A resource list (`corev1.ResourceList`), sorted by name.
pub type ResourceList = BTreeMap<String, Amount>;

/// A JSON resource list (`{"cpu": "100m"}`); malformed quantities are skipped (validation
/// refused them already).
pub fn parse_list(v: Option<&Value>) -> ResourceList {
    v.and_then(Value::as_object)
        .into_iter()
        .flatten()
        .filter_map(|(k, v)| Some((k.clone(), Amount::parse(v.as_str()?)?)))
        .collect()
}

/// A resource list as JSON.
pub fn to_json(list: &ResourceList) -> Value {
    Value::Object(
        list.iter()
            .map(|(k, v)| (k.clone(), json!(v.to_string())))
            .collect(),
    )
}

/// Upstream's `quota.Add`.
pub fn add(a: &ResourceList, b: &ResourceList) -> ResourceList {
    let mut out = a.clone();
    for (k, v) in b {
        let sum = out.get(k).copied().unwrap_or_default().plus(*v);
        out.insert(k.clone(), sum);
    }
    out
}

/// Upstream's `quota.Subtract` (keys of `b` missing from `a` come out negative).
pub fn subtract(a: &ResourceList, b: &ResourceList) -> ResourceList {
    let mut out = a.clone();
    for (k, v) in b {
        let diff = out.get(k).copied().unwrap_or_default().minus(*v);
        out.insert(k.clone(), diff);
    }
    out
}

/// Upstream's `quota.SubtractWithNonNegativeResult`: `a - b`, each resource at least zero.
pub fn subtract_non_negative(a: &ResourceList, b: &ResourceList) -> ResourceList {
    subtract(a, b)
        .into_iter()
        .map(|(k, v)| {
            let v = if v.nanos < 0 {
                Amount { nanos: 0, ..v }
            } else {
                v
            };
            (k, v)
        })
        .collect()
}

/// Upstream's `quota.Max`: the larger of each resource.
pub fn max(a: &ResourceList, b: &ResourceList) -> ResourceList {
    let mut out = a.clone();
    for (k, v) in b {
        match out.get(k) {
            Some(have) if have.nanos >= v.nanos => {}
            _ => {
                out.insert(k.clone(), *v);
            }
        }
    }
    out
}

/// Only the resources in `names` (upstream's `quota.Mask`).
pub fn mask(list: &ResourceList, names: &BTreeSet<String>) -> ResourceList {
    list.iter()
        .filter(|(k, _)| names.contains(*k))
        .map(|(k, v)| (k.clone(), *v))
        .collect()
}

/// Semantic equality of two lists (`quota.Equals`).
pub fn equals(a: &ResourceList, b: &ResourceList) -> bool {
    a.len() == b.len() && a.iter().all(|(k, v)| b.get(k) == Some(v))
}

/// The resources of `a` that exceed `b` (`quota.LessThanOrEqual`; a resource `b` does not
/// name is not limited).
pub fn exceeded(a: &ResourceList, b: &ResourceList) -> BTreeSet<String> {
    a.iter()
        .filter(|(k, v)| b.get(*k).is_some_and(|limit| v.nanos > limit.nanos))
        .map(|(k, _)| k.clone())
        .collect()
}

/// `pods=1,requests.cpu=500m` (upstream's `prettyPrint`, sorted by name).
pub fn pretty(list: &ResourceList) -> String {
    list.iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// The kinds with an evaluator of their own or legacy count names (`pods` as well as
/// `count/pods`); every other served kind is counted as `count/<plural>[.<group>]` only.
const LEGACY_COUNTED: &[&str] = &[
    "pods",
    "services",
    "configmaps",
    "secrets",
    "persistentvolumeclaims",
    "replicationcontrollers",
    "resourcequotas",
];

/// `count/pods`, `count/deployments.apps`.
pub fn count_name(group: &str, plural: &str) -> String {
    if group.is_empty() {
        format!("count/{plural}")
    } else {
        format!("count/{plural}.{group}")
    }
}

/// The `(group, plural)` a `count/...` resource name counts.
pub fn parse_count_name(name: &str) -> Option<(&str, &str)> {
    let rest = name.strip_prefix("count/")?;
    Some(match rest.split_once('.') {
        Some((plural, group)) => (group, plural),
        None => ("", rest),
    })
}

/// Whether the quota resource `name` is one the evaluator for `group/plural` charges.
pub fn charges(group: &str, plural: &str, name: &str) -> bool {
    if name == count_name(group, plural) {
        return true;
    }
    if !group.is_empty() || !LEGACY_COUNTED.contains(&plural) {
        return false;
    }
    match plural {
        "pods" => {
            let request = name.strip_prefix("requests.").unwrap_or(name);
            POD_RESOURCES.contains(&name)
                || request.starts_with("hugepages-")
                || (name.starts_with("requests.") && request.contains('/'))
        }
        "services" => matches!(
            name,
            "services" | "services.loadbalancers" | "services.nodeports"
        ),
        "persistentvolumeclaims" => {
            matches!(name, "persistentvolumeclaims" | "requests.storage")
                || name.ends_with(".storageclass.storage.k8s.io/requests.storage")
                || name.ends_with(".storageclass.storage.k8s.io/persistentvolumeclaims")
        }
        _ => name == plural,
    }
}

const POD_RESOURCES: &[&str] = &[
    "pods",
    "cpu",
    "memory",
    "ephemeral-storage",
    "requests.cpu",
    "requests.memory",
    "requests.ephemeral-storage",
    "limits.cpu",
    "limits.memory",
    "limits.ephemeral-storage",
];

/// The compute resources a pod must state in every container when a matching quota limits them
/// (upstream's backward-compatibility `validationSet`).
const MUST_SPECIFY: &[&str] = &[
    "cpu",
    "memory",
    "requests.cpu",
    "requests.memory",
    "limits.cpu",
    "limits.memory",
];

/// What one object of `group/plural` uses at `now`: its `count/` and every resource its
/// evaluator charges.
pub fn usage(group: &str, plural: &str, obj: &Value, now: jiff::Timestamp) -> ResourceList {
    let mut out = ResourceList::new();
    out.insert(count_name(group, plural), Amount::count(1));
    if !group.is_empty() {
        return out;
    }
    match plural {
        "pods" if counts_compute(obj, now) => {
            out = add(&out, &pod_compute_usage(obj));
        }
        "pods" => {}
        "services" => {
            out.insert("services".into(), Amount::count(1));
            let ports = obj
                .pointer("/spec/ports")
                .and_then(Value::as_array)
                .map_or(0, Vec::len) as i64;
            match obj.pointer("/spec/type").and_then(Value::as_str) {
                Some("NodePort") => {
                    out.insert("services.nodeports".into(), Amount::count(ports));
                }
                Some("LoadBalancer") => {
                    let allocate = obj
                        .pointer("/spec/allocateLoadBalancerNodePorts")
                        .and_then(Value::as_bool)
                        != Some(false);
                    let node_ports = if allocate {
                        ports
                    } else {
                        obj.pointer("/spec/ports")
                            .and_then(Value::as_array)
                            .into_iter()
                            .flatten()
                            .filter(|p| p.get("nodePort").and_then(Value::as_i64).unwrap_or(0) != 0)
                            .count() as i64
                    };
                    out.insert("services.nodeports".into(), Amount::count(node_ports));
                    out.insert("services.loadbalancers".into(), Amount::count(1));
                }
                _ => {}
            }
        }
        "persistentvolumeclaims" => {
            out.insert("persistentvolumeclaims".into(), Amount::count(1));
            let class = obj
                .pointer("/spec/storageClassName")
                .and_then(Value::as_str)
                .unwrap_or("");
            if !class.is_empty() {
                out.insert(
                    format!("{class}.storageclass.storage.k8s.io/persistentvolumeclaims"),
                    Amount::count(1),
                );
            }
            if let Some(storage) = obj
                .pointer("/spec/resources/requests/storage")
                .and_then(Value::as_str)
                .and_then(Amount::parse)
            {
                out.insert("requests.storage".into(), storage);
                if !class.is_empty() {
                    out.insert(
                        format!("{class}.storageclass.storage.k8s.io/requests.storage"),
                        storage,
                    );
                }
            }
        }
        p if LEGACY_COUNTED.contains(&p) => {
            out.insert(p.into(), Amount::count(1));
        }
        _ => {}
    }
    out
}

/// Upstream's `QuotaV1Pod`: a pod in a terminal phase, or deleted and past its grace period,
/// no longer uses compute resources (nor counts as `pods`, only as `count/pods`).
pub fn counts_compute(pod: &Value, now: jiff::Timestamp) -> bool {
    let phase = pod.pointer("/status/phase").and_then(Value::as_str);
    if matches!(phase, Some("Succeeded" | "Failed")) {
        return false;
    }
    match pod
        .pointer("/metadata/deletionTimestamp")
        .and_then(Value::as_str)
    {
        Some(deadline) => deadline
            .parse::<jiff::Timestamp>()
            .is_ok_and(|deadline| deadline >= now),
        None => true,
    }
}

fn container_lists<'a>(pod: &'a Value, field: &str) -> impl Iterator<Item = &'a Value> {
    pod.pointer(&format!("/spec/{field}"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
}

fn resources(container: &Value, which: &str) -> ResourceList {
    parse_list(container.pointer(&format!("/resources/{which}")))
}

/// Upstream's `podComputeUsageHelper` over one set of requests and limits.
fn compute_usage(requests: &ResourceList, limits: &ResourceList) -> ResourceList {
    let mut out = ResourceList::new();
    out.insert("pods".into(), Amount::count(1));
    for r in ["cpu", "memory", "ephemeral-storage"] {
        if let Some(q) = requests.get(r) {
            out.insert(r.into(), *q);
            out.insert(format!("requests.{r}"), *q);
        }
        if let Some(q) = limits.get(r) {
            out.insert(format!("limits.{r}"), *q);
        }
    }
    for (r, q) in requests {
        if r.starts_with("hugepages-") {
            out.insert(r.clone(), *q);
            out.insert(format!("requests.{r}"), *q);
        } else if r.contains('/') && !r.starts_with("kubernetes.io/") {
            // extended resources are only quota'd as requests.<name>
            out.insert(format!("requests.{r}"), *q);
        }
    }
    out
}

/// Whether the kubelet found a pending resize of the pod impossible on its node (the
/// `PodResizePending` condition with reason `Infeasible`, or the older `status.resize`).
pub fn resize_infeasible(pod: &Value) -> bool {
    let conditions = pod.pointer("/status/conditions").and_then(Value::as_array);
    conditions.into_iter().flatten().any(|c| {
        c.get("type").and_then(Value::as_str) == Some("PodResizePending")
            && c.get("reason").and_then(Value::as_str) == Some("Infeasible")
    }) || pod.pointer("/status/resize").and_then(Value::as_str) == Some("Infeasible")
}

/// A container's requests and limits while a resize may be under way (upstream's
/// `PodRequests` with `UseStatusResources`): the larger of what the spec asks (unless the
/// resize is infeasible) and what the kubelet allocated and applied, as its status reports.
fn container_resources(pod: &Value, statuses: &str, c: &Value) -> (ResourceList, ResourceList) {
    let (requests, limits) = (resources(c, "requests"), resources(c, "limits"));
    let status = pod
        .pointer(&format!("/status/{statuses}"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .find(|s| s.get("name") == c.get("name"));
    let Some(status) = status.filter(|s| s.get("resources").is_some_and(Value::is_object)) else {
        return (requests, limits);
    };
    let applied = |which: &str| parse_list(status.pointer(&format!("/resources/{which}")));
    let allocated = max(
        &applied("requests"),
        &parse_list(status.get("allocatedResources")),
    );
    if resize_infeasible(pod) {
        (allocated, applied("limits"))
    } else {
        (max(&requests, &allocated), max(&limits, &applied("limits")))
    }
}

/// What a live pod uses: containers summed, the largest init container, plus overhead.
fn pod_compute_usage(pod: &Value) -> ResourceList {
    let mut requests = ResourceList::new();
    let mut limits = ResourceList::new();
    for c in container_lists(pod, "containers") {
        let (r, l) = container_resources(pod, "containerStatuses", c);
        requests = add(&requests, &r);
        limits = add(&limits, &l);
    }
    for c in container_lists(pod, "initContainers") {
        let (r, l) = container_resources(pod, "initContainerStatuses", c);
        requests = max(&requests, &r);
        limits = max(&limits, &l);
    }
    let overhead = parse_list(pod.pointer("/spec/overhead"));
    requests = add(&requests, &overhead);
    limits = add(&limits, &overhead);
    compute_usage(&requests, &limits)
}

/// Upstream's pod `Constraints`: when a matching quota limits `cpu`/`memory` requests or
/// limits (`required`), every container must state them; the error names what is missing
/// and where (`must specify limits.cpu for: app; requests.memory for: app,init`).
pub fn pod_constraints(pod: &Value, required: &BTreeSet<String>) -> Result<(), String> {
    let required: BTreeSet<&str> = required
        .iter()
        .map(String::as_str)
        .filter(|r| MUST_SPECIFY.contains(r))
        .collect();
    if required.is_empty() {
        return Ok(());
    }
    let mut missing: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
    for c in container_lists(pod, "containers").chain(container_lists(pod, "initContainers")) {
        let usage = compute_usage(&resources(c, "requests"), &resources(c, "limits"));
        let name = c.get("name").and_then(Value::as_str).unwrap_or("");
        for r in &required {
            if !usage.contains_key(*r) {
                missing.entry(r).or_default().insert(name.to_string());
            }
        }
    }
    if missing.is_empty() {
        return Ok(());
    }
    let parts: Vec<String> = missing
        .iter()
        .map(|(r, names)| {
            format!(
                "{r} for: {}",
                names.iter().cloned().collect::<Vec<_>>().join(",")
            )
        })
        .collect();
    Err(format!("must specify {}", parts.join("; ")))
}

/// One scope a quota restricts itself to (`spec.scopes`, or `spec.scopeSelector`).
#[derive(Debug, Clone, PartialEq, Eq)]
struct ScopeSelector {
    scope: String,
    operator: String,
    values: Vec<String>,
}

fn scope_selectors(quota: &Value) -> Vec<ScopeSelector> {
    let mut out: Vec<ScopeSelector> = quota
        .pointer("/spec/scopes")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(|s| ScopeSelector {
            scope: s.into(),
            operator: "Exists".into(),
            values: vec![],
        })
        .collect();
    for e in quota
        .pointer("/spec/scopeSelector/matchExpressions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let str_of = |k: &str| e.get(k).and_then(Value::as_str).unwrap_or("").to_string();
        out.push(ScopeSelector {
            scope: str_of("scopeName"),
            operator: str_of("operator"),
            values: e
                .get("values")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect(),
        });
    }
    out
}

/// Upstream's `qos.GetPodQOS(pod) == BestEffort`: no container states any request or limit.
fn best_effort(pod: &Value) -> bool {
    container_lists(pod, "containers")
        .chain(container_lists(pod, "initContainers"))
        .all(|c| resources(c, "requests").is_empty() && resources(c, "limits").is_empty())
}

fn scope_matches(sel: &ScopeSelector, pod: &Value) -> bool {
    match sel.scope.as_str() {
        "Terminating" => pod
            .pointer("/spec/activeDeadlineSeconds")
            .is_some_and(|v| !v.is_null()),
        "NotTerminating" => pod
            .pointer("/spec/activeDeadlineSeconds")
            .is_none_or(Value::is_null),
        "BestEffort" => best_effort(pod),
        "NotBestEffort" => !best_effort(pod),
        "PriorityClass" => {
            let class = pod
                .pointer("/spec/priorityClassName")
                .and_then(Value::as_str)
                .unwrap_or("");
            // as upstream, the pod's class is a label that is always present (maybe empty)
            match sel.operator.as_str() {
                "Exists" => !class.is_empty(),
                "In" => sel.values.iter().any(|v| v == class),
                "NotIn" => !sel.values.iter().any(|v| v == class),
                _ => false,
            }
        }
        _ => false,
    }
}

/// Whether a quota counts this object at all: it must limit (in `hard`) something the
/// object's evaluator charges, and every scope must match (scopes only ever match pods).
pub fn matches(quota: &Value, hard: &ResourceList, group: &str, plural: &str, obj: &Value) -> bool {
    if !hard.keys().any(|r| charges(group, plural, r)) {
        return false;
    }
    let is_pod = group.is_empty() && plural == "pods";
    scope_selectors(quota)
        .iter()
        .all(|s| is_pod && scope_matches(s, obj))
}

/// The resources in `hard` that the evaluator of `group/plural` charges.
pub fn matching_resources(hard: &ResourceList, group: &str, plural: &str) -> BTreeSet<String> {
    hard.keys()
        .filter(|r| charges(group, plural, r))
        .cloned()
        .collect()
}

#[cfg(test)]
#[path = "quota_tests.rs"]
mod tests;
