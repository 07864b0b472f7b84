//! The `api-watch` workload of `skiff bench api`: many concurrent watches of the configmaps in
//! namespace `bench`, opened as a client library opens them, then the delivery latency of a
//! series of configmap updates to every one of them.
//!
//! Two connection shapes, as the two client families use them:
//! - `h2` (the default): HTTP/2 with up to `streams_per_connection` watches multiplexed on each
//!   TLS connection, as client-go (kubectl, controllers, kubelets) does; kube-apiserver allows
//!   100 streams per connection, so client-go needs one connection per 100 watches;
//! - `http1`: one HTTP/1.1 TLS connection per watch, as kube-rs and the Python client do.
//!
//! The watches are raw hyper connections rather than `kube::Client`, because kube's client
//! speaks HTTP/1 only; TLS and credentials come from the same kubeconfig.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, bail};
use bytes::{Bytes, BytesMut};
use futures::StreamExt;
use hdrhistogram::Histogram;
use http::{Method, Request, Uri, header};
use http_body_util::{BodyExt, Empty};
use hyper::body::Incoming;
use hyper::client::conn::{http1, http2};
use hyper_util::rt::{TokioExecutor, TokioIo};
use kube::client::ConfigExt;
use rustls_pki_types::ServerName;
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::net::TcpStream;
use tokio::sync::Notify;
use tokio_rustls::TlsConnector;

use super::{CpuMeter, NAMESPACE, Plan, get, histogram, micros, send_ok};

/// How watches reach the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Protocol {
    /// HTTP/2, several watches per connection (client-go).
    H2,
    /// HTTP/1.1, one connection per watch (kube-rs, the Python client).
    Http1,
}

impl Protocol {
    pub(super) fn name(self) -> &'static str {
        match self {
            Protocol::H2 => "h2",
            Protocol::Http1 => "http1",
        }
    }
}

/// The configmap the workload updates.
const WATCHED: &str = "bench-watch";

/// Watch delivery figures.
pub(super) struct Watched {
    /// Send time (client clock, in the update's data) to each watcher's parsed event, µs.
    pub delivery: Histogram<u64>,
    /// The updates' own PATCH round trips, µs.
    pub update: Histogram<u64>,
    /// TLS connections the watches used.
    pub connections: usize,
    /// From the first watch request until every watcher had the sentinel event.
    pub establish: Duration,
    /// From the first measured update until every watcher had the last one (the updates are
    /// `interval` apart unless one takes longer).
    pub span: Duration,
    /// CPU each process used over `span`.
    pub cpu: Value,
}

/// One watch event line, as much of it as the watchers read.
#[derive(Deserialize)]
struct WatchLine {
    #[serde(rename = "type")]
    kind: String,
    object: WatchObject,
}

#[derive(Deserialize)]
struct WatchObject {
    #[serde(default)]
    data: std::collections::HashMap<String, String>,
}

fn now_nanos() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
}

/// Opens TLS connections to the API server with the kubeconfig's CA and client certificate.
struct Connector {
    tls: TlsConnector,
    host: String,
    port: u16,
    server_name: ServerName<'static>,
    base: String,
}

impl Connector {
    fn new(config: &kube::Config, protocol: Protocol) -> Result<Connector> {
        let mut tls = config.rustls_client_config()?;
        tls.alpn_protocols = vec![match protocol {
            Protocol::H2 => b"h2".to_vec(),
            Protocol::Http1 => b"http/1.1".to_vec(),
        }];
        let url = &config.cluster_url;
        let host = url.host().context("cluster url without a host")?;
        let host = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_string();
        Ok(Connector {
            tls: TlsConnector::from(Arc::new(tls)),
            port: url.port_u16().unwrap_or(443),
            server_name: ServerName::try_from(host.clone())?,
            host,
            base: format!(
                "{}://{}",
                url.scheme_str().unwrap_or("https"),
                url.authority()
                    .context("cluster url without an authority")?
            ),
        })
    }

    async fn stream(&self) -> Result<TokioIo<tokio_rustls::client::TlsStream<TcpStream>>> {
        let tcp = TcpStream::connect((self.host.as_str(), self.port)).await?;
        tcp.set_nodelay(true)?;
        let tls = self.tls.connect(self.server_name.clone(), tcp).await?;
        Ok(TokioIo::new(tls))
    }

    /// One HTTP/2 connection; its sender is cloned for every stream it carries. Flow-control
    /// windows as Go's HTTP/2 transport sets them (4 MiB per stream, 1 GiB per connection).
    async fn h2(&self) -> Result<http2::SendRequest<Empty<Bytes>>> {
        let (sender, conn) = http2::Builder::new(TokioExecutor::new())
            .initial_stream_window_size(4 << 20)
            .initial_connection_window_size(1 << 30)
            .handshake(self.stream().await?)
            .await?;
        tokio::spawn(conn);
        Ok(sender)
    }

    async fn http1(&self) -> Result<http1::SendRequest<Empty<Bytes>>> {
        let (sender, conn) = http1::handshake(self.stream().await?).await?;
        tokio::spawn(conn);
        Ok(sender)
    }
}

/// Starts one watch on its connection (for HTTP/1.1, a new one) and returns the response body
/// with whatever keeps the connection open.
async fn open_watch(
    connector: &Connector,
    h2: Option<http2::SendRequest<Empty<Bytes>>>,
    path: &str,
) -> Result<(Incoming, Option<http1::SendRequest<Empty<Bytes>>>)> {
    let request = |uri: Uri| {
        Request::builder()
            .method(Method::GET)
            .uri(uri)
            .header(header::ACCEPT, "application/json")
            .header(
                header::HOST,
                format!("{}:{}", connector.host, connector.port),
            )
            .body(Empty::<Bytes>::new())
    };
    let (resp, keep) = match h2 {
        Some(mut sender) => {
            sender.ready().await?;
            let uri: Uri = format!("{}{path}", connector.base).parse()?;
            (sender.send_request(request(uri)?).await?, None)
        }
        None => {
            let mut sender = connector.http1().await?;
            let resp = sender.send_request(request(path.parse()?)?).await?;
            (resp, Some(sender))
        }
    };
    if !resp.status().is_success() {
        let status = resp.status();
        let body = resp.into_body().collect().await?.to_bytes();
        bail!("watch {path}: {status}: {}", String::from_utf8_lossy(&body));
    }
    Ok((resp.into_body(), keep))
}

/// The next `\n`-terminated line of a streamed body, or `None` at its end.
async fn next_line(body: &mut Incoming, buf: &mut BytesMut) -> Result<Option<Bytes>> {
    loop {
        if let Some(i) = buf.iter().position(|b| *b == b'\n') {
            return Ok(Some(buf.split_to(i + 1).freeze()));
        }
        match body.frame().await {
            Some(frame) => {
                if let Ok(data) = frame.context("reading a watch stream")?.into_data() {
                    buf.extend_from_slice(&data);
                }
            }
            None => return Ok(None),
        }
    }
}

/// Counts watchers that have seen the sentinel update.
type Armed = Arc<(AtomicUsize, Notify)>;

/// Reads one watch until it has seen `updates` measured events after the sentinel; returns the
/// delivery latency of each.
async fn watcher(mut body: Incoming, armed_count: Armed, updates: usize) -> Result<Histogram<u64>> {
    let mut buf = BytesMut::with_capacity(8192);
    let mut latency = histogram();
    let mut armed = false;
    while let Some(line) = next_line(&mut body, &mut buf).await? {
        let event: WatchLine = serde_json::from_slice(&line).with_context(|| {
            format!("parsing a watch event: {}", String::from_utf8_lossy(&line))
        })?;
        let now = now_nanos();
        if event.kind == "ERROR" {
            bail!("watch error event: {}", String::from_utf8_lossy(&line));
        }
        match event.object.data.get("phase").map(String::as_str) {
            Some("sentinel") if !armed => {
                armed = true;
                armed_count.0.fetch_add(1, Ordering::AcqRel);
                armed_count.1.notify_one();
            }
            Some("measure") if armed => {
                let sent: u128 = event.object.data.get("sent").context("no sent")?.parse()?;
                let delay = now.saturating_sub(sent) / 1000;
                latency.record((delay as u64).max(1))?;
                if latency.len() as usize == updates {
                    return Ok(latency);
                }
            }
            _ => {}
        }
    }
    bail!("watch ended after {} of {updates} events", latency.len())
}

/// `plan.watchers` watches of the configmaps in `bench`, each from the RV of one LIST. A
/// sentinel update that every watcher must see proves all of them are established; then
/// `plan.updates` merge-patches, `plan.interval` apart, carry their send time (ns since the
/// epoch, this process's clock) in the data, and each watcher records now − send time per event.
pub(super) async fn run(
    client: &kube::Client,
    config: &kube::Config,
    plan: &Plan,
    cpu: &CpuMeter,
) -> Result<Watched> {
    let cms = format!("/api/v1/namespaces/{NAMESPACE}/configmaps");
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": WATCHED}, "data": {"phase": "created"}});
    send_ok(
        client,
        Method::POST,
        &cms,
        "application/json",
        serde_json::to_vec(&cm)?.into(),
    )
    .await?;
    let list: Value = serde_json::from_slice(&get(client, &cms).await?)?;
    let rv = list["metadata"]["resourceVersion"]
        .as_str()
        .context("configmap list without a resourceVersion")?
        .to_string();

    let begin = Instant::now();
    let connector = Connector::new(config, plan.protocol)?;
    let mut h2 = Vec::new();
    if plan.protocol == Protocol::H2 {
        for _ in 0..plan.watchers.div_ceil(plan.streams_per_connection.max(1)) {
            h2.push(
                connector
                    .h2()
                    .await
                    .context("opening an HTTP/2 connection")?,
            );
        }
    }
    let connections = if h2.is_empty() {
        plan.watchers
    } else {
        h2.len()
    };
    let path = format!("{cms}?watch=1&resourceVersion={rv}");
    let armed: Armed = Arc::new((AtomicUsize::new(0), Notify::new()));
    let updates = plan.updates;
    let mut streams = futures::stream::iter(0..plan.watchers)
        .map(|i| {
            let sender = h2.get(i / plan.streams_per_connection.max(1)).cloned();
            open_watch(&connector, sender, &path)
        })
        // a few hundred at a time rather than 1,000 TLS handshakes at once
        .buffer_unordered(256);
    let mut watchers = Vec::with_capacity(plan.watchers);
    while let Some(opened) = streams.next().await {
        let (body, keep) = opened.context("starting a watch")?;
        let armed = armed.clone();
        watchers.push(tokio::spawn(async move {
            let _connection = keep;
            watcher(body, armed, updates).await
        }));
    }
    drop(streams);

    let patch = |data: Value| {
        let body = serde_json::to_vec(&json!({ "data": data })).expect("json");
        let path = format!("{cms}/{WATCHED}");
        async move {
            send_ok(
                client,
                Method::PATCH,
                &path,
                "application/merge-patch+json",
                body.into(),
            )
            .await
        }
    };
    patch(json!({"phase": "sentinel"})).await?;
    let all_armed = async {
        while armed.0.load(Ordering::Acquire) < plan.watchers {
            armed.1.notified().await;
        }
    };
    if tokio::time::timeout(Duration::from_secs(120), all_armed)
        .await
        .is_err()
    {
        bail!(
            "only {} of {} watchers saw the sentinel update",
            armed.0.load(Ordering::Acquire),
            plan.watchers
        );
    }
    let establish = begin.elapsed();

    let mut update = histogram();
    let before = cpu.snapshot();
    let start = Instant::now();
    for i in 0..plan.updates {
        tokio::time::sleep_until((start + plan.interval * i as u32).into()).await;
        let t = Instant::now();
        let data = json!({"phase": "measure", "seq": i.to_string(),
                          "sent": now_nanos().to_string()});
        patch(data).await?;
        update.record(micros(t.elapsed()))?;
    }
    let joined = tokio::time::timeout(
        Duration::from_secs(60),
        futures::future::try_join_all(watchers),
    )
    .await
    .context("watchers still waiting for events 60 s after the last update")??;
    let span = start.elapsed();
    let cpu = cpu.used_since(&before);
    let mut delivery = histogram();
    for h in joined {
        delivery.add(h?)?;
    }
    Ok(Watched {
        delivery,
        update,
        connections,
        establish,
        span,
        cpu,
    })
}
