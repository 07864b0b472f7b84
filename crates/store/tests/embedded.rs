//! Behaviour specific to the embedded backend: durability across reopen, refusal of damaged data,
//! group commit, compaction keeping the file bounded, slow watchers, lease expiry.
//! (What every backend shares is in `conformance.rs`.)

use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use skiff_store::*;

fn config(dir: &std::path::Path) -> EmbeddedConfig {
    EmbeddedConfig::new(dir)
}

async fn put(store: &impl Store, key: &str, value: &str) -> i64 {
    let req = PutRequest {
        key: key.to_owned().into(),
        value: value.to_owned().into(),
        ..Default::default()
    };
    store.put(req).await.expect("put").revision
}

#[tokio::test]
async fn acknowledged_writes_are_there_after_reopening() {
    let dir = tempfile::tempdir().unwrap();
    let store = EmbeddedStore::open(config(dir.path())).await.unwrap();
    put(&store, "/a", "1").await;
    put(&store, "/a", "2").await;
    let rev = put(&store, "/b", "3").await;
    store
        .delete(DeleteRequest {
            range: KeyRange::key("/b"),
            prev_kv: false,
        })
        .await
        .unwrap();
    store.close().await;

    let store = EmbeddedStore::open(config(dir.path())).await.unwrap();
    let a = store.get(b"/a").await.unwrap().expect("a survives");
    assert_eq!(
        (&a.value[..], a.version, a.create_revision),
        (&b"2"[..], 2, 2)
    );
    assert_eq!(store.get(b"/b").await.unwrap(), None);
    assert_eq!(store.status().await.unwrap().revision, rev + 1);
    let old = RangeRequest {
        range: KeyRange::key("/b"),
        revision: rev,
        ..Default::default()
    };
    let old = store.range(old).await.unwrap();
    assert_eq!(&old.kvs[0].value[..], b"3", "history survives too");
}

#[tokio::test]
async fn a_truncated_data_file_is_refused_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let store = EmbeddedStore::open(config(dir.path())).await.unwrap();
    for i in 0..200 {
        put(&store, &format!("/k/{i}"), &"x".repeat(1000)).await;
    }
    store.close().await;
    let file = dir.path().join("store.redb");
    let len = std::fs::metadata(&file).unwrap().len();
    let f = std::fs::OpenOptions::new().write(true).open(&file).unwrap();
    f.set_len(len / 3).unwrap();
    drop(f);
    let err = EmbeddedStore::open(config(dir.path()))
        .await
        .expect_err("must refuse to start");
    assert!(
        err.to_string().contains("store.redb"),
        "error names the file: {err}"
    );
}

#[tokio::test]
async fn an_empty_data_file_is_refused_rather_than_started_empty() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("store.redb"), b"").unwrap();
    let err = EmbeddedStore::open(config(dir.path()))
        .await
        .expect_err("must refuse");
    assert!(matches!(err, Error::Corrupt { .. }), "{err}");
}

#[tokio::test]
async fn concurrent_writers_each_get_a_distinct_revision() {
    let dir = tempfile::tempdir().unwrap();
    let store = EmbeddedStore::open(config(dir.path())).await.unwrap();
    let mut tasks = Vec::new();
    for w in 0..32 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            let mut revs = Vec::new();
            for i in 0..20 {
                revs.push(put(&store, &format!("/w/{w}/{i}"), "v").await);
            }
            revs
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    all.sort();
    all.dedup();
    assert_eq!(
        all,
        (2..=641).collect::<Vec<i64>>(),
        "revisions start at 2, as etcd's"
    );
}

#[tokio::test]
async fn compaction_keeps_the_file_bounded_under_churn() {
    let dir = tempfile::tempdir().unwrap();
    let store = EmbeddedStore::open(config(dir.path())).await.unwrap();
    let value = "v".repeat(4096);
    let mut sizes = Vec::new();
    for round in 0..10 {
        for i in 0..300 {
            put(&store, &format!("/churn/{}", i % 50), &value).await;
        }
        let rev = store.status().await.unwrap().revision;
        store.compact(rev).await.unwrap();
        // writes after compaction carry the purge of superseded history to disk; the file
        // catches up with the write-ahead log in the background, so measure it once it has
        put(&store, "/tick", &round.to_string()).await;
        put(&store, "/tick", &round.to_string()).await;
        store.checkpoint().await.unwrap();
        sizes.push(store.status().await.unwrap().db_size);
    }
    // 3,000 writes of 4 KiB (12 MiB) went in; live data is 50 keys (200 KiB).
    let last = *sizes.last().unwrap();
    assert!(
        last < 6 * 1024 * 1024,
        "file stays well below what was written: {sizes:?}"
    );
    // The purge runs between write batches, so how much of it is on disk when a size is read
    // depends on scheduling (a loaded machine lags by up to about a round). Without reuse of
    // freed pages the file would grow by about 1.2 MiB a round, 8 MiB from round 2 to 9; with
    // it, it stays within a couple of rounds' worth of its early size.
    assert!(
        last <= sizes[2] + 2 * 1024 * 1024,
        "file stops growing once freed pages are reused: {sizes:?}"
    );
    let live = RangeRequest {
        range: KeyRange::prefix("/churn/"),
        ..Default::default()
    };
    assert_eq!(store.range(live).await.unwrap().count, 50);
}

#[tokio::test]
async fn without_compaction_the_same_churn_grows_the_file() {
    // The control for the test above: it shows that the bound comes from compaction.
    let dir = tempfile::tempdir().unwrap();
    let store = EmbeddedStore::open(config(dir.path())).await.unwrap();
    let value = "v".repeat(4096);
    for i in 0..3000 {
        put(&store, &format!("/churn/{}", i % 50), &value).await;
    }
    store.checkpoint().await.unwrap();
    assert!(store.status().await.unwrap().db_size > 12 * 1024 * 1024);
}

#[tokio::test]
async fn compaction_keeps_the_file_bounded_while_the_file_lags_behind_the_log() {
    // As above, but with concurrent writers and without waiting for the file between rounds:
    // several rounds and their compactions reach the file in one background pass, and each
    // round's sweep must free its pages before the next round's writes need room.
    let dir = tempfile::tempdir().unwrap();
    let store = EmbeddedStore::open(config(dir.path())).await.unwrap();
    let value = "v".repeat(4096);
    let mut largest = 0;
    for round in 0..20 {
        let mut writers = Vec::new();
        for w in 0..10 {
            let (store, value) = (store.clone(), value.clone());
            writers.push(tokio::spawn(async move {
                for i in 0..30 {
                    put(&store, &format!("/churn/{}", (w * 30 + i) % 50), &value).await;
                }
            }));
        }
        for w in writers {
            w.await.unwrap();
        }
        let rev = store.status().await.unwrap().revision;
        store.compact(rev).await.unwrap();
        put(&store, "/tick", &round.to_string()).await;
        largest = largest.max(store.status().await.unwrap().db_size);
    }
    store.checkpoint().await.unwrap();
    let status = store.status().await.unwrap();
    let largest = largest.max(status.db_size);
    // 6,000 writes of 4 KiB (24 MiB) went in; live data is 50 keys (200 KiB).
    assert!(
        largest < 6 * 1024 * 1024,
        "file stays well below what was written: {largest} bytes"
    );
    assert!(
        status.db_size_in_use < 2 * 1024 * 1024,
        "after the last sweep the space in use is about the live data: {status:?}"
    );
}

#[tokio::test]
async fn the_space_a_sweep_frees_is_counted_at_the_first_ask_after_it() {
    // Counting reads every page, so a sweep does not count by itself; the first ask after it
    // has the next commit count, without waiting out the minute between two counts.
    let dir = tempfile::tempdir().unwrap();
    let store = EmbeddedStore::open(config(dir.path())).await.unwrap();
    let value = "v".repeat(1000);
    let mut revision = 0;
    for round in 0..4 {
        for i in 0..1000 {
            revision = put(&store, &format!("/churn/{i}"), &format!("{round}{value}")).await;
        }
    }
    store.compact(revision).await.unwrap();
    store.checkpoint().await.unwrap();
    store.status().await.unwrap();
    put(&store, "/tick", "1").await;
    store.checkpoint().await.unwrap();
    let in_use = store.status().await.unwrap().db_size_in_use;
    // 4 MB of records went in; 1 MB of them is live
    assert!(
        (1_000_000..3_000_000).contains(&in_use),
        "the space in use after the sweep is counted: {in_use} bytes"
    );
}

#[tokio::test]
async fn a_watcher_that_never_reads_is_cut_off_and_can_resume() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path());
    cfg.watch_buffer = 4;
    let store = EmbeddedStore::open(cfg).await.unwrap();
    let from_start = WatchRequest {
        range: KeyRange::prefix("/s/"),
        start_revision: 1,
        ..Default::default()
    };
    let mut slow = store.watch(from_start).await.unwrap();
    let live = WatchRequest {
        range: KeyRange::prefix("/s/"),
        ..Default::default()
    };
    let mut fast = store.watch(live).await.unwrap();
    for i in 0..10 {
        put(&store, &format!("/s/{i}"), "v").await;
        // the fast watcher keeps up; writers never wait for the slow one
        let batch = fast.next().await.unwrap().unwrap();
        assert_eq!(batch.events[0].kv.mod_revision, i + 2);
    }
    let mut seen = Vec::new();
    let resume = loop {
        match slow
            .next()
            .await
            .expect("stream ends with an error, not silently")
        {
            Ok(batch) => seen.extend(batch.events.iter().map(|e| e.kv.mod_revision)),
            Err(Error::WatcherLagged { next_revision }) => break next_revision,
            Err(other) => panic!("unexpected error {other}"),
        }
    };
    assert!(
        slow.next().await.is_none(),
        "the stream ends after the error"
    );
    assert_eq!(
        seen,
        (2..resume).collect::<Vec<_>>(),
        "no gap before the cut"
    );
    let again = WatchRequest {
        range: KeyRange::prefix("/s/"),
        start_revision: resume,
        ..Default::default()
    };
    let mut again = store.watch(again).await.unwrap();
    let batch = again.next().await.unwrap().unwrap();
    let revs: Vec<i64> = batch.events.iter().map(|e| e.kv.mod_revision).collect();
    assert_eq!(
        revs,
        (resume..=11).collect::<Vec<_>>(),
        "resumes with no gap"
    );
}

// The writer is an OS thread, so Tokio's paused clock would auto-advance while a test waits for
// it; these two tests use real time with short periods and poll with a generous deadline.

async fn eventually(what: &str, mut check: impl AsyncFnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while !check().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for: {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn an_expired_lease_deletes_its_keys_and_keep_alive_postpones_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path());
    cfg.min_lease_ttl = 1;
    cfg.lease_check_interval = Duration::from_millis(50);
    let store = EmbeddedStore::open(cfg).await.unwrap();
    let short = store.lease_grant(0, 1).await.unwrap();
    let kept = store.lease_grant(0, 2).await.unwrap();
    for (key, lease) in [("/l/short", short.id), ("/l/kept", kept.id)] {
        let req = PutRequest {
            key: Bytes::from(key),
            value: "v".into(),
            lease,
            prev_kv: false,
        };
        store.put(req).await.unwrap();
    }
    let mut watch = store
        .watch(WatchRequest {
            range: KeyRange::prefix("/l/"),
            ..Default::default()
        })
        .await
        .unwrap();
    let keeper = {
        let store = store.clone();
        tokio::spawn(async move {
            loop {
                store.lease_keep_alive(kept.id).await.unwrap();
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        })
    };
    let batch = watch.next().await.unwrap().unwrap();
    assert_eq!(batch.events.len(), 1);
    assert_eq!(batch.events[0].kind, EventKind::Delete);
    assert_eq!(&batch.events[0].kv.key[..], b"/l/short");
    assert_eq!(store.get(b"/l/short").await.unwrap(), None);
    let ttl = store.lease_time_to_live(short.id, false).await;
    assert!(matches!(ttl, Err(Error::LeaseNotFound { .. })), "{ttl:?}");
    // the kept lease outlives several of its TTLs
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(store.get(b"/l/kept").await.unwrap().is_some());
    assert_eq!(store.lease_list().await.unwrap(), vec![kept.id]);
    keeper.abort();
}

#[tokio::test]
async fn periodic_compaction_compacts_to_the_revision_of_one_interval_ago() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path());
    cfg.compaction = CompactionPolicy::Periodic(Duration::from_millis(100));
    let store = EmbeddedStore::open(cfg).await.unwrap();
    let first = put(&store, "/p", "1").await;
    eventually("compaction to the first write", async || {
        store.status().await.unwrap().compact_revision == first
    })
    .await;
    let second = put(&store, "/p", "2").await;
    eventually("compaction to the second write", async || {
        store.status().await.unwrap().compact_revision == second
    })
    .await;
    let before = RangeRequest {
        range: KeyRange::key("/p"),
        revision: first,
        ..Default::default()
    };
    assert!(matches!(
        store.range(before).await,
        Err(Error::Compacted { .. })
    ));
    assert_eq!(&store.get(b"/p").await.unwrap().unwrap().value[..], b"2");
}

#[test]
fn revision_compaction_keeps_the_configured_number_of_revisions() {
    let policy = CompactionPolicy::Revisions {
        keep: 100,
        every: Duration::from_secs(60),
    };
    assert_eq!(policy.target(&mut None, 1000), Some(900));
    assert_eq!(policy.target(&mut None, 50), None);
    let periodic = CompactionPolicy::Periodic(Duration::from_secs(300));
    let mut previous = None;
    assert_eq!(
        periodic.target(&mut previous, 10),
        None,
        "first tick only remembers"
    );
    assert_eq!(periodic.target(&mut previous, 25), Some(10));
}

#[tokio::test]
async fn compaction_survives_a_restart_and_old_revisions_stay_gone() {
    let dir = tempfile::tempdir().unwrap();
    let store = EmbeddedStore::open(config(dir.path())).await.unwrap();
    let first = put(&store, "/c", "1").await;
    put(&store, "/c", "2").await;
    let compact_at = put(&store, "/d", "3").await;
    store.compact(compact_at).await.unwrap();
    put(&store, "/d", "4").await; // carries the physical purge
    store.close().await;

    let store = EmbeddedStore::open(config(dir.path())).await.unwrap();
    assert_eq!(store.status().await.unwrap().compact_revision, compact_at);
    let old = RangeRequest {
        range: KeyRange::key("/c"),
        revision: first,
        ..Default::default()
    };
    assert!(matches!(
        store.range(old).await,
        Err(Error::Compacted { .. })
    ));
    let at = RangeRequest {
        range: KeyRange::prefix("/"),
        revision: compact_at,
        ..Default::default()
    };
    let values: Vec<_> = store
        .range(at)
        .await
        .unwrap()
        .kvs
        .iter()
        .map(|kv| kv.value.clone())
        .collect();
    assert_eq!(
        values,
        vec![Bytes::from("2"), Bytes::from("3")],
        "reads at the compact revision work"
    );
}
