//! Field paths and field sets (structured-merge-diff's `fieldpath`): path elements, the tree of
//! owned fields, the set algebra the updater needs, and the `FieldsV1` wire encoding
//! (`f:name`, `k:{"key":"value"}`, `v:"value"`, `i:0`, `.` for a member that also has children).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde_json::{Map, Value};

use super::{Error, Result};

/// One step of a path. Variants are ordered as upstream orders them (field names first, then
/// keys, values, indexes), so a derived `Ord` sorts sets as upstream serializes them.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PathElement {
    /// A field of an object (`f:name`).
    Field(String),
    /// An element of an associative list, named by its key fields: `(name, JSON value)` pairs
    /// sorted by name (`k:{"name":"nginx"}`).
    Key(Vec<(String, String)>),
    /// An element of a set-like list, named by its JSON value (`v:"a"`).
    Value(String),
    /// An element of a list without keys (only where a key could not be found).
    Index(usize),
}

impl PathElement {
    pub fn field(name: &str) -> PathElement {
        PathElement::Field(name.to_string())
    }

    /// The key element of a list item from its key fields (values are JSON values).
    pub fn key(fields: &[(&str, &Value)]) -> PathElement {
        let mut pairs: Vec<(String, String)> = fields
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        pairs.sort();
        PathElement::Key(pairs)
    }

    pub fn value(v: &Value) -> PathElement {
        PathElement::Value(v.to_string())
    }

    /// The `FieldsV1` key of this element.
    pub fn encode(&self) -> String {
        match self {
            PathElement::Field(name) => format!("f:{name}"),
            PathElement::Key(pairs) => format!("k:{}", key_object(pairs)),
            PathElement::Value(v) => format!("v:{v}"),
            PathElement::Index(i) => format!("i:{i}"),
        }
    }

    /// Parses a `FieldsV1` key (`f:…`, `k:…`, `v:…`, `i:…`).
    pub fn decode(s: &str) -> Result<PathElement> {
        let bad = || Error::BadFieldsV1 {
            element: s.to_string(),
        };
        let (prefix, rest) = s.split_once(':').ok_or_else(bad)?;
        match prefix {
            "f" => Ok(PathElement::Field(rest.to_string())),
            "k" => {
                let Value::Object(m) = serde_json::from_str::<Value>(rest).map_err(|_| bad())?
                else {
                    return Err(bad());
                };
                let mut pairs: Vec<(String, String)> =
                    m.into_iter().map(|(k, v)| (k, v.to_string())).collect();
                pairs.sort();
                Ok(PathElement::Key(pairs))
            }
            "v" => {
                let v: Value = serde_json::from_str(rest).map_err(|_| bad())?;
                Ok(PathElement::Value(v.to_string()))
            }
            "i" => rest.parse().map(PathElement::Index).map_err(|_| bad()),
            _ => Err(bad()),
        }
    }
}

/// `{"a":1,"b":"x"}` from sorted `(name, JSON value)` pairs.
fn key_object(pairs: &[(String, String)]) -> String {
    let body: Vec<String> = pairs
        .iter()
        .map(|(k, v)| format!("{}:{v}", Value::String(k.clone())))
        .collect();
    format!("{{{}}}", body.join(","))
}

/// Upstream's path display: `.spec.replicas`, `.spec.containers[name="nginx"].image`,
/// `.metadata.finalizers[="a"]`, `[0]`.
impl fmt::Display for PathElement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PathElement::Field(name) => write!(f, ".{name}"),
            PathElement::Key(pairs) => {
                let body: Vec<String> = pairs.iter().map(|(k, v)| format!("{k}={v}")).collect();
                write!(f, "[{}]", body.join(","))
            }
            PathElement::Value(v) => write!(f, "[={v}]"),
            PathElement::Index(i) => write!(f, "[{i}]"),
        }
    }
}

/// A path from the object root.
pub type Path = Vec<PathElement>;

/// Formats a path as upstream prints it in conflict messages.
pub fn path_string(path: &[PathElement]) -> String {
    path.iter().map(ToString::to_string).collect()
}

/// A set of paths, as a tree: at each level the elements that are members, and the subtrees
/// below elements. An element can be both (a list item owned as a whole and field by field).
/// Empty subtrees are never kept, so `is_empty` is structural.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Set {
    members: BTreeSet<PathElement>,
    children: BTreeMap<PathElement, Set>,
}

impl Set {
    pub fn new() -> Set {
        Set::default()
    }

    pub fn is_empty(&self) -> bool {
        self.members.is_empty() && self.children.is_empty()
    }

    /// Adds `path` as a member (the empty path adds nothing).
    pub fn insert(&mut self, path: &[PathElement]) {
        match path {
            [] => {}
            [last] => {
                self.members.insert(last.clone());
            }
            [first, rest @ ..] => self.children.entry(first.clone()).or_default().insert(rest),
        }
    }

    /// Whether `path` is a member.
    pub fn has(&self, path: &[PathElement]) -> bool {
        match path {
            [] => false,
            [last] => self.members.contains(last),
            [first, rest @ ..] => self.children.get(first).is_some_and(|c| c.has(rest)),
        }
    }

    /// The subtree below `element`, if any.
    pub fn child(&self, element: &PathElement) -> Option<&Set> {
        self.children.get(element)
    }

    pub fn union(&self, other: &Set) -> Set {
        let mut out = self.clone();
        out.members.extend(other.members.iter().cloned());
        for (pe, child) in &other.children {
            let merged = match out.children.get(pe) {
                Some(mine) => mine.union(child),
                None => child.clone(),
            };
            out.children.insert(pe.clone(), merged);
        }
        out
    }

    /// Members of `self` that are not members of `other` (subtrees compared level by level).
    pub fn difference(&self, other: &Set) -> Set {
        let members = self.members.difference(&other.members).cloned().collect();
        let mut children = BTreeMap::new();
        for (pe, child) in &self.children {
            let rest = match other.children.get(pe) {
                Some(theirs) => child.difference(theirs),
                None => child.clone(),
            };
            if !rest.is_empty() {
                children.insert(pe.clone(), rest);
            }
        }
        Set { members, children }
    }

    pub fn intersection(&self, other: &Set) -> Set {
        let members = self.members.intersection(&other.members).cloned().collect();
        let mut children = BTreeMap::new();
        for (pe, child) in &self.children {
            if let Some(theirs) = other.children.get(pe) {
                let both = child.intersection(theirs);
                if !both.is_empty() {
                    children.insert(pe.clone(), both);
                }
            }
        }
        Set { members, children }
    }

    /// Keeps only the top-level elements `keep` accepts (members and subtrees alike).
    pub fn retain_top(&mut self, keep: impl Fn(&PathElement) -> bool) {
        self.members.retain(&keep);
        self.children.retain(|pe, _| keep(pe));
    }

    /// Removes the member at `path` (not its subtree), as upstream's non-recursive difference.
    pub fn remove(&mut self, path: &[PathElement]) {
        match path {
            [] => {}
            [last] => {
                self.members.remove(last);
            }
            [first, rest @ ..] => {
                if let Some(child) = self.children.get_mut(first) {
                    child.remove(rest);
                    if child.is_empty() {
                        self.children.remove(first);
                    }
                }
            }
        }
    }

    /// A copy where every field name with a subtree is also a member (upstream's
    /// `EnsureNamedFieldsAreMembers`), so that owning `.a.b` counts as owning `.a` for pruning.
    pub fn with_named_fields_as_members(&self) -> Set {
        let mut out = Set {
            members: self.members.clone(),
            children: BTreeMap::new(),
        };
        for (pe, child) in &self.children {
            if matches!(pe, PathElement::Field(_)) {
                out.members.insert(pe.clone());
            }
            out.children
                .insert(pe.clone(), child.with_named_fields_as_members());
        }
        out
    }

    /// Every member path, members of a level before the subtrees below it (upstream's order).
    pub fn paths(&self) -> Vec<Path> {
        let mut out = Vec::new();
        self.collect(&mut Vec::new(), &mut out);
        out
    }

    fn collect(&self, prefix: &mut Path, out: &mut Vec<Path>) {
        for m in &self.members {
            let mut p = prefix.clone();
            p.push(m.clone());
            out.push(p);
        }
        for (pe, child) in &self.children {
            prefix.push(pe.clone());
            child.collect(prefix, out);
            prefix.pop();
        }
    }

    /// The `FieldsV1` JSON of this set.
    pub fn to_fields_v1(&self) -> Value {
        let mut out = Map::new();
        for m in &self.members {
            if !self.children.contains_key(m) {
                out.insert(m.encode(), Value::Object(Map::new()));
            }
        }
        for (pe, child) in &self.children {
            let mut inner = match child.to_fields_v1() {
                Value::Object(m) => m,
                _ => Map::new(),
            };
            if self.members.contains(pe) {
                inner.insert(".".into(), Value::Object(Map::new()));
            }
            out.insert(pe.encode(), Value::Object(inner));
        }
        Value::Object(out)
    }

    /// Parses `FieldsV1` JSON.
    pub fn from_fields_v1(v: &Value) -> Result<Set> {
        let Value::Object(m) = v else {
            return Err(Error::BadFieldsV1 {
                element: v.to_string(),
            });
        };
        let mut set = Set::new();
        for (k, inner) in m {
            if k == "." {
                continue;
            }
            let pe = PathElement::decode(k)?;
            let Value::Object(im) = inner else {
                return Err(Error::BadFieldsV1 { element: k.clone() });
            };
            if im.is_empty() || im.contains_key(".") {
                set.members.insert(pe.clone());
            }
            let child = Set::from_fields_v1(inner)?;
            if !child.is_empty() {
                set.children.insert(pe, child);
            }
        }
        Ok(set)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn f(name: &str) -> PathElement {
        PathElement::field(name)
    }

    fn set(paths: &[Path]) -> Set {
        let mut s = Set::new();
        for p in paths {
            s.insert(p);
        }
        s
    }

    #[test]
    fn elements_encode_as_upstream_fields_v1_keys_and_decode_back() {
        let cases = [
            (f("replicas"), "f:replicas"),
            (
                PathElement::key(&[("name", &json!("nginx"))]),
                r#"k:{"name":"nginx"}"#,
            ),
            (
                PathElement::key(&[("protocol", &json!("TCP")), ("containerPort", &json!(80))]),
                r#"k:{"containerPort":80,"protocol":"TCP"}"#,
            ),
            (PathElement::value(&json!("a")), r#"v:"a""#),
            (PathElement::Index(3), "i:3"),
        ];
        for (pe, encoded) in cases {
            assert_eq!(pe.encode(), encoded);
            assert_eq!(PathElement::decode(encoded).unwrap(), pe);
        }
        assert!(PathElement::decode("x:1").is_err());
        assert!(PathElement::decode("k:[1]").is_err());
    }

    #[test]
    fn paths_print_as_in_upstream_conflict_messages() {
        let path = vec![
            f("spec"),
            f("containers"),
            PathElement::key(&[("name", &json!("nginx"))]),
            f("image"),
        ];
        assert_eq!(
            path_string(&path),
            r#".spec.containers[name="nginx"].image"#
        );
        let set_item = vec![
            f("metadata"),
            f("finalizers"),
            PathElement::value(&json!("x")),
        ];
        assert_eq!(path_string(&set_item), r#".metadata.finalizers[="x"]"#);
    }

    #[test]
    fn fields_v1_round_trips_and_marks_members_with_children_by_a_dot() {
        let item = PathElement::key(&[("name", &json!("a"))]);
        let s = set(&[
            vec![f("spec"), f("replicas")],
            vec![f("spec"), f("containers"), item.clone()],
            vec![f("spec"), f("containers"), item.clone(), f("image")],
            vec![f("spec"), f("containers"), item.clone(), f("name")],
        ]);
        let v = s.to_fields_v1();
        assert_eq!(
            v,
            json!({"f:spec": {"f:replicas": {}, "f:containers": {
                r#"k:{"name":"a"}"#: {".": {}, "f:image": {}, "f:name": {}}}}})
        );
        assert_eq!(Set::from_fields_v1(&v).unwrap(), s);
        assert!(Set::from_fields_v1(&json!({"f:a": 1})).is_err());
    }

    #[test]
    fn union_difference_and_intersection_work_level_by_level() {
        let a = set(&[vec![f("a"), f("x")], vec![f("a"), f("y")], vec![f("b")]]);
        let b = set(&[vec![f("a"), f("y")], vec![f("c")]]);
        assert_eq!(
            a.union(&b),
            set(&[
                vec![f("a"), f("x")],
                vec![f("a"), f("y")],
                vec![f("b")],
                vec![f("c")]
            ])
        );
        assert_eq!(a.difference(&b), set(&[vec![f("a"), f("x")], vec![f("b")]]));
        assert_eq!(a.intersection(&b), set(&[vec![f("a"), f("y")]]));
        assert!(b.difference(&b).is_empty());
        // Difference is not recursive: a member does not remove the subtree below it.
        let parent = set(&[vec![f("a")]]);
        assert_eq!(a.difference(&parent), a);
    }

    #[test]
    fn named_fields_with_children_become_members_but_list_items_do_not_change() {
        let item = PathElement::key(&[("name", &json!("a"))]);
        let s = set(&[vec![f("spec"), f("env"), item.clone(), f("value")]]);
        let e = s.with_named_fields_as_members();
        assert!(e.has(&[f("spec")]));
        assert!(e.has(&[f("spec"), f("env")]));
        assert!(!e.has(&[f("spec"), f("env"), item.clone()]));
        assert!(e.has(&[f("spec"), f("env"), item, f("value")]));
    }

    #[test]
    fn paths_list_members_before_subtrees_and_removal_prunes_empty_levels() {
        let mut s = set(&[vec![f("b"), f("x")], vec![f("a")], vec![f("c")]]);
        let printed: Vec<String> = s.paths().iter().map(|p| path_string(p)).collect();
        assert_eq!(printed, [".a", ".c", ".b.x"]);
        s.remove(&[f("b"), f("x")]);
        assert_eq!(s, set(&[vec![f("a")], vec![f("c")]]));
        s.retain_top(|pe| pe != &f("a"));
        assert_eq!(s, set(&[vec![f("c")]]));
    }
}
