//! Transactions: compares on each target with each operator, the two branches, one revision for
//! all writes, reads that see the transaction's own earlier writes, duplicate keys.

use std::sync::Arc;

use skiff_store::*;

use crate::support::*;

fn cmp(key: &str, op: CompareOp, target: CompareTarget) -> Compare {
    Compare::new(b(key), op, target)
}

/// Whether a transaction guarded by just `compare` takes its success branch.
async fn holds(s: &dyn Store, compare: Compare) -> bool {
    let before = revision(s).await;
    let resp = txn(
        s,
        TxnRequest {
            compare: vec![compare],
            ..Default::default()
        },
    )
    .await;
    assert_eq!(
        resp.revision, before,
        "a txn without writes creates no revision"
    );
    resp.succeeded
}

pub async fn create_if_absent_runs_once(s: Arc<dyn Store>) {
    let base = revision(&*s).await;
    let create = TxnRequest {
        compare: vec![cmp("k", CompareOp::Equal, CompareTarget::CreateRevision(0))],
        success: vec![put_op("k", "v1")],
        failure: vec![range_op("k")],
    };
    let first = txn(&*s, create.clone()).await;
    assert!(first.succeeded);
    assert_eq!(first.revision, base + 1);
    let [TxnOpResponse::Put(put)] = &first.responses[..] else {
        panic!("{first:?}")
    };
    assert_eq!(put.revision, base + 1);

    let second = txn(
        &*s,
        TxnRequest {
            success: vec![put_op("k", "v2")],
            ..create
        },
    )
    .await;
    assert!(!second.succeeded);
    assert_eq!(second.revision, base + 1, "the failure branch only read");
    let [TxnOpResponse::Range(read)] = &second.responses[..] else {
        panic!("{second:?}")
    };
    assert_eq!(
        (values(&read.kvs), read.kvs[0].mod_revision),
        (vec!["v1".into()], base + 1)
    );
}

pub async fn update_if_unchanged_guards_on_mod_revision(s: Arc<dyn Store>) {
    let r1 = put(&*s, "k", "v1").await;
    let update = |value: &str| TxnRequest {
        compare: vec![cmp("k", CompareOp::Equal, CompareTarget::ModRevision(r1))],
        success: vec![put_op("k", value)],
        failure: vec![range_op("k")],
    };
    let first = txn(&*s, update("v2")).await;
    assert!(first.succeeded);
    let stale = txn(&*s, update("v3")).await;
    assert!(!stale.succeeded, "k changed since r1");
    let [TxnOpResponse::Range(read)] = &stale.responses[..] else {
        panic!("{stale:?}")
    };
    assert_eq!(
        (
            values(&read.kvs),
            read.kvs[0].mod_revision,
            read.kvs[0].version
        ),
        (vec!["v2".into()], first.revision, 2)
    );
}

pub async fn delete_if_unchanged_guards_on_mod_revision(s: Arc<dyn Store>) {
    let r1 = put(&*s, "k", "v1").await;
    let delete_if = |r| TxnRequest {
        compare: vec![cmp("k", CompareOp::Equal, CompareTarget::ModRevision(r))],
        success: vec![delete_op("k")],
        failure: vec![],
    };
    let deleted = txn(&*s, delete_if(r1)).await;
    assert!(deleted.succeeded);
    let [TxnOpResponse::Delete(del)] = &deleted.responses[..] else {
        panic!("{deleted:?}")
    };
    assert_eq!(
        (del.deleted, keys(&del.prev_kvs), del.revision),
        (1, vec!["k".into()], r1 + 1)
    );
    assert_eq!(get(&*s, "k").await, None);

    put(&*s, "k", "again").await;
    let stale = txn(&*s, delete_if(r1)).await;
    assert!(!stale.succeeded);
    assert!(stale.responses.is_empty());
    assert_eq!(get(&*s, "k").await.expect("k kept").value, b("again"));
}

pub async fn compares_each_target_with_each_operator(s: Arc<dyn Store>) {
    use CompareOp::*;
    use CompareTarget::*;
    let c = put(&*s, "k", "a").await;
    let m = put(&*s, "k", "m").await; // version 2, create c, mod m, value "m"
    let cases = [
        (Version(2), Equal, true),
        (Version(1), Equal, false),
        (Version(1), Greater, true),
        (Version(2), Greater, false),
        (Version(3), Less, true),
        (Version(2), Less, false),
        (Version(2), NotEqual, false),
        (Version(3), NotEqual, true),
        (CreateRevision(c), Equal, true),
        (CreateRevision(c - 1), Greater, true),
        (CreateRevision(c + 1), Less, true),
        (CreateRevision(c), NotEqual, false),
        (ModRevision(m), Equal, true),
        (ModRevision(c), Equal, false),
        (ModRevision(m), Greater, false),
        (ModRevision(m + 1), Less, true),
        (ModRevision(c), NotEqual, true),
        (Value(b("m")), Equal, true),
        (Value(b("n")), Equal, false),
        (Value(b("a")), Greater, true),
        (Value(b("z")), Less, true),
        (Value(b("mm")), Less, true),
        (Value(b("m")), NotEqual, false),
        (Value(b("x")), NotEqual, true),
        (Lease(0), Equal, true),
        (Lease(5), NotEqual, true),
        (Lease(5), Less, true),
    ];
    for (target, op, expected) in cases {
        let compare = cmp("k", op, target);
        assert_eq!(holds(&*s, compare.clone()).await, expected, "{compare:?}");
    }
}

pub async fn compares_on_a_missing_key_see_zeroes_and_fail_on_value(s: Arc<dyn Store>) {
    use CompareOp::*;
    use CompareTarget::*;
    let cases = [
        (Version(0), Equal, true),
        (Version(0), Greater, false),
        (CreateRevision(0), Equal, true),
        (ModRevision(0), Equal, true),
        (ModRevision(1), Less, true),
        (Lease(0), Equal, true),
        // A value compare on a missing key fails whatever the operator.
        (Value(b("")), Equal, false),
        (Value(b("x")), NotEqual, false),
        (Value(b("x")), Less, false),
    ];
    for (target, op, expected) in cases {
        let compare = cmp("missing", op, target);
        assert_eq!(holds(&*s, compare.clone()).await, expected, "{compare:?}");
    }
}

pub async fn compare_over_a_range_must_hold_for_every_key(s: Arc<dyn Store>) {
    use CompareOp::*;
    use CompareTarget::*;
    put(&*s, "r/1", "x").await;
    put(&*s, "r/2", "x").await;
    put(&*s, "r/2", "y").await;
    put(&*s, "s", "z").await;
    let over = |prefix: &str, op, target| Compare {
        range: KeyRange::prefix(b(prefix)),
        op,
        target,
    };
    let cases = [
        (over("r/", Greater, Version(0)), true),
        (over("r/", Equal, Version(2)), false),
        (over("r/", Less, Version(3)), true),
        (over("r/", Equal, Value(b("x"))), false),
        (over("r/", NotEqual, Value(b("z"))), true),
        // No key in the range: compared as zeroes, and a value compare fails.
        (over("none/", Equal, Version(0)), true),
        (over("none/", Equal, Value(b(""))), false),
    ];
    for (compare, expected) in cases {
        assert_eq!(holds(&*s, compare.clone()).await, expected, "{compare:?}");
    }
}

pub async fn failure_branch_runs_when_any_compare_fails(s: Arc<dyn Store>) {
    put(&*s, "k", "v").await;
    let resp = txn(
        &*s,
        TxnRequest {
            compare: vec![
                cmp("k", CompareOp::Equal, CompareTarget::Value(b("v"))),
                cmp("k", CompareOp::Equal, CompareTarget::Version(7)),
            ],
            success: vec![put_op("success", "1")],
            failure: vec![put_op("failure", "1")],
        },
    )
    .await;
    assert!(!resp.succeeded);
    assert_eq!(
        (
            get(&*s, "success").await,
            get(&*s, "failure").await.is_some()
        ),
        (None, true)
    );
}

pub async fn writes_share_one_revision(s: Arc<dyn Store>) {
    put(&*s, "a", "old").await;
    put(&*s, "c", "doomed").await;
    let base = revision(&*s).await;
    let mut put_a = PutRequest {
        key: b("a"),
        value: b("new"),
        prev_kv: true,
        lease: 0,
    };
    let resp = txn(
        &*s,
        TxnRequest {
            success: vec![TxnOp::Put(put_a.clone()), put_op("b", "1"), delete_op("c")],
            ..Default::default()
        },
    )
    .await;
    assert!(resp.succeeded, "no compare holds vacuously");
    assert_eq!(resp.revision, base + 1);
    let [
        TxnOpResponse::Put(pa),
        TxnOpResponse::Put(pb),
        TxnOpResponse::Delete(dc),
    ] = &resp.responses[..]
    else {
        panic!("{resp:?}")
    };
    assert_eq!(
        (pa.revision, pb.revision, dc.revision, dc.deleted),
        (base + 1, base + 1, base + 1, 1)
    );
    assert_eq!(
        pa.prev_kv.as_ref().map(|kv| kv.value.clone()),
        Some(b("old"))
    );
    assert_eq!(pb.prev_kv, None);
    assert_eq!(values(&dc.prev_kvs), ["doomed"]);
    for key in ["a", "b"] {
        assert_eq!(get(&*s, key).await.expect(key).mod_revision, base + 1);
    }
    assert_eq!(get(&*s, "c").await, None);
    assert_eq!(revision(&*s).await, base + 1);
    put_a.prev_kv = false;
    assert_eq!(s.put(put_a).await.expect("put").revision, base + 2);
}

pub async fn range_sees_earlier_writes_of_the_same_txn(s: Arc<dyn Store>) {
    put(&*s, "a", "old").await;
    put(&*s, "gone", "x").await;
    let base = revision(&*s).await;
    let resp = txn(
        &*s,
        TxnRequest {
            success: vec![
                range_op("a"),
                put_op("a", "new"),
                range_op("a"),
                delete_op("gone"),
                range_op("gone"),
                put_op("fresh", "1"),
                range_op("fresh"),
            ],
            ..Default::default()
        },
    )
    .await;
    let reads: Vec<&RangeResponse> = resp
        .responses
        .iter()
        .filter_map(|r| {
            if let TxnOpResponse::Range(r) = r {
                Some(r)
            } else {
                None
            }
        })
        .collect();
    let [before, after, gone, fresh] = reads[..] else {
        panic!("{resp:?}")
    };
    assert_eq!(
        (values(&before.kvs), before.kvs[0].version),
        (vec!["old".into()], 1)
    );
    assert_eq!(
        (
            values(&after.kvs),
            after.kvs[0].version,
            after.kvs[0].mod_revision
        ),
        (vec!["new".into()], 2, base + 1)
    );
    assert_eq!((gone.kvs.len(), gone.count), (0, 0));
    assert_eq!(
        (fresh.kvs[0].create_revision, fresh.kvs[0].version),
        (base + 1, 1)
    );
}

pub async fn txn_without_writes_creates_no_revision(s: Arc<dyn Store>) {
    put(&*s, "k", "v").await;
    let base = revision(&*s).await;
    let empty = txn(&*s, TxnRequest::default()).await;
    assert_eq!(
        (empty.succeeded, empty.revision, empty.responses.len()),
        (true, base, 0)
    );
    let read_only = txn(
        &*s,
        TxnRequest {
            success: vec![range_op("k")],
            ..Default::default()
        },
    )
    .await;
    assert_eq!(read_only.revision, base);
    let failed = txn(
        &*s,
        TxnRequest {
            compare: vec![cmp("k", CompareOp::Equal, CompareTarget::Version(9))],
            success: vec![put_op("k", "w")],
            failure: vec![],
        },
    )
    .await;
    assert_eq!((failed.succeeded, failed.revision), (false, base));
    let deletes_nothing = txn(
        &*s,
        TxnRequest {
            success: vec![delete_op("missing")],
            ..Default::default()
        },
    )
    .await;
    assert_eq!(
        deletes_nothing.revision, base,
        "a txn that deletes nothing writes nothing"
    );
    assert_eq!(revision(&*s).await, base);
}

pub async fn duplicate_key_fails_with_duplicate_key_and_writes_nothing(s: Arc<dyn Store>) {
    put(&*s, "x", "v").await;
    let base = revision(&*s).await;
    let always = || vec![cmp("x", CompareOp::Equal, CompareTarget::Version(1))];
    let branches = [
        // Two puts of one key.
        (vec![put_op("d", "1"), put_op("d", "2")], vec![]),
        // A put and a delete of one key.
        (vec![put_op("d", "1"), delete_op("d")], vec![]),
        (vec![delete_op("x"), put_op("x", "1")], vec![]),
        // In the branch that would not run: etcd checks both before comparing.
        (vec![], vec![put_op("d", "1"), put_op("d", "2")]),
    ];
    for (success, failure) in branches {
        let req = TxnRequest {
            compare: always(),
            success,
            failure,
        };
        match s.txn(req.clone()).await {
            Err(Error::DuplicateKey { key }) => {
                assert!(key == "d" || key == "x", "{key:?} for {req:?}")
            }
            other => panic!("expected DuplicateKey for {req:?}, got {other:?}"),
        }
    }
    assert_eq!(revision(&*s).await, base, "nothing was written");
    assert_eq!(get(&*s, "d").await, None);
    // Two deletes of one key are allowed.
    let twice = txn(
        &*s,
        TxnRequest {
            success: vec![delete_op("x"), delete_op("x")],
            ..Default::default()
        },
    )
    .await;
    let [TxnOpResponse::Delete(first), TxnOpResponse::Delete(second)] = &twice.responses[..] else {
        panic!("{twice:?}")
    };
    assert_eq!(
        (first.deleted, second.deleted, twice.revision),
        (1, 0, base + 1)
    );
}
