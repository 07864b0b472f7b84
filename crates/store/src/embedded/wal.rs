//! The write-ahead log (`DATA_DIR/wal/`): what makes a commit durable.
//!
//! Each group commit appends one frame, `[payload length: u32][crc32 of payload: u32][payload]`,
//! to the current segment file and `fdatasync`s it before the commit is acknowledged: one small
//! sequential write, where a durable redb commit writes every page it touched. The applier thread
//! (`applier.rs`) then copies the batches into redb at its own pace and deletes a segment once
//! every batch in it is durable there. Segments are named by a sequence number and rotate at
//! [`SEGMENT_BYTES`].
//!
//! Only the last frame of the last segment can be torn (each frame is synced before the next is
//! written), so reading that segment stops at the first frame that is short or fails its
//! checksum: that frame was never acknowledged. A bad frame anywhere else is corruption.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// Directory of the log inside the data directory.
pub(crate) const DIR_NAME: &str = "wal";
/// Size at which the log moves on to a new segment.
const SEGMENT_BYTES: u64 = 16 * 1024 * 1024;
const FRAME_HEADER: usize = 8;

/// The log, open for appending.
pub(crate) struct Wal {
    dir: PathBuf,
    file: File,
    /// Sequence number of the segment being appended to.
    segment: u64,
    len: u64,
}

/// What [`Wal::open`] found from before: every intact frame, oldest first, and the segments
/// they came from (to delete once their batches are durable elsewhere).
pub(crate) struct Recovered {
    pub payloads: Vec<Vec<u8>>,
    pub segments: Vec<PathBuf>,
}

impl Wal {
    /// Open the log in `data_dir`, read back what earlier runs left, and start a new segment.
    pub fn open(data_dir: &Path) -> Result<(Wal, Recovered)> {
        let dir = data_dir.join(DIR_NAME);
        let io = |path: &Path, e: std::io::Error| Error::Io {
            path: path.display().to_string(),
            reason: e.to_string(),
        };
        std::fs::create_dir_all(&dir).map_err(|e| io(&dir, e))?;
        let mut segments: Vec<(u64, PathBuf)> = Vec::new();
        for entry in std::fs::read_dir(&dir).map_err(|e| io(&dir, e))? {
            let path = entry.map_err(|e| io(&dir, e))?.path();
            let seq = path
                .file_stem()
                .and_then(|s| s.to_str())
                .and_then(|s| s.parse().ok());
            match seq {
                Some(seq) if path.extension().is_some_and(|e| e == "log") => {
                    segments.push((seq, path))
                }
                _ => {}
            }
        }
        segments.sort();
        let mut recovered = Recovered {
            payloads: Vec::new(),
            segments: Vec::new(),
        };
        for (i, (_, path)) in segments.iter().enumerate() {
            let raw = std::fs::read(path).map_err(|e| io(path, e))?;
            let (payloads, valid) = parse(&raw);
            if valid < raw.len() {
                if i + 1 < segments.len() {
                    let reason = format!("damaged frame at offset {valid} of an older segment");
                    return Err(Error::Corrupt {
                        path: path.display().to_string(),
                        reason,
                    });
                }
                tracing::warn!(path = %path.display(), offset = valid, "ignoring a torn last frame");
            }
            recovered.payloads.extend(payloads);
            recovered.segments.push(path.clone());
        }
        let segment = segments.last().map_or(1, |(seq, _)| seq + 1);
        let file = create_segment(&dir, segment)?;
        Ok((
            Wal {
                dir,
                file,
                segment,
                len: 0,
            },
            recovered,
        ))
    }

    /// Append one frame and make it durable before returning; returns its segment's number.
    pub fn append(&mut self, payload: &[u8]) -> Result<u64> {
        if self.len >= SEGMENT_BYTES {
            self.file = create_segment(&self.dir, self.segment + 1)?;
            self.segment += 1;
            self.len = 0;
        }
        let mut frame = Vec::with_capacity(FRAME_HEADER + payload.len());
        frame.extend_from_slice(&(payload.len() as u32).to_le_bytes());
        frame.extend_from_slice(&crc32fast::hash(payload).to_le_bytes());
        frame.extend_from_slice(payload);
        let path = || segment_path(&self.dir, self.segment).display().to_string();
        let io = |e: std::io::Error| Error::Io {
            path: path(),
            reason: e.to_string(),
        };
        self.file.write_all(&frame).map_err(io)?;
        self.file.sync_data().map_err(io)?;
        self.len += frame.len() as u64;
        Ok(self.segment)
    }
}

/// Delete the segments numbered below `segment` in `data_dir`'s log (their batches are durable
/// elsewhere).
pub(crate) fn remove_before(data_dir: &Path, segment: u64) -> Result<()> {
    let dir = data_dir.join(DIR_NAME);
    let io = |e: std::io::Error| Error::Io {
        path: dir.display().to_string(),
        reason: e.to_string(),
    };
    for entry in std::fs::read_dir(&dir).map_err(io)? {
        let path = entry.map_err(io)?.path();
        let seq: Option<u64> = path
            .file_stem()
            .and_then(|s| s.to_str())
            .and_then(|s| s.parse().ok());
        if seq.is_some_and(|seq| seq < segment) {
            std::fs::remove_file(&path).map_err(io)?;
        }
    }
    Ok(())
}

fn segment_path(dir: &Path, segment: u64) -> PathBuf {
    dir.join(format!("{segment:020}.log"))
}

/// Create a segment and make its directory entry durable.
fn create_segment(dir: &Path, segment: u64) -> Result<File> {
    let path = segment_path(dir, segment);
    let io = |p: &Path, e: std::io::Error| Error::Io {
        path: p.display().to_string(),
        reason: e.to_string(),
    };
    let file = OpenOptions::new()
        .append(true)
        .create_new(true)
        .open(&path)
        .map_err(|e| io(&path, e))?;
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| io(dir, e))?;
    Ok(file)
}

/// The payloads of the intact frames at the start of `raw`, and how many bytes they span.
fn parse(raw: &[u8]) -> (Vec<Vec<u8>>, usize) {
    let mut payloads = Vec::new();
    let mut at = 0;
    while let Some(header) = raw.get(at..at + FRAME_HEADER) {
        let len = u32::from_le_bytes(header[..4].try_into().expect("4 bytes")) as usize;
        let crc = u32::from_le_bytes(header[4..].try_into().expect("4 bytes"));
        let Some(payload) = raw.get(at + FRAME_HEADER..at + FRAME_HEADER + len) else {
            break;
        };
        // payloads are never empty, so zeroed space is not mistaken for frames
        if len == 0 || crc32fast::hash(payload) != crc {
            break;
        }
        payloads.push(payload.to_vec());
        at += FRAME_HEADER + len;
    }
    (payloads, at)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_come_back_in_order_after_reopening() {
        let dir = tempfile::tempdir().unwrap();
        let (mut wal, old) = Wal::open(dir.path()).unwrap();
        assert!(old.payloads.is_empty());
        wal.append(b"one").unwrap();
        wal.append(b"two").unwrap();
        drop(wal);
        let (mut wal, old) = Wal::open(dir.path()).unwrap();
        assert_eq!(old.payloads, vec![b"one".to_vec(), b"two".to_vec()]);
        wal.append(b"three").unwrap();
        drop(wal);
        let (_, old) = Wal::open(dir.path()).unwrap();
        assert_eq!(
            old.payloads.len(),
            3,
            "a new run appends to a new segment after the old"
        );
    }

    #[test]
    fn a_torn_last_frame_is_ignored_and_the_rest_kept() {
        let dir = tempfile::tempdir().unwrap();
        let (mut wal, _) = Wal::open(dir.path()).unwrap();
        wal.append(b"kept").unwrap();
        let seg = wal.append(b"torn frame").unwrap();
        drop(wal);
        let path = segment_path(&dir.path().join(DIR_NAME), seg);
        let len = std::fs::metadata(&path).unwrap().len();
        OpenOptions::new()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(len - 3)
            .unwrap();
        let (_, old) = Wal::open(dir.path()).unwrap();
        assert_eq!(old.payloads, vec![b"kept".to_vec()]);
    }

    #[test]
    fn a_damaged_older_segment_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let (mut wal, _) = Wal::open(dir.path()).unwrap();
        let seg = wal.append(b"first run").unwrap();
        drop(wal);
        let (mut wal, _) = Wal::open(dir.path()).unwrap();
        wal.append(b"second run").unwrap();
        drop(wal);
        let path = segment_path(&dir.path().join(DIR_NAME), seg);
        let mut raw = std::fs::read(&path).unwrap();
        let last = raw.len() - 1;
        raw[last] ^= 0xff;
        std::fs::write(&path, raw).unwrap();
        assert!(matches!(Wal::open(dir.path()), Err(Error::Corrupt { .. })));
    }

    #[test]
    fn removing_old_segments_keeps_newer_ones() {
        let dir = tempfile::tempdir().unwrap();
        let (mut wal, _) = Wal::open(dir.path()).unwrap();
        let first = wal.append(b"a").unwrap();
        drop(wal);
        let (mut wal, _) = Wal::open(dir.path()).unwrap();
        let second = wal.append(b"b").unwrap();
        assert!(second > first);
        remove_before(dir.path(), second).unwrap();
        drop(wal);
        let (_, old) = Wal::open(dir.path()).unwrap();
        assert_eq!(old.payloads, vec![b"b".to_vec()]);
    }
}
