//! Bootstrap tokens (`--enable-bootstrap-token-auth`, upstream's `bootstrap` token
//! authenticator): a token `<id>.<secret>` (6 and 16 of `[a-z0-9]`) is the Secret
//! `kube-system/bootstrap-token-<id>` of type `bootstrap.kubernetes.io/token` whose
//! `token-secret` matches, not expired, not being deleted and with
//! `usage-bootstrap-authentication: "true"`. The user is `system:bootstrap:<id>` in
//! `system:bootstrappers` and the Secret's `auth-extra-groups`. Anything else is not this
//! authenticator's token (upstream logs why and lets the union answer 401).

use std::sync::Arc;

use base64::Engine;
use serde_json::Value;

use super::service_account::ObjectLookup;
use super::{TokenAuthenticator, TokenResponse, UserInfo, implicit_audiences};

pub const SECRET_TYPE: &str = "bootstrap.kubernetes.io/token";
pub const SECRET_PREFIX: &str = "bootstrap-token-";
pub const GROUP_BOOTSTRAPPERS: &str = "system:bootstrappers";
pub const USER_PREFIX: &str = "system:bootstrap:";

/// Checks bootstrap tokens against their Secrets.
pub struct BootstrapTokenAuthenticator {
    objects: Arc<dyn ObjectLookup>,
    api_audiences: Vec<String>,
    clock: fn() -> jiff::Timestamp,
}

impl BootstrapTokenAuthenticator {
    pub fn new(
        objects: Arc<dyn ObjectLookup>,
        api_audiences: Vec<String>,
        clock: fn() -> jiff::Timestamp,
    ) -> Self {
        Self {
            objects,
            api_audiences,
            clock,
        }
    }
}

/// The id and secret of a well-formed bootstrap token.
pub fn parse(token: &str) -> Option<(&str, &str)> {
    let (id, secret) = token.split_once('.')?;
    let ok = |s: &str, n: usize| {
        s.len() == n
            && s.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
    };
    (ok(id, 6) && ok(secret, 16)).then_some((id, secret))
}

fn data(secret: &Value, key: &str) -> Option<String> {
    let encoded = secret.pointer(&format!("/data/{key}"))?.as_str()?;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(encoded)
        .ok()?;
    String::from_utf8(bytes).ok()
}

/// Equal without leaking where they differ (upstream compares with `subtle`).
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// `system:bootstrappers` and the valid `auth-extra-groups`, sorted and deduplicated as
/// upstream's string set; `None` when an extra group is not `system:bootstrappers:…`.
fn groups(secret: &Value) -> Option<Vec<String>> {
    let mut groups = vec![GROUP_BOOTSTRAPPERS.to_string()];
    if let Some(extra) = data(secret, "auth-extra-groups") {
        for g in extra.split(',') {
            let rest = g.strip_prefix("system:bootstrappers:")?;
            let valid = !rest.is_empty()
                && rest.len() <= 256
                && rest.bytes().all(|b| {
                    b.is_ascii_lowercase() || b.is_ascii_digit() || b == b':' || b == b'-'
                })
                && rest
                    .bytes()
                    .last()
                    .is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
            if !valid {
                return None;
            }
            groups.push(g.to_string());
        }
    }
    groups.sort();
    groups.dedup();
    Some(groups)
}

impl TokenAuthenticator for BootstrapTokenAuthenticator {
    fn authenticate_token(
        &self,
        token: &str,
        audiences: &[String],
    ) -> Result<Option<TokenResponse>, String> {
        let Some((id, secret_part)) = parse(token) else {
            return Ok(None);
        };
        let name = format!("{SECRET_PREFIX}{id}");
        let reject = |why: &str| {
            tracing::debug!(secret = %name, why, "bootstrap token not accepted");
            Ok(None)
        };
        let Some(secret) = self.objects.get("secrets", "kube-system", &name) else {
            return reject("no such secret");
        };
        if secret
            .pointer("/metadata/deletionTimestamp")
            .is_some_and(|d| !d.is_null())
        {
            return reject("being deleted");
        }
        if secret["type"].as_str() != Some(SECRET_TYPE) || !secret["data"].is_object() {
            return reject("not of type bootstrap.kubernetes.io/token");
        }
        let stored = data(&secret, "token-secret").unwrap_or_default();
        if !constant_time_eq(stored.as_bytes(), secret_part.as_bytes()) {
            return reject("token-secret does not match");
        }
        if data(&secret, "token-id").as_deref() != Some(id) {
            return reject("token-id does not match");
        }
        if let Some(exp) = data(&secret, "expiration") {
            match exp.parse::<jiff::Timestamp>() {
                Ok(at) if at > (self.clock)() => {}
                _ => return reject("expired"),
            }
        }
        if data(&secret, "usage-bootstrap-authentication").as_deref() != Some("true") {
            return reject("not for authentication");
        }
        let Some(groups) = groups(&secret) else {
            return reject("bad auth-extra-groups");
        };
        let Some(audiences) = implicit_audiences(&self.api_audiences, audiences) else {
            return Ok(None);
        };
        Ok(Some(TokenResponse {
            user: UserInfo {
                name: format!("{USER_PREFIX}{id}"),
                groups,
                ..UserInfo::default()
            },
            audiences,
        }))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    const TOKEN: &str = "abcdef.0123456789abcdef";

    struct One(Value);
    impl ObjectLookup for One {
        fn get(&self, plural: &str, namespace: &str, name: &str) -> Option<Value> {
            (plural == "secrets"
                && namespace == "kube-system"
                && name == self.0["metadata"]["name"])
                .then(|| self.0.clone())
        }
    }

    fn b64(s: &str) -> String {
        base64::engine::general_purpose::STANDARD.encode(s)
    }

    fn secret(extra: &[(&str, &str)]) -> Value {
        let mut data = json!({
            "token-id": b64("abcdef"),
            "token-secret": b64("0123456789abcdef"),
            "usage-bootstrap-authentication": b64("true"),
            "auth-extra-groups": b64("system:bootstrappers:kubeadm:default-node-token"),
            "expiration": b64("2030-01-01T00:00:00Z"),
        });
        for (k, v) in extra {
            data[*k] = json!(b64(v));
        }
        json!({"metadata": {"name": "bootstrap-token-abcdef", "namespace": "kube-system"},
               "type": SECRET_TYPE, "data": data})
    }

    fn check(secret: Value, token: &str) -> Option<UserInfo> {
        BootstrapTokenAuthenticator::new(Arc::new(One(secret)), vec![], || {
            "2029-01-01T00:00:00Z".parse().unwrap()
        })
        .authenticate_token(token, &[])
        .unwrap()
        .map(|r| r.user)
    }

    #[test]
    fn a_valid_token_is_system_bootstrap_id_with_the_extra_groups() {
        let user = check(secret(&[]), TOKEN).unwrap();
        assert_eq!(user.name, "system:bootstrap:abcdef");
        assert_eq!(
            user.groups,
            vec![
                "system:bootstrappers",
                "system:bootstrappers:kubeadm:default-node-token"
            ]
        );
    }

    #[test]
    fn a_wrong_secret_or_malformed_token_is_not_accepted() {
        assert!(check(secret(&[]), "abcdef.0123456789abcdee").is_none());
        assert!(check(secret(&[]), "abcdef.short").is_none());
        assert!(check(secret(&[]), "ABCDEF.0123456789abcdef").is_none());
        assert!(check(secret(&[]), "zzzzzz.0123456789abcdef").is_none());
    }

    #[test]
    fn an_expired_token_is_not_accepted() {
        assert!(check(secret(&[("expiration", "2028-01-01T00:00:00Z")]), TOKEN).is_none());
    }

    #[test]
    fn a_token_not_for_authentication_or_of_another_type_is_not_accepted() {
        assert!(
            check(
                secret(&[("usage-bootstrap-authentication", "false")]),
                TOKEN
            )
            .is_none()
        );
        let mut opaque = secret(&[]);
        opaque["type"] = json!("Opaque");
        assert!(check(opaque, TOKEN).is_none());
    }

    #[test]
    fn extra_groups_outside_system_bootstrappers_make_the_token_unusable() {
        assert!(check(secret(&[("auth-extra-groups", "system:masters")]), TOKEN).is_none());
    }
}
