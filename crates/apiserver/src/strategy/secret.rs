//! Secrets: `stringData` merged into `data` (as the `v1` conversion does, so it is never
//! stored), type `Opaque` by default, upstream's `ValidateSecret` (config keys, at most 1 MiB,
//! the keys each built-in type requires) and `ValidateSecretUpdate` (immutable type, and the
//! data of `immutable: true` Secrets), and the `type` field selector.

use base64::Engine as _;
use serde_json::{Value, json};
use skiff_apimachinery::validation::{FieldError, FieldPath};

use super::common::{immutable, object_at};
use super::configmap::{MAX_SIZE, decoded_len, immutable_errors, key_errors};
use super::{Strategy, string_at};

/// The annotation a service account token Secret names its account with.
const SERVICE_ACCOUNT_NAME: &str = "kubernetes.io/service-account.name";

#[derive(Debug)]
pub struct SecretStrategy;

fn prepare(secret: &mut Value) {
    let string_data = secret
        .as_object_mut()
        .and_then(|m| m.remove("stringData"))
        .and_then(|v| v.as_object().cloned());
    if let Some(entries) = string_data.filter(|m| !m.is_empty()) {
        let data = object_at(secret, "data");
        for (key, value) in entries {
            let text = value.as_str().unwrap_or("");
            data[key] = json!(base64::engine::general_purpose::STANDARD.encode(text));
        }
    }
    if secret.get("type").is_none_or(|t| t.is_null() || t == "") {
        secret["type"] = json!("Opaque");
    }
}

/// The keys and contents each built-in type requires.
fn type_errors(secret: &Value, data: Option<&serde_json::Map<String, Value>>) -> Vec<FieldError> {
    let data_path = FieldPath::new("data");
    let has = |k: &str| data.is_some_and(|d| d.contains_key(k));
    let required = |k: &str| FieldError::required(&data_path.key(k), "");
    let mut errs = Vec::new();
    let json_key = |key: &str, errs: &mut Vec<FieldError>| {
        let Some(value) = data.and_then(|d| d.get(key)) else {
            errs.push(required(key));
            return;
        };
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(value.as_str().unwrap_or(""))
            .unwrap_or_default();
        if let Err(e) = serde_json::from_slice::<serde_json::Map<String, Value>>(&bytes) {
            errs.push(FieldError::invalid(
                &data_path.key(key),
                "<secret contents redacted>",
                e.to_string(),
            ));
        }
    };
    match string_at(secret, "type").as_str() {
        "kubernetes.io/service-account-token" => {
            let name = secret
                .pointer("/metadata/annotations")
                .and_then(|a| a.get(SERVICE_ACCOUNT_NAME))
                .and_then(Value::as_str)
                .unwrap_or("");
            if name.is_empty() {
                errs.push(FieldError::required(
                    &FieldPath::new("metadata")
                        .child("annotations")
                        .key(SERVICE_ACCOUNT_NAME),
                    "",
                ));
            }
        }
        "kubernetes.io/dockercfg" => json_key(".dockercfg", &mut errs),
        "kubernetes.io/dockerconfigjson" => json_key(".dockerconfigjson", &mut errs),
        "kubernetes.io/basic-auth" if !has("username") && !has("password") => {
            errs.extend([required("username"), required("password")]);
        }
        "kubernetes.io/ssh-auth" => {
            let key = data.and_then(|d| d.get("ssh-privatekey"));
            if key.is_none_or(|v| decoded_len(v) == 0) {
                errs.push(required("ssh-privatekey"));
            }
        }
        "kubernetes.io/tls" => {
            for key in ["tls.crt", "tls.key"] {
                if !has(key) {
                    errs.push(required(key));
                }
            }
        }
        _ => {}
    }
    errs
}

impl Strategy for SecretStrategy {
    fn prepare_for_create(&self, secret: &mut Value) {
        prepare(secret);
    }

    fn prepare_for_update(&self, secret: &mut Value, _old: &Value) {
        prepare(secret);
    }

    fn validate(&self, secret: &Value) -> Vec<FieldError> {
        let data_path = FieldPath::new("data");
        let data = secret.get("data").and_then(Value::as_object);
        let mut errs = key_errors(secret.get("data"), &data_path);
        let total: usize = data
            .into_iter()
            .flatten()
            .map(|(_, v)| decoded_len(v))
            .sum();
        if total > MAX_SIZE {
            errs.push(FieldError::too_long(&data_path, MAX_SIZE));
        }
        errs.extend(type_errors(secret, data));
        errs
    }

    fn validate_update(&self, secret: &Value, old: &Value) -> Vec<FieldError> {
        let mut errs = immutable(secret.get("type"), old.get("type"), &FieldPath::new("type"));
        errs.extend(immutable_errors(secret, old, &["data"]));
        errs.extend(self.validate(secret));
        errs
    }

    fn fields(&self, secret: &Value) -> Vec<(&'static str, String)> {
        vec![("type", string_at(secret, "type"))]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn errors(errs: Vec<FieldError>) -> Vec<String> {
        errs.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn string_data_becomes_base64_data_and_the_type_defaults_to_opaque() {
        let mut s = json!({"data": {"a": "MQ=="}, "stringData": {"a": "2", "b": "hi"}});
        SecretStrategy.prepare_for_create(&mut s);
        assert_eq!(
            s,
            json!({"data": {"a": "Mg==", "b": "aGk="}, "type": "Opaque"})
        );
        assert_eq!(
            SecretStrategy.fields(&s),
            vec![("type", "Opaque".to_string())]
        );
    }

    #[test]
    fn built_in_types_require_their_keys() {
        let cases = [
            (
                json!({"type": "kubernetes.io/tls", "data": {"tls.crt": "eA=="}}),
                vec!["data[tls.key]: Required value"],
            ),
            (
                json!({"type": "kubernetes.io/basic-auth"}),
                vec![
                    "data[username]: Required value",
                    "data[password]: Required value",
                ],
            ),
            (
                json!({"type": "kubernetes.io/service-account-token"}),
                vec!["metadata.annotations[kubernetes.io/service-account.name]: Required value"],
            ),
            (
                json!({"type": "kubernetes.io/dockerconfigjson",
                       "data": {".dockerconfigjson": "e30="}}),
                vec![],
            ),
            (
                json!({"type": "example.com/custom", "data": {"bad key": "eA=="}}),
                vec![
                    "data[bad key]: Invalid value: \"bad key\": a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')",
                ],
            ),
        ];
        for (secret, want) in cases {
            assert_eq!(errors(SecretStrategy.validate(&secret)), want, "{secret}");
        }
    }

    #[test]
    fn the_type_is_immutable_and_immutable_secrets_keep_their_data() {
        let old = json!({"type": "Opaque", "immutable": true, "data": {"a": "MQ=="}});
        let new = json!({"type": "kubernetes.io/tls", "immutable": true,
                         "data": {"a": "Mg==", "tls.crt": "", "tls.key": ""}});
        assert_eq!(
            errors(SecretStrategy.validate_update(&new, &old)),
            vec![
                "type: Invalid value: \"kubernetes.io/tls\": field is immutable",
                "data: Forbidden: field is immutable when `immutable` is set",
            ]
        );
    }
}
