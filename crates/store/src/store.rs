//! The `Store` trait every backend implements, and the watch stream it hands out.

use std::fmt;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use async_trait::async_trait;
use futures::Stream;

use crate::error::Result;
use crate::types::*;

/// A key-value store with etcd v3's semantics: one global revision, MVCC reads at past revisions,
/// compare-and-swap transactions, watches from a revision, leases and compaction.
///
/// Every write is durable (on disk, or acknowledged by an etcd quorum) before it returns.
#[async_trait]
pub trait Store: Send + Sync + 'static {
    /// Read a key or range at the latest or a past revision.
    async fn range(&self, req: RangeRequest) -> Result<RangeResponse>;

    /// Write one key.
    async fn put(&self, req: PutRequest) -> Result<PutResponse>;

    /// Delete a key or range. Deleting nothing creates no revision.
    async fn delete(&self, req: DeleteRequest) -> Result<DeleteResponse>;

    /// Run a transaction atomically.
    async fn txn(&self, req: TxnRequest) -> Result<TxnResponse>;

    /// Watch a key or range from a revision.
    ///
    /// Returns an error only for an invalid request. A start revision that has been compacted is
    /// reported as the stream's first and only item, `Err(Error::Compacted { .. })`, as etcd does;
    /// a watcher that falls too far behind gets `Err(Error::WatcherLagged { .. })` and its stream
    /// ends. Dropping the stream cancels the watch.
    async fn watch(&self, req: WatchRequest) -> Result<WatchStream>;

    /// Discard history before `revision`: reads and watches below it fail with `Compacted`.
    /// Compacting at or below the current compact revision fails with `Compacted`; above the
    /// current revision with `FutureRevision`.
    async fn compact(&self, revision: i64) -> Result<()>;

    /// Grant a lease; `id` 0 lets the store choose one.
    async fn lease_grant(&self, id: i64, ttl_secs: i64) -> Result<LeaseGrant>;

    /// Revoke a lease, deleting every key attached to it (in one revision). Returns the store's
    /// revision afterwards.
    async fn lease_revoke(&self, id: i64) -> Result<i64>;

    /// Renew a lease to its full TTL; returns that TTL in seconds.
    async fn lease_keep_alive(&self, id: i64) -> Result<i64>;

    /// A lease's remaining TTL, and optionally its keys.
    async fn lease_time_to_live(&self, id: i64, keys: bool) -> Result<LeaseInfo>;

    /// IDs of every live lease.
    async fn lease_list(&self) -> Result<Vec<i64>>;

    /// Revision, compaction point and size.
    async fn status(&self) -> Result<StoreStatus>;

    /// The current revision: `status`'s, which a store may know without the rest.
    async fn revision(&self) -> Result<i64> {
        Ok(self.status().await?.revision)
    }
}

/// Lets the holder of a [`WatchStream`] ask for a progress notification.
pub trait WatchControl: Send + Sync {
    /// Ask the backend to send a progress notification (an empty [`WatchBatch`]) once every event
    /// up to its current revision has been delivered on this stream.
    fn request_progress(&self);
}

/// A live watch: a stream of [`WatchBatch`]es in revision order, with no gap and no duplicate.
pub struct WatchStream {
    inner: Pin<Box<dyn Stream<Item = Result<WatchBatch>> + Send>>,
    control: Arc<dyn WatchControl>,
}

impl WatchStream {
    pub fn new(
        inner: impl Stream<Item = Result<WatchBatch>> + Send + 'static,
        control: Arc<dyn WatchControl>,
    ) -> Self {
        WatchStream {
            inner: Box::pin(inner),
            control,
        }
    }

    /// Ask for a progress notification (see [`WatchControl::request_progress`]).
    pub fn request_progress(&self) {
        self.control.request_progress();
    }

    /// A handle that asks for progress notifications on this stream while another task consumes
    /// it.
    pub fn control(&self) -> Arc<dyn WatchControl> {
        self.control.clone()
    }
}

impl Stream for WatchStream {
    type Item = Result<WatchBatch>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.inner.as_mut().poll_next(cx)
    }
}

impl fmt::Debug for WatchStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WatchStream").finish_non_exhaustive()
    }
}

/// Convenience wrappers over [`Store`] for the common single-key cases.
#[async_trait]
pub trait StoreExt: Store {
    /// The latest version of one key, if present.
    async fn get(&self, key: &[u8]) -> Result<Option<KeyValue>> {
        let resp = self
            .range(RangeRequest {
                range: KeyRange::key(bytes::Bytes::copy_from_slice(key)),
                ..Default::default()
            })
            .await?;
        Ok(resp.kvs.into_iter().next())
    }
}

impl<S: Store + ?Sized> StoreExt for S {}

#[async_trait]
impl<S: Store + ?Sized> Store for Arc<S> {
    async fn range(&self, req: RangeRequest) -> Result<RangeResponse> {
        (**self).range(req).await
    }
    async fn put(&self, req: PutRequest) -> Result<PutResponse> {
        (**self).put(req).await
    }
    async fn delete(&self, req: DeleteRequest) -> Result<DeleteResponse> {
        (**self).delete(req).await
    }
    async fn txn(&self, req: TxnRequest) -> Result<TxnResponse> {
        (**self).txn(req).await
    }
    async fn watch(&self, req: WatchRequest) -> Result<WatchStream> {
        (**self).watch(req).await
    }
    async fn compact(&self, revision: i64) -> Result<()> {
        (**self).compact(revision).await
    }
    async fn lease_grant(&self, id: i64, ttl_secs: i64) -> Result<LeaseGrant> {
        (**self).lease_grant(id, ttl_secs).await
    }
    async fn lease_revoke(&self, id: i64) -> Result<i64> {
        (**self).lease_revoke(id).await
    }
    async fn lease_keep_alive(&self, id: i64) -> Result<i64> {
        (**self).lease_keep_alive(id).await
    }
    async fn lease_time_to_live(&self, id: i64, keys: bool) -> Result<LeaseInfo> {
        (**self).lease_time_to_live(id, keys).await
    }
    async fn lease_list(&self) -> Result<Vec<i64>> {
        (**self).lease_list().await
    }
    async fn status(&self) -> Result<StoreStatus> {
        (**self).status().await
    }
    async fn revision(&self) -> Result<i64> {
        (**self).revision().await
    }
}
