//! The volume plugins' side effects on the host outside the kubelet's data dir, behind
//! [`HostOps`]: tmpfs mounts (emptyDir `medium: Memory`, secrets), bind mounts (`local`
//! volumes), unmounts, the hostPath checks and creations, the fsGroup ownership change
//! ([`super::ownership`]), and the removal of a local-path volume's directory. [`RealHost`] does them (the `mount`/`umount` commands, std::fs);
//! [`RecordingHost`] records them and can be told to fail.

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;

use parking_lot::Mutex;

use super::ownership::{self, Ownership};

/// What kind of file a host path is, for hostPath's `type` checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileKind {
    Directory,
    File,
    Socket,
    CharDevice,
    BlockDevice,
    /// A fifo or anything else.
    Other,
}

pub trait HostOps: Send + Sync {
    /// Mounts a tmpfs at `path` (which exists), of `size_bytes` when given.
    fn mount_tmpfs(&self, path: &Path, size_bytes: Option<i64>) -> io::Result<()>;
    /// Whether something is mounted at `path`.
    fn is_mount_point(&self, path: &Path) -> io::Result<bool>;
    /// The mount points at or below `path`, deepest first.
    fn mounts_under(&self, path: &Path) -> io::Result<Vec<PathBuf>>;
    fn unmount(&self, path: &Path) -> io::Result<()>;
    /// What is at `path` (following symlinks), or None if nothing is.
    fn file_kind(&self, path: &Path) -> io::Result<Option<FileKind>>;
    /// Creates the directory and its parents with `mode` (hostPath `DirectoryOrCreate`).
    fn create_dir_all(&self, path: &Path, mode: u32) -> io::Result<()>;
    /// Creates an empty file with `mode`, and its parent directories (hostPath `FileOrCreate`).
    fn create_file(&self, path: &Path, mode: u32) -> io::Result<()>;
    /// Bind-mounts `source` at `target` (which exists), read-only when asked.
    fn bind_mount(&self, source: &Path, target: &Path, read_only: bool) -> io::Result<()>;
    /// Removes `path` and everything below it; a missing path is success.
    fn remove_dir_all(&self, path: &Path) -> io::Result<()>;
    /// Applies a pod's fsGroup to the volume at `path` ([`ownership::apply`]); false when its
    /// policy found nothing to do.
    fn set_ownership(&self, path: &Path, ownership: &Ownership) -> io::Result<bool>;
    /// The group that owns `path`.
    fn group_of(&self, path: &Path) -> io::Result<u32>;
}

/// [`HostOps`] on this machine.
#[derive(Debug, Default)]
pub struct RealHost;

fn run(cmd: &mut Command) -> io::Result<()> {
    let out = cmd.output()?;
    if out.status.success() {
        return Ok(());
    }
    Err(io::Error::other(format!(
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr).trim()
    )))
}

/// The mount points in `/proc/self/mountinfo` (field 5; octal escapes such as `\040` decoded).
pub(crate) fn mount_points() -> io::Result<Vec<PathBuf>> {
    let info = std::fs::read_to_string("/proc/self/mountinfo")?;
    Ok(info
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .map(|p| PathBuf::from(unescape_octal(p)))
        .collect())
}

fn unescape_octal(s: &str) -> String {
    let mut out = String::new();
    let mut rest = s;
    while let Some(i) = rest.find('\\') {
        out.push_str(&rest[..i]);
        match u8::from_str_radix(rest.get(i + 1..i + 4).unwrap_or(""), 8) {
            Ok(b) => {
                out.push(b as char);
                rest = &rest[i + 4..];
            }
            Err(_) => {
                out.push('\\');
                rest = &rest[i + 1..];
            }
        }
    }
    out.push_str(rest);
    out
}

impl HostOps for RealHost {
    fn mount_tmpfs(&self, path: &Path, size_bytes: Option<i64>) -> io::Result<()> {
        let mut cmd = Command::new("mount");
        cmd.args(["-t", "tmpfs"]);
        if let Some(size) = size_bytes {
            cmd.args(["-o", &format!("size={size}")]);
        }
        run(cmd.arg("tmpfs").arg(path))
    }

    fn is_mount_point(&self, path: &Path) -> io::Result<bool> {
        Ok(mount_points()?.iter().any(|p| p == path))
    }

    fn mounts_under(&self, path: &Path) -> io::Result<Vec<PathBuf>> {
        let mut found: Vec<PathBuf> = mount_points()?
            .into_iter()
            .filter(|p| p.starts_with(path))
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        found.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
        Ok(found)
    }

    fn unmount(&self, path: &Path) -> io::Result<()> {
        run(Command::new("umount").arg(path))
    }

    fn file_kind(&self, path: &Path) -> io::Result<Option<FileKind>> {
        let meta = match std::fs::metadata(path) {
            Ok(m) => m,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        let t = meta.file_type();
        Ok(Some(if t.is_dir() {
            FileKind::Directory
        } else if t.is_file() {
            FileKind::File
        } else if t.is_socket() {
            FileKind::Socket
        } else if t.is_char_device() {
            FileKind::CharDevice
        } else if t.is_block_device() {
            FileKind::BlockDevice
        } else {
            FileKind::Other
        }))
    }

    fn create_dir_all(&self, path: &Path, mode: u32) -> io::Result<()> {
        make_dirs(path)?;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
            .map_err(|e| io::Error::new(e.kind(), format!("chmod {}: {e}", path.display())))
    }

    fn create_file(&self, path: &Path, mode: u32) -> io::Result<()> {
        if let Some(parent) = path.parent() {
            make_dirs(parent)?;
        }
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)?;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
    }

    fn bind_mount(&self, source: &Path, target: &Path, read_only: bool) -> io::Result<()> {
        run(Command::new("mount").arg("--bind").arg(source).arg(target))?;
        if read_only {
            // a bind mount takes `ro` only on a remount
            if let Err(e) = run(Command::new("mount")
                .args(["-o", "remount,bind,ro"])
                .arg(target))
            {
                let _ = run(Command::new("umount").arg(target));
                return Err(e);
            }
        }
        Ok(())
    }

    fn remove_dir_all(&self, path: &Path) -> io::Result<()> {
        match std::fs::remove_dir_all(path) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            other => other,
        }
    }

    fn set_ownership(&self, path: &Path, ownership: &Ownership) -> io::Result<bool> {
        ownership::apply(path, ownership)
    }

    fn group_of(&self, path: &Path) -> io::Result<u32> {
        use std::os::unix::fs::MetadataExt;
        Ok(std::fs::metadata(path)?.gid())
    }
}

/// `mkdir -p`, with errors that name the path that failed as Go's `os.MkdirAll` does (`mkdir
/// /srv/file: not a directory` when a file stands where a directory is needed).
fn make_dirs(path: &Path) -> io::Result<()> {
    let named = |p: &Path, e: io::Error| {
        let text = match e.kind() {
            io::ErrorKind::NotADirectory => "not a directory".to_string(),
            _ => e.to_string(),
        };
        io::Error::new(e.kind(), format!("mkdir {}: {text}", p.display()))
    };
    let mut missing = Vec::new();
    for p in path.ancestors() {
        match std::fs::metadata(p) {
            Ok(m) if m.is_dir() => break,
            Ok(_) => return Err(named(p, io::Error::from(io::ErrorKind::NotADirectory))),
            // below a file: the file is named when the walk up reaches it
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::NotFound | io::ErrorKind::NotADirectory
                ) =>
            {
                missing.push(p)
            }
            Err(e) => return Err(named(p, e)),
        }
    }
    for p in missing.into_iter().rev() {
        match std::fs::create_dir(p) {
            Err(e) if e.kind() != io::ErrorKind::AlreadyExists => return Err(named(p, e)),
            _ => {}
        }
    }
    Ok(())
}

/// One call to a [`RecordingHost`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostCall {
    MountTmpfs(PathBuf, Option<i64>),
    Unmount(PathBuf),
    CreateDir(PathBuf, u32),
    CreateFile(PathBuf, u32),
    BindMount {
        source: PathBuf,
        target: PathBuf,
        read_only: bool,
    },
    RemoveDir(PathBuf),
    SetOwnership(PathBuf, Ownership),
}

/// A [`HostOps`] that records what it was asked to change, keeps a table of mounts and host
/// files instead of the host's, and fails every call while `fail` is set.
#[derive(Debug, Default)]
pub struct RecordingHost {
    /// Guards the record; held for one call.
    pub calls: Mutex<Vec<HostCall>>,
    pub mounted: Mutex<BTreeSet<PathBuf>>,
    /// The host's files by path; a path missing here does not exist.
    pub files: Mutex<BTreeMap<PathBuf, FileKind>>,
    /// The groups of host paths ([`HostOps::group_of`]); 0 for a path missing here.
    pub groups: Mutex<BTreeMap<PathBuf, u32>>,
    pub fail: Mutex<Option<String>>,
}

impl RecordingHost {
    fn check(&self) -> io::Result<()> {
        match self.fail.lock().clone() {
            Some(why) => Err(io::Error::other(why)),
            None => Ok(()),
        }
    }
}

impl HostOps for RecordingHost {
    fn mount_tmpfs(&self, path: &Path, size_bytes: Option<i64>) -> io::Result<()> {
        self.check()?;
        self.calls
            .lock()
            .push(HostCall::MountTmpfs(path.into(), size_bytes));
        self.mounted.lock().insert(path.into());
        Ok(())
    }

    fn is_mount_point(&self, path: &Path) -> io::Result<bool> {
        self.check()?;
        Ok(self.mounted.lock().contains(path))
    }

    fn mounts_under(&self, path: &Path) -> io::Result<Vec<PathBuf>> {
        self.check()?;
        let mut found: Vec<PathBuf> = self
            .mounted
            .lock()
            .iter()
            .filter(|p| p.starts_with(path))
            .cloned()
            .collect();
        found.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
        Ok(found)
    }

    fn unmount(&self, path: &Path) -> io::Result<()> {
        self.check()?;
        self.calls.lock().push(HostCall::Unmount(path.into()));
        self.mounted.lock().remove(path);
        Ok(())
    }

    fn file_kind(&self, path: &Path) -> io::Result<Option<FileKind>> {
        self.check()?;
        Ok(self.files.lock().get(path).copied())
    }

    fn create_dir_all(&self, path: &Path, mode: u32) -> io::Result<()> {
        self.check()?;
        self.calls
            .lock()
            .push(HostCall::CreateDir(path.into(), mode));
        self.files.lock().insert(path.into(), FileKind::Directory);
        Ok(())
    }

    fn create_file(&self, path: &Path, mode: u32) -> io::Result<()> {
        self.check()?;
        self.calls
            .lock()
            .push(HostCall::CreateFile(path.into(), mode));
        self.files.lock().insert(path.into(), FileKind::File);
        Ok(())
    }

    fn bind_mount(&self, source: &Path, target: &Path, read_only: bool) -> io::Result<()> {
        self.check()?;
        self.calls.lock().push(HostCall::BindMount {
            source: source.into(),
            target: target.into(),
            read_only,
        });
        self.mounted.lock().insert(target.into());
        Ok(())
    }

    fn remove_dir_all(&self, path: &Path) -> io::Result<()> {
        self.check()?;
        self.calls.lock().push(HostCall::RemoveDir(path.into()));
        self.files.lock().retain(|p, _| !p.starts_with(path));
        Ok(())
    }

    fn set_ownership(&self, path: &Path, ownership: &Ownership) -> io::Result<bool> {
        self.check()?;
        self.calls
            .lock()
            .push(HostCall::SetOwnership(path.into(), *ownership));
        Ok(true)
    }

    fn group_of(&self, path: &Path) -> io::Result<u32> {
        self.check()?;
        Ok(self.groups.lock().get(path).copied().unwrap_or(0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_escapes_are_decoded() {
        assert_eq!(unescape_octal(r"/a\040b/c"), "/a b/c");
        assert_eq!(unescape_octal(r"/plain"), "/plain");
    }

    #[test]
    fn the_real_host_tells_directories_files_and_missing_paths_apart() {
        let dir = tempfile::tempdir().unwrap();
        let host = RealHost;
        let file = dir.path().join("sub/f");
        host.create_file(&file, 0o644).unwrap();
        assert_eq!(
            host.file_kind(dir.path()).unwrap(),
            Some(FileKind::Directory)
        );
        assert_eq!(host.file_kind(&file).unwrap(), Some(FileKind::File));
        assert_eq!(host.file_kind(&dir.path().join("none")).unwrap(), None);
        let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o644);
    }

    #[test]
    fn a_directory_that_cannot_be_made_names_what_is_in_the_way() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("file");
        std::fs::write(&file, "").unwrap();
        let err = RealHost
            .create_dir_all(&file.join("a/b"), 0o755)
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            format!("mkdir {}: not a directory", file.display())
        );
        RealHost
            .create_dir_all(&dir.path().join("x/y"), 0o700)
            .unwrap();
        let mode = std::fs::metadata(dir.path().join("x/y"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o700);
    }
}
