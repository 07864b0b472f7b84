//! Validation of an object's `metadata` on create, as upstream's `ValidateObjectMeta`
//! (`k8s.io/apimachinery/pkg/api/validation/objectmeta.go`), plus the label, annotation and label
//! selector checks it is built from (`apis/meta/v1/validation`).

use super::field::{FieldError, FieldPath};
use super::gofmt;
use super::names::{is_dns1123_label, is_qualified_name, is_valid_label_value};
use serde_json::{Map, Value};

/// The most bytes all annotation keys and values of one object may add up to (upstream's
/// `TotalAnnotationSizeLimitB`, 256 KiB).
pub const TOTAL_ANNOTATION_SIZE_LIMIT_BYTES: usize = 256 * 1024;

/// The longest `managedFields[].manager` upstream accepts (`FieldManagerMaxLength`).
pub const FIELD_MANAGER_MAX_LENGTH: usize = 128;

/// The longest `managedFields[].subresource` upstream accepts (`MaxSubresourceNameLength`).
pub const MAX_SUBRESOURCE_NAME_LENGTH: usize = 256;

const FINALIZER_ORPHAN_DEPENDENTS: &str = "orphan";
const FINALIZER_DELETE_DEPENDENTS: &str = "foregroundDeletion";

/// The rules `metadata` follows on update beyond [`validate_object_meta`] (upstream's
/// `ValidateObjectMetaUpdate`, the part Skiff's generic update does not already enforce by
/// carrying fields over): no new finalizers once the object is being deleted.
pub fn validate_object_meta_update(meta: &Value, old: &Value) -> Vec<FieldError> {
    if old.get("deletionTimestamp").is_none_or(Value::is_null) {
        return Vec::new();
    }
    let list = |m: &Value| -> Vec<String> {
        m.get("finalizers")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|f| f.as_str().map(str::to_string))
            .collect()
    };
    let before = list(old);
    let mut added: Vec<String> = list(meta)
        .into_iter()
        .filter(|f| !before.contains(f))
        .collect();
    if added.is_empty() {
        return Vec::new();
    }
    added.sort();
    added.dedup();
    let go_slice: Vec<String> = added.iter().map(|f| gofmt::quote(f)).collect();
    vec![FieldError::forbidden(
        &FieldPath::new("metadata").child("finalizers"),
        format!(
            "no new finalizers can be added if the object is being deleted, found new finalizers []string{{{}}}",
            go_slice.join(", ")
        ),
    )]
}

/// Validates `metadata` of an object being created, in upstream's order: `generateName` and
/// `name` (against `name_check`, e.g. [`is_dns1123_subdomain`](super::is_dns1123_subdomain)),
/// the namespace by scope, `generation`, labels, annotations and their total size, owner
/// references, finalizers and managed fields. Paths start at `metadata`.
///
/// Upstream's name functions take a `prefix` flag for `generateName`; here `generateName` has a
/// trailing `-` masked before `name_check` sees it, which is what every upstream name function
/// does with that flag.
pub fn validate_object_meta(
    meta: &Value,
    namespaced: bool,
    name_check: fn(&str) -> Vec<String>,
) -> Vec<FieldError> {
    let path = FieldPath::new("metadata");
    let empty = Map::new();
    let obj = meta.as_object().unwrap_or(&empty);
    let mut errs = Vec::new();

    let generate_name = string_field(obj, "generateName", &path, &mut errs);
    if !generate_name.is_empty() {
        for msg in name_check(&mask_trailing_dash(generate_name)) {
            errs.push(FieldError::invalid(
                &path.child("generateName"),
                generate_name,
                msg,
            ));
        }
    }
    let name = string_field(obj, "name", &path, &mut errs);
    if name.is_empty() {
        errs.push(FieldError::required(
            &path.child("name"),
            "name or generateName is required",
        ));
    } else {
        for msg in name_check(name) {
            errs.push(FieldError::invalid(&path.child("name"), name, msg));
        }
    }

    let namespace = string_field(obj, "namespace", &path, &mut errs);
    let ns_path = path.child("namespace");
    if namespaced {
        if namespace.is_empty() {
            errs.push(FieldError::required(&ns_path, ""));
        } else {
            for msg in is_dns1123_label(namespace) {
                errs.push(FieldError::invalid(&ns_path, namespace, msg));
            }
        }
    } else if !namespace.is_empty() {
        errs.push(FieldError::forbidden(&ns_path, "not allowed on this type"));
    }

    if let Some(generation) = obj.get("generation").and_then(Value::as_i64)
        && generation < 0
    {
        errs.push(FieldError::invalid(
            &path.child("generation"),
            generation,
            "must be greater than or equal to 0",
        ));
    }

    errs.extend(validate_labels(
        obj.get("labels").unwrap_or(&Value::Null),
        &path.child("labels"),
    ));
    errs.extend(validate_annotations(
        obj.get("annotations").unwrap_or(&Value::Null),
        &path.child("annotations"),
    ));
    errs.extend(validate_owner_references(
        obj.get("ownerReferences").unwrap_or(&Value::Null),
        &path.child("ownerReferences"),
    ));
    errs.extend(validate_finalizers(
        obj.get("finalizers").unwrap_or(&Value::Null),
        &path.child("finalizers"),
    ));
    errs.extend(validate_managed_fields(
        obj.get("managedFields").unwrap_or(&Value::Null),
        &path.child("managedFields"),
    ));
    errs
}

/// Upstream's `maskTrailingDash`: a generateName may end in `-`, which the name check must not
/// reject, so the dash is replaced by a letter.
fn mask_trailing_dash(name: &str) -> String {
    if name.len() > 1
        && let Some(stripped) = name.strip_suffix('-')
    {
        // Upstream drops the character before the dash as well (`name[:len(name)-2] + "a"`).
        let mut masked = stripped.to_string();
        masked.pop();
        masked.push('a');
        return masked;
    }
    name.to_string()
}

/// Validates a label map (`{"key": "value"}`): every key a qualified name, every value a label
/// value. Errors point at `path` itself, as upstream's do.
pub fn validate_labels(labels: &Value, path: &FieldPath) -> Vec<FieldError> {
    let mut errs = Vec::new();
    for (k, v) in string_map(labels, path, &mut errs) {
        for msg in is_qualified_name(k) {
            errs.push(FieldError::invalid(path, k, msg));
        }
        for msg in is_valid_label_value(v) {
            errs.push(FieldError::invalid(path, v, msg));
        }
    }
    errs
}

/// Validates an annotation map: every key a qualified name once lowercased, and all keys and
/// values together at most [`TOTAL_ANNOTATION_SIZE_LIMIT_BYTES`].
pub fn validate_annotations(annotations: &Value, path: &FieldPath) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let entries = string_map(annotations, path, &mut errs);
    let mut total = 0usize;
    for (k, v) in entries {
        for msg in is_qualified_name(&k.to_lowercase()) {
            errs.push(FieldError::invalid(path, k, msg));
        }
        total += k.len() + v.len();
    }
    if total > TOTAL_ANNOTATION_SIZE_LIMIT_BYTES {
        errs.push(FieldError::too_long(
            path,
            TOTAL_ANNOTATION_SIZE_LIMIT_BYTES,
        ));
    }
    errs
}

/// Validates a `metav1.LabelSelector` object as upstream's `ValidateLabelSelector`: match labels
/// as labels, and each match expression's operator, values and key. A null selector is valid.
pub fn validate_label_selector(selector: &Value, path: &FieldPath) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let Some(obj) = selector.as_object() else {
        if !selector.is_null() {
            errs.push(FieldError::type_invalid(
                path,
                selector.clone(),
                "must be an object",
            ));
        }
        return errs;
    };
    errs.extend(validate_labels(
        obj.get("matchLabels").unwrap_or(&Value::Null),
        &path.child("matchLabels"),
    ));
    let exprs_path = path.child("matchExpressions");
    for (i, expr) in array(obj.get("matchExpressions"), &exprs_path, &mut errs)
        .iter()
        .enumerate()
    {
        let expr_path = exprs_path.index(i);
        let empty = Map::new();
        let e = expr.as_object().unwrap_or(&empty);
        let operator = string_field(e, "operator", &expr_path, &mut errs);
        let values = array(e.get("values"), &expr_path.child("values"), &mut errs);
        match operator {
            "In" | "NotIn" if values.is_empty() => errs.push(FieldError::required(
                &expr_path.child("values"),
                "must be specified when `operator` is 'In' or 'NotIn'",
            )),
            "Exists" | "DoesNotExist" if !values.is_empty() => {
                errs.push(FieldError::forbidden(
                    &expr_path.child("values"),
                    "may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
                ));
            }
            "In" | "NotIn" | "Exists" | "DoesNotExist" => {}
            other => errs.push(FieldError::invalid(
                &expr_path.child("operator"),
                other,
                "not a valid selector operator",
            )),
        }
        let key = string_field(e, "key", &expr_path, &mut errs);
        for msg in is_qualified_name(key) {
            errs.push(FieldError::invalid(&expr_path.child("key"), key, msg));
        }
    }
    errs
}

/// Upstream's `ValidateOwnerReferences`: each reference names a version, kind, name and uid, no
/// `v1` Event owns anything, and at most one reference is the controller.
fn validate_owner_references(refs: &Value, path: &FieldPath) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let list = array(Some(refs), path, &mut errs);
    let mut first_controller: Option<String> = None;
    for r in list {
        let empty = Map::new();
        let obj = r.as_object().unwrap_or(&empty);
        let api_version = string_field(obj, "apiVersion", path, &mut errs);
        let kind = string_field(obj, "kind", path, &mut errs);
        let name = string_field(obj, "name", path, &mut errs);
        let uid = string_field(obj, "uid", path, &mut errs);
        let (group, version) = match api_version.matches('/').count() {
            0 => ("", api_version),
            1 => api_version.split_once('/').unwrap_or_default(),
            _ => ("", ""),
        };
        if version.is_empty() {
            errs.push(FieldError::invalid(
                &path.child("apiVersion"),
                api_version,
                "version must not be empty",
            ));
        }
        if kind.is_empty() {
            errs.push(FieldError::invalid(
                &path.child("kind"),
                kind,
                "must not be empty",
            ));
        }
        if name.is_empty() {
            errs.push(FieldError::invalid(
                &path.child("name"),
                name,
                "must not be empty",
            ));
        }
        if uid.is_empty() {
            errs.push(FieldError::invalid(
                &path.child("uid"),
                uid,
                "must not be empty",
            ));
        }
        if group.is_empty() && version == "v1" && kind == "Event" {
            errs.push(FieldError::invalid(
                path,
                r.clone(),
                "/v1, Kind=Event is disallowed from being an owner",
            ));
        }
        if obj.get("controller").and_then(Value::as_bool) == Some(true) {
            let current = format!("{kind}/{name}");
            match &first_controller {
                Some(first) => errs.push(FieldError::invalid(
                    path,
                    refs.clone(),
                    format!(
                        "Only one reference can have Controller set to true. Found \"true\" in references for {first} and {current}"
                    ),
                )),
                None => first_controller = Some(current),
            }
        }
    }
    errs
}

/// Upstream's `ValidateFinalizers`: each a qualified name, and not both `orphan` and
/// `foregroundDeletion`.
fn validate_finalizers(finalizers: &Value, path: &FieldPath) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let list = array(Some(finalizers), path, &mut errs);
    let mut orphan = false;
    let mut foreground = false;
    for f in list {
        let Some(f) = f.as_str() else {
            errs.push(FieldError::type_invalid(
                path,
                f.clone(),
                "must be a string",
            ));
            continue;
        };
        for msg in is_qualified_name(f) {
            errs.push(FieldError::invalid(path, f, msg));
        }
        orphan |= f == FINALIZER_ORPHAN_DEPENDENTS;
        foreground |= f == FINALIZER_DELETE_DEPENDENTS;
    }
    if orphan && foreground {
        errs.push(FieldError::invalid(
            path,
            finalizers.clone(),
            format!(
                "finalizer {FINALIZER_ORPHAN_DEPENDENTS} and {FINALIZER_DELETE_DEPENDENTS} cannot be both set"
            ),
        ));
    }
    errs
}

/// Upstream's `ValidateManagedFields`: operation, fieldsType, manager and subresource of each
/// entry.
fn validate_managed_fields(entries: &Value, path: &FieldPath) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let list = array(Some(entries), path, &mut errs);
    for (i, entry) in list.iter().enumerate() {
        let p = path.index(i);
        let empty = Map::new();
        let obj = entry.as_object().unwrap_or(&empty);
        let operation = string_field(obj, "operation", &p, &mut errs);
        if operation != "Apply" && operation != "Update" {
            errs.push(FieldError::invalid(
                &p.child("operation"),
                operation,
                "must be `Apply` or `Update`",
            ));
        }
        let fields_type = string_field(obj, "fieldsType", &p, &mut errs);
        if !fields_type.is_empty() && fields_type != "FieldsV1" {
            errs.push(FieldError::invalid(
                &p.child("fieldsType"),
                fields_type,
                "must be `FieldsV1`",
            ));
        }
        let manager = string_field(obj, "manager", &p, &mut errs);
        if manager.len() > FIELD_MANAGER_MAX_LENGTH {
            errs.push(FieldError::too_long(
                &p.child("manager"),
                FIELD_MANAGER_MAX_LENGTH,
            ));
        }
        for (pos, c) in manager.char_indices() {
            if !gofmt::is_go_printable(c) {
                errs.push(FieldError::invalid(
                    &p.child("manager"),
                    manager,
                    format!("invalid character U+{:04X} (at position {pos})", c as u32),
                ));
            }
        }
        let subresource = string_field(obj, "subresource", &p, &mut errs);
        if subresource.len() > MAX_SUBRESOURCE_NAME_LENGTH {
            errs.push(FieldError::too_long(
                &p.child("subresource"),
                MAX_SUBRESOURCE_NAME_LENGTH,
            ));
        }
    }
    errs
}

/// `obj[key]` as a string: absent or null is empty; another type is reported and read as empty.
fn string_field<'a>(
    obj: &'a Map<String, Value>,
    key: &str,
    parent: &FieldPath,
    errs: &mut Vec<FieldError>,
) -> &'a str {
    match obj.get(key) {
        None | Some(Value::Null) => "",
        Some(Value::String(s)) => s,
        Some(other) => {
            errs.push(FieldError::type_invalid(
                &parent.child(key),
                other.clone(),
                "must be a string",
            ));
            ""
        }
    }
}

/// A JSON object of strings as its entries: null is empty; a non-object, or a non-string value,
/// is reported and skipped.
fn string_map<'a>(
    value: &'a Value,
    path: &FieldPath,
    errs: &mut Vec<FieldError>,
) -> Vec<(&'a str, &'a str)> {
    match value {
        Value::Null => Vec::new(),
        Value::Object(map) => map
            .iter()
            .filter_map(|(k, v)| match v {
                Value::String(s) => Some((k.as_str(), s.as_str())),
                other => {
                    errs.push(FieldError::type_invalid(
                        &path.key(k.as_str()),
                        other.clone(),
                        "must be a string",
                    ));
                    None
                }
            })
            .collect(),
        other => {
            errs.push(FieldError::type_invalid(
                path,
                other.clone(),
                "must be an object",
            ));
            Vec::new()
        }
    }
}

/// A JSON array's items: absent or null is empty; a non-array is reported and read as empty.
fn array<'a>(
    value: Option<&'a Value>,
    path: &FieldPath,
    errs: &mut Vec<FieldError>,
) -> &'a [Value] {
    match value {
        None | Some(Value::Null) => &[],
        Some(Value::Array(items)) => items,
        Some(other) => {
            errs.push(FieldError::type_invalid(
                path,
                other.clone(),
                "must be an array",
            ));
            &[]
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::validation::{is_dns1123_label, is_dns1123_subdomain};
    use serde_json::json;

    fn messages(errs: &[FieldError]) -> Vec<String> {
        errs.iter().map(ToString::to_string).collect()
    }

    const SUBDOMAIN_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";

    #[test]
    fn a_well_formed_namespaced_object_has_no_errors() {
        let meta = json!({
            "name": "web-0",
            "namespace": "default",
            "labels": {"app": "web", "example.com/tier": ""},
            "annotations": {"Example.com/Owner": "me"},
            "finalizers": ["example.com/cleanup"],
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web", "uid": "u1", "controller": true}],
            "managedFields": [{"manager": "kubectl", "operation": "Apply", "fieldsType": "FieldsV1"}],
        });
        assert_eq!(
            messages(&validate_object_meta(&meta, true, is_dns1123_subdomain)),
            Vec::<String>::new()
        );
    }

    #[test]
    fn a_missing_name_is_required_and_a_bad_name_is_invalid() {
        let errs =
            validate_object_meta(&json!({"namespace": "default"}), true, is_dns1123_subdomain);
        assert_eq!(
            messages(&errs),
            ["metadata.name: Required value: name or generateName is required"]
        );
        assert_eq!(errs[0].kind.reason(), "FieldValueRequired");

        let errs = validate_object_meta(
            &json!({"name": "Foo", "namespace": "default"}),
            true,
            is_dns1123_subdomain,
        );
        assert_eq!(
            messages(&errs),
            [format!(
                "metadata.name: Invalid value: \"Foo\": {SUBDOMAIN_MSG}"
            )]
        );
    }

    #[test]
    fn generate_name_may_end_with_a_dash_but_not_be_malformed() {
        let ok = json!({"generateName": "web-", "name": "web-abcde", "namespace": "ns"});
        assert!(validate_object_meta(&ok, true, is_dns1123_subdomain).is_empty());
        let bad = json!({"generateName": "Web-", "name": "web-abcde", "namespace": "ns"});
        assert_eq!(
            messages(&validate_object_meta(&bad, true, is_dns1123_subdomain)),
            [format!(
                "metadata.generateName: Invalid value: \"Web-\": {SUBDOMAIN_MSG}"
            )]
        );
        assert_eq!(mask_trailing_dash("ab-"), "aa");
        assert_eq!(mask_trailing_dash("-"), "-");
        assert_eq!(mask_trailing_dash("abc"), "abc");
    }

    #[test]
    fn namespace_is_required_for_namespaced_and_forbidden_for_cluster_scoped_kinds() {
        assert_eq!(
            messages(&validate_object_meta(
                &json!({"name": "a"}),
                true,
                is_dns1123_subdomain
            )),
            ["metadata.namespace: Required value"]
        );
        assert_eq!(
            messages(&validate_object_meta(
                &json!({"name": "a", "namespace": "x"}),
                false,
                is_dns1123_label
            )),
            ["metadata.namespace: Forbidden: not allowed on this type"]
        );
        assert_eq!(
            messages(&validate_object_meta(
                &json!({"name": "a", "namespace": "a.b"}),
                true,
                is_dns1123_subdomain
            )),
            ["metadata.namespace: Invalid value: \"a.b\": must not contain dots"]
        );
    }

    #[test]
    fn bad_label_keys_and_values_point_at_the_label_map() {
        let meta = json!({"name": "a", "labels": {"a/b/c": "ok", "k": "b c"}});
        let errs = validate_object_meta(&meta, false, is_dns1123_subdomain);
        assert_eq!(
            messages(&errs),
            [
                "metadata.labels: Invalid value: \"a/b/c\": a qualified name must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')",
                "metadata.labels: Invalid value: \"b c\": a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')",
            ]
        );
    }

    #[test]
    fn annotations_may_not_exceed_256_kib_in_total() {
        let big = "x".repeat(TOTAL_ANNOTATION_SIZE_LIMIT_BYTES);
        let meta = json!({"name": "a", "annotations": {"k": big}});
        assert_eq!(
            messages(&validate_object_meta(&meta, false, is_dns1123_subdomain)),
            ["metadata.annotations: Too long: may not be more than 262144 bytes"]
        );
        let fits = json!({"name": "a", "annotations": {"k": "x".repeat(TOTAL_ANNOTATION_SIZE_LIMIT_BYTES - 1)}});
        assert!(validate_object_meta(&fits, false, is_dns1123_subdomain).is_empty());
    }

    #[test]
    fn annotation_keys_are_checked_case_insensitively() {
        let meta = json!({"name": "a", "annotations": {"Example.COM/Key": "v", "bad key": "v"}});
        let errs = validate_object_meta(&meta, false, is_dns1123_subdomain);
        assert_eq!(errs.len(), 1);
        assert!(errs[0].to_string().starts_with(
            "metadata.annotations: Invalid value: \"bad key\": name part must consist"
        ));
    }

    #[test]
    fn negative_generation_is_invalid() {
        let meta = json!({"name": "a", "generation": -1});
        assert_eq!(
            messages(&validate_object_meta(&meta, false, is_dns1123_subdomain)),
            ["metadata.generation: Invalid value: -1: must be greater than or equal to 0"]
        );
    }

    #[test]
    fn owner_references_need_version_kind_name_uid_and_one_controller() {
        let meta = json!({"name": "a", "ownerReferences": [
            {"apiVersion": "", "kind": "", "name": "", "uid": ""},
            {"apiVersion": "v1", "kind": "Event", "name": "e", "uid": "1"},
            {"apiVersion": "v1", "kind": "A", "name": "a", "uid": "2", "controller": true},
            {"apiVersion": "v1", "kind": "B", "name": "b", "uid": "3", "controller": true},
        ]});
        let msgs = messages(&validate_object_meta(&meta, false, is_dns1123_subdomain));
        assert_eq!(
            msgs[0],
            "metadata.ownerReferences.apiVersion: Invalid value: \"\": version must not be empty"
        );
        assert_eq!(
            msgs[1],
            "metadata.ownerReferences.kind: Invalid value: \"\": must not be empty"
        );
        assert_eq!(
            msgs[2],
            "metadata.ownerReferences.name: Invalid value: \"\": must not be empty"
        );
        assert_eq!(
            msgs[3],
            "metadata.ownerReferences.uid: Invalid value: \"\": must not be empty"
        );
        assert_eq!(
            msgs[4],
            r#"metadata.ownerReferences: Invalid value: {"apiVersion":"v1","kind":"Event","name":"e","uid":"1"}: /v1, Kind=Event is disallowed from being an owner"#
        );
        assert!(msgs[5].ends_with(r#"Only one reference can have Controller set to true. Found "true" in references for A/a and B/b"#), "{}", msgs[5]);
        assert_eq!(msgs.len(), 6);
    }

    #[test]
    fn finalizers_must_be_qualified_and_not_both_orphan_and_foreground() {
        let meta = json!({"name": "a", "finalizers": ["orphan", "foregroundDeletion", "a b"]});
        let msgs = messages(&validate_object_meta(&meta, false, is_dns1123_subdomain));
        assert_eq!(msgs.len(), 2);
        assert!(msgs[0].starts_with("metadata.finalizers: Invalid value: \"a b\": name part"));
        assert_eq!(
            msgs[1],
            r#"metadata.finalizers: Invalid value: ["orphan","foregroundDeletion","a b"]: finalizer orphan and foregroundDeletion cannot be both set"#
        );
    }

    #[test]
    fn managed_fields_entries_are_checked_by_index() {
        let meta = json!({"name": "a", "managedFields": [
            {"manager": "m", "operation": "Apply"},
            {"manager": "bell\u{7}", "operation": "Patch", "fieldsType": "FieldsV2"},
        ]});
        assert_eq!(
            messages(&validate_object_meta(&meta, false, is_dns1123_subdomain)),
            [
                "metadata.managedFields[1].operation: Invalid value: \"Patch\": must be `Apply` or `Update`",
                "metadata.managedFields[1].fieldsType: Invalid value: \"FieldsV2\": must be `FieldsV1`",
                "metadata.managedFields[1].manager: Invalid value: \"bell\\a\": invalid character U+0007 (at position 4)",
            ]
        );
    }

    #[test]
    fn values_of_the_wrong_json_type_are_reported_not_ignored() {
        let meta = json!({"name": 5, "labels": {"a": 1}});
        assert_eq!(
            messages(&validate_object_meta(&meta, false, is_dns1123_subdomain)),
            [
                "metadata.name: Invalid value: 5: must be a string",
                "metadata.name: Required value: name or generateName is required",
                "metadata.labels[a]: Invalid value: 1: must be a string",
            ]
        );
    }

    #[test]
    fn label_selectors_are_validated_as_upstream_validates_them() {
        let path = FieldPath::new("spec").child("selector");
        assert!(validate_label_selector(&Value::Null, &path).is_empty());
        let sel = json!({
            "matchLabels": {"app": "b c"},
            "matchExpressions": [
                {"key": "a", "operator": "In", "values": []},
                {"key": "b", "operator": "Exists", "values": ["x"]},
                {"key": "c/d/e", "operator": "Near"},
            ],
        });
        let msgs = messages(&validate_label_selector(&sel, &path));
        assert!(msgs[0].starts_with("spec.selector.matchLabels: Invalid value: \"b c\""));
        assert_eq!(
            msgs[1],
            "spec.selector.matchExpressions[0].values: Required value: must be specified when `operator` is 'In' or 'NotIn'"
        );
        assert_eq!(
            msgs[2],
            "spec.selector.matchExpressions[1].values: Forbidden: may not be specified when `operator` is 'Exists' or 'DoesNotExist'"
        );
        assert_eq!(
            msgs[3],
            "spec.selector.matchExpressions[2].operator: Invalid value: \"Near\": not a valid selector operator"
        );
        assert!(msgs[4].starts_with(
            "spec.selector.matchExpressions[2].key: Invalid value: \"c/d/e\": a qualified name"
        ));
        assert_eq!(msgs.len(), 5);
    }
}
