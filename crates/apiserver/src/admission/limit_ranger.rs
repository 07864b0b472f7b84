//! Upstream's `LimitRanger` admission plugin: the namespace's LimitRanges give new pods'
//! containers (and init containers) their `Container` `default` limits and `defaultRequest`
//! requests, noted in the `kubernetes.io/limit-ranger` annotation, and refuse pods and claims
//! outside their `min`, `max` and `maxLimitRequestRatio` (per Container, per Pod, per
//! PersistentVolumeClaim) with upstream's 403 messages. Pod updates are not checked: their
//! containers' resources cannot change (upstream skips them too).

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{Map, Value, json};
use skiff_apimachinery::quantity::{Quantity, format_canonical};

use super::{Attributes, Operation, Plugin};
use crate::cache::Cacher;
use crate::error::Result;

/// The annotation naming what the plugin set.
pub const ANNOTATION: &str = "kubernetes.io/limit-ranger";

/// The LimitRanges of a namespace.
#[async_trait]
pub trait LimitRangeLookup: Send + Sync {
    async fn in_namespace(&self, namespace: &str) -> Result<Vec<Value>>;
}

/// LimitRanges from the watch cache (upstream reads its informer the same way).
pub struct CachedLimitRanges(pub Arc<Cacher>);

#[async_trait]
impl LimitRangeLookup for CachedLimitRanges {
    async fn in_namespace(&self, namespace: &str) -> Result<Vec<Value>> {
        let rt = skiff_apimachinery::catalog::lookup("", "v1", "limitranges").expect("limitranges");
        let list = self.0.resource(rt).list(namespace);
        list.objects.iter().map(|c| c.object()).collect()
    }
}

pub struct LimitRanger<L> {
    pub lookup: L,
}

fn is(attrs: &Attributes<'_>, plural: &str) -> bool {
    attrs.resource.group.is_empty() && attrs.resource.plural == plural
}

/// Upstream's `SupportsAttributes`: pods on create and on `resize`, claims on create and
/// update, no other subresource.
fn applies(attrs: &Attributes<'_>) -> bool {
    match (attrs.operation, attrs.subresource) {
        (Operation::Create, "") => is(attrs, "pods") || is(attrs, "persistentvolumeclaims"),
        (Operation::Update, "") => is(attrs, "persistentvolumeclaims"),
        (Operation::Update, "resize") => is(attrs, "pods"),
        _ => false,
    }
}

fn items(range: &Value) -> impl Iterator<Item = &Value> {
    range
        .pointer("/spec/limits")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
}

fn entries(v: Option<&Value>) -> impl Iterator<Item = (&String, &Value)> {
    v.and_then(Value::as_object).into_iter().flatten()
}

/// Upstream's `defaultContainerResourceRequirements`: the `Container` items' defaults, later
/// items winning.
fn container_defaults(ranges: &[Value]) -> (Map<String, Value>, Map<String, Value>) {
    let (mut requests, mut limits) = (Map::new(), Map::new());
    for item in ranges.iter().flat_map(items) {
        if item["type"] != "Container" {
            continue;
        }
        for (k, v) in entries(item.get("defaultRequest")) {
            requests.insert(k.clone(), v.clone());
        }
        for (k, v) in entries(item.get("default")) {
            limits.insert(k.clone(), v.clone());
        }
    }
    (requests, limits)
}

/// Upstream's `mergeContainerResources`: fills what `container` does not set, and returns the
/// annotation parts (`cpu, memory request for container c`).
fn merge_container(
    container: &mut Value,
    requests: &Map<String, Value>,
    limits: &Map<String, Value>,
    label: &str,
    notes: &mut Vec<String>,
) {
    let name = container["name"].as_str().unwrap_or("").to_string();
    let mut fill = |field: &str, defaults: &Map<String, Value>| -> Vec<String> {
        if defaults.is_empty() || !container.is_object() {
            return Vec::new();
        }
        if !container["resources"].is_object() {
            container["resources"] = json!({});
        }
        if !container["resources"][field].is_object() {
            container["resources"][field] = json!({});
        }
        let own = container["resources"][field]
            .as_object_mut()
            .expect("object");
        let mut set: Vec<String> = Vec::new();
        for (k, v) in defaults {
            if !own.contains_key(k) {
                own.insert(k.clone(), v.clone());
                set.push(k.clone());
            }
        }
        set.sort();
        set
    };
    let set_requests = fill("requests", requests);
    let set_limits = fill("limits", limits);
    if !set_requests.is_empty() {
        notes.push(format!(
            "{} request for {label} {name}",
            set_requests.join(", ")
        ));
    }
    if !set_limits.is_empty() {
        notes.push(format!(
            "{} limit for {label} {name}",
            set_limits.join(", ")
        ));
    }
}

/// Upstream's `PodMutateLimitFunc`: the defaults applied to every container and init
/// container, and the annotation saying which.
pub fn apply_defaults(pod: &mut Value, ranges: &[Value]) {
    let (requests, limits) = container_defaults(ranges);
    if requests.is_empty() && limits.is_empty() {
        return;
    }
    let mut notes = Vec::new();
    for (field, label) in [
        ("containers", "container"),
        ("initContainers", "init container"),
    ] {
        if let Some(list) = pod["spec"][field].as_array_mut() {
            for c in list {
                merge_container(c, &requests, &limits, label, &mut notes);
            }
        }
    }
    if notes.is_empty() {
        return;
    }
    if !pod["metadata"]["annotations"].is_object() {
        pod["metadata"]["annotations"] = json!({});
    }
    pod["metadata"]["annotations"][ANNOTATION] =
        json!(format!("LimitRanger plugin set: {}", notes.join("; ")));
}

/// A quantity as upstream prints it (`Quantity.String()`).
fn show(q: &Quantity) -> String {
    format_canonical(q.nano_value(), q.format())
}

/// A quantity as JSON holds it (a string, or a number from YAML's `cpu: 1`).
pub fn parse(v: &Value) -> Option<Quantity> {
    match v {
        Value::String(s) => Quantity::parse(s).ok(),
        Value::Number(n) => Quantity::parse(&n.to_string()).ok(),
        _ => None,
    }
}

fn quantity(list: &Value, name: &str) -> Option<Quantity> {
    list.get(name).and_then(parse)
}

/// Upstream's `minConstraint`.
fn min(
    kind: &str,
    name: &str,
    enforced: &Quantity,
    requests: &Value,
    limits: &Value,
) -> Option<String> {
    let e = show(enforced);
    let Some(req) = quantity(requests, name) else {
        return Some(format!(
            "minimum {name} usage per {kind} is {e}.  No request is specified"
        ));
    };
    if req.nano_value() < enforced.nano_value() {
        return Some(format!(
            "minimum {name} usage per {kind} is {e}, but request is {}",
            show(&req)
        ));
    }
    match quantity(limits, name) {
        Some(lim) if lim.nano_value() < enforced.nano_value() => Some(format!(
            "minimum {name} usage per {kind} is {e}, but limit is {}",
            show(&lim)
        )),
        _ => None,
    }
}

/// Upstream's `maxConstraint`.
fn max(
    kind: &str,
    name: &str,
    enforced: &Quantity,
    requests: &Value,
    limits: &Value,
) -> Option<String> {
    let e = show(enforced);
    let Some(lim) = quantity(limits, name) else {
        return Some(format!(
            "maximum {name} usage per {kind} is {e}.  No limit is specified"
        ));
    };
    if lim.nano_value() > enforced.nano_value() {
        return Some(format!(
            "maximum {name} usage per {kind} is {e}, but limit is {}",
            show(&lim)
        ));
    }
    match quantity(requests, name) {
        Some(req) if req.nano_value() > enforced.nano_value() => Some(format!(
            "maximum {name} usage per {kind} is {e}, but request is {}",
            show(&req)
        )),
        _ => None,
    }
}

/// Upstream's `maxRequestConstraint` (claims: only the request counts).
fn max_request(kind: &str, name: &str, enforced: &Quantity, requests: &Value) -> Option<String> {
    let e = show(enforced);
    match quantity(requests, name) {
        None => Some(format!(
            "maximum {name} usage per {kind} is {e}.  No request is specified"
        )),
        Some(req) if req.nano_value() > enforced.nano_value() => Some(format!(
            "maximum {name} usage per {kind} is {e}, but request is {}",
            show(&req)
        )),
        Some(_) => None,
    }
}

/// Upstream's `limitRequestRatioConstraint`.
fn ratio(
    kind: &str,
    name: &str,
    enforced: &Quantity,
    requests: &Value,
    limits: &Value,
) -> Option<String> {
    let e = show(enforced);
    let req = quantity(requests, name)
        .map(|q| q.nano_value())
        .unwrap_or(0);
    if req == 0 {
        return Some(format!(
            "{name} max limit to request ratio per {kind} is {e}, but no request is specified or request is 0"
        ));
    }
    let lim = quantity(limits, name).map(|q| q.nano_value()).unwrap_or(0);
    if lim == 0 {
        return Some(format!(
            "{name} max limit to request ratio per {kind} is {e}, but no limit is specified or limit is 0"
        ));
    }
    let observed = lim as f64 / req as f64;
    let allowed = enforced.nano_value() as f64 / 1e9;
    (observed > allowed).then(|| {
        format!("{name} max limit to request ratio per {kind} is {e}, but provided ratio is {observed:.6}")
    })
}

/// The min, max and ratio checks of one item against one set of requests and limits.
fn check(item: &Value, kind: &str, requests: &Value, limits: &Value, errs: &mut Vec<String>) {
    let each = |field: &str| {
        entries(item.get(field))
            .filter_map(|(k, v)| Some((k.clone(), parse(v)?)))
            .collect::<Vec<_>>()
    };
    for (k, q) in each("min") {
        errs.extend(min(kind, &k, &q, requests, limits));
    }
    for (k, q) in each("max") {
        errs.extend(max(kind, &k, &q, requests, limits));
    }
    for (k, q) in each("maxLimitRequestRatio") {
        errs.extend(ratio(kind, &k, &q, requests, limits));
    }
}

fn containers<'a>(pod: &'a Value, field: &str) -> impl Iterator<Item = &'a Value> {
    pod["spec"][field].as_array().into_iter().flatten()
}

/// Sums `field` (`requests` or `limits`) as upstream's pod totals: the containers and restartable
/// (sidecar) init containers add up, and each other init container raises the total to its own.
fn pod_total(pod: &Value, field: &str) -> Value {
    use std::collections::BTreeMap;
    let mut sum: BTreeMap<String, (i128, skiff_apimachinery::quantity::Format)> = BTreeMap::new();
    let add = |c: &Value, sum: &mut BTreeMap<_, _>| {
        for (k, v) in entries(c["resources"].get(field)) {
            if let Some(q) = parse(v) {
                let e = sum.entry(k.clone()).or_insert((0, q.format()));
                e.0 += q.nano_value();
            }
        }
    };
    let sidecar = |c: &Value| c["restartPolicy"] == "Always";
    for c in containers(pod, "containers") {
        add(c, &mut sum);
    }
    for c in containers(pod, "initContainers").filter(|c| sidecar(c)) {
        add(c, &mut sum);
    }
    for c in containers(pod, "initContainers").filter(|c| !sidecar(c)) {
        for (k, v) in entries(c["resources"].get(field)) {
            if let Some(q) = parse(v) {
                let e = sum.entry(k.clone()).or_insert((0, q.format()));
                e.0 = e.0.max(q.nano_value());
            }
        }
    }
    Value::Object(
        sum.into_iter()
            .map(|(k, (n, f))| (k, json!(format_canonical(n, f))))
            .collect(),
    )
}

/// Upstream's `PodValidateLimitFunc`: every error of every range.
pub fn pod_errors(pod: &Value, ranges: &[Value]) -> Vec<String> {
    let mut errs = Vec::new();
    for item in ranges.iter().flat_map(items) {
        match item["type"].as_str() {
            Some("Container") => {
                for c in containers(pod, "containers").chain(containers(pod, "initContainers")) {
                    let r = &c["resources"];
                    check(item, "Container", &r["requests"], &r["limits"], &mut errs);
                }
            }
            Some("Pod") => {
                let (requests, limits) = (pod_total(pod, "requests"), pod_total(pod, "limits"));
                check(item, "Pod", &requests, &limits, &mut errs);
            }
            _ => {}
        }
    }
    errs
}

/// Upstream's `PersistentVolumeClaimValidateLimitFunc`: min and max of the requested storage.
pub fn claim_errors(claim: &Value, ranges: &[Value]) -> Vec<String> {
    let mut errs = Vec::new();
    let requests = &claim["spec"]["resources"]["requests"];
    for item in ranges.iter().flat_map(items) {
        if item["type"] != "PersistentVolumeClaim" {
            continue;
        }
        for (k, v) in entries(item.get("min")) {
            if let Some(q) = parse(v) {
                errs.extend(min("PersistentVolumeClaim", k, &q, requests, &json!({})));
            }
        }
        for (k, v) in entries(item.get("max")) {
            if let Some(q) = parse(v) {
                errs.extend(max_request("PersistentVolumeClaim", k, &q, requests));
            }
        }
    }
    errs
}

/// Upstream's `utilerrors.NewAggregate(...).Error()`: one message alone, several in brackets.
fn aggregate(errs: &[String]) -> String {
    match errs {
        [one] => one.clone(),
        many => format!("[{}]", many.join(", ")),
    }
}

#[async_trait]
impl<L: LimitRangeLookup> Plugin for LimitRanger<L> {
    fn name(&self) -> &'static str {
        "LimitRanger"
    }

    async fn mutate(&self, attrs: &Attributes<'_>, object: Option<&mut Value>) -> Result<()> {
        if !applies(attrs) || !is(attrs, "pods") {
            return Ok(());
        }
        let Some(pod) = object else { return Ok(()) };
        let ranges = self.lookup.in_namespace(attrs.namespace).await?;
        apply_defaults(pod, &ranges);
        Ok(())
    }

    async fn validate(&self, attrs: &Attributes<'_>, object: Option<&Value>) -> Result<()> {
        let Some(obj) = object.filter(|_| applies(attrs)) else {
            return Ok(());
        };
        let ranges = self.lookup.in_namespace(attrs.namespace).await?;
        if ranges.is_empty() {
            return Ok(());
        }
        let errs = if is(attrs, "pods") {
            pod_errors(obj, &ranges)
        } else {
            claim_errors(obj, &ranges)
        };
        if errs.is_empty() {
            Ok(())
        } else {
            Err(attrs.forbidden(&aggregate(&errs)))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::authn::UserInfo;
    use skiff_apimachinery::catalog::lookup;

    struct Fixed(Vec<Value>);

    #[async_trait]
    impl LimitRangeLookup for Fixed {
        async fn in_namespace(&self, _namespace: &str) -> Result<Vec<Value>> {
            Ok(self.0.clone())
        }
    }

    fn attrs<'a>(user: &'a UserInfo, plural: &str, op: Operation) -> Attributes<'a> {
        Attributes {
            operation: op,
            resource: lookup("", "v1", plural).unwrap(),
            subresource: "",
            namespace: "team",
            name: "web",
            user,
            old: None,
            dry_run: false,
            notes: Default::default(),
        }
    }

    fn range(items: Value) -> Value {
        json!({"metadata": {"name": "limits", "namespace": "team"}, "spec": {"limits": items}})
    }

    fn container_range() -> Value {
        range(json!([{"type": "Container",
            "default": {"cpu": "500m", "memory": "128Mi"},
            "defaultRequest": {"cpu": "100m", "memory": "64Mi"},
            "max": {"cpu": "1"}, "min": {"cpu": "50m"}}]))
    }

    #[tokio::test]
    async fn containers_without_resources_get_the_defaults_and_the_annotation() {
        let user = UserInfo::anonymous();
        let plugin = LimitRanger {
            lookup: Fixed(vec![container_range()]),
        };
        let mut pod = json!({"metadata": {"name": "web"}, "spec": {
            "containers": [{"name": "app"}, {"name": "side", "resources": {"limits": {"cpu": "200m"}}}],
            "initContainers": [{"name": "init"}]}});
        let a = attrs(&user, "pods", Operation::Create);
        plugin.mutate(&a, Some(&mut pod)).await.unwrap();
        assert_eq!(
            pod["spec"]["containers"][0]["resources"],
            json!({"requests": {"cpu": "100m", "memory": "64Mi"},
                   "limits": {"cpu": "500m", "memory": "128Mi"}})
        );
        assert_eq!(
            pod["spec"]["containers"][1]["resources"]["limits"],
            json!({"cpu": "200m", "memory": "128Mi"})
        );
        assert_eq!(
            pod["metadata"]["annotations"][ANNOTATION],
            "LimitRanger plugin set: cpu, memory request for container app; \
             cpu, memory limit for container app; cpu, memory request for container side; \
             memory limit for container side; cpu, memory request for init container init; \
             cpu, memory limit for init container init"
        );
        plugin.validate(&a, Some(&pod)).await.unwrap();
    }

    #[tokio::test]
    async fn a_limit_over_the_max_is_refused_with_upstreams_message() {
        let user = UserInfo::anonymous();
        let plugin = LimitRanger {
            lookup: Fixed(vec![container_range()]),
        };
        let mut pod = json!({"metadata": {"name": "web"}, "spec": {"containers": [
            {"name": "app", "resources": {"limits": {"cpu": "2"}}}]}});
        let a = attrs(&user, "pods", Operation::Create);
        plugin.mutate(&a, Some(&mut pod)).await.unwrap();
        let err = plugin.validate(&a, Some(&pod)).await.unwrap_err();
        assert_eq!(err.code, 403);
        assert_eq!(
            err.message,
            "pods \"web\" is forbidden: maximum cpu usage per Container is 1, but limit is 2"
        );
        // a resize is held to the same range
        let resize = Attributes {
            subresource: "resize",
            ..attrs(&user, "pods", Operation::Update)
        };
        let err = plugin.validate(&resize, Some(&pod)).await.unwrap_err();
        assert!(err.message.ends_with("but limit is 2"), "{}", err.message);
    }

    #[test]
    fn min_and_ratio_errors_aggregate_in_brackets() {
        let ranges = [range(json!([{"type": "Container",
            "min": {"memory": "64Mi"}, "maxLimitRequestRatio": {"cpu": "2"}}]))];
        let pod = json!({"spec": {"containers": [{"name": "c", "resources": {
            "requests": {"cpu": "100m", "memory": "32Mi"}, "limits": {"cpu": "300m"}}}]}});
        let errs = pod_errors(&pod, &ranges);
        assert_eq!(
            aggregate(&errs),
            "[minimum memory usage per Container is 64Mi, but request is 32Mi, \
             cpu max limit to request ratio per Container is 2, but provided ratio is 3.000000]"
        );
        let bare = json!({"spec": {"containers": [{"name": "c"}]}});
        assert_eq!(
            pod_errors(&bare, &ranges),
            [
                "minimum memory usage per Container is 64Mi.  No request is specified",
                "cpu max limit to request ratio per Container is 2, but no request is specified or request is 0"
            ]
        );
    }

    #[test]
    fn pod_limits_count_the_sum_of_containers() {
        let ranges = [range(json!([{"type": "Pod", "max": {"memory": "1Gi"}}]))];
        let c = |m: &str| json!({"name": "c", "resources": {"limits": {"memory": m}}});
        let pod = json!({"spec": {"containers": [c("512Mi"), c("768Mi")],
                                  "initContainers": [c("1Gi")]}});
        assert_eq!(
            pod_errors(&pod, &ranges),
            ["maximum memory usage per Pod is 1Gi, but limit is 1280Mi"]
        );
    }

    #[tokio::test]
    async fn claims_are_held_to_storage_min_and_max_and_pod_updates_are_not_checked() {
        let user = UserInfo::anonymous();
        let plugin = LimitRanger {
            lookup: Fixed(vec![range(json!([{"type": "PersistentVolumeClaim",
                "min": {"storage": "1Gi"}, "max": {"storage": "10Gi"}}]))]),
        };
        let claim = |s: &str| json!({"spec": {"resources": {"requests": {"storage": s}}}});
        let a = attrs(&user, "persistentvolumeclaims", Operation::Create);
        assert!(plugin.validate(&a, Some(&claim("5Gi"))).await.is_ok());
        let err = plugin.validate(&a, Some(&claim("20Gi"))).await.unwrap_err();
        assert_eq!(
            err.message,
            "persistentvolumeclaims \"web\" is forbidden: maximum storage usage per \
             PersistentVolumeClaim is 10Gi, but request is 20Gi"
        );
        let err = plugin
            .validate(&a, Some(&claim("500Mi")))
            .await
            .unwrap_err();
        assert!(err.message.ends_with(
            "minimum storage usage per PersistentVolumeClaim is 1Gi, but request is 500Mi"
        ));
        let pod = json!({"spec": {"containers": [{"name": "c"}]}});
        let update = attrs(&user, "pods", Operation::Update);
        let plugin = LimitRanger {
            lookup: Fixed(vec![container_range()]),
        };
        assert!(plugin.validate(&update, Some(&pod)).await.is_ok());
    }
}
