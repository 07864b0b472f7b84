//! Unknown fields for server-side field validation (`fieldValidation=Strict|Warn|Ignore`):
//! which fields of a request body the kind's schema does not define, dropped as upstream's typed
//! decoding drops them.
//!
//! Paths are written as upstream's strict decoder writes them in
//! `strict decoding error: unknown field "spec.containers[0].imagee"`: dotted field names from
//! the object's root without a leading dot, `[i]` for list items, `.key` into maps. Fields
//! under a schema without `properties` (RawExtension, FieldsV1, free-form objects) or marked
//! `x-kubernetes-preserve-unknown-fields` are never unknown; values of the wrong type are a
//! decoding error, not an unknown field, and are skipped here. Duplicate fields cannot be seen
//! in a parsed `serde_json::Value` and are the caller's to detect on the raw bytes.

use serde_json::Value;

use crate::schemas::{Registry, V2_REF, registry};

/// Removes the fields of `object` that the schema of `group/version, kind` does not define and
/// returns their paths, in the object's key order. Empty when every field is known, and when
/// the kind has no schema.
pub fn unknown_fields(group: &str, version: &str, kind: &str, object: &mut Value) -> Vec<String> {
    let registry = registry();
    let Some(name) = registry.name_of(group, version, kind) else {
        return Vec::new();
    };
    let Some(schema) = registry.get(name) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let mut path = String::new();
    walk(registry, schema, object, &mut path, &mut out);
    out
}

/// Whether the registry has a schema for `group/version, kind` (lists included).
pub fn has_schema(group: &str, version: &str, kind: &str) -> bool {
    registry().name_of(group, version, kind).is_some()
}

/// Definitions of catalog kinds that no k8s-openapi type describes: their fields are never
/// reported unknown, and `kubectl explain` shows an open object. Empty when `types.rs` covers
/// the whole catalog, as a test checks.
pub fn kinds_without_schema() -> &'static [String] {
    &registry().placeholders
}

/// Follows `$ref` (and a lone `allOf` entry) to the schema that describes the value.
fn resolve<'a>(registry: &'a Registry, mut schema: &'a Value) -> &'a Value {
    for _ in 0..32 {
        if let Some(target) = schema.get("$ref").and_then(Value::as_str) {
            match target
                .strip_prefix(V2_REF)
                .and_then(|name| registry.get(name))
            {
                Some(next) => schema = next,
                None => return schema,
            }
        } else if let Some([only]) = schema
            .get("allOf")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
        {
            schema = only;
        } else {
            return schema;
        }
    }
    schema
}

fn walk(
    registry: &Registry,
    schema: &Value,
    value: &mut Value,
    path: &mut String,
    out: &mut Vec<String>,
) {
    let schema = resolve(registry, schema);
    if schema.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true)) {
        return;
    }
    match value {
        Value::Object(fields) => {
            if let Some(properties) = schema.get("properties").and_then(Value::as_object) {
                fields.retain(|key, child| {
                    let mark = push_field(path, key);
                    let known = match properties.get(key) {
                        Some(field_schema) => {
                            walk(registry, field_schema, child, path, out);
                            true
                        }
                        None => {
                            out.push(path.clone());
                            false
                        }
                    };
                    path.truncate(mark);
                    known
                });
            } else if let Some(values) =
                schema.get("additionalProperties").filter(|s| s.is_object())
            {
                for (key, child) in fields.iter_mut() {
                    let mark = push_field(path, key);
                    walk(registry, values, child, path, out);
                    path.truncate(mark);
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items") {
                for (index, item) in items.iter_mut().enumerate() {
                    let mark = path.len();
                    path.push_str(&format!("[{index}]"));
                    walk(registry, item_schema, item, path, out);
                    path.truncate(mark);
                }
            }
        }
        _ => {}
    }
}

/// Appends `.key` (or `key` at the root) and returns the length to truncate back to.
fn push_field(path: &mut String, key: &str) -> usize {
    let mark = path.len();
    if !path.is_empty() {
        path.push('.');
    }
    path.push_str(key);
    mark
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_misspelled_container_field_is_reported_with_its_index() {
        let mut pod = json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "p", "labels": {"app": "x"}},
            "spec": {"containers": [
                {"name": "a", "image": "nginx"},
                {"name": "b", "imagee": "nginx", "resources": {"limits": {"cpu": "1"}}},
            ]},
        });
        assert_eq!(
            unknown_fields("", "v1", "Pod", &mut pod),
            vec!["spec.containers[1].imagee"]
        );
        // Dropped, as upstream's typed decoding drops it.
        assert!(pod["spec"]["containers"][1].get("imagee").is_none());
        assert_eq!(pod["spec"]["containers"][1]["name"], "b");
    }

    #[test]
    fn a_valid_deployment_has_no_unknown_fields() {
        let mut deployment = json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "default", "annotations": {"a": "b"},
                "managedFields": [{"manager": "kubectl", "fieldsType": "FieldsV1",
                    "fieldsV1": {"f:spec": {"f:replicas": {}}}}]},
            "spec": {
                "replicas": 2,
                "selector": {"matchLabels": {"app": "web"}},
                "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": 1}},
                "template": {
                    "metadata": {"labels": {"app": "web"}},
                    "spec": {"containers": [{
                        "name": "web",
                        "image": "nginx:1.27",
                        "ports": [{"containerPort": 80, "protocol": "TCP"}],
                        "env": [{"name": "A", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
                        "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}},
                        "readinessProbe": {"httpGet": {"path": "/", "port": "http"}},
                    }]},
                },
            },
            "status": {"replicas": 2, "conditions": [{"type": "Available", "status": "True"}]},
        });
        assert!(unknown_fields("apps", "v1", "Deployment", &mut deployment).is_empty());
    }

    #[test]
    fn unknown_fields_are_found_at_every_depth() {
        let mut object = json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "bogus": 1,
            "metadata": {"nmae": "x"},
            "spec": {"template": {"spec": {"containers": [{"name": "a", "ports": [{"containerPortZ": 1}]}]}}},
        });
        assert_eq!(
            unknown_fields("apps", "v1", "Deployment", &mut object),
            vec![
                "bogus",
                "metadata.nmae",
                "spec.template.spec.containers[0].ports[0].containerPortZ",
            ]
        );
    }

    #[test]
    fn free_form_fields_and_unknown_kinds_are_not_checked() {
        let mut revision = json!({"apiVersion": "apps/v1", "kind": "ControllerRevision",
            "revision": 1, "data": {"anything": {"goes": true}}});
        assert!(unknown_fields("apps", "v1", "ControllerRevision", &mut revision).is_empty());
        assert!(unknown_fields("example.com", "v1", "Widget", &mut json!({"x": 1})).is_empty());
        assert!(!has_schema("example.com", "v1", "Widget"));
        assert!(has_schema("", "v1", "PodList"));
    }

    #[test]
    fn list_items_are_checked_against_the_item_kind() {
        let mut list = json!({"apiVersion": "v1", "kind": "ConfigMapList",
            "items": [{"metadata": {"name": "a"}, "dat": {}}]});
        assert_eq!(
            unknown_fields("", "v1", "ConfigMapList", &mut list),
            vec!["items[0].dat"]
        );
    }
}
