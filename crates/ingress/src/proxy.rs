//! The reverse proxy: one request routed by the current [`Config`], forwarded over HTTP/1.1
//! (or h2c to a Service port whose `appProtocol` is `kubernetes.io/h2c`, as gRPC servers are)
//! to the next ready endpoint of its backend through a keep-alive connection pool, with
//! `X-Forwarded-*` headers set and hop-by-hop headers dropped, and an access-log line (tracing
//! target `access`) per request. A `Connection: Upgrade` request (WebSocket) is forwarded with
//! its upgrade headers; on `101 Switching Protocols` the two upgraded connections are joined
//! byte for byte. 404 when no rule matches, 503 when the route's Service or endpoints are
//! missing, 502 when the endpoint cannot be reached. A request without a body whose endpoint
//! refuses the connection is sent to another endpoint, up to [`TRIES`] in all (ingress-nginx's
//! `proxy-next-upstream error` with its 3 tries; a request with a body is not replayed).
//!
//! The `X-Forwarded-*` headers a client sends are replaced, not appended to (Traefik's default
//! for clients it does not trust, which here is every client).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Request, Response, StatusCode, Uri, Version};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Either, Empty, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::sync::watch;

use crate::config::Config;

/// The body of every response the proxy gives.
pub type Body = BoxBody<Bytes, hyper::Error>;

/// The body of a request sent upstream: the client's, or none when a request is tried again.
type UpstreamBody = Either<Incoming, Empty<Bytes>>;

/// The tracing target of the access log, a line per request.
pub const ACCESS_LOG: &str = "access";

/// How many endpoints one request may be sent to (ingress-nginx's `proxy-next-upstream-tries`).
pub const TRIES: usize = 3;

/// Headers that belong to one connection, never forwarded (RFC 9110 section 7.6.1).
const HOP_BY_HOP: [HeaderName; 7] = [
    header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
];

const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
const X_FORWARDED_HOST: HeaderName = HeaderName::from_static("x-forwarded-host");
const X_FORWARDED_PORT: HeaderName = HeaderName::from_static("x-forwarded-port");
const X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");
const X_REAL_IP: HeaderName = HeaderName::from_static("x-real-ip");

/// Where a request came in: the client, the port it reached, and whether over TLS.
#[derive(Debug, Clone, Copy)]
pub struct Peer {
    pub client: SocketAddr,
    pub port: u16,
    pub tls: bool,
}

/// The proxy shared by a worker's connections: the configuration and the upstream connection
/// pools, HTTP/1.1 and h2c.
#[derive(Clone)]
pub struct Proxy {
    config: watch::Receiver<Arc<Config>>,
    http1: Client<HttpConnector, UpstreamBody>,
    h2c: Client<HttpConnector, UpstreamBody>,
}

impl Proxy {
    pub fn new(config: watch::Receiver<Arc<Config>>) -> Proxy {
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        let http1 = Client::builder(TokioExecutor::new()).build(connector.clone());
        let h2c = Client::builder(TokioExecutor::new())
            .http2_only(true)
            .build(connector);
        Proxy { config, http1, h2c }
    }

    /// Serves one request from `from`.
    pub async fn serve(&self, req: Request<Incoming>, from: Peer) -> Response<Body> {
        let started = Instant::now();
        let method = req.method().clone();
        let version = req.version();
        let uri = req.uri().clone();
        let host = request_host(&req).unwrap_or_else(|| HeaderValue::from_static(""));
        let (response, upstream) = self.forward(req, &host, from).await;
        tracing::info!(
            target: ACCESS_LOG,
            client = %from.client,
            method = %method,
            host = host.to_str().unwrap_or_default(),
            path = uri.path(),
            version = ?version,
            status = response.status().as_u16(),
            upstream = %Upstream(upstream),
            duration_ms = started.elapsed().as_secs_f64() * 1e3,
        );
        response
    }

    /// The response, and the endpoint it came from.
    async fn forward(
        &self,
        mut req: Request<Incoming>,
        host: &HeaderValue,
        from: Peer,
    ) -> (Response<Body>, Option<SocketAddr>) {
        let config = self.config.borrow().clone();
        let Some(backend) = config
            .table
            .route(host.to_str().unwrap_or_default(), req.uri().path())
        else {
            return (error(StatusCode::NOT_FOUND, "404 page not found"), None);
        };
        let Some(endpoint) = backend.pick() else {
            let why = backend.unavailable.as_deref().unwrap_or("no endpoints");
            tracing::debug!(backend = %backend.name, why, "no endpoint");
            return (
                error(StatusCode::SERVICE_UNAVAILABLE, "503 Service Unavailable"),
                None,
            );
        };
        let upgrade = upgrade_protocol(&req);
        let client_upgrade = upgrade.is_some().then(|| hyper::upgrade::on(&mut req));
        // an upgrade is an HTTP/1.1 mechanism, whatever the endpoints speak otherwise
        let h2c = backend.h2c && upgrade.is_none();
        let client = if h2c { &self.h2c } else { &self.http1 };
        if let Err(e) = prepare(&mut req, host, endpoint, from, upgrade, h2c) {
            tracing::debug!(error = %e, "bad request");
            return (error(StatusCode::BAD_REQUEST, "400 Bad Request"), None);
        }
        // a copy to send elsewhere if this endpoint refuses; only when there is an elsewhere
        let retryable = backend.endpoints.len() > 1 && hyper::body::Body::is_end_stream(req.body());
        let (parts, body) = req.into_parts();
        let replay = retryable.then(|| parts.clone());
        let req = Request::from_parts(parts, body);
        let mut tried = vec![endpoint];
        let mut sent = client.request(req.map(Either::Left)).await;
        while let (Err(e), Some(parts)) = (&sent, &replay) {
            if !e.is_connect() || tried.len() == TRIES {
                break;
            }
            let Some(next) = backend.pick_untried(&tried) else {
                break;
            };
            tracing::debug!(backend = %backend.name, endpoint = %tried[tried.len() - 1], error = %e, %next, "connecting failed; trying another endpoint");
            let mut retry = Request::from_parts(parts.clone(), Either::Right(Empty::new()));
            *retry.uri_mut() = endpoint_uri(next, retry.uri());
            tried.push(next);
            sent = client.request(retry).await;
        }
        let endpoint = tried[tried.len() - 1];
        let upstream = Some(endpoint);
        let mut response = match sent {
            Ok(response) => response,
            Err(e) => {
                tracing::warn!(backend = %backend.name, %endpoint, error = %e, "upstream request failed");
                return (error(StatusCode::BAD_GATEWAY, "502 Bad Gateway"), upstream);
            }
        };
        if response.status() == StatusCode::SWITCHING_PROTOCOLS
            && let Some(client_upgrade) = client_upgrade
        {
            let upstream_upgrade = hyper::upgrade::on(&mut response);
            tokio::spawn(join_upgraded(client_upgrade, upstream_upgrade));
            let (parts, _) = response.into_parts();
            return (Response::from_parts(parts, empty()), upstream);
        }
        strip_hop_by_hop(response.headers_mut());
        (response.map(BodyExt::boxed), upstream)
    }
}

/// The request's host: the Host header (HTTP/1) or the URI's authority (HTTP/2).
fn request_host<B>(req: &Request<B>) -> Option<HeaderValue> {
    req.headers().get(header::HOST).cloned().or_else(|| {
        let authority = req.uri().authority()?;
        HeaderValue::from_str(authority.as_str()).ok()
    })
}

/// The endpoint a request went to in the access log, `-` for none (nginx's `$upstream_addr`).
struct Upstream(Option<SocketAddr>);

impl std::fmt::Display for Upstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            Some(endpoint) => endpoint.fmt(f),
            None => f.write_str("-"),
        }
    }
}

/// The protocol asked for by an HTTP/1.1 `Connection: upgrade` request.
fn upgrade_protocol<B>(req: &Request<B>) -> Option<HeaderValue> {
    let connection = req.headers().get(header::CONNECTION)?.to_str().ok()?;
    let asks = connection
        .split(',')
        .any(|t| t.trim().eq_ignore_ascii_case("upgrade"));
    asks.then(|| req.headers().get(header::UPGRADE).cloned())
        .flatten()
}

/// Rewrites `req` for `endpoint`: its URI, over HTTP/1.1 (or HTTP/2 to an `h2c` endpoint),
/// the Host kept, hop-by-hop headers dropped (the upgrade put back, and `TE: trailers` to an
/// h2c endpoint, which gRPC needs), `X-Forwarded-*` set.
fn prepare<B>(
    req: &mut Request<B>,
    host: &HeaderValue,
    endpoint: SocketAddr,
    from: Peer,
    upgrade: Option<HeaderValue>,
    h2c: bool,
) -> Result<(), http::Error> {
    *req.uri_mut() = endpoint_uri(endpoint, req.uri());
    *req.version_mut() = if h2c {
        Version::HTTP_2
    } else {
        Version::HTTP_11
    };
    let headers = req.headers_mut();
    let trailers = h2c && asks_for_trailers(headers);
    strip_hop_by_hop(headers);
    if trailers {
        headers.insert(header::TE, HeaderValue::from_static("trailers"));
    }
    if let Some(protocol) = upgrade {
        headers.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
        headers.insert(header::UPGRADE, protocol);
    }
    headers.insert(header::HOST, host.clone());
    let client_ip =
        HeaderValue::from_str(&from.client.ip().to_string()).map_err(http::Error::from)?;
    headers.insert(X_FORWARDED_FOR, client_ip.clone());
    headers.insert(X_REAL_IP, client_ip);
    headers.insert(X_FORWARDED_HOST, host.clone());
    headers.insert(X_FORWARDED_PORT, HeaderValue::from(from.port));
    let proto = if from.tls { "https" } else { "http" };
    headers.insert(X_FORWARDED_PROTO, HeaderValue::from_static(proto));
    Ok(())
}

/// `uri`'s path and query at `endpoint`.
fn endpoint_uri(endpoint: SocketAddr, uri: &Uri) -> Uri {
    let mut parts = http::uri::Parts::default();
    parts.scheme = Some(http::uri::Scheme::HTTP);
    parts.authority = http::uri::Authority::try_from(endpoint.to_string()).ok();
    parts.path_and_query = Some(
        uri.path_and_query()
            .cloned()
            .unwrap_or_else(|| http::uri::PathAndQuery::from_static("/")),
    );
    Uri::from_parts(parts).unwrap_or_else(|_| uri.clone())
}

/// Whether the client accepts trailers (`TE: trailers`).
fn asks_for_trailers(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::TE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|t| t.trim().eq_ignore_ascii_case("trailers"))
}

/// Drops the hop-by-hop headers and those the Connection header names.
fn strip_hop_by_hop(headers: &mut HeaderMap) {
    let named: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|t| HeaderName::try_from(t.trim()).ok())
        .collect();
    for name in HOP_BY_HOP.iter().chain(&named) {
        headers.remove(name);
    }
}

/// Copies bytes both ways between the client's and the upstream's upgraded connections.
async fn join_upgraded(client: hyper::upgrade::OnUpgrade, upstream: hyper::upgrade::OnUpgrade) {
    let (client, upstream) = match tokio::try_join!(client, upstream) {
        Ok(both) => both,
        Err(e) => {
            tracing::debug!(error = %e, "upgrade failed");
            return;
        }
    };
    let (mut client, mut upstream) = (TokioIo::new(client), TokioIo::new(upstream));
    if let Err(e) = tokio::io::copy_bidirectional(&mut client, &mut upstream).await {
        tracing::debug!(error = %e, "upgraded connection ended");
    }
}

fn empty() -> Body {
    Full::new(Bytes::new())
        .map_err(|never| match never {})
        .boxed()
}

/// A plain-text error page.
fn error(status: StatusCode, text: &'static str) -> Response<Body> {
    let mut response = Response::new(
        Full::new(Bytes::from_static(text.as_bytes()))
            .map_err(|never| match never {})
            .boxed(),
    );
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hop_by_hop_headers_and_those_connection_names_are_dropped() {
        let mut headers = HeaderMap::new();
        headers.insert(
            header::CONNECTION,
            HeaderValue::from_static("keep-alive, x-private"),
        );
        headers.insert("x-private", HeaderValue::from_static("1"));
        headers.insert("keep-alive", HeaderValue::from_static("timeout=5"));
        headers.insert(
            header::TRANSFER_ENCODING,
            HeaderValue::from_static("chunked"),
        );
        headers.insert("x-kept", HeaderValue::from_static("1"));
        strip_hop_by_hop(&mut headers);
        let left: Vec<&str> = headers.keys().map(HeaderName::as_str).collect();
        assert_eq!(left, ["x-kept"]);
    }

    #[test]
    fn upgrades_are_recognised_by_the_connection_token() {
        let req = |connection: &str| {
            Request::builder()
                .header(header::CONNECTION, connection)
                .header(header::UPGRADE, "websocket")
                .body(())
                .unwrap()
        };
        assert_eq!(
            upgrade_protocol(&req("keep-alive, Upgrade")).unwrap(),
            "websocket"
        );
        assert!(upgrade_protocol(&req("keep-alive")).is_none());
    }

    #[test]
    fn forwarded_requests_carry_the_host_and_x_forwarded_headers_and_no_hop_by_hop_ones() {
        let mut req = Request::builder()
            .version(Version::HTTP_2)
            .uri("https://a.com/x/y?z=1")
            .header("x-forwarded-for", "6.6.6.6")
            .header(header::TE, "trailers")
            .body(())
            .unwrap();
        let from = Peer {
            client: "192.0.2.7:40000".parse().unwrap(),
            port: 443,
            tls: true,
        };
        prepare(
            &mut req,
            &HeaderValue::from_static("a.com"),
            "10.42.0.5:8080".parse().unwrap(),
            from,
            None,
            false,
        )
        .unwrap();
        assert_eq!(req.uri().to_string(), "http://10.42.0.5:8080/x/y?z=1");
        assert_eq!(req.version(), Version::HTTP_11);
        let header = |name: &str| {
            req.headers()
                .get(name)
                .map(|v| v.to_str().unwrap().to_string())
        };
        assert_eq!(header("host").as_deref(), Some("a.com"));
        assert_eq!(header("x-forwarded-for").as_deref(), Some("192.0.2.7"));
        assert_eq!(header("x-real-ip").as_deref(), Some("192.0.2.7"));
        assert_eq!(header("x-forwarded-host").as_deref(), Some("a.com"));
        assert_eq!(header("x-forwarded-port").as_deref(), Some("443"));
        assert_eq!(header("x-forwarded-proto").as_deref(), Some("https"));
        assert_eq!(header("te"), None);
    }

    #[test]
    fn an_h2c_endpoint_gets_http2_and_keeps_te_trailers() {
        let request = || {
            Request::builder()
                .version(Version::HTTP_2)
                .uri("http://a.com/pkg.Service/Call")
                .header(header::TE, "trailers")
                .body(())
                .unwrap()
        };
        let from = Peer {
            client: "192.0.2.7:40000".parse().unwrap(),
            port: 80,
            tls: false,
        };
        let endpoint = "10.42.0.5:9000".parse().unwrap();
        let host = HeaderValue::from_static("a.com");
        let mut http1 = request();
        prepare(&mut http1, &host, endpoint, from, None, false).unwrap();
        assert_eq!(http1.version(), Version::HTTP_11);
        assert!(!http1.headers().contains_key(header::TE));
        let mut h2c = request();
        prepare(&mut h2c, &host, endpoint, from, None, true).unwrap();
        assert_eq!(h2c.version(), Version::HTTP_2);
        assert_eq!(h2c.headers()[header::TE], "trailers");
    }

    #[test]
    fn an_upgrade_keeps_its_connection_and_upgrade_headers() {
        let mut req = Request::builder()
            .uri("/ws")
            .header(header::CONNECTION, "keep-alive, Upgrade")
            .header(header::UPGRADE, "websocket")
            .body(())
            .unwrap();
        let upgrade = upgrade_protocol(&req);
        let from = Peer {
            client: "192.0.2.7:40000".parse().unwrap(),
            port: 80,
            tls: false,
        };
        prepare(
            &mut req,
            &HeaderValue::from_static("a.com"),
            "10.42.0.5:8080".parse().unwrap(),
            from,
            upgrade,
            false,
        )
        .unwrap();
        assert_eq!(req.headers()[header::CONNECTION], "upgrade");
        assert_eq!(req.headers()[header::UPGRADE], "websocket");
        assert_eq!(req.headers()["x-forwarded-proto"], "http");
    }

    #[test]
    fn the_host_comes_from_the_header_or_the_authority() {
        let h1 = Request::builder()
            .uri("/x")
            .header(header::HOST, "a.com:8080")
            .body(())
            .unwrap();
        assert_eq!(request_host(&h1).unwrap(), "a.com:8080");
        let h2 = Request::builder().uri("https://b.com/x").body(()).unwrap();
        assert_eq!(request_host(&h2).unwrap(), "b.com");
    }
}
