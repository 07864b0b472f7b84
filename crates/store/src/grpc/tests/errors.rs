//! Errors: what the store and the facade refuse, as etcd's gRPC codes and exact messages (clients
//! recognise some errors by their text), checked over the wire and, for every store error, on
//! the mapping function itself.

use super::super::convert::{MSG_COMPACTED, MSG_DUPLICATE_KEY, MSG_EMPTY_KEY, MSG_FUTURE_REV};
use super::*;

fn assert_status(err: &tonic::Status, code: Code, message: &str) {
    assert_eq!((err.code(), err.message()), (code, message));
}

#[tokio::test]
async fn errors_carry_etcds_codes_and_exact_messages() {
    let server = start().await;
    let mut kv = server.kv().await;
    let err = kv.put(put("", "v")).await.unwrap_err();
    assert_status(
        &err,
        Code::InvalidArgument,
        "etcdserver: key is not provided",
    );
    let err = kv.range(range("")).await.unwrap_err();
    assert_status(
        &err,
        Code::InvalidArgument,
        "etcdserver: key is not provided",
    );

    for i in 0..3 {
        kv.put(put("/c", &i.to_string())).await.unwrap();
    }
    kv.compact(rpc::CompactionRequest {
        revision: 3,
        physical: true,
    })
    .await
    .unwrap();
    let err = kv
        .range(rpc::RangeRequest {
            revision: 2,
            ..range("/c")
        })
        .await
        .unwrap_err();
    assert_status(
        &err,
        Code::OutOfRange,
        "etcdserver: mvcc: required revision has been compacted",
    );
    let err = kv
        .range(rpc::RangeRequest {
            revision: 99,
            ..range("/c")
        })
        .await
        .unwrap_err();
    assert_status(
        &err,
        Code::OutOfRange,
        "etcdserver: mvcc: required revision is a future revision",
    );
    let err = kv
        .compact(rpc::CompactionRequest {
            revision: 2,
            physical: false,
        })
        .await
        .unwrap_err();
    assert_eq!(
        err.message(),
        "etcdserver: mvcc: required revision has been compacted"
    );

    let mut lease = server.lease().await;
    let err = lease
        .lease_revoke(rpc::LeaseRevokeRequest { id: 42 })
        .await
        .unwrap_err();
    assert_status(
        &err,
        Code::NotFound,
        "etcdserver: requested lease not found",
    );
    let err = lease
        .lease_grant(rpc::LeaseGrantRequest {
            ttl: 9_000_000_001,
            id: 0,
        })
        .await
        .unwrap_err();
    assert_status(&err, Code::OutOfRange, "etcdserver: too large lease TTL");
}

#[test]
fn every_store_error_maps_to_etcds_status() {
    use crate::Error;
    let cases = [
        (
            Error::Compacted {
                requested: 1,
                compact_revision: 5,
            },
            Code::OutOfRange,
            MSG_COMPACTED,
        ),
        (
            Error::FutureRevision {
                requested: 9,
                current: 5,
            },
            Code::OutOfRange,
            MSG_FUTURE_REV,
        ),
        (Error::EmptyKey, Code::InvalidArgument, MSG_EMPTY_KEY),
        (
            Error::ValueTooLarge {
                key: "/k".into(),
                size: 10,
                limit: 5,
            },
            Code::InvalidArgument,
            "etcdserver: request is too large",
        ),
        (
            Error::DuplicateKey { key: "/k".into() },
            Code::InvalidArgument,
            MSG_DUPLICATE_KEY,
        ),
        (
            Error::LeaseNotFound { id: 7 },
            Code::NotFound,
            "etcdserver: requested lease not found",
        ),
        (
            Error::LeaseExists { id: 7 },
            Code::FailedPrecondition,
            "etcdserver: lease already exists",
        ),
    ];
    for (err, code, message) in cases {
        let status = status_from_error(&err);
        assert_eq!(
            (status.code(), status.message()),
            (code, message),
            "for {err:?}"
        );
    }
    let status = status_from_error(&Error::Unavailable("shut down".into()));
    assert_eq!(status.code(), Code::Unavailable);
    assert!(status.message().contains("shut down"));
}
