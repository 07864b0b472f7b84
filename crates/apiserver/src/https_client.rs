//! The HTTPS connections the API server opens as a client of a webhook, an OIDC issuer or an
//! aggregated API server: TCP to `host:port`, rustls with a configuration checking the
//! certificate for `server_name` (an IP address or a DNS name), then (for [`connect`]) a hyper
//! HTTP/1.1 handshake whose connection task runs in the background. Errors read as Go's
//! `net/http` does (`dial tcp …`, `tls: …`), since upstream's messages carry them.
//!
//! [`TlsConfigs`] builds those configurations once per way of trusting the server (a caBundle,
//! the host's roots, or no check at all) and per client identity.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;

use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use rustls::DigitallySignedStruct;
use rustls::RootCertStore;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

/// A TLS connection to `host:port` whose certificate must be valid for `server_name`.
pub async fn dial(
    server_name: &str,
    host: &str,
    port: u16,
    config: Arc<rustls::ClientConfig>,
) -> Result<TlsStream<TcpStream>, String> {
    let name = match server_name.parse::<IpAddr>() {
        Ok(ip) => ServerName::IpAddress(ip.into()),
        Err(_) => ServerName::try_from(server_name.to_string()).map_err(|e| e.to_string())?,
    };
    let authority = crate::kubelet_client::authority(host, port);
    let tcp = TcpStream::connect(&authority)
        .await
        .map_err(|e| format!("dial tcp {authority}: {e}"))?;
    let _ = tcp.set_nodelay(true);
    TlsConnector::from(config)
        .connect(name, tcp)
        .await
        .map_err(|e| format!("tls: {e}"))
}

/// [`dial`], then an HTTP/1.1 handshake.
pub async fn connect<B>(
    server_name: &str,
    host: &str,
    port: u16,
    config: Arc<rustls::ClientConfig>,
) -> Result<SendRequest<B>, String>
where
    B: hyper::body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let tls = dial(server_name, host, port, config).await?;
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(sender)
}

/// How a server's certificate is checked.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Trust {
    /// Against these PEM roots (a webhook's or APIService's `caBundle`).
    Bundle(Vec<u8>),
    /// Against the host's trust roots (no `caBundle`, as upstream).
    HostRoots,
    /// Not at all, the handshake's signature still checked (`insecureSkipTLSVerify`).
    Insecure,
}

/// A client certificate and key presented to servers that ask for one.
pub struct Identity {
    certs: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
}

impl Identity {
    pub fn from_pem(cert_pem: &str, key_pem: &str) -> Result<Identity, String> {
        let certs = CertificateDer::pem_slice_iter(cert_pem.as_bytes())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| format!("reading the client certificate: {e}"))?;
        let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes())
            .map_err(|e| format!("reading the client key: {e}"))?;
        Ok(Identity { certs, key })
    }
}

/// Client TLS configurations by [`Trust`], each built once: reading the host's roots costs
/// milliseconds. All present the same [`Identity`], if any.
pub struct TlsConfigs {
    identity: Option<Identity>,
    /// A plain mutex, never held across an await.
    built: std::sync::Mutex<HashMap<Trust, Arc<rustls::ClientConfig>>>,
}

impl TlsConfigs {
    pub fn new(identity: Option<Identity>) -> TlsConfigs {
        TlsConfigs {
            identity,
            built: Default::default(),
        }
    }

    /// The configuration for `trust` (HTTP/1.1 only: upgrades need it).
    pub fn get(&self, trust: &Trust) -> Result<Arc<rustls::ClientConfig>, String> {
        let mut built = self.built.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(c) = built.get(trust) {
            return Ok(c.clone());
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?;
        let builder = match trust {
            Trust::Insecure => builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(AnyServerCertificate(provider))),
            Trust::Bundle(pem) => builder.with_root_certificates(bundle_roots(pem)?),
            Trust::HostRoots => {
                let mut roots = RootCertStore::empty();
                for cert in rustls_native_certs::load_native_certs().certs {
                    // a host root rustls cannot read is one less root, as Go's loader skips it
                    let _ = roots.add(cert);
                }
                builder.with_root_certificates(roots)
            }
        };
        let mut config = match &self.identity {
            Some(id) => builder
                .with_client_auth_cert(id.certs.clone(), id.key.clone_key())
                .map_err(|e| e.to_string())?,
            None => builder.with_no_client_auth(),
        };
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        let config = Arc::new(config);
        built.insert(trust.clone(), config.clone());
        Ok(config)
    }
}

/// The roots of a PEM bundle; an unreadable certificate is `invalid caBundle`.
fn bundle_roots(pem: &[u8]) -> Result<RootCertStore, String> {
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(pem) {
        let cert = cert.map_err(|e| format!("invalid caBundle: {e}"))?;
        roots
            .add(cert)
            .map_err(|e| format!("invalid caBundle: {e}"))?;
    }
    Ok(roots)
}

/// Accepts any server certificate (kubelets' are self-signed; `insecureSkipTLSVerify`), still
/// checking that the handshake is signed by the certificate's key.
#[derive(Debug)]
pub(crate) struct AnyServerCertificate(pub(crate) Arc<CryptoProvider>);

impl ServerCertVerifier for AnyServerCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> std::result::Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
