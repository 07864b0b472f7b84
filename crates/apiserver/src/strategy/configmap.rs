//! ConfigMaps: upstream's `ValidateConfigMap` (valid keys, no key in both `data` and
//! `binaryData`, at most 1 MiB in all) and `ValidateConfigMapUpdate` (an `immutable: true`
//! ConfigMap keeps its data and stays immutable). Also the shared size limit and immutability
//! check Secrets use.

use base64::Engine as _;
use serde_json::Value;
use skiff_apimachinery::validation::{FieldError, FieldPath, is_config_map_key};

use super::Strategy;
use super::common::semantic_eq;

/// Upstream's `MaxSecretSize`, also the limit of a ConfigMap's data.
pub const MAX_SIZE: usize = 1024 * 1024;

#[derive(Debug)]
pub struct ConfigMapStrategy;

/// The bytes a base64 value of `data`/`binaryData` stands for (0 when it is not base64; the
/// decoder has refused those before validation upstream).
pub fn decoded_len(v: &Value) -> usize {
    let s = v.as_str().unwrap_or("");
    base64::engine::general_purpose::STANDARD
        .decode(s)
        .map_or(0, |b| b.len())
}

/// Keys of a data map that are not valid config keys.
pub fn key_errors(map: Option<&Value>, path: &FieldPath) -> Vec<FieldError> {
    let keys = map.and_then(Value::as_object).into_iter().flatten();
    keys.flat_map(|(key, _)| {
        is_config_map_key(key)
            .into_iter()
            .map(move |msg| FieldError::invalid(&path.key(key), key.as_str(), msg))
    })
    .collect()
}

/// Upstream's update rule for `immutable: true` objects: `fields` (e.g. `data`) and the flag
/// itself may not change.
pub fn immutable_errors(new: &Value, old: &Value, fields: &[&str]) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let locked = |v: &Value| v.get("immutable") == Some(&Value::Bool(true));
    if !locked(old) {
        return errs;
    }
    const DETAIL: &str = "field is immutable when `immutable` is set";
    if !locked(new) {
        errs.push(FieldError::forbidden(&FieldPath::new("immutable"), DETAIL));
    }
    for field in fields {
        if !semantic_eq(new.get(*field), old.get(*field)) {
            errs.push(FieldError::forbidden(&FieldPath::new(*field), DETAIL));
        }
    }
    errs
}

impl Strategy for ConfigMapStrategy {
    fn validate(&self, cm: &Value) -> Vec<FieldError> {
        let data_path = FieldPath::new("data");
        let binary = cm.get("binaryData").and_then(Value::as_object);
        let mut errs = key_errors(cm.get("data"), &data_path);
        let mut total = 0;
        for (key, value) in cm
            .get("data")
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
        {
            if binary.is_some_and(|b| b.contains_key(key)) {
                errs.push(FieldError::invalid(
                    &data_path.key(key),
                    key.as_str(),
                    "duplicate of key present in binaryData",
                ));
            }
            total += value.as_str().map_or(0, str::len);
        }
        errs.extend(key_errors(
            cm.get("binaryData"),
            &FieldPath::new("binaryData"),
        ));
        total += binary
            .into_iter()
            .flatten()
            .map(|(_, v)| decoded_len(v))
            .sum::<usize>();
        if total > MAX_SIZE {
            // Upstream's empty path: the error is about the whole object.
            errs.push(FieldError::too_long(&FieldPath::new(""), MAX_SIZE));
        }
        errs
    }

    fn validate_update(&self, cm: &Value, old: &Value) -> Vec<FieldError> {
        let mut errs = immutable_errors(cm, old, &["data", "binaryData"]);
        errs.extend(self.validate(cm));
        errs
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn errors(errs: Vec<FieldError>) -> Vec<String> {
        errs.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn configmaps_are_validated_as_upstream() {
        let big = "x".repeat(MAX_SIZE);
        let cases = [
            (
                "valid keys",
                json!({"data": {"a.conf": "x", "B_2": "y"}}),
                vec![],
            ),
            (
                "a key with a slash",
                json!({"data": {"a/b": "x"}}),
                vec![
                    "data[a/b]: Invalid value: \"a/b\": a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')",
                ],
            ),
            (
                "a key in both maps",
                json!({"data": {"k": "x"}, "binaryData": {"k": "eA=="}}),
                vec!["data[k]: Invalid value: \"k\": duplicate of key present in binaryData"],
            ),
            (
                "more than a MiB",
                json!({"data": {"a": big}, "binaryData": {"b": "eA=="}}),
                vec!["[]: Too long: may not be more than 1048576 bytes"],
            ),
        ];
        for (name, cm, want) in cases {
            assert_eq!(errors(ConfigMapStrategy.validate(&cm)), want, "{name}");
        }
    }

    #[test]
    fn immutable_configmaps_keep_their_data() {
        let old = json!({"immutable": true, "data": {"a": "1"}});
        let relabeled = json!({"immutable": true, "data": {"a": "1"},
                               "metadata": {"labels": {"x": "y"}}});
        assert!(
            ConfigMapStrategy
                .validate_update(&relabeled, &old)
                .is_empty()
        );
        let changed = json!({"data": {"a": "2"}});
        assert_eq!(
            errors(ConfigMapStrategy.validate_update(&changed, &old)),
            vec![
                "immutable: Forbidden: field is immutable when `immutable` is set",
                "data: Forbidden: field is immutable when `immutable` is set",
            ]
        );
        let mutable = json!({"data": {"a": "1"}});
        assert!(
            ConfigMapStrategy
                .validate_update(&changed, &mutable)
                .is_empty()
        );
    }
}
