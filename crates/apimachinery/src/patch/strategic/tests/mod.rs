//! Tests of strategic merge patch against the built-in types: merging, directives and new
//! values here; element order, kubectl apply and errors in the submodules.

mod errors;
mod kubectl;
mod order;

use super::super::Error;
use super::super::schema::{self, Type};
use super::*;
use serde_json::{Value, json};

fn smp(root: &'static Type, original: Value, patch: Value) -> Value {
    let before = original.clone();
    let patched = merge(&original, patch, root).unwrap_or_else(|e| panic!("patch failed: {e}"));
    assert_eq!(original, before, "the original must not change");
    patched
}

fn smp_err(root: &'static Type, original: Value, patch: Value) -> Error {
    match merge(&original, patch, root) {
        Ok(v) => panic!("patch should fail, got {v}"),
        Err(e) => e,
    }
}

fn pod(spec: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": spec})
}

fn containers(patched: &Value) -> &Value {
    &patched["spec"]["containers"]
}

fn names(list: &Value) -> Vec<&str> {
    list.as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect()
}

#[test]
fn maps_merge_recursively_and_null_deletes_a_key() {
    let original = json!({"metadata": {"name": "p", "labels": {"a": "1", "b": "2"}}});
    let patch = json!({"metadata": {"labels": {"b": null, "c": "3"}, "annotations": {"x": "y"}}});
    let patched = smp(&schema::POD, original, patch);
    assert_eq!(
        patched["metadata"],
        json!({"name": "p", "labels": {"a": "1", "c": "3"}, "annotations": {"x": "y"}})
    );
}

#[test]
fn a_null_for_a_missing_key_is_ignored() {
    let original = json!({"metadata": {"name": "p"}});
    let patched = smp(&schema::POD, original.clone(), json!({"spec": null}));
    assert_eq!(patched, original);
}

#[test]
fn a_null_or_empty_patch_changes_nothing() {
    let original = pod(json!({"containers": [{"name": "a", "image": "x"}]}));
    assert_eq!(smp(&schema::POD, original.clone(), json!(null)), original);
    assert_eq!(smp(&schema::POD, original.clone(), json!({})), original);
}

#[test]
fn containers_merge_by_name_and_keep_fields_the_patch_does_not_name() {
    let original = pod(json!({"containers": [
        {"name": "app", "image": "nginx:1", "args": ["-v"]},
        {"name": "side", "image": "envoy"}
    ]}));
    let patch = json!({"spec": {"containers": [{"name": "app", "image": "nginx:2"}]}});
    let patched = smp(&schema::POD, original, patch);
    assert_eq!(
        containers(&patched),
        &json!([
            {"name": "app", "image": "nginx:2", "args": ["-v"]},
            {"name": "side", "image": "envoy"}
        ])
    );
}

#[test]
fn patch_delete_removes_the_element_with_that_merge_key() {
    let original = pod(json!({"containers": [
        {"name": "app", "image": "nginx"},
        {"name": "side", "image": "envoy"}
    ]}));
    let patch = json!({"spec": {"containers": [{"name": "side", "$patch": "delete"}]}});
    let patched = smp(&schema::POD, original, patch);
    assert_eq!(
        containers(&patched),
        &json!([{"name": "app", "image": "nginx"}])
    );
}

#[test]
fn patch_delete_removes_every_element_sharing_the_merge_key() {
    let original = pod(json!({"containers": [{"name": "dns", "ports": [
        {"containerPort": 53, "protocol": "TCP"},
        {"containerPort": 53, "protocol": "UDP"},
        {"containerPort": 9153, "protocol": "TCP"}
    ]}]}));
    let patch = json!({"spec": {"containers": [
        {"name": "dns", "ports": [{"containerPort": 53, "$patch": "delete"}]}
    ]}});
    let patched = smp(&schema::POD, original, patch);
    assert_eq!(
        containers(&patched)[0]["ports"],
        json!([{"containerPort": 9153, "protocol": "TCP"}])
    );
}

#[test]
fn a_replace_element_makes_the_patch_list_replace_the_live_list() {
    let original = pod(json!({"containers": [
        {"name": "app", "image": "nginx", "args": ["-v"]},
        {"name": "side", "image": "envoy"}
    ]}));
    let patch = json!({"spec": {"containers": [
        {"name": "app", "image": "nginx:2"},
        {"$patch": "replace"}
    ]}});
    let patched = smp(&schema::POD, original, patch);
    assert_eq!(
        containers(&patched),
        &json!([{"name": "app", "image": "nginx:2"}])
    );
}

#[test]
fn patch_replace_in_an_object_replaces_the_object() {
    let original = pod(json!({"securityContext": {"runAsUser": 1000, "fsGroup": 2000}}));
    let patch = json!({"spec": {"securityContext": {"$patch": "replace", "runAsNonRoot": true}}});
    let patched = smp(&schema::POD, original, patch);
    assert_eq!(
        patched["spec"]["securityContext"],
        json!({"runAsNonRoot": true})
    );
}

#[test]
fn patch_delete_in_an_object_empties_the_object() {
    let original = pod(json!({"securityContext": {"runAsUser": 1000}, "hostname": "h"}));
    let patch = json!({"spec": {"securityContext": {"$patch": "delete"}}});
    let patched = smp(&schema::POD, original, patch);
    assert_eq!(
        patched["spec"],
        json!({"securityContext": {}, "hostname": "h"})
    );
}

#[test]
fn lists_without_a_strategy_are_replaced_whole() {
    let original = pod(json!({
        "tolerations": [{"key": "a", "operator": "Exists"}, {"key": "b", "operator": "Exists"}],
        "containers": [{"name": "app", "args": ["-a", "-b"]}]
    }));
    let patch = json!({"spec": {
        "tolerations": [{"key": "c", "operator": "Exists"}],
        "containers": [{"name": "app", "args": ["-c"]}]
    }});
    let patched = smp(&schema::POD, original, patch);
    assert_eq!(
        patched["spec"]["tolerations"],
        json!([{"key": "c", "operator": "Exists"}])
    );
    assert_eq!(containers(&patched)[0]["args"], json!(["-c"]));
}

#[test]
fn finalizers_merge_as_a_set_without_duplicates() {
    let original = json!({"metadata": {"name": "p", "finalizers": ["a", "b"]}});
    let patch = json!({"metadata": {"finalizers": ["c", "a"]}});
    let patched = smp(&schema::POD, original, patch);
    assert_eq!(patched["metadata"]["finalizers"], json!(["c", "a", "b"]));
}

#[test]
fn delete_from_primitive_list_removes_the_listed_values() {
    let original = json!({"metadata": {"name": "p", "finalizers": ["a", "b", "c"]}});
    let patch = json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["b", "x"]}});
    let patched = smp(&schema::POD, original, patch);
    assert_eq!(patched["metadata"]["finalizers"], json!(["a", "c"]));
}

#[test]
fn delete_from_primitive_list_of_a_missing_field_adds_nothing() {
    let original = json!({"metadata": {"name": "cm"}});
    let patch = json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["fancy.io/foo"]}});
    let patched = smp(&schema::POD, original.clone(), patch);
    assert_eq!(patched, original);
}

#[test]
fn delete_from_primitive_list_removes_from_a_list_without_merge_strategy() {
    let original = pod(json!({"containers": [{"name": "app", "args": ["--debug", "--other"]}]}));
    let patch = json!({"spec": {"containers": [
        {"name": "app", "$deleteFromPrimitiveList/args": ["--debug"]}
    ]}});
    let patched = smp(&schema::POD, original, patch);
    assert_eq!(containers(&patched)[0]["args"], json!(["--other"]));
}

#[test]
fn retain_keys_clears_the_live_keys_it_does_not_list() {
    let original = json!({"spec": {"replicas": 2, "strategy": {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}
    }}});
    let patch = json!({"spec": {"strategy": {"$retainKeys": ["type"], "type": "Recreate"}}});
    let patched = smp(&schema::DEPLOYMENT, original, patch);
    assert_eq!(
        patched["spec"],
        json!({"replicas": 2, "strategy": {"type": "Recreate"}})
    );
}

#[test]
fn retain_keys_in_a_volume_switches_its_source() {
    let original = pod(json!({"volumes": [
        {"name": "data", "emptyDir": {}},
        {"name": "cfg", "configMap": {"name": "c"}}
    ]}));
    let patch = json!({"spec": {"volumes": [{
        "$retainKeys": ["hostPath", "name"],
        "name": "data",
        "hostPath": {"path": "/srv"}
    }]}});
    let patched = smp(&schema::POD, original, patch);
    assert_eq!(
        patched["spec"]["volumes"],
        json!([
            {"name": "data", "hostPath": {"path": "/srv"}},
            {"name": "cfg", "configMap": {"name": "c"}}
        ])
    );
}

#[test]
fn retain_keys_refuses_a_patch_that_sets_a_key_it_does_not_list() {
    let original = json!({"spec": {"strategy": {"type": "RollingUpdate"}}});
    let patch = json!({"spec": {"strategy": {
        "$retainKeys": ["type"], "type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1}
    }}});
    let err = smp_err(&schema::DEPLOYMENT, original, patch);
    assert!(matches!(err, Error::BadPatchFormatForRetainKeys));
    assert_eq!(err.to_string(), "invalid patch format of retainKeys");
    assert_eq!(err.status_code(), 400);
}

#[test]
fn retain_keys_that_is_not_a_list_is_a_bad_request() {
    let patch = json!({"spec": {"strategy": {"$retainKeys": "type"}}});
    let err = smp_err(&schema::DEPLOYMENT, json!({"spec": {}}), patch);
    assert!(matches!(err, Error::BadPatchFormatForRetainKeys));
}

#[test]
fn a_deployment_merges_the_containers_of_its_pod_template() {
    let original = json!({"spec": {"replicas": 3, "template": {
        "metadata": {"labels": {"app": "web"}},
        "spec": {"containers": [
            {"name": "web", "image": "nginx:1", "env": [{"name": "A", "value": "1"}]},
            {"name": "proxy", "image": "envoy"}
        ]}
    }}});
    let patch = json!({"spec": {"template": {"spec": {"containers": [
        {"name": "web", "env": [{"name": "B", "value": "2"}]}
    ]}}}});
    let patched = smp(&schema::DEPLOYMENT, original, patch);
    let spec = &patched["spec"]["template"]["spec"];
    assert_eq!(names(&spec["containers"]), ["web", "proxy"]);
    assert_eq!(
        spec["containers"][0]["env"],
        json!([{"name": "B", "value": "2"}, {"name": "A", "value": "1"}])
    );
    assert_eq!(patched["spec"]["replicas"], 3);
}

#[test]
fn a_cron_job_merges_the_containers_of_its_job_template() {
    let original = json!({"spec": {"schedule": "* * * * *", "jobTemplate": {"spec": {"template": {
        "spec": {"containers": [{"name": "a", "image": "1"}, {"name": "b", "image": "1"}]}
    }}}}});
    let patch = json!({"spec": {"jobTemplate": {"spec": {"template": {"spec": {
        "containers": [{"name": "b", "image": "2"}]
    }}}}}});
    let patched = smp(&schema::CRON_JOB, original, patch);
    assert_eq!(
        patched["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"],
        json!([{"name": "a", "image": "1"}, {"name": "b", "image": "2"}])
    );
}

#[test]
fn service_ports_merge_by_port() {
    let original = json!({"spec": {"ports": [
        {"name": "http", "port": 80, "targetPort": 8080},
        {"name": "https", "port": 443, "targetPort": 8443}
    ]}});
    let patch = json!({"spec": {"ports": [{"port": 80, "targetPort": 9090}]}});
    let patched = smp(&schema::SERVICE, original, patch);
    assert_eq!(
        patched["spec"]["ports"],
        json!([
            {"name": "http", "port": 80, "targetPort": 9090},
            {"name": "https", "port": 443, "targetPort": 8443}
        ])
    );
}

#[test]
fn node_conditions_merge_by_type_as_the_kubelet_patches_them() {
    let original = json!({"status": {
        "conditions": [
            {"type": "Ready", "status": "False"},
            {"type": "MemoryPressure", "status": "False"}
        ],
        "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}]
    }});
    let patch = json!({"status": {
        "$setElementOrder/conditions": [{"type": "Ready"}, {"type": "MemoryPressure"}],
        "conditions": [{"type": "Ready", "status": "True"}],
        "addresses": [{"type": "Hostname", "address": "n1"}]
    }});
    let patched = smp(&schema::NODE, original, patch);
    assert_eq!(
        patched["status"]["conditions"],
        json!([
            {"type": "Ready", "status": "True"},
            {"type": "MemoryPressure", "status": "False"}
        ])
    );
    assert_eq!(
        patched["status"]["addresses"],
        json!([
            {"type": "Hostname", "address": "n1"},
            {"type": "InternalIP", "address": "10.0.0.1"}
        ])
    );
}

#[test]
fn owner_references_merge_by_uid() {
    let original = json!({"metadata": {"ownerReferences": [
        {"uid": "1", "kind": "ReplicaSet", "name": "rs"}
    ]}});
    let patch = json!({"metadata": {"ownerReferences": [
        {"uid": "1", "controller": true},
        {"uid": "2", "kind": "Node", "name": "n"}
    ]}});
    let patched = smp(&schema::POD, original, patch);
    assert_eq!(
        patched["metadata"]["ownerReferences"],
        json!([
            {"uid": "1", "kind": "ReplicaSet", "name": "rs", "controller": true},
            {"uid": "2", "kind": "Node", "name": "n"}
        ])
    );
}

#[test]
fn a_replace_strategy_replaces_an_object_whole() {
    let pdb = schema::for_kind("policy", "PodDisruptionBudget").unwrap();
    let original = json!({"spec": {"minAvailable": 1, "selector": {
        "matchLabels": {"app": "a"}
    }}});
    let patch = json!({"spec": {"selector": {"matchExpressions": [
        {"key": "tier", "operator": "Exists"}
    ]}}});
    let patched = smp(pdb, original, patch);
    assert_eq!(
        patched["spec"]["selector"],
        json!({"matchExpressions": [{"key": "tier", "operator": "Exists"}]})
    );
}

#[test]
fn a_value_of_another_type_replaces_the_live_one() {
    let original = json!({"metadata": {"annotations": {"a": "b"}}});
    let patch = json!({"metadata": {"annotations": ["x"]}});
    let patched = smp(&schema::POD, original, patch);
    assert_eq!(patched["metadata"]["annotations"], json!(["x"]));
}

#[test]
fn a_new_value_carries_no_directives_or_nulls() {
    let original = pod(json!({"containers": [{"name": "app"}]}));
    let patch = json!({"spec": {
        "initContainers": [
            {"name": "gone", "$patch": "delete"},
            {"name": "init", "image": "busybox", "workingDir": null,
             "$setElementOrder/env": [{"name": "A"}], "env": [{"name": "A", "value": "1"}]}
        ],
        "securityContext": {"runAsUser": 1, "fsGroup": null, "$retainKeys": ["runAsUser"]}
    }});
    let patched = smp(&schema::POD, original, patch);
    assert_eq!(
        patched["spec"]["initContainers"],
        json!([{"name": "init", "image": "busybox", "env": [{"name": "A", "value": "1"}]}])
    );
    assert_eq!(patched["spec"]["securityContext"], json!({"runAsUser": 1}));
}
