//! The etcd backend: [`EtcdStore`] implements [`Store`] on a real etcd v3 cluster through
//! `etcd-client`, keeping every key under a prefix and mapping etcd's errors onto [`Error`].
//!
//! Keys, ranges, compares, watches and lease key lists are translated into the prefix on the way
//! in and stripped of it on the way out; a range end of `[0]` ("to the end") becomes the end of
//! the prefix. Leases are not namespaced by etcd, so `lease_list` shows every lease of the cluster.
//!
//! etcd does not report its compact revision in `Status` or in a compacted read's error, so
//! [`EtcdStore`] finds it by probing: etcd refuses a read below its compact revision, so the
//! compact revision is the oldest revision a read still accepts (a binary search over count-only
//! reads of one key, starting from the highest compact revision this store has seen).
//!
//! Each [`Store::watch`] opens its own gRPC watch stream and returns once etcd has acknowledged
//! it; the acknowledgement is not surfaced. Progress answers become empty batches. etcd before
//! 3.4.25 / 3.5.8 answers a progress request at once with its current revision, even while a
//! watch from a past revision is still replaying older events (etcd issue 15220): on those
//! versions a progress batch is only trustworthy once the replay has been read.
//!
//! # Layout
//! - `failure`: which etcd failure an `etcd-client` error is, and what the request was about.
//! - `watch`: one gRPC watch stream per [`WatchStream`].

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use etcd_client as ec;

use crate::error::{Error, Result};
use crate::store::{Store, WatchStream};
use crate::types::*;
use failure::{About, ETCD_DEFAULT_MAX_REQUEST_BYTES, Failure, classify};

mod failure;
mod watch;

/// HTTP/2 keep-alive on the connection while streams (watches) are open, so a dead etcd is
/// noticed: ping interval, then how long to wait for the answer.
const KEEP_ALIVE: (Duration, Duration) = (Duration::from_secs(30), Duration::from_secs(10));

/// The largest response this client accepts (a list of many objects can exceed tonic's 4 MiB
/// default); etcd itself sends up to `math.MaxInt32`.
const MAX_RESPONSE_BYTES: usize = i32::MAX as usize;

/// A [`Store`] backed by a real etcd v3 cluster, every key living under `prefix`.
#[derive(Clone)]
pub struct EtcdStore {
    client: ec::Client,
    prefix: Bytes,
    /// Highest compact revision seen so far: where the compact-revision search starts.
    /// Compaction only moves forward, so this is never above etcd's own.
    compact_floor: Arc<AtomicI64>,
}

impl std::fmt::Debug for EtcdStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdStore")
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

impl EtcdStore {
    /// Connect to etcd at `endpoints` (`host:port` or `http://host:port`), storing every key
    /// under `prefix` (may be empty). The connection is made lazily; this fails only for
    /// malformed endpoints.
    pub async fn connect(
        endpoints: &[impl AsRef<str>],
        prefix: impl Into<Bytes>,
    ) -> Result<EtcdStore> {
        let endpoints: Vec<&str> = endpoints.iter().map(AsRef::as_ref).collect();
        let options = ec::ConnectOptions::new()
            .with_keep_alive(KEEP_ALIVE.0, KEEP_ALIVE.1)
            .with_keep_alive_while_idle(false);
        let failed = |e: &dyn std::fmt::Display| {
            Error::Remote(format!("connecting to etcd at {endpoints:?}: {e}"))
        };
        let client = match endpoints[..] {
            // one endpoint needs no balancing: a plain tonic channel saves etcd-client's
            // load balancer (and its ready-polling) on every request
            [endpoint] => {
                let url = match endpoint.contains("://") {
                    true => endpoint.to_string(),
                    false => format!("http://{endpoint}"),
                };
                let channel = tonic::transport::Endpoint::from_shared(url)
                    .map_err(|e| failed(&e))?
                    .http2_keep_alive_interval(KEEP_ALIVE.0)
                    .keep_alive_timeout(KEEP_ALIVE.1)
                    .keep_alive_while_idle(false)
                    .connect_lazy();
                ec::Client::from_channel(ec::Channel::Tonic(channel), Some(options)).await
            }
            _ => ec::Client::connect(&endpoints, Some(options)).await,
        }
        .map_err(|e| failed(&e))?;
        Ok(EtcdStore {
            client,
            prefix: prefix.into(),
            compact_floor: Arc::new(AtomicI64::new(0)),
        })
    }

    /// The prefix every key of this store lives under.
    pub fn prefix(&self) -> &Bytes {
        &self.prefix
    }

    fn kv(&self) -> ec::KvClient {
        self.client
            .kv_client()
            .max_decoding_message_size(MAX_RESPONSE_BYTES)
    }

    fn full_key(&self, key: &[u8]) -> Vec<u8> {
        [&self.prefix[..], key].concat()
    }

    /// A range in etcd's terms, under the prefix. An empty key is refused whatever the range
    /// end, as etcd does (`KeyRange::prefix("")` is `[0]`..`[0]`, which becomes `prefix + [0]`..
    /// the end of the prefix: every key of this store, but not a key equal to the prefix).
    fn full_range(&self, range: &KeyRange) -> Result<(Vec<u8>, Vec<u8>)> {
        if range.key.is_empty() {
            return Err(Error::EmptyKey);
        }
        let key = self.full_key(&range.key);
        let end = if range.range_end.is_empty() {
            Vec::new()
        } else if range.range_end[..] == [0] {
            if self.prefix.is_empty() {
                vec![0]
            } else {
                prefix_end(&self.prefix).to_vec()
            }
        } else {
            self.full_key(&range.range_end)
        };
        Ok((key, end))
    }

    fn strip(&self, key: &[u8]) -> Bytes {
        Bytes::copy_from_slice(key.strip_prefix(&self.prefix[..]).unwrap_or(key))
    }

    fn kv_from(&self, kv: &ec::KeyValue) -> KeyValue {
        KeyValue {
            key: self.strip(kv.key()),
            value: Bytes::copy_from_slice(kv.value()),
            create_revision: kv.create_revision(),
            mod_revision: kv.mod_revision(),
            version: kv.version(),
            lease: kv.lease(),
        }
    }

    fn get_options(&self, req: &RangeRequest) -> Result<(Vec<u8>, ec::GetOptions)> {
        let (key, end) = self.full_range(&req.range)?;
        let mut opts = ec::GetOptions::new()
            .with_limit(req.limit)
            .with_revision(req.revision);
        if !end.is_empty() {
            opts = opts.with_range(end);
        }
        if req.keys_only {
            opts = opts.with_keys_only();
        }
        if req.count_only {
            opts = opts.with_count_only();
        }
        Ok((key, opts))
    }

    fn put_options(req: &PutRequest) -> ec::PutOptions {
        let opts = ec::PutOptions::new().with_lease(req.lease);
        if req.prev_kv {
            opts.with_prev_key()
        } else {
            opts
        }
    }

    fn delete_options(&self, req: &DeleteRequest) -> Result<(Vec<u8>, ec::DeleteOptions)> {
        let (key, end) = self.full_range(&req.range)?;
        let mut opts = ec::DeleteOptions::new();
        if !end.is_empty() {
            opts = opts.with_range(end);
        }
        if req.prev_kv {
            opts = opts.with_prev_key();
        }
        Ok((key, opts))
    }

    fn range_response(&self, resp: &ec::GetResponse) -> RangeResponse {
        RangeResponse {
            revision: header_revision(resp.header()),
            kvs: resp.kvs().iter().map(|kv| self.kv_from(kv)).collect(),
            more: resp.more(),
            count: resp.count(),
        }
    }

    fn put_response(&self, resp: &ec::PutResponse) -> PutResponse {
        PutResponse {
            revision: header_revision(resp.header()),
            prev_kv: resp.prev_key().map(|kv| self.kv_from(kv)),
        }
    }

    fn delete_response(&self, resp: &ec::DeleteResponse) -> DeleteResponse {
        DeleteResponse {
            revision: header_revision(resp.header()),
            deleted: resp.deleted(),
            prev_kvs: resp.prev_kvs().iter().map(|kv| self.kv_from(kv)).collect(),
        }
    }

    fn txn_op(&self, op: &TxnOp) -> Result<ec::TxnOp> {
        Ok(match op {
            TxnOp::Range(req) => {
                let (key, opts) = self.get_options(req)?;
                ec::TxnOp::get(key, Some(opts))
            }
            TxnOp::Put(req) => {
                if req.key.is_empty() {
                    return Err(Error::EmptyKey);
                }
                ec::TxnOp::put(
                    self.full_key(&req.key),
                    req.value.to_vec(),
                    Some(Self::put_options(req)),
                )
            }
            TxnOp::Delete(req) => {
                let (key, opts) = self.delete_options(req)?;
                ec::TxnOp::delete(key, Some(opts))
            }
        })
    }

    fn compare(&self, cmp: &Compare) -> Result<ec::Compare> {
        let (key, end) = self.full_range(&cmp.range)?;
        let op = match cmp.op {
            CompareOp::Equal => ec::CompareOp::Equal,
            CompareOp::Greater => ec::CompareOp::Greater,
            CompareOp::Less => ec::CompareOp::Less,
            CompareOp::NotEqual => ec::CompareOp::NotEqual,
        };
        let compare = match &cmp.target {
            CompareTarget::Version(v) => ec::Compare::version(key, op, *v),
            CompareTarget::CreateRevision(r) => ec::Compare::create_revision(key, op, *r),
            CompareTarget::ModRevision(r) => ec::Compare::mod_revision(key, op, *r),
            CompareTarget::Value(v) => ec::Compare::value(key, op, v.to_vec()),
            CompareTarget::Lease(l) => ec::Compare::lease(key, op, *l),
        };
        Ok(if end.is_empty() {
            compare
        } else {
            compare.with_range(end)
        })
    }

    /// The store's current revision, from a count-only read of one key.
    async fn current_revision(&self) -> Result<i64> {
        let resp = self
            .kv()
            .get(
                self.probe_key(),
                Some(ec::GetOptions::new().with_count_only()),
            )
            .await;
        Ok(header_revision(
            resp.map_err(|e| Error::Remote(e.to_string()))?.header(),
        ))
    }

    fn probe_key(&self) -> Vec<u8> {
        if self.prefix.is_empty() {
            vec![0]
        } else {
            self.prefix.to_vec()
        }
    }

    /// Whether etcd still serves reads at `revision` (false once it is below the compact revision).
    async fn readable_at(&self, revision: i64) -> Result<bool> {
        let opts = ec::GetOptions::new()
            .with_count_only()
            .with_revision(revision);
        match self.kv().get(self.probe_key(), Some(opts)).await {
            Ok(_) => Ok(true),
            Err(e) if matches!(classify(&e), Failure::Compacted) => Ok(false),
            Err(e) => Err(Error::Remote(e.to_string())),
        }
    }

    /// etcd's compact revision: the oldest revision it still reads (0 if it never compacted
    /// beyond revision 1). See the module docs.
    async fn compact_revision(&self) -> Result<i64> {
        let floor = self.compact_floor.load(Ordering::Relaxed);
        let mut low = floor.max(1);
        if self.readable_at(low).await? {
            return Ok(if low == 1 { floor } else { low });
        }
        // Invariant: `low` is unreadable, `high` readable (the current revision always is).
        let mut high = self.current_revision().await?;
        while high - low > 1 {
            let mid = low + (high - low) / 2;
            if self.readable_at(mid).await? {
                high = mid;
            } else {
                low = mid;
            }
        }
        self.compact_floor.fetch_max(high, Ordering::Relaxed);
        Ok(high)
    }

    /// Turn an etcd error into the crate's, using what the request was about to name the
    /// revision, key or lease involved.
    async fn error(&self, err: ec::Error, about: About<'_>) -> Error {
        match classify(&err) {
            Failure::Compacted => match self.compact_revision().await {
                Ok(compact_revision) => Error::Compacted {
                    requested: about.revision(),
                    compact_revision,
                },
                Err(e) => e,
            },
            Failure::FutureRevision => match self.current_revision().await {
                Ok(current) => Error::FutureRevision {
                    requested: about.revision(),
                    current,
                },
                Err(e) => e,
            },
            Failure::EmptyKey => Error::EmptyKey,
            Failure::TooLarge { limit } => {
                let (key, size) = about.largest_value();
                Error::ValueTooLarge {
                    key: String::from_utf8_lossy(&key).into_owned(),
                    size,
                    limit: limit.unwrap_or(ETCD_DEFAULT_MAX_REQUEST_BYTES),
                }
            }
            Failure::DuplicateKey => Error::DuplicateKey {
                key: String::from_utf8_lossy(&about.duplicate_key()).into_owned(),
            },
            Failure::LeaseNotFound => Error::LeaseNotFound { id: about.lease() },
            Failure::LeaseExists => Error::LeaseExists { id: about.lease() },
            Failure::InvalidArgument(msg) => Error::InvalidArgument(msg),
            Failure::Unavailable => Error::Unavailable(err.to_string()),
            Failure::Other => Error::Remote(err.to_string()),
        }
    }
}

#[async_trait]
impl Store for EtcdStore {
    async fn range(&self, req: RangeRequest) -> Result<RangeResponse> {
        let (key, opts) = self.get_options(&req)?;
        match self.kv().get(key, Some(opts)).await {
            Ok(resp) => Ok(self.range_response(&resp)),
            Err(e) => Err(self.error(e, About::Range(&req)).await),
        }
    }

    async fn put(&self, req: PutRequest) -> Result<PutResponse> {
        if req.key.is_empty() {
            return Err(Error::EmptyKey);
        }
        let key = self.full_key(&req.key);
        match self
            .kv()
            .put(key, req.value.to_vec(), Some(Self::put_options(&req)))
            .await
        {
            Ok(resp) => Ok(self.put_response(&resp)),
            Err(e) => Err(self.error(e, About::Put(&req)).await),
        }
    }

    async fn delete(&self, req: DeleteRequest) -> Result<DeleteResponse> {
        let (key, opts) = self.delete_options(&req)?;
        match self.kv().delete(key, Some(opts)).await {
            Ok(resp) => Ok(self.delete_response(&resp)),
            Err(e) => Err(self.error(e, About::Other).await),
        }
    }

    async fn txn(&self, req: TxnRequest) -> Result<TxnResponse> {
        let compares = req
            .compare
            .iter()
            .map(|c| self.compare(c))
            .collect::<Result<Vec<_>>>()?;
        let success = req
            .success
            .iter()
            .map(|op| self.txn_op(op))
            .collect::<Result<Vec<_>>>()?;
        let failure = req
            .failure
            .iter()
            .map(|op| self.txn_op(op))
            .collect::<Result<Vec<_>>>()?;
        let txn = ec::Txn::new()
            .when(compares)
            .and_then(success)
            .or_else(failure);
        let resp = match self.kv().txn(txn).await {
            Ok(resp) => resp,
            Err(e) => return Err(self.error(e, About::Txn(&req)).await),
        };
        let responses = resp
            .op_responses()
            .iter()
            .map(|op| match op {
                ec::TxnOpResponse::Get(r) => Ok(TxnOpResponse::Range(self.range_response(r))),
                ec::TxnOpResponse::Put(r) => Ok(TxnOpResponse::Put(self.put_response(r))),
                ec::TxnOpResponse::Delete(r) => Ok(TxnOpResponse::Delete(self.delete_response(r))),
                ec::TxnOpResponse::Txn(_) => Err(Error::Remote(
                    "etcd answered with a nested txn response".into(),
                )),
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(TxnResponse {
            revision: header_revision(resp.header()),
            succeeded: resp.succeeded(),
            responses,
        })
    }

    async fn watch(&self, req: WatchRequest) -> Result<WatchStream> {
        watch::open(self, req).await
    }

    async fn compact(&self, revision: i64) -> Result<()> {
        match self.kv().compact(revision, None).await {
            Ok(_) => {
                self.compact_floor.fetch_max(revision, Ordering::Relaxed);
                Ok(())
            }
            Err(e) => Err(self.error(e, About::Revision(revision)).await),
        }
    }

    async fn lease_grant(&self, id: i64, ttl_secs: i64) -> Result<LeaseGrant> {
        let opts = ec::LeaseGrantOptions::new().with_id(id);
        match self.client.lease_client().grant(ttl_secs, Some(opts)).await {
            Ok(resp) if resp.error().is_empty() => Ok(LeaseGrant {
                id: resp.id(),
                ttl: resp.ttl(),
            }),
            Ok(resp) => Err(Error::Remote(format!(
                "granting lease {id}: {}",
                resp.error()
            ))),
            Err(e) => Err(self.error(e, About::Lease(id)).await),
        }
    }

    async fn lease_revoke(&self, id: i64) -> Result<i64> {
        match self.client.lease_client().revoke(id).await {
            Ok(resp) => Ok(header_revision(resp.header())),
            Err(e) => Err(self.error(e, About::Lease(id)).await),
        }
    }

    async fn lease_keep_alive(&self, id: i64) -> Result<i64> {
        // etcd-client renews once to open the stream but keeps that answer; renew again to read
        // the TTL (renewing is idempotent).
        let mut leases = self.client.lease_client();
        let (mut keeper, mut answers) = match leases.keep_alive(id).await {
            Ok(pair) => pair,
            Err(e) => return Err(self.error(e, About::Lease(id)).await),
        };
        if let Err(e) = keeper.keep_alive().await {
            return Err(self.error(e, About::Lease(id)).await);
        }
        match answers.message().await {
            Ok(Some(resp)) if resp.ttl() > 0 => Ok(resp.ttl()),
            Ok(Some(_)) => Err(Error::LeaseNotFound { id }),
            Ok(None) => Err(Error::Remote(format!(
                "etcd closed the keep-alive stream of lease {id}"
            ))),
            Err(e) => Err(self.error(e, About::Lease(id)).await),
        }
    }

    async fn lease_time_to_live(&self, id: i64, keys: bool) -> Result<LeaseInfo> {
        let opts = ec::LeaseTimeToLiveOptions::new();
        let opts = if keys { opts.with_keys() } else { opts };
        let resp = match self
            .client
            .lease_client()
            .time_to_live(id, Some(opts))
            .await
        {
            Ok(resp) => resp,
            Err(e) => return Err(self.error(e, About::Lease(id)).await),
        };
        // etcd answers an unknown lease with TTL -1 rather than an error.
        if resp.ttl() < 0 {
            return Err(Error::LeaseNotFound { id });
        }
        Ok(LeaseInfo {
            id: resp.id(),
            ttl: resp.ttl(),
            granted_ttl: resp.granted_ttl(),
            keys: resp
                .keys()
                .iter()
                .filter(|k| k.starts_with(&self.prefix))
                .map(|k| self.strip(k))
                .collect(),
        })
    }

    async fn lease_list(&self) -> Result<Vec<i64>> {
        match self.client.lease_client().leases().await {
            Ok(resp) => Ok(resp.leases().iter().map(|l| l.id()).collect()),
            Err(e) => Err(self.error(e, About::Other).await),
        }
    }

    async fn status(&self) -> Result<StoreStatus> {
        let status = match self.client.maintenance_client().status().await {
            Ok(status) => status,
            Err(e) => return Err(self.error(e, About::Other).await),
        };
        Ok(StoreStatus {
            revision: header_revision(status.header()),
            compact_revision: self.compact_revision().await?,
            db_size: status.db_size(),
            db_size_in_use: status.raft_used_db_size(),
            version: status.version().to_string(),
        })
    }
}

fn header_revision(header: Option<&ec::ResponseHeader>) -> i64 {
    header.map_or(0, |h| h.revision())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn ranges_are_moved_under_the_prefix() {
        // Connecting is lazy: nothing listens on port 1.
        let store = EtcdStore::connect(&["127.0.0.1:1"], "/p/")
            .await
            .expect("connect");
        let zero = || Bytes::from_static(&[0]);
        let mapped = |key: &'static str, end: Bytes| {
            store.full_range(&KeyRange {
                key: key.into(),
                range_end: end,
            })
        };
        assert_eq!(
            mapped("k", Bytes::new()).ok(),
            Some((b"/p/k".to_vec(), vec![]))
        );
        assert_eq!(
            mapped("a", "b".into()).ok(),
            Some((b"/p/a".to_vec(), b"/p/b".to_vec()))
        );
        assert_eq!(
            mapped("a", zero()).ok(),
            Some((b"/p/a".to_vec(), b"/p0".to_vec()))
        );
        let everything = store.full_range(&KeyRange::prefix("")).ok();
        assert_eq!(
            everything,
            Some((b"/p/\0".to_vec(), b"/p0".to_vec())),
            "the prefix key itself is out"
        );
        assert!(matches!(mapped("", zero()), Err(Error::EmptyKey)));
        assert_eq!(store.strip(b"/p/k"), Bytes::from_static(b"k"));

        let bare = EtcdStore::connect(&["127.0.0.1:1"], "")
            .await
            .expect("connect");
        let everything = bare.full_range(&KeyRange::prefix("")).ok();
        assert_eq!(everything, Some((vec![0], vec![0])));
    }
}
