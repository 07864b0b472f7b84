use serde_json::{Value, json};

use super::*;
use crate::strategy::Strategy;
use crate::strategy::pod::PodStrategy;

/// A stored pod with containers `app` and init container `setup`.
fn stored() -> Value {
    let mut pod = json!({
        "metadata": {"name": "p", "namespace": "default", "labels": {"app": "web"}},
        "spec": {"initContainers": [{"name": "setup", "image": "busybox"}],
                 "containers": [{"name": "app", "image": "busybox"}]},
    });
    PodStrategy.prepare_for_create(&mut pod);
    pod
}

fn debugger(name: &str) -> Value {
    json!({"name": name, "image": "busybox", "targetContainerName": "app",
           "stdin": true, "tty": true})
}

fn messages(errs: &[FieldError]) -> Vec<String> {
    errs.iter().map(ToString::to_string).collect()
}

/// A write to `ephemeralcontainers` of what `change` makes of `old`, as the API server runs
/// it: the new object as it would be stored, and the errors.
fn write(old: &Value, change: impl FnOnce(&mut Value)) -> (Value, Vec<String>) {
    let mut new = old.clone();
    change(&mut new);
    assert!(PodStrategy.prepare_for_subresource_update("ephemeralcontainers", &mut new, old));
    let errs = PodStrategy.validate_subresource_update("ephemeralcontainers", &new, old);
    (new, messages(&errs))
}

fn with_debugger(old: &Value, name: &str) -> Value {
    write(old, |p| {
        p["spec"]["ephemeralContainers"] = json!([debugger(name)])
    })
    .0
}

#[test]
fn an_ephemeral_container_is_added_defaulted_and_nothing_else_of_the_write_is_kept() {
    let old = stored();
    let (new, errs) = write(&old, |p| {
        p["spec"]["ephemeralContainers"] = json!([debugger("debugger")]);
        p["spec"]["containers"][0]["image"] = json!("nginx");
        p["metadata"]["labels"] = json!({"app": "other"});
        p["status"]["phase"] = json!("Running");
    });
    assert!(errs.is_empty(), "{errs:?}");
    let added = &new["spec"]["ephemeralContainers"][0];
    assert_eq!(added["targetContainerName"], "app");
    assert_eq!(added["imagePullPolicy"], "Always");
    assert_eq!(added["terminationMessagePolicy"], "File");
    assert_eq!(new["spec"]["containers"], old["spec"]["containers"]);
    assert_eq!(new["metadata"]["labels"], json!({"app": "web"}));
    assert_eq!(new["status"], old["status"]);
}

#[test]
fn ephemeral_containers_may_be_added_but_not_removed_or_changed() {
    let old = with_debugger(&stored(), "one");
    let (new, errs) = write(&old, |p| {
        p["spec"]["ephemeralContainers"]
            .as_array_mut()
            .unwrap()
            .insert(0, debugger("two"));
    });
    assert!(errs.is_empty(), "{errs:?}");
    let names: Vec<&Value> = (0..2)
        .map(|i| &new["spec"]["ephemeralContainers"][i]["name"])
        .collect();
    assert_eq!(names, [&json!("two"), &json!("one")]);

    let (_, removed) = write(&old, |p| p["spec"]["ephemeralContainers"] = json!([]));
    assert_eq!(
        removed,
        [
            "spec.ephemeralContainers: Forbidden: existing ephemeral containers \"one\" may not be removed\n"
        ]
    );
    let (_, changed) = write(&old, |p| {
        p["spec"]["ephemeralContainers"][0]["image"] = json!("busybox:1.36");
    });
    assert_eq!(
        changed,
        [
            "spec.ephemeralContainers: Forbidden: existing ephemeral containers \"one\" may not be changed\n\
          - one.image: \"busybox\"\n+ one.image: \"busybox:1.36\""
        ]
    );
}

#[test]
fn a_target_must_be_a_regular_or_init_container_of_the_pod() {
    let old = stored();
    for (target, expected) in [
        ("app", None),
        ("setup", None),
        (
            "nope",
            Some("spec.ephemeralContainers[0].targetContainerName: Not found: \"nope\""),
        ),
    ] {
        let (_, errs) = write(&old, |p| {
            let mut c = debugger("debugger");
            c["targetContainerName"] = json!(target);
            p["spec"]["ephemeralContainers"] = json!([c]);
        });
        assert_eq!(errs, expected.into_iter().collect::<Vec<_>>(), "{target}");
    }
    // an ephemeral container is no target
    let first = with_debugger(&old, "first");
    let (_, errs) = write(&first, |p| {
        let mut c = debugger("second");
        c["targetContainerName"] = json!("first");
        p["spec"]["ephemeralContainers"]
            .as_array_mut()
            .unwrap()
            .push(c);
    });
    assert_eq!(
        errs,
        ["spec.ephemeralContainers[1].targetContainerName: Not found: \"first\""]
    );
}

#[test]
fn ports_probes_resources_lifecycle_and_sub_paths_are_forbidden() {
    let (_, errs) = write(&stored(), |p| {
        let mut c = debugger("debugger");
        c["ports"] = json!([{"containerPort": 80}]);
        c["resources"] = json!({"limits": {"cpu": "1"}});
        c["readinessProbe"] = json!({"exec": {"command": ["true"]}});
        c["lifecycle"] = json!({"preStop": {"exec": {"command": ["true"]}}});
        c["volumeMounts"] = json!([{"name": "v", "mountPath": "/v", "subPath": "x"}]);
        p["spec"]["ephemeralContainers"] = json!([c]);
    });
    let forbidden =
        |f: &str| format!("spec.ephemeralContainers[0].{f}: Forbidden: {NOT_FOR_EPHEMERAL}");
    assert_eq!(
        errs,
        [
            forbidden("ports"),
            forbidden("resources"),
            forbidden("readinessProbe"),
            forbidden("lifecycle"),
            forbidden("volumeMounts[0].subPath"),
        ]
    );
}

#[test]
fn names_are_unique_across_all_containers() {
    let (_, errs) = write(&stored(), |p| {
        p["spec"]["ephemeralContainers"] = json!([debugger("app"), debugger("setup")]);
    });
    assert_eq!(
        errs,
        [
            "spec.ephemeralContainers[0].name: Duplicate value: \"app\"",
            "spec.ephemeralContainers[1].name: Duplicate value: \"setup\""
        ]
    );
}

#[test]
fn a_pod_is_created_without_them_and_its_updates_cannot_change_them() {
    let mut pod = stored();
    pod["spec"]["ephemeralContainers"] = json!([debugger("debugger")]);
    assert_eq!(
        messages(&PodStrategy.validate(&pod)),
        ["spec.ephemeralContainers: Forbidden: cannot be set on create"]
    );

    let old = with_debugger(&stored(), "debugger");
    let mut update = old.clone();
    update["spec"]["ephemeralContainers"] = json!([]);
    let errs = messages(&PodStrategy.validate_subresource_update("", &update, &old));
    assert_eq!(errs.len(), 1, "{errs:?}");
    assert!(
        errs[0].starts_with("spec: Forbidden: pod updates may not change fields other than"),
        "{errs:?}"
    );
}

#[test]
fn a_mirror_pod_gets_no_ephemeral_containers() {
    let mut old = stored();
    old["metadata"]["annotations"] = json!({MIRROR_ANNOTATION: "hash"});
    let (_, errs) = write(&old, |p| {
        p["spec"]["ephemeralContainers"] = json!([debugger("debugger")]);
    });
    assert_eq!(
        errs,
        ["[]: Forbidden: static pods do not support ephemeral containers"]
    );
}
