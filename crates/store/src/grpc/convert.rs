//! Conversions between the store's types and etcd's protobuf messages, and from store errors to
//! gRPC statuses carrying etcd's exact error messages.

use bytes::Bytes;
use tonic::{Code, Status};

use super::pb::etcdserverpb as rpc;
use super::pb::mvccpb;
use crate::error::Error;
use crate::types::*;

// etcd's error messages (etcd `api/v3rpc/rpctypes/error.go`). Clients (clientv3, etcdctl)
// recognise errors by these exact strings, so they carry no detail; details go to the log.
pub(crate) const MSG_EMPTY_KEY: &str = "etcdserver: key is not provided";
pub(crate) const MSG_KEY_NOT_FOUND: &str = "etcdserver: key not found";
pub(crate) const MSG_VALUE_PROVIDED: &str = "etcdserver: value is provided";
pub(crate) const MSG_LEASE_PROVIDED: &str = "etcdserver: lease is provided";
pub(crate) const MSG_TOO_MANY_OPS: &str = "etcdserver: too many operations in txn request";
pub(crate) const MSG_DUPLICATE_KEY: &str = "etcdserver: duplicate key given in txn request";
pub(crate) const MSG_INVALID_SORT_OPTION: &str = "etcdserver: invalid sort option";
pub(crate) const MSG_COMPACTED: &str = "etcdserver: mvcc: required revision has been compacted";
pub(crate) const MSG_FUTURE_REV: &str = "etcdserver: mvcc: required revision is a future revision";
pub(crate) const MSG_LEASE_NOT_FOUND: &str = "etcdserver: requested lease not found";
pub(crate) const MSG_LEASE_EXIST: &str = "etcdserver: lease already exists";
pub(crate) const MSG_LEASE_TTL_TOO_LARGE: &str = "etcdserver: too large lease TTL";
pub(crate) const MSG_REQUEST_TOO_LARGE: &str = "etcdserver: request is too large";

/// A put for the store, its key and value copied out of the request.
///
/// The request's `Bytes` fields are slices of the buffer tonic decoded the whole message from
/// (8 KiB at least), and the store keeps what it is given: in its index for as long as the
/// revision is in history, and in watch events. Stored as they come, every 1 KiB put pinned a
/// whole receive buffer (the server's memory grew by about 8 KiB per put until compaction, and
/// fresh pages were faulted in for every request). A copy of the exact bytes costs far less.
pub(crate) fn put_from_pb(p: rpc::PutRequest) -> PutRequest {
    PutRequest {
        key: Bytes::copy_from_slice(&p.key),
        value: Bytes::copy_from_slice(&p.value),
        lease: p.lease,
        prev_kv: p.prev_kv,
    }
}

/// The gRPC status etcd would answer for this store error.
///
/// Errors etcd has a message for get etcd's code and exact message; the others keep the store's
/// message (which names the path or key) under the closest code: `UNAVAILABLE` for what a client
/// may retry, `DATA_LOSS` for corruption, `INTERNAL` for local I/O failures.
pub fn status_from_error(err: &Error) -> Status {
    let (code, etcd_message) = match err {
        Error::Compacted { .. } => (Code::OutOfRange, Some(MSG_COMPACTED)),
        Error::FutureRevision { .. } => (Code::OutOfRange, Some(MSG_FUTURE_REV)),
        Error::EmptyKey => (Code::InvalidArgument, Some(MSG_EMPTY_KEY)),
        Error::ValueTooLarge { .. } => (Code::InvalidArgument, Some(MSG_REQUEST_TOO_LARGE)),
        Error::DuplicateKey { .. } => (Code::InvalidArgument, Some(MSG_DUPLICATE_KEY)),
        Error::LeaseNotFound { .. } => (Code::NotFound, Some(MSG_LEASE_NOT_FOUND)),
        Error::LeaseExists { .. } => (Code::FailedPrecondition, Some(MSG_LEASE_EXIST)),
        Error::InvalidArgument(_) => (Code::InvalidArgument, None),
        Error::WatcherLagged { .. } => (Code::Unavailable, None),
        Error::Corrupt { .. } => (Code::DataLoss, None),
        Error::Io { .. } => (Code::Internal, None),
        Error::Unavailable(_) | Error::Remote(_) => (Code::Unavailable, None),
    };
    match etcd_message {
        Some(message) => {
            tracing::debug!(error = %err, "store request failed");
            Status::new(code, message)
        }
        None => Status::new(code, err.to_string()),
    }
}

/// [`status_from_error`] for `map_err`.
pub(crate) fn to_status(err: Error) -> Status {
    status_from_error(&err)
}

/// Shorthand: an `INVALID_ARGUMENT` status.
pub(crate) fn invalid(message: &str) -> Status {
    Status::invalid_argument(message)
}

pub(crate) fn kv_to_pb(kv: KeyValue) -> mvccpb::KeyValue {
    mvccpb::KeyValue {
        key: kv.key,
        create_revision: kv.create_revision,
        mod_revision: kv.mod_revision,
        version: kv.version,
        value: kv.value,
        lease: kv.lease,
    }
}

pub(crate) fn event_to_pb(ev: Event) -> mvccpb::Event {
    let kind = match ev.kind {
        EventKind::Put => mvccpb::event::EventType::Put,
        EventKind::Delete => mvccpb::event::EventType::Delete,
    };
    mvccpb::Event {
        r#type: kind as i32,
        kv: Some(kv_to_pb(ev.kv)),
        prev_kv: ev.prev_kv.map(kv_to_pb),
    }
}

pub(crate) fn key_range(key: Bytes, range_end: Bytes) -> KeyRange {
    KeyRange { key, range_end }
}

/// A txn compare. As etcd, an operand of another kind than `target` names reads as zero.
pub(crate) fn compare_from_pb(c: rpc::Compare) -> Result<Compare, Status> {
    use rpc::compare::{CompareResult, CompareTarget as Target, TargetUnion};
    let op = match CompareResult::try_from(c.result) {
        Ok(CompareResult::Equal) => CompareOp::Equal,
        Ok(CompareResult::Greater) => CompareOp::Greater,
        Ok(CompareResult::Less) => CompareOp::Less,
        Ok(CompareResult::NotEqual) => CompareOp::NotEqual,
        Err(_) => return Err(invalid(&format!("invalid compare result {}", c.result))),
    };
    let int =
        |want: fn(&TargetUnion) -> Option<i64>| c.target_union.as_ref().and_then(want).unwrap_or(0);
    let target = match Target::try_from(c.target) {
        Ok(Target::Version) => CompareTarget::Version(int(|u| {
            if let TargetUnion::Version(v) = u {
                Some(*v)
            } else {
                None
            }
        })),
        Ok(Target::Create) => CompareTarget::CreateRevision(int(|u| {
            if let TargetUnion::CreateRevision(v) = u {
                Some(*v)
            } else {
                None
            }
        })),
        Ok(Target::Mod) => CompareTarget::ModRevision(int(|u| {
            if let TargetUnion::ModRevision(v) = u {
                Some(*v)
            } else {
                None
            }
        })),
        Ok(Target::Lease) => CompareTarget::Lease(int(|u| {
            if let TargetUnion::Lease(v) = u {
                Some(*v)
            } else {
                None
            }
        })),
        Ok(Target::Value) => CompareTarget::Value(match &c.target_union {
            Some(TargetUnion::Value(v)) => v.clone(),
            _ => Bytes::new(),
        }),
        Err(_) => return Err(invalid(&format!("invalid compare target {}", c.target))),
    };
    Ok(Compare {
        range: key_range(c.key, c.range_end),
        op,
        target,
    })
}
