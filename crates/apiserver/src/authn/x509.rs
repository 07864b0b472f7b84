//! x509 client certificates: the TLS handshake verified the chain to the cluster CA, so the
//! subject's CN is the user and its O entries the groups (upstream's `x509.CommonNameUserConversion`).
//! A certificate of the front-proxy CA is refused here (as by upstream's `--client-ca-file`
//! verification): it vouches for users only through [`super::request_header`].

use x509_parser::prelude::{FromDer, X509Certificate};

use super::{Authenticator, Credentials, GROUP_AUTHENTICATED, UserInfo};

/// x509 client certificates: the TLS handshake verified the chain to the cluster CA, so here the
/// subject's CN is the user and its O entries the groups.
#[derive(Debug, Default)]
pub struct X509Authenticator;

impl Authenticator for X509Authenticator {
    fn authenticate(&self, credentials: &Credentials<'_>) -> Result<Option<UserInfo>, String> {
        let Some(der) = credentials.client_certificate else {
            return Ok(None);
        };
        if credentials.front_proxy {
            // that CA's certificates name a user only through the front-proxy headers
            return Err("x509: certificate signed by unknown authority".into());
        }
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
            groups,
            ..UserInfo::default()
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::authn::Chain;

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
                front_proxy: false,
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
                front_proxy: false,
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
