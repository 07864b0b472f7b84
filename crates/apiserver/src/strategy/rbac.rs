//! RBAC: upstream's defaults (`roleRef.apiGroup` and the `apiGroup` of User and Group
//! subjects) and validation: rules need verbs and, unless they name non-resource URLs (cluster
//! roles only), API groups and resources; bindings reference a Role or ClusterRole by a valid
//! name, subjects are ServiceAccounts, Users or Groups, and `roleRef` never changes.

use serde_json::{Value, json};
use skiff_apimachinery::validation::{
    FieldError, FieldPath, is_dns1123_subdomain, is_path_segment_name,
};

use super::Strategy;
use super::common::{is_empty, object_at, str_at};

const GROUP: &str = "rbac.authorization.k8s.io";

/// Roles and ClusterRoles (`namespaced`: Roles, whose rules cannot name URLs).
#[derive(Debug)]
pub struct RoleStrategy {
    pub namespaced: bool,
}

/// RoleBindings and ClusterRoleBindings (`namespaced`: RoleBindings, which may also bind a Role).
#[derive(Debug)]
pub struct BindingStrategy {
    pub namespaced: bool,
}

/// Upstream's `ValidateRBACName` (`IsValidPathSegmentName`).
fn path_segment_errors(name: &str) -> Vec<String> {
    if matches!(name, "." | "..") {
        return vec![format!("may not be '{name}'")];
    }
    ["/", "%"]
        .iter()
        .filter(|c| name.contains(*c))
        .map(|c| format!("may not contain '{c}'"))
        .collect()
}

fn validate_rule(rule: &Value, namespaced: bool, path: &FieldPath) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if is_empty(rule.get("verbs")) {
        errs.push(FieldError::required(
            &path.child("verbs"),
            "verbs must contain at least one value",
        ));
    }
    if let Some(urls) = rule.get("nonResourceURLs").filter(|u| !is_empty(Some(u))) {
        let url_path = path.child("nonResourceURLs");
        if namespaced {
            errs.push(FieldError::invalid(
                &url_path,
                urls.clone(),
                "namespaced rules cannot apply to non-resource URLs",
            ));
        }
        if ["apiGroups", "resources", "resourceNames"]
            .iter()
            .any(|k| !is_empty(rule.get(*k)))
        {
            errs.push(FieldError::invalid(
                &url_path,
                urls.clone(),
                "rules cannot apply to both regular resources and non-resource URLs",
            ));
        }
        return errs;
    }
    if is_empty(rule.get("apiGroups")) {
        errs.push(FieldError::required(
            &path.child("apiGroups"),
            "resource rules must supply at least one api group",
        ));
    }
    if is_empty(rule.get("resources")) {
        errs.push(FieldError::required(
            &path.child("resources"),
            "resource rules must supply at least one resource",
        ));
    }
    errs
}

impl Strategy for RoleStrategy {
    /// RBAC names are path segments (`system:controller:…`), as upstream.
    fn name_validation(&self) -> fn(&str) -> Vec<String> {
        is_path_segment_name
    }

    fn validate(&self, role: &Value) -> Vec<FieldError> {
        let path = FieldPath::new("rules");
        let rules = role.get("rules").and_then(Value::as_array);
        let mut errs: Vec<FieldError> = rules
            .into_iter()
            .flatten()
            .enumerate()
            .flat_map(|(i, r)| validate_rule(r, self.namespaced, &path.index(i)))
            .collect();
        if let Some(aggregation) = role.get("aggregationRule").filter(|a| !a.is_null())
            && is_empty(aggregation.get("clusterRoleSelectors"))
        {
            errs.push(FieldError::required(
                &FieldPath::new("aggregationRule").child("clusterRoleSelectors"),
                "at least one clusterRoleSelector required if aggregationRule is non-nil",
            ));
        }
        errs
    }
}

fn default_binding(binding: &mut Value) {
    let role_ref = object_at(binding, "roleRef");
    if str_at(role_ref, "/apiGroup").is_empty() {
        role_ref["apiGroup"] = json!(GROUP);
    }
    let subjects = binding.get_mut("subjects").and_then(Value::as_array_mut);
    for subject in subjects.into_iter().flatten() {
        if str_at(subject, "/apiGroup").is_empty()
            && matches!(str_at(subject, "/kind"), "User" | "Group")
        {
            subject["apiGroup"] = json!(GROUP);
        }
    }
}

fn validate_subject(subject: &Value, namespaced: bool, path: &FieldPath) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let name = str_at(subject, "/name");
    if name.is_empty() {
        errs.push(FieldError::required(&path.child("name"), ""));
    }
    let api_group = str_at(subject, "/apiGroup");
    match str_at(subject, "/kind") {
        "ServiceAccount" => {
            if !name.is_empty() {
                for msg in is_dns1123_subdomain(name) {
                    errs.push(FieldError::invalid(&path.child("name"), name, msg));
                }
            }
            if !api_group.is_empty() {
                errs.push(FieldError::not_supported(
                    &path.child("apiGroup"),
                    api_group,
                    &[""],
                ));
            }
            if !namespaced && str_at(subject, "/namespace").is_empty() {
                errs.push(FieldError::required(&path.child("namespace"), ""));
            }
        }
        "User" | "Group" => {
            if api_group != GROUP {
                errs.push(FieldError::not_supported(
                    &path.child("apiGroup"),
                    api_group,
                    &[GROUP],
                ));
            }
        }
        other => errs.push(FieldError::not_supported(
            &path.child("kind"),
            other,
            &["ServiceAccount", "User", "Group"],
        )),
    }
    errs
}

impl Strategy for BindingStrategy {
    fn name_validation(&self) -> fn(&str) -> Vec<String> {
        is_path_segment_name
    }

    fn prepare_for_create(&self, binding: &mut Value) {
        default_binding(binding);
    }

    fn prepare_for_update(&self, binding: &mut Value, _old: &Value) {
        default_binding(binding);
    }

    fn validate(&self, binding: &Value) -> Vec<FieldError> {
        let ref_path = FieldPath::new("roleRef");
        let mut errs = Vec::new();
        let api_group = str_at(binding, "/roleRef/apiGroup");
        if api_group != GROUP {
            errs.push(FieldError::not_supported(
                &ref_path.child("apiGroup"),
                api_group,
                &[GROUP],
            ));
        }
        let kinds: &[&str] = if self.namespaced {
            &["Role", "ClusterRole"]
        } else {
            &["ClusterRole"]
        };
        let kind = str_at(binding, "/roleRef/kind");
        if !kinds.contains(&kind) {
            errs.push(FieldError::not_supported(
                &ref_path.child("kind"),
                kind,
                kinds,
            ));
        }
        let name = str_at(binding, "/roleRef/name");
        if name.is_empty() {
            errs.push(FieldError::required(&ref_path.child("name"), ""));
        }
        for msg in path_segment_errors(name) {
            errs.push(FieldError::invalid(&ref_path.child("name"), name, msg));
        }
        let subjects = binding.get("subjects").and_then(Value::as_array);
        for (i, subject) in subjects.into_iter().flatten().enumerate() {
            errs.extend(validate_subject(
                subject,
                self.namespaced,
                &FieldPath::new("subjects").index(i),
            ));
        }
        errs
    }

    fn validate_update(&self, binding: &Value, old: &Value) -> Vec<FieldError> {
        let mut errs = self.validate(binding);
        let role_ref = binding.get("roleRef").cloned().unwrap_or(Value::Null);
        if old.get("roleRef").unwrap_or(&Value::Null) != &role_ref {
            errs.push(FieldError::invalid(
                &FieldPath::new("roleRef"),
                role_ref,
                "cannot change roleRef",
            ));
        }
        errs
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn errors(errs: Vec<FieldError>) -> Vec<String> {
        errs.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn rules_need_verbs_and_resources_or_urls() {
        let cases = [
            (
                true,
                json!({"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}),
                vec![],
            ),
            (
                false,
                json!({"nonResourceURLs": ["/healthz"], "verbs": ["get"]}),
                vec![],
            ),
            (
                true,
                json!({"apiGroups": [""], "resources": ["pods"]}),
                vec!["rules[0].verbs: Required value: verbs must contain at least one value"],
            ),
            (
                true,
                json!({"nonResourceURLs": ["/healthz"], "verbs": ["get"]}),
                vec![
                    "rules[0].nonResourceURLs: Invalid value: [\"/healthz\"]: namespaced rules cannot apply to non-resource URLs",
                ],
            ),
            (
                false,
                json!({"verbs": ["get"]}),
                vec![
                    "rules[0].apiGroups: Required value: resource rules must supply at least one api group",
                    "rules[0].resources: Required value: resource rules must supply at least one resource",
                ],
            ),
        ];
        for (namespaced, rule, want) in cases {
            let role = json!({"rules": [rule]});
            assert_eq!(
                errors(RoleStrategy { namespaced }.validate(&role)),
                want,
                "{rule}"
            );
        }
    }

    #[test]
    fn bindings_get_api_group_defaults_and_are_validated() {
        let mut binding = json!({"roleRef": {"kind": "ClusterRole", "name": "view"},
                                 "subjects": [{"kind": "User", "name": "alice"},
                                              {"kind": "ServiceAccount", "name": "bot", "namespace": "ci"}]});
        let strategy = BindingStrategy { namespaced: false };
        strategy.prepare_for_create(&mut binding);
        assert_eq!(binding["roleRef"]["apiGroup"], GROUP);
        assert_eq!(binding["subjects"][0]["apiGroup"], GROUP);
        assert!(binding["subjects"][1].get("apiGroup").is_none());
        assert!(strategy.validate(&binding).is_empty());
        let cases = [
            (
                json!({"roleRef": {"apiGroup": GROUP, "kind": "Role", "name": "edit"}}),
                vec![
                    "roleRef.kind: Unsupported value: \"Role\": supported values: \"ClusterRole\"",
                ],
            ),
            (
                json!({"roleRef": {"apiGroup": GROUP, "kind": "ClusterRole", "name": "a/b"},
                       "subjects": [{"kind": "ServiceAccount", "name": "bot"}]}),
                vec![
                    "roleRef.name: Invalid value: \"a/b\": may not contain '/'",
                    "subjects[0].namespace: Required value",
                ],
            ),
            (
                json!({"roleRef": {"apiGroup": GROUP, "kind": "ClusterRole", "name": "view"},
                       "subjects": [{"kind": "Robot", "name": "r2"}]}),
                vec![
                    "subjects[0].kind: Unsupported value: \"Robot\": supported values: \"ServiceAccount\", \"User\", \"Group\"",
                ],
            ),
        ];
        for (binding, want) in cases {
            assert_eq!(errors(strategy.validate(&binding)), want, "{binding}");
        }
    }

    #[test]
    fn role_ref_cannot_change() {
        let strategy = BindingStrategy { namespaced: true };
        let old = json!({"roleRef": {"apiGroup": GROUP, "kind": "Role", "name": "a"}});
        let new = json!({"roleRef": {"apiGroup": GROUP, "kind": "Role", "name": "b"}});
        assert_eq!(
            errors(strategy.validate_update(&new, &old)),
            vec![format!(
                "roleRef: Invalid value: {{\"apiGroup\":\"{GROUP}\",\"kind\":\"Role\",\"name\":\"b\"}}: cannot change roleRef"
            )]
        );
    }
}
