//! One hostile request on a fresh TLS connection, and what came back: raw bytes out, raw bytes
//! in, the answers' heads parsed with `httparse` (hyper's client refuses to send most of what
//! the fuzzer writes).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use rustls_pki_types::ServerName;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

/// How long the fuzzer waits for the server's next bytes before it gives up on a first answer
/// (one the server may rightly withhold, e.g. for a body shorter than its length).
const READ_IDLE: Duration = Duration::from_secs(2);
/// How long it waits, once an answer has come, for more (to smuggled or pipelined requests)
/// before it ends a connection the server keeps alive. Those follow the first answer at once,
/// so a short wait suffices; waiting [`READ_IDLE`] here was most of a run's time.
const MORE_IDLE: Duration = Duration::from_millis(250);

/// A parsed answer.
#[derive(Debug)]
pub struct Answer {
    pub code: u16,
    /// The body is a `Status` object.
    pub status_body: bool,
    /// The API server's handler answered (it sets `Audit-Id` on everything it answers), rather
    /// than the HTTP layer refusing an unparsable request.
    pub from_handler: bool,
    pub body_start: String,
}

/// Everything the server sent back for one connection.
#[derive(Debug, Default)]
pub struct Outcome {
    pub answers: Vec<Answer>,
    /// No complete answer before the server fell silent for [`READ_IDLE`].
    pub silent: bool,
    /// Bytes that are not an HTTP answer, where one should start.
    pub garbled: Option<String>,
}

pub struct Target {
    pub addr: SocketAddr,
    pub name: ServerName<'static>,
}

/// Writes `pieces` on a new connection (pausing `pause` between them, shutting the writing half
/// after the last if `hang_up`) and reads answers until the server closes or falls silent. The
/// first answer has no body if the request is a `head` one.
pub async fn exchange(
    target: &Target,
    tls: &TlsConnector,
    pieces: &[Vec<u8>],
    pause: Duration,
    hang_up: bool,
    head: bool,
) -> Result<Outcome> {
    let tcp = TcpStream::connect(target.addr).await?;
    tcp.set_nodelay(true)?;
    let mut stream = tls.connect(target.name.clone(), tcp).await?;
    for (i, piece) in pieces.iter().enumerate() {
        if i > 0 && !pause.is_zero() {
            tokio::time::sleep(pause).await;
        }
        // the server may answer and close before everything is written
        if stream.write_all(piece).await.is_err() || stream.flush().await.is_err() {
            break;
        }
    }
    if hang_up {
        let _ = stream.shutdown().await;
    }
    let mut outcome = Outcome::default();
    let mut buf = Vec::new();
    let mut chunk = vec![0u8; 64 << 10];
    loop {
        let idle = if outcome.answers.is_empty() {
            READ_IDLE
        } else {
            MORE_IDLE
        };
        match tokio::time::timeout(idle, stream.read(&mut chunk)).await {
            Err(_) => {
                outcome.silent = outcome.answers.is_empty();
                break;
            }
            Ok(Ok(0) | Err(_)) => break,
            Ok(Ok(n)) => buf.extend_from_slice(&chunk[..n]),
        }
        loop {
            match parse(&buf, head && outcome.answers.is_empty()) {
                Ok(Some((answer, used))) => {
                    buf.drain(..used);
                    outcome.answers.extend(answer);
                }
                Ok(None) => break,
                Err(e) => {
                    let start = String::from_utf8_lossy(&buf[..buf.len().min(200)]);
                    outcome.garbled = Some(format!("{e}: {start:?}"));
                    return Ok(outcome);
                }
            }
        }
    }
    // the server closed mid-answer: what arrived still tells the code
    if let Ok(Some((answer, _, _))) = parse_head(&buf) {
        outcome.answers.push(answer);
    }
    Ok(outcome)
}

/// A whole answer at the start of `buf` and its length (`None` for an interim `1xx`), or
/// `None` while more bytes are needed. An answer to HEAD has no body, whatever its headers say.
fn parse(buf: &[u8], to_head: bool) -> Result<Option<(Option<Answer>, usize)>> {
    let Some((mut answer, head_len, length)) = parse_head(buf)? else {
        return Ok(None);
    };
    if (100..200).contains(&answer.code) {
        return Ok(Some((None, head_len)));
    }
    let body = &buf[head_len..];
    let end = match length {
        _ if to_head => 0,
        Length::Bytes(n) if body.len() >= n => n,
        Length::Chunked => match find(body, b"0\r\n\r\n") {
            Some(i) if i == 0 || body[..i].ends_with(b"\r\n") => i + 5,
            _ => return Ok(None),
        },
        _ => return Ok(None),
    };
    let body = &body[..end];
    answer.status_body = is_status(body);
    answer.body_start = String::from_utf8_lossy(&body[..body.len().min(300)]).into_owned();
    Ok(Some((Some(answer), head_len + end)))
}

enum Length {
    Bytes(usize),
    Chunked,
    /// Until the connection closes.
    Close,
}

fn parse_head(buf: &[u8]) -> Result<Option<(Answer, usize, Length)>> {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut resp = httparse::Response::new(&mut headers);
    let httparse::Status::Complete(head_len) = resp.parse(buf)? else {
        return Ok(None);
    };
    let header = |name: &str| {
        resp.headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case(name))
            .map(|h| String::from_utf8_lossy(h.value).into_owned())
    };
    let length = if header("transfer-encoding").is_some_and(|v| v.contains("chunked")) {
        Length::Chunked
    } else if let Some(n) = header("content-length").and_then(|v| v.trim().parse().ok()) {
        Length::Bytes(n)
    } else if resp.code.is_some_and(|c| c == 204 || c == 304) {
        Length::Bytes(0)
    } else {
        Length::Close
    };
    let body = &buf[head_len..];
    let answer = Answer {
        code: resp.code.unwrap_or(0),
        status_body: is_status(body),
        from_handler: header("audit-id").is_some(),
        body_start: String::from_utf8_lossy(&body[..body.len().min(300)]).into_owned(),
    };
    Ok(Some((answer, head_len, length)))
}

/// A `Status` in any of the API server's encodings: JSON, YAML, or protobuf (the envelope's
/// `TypeMeta.kind`).
fn is_status(body: &[u8]) -> bool {
    find(body, br#""kind":"Status""#).is_some()
        || body.starts_with(b"kind: Status\n")
        || find(body, b"\nkind: Status\n").is_some()
        || (body.starts_with(b"k8s\0") && find(body, b"\x12\x06Status").is_some())
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// A slowloris connection: `dribble` sends a request head a byte a second after the TLS
/// handshake, otherwise the connection never even starts TLS. Returns once the server closed
/// it, or never.
pub async fn slowloris(target: Arc<Target>, tls: TlsConnector, dribble: bool) -> Result<()> {
    let mut tcp = TcpStream::connect(target.addr).await?;
    if !dribble {
        let mut byte = [0u8; 1];
        while tcp.read(&mut byte).await? != 0 {}
        return Ok(());
    }
    let mut stream = tls.connect(target.name.clone(), tcp).await?;
    let head = b"GET /api/v1/namespaces HTTP/1.1\r\nHost: x\r\nX-Slow: ";
    stream.write_all(&head[..4]).await?;
    stream.flush().await?;
    loop {
        let mut byte = [0u8; 1];
        tokio::select! {
            read = stream.read(&mut byte) => match read {
                Ok(0) | Err(_) => return Ok(()),
                // an answer (408 or 400) is fine; the close must follow
                Ok(_) => {}
            },
            () = tokio::time::sleep(Duration::from_secs(1)) => {
                if stream.write_all(b"a").await.is_err() || stream.flush().await.is_err() {
                    return Ok(());
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_framed_by_length_and_by_chunks() {
        let one = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 400 Bad Request\r\nAudit-Id: a\r\n\
                    Content-Length: 17\r\n\r\n{\"kind\":\"Status\"}";
        let (first, used) = parse(one, false).unwrap().unwrap();
        assert!(first.is_none(), "interim answers are skipped");
        let (second, rest) = parse(&one[used..], false).unwrap().unwrap();
        let second = second.unwrap();
        assert_eq!(
            (second.code, second.status_body, second.from_handler),
            (400, true, true)
        );
        assert_eq!(used + rest, one.len());

        let chunked =
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\nHTTP";
        let (answer, used) = parse(chunked, false).unwrap().unwrap();
        assert_eq!(answer.unwrap().code, 200);
        assert_eq!(&chunked[used..], b"HTTP");
        let short = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nab";
        assert!(parse(short, false).unwrap().is_none());
        assert_eq!(
            parse(short, true).unwrap().unwrap().1,
            short.len() - 2,
            "HEAD: no body"
        );
    }
}
