//! The Swagger 2.0 document served at `/openapi/v2`: every group version's paths, converted
//! from the OpenAPI 3 operations of [`crate::paths`], and every definition they reach.
//!
//! Conversion, as kube-openapi writes Swagger 2.0: a parameter's `schema.type` moves up to the
//! parameter; a request body becomes a `body` parameter and its media types the operation's
//! `consumes`; a response keeps one `schema` and its media types become `produces`.

use serde_json::{Map, Value, json};

use crate::paths::{V3_REF, obj};
use crate::schemas::{self, Registry, V2_REF};
use crate::v3::{self, INFO_TITLE, INFO_VERSION};

/// The whole Swagger 2.0 document, from the OpenAPI 3 paths of every group version.
pub(crate) fn document(registry: &Registry, group_versions: &[Map<String, Value>]) -> Value {
    let mut paths = Map::new();
    for gv_paths in group_versions {
        for (path, item) in gv_paths {
            paths.insert(path.clone(), path_item(item));
        }
    }
    let mut roots = Vec::new();
    for item in paths.values() {
        schemas::collect_refs(item, V2_REF, &mut roots);
    }
    let definitions: Map<String, Value> = schemas::closure(registry, roots)
        .into_iter()
        .filter_map(|name| registry.get(&name).map(|s| (name, s.clone())))
        .collect();
    obj([
        ("swagger", Value::from("2.0")),
        (
            "info",
            json!({"title": INFO_TITLE, "version": INFO_VERSION}),
        ),
        ("paths", Value::Object(paths)),
        ("definitions", Value::Object(definitions)),
        ("securityDefinitions", v3::security_schemes()),
        ("security", json!([{"BearerToken": []}])),
    ])
}

const METHODS: &[&str] = &["get", "put", "post", "delete", "options", "head", "patch"];

fn path_item(item: &Value) -> Value {
    let mut out = Map::new();
    for (key, value) in item.as_object().into_iter().flatten() {
        if key == "parameters" {
            out.insert(key.clone(), parameters(value));
        } else if METHODS.contains(&key.as_str()) {
            out.insert(key.clone(), operation(value));
        }
    }
    Value::Object(out)
}

fn parameters(list: &Value) -> Value {
    let converted = list.as_array().into_iter().flatten().map(|p| {
        let mut out = p.as_object().cloned().unwrap_or_default();
        if let Some(Value::Object(schema)) = out.remove("schema") {
            out.extend(schema);
        }
        Value::Object(out)
    });
    Value::Array(converted.collect())
}

fn operation(op: &Value) -> Value {
    let Some(op) = op.as_object() else {
        return Value::Null;
    };
    let mut out = Map::new();
    let mut params = op
        .get("parameters")
        .map(parameters)
        .and_then(|p| p.as_array().cloned())
        .unwrap_or_default();
    if let Some(body) = op.get("requestBody") {
        let content = body.get("content").and_then(Value::as_object);
        let consumes: Vec<&String> = content.into_iter().flat_map(|c| c.keys()).collect();
        let schema = content
            .and_then(|c| c.values().next())
            .and_then(|m| m.get("schema"))
            .map(to_v2_refs)
            .unwrap_or_else(|| json!({"type": "object"}));
        let required = body.get("required").cloned().unwrap_or(Value::Bool(false));
        params.insert(
            0,
            obj([
                ("name", Value::from("body")),
                ("in", Value::from("body")),
                ("required", required),
                ("schema", schema),
            ]),
        );
        out.insert("consumes".into(), json!(consumes));
    } else {
        out.insert("consumes".into(), json!(["*/*"]));
    }
    let mut produces: Vec<String> = Vec::new();
    let mut responses = Map::new();
    for (code, response) in op
        .get("responses")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
    {
        let mut converted = Map::new();
        converted.insert(
            "description".into(),
            response.get("description").cloned().unwrap_or_default(),
        );
        if let Some(content) = response.get("content").and_then(Value::as_object) {
            if produces.is_empty() {
                produces = content.keys().cloned().collect();
            }
            if let Some(schema) = content.values().next().and_then(|m| m.get("schema")) {
                converted.insert("schema".into(), to_v2_refs(schema));
            }
        }
        responses.insert(code.clone(), Value::Object(converted));
    }
    out.insert("produces".into(), json!(produces));
    out.insert("responses".into(), Value::Object(responses));
    out.insert("schemes".into(), json!(["https"]));
    if !params.is_empty() {
        out.insert("parameters".into(), Value::Array(params));
    }
    for (key, value) in op {
        if matches!(key.as_str(), "description" | "operationId" | "tags") || key.starts_with("x-") {
            out.insert(key.clone(), value.clone());
        }
    }
    Value::Object(out)
}

/// A schema with its OpenAPI 3 references rewritten to `#/definitions/`.
fn to_v2_refs(schema: &Value) -> Value {
    let mut out = schema.clone();
    schemas::walk_mut(&mut out, &mut |node| {
        if let Some(Value::String(target)) = node.get_mut("$ref")
            && let Some(name) = target.strip_prefix(V3_REF)
        {
            *target = format!("{V2_REF}{name}");
        }
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schemas::registry;

    #[test]
    fn patch_operations_become_swagger_with_consumes_and_inline_field_validation() {
        let registry = registry();
        let gv = v3::group_version_paths(registry, "apps", "v1");
        let doc = document(registry, std::slice::from_ref(&gv));
        let patch =
            &doc["paths"]["/apis/apps/v1/namespaces/{namespace}/deployments/{name}"]["patch"];
        let consumes = patch["consumes"].as_array().unwrap();
        assert!(consumes.contains(&json!("application/strategic-merge-patch+json")));
        let params = patch["parameters"].as_array().unwrap();
        assert_eq!(params[0]["in"], "body");
        assert_eq!(
            params[0]["schema"]["$ref"],
            format!("{V2_REF}{}", schemas::PATCH)
        );
        let validation = params
            .iter()
            .find(|p| p["name"] == "fieldValidation")
            .unwrap();
        assert_eq!(validation["in"], "query");
        assert_eq!(validation["type"], "string");
        assert_eq!(
            patch["x-kubernetes-group-version-kind"],
            json!({"group": "apps", "version": "v1", "kind": "Deployment"})
        );
        assert_eq!(
            patch["responses"]["200"]["schema"]["$ref"],
            "#/definitions/io.k8s.api.apps.v1.Deployment"
        );
    }
}
