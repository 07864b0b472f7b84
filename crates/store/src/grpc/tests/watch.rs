//! The Watch service: watch IDs and created headers, replay from a past revision with
//! `prev_kv` and filters, cancel, progress requests, and watches ended by compaction, by
//! lagging, or refused for a duplicate ID.

use super::*;

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

/// Writes enough to overflow everything between the store and an unread watch stream: the
/// session's response queue (128 responses), the HTTP/2 window of [`LAG_WINDOW_BYTES`] and a
/// chunk being encoded (a few responses of [`LAG_VALUE_BYTES`]), then the store's queue for the
/// watch (one batch). About 135 writes overflow them; the rest is margin.
const LAG_WRITES: i64 = 256;
const LAG_VALUE_BYTES: usize = 16 * 1024;
/// HTTP/2's default window; the client's own default (2 MiB) would hold over 100 more responses.
const LAG_WINDOW_BYTES: u32 = 65_535;

#[tokio::test]
async fn a_lagging_watcher_is_canceled_with_a_reason_naming_where_to_resume() {
    // The smallest queue the store allows: one unread batch, then the watcher is cut off.
    let server = start_with(|config| config.watch_buffer = 2).await;
    // A connection that lets the server send only one HTTP/2 window ahead of the reader.
    let channel = Channel::from_shared(format!("http://{}", server.addr))
        .unwrap()
        .initial_stream_window_size(LAG_WINDOW_BYTES)
        .initial_connection_window_size(LAG_WINDOW_BYTES)
        .connect()
        .await
        .unwrap();
    let mut w = Watch::open(channel).await;
    w.create(watch_prefix("/l/", 0)).await;
    assert!(w.next().await.created);
    let mut kv = server.kv().await;
    let value = "x".repeat(LAG_VALUE_BYTES);
    for _ in 0..LAG_WRITES {
        kv.put(put("/l/k", &value)).await.unwrap();
    }
    // Only now read: the events delivered before the cut, then the cancel.
    let mut last_delivered = 1;
    let resp = loop {
        let resp = w.next().await;
        if resp.canceled {
            break resp;
        }
        for ev in &resp.events {
            let revision = ev.kv.as_ref().unwrap().mod_revision;
            assert_eq!(revision, last_delivered + 1, "no gap before the cut");
            last_delivered = revision;
        }
    };
    assert!(
        last_delivered < 1 + LAG_WRITES,
        "the watcher was cut off before the last write"
    );
    assert_eq!(resp.compact_revision, 0);
    let resume = format!("resume from revision {}", last_delivered + 1);
    assert!(
        resp.cancel_reason.contains(&resume),
        "{resume:?} in {:?}",
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
