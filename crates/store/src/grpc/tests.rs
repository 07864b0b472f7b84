//! The facade served on `127.0.0.1:0` over the in-memory [`FakeStore`], driven by the generated
//! gRPC clients (exact wire fields) and by the `etcd-client` crate (an independent client).

use std::net::SocketAddr;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::Channel;
use tonic::{Code, Streaming};

use super::fake::FakeStore;
use super::pb::etcdserverpb as rpc;
use super::pb::mvccpb;
use super::*;
use crate::store::Store;
use crate::types::{KeyRange, PutRequest};

/// Guards every wait on the server so a broken facade fails the test instead of hanging it.
const HANG_GUARD: Duration = Duration::from_secs(10);

struct Server {
    addr: SocketAddr,
    store: FakeStore,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<Result<(), ServeError>>,
}

async fn start() -> Server {
    let store = FakeStore::new();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(serve(store.clone(), listener, async move {
        let _ = stopped.await;
    }));
    Server {
        addr,
        store,
        stop: Some(stop),
        task,
    }
}

impl Server {
    async fn channel(&self) -> Channel {
        Channel::from_shared(format!("http://{}", self.addr))
            .unwrap()
            .connect()
            .await
            .unwrap()
    }
    async fn kv(&self) -> rpc::kv_client::KvClient<Channel> {
        rpc::kv_client::KvClient::new(self.channel().await)
    }
    async fn lease(&self) -> rpc::lease_client::LeaseClient<Channel> {
        rpc::lease_client::LeaseClient::new(self.channel().await)
    }
    async fn maintenance(&self) -> rpc::maintenance_client::MaintenanceClient<Channel> {
        rpc::maintenance_client::MaintenanceClient::new(self.channel().await)
    }
    async fn watch(&self) -> Watch {
        let mut client = rpc::watch_client::WatchClient::new(self.channel().await);
        let (tx, rx) = mpsc::channel(16);
        let responses = client
            .watch(ReceiverStream::new(rx))
            .await
            .unwrap()
            .into_inner();
        Watch { tx, responses }
    }
    async fn stop(mut self) -> Result<(), ServeError> {
        let _ = self.stop.take().unwrap().send(());
        tokio::time::timeout(HANG_GUARD, self.task)
            .await
            .expect("serve returns")
            .unwrap()
    }
}

/// One Watch bidi stream.
struct Watch {
    tx: mpsc::Sender<rpc::WatchRequest>,
    responses: Streaming<rpc::WatchResponse>,
}

impl Watch {
    async fn send(&self, req: rpc::watch_request::RequestUnion) {
        self.tx
            .send(rpc::WatchRequest {
                request_union: Some(req),
            })
            .await
            .unwrap();
    }
    async fn create(&self, create: rpc::WatchCreateRequest) {
        self.send(rpc::watch_request::RequestUnion::CreateRequest(create))
            .await;
    }
    async fn next(&mut self) -> rpc::WatchResponse {
        tokio::time::timeout(HANG_GUARD, self.responses.message())
            .await
            .expect("a watch response")
            .unwrap()
            .expect("the stream is open")
    }
}

fn range(key: &str) -> rpc::RangeRequest {
    rpc::RangeRequest {
        key: key.to_string().into(),
        ..Default::default()
    }
}

fn prefix(p: &str) -> rpc::RangeRequest {
    let r = KeyRange::prefix(p.to_string());
    rpc::RangeRequest {
        key: r.key,
        range_end: r.range_end,
        ..Default::default()
    }
}

fn put(key: &str, value: &str) -> rpc::PutRequest {
    rpc::PutRequest {
        key: key.to_string().into(),
        value: value.to_string().into(),
        ..Default::default()
    }
}

fn keys(resp: &rpc::RangeResponse) -> Vec<String> {
    resp.kvs
        .iter()
        .map(|kv| String::from_utf8_lossy(&kv.key).into_owned())
        .collect()
}

fn watch_prefix(p: &str, start_revision: i64) -> rpc::WatchCreateRequest {
    let r = KeyRange::prefix(p.to_string());
    rpc::WatchCreateRequest {
        key: r.key,
        range_end: r.range_end,
        start_revision,
        ..Default::default()
    }
}

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
async fn errors_carry_etcds_codes_and_exact_messages() {
    let server = start().await;
    let mut kv = server.kv().await;
    let err = kv.put(put("", "v")).await.unwrap_err();
    assert_eq!(
        (err.code(), err.message()),
        (Code::InvalidArgument, "etcdserver: key is not provided")
    );
    let err = kv.range(range("")).await.unwrap_err();
    assert_eq!(
        (err.code(), err.message()),
        (Code::InvalidArgument, "etcdserver: key is not provided")
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
    assert_eq!(
        (err.code(), err.message()),
        (
            Code::OutOfRange,
            "etcdserver: mvcc: required revision has been compacted"
        )
    );
    let err = kv
        .range(rpc::RangeRequest {
            revision: 99,
            ..range("/c")
        })
        .await
        .unwrap_err();
    assert_eq!(
        (err.code(), err.message()),
        (
            Code::OutOfRange,
            "etcdserver: mvcc: required revision is a future revision"
        )
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
    assert_eq!(
        (err.code(), err.message()),
        (Code::NotFound, "etcdserver: requested lease not found")
    );
    let err = lease
        .lease_grant(rpc::LeaseGrantRequest {
            ttl: 9_000_000_001,
            id: 0,
        })
        .await
        .unwrap_err();
    assert_eq!(
        (err.code(), err.message()),
        (Code::OutOfRange, "etcdserver: too large lease TTL")
    );
}

#[tokio::test]
async fn every_store_error_maps_to_etcds_status() {
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

use super::convert::{MSG_COMPACTED, MSG_DUPLICATE_KEY, MSG_EMPTY_KEY, MSG_FUTURE_REV};

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
async fn watch_ids_count_from_zero_and_the_created_header_is_the_revision_before_the_first_event() {
    let server = start().await;
    let mut kv = server.kv().await;
    let mut w = server.watch().await;
    w.create(watch_prefix("/w/", 0)).await;
    let created = w.next().await;
    assert!(created.created && !created.canceled);
    assert_eq!((created.watch_id, created.header.unwrap().revision), (0, 1));
    w.create(watch_prefix("/other/", 0)).await;
    assert_eq!(w.next().await.watch_id, 1);

    kv.put(put("/w/a", "1")).await.unwrap();
    let resp = w.next().await;
    assert_eq!((resp.watch_id, resp.header.unwrap().revision), (0, 2));
    let ev = &resp.events[0];
    assert_eq!(ev.r#type, mvccpb::event::EventType::Put as i32);
    assert_eq!(&ev.kv.as_ref().unwrap().key[..], b"/w/a");
}

#[tokio::test]
async fn watch_from_a_past_revision_replays_history_with_prev_kv_and_filters() {
    use rpc::watch_create_request::FilterType;
    let server = start().await;
    let mut kv = server.kv().await;
    kv.put(put("/h/a", "1")).await.unwrap(); // 2
    kv.put(put("/h/a", "2")).await.unwrap(); // 3
    let p = prefix("/h/");
    let del = rpc::DeleteRangeRequest {
        key: p.key,
        range_end: p.range_end,
        prev_kv: false,
    };
    kv.delete_range(del).await.unwrap(); // 4
    let mut w = server.watch().await;
    w.create(rpc::WatchCreateRequest {
        prev_kv: true,
        filters: vec![FilterType::Noput as i32],
        ..watch_prefix("/h/", 2)
    })
    .await;
    assert!(w.next().await.created);
    let resp = w.next().await;
    assert_eq!(resp.events.len(), 1, "puts are filtered out: {resp:?}");
    let ev = &resp.events[0];
    assert_eq!(ev.r#type, mvccpb::event::EventType::Delete as i32);
    assert_eq!(ev.kv.as_ref().unwrap().mod_revision, 4);
    assert_eq!(&ev.prev_kv.as_ref().unwrap().value[..], b"2");
}

#[tokio::test]
async fn cancel_stops_a_watch_with_a_canceled_response_and_unknown_ids_are_ignored() {
    let server = start().await;
    let mut kv = server.kv().await;
    let mut w = server.watch().await;
    w.create(watch_prefix("/c/", 0)).await;
    assert!(w.next().await.created);
    w.send(rpc::watch_request::RequestUnion::CancelRequest(
        rpc::WatchCancelRequest { watch_id: 5 },
    ))
    .await;
    w.send(rpc::watch_request::RequestUnion::CancelRequest(
        rpc::WatchCancelRequest { watch_id: 0 },
    ))
    .await;
    let resp = w.next().await;
    assert!(resp.canceled);
    assert_eq!(resp.watch_id, 0);
    kv.put(put("/c/x", "1")).await.unwrap();
    w.send(rpc::watch_request::RequestUnion::ProgressRequest(
        rpc::WatchProgressRequest {},
    ))
    .await;
    let resp = w.next().await;
    assert_eq!(
        resp.watch_id, -1,
        "no event of the canceled watch came first: {resp:?}"
    );
}

#[tokio::test]
async fn a_progress_request_is_answered_with_watch_id_minus_one_after_every_pending_event() {
    let server = start().await;
    let mut kv = server.kv().await;
    let mut w = server.watch().await;
    w.send(rpc::watch_request::RequestUnion::ProgressRequest(
        rpc::WatchProgressRequest {},
    ))
    .await;
    let resp = w.next().await;
    assert_eq!(
        (resp.watch_id, resp.header.unwrap().revision),
        (-1, 1),
        "no watches: answered at once"
    );

    w.create(watch_prefix("/p/", 0)).await;
    w.create(watch_prefix("/q/", 0)).await;
    assert!(w.next().await.created);
    assert!(w.next().await.created);
    kv.put(put("/p/a", "1")).await.unwrap();
    kv.put(put("/q/a", "1")).await.unwrap();
    w.send(rpc::watch_request::RequestUnion::ProgressRequest(
        rpc::WatchProgressRequest {},
    ))
    .await;
    let mut seen = Vec::new();
    loop {
        let resp = w.next().await;
        if resp.watch_id == -1 {
            assert!(resp.events.is_empty());
            assert_eq!(resp.header.unwrap().revision, 3);
            break;
        }
        seen.push(resp.header.unwrap().revision);
    }
    seen.sort();
    assert_eq!(seen, [2, 3], "both events came before the progress answer");
}

#[tokio::test]
async fn a_watch_from_a_compacted_revision_is_created_then_canceled_with_the_compact_revision() {
    let server = start().await;
    let mut kv = server.kv().await;
    for i in 0..3 {
        kv.put(put("/k", &i.to_string())).await.unwrap();
    }
    kv.compact(rpc::CompactionRequest {
        revision: 3,
        physical: false,
    })
    .await
    .unwrap();
    let mut w = server.watch().await;
    w.create(watch_prefix("/k", 2)).await;
    let created = w.next().await;
    assert!(created.created);
    let resp = w.next().await;
    assert!(resp.canceled);
    assert_eq!(
        (resp.watch_id, resp.compact_revision),
        (created.watch_id, 3)
    );
}

#[tokio::test]
async fn a_lagging_watcher_is_canceled_with_a_reason_naming_where_to_resume() {
    let server = start().await;
    let mut w = server.watch().await;
    w.create(watch_prefix("/l/", 0)).await;
    assert!(w.next().await.created);
    server.store.lag_all_watchers();
    let resp = w.next().await;
    assert!(resp.canceled);
    assert_eq!(resp.compact_revision, 0);
    assert!(
        resp.cancel_reason.contains("resume from revision 2"),
        "{}",
        resp.cancel_reason
    );
}

#[tokio::test]
async fn a_watch_id_already_in_use_is_refused() {
    let server = start().await;
    let mut w = server.watch().await;
    w.create(rpc::WatchCreateRequest {
        watch_id: 7,
        ..watch_prefix("/x", 0)
    })
    .await;
    assert_eq!(w.next().await.watch_id, 7);
    w.create(rpc::WatchCreateRequest {
        watch_id: 7,
        ..watch_prefix("/y", 0)
    })
    .await;
    let resp = w.next().await;
    assert!(resp.created && resp.canceled);
    assert_eq!(resp.watch_id, -1);
    assert_eq!(
        resp.cancel_reason,
        "mvcc: duplicate watch ID provided on the WatchStream"
    );
}

#[tokio::test]
async fn lease_calls_answer_as_etcd_including_for_unknown_leases() {
    let server = start().await;
    let mut lease = server.lease().await;
    let grant = lease
        .lease_grant(rpc::LeaseGrantRequest { ttl: 30, id: 0 })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(grant.ttl, 30);
    let id = grant.id;
    server
        .kv()
        .await
        .put(rpc::PutRequest {
            lease: id,
            ..put("/l", "v")
        })
        .await
        .unwrap();

    let (tx, rx) = mpsc::channel(4);
    let mut answers = lease
        .lease_keep_alive(ReceiverStream::new(rx))
        .await
        .unwrap()
        .into_inner();
    tx.send(rpc::LeaseKeepAliveRequest { id }).await.unwrap();
    tx.send(rpc::LeaseKeepAliveRequest { id: 999 })
        .await
        .unwrap();
    let a = answers.message().await.unwrap().unwrap();
    assert_eq!((a.id, a.ttl), (id, 30));
    let b = answers.message().await.unwrap().unwrap();
    assert_eq!(
        (b.id, b.ttl),
        (999, 0),
        "an unknown lease keeps alive with TTL 0"
    );

    let ttl = lease
        .lease_time_to_live(rpc::LeaseTimeToLiveRequest { id, keys: true })
        .await
        .unwrap();
    let ttl = ttl.into_inner();
    assert_eq!((ttl.granted_ttl, ttl.keys.len()), (30, 1));
    let none = lease
        .lease_time_to_live(rpc::LeaseTimeToLiveRequest {
            id: 999,
            keys: false,
        })
        .await
        .unwrap();
    assert_eq!(none.into_inner().ttl, -1, "an unknown lease has TTL -1");

    let leases = lease
        .lease_leases(rpc::LeaseLeasesRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(leases.leases.iter().map(|l| l.id).collect::<Vec<_>>(), [id]);

    let revoked = lease
        .lease_revoke(rpc::LeaseRevokeRequest { id })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        revoked.header.unwrap().revision,
        3,
        "revoking deleted the key"
    );
    assert!(
        server
            .kv()
            .await
            .range(range("/l"))
            .await
            .unwrap()
            .into_inner()
            .kvs
            .is_empty()
    );
}

#[tokio::test]
async fn status_reports_a_single_member_that_leads_at_the_store_revision() {
    let server = start().await;
    server.kv().await.put(put("/s", "v")).await.unwrap();
    let status = server
        .maintenance()
        .await
        .status(rpc::StatusRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(status.version, DEFAULT_ETCD_VERSION);
    assert_eq!(status.leader, status.header.unwrap().member_id);
    assert_eq!((status.raft_index, status.raft_term), (2, 1));
    assert_eq!((status.db_size, status.db_size_in_use), (4096, 2048));
    let alarms = server
        .maintenance()
        .await
        .alarm(rpc::AlarmRequest::default())
        .await
        .unwrap();
    assert!(alarms.into_inner().alarms.is_empty());

    let mut cluster = rpc::cluster_client::ClusterClient::new(server.channel().await);
    let members = cluster
        .member_list(rpc::MemberListRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(members.members.len(), 1);
    assert_eq!(
        members.members[0].client_ur_ls,
        [format!("http://{}", server.addr)]
    );
}

#[tokio::test]
async fn shutdown_ends_open_watch_streams_and_serve_returns() {
    let server = start().await;
    let mut w = server.watch().await;
    w.create(watch_prefix("/z", 0)).await;
    assert!(w.next().await.created);
    let mut responses = w.responses;
    server.stop().await.unwrap();
    let end = tokio::time::timeout(HANG_GUARD, responses.message())
        .await
        .expect("the stream ends");
    assert!(matches!(end, Ok(None) | Err(_)));
}

#[tokio::test]
async fn the_etcd_client_crate_interoperates_with_the_facade() {
    let server = start().await;
    let mut client = etcd_client::Client::connect([server.addr.to_string()], None)
        .await
        .unwrap();
    let mut watch = client
        .watch("/e/", Some(etcd_client::WatchOptions::new().with_prefix()))
        .await
        .unwrap();
    client.put("/e/k", "v", None).await.unwrap();
    let got = client
        .get("/e/", Some(etcd_client::GetOptions::new().with_prefix()))
        .await
        .unwrap();
    assert_eq!(got.kvs()[0].value(), b"v");

    let mut saw_put = false;
    while !saw_put {
        let resp = tokio::time::timeout(HANG_GUARD, watch.message())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        saw_put = resp
            .events()
            .iter()
            .any(|ev| ev.kv().is_some_and(|kv| kv.key() == b"/e/k"));
    }
    let lease = client.lease_grant(10, None).await.unwrap();
    let (mut keeper, mut stream) = client.lease_keep_alive(lease.id()).await.unwrap();
    keeper.keep_alive().await.unwrap();
    let answer = tokio::time::timeout(HANG_GUARD, stream.message())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(answer.ttl(), 10);
    let status = client.status().await.unwrap();
    assert_eq!(status.leader(), DEFAULT_MEMBER_ID);

    server
        .store
        .put(PutRequest {
            key: "/direct".into(),
            value: "x".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(
        client.get("/direct", None).await.unwrap().kvs()[0].value(),
        b"x"
    );
}
