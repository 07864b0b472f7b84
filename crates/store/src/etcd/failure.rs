//! Errors of the etcd backend: which etcd failure an `etcd-client` error is ([`classify`]), and
//! what the failed request was about ([`About`]), to fill in the crate's [`crate::Error`].

use bytes::Bytes;
use etcd_client as ec;

use crate::types::*;

/// etcd's default `--max-request-bytes` (1.5 MiB), reported as the limit when etcd refuses a
/// request as too large without saying its own limit.
pub(super) const ETCD_DEFAULT_MAX_REQUEST_BYTES: usize = 1536 * 1024;

/// What etcd's gRPC server accepts beyond `--max-request-bytes` (etcd's `grpcOverheadBytes`):
/// a request larger than both is refused by gRPC, whose message names the sum.
const ETCD_GRPC_OVERHEAD_BYTES: usize = 512 * 1024;

/// What a failed request was about, to fill in the fields of the crate's error.
#[derive(Clone, Copy)]
pub(super) enum About<'a> {
    Range(&'a RangeRequest),
    Put(&'a PutRequest),
    Txn(&'a TxnRequest),
    Revision(i64),
    Lease(i64),
    Other,
}

impl About<'_> {
    pub(super) fn revision(self) -> i64 {
        match self {
            About::Range(r) => r.revision,
            About::Revision(r) => r,
            About::Txn(t) => txn_ops(t)
                .find_map(|op| match op {
                    TxnOp::Range(r) if r.revision != 0 => Some(r.revision),
                    _ => None,
                })
                .unwrap_or(0),
            _ => 0,
        }
    }

    pub(super) fn lease(self) -> i64 {
        match self {
            About::Lease(id) => id,
            About::Put(p) => p.lease,
            About::Txn(t) => txn_puts(t).map(|p| p.lease).find(|&l| l != 0).unwrap_or(0),
            _ => 0,
        }
    }

    /// The key and size of the largest value the request writes.
    pub(super) fn largest_value(self) -> (Bytes, usize) {
        match self {
            About::Put(p) => (p.key.clone(), p.value.len()),
            About::Txn(t) => txn_puts(t)
                .max_by_key(|p| p.value.len())
                .map(|p| (p.key.clone(), p.value.len()))
                .unwrap_or_default(),
            _ => (Bytes::new(), 0),
        }
    }

    pub(super) fn duplicate_key(self) -> Bytes {
        let About::Txn(t) = self else {
            return Bytes::new();
        };
        for branch in [&t.success, &t.failure] {
            let puts: Vec<&Bytes> = branch
                .iter()
                .filter_map(|op| {
                    if let TxnOp::Put(p) = op {
                        Some(&p.key)
                    } else {
                        None
                    }
                })
                .collect();
            for (i, key) in puts.iter().enumerate() {
                if puts[..i].contains(key) {
                    return (*key).clone();
                }
            }
            for op in branch {
                if let TxnOp::Delete(d) = op
                    && let Some(key) = puts.iter().find(|k| d.range.contains(k))
                {
                    return (*key).clone();
                }
            }
        }
        Bytes::new()
    }
}

fn txn_ops(t: &TxnRequest) -> impl Iterator<Item = &TxnOp> {
    t.success.iter().chain(&t.failure)
}

fn txn_puts(t: &TxnRequest) -> impl Iterator<Item = &PutRequest> {
    txn_ops(t).filter_map(|op| {
        if let TxnOp::Put(p) = op {
            Some(p)
        } else {
            None
        }
    })
}

/// The kinds of etcd failure the crate distinguishes, recognised by gRPC code and etcd's message
/// (`rpctypes` in etcd's source).
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Failure {
    Compacted,
    FutureRevision,
    EmptyKey,
    /// etcd's "request is too large", or gRPC refusing the message; with etcd's request limit
    /// if gRPC's message gave it away.
    TooLarge {
        limit: Option<usize>,
    },
    DuplicateKey,
    LeaseNotFound,
    LeaseExists,
    InvalidArgument(String),
    /// etcd (or the connection to it) is unavailable: gRPC's `UNAVAILABLE`, which tonic also
    /// gives a connection that could not be made, or a broken transport. A client may retry.
    Unavailable,
    Other,
}

pub(super) fn classify(err: &ec::Error) -> Failure {
    use tonic::Code;
    let status = match err {
        ec::Error::GRpcStatus(status) => status,
        ec::Error::TransportError(_) => return Failure::Unavailable,
        ec::Error::LeaseKeepAliveError(msg) if msg.contains("lease not found") => {
            return Failure::LeaseNotFound;
        }
        _ => return Failure::Other,
    };
    let msg = status.message();
    match status.code() {
        Code::OutOfRange if msg.contains("required revision has been compacted") => {
            Failure::Compacted
        }
        Code::OutOfRange if msg.contains("required revision is a future revision") => {
            Failure::FutureRevision
        }
        Code::InvalidArgument if msg.contains("key is not provided") => Failure::EmptyKey,
        Code::InvalidArgument if msg.contains("request is too large") => {
            Failure::TooLarge { limit: None }
        }
        Code::ResourceExhausted if msg.contains("larger than max") => {
            // gRPC: "grpc: received message larger than max (2097205 vs. 2097152)", the
            // maximum being etcd's request limit plus its gRPC overhead.
            let limit = msg
                .rsplit_once("vs. ")
                .and_then(|(_, rest)| rest.trim_end_matches(')').trim().parse::<usize>().ok())
                .and_then(|max| max.checked_sub(ETCD_GRPC_OVERHEAD_BYTES));
            Failure::TooLarge { limit }
        }
        Code::InvalidArgument if msg.contains("duplicate key given in txn request") => {
            Failure::DuplicateKey
        }
        Code::NotFound if msg.contains("requested lease not found") => Failure::LeaseNotFound,
        Code::FailedPrecondition if msg.contains("lease already exists") => Failure::LeaseExists,
        Code::InvalidArgument | Code::OutOfRange => Failure::InvalidArgument(msg.to_string()),
        Code::Unavailable => Failure::Unavailable,
        _ => Failure::Other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(code: tonic::Code, msg: &str) -> ec::Error {
        ec::Error::GRpcStatus(tonic::Status::new(code, msg))
    }

    #[test]
    fn etcd_errors_are_classified_by_code_and_message() {
        use tonic::Code::*;
        let cases = [
            (
                OutOfRange,
                "etcdserver: mvcc: required revision has been compacted",
                Failure::Compacted,
            ),
            (
                OutOfRange,
                "etcdserver: mvcc: required revision is a future revision",
                Failure::FutureRevision,
            ),
            (
                InvalidArgument,
                "etcdserver: key is not provided",
                Failure::EmptyKey,
            ),
            (
                InvalidArgument,
                "etcdserver: request is too large",
                Failure::TooLarge { limit: None },
            ),
            (
                ResourceExhausted,
                "grpc: received message larger than max (2097205 vs. 2097152)",
                Failure::TooLarge {
                    limit: Some(1536 * 1024),
                },
            ),
            (
                InvalidArgument,
                "etcdserver: duplicate key given in txn request",
                Failure::DuplicateKey,
            ),
            (
                NotFound,
                "etcdserver: requested lease not found",
                Failure::LeaseNotFound,
            ),
            (
                FailedPrecondition,
                "etcdserver: lease already exists",
                Failure::LeaseExists,
            ),
            (
                OutOfRange,
                "etcdserver: too large lease TTL",
                Failure::InvalidArgument("etcdserver: too large lease TTL".into()),
            ),
            (
                Unavailable,
                "etcdserver: leader changed",
                Failure::Unavailable,
            ),
            (Unavailable, "tcp connect error", Failure::Unavailable),
            (Unknown, "h2 protocol error", Failure::Other),
        ];
        for (code, msg, expected) in cases {
            assert_eq!(classify(&status(code, msg)), expected, "{msg}");
        }
        let keep_alive = ec::Error::LeaseKeepAliveError("lease not found".into());
        assert_eq!(classify(&keep_alive), Failure::LeaseNotFound);
    }

    #[test]
    fn duplicate_key_names_the_key_etcd_refused() {
        let put = |k: &'static str| {
            TxnOp::Put(PutRequest {
                key: k.into(),
                ..Default::default()
            })
        };
        let del = |k: &'static str| {
            TxnOp::Delete(DeleteRequest {
                range: KeyRange::prefix(k),
                prev_kv: false,
            })
        };
        let txn = |failure| TxnRequest {
            failure,
            ..Default::default()
        };
        assert_eq!(
            About::Txn(&txn(vec![put("a"), put("b"), put("a")])).duplicate_key(),
            "a"
        );
        assert_eq!(
            About::Txn(&txn(vec![put("d/1"), del("d/")])).duplicate_key(),
            "d/1"
        );
        assert_eq!(
            About::Txn(&txn(vec![put("a"), del("b")])).duplicate_key(),
            ""
        );
    }
}
