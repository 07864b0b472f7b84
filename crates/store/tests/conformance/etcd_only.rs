//! What only the etcd backend has: its key prefix, checked against raw etcd; [`EtcdProcess`]
//! cleanup; and watch cancellation on drop, seen through etcd's own watcher gauge.

use bytes::Bytes;
use skiff_store::etcd::EtcdStore;
use skiff_store::etcd_process::EtcdProcess;
use skiff_store::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::support::*;

async fn start() -> (EtcdProcess, etcd_client::Client) {
    let etcd = EtcdProcess::start().await.expect("start etcd");
    let raw = etcd_client::Client::connect([etcd.endpoint()], None)
        .await
        .expect("connect");
    (etcd, raw)
}

#[tokio::test]
async fn prefix_isolates_the_store_from_the_rest_of_etcd() {
    let (etcd, mut raw) = start().await;
    for key in ["/a", "/t", "/t0", "/u/x", "/t/"] {
        raw.put(key, "foreign", None).await.expect("raw put");
    }
    let s = EtcdStore::connect(&[etcd.endpoint()], "/t/")
        .await
        .expect("connect");
    put(&s, "k", "mine").await;
    put(&s, "z/1", "mine").await;

    let everything = KeyRange::prefix(b(""));
    assert_eq!(keys(&range(&s, everything.clone()).await.kvs), ["k", "z/1"]);
    let from_k = KeyRange {
        key: b("k"),
        range_end: Bytes::from_static(&[0]),
    };
    assert_eq!(range(&s, from_k).await.count, 2);
    let raw_keys = raw
        .get("/t/", Some(etcd_client::GetOptions::new().with_prefix()))
        .await
        .expect("raw get");
    let raw_keys: Vec<&[u8]> = raw_keys.kvs().iter().map(|kv| kv.key()).collect();
    assert_eq!(
        raw_keys,
        [&b"/t/"[..], b"/t/k", b"/t/z/1"],
        "a foreign key equal to the prefix stays hidden"
    );

    // A watch of everything sees only this store's keys, without the prefix.
    let mut w = watch(
        &s,
        WatchRequest {
            range: everything.clone(),
            ..Default::default()
        },
    )
    .await;
    raw.put("/u/y", "foreign", None).await.expect("raw put");
    let r = put(&s, "n", "mine").await;
    assert_eq!(
        summary(&next_events(&mut w, 1).await),
        [(EventKind::Put, "n".into(), r)]
    );

    // Deleting everything deletes only this store's keys.
    assert_eq!(delete(&s, everything).await.deleted, 3);
    let all = raw
        .get("/", Some(etcd_client::GetOptions::new().with_prefix()))
        .await
        .expect("raw get");
    assert_eq!(all.count(), 6);

    // Lease key lists are stripped and filtered too.
    let lease = s.lease_grant(0, 60).await.expect("grant");
    put_req(
        &s,
        PutRequest {
            key: b("leased"),
            value: b("v"),
            lease: lease.id,
            prev_kv: false,
        },
    )
    .await;
    let foreign = etcd_client::PutOptions::new().with_lease(lease.id);
    raw.put("/elsewhere", "v", Some(foreign))
        .await
        .expect("raw put");
    let info = s
        .lease_time_to_live(lease.id, true)
        .await
        .expect("time to live");
    assert_eq!(info.keys, [b("leased")]);
}

#[tokio::test]
async fn etcd_refuses_an_empty_key_even_with_a_range_end() {
    let (_etcd, mut raw) = start().await;
    let from_empty = etcd_client::GetOptions::new().with_range(vec![0]);
    let err = raw
        .get(Vec::new(), Some(from_empty))
        .await
        .expect_err("etcd refuses the empty key");
    assert!(err.to_string().contains("key is not provided"), "{err}");
}

#[tokio::test]
async fn dropping_an_etcd_process_kills_it_and_removes_its_dir() {
    let etcd = EtcdProcess::start().await.expect("start etcd");
    let (pid, dir) = (etcd.pid(), etcd.dir().to_path_buf());
    assert!(dir.join("etcd.log").exists());
    drop(etcd);
    assert!(!dir.exists(), "{} removed", dir.display());
    // Reaped, not a zombie: the pid has no /proc entry (unless reused, which is not a zombie).
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    assert!(
        !stat.contains(") Z "),
        "etcd {pid} left as a zombie: {stat}"
    );
}

/// etcd's gauge of live watchers, read from its `/metrics` on the client port.
async fn etcd_watchers(endpoint: &str) -> i64 {
    let mut conn = tokio::net::TcpStream::connect(endpoint)
        .await
        .expect("connect to metrics");
    let request = format!("GET /metrics HTTP/1.0\r\nHost: {endpoint}\r\n\r\n");
    conn.write_all(request.as_bytes())
        .await
        .expect("send metrics request");
    let mut body = String::new();
    conn.read_to_string(&mut body).await.expect("read metrics");
    body.lines()
        .find_map(|line| line.strip_prefix("etcd_debugging_mvcc_watcher_total "))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .map(|v| v as i64)
        .unwrap_or_else(|| panic!("no watcher gauge in etcd metrics"))
}

#[tokio::test]
async fn dropping_a_watch_stream_cancels_the_watch_in_etcd() {
    let (etcd, _raw) = start().await;
    let s = EtcdStore::connect(&[etcd.endpoint()], "/t/")
        .await
        .expect("connect");
    let endpoint = etcd.endpoint();
    let w = watch(
        &s,
        WatchRequest {
            range: KeyRange::prefix(b("")),
            ..Default::default()
        },
    )
    .await;
    assert_eq!(etcd_watchers(&endpoint).await, 1);
    drop(w);
    eventually("etcd drops the watcher", || async {
        etcd_watchers(&endpoint).await == 0
    })
    .await;
    // The store still watches fine afterwards.
    let mut w = watch(
        &s,
        WatchRequest {
            range: KeyRange::key(b("k")),
            ..Default::default()
        },
    )
    .await;
    let r = put(&s, "k", "v").await;
    assert_eq!(
        summary(&next_events(&mut w, 1).await),
        [(EventKind::Put, "k".into(), r)]
    );
}
