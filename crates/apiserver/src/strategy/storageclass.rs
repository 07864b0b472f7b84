//! StorageClasses (`storage.k8s.io/v1`): upstream's defaults (`reclaimPolicy: Delete`,
//! `volumeBindingMode: Immediate`), `ValidateStorageClass` (a qualified provisioner name, known
//! reclaim policy and binding mode, non-empty parameter keys) and `ValidateStorageClassUpdate`
//! (parameters, provisioner, reclaim policy and binding mode are fixed once created).

use serde_json::{Value, json};
use skiff_apimachinery::validation::{FieldError, FieldPath, is_qualified_name};

use super::Strategy;
use super::common::{immutable, str_at};

#[derive(Debug)]
pub struct StorageClassStrategy;

/// Upstream's `supportedReclaimPolicy` of storage classes (no `Recycle`).
const RECLAIM_POLICIES: &[&str] = &["Delete", "Retain"];
/// Upstream's `supportedVolumeBindingModes`.
const BINDING_MODES: &[&str] = &["Immediate", "WaitForFirstConsumer"];

fn defaults(sc: &mut Value) {
    if let Some(m) = sc.as_object_mut() {
        for (field, value) in [
            ("reclaimPolicy", "Delete"),
            ("volumeBindingMode", "Immediate"),
        ] {
            let slot = m.entry(field).or_insert(Value::Null);
            if slot.is_null() {
                *slot = json!(value);
            }
        }
    }
}

impl Strategy for StorageClassStrategy {
    fn prepare_for_create(&self, sc: &mut Value) {
        defaults(sc);
    }

    fn prepare_for_update(&self, sc: &mut Value, _old: &Value) {
        defaults(sc);
    }

    fn validate(&self, sc: &Value) -> Vec<FieldError> {
        let mut errs = Vec::new();
        let provisioner = str_at(sc, "/provisioner");
        let path = FieldPath::new("provisioner");
        if provisioner.is_empty() {
            errs.push(FieldError::required(&path, ""));
        } else {
            errs.extend(
                is_qualified_name(&provisioner.to_lowercase())
                    .into_iter()
                    .map(|msg| FieldError::invalid(&path, provisioner, msg)),
            );
        }
        if let Some(params) = sc.get("parameters").and_then(Value::as_object)
            && params.contains_key("")
        {
            errs.push(FieldError::invalid(
                &FieldPath::new("parameters"),
                "",
                "field can not be empty.",
            ));
        }
        let policy = str_at(sc, "/reclaimPolicy");
        if !policy.is_empty() && !RECLAIM_POLICIES.contains(&policy) {
            errs.push(FieldError::not_supported(
                &FieldPath::new("reclaimPolicy"),
                policy,
                RECLAIM_POLICIES,
            ));
        }
        let path = FieldPath::new("volumeBindingMode");
        match sc.get("volumeBindingMode").and_then(Value::as_str) {
            None => errs.push(FieldError::required(&path, "")),
            Some(mode) if !BINDING_MODES.contains(&mode) => {
                errs.push(FieldError::not_supported(&path, mode, BINDING_MODES));
            }
            Some(_) => {}
        }
        errs
    }

    fn validate_update(&self, sc: &Value, old: &Value) -> Vec<FieldError> {
        let mut errs = self.validate(sc);
        let differs = |field: &str| {
            let norm = |v: &Value| v.get(field).cloned().filter(|v| !v.is_null());
            norm(sc) != norm(old)
        };
        for field in ["parameters", "provisioner", "reclaimPolicy"] {
            if differs(field) {
                errs.push(FieldError::forbidden(
                    &FieldPath::new(field),
                    format!("updates to {field} are forbidden."),
                ));
            }
        }
        errs.extend(immutable(
            sc.get("volumeBindingMode"),
            old.get("volumeBindingMode"),
            &FieldPath::new("volumeBindingMode"),
        ));
        errs
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sc() -> Value {
        let mut sc = json!({"metadata": {"name": "fast"}, "provisioner": "example.com/ssd",
                            "parameters": {"type": "ssd"}});
        StorageClassStrategy.prepare_for_create(&mut sc);
        sc
    }

    fn errors(errs: Vec<FieldError>) -> Vec<String> {
        errs.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn a_new_class_deletes_its_volumes_and_binds_immediately() {
        let sc = sc();
        assert_eq!(sc["reclaimPolicy"], "Delete");
        assert_eq!(sc["volumeBindingMode"], "Immediate");
        assert!(StorageClassStrategy.validate(&sc).is_empty());
    }

    #[test]
    fn validation_cases_read_as_upstream_messages() {
        let cases: Vec<crate::strategy::common::Case<&str>> = vec![
            (
                "no provisioner",
                Box::new(|o| o["provisioner"] = json!("")),
                vec!["provisioner: Required value"],
            ),
            (
                "a provisioner that is not a qualified name",
                Box::new(|o| o["provisioner"] = json!("a/b/c")),
                vec![
                    "provisioner: Invalid value: \"a/b/c\": a qualified name must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')",
                ],
            ),
            (
                "a recycling class",
                Box::new(|o| o["reclaimPolicy"] = json!("Recycle")),
                vec![
                    "reclaimPolicy: Unsupported value: \"Recycle\": supported values: \"Delete\", \"Retain\"",
                ],
            ),
            (
                "an unknown binding mode",
                Box::new(|o| o["volumeBindingMode"] = json!("Later")),
                vec![
                    "volumeBindingMode: Unsupported value: \"Later\": supported values: \"Immediate\", \"WaitForFirstConsumer\"",
                ],
            ),
        ];
        for (name, change, want) in cases {
            let mut obj = sc();
            change(&mut obj);
            assert_eq!(errors(StorageClassStrategy.validate(&obj)), want, "{name}");
        }
    }

    #[test]
    fn parameters_provisioner_and_policies_are_fixed_once_created() {
        let old = sc();
        let mut new = old.clone();
        new["parameters"]["type"] = json!("hdd");
        new["provisioner"] = json!("example.com/hdd");
        new["volumeBindingMode"] = json!("WaitForFirstConsumer");
        new["allowVolumeExpansion"] = json!(true);
        assert_eq!(
            errors(StorageClassStrategy.validate_update(&new, &old)),
            [
                "parameters: Forbidden: updates to parameters are forbidden.",
                "provisioner: Forbidden: updates to provisioner are forbidden.",
                "volumeBindingMode: Invalid value: \"WaitForFirstConsumer\": field is immutable",
            ]
        );
    }
}
