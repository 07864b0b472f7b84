//! ValidatingAdmissionPolicies and their bindings (`admissionregistration.k8s.io/v1`):
//! upstream's v1 defaults (failurePolicy Fail; matchPolicy Equivalent, empty selectors and rule
//! scope `*` in match resources), `status.observedGeneration` kept at the policy's generation
//! (upstream's type-checking controller writes it; here the write itself does), and the checks
//! of `ValidateValidatingAdmissionPolicy` / `ValidateValidatingAdmissionPolicyBinding` that the
//! admission plugin relies on: required fields, the enums, and every CEL expression compiling
//! (422 with the compiler's message otherwise).

use std::collections::BTreeSet;

use serde_json::{Value, json};
use skiff_apimachinery::validation::{
    FieldError, FieldPath, is_qualified_name, validate_label_selector,
};

use super::Strategy;
use super::common::set_default;
use super::generic::settle_generation;
use super::webhookconfiguration::{one_of, validate_rule};
use crate::admission::expressions;

/// The reasons a validation may give (upstream's `supportedValidationPolicyReason`).
pub const REASONS: &[&str] = &[
    "Forbidden",
    "Invalid",
    "RequestEntityTooLarge",
    "Unauthorized",
];

fn default_match_resources(m: &mut Value) {
    if !m.is_object() {
        return;
    }
    set_default(m, "matchPolicy", json!("Equivalent"));
    set_default(m, "namespaceSelector", json!({}));
    set_default(m, "objectSelector", json!({}));
    for field in ["resourceRules", "excludeResourceRules"] {
        for r in m
            .get_mut(field)
            .and_then(Value::as_array_mut)
            .into_iter()
            .flatten()
            .filter(|r| r.is_object())
        {
            set_default(r, "scope", json!("*"));
        }
    }
}

fn validate_match_resources(m: &Value, path: &FieldPath, errs: &mut Vec<FieldError>) {
    if !m.is_object() {
        return;
    }
    one_of(
        &m["matchPolicy"],
        &path.child("matchPolicy"),
        &["Equivalent", "Exact"],
        errs,
    );
    for field in ["namespaceSelector", "objectSelector"] {
        match m.get(field) {
            None | Some(Value::Null) => errs.push(FieldError::required(&path.child(field), "")),
            Some(s) => errs.extend(validate_label_selector(s, &path.child(field))),
        }
    }
    for field in ["resourceRules", "excludeResourceRules"] {
        for (i, r) in m[field].as_array().into_iter().flatten().enumerate() {
            let at = path.child(field).index(i);
            let mut names = BTreeSet::new();
            for (j, n) in r["resourceNames"]
                .as_array()
                .into_iter()
                .flatten()
                .enumerate()
            {
                if !names.insert(n.as_str().unwrap_or("")) {
                    errs.push(FieldError::duplicate(
                        &at.child("resourceNames").index(j),
                        n.clone(),
                    ));
                }
            }
            validate_rule(r, &at, errs);
        }
    }
}

/// A CEL expression at `path` that must be present and compile.
fn expression(v: &Value, path: &FieldPath, required: &str, errs: &mut Vec<FieldError>) {
    match v.as_str().map(str::trim) {
        None | Some("") => errs.push(FieldError::required(path, required)),
        Some(_) => {
            let source = v.as_str().unwrap_or("");
            if let Err(why) = expressions::compile(source) {
                errs.push(FieldError::invalid(path, source, why));
            }
        }
    }
}

fn validate_validation(v: &Value, path: &FieldPath, errs: &mut Vec<FieldError>) {
    expression(
        &v["expression"],
        &path.child("expression"),
        "expression is not specified",
        errs,
    );
    if let Some(m) = v["messageExpression"].as_str() {
        if m.trim().is_empty() {
            if !m.is_empty() {
                errs.push(FieldError::invalid(
                    &path.child("messageExpression"),
                    m,
                    "must be non-empty if specified",
                ));
            }
        } else {
            expression(
                &v["messageExpression"],
                &path.child("messageExpression"),
                "",
                errs,
            );
        }
    }
    if let Some(m) = v["message"].as_str() {
        if !m.is_empty() && m.trim().is_empty() {
            errs.push(FieldError::invalid(
                &path.child("message"),
                m,
                "message must be non-empty if specified",
            ));
        } else if m.trim().contains(['\n', '\r']) {
            errs.push(FieldError::invalid(
                &path.child("message"),
                m,
                "message must not contain line breaks",
            ));
        }
    }
    if let Some(r) = v.get("reason").filter(|r| !r.is_null()) {
        one_of(r, &path.child("reason"), REASONS, errs);
    }
}

/// A CEL identifier that is not reserved (upstream's `isCELIdentifier`).
fn cel_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c == '_' || c.is_ascii_alphabetic())
        && chars.all(|c| c == '_' || c.is_ascii_alphanumeric())
        && !crate::admission::expressions::RESERVED_WORDS.contains(&name)
}

fn validate_policy_spec(obj: &Value, errs: &mut Vec<FieldError>) {
    let spec = &obj["spec"];
    let path = FieldPath::new("spec");
    one_of(
        &spec["failurePolicy"],
        &path.child("failurePolicy"),
        &["Fail", "Ignore"],
        errs,
    );
    if let Some(pk) = spec.get("paramKind").filter(|p| !p.is_null()) {
        for field in ["apiVersion", "kind"] {
            if pk[field].as_str().unwrap_or("").is_empty() {
                errs.push(FieldError::required(
                    &path.child("paramKind").child(field),
                    "",
                ));
            }
        }
    }
    match spec.get("matchConstraints").filter(|m| !m.is_null()) {
        None => errs.push(FieldError::required(&path.child("matchConstraints"), "")),
        Some(m) => {
            let at = path.child("matchConstraints");
            validate_match_resources(m, &at, errs);
            if m["resourceRules"].as_array().is_none_or(Vec::is_empty) {
                errs.push(FieldError::required(&at.child("resourceRules"), ""));
            }
        }
    }
    let mut names = BTreeSet::new();
    for (i, c) in spec["matchConditions"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        let at = path.child("matchConditions").index(i);
        expression(&c["expression"], &at.child("expression"), "", errs);
        match c["name"].as_str().unwrap_or("") {
            "" => errs.push(FieldError::required(&at.child("name"), "")),
            name => {
                for msg in is_qualified_name(name) {
                    errs.push(FieldError::invalid(&at.child("name"), name, msg));
                }
                if !names.insert(name) {
                    errs.push(FieldError::duplicate(&at.child("name"), name));
                }
            }
        }
    }
    for (i, v) in spec["variables"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        let at = path.child("variables").index(i);
        match v["name"].as_str().unwrap_or("").trim() {
            "" => errs.push(FieldError::required(
                &at.child("name"),
                "name is not specified",
            )),
            name if !cel_identifier(name) => errs.push(FieldError::invalid(
                &at.child("name"),
                name,
                "name is not a valid CEL identifier",
            )),
            _ => {}
        }
        expression(
            &v["expression"],
            &at.child("expression"),
            "expression is not specified",
            errs,
        );
    }
    let validations = spec["validations"]
        .as_array()
        .map_or(&[][..], Vec::as_slice);
    let annotations = spec["auditAnnotations"]
        .as_array()
        .map_or(&[][..], Vec::as_slice);
    if validations.is_empty() && annotations.is_empty() {
        let why = "validations or auditAnnotations must contain at least one item";
        errs.push(FieldError::required(&path.child("validations"), why));
        errs.push(FieldError::required(&path.child("auditAnnotations"), why));
    }
    for (i, v) in validations.iter().enumerate() {
        validate_validation(v, &path.child("validations").index(i), errs);
    }
    let policy = obj["metadata"]["name"].as_str().unwrap_or("");
    let mut keys = BTreeSet::new();
    for (i, a) in annotations.iter().enumerate() {
        let at = path.child("auditAnnotations").index(i);
        let key = a["key"].as_str().unwrap_or("");
        for msg in is_qualified_name(&format!("{policy}/{key}")) {
            errs.push(FieldError::invalid(&at.child("key"), key, msg));
        }
        if !keys.insert(key) {
            errs.push(FieldError::duplicate(&at.child("key"), key));
        }
        expression(
            &a["valueExpression"],
            &at.child("valueExpression"),
            "valueExpression is not specified",
            errs,
        );
    }
}

/// Upstream's ValidatingAdmissionPolicy strategy.
#[derive(Debug)]
pub struct PolicyStrategy;

impl PolicyStrategy {
    fn default_all(obj: &mut Value) {
        let Some(spec) = obj.get_mut("spec").filter(|s| s.is_object()) else {
            return;
        };
        set_default(spec, "failurePolicy", json!("Fail"));
        if let Some(m) = spec.get_mut("matchConstraints") {
            default_match_resources(m);
        }
    }

    /// The status says the current generation is the one observed.
    fn observe(obj: &mut Value) {
        let generation = obj["metadata"]["generation"].clone();
        if !obj["status"].is_object() {
            obj["status"] = json!({});
        }
        obj["status"]["observedGeneration"] = generation;
    }
}

impl Strategy for PolicyStrategy {
    fn prepare_for_create(&self, obj: &mut Value) {
        Self::default_all(obj);
        Self::observe(obj);
    }

    fn prepare_for_update(&self, obj: &mut Value, old: &Value) {
        Self::default_all(obj);
        settle_generation(obj, old);
        Self::observe(obj);
    }

    fn validate(&self, obj: &Value) -> Vec<FieldError> {
        let mut errs = Vec::new();
        validate_policy_spec(obj, &mut errs);
        errs
    }
}

/// Upstream's ValidatingAdmissionPolicyBinding strategy.
#[derive(Debug)]
pub struct BindingStrategy;

fn validate_param_ref(r: &Value, path: &FieldPath, errs: &mut Vec<FieldError>) {
    let name = r["name"].as_str().unwrap_or("");
    let selector = r.get("selector").filter(|s| !s.is_null());
    if !name.is_empty() && selector.is_some() {
        let why = "name and selector are mutually exclusive";
        errs.push(FieldError::forbidden(&path.child("name"), why));
        errs.push(FieldError::forbidden(&path.child("selector"), why));
    }
    if let Some(s) = selector {
        errs.extend(validate_label_selector(s, &path.child("selector")));
    }
    if name.is_empty() && selector.is_none() {
        errs.push(FieldError::required(
            path,
            "one of name or selector must be specified",
        ));
    }
    one_of(
        &r["parameterNotFoundAction"],
        &path.child("parameterNotFoundAction"),
        &["Deny", "Allow"],
        errs,
    );
}

fn validate_actions(actions: &Value, path: &FieldPath, errs: &mut Vec<FieldError>) {
    let list = actions.as_array().map_or(&[][..], Vec::as_slice);
    let mut seen = BTreeSet::new();
    for (i, a) in list.iter().enumerate() {
        one_of(a, &path.index(i), &["Audit", "Deny", "Warn"], errs);
        if !seen.insert(a.as_str().unwrap_or("")) {
            errs.push(FieldError::duplicate(&path.index(i), a.clone()));
        }
    }
    if seen.contains("Deny") && seen.contains("Warn") {
        errs.push(FieldError::invalid(
            path,
            actions.clone(),
            "must not contain both Deny and Warn (repeating the same validation failure information in the API response and headers serves no purpose)",
        ));
    }
    if seen.is_empty() {
        errs.push(FieldError::required(
            path,
            "at least one validation action is required",
        ));
    }
}

impl Strategy for BindingStrategy {
    fn prepare_for_create(&self, obj: &mut Value) {
        if let Some(m) = obj.pointer_mut("/spec/matchResources") {
            default_match_resources(m);
        }
    }

    fn prepare_for_update(&self, obj: &mut Value, _old: &Value) {
        self.prepare_for_create(obj);
    }

    fn validate(&self, obj: &Value) -> Vec<FieldError> {
        let mut errs = Vec::new();
        let spec = &obj["spec"];
        let path = FieldPath::new("spec");
        match spec["policyName"].as_str().unwrap_or("") {
            "" => errs.push(FieldError::required(&path.child("policyName"), "")),
            name => {
                for msg in skiff_apimachinery::validation::is_dns1123_subdomain(name) {
                    errs.push(FieldError::invalid(&path.child("policyName"), name, msg));
                }
            }
        }
        if let Some(r) = spec.get("paramRef").filter(|r| !r.is_null()) {
            validate_param_ref(r, &path.child("paramRef"), &mut errs);
        }
        validate_match_resources(
            &spec["matchResources"],
            &path.child("matchResources"),
            &mut errs,
        );
        validate_actions(
            &spec["validationActions"],
            &path.child("validationActions"),
            &mut errs,
        );
        errs
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn errors(s: &dyn Strategy, mut obj: Value) -> Vec<String> {
        s.prepare_for_create(&mut obj);
        s.validate(&obj).iter().map(ToString::to_string).collect()
    }

    #[test]
    fn a_policy_gets_upstreams_defaults_and_its_generation_observed() {
        let mut obj = json!({"metadata": {"name": "p", "generation": 1},
            "spec": {"matchConstraints": {"resourceRules": [{"operations": ["CREATE"],
                "apiGroups": ["apps"], "apiVersions": ["v1"], "resources": ["deployments"]}]},
                "validations": [{"expression": "object.spec.replicas <= 5"}]}});
        PolicyStrategy.prepare_for_create(&mut obj);
        assert_eq!(obj["spec"]["failurePolicy"], "Fail");
        let m = &obj["spec"]["matchConstraints"];
        assert_eq!(m["matchPolicy"], "Equivalent");
        assert_eq!(m["namespaceSelector"], json!({}));
        assert_eq!(m["resourceRules"][0]["scope"], "*");
        assert_eq!(obj["status"]["observedGeneration"], 1);
        assert!(PolicyStrategy.validate(&obj).is_empty());
        let mut next = obj.clone();
        next["metadata"]["generation"] = json!(2);
        PolicyStrategy.prepare_for_update(&mut next, &obj);
        assert_eq!(
            next["metadata"]["generation"], 1,
            "nothing but defaults changed"
        );
    }

    #[test]
    fn policies_without_validations_or_with_broken_cel_are_invalid() {
        let errs = errors(
            &PolicyStrategy,
            json!({"metadata": {"name": "p"}, "spec": {"failurePolicy": "Never",
                "matchConstraints": {}}}),
        );
        assert_eq!(
            errs,
            [
                "spec.failurePolicy: Unsupported value: \"Never\": supported values: \"Fail\", \"Ignore\"",
                "spec.matchConstraints.resourceRules: Required value",
                "spec.validations: Required value: validations or auditAnnotations must contain at least one item",
                "spec.auditAnnotations: Required value: validations or auditAnnotations must contain at least one item",
            ]
        );
        let errs = errors(
            &PolicyStrategy,
            json!({"metadata": {"name": "p"}, "spec": {
                "matchConstraints": {"resourceRules": [{"operations": ["CREATE"],
                    "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}]},
                "variables": [{"name": "in", "expression": "1"}],
                "validations": [{"expression": "object.(", "reason": "Teapot"}, {"expression": " "}]}}),
        );
        assert_eq!(
            errs,
            [
                "spec.variables[0].name: Invalid value: \"in\": name is not a valid CEL identifier",
                "spec.validations[0].expression: Invalid value: \"object.(\": compilation failed: \
                 ERROR: <input>:1:8: Syntax error: no viable alternative at input '.('\n| object.(\n| .......^",
                "spec.validations[0].reason: Unsupported value: \"Teapot\": supported values: \
                 \"Forbidden\", \"Invalid\", \"RequestEntityTooLarge\", \"Unauthorized\"",
                "spec.validations[1].expression: Required value: expression is not specified",
            ]
        );
    }

    #[test]
    fn bindings_need_a_policy_actions_and_a_complete_param_ref() {
        let errs = errors(
            &BindingStrategy,
            json!({"metadata": {"name": "b"}, "spec": {"paramRef": {"namespace": "x"},
                "validationActions": ["Deny", "Warn", "Deny", "Log"]}}),
        );
        assert_eq!(
            errs,
            [
                "spec.policyName: Required value",
                "spec.paramRef: Required value: one of name or selector must be specified",
                "spec.paramRef.parameterNotFoundAction: Required value",
                "spec.validationActions[2]: Duplicate value: \"Deny\"",
                "spec.validationActions[3]: Unsupported value: \"Log\": supported values: \"Audit\", \"Deny\", \"Warn\"",
                "spec.validationActions: Invalid value: [\"Deny\",\"Warn\",\"Deny\",\"Log\"]: must not contain both Deny and Warn (repeating the same validation failure information in the API response and headers serves no purpose)",
            ]
        );
        let mut ok = json!({"metadata": {"name": "b"}, "spec": {"policyName": "p",
            "validationActions": ["Warn"], "matchResources": {}}});
        BindingStrategy.prepare_for_create(&mut ok);
        assert_eq!(ok["spec"]["matchResources"]["matchPolicy"], "Equivalent");
        assert!(BindingStrategy.validate(&ok).is_empty());
    }
}
