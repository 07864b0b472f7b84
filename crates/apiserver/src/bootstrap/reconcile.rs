//! Upstream's union-mode reconciliation of bootstrap RBAC objects (`pkg/registry/rbac/
//! reconciliation`): what an existing role or binding lacks of its bootstrap form, computed
//! without touching the store. Nothing is ever removed, and whether the object may be written
//! at all (the `autoupdate` annotation) is the caller's decision.

use serde_json::{Map, Value};

/// `rbac.authorization.kubernetes.io/autoupdate`: `"false"` keeps an object as its owner left it.
pub const AUTOUPDATE: &str = "rbac.authorization.kubernetes.io/autoupdate";

/// One `PolicyRule`: the authorizer's own type, so that what reconciliation adds is exactly
/// what the authorizer reads.
pub use crate::authz::rbac::PolicyRule as Rule;

/// What reconciling an existing object asks for.
#[derive(Debug, Clone, PartialEq)]
pub enum Change {
    /// The object already has everything: nothing to write.
    None,
    /// Write this object over the existing one (what it lacked added).
    Update(Value),
    /// A binding's roleRef differs and cannot change in place: delete it, then create the
    /// expected one.
    Recreate,
    /// The object differs, and its owner asked for it to be left as it is.
    Kept,
}

/// Whether an existing object is annotated `autoupdate: "false"`.
pub fn is_protected(existing: &Value) -> bool {
    existing
        .pointer("/metadata/annotations")
        .and_then(|a| a.get(AUTOUPDATE))
        .and_then(Value::as_str)
        == Some("false")
}

/// The rules of a role object (none if missing or malformed).
pub fn rules_of(role: &Value) -> Vec<Rule> {
    role.get("rules")
        .and_then(|r| serde_json::from_value(r.clone()).ok())
        .unwrap_or_default()
}

/// Upstream's `BreakdownRule`: one rule per (group, resource, verb[, name]) and per (url, verb).
pub fn breakdown(rule: &Rule) -> Vec<Rule> {
    let one = |s: &String| vec![s.clone()];
    let mut out = Vec::new();
    for group in &rule.api_groups {
        for resource in &rule.resources {
            for verb in &rule.verbs {
                let base = Rule {
                    verbs: one(verb),
                    api_groups: one(group),
                    resources: one(resource),
                    ..Rule::default()
                };
                if rule.resource_names.is_empty() {
                    out.push(base);
                } else {
                    out.extend(rule.resource_names.iter().map(|name| Rule {
                        resource_names: one(name),
                        ..base.clone()
                    }));
                }
            }
        }
    }
    for url in &rule.non_resource_urls {
        for verb in &rule.verbs {
            out.push(Rule {
                verbs: one(verb),
                non_resource_urls: one(url),
                ..Rule::default()
            });
        }
    }
    out
}

fn has(set: &[String], item: &str) -> bool {
    set.iter().any(|s| s == item)
}

fn has_all(set: &[String], items: &[String]) -> bool {
    items.iter().all(|i| has(set, i))
}

/// Upstream's `resourceCoversAll`: `*`, an exact match, or `*/sub` for a subresource.
fn resources_cover(set: &[String], wanted: &[String]) -> bool {
    has(set, "*")
        || wanted.iter().all(|path| {
            has(set, path)
                || path
                    .split_once('/')
                    .is_some_and(|(_, sub)| has(set, &format!("*/{sub}")))
        })
}

/// Upstream's `nonResourceURLCovers`: equal, or the owner ends in `*` and prefixes the path.
fn url_covers(owner: &str, path: &str) -> bool {
    owner == path || (owner.ends_with('*') && path.starts_with(owner.trim_end_matches('*')))
}

/// Upstream's `ruleCovers`: whether `owner` allows everything the (broken-down) `sub` asks.
fn rule_covers(owner: &Rule, sub: &Rule) -> bool {
    let verbs = has(&owner.verbs, "*") || has_all(&owner.verbs, &sub.verbs);
    let groups = has(&owner.api_groups, "*") || has_all(&owner.api_groups, &sub.api_groups);
    let resources = resources_cover(&owner.resources, &sub.resources);
    let urls = sub
        .non_resource_urls
        .iter()
        .all(|p| owner.non_resource_urls.iter().any(|o| url_covers(o, p)));
    let names = owner.resource_names.is_empty()
        || (!sub.resource_names.is_empty() && has_all(&owner.resource_names, &sub.resource_names));
    verbs && groups && resources && names && urls
}

/// Upstream's `Covers`: the broken-down parts of `servant` that no rule of `owner` covers.
pub fn uncovered(owner: &[Rule], servant: &[Rule]) -> Vec<Rule> {
    servant
        .iter()
        .flat_map(breakdown)
        .filter(|sub| !owner.iter().any(|o| rule_covers(o, sub)))
        .collect()
}

/// `expected` merged under `existing` (existing values win), as upstream's label and
/// annotation merge; returns whether anything was added.
fn merge_map(object: &mut Value, expected: &Value, field: &str) -> bool {
    let Some(wanted) = expected
        .pointer(&format!("/metadata/{field}"))
        .and_then(Value::as_object)
    else {
        return false;
    };
    let meta = object["metadata"]
        .as_object_mut()
        .expect("stored objects have metadata");
    let map = meta
        .entry(field)
        .or_insert_with(|| Value::Object(Map::new()));
    if !map.is_object() {
        *map = Value::Object(Map::new());
    }
    let map = map.as_object_mut().expect("just made an object");
    let mut changed = false;
    for (k, v) in wanted {
        if !map.contains_key(k) {
            map.insert(k.clone(), v.clone());
            changed = true;
        }
    }
    changed
}

fn merge_metadata(object: &mut Value, expected: &Value) -> bool {
    let labels = merge_map(object, expected, "labels");
    merge_map(object, expected, "annotations") || labels
}

fn selectors(role: &Value) -> Option<&Vec<Value>> {
    role.pointer("/aggregationRule/clusterRoleSelectors")
        .and_then(Value::as_array)
}

/// Upstream's `computeReconciledRole` in union mode: the existing role with the expected
/// labels, annotations, rules (broken down, as upstream appends them) and aggregation
/// selectors it lacks added.
pub fn reconcile_role(existing: &Value, expected: &Value) -> Change {
    let mut role = existing.clone();
    let mut changed = merge_metadata(&mut role, expected);
    let missing = uncovered(&rules_of(existing), &rules_of(expected));
    if !missing.is_empty() {
        let mut rules = existing
            .get("rules")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        rules.extend(
            missing
                .iter()
                .map(|r| serde_json::to_value(r).expect("rules serialize")),
        );
        role["rules"] = Value::Array(rules);
        changed = true;
    }
    match (selectors(expected), existing.get("aggregationRule")) {
        (None, Some(_)) => {
            role.as_object_mut()
                .expect("objects are JSON objects")
                .remove("aggregationRule");
            changed = true;
        }
        (Some(wanted), _) => {
            let have = selectors(existing).cloned().unwrap_or_default();
            let missing: Vec<Value> = wanted
                .iter()
                .filter(|s| !have.contains(s))
                .cloned()
                .collect();
            if !missing.is_empty() {
                let mut all = have;
                all.extend(missing);
                role["aggregationRule"] = serde_json::json!({"clusterRoleSelectors": all});
                changed = true;
            }
        }
        (None, None) => {}
    }
    if changed {
        Change::Update(role)
    } else {
        Change::None
    }
}

/// A subject as upstream compares them, with the defaults filled in (`apiGroup` is
/// `rbac.authorization.k8s.io` for users and groups, empty for service accounts).
fn subject_key(subject: &Value) -> (String, String, String, String) {
    let field = |k: &str| {
        subject
            .get(k)
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    let kind = field("kind");
    let mut group = field("apiGroup");
    if group.is_empty() && matches!(kind.as_str(), "User" | "Group") {
        group = "rbac.authorization.k8s.io".into();
    }
    (kind, group, field("name"), field("namespace"))
}

fn role_ref_key(binding: &Value) -> (String, String, String) {
    let field = |k: &str| {
        binding
            .pointer(&format!("/roleRef/{k}"))
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    (field("apiGroup"), field("kind"), field("name"))
}

/// Upstream's `computeReconciledRoleBinding` in union mode.
pub fn reconcile_binding(existing: &Value, expected: &Value) -> Change {
    if role_ref_key(existing) != role_ref_key(expected) {
        return Change::Recreate;
    }
    let mut binding = existing.clone();
    let mut changed = merge_metadata(&mut binding, expected);
    let mut subjects = existing
        .get("subjects")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let have: Vec<_> = subjects.iter().map(subject_key).collect();
    let wanted = expected.get("subjects").and_then(Value::as_array);
    for subject in wanted.into_iter().flatten() {
        if !have.contains(&subject_key(subject)) {
            subjects.push(subject.clone());
            changed = true;
        }
    }
    if changed {
        if !subjects.is_empty() {
            binding["subjects"] = Value::Array(subjects);
        }
        Change::Update(binding)
    } else {
        Change::None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rule(groups: &[&str], resources: &[&str], verbs: &[&str]) -> Rule {
        let v = |s: &[&str]| s.iter().map(|x| x.to_string()).collect();
        Rule {
            verbs: v(verbs),
            api_groups: v(groups),
            resources: v(resources),
            ..Rule::default()
        }
    }

    #[test]
    fn a_rule_breaks_down_into_one_rule_per_group_resource_and_verb() {
        let parts = breakdown(&rule(&["", "apps"], &["pods"], &["get", "list"]));
        assert_eq!(parts.len(), 4);
        assert_eq!(parts[0], rule(&[""], &["pods"], &["get"]));
    }

    #[test]
    fn wildcards_and_subresource_stars_cover_what_they_name() {
        let star = rule(&["*"], &["*"], &["*"]);
        assert!(uncovered(&[star], &[rule(&["apps"], &["deployments"], &["get"])]).is_empty());
        let scale = rule(&["*"], &["*/scale"], &["get"]);
        let scale = std::slice::from_ref(&scale);
        let sub = rule(&["apps"], &["deployments/scale"], &["get"]);
        assert!(uncovered(scale, &[sub]).is_empty());
        let whole = rule(&["apps"], &["deployments"], &["get"]);
        assert_eq!(uncovered(scale, &[whole]).len(), 1);
    }

    #[test]
    fn a_url_ending_in_a_star_covers_every_path_below_it() {
        let owner = Rule {
            verbs: vec!["get".into()],
            non_resource_urls: vec!["/healthz/*".into()],
            ..Rule::default()
        };
        let wanted = Rule {
            non_resource_urls: vec!["/healthz/etcd".into(), "/livez".into()],
            ..owner.clone()
        };
        let missing = uncovered(&[owner], &[wanted]);
        assert_eq!(missing.len(), 1);
        assert_eq!(missing[0].non_resource_urls, ["/livez"]);
    }

    #[test]
    fn a_rule_limited_to_names_does_not_cover_the_whole_resource() {
        let named = Rule {
            resource_names: vec!["kube-scheduler".into()],
            ..rule(&["coordination.k8s.io"], &["leases"], &["get"])
        };
        let all = rule(&["coordination.k8s.io"], &["leases"], &["get"]);
        let (named, all) = (std::slice::from_ref(&named), std::slice::from_ref(&all));
        assert_eq!(uncovered(named, all).len(), 1);
        assert!(uncovered(all, named).is_empty());
    }

    #[test]
    fn reconciling_a_role_keeps_its_own_labels_and_extra_rules() {
        let expected = json!({"metadata": {"labels": {"a": "1", "b": "2"}},
            "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]});
        let existing = json!({"metadata": {"labels": {"a": "mine"}},
            "rules": [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]}]});
        let Change::Update(role) = reconcile_role(&existing, &expected) else {
            panic!("the role lacks a label and a rule");
        };
        assert_eq!(role["metadata"]["labels"], json!({"a": "mine", "b": "2"}));
        assert_eq!(role["rules"].as_array().unwrap().len(), 2);
        assert_eq!(reconcile_role(&role, &expected), Change::None);
    }

    #[test]
    fn a_binding_with_another_role_ref_is_recreated() {
        let expected = json!({"metadata": {}, "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"}});
        let existing = json!({"metadata": {}, "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"}});
        assert_eq!(reconcile_binding(&existing, &expected), Change::Recreate);
    }

    #[test]
    fn subjects_match_with_their_defaulted_api_group() {
        let rr =
            json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "x"});
        let expected = json!({"metadata": {}, "roleRef": rr,
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "g"}]});
        let existing = json!({"metadata": {}, "roleRef": rr,
            "subjects": [{"kind": "Group", "name": "g"}, {"kind": "User", "name": "extra"}]});
        assert_eq!(reconcile_binding(&existing, &expected), Change::None);
    }
}
