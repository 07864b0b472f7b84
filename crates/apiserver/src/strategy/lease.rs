//! Leases: upstream's `ValidateLeaseSpec` (a positive duration, non-negative transitions, and a
//! preferred holder only with a strategy).

use serde_json::Value;
use skiff_apimachinery::validation::{FieldError, FieldPath};

use super::Strategy;
use super::common::int;

#[derive(Debug)]
pub struct LeaseStrategy;

impl Strategy for LeaseStrategy {
    fn validate(&self, lease: &Value) -> Vec<FieldError> {
        let path = FieldPath::new("spec");
        let mut errs = Vec::new();
        let spec = lease.get("spec").unwrap_or(&Value::Null);
        if let Some(d) = spec.get("leaseDurationSeconds").and_then(int)
            && d <= 0
        {
            errs.push(FieldError::invalid(
                &path.child("leaseDurationSeconds"),
                d,
                "must be greater than 0",
            ));
        }
        if let Some(t) = spec.get("leaseTransitions").and_then(int)
            && t < 0
        {
            errs.push(FieldError::invalid(
                &path.child("leaseTransitions"),
                t,
                "must be greater than or equal to 0",
            ));
        }
        let set = |k: &str| {
            spec.get(k)
                .and_then(Value::as_str)
                .is_some_and(|s| !s.is_empty())
        };
        if set("preferredHolder") && !set("strategy") {
            errs.push(FieldError::forbidden(
                &path.child("preferredHolder"),
                "may only be specified if `strategy` is defined",
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
    fn lease_specs_are_validated_as_upstream() {
        let cases = [
            (
                json!({"holderIdentity": "a", "leaseDurationSeconds": 15}),
                vec![],
            ),
            (
                json!({"leaseDurationSeconds": 0}),
                vec!["spec.leaseDurationSeconds: Invalid value: 0: must be greater than 0"],
            ),
            (
                json!({"leaseTransitions": -1}),
                vec![
                    "spec.leaseTransitions: Invalid value: -1: must be greater than or equal to 0",
                ],
            ),
            (
                json!({"preferredHolder": "b"}),
                vec![
                    "spec.preferredHolder: Forbidden: may only be specified if `strategy` is defined",
                ],
            ),
        ];
        for (spec, want) in cases {
            let got: Vec<String> = LeaseStrategy
                .validate(&json!({"spec": spec}))
                .iter()
                .map(ToString::to_string)
                .collect();
            assert_eq!(got, want, "{spec}");
        }
    }
}
