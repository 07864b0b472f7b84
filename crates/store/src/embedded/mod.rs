//! The embedded backend: Skiff's own durable MVCC store, in-process.
//!
//! # Layout
//! - [`index`](self::index): the in-memory MVCC index (key histories, leases, revisions).
//! - [`wal`](self::wal): the write-ahead log that makes each group commit durable.
//! - [`writer`](self::writer): the single writer thread: index updates, batches written to the log.
//! - [`syncer`](self::syncer): flushes the log (group commit), then publishes and answers; the
//!   writer thread does the same itself for a batch that nothing else is waiting behind.
//! - [`applier`](self::applier): copies logged batches into the redb file; sweeps compacted
//!   history out of it.
//! - [`disk`](self::disk): the redb file and record format.
//! - [`watch`](self::watch): the watch hub (bounded per-watcher channels, catch-up + live).
//! - [`background`](self::background): lease expiry, periodic progress and automatic compaction.
//!
//! # Concurrency
//! `Shared::index` (a `RwLock`) guards the index; only the writer thread (and the syncer, for
//! compaction chunks) takes it for writing, and only for in-memory work, never across I/O.
//! Readers read at `Shared::committed`, which a commit advances (inside the hub lock) only
//! after a batch is durable. Lock order: committer → hub → index.

mod applier;
mod background;
pub mod check;
mod disk;
mod index;
mod syncer;
mod wal;
mod watch;
mod writer;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use futures::StreamExt;
use parking_lot::{Mutex, RwLock};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use self::applier::Applier;
use self::index::{Index, Lease, ReadOptions};
use self::syncer::Committer;
use self::watch::Hub;
use self::writer::{Request, Writer};
use crate::error::{Error, Result};
use crate::store::{Store, WatchStream};
use crate::types::*;

pub use self::background::CompactionPolicy;

/// Configuration of an [`EmbeddedStore`].
#[derive(Debug, Clone)]
pub struct EmbeddedConfig {
    /// Directory holding `store.redb`; created if missing.
    pub data_dir: PathBuf,
    /// Largest value accepted in one put (etcd's `--max-request-bytes` default, 1.5 MiB).
    pub max_value_bytes: usize,
    /// When history is compacted automatically.
    pub compaction: CompactionPolicy,
    /// Batches a watcher may have queued before it is cut off as too slow.
    pub watch_buffer: usize,
    /// Interval of progress notifications for watchers that ask for them (etcd's default, 10 min).
    pub progress_interval: Duration,
    /// Shortest lease TTL in seconds; shorter requests are raised to it (etcd's minimum with
    /// default election timeouts is 2 s).
    pub min_lease_ttl: i64,
    /// How often expired leases are looked for.
    pub lease_check_interval: Duration,
    /// Bytes of `store.redb` pages kept in memory (redb's own default is 1 GiB). The file is read
    /// at start-up, by compaction, and for the values of superseded versions (reads at past
    /// revisions, watches catching up), which the OS's page cache serves as well: a small cache
    /// keeps the index from being held twice.
    pub file_cache_bytes: usize,
}

impl EmbeddedConfig {
    pub fn new(data_dir: impl Into<PathBuf>) -> Self {
        EmbeddedConfig {
            data_dir: data_dir.into(),
            max_value_bytes: 1536 * 1024,
            compaction: CompactionPolicy::default(),
            watch_buffer: 1024,
            progress_interval: Duration::from_secs(600),
            min_lease_ttl: 2,
            lease_check_interval: Duration::from_millis(500),
            file_cache_bytes: disk::FILE_CACHE_BYTES,
        }
    }
}

/// Batches written to the log but not yet synced that the writer may run ahead by.
const SYNCER_QUEUE: usize = 64;

/// State shared by the handle, the writer thread and the background tasks.
pub(crate) struct Shared {
    index: RwLock<Index>,
    /// Reads back the values the index let go of.
    file: disk::FileReader,
    committed: Arc<AtomicI64>,
    hub: Arc<Hub>,
    /// Set when a commit failed; every later write is refused with this reason.
    failed: Mutex<Option<String>>,
    size_in_use: SizeInUse,
    min_lease_ttl: i64,
}

/// Bytes of the file's pages in use, as the applier last counted them (at start-up, then after
/// `status` asked for them: at the next commit if a sweep has ended since the last count, else
/// at most once a minute), and whether `status` asked since the last count.
#[derive(Default)]
pub(crate) struct SizeInUse {
    bytes: AtomicI64,
    asked: std::sync::atomic::AtomicBool,
}

impl SizeInUse {
    /// The last count, noting that it was asked for.
    fn ask(&self) -> i64 {
        self.asked.store(true, Ordering::Relaxed);
        self.bytes.load(Ordering::Relaxed)
    }

    /// Whether `status` asked for the size since the last count.
    pub(crate) fn is_asked(&self) -> bool {
        self.asked.load(Ordering::Relaxed)
    }

    pub(crate) fn set(&self, bytes: i64) {
        self.asked.store(false, Ordering::Relaxed);
        self.bytes.store(bytes, Ordering::Relaxed);
    }
}

struct Handle {
    shared: Arc<Shared>,
    tx: mpsc::Sender<writer::Submitted>,
    config: EmbeddedConfig,
    db_path: PathBuf,
    writer: Mutex<Option<std::thread::JoinHandle<()>>>,
    tasks: Vec<tokio::task::AbortHandle>,
}

impl Drop for Handle {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// The embedded store. Cheap to clone; the store closes when the last clone is dropped.
#[derive(Clone)]
pub struct EmbeddedStore {
    inner: Arc<Handle>,
}

impl std::fmt::Debug for EmbeddedStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmbeddedStore")
            .field("data_dir", &self.inner.config.data_dir)
            .finish()
    }
}

impl EmbeddedStore {
    /// Open the store in `config.data_dir`, creating it if it does not exist. Must be called
    /// inside a Tokio runtime. Fails (naming the file) if the data is damaged.
    pub async fn open(config: EmbeddedConfig) -> Result<EmbeddedStore> {
        let dir = config.data_dir.clone();
        let cache_bytes = config.file_cache_bytes;
        let (disk, wal, loaded, mut index) = tokio::task::spawn_blocking(move || {
            std::fs::create_dir_all(&dir).map_err(|e| Error::Io {
                path: dir.display().to_string(),
                reason: e.to_string(),
            })?;
            let (wal, recovered) = wal::Wal::open(&dir)?;
            let mut index = Index::default();
            let (disk, loaded) =
                disk::Disk::open(&dir, &recovered, cache_bytes, &mut |key, entry| {
                    index.load(key, entry)
                })?;
            Ok::<_, Error>((disk, wal, loaded, index))
        })
        .await
        .map_err(|e| Error::Unavailable(format!("store open task failed: {e}")))??;

        let now = Instant::now();
        index.revision = index.revision.max(loaded.revision);
        index.compact_revision = loaded.compact_revision;
        for (id, ttl) in loaded.leases {
            // As etcd after a restart: every lease gets its full TTL again.
            let expiry = now + Duration::from_secs(ttl.max(0) as u64);
            index.leases.insert(
                id,
                Lease {
                    ttl,
                    expiry,
                    keys: Default::default(),
                },
            );
        }
        for key in index.attach_leases() {
            tracing::warn!(key = %String::from_utf8_lossy(&key), "key attached to a missing lease");
        }
        let committed = Arc::new(AtomicI64::new(index.revision));
        let compact_revision = index.compact_revision;
        let shared = Arc::new(Shared {
            index: RwLock::new(index),
            file: disk.reader(),
            hub: Arc::new(Hub::new(committed.clone())),
            committed,
            failed: Mutex::new(None),
            size_in_use: SizeInUse::default(),
            min_lease_ttl: config.min_lease_ttl,
        });

        let (to_applier, applier_rx) = applier::queue();
        let applier = Applier::new(shared.clone(), disk, config.data_dir.clone(), applier_rx);
        let applier = std::thread::Builder::new()
            .name("skiff-store-apply".into())
            .spawn(move || applier.run())
            .map_err(|e| Error::Unavailable(format!("cannot start the applier thread: {e}")))?;
        let mut committer = Committer::new(shared.clone(), to_applier, applier);
        committer.resume_purge(compact_revision);
        let (syncer, to_syncer) = syncer::syncer(committer, SYNCER_QUEUE);
        let syncer = std::thread::Builder::new()
            .name("skiff-store-sync".into())
            .spawn(move || syncer.run())
            .map_err(|e| Error::Unavailable(format!("cannot start the syncer thread: {e}")))?;
        let (tx, rx) = mpsc::channel(8192);
        let writer = Writer::new(shared.clone(), wal, rx, to_syncer, syncer);
        let writer = std::thread::Builder::new()
            .name("skiff-store-writer".into())
            .spawn(move || writer.run())
            .map_err(|e| Error::Unavailable(format!("cannot start the writer thread: {e}")))?;

        let tasks = background::spawn(&config, shared.clone(), tx.downgrade());
        let db_path = config.data_dir.join(disk::FILE_NAME);
        let handle = Handle {
            shared,
            tx,
            config,
            db_path,
            writer: Mutex::new(Some(writer)),
            tasks,
        };
        Ok(EmbeddedStore {
            inner: Arc::new(handle),
        })
    }

    /// Close the store and wait until the writer thread has finished, so the data directory can
    /// be opened again. Other clones keep the store open; then this only drops this handle.
    pub async fn close(self) {
        let Ok(handle) = Arc::try_unwrap(self.inner) else {
            return;
        };
        let writer = handle.writer.lock().take();
        drop(handle);
        if let Some(writer) = writer {
            let _ = tokio::task::spawn_blocking(move || writer.join()).await;
        }
    }

    /// Wait until every write acknowledged before the call is in the store file (`store.redb`),
    /// not only in the write-ahead log, and the file's share of every compaction requested before
    /// it has finished, so the file holds no history those compactions removed.
    pub async fn checkpoint(&self) -> Result<()> {
        self.call(|reply| Request::Checkpoint { reply }).await
    }

    fn shared(&self) -> &Shared {
        &self.inner.shared
    }

    async fn call<T>(&self, make: impl FnOnce(oneshot::Sender<Result<T>>) -> Request) -> Result<T> {
        let (reply, rx) = oneshot::channel();
        self.inner
            .tx
            .send((make(reply), writer::Origin::current()))
            .await
            .map_err(|_| Error::Unavailable("store is closed".into()))?;
        rx.await
            .map_err(|_| Error::Unavailable("store writer stopped".into()))?
    }

    fn check_put(&self, p: &PutRequest) -> Result<()> {
        if p.key.is_empty() {
            return Err(Error::EmptyKey);
        }
        let size = p.value.len();
        let limit = self.inner.config.max_value_bytes;
        if size > limit {
            return Err(Error::ValueTooLarge {
                key: String::from_utf8_lossy(&p.key).into(),
                size,
                limit,
            });
        }
        Ok(())
    }

    fn check_txn(&self, txn: &TxnRequest) -> Result<()> {
        for branch in [&txn.success, &txn.failure] {
            let mut puts: Vec<&Bytes> = Vec::new();
            for op in branch.iter() {
                match op {
                    TxnOp::Put(p) => {
                        self.check_put(p)?;
                        puts.push(&p.key);
                    }
                    TxnOp::Delete(d) if d.range.key.is_empty() => return Err(Error::EmptyKey),
                    TxnOp::Range(r) if r.range.key.is_empty() => return Err(Error::EmptyKey),
                    _ => {}
                }
            }
            // etcd's checkIntervals: no key may be put twice, or put and deleted, in one branch.
            puts.sort();
            if let Some(w) = puts.windows(2).find(|w| w[0] == w[1]) {
                return Err(duplicate(w[0]));
            }
            for op in branch.iter() {
                if let TxnOp::Delete(d) = op
                    && let Some(k) = puts.iter().find(|k| d.range.contains(k))
                {
                    return Err(duplicate(k));
                }
            }
        }
        Ok(())
    }
}

fn duplicate(key: &Bytes) -> Error {
    Error::DuplicateKey {
        key: String::from_utf8_lossy(key).into(),
    }
}

fn first_response(mut resp: TxnResponse) -> Result<TxnOpResponse> {
    resp.responses
        .pop()
        .ok_or_else(|| Error::Unavailable("empty transaction response".into()))
}

#[async_trait]
impl Store for EmbeddedStore {
    async fn range(&self, req: RangeRequest) -> Result<RangeResponse> {
        if req.range.key.is_empty() {
            return Err(Error::EmptyKey);
        }
        let ix = self.shared().index.read();
        let committed = self.shared().committed.load(Ordering::Acquire);
        let rev = if req.revision > 0 {
            req.revision
        } else {
            committed
        };
        if rev > committed {
            return Err(Error::FutureRevision {
                requested: rev,
                current: committed,
            });
        }
        if rev < ix.compact_revision {
            return Err(Error::Compacted {
                requested: rev,
                compact_revision: ix.compact_revision,
            });
        }
        let opts = ReadOptions {
            limit: req.limit,
            keys_only: req.keys_only,
            count_only: req.count_only,
        };
        let res = ix.range(&req.range, rev, opts, &mut self.shared().file.values())?;
        Ok(RangeResponse {
            revision: committed,
            kvs: res.kvs,
            more: res.more,
            count: res.count,
        })
    }

    async fn put(&self, req: PutRequest) -> Result<PutResponse> {
        self.check_put(&req)?;
        let txn = TxnRequest {
            success: vec![TxnOp::Put(req)],
            ..Default::default()
        };
        match first_response(self.call(|reply| Request::Txn(txn, reply)).await?)? {
            TxnOpResponse::Put(resp) => Ok(resp),
            other => Err(Error::Unavailable(format!(
                "unexpected response to a put: {other:?}"
            ))),
        }
    }

    async fn delete(&self, req: DeleteRequest) -> Result<DeleteResponse> {
        if req.range.key.is_empty() {
            return Err(Error::EmptyKey);
        }
        let txn = TxnRequest {
            success: vec![TxnOp::Delete(req)],
            ..Default::default()
        };
        match first_response(self.call(|reply| Request::Txn(txn, reply)).await?)? {
            TxnOpResponse::Delete(resp) => Ok(resp),
            other => Err(Error::Unavailable(format!(
                "unexpected response to a delete: {other:?}"
            ))),
        }
    }

    async fn txn(&self, req: TxnRequest) -> Result<TxnResponse> {
        self.check_txn(&req)?;
        self.call(|reply| Request::Txn(req, reply)).await
    }

    async fn watch(&self, req: WatchRequest) -> Result<WatchStream> {
        let shared = &self.inner.shared;
        let (tx, rx) = mpsc::channel(self.inner.config.watch_buffer.max(2));
        let start = req.start_revision;
        let compacted = |compact_revision| Error::Compacted {
            requested: start,
            compact_revision,
        };

        // Catch-up, phase 1 (without the hub lock): history up to the committed revision.
        let mut catch_up = Vec::new();
        let mut next = start;
        if start > 0 {
            let ix = shared.index.read();
            if start < ix.compact_revision {
                let err = compacted(ix.compact_revision);
                return Ok(WatchStream::new(
                    futures::stream::iter([Err(err)]),
                    Arc::new(NoControl),
                ));
            }
            let upto = shared.committed.load(Ordering::Acquire);
            catch_up = ix.history(
                &req.range,
                start,
                upto,
                req.prev_kv,
                &mut shared.file.values(),
            )?;
            next = next.max(upto + 1);
        }
        // Phase 2 (under the hub lock, so no commit slips between catch-up and registration).
        let registration = shared.hub.begin_registration();
        let committed = registration.committed();
        if start > 0 && committed >= next {
            let ix = shared.index.read();
            if next < ix.compact_revision {
                let err = compacted(ix.compact_revision);
                return Ok(WatchStream::new(
                    futures::stream::iter([Err(err)]),
                    Arc::new(NoControl),
                ));
            }
            catch_up.extend(ix.history(
                &req.range,
                next,
                committed,
                req.prev_kv,
                &mut shared.file.values(),
            )?);
        }
        let id = registration.register(
            req.range.clone(),
            start,
            req.prev_kv,
            req.progress_notify,
            tx,
        );

        let batches: Vec<Result<WatchBatch>> = catch_up
            .chunks(1000)
            .map(|events| {
                Ok(WatchBatch {
                    revision: committed,
                    events: events.to_vec(),
                })
            })
            .collect();
        let live = tokio_stream::wrappers::ReceiverStream::new(rx);
        let control = Arc::new(watch::Control {
            hub: shared.hub.clone(),
            id,
        });
        Ok(WatchStream::new(
            futures::stream::iter(batches).chain(live),
            control,
        ))
    }

    async fn compact(&self, revision: i64) -> Result<()> {
        self.call(|reply| Request::Compact { revision, reply })
            .await
    }

    async fn lease_grant(&self, id: i64, ttl_secs: i64) -> Result<LeaseGrant> {
        let now = Instant::now();
        self.call(|reply| Request::LeaseGrant {
            id,
            ttl: ttl_secs,
            now,
            reply,
        })
        .await
    }

    async fn lease_revoke(&self, id: i64) -> Result<i64> {
        self.call(|reply| Request::LeaseRevoke {
            id,
            expired_at: None,
            reply,
        })
        .await
    }

    async fn lease_keep_alive(&self, id: i64) -> Result<i64> {
        let mut ix = self.shared().index.write();
        let lease = ix.leases.get_mut(&id).ok_or(Error::LeaseNotFound { id })?;
        lease.expiry = Instant::now() + Duration::from_secs(lease.ttl as u64);
        Ok(lease.ttl)
    }

    async fn lease_time_to_live(&self, id: i64, keys: bool) -> Result<LeaseInfo> {
        let ix = self.shared().index.read();
        let lease = ix.leases.get(&id).ok_or(Error::LeaseNotFound { id })?;
        let remaining = lease
            .expiry
            .saturating_duration_since(Instant::now())
            .as_secs() as i64;
        let mut attached: Vec<Bytes> = if keys {
            lease.keys.iter().cloned().collect()
        } else {
            Vec::new()
        };
        attached.sort();
        Ok(LeaseInfo {
            id,
            ttl: remaining,
            granted_ttl: lease.ttl,
            keys: attached,
        })
    }

    async fn lease_list(&self) -> Result<Vec<i64>> {
        let mut ids: Vec<i64> = self.shared().index.read().leases.keys().copied().collect();
        ids.sort();
        Ok(ids)
    }

    async fn status(&self) -> Result<StoreStatus> {
        let compact_revision = self.shared().index.read().compact_revision;
        let db_size = std::fs::metadata(&self.inner.db_path)
            .map(|m| m.len() as i64)
            .unwrap_or(0);
        Ok(StoreStatus {
            revision: self.shared().committed.load(Ordering::Acquire),
            compact_revision,
            db_size,
            db_size_in_use: self.shared().size_in_use.ask().min(db_size),
            version: concat!("skiff-store ", env!("CARGO_PKG_VERSION")).to_string(),
        })
    }

    async fn revision(&self) -> Result<i64> {
        Ok(self.shared().committed.load(Ordering::Acquire))
    }
}

/// Control for a stream that has already ended (compacted start revision).
struct NoControl;

impl crate::store::WatchControl for NoControl {
    fn request_progress(&self) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn put(store: &EmbeddedStore, key: &str, value: &str) -> i64 {
        let req = PutRequest {
            key: key.to_owned().into(),
            value: value.to_owned().into(),
            ..Default::default()
        };
        store.put(req).await.unwrap().revision
    }

    fn at(key: &'static str, revision: i64) -> RangeRequest {
        RangeRequest {
            range: KeyRange::key(key),
            revision,
            ..Default::default()
        }
    }

    #[tokio::test]
    async fn superseded_values_in_the_file_are_let_go_of_and_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let store = EmbeddedStore::open(EmbeddedConfig::new(dir.path()))
            .await
            .unwrap();
        let first = put(&store, "/a", "1").await;
        let second = put(&store, "/a", "2").await;
        store.checkpoint().await.unwrap();
        let held = |rev| store.shared().index.read().holds_value(b"/a", rev);
        assert_eq!(held(first), Some(false), "superseded and in the file");
        assert_eq!(held(second), Some(true), "the head is kept");
        let third = put(&store, "/a", "3").await;
        assert_eq!(held(second), Some(false), "let go of as it is superseded");

        // a read at a past revision, a watch catching up (with previous values), and a read at
        // a past revision inside a transaction all get the values back from the file
        let old = store.range(at("/a", first)).await.unwrap();
        assert_eq!(&old.kvs[0].value[..], b"1");
        let watch = WatchRequest {
            range: KeyRange::key("/a"),
            start_revision: second,
            prev_kv: true,
            ..Default::default()
        };
        let batch = store
            .watch(watch)
            .await
            .unwrap()
            .next()
            .await
            .unwrap()
            .unwrap();
        let seen: Vec<(&[u8], &[u8])> = batch
            .events
            .iter()
            .map(|e| (&e.kv.value[..], &e.prev_kv.as_ref().unwrap().value[..]))
            .collect();
        assert_eq!(seen, [(&b"2"[..], &b"1"[..]), (b"3", b"2")]);
        let txn = TxnRequest {
            success: vec![
                TxnOp::Range(at("/a", second)),
                TxnOp::Put(PutRequest {
                    key: "/a".into(),
                    value: "4".into(),
                    ..Default::default()
                }),
                TxnOp::Range(at("/a", 0)),
            ],
            ..Default::default()
        };
        let values: Vec<Bytes> = store
            .txn(txn)
            .await
            .unwrap()
            .responses
            .into_iter()
            .filter_map(|r| match r {
                TxnOpResponse::Range(r) => Some(r.kvs[0].value.clone()),
                _ => None,
            })
            .collect();
        assert_eq!(values, [&b"2"[..], b"4"]);
        assert!(third < store.status().await.unwrap().revision);
    }
}
