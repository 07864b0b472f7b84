//! Checks the storage kinds share (upstream's `validation.go` helpers for PersistentVolumes and
//! their claims): access modes, storage quantities that must be positive, class names, volume
//! modes, and reading a `storage` quantity for comparisons.

use serde_json::Value;
use skiff_apimachinery::quantity::Quantity;
use skiff_apimachinery::validation::{FieldError, FieldPath, is_dns1123_subdomain};

use super::common::strings;

/// Upstream's `supportedAccessModes`, sorted as `sets.List` gives them in messages.
pub const ACCESS_MODES: &[&str] = &[
    "ReadOnlyMany",
    "ReadWriteMany",
    "ReadWriteOnce",
    "ReadWriteOncePod",
];

/// Upstream's `supportedVolumeModes`.
pub const VOLUME_MODES: &[&str] = &["Block", "Filesystem"];

/// Upstream's `isNotPositiveErrorMsg`.
pub const NOT_POSITIVE: &str = "must be greater than zero";

/// Each access mode is supported, and `ReadWriteOncePod` is not combined with others.
/// `required` is the detail of the error for an empty list (`None`: may be empty).
pub fn validate_access_modes(
    modes: Option<&Value>,
    path: &FieldPath,
    required: Option<&str>,
) -> Vec<FieldError> {
    let modes = strings(modes);
    let mut errs = Vec::new();
    if modes.is_empty()
        && let Some(detail) = required
    {
        errs.push(FieldError::required(path, detail));
    }
    let (mut once_pod, mut other) = (false, false);
    for mode in &modes {
        if !ACCESS_MODES.contains(mode) {
            errs.push(FieldError::not_supported(path, *mode, ACCESS_MODES));
        }
        if *mode == "ReadWriteOncePod" {
            once_pod = true;
        } else {
            other = true;
        }
    }
    if once_pod && other {
        errs.push(FieldError::forbidden(
            path,
            "may not use ReadWriteOncePod with other access modes",
        ));
    }
    errs
}

/// A quantity string, or the decoder's error for one that is not.
pub fn quantity(v: &Value, path: &FieldPath) -> Result<Quantity, FieldError> {
    let text = match v {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        other => other.to_string(),
    };
    Quantity::parse(&text).map_err(|e| FieldError::invalid(path, v.clone(), e.to_string()))
}

/// Upstream's `ValidatePositiveQuantityValue` (a malformed quantity is an error too).
pub fn positive_quantity(v: &Value, path: &FieldPath) -> Vec<FieldError> {
    match quantity(v, path) {
        Err(e) => vec![e],
        Ok(q) if q.milli_value() <= 0 => {
            vec![FieldError::invalid(path, v.clone(), NOT_POSITIVE)]
        }
        Ok(_) => Vec::new(),
    }
}

/// The `storage` quantity of a resource list in thousandths, `None` when absent or malformed.
pub fn storage_millis(list: Option<&Value>) -> Option<i64> {
    let v = list?.get("storage")?;
    quantity(v, &FieldPath::new(""))
        .ok()
        .map(|q| q.milli_value())
}

/// Upstream's `ValidateClassName` of a non-empty class name at `path`.
pub fn validate_class_name(name: Option<&Value>, path: &FieldPath) -> Vec<FieldError> {
    match name.and_then(Value::as_str) {
        Some(n) if !n.is_empty() => is_dns1123_subdomain(n)
            .into_iter()
            .map(|msg| FieldError::invalid(path, n, msg))
            .collect(),
        _ => Vec::new(),
    }
}

/// `volumeMode` is `Block` or `Filesystem` when set.
pub fn validate_volume_mode(mode: Option<&Value>, path: &FieldPath) -> Vec<FieldError> {
    match mode.and_then(Value::as_str) {
        Some(m) if !VOLUME_MODES.contains(&m) => {
            vec![FieldError::not_supported(path, m, VOLUME_MODES)]
        }
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn msgs(errs: Vec<FieldError>) -> Vec<String> {
        errs.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn access_modes_are_known_and_read_write_once_pod_stands_alone() {
        let p = FieldPath::new("spec").child("accessModes");
        assert_eq!(
            msgs(validate_access_modes(
                Some(&json!([])),
                &p,
                Some("at least 1 access mode is required")
            )),
            ["spec.accessModes: Required value: at least 1 access mode is required"]
        );
        assert_eq!(
            msgs(validate_access_modes(
                Some(&json!(["ReadWriteOncePod", "ReadWriteMany", "Sometimes"])),
                &p,
                None
            )),
            [
                "spec.accessModes: Unsupported value: \"Sometimes\": supported values: \"ReadOnlyMany\", \"ReadWriteMany\", \"ReadWriteOnce\", \"ReadWriteOncePod\"",
                "spec.accessModes: Forbidden: may not use ReadWriteOncePod with other access modes",
            ]
        );
    }

    #[test]
    fn storage_quantities_must_be_positive() {
        let p = FieldPath::new("spec").child("resources").key("storage");
        assert!(positive_quantity(&json!("1Gi"), &p).is_empty());
        assert_eq!(
            msgs(positive_quantity(&json!("0"), &p)),
            ["spec.resources[storage]: Invalid value: \"0\": must be greater than zero"]
        );
        assert_eq!(
            msgs(positive_quantity(&json!("-1Gi"), &p)),
            ["spec.resources[storage]: Invalid value: \"-1Gi\": must be greater than zero"]
        );
        assert_eq!(storage_millis(Some(&json!({"storage": "2"}))), Some(2000));
    }
}
