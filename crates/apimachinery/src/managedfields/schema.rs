//! How server-side apply sees each field of a built-in kind: lists are atomic, sets or maps keyed
//! by some fields (upstream's `x-kubernetes-list-type` / `x-kubernetes-list-map-keys`), objects
//! are granular or atomic (`+structType=atomic`, `+mapType=atomic`).
//!
//! The list keys come from the strategic-merge-patch metadata of [`crate::patch::schema`] (a
//! list merged by key is a list map on that key, a merged list of primitives is a set, anything
//! else is atomic), corrected where the list-map keys differ from the patch merge key (ports
//! are keyed by port and protocol). Atomic objects are named by field, which is unambiguous in
//! the built-in types (`selector`, `fieldRef`, …). Custom resources bring a [`Custom`] tree
//! from their CRD's structural schema (`x-kubernetes-list-type`, `x-kubernetes-list-map-keys`,
//! `x-kubernetes-map-type`), with `metadata` as the built-in ObjectMeta; what a schema leaves
//! open (`x-kubernetes-preserve-unknown-fields`), and kinds with neither, get upstream's
//! deduced schema: granular objects, atomic lists.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::patch::schema::{self as patch_schema, Field, OBJECT_META, Strategy, Type};

use super::fieldpath::PathElement;
use super::{Error, Result};

/// The root of a kind without patch metadata: only `metadata` is known.
static UNKNOWN_FIELDS: &[Field] = &[Field {
    name: "metadata",
    strategy: Strategy::Default,
    retain_keys: false,
    merge_key: None,
    ty: Some(&OBJECT_META),
}];
static UNKNOWN: Type = Type {
    name: "Unknown",
    fields: UNKNOWN_FIELDS,
};

/// The type of an object's root: a custom resource's from its schema, a built-in kind's from
/// its patch metadata.
pub fn root<'a>(group: &str, kind: &str, custom: Option<&'a Custom>) -> Node<'a> {
    Node {
        ty: Some(patch_schema::for_kind(group, kind).unwrap_or(&UNKNOWN)),
        custom,
        atomic: false,
        map: false,
        list: ListKind::Atomic,
        atomic_elements: false,
    }
}

/// Server-side apply's view of one node of a custom resource's structural schema, as
/// upstream's conversion of the schema to structured-merge-diff's: objects with `properties`
/// are structs, with `additionalProperties` maps; either is granular unless
/// `x-kubernetes-map-type: atomic`; arrays are atomic unless `x-kubernetes-list-type` says
/// `set` or `map`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Custom {
    pub properties: BTreeMap<String, Custom>,
    /// The schema of an `additionalProperties` map's values.
    pub values: Option<Box<Custom>>,
    pub items: Option<Box<Custom>>,
    pub list: CustomList,
    /// `x-kubernetes-map-type: atomic`.
    pub atomic: bool,
}

/// `x-kubernetes-list-type`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum CustomList {
    #[default]
    Atomic,
    Set,
    /// `map`, with its `x-kubernetes-list-map-keys`.
    Map(Vec<String>),
}

/// How the elements of a list are told apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListKind<'a> {
    /// The list is one value, replaced whole (the default).
    Atomic,
    /// A list of primitives whose elements are their own names (`v:"value"`).
    Set,
    /// A list of objects named by these key fields (`k:{"name":"a"}`).
    Map(Keys<'a>),
}

/// The key fields of a list map.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Keys<'a> {
    Builtin(&'static [&'static str]),
    Custom(&'a [String]),
}

impl Keys<'_> {
    pub fn names(&self) -> Vec<&str> {
        match self {
            Keys::Builtin(keys) => keys.to_vec(),
            Keys::Custom(keys) => keys.iter().map(String::as_str).collect(),
        }
    }
}

/// What is known about the value at one place of an object.
#[derive(Debug, Clone, Copy)]
pub struct Node<'a> {
    /// The patch-metadata type of this object or of each list element.
    ty: Option<&'static Type>,
    /// A custom resource's schema at this place (at the root: the whole schema).
    custom: Option<&'a Custom>,
    /// The object (or list element) is one value, owned and replaced whole.
    pub atomic: bool,
    /// The object is a map with arbitrary keys (`labels`, `data`), not a struct.
    pub map: bool,
    /// When the value is a list: how its elements are named.
    pub list: ListKind<'a>,
    /// When the value is a list: its elements are atomic objects.
    atomic_elements: bool,
}

/// Objects that upstream declares atomic (`+structType=atomic` / `+mapType=atomic`).
const ATOMIC_OBJECTS: &[&str] = &[
    "selector",
    "nodeSelector",
    "labelSelector",
    "namespaceSelector",
    "podSelector",
    "configMapKeyRef",
    "secretKeyRef",
    "fieldRef",
    "resourceFieldRef",
];

/// Lists whose elements are atomic objects.
const ATOMIC_ELEMENTS: &[&str] = &["ownerReferences", "imagePullSecrets"];

/// Fields that are maps with arbitrary keys rather than structs.
const MAP_FIELDS: &[&str] = &[
    "labels",
    "annotations",
    "data",
    "binaryData",
    "stringData",
    "limits",
    "requests",
    "capacity",
    "allocatable",
    "hard",
    "used",
];

/// List-map keys that differ from the patch merge key, by (owning type, field).
fn list_map_keys(owner: &str, field: &str) -> Option<&'static [&'static str]> {
    match (owner, field) {
        ("Container" | "EphemeralContainer", "ports") => Some(&["containerPort", "protocol"]),
        ("ServiceSpec", "ports") => Some(&["port", "protocol"]),
        ("PodSpec", "topologySpreadConstraints") => Some(&["topologyKey", "whenUnsatisfiable"]),
        _ => None,
    }
}

/// The value a list-map key has when the element omits it (upstream's OpenAPI defaults).
fn key_default(key: &str) -> Option<Value> {
    (key == "protocol").then(|| Value::String("TCP".into()))
}

impl<'a> Node<'a> {
    /// What is known about field `name` of this object.
    pub fn field(&self, name: &str) -> Node<'a> {
        if let Some(custom) = self.custom {
            // a custom resource's metadata is ObjectMeta, whatever its schema says
            let at_root = self.ty.is_some();
            if !(at_root && name == "metadata") {
                let child = custom.properties.get(name).or(custom.values.as_deref());
                return child.map_or(Node::plain(None), Node::custom);
            }
            return Node {
                custom: None,
                ..*self
            }
            .field(name);
        }
        if self.map {
            return Node::plain(None);
        }
        let meta = self.ty.and_then(|t| t.field(name));
        let list = match meta {
            Some(f) if f.strategy == Strategy::Merge => match f.merge_key.as_ref() {
                Some(key) => ListKind::Map(Keys::Builtin(
                    self.ty
                        .and_then(|t| list_map_keys(t.name, name))
                        .unwrap_or(std::slice::from_ref(key)),
                )),
                None => ListKind::Set,
            },
            _ => ListKind::Atomic,
        };
        Node {
            ty: meta.and_then(|f| f.ty),
            custom: None,
            atomic: ATOMIC_OBJECTS.contains(&name),
            map: MAP_FIELDS.contains(&name),
            list,
            atomic_elements: ATOMIC_ELEMENTS.contains(&name),
        }
    }

    /// What is known about each element of this list.
    pub fn element(&self) -> Node<'a> {
        if let Some(custom) = self.custom {
            return custom
                .items
                .as_deref()
                .map_or(Node::plain(None), Node::custom);
        }
        Node {
            ty: self.ty,
            custom: None,
            atomic: self.atomic_elements,
            map: false,
            list: ListKind::Atomic,
            atomic_elements: false,
        }
    }

    fn custom(c: &'a Custom) -> Node<'a> {
        Node {
            ty: None,
            custom: Some(c),
            atomic: c.atomic,
            map: c.values.is_some() && c.properties.is_empty(),
            list: match &c.list {
                CustomList::Atomic => ListKind::Atomic,
                CustomList::Set => ListKind::Set,
                CustomList::Map(keys) => ListKind::Map(Keys::Custom(keys)),
            },
            atomic_elements: false,
        }
    }

    fn plain(ty: Option<&'static Type>) -> Node<'a> {
        Node {
            ty,
            custom: None,
            atomic: false,
            map: false,
            list: ListKind::Atomic,
            atomic_elements: false,
        }
    }

    /// The name of element `index` of this list: its key fields, its value, or (for lists
    /// whose elements lack a key) its index when `lenient`, an error otherwise.
    pub fn element_name(&self, item: &Value, index: usize, lenient: bool) -> Result<PathElement> {
        match self.list {
            ListKind::Atomic => Ok(PathElement::Index(index)),
            ListKind::Set => Ok(PathElement::value(item)),
            ListKind::Map(keys) => {
                // upstream's OpenAPI defaults of built-in keys (a CRD's keys are defaulted
                // with the object)
                let builtin = matches!(keys, Keys::Builtin(_));
                let keys = keys.names();
                let mut fields = Vec::with_capacity(keys.len());
                for key in keys {
                    match item.get(key).filter(|v| !v.is_null()).cloned() {
                        Some(v) => fields.push((key, v)),
                        None => match key_default(key).filter(|_| builtin) {
                            Some(d) => fields.push((key, d)),
                            None if lenient => return Ok(PathElement::Index(index)),
                            None => {
                                return Err(Error::MissingListKey {
                                    index,
                                    key: key.to_string(),
                                });
                            }
                        },
                    }
                }
                let refs: Vec<(&str, &Value)> = fields.iter().map(|(k, v)| (*k, v)).collect();
                Ok(PathElement::key(&refs))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn container_lists_are_keyed_by_their_list_map_keys() {
        let pod = root("", "Pod", None);
        let containers = pod.field("spec").field("containers");
        assert_eq!(containers.list, ListKind::Map(Keys::Builtin(&["name"])));
        let ports = containers.element().field("ports");
        assert_eq!(
            ports.list,
            ListKind::Map(Keys::Builtin(&["containerPort", "protocol"]))
        );
        let port = ports
            .element_name(&json!({"containerPort": 80}), 0, false)
            .unwrap();
        assert_eq!(port.encode(), r#"k:{"containerPort":80,"protocol":"TCP"}"#);
        assert_eq!(
            containers.element().field("env").list,
            ListKind::Map(Keys::Builtin(&["name"]))
        );
        assert_eq!(containers.element().field("args").list, ListKind::Atomic);
    }

    #[test]
    fn finalizers_are_a_set_and_owner_references_hold_atomic_elements() {
        let meta = root("apps", "Deployment", None).field("metadata");
        assert_eq!(meta.field("finalizers").list, ListKind::Set);
        let owners = meta.field("ownerReferences");
        assert_eq!(owners.list, ListKind::Map(Keys::Builtin(&["uid"])));
        assert!(owners.element().atomic);
        assert!(meta.field("labels").map);
    }

    #[test]
    fn selectors_are_atomic_and_unknown_kinds_still_know_metadata() {
        let spec = root("apps", "Deployment", None).field("spec");
        assert!(spec.field("selector").atomic);
        assert!(!spec.field("template").atomic);
        let cr = root("example.com", "Widget", None);
        assert_eq!(cr.field("metadata").field("finalizers").list, ListKind::Set);
        assert_eq!(cr.field("spec").field("items").list, ListKind::Atomic);
    }

    #[test]
    fn custom_resources_follow_their_schemas_list_and_map_types() {
        let keyed = Custom {
            list: CustomList::Map(vec!["name".into()]),
            items: Some(Box::new(Custom::default())),
            ..Default::default()
        };
        let atomic_map = Custom {
            values: Some(Box::new(Custom::default())),
            atomic: true,
            ..Default::default()
        };
        let spec = Custom {
            properties: [
                ("ports".to_string(), keyed),
                (
                    "tags".to_string(),
                    Custom {
                        list: CustomList::Set,
                        ..Default::default()
                    },
                ),
                ("selector".to_string(), atomic_map),
                ("args".to_string(), Custom::default()),
            ]
            .into(),
            ..Default::default()
        };
        let schema = Custom {
            properties: [
                ("spec".to_string(), spec),
                ("metadata".to_string(), Custom::default()),
            ]
            .into(),
            ..Default::default()
        };
        let cr = root("example.com", "Widget", Some(&schema));
        let spec = cr.field("spec");
        let ports = spec.field("ports");
        assert_eq!(
            ports.list,
            ListKind::Map(Keys::Custom(&["name".to_string()]))
        );
        assert_eq!(
            ports
                .element_name(&json!({"name": "http", "port": 80}), 0, false)
                .unwrap()
                .encode(),
            r#"k:{"name":"http"}"#
        );
        assert!(matches!(
            ports.element_name(&json!({"protocol": "TCP"}), 1, false),
            Err(Error::MissingListKey { index: 1, .. })
        ));
        assert_eq!(spec.field("tags").list, ListKind::Set);
        assert!(spec.field("selector").atomic && spec.field("selector").map);
        assert_eq!(spec.field("args").list, ListKind::Atomic);
        assert_eq!(spec.field("unknown").list, ListKind::Atomic);
        // metadata stays ObjectMeta whatever the schema says
        assert_eq!(cr.field("metadata").field("finalizers").list, ListKind::Set);
    }

    #[test]
    fn a_keyed_element_without_its_key_is_an_error_unless_lenient() {
        let containers = root("", "Pod", None).field("spec").field("containers");
        let err = containers
            .element_name(&json!({"image": "x"}), 2, false)
            .unwrap_err();
        assert!(matches!(err, Error::MissingListKey { index: 2, .. }));
        assert_eq!(
            containers
                .element_name(&json!({"image": "x"}), 2, true)
                .unwrap(),
            PathElement::Index(2)
        );
    }
}
