//! Upstream's atomic writer (`pkg/volume/util/atomic_writer.go`): a volume's files are written
//! into a fresh timestamped directory (`..2026_11_30_05_33_01.123456789`), the `..data`
//! symlink is pointed at it by renaming a `..data_tmp` symlink over it (one atomic step), and the
//! user-visible names are symlinks through `..data` (`key` → `..data/key`). A reader therefore
//! sees the old set or the new set, never half of each. Paths no longer in the payload and the
//! previous timestamped directory are removed afterwards. A file with an owner (a projected
//! service account token's `FsUser`) is given to that user as it is written; a pod's fsGroup
//! is applied to the whole volume after the new files are written and before they become
//! visible (upstream's `setPerms` step), each time the files are written.

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

use super::host::HostOps;
use super::ownership::Ownership;

const DATA_DIR: &str = "..data";
const DATA_DIR_TMP: &str = "..data_tmp";

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("invalid path {path:?} in volume payload: {reason}")]
    InvalidPath { path: String, reason: &'static str },
    #[error("applying fsGroup {group} to {}: {source}", path.display())]
    Ownership {
        group: u32,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("{step} {}: {source}", path.display())]
    Io {
        step: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// One file of a volume: its bytes, permission bits and owner.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileProjection {
    pub data: Vec<u8>,
    pub mode: u32,
    /// The user the file is given to (its group is left alone); None: the kubelet's own
    /// (upstream's `FsUser`, set only for service account tokens).
    pub fs_user: Option<u32>,
}

/// A volume's files by relative path (`key`, `dir/key`).
pub type Payload = BTreeMap<String, FileProjection>;

fn io_err(step: &'static str, path: &Path) -> impl FnOnce(io::Error) -> Error {
    let path = path.to_path_buf();
    move |source| Error::Io { step, path, source }
}

/// Checks a payload path as upstream does: relative, not empty, no `..` element, not starting
/// with `..` (the writer's own names).
fn validate(path: &str) -> Result<()> {
    let invalid = |reason| {
        Err(Error::InvalidPath {
            path: path.into(),
            reason,
        })
    };
    if path.is_empty() {
        return invalid("must not be empty");
    }
    if Path::new(path).is_absolute() {
        return invalid("must be relative");
    }
    if path.starts_with("..") {
        return invalid("must not start with '..'");
    }
    if Path::new(path)
        .components()
        .any(|c| c == Component::ParentDir)
    {
        return invalid("must not contain '..'");
    }
    Ok(())
}

/// The first element of a payload path: the name visible in the volume's directory.
fn top_level(path: &str) -> &str {
    path.split('/').find(|s| !s.is_empty()).unwrap_or(path)
}

/// Whether `dir` already holds exactly the payload (bytes, modes and owners; a mode is also
/// right with the bits an fsGroup adds, `added`).
fn holds(dir: &Path, payload: &Payload, added: u32) -> bool {
    let mut on_disk = BTreeSet::new();
    collect_files(dir, dir, &mut on_disk);
    if on_disk.len() != payload.len() {
        return false;
    }
    payload.iter().all(|(path, file)| {
        let p = dir.join(path);
        let same_mode_and_owner = std::fs::metadata(&p)
            .map(|m| {
                let mode = m.permissions().mode() & 0o7777;
                (mode == file.mode || mode == file.mode | added)
                    && file.fs_user.is_none_or(|uid| m.uid() == uid)
            })
            .unwrap_or(false);
        same_mode_and_owner && std::fs::read(&p).is_ok_and(|d| d == file.data)
    })
}

fn collect_files(root: &Path, dir: &Path, out: &mut BTreeSet<PathBuf>) {
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            collect_files(root, &path, out);
        } else if let Ok(rel) = path.strip_prefix(root) {
            out.insert(rel.to_path_buf());
        }
    }
}

/// A new, empty timestamped directory in `target`.
fn new_timestamp_dir(target: &Path) -> Result<PathBuf> {
    let now = jiff::Timestamp::now();
    let stamp = now.strftime("%Y_%m_%d_%H_%M_%S");
    let mut nanos = now.subsec_nanosecond();
    loop {
        let dir = target.join(format!("..{stamp}.{nanos:09}"));
        match std::fs::create_dir(&dir) {
            Ok(()) => {
                std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755))
                    .map_err(io_err("setting the mode of", &dir))?;
                return Ok(dir);
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => nanos = nanos.wrapping_add(1),
            Err(e) => return Err(io_err("creating", &dir)(e)),
        }
    }
}

/// Writes the payload into `target` (created if missing), applying `owner`'s fsGroup when it
/// writes; returns whether anything changed.
pub fn write(
    target: &Path,
    payload: &Payload,
    owner: Option<(&dyn HostOps, &Ownership)>,
) -> Result<bool> {
    for path in payload.keys() {
        validate(path)?;
    }
    std::fs::create_dir_all(target).map_err(io_err("creating", target))?;
    let data_link = target.join(DATA_DIR);
    let old_ts = std::fs::read_link(&data_link).ok();
    let visible: BTreeSet<&str> = payload.keys().map(|p| top_level(p)).collect();
    let old_visible: BTreeSet<String> = std::fs::read_dir(target)
        .map_err(io_err("reading", target))?
        .flatten()
        .filter_map(|e| e.file_name().to_str().map(String::from))
        .filter(|n| !n.starts_with(".."))
        .collect();
    let all_linked = visible.iter().all(|v| old_visible.contains(*v));
    let added = owner.map_or(0, |(_, o)| o.file_mask());
    let unchanged = old_ts
        .as_ref()
        .is_some_and(|ts| holds(&target.join(ts), payload, added));
    if unchanged && all_linked && old_visible.len() == visible.len() {
        return Ok(false);
    }

    let ts_dir = new_timestamp_dir(target)?;
    for (path, file) in payload {
        let p = ts_dir.join(path);
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent).map_err(io_err("creating", parent))?;
        }
        std::fs::write(&p, &file.data).map_err(io_err("writing", &p))?;
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(file.mode))
            .map_err(io_err("setting the mode of", &p))?;
        if let Some(uid) = file.fs_user {
            std::os::unix::fs::lchown(&p, Some(uid), None)
                .map_err(io_err("changing the owner of", &p))?;
        }
    }
    if let Some((host, ownership)) = owner {
        // the whole volume: the first write also made the volume's root
        host.set_ownership(target, ownership)
            .map_err(|source| Error::Ownership {
                group: ownership.group,
                path: target.to_path_buf(),
                source,
            })?;
    }
    let tmp_link = target.join(DATA_DIR_TMP);
    let _ = std::fs::remove_file(&tmp_link);
    let ts_name = ts_dir.file_name().unwrap_or_default();
    std::os::unix::fs::symlink(ts_name, &tmp_link).map_err(io_err("linking", &tmp_link))?;
    std::fs::rename(&tmp_link, &data_link).map_err(io_err("renaming", &tmp_link))?;

    for name in &visible {
        let link = target.join(name);
        if std::fs::symlink_metadata(&link).is_err() {
            std::os::unix::fs::symlink(Path::new(DATA_DIR).join(name), &link)
                .map_err(io_err("linking", &link))?;
        }
    }
    for name in old_visible.iter().filter(|n| !visible.contains(n.as_str())) {
        let p = target.join(name);
        // a symlink of an earlier payload, or an (empty) directory a subPath mount created
        let is_dir = std::fs::symlink_metadata(&p).is_ok_and(|m| m.is_dir());
        let removed = if is_dir {
            std::fs::remove_dir(&p)
        } else {
            std::fs::remove_file(&p)
        };
        removed.map_err(io_err("removing", &p))?;
    }
    if let Some(old) = old_ts {
        let old = target.join(old);
        if old != ts_dir {
            std::fs::remove_dir_all(&old).map_err(io_err("removing", &old))?;
        }
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn payload(files: &[(&str, &str, u32)]) -> Payload {
        files
            .iter()
            .map(|(p, d, m)| {
                (
                    p.to_string(),
                    FileProjection {
                        data: d.as_bytes().to_vec(),
                        mode: *m,
                        fs_user: None,
                    },
                )
            })
            .collect()
    }

    fn write_plain(target: &Path, payload: &Payload) -> Result<bool> {
        write(target, payload, None)
    }

    fn read(dir: &Path, path: &str) -> String {
        std::fs::read_to_string(dir.join(path)).unwrap()
    }

    fn names(dir: &Path) -> BTreeSet<String> {
        std::fs::read_dir(dir)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect()
    }

    #[test]
    fn files_are_visible_through_the_data_symlink_with_their_modes() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("vol");
        let changed = write_plain(
            &target,
            &payload(&[("a", "1", 0o644), ("sub/b", "2", 0o400)]),
        )
        .unwrap();
        assert!(changed);
        assert_eq!(read(&target, "a"), "1");
        assert_eq!(read(&target, "sub/b"), "2");
        assert_eq!(
            std::fs::read_link(target.join("a")).unwrap(),
            Path::new("..data/a")
        );
        assert_eq!(
            std::fs::read_link(target.join("sub")).unwrap(),
            Path::new("..data/sub")
        );
        let mode = |p: &str| {
            std::fs::metadata(target.join(p))
                .unwrap()
                .permissions()
                .mode()
                & 0o777
        };
        assert_eq!((mode("a"), mode("sub/b")), (0o644, 0o400));
    }

    #[test]
    fn a_new_payload_swaps_the_whole_set_and_drops_what_is_gone() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().to_path_buf();
        write_plain(&target, &payload(&[("a", "1", 0o644), ("b", "2", 0o644)])).unwrap();
        let first = std::fs::read_link(target.join(DATA_DIR)).unwrap();
        write_plain(&target, &payload(&[("a", "3", 0o644), ("c", "4", 0o644)])).unwrap();
        let second = std::fs::read_link(target.join(DATA_DIR)).unwrap();
        assert_ne!(first, second);
        assert_eq!(
            (read(&target, "a"), read(&target, "c")),
            ("3".into(), "4".into())
        );
        let visible: BTreeSet<String> = names(&target)
            .into_iter()
            .filter(|n| !n.starts_with(".."))
            .collect();
        assert_eq!(visible, BTreeSet::from(["a".into(), "c".into()]));
        // the old timestamped directory is gone, only the new one and ..data remain
        let hidden: Vec<String> = names(&target)
            .into_iter()
            .filter(|n| n.starts_with(".."))
            .collect();
        assert_eq!(hidden.len(), 2, "{hidden:?}");
    }

    #[test]
    fn the_same_payload_is_not_written_twice_but_a_mode_change_is() {
        let dir = tempfile::tempdir().unwrap();
        let p = payload(&[("a", "1", 0o644)]);
        assert!(write_plain(dir.path(), &p).unwrap());
        assert!(!write_plain(dir.path(), &p).unwrap());
        assert!(write_plain(dir.path(), &payload(&[("a", "1", 0o600)])).unwrap());
    }

    #[test]
    fn a_file_with_an_owner_is_given_to_it_and_written_again_for_another() {
        let dir = tempfile::tempdir().unwrap();
        let mut p = payload(&[("token", "t", 0o600)]);
        let owned = |p: &mut Payload, uid| p.get_mut("token").unwrap().fs_user = Some(uid);
        owned(&mut p, 1000);
        assert!(write_plain(dir.path(), &p).unwrap());
        let owner = || std::fs::metadata(dir.path().join("token")).unwrap().uid();
        assert_eq!(owner(), 1000);
        assert!(!write_plain(dir.path(), &p).unwrap());
        owned(&mut p, 1001);
        assert!(write_plain(dir.path(), &p).unwrap());
        assert_eq!(owner(), 1001);
    }

    #[test]
    fn an_empty_directory_left_by_a_sub_path_mount_is_removed_with_the_old_set() {
        let dir = tempfile::tempdir().unwrap();
        write_plain(dir.path(), &payload(&[("a", "1", 0o644)])).unwrap();
        std::fs::create_dir(dir.path().join("made")).unwrap();
        write_plain(dir.path(), &payload(&[("a", "2", 0o644)])).unwrap();
        assert!(!dir.path().join("made").exists());
        assert_eq!(read(dir.path(), "a"), "2");
    }

    #[test]
    fn an_empty_payload_leaves_an_empty_volume() {
        let dir = tempfile::tempdir().unwrap();
        write_plain(dir.path(), &payload(&[("a", "1", 0o644)])).unwrap();
        write_plain(dir.path(), &Payload::new()).unwrap();
        assert!(!dir.path().join("a").exists());
        assert!(dir.path().join(DATA_DIR).exists());
    }

    #[test]
    fn paths_that_escape_the_volume_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        for bad in ["/etc/passwd", "../x", "a/../../x", "..data", ""] {
            let err = write_plain(dir.path(), &payload(&[(bad, "x", 0o644)])).unwrap_err();
            assert!(matches!(err, Error::InvalidPath { .. }), "{bad}: {err}");
        }
    }
}
