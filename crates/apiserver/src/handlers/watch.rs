//! Watches: a chunked stream of JSON lines `{"type": ADDED|MODIFIED|DELETED|BOOKMARK|ERROR,
//! "object": …}`, served from the watch cache, filtered on the server: an object that stops
//! matching the selectors arrives as DELETED, one that starts matching as ADDED. A revision
//! older than the cache's window gets one ERROR event, 410 `Expired`, as upstream's cacher
//! answers it, and the client lists again. Objects served in another form than stored are
//! converted per event (the initial ones together); a conversion that fails ends the watch with
//! an ERROR event carrying its `Status`.

use std::time::Duration;

use bytes::Bytes;
use http::Response;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use serde_json::{Value, json};
use tokio::sync::{broadcast, mpsc};

use super::read::{Filter, table_of};
use super::{Body, Ctx};
use crate::cache::{CacheEvent, Cached, Change, WatchStart};
use crate::encoding::Output;
use crate::error::{ApiError, Result};
use crate::metrics::WatchEventMeters;
use crate::protobuf::order;
use crate::request::flag;
use crate::trace::WatchTrace;

/// Upstream closes watches after a random 30–60 minutes; Skiff after 30 unless asked.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(1800);

/// How long before a watch's deadline its last bookmark is sent (upstream's cacher: 2 s).
const FINAL_BOOKMARK_LEAD: Duration = Duration::from_secs(2);

/// How often at most a watch that allows bookmarks gets one as the cache progresses (the 5 s
/// tick, and each consistent read that finds the cache behind): often enough that a client
/// whose watch ends resumes inside the cache's history, which a busy cluster's pod changes cross
/// in seconds; no more, where a bookmark per progress made a third of the pod watch events
/// `skiff bench scale` sent. (Upstream's cacher sends one a minute, and keeps a longer history.)
const BOOKMARK_EVERY: Duration = Duration::from_secs(5);

/// Queued event lines are sent once they reach this size, even mid-backlog.
const FLUSH_BYTES: usize = 64 * 1024;

/// One watch's sending half.
struct Sink {
    tx: mpsc::Sender<std::result::Result<Frame<Bytes>, std::convert::Infallible>>,
    ctx: Ctx,
    filter: Filter,
    name: Option<String>,
    bookmarks: bool,
    /// Tables carry column definitions in the first event only, as upstream.
    columns_sent: bool,
    /// Event lines not yet sent.
    buf: Vec<u8>,
    /// The revision up to which this watch has been sent everything it selects.
    last_revision: i64,
    /// When the last progress bookmark was sent, and its revision: a progress that finds the
    /// client told less than `last_revision` (moved on by a progress too early to tell) tells it.
    bookmarked: (tokio::time::Instant, i64),
    /// Pod watches with the lifecycle trace on: what this watch was sent, or not.
    trace: Option<WatchTrace>,
    /// `apiserver_watch_events_total` and `_sizes` of this watch's kind.
    meters: WatchEventMeters,
}

impl Sink {
    /// Whether `c` is in the watch's namespace and name (offered to it, before selectors).
    fn in_scope(&self, c: &Cached) -> bool {
        self.name.as_ref().is_none_or(|n| *n == c.name)
            && (self.ctx.info.namespace.is_empty() || self.ctx.info.namespace == c.namespace)
    }

    fn selects(&self, c: &Cached) -> bool {
        self.in_scope(c) && self.filter.matches(c)
    }

    /// Tells the trace an event line for `c` is queued.
    fn note(&mut self, kind: &'static str, c: &Cached) {
        if let Some(t) = &mut self.trace {
            t.queued(&c.namespace, &c.name, c.revision, kind);
        }
    }

    /// Queues one event of a value: a JSON line (Go field order), or a protobuf frame when the
    /// client asked for protobuf.
    async fn send_value(&mut self, kind: &str, value: &Value) -> bool {
        if !self.ctx.output.is_protobuf() {
            return self.send_line(kind, &order::to_vec(value)).await;
        }
        match crate::protobuf::encode::watch_event(kind, value) {
            Ok(frame) => {
                self.meters.sent(frame.len());
                self.buf.extend_from_slice(&frame);
                self.buf.len() < FLUSH_BYTES || self.flush().await
            }
            Err(e) => {
                // a frame in another encoding would break the stream: the event is left out
                tracing::error!(error = %e, "watch event not encodable as protobuf; not sent");
                true
            }
        }
    }

    /// Queues one event line; lines go out in one frame per [`Sink::flush`] (or every 64 KiB), so
    /// a watcher that is behind gets its backlog in few writes rather than one per event.
    async fn send_line(&mut self, kind: &str, object: &[u8]) -> bool {
        self.send_with(kind, object.len(), |buf| buf.extend_from_slice(object))
            .await
    }

    /// Queues one event line whose object `write` appends (about `len` bytes).
    async fn send_with(
        &mut self,
        kind: &str,
        len: usize,
        write: impl FnOnce(&mut Vec<u8>),
    ) -> bool {
        self.buf.reserve(len + 32);
        let start = self.buf.len();
        self.buf.extend_from_slice(b"{\"type\":\"");
        self.buf.extend_from_slice(kind.as_bytes());
        self.buf.extend_from_slice(b"\",\"object\":");
        write(&mut self.buf);
        self.buf.extend_from_slice(b"}\n");
        self.meters.sent(self.buf.len() - start);
        if self.buf.len() >= FLUSH_BYTES {
            return self.flush().await;
        }
        true
    }

    /// Sends the queued lines; `false` once the client is gone.
    async fn flush(&mut self) -> bool {
        if self.buf.is_empty() {
            return true;
        }
        let frame = Frame::data(Bytes::from(std::mem::take(&mut self.buf)));
        let sent = self.tx.send(Ok(frame)).await.is_ok();
        if sent && let Some(t) = &mut self.trace {
            t.written(self.ctx.server.now());
        }
        sent
    }

    /// Sends one object, converted to its served form when that differs; `false` once the
    /// watch is over (the client is gone, or the conversion failed and the watch ended).
    async fn send_object(&mut self, kind: &str, c: &Cached) -> bool {
        if !self.ctx.server.conversion.needed(&self.ctx.rt) {
            return self.send_stored(kind, c).await;
        }
        let Ok(obj) = c.object() else { return true };
        match self
            .ctx
            .server
            .conversion
            .to_external(&self.ctx.rt, obj)
            .await
        {
            Ok(obj) => self.send_converted(kind, c, &obj).await,
            Err(e) => {
                self.error(&e).await;
                false
            }
        }
    }

    /// Sends the initial objects, converted together when they must be.
    async fn send_initial(&mut self, objects: Vec<&Cached>) -> bool {
        if !self.ctx.server.conversion.needed(&self.ctx.rt) {
            for c in objects {
                self.note("ADDED", c);
                if !self.send_stored("ADDED", c).await {
                    return false;
                }
            }
            return true;
        }
        let (cached, values): (Vec<&Cached>, Vec<Value>) = objects
            .into_iter()
            .filter_map(|c| Some((c, c.object().ok()?)))
            .unzip();
        let converted = match self
            .ctx
            .server
            .conversion
            .to_external_all(&self.ctx.rt, values)
            .await
        {
            Ok(converted) => converted,
            Err(e) => {
                self.error(&e).await;
                return false;
            }
        };
        for (c, obj) in cached.into_iter().zip(converted) {
            self.note("ADDED", c);
            if !self.send_converted("ADDED", c, &obj).await {
                return false;
            }
        }
        true
    }

    /// Sends an object in its served form, `obj`.
    async fn send_converted(&mut self, kind: &str, c: &Cached, obj: &Value) -> bool {
        self.last_revision = self.last_revision.max(c.revision);
        match self.ctx.output {
            Output::Table => self.send_table(kind, c, obj.clone()).await,
            Output::PartialMetadata { .. } => self.send_partial(kind, obj).await,
            _ => self.send_value(kind, obj).await,
        }
    }

    async fn send_table(&mut self, kind: &str, c: &Cached, obj: Value) -> bool {
        let mut table = table_of(&self.ctx, &[obj], &json!(c.revision.to_string()), None);
        if self.columns_sent {
            table["columnDefinitions"] = json!([]);
        }
        self.columns_sent = true;
        self.send_line(kind, &order::to_vec(&table)).await
    }

    async fn send_partial(&mut self, kind: &str, obj: &Value) -> bool {
        let meta = json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                          "metadata": obj["metadata"]});
        self.send_value(kind, &meta).await
    }

    /// Sends an object served as stored.
    async fn send_stored(&mut self, kind: &str, c: &Cached) -> bool {
        self.last_revision = self.last_revision.max(c.revision);
        match self.ctx.output {
            Output::Table => {
                let Ok(obj) = c.object() else { return true };
                self.send_table(kind, c, obj).await
            }
            Output::PartialMetadata { .. } => {
                let Ok(obj) = c.object() else { return true };
                self.send_partial(kind, &obj).await
            }
            Output::Protobuf => {
                let Ok(obj) = c.object() else { return true };
                self.send_value(kind, &obj).await
            }
            _ => {
                self.send_with(kind, c.json_len(), |buf| c.write_json(buf))
                    .await
            }
        }
    }

    async fn bookmark(&mut self, revision: i64, initial_end: bool) -> bool {
        let mut meta = json!({"resourceVersion": revision.to_string()});
        if initial_end {
            meta["annotations"] = json!({"k8s.io/initial-events-end": "true"});
        }
        let obj = json!({"kind": self.ctx.rt.kind, "apiVersion": self.ctx.rt.api_version(),
                         "metadata": meta});
        self.send_value("BOOKMARK", &obj).await
    }

    async fn error(&mut self, e: &ApiError) {
        if self.send_value("ERROR", &e.to_status()).await {
            self.flush().await;
        }
    }

    /// Sends one change as this watcher sees it through its selectors.
    async fn change(&mut self, change: Change, object: &Cached, prev: Option<&Cached>) -> bool {
        if object.revision <= self.last_revision {
            return true;
        }
        let now = self.selects(object);
        let before = prev.is_some_and(|p| self.selects(p));
        let kind = match (change, before, now) {
            (Change::Deleted, true, _) => "DELETED",
            (_, false, true) if change != Change::Deleted => "ADDED",
            (Change::Modified, true, true) => "MODIFIED",
            (Change::Added, true, true) => "ADDED",
            (_, true, false) => "DELETED",
            (_, false, _) => {
                if let Some(t) = &self.trace
                    && self.in_scope(object)
                {
                    t.filtered(
                        &object.namespace,
                        &object.name,
                        object.revision,
                        self.ctx.server.now(),
                    );
                }
                return true;
            }
        };
        self.note(kind, object);
        self.send_object(kind, object).await
    }

    async fn cache_event(&mut self, e: &CacheEvent) -> bool {
        match e {
            CacheEvent::Object {
                change,
                object,
                prev,
            } => self.change(*change, object, prev.as_deref()).await,
            // the watch's resume point moves on, whether or not the client hears of it now
            CacheEvent::Progress(rv) => {
                self.last_revision = self.last_revision.max(*rv);
                let (at, revision) = self.bookmarked;
                if self.bookmarks && self.last_revision > revision && at.elapsed() >= BOOKMARK_EVERY
                {
                    self.bookmarked = (tokio::time::Instant::now(), self.last_revision);
                    return self.bookmark(self.last_revision, false).await;
                }
                true
            }
            // the cache listed again: what it missed is not in its events, so the watch ends
            CacheEvent::Reset(_) => {
                self.flush().await;
                false
            }
        }
    }
}

pub async fn watch(ctx: Ctx) -> Result<Response<Body>> {
    super::read::validate_list_options(&ctx, true)?;
    let filter = Filter::from_query(&ctx)?;
    let rv = ctx
        .query
        .get("resourceVersion")
        .cloned()
        .unwrap_or_default();
    let send_initial = flag(&ctx.query, "sendInitialEvents");
    let bookmarks = flag(&ctx.query, "allowWatchBookmarks");
    let timeout = ctx
        .query
        .get("timeoutSeconds")
        .and_then(|t| t.parse::<u64>().ok())
        .map(Duration::from_secs)
        .unwrap_or(DEFAULT_TIMEOUT);
    if send_initial && !bookmarks {
        return Err(ApiError::invalid(
            "ListOptions",
            "meta.k8s.io",
            "",
            &[skiff_apimachinery::validation::FieldError::forbidden(
                &skiff_apimachinery::validation::FieldPath::new("allowWatchBookmarks"),
                "sendInitialEvents requires allowWatchBookmarks=true",
            )],
        ));
    }
    let from = match rv.as_str() {
        "" => {
            ctx.server.cache.wait_fresh().await?;
            None
        }
        // "0" may be served from any state; for a streaming list (kube-rs sends "0") a fresh one
        // costs one cheap store read and spares the client objects it has just written.
        "0" if send_initial => {
            ctx.server.cache.wait_fresh().await?;
            None
        }
        "0" => None,
        n => {
            let n: i64 = n
                .parse()
                .map_err(|_| ApiError::bad_request(format!("invalid resource version: {n:?}")))?;
            ctx.server.cache.wait_for(n).await?;
            if send_initial { None } else { Some(n) }
        }
    };
    let name = (!ctx.info.name.is_empty()).then(|| ctx.info.name.clone());
    let cache = ctx.cache()?;
    let start = cache.watch(&ctx.info.namespace, from, &filter.fields);
    let (tx, rx) = mpsc::channel(64);
    let trace = WatchTrace::for_watch(&ctx);
    let output = ctx.output;
    let meters =
        ctx.server
            .metrics
            .watch_event_meters(&ctx.rt.group, &ctx.rt.version, &ctx.rt.kind);
    let mut sink = Sink {
        trace,
        meters,
        tx,
        ctx,
        filter,
        name,
        bookmarks,
        columns_sent: false,
        buf: Vec::new(),
        last_revision: from.unwrap_or(0),
        bookmarked: (tokio::time::Instant::now(), 0),
    };
    let final_bookmark = (bookmarks && timeout > FINAL_BOOKMARK_LEAD)
        .then(|| tokio::time::Instant::now() + timeout - FINAL_BOOKMARK_LEAD);
    let guard = sink.ctx.server.metrics.watch_opened(&sink.ctx.rt.plural);
    let mut stopping = sink.ctx.server.stopping.subscribe();
    tokio::spawn(async move {
        let _guard = guard;
        let run = async {
            match start {
                Some(WatchStart::Snapshot(snapshot, rx)) => {
                    let selected: Vec<&Cached> = snapshot
                        .objects
                        .iter()
                        .filter(|c| sink.selects(c))
                        .map(|c| &**c)
                        .collect();
                    if !sink.send_initial(selected).await {
                        return;
                    }
                    sink.last_revision = snapshot.revision;
                    if send_initial && !sink.bookmark(snapshot.revision, true).await {
                        return;
                    }
                    if !sink.flush().await {
                        return;
                    }
                    live(&mut sink, rx, final_bookmark).await;
                }
                Some(WatchStart::Replay(events, rx)) => {
                    for e in &events {
                        if !sink.cache_event(e).await {
                            return;
                        }
                    }
                    if !sink.flush().await {
                        return;
                    }
                    live(&mut sink, rx, final_bookmark).await;
                }
                None => {
                    let floor = sink.ctx.cache().map_or(0, |c| c.history_floor());
                    let message =
                        format!("too old resource version: {} ({floor})", from.unwrap_or(0));
                    sink.error(&ApiError::gone(message)).await;
                }
            }
        };
        // ends with the timeout, the client, or the server stopping
        tokio::select! {
            _ = tokio::time::timeout(timeout, run) => {}
            _ = stopping.wait_for(|s| *s) => {}
        }
    });
    let stream = tokio_stream::wrappers::ReceiverStream::new(rx);
    let body = BodyExt::boxed(StreamBody::new(stream));
    let mut resp = Response::new(body);
    resp.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static(if output.is_protobuf() {
            "application/vnd.kubernetes.protobuf;stream=watch"
        } else {
            "application/json"
        }),
    );
    Ok(resp)
}

/// Streams cache events to the watcher; at `final_bookmark` (shortly before the watch's
/// deadline, as upstream's cacher does) it sends a bookmark at the cache's revision, so a client
/// whose watch times out resumes from the present, not from its last event (a quiet node's pod
/// watch may have had none for minutes, and the history no longer reaches back to it).
async fn live(
    sink: &mut Sink,
    mut rx: broadcast::Receiver<CacheEvent>,
    mut final_bookmark: Option<tokio::time::Instant>,
) {
    loop {
        let first = tokio::select! {
            event = rx.recv() => event,
            () = sink.tx.closed() => return,
            () = async { tokio::time::sleep_until(final_bookmark.unwrap_or_else(tokio::time::Instant::now)).await },
                if final_bookmark.is_some() => {
                final_bookmark = None;
                // Every event up to the caches' revision is in `rx` already (it moves once a
                // whole batch of the store's events was sent): sent first, they are all the
                // watch is owed up to it.
                let now = sink.ctx.server.cache.revision();
                let queued = rx.try_recv();
                if !forward(sink, &mut rx, queued).await {
                    return;
                }
                let revision = sink.last_revision.max(now);
                if revision > 0 && !(sink.bookmark(revision, false).await && sink.flush().await) {
                    return;
                }
                continue;
            }
        };
        let first = first.map_err(|e| match e {
            broadcast::error::RecvError::Lagged(n) => broadcast::error::TryRecvError::Lagged(n),
            broadcast::error::RecvError::Closed => broadcast::error::TryRecvError::Closed,
        });
        if !forward(sink, &mut rx, first).await {
            return;
        }
    }
}

/// Sends `first` and every event queued behind it, then flushes them in one frame; `false` once
/// the watch is over.
async fn forward(
    sink: &mut Sink,
    rx: &mut broadcast::Receiver<CacheEvent>,
    first: std::result::Result<CacheEvent, broadcast::error::TryRecvError>,
) -> bool {
    let mut next = first;
    loop {
        match next {
            Ok(e) => {
                if !sink.cache_event(&e).await {
                    return false;
                }
            }
            // Too far behind: end the watch; the client resumes from its last
            // resourceVersion, which the history still holds.
            Err(broadcast::error::TryRecvError::Lagged(_)) => {
                let metrics = &sink.ctx.server.metrics;
                metrics.watcher_terminated(&sink.ctx.rt.plural);
                sink.flush().await;
                return false;
            }
            Err(broadcast::error::TryRecvError::Closed) => {
                sink.flush().await;
                return false;
            }
            Err(broadcast::error::TryRecvError::Empty) => break,
        }
        next = rx.try_recv();
    }
    sink.flush().await
}
