//! RuntimeClasses (`node.k8s.io/v1`): upstream's `ValidateRuntimeClass` (the handler is a DNS
//! label, fixed once created; non-negative overhead quantities).

use serde_json::Value;
use skiff_apimachinery::validation::{FieldError, FieldPath};

use super::Strategy;
use super::common::{NEGATIVE, dns1123_label, immutable, str_at};
use super::volume::quantity;

#[derive(Debug)]
pub struct RuntimeClassStrategy;

impl Strategy for RuntimeClassStrategy {
    fn validate(&self, class: &Value) -> Vec<FieldError> {
        let mut errs = dns1123_label(str_at(class, "/handler"), &FieldPath::new("handler"));
        let overhead = FieldPath::new("overhead").child("podFixed");
        for (resource, value) in class
            .pointer("/overhead/podFixed")
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
        {
            let path = overhead.key(resource);
            match quantity(value, &path) {
                Err(e) => errs.push(e),
                Ok(q) if q.milli_value() < 0 => {
                    errs.push(FieldError::invalid(&path, value.clone(), NEGATIVE));
                }
                Ok(_) => {}
            }
        }
        errs
    }

    fn validate_update(&self, class: &Value, old: &Value) -> Vec<FieldError> {
        let mut errs = self.validate(class);
        errs.extend(immutable(
            class.get("handler"),
            old.get("handler"),
            &FieldPath::new("handler"),
        ));
        errs
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_handler_is_a_dns_label_that_never_changes() {
        let class = json!({"metadata": {"name": "gvisor"}, "handler": "runsc"});
        assert!(RuntimeClassStrategy.validate(&class).is_empty());
        let bad = json!({"handler": "Run_SC", "overhead": {"podFixed": {"memory": "-1Mi"}}});
        let errs: Vec<String> = RuntimeClassStrategy
            .validate(&bad)
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(errs.len(), 2, "{errs:?}");
        assert!(
            errs[0].starts_with("handler: Invalid value: \"Run_SC\": a lowercase RFC 1123 label")
        );
        assert_eq!(
            errs[1],
            "overhead.podFixed[memory]: Invalid value: \"-1Mi\": must be greater than or equal to 0"
        );
        let mut changed = class.clone();
        changed["handler"] = json!("kata");
        assert_eq!(
            RuntimeClassStrategy.validate_update(&changed, &class)[0].to_string(),
            "handler: Invalid value: \"kata\": field is immutable"
        );
    }
}
