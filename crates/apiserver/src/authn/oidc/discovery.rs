//! The issuer's keys over HTTPS, as upstream finds them: `GET
//! <issuer>/.well-known/openid-configuration`, whose `issuer` must be the configured issuer
//! exactly, then `GET` its `jwks_uri`. The server certificates are verified against
//! `--oidc-ca-file`, else the host's trust roots.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use http::{Request, Uri, header};
use http_body_util::{BodyExt, Empty, Limited};
use jsonwebtoken::jwk::JwkSet;
use rustls::RootCertStore;
use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject;
use serde_json::Value;

use super::keys::KeySource;

/// Largest discovery document or key set read.
const MAX_RESPONSE_BYTES: usize = 1024 * 1024;

/// How long one `GET` may take.
const TIMEOUT: Duration = Duration::from_secs(10);

/// Fetches an issuer's keys through its discovery document.
pub struct Discovery {
    issuer: String,
    tls: Arc<rustls::ClientConfig>,
}

impl Discovery {
    /// `ca_pem`: the certificates that may sign the issuer's serving certificate (`None`: the
    /// host's trust roots).
    pub fn new(issuer: &str, ca_pem: Option<&[u8]>) -> Result<Self, String> {
        let mut roots = RootCertStore::empty();
        match ca_pem {
            Some(pem) => {
                for cert in CertificateDer::pem_slice_iter(pem) {
                    roots
                        .add(cert.map_err(|e| e.to_string())?)
                        .map_err(|e| e.to_string())?;
                }
                if roots.is_empty() {
                    return Err("no certificates found".into());
                }
            }
            None => {
                for cert in rustls_native_certs::load_native_certs().certs {
                    let _ = roots.add(cert);
                }
            }
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let tls = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_root_certificates(roots)
            .with_no_client_auth();
        Ok(Self {
            issuer: issuer.to_string(),
            tls: Arc::new(tls),
        })
    }

    /// The JSON at an https `url`, or go-oidc's error for a failed `GET`.
    async fn get(&self, url: &str) -> Result<Value, String> {
        match tokio::time::timeout(TIMEOUT, self.try_get(url)).await {
            Ok(result) => result.map_err(|e| format!("Get {url:?}: {e}")),
            Err(_) => Err(format!("Get {url:?}: context deadline exceeded")),
        }
    }

    async fn try_get(&self, url: &str) -> Result<Value, String> {
        let uri: Uri = url.parse().map_err(|e| format!("invalid url: {e}"))?;
        if uri.scheme_str() != Some("https") {
            return Err("unsupported protocol scheme (https only)".into());
        }
        let host = uri
            .host()
            .unwrap_or("")
            .trim_matches(['[', ']'])
            .to_string();
        let port = uri.port_u16().unwrap_or(443);
        let mut sender = crate::https_client::connect(&host, &host, port, self.tls.clone()).await?;
        let path = uri.path_and_query().map_or("/", |p| p.as_str());
        let request = Request::get(path)
            .header(header::HOST, uri.authority().map_or("", |a| a.as_str()))
            .header(header::ACCEPT, "application/json")
            .body(Empty::<bytes::Bytes>::new())
            .map_err(|e| e.to_string())?;
        let response = sender
            .send_request(request)
            .await
            .map_err(|e| e.to_string())?;
        let status = response.status();
        let body = Limited::new(response.into_body(), MAX_RESPONSE_BYTES)
            .collect()
            .await
            .map_err(|e| e.to_string())?
            .to_bytes();
        if !status.is_success() {
            return Err(format!("{status}: {}", String::from_utf8_lossy(&body)));
        }
        serde_json::from_slice(&body).map_err(|e| format!("decoding the response: {e}"))
    }
}

/// The discovery document's `jwks_uri`, once its `issuer` is the one configured (go-oidc's
/// check: a provider answering for another issuer is refused).
pub fn jwks_uri(document: &Value, issuer: &str) -> Result<String, String> {
    let claimed = document["issuer"].as_str().unwrap_or_default();
    if claimed != issuer {
        return Err(format!(
            "oidc: issuer did not match the issuer returned by provider, expected {issuer:?} got {claimed:?}"
        ));
    }
    match document["jwks_uri"].as_str() {
        Some(uri) if !uri.is_empty() => Ok(uri.to_string()),
        _ => Err("oidc: provider discovery object has no jwks_uri".into()),
    }
}

#[async_trait]
impl KeySource for Discovery {
    async fn fetch(&self) -> Result<JwkSet, String> {
        let url = format!(
            "{}/.well-known/openid-configuration",
            self.issuer.trim_end_matches('/')
        );
        let document = self.get(&url).await?;
        let uri = jwks_uri(&document, &self.issuer)?;
        let keys = self
            .get(&uri)
            .await
            .map_err(|e| format!("oidc: get keys failed: {e}"))?;
        serde_json::from_value(keys).map_err(|e| format!("oidc: failed to decode keys: {e} {uri}"))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn the_discovery_document_must_name_the_configured_issuer() {
        let doc = json!({"issuer": "https://idp.example", "jwks_uri": "https://idp.example/keys"});
        assert_eq!(
            jwks_uri(&doc, "https://idp.example").unwrap(),
            "https://idp.example/keys"
        );
        assert_eq!(
            jwks_uri(&doc, "https://idp.example/").unwrap_err(),
            "oidc: issuer did not match the issuer returned by provider, expected \"https://idp.example/\" got \"https://idp.example\""
        );
        assert!(
            jwks_uri(
                &json!({"issuer": "https://idp.example"}),
                "https://idp.example"
            )
            .unwrap_err()
            .contains("no jwks_uri")
        );
    }

    #[test]
    fn a_ca_file_without_certificates_is_refused() {
        assert!(Discovery::new("https://idp.example", Some(b"not a pem")).is_err());
        assert!(Discovery::new("https://idp.example", None).is_ok());
    }

    #[tokio::test]
    async fn an_issuer_that_is_down_is_an_error_naming_the_url() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        drop(listener);
        let issuer = format!("https://127.0.0.1:{port}");
        let err = Discovery::new(&issuer, None)
            .unwrap()
            .fetch()
            .await
            .unwrap_err();
        assert!(
            err.starts_with(&format!(
                "Get \"{issuer}/.well-known/openid-configuration\": dial tcp"
            )),
            "{err}"
        );
    }
}
