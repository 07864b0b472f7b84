//! Walks of JSON objects guided by the apply [`schema`](super::schema): the field set of an
//! applied configuration, the comparison of two objects (added, modified, removed fields), the
//! merge of an applied configuration into a live object, and pruning of fields a manager no
//! longer applies (structured-merge-diff's `typed` package).

use std::collections::HashMap;

use serde_json::{Map, Value};

use super::Result;
use super::fieldpath::{Path, PathElement, Set};
use super::schema::{ListKind, Node};

/// The fields two objects differ in. Leaves that changed value are `modified`; fields present
/// on one side only are `added` or `removed` together with every field below them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Comparison {
    pub added: Set,
    pub modified: Set,
    pub removed: Set,
}

impl Comparison {
    pub fn is_empty(&self) -> bool {
        self.added.is_empty() && self.modified.is_empty() && self.removed.is_empty()
    }

    /// Keeps only the top-level fields `keep` accepts (reset fields are never owned).
    pub fn retain_top(&mut self, keep: impl Fn(&PathElement) -> bool + Copy) {
        self.added.retain_top(keep);
        self.modified.retain_top(keep);
        self.removed.retain_top(keep);
    }
}

/// Whether a value is handled as one leaf at `node`.
fn is_leaf(v: &Value, node: &Node) -> bool {
    match v {
        Value::Object(_) => node.atomic,
        Value::Array(_) => node.list == ListKind::Atomic,
        _ => true,
    }
}

/// The elements of a list by name, in order. Duplicate names keep the first element.
fn named<'a>(
    list: &'a [Value],
    node: &Node,
    lenient: bool,
) -> Result<Vec<(PathElement, &'a Value)>> {
    let mut out: Vec<(PathElement, &Value)> = Vec::with_capacity(list.len());
    for (i, item) in list.iter().enumerate() {
        let pe = node.element_name(item, i, lenient)?;
        if out.iter().any(|(seen, _)| *seen == pe) {
            if lenient {
                continue;
            }
            return Err(super::Error::DuplicateListKey {
                key: pe.to_string(),
            });
        }
        out.push((pe, item));
    }
    Ok(out)
}

/// The fields an applied configuration sets: every leaf, every list element, every explicit
/// `null` or `{}` (upstream's `ToFieldSet`).
pub fn field_set(value: &Value, node: &Node) -> Result<Set> {
    let mut set = Set::new();
    walk_set(value, node, &mut Vec::new(), &mut set)?;
    Ok(set)
}

fn walk_set(value: &Value, node: &Node, path: &mut Path, set: &mut Set) -> Result<()> {
    if is_leaf(value, node) {
        set.insert(path);
        return Ok(());
    }
    match value {
        Value::Object(m) => {
            for (k, v) in m {
                path.push(PathElement::Field(k.clone()));
                let child = node.field(k);
                walk_set(v, &child, path, set)?;
                if v.is_null() || v.as_object().is_some_and(Map::is_empty) || node.map {
                    set.insert(path);
                }
                path.pop();
            }
        }
        Value::Array(items) => {
            let element = node.element();
            for (pe, item) in named(items, node, false)? {
                path.push(pe);
                walk_set(item, &element, path, set)?;
                set.insert(path);
                path.pop();
            }
        }
        _ => {}
    }
    Ok(())
}

/// Compares `lhs` (the live object) with `rhs` (the new one). Lists whose elements lack their
/// keys are compared by index rather than failing, so recording ownership never fails a write.
/// `metadata.managedFields` is passed over: it is the bookkeeping, not a field anyone manages
/// (and leaving it out here spares copying both objects without it on every write).
pub fn compare(lhs: &Value, rhs: &Value, node: &Node) -> Comparison {
    let mut c = Comparison::default();
    compare_at(Some(lhs), Some(rhs), node, false, &mut Vec::new(), &mut c);
    c
}

fn is_empty_container(v: Option<&Value>) -> bool {
    match v {
        None | Some(Value::Null) => true,
        Some(Value::Object(m)) => m.is_empty(),
        Some(Value::Array(a)) => a.is_empty(),
        _ => false,
    }
}

/// `owned_as_member`: whether a side-only value at this place is recorded as a member too (list
/// elements and map entries are; struct fields only own their leaves).
fn compare_at(
    lhs: Option<&Value>,
    rhs: Option<&Value>,
    node: &Node,
    owned_as_member: bool,
    path: &mut Path,
    c: &mut Comparison,
) {
    let leaf = |v: Option<&Value>| v.is_none_or(|v| is_leaf(v, node));
    let same_shape = match (lhs, rhs) {
        (Some(Value::Object(_)), Some(Value::Object(_)))
        | (Some(Value::Array(_)), Some(Value::Array(_))) => true,
        (Some(_), Some(_)) => false,
        _ => true,
    };
    let both_empty = is_empty_container(lhs) && is_empty_container(rhs);
    if (leaf(lhs) && leaf(rhs)) || !same_shape || both_empty {
        match (lhs, rhs) {
            (None, Some(_)) => c.added.insert(path),
            (Some(_), None) => c.removed.insert(path),
            (Some(a), Some(b)) if a != b => {
                c.modified.insert(path);
                if !same_shape && let Some(b) = rhs.filter(|b| !leaf(Some(b))) {
                    compare_at(None, Some(b), node, owned_as_member, path, c);
                }
            }
            _ => {}
        }
        return;
    }
    match (lhs.unwrap_or(&Value::Null), rhs.unwrap_or(&Value::Null)) {
        (l @ (Value::Object(_) | Value::Null), r @ (Value::Object(_) | Value::Null)) => {
            let empty = Map::new();
            let lm = l.as_object().unwrap_or(&empty);
            let rm = r.as_object().unwrap_or(&empty);
            let in_metadata = matches!(path.as_slice(), [PathElement::Field(m)] if m == "metadata");
            let compared = |k: &String| !(in_metadata && k == "managedFields");
            for (k, lv) in lm.iter().filter(|(k, _)| compared(k)) {
                path.push(PathElement::Field(k.clone()));
                compare_at(Some(lv), rm.get(k), &node.field(k), node.map, path, c);
                path.pop();
            }
            for (k, rv) in rm
                .iter()
                .filter(|(k, _)| compared(k) && !lm.contains_key(*k))
            {
                path.push(PathElement::Field(k.clone()));
                compare_at(None, Some(rv), &node.field(k), node.map, path, c);
                path.pop();
            }
        }
        (l, r) => {
            let empty = Vec::new();
            let la = l.as_array().unwrap_or(&empty);
            let ra = r.as_array().unwrap_or(&empty);
            let ln = named(la, node, true).unwrap_or_default();
            let rn = named(ra, node, true).unwrap_or_default();
            let lindex: HashMap<&PathElement, &Value> = ln.iter().map(|(p, v)| (p, *v)).collect();
            let rindex: HashMap<&PathElement, &Value> = rn.iter().map(|(p, v)| (p, *v)).collect();
            let element = node.element();
            for (pe, rv) in &rn {
                path.push(pe.clone());
                compare_at(lindex.get(pe).copied(), Some(rv), &element, true, path, c);
                path.pop();
            }
            for (pe, lv) in ln.iter().filter(|(pe, _)| !rindex.contains_key(pe)) {
                path.push(pe.clone());
                compare_at(Some(lv), None, &element, true, path, c);
                path.pop();
            }
        }
    }
    if owned_as_member || node.map {
        match (lhs, rhs) {
            (None, Some(_)) => c.added.insert(path),
            (Some(_), None) => c.removed.insert(path),
            _ => {}
        }
    }
}

/// Merges an applied configuration into the live object: objects merge field by field, keyed
/// lists and sets element by element (shared elements in the configuration's order, live-only
/// elements kept in place), anything atomic is replaced. An explicit `null` removes the field.
pub fn merge(live: &Value, config: &Value, node: &Node) -> Result<Value> {
    match (live, config) {
        (Value::Object(lm), Value::Object(cm)) if !node.atomic => {
            let mut out = lm.clone();
            for (k, cv) in cm {
                if cv.is_null() {
                    out.remove(k);
                    continue;
                }
                let merged = merge(lm.get(k).unwrap_or(&Value::Null), cv, &node.field(k))?;
                out.insert(k.clone(), merged);
            }
            Ok(Value::Object(out))
        }
        (Value::Array(la), Value::Array(ca)) if node.list != ListKind::Atomic => {
            merge_list(la, ca, node).map(Value::Array)
        }
        _ => Ok(without_nulls(config)),
    }
}

/// A configuration value as stored: explicit `null` fields are absent.
fn without_nulls(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k.clone(), without_nulls(v)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(without_nulls).collect()),
        other => other.clone(),
    }
}

/// Upstream's list merge order: walk both lists; live-only elements stay where they are,
/// elements in both appear in the configuration's order, new elements follow their neighbours
/// in the configuration.
fn merge_list(live: &[Value], config: &[Value], node: &Node) -> Result<Vec<Value>> {
    let ln = named(live, node, true)?;
    let cn = named(config, node, false)?;
    let lindex: HashMap<&PathElement, &Value> = ln.iter().map(|(p, v)| (p, *v)).collect();
    let cindex: HashMap<&PathElement, &Value> = cn.iter().map(|(p, v)| (p, *v)).collect();
    let mut shared = cn.iter().map(|(p, _)| p).filter(|p| lindex.contains_key(p));
    let mut next_shared = shared.next();
    let element = node.element();
    let mut done: Vec<&PathElement> = Vec::new();
    let mut out = Vec::with_capacity(live.len().max(config.len()));
    let (mut li, mut ci) = (0, 0);
    while li < ln.len() || ci < cn.len() {
        if li < ln.len() && ci < cn.len() {
            let lpe = &ln[li].0;
            if *lpe == cn[ci].0 {
                out.push(merge(ln[li].1, cn[ci].1, &element)?);
                done.push(lpe);
                if next_shared == Some(lpe) {
                    next_shared = shared.next();
                }
                li += 1;
                ci += 1;
                continue;
            }
            if cindex.contains_key(lpe) && next_shared.is_some_and(|n| n != lpe) {
                li += 1;
                continue;
            }
        }
        if li < ln.len() {
            let lpe = &ln[li].0;
            if !cindex.contains_key(lpe) {
                out.push(ln[li].1.clone());
                li += 1;
                continue;
            }
            if done.contains(&lpe) {
                li += 1;
                continue;
            }
        }
        if ci < cn.len() {
            let (cpe, cv) = &cn[ci];
            out.push(merge(
                lindex.get(cpe).copied().unwrap_or(&Value::Null),
                cv,
                &element,
            )?);
            done.push(cpe);
            if next_shared == Some(cpe) {
                next_shared = shared.next();
            }
            ci += 1;
        } else {
            // Only reachable with live elements already merged.
            li += 1;
        }
    }
    Ok(out)
}

/// Removes from `value` every field and element that is a member of `last` (what a manager
/// applied before) and not of `keep` (what anyone, the manager included, owns now), with
/// everything below it. Both sets should have named fields as members.
pub fn prune(value: &Value, node: &Node, last: &Set, keep: Option<&Set>) -> Value {
    match value {
        Value::Object(m) if !node.atomic => {
            let mut out = Map::new();
            for (k, v) in m {
                let pe = PathElement::Field(k.clone());
                let here = std::slice::from_ref(&pe);
                if last.has(here) && !keep.is_some_and(|s| s.has(here)) {
                    continue;
                }
                let v = match last.child(&pe) {
                    Some(sub) => prune(v, &node.field(k), sub, keep.and_then(|s| s.child(&pe))),
                    None => v.clone(),
                };
                out.insert(k.clone(), v);
            }
            Value::Object(out)
        }
        Value::Array(items) if node.list != ListKind::Atomic => {
            let element = node.element();
            let mut out = Vec::with_capacity(items.len());
            for (i, item) in items.iter().enumerate() {
                let Ok(pe) = node.element_name(item, i, true) else {
                    out.push(item.clone());
                    continue;
                };
                let here = std::slice::from_ref(&pe);
                if last.has(here) && !keep.is_some_and(|s| s.has(here)) {
                    continue;
                }
                out.push(match last.child(&pe) {
                    Some(sub) => prune(item, &element, sub, keep.and_then(|s| s.child(&pe))),
                    None => item.clone(),
                });
            }
            Value::Array(out)
        }
        _ => value.clone(),
    }
}

#[cfg(test)]
#[path = "typed_tests.rs"]
mod tests;
