//! The served documents as clients see them: parsed back from their bytes and checked for what
//! kubectl looks up in them.

use serde_json::Value;
use skiff_apimachinery::catalog::builtins;
use skiff_openapi::{Documents, V2_PROTOBUF, V2_PROTOBUF_ALT};

fn docs() -> &'static Documents {
    Documents::global()
}

fn v3(path: &str) -> Value {
    let bytes = docs().v3_group_version(path).expect("group version served");
    serde_json::from_slice(&bytes).expect("valid JSON")
}

fn v2() -> Value {
    serde_json::from_slice(&docs().v2_json()).expect("valid JSON")
}

/// `/api/v1/namespaces/{namespace}/pods` or `/apis/apps/v1/nodes`-style collection path.
fn collection_path(r: &skiff_apimachinery::catalog::ResourceType) -> String {
    let base = if r.group.is_empty() {
        format!("/api/{}", r.version)
    } else {
        format!("/apis/{}/{}", r.group, r.version)
    };
    if r.namespaced {
        format!("{base}/namespaces/{{namespace}}/{}", r.plural)
    } else {
        format!("{base}/{}", r.plural)
    }
}

fn index_key(r: &skiff_apimachinery::catalog::ResourceType) -> String {
    skiff_openapi::v3::index_key(&r.group, &r.version)
}

fn has_param(op: &Value, name: &str) -> bool {
    op["parameters"]
        .as_array()
        .is_some_and(|params| params.iter().any(|p| p["name"] == name))
}

#[test]
fn the_index_lists_every_group_version_with_a_hashed_url() {
    let index: Value = serde_json::from_slice(&docs().v3_index_json()).unwrap();
    let paths = index["paths"].as_object().unwrap();
    for key in ["api/v1", "apis/apps/v1", "apis/batch/v1"] {
        let url = paths[key]["serverRelativeURL"].as_str().unwrap();
        let hash = docs().v3_hash(key).unwrap();
        assert_eq!(url, format!("/openapi/v3/{key}?hash={hash}"));
    }
    for r in builtins() {
        assert!(
            paths.contains_key(&index_key(r)),
            "{} missing",
            index_key(r)
        );
    }
}

#[test]
fn the_core_document_describes_pod_with_its_kind_and_field_docs() {
    let doc = v3("api/v1");
    assert_eq!(doc["openapi"], "3.0.0");
    let pod = &doc["components"]["schemas"]["io.k8s.api.core.v1.Pod"];
    assert_eq!(
        pod["x-kubernetes-group-version-kind"],
        serde_json::json!([{"group": "", "kind": "Pod", "version": "v1"}])
    );
    let spec = &doc["components"]["schemas"]["io.k8s.api.core.v1.PodSpec"];
    let containers = &spec["properties"]["containers"];
    assert!(
        containers["description"]
            .as_str()
            .unwrap()
            .contains("containers")
    );
    assert_eq!(
        containers["items"]["$ref"],
        "#/components/schemas/io.k8s.api.core.v1.Container"
    );
    assert!(
        spec["required"]
            .as_array()
            .unwrap()
            .contains(&"containers".into())
    );
}

#[test]
fn every_resource_has_create_and_list_operations_that_take_field_validation() {
    for r in builtins() {
        let doc = v3(&index_key(r));
        let item = &doc["paths"][collection_path(r)];
        let gvk = serde_json::json!({"group": r.group, "version": r.version, "kind": r.kind});
        if r.supports("create") {
            let post = &item["post"];
            assert!(has_param(post, "fieldValidation"), "{}: create", r.plural);
            assert_eq!(post["x-kubernetes-group-version-kind"], gvk);
        }
        if r.supports("list") {
            assert_eq!(item["get"]["x-kubernetes-action"], "list", "{}", r.plural);
            assert_eq!(item["get"]["x-kubernetes-group-version-kind"], gvk);
        }
        let object = &doc["paths"][format!("{}/{{name}}", collection_path(r))];
        for method in ["put", "patch"] {
            if r.supports(if method == "put" { "update" } else { method }) {
                assert!(
                    has_param(&object[method], "fieldValidation"),
                    "{}: {method}",
                    r.plural
                );
            }
        }
    }
}

#[test]
fn every_patch_operation_takes_field_validation_and_strategic_merge_patches() {
    for key in docs().v3_paths() {
        let doc = v3(key);
        for (path, item) in doc["paths"].as_object().unwrap() {
            if let Some(patch) = item.get("patch") {
                assert!(has_param(patch, "fieldValidation"), "{path}");
                let content = &patch["requestBody"]["content"];
                assert!(
                    content
                        .get("application/strategic-merge-patch+json")
                        .is_some()
                );
                assert!(patch["x-kubernetes-group-version-kind"].is_object());
            }
        }
    }
}

/// Every `$ref` under `value`, with its JSON location.
fn refs(value: &Value, at: &str, out: &mut Vec<(String, String)>) {
    match value {
        Value::Object(map) => {
            for (k, v) in map {
                match (k.as_str(), v) {
                    ("$ref", Value::String(target)) => out.push((at.to_string(), target.clone())),
                    _ => refs(v, &format!("{at}/{k}"), out),
                }
            }
        }
        Value::Array(list) => {
            for (i, v) in list.iter().enumerate() {
                refs(v, &format!("{at}/{i}"), out);
            }
        }
        _ => {}
    }
}

#[test]
fn every_reference_resolves_within_its_own_document() {
    for key in docs().v3_paths() {
        let doc = v3(key);
        let mut found = Vec::new();
        refs(&doc, "", &mut found);
        assert!(!found.is_empty());
        for (at, target) in found {
            let name = target
                .strip_prefix("#/components/schemas/")
                .unwrap_or_else(|| panic!("{key}{at}: foreign ref {target}"));
            assert!(
                doc["components"]["schemas"].get(name).is_some(),
                "{key}{at}: {name} not in the document"
            );
        }
    }
    let doc = v2();
    let mut found = Vec::new();
    refs(&doc, "", &mut found);
    for (at, target) in found {
        let name = target.strip_prefix("#/definitions/").unwrap();
        assert!(doc["definitions"].get(name).is_some(), "v2{at}: {name}");
    }
}

#[test]
fn v3_references_with_descriptions_use_all_of() {
    for key in docs().v3_paths() {
        let doc = v3(key);
        let mut found = Vec::new();
        refs(&doc["components"], "", &mut found);
        for (at, _) in found {
            let parent = doc["components"].pointer(&at).unwrap();
            assert_eq!(
                parent.as_object().unwrap().len(),
                1,
                "{key}{at} has $ref siblings"
            );
        }
    }
}

#[test]
fn the_swagger_document_parses_and_has_definitions_and_paths() {
    let doc = v2();
    assert_eq!(doc["swagger"], "2.0");
    let deployment = &doc["definitions"]["io.k8s.api.apps.v1.Deployment"];
    assert_eq!(
        deployment["x-kubernetes-group-version-kind"][0]["kind"],
        "Deployment"
    );
    assert_eq!(
        doc["definitions"]["io.k8s.apimachinery.pkg.util.intstr.IntOrString"]["format"],
        "int-or-string"
    );
    let post = &doc["paths"]["/api/v1/namespaces/{namespace}/pods"]["post"];
    assert!(
        post["parameters"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["name"] == "fieldValidation")
    );
    assert!(docs().v2_protobuf().starts_with(b"\x0a\x032.0"));
}

#[test]
fn v2_is_negotiated_by_accept_and_protobuf_is_labelled_without_the_at_sign() {
    let d = docs();
    let reply = d.serve_v2(Some(V2_PROTOBUF), None);
    assert_eq!(reply.status, 200);
    assert_eq!(reply.header("Content-Type"), Some(V2_PROTOBUF_ALT));
    assert_eq!(reply.body(), d.v2_protobuf());
    let reply = d.serve_v2(Some("application/json, */*"), None);
    assert_eq!(reply.header("Content-Type"), Some("application/json"));
    assert_eq!(reply.body(), d.v2_json());
    let etag = reply.header("ETag").unwrap().to_string();
    assert_eq!(etag, format!("\"{}\"", d.v2_hash()));
    assert_eq!(d.serve_v2(None, Some(&etag)).status, 304);
    assert_eq!(d.serve_v2(Some("text/html"), None).status, 406);
}

#[test]
fn v3_documents_are_immutable_at_their_hash_and_redirected_from_stale_ones() {
    let d = docs();
    let hash = d.v3_hash("apis/apps/v1").unwrap().to_string();
    let fresh = d.serve_v3("apis/apps/v1", Some(&hash), Some("application/json"), None);
    assert_eq!(fresh.status, 200);
    assert_eq!(fresh.header("Cache-Control"), Some("public, immutable"));
    assert_eq!(fresh.body(), d.v3_group_version("apis/apps/v1").unwrap());
    let stale = d.serve_v3("apis/apps/v1", Some("0000"), None, None);
    assert_eq!(stale.status, 301);
    assert_eq!(
        stale.header("Location"),
        Some(format!("/openapi/v3/apis/apps/v1?hash={hash}").as_str())
    );
    let plain = d.serve_v3("apis/apps/v1", None, Some("application/json, */*"), None);
    assert_eq!(plain.status, 200);
    assert_eq!(plain.header("Cache-Control"), None);
    assert_eq!(d.serve_v3("apis/nope/v1", None, None, None).status, 404);
    assert_eq!(d.serve_v3_index(None).status, 200);
}
