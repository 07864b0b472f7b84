//! Revisions, versions, ranges, puts and deletes (etcd's KV service outside transactions).

use std::sync::Arc;

use bytes::Bytes;
use skiff_store::*;

use crate::support::*;

pub async fn fresh_store_starts_at_revision_1(s: Arc<dyn Store>) {
    let status = s.status().await.expect("status");
    assert_eq!((status.revision, status.compact_revision), (1, 0));
    assert_eq!(range(&*s, KeyRange::prefix(b(""))).await.revision, 1);
    assert_eq!(put(&*s, "a", "1").await, 2, "the first write is revision 2");
    let at_1 = RangeRequest {
        range: KeyRange::prefix(b("")),
        revision: 1,
        ..Default::default()
    };
    let resp = range_req(&*s, at_1).await;
    assert_eq!(
        (resp.kvs.len(), resp.count),
        (0, 0),
        "revision 1 is the empty store"
    );
}

pub async fn every_write_increments_the_global_revision_by_one(s: Arc<dyn Store>) {
    let base = revision(&*s).await;
    assert_eq!(put(&*s, "a", "1").await, base + 1);
    assert_eq!(put(&*s, "b", "1").await, base + 2);
    assert_eq!(put(&*s, "a", "2").await, base + 3);
    assert_eq!(delete(&*s, KeyRange::key(b("b"))).await.revision, base + 4);
    assert_eq!(revision(&*s).await, base + 4);
    assert_eq!(range(&*s, KeyRange::key(b("a"))).await.revision, base + 4);
}

pub async fn put_sets_create_and_mod_revision_and_counts_versions(s: Arc<dyn Store>) {
    let r1 = put(&*s, "k", "v1").await;
    let kv = get(&*s, "k").await.expect("k exists");
    let expected = KeyValue {
        key: b("k"),
        value: b("v1"),
        create_revision: r1,
        mod_revision: r1,
        version: 1,
        lease: 0,
    };
    assert_eq!(kv, expected);
    let r2 = put(&*s, "k", "v2").await;
    let kv = get(&*s, "k").await.expect("k exists");
    assert_eq!(
        (kv.value, kv.create_revision, kv.mod_revision, kv.version),
        (b("v2"), r1, r2, 2)
    );
}

pub async fn delete_resets_the_version_and_recreating_gets_a_new_create_revision(
    s: Arc<dyn Store>,
) {
    put(&*s, "k", "v1").await;
    let r2 = put(&*s, "k", "v2").await;
    let del = delete(&*s, KeyRange::key(b("k"))).await;
    assert_eq!(
        (del.deleted, del.revision),
        (1, r2 + 1),
        "a delete is a revision"
    );
    assert_eq!(get(&*s, "k").await, None);
    let r4 = put(&*s, "k", "v3").await;
    assert_eq!(r4, r2 + 2);
    let kv = get(&*s, "k").await.expect("k exists again");
    assert_eq!(
        (kv.create_revision, kv.mod_revision, kv.version),
        (r4, r4, 1)
    );
}

pub async fn deleting_nothing_creates_no_revision(s: Arc<dyn Store>) {
    put(&*s, "a", "1").await;
    let base = revision(&*s).await;
    let del = delete(&*s, KeyRange::key(b("missing"))).await;
    assert_eq!((del.deleted, del.revision), (0, base));
    let del = delete(&*s, KeyRange::prefix(b("nothing/"))).await;
    assert_eq!((del.deleted, del.revision), (0, base));
    assert_eq!(revision(&*s).await, base);
    assert_eq!(put(&*s, "b", "1").await, base + 1);
}

pub async fn range_of_one_key_returns_it_or_nothing(s: Arc<dyn Store>) {
    put(&*s, "a/1", "x").await;
    let current = put(&*s, "a/2", "y").await;
    let resp = range(&*s, KeyRange::key(b("a/1"))).await;
    assert_eq!(
        (keys(&resp.kvs), resp.count, resp.more, resp.revision),
        (vec!["a/1".into()], 1, false, current)
    );
    let resp = range(&*s, KeyRange::key(b("a"))).await;
    assert_eq!(
        (resp.kvs.len(), resp.count, resp.more, resp.revision),
        (0, 0, false, current)
    );
}

pub async fn range_by_prefix_returns_keys_in_ascending_order(s: Arc<dyn Store>) {
    // "p0" is the end of prefix "p/" ('/' + 1 == '0'): outside it.
    for key in ["p/b", "q", "p/a", "p", "p0", "p/c", "p/a/x"] {
        put(&*s, key, key).await;
    }
    let resp = range(&*s, KeyRange::prefix(b("p/"))).await;
    assert_eq!(keys(&resp.kvs), ["p/a", "p/a/x", "p/b", "p/c"]);
    assert_eq!(values(&resp.kvs), ["p/a", "p/a/x", "p/b", "p/c"]);
    assert_eq!((resp.count, resp.more), (4, false));
}

pub async fn range_from_key_with_end_zero_returns_every_later_key(s: Arc<dyn Store>) {
    for key in ["d", "a", "c", "b", "b0"] {
        put(&*s, key, "v").await;
    }
    let from_b = KeyRange {
        key: b("b"),
        range_end: Bytes::from_static(&[0]),
    };
    let resp = range(&*s, from_b).await;
    assert_eq!(keys(&resp.kvs), ["b", "b0", "c", "d"]);
    assert_eq!(resp.count, 4);
}

pub async fn range_with_an_explicit_end_is_half_open(s: Arc<dyn Store>) {
    for key in ["a", "b", "c", "d"] {
        put(&*s, key, "v").await;
    }
    let resp = range(
        &*s,
        KeyRange {
            key: b("b"),
            range_end: b("d"),
        },
    )
    .await;
    assert_eq!(keys(&resp.kvs), ["b", "c"]);
    let resp = range(
        &*s,
        KeyRange {
            key: b("c"),
            range_end: b("c"),
        },
    )
    .await;
    assert_eq!(
        (resp.kvs.len(), resp.count),
        (0, 0),
        "an empty interval holds nothing"
    );
}

pub async fn range_with_limit_reports_more_and_the_full_count(s: Arc<dyn Store>) {
    for i in 1..=5 {
        put(&*s, &format!("k{i}"), "v").await;
    }
    let limited = |limit| RangeRequest {
        range: KeyRange::prefix(b("k")),
        limit,
        ..Default::default()
    };
    let resp = range_req(&*s, limited(2)).await;
    assert_eq!(
        (keys(&resp.kvs), resp.more, resp.count),
        (vec!["k1".into(), "k2".into()], true, 5)
    );
    let resp = range_req(&*s, limited(5)).await;
    assert_eq!((resp.kvs.len(), resp.more, resp.count), (5, false, 5));
    let resp = range_req(&*s, limited(10)).await;
    assert_eq!((resp.kvs.len(), resp.more, resp.count), (5, false, 5));
}

pub async fn range_at_a_past_revision_sees_history(s: Arc<dyn Store>) {
    let r1 = put(&*s, "h/a", "v1").await;
    put(&*s, "h/b", "x").await;
    let r3 = put(&*s, "h/a", "v2").await;
    let r4 = delete(&*s, KeyRange::key(b("h/b"))).await.revision;
    let at = |revision| RangeRequest {
        range: KeyRange::prefix(b("h/")),
        revision,
        ..Default::default()
    };

    let resp = range_req(&*s, at(r1)).await;
    assert_eq!(
        (keys(&resp.kvs), values(&resp.kvs)),
        (vec!["h/a".into()], vec!["v1".into()])
    );
    assert_eq!((resp.kvs[0].mod_revision, resp.kvs[0].version), (r1, 1));
    assert_eq!(
        resp.revision, r4,
        "the header carries the current revision, not the read one"
    );

    let resp = range_req(&*s, at(r3)).await;
    assert_eq!(
        (keys(&resp.kvs), values(&resp.kvs)),
        (
            vec!["h/a".into(), "h/b".into()],
            vec!["v2".into(), "x".into()]
        )
    );
    assert_eq!(resp.count, 2);

    let resp = range_req(&*s, at(r4)).await;
    assert_eq!(keys(&resp.kvs), ["h/a"]);
}

pub async fn range_count_only_returns_the_count_without_kvs(s: Arc<dyn Store>) {
    for key in ["c/1", "c/2", "c/3", "d"] {
        put(&*s, key, "v").await;
    }
    let resp = range_req(
        &*s,
        RangeRequest {
            range: KeyRange::prefix(b("c/")),
            count_only: true,
            ..Default::default()
        },
    )
    .await;
    assert_eq!((resp.kvs.len(), resp.count, resp.more), (0, 3, false));
}

pub async fn range_keys_only_returns_keys_without_values(s: Arc<dyn Store>) {
    let r1 = put(&*s, "k", "value").await;
    let resp = range_req(
        &*s,
        RangeRequest {
            range: KeyRange::key(b("k")),
            keys_only: true,
            ..Default::default()
        },
    )
    .await;
    let expected = KeyValue {
        key: b("k"),
        value: Bytes::new(),
        create_revision: r1,
        mod_revision: r1,
        version: 1,
        lease: 0,
    };
    assert_eq!(resp.kvs, [expected]);
}

pub async fn range_at_a_future_revision_fails_with_future_revision(s: Arc<dyn Store>) {
    let current = put(&*s, "k", "v").await;
    let at = |revision| RangeRequest {
        range: KeyRange::key(b("k")),
        revision,
        ..Default::default()
    };
    match s.range(at(current + 1)).await {
        Err(Error::FutureRevision {
            requested,
            current: c,
        }) => assert_eq!((requested, c), (current + 1, current)),
        other => panic!("expected FutureRevision, got {other:?}"),
    }
    assert_eq!(
        range_req(&*s, at(current)).await.kvs.len(),
        1,
        "the current revision is readable"
    );
}

pub async fn range_with_an_empty_prefix_covers_every_key(s: Arc<dyn Store>) {
    for key in ["x", "y/z", "\u{7f}"] {
        put(&*s, key, "v").await;
    }
    let resp = range(&*s, KeyRange::prefix(b(""))).await;
    assert_eq!(keys(&resp.kvs), ["x", "y/z", "\u{7f}"]);
    // KeyRange::prefix("") is [0]..[0], as etcd's clients send it.
    let from_zero = KeyRange {
        key: Bytes::from_static(&[0]),
        range_end: Bytes::from_static(&[0]),
    };
    assert_eq!(range(&*s, from_zero).await.count, 3);
}

pub async fn empty_key_is_rejected_with_empty_key(s: Arc<dyn Store>) {
    let base = revision(&*s).await;
    let put = s
        .put(PutRequest {
            key: Bytes::new(),
            value: b("v"),
            ..Default::default()
        })
        .await;
    assert!(matches!(put, Err(Error::EmptyKey)), "put: {put:?}");
    let read = s
        .range(RangeRequest {
            range: KeyRange::key(Bytes::new()),
            ..Default::default()
        })
        .await;
    assert!(matches!(read, Err(Error::EmptyKey)), "range: {read:?}");
    let del = s
        .delete(DeleteRequest {
            range: KeyRange::key(Bytes::new()),
            prev_kv: false,
        })
        .await;
    assert!(matches!(del, Err(Error::EmptyKey)), "delete: {del:?}");
    // Even with a range end: etcd wants `[0]`, not an empty key, for "from the first key".
    let from_empty = KeyRange {
        key: Bytes::new(),
        range_end: Bytes::from_static(&[0]),
    };
    let read = s
        .range(RangeRequest {
            range: from_empty.clone(),
            ..Default::default()
        })
        .await;
    assert!(
        matches!(read, Err(Error::EmptyKey)),
        "range from the empty key: {read:?}"
    );
    let del = s
        .delete(DeleteRequest {
            range: from_empty,
            prev_kv: false,
        })
        .await;
    assert!(
        matches!(del, Err(Error::EmptyKey)),
        "delete from the empty key: {del:?}"
    );
    let in_txn = s
        .txn(TxnRequest {
            success: vec![put_op("", "v")],
            ..Default::default()
        })
        .await;
    assert!(matches!(in_txn, Err(Error::EmptyKey)), "txn: {in_txn:?}");
    assert_eq!(revision(&*s).await, base);
}

pub async fn put_with_prev_kv_returns_the_previous_version(s: Arc<dyn Store>) {
    let with_prev = |value: &str| PutRequest {
        key: b("k"),
        value: b(value),
        prev_kv: true,
        lease: 0,
    };
    let first = put_req(&*s, with_prev("v1")).await;
    assert_eq!(first.prev_kv, None, "nothing was there before");
    let second = put_req(&*s, with_prev("v2")).await;
    let r1 = first.revision;
    let expected = KeyValue {
        key: b("k"),
        value: b("v1"),
        create_revision: r1,
        mod_revision: r1,
        version: 1,
        lease: 0,
    };
    assert_eq!(second.prev_kv, Some(expected));
    let without = put_req(
        &*s,
        PutRequest {
            key: b("k"),
            value: b("v3"),
            ..Default::default()
        },
    )
    .await;
    assert_eq!(without.prev_kv, None, "not asked for");
}

pub async fn delete_with_prev_kv_returns_every_deleted_key_in_one_revision(s: Arc<dyn Store>) {
    for key in ["d/1", "d/2", "d/3", "e"] {
        put(&*s, key, &format!("value of {key}")).await;
    }
    let base = revision(&*s).await;
    let del = s
        .delete(DeleteRequest {
            range: KeyRange::prefix(b("d/")),
            prev_kv: true,
        })
        .await
        .expect("delete");
    assert_eq!((del.deleted, del.revision), (3, base + 1));
    assert_eq!(keys(&del.prev_kvs), ["d/1", "d/2", "d/3"]);
    assert_eq!(
        values(&del.prev_kvs),
        ["value of d/1", "value of d/2", "value of d/3"]
    );
    assert!(
        del.prev_kvs
            .iter()
            .all(|kv| kv.version == 1 && kv.mod_revision < base + 1)
    );
    assert_eq!(range(&*s, KeyRange::prefix(b("d/"))).await.count, 0);
    assert!(get(&*s, "e").await.is_some());
    let without = s
        .delete(DeleteRequest {
            range: KeyRange::key(b("e")),
            prev_kv: false,
        })
        .await
        .expect("delete");
    assert_eq!((without.deleted, without.prev_kvs.len()), (1, 0));
}

pub async fn value_over_the_size_limit_fails_and_writes_nothing(s: Arc<dyn Store>) {
    const MIB: usize = 1024 * 1024;
    // Below the 1.5 MiB default limit of both etcd and the embedded store.
    let one_mib = Bytes::from(vec![b'x'; MIB]);
    put_req(
        &*s,
        PutRequest {
            key: b("fits"),
            value: one_mib.clone(),
            ..Default::default()
        },
    )
    .await;
    assert_eq!(get(&*s, "fits").await.expect("fits").value, one_mib);

    let base = revision(&*s).await;
    let big = Bytes::from(vec![b'x'; 2 * MIB]);
    match s
        .put(PutRequest {
            key: b("big"),
            value: big.clone(),
            ..Default::default()
        })
        .await
    {
        Err(Error::ValueTooLarge { key, size, .. }) => {
            assert_eq!((key.as_str(), size), ("big", 2 * MIB))
        }
        other => panic!("expected ValueTooLarge, got {other:?}"),
    }
    let big_put = TxnOp::Put(PutRequest {
        key: b("big"),
        value: big,
        ..Default::default()
    });
    let in_txn = s
        .txn(TxnRequest {
            success: vec![put_op("small", "v"), big_put],
            ..Default::default()
        })
        .await;
    assert!(
        matches!(in_txn, Err(Error::ValueTooLarge { .. })),
        "txn: {in_txn:?}"
    );
    assert_eq!(revision(&*s).await, base, "nothing was written");
    assert_eq!(
        (get(&*s, "big").await, get(&*s, "small").await),
        (None, None)
    );
}

pub async fn empty_value_is_stored(s: Arc<dyn Store>) {
    let r = put(&*s, "k", "").await;
    let kv = get(&*s, "k")
        .await
        .expect("a key with an empty value exists");
    assert_eq!((kv.value.len(), kv.version, kv.mod_revision), (0, 1, r));
}

pub async fn status_reports_the_revision_of_the_last_write(s: Arc<dyn Store>) {
    let r = put(&*s, "k", "v").await;
    let status = s.status().await.expect("status");
    assert_eq!((status.revision, status.compact_revision), (r, 0));
    assert!(!status.version.is_empty(), "a version string");
    assert!(status.db_size > 0, "some bytes on disk: {status:?}");
    let r = delete(&*s, KeyRange::key(b("k"))).await.revision;
    assert_eq!(revision(&*s).await, r);
}
