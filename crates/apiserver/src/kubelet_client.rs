//! How the API server reaches kubelets (upstream's `KubeletClientConfig`): HTTPS to the node's
//! InternalIP and `daemonEndpoints.kubeletEndpoint.port`, HTTP/1.1 (streaming upgrades need
//! it), authenticated with the `apiserver-kubelet-client` certificate the cluster CA signed.
//! The kubelet's serving certificate is not verified, as upstream without
//! `--kubelet-certificate-authority`: kubelets sign their own.

use std::sync::Arc;

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use serde_json::Value;
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

use crate::https_client::AnyServerCertificate;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("the kubelet client certificate: {0}")]
    Certificate(String),
    #[error("tls configuration: {0}")]
    Tls(#[from] rustls::Error),
    #[error("dialing the kubelet at {addr}: {source}")]
    Dial {
        addr: String,
        #[source]
        source: std::io::Error,
    },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Upstream's default kubelet port, for nodes that report none.
pub const DEFAULT_KUBELET_PORT: u16 = 10250;

/// Dials kubelets over TLS with the API server's client certificate.
#[derive(Clone)]
pub struct KubeletClient {
    connector: TlsConnector,
}

impl std::fmt::Debug for KubeletClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeletClient").finish_non_exhaustive()
    }
}

impl KubeletClient {
    /// A client presenting `cert_pem` / `key_pem`.
    pub fn new(cert_pem: &str, key_pem: &str) -> Result<KubeletClient> {
        let bad = |e: &dyn std::fmt::Display| Error::Certificate(e.to_string());
        let certs: Vec<CertificateDer<'static>> =
            CertificateDer::pem_slice_iter(cert_pem.as_bytes())
                .collect::<std::result::Result<_, _>>()
                .map_err(|e| bad(&e))?;
        let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes()).map_err(|e| bad(&e))?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()?
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AnyServerCertificate(provider)))
            .with_client_auth_cert(certs, key)?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(KubeletClient {
            connector: TlsConnector::from(Arc::new(config)),
        })
    }

    /// A TLS connection to the kubelet at `host:port`.
    pub async fn connect(&self, host: &str, port: u16) -> Result<TlsStream<TcpStream>> {
        let addr = authority(host, port);
        let dial = |source| Error::Dial {
            addr: addr.clone(),
            source,
        };
        let tcp = TcpStream::connect(&addr).await.map_err(dial)?;
        let _ = tcp.set_nodelay(true);
        let name = ServerName::try_from(host.to_string())
            .unwrap_or_else(|_| ServerName::try_from("kubelet").expect("a valid name"));
        self.connector.connect(name, tcp).await.map_err(dial)
    }
}

/// `host:port`, with brackets around an IPv6 address.
pub fn authority(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// Where a Node's kubelet listens: its InternalIP (else its first address) and its
/// `daemonEndpoints.kubeletEndpoint.Port` (capitalised in the API, as upstream; else 10250).
pub fn node_endpoint(node: &Value) -> Option<(String, u16)> {
    let addresses = node.pointer("/status/addresses")?.as_array()?;
    let address = addresses
        .iter()
        .find(|a| a["type"] == "InternalIP")
        .or_else(|| addresses.first())?["address"]
        .as_str()?
        .to_string();
    let port = node
        .pointer("/status/daemonEndpoints/kubeletEndpoint/Port")
        .and_then(Value::as_u64)
        .and_then(|p| u16::try_from(p).ok())
        .filter(|p| *p != 0)
        .unwrap_or(DEFAULT_KUBELET_PORT);
    Some((address, port))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_kubelet_is_reached_on_the_internal_ip_and_the_reported_port() {
        let node = json!({"status": {
            "addresses": [{"type": "Hostname", "address": "h1"},
                          {"type": "InternalIP", "address": "10.0.0.5"}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 40000}}}});
        assert_eq!(node_endpoint(&node), Some(("10.0.0.5".into(), 40000)));
        let bare = json!({"status": {"addresses": [{"type": "Hostname", "address": "h1"}]}});
        assert_eq!(node_endpoint(&bare), Some(("h1".into(), 10250)));
        assert_eq!(node_endpoint(&json!({"status": {}})), None);
        assert_eq!(authority("::1", 10250), "[::1]:10250");
    }
}
