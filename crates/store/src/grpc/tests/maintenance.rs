//! The Maintenance and Cluster services: Status, Alarm, Defragment and MemberList of the single
//! member, and `UNIMPLEMENTED` for the methods the facade does not serve.

use super::*;
use crate::store::Store;

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
    let store = server.store.status().await.unwrap();
    assert!(store.db_size > 0, "the store's file is on disk");
    assert_eq!(
        (status.db_size, status.db_size_in_use),
        (store.db_size, store.db_size_in_use),
        "the sizes are the store's"
    );
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
async fn defragment_is_accepted_and_changes_nothing() {
    let server = start().await;
    server.kv().await.put(put("/d", "v")).await.unwrap();
    let resp = server
        .maintenance()
        .await
        .defragment(rpc::DefragmentRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(resp.header.unwrap().revision, 2, "no revision was written");
    let got = server.kv().await.range(range("/d")).await.unwrap();
    assert_eq!(&got.into_inner().kvs[0].value[..], b"v");
}

#[tokio::test]
async fn methods_the_facade_does_not_serve_answer_unimplemented() {
    let server = start().await;
    let mut client = etcd_client::Client::connect([server.addr.to_string()], None)
        .await
        .unwrap();
    let code = |result: Result<(), etcd_client::Error>| match result {
        Err(etcd_client::Error::GRpcStatus(status)) => status.code(),
        other => panic!("expected a gRPC status, got {other:?}"),
    };
    let calls = [
        ("AuthEnable", code(client.auth_enable().await.map(drop))),
        ("UserList", code(client.user_list().await.map(drop))),
        ("Hash", code(client.hash().await.map(drop))),
        ("HashKV", code(client.hash_kv(0).await.map(drop))),
        ("Snapshot", code(client.snapshot().await.map(drop))),
        ("MoveLeader", code(client.move_leader(1).await.map(drop))),
        (
            "MemberAdd",
            code(client.member_add(["http://h:2380"], None).await.map(drop)),
        ),
        (
            "MemberRemove",
            code(client.member_remove(1).await.map(drop)),
        ),
    ];
    for (method, code) in calls {
        assert_eq!(code, Code::Unimplemented, "{method}");
    }
}
