//! What a write may change of a stored pod: upstream's `ValidatePodUpdate` (an update changes
//! only images, `activeDeadlineSeconds`, tolerations by addition, scheduling gates by removal,
//! and a gated pod's node constraints by addition) and the `resize` subresource's
//! `dropNonResizeUpdates` and `ValidatePodResize` (only cpu and memory of containers and
//! sidecars, the QoS class kept, nothing removed, memory limits not lowered in place).

use serde_json::{Map, Value, json};
use skiff_apimachinery::quantity::Quantity;
use skiff_apimachinery::validation::{FieldError, FieldPath};

use super::pod::{CONTAINER_LISTS, qos_class};

/// Upstream's `updatablePodSpecFields`, as its error lists them.
const UPDATABLE: &[&str] = &[
    "`spec.containers[*].image`",
    "`spec.initContainers[*].image`",
    "`spec.activeDeadlineSeconds`",
    "`spec.tolerations` (only additions to existing tolerations)",
    "`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)",
];

const MIRROR_ANNOTATION: &str = "kubernetes.io/config.mirror";

fn list<'a>(spec: &'a Value, field: &str) -> &'a [Value] {
    spec.get(field)
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

/// A sidecar: an init container that restarts (`restartPolicy: Always`).
fn is_sidecar(container: &Value) -> bool {
    container.get("restartPolicy").and_then(Value::as_str) == Some("Always")
}

/// Upstream's semantic equality on decoded JSON: a null or empty list is the same as an absent
/// field (Go decodes all three to a nil slice), and quantities that parse compare by value.
pub(crate) fn semantic_eq(a: &Value, b: &Value) -> bool {
    fn unset(v: &Value) -> bool {
        v.is_null() || v.as_array().is_some_and(Vec::is_empty)
    }
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let keys = x.keys().chain(y.keys());
            keys.into_iter().all(|k| match (x.get(k), y.get(k)) {
                (Some(p), Some(q)) => semantic_eq(p, q),
                (Some(v), None) | (None, Some(v)) => unset(v),
                (None, None) => true,
            })
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| semantic_eq(p, q))
        }
        (Value::String(x), Value::String(y)) if x != y => {
            match (Quantity::parse(x), Quantity::parse(y)) {
                (Ok(p), Ok(q)) => p.nano_value() == q.nano_value(),
                _ => false,
            }
        }
        _ => a == b || (unset(a) && unset(b)),
    }
}

/// The paths at which `a` and `b` differ, each with both values (`-` old, `+` new), for the
/// error of a forbidden update (upstream appends a `cmp.Diff` of the specs).
pub(crate) fn diff(path: &str, old: &Value, new: &Value, out: &mut Vec<String>) {
    if semantic_eq(old, new) {
        return;
    }
    match (old, new) {
        (Value::Object(x), Value::Object(y)) => {
            let mut keys: Vec<&String> = x.keys().chain(y.keys()).collect();
            keys.sort();
            keys.dedup();
            for k in keys {
                let (p, q) = (
                    x.get(k).unwrap_or(&Value::Null),
                    y.get(k).unwrap_or(&Value::Null),
                );
                diff(&format!("{path}.{k}"), p, q, out);
            }
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
            for (i, (p, q)) in x.iter().zip(y).enumerate() {
                diff(&format!("{path}[{i}]"), p, q, out);
            }
        }
        _ => {
            out.push(format!("- {path}: {old}"));
            out.push(format!("+ {path}: {new}"));
        }
    }
}

/// Upstream's `ValidatePodUpdate` for the spec: `spec` is the new (defaulted) spec, `old_spec`
/// the stored one. Scheduling gates are checked by the caller.
pub(crate) fn validate_spec_update(spec: &Value, old_spec: &Value) -> Vec<FieldError> {
    let path = FieldPath::new("spec");
    let mut errs = Vec::new();
    // upstream's `ValidateContainerUpdates`: the same number of containers, images trimmed
    for field in ["containers", "initContainers"] {
        let (new, old) = (list(spec, field), list(old_spec, field));
        if new.len() != old.len() {
            errs.push(FieldError::forbidden(
                &path.child(field),
                "pod updates may not add or remove containers",
            ));
            return errs;
        }
        for (i, c) in new.iter().enumerate() {
            let image = c.get("image").and_then(Value::as_str).unwrap_or("");
            if image.trim() != image {
                errs.push(FieldError::invalid(
                    &path.child(field).index(i).child("image"),
                    json!(image),
                    "must not have leading or trailing whitespace",
                ));
            }
        }
    }
    if let Some(e) = validate_active_deadline(spec, old_spec, &path) {
        errs.push(e);
        return errs;
    }
    errs.extend(validate_only_added_tolerations(spec, old_spec, &path));
    if semantic_eq(spec, old_spec) {
        return errs;
    }
    // munge what may change back to the old values, then nothing else may differ
    let mut munged = spec.clone();
    for field in ["containers", "initContainers"] {
        if let Some(cs) = munged.get_mut(field).and_then(Value::as_array_mut) {
            for (c, old) in cs.iter_mut().zip(list(old_spec, field)) {
                c["image"] = old.get("image").cloned().unwrap_or(Value::Null);
            }
        }
    }
    for field in ["activeDeadlineSeconds", "schedulingGates", "tolerations"] {
        set_or_remove(&mut munged, field, old_spec.get(field));
    }
    let old_grace = old_spec
        .get("terminationGracePeriodSeconds")
        .and_then(Value::as_i64);
    if old_grace.is_some_and(|g| g < 0)
        && munged
            .get("terminationGracePeriodSeconds")
            .and_then(Value::as_i64)
            == Some(1)
    {
        set_or_remove(
            &mut munged,
            "terminationGracePeriodSeconds",
            old_spec.get("terminationGracePeriodSeconds"),
        );
    }
    if !list(old_spec, "schedulingGates").is_empty() {
        errs.extend(munge_gated_node_constraints(&mut munged, old_spec, &path));
    }
    if !semantic_eq(&munged, old_spec) {
        let mut lines = Vec::new();
        diff("spec", old_spec, &munged, &mut lines);
        errs.push(FieldError::forbidden(
            &path,
            format!(
                "pod updates may not change fields other than {}\n{}",
                UPDATABLE.join(","),
                lines.join("\n")
            ),
        ));
    }
    errs
}

fn set_or_remove(obj: &mut Value, field: &str, value: Option<&Value>) {
    let Some(map) = obj.as_object_mut() else {
        return;
    };
    match value {
        Some(v) => map.insert(field.to_string(), v.clone()),
        None => map.remove(field),
    };
}

/// `activeDeadlineSeconds` may be set, or lowered, never raised or unset.
fn validate_active_deadline(
    spec: &Value,
    old_spec: &Value,
    path: &FieldPath,
) -> Option<FieldError> {
    let path = path.child("activeDeadlineSeconds");
    let old = old_spec
        .get("activeDeadlineSeconds")
        .and_then(Value::as_i64);
    match spec.get("activeDeadlineSeconds").and_then(Value::as_i64) {
        Some(new) if !(0..=i64::from(i32::MAX)).contains(&new) => Some(FieldError::invalid(
            &path,
            json!(new),
            format!("must be between 0 and {}, inclusive", i32::MAX),
        )),
        Some(new) if old.is_some_and(|old| old < new) => Some(FieldError::invalid(
            &path,
            json!(new),
            "must be less than or equal to previous value",
        )),
        None if old.is_some() => Some(FieldError::invalid(
            &path,
            Value::Null,
            "must not update from a positive integer to nil value",
        )),
        _ => None,
    }
}

/// Upstream's `validateOnlyAddedTolerations`: every old toleration is still there (its
/// `tolerationSeconds` may change).
fn validate_only_added_tolerations(
    spec: &Value,
    old_spec: &Value,
    path: &FieldPath,
) -> Vec<FieldError> {
    let without_seconds = |t: &Value| {
        let mut t = t.clone();
        if let Some(m) = t.as_object_mut() {
            m.remove("tolerationSeconds");
        }
        t
    };
    let new: Vec<Value> = list(spec, "tolerations")
        .iter()
        .map(without_seconds)
        .collect();
    let kept = list(old_spec, "tolerations")
        .iter()
        .all(|old| new.iter().any(|t| semantic_eq(t, &without_seconds(old))));
    if kept {
        Vec::new()
    } else {
        vec![FieldError::forbidden(
            &path.child("tolerations"),
            "existing toleration can not be modified except its tolerationSeconds",
        )]
    }
}

/// A gated pod may gain node constraints: labels added to `nodeSelector`, and requirements
/// added to the existing terms of its required node affinity (upstream's
/// `validateNodeSelectorMutation` and `validateNodeAffinityMutation`). Checks them and puts the
/// old values back into `munged`.
fn munge_gated_node_constraints(
    munged: &mut Value,
    old_spec: &Value,
    path: &FieldPath,
) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let old_selector = old_spec.get("nodeSelector").and_then(Value::as_object);
    let new_selector = munged.get("nodeSelector").cloned().unwrap_or(Value::Null);
    let only_added = old_selector
        .into_iter()
        .flatten()
        .all(|(k, v)| new_selector.get(k) == Some(v));
    if !only_added {
        errs.push(FieldError::invalid(
            &path.child("nodeSelector"),
            new_selector,
            "only additions to spec.nodeSelector are allowed (no mutations or deletions)",
        ));
    }
    set_or_remove(munged, "nodeSelector", old_spec.get("nodeSelector"));

    let terms_path = path
        .child("affinity")
        .child("nodeAffinity")
        .child("requiredDuringSchedulingIgnoredDuringExecution")
        .child("nodeSelectorTerms");
    let terms = |spec: &Value| -> Vec<Value> {
        spec.pointer(
            "/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution/nodeSelectorTerms",
        )
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
    };
    let (old_terms, new_terms) = (terms(old_spec), terms(munged));
    if !old_terms.is_empty() && old_terms.len() != new_terms.len() {
        errs.push(FieldError::invalid(
            &terms_path,
            json!(new_terms),
            "no additions/deletions to non-empty NodeSelectorTerms list are allowed",
        ));
    } else {
        for (i, (old, new)) in old_terms.iter().zip(&new_terms).enumerate() {
            if !only_additions(old, new) {
                errs.push(FieldError::invalid(
                    &terms_path.index(i),
                    new.clone(),
                    "only additions are allowed (no mutations or deletions)",
                ));
            }
        }
    }
    let old_affinity = old_spec.pointer("/affinity/nodeAffinity").cloned();
    match munged.get_mut("affinity").and_then(Value::as_object_mut) {
        Some(affinity) => {
            match old_affinity {
                Some(a) => affinity.insert("nodeAffinity".into(), a),
                None => affinity.remove("nodeAffinity"),
            };
            if affinity.is_empty() && old_spec.get("affinity").is_none() {
                set_or_remove(munged, "affinity", None);
            }
        }
        None => {
            if let Some(a) = old_affinity {
                munged["affinity"] = json!({ "nodeAffinity": a });
            }
        }
    }
    errs
}

/// Whether `new` is `old` with requirements appended to its `matchExpressions` and
/// `matchFields`.
fn only_additions(old: &Value, new: &Value) -> bool {
    ["matchExpressions", "matchFields"].iter().all(|field| {
        let (o, n) = (list(old, field), list(new, field));
        o.len() <= n.len() && o.iter().zip(n).all(|(a, b)| semantic_eq(a, b))
    })
}

/// Upstream's `dropNonResizeUpdates`: a write to `resize` keeps the stored pod but for the
/// containers' (and sidecars') `resources` and `resizePolicy`, matched by name.
pub(crate) fn drop_non_resize_updates(pod: &mut Value, old: &Value) {
    let mut kept = old.clone();
    for field in CONTAINER_LISTS {
        let new = list(&pod["spec"], field).to_vec();
        let Some(containers) = kept["spec"].get_mut(field).and_then(Value::as_array_mut) else {
            continue;
        };
        for c in containers.iter_mut() {
            if field == "initContainers" && !is_sidecar(c) {
                continue;
            }
            let Some(n) = new.iter().find(|n| n.get("name") == c.get("name")) else {
                continue;
            };
            for part in ["resources", "resizePolicy"] {
                set_or_remove(c, part, n.get(part));
            }
        }
    }
    *pod = kept;
}

/// Upstream's `ValidatePodResize`, after [`drop_non_resize_updates`]: `pod` differs from `old`
/// only in container resources and resize policies.
pub(crate) fn validate_resize(pod: &Value, old: &Value) -> Vec<FieldError> {
    let root = FieldPath::new("");
    let has_pod_resources = |p: &Value| {
        ["requests", "limits"].iter().any(|w| {
            p.pointer(&format!("/spec/resources/{w}"))
                .and_then(Value::as_object)
                .is_some_and(|m| !m.is_empty())
        })
    };
    if has_pod_resources(old) || has_pod_resources(pod) {
        return vec![FieldError::forbidden(
            &root,
            "pods with pod-level resources cannot be resized",
        )];
    }
    if old
        .pointer("/metadata/annotations")
        .and_then(|a| a.get(MIRROR_ANNOTATION))
        .is_some()
    {
        return vec![FieldError::forbidden(
            &root,
            "static pods cannot be resized",
        )];
    }
    if old.pointer("/spec/os/name").and_then(Value::as_str) == Some("windows") {
        return vec![FieldError::forbidden(
            &root,
            "windows pods cannot be resized",
        )];
    }
    let spec_path = FieldPath::new("spec");
    let mut errs = Vec::new();
    let old_qos = old
        .pointer("/status/qosClass")
        .and_then(Value::as_str)
        .unwrap_or_else(|| qos_class(&old["spec"]));
    if old_qos != qos_class(&pod["spec"]) {
        let shown = pod
            .pointer("/status/qosClass")
            .cloned()
            .unwrap_or(json!(""));
        errs.push(FieldError::invalid(
            &spec_path,
            shown,
            "Pod QOS Class may not change as a result of resizing",
        ));
    }
    if !resize_supported(old) {
        errs.push(FieldError::forbidden(
            &spec_path,
            "Pod running on node without support for resize",
        ));
    }
    for field in CONTAINER_LISTS {
        let (new, before) = (list(&pod["spec"], field), list(&old["spec"], field));
        for (i, (c, o)) in new.iter().zip(before).enumerate() {
            let path = spec_path.child(field).index(i).child("resources");
            if field == "containers" || is_sidecar(o) {
                errs.extend(validate_container_resize(c, o, &path));
            }
            if !semantic_eq(&without_cpu_memory_changes(c, o), o) {
                let message = match field {
                    "containers" => "only cpu and memory resources are mutable",
                    _ if is_sidecar(o) => {
                        "only cpu and memory resources for sidecar containers are mutable"
                    }
                    _ => "resources for non-sidecar init containers are immutable",
                };
                errs.push(FieldError::forbidden(&spec_path, message));
            }
        }
    }
    errs
}

/// Upstream's `isPodResizeRequestSupported`: a running pod whose first running container
/// reports no `resources` in its status is on a node that cannot resize.
fn resize_supported(pod: &Value) -> bool {
    let statuses = pod
        .pointer("/status/containerStatuses")
        .and_then(Value::as_array);
    statuses
        .into_iter()
        .flatten()
        .find(|s| s.pointer("/state/running").is_some())
        .is_none_or(|s| s.get("resources").is_some_and(|r| !r.is_null()))
}

/// Upstream's `validateContainerResize`: no request or limit removed; a memory limit lowered
/// or added only by restarting the container.
fn validate_container_resize(c: &Value, old: &Value, path: &FieldPath) -> Vec<FieldError> {
    let names = |c: &Value, which: &str| -> Map<String, Value> {
        c.pointer(&format!("/resources/{which}"))
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default()
    };
    let mut errs = Vec::new();
    for (which, message) in [
        ("requests", "resource requests cannot be removed"),
        ("limits", "resource limits cannot be removed"),
    ] {
        let new = names(c, which);
        if names(old, which).keys().any(|k| !new.contains_key(k)) {
            errs.push(FieldError::forbidden(&path.child(which), message));
        }
    }
    let memory_policy = list(c, "resizePolicy")
        .iter()
        .find(|p| p.get("resourceName").and_then(Value::as_str) == Some("memory"))
        .and_then(|p| p.get("restartPolicy").and_then(Value::as_str))
        .unwrap_or("");
    if memory_policy == "NotRequired" || memory_policy.is_empty() {
        let limit = |c: &Value| {
            c.pointer("/resources/limits/memory")
                .and_then(Value::as_str)
                .and_then(|q| Quantity::parse(q).ok())
                .map(|q| q.nano_value())
        };
        let at = path.child("limits").key("memory");
        match (limit(old), limit(c)) {
            (Some(before), Some(after)) if after < before => errs.push(FieldError::forbidden(
                &at,
                "memory limits cannot be decreased unless resizePolicy is RestartContainer",
            )),
            (None, Some(_)) => errs.push(FieldError::forbidden(
                &at,
                "memory limits cannot be added unless resizePolicy is RestartContainer",
            )),
            _ => {}
        }
    }
    errs
}

/// Upstream's `dropCPUMemoryResourcesFromContainer`: `c` with its cpu and memory requests and
/// limits put back to `old`'s.
fn without_cpu_memory_changes(c: &Value, old: &Value) -> Value {
    let mut c = c.clone();
    for which in ["requests", "limits"] {
        let Some(old_list) = old
            .pointer(&format!("/resources/{which}"))
            .and_then(Value::as_object)
        else {
            if let Some(r) = c.get_mut("resources").and_then(Value::as_object_mut) {
                r.remove(which);
            }
            continue;
        };
        let mut list = c
            .pointer(&format!("/resources/{which}"))
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        for r in ["cpu", "memory"] {
            match old_list.get(r) {
                Some(v) => list.insert(r.to_string(), v.clone()),
                None => list.remove(r),
            };
        }
        c["resources"][which] = Value::Object(list);
    }
    c
}

#[cfg(test)]
#[path = "pod_update_tests.rs"]
mod tests;
