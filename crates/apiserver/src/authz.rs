//! Authorization, the second gate: may this user do this verb on this resource or path. This
//! file owns the `Authorizer` trait, the chain the server asks (with upstream's privileged
//! `system:masters` group in front), the `--authorization-mode` names, the trivial authorizers
//! and upstream's 403 message; the real policies live in the submodules.
//!
//! # Layout
//! - [`rbac`]: Roles, ClusterRoles and their bindings.
//! - [`node`]: the Node authorizer (kubelets reach only their own pods' objects).
//! - [`aggregation`]: fills the rules of aggregated ClusterRoles.

pub mod aggregation;
pub mod node;
pub mod rbac;

use crate::authn::UserInfo;
use crate::error::{ApiError, Target};
use crate::request::RequestInfo;

/// An authorizer's answer (upstream's `authorizer.Decision` with its reason).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// The request may proceed.
    Allow,
    /// The request is refused with 403 and this reason; later authorizers are not asked.
    Deny(String),
    /// This authorizer has no opinion (the reason, possibly empty, says why); the next one
    /// decides, and when none does the request is refused with the reasons joined.
    NoOpinion(String),
}

impl Decision {
    /// No opinion and nothing to say.
    pub fn pass() -> Self {
        Decision::NoOpinion(String::new())
    }
}

pub trait Authorizer: Send + Sync {
    fn authorize(&self, user: &UserInfo, request: &RequestInfo) -> Decision;
}

impl<T: Authorizer + ?Sized> Authorizer for std::sync::Arc<T> {
    fn authorize(&self, user: &UserInfo, request: &RequestInfo) -> Decision {
        (**self).authorize(user, request)
    }
}

/// Upstream's `--authorization-mode` values Skiff knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Every request is allowed, anonymous ones included.
    AlwaysAllow,
    /// Every request is refused (except those of `system:masters`).
    AlwaysDeny,
    /// The Node authorizer: kubelets reach only what their pods need.
    Node,
    /// Roles and bindings.
    Rbac,
}

impl std::str::FromStr for Mode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "AlwaysAllow" => Ok(Mode::AlwaysAllow),
            "AlwaysDeny" => Ok(Mode::AlwaysDeny),
            "Node" => Ok(Mode::Node),
            "RBAC" => Ok(Mode::Rbac),
            other => Err(format!(
                "authorization mode {other:?} is not supported (AlwaysAllow, AlwaysDeny, Node, RBAC)"
            )),
        }
    }
}

/// Upstream's default for a cluster set up by kubeadm: `Node,RBAC`.
pub const DEFAULT_MODES: &[Mode] = &[Mode::Node, Mode::Rbac];

/// Parses a comma-separated `--authorization-mode` (`Node,RBAC`).
pub fn parse_modes(s: &str) -> Result<Vec<Mode>, String> {
    s.split(',')
        .map(str::trim)
        .filter(|m| !m.is_empty())
        .map(str::parse)
        .collect()
}

/// The authorizers in order, behind upstream's privileged-group check (`system:masters` may
/// do anything, whatever the modes).
#[derive(Default)]
pub struct Chain {
    pub authorizers: Vec<Box<dyn Authorizer>>,
}

impl std::fmt::Debug for Chain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Chain")
            .field("authorizers", &self.authorizers.len())
            .finish()
    }
}

/// Upstream's `user.SystemPrivilegedGroup`.
pub const SYSTEM_MASTERS: &str = "system:masters";

impl Chain {
    /// Asks each authorizer in turn (upstream's union authorizer): the first Allow or Deny
    /// wins; otherwise the request is refused with every reason given, one per line.
    pub fn decide(&self, user: &UserInfo, request: &RequestInfo) -> Decision {
        if user.groups.iter().any(|g| g == SYSTEM_MASTERS) {
            return Decision::Allow;
        }
        let mut reasons = Vec::new();
        for a in &self.authorizers {
            match a.authorize(user, request) {
                Decision::NoOpinion(r) => {
                    if !r.is_empty() {
                        reasons.push(r);
                    }
                }
                d => return d,
            }
        }
        Decision::NoOpinion(reasons.join("\n"))
    }
}

/// Allows everything (upstream's `AlwaysAllow`).
#[derive(Debug, Default)]
pub struct AlwaysAllow;

impl Authorizer for AlwaysAllow {
    fn authorize(&self, _: &UserInfo, _: &RequestInfo) -> Decision {
        Decision::Allow
    }
}

/// Refuses everything (upstream's `AlwaysDeny`).
#[derive(Debug, Default)]
pub struct AlwaysDeny;

impl Authorizer for AlwaysDeny {
    fn authorize(&self, _: &UserInfo, _: &RequestInfo) -> Decision {
        Decision::Deny("Everything is forbidden.".into())
    }
}

/// Upstream's forbidden message without the resource prefix: `User "u" cannot get resource
/// "pods" in API group "" in the namespace "ns"`.
pub fn forbidden_message(user: &UserInfo, r: &RequestInfo) -> String {
    if !r.is_resource_request {
        return format!(
            "User \"{}\" cannot {} path \"{}\"",
            user.name, r.verb, r.path
        );
    }
    let resource = if r.subresource.is_empty() {
        r.resource.clone()
    } else {
        format!("{}/{}", r.resource, r.subresource)
    };
    let scope = if r.namespace.is_empty() {
        "at the cluster scope".to_string()
    } else {
        format!("in the namespace \"{}\"", r.namespace)
    };
    format!(
        "User \"{}\" cannot {} resource \"{resource}\" in API group \"{}\" {scope}",
        user.name, r.verb, r.group
    )
}

/// The 403 upstream answers a refused request with: `pods "x" is forbidden: <message>[:
/// <reason>]`, or `forbidden: <message>` for a path, with the Status details.
pub fn forbidden(user: &UserInfo, r: &RequestInfo, reason: &str) -> ApiError {
    let mut why = forbidden_message(user, r);
    if !reason.is_empty() {
        why = format!("{why}: {reason}");
    }
    if !r.is_resource_request {
        return ApiError::forbidden(format!("forbidden: {why}"));
    }
    ApiError::forbidden_target(
        Target {
            group: &r.group,
            resource: &r.resource,
            name: &r.name,
        },
        &why,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(name: &str, groups: &[&str]) -> UserInfo {
        UserInfo {
            name: name.into(),
            uid: String::new(),
            groups: groups.iter().map(|g| g.to_string()).collect(),
            extra: Default::default(),
        }
    }

    fn list_pods(ns: &str) -> RequestInfo {
        RequestInfo {
            is_resource_request: true,
            verb: "list".into(),
            version: "v1".into(),
            resource: "pods".into(),
            namespace: ns.into(),
            ..Default::default()
        }
    }

    struct Says(Decision);
    impl Authorizer for Says {
        fn authorize(&self, _: &UserInfo, _: &RequestInfo) -> Decision {
            self.0.clone()
        }
    }

    #[test]
    fn system_masters_may_do_anything_even_with_no_authorizer() {
        let chain = Chain::default();
        assert_eq!(
            chain.decide(&user("admin", &["system:masters"]), &list_pods("a")),
            Decision::Allow
        );
        assert!(matches!(
            chain.decide(&user("bob", &[]), &list_pods("a")),
            Decision::NoOpinion(_)
        ));
    }

    #[test]
    fn the_first_allow_or_deny_wins_and_reasons_of_the_others_are_joined() {
        let chain = Chain {
            authorizers: vec![
                Box::new(Says(Decision::NoOpinion("one".into()))),
                Box::new(Says(Decision::NoOpinion(String::new()))),
                Box::new(Says(Decision::NoOpinion("two".into()))),
            ],
        };
        assert_eq!(
            chain.decide(&user("bob", &[]), &list_pods("a")),
            Decision::NoOpinion("one\ntwo".into())
        );
        let chain = Chain {
            authorizers: vec![Box::new(AlwaysDeny), Box::new(AlwaysAllow)],
        };
        assert!(matches!(
            chain.decide(&user("bob", &[]), &list_pods("a")),
            Decision::Deny(_)
        ));
    }

    #[test]
    fn modes_parse_with_upstream_names() {
        assert_eq!(parse_modes("Node,RBAC").unwrap(), DEFAULT_MODES);
        assert_eq!(parse_modes("AlwaysAllow").unwrap(), vec![Mode::AlwaysAllow]);
        assert!(parse_modes("Webhook").is_err());
    }

    #[test]
    fn forbidden_messages_read_as_upstream() {
        let bob = user("bob", &[]);
        let e = forbidden(&bob, &list_pods("default"), "");
        assert_eq!(
            e.message,
            "pods is forbidden: User \"bob\" cannot list resource \"pods\" in API group \"\" in the namespace \"default\""
        );
        let get_log = RequestInfo {
            is_resource_request: true,
            verb: "get".into(),
            group: "apps".into(),
            resource: "deployments".into(),
            subresource: "scale".into(),
            name: "web".into(),
            namespace: "x".into(),
            ..Default::default()
        };
        assert_eq!(
            forbidden(&bob, &get_log, "why").message,
            "deployments.apps \"web\" is forbidden: User \"bob\" cannot get resource \"deployments/scale\" in API group \"apps\" in the namespace \"x\": why"
        );
        let nodes = RequestInfo {
            is_resource_request: true,
            verb: "list".into(),
            resource: "nodes".into(),
            ..Default::default()
        };
        assert_eq!(
            forbidden(&bob, &nodes, "").message,
            "nodes is forbidden: User \"bob\" cannot list resource \"nodes\" in API group \"\" at the cluster scope"
        );
        let path = RequestInfo {
            verb: "get".into(),
            path: "/metrics".into(),
            ..Default::default()
        };
        assert_eq!(
            forbidden(&bob, &path, "").message,
            "forbidden: User \"bob\" cannot get path \"/metrics\""
        );
    }
}
