//! The Lease service: grant, the keep-alive stream, time-to-live, list and revoke, including
//! etcd's answers for a lease that does not exist.

use super::*;

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
