//! The bootstrap RBAC policy upstream's API server ensures on every start (`rbac_policy.yaml`:
//! the default ClusterRoles, the controllers' roles, their bindings, and the Roles and
//! RoleBindings of `kube-system` and `kube-public`), and its reconciliation against the store:
//! missing objects are created; existing ones annotated `autoupdate: "true"` get what they lack
//! added, never removed; those annotated `"false"` are left alone.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::Deserialize;
use serde_json::{Value, json};
use skiff_apimachinery::catalog::{ResourceType, lookup};
use skiff_store::Store;

use super::Outcome;
use super::reconcile::{self, AUTOUPDATE, Change, Rule};
use crate::error::Result;

const GROUP: &str = "rbac.authorization.k8s.io";
const API_VERSION: &str = "rbac.authorization.k8s.io/v1";
/// Prefix of the aggregation labels and selectors (`<prefix>aggregate-to-view`).
const LABEL_PREFIX: &str = "rbac.authorization.k8s.io/";
const CONTROLLER_PREFIX: &str = "system:controller:";

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RoleSpec {
    #[serde(default)]
    namespace: String,
    name: String,
    #[serde(default)]
    labels: Vec<String>,
    #[serde(default)]
    aggregate: Option<String>,
    #[serde(default)]
    rules: Vec<Rule>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct BindingSpec {
    #[serde(default)]
    namespace: String,
    name: String,
    #[serde(default)]
    role: Option<String>,
    #[serde(default)]
    users: Vec<String>,
    #[serde(default)]
    groups: Vec<String>,
    #[serde(default)]
    service_accounts: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct PolicyFile {
    /// YAML anchors the rest of the file refers to; nothing to read here.
    #[serde(rename = "anchors")]
    _anchors: serde_yaml::Value,
    cluster_roles: Vec<RoleSpec>,
    cluster_role_bindings: Vec<BindingSpec>,
    controller_roles: Vec<RoleSpec>,
    roles: Vec<RoleSpec>,
    role_bindings: Vec<BindingSpec>,
}

/// The bootstrap policy as API objects, in the order they are ensured.
#[derive(Debug, Clone)]
pub struct Policy {
    pub cluster_roles: Vec<Value>,
    pub cluster_role_bindings: Vec<Value>,
    pub roles: Vec<Value>,
    pub role_bindings: Vec<Value>,
}

/// How many objects one run created (a binding whose roleRef changed counts here, as it is
/// deleted and created again), updated (rules, subjects or metadata added) or left lacking
/// part of the policy because they are annotated `autoupdate: "false"`.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Summary {
    pub created: usize,
    pub updated: usize,
    pub protected: usize,
}

fn metadata(namespace: &str, name: &str, labels: &[String]) -> Value {
    let mut label_map = BTreeMap::from([(
        "kubernetes.io/bootstrapping".to_string(),
        "rbac-defaults".to_string(),
    )]);
    for l in labels {
        label_map.insert(format!("{LABEL_PREFIX}{l}"), "true".into());
    }
    let mut meta = json!({"name": name, "labels": label_map, "annotations": {AUTOUPDATE: "true"}});
    if !namespace.is_empty() {
        meta["namespace"] = json!(namespace);
    }
    meta
}

fn role_object(kind: &str, spec: &RoleSpec) -> Value {
    let mut role = json!({
        "apiVersion": API_VERSION, "kind": kind,
        "metadata": metadata(&spec.namespace, &spec.name, &spec.labels),
        "rules": spec.rules,
    });
    if let Some(label) = &spec.aggregate {
        role["aggregationRule"] = json!({"clusterRoleSelectors": [
            {"matchLabels": {format!("{LABEL_PREFIX}{label}"): "true"}}
        ]});
    }
    role
}

fn binding_object(kind: &str, role_kind: &str, spec: &BindingSpec) -> Value {
    let user_or_group =
        |kind: &str, name: &String| json!({"apiGroup": GROUP, "kind": kind, "name": name});
    let mut subjects: Vec<Value> = spec
        .users
        .iter()
        .map(|u| user_or_group("User", u))
        .collect();
    subjects.extend(spec.groups.iter().map(|g| user_or_group("Group", g)));
    subjects.extend(spec.service_accounts.iter().map(|sa| {
        let (ns, name) = sa
            .split_once('/')
            .expect("service accounts are namespace/name");
        json!({"kind": "ServiceAccount", "name": name, "namespace": ns})
    }));
    let role = spec.role.as_deref().unwrap_or(&spec.name);
    let mut binding = json!({
        "apiVersion": API_VERSION, "kind": kind,
        "metadata": metadata(&spec.namespace, &spec.name, &[]),
        "roleRef": {"apiGroup": GROUP, "kind": role_kind, "name": role},
    });
    if !subjects.is_empty() {
        binding["subjects"] = Value::Array(subjects);
    }
    binding
}

/// Whether `role`'s labels satisfy every matchLabels of `selector`.
fn selects(selector: &Value, role: &Value) -> bool {
    let labels = role.pointer("/metadata/labels");
    selector
        .get("matchLabels")
        .and_then(Value::as_object)
        .is_some_and(|want| {
            want.iter()
                .all(|(k, v)| labels.and_then(|l| l.get(k)) == Some(v))
        })
}

/// Fills the rules of aggregated roles as upstream's clusterrole-aggregation controller leaves
/// them once settled: for each selector, the rules of the roles it selects, taken in name order
/// and without exact duplicates. Repeated until stable, since `edit` aggregates `view`.
pub(crate) fn aggregate(roles: &mut [Value]) {
    roles.sort_by(|a, b| {
        a["metadata"]["name"]
            .as_str()
            .cmp(&b["metadata"]["name"].as_str())
    });
    for _ in 0..roles.len() {
        let mut changed = false;
        for i in 0..roles.len() {
            let Some(selectors) = roles[i].pointer("/aggregationRule/clusterRoleSelectors") else {
                continue;
            };
            let mut rules: Vec<Value> = Vec::new();
            for selector in selectors.as_array().into_iter().flatten() {
                for (j, other) in roles.iter().enumerate() {
                    if j == i || !selects(selector, other) {
                        continue;
                    }
                    for rule in other["rules"].as_array().into_iter().flatten() {
                        if !rules.contains(rule) {
                            rules.push(rule.clone());
                        }
                    }
                }
            }
            let rules = Value::Array(rules);
            if roles[i]["rules"] != rules {
                roles[i]["rules"] = rules;
                changed = true;
            }
        }
        if !changed {
            return;
        }
    }
}

/// Reads the embedded policy; a malformed file is a build defect the unit tests catch.
pub fn policy() -> Policy {
    let file: PolicyFile = serde_yaml::from_str(include_str!("rbac_policy.yaml"))
        .expect("rbac_policy.yaml is a valid policy");
    let mut cluster_roles: Vec<Value> = file
        .cluster_roles
        .iter()
        .chain(&file.controller_roles)
        .map(|r| role_object("ClusterRole", r))
        .collect();
    aggregate(&mut cluster_roles);
    let controller_bindings = file.controller_roles.iter().map(|r| {
        let account = r
            .name
            .strip_prefix(CONTROLLER_PREFIX)
            .expect("controller roles are named system:controller:*");
        BindingSpec {
            namespace: String::new(),
            name: r.name.clone(),
            role: None,
            users: vec![],
            groups: vec![],
            service_accounts: vec![format!("kube-system/{account}")],
        }
    });
    let cluster_role_bindings = file
        .cluster_role_bindings
        .into_iter()
        .chain(controller_bindings)
        .map(|b| binding_object("ClusterRoleBinding", "ClusterRole", &b))
        .collect();
    Policy {
        cluster_roles,
        cluster_role_bindings,
        roles: file.roles.iter().map(|r| role_object("Role", r)).collect(),
        role_bindings: (file.role_bindings.iter())
            .map(|b| binding_object("RoleBinding", "Role", b))
            .collect(),
    }
}

/// Creates, updates or leaves `expected` as reconciliation says (an object annotated
/// `autoupdate: "false"` is left as it is).
async fn ensure_object(
    store: &Arc<dyn Store>,
    rt: &ResourceType,
    expected: &Value,
) -> Result<Outcome> {
    let is_role = matches!(rt.plural.as_str(), "roles" | "clusterroles");
    super::maintain(store, rt, expected, |old| {
        let change = if is_role {
            reconcile::reconcile_role(old, expected)
        } else {
            reconcile::reconcile_binding(old, expected)
        };
        match change {
            Change::None => Change::None,
            _ if reconcile::is_protected(old) => Change::Kept,
            change => change,
        }
    })
    .await
}

/// Ensures the bootstrap RBAC policy: every object exists, and every unprotected one has at
/// least its bootstrap rules, subjects, labels and annotations.
pub async fn run(store: &Arc<dyn Store>) -> Result<Summary> {
    let policy = policy();
    let kinds = [
        ("clusterroles", &policy.cluster_roles),
        ("clusterrolebindings", &policy.cluster_role_bindings),
        ("roles", &policy.roles),
        ("rolebindings", &policy.role_bindings),
    ];
    let mut summary = Summary::default();
    for (plural, objects) in kinds {
        let rt = lookup(GROUP, "v1", plural).expect("rbac kinds are in the catalog");
        for object in objects {
            match ensure_object(store, rt, object).await? {
                Outcome::Created => summary.created += 1,
                Outcome::Updated => summary.updated += 1,
                Outcome::Protected => {
                    summary.protected += 1;
                    tracing::warn!(
                        kind = %plural,
                        name = object["metadata"]["name"].as_str().unwrap_or(""),
                        "bootstrap rbac object is annotated autoupdate=false and lacks part of its default policy"
                    );
                }
                Outcome::Unchanged => {}
            }
        }
    }
    tracing::info!(
        created = summary.created,
        updated = summary.updated,
        protected = summary.protected,
        "bootstrap rbac policy reconciled"
    );
    Ok(summary)
}

#[cfg(test)]
#[path = "rbac_tests.rs"]
mod tests;
