//! StatefulSets: upstream's defaults (`SetDefaults_StatefulSet`: OrderedReady pods, a
//! RollingUpdate strategy with partition 0, the Retain/Retain PVC retention policy, one
//! replica, ten revisions; claim templates as PersistentVolumeClaims), `ValidateStatefulSetSpec`
//! with the pod template checks of 1.34 (ratcheted on update), DNS-label names, and the update
//! rule that only replicas, ordinals, template, updateStrategy, the retention policy and
//! minReadySeconds may change.

use serde_json::{Value, json};
use skiff_apimachinery::validation::{
    FieldError, FieldPath, is_dns1123_label, is_dns1123_subdomain,
};

use super::Strategy;
use super::common::{
    int_or_percent, int_or_percent_value, nonnegative, not_over_100_percent, object_at,
    required_selector, selector_mismatch, semantic_eq, set_default, validate_long_running_template,
    validate_template, validate_template_meta,
};
use super::generic::settle_generation;
use super::pod::validate_pod_spec;
use super::replicaset::default_workload_template;

#[derive(Debug)]
pub struct StatefulSetStrategy;

/// The spec fields an update may change (upstream's `ValidateStatefulSetUpdate`).
const MUTABLE: [&str; 6] = [
    "replicas",
    "ordinals",
    "template",
    "updateStrategy",
    "persistentVolumeClaimRetentionPolicy",
    "minReadySeconds",
];

fn defaults(sts: &mut Value) {
    let spec = object_at(sts, "spec");
    set_default(spec, "podManagementPolicy", json!("OrderedReady"));
    let strategy = object_at(spec, "updateStrategy");
    if strategy.get("type").is_none_or(|t| t.is_null() || t == "") {
        strategy["type"] = json!("RollingUpdate");
        object_at(strategy, "rollingUpdate");
    }
    if strategy["type"] == "RollingUpdate"
        && let Some(rolling) = strategy.get_mut("rollingUpdate").filter(|r| r.is_object())
    {
        set_default(rolling, "partition", json!(0));
    }
    let retention = object_at(spec, "persistentVolumeClaimRetentionPolicy");
    for when in ["whenDeleted", "whenScaled"] {
        if retention.get(when).is_none_or(|v| v.is_null() || v == "") {
            retention[when] = json!("Retain");
        }
    }
    set_default(spec, "replicas", json!(1));
    set_default(spec, "revisionHistoryLimit", json!(10));
    default_workload_template(spec);
    let claims = spec
        .get_mut("volumeClaimTemplates")
        .and_then(Value::as_array_mut);
    for claim in claims.into_iter().flatten().filter(|c| c.is_object()) {
        set_default(claim, "apiVersion", json!("v1"));
        set_default(claim, "kind", json!("PersistentVolumeClaim"));
        set_default(object_at(claim, "spec"), "volumeMode", json!("Filesystem"));
        set_default(object_at(claim, "status"), "phase", json!("Pending"));
    }
}

fn validate_update_strategy(strategy: &Value, path: &FieldPath) -> Vec<FieldError> {
    let rolling = strategy.get("rollingUpdate").filter(|r| !r.is_null());
    let ru_path = path.child("rollingUpdate");
    let mut errs = Vec::new();
    match strategy.get("type").and_then(Value::as_str).unwrap_or("") {
        "" => errs.push(FieldError::required(path, "")),
        "OnDelete" => {
            if let Some(ru) = rolling {
                errs.push(FieldError::invalid(
                    &ru_path,
                    ru.clone(),
                    "only allowed for updateStrategy 'RollingUpdate'",
                ));
            }
        }
        "RollingUpdate" => {
            if let Some(ru) = rolling {
                errs.extend(nonnegative(
                    ru.get("partition"),
                    &ru_path.child("partition"),
                ));
                let max = ru.get("maxUnavailable").filter(|m| !m.is_null());
                let max_path = ru_path.child("maxUnavailable");
                if let Some(m) = max {
                    errs.extend(int_or_percent(Some(m), &max_path));
                    if int_or_percent_value(Some(m)) == 0 {
                        errs.push(FieldError::invalid(&max_path, m.clone(), "cannot be 0"));
                    }
                    errs.extend(not_over_100_percent(Some(m), &max_path));
                }
            }
        }
        _ => errs.push(FieldError::invalid(
            path,
            strategy.clone(),
            "must be 'RollingUpdate' or 'OnDelete'",
        )),
    }
    errs
}

/// Upstream's `ValidateStatefulSetSpec`; `check_pods` adds 1.34's pod spec validation.
fn validate_spec(spec: &Value, check_pods: bool) -> Vec<FieldError> {
    let path = FieldPath::new("spec");
    let mut errs = Vec::new();
    let policy_path = path.child("podManagementPolicy");
    match spec.get("podManagementPolicy").and_then(Value::as_str) {
        None | Some("") => errs.push(FieldError::required(&policy_path, "")),
        Some("OrderedReady" | "Parallel") => {}
        Some(other) => errs.push(FieldError::invalid(
            &policy_path,
            other,
            "must be 'OrderedReady' or 'Parallel'",
        )),
    }
    let null = Value::Null;
    errs.extend(validate_update_strategy(
        spec.get("updateStrategy").unwrap_or(&null),
        &path.child("updateStrategy"),
    ));
    let retention_path = path.child("persistentVolumeClaimRetentionPolicy");
    if let Some(retention) = spec
        .get("persistentVolumeClaimRetentionPolicy")
        .filter(|r| !r.is_null())
    {
        for when in ["whenDeleted", "whenScaled"] {
            let value = retention.get(when).and_then(Value::as_str).unwrap_or("");
            if !matches!(value, "Retain" | "Delete") {
                errs.push(FieldError::not_supported(
                    &retention_path.child(when),
                    value,
                    &["Retain", "Delete"],
                ));
            }
        }
    }
    errs.extend(nonnegative(spec.get("replicas"), &path.child("replicas")));
    errs.extend(nonnegative(
        spec.get("minReadySeconds"),
        &path.child("minReadySeconds"),
    ));
    errs.extend(nonnegative(
        spec.pointer("/ordinals/start"),
        &path.child("ordinals").child("start"),
    ));
    let (selector_errs, selector) = required_selector(spec, &path, "statefulset");
    errs.extend(selector_errs);
    let template_path = path.child("template");
    let template = spec.get("template");
    match selector {
        None => errs.push(FieldError::invalid(
            &path.child("selector"),
            spec.get("selector").cloned().unwrap_or(null),
            "",
        )),
        Some(selector) => {
            if !selector.is_empty() {
                errs.extend(selector_mismatch(&selector, template, &template_path));
            }
            let template = template.unwrap_or(&Value::Null);
            errs.extend(if check_pods {
                validate_template(template, &template_path)
            } else {
                validate_template_meta(template, &template_path)
            });
        }
    }
    errs.extend(validate_long_running_template(
        spec.get("template").unwrap_or(&Value::Null),
        &template_path,
        "StatefulSet",
    ));
    errs
}

impl Strategy for StatefulSetStrategy {
    fn prepare_for_create(&self, sts: &mut Value) {
        defaults(sts);
    }

    fn prepare_for_update(&self, sts: &mut Value, old: &Value) {
        defaults(sts);
        settle_generation(sts, old);
    }

    fn validate(&self, sts: &Value) -> Vec<FieldError> {
        let mut errs = Vec::new();
        // Pods are named `{name}-{ordinal}` and need a DNS label; the caller checked the
        // subdomain form.
        let name = sts
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or("");
        if is_dns1123_subdomain(name).is_empty() {
            let name_path = FieldPath::new("metadata").child("name");
            for msg in is_dns1123_label(name) {
                errs.push(FieldError::invalid(&name_path, name, msg));
            }
        }
        errs.extend(validate_spec(sts.get("spec").unwrap_or(&Value::Null), true));
        errs
    }

    fn validate_update(&self, sts: &Value, old: &Value) -> Vec<FieldError> {
        let null = Value::Null;
        let (spec, old_spec) = (
            sts.get("spec").unwrap_or(&null),
            old.get("spec").unwrap_or(&null),
        );
        // Ratcheting: a stored template that predates pod spec validation may stay as it is.
        let old_pods_valid = validate_pod_spec(
            old_spec.pointer("/template/spec").unwrap_or(&null),
            &FieldPath::new("spec"),
        )
        .is_empty();
        let mut errs = validate_spec(spec, old_pods_valid);
        let strip = |s: &Value| {
            let mut s = s.as_object().cloned().unwrap_or_default();
            MUTABLE.iter().for_each(|f| drop(s.remove(*f)));
            Value::Object(s)
        };
        if !semantic_eq(Some(&strip(spec)), Some(&strip(old_spec))) {
            errs.push(FieldError::forbidden(
                &FieldPath::new("spec"),
                "updates to statefulset spec for fields other than 'replicas', 'ordinals', \
                 'template', 'updateStrategy', 'persistentVolumeClaimRetentionPolicy' and \
                 'minReadySeconds' are forbidden",
            ));
        }
        errs
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn created() -> Value {
        let mut sts = json!({"metadata": {"name": "db"},
            "spec": {"serviceName": "db", "selector": {"matchLabels": {"app": "db"}},
                     "template": {"metadata": {"labels": {"app": "db"}},
                                  "spec": {"containers": [{"name": "c", "image": "pg:16"}]}},
                     "volumeClaimTemplates": [{"metadata": {"name": "data"},
                                               "spec": {"accessModes": ["ReadWriteOnce"]}}]}});
        StatefulSetStrategy.prepare_for_create(&mut sts);
        sts
    }

    fn errors(errs: Vec<FieldError>) -> Vec<String> {
        errs.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn a_new_statefulset_gets_upstreams_defaults() {
        let sts = created();
        let spec = &sts["spec"];
        assert_eq!(spec["podManagementPolicy"], "OrderedReady");
        assert_eq!(
            spec["updateStrategy"],
            json!({"type": "RollingUpdate", "rollingUpdate": {"partition": 0}})
        );
        assert_eq!(
            spec["persistentVolumeClaimRetentionPolicy"],
            json!({"whenDeleted": "Retain", "whenScaled": "Retain"})
        );
        assert_eq!(spec["replicas"], 1);
        assert_eq!(spec["revisionHistoryLimit"], 10);
        let claim = &spec["volumeClaimTemplates"][0];
        assert_eq!(claim["kind"], "PersistentVolumeClaim");
        assert_eq!(claim["spec"]["volumeMode"], "Filesystem");
        assert_eq!(claim["status"]["phase"], "Pending");
        assert!(StatefulSetStrategy.validate(&sts).is_empty());
    }

    #[test]
    fn invalid_statefulsets_are_refused_with_upstreams_messages() {
        let cases: Vec<crate::strategy::common::Case<&str>> = vec![
            (
                "an unknown pod management policy",
                Box::new(|s| s["spec"]["podManagementPolicy"] = json!("Random")),
                vec![
                    "spec.podManagementPolicy: Invalid value: \"Random\": must be 'OrderedReady' or 'Parallel'",
                ],
            ),
            (
                "a rolling update with OnDelete",
                Box::new(|s| s["spec"]["updateStrategy"]["type"] = json!("OnDelete")),
                vec![
                    "spec.updateStrategy.rollingUpdate: Invalid value: {\"partition\":0}: only allowed for updateStrategy 'RollingUpdate'",
                ],
            ),
            (
                "a negative partition",
                Box::new(|s| s["spec"]["updateStrategy"]["rollingUpdate"]["partition"] = json!(-1)),
                vec![
                    "spec.updateStrategy.rollingUpdate.partition: Invalid value: -1: must be greater than or equal to 0",
                ],
            ),
            (
                "an empty selector",
                Box::new(|s| s["spec"]["selector"] = json!({})),
                vec!["spec.selector: Invalid value: {}: empty selector is invalid for statefulset"],
            ),
            (
                "an unknown retention policy",
                Box::new(|s| {
                    s["spec"]["persistentVolumeClaimRetentionPolicy"]["whenScaled"] = json!("Keep")
                }),
                vec![
                    "spec.persistentVolumeClaimRetentionPolicy.whenScaled: Unsupported value: \"Keep\": supported values: \"Retain\", \"Delete\"",
                ],
            ),
            (
                "a name that is no DNS label",
                Box::new(|s| s["metadata"]["name"] = json!("db.v1")),
                vec!["metadata.name: Invalid value: \"db.v1\": must not contain dots"],
            ),
        ];
        for (name, change, want) in cases {
            let mut sts = created();
            change(&mut sts);
            assert_eq!(errors(StatefulSetStrategy.validate(&sts)), want, "{name}");
        }
    }

    #[test]
    fn updates_may_change_only_replicas_template_and_strategy_fields() {
        let old = created();
        let mut scaled = old.clone();
        scaled["spec"]["replicas"] = json!(3);
        scaled["spec"]["template"]["spec"]["containers"][0]["image"] = json!("pg:17");
        assert!(
            StatefulSetStrategy
                .validate_update(&scaled, &old)
                .is_empty()
        );
        let mut renamed = old.clone();
        renamed["spec"]["serviceName"] = json!("other");
        assert_eq!(
            errors(StatefulSetStrategy.validate_update(&renamed, &old)),
            vec![
                "spec: Forbidden: updates to statefulset spec for fields other than 'replicas', 'ordinals', 'template', 'updateStrategy', 'persistentVolumeClaimRetentionPolicy' and 'minReadySeconds' are forbidden"
            ]
        );
    }
}
