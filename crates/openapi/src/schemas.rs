//! The schema registry: every definition the documents may contain, generated once per process
//! from k8s-openapi's `schemars` impls and corrected to the shape upstream's kube-openapi emits.
//!
//! Definitions are kept in Swagger 2.0 form (`$ref` is `#/definitions/NAME` and may carry a
//! sibling `description`); [`crate::v3`] rewrites them for OpenAPI 3. Corrections made here:
//! - `IntOrString` and `Quantity` get upstream's scalar shapes (k8s-openapi writes CRD-style
//!   `x-kubernetes-int-or-string`); the v3 shapes are in [`v3_override`].
//! - apiextensions' free-form values (`JSON`, `JSONSchemaPropsOr…`) have no type, as upstream.
//! - `metadata` is dropped from `required` (k8s-openapi requires it because its structs do;
//!   upstream never does).
//! - Every kind gets `x-kubernetes-group-version-kind`; list kinds (`PodList`) are synthesized
//!   for every listable catalog resource, since k8s-openapi has one generic `List<T>`.
//! - Strategic-merge-patch extensions come from [`crate::patch_meta`].

use std::collections::HashMap;
use std::sync::OnceLock;

use schemars::generate::SchemaSettings;
use serde_json::{Map, Value, json};
use skiff_apimachinery::catalog::{self, ResourceType};

use crate::patch_meta;
use crate::types;

/// Prefix of a definition reference in Swagger 2.0 form.
pub(crate) const V2_REF: &str = "#/definitions/";

pub(crate) const INT_OR_STRING: &str = "io.k8s.apimachinery.pkg.util.intstr.IntOrString";
pub(crate) const QUANTITY: &str = "io.k8s.apimachinery.pkg.api.resource.Quantity";
pub(crate) const LIST_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ListMeta";
pub(crate) const STATUS: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.Status";
pub(crate) const DELETE_OPTIONS: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.DeleteOptions";
pub(crate) const WATCH_EVENT: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.WatchEvent";
pub(crate) const PATCH: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.Patch";
pub(crate) const API_RESOURCE_LIST: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.APIResourceList";

/// apiextensions' free-form values (a schema's `default`, `enum` and `example`, and the
/// schema-or-bool/array unions): upstream publishes them without a type, so that a client
/// validating against the document accepts any JSON there.
const ANY_VALUE: &[&str] = &[
    "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.JSON",
    "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.JSONSchemaPropsOrArray",
    "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.JSONSchemaPropsOrBool",
    "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.JSONSchemaPropsOrStringArray",
];

/// Extension naming the kinds a definition is (a list) or an operation speaks (one object).
pub(crate) const GVK_EXTENSION: &str = "x-kubernetes-group-version-kind";

/// All definitions, and which one each kind is.
#[derive(Debug)]
pub(crate) struct Registry {
    /// Definitions by upstream name, in Swagger 2.0 form.
    pub definitions: Map<String, Value>,
    /// Definition name of each kind, keyed by (group, version, kind).
    by_gvk: HashMap<(String, String, String), String>,
    /// Catalog kinds that no k8s-openapi type describes; they get an open placeholder schema.
    pub placeholders: Vec<String>,
    /// The registry this one adds to (custom resources' definitions over the built-in ones).
    pub base: Option<&'static Registry>,
}

impl Registry {
    /// The definition of `group/version, kind`, if the registry has one.
    pub fn name_of(&self, group: &str, version: &str, kind: &str) -> Option<&str> {
        self.by_gvk
            .get(&(group.to_string(), version.to_string(), kind.to_string()))
            .map(String::as_str)
            .or_else(|| self.base?.name_of(group, version, kind))
    }

    pub fn get(&self, name: &str) -> Option<&Value> {
        self.definitions.get(name).or_else(|| self.base?.get(name))
    }

    /// A registry over the built-in one, holding `definitions` of the kinds `by_gvk` names.
    pub fn over_builtins(
        definitions: Map<String, Value>,
        by_gvk: HashMap<(String, String, String), String>,
    ) -> Registry {
        Registry {
            definitions,
            by_gvk,
            placeholders: Vec::new(),
            base: Some(registry()),
        }
    }
}

/// The process-wide registry, built on first use.
pub(crate) fn registry() -> &'static Registry {
    static REGISTRY: OnceLock<Registry> = OnceLock::new();
    REGISTRY.get_or_init(build)
}

fn build() -> Registry {
    let mut generator = SchemaSettings::draft2020_12()
        .with(|s| {
            s.definitions_path = "/definitions".into();
            s.meta_schema = None;
        })
        .into_generator();
    let roots = types::generate(&mut generator);
    let mut definitions = generator.take_definitions(false);

    for (name, schema) in definitions.iter_mut() {
        strip_required_metadata(schema);
        if name == INT_OR_STRING || name == QUANTITY {
            *schema = v2_scalar(name, schema);
        }
        if ANY_VALUE.contains(&name.as_str()) {
            let description = schema.get("description").cloned().unwrap_or_default();
            *schema = json!({ "description": description });
        }
    }

    let mut by_gvk = HashMap::new();
    for root in &roots {
        if let Some(gvk) = root.gvk {
            set_gvks(&mut definitions, &root.name, &[gvk]);
            by_gvk.insert(owned(gvk), root.name.clone());
        }
    }

    let served = served_group_versions();
    for shared in [DELETE_OPTIONS, WATCH_EVENT] {
        let kind = shared.rsplit('.').next().unwrap_or(shared);
        let gvks: Vec<(&str, &str, &str)> = served
            .iter()
            .map(|(g, v)| (g.as_str(), v.as_str(), kind))
            .collect();
        set_gvks(&mut definitions, shared, &gvks);
    }

    let mut placeholders = Vec::new();
    for resource in catalog::builtins() {
        let key = owned((&resource.group, &resource.version, &resource.kind));
        let item = match by_gvk.get(&key) {
            Some(name) => name.clone(),
            None => {
                let name = placeholder_name(resource);
                definitions.insert(name.clone(), placeholder(resource));
                by_gvk.insert(key, name.clone());
                placeholders.push(name.clone());
                name
            }
        };
        if resource.supports("list") {
            let list_name = format!("{item}List");
            let list_kind = resource.list_kind();
            let list = list_schema(resource, &item, &definitions);
            definitions.insert(list_name.clone(), list);
            by_gvk.insert(
                (resource.group.clone(), resource.version.clone(), list_kind),
                list_name,
            );
        }
    }

    patch_meta::apply(&mut definitions);

    Registry {
        definitions,
        by_gvk,
        placeholders,
        base: None,
    }
}

fn owned((g, v, k): (&str, &str, &str)) -> (String, String, String) {
    (g.to_string(), v.to_string(), k.to_string())
}

/// `("", "v1")` then every built-in group's served versions, in discovery order.
pub(crate) fn served_group_versions() -> Vec<(String, String)> {
    let mut out = vec![(String::new(), "v1".to_string())];
    for r in catalog::builtins() {
        if !r.group.is_empty() && !out.iter().any(|(g, v)| *g == r.group && *v == r.version) {
            out.push((r.group.clone(), r.version.clone()));
        }
    }
    out
}

/// Sets `x-kubernetes-group-version-kind` on a definition to the given kinds.
fn set_gvks(definitions: &mut Map<String, Value>, name: &str, gvks: &[(&str, &str, &str)]) {
    let Some(Value::Object(schema)) = definitions.get_mut(name) else {
        return;
    };
    let list = gvks
        .iter()
        .map(|(group, version, kind)| json!({"group": group, "version": version, "kind": kind}))
        .collect();
    schema.insert(GVK_EXTENSION.into(), Value::Array(list));
}

/// Drops `metadata` from a schema's `required` list, and the list if that empties it.
fn strip_required_metadata(schema: &mut Value) {
    let Value::Object(object) = schema else {
        return;
    };
    let Some(Value::Array(required)) = object.get_mut("required") else {
        return;
    };
    required.retain(|field| field != "metadata");
    if required.is_empty() {
        object.remove("required");
    }
}

/// Upstream's Swagger 2.0 shape of the two scalar unions, keeping k8s-openapi's description.
fn v2_scalar(name: &str, generated: &Value) -> Value {
    let description = generated.get("description").cloned().unwrap_or_default();
    if name == INT_OR_STRING {
        json!({"description": description, "type": "string", "format": "int-or-string"})
    } else {
        json!({"description": description, "type": "string"})
    }
}

/// Upstream's OpenAPI 3 shape of a definition, where it differs from the Swagger 2.0 one.
pub(crate) fn v3_override(name: &str, v2: &Value) -> Option<Value> {
    let description = v2.get("description").cloned().unwrap_or_default();
    match name {
        INT_OR_STRING => Some(json!({
            "description": description,
            "format": "int-or-string",
            "oneOf": [{"type": "integer"}, {"type": "string"}],
        })),
        QUANTITY => Some(json!({
            "description": description,
            "oneOf": [{"type": "string"}, {"type": "number"}],
        })),
        _ => None,
    }
}

/// Where a kind's definitions live (`io.k8s.api.apps.v1`), for kinds without a k8s-openapi type.
fn placeholder_name(resource: &ResourceType) -> String {
    let package = match resource.group.as_str() {
        "" => "core".to_string(),
        group => group
            .trim_end_matches(".k8s.io")
            .split('.')
            .next()
            .unwrap_or(group)
            .to_string(),
    };
    format!(
        "io.k8s.api.{package}.{}.{}",
        resource.version, resource.kind
    )
}

/// An open schema for a kind the registry has no type for: its fields are not checked.
fn placeholder(resource: &ResourceType) -> Value {
    json!({
        "description": format!("{} objects (no schema is published for this kind).", resource.kind),
        "type": "object",
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"$ref": format!("{V2_REF}io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta")},
        },
        "x-kubernetes-preserve-unknown-fields": true,
    })
}

/// The `<Kind>List` definition: `apiVersion`, `kind`, `metadata` (ListMeta) and `items`.
pub(crate) fn list_schema(
    resource: &ResourceType,
    item: &str,
    definitions: &Map<String, Value>,
) -> Value {
    let field_doc = |field: &str| {
        definitions
            .get(item)
            .and_then(|s| s.pointer(&format!("/properties/{field}/description")))
            .cloned()
            .unwrap_or_default()
    };
    json!({
        "description": format!("{} is a list of {} objects.", resource.list_kind(), resource.kind),
        "type": "object",
        "properties": {
            "apiVersion": {"description": field_doc("apiVersion"), "type": "string"},
            "kind": {"description": field_doc("kind"), "type": "string"},
            "items": {
                "description": format!("The {} in the list.", resource.plural),
                "type": "array",
                "items": {"$ref": format!("{V2_REF}{item}")},
            },
            "metadata": {
                "$ref": format!("{V2_REF}{LIST_META}"),
                "description": "Standard list metadata: resourceVersion and continue token. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds",
            },
        },
        "required": ["items"],
        GVK_EXTENSION: [{
            "group": resource.group,
            "version": resource.version,
            "kind": resource.list_kind(),
        }],
    })
}

/// Calls `visit` on every schema node under `schema` (itself included), following the
/// keywords that hold subschemas.
pub(crate) fn walk_mut(schema: &mut Value, visit: &mut impl FnMut(&mut Map<String, Value>)) {
    let Value::Object(object) = schema else {
        return;
    };
    visit(object);
    if let Some(Value::Object(properties)) = object.get_mut("properties") {
        for property in properties.values_mut() {
            walk_mut(property, visit);
        }
    }
    for key in ["items", "additionalProperties", "not"] {
        if let Some(sub) = object.get_mut(key) {
            walk_mut(sub, visit);
        }
    }
    for key in ["allOf", "oneOf", "anyOf"] {
        if let Some(Value::Array(list)) = object.get_mut(key) {
            for sub in list {
                walk_mut(sub, visit);
            }
        }
    }
}

/// Every definition name referenced (with `prefix`) anywhere in `value`.
pub(crate) fn collect_refs(value: &Value, prefix: &str, out: &mut Vec<String>) {
    match value {
        Value::Object(object) => {
            for (key, child) in object {
                match (key.as_str(), child) {
                    ("$ref", Value::String(target)) => {
                        if let Some(name) = target.strip_prefix(prefix) {
                            out.push(name.to_string());
                        }
                    }
                    _ => collect_refs(child, prefix, out),
                }
            }
        }
        Value::Array(list) => list.iter().for_each(|v| collect_refs(v, prefix, out)),
        _ => {}
    }
}

/// The names of `roots` and of every definition they reach, sorted.
pub(crate) fn closure(registry: &Registry, roots: Vec<String>) -> Vec<String> {
    let mut seen = std::collections::BTreeSet::new();
    let mut stack = roots;
    while let Some(name) = stack.pop() {
        if !seen.insert(name.clone()) {
            continue;
        }
        if let Some(schema) = registry.get(&name) {
            collect_refs(schema, V2_REF, &mut stack);
        }
    }
    seen.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_catalog_kind_has_a_generated_schema() {
        let registry = registry();
        assert!(
            registry.placeholders.is_empty(),
            "no k8s-openapi type listed in types.rs for {:?}",
            registry.placeholders
        );
        for r in catalog::builtins() {
            assert!(registry.name_of(&r.group, &r.version, &r.kind).is_some());
        }
    }

    #[test]
    fn pod_is_named_as_upstream_and_carries_its_kind() {
        let registry = registry();
        assert_eq!(
            registry.name_of("", "v1", "Pod"),
            Some("io.k8s.api.core.v1.Pod")
        );
        let pod = registry.get("io.k8s.api.core.v1.Pod").unwrap();
        assert_eq!(
            pod[GVK_EXTENSION],
            json!([{"group": "", "version": "v1", "kind": "Pod"}])
        );
        assert!(pod.get("required").is_none(), "metadata is not required");
    }

    #[test]
    fn list_kinds_are_synthesized_for_listable_resources() {
        let registry = registry();
        let name = registry.name_of("apps", "v1", "DeploymentList").unwrap();
        assert_eq!(name, "io.k8s.api.apps.v1.DeploymentList");
        let list = registry.get(name).unwrap();
        assert_eq!(
            list["properties"]["items"]["items"]["$ref"],
            "#/definitions/io.k8s.api.apps.v1.Deployment"
        );
        assert!(registry.name_of("", "v1", "BindingList").is_none());
    }

    #[test]
    fn scalar_unions_take_upstream_swagger_shapes() {
        let registry = registry();
        assert_eq!(
            registry.get(INT_OR_STRING).unwrap()["format"],
            "int-or-string"
        );
        assert_eq!(registry.get(QUANTITY).unwrap()["type"], "string");
        let json = registry
            .get("io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.JSON")
            .unwrap();
        assert!(
            json.get("type").is_none() && json["description"].is_string(),
            "{json}"
        );
        let time = registry
            .get("io.k8s.apimachinery.pkg.apis.meta.v1.Time")
            .unwrap();
        assert_eq!(time["format"], "date-time");
    }

    #[test]
    fn every_reference_resolves_within_the_registry() {
        let registry = registry();
        let mut refs = Vec::new();
        collect_refs(
            &Value::Object(registry.definitions.clone()),
            V2_REF,
            &mut refs,
        );
        for name in refs {
            assert!(
                registry.get(&name).is_some(),
                "dangling reference to {name}"
            );
        }
    }
}
