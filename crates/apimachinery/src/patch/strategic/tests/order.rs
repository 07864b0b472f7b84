//! Element order of merged lists: the patch's order, `$setElementOrder`, and where elements
//! only on the server end up, checked against the results upstream's own tests expect.

use super::super::super::schema;
use super::{containers, names, pod, smp};
use serde_json::{Value, json};

/// Without `$setElementOrder` nothing places a new element relative to the server's, and
/// upstream's interleaving puts the patch's elements first.
#[test]
fn a_container_not_on_the_server_goes_before_the_server_only_ones() {
    let original = pod(json!({"containers": [{"name": "app", "image": "nginx"}]}));
    let patch = json!({"spec": {"containers": [{"name": "log", "image": "fluentd"}]}});
    let patched = smp(&schema::POD, original, patch);
    assert_eq!(names(containers(&patched)), ["log", "app"]);
}

#[test]
fn patch_elements_come_in_patch_order_and_server_only_ones_keep_their_place() {
    let original = pod(json!({"containers": [
        {"name": "a"}, {"name": "z"}, {"name": "b"}
    ]}));
    let patch =
        json!({"spec": {"containers": [{"name": "b", "image": "1"}, {"name": "a", "image": "2"}]}});
    let patched = smp(&schema::POD, original, patch);
    assert_eq!(names(containers(&patched)), ["z", "b", "a"]);
}

#[test]
fn set_element_order_orders_the_merged_list() {
    let original = pod(json!({"containers": [{"name": "a"}, {"name": "b"}, {"name": "c"}]}));
    let patch = json!({"spec": {
        "$setElementOrder/containers": [{"name": "c"}, {"name": "b"}, {"name": "a"}],
        "containers": [{"name": "b", "image": "new"}]
    }});
    let patched = smp(&schema::POD, original, patch);
    assert_eq!(names(containers(&patched)), ["c", "b", "a"]);
    assert_eq!(containers(&patched)[1]["image"], "new");
}

#[test]
fn set_element_order_alone_reorders_the_live_list() {
    let original = pod(json!({"containers": [{"name": "a"}, {"name": "b"}]}));
    let patch = json!({"spec": {"$setElementOrder/containers": [{"name": "b"}, {"name": "a"}]}});
    let patched = smp(&schema::POD, original, patch);
    assert_eq!(names(containers(&patched)), ["b", "a"]);
}

#[test]
fn set_element_order_keeps_a_server_only_element_after_its_server_predecessor() {
    // The new element "d" goes where the order puts it; "z", only on the server, stays
    // behind "b", which preceded it on the server.
    let original = pod(json!({"containers": [{"name": "a"}, {"name": "b"}, {"name": "z"}]}));
    let patch = json!({"spec": {
        "$setElementOrder/containers": [{"name": "a"}, {"name": "d"}, {"name": "b"}],
        "containers": [{"name": "d"}]
    }});
    let patched = smp(&schema::POD, original, patch);
    assert_eq!(names(containers(&patched)), ["a", "d", "b", "z"]);
}

#[test]
fn set_element_order_orders_a_list_of_primitives() {
    let original = json!({"metadata": {"name": "p", "finalizers": ["a", "b", "x"]}});
    let patch = json!({"metadata": {
        "$setElementOrder/finalizers": ["b", "c", "a"],
        "finalizers": ["c"]
    }});
    let patched = smp(&schema::POD, original, patch);
    assert_eq!(
        patched["metadata"]["finalizers"],
        json!(["b", "c", "a", "x"])
    );
}

#[test]
fn set_element_order_with_a_new_list_takes_the_patch_list_without_its_deletions() {
    let original = pod(json!({"containers": [{"name": "app"}]}));
    let patch = json!({"spec": {
        "$setElementOrder/initContainers": [{"name": "b"}, {"name": "a"}],
        "initContainers": [
            {"name": "b", "image": "2"},
            {"name": "gone", "$patch": "delete"},
            {"name": "a", "image": "1"}
        ]
    }});
    let patched = smp(&schema::POD, original, patch);
    assert_eq!(names(&patched["spec"]["initContainers"]), ["b", "a"]);
}

/// Merges `patch` (the body of a pod's `spec`) into a pod whose containers are `live`.
fn merged_containers(live: Value, patch: Value) -> Value {
    let patched = smp(
        &schema::POD,
        pod(json!({ "containers": live })),
        json!({ "spec": patch }),
    );
    containers(&patched).clone()
}

/// Merges `patch` (the body of `metadata`) into finalizers `live`.
fn merged_finalizers(live: Value, patch: Value) -> Value {
    let patched = smp(
        &schema::POD,
        json!({"metadata": {"finalizers": live}}),
        json!({ "metadata": patch }),
    );
    patched["metadata"]["finalizers"].clone()
}

/// The live objects, patches and results of upstream's strategic merge patch tests (the
/// three-way cases: the live object other writers changed, the patch kubectl computes, the
/// result), restated on pod containers.
#[test]
fn merged_lists_of_objects_end_in_the_order_upstream_expects() {
    let cases = [
        (
            "the patch's order wins over the live order",
            json!([{"name": "1"}, {"name": "2", "image": "b"}, {"name": "3"}]),
            json!({"containers": [{"name": "3", "image": "c"}, {"name": "1", "image": "a"}]}),
            json!([
                {"name": "2", "image": "b"},
                {"name": "3", "image": "c"},
                {"name": "1", "image": "a"}
            ]),
        ),
        (
            "one deleted, one added, a server-only one keeps its place",
            json!([
                {"name": "1"},
                {"name": "2", "workingDir": "b"},
                {"name": "4", "workingDir": "c"}
            ]),
            json!({
                "$setElementOrder/containers": [{"name": "2"}, {"name": "3"}],
                "containers": [{"name": "3"}, {"name": "1", "$patch": "delete"}]
            }),
            json!([
                {"name": "2", "workingDir": "b"},
                {"name": "4", "workingDir": "c"},
                {"name": "3"}
            ]),
        ),
        (
            "the manifest's elements re-added after another writer removed one",
            json!([{"name": "1", "workingDir": "a"}, {"name": "4", "workingDir": "c"}]),
            json!({
                "$setElementOrder/containers": [{"name": "2"}, {"name": "3"}],
                "containers": [{"name": "2"}, {"name": "3"}, {"name": "1", "$patch": "delete"}]
            }),
            json!([{"name": "4", "workingDir": "c"}, {"name": "2"}, {"name": "3"}]),
        ),
        (
            "deleting an element that is already gone",
            json!([{"name": "3", "workingDir": "a"}]),
            json!({
                "$setElementOrder/containers": [{"name": "2"}],
                "containers": [{"name": "2"}, {"name": "1", "$patch": "delete"}]
            }),
            json!([{"name": "2"}, {"name": "3", "workingDir": "a"}]),
        ),
        (
            "an element added next to one only the server has",
            json!([
                {"name": "1", "workingDir": "a"},
                {"name": "3", "image": "2", "workingDir": "b"}
            ]),
            json!({
                "$setElementOrder/containers": [{"name": "1"}, {"name": "2"}],
                "containers": [{"name": "1", "image": "1"}, {"name": "2", "image": "2"}]
            }),
            json!([
                {"name": "1", "image": "1", "workingDir": "a"},
                {"name": "2", "image": "2"},
                {"name": "3", "image": "2", "workingDir": "b"}
            ]),
        ),
        (
            "new elements before and after the live ones",
            json!([{"name": "1", "workingDir": "a"}, {"name": "2", "workingDir": "b"}]),
            json!({
                "$setElementOrder/containers":
                    [{"name": "4"}, {"name": "1"}, {"name": "2"}, {"name": "3"}],
                "containers": [{"name": "4", "image": "4"}, {"name": "3", "image": "3"}]
            }),
            json!([
                {"name": "4", "image": "4"},
                {"name": "1", "workingDir": "a"},
                {"name": "2", "workingDir": "b"},
                {"name": "3", "image": "3"}
            ]),
        ),
        (
            "a deletion of an element never there",
            json!([{"name": "hello2"}]),
            json!({
                "$setElementOrder/containers": [{"name": "hello"}, {"name": "doesntexist"}],
                "containers": [{"name": "hello"}, {"name": "doesntexist", "$patch": "delete"}]
            }),
            json!([{"name": "hello"}, {"name": "hello2"}]),
        ),
        (
            "an order naming an element neither side has",
            json!([{"name": "1"}, {"name": "3"}]),
            json!({
                "$setElementOrder/containers": [{"name": "3"}, {"name": "2"}, {"name": "1"}],
                "containers": [{"name": "3", "image": "3"}, {"name": "1", "image": "1"}]
            }),
            json!([{"name": "3", "image": "3"}, {"name": "1", "image": "1"}]),
        ),
    ];
    for (case, live, patch, expected) in cases {
        assert_eq!(merged_containers(live, patch), expected, "{case}");
    }
}

#[test]
fn merged_lists_of_primitives_end_in_the_order_upstream_expects() {
    let cases = [
        (
            "the patch's order wins over the live order",
            json!(["1", "2", "3"]),
            json!({"finalizers": ["3", "1"]}),
            json!(["2", "3", "1"]),
        ),
        (
            "a deletion with the manifest's order, a server-only value kept",
            json!(["1", "2", "3", "4"]),
            json!({
                "$setElementOrder/finalizers": ["1", "2"],
                "$deleteFromPrimitiveList/finalizers": ["3"]
            }),
            json!(["1", "2", "4"]),
        ),
        (
            "a deletion removes every copy",
            json!(["1", "2", "3", "3", "4"]),
            json!({
                "$setElementOrder/finalizers": ["1", "2"],
                "$deleteFromPrimitiveList/finalizers": ["3"]
            }),
            json!(["1", "2", "4"]),
        ),
        (
            "an addition and a deletion",
            json!(["1", "2", "3"]),
            json!({
                "$setElementOrder/finalizers": ["1", "2", "4"],
                "$deleteFromPrimitiveList/finalizers": ["3"],
                "finalizers": ["4"]
            }),
            json!(["1", "2", "4"]),
        ),
        (
            "an order naming a value neither side has",
            json!(["1", "3"]),
            json!({"$setElementOrder/finalizers": ["3", "2", "1"]}),
            json!(["3", "1"]),
        ),
    ];
    for (case, live, patch, expected) in cases {
        assert_eq!(merged_finalizers(live, patch), expected, "{case}");
    }
}
