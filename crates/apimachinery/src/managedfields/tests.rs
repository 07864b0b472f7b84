//! The updater end to end on JSON objects: Update entries, ownership moves, apply merges,
//! removal of omitted fields, conflicts and forcing, no-op applies, resets.

use super::*;
use serde_json::json;

const T1: &str = "2026-01-01T00:00:00Z";
const T2: &str = "2026-01-02T00:00:00Z";

fn writer<'a>(manager: &'a str, now: &'a str) -> Writer<'a> {
    Writer {
        manager,
        api_version: "apps/v1",
        subresource: "",
        scope: Scope::NotStatus,
        now,
        group: "apps",
        kind: "Deployment",
        custom: None,
    }
}

fn deploy(replicas: i64, env: &[(&str, &str)]) -> Value {
    let env: Vec<Value> = env
        .iter()
        .map(|(n, v)| json!({"name": n, "value": v}))
        .collect();
    json!({"apiVersion": "apps/v1", "kind": "Deployment",
           "metadata": {"name": "web", "namespace": "default"},
           "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}},
                    "template": {"metadata": {"labels": {"app": "web"}},
                                 "spec": {"containers": [{"name": "web", "image": "nginx",
                                                          "env": env}]}}}})
}

fn entries(obj: &Value) -> Vec<(String, String, Value)> {
    obj["metadata"]["managedFields"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|e| {
            (
                e["manager"].as_str().unwrap().to_string(),
                e["operation"].as_str().unwrap().to_string(),
                e["fieldsV1"].clone(),
            )
        })
        .collect()
}

fn owns(obj: &Value, manager: &str, pointer: &str) -> bool {
    obj["metadata"]["managedFields"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["manager"] == manager)
        .any(|e| e["fieldsV1"].pointer(pointer).is_some())
}

#[test]
fn a_create_records_an_update_entry_owning_everything_but_server_fields_and_status() {
    let mut obj = deploy(1, &[]);
    obj["status"] = json!({"replicas": 0});
    obj["metadata"]["uid"] = json!("u");
    update(&json!({}), &mut obj, &writer("kubectl-create", T1));
    let e = &obj["metadata"]["managedFields"][0];
    assert_eq!(e["manager"], "kubectl-create");
    assert_eq!(e["operation"], "Update");
    assert_eq!(e["apiVersion"], "apps/v1");
    assert_eq!(e["time"], T1);
    assert_eq!(e["fieldsType"], "FieldsV1");
    assert!(e.get("subresource").is_none());
    let f = &e["fieldsV1"];
    assert!(f.pointer("/f:spec/f:replicas").is_some());
    assert!(f.pointer("/f:spec/f:selector").is_some());
    assert!(f.pointer("/f:status").is_none());
    assert!(f.pointer("/f:metadata/f:name").is_none());
    assert!(f.pointer("/f:metadata/f:uid").is_none());
    assert!(f.pointer("/f:apiVersion").is_none());
}

#[test]
fn an_update_moves_ownership_of_changed_fields_to_the_writer() {
    let mut created = deploy(1, &[("A", "1")]);
    update(&json!({}), &mut created, &writer("creator", T1));
    let mut scaled = created.clone();
    scaled["spec"]["replicas"] = json!(5);
    update(&created, &mut scaled, &writer("scaler", T2));
    assert!(owns(&scaled, "scaler", "/f:spec/f:replicas"));
    assert!(!owns(&scaled, "creator", "/f:spec/f:replicas"));
    assert!(owns(&scaled, "creator", "/f:spec/f:selector"));
    // A write that changes nothing leaves entries and times alone.
    let mut same = scaled.clone();
    update(&scaled, &mut same, &writer("other", T2));
    assert_eq!(
        same["metadata"]["managedFields"],
        scaled["metadata"]["managedFields"]
    );
}

#[test]
fn a_manager_whose_fields_are_all_taken_loses_its_entry() {
    let mut a = json!({"metadata": {"name": "c"}, "immutable": false});
    let w = |m| Writer {
        group: "",
        kind: "ConfigMap",
        api_version: "v1",
        scope: Scope::Everything,
        ..writer(m, T1)
    };
    update(&json!({}), &mut a, &w("first"));
    let mut b = a.clone();
    b["immutable"] = json!(true);
    update(&a, &mut b, &w("second"));
    let managers: Vec<String> = entries(&b).into_iter().map(|(m, _, _)| m).collect();
    assert_eq!(managers, ["second"]);
}

#[test]
fn sent_entries_replace_the_live_ones_and_an_empty_entry_clears_them() {
    let mut live = deploy(1, &[]);
    update(&json!({}), &mut live, &writer("creator", T1));
    let mut cleared = live.clone();
    cleared["metadata"]["managedFields"] = json!([{}]);
    update(&live, &mut cleared, &writer("editor", T2));
    assert!(cleared["metadata"].get("managedFields").is_none());
    // Garbage falls back to the live entries.
    let mut garbage = live.clone();
    garbage["metadata"]["managedFields"] = json!([{"manager": "x", "operation": "Patch"}]);
    update(&live, &mut garbage, &writer("editor", T2));
    assert_eq!(
        garbage["metadata"]["managedFields"],
        live["metadata"]["managedFields"]
    );
}

#[test]
fn status_writes_are_recorded_with_their_subresource_and_own_only_status() {
    let live = deploy(1, &[]);
    let mut new = live.clone();
    new["status"] = json!({"replicas": 1});
    let w = Writer {
        subresource: "status",
        scope: Scope::OnlyStatus,
        ..writer("controller", T1)
    };
    update(&live, &mut new, &w);
    let e = &new["metadata"]["managedFields"][0];
    assert_eq!(e["subresource"], "status");
    assert_eq!(e["fieldsV1"], json!({"f:status": {"f:replicas": {}}}));
}

#[test]
fn apply_creates_with_exactly_the_configuration_fields() {
    let out = apply(
        &json!({}),
        &deploy(2, &[("A", "1")]),
        &writer("kubectl", T1),
        false,
    )
    .unwrap();
    assert_eq!(out["spec"]["replicas"], 2);
    let e = &out["metadata"]["managedFields"][0];
    assert_eq!(e["operation"], "Apply");
    assert_eq!(e["time"], T1);
    assert_eq!(
        e["fieldsV1"]["f:spec"]["f:template"]["f:spec"]["f:containers"],
        json!({r#"k:{"name":"web"}"#: {".": {}, "f:name": {}, "f:image": {}, "f:env": {
            r#"k:{"name":"A"}"#: {".": {}, "f:name": {}, "f:value": {}}}}})
    );
    assert!(e["fieldsV1"].pointer("/f:metadata/f:name").is_none());
}

#[test]
fn reapplying_without_a_field_removes_it_unless_another_manager_owns_it() {
    let w = writer("kubectl", T1);
    let first = apply(&json!({}), &deploy(2, &[("A", "1"), ("B", "2")]), &w, false).unwrap();
    let second = apply(&first, &deploy(2, &[("A", "1")]), &w, false).unwrap();
    let env = &second["spec"]["template"]["spec"]["containers"][0]["env"];
    assert_eq!(env, &json!([{"name": "A", "value": "1"}]));
    // Another applier sharing B keeps it.
    let shared = apply(
        &first,
        &deploy(2, &[("B", "2")]),
        &writer("other", T1),
        false,
    )
    .unwrap();
    let third = apply(&shared, &deploy(2, &[("A", "1")]), &w, false).unwrap();
    let env = &third["spec"]["template"]["spec"]["containers"][0]["env"];
    assert_eq!(
        env,
        &json!([{"name": "A", "value": "1"}, {"name": "B", "value": "2"}])
    );
}

#[test]
fn changing_a_field_another_manager_owns_conflicts_unless_forced() {
    let w = writer("kubectl", T1);
    let applied = apply(&json!({}), &deploy(2, &[]), &w, false).unwrap();
    let mut scaled = applied.clone();
    scaled["spec"]["replicas"] = json!(5);
    let scale = Writer {
        subresource: "scale",
        scope: Scope::Everything,
        ..writer("kubectl-scale", T2)
    };
    update(&applied, &mut scaled, &scale);
    let err = apply(&scaled, &deploy(3, &[]), &w, false).unwrap_err();
    assert_eq!(
        err.to_string(),
        r#"Apply failed with 1 conflict: conflict with "kubectl-scale" with subresource "scale" using apps/v1: .spec.replicas"#
    );
    let Error::Conflicts(list) = err else {
        panic!("not a conflict")
    };
    assert_eq!(list[0].field, ".spec.replicas");
    // The same value is no conflict: both own it.
    let same = apply(&scaled, &deploy(5, &[]), &w, false).unwrap();
    assert!(owns(&same, "kubectl", "/f:spec/f:replicas"));
    assert!(owns(&same, "kubectl-scale", "/f:spec/f:replicas"));
    // Forcing takes the field; the scaler, left with nothing, goes.
    let forced = apply(&scaled, &deploy(3, &[]), &w, true).unwrap();
    assert_eq!(forced["spec"]["replicas"], 3);
    let managers: Vec<String> = entries(&forced).into_iter().map(|(m, _, _)| m).collect();
    assert_eq!(managers, ["kubectl"]);
}

#[test]
fn conflicts_with_several_managers_are_listed_by_manager() {
    let message = conflict_message(&[
        Conflict {
            manager: r#""b""#.into(),
            field: ".x".into(),
            path: vec![],
        },
        Conflict {
            manager: r#""a""#.into(),
            field: ".y".into(),
            path: vec![],
        },
    ]);
    assert_eq!(
        message,
        "Apply failed with 2 conflicts: conflicts with \"a\":\n- .y\nconflicts with \"b\":\n- .x"
    );
}

#[test]
fn a_noop_apply_returns_the_live_object_and_keeps_the_entry_time() {
    let first = apply(&json!({}), &deploy(2, &[]), &writer("kubectl", T1), false).unwrap();
    let again = apply(&first, &deploy(2, &[]), &writer("kubectl", T2), false).unwrap();
    assert_eq!(again, first);
}

#[test]
fn an_apply_carrying_managed_fields_is_refused() {
    let mut config = deploy(1, &[]);
    config["metadata"]["managedFields"] = json!([]);
    assert_eq!(
        apply(&json!({}), &config, &writer("kubectl", T1), false).unwrap_err(),
        Error::ManagedFieldsInApply
    );
}

#[test]
fn entries_decode_and_encode_in_upstream_order() {
    let list = json!([
        {"manager": "z", "operation": "Update", "apiVersion": "v1", "time": T2,
         "fieldsType": "FieldsV1", "fieldsV1": {"f:data": {"f:a": {}}}},
        {"manager": "y", "operation": "Update", "apiVersion": "v1", "time": T1,
         "fieldsType": "FieldsV1", "fieldsV1": {"f:data": {"f:b": {}}}},
        {"manager": "x", "operation": "Apply", "apiVersion": "v1", "time": T2,
         "fieldsType": "FieldsV1", "fieldsV1": {"f:data": {"f:c": {}}}},
    ]);
    let managed = Managed::decode(Some(&list)).unwrap();
    let order: Vec<Value> = managed
        .encode()
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["manager"].clone())
        .collect();
    assert_eq!(order, [json!("x"), json!("y"), json!("z")]);
    for bad in [
        json!([{"manager": "a", "operation": "Patch", "apiVersion": "v1", "fieldsType": "FieldsV1"}]),
        json!([{"manager": "a", "operation": "Update", "fieldsType": "FieldsV1"}]),
        json!([{"manager": "a", "operation": "Update", "apiVersion": "v1"}]),
        json!([{"manager": "a", "operation": "Update", "apiVersion": "v1",
                "fieldsType": "FieldsV1", "fieldsV1": {"q:x": {}}}]),
    ] {
        assert!(Managed::decode(Some(&bad)).is_err(), "{bad}");
    }
}

#[test]
fn applying_to_status_owns_only_status() {
    let live = apply(&json!({}), &deploy(1, &[]), &writer("kubectl", T1), false).unwrap();
    let mut config = json!({"apiVersion": "apps/v1", "kind": "Deployment",
                            "metadata": {"name": "web"}, "status": {"replicas": 1}});
    config["spec"] = json!({"replicas": 9});
    let w = Writer {
        subresource: "status",
        scope: Scope::OnlyStatus,
        ..writer("controller", T2)
    };
    let out = apply(&live, &config, &w, false).unwrap();
    let e = out["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["manager"] == "controller")
        .unwrap();
    assert_eq!(e["fieldsV1"], json!({"f:status": {"f:replicas": {}}}));
    assert_eq!(e["subresource"], "status");
}

#[test]
fn kubectl_takes_fields_client_side_apply_set_without_conflict_and_keeps_the_annotation() {
    let mut live = deploy(2, &[]);
    let mut last = deploy(2, &[]);
    last["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("namespace");
    live["metadata"]["annotations"] = json!({LAST_APPLIED: last.to_string()});
    let csa = writer("kubectl-client-side-apply", T1);
    update(&json!({}), &mut live, &csa);
    let out = apply(&live, &deploy(3, &[]), &writer("kubectl", T2), false).unwrap();
    assert_eq!(out["spec"]["replicas"], 3);
    let recorded: Value = serde_json::from_str(
        out["metadata"]["annotations"][LAST_APPLIED]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(recorded["spec"]["replicas"], 3);
    // Another manager gets no such help.
    assert!(matches!(
        apply(&live, &deploy(3, &[]), &writer("helm", T2), false),
        Err(Error::Conflicts(_))
    ));
    // Nor does kubectl once the live value differs from the last-applied one.
    let mut scaled = live.clone();
    scaled["spec"]["replicas"] = json!(7);
    update(&live, &mut scaled, &writer("kubectl-scale", T2));
    assert!(matches!(
        apply(&scaled, &deploy(3, &[]), &writer("kubectl", T2), false),
        Err(Error::Conflicts(_))
    ));
}
