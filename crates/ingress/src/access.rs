//! The access log: a line per request on stderr, in nginx's `combined` format followed by the
//! request's host, the time until the response's head, the backend and the endpoint:
//!
//! ```text
//! 10.0.0.7 - - [04/Dec/2026:07:39:54 +0000] "GET /a?b=1 HTTP/1.1" 200 - "-" "curl/8.5.0" "shop.example" 0.002 [default/web:80] 10.42.0.9:8080
//! ```
//!
//! The line is written when the response's head is, so the body's size is `-`; a request no
//! backend took has `-` for the backend and endpoint. Quotes, backslashes and bytes outside
//! printable ASCII in the request line and headers are written as `\xHH`, as nginx does.
//!
//! The log is on while tracing enables the target [`TARGET`] at `INFO` (`RUST_LOG=access=off`
//! turns it off). Lines are gathered per thread and written in batches of up to [`BATCH`]
//! bytes, at the latest [`FLUSH_EVERY`] after they were gathered, so that a request costs no
//! system call of its own (nginx's `access_log … buffer=16k flush=100ms`); [`flush`] writes
//! out what is gathered, for an orderly exit. Lines gathered when the process is killed are
//! lost, as with nginx's buffer.
//!
//! Written by hand rather than as a tracing event: formatting an event's fields, level and
//! timestamp through tracing-subscriber cost the proxy more CPU per request than routing it.

use std::cell::RefCell;
use std::io::Write;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, Once};
use std::time::{Duration, SystemTime};

use http::Version;

/// The tracing target that turns the access log on and off.
pub const TARGET: &str = "access";
/// Bytes gathered by a thread before they are written at once.
pub const BATCH: usize = 16 * 1024;
/// The longest a gathered line waits to be written.
pub const FLUSH_EVERY: Duration = Duration::from_millis(100);

/// Whether requests are logged.
pub fn enabled() -> bool {
    tracing::enabled!(target: TARGET, tracing::Level::INFO)
}

/// One request, as logged.
pub struct Entry<'a> {
    /// The client's address, written out.
    pub client: &'a [u8],
    pub method: &'a [u8],
    /// The request's target: its path and query, or the whole URI.
    pub target: &'a [u8],
    pub version: Version,
    pub status: u16,
    pub referer: Option<&'a [u8]>,
    pub user_agent: Option<&'a [u8]>,
    pub host: &'a [u8],
    /// From the request's arrival to the response's head.
    pub duration: Duration,
    /// The backend (`namespace/service:port`) routed to, if any.
    pub backend: Option<&'a str>,
    /// The endpoint that answered, if any.
    pub upstream: Option<SocketAddr>,
}

impl Entry<'_> {
    /// Adds the entry's line to this thread's batch, writing the batch out when full.
    pub fn log(&self) {
        LOCAL.with(|local| {
            let mut lines = local
                .lines
                .lock()
                .expect("the access log's lock is never poisoned");
            self.write(&mut lines, &local.clock);
            if lines.len() >= BATCH {
                write_out(&mut lines);
            }
        });
    }

    fn write(&self, out: &mut Vec<u8>, clock: &Clock) {
        out.extend_from_slice(self.client);
        out.extend_from_slice(b" - - [");
        clock.write_now(out);
        out.extend_from_slice(b"] \"");
        escaped(out, self.method);
        out.push(b' ');
        escaped(out, self.target);
        out.push(b' ');
        out.extend_from_slice(version(self.version).as_bytes());
        out.extend_from_slice(b"\" ");
        number(out, self.status.into());
        out.extend_from_slice(b" - \"");
        header(out, self.referer);
        out.extend_from_slice(b"\" \"");
        header(out, self.user_agent);
        out.extend_from_slice(b"\" \"");
        escaped(out, self.host);
        let ms = self.duration.as_millis();
        out.extend_from_slice(b"\" ");
        number(out, (ms / 1000) as u64);
        let thousandths = (ms % 1000) as u64;
        out.extend_from_slice(&[
            b'.',
            b'0' + (thousandths / 100) as u8,
            b'0' + (thousandths / 10 % 10) as u8,
            b'0' + (thousandths % 10) as u8,
        ]);
        out.extend_from_slice(b" [");
        escaped(out, self.backend.unwrap_or("-").as_bytes());
        out.extend_from_slice(b"] ");
        match self.upstream {
            Some(upstream) => {
                let _ = write!(out, "{upstream}");
            }
            None => out.push(b'-'),
        }
        out.push(b'\n');
    }
}

/// Writes out every thread's gathered lines.
pub fn flush() {
    for batch in batches().lock().expect("never poisoned").iter() {
        write_out(&mut batch.lock().expect("never poisoned"));
    }
}

type Batch = Arc<Mutex<Vec<u8>>>;

/// A thread's batch (also listed in [`batches`], for the flusher) and its clock.
struct Local {
    lines: Batch,
    clock: Clock,
}

thread_local! {
    static LOCAL: Local = {
        let lines = Batch::default();
        batches().lock().expect("never poisoned").push(lines.clone());
        start_flusher();
        Local { lines, clock: Clock::default() }
    };
}

/// Every thread's batch.
fn batches() -> &'static Mutex<Vec<Batch>> {
    static BATCHES: Mutex<Vec<Batch>> = Mutex::new(Vec::new());
    &BATCHES
}

/// Starts, once, the thread that writes every batch out each [`FLUSH_EVERY`] and forgets
/// those of threads that have ended.
fn start_flusher() {
    static STARTED: Once = Once::new();
    STARTED.call_once(|| {
        let started = std::thread::Builder::new()
            .name("access-log".into())
            .spawn(|| {
                loop {
                    std::thread::sleep(FLUSH_EVERY);
                    flush();
                    batches()
                        .lock()
                        .expect("never poisoned")
                        .retain(|batch| Arc::strong_count(batch) > 1);
                }
            });
        if let Err(e) = started {
            // lines are then written when a batch fills, and at exit
            tracing::error!(error = %e, "starting the access log's writer thread");
        }
    });
}

fn write_out(lines: &mut Vec<u8>) {
    if !lines.is_empty() {
        let _ = std::io::stderr().write_all(lines);
        lines.clear();
    }
}

/// The time in nginx's `$time_local` form (in UTC), formatted once a second.
#[derive(Default)]
struct Clock(RefCell<(u64, String)>);

impl Clock {
    fn write_now(&self, out: &mut Vec<u8>) {
        let now = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs();
        let mut cached = self.0.borrow_mut();
        if cached.0 != now || cached.1.is_empty() {
            let formatted = jiff::Timestamp::from_second(now as i64)
                .map(|t| t.strftime("%d/%b/%Y:%H:%M:%S +0000").to_string())
                .unwrap_or_else(|_| "-".into());
            *cached = (now, formatted);
        }
        out.extend_from_slice(cached.1.as_bytes());
    }
}

/// `n` in decimal, without `fmt`'s machinery (the line's other numbers are written so).
fn number(out: &mut Vec<u8>, n: u64) {
    out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
}

fn version(version: Version) -> &'static str {
    match version {
        Version::HTTP_09 => "HTTP/0.9",
        Version::HTTP_10 => "HTTP/1.0",
        Version::HTTP_11 => "HTTP/1.1",
        Version::HTTP_2 => "HTTP/2.0",
        Version::HTTP_3 => "HTTP/3.0",
        _ => "HTTP/?",
    }
}

fn header(out: &mut Vec<u8>, value: Option<&[u8]>) {
    match value {
        Some(value) => escaped(out, value),
        None => out.push(b'-'),
    }
}

/// `bytes` with `"`, `\` and what is not printable ASCII as `\xHH`.
fn escaped(out: &mut Vec<u8>, bytes: &[u8]) {
    let escape = |b: &u8| *b == b'"' || *b == b'\\' || !(0x20..0x7f).contains(b);
    let mut rest = bytes;
    while let Some(at) = rest.iter().position(escape) {
        out.extend_from_slice(&rest[..at]);
        let _ = write!(out, "\\x{:02X}", rest[at]);
        rest = &rest[at + 1..];
    }
    out.extend_from_slice(rest);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(entry: &Entry) -> String {
        let mut out = Vec::new();
        entry.write(&mut out, &Clock::default());
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn a_line_is_combined_format_with_host_time_backend_and_endpoint() {
        let entry = Entry {
            client: b"10.0.0.7",
            method: b"GET",
            target: b"/a?b=1",
            version: Version::HTTP_11,
            status: 200,
            referer: None,
            user_agent: Some(b"curl/8.5.0"),
            host: b"shop.example",
            duration: Duration::from_micros(2_345),
            backend: Some("default/web:80"),
            upstream: Some("10.42.0.9:8080".parse().unwrap()),
        };
        let line = line(&entry);
        let (start, rest) = line.split_once(" [").unwrap();
        assert_eq!(start, "10.0.0.7 - -");
        let (time, rest) = rest.split_once("] ").unwrap();
        assert!(
            jiff::fmt::strtime::parse("%d/%b/%Y:%H:%M:%S %z", time).is_ok(),
            "{time}"
        );
        assert_eq!(
            rest,
            "\"GET /a?b=1 HTTP/1.1\" 200 - \"-\" \"curl/8.5.0\" \"shop.example\" 0.002 \
             [default/web:80] 10.42.0.9:8080\n"
        );
    }

    #[test]
    fn quotes_and_unprintable_bytes_are_escaped_and_missing_parts_are_dashes() {
        let entry = Entry {
            client: b"::1",
            method: b"POST",
            target: b"/x",
            version: Version::HTTP_2,
            status: 404,
            referer: None,
            user_agent: Some(b"evil\" \\ \xff"),
            host: b"a.com",
            duration: Duration::from_millis(1_500),
            backend: None,
            upstream: None,
        };
        let line = line(&entry);
        let rest = line.split_once("] ").unwrap().1;
        assert_eq!(
            rest,
            "\"POST /x HTTP/2.0\" 404 - \"-\" \"evil\\x22 \\x5C \\xFF\" \"a.com\" 1.500 [-] -\n"
        );
    }
}
