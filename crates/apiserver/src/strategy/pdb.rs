//! PodDisruptionBudgets: upstream's `ValidatePodDisruptionBudgetSpec` (minAvailable xor
//! maxUnavailable, each a count or a percent of at most 100%, a valid selector, a known
//! unhealthy pod eviction policy).

use serde_json::Value;
use skiff_apimachinery::validation::{FieldError, FieldPath, validate_label_selector};

use super::Strategy;
use super::common::{int_or_percent, not_over_100_percent};

#[derive(Debug)]
pub struct PodDisruptionBudgetStrategy;

impl Strategy for PodDisruptionBudgetStrategy {
    fn validate(&self, pdb: &Value) -> Vec<FieldError> {
        let path = FieldPath::new("spec");
        let null = Value::Null;
        let spec = pdb.get("spec").unwrap_or(&null);
        let set = |k: &str| spec.get(k).filter(|v| !v.is_null());
        let mut errs = Vec::new();
        if set("minAvailable").is_some() && set("maxUnavailable").is_some() {
            errs.push(FieldError::invalid(
                &path,
                spec.clone(),
                "minAvailable and maxUnavailable cannot be both set",
            ));
        }
        for field in ["minAvailable", "maxUnavailable"] {
            if let Some(v) = set(field) {
                errs.extend(int_or_percent(Some(v), &path.child(field)));
                errs.extend(not_over_100_percent(Some(v), &path.child(field)));
            }
        }
        errs.extend(validate_label_selector(
            spec.get("selector").unwrap_or(&null),
            &path.child("selector"),
        ));
        if let Some(policy) = set("unhealthyPodEvictionPolicy").and_then(Value::as_str)
            && !matches!(policy, "AlwaysAllow" | "IfHealthyBudget")
        {
            errs.push(FieldError::not_supported(
                &path.child("unhealthyPodEvictionPolicy"),
                policy,
                &["AlwaysAllow", "IfHealthyBudget"],
            ));
        }
        errs
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn budgets_are_validated_as_upstream() {
        let cases = [
            (
                json!({"minAvailable": "50%", "selector": {"matchLabels": {"app": "a"}}}),
                vec![],
            ),
            (
                json!({"minAvailable": 1, "maxUnavailable": 1}),
                vec![
                    "spec: Invalid value: {\"maxUnavailable\":1,\"minAvailable\":1}: minAvailable and maxUnavailable cannot be both set",
                ],
            ),
            (
                json!({"maxUnavailable": "150%"}),
                vec!["spec.maxUnavailable: Invalid value: \"150%\": must not be greater than 100%"],
            ),
            (
                json!({"minAvailable": -1}),
                vec!["spec.minAvailable: Invalid value: -1: must be greater than or equal to 0"],
            ),
            (
                json!({"unhealthyPodEvictionPolicy": "Never"}),
                vec![
                    "spec.unhealthyPodEvictionPolicy: Unsupported value: \"Never\": supported values: \"AlwaysAllow\", \"IfHealthyBudget\"",
                ],
            ),
        ];
        for (spec, want) in cases {
            let got: Vec<String> = PodDisruptionBudgetStrategy
                .validate(&json!({"spec": spec}))
                .iter()
                .map(ToString::to_string)
                .collect();
            assert_eq!(got, want, "{spec}");
        }
    }
}
