//! Pods: upstream's defaults (`SetDefaults_PodSpec`, `SetDefaults_Container`), the checks of
//! `ValidatePodCreate` that Skiff relies on, the initial status (phase Pending and the QoS
//! class), the field selector set, and graceful deletion of bound pods.

use serde_json::{Value, json};
use skiff_apimachinery::validation::{self, FieldError, FieldPath};

use super::{Strategy, string_at};

#[derive(Debug)]
pub struct PodStrategy;

/// Upstream's default grace period (`DefaultTerminationGracePeriodSeconds`).
pub const DEFAULT_GRACE_SECONDS: i64 = 30;

const CONTAINER_LISTS: [&str; 2] = ["initContainers", "containers"];

fn default(map: &mut Value, key: &str, value: Value) {
    if let Some(m) = map.as_object_mut() {
        m.entry(key.to_string()).or_insert(value);
    }
}

/// `Always` for `:latest` or untagged images, `IfNotPresent` otherwise (images pinned by digest
/// count as tagged).
pub fn default_pull_policy(image: &str) -> &'static str {
    if image.contains('@') {
        return "IfNotPresent";
    }
    let last = image.rsplit('/').next().unwrap_or(image);
    match last.split_once(':') {
        Some((_, "latest")) | None => "Always",
        Some(_) => "IfNotPresent",
    }
}

/// Defaults of a pod spec (also used inside templates of workloads).
pub fn default_pod_spec(spec: &mut Value) {
    if !spec.is_object() {
        return;
    }
    default(spec, "restartPolicy", json!("Always"));
    default(
        spec,
        "terminationGracePeriodSeconds",
        json!(DEFAULT_GRACE_SECONDS),
    );
    default(spec, "dnsPolicy", json!("ClusterFirst"));
    default(spec, "securityContext", json!({}));
    default(spec, "schedulerName", json!("default-scheduler"));
    default(spec, "enableServiceLinks", json!(true));
    for list in CONTAINER_LISTS {
        if let Some(containers) = spec.get_mut(list).and_then(Value::as_array_mut) {
            containers.iter_mut().for_each(default_container);
        }
    }
}

fn default_container(c: &mut Value) {
    if !c.is_object() {
        return;
    }
    let image = c
        .get("image")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    default(c, "imagePullPolicy", json!(default_pull_policy(&image)));
    default(c, "terminationMessagePath", json!("/dev/termination-log"));
    default(c, "terminationMessagePolicy", json!("File"));
    default(c, "resources", json!({}));
    if let Some(ports) = c.get_mut("ports").and_then(Value::as_array_mut) {
        for p in ports {
            default(p, "protocol", json!("TCP"));
        }
    }
}

/// Upstream's `SetDefaults_Pod` for resources (pods only, not templates): a container's limit
/// with no request of the same resource becomes its request too.
pub fn default_requests_from_limits(spec: &mut Value) {
    for list in ["containers", "initContainers"] {
        for c in spec
            .get_mut(list)
            .and_then(Value::as_array_mut)
            .into_iter()
            .flatten()
        {
            let Some(limits) = c
                .pointer("/resources/limits")
                .and_then(Value::as_object)
                .cloned()
            else {
                continue;
            };
            if !c["resources"]["requests"].is_object() {
                c["resources"]["requests"] = json!({});
            }
            if let Some(requests) = c["resources"]["requests"].as_object_mut() {
                for (k, v) in limits {
                    requests.entry(k).or_insert(v);
                }
            }
        }
    }
}

/// Sets `status.qosClass` from the spec: on create after mutating admission, as upstream's
/// `PrepareForCreate` runs after it (LimitRanger and webhooks may add resources).
fn set_qos_class(pod: &mut Value) {
    let qos = qos_class(pod.get("spec").unwrap_or(&Value::Null));
    if pod["status"].is_object() {
        pod["status"]["qosClass"] = json!(qos);
    }
}

/// Upstream's QoS class: Guaranteed when every container has equal cpu and memory limits and
/// requests, BestEffort when none has any, Burstable otherwise.
pub fn qos_class(spec: &Value) -> &'static str {
    let containers: Vec<&Value> = CONTAINER_LISTS
        .iter()
        .filter_map(|l| spec.get(*l).and_then(Value::as_array))
        .flatten()
        .collect();
    let mut any = false;
    let mut guaranteed = true;
    for c in &containers {
        let requests = c.pointer("/resources/requests");
        let limits = c.pointer("/resources/limits");
        for res in ["cpu", "memory"] {
            let req = requests.and_then(|r| r.get(res));
            let lim = limits.and_then(|l| l.get(res));
            if req.is_some() || lim.is_some() {
                any = true;
            }
            match (req, lim) {
                (_, None) => guaranteed = false,
                (Some(r), Some(l)) if r != l => guaranteed = false,
                _ => {}
            }
        }
    }
    if !any {
        "BestEffort"
    } else if guaranteed {
        "Guaranteed"
    } else {
        "Burstable"
    }
}

/// Validation of a pod spec at `path` (used for pods and pod templates).
pub fn validate_pod_spec(spec: &Value, path: &FieldPath) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let containers = spec.get("containers").and_then(Value::as_array);
    if containers.is_none_or(|c| c.is_empty()) {
        errs.push(FieldError::required(&path.child("containers"), ""));
    }
    let mut names = std::collections::HashSet::new();
    for list in CONTAINER_LISTS {
        let Some(cs) = spec.get(list).and_then(Value::as_array) else {
            continue;
        };
        for (i, c) in cs.iter().enumerate() {
            let p = path.child(list).index(i);
            match c.get("name").and_then(Value::as_str) {
                None | Some("") => errs.push(FieldError::required(&p.child("name"), "")),
                Some(name) => {
                    for msg in validation::is_dns1123_label(name) {
                        errs.push(FieldError::invalid(&p.child("name"), json!(name), &msg));
                    }
                    if !names.insert(name.to_string()) {
                        errs.push(FieldError::duplicate(&p.child("name"), json!(name)));
                    }
                }
            }
            if c.get("image")
                .and_then(Value::as_str)
                .is_none_or(|s| s.trim().is_empty())
            {
                errs.push(FieldError::required(&p.child("image"), ""));
            }
        }
    }
    let restart = spec
        .get("restartPolicy")
        .and_then(Value::as_str)
        .unwrap_or("Always");
    if !["Always", "OnFailure", "Never"].contains(&restart) {
        errs.push(FieldError::not_supported(
            &path.child("restartPolicy"),
            json!(restart),
            &["Always", "OnFailure", "Never"],
        ));
    }
    errs
}

impl Strategy for PodStrategy {
    fn prepare_admitted(&self, pod: &mut Value) {
        set_qos_class(pod);
    }

    fn returns_deleted_object(&self) -> bool {
        true
    }

    fn prepare_for_create(&self, pod: &mut Value) {
        if let Some(spec) = pod.get_mut("spec").filter(|s| s.is_object()) {
            default_pod_spec(spec);
            default_requests_from_limits(spec);
        }
        let qos = qos_class(pod.get("spec").unwrap_or(&Value::Null));
        pod["status"] = json!({"phase": "Pending", "qosClass": qos});
    }

    fn prepare_for_update(&self, pod: &mut Value, _old: &Value) {
        if let Some(spec) = pod.get_mut("spec") {
            default_pod_spec(spec);
        }
    }

    fn validate(&self, pod: &Value) -> Vec<FieldError> {
        match pod.get("spec") {
            Some(spec) if spec.is_object() => validate_pod_spec(spec, &FieldPath::new("spec")),
            _ => vec![FieldError::required(&FieldPath::new("spec"), "")],
        }
    }

    fn fields(&self, pod: &Value) -> Vec<(&'static str, String)> {
        [
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "spec.hostNetwork",
            "status.phase",
            "status.podIP",
            "status.nominatedNodeName",
        ]
        .into_iter()
        .map(|f| (f, string_at(pod, f)))
        .map(|(f, v)| {
            // Upstream's field set has "false" for an unset hostNetwork.
            if f == "spec.hostNetwork" && v.is_empty() {
                (f, "false".to_string())
            } else {
                (f, v)
            }
        })
        .collect()
    }

    fn graceful_delete_seconds(&self, pod: &Value, requested: Option<i64>) -> Option<i64> {
        // A pod never scheduled, or already finished, has no kubelet to stop it: it goes at once.
        let bound = !string_at(pod, "spec.nodeName").is_empty();
        let phase = string_at(pod, "status.phase");
        if !bound || phase == "Succeeded" || phase == "Failed" {
            return None;
        }
        let grace = requested
            .or_else(|| {
                pod.pointer("/spec/terminationGracePeriodSeconds")
                    .and_then(Value::as_i64)
            })
            .unwrap_or(DEFAULT_GRACE_SECONDS);
        (grace > 0).then_some(grace)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pull_policy_follows_the_tag() {
        assert_eq!(default_pull_policy("busybox"), "Always");
        assert_eq!(default_pull_policy("busybox:latest"), "Always");
        assert_eq!(default_pull_policy("busybox:1.36"), "IfNotPresent");
        assert_eq!(default_pull_policy("localhost:5000/busybox"), "Always");
        assert_eq!(default_pull_policy("r.io/b@sha256:abc"), "IfNotPresent");
    }

    #[test]
    fn a_new_pod_is_defaulted_and_pending() {
        let mut pod = json!({"metadata": {"name": "p"},
                             "spec": {"containers": [{"name": "c", "image": "busybox",
                                                      "ports": [{"containerPort": 80}]}]}});
        PodStrategy.prepare_for_create(&mut pod);
        assert_eq!(pod["spec"]["restartPolicy"], "Always");
        assert_eq!(pod["spec"]["terminationGracePeriodSeconds"], 30);
        assert_eq!(pod["spec"]["containers"][0]["imagePullPolicy"], "Always");
        assert_eq!(pod["spec"]["containers"][0]["ports"][0]["protocol"], "TCP");
        assert_eq!(
            pod["status"],
            json!({"phase": "Pending", "qosClass": "BestEffort"})
        );
        assert!(PodStrategy.validate(&pod).is_empty());
    }

    #[test]
    fn containers_need_a_name_and_an_image() {
        let pod = json!({"spec": {"containers": [{"name": "c"}, {"image": "x"}]}});
        let errs: Vec<String> = PodStrategy
            .validate(&pod)
            .iter()
            .map(|e| e.to_string())
            .collect();
        assert_eq!(
            errs,
            vec![
                "spec.containers[0].image: Required value".to_string(),
                "spec.containers[1].name: Required value".to_string(),
            ]
        );
    }

    #[test]
    fn a_pods_limits_without_requests_become_its_requests() {
        let mut pod = json!({"spec": {"containers": [
            {"name": "a", "resources": {"limits": {"cpu": "1", "memory": "1Gi"},
                                        "requests": {"cpu": "500m"}}},
            {"name": "b"}]}});
        PodStrategy.prepare_for_create(&mut pod);
        assert_eq!(
            pod["spec"]["containers"][0]["resources"]["requests"],
            json!({"cpu": "500m", "memory": "1Gi"})
        );
        assert_eq!(pod["spec"]["containers"][1]["resources"], json!({}));
        assert_eq!(pod["status"]["qosClass"], "Burstable");
    }

    #[test]
    fn qos_class_is_computed_from_requests_and_limits() {
        let g = json!({"containers": [{"resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}]});
        assert_eq!(qos_class(&g), "Guaranteed");
        let b = json!({"containers": [{"resources": {"requests": {"cpu": "1"}}}]});
        assert_eq!(qos_class(&b), "Burstable");
        assert_eq!(qos_class(&json!({"containers": [{}]})), "BestEffort");
    }

    #[test]
    fn only_bound_running_pods_are_deleted_gracefully() {
        let unbound = json!({"spec": {}});
        assert_eq!(PodStrategy.graceful_delete_seconds(&unbound, None), None);
        let bound = json!({"spec": {"nodeName": "n1", "terminationGracePeriodSeconds": 10}});
        assert_eq!(PodStrategy.graceful_delete_seconds(&bound, None), Some(10));
        assert_eq!(PodStrategy.graceful_delete_seconds(&bound, Some(0)), None);
    }
}
