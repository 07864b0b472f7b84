//! The in-memory MVCC index: every key's history since the last compaction, the lease table, and
//! the head and compact revisions. Pure data structure; the writer thread is its only mutator and
//! readers share it behind the store's `RwLock`.
//!
//! A key's history is a vector of [`Entry`]s in ascending revision order; a tombstone entry marks a
//! delete. Reading at revision `r` takes, per key, the last entry with `rev <= r`.
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
    pub value: Bytes,
    pub create_revision: i64,
    pub version: i64,
    pub lease: i64,
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

fn kv_of(key: &Bytes, entry: &Entry, keys_only: bool) -> Option<KeyValue> {
    let put = entry.put.as_ref()?;
    Some(KeyValue {
        key: key.clone(),
        value: if keys_only {
            Bytes::new()
        } else {
            put.value.clone()
        },
        create_revision: put.create_revision,
        mod_revision: entry.rev,
        version: put.version,
        lease: put.lease,
    })
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
    pub fn range(&self, range: &KeyRange, rev: i64, opts: ReadOptions) -> RangeResult {
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
                out.kvs.extend(kv_of(key, entry, opts.keys_only));
            } else {
                out.more = true;
            }
        }
        out
    }

    /// The latest version of one key, including writes not yet committed.
    pub fn latest(&self, key: &[u8]) -> Option<KeyValue> {
        let (key, entries) = self.keys.get_key_value(key)?;
        kv_of(key, entries.last()?, false)
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
        let entries = self.history_mut(&key);
        let prev = entries.last().and_then(|e| kv_of(&key, e, false));
        let (create_revision, version) = match &prev {
            Some(p) => (p.create_revision, p.version + 1),
            None => (rev, 1),
        };
        let entry = Entry {
            rev,
            sub,
            put: Some(PutData {
                value,
                create_revision,
                version,
                lease,
            }),
        };
        let kv = kv_of(&key, &entry, false).expect("a put entry has a value");
        entries.push(entry);
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
        self.keys.get_mut(key).expect("live key").push(Entry {
            rev,
            sub,
            put: None,
        });
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

    /// Add one entry read back from disk (entries arrive in revision order).
    pub fn load(&mut self, key: Bytes, entry: Entry) {
        self.revision = self.revision.max(entry.rev);
        self.history_mut(&key).push(entry);
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
    /// filled where the previous version is still in the history.
    pub fn history(&self, range: &KeyRange, from: i64, to: i64) -> Vec<Event> {
        let mut found: Vec<(i64, u32, Event)> = Vec::new();
        for (key, entries) in self.range_iter(range) {
            let start = entries.partition_point(|e| e.rev < from);
            for i in start..entries.len() {
                let entry = &entries[i];
                if entry.rev > to {
                    break;
                }
                let prev_kv = i
                    .checked_sub(1)
                    .and_then(|p| kv_of(key, &entries[p], false));
                let event = match kv_of(key, entry, false) {
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
        found.into_iter().map(|(_, _, e)| e).collect()
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
        ix.range(range, rev, ReadOptions::default())
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
        let res = ix.range(
            &KeyRange::prefix(""),
            3,
            ReadOptions {
                limit: 2,
                ..Default::default()
            },
        );
        assert_eq!((res.kvs.len(), res.count, res.more), (2, 3, true));
    }

    #[test]
    fn history_is_in_revision_order_with_previous_values() {
        let mut ix = Index::default();
        ix.put(b("b"), b("1"), 0, 1, 0);
        ix.put(b("a"), b("2"), 0, 2, 0);
        ix.put(b("b"), b("3"), 0, 3, 0);
        ix.delete(&b("a"), 4, 0);
        let events = ix.history(&KeyRange::prefix(""), 2, 4);
        let revs: Vec<i64> = events.iter().map(|e| e.kv.mod_revision).collect();
        assert_eq!(revs, vec![2, 3, 4]);
        assert_eq!(events[1].prev_kv.as_ref().unwrap().value, b("1"));
        assert_eq!(events[2].kind, EventKind::Delete);
        assert_eq!(events[2].prev_kv.as_ref().unwrap().value, b("2"));
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
