//! `skiff fuzz http`: hostile HTTP against a `skiff apiserver` child.
//!
//! Every seed of the corpus (`fuzz/http/*.http`, kept in the repository) is sent once as it is,
//! then `--requests` mutations of them ([`request`]): hostile names and queries, broken request
//! lines, junk, huge and numerous headers, forged credentials, ambiguous framing and smuggled
//! requests, slow and abandoned bodies, deep, huge, invalid-UTF-8 and YAML-bomb bodies, random
//! JSON and protobuf, and raw byte flips. Each goes on its own TLS connection, mostly with the
//! admin's client certificate (so the handlers, not authorization, see the input), sometimes
//! anonymously. Meanwhile `--slow` slowloris connections are held open.
//!
//! A violation is: a 5xx answer; bytes that are not an HTTP answer; a 4xx from the API server's handlers whose body is not a
//! `Status` (except to HEAD, and the OpenAPI documents' bare 404 and 406, as upstream's); a panic on the server's stderr; the server exiting; the server's RSS growing by
//! more than [`RSS_BOUND_MB`]; a slowloris connection the server has not closed
//! [`SLOW_GRACE`] after its read-header timeout. Request `i` is the mutation of
//! `Rng::with_seed(seed + i)`, so a violation is replayed with the same `--seed` and
//! `--requests`; each violating request's bytes are also written to `--findings`.
//!
//! Prints a progress line on stderr every [`PROGRESS_EVERY`], then one JSON object (answers by
//! code, violations) and ends with `N violations`; exits 1 if N > 0.

mod request;
mod wire;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use fastrand::Rng;
use futures::StreamExt as _;
use kube::client::ConfigExt as _;
use parking_lot::Mutex;
use rustls_pki_types::ServerName;
use serde_json::json;
use tokio_rustls::TlsConnector;

use crate::commands::bench::api::{ServerChild, proc_status_kb};
use request::Req;
use wire::{Outcome, Target};

/// What to fuzz.
#[derive(Debug, clap::Subcommand)]
pub enum FuzzCommand {
    /// Hostile HTTP requests against a `skiff apiserver` started for the run.
    Http(HttpFuzzArgs),
}

#[derive(Debug, clap::Args)]
pub struct HttpFuzzArgs {
    /// Mutated requests to send (after each seed once).
    #[arg(long, default_value_t = 100_000)]
    pub requests: usize,
    /// Seed of the mutations: the same seed sends the same requests.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Connections open at once (each request has its own).
    #[arg(long, default_value_t = 32)]
    pub connections: usize,
    /// Slowloris connections held open meanwhile: half never start TLS, half dribble a
    /// request head a byte a second.
    #[arg(long, default_value_t = 64)]
    pub slow: usize,
    /// The seed requests [default: the repository's `fuzz/http`].
    #[arg(long)]
    pub corpus: Option<PathBuf>,
    /// Where the bytes of each violating request are written [default: a `findings`
    /// directory in the run's temporary data dir, printed].
    #[arg(long)]
    pub findings: Option<PathBuf>,
    /// Instead of fuzzing, send the bytes of this file (a finding) once, as admin, and print
    /// the answers.
    #[arg(long, value_name = "FILE")]
    pub replay: Option<PathBuf>,
}

/// How much the server's RSS may grow over the run.
const RSS_BOUND_MB: u64 = 512;
/// The API server's read-header timeout, and how much later a slowloris connection must be
/// closed.
const READ_HEADER_TIMEOUT: Duration = Duration::from_secs(32);
const SLOW_GRACE: Duration = Duration::from_secs(8);
/// How often the run says how far it is.
const PROGRESS_EVERY: Duration = Duration::from_secs(30);

pub async fn run(cmd: FuzzCommand) -> Result<()> {
    match cmd {
        FuzzCommand::Http(args) => http(args).await,
    }
}

/// Answers and violations so far.
#[derive(Default)]
struct Tally {
    by_code: BTreeMap<u16, u64>,
    /// 4xx answers without a `Status` body where upstream's have none either: from the HTTP
    /// layer (a request hyper could not parse), to HEAD, and from the OpenAPI documents.
    bare_4xx: u64,
    silent: u64,
    closed_unanswered: u64,
    connect_failures: u64,
    violations: Vec<String>,
}

async fn http(args: HttpFuzzArgs) -> Result<()> {
    let corpus = args
        .corpus
        .clone()
        .unwrap_or_else(|| PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../fuzz/http")));
    let seeds = Req::load_corpus(&corpus)?;
    let dir = tempfile::Builder::new().prefix("skiff-fuzz-").tempdir()?;
    let findings = args
        .findings
        .clone()
        .unwrap_or_else(|| dir.path().join("findings"));
    std::fs::create_dir_all(&findings)?;
    let mut server = ServerChild::start(dir.path(), None).await?;
    let config = server.config().await?;
    let url = &config.cluster_url;
    let host = url.host().context("cluster url without a host")?;
    let target = Arc::new(Target {
        addr: format!("{host}:{}", url.port_u16().unwrap_or(443)).parse()?,
        name: ServerName::try_from(host.trim_matches(|c| c == '[' || c == ']').to_string())?,
    });
    let admin = connector(&config)?;
    if let Some(file) = &args.replay {
        let bytes = std::fs::read(file).with_context(|| format!("reading {}", file.display()))?;
        let head = bytes.starts_with(b"HEAD ");
        let outcome = wire::exchange(&target, &admin, &[bytes], Duration::ZERO, false, head).await;
        server.stop().await;
        println!("{outcome:#?}");
        return Ok(());
    }
    let mut without_credentials = config.clone();
    without_credentials.auth_info = Default::default();
    let anonymous = connector(&without_credentials)?;

    let rss_start = rss_mb(server.pid);
    let rss_peak = Arc::new(AtomicU64::new(rss_start));
    let sampler = {
        let (peak, pid) = (rss_peak.clone(), server.pid);
        tokio::spawn(async move {
            loop {
                peak.fetch_max(rss_mb(pid), Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        })
    };

    let slow_started = Instant::now();
    let slow: Vec<_> = (0..args.slow)
        .map(|i| tokio::spawn(wire::slowloris(target.clone(), admin.clone(), i % 2 == 1)))
        .collect();

    let tally = Arc::new(Mutex::new(Tally::default()));
    let started = Instant::now();
    let total = seeds.len() + args.requests;
    let done = Arc::new(AtomicUsize::new(0));
    let progress = {
        let (done, tally, peak) = (done.clone(), tally.clone(), rss_peak.clone());
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(PROGRESS_EVERY).await;
                let n = done.load(Ordering::Relaxed);
                let secs = started.elapsed().as_secs_f64();
                eprintln!(
                    "fuzz: {n}/{total} requests in {secs:.0} s ({:.0}/s), {} violations, server RSS peak {} MB",
                    n as f64 / secs,
                    tally.lock().violations.len(),
                    peak.load(Ordering::Relaxed),
                );
            }
        })
    };
    futures::stream::iter(0..total)
        .map(|i| {
            let (seeds, target, tally, done) = (&seeds, target.clone(), tally.clone(), &done);
            let (admin, anonymous, findings) = (&admin, &anonymous, &findings);
            async move {
                let mut rng = Rng::with_seed(args.seed.wrapping_add(i as u64));
                let (seed_name, text) = &seeds[if i < seeds.len() {
                    i
                } else {
                    rng.usize(..seeds.len())
                }];
                let mut req =
                    Req::parse_seed(text, &format!("fuzz-{i}")).expect("seeds parsed at load");
                let mut pieces = if i < seeds.len() {
                    req.wire()
                } else {
                    request::mutate(&mut req, &mut rng);
                    let mut pieces = req.wire();
                    if rng.u8(..10) < 3 {
                        request::corrupt(&mut pieces, &mut rng);
                    }
                    pieces
                };
                pieces.retain(|p| !p.is_empty());
                let tls = if rng.u8(..10) == 0 { anonymous } else { admin };
                // as written: a byte flip may have made or unmade a HEAD
                let head = pieces.first().is_some_and(|p| p.starts_with(b"HEAD "));
                let outcome =
                    wire::exchange(&target, tls, &pieces, req.pause, req.hang_up, head).await;
                let found = judge(&mut tally.lock(), i, seed_name, &req, head, outcome);
                if found {
                    let _ = std::fs::write(findings.join(format!("{i}.http")), pieces.concat());
                }
                done.fetch_add(1, Ordering::Relaxed);
            }
        })
        .buffer_unordered(args.connections.max(1))
        .collect::<()>()
        .await;
    let elapsed = started.elapsed();
    progress.abort();

    // the slowloris connections must all be closed by the read-header timeout
    let deadline = slow_started + READ_HEADER_TIMEOUT + SLOW_GRACE;
    let mut slow_open = 0;
    for task in slow {
        let left = deadline.saturating_duration_since(Instant::now());
        if !matches!(tokio::time::timeout(left, task).await, Ok(Ok(Ok(())))) {
            slow_open += 1;
        }
    }
    sampler.abort();

    let mut tally = std::mem::take(&mut *tally.lock());
    if slow_open > 0 {
        tally.violations.push(format!(
            "{slow_open} of {} slowloris connections still open {}s after they started",
            args.slow,
            (READ_HEADER_TIMEOUT + SLOW_GRACE).as_secs()
        ));
    }
    let panics = server.panics();
    if panics > 0 {
        tally
            .violations
            .push(format!("the server reported {panics} panics on its stderr"));
    }
    if let Some(status) = server.exited() {
        tally
            .violations
            .push(format!("the server exited: {status}"));
    }
    let rss_end = rss_mb(server.pid);
    let rss_peak = rss_peak.load(Ordering::Relaxed).max(rss_end);
    if rss_peak > rss_start + RSS_BOUND_MB {
        tally.violations.push(format!(
            "the server's RSS grew from {rss_start} MB to {rss_peak} MB (bound: +{RSS_BOUND_MB} MB)"
        ));
    }
    server.stop().await;

    let n = tally.violations.len();
    println!(
        "{}",
        json!({
            "bench": "fuzz-http",
            "seed": args.seed,
            "seeds": seeds.len(),
            "requests": total,
            "seconds": (elapsed.as_secs_f64() * 10.0).round() / 10.0,
            "answers_by_code": tally.by_code,
            "bare_4xx": tally.bare_4xx,
            "silent": tally.silent,
            "closed_unanswered": tally.closed_unanswered,
            "connect_failures": tally.connect_failures,
            "slowloris": args.slow,
            "rss_mb": {"start": rss_start, "peak": rss_peak, "end": rss_end},
            "violations": tally.violations.iter().take(50).collect::<Vec<_>>(),
            "findings": findings,
        })
    );
    println!("{n} violations");
    if n > 0 {
        bail!("{n} violations");
    }
    Ok(())
}

/// Records `outcome` and says whether request `i` found a violation.
fn judge(
    tally: &mut Tally,
    i: usize,
    seed: &str,
    req: &Req,
    head: bool,
    outcome: Result<Outcome>,
) -> bool {
    let outcome = match outcome {
        Ok(o) => o,
        Err(e) => {
            tally.connect_failures += 1;
            // a refused connection is the listener failing: the server is gone or overwhelmed
            if tally.connect_failures <= 3 {
                tracing::warn!(request = i, error = %e, "connecting failed");
            }
            return false;
        }
    };
    if outcome.silent {
        tally.silent += 1;
    } else if outcome.answers.is_empty() {
        tally.closed_unanswered += 1;
    }
    let mut found = false;
    if let Some(garbled) = &outcome.garbled {
        found = true;
        tally.violations.push(format!(
            "request {i} (seed {seed}): an unparsable answer: {garbled}"
        ));
    }
    for answer in &outcome.answers {
        *tally.by_code.entry(answer.code).or_default() += 1;
        let wrong = if answer.code >= 500 || answer.code < 100 {
            Some("a server error")
        } else if (400..500).contains(&answer.code) && !answer.status_body {
            // HEAD has no body; the OpenAPI documents' 404 and 406 are bare as upstream's
            let openapi = req.target.windows(9).any(|w| w == b"/openapi/");
            if answer.from_handler && !head && !openapi {
                Some("a 4xx without a Status body")
            } else {
                tally.bare_4xx += 1;
                None
            }
        } else {
            None
        };
        if let Some(wrong) = wrong {
            found = true;
            tally.violations.push(format!(
                "request {i} (seed {seed}): {wrong}: {} {}",
                answer.code, answer.body_start
            ));
        }
    }
    found
}

/// The resident set of process `pid` in MiB (0 once it is gone).
fn rss_mb(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| proc_status_kb(&s, "VmRSS"))
        .unwrap_or(0)
        / 1024
}

/// A TLS connector with the kubeconfig's trust and credentials (ALPN HTTP/1.1).
fn connector(config: &kube::Config) -> Result<TlsConnector> {
    let mut tls = config.rustls_client_config()?;
    tls.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(TlsConnector::from(Arc::new(tls)))
}
