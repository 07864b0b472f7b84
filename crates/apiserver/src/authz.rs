//! Authorization, the second gate: may this user do this verb on this resource or path. Here the
//! policy is upstream's floor: unauthenticated users may only read health, version and
//! discovery-free public paths; authenticated users may do everything. RBAC and the Node
//! authorizer plug in behind the same trait.

use crate::authn::UserInfo;
use crate::request::RequestInfo;

/// An authorizer's answer (upstream's `authorizer.Decision`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// The request may proceed.
    Allow,
    /// The request is refused with 403 and this reason.
    Deny(String),
    /// This authorizer has no opinion; the next one decides (the last one denies).
    NoOpinion,
}

pub trait Authorizer: Send + Sync {
    fn authorize(&self, user: &UserInfo, request: &RequestInfo) -> Decision;
}

/// Paths anyone may read (upstream's `system:public-info-viewer`).
pub const PUBLIC_PATHS: &[&str] = &["/healthz", "/livez", "/readyz", "/version"];

/// Allows every authenticated user, and anonymous users only on [`PUBLIC_PATHS`].
#[derive(Debug, Default)]
pub struct AllowAuthenticated;

impl Authorizer for AllowAuthenticated {
    fn authorize(&self, user: &UserInfo, request: &RequestInfo) -> Decision {
        if !user.is_anonymous() {
            return Decision::Allow;
        }
        let public = PUBLIC_PATHS
            .iter()
            .any(|p| request.path == *p || request.path.starts_with(&format!("{p}/")));
        if public && request.verb == "get" {
            Decision::Allow
        } else {
            Decision::NoOpinion
        }
    }
}

/// Upstream's forbidden message: `User "u" cannot get resource "pods" in API group "" in the
/// namespace "ns"`.
pub fn forbidden_message(user: &UserInfo, r: &RequestInfo) -> String {
    if !r.is_resource_request {
        return format!(
            "forbidden: User \"{}\" cannot {} path \"{}\"",
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
    let name = if r.name.is_empty() {
        String::new()
    } else {
        format!("{} \"{}\" is forbidden: ", resource, r.name)
    };
    format!(
        "{name}User \"{}\" cannot {} resource \"{resource}\" in API group \"{}\" {scope}",
        user.name, r.verb, r.group
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get(path: &str) -> RequestInfo {
        RequestInfo {
            verb: "get".into(),
            path: path.into(),
            ..Default::default()
        }
    }

    #[test]
    fn anonymous_users_may_read_only_public_paths() {
        let anon = UserInfo::anonymous();
        assert_eq!(
            AllowAuthenticated.authorize(&anon, &get("/healthz")),
            Decision::Allow
        );
        assert_eq!(
            AllowAuthenticated.authorize(&anon, &get("/version")),
            Decision::Allow
        );
        assert_eq!(
            AllowAuthenticated.authorize(&anon, &get("/api")),
            Decision::NoOpinion
        );
    }

    #[test]
    fn authenticated_users_may_do_anything() {
        let user = UserInfo {
            name: "admin".into(),
            uid: String::new(),
            groups: vec!["system:masters".into()],
        };
        assert_eq!(
            AllowAuthenticated.authorize(&user, &get("/api/v1/pods")),
            Decision::Allow
        );
    }
}
