//! The RBAC authorizer: Roles, ClusterRoles, RoleBindings and ClusterRoleBindings as the API
//! server's watch cache holds them, matched as upstream's `rbac.authorizer` does (verbs, API
//! groups, resources with subresources and `*/sub`, resourceNames, nonResourceURLs with a
//! trailing `*`; User, Group and ServiceAccount subjects). Requests never read the store: the
//! bindings are indexed by subject, and the index is rebuilt only when an RBAC object changed
//! since it was built.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{Authorizer, Decision};
use crate::authn::UserInfo;
use crate::request::RequestInfo;

/// One rule of a Role or ClusterRole (rbac/v1 `PolicyRule`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PolicyRule {
    #[serde(default)]
    pub verbs: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub api_groups: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resources: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resource_names: Vec<String>,
    #[serde(
        default,
        rename = "nonResourceURLs",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub non_resource_urls: Vec<String>,
}

fn has(list: &[String], want: &str) -> bool {
    list.iter().any(|v| v == "*" || v == want)
}

impl PolicyRule {
    /// Whether this rule grants `r` (upstream's `RuleAllows`).
    pub fn allows(&self, r: &RequestInfo) -> bool {
        if !has(&self.verbs, &r.verb) {
            return false;
        }
        if !r.is_resource_request {
            return self.non_resource_urls.iter().any(|u| {
                u == "*"
                    || *u == r.path
                    || u.strip_suffix('*').is_some_and(|p| r.path.starts_with(p))
            });
        }
        if !has(&self.api_groups, &r.group) {
            return false;
        }
        let combined = if r.subresource.is_empty() {
            r.resource.clone()
        } else {
            format!("{}/{}", r.resource, r.subresource)
        };
        let resource = self.resources.iter().any(|res| {
            res == "*"
                || *res == combined
                || (!r.subresource.is_empty()
                    && res.strip_prefix("*/") == Some(r.subresource.as_str()))
        });
        resource && (self.resource_names.is_empty() || self.resource_names.contains(&r.name))
    }
}

/// Where the RBAC objects come from: the watch cache in the server, lists in tests.
pub trait PolicySource: Send + Sync {
    /// A number that changes whenever any Role, ClusterRole or binding changes.
    fn generation(&self) -> i64;
    /// Every object of `resource` (`roles`, `clusterroles`, `rolebindings`,
    /// `clusterrolebindings`).
    fn objects(&self, resource: &str) -> Vec<Value>;
}

/// The roles of the watch cache.
pub struct CachedPolicy {
    pub cache: Arc<crate::cache::Cacher>,
}

fn rbac_type(resource: &str) -> &'static skiff_apimachinery::catalog::ResourceType {
    skiff_apimachinery::catalog::lookup("rbac.authorization.k8s.io", "v1", resource)
        .expect("rbac resources are in the catalog")
}

impl PolicySource for CachedPolicy {
    fn generation(&self) -> i64 {
        [
            "roles",
            "clusterroles",
            "rolebindings",
            "clusterrolebindings",
        ]
        .iter()
        .map(|r| self.cache.resource(rbac_type(r)).last_change())
        .max()
        .unwrap_or(0)
    }

    fn objects(&self, resource: &str) -> Vec<Value> {
        let snapshot = self.cache.resource(rbac_type(resource)).list("");
        snapshot
            .objects
            .iter()
            .filter_map(|c| c.object().ok())
            .collect()
    }
}

/// Who a binding names, as the index keys it: users (service accounts become their user name)
/// and groups.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Subject {
    User(String),
    Group(String),
}

/// The rules one binding grants, and where it came from (for rules reviews and reasons).
#[derive(Debug, Clone)]
struct Grant {
    rules: Arc<Vec<PolicyRule>>,
}

/// Bindings by subject, each resolved to its role's rules.
#[derive(Debug, Default)]
struct Index {
    generation: i64,
    /// ClusterRoleBindings: apply in every namespace and at the cluster scope.
    cluster: HashMap<Subject, Vec<Grant>>,
    /// RoleBindings by (namespace, subject).
    namespaced: HashMap<(String, Subject), Vec<Grant>>,
    /// Bindings whose role does not exist, by subject: upstream reports them in the reason.
    missing: HashMap<Subject, Vec<String>>,
}

fn name_of(o: &Value) -> (String, String) {
    let meta = &o["metadata"];
    (
        meta["namespace"].as_str().unwrap_or_default().to_string(),
        meta["name"].as_str().unwrap_or_default().to_string(),
    )
}

fn rules_of(o: &Value) -> Arc<Vec<PolicyRule>> {
    Arc::new(serde_json::from_value(o["rules"].clone()).unwrap_or_default())
}

fn subjects(binding: &Value, namespace: &str) -> Vec<Subject> {
    let mut out = Vec::new();
    for s in binding["subjects"].as_array().into_iter().flatten() {
        let name = s["name"].as_str().unwrap_or_default().to_string();
        match s["kind"].as_str() {
            Some("User") => out.push(Subject::User(name)),
            Some("Group") => out.push(Subject::Group(name)),
            Some("ServiceAccount") => {
                let ns = s["namespace"]
                    .as_str()
                    .filter(|n| !n.is_empty())
                    .unwrap_or(namespace);
                out.push(Subject::User(format!("system:serviceaccount:{ns}:{name}")));
            }
            _ => {}
        }
    }
    out
}

impl Index {
    fn build(source: &dyn PolicySource, generation: i64) -> Self {
        let cluster_roles: HashMap<String, Arc<Vec<PolicyRule>>> = source
            .objects("clusterroles")
            .iter()
            .map(|o| (name_of(o).1, rules_of(o)))
            .collect();
        let roles: HashMap<(String, String), Arc<Vec<PolicyRule>>> = source
            .objects("roles")
            .iter()
            .map(|o| (name_of(o), rules_of(o)))
            .collect();
        let mut index = Index {
            generation,
            ..Default::default()
        };
        for b in source.objects("clusterrolebindings") {
            let role = b["roleRef"]["name"].as_str().unwrap_or_default();
            let grant = cluster_roles.get(role).cloned();
            for s in subjects(&b, "") {
                match &grant {
                    Some(rules) => index.cluster.entry(s).or_default().push(Grant {
                        rules: rules.clone(),
                    }),
                    None => index.missing.entry(s).or_default().push(format!(
                        "clusterrole.rbac.authorization.k8s.io \"{role}\" not found"
                    )),
                }
            }
        }
        for b in source.objects("rolebindings") {
            let (ns, _) = name_of(&b);
            let role = b["roleRef"]["name"].as_str().unwrap_or_default();
            let (grant, what) = if b["roleRef"]["kind"] == "Role" {
                (roles.get(&(ns.clone(), role.to_string())).cloned(), "role")
            } else {
                (cluster_roles.get(role).cloned(), "clusterrole")
            };
            for s in subjects(&b, &ns) {
                match &grant {
                    Some(rules) => {
                        index
                            .namespaced
                            .entry((ns.clone(), s))
                            .or_default()
                            .push(Grant {
                                rules: rules.clone(),
                            })
                    }
                    None => index.missing.entry(s).or_default().push(format!(
                        "{what}.rbac.authorization.k8s.io \"{role}\" not found"
                    )),
                }
            }
        }
        index
    }

    /// The grants that apply to `user` in `namespace` (cluster-wide ones first).
    fn grants<'a>(&'a self, user: &UserInfo, namespace: &str) -> Vec<&'a Grant> {
        let keys: Vec<Subject> = std::iter::once(Subject::User(user.name.clone()))
            .chain(user.groups.iter().map(|g| Subject::Group(g.clone())))
            .collect();
        let mut out = Vec::new();
        for k in &keys {
            out.extend(self.cluster.get(k).into_iter().flatten());
        }
        if !namespace.is_empty() {
            for k in keys {
                out.extend(
                    self.namespaced
                        .get(&(namespace.to_string(), k))
                        .into_iter()
                        .flatten(),
                );
            }
        }
        out
    }
}

/// The RBAC authorizer over a [`PolicySource`].
pub struct Rbac {
    source: Box<dyn PolicySource>,
    /// The current index; replaced whole when the source's generation moves.
    index: RwLock<Arc<Index>>,
    /// Serializes rebuilds so a burst of requests after a change builds the index once.
    rebuild: Mutex<()>,
}

impl std::fmt::Debug for Rbac {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rbac").finish_non_exhaustive()
    }
}

impl Rbac {
    pub fn new(source: Box<dyn PolicySource>) -> Self {
        Self {
            source,
            index: RwLock::new(Arc::new(Index {
                generation: -1,
                ..Default::default()
            })),
            rebuild: Mutex::new(()),
        }
    }

    fn index(&self) -> Arc<Index> {
        let generation = self.source.generation();
        let current = self.index.read().clone();
        if current.generation == generation {
            return current;
        }
        let _one = self.rebuild.lock();
        let current = self.index.read().clone();
        if current.generation == generation {
            return current;
        }
        let fresh = Arc::new(Index::build(self.source.as_ref(), generation));
        *self.index.write() = fresh.clone();
        fresh
    }

    /// The rules `user` holds in `namespace` (SelfSubjectRulesReview): cluster-wide ones, then
    /// the namespace's.
    pub fn rules_for(&self, user: &UserInfo, namespace: &str) -> Vec<PolicyRule> {
        let index = self.index();
        let mut out: Vec<PolicyRule> = Vec::new();
        for g in index.grants(user, namespace) {
            for r in g.rules.iter() {
                if !out.contains(r) {
                    out.push(r.clone());
                }
            }
        }
        out
    }
}

impl Authorizer for Rbac {
    fn authorize(&self, user: &UserInfo, request: &RequestInfo) -> Decision {
        let index = self.index();
        if index
            .grants(user, &request.namespace)
            .iter()
            .any(|g| g.rules.iter().any(|r| r.allows(request)))
        {
            return Decision::Allow;
        }
        let mut missing: Vec<&String> = std::iter::once(Subject::User(user.name.clone()))
            .chain(user.groups.iter().map(|g| Subject::Group(g.clone())))
            .filter_map(|s| index.missing.get(&s))
            .flatten()
            .collect();
        if missing.is_empty() {
            return Decision::NoOpinion(String::new());
        }
        missing.sort();
        missing.dedup();
        let list: Vec<&str> = missing.iter().map(|s| s.as_str()).collect();
        let joined = if list.len() == 1 {
            list[0].to_string()
        } else {
            format!("[{}]", list.join(", "))
        };
        Decision::NoOpinion(format!("RBAC: {joined}"))
    }
}

#[cfg(test)]
#[path = "rbac_tests.rs"]
mod tests;
