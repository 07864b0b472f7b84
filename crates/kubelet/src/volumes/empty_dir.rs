//! emptyDir volumes: a directory under the pod's directory, world-writable as upstream makes it;
//! `medium: Memory` mounts a tmpfs there, of `sizeLimit` when given. The pod's fsGroup is
//! applied once, when the volume is made ([`super::ownership`]).

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use k8s_openapi::api::core::v1::EmptyDirVolumeSource;
use skiff_apimachinery::quantity::Quantity;

use super::host::HostOps;

/// The plugin's directory name under `volumes/`.
pub const PLUGIN: &str = "kubernetes.io~empty-dir";

/// The mode of an emptyDir's directory (upstream's `perm`).
const MODE: u32 = 0o777;

/// Creates (and for `medium: Memory`, mounts) the volume at `dir`; returns whether it was made
/// now (the directory created, or the tmpfs mounted), which is when its fsGroup is applied.
pub fn set_up(
    dir: &Path,
    source: &EmptyDirVolumeSource,
    host: &dyn HostOps,
) -> Result<bool, String> {
    let mut made = !dir.exists();
    std::fs::create_dir_all(dir).map_err(|e| format!("mkdir {}: {e}", dir.display()))?;
    match source.medium.as_deref().unwrap_or("") {
        "" => {}
        "Memory" => {
            let mounted = host.is_mount_point(dir).map_err(|e| e.to_string())?;
            if !mounted {
                made = true;
                let size = match &source.size_limit {
                    Some(q) => Some(Quantity::parse(&q.0).map_err(|e| e.to_string())?.value()),
                    None => None,
                };
                host.mount_tmpfs(dir, size)
                    .map_err(|e| format!("mounting tmpfs at {}: {e}", dir.display()))?;
            }
        }
        other => return Err(format!("unsupported emptyDir medium {other:?}")),
    }
    // only when the permission bits differ, as upstream's `setupDir`: the setgid bit an
    // fsGroup gave the directory stays
    let mode = std::fs::metadata(dir)
        .map_err(|e| format!("stat {}: {e}", dir.display()))?
        .permissions()
        .mode();
    if mode & 0o777 != MODE {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(MODE))
            .map_err(|e| format!("chmod {}: {e}", dir.display()))?;
    }
    Ok(made)
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity as ApiQuantity;

    use super::*;
    use crate::volumes::host::{HostCall, RecordingHost};

    #[test]
    fn a_disk_empty_dir_is_a_world_writable_directory_without_mounts() {
        let dir = tempfile::tempdir().unwrap();
        let vol = dir.path().join("cache");
        let host = RecordingHost::default();
        assert!(set_up(&vol, &EmptyDirVolumeSource::default(), &host).unwrap());
        let mode = std::fs::metadata(&vol).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o777);
        assert!(host.calls.lock().is_empty());
        // set up again: not made now, and the setgid bit of an fsGroup is kept
        std::fs::set_permissions(&vol, std::fs::Permissions::from_mode(0o2777)).unwrap();
        assert!(!set_up(&vol, &EmptyDirVolumeSource::default(), &host).unwrap());
        let mode = std::fs::metadata(&vol).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode, 0o2777);
    }

    #[test]
    fn a_memory_empty_dir_is_a_tmpfs_of_its_size_limit_mounted_once() {
        let dir = tempfile::tempdir().unwrap();
        let host = RecordingHost::default();
        let source = EmptyDirVolumeSource {
            medium: Some("Memory".into()),
            size_limit: Some(ApiQuantity("64Mi".into())),
        };
        // the directory exists; mounting the tmpfs makes the volume
        assert!(set_up(dir.path(), &source, &host).unwrap());
        assert!(!set_up(dir.path(), &source, &host).unwrap());
        assert_eq!(
            *host.calls.lock(),
            [HostCall::MountTmpfs(dir.path().into(), Some(64 << 20))]
        );
    }
}
