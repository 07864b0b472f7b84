//! Authentication, the first gate of the request pipeline: who is asking. The authenticators
//! are upstream's union: the first that recognises the credential wins, one that recognises it
//! and finds it bad refuses the request (401), and a request that presents nothing is
//! anonymous (when `--anonymous-auth` allows it). Every authenticated user also gets the group
//! `system:authenticated` (upstream's `AuthenticatedGroupAdder`).
//!
//! # Layout
//! - [`request_header`]: front-proxy certificates vouching for the user in `X-Remote-*`
//!   headers (`--requestheader-*`).
//! - [`x509`]: client certificates signed by the cluster CA (CN = user, O = groups).
//! - [`token_file`]: `--token-auth-file`, a static CSV of bearer tokens.
//! - [`service_account`]: the JWTs TokenRequest issues, checked against the objects they are
//!   bound to.
//! - [`bootstrap_token`]: `bootstrap.kubernetes.io/token` Secrets in `kube-system`.
//! - [`oidc`]: ID tokens of an OpenID Connect issuer, keys from its discovery document over
//!   HTTPS or from a JWKS file.
//!
//! Bearer tokens come from the `Authorization: Bearer` header; a token that no token
//! authenticator recognises is `invalid bearer token` (401), never anonymous.

pub mod bootstrap_token;
pub mod oidc;
pub mod request_header;
pub mod service_account;
pub mod token_file;
pub mod x509;

use std::collections::BTreeMap;

pub use x509::X509Authenticator;

/// The authenticated identity of a request (upstream's `user.Info`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UserInfo {
    pub name: String,
    pub uid: String,
    pub groups: Vec<String>,
    /// Extra attributes (`authentication.kubernetes.io/pod-name`, …).
    pub extra: BTreeMap<String, Vec<String>>,
}

pub const ANONYMOUS: &str = "system:anonymous";
pub const GROUP_AUTHENTICATED: &str = "system:authenticated";
pub const GROUP_UNAUTHENTICATED: &str = "system:unauthenticated";

/// upstream's `invalidToken` error of the bearer token authenticator.
pub const INVALID_BEARER_TOKEN: &str = "invalid bearer token";

impl UserInfo {
    pub fn anonymous() -> Self {
        Self {
            name: ANONYMOUS.into(),
            groups: vec![GROUP_UNAUTHENTICATED.into()],
            ..Self::default()
        }
    }

    pub fn is_anonymous(&self) -> bool {
        self.name == ANONYMOUS
    }
}

/// What the authenticators see of a request: the verified client certificate chain (the TLS
/// layer has already checked it against the cluster CA or the front-proxy CA) and the headers.
#[derive(Debug)]
pub struct Credentials<'a> {
    /// DER of the client's leaf certificate, when it presented one.
    pub client_certificate: Option<&'a [u8]>,
    /// Whether that certificate chains to the front-proxy CA (else to the cluster CA).
    pub front_proxy: bool,
    pub headers: &'a http::HeaderMap,
}

impl Credentials<'_> {
    /// The `Authorization: Bearer` token, as upstream's bearer token authenticator reads it
    /// (case-insensitive scheme, surrounding spaces trimmed; an empty token is no token).
    pub fn bearer_token(&self) -> Option<&str> {
        let value = self
            .headers
            .get(http::header::AUTHORIZATION)?
            .to_str()
            .ok()?;
        let value = value.trim();
        let (scheme, token) = value.split_once(' ')?;
        if !scheme.eq_ignore_ascii_case("bearer") {
            return None;
        }
        let token = token.trim();
        (!token.is_empty()).then_some(token)
    }

    /// The kinds of credentials the request carries, as upstream's failed-authentication audit
    /// names them: `basic`, `bearer`, `access_token` (`query_token`: the query has one) and
    /// `x509`.
    pub fn attempted(&self, query_token: bool) -> Vec<&'static str> {
        use base64::Engine;
        let authorization = self
            .headers
            .get(http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
            .unwrap_or_default();
        let (scheme, rest) = authorization.split_once(' ').unwrap_or_default();
        let basic = scheme.eq_ignore_ascii_case("basic")
            && base64::engine::general_purpose::STANDARD
                .decode(rest)
                .is_ok_and(|pair| pair.contains(&b':'));
        let mut kinds = Vec::new();
        for (present, kind) in [
            (basic, "basic"),
            (scheme.eq_ignore_ascii_case("bearer"), "bearer"),
            (query_token, "access_token"),
            (self.client_certificate.is_some(), "x509"),
        ] {
            if present {
                kinds.push(kind);
            }
        }
        kinds
    }
}

/// One way of establishing identity from a request. `Ok(None)` means "not mine, ask the next
/// one"; `Err` means the credentials were presented but are bad (401).
pub trait Authenticator: Send + Sync {
    fn authenticate(&self, credentials: &Credentials<'_>) -> Result<Option<UserInfo>, String>;
}

/// What a token authenticator found: the user and the audiences the token is good for
/// (upstream's `authenticator.Response`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenResponse {
    pub user: UserInfo,
    pub audiences: Vec<String>,
}

/// One way of establishing identity from a bearer token, for the audiences asked for (the API
/// server's own unless a TokenReview names others). `Ok(None)`: not this authenticator's
/// token; `Err`: its token, but bad.
pub trait TokenAuthenticator: Send + Sync {
    fn authenticate_token(
        &self,
        token: &str,
        audiences: &[String],
    ) -> Result<Option<TokenResponse>, String>;
}

/// The audiences of `token_audiences` also in `wanted` (upstream's `Audiences.Intersect`).
pub fn intersect(token_audiences: &[String], wanted: &[String]) -> Vec<String> {
    token_audiences
        .iter()
        .filter(|a| wanted.contains(a))
        .cloned()
        .collect()
}

/// Audience-agnostic tokens (the token file, bootstrap tokens) are good for the API server's
/// own audiences only (upstream's `WrapAudienceAgnosticToken`): `None` when the request asks
/// for others.
pub fn implicit_audiences(api_audiences: &[String], wanted: &[String]) -> Option<Vec<String>> {
    if wanted.is_empty() || api_audiences.is_empty() {
        return Some(api_audiences.to_vec());
    }
    let both = intersect(api_audiences, wanted);
    (!both.is_empty()).then_some(both)
}

/// The authentication flags. Authenticators that need the API server's watch cache (service
/// accounts, bootstrap tokens) are built by the server; the ones read from files come loaded.
#[derive(Debug)]
pub struct Options {
    /// `--anonymous-auth` (upstream's default: true).
    pub anonymous: bool,
    /// `--enable-bootstrap-token-auth` (upstream's default is false; Skiff's is true, so that
    /// `skiff agent --token` can join).
    pub bootstrap_tokens: bool,
    /// `--token-auth-file`, loaded.
    pub token_file: Option<token_file::TokenFile>,
    /// `--oidc-*`, with its keys loaded (or being fetched from the issuer).
    pub oidc: Option<oidc::OidcAuthenticator>,
    /// `--api-audiences`; empty means the service account issuer (upstream's default).
    pub api_audiences: Vec<String>,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            anonymous: true,
            bootstrap_tokens: true,
            token_file: None,
            oidc: None,
            api_audiences: Vec::new(),
        }
    }
}

/// Builds upstream's chain from the options: front-proxy request headers, x509 client
/// certificates, then the bearer token
/// authenticators in upstream's order (token file, service accounts when `issuer` signs
/// tokens, bootstrap tokens, OIDC), then anonymous. `objects` is the API server's watch cache.
pub fn build(
    options: Options,
    issuer: Option<&crate::tokens::TokenIssuer>,
    objects: std::sync::Arc<dyn service_account::ObjectLookup>,
) -> Chain {
    let mut api_audiences = options.api_audiences;
    if api_audiences.is_empty()
        && let Some(issuer) = issuer
    {
        api_audiences = vec![issuer.issuer().to_string()];
    }
    // upstream's order: the front proxy's headers, then client certificates
    let mut chain = Chain::new(vec![
        Box::new(request_header::RequestHeaderAuthenticator::default()),
        Box::new(X509Authenticator),
    ]);
    chain.anonymous = options.anonymous;
    chain.api_audiences = api_audiences.clone();
    if let Some(file) = options.token_file {
        chain = chain.with_token(Box::new(file.with_api_audiences(api_audiences.clone())));
    }
    if let Some(issuer) = issuer {
        match issuer.decoding_key() {
            Ok(key) => {
                chain =
                    chain.with_token(Box::new(service_account::ServiceAccountAuthenticator::new(
                        issuer.issuer(),
                        key,
                        api_audiences.clone(),
                        objects.clone(),
                        || jiff::Timestamp::now().as_second(),
                    )));
            }
            Err(e) => tracing::error!(error = %e, "service account tokens cannot be verified"),
        }
    }
    if options.bootstrap_tokens {
        chain = chain.with_token(Box::new(bootstrap_token::BootstrapTokenAuthenticator::new(
            objects,
            api_audiences.clone(),
            jiff::Timestamp::now,
        )));
    }
    if let Some(oidc) = options.oidc {
        chain = chain.with_token(Box::new(oidc.with_api_audiences(api_audiences.clone())));
    }
    chain
}

/// The authenticators in order, then anonymous.
pub struct Chain {
    authenticators: Vec<Box<dyn Authenticator>>,
    tokens: Vec<Box<dyn TokenAuthenticator>>,
    /// The API server's audiences (`--api-audiences`, by default the service account issuer).
    pub api_audiences: Vec<String>,
    /// `--anonymous-auth`: requests without credentials are `system:anonymous` (else 401).
    pub anonymous: bool,
}

impl std::fmt::Debug for Chain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Chain")
            .field("authenticators", &self.authenticators.len())
            .field("tokens", &self.tokens.len())
            .field("anonymous", &self.anonymous)
            .finish()
    }
}

impl Chain {
    /// Request authenticators only (no token authenticators), anonymous allowed.
    pub fn new(authenticators: Vec<Box<dyn Authenticator>>) -> Self {
        Self {
            authenticators,
            tokens: Vec::new(),
            api_audiences: Vec::new(),
            anonymous: true,
        }
    }

    /// Adds a bearer token authenticator after the ones already there.
    pub fn with_token(mut self, token: Box<dyn TokenAuthenticator>) -> Self {
        self.tokens.push(token);
        self
    }

    /// The request's identity; `Err` when credentials were presented and rejected, or none were
    /// and anonymous requests are off.
    pub fn authenticate(&self, credentials: &Credentials<'_>) -> Result<UserInfo, String> {
        for a in &self.authenticators {
            if let Some(user) = a.authenticate(credentials)? {
                return Ok(with_authenticated(user));
            }
        }
        if let Some(token) = credentials.bearer_token() {
            return self
                .authenticate_token(token, &self.api_audiences)
                .map(|r| r.user);
        }
        if self.anonymous {
            Ok(UserInfo::anonymous())
        } else {
            Err("no credentials".into())
        }
    }

    /// A bearer token's identity for `audiences` (also what TokenReview asks).
    pub fn authenticate_token(
        &self,
        token: &str,
        audiences: &[String],
    ) -> Result<TokenResponse, String> {
        let mut errors = Vec::new();
        for t in &self.tokens {
            match t.authenticate_token(token, audiences) {
                Ok(Some(mut r)) => {
                    r.user = with_authenticated(r.user);
                    return Ok(r);
                }
                Ok(None) => {}
                Err(e) => errors.push(e),
            }
        }
        if errors.is_empty() {
            Err(INVALID_BEARER_TOKEN.into())
        } else {
            // upstream's union aggregates the errors as `[a, b]`, one alone as itself
            Err(if errors.len() == 1 {
                errors.remove(0)
            } else {
                format!("[{}]", errors.join(", "))
            })
        }
    }
}

fn with_authenticated(mut user: UserInfo) -> UserInfo {
    if !user.groups.iter().any(|g| g == GROUP_AUTHENTICATED) {
        user.groups.push(GROUP_AUTHENTICATED.into());
    }
    user
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Fixed(&'static str, Option<&'static str>);
    impl TokenAuthenticator for Fixed {
        fn authenticate_token(
            &self,
            token: &str,
            _audiences: &[String],
        ) -> Result<Option<TokenResponse>, String> {
            if token != self.0 {
                return Ok(None);
            }
            match self.1 {
                Some(name) => Ok(Some(TokenResponse {
                    user: UserInfo {
                        name: name.into(),
                        ..UserInfo::default()
                    },
                    audiences: vec![],
                })),
                None => Err("bad token".into()),
            }
        }
    }

    fn bearer(token: &str) -> http::HeaderMap {
        let mut h = http::HeaderMap::new();
        h.insert(
            http::header::AUTHORIZATION,
            format!("Bearer {token}").parse().unwrap(),
        );
        h
    }

    fn chain() -> Chain {
        Chain::new(vec![Box::new(X509Authenticator)])
            .with_token(Box::new(Fixed("a", Some("alice"))))
            .with_token(Box::new(Fixed("b", None)))
            .with_token(Box::new(Fixed("b", Some("never"))))
    }

    fn authenticate(chain: &Chain, headers: &http::HeaderMap) -> Result<UserInfo, String> {
        chain.authenticate(&Credentials {
            client_certificate: None,
            front_proxy: false,
            headers,
        })
    }

    #[test]
    fn the_first_token_authenticator_that_knows_the_token_wins_and_adds_authenticated() {
        let user = authenticate(&chain(), &bearer("a")).unwrap();
        assert_eq!(user.name, "alice");
        assert_eq!(user.groups, vec![GROUP_AUTHENTICATED.to_string()]);
    }

    #[test]
    fn a_token_its_authenticator_rejects_is_refused_even_if_a_later_one_knows_it() {
        // the union collects errors and goes on; here the later one accepts, as upstream
        let user = authenticate(&chain(), &bearer("b")).unwrap();
        assert_eq!(user.name, "never");
        let only_bad = Chain::new(vec![]).with_token(Box::new(Fixed("b", None)));
        assert_eq!(
            authenticate(&only_bad, &bearer("b")).unwrap_err(),
            "bad token"
        );
    }

    #[test]
    fn an_unknown_bearer_token_is_refused_never_anonymous() {
        assert_eq!(
            authenticate(&chain(), &bearer("zzz")).unwrap_err(),
            INVALID_BEARER_TOKEN
        );
    }

    #[test]
    fn no_credentials_is_anonymous_unless_anonymous_auth_is_off() {
        let headers = http::HeaderMap::new();
        assert!(authenticate(&chain(), &headers).unwrap().is_anonymous());
        let mut off = chain();
        off.anonymous = false;
        assert!(authenticate(&off, &headers).is_err());
    }

    #[test]
    fn the_bearer_scheme_is_case_insensitive_and_an_empty_token_is_none() {
        let mut h = http::HeaderMap::new();
        h.insert(http::header::AUTHORIZATION, "bearer  tok ".parse().unwrap());
        let c = Credentials {
            client_certificate: None,
            front_proxy: false,
            headers: &h,
        };
        assert_eq!(c.bearer_token(), Some("tok"));
        h.insert(http::header::AUTHORIZATION, "Bearer ".parse().unwrap());
        let c = Credentials {
            client_certificate: None,
            front_proxy: false,
            headers: &h,
        };
        assert_eq!(c.bearer_token(), None);
    }

    #[test]
    fn the_credentials_tried_are_named_as_upstreams_failed_authentication_audit_names_them() {
        let attempted = |authorization: Option<&str>, certificate: bool, query_token: bool| {
            let mut h = http::HeaderMap::new();
            if let Some(v) = authorization {
                h.insert(http::header::AUTHORIZATION, v.parse().unwrap());
            }
            let der = [0u8; 1];
            Credentials {
                client_certificate: certificate.then_some(&der[..]),
                front_proxy: false,
                headers: &h,
            }
            .attempted(query_token)
        };
        assert!(attempted(None, false, false).is_empty());
        assert_eq!(attempted(Some("Bearer x"), true, false), ["bearer", "x509"]);
        // "alice:pw"
        assert_eq!(
            attempted(Some("Basic YWxpY2U6cHc="), false, true),
            ["basic", "access_token"]
        );
        assert!(attempted(Some("Basic not-base64!"), false, false).is_empty());
    }

    #[test]
    fn audience_agnostic_tokens_serve_only_the_api_audiences() {
        let api = vec!["https://api".to_string()];
        assert_eq!(implicit_audiences(&api, &[]), Some(api.clone()));
        assert_eq!(implicit_audiences(&api, &api), Some(api.clone()));
        assert_eq!(implicit_audiences(&api, &["other".to_string()]), None);
    }
}
