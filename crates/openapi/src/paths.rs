//! The REST operations of every catalog resource, as OpenAPI 3 path items: the collection and
//! object paths, the all-namespaces list, each subresource, and the group version's discovery
//! path. [`crate::v2`] converts them to Swagger 2.0.
//!
//! What clients rely on here:
//! - every operation carries `x-kubernetes-group-version-kind` (one object), so `kubectl
//!   explain` maps a resource's collection path to its kind;
//! - every POST, PUT and PATCH lists the `fieldValidation` query parameter in its own
//!   `parameters`, which is how kubectl decides the server validates fields itself;
//! - PATCH request bodies list `application/strategic-merge-patch+json`, which lets kubectl
//!   compute strategic merge patches from the document.

use serde_json::{Map, Value, json};
use skiff_apimachinery::catalog::{ResourceType, Subresource};

use crate::params::{
    connect_params, delete_params, list_params, log_params, path_param, pretty, query, write_params,
};
use crate::schemas::{API_RESOURCE_LIST, DELETE_OPTIONS, PATCH, Registry, STATUS};

/// Prefix of a schema reference in OpenAPI 3 form.
pub(crate) const V3_REF: &str = "#/components/schemas/";

const OBJECT_MEDIA: &[&str] = &[
    "application/json",
    "application/vnd.kubernetes.protobuf",
    "application/yaml",
];
const LIST_MEDIA: &[&str] = &[
    "application/json",
    "application/json;stream=watch",
    "application/vnd.kubernetes.protobuf",
    "application/vnd.kubernetes.protobuf;stream=watch",
    "application/yaml",
];
const PATCH_MEDIA: &[&str] = &[
    "application/apply-patch+yaml",
    "application/json-patch+json",
    "application/merge-patch+json",
    "application/strategic-merge-patch+json",
];
const LOG_MEDIA: &[&str] = &[
    "application/json",
    "application/vnd.kubernetes.protobuf",
    "application/yaml",
    "text/plain",
];
const ANY_MEDIA: &[&str] = &["*/*"];

/// `/api/v1` for the core group, `/apis/<group>/<version>` otherwise.
pub(crate) fn prefix(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("/api/{version}")
    } else {
        format!("/apis/{group}/{version}")
    }
}

/// `Core`, `Apps`, `RbacAuthorization`: the group as it appears in operation ids.
fn group_word(group: &str) -> String {
    if group.is_empty() {
        return "Core".into();
    }
    group
        .trim_end_matches(".k8s.io")
        .split('.')
        .map(capitalize)
        .collect()
}

/// `core_v1`, `rbacAuthorization_v1`: the tag of a group version's operations.
fn tag(group: &str, version: &str) -> String {
    let mut word = group_word(group);
    if let Some(first) = word.get(..1) {
        word = first.to_lowercase() + &word[1..];
    }
    format!("{word}_{version}")
}

fn capitalize(s: &str) -> String {
    let mut chars = s.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}

/// An object built from owned values: unlike `json!`, which serializes every interpolated
/// value into a fresh copy, this moves them (the documents are megabytes of such objects).
pub(crate) fn obj<const N: usize>(pairs: [(&str, Value); N]) -> Value {
    Value::Object(pairs.into_iter().map(|(k, v)| (k.to_string(), v)).collect())
}

fn schema_ref(name: &str) -> Value {
    json!({"$ref": format!("{V3_REF}{name}")})
}

/// Responses with `schema` under each media type, plus 401.
fn responses(codes: &[(&str, &str)], schema: &Value, media: &[&str]) -> Value {
    let mut out = Map::new();
    for (code, description) in codes {
        let content: Map<String, Value> = media
            .iter()
            .map(|m| (m.to_string(), obj([("schema", schema.clone())])))
            .collect();
        out.insert(
            code.to_string(),
            obj([
                ("description", Value::from(*description)),
                ("content", Value::Object(content)),
            ]),
        );
    }
    out.insert("401".into(), json!({"description": "Unauthorized"}));
    Value::Object(out)
}

fn request_body(schema: &Value, media: &[&str], required: bool) -> Value {
    let content: Map<String, Value> = media
        .iter()
        .map(|m| (m.to_string(), obj([("schema", schema.clone())])))
        .collect();
    obj([
        ("content", Value::Object(content)),
        ("required", Value::Bool(required)),
    ])
}

const OK: &[(&str, &str)] = &[("200", "OK")];
const OK_CREATED: &[(&str, &str)] = &[("200", "OK"), ("201", "Created")];
const CREATED: &[(&str, &str)] = &[("200", "OK"), ("201", "Created"), ("202", "Accepted")];
const DELETED: &[(&str, &str)] = &[("200", "OK"), ("202", "Accepted")];

/// What one generated operation needs besides its path.
struct Op {
    action: &'static str,
    id: String,
    description: String,
    kind: (String, String, String),
    params: Vec<Value>,
    body: Option<Value>,
    responses: Value,
}

impl Op {
    fn render(self, tag: &str) -> Value {
        let (group, version, kind) = self.kind;
        let mut op = obj([
            ("description", Value::String(self.description)),
            ("operationId", Value::String(self.id)),
            ("responses", self.responses),
            ("tags", Value::Array(vec![Value::from(tag)])),
            ("x-kubernetes-action", Value::from(self.action)),
            (
                "x-kubernetes-group-version-kind",
                obj([
                    ("group", Value::String(group)),
                    ("version", Value::String(version)),
                    ("kind", Value::String(kind)),
                ]),
            ),
        ]);
        if !self.params.is_empty() {
            op["parameters"] = Value::Array(self.params);
        }
        if let Some(body) = self.body {
            op["requestBody"] = body;
        }
        op
    }
}

/// Paths, path items and the context shared by one resource's operations.
struct Builder<'a> {
    registry: &'a Registry,
    resource: &'a ResourceType,
    tag: String,
    word: String,
    paths: &'a mut Map<String, Value>,
}

impl Builder<'_> {
    fn kind(&self) -> (String, String, String) {
        let r = self.resource;
        (r.group.clone(), r.version.clone(), r.kind.clone())
    }

    /// The definition of the resource's own kind.
    fn object(&self) -> Value {
        let r = self.resource;
        let name = self.registry.name_of(&r.group, &r.version, &r.kind);
        name.map(schema_ref)
            .unwrap_or_else(|| json!({"type": "object"}))
    }

    /// `listCoreV1NamespacedPod`, `deleteCoreV1CollectionNamespacedPod`,
    /// `connectCoreV1GetNamespacedPodExec`, `readAppsV1NamespacedDeploymentScale`.
    fn id(&self, verb: &str, infix: &str, scoped: bool, suffix: &str) -> String {
        let r = self.resource;
        let ns = if scoped && r.namespaced {
            "Namespaced"
        } else {
            ""
        };
        format!(
            "{verb}{}{}{infix}{ns}{}{suffix}",
            self.word,
            capitalize(&r.version),
            r.kind
        )
    }

    fn add(&mut self, path: &str, params: Vec<Value>, method: &str, op: Op) {
        let item = self
            .paths
            .entry(path.to_string())
            .or_insert_with(|| obj([("parameters", Value::Array(params))]));
        item[method] = op.render(&self.tag);
    }
}

/// Adds every path of `resource` to `paths`.
pub(crate) fn resource_paths(
    registry: &Registry,
    resource: &ResourceType,
    paths: &mut Map<String, Value>,
) {
    let r = resource;
    let base = prefix(&r.group, &r.version);
    let collection = if r.namespaced {
        format!("{base}/namespaces/{{namespace}}/{}", r.plural)
    } else {
        format!("{base}/{}", r.plural)
    };
    let object_path = format!("{collection}/{{name}}");
    let mut b = Builder {
        registry,
        resource,
        tag: tag(&r.group, &r.version),
        word: group_word(&r.group),
        paths,
    };
    let namespace = path_param(
        "namespace",
        "object name and auth scope, such as for teams and projects",
    );
    let name = path_param("name", &format!("name of the {}", r.kind));
    let mut collection_params = vec![pretty()];
    let mut object_params = vec![name, pretty()];
    if r.namespaced {
        collection_params.insert(0, namespace.clone());
        object_params.insert(1, namespace);
    }
    let object = b.object();
    let list = registry
        .name_of(&r.group, &r.version, &r.list_kind())
        .map(schema_ref)
        .unwrap_or_else(|| json!({"type": "object"}));
    let status = schema_ref(STATUS);
    let kind = &r.kind;
    let plural = &r.plural;

    if r.supports("list") {
        let op = Op {
            action: "list",
            id: b.id("list", "", true, ""),
            description: format!("list or watch objects of kind {kind}"),
            kind: b.kind(),
            params: list_params(),
            body: None,
            responses: responses(OK, &list, LIST_MEDIA),
        };
        b.add(&collection, collection_params.clone(), "get", op);
        if r.namespaced {
            let op = Op {
                action: "list",
                id: b.id("list", "", false, "ForAllNamespaces"),
                description: format!("list or watch objects of kind {kind}"),
                kind: b.kind(),
                params: list_params(),
                body: None,
                responses: responses(OK, &list, LIST_MEDIA),
            };
            b.add(&format!("{base}/{plural}"), vec![pretty()], "get", op);
        }
    }
    if r.supports("create") {
        let op = Op {
            action: "post",
            id: b.id("create", "", true, ""),
            description: format!("create a {kind}"),
            kind: b.kind(),
            params: write_params(),
            body: Some(request_body(&object, ANY_MEDIA, true)),
            responses: responses(CREATED, &object, OBJECT_MEDIA),
        };
        b.add(&collection, collection_params.clone(), "post", op);
    }
    if r.supports("deletecollection") {
        let mut params = delete_params();
        params.extend(list_params().into_iter().filter(|p| p["name"] != "watch"));
        let op = Op {
            action: "deletecollection",
            id: b.id("delete", "Collection", true, ""),
            description: format!("delete collection of {kind}"),
            kind: b.kind(),
            params,
            body: Some(request_body(&schema_ref(DELETE_OPTIONS), ANY_MEDIA, false)),
            responses: responses(OK, &status, OBJECT_MEDIA),
        };
        b.add(&collection, collection_params.clone(), "delete", op);
    }
    object_ops(&mut b, &object_path, &object_params, &object);
    for sub in &r.subresources {
        subresource_ops(&mut b, &object_path, &object_params, sub);
    }
}

fn object_ops(b: &mut Builder, path: &str, params: &[Value], object: &Value) {
    let r = b.resource;
    let kind = &r.kind;
    if r.supports("get") {
        let op = Op {
            action: "get",
            id: b.id("read", "", true, ""),
            description: format!("read the specified {kind}"),
            kind: b.kind(),
            params: vec![],
            body: None,
            responses: responses(OK, object, OBJECT_MEDIA),
        };
        b.add(path, params.to_vec(), "get", op);
    }
    if r.supports("update") {
        let op = Op {
            action: "put",
            id: b.id("replace", "", true, ""),
            description: format!("replace the specified {kind}"),
            kind: b.kind(),
            params: write_params(),
            body: Some(request_body(object, ANY_MEDIA, true)),
            responses: responses(OK_CREATED, object, OBJECT_MEDIA),
        };
        b.add(path, params.to_vec(), "put", op);
    }
    if r.supports("patch") {
        let op = patch_op(b.id("patch", "", true, ""), kind, b.kind(), object);
        b.add(path, params.to_vec(), "patch", op);
    }
    if r.supports("delete") {
        // Pods answer a delete with the object (graceful deletion); other kinds with a Status.
        let answer = if r.group.is_empty() && kind == "Pod" {
            object.clone()
        } else {
            schema_ref(STATUS)
        };
        let op = Op {
            action: "delete",
            id: b.id("delete", "", true, ""),
            description: format!("delete a {kind}"),
            kind: b.kind(),
            params: delete_params(),
            body: Some(request_body(&schema_ref(DELETE_OPTIONS), ANY_MEDIA, false)),
            responses: responses(DELETED, &answer, OBJECT_MEDIA),
        };
        b.add(path, params.to_vec(), "delete", op);
    }
}

fn patch_op(id: String, what: &str, kind: (String, String, String), object: &Value) -> Op {
    let mut params = write_params();
    params.push(query(
        "force",
        "boolean",
        "Take over fields owned by other managers in an apply patch; unset for other patch types.",
    ));
    Op {
        action: "patch",
        id,
        description: format!("partially update the specified {what}"),
        kind,
        params,
        body: Some(request_body(&schema_ref(PATCH), PATCH_MEDIA, true)),
        responses: responses(OK_CREATED, object, OBJECT_MEDIA),
    }
}

fn subresource_ops(b: &mut Builder, object_path: &str, params: &[Value], sub: &Subresource) {
    let r = b.resource;
    let path = format!("{object_path}/{}", sub.name);
    let suffix = capitalize(&sub.name);
    let kind = (sub.group.clone(), sub.version.clone(), sub.kind.clone());
    let schema = b
        .registry
        .name_of(&sub.group, &sub.version, &sub.kind)
        .map(schema_ref);
    let what = format!("{} of the specified {}", sub.name, r.kind);
    let string = json!({"type": "string"});
    let connect = schema.is_none() && sub.supports("create");
    for verb in &sub.verbs {
        let (method, op) = match (verb.as_str(), &schema) {
            ("get", _) if sub.name == "log" => {
                let op = Op {
                    action: "get",
                    id: b.id("read", "", true, &suffix),
                    description: format!("read log of the specified {}", r.kind),
                    kind: kind.clone(),
                    params: log_params(),
                    body: None,
                    responses: responses(OK, &string, LOG_MEDIA),
                };
                ("get", op)
            }
            ("get" | "create", _) if connect => {
                let (method, word) = if *verb == "get" {
                    ("get", "Get")
                } else {
                    ("post", "Post")
                };
                let op = Op {
                    action: "connect",
                    id: b.id("connect", word, true, &suffix),
                    description: format!("connect {method} requests to {} of {}", sub.name, r.kind),
                    kind: kind.clone(),
                    params: connect_params(&sub.name),
                    body: None,
                    responses: responses(OK, &string, ANY_MEDIA),
                };
                (method, op)
            }
            ("get", Some(schema)) => {
                let op = Op {
                    action: "get",
                    id: b.id("read", "", true, &suffix),
                    description: format!("read {what}"),
                    kind: kind.clone(),
                    params: vec![],
                    body: None,
                    responses: responses(OK, schema, OBJECT_MEDIA),
                };
                ("get", op)
            }
            ("update", Some(schema)) => {
                let op = Op {
                    action: "put",
                    id: b.id("replace", "", true, &suffix),
                    description: format!("replace {what}"),
                    kind: kind.clone(),
                    params: write_params(),
                    body: Some(request_body(schema, ANY_MEDIA, true)),
                    responses: responses(OK_CREATED, schema, OBJECT_MEDIA),
                };
                ("put", op)
            }
            ("patch", Some(schema)) => {
                let op = patch_op(
                    b.id("patch", "", true, &suffix),
                    &what,
                    kind.clone(),
                    schema,
                );
                ("patch", op)
            }
            ("create", Some(schema)) => {
                let op = Op {
                    action: "post",
                    id: b.id("create", "", true, &suffix),
                    description: format!("create {} of a {}", sub.name, r.kind),
                    kind: kind.clone(),
                    params: write_params(),
                    body: Some(request_body(schema, ANY_MEDIA, true)),
                    responses: responses(CREATED, schema, OBJECT_MEDIA),
                };
                ("post", op)
            }
            _ => continue,
        };
        b.add(&path, params.to_vec(), method, op);
    }
}

/// The group version's discovery path (`/apis/apps/v1/`), answered with an APIResourceList.
pub(crate) fn discovery_path(group: &str, version: &str, paths: &mut Map<String, Value>) {
    let id = format!(
        "get{}{}APIResources",
        group_word(group),
        capitalize(version)
    );
    let op = obj([
        ("description", Value::from("get available resources")),
        ("operationId", Value::String(id)),
        (
            "responses",
            responses(OK, &schema_ref(API_RESOURCE_LIST), OBJECT_MEDIA),
        ),
        (
            "tags",
            Value::Array(vec![Value::String(tag(group, version))]),
        ),
    ]);
    paths.insert(format!("{}/", prefix(group, version)), obj([("get", op)]));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operation_words_follow_upstream_naming() {
        assert_eq!(group_word(""), "Core");
        assert_eq!(group_word("rbac.authorization.k8s.io"), "RbacAuthorization");
        assert_eq!(group_word("apps"), "Apps");
        assert_eq!(
            tag("rbac.authorization.k8s.io", "v1"),
            "rbacAuthorization_v1"
        );
        assert_eq!(tag("", "v1"), "core_v1");
        assert_eq!(prefix("", "v1"), "/api/v1");
        assert_eq!(prefix("apps", "v1"), "/apis/apps/v1");
    }
}
