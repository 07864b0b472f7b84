//! The store's error type: one variant per way a store operation can fail, shared by every backend.

/// What went wrong in a store operation.
///
/// Messages follow etcd's wording where etcd has one (`mvcc: required revision has been
/// compacted`), so that users who know etcd recognise them, and always name the key, revision,
/// lease or path involved.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The requested revision was removed by compaction. Retry with a newer revision (for a watch:
    /// re-list, then watch from the list's revision); the API server maps this to 410 Gone.
    #[error(
        "mvcc: required revision has been compacted (requested {requested}, compacted at {compact_revision})"
    )]
    Compacted {
        requested: i64,
        compact_revision: i64,
    },

    /// The requested revision has not been written yet. Not retryable as is.
    #[error(
        "mvcc: required revision is a future revision (requested {requested}, current {current})"
    )]
    FutureRevision { requested: i64, current: i64 },

    /// A request carried an empty key where one is required.
    #[error("etcdserver: key is not provided")]
    EmptyKey,

    /// A put's value (or a whole request) is larger than the configured limit; nothing was written.
    #[error(
        "etcdserver: request is too large: value for key {key:?} is {size} bytes, limit is {limit}"
    )]
    ValueTooLarge {
        key: String,
        size: usize,
        limit: usize,
    },

    /// A transaction names the same key in two write operations.
    #[error("etcdserver: duplicate key given in txn request: {key:?}")]
    DuplicateKey { key: String },

    /// The lease does not exist (never granted, revoked or expired).
    #[error("etcdserver: requested lease not found: {id}")]
    LeaseNotFound { id: i64 },

    /// A lease grant asked for an ID that is already in use.
    #[error("etcdserver: lease already exists: {id}")]
    LeaseExists { id: i64 },

    /// A request argument is out of range (negative TTL, limit, revision…).
    #[error("invalid request: {0}")]
    InvalidArgument(String),

    /// The watcher fell too far behind and was cut off so it could not slow writers or other
    /// watchers. Resume by watching again from `next_revision`.
    #[error("watch cut off: watcher fell behind; resume from revision {next_revision}")]
    WatcherLagged { next_revision: i64 },

    /// The on-disk data is damaged or not a Skiff store; the store refuses to start.
    #[error("corrupt store data at {path}: {reason}")]
    Corrupt { path: String, reason: String },

    /// Reading or writing the data directory failed.
    #[error("store i/o failed at {path}: {reason}")]
    Io { path: String, reason: String },

    /// The store stopped accepting writes after a failed commit, or has been shut down.
    #[error("store is unavailable: {0}")]
    Unavailable(String),

    /// The remote etcd (or an etcd-compatible server) returned an error.
    #[error("etcd request failed: {0}")]
    Remote(String),
}

/// Result of a store operation.
pub type Result<T, E = Error> = std::result::Result<T, E>;
