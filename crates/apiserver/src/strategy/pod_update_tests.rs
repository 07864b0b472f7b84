use serde_json::{Value, json};

use super::*;
use crate::strategy::Strategy;
use crate::strategy::pod::PodStrategy;

fn pod(resources: Value) -> Value {
    let mut pod = json!({
        "metadata": {"name": "p", "namespace": "default"},
        "spec": {"containers": [{"name": "c", "image": "busybox", "resources": resources}],
                 "tolerations": [{"key": "k", "operator": "Exists", "effect": "NoExecute",
                                  "tolerationSeconds": 30}]},
    });
    let mut created = pod.clone();
    PodStrategy.prepare_for_create(&mut created);
    pod["status"] = created["status"].clone();
    pod["spec"] = created["spec"].clone();
    pod
}

fn burstable() -> Value {
    pod(json!({"requests": {"cpu": "100m", "memory": "64Mi"},
               "limits": {"cpu": "200m", "memory": "128Mi"}}))
}

fn messages(errs: &[FieldError]) -> Vec<String> {
    errs.iter()
        .map(|e| format!("{}: {}", e.field, e.detail))
        .collect()
}

/// The errors of a resize of `old` to what `change` makes of it, as the API server runs it.
fn resize(old: &Value, change: impl FnOnce(&mut Value)) -> (Value, Vec<String>) {
    let mut new = old.clone();
    change(&mut new);
    assert!(PodStrategy.prepare_for_subresource_update("resize", &mut new, old));
    let errs = PodStrategy.validate_subresource_update("resize", &new, old);
    (new, messages(&errs))
}

fn update(old: &Value, change: impl FnOnce(&mut Value)) -> Vec<String> {
    let mut new = old.clone();
    change(&mut new);
    messages(&PodStrategy.validate_subresource_update("", &new, old))
}

#[test]
fn an_update_may_change_images_deadlines_and_add_tolerations() {
    let old = burstable();
    let errs = update(&old, |p| {
        p["spec"]["containers"][0]["image"] = json!("busybox:1.36");
        p["spec"]["activeDeadlineSeconds"] = json!(60);
        p["spec"]["tolerations"][0]["tolerationSeconds"] = json!(10);
        p["spec"]["tolerations"]
            .as_array_mut()
            .unwrap()
            .push(json!({"key": "other", "operator": "Exists"}));
        p["metadata"]["labels"] = json!({"a": "b"});
    });
    assert!(errs.is_empty(), "{errs:?}");
}

#[test]
fn an_update_may_not_change_resources_or_containers() {
    let old = burstable();
    let errs = update(&old, |p| {
        p["spec"]["containers"][0]["resources"]["limits"]["cpu"] = json!("400m");
    });
    assert_eq!(errs.len(), 1);
    assert!(
        errs[0].starts_with(
            "spec: pod updates may not change fields other than `spec.containers[*].image`,"
        ),
        "{errs:?}"
    );
    assert!(errs[0].contains("- spec.containers[0].resources.limits.cpu: \"200m\""));
    assert!(errs[0].contains("+ spec.containers[0].resources.limits.cpu: \"400m\""));

    let errs = update(&old, |p| {
        let c = json!({"name": "d", "image": "busybox"});
        p["spec"]["containers"].as_array_mut().unwrap().push(c);
    });
    assert_eq!(
        errs,
        ["spec.containers: pod updates may not add or remove containers"]
    );
    let errs = update(&old, |p| p["spec"]["tolerations"] = json!([]));
    assert_eq!(
        errs,
        ["spec.tolerations: existing toleration can not be modified except its tolerationSeconds"]
    );
}

#[test]
fn an_active_deadline_may_only_be_set_or_lowered() {
    let mut old = burstable();
    old["spec"]["activeDeadlineSeconds"] = json!(60);
    assert_eq!(
        update(&old, |p| p["spec"]["activeDeadlineSeconds"] = json!(120)),
        ["spec.activeDeadlineSeconds: must be less than or equal to previous value"]
    );
    assert_eq!(
        update(&old, |p| {
            p["spec"]
                .as_object_mut()
                .unwrap()
                .remove("activeDeadlineSeconds");
        }),
        ["spec.activeDeadlineSeconds: must not update from a positive integer to nil value"]
    );
    assert!(update(&old, |p| p["spec"]["activeDeadlineSeconds"] = json!(30)).is_empty());
}

#[test]
fn a_gated_pod_may_gain_node_constraints_but_not_lose_them() {
    let mut old = burstable();
    old["spec"]["schedulingGates"] = json!([{"name": "example.com/gate"}]);
    old["spec"]["nodeSelector"] = json!({"zone": "a"});
    let added = update(&old, |p| {
        p["spec"]["nodeSelector"]["disk"] = json!("ssd");
        p["spec"]["affinity"] = json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
            {"nodeSelectorTerms": [{"matchExpressions": [{"key": "k", "operator": "Exists"}]}]}}});
    });
    assert!(added.is_empty(), "{added:?}");
    let changed = update(&old, |p| p["spec"]["nodeSelector"]["zone"] = json!("b"));
    assert_eq!(
        changed,
        [
            "spec.nodeSelector: only additions to spec.nodeSelector are allowed (no mutations or deletions)"
        ]
    );
    // without gates the node selector is as immutable as the rest
    let mut ungated = old.clone();
    ungated["spec"]
        .as_object_mut()
        .unwrap()
        .remove("schedulingGates");
    let errs = update(&ungated, |p| {
        p["spec"]["nodeSelector"]["disk"] = json!("ssd")
    });
    assert!(
        errs[0].contains("+ spec.nodeSelector.disk: \"ssd\""),
        "{errs:?}"
    );
}

#[test]
fn a_resize_changes_only_container_resources() {
    let old = burstable();
    let (new, errs) = resize(&old, |p| {
        p["spec"]["containers"][0]["resources"]["limits"]["cpu"] = json!("400m");
        p["spec"]["containers"][0]["resources"]["requests"]["memory"] = json!("96Mi");
        // everything else a resize carries is dropped
        p["spec"]["containers"][0]["image"] = json!("nginx");
        p["metadata"]["labels"] = json!({"a": "b"});
        p["status"]["phase"] = json!("Running");
    });
    assert!(errs.is_empty(), "{errs:?}");
    let c = &new["spec"]["containers"][0];
    assert_eq!(c["resources"]["limits"]["cpu"], "400m");
    assert_eq!(c["resources"]["requests"]["memory"], "96Mi");
    assert_eq!(c["image"], "busybox");
    assert!(new["metadata"].get("labels").is_none());
    assert_eq!(new["status"]["phase"], "Pending");
}

#[test]
fn a_resize_keeps_the_qos_class_and_every_request_and_limit() {
    let old = burstable();
    let (_, errs) = resize(&old, |p| {
        p["spec"]["containers"][0]["resources"] = json!({
            "requests": {"cpu": "200m", "memory": "128Mi"},
            "limits": {"cpu": "200m", "memory": "128Mi"}});
    });
    assert_eq!(
        errs,
        ["spec: Pod QOS Class may not change as a result of resizing"]
    );
    let (_, errs) = resize(&old, |p| {
        p["spec"]["containers"][0]["resources"]["limits"]
            .as_object_mut()
            .unwrap()
            .remove("cpu");
    });
    assert_eq!(
        errs,
        ["spec.containers[0].resources.limits: resource limits cannot be removed"]
    );
    let (_, errs) = resize(&old, |p| {
        p["spec"]["containers"][0]["resources"]["requests"]["cpu"] = json!("300m");
    });
    assert_eq!(
        errs,
        ["spec.containers[0].resources.requests: must be less than or equal to cpu limit of 200m"]
    );
}

#[test]
fn a_memory_limit_is_lowered_or_added_only_with_a_restart() {
    let old = burstable();
    let lower = |p: &mut Value| {
        p["spec"]["containers"][0]["resources"]["limits"]["memory"] = json!("100Mi");
    };
    let (_, errs) = resize(&old, lower);
    assert_eq!(
        errs,
        [
            "spec.containers[0].resources.limits[memory]: memory limits cannot be decreased unless resizePolicy is RestartContainer"
        ]
    );
    let mut restarting = old.clone();
    restarting["spec"]["containers"][0]["resizePolicy"] =
        json!([{"resourceName": "memory", "restartPolicy": "RestartContainer"}]);
    assert!(resize(&restarting, lower).1.is_empty());

    let cpu_only = pod(json!({"requests": {"cpu": "100m"}}));
    let (_, errs) = resize(&cpu_only, |p| {
        p["spec"]["containers"][0]["resources"]["limits"] = json!({"memory": "1Gi"});
    });
    assert_eq!(
        errs,
        [
            "spec.containers[0].resources.limits[memory]: memory limits cannot be added unless resizePolicy is RestartContainer"
        ]
    );
}

#[test]
fn a_resize_changes_only_cpu_and_memory_of_containers_and_sidecars() {
    let mut old = burstable();
    old["spec"]["initContainers"] = json!([
        {"name": "init", "image": "busybox", "resources": {"requests": {"cpu": "100m"}}},
        {"name": "side", "image": "busybox", "restartPolicy": "Always",
         "resources": {"requests": {"cpu": "100m"}}},
    ]);
    let (new, errs) = resize(&old, |p| {
        p["spec"]["initContainers"][0]["resources"]["requests"]["cpu"] = json!("300m");
        p["spec"]["initContainers"][1]["resources"]["requests"]["cpu"] = json!("300m");
    });
    assert!(errs.is_empty(), "{errs:?}");
    // an ordinary init container's resources are kept, a sidecar's change
    assert_eq!(
        new["spec"]["initContainers"][0]["resources"]["requests"]["cpu"],
        "100m"
    );
    assert_eq!(
        new["spec"]["initContainers"][1]["resources"]["requests"]["cpu"],
        "300m"
    );

    let (_, errs) = resize(&old, |p| {
        p["spec"]["containers"][0]["resources"]["requests"]["ephemeral-storage"] = json!("1Gi");
    });
    assert_eq!(errs, ["spec: only cpu and memory resources are mutable"]);
}

#[test]
fn static_pods_and_running_pods_on_nodes_without_resize_are_refused() {
    let mut mirror = burstable();
    mirror["metadata"]["annotations"] = json!({"kubernetes.io/config.mirror": "x"});
    let (_, errs) = resize(&mirror, |p| {
        p["spec"]["containers"][0]["resources"]["limits"]["cpu"] = json!("400m");
    });
    assert_eq!(errs, ["[]: static pods cannot be resized"]);

    let mut running = burstable();
    running["status"]["containerStatuses"] =
        json!([{"name": "c", "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}}}]);
    let grow = |p: &mut Value| {
        p["spec"]["containers"][0]["resources"]["limits"]["cpu"] = json!("400m");
    };
    assert_eq!(
        resize(&running, grow).1,
        ["spec: Pod running on node without support for resize"]
    );
    running["status"]["containerStatuses"][0]["resources"] =
        running["spec"]["containers"][0]["resources"].clone();
    assert!(resize(&running, grow).1.is_empty());
}

#[test]
fn quantities_compare_by_value() {
    assert!(semantic_eq(&json!("1"), &json!("1000m")));
    assert!(!semantic_eq(&json!("1"), &json!("1001m")));
    assert!(semantic_eq(&json!({"a": [], "b": null}), &json!({})));
    assert!(!semantic_eq(&json!({"a": {}}), &json!({})));
}
