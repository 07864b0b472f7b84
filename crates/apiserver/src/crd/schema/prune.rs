//! Pruning, as upstream's `pruning.PruneWithOptions`: fields the schema does not specify are
//! removed, except below `x-kubernetes-preserve-unknown-fields` (where specified fields are
//! still pruned inside) and `apiVersion`, `kind` and `metadata` of resources (the root and
//! embedded resources), whose metadata is ObjectMeta's business.

use serde_json::Value;

use super::Schema;

/// The fields of a resource that pruning leaves alone.
const META_FIELDS: &[&str] = &["apiVersion", "kind", "metadata"];

/// Prunes `value` against `schema` (`resource_root`: `value` is a resource, its meta fields
/// kept); returns the removed fields' paths (`spec.foo`, `spec.list[0].bar`), sorted.
pub(super) fn prune(value: &mut Value, schema: &Schema, resource_root: bool) -> Vec<String> {
    let mut pruned = Vec::new();
    node(
        value,
        Some(schema),
        resource_root,
        &mut String::new(),
        &mut pruned,
    );
    pruned.sort();
    pruned
}

/// `resource`: the node is a resource (its own `x-kubernetes-embedded-resource`, or the root).
fn node(
    v: &mut Value,
    s: Option<&Schema>,
    resource: bool,
    path: &mut String,
    out: &mut Vec<String>,
) {
    if let Some(s) = s.filter(|s| s.preserves_unknown_fields()) {
        return keep_unknown(v, s, resource, path, out);
    }
    match v {
        Value::Object(fields) => {
            let Some(s) = s else {
                out.extend(fields.keys().map(|k| joined(path, k)));
                fields.clear();
                return;
            };
            let keys: Vec<String> = fields.keys().cloned().collect();
            for k in keys {
                if resource && META_FIELDS.contains(&k.as_str()) {
                    continue;
                }
                let child = match (s.properties.get(&k), &s.additional_properties) {
                    (Some(prop), _) => Some(prop),
                    (None, Some(additional)) => additional.schema(),
                    (None, None) => {
                        if !META_FIELDS.contains(&k.as_str()) || !path.is_empty() {
                            out.push(joined(path, &k));
                        }
                        fields.remove(&k);
                        continue;
                    }
                };
                if let Some(value) = fields.get_mut(&k) {
                    descend(value, child, &k, path, out, node);
                }
            }
        }
        Value::Array(items) => {
            let item_schema = s.and_then(|s| s.items.as_deref());
            for (i, item) in items.iter_mut().enumerate() {
                descend(item, item_schema, &format!("[{i}]"), path, out, node);
            }
        }
        _ => {}
    }
}

/// Below `x-kubernetes-preserve-unknown-fields`: unknown fields stay, specified ones are pruned
/// by their schemas.
fn keep_unknown(
    v: &mut Value,
    s: &Schema,
    resource: bool,
    path: &mut String,
    out: &mut Vec<String>,
) {
    match v {
        Value::Object(fields) => {
            for (k, value) in fields.iter_mut() {
                if resource && META_FIELDS.contains(&k.as_str()) {
                    continue;
                }
                let child = match (s.properties.get(k), &s.additional_properties) {
                    (Some(prop), _) => Some(prop),
                    (None, Some(additional)) => additional.schema(),
                    (None, None) => continue,
                };
                descend(value, child, k, path, out, node);
            }
        }
        Value::Array(items) => {
            let Some(item_schema) = s.items.as_deref() else {
                return;
            };
            for (i, item) in items.iter_mut().enumerate() {
                let step = |v: &mut Value,
                            s: Option<&Schema>,
                            r: bool,
                            p: &mut String,
                            o: &mut Vec<String>| {
                    if let Some(s) = s {
                        keep_unknown(v, s, r, p, o);
                    }
                };
                descend(item, Some(item_schema), &format!("[{i}]"), path, out, step);
            }
        }
        _ => {}
    }
}

/// Runs `f` on a child reached by `step` (a field name, or `[i]`), with the path extended.
fn descend(
    v: &mut Value,
    s: Option<&Schema>,
    step: &str,
    path: &mut String,
    out: &mut Vec<String>,
    f: impl FnOnce(&mut Value, Option<&Schema>, bool, &mut String, &mut Vec<String>),
) {
    let len = path.len();
    if !path.is_empty() && !step.starts_with('[') {
        path.push('.');
    }
    path.push_str(step);
    let resource = s.is_some_and(|s| s.x.embedded_resource);
    f(v, s, resource, path, out);
    path.truncate(len);
}

fn joined(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}
