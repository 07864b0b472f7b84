//! Ephemeral containers: upstream's checks of `spec.ephemeralContainers` in any pod
//! (`validateEphemeralContainers`: names unique across all containers, `targetContainerName`
//! naming a regular or init container, only the fields of `allowedEphemeralContainerFields`,
//! no `subPath`), and the `ephemeralcontainers` subresource's strategy
//! (`podEphemeralContainersStrategy`): a write there keeps the stored pod but for its
//! ephemeral containers (`dropNonEphemeralContainerUpdates`), which may be added, never removed
//! or changed (`ValidatePodEphemeralContainersUpdate`). Pods are created without them, and an
//! update of the pod itself cannot change them (see [`super::pod_update`]).

use std::collections::HashSet;

use serde_json::{Value, json};
use skiff_apimachinery::validation::{FieldError, FieldPath};

use super::pod::default_container;
use super::pod_update::{diff, semantic_eq};

/// The pod's ephemeral container list.
pub const EPHEMERAL_CONTAINERS: &str = "ephemeralContainers";

/// The container fields an ephemeral container may not set (upstream's
/// `allowedEphemeralContainerFields` lists them as false, or not at all), in upstream's
/// struct order: ephemeral containers are not relied upon for the pod's service, so nothing
/// that serves traffic, reserves resources or hooks into the pod's lifecycle.
const FORBIDDEN_FIELDS: &[&str] = &[
    "ports",
    "resources",
    "resizePolicy",
    "restartPolicy",
    "livenessProbe",
    "readinessProbe",
    "startupProbe",
    "lifecycle",
];

/// Upstream's error detail for a forbidden field of an ephemeral container.
const NOT_FOR_EPHEMERAL: &str = "cannot be set for an Ephemeral Container";

/// Upstream's annotation of a mirror pod (a static pod's copy in the API).
const MIRROR_ANNOTATION: &str = "kubernetes.io/config.mirror";

fn list<'a>(spec: &'a Value, field: &str) -> &'a [Value] {
    spec.get(field)
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

fn name_of(c: &Value) -> &str {
    c.get("name").and_then(Value::as_str).unwrap_or("")
}

/// Whether a field is unset as Go sees it after decoding: absent or null, or for the
/// `resources` struct (which the API always serializes, as `{}` when empty) an empty object.
fn is_zero(field: &str, value: &Value) -> bool {
    value.is_null() || (field == "resources" && value.as_object().is_some_and(|m| m.is_empty()))
}

/// Upstream's defaults of an ephemeral container (`SetDefaults_EphemeralContainer`, those of a
/// container), for every pod spec that has them.
pub fn default_ephemeral_containers(spec: &mut Value) {
    if let Some(containers) = spec
        .get_mut(EPHEMERAL_CONTAINERS)
        .and_then(Value::as_array_mut)
    {
        containers.iter_mut().for_each(default_container);
    }
}

/// The checks of `validateEphemeralContainers` that are particular to ephemeral containers
/// (their names, images and resources are checked with the other containers'): a target that
/// is a regular or init container, no forbidden field, no `subPath` or `subPathExpr`.
pub fn validate_ephemeral_containers(spec: &Value, path: &FieldPath) -> Vec<FieldError> {
    let others: HashSet<&str> = ["initContainers", "containers"]
        .iter()
        .flat_map(|l| list(spec, l))
        .map(name_of)
        .collect();
    let mut errs = Vec::new();
    for (i, c) in list(spec, EPHEMERAL_CONTAINERS).iter().enumerate() {
        let p = path.child(EPHEMERAL_CONTAINERS).index(i);
        let target = c
            .get("targetContainerName")
            .and_then(Value::as_str)
            .unwrap_or("");
        if !target.is_empty() && !others.contains(target) {
            errs.push(FieldError::not_found(
                &p.child("targetContainerName"),
                json!(target),
            ));
        }
        for field in FORBIDDEN_FIELDS {
            if c.get(*field).is_some_and(|v| !is_zero(field, v)) {
                errs.push(FieldError::forbidden(&p.child(*field), NOT_FOR_EPHEMERAL));
            }
        }
        for (j, mount) in list(c, "volumeMounts").iter().enumerate() {
            for field in ["subPath", "subPathExpr"] {
                let set = mount
                    .get(field)
                    .and_then(Value::as_str)
                    .is_some_and(|s| !s.is_empty());
                if set {
                    let at = p.child("volumeMounts").index(j).child(field);
                    errs.push(FieldError::forbidden(&at, NOT_FOR_EPHEMERAL));
                }
            }
        }
    }
    errs
}

/// Upstream's check in `ValidatePodCreate`: ephemeral containers are added only through the
/// `ephemeralcontainers` subresource of an existing pod.
pub fn validate_none_on_create(spec: &Value) -> Option<FieldError> {
    (!list(spec, EPHEMERAL_CONTAINERS).is_empty()).then(|| {
        FieldError::forbidden(
            &FieldPath::new("spec").child(EPHEMERAL_CONTAINERS),
            "cannot be set on create",
        )
    })
}

/// Upstream's `dropNonEphemeralContainerUpdates`: a write to `ephemeralcontainers` keeps the
/// stored pod but for `spec.ephemeralContainers`, defaulted as on any write.
pub fn drop_non_ephemeral_container_updates(pod: &mut Value, old: &Value) {
    let mut kept = old.clone();
    let new = pod
        .pointer("/spec/ephemeralContainers")
        .cloned()
        .unwrap_or(Value::Null);
    if let Some(spec) = kept.get_mut("spec").and_then(Value::as_object_mut) {
        match new {
            Value::Null => spec.remove(EPHEMERAL_CONTAINERS),
            new => spec.insert(EPHEMERAL_CONTAINERS.into(), new),
        };
    }
    if let Some(spec) = kept.get_mut("spec") {
        default_ephemeral_containers(spec);
    }
    *pod = kept;
}

/// The second part of upstream's `ValidatePodEphemeralContainersUpdate`, after the pod's spec
/// is validated: a static pod's mirror gets none, and each ephemeral container the pod had is
/// still there, unchanged (matched by name: a patch does not keep their order).
pub fn validate_ephemeral_containers_update(pod: &Value, old: &Value) -> Vec<FieldError> {
    let mirror = old
        .pointer("/metadata/annotations")
        .and_then(|a| a.get(MIRROR_ANNOTATION))
        .is_some();
    if mirror {
        return vec![FieldError::forbidden(
            &FieldPath::new(""),
            "static pods do not support ephemeral containers",
        )];
    }
    let path = FieldPath::new("spec").child(EPHEMERAL_CONTAINERS);
    let new = list(&pod["spec"], EPHEMERAL_CONTAINERS);
    let mut errs = Vec::new();
    for was in list(&old["spec"], EPHEMERAL_CONTAINERS) {
        let name = name_of(was);
        match new.iter().find(|c| name_of(c) == name) {
            None => errs.push(FieldError::forbidden(
                &path,
                format!("existing ephemeral containers {name:?} may not be removed\n"),
            )),
            Some(now) if !semantic_eq(was, now) => {
                let mut lines = Vec::new();
                diff(name, was, now, &mut lines);
                errs.push(FieldError::forbidden(
                    &path,
                    format!(
                        "existing ephemeral containers {name:?} may not be changed\n{}",
                        lines.join("\n")
                    ),
                ));
            }
            Some(_) => {}
        }
    }
    errs
}

#[cfg(test)]
#[path = "pod_ephemeral_tests.rs"]
mod tests;
