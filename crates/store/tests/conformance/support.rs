//! Helpers shared by the conformance cases: short forms of common requests, and watch reads and
//! polls bounded by a deadline (a deadline only turns a hang into a failure; nothing asserts time).

use std::future::Future;
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use skiff_store::*;

/// How long to wait for something that should happen promptly (an event, an expiry).
pub const DEADLINE: Duration = Duration::from_secs(30);

pub fn b(s: &str) -> Bytes {
    Bytes::copy_from_slice(s.as_bytes())
}

pub async fn put(s: &dyn Store, key: &str, value: &str) -> i64 {
    put_req(
        s,
        PutRequest {
            key: b(key),
            value: b(value),
            ..Default::default()
        },
    )
    .await
    .revision
}

pub async fn put_req(s: &dyn Store, req: PutRequest) -> PutResponse {
    let key = req.key.clone();
    s.put(req)
        .await
        .unwrap_or_else(|e| panic!("put {key:?}: {e}"))
}

pub async fn get(s: &dyn Store, key: &str) -> Option<KeyValue> {
    s.get(key.as_bytes())
        .await
        .unwrap_or_else(|e| panic!("get {key:?}: {e}"))
}

pub async fn range(s: &dyn Store, range: KeyRange) -> RangeResponse {
    range_req(
        s,
        RangeRequest {
            range,
            ..Default::default()
        },
    )
    .await
}

pub async fn range_req(s: &dyn Store, req: RangeRequest) -> RangeResponse {
    let what = format!("{req:?}");
    s.range(req)
        .await
        .unwrap_or_else(|e| panic!("range {what}: {e}"))
}

pub async fn delete(s: &dyn Store, range: KeyRange) -> DeleteResponse {
    let what = format!("{range:?}");
    s.delete(DeleteRequest {
        range,
        prev_kv: false,
    })
    .await
    .unwrap_or_else(|e| panic!("delete {what}: {e}"))
}

pub async fn txn(s: &dyn Store, req: TxnRequest) -> TxnResponse {
    let what = format!("{req:?}");
    s.txn(req)
        .await
        .unwrap_or_else(|e| panic!("txn {what}: {e}"))
}

pub async fn revision(s: &dyn Store) -> i64 {
    s.status().await.expect("status").revision
}

pub fn keys(kvs: &[KeyValue]) -> Vec<String> {
    kvs.iter()
        .map(|kv| String::from_utf8_lossy(&kv.key).into_owned())
        .collect()
}

pub fn values(kvs: &[KeyValue]) -> Vec<String> {
    kvs.iter()
        .map(|kv| String::from_utf8_lossy(&kv.value).into_owned())
        .collect()
}

pub fn put_op(key: &str, value: &str) -> TxnOp {
    TxnOp::Put(PutRequest {
        key: b(key),
        value: b(value),
        ..Default::default()
    })
}

pub fn range_op(key: &str) -> TxnOp {
    TxnOp::Range(RangeRequest {
        range: KeyRange::key(b(key)),
        ..Default::default()
    })
}

pub fn delete_op(key: &str) -> TxnOp {
    TxnOp::Delete(DeleteRequest {
        range: KeyRange::key(b(key)),
        prev_kv: true,
    })
}

pub async fn watch(s: &dyn Store, req: WatchRequest) -> WatchStream {
    let what = format!("{req:?}");
    s.watch(req)
        .await
        .unwrap_or_else(|e| panic!("watch {what}: {e}"))
}

/// The next item of a watch stream, failing the test if none comes within [`DEADLINE`].
pub async fn next_item(w: &mut WatchStream) -> Option<Result<WatchBatch>> {
    tokio::time::timeout(DEADLINE, w.next())
        .await
        .unwrap_or_else(|_| panic!("no watch item within {DEADLINE:?}"))
}

/// The next batch, which must exist and not be an error.
pub async fn next_batch(w: &mut WatchStream) -> WatchBatch {
    match next_item(w).await {
        Some(Ok(batch)) => batch,
        Some(Err(e)) => panic!("watch failed: {e}"),
        None => panic!("watch stream ended"),
    }
}

/// Exactly the next `n` events, across batches. No batch may be empty (nothing asked for
/// progress), and each batch's revision covers its events.
pub async fn next_events(w: &mut WatchStream, n: usize) -> Vec<Event> {
    let mut events = Vec::new();
    while events.len() < n {
        let batch = next_batch(w).await;
        assert!(
            !batch.events.is_empty(),
            "unrequested empty batch {batch:?}"
        );
        for ev in &batch.events {
            assert!(
                batch.revision >= ev.kv.mod_revision,
                "batch revision below its events: {batch:?}"
            );
        }
        events.extend(batch.events);
        assert!(
            events.len() <= n,
            "more events than the {n} expected: {events:#?}"
        );
    }
    for pair in events.windows(2) {
        assert!(
            pair[0].kv.mod_revision <= pair[1].kv.mod_revision,
            "events out of order: {events:#?}"
        );
    }
    events
}

/// (kind, key, mod_revision) of each event, for comparing whole sequences.
pub fn summary(events: &[Event]) -> Vec<(EventKind, String, i64)> {
    events
        .iter()
        .map(|e| {
            (
                e.kind,
                String::from_utf8_lossy(&e.kv.key).into_owned(),
                e.kv.mod_revision,
            )
        })
        .collect()
}

/// Poll `check` until it holds, failing the test after [`DEADLINE`].
pub async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let give_up = tokio::time::Instant::now() + DEADLINE;
    while !check().await {
        assert!(
            tokio::time::Instant::now() < give_up,
            "{what}: not within {DEADLINE:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
