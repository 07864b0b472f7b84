//! The patches kubectl's client-side apply sends (a three-way diff of last-applied, the new
//! manifest and the live object), built by hand as kubectl builds them, applied to live objects
//! other writers have changed too.

use super::super::super::schema;
use super::{containers, names, pod, smp};
use serde_json::json;

/// kubectl client-side apply: the manifest last applied (the annotation) had ports 80 and 443
/// and env vars A and B; the new manifest drops port 443 and env var B. Since then the
/// server defaulted `protocol`, another writer added env var C and a sidecar container, and
/// the controller wrote status. The patch is the one kubectl's three-way diff sends:
/// additions and changes against the live object, deletions against last-applied, and
/// `$setElementOrder` for every merged list it touched.
#[test]
fn kubectl_apply_removes_exactly_the_port_and_env_var_dropped_from_the_manifest() {
    let live = json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": "web",
            "namespace": "default",
            "generation": 3,
            "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{\"old\":true}"}
        },
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [
                    {
                        "name": "app",
                        "image": "nginx:1.25",
                        "ports": [
                            {"containerPort": 80, "protocol": "TCP"},
                            {"containerPort": 443, "protocol": "TCP"}
                        ],
                        "env": [
                            {"name": "A", "value": "1"},
                            {"name": "B", "value": "2"},
                            {"name": "C", "value": "from-another-writer"}
                        ],
                        "terminationMessagePath": "/dev/termination-log"
                    },
                    {"name": "sidecar", "image": "envoy"}
                ]}
            }
        },
        "status": {
            "replicas": 2,
            "conditions": [{"type": "Available", "status": "True"}]
        }
    });
    let patch = json!({
        "metadata": {
            "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{\"new\":true}"}
        },
        "spec": {"template": {"spec": {
            "$setElementOrder/containers": [{"name": "app"}],
            "containers": [{
                "$setElementOrder/env": [{"name": "A"}],
                "$setElementOrder/ports": [{"containerPort": 80}],
                "env": [{"$patch": "delete", "name": "B"}],
                "name": "app",
                "ports": [{"$patch": "delete", "containerPort": 443}]
            }]
        }}}
    });
    let patched = smp(&schema::DEPLOYMENT, live.clone(), patch);

    let mut expected = live;
    let app = &mut expected["spec"]["template"]["spec"]["containers"][0];
    app["ports"] = json!([{"containerPort": 80, "protocol": "TCP"}]);
    app["env"] = json!([
        {"name": "A", "value": "1"},
        {"name": "C", "value": "from-another-writer"}
    ]);
    expected["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"] =
        json!("{\"new\":true}");
    assert_eq!(patched, expected);
}

/// kubectl apply after adding env var D between A and B in the manifest: the new element is
/// placed where the manifest has it, the other writer's C stays after B.
#[test]
fn kubectl_apply_inserts_a_new_env_var_where_the_manifest_puts_it() {
    let live = pod(json!({"containers": [{"name": "app", "env": [
        {"name": "A", "value": "1"},
        {"name": "B", "value": "2"},
        {"name": "C", "value": "3"}
    ]}]}));
    let patch = json!({"spec": {
        "$setElementOrder/containers": [{"name": "app"}],
        "containers": [{
            "$setElementOrder/env": [{"name": "A"}, {"name": "D"}, {"name": "B"}],
            "env": [{"name": "D", "value": "4"}],
            "name": "app"
        }]
    }});
    let patched = smp(&schema::POD, live, patch);
    let env: Vec<&str> = names(&containers(&patched)[0]["env"]);
    assert_eq!(env, ["A", "D", "B", "C"]);
}

/// kubectl apply after removing finalizer "b" from the manifest while a controller added "x".
#[test]
fn kubectl_apply_removes_a_dropped_finalizer_and_keeps_a_controllers_one() {
    let live = json!({"metadata": {"name": "p", "finalizers": ["a", "b", "x"]}});
    let patch = json!({"metadata": {
        "$deleteFromPrimitiveList/finalizers": ["b"],
        "$setElementOrder/finalizers": ["a"]
    }});
    let patched = smp(&schema::POD, live, patch);
    assert_eq!(patched["metadata"]["finalizers"], json!(["a", "x"]));
}
