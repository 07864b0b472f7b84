//! Checks of custom resources beyond the OpenAPI validation, as upstream's `objectmeta.Validate`
//! and `listtype.ValidateListSetsAndMaps`: embedded resources (`x-kubernetes-embedded-resource`)
//! need `apiVersion` and `kind` and valid object metadata, and lists of type `set` and `map`
//! hold no duplicates (whole items, or items' keys).

use serde_json::{Map, Value};
use skiff_apimachinery::validation::{
    FieldError, FieldPath, is_dns1035_label, validate_object_meta,
};

use super::Schema;

/// The errors of the embedded resources in `obj`, under `base` (`None`: a custom resource's
/// root). `resource_root`: `obj` itself is a resource to check (a default of an embedded
/// resource); a custom resource's own root is checked by the caller's ObjectMeta validation.
pub(super) fn validate_embedded(
    schema: &Schema,
    obj: &Value,
    base: Option<FieldPath>,
    resource_root: bool,
) -> Vec<FieldError> {
    let mut errs = Vec::new();
    embedded(schema, obj, &base, resource_root, &mut errs);
    errs
}

fn embedded(
    s: &Schema,
    v: &Value,
    path: &Option<FieldPath>,
    resource: bool,
    errs: &mut Vec<FieldError>,
) {
    if !resource && !s.has_embedded {
        return;
    }
    let at = |f: &dyn Fn(FieldPath) -> FieldPath| Some(f(path.clone().unwrap_or_default()));
    match v {
        Value::Object(fields) => {
            if resource || s.x.embedded_resource {
                errs.extend(resource_fields(path, fields));
            }
            for (k, value) in fields {
                if let Some(prop) = s.properties.get(k) {
                    embedded(prop, value, &at(&|p| p.child(k.as_str())), false, errs);
                } else if let Some(Some(values)) = s.additional_schema() {
                    embedded(values, value, &at(&|p| p.key(k.as_str())), false, errs);
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = &s.items {
                for (i, item) in items.iter().enumerate() {
                    embedded(item_schema, item, &at(&|p| p.index(i)), false, errs);
                }
            }
        }
        _ => {}
    }
}

/// `apiVersion` and `kind` required and well-formed, `metadata` valid ObjectMeta.
fn resource_fields(path: &Option<FieldPath>, fields: &Map<String, Value>) -> Vec<FieldError> {
    let child = |name: &str| path.clone().unwrap_or_default().child(name);
    let mut errs = Vec::new();
    for name in ["apiVersion", "kind"] {
        if !fields.contains_key(name) {
            errs.push(FieldError::required(&child(name), ""));
        }
    }
    for (k, v) in fields {
        match (k.as_str(), v) {
            ("apiVersion" | "kind", Value::String(s)) if s.is_empty() => {
                errs.push(FieldError::invalid(&child(k), "", "must not be empty"));
            }
            ("apiVersion", Value::String(s)) if s != "/" && s.matches('/').count() > 1 => {
                errs.push(FieldError::invalid(
                    &child(k),
                    s.as_str(),
                    format!("unexpected GroupVersion string: {s}"),
                ));
            }
            ("kind", Value::String(s)) => {
                let problems = is_dns1035_label(&s.to_lowercase());
                if !problems.is_empty() {
                    errs.push(FieldError::invalid(
                        &child(k),
                        s.as_str(),
                        format!(
                            "may have mixed case, but should otherwise match: {}",
                            problems.join(",")
                        ),
                    ));
                }
            }
            ("apiVersion", Value::String(_)) => {}
            ("apiVersion" | "kind", other) => {
                errs.push(FieldError::invalid(
                    &child(k),
                    other.clone(),
                    "must be a string",
                ));
            }
            ("metadata", Value::Object(meta)) => errs.extend(object_meta(path, meta)),
            ("metadata", other) => errs.push(FieldError::invalid(
                &child(k),
                other.clone(),
                "metadata must be an object",
            )),
            _ => {}
        }
    }
    errs
}

/// ObjectMeta validation of an embedded resource's metadata: names are path segments, a name is
/// not required, a namespace is checked when given; paths are under the resource's.
fn object_meta(path: &Option<FieldPath>, meta: &Map<String, Value>) -> Vec<FieldError> {
    let mut meta = meta.clone();
    if meta
        .get("name")
        .and_then(Value::as_str)
        .is_none_or(str::is_empty)
    {
        // Upstream sets a name so that none is required.
        meta.insert("name".into(), "fakename".into());
    }
    let namespaced = meta
        .get("namespace")
        .and_then(Value::as_str)
        .is_some_and(|ns| !ns.is_empty());
    let prefix = path.as_ref().map(|p| format!("{p}.")).unwrap_or_default();
    validate_object_meta(
        &Value::Object(meta),
        namespaced,
        skiff_apimachinery::validation::is_path_segment_name,
    )
    .into_iter()
    .map(|mut e| {
        e.field = format!("{prefix}{}", e.field);
        e
    })
    .collect()
}

/// Duplicate items of `set` lists and duplicate keys of `map` lists in `obj`.
pub(super) fn list_sets_and_maps(schema: &Schema, obj: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if let Value::Object(fields) = obj {
        object_lists(schema, fields, &None, &mut errs);
    }
    errs
}

fn object_lists(
    s: &Schema,
    fields: &Map<String, Value>,
    path: &Option<FieldPath>,
    errs: &mut Vec<FieldError>,
) {
    let base = path.clone().unwrap_or_default();
    if let Some(Some(values)) = s.additional_schema() {
        for (k, v) in fields {
            lists(values, v, &base.key(k.as_str()), errs);
        }
    }
    for (k, v) in fields {
        if let Some(prop) = s.properties.get(k) {
            lists(prop, v, &base.child(k.as_str()), errs);
        }
    }
}

fn lists(s: &Schema, v: &Value, path: &FieldPath, errs: &mut Vec<FieldError>) {
    if !s.has_keyed_lists {
        return;
    }
    match v {
        Value::Object(fields) => object_lists(s, fields, &Some(path.clone()), errs),
        Value::Array(items) => {
            match s.x.list_type.as_deref() {
                Some("set") => {
                    for i in first_repeats(items) {
                        errs.push(FieldError::duplicate(&path.index(i), items[i].clone()));
                    }
                }
                Some("map") => errs.extend(map_keys(s, items, path)),
                _ => {}
            }
            if let Some(item_schema) = &s.items {
                for (i, item) in items.iter().enumerate() {
                    lists(item_schema, item, &path.index(i), errs);
                }
            }
        }
        _ => {}
    }
}

/// The index of the second occurrence of each value that occurs more than once.
fn first_repeats(values: &[Value]) -> Vec<usize> {
    (0..values.len())
        .filter(|&i| values[..i].iter().filter(|v| **v == values[i]).count() == 1)
        .collect()
}

/// Duplicate keys in a `map` list: the key fields of each item (a missing key is a value of
/// its own), reported at the repeated item with the key as its value.
fn map_keys(s: &Schema, items: &[Value], path: &FieldPath) -> Vec<FieldError> {
    if let Some(i) = items.iter().position(|x| !x.is_null() && !x.is_object()) {
        return vec![FieldError::invalid(
            &path.index(i),
            items[i].clone(),
            "must be an object for an array of list-type map",
        )];
    }
    let keys: Vec<Value> = items
        .iter()
        .map(|item| {
            let key: Map<String, Value> =
                s.x.list_map_keys
                    .iter()
                    .filter_map(|k| Some((k.clone(), item.get(k)?.clone())))
                    .collect();
            Value::Object(key)
        })
        .collect();
    first_repeats(&keys)
        .into_iter()
        .map(|i| FieldError::duplicate(&path.index(i), keys[i].clone()))
        .collect()
}
