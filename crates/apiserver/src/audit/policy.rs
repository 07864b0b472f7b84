//! The audit policy (`--audit-policy-file`, `audit.k8s.io/v1` Policy): which requests are
//! recorded at which level. Rules are tried in order and the first that matches decides, as
//! upstream's policy checker; a request no rule matches is not recorded.

use std::path::Path;

use serde::Deserialize;

use crate::authn::UserInfo;
use crate::request::RequestInfo;

/// How much of a request an event records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Deserialize)]
pub enum Level {
    /// Not recorded at all.
    None,
    /// Who did what to which object, and the response code; no bodies.
    Metadata,
    /// Metadata and the request body.
    Request,
    /// Metadata, the request body and the response body.
    RequestResponse,
}

impl Level {
    pub fn as_str(self) -> &'static str {
        match self {
            Level::None => "None",
            Level::Metadata => "Metadata",
            Level::Request => "Request",
            Level::RequestResponse => "RequestResponse",
        }
    }
}

/// The stages of a request an event can be sent at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub enum Stage {
    /// As soon as the request is authenticated, before anything else.
    RequestReceived,
    /// When the response headers of a long-running request (a watch) are sent.
    ResponseStarted,
    /// When the response is complete.
    ResponseComplete,
    /// When a handler panicked (Skiff's never reach the client as panics; never sent).
    Panic,
}

impl Stage {
    pub fn as_str(self) -> &'static str {
        match self {
            Stage::RequestReceived => "RequestReceived",
            Stage::ResponseStarted => "ResponseStarted",
            Stage::ResponseComplete => "ResponseComplete",
            Stage::Panic => "Panic",
        }
    }
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct GroupResources {
    #[serde(default)]
    group: String,
    #[serde(default)]
    resources: Vec<String>,
    #[serde(default)]
    resource_names: Vec<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Rule {
    level: Level,
    #[serde(default)]
    users: Vec<String>,
    #[serde(default)]
    user_groups: Vec<String>,
    #[serde(default)]
    verbs: Vec<String>,
    #[serde(default)]
    resources: Vec<GroupResources>,
    #[serde(default)]
    namespaces: Vec<String>,
    #[serde(default, rename = "nonResourceURLs")]
    non_resource_urls: Vec<String>,
    #[serde(default)]
    omit_stages: Vec<Stage>,
    omit_managed_fields: Option<bool>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
struct File {
    api_version: String,
    kind: String,
    #[serde(default)]
    rules: Vec<Rule>,
    #[serde(default)]
    omit_stages: Vec<Stage>,
    #[serde(default)]
    omit_managed_fields: bool,
}

/// What the policy decides for one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    pub level: Level,
    /// The policy's omitted stages and the rule's, together.
    pub omit_stages: Vec<Stage>,
    /// Whether `metadata.managedFields` is left out of recorded bodies.
    pub omit_managed_fields: bool,
}

/// A loaded policy.
#[derive(Debug, Clone)]
pub struct Policy {
    file: File,
}

/// Why a policy file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("reading audit policy file {path}: {reason}")]
    Read { path: String, reason: String },
    #[error("failed decoding audit policy file {path}: {reason}")]
    Parse { path: String, reason: String },
}

impl Policy {
    pub fn load(path: &Path) -> Result<Self, Error> {
        let text = std::fs::read_to_string(path).map_err(|e| Error::Read {
            path: path.display().to_string(),
            reason: e.to_string(),
        })?;
        Self::parse(&text).map_err(|reason| Error::Parse {
            path: path.display().to_string(),
            reason,
        })
    }

    /// Parses a Policy (YAML or JSON).
    pub fn parse(text: &str) -> Result<Self, String> {
        let file: File = serde_yaml::from_str(text).map_err(|e| e.to_string())?;
        if file.kind != "Policy" {
            return Err(format!("kind {:?}: expected Policy", file.kind));
        }
        if file.api_version != "audit.k8s.io/v1" {
            return Err(format!(
                "apiVersion {:?}: expected audit.k8s.io/v1",
                file.api_version
            ));
        }
        if file.rules.is_empty() {
            return Err("loaded illegal policy with 0 rules".into());
        }
        Ok(Self { file })
    }

    /// The level and options for a request of `user` (the authenticated user, before
    /// impersonation, as upstream).
    pub fn decide(&self, user: &UserInfo, info: &RequestInfo) -> Decision {
        let Some(rule) = self.file.rules.iter().find(|r| r.matches(user, info)) else {
            return Decision {
                level: Level::None,
                omit_stages: self.file.omit_stages.clone(),
                omit_managed_fields: self.file.omit_managed_fields,
            };
        };
        let mut omit_stages = self.file.omit_stages.clone();
        omit_stages.extend(rule.omit_stages.iter().copied());
        Decision {
            level: rule.level,
            omit_stages,
            omit_managed_fields: rule
                .omit_managed_fields
                .unwrap_or(self.file.omit_managed_fields),
        }
    }
}

impl Rule {
    fn matches(&self, user: &UserInfo, info: &RequestInfo) -> bool {
        if !self.users.is_empty() && !self.users.contains(&user.name) {
            return false;
        }
        if !self.user_groups.is_empty() && !user.groups.iter().any(|g| self.user_groups.contains(g))
        {
            return false;
        }
        if !self.verbs.is_empty() && !self.verbs.contains(&info.verb) {
            return false;
        }
        if info.is_resource_request {
            if !self.non_resource_urls.is_empty() {
                return false;
            }
            if !self.namespaces.is_empty() && !self.namespaces.contains(&info.namespace) {
                return false;
            }
            self.resources.is_empty() || self.resources.iter().any(|gr| gr.matches(info))
        } else {
            if !self.namespaces.is_empty() || !self.resources.is_empty() {
                return false;
            }
            self.non_resource_urls.is_empty()
                || self
                    .non_resource_urls
                    .iter()
                    .any(|u| match u.strip_suffix('*') {
                        Some(prefix) => info.path.starts_with(prefix),
                        None => *u == info.path,
                    })
        }
    }
}

impl GroupResources {
    fn matches(&self, info: &RequestInfo) -> bool {
        if self.group != info.group {
            return false;
        }
        if self.resources.is_empty() {
            return true;
        }
        if !self.resource_names.is_empty() && !self.resource_names.contains(&info.name) {
            return false;
        }
        let combined = if info.subresource.is_empty() {
            info.resource.clone()
        } else {
            format!("{}/{}", info.resource, info.subresource)
        };
        self.resources.iter().any(|r| {
            r == "*"
                || *r == combined
                || (!info.subresource.is_empty()
                    && r.strip_prefix("*/") == Some(info.subresource.as_str()))
                || r.strip_suffix("/*") == Some(info.resource.as_str())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const POLICY: &str = r#"
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: None
  users: ["system:kube-proxy"]
- level: None
  nonResourceURLs: ["/healthz*", "/version"]
- level: RequestResponse
  resources:
  - group: ""
    resources: ["configmaps"]
    resourceNames: ["watched"]
- level: Request
  verbs: [create, update]
  namespaces: [prod]
  omitManagedFields: true
- level: Metadata
  resources:
  - group: ""
    resources: ["secrets", "pods/log", "*/status"]
  - group: apps
  omitStages: [ResponseStarted]
- level: Metadata
  userGroups: ["auditors"]
"#;

    fn user(name: &str, group: &str) -> UserInfo {
        UserInfo {
            name: name.into(),
            uid: String::new(),
            groups: vec![group.into()],
            extra: Default::default(),
        }
    }

    fn req(verb: &str, group: &str, resource: &str, ns: &str, name: &str) -> RequestInfo {
        RequestInfo::resource_request(verb, group, resource, ns, name)
    }

    fn level(u: &UserInfo, i: &RequestInfo) -> Level {
        Policy::parse(POLICY).unwrap().decide(u, i).level
    }

    #[test]
    fn the_first_matching_rule_decides() {
        let alice = user("alice", "dev");
        let proxy = user("system:kube-proxy", "x");
        assert_eq!(
            level(&proxy, &req("get", "", "secrets", "a", "s")),
            Level::None
        );
        assert_eq!(
            level(&alice, &req("get", "", "secrets", "a", "s")),
            Level::Metadata
        );
        assert_eq!(
            level(&alice, &req("get", "", "configmaps", "a", "watched")),
            Level::RequestResponse
        );
        assert_eq!(
            level(&alice, &req("get", "", "configmaps", "a", "other")),
            Level::None
        );
        assert_eq!(
            level(&alice, &req("create", "", "configmaps", "prod", "x")),
            Level::Request
        );
        assert_eq!(
            level(&alice, &req("create", "", "configmaps", "dev", "x")),
            Level::None
        );
        assert_eq!(
            level(&user("bob", "auditors"), &req("list", "", "pods", "", "")),
            Level::Metadata
        );
    }

    #[test]
    fn resources_match_by_group_subresource_and_wildcards() {
        let alice = user("alice", "dev");
        assert_eq!(
            level(&alice, &req("get", "", "pods/log", "a", "p")),
            Level::Metadata
        );
        assert_eq!(
            level(&alice, &req("get", "", "pods", "a", "p")),
            Level::None
        );
        assert_eq!(
            level(&alice, &req("update", "", "nodes/status", "", "n")),
            Level::Metadata
        );
        assert_eq!(
            level(&alice, &req("get", "apps", "deployments", "a", "d")),
            Level::Metadata
        );
        assert_eq!(
            level(&alice, &req("get", "batch", "jobs", "a", "d")),
            Level::None
        );
    }

    #[test]
    fn non_resource_urls_match_exactly_or_by_prefix_and_never_resource_rules() {
        let auditor = user("bob", "auditors");
        let path = |p: &str| RequestInfo {
            verb: "get".into(),
            path: p.into(),
            ..Default::default()
        };
        assert_eq!(level(&auditor, &path("/healthz/etcd")), Level::None);
        assert_eq!(level(&auditor, &path("/version")), Level::None);
        assert_eq!(level(&auditor, &path("/versions")), Level::Metadata);
        assert_eq!(level(&user("alice", "dev"), &path("/api")), Level::None);
    }

    #[test]
    fn stages_and_managed_fields_combine_policy_and_rule() {
        let p = Policy::parse(POLICY).unwrap();
        let d = p.decide(&user("a", "g"), &req("get", "", "secrets", "a", "s"));
        assert_eq!(
            d.omit_stages,
            [Stage::RequestReceived, Stage::ResponseStarted]
        );
        assert!(!d.omit_managed_fields);
        let d = p.decide(&user("a", "g"), &req("create", "", "secrets", "prod", ""));
        assert!(d.omit_managed_fields);
    }

    #[test]
    fn bad_policies_are_refused() {
        assert!(Policy::parse("apiVersion: audit.k8s.io/v1\nkind: Policy\nrules: []\n").is_err());
        assert!(Policy::parse(&POLICY.replace("audit.k8s.io/v1", "audit.k8s.io/v1beta1")).is_err());
        assert!(Policy::parse(&POLICY.replace("level: Request\n", "level: Everything\n")).is_err());
    }
}
