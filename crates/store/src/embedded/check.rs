//! `skiff store check`: the embedded store's consistency, read from its files without changing
//! them (the store must not be running, or the file may be mid-commit). The write-ahead log's
//! batches are laid over the database file as opening the store would replay them, and then:
//! - every record and log batch decodes, and no revision is past the store's head;
//! - the compacted revision is at most the head;
//! - each key's writes agree with each other: a put after a delete or as a key's first write
//!   is version 1 created at its own revision; a put after a put keeps the creation revision
//!   and adds one to the version (below the compacted revision only a key's last put is kept,
//!   so a key's first kept write there is taken as it is);
//! - a live key's lease exists;
//! - the log's batches go forward in revision, each holding only records up to its revision.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;

use bytes::Bytes;

use super::disk::{self, Batch};
use super::index::Entry;
use super::wal;
use crate::error::Result;

/// What the check found.
#[derive(Debug, Default)]
pub struct Report {
    pub revision: i64,
    pub compact_revision: i64,
    /// Writes kept (puts and deletes), the log's included.
    pub records: usize,
    pub keys: usize,
    pub live_keys: usize,
    pub leases: usize,
    /// Batches in the write-ahead log not yet copied into the file (or copied and not yet
    /// removed from the log).
    pub log_batches: usize,
    /// Every inconsistency, as a sentence.
    pub problems: Vec<String>,
}

/// Checks the store in `data_dir`. A file that cannot be read at all is an error; what is
/// readable but inconsistent is in the report's `problems`.
pub fn check(data_dir: &Path) -> Result<Report> {
    let (recovered, _) = wal::read(data_dir)?;
    let mut writes: BTreeMap<(i64, u32), (Bytes, Entry)> = BTreeMap::new();
    let loaded = disk::read_only(data_dir, &mut |key, entry| {
        writes.insert((entry.rev, entry.sub), (key, entry));
    })?;
    let mut report = Report {
        revision: loaded.revision,
        compact_revision: loaded.compact_revision,
        log_batches: recovered.payloads.len(),
        ..Default::default()
    };
    let mut leases: HashSet<i64> = loaded.leases.iter().map(|(id, _)| *id).collect();
    let mut last_batch = None;
    for (i, payload) in recovered.payloads.iter().enumerate() {
        let Some(batch) = disk::decode_batch(payload) else {
            report
                .problems
                .push(format!("log batch {i} does not decode"));
            continue;
        };
        check_batch(i, &batch, &mut last_batch, &mut report.problems);
        for ((rev, sub), raw) in &batch.records {
            match disk::decode(*rev, *sub, raw) {
                Some((key, entry)) => {
                    writes.insert((*rev, *sub), (key, entry));
                }
                None => report.problems.push(format!(
                    "log batch {i} holds a record at revision {rev}.{sub} that does not decode"
                )),
            }
        }
        leases.extend(batch.leases_granted.iter().map(|(id, _)| *id));
        for id in &batch.leases_removed {
            leases.remove(id);
        }
        report.revision = report.revision.max(batch.revision);
        if let Some(compacted) = batch.compact_revision {
            report.compact_revision = report.compact_revision.max(compacted);
        }
    }
    if report.compact_revision > report.revision {
        report.problems.push(format!(
            "compacted at revision {} past the head {}",
            report.compact_revision, report.revision
        ));
    }
    report.records = writes.len();
    report.leases = leases.len();
    // each key's writes, in revision order
    let mut keys: HashMap<Bytes, Option<&Entry>> = HashMap::new();
    for (key, entry) in writes.values() {
        if entry.rev > report.revision {
            report.problems.push(format!(
                "{} written at revision {} past the head {}",
                show(key),
                entry.rev,
                report.revision
            ));
        }
        let before = keys.entry(key.clone()).or_insert(None);
        if let Some(problem) = follows(*before, entry, report.compact_revision) {
            report.problems.push(format!(
                "{} at revision {}: {problem}",
                show(key),
                entry.rev
            ));
        }
        *before = Some(entry);
    }
    report.keys = keys.len();
    for (key, last) in &keys {
        let Some(put) = last.and_then(|e| e.put.as_ref()) else {
            continue;
        };
        report.live_keys += 1;
        if put.lease != 0 && !leases.contains(&put.lease) {
            report.problems.push(format!(
                "{} is attached to lease {}, which does not exist",
                show(key),
                put.lease
            ));
        }
    }
    report.problems.sort();
    Ok(report)
}

/// What is wrong with `entry` coming after `before` (the key's previous kept write, if any).
fn follows(before: Option<&Entry>, entry: &Entry, compacted: i64) -> Option<String> {
    let put = entry.put.as_ref()?;
    if put.create_revision > entry.rev || put.version < 1 {
        return Some(format!(
            "created at revision {} with version {}",
            put.create_revision, put.version
        ));
    }
    let (create, version) = match before.map(|b| &b.put) {
        Some(Some(previous)) => (previous.create_revision, previous.version + 1),
        Some(None) => (entry.rev, 1),
        // the key's first kept write: compaction keeps a key's last put below the compacted
        // revision and drops what came before it, and a delete there
        None if entry.rev < compacted => return None,
        None => (entry.rev, 1),
    };
    (put.create_revision != create || put.version != version).then(|| {
        format!(
            "version {} created at revision {}, but the writes before it make it version {version} created at revision {create}",
            put.version, put.create_revision
        )
    })
}

fn check_batch(i: usize, batch: &Batch, last: &mut Option<i64>, problems: &mut Vec<String>) {
    if let Some(previous) = *last
        && batch.revision < previous
    {
        problems.push(format!(
            "log batch {i} goes back to revision {} after {previous}",
            batch.revision
        ));
    }
    for ((rev, sub), _) in &batch.records {
        if *rev > batch.revision {
            problems.push(format!(
                "log batch {i} at revision {} holds a record at revision {rev}.{sub}",
                batch.revision
            ));
        }
    }
    *last = Some(batch.revision);
}

fn show(key: &[u8]) -> String {
    format!("key {:?}", String::from_utf8_lossy(key))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{DeleteRequest, EmbeddedConfig, EmbeddedStore, KeyRange, PutRequest, Store};

    fn write(key: &str, lease: i64) -> PutRequest {
        PutRequest {
            key: Bytes::from(key.to_string()),
            value: Bytes::from_static(b"v"),
            lease,
            ..Default::default()
        }
    }

    #[tokio::test]
    async fn a_store_written_through_its_api_checks_clean_compacted_or_not() {
        let dir = tempfile::tempdir().unwrap();
        let store = EmbeddedStore::open(EmbeddedConfig::new(dir.path()))
            .await
            .unwrap();
        for i in 0..50 {
            store.put(write(&format!("/k/{}", i % 7), 0)).await.unwrap();
        }
        let delete = |key: &str| DeleteRequest {
            range: KeyRange::key(Bytes::from(key.to_string())),
            ..Default::default()
        };
        store.delete(delete("/k/3")).await.unwrap();
        store.put(write("/k/3", 0)).await.unwrap();
        store.lease_grant(7, 60).await.unwrap();
        store.put(write("/leased", 7)).await.unwrap();
        store.close().await;
        let report = check(dir.path()).unwrap();
        assert_eq!(report.problems, Vec::<String>::new());
        assert_eq!((report.keys, report.live_keys, report.leases), (8, 8, 1));
        assert_eq!((report.records, report.revision), (53, 54));

        let store = EmbeddedStore::open(EmbeddedConfig::new(dir.path()))
            .await
            .unwrap();
        store.delete(delete("/k/5")).await.unwrap();
        store.compact(50).await.unwrap();
        store.put(write("/k/5", 0)).await.unwrap();
        store.lease_revoke(7).await.unwrap();
        store.close().await;
        let report = check(dir.path()).unwrap();
        assert_eq!(report.problems, Vec::<String>::new());
        assert_eq!((report.compact_revision, report.live_keys), (50, 7));
    }

    #[tokio::test]
    async fn a_write_out_of_step_with_its_key_and_a_lost_lease_are_reported() {
        let dir = tempfile::tempdir().unwrap();
        let store = EmbeddedStore::open(EmbeddedConfig::new(dir.path()))
            .await
            .unwrap();
        store.put(write("/a", 0)).await.unwrap();
        store.close().await;
        // a batch in the log (as a crash would leave it) with two broken writes
        let (mut log, _) = wal::Wal::open(dir.path()).unwrap();
        let mut bad = put(3, 2, 5);
        let mut leased = put(3, 3, 1);
        leased.sub = 1;
        if let Some(p) = leased.put.as_mut() {
            p.lease = 99;
        }
        bad.sub = 0;
        let batch = Batch {
            records: vec![
                ((3, 0), disk::encode(b"/a", &bad)),
                ((3, 1), disk::encode(b"/b", &leased)),
            ],
            revision: 3,
            ..Default::default()
        };
        log.append(&disk::encode_batch(&batch)).unwrap();
        drop(log);
        let report = check(dir.path()).unwrap();
        assert_eq!(
            report.problems,
            [
                "key \"/a\" at revision 3: version 5 created at revision 2, but the writes before it make it version 2 created at revision 2",
                "key \"/b\" is attached to lease 99, which does not exist",
            ]
        );
    }

    fn put(rev: i64, create: i64, version: i64) -> Entry {
        Entry {
            rev,
            sub: 0,
            put: Some(super::super::index::PutData {
                value: super::super::index::Value::Held(Bytes::new()),
                create_revision: create,
                version,
                lease: 0,
            }),
        }
    }

    #[test]
    fn a_key_whose_versions_do_not_follow_is_a_problem() {
        let delete = Entry {
            rev: 5,
            sub: 0,
            put: None,
        };
        assert_eq!(follows(None, &put(2, 2, 1), 0), None);
        assert_eq!(follows(Some(&put(2, 2, 1)), &put(3, 2, 2), 0), None);
        assert_eq!(follows(Some(&delete), &put(6, 6, 1), 0), None);
        assert!(follows(Some(&put(2, 2, 1)), &put(3, 2, 3), 0).is_some());
        assert!(follows(Some(&put(2, 2, 1)), &put(3, 3, 1), 0).is_some());
        assert!(follows(Some(&delete), &put(6, 2, 3), 0).is_some());
        assert!(follows(None, &put(4, 2, 2), 0).is_some(), "history lost");
        // below compaction, a key's first kept write stands as it is
        assert_eq!(follows(None, &put(4, 2, 2), 10), None);
        assert!(follows(None, &put(4, 5, 1), 0).is_some(), "created after");
    }
}
