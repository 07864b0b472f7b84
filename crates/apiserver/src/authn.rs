//! Authentication, the first gate of the request pipeline: who is asking. Here: x509 client
//! certificates signed by the cluster CA (CN = user, O = groups), and anonymous otherwise.
//! Token, service-account and OIDC authenticators plug in behind the same trait. Service
//! account tokens (the JWTs `serviceaccounts/{name}/token` issues) verify with
//! `crate::tokens::TokenIssuer::decoding_key` (ES256, `iss` and `aud` the issuer's), and their
//! `kubernetes.io` claim names the user `system:serviceaccount:NS:NAME`: that authenticator
//! goes here, not yet written.

use x509_parser::prelude::{FromDer, X509Certificate};

/// The authenticated identity of a request (upstream's `user.Info`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserInfo {
    pub name: String,
    pub uid: String,
    pub groups: Vec<String>,
}

pub const ANONYMOUS: &str = "system:anonymous";
pub const GROUP_AUTHENTICATED: &str = "system:authenticated";
pub const GROUP_UNAUTHENTICATED: &str = "system:unauthenticated";

impl UserInfo {
    pub fn anonymous() -> Self {
        Self {
            name: ANONYMOUS.into(),
            uid: String::new(),
            groups: vec![GROUP_UNAUTHENTICATED.into()],
        }
    }

    pub fn is_anonymous(&self) -> bool {
        self.name == ANONYMOUS
    }
}

/// What the authenticators see of a request: the verified client certificate chain (the TLS
/// layer has already checked it against the cluster CA) and the headers.
#[derive(Debug)]
pub struct Credentials<'a> {
    /// DER of the client's leaf certificate, when it presented one.
    pub client_certificate: Option<&'a [u8]>,
    pub headers: &'a http::HeaderMap,
}

/// One way of establishing identity. `Ok(None)` means "not mine, ask the next one"; `Err` means
/// the credentials were presented but are bad (401).
pub trait Authenticator: Send + Sync {
    fn authenticate(&self, credentials: &Credentials<'_>) -> Result<Option<UserInfo>, String>;
}

/// x509 client certificates: the TLS handshake verified the chain to the cluster CA, so here the
/// subject's CN is the user and its O entries the groups.
#[derive(Debug, Default)]
pub struct X509Authenticator;

impl Authenticator for X509Authenticator {
    fn authenticate(&self, credentials: &Credentials<'_>) -> Result<Option<UserInfo>, String> {
        let Some(der) = credentials.client_certificate else {
            return Ok(None);
        };
        let (_, cert) = X509Certificate::from_der(der)
            .map_err(|e| format!("unreadable client certificate: {e}"))?;
        let subject = cert.subject();
        let name = subject
            .iter_common_name()
            .next()
            .and_then(|cn| cn.as_str().ok())
            .ok_or("client certificate has no common name")?
            .to_string();
        let mut groups: Vec<String> = subject
            .iter_organization()
            .filter_map(|o| o.as_str().ok().map(str::to_string))
            .collect();
        groups.push(GROUP_AUTHENTICATED.into());
        Ok(Some(UserInfo {
            name,
            uid: String::new(),
            groups,
        }))
    }
}

/// The authenticators in order, then anonymous.
pub struct Chain {
    authenticators: Vec<Box<dyn Authenticator>>,
}

impl std::fmt::Debug for Chain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Chain")
            .field("authenticators", &self.authenticators.len())
            .finish()
    }
}

impl Chain {
    pub fn new(authenticators: Vec<Box<dyn Authenticator>>) -> Self {
        Self { authenticators }
    }

    /// The request's identity; `Err` when credentials were presented and rejected.
    pub fn authenticate(&self, credentials: &Credentials<'_>) -> Result<UserInfo, String> {
        for a in &self.authenticators {
            if let Some(user) = a.authenticate(credentials)? {
                return Ok(user);
            }
        }
        Ok(UserInfo::anonymous())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_certificate_gives_its_common_name_and_organizations() {
        let dir = tempfile::tempdir().unwrap();
        let pki = crate::pki::Pki::ensure(dir.path(), &[]).unwrap();
        let (cert_pem, _) = pki.issue("alice", Some("devs"), &[], false).unwrap();
        let der = pem_to_der(&cert_pem);
        let headers = http::HeaderMap::new();
        let user = Chain::new(vec![Box::new(X509Authenticator)])
            .authenticate(&Credentials {
                client_certificate: Some(&der),
                headers: &headers,
            })
            .unwrap();
        assert_eq!(user.name, "alice");
        assert_eq!(
            user.groups,
            vec!["devs".to_string(), GROUP_AUTHENTICATED.into()]
        );
    }

    #[test]
    fn no_credentials_is_anonymous() {
        let headers = http::HeaderMap::new();
        let user = Chain::new(vec![Box::new(X509Authenticator)])
            .authenticate(&Credentials {
                client_certificate: None,
                headers: &headers,
            })
            .unwrap();
        assert!(user.is_anonymous());
    }

    fn pem_to_der(pem: &str) -> Vec<u8> {
        use base64::Engine;
        let body: String = pem.lines().filter(|l| !l.starts_with("-----")).collect();
        base64::engine::general_purpose::STANDARD
            .decode(body)
            .unwrap()
    }
}
