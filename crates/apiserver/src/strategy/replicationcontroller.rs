//! ReplicationControllers: upstream's defaults (`SetDefaults_ReplicationController`: the
//! selector and the object's labels from the template's labels when unset, one replica, pod
//! template defaults), `ValidateReplicationControllerSpec` (a non-empty selector that selects the
//! template, a long-running pod template) and the `status.replicas` field selector. Unlike a
//! ReplicaSet's, the selector may change.

use serde_json::{Value, json};
use skiff_apimachinery::labels::Selector;
use skiff_apimachinery::validation::{FieldError, FieldPath};

use super::Strategy;
use super::common::{
    default_template, int_at, is_empty, nonnegative, object_at, set_default,
    validate_long_running_template, validate_template,
};
use super::generic::settle_generation;

#[derive(Debug)]
pub struct ReplicationControllerStrategy;

fn defaults(rc: &mut Value) {
    let labels = rc
        .pointer("/spec/template/metadata/labels")
        .filter(|l| l.is_object())
        .cloned();
    if let Some(labels) = labels {
        if is_empty(rc.pointer("/spec/selector")) {
            object_at(rc, "spec")["selector"] = labels.clone();
        }
        if is_empty(rc.pointer("/metadata/labels")) {
            object_at(rc, "metadata")["labels"] = labels;
        }
    }
    let spec = object_at(rc, "spec");
    set_default(spec, "replicas", json!(1));
    default_template(spec.get_mut("template").filter(|t| t.is_object()));
}

/// The selector of a label map (`labels.Set(selector).AsSelector()`).
fn map_selector(selector: Option<&Value>) -> Selector {
    Selector::from_set(
        selector
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
            .map(|(k, v)| (k.clone(), v.as_str().unwrap_or("").to_string())),
    )
}

impl Strategy for ReplicationControllerStrategy {
    fn prepare_for_create(&self, rc: &mut Value) {
        defaults(rc);
    }

    fn prepare_for_update(&self, rc: &mut Value, old: &Value) {
        defaults(rc);
        settle_generation(rc, old);
    }

    fn validate(&self, rc: &Value) -> Vec<FieldError> {
        let null = Value::Null;
        let spec = rc.get("spec").unwrap_or(&null);
        let path = FieldPath::new("spec");
        let mut errs = nonnegative(spec.get("minReadySeconds"), &path.child("minReadySeconds"));
        if is_empty(spec.get("selector")) {
            errs.push(FieldError::required(&path.child("selector"), ""));
        }
        errs.extend(nonnegative(spec.get("replicas"), &path.child("replicas")));
        let template_path = path.child("template");
        match spec.get("template").filter(|t| !t.is_null()) {
            None => errs.push(FieldError::required(&template_path, "")),
            Some(template) => {
                let selector = map_selector(spec.get("selector"));
                let labels = template
                    .pointer("/metadata/labels")
                    .cloned()
                    .unwrap_or(Value::Null);
                if !selector.is_empty() && !selector.matches(&labels) {
                    errs.push(FieldError::invalid(
                        &template_path.child("metadata").child("labels"),
                        labels,
                        "`selector` does not match template `labels`",
                    ));
                }
                errs.extend(validate_template(template, &template_path));
                errs.extend(validate_long_running_template(
                    template,
                    &template_path,
                    "ReplicationController",
                ));
            }
        }
        errs
    }

    fn fields(&self, rc: &Value) -> Vec<(&'static str, String)> {
        let replicas = int_at(rc, "/status/replicas").unwrap_or(0);
        vec![("status.replicas", replicas.to_string())]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rc() -> Value {
        json!({"metadata": {"name": "web"},
               "spec": {"template": {"metadata": {"labels": {"app": "web"}},
                                     "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}})
    }

    fn errors(errs: Vec<FieldError>) -> Vec<String> {
        errs.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn the_selector_and_labels_default_to_the_template_labels() {
        let mut obj = rc();
        ReplicationControllerStrategy.prepare_for_create(&mut obj);
        assert_eq!(obj["spec"]["selector"], json!({"app": "web"}));
        assert_eq!(obj["metadata"]["labels"], json!({"app": "web"}));
        assert_eq!(obj["spec"]["replicas"], 1);
        assert_eq!(obj["spec"]["template"]["spec"]["restartPolicy"], "Always");
        assert!(ReplicationControllerStrategy.validate(&obj).is_empty());
    }

    #[test]
    fn validation_cases_read_as_upstream_messages() {
        let cases: Vec<crate::strategy::common::Case<&str>> = vec![
            (
                "a selector that misses the template",
                Box::new(|o| o["spec"]["selector"] = json!({"app": "db"})),
                vec![
                    "spec.template.metadata.labels: Invalid value: {\"app\":\"web\"}: `selector` does not match template `labels`",
                ],
            ),
            (
                "negative replicas",
                Box::new(|o| o["spec"]["replicas"] = json!(-2)),
                vec!["spec.replicas: Invalid value: -2: must be greater than or equal to 0"],
            ),
            (
                "no template",
                Box::new(|o| {
                    o["spec"].as_object_mut().unwrap().remove("template");
                }),
                vec!["spec.template: Required value"],
            ),
            (
                "pods that stop",
                Box::new(|o| o["spec"]["template"]["spec"]["restartPolicy"] = json!("OnFailure")),
                vec![
                    "spec.template.spec.restartPolicy: Unsupported value: \"OnFailure\": supported values: \"Always\"",
                ],
            ),
        ];
        for (name, change, want) in cases {
            let mut obj = rc();
            ReplicationControllerStrategy.prepare_for_create(&mut obj);
            change(&mut obj);
            assert_eq!(
                errors(ReplicationControllerStrategy.validate(&obj)),
                want,
                "{name}"
            );
        }
        let mut bare = json!({"metadata": {"name": "x"}, "spec": {}});
        ReplicationControllerStrategy.prepare_for_create(&mut bare);
        assert_eq!(
            errors(ReplicationControllerStrategy.validate(&bare)),
            [
                "spec.selector: Required value",
                "spec.template: Required value"
            ]
        );
    }
}
