//! HorizontalPodAutoscalers (`autoscaling/v2`): upstream's defaults (`minReplicas: 1`, a CPU
//! utilization target of 80% when no metric is given, the default scale-up and scale-down rules
//! filling a `behavior` that is set) and `ValidateHorizontalPodAutoscalerSpec` (replica bounds,
//! the target reference, each metric's type and source, the scaling rules).

use serde_json::{Map, Value, json};
use skiff_apimachinery::validation::{FieldError, FieldPath};

use super::Strategy;
use super::common::{int, object_at, set_default, str_at};
use super::generic::settle_generation;

#[derive(Debug)]
pub struct HorizontalPodAutoscalerStrategy;

/// Upstream's `autoscaling.DefaultCPUUtilization`.
const DEFAULT_CPU_UTILIZATION: i64 = 80;
/// Metric source types and the field each one fills.
const METRIC_TYPES: &[(&str, &str)] = &[
    ("ContainerResource", "containerResource"),
    ("External", "external"),
    ("Object", "object"),
    ("Pods", "pods"),
    ("Resource", "resource"),
];

/// Fills the unset parts of a scaling rule from upstream's defaults for its direction.
fn default_rules(rules: &mut Value, up: bool) {
    if !rules.is_object() {
        *rules = json!({});
    }
    let (window, policies) = if up {
        (
            0,
            json!([{"type": "Pods", "value": 4, "periodSeconds": 15},
                   {"type": "Percent", "value": 100, "periodSeconds": 15}]),
        )
    } else {
        (
            300,
            json!([{"type": "Percent", "value": 100, "periodSeconds": 15}]),
        )
    };
    set_default(rules, "stabilizationWindowSeconds", json!(window));
    set_default(rules, "selectPolicy", json!("Max"));
    set_default(rules, "policies", policies);
}

fn defaults(hpa: &mut Value) {
    let spec = object_at(hpa, "spec");
    set_default(spec, "minReplicas", json!(1));
    if super::common::is_empty(spec.get("metrics")) {
        spec["metrics"] = json!([{"type": "Resource", "resource": {"name": "cpu",
            "target": {"type": "Utilization", "averageUtilization": DEFAULT_CPU_UTILIZATION}}}]);
    }
    if let Some(behavior) = spec.get_mut("behavior").filter(|b| b.is_object()) {
        default_rules(object_at(behavior, "scaleUp"), true);
        default_rules(object_at(behavior, "scaleDown"), false);
    }
}

/// Upstream's `ValidateCrossVersionObjectReference`.
fn validate_reference(reference: &Value, path: &FieldPath) -> Vec<FieldError> {
    let mut errs = Vec::new();
    for field in ["kind", "name"] {
        let value = str_at(reference, &format!("/{field}"));
        if value.is_empty() {
            errs.push(FieldError::required(&path.child(field), ""));
        } else if value.contains('/') || value.contains('%') || value == "." || value == ".." {
            errs.push(FieldError::invalid(
                &path.child(field),
                value,
                "may not contain '/' or '%', or be '.' or '..'",
            ));
        }
    }
    errs
}

/// The metric's type and the source it names.
fn validate_metric(metric: &Value, path: &FieldPath) -> Vec<FieldError> {
    let kind = str_at(metric, "/type");
    let types: Vec<&str> = METRIC_TYPES.iter().map(|(t, _)| *t).collect();
    let Some((_, field)) = METRIC_TYPES.iter().find(|(t, _)| *t == kind) else {
        if kind.is_empty() {
            return vec![FieldError::required(
                &path.child("type"),
                "must specify a metric source type",
            )];
        }
        return vec![FieldError::not_supported(&path.child("type"), kind, &types)];
    };
    let mut errs = Vec::new();
    for (_, other) in METRIC_TYPES {
        let set = metric.get(*other).is_some_and(|v| !v.is_null());
        if *other == *field && !set {
            errs.push(FieldError::required(
                &path.child(*other),
                "must populate information for the given metric source",
            ));
        } else if *other != *field && set {
            errs.push(FieldError::forbidden(
                &path.child(*other),
                "must populate the given metric source only",
            ));
        }
    }
    let target = path.child(*field).child("target");
    if let Some(utilization) = metric
        .get(*field)
        .and_then(|s| s.pointer("/target/averageUtilization"))
        .and_then(int)
        && utilization <= 0
    {
        errs.push(FieldError::invalid(
            &target.child("averageUtilization"),
            utilization,
            "must be greater than 0",
        ));
    }
    errs
}

fn validate_rules(rules: Option<&Value>, path: &FieldPath) -> Vec<FieldError> {
    let Some(rules) = rules.filter(|r| !r.is_null()) else {
        return Vec::new();
    };
    let mut errs = Vec::new();
    if let Some(window) = rules.get("stabilizationWindowSeconds").and_then(int)
        && !(0..=3600).contains(&window)
    {
        let detail = if window < 0 {
            "must be greater than or equal to zero"
        } else {
            "must be less than or equal to 3600"
        };
        errs.push(FieldError::invalid(
            &path.child("stabilizationWindowSeconds"),
            window,
            detail,
        ));
    }
    let select = str_at(rules, "/selectPolicy");
    let selects = ["Disabled", "Max", "Min"];
    if !select.is_empty() && !selects.contains(&select) {
        errs.push(FieldError::not_supported(
            &path.child("selectPolicy"),
            select,
            &selects,
        ));
    }
    let policies = rules.get("policies").and_then(Value::as_array);
    if policies.is_none_or(Vec::is_empty) {
        errs.push(FieldError::required(
            &path.child("policies"),
            "must specify at least one Policy",
        ));
    }
    for (i, policy) in policies.into_iter().flatten().enumerate() {
        let p = path.child("policies").index(i);
        let kind = str_at(policy, "/type");
        if !matches!(kind, "Pods" | "Percent") {
            errs.push(FieldError::not_supported(
                &p.child("type"),
                kind,
                &["Percent", "Pods"],
            ));
        }
        if policy.get("value").and_then(int).unwrap_or(0) <= 0 {
            errs.push(FieldError::invalid(
                &p.child("value"),
                policy.get("value").cloned().unwrap_or(json!(0)),
                "must be greater than zero",
            ));
        }
        let period = policy.get("periodSeconds").and_then(int).unwrap_or(0);
        if period <= 0 {
            errs.push(FieldError::invalid(
                &p.child("periodSeconds"),
                period,
                "must be greater than zero",
            ));
        } else if period > 1800 {
            errs.push(FieldError::invalid(
                &p.child("periodSeconds"),
                period,
                "must be less than or equal to 1800",
            ));
        }
    }
    errs
}

impl Strategy for HorizontalPodAutoscalerStrategy {
    fn prepare_for_create(&self, hpa: &mut Value) {
        defaults(hpa);
    }

    fn prepare_for_update(&self, hpa: &mut Value, old: &Value) {
        defaults(hpa);
        settle_generation(hpa, old);
    }

    fn validate(&self, hpa: &Value) -> Vec<FieldError> {
        let empty = Value::Object(Map::new());
        let spec = hpa.get("spec").unwrap_or(&empty);
        let path = FieldPath::new("spec");
        let mut errs = Vec::new();
        let min = spec.get("minReplicas").and_then(int);
        if let Some(min) = min
            && min < 1
        {
            errs.push(FieldError::invalid(
                &path.child("minReplicas"),
                min,
                "must be greater than or equal to 1",
            ));
        }
        let max = spec.get("maxReplicas").and_then(int).unwrap_or(0);
        if max < 1 {
            errs.push(FieldError::invalid(
                &path.child("maxReplicas"),
                max,
                "must be greater than 0",
            ));
        }
        if let Some(min) = min
            && max < min
        {
            errs.push(FieldError::invalid(
                &path.child("maxReplicas"),
                max,
                "must be greater than or equal to `minReplicas`",
            ));
        }
        errs.extend(validate_reference(
            spec.get("scaleTargetRef").unwrap_or(&empty),
            &path.child("scaleTargetRef"),
        ));
        for (i, metric) in spec
            .get("metrics")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .enumerate()
        {
            errs.extend(validate_metric(metric, &path.child("metrics").index(i)));
        }
        let behavior = path.child("behavior");
        for (field, ptr) in [
            ("scaleUp", "/behavior/scaleUp"),
            ("scaleDown", "/behavior/scaleDown"),
        ] {
            errs.extend(validate_rules(spec.pointer(ptr), &behavior.child(field)));
        }
        errs
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hpa() -> Value {
        json!({"metadata": {"name": "web"},
               "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment",
                                           "name": "web"},
                        "maxReplicas": 5}})
    }

    fn created() -> Value {
        let mut obj = hpa();
        HorizontalPodAutoscalerStrategy.prepare_for_create(&mut obj);
        obj
    }

    fn errors(errs: Vec<FieldError>) -> Vec<String> {
        errs.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn a_new_autoscaler_targets_80_percent_cpu_from_one_replica() {
        let obj = created();
        assert_eq!(obj["spec"]["minReplicas"], 1);
        assert_eq!(
            obj["spec"]["metrics"],
            json!([{"type": "Resource", "resource": {"name": "cpu",
                    "target": {"type": "Utilization", "averageUtilization": 80}}}])
        );
        assert!(obj["spec"].get("behavior").is_none());
        assert!(HorizontalPodAutoscalerStrategy.validate(&obj).is_empty());
    }

    #[test]
    fn a_set_behavior_gets_the_default_rules() {
        let mut obj = hpa();
        obj["spec"]["behavior"] = json!({"scaleDown": {"stabilizationWindowSeconds": 60}});
        HorizontalPodAutoscalerStrategy.prepare_for_create(&mut obj);
        assert_eq!(
            obj["spec"]["behavior"],
            json!({"scaleUp": {"stabilizationWindowSeconds": 0, "selectPolicy": "Max",
                               "policies": [{"type": "Pods", "value": 4, "periodSeconds": 15},
                                            {"type": "Percent", "value": 100, "periodSeconds": 15}]},
                   "scaleDown": {"stabilizationWindowSeconds": 60, "selectPolicy": "Max",
                                 "policies": [{"type": "Percent", "value": 100, "periodSeconds": 15}]}})
        );
    }

    #[test]
    fn validation_cases_read_as_upstream_messages() {
        let cases: Vec<crate::strategy::common::Case<&str>> = vec![
            (
                "no replicas allowed",
                Box::new(|o| o["spec"]["maxReplicas"] = json!(0)),
                vec![
                    "spec.maxReplicas: Invalid value: 0: must be greater than 0",
                    "spec.maxReplicas: Invalid value: 0: must be greater than or equal to `minReplicas`",
                ],
            ),
            (
                "zero minimum",
                Box::new(|o| o["spec"]["minReplicas"] = json!(0)),
                vec!["spec.minReplicas: Invalid value: 0: must be greater than or equal to 1"],
            ),
            (
                "no target",
                Box::new(|o| o["spec"]["scaleTargetRef"] = json!({})),
                vec![
                    "spec.scaleTargetRef.kind: Required value",
                    "spec.scaleTargetRef.name: Required value",
                ],
            ),
            (
                "a metric without its source",
                Box::new(|o| o["spec"]["metrics"] = json!([{"type": "Pods"}])),
                vec![
                    "spec.metrics[0].pods: Required value: must populate information for the given metric source",
                ],
            ),
            (
                "an unknown metric type",
                Box::new(|o| o["spec"]["metrics"] = json!([{"type": "Magic"}])),
                vec![
                    "spec.metrics[0].type: Unsupported value: \"Magic\": supported values: \"ContainerResource\", \"External\", \"Object\", \"Pods\", \"Resource\"",
                ],
            ),
        ];
        for (name, change, want) in cases {
            let mut obj = created();
            change(&mut obj);
            assert_eq!(
                errors(HorizontalPodAutoscalerStrategy.validate(&obj)),
                want,
                "{name}"
            );
        }
    }
}
