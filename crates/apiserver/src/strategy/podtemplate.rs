//! PodTemplates: pod defaults inside `template` and upstream's `ValidatePodTemplate` (the
//! template's labels, annotations and pod spec, at `template`).

use serde_json::Value;
use skiff_apimachinery::validation::{FieldError, FieldPath};

use super::Strategy;
use super::common::{default_template, validate_template};

#[derive(Debug)]
pub struct PodTemplateStrategy;

impl Strategy for PodTemplateStrategy {
    fn prepare_for_create(&self, template: &mut Value) {
        default_template(template.get_mut("template"));
    }

    fn prepare_for_update(&self, template: &mut Value, _old: &Value) {
        default_template(template.get_mut("template"));
    }

    fn validate(&self, template: &Value) -> Vec<FieldError> {
        let null = Value::Null;
        validate_template(
            template.get("template").unwrap_or(&null),
            &FieldPath::new("template"),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn templates_get_pod_defaults_and_pod_validation() {
        let mut t = json!({"metadata": {"name": "t"},
                           "template": {"metadata": {"labels": {"app": "a"}},
                                        "spec": {"containers": [{"name": "c", "image": "nginx"}]}}});
        PodTemplateStrategy.prepare_for_create(&mut t);
        assert_eq!(t["template"]["spec"]["restartPolicy"], "Always");
        assert_eq!(t["template"]["spec"]["dnsPolicy"], "ClusterFirst");
        assert!(PodTemplateStrategy.validate(&t).is_empty());
        t["template"]["spec"]["containers"][0]["image"] = json!("");
        let errs: Vec<String> = PodTemplateStrategy
            .validate(&t)
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(errs, ["template.spec.containers[0].image: Required value"]);
    }
}
