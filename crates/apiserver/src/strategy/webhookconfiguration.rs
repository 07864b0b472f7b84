//! MutatingWebhookConfigurations and ValidatingWebhookConfigurations
//! (`admissionregistration.k8s.io/v1`): upstream's v1 defaults (failurePolicy Fail, matchPolicy
//! Equivalent, empty selectors, timeoutSeconds 10, rule scope `*`, service port 443,
//! reinvocationPolicy Never) and the checks of `ValidateMutatingWebhookConfiguration` /
//! `ValidateValidatingWebhookConfiguration` that a webhook can be called at all: unique
//! qualified names, exactly one of url or service, https URLs, rules, sideEffects,
//! admissionReviewVersions, timeouts and the policy enums.

use std::collections::BTreeSet;

use serde_json::{Value, json};
use skiff_apimachinery::validation::{FieldError, FieldPath};

use super::Strategy;
use super::common::set_default;

#[derive(Debug)]
pub struct WebhookConfigurationStrategy {
    pub mutating: bool,
}

impl WebhookConfigurationStrategy {
    fn default_all(&self, obj: &mut Value) {
        let Some(hooks) = obj.get_mut("webhooks").and_then(Value::as_array_mut) else {
            return;
        };
        for w in hooks.iter_mut().filter(|w| w.is_object()) {
            set_default(w, "failurePolicy", json!("Fail"));
            set_default(w, "matchPolicy", json!("Equivalent"));
            set_default(w, "namespaceSelector", json!({}));
            set_default(w, "objectSelector", json!({}));
            set_default(w, "timeoutSeconds", json!(10));
            if self.mutating {
                set_default(w, "reinvocationPolicy", json!("Never"));
            }
            if let Some(svc) = w.pointer_mut("/clientConfig/service")
                && svc.is_object()
            {
                set_default(svc, "port", json!(443));
            }
            for r in w
                .get_mut("rules")
                .and_then(Value::as_array_mut)
                .into_iter()
                .flatten()
                .filter(|r| r.is_object())
            {
                set_default(r, "scope", json!("*"));
            }
        }
    }
}

pub(super) fn one_of(v: &Value, path: &FieldPath, allowed: &[&str], errs: &mut Vec<FieldError>) {
    match v.as_str() {
        Some(s) if allowed.contains(&s) => {}
        _ if v.is_null() => errs.push(FieldError::required(path, "")),
        _ => errs.push(FieldError::not_supported(path, v.clone(), allowed)),
    }
}

fn non_empty_strings(rule: &Value, field: &str, path: &FieldPath, errs: &mut Vec<FieldError>) {
    if rule[field].as_array().is_none_or(Vec::is_empty) {
        errs.push(FieldError::required(&path.child(field), ""));
    }
}

pub(super) fn validate_rule(rule: &Value, path: &FieldPath, errs: &mut Vec<FieldError>) {
    non_empty_strings(rule, "operations", path, errs);
    for (i, op) in rule["operations"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        one_of(
            op,
            &path.child("operations").index(i),
            &["*", "CREATE", "UPDATE", "DELETE", "CONNECT"],
            errs,
        );
    }
    non_empty_strings(rule, "apiVersions", path, errs);
    non_empty_strings(rule, "resources", path, errs);
    if rule
        .get("apiGroups")
        .is_none_or(|g| !g.is_array() || g.as_array().is_some_and(Vec::is_empty))
    {
        errs.push(FieldError::required(&path.child("apiGroups"), ""));
    }
    one_of(
        &rule["scope"],
        &path.child("scope"),
        &["*", "Cluster", "Namespaced"],
        errs,
    );
}

/// Upstream's `ValidateWebhookURL` (https only) and `ValidateWebhookService` on a
/// `clientConfig`, which must hold exactly one of them (CRD conversion webhooks share it).
pub(crate) fn validate_client_config(cc: &Value, path: &FieldPath, errs: &mut Vec<FieldError>) {
    match (cc.get("url"), cc.get("service")) {
        (Some(url), None) => {
            let url = url.as_str().unwrap_or("");
            match url.parse::<http::Uri>() {
                Ok(u) if u.scheme_str() == Some("https") && u.host().is_some() => {}
                Ok(u) if u.scheme_str() != Some("https") => errs.push(FieldError::invalid(
                    &path.child("url"),
                    url,
                    "'https' is the only allowed URL scheme",
                )),
                _ => errs.push(FieldError::invalid(
                    &path.child("url"),
                    url,
                    "host must be specified",
                )),
            }
        }
        (None, Some(svc)) => {
            let at = path.child("service");
            for field in ["namespace", "name"] {
                if svc[field].as_str().unwrap_or("").is_empty() {
                    errs.push(FieldError::required(
                        &at.child(field),
                        format!("service {field} is required"),
                    ));
                }
            }
            if let Some(p) = svc["path"].as_str()
                && !p.is_empty()
                && !p.starts_with('/')
            {
                errs.push(FieldError::invalid(
                    &at.child("path"),
                    p,
                    "must start with a '/'",
                ));
            }
            if let Some(port) = svc["port"].as_i64()
                && !(1..=65535).contains(&port)
            {
                errs.push(FieldError::invalid(
                    &at.child("port"),
                    port,
                    "port is not valid: must be between 1 and 65535, inclusive",
                ));
            }
        }
        _ => errs.push(FieldError::required(
            path,
            "exactly one of url or service is required",
        )),
    }
}

/// A webhook name: a DNS subdomain of at least three segments.
fn qualified(name: &str) -> bool {
    name.split('.').count() >= 3
        && skiff_apimachinery::validation::is_dns1123_subdomain(name).is_empty()
}

impl Strategy for WebhookConfigurationStrategy {
    fn prepare_for_create(&self, obj: &mut Value) {
        self.default_all(obj);
    }

    fn prepare_for_update(&self, obj: &mut Value, _old: &Value) {
        self.default_all(obj);
    }

    fn validate(&self, obj: &Value) -> Vec<FieldError> {
        let mut errs = Vec::new();
        let mut names = BTreeSet::new();
        let root = FieldPath::new("webhooks");
        for (i, w) in obj["webhooks"].as_array().into_iter().flatten().enumerate() {
            let path = root.index(i);
            let name = w["name"].as_str().unwrap_or("");
            if name.is_empty() {
                errs.push(FieldError::required(&path.child("name"), ""));
            } else if !qualified(name) {
                errs.push(FieldError::invalid(
                    &path.child("name"),
                    name,
                    "should be a domain with at least three segments separated by dots",
                ));
            } else if !names.insert(name.to_string()) {
                errs.push(FieldError::duplicate(&path.child("name"), name));
            }
            validate_client_config(&w["clientConfig"], &path.child("clientConfig"), &mut errs);
            for (j, r) in w["rules"].as_array().into_iter().flatten().enumerate() {
                validate_rule(r, &path.child("rules").index(j), &mut errs);
            }
            one_of(
                &w["failurePolicy"],
                &path.child("failurePolicy"),
                &["Fail", "Ignore"],
                &mut errs,
            );
            one_of(
                &w["matchPolicy"],
                &path.child("matchPolicy"),
                &["Exact", "Equivalent"],
                &mut errs,
            );
            one_of(
                &w["sideEffects"],
                &path.child("sideEffects"),
                &["None", "NoneOnDryRun"],
                &mut errs,
            );
            if self.mutating {
                one_of(
                    &w["reinvocationPolicy"],
                    &path.child("reinvocationPolicy"),
                    &["Never", "IfNeeded"],
                    &mut errs,
                );
            }
            let versions: Vec<&str> = w["admissionReviewVersions"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            if versions.is_empty() {
                errs.push(FieldError::required(
                    &path.child("admissionReviewVersions"),
                    "must specify one of v1, v1beta1",
                ));
            } else if !versions.iter().any(|v| *v == "v1" || *v == "v1beta1") {
                errs.push(FieldError::invalid(
                    &path.child("admissionReviewVersions"),
                    json!(versions),
                    "must include at least one of v1, v1beta1",
                ));
            }
            for (j, c) in w["matchConditions"]
                .as_array()
                .into_iter()
                .flatten()
                .enumerate()
            {
                let at = path.child("matchConditions").index(j);
                if c["name"].as_str().unwrap_or("").is_empty() {
                    errs.push(FieldError::required(&at.child("name"), ""));
                }
                match c["expression"].as_str() {
                    None | Some("") => errs.push(FieldError::required(&at.child("expression"), "")),
                    Some(e) => {
                        if let Err(why) = crate::admission::expressions::compile(e) {
                            errs.push(FieldError::invalid(&at.child("expression"), e, why));
                        }
                    }
                }
            }
            if let Some(t) = w["timeoutSeconds"].as_i64()
                && !(1..=30).contains(&t)
            {
                errs.push(FieldError::invalid(
                    &path.child("timeoutSeconds"),
                    t,
                    "the timeout value must be between 1 and 30 seconds",
                ));
            }
        }
        errs
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn webhooks_get_upstreams_defaults_and_valid_ones_pass() {
        let s = WebhookConfigurationStrategy { mutating: true };
        let mut obj = json!({"webhooks": [{"name": "label.skiff.test",
            "clientConfig": {"service": {"namespace": "ns", "name": "hooks"}},
            "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"],
                       "resources": ["pods"]}],
            "sideEffects": "None", "admissionReviewVersions": ["v1"]}]});
        s.prepare_for_create(&mut obj);
        let w = &obj["webhooks"][0];
        assert_eq!(w["failurePolicy"], "Fail");
        assert_eq!(w["timeoutSeconds"], 10);
        assert_eq!(w["reinvocationPolicy"], "Never");
        assert_eq!(w["clientConfig"]["service"]["port"], 443);
        assert_eq!(w["rules"][0]["scope"], "*");
        assert!(s.validate(&obj).is_empty(), "{:?}", s.validate(&obj));
    }

    #[test]
    fn uncallable_webhooks_are_invalid() {
        let s = WebhookConfigurationStrategy { mutating: false };
        let mut obj = json!({"webhooks": [{"name": "short",
            "clientConfig": {"url": "http://h/"}, "sideEffects": "Some",
            "admissionReviewVersions": ["v2"], "timeoutSeconds": 31,
            "matchConditions": [{"name": "broken", "expression": "object.("}]}]});
        s.prepare_for_create(&mut obj);
        let errs: Vec<String> = s.validate(&obj).iter().map(ToString::to_string).collect();
        assert_eq!(
            errs,
            [
                "webhooks[0].name: Invalid value: \"short\": should be a domain with at least three segments separated by dots",
                "webhooks[0].clientConfig.url: Invalid value: \"http://h/\": 'https' is the only allowed URL scheme",
                "webhooks[0].sideEffects: Unsupported value: \"Some\": supported values: \"None\", \"NoneOnDryRun\"",
                "webhooks[0].admissionReviewVersions: Invalid value: [\"v2\"]: must include at least one of v1, v1beta1",
                "webhooks[0].matchConditions[0].expression: Invalid value: \"object.(\": compilation failed: \
                 ERROR: <input>:1:8: Syntax error: no viable alternative at input '.('\n| object.(\n| .......^",
                "webhooks[0].timeoutSeconds: Invalid value: 31: the timeout value must be between 1 and 30 seconds",
            ]
        );
    }
}
