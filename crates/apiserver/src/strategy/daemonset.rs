//! DaemonSets: upstream's defaults (`SetDefaults_DaemonSet`: RollingUpdate with maxUnavailable
//! 1 and maxSurge 0, ten revisions, pod template defaults), `ValidateDaemonSetSpec`, the
//! immutable selector of `apps/v1`, and the template generation that `apps/v1` shows as the
//! `deprecated.daemonset.template.generation` annotation (1 on create, +1 per template change).

use serde_json::{Value, json};
use skiff_apimachinery::validation::{self, FieldError, FieldPath};

use super::Strategy;
use super::common::{
    as_selector, int_or_percent, int_or_percent_value, is_empty, nonnegative, not_over_100_percent,
    object_at, selector_immutable, selector_mismatch, semantic_eq, set_default,
    validate_long_running_template, validate_template,
};
use super::generic::settle_generation;
use super::replicaset::default_workload_template;

/// The annotation carrying the internal `spec.templateGeneration` in `apps/v1`.
pub const TEMPLATE_GENERATION: &str = "deprecated.daemonset.template.generation";

#[derive(Debug)]
pub struct DaemonSetStrategy;

fn defaults(ds: &mut Value) {
    let spec = object_at(ds, "spec");
    let strategy = object_at(spec, "updateStrategy");
    set_default(strategy, "type", json!("RollingUpdate"));
    if strategy["type"] == "RollingUpdate" {
        let rolling = object_at(strategy, "rollingUpdate");
        set_default(rolling, "maxUnavailable", json!(1));
        set_default(rolling, "maxSurge", json!(0));
    }
    set_default(spec, "revisionHistoryLimit", json!(10));
    default_workload_template(spec);
}

fn template_generation(ds: &Value) -> Option<i64> {
    ds.pointer("/metadata/annotations")
        .and_then(|a| a.get(TEMPLATE_GENERATION))
        .and_then(Value::as_str)
        .and_then(|s| s.parse().ok())
}

fn set_template_generation(ds: &mut Value, generation: i64) {
    let annotations = object_at(object_at(ds, "metadata"), "annotations");
    annotations[TEMPLATE_GENERATION] = json!(generation.to_string());
}

/// Upstream's `ValidateRollingUpdateDaemonSet`: exactly one of surge and unavailability.
fn validate_rolling_update(ru: &Value, path: &FieldPath) -> Vec<FieldError> {
    let (unavailable, surge) = (ru.get("maxUnavailable"), ru.get("maxSurge"));
    let (unavailable_path, surge_path) = (path.child("maxUnavailable"), path.child("maxSurge"));
    let mut errs = int_or_percent(unavailable, &unavailable_path);
    errs.extend(int_or_percent(surge, &surge_path));
    errs.extend(not_over_100_percent(unavailable, &unavailable_path));
    errs.extend(not_over_100_percent(surge, &surge_path));
    match (
        int_or_percent_value(unavailable) != 0,
        int_or_percent_value(surge) != 0,
    ) {
        (true, true) => errs.push(FieldError::invalid(
            &surge_path,
            surge.cloned().unwrap_or(Value::Null),
            "may not be set when maxUnavailable is non-zero",
        )),
        (false, false) => errs.push(FieldError::required(
            &unavailable_path,
            "cannot be 0 when maxSurge is 0",
        )),
        _ => {}
    }
    errs
}

fn validate_update_strategy(strategy: &Value, path: &FieldPath) -> Vec<FieldError> {
    match strategy.get("type").and_then(Value::as_str).unwrap_or("") {
        "OnDelete" => Vec::new(),
        "RollingUpdate" => match strategy.get("rollingUpdate").filter(|r| !r.is_null()) {
            None => vec![FieldError::required(&path.child("rollingUpdate"), "")],
            Some(ru) => validate_rolling_update(ru, &path.child("rollingUpdate")),
        },
        _ => vec![FieldError::not_supported(
            path,
            strategy.clone(),
            &["RollingUpdate", "OnDelete"],
        )],
    }
}

impl Strategy for DaemonSetStrategy {
    fn prepare_for_create(&self, ds: &mut Value) {
        defaults(ds);
        let generation = template_generation(ds).filter(|g| *g >= 1).unwrap_or(1);
        set_template_generation(ds, generation);
    }

    fn prepare_for_update(&self, ds: &mut Value, old: &Value) {
        defaults(ds);
        settle_generation(ds, old);
        let changed = !semantic_eq(ds.pointer("/spec/template"), old.pointer("/spec/template"));
        // A stored DaemonSet without the annotation predates it: count it as generation 1.
        let generation = template_generation(old).unwrap_or(1) + i64::from(changed);
        set_template_generation(ds, generation);
    }

    fn validate(&self, ds: &Value) -> Vec<FieldError> {
        let null = Value::Null;
        let spec = ds.get("spec").unwrap_or(&null);
        let path = FieldPath::new("spec");
        let selector_path = path.child("selector");
        let template_path = path.child("template");
        let raw = spec.get("selector").filter(|s| !s.is_null());
        let mut errs = validation::validate_label_selector(raw.unwrap_or(&null), &selector_path);
        if let Some(selector) = as_selector(raw) {
            errs.extend(selector_mismatch(
                &selector,
                spec.get("template"),
                &template_path,
            ));
        }
        if let Some(sel) = raw
            && is_empty(sel.get("matchLabels"))
            && is_empty(sel.get("matchExpressions"))
        {
            errs.push(FieldError::invalid(
                &selector_path,
                sel.clone(),
                "empty selector is invalid for daemonset",
            ));
        }
        let template = spec.get("template").unwrap_or(&null);
        errs.extend(validate_template(template, &template_path));
        errs.extend(validate_long_running_template(
            template,
            &template_path,
            "DaemonSet",
        ));
        errs.extend(nonnegative(
            spec.get("minReadySeconds"),
            &path.child("minReadySeconds"),
        ));
        errs.extend(validate_update_strategy(
            spec.get("updateStrategy").unwrap_or(&null),
            &path.child("updateStrategy"),
        ));
        errs.extend(nonnegative(
            spec.get("revisionHistoryLimit"),
            &path.child("revisionHistoryLimit"),
        ));
        errs
    }

    fn validate_update(&self, ds: &Value, old: &Value) -> Vec<FieldError> {
        let mut errs = self.validate(ds);
        errs.extend(selector_immutable(ds, old));
        errs
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn created() -> Value {
        let mut ds = json!({"metadata": {"name": "agent", "generation": 1},
            "spec": {"selector": {"matchLabels": {"app": "agent"}},
                     "template": {"metadata": {"labels": {"app": "agent"}},
                                  "spec": {"containers": [{"name": "c", "image": "agent:1"}]}}}});
        DaemonSetStrategy.prepare_for_create(&mut ds);
        ds
    }

    fn errors(errs: Vec<FieldError>) -> Vec<String> {
        errs.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn a_new_daemonset_gets_upstreams_defaults_and_template_generation_one() {
        let ds = created();
        assert_eq!(
            ds["spec"]["updateStrategy"],
            json!({"type": "RollingUpdate",
                   "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}})
        );
        assert_eq!(ds["spec"]["revisionHistoryLimit"], 10);
        assert_eq!(ds["metadata"]["annotations"][TEMPLATE_GENERATION], "1");
        assert!(DaemonSetStrategy.validate(&ds).is_empty());
    }

    #[test]
    fn template_changes_bump_the_template_generation() {
        let old = created();
        let mut relabeled = old.clone();
        relabeled["metadata"]["labels"] = json!({"team": "a"});
        DaemonSetStrategy.prepare_for_update(&mut relabeled, &old);
        assert_eq!(
            relabeled["metadata"]["annotations"][TEMPLATE_GENERATION],
            "1"
        );
        let mut new_image = old.clone();
        new_image["spec"]["template"]["spec"]["containers"][0]["image"] = json!("agent:2");
        DaemonSetStrategy.prepare_for_update(&mut new_image, &old);
        assert_eq!(
            new_image["metadata"]["annotations"][TEMPLATE_GENERATION],
            "2"
        );
    }

    #[test]
    fn invalid_daemonsets_are_refused_with_upstreams_messages() {
        let cases: Vec<crate::strategy::common::Case<&str>> = vec![
            (
                "no selector",
                Box::new(|d| drop(d["spec"].as_object_mut().unwrap().remove("selector"))),
                vec![
                    "spec.template.metadata.labels: Invalid value: {\"app\":\"agent\"}: `selector` does not match template `labels`",
                ],
            ),
            (
                "surge and unavailability together",
                Box::new(|d| {
                    d["spec"]["updateStrategy"]["rollingUpdate"]["maxSurge"] = json!("10%")
                }),
                vec![
                    "spec.updateStrategy.rollingUpdate.maxSurge: Invalid value: \"10%\": may not be set when maxUnavailable is non-zero",
                ],
            ),
            (
                "neither surge nor unavailability",
                Box::new(|d| {
                    d["spec"]["updateStrategy"]["rollingUpdate"]["maxUnavailable"] = json!(0)
                }),
                vec![
                    "spec.updateStrategy.rollingUpdate.maxUnavailable: Required value: cannot be 0 when maxSurge is 0",
                ],
            ),
            (
                "an unknown strategy",
                Box::new(|d| d["spec"]["updateStrategy"] = json!({"type": "Never"})),
                vec![
                    "spec.updateStrategy: Unsupported value: {\"type\":\"Never\"}: supported values: \"RollingUpdate\", \"OnDelete\"",
                ],
            ),
        ];
        for (name, change, want) in cases {
            let mut ds = created();
            change(&mut ds);
            assert_eq!(errors(DaemonSetStrategy.validate(&ds)), want, "{name}");
        }
    }

    #[test]
    fn the_selector_is_immutable() {
        let old = created();
        let mut new = old.clone();
        new["spec"]["selector"]["matchLabels"] = json!({"app": "other"});
        new["spec"]["template"]["metadata"]["labels"] = json!({"app": "other"});
        assert_eq!(
            errors(DaemonSetStrategy.validate_update(&new, &old)),
            vec![
                "spec.selector: Invalid value: {\"matchLabels\":{\"app\":\"other\"}}: field is immutable"
            ]
        );
    }
}
