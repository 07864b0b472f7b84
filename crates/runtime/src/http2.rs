//! The components' transport to the API server: HTTP/2, many requests per TLS connection.
//!
//! kube-rs's default stack speaks HTTP/1.1, so every watch holds a TLS connection of its own, and
//! a controller-manager with sixty informers keeps sixty connections (with their buffers on both
//! ends) open. client-go multiplexes its requests over HTTP/2 instead and opens another
//! connection only when one carries as many streams as the server allows; [`Pool`] does the same
//! with hyper's HTTP/2 client, and [`client_builder`] puts kube's own layers (base URI,
//! authentication, impersonation headers, retries) in front of it.
//!
//! A connection is used for at most [`STREAMS_PER_CONNECTION`] requests at a time, counted from
//! the request until its response body is dropped. hyper would otherwise queue a request past
//! the server's `SETTINGS_MAX_CONCURRENT_STREAMS` until some stream ends, and a watch may not
//! end for an hour.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use http::{Request, Response};
use hyper::body::{Body as HttpBody, Frame, Incoming, SizeHint};
use hyper::client::conn::http2::SendRequest;
use hyper_util::rt::{TokioExecutor, TokioIo};
use kube::client::{Body, ClientBuilder, ConfigExt, DynBody};
use rustls_pki_types::ServerName;
use tower::util::BoxService;
use tower::{BoxError, Service, ServiceBuilder, ServiceExt};

/// Requests one connection carries at a time: the API server's `--http2-max-streams-per-connection`
/// as Skiff serves it (upstream's is larger, so this is also safe against kube-apiserver).
pub const STREAMS_PER_CONNECTION: usize = 100;

/// The boxed service a [`ClientBuilder`] from [`client_builder`] wraps (kube's own
/// `GenericService`, which kube does not export).
pub type GenericService = BoxService<Request<Body>, Response<Box<DynBody>>, BoxError>;

/// A kube `ClientBuilder` for `config` whose requests travel over [`Pool`]'s HTTP/2
/// connections and say they come from `user_agent` (see
/// `skiff_apimachinery::version::user_agent`). A cluster URL that is not `https` keeps
/// kube's default (HTTP/1.1) stack: ALPN, which is how the server agrees to HTTP/2, is part of
/// TLS.
pub fn client_builder(
    mut config: kube::Config,
    user_agent: &str,
) -> kube::Result<ClientBuilder<GenericService>> {
    set_user_agent(&mut config, user_agent);
    if config.cluster_url.scheme() != Some(&http::uri::Scheme::HTTPS) {
        return ClientBuilder::try_from(config);
    }
    let pool = Pool::new(&config)?;
    builder_over(pool, config)
}

/// A kube `ClientBuilder` whose requests travel over `pool`'s connections with `config`'s
/// layers: several clients sharing one pool share its connections but each sends its own
/// headers (its impersonation, say).
fn builder_over(pool: Pool, config: kube::Config) -> kube::Result<ClientBuilder<GenericService>> {
    let service = ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(config.default_retry.then(|| {
            tower::retry::RetryLayer::new(kube::client::retry::RetryPolicy::server_retry())
        }))
        .option_layer(config.auth_layer()?)
        .layer(config.extra_headers_layer()?)
        .service(pool)
        .map_response(|response: Response<Counted>| {
            response.map(|body| Box::new(body) as Box<DynBody>)
        })
        .boxed();
    Ok(ClientBuilder::new(
        service,
        config.default_namespace.clone(),
    ))
}

/// `kube::Client` for `config` over HTTP/2 (see [`client_builder`]).
pub fn client(config: kube::Config, user_agent: &str) -> kube::Result<kube::Client> {
    Ok(client_builder(config, user_agent)?.build())
}

/// `kube::Client` for `config` over the connections of `pool` (which must reach `config`'s
/// server), from `user_agent`: several clients on one process's connections, each with its
/// own headers, as kubemark's hollow nodes are many nodes, each impersonating itself.
pub fn client_on(
    pool: &Pool,
    mut config: kube::Config,
    user_agent: &str,
) -> kube::Result<kube::Client> {
    set_user_agent(&mut config, user_agent);
    Ok(builder_over(pool.clone(), config)?.build())
}

/// Has `config`'s requests say they come from `user_agent`.
fn set_user_agent(config: &mut kube::Config, user_agent: &str) {
    // our own programs' names: always a valid header, but never a panic if not
    let user_agent =
        http::HeaderValue::from_str(user_agent).unwrap_or(http::HeaderValue::from_static("skiff"));
    config
        .headers
        .retain(|(name, _)| name != http::header::USER_AGENT);
    config.headers.push((http::header::USER_AGENT, user_agent));
}

/// HTTP/2 connections to one API server, opened as the requests in flight need them.
#[derive(Clone)]
pub struct Pool {
    inner: Arc<Inner>,
}

struct Inner {
    /// `host:port` to connect to.
    address: String,
    server_name: ServerName<'static>,
    tls: tokio_rustls::TlsConnector,
    connect_timeout: Option<Duration>,
    /// The longest wait for a response to start (`read_timeout`, below).
    response_timeout: Option<Duration>,
    connections: parking_lot::Mutex<Vec<Connection>>,
    /// Held while a connection is being opened.
    opening: tokio::sync::Mutex<()>,
}

struct Connection {
    sender: SendRequest<Body>,
    /// Requests on this connection whose responses are not finished.
    streams: Arc<AtomicUsize>,
}

impl Pool {
    /// A pool for the cluster `config` names, with its TLS settings (roots, client
    /// certificate, server name), offering `h2` by ALPN.
    pub fn new(config: &kube::Config) -> kube::Result<Pool> {
        let url = &config.cluster_url;
        let host = url.host().unwrap_or("localhost");
        let address = format!("{}:{}", host, url.port_u16().unwrap_or(443));
        let name = config
            .tls_server_name
            .clone()
            .unwrap_or_else(|| host.trim_matches(['[', ']']).to_string());
        let server_name = ServerName::try_from(name.clone())
            .map_err(|e| kube::Error::Service(format!("TLS server name {name:?}: {e}").into()))?;
        let mut tls = config.rustls_client_config()?;
        // http/1.1 too, as Go offers, so that a server without HTTP/2 still completes the
        // handshake and the error below names the cause
        tls.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(Pool {
            inner: Arc::new(Inner {
                address,
                server_name,
                tls: tokio_rustls::TlsConnector::from(Arc::new(tls)),
                connect_timeout: config.connect_timeout,
                // kube's own stack bounds each read from a request's connection by
                // `read_timeout`; here connections are shared, so it bounds the wait for each
                // response to start instead: a request the server never answers fails rather
                // than blocking its caller forever (a watch's response starts at once)
                response_timeout: config.read_timeout,
                connections: parking_lot::Mutex::new(Vec::new()),
                opening: tokio::sync::Mutex::new(()),
            }),
        })
    }

    /// Connections currently open (for tests and diagnostics).
    pub fn connections(&self) -> usize {
        let mut connections = self.inner.connections.lock();
        connections.retain(|c| !c.sender.is_closed());
        connections.len()
    }
}

impl Inner {
    /// A connection with room for one more stream, and the claim on that stream, opening a
    /// connection if none has room. Only the opening waits (one at a time, so that concurrent
    /// requests share what it opens); finding and claiming take a plain lock, never held
    /// across I/O.
    async fn checkout(&self) -> Result<(SendRequest<Body>, Stream), BoxError> {
        if let Some(found) = self.claim() {
            return Ok(found);
        }
        let _opening = self.opening.lock().await;
        if let Some(found) = self.claim() {
            return Ok(found);
        }
        let sender = match self.connect_timeout {
            Some(limit) => tokio::time::timeout(limit, self.connect())
                .await
                .map_err(|_| format!("connecting to {}: timed out", self.address))??,
            None => self.connect().await?,
        };
        let streams = Arc::default();
        let stream = Stream::claim(&streams);
        self.connections.lock().push(Connection {
            sender: sender.clone(),
            streams,
        });
        Ok((sender, stream))
    }

    /// A stream on an open connection with room for it, if there is one.
    fn claim(&self) -> Option<(SendRequest<Body>, Stream)> {
        let mut connections = self.connections.lock();
        connections.retain(|c| !c.sender.is_closed());
        connections
            .iter()
            .find(|c| {
                c.sender.is_ready() && c.streams.load(Ordering::Acquire) < STREAMS_PER_CONNECTION
            })
            .map(|c| (c.sender.clone(), Stream::claim(&c.streams)))
    }

    async fn connect(&self) -> Result<SendRequest<Body>, BoxError> {
        let tcp = tokio::net::TcpStream::connect(&self.address)
            .await
            .map_err(|e| format!("connecting to {}: {e}", self.address))?;
        tcp.set_nodelay(true)?;
        let tls = self
            .tls
            .connect(self.server_name.clone(), tcp)
            .await
            .map_err(|e| format!("TLS with {}: {e}", self.address))?;
        if tls.get_ref().1.alpn_protocol() != Some(b"h2") {
            return Err(format!("{} did not agree to HTTP/2 (ALPN h2)", self.address).into());
        }
        let (sender, connection) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
            .timer(hyper_util::rt::TokioTimer::new())
            // client-go's HTTP/2 health check: a connection silent for 30 s is pinged,
            // and closed if the ping is not answered within 15 s (its requests fail, its
            // watches restart on a new connection)
            .keep_alive_interval(Duration::from_secs(30))
            .keep_alive_timeout(Duration::from_secs(15))
            .handshake(TokioIo::new(tls))
            .await?;
        let address = self.address.clone();
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(%address, error = %e, "HTTP/2 connection to the API server ended");
            }
        });
        Ok(sender)
    }
}

impl Service<Request<Body>> for Pool {
    type Response = Response<Counted>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Response<Counted>, BoxError>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<Body>) -> Self::Future {
        let inner = self.inner.clone();
        Box::pin(async move {
            let (mut sender, stream) = inner.checkout().await?;
            let sent = sender.send_request(request);
            let response = match inner.response_timeout {
                Some(limit) => tokio::time::timeout(limit, sent)
                    .await
                    .map_err(|_| format!("{}: no response within {limit:?}", inner.address))??,
                None => sent.await?,
            };
            Ok(response.map(|body| Counted {
                body,
                _stream: stream,
            }))
        })
    }
}

/// One stream counted against its connection's [`STREAMS_PER_CONNECTION`] until dropped.
struct Stream(Arc<AtomicUsize>);

impl Stream {
    fn claim(streams: &Arc<AtomicUsize>) -> Stream {
        streams.fetch_add(1, Ordering::AcqRel);
        Stream(streams.clone())
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A response body that holds its stream's place on the connection until it is dropped.
pub struct Counted {
    body: Incoming,
    _stream: Stream,
}

impl HttpBody for Counted {
    type Data = bytes::Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<bytes::Bytes>, BoxError>>> {
        Pin::new(&mut self.body).poll_frame(cx).map_err(Into::into)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool")
            .field("address", &self.inner.address)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use http::{Request, Response};
    use http_body_util::{BodyExt, Full, StreamBody};
    use hyper::body::{Bytes, Frame, Incoming};
    use hyper_util::rt::{TokioExecutor, TokioIo};
    use tower::{Service, ServiceExt};

    use super::{Pool, STREAMS_PER_CONNECTION};

    /// An HTTPS server on loopback that speaks what its ALPN list offers and counts the
    /// connections it accepts. `/hang` answers with a body that never ends (a watch);
    /// `/silent` never answers; any other path echoes the request's HTTP version, path and
    /// `Impersonate-User` header.
    struct Server {
        url: String,
        ca_der: Vec<u8>,
        accepted: Arc<AtomicUsize>,
    }

    async fn server(alpn: &[&[u8]]) -> Server {
        let key = rcgen::generate_simple_self_signed(vec!["127.0.0.1".into()]).unwrap();
        let ca_der = key.cert.der().to_vec();
        let mut tls = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![key.cert.der().clone()],
            rustls_pki_types::PrivateKeyDer::Pkcs8(key.signing_key.serialize_der().into()),
        )
        .unwrap();
        tls.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(tls));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("https://{}", listener.local_addr().unwrap());
        let accepted = Arc::new(AtomicUsize::new(0));
        let count = accepted.clone();
        tokio::spawn(async move {
            loop {
                let (tcp, _) = listener.accept().await.unwrap();
                count.fetch_add(1, Ordering::SeqCst);
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    let Ok(tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let service = hyper::service::service_fn(|req: Request<Incoming>| async move {
                        match answer(&req) {
                            Some(response) => Ok::<_, std::convert::Infallible>(response),
                            None => std::future::pending().await,
                        }
                    });
                    let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                        .http2()
                        .max_concurrent_streams(STREAMS_PER_CONNECTION as u32)
                        .serve_connection(TokioIo::new(tls), service)
                        .await;
                });
            }
        });
        Server {
            url,
            ca_der,
            accepted,
        }
    }

    type AnyBody = http_body_util::combinators::BoxBody<Bytes, std::convert::Infallible>;

    fn answer(req: &Request<Incoming>) -> Option<Response<AnyBody>> {
        if req.uri().path() == "/silent" {
            return None;
        }
        if req.uri().path() == "/hang" {
            let never =
                futures::stream::pending::<Result<Frame<Bytes>, std::convert::Infallible>>();
            return Some(Response::new(StreamBody::new(never).boxed()));
        }
        let header = |name| {
            req.headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("-")
        };
        let (user, agent) = (header("impersonate-user"), header("user-agent"));
        let text = format!("{:?} {} {user} {agent}", req.version(), req.uri().path());
        Some(Response::new(Full::new(Bytes::from(text)).boxed()))
    }

    fn config(server: &Server) -> kube::Config {
        let mut config = kube::Config::new(server.url.parse().unwrap());
        config.root_cert = Some(vec![server.ca_der.clone()]);
        config
    }

    fn get(server: &Server, path: &str) -> Request<kube::client::Body> {
        Request::get(format!("{}{path}", server.url))
            .body(kube::client::Body::empty())
            .unwrap()
    }

    /// A GET of `path` through `pool`, as a kube client's service calls it.
    async fn call(
        pool: &mut Pool,
        server: &Server,
        path: &str,
    ) -> Result<Response<super::Counted>, super::BoxError> {
        pool.ready().await.unwrap().call(get(server, path)).await
    }

    #[tokio::test]
    async fn requests_share_a_connection_until_it_carries_the_stream_limit() {
        let server = server(&[b"h2"]).await;
        let mut pool = Pool::new(&config(&server)).unwrap();
        let mut watches = Vec::new();
        for _ in 0..STREAMS_PER_CONNECTION {
            let response = call(&mut pool, &server, "/hang").await;
            watches.push(response.unwrap());
        }
        assert_eq!(server.accepted.load(Ordering::SeqCst), 1);
        assert_eq!(pool.connections(), 1);

        // the 101st would wait in hyper's queue behind watches that never end: it gets a
        // connection of its own instead, and answers
        let response = call(&mut pool, &server, "/x").await;
        let body = response.unwrap().into_body().collect().await.unwrap();
        assert_eq!(body.to_bytes(), "HTTP/2.0 /x - -");
        assert_eq!(server.accepted.load(Ordering::SeqCst), 2);

        // ended responses give their streams back: the next requests reuse the connections
        drop(watches);
        for _ in 0..3 {
            let response = call(&mut pool, &server, "/y").await;
            response.unwrap().into_body().collect().await.unwrap();
        }
        assert_eq!(server.accepted.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn the_kube_client_sends_its_layers_headers_over_http2() {
        let server = server(&[b"h2"]).await;
        let mut config = config(&server);
        config.auth_info.impersonate = Some("alice".into());
        let client = super::client(config, "skiff-test/v1 (linux/amd64)").unwrap();
        let text = client
            .request_text(Request::get("/version").body(Vec::new()).unwrap())
            .await
            .unwrap();
        assert_eq!(text, "HTTP/2.0 /version alice skiff-test/v1 (linux/amd64)");
    }

    #[tokio::test]
    async fn a_response_that_never_starts_fails_after_the_read_timeout() {
        let server = server(&[b"h2"]).await;
        let mut config = config(&server);
        config.read_timeout = Some(std::time::Duration::from_millis(300));
        let mut pool = Pool::new(&config).unwrap();
        let Err(error) = call(&mut pool, &server, "/silent").await else {
            panic!("a request never answered succeeded");
        };
        assert!(error.to_string().contains("no response within"), "{error}");
        // a watch's response starts at once: it outlives the timeout
        let watch = call(&mut pool, &server, "/hang").await;
        let mut body = watch.unwrap().into_body();
        let frame = tokio::time::timeout(std::time::Duration::from_millis(600), body.frame()).await;
        assert!(frame.is_err(), "the watch's body is still open");
        // the connection serves on
        let response = call(&mut pool, &server, "/x").await;
        let body = response.unwrap().into_body().collect().await.unwrap();
        assert_eq!(body.to_bytes(), "HTTP/2.0 /x - -");
        assert_eq!(server.accepted.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn a_server_without_http2_is_a_clear_error() {
        let server = server(&[b"http/1.1"]).await;
        let mut pool = Pool::new(&config(&server)).unwrap();
        let Err(error) = call(&mut pool, &server, "/x").await else {
            panic!("a server without h2 answered");
        };
        assert!(
            error.to_string().contains("did not agree to HTTP/2"),
            "{error}"
        );
    }
}
