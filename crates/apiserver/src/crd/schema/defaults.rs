//! Defaulting, as upstream's structural defaulting (`PruneNonNullableNullsWithoutDefaults`,
//! then `Default`), and the CRD check that every default validates and is pruned
//! (`ValidateDefaults`).

use serde_json::Value;
use skiff_apimachinery::validation::{FieldError, FieldPath};

use super::{Schema, cel, meta, prune, validate};

/// Drops nulls that the schema does not allow and that no default will replace; whether any
/// was dropped.
pub(super) fn prune_nulls(v: &mut Value, s: Option<&Schema>) -> bool {
    let mut changed = false;
    match v {
        Value::Object(fields) => {
            fields.retain(|k, value| {
                let schema =
                    s.and_then(|s| s.properties.get(k).or(s.additional_schema().flatten()));
                let drop =
                    value.is_null() && schema.is_some_and(|s| !s.nullable && s.default.is_none());
                if !drop {
                    changed |= prune_nulls(value, schema);
                }
                changed |= drop;
                !drop
            });
        }
        Value::Array(items) => {
            let item_schema = s.and_then(|s| s.items.as_deref());
            for item in items {
                changed |= prune_nulls(item, item_schema);
            }
        }
        _ => {}
    }
    changed
}

/// Fills defaults: properties missing from a present object (or null where not nullable),
/// null items and map values that are not nullable; recursing into everything present.
/// Whether anything was filled.
pub(super) fn apply(v: &mut Value, s: &Schema) -> bool {
    let mut changed = false;
    match v {
        Value::Object(fields) => {
            for (k, prop) in &s.properties {
                let Some(default) = &prop.default else {
                    continue;
                };
                if fields.get(k).is_none_or(|x| x.is_null() && !prop.nullable) {
                    fields.insert(k.clone(), default.clone());
                    changed = true;
                }
            }
            for (k, value) in fields.iter_mut() {
                if let Some(prop) = s.properties.get(k) {
                    changed |= apply(value, prop);
                } else if let Some(Some(values)) = s.additional_schema() {
                    changed |= fill_null(value, values);
                    changed |= apply(value, values);
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = &s.items {
                for item in items {
                    changed |= fill_null(item, item_schema);
                    changed |= apply(item, item_schema);
                }
            }
        }
        _ => {}
    }
    changed
}

/// A null `value` where `s` does not allow null becomes `s`'s default (still null without
/// one); whether it changed.
fn fill_null(value: &mut Value, s: &Schema) -> bool {
    if value.is_null()
        && !s.nullable
        && let Some(default) = &s.default
    {
        *value = default.clone();
        return true;
    }
    false
}

/// Upstream's `ValidateDefaults` for the schema at `path`: each default (on properties and
/// items, not `additionalProperties`, where defaults are not applied) must be pruned already
/// (`must not have unknown fields`), have valid embedded resources, validate against its
/// schema, and pass its schema's rules (as both `self` and `oldSelf`).
pub(super) fn check(schema: &Schema, path: &FieldPath) -> Vec<FieldError> {
    let mut errs = Vec::new();
    node(schema, path, true, false, &mut errs);
    errs
}

/// `resource`: `s` is a resource (the root, or embedded); `inside_meta`: `s` is under a
/// resource's `apiVersion`, `kind` or `metadata`.
fn node(
    s: &Schema,
    path: &FieldPath,
    resource: bool,
    inside_meta: bool,
    errs: &mut Vec<FieldError>,
) {
    let resource = resource || s.x.embedded_resource;
    let inside_meta = inside_meta && !s.x.embedded_resource;
    if let Some(default) = &s.default {
        let at = path.child("default");
        if inside_meta {
            errs.extend(validate::validate(s, default, Some(&at)));
        } else {
            errs.extend(check_default(s, default, &at, resource));
        }
    }
    if let Some(items) = &s.items {
        node(items, &path.child("items"), false, inside_meta, errs);
    }
    for (name, prop) in &s.properties {
        let meta_field = resource && matches!(name.as_str(), "apiVersion" | "kind" | "metadata");
        let p = path.child("properties").key(name.as_str());
        node(prop, &p, false, inside_meta || meta_field, errs);
    }
}

/// The checks of one default, each only when the ones before pass.
fn check_default(s: &Schema, default: &Value, at: &FieldPath, resource: bool) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let mut pruned = default.clone();
    prune::prune(&mut pruned, s, resource);
    if pruned != *default {
        errs.push(FieldError::invalid(
            at,
            default.clone(),
            "must not have unknown fields",
        ));
    }
    let meta = meta::validate_embedded(s, default, Some(at.clone()), resource);
    if !meta.is_empty() {
        errs.extend(meta);
        return errs;
    }
    let openapi = validate::validate(s, default, Some(at));
    if !openapi.is_empty() {
        errs.extend(openapi);
        return errs;
    }
    errs.extend(cel::validate(s, default, Some(default), Some(at), resource));
    errs
}
