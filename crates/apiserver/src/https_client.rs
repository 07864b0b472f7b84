//! The one HTTPS/1.1 connection the API server opens as a client of a webhook or an OIDC issuer:
//! TCP to `host:port`, rustls with `config` checking the certificate for `server_name` (an IP
//! address or a DNS name), then a hyper HTTP/1.1 handshake whose connection task runs in the
//! background. Errors read as Go's `net/http` does (`dial tcp …`, `tls: …`), since upstream's
//! messages carry them.

use std::net::IpAddr;
use std::sync::Arc;

use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use rustls_pki_types::ServerName;
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

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
    let name = match server_name.parse::<IpAddr>() {
        Ok(ip) => ServerName::IpAddress(ip.into()),
        Err(_) => ServerName::try_from(server_name.to_string()).map_err(|e| e.to_string())?,
    };
    let tcp = TcpStream::connect((host, port))
        .await
        .map_err(|e| format!("dial tcp {host}:{port}: {e}"))?;
    let tls = TlsConnector::from(config)
        .connect(name, tcp)
        .await
        .map_err(|e| format!("tls: {e}"))?;
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(sender)
}
