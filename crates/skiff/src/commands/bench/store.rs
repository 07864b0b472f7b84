//! `skiff bench store`: the same workloads against the embedded store in-process, the embedded
//! store behind its etcd v3 gRPC facade (a `skiff store serve` child process), and a real etcd
//! started on loopback in the same run. Every backend fsyncs. Prints one JSON object per result.
//!
//! Both gRPC backends are driven by the same client code (`EtcdStore`, over `etcd-client`), so
//! `embedded-grpc` against `etcd` is like for like.

use std::collections::BTreeMap;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use bytes::Bytes;
use futures::StreamExt;
use hdrhistogram::Histogram;
use serde_json::json;
use skiff_store::etcd::EtcdStore;
use skiff_store::etcd_process::EtcdProcess;
use skiff_store::{EmbeddedConfig, EmbeddedStore, KeyRange, PutRequest, RangeRequest, Store};
use skiff_store::{WatchRequest, prefix_end};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// Options of `skiff bench store`.
#[derive(Debug, Clone, clap::Args)]
pub struct StoreBenchArgs {
    /// Seconds each put workload runs.
    #[arg(long, default_value_t = 5)]
    pub seconds: u64,
    /// Backends to measure (embedded, embedded-grpc, etcd).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "embedded,embedded-grpc,etcd"
    )]
    pub backends: Vec<String>,
    /// Concurrent writers for the put workloads.
    #[arg(long, value_delimiter = ',', default_value = "1,16,64")]
    pub writers: Vec<usize>,
    /// Keys in the range workload.
    #[arg(long, default_value_t = 10_000)]
    pub range_keys: usize,
    /// Client connections the gRPC backends' writers share (writer `w` uses connection
    /// `w % connections`), like etcd's own `benchmark --conns`.
    #[arg(long, default_value_t = 8)]
    pub connections: usize,
    /// Watchers in the watch-latency workload.
    #[arg(long, default_value_t = 100)]
    pub watchers: usize,
    /// Revisions of history the compaction workload writes, then compacts away under load.
    #[arg(long, default_value_t = 100_000)]
    pub history: usize,
    /// Where the stores keep their data (a fresh temporary directory by default).
    #[arg(long)]
    pub dir: Option<std::path::PathBuf>,
    /// Threads serving connections in the `skiff store serve` process behind `embedded-grpc`
    /// (its `--threads`); by default its own, one per core.
    #[arg(long)]
    pub server_threads: Option<usize>,
    /// Times the put workloads are repeated. The backends run in turn within each round, in
    /// reverse order every other round, so slow drift in the machine (or in one backend) falls
    /// on both sides of a comparison; with more than one round and both gRPC backends, a
    /// `put-ratio` line per writer count gives the median of the rounds' throughput ratios.
    #[arg(long, default_value_t = 1)]
    pub rounds: usize,
    /// Client threads driving the gRPC backends' put workloads, each a single-threaded runtime
    /// with its share of the connections and writers; 0 runs the writers as tasks on the
    /// bench's multi-threaded runtime instead (the harness before 2026-11-30).
    #[arg(long, default_value_t = 2)]
    pub client_threads: usize,
}

/// The pause between two put workloads.
const SETTLE: Duration = Duration::from_secs(2);

/// A backend under test, with the process behind it (killed on drop).
struct Backend {
    name: &'static str,
    /// One store handle per client connection (one in all for the in-process backend).
    stores: Vec<Arc<dyn Store>>,
    /// Where the gRPC backends listen.
    endpoint: Option<String>,
    _server: Option<Child>,
    _etcd: Option<EtcdProcess>,
}

pub async fn run(args: StoreBenchArgs) -> Result<()> {
    let tmp = tempfile::tempdir()?;
    let root = args.dir.clone().unwrap_or_else(|| tmp.path().to_path_buf());
    let mut backends = Vec::new();
    for name in &args.backends {
        backends.push(start(name, &root, &args).await?);
    }
    let mut ratios = Ratios::default();
    let mut first = true;
    for round in 0..args.rounds.max(1) {
        let mut order: Vec<&Backend> = backends.iter().collect();
        if round % 2 == 1 {
            order.reverse();
        }
        for &writers in &args.writers {
            for backend in &order {
                if !first {
                    // let the last workload's background work (a store's applier catching up,
                    // the kernel writing back dirty pages) finish before the next is timed
                    tokio::time::sleep(SETTLE).await;
                }
                first = false;
                let r = put_round(backend, writers, &args).await?;
                let mut extra = json!({ "writers": writers, "value_bytes": 1024 });
                if backend.endpoint.is_some() && args.client_threads > 0 {
                    extra["client_threads"] = args.client_threads.into();
                }
                if let (Some(threads), "embedded-grpc") = (args.server_threads, backend.name) {
                    extra["server_threads"] = threads.into();
                }
                if args.rounds > 1 {
                    extra["round"] = round.into();
                }
                emit("put", backend.name, extra, &r);
                ratios.record(round, writers, backend.name, &r);
            }
        }
    }
    if args.rounds > 1 {
        for line in ratios.summary() {
            println!("{line}");
        }
    }
    for backend in backends {
        let r = range_workload(&backend.stores[0], args.range_keys).await?;
        emit(
            "range",
            backend.name,
            json!({ "writers": 1, "keys": args.range_keys }),
            &r,
        );
        let (r, compact) = compact_workload(&backend.stores, args.history).await?;
        let extra = json!({
            "writers": 16,
            "revisions_compacted": compact.revisions,
            "compact_call_ms": compact.call.as_secs_f64() * 1000.0,
        });
        emit("put-during-compaction", backend.name, extra, &r);
        let r = watch_workload(&*backend.stores[0], args.watchers).await?;
        emit(
            "watch",
            backend.name,
            json!({ "writers": 1, "watchers": args.watchers }),
            &r,
        );
    }
    Ok(())
}

/// One put workload against one backend: from client threads of their own for the gRPC
/// backends (unless `--client-threads 0`), from tasks on this runtime otherwise.
async fn put_round(backend: &Backend, writers: usize, args: &StoreBenchArgs) -> Result<Measured> {
    let duration = Duration::from_secs(args.seconds);
    match &backend.endpoint {
        Some(endpoint) if args.client_threads > 0 => {
            let (conns, threads) = (args.connections, args.client_threads);
            put_workload_threaded(endpoint, conns, threads, writers, duration).await
        }
        _ => put_workload(&backend.stores, writers, duration).await,
    }
}

/// The put throughput and p99 of `embedded-grpc` and `etcd` in each round, by writer count.
#[derive(Default)]
struct Ratios {
    /// (writers, round) -> [embedded-grpc, etcd], each once measured.
    rounds: BTreeMap<(usize, usize), [Option<Side>; 2]>,
}

/// One backend's put figures in one round.
#[derive(Clone, Copy)]
struct Side {
    ops_per_sec: f64,
    p99_ms: f64,
}

impl Ratios {
    fn record(&mut self, round: usize, writers: usize, backend: &str, m: &Measured) {
        let index = match backend {
            "embedded-grpc" => 0,
            "etcd" => 1,
            _ => return,
        };
        let side = Side {
            ops_per_sec: m.ops_per_sec(),
            p99_ms: m.ms(0.99),
        };
        self.rounds.entry((writers, round)).or_default()[index] = Some(side);
    }

    /// One `put-ratio` line per writer count measured on both sides: every round's
    /// embedded-grpc/etcd throughput ratio and the median, and both sides' median p99.
    fn summary(&self) -> Vec<serde_json::Value> {
        let mut by_writers: BTreeMap<usize, Vec<[Side; 2]>> = BTreeMap::new();
        for (&(writers, _), sides) in &self.rounds {
            if let [Some(grpc), Some(etcd)] = *sides {
                by_writers.entry(writers).or_default().push([grpc, etcd]);
            }
        }
        by_writers
            .into_iter()
            .map(|(writers, pairs)| {
                let ratios: Vec<f64> = pairs
                    .iter()
                    .map(|[grpc, etcd]| grpc.ops_per_sec / etcd.ops_per_sec)
                    .collect();
                let p99 = |i: usize| median(pairs.iter().map(|pair| pair[i].p99_ms).collect());
                let round2 = |x: f64| (x * 100.0).round() / 100.0;
                json!({
                    "bench": "put-ratio",
                    "backend": "embedded-grpc/etcd",
                    "writers": writers,
                    "rounds": pairs.len(),
                    "ratios": ratios.iter().copied().map(round2).collect::<Vec<_>>(),
                    "ratio_median": round2(median(ratios)),
                    "p99_ms_median": { "embedded-grpc": p99(0), "etcd": p99(1) },
                })
            })
            .collect()
    }
}

/// The median (the mean of the middle two for an even count); `values` must not be empty.
fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    if n % 2 == 1 {
        values[n / 2]
    } else {
        (values[n / 2 - 1] + values[n / 2]) / 2.0
    }
}

/// `connections` clients of one gRPC endpoint.
async fn clients(endpoint: &str, connections: usize) -> Result<Vec<Arc<dyn Store>>> {
    let mut stores: Vec<Arc<dyn Store>> = Vec::new();
    for _ in 0..connections.max(1) {
        stores.push(Arc::new(
            EtcdStore::connect(&[endpoint], Bytes::new()).await?,
        ));
    }
    Ok(stores)
}

async fn start(name: &str, root: &std::path::Path, args: &StoreBenchArgs) -> Result<Backend> {
    let dir = root.join(name);
    let connections = args.connections;
    Ok(match name {
        "embedded" => {
            let store: Arc<dyn Store> =
                Arc::new(EmbeddedStore::open(EmbeddedConfig::new(&dir)).await?);
            Backend {
                name: "embedded",
                stores: vec![store],
                endpoint: None,
                _server: None,
                _etcd: None,
            }
        }
        "embedded-grpc" => {
            let (child, endpoint) = serve_child(&dir, args.server_threads).await?;
            let stores = clients(&endpoint, connections).await?;
            Backend {
                name: "embedded-grpc",
                stores,
                endpoint: Some(endpoint),
                _server: Some(child),
                _etcd: None,
            }
        }
        "etcd" => {
            let etcd = EtcdProcess::start()
                .await
                .context("starting etcd (Debian etcd-server)")?;
            let stores = clients(&etcd.endpoint(), connections).await?;
            Backend {
                name: "etcd",
                stores,
                endpoint: Some(etcd.endpoint()),
                _server: None,
                _etcd: Some(etcd),
            }
        }
        other => bail!("unknown backend {other:?} (expected embedded, embedded-grpc or etcd)"),
    })
}

/// Start `skiff store serve` on a free loopback port; returns the child and its endpoint.
async fn serve_child(dir: &std::path::Path, threads: Option<usize>) -> Result<(Child, String)> {
    let exe = std::env::current_exe()?;
    let mut command = Command::new(exe);
    command.args(["store", "serve", "--listen", "127.0.0.1:0", "--data-dir"]);
    command.arg(dir);
    if let Some(threads) = threads {
        command.arg("--threads").arg(threads.to_string());
    }
    let mut child = command.stdout(Stdio::piped()).kill_on_drop(true).spawn()?;
    let mut lines = BufReader::new(child.stdout.take().context("child stdout")?).lines();
    while let Some(line) = lines.next_line().await? {
        if line.contains("ready") {
            let endpoint = line
                .split_whitespace()
                .find(|w| w.starts_with("127.0.0.1:"))
                .context("ready line without an address")?
                .trim_end_matches(|c: char| !c.is_ascii_digit())
                .to_string();
            tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
            return Ok((child, endpoint));
        }
    }
    bail!("skiff store serve exited before it was ready")
}

/// Throughput and latency of one workload.
struct Measured {
    ops: u64,
    elapsed: Duration,
    latency: Histogram<u64>,
}

impl Measured {
    fn ops_per_sec(&self) -> f64 {
        self.ops as f64 / self.elapsed.as_secs_f64()
    }

    /// The latency at quantile `q`, in milliseconds.
    fn ms(&self, q: f64) -> f64 {
        self.latency.value_at_quantile(q) as f64 / 1000.0
    }
}

fn emit(bench: &str, backend: &str, extra: serde_json::Value, m: &Measured) {
    let mut line = json!({
        "bench": bench,
        "backend": backend,
        "ops": m.ops,
        "ops_per_sec": m.ops_per_sec().round(),
        "p50_ms": m.ms(0.5),
        "p99_ms": m.ms(0.99),
        "max_ms": m.latency.max() as f64 / 1000.0,
    });
    if let (Some(line), serde_json::Value::Object(extra)) = (line.as_object_mut(), extra) {
        line.extend(extra);
    }
    println!("{line}");
}

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000, 3).expect("valid histogram bounds")
}

fn micros(d: Duration) -> u64 {
    (d.as_micros() as u64).max(1)
}

/// `writers` tasks on this runtime put 1 KiB values for `duration`, each over its own 1,000
/// keys; writer `w` uses `stores[w % stores.len()]`.
async fn put_workload(
    stores: &[Arc<dyn Store>],
    writers: usize,
    duration: Duration,
) -> Result<Measured> {
    let start = Instant::now();
    let results = put_writers(stores, (0..writers).collect(), start + duration).await?;
    measured(results, start.elapsed())
}

/// The same puts from `threads` client threads, each a single-threaded runtime with its own
/// share of the `connections` and of the writers (writer `w` on thread `w % threads`). On the
/// multi-threaded runtime a request's connection task runs as soon as the request wakes it
/// (Tokio's LIFO slot) and writes that request alone, twice (HEADERS, then DATA); a
/// single-threaded runtime runs tasks in wake order, so the requests issued in one burst leave
/// in one socket write. Both gRPC backends get the same client.
async fn put_workload_threaded(
    endpoint: &str,
    connections: usize,
    threads: usize,
    writers: usize,
    duration: Duration,
) -> Result<Measured> {
    let threads = threads.clamp(1, writers.max(1));
    let ready = Arc::new(std::sync::Barrier::new(threads + 1));
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let endpoint = endpoint.to_string();
            let ready = ready.clone();
            let conns = connections.div_ceil(threads).max(1);
            let ids: Vec<usize> = (t..writers).step_by(threads).collect();
            std::thread::spawn(move || -> Result<Vec<(u64, Histogram<u64>)>> {
                let runtime = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(runtime) => runtime,
                    Err(e) => {
                        ready.wait();
                        return Err(e.into());
                    }
                };
                runtime.block_on(async {
                    let setup = async {
                        let stores = clients(&endpoint, conns).await?;
                        // connect every client before the clock starts
                        for store in &stores {
                            let warm_up = RangeRequest {
                                range: KeyRange::key("/warm-up"),
                                ..Default::default()
                            };
                            store.range(warm_up).await?;
                        }
                        anyhow::Ok(stores)
                    }
                    .await;
                    // reached even on failure, so the caller never waits for ever
                    ready.wait();
                    put_writers(&setup?, ids, Instant::now() + duration).await
                })
            })
        })
        .collect();
    let start = tokio::task::spawn_blocking({
        let ready = ready.clone();
        move || {
            ready.wait();
            Instant::now()
        }
    })
    .await?;
    let results = tokio::task::spawn_blocking(move || {
        let mut all = Vec::new();
        for handle in handles {
            let results = handle
                .join()
                .map_err(|_| anyhow::anyhow!("client thread panicked"))??;
            all.extend(results);
        }
        anyhow::Ok(all)
    })
    .await??;
    measured(results, start.elapsed())
}

/// One task per writer id, each putting until `deadline`; its count and latencies.
async fn put_writers(
    stores: &[Arc<dyn Store>],
    ids: Vec<usize>,
    deadline: Instant,
) -> Result<Vec<(u64, Histogram<u64>)>> {
    let value = Bytes::from(vec![b'x'; 1024]);
    let tasks = ids.into_iter().map(|w| {
        let value = value.clone();
        let store = stores[w % stores.len()].clone();
        tokio::spawn(async move {
            let mut latency = histogram();
            let mut i = 0u64;
            while Instant::now() < deadline {
                let key = Bytes::from(format!("/bench/put/{w}/{}", i % 1000));
                let t = Instant::now();
                let req = PutRequest {
                    key,
                    value: value.clone(),
                    ..Default::default()
                };
                store.put(req).await?;
                latency.record(micros(t.elapsed()))?;
                i += 1;
            }
            anyhow::Ok((i, latency))
        })
    });
    futures::future::try_join_all(tasks)
        .await?
        .into_iter()
        .collect()
}

fn measured(results: Vec<(u64, Histogram<u64>)>, elapsed: Duration) -> Result<Measured> {
    let mut latency = histogram();
    let mut ops = 0;
    for (n, h) in results {
        ops += n;
        latency.add(h)?;
    }
    Ok(Measured {
        ops,
        elapsed,
        latency,
    })
}

/// Put `count` values of `value_bytes` under the keys `key(0..count)`, from 64 concurrent tasks
/// spread over `stores`.
async fn load(
    stores: &[Arc<dyn Store>],
    count: usize,
    value_bytes: usize,
    key: fn(usize) -> String,
) -> Result<()> {
    const LOADERS: usize = 64;
    let value = Bytes::from(vec![b'v'; value_bytes]);
    let loaders = (0..LOADERS).map(|w| {
        let value = value.clone();
        let store = stores[w % stores.len()].clone();
        tokio::spawn(async move {
            for i in (w..count).step_by(LOADERS) {
                let req = PutRequest {
                    key: key(i).into(),
                    value: value.clone(),
                    ..Default::default()
                };
                store.put(req).await?;
            }
            anyhow::Ok(())
        })
    });
    for loader in futures::future::try_join_all(loaders).await? {
        loader?;
    }
    Ok(())
}

/// Load `keys` keys of 1 KiB, then read them all in one range, repeatedly.
async fn range_workload(store: &Arc<dyn Store>, keys: usize) -> Result<Measured> {
    load(std::slice::from_ref(store), keys, 1024, |i| {
        format!("/bench/range/{i:08}")
    })
    .await?;
    let mut latency = histogram();
    let start = Instant::now();
    let mut ops = 0;
    while ops < 10 || start.elapsed() < Duration::from_secs(3) {
        let t = Instant::now();
        let req = RangeRequest {
            range: KeyRange::prefix("/bench/range/"),
            ..Default::default()
        };
        let resp = store.range(req).await?;
        latency.record(micros(t.elapsed()))?;
        if resp.kvs.len() != keys {
            bail!("range returned {} keys, expected {keys}", resp.kvs.len());
        }
        ops += 1;
    }
    Ok(Measured {
        ops,
        elapsed: start.elapsed(),
        latency,
    })
}

/// `watchers` watch one prefix; one writer puts 1,000 keys, one every 2 ms; latency is from the
/// moment the put is issued until each watcher has the event.
async fn watch_workload(store: &dyn Store, watchers: usize) -> Result<Measured> {
    const PUTS: usize = 1000;
    let prefix = Bytes::from_static(b"/bench/watch/");
    let range = KeyRange {
        key: prefix.clone(),
        range_end: prefix_end(&prefix),
    };
    let epoch = Instant::now();
    let mut streams = Vec::new();
    for _ in 0..watchers {
        let req = WatchRequest {
            range: range.clone(),
            ..Default::default()
        };
        streams.push(store.watch(req).await?);
    }
    let receivers = streams.into_iter().map(|mut stream| async move {
        let mut latency = histogram();
        let mut seen = 0;
        while seen < PUTS {
            let batch = stream.next().await.context("watch ended early")??;
            let now = epoch.elapsed();
            for event in &batch.events {
                let sent: u64 = std::str::from_utf8(&event.kv.value)?.parse()?;
                latency.record(micros(now.saturating_sub(Duration::from_micros(sent))))?;
                seen += 1;
            }
        }
        anyhow::Ok(latency)
    });
    let writer = async {
        let start = Instant::now();
        for i in 0..PUTS {
            tokio::time::sleep_until((start + Duration::from_millis(2 * i as u64)).into()).await;
            let sent = epoch.elapsed().as_micros() as u64;
            let key = Bytes::from(format!("/bench/watch/{}", i % 100));
            let req = PutRequest {
                key,
                value: Bytes::from(sent.to_string()),
                ..Default::default()
            };
            store.put(req).await?;
        }
        anyhow::Ok(start.elapsed())
    };
    let (histograms, elapsed) = tokio::join!(futures::future::try_join_all(receivers), writer);
    let (histograms, elapsed) = (histograms?, elapsed?);
    let mut latency = histogram();
    for h in histograms {
        latency.add(h)?;
    }
    Ok(Measured {
        ops: latency.len(),
        elapsed,
        latency,
    })
}

/// What one compaction under load cost.
struct Compaction {
    revisions: i64,
    /// How long the `compact` call itself took.
    call: Duration,
}

/// Write `history` revisions over 1,000 keys, then let 16 writers put for 3 s while the whole
/// history is compacted away 0.5 s in; the latency figures are the writers', so they show how
/// much compaction stalls writes.
async fn compact_workload(
    stores: &[Arc<dyn Store>],
    history: usize,
) -> Result<(Measured, Compaction)> {
    let first = stores[0].status().await?.revision;
    load(stores, history, 256, |i| {
        format!("/bench/compact/{:04}", i % 1000)
    })
    .await?;
    let target = stores[0].status().await?.revision;
    let under_load = put_workload(stores, 16, Duration::from_secs(3));
    let compact = async {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let t = Instant::now();
        stores[0].compact(target).await?;
        anyhow::Ok(t.elapsed())
    };
    let (measured, call) = tokio::join!(under_load, compact);
    let compaction = Compaction {
        revisions: target - first,
        call: call?,
    };
    Ok((measured?, compaction))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `ops` in one second, all with the same latency (below 2 ms, which the histogram keeps
    /// exactly).
    fn one_second(ops: u64, p99_micros: u64) -> Measured {
        let mut latency = histogram();
        latency.record(p99_micros).unwrap();
        Measured {
            ops,
            elapsed: Duration::from_secs(1),
            latency,
        }
    }

    #[test]
    fn median_of_odd_and_even_counts() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0, 3.0, 2.0]), 2.5);
    }

    #[test]
    fn ratio_summary_pairs_the_backends_round_by_round() {
        let mut ratios = Ratios::default();
        ratios.record(0, 64, "embedded-grpc", &one_second(30_000, 1_000));
        ratios.record(0, 64, "etcd", &one_second(15_000, 1_200));
        ratios.record(1, 64, "etcd", &one_second(10_000, 2_000));
        ratios.record(1, 64, "embedded-grpc", &one_second(25_000, 1_600));
        ratios.record(2, 64, "embedded-grpc", &one_second(40_000, 500));
        ratios.record(0, 1, "embedded", &one_second(99_000, 1_000));
        ratios.record(0, 1, "etcd", &one_second(1_000, 1_000));
        let summary = ratios.summary();
        // round 2 has no etcd figure and writers=1 has no embedded-grpc one: neither counts
        assert_eq!(summary.len(), 1);
        let line = &summary[0];
        assert_eq!(line["bench"], "put-ratio");
        assert_eq!(line["writers"], 64);
        assert_eq!(line["rounds"], 2);
        assert_eq!(line["ratios"], json!([2.0, 2.5]));
        assert_eq!(line["ratio_median"], 2.25);
        assert_eq!(line["p99_ms_median"]["embedded-grpc"], 1.3);
        assert_eq!(line["p99_ms_median"]["etcd"], 1.6);
    }
}
