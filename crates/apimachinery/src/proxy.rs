//! The upgrade-aware proxy of upstream's `util/proxy/upgradeaware.go`, the one piece of this
//! crate that does I/O: the API server forwards `pods/{name}/log`, `exec`, `attach` and
//! `portforward` to the kubelet with it, and the kubelet forwards exec, attach and
//! port-forward to the runtime's streaming server. A request goes over one HTTP/1.1
//! connection the caller opened (TCP or TLS); when the backend answers `101 Switching
//! Protocols` the client's connection is upgraded too and bytes are copied both ways until
//! either side closes. Any other answer is handed back as it is, body streamed.

use std::convert::Infallible;

use bytes::Bytes;
use futures::StreamExt;
use http::{HeaderMap, Request, Response, StatusCode, header};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Empty, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::upgrade::OnUpgrade;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("http handshake with {backend}: {source}")]
    Handshake {
        backend: String,
        #[source]
        source: hyper::Error,
    },
    #[error("request to {backend}: {source}")]
    Send {
        backend: String,
        #[source]
        source: hyper::Error,
    },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Headers that describe one hop, not the request (RFC 9110 §7.6.1), and credentials meant
/// for the proxy itself; `Connection` and `Upgrade` are put back for upgrade requests.
const HOP_HEADERS: [header::HeaderName; 9] = [
    header::CONNECTION,
    header::UPGRADE,
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
    header::PROXY_AUTHORIZATION,
    header::PROXY_AUTHENTICATE,
    header::AUTHORIZATION,
    header::HOST,
];

/// Whether a request asks to switch protocols (SPDY or WebSocket).
pub fn is_upgrade(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|t| t.trim().eq_ignore_ascii_case("upgrade"))
        && headers.contains_key(header::UPGRADE)
}

/// The headers forwarded to the backend: the client's, without hop-by-hop ones and
/// credentials, with `Host` set to the backend and the upgrade kept when there is one.
pub fn forwarded_headers(client: &HeaderMap, host: &str) -> HeaderMap {
    let mut out = client.clone();
    for h in &HOP_HEADERS {
        out.remove(h);
    }
    out.remove("keep-alive");
    if let Ok(v) = host.parse() {
        out.insert(header::HOST, v);
    }
    if is_upgrade(client) {
        out.insert(
            header::CONNECTION,
            http::HeaderValue::from_static("Upgrade"),
        );
        for v in client.get_all(header::UPGRADE) {
            out.append(header::UPGRADE, v.clone());
        }
    }
    out
}

/// What [`forward`] sends: the request line, its headers and body, and the client's pending
/// upgrade, if any.
pub struct Forward<B> {
    pub method: http::Method,
    pub path_and_query: String,
    pub headers: HeaderMap,
    /// Streamed to the backend as the client sends it.
    pub body: B,
    pub client: Option<OnUpgrade>,
}

/// A bodiless request (kubelet streams), the client's upgrade kept.
pub fn bodiless(
    method: http::Method,
    path_and_query: &str,
    headers: HeaderMap,
    client: Option<OnUpgrade>,
) -> Forward<Empty<Bytes>> {
    Forward {
        method,
        path_and_query: path_and_query.to_string(),
        headers,
        body: Empty::new(),
        client,
    }
}

/// Sends `request` over `io` (a connection to `backend`, named in errors). When the backend
/// switches protocols and the request carries the client's pending upgrade, the two upgraded
/// connections are joined in a background task. The response's body is the backend's,
/// streamed.
pub async fn forward<IO, B>(
    io: IO,
    backend: &str,
    request: Forward<B>,
) -> Result<Response<Incoming>>
where
    IO: AsyncRead + AsyncWrite + Send + Unpin + 'static,
    B: hyper::body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let Forward {
        method,
        path_and_query,
        headers,
        body,
        client,
    } = request;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io))
        .await
        .map_err(|source| Error::Handshake {
            backend: backend.into(),
            source,
        })?;
    tokio::spawn(async move {
        if let Err(e) = conn.with_upgrades().await {
            tracing::debug!(error = %e, "proxied connection ended");
        }
    });
    let mut req = Request::new(body);
    *req.method_mut() = method;
    *req.uri_mut() = path_and_query
        .parse()
        .unwrap_or_else(|_| "/".parse().unwrap());
    *req.headers_mut() = headers;
    let mut resp = sender
        .send_request(req)
        .await
        .map_err(|source| Error::Send {
            backend: backend.into(),
            source,
        })?;
    if resp.status() == StatusCode::SWITCHING_PROTOCOLS
        && let Some(client) = client
    {
        let backend_upgrade = hyper::upgrade::on(&mut resp);
        tokio::spawn(join(client, backend_upgrade));
    }
    Ok(resp)
}

/// Copies bytes between the two upgraded connections until both directions are done.
async fn join(client: OnUpgrade, backend: OnUpgrade) {
    let (client, backend) = match tokio::try_join!(client, backend) {
        Ok(pair) => pair,
        Err(e) => {
            tracing::debug!(error = %e, "an upgrade did not complete");
            return;
        }
    };
    let (mut client, mut backend) = (TokioIo::new(client), TokioIo::new(backend));
    if let Err(e) = tokio::io::copy_bidirectional(&mut client, &mut backend).await {
        tracing::debug!(error = %e, "an upgraded stream ended");
    }
}

/// A response whose body is `resp`'s, for servers whose bodies cannot fail: an error reading
/// the backend ends the body early (the client sees a truncated stream, as through upstream's
/// proxy).
pub fn stream_body(body: Incoming) -> BoxBody<Bytes, Infallible> {
    let frames = body
        .into_data_stream()
        .take_while(|r| std::future::ready(r.is_ok()))
        .filter_map(|r| std::future::ready(r.ok().map(|b| Ok(Frame::data(b)))));
    BodyExt::boxed(StreamBody::new(frames))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                header::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        h
    }

    #[test]
    fn upgrade_requests_keep_their_upgrade_and_lose_credentials_and_hop_headers() {
        let client = headers(&[
            ("connection", "keep-alive, Upgrade"),
            ("upgrade", "SPDY/3.1"),
            ("x-stream-protocol-version", "v4.channel.k8s.io"),
            ("x-stream-protocol-version", "v3.channel.k8s.io"),
            ("authorization", "Bearer secret"),
            ("host", "apiserver:6443"),
        ]);
        assert!(is_upgrade(&client));
        let out = forwarded_headers(&client, "127.0.0.1:10250");
        assert_eq!(out["connection"], "Upgrade");
        assert_eq!(out["upgrade"], "SPDY/3.1");
        assert_eq!(out["host"], "127.0.0.1:10250");
        assert_eq!(out.get_all("x-stream-protocol-version").iter().count(), 2);
        assert!(out.get("authorization").is_none());
    }

    #[test]
    fn plain_requests_are_not_upgrades_and_carry_no_connection_header() {
        let client = headers(&[("connection", "close"), ("accept", "*/*")]);
        assert!(!is_upgrade(&client));
        let out = forwarded_headers(&client, "n1:10250");
        assert!(out.get("connection").is_none());
        assert_eq!(out["accept"], "*/*");
    }
}
