//! Front-proxy authentication (upstream's `--requestheader-*`): a client certificate signed by
//! the front-proxy CA, whose common name is an allowed proxy name (`front-proxy-client`),
//! vouches for the user named in `X-Remote-User`, with groups from `X-Remote-Group` and extra
//! attributes from `X-Remote-Extra-<key>` (the key percent-unescaped and lower-cased). Another
//! API server's aggregator in front of this one authenticates its users that way.

use std::collections::BTreeMap;

use x509_parser::prelude::{FromDer, X509Certificate};

use super::{Authenticator, Credentials, UserInfo};
use crate::aggregator::proxy::{REMOTE_EXTRA_PREFIX, REMOTE_GROUP, REMOTE_USER};
use crate::pki::FRONT_PROXY_CLIENT;

/// Trusts front-proxy certificates with one of `allowed_names` (any name when empty).
#[derive(Debug)]
pub struct RequestHeaderAuthenticator {
    pub allowed_names: Vec<String>,
}

impl Default for RequestHeaderAuthenticator {
    /// kubeadm's `--requestheader-allowed-names=front-proxy-client`.
    fn default() -> Self {
        Self {
            allowed_names: vec![FRONT_PROXY_CLIENT.to_string()],
        }
    }
}

/// Decodes `%XX` escapes (client-go escapes extra keys so that they fit a header name).
fn unescape(key: &str) -> String {
    crate::request::percent_decode(key)
}

impl Authenticator for RequestHeaderAuthenticator {
    fn authenticate(&self, credentials: &Credentials<'_>) -> Result<Option<UserInfo>, String> {
        let (Some(der), true) = (credentials.client_certificate, credentials.front_proxy) else {
            return Ok(None);
        };
        let (_, cert) = X509Certificate::from_der(der)
            .map_err(|e| format!("unreadable client certificate: {e}"))?;
        let cn = cert
            .subject()
            .iter_common_name()
            .next()
            .and_then(|cn| cn.as_str().ok())
            .unwrap_or("");
        if !self.allowed_names.is_empty() && !self.allowed_names.iter().any(|n| n == cn) {
            return Err(format!(
                "x509: subject with cn={cn} is not in the allowed list"
            ));
        }
        let headers = credentials.headers;
        let values = |name: &str| -> Vec<String> {
            headers
                .get_all(name)
                .iter()
                .filter_map(|v| v.to_str().ok())
                .map(str::to_string)
                .collect()
        };
        let Some(name) = values(REMOTE_USER).into_iter().find(|u| !u.is_empty()) else {
            return Ok(None);
        };
        let mut extra: BTreeMap<String, Vec<String>> = BTreeMap::new();
        let prefix = REMOTE_EXTRA_PREFIX.to_ascii_lowercase();
        for (header, value) in headers {
            if let Some(key) = header.as_str().strip_prefix(&prefix)
                && let Ok(value) = value.to_str()
            {
                extra
                    .entry(unescape(key).to_ascii_lowercase())
                    .or_default()
                    .push(value.to_string());
            }
        }
        Ok(Some(UserInfo {
            name,
            groups: values(REMOTE_GROUP),
            extra,
            ..UserInfo::default()
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::authn::Chain;
    use rustls_pki_types::pem::PemObject;

    fn der(pem: &str) -> Vec<u8> {
        rustls_pki_types::CertificateDer::from_pem_slice(pem.as_bytes())
            .unwrap()
            .to_vec()
    }

    #[test]
    fn a_front_proxy_certificate_vouches_for_the_user_in_the_headers() {
        let dir = tempfile::tempdir().unwrap();
        let pki = crate::pki::Pki::ensure(dir.path(), &[]).unwrap();
        let proxy = der(&pki.front_proxy().unwrap().client_cert_pem);
        let mut headers = http::HeaderMap::new();
        headers.insert("x-remote-user", "alice".parse().unwrap());
        headers.append("x-remote-group", "devs".parse().unwrap());
        headers.append("x-remote-group", "ops".parse().unwrap());
        headers.insert(
            "x-remote-extra-authentication.kubernetes.io%2Fpod-name",
            "p1".parse().unwrap(),
        );
        let chain = Chain::new(vec![
            Box::new(RequestHeaderAuthenticator::default()),
            Box::new(crate::authn::X509Authenticator),
        ]);
        let credentials = |front_proxy, headers| Credentials {
            client_certificate: Some(&proxy),
            front_proxy,
            headers,
        };
        let user = chain.authenticate(&credentials(true, &headers)).unwrap();
        assert_eq!(user.name, "alice");
        assert_eq!(user.groups, ["devs", "ops", "system:authenticated"]);
        assert_eq!(user.extra["authentication.kubernetes.io/pod-name"], ["p1"]);
        // without the header the certificate is no user of its own
        let none = http::HeaderMap::new();
        assert!(chain.authenticate(&credentials(true, &none)).is_err());
        // a cluster CA certificate ignores the headers
        let (admin, _) = pki
            .issue("admin", Some("system:masters"), &[], false)
            .unwrap();
        let admin = der(&admin);
        let user = chain
            .authenticate(&Credentials {
                client_certificate: Some(&admin),
                front_proxy: false,
                headers: &headers,
            })
            .unwrap();
        assert_eq!(user.name, "admin");
        // a front-proxy certificate with another name is refused
        let strict = RequestHeaderAuthenticator {
            allowed_names: vec!["aggregator".into()],
        };
        assert_eq!(
            strict
                .authenticate(&credentials(true, &headers))
                .unwrap_err(),
            "x509: subject with cn=front-proxy-client is not in the allowed list"
        );
    }
}
