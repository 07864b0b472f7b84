//! The KV service: Put and Range under etcd's response headers, Range's limit, sorting and
//! revision filters, Put's `ignore_value`, DeleteRange, and Txn (including the ops it refuses).

use super::*;

#[tokio::test]
async fn put_then_range_returns_the_value_under_a_header_with_fixed_ids_and_the_revision() {
    let server = start().await;
    let mut kv = server.kv().await;
    let put = kv.put(put("/a", "1")).await.unwrap().into_inner();
    let header = put.header.unwrap();
    assert_eq!(
        header.revision, 2,
        "a fresh store is at revision 1, as etcd"
    );
    assert_eq!(header.cluster_id, DEFAULT_CLUSTER_ID);
    assert_eq!(header.member_id, DEFAULT_MEMBER_ID);
    assert_eq!(header.raft_term, 1);

    let got = kv.range(range("/a")).await.unwrap().into_inner();
    assert_eq!(got.header.unwrap().revision, 2);
    assert_eq!(got.count, 1);
    let kv0 = &got.kvs[0];
    assert_eq!((&kv0.key[..], &kv0.value[..]), (&b"/a"[..], &b"1"[..]));
    assert_eq!(
        (kv0.create_revision, kv0.mod_revision, kv0.version),
        (2, 2, 1)
    );
}

#[tokio::test]
async fn range_with_a_limit_reports_more_and_the_full_count() {
    let server = start().await;
    let mut kv = server.kv().await;
    for k in ["/p/a", "/p/b", "/p/c", "/q"] {
        kv.put(put(k, "v")).await.unwrap();
    }
    let resp = kv
        .range(rpc::RangeRequest {
            limit: 2,
            ..prefix("/p/")
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(keys(&resp), ["/p/a", "/p/b"]);
    assert!(resp.more);
    assert_eq!(resp.count, 3);
}

#[tokio::test]
async fn range_sorts_by_the_requested_target_and_order_before_cutting_to_the_limit() {
    use rpc::range_request::{SortOrder, SortTarget};
    let server = start().await;
    let mut kv = server.kv().await;
    for (k, v) in [("/s/a", "3"), ("/s/b", "1"), ("/s/c", "2")] {
        kv.put(put(k, v)).await.unwrap();
    }
    let descending = rpc::RangeRequest {
        sort_order: SortOrder::Descend as i32,
        limit: 2,
        ..prefix("/s/")
    };
    let resp = kv.range(descending).await.unwrap().into_inner();
    assert_eq!(keys(&resp), ["/s/c", "/s/b"]);
    assert!(resp.more);

    let by_value = rpc::RangeRequest {
        sort_order: SortOrder::Ascend as i32,
        sort_target: SortTarget::Value as i32,
        keys_only: true,
        ..prefix("/s/")
    };
    let resp = kv.range(by_value).await.unwrap().into_inner();
    assert_eq!(keys(&resp), ["/s/b", "/s/c", "/s/a"]);
    assert!(
        resp.kvs.iter().all(|kv| kv.value.is_empty()),
        "keys_only still holds"
    );

    let bad = rpc::RangeRequest {
        sort_order: 7,
        ..prefix("/s/")
    };
    let err = kv.range(bad).await.unwrap_err();
    assert_eq!(
        (err.code(), err.message()),
        (Code::InvalidArgument, "etcdserver: invalid sort option")
    );
}

#[tokio::test]
async fn range_filters_by_mod_and_create_revision() {
    let server = start().await;
    let mut kv = server.kv().await;
    kv.put(put("/f/a", "1")).await.unwrap(); // rev 2
    kv.put(put("/f/b", "1")).await.unwrap(); // rev 3
    kv.put(put("/f/a", "2")).await.unwrap(); // rev 4
    let resp = kv
        .range(rpc::RangeRequest {
            min_mod_revision: 4,
            ..prefix("/f/")
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(keys(&resp), ["/f/a"]);
    let resp = kv
        .range(rpc::RangeRequest {
            min_create_revision: 3,
            ..prefix("/f/")
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(keys(&resp), ["/f/b"]);
}

#[tokio::test]
async fn txn_runs_the_branch_its_compares_choose_and_answers_each_op() {
    use rpc::compare::{CompareResult, CompareTarget, TargetUnion};
    use rpc::request_op::Request as Op;
    use rpc::response_op::Response as Resp;
    let server = start().await;
    let mut kv = server.kv().await;
    kv.put(put("/t", "old")).await.unwrap();
    let txn = |expect: &str| rpc::TxnRequest {
        compare: vec![rpc::Compare {
            result: CompareResult::Equal as i32,
            target: CompareTarget::Value as i32,
            key: "/t".into(),
            target_union: Some(TargetUnion::Value(expect.to_string().into())),
            range_end: Default::default(),
        }],
        success: vec![
            rpc::RequestOp {
                request: Some(Op::RequestPut(rpc::PutRequest {
                    prev_kv: true,
                    ..put("/t", "new")
                })),
            },
            rpc::RequestOp {
                request: Some(Op::RequestRange(range("/t"))),
            },
        ],
        failure: vec![rpc::RequestOp {
            request: Some(Op::RequestRange(range("/t"))),
        }],
    };
    let resp = kv.txn(txn("old")).await.unwrap().into_inner();
    assert!(resp.succeeded);
    assert_eq!(resp.header.unwrap().revision, 3);
    let Some(Resp::ResponsePut(p)) = &resp.responses[0].response else {
        panic!("put response")
    };
    assert_eq!(&p.prev_kv.as_ref().unwrap().value[..], b"old");
    let Some(Resp::ResponseRange(r)) = &resp.responses[1].response else {
        panic!("range response")
    };
    assert_eq!(&r.kvs[0].value[..], b"new");

    let resp = kv.txn(txn("old")).await.unwrap().into_inner();
    assert!(!resp.succeeded);
    assert_eq!(resp.responses.len(), 1);

    let many = rpc::TxnRequest {
        success: vec![
            rpc::RequestOp {
                request: Some(Op::RequestRange(range("/t")))
            };
            129
        ],
        ..Default::default()
    };
    let err = kv.txn(many).await.unwrap_err();
    assert_eq!(
        err.message(),
        "etcdserver: too many operations in txn request"
    );
}

#[tokio::test]
async fn put_with_ignore_value_keeps_the_current_value_and_needs_the_key() {
    let server = start().await;
    let mut kv = server.kv().await;
    let lease = server
        .lease()
        .await
        .lease_grant(rpc::LeaseGrantRequest { ttl: 60, id: 0 })
        .await
        .unwrap();
    let id = lease.into_inner().id;
    kv.put(put("/iv", "kept")).await.unwrap();
    let keep = rpc::PutRequest {
        key: "/iv".into(),
        ignore_value: true,
        lease: id,
        ..Default::default()
    };
    kv.put(keep).await.unwrap();
    let got = kv.range(range("/iv")).await.unwrap().into_inner();
    assert_eq!(
        (&got.kvs[0].value[..], got.kvs[0].lease),
        (&b"kept"[..], id)
    );

    let missing = rpc::PutRequest {
        key: "/nope".into(),
        ignore_value: true,
        ..Default::default()
    };
    let err = kv.put(missing).await.unwrap_err();
    assert_eq!(err.message(), "etcdserver: key not found");
    let both = rpc::PutRequest {
        ignore_value: true,
        ..put("/iv", "x")
    };
    assert_eq!(
        kv.put(both).await.unwrap_err().message(),
        "etcdserver: value is provided"
    );
}

#[tokio::test]
async fn delete_range_reports_the_deleted_count_and_previous_values() {
    let server = start().await;
    let mut kv = server.kv().await;
    kv.put(put("/d/1", "a")).await.unwrap();
    kv.put(put("/d/2", "b")).await.unwrap();
    let p = prefix("/d/");
    let del = rpc::DeleteRangeRequest {
        key: p.key,
        range_end: p.range_end,
        prev_kv: true,
    };
    let resp = kv.delete_range(del).await.unwrap().into_inner();
    assert_eq!(resp.deleted, 2);
    assert_eq!(resp.header.unwrap().revision, 4);
    assert_eq!(
        resp.prev_kvs
            .iter()
            .map(|kv| &kv.value[..])
            .collect::<Vec<_>>(),
        [b"a", b"b"]
    );
}

#[tokio::test]
async fn a_nested_txn_or_a_put_ignoring_value_or_lease_inside_a_txn_is_unimplemented() {
    use rpc::request_op::Request as Op;
    let server = start().await;
    let mut kv = server.kv().await;
    kv.put(put("/n", "v")).await.unwrap();
    let ignoring_value = rpc::PutRequest {
        key: "/n".into(),
        ignore_value: true,
        ..Default::default()
    };
    let ignoring_lease = rpc::PutRequest {
        ignore_lease: true,
        ..put("/n", "w")
    };
    let ops = [
        Op::RequestTxn(rpc::TxnRequest::default()),
        Op::RequestPut(ignoring_value),
        Op::RequestPut(ignoring_lease),
    ];
    for op in ops {
        let txn = rpc::TxnRequest {
            success: vec![rpc::RequestOp {
                request: Some(op.clone()),
            }],
            ..Default::default()
        };
        let err = kv.txn(txn).await.unwrap_err();
        assert_eq!(err.code(), Code::Unimplemented, "for {op:?}");
    }
    let got = kv.range(range("/n")).await.unwrap().into_inner();
    assert_eq!(
        (got.header.unwrap().revision, &got.kvs[0].value[..]),
        (2, &b"v"[..]),
        "nothing was written"
    );
}
