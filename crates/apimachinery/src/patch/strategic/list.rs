//! Lists in a strategic merge patch: merging by key or as a set, `$patch` elements, parallel
//! deletion lists, `$setElementOrder`, and the element order upstream produces.
//!
//! Order, as upstream computes it: the elements named by the patch (or by `$setElementOrder`)
//! come in the patch's order; the elements only on the server keep the server's order; the two
//! runs are then interleaved so that a server-only element stays in front of a patch element
//! it preceded on the server.

use super::super::schema::{Field, Strategy, Type};
use super::super::{Error, Result, gofmt};
use super::{
    DELETE, DIRECTIVE, MERGE, Object, REPLACE, SET_ELEMENT_ORDER, directive_target, fresh_element,
    is_delete_directive, merge_map,
};
use serde_json::Value;

/// What the elements of a list are, as far as merging cares (upstream's `reflect.Kind`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Map,
    Scalar,
}

/// Merges the patch list of a field into its live list (upstream's `mergeSliceHandler`):
/// `merge` lists merge, other lists are replaced. `is_delete` marks a
/// `$deleteFromPrimitiveList` list, which removes values whatever the field's strategy.
pub(super) fn merge_list_field(
    live: Vec<Value>,
    patch: Vec<Value>,
    field: Option<&'static Field>,
    is_delete: bool,
) -> Result<Vec<Value>> {
    let merges = field.is_some_and(|f| f.strategy == Strategy::Merge);
    if !(merges || is_delete) {
        return fresh_list(patch, field);
    }
    let key = field.and_then(|f| f.merge_key).unwrap_or_default();
    merge_slice(live, patch, key, field.and_then(|f| f.ty), is_delete)
}

/// A patch list with no live list under it: elements that are only directives of a merged
/// list (`$patch: delete`, `{"$patch": "replace"}`) are left out, the others kept as stored.
pub(super) fn fresh_list(items: Vec<Value>, field: Option<&'static Field>) -> Result<Vec<Value>> {
    let merges = field.is_some_and(|f| f.strategy == Strategy::Merge);
    let ty = field.and_then(|f| f.ty);
    let mut stored = Vec::with_capacity(items.len());
    for item in items {
        let directive = item.get(DIRECTIVE).and_then(Value::as_str);
        if merges && matches!(directive, Some(DELETE | REPLACE)) {
            continue;
        }
        stored.push(fresh_element(item, ty)?);
    }
    Ok(stored)
}

/// Merges two lists (upstream's `mergeSlice`). `key` is the merge key, `""` for primitives.
fn merge_slice(
    live: Vec<Value>,
    patch: Vec<Value>,
    key: &str,
    ty: Option<&'static Type>,
    is_delete: bool,
) -> Result<Vec<Value>> {
    if live.is_empty() && patch.is_empty() {
        return Ok(live);
    }
    let kind = element_kind(&[&live, &patch])?;
    let (server_order, merged, patch) = match kind {
        Kind::Scalar if is_delete => {
            return Ok(live.into_iter().filter(|v| !patch.contains(v)).collect());
        }
        Kind::Scalar => {
            let mut merged: Vec<Value> = Vec::with_capacity(live.len() + patch.len());
            for item in live.iter().chain(&patch) {
                if !merged.contains(item) {
                    merged.push(item.clone());
                }
            }
            (live, merged, patch)
        }
        Kind::Map => {
            if key.is_empty() {
                let element = if ty.is_some() { "struct" } else { "string" };
                return Err(Error::NoMergeKeyDeclared { element });
            }
            let (live, patch) = apply_special_elements(live, patch, key, ty)?;
            let server_order = live.clone();
            let merged = merge_elements(live, patch.clone(), key, ty)?;
            (server_order, merged, patch)
        }
    };
    let (patch_items, server_only) = partition(merged, &patch, key)?;
    normalize_element_order(patch_items, server_only, &patch, &server_order, key, kind)
}

/// Handles the patch elements that carry `$patch` (upstream's `mergeSliceWithSpecialElements`)
/// and returns the live list after deletions and the patch without them. With a replace
/// marker the rest of the patch becomes the live list and nothing is left to merge.
fn apply_special_elements(
    mut live: Vec<Value>,
    patch: Vec<Value>,
    key: &str,
    ty: Option<&'static Type>,
) -> Result<(Vec<Value>, Vec<Value>)> {
    let mut rest = Vec::with_capacity(patch.len());
    let mut replace = false;
    for item in patch {
        let Some(directive) = item.get(DIRECTIVE) else {
            rest.push(item);
            continue;
        };
        match directive.as_str() {
            Some(DELETE) => {
                let Some(value) = item.get(key) else {
                    return Err(no_merge_key(&item, key));
                };
                live = delete_matching(live, key, value)?;
            }
            Some(REPLACE) => replace = true,
            Some(MERGE) => return Err(Error::MergeDirectiveInList),
            _ => {
                return Err(Error::BadPatchType {
                    directive: gofmt::value(directive),
                    map: gofmt::value(&item),
                });
            }
        }
    }
    if replace {
        let replacement = rest
            .into_iter()
            .map(|item| fresh_element(item, ty))
            .collect::<Result<_>>()?;
        return Ok((replacement, Vec::new()));
    }
    Ok((live, rest))
}

/// Removes every live element whose merge key equals `value`.
fn delete_matching(live: Vec<Value>, key: &str, value: &Value) -> Result<Vec<Value>> {
    let mut kept = Vec::with_capacity(live.len());
    for (index, item) in live.into_iter().enumerate() {
        let Some(map) = item.as_object() else {
            return Err(Error::ElementNotMap { index });
        };
        if map.get(key) != Some(value) {
            kept.push(item);
        }
    }
    Ok(kept)
}

/// Merges each patch element into the first live element with its merge key, or appends it
/// (upstream's `mergeSliceWithoutSpecialElements`).
fn merge_elements(
    mut live: Vec<Value>,
    patch: Vec<Value>,
    key: &str,
    ty: Option<&'static Type>,
) -> Result<Vec<Value>> {
    for item in patch {
        let Value::Object(element) = item else {
            return Err(Error::BadArgType {
                expected: gofmt::MAP,
                actual: gofmt::type_name(&item),
            });
        };
        let Some(value) = element.get(key) else {
            return Err(no_merge_key(&Value::Object(element), key));
        };
        match find_by_key(&live, key, value)? {
            Some(index) => {
                let Value::Object(current) = std::mem::take(&mut live[index]) else {
                    return Err(Error::ElementNotMap { index });
                };
                live[index] = Value::Object(merge_map(current, element, ty)?);
            }
            None => live.push(fresh_element(Value::Object(element), ty)?),
        }
    }
    Ok(live)
}

/// The index of the first element of `list` whose `key` equals `value`.
fn find_by_key(list: &[Value], key: &str, value: &Value) -> Result<Option<usize>> {
    for (index, item) in list.iter().enumerate() {
        let Some(map) = item.as_object() else {
            return Err(Error::ElementNotMap { index });
        };
        if map.get(key) == Some(value) {
            return Ok(Some(index));
        }
    }
    Ok(None)
}

/// The kind shared by the elements of `lists` (upstream's `sliceElementType`): all must have
/// one JSON type (integers and floats differ, as in Go), and none may be a list.
fn element_kind(lists: &[&[Value]]) -> Result<Kind> {
    let mut first: Option<&'static str> = None;
    for item in lists.iter().flat_map(|list| list.iter()) {
        let name = gofmt::type_name(item);
        match first {
            None if item.is_array() => return Err(Error::NoListOfLists),
            None => first = Some(name),
            Some(first) if first != name => {
                let lists: Vec<String> = lists.iter().map(|l| gofmt::list(l)).collect();
                return Err(Error::ElementTypesDiffer {
                    lists: format!("[{}]", lists.join(" ")),
                });
            }
            Some(_) => {}
        }
    }
    match first {
        None => Err(Error::NoElements),
        Some(gofmt::MAP) => Ok(Kind::Map),
        Some(_) => Ok(Kind::Scalar),
    }
}

/// Applies every `$setElementOrder/<field>` of `patch` (upstream's `mergePatchIntoOriginal`):
/// merges the field's patch list (if any) into the live list, orders the result, and takes the
/// field out of `patch`.
pub(super) fn merge_ordered_lists(
    original: &mut Object,
    patch: &mut Object,
    ty: Option<&'static Type>,
) -> Result<()> {
    let directives: Vec<String> = patch
        .keys()
        .filter(|k| k.starts_with(SET_ELEMENT_ORDER))
        .cloned()
        .collect();
    for directive in directives {
        let Some(order) = patch.remove(&directive) else {
            continue;
        };
        let Value::Array(order) = order else {
            return Err(Error::BadArgType {
                expected: gofmt::SLICE,
                actual: gofmt::type_name(&order),
            });
        };
        let name = directive_target(
            &directive,
            SET_ELEMENT_ORDER,
            Error::BadPatchFormatForSetElementOrderList,
        )?;
        let live = take_list(original, &name)?;
        let patch_list = take_list(patch, &name)?;
        let field = ty.and_then(|t| t.field(&name));
        let key = field.and_then(|f| f.merge_key).unwrap_or_default();
        validate_patch_order(patch_list.as_deref().unwrap_or_default(), &order, key)?;
        if live.is_none() && patch_list.is_none() {
            continue;
        }
        let kind = element_kind(&[
            live.as_deref().unwrap_or_default(),
            patch_list.as_deref().unwrap_or_default(),
        ])?;
        let merges = field.is_some_and(|f| f.strategy == Strategy::Merge);
        let (server_order, merged) = match (live, patch_list) {
            (Some(live), Some(patch_list)) if merges && kind == Kind::Map => {
                let server_order = live_after_in_place_merge(&live, &patch_list, key);
                (
                    server_order,
                    merge_list_field(live, patch_list, field, false)?,
                )
            }
            (Some(live), Some(patch_list)) => (
                live.clone(),
                merge_list_field(live, patch_list, field, false)?,
            ),
            (Some(live), None) => (live.clone(), live),
            (None, Some(patch_list)) => (Vec::new(), fresh_list(patch_list, field)?),
            (None, None) => continue,
        };
        let (patch_items, server_only) = partition(merged, &order, key)?;
        let ordered =
            normalize_element_order(patch_items, server_only, &order, &server_order, key, kind)?;
        original.insert(name, Value::Array(ordered));
    }
    Ok(())
}

/// The live list as upstream leaves it behind after merging `patch` into it, which is the
/// server order `$setElementOrder` then sorts against.
///
/// Upstream deletes elements by shifting the rest left within the same Go backing array and
/// appends new elements into the slots that frees (the array has no spare capacity: it comes
/// from `ToUnstructured`), so the list it later reads as "the live order" holds the survivors,
/// then the first appended elements, then whatever the shifting left behind. Upstream's own
/// three-way apply results depend on this (a server-only element stays in front of one the
/// patch appended), so it is reproduced here on the merge keys.
fn live_after_in_place_merge(live: &[Value], patch: &[Value], key: &str) -> Vec<Value> {
    let mut backing = live.to_vec();
    let capacity = backing.len();
    let mut len = capacity;
    let mut replaced = false;
    let has_key = |item: &Value, value: &Value| item.get(key) == Some(value);
    for item in patch {
        match item.get(DIRECTIVE).and_then(Value::as_str) {
            Some(DELETE) => {
                let Some(value) = item.get(key) else { continue };
                while let Some(i) = backing[..len].iter().position(|e| has_key(e, value)) {
                    backing[i..len].rotate_left(1);
                    if i + 1 < len {
                        backing[len - 1] = backing[len - 2].clone();
                    }
                    len -= 1;
                }
            }
            Some(REPLACE) => replaced = true,
            _ => {}
        }
    }
    if replaced {
        return backing;
    }
    for item in patch.iter().filter(|item| item.get(DIRECTIVE).is_none()) {
        let Some(value) = item.get(key) else { continue };
        if backing[..len].iter().any(|e| has_key(e, value)) {
            continue;
        }
        if len == capacity {
            // Go reallocates: this and later appends land in a new array.
            break;
        }
        backing[len] = item.clone();
        len += 1;
    }
    backing
}

/// Removes and returns the list under `name`, which must be a list if present.
fn take_list(map: &mut Object, name: &str) -> Result<Option<Vec<Value>>> {
    match map.remove(name) {
        None => Ok(None),
        Some(Value::Array(items)) => Ok(Some(items)),
        Some(other) => Err(Error::BadArgType {
            expected: gofmt::SLICE,
            actual: gofmt::type_name(&other),
        }),
    }
}

/// Checks that the patch list names its elements in the order `$setElementOrder` gives
/// (upstream's `validatePatchWithSetOrderList`); deletions and directive elements are skipped.
fn validate_patch_order(patch: &[Value], order: &[Value], key: &str) -> Result<()> {
    if patch.is_empty() || order.is_empty() {
        return Ok(());
    }
    let mut named = Vec::with_capacity(patch.len());
    for item in patch {
        if !key.is_empty() {
            if !item.is_object() {
                return Err(Error::BadArgType {
                    expected: gofmt::MAP,
                    actual: gofmt::type_name(item),
                });
            }
            if is_delete_directive(item) {
                continue;
            }
        }
        named.push(item);
    }
    let (mut p, mut o) = (0, 0);
    while p < named.len() && o < order.len() {
        if named[p].get(DIRECTIVE).is_some() {
            p += 1;
            continue;
        }
        if merge_key_equal(named[p], &order[o], key)? {
            p += 1;
        }
        o += 1;
    }
    if p < named.len() {
        return Err(Error::SetElementOrderMismatch {
            patch: gofmt::list(patch),
            order: gofmt::list(order),
        });
    }
    Ok(())
}

/// Whether two elements have the same merge key (the same value when `key` is `""`).
fn merge_key_equal(left: &Value, right: &Value, key: &str) -> Result<bool> {
    if key.is_empty() {
        return Ok(left == right);
    }
    Ok(merge_key_of(left, key)? == merge_key_of(right, key)?)
}

/// The merge key of an element that must be an object holding it.
fn merge_key_of<'a>(item: &'a Value, key: &str) -> Result<&'a Value> {
    let Some(map) = item.as_object() else {
        return Err(Error::BadArgType {
            expected: gofmt::MAP,
            actual: gofmt::type_name(item),
        });
    };
    map.get(key).ok_or_else(|| no_merge_key(item, key))
}

fn no_merge_key(item: &Value, key: &str) -> Error {
    Error::NoMergeKey {
        map: gofmt::value(item),
        key: key.to_string(),
    }
}

/// Splits `merged` into the elements `by` names and the others, keeping their order.
fn partition(merged: Vec<Value>, by: &[Value], key: &str) -> Result<(Vec<Value>, Vec<Value>)> {
    let mut named = Vec::with_capacity(merged.len());
    let mut others = Vec::new();
    for item in merged {
        let is_named = if key.is_empty() {
            by.contains(&item)
        } else {
            find_by_key(by, key, merge_key_of(&item, key)?)?.is_some()
        };
        if is_named {
            named.push(item);
        } else {
            others.push(item);
        }
    }
    Ok((named, others))
}

/// Sorts the patch's elements by `patch_order` and the server-only ones by `server_order`,
/// then interleaves them (upstream's `normalizeElementOrder`).
fn normalize_element_order(
    patch_items: Vec<Value>,
    server_only: Vec<Value>,
    patch_order: &[Value],
    server_order: &[Value],
    key: &str,
    kind: Kind,
) -> Result<Vec<Value>> {
    let patch_items = sort_by_order(patch_items, patch_order, key, kind)?;
    let server_only = sort_by_order(server_only, server_order, key, kind)?;
    Ok(interleave(
        server_only,
        patch_items,
        server_order,
        key,
        kind,
    ))
}

/// What identifies an element when looking it up in an order list: its merge key for objects
/// (absent and `null` alike, as in Go), itself for primitives.
fn identity<'a>(item: &'a Value, key: &str, kind: Kind) -> Option<&'a Value> {
    match kind {
        Kind::Map => item
            .as_object()
            .and_then(|m| m.get(key))
            .filter(|v| !v.is_null()),
        Kind::Scalar => Some(item),
    }
}

/// The index in `order` of the first element with `item`'s identity.
fn position(order: &[Value], item: &Value, key: &str, kind: Kind) -> Option<usize> {
    let id = identity(item, key, kind);
    order.iter().position(|o| identity(o, key, kind) == id)
}

/// Stable-sorts `items` by their position in `order` (upstream's `normalizeSliceOrder`);
/// for objects, `$patch: delete` elements go last and every element needs the merge key.
fn sort_by_order(items: Vec<Value>, order: &[Value], key: &str, kind: Kind) -> Result<Vec<Value>> {
    let (items, deletions): (Vec<Value>, Vec<Value>) = if kind == Kind::Map {
        for item in items.iter().chain(order) {
            merge_key_of(item, key)?;
        }
        items
            .into_iter()
            .partition(|item| !is_delete_directive(item))
    } else {
        (items, Vec::new())
    };
    let mut keyed: Vec<(Option<usize>, Value)> = items
        .into_iter()
        .map(|item| (position(order, &item, key, kind), item))
        .collect();
    if keyed.iter().all(|(pos, _)| pos.is_some()) {
        keyed.sort_by_key(|(pos, _)| *pos);
    } else {
        // Go's comparator says "less" whenever either side is missing from `order`; for lists
        // up to 20 elements `sort.SliceStable` is this insertion sort, so mimic it exactly.
        let less = |a: Option<usize>, b: Option<usize>| match (a, b) {
            (Some(a), Some(b)) => a < b,
            _ => true,
        };
        for i in 1..keyed.len() {
            let mut j = i;
            while j > 0 && less(keyed[j].0, keyed[j - 1].0) {
                keyed.swap(j, j - 1);
                j -= 1;
            }
        }
    }
    let mut sorted: Vec<Value> = keyed.into_iter().map(|(_, item)| item).collect();
    sorted.extend(deletions);
    Ok(sorted)
}

/// Interleaves the sorted server-only elements (`left`) with the sorted patch elements
/// (`right`) (upstream's `mergeSortedSlice`): a server-only element goes first only when both
/// are on the server and it came first there.
fn interleave(
    left: Vec<Value>,
    right: Vec<Value>,
    server_order: &[Value],
    key: &str,
    kind: Kind,
) -> Vec<Value> {
    let located = |items: Vec<Value>| -> Vec<(Option<usize>, Value)> {
        items
            .into_iter()
            .map(|item| (position(server_order, &item, key, kind), item))
            .collect()
    };
    let mut left = located(left).into_iter().peekable();
    let mut right = located(right).into_iter().peekable();
    let mut out = Vec::with_capacity(left.len() + right.len());
    loop {
        let take_left = match (left.peek(), right.peek()) {
            (None, None) => break,
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (Some((Some(l), _)), Some((Some(r), _))) => l < r,
            (Some(_), Some(_)) => false,
        };
        let next = if take_left { left.next() } else { right.next() };
        out.extend(next.map(|(_, item)| item));
    }
    out
}
