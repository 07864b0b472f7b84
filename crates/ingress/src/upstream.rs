//! The HTTP/1.1 connections to the endpoints: a keep-alive pool per worker thread (nginx's
//! per-worker `keepalive` cache), built on hyper's connection-level client
//! (`hyper::client::conn::http1`) rather than hyper-util's pooled `Client`.
//!
//! A pooled connection has no task of its own: the request that checked it out drives it
//! (polls hyper's connection future) while it waits for the response, and the response body
//! drives it while the body is read, then hands it back to the pool once the body has ended.
//! Forwarding a request thus runs in one task from the client's request to the last byte of
//! the answer, as in nginx's event loop; hyper-util's `Client` spawns a task per upstream
//! connection, a task per response to return its connection, and keeps one pool for all
//! threads behind a lock and a hashed key, which together cost more CPU per request than the
//! rest of the proxy (see BENCHMARKS.md, Ingress).
//!
//! Hyper's connection-level client is made for a connection future in a task of its own: the
//! request handle, the connection and the response body wake each other through channels.
//! Driven in the request's task, each such wake-up would put the task back in the run queue
//! while it is running, and the whole client connection (hyper's server side, the proxy)
//! would be polled again for nothing, about twice per request. An [`Inline`] waker turns the
//! wake-ups a connection's parts give one another while the task polls them into an immediate
//! re-poll of those parts alone; wake-ups from outside (the socket, the client's request body)
//! reach the task as before.
//!
//! h2c endpoints get one multiplexed HTTP/2 connection per worker, run by a task of its own as
//! HTTP/2 needs; a WebSocket upgrade gets a connection of its own.
//!
//! An idle connection is not polled, so one the endpoint closed is found out when it is next
//! checked out (hyper's connection reads the end of the stream and ends) or by the sweep
//! every [`SWEEP_EVERY`], which also closes those idle longer than [`IDLE_TIMEOUT`]. A request
//! that a reused connection could not send (it closed as the request was handed over) is sent
//! on a new connection.

use std::collections::HashMap;
use std::future::{Future, poll_fn};
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{Either, Empty};
use hyper::body::{Body as _, Frame, Incoming, SizeHint};
use hyper::client::conn::{http1, http2};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpStream;

/// The body of a request sent upstream: the client's, or none.
pub type UpstreamBody = Either<Incoming, Empty<Bytes>>;

/// A request on its way upstream, boxed: it passes through several futures, each of which
/// would otherwise hold a copy of its place (an async fn keeps its arguments besides the
/// futures it moves them into), and those futures are moved as a whole.
pub type Outgoing = Box<Request<UpstreamBody>>;

/// How long a connection may stay idle in the pool (nginx's upstream `keepalive_timeout`).
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(60);
/// How often idle connections are checked for [`IDLE_TIMEOUT`] and for having been closed.
pub const SWEEP_EVERY: Duration = Duration::from_secs(10);
/// The most idle connections kept to one endpoint by one worker; more are closed.
pub const MAX_IDLE: usize = 128;
/// How many times in a row [`Inline::poll`] polls again at once, before a wake-up goes to
/// the task's scheduler as usual (so that a connection that keeps waking itself, as hyper's
/// does after a run of work, still lets the worker's other tasks run).
const INLINE_POLLS: usize = 4;

/// Why a request could not be forwarded.
#[derive(Debug)]
pub enum Failed {
    /// No connection could be opened: nothing was sent, and the request comes back.
    Connect(std::io::Error, Outgoing),
    /// The exchange failed once the request was handed to a connection.
    Exchange(hyper::Error),
}

impl std::fmt::Display for Failed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failed::Connect(e, _) => write!(f, "connecting: {e}"),
            Failed::Exchange(e) => e.fmt(f),
        }
    }
}

/// How a request is spoken to its endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// HTTP/1.1 over a pooled keep-alive connection.
    Http1,
    /// HTTP/2 without TLS, over one multiplexed connection per endpoint and worker.
    H2c,
    /// HTTP/1.1 over a connection of its own, which a `101 Switching Protocols` hands over to
    /// the upgraded protocol (WebSocket); never pooled.
    Upgrade,
}

/// One worker's connections to the endpoints: idle HTTP/1.1 ones, and an h2c one per
/// endpoint.
#[derive(Default)]
pub struct Pool {
    idle: Mutex<HashMap<SocketAddr, Vec<Idle<Conn>>>>,
    /// Idle connections of [`crate::h1`]'s fast path, which speaks HTTP/1.1 itself.
    raw: Mutex<HashMap<SocketAddr, Vec<Idle<TcpStream>>>>,
    h2c: Mutex<HashMap<SocketAddr, http2::SendRequest<UpstreamBody>>>,
}

struct Idle<C> {
    conn: C,
    since: Instant,
}

/// Closes the connections in `idle` idle for [`IDLE_TIMEOUT`] or that `usable` says are not.
fn sweep<C>(
    idle: &Mutex<HashMap<SocketAddr, Vec<Idle<C>>>>,
    now: Instant,
    mut usable: impl FnMut(&mut C) -> bool,
) {
    let mut idle = idle.lock().expect("the pool's lock is never poisoned");
    for list in idle.values_mut() {
        list.retain_mut(|i| now.duration_since(i.since) < IDLE_TIMEOUT && usable(&mut i.conn));
    }
    idle.retain(|_, list| !list.is_empty());
}

/// Adds `conn` to the idle connections to `endpoint` in `idle`, unless there are
/// [`MAX_IDLE`] already.
fn keep_idle<C>(idle: &Mutex<HashMap<SocketAddr, Vec<Idle<C>>>>, endpoint: SocketAddr, conn: C) {
    let mut idle = idle.lock().expect("the pool's lock is never poisoned");
    let list = idle.entry(endpoint).or_default();
    if list.len() < MAX_IDLE {
        list.push(Idle {
            conn,
            since: Instant::now(),
        });
    }
}

impl Pool {
    /// Sends `req` (in origin form, its Host set) to `endpoint` by `protocol`.
    pub async fn send(
        self: &Arc<Pool>,
        endpoint: SocketAddr,
        req: Outgoing,
        protocol: Protocol,
    ) -> Result<Response<ResponseBody>, Failed> {
        let response = match protocol {
            Protocol::Http1 => return self.send_http1(endpoint, req).await,
            // boxed: their futures are large, and would enlarge every request's
            Protocol::H2c => Box::pin(self.send_h2c(endpoint, req)).await?,
            Protocol::Upgrade => Box::pin(send_upgrade(endpoint, req)).await?,
        };
        Ok(response.map(|body| ResponseBody {
            body,
            ended: false,
            conn: None,
        }))
    }

    /// Sends `req` on an idle connection to `endpoint`, or a new one; the response's body
    /// hands the connection back once it has been read.
    async fn send_http1(
        self: &Arc<Pool>,
        endpoint: SocketAddr,
        mut req: Outgoing,
    ) -> Result<Response<ResponseBody>, Failed> {
        loop {
            let (mut conn, reused) = match self.checkout(endpoint).await {
                Some(conn) => (conn, true),
                None => match Conn::open(endpoint).await {
                    Ok(conn) => (conn, false),
                    Err(e) => return Err(Failed::Connect(e, req)),
                },
            };
            match conn.send(req).await {
                Ok(response) => {
                    let pool = Arc::downgrade(self);
                    return Ok(response.map(|body| ResponseBody {
                        body,
                        ended: false,
                        conn: Some((conn, pool, endpoint)),
                    }));
                }
                Err(mut e) => match e.take_message() {
                    // the idle connection closed as the request was handed over
                    Some(back) if reused => req = Box::new(back),
                    _ => return Err(Failed::Exchange(e.into_error())),
                },
            }
        }
    }

    /// Sends `req` on the worker's HTTP/2 connection to `endpoint`, opened if there is none
    /// or it has closed.
    async fn send_h2c(
        &self,
        endpoint: SocketAddr,
        mut req: Outgoing,
    ) -> Result<Response<Incoming>, Failed> {
        // HTTP/2 names the scheme and authority in every request
        *req.uri_mut() = absolute(endpoint, req.uri());
        let open = {
            let h2c = self.h2c.lock().expect("the pool's lock is never poisoned");
            h2c.get(&endpoint).filter(|s| !s.is_closed()).cloned()
        };
        let mut sender = match open {
            Some(sender) => sender,
            None => {
                let stream = match connect(endpoint).await {
                    Ok(stream) => stream,
                    Err(e) => return Err(Failed::Connect(e, req)),
                };
                let (sender, driver) = http2::handshake(TokioExecutor::new(), stream)
                    .await
                    .map_err(Failed::Exchange)?;
                tokio::spawn(async move {
                    if let Err(e) = driver.await {
                        tracing::debug!(%endpoint, error = %e, "h2c upstream connection ended");
                    }
                });
                let mut h2c = self.h2c.lock().expect("the pool's lock is never poisoned");
                h2c.insert(endpoint, sender.clone());
                sender
            }
        };
        sender.send_request(*req).await.map_err(Failed::Exchange)
    }

    /// The most recently used idle connection to `endpoint` that is still open.
    async fn checkout(&self, endpoint: SocketAddr) -> Option<Conn> {
        loop {
            let mut conn = {
                let mut idle = self.idle.lock().expect("the pool's lock is never poisoned");
                idle.get_mut(&endpoint)?.pop()?.conn
            };
            if conn.ready().await {
                return Some(conn);
            }
        }
    }

    fn checkin(&self, endpoint: SocketAddr, conn: Conn) {
        // an idle connection is not polled: what it would wake is found at its checkout
        conn.inline.forget_task();
        keep_idle(&self.idle, endpoint, conn);
    }

    /// The most recently used idle fast-path connection to `endpoint` not known to be
    /// closed: one the reactor has seen readable is peeked at (an idle connection has nothing
    /// to read unless it has ended); the others cost no system call.
    pub(crate) fn checkout_raw(&self, endpoint: SocketAddr) -> Option<TcpStream> {
        let mut idle = self.raw.lock().expect("the pool's lock is never poisoned");
        let list = idle.get_mut(&endpoint)?;
        while let Some(Idle { conn, .. }) = list.pop() {
            if !ended(&conn) {
                return Some(conn);
            }
        }
        None
    }

    pub(crate) fn checkin_raw(&self, endpoint: SocketAddr, conn: TcpStream) {
        keep_idle(&self.raw, endpoint, conn);
    }

    /// Closes the idle fast-path connections to `endpoint` (one of them was found closed:
    /// the endpoint has probably restarted).
    pub(crate) fn forget_idle_raw(&self, endpoint: SocketAddr) {
        let mut idle = self.raw.lock().expect("the pool's lock is never poisoned");
        idle.remove(&endpoint);
    }

    /// Closes, every [`SWEEP_EVERY`], the idle connections that the endpoint closed or that
    /// were idle longer than [`IDLE_TIMEOUT`]; runs on the worker's runtime until the pool
    /// is dropped.
    pub async fn sweep(pool: std::sync::Weak<Pool>) {
        loop {
            tokio::time::sleep(SWEEP_EVERY).await;
            let Some(pool) = pool.upgrade() else { return };
            pool.close_idle(Instant::now());
        }
    }

    fn close_idle(&self, now: Instant) {
        let mut cx = Context::from_waker(Waker::noop());
        sweep(&self.idle, now, |conn| drive(&mut conn.driver, &mut cx));
        sweep(&self.raw, now, |conn| !ended(conn));
    }

    /// Idle connections to `endpoint`.
    #[cfg(test)]
    fn idle(&self, endpoint: SocketAddr) -> usize {
        let idle = self.idle.lock().unwrap();
        idle.get(&endpoint).map_or(0, Vec::len)
    }
}

/// Sends `req` on a new HTTP/1.1 connection to `endpoint` that may be upgraded.
async fn send_upgrade(endpoint: SocketAddr, req: Outgoing) -> Result<Response<Incoming>, Failed> {
    let stream = match connect(endpoint).await {
        Ok(stream) => stream,
        Err(e) => return Err(Failed::Connect(e, req)),
    };
    let (mut sender, driver) = http1::handshake(stream).await.map_err(Failed::Exchange)?;
    tokio::spawn(driver.with_upgrades());
    sender.send_request(*req).await.map_err(Failed::Exchange)
}

/// `uri`'s path and query at `endpoint`.
fn absolute(endpoint: SocketAddr, uri: &http::Uri) -> http::Uri {
    let mut parts = http::uri::Parts::default();
    parts.scheme = Some(http::uri::Scheme::HTTP);
    parts.authority = http::uri::Authority::try_from(endpoint.to_string()).ok();
    parts.path_and_query = uri.path_and_query().cloned();
    http::Uri::from_parts(parts).unwrap_or_else(|_| uri.clone())
}

/// A TCP connection to `endpoint`, without Nagle's delay.
pub(crate) async fn connect_tcp(endpoint: SocketAddr) -> std::io::Result<TcpStream> {
    let stream = TcpStream::connect(endpoint).await?;
    stream.set_nodelay(true)?;
    Ok(stream)
}

async fn connect(endpoint: SocketAddr) -> std::io::Result<TokioIo<TcpStream>> {
    connect_tcp(endpoint).await.map(TokioIo::new)
}

/// Whether an idle connection has ended or is out of step (has something to read), by a
/// peek when the reactor has seen it readable.
fn ended(conn: &TcpStream) -> bool {
    let mut cx = Context::from_waker(Waker::noop());
    let mut byte = [0u8; 1];
    let mut buf = tokio::io::ReadBuf::new(&mut byte);
    conn.poll_peek(&mut cx, &mut buf).is_ready()
}

/// One HTTP/1.1 connection to an endpoint and the hyper future that runs it.
struct Conn {
    sender: http1::SendRequest<UpstreamBody>,
    /// Hyper's connection future, boxed (it is large, and connections move in and out of
    /// the pool); `None` once it has ended (the connection closed).
    driver: Option<Box<Driver>>,
    inline: Inline,
}

type Driver = http1::Connection<TokioIo<TcpStream>, UpstreamBody>;

impl Conn {
    async fn open(endpoint: SocketAddr) -> std::io::Result<Conn> {
        let (sender, driver) = http1::handshake(connect(endpoint).await?)
            .await
            .map_err(std::io::Error::other)?;
        Ok(Conn {
            sender,
            driver: Some(Box::new(driver)),
            inline: Inline::default(),
        })
    }

    /// Whether the connection can take a request, driving it until it knows.
    async fn ready(&mut self) -> bool {
        let Conn {
            sender,
            driver,
            inline,
        } = self;
        poll_fn(|cx| {
            inline.poll(cx, |cx| {
                let open = drive(driver, cx);
                match sender.poll_ready(cx) {
                    Poll::Ready(ready) => Poll::Ready(ready.is_ok()),
                    Poll::Pending if open => Poll::Pending,
                    Poll::Pending => Poll::Ready(false),
                }
            })
        })
        .await
    }

    /// Sends `req`, driving the connection until the response's head arrives.
    async fn send(
        &mut self,
        req: Outgoing,
    ) -> Result<Response<Incoming>, hyper::client::conn::TrySendError<Request<UpstreamBody>>> {
        let Conn {
            sender,
            driver,
            inline,
        } = self;
        // handing the request over wakes the connection, which is polled right after
        let response = inline.quiet(|| sender.try_send_request(*req));
        let mut response = std::pin::pin!(response);
        poll_fn(|cx| {
            inline.poll(cx, |cx| {
                if let Poll::Ready(result) = response.as_mut().poll(cx) {
                    return Poll::Ready(result);
                }
                // hyper answers the request with an error if the connection ends first
                if !drive(driver, cx) {
                    return response.as_mut().poll(cx);
                }
                Poll::Pending
            })
        })
        .await
    }
}

/// Polls hyper's connection future, dropped once it has ended; false then.
fn drive(driver: &mut Option<Box<Driver>>, cx: &mut Context<'_>) -> bool {
    let Some(d) = driver else {
        return false;
    };
    match Pin::new(&mut **d).poll(cx) {
        Poll::Pending => true,
        Poll::Ready(result) => {
            if let Err(e) = result {
                tracing::debug!(error = %e, "upstream connection ended");
            }
            *driver = None;
            false
        }
    }
}

/// The waker a connection's parts are polled with (see the module's documentation): while
/// [`Inline::poll`] runs, a wake-up only marks that they are to be polled again; otherwise it
/// wakes the task that last polled them.
struct Inline {
    state: Arc<InlineState>,
    waker: Waker,
}

#[derive(Default)]
struct InlineState {
    /// The task that last polled the connection, kept (not taken) by a wake-up: as it would
    /// be in each of the channels if they were given the task's waker.
    task: Mutex<Option<Waker>>,
    polling: AtomicBool,
    woken: AtomicBool,
}

impl InlineState {
    fn task(&self) -> std::sync::MutexGuard<'_, Option<Waker>> {
        self.task
            .lock()
            .expect("the waker's lock is never poisoned")
    }
}

impl Wake for InlineState {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        if self.polling.load(Ordering::Acquire) {
            self.woken.store(true, Ordering::Release);
        } else if let Some(task) = &*self.task() {
            task.wake_by_ref();
        }
    }
}

impl Default for Inline {
    fn default() -> Inline {
        let state = Arc::new(InlineState::default());
        Inline {
            waker: Waker::from(state.clone()),
            state,
        }
    }
}

impl Inline {
    /// Runs `poll` with the connection's waker, again at once while it was woken meanwhile
    /// (up to [`INLINE_POLLS`] times); the task in `cx` is woken by later wake-ups.
    fn poll<T>(
        &self,
        cx: &mut Context<'_>,
        mut poll: impl FnMut(&mut Context<'_>) -> Poll<T>,
    ) -> Poll<T> {
        {
            let mut task = self.state.task();
            if !task.as_ref().is_some_and(|t| t.will_wake(cx.waker())) {
                *task = Some(cx.waker().clone());
            }
        }
        let mut inner = Context::from_waker(&self.waker);
        let polled = self.quiet(|| {
            for _ in 0..INLINE_POLLS {
                self.state.woken.store(false, Ordering::Relaxed);
                if let Poll::Ready(value) = poll(&mut inner) {
                    return Poll::Ready(value);
                }
                if !self.state.woken.load(Ordering::Acquire) {
                    return Poll::Pending;
                }
            }
            Poll::Pending
        });
        if polled.is_pending() && self.state.woken.swap(false, Ordering::AcqRel) {
            // woken by the last of the inline polls: the scheduler polls again
            cx.waker().wake_by_ref();
        }
        polled
    }

    /// Runs `f` with the connection's wake-ups held back: the caller polls the connection
    /// next.
    fn quiet<T>(&self, f: impl FnOnce() -> T) -> T {
        self.state.polling.store(true, Ordering::Release);
        let value = f();
        self.state.polling.store(false, Ordering::Release);
        value
    }

    /// Wake-ups until the next [`Inline::poll`] wake nothing.
    fn forget_task(&self) {
        self.state.task().take();
    }
}

/// A response body. From a pooled HTTP/1.1 connection, reading it drives the connection, and
/// once it has been read to the end the connection goes back to the pool (when the body is
/// dropped before its end the connection is closed, as the rest of the answer cannot be
/// skipped).
pub struct ResponseBody {
    body: Incoming,
    /// Whether the body has given its last frame.
    ended: bool,
    conn: Option<(Conn, std::sync::Weak<Pool>, SocketAddr)>,
}

impl hyper::body::Body for ResponseBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let this = &mut *self;
        let frame = match &mut this.conn {
            // the connection sends the body's frames to it: polled together, inline
            Some((conn, ..)) => conn.inline.poll(cx, |cx| {
                drive(&mut conn.driver, cx);
                Pin::new(&mut this.body).poll_frame(cx)
            }),
            None => Pin::new(&mut this.body).poll_frame(cx),
        };
        if let Poll::Ready(None) = frame {
            self.ended = true;
        }
        frame
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

impl Drop for ResponseBody {
    fn drop(&mut self) {
        if let Some((conn, pool, endpoint)) = self.conn.take()
            && (self.ended || self.body.is_end_stream())
            && conn.driver.is_some()
            && let Some(pool) = pool.upgrade()
        {
            pool.checkin(endpoint, conn);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    /// A server giving every request on a connection `answer` (a whole HTTP/1.1 response);
    /// counts connections.
    async fn server(answer: String) -> (SocketAddr, Arc<std::sync::atomic::AtomicUsize>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let accepted = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counter = accepted.clone();
        tokio::spawn(async move {
            loop {
                let (mut stream, _) = listener.accept().await.unwrap();
                counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let answer = answer.clone();
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 4096];
                    let mut seen = Vec::new();
                    loop {
                        let n = match stream.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => n,
                        };
                        seen.extend_from_slice(&buf[..n]);
                        while let Some(end) = seen.windows(4).position(|w| w == b"\r\n\r\n") {
                            seen.drain(..end + 4);
                            if stream.write_all(answer.as_bytes()).await.is_err() {
                                return;
                            }
                        }
                    }
                });
            }
        });
        (addr, accepted)
    }

    fn with_length(body: &str) -> String {
        format!(
            "HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        )
    }

    fn get() -> Outgoing {
        Box::new(
            Request::get("/")
                .header(http::header::HOST, "a.com")
                .body(Either::Right(Empty::new()))
                .unwrap(),
        )
    }

    #[tokio::test]
    async fn a_connection_read_to_the_end_is_reused() {
        let (addr, accepted) = server(with_length("hello")).await;
        let pool = Arc::new(Pool::default());
        for _ in 0..3 {
            let response = pool.send(addr, get(), Protocol::Http1).await.unwrap();
            let body = response.into_body().collect().await.unwrap().to_bytes();
            assert_eq!(body, "hello");
            assert_eq!(pool.idle(addr), 1);
        }
        assert_eq!(accepted.load(std::sync::atomic::Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn an_exchange_on_a_pooled_connection_is_not_polled_for_its_own_wake_ups() {
        let (addr, _) = server(with_length("hello")).await;
        let pool = Arc::new(Pool::default());
        let exchange = || async {
            let response = pool.send(addr, get(), Protocol::Http1).await.unwrap();
            response.into_body().collect().await.unwrap().to_bytes()
        };
        assert_eq!(exchange().await, "hello");
        // polled when sent and when the answer arrives (2 polls a request here); hyper's
        // channels between the request, the connection and the body, waking the task, would
        // add at least one more
        const REQUESTS: usize = 20;
        let mut polls = 0;
        for _ in 0..REQUESTS {
            let mut exchange = std::pin::pin!(exchange());
            let body = poll_fn(|cx| {
                polls += 1;
                exchange.as_mut().poll(cx)
            })
            .await;
            assert_eq!(body, "hello");
        }
        assert!(
            polls < 3 * REQUESTS,
            "{polls} polls for {REQUESTS} requests"
        );
    }

    #[tokio::test]
    async fn long_and_chunked_bodies_are_read_whole_and_their_connections_reused() {
        let long = "x".repeat(1 << 20);
        let chunked = "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n\
                       5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n";
        for (answer, body) in [
            (with_length(&long), long.as_str()),
            (chunked.into(), "hello world"),
        ] {
            let (addr, accepted) = server(answer).await;
            let pool = Arc::new(Pool::default());
            for _ in 0..2 {
                let response = pool.send(addr, get(), Protocol::Http1).await.unwrap();
                let got = response.into_body().collect().await.unwrap().to_bytes();
                assert_eq!(got, body.as_bytes());
                assert_eq!(pool.idle(addr), 1);
            }
            assert_eq!(accepted.load(std::sync::atomic::Ordering::SeqCst), 1);
        }
    }

    #[tokio::test]
    async fn concurrent_requests_get_connections_of_their_own() {
        let (addr, accepted) = server(with_length("hello")).await;
        let pool = Arc::new(Pool::default());
        let first = pool.send(addr, get(), Protocol::Http1).await.unwrap();
        let second = pool.send(addr, get(), Protocol::Http1).await.unwrap();
        assert_eq!(accepted.load(std::sync::atomic::Ordering::SeqCst), 2);
        drop(first.into_body().collect().await.unwrap());
        drop(second.into_body().collect().await.unwrap());
        assert_eq!(pool.idle(addr), 2);
    }

    #[tokio::test]
    async fn a_body_dropped_before_its_end_closes_its_connection() {
        let (addr, _) = server(with_length("hello")).await;
        let pool = Arc::new(Pool::default());
        let response = pool.send(addr, get(), Protocol::Http1).await.unwrap();
        drop(response);
        assert_eq!(pool.idle(addr), 0);
    }

    #[tokio::test]
    async fn a_connection_the_endpoint_closed_is_not_reused() {
        // answers one request, then closes
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            loop {
                let (mut stream, _) = listener.accept().await.unwrap();
                let mut buf = vec![0u8; 4096];
                let _ = stream.read(&mut buf).await;
                let _ = stream
                    .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
                    .await;
                drop(stream);
            }
        });
        let pool = Arc::new(Pool::default());
        for _ in 0..3 {
            let response = pool.send(addr, get(), Protocol::Http1).await.unwrap();
            let body = response.into_body().collect().await.unwrap().to_bytes();
            assert_eq!(body, "ok");
            // let the close arrive before the next request checks the connection out
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    #[tokio::test]
    async fn a_refused_connection_gives_the_request_back() {
        let unused = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = unused.local_addr().unwrap();
        drop(unused);
        let pool = Arc::new(Pool::default());
        match pool.send(addr, get(), Protocol::Http1).await {
            Err(Failed::Connect(_, req)) => assert_eq!(req.uri(), "/"),
            Err(e) => panic!("expected a connect failure, got {e}"),
            Ok(_) => panic!("expected a connect failure, got a response"),
        }
    }

    #[tokio::test]
    async fn idle_connections_are_closed_after_the_timeout() {
        let (addr, _) = server(with_length("hello")).await;
        let pool = Arc::new(Pool::default());
        let response = pool.send(addr, get(), Protocol::Http1).await.unwrap();
        drop(response.into_body().collect().await.unwrap());
        pool.close_idle(Instant::now());
        assert_eq!(pool.idle(addr), 1);
        pool.close_idle(Instant::now() + IDLE_TIMEOUT);
        assert_eq!(pool.idle(addr), 0);
    }

    /// A waker counting its wake-ups, standing for the task.
    #[derive(Default)]
    struct Task(std::sync::atomic::AtomicUsize);

    impl Wake for Task {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    }

    #[test]
    fn wake_ups_during_an_inline_poll_poll_again_at_once_and_later_ones_wake_the_task() {
        let task = Arc::new(Task::default());
        let waker = Waker::from(task.clone());
        let mut cx = Context::from_waker(&waker);
        let wakes = || task.0.load(std::sync::atomic::Ordering::SeqCst);
        let inline = Inline::default();

        // a part that wakes the other once, which is then ready: one poll of the task
        let mut polls = 0;
        let polled = inline.poll(&mut cx, |cx| {
            polls += 1;
            if polls == 1 {
                cx.waker().wake_by_ref();
                Poll::Pending
            } else {
                Poll::Ready(())
            }
        });
        assert_eq!((polled, polls, wakes()), (Poll::Ready(()), 2, 0));

        // a waker kept by a part wakes the task once the poll has returned
        let mut kept = None;
        let polled = inline.poll(&mut cx, |cx| {
            kept = Some(cx.waker().clone());
            Poll::<()>::Pending
        });
        assert_eq!((polled, wakes()), (Poll::Pending, 0));
        kept.as_ref().unwrap().wake_by_ref();
        assert_eq!(wakes(), 1);

        // one that keeps waking itself goes back to the scheduler after INLINE_POLLS polls
        let mut polls = 0;
        let polled = inline.poll(&mut cx, |cx| {
            polls += 1;
            cx.waker().wake_by_ref();
            Poll::<()>::Pending
        });
        assert_eq!((polled, polls, wakes()), (Poll::Pending, INLINE_POLLS, 2));

        // held back while quiet; none at all once the connection is idle in the pool
        inline.quiet(|| kept.as_ref().unwrap().wake_by_ref());
        assert_eq!(wakes(), 2);
        inline.forget_task();
        kept.as_ref().unwrap().wake_by_ref();
        assert_eq!(wakes(), 2);
    }
}
