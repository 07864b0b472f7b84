//! Rules several kinds share: filling a default, reading integers, the non-negative,
//! int-or-percent and immutability checks with upstream's messages, semantic equality (nil and
//! empty alike), and pod templates of workloads (their defaults, their validation, and the
//! selector that must match their labels).

use serde_json::{Map, Value};
use skiff_apimachinery::labels::Selector;
use skiff_apimachinery::validation::{
    self, FieldError, FieldPath, names::regex_error, validate_annotations, validate_labels,
};

use super::pod::{default_pod_spec, validate_pod_spec};

/// Upstream's `isNegativeErrorMsg`.
pub const NEGATIVE: &str = "must be greater than or equal to 0";
/// Upstream's `ValidateImmutableField` detail.
pub const IMMUTABLE: &str = "field is immutable";

/// Sets `map[key]` to `value` when it is absent or null (`map` must be an object).
pub fn set_default(map: &mut Value, key: &str, value: Value) {
    if let Some(m) = map.as_object_mut() {
        let slot = m.entry(key.to_string()).or_insert(Value::Null);
        if slot.is_null() {
            *slot = value;
        }
    }
}

/// `parent[key]` as an object, created (or replaced, if null) when needed. `parent` must be an
/// object; anything else yields a detached scratch value.
pub fn object_at<'a>(parent: &'a mut Value, key: &str) -> &'a mut Value {
    if !parent.is_object() {
        return parent;
    }
    let m = parent.as_object_mut().expect("checked to be an object");
    let slot = m.entry(key.to_string()).or_insert(Value::Null);
    if slot.is_null() {
        *slot = Value::Object(Map::new());
    }
    slot
}

/// A JSON integer (also `1.0`), as the Go decoder reads an `int32`/`int64` field.
pub fn int(v: &Value) -> Option<i64> {
    v.as_i64()
        .or_else(|| v.as_f64().filter(|f| f.fract() == 0.0).map(|f| f as i64))
}

/// The integer at a JSON pointer (`/spec/replicas`).
pub fn int_at(v: &Value, pointer: &str) -> Option<i64> {
    v.pointer(pointer).and_then(int)
}

/// The string at a JSON pointer, empty when absent.
pub fn str_at<'a>(v: &'a Value, pointer: &str) -> &'a str {
    v.pointer(pointer).and_then(Value::as_str).unwrap_or("")
}

/// The strings of a JSON list (other items and non-lists give none).
pub fn strings(v: Option<&Value>) -> Vec<&str> {
    v.and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect()
}

/// Whether a value is absent in Go's sense: null, or an empty list or map.
pub fn is_empty(v: Option<&Value>) -> bool {
    match v {
        None | Some(Value::Null) => true,
        Some(Value::Array(a)) => a.is_empty(),
        Some(Value::Object(m)) => m.is_empty(),
        Some(Value::String(s)) => s.is_empty(),
        _ => false,
    }
}

/// Upstream's `ValidateNonnegativeField` for the integer at `v` (absent passes).
pub fn nonnegative(v: Option<&Value>, path: &FieldPath) -> Vec<FieldError> {
    match v.and_then(int) {
        Some(n) if n < 0 => vec![FieldError::invalid(path, n, NEGATIVE)],
        _ => Vec::new(),
    }
}

/// Drops nulls and empty lists and maps, as `apiequality.Semantic` treats nil and empty alike.
fn normalized(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .map(|(k, v)| (k.clone(), normalized(v)))
                .filter(|(_, v)| !is_empty(Some(v)) || v.is_string())
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(normalized).collect()),
        other => other.clone(),
    }
}

/// Semantic equality: nil and empty lists or maps are equal.
pub fn semantic_eq(a: Option<&Value>, b: Option<&Value>) -> bool {
    let norm = |v: Option<&Value>| v.map(normalized).unwrap_or(Value::Null);
    let (a, b) = (norm(a), norm(b));
    let empty = |v: &Value| is_empty(Some(v)) && !v.is_string();
    (empty(&a) && empty(&b)) || a == b
}

/// Upstream's `ValidateImmutableField`: `field is immutable` showing the new value.
pub fn immutable(new: Option<&Value>, old: Option<&Value>, path: &FieldPath) -> Vec<FieldError> {
    if semantic_eq(new, old) {
        return Vec::new();
    }
    let shown = new.cloned().unwrap_or(Value::Null);
    vec![FieldError::invalid(path, shown, IMMUTABLE)]
}

/// The number of a valid percent string (`25%`), as upstream's `getPercentValue`.
fn percent(s: &str) -> Option<i64> {
    let digits = s.strip_suffix('%')?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(digits.parse().unwrap_or(i64::MAX))
}

/// Upstream's `ValidatePositiveIntOrPercent` (absent passes).
pub fn int_or_percent(v: Option<&Value>, path: &FieldPath) -> Vec<FieldError> {
    match v {
        Some(Value::String(s)) if percent(s).is_none() => {
            let msg = regex_error(
                "a valid percent string must be a numeric string followed by an ending '%'",
                "[0-9]+%",
                &["1%", "93%"],
            );
            vec![FieldError::invalid(path, s.as_str(), msg)]
        }
        Some(n @ Value::Number(_)) => nonnegative(Some(n), path),
        _ => Vec::new(),
    }
}

/// Upstream's `getIntOrPercentValue`: the percent's number, the integer, or a numeric string's
/// value (0 for anything else).
pub fn int_or_percent_value(v: Option<&Value>) -> i64 {
    match v {
        Some(Value::String(s)) => percent(s).unwrap_or_else(|| s.parse().unwrap_or(0)),
        Some(n) => int(n).unwrap_or(0),
        None => 0,
    }
}

/// Upstream's `IsNotMoreThan100Percent`.
pub fn not_over_100_percent(v: Option<&Value>, path: &FieldPath) -> Vec<FieldError> {
    match v {
        Some(Value::String(s)) if percent(s).is_some_and(|p| p > 100) => vec![FieldError::invalid(
            path,
            s.as_str(),
            "must not be greater than 100%",
        )],
        _ => Vec::new(),
    }
}

/// Pod-spec defaults inside a pod template (`template.spec`).
pub fn default_template(template: Option<&mut Value>) {
    if let Some(spec) = template.and_then(|t| t.get_mut("spec")) {
        default_pod_spec(spec);
    }
}

/// Upstream's `ValidatePodTemplateSpec`: labels and annotations (at `template.labels` and
/// `template.annotations`, as upstream names them) and the pod spec.
pub fn validate_template(template: &Value, path: &FieldPath) -> Vec<FieldError> {
    let mut errs = validate_template_meta(template, path);
    let spec = template.get("spec").unwrap_or(&Value::Null);
    errs.extend(validate_pod_spec(spec, &path.child("spec")));
    if !is_empty(spec.get("ephemeralContainers")) {
        errs.push(FieldError::forbidden(
            &path.child("spec").child("ephemeralContainers"),
            "ephemeral containers not allowed in pod template",
        ));
    }
    errs
}

/// Templates of controllers whose pods run forever (ReplicaSet, StatefulSet, DaemonSet): the pod
/// must restart `Always` and may not set `activeDeadlineSeconds` (upstream's message names the
/// `kind`). `template_path` is the template's own path (`spec.template`).
pub fn validate_long_running_template(
    template: &Value,
    template_path: &FieldPath,
    kind: &str,
) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let pod_path = template_path.child("spec");
    let restart = str_at(template, "/spec/restartPolicy");
    if restart != "Always" {
        errs.push(FieldError::not_supported(
            &pod_path.child("restartPolicy"),
            restart,
            &["Always"],
        ));
    }
    if template
        .pointer("/spec/activeDeadlineSeconds")
        .is_some_and(|v| !v.is_null())
    {
        errs.push(FieldError::forbidden(
            &pod_path.child("activeDeadlineSeconds"),
            format!("activeDeadlineSeconds in {kind} is not Supported"),
        ));
    }
    errs
}

/// `spec.selector` may not change on update (workload controllers).
pub fn selector_immutable(new: &Value, old: &Value) -> Vec<FieldError> {
    immutable(
        new.pointer("/spec/selector"),
        old.pointer("/spec/selector"),
        &FieldPath::new("spec").child("selector"),
    )
}

/// The labels and annotations of a template's metadata.
pub fn validate_template_meta(template: &Value, path: &FieldPath) -> Vec<FieldError> {
    let null = Value::Null;
    let meta = template.get("metadata").unwrap_or(&null);
    let mut errs = validate_labels(meta.get("labels").unwrap_or(&null), &path.child("labels"));
    errs.extend(validate_annotations(
        meta.get("annotations").unwrap_or(&null),
        &path.child("annotations"),
    ));
    errs
}

/// A `metav1.LabelSelector` as a selector (null selects nothing); `None` if malformed.
pub fn as_selector(selector: Option<&Value>) -> Option<Selector> {
    Selector::from_label_selector(selector.unwrap_or(&Value::Null)).ok()
}

/// The labels of a template (`template.metadata.labels`), null when unset.
pub fn template_labels(template: Option<&Value>) -> Value {
    template
        .and_then(|t| t.pointer("/metadata/labels"))
        .cloned()
        .unwrap_or(Value::Null)
}

/// The error when `selector` does not select a template's labels.
pub fn selector_mismatch(
    selector: &Selector,
    template: Option<&Value>,
    path: &FieldPath,
) -> Option<FieldError> {
    let labels = template_labels(template);
    (!selector.matches(&labels)).then(|| {
        FieldError::invalid(
            &path.child("metadata").child("labels"),
            labels,
            "`selector` does not match template `labels`",
        )
    })
}

/// The selector checks of Deployments, ReplicaSets and StatefulSets: required, well-formed and
/// not empty (`empty selector is invalid for {what}`). Returns the errors and the parsed
/// selector.
pub fn required_selector(
    spec: &Value,
    path: &FieldPath,
    what: &str,
) -> (Vec<FieldError>, Option<Selector>) {
    let sel_path = path.child("selector");
    let raw = spec.get("selector").filter(|s| !s.is_null());
    let mut errs = Vec::new();
    match raw {
        None => errs.push(FieldError::required(&sel_path, "")),
        Some(sel) => {
            errs.extend(validation::validate_label_selector(sel, &sel_path));
            if is_empty(sel.get("matchLabels")) && is_empty(sel.get("matchExpressions")) {
                errs.push(FieldError::invalid(
                    &sel_path,
                    sel.clone(),
                    format!("empty selector is invalid for {what}"),
                ));
            }
        }
    }
    (errs, as_selector(raw))
}

/// Upstream's `ValidateNonSpecialIP` for a parsable address: not unspecified, loopback or
/// link-local (where node-local services such as metadata endpoints live).
pub fn non_special_ip(ip: &str, path: &FieldPath) -> Vec<FieldError> {
    use std::net::IpAddr;
    let Some(addr) = validation::parse_ip_sloppy(ip) else {
        return vec![FieldError::invalid(path, ip, "must be a valid IP address")];
    };
    let (unspecified, loopback, link_local, link_local_multicast) = match addr {
        IpAddr::V4(a) => (
            a.is_unspecified(),
            a.is_loopback(),
            a.is_link_local(),
            a.octets()[..3] == [224, 0, 0],
        ),
        IpAddr::V6(a) => (
            a.is_unspecified(),
            a.is_loopback(),
            a.segments()[0] & 0xffc0 == 0xfe80,
            a.segments()[0] & 0xff0f == 0xff02,
        ),
    };
    let mut errs = Vec::new();
    if unspecified {
        errs.push(FieldError::invalid(
            path,
            ip,
            format!("may not be unspecified ({ip})"),
        ));
    }
    if loopback {
        errs.push(FieldError::invalid(
            path,
            ip,
            "may not be in the loopback range (127.0.0.0/8, ::1/128)",
        ));
    }
    if link_local {
        errs.push(FieldError::invalid(
            path,
            ip,
            "may not be in the link-local range (169.254.0.0/16, fe80::/10)",
        ));
    }
    if link_local_multicast {
        errs.push(FieldError::invalid(
            path,
            ip,
            "may not be in the link-local multicast range (224.0.0.0/24, ff02::/10)",
        ));
    }
    errs
}

/// `a.b.c.d/n` or an IPv6 CIDR, as upstream's `IsValidCIDR`.
pub fn valid_cidr(s: &str) -> bool {
    let Some((ip, bits)) = s.split_once('/') else {
        return false;
    };
    let max = match validation::parse_ip_sloppy(ip) {
        Some(std::net::IpAddr::V4(_)) => 32,
        Some(std::net::IpAddr::V6(_)) => 128,
        None => return false,
    };
    bits.parse::<u8>().is_ok_and(|b| b <= max) && !bits.starts_with('+')
}

/// Upstream's `ValidateDNS1123Label` of a field.
pub fn dns1123_label(value: &str, path: &FieldPath) -> Vec<FieldError> {
    validation::is_dns1123_label(value)
        .into_iter()
        .map(|msg| FieldError::invalid(path, value, msg))
        .collect()
}

/// A table test case: what it shows, a change to a valid object, and the errors that follow.
#[cfg(test)]
pub type Case<W> = (&'static str, Box<dyn Fn(&mut Value)>, Vec<W>);

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn nil_and_empty_lists_and_maps_are_semantically_equal() {
        assert!(semantic_eq(None, Some(&json!({}))));
        assert!(semantic_eq(
            Some(&json!({"a": [], "b": {"c": null}})),
            Some(&json!({}))
        ));
        assert!(!semantic_eq(Some(&json!({"a": 1})), Some(&json!({}))));
        assert!(!semantic_eq(Some(&json!("")), Some(&json!("x"))));
    }

    #[test]
    fn int_or_percent_accepts_counts_and_percents_only() {
        let p = FieldPath::new("x");
        assert!(int_or_percent(Some(&json!("25%")), &p).is_empty());
        assert!(int_or_percent(Some(&json!(3)), &p).is_empty());
        assert_eq!(
            int_or_percent(Some(&json!(-1)), &p)[0].to_string(),
            "x: Invalid value: -1: must be greater than or equal to 0"
        );
        assert_eq!(
            int_or_percent(Some(&json!("abc")), &p)[0].to_string(),
            "x: Invalid value: \"abc\": a valid percent string must be a numeric string followed \
             by an ending '%' (e.g. '1%',  or '93%', regex used for validation is '[0-9]+%')"
        );
        assert_eq!(int_or_percent_value(Some(&json!("30%"))), 30);
        assert_eq!(int_or_percent_value(Some(&json!(2))), 2);
        assert_eq!(
            not_over_100_percent(Some(&json!("101%")), &p)[0].to_string(),
            "x: Invalid value: \"101%\": must not be greater than 100%"
        );
    }
}
