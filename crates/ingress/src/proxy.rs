//! The reverse proxy: one request routed by the current [`Config`], forwarded over HTTP/1.1
//! (or h2c to a Service port whose `appProtocol` is `kubernetes.io/h2c`, as gRPC servers are)
//! to the next ready endpoint of its backend through the worker's [`crate::upstream`]
//! connections, with `X-Forwarded-*` headers set and hop-by-hop headers dropped, and an
//! [`access`] log line per request. A `Connection: Upgrade` request (WebSocket) is forwarded
//! with its upgrade headers; on `101 Switching Protocols` the two upgraded connections are
//! joined byte for byte. 404 when no rule matches, 503 when the route's Service or endpoints are
//! missing, 502 when the endpoint cannot be reached. A request whose endpoint refuses the
//! connection, before anything was sent, goes to another endpoint, up to [`TRIES`] in all
//! (ingress-nginx's `proxy-next-upstream error` with its 3 tries).
//!
//! The `X-Forwarded-*` headers a client sends are replaced, not appended to (Traefik's default
//! for clients it does not trust, which here is every client).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Request, Response, StatusCode, Uri, Version};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Either, Full};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::sync::watch;

use crate::access;
use crate::config::Config;
use crate::route::Backend;
use crate::upstream::{Failed, Outgoing, Pool, Protocol};

/// The body of every response the proxy gives.
pub type Body = UnsyncBoxBody<Bytes, hyper::Error>;

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

/// Where a connection came in: the client, and whether over TLS; with the forwarding
/// headers' values, made once for all its requests.
#[derive(Debug)]
pub struct Peer {
    pub client: SocketAddr,
    pub tls: bool,
    /// The client's address, for `X-Forwarded-For`, `X-Real-IP` and the access log.
    pub(crate) client_ip: HeaderValue,
    /// The port the client reached, for `X-Forwarded-Port`.
    pub(crate) port: HeaderValue,
}

impl Peer {
    pub fn new(client: SocketAddr, port: u16, tls: bool) -> Peer {
        let ip = client.ip().to_string();
        Peer {
            client,
            tls,
            client_ip: HeaderValue::from_str(&ip).expect("an IP address is a header value"),
            port: HeaderValue::from(port),
        }
    }
}

/// The proxy shared by one worker's connections: the configuration and the worker's
/// connections to the endpoints.
pub struct Proxy {
    pub(crate) config: watch::Receiver<Arc<Config>>,
    pub(crate) upstreams: Arc<Pool>,
}

impl Proxy {
    /// A proxy by the newest `config`; closes idle upstream connections from a task on the
    /// current runtime (the worker's).
    pub fn new(config: watch::Receiver<Arc<Config>>) -> Proxy {
        let upstreams = Arc::new(Pool::default());
        tokio::spawn(Pool::sweep(Arc::downgrade(&upstreams)));
        Proxy { config, upstreams }
    }

    /// Serves one request from `from` (hyper's service: never an error).
    pub fn serve(
        self: Arc<Self>,
        req: Request<Incoming>,
        from: Arc<Peer>,
    ) -> impl Future<Output = Result<Response<Body>, Infallible>> + Send + 'static {
        let started = Instant::now();
        let host = request_host(&req).unwrap_or_else(|| HeaderValue::from_static(""));
        // what the access log needs of the request, which is forwarded
        let logged = access::enabled().then(|| {
            let headers = req.headers();
            let header = |name| headers.get(name).cloned();
            let (referer, user_agent) = (header(header::REFERER), header(header::USER_AGENT));
            (
                req.method().clone(),
                req.uri().clone(),
                req.version(),
                referer,
                user_agent,
            )
        });
        // boxed before the future is made, which then holds a pointer to it
        let req = Box::new(req.map(Either::Left));
        async move {
            let (response, backend, upstream) = self.forward(req, &host, &from).await;
            if let Some((method, uri, version, referer, user_agent)) = &logged {
                let target = match uri.path_and_query() {
                    Some(path) => std::borrow::Cow::Borrowed(path.as_str()),
                    None => std::borrow::Cow::Owned(uri.to_string()),
                };
                access::Entry {
                    client: from.client_ip.as_bytes(),
                    method: method.as_str().as_bytes(),
                    target: target.as_bytes(),
                    version: *version,
                    status: response.status().as_u16(),
                    referer: referer.as_ref().map(HeaderValue::as_bytes),
                    user_agent: user_agent.as_ref().map(HeaderValue::as_bytes),
                    host: host.as_bytes(),
                    duration: started.elapsed(),
                    backend: backend.as_deref().map(|b| b.name.as_str()),
                    upstream,
                }
                .log();
            }
            Ok(response)
        }
    }

    /// The response, the backend routed to, and the endpoint the response came from.
    async fn forward(
        &self,
        mut req: Outgoing,
        host: &HeaderValue,
        from: &Peer,
    ) -> (Response<Body>, Option<Arc<Backend>>, Option<SocketAddr>) {
        let config = self.config.borrow().clone();
        let Some(backend) = config
            .table
            .route(host.to_str().unwrap_or_default(), req.uri().path())
        else {
            return (error(StatusCode::NOT_FOUND), None, None);
        };
        let backend = backend.clone();
        let Some(mut endpoint) = backend.pick() else {
            let why = backend.unavailable.as_deref().unwrap_or("no endpoints");
            tracing::debug!(backend = %backend.name, why, "no endpoint");
            return (error(StatusCode::SERVICE_UNAVAILABLE), Some(backend), None);
        };
        let upgrade = upgrade_protocol(&req);
        let client_upgrade = upgrade.is_some().then(|| hyper::upgrade::on(&mut *req));
        // an upgrade is an HTTP/1.1 mechanism, whatever the endpoints speak otherwise
        let protocol = match (&upgrade, backend.h2c) {
            (Some(_), _) => Protocol::Upgrade,
            (None, true) => Protocol::H2c,
            (None, false) => Protocol::Http1,
        };
        prepare(&mut req, host, from, upgrade, protocol == Protocol::H2c);
        let mut tried = [endpoint; TRIES];
        let mut n = 1;
        let sent = loop {
            match self.upstreams.send(endpoint, req, protocol).await {
                // nothing was sent: another endpoint may take it
                Err(Failed::Connect(e, back)) if n < TRIES => {
                    let Some(next) = backend.pick_untried(&tried[..n]) else {
                        break Err(Failed::Connect(e, back));
                    };
                    tracing::debug!(backend = %backend.name, %endpoint, error = %e, %next, "connecting failed; trying another endpoint");
                    (endpoint, req) = (next, back);
                    tried[n] = next;
                    n += 1;
                }
                sent => break sent,
            }
        };
        let upstream = Some(endpoint);
        let mut response = match sent {
            Ok(response) => response,
            Err(e) => {
                tracing::warn!(backend = %backend.name, %endpoint, error = %e, "upstream request failed");
                return (error(StatusCode::BAD_GATEWAY), Some(backend), upstream);
            }
        };
        if response.status() == StatusCode::SWITCHING_PROTOCOLS
            && let Some(client_upgrade) = client_upgrade
        {
            let upstream_upgrade = hyper::upgrade::on(&mut response);
            tokio::spawn(join_upgraded(client_upgrade, upstream_upgrade));
            let (parts, _) = response.into_parts();
            return (
                Response::from_parts(parts, empty()),
                Some(backend),
                upstream,
            );
        }
        strip_hop_by_hop(response.headers_mut());
        (response.map(BodyExt::boxed_unsync), Some(backend), upstream)
    }
}

/// The request's host: the Host header (HTTP/1) or the URI's authority (HTTP/2).
fn request_host<B>(req: &Request<B>) -> Option<HeaderValue> {
    req.headers().get(header::HOST).cloned().or_else(|| {
        let authority = req.uri().authority()?;
        HeaderValue::from_str(authority.as_str()).ok()
    })
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

/// Rewrites `req` for an endpoint: its URI in origin form, over HTTP/1.1 (or HTTP/2 to an
/// `h2c` endpoint), the Host kept, hop-by-hop headers dropped (the upgrade put back, and `TE:
/// trailers` to an h2c endpoint, which gRPC needs), `X-Forwarded-*` set.
fn prepare<B>(
    req: &mut Request<B>,
    host: &HeaderValue,
    from: &Peer,
    upgrade: Option<HeaderValue>,
    h2c: bool,
) {
    if req.uri().scheme().is_some() || req.uri().authority().is_some() {
        *req.uri_mut() = origin_form(req.uri());
    }
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
    headers.insert(X_FORWARDED_FOR, from.client_ip.clone());
    headers.insert(X_REAL_IP, from.client_ip.clone());
    headers.insert(X_FORWARDED_HOST, host.clone());
    headers.insert(X_FORWARDED_PORT, from.port.clone());
    let proto = if from.tls { "https" } else { "http" };
    headers.insert(X_FORWARDED_PROTO, HeaderValue::from_static(proto));
}

/// `uri`'s path and query alone (`/` when it has none), as HTTP/1.1 sends it to an origin
/// server.
fn origin_form(uri: &Uri) -> Uri {
    Uri::from(
        uri.path_and_query()
            .cloned()
            .unwrap_or_else(|| http::uri::PathAndQuery::from_static("/")),
    )
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
    // one pass over the names, then a removal for each found: a message carries few of them
    // or none, and a lookup hashes the name
    let mut found: Vec<HeaderName> = headers
        .keys()
        .filter(|name| HOP_BY_HOP.contains(name))
        .cloned()
        .collect();
    if found.contains(&header::CONNECTION) {
        let named = headers
            .get_all(header::CONNECTION)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .filter_map(|t| HeaderName::try_from(t.trim()).ok());
        found.extend(named);
    }
    for name in &found {
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
        .boxed_unsync()
}

/// The text of the proxy's error page for `status` (404, 502, 503).
pub(crate) fn error_page(status: StatusCode) -> &'static str {
    match status {
        StatusCode::NOT_FOUND => "404 page not found",
        StatusCode::SERVICE_UNAVAILABLE => "503 Service Unavailable",
        _ => "502 Bad Gateway",
    }
}

/// A plain-text error page.
fn error(status: StatusCode) -> Response<Body> {
    let mut response = Response::new(
        Full::new(Bytes::from_static(error_page(status).as_bytes()))
            .map_err(|never| match never {})
            .boxed_unsync(),
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
        let from = Peer::new("192.0.2.7:40000".parse().unwrap(), 443, true);
        prepare(
            &mut req,
            &HeaderValue::from_static("a.com"),
            &from,
            None,
            false,
        );
        assert_eq!(req.uri().to_string(), "/x/y?z=1");
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
        let from = Peer::new("192.0.2.7:40000".parse().unwrap(), 80, false);
        let host = HeaderValue::from_static("a.com");
        let mut http1 = request();
        prepare(&mut http1, &host, &from, None, false);
        assert_eq!(http1.version(), Version::HTTP_11);
        assert!(!http1.headers().contains_key(header::TE));
        let mut h2c = request();
        prepare(&mut h2c, &host, &from, None, true);
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
        let from = Peer::new("192.0.2.7:40000".parse().unwrap(), 80, false);
        prepare(
            &mut req,
            &HeaderValue::from_static("a.com"),
            &from,
            upgrade,
            false,
        );
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
