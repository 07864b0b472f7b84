//! Watches: replay from a past revision (every event, in order, no gap, no duplicate), live
//! events, compacted start revisions, and progress requests.
//!
//! "No duplicate and nothing extra" is checked with a sentinel: after the expected events, one
//! more write in the watched range must be the very next event.

use std::sync::Arc;

use bytes::Bytes;
use skiff_store::*;

use crate::support::*;

fn watch_key(key: &str, start_revision: i64) -> WatchRequest {
    WatchRequest {
        range: KeyRange::key(b(key)),
        start_revision,
        prev_kv: true,
        progress_notify: false,
    }
}

fn watch_prefix(prefix: &str, start_revision: i64) -> WatchRequest {
    WatchRequest {
        range: KeyRange::prefix(b(prefix)),
        start_revision,
        prev_kv: true,
        progress_notify: false,
    }
}

fn kv(key: &str, value: &str, create_revision: i64, mod_revision: i64, version: i64) -> KeyValue {
    KeyValue {
        key: b(key),
        value: b(value),
        create_revision,
        mod_revision,
        version,
        lease: 0,
    }
}

/// A delete event's key-value: only the key and the delete's revision.
fn tombstone(key: &str, revision: i64) -> KeyValue {
    KeyValue {
        key: b(key),
        value: Bytes::new(),
        create_revision: 0,
        mod_revision: revision,
        version: 0,
        lease: 0,
    }
}

pub async fn key_from_a_past_revision_replays_every_event_then_live_ones(s: Arc<dyn Store>) {
    let r1 = put(&*s, "k", "v1").await;
    put(&*s, "other", "x").await;
    let r3 = put(&*s, "k", "v2").await;
    let r4 = delete(&*s, KeyRange::key(b("k"))).await.revision;
    let r5 = put(&*s, "k", "v3").await;
    let mut w = watch(&*s, watch_key("k", r1)).await;
    let events = next_events(&mut w, 4).await;
    let expected = [
        Event {
            kind: EventKind::Put,
            kv: kv("k", "v1", r1, r1, 1),
            prev_kv: None,
        },
        Event {
            kind: EventKind::Put,
            kv: kv("k", "v2", r1, r3, 2),
            prev_kv: Some(kv("k", "v1", r1, r1, 1)),
        },
        Event {
            kind: EventKind::Delete,
            kv: tombstone("k", r4),
            prev_kv: Some(kv("k", "v2", r1, r3, 2)),
        },
        Event {
            kind: EventKind::Put,
            kv: kv("k", "v3", r5, r5, 1),
            prev_kv: None,
        },
    ];
    assert_eq!(events, expected);

    let r6 = put(&*s, "k", "v4").await;
    let live = next_events(&mut w, 1).await;
    assert_eq!(
        live,
        [Event {
            kind: EventKind::Put,
            kv: kv("k", "v4", r5, r6, 2),
            prev_kv: Some(kv("k", "v3", r5, r5, 1))
        }]
    );
    let sentinel = put(&*s, "k", "sentinel").await;
    assert_eq!(
        summary(&next_events(&mut w, 1).await),
        [(EventKind::Put, "k".into(), sentinel)]
    );
}

pub async fn prefix_from_a_past_revision_delivers_every_event_in_order(s: Arc<dyn Store>) {
    let start = revision(&*s).await + 1;
    let mut expected = Vec::new();
    for i in 0..30 {
        let key = format!("w/{}", i % 4);
        if i % 7 == 6 {
            let del = delete(&*s, KeyRange::key(b(&key))).await;
            if del.deleted == 1 {
                expected.push((EventKind::Delete, key, del.revision));
            }
        } else {
            expected.push((
                EventKind::Put,
                key.clone(),
                put(&*s, &key, &i.to_string()).await,
            ));
        }
        put(&*s, "x/outside", &i.to_string()).await;
    }
    let mut w = watch(&*s, watch_prefix("w/", start)).await;
    let events = next_events(&mut w, expected.len()).await;
    assert_eq!(summary(&events), expected);
    for ev in &events {
        if ev.kind == EventKind::Put && ev.kv.version > 1 {
            let prev = ev.prev_kv.as_ref().expect("an overwrite has a prev_kv");
            assert_eq!((prev.version, &prev.key), (ev.kv.version - 1, &ev.kv.key));
        }
    }

    // Live: a txn writing two watched keys and one outside arrives as two events, one revision.
    let resp = txn(
        &*s,
        TxnRequest {
            success: vec![
                put_op("w/b", "1"),
                put_op("x/outside", "y"),
                put_op("w/a", "1"),
            ],
            ..Default::default()
        },
    )
    .await;
    let live = next_events(&mut w, 2).await;
    let in_txn_order = [
        (EventKind::Put, "w/b".into(), resp.revision),
        (EventKind::Put, "w/a".into(), resp.revision),
    ];
    assert_eq!(
        summary(&live),
        in_txn_order,
        "events of one txn come in the txn's order, not key order"
    );
    let mut replay = watch(&*s, watch_prefix("w/", resp.revision)).await;
    assert_eq!(
        summary(&next_events(&mut replay, 2).await),
        in_txn_order,
        "replayed in the same order"
    );
    let sentinel = put(&*s, "w/sentinel", "").await;
    assert_eq!(
        summary(&next_events(&mut w, 1).await),
        [(EventKind::Put, "w/sentinel".into(), sentinel)]
    );
}

pub async fn from_revision_zero_gets_only_new_events(s: Arc<dyn Store>) {
    put(&*s, "k", "old").await;
    let mut w = watch(
        &*s,
        WatchRequest {
            range: KeyRange::key(b("k")),
            ..Default::default()
        },
    )
    .await;
    let r = put(&*s, "k", "new").await;
    // The first item is the new event: no replay, and the watch's creation is not a progress batch.
    let batch = next_batch(&mut w).await;
    assert_eq!(summary(&batch.events), [(EventKind::Put, "k".into(), r)]);
    assert_eq!(batch.events[0].prev_kv, None, "prev_kv was not asked for");
    assert_eq!(batch.events[0].kv.value, b("new"));
}

pub async fn ignores_keys_outside_its_range(s: Arc<dyn Store>) {
    let mut w = watch(&*s, watch_key("a", 0)).await;
    for key in ["ab", "b", "a0", "A", "a/"] {
        put(&*s, key, "v").await;
    }
    let r = put(&*s, "a", "v").await;
    assert_eq!(
        summary(&next_events(&mut w, 1).await),
        [(EventKind::Put, "a".into(), r)]
    );
}

pub async fn range_delete_arrives_as_deletes_sharing_one_revision(s: Arc<dyn Store>) {
    let mut written = Vec::new();
    for key in ["d/3", "d/1", "d/2"] {
        written.push((key, put(&*s, key, key).await));
    }
    put(&*s, "e", "e").await;
    written.sort();
    let mut w = watch(&*s, watch_prefix("d/", 0)).await;
    let del = delete(&*s, KeyRange::prefix(b("d/"))).await;
    let events = next_events(&mut w, 3).await;
    let expected: Vec<Event> = written
        .iter()
        .map(|&(key, r)| Event {
            kind: EventKind::Delete,
            kv: tombstone(key, del.revision),
            prev_kv: Some(kv(key, key, r, r, 1)),
        })
        .collect();
    assert_eq!(events, expected, "one delete event per key, in key order");
}

pub async fn from_a_future_revision_starts_there(s: Arc<dyn Store>) {
    let current = put(&*s, "k", "v1").await;
    let mut w = watch(&*s, watch_key("k", current + 2)).await;
    put(&*s, "k", "v2").await;
    let r = put(&*s, "k", "v3").await;
    assert_eq!(r, current + 2);
    let events = next_events(&mut w, 1).await;
    assert_eq!(
        summary(&events),
        [(EventKind::Put, "k".into(), r)],
        "nothing before the start revision"
    );
}

pub async fn from_a_compacted_revision_yields_compacted_then_ends(s: Arc<dyn Store>) {
    let r1 = put(&*s, "k", "v1").await;
    put(&*s, "k", "v2").await;
    let r3 = put(&*s, "k", "v3").await;
    s.compact(r3).await.expect("compact");
    let mut w = watch(&*s, watch_key("k", r1)).await;
    match next_item(&mut w).await {
        Some(Err(Error::Compacted {
            requested,
            compact_revision,
        })) => assert_eq!((requested, compact_revision), (r1, r3)),
        other => panic!("expected Compacted first, got {other:?}"),
    }
    assert!(
        next_item(&mut w).await.is_none(),
        "the stream ends after Compacted"
    );

    // At the compact revision itself the watch works, starting with the write made there.
    let mut w = watch(&*s, watch_key("k", r3)).await;
    let events = next_events(&mut w, 1).await;
    assert_eq!(summary(&events), [(EventKind::Put, "k".into(), r3)]);
}

pub async fn progress_request_yields_an_empty_batch_at_or_after_the_last_write(s: Arc<dyn Store>) {
    // On a new watch with nothing to deliver.
    let current = put(&*s, "before", "v").await;
    let mut w = watch(&*s, watch_prefix("p/", 0)).await;
    w.request_progress();
    let batch = next_batch(&mut w).await;
    assert!(batch.is_progress(), "{batch:?}");
    assert!(
        batch.revision >= current,
        "progress at {} below {current}",
        batch.revision
    );

    // On a watch that has replayed history, after writes outside the watched range.
    let first = put(&*s, "p/1", "v").await;
    for i in 2..=5 {
        put(&*s, &format!("p/{i}"), "v").await;
    }
    let mut replay = watch(&*s, watch_prefix("p/", first)).await;
    assert_eq!(next_events(&mut replay, 5).await.len(), 5);
    let last = put(&*s, "q", "outside").await;
    replay.request_progress();
    let batch = next_batch(&mut replay).await;
    assert!(batch.is_progress(), "{batch:?}");
    assert!(
        batch.revision >= last,
        "progress at {} below the last write {last}",
        batch.revision
    );

    // Both watches go on delivering events afterwards; the first one sees the five puts first.
    let r = put(&*s, "p/6", "v").await;
    assert_eq!(
        summary(&next_events(&mut replay, 1).await),
        [(EventKind::Put, "p/6".into(), r)]
    );
    let events = next_events(&mut w, 6).await;
    assert_eq!(summary(&events[5..]), [(EventKind::Put, "p/6".into(), r)]);
}
