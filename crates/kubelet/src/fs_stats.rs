//! The size, free space and inodes of the filesystem holding a path (`statvfs`), for the
//! node's capacity, eviction signals (`nodefs.*`, `imagefs.*`) and image garbage collection.

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
}
