//! Who may call the kubelet server, as upstream's kubelet with `--anonymous-auth=false`,
//! `--authentication-token-webhook` and `--authorization-mode=Webhook`
//! (`pkg/kubelet/server/auth.go` and its auth filter). A client is the subject of its
//! certificate (CN the user, O the groups; the TLS handshake checked the cluster CA signed it)
//! or, with a bearer token, whoever the API server's TokenReview says; anyone else gets 401.
//! Each request is then a SubjectAccessReview of `nodes/<subresource>` named for this node, the
//! verb from the HTTP method and the subresource from the path; with upstream's
//! `KubeletFineGrainedAuthz` (beta, on since 1.33) `/pods`, `/healthz` and `/configz` first try
//! a subresource of their own, then `proxy`. Refused: 403. Answers are kept as long as upstream's
//! defaults keep them: tokens 2 minutes, allowed decisions 5 minutes, denied ones 30 seconds.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Arc;
use std::time::Duration;

use http::request::Parts;
use http::{Method, Response, header};
use parking_lot::Mutex;
use tokio::time::Instant;
use x509_parser::prelude::{FromDer, X509Certificate};

use super::reviews::{AccessReview, Reviews, User};
use super::{Body, text};

/// Upstream's `--authentication-token-webhook-cache-ttl` default.
pub const TOKEN_TTL: Duration = Duration::from_secs(120);
/// Upstream's `--authorization-webhook-cache-authorized-ttl` default.
pub const ALLOWED_TTL: Duration = Duration::from_secs(300);
/// Upstream's `--authorization-webhook-cache-unauthorized-ttl` default.
pub const DENIED_TTL: Duration = Duration::from_secs(30);
/// Entries a cache holds before it forgets what expired (and, if still full, everything).
const CACHE_ENTRIES: usize = 4096;

/// The group every authenticated user is in (upstream's `AuthenticatedGroupAdder`).
const GROUP_AUTHENTICATED: &str = "system:authenticated";

/// Why a request is not let in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// No certificate and no token the API server knows: 401.
    Unauthenticated,
    /// No subresource the request maps to is allowed: 403, the text names them all.
    Forbidden(String),
    /// The API server could not be asked: 500, nothing cached, the client may retry.
    Failed(String),
}

impl Refusal {
    /// The answer, in upstream's words (plain text).
    pub fn response(&self) -> Response<Body> {
        match self {
            Refusal::Unauthenticated => text(401, "Unauthorized"),
            Refusal::Forbidden(m) => text(403, m),
            Refusal::Failed(m) => text(500, m),
        }
    }
}

/// The user a client certificate names: CN the user, O entries the groups.
pub fn certificate_user(der: &[u8]) -> Option<User> {
    let (_, cert) = X509Certificate::from_der(der).ok()?;
    let subject = cert.subject();
    let name = subject
        .iter_common_name()
        .next()?
        .as_str()
        .ok()?
        .to_string();
    let groups = subject
        .iter_organization()
        .filter_map(|o| o.as_str().ok().map(str::to_string))
        .collect();
    Some(authenticated(User {
        name,
        groups,
        ..User::default()
    }))
}

fn authenticated(mut user: User) -> User {
    if !user.groups.iter().any(|g| g == GROUP_AUTHENTICATED) {
        user.groups.push(GROUP_AUTHENTICATED.into());
    }
    user
}

/// The API verb of an HTTP method, as upstream's kubelet maps it (`""` for the others).
pub fn verb(method: &Method) -> &'static str {
    match *method {
        Method::GET => "get",
        Method::POST => "create",
        Method::PUT => "update",
        Method::PATCH => "patch",
        Method::DELETE => "delete",
        _ => "",
    }
}

/// Whether `path` is `prefix` or under it.
fn under(path: &str, prefix: &str) -> bool {
    path.strip_prefix(prefix)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
}

/// The `nodes` subresources a path is authorized as, in the order they are tried.
pub fn subresources(path: &str) -> Vec<&'static str> {
    let mut out = Vec::with_capacity(2);
    let fine_grained = [
        ("/pods", "pods"),
        ("/runningpods", "pods"),
        ("/healthz", "healthz"),
        ("/configz", "configz"),
        ("/statusz", "statusz"),
    ];
    if let Some((_, sub)) = fine_grained.iter().find(|(p, _)| under(path, p)) {
        out.push(*sub);
    }
    let coarse = [
        ("/stats", "stats"),
        ("/metrics", "metrics"),
        ("/logs", "log"),
        ("/checkpoint", "checkpoint"),
    ];
    out.push(
        coarse
            .iter()
            .find(|(p, _)| under(path, p))
            .map_or("proxy", |(_, sub)| *sub),
    );
    out
}

/// The token of an `Authorization: Bearer <token>` header.
fn bearer_token(parts: &Parts) -> Option<&str> {
    let value = parts.headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.trim().split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// Answers kept until they expire (tokio's clock, so tests can pause it).
struct Expiring<K, V> {
    /// A plain mutex: held for one lookup or insert, never across an await.
    entries: Mutex<HashMap<K, (V, Instant)>>,
}

impl<K: Hash + Eq, V: Clone> Expiring<K, V> {
    fn new() -> Self {
        Expiring {
            entries: Mutex::new(HashMap::new()),
        }
    }

    fn get(&self, key: &K) -> Option<V> {
        let entries = self.entries.lock();
        let (value, until) = entries.get(key)?;
        (Instant::now() < *until).then(|| value.clone())
    }

    fn put(&self, key: K, value: V, ttl: Duration) {
        let now = Instant::now();
        let mut entries = self.entries.lock();
        if entries.len() >= CACHE_ENTRIES {
            entries.retain(|_, (_, until)| now < *until);
            if entries.len() >= CACHE_ENTRIES {
                entries.clear();
            }
        }
        entries.insert(key, (value, now + ttl));
    }
}

/// The kubelet server's authenticator and authorizer for one node.
pub struct Auth {
    reviews: Arc<dyn Reviews>,
    node: String,
    /// By the token's SHA-256, so that the tokens themselves are not kept.
    tokens: Expiring<[u8; 32], Option<User>>,
    decisions: Expiring<AccessReview, bool>,
}

impl Auth {
    pub fn new(reviews: Arc<dyn Reviews>, node: impl Into<String>) -> Self {
        Auth {
            reviews,
            node: node.into(),
            tokens: Expiring::new(),
            decisions: Expiring::new(),
        }
    }

    /// Lets a request in or says why not; `certificate` is the user of the client's verified
    /// certificate, if it sent one.
    pub async fn check(&self, parts: &Parts, certificate: Option<&User>) -> Result<(), Refusal> {
        let user = match certificate {
            Some(user) => user.clone(),
            None => self.token_user(parts).await?,
        };
        self.authorize(&user, &parts.method, parts.uri.path()).await
    }

    async fn token_user(&self, parts: &Parts) -> Result<User, Refusal> {
        let token = bearer_token(parts).ok_or(Refusal::Unauthenticated)?;
        let key: [u8; 32] = ring::digest::digest(&ring::digest::SHA256, token.as_bytes())
            .as_ref()
            .try_into()
            .expect("a SHA-256 digest is 32 bytes");
        let known = match self.tokens.get(&key) {
            Some(known) => known,
            None => {
                let known = self.reviews.token(token).await.map_err(|e| {
                    tracing::warn!(error = %e, "kubelet server token review");
                    Refusal::Unauthenticated
                })?;
                self.tokens.put(key, known.clone(), TOKEN_TTL);
                known
            }
        };
        known.map(authenticated).ok_or(Refusal::Unauthenticated)
    }

    async fn authorize(&self, user: &User, method: &Method, path: &str) -> Result<(), Refusal> {
        let verb = verb(method);
        let subresources = subresources(path);
        for &subresource in &subresources {
            let review = AccessReview {
                user: user.clone(),
                verb,
                node: self.node.clone(),
                subresource,
            };
            let allowed = match self.decisions.get(&review) {
                Some(allowed) => allowed,
                None => {
                    let allowed = self.reviews.access(&review).await.map_err(|e| {
                        tracing::warn!(error = %e, "kubelet server authorization");
                        Refusal::Failed(format!(
                            "Authorization error (user={}, verb={verb}, resource=nodes, subresource={subresource})",
                            user.name
                        ))
                    })?;
                    let ttl = if allowed { ALLOWED_TTL } else { DENIED_TTL };
                    self.decisions.put(review, allowed, ttl);
                    allowed
                }
            };
            if allowed {
                return Ok(());
            }
        }
        Err(Refusal::Forbidden(format!(
            "Forbidden (user={}, verb={verb}, resource=nodes, subresource(s)=[{}])",
            user.name,
            subresources.join(" ")
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_map_to_upstreams_subresources_in_the_order_they_are_tried() {
        for (path, expected) in [
            ("/pods", vec!["pods", "proxy"]),
            ("/pods/", vec!["pods", "proxy"]),
            ("/runningpods/", vec!["pods", "proxy"]),
            ("/healthz", vec!["healthz", "proxy"]),
            ("/healthz/syncloop", vec!["healthz", "proxy"]),
            ("/configz", vec!["configz", "proxy"]),
            ("/stats/summary", vec!["stats"]),
            ("/metrics", vec!["metrics"]),
            ("/metrics/cadvisor", vec!["metrics"]),
            ("/logs/syslog", vec!["log"]),
            ("/checkpoint/ns/pod/c", vec!["checkpoint"]),
            ("/containerLogs/ns/pod/c", vec!["proxy"]),
            ("/exec/ns/pod/c", vec!["proxy"]),
            ("/portForward/ns/pod", vec!["proxy"]),
            ("/podsx", vec!["proxy"]),
            ("/metricsx", vec!["proxy"]),
            ("/", vec!["proxy"]),
        ] {
            assert_eq!(subresources(path), expected, "{path}");
        }
    }

    #[test]
    fn methods_map_to_api_verbs() {
        for (method, expected) in [
            (Method::GET, "get"),
            (Method::POST, "create"),
            (Method::PUT, "update"),
            (Method::PATCH, "patch"),
            (Method::DELETE, "delete"),
            (Method::HEAD, ""),
        ] {
            assert_eq!(verb(&method), expected);
        }
    }

    #[test]
    fn a_certificate_names_the_user_and_its_organizations_the_groups() {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::default();
        let dn = &mut params.distinguished_name;
        dn.push(rcgen::DnType::CommonName, "system:node:n1");
        dn.push(rcgen::DnType::OrganizationName, "system:nodes");
        let cert = params.self_signed(&key).unwrap();
        let user = certificate_user(cert.der()).unwrap();
        assert_eq!(user.name, "system:node:n1");
        assert_eq!(user.groups, ["system:nodes", "system:authenticated"]);
        assert_eq!(certificate_user(b"not a certificate"), None);
    }

    #[test]
    fn only_bearer_authorization_headers_carry_a_token() {
        let parts = |value: &str| {
            http::Request::get("/")
                .header(header::AUTHORIZATION, value)
                .body(())
                .unwrap()
                .into_parts()
                .0
        };
        assert_eq!(bearer_token(&parts("Bearer abc")), Some("abc"));
        assert_eq!(bearer_token(&parts("bearer  abc ")), Some("abc"));
        assert_eq!(bearer_token(&parts("Basic YTpi")), None);
        assert_eq!(bearer_token(&parts("Bearer ")), None);
    }
}
