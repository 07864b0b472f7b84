//! Container logs as upstream's kubelet serves them (`kuberuntime/logs`): the CRI log files a
//! container's output is written to (`2016-10-06T00:17:09.669794202Z stdout F text`, `P` for a
//! partial line continued by the next entry), selected by `tailLines`, `sinceSeconds` /
//! `sinceTime` and `limitBytes`, optionally prefixed with their timestamps, and followed while
//! the container runs. Parsing and selection have no I/O; [`stream`] reads the files: unlike
//! upstream's kubelet, which reads only the live file, the rotated files too (see
//! [`crate::log_rotation`]), so that a rotation does not hide lines still on disk.

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use bytes::Bytes;
use jiff::Timestamp;
use tokio::io::{AsyncReadExt, AsyncSeekExt};
use tokio::sync::mpsc;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Error {
    #[error("log line {line:?}: {why}")]
    Parse { line: String, why: &'static str },
    #[error("query parameter {name}={value:?}: {why}")]
    Query {
        name: &'static str,
        value: String,
        why: &'static str,
    },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// One entry of a CRI log file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogLine<'a> {
    pub timestamp: Timestamp,
    /// `stdout` or `stderr`.
    pub stream: &'a str,
    /// The entry continues on the next one (tag `P`): no newline after it.
    pub partial: bool,
    pub text: &'a [u8],
}

/// Parses one line of a CRI log file, without its trailing newline.
pub fn parse_line(line: &[u8]) -> Result<LogLine<'_>> {
    let err = |why| Error::Parse {
        line: String::from_utf8_lossy(line).into_owned(),
        why,
    };
    let mut fields = line.splitn(4, |b| *b == b' ');
    let time = fields.next().ok_or_else(|| err("no timestamp"))?;
    let stream = fields.next().ok_or_else(|| err("no stream"))?;
    let tags = fields.next().ok_or_else(|| err("no tag"))?;
    // a line with empty text may end right after its tag
    let text = fields.next().unwrap_or_default();
    let timestamp = std::str::from_utf8(time)
        .ok()
        .and_then(|t| t.parse::<Timestamp>().ok())
        .ok_or_else(|| err("the timestamp is not RFC 3339"))?;
    let stream = match stream {
        b"stdout" => "stdout",
        b"stderr" => "stderr",
        _ => return Err(err("the stream is neither stdout nor stderr")),
    };
    // tags are `:`-separated; the first says whether the line is partial
    let partial = match tags.split(|b| *b == b':').next() {
        Some(b"P") => true,
        Some(b"F") => false,
        _ => return Err(err("the tag is neither P nor F")),
    };
    Ok(LogLine {
        timestamp,
        stream,
        partial,
        text,
    })
}

/// What a `containerLogs` request asks for (upstream's `PodLogOptions` as the kubelet reads
/// them).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LogOptions {
    pub follow: bool,
    pub previous: bool,
    pub timestamps: bool,
    /// Only the last N lines (counted in the file, as upstream does).
    pub tail_lines: Option<u64>,
    /// Only lines at or after this time (`sinceTime`, or now minus `sinceSeconds`).
    pub since: Option<Timestamp>,
    /// Stop after this many bytes.
    pub limit_bytes: Option<u64>,
}

fn flag(query: &HashMap<String, String>, name: &str) -> bool {
    query
        .get(name)
        .is_some_and(|v| v == "1" || v.eq_ignore_ascii_case("true"))
}

fn number(query: &HashMap<String, String>, name: &'static str) -> Result<Option<i64>> {
    query
        .get(name)
        .map(|v| {
            v.parse::<i64>().map_err(|_| Error::Query {
                name,
                value: v.clone(),
                why: "not an integer",
            })
        })
        .transpose()
}

impl LogOptions {
    /// Reads the options off the query, as upstream validates them (`sinceSeconds` and
    /// `limitBytes` positive, `tailLines` not negative, at most one of the two `since`s).
    pub fn from_query(query: &HashMap<String, String>, now: Timestamp) -> Result<LogOptions> {
        let bad = |name, value: i64, why| Error::Query {
            name,
            value: value.to_string(),
            why,
        };
        let tail_lines = match number(query, "tailLines")? {
            Some(n) if n < 0 => return Err(bad("tailLines", n, "must be non-negative")),
            n => n.map(|n| n as u64),
        };
        let limit_bytes = match number(query, "limitBytes")? {
            Some(n) if n < 1 => return Err(bad("limitBytes", n, "must be greater than 0")),
            n => n.map(|n| n as u64),
        };
        let since_seconds = match number(query, "sinceSeconds")? {
            Some(n) if n < 1 => return Err(bad("sinceSeconds", n, "must be greater than 0")),
            n => n,
        };
        let since_time = query
            .get("sinceTime")
            .map(|v| {
                v.parse::<Timestamp>().map_err(|_| Error::Query {
                    name: "sinceTime",
                    value: v.clone(),
                    why: "not an RFC 3339 time",
                })
            })
            .transpose()?;
        let since = match (since_seconds, since_time) {
            (Some(s), None) => Some(now - jiff::SignedDuration::from_secs(s)),
            (None, t) => t,
            (Some(s), Some(_)) => {
                return Err(bad(
                    "sinceSeconds",
                    s,
                    "at most one of sinceTime or sinceSeconds may be specified",
                ));
            }
        };
        Ok(LogOptions {
            follow: flag(query, "follow"),
            previous: flag(query, "previous"),
            timestamps: flag(query, "timestamps"),
            tail_lines,
            since,
            limit_bytes,
        })
    }
}

/// Where the last `n` lines of `data` start (upstream's `FindTailLineStartIndex`): a final
/// newline does not start an empty line.
pub fn tail_start(data: &[u8], n: u64) -> usize {
    if n == 0 {
        return data.len();
    }
    let body = data.strip_suffix(b"\n").unwrap_or(data);
    let mut seen = 0;
    for (i, b) in body.iter().enumerate().rev() {
        if *b == b'\n' {
            seen += 1;
            if seen == n {
                return i + 1;
            }
        }
    }
    0
}

/// Turns log entries into what the client sees: their text (with the timestamp before each
/// new line when asked), lines older than `since` left out, and nothing past `limit_bytes`.
#[derive(Debug)]
pub struct LogWriter {
    timestamps: bool,
    since: Option<Timestamp>,
    /// Bytes still allowed; `None` for no limit.
    remaining: Option<u64>,
    /// The last entry written ended its line (the next one gets a timestamp).
    at_line_start: bool,
}

impl LogWriter {
    pub fn new(options: &LogOptions) -> LogWriter {
        LogWriter {
            timestamps: options.timestamps,
            since: options.since,
            remaining: options.limit_bytes,
            at_line_start: true,
        }
    }

    /// Whether `limit_bytes` has been reached.
    pub fn done(&self) -> bool {
        self.remaining == Some(0)
    }

    /// Appends the output for the complete lines in `chunk` (each ending in a newline) to
    /// `out`. Lines that do not parse are skipped, as upstream logs and skips them.
    pub fn write(&mut self, chunk: &[u8], out: &mut Vec<u8>) {
        for raw in chunk.split_inclusive(|b| *b == b'\n') {
            if self.done() {
                return;
            }
            let Ok(line) = parse_line(raw.strip_suffix(b"\n").unwrap_or(raw)) else {
                tracing::debug!(line = %String::from_utf8_lossy(raw), "skipping an unreadable log line");
                continue;
            };
            if self.since.is_some_and(|since| line.timestamp < since) {
                continue;
            }
            let start = out.len();
            if self.timestamps && self.at_line_start {
                out.extend_from_slice(format_timestamp(line.timestamp).as_bytes());
                out.push(b' ');
            }
            out.extend_from_slice(line.text);
            if !line.partial {
                out.push(b'\n');
            }
            self.at_line_start = !line.partial;
            if let Some(left) = &mut self.remaining {
                let written = (out.len() - start) as u64;
                if written >= *left {
                    out.truncate(start + *left as usize);
                    *left = 0;
                } else {
                    *left -= written;
                }
            }
        }
    }
}

/// Go's `time.RFC3339Nano` in UTC: fractional seconds without trailing zeros.
pub fn format_timestamp(t: Timestamp) -> String {
    t.strftime("%Y-%m-%dT%H:%M:%S%.fZ").to_string()
}

/// How often a followed log file is read again for new lines.
const FOLLOW_POLL: Duration = Duration::from_millis(100);

/// Which file a handle or path is (a rotation puts a new file at the log's path).
fn file_id(m: &std::fs::Metadata) -> (u64, u64) {
    (m.dev(), m.ino())
}

/// How many lines `data` holds (a last line without its newline counts).
fn count_lines(data: &[u8]) -> u64 {
    let newlines = data.iter().filter(|b| **b == b'\n').count() as u64;
    newlines + u64::from(data.last().is_some_and(|b| *b != b'\n'))
}

/// The rotated files (oldest first) that the output starts in, read, the first cut to where
/// the selection starts: all of them, or with `tail_lines` only as many as the tail reaches
/// into once the live file's `live_lines` are counted. `live` is left out (a rotation right
/// after it was opened lists it as rotated).
fn rotated_selection(
    path: &Path,
    live: (u64, u64),
    tail_lines: Option<u64>,
    live_lines: u64,
) -> std::io::Result<Vec<Vec<u8>>> {
    let mut files = crate::log_rotation::all_logs(path).map_err(std::io::Error::other)?;
    files.pop();
    let mut needed = tail_lines.map(|n| n.saturating_sub(live_lines));
    let mut picked = Vec::new();
    for file in files.iter().rev() {
        if needed == Some(0) {
            break;
        }
        if std::fs::metadata(file).is_ok_and(|m| file_id(&m) == live) {
            continue;
        }
        let mut data = match crate::log_rotation::read_log_file(file) {
            Ok(d) => d,
            // pruned by a rotation meanwhile
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        };
        if data.last().is_some_and(|b| *b != b'\n') {
            data.push(b'\n');
        }
        if let Some(n) = &mut needed {
            let lines = count_lines(&data);
            if lines >= *n {
                data.drain(..tail_start(&data, *n));
                *n = 0;
            } else {
                *n -= lines;
            }
        }
        picked.push(data);
    }
    picked.reverse();
    Ok(picked)
}

/// Reads a container's log and sends its selected output to `tx`: its rotated files (see
/// [`crate::log_rotation`]) and the live file, oldest first, from the tail, once; then, when
/// following, new lines as they are written, across rotations (the file the runtime reopens
/// at `path` is read once the old one is done), until `running` says the container has stopped
/// and nothing is left to read. Ends when the client goes away.
pub async fn stream<F, Fut>(
    path: PathBuf,
    options: LogOptions,
    tx: mpsc::Sender<Bytes>,
    mut running: F,
) -> std::io::Result<()>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let mut file = tokio::fs::File::open(&path).await?;
    let mut live = file_id(&file.metadata().await?);
    let mut data = Vec::new();
    file.read_to_end(&mut data).await?;
    let rotated = rotated_selection(&path, live, options.tail_lines, count_lines(&data))?;
    // the tail starts in the live file only if the rotated files have nothing to give
    let start = match options.tail_lines {
        Some(n) if rotated.is_empty() => tail_start(&data, n),
        _ => 0,
    };
    let mut writer = LogWriter::new(&options);
    for chunk in rotated {
        let mut out = Vec::new();
        writer.write(&chunk, &mut out);
        if !out.is_empty() && tx.send(Bytes::from(out)).await.is_err() {
            return Ok(());
        }
    }
    // bytes of a line not yet ended by a newline (still being written)
    let mut pending = data.split_off(start);
    loop {
        let complete = pending
            .iter()
            .rposition(|b| *b == b'\n')
            .map_or(0, |i| i + 1);
        let rest = pending.split_off(complete);
        let mut out = Vec::new();
        writer.write(&pending, &mut out);
        pending = rest;
        if !out.is_empty() && tx.send(Bytes::from(out)).await.is_err() {
            return Ok(());
        }
        if !options.follow || writer.done() {
            return Ok(());
        }
        // the container's state is read before the file, so lines written just before it
        // stopped are still read once more below
        let was_running = running().await;
        let mut more = Vec::new();
        file.read_to_end(&mut more).await?;
        if more.is_empty() {
            if !was_running {
                return Ok(());
            }
            tokio::select! {
                () = tokio::time::sleep(FOLLOW_POLL) => {}
                () = tx.closed() => return Ok(()),
            }
            match tokio::fs::metadata(&path).await {
                // rotated: what reached the old file before the runtime reopened, then the
                // new file from its start
                Ok(m) if file_id(&m) != live => {
                    file.read_to_end(&mut more).await?;
                    file = tokio::fs::File::open(&path).await?;
                    live = file_id(&file.metadata().await?);
                }
                // truncated in place: start over
                Ok(m) if m.len() < file.stream_position().await? => {
                    file.seek(std::io::SeekFrom::Start(0)).await?;
                }
                Ok(_) => {}
                // renamed away, not reopened yet
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
        pending.extend_from_slice(&more);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOG: &[u8] = b"2016-10-06T00:17:09.669794202Z stdout F first\n\
2016-10-06T00:17:10.000000000Z stderr P sec\n\
2016-10-06T00:17:10.113242941Z stderr F ond\n\
2016-10-06T00:17:11Z stdout F \n\
2016-10-06T00:17:12.5Z stdout F last\n";

    fn output(options: LogOptions, data: &[u8]) -> String {
        let start = options.tail_lines.map_or(0, |n| tail_start(data, n));
        let mut out = Vec::new();
        LogWriter::new(&options).write(&data[start..], &mut out);
        String::from_utf8(out).unwrap()
    }

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    #[test]
    fn a_full_line_has_its_time_stream_and_text() {
        let line = parse_line(b"2016-10-06T00:17:09.669794202Z stdout F hello world").unwrap();
        assert_eq!(line.timestamp, ts("2016-10-06T00:17:09.669794202Z"));
        assert_eq!(line.stream, "stdout");
        assert!(!line.partial);
        assert_eq!(line.text, b"hello world");
    }

    #[test]
    fn a_partial_line_is_marked_and_an_empty_line_has_no_text() {
        let line = parse_line(b"2016-10-06T00:17:09Z stderr P part").unwrap();
        assert!(line.partial);
        assert_eq!(line.stream, "stderr");
        assert_eq!(
            parse_line(b"2016-10-06T00:17:09Z stdout F").unwrap().text,
            b""
        );
        assert!(parse_line(b"not a log line").is_err());
        assert!(parse_line(b"2016-10-06T00:17:09Z stdin F x").is_err());
    }

    #[test]
    fn partial_lines_are_joined_and_timestamps_prefix_only_new_lines() {
        assert_eq!(
            output(LogOptions::default(), LOG),
            "first\nsecond\n\nlast\n"
        );
        let stamped = LogOptions {
            timestamps: true,
            ..Default::default()
        };
        assert_eq!(
            output(stamped, LOG),
            "2016-10-06T00:17:09.669794202Z first\n\
2016-10-06T00:17:10Z second\n\
2016-10-06T00:17:11Z \n\
2016-10-06T00:17:12.5Z last\n"
        );
    }

    #[test]
    fn tail_counts_lines_of_the_file_from_the_end() {
        let tail = |n| LogOptions {
            tail_lines: Some(n),
            ..Default::default()
        };
        assert_eq!(output(tail(1), LOG), "last\n");
        assert_eq!(output(tail(2), LOG), "\nlast\n");
        assert_eq!(output(tail(0), LOG), "");
        assert_eq!(output(tail(100), LOG), "first\nsecond\n\nlast\n");
        assert_eq!(tail_start(b"a\nb", 1), 2);
    }

    #[test]
    fn since_leaves_out_older_lines_and_limit_bytes_cuts_the_output() {
        let since = LogOptions {
            since: Some(ts("2016-10-06T00:17:11Z")),
            ..Default::default()
        };
        assert_eq!(output(since, LOG), "\nlast\n");
        let limited = LogOptions {
            limit_bytes: Some(8),
            ..Default::default()
        };
        assert_eq!(output(limited, LOG), "first\nse");
    }

    #[test]
    fn query_parameters_are_read_and_validated_as_upstream() {
        let now = ts("2024-01-01T00:01:00Z");
        let q = |pairs: &[(&str, &str)]| -> HashMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let o = LogOptions::from_query(
            &q(&[
                ("follow", "true"),
                ("tailLines", "5"),
                ("sinceSeconds", "60"),
                ("limitBytes", "10"),
                ("timestamps", "1"),
            ]),
            now,
        )
        .unwrap();
        assert!(o.follow && o.timestamps && !o.previous);
        assert_eq!(o.tail_lines, Some(5));
        assert_eq!(o.limit_bytes, Some(10));
        assert_eq!(o.since, Some(ts("2024-01-01T00:00:00Z")));
        let t = LogOptions::from_query(&q(&[("sinceTime", "2023-12-31T23:00:00Z")]), now);
        assert_eq!(t.unwrap().since, Some(ts("2023-12-31T23:00:00Z")));
        for bad in [
            q(&[("tailLines", "-1")]),
            q(&[("limitBytes", "0")]),
            q(&[("sinceSeconds", "0")]),
            q(&[("tailLines", "x")]),
            q(&[("sinceTime", "yesterday")]),
            q(&[("sinceSeconds", "5"), ("sinceTime", "2023-12-31T23:00:00Z")]),
        ] {
            assert!(LogOptions::from_query(&bad, now).is_err(), "{bad:?}");
        }
    }

    #[tokio::test]
    async fn a_stopped_containers_log_is_read_once_and_the_stream_ends() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("0.log");
        std::fs::write(&path, LOG).unwrap();
        let (tx, mut rx) = mpsc::channel(8);
        let options = LogOptions {
            follow: true,
            tail_lines: Some(1),
            ..Default::default()
        };
        stream(path, options, tx, || async { false }).await.unwrap();
        assert_eq!(rx.recv().await.unwrap(), Bytes::from_static(b"last\n"));
        assert_eq!(rx.recv().await, None);
    }

    fn entry(second: u32, text: &str) -> String {
        format!("2024-01-01T00:00:{second:02}Z stdout F {text}\n")
    }

    /// A container log rotated twice (the older rotation compressed): lines 1-2, 3-4, 5-6.
    fn rotated_log(dir: &Path) -> PathBuf {
        use std::io::Write;
        let log = dir.join("0.log");
        let mut gz = flate2::write::GzEncoder::new(
            std::fs::File::create(dir.join("0.log.20240101-000002.gz")).unwrap(),
            flate2::Compression::default(),
        );
        gz.write_all((entry(1, "one") + &entry(2, "two")).as_bytes())
            .unwrap();
        gz.finish().unwrap();
        std::fs::write(
            dir.join("0.log.20240101-000004"),
            entry(3, "three") + &entry(4, "four"),
        )
        .unwrap();
        std::fs::write(&log, entry(5, "five") + &entry(6, "six")).unwrap();
        log
    }

    async fn read_all(path: PathBuf, options: LogOptions) -> String {
        let (tx, mut rx) = mpsc::channel(64);
        stream(path, options, tx, || async { false }).await.unwrap();
        let mut out = Vec::new();
        while let Some(chunk) = rx.recv().await {
            out.extend_from_slice(&chunk);
        }
        String::from_utf8(out).unwrap()
    }

    #[tokio::test]
    async fn rotated_files_are_read_before_the_live_one_for_full_logs_tail_and_since() {
        let dir = tempfile::tempdir().unwrap();
        let log = rotated_log(dir.path());
        assert_eq!(
            read_all(log.clone(), LogOptions::default()).await,
            "one\ntwo\nthree\nfour\nfive\nsix\n"
        );
        let tail = |n| LogOptions {
            tail_lines: Some(n),
            ..Default::default()
        };
        assert_eq!(read_all(log.clone(), tail(2)).await, "five\nsix\n");
        assert_eq!(read_all(log.clone(), tail(3)).await, "four\nfive\nsix\n");
        assert_eq!(
            read_all(log.clone(), tail(5)).await,
            "two\nthree\nfour\nfive\nsix\n"
        );
        assert_eq!(read_all(log.clone(), tail(0)).await, "");
        let since = LogOptions {
            since: Some(ts("2024-01-01T00:00:02Z")),
            limit_bytes: Some(14),
            ..Default::default()
        };
        assert_eq!(read_all(log, since).await, "two\nthree\nfour");
    }

    #[tokio::test]
    async fn a_followed_log_goes_on_in_the_file_reopened_after_a_rotation() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("0.log");
        std::fs::write(&log, entry(1, "before")).unwrap();
        let (tx, mut rx) = mpsc::channel(64);
        let running = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
        let options = LogOptions {
            follow: true,
            ..Default::default()
        };
        let flag = running.clone();
        let reader = tokio::spawn(stream(log.clone(), options, tx, move || {
            let flag = flag.clone();
            async move { flag.load(std::sync::atomic::Ordering::SeqCst) }
        }));
        assert_eq!(rx.recv().await.unwrap(), Bytes::from_static(b"before\n"));
        // the runtime writes a last line to the old file, then the kubelet renames it, and the
        // runtime reopens the path
        let mut old = std::fs::OpenOptions::new().append(true).open(&log).unwrap();
        std::fs::rename(&log, dir.path().join("0.log.20240101-000001")).unwrap();
        std::io::Write::write_all(&mut old, entry(2, "late").as_bytes()).unwrap();
        std::fs::write(&log, entry(3, "after")).unwrap();
        let mut seen = String::new();
        while !seen.contains("after") {
            seen += std::str::from_utf8(&rx.recv().await.unwrap()).unwrap();
        }
        assert_eq!(seen, "late\nafter\n");
        running.store(false, std::sync::atomic::Ordering::SeqCst);
        reader.await.unwrap().unwrap();
        assert_eq!(rx.recv().await, None);
    }
}
