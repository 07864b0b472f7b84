//! Requests for the HTTP fuzzer: the corpus's seeds, and the mutations turning one into hostile
//! input (a request line, headers, framing, body, and raw bytes).

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use fastrand::Rng;

/// One HTTP/1.1 request before it is written: each part can be mutated on its own.
#[derive(Debug, Clone)]
pub struct Req {
    pub method: Vec<u8>,
    pub target: Vec<u8>,
    pub version: Vec<u8>,
    pub headers: Vec<(Vec<u8>, Vec<u8>)>,
    pub body: Vec<u8>,
    pub framing: Framing,
    /// Bytes written after the request, as a second request smuggled behind it.
    pub tail: Vec<u8>,
    /// Write the body in this many pieces with `pause` between them (a slow body).
    pub pieces: usize,
    pub pause: Duration,
    /// Shut the connection's writing half once everything is written (the client gives up).
    pub hang_up: bool,
}

/// How the body's length is told.
#[derive(Debug, Clone)]
pub enum Framing {
    /// A correct `Content-Length` (omitted for an empty body).
    Length,
    /// `Transfer-Encoding: chunked`, correctly chunked.
    Chunked,
    /// Both headers, the body chunked: the classic request-smuggling ambiguity.
    Both,
    /// Two `Content-Length` headers that disagree.
    Twice,
    /// This literal `Content-Length` value, whatever the body is.
    Declared(String),
}

impl Req {
    /// A seed from the corpus: a request line, headers, an empty line and a body, with `{name}`
    /// standing for a fresh object name. Line ends may be `\n`; the wire gets `\r\n`.
    pub fn parse_seed(text: &str, name: &str) -> Result<Req> {
        let text = text.replace("{name}", name);
        let (head, body) = text.split_once("\n\n").unwrap_or((text.as_str(), ""));
        let mut lines = head.lines();
        let line = lines.next().context("an empty seed")?;
        let mut parts = line.splitn(3, ' ');
        let (Some(method), Some(target), Some(version)) =
            (parts.next(), parts.next(), parts.next())
        else {
            bail!("seed request line {line:?} is not `METHOD TARGET VERSION`");
        };
        let headers = lines
            .map(|l| {
                let (k, v) = l.split_once(':').context("a seed header without `:`")?;
                Ok((k.trim().as_bytes().to_vec(), v.trim().as_bytes().to_vec()))
            })
            .collect::<Result<_>>()?;
        Ok(Req {
            method: method.as_bytes().to_vec(),
            target: target.as_bytes().to_vec(),
            version: version.as_bytes().to_vec(),
            headers,
            body: body.trim_end_matches('\n').as_bytes().to_vec(),
            framing: Framing::Length,
            tail: Vec::new(),
            pieces: 1,
            pause: Duration::ZERO,
            hang_up: false,
        })
    }

    /// Reads every `*.http` seed of `dir`, in name order.
    pub fn load_corpus(dir: &Path) -> Result<Vec<(String, String)>> {
        let mut seeds = Vec::new();
        for entry in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
            let path = entry?.path();
            if path.extension().is_some_and(|e| e == "http") {
                let text = std::fs::read_to_string(&path)
                    .with_context(|| format!("reading {}", path.display()))?;
                let name = path.file_stem().unwrap_or_default().to_string_lossy();
                Req::parse_seed(&text, "x").with_context(|| format!("seed {}", path.display()))?;
                seeds.push((name.into_owned(), text));
            }
        }
        seeds.sort();
        if seeds.is_empty() {
            bail!("no *.http seeds in {}", dir.display());
        }
        Ok(seeds)
    }

    pub fn set_header(&mut self, name: &str, value: impl Into<Vec<u8>>) {
        self.headers
            .retain(|(k, _)| !k.eq_ignore_ascii_case(name.as_bytes()));
        self.headers.push((name.as_bytes().to_vec(), value.into()));
    }

    /// The request as written, split where a slow body pauses.
    pub fn wire(&self) -> Vec<Vec<u8>> {
        let mut head = [
            &self.method[..],
            b" ",
            &self.target,
            b" ",
            &self.version,
            b"\r\n",
        ]
        .concat();
        for (k, v) in &self.headers {
            head.extend_from_slice(&[&k[..], b": ", v, b"\r\n"].concat());
        }
        let chunked = || {
            let mut out = Vec::new();
            for chunk in self.body.chunks(4096) {
                out.extend_from_slice(format!("{:x}\r\n", chunk.len()).as_bytes());
                out.extend_from_slice(chunk);
                out.extend_from_slice(b"\r\n");
            }
            out.extend_from_slice(b"0\r\n\r\n");
            out
        };
        let length = |head: &mut Vec<u8>, n: &str| {
            head.extend_from_slice(format!("Content-Length: {n}\r\n").as_bytes());
        };
        let body = match &self.framing {
            Framing::Length => {
                if !self.body.is_empty() {
                    length(&mut head, &self.body.len().to_string());
                }
                self.body.clone()
            }
            Framing::Chunked => {
                head.extend_from_slice(b"Transfer-Encoding: chunked\r\n");
                chunked()
            }
            Framing::Both => {
                length(&mut head, &self.body.len().to_string());
                head.extend_from_slice(b"Transfer-Encoding: chunked\r\n");
                chunked()
            }
            Framing::Twice => {
                length(&mut head, &self.body.len().to_string());
                length(&mut head, &(self.body.len() / 2).to_string());
                self.body.clone()
            }
            Framing::Declared(n) => {
                length(&mut head, n);
                self.body.clone()
            }
        };
        head.extend_from_slice(b"\r\n");
        let pieces = self.pieces.max(1);
        let step = body.len().div_ceil(pieces).max(1);
        let mut out = vec![head];
        out.extend(body.chunks(step).map(<[u8]>::to_vec));
        if let Some(last) = out.last_mut() {
            last.extend_from_slice(&self.tail);
        }
        out
    }
}

/// Mutates `req` with one to three of the mutations below, then sometimes flips raw bytes.
pub fn mutate(req: &mut Req, rng: &mut Rng) {
    for _ in 0..rng.usize(1..=3) {
        let m = MUTATIONS[rng.usize(..MUTATIONS.len())];
        m(req, rng);
    }
}

/// Flips, inserts or deletes up to eight bytes of the written request.
pub fn corrupt(wire: &mut [Vec<u8>], rng: &mut Rng) {
    for _ in 0..rng.usize(1..=8) {
        let part = rng.usize(..wire.len());
        let bytes = &mut wire[part];
        if bytes.is_empty() {
            continue;
        }
        let at = rng.usize(..bytes.len());
        match rng.u8(..3) {
            0 => bytes[at] = rng.u8(..),
            1 => {
                bytes.remove(at);
            }
            _ => bytes.insert(at, pick(rng, b"{}[]:,\"'\\\r\n\0 %/.\xff")),
        }
    }
}

type Mutation = fn(&mut Req, &mut Rng);

const MUTATIONS: &[Mutation] = &[
    odd_path,
    hostile_name,
    hostile_query,
    method,
    version,
    target_form,
    content_type,
    accept,
    junk_header,
    huge_header,
    many_headers,
    credentials,
    framing,
    smuggle,
    slow_body,
    hang_up,
    deep_body,
    huge_body,
    invalid_utf8,
    yaml_bomb,
    odd_numbers,
    duplicate_keys,
    random_json,
    protobuf_body,
    empty_body,
];

fn pick<T: Copy>(rng: &mut Rng, from: &[T]) -> T {
    from[rng.usize(..from.len())]
}

/// Replaces the target with a path the API server's router must refuse or serve oddly.
fn odd_path(req: &mut Req, rng: &mut Rng) {
    let paths = [
        "/apis/g/v/watch",
        "/api/v1/watch",
        "/api/v1/watch/namespaces/default/configmaps?timeoutSeconds=1",
        "/apis/apps/v1/namespaces//deployments",
        "/api/v1/namespaces/default/pods/x/status/extra",
        "/api/v1/namespaces/default/pods/fuzz-1/exec?command=true&stdout=1",
        "/api/v1/namespaces/default/pods/fuzz-1/attach",
        "/api/v1/namespaces/default/pods/fuzz-1/portforward?ports=80",
        "/api/v1/namespaces/default/pods/fuzz-1/proxy/a/b",
        "/api/v1/namespaces/default/services/nowhere/proxy/",
        "/api/v1/nodes/nowhere/proxy/stats/summary",
        "/api/v1/namespaces/default/pods/fuzz-1/ephemeralcontainers",
        "/apis/metrics.k8s.io/v1beta1/pods",
        "/apis/nonexistent.example.com/v1/things",
        "/apis/apps",
        "/apis/apps/v1",
        "/api",
        "/healthz/etcd",
        "/readyz?verbose&exclude=x",
        "/livez/ping",
        "/metrics",
        "/debug/pprof/",
        "/logs/../../etc/passwd",
        "/openid/v1/jwks",
        "/.well-known/openid-configuration",
        "/",
        "",
    ];
    req.target = pick(rng, &paths).as_bytes().to_vec();
}

/// Replaces the target's last path segment (the object's name, in most seeds).
fn hostile_name(req: &mut Req, rng: &mut Rng) {
    let long = "a".repeat(rng.usize(250..400));
    let names = [
        "..",
        ".",
        "%2e%2e",
        "..%2f..%2fetc%2fpasswd",
        "a%2fb",
        "%00",
        "a%00b",
        "UPPER",
        "-a",
        "a..b",
        long.as_str(),
        "%c3%bc",
        "%ff%fe",
        "a%20b",
        "*",
        "$(id)",
        "a;b",
        "%",
        "%zz",
        "a\\b",
    ];
    let name = pick(rng, &names).as_bytes();
    let (path, query) = split_query(&req.target);
    let cut = path.iter().rposition(|&b| b == b'/').map_or(0, |i| i + 1);
    req.target = [&path[..cut], name, query].concat();
}

fn split_query(target: &[u8]) -> (&[u8], &[u8]) {
    match target.iter().position(|&b| b == b'?') {
        Some(i) => target.split_at(i),
        None => (target, &[]),
    }
}

fn hostile_query(req: &mut Req, rng: &mut Rng) {
    let long = format!("fieldManager={}", "m".repeat(rng.usize(100..300)));
    let queries = [
        "limit=-1",
        "limit=abc",
        "limit=99999999999999999999",
        "continue=garbage",
        "continue=eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6LTF9",
        "fieldSelector=%zz",
        "fieldSelector=metadata.name%3D%3D",
        "labelSelector=a%20in%20(",
        "labelSelector=!!",
        "watch=true&timeoutSeconds=1",
        "watch=maybe",
        "resourceVersion=abc",
        "resourceVersion=1&resourceVersionMatch=Exact",
        "resourceVersionMatch=Junk",
        "dryRun=Junk",
        "dryRun=All",
        long.as_str(),
        "timeout=0s",
        "timeout=-1s",
        "timeout=garbage",
        "timeoutSeconds=-5",
        "propagationPolicy=Sideways",
        "gracePeriodSeconds=-1",
        "fieldValidation=Loud",
        "force=notabool",
        "pretty=1&pretty=0",
        "allowWatchBookmarks=true&sendInitialEvents=true&watch=1&timeoutSeconds=1",
        "%=%",
        "&&&",
    ];
    let q = pick(rng, &queries);
    let (path, _) = split_query(&req.target);
    req.target = [path, b"?", q.as_bytes()].concat();
}

fn method(req: &mut Req, rng: &mut Rng) {
    let long = "A".repeat(200);
    let methods = [
        "GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS", "TRACE", "CONNECT", "PRI",
        "get", "G\u{1}T", "BREW", &long,
    ];
    req.method = pick(rng, &methods).as_bytes().to_vec();
}

fn version(req: &mut Req, rng: &mut Rng) {
    let versions = [
        "HTTP/1.0",
        "HTTP/0.9",
        "HTTP/2.0",
        "HTTP/1.2",
        "HTTP/1.1 x",
        "http/1.1",
        "",
        "HTTP/1",
    ];
    req.version = pick(rng, &versions).as_bytes().to_vec();
}

fn target_form(req: &mut Req, rng: &mut Rng) {
    let target = std::mem::take(&mut req.target);
    req.target = match rng.u8(..6) {
        0 => [b"https://elsewhere.example".as_slice(), &target].concat(),
        1 => b"*".to_vec(),
        2 => [b"/".as_slice(), &target].concat(),
        3 => target
            .iter()
            .flat_map(|&b| if b == b'/' { b"/./".to_vec() } else { vec![b] })
            .collect(),
        4 => [&target[..], b"/../../../../../etc/passwd"].concat(),
        _ => [&target[..], "/ü\u{202e}".as_bytes()].concat(),
    };
}

const CONTENT_TYPES: &[&str] = &[
    "application/json",
    "application/yaml",
    "application/vnd.kubernetes.protobuf",
    "application/json-patch+json",
    "application/merge-patch+json",
    "application/strategic-merge-patch+json",
    "application/apply-patch+yaml",
    "application/apply-patch+cbor",
    "application/cbor",
    "text/plain",
    "multipart/form-data; boundary=x",
    "application/json; charset=utf-16",
    "application/json;;;",
    "",
    "*/*",
];

fn content_type(req: &mut Req, rng: &mut Rng) {
    req.set_header("Content-Type", pick(rng, CONTENT_TYPES));
}

fn accept(req: &mut Req, rng: &mut Rng) {
    let accepts = [
        "application/json",
        "application/yaml",
        "application/vnd.kubernetes.protobuf",
        "application/json;as=Table;g=meta.k8s.io;v=v1",
        "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1",
        "application/json;as=Table;g=meta.k8s.io;v=v9",
        "application/vnd.kubernetes.protobuf;stream=watch",
        "text/html",
        "*/*;q=0",
        ";;;,,,",
    ];
    req.set_header("Accept", pick(rng, &accepts));
    if rng.bool() {
        req.set_header(
            "Accept-Encoding",
            pick(rng, &["gzip", "br", "gzip;q=x", "*"]),
        );
    }
}

fn junk_header(req: &mut Req, rng: &mut Rng) {
    let (name, value): (&[u8], &[u8]) = pick(
        rng,
        &[
            (b"X-\x01Bad", b"v"),
            (b"X-Bad", b"\xff\xfe"),
            (b"X-Bad", b"a\rb"),
            (b"X-Folded", b"a\r\n b"),
            (b"", b"empty name"),
            (b"X Bad", b"space in name"),
            (b"Content-Encoding", b"gzip"),
            (b"Expect", b"100-continue"),
            (b"Expect", b"teapot"),
            (b"Host", b""),
            (b"Connection", b"Upgrade"),
            (b"Upgrade", b"websocket"),
            (b"Upgrade", b"h2c"),
            (b"X-Remote-User", b"system:admin"),
            (b"X-Remote-Group", b"system:masters"),
            (b"Audit-Id", b"\x7f"),
            (b"X-Request-Id", b"%00"),
        ],
    );
    req.headers.push((name.to_vec(), value.to_vec()));
}

fn huge_header(req: &mut Req, rng: &mut Rng) {
    let len = pick(rng, &[8 << 10, 70 << 10, 1 << 20, 2 << 20]);
    req.headers.push((b"X-Huge".to_vec(), vec![b'h'; len]));
}

fn many_headers(req: &mut Req, rng: &mut Rng) {
    for i in 0..rng.usize(90..600) {
        req.headers
            .push((format!("X-Many-{i}").into_bytes(), b"v".to_vec()));
    }
}

fn credentials(req: &mut Req, rng: &mut Rng) {
    let (name, value): (&str, &[u8]) = pick(
        rng,
        &[
            ("Authorization", b"Bearer garbage"),
            ("Authorization", b"Bearer "),
            (
                "Authorization",
                b"Bearer eyJhbGciOiJub25lIn0.eyJzdWIiOiJ4In0.",
            ),
            ("Authorization", b"Basic YWRtaW46YWRtaW4="),
            ("Authorization", b"Negotiate \xff"),
            ("Impersonate-User", b"someone"),
            ("Impersonate-User", b"system:serviceaccount:kube-system:"),
            ("Impersonate-Group", b"system:masters"),
            ("Impersonate-Uid", b"\x01"),
            ("Impersonate-Extra-%ZZ", b"x"),
            ("Impersonate-Extra-scopes", b"a"),
        ],
    );
    req.headers.push((name.as_bytes().to_vec(), value.to_vec()));
}

fn framing(req: &mut Req, rng: &mut Rng) {
    let declared = |n: usize| Framing::Declared(n.to_string());
    req.framing = match rng.u8(..8) {
        0 => Framing::Chunked,
        1 => Framing::Both,
        2 => Framing::Twice,
        3 => Framing::Declared("-1".into()),
        4 => Framing::Declared("99999999999999999999".into()),
        5 => Framing::Declared(format!(" {}", req.body.len())),
        6 => declared(req.body.len().saturating_sub(rng.usize(1..10))),
        _ => {
            // more than is sent: the client then gives up
            req.hang_up = true;
            declared(req.body.len() + rng.usize(1..100))
        }
    };
}

fn smuggle(req: &mut Req, rng: &mut Rng) {
    let tails: [&[u8]; 4] = [
        b"GET /api/v1/namespaces/kube-system/secrets HTTP/1.1\r\nHost: x\r\n\r\n",
        b"POST /api/v1/namespaces/default/configmaps HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\n{}",
        b"0\r\n\r\nGET /version HTTP/1.1\r\nHost: x\r\n\r\n",
        b"\r\n\r\n\r\n",
    ];
    req.tail = pick(rng, &tails).to_vec();
}

fn slow_body(req: &mut Req, rng: &mut Rng) {
    req.pieces = rng.usize(2..6);
    req.pause = Duration::from_millis(rng.u64(50..400));
}

fn hang_up(req: &mut Req, rng: &mut Rng) {
    req.hang_up = true;
    let cut = rng.usize(..=req.body.len());
    req.body.truncate(cut);
}

fn deep_body(req: &mut Req, rng: &mut Rng) {
    let depth = pick(rng, &[100, 1_000, 100_000]);
    req.body = match rng.u8(..3) {
        0 => format!("{}1{}", "[".repeat(depth), "]".repeat(depth)),
        1 => format!(r#"{}1{}"#, r#"{"a":"#.repeat(depth), "}".repeat(depth)),
        _ => format!("a:\n{}", " - ".repeat(depth.min(5_000))),
    }
    .into_bytes();
}

fn huge_body(req: &mut Req, rng: &mut Rng) {
    let len = pick(
        rng,
        &[(1 << 20) + 1, (3 << 20) - 4096, (3 << 20) + 1, 8 << 20],
    );
    req.body = format!(
        r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"huge"}},"data":{{"k":"{}"}}}}"#,
        "x".repeat(len)
    )
    .into_bytes();
}

fn invalid_utf8(req: &mut Req, rng: &mut Rng) {
    for _ in 0..rng.usize(1..4) {
        let at = rng.usize(..=req.body.len());
        let bytes: &[u8] = pick(
            rng,
            &[b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\\ud800", b"\0"],
        );
        req.body.splice(at..at, bytes.iter().copied());
    }
}

fn yaml_bomb(req: &mut Req, _: &mut Rng) {
    let mut bomb = String::from("a: &a [x,x,x,x,x,x,x,x,x]\n");
    for (prev, name) in "abcdefgh".chars().zip("bcdefghi".chars()) {
        let refs = vec![format!("*{prev}"); 9].join(",");
        bomb.push_str(&format!("{name}: &{name} [{refs}]\n"));
    }
    req.body = bomb.into_bytes();
    req.set_header("Content-Type", "application/yaml");
}

fn odd_numbers(req: &mut Req, rng: &mut Rng) {
    let odd = pick(
        rng,
        &[
            "1e999",
            "-0",
            "18446744073709551616",
            "1.5",
            "-9223372036854775809",
            "NaN",
            "0x10",
        ],
    );
    let body = String::from_utf8_lossy(&req.body).into_owned();
    // every number in the body, and every string value that follows a colon
    let mut out = String::with_capacity(body.len());
    let mut chars = body.chars().peekable();
    while let Some(c) = chars.next() {
        if c.is_ascii_digit() {
            while chars.peek().is_some_and(char::is_ascii_digit) {
                chars.next();
            }
            out.push_str(odd);
        } else {
            out.push(c);
        }
    }
    req.body = out.into_bytes();
}

fn duplicate_keys(req: &mut Req, _: &mut Rng) {
    if req.body.first() == Some(&b'{') {
        let prefix = br#"{"metadata":{"name":"dup","name":"dup2"},"kind":"Secret","#;
        req.body.splice(0..1, prefix.iter().copied());
    }
}

fn random_json(req: &mut Req, rng: &mut Rng) {
    fn value(rng: &mut Rng, depth: u32) -> serde_json::Value {
        use serde_json::Value;
        match rng.u8(..if depth == 0 { 4 } else { 6 }) {
            0 => Value::Null,
            1 => Value::Bool(rng.bool()),
            2 => Value::from(rng.i64(..)),
            3 => Value::String(pick(rng, &["", "v1", "Pod", "a b", "ü", "\u{0}", "Exists"]).into()),
            4 => (0..rng.usize(..4)).map(|_| value(rng, depth - 1)).collect(),
            _ => (0..rng.usize(..5))
                .map(|_| {
                    let key = pick(
                        rng,
                        &[
                            "apiVersion",
                            "kind",
                            "metadata",
                            "name",
                            "spec",
                            "data",
                            "labels",
                            "containers",
                            "op",
                            "path",
                            "value",
                            "$patch",
                            "$retainKeys",
                            "$setElementOrder/containers",
                            "finalizers",
                            "managedFields",
                        ],
                    );
                    (key.to_string(), value(rng, depth - 1))
                })
                .collect(),
        }
    }
    req.body = serde_json::to_vec(&value(rng, 4)).expect("a Value serializes");
}

fn protobuf_body(req: &mut Req, rng: &mut Rng) {
    let mut body = b"k8s\0".to_vec();
    body.extend((0..rng.usize(..256)).map(|_| rng.u8(..)));
    if rng.bool() {
        // an Unknown whose TypeMeta says Pod, then a raw field of random length
        body.extend_from_slice(b"\x0a\x0b\x0a\x02v1\x12\x03Pod\x12");
        body.push(rng.u8(..));
    }
    req.body = body;
    req.set_header("Content-Type", "application/vnd.kubernetes.protobuf");
}

fn empty_body(req: &mut Req, _: &mut Rng) {
    req.body.clear();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_is_written_with_crlf_and_its_length() {
        let seed =
            "POST /api/v1/namespaces/default/configmaps HTTP/1.1\nHost: h\n\n{\"a\":\"{name}\"}\n";
        let req = Req::parse_seed(seed, "n1").unwrap();
        let wire = req.wire().concat();
        assert_eq!(
            String::from_utf8(wire).unwrap(),
            "POST /api/v1/namespaces/default/configmaps HTTP/1.1\r\nHost: h\r\n\
             Content-Length: 10\r\n\r\n{\"a\":\"n1\"}"
        );
    }

    #[test]
    fn chunked_and_slow_bodies_split_as_told() {
        let mut req = Req::parse_seed("PUT /x HTTP/1.1\n\n0123456789", "n").unwrap();
        req.framing = Framing::Chunked;
        req.pieces = 3;
        let wire = req.wire();
        assert_eq!(wire.len(), 4, "head then three pieces");
        assert_eq!(wire[1..].concat(), b"a\r\n0123456789\r\n0\r\n\r\n");
    }

    #[test]
    fn mutations_are_replayable_from_the_seed() {
        let seed = Req::parse_seed(
            "GET /api/v1/namespaces/default/pods/p HTTP/1.1\nHost: h\n\n",
            "n",
        )
        .unwrap();
        let run = |s: u64| {
            let mut req = seed.clone();
            let mut rng = Rng::with_seed(s);
            mutate(&mut req, &mut rng);
            let mut wire = req.wire();
            corrupt(&mut wire, &mut rng);
            wire
        };
        assert_eq!(run(7), run(7));
        assert!(
            (0..20).any(|s| run(s) != run(0)),
            "seeds give different requests"
        );
    }
}
