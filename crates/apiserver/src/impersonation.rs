//! Impersonation, between authentication and authorization: a request carrying
//! `Impersonate-User` (and optionally `Impersonate-Group`, `Impersonate-Uid`,
//! `Impersonate-Extra-<key>`) runs as that identity once the authorizer allows the real user
//! the `impersonate` verb on each part (upstream's `users`, `groups`, `serviceaccounts`,
//! `uids` and `userextras/<key>`), which is what `kubectl --as` and `--as-group` send.

use http::HeaderMap;

use crate::authn::{ANONYMOUS, GROUP_AUTHENTICATED, GROUP_UNAUTHENTICATED, UserInfo};
use crate::authz::{self, Decision};
use crate::error::ApiError;
use crate::request::RequestInfo;

pub const USER: &str = "impersonate-user";
pub const GROUP: &str = "impersonate-group";
pub const UID: &str = "impersonate-uid";
pub const EXTRA_PREFIX: &str = "impersonate-extra-";

const SERVICE_ACCOUNT_PREFIX: &str = "system:serviceaccount:";

/// One `impersonate` check: the resource, its group, namespace and name.
fn check(
    chain: &authz::Chain,
    user: &UserInfo,
    group: &str,
    resource: &str,
    namespace: &str,
    name: &str,
) -> Result<(), ApiError> {
    let r = RequestInfo::resource_request("impersonate", group, resource, namespace, name);
    match chain.decide(user, &r) {
        Decision::Allow => Ok(()),
        Decision::Deny(reason) | Decision::NoOpinion(reason) => {
            Err(authz::forbidden(user, &r, &reason))
        }
    }
}

fn values(headers: &HeaderMap, name: &str) -> Vec<String> {
    headers
        .get_all(name)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .map(str::to_string)
        .collect()
}

/// The identity a request runs as: `user` itself without impersonation headers, the
/// impersonated one when every part is allowed, or the 403 (400 for groups without a user,
/// where upstream answers 500: the client's mistake is not a server error) to answer.
pub fn resolve(
    chain: &authz::Chain,
    user: UserInfo,
    headers: &HeaderMap,
) -> Result<UserInfo, ApiError> {
    let name = headers.get(USER).and_then(|v| v.to_str().ok());
    let groups = values(headers, GROUP);
    let uid = headers.get(UID).and_then(|v| v.to_str().ok());
    let extras: Vec<(String, Vec<String>)> = {
        let mut keys: Vec<&str> = headers
            .keys()
            .filter_map(|k| k.as_str().strip_prefix(EXTRA_PREFIX))
            .collect();
        keys.sort_unstable();
        keys.dedup();
        keys.into_iter()
            .map(|k| {
                (
                    crate::request::percent_decode(k),
                    values(headers, &format!("{EXTRA_PREFIX}{k}")),
                )
            })
            .collect()
    };
    let Some(name) = name else {
        if groups.is_empty() && uid.is_none() && extras.is_empty() {
            return Ok(user);
        }
        return Err(ApiError::bad_request(
            "requested impersonation of groups, uid or extra without impersonating a user",
        ));
    };
    match name.strip_prefix(SERVICE_ACCOUNT_PREFIX) {
        Some(rest) if rest.contains(':') => {
            let (ns, sa) = rest.split_once(':').unwrap_or_default();
            check(chain, &user, "", "serviceaccounts", ns, sa)?;
        }
        _ => check(chain, &user, "", "users", "", name)?,
    }
    for g in &groups {
        check(chain, &user, "", "groups", "", g)?;
    }
    if let Some(uid) = uid {
        check(chain, &user, "authentication.k8s.io", "uids", "", uid)?;
    }
    for (key, vals) in &extras {
        for v in vals {
            check(
                chain,
                &user,
                "authentication.k8s.io",
                &format!("userextras/{key}"),
                "",
                v,
            )?;
        }
    }
    let mut groups = groups;
    if groups.is_empty()
        && let Some((ns, _)) = name
            .strip_prefix(SERVICE_ACCOUNT_PREFIX)
            .and_then(|r| r.split_once(':'))
    {
        groups = vec![
            "system:serviceaccounts".into(),
            format!("system:serviceaccounts:{ns}"),
        ];
    }
    let implied = if name == ANONYMOUS {
        GROUP_UNAUTHENTICATED
    } else {
        GROUP_AUTHENTICATED
    };
    if !groups.iter().any(|g| g == implied) {
        groups.push(implied.into());
    }
    Ok(UserInfo {
        name: name.to_string(),
        uid: uid.unwrap_or_default().to_string(),
        groups,
        extra: extras.into_iter().collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Allows `impersonate` only to `admin`, and only on users and groups.
    struct AdminImpersonates;
    impl authz::Authorizer for AdminImpersonates {
        fn authorize(&self, user: &UserInfo, r: &RequestInfo) -> Decision {
            if user.name == "admin" && r.verb == "impersonate" && r.resource != "uids" {
                Decision::Allow
            } else {
                Decision::pass()
            }
        }
    }

    fn chain() -> authz::Chain {
        authz::Chain {
            authorizers: vec![Box::new(AdminImpersonates)],
        }
    }

    fn user(name: &str) -> UserInfo {
        UserInfo {
            name: name.into(),
            uid: String::new(),
            groups: vec![GROUP_AUTHENTICATED.into()],
            extra: Default::default(),
        }
    }

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        h
    }

    #[test]
    fn without_headers_the_user_is_itself() {
        let u = resolve(&chain(), user("bob"), &HeaderMap::new()).unwrap();
        assert_eq!(u.name, "bob");
    }

    #[test]
    fn an_allowed_impersonation_takes_the_named_user_and_groups() {
        let h = headers(&[
            ("Impersonate-User", "jane"),
            ("Impersonate-Group", "devs"),
            ("Impersonate-Group", "ops"),
        ]);
        let u = resolve(&chain(), user("admin"), &h).unwrap();
        assert_eq!(u.name, "jane");
        assert_eq!(u.groups, vec!["devs", "ops", GROUP_AUTHENTICATED]);
        let sa = headers(&[("Impersonate-User", "system:serviceaccount:ci:builder")]);
        let u = resolve(&chain(), user("admin"), &sa).unwrap();
        assert_eq!(
            u.groups,
            vec![
                "system:serviceaccounts",
                "system:serviceaccounts:ci",
                GROUP_AUTHENTICATED
            ]
        );
    }

    #[test]
    fn a_refused_impersonation_is_403_with_upstreams_message() {
        let h = headers(&[("Impersonate-User", "jane")]);
        let e = resolve(&chain(), user("bob"), &h).unwrap_err();
        assert_eq!(e.code, 403);
        assert_eq!(
            e.message,
            "users \"jane\" is forbidden: User \"bob\" cannot impersonate resource \"users\" in API group \"\" at the cluster scope"
        );
        let uid = headers(&[("Impersonate-User", "jane"), ("Impersonate-Uid", "1")]);
        assert_eq!(
            resolve(&chain(), user("admin"), &uid).unwrap_err().code,
            403
        );
        let groups_only = headers(&[("Impersonate-Group", "devs")]);
        assert_eq!(
            resolve(&chain(), user("admin"), &groups_only)
                .unwrap_err()
                .code,
            400
        );
    }
}
