//! ReplicaSets: upstream's defaults (`SetDefaults_ReplicaSet`: one replica, pod template
//! defaults), `ValidateReplicaSetSpec`, the immutable selector of `apps/v1`, and the
//! `status.replicas` field selector. Also the pod template rules Deployments share
//! (`ValidatePodTemplateSpecForReplicaSet`).

use serde_json::{Value, json};
use skiff_apimachinery::labels::Selector;
use skiff_apimachinery::validation::{FieldError, FieldPath};

use super::Strategy;
use super::common::{
    default_template, int_at, nonnegative, object_at, required_selector, selector_immutable,
    selector_mismatch, set_default, validate_long_running_template, validate_template,
};
use super::generic::settle_generation;

#[derive(Debug)]
pub struct ReplicaSetStrategy;

/// Upstream's `ValidatePodTemplateSpecForReplicaSet`: the selector (unless empty) selects the
/// template's labels, the template is a valid pod template whose pods restart `Always` and have
/// no deadline.
pub fn validate_replica_template(
    template: Option<&Value>,
    selector: &Selector,
    path: &FieldPath,
) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if !selector.is_empty() {
        errs.extend(selector_mismatch(selector, template, path));
    }
    let null = Value::Null;
    let template = template.unwrap_or(&null);
    errs.extend(validate_template(template, path));
    errs.extend(validate_long_running_template(template, path, "ReplicaSet"));
    errs
}

/// The template of a workload, created when absent as Go's struct would be, with pod defaults.
pub fn default_workload_template(spec: &mut Value) {
    let template = object_at(spec, "template");
    object_at(template, "spec");
    default_template(Some(template));
}

fn defaults(rs: &mut Value) {
    let spec = object_at(rs, "spec");
    set_default(spec, "replicas", json!(1));
    default_workload_template(spec);
}

impl Strategy for ReplicaSetStrategy {
    fn prepare_for_create(&self, rs: &mut Value) {
        defaults(rs);
    }

    fn prepare_for_update(&self, rs: &mut Value, old: &Value) {
        defaults(rs);
        settle_generation(rs, old);
    }

    fn validate(&self, rs: &Value) -> Vec<FieldError> {
        let null = Value::Null;
        let spec = rs.get("spec").unwrap_or(&null);
        let path = FieldPath::new("spec");
        let mut errs = nonnegative(spec.get("replicas"), &path.child("replicas"));
        errs.extend(nonnegative(
            spec.get("minReadySeconds"),
            &path.child("minReadySeconds"),
        ));
        // Upstream's ReplicaSet message says "deployment" too.
        let (selector_errs, selector) = required_selector(spec, &path, "deployment");
        errs.extend(selector_errs);
        match selector {
            Some(selector) => errs.extend(validate_replica_template(
                spec.get("template"),
                &selector,
                &path.child("template"),
            )),
            None => errs.push(FieldError::invalid(
                &path.child("selector"),
                spec.get("selector").cloned().unwrap_or(null),
                "invalid label selector",
            )),
        }
        errs
    }

    fn validate_update(&self, rs: &Value, old: &Value) -> Vec<FieldError> {
        let mut errs = self.validate(rs);
        errs.extend(selector_immutable(rs, old));
        errs
    }

    fn fields(&self, rs: &Value) -> Vec<(&'static str, String)> {
        let replicas = int_at(rs, "/status/replicas").unwrap_or(0);
        vec![("status.replicas", replicas.to_string())]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rs() -> Value {
        json!({"metadata": {"name": "web"},
               "spec": {"selector": {"matchLabels": {"app": "web"}},
                        "template": {"metadata": {"labels": {"app": "web"}},
                                     "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}})
    }

    fn errors(errs: Vec<FieldError>) -> Vec<String> {
        errs.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn a_new_replicaset_gets_one_replica_and_pod_defaults() {
        let mut obj = rs();
        ReplicaSetStrategy.prepare_for_create(&mut obj);
        assert_eq!(obj["spec"]["replicas"], 1);
        assert_eq!(obj["spec"]["template"]["spec"]["restartPolicy"], "Always");
        assert!(ReplicaSetStrategy.validate(&obj).is_empty());
    }

    #[test]
    fn validation_cases_read_as_upstream_messages() {
        let cases: Vec<crate::strategy::common::Case<&str>> = vec![
            (
                "negative replicas",
                Box::new(|o| o["spec"]["replicas"] = json!(-1)),
                vec!["spec.replicas: Invalid value: -1: must be greater than or equal to 0"],
            ),
            (
                "an empty selector",
                Box::new(|o| o["spec"]["selector"] = json!({})),
                vec!["spec.selector: Invalid value: {}: empty selector is invalid for deployment"],
            ),
            (
                "a restart policy other than Always",
                Box::new(|o| o["spec"]["template"]["spec"]["restartPolicy"] = json!("Never")),
                vec![
                    "spec.template.spec.restartPolicy: Unsupported value: \"Never\": supported values: \"Always\"",
                ],
            ),
            (
                "an active deadline",
                Box::new(|o| o["spec"]["template"]["spec"]["activeDeadlineSeconds"] = json!(5)),
                vec![
                    "spec.template.spec.activeDeadlineSeconds: Forbidden: activeDeadlineSeconds in ReplicaSet is not Supported",
                ],
            ),
        ];
        for (name, change, want) in cases {
            let mut obj = rs();
            ReplicaSetStrategy.prepare_for_create(&mut obj);
            change(&mut obj);
            assert_eq!(errors(ReplicaSetStrategy.validate(&obj)), want, "{name}");
        }
    }

    #[test]
    fn the_selector_may_not_change_and_status_replicas_defaults_to_zero() {
        let mut old = rs();
        ReplicaSetStrategy.prepare_for_create(&mut old);
        let mut new = old.clone();
        new["spec"]["selector"]["matchLabels"]["tier"] = json!("x");
        new["spec"]["template"]["metadata"]["labels"]["tier"] = json!("x");
        assert_eq!(
            errors(ReplicaSetStrategy.validate_update(&new, &old)),
            vec![
                "spec.selector: Invalid value: {\"matchLabels\":{\"app\":\"web\",\"tier\":\"x\"}}: field is immutable"
            ]
        );
        assert_eq!(
            ReplicaSetStrategy.fields(&json!({})),
            vec![("status.replicas", "0".to_string())]
        );
    }
}
