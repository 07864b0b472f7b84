//! Unit tests of quota usage, scopes and constraints.

use serde_json::json;

use super::*;

fn now() -> jiff::Timestamp {
    "2026-01-01T10:00:00Z".parse().unwrap()
}

fn list(pairs: &[(&str, &str)]) -> ResourceList {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), Amount::parse(v).unwrap()))
        .collect()
}

fn pod(containers: Value) -> Value {
    json!({"metadata": {"name": "p"}, "spec": {"containers": containers}})
}

#[test]
fn a_pod_uses_its_containers_sum_and_its_largest_init_container() {
    let mut p = pod(json!([
        {"name": "a", "resources": {"requests": {"cpu": "100m", "memory": "128Mi"},
                                    "limits": {"cpu": "1", "memory": "128Mi"}}},
        {"name": "b", "resources": {"requests": {"cpu": "400m", "memory": "128Mi"}}},
    ]));
    p["spec"]["initContainers"] = json!([{"name": "i", "resources": {"requests": {"cpu": "2"}}}]);
    let used = usage("", "pods", &p, now());
    assert_eq!(
        to_json(&used),
        json!({"count/pods": "1", "pods": "1", "cpu": "2", "requests.cpu": "2",
               "memory": "256Mi", "requests.memory": "256Mi",
               "limits.cpu": "1", "limits.memory": "128Mi"})
    );
}

#[test]
fn a_resized_pod_uses_the_larger_of_its_spec_and_what_its_node_allocated() {
    let mut p = pod(json!([{"name": "a", "resources": {
        "requests": {"cpu": "100m"}, "limits": {"cpu": "200m"}}}]));
    p["status"]["containerStatuses"] = json!([{"name": "a",
        "allocatedResources": {"cpu": "300m"},
        "resources": {"requests": {"cpu": "300m"}, "limits": {"cpu": "500m"}}}]);
    let cpu = |p: &Value| {
        let used = to_json(&usage("", "pods", p, now()));
        (used["requests.cpu"].clone(), used["limits.cpu"].clone())
    };
    // shrinking: the node still holds the old amounts
    assert_eq!(cpu(&p), (json!("300m"), json!("500m")));
    // growing: the spec's larger amounts are charged at once
    p["spec"]["containers"][0]["resources"] =
        json!({"requests": {"cpu": "1"}, "limits": {"cpu": "2"}});
    assert_eq!(cpu(&p), (json!("1"), json!("2")));
    // unless the node refused the resize for good
    p["status"]["conditions"] =
        json!([{"type": "PodResizePending", "status": "True", "reason": "Infeasible"}]);
    assert_eq!(cpu(&p), (json!("300m"), json!("500m")));
}

#[test]
fn terminal_and_expired_pods_only_count_as_count_pods() {
    let mut p = pod(json!([{"name": "a", "resources": {"requests": {"cpu": "1"}}}]));
    p["status"] = json!({"phase": "Succeeded"});
    assert_eq!(
        to_json(&usage("", "pods", &p, now())),
        json!({"count/pods": "1"})
    );
    p["status"] = json!({"phase": "Running"});
    p["metadata"]["deletionTimestamp"] = json!("2026-01-01T09:59:00Z");
    assert_eq!(
        to_json(&usage("", "pods", &p, now())),
        json!({"count/pods": "1"})
    );
    p["metadata"]["deletionTimestamp"] = json!("2026-01-01T10:00:30Z");
    assert!(usage("", "pods", &p, now()).contains_key("pods"));
}

#[test]
fn services_count_node_ports_and_load_balancers() {
    let svc = json!({"spec": {"type": "LoadBalancer", "ports": [{"port": 80}, {"port": 443}]}});
    assert_eq!(
        to_json(&usage("", "services", &svc, now())),
        json!({"count/services": "1", "services": "1", "services.loadbalancers": "1",
               "services.nodeports": "2"})
    );
    let deploy = json!({"spec": {}});
    assert_eq!(
        to_json(&usage("apps", "deployments", &deploy, now())),
        json!({"count/deployments.apps": "1"})
    );
}

#[test]
fn claims_count_storage_overall_and_per_class() {
    let pvc = json!({"spec": {"storageClassName": "fast",
                              "resources": {"requests": {"storage": "1Gi"}}}});
    let used = usage("", "persistentvolumeclaims", &pvc, now());
    assert_eq!(used["requests.storage"].to_string(), "1Gi");
    assert_eq!(
        used["fast.storageclass.storage.k8s.io/requests.storage"].to_string(),
        "1Gi"
    );
    assert!(charges("", "persistentvolumeclaims", "requests.storage"));
    assert!(!charges("", "pods", "requests.storage"));
}

#[test]
fn scopes_match_only_pods_of_their_kind() {
    let hard = list(&[("pods", "5")]);
    let best = pod(json!([{"name": "a"}]));
    let mut burstable = pod(json!([{"name": "a", "resources": {"requests": {"cpu": "1"}}}]));
    burstable["spec"]["activeDeadlineSeconds"] = json!(30);
    let q = |scopes: Value| json!({"spec": {"scopes": scopes}});
    assert!(matches(&q(json!(["BestEffort"])), &hard, "", "pods", &best));
    assert!(!matches(
        &q(json!(["BestEffort"])),
        &hard,
        "",
        "pods",
        &burstable
    ));
    assert!(matches(
        &q(json!(["NotBestEffort", "Terminating"])),
        &hard,
        "",
        "pods",
        &burstable
    ));
    assert!(matches(
        &q(json!(["NotTerminating"])),
        &hard,
        "",
        "pods",
        &best
    ));
    let services = list(&[("services", "5")]);
    assert!(!matches(
        &q(json!(["NotTerminating"])),
        &services,
        "",
        "services",
        &json!({})
    ));
    assert!(matches(
        &q(json!([])),
        &services,
        "",
        "services",
        &json!({})
    ));
    assert!(!matches(&q(json!([])), &hard, "", "services", &json!({})));
    let mut high = best.clone();
    high["spec"]["priorityClassName"] = json!("high");
    let by_class = json!({"spec": {"scopeSelector": {"matchExpressions": [
        {"scopeName": "PriorityClass", "operator": "In", "values": ["high"]}]}}});
    assert!(matches(&by_class, &hard, "", "pods", &high));
    assert!(!matches(&by_class, &hard, "", "pods", &best));
}

#[test]
fn quota_limited_compute_must_be_stated_by_every_container() {
    let p = pod(json!([
        {"name": "app", "resources": {"requests": {"cpu": "1"}}},
        {"name": "side", "resources": {"limits": {"cpu": "1"}, "requests": {"cpu": "1"}}},
    ]));
    let required: BTreeSet<String> = ["limits.cpu".to_string(), "pods".to_string()].into();
    assert_eq!(
        pod_constraints(&p, &required),
        Err("must specify limits.cpu for: app".to_string())
    );
    let required: BTreeSet<String> = ["requests.cpu".to_string()].into();
    assert_eq!(pod_constraints(&p, &required), Ok(()));
}

#[test]
fn lists_add_subtract_and_print_as_upstream() {
    let a = list(&[("pods", "2"), ("requests.cpu", "500m")]);
    let b = list(&[("pods", "1"), ("requests.cpu", "500m")]);
    let sum = add(&a, &b);
    assert_eq!(pretty(&sum), "pods=3,requests.cpu=1");
    assert_eq!(pretty(&subtract(&sum, &b)), "pods=2,requests.cpu=500m");
    assert_eq!(
        pretty(&subtract_non_negative(&b, &a)),
        "pods=0,requests.cpu=0",
        "a smaller list takes nothing away"
    );
    assert_eq!(
        exceeded(&sum, &list(&[("pods", "2")])),
        ["pods".to_string()].into()
    );
    assert!(equals(&list(&[("cpu", "1")]), &list(&[("cpu", "1000m")])));
}
