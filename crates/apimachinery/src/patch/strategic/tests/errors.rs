//! Malformed patches: upstream's messages and the HTTP status each maps to.

use super::super::super::Error;
use super::super::super::schema;
use super::super::apply;
use super::{pod, smp_err};
use serde_json::json;

#[test]
fn an_element_without_the_merge_key_fails_with_upstreams_message() {
    let original = pod(json!({"containers": [{"name": "app"}]}));
    let patch = json!({"spec": {"containers": [{"image": "nginx"}]}});
    let err = smp_err(&schema::POD, original, patch);
    assert_eq!(
        err.to_string(),
        "map: map[image:nginx] does not contain declared merge key: name"
    );
    assert_eq!(err.status_code(), 422);
}

#[test]
fn a_delete_element_without_the_merge_key_fails() {
    let original = pod(json!({"containers": [{"name": "app"}]}));
    let patch = json!({"spec": {"containers": [{"$patch": "delete"}]}});
    let err = smp_err(&schema::POD, original, patch);
    assert!(
        matches!(err, Error::NoMergeKey { ref key, .. } if key == "name"),
        "{err}"
    );
}

#[test]
fn a_merge_directive_in_a_list_is_refused() {
    let original = pod(json!({"containers": [{"name": "app"}]}));
    let patch = json!({"spec": {"containers": [{"name": "app", "$patch": "merge"}]}});
    let err = smp_err(&schema::POD, original, patch);
    assert_eq!(
        err.to_string(),
        "merging lists cannot yet be specified in the patch"
    );
}

#[test]
fn an_unknown_directive_is_refused_with_the_map_it_sits_in() {
    let original = pod(json!({"securityContext": {}}));
    let patch = json!({"spec": {"securityContext": {"$patch": "merge"}}});
    let err = smp_err(&schema::POD, original, patch);
    assert_eq!(
        err.to_string(),
        "unknown patch type: merge in map: map[$patch:merge]"
    );
}

#[test]
fn a_list_of_lists_is_unprocessable() {
    let original = json!({"metadata": {"finalizers": ["a"]}});
    let patch = json!({"metadata": {"finalizers": [["b"]]}});
    let err = smp_err(&schema::POD, original, patch);
    assert!(matches!(err, Error::ElementTypesDiffer { .. }), "{err}");
    let err = smp_err(
        &schema::POD,
        json!({"metadata": {"finalizers": []}}),
        json!({"metadata": {"finalizers": [["b"]]}}),
    );
    assert!(matches!(err, Error::NoListOfLists));
    assert_eq!(err.status_code(), 422);
}

#[test]
fn elements_of_different_types_are_refused() {
    let original = json!({"metadata": {"finalizers": ["a"]}});
    let patch = json!({"metadata": {"finalizers": [1]}});
    let err = smp_err(&schema::POD, original, patch);
    assert_eq!(
        err.to_string(),
        "list element types are not identical: [[a] [1]]"
    );
}

#[test]
fn malformed_parallel_list_keys_are_bad_requests() {
    let original = json!({"metadata": {"finalizers": ["a"]}});
    let err = smp_err(
        &schema::POD,
        original.clone(),
        json!({"metadata": {"$deleteFromPrimitiveListfinalizers": ["a"]}}),
    );
    assert!(matches!(err, Error::BadPatchFormatForPrimitiveList));
    assert_eq!(err.status_code(), 400);
    let err = smp_err(
        &schema::POD,
        original.clone(),
        json!({"metadata": {"$setElementOrderX/finalizers": ["a"]}}),
    );
    assert!(matches!(err, Error::BadPatchFormatForSetElementOrderList));
    let err = smp_err(
        &schema::POD,
        original,
        json!({"metadata": {"$deleteFromPrimitiveList/finalizers": "a"}}),
    );
    assert!(matches!(err, Error::BadPatchFormatForPrimitiveList));
}

#[test]
fn a_set_element_order_that_is_not_a_list_is_refused() {
    let original = pod(json!({"containers": [{"name": "a"}]}));
    let patch = json!({"spec": {"$setElementOrder/containers": {"name": "a"}}});
    let err = smp_err(&schema::POD, original, patch);
    assert_eq!(
        err.to_string(),
        "expected a []interface {}, but received a map[string]interface {}"
    );
}

#[test]
fn a_patch_list_ordered_against_its_set_element_order_is_refused() {
    let original = pod(json!({"containers": [{"name": "a"}, {"name": "b"}]}));
    let patch = json!({"spec": {
        "$setElementOrder/containers": [{"name": "a"}, {"name": "b"}],
        "containers": [{"name": "b"}, {"name": "a"}]
    }});
    let err = smp_err(&schema::POD, original, patch);
    assert!(
        matches!(err, Error::SetElementOrderMismatch { .. }),
        "{err}"
    );
}

#[test]
fn a_patch_that_is_not_an_object_fails_like_gos_decoder() {
    let err = smp_err(&schema::POD, json!({}), json!([1]));
    assert_eq!(
        err.to_string(),
        "json: cannot unmarshal array into Go value of type map[string]interface {}"
    );
    assert_eq!(err.status_code(), 400);
    let err = apply(&json!({}), b"{", &schema::POD).unwrap_err();
    assert!(matches!(err, Error::DecodeStrategicPatch(_)));
    assert_eq!(err.status_code(), 400);
}
