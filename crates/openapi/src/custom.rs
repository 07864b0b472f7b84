//! Custom resources in the documents, as upstream's CRD OpenAPI builder publishes them: each
//! served version's schema as a definition named by the reversed group (`com.example.v1.Widget`
//! for `example.com/v1`), with `apiVersion`, `kind` and `metadata` described as for every
//! kind, a `<Kind>List`, and the resource's paths in its group version's document.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use serde_json::{Map, Value, json};
use skiff_apimachinery::catalog::ResourceType;

use crate::paths;
use crate::schemas::{self, GVK_EXTENSION, Registry, V2_REF};

/// One served version of a custom resource and its structural schema (`openAPIV3Schema`),
/// shared: every set of published documents holds each custom resource's.
#[derive(Debug, Clone, PartialEq)]
pub struct Custom {
    pub resource: ResourceType,
    pub schema: Arc<Value>,
}

const API_VERSION_DOC: &str = "APIVersion defines the versioned schema of this representation of an object. Servers should convert recognized schemas to the latest internal value, and may reject unrecognized values. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#resources";
const KIND_DOC: &str = "Kind is a string value representing the REST resource this object represents. Servers may infer this from the endpoint the client submits requests to. Cannot be updated. In CamelCase. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds";
const METADATA_DOC: &str = "Standard object's metadata. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata";
const OBJECT_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta";

/// Upstream's definition name of a custom kind: the group's labels reversed, then version and
/// kind (`com.example.stable.v1.CronTab`).
pub fn definition_name(group: &str, version: &str, kind: &str) -> String {
    let reversed: Vec<&str> = group.split('.').rev().collect();
    format!("{}.{version}.{kind}", reversed.join("."))
}

/// The definition of one custom kind: its schema with the standard fields of every kind.
fn definition(custom: &Custom) -> Value {
    let r = &custom.resource;
    let mut schema = Value::clone(&custom.schema);
    if !schema.is_object() {
        schema = json!({"type": "object"});
    }
    let object = schema.as_object_mut().expect("made an object above");
    let properties = object
        .entry("properties")
        .or_insert_with(|| json!({}))
        .as_object_mut();
    if let Some(properties) = properties {
        properties.insert(
            "apiVersion".into(),
            json!({"description": API_VERSION_DOC, "type": "string"}),
        );
        properties.insert(
            "kind".into(),
            json!({"description": KIND_DOC, "type": "string"}),
        );
        properties.insert(
            "metadata".into(),
            json!({"$ref": format!("{V2_REF}{OBJECT_META}"), "description": METADATA_DOC}),
        );
    }
    object.insert(
        GVK_EXTENSION.into(),
        json!([{"group": r.group, "version": r.version, "kind": r.kind}]),
    );
    schema
}

/// A registry holding the custom kinds (and their lists) over the built-in definitions.
pub(crate) fn registry(customs: &[&Custom]) -> Registry {
    let mut definitions = Map::new();
    let mut by_gvk = HashMap::new();
    for custom in customs {
        let r = &custom.resource;
        let name = definition_name(&r.group, &r.version, &r.kind);
        definitions.insert(name.clone(), definition(custom));
        let list = schemas::list_schema(r, &name, &definitions);
        let list_name = format!("{name}List");
        definitions.insert(list_name.clone(), list);
        by_gvk.insert((r.group.clone(), r.version.clone(), r.kind.clone()), name);
        by_gvk.insert(
            (r.group.clone(), r.version.clone(), r.list_kind()),
            list_name,
        );
    }
    Registry::over_builtins(definitions, by_gvk)
}

/// The paths of each custom group version, by index key (`apis/example.com/v1`), with its
/// discovery path.
pub(crate) fn group_version_paths(
    registry: &Registry,
    customs: &[&Custom],
) -> BTreeMap<String, Map<String, Value>> {
    let mut out: BTreeMap<String, Map<String, Value>> = BTreeMap::new();
    for custom in customs {
        let r = &custom.resource;
        let paths = out
            .entry(crate::v3::index_key(&r.group, &r.version))
            .or_insert_with(|| {
                let mut paths = Map::new();
                paths::discovery_path(&r.group, &r.version, &mut paths);
                paths
            });
        paths::resource_paths(registry, r, paths);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use skiff_apimachinery::catalog::CRUD;

    fn widget() -> Custom {
        Custom {
            resource: ResourceType {
                group: "example.com".into(),
                version: "v1".into(),
                kind: "Widget".into(),
                plural: "widgets".into(),
                singular: "widget".into(),
                namespaced: true,
                short_names: vec![],
                categories: vec![],
                verbs: CRUD.iter().map(|v| v.to_string()).collect(),
                subresources: vec![],
                builtin: false,
                storage_version: None,
            },
            schema: Arc::new(
                json!({"type": "object", "properties": {"spec": {"type": "object",
                "properties": {"size": {"type": "integer", "description": "How big."}}}}}),
            ),
        }
    }

    #[test]
    fn a_custom_kind_is_named_by_its_reversed_group_and_described_as_every_kind() {
        assert_eq!(
            definition_name("stable.example.com", "v1", "CronTab"),
            "com.example.stable.v1.CronTab"
        );
        let widget = widget();
        let registry = registry(&[&widget]);
        let name = registry.name_of("example.com", "v1", "Widget").unwrap();
        let def = registry.get(name).unwrap();
        assert_eq!(
            def["properties"]["spec"]["properties"]["size"]["type"],
            "integer"
        );
        assert_eq!(def["properties"]["kind"]["type"], "string");
        assert_eq!(def[GVK_EXTENSION][0]["kind"], "Widget");
        assert!(
            registry
                .name_of("example.com", "v1", "WidgetList")
                .is_some()
        );
        // Built-in definitions are reached through the base.
        assert!(registry.get(OBJECT_META).is_some());
        let paths = group_version_paths(&registry, &[&widget]);
        let gv = &paths["apis/example.com/v1"];
        assert!(gv.contains_key("/apis/example.com/v1/namespaces/{namespace}/widgets/{name}"));
    }

    #[test]
    fn documents_with_custom_resources_serve_their_group_version_and_keep_the_rest() {
        let base = crate::Documents::global();
        let docs = crate::Documents::with_custom(vec![widget()], base);
        let key = "apis/example.com/v1";
        assert!(docs.v3_paths().any(|p| p == key));
        assert_eq!(docs.v3_hash("api/v1"), base.v3_hash("api/v1"));
        let doc: Value = serde_json::from_slice(&docs.v3_group_version(key).unwrap()).unwrap();
        assert!(doc["components"]["schemas"]["com.example.v1.Widget"].is_object());
        let v2: Value = serde_json::from_slice(&docs.v2_json()).unwrap();
        assert!(v2["definitions"]["com.example.v1.Widget"].is_object());
        assert!(v2["definitions"]["io.k8s.api.core.v1.Pod"].is_object());
        // Unchanged resources keep their document (and hash) in the next generation.
        let next = crate::Documents::with_custom(vec![widget()], &docs);
        assert_eq!(next.v3_hash(key), docs.v3_hash(key));
        let gone = crate::Documents::with_custom(vec![], &next);
        assert!(!gone.v3_paths().any(|p| p == key));
    }
}
