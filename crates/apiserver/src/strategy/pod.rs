//! Pods: upstream's defaults (`SetDefaults_PodSpec`, `SetDefaults_Container`), the checks of
//! `ValidatePodCreate` and `ValidatePodUpdate` that Skiff relies on (what an update and a
//! `resize` may change is in [`pod_update`](super::pod_update); scheduling gates among
//! them: valid and distinct names, only removed by an update, none on a pod with a node; generic
//! ephemeral volumes' claim templates, as upstream's `validateEphemeralVolumeSource`), the
//! initial status (phase Pending, the QoS class, and `PodScheduled=False` with reason
//! `SchedulingGated` for a gated pod), which pods may be bound, the field selector set, and
//! graceful deletion of bound pods.

use serde_json::{Value, json};
use skiff_apimachinery::quantity::Quantity;
use skiff_apimachinery::validation::{self, FieldError, FieldPath};

use super::{Strategy, pod_ephemeral, pod_update, pvc, string_at};

#[derive(Debug)]
pub struct PodStrategy;

/// Upstream's default grace period (`DefaultTerminationGracePeriodSeconds`).
pub const DEFAULT_GRACE_SECONDS: i64 = 30;

pub(crate) const CONTAINER_LISTS: [&str; 2] = ["initContainers", "containers"];

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
    pod_ephemeral::default_ephemeral_containers(spec);
    if let Some(volumes) = spec.get_mut("volumes").and_then(Value::as_array_mut) {
        for source in volumes.iter_mut().filter_map(|v| v.get_mut("ephemeral")) {
            pvc::default_ephemeral_source(source);
        }
    }
}

/// Upstream's `SetDefaults_Container` (ephemeral containers get the same).
pub(crate) fn default_container(c: &mut Value) {
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

/// Upstream's `PodReasonSchedulingGated`: the PodScheduled condition's reason while a pod has
/// scheduling gates (`kubectl get pod` shows it as the STATUS).
pub const SCHEDULING_GATED: &str = "SchedulingGated";

/// The names in `spec.schedulingGates`, in order.
fn gate_names(spec: &Value) -> Vec<&str> {
    spec.get("schedulingGates")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|g| g.get("name").and_then(Value::as_str).unwrap_or(""))
        .collect()
}

/// Upstream's `applySchedulingGatedCondition`: a new pod with scheduling gates starts with
/// `PodScheduled=False`, reason `SchedulingGated`, unless it already has a PodScheduled
/// condition. Runs after mutating admission, as upstream's `PrepareForCreate` does (webhooks
/// such as Kueue's add gates).
fn set_scheduling_gated_condition(pod: &mut Value) {
    if gate_names(pod.get("spec").unwrap_or(&Value::Null)).is_empty() || !pod["status"].is_object()
    {
        return;
    }
    if !pod["status"]["conditions"].is_array() {
        pod["status"]["conditions"] = json!([]);
    }
    let Some(conditions) = pod["status"]["conditions"].as_array_mut() else {
        return;
    };
    if conditions.iter().any(|c| c["type"] == "PodScheduled") {
        return;
    }
    conditions.push(json!({
        "type": "PodScheduled",
        "status": "False",
        "reason": SCHEDULING_GATED,
        "message": "Scheduling is blocked due to non-empty scheduling gates",
        "lastProbeTime": null,
        "lastTransitionTime": null,
    }));
}

/// Why `pods/binding` refuses to bind this pod, in upstream's words (`assignPod`), or `None`
/// when it may be bound. The handler answers 409 on `pods/binding` with it.
pub fn binding_refusal(pod: &Value, name: &str) -> Option<String> {
    if pod.pointer("/metadata/deletionTimestamp").is_some() {
        return Some(format!(
            "pod {name} is being deleted, cannot be assigned to a host"
        ));
    }
    if let Some(existing) = pod
        .pointer("/spec/nodeName")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
    {
        return Some(format!(
            "pod {name} is already assigned to node \"{existing}\""
        ));
    }
    if !gate_names(pod.get("spec").unwrap_or(&Value::Null)).is_empty() {
        return Some(format!("pod {name} has non-empty .spec.schedulingGates"));
    }
    None
}

/// Upstream's `validateSchedulingGates`: each name a qualified name, none twice.
fn validate_scheduling_gates(spec: &Value, path: &FieldPath) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let mut seen = std::collections::HashSet::new();
    let path = path.child("schedulingGates");
    for (i, name) in gate_names(spec).into_iter().enumerate() {
        for msg in validation::is_qualified_name(name) {
            errs.push(FieldError::invalid(&path.index(i), json!(name), &msg));
        }
        if !seen.insert(name) {
            errs.push(FieldError::duplicate(&path.index(i), json!(name)));
        }
    }
    errs
}

/// Upstream's `validateOnlyDeletedSchedulingGates`: an update may remove gates, never add one;
/// one error per new name, at its last index (upstream reports them in map order, Skiff in
/// index order).
fn validate_only_deleted_scheduling_gates(spec: &Value, old_spec: &Value) -> Vec<FieldError> {
    let old = gate_names(old_spec);
    let path = FieldPath::new("spec").child("schedulingGates");
    let mut added: Vec<(usize, &str)> = Vec::new();
    for (i, name) in gate_names(spec).into_iter().enumerate() {
        added.retain(|(_, n)| *n != name);
        if !old.contains(&name) {
            added.push((i, name));
        }
    }
    added
        .into_iter()
        .map(|(i, name)| {
            FieldError::forbidden(
                &path.index(i).child("name"),
                format!("only deletion is allowed, but found new scheduling gate '{name}'"),
            )
        })
        .collect()
}

/// Upstream's check in `ValidatePodCreate`: a pod cannot name its node while it has gates.
fn validate_node_name_without_gates(spec: &Value) -> Vec<FieldError> {
    let node = spec.get("nodeName").and_then(Value::as_str).unwrap_or("");
    if node.is_empty() || gate_names(spec).is_empty() {
        return Vec::new();
    }
    vec![FieldError::forbidden(
        &FieldPath::new("spec").child("nodeName"),
        "cannot be set until all schedulingGates have been cleared",
    )]
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
                (Some(r), Some(l)) if !pod_update::semantic_eq(r, l) => guaranteed = false,
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

/// Upstream's `ValidateResourceRequirements` on quantities: none negative, and a request at
/// most its limit (equal to it for resources that cannot be overcommitted: hugepages and
/// extended resources).
fn validate_resource_requirements(container: &Value, path: &FieldPath) -> Vec<FieldError> {
    let list = |which: &str| {
        container
            .pointer(&format!("/resources/{which}"))
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
            .filter_map(|(name, q)| {
                let q = q.as_str()?;
                Some((name.as_str(), q, Quantity::parse(q).ok()?.nano_value()))
            })
    };
    let mut errs = Vec::new();
    for which in ["limits", "requests"] {
        for (name, q, value) in list(which) {
            if value < 0 {
                errs.push(FieldError::invalid(
                    &path.child(which).key(name),
                    json!(q),
                    "must be greater than or equal to 0",
                ));
            }
        }
    }
    let limits: Vec<(&str, &str, i128)> = list("limits").collect();
    for (name, q, value) in list("requests") {
        let Some((_, limit, limit_value)) = limits.iter().find(|(n, ..)| *n == name) else {
            continue;
        };
        let overcommit = !name.starts_with("hugepages-")
            && (!name.contains('/') || name.starts_with("kubernetes.io/"));
        let message = if !overcommit && value != *limit_value {
            format!("must be equal to {name} limit of {limit}")
        } else if value > *limit_value {
            format!("must be less than or equal to {name} limit of {limit}")
        } else {
            continue;
        };
        errs.push(FieldError::invalid(
            &path.child("requests"),
            json!(q),
            message,
        ));
    }
    errs
}

/// Validation of a pod spec at `path` (used for pods and pod templates). Names are unique
/// across init, regular and ephemeral containers.
pub fn validate_pod_spec(spec: &Value, path: &FieldPath) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let containers = spec.get("containers").and_then(Value::as_array);
    if containers.is_none_or(|c| c.is_empty()) {
        errs.push(FieldError::required(&path.child("containers"), ""));
    }
    let mut names = std::collections::HashSet::new();
    for list in CONTAINER_LISTS
        .into_iter()
        .chain([pod_ephemeral::EPHEMERAL_CONTAINERS])
    {
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
            errs.extend(validate_resource_requirements(c, &p.child("resources")));
        }
    }
    errs.extend(pod_ephemeral::validate_ephemeral_containers(spec, path));
    errs.extend(validate_scheduling_gates(spec, path));
    let volumes = spec.get("volumes").and_then(Value::as_array);
    for (i, v) in volumes.into_iter().flatten().enumerate() {
        if let Some(source) = v.get("ephemeral").filter(|s| !s.is_null()) {
            let p = path.child("volumes").index(i).child("ephemeral");
            errs.extend(pvc::validate_ephemeral_source(source, &p));
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

/// The checks of a pod's new spec on any write: valid as on create (seccomp annotations
/// included), scheduling gates only removed.
fn validate_changed_spec(pod: &Value, old: &Value) -> Vec<FieldError> {
    let Some(spec) = pod.get("spec").filter(|s| s.is_object()) else {
        return vec![FieldError::required(&FieldPath::new("spec"), "")];
    };
    let old_spec = old.get("spec").unwrap_or(&Value::Null);
    let mut errs = validate_pod_spec(spec, &FieldPath::new("spec"));
    errs.extend(super::pod_seccomp::validate(pod));
    errs.extend(validate_only_deleted_scheduling_gates(spec, old_spec));
    errs
}

impl Strategy for PodStrategy {
    fn prepare_admitted(&self, pod: &mut Value) {
        set_qos_class(pod);
        set_scheduling_gated_condition(pod);
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
            Some(spec) if spec.is_object() => {
                let mut errs = validate_pod_spec(spec, &FieldPath::new("spec"));
                errs.extend(pod_ephemeral::validate_none_on_create(spec));
                errs.extend(validate_node_name_without_gates(spec));
                errs.extend(super::pod_seccomp::validate(pod));
                errs
            }
            _ => vec![FieldError::required(&FieldPath::new("spec"), "")],
        }
    }

    fn validate_update(&self, pod: &Value, old: &Value) -> Vec<FieldError> {
        let mut errs = validate_changed_spec(pod, old);
        let old_spec = old.get("spec").unwrap_or(&Value::Null);
        errs.extend(pod_update::validate_spec_update(&pod["spec"], old_spec));
        errs
    }

    /// `binding` sets the node, which no other write may change; `resize` changes only
    /// container resources; `ephemeralcontainers` only adds ephemeral containers.
    fn validate_subresource_update(&self, sub: &str, pod: &Value, old: &Value) -> Vec<FieldError> {
        match sub {
            "binding" => validate_changed_spec(pod, old),
            "resize" => {
                let mut errs = validate_changed_spec(pod, old);
                errs.extend(pod_update::validate_resize(pod, old));
                errs
            }
            "ephemeralcontainers" => {
                let mut errs = validate_changed_spec(pod, old);
                errs.extend(pod_ephemeral::validate_ephemeral_containers_update(
                    pod, old,
                ));
                errs
            }
            _ => self.validate_update(pod, old),
        }
    }

    fn prepare_for_subresource_update(&self, sub: &str, pod: &mut Value, old: &Value) -> bool {
        match sub {
            "resize" => pod_update::drop_non_resize_updates(pod, old),
            "ephemeralcontainers" => pod_ephemeral::drop_non_ephemeral_container_updates(pod, old),
            _ => return false,
        }
        true
    }

    /// A kubelet watches the pods of its node (`spec.nodeName=n1`), as upstream's
    /// `NodeNameTriggerFunc`.
    fn watch_index(&self) -> Option<&'static str> {
        Some("spec.nodeName")
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

    fn gated_pod(gates: &[&str]) -> Value {
        let gates: Vec<Value> = gates.iter().map(|g| json!({"name": g})).collect();
        json!({"metadata": {"name": "p"},
               "spec": {"containers": [{"name": "c", "image": "busybox"}],
                        "schedulingGates": gates}})
    }

    fn messages(errs: &[FieldError]) -> Vec<String> {
        errs.iter().map(|e| e.to_string()).collect()
    }

    /// Create as the registry runs it: defaults and the initial status, then (after mutating
    /// admission) what depends on the admitted object.
    fn created(mut pod: Value) -> Value {
        PodStrategy.prepare_for_create(&mut pod);
        PodStrategy.prepare_admitted(&mut pod);
        pod
    }

    #[test]
    fn a_pod_created_with_gates_is_scheduling_gated() {
        let pod = created(gated_pod(&["example.com/quota"]));
        assert_eq!(
            pod["status"]["conditions"],
            json!([{"type": "PodScheduled", "status": "False", "reason": "SchedulingGated",
                    "message": "Scheduling is blocked due to non-empty scheduling gates",
                    "lastProbeTime": null, "lastTransitionTime": null}])
        );
        assert_eq!(pod["status"]["phase"], "Pending");
        assert!(PodStrategy.validate(&pod).is_empty());
        // without gates (or with an empty list), no condition
        for ungated in [
            gated_pod(&[]),
            json!({"spec": {"containers": [{"name": "c"}]}}),
        ] {
            let pod = created(ungated);
            assert!(pod["status"].get("conditions").is_none(), "{pod}");
        }
    }

    #[test]
    fn gates_need_distinct_qualified_names() {
        let errs = PodStrategy.validate(&gated_pod(&["a", "example.com/b", "a", "-bad"]));
        assert_eq!(
            messages(&errs),
            vec![
                "spec.schedulingGates[2]: Duplicate value: \"a\"".to_string(),
                "spec.schedulingGates[3]: Invalid value: \"-bad\": name part must consist of \
                 alphanumeric characters, '-', '_' or '.', and must start and end with an \
                 alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex \
                 used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
                    .to_string(),
            ]
        );
    }

    #[test]
    fn gates_may_only_be_removed_by_an_update() {
        let old = created(gated_pod(&["a", "b"]));
        let mut fewer = old.clone();
        fewer["spec"]["schedulingGates"] = json!([{"name": "b"}]);
        assert!(PodStrategy.validate_update(&fewer, &old).is_empty());
        let mut none = old.clone();
        none["spec"]
            .as_object_mut()
            .unwrap()
            .remove("schedulingGates");
        assert!(PodStrategy.validate_update(&none, &old).is_empty());
        let mut added = old.clone();
        added["spec"]["schedulingGates"] = json!([{"name": "a"}, {"name": "b"}, {"name": "c"}]);
        assert_eq!(
            messages(&PodStrategy.validate_update(&added, &old)),
            vec![
                "spec.schedulingGates[2].name: Forbidden: only deletion is allowed, but found \
                 new scheduling gate 'c'"
                    .to_string()
            ]
        );
        // a new name given twice is one error, at its last index, as upstream
        let mut twice = old.clone();
        twice["spec"]["schedulingGates"] = json!([{"name": "x"}, {"name": "a"}, {"name": "x"}]);
        let errs = messages(&PodStrategy.validate_update(&twice, &old));
        assert!(
            errs.contains(
                &"spec.schedulingGates[2].name: Forbidden: only deletion is allowed, but found \
                  new scheduling gate 'x'"
                    .to_string()
            ),
            "{errs:?}"
        );
        assert_eq!(errs.iter().filter(|e| e.contains("Forbidden")).count(), 1);
        // gates never come back once gone
        let mut again = none.clone();
        again["spec"]["schedulingGates"] = json!([{"name": "a"}]);
        assert_eq!(PodStrategy.validate_update(&again, &none).len(), 1);
    }

    #[test]
    fn a_pod_with_a_node_cannot_have_gates() {
        let forbidden = vec![
            "spec.nodeName: Forbidden: cannot be set until all schedulingGates have been cleared"
                .to_string(),
        ];
        let mut pod = gated_pod(&["a"]);
        pod["spec"]["nodeName"] = json!("n1");
        assert_eq!(messages(&PodStrategy.validate(&pod)), forbidden);
        // nor be given one by an update (no update may change the node)
        let old = created(gated_pod(&["a"]));
        let mut placed = old.clone();
        placed["spec"]["nodeName"] = json!("n1");
        let errs = messages(&PodStrategy.validate_update(&placed, &old));
        assert_eq!(errs.len(), 1);
        assert!(errs[0].ends_with("- spec.nodeName: null\n+ spec.nodeName: \"n1\""));
    }

    #[test]
    fn a_gated_pod_cannot_be_bound() {
        let pod = created(gated_pod(&["a"]));
        assert_eq!(
            binding_refusal(&pod, "p").as_deref(),
            Some("pod p has non-empty .spec.schedulingGates")
        );
        assert_eq!(binding_refusal(&created(gated_pod(&[])), "p"), None);
        let mut bound = created(gated_pod(&[]));
        bound["spec"]["nodeName"] = json!("n1");
        assert_eq!(
            binding_refusal(&bound, "p").as_deref(),
            Some("pod p is already assigned to node \"n1\"")
        );
    }

    fn pod_with_volumes(volumes: Value) -> Value {
        json!({"metadata": {"name": "web"},
               "spec": {"containers": [{"name": "c", "image": "busybox"}], "volumes": volumes}})
    }

    fn errors(pod: &Value) -> Vec<String> {
        PodStrategy
            .validate(pod)
            .iter()
            .map(|e| e.to_string())
            .collect()
    }

    #[test]
    fn an_ephemeral_volume_needs_a_claim_template_with_a_claim_spec_and_only_labels_and_annotations()
     {
        let spec = json!({"accessModes": ["ReadWriteOnce"],
                          "resources": {"requests": {"storage": "1Gi"}}});
        let good = pod_with_volumes(json!([{"name": "scratch", "ephemeral": {
            "volumeClaimTemplate": {"metadata": {"labels": {"app": "web"},
                                                  "annotations": {"note": "x"},
                                                  "creationTimestamp": null},
                                     "spec": spec}}}]));
        assert_eq!(errors(&good), Vec::<String>::new());
        let missing = pod_with_volumes(json!([{"name": "scratch", "ephemeral": {}}]));
        assert_eq!(
            errors(&missing),
            ["spec.volumes[0].ephemeral.volumeClaimTemplate: Required value"]
        );
        let bad = pod_with_volumes(json!([{"name": "tmp", "emptyDir": {}},
            {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {
                "metadata": {"name": "mine", "namespace": "other", "uid": "u",
                             "labels": {"bad key!": "v"}},
                "spec": {"accessModes": ["ReadWriteOnce"]}}}}]));
        let p = "spec.volumes[1].ephemeral.volumeClaimTemplate";
        assert_eq!(
            errors(&bad),
            [
                format!(
                    "{p}.metadata.labels: Invalid value: \"bad key!\": name part must consist of \
                     alphanumeric characters, '-', '_' or '.', and must start and end with an \
                     alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex \
                     used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
                ),
                format!("{p}.metadata.name: Forbidden: cannot be set for an ephemeral volume"),
                format!("{p}.metadata.namespace: Forbidden: cannot be set for an ephemeral volume"),
                format!("{p}.metadata.uID: Forbidden: cannot be set for an ephemeral volume"),
                format!("{p}.spec.resources[storage]: Required value"),
            ]
        );
    }

    #[test]
    fn an_ephemeral_volumes_claim_template_defaults_to_a_filesystem_volume() {
        let mut spec = json!({"containers": [], "volumes": [{"name": "scratch", "ephemeral": {
            "volumeClaimTemplate": {"spec": {}}}}]});
        default_pod_spec(&mut spec);
        assert_eq!(
            spec["volumes"][0]["ephemeral"]["volumeClaimTemplate"]["spec"]["volumeMode"],
            "Filesystem"
        );
    }
}
