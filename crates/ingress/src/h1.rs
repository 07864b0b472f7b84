//! The plain HTTP port's fast path for HTTP/1.1, nginx's way: a request head is parsed in the
//! connection's buffer (httparse, hyper's own parser), written upstream as bytes with the
//! hop-by-hop headers left out and the forwarding headers added, and the response is relayed
//! as bytes after its head has been rewritten the same way, over a pooled keep-alive
//! connection per worker. No `http::Request`, header map, body channel or task wake-up is made
//! per request.
//!
//! Hand-written beside hyper for one reason, the bench's target (`skiff bench ingress`, at
//! least nginx's requests/s): through hyper's server and client, a proxied request cost about
//! 50% more user-space CPU than through nginx (building and hashing two header maps, hyper's
//! dispatch channels, the futures that carry them), which on two shared cores was 10% fewer
//! requests/s. It is kept to the common shape, and hands everything else to hyper
//! ([`crate::listen`]'s connection, with the bytes read so far put back in front):
//! - requests that are not plain HTTP/1.1 (HTTP/1.0, an HTTP/2 preface, a head hyper would
//!   refuse), upgrades, `Transfer-Encoding`, `Expect`, a body over [`MAX_BODY`] (hyper streams
//!   those), a target not in origin form, and routes to h2c Services;
//! - from that request on, the rest of the connection.
//!
//! Framing follows RFC 9112 section 6: a request body is its `Content-Length` (one value); a
//! response's body is none (`HEAD`, 1xx, 204, 304), its `Content-Length`, chunked (relayed as
//! it is, its chunks followed to find its end), or until the upstream closes (the client's
//! connection is then closed after it, as it has no other end). An ambiguous response
//! (several lengths, a length with a transfer coding) is answered 502. The errors are those
//! of [`crate::proxy`]: 404 without a route, 503 without endpoints, 502 when no endpoint can
//! be reached or the exchange fails before the response's head; a failure after it closes the
//! client's connection.
//!
//! A pooled connection that the endpoint closed while idle is found at checkout when the
//! reactor has seen it close; otherwise the exchange fails before any byte of a response, and
//! an idempotent request is sent again on a new connection.

use std::io;
use std::net::SocketAddr;
use std::ops::Range;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Instant, SystemTime};

use bytes::{Buf, Bytes, BytesMut};
use http::{StatusCode, Version};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;

use crate::access;
use crate::proxy::{self, Peer, Proxy, TRIES};
use crate::route::Backend;

/// The longest request or response head this path reads; a longer request goes to hyper
/// (which answers 431), a longer response is a 502.
pub const MAX_HEAD: usize = 16 * 1024;
/// The largest request body this path forwards, read whole before the request is sent.
pub const MAX_BODY: usize = 64 * 1024;
/// The most header fields in a head this path reads.
const MAX_HEADERS: usize = 64;
/// How much is read from a socket at a time.
const READ: usize = 8 * 1024;

/// Serves `client` until it closes, handing it to hyper at its first request of another
/// shape (see the module's documentation).
pub(crate) async fn serve(stream: TcpStream, peer: Arc<Peer>, proxy: Arc<Proxy>) {
    let mut conn = Client {
        stream,
        buf: BytesMut::with_capacity(READ),
        upstream_buf: BytesMut::new(),
        out: Vec::with_capacity(1024),
    };
    loop {
        match conn.next(&peer, &proxy).await {
            Next::Again => {}
            Next::Close => return,
            Next::Hyper => break,
        }
    }
    let Client { stream, buf, .. } = conn;
    let stream = Rewind {
        read: buf.freeze(),
        stream,
    };
    crate::listen::connection(stream, peer, proxy).await;
}

/// What a connection does after a request.
enum Next {
    /// Reads the next request.
    Again,
    Close,
    /// Hands the connection, from the request in its buffer on, to hyper.
    Hyper,
}

/// A client's connection on this path.
struct Client {
    stream: TcpStream,
    /// What has been read from the client and not yet forwarded.
    buf: BytesMut,
    /// What has been read from the upstream and not yet relayed.
    upstream_buf: BytesMut,
    /// The head being written (upstream, then to the client).
    out: Vec<u8>,
}

impl Client {
    /// Forwards the next request and relays its response.
    async fn next(&mut self, peer: &Peer, proxy: &Proxy) -> Next {
        let head = loop {
            if !self.buf.is_empty() {
                match parse_request(&self.buf, peer, &mut self.out) {
                    Parsed::Simple(head) if head.body <= MAX_BODY => break head,
                    Parsed::Partial if self.buf.len() < MAX_HEAD => {}
                    _ => return Next::Hyper,
                }
            }
            if !read(&mut self.stream, &mut self.buf).await {
                return Next::Close;
            }
        };
        let started = Instant::now();
        let whole = head.len + head.body;
        while self.buf.len() < whole {
            if !read(&mut self.stream, &mut self.buf).await {
                return Next::Close;
            }
        }
        self.out.extend_from_slice(&self.buf[head.len..whole]);

        let config = proxy.config.borrow().clone();
        let target = &self.buf[head.target.clone()];
        let path = target.split(|b| *b == b'?').next().unwrap_or_default();
        let (host, path) = (str_of(&self.buf[head.host.clone()]), str_of(path));
        let backend = config.table.route(host, path).cloned();
        if backend.as_ref().is_some_and(|b| b.h2c) {
            return Next::Hyper;
        }
        let (outcome, upstream) = match &backend {
            None => (Outcome::Error(StatusCode::NOT_FOUND), None),
            Some(backend) => self.exchange(proxy, backend, &head).await,
        };
        let (status, close) = match outcome {
            Outcome::Relayed { status, close } => (status, close || head.close),
            Outcome::Error(status) => {
                error_response(&mut self.out, status, head.head_only, head.close);
                let sent = self.stream.write_all(&self.out).await.is_ok();
                (status.as_u16(), !sent || head.close)
            }
            Outcome::Broken { status } => (status, true),
        };
        if access::enabled() {
            let range = |r: &Option<Range<usize>>| r.clone().map(|r| &self.buf[r]);
            access::Entry {
                client: peer.client_ip.as_bytes(),
                method: &self.buf[head.method.clone()],
                target: &self.buf[head.target.clone()],
                version: Version::HTTP_11,
                status,
                referer: range(&head.referer),
                user_agent: range(&head.user_agent),
                host: &self.buf[head.host.clone()],
                duration: started.elapsed(),
                backend: backend.as_deref().map(|b| b.name.as_str()),
                upstream,
            }
            .log();
        }
        self.buf.advance(whole);
        if close { Next::Close } else { Next::Again }
    }

    /// Sends the request in `out` to an endpoint of `backend` and relays the response; the
    /// outcome and the endpoint tried last.
    async fn exchange(
        &mut self,
        proxy: &Proxy,
        backend: &Backend,
        head: &RequestHead,
    ) -> (Outcome, Option<SocketAddr>) {
        let Some(mut endpoint) = backend.pick() else {
            let why = backend.unavailable.as_deref().unwrap_or("no endpoints");
            tracing::debug!(backend = %backend.name, why, "no endpoint");
            return (Outcome::Error(StatusCode::SERVICE_UNAVAILABLE), None);
        };
        let mut tried = [endpoint; TRIES];
        let mut n = 1;
        let mut retried = false;
        loop {
            let (mut upstream, reused) = match proxy.upstreams.checkout_raw(endpoint) {
                Some(stream) => (stream, true),
                None => match crate::upstream::connect_tcp(endpoint).await {
                    Ok(stream) => (stream, false),
                    Err(e) => {
                        // nothing was sent: another endpoint may take it
                        match backend.pick_untried(&tried[..n]).filter(|_| n < TRIES) {
                            Some(next) => {
                                tracing::debug!(backend = %backend.name, %endpoint, error = %e, %next, "connecting failed; trying another endpoint");
                                (endpoint, tried[n], n) = (next, next, n + 1);
                                continue;
                            }
                            None => {
                                tracing::warn!(backend = %backend.name, %endpoint, error = %e, "upstream request failed");
                                return (Outcome::Error(StatusCode::BAD_GATEWAY), Some(endpoint));
                            }
                        }
                    }
                },
            };
            let relayed = self.relay(&mut upstream, head).await;
            let outcome = match relayed {
                Ok((outcome, keep)) => {
                    if keep {
                        proxy.upstreams.checkin_raw(endpoint, upstream);
                    }
                    outcome
                }
                // the idle connection had closed: nothing of a response came
                Err(Failure::Unanswered(_)) if reused && head.idempotent && !retried => {
                    retried = true;
                    proxy.upstreams.forget_idle_raw(endpoint);
                    continue;
                }
                Err(Failure::Unanswered(e)) => {
                    tracing::warn!(backend = %backend.name, %endpoint, error = %e, "upstream request failed");
                    Outcome::Error(StatusCode::BAD_GATEWAY)
                }
                Err(Failure::Upstream(e)) => {
                    tracing::warn!(backend = %backend.name, %endpoint, error = %e, "upstream response broken");
                    Outcome::Error(StatusCode::BAD_GATEWAY)
                }
                Err(Failure::Client { status }) => Outcome::Broken { status },
            };
            return (outcome, Some(endpoint));
        }
    }

    /// Writes the request in `out` to `upstream` and relays the response to the client;
    /// whether `upstream` may be reused.
    async fn relay(
        &mut self,
        upstream: &mut TcpStream,
        head: &RequestHead,
    ) -> Result<(Outcome, bool), Failure> {
        upstream
            .write_all(&self.out)
            .await
            .map_err(Failure::Unanswered)?;
        let ubuf = &mut self.upstream_buf;
        ubuf.clear();
        let mut answered = false;
        let response = loop {
            if !read(upstream, ubuf).await {
                let e = io::Error::new(io::ErrorKind::UnexpectedEof, "closed before a response");
                return Err(if answered {
                    Failure::Upstream(e)
                } else {
                    Failure::Unanswered(e)
                });
            }
            answered = true;
            match parse_response(ubuf, head, &mut self.out) {
                Ok(Some(response)) if (100..200).contains(&response.status) => {
                    // an interim response (103 Early Hints) goes on as it came
                    ubuf.advance(response.len);
                    self.stream
                        .write_all(&self.out)
                        .await
                        .map_err(|_| Failure::Client {
                            status: response.status,
                        })?;
                }
                Ok(Some(response)) => break response,
                Ok(None) if ubuf.len() < MAX_HEAD => {}
                Ok(None) => return Err(Failure::Upstream(bad("response head too long"))),
                Err(e) => return Err(Failure::Upstream(e)),
            }
        };
        ubuf.advance(response.len);
        let status = response.status;
        let broken = |_: io::Error| Failure::Client { status };
        let mut body = match response.body {
            Framing::None => Remaining::Bytes(0),
            Framing::Length(length) => Remaining::Bytes(length),
            Framing::Chunked => Remaining::Chunks(Chunks::default()),
            Framing::UntilClose => {
                self.out.extend_from_slice(ubuf);
                ubuf.clear();
                self.stream.write_all(&self.out).await.map_err(broken)?;
                while read(upstream, ubuf).await {
                    self.stream.write_all(ubuf).await.map_err(broken)?;
                    ubuf.clear();
                }
                let outcome = Outcome::Relayed {
                    status,
                    close: true,
                };
                return Ok((outcome, false));
            }
        };
        // the head goes with what of the body came with it, then the rest as it comes
        let now = body.take(ubuf).map_err(broken)?;
        self.out.extend_from_slice(&ubuf[..now]);
        ubuf.advance(now);
        self.stream.write_all(&self.out).await.map_err(broken)?;
        while !body.ended() {
            if !read(upstream, ubuf).await {
                return Err(Failure::Client { status });
            }
            let now = body.take(ubuf).map_err(broken)?;
            self.stream.write_all(&ubuf[..now]).await.map_err(broken)?;
            ubuf.advance(now);
        }
        // the endpoint sent more than its response: the connection is out of step
        let keep = response.keep_alive && ubuf.is_empty();
        Ok((
            Outcome::Relayed {
                status,
                close: false,
            },
            keep,
        ))
    }
}

/// How a request ended.
enum Outcome {
    /// The response was relayed whole; `close`: the client's connection closes after it.
    Relayed { status: u16, close: bool },
    /// The proxy answers itself with its error page for this status.
    Error(StatusCode),
    /// The response's head was relayed, and then the exchange failed: the client's
    /// connection is closed.
    Broken { status: u16 },
}

/// Why an exchange failed.
enum Failure {
    /// Before any byte of a response.
    Unanswered(io::Error),
    /// The endpoint's response is broken, before anything was relayed.
    Upstream(io::Error),
    /// After the response's head went to the client (which may be what failed).
    Client { status: u16 },
}

fn bad(what: &'static str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what)
}

/// Reads more into `buf`; false at the end of the stream or on an error.
async fn read(stream: &mut TcpStream, buf: &mut BytesMut) -> bool {
    buf.reserve(READ);
    matches!(stream.read_buf(buf).await, Ok(n) if n > 0)
}

/// A string of bytes that [`parse_request`] checked are ASCII.
fn str_of(bytes: &[u8]) -> &str {
    std::str::from_utf8(bytes).unwrap_or_default()
}

/// A request head at the start of the client's buffer, as positions in it.
#[derive(Debug)]
struct RequestHead {
    /// The head's length.
    len: usize,
    method: Range<usize>,
    target: Range<usize>,
    host: Range<usize>,
    referer: Option<Range<usize>>,
    user_agent: Option<Range<usize>>,
    /// The body's length.
    body: usize,
    /// The client asked to close the connection after this request.
    close: bool,
    /// A request that may be sent twice (RFC 9110 section 9.2.2).
    idempotent: bool,
    /// A HEAD request, whose response has no body.
    head_only: bool,
}

#[derive(Debug)]
enum Parsed {
    Partial,
    Simple(RequestHead),
    /// A request for hyper.
    Other,
}

/// Parses the request head at the start of `buf` and writes into `out` the head to send
/// upstream: its request line, its headers but the hop-by-hop ones, those the Connection
/// header names and the forwarding ones, then `Host` and the forwarding headers as
/// [`crate::proxy`] sets them.
fn parse_request(buf: &[u8], peer: &Peer, out: &mut Vec<u8>) -> Parsed {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut headers);
    let len = match req.parse(buf) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) => return Parsed::Partial,
        Err(_) => return Parsed::Other,
    };
    let (Some(method), Some(target), Some(1)) = (req.method, req.path, req.version) else {
        return Parsed::Other;
    };
    if !target.starts_with('/') || method == "CONNECT" {
        return Parsed::Other;
    }
    let at = |s: &[u8]| {
        let start = s.as_ptr() as usize - buf.as_ptr() as usize;
        start..start + s.len()
    };
    let (mut host, mut referer, mut user_agent, mut length) = (None, None, None, None);
    let mut connection = ConnectionTokens::default();
    for h in req.headers.iter() {
        let name = h.name.as_bytes();
        let value = h.value;
        if name.eq_ignore_ascii_case(b"host") {
            if host.is_some() || !value.is_ascii() {
                return Parsed::Other;
            }
            host = Some(at(value));
        } else if name.eq_ignore_ascii_case(b"content-length") {
            let Some(n) = content_length(value) else {
                return Parsed::Other;
            };
            if length.replace(n).is_some() {
                return Parsed::Other;
            }
        } else if name.eq_ignore_ascii_case(b"transfer-encoding")
            || name.eq_ignore_ascii_case(b"upgrade")
            || name.eq_ignore_ascii_case(b"expect")
        {
            return Parsed::Other;
        } else if name.eq_ignore_ascii_case(b"connection") {
            connection.add(value);
        } else if name.eq_ignore_ascii_case(b"referer") {
            referer = Some(at(value));
        } else if name.eq_ignore_ascii_case(b"user-agent") {
            user_agent = Some(at(value));
        }
    }
    let Some(host) = host else {
        return Parsed::Other;
    };
    if connection.upgrade || connection.overflow {
        return Parsed::Other;
    }

    out.clear();
    for part in [method.as_bytes(), b" ", target.as_bytes(), b" HTTP/1.1\r\n"] {
        out.extend_from_slice(part);
    }
    copy_headers(out, req.headers, &REQUEST_DROPPED, &connection);
    let host_value = &buf[host.clone()];
    let proto: &[u8] = if peer.tls { b"https" } else { b"http" };
    header(out, b"host", host_value);
    header(out, b"x-forwarded-for", peer.client_ip.as_bytes());
    header(out, b"x-real-ip", peer.client_ip.as_bytes());
    header(out, b"x-forwarded-host", host_value);
    header(out, b"x-forwarded-port", peer.port.as_bytes());
    header(out, b"x-forwarded-proto", proto);
    out.extend_from_slice(b"\r\n");
    Parsed::Simple(RequestHead {
        len,
        method: at(method.as_bytes()),
        target: at(target.as_bytes()),
        host,
        referer,
        user_agent,
        body: length.unwrap_or(0),
        close: connection.close,
        idempotent: IDEMPOTENT.contains(&method),
        head_only: method == "HEAD",
    })
}

/// Request headers not forwarded: hop-by-hop ones (RFC 9110 section 7.6.1) and those the
/// proxy sets itself (the `X-Forwarded-*` a client sends are replaced, as in
/// [`crate::proxy`]).
const REQUEST_DROPPED: [&[u8]; 11] = [
    b"connection",
    b"keep-alive",
    b"proxy-connection",
    b"te",
    b"trailer",
    b"host",
    b"x-forwarded-for",
    b"x-real-ip",
    b"x-forwarded-host",
    b"x-forwarded-port",
    b"x-forwarded-proto",
];

const IDEMPOTENT: [&str; 6] = ["GET", "HEAD", "OPTIONS", "TRACE", "PUT", "DELETE"];

fn header(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    for part in [name, b": ", value, b"\r\n"] {
        out.extend_from_slice(part);
    }
}

/// Writes `headers` into `out` but those in `dropped` and those `connection` names.
fn copy_headers(
    out: &mut Vec<u8>,
    headers: &[httparse::Header],
    dropped: &[&[u8]],
    connection: &ConnectionTokens,
) {
    for h in headers {
        let name = h.name.as_bytes();
        if !dropped.iter().any(|d| name.eq_ignore_ascii_case(d)) && !connection.names(name) {
            header(out, name, h.value);
        }
    }
}

/// A `Content-Length` value: digits only (RFC 9110 section 8.6).
fn content_length(value: &[u8]) -> Option<usize> {
    if value.is_empty() || !value.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(value).ok()?.parse().ok()
}

/// What the Connection headers of a message say: `close`, `upgrade`, and the headers they
/// name, which are not forwarded (RFC 9110 section 7.6.1); at most eight are kept.
#[derive(Default)]
struct ConnectionTokens<'a> {
    named: [&'a [u8]; 8],
    len: usize,
    close: bool,
    upgrade: bool,
    /// More headers were named than are kept.
    overflow: bool,
}

impl<'a> ConnectionTokens<'a> {
    fn add(&mut self, value: &'a [u8]) {
        let tokens = value.split(|b| *b == b',').map(<[u8]>::trim_ascii);
        for token in tokens.filter(|t| !t.is_empty()) {
            if token.eq_ignore_ascii_case(b"close") {
                self.close = true;
            } else if token.eq_ignore_ascii_case(b"upgrade") {
                self.upgrade = true;
            } else if self.len == self.named.len() {
                self.overflow = true;
            } else {
                self.named[self.len] = token;
                self.len += 1;
            }
        }
    }

    /// Whether the header `name` is one they name.
    fn names(&self, name: &[u8]) -> bool {
        self.named[..self.len]
            .iter()
            .any(|d| name.eq_ignore_ascii_case(d))
    }
}

/// A response head at the start of the upstream's buffer.
#[derive(Debug, PartialEq)]
struct ResponseHead {
    len: usize,
    status: u16,
    body: Framing,
    /// Whether the upstream's connection may take another request after this response.
    keep_alive: bool,
}

/// How a response's body ends (RFC 9112 section 6.3).
#[derive(Debug, PartialEq)]
enum Framing {
    None,
    Length(usize),
    Chunked,
    /// When the upstream closes its connection.
    UntilClose,
}

/// Parses the response head at the start of `buf` (to `request`), and writes into `out` the
/// head for the client: its status line in HTTP/1.1, its headers but the hop-by-hop ones
/// (`Transfer-Encoding` is kept, as the body is relayed as it came) and those the Connection
/// header names, a `Date` when it has none, and `Connection: close` when the client's
/// connection closes after it. None: the head is not all there yet.
fn parse_response(
    buf: &[u8],
    request: &RequestHead,
    out: &mut Vec<u8>,
) -> io::Result<Option<ResponseHead>> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut res = httparse::Response::new(&mut headers);
    let len = match res.parse(buf) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(e) => return Err(io::Error::new(io::ErrorKind::InvalidData, e)),
    };
    let (Some(version), Some(status)) = (res.version, res.code) else {
        return Err(bad("a response without a status"));
    };
    if status == 101 {
        return Err(bad(
            "101 Switching Protocols to a request that asked for none",
        ));
    }
    let (mut length, mut coded, mut chunked, mut date) = (None, false, false, false);
    let mut connection = ConnectionTokens::default();
    for h in res.headers.iter() {
        let name = h.name.as_bytes();
        if name.eq_ignore_ascii_case(b"content-length") {
            let n = content_length(h.value).ok_or_else(|| bad("an invalid Content-Length"))?;
            if length.replace(n).is_some_and(|m| m != n) {
                return Err(bad("several Content-Lengths"));
            }
        } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
            coded = true;
            // the last coding says whether the body is chunked
            chunked = h
                .value
                .rsplit(|b| *b == b',')
                .next()
                .is_some_and(|c| c.trim_ascii().eq_ignore_ascii_case(b"chunked"));
        } else if name.eq_ignore_ascii_case(b"connection") {
            connection.add(h.value);
        } else if name.eq_ignore_ascii_case(b"date") {
            date = true;
        }
    }
    if coded && length.is_some() {
        return Err(bad("a Content-Length with a Transfer-Encoding"));
    }
    let body = if request.head_only || status < 200 || status == 204 || status == 304 {
        Framing::None
    } else if chunked {
        Framing::Chunked
    } else if coded {
        Framing::UntilClose
    } else {
        length.map_or(Framing::UntilClose, Framing::Length)
    };
    // (more named headers than are dropped: not kept, in case one matters)
    let keep_alive =
        version == 1 && !connection.close && !connection.overflow && body != Framing::UntilClose;

    out.clear();
    out.extend_from_slice(b"HTTP/1.1 ");
    out.extend_from_slice(itoa::Buffer::new().format(status).as_bytes());
    out.push(b' ');
    out.extend_from_slice(res.reason.unwrap_or_default().as_bytes());
    out.extend_from_slice(b"\r\n");
    copy_headers(out, res.headers, &RESPONSE_DROPPED, &connection);
    if !date {
        http_date(out);
    }
    if status >= 200 && (request.close || body == Framing::UntilClose) {
        out.extend_from_slice(b"connection: close\r\n");
    }
    out.extend_from_slice(b"\r\n");
    Ok(Some(ResponseHead {
        len,
        status,
        body,
        keep_alive,
    }))
}

/// Response headers not relayed: the hop-by-hop ones but `Transfer-Encoding`.
const RESPONSE_DROPPED: [&[u8]; 6] = [
    b"connection",
    b"keep-alive",
    b"proxy-connection",
    b"te",
    b"trailer",
    b"upgrade",
];

/// The proxy's own answer: [`crate::proxy`]'s error page for `status`.
fn error_response(out: &mut Vec<u8>, status: StatusCode, head_only: bool, close: bool) {
    let text = proxy::error_page(status);
    out.clear();
    for part in [
        b"HTTP/1.1 ",
        status.as_str().as_bytes(),
        b" ",
        status.canonical_reason().unwrap_or_default().as_bytes(),
        b"\r\n",
    ] {
        out.extend_from_slice(part);
    }
    header(out, b"content-type", b"text/plain; charset=utf-8");
    header(
        out,
        b"content-length",
        itoa::Buffer::new().format(text.len()).as_bytes(),
    );
    http_date(out);
    if close {
        out.extend_from_slice(b"connection: close\r\n");
    }
    out.extend_from_slice(b"\r\n");
    if !head_only {
        out.extend_from_slice(text.as_bytes());
    }
}

/// A `Date` header, formatted once a second per thread.
fn http_date(out: &mut Vec<u8>) {
    thread_local! {
        static CACHED: std::cell::RefCell<(u64, String)> = Default::default();
    }
    let now = SystemTime::now();
    let second = now
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs();
    CACHED.with_borrow_mut(|(at, formatted)| {
        if *at != second || formatted.is_empty() {
            *formatted = httpdate::fmt_http_date(now);
            *at = second;
        }
        header(out, b"date", formatted.as_bytes());
    });
}

/// What is left of a response body being relayed.
enum Remaining {
    Bytes(usize),
    Chunks(Chunks),
}

impl Remaining {
    /// How many of `bytes` (the next ones of the body) belong to the body.
    fn take(&mut self, bytes: &[u8]) -> io::Result<usize> {
        match self {
            Remaining::Bytes(left) => {
                let now = bytes.len().min(*left);
                *left -= now;
                Ok(now)
            }
            Remaining::Chunks(chunks) => chunks.scan(bytes),
        }
    }

    fn ended(&self) -> bool {
        match self {
            Remaining::Bytes(left) => *left == 0,
            Remaining::Chunks(chunks) => chunks.ended(),
        }
    }
}

/// Follows a chunked body (RFC 9112 section 7.1) through the bytes relayed, to find its end.
#[derive(Debug, Default)]
struct Chunks {
    state: ChunkState,
}

#[derive(Debug, Default, PartialEq)]
enum ChunkState {
    /// At a chunk's size line.
    #[default]
    Size,
    /// Within a chunk's data, this much of it left.
    Data(u64),
    /// At the CRLF after a chunk's data.
    DataEnd,
    /// At a trailer field line, or the empty line that ends the body.
    Trailer,
    Ended,
}

impl Chunks {
    /// How many of `bytes` (the next ones of the body) belong to the body and can be relayed
    /// now; those after are an incomplete line, or not the body's.
    fn scan(&mut self, bytes: &[u8]) -> io::Result<usize> {
        let mut at = 0;
        loop {
            let rest = &bytes[at..];
            match self.state {
                ChunkState::Ended => return Ok(at),
                ChunkState::Data(left) => {
                    let now = rest.len().min(usize::try_from(left).unwrap_or(usize::MAX));
                    if now == 0 {
                        return Ok(at);
                    }
                    at += now;
                    let left = left - now as u64;
                    self.state = if left == 0 {
                        ChunkState::DataEnd
                    } else {
                        ChunkState::Data(left)
                    };
                }
                ChunkState::DataEnd => {
                    if rest.len() < 2 {
                        return Ok(at);
                    }
                    if &rest[..2] != b"\r\n" {
                        return Err(bad("a chunk without its CRLF"));
                    }
                    at += 2;
                    self.state = ChunkState::Size;
                }
                ChunkState::Size => match httparse::parse_chunk_size(rest) {
                    Ok(httparse::Status::Complete((n, 0))) => {
                        at += n;
                        self.state = ChunkState::Trailer;
                    }
                    Ok(httparse::Status::Complete((n, size))) => {
                        at += n;
                        self.state = ChunkState::Data(size);
                    }
                    Ok(httparse::Status::Partial) if rest.len() < MAX_HEAD => return Ok(at),
                    _ => return Err(bad("an invalid chunk size")),
                },
                ChunkState::Trailer => {
                    let Some(end) = rest.iter().position(|b| *b == b'\n') else {
                        if rest.len() < MAX_HEAD {
                            return Ok(at);
                        }
                        return Err(bad("a trailer line too long"));
                    };
                    let line = &rest[..end];
                    at += end + 1;
                    if line.is_empty() || line == b"\r" {
                        self.state = ChunkState::Ended;
                    }
                }
            }
        }
    }

    fn ended(&self) -> bool {
        self.state == ChunkState::Ended
    }
}

/// A client's connection with the bytes already read from it put back in front, for hyper.
struct Rewind {
    read: Bytes,
    stream: TcpStream,
}

impl AsyncRead for Rewind {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if !self.read.is_empty() {
            let n = self.read.len().min(buf.remaining());
            buf.put_slice(&self.read[..n]);
            self.read.advance(n);
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for Rewind {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer() -> Peer {
        Peer::new("192.0.2.7:40000".parse().unwrap(), 80, false)
    }

    fn simple(request: &[u8]) -> (RequestHead, String) {
        let mut out = Vec::new();
        match parse_request(request, &peer(), &mut out) {
            Parsed::Simple(head) => (head, String::from_utf8(out).unwrap()),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_request_goes_upstream_without_hop_by_hop_headers_and_with_forwarding_ones() {
        let request =
            b"POST /a?b=1 HTTP/1.1\r\nHost: shop.example\r\nConnection: keep-alive, x-private\r\n\
            x-private: 1\r\nTE: trailers\r\nX-Forwarded-For: 6.6.6.6\r\nContent-Length: 2\r\n\
            User-Agent: curl\r\n\r\nhi";
        let (head, out) = simple(request);
        assert_eq!(
            out,
            "POST /a?b=1 HTTP/1.1\r\ncontent-length: 2\r\nUser-Agent: curl\r\nhost: shop.example\r\n\
             x-forwarded-for: 192.0.2.7\r\nx-real-ip: 192.0.2.7\r\nx-forwarded-host: shop.example\r\n\
             x-forwarded-port: 80\r\nx-forwarded-proto: http\r\n\r\n"
                .replace("content-length", "Content-Length")
        );
        assert_eq!(head.len, request.len() - 2);
        assert_eq!((head.body, head.close, head.idempotent), (2, false, false));
        assert_eq!(&request[head.host], b"shop.example");
        assert_eq!(&request[head.target], b"/a?b=1");
        assert_eq!(&request[head.user_agent.unwrap()], b"curl");
    }

    #[test]
    fn requests_of_another_shape_go_to_hyper() {
        let other = |request: &[u8]| {
            let parsed = parse_request(request, &peer(), &mut Vec::new());
            assert!(matches!(parsed, Parsed::Other), "{parsed:?}");
        };
        other(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n");
        other(b"GET / HTTP/1.0\r\nHost: a\r\n\r\n");
        other(b"GET http://a/ HTTP/1.1\r\nHost: a\r\n\r\n");
        other(b"GET / HTTP/1.1\r\n\r\n");
        other(b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n");
        other(b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n");
        other(b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\n");
        other(b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: +1\r\n\r\n");
        other(b"GET / HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n");
        other(b"PUT / HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\n\r\n");
        other(b"GET / HTTP/1.1\r\nHost: a\r\nbad header\r\n\r\n");
        let partial = parse_request(b"GET / HTTP/1.1\r\nHost: a\r\n", &peer(), &mut Vec::new());
        assert!(matches!(partial, Parsed::Partial), "{partial:?}");
        let (head, _) = simple(b"HEAD / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n");
        assert!(head.close && head.head_only && head.idempotent);
    }

    fn response(raw: &[u8], head_only: bool) -> io::Result<(ResponseHead, String)> {
        let (mut request, _) = simple(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n");
        request.head_only = head_only;
        let mut out = Vec::new();
        let head = parse_response(raw, &request, &mut out)?.expect("a whole head");
        Ok((head, String::from_utf8(out).unwrap()))
    }

    #[test]
    fn a_response_is_framed_as_rfc_9112_says_and_relayed_without_hop_by_hop_headers() {
        let (head, out) = response(
            b"HTTP/1.1 200 OK\r\nDate: x\r\nConnection: keep-alive\r\nKeep-Alive: timeout=5\r\n\
              Content-Length: 5\r\n\r\nhello",
            false,
        )
        .unwrap();
        assert_eq!(
            out,
            "HTTP/1.1 200 OK\r\nDate: x\r\nContent-Length: 5\r\n\r\n"
        );
        assert_eq!((head.body, head.keep_alive), (Framing::Length(5), true));
        let framing = |raw: &[u8], head_only| response(raw, head_only).unwrap().0;
        let chunked = framing(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
            false,
        );
        assert_eq!(chunked.body, Framing::Chunked);
        let head = framing(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n", true);
        assert_eq!(head.body, Framing::None);
        let no_content = framing(b"HTTP/1.1 204 No Content\r\n\r\n", false);
        assert_eq!(
            (no_content.body, no_content.keep_alive),
            (Framing::None, true)
        );
        let (until_close, out) = response(b"HTTP/1.0 200 OK\r\n\r\nbody", false).unwrap();
        assert_eq!(
            (until_close.body, until_close.keep_alive),
            (Framing::UntilClose, false)
        );
        assert!(out.contains("\r\ndate: ") && out.ends_with("connection: close\r\n\r\n"));
        let closing = framing(
            b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n",
            false,
        );
        assert!(!closing.keep_alive);
        for broken in [
            &b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n"[..],
            b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n",
            b"HTTP/1.1 101 Switching Protocols\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
        ] {
            assert!(response(broken, false).is_err());
        }
    }

    #[test]
    fn a_chunked_body_is_followed_to_its_end_however_it_is_split() {
        let body = b"5;ext=1\r\nhello\r\n0\r\ntrailer: 1\r\n\r\n";
        for split in 0..body.len() {
            let mut chunks = Chunks::default();
            let mut pending = body[..split].to_vec();
            let mut relayed = chunks.scan(&pending).unwrap();
            pending.drain(..relayed);
            pending.extend_from_slice(&body[split..]);
            relayed += chunks.scan(&pending).unwrap();
            assert!(chunks.ended(), "split at {split}");
            assert_eq!(relayed, body.len(), "split at {split}");
        }
        let mut chunks = Chunks::default();
        assert!(chunks.scan(b"5\r\nhelloXX").is_err());
        let mut chunks = Chunks::default();
        assert_eq!(chunks.scan(b"0\r\n\r\nnext").unwrap(), 5);
        assert!(chunks.ended());
    }

    #[test]
    fn the_proxys_own_answers_are_plain_text_pages() {
        let mut out = Vec::new();
        error_response(&mut out, StatusCode::NOT_FOUND, false, true);
        let text = String::from_utf8(out).unwrap();
        assert!(text.starts_with(
            "HTTP/1.1 404 Not Found\r\ncontent-type: text/plain; charset=utf-8\r\ncontent-length: 18\r\ndate: "
        ));
        assert!(
            text.ends_with("\r\nconnection: close\r\n\r\n404 page not found"),
            "{text}"
        );
    }
}
