//! TLS: the certificates of `kubernetes.io/tls` Secrets chosen by SNI. rustls asks a
//! [`ResolvesServerCert`] for each ClientHello; [`Resolver`] answers from the current
//! configuration (so new certificates serve at once, with no listener restarted): the
//! certificate of the exact server name, else of its `*.` wildcard, else a self-signed
//! default (as ingress-nginx's "Kubernetes Ingress Controller Fake Certificate" and Traefik's
//! default certificate), so that hosts without TLS still complete a handshake.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Secret;
use rustls::crypto::ring::sign::any_supported_type;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio::sync::watch;

use crate::config::Config;

/// The subject of the default certificate.
const DEFAULT_SUBJECT: &str = "Skiff Ingress Controller Fake Certificate";

/// The ALPN protocols offered to clients: HTTP/2 first, as upstream controllers do.
pub const ALPN: [&[u8]; 2] = [b"h2", b"http/1.1"];

/// The certificates by server name (lowercase); `*.foo.com` for a wildcard.
#[derive(Clone, Default)]
pub struct Certs {
    by_host: HashMap<String, Arc<CertifiedKey>>,
}

impl fmt::Debug for Certs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.by_host.keys()).finish()
    }
}

impl Certs {
    /// Serves `key` for `host` unless a certificate is set for it (the oldest Ingress wins).
    pub fn add(&mut self, host: &str, key: Arc<CertifiedKey>) {
        self.by_host.entry(host.to_ascii_lowercase()).or_insert(key);
    }

    /// The certificate for the server name `host`: its own, else its wildcard's.
    pub fn get(&self, host: &str) -> Option<&Arc<CertifiedKey>> {
        let host = host.to_ascii_lowercase();
        self.by_host.get(&host).or_else(|| {
            let (_, suffix) = host.split_once('.')?;
            self.by_host.get(&format!("*.{suffix}"))
        })
    }

    /// The hosts with a certificate, sorted.
    pub fn hosts(&self) -> Vec<&str> {
        let mut hosts: Vec<&str> = self.by_host.keys().map(String::as_str).collect();
        hosts.sort_unstable();
        hosts
    }
}

/// The certificate and key of a `kubernetes.io/tls` Secret; the error says what is wrong with
/// it (an event's note).
pub fn certified_key(secret: &Secret) -> Result<Arc<CertifiedKey>, String> {
    let data = secret.data.as_ref();
    let field = |name: &str| {
        data.and_then(|d| d.get(name))
            .map(|b| b.0.as_slice())
            .filter(|b| !b.is_empty())
            .ok_or_else(|| format!("it has no {name}"))
    };
    let (cert_pem, key_pem) = (field("tls.crt")?, field("tls.key")?);
    let certs = CertificateDer::pem_slice_iter(cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("tls.crt: {e}"))?;
    if certs.is_empty() {
        return Err("tls.crt: no PEM certificate".into());
    }
    let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(|e| format!("tls.key: {e}"))?;
    let key = any_supported_type(&key).map_err(|e| format!("tls.key: {e}"))?;
    let certified = CertifiedKey::new(certs, key);
    certified
        .keys_match()
        .map_err(|e| format!("tls.crt does not go with tls.key: {e}"))?;
    Ok(Arc::new(certified))
}

/// A self-signed certificate for handshakes no Secret serves.
pub fn default_certificate() -> crate::Result<Arc<CertifiedKey>> {
    let key = rcgen::KeyPair::generate()?;
    let mut params = rcgen::CertificateParams::new(vec!["ingress.local".to_string()])?;
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, DEFAULT_SUBJECT);
    let cert = params.self_signed(&key)?;
    let key_der = PrivateKeyDer::Pkcs8(key.serialize_der().into());
    let signing = any_supported_type(&key_der)
        .map_err(|e| crate::Error::DefaultCertificate(e.to_string()))?;
    Ok(Arc::new(CertifiedKey::new(
        vec![cert.der().clone()],
        signing,
    )))
}

/// Chooses a certificate by SNI from the current configuration.
pub struct Resolver {
    config: watch::Receiver<Arc<Config>>,
    default: Arc<CertifiedKey>,
}

impl fmt::Debug for Resolver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Resolver").finish_non_exhaustive()
    }
}

impl Resolver {
    pub fn new(config: watch::Receiver<Arc<Config>>, default: Arc<CertifiedKey>) -> Resolver {
        Resolver { config, default }
    }
}

impl ResolvesServerCert for Resolver {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let config = self.config.borrow().clone();
        let chosen = hello.server_name().and_then(|name| config.certs.get(name));
        Some(chosen.unwrap_or(&self.default).clone())
    }
}

/// The rustls configuration of the HTTPS port.
pub fn server_config(resolver: Resolver) -> rustls::ServerConfig {
    let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("ring supports the default protocol versions")
    .with_no_client_auth()
    .with_cert_resolver(Arc::new(resolver));
    config.alpn_protocols = ALPN.iter().map(|p| p.to_vec()).collect();
    config
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::ByteString;
    use std::collections::BTreeMap;

    fn secret(cert: &str, key: &str) -> Secret {
        Secret {
            type_: Some("kubernetes.io/tls".into()),
            data: Some(BTreeMap::from([
                ("tls.crt".into(), ByteString(cert.as_bytes().to_vec())),
                ("tls.key".into(), ByteString(key.as_bytes().to_vec())),
            ])),
            ..Default::default()
        }
    }

    fn pair(host: &str) -> (String, String) {
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec![host.to_string()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        (cert.pem(), key.serialize_pem())
    }

    #[test]
    fn a_tls_secret_gives_its_certificate_and_key() {
        let (cert, key) = pair("a.com");
        assert!(certified_key(&secret(&cert, &key)).is_ok());
    }

    #[test]
    fn broken_secrets_say_what_is_wrong() {
        let (cert, key) = pair("a.com");
        let (_, other_key) = pair("b.com");
        let garbage = "-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydA==\n-----END CERTIFICATE-----\n";
        let cases = [
            (secret("", &key), "it has no tls.crt"),
            (secret(&cert, "nope"), "tls.key"),
            (secret("not pem", &key), "tls.crt: no PEM certificate"),
            (secret(garbage, &key), "tls.crt does not go with tls.key"),
            (
                secret(&cert, &other_key),
                "tls.crt does not go with tls.key",
            ),
        ];
        for (secret, want) in cases {
            let err = certified_key(&secret).unwrap_err();
            assert!(err.starts_with(want), "{err:?} should start with {want:?}");
        }
    }

    #[test]
    fn certificates_are_found_by_exact_name_then_wildcard() {
        let (cert, key) = pair("a.com");
        let k = certified_key(&secret(&cert, &key)).unwrap();
        let mut certs = Certs::default();
        certs.add("A.com", k.clone());
        certs.add("*.b.com", k);
        assert!(certs.get("a.com").is_some());
        assert!(certs.get("x.b.com").is_some());
        assert!(certs.get("b.com").is_none());
        assert!(certs.get("y.x.b.com").is_none());
        assert_eq!(certs.hosts(), ["*.b.com", "a.com"]);
    }

    #[test]
    fn the_default_certificate_is_self_signed() {
        let cert = default_certificate().unwrap();
        assert_eq!(cert.cert.len(), 1);
        cert.keys_match().unwrap();
    }
}
