//! The proxy on loopback ports, against an upstream hyper server: forwarded headers, a new
//! configuration taking over while a keep-alive connection stays open, a WebSocket-style
//! upgrade passed through byte for byte, and an h2c upstream with trailers (gRPC's shape).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use skiff_ingress::config::Config;
use skiff_ingress::listen::{Listener, Workers};
use skiff_ingress::route::{Backend, PathType, Table};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// An upstream that answers `<name>` and the request's forwarding headers, one per line,
/// upgrades `Upgrade: echo` requests to an echo of every byte, and answers `/echo` with the
/// request's body.
async fn upstream(name: &'static str) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            let service = service_fn(move |mut req: Request<Incoming>| async move {
                if req.headers().get("upgrade").is_some_and(|u| u == "echo") {
                    let upgraded = hyper::upgrade::on(&mut req);
                    tokio::spawn(async move {
                        let mut io = TokioIo::new(upgraded.await.unwrap());
                        let mut buf = [0u8; 64];
                        loop {
                            let n = io.read(&mut buf).await.unwrap_or(0);
                            if n == 0 || io.write_all(&buf[..n]).await.is_err() {
                                return;
                            }
                        }
                    });
                    let response = Response::builder()
                        .status(StatusCode::SWITCHING_PROTOCOLS)
                        .header("connection", "upgrade")
                        .header("upgrade", "echo")
                        .body(Full::new(Bytes::new()))
                        .unwrap();
                    return Ok::<_, Infallible>(response);
                }
                if req.uri().path() == "/echo" {
                    let echo = req.into_body().collect().await.unwrap().to_bytes();
                    return Ok(Response::new(Full::new(echo)));
                }
                let mut body = format!("{name}\n");
                for header in [
                    "host",
                    "x-forwarded-for",
                    "x-forwarded-host",
                    "x-forwarded-port",
                    "x-forwarded-proto",
                ] {
                    let value = req.headers().get(header).map(|v| v.to_str().unwrap());
                    body.push_str(&format!("{header}: {}\n", value.unwrap_or("-")));
                }
                Ok(Response::new(Full::new(Bytes::from(body))))
            });
            tokio::spawn(
                hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .with_upgrades(),
            );
        }
    });
    addr
}

/// An upstream that speaks only HTTP/2 without TLS, as a gRPC server does: answers with the
/// request's version and `TE` header, and a `grpc-status` trailer.
async fn h2c_upstream() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            let service = service_fn(|req: Request<Incoming>| async move {
                let te = req
                    .headers()
                    .get("te")
                    .map(|v| v.to_str().unwrap().to_string());
                let text = format!("{:?} te={}", req.version(), te.as_deref().unwrap_or("-"));
                let mut trailers = http::HeaderMap::new();
                trailers.insert("grpc-status", http::HeaderValue::from_static("0"));
                let body = Full::new(Bytes::from(text))
                    .with_trailers(async move { Some(Ok::<_, Infallible>(trailers)) });
                Ok::<_, Infallible>(Response::new(body))
            });
            tokio::spawn(
                hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), service),
            );
        }
    });
    addr
}

/// A configuration routing every host's `/` to `upstream`.
fn routing_to(name: &str, upstream: SocketAddr) -> Arc<Config> {
    let mut table = Table::default();
    let backend = Arc::new(Backend::new(name.into(), vec![upstream]));
    table.add("", "/", PathType::Prefix, backend);
    Arc::new(Config {
        table,
        ..Config::default()
    })
}

/// Writes `request` and reads one response of `Content-Length` framing; its text.
async fn exchange(conn: &mut TcpStream, request: &str) -> String {
    conn.write_all(request.as_bytes()).await.unwrap();
    let mut response = Vec::new();
    let mut buf = [0u8; 1024];
    loop {
        let n = conn.read(&mut buf).await.unwrap();
        assert!(
            n > 0,
            "closed mid-response: {:?}",
            String::from_utf8_lossy(&response)
        );
        response.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&response).to_string();
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let length = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length: "))
                .map_or(0, |n| n.parse::<usize>().unwrap());
            if body.len() >= length {
                return text;
            }
        }
    }
}

/// The proxy of `config` on a free loopback port.
async fn serve(config: watch::Receiver<Arc<Config>>) -> SocketAddr {
    let listener = Listener::bind("127.0.0.1:0".parse().unwrap(), None)
        .await
        .unwrap();
    let addr = listener.local_addr();
    tokio::spawn(listener.serve(Workers::start(config, 2).unwrap()));
    addr
}

#[tokio::test]
async fn requests_are_forwarded_with_x_forwarded_headers_and_follow_a_new_configuration() {
    let (one, two) = (upstream("one").await, upstream("two").await);
    let (publish, config) = watch::channel(routing_to("one", one));
    let addr = serve(config).await;

    let mut conn = TcpStream::connect(addr).await.unwrap();
    let request = "GET /x HTTP/1.1\r\nHost: a.com\r\nX-Forwarded-For: 6.6.6.6\r\n\r\n";
    let first = exchange(&mut conn, request).await;
    assert!(first.starts_with("HTTP/1.1 200"), "{first}");
    let body = first.split_once("\r\n\r\n").unwrap().1;
    let port = addr.port();
    assert_eq!(
        body,
        format!(
            "one\nhost: a.com\nx-forwarded-for: 127.0.0.1\nx-forwarded-host: a.com\n\
             x-forwarded-port: {port}\nx-forwarded-proto: http\n"
        )
    );

    // the same keep-alive connection sees the new configuration
    publish.send_replace(routing_to("two", two));
    let second = exchange(&mut conn, request).await;
    assert!(second.contains("\r\n\r\ntwo\n"), "{second}");

    // nothing routes: 404
    publish.send_replace(Arc::new(Config::default()));
    let third = exchange(&mut conn, request).await;
    assert!(third.starts_with("HTTP/1.1 404"), "{third}");
}

#[tokio::test]
async fn an_upgraded_connection_is_passed_through_both_ways() {
    let echo = upstream("echo").await;
    let (_publish, config) = watch::channel(routing_to("echo", echo));
    let addr = serve(config).await;

    let mut conn = TcpStream::connect(addr).await.unwrap();
    let request = "GET /ws HTTP/1.1\r\nHost: a.com\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n";
    conn.write_all(request.as_bytes()).await.unwrap();
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        let mut byte = [0u8; 1];
        assert_eq!(
            conn.read(&mut byte).await.unwrap(),
            1,
            "closed before the 101"
        );
        head.push(byte[0]);
    }
    let head = String::from_utf8(head).unwrap();
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    assert!(head.to_lowercase().contains("upgrade: echo"), "{head}");
    for message in ["ping", "pong and more"] {
        conn.write_all(message.as_bytes()).await.unwrap();
        let mut back = vec![0u8; message.len()];
        conn.read_exact(&mut back).await.unwrap();
        assert_eq!(back, message.as_bytes());
    }
}

#[tokio::test]
async fn a_request_goes_to_another_endpoint_when_one_refuses_the_connection() {
    let live = upstream("live").await;
    // a port nothing listens on: connecting is refused
    let refused = TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap()
        .local_addr()
        .unwrap();
    let mut table = Table::default();
    let backend = Arc::new(Backend::new("web".into(), vec![refused, live]));
    table.add("", "/", PathType::Prefix, backend);
    let config = Arc::new(Config {
        table,
        ..Config::default()
    });
    let (_publish, config) = watch::channel(config);
    let addr = serve(config).await;

    let mut conn = TcpStream::connect(addr).await.unwrap();
    // round-robin starts at the refused endpoint every other request: all answered by live
    for _ in 0..4 {
        let answer = exchange(&mut conn, "GET / HTTP/1.1\r\nHost: a.com\r\n\r\n").await;
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        assert!(answer.contains("\r\n\r\nlive\n"), "{answer}");
    }
    // nothing was sent to the refused endpoint, so a request with a body goes elsewhere too
    let post = "POST / HTTP/1.1\r\nHost: a.com\r\nContent-Length: 2\r\n\r\nhi";
    for _ in 0..2 {
        let answer = exchange(&mut conn, post).await;
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        assert!(answer.contains("\r\n\r\nlive\n"), "{answer}");
    }
}

#[tokio::test]
async fn long_bodies_go_both_ways_over_reused_upstream_connections() {
    let addr = serve(watch::channel(routing_to("echo", upstream("echo").await)).1).await;
    let stream = TcpStream::connect(addr).await.unwrap();
    let (mut client, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(conn);
    for n in 0..3u8 {
        let body: Bytes = (0..4 << 20)
            .map(|i: u32| (i as u8) ^ n)
            .collect::<Vec<u8>>()
            .into();
        let req = Request::post("/echo")
            .header("host", "a.com")
            .body(Full::new(body.clone()))
            .unwrap();
        client.ready().await.unwrap();
        let response = client.send_request(req).await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        let echoed = response.into_body().collect().await.unwrap().to_bytes();
        assert!(
            echoed == body,
            "request {n}: {} bytes came back",
            echoed.len()
        );
    }
}

#[tokio::test]
async fn an_h2c_backend_is_spoken_to_over_http2_and_its_trailers_come_back() {
    let upstream = h2c_upstream().await;
    let mut table = Table::default();
    let backend = Backend::new("grpc".into(), vec![upstream]).with_h2c(true);
    table.add("", "/", PathType::Prefix, Arc::new(backend));
    let (_publish, config) = watch::channel(Arc::new(Config {
        table,
        ..Config::default()
    }));
    let addr = serve(config).await;
    // a gRPC client: HTTP/2 by prior knowledge on the plain port
    let stream = TcpStream::connect(addr).await.unwrap();
    let (mut sender, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
            .await
            .unwrap();
    tokio::spawn(conn);
    let req = Request::post("http://grpc.local/pkg.Service/Call")
        .header("te", "trailers")
        .body(Full::new(Bytes::from_static(b"call")))
        .unwrap();
    let response = sender.send_request(req).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let body = response.into_body().collect().await.unwrap();
    let trailers = body.trailers().cloned().expect("the upstream's trailers");
    assert_eq!(trailers["grpc-status"], "0");
    assert_eq!(body.to_bytes(), "HTTP/2.0 te=trailers");
}

/// An upstream written byte by byte, for the framings hyper's server never produces:
/// `/chunked` answers a chunked body, `/old` an HTTP/1.0 body that ends when it closes, and
/// `/once` a keep-alive answer after which it closes the connection anyway. Counts
/// connections.
async fn raw_upstream() -> (SocketAddr, Arc<std::sync::atomic::AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let accepted = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = accepted.clone();
    tokio::spawn(async move {
        loop {
            let (mut stream, _) = listener.accept().await.unwrap();
            counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            tokio::spawn(async move {
                let mut seen = Vec::new();
                let mut buf = [0u8; 4096];
                loop {
                    let Some(end) = seen.windows(4).position(|w| w == b"\r\n\r\n") else {
                        match stream.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => seen.extend_from_slice(&buf[..n]),
                        }
                        continue;
                    };
                    let head = String::from_utf8(seen.drain(..end + 4).collect()).unwrap();
                    let path = head.split(' ').nth(1).unwrap();
                    let (answer, close): (&[u8], bool) = match path {
                        "/chunked" => (
                            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n\
                              5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n",
                            false,
                        ),
                        "/old" => (b"HTTP/1.0 200 OK\r\n\r\nuntil close", true),
                        _ => (b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nonce", true),
                    };
                    if stream.write_all(answer).await.is_err() || close {
                        return;
                    }
                }
            });
        }
    });
    (addr, accepted)
}

/// Reads until the connection closes or `end` has been read; the text.
async fn read_until(conn: &mut TcpStream, end: &str) -> String {
    let mut text = Vec::new();
    let mut buf = [0u8; 1024];
    while !text.ends_with(end.as_bytes()) {
        match conn.read(&mut buf).await.unwrap() {
            0 => break,
            n => text.extend_from_slice(&buf[..n]),
        }
    }
    String::from_utf8(text).unwrap()
}

#[tokio::test]
async fn chunked_close_delimited_and_closed_upstream_answers_come_through_whole() {
    let (raw, connections) = raw_upstream().await;
    let addr = serve(watch::channel(routing_to("raw", raw)).1).await;
    let mut conn = TcpStream::connect(addr).await.unwrap();

    conn.write_all(b"GET /chunked HTTP/1.1\r\nHost: a.com\r\n\r\n")
        .await
        .unwrap();
    let chunked = read_until(&mut conn, "0\r\n\r\n").await;
    assert!(chunked.starts_with("HTTP/1.1 200 OK\r\n"), "{chunked}");
    assert!(
        chunked.contains("Transfer-Encoding: chunked\r\n"),
        "{chunked}"
    );
    assert!(
        chunked.ends_with("\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"),
        "{chunked}"
    );

    // the endpoint closes each `/once` connection after answering, though it kept it alive:
    // the next request still gets its answer (on a new connection)
    for _ in 0..3 {
        let once = exchange(&mut conn, "GET /once HTTP/1.1\r\nHost: a.com\r\n\r\n").await;
        assert!(
            once.starts_with("HTTP/1.1 200") && once.ends_with("\r\n\r\nonce"),
            "{once}"
        );
    }
    // the first went over the connection `/chunked` used, the others each over a new one
    assert_eq!(connections.load(std::sync::atomic::Ordering::SeqCst), 3);

    // a body that ends when the endpoint closes ends the client's connection too
    conn.write_all(b"GET /old HTTP/1.1\r\nHost: a.com\r\n\r\n")
        .await
        .unwrap();
    let old = read_until(&mut conn, "\u{0}").await;
    assert!(old.starts_with("HTTP/1.1 200 OK\r\n"), "{old}");
    assert!(old.contains("\r\nconnection: close\r\n"), "{old}");
    assert!(old.ends_with("\r\n\r\nuntil close"), "{old}");
}

#[tokio::test]
async fn a_connection_moves_to_hyper_at_a_request_of_another_shape_and_pipelining_works() {
    let addr = serve(watch::channel(routing_to("echo", upstream("echo").await)).1).await;
    let mut conn = TcpStream::connect(addr).await.unwrap();
    // two requests in one write, answered in order
    let get = "GET / HTTP/1.1\r\nHost: a.com\r\n\r\n";
    conn.write_all(get.repeat(2).as_bytes()).await.unwrap();
    let both = read_until(&mut conn, "x-forwarded-proto: http\n").await;
    let both = if both.matches("HTTP/1.1 200").count() == 2 {
        both
    } else {
        both + &read_until(&mut conn, "x-forwarded-proto: http\n").await
    };
    assert_eq!(both.matches("HTTP/1.1 200").count(), 2, "{both}");
    // a chunked request body: hyper takes the connection from here on
    let post = "POST /echo HTTP/1.1\r\nHost: a.com\r\nTransfer-Encoding: chunked\r\n\r\n\
                2\r\nhi\r\n3\r\n th\r\n0\r\n\r\n";
    let echoed = exchange(&mut conn, post).await;
    assert!(
        echoed.starts_with("HTTP/1.1 200") && echoed.ends_with("\r\n\r\nhi th"),
        "{echoed}"
    );
    let after = exchange(&mut conn, get).await;
    assert!(after.contains("\r\n\r\necho\nhost: a.com\n"), "{after}");
    // HTTP/1.0 goes to hyper from the start
    let mut old = TcpStream::connect(addr).await.unwrap();
    old.write_all(b"GET / HTTP/1.0\r\nHost: a.com\r\n\r\n")
        .await
        .unwrap();
    let answer = read_until(&mut old, "\u{0}").await;
    assert!(
        answer.starts_with("HTTP/1.0 200") && answer.contains("\r\n\r\necho\n"),
        "{answer}"
    );
}
