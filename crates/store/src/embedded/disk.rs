//! The on-disk layout of the embedded store, in one redb file (`DATA_DIR/store.redb`).
//!
//! redb gives crash-safe, checksummed copy-on-write commits with one `fsync` each; Skiff adds the
//! record format and the tables:
//! - `revisions`: `(revision, sub) -> record` for every write still reachable (compaction removes
//!   superseded ones). A record is a key plus a put's data, or a tombstone.
//! - `leases`: `lease id -> granted TTL`.
//! - `meta`: `format`, `revision` (head at the last commit), `compact_revision`.
//!
//! The file is not what makes a write durable: the write-ahead log is (`wal.rs`). The applier
//! thread copies logged batches here in large durable commits, off the writers' path; opening
//! replays whatever the log still holds (idempotently: records are keyed by revision).
//! Only the applier writes; [`Disk::open`] reads everything once at start-up, and afterwards
//! [`FileValues`] reads back single records: the values of superseded versions, which the
//! in-memory index lets go of once they are here (`index.rs`).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition, WriteTransaction};

use super::index::{Entry, PutData, Value, Values};
use super::wal::Recovered;
use crate::error::{Error, Result};

const REVISIONS: TableDefinition<(u64, u32), &[u8]> = TableDefinition::new("revisions");
const LEASES: TableDefinition<i64, i64> = TableDefinition::new("leases");
const META: TableDefinition<&str, i64> = TableDefinition::new("meta");

/// Version of the record format and table layout.
const FORMAT: i64 = 1;
const TAG_PUT: u8 = 1;
const TAG_TOMBSTONE: u8 = 2;
const HEADER_LEN: usize = 1 + 8 * 3 + 4;
const LOG_BATCH_FORMAT: u8 = 1;

/// File name of the database inside the data directory.
pub(crate) const FILE_NAME: &str = "store.redb";

/// Default bound of redb's page cache: enough for the pages a commit of appended records
/// touches (the right edge of the `revisions` tree), not for the whole file.
pub(crate) const FILE_CACHE_BYTES: usize = 4 * 1024 * 1024;

/// The open database.
pub(crate) struct Disk {
    db: Arc<Database>,
    path: PathBuf,
}

/// The open database, for reading records back while the applier writes. Cheap to clone.
#[derive(Clone)]
pub(crate) struct FileReader {
    db: Arc<Database>,
    path: PathBuf,
}

impl FileReader {
    /// A reader of values, which begins its read transaction at its first read (most reads need
    /// none).
    pub fn values(&self) -> FileValues<'_> {
        FileValues {
            file: self,
            table: None,
        }
    }
}

/// The values of records in the file, as of one read transaction. Readers use it under the
/// index's read lock, across the file read: the lock keeps a compaction from purging the entry
/// (and the applier's sweep from then dropping its record) between finding it in the index and
/// reading it here. These reads are of superseded versions only, served from the page cache.
pub(crate) struct FileValues<'a> {
    file: &'a FileReader,
    table: Option<redb::ReadOnlyTable<(u64, u32), &'static [u8]>>,
}

impl Values for FileValues<'_> {
    fn get(&mut self, key: &[u8], rev: i64, sub: u32) -> Result<Bytes> {
        let path = &self.file.path;
        let table = match &mut self.table {
            Some(table) => table,
            None => {
                let txn = self.file.db.begin_read().map_err(|e| io_error(path, e))?;
                let table = txn.open_table(REVISIONS).map_err(|e| io_error(path, e))?;
                self.table.insert(table)
            }
        };
        let missing = || {
            corrupt(
                path,
                format!("the record at revision {rev}.{sub} is missing"),
            )
        };
        let raw = table
            .get((rev as u64, sub))
            .map_err(|e| io_error(path, e))?
            .ok_or_else(missing)?;
        match decode(rev, sub, raw.value()) {
            Some((k, entry)) if k == key => match entry.put {
                Some(PutData {
                    value: Value::Held(value),
                    ..
                }) => Ok(value),
                _ => Err(missing()),
            },
            _ => Err(corrupt(
                path,
                format!("the record at revision {rev}.{sub} is not the expected write"),
            )),
        }
    }
}

/// Everything one group commit writes.
#[derive(Debug, Default)]
pub(crate) struct Batch {
    pub records: Vec<((i64, u32), Vec<u8>)>,
    pub leases_granted: Vec<(i64, i64)>,
    pub leases_removed: Vec<i64>,
    pub revision: i64,
    pub compact_revision: Option<i64>,
}

impl Batch {
    /// Whether the batch changes nothing that must be made durable.
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
            && self.leases_granted.is_empty()
            && self.leases_removed.is_empty()
            && self.compact_revision.is_none()
    }
}

/// One chunk of physical compaction: examine at most `max` records from revision `from` on, all
/// below revision `below`, and drop those the caller's `keep` rejects.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Sweep {
    pub from: i64,
    pub below: i64,
    pub max: usize,
}

/// The state read back at start-up, besides the records.
#[derive(Debug, Default)]
pub(crate) struct Loaded {
    pub leases: Vec<(i64, i64)>,
    pub revision: i64,
    pub compact_revision: i64,
}

/// Encode one write.
pub(crate) fn encode(key: &[u8], entry: &Entry) -> Vec<u8> {
    let (tag, create, version, lease, value): (u8, i64, i64, i64, &[u8]) = match &entry.put {
        Some(p) => {
            let Value::Held(value) = &p.value else {
                unreachable!("a write is encoded before the index lets go of its value")
            };
            (TAG_PUT, p.create_revision, p.version, p.lease, value)
        }
        None => (TAG_TOMBSTONE, 0, 0, 0, &[]),
    };
    let mut out = Vec::with_capacity(HEADER_LEN + key.len() + value.len());
    out.push(tag);
    out.extend_from_slice(&create.to_le_bytes());
    out.extend_from_slice(&version.to_le_bytes());
    out.extend_from_slice(&lease.to_le_bytes());
    out.extend_from_slice(&(key.len() as u32).to_le_bytes());
    out.extend_from_slice(key);
    out.extend_from_slice(value);
    out
}

/// Encode a batch for the write-ahead log: format byte, revision, compact revision (-1: none),
/// then counted lists of records, granted leases and removed leases.
pub(crate) fn encode_batch(batch: &Batch) -> Vec<u8> {
    let size: usize = batch.records.iter().map(|(_, r)| 16 + r.len()).sum();
    let mut out = Vec::with_capacity(32 + size + 16 * batch.leases_granted.len());
    out.push(LOG_BATCH_FORMAT);
    out.extend_from_slice(&batch.revision.to_le_bytes());
    out.extend_from_slice(&batch.compact_revision.unwrap_or(-1).to_le_bytes());
    out.extend_from_slice(&(batch.records.len() as u32).to_le_bytes());
    for ((rev, sub), record) in &batch.records {
        out.extend_from_slice(&rev.to_le_bytes());
        out.extend_from_slice(&sub.to_le_bytes());
        out.extend_from_slice(&(record.len() as u32).to_le_bytes());
        out.extend_from_slice(record);
    }
    out.extend_from_slice(&(batch.leases_granted.len() as u32).to_le_bytes());
    for (id, ttl) in &batch.leases_granted {
        out.extend_from_slice(&id.to_le_bytes());
        out.extend_from_slice(&ttl.to_le_bytes());
    }
    out.extend_from_slice(&(batch.leases_removed.len() as u32).to_le_bytes());
    for id in &batch.leases_removed {
        out.extend_from_slice(&id.to_le_bytes());
    }
    out
}

/// Decode [`encode_batch`]'s output; `None` if it is malformed.
pub(crate) fn decode_batch(raw: &[u8]) -> Option<Batch> {
    let mut r = Reader(raw);
    if r.take(1)?[0] != LOG_BATCH_FORMAT {
        return None;
    }
    let revision = r.i64()?;
    let compact_revision = Some(r.i64()?).filter(|c| *c >= 0);
    let mut batch = Batch {
        revision,
        compact_revision,
        ..Default::default()
    };
    for _ in 0..r.u32()? {
        let (rev, sub, len) = (r.i64()?, r.u32()?, r.u32()? as usize);
        batch.records.push(((rev, sub), r.take(len)?.to_vec()));
    }
    for _ in 0..r.u32()? {
        batch.leases_granted.push((r.i64()?, r.i64()?));
    }
    for _ in 0..r.u32()? {
        batch.leases_removed.push(r.i64()?);
    }
    r.0.is_empty().then_some(batch)
}

/// Reads little-endian fields off the front of a byte slice.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let (head, rest) = (self.0.get(..n)?, self.0.get(n..)?);
        self.0 = rest;
        Some(head)
    }
    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }
    fn i64(&mut self) -> Option<i64> {
        Some(i64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }
}

/// The key of a record written by [`encode`].
pub(crate) fn record_key(raw: &[u8]) -> Option<&[u8]> {
    let len = u32::from_le_bytes(raw.get(25..29)?.try_into().ok()?) as usize;
    raw.get(HEADER_LEN..HEADER_LEN + len)
}

/// Decode one record written by [`encode`]; `None` if it is malformed.
pub(crate) fn decode(rev: i64, sub: u32, raw: &[u8]) -> Option<(Bytes, Entry)> {
    let header = raw.get(..HEADER_LEN)?;
    let word = |i: usize| i64::from_le_bytes(header[1 + 8 * i..9 + 8 * i].try_into().expect("8"));
    let key_len = u32::from_le_bytes(header[25..29].try_into().expect("4")) as usize;
    let key = raw.get(HEADER_LEN..HEADER_LEN + key_len)?;
    let value = &raw[HEADER_LEN + key_len..];
    let put = match header[0] {
        TAG_PUT => Some(PutData {
            value: Value::Held(Bytes::copy_from_slice(value)),
            create_revision: word(0),
            version: word(1),
            lease: word(2),
        }),
        TAG_TOMBSTONE if value.is_empty() => None,
        _ => return None,
    };
    Some((Bytes::copy_from_slice(key), Entry { rev, sub, put }))
}

impl Disk {
    /// Open (or create) the database in `dir` and read it all back: every record to `record`,
    /// in (revision, sub) order, and the rest in the result.
    ///
    /// A file that exists but is damaged, or is not a Skiff store, is an error naming the file:
    /// the store never silently starts empty over existing data.
    ///
    /// `cache_bytes` bounds redb's page cache. redb keeps every page it writes in that cache (up
    /// to 1 GiB by default), but this file is read only at start-up and by compaction sweeps:
    /// the in-memory index serves every read. A large cache would hold a second copy of every
    /// value in memory for nothing.
    pub fn open(
        dir: &Path,
        recovered: &Recovered,
        cache_bytes: usize,
        record: &mut dyn FnMut(Bytes, Entry),
    ) -> Result<(Disk, Loaded)> {
        std::fs::create_dir_all(dir).map_err(|e| io_error(dir, e))?;
        let path = dir.join(FILE_NAME);
        let fresh = match std::fs::metadata(&path) {
            Ok(m) if m.len() == 0 => return Err(corrupt(&path, "file is empty")),
            Ok(_) => false,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => true,
            Err(e) => return Err(io_error(&path, e)),
        };
        let mut builder = redb::Builder::new();
        builder.set_cache_size(cache_bytes);
        let db = if fresh {
            builder.create(&path)
        } else {
            builder.open(&path)
        }
        .map_err(|e| match e {
            redb::DatabaseError::Storage(redb::StorageError::Io(io)) => io_error(&path, io),
            other => corrupt(&path, other),
        })?;
        if fresh && !recovered.payloads.is_empty() {
            return Err(corrupt(
                &path,
                "missing, but the write-ahead log holds writes",
            ));
        }
        let disk = Disk {
            db: Arc::new(db),
            path,
        };
        if fresh {
            disk.initialise()?;
        }
        disk.replay(recovered)?;
        let loaded = load(&*disk.db, &disk.path, record)?;
        Ok((disk, loaded))
    }

    fn initialise(&self) -> Result<()> {
        let txn = self.db.begin_write().map_err(|e| self.io(e))?;
        {
            let mut meta = txn.open_table(META).map_err(|e| self.io(e))?;
            meta.insert("format", FORMAT).map_err(|e| self.io(e))?;
            // etcd starts at revision 1: the first write gets revision 2
            meta.insert("revision", 1).map_err(|e| self.io(e))?;
            meta.insert("compact_revision", 0).map_err(|e| self.io(e))?;
            txn.open_table(REVISIONS).map_err(|e| self.io(e))?;
            txn.open_table(LEASES).map_err(|e| self.io(e))?;
        }
        txn.commit().map_err(|e| self.io(e))
    }

    /// Copy the batches the log still holds into the file (one durable commit), then delete the
    /// log segments they came from.
    fn replay(&self, recovered: &Recovered) -> Result<()> {
        if !recovered.payloads.is_empty() {
            let mut batches = Vec::with_capacity(recovered.payloads.len());
            for (i, payload) in recovered.payloads.iter().enumerate() {
                let batch = decode_batch(payload).ok_or_else(|| {
                    corrupt(
                        &self.path,
                        format!("malformed batch {i} in the write-ahead log"),
                    )
                })?;
                batches.push(batch);
            }
            self.write(&batches, true)?;
            tracing::info!(batches = batches.len(), "replayed the write-ahead log");
        }
        for segment in &recovered.segments {
            std::fs::remove_file(segment).map_err(|e| io_error(segment, e))?;
        }
        Ok(())
    }

    /// A reader of the file for other threads.
    pub fn reader(&self) -> FileReader {
        FileReader {
            db: self.db.clone(),
            path: self.path.clone(),
        }
    }

    /// Write `batches` in one commit: durable (one fsync, which also makes every earlier
    /// non-durable commit durable) or not (the pages reach the OS, not the disk; a crash rolls
    /// the file back to its last durable commit, and the log still holds what it lost).
    pub fn write(&self, batches: &[Batch], durable: bool) -> Result<()> {
        let mut txn = self.db.begin_write().map_err(|e| self.io(e))?;
        if !durable {
            txn.set_durability(redb::Durability::None)
                .map_err(|e| self.io(e))?;
        }
        for batch in batches {
            self.apply(&txn, batch)?;
        }
        txn.commit().map_err(|e| self.io(e))
    }

    /// Make every earlier commit durable: an empty durable commit.
    pub fn persist(&self) -> Result<()> {
        self.write(&[], true)
    }

    /// Run one chunk of `sweep` in a durable commit of its own, keeping only the records for
    /// which `keep(key, revision, sub)` holds; returns the revision the sweep continues from, or
    /// `None` when it has reached its end.
    ///
    /// The commit writes nothing else because redb is copy-on-write: the pages a transaction
    /// frees can be reused only by later transactions (redb frees them right after the commit,
    /// or when the read transactions open at the time end: [`FileValues`] holds one for a single
    /// read of the store). Swept in the same commit as new
    /// batches, the old history and the new writes would both need room in the file at once.
    pub fn sweep(
        &self,
        sweep: Sweep,
        keep: &dyn Fn(&[u8], i64, u32) -> bool,
    ) -> Result<Option<i64>> {
        let txn = self.db.begin_write().map_err(|e| self.io(e))?;
        let swept_to = self.sweep_in(&txn, sweep, keep)?;
        txn.commit().map_err(|e| self.io(e))?;
        Ok(swept_to)
    }

    fn apply(&self, txn: &WriteTransaction, batch: &Batch) -> Result<()> {
        let mut revisions = txn.open_table(REVISIONS).map_err(|e| self.io(e))?;
        for ((rev, sub), record) in &batch.records {
            revisions
                .insert((*rev as u64, *sub), record.as_slice())
                .map_err(|e| self.io(e))?;
        }
        let mut leases = txn.open_table(LEASES).map_err(|e| self.io(e))?;
        for (id, ttl) in &batch.leases_granted {
            leases.insert(*id, *ttl).map_err(|e| self.io(e))?;
        }
        for id in &batch.leases_removed {
            leases.remove(*id).map_err(|e| self.io(e))?;
        }
        let mut meta = txn.open_table(META).map_err(|e| self.io(e))?;
        meta.insert("revision", batch.revision)
            .map_err(|e| self.io(e))?;
        if let Some(compact) = batch.compact_revision {
            meta.insert("compact_revision", compact)
                .map_err(|e| self.io(e))?;
        }
        Ok(())
    }

    fn sweep_in(
        &self,
        txn: &WriteTransaction,
        sweep: Sweep,
        keep: &dyn Fn(&[u8], i64, u32) -> bool,
    ) -> Result<Option<i64>> {
        let mut revisions = txn.open_table(REVISIONS).map_err(|e| self.io(e))?;
        let from = (sweep.from.max(0) as u64, 0);
        let below = (sweep.below.max(0) as u64, 0);
        // The chunk ends at the revision of the (max+1)-th record (at least one revision further,
        // so a revision with more records than `max` is swept whole): each commit's work is
        // bounded and the sweep always advances.
        let end = revisions
            .range(from..below)
            .map_err(|e| self.io(e))?
            .nth(sweep.max)
            .transpose()
            .map_err(|e| self.io(e))?
            .map(|(k, _)| k.value().0.max(from.0 + 1));
        let to = end.map_or(below, |rev| (rev, 0));
        revisions
            .retain_in(from..to, |(rev, sub), raw| match record_key(raw) {
                Some(key) => keep(key, rev as i64, sub),
                None => true, // never drop what cannot be read
            })
            .map_err(|e| self.io(e))?;
        Ok(end.map(|rev| rev as i64))
    }

    /// Bytes in use inside the file (the rest is free pages kept for reuse).
    pub fn size_in_use(&self) -> Result<i64> {
        let txn = self.db.begin_write().map_err(|e| self.io(e))?;
        let stats = txn.stats().map_err(|e| self.io(e))?;
        let in_use = stats.allocated_pages() * stats.page_size() as u64;
        txn.abort().map_err(|e| self.io(e))?;
        Ok(in_use as i64)
    }

    fn io(&self, e: impl std::fmt::Display) -> Error {
        Error::Io {
            path: self.path.display().to_string(),
            reason: e.to_string(),
        }
    }
}

/// Every record (to `record`, in (revision, sub) order), lease and counter of the database `db`
/// (the file at `path`).
fn load(
    db: &impl ReadableDatabase,
    path: &Path,
    record: &mut dyn FnMut(Bytes, Entry),
) -> Result<Loaded> {
    let txn = db.begin_read().map_err(|e| io_error(path, e))?;
    let missing = |what: &str| corrupt(path, format!("missing {what}: not a skiff store"));
    let meta = txn.open_table(META).map_err(|_| missing("meta table"))?;
    let get = |name: &str| -> Result<i64> {
        let value = meta.get(name).map_err(|e| corrupt(path, e))?;
        value.map(|v| v.value()).ok_or_else(|| missing(name))
    };
    let format = get("format")?;
    if format != FORMAT {
        return Err(corrupt(path, format!("unknown format version {format}")));
    }
    let mut loaded = Loaded {
        revision: get("revision")?,
        compact_revision: get("compact_revision")?,
        ..Default::default()
    };
    let revisions = txn
        .open_table(REVISIONS)
        .map_err(|_| missing("revisions table"))?;
    for row in revisions.iter().map_err(|e| corrupt(path, e))? {
        let (k, v) = row.map_err(|e| corrupt(path, e))?;
        let (rev, sub) = k.value();
        let (key, entry) = decode(rev as i64, sub, v.value())
            .ok_or_else(|| corrupt(path, format!("malformed record at revision {rev}.{sub}")))?;
        record(key, entry);
    }
    let leases = txn
        .open_table(LEASES)
        .map_err(|_| missing("leases table"))?;
    for row in leases.iter().map_err(|e| corrupt(path, e))? {
        let (id, ttl) = row.map_err(|e| corrupt(path, e))?;
        loaded.leases.push((id.value(), ttl.value()));
    }
    Ok(loaded)
}

/// The database in `dir` read without changing it (the store's checker): every record (to
/// `record`), lease and counter. A file whose last writer was killed needs redb's repair (a rollback to its
/// last durable commit, which opening the store does before replaying the log): that is done
/// on a copy (`store.redb.check.tmp` beside it, removed after).
pub(crate) fn read_only(dir: &Path, record: &mut dyn FnMut(Bytes, Entry)) -> Result<Loaded> {
    let path = dir.join(FILE_NAME);
    let opened = |e| match e {
        redb::DatabaseError::DatabaseAlreadyOpen => corrupt(&path, "in use: stop the store first"),
        redb::DatabaseError::Storage(redb::StorageError::Io(io)) => io_error(&path, io),
        other => corrupt(&path, other),
    };
    match redb::ReadOnlyDatabase::open(&path) {
        Ok(db) => load(&db, &path, record),
        Err(redb::DatabaseError::RepairAborted) => {
            let copy = dir.join(format!("{FILE_NAME}.check.tmp"));
            std::fs::copy(&path, &copy).map_err(|e| io_error(&copy, e))?;
            let loaded = redb::Database::open(&copy)
                .map_err(opened)
                .and_then(|db| load(&db, &path, record));
            let _ = std::fs::remove_file(&copy);
            loaded
        }
        Err(e) => Err(opened(e)),
    }
}

fn io_error(path: &Path, e: impl std::fmt::Display) -> Error {
    Error::Io {
        path: path.display().to_string(),
        reason: e.to_string(),
    }
}

fn corrupt(path: &Path, reason: impl std::fmt::Display) -> Error {
    Error::Corrupt {
        path: path.display().to_string(),
        reason: reason.to_string(),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A reader of a new, empty store file (in a directory removed at once: the open file
    /// outlives it).
    pub(crate) fn empty_file() -> FileReader {
        let dir = tempfile::tempdir().unwrap();
        let none = Recovered {
            payloads: Vec::new(),
            segments: Vec::new(),
        };
        let (disk, _) = Disk::open(dir.path(), &none, FILE_CACHE_BYTES, &mut |_, _| {}).unwrap();
        disk.reader()
    }

    #[test]
    fn records_round_trip_through_the_encoding() {
        let put = Entry {
            rev: 7,
            sub: 2,
            put: Some(PutData {
                value: Value::Held(Bytes::from_static(b"value")),
                create_revision: 3,
                version: 4,
                lease: 99,
            }),
        };
        let tomb = Entry {
            rev: 8,
            sub: 0,
            put: None,
        };
        for entry in [put, tomb] {
            let raw = encode(b"/registry/pods/a", &entry);
            let (key, back) = decode(entry.rev, entry.sub, &raw).unwrap();
            assert_eq!(&key[..], b"/registry/pods/a");
            assert_eq!(back, entry);
        }
    }

    #[test]
    fn batches_round_trip_through_the_log_encoding() {
        let batch = Batch {
            records: vec![((5, 0), b"rec-a".to_vec()), ((5, 1), b"rec-b".to_vec())],
            leases_granted: vec![(7, 60)],
            leases_removed: vec![8],
            revision: 5,
            compact_revision: Some(3),
        };
        let back = decode_batch(&encode_batch(&batch)).unwrap();
        assert_eq!(back.records, batch.records);
        assert_eq!(back.leases_granted, batch.leases_granted);
        assert_eq!(back.leases_removed, batch.leases_removed);
        assert_eq!((back.revision, back.compact_revision), (5, Some(3)));
        let raw = encode_batch(&batch);
        assert!(decode_batch(&raw[..raw.len() - 1]).is_none());
    }

    #[test]
    fn a_truncated_record_is_rejected() {
        let entry = Entry {
            rev: 1,
            sub: 0,
            put: None,
        };
        let raw = encode(b"key", &entry);
        assert!(decode(1, 0, &raw[..raw.len() - 1]).is_none());
        assert!(decode(1, 0, &raw[..5]).is_none());
    }

    #[test]
    fn a_file_that_is_not_a_store_is_refused_with_its_path() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(FILE_NAME), vec![0x5a; 8192]).unwrap();
        let none = Recovered {
            payloads: Vec::new(),
            segments: Vec::new(),
        };
        let err = Disk::open(dir.path(), &none, FILE_CACHE_BYTES, &mut |_, _| {})
            .err()
            .expect("must refuse");
        assert!(err.to_string().contains(FILE_NAME), "{err}");
    }
}
