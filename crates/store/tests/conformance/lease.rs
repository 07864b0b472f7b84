//! Leases: grant, attach keys, time-to-live, keep-alive, revoke and expiry (both delete the
//! attached keys in one revision, seen by watchers), and unknown leases.

use std::sync::Arc;

use bytes::Bytes;
use skiff_store::*;

use crate::support::*;

fn put_leased(key: &str, lease: i64) -> PutRequest {
    PutRequest {
        key: b(key),
        value: b("v"),
        lease,
        prev_kv: false,
    }
}

fn is_lease_not_found<T: std::fmt::Debug>(result: &Result<T>, id: i64) -> bool {
    matches!(result, Err(Error::LeaseNotFound { id: i }) if *i == id)
}

pub async fn grant_attaches_keys_and_time_to_live_lists_them(s: Arc<dyn Store>) {
    let lease = s.lease_grant(0, 60).await.expect("grant");
    assert!(lease.id != 0, "the store chose an id");
    assert_eq!(lease.ttl, 60);
    put_req(&*s, put_leased("l/2", lease.id)).await;
    put_req(&*s, put_leased("l/1", lease.id)).await;
    assert_eq!(get(&*s, "l/1").await.expect("l/1").lease, lease.id);

    let info = s
        .lease_time_to_live(lease.id, true)
        .await
        .expect("time to live");
    assert_eq!((info.id, info.granted_ttl), (lease.id, 60));
    assert!(info.ttl > 0 && info.ttl <= 60, "remaining ttl {}", info.ttl);
    let mut attached = info.keys.clone();
    attached.sort();
    assert_eq!(attached, [b("l/1"), b("l/2")]);
    let info = s
        .lease_time_to_live(lease.id, false)
        .await
        .expect("time to live");
    assert!(info.keys.is_empty(), "keys only when asked for");
}

pub async fn grant_with_a_chosen_id_uses_it_and_refuses_a_duplicate(s: Arc<dyn Store>) {
    let lease = s.lease_grant(4242, 60).await.expect("grant");
    assert_eq!((lease.id, lease.ttl), (4242, 60));
    match s.lease_grant(4242, 30).await {
        Err(Error::LeaseExists { id }) => assert_eq!(id, 4242),
        other => panic!("expected LeaseExists, got {other:?}"),
    }
}

pub async fn keep_alive_renews_to_the_granted_ttl(s: Arc<dyn Store>) {
    let lease = s.lease_grant(0, 60).await.expect("grant");
    assert_eq!(s.lease_keep_alive(lease.id).await.expect("keep alive"), 60);
    let info = s
        .lease_time_to_live(lease.id, false)
        .await
        .expect("time to live");
    assert!(info.ttl > 0 && info.ttl <= 60);
}

pub async fn revoke_deletes_attached_keys_in_one_revision_and_watchers_see_it(s: Arc<dyn Store>) {
    let lease = s.lease_grant(0, 60).await.expect("grant");
    put_req(&*s, put_leased("l/1", lease.id)).await;
    put_req(&*s, put_leased("l/2", lease.id)).await;
    put(&*s, "l/3", "unleased").await;
    let base = revision(&*s).await;
    let watch_req = WatchRequest {
        range: KeyRange::prefix(b("l/")),
        prev_kv: true,
        ..Default::default()
    };
    let mut w = watch(&*s, watch_req).await;

    let after = s.lease_revoke(lease.id).await.expect("revoke");
    assert_eq!(after, base + 1, "both keys go in one revision");
    let events = next_events(&mut w, 2).await;
    assert_eq!(
        summary(&events),
        [
            (EventKind::Delete, "l/1".into(), base + 1),
            (EventKind::Delete, "l/2".into(), base + 1)
        ]
    );
    assert!(
        events
            .iter()
            .all(|e| e.prev_kv.as_ref().is_some_and(|kv| kv.lease == lease.id))
    );
    assert_eq!(
        keys(&range(&*s, KeyRange::prefix(b("l/"))).await.kvs),
        ["l/3"]
    );
    assert!(is_lease_not_found(
        &s.lease_time_to_live(lease.id, false).await,
        lease.id
    ));
    assert!(is_lease_not_found(
        &s.lease_revoke(lease.id).await,
        lease.id
    ));
}

pub async fn expiry_deletes_attached_keys(s: Arc<dyn Store>) {
    // etcd's minimum TTL is about 2 s (1.5 x its election timeout, rounded up).
    let lease = s.lease_grant(0, 2).await.expect("grant");
    assert!(lease.ttl >= 2, "granted {}", lease.ttl);
    let written = put_req(&*s, put_leased("short", lease.id)).await.revision;
    // From the put itself, so the delete cannot slip by before the watch exists.
    let from_put = WatchRequest {
        range: KeyRange::key(b("short")),
        start_revision: written,
        ..Default::default()
    };
    let mut w = watch(&*s, from_put).await;
    let events = next_events(&mut w, 2).await;
    assert_eq!(
        summary(&events),
        [
            (EventKind::Put, "short".into(), written),
            (EventKind::Delete, "short".into(), written + 1)
        ]
    );
    assert_eq!(get(&*s, "short").await, None);
    eventually("the expired lease is gone", || async {
        is_lease_not_found(&s.lease_time_to_live(lease.id, false).await, lease.id)
    })
    .await;
    assert!(!s.lease_list().await.expect("list").contains(&lease.id));
}

pub async fn put_with_an_unknown_lease_fails_with_lease_not_found(s: Arc<dyn Store>) {
    let base = revision(&*s).await;
    assert!(is_lease_not_found(
        &s.put(put_leased("k", 999_999)).await,
        999_999
    ));
    let in_txn = s
        .txn(TxnRequest {
            success: vec![TxnOp::Put(put_leased("k", 999_999))],
            ..Default::default()
        })
        .await;
    assert!(is_lease_not_found(&in_txn, 999_999), "txn: {in_txn:?}");
    assert_eq!(revision(&*s).await, base, "nothing was written");
    assert_eq!(get(&*s, "k").await, None);
}

pub async fn operations_on_an_unknown_lease_fail_with_lease_not_found(s: Arc<dyn Store>) {
    assert!(is_lease_not_found(&s.lease_revoke(777).await, 777));
    assert!(is_lease_not_found(&s.lease_keep_alive(777).await, 777));
    assert!(is_lease_not_found(
        &s.lease_time_to_live(777, true).await,
        777
    ));
}

pub async fn put_without_a_lease_detaches_the_key(s: Arc<dyn Store>) {
    let lease = s.lease_grant(0, 60).await.expect("grant");
    put_req(&*s, put_leased("k", lease.id)).await;
    put(&*s, "k", "detached").await;
    assert_eq!(get(&*s, "k").await.expect("k").lease, 0);
    // Deleting a key detaches it too: recreated without a lease, the revoke leaves it alone.
    put_req(&*s, put_leased("gone", lease.id)).await;
    delete(&*s, KeyRange::key(b("gone"))).await;
    put(&*s, "gone", "back").await;
    let info = s
        .lease_time_to_live(lease.id, true)
        .await
        .expect("time to live");
    assert_eq!(info.keys, Vec::<Bytes>::new());
    let before = revision(&*s).await;
    assert_eq!(
        s.lease_revoke(lease.id).await.expect("revoke"),
        before,
        "nothing to delete"
    );
    assert_eq!(
        get(&*s, "k").await.expect("k survives the revoke").value,
        b("detached")
    );
    assert_eq!(
        get(&*s, "gone")
            .await
            .expect("gone survives the revoke")
            .value,
        b("back")
    );
}

pub async fn lease_list_shows_live_leases_only(s: Arc<dyn Store>) {
    let a = s.lease_grant(0, 60).await.expect("grant").id;
    let b = s.lease_grant(0, 60).await.expect("grant").id;
    let mut listed = s.lease_list().await.expect("list");
    listed.sort();
    let mut both = vec![a, b];
    both.sort();
    assert_eq!(listed, both);
    s.lease_revoke(a).await.expect("revoke");
    assert_eq!(s.lease_list().await.expect("list"), [b]);
}
