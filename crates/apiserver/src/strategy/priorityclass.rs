//! PriorityClasses: `preemptionPolicy` defaults to PreemptLowerPriority, upstream's
//! `ValidatePriorityClass` (user values at most one billion, `system-` names only for the two
//! system classes with their values) and the update rule that value and preemption policy never
//! change. (Only one `globalDefault` is the Priority admission plugin's rule, not this one.)

use serde_json::{Value, json};
use skiff_apimachinery::validation::{FieldError, FieldPath};

use super::Strategy;
use super::common::{immutable, int, set_default, str_at};

/// Upstream's `HighestUserDefinablePriority`.
pub const HIGHEST_USER_PRIORITY: i64 = 1_000_000_000;
/// Upstream's `SystemCriticalPriority`.
const SYSTEM_CRITICAL: i64 = 2 * HIGHEST_USER_PRIORITY;
/// The built-in classes (name, value), which the API server creates on first start.
pub const SYSTEM_CLASSES: [(&str, i64); 2] = [
    ("system-node-critical", SYSTEM_CRITICAL + 1000),
    ("system-cluster-critical", SYSTEM_CRITICAL),
];

#[derive(Debug)]
pub struct PriorityClassStrategy;

/// Upstream's `IsKnownSystemPriorityClass`; `Err` holds its reason.
fn known_system_class(name: &str, value: i64, global_default: bool) -> Result<(), String> {
    match SYSTEM_CLASSES.iter().find(|(n, _)| *n == name) {
        None => Err(format!("{name} is not a known system priority class")),
        Some((_, v)) if *v != value => Err(format!("value of {name} PriorityClass must be {v}")),
        Some(_) if global_default => Err(format!(
            "globalDefault of {name} PriorityClass must be false"
        )),
        Some(_) => Ok(()),
    }
}

impl Strategy for PriorityClassStrategy {
    fn prepare_for_create(&self, pc: &mut Value) {
        set_default(pc, "preemptionPolicy", json!("PreemptLowerPriority"));
    }

    fn prepare_for_update(&self, pc: &mut Value, _old: &Value) {
        set_default(pc, "preemptionPolicy", json!("PreemptLowerPriority"));
    }

    fn validate(&self, pc: &Value) -> Vec<FieldError> {
        let mut errs = Vec::new();
        let name = str_at(pc, "/metadata/name");
        let value = pc.get("value").and_then(int).unwrap_or(0);
        let global_default = pc.get("globalDefault") == Some(&json!(true));
        if name.starts_with("system-") {
            if let Err(why) = known_system_class(name, value, global_default) {
                errs.push(FieldError::forbidden(
                    &FieldPath::new("metadata").child("name"),
                    format!(
                        "priority class names with 'system-' prefix are reserved for system use \
                         only. error: {why}"
                    ),
                ));
            }
        } else if value > HIGHEST_USER_PRIORITY {
            errs.push(FieldError::forbidden(
                &FieldPath::new("value"),
                format!(
                    "maximum allowed value of a user defined priority is {HIGHEST_USER_PRIORITY}"
                ),
            ));
        }
        let policy_path = FieldPath::new("preemptionPolicy");
        match pc.get("preemptionPolicy").and_then(Value::as_str) {
            None | Some("PreemptLowerPriority" | "Never") => {}
            Some("") => errs.push(FieldError::required(&policy_path, "")),
            Some(other) => errs.push(FieldError::not_supported(
                &policy_path,
                other,
                &["PreemptLowerPriority", "Never"],
            )),
        }
        errs
    }

    fn validate_update(&self, pc: &Value, old: &Value) -> Vec<FieldError> {
        let mut errs = Vec::new();
        let value = |v: &Value| v.get("value").and_then(int).unwrap_or(0);
        if value(pc) != value(old) {
            errs.push(FieldError::forbidden(
                &FieldPath::new("value"),
                "may not be changed in an update.",
            ));
        }
        errs.extend(immutable(
            pc.get("preemptionPolicy"),
            old.get("preemptionPolicy"),
            &FieldPath::new("preemptionPolicy"),
        ));
        errs
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn errors(errs: Vec<FieldError>) -> Vec<String> {
        errs.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn preemption_policy_defaults_to_preempt_lower_priority() {
        let mut pc = json!({"metadata": {"name": "high"}, "value": 1000});
        PriorityClassStrategy.prepare_for_create(&mut pc);
        assert_eq!(pc["preemptionPolicy"], "PreemptLowerPriority");
        assert!(PriorityClassStrategy.validate(&pc).is_empty());
    }

    #[test]
    fn priority_classes_are_validated_as_upstream() {
        let cases = [
            (
                json!({"metadata": {"name": "system-node-critical"}, "value": 2_000_001_000i64}),
                vec![],
            ),
            (
                json!({"metadata": {"name": "huge"}, "value": 1_000_000_001i64}),
                vec![
                    "value: Forbidden: maximum allowed value of a user defined priority is 1000000000",
                ],
            ),
            (
                json!({"metadata": {"name": "system-mine"}, "value": 5}),
                vec![
                    "metadata.name: Forbidden: priority class names with 'system-' prefix are reserved for system use only. error: system-mine is not a known system priority class",
                ],
            ),
            (
                json!({"metadata": {"name": "p"}, "value": 1, "preemptionPolicy": "Always"}),
                vec![
                    "preemptionPolicy: Unsupported value: \"Always\": supported values: \"PreemptLowerPriority\", \"Never\"",
                ],
            ),
        ];
        for (pc, want) in cases {
            assert_eq!(errors(PriorityClassStrategy.validate(&pc)), want, "{pc}");
        }
    }

    #[test]
    fn value_and_preemption_policy_are_immutable() {
        let old = json!({"value": 10, "preemptionPolicy": "Never"});
        let new = json!({"value": 11, "preemptionPolicy": "PreemptLowerPriority"});
        assert_eq!(
            errors(PriorityClassStrategy.validate_update(&new, &old)),
            vec![
                "value: Forbidden: may not be changed in an update.",
                "preemptionPolicy: Invalid value: \"PreemptLowerPriority\": field is immutable",
            ]
        );
    }
}
