//! Strategic merge patch (`application/strategic-merge-patch+json`) as upstream's API server
//! applies it (`strategicpatch.StrategicMergeMapPatch`): a JSON merge patch whose lists merge
//! where the type's [`schema`](super::schema) says so, steered by directives in the patch.
//!
//! - Objects merge key by key; `null` deletes a key.
//! - A list without strategy is replaced whole; a `merge` list of objects merges element by
//!   element on the merge key, a `merge` list of primitives is a union.
//! - `$patch: replace` in an object replaces it; `$patch: delete` empties it. In a list
//!   element, `$patch: delete` removes the live elements with that merge key, and an element
//!   `{"$patch": "replace"}` makes the rest of the patch list replace the live list.
//! - `$retainKeys: [..]` drops every live key not listed (and the patch may only set those).
//! - `$deleteFromPrimitiveList/<field>: [..]` removes values from a list of primitives.
//! - `$setElementOrder/<field>: [..]` fixes the order of the merged list; elements only on
//!   the server keep their place relative to the others.
//!
//! A patch value with nothing live under it is merged into an empty value, as upstream does
//! since it learned to drop `null`s and honour list directives there: `null`s inside it go,
//! list elements that are only `$patch: delete` or `{"$patch": "replace"}` go, and `$patch`
//! keys left in new list elements are dropped (upstream's typed decode drops them). Skiff
//! stores the JSON as merged, so this is where such keys must go.
//!
//! Deletion lists are applied after the other keys of their object; upstream's order is Go's
//! random map order, which only matters for a patch that both adds and deletes one value.

mod list;
#[cfg(test)]
mod tests;

use super::schema::{Field, Strategy, Type};
use super::{Error, Result, gofmt, json_type_name};
use serde_json::{Map, Value};

/// The key of the directive in an object or list element.
const DIRECTIVE: &str = "$patch";
const DELETE: &str = "delete";
const REPLACE: &str = "replace";
const MERGE: &str = "merge";
const RETAIN_KEYS: &str = "$retainKeys";
/// Prefix of the parallel list of primitives to remove from `<field>`.
const DELETE_FROM_PRIMITIVE_LIST: &str = "$deleteFromPrimitiveList";
/// Prefix of the parallel list giving the order of `<field>`.
const SET_ELEMENT_ORDER: &str = "$setElementOrder";

type Object = Map<String, Value>;

/// Applies the strategic merge patch `patch` (JSON bytes) to a copy of `original`, an object
/// whose root type is `root`.
pub fn apply(original: &Value, patch: &[u8], root: &'static Type) -> Result<Value> {
    let patch: Value = serde_json::from_slice(patch).map_err(Error::DecodeStrategicPatch)?;
    merge(original, patch, root)
}

/// Applies the decoded strategic merge patch `patch` to a copy of `original`. A `null` patch
/// changes nothing, as upstream's decoder reads it as an empty map.
pub fn merge(original: &Value, patch: Value, root: &'static Type) -> Result<Value> {
    let patch = match patch {
        Value::Object(patch) => patch,
        Value::Null => Object::new(),
        other => {
            return Err(Error::StrategicPatchNotObject {
                found: json_type_name(&other),
            });
        }
    };
    let Value::Object(original) = original else {
        return Err(Error::BadJsonDoc);
    };
    merge_map(original.clone(), patch, Some(root)).map(Value::Object)
}

/// Merges `patch` into the live object `original` of type `ty` (upstream's `mergeMap`).
fn merge_map(mut original: Object, mut patch: Object, ty: Option<&'static Type>) -> Result<Object> {
    if let Some(directive) = patch.get(DIRECTIVE) {
        return match directive.as_str() {
            Some(REPLACE) => {
                patch.remove(DIRECTIVE);
                merge_map(Object::new(), patch, ty)
            }
            Some(DELETE) => Ok(Object::new()),
            _ => Err(Error::BadPatchType {
                directive: gofmt::value(directive),
                map: gofmt::value(&Value::Object(patch.clone())),
            }),
        };
    }
    retain_keys(&mut original, &mut patch)?;
    list::merge_ordered_lists(&mut original, &mut patch, ty)?;

    let mut deletions = Vec::new();
    for (key, value) in patch {
        if key.starts_with(DELETE_FROM_PRIMITIVE_LIST) {
            let target = directive_target(
                &key,
                DELETE_FROM_PRIMITIVE_LIST,
                Error::BadPatchFormatForPrimitiveList,
            )?;
            deletions.push((target, value));
            continue;
        }
        if value.is_null() {
            original.remove(&key);
            continue;
        }
        let field = ty.and_then(|t| t.field(&key));
        match original.get_mut(&key) {
            Some(live) => {
                let merged = merge_value(std::mem::take(live), value, field)?;
                *live = merged;
            }
            None => {
                original.insert(key, fresh(value, field)?);
            }
        }
    }
    for (key, value) in deletions {
        delete_from_list(&mut original, key, value, ty)?;
    }
    Ok(original)
}

/// Merges a patch value into the live value of a field.
fn merge_value(live: Value, patch: Value, field: Option<&'static Field>) -> Result<Value> {
    let strategy = field.map_or(Strategy::Default, |f| f.strategy);
    match (live, patch) {
        (Value::Object(live), Value::Object(patch)) if strategy != Strategy::Replace => {
            merge_map(live, patch, field.and_then(|f| f.ty)).map(Value::Object)
        }
        (Value::Array(live), Value::Array(patch)) => {
            list::merge_list_field(live, patch, field, false).map(Value::Array)
        }
        (_, patch) => fresh(patch, field),
    }
}

/// A patch value with nothing live under it, as it is stored: objects are merged into an
/// empty object, lists keep their elements less the ones that are only directives.
fn fresh(patch: Value, field: Option<&'static Field>) -> Result<Value> {
    match patch {
        Value::Object(patch) => {
            merge_map(Object::new(), patch, field.and_then(|f| f.ty)).map(Value::Object)
        }
        Value::Array(items) => list::fresh_list(items, field).map(Value::Array),
        scalar => Ok(scalar),
    }
}

/// A list element taken from the patch, as it is stored: an object loses its `$patch` key (a
/// typed decode would drop it) and is merged into emptiness.
fn fresh_element(item: Value, ty: Option<&'static Type>) -> Result<Value> {
    match item {
        Value::Object(mut patch) => {
            patch.remove(DIRECTIVE);
            merge_map(Object::new(), patch, ty).map(Value::Object)
        }
        other => Ok(other),
    }
}

/// Applies `$retainKeys`: the live keys not listed go, and the patch may only set listed keys.
fn retain_keys(original: &mut Object, patch: &mut Object) -> Result<()> {
    let Some(list) = patch.remove(RETAIN_KEYS) else {
        return Ok(());
    };
    let Value::Array(retained) = list else {
        return Err(Error::BadPatchFormatForRetainKeys);
    };
    let is_retained = |key: &str| retained.iter().any(|k| k.as_str() == Some(key));
    let sets_other_key = patch.iter().any(|(key, value)| {
        !value.is_null()
            && !key.starts_with(DELETE_FROM_PRIMITIVE_LIST)
            && !key.starts_with(SET_ELEMENT_ORDER)
            && !is_retained(key)
    });
    if sets_other_key {
        return Err(Error::BadPatchFormatForRetainKeys);
    }
    original.retain(|key, _| is_retained(key));
    Ok(())
}

/// Applies `$deleteFromPrimitiveList/<key>: values` to the live list `key`; `null` deletes the
/// field and a missing field stays missing.
fn delete_from_list(
    original: &mut Object,
    key: String,
    values: Value,
    ty: Option<&'static Type>,
) -> Result<()> {
    let values = match values {
        Value::Null => {
            original.remove(&key);
            return Ok(());
        }
        Value::Array(values) => values,
        _ => return Err(Error::BadPatchFormatForPrimitiveList),
    };
    let Some(live) = original.get_mut(&key) else {
        return Ok(());
    };
    let Value::Array(items) = std::mem::take(live) else {
        return Err(Error::BadPatchFormatForPrimitiveList);
    };
    let field = ty.and_then(|t| t.field(&key));
    *live = Value::Array(list::merge_list_field(items, values, field, true)?);
    Ok(())
}

/// The field a parallel-list directive key names (`$setElementOrder/containers` →
/// `containers`), or `malformed` when the key is not `<prefix>/<field>`.
fn directive_target(key: &str, prefix: &str, malformed: Error) -> Result<String> {
    match key.split_once('/') {
        Some((head, field)) if head == prefix => Ok(field.to_string()),
        _ => Err(malformed),
    }
}

/// Whether a list element is `$patch: delete`.
fn is_delete_directive(item: &Value) -> bool {
    item.get(DIRECTIVE).and_then(Value::as_str) == Some(DELETE)
}
