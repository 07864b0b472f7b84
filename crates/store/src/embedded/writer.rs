//! The writer thread: the only code that changes the index (besides the syncer's compaction
//! chunks), and the one that writes the log.
//!
//! Requests queue on a channel. The thread takes everything queued (up to [`MAX_BATCH`]), applies
//! it to the index one request after another (so each transaction sees the ones before it),
//! writes the whole batch to the write-ahead log as one frame, and hands it to the syncer thread
//! (`syncer.rs`), which makes it durable and only then answers. While the syncer waits for one
//! `fdatasync`, this thread already applies and writes the next batch, so a commit's CPU work
//! overlaps the previous commit's flush (group commit, pipelined). When no other request is
//! waiting and the syncer has nothing in hand, there is nothing to overlap, and this thread
//! commits the batch itself (`Handle::submit`). Nothing is acknowledged before it is on disk,
//! and readers, which read at the committed revision, never see a write before it is durable;
//! batches are committed one at a time in log order, so a transaction that read an earlier
//! batch's writes is never answered before that batch is durable.
//!
//! If the log cannot be written, the store stops accepting writes (etcd panics in the same
//! situation): what is on disk stays consistent and every later write gets `Unavailable`.

use std::sync::Arc;

use bytes::Bytes;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use super::Shared;
use super::disk::{Batch, encode, encode_batch};
use super::index::{Entry, Index, Lease, NoFile, PutData, ReadOptions, Value, Values};
use super::syncer::{self, Committing, Completion};
use super::wal::Wal;
use crate::error::{Error, Result};
use crate::types::*;

/// Most requests applied in one commit.
const MAX_BATCH: usize = 4096;

/// A write request for the writer thread, with where to send its answer.
pub(crate) enum Request {
    Txn(TxnRequest, oneshot::Sender<Result<TxnResponse>>),
    LeaseGrant {
        id: i64,
        ttl: i64,
        now: Instant,
        reply: oneshot::Sender<Result<LeaseGrant>>,
    },
    /// Revoke a lease; with `expired_at`, only if it is still expired at that instant (a
    /// keep-alive may have raced with the expiry check).
    LeaseRevoke {
        id: i64,
        expired_at: Option<Instant>,
        reply: oneshot::Sender<Result<i64>>,
    },
    Compact {
        revision: i64,
        reply: oneshot::Sender<Result<()>>,
    },
    /// Answer once every write before it is in the redb file and compaction requested before it
    /// is physically done (see [`super::applier::Message::Checkpoint`]).
    Checkpoint {
        reply: oneshot::Sender<Result<()>>,
    },
}

/// Where a request was submitted: the runtime, and the thread on it, whose task awaits the
/// answer (see `answer` in `syncer.rs`).
pub(crate) struct Origin {
    pub(super) thread: std::thread::ThreadId,
    pub(super) runtime: tokio::runtime::Handle,
}

impl Origin {
    /// The caller's, when it runs on a Tokio runtime.
    pub(crate) fn current() -> Option<Origin> {
        let runtime = tokio::runtime::Handle::try_current().ok()?;
        Some(Origin {
            thread: std::thread::current().id(),
            runtime,
        })
    }
}

/// A request as it travels to the writer thread.
pub(crate) type Submitted = (Request, Option<Origin>);

fn completion<T: Send + 'static>(tx: oneshot::Sender<Result<T>>, result: Result<T>) -> Completion {
    Box::new(move |failure| {
        let result = match failure {
            None => result,
            Some(reason) => Err(Error::Unavailable(reason.to_string())),
        };
        let _ = tx.send(result);
    })
}

pub(crate) struct Writer {
    shared: Arc<Shared>,
    wal: Wal,
    rx: mpsc::Receiver<Submitted>,
    syncer: syncer::Handle,
    syncer_thread: Option<std::thread::JoinHandle<()>>,
}

impl Writer {
    pub fn new(
        shared: Arc<Shared>,
        wal: Wal,
        rx: mpsc::Receiver<Submitted>,
        syncer: syncer::Handle,
        syncer_thread: std::thread::JoinHandle<()>,
    ) -> Self {
        Writer {
            shared,
            wal,
            rx,
            syncer,
            syncer_thread: Some(syncer_thread),
        }
    }

    /// Run until every sender is gone, then wait for the syncer (and the applier) to finish.
    pub fn run(mut self) {
        while let Some(first) = self.rx.blocking_recv() {
            let mut requests = vec![first];
            while requests.len() < MAX_BATCH {
                match self.rx.try_recv() {
                    Ok(req) => requests.push(req),
                    Err(_) => break,
                }
            }
            self.process(requests);
        }
        let Writer {
            syncer,
            syncer_thread,
            ..
        } = self;
        drop(syncer);
        if let Some(thread) = syncer_thread {
            let _ = thread.join();
        }
    }

    fn process(&mut self, requests: Vec<Submitted>) {
        if let Some(reason) = self.shared.failed.lock().clone() {
            for (req, _) in requests {
                reject(req, &reason);
            }
            return;
        }
        let mut committing = Committing::default();
        {
            let shared = self.shared.clone();
            let mut ix = shared.index.write();
            for (req, origin) in requests {
                let done = self.apply(&mut ix, req, &mut committing);
                committing.done.push((origin, done));
            }
            committing.batch.revision = ix.revision;
        }
        if !committing.batch.is_empty() {
            match self.wal.write(&encode_batch(&committing.batch)) {
                Ok(logged) => committing.logged = Some(logged),
                Err(e) => {
                    let reason =
                        format!("logging revision {} failed: {e}", committing.batch.revision);
                    tracing::error!(%reason, "store commit failed; refusing further writes");
                    *self.shared.failed.lock() = Some(reason);
                }
            }
        }
        self.syncer.submit(committing, !self.rx.is_empty());
    }

    fn apply(&mut self, ix: &mut Index, req: Request, committing: &mut Committing) -> Completion {
        let Committing {
            batch,
            events,
            checkpoints,
            ..
        } = committing;
        match req {
            Request::Txn(txn, reply) => {
                let mut values = self.shared.file.values();
                completion(reply, apply_txn(ix, txn, batch, events, &mut values))
            }
            Request::LeaseGrant {
                id,
                ttl,
                now,
                reply,
            } => completion(reply, self.grant(ix, id, ttl, now, batch)),
            Request::LeaseRevoke {
                id,
                expired_at,
                reply,
            } => completion(reply, revoke(ix, id, expired_at, batch, events)),
            Request::Checkpoint { reply } => {
                // answered by the applier, once the syncer has handed it over
                checkpoints.push(reply);
                Box::new(|_| {})
            }
            Request::Compact { revision, reply } => {
                let result = if revision <= ix.compact_revision {
                    Err(Error::Compacted {
                        requested: revision,
                        compact_revision: ix.compact_revision,
                    })
                } else if revision > ix.revision {
                    Err(Error::FutureRevision {
                        requested: revision,
                        current: ix.revision,
                    })
                } else {
                    // the syncer drops the history once this is durable
                    ix.compact_revision = revision;
                    batch.compact_revision = Some(revision);
                    Ok(())
                };
                completion(reply, result)
            }
        }
    }

    fn grant(
        &self,
        ix: &mut Index,
        id: i64,
        ttl: i64,
        now: Instant,
        batch: &mut Batch,
    ) -> Result<LeaseGrant> {
        if ttl < 0 {
            return Err(Error::InvalidArgument(format!(
                "lease ttl must not be negative, got {ttl}"
            )));
        }
        let id = if id != 0 { id } else { fresh_lease_id(ix) };
        if ix.leases.contains_key(&id) {
            return Err(Error::LeaseExists { id });
        }
        let ttl = ttl.max(self.shared.min_lease_ttl);
        let expiry = now + std::time::Duration::from_secs(ttl as u64);
        ix.leases.insert(
            id,
            Lease {
                ttl,
                expiry,
                keys: Default::default(),
            },
        );
        batch.leases_granted.push((id, ttl));
        Ok(LeaseGrant { id, ttl })
    }
}

fn reject(req: Request, reason: &str) {
    let err = || Error::Unavailable(reason.to_string());
    match req {
        Request::Txn(_, reply) => drop(reply.send(Err(err()))),
        Request::LeaseGrant { reply, .. } => drop(reply.send(Err(err()))),
        Request::LeaseRevoke { reply, .. } => drop(reply.send(Err(err()))),
        Request::Compact { reply, .. } => drop(reply.send(Err(err()))),
        Request::Checkpoint { reply } => drop(reply.send(Err(err()))),
    }
}

/// A positive lease ID not in use, derived from the clock like etcd's ID generator.
fn fresh_lease_id(ix: &Index) -> i64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or(1);
    let mut id = (nanos & 0x3fff_ffff_ffff_ffff).max(1);
    while ix.leases.contains_key(&id) {
        id += 1;
    }
    id
}

fn record(batch: &mut Batch, event: &Event, sub: u32) {
    let kv = &event.kv;
    let put = match event.kind {
        EventKind::Put => Some(PutData {
            value: Value::Held(kv.value.clone()),
            create_revision: kv.create_revision,
            version: kv.version,
            lease: kv.lease,
        }),
        EventKind::Delete => None,
    };
    let entry = Entry {
        rev: kv.mod_revision,
        sub,
        put,
    };
    batch
        .records
        .push(((entry.rev, sub), encode(&kv.key, &entry)));
}

/// Whether a compare holds against the head of the index (etcd's `applyCompare`).
fn compare_holds(ix: &Index, c: &Compare) -> Result<bool> {
    let kvs: Vec<KeyValue> = if c.range.is_single() {
        ix.latest(&c.range.key).into_iter().collect()
    } else {
        // the head's values are all in memory
        ix.range(&c.range, ix.revision, ReadOptions::default(), &mut NoFile)?
            .kvs
    };
    if kvs.is_empty() {
        // etcd: a value compare on a missing key always fails; other targets compare with zero.
        return Ok(
            !matches!(c.target, CompareTarget::Value(_)) && compare_kv(c, &KeyValue::default())
        );
    }
    Ok(kvs.iter().all(|kv| compare_kv(c, kv)))
}

fn compare_kv(c: &Compare, kv: &KeyValue) -> bool {
    use std::cmp::Ordering as O;
    let ord = match &c.target {
        CompareTarget::Version(v) => kv.version.cmp(v),
        CompareTarget::CreateRevision(v) => kv.create_revision.cmp(v),
        CompareTarget::ModRevision(v) => kv.mod_revision.cmp(v),
        CompareTarget::Value(v) => kv.value[..].cmp(&v[..]),
        CompareTarget::Lease(v) => kv.lease.cmp(v),
    };
    match c.op {
        CompareOp::Equal => ord == O::Equal,
        CompareOp::Greater => ord == O::Greater,
        CompareOp::Less => ord == O::Less,
        CompareOp::NotEqual => ord != O::Equal,
    }
}

/// Check a branch before applying any of it, so a transaction is all or nothing.
fn validate(ix: &Index, ops: &[TxnOp]) -> Result<()> {
    for op in ops {
        match op {
            TxnOp::Put(p) if p.lease != 0 && !ix.leases.contains_key(&p.lease) => {
                return Err(Error::LeaseNotFound { id: p.lease });
            }
            TxnOp::Range(r) if r.revision > ix.revision => {
                return Err(Error::FutureRevision {
                    requested: r.revision,
                    current: ix.revision,
                });
            }
            TxnOp::Range(r) if r.revision > 0 && r.revision < ix.compact_revision => {
                return Err(Error::Compacted {
                    requested: r.revision,
                    compact_revision: ix.compact_revision,
                });
            }
            _ => {}
        }
    }
    Ok(())
}

fn apply_txn(
    ix: &mut Index,
    txn: TxnRequest,
    batch: &mut Batch,
    events: &mut Vec<Event>,
    values: &mut dyn Values,
) -> Result<TxnResponse> {
    let mut succeeded = true;
    for c in &txn.compare {
        if !compare_holds(ix, c)? {
            succeeded = false;
            break;
        }
    }
    let ops = if succeeded { txn.success } else { txn.failure };
    validate(ix, &ops)?;
    let rev = ix.revision + 1;
    let read_options = |r: &RangeRequest| ReadOptions {
        limit: r.limit,
        keys_only: r.keys_only,
        count_only: r.count_only,
    };
    // Reads at a past revision may need the store file, and may fail: they are done before any
    // write, so that a transaction is all or nothing (this transaction's writes are not in them).
    let mut past = Vec::with_capacity(ops.len());
    for op in &ops {
        past.push(match op {
            TxnOp::Range(r) if r.revision > 0 => {
                Some(ix.range(&r.range, r.revision, read_options(r), values)?)
            }
            _ => None,
        });
    }
    let mut sub = 0u32;
    let mut responses = Vec::with_capacity(ops.len());
    for (op, past) in ops.into_iter().zip(past) {
        match op {
            TxnOp::Range(r) => {
                // Reads inside a transaction see the transaction's earlier writes, which are
                // the head: every value there is in memory.
                let res = match past {
                    Some(res) => res,
                    None => ix.range(&r.range, rev, read_options(&r), &mut NoFile)?,
                };
                responses.push(TxnOpResponse::Range(RangeResponse {
                    revision: 0,
                    kvs: res.kvs,
                    more: res.more,
                    count: res.count,
                }));
            }
            TxnOp::Put(p) => {
                let event = ix.put(p.key, p.value, p.lease, rev, sub);
                record(batch, &event, sub);
                sub += 1;
                let prev_kv = if p.prev_kv {
                    event.prev_kv.clone()
                } else {
                    None
                };
                responses.push(TxnOpResponse::Put(PutResponse {
                    revision: rev,
                    prev_kv,
                }));
                events.push(event);
            }
            TxnOp::Delete(d) => {
                let mut resp = DeleteResponse::default();
                for key in ix.live_keys(&d.range) {
                    let event = ix.delete(&key, rev, sub).expect("key is live");
                    record(batch, &event, sub);
                    sub += 1;
                    resp.deleted += 1;
                    if d.prev_kv {
                        resp.prev_kvs.extend(event.prev_kv.clone());
                    }
                    events.push(event);
                }
                responses.push(TxnOpResponse::Delete(resp));
            }
        }
    }
    if sub > 0 {
        ix.revision = rev;
    }
    let revision = ix.revision;
    for r in &mut responses {
        match r {
            TxnOpResponse::Range(r) => r.revision = revision,
            TxnOpResponse::Put(r) => r.revision = revision,
            TxnOpResponse::Delete(r) => r.revision = revision,
        }
    }
    Ok(TxnResponse {
        revision,
        succeeded,
        responses,
    })
}

fn revoke(
    ix: &mut Index,
    id: i64,
    expired_at: Option<Instant>,
    batch: &mut Batch,
    events: &mut Vec<Event>,
) -> Result<i64> {
    let Some(lease) = ix.leases.get(&id) else {
        return Err(Error::LeaseNotFound { id });
    };
    if let Some(now) = expired_at
        && lease.expiry > now
    {
        return Ok(ix.revision); // kept alive meanwhile
    }
    let mut keys: Vec<Bytes> = lease.keys.iter().cloned().collect();
    keys.sort();
    let rev = ix.revision + 1;
    let mut sub = 0u32;
    for key in keys {
        if let Some(event) = ix.delete(&key, rev, sub) {
            record(batch, &event, sub);
            sub += 1;
            events.push(event);
        }
    }
    if sub > 0 {
        ix.revision = rev;
    }
    ix.leases.remove(&id);
    batch.leases_removed.push(id);
    Ok(ix.revision)
}
