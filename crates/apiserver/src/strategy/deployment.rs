//! Deployments: upstream's defaults (`SetDefaults_Deployment` and the pod template's), the
//! checks of `ValidateDeploymentSpec` and `ValidateDeploymentStrategy`, the immutable selector
//! of `apps/v1`, and the generation rule (spec or annotation changes bump it, because
//! annotations are copied to the ReplicaSets).

use serde_json::{Value, json};
use skiff_apimachinery::validation::{FieldError, FieldPath};

use super::Strategy;
use super::common::{
    int, int_or_percent, int_or_percent_value, nonnegative, not_over_100_percent, object_at,
    required_selector, selector_immutable, semantic_eq, set_default,
};
use super::generic::settle_generation;
use super::replicaset::{default_workload_template, validate_replica_template};

#[derive(Debug)]
pub struct DeploymentStrategy;

fn defaults(d: &mut Value) {
    let spec = object_at(d, "spec");
    set_default(spec, "replicas", json!(1));
    let strategy = object_at(spec, "strategy");
    set_default(strategy, "type", json!("RollingUpdate"));
    if strategy["type"] == "RollingUpdate" {
        let rolling = object_at(strategy, "rollingUpdate");
        set_default(rolling, "maxUnavailable", json!("25%"));
        set_default(rolling, "maxSurge", json!("25%"));
    }
    set_default(spec, "revisionHistoryLimit", json!(10));
    set_default(spec, "progressDeadlineSeconds", json!(600));
    default_workload_template(spec);
}

/// Upstream's `ValidateDeploymentStrategy` and `ValidateRollingUpdateDeployment`.
fn validate_strategy(strategy: Option<&Value>, path: &FieldPath) -> Vec<FieldError> {
    let null = Value::Null;
    let strategy = strategy.unwrap_or(&null);
    let rolling = strategy.get("rollingUpdate").filter(|r| !r.is_null());
    let ru_path = path.child("rollingUpdate");
    let mut errs = Vec::new();
    match strategy.get("type").and_then(Value::as_str).unwrap_or("") {
        "Recreate" => {
            if rolling.is_some() {
                errs.push(FieldError::forbidden(
                    &ru_path,
                    "may not be specified when strategy `type` is 'Recreate'",
                ));
            }
        }
        "RollingUpdate" => match rolling {
            None => errs.push(FieldError::required(
                &ru_path,
                "this should be defaulted and never be nil",
            )),
            Some(ru) => {
                let (unavailable, surge) = (ru.get("maxUnavailable"), ru.get("maxSurge"));
                let unavailable_path = ru_path.child("maxUnavailable");
                errs.extend(int_or_percent(unavailable, &unavailable_path));
                errs.extend(int_or_percent(surge, &ru_path.child("maxSurge")));
                if int_or_percent_value(unavailable) == 0 && int_or_percent_value(surge) == 0 {
                    errs.push(FieldError::invalid(
                        &unavailable_path,
                        unavailable.cloned().unwrap_or(json!(0)),
                        "may not be 0 when `maxSurge` is 0",
                    ));
                }
                errs.extend(not_over_100_percent(unavailable, &unavailable_path));
            }
        },
        _ => errs.push(FieldError::not_supported(
            path,
            strategy.clone(),
            &["Recreate", "RollingUpdate"],
        )),
    }
    errs
}

impl Strategy for DeploymentStrategy {
    fn prepare_for_create(&self, d: &mut Value) {
        defaults(d);
    }

    fn prepare_for_update(&self, d: &mut Value, old: &Value) {
        defaults(d);
        settle_generation(d, old);
        let annotations = |v: &Value| v.pointer("/metadata/annotations").cloned();
        let old_gen = old.pointer("/metadata/generation").and_then(Value::as_i64);
        if let Some(old_gen) = old_gen
            && d.pointer("/metadata/generation").and_then(Value::as_i64) == Some(old_gen)
            && !semantic_eq(annotations(d).as_ref(), annotations(old).as_ref())
        {
            d["metadata"]["generation"] = json!(old_gen + 1);
        }
    }

    fn validate(&self, d: &Value) -> Vec<FieldError> {
        let null = Value::Null;
        let spec = d.get("spec").unwrap_or(&null);
        let path = FieldPath::new("spec");
        let mut errs = nonnegative(spec.get("replicas"), &path.child("replicas"));
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
                spec.get("selector").cloned().unwrap_or(Value::Null),
                "invalid label selector",
            )),
        }
        errs.extend(validate_strategy(
            spec.get("strategy"),
            &path.child("strategy"),
        ));
        let min_ready = spec.get("minReadySeconds");
        errs.extend(nonnegative(min_ready, &path.child("minReadySeconds")));
        errs.extend(nonnegative(
            spec.get("revisionHistoryLimit"),
            &path.child("revisionHistoryLimit"),
        ));
        let deadline_path = path.child("progressDeadlineSeconds");
        if let Some(deadline) = spec.get("progressDeadlineSeconds").and_then(int) {
            errs.extend(nonnegative(Some(&json!(deadline)), &deadline_path));
            if deadline <= min_ready.and_then(int).unwrap_or(0) {
                errs.push(FieldError::invalid(
                    &deadline_path,
                    deadline,
                    "must be greater than minReadySeconds",
                ));
            }
        }
        errs
    }

    fn validate_update(&self, d: &Value, old: &Value) -> Vec<FieldError> {
        let mut errs = self.validate(d);
        errs.extend(selector_immutable(d, old));
        errs
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deployment() -> Value {
        json!({"metadata": {"name": "web", "generation": 1},
               "spec": {"selector": {"matchLabels": {"app": "web"}},
                        "template": {"metadata": {"labels": {"app": "web"}},
                                     "spec": {"containers": [{"name": "c", "image": "nginx:1"}]}}}})
    }

    fn created() -> Value {
        let mut d = deployment();
        DeploymentStrategy.prepare_for_create(&mut d);
        d
    }

    fn errors(errs: Vec<FieldError>) -> Vec<String> {
        errs.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn a_new_deployment_gets_upstreams_defaults() {
        let d = created();
        assert_eq!(d["spec"]["replicas"], 1);
        assert_eq!(
            d["spec"]["strategy"],
            json!({"type": "RollingUpdate",
                   "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"}})
        );
        assert_eq!(d["spec"]["revisionHistoryLimit"], 10);
        assert_eq!(d["spec"]["progressDeadlineSeconds"], 600);
        let pod = &d["spec"]["template"]["spec"];
        assert_eq!(pod["restartPolicy"], "Always");
        assert_eq!(pod["containers"][0]["imagePullPolicy"], "IfNotPresent");
        assert!(DeploymentStrategy.validate(&d).is_empty());
    }

    #[test]
    fn recreate_deployments_get_no_rolling_update_defaults() {
        let mut d = deployment();
        d["spec"]["strategy"] = json!({"type": "Recreate"});
        DeploymentStrategy.prepare_for_create(&mut d);
        assert_eq!(d["spec"]["strategy"], json!({"type": "Recreate"}));
    }

    #[test]
    fn invalid_deployments_are_refused_with_upstreams_messages() {
        let cases: Vec<crate::strategy::common::Case<&str>> = vec![
            (
                "a missing selector",
                Box::new(|d| {
                    d["spec"].as_object_mut().unwrap().remove("selector");
                }),
                vec![
                    "spec.selector: Required value",
                    "spec.template.metadata.labels: Invalid value: {\"app\":\"web\"}: `selector` does not match template `labels`",
                ],
            ),
            (
                "a selector that misses the template",
                Box::new(|d| d["spec"]["selector"]["matchLabels"]["app"] = json!("api")),
                vec![
                    "spec.template.metadata.labels: Invalid value: {\"app\":\"web\"}: `selector` does not match template `labels`",
                ],
            ),
            (
                "a template without containers",
                Box::new(|d| d["spec"]["template"]["spec"]["containers"] = json!([])),
                vec!["spec.template.spec.containers: Required value"],
            ),
            (
                "a rolling update on a Recreate deployment",
                Box::new(|d| d["spec"]["strategy"]["type"] = json!("Recreate")),
                vec![
                    "spec.strategy.rollingUpdate: Forbidden: may not be specified when strategy `type` is 'Recreate'",
                ],
            ),
            (
                "zero surge and zero unavailable",
                Box::new(|d| {
                    d["spec"]["strategy"]["rollingUpdate"] =
                        json!({"maxSurge": 0, "maxUnavailable": "0%"})
                }),
                vec![
                    "spec.strategy.rollingUpdate.maxUnavailable: Invalid value: \"0%\": may not be 0 when `maxSurge` is 0",
                ],
            ),
            (
                "an unknown strategy type",
                Box::new(|d| d["spec"]["strategy"] = json!({"type": "Blue"})),
                vec![
                    "spec.strategy: Unsupported value: {\"type\":\"Blue\"}: supported values: \"Recreate\", \"RollingUpdate\"",
                ],
            ),
            (
                "a deadline below minReadySeconds",
                Box::new(|d| d["spec"]["minReadySeconds"] = json!(600)),
                vec![
                    "spec.progressDeadlineSeconds: Invalid value: 600: must be greater than minReadySeconds",
                ],
            ),
            (
                "negative replicas",
                Box::new(|d| d["spec"]["replicas"] = json!(-2)),
                vec!["spec.replicas: Invalid value: -2: must be greater than or equal to 0"],
            ),
        ];
        for (name, change, want) in cases {
            let mut d = created();
            change(&mut d);
            assert_eq!(errors(DeploymentStrategy.validate(&d)), want, "{name}");
        }
    }

    #[test]
    fn the_selector_is_immutable() {
        let old = created();
        let mut new = old.clone();
        new["spec"]["selector"] = json!({"matchLabels": {"app": "web", "v": "2"}});
        new["spec"]["template"]["metadata"]["labels"]["v"] = json!("2");
        assert_eq!(
            errors(DeploymentStrategy.validate_update(&new, &old)),
            vec![
                "spec.selector: Invalid value: {\"matchLabels\":{\"app\":\"web\",\"v\":\"2\"}}: field is immutable"
            ]
        );
    }

    #[test]
    fn only_spec_or_annotation_changes_bump_the_generation() {
        let old = created();
        // The write path has already bumped it: the update omits defaulted fields.
        let mut same = deployment();
        same["metadata"]["generation"] = json!(2);
        DeploymentStrategy.prepare_for_update(&mut same, &old);
        assert_eq!(same["metadata"]["generation"], 1);
        let mut annotated = old.clone();
        annotated["metadata"]["annotations"] = json!({"note": "x"});
        DeploymentStrategy.prepare_for_update(&mut annotated, &old);
        assert_eq!(annotated["metadata"]["generation"], 2);
    }
}
