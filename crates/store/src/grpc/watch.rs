//! The Watch service: one bidi stream per client carrying many watches, as etcd's
//! `v3rpc/watch.go` serves it.
//!
//! Each stream is served by one task (a [`Session`]) that owns every watch of the stream: it
//! reads client requests (create, cancel, progress) and the watches' batches in one `select!`
//! loop and writes responses into a bounded channel. Nothing is shared, so nothing is locked.
//! When the client reads slowly, the session waits on that channel and stops reading its
//! watches; the store then cuts off a watch that falls too far behind (`WatcherLagged`), which
//! the client sees as a cancel with a reason, as it sees a compacted start revision as a cancel
//! with `compact_revision` set.
//!
//! Watch IDs: a create with `watch_id` 0 gets the lowest unused ID counting up from 0 (etcd's
//! `AutoWatchID`); a create naming an ID in use is refused with `watch_id` -1.
//!
//! Progress requests: the answer has `watch_id` -1 (clients hand it to every watch of the
//! stream) and a revision R such that every event up to R has already been sent on every watch
//! of the stream. The session asks each watch's store stream for progress and answers once all
//! of them confirmed a revision at least the store's revision when the request came in.

use std::collections::{HashMap, HashSet, VecDeque};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use futures::{Stream, StreamExt};
use tokio::sync::mpsc;
use tokio_stream::StreamMap;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};

use super::Facade;
use super::convert::*;
use super::pb::etcdserverpb as rpc;
use crate::error::{Error, Result};
use crate::store::{Store, WatchStream as StoreWatch};
use crate::types::*;

/// Responses a session may queue for its client before it stops reading its watches.
const RESPONSE_BUFFER: usize = 128;

/// etcd's message when a create names a watch ID already in use on the stream.
const MSG_DUPLICATE_WATCH_ID: &str = "mvcc: duplicate watch ID provided on the WatchStream";

/// The `watch_id` of responses that concern no single watch (progress answers, refusals).
const NO_WATCH: i64 = -1;

pub(crate) struct WatchService<S> {
    f: Arc<Facade<S>>,
}

impl<S> WatchService<S> {
    pub(crate) fn new(f: Arc<Facade<S>>) -> Self {
        WatchService { f }
    }
}

#[tonic::async_trait]
impl<S: Store> rpc::watch_server::Watch for WatchService<S> {
    type WatchStream = ReceiverStream<Result<rpc::WatchResponse, Status>>;

    async fn watch(
        &self,
        req: Request<Streaming<rpc::WatchRequest>>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        let (tx, rx) = mpsc::channel(RESPONSE_BUFFER);
        let session = Session::new(self.f.clone(), tx);
        tokio::spawn(session.run(req.into_inner()));
        Ok(Response::new(ReceiverStream::new(rx)))
    }
}

/// The client has gone (its response stream was dropped); the session ends.
struct Gone;

type Sent = std::result::Result<(), Gone>;

/// What a watch asked for beyond what the store does for it.
struct WatchOptions {
    no_put: bool,
    no_delete: bool,
    progress_notify: bool,
}

/// One outstanding progress request.
struct ProgressRound {
    /// The store's revision when the request came in: answers below it do not count.
    floor: i64,
    /// Watches that have not yet confirmed a revision >= `floor`.
    waiting: HashSet<i64>,
    /// The lowest revision confirmed so far (`i64::MAX` before the first).
    confirmed: i64,
}

struct Session<S> {
    f: Arc<Facade<S>>,
    tx: mpsc::Sender<Result<rpc::WatchResponse, Status>>,
    /// Invariant: `streams` and `options` have the same keys.
    streams: StreamMap<i64, Tracked>,
    options: HashMap<i64, WatchOptions>,
    next_id: i64,
    /// Oldest first; answered in this order.
    rounds: VecDeque<ProgressRound>,
}

impl<S: Store> Session<S> {
    fn new(f: Arc<Facade<S>>, tx: mpsc::Sender<Result<rpc::WatchResponse, Status>>) -> Self {
        Session {
            f,
            tx,
            streams: StreamMap::new(),
            options: HashMap::new(),
            next_id: 0,
            rounds: VecDeque::new(),
        }
    }

    async fn run(mut self, mut inbound: Streaming<rpc::WatchRequest>) {
        let f = self.f.clone();
        loop {
            let sent = tokio::select! {
                msg = inbound.message() => match msg {
                    Ok(Some(req)) => self.on_request(req).await,
                    Ok(None) => break,
                    Err(status) => {
                        tracing::debug!(%status, "watch stream from client failed");
                        break;
                    }
                },
                Some((id, item)) = self.streams.next(), if !self.streams.is_empty() => {
                    // The store's publisher just woke every session one batch concerns; let
                    // them all queue their responses before this one's, so that the
                    // connection writes them together (`Facade::after_commit`).
                    self.f.after_commit().await;
                    self.on_item(id, item).await
                }
                () = f.stopped() => break,
            };
            if sent.is_err() {
                break;
            }
        }
    }

    async fn on_request(&mut self, req: rpc::WatchRequest) -> Sent {
        use rpc::watch_request::RequestUnion;
        match req.request_union {
            Some(RequestUnion::CreateRequest(create)) => self.create(create).await,
            Some(RequestUnion::CancelRequest(cancel)) => self.cancel(cancel.watch_id).await,
            Some(RequestUnion::ProgressRequest(_)) => self.progress().await,
            None => Ok(()),
        }
    }

    async fn create(&mut self, c: rpc::WatchCreateRequest) -> Sent {
        let id = if c.watch_id != 0 {
            if self.options.contains_key(&c.watch_id) {
                return self
                    .send(rpc::WatchResponse {
                        header: Some(self.f.cached_header()),
                        watch_id: NO_WATCH,
                        created: true,
                        canceled: true,
                        cancel_reason: MSG_DUPLICATE_WATCH_ID.to_string(),
                        ..Default::default()
                    })
                    .await;
            }
            c.watch_id
        } else {
            while self.options.contains_key(&self.next_id) {
                self.next_id += 1;
            }
            self.next_id += 1;
            self.next_id - 1
        };
        // As etcd: an empty key means "\0", the smallest key (so with range_end "\0", all keys);
        // start revision 0 means the revision after the current one, which the created response's
        // header carries, so a client resuming from it misses nothing.
        let key = if c.key.is_empty() {
            Bytes::from_static(&[0])
        } else {
            c.key
        };
        let current = self.f.current_revision().await;
        let start_revision = if c.start_revision == 0 {
            current + 1
        } else {
            c.start_revision
        };
        let req = WatchRequest {
            range: key_range(key, c.range_end),
            start_revision,
            prev_kv: c.prev_kv,
            progress_notify: c.progress_notify,
        };
        let created = rpc::WatchResponse {
            header: Some(self.f.header(current)),
            watch_id: id,
            created: true,
            ..Default::default()
        };
        match self.f.store.watch(req).await {
            Ok(stream) => {
                use rpc::watch_create_request::FilterType;
                let has = |t: FilterType| c.filters.contains(&(t as i32));
                let options = WatchOptions {
                    no_put: has(FilterType::Noput),
                    no_delete: has(FilterType::Nodelete),
                    progress_notify: c.progress_notify,
                };
                self.options.insert(id, options);
                self.streams.insert(
                    id,
                    Tracked {
                        inner: stream,
                        ended: false,
                    },
                );
                self.send(created).await
            }
            // A backend may report a compacted start revision at once instead of as the stream's
            // first item; the client sees the same either way.
            Err(Error::Compacted {
                compact_revision, ..
            }) => {
                self.send(created).await?;
                self.send(self.compacted(id, compact_revision)).await
            }
            Err(err) => {
                self.send(rpc::WatchResponse {
                    canceled: true,
                    cancel_reason: status_from_error(&err).message().to_string(),
                    ..created
                })
                .await
            }
        }
    }

    async fn cancel(&mut self, id: i64) -> Sent {
        if self.remove(id) {
            self.send(self.canceled(id, String::new())).await?;
            self.answer_rounds().await
        } else {
            Ok(())
        }
    }

    async fn progress(&mut self) -> Sent {
        let floor = self.f.current_revision().await;
        if self.streams.is_empty() {
            return self.send(self.progress_response(floor)).await;
        }
        for (_, tracked) in self.streams.iter() {
            tracked.inner.request_progress();
        }
        let waiting = self.streams.keys().copied().collect();
        self.rounds.push_back(ProgressRound {
            floor,
            waiting,
            confirmed: i64::MAX,
        });
        Ok(())
    }

    async fn on_item(&mut self, id: i64, item: Option<Result<WatchBatch>>) -> Sent {
        match item {
            Some(Ok(batch)) if batch.is_progress() => self.on_progress(id, batch.revision).await,
            Some(Ok(batch)) => {
                let Some(options) = self.options.get(&id) else {
                    return Ok(());
                };
                let events: Vec<_> = batch
                    .events
                    .into_iter()
                    .filter(|ev| match ev.kind {
                        EventKind::Put => !options.no_put,
                        EventKind::Delete => !options.no_delete,
                    })
                    .map(event_to_pb)
                    .collect();
                if events.is_empty() {
                    return Ok(());
                }
                let header = Some(self.f.header(batch.revision));
                self.send(rpc::WatchResponse {
                    header,
                    watch_id: id,
                    events,
                    ..Default::default()
                })
                .await
            }
            Some(Err(Error::Compacted {
                compact_revision, ..
            })) => {
                self.remove(id);
                self.send(self.compacted(id, compact_revision)).await?;
                self.answer_rounds().await
            }
            Some(Err(err)) => {
                tracing::debug!(watch_id = id, error = %err, "watch ended by the store");
                self.remove(id);
                self.send(self.canceled(id, err.to_string())).await?;
                self.answer_rounds().await
            }
            None => {
                self.remove(id);
                self.send(self.canceled(id, "watch ended by the store".to_string()))
                    .await?;
                self.answer_rounds().await
            }
        }
    }

    /// An empty batch from watch `id`: every event up to `revision` has been sent on it.
    async fn on_progress(&mut self, id: i64, revision: i64) -> Sent {
        let mut counted = false;
        for round in self.rounds.iter_mut().filter(|r| revision >= r.floor) {
            if round.waiting.remove(&id) {
                round.confirmed = round.confirmed.min(revision);
                counted = true;
            }
        }
        if counted {
            return self.answer_rounds().await;
        }
        if self.options.get(&id).is_some_and(|o| o.progress_notify) {
            let header = Some(self.f.header(revision));
            return self
                .send(rpc::WatchResponse {
                    header,
                    watch_id: id,
                    ..Default::default()
                })
                .await;
        }
        Ok(())
    }

    /// Answer the oldest progress requests every watch has confirmed.
    async fn answer_rounds(&mut self) -> Sent {
        while self.rounds.front().is_some_and(|r| r.waiting.is_empty()) {
            let round = self.rounds.pop_front().expect("checked");
            let revision = if round.confirmed == i64::MAX {
                round.floor
            } else {
                round.confirmed
            };
            self.send(self.progress_response(revision)).await?;
        }
        Ok(())
    }

    /// Forget watch `id`; whether it existed.
    fn remove(&mut self, id: i64) -> bool {
        let existed = self.options.remove(&id).is_some();
        self.streams.remove(&id);
        for round in &mut self.rounds {
            round.waiting.remove(&id);
        }
        existed
    }

    fn progress_response(&self, revision: i64) -> rpc::WatchResponse {
        rpc::WatchResponse {
            header: Some(self.f.header(revision)),
            watch_id: NO_WATCH,
            ..Default::default()
        }
    }

    fn canceled(&self, id: i64, reason: String) -> rpc::WatchResponse {
        rpc::WatchResponse {
            header: Some(self.f.cached_header()),
            watch_id: id,
            canceled: true,
            cancel_reason: reason,
            ..Default::default()
        }
    }

    /// As etcd: a watch whose start revision was compacted away ends with `compact_revision` set
    /// (and no reason: clients recognise the case by the compact revision).
    fn compacted(&self, id: i64, compact_revision: i64) -> rpc::WatchResponse {
        rpc::WatchResponse {
            header: Some(self.f.cached_header()),
            watch_id: id,
            canceled: true,
            compact_revision,
            ..Default::default()
        }
    }

    /// Queue `resp` for the client; waits while the client reads slowly, but not past shutdown.
    async fn send(&mut self, resp: rpc::WatchResponse) -> Sent {
        tokio::select! {
            sent = self.tx.send(Ok(resp)) => sent.map_err(|_| Gone),
            () = self.f.stopped() => Err(Gone),
        }
    }
}

/// A store watch stream that yields `None` once when it ends, so the session notices.
struct Tracked {
    inner: StoreWatch,
    ended: bool,
}

impl Stream for Tracked {
    type Item = Option<Result<WatchBatch>>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if self.ended {
            return Poll::Ready(None);
        }
        match self.inner.poll_next_unpin(cx) {
            Poll::Ready(Some(item)) => Poll::Ready(Some(Some(item))),
            Poll::Ready(None) => {
                self.ended = true;
                Poll::Ready(Some(None))
            }
            Poll::Pending => Poll::Pending,
        }
    }
}
