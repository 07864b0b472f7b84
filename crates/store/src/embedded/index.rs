//! The in-memory MVCC index: every key's history since the last compaction, the lease table, and
//! the head and compact revisions. Pure data structure; the writer thread is its only mutator and
//! readers share it behind the store's `RwLock`.
//!
//! A key's history is a vector of [`Entry`]s in ascending revision order; a tombstone entry marks a
//! delete. Reading at revision `r` takes, per key, the last entry with `rev <= r`.
//!
//! A version another write has superseded is read only by reads at past revisions and by watches
//! catching up, and the store file holds every version the index does. So once a superseded
//! version is in the file, the index lets go of its value ([`Value::InFile`]) and such reads fetch
//! it back through [`Values`]: between two compactions (5 minutes by default) the superseded
//! values are most of the history, and at 150,000 pods they were over a gigabyte of memory
//! (BENCHMARKS.md, "Scale (issue 35)", session 60). The head version of every key stays in memory.
//!
//! Histories are found by hashing the key; a sorted set of the same keys serves ranges. Every
//! put, delete and compare needs one key's history, and in a B-tree of tens of thousands of keys
//! each of the ~20 comparisons on the way down reads another key's bytes from another allocation:
//! at 64 writers the walk was a quarter of the writer thread's samples, nearly all cache misses.
//! The sorted set changes only when a key first appears or its history is purged away. The price
//! is paid by ranges, which look up each key they return: 10,000 keys take 0.2–0.7 ms longer
//! (BENCHMARKS.md, "Where the time goes", session 18).

use std::collections::{BTreeSet, HashMap, HashSet, hash_map};
use std::ops::Bound;

use bytes::Bytes;
use tokio::time::Instant;

use crate::error::Result;
use crate::types::{Event, EventKind, KeyRange, KeyValue};

/// One write of one key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Entry {
    /// Main revision of the write.
    pub rev: i64,
    /// Position of the write inside its revision (a transaction writes several keys at once).
    pub sub: u32,
    /// `None` for a delete (tombstone).
    pub put: Option<PutData>,
}

/// What a put stores besides the key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PutData {
    pub value: Value,
    pub create_revision: i64,
    pub version: i64,
    pub lease: i64,
}

/// A put's value: in memory, or (superseded, and in the store file) only in the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Value {
    Held(Bytes),
    InFile,
}

/// Where the values the index let go of are read back from (the store file).
pub(crate) trait Values {
    /// The value `key` was given at (`rev`, `sub`).
    fn get(&mut self, key: &[u8], rev: i64, sub: u32) -> Result<Bytes>;
}

/// A live lease.
#[derive(Debug, Clone)]
pub(crate) struct Lease {
    /// Granted TTL in seconds.
    pub ttl: i64,
    /// When it expires unless kept alive.
    pub expiry: Instant,
    /// Keys currently attached to it.
    pub keys: HashSet<Bytes>,
}

/// The whole in-memory state. See the module docs.
#[derive(Debug, Default)]
pub(crate) struct Index {
    /// Every key with any history. foldhash (seeded per map) rather than std's SipHash: a key is
    /// hashed on every put and for every key a range returns, and SipHash is the slower of the two.
    keys: HashMap<Bytes, Vec<Entry>, foldhash::fast::RandomState>,
    /// The keys of `keys`, in order, for ranges.
    order: BTreeSet<Bytes>,
    /// Latest revision written into the index; may be ahead of the committed revision while a
    /// batch is being made durable.
    pub revision: i64,
    /// Reads and watches below this revision fail with `Compacted`.
    pub compact_revision: i64,
    /// Every write up to this revision is in the store file.
    pub written: i64,
    pub leases: HashMap<i64, Lease>,
}

/// The outcome of a range read, before the response header is added.
#[derive(Debug, Default)]
pub(crate) struct RangeResult {
    pub kvs: Vec<KeyValue>,
    pub count: i64,
    pub more: bool,
}

/// Options of a range read.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct ReadOptions {
    pub limit: i64,
    pub keys_only: bool,
    pub count_only: bool,
}

/// The key-value of a put entry (`None` for a tombstone), its value read back through `values` if
/// the index let go of it.
fn kv_of(
    key: &Bytes,
    entry: &Entry,
    keys_only: bool,
    values: &mut dyn Values,
) -> Result<Option<KeyValue>> {
    let Some(put) = &entry.put else {
        return Ok(None);
    };
    let value = match &put.value {
        _ if keys_only => Bytes::new(),
        Value::Held(value) => value.clone(),
        Value::InFile => values.get(key, entry.rev, entry.sub)?,
    };
    Ok(Some(KeyValue {
        key: key.clone(),
        value,
        create_revision: put.create_revision,
        mod_revision: entry.rev,
        version: put.version,
        lease: put.lease,
    }))
}

/// The key-value of a key's head entry, whose value the index always holds.
fn head_kv(key: &Bytes, entry: &Entry) -> Option<KeyValue> {
    kv_of(key, entry, false, &mut NoFile).expect("the head version's value is held")
}

/// [`Values`] for reads that need no value from the file (reads at the head).
pub(crate) struct NoFile;

impl Values for NoFile {
    fn get(&mut self, key: &[u8], rev: i64, sub: u32) -> Result<Bytes> {
        Err(crate::error::Error::Unavailable(format!(
            "the value of {} at {rev}.{sub} is only in the store file",
            String::from_utf8_lossy(key)
        )))
    }
}

/// Let go of the value of the write before the last, now superseded, if the file holds it.
fn release_previous(entries: &mut [Entry], written: i64) {
    if let Some(i) = entries.len().checked_sub(2) {
        release_superseded(entries, i, written);
    }
}

/// Let go of the value of `entries[i]` if a later write superseded it and the file holds it
/// (every write up to `written` is in the file).
fn release_superseded(entries: &mut [Entry], i: usize, written: i64) {
    if i + 1 < entries.len()
        && entries[i].rev <= written
        && let Some(put) = &mut entries[i].put
    {
        put.value = Value::InFile;
    }
}

/// The last entry at or below `rev`.
fn entry_at(entries: &[Entry], rev: i64) -> Option<&Entry> {
    // Histories are short and reads are mostly at the head: scan from the end.
    entries.iter().rev().find(|e| e.rev <= rev)
}

impl Index {
    fn range_iter<'a>(
        &'a self,
        range: &'a KeyRange,
    ) -> Box<dyn Iterator<Item = (&'a Bytes, &'a Vec<Entry>)> + 'a> {
        if range.is_single() {
            return Box::new(self.keys.get_key_value(&range.key[..]).into_iter());
        }
        let lower = Bound::Included(&range.key[..]);
        let upper = match range.upper() {
            Some(end) if end <= &range.key[..] => return Box::new(std::iter::empty()),
            Some(end) => Bound::Excluded(end),
            None => Bound::Unbounded,
        };
        Box::new(
            self.order
                .range::<[u8], _>((lower, upper))
                .map(|key| (key, &self.keys[key])),
        )
    }

    /// The history of `key`, created empty (and the key added to `order`) if it has none.
    fn history_mut(&mut self, key: &Bytes) -> &mut Vec<Entry> {
        match self.keys.entry(key.clone()) {
            hash_map::Entry::Occupied(entry) => entry.into_mut(),
            hash_map::Entry::Vacant(entry) => {
                self.order.insert(key.clone());
                entry.insert(Vec::new())
            }
        }
    }

    /// The live version of every key in `range` at revision `rev`.
    pub fn range(
        &self,
        range: &KeyRange,
        rev: i64,
        opts: ReadOptions,
        values: &mut dyn Values,
    ) -> Result<RangeResult> {
        let mut out = RangeResult::default();
        let limit = if opts.limit > 0 {
            opts.limit as usize
        } else {
            usize::MAX
        };
        for (key, entries) in self.range_iter(range) {
            let Some(entry) = entry_at(entries, rev) else {
                continue;
            };
            if entry.put.is_none() {
                continue;
            }
            out.count += 1;
            if opts.count_only {
                continue;
            }
            if out.kvs.len() < limit {
                out.kvs.extend(kv_of(key, entry, opts.keys_only, values)?);
            } else {
                out.more = true;
            }
        }
        Ok(out)
    }

    /// The latest version of one key, including writes not yet committed.
    pub fn latest(&self, key: &[u8]) -> Option<KeyValue> {
        let (key, entries) = self.keys.get_key_value(key)?;
        head_kv(key, entries.last()?)
    }

    /// Whether the history of `key` still has its write at (`rev`, `sub`).
    pub fn holds(&self, key: &[u8], rev: i64, sub: u32) -> bool {
        self.keys.get(key).is_some_and(|entries| {
            let i = entries.partition_point(|e| e.rev < rev);
            entries.get(i).is_some_and(|e| e.rev == rev && e.sub == sub)
        })
    }

    /// Live keys in `range` at the head.
    pub fn live_keys(&self, range: &KeyRange) -> Vec<Bytes> {
        self.range_iter(range)
            .filter(|(_, entries)| entries.last().is_some_and(|e| e.put.is_some()))
            .map(|(k, _)| k.clone())
            .collect()
    }

    /// Write `key` at (`rev`, `sub`); returns the event (with `prev_kv` always filled).
    pub fn put(&mut self, key: Bytes, value: Bytes, lease: i64, rev: i64, sub: u32) -> Event {
        let written = self.written;
        let entries = self.history_mut(&key);
        let prev = entries.last().and_then(|e| head_kv(&key, e));
        let (create_revision, version) = match &prev {
            Some(p) => (p.create_revision, p.version + 1),
            None => (rev, 1),
        };
        let entry = Entry {
            rev,
            sub,
            put: Some(PutData {
                value: Value::Held(value),
                create_revision,
                version,
                lease,
            }),
        };
        let kv = head_kv(&key, &entry).expect("a put entry has a value");
        entries.push(entry);
        release_previous(entries, written);
        if let Some(p) = &prev
            && p.lease != 0
            && p.lease != lease
            && let Some(l) = self.leases.get_mut(&p.lease)
        {
            l.keys.remove(&key);
        }
        if lease != 0
            && let Some(l) = self.leases.get_mut(&lease)
        {
            l.keys.insert(key);
        }
        Event {
            kind: EventKind::Put,
            kv,
            prev_kv: prev,
        }
    }

    /// Delete `key` at (`rev`, `sub`) if it is live; returns the event.
    pub fn delete(&mut self, key: &Bytes, rev: i64, sub: u32) -> Option<Event> {
        let prev = self.latest(key)?;
        if prev.lease != 0
            && let Some(l) = self.leases.get_mut(&prev.lease)
        {
            l.keys.remove(key);
        }
        let entries = self.keys.get_mut(key).expect("live key");
        entries.push(Entry {
            rev,
            sub,
            put: None,
        });
        release_previous(entries, self.written);
        let kv = KeyValue {
            key: key.clone(),
            mod_revision: rev,
            ..Default::default()
        };
        Some(Event {
            kind: EventKind::Delete,
            kv,
            prev_kv: Some(prev),
        })
    }

    /// Add one entry read back from the file (entries arrive in revision order), letting go of
    /// the value it supersedes.
    pub fn load(&mut self, key: Bytes, entry: Entry) {
        self.revision = self.revision.max(entry.rev);
        self.written = self.revision;
        let entries = self.history_mut(&key);
        entries.push(entry);
        release_previous(entries, i64::MAX);
    }

    /// The writes `records` (key, revision, sub), and every write up to `revision`, are in the
    /// file: let go of the values of those already superseded (later ones are let go of as they
    /// are superseded).
    pub fn written<'a>(
        &mut self,
        records: impl Iterator<Item = (&'a [u8], i64, u32)>,
        revision: i64,
    ) {
        self.written = self.written.max(revision);
        let written = self.written;
        for (key, rev, sub) in records {
            let Some(entries) = self.keys.get_mut(key) else {
                continue; // purged since
            };
            let i = entries.partition_point(|e| e.rev < rev);
            if entries.get(i).is_some_and(|e| e.rev == rev && e.sub == sub) {
                release_superseded(entries, i, written);
            }
        }
    }

    /// Attach every live key to its lease (after loading); returns keys whose lease is gone.
    pub fn attach_leases(&mut self) -> Vec<Bytes> {
        let mut orphans = Vec::new();
        for key in &self.order {
            let entries = &self.keys[key];
            let Some(put) = entries.last().and_then(|e| e.put.as_ref()) else {
                continue;
            };
            if put.lease == 0 {
                continue;
            }
            match self.leases.get_mut(&put.lease) {
                Some(l) => {
                    l.keys.insert(key.clone());
                }
                None => orphans.push(key.clone()),
            }
        }
        orphans
    }

    /// Every event in `range` with `from <= revision <= to`, in revision order, with `prev_kv`
    /// filled (if `prev_kv`) where the previous version is still in the history.
    pub fn history(
        &self,
        range: &KeyRange,
        from: i64,
        to: i64,
        prev_kv: bool,
        values: &mut dyn Values,
    ) -> Result<Vec<Event>> {
        let mut found: Vec<(i64, u32, Event)> = Vec::new();
        for (key, entries) in self.range_iter(range) {
            let start = entries.partition_point(|e| e.rev < from);
            for i in start..entries.len() {
                let entry = &entries[i];
                if entry.rev > to {
                    break;
                }
                let prev_kv = match i.checked_sub(1) {
                    Some(p) if prev_kv => kv_of(key, &entries[p], false, values)?,
                    _ => None,
                };
                let event = match kv_of(key, entry, false, values)? {
                    Some(kv) => Event {
                        kind: EventKind::Put,
                        kv,
                        prev_kv,
                    },
                    None => Event {
                        kind: EventKind::Delete,
                        kv: KeyValue {
                            key: key.clone(),
                            mod_revision: entry.rev,
                            ..Default::default()
                        },
                        prev_kv,
                    },
                };
                found.push((entry.rev, entry.sub, event));
            }
        }
        found.sort_by_key(|(rev, sub, _)| (*rev, *sub));
        Ok(found.into_iter().map(|(_, _, e)| e).collect())
    }

    /// Drop history made unreachable by compaction at `compact_rev`, starting at key `from`, and
    /// stop before the key at which `budget` keys examined plus entries removed would be exceeded
    /// (so one call's work is bounded whatever the shape of the history). An entry below
    /// `compact_rev` survives only if it is the last such entry of its key and a put (a read at
    /// `compact_rev` or later may still need it). Returns the (revision, sub) of every removed
    /// entry, and where to continue (`None` when done).
    pub fn purge(
        &mut self,
        compact_rev: i64,
        from: &Bytes,
        budget: usize,
    ) -> (Vec<(i64, u32)>, Option<Bytes>) {
        let mut removed = Vec::new();
        let mut emptied = Vec::new();
        let mut next = None;
        for (n, key) in self.order.range::<Bytes, _>(from..).enumerate() {
            if n > 0 && n + removed.len() >= budget {
                next = Some(key.clone());
                break;
            }
            let entries = self
                .keys
                .get_mut(key)
                .expect("every ordered key has a history");
            let below = entries.partition_point(|e| e.rev < compact_rev);
            if below == 0 {
                continue;
            }
            let keep_last_below = entries[below - 1].put.is_some();
            let drop = if keep_last_below { below - 1 } else { below };
            removed.extend(entries.drain(..drop).map(|e| (e.rev, e.sub)));
            if entries.is_empty() {
                emptied.push(key.clone());
            }
        }
        for key in emptied {
            self.keys.remove(&key);
            self.order.remove(&key);
        }
        (removed, next)
    }

    /// Whether the index holds the value `key` was given at `rev` (`None`: no such put).
    #[cfg(test)]
    pub fn holds_value(&self, key: &[u8], rev: i64) -> Option<bool> {
        let put = self
            .keys
            .get(key)?
            .iter()
            .find(|e| e.rev == rev)?
            .put
            .as_ref()?;
        Some(matches!(put.value, Value::Held(_)))
    }

    /// Number of keys with any history (live or not), for status and tests.
    #[cfg(test)]
    pub fn key_count(&self) -> usize {
        self.keys.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(s: &str) -> Bytes {
        Bytes::copy_from_slice(s.as_bytes())
    }

    fn read(ix: &Index, range: &KeyRange, rev: i64) -> Vec<(String, String)> {
        read_with(ix, range, rev, &mut NoFile)
    }

    /// Whether reading `key` at `rev` needs a value the index let go of.
    fn needs_file(ix: &Index, key: &'static str, rev: i64) -> bool {
        let read = ix.range(
            &KeyRange::key(key),
            rev,
            ReadOptions::default(),
            &mut NoFile,
        );
        read.is_err()
    }

    fn read_with(
        ix: &Index,
        range: &KeyRange,
        rev: i64,
        values: &mut dyn Values,
    ) -> Vec<(String, String)> {
        ix.range(range, rev, ReadOptions::default(), values)
            .unwrap()
            .kvs
            .into_iter()
            .map(|kv| {
                (
                    String::from_utf8(kv.key.to_vec()).unwrap(),
                    String::from_utf8(kv.value.to_vec()).unwrap(),
                )
            })
            .collect()
    }

    #[test]
    fn a_read_at_a_past_revision_sees_the_values_of_that_time() {
        let mut ix = Index::default();
        ix.put(b("a"), b("1"), 0, 1, 0);
        ix.put(b("a"), b("2"), 0, 2, 0);
        ix.delete(&b("a"), 3, 0);
        assert_eq!(
            read(&ix, &KeyRange::key("a"), 1),
            vec![("a".into(), "1".into())]
        );
        assert_eq!(
            read(&ix, &KeyRange::key("a"), 2),
            vec![("a".into(), "2".into())]
        );
        assert!(read(&ix, &KeyRange::key("a"), 3).is_empty());
    }

    #[test]
    fn version_and_create_revision_restart_after_a_delete() {
        let mut ix = Index::default();
        ix.put(b("a"), b("1"), 0, 1, 0);
        let second = ix.put(b("a"), b("2"), 0, 2, 0);
        assert_eq!((second.kv.create_revision, second.kv.version), (1, 2));
        ix.delete(&b("a"), 3, 0);
        let again = ix.put(b("a"), b("3"), 0, 4, 0);
        assert_eq!((again.kv.create_revision, again.kv.version), (4, 1));
        assert_eq!(again.prev_kv, None);
    }

    #[test]
    fn limit_counts_every_key_but_returns_only_limit() {
        let mut ix = Index::default();
        for (i, k) in ["a", "b", "c"].iter().enumerate() {
            ix.put(b(k), b("v"), 0, i as i64 + 1, 0);
        }
        let res = ix
            .range(
                &KeyRange::prefix(""),
                3,
                ReadOptions {
                    limit: 2,
                    ..Default::default()
                },
                &mut NoFile,
            )
            .unwrap();
        assert_eq!((res.kvs.len(), res.count, res.more), (2, 3, true));
    }

    #[test]
    fn history_is_in_revision_order_with_previous_values() {
        let mut ix = Index::default();
        ix.put(b("b"), b("1"), 0, 1, 0);
        ix.put(b("a"), b("2"), 0, 2, 0);
        ix.put(b("b"), b("3"), 0, 3, 0);
        ix.delete(&b("a"), 4, 0);
        let events = ix
            .history(&KeyRange::prefix(""), 2, 4, true, &mut NoFile)
            .unwrap();
        let revs: Vec<i64> = events.iter().map(|e| e.kv.mod_revision).collect();
        assert_eq!(revs, vec![2, 3, 4]);
        assert_eq!(events[1].prev_kv.as_ref().unwrap().value, b("1"));
        assert_eq!(events[2].kind, EventKind::Delete);
        assert_eq!(events[2].prev_kv.as_ref().unwrap().value, b("2"));
    }

    /// A store file for the index alone: every value put, by (revision, sub), and how many were
    /// read back.
    #[derive(Default)]
    struct File {
        values: HashMap<(i64, u32), Bytes>,
        reads: usize,
    }

    impl File {
        fn put(&mut self, ix: &mut Index, key: &str, value: &str, rev: i64) {
            ix.put(b(key), b(value), 0, rev, 0);
            self.values.insert((rev, 0), b(value));
        }
    }

    impl Values for File {
        fn get(&mut self, _: &[u8], rev: i64, sub: u32) -> Result<Bytes> {
            self.reads += 1;
            Ok(self.values[&(rev, sub)].clone())
        }
    }

    #[test]
    fn superseded_values_in_the_file_are_read_back_from_it() {
        let (mut ix, mut file) = (Index::default(), File::default());
        file.put(&mut ix, "a", "1", 1);
        file.put(&mut ix, "a", "2", 2);
        file.put(&mut ix, "b", "1", 3);
        // not in the file yet: every value is held
        assert_eq!(
            read(&ix, &KeyRange::key("a"), 1),
            [("a".into(), "1".into())]
        );
        // revisions 1 and 2 are written: the superseded "a"=1 is let go of, the heads are kept
        let records = [(&b"a"[..], 1, 0), (&b"a"[..], 2, 0)];
        ix.written(records.into_iter(), 2);
        assert!(needs_file(&ix, "a", 1));
        assert_eq!(
            read_with(&ix, &KeyRange::key("a"), 1, &mut file),
            [("a".into(), "1".into())]
        );
        assert_eq!(file.reads, 1);
        assert_eq!(
            read(&ix, &KeyRange::prefix(""), 3).len(),
            2,
            "heads are held"
        );
        // a write superseding one already written lets go of it at once; one not yet written
        // (revision 3 is past `written`) is kept until it is
        file.put(&mut ix, "a", "4", 4);
        file.put(&mut ix, "b", "5", 5);
        let keys_only = ReadOptions {
            keys_only: true,
            ..Default::default()
        };
        assert_eq!(
            ix.range(&KeyRange::prefix(""), 3, keys_only, &mut NoFile)
                .unwrap()
                .count,
            2
        );
        assert!(needs_file(&ix, "a", 3));
        assert_eq!(
            read(&ix, &KeyRange::key("b"), 3),
            [("b".into(), "1".into())]
        );
        // a watch catching up reads what it needs back, and previous values only if asked
        file.reads = 0;
        let events = ix
            .history(&KeyRange::key("a"), 2, 4, false, &mut file)
            .unwrap();
        assert_eq!(file.reads, 1, "only revision 2's value");
        assert!(events.iter().all(|e| e.prev_kv.is_none()));
        let events = ix
            .history(&KeyRange::key("a"), 2, 4, true, &mut file)
            .unwrap();
        assert_eq!(events[0].prev_kv.as_ref().unwrap().value, b("1"));
        assert_eq!(events[1].prev_kv.as_ref().unwrap().value, b("2"));
        // a delete supersedes too
        ix.written(std::iter::empty(), 5);
        ix.delete(&b("b"), 6, 0);
        assert!(needs_file(&ix, "b", 5));
    }

    #[test]
    fn loading_keeps_only_the_head_values() {
        let mut ix = Index::default();
        let entry = |rev, value: &str| Entry {
            rev,
            sub: 0,
            put: Some(PutData {
                value: Value::Held(b(value)),
                create_revision: 1,
                version: rev,
                lease: 0,
            }),
        };
        ix.load(b("a"), entry(1, "1"));
        ix.load(b("a"), entry(2, "2"));
        assert!(needs_file(&ix, "a", 1));
        assert_eq!(
            read(&ix, &KeyRange::key("a"), 2),
            [("a".into(), "2".into())]
        );
        assert_eq!(ix.written, 2);
    }

    #[test]
    fn purge_keeps_what_reads_at_the_compact_revision_need() {
        let mut ix = Index::default();
        ix.put(b("a"), b("1"), 0, 1, 0);
        ix.put(b("a"), b("2"), 0, 2, 0);
        ix.put(b("gone"), b("x"), 0, 3, 0);
        ix.delete(&b("gone"), 4, 0);
        ix.put(b("a"), b("5"), 0, 5, 0);
        let (removed, next) = ix.purge(5, &Bytes::new(), 100);
        assert_eq!(next, None);
        let mut removed = removed;
        removed.sort();
        assert_eq!(removed, vec![(1, 0), (3, 0), (4, 0)]);
        assert_eq!(ix.key_count(), 1);
        assert_eq!(
            read(&ix, &KeyRange::key("a"), 5),
            vec![("a".into(), "5".into())]
        );
        // the purged key is gone from the ordered keys too, so ranges still find every history
        assert_eq!(
            read(&ix, &KeyRange::prefix(""), 5),
            vec![("a".into(), "5".into())]
        );
        ix.put(b("gone"), b("again"), 0, 6, 0);
        assert_eq!(
            read(&ix, &KeyRange::prefix(""), 6),
            vec![("a".into(), "5".into()), ("gone".into(), "again".into())]
        );
        // a put below the compact revision that is still live survives
        let mut ix = Index::default();
        ix.put(b("k"), b("1"), 0, 1, 0);
        ix.put(b("other"), b("1"), 0, 2, 0);
        let (removed, _) = ix.purge(2, &Bytes::new(), 100);
        assert!(removed.is_empty());
        assert_eq!(
            read(&ix, &KeyRange::key("k"), 2),
            vec![("k".into(), "1".into())]
        );
    }

    #[test]
    fn purge_of_long_histories_is_bounded_by_entries_removed() {
        let mut ix = Index::default();
        for (k, key) in ["a", "b", "c"].iter().enumerate() {
            for v in 0..10 {
                ix.put(b(key), b("v"), 0, (k * 10 + v) as i64 + 1, 0);
            }
        }
        let (removed, next) = ix.purge(100, &Bytes::new(), 12);
        assert_eq!(
            removed.len(),
            18,
            "two keys of nine superseded entries each"
        );
        assert_eq!(next, Some(b("c")));
    }

    #[test]
    fn purge_stops_at_its_budget_and_says_where_to_resume() {
        let mut ix = Index::default();
        for (i, k) in ["a", "b", "c"].iter().enumerate() {
            ix.put(b(k), b("v"), 0, i as i64 + 1, 0);
            ix.delete(&b(k), i as i64 + 10, 0);
        }
        // budget 4: "a" (1 key + 2 entries), "b" (1 + 2): the next key would exceed it
        let (_, next) = ix.purge(20, &Bytes::new(), 4);
        assert_eq!(next, Some(b("c")));
        let (_, next) = ix.purge(20, &b("c"), 4);
        assert_eq!(next, None);
        assert_eq!(ix.key_count(), 0);
    }
}
