//! Requests, responses and events of the store API: etcd v3's data model, in Rust types.
//!
//! Key ranges follow etcd's convention: `range_end` empty means the single key `key`; `range_end`
//! equal to `[0]` means every key `>= key`; otherwise the half-open range `[key, range_end)`.
//! Revision 0 in a request means "the latest revision".

use bytes::Bytes;

/// One version of a key, as etcd's `mvccpb.KeyValue`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct KeyValue {
    pub key: Bytes,
    /// Empty for keys-only reads and for delete events.
    pub value: Bytes,
    /// Revision of the put that created this key (since its last delete).
    pub create_revision: i64,
    /// Revision of the last write to this key.
    pub mod_revision: i64,
    /// Number of puts since creation; 0 for a delete event's key.
    pub version: i64,
    /// Lease the key is attached to, or 0.
    pub lease: i64,
}

/// A key range in etcd's `key`/`range_end` form (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct KeyRange {
    pub key: Bytes,
    pub range_end: Bytes,
}

impl KeyRange {
    /// Exactly one key.
    pub fn key(key: impl Into<Bytes>) -> Self {
        KeyRange {
            key: key.into(),
            range_end: Bytes::new(),
        }
    }

    /// Every key starting with `prefix`. For an empty prefix, every key at all: `[0]` to the end,
    /// as etcd's clients send it, since etcd refuses an empty `key` even with a `range_end`.
    pub fn prefix(prefix: impl Into<Bytes>) -> Self {
        let key = prefix.into();
        if key.is_empty() {
            return KeyRange {
                key: Bytes::from_static(&[0]),
                range_end: Bytes::from_static(&[0]),
            };
        }
        let range_end = prefix_end(&key);
        KeyRange { key, range_end }
    }

    /// Whether `k` falls inside this range.
    pub fn contains(&self, k: &[u8]) -> bool {
        if self.range_end.is_empty() {
            return k == &self.key[..];
        }
        if k < &self.key[..] {
            return false;
        }
        self.range_end[..] == [0] || k < &self.range_end[..]
    }

    /// The end bound as an exclusive upper limit, or `None` for "no upper limit".
    /// For a single-key range this is `None` too; check [`KeyRange::is_single`] first.
    pub fn upper(&self) -> Option<&[u8]> {
        if self.range_end.is_empty() || self.range_end[..] == [0] {
            None
        } else {
            Some(&self.range_end[..])
        }
    }

    /// Whether the range names exactly one key.
    pub fn is_single(&self) -> bool {
        self.range_end.is_empty()
    }
}

/// The smallest key greater than every key with this prefix (etcd's `GetPrefixRangeEnd`):
/// the prefix with its last byte below 0xff incremented; `[0]` ("to the end") if there is none.
pub fn prefix_end(prefix: &[u8]) -> Bytes {
    let mut end = prefix.to_vec();
    while let Some(&last) = end.last() {
        if last < 0xff {
            *end.last_mut().expect("non-empty") += 1;
            return Bytes::from(end);
        }
        end.pop();
    }
    Bytes::from_static(&[0])
}

/// Read keys, as etcd's `RangeRequest` (without sorting options, which the API server never uses).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RangeRequest {
    pub range: KeyRange,
    /// Maximum number of keys returned; 0 means no limit.
    pub limit: i64,
    /// Read at this revision; 0 means the latest.
    pub revision: i64,
    /// Return keys without values.
    pub keys_only: bool,
    /// Return only the count.
    pub count_only: bool,
}

/// Result of a range read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RangeResponse {
    /// The store's current revision when the read was served (not the read revision).
    pub revision: i64,
    /// Keys in ascending order, at most `limit` of them; empty if `count_only`.
    pub kvs: Vec<KeyValue>,
    /// Whether more keys exist in the range beyond `limit`.
    pub more: bool,
    /// Number of keys in the range at the read revision, regardless of `limit`.
    pub count: i64,
}

/// Write one key, as etcd's `PutRequest`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PutRequest {
    pub key: Bytes,
    pub value: Bytes,
    /// Attach the key to this lease (0: none).
    pub lease: i64,
    /// Return the previous version of the key.
    pub prev_kv: bool,
}

/// Result of a put.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PutResponse {
    /// Revision of this write.
    pub revision: i64,
    pub prev_kv: Option<KeyValue>,
}

/// Delete one key or a range, as etcd's `DeleteRangeRequest`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeleteRequest {
    pub range: KeyRange,
    /// Return the deleted key-values.
    pub prev_kv: bool,
}

/// Result of a delete.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeleteResponse {
    /// The store's revision after the delete (unchanged if nothing was deleted).
    pub revision: i64,
    pub deleted: i64,
    pub prev_kvs: Vec<KeyValue>,
}

/// What a transaction compare looks at, with the operand to compare against.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CompareTarget {
    Version(i64),
    CreateRevision(i64),
    ModRevision(i64),
    Value(Bytes),
    Lease(i64),
}

/// How a compare relates the key's field (left) to the operand (right).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompareOp {
    Equal,
    Greater,
    Less,
    NotEqual,
}

/// One guard of a transaction, as etcd's `Compare`. An absent key has version, create and mod
/// revision and lease 0; a value compare against an absent key fails. With a non-empty
/// `range_end` the compare must hold for every key in the range.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Compare {
    pub range: KeyRange,
    pub op: CompareOp,
    pub target: CompareTarget,
}

impl Compare {
    pub fn new(key: impl Into<Bytes>, op: CompareOp, target: CompareTarget) -> Self {
        Compare {
            range: KeyRange::key(key),
            op,
            target,
        }
    }
}

/// One operation inside a transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TxnOp {
    Range(RangeRequest),
    Put(PutRequest),
    Delete(DeleteRequest),
}

/// The result of one [`TxnOp`], in the same position.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TxnOpResponse {
    Range(RangeResponse),
    Put(PutResponse),
    Delete(DeleteResponse),
}

/// An atomic if/then/else, as etcd's `TxnRequest`: if every compare holds, run `success`,
/// otherwise `failure`. All writes of the chosen branch share one revision.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TxnRequest {
    pub compare: Vec<Compare>,
    pub success: Vec<TxnOp>,
    pub failure: Vec<TxnOp>,
}

/// Result of a transaction.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TxnResponse {
    /// The store's revision after the transaction.
    pub revision: i64,
    /// Whether the compares held (and so `success` ran).
    pub succeeded: bool,
    pub responses: Vec<TxnOpResponse>,
}

/// Start watching a key or range, as etcd's `WatchCreateRequest`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WatchRequest {
    pub range: KeyRange,
    /// Deliver every event with revision >= this; 0 means "events after the current revision".
    pub start_revision: i64,
    /// Fill [`Event::prev_kv`].
    pub prev_kv: bool,
    /// Send periodic progress notifications (empty batches) while idle.
    pub progress_notify: bool,
}

/// Whether an event wrote or removed its key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    Put,
    Delete,
}

/// One change to one key. For a delete, `kv` holds the key and `mod_revision` = the delete's
/// revision, other fields zero (as etcd).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    pub kind: EventKind,
    pub kv: KeyValue,
    /// The key's previous version, if requested and it existed.
    pub prev_kv: Option<KeyValue>,
}

/// One message of a watch stream: the events of one or more consecutive revisions, in revision
/// order. An empty `events` is a progress notification: every event with revision <= `revision`
/// has been delivered.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WatchBatch {
    /// The store's revision when this message was sent (>= every event's revision).
    pub revision: i64,
    pub events: Vec<Event>,
}

impl WatchBatch {
    pub fn is_progress(&self) -> bool {
        self.events.is_empty()
    }
}

/// A lease just granted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseGrant {
    pub id: i64,
    /// TTL in seconds as granted (may be raised to the store's minimum).
    pub ttl: i64,
}

/// A lease's state, as etcd's `LeaseTimeToLiveResponse`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseInfo {
    pub id: i64,
    /// Remaining seconds.
    pub ttl: i64,
    pub granted_ttl: i64,
    /// Keys attached to it (filled only when asked for).
    pub keys: Vec<Bytes>,
}

/// Facts about a store, as etcd's `StatusResponse`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct StoreStatus {
    pub revision: i64,
    pub compact_revision: i64,
    /// Bytes the backend occupies on disk.
    pub db_size: i64,
    /// Bytes of that in use (the rest is free space for reuse).
    pub db_size_in_use: i64,
    /// Backend version string.
    pub version: String,
}
