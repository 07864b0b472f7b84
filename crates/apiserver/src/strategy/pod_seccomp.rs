//! A pod's deprecated seccomp annotations (`seccomp.security.alpha.kubernetes.io/pod`,
//! `container.seccomp.security.alpha.kubernetes.io/<container>`), checked as upstream's API
//! server checks them since v1.27, when they became non-functional (kubernetes#114947): nothing
//! is copied between them and `securityContext.seccompProfile` any more (the kubelet reads
//! only the fields), but an annotation must still name a valid profile
//! (`ValidateSeccompPodAnnotations`), and where a pod or container sets both, they must agree
//! (`validateSeccompAnnotationsAndFields`).

use serde_json::Value;
use skiff_apimachinery::validation::{FieldError, FieldPath};

/// The pod's annotation (upstream's `SeccompPodAnnotationKey`).
pub const POD_ANNOTATION: &str = "seccomp.security.alpha.kubernetes.io/pod";
/// The prefix of a container's annotation (upstream's `SeccompContainerAnnotationKeyPrefix`).
pub const CONTAINER_ANNOTATION_PREFIX: &str = "container.seccomp.security.alpha.kubernetes.io/";

const RUNTIME_DEFAULT: &str = "runtime/default";
const DOCKER_DEFAULT: &str = "docker/default";
const UNCONFINED: &str = "unconfined";
const LOCALHOST_PREFIX: &str = "localhost/";

/// The container lists in the order upstream's `VisitContainersWithPath` walks them.
const CONTAINER_LISTS: [&str; 3] = ["initContainers", "containers", "ephemeralContainers"];

/// The field errors of the pod's seccomp annotations: values that name no profile, then
/// annotations that disagree with the field beside them.
pub fn validate(pod: &Value) -> Vec<FieldError> {
    let Some(annotations) = pod
        .pointer("/metadata/annotations")
        .and_then(Value::as_object)
    else {
        return Vec::new();
    };
    let annotation = |key: &str| annotations.get(key).and_then(Value::as_str);
    let metadata = FieldPath::new("metadata").child("annotations");
    let mut errs = Vec::new();
    if let Some(value) = annotation(POD_ANNOTATION) {
        errs.extend(validate_profile(value, &metadata.child(POD_ANNOTATION)));
    }
    for (key, value) in annotations {
        if key.starts_with(CONTAINER_ANNOTATION_PREFIX)
            && let Some(value) = value.as_str()
        {
            errs.extend(validate_profile(value, &metadata.child(key.as_str())));
        }
    }

    let spec_path = FieldPath::new("spec");
    let spec = pod.get("spec").unwrap_or(&Value::Null);
    if let (Some(value), Some(field)) = (
        annotation(POD_ANNOTATION),
        spec.pointer("/securityContext/seccompProfile"),
    ) {
        let path = spec_path.child("securityContext").child("seccompProfile");
        errs.extend(field_matches(value, field, &path));
    }
    for list in CONTAINER_LISTS {
        let containers = spec.get(list).and_then(Value::as_array);
        for (i, container) in containers.into_iter().flatten().enumerate() {
            let name = container.get("name").and_then(Value::as_str).unwrap_or("");
            let key = format!("{CONTAINER_ANNOTATION_PREFIX}{name}");
            let field = container.pointer("/securityContext/seccompProfile");
            if let (Some(value), Some(field)) = (annotation(&key), field) {
                let path = spec_path.child(list).index(i);
                let path = path.child("securityContext").child("seccompProfile");
                errs.extend(field_matches(value, field, &path));
            }
        }
    }
    errs
}

/// An annotation's value: `runtime/default`, `docker/default`, `unconfined`, or
/// `localhost/<path>` with a relative path that does not climb out (upstream's
/// `ValidateSeccompProfile` and `validateLocalDescendingPath`).
fn validate_profile(value: &str, path: &FieldPath) -> Vec<FieldError> {
    if [RUNTIME_DEFAULT, DOCKER_DEFAULT, UNCONFINED].contains(&value) {
        return Vec::new();
    }
    let Some(local) = value.strip_prefix(LOCALHOST_PREFIX) else {
        return vec![FieldError::invalid(
            path,
            value,
            "must be a valid seccomp profile",
        )];
    };
    let mut errs = Vec::new();
    if local.starts_with('/') {
        errs.push(FieldError::invalid(path, local, "must be a relative path"));
    }
    if local.split('/').any(|part| part == "..") {
        errs.push(FieldError::invalid(path, local, "must not contain '..'"));
    }
    errs
}

/// Whether an annotation says what the `seccompProfile` field beside it says (upstream's
/// `validateSeccompAnnotationsAndFieldsMatch`); a type it does not know is left to the field's
/// own validation.
fn field_matches(annotation: &str, field: &Value, path: &FieldPath) -> Option<FieldError> {
    let type_mismatch = || {
        Some(FieldError::forbidden(
            &path.child("type"),
            "seccomp type in annotation and field must match",
        ))
    };
    match field.get("type").and_then(Value::as_str) {
        Some("Unconfined") if annotation != UNCONFINED => type_mismatch(),
        Some("RuntimeDefault") if ![RUNTIME_DEFAULT, DOCKER_DEFAULT].contains(&annotation) => {
            type_mismatch()
        }
        Some("Localhost") => {
            let Some(local) = annotation.strip_prefix(LOCALHOST_PREFIX) else {
                return type_mismatch();
            };
            let profile = field.get("localhostProfile").and_then(Value::as_str);
            (profile != Some(local)).then(|| {
                FieldError::forbidden(
                    &path.child("localhostProfile"),
                    "seccomp profile in annotation and field must match",
                )
            })
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn pod(annotations: Value, spec: Value) -> Value {
        json!({"metadata": {"name": "web", "annotations": annotations}, "spec": spec})
    }

    fn messages(pod: &Value) -> Vec<String> {
        validate(pod).iter().map(ToString::to_string).collect()
    }

    #[test]
    fn annotations_must_name_a_profile_with_a_relative_descending_path() {
        let ok = pod(
            json!({POD_ANNOTATION: "runtime/default",
                   "container.seccomp.security.alpha.kubernetes.io/a": "docker/default",
                   "container.seccomp.security.alpha.kubernetes.io/b": "unconfined",
                   "container.seccomp.security.alpha.kubernetes.io/c": "localhost/prof/a.json"}),
            json!({"containers": [{"name": "a"}]}),
        );
        assert!(messages(&ok).is_empty(), "{:?}", messages(&ok));
        let bad = pod(
            json!({POD_ANNOTATION: "default",
                   "container.seccomp.security.alpha.kubernetes.io/a": "localhost//etc/x",
                   "container.seccomp.security.alpha.kubernetes.io/b": "localhost/../x"}),
            json!({"containers": [{"name": "a"}]}),
        );
        assert_eq!(
            messages(&bad),
            [
                "metadata.annotations.seccomp.security.alpha.kubernetes.io/pod: Invalid value: \
                 \"default\": must be a valid seccomp profile",
                "metadata.annotations.container.seccomp.security.alpha.kubernetes.io/a: Invalid \
                 value: \"/etc/x\": must be a relative path",
                "metadata.annotations.container.seccomp.security.alpha.kubernetes.io/b: Invalid \
                 value: \"../x\": must not contain '..'",
            ]
        );
    }

    #[test]
    fn an_annotation_beside_a_field_must_say_the_same() {
        let agreeing = pod(
            json!({POD_ANNOTATION: "docker/default",
                   "container.seccomp.security.alpha.kubernetes.io/app": "localhost/a.json"}),
            json!({"securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
                   "containers": [{"name": "app", "securityContext": {"seccompProfile":
                       {"type": "Localhost", "localhostProfile": "a.json"}}}]}),
        );
        assert!(messages(&agreeing).is_empty(), "{:?}", messages(&agreeing));
        let disagreeing = pod(
            json!({POD_ANNOTATION: "runtime/default",
                   "container.seccomp.security.alpha.kubernetes.io/init": "unconfined",
                   "container.seccomp.security.alpha.kubernetes.io/app": "localhost/b.json",
                   "container.seccomp.security.alpha.kubernetes.io/debug": "runtime/default"}),
            json!({"securityContext": {"seccompProfile": {"type": "Unconfined"}},
                   "initContainers": [{"name": "init", "securityContext": {"seccompProfile":
                       {"type": "Localhost", "localhostProfile": "a.json"}}}],
                   "containers": [{"name": "app", "securityContext": {"seccompProfile":
                       {"type": "Localhost", "localhostProfile": "a.json"}}}],
                   "ephemeralContainers": [{"name": "debug", "securityContext":
                       {"seccompProfile": {"type": "Unconfined"}}}]}),
        );
        assert_eq!(
            messages(&disagreeing),
            [
                "spec.securityContext.seccompProfile.type: Forbidden: seccomp type in \
                 annotation and field must match",
                "spec.initContainers[0].securityContext.seccompProfile.type: Forbidden: seccomp \
                 type in annotation and field must match",
                "spec.containers[0].securityContext.seccompProfile.localhostProfile: Forbidden: \
                 seccomp profile in annotation and field must match",
                "spec.ephemeralContainers[0].securityContext.seccompProfile.type: Forbidden: \
                 seccomp type in annotation and field must match",
            ]
        );
    }

    #[test]
    fn a_new_pod_is_refused_for_its_annotations() {
        use crate::strategy::Strategy;
        let bad = pod(
            json!({POD_ANNOTATION: "default"}),
            json!({"containers": [{"name": "app", "image": "busybox"}]}),
        );
        let errs = super::super::pod::PodStrategy.validate(&bad);
        assert!(
            errs.iter()
                .any(|e| e.to_string().contains("must be a valid seccomp profile")),
            "{errs:?}"
        );
    }
}
