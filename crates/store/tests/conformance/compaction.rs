//! Compaction: history below the compact revision is gone (reads fail with `Compacted`), the
//! compact revision itself and everything after it stay readable, and compactions only go forward.

use std::sync::Arc;

use skiff_store::*;

use crate::support::*;

fn at(prefix: &str, revision: i64) -> RangeRequest {
    RangeRequest {
        range: KeyRange::prefix(b(prefix)),
        revision,
        ..Default::default()
    }
}

pub async fn reads_below_the_compact_revision_fail_with_compacted(s: Arc<dyn Store>) {
    let r1 = put(&*s, "c/a", "1").await;
    let r2 = put(&*s, "c/a", "2").await;
    let r3 = put(&*s, "c/b", "1").await;
    let r4 = put(&*s, "c/a", "3").await;
    s.compact(r3).await.expect("compact");
    for requested in [1, r1, r2] {
        match s.range(at("c/", requested)).await {
            Err(Error::Compacted {
                requested: req,
                compact_revision,
            }) => {
                assert_eq!((req, compact_revision), (requested, r3))
            }
            other => panic!("range at {requested}: expected Compacted, got {other:?}"),
        }
    }
    let resp = range_req(&*s, at("c/", r3)).await;
    assert_eq!(
        (keys(&resp.kvs), values(&resp.kvs)),
        (
            vec!["c/a".into(), "c/b".into()],
            vec!["2".into(), "1".into()]
        )
    );
    let resp = range_req(&*s, at("c/", r4)).await;
    assert_eq!(values(&resp.kvs), ["3", "1"]);
    assert_eq!(
        values(&range(&*s, KeyRange::prefix(b("c/"))).await.kvs),
        ["3", "1"]
    );
    let status = s.status().await.expect("status");
    assert_eq!((status.compact_revision, status.revision), (r3, r4));
}

pub async fn compacting_at_or_below_the_compact_revision_fails_with_compacted(s: Arc<dyn Store>) {
    let r2 = put(&*s, "k", "1").await;
    let r3 = put(&*s, "k", "2").await;
    let r4 = put(&*s, "k", "3").await;
    s.compact(r3).await.expect("compact");
    for requested in [r2, r3] {
        match s.compact(requested).await {
            Err(Error::Compacted {
                requested: req,
                compact_revision,
            }) => {
                assert_eq!((req, compact_revision), (requested, r3))
            }
            other => panic!("compact at {requested}: expected Compacted, got {other:?}"),
        }
    }
    s.compact(r4)
        .await
        .expect("compacting further forward works");
    assert_eq!(s.status().await.expect("status").compact_revision, r4);
}

pub async fn compacting_beyond_the_current_revision_fails_with_future_revision(s: Arc<dyn Store>) {
    let current = put(&*s, "k", "v").await;
    match s.compact(current + 1).await {
        Err(Error::FutureRevision {
            requested,
            current: c,
        }) => assert_eq!((requested, c), (current + 1, current)),
        other => panic!("expected FutureRevision, got {other:?}"),
    }
    assert_eq!(
        s.status().await.expect("status").compact_revision,
        0,
        "nothing was compacted"
    );
    s.compact(current)
        .await
        .expect("compacting at the current revision works");
    assert_eq!(get(&*s, "k").await.expect("k kept").value, b("v"));
}

pub async fn compaction_keeps_the_latest_version_of_every_key(s: Arc<dyn Store>) {
    let a1 = put(&*s, "a", "1").await;
    let a2 = put(&*s, "a", "2").await;
    put(&*s, "b", "1").await;
    delete(&*s, KeyRange::key(b("b"))).await;
    let c1 = put(&*s, "c", "1").await;
    s.compact(c1).await.expect("compact");
    let resp = range(&*s, KeyRange::prefix(b(""))).await;
    assert_eq!(keys(&resp.kvs), ["a", "c"]);
    let a = &resp.kvs[0];
    assert_eq!(
        (a.create_revision, a.mod_revision, a.version),
        (a1, a2, 2),
        "history fields survive"
    );
    // Writing after compaction continues the same key history.
    let a3 = put(&*s, "a", "3").await;
    let a = get(&*s, "a").await.expect("a");
    assert_eq!((a.create_revision, a.mod_revision, a.version), (a1, a3, 3));
    let b = put(&*s, "b", "again").await;
    assert_eq!(
        get(&*s, "b").await.expect("b").version,
        1,
        "b was deleted before the compaction"
    );
    assert_eq!(get(&*s, "b").await.expect("b").create_revision, b);
}
