//! The size, free space and inodes of the filesystem holding a path (`statvfs`), for the
//! node's capacity, eviction signals (`nodefs.*`, `imagefs.*`), image garbage collection and
//! the Summary API; and the space a directory's files take (`du`), for logs and volumes.

use std::path::Path;

/// A filesystem's figures, as upstream's `FsStats` reports them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FsStats {
    pub capacity_bytes: u64,
    /// Free to unprivileged users (`f_bavail`), as cAdvisor's `Available`.
    pub available_bytes: u64,
    pub inodes: u64,
    pub inodes_free: u64,
}

impl FsStats {
    /// Bytes in use (capacity less the blocks free to anyone).
    pub fn used_bytes(&self) -> u64 {
        self.capacity_bytes.saturating_sub(self.available_bytes)
    }
}

/// The figures of the filesystem holding `path`.
pub fn fs_stats(path: &Path) -> std::io::Result<FsStats> {
    let s = rustix::fs::statvfs(path)?;
    Ok(FsStats {
        capacity_bytes: s.f_blocks.saturating_mul(s.f_frsize),
        available_bytes: s.f_bavail.saturating_mul(s.f_frsize),
        inodes: s.f_files,
        inodes_free: s.f_ffree,
    })
}

/// The disk space the files under `dir` take (their blocks, as `du`); 0 when it does not exist.
pub fn disk_usage(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let mut total = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let Ok(meta) = entry.metadata() else { continue };
            if meta.is_dir() {
                stack.push(entry.path());
            } else {
                total += meta.blocks() * 512;
            }
        }
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_filesystem_of_a_directory_has_a_size_and_room() {
        let dir = tempfile::tempdir().unwrap();
        let s = fs_stats(dir.path()).unwrap();
        assert!(
            s.capacity_bytes > 0 && s.available_bytes <= s.capacity_bytes,
            "{s:?}"
        );
        assert!(s.inodes_free <= s.inodes, "{s:?}");
        assert!(fs_stats(&dir.path().join("missing")).is_err());
    }

    #[test]
    fn a_directorys_disk_usage_counts_the_blocks_of_its_files() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("c")).unwrap();
        std::fs::write(dir.path().join("c/0.log"), vec![b'x'; 10_000]).unwrap();
        assert!(disk_usage(dir.path()) >= 10_000);
        assert_eq!(disk_usage(&dir.path().join("missing")), 0);
    }
}
