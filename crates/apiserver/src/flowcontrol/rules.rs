//! FlowSchema and PriorityLevelConfiguration specs (`flowcontrol.apiserver.k8s.io/v1`) as the
//! classifier reads them, with upstream's defaults, and how a request matches a FlowSchema:
//! one of its rules matches when one of the rule's subjects is the requester and one of its
//! resource rules (for a resource request) or non-resource rules (otherwise) covers the
//! request.

use serde::Deserialize;

use crate::authn::UserInfo;
use crate::request::RequestInfo;

/// Upstream's default `matchingPrecedence`.
const DEFAULT_MATCHING_PRECEDENCE: i32 = 1000;

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FlowSchemaSpec {
    #[serde(default)]
    pub priority_level_configuration: Reference,
    #[serde(default = "default_precedence")]
    pub matching_precedence: i32,
    #[serde(default)]
    pub distinguisher_method: Option<DistinguisherMethod>,
    #[serde(default)]
    pub rules: Vec<PolicyRulesWithSubjects>,
}

fn default_precedence() -> i32 {
    DEFAULT_MATCHING_PRECEDENCE
}

#[derive(Debug, Clone, Default, Deserialize)]
pub struct Reference {
    #[serde(default)]
    pub name: String,
}

#[derive(Debug, Clone, Deserialize)]
pub struct DistinguisherMethod {
    #[serde(rename = "type", default)]
    pub type_: String,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PolicyRulesWithSubjects {
    #[serde(default)]
    pub subjects: Vec<Subject>,
    #[serde(default)]
    pub resource_rules: Vec<ResourcePolicyRule>,
    #[serde(default)]
    pub non_resource_rules: Vec<NonResourcePolicyRule>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Subject {
    #[serde(default)]
    pub kind: String,
    #[serde(default)]
    pub user: Option<Named>,
    #[serde(default)]
    pub group: Option<Named>,
    #[serde(default)]
    pub service_account: Option<ServiceAccountSubject>,
}

#[derive(Debug, Clone, Default, Deserialize)]
pub struct Named {
    #[serde(default)]
    pub name: String,
}

#[derive(Debug, Clone, Default, Deserialize)]
pub struct ServiceAccountSubject {
    #[serde(default)]
    pub namespace: String,
    #[serde(default)]
    pub name: String,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourcePolicyRule {
    #[serde(default)]
    pub verbs: Vec<String>,
    #[serde(default)]
    pub api_groups: Vec<String>,
    #[serde(default)]
    pub resources: Vec<String>,
    #[serde(default)]
    pub cluster_scope: bool,
    #[serde(default)]
    pub namespaces: Vec<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
pub struct NonResourcePolicyRule {
    #[serde(default)]
    pub verbs: Vec<String>,
    #[serde(rename = "nonResourceURLs", default)]
    pub non_resource_urls: Vec<String>,
}

/// `*` or `want` among `list`.
fn has(list: &[String], want: &str) -> bool {
    list.iter().any(|v| v == "*" || v == want)
}

impl FlowSchemaSpec {
    /// Whether a request of `user` described by `info` belongs to this FlowSchema.
    pub fn matches(&self, info: &RequestInfo, user: &UserInfo) -> bool {
        self.rules.iter().any(|rule| rule.matches(info, user))
    }

    /// The flow a request belongs to within this FlowSchema: its user, its namespace, or one
    /// flow for all (upstream's flow distinguisher).
    pub fn distinguisher<'a>(&self, info: &'a RequestInfo, user: &'a UserInfo) -> &'a str {
        match self.distinguisher_method.as_ref().map(|d| d.type_.as_str()) {
            Some("ByUser") => &user.name,
            Some("ByNamespace") => &info.namespace,
            _ => "",
        }
    }
}

impl PolicyRulesWithSubjects {
    fn matches(&self, info: &RequestInfo, user: &UserInfo) -> bool {
        if !self.subjects.iter().any(|s| s.matches(user)) {
            return false;
        }
        if info.is_resource_request {
            self.resource_rules.iter().any(|r| r.matches(info))
        } else {
            self.non_resource_rules.iter().any(|r| r.matches(info))
        }
    }
}

impl Subject {
    fn matches(&self, user: &UserInfo) -> bool {
        match self.kind.as_str() {
            "User" => self
                .user
                .as_ref()
                .is_some_and(|u| u.name == "*" || u.name == user.name),
            "Group" => self
                .group
                .as_ref()
                .is_some_and(|g| g.name == "*" || user.groups.contains(&g.name)),
            "ServiceAccount" => self.service_account.as_ref().is_some_and(|sa| {
                let Some(rest) = user.name.strip_prefix("system:serviceaccount:") else {
                    return false;
                };
                let Some((namespace, name)) = rest.split_once(':') else {
                    return false;
                };
                namespace == sa.namespace && (sa.name == "*" || sa.name == name)
            }),
            _ => false,
        }
    }
}

impl ResourcePolicyRule {
    fn matches(&self, info: &RequestInfo) -> bool {
        if !has(&self.verbs, &info.verb) || !has(&self.api_groups, &info.group) {
            return false;
        }
        let resource = self.resources.iter().any(|r| {
            r == "*"
                || match r.split_once('/') {
                    Some((resource, sub)) => resource == info.resource && sub == info.subresource,
                    None => *r == info.resource && info.subresource.is_empty(),
                }
        });
        if !resource {
            return false;
        }
        if info.namespace.is_empty() {
            self.cluster_scope
        } else {
            has(&self.namespaces, &info.namespace)
        }
    }
}

impl NonResourcePolicyRule {
    fn matches(&self, info: &RequestInfo) -> bool {
        has(&self.verbs, &info.verb)
            && self.non_resource_urls.iter().any(|pattern| {
                pattern == "*"
                    || *pattern == info.path
                    || pattern
                        .strip_suffix('*')
                        .is_some_and(|prefix| info.path.starts_with(prefix))
            })
    }
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PriorityLevelSpec {
    #[serde(rename = "type", default)]
    pub type_: String,
    #[serde(default)]
    pub limited: Option<Limited>,
    #[serde(default)]
    pub exempt: Option<Exempt>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Limited {
    /// Upstream's default: 30.
    pub nominal_concurrency_shares: Option<u32>,
    /// Upstream's default: 0.
    pub lendable_percent: Option<u32>,
    /// Unset: the level may borrow without limit.
    pub borrowing_limit_percent: Option<u32>,
    #[serde(default)]
    pub limit_response: LimitResponse,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Exempt {
    /// Upstream's default: 0.
    pub nominal_concurrency_shares: Option<u32>,
    /// Upstream's default: 0.
    pub lendable_percent: Option<u32>,
}

#[derive(Debug, Clone, Default, Deserialize)]
pub struct LimitResponse {
    #[serde(rename = "type", default)]
    pub type_: String,
    #[serde(default)]
    pub queuing: Option<Queuing>,
}

/// How a priority level queues (upstream's defaults: 64 queues, hands of 8, 50 per queue).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Queuing {
    #[serde(default = "default_queues")]
    pub queues: u32,
    #[serde(default = "default_hand_size")]
    pub hand_size: u32,
    #[serde(default = "default_queue_length_limit")]
    pub queue_length_limit: u32,
}

fn default_queues() -> u32 {
    64
}

fn default_hand_size() -> u32 {
    8
}

fn default_queue_length_limit() -> u32 {
    50
}

impl PriorityLevelSpec {
    pub fn is_exempt(&self) -> bool {
        self.type_ == "Exempt"
    }

    /// The level's share of the server's concurrency.
    pub fn shares(&self) -> u32 {
        match (&self.limited, &self.exempt) {
            (Some(l), _) if !self.is_exempt() => l.nominal_concurrency_shares.unwrap_or(30),
            (_, Some(e)) => e.nominal_concurrency_shares.unwrap_or(0),
            _ => 0,
        }
    }

    /// The part of its nominal seats the level lends to others, and the most it borrows
    /// from them (in percent of its nominal seats; `None`: without limit). An exempt level
    /// never has a borrowing limit.
    pub fn lending(&self) -> (u32, Option<u32>) {
        match (&self.limited, &self.exempt) {
            (Some(l), _) if !self.is_exempt() => {
                (l.lendable_percent.unwrap_or(0), l.borrowing_limit_percent)
            }
            (_, Some(e)) => (e.lendable_percent.unwrap_or(0), None),
            _ => (0, None),
        }
    }

    /// How the level queues; `None`: it rejects what it cannot run at once (or is exempt).
    pub fn queuing(&self) -> Option<Queuing> {
        let limited = self.limited.as_ref().filter(|_| !self.is_exempt())?;
        (limited.limit_response.type_ == "Queue").then(|| {
            limited.limit_response.queuing.unwrap_or(Queuing {
                queues: default_queues(),
                hand_size: default_hand_size(),
                queue_length_limit: default_queue_length_limit(),
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn user(name: &str, groups: &[&str]) -> UserInfo {
        UserInfo {
            name: name.into(),
            groups: groups.iter().map(|g| g.to_string()).collect(),
            ..Default::default()
        }
    }

    fn resource(verb: &str, group: &str, resource: &str, sub: &str, ns: &str) -> RequestInfo {
        RequestInfo {
            is_resource_request: true,
            verb: verb.into(),
            group: group.into(),
            resource: resource.into(),
            subresource: sub.into(),
            namespace: ns.into(),
            ..Default::default()
        }
    }

    fn path(verb: &str, path: &str) -> RequestInfo {
        RequestInfo {
            verb: verb.into(),
            path: path.into(),
            ..Default::default()
        }
    }

    fn spec(value: serde_json::Value) -> FlowSchemaSpec {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn subjects_match_users_groups_and_service_accounts_with_wildcards() {
        let any_pod_read = |subject: serde_json::Value| {
            spec(
                json!({"priorityLevelConfiguration": {"name": "x"}, "rules": [{
                "subjects": [subject],
                "resourceRules": [{"verbs": ["get"], "apiGroups": [""], "resources": ["pods"],
                                   "namespaces": ["*"]}]}]}),
            )
        };
        let get = resource("get", "", "pods", "", "default");
        let alice = user("alice", &["devs", "system:authenticated"]);
        let sa = user("system:serviceaccount:kube-system:ctrl", &[]);
        let by_user = any_pod_read(json!({"kind": "User", "user": {"name": "alice"}}));
        assert!(by_user.matches(&get, &alice));
        assert!(!by_user.matches(&get, &sa));
        let any_user = any_pod_read(json!({"kind": "User", "user": {"name": "*"}}));
        assert!(any_user.matches(&get, &sa));
        let group = any_pod_read(json!({"kind": "Group", "group": {"name": "devs"}}));
        assert!(group.matches(&get, &alice) && !group.matches(&get, &sa));
        let every_sa = any_pod_read(json!({"kind": "ServiceAccount",
            "serviceAccount": {"namespace": "kube-system", "name": "*"}}));
        assert!(every_sa.matches(&get, &sa) && !every_sa.matches(&get, &alice));
        let other_ns = any_pod_read(json!({"kind": "ServiceAccount",
            "serviceAccount": {"namespace": "default", "name": "ctrl"}}));
        assert!(!other_ns.matches(&get, &sa));
        // a subject whose kind and member disagree matches no one
        let broken = any_pod_read(json!({"kind": "User", "group": {"name": "devs"}}));
        assert!(!broken.matches(&get, &alice));
    }

    #[test]
    fn resource_rules_match_verbs_groups_subresources_and_scope() {
        let s = spec(
            json!({"priorityLevelConfiguration": {"name": "x"}, "rules": [{
            "subjects": [{"kind": "Group", "group": {"name": "*"}}],
            "resourceRules": [
                {"verbs": ["get", "list"], "apiGroups": ["apps"], "resources": ["deployments"],
                 "namespaces": ["team-a"]},
                {"verbs": ["*"], "apiGroups": [""], "resources": ["nodes", "pods/status"],
                 "clusterScope": true, "namespaces": ["*"]}]}]}),
        );
        let u = user("u", &["g"]);
        assert!(s.matches(&resource("list", "apps", "deployments", "", "team-a"), &u));
        assert!(!s.matches(&resource("list", "apps", "deployments", "", "team-b"), &u));
        assert!(!s.matches(&resource("delete", "apps", "deployments", "", "team-a"), &u));
        assert!(!s.matches(
            &resource("get", "apps", "deployments", "scale", "team-a"),
            &u
        ));
        assert!(s.matches(&resource("patch", "", "nodes", "", ""), &u));
        assert!(s.matches(&resource("update", "", "pods", "status", "ns"), &u));
        assert!(!s.matches(&resource("update", "", "pods", "", "ns"), &u));
        // a cluster-scoped request needs clusterScope; "*" namespaces is not enough
        let namespaced_only = spec(
            json!({"priorityLevelConfiguration": {"name": "x"}, "rules": [{
            "subjects": [{"kind": "Group", "group": {"name": "*"}}],
            "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"],
                               "namespaces": ["*"]}]}]}),
        );
        assert!(namespaced_only.matches(&resource("get", "", "pods", "", "ns"), &u));
        assert!(!namespaced_only.matches(&resource("get", "", "nodes", "", ""), &u));
        // a resource rule never matches a non-resource request
        assert!(!namespaced_only.matches(&path("get", "/healthz"), &u));
    }

    #[test]
    fn non_resource_rules_match_paths_and_prefixes() {
        let s = spec(
            json!({"priorityLevelConfiguration": {"name": "x"}, "rules": [{
            "subjects": [{"kind": "Group", "group": {"name": "*"}}],
            "nonResourceRules": [{"verbs": ["get"],
                                  "nonResourceURLs": ["/healthz", "/readyz/*"]}]}]}),
        );
        let u = user("u", &[]);
        assert!(s.matches(&path("get", "/healthz"), &u));
        assert!(!s.matches(&path("get", "/healthz/etcd"), &u));
        assert!(s.matches(&path("get", "/readyz/ping"), &u));
        assert!(!s.matches(&path("post", "/healthz"), &u));
        assert!(!s.matches(&resource("get", "", "pods", "", "ns"), &u));
    }

    #[test]
    fn flows_are_told_apart_by_user_namespace_or_not_at_all() {
        let info = resource("get", "", "pods", "", "ns1");
        let u = user("alice", &[]);
        let with = |m: Option<&str>| FlowSchemaSpec {
            distinguisher_method: m.map(|t| DistinguisherMethod { type_: t.into() }),
            ..Default::default()
        };
        assert_eq!(with(Some("ByUser")).distinguisher(&info, &u), "alice");
        assert_eq!(with(Some("ByNamespace")).distinguisher(&info, &u), "ns1");
        assert_eq!(with(None).distinguisher(&info, &u), "");
        assert_eq!(with(None).matching_precedence, 0);
        assert_eq!(spec(json!({})).matching_precedence, 1000);
    }

    #[test]
    fn priority_levels_read_with_upstreams_defaults() {
        let pl = |v: serde_json::Value| -> PriorityLevelSpec { serde_json::from_value(v).unwrap() };
        let queued =
            pl(json!({"type": "Limited", "limited": {"limitResponse": {"type": "Queue"}}}));
        assert_eq!(queued.shares(), 30);
        assert_eq!(
            queued.queuing(),
            Some(Queuing {
                queues: 64,
                hand_size: 8,
                queue_length_limit: 50
            })
        );
        let reject = pl(
            json!({"type": "Limited", "limited": {"nominalConcurrencyShares": 5,
                                                              "limitResponse": {"type": "Reject"}}}),
        );
        assert_eq!((reject.shares(), reject.queuing()), (5, None));
        // lends nothing and borrows without limit unless told
        assert_eq!(queued.lending(), (0, None));
        let lender = pl(
            json!({"type": "Limited", "limited": {"lendablePercent": 90, "borrowingLimitPercent": 10,
                                                  "limitResponse": {"type": "Reject"}}}),
        );
        assert_eq!(lender.lending(), (90, Some(10)));
        let exempt = pl(json!({"type": "Exempt", "exempt": {}}));
        assert!(exempt.is_exempt());
        assert_eq!((exempt.shares(), exempt.queuing()), (0, None));
        assert_eq!(exempt.lending(), (0, None));
    }
}
