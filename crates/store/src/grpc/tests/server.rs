//! The server as a whole: shutdown ends long-lived streams, and an independent client (the
//! `etcd-client` crate) works against the facade.

use super::*;
use crate::store::Store;
use crate::types::PutRequest;

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
async fn connections_spread_over_several_threads_all_see_the_same_store() {
    let config = FacadeConfig {
        threads: 3,
        ..Default::default()
    };
    let server = start_serving(|_| {}, config).await;
    // Four connections over three threads: the first and the fourth share one.
    let mut clients = Vec::new();
    for _ in 0..4 {
        clients.push(server.kv().await);
    }
    for (i, client) in clients.iter_mut().enumerate() {
        client.put(put(&format!("/t/{i}"), "v")).await.unwrap();
    }
    for client in &mut clients {
        let got = client.range(prefix("/t/")).await.unwrap().into_inner();
        assert_eq!(keys(&got), ["/t/0", "/t/1", "/t/2", "/t/3"]);
    }
    server.stop().await.unwrap();
}

#[tokio::test]
async fn serve_returns_only_once_no_serving_thread_holds_the_store() {
    let server = start_serving(
        |_| {},
        FacadeConfig {
            threads: 2,
            ..Default::default()
        },
    )
    .await;
    let mut kv = server.kv().await;
    kv.put(put("/held", "v")).await.unwrap();
    let store = server.store.clone();
    let dir = server.stop_keeping_dir().await;
    // Only this handle is left, so closing really closes, and the directory opens again.
    store.close().await;
    let reopened = EmbeddedStore::open(EmbeddedConfig::new(dir.path()))
        .await
        .unwrap();
    let got = reopened.range(crate::types::RangeRequest {
        range: KeyRange::key("/held"),
        ..Default::default()
    });
    assert_eq!(got.await.unwrap().kvs.len(), 1);
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

#[tokio::test]
async fn the_etcd_backend_reconnects_after_its_server_restarts() {
    let server = start().await;
    let addr = server.addr;
    let store = crate::etcd::EtcdStore::connect(&[addr.to_string()], "")
        .await
        .unwrap();
    let put_v = |value: &'static str| {
        store.put(PutRequest {
            key: "/k".into(),
            value: value.into(),
            ..Default::default()
        })
    };
    put_v("before").await.unwrap();
    let served = server.store.clone();
    let dir = server.stop_keeping_dir().await;
    served.close().await;
    assert!(put_v("while down").await.is_err(), "no server, no write");

    // the same store, served again on the same port
    let reopened = EmbeddedStore::open(EmbeddedConfig::new(dir.path()))
        .await
        .unwrap();
    let listener = TcpListener::bind(addr).await.unwrap();
    let (_stop, stopped) = oneshot::channel::<()>();
    tokio::spawn(serve(reopened, listener, async move {
        let _ = stopped.await;
    }));
    put_v("after").await.expect("a new connection");
    let got = store
        .range(crate::types::RangeRequest {
            range: KeyRange::key("/k"),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(&got.kvs[0].value[..], b"after");
}
