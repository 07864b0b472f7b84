//! Tables for the typed walks: field sets of configurations, comparisons, merges and pruning.

use super::*;
use crate::managedfields::schema::root;
use serde_json::json;

fn deployment() -> Node<'static> {
    root("apps", "Deployment", None)
}

fn fields(v: &Value) -> Value {
    field_set(v, &deployment()).unwrap().to_fields_v1()
}

#[test]
fn a_configuration_owns_its_leaves_and_list_items_but_not_its_structs() {
    let cases = [
        (
            json!({"spec": {"replicas": 2}}),
            json!({"f:spec": {"f:replicas": {}}}),
        ),
        (
            json!({"metadata": {"labels": {"app": "a"}}}),
            json!({"f:metadata": {"f:labels": {"f:app": {}}}}),
        ),
        (
            json!({"spec": {"template": {"spec": {"containers": [
                {"name": "c", "image": "i", "env": [{"name": "A", "value": "1"}]}]}}}}),
            json!({"f:spec": {"f:template": {"f:spec": {"f:containers": {
                r#"k:{"name":"c"}"#: {".": {}, "f:name": {}, "f:image": {}, "f:env": {
                    r#"k:{"name":"A"}"#: {".": {}, "f:name": {}, "f:value": {}}}}}}}}}),
        ),
        (
            json!({"metadata": {"finalizers": ["a", "b"]}}),
            json!({"f:metadata": {"f:finalizers": {r#"v:"a""#: {}, r#"v:"b""#: {}}}}),
        ),
        (
            json!({"spec": {"selector": {"matchLabels": {"app": "a"}}}}),
            json!({"f:spec": {"f:selector": {}}}),
        ),
        (
            json!({"spec": {"template": {"spec": {"containers": [
                {"name": "c", "args": ["x", "y"]}]}}}}),
            json!({"f:spec": {"f:template": {"f:spec": {"f:containers": {
                r#"k:{"name":"c"}"#: {".": {}, "f:name": {}, "f:args": {}}}}}}}),
        ),
        (
            json!({"spec": {"strategy": {}, "paused": null}}),
            json!({"f:spec": {"f:strategy": {}, "f:paused": {}}}),
        ),
    ];
    for (config, want) in cases {
        assert_eq!(fields(&config), want, "fields of {config}");
    }
}

#[test]
fn a_configuration_whose_keyed_elements_lack_or_repeat_keys_is_refused() {
    let missing = json!({"spec": {"template": {"spec": {"containers": [{"image": "i"}]}}}});
    assert!(matches!(
        field_set(&missing, &deployment()),
        Err(super::super::Error::MissingListKey { .. })
    ));
    let twice = json!({"spec": {"template": {"spec": {"containers": [
        {"name": "c"}, {"name": "c"}]}}}});
    assert!(matches!(
        field_set(&twice, &deployment()),
        Err(super::super::Error::DuplicateListKey { .. })
    ));
}

#[test]
fn comparison_reports_added_modified_and_removed_fields() {
    let live = json!({"spec": {"replicas": 1, "paused": true,
        "template": {"spec": {"containers": [{"name": "c", "image": "a"}]}}}});
    let new = json!({"spec": {"replicas": 2, "minReadySeconds": 5,
        "template": {"spec": {"containers": [{"name": "c", "image": "b"},
                                             {"name": "d", "image": "x"}]}}}});
    let c = compare(&live, &new, &deployment());
    assert_eq!(
        c.modified.to_fields_v1(),
        json!({"f:spec": {"f:replicas": {}, "f:template": {"f:spec": {"f:containers": {
            r#"k:{"name":"c"}"#: {"f:image": {}}}}}}})
    );
    assert_eq!(
        c.added.to_fields_v1(),
        json!({"f:spec": {"f:minReadySeconds": {}, "f:template": {"f:spec": {"f:containers": {
            r#"k:{"name":"d"}"#: {".": {}, "f:name": {}, "f:image": {}}}}}}})
    );
    assert_eq!(
        c.removed.to_fields_v1(),
        json!({"f:spec": {"f:paused": {}}})
    );
    assert!(compare(&live, &live, &deployment()).is_empty());
}

#[test]
fn comparison_passes_over_managed_fields_but_not_other_metadata() {
    let live = json!({"metadata": {"managedFields": [{"manager": "a"}]}, "spec": {"paused": true}});
    let new = json!({"metadata": {"managedFields": [{"manager": "b"}], "labels": {"a": "1"}},
                     "spec": {"paused": true, "managedFields": 1}});
    let c = compare(&live, &new, &deployment());
    assert!(c.modified.is_empty() && c.removed.is_empty());
    assert_eq!(
        c.added.to_fields_v1(),
        json!({"f:metadata": {"f:labels": {".": {}, "f:a": {}}}, "f:spec": {"f:managedFields": {}}})
    );
}

#[test]
fn comparison_of_new_labels_owns_the_map_and_its_keys() {
    let c = compare(
        &json!({"metadata": {}}),
        &json!({"metadata": {"labels": {"a": "1"}}}),
        &deployment(),
    );
    assert_eq!(
        c.added.to_fields_v1(),
        json!({"f:metadata": {"f:labels": {".": {}, "f:a": {}}}})
    );
}

#[test]
fn merge_combines_maps_keyed_lists_and_sets_and_replaces_atomic_values() {
    let node = deployment();
    let cases = [
        // Maps merge field by field.
        (
            json!({"metadata": {"labels": {"a": "1", "b": "2"}}}),
            json!({"metadata": {"labels": {"b": "3", "c": "4"}}}),
            json!({"metadata": {"labels": {"a": "1", "b": "3", "c": "4"}}}),
        ),
        // Keyed lists merge element by element; live-only elements stay in place.
        (
            json!({"spec": {"template": {"spec": {"containers": [
                {"name": "a", "image": "1", "tty": true}, {"name": "side", "image": "s"}]}}}}),
            json!({"spec": {"template": {"spec": {"containers": [
                {"name": "a", "image": "2"}, {"name": "new", "image": "n"}]}}}}),
            json!({"spec": {"template": {"spec": {"containers": [
                {"name": "a", "image": "2", "tty": true}, {"name": "side", "image": "s"},
                {"name": "new", "image": "n"}]}}}}),
        ),
        // Sets are unions.
        (
            json!({"metadata": {"finalizers": ["x", "y"]}}),
            json!({"metadata": {"finalizers": ["z", "x"]}}),
            json!({"metadata": {"finalizers": ["z", "x", "y"]}}),
        ),
        // Atomic lists and atomic objects are replaced.
        (
            json!({"spec": {"selector": {"matchLabels": {"a": "1"}},
                            "template": {"spec": {"containers": [{"name": "c", "args": ["1", "2"]}]}}}}),
            json!({"spec": {"selector": {"matchLabels": {"b": "2"}},
                            "template": {"spec": {"containers": [{"name": "c", "args": ["3"]}]}}}}),
            json!({"spec": {"selector": {"matchLabels": {"b": "2"}},
                            "template": {"spec": {"containers": [{"name": "c", "args": ["3"]}]}}}}),
        ),
        // An explicit null removes a field.
        (
            json!({"spec": {"paused": true, "replicas": 1}}),
            json!({"spec": {"paused": null}}),
            json!({"spec": {"replicas": 1}}),
        ),
    ];
    for (live, config, want) in cases {
        assert_eq!(
            merge(&live, &config, &node).unwrap(),
            want,
            "{config} into {live}"
        );
    }
}

#[test]
fn merge_of_shared_elements_follows_the_configuration_order() {
    let node = deployment();
    let live = json!({"metadata": {"finalizers": ["a", "b", "c"]}});
    let config = json!({"metadata": {"finalizers": ["c", "a"]}});
    assert_eq!(
        merge(&live, &config, &node).unwrap(),
        json!({"metadata": {"finalizers": ["b", "c", "a"]}})
    );
}

#[test]
fn pruning_removes_fields_applied_before_that_nobody_owns_now() {
    let node = deployment();
    let object = json!({"spec": {"replicas": 3, "paused": true, "template": {"spec": {
        "containers": [{"name": "c", "env": [{"name": "A", "value": "1"},
                                             {"name": "B", "value": "2"}]}]}}}});
    let last = field_set(
        &json!({"spec": {"replicas": 3, "paused": true, "template": {"spec": {
            "containers": [{"name": "c", "env": [{"name": "A", "value": "1"},
                                                 {"name": "B", "value": "2"}]}]}}}}),
        &node,
    )
    .unwrap();
    let now = field_set(
        &json!({"spec": {"replicas": 3, "template": {"spec": {
            "containers": [{"name": "c", "env": [{"name": "A", "value": "1"}]}]}}}}),
        &node,
    )
    .unwrap();
    let pruned = prune(
        &object,
        &node,
        &last.with_named_fields_as_members(),
        Some(&now.with_named_fields_as_members()),
    );
    assert_eq!(
        pruned,
        json!({"spec": {"replicas": 3, "template": {"spec": {
            "containers": [{"name": "c", "env": [{"name": "A", "value": "1"}]}]}}}})
    );
}
