//! A bare HTTPS/1.1 client with a client certificate from the cluster CA, for what kubectl and
//! kube-rs cannot do: send a body only part-way and hold it open, read response headers, talk
//! to a kubelet's server directly.

use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use futures::channel::mpsc;
use http::{Request, Response};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper_util::rt::TokioIo;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio_rustls::rustls;

use super::ApiServer;

pub type Body = BoxBody<Bytes, Infallible>;

/// The sending end of a body that stays open until it is dropped or closed.
pub type Held = mpsc::UnboundedSender<Result<Frame<Bytes>, Infallible>>;

/// A whole body.
pub fn body(bytes: impl Into<Bytes>) -> Body {
    http_body_util::Full::new(bytes.into()).boxed()
}

/// A body whose first chunk is `first`; the rest comes through the returned sender.
pub fn held_body(first: &'static [u8]) -> (Held, Body) {
    let (tx, rx) = mpsc::unbounded();
    tx.unbounded_send(Ok(Frame::data(Bytes::from_static(first))))
        .expect("an open channel");
    (tx, StreamBody::new(rx).boxed())
}

/// A client that connects as one user (a certificate CN=user, O=group from the cluster CA);
/// cheap to clone into tasks.
#[derive(Clone)]
pub struct Client {
    config: Arc<rustls::ClientConfig>,
    port: u16,
}

impl Client {
    pub fn new(api: &ApiServer, user: &str, group: Option<&str>) -> Client {
        let pki =
            skiff_apiserver::pki::Pki::load(&api.data_dir.join("tls")).expect("the cluster CA");
        Client::to(api, &pki.ca_cert_pem, api.port, Some((user, group)))
    }

    /// A client of the server on `port` whose certificate `server_ca_pem` signs (a kubelet's
    /// self-signed serving certificate, say), presenting a certificate for `user` (CN) and
    /// group (O) from the cluster CA, or none.
    pub fn to(
        api: &ApiServer,
        server_ca_pem: &str,
        port: u16,
        user: Option<(&str, Option<&str>)>,
    ) -> Client {
        let mut roots = rustls::RootCertStore::empty();
        for c in CertificateDer::pem_slice_iter(server_ca_pem.as_bytes()) {
            roots.add(c.expect("CA PEM")).expect("CA certificate");
        }
        let builder = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .expect("TLS versions")
        .with_root_certificates(roots);
        let config = match user {
            None => builder.with_no_client_auth(),
            Some((user, group)) => {
                let pki = skiff_apiserver::pki::Pki::load(&api.data_dir.join("tls"))
                    .expect("the cluster CA");
                let (cert, key) = pki
                    .issue(user, group, &[], false)
                    .expect("a client certificate");
                let certs: Vec<CertificateDer<'static>> =
                    CertificateDer::pem_slice_iter(cert.as_bytes())
                        .collect::<Result<_, _>>()
                        .expect("client certificate PEM");
                let key = PrivateKeyDer::from_pem_slice(key.as_bytes()).expect("client key PEM");
                builder
                    .with_client_auth_cert(certs, key)
                    .expect("client auth")
            }
        };
        Client {
            config: Arc::new(config),
            port,
        }
    }

    /// Sends one request on a new connection; returns once the response headers arrive (the
    /// body streams).
    pub async fn send(&self, req: Request<Body>) -> Response<Incoming> {
        let tcp = tokio::net::TcpStream::connect(("127.0.0.1", self.port))
            .await
            .expect("connect");
        let tls = tokio_rustls::TlsConnector::from(self.config.clone())
            .connect(
                ServerName::IpAddress(std::net::Ipv4Addr::LOCALHOST.into()),
                tcp,
            )
            .await
            .expect("TLS handshake");
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
            .await
            .expect("HTTP handshake");
        tokio::spawn(conn);
        sender.send_request(req).await.expect("a response")
    }
}

/// The response's status and body as text.
pub async fn text(resp: Response<Incoming>) -> (u16, String) {
    let status = resp.status().as_u16();
    let bytes = resp
        .into_body()
        .collect()
        .await
        .expect("the body")
        .to_bytes();
    (status, String::from_utf8_lossy(&bytes).into_owned())
}

/// A TLS acceptor for a test's own HTTPS server on loopback (a webhook, an OIDC issuer), serving
/// `pki`'s serving certificate; clients trust `pki.ca_cert_pem`.
pub fn loopback_acceptor(pki: &skiff_apiserver::pki::Pki) -> tokio_rustls::TlsAcceptor {
    let certs: Vec<CertificateDer<'static>> =
        CertificateDer::pem_slice_iter(pki.serving_cert_pem.as_bytes())
            .collect::<Result<_, _>>()
            .expect("serving certificate");
    let key = PrivateKeyDer::from_pem_slice(pki.serving_key_pem.as_bytes()).expect("serving key");
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("TLS versions")
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .expect("serving certificate and key");
    tokio_rustls::TlsAcceptor::from(Arc::new(config))
}

/// A test's own HTTPS server of JSON answers on a loopback port of `runtime` (an aggregated API
/// server, a metrics adapter): `answer` gets each request's head and gives the status and body.
/// It serves until the runtime is dropped; returns the port.
pub fn json_server<F, Fut>(runtime: &tokio::runtime::Runtime, answer: F) -> u16
where
    F: Fn(http::request::Parts) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = (u16, serde_json::Value)> + Send + 'static,
{
    let dir = tempfile::tempdir().expect("temp dir");
    let pki = skiff_apiserver::pki::Pki::ensure(dir.path(), &["127.0.0.1".to_string()])
        .expect("serving certificates");
    let acceptor = loopback_acceptor(&pki);
    let listener = runtime
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .expect("a loopback port");
    let port = listener.local_addr().expect("bound").port();
    runtime.spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let (acceptor, answer) = (acceptor.clone(), answer.clone());
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                    let answer = answer.clone();
                    async move {
                        let (code, body) = answer(req.into_parts().0).await;
                        let resp = Response::builder()
                            .status(code)
                            .header("content-type", "application/json")
                            .body(http_body_util::Full::new(Bytes::from(body.to_string())))
                            .expect("a response");
                        Ok::<_, Infallible>(resp)
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(tls), service)
                    .await;
            });
        }
    });
    port
}
