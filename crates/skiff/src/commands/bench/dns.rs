//! `skiff bench dns`: queries per second and latency of the cluster DNS on ONE core. The server
//! is the real one (`skiff dns`'s handler, hickory's UDP listener, metrics) on a current-thread
//! tokio runtime on its own thread; its records are filled directly with `--services` ClusterIP
//! Services (what the informers would put there; no API server in the loop). The load client
//! runs on the other threads: `--sockets` UDP sockets, each keeping `--outstanding` questions in
//! flight, asking A for a random Service. Prints one JSON line.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use hdrhistogram::Histogram;
use hickory_proto::op::{Message, MessageType, OpCode, Query};
use hickory_proto::rr::{Name, RecordType};
use k8s_openapi::api::core::v1::Service;
use parking_lot::RwLock;
use serde_json::json;
use skiff_dns::forward::{Forwarder, NetworkExchange};
use skiff_dns::handler::Handler;
use skiff_dns::lookup::Zone;
use skiff_dns::metrics::Metrics;
use skiff_dns::records::ClusterRecords;
use skiff_dns::server;

/// Options of `skiff bench dns`.
#[derive(Debug, Clone, clap::Args)]
pub struct DnsBenchArgs {
    /// ClusterIP Services in the records.
    #[arg(long, default_value_t = 1000)]
    pub services: usize,
    /// How long to measure (after a one-second warm-up).
    #[arg(long, default_value_t = 5)]
    pub seconds: u64,
    /// Client UDP sockets.
    #[arg(long, default_value_t = 8)]
    pub sockets: usize,
    /// Questions each socket keeps in flight.
    #[arg(long, default_value_t = 32)]
    pub outstanding: usize,
}

/// A question unanswered this long counts as lost and is replaced.
const LOST_AFTER: Duration = Duration::from_millis(500);

pub async fn run(args: DnsBenchArgs) -> Result<()> {
    let records = Arc::new(RwLock::new(ClusterRecords::default()));
    for i in 0..args.services {
        let service: Service = serde_json::from_value(json!({
            "metadata": {"namespace": "bench", "name": format!("svc-{i}")},
            "spec": {"clusterIP": format!("10.43.{}.{}", 1 + i / 250, 1 + i % 250),
                     "ports": [{"name": "http", "port": 80, "protocol": "TCP"}]},
        }))?;
        records.write().apply_service(&service);
    }
    let (addr_tx, addr_rx) = std::sync::mpsc::channel();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server_thread = {
        let records = records.clone();
        std::thread::spawn(move || -> Result<()> {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            runtime.block_on(async move {
                let zone = Zone::new("cluster.local")?;
                // never used: every question is a cluster name
                let forwarder =
                    Forwarder::new(vec![([127, 0, 0, 1], 9).into()], NetworkExchange::default())?;
                let metrics = Arc::new(Metrics::default());
                let handler = Handler::new(records, zone, forwarder, metrics);
                let mut listening = server::listen(handler, ([127, 0, 0, 1], 0).into()).await?;
                addr_tx.send(listening.addr)?;
                let _ = stop_rx.await;
                listening.server.shutdown_gracefully().await?;
                Ok(())
            })
        })
    };
    let server = addr_rx
        .recv()
        .context("the DNS server thread failed to start")?;

    let warmup = Duration::from_secs(1);
    let measure = Duration::from_secs(args.seconds);
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..args.sockets {
        tasks.push(tokio::spawn(client(
            server,
            args.services,
            args.outstanding,
            started + warmup,
            started + warmup + measure,
        )));
    }
    let mut latency = Histogram::<u64>::new(3)?;
    let (mut answered, mut lost, mut failed) = (0u64, 0u64, 0u64);
    for task in tasks {
        let result = task.await??;
        latency.add(&result.latency)?;
        answered += result.answered;
        lost += result.lost;
        failed += result.failed;
    }
    let _ = stop_tx.send(());
    server_thread
        .join()
        .map_err(|_| anyhow::anyhow!("the DNS server thread panicked"))??;
    let ms = |q: f64| latency.value_at_quantile(q) as f64 / 1000.0;
    println!(
        "{}",
        json!({
            "bench": "dns",
            "services": args.services,
            "queries_per_sec": (answered as f64 / measure.as_secs_f64()).round(),
            "p50_ms": ms(0.5),
            "p99_ms": ms(0.99),
            "answered": answered,
            "lost": lost,
            "not_noerror": failed,
            "in_flight": args.sockets * args.outstanding,
            "server": "one current-thread runtime (one core), records filled directly",
            "build": if cfg!(debug_assertions) { "debug" } else { "release" },
        })
    );
    Ok(())
}

struct ClientResult {
    latency: Histogram<u64>,
    answered: u64,
    lost: u64,
    failed: u64,
}

/// One socket keeping `outstanding` questions in flight until `end`; counts what is answered
/// between `from` and `end`. Slots are query ids: the id says which question an answer is for.
async fn client(
    server: SocketAddr,
    services: usize,
    outstanding: usize,
    from: Instant,
    end: Instant,
) -> Result<ClientResult> {
    let socket = tokio::net::UdpSocket::bind("127.0.0.1:0").await?;
    socket.connect(server).await?;
    // questions encoded once; each send only writes its slot into the id (the first two bytes),
    // and answers are read from the header alone, so the client costs little next to the server
    let mut questions: Vec<Vec<u8>> = Vec::new();
    for _ in 0..64 {
        let i = fastrand::usize(..services.max(1));
        let name = Name::from_ascii(format!("svc-{i}.bench.svc.cluster.local."))?;
        let mut message = Message::new(0, MessageType::Query, OpCode::Query);
        message.metadata.recursion_desired = true;
        message.add_query(Query::query(name, RecordType::A));
        questions.push(message.to_vec()?);
    }
    let mut sent_at: Vec<Option<Instant>> = vec![None; outstanding];
    let mut out = ClientResult {
        latency: Histogram::new(3)?,
        answered: 0,
        lost: 0,
        failed: 0,
    };
    let mut packet = Vec::with_capacity(128);
    let mut send = async |slot: usize| -> Result<()> {
        packet.clear();
        packet.extend_from_slice(&questions[fastrand::usize(..questions.len())]);
        packet[..2].copy_from_slice(&(slot as u16).to_be_bytes());
        socket.send(&packet).await?;
        Ok(())
    };
    for (slot, at) in sent_at.iter_mut().enumerate() {
        send(slot).await?;
        *at = Some(Instant::now());
    }
    let mut buf = vec![0u8; 4096];
    let mut next_sweep = Instant::now() + LOST_AFTER;
    while Instant::now() < end {
        if let Ok(n) = tokio::time::timeout(LOST_AFTER, socket.recv(&mut buf)).await {
            let n = n?;
            let now = Instant::now();
            let slot = usize::from(u16::from_be_bytes([buf[0], buf[1]]));
            if n >= 12
                && let Some(Some(at)) = sent_at.get(slot).copied()
            {
                if now >= from {
                    out.answered += 1;
                    out.latency
                        .record(now.duration_since(at).as_micros() as u64)?;
                    let rcode = buf[3] & 0x0f;
                    let answers = u16::from_be_bytes([buf[6], buf[7]]);
                    if rcode != 0 || answers == 0 {
                        out.failed += 1;
                    }
                }
                send(slot).await?;
                sent_at[slot] = Some(Instant::now());
            }
        }
        // a question unanswered for LOST_AFTER was dropped (a full socket buffer): ask again
        let now = Instant::now();
        if now >= next_sweep {
            next_sweep = now + LOST_AFTER / 2;
            for (slot, at) in sent_at.iter_mut().enumerate() {
                if at.is_some_and(|at| now.duration_since(at) >= LOST_AFTER) {
                    out.lost += 1;
                    send(slot).await?;
                    *at = Some(Instant::now());
                }
            }
        }
    }
    Ok(out)
}
