//! OpenAPI 3.0 documents, one per group version (`api/v1`, `apis/apps/v1`), as kube-openapi
//! serves them under `/openapi/v3/<group version>`.
//!
//! Each document holds the group version's paths and exactly the schemas they reach, in
//! `components.schemas`. Schema references become `#/components/schemas/NAME`, and a reference
//! that carries its own `description` is wrapped as `allOf: [{$ref}]` next to it, as upstream
//! writes them (OpenAPI 3.0 ignores siblings of `$ref`).

use serde_json::{Map, Value, json};
use skiff_apimachinery::catalog;

use crate::paths::{self, V3_REF, obj};
use crate::schemas::{self, Registry, V2_REF};

/// Title and version in every document's `info`.
pub const INFO_TITLE: &str = "Kubernetes";
/// The Kubernetes version whose API the documents describe (k8s-openapi's `v1_33` feature).
pub const INFO_VERSION: &str = "v1.33.0";

/// `api/v1` or `apis/<group>/<version>`: the key of a group version in the `/openapi/v3` index.
pub fn index_key(group: &str, version: &str) -> String {
    paths::prefix(group, version)
        .trim_start_matches('/')
        .to_string()
}

/// The paths of every catalog resource in `group/version`, plus its discovery path.
pub(crate) fn group_version_paths(
    registry: &Registry,
    group: &str,
    version: &str,
) -> Map<String, Value> {
    let mut paths = Map::new();
    paths::discovery_path(group, version, &mut paths);
    for resource in catalog::builtins()
        .iter()
        .filter(|r| r.group == group && r.version == version)
    {
        paths::resource_paths(registry, resource, &mut paths);
    }
    paths
}

/// The OpenAPI 3 document of one group version, from its paths.
pub(crate) fn document(registry: &Registry, paths: Map<String, Value>) -> Value {
    let mut roots = Vec::new();
    for item in paths.values() {
        schemas::collect_refs(item, V3_REF, &mut roots);
    }
    let components: Map<String, Value> = schemas::closure(registry, roots)
        .into_iter()
        .filter_map(|name| {
            let schema = to_v3(&name, registry.get(&name)?);
            Some((name, schema))
        })
        .collect();
    obj([
        ("openapi", Value::from("3.0.0")),
        (
            "info",
            json!({"title": INFO_TITLE, "version": INFO_VERSION}),
        ),
        ("paths", Value::Object(paths)),
        (
            "components",
            obj([
                ("schemas", Value::Object(components)),
                ("securitySchemes", security_schemes()),
            ]),
        ),
        ("security", json!([{"BearerToken": []}])),
    ])
}

/// The bearer-token scheme every document declares, as upstream.
pub(crate) fn security_schemes() -> Value {
    json!({
        "BearerToken": {
            "type": "apiKey",
            "name": "authorization",
            "in": "header",
            "description": "Bearer Token authentication",
        },
    })
}

/// A registry definition rewritten for OpenAPI 3.
pub(crate) fn to_v3(name: &str, schema: &Value) -> Value {
    if let Some(replaced) = schemas::v3_override(name, schema) {
        return replaced;
    }
    let mut out = schema.clone();
    schemas::walk_mut(&mut out, &mut |node| {
        let Some(Value::String(target)) = node.get("$ref") else {
            return;
        };
        let target = match target.strip_prefix(V2_REF) {
            Some(name) => format!("{V3_REF}{name}"),
            None => target.clone(),
        };
        if node.len() == 1 {
            node.insert("$ref".into(), Value::String(target));
        } else {
            node.remove("$ref");
            node.insert("allOf".into(), json!([{"$ref": target}]));
        }
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schemas::registry;

    #[test]
    fn index_keys_match_upstream() {
        assert_eq!(index_key("", "v1"), "api/v1");
        assert_eq!(index_key("apps", "v1"), "apis/apps/v1");
    }

    #[test]
    fn described_references_are_wrapped_in_all_of() {
        let pod = registry().get("io.k8s.api.core.v1.Pod").unwrap();
        let v3 = to_v3("io.k8s.api.core.v1.Pod", pod);
        let spec = &v3["properties"]["spec"];
        assert_eq!(
            spec["allOf"][0]["$ref"],
            "#/components/schemas/io.k8s.api.core.v1.PodSpec"
        );
        assert!(spec["description"].is_string());
        assert!(spec.get("$ref").is_none());
    }

    #[test]
    fn int_or_string_is_a_one_of_in_v3() {
        let name = crate::schemas::INT_OR_STRING;
        let v3 = to_v3(name, registry().get(name).unwrap());
        assert_eq!(v3["format"], "int-or-string");
        assert_eq!(
            v3["oneOf"],
            json!([{"type": "integer"}, {"type": "string"}])
        );
    }
}
