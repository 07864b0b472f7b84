//! Watches of the etcd backend: one gRPC watch stream per [`WatchStream`], acknowledged before
//! it is handed out; created answers are swallowed, progress answers become empty batches, and a
//! cancellation (a compacted start revision) becomes the stream's last item.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use etcd_client as ec;
use futures::StreamExt;
use tokio::sync::mpsc;

use super::failure::About;
use super::{EtcdStore, MAX_RESPONSE_BYTES, header_revision};
use crate::error::{Error, Result};
use crate::store::{WatchControl, WatchStream};
use crate::types::*;

/// Open a watch on `store` (see [`crate::Store::watch`]).
pub(super) async fn open(store: &EtcdStore, req: WatchRequest) -> Result<WatchStream> {
    let (key, end) = store.full_range(&req.range)?;
    let mut opts = ec::WatchOptions::new().with_start_revision(req.start_revision);
    if !end.is_empty() {
        opts = opts.with_range(end);
    }
    if req.prev_kv {
        opts = opts.with_prev_key();
    }
    if req.progress_notify {
        opts = opts.with_progress_notify();
    }
    let mut client = store
        .client
        .watch_client()
        .max_decoding_message_size(MAX_RESPONSE_BYTES);
    let (sender, mut responses) = match client.watch(key, Some(opts)).await {
        Ok(stream) => stream.split(),
        Err(e) => return Err(store.error(e, About::Revision(req.start_revision)).await),
    };
    // Wait for etcd to acknowledge the watch, so that every write after `watch` returns is
    // seen by it.
    let created = match responses.message().await {
        Ok(Some(resp)) => resp,
        Ok(None) => {
            return Err(Error::Remote(
                "etcd closed the watch stream unanswered".into(),
            ));
        }
        Err(e) => return Err(store.error(e, About::Revision(req.start_revision)).await),
    };
    if created.canceled() && created.compact_revision() == 0 {
        let reason = created.cancel_reason();
        return Err(Error::InvalidArgument(format!(
            "etcd refused the watch: {reason}"
        )));
    }
    let (progress_tx, progress) = mpsc::unbounded_channel();
    let mut state = WatchState {
        store: store.clone(),
        sender,
        responses,
        progress,
        next_revision: match req.start_revision {
            0 => header_revision(created.header()) + 1,
            start => start,
        },
        done: false,
    };
    // etcd 3.4 reports a compacted start revision after the creation, but may say it at once.
    let first = created.canceled().then(|| {
        state.done = true;
        state.cancellation(&created)
    });
    let events = futures::stream::unfold(state, WatchState::next);
    let control = Arc::new(ProgressRequester(progress_tx));
    Ok(WatchStream::new(
        futures::stream::iter(first).chain(events),
        control,
    ))
}

/// One etcd watch stream serving one [`WatchStream`]; dropping it closes the gRPC stream, which
/// cancels the watch in etcd.
struct WatchState {
    store: EtcdStore,
    sender: ec::WatchRequestSender,
    responses: ec::WatchResponseStream,
    /// Progress requests from [`ProgressRequester`], forwarded to etcd while polled.
    progress: mpsc::UnboundedReceiver<()>,
    /// The next revision this watch would deliver, to name it if etcd cancels the watch.
    next_revision: i64,
    /// Set once the stream has yielded its last item.
    done: bool,
}

impl WatchState {
    async fn next(mut self) -> Option<(Result<WatchBatch>, WatchState)> {
        if self.done {
            return None;
        }
        loop {
            tokio::select! {
                Some(()) = self.progress.recv() => {
                    if let Err(e) = self.sender.request_progress().await {
                        return Some((Err(self.fail(format!("requesting progress: {e}"))), self));
                    }
                }
                message = self.responses.next() => {
                    let resp = match message {
                        Some(Ok(resp)) => resp,
                        Some(Err(e)) => return Some((Err(self.fail(e.to_string())), self)),
                        None => return Some((Err(self.fail("stream closed".into())), self)),
                    };
                    if resp.canceled() {
                        self.done = true;
                        return Some((self.cancellation(&resp), self));
                    }
                    if resp.created() {
                        continue;
                    }
                    return Some((Ok(self.batch(&resp)), self));
                }
            }
        }
    }

    fn fail(&mut self, reason: String) -> Error {
        self.done = true;
        Error::Remote(format!(
            "etcd watch failed before revision {}: {reason}",
            self.next_revision
        ))
    }

    fn cancellation(&self, resp: &ec::WatchResponse) -> Result<WatchBatch> {
        if resp.compact_revision() > 0 {
            self.store
                .compact_floor
                .fetch_max(resp.compact_revision(), Ordering::Relaxed);
            Err(Error::Compacted {
                requested: self.next_revision,
                compact_revision: resp.compact_revision(),
            })
        } else {
            Err(Error::Remote(format!(
                "etcd canceled the watch: {}",
                resp.cancel_reason()
            )))
        }
    }

    fn batch(&mut self, resp: &ec::WatchResponse) -> WatchBatch {
        let events: Vec<Event> = resp
            .events()
            .iter()
            .filter_map(|ev| {
                let kind = match ev.event_type() {
                    ec::EventType::Put => EventKind::Put,
                    ec::EventType::Delete => EventKind::Delete,
                };
                Some(Event {
                    kind,
                    kv: self.store.kv_from(ev.kv()?),
                    prev_kv: ev.prev_kv().map(|kv| self.store.kv_from(kv)),
                })
            })
            .collect();
        if let Some(last) = events.last() {
            self.next_revision = last.kv.mod_revision + 1;
        }
        WatchBatch {
            revision: header_revision(resp.header()),
            events,
        }
    }
}

/// The [`WatchControl`] of an etcd watch: queues a progress request for [`WatchState`].
struct ProgressRequester(mpsc::UnboundedSender<()>);

impl WatchControl for ProgressRequester {
    fn request_progress(&self) {
        // Fails only once the stream is gone, when nobody waits for progress any more.
        let _ = self.0.send(());
    }
}
