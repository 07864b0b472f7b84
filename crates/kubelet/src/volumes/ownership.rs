//! A pod's `fsGroup` applied to a volume, as upstream's `SetVolumeOwnership`
//! (`pkg/volume/volume_linux.go`): every file and directory of the volume gets the group
//! (its owner kept) and the group permissions of the mask, `rw-rw----` for a writable volume
//! and `r--r-----` for a read-only one, directories also the setgid bit (files made later
//! inherit the group) and `--x--x---`. Symlinks are left alone (a chmod would reach their
//! target). The walk visits children before their directory, so the root changes last.
//!
//! Which volumes get it, and when, is upstream's per plugin ([`super::VolumeManager`]):
//! emptyDir once when it is made; configMap, secret, downwardAPI and projected (read-only
//! volumes) each time their files are written; a `local` persistent volume when first mounted
//! read-write, honouring `fsGroupChangePolicy: OnRootMismatch` (no walk when the root already
//! has the group, the mask and setgid); never hostPath volumes, persistent or not.
//!
//! A projected service account token also gets an owner: the user every container of the pod
//! runs as, when they all run as one ([`pod_fs_user`]).

use std::io;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use k8s_openapi::api::core::v1::Pod;

/// Group read and write for both owner and group (upstream's `rwMask`).
pub const RW_MASK: u32 = 0o660;
/// Read for owner and group (upstream's `roMask`).
pub const RO_MASK: u32 = 0o440;
/// What directories add to the mask: search for owner and group (upstream's `execMask`).
pub const EXEC_MASK: u32 = 0o110;
const SETGID: u32 = 0o2000;

/// The pod's `fsGroupChangePolicy`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ChangePolicy {
    /// Walk the whole volume each time it is set up (upstream's default).
    #[default]
    Always,
    /// Walk only when the volume's root lacks the group, the mask or setgid.
    OnRootMismatch,
}

/// The ownership change for one volume.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ownership {
    /// The pod's `fsGroup`.
    pub group: u32,
    /// The volume is read-only: the read-only mask.
    pub read_only: bool,
    pub policy: ChangePolicy,
}

impl Ownership {
    /// The permission bits a regular file gains.
    pub fn file_mask(&self) -> u32 {
        if self.read_only { RO_MASK } else { RW_MASK }
    }

    /// The permission bits a directory gains.
    pub fn dir_mask(&self) -> u32 {
        self.file_mask() | EXEC_MASK | SETGID
    }
}

/// The pod's `fsGroup` and `fsGroupChangePolicy`, if it sets an fsGroup. An fsGroup out of
/// a gid's range (validation allows 0 to 2147483647) is refused.
pub fn pod_fs_group(pod: &Pod) -> Result<Option<(u32, ChangePolicy)>, String> {
    let Some(sc) = pod.spec.as_ref().and_then(|s| s.security_context.as_ref()) else {
        return Ok(None);
    };
    let Some(group) = sc.fs_group else {
        return Ok(None);
    };
    let group = u32::try_from(group).map_err(|_| format!("fsGroup {group} is not a valid gid"))?;
    let policy = match sc.fs_group_change_policy.as_deref() {
        Some("OnRootMismatch") => ChangePolicy::OnRootMismatch,
        _ => ChangePolicy::Always,
    };
    Ok(Some((group, policy)))
}

/// The user every init and app container of the pod runs as by its securityContext (its own
/// `runAsUser`, else the pod's), if each sets one and they are all the same; ephemeral
/// containers are not counted (upstream's `FsUserFrom`). A user out of a uid's range counts as
/// none.
pub fn pod_fs_user(pod: &Pod) -> Option<u32> {
    let spec = pod.spec.as_ref()?;
    let pod_user = spec.security_context.as_ref().and_then(|s| s.run_as_user);
    let mut users = spec
        .init_containers
        .iter()
        .flatten()
        .chain(&spec.containers)
        .map(|c| {
            c.security_context
                .as_ref()
                .and_then(|s| s.run_as_user)
                .or(pod_user)
        });
    let first = users.next()??;
    if !users.all(|u| u == Some(first)) {
        return None;
    }
    u32::try_from(first).ok()
}

/// Whether the walk is needed under `OnRootMismatch` (upstream's `requiresPermissionChange`):
/// the root is unreadable, not a directory, of another group, lacks a bit of the mask (with
/// the exec bits) or the setgid bit.
pub fn root_mismatches(root: &Path, ownership: &Ownership) -> bool {
    let Ok(meta) = std::fs::metadata(root) else {
        return true;
    };
    if meta.gid() != ownership.group || !meta.is_dir() {
        return true;
    }
    let want = ownership.file_mask() | EXEC_MASK;
    let mode = meta.permissions().mode();
    mode & want != want || mode & SETGID == 0
}

/// Applies the ownership to `root` and everything below it; returns false when
/// `OnRootMismatch` found nothing to do. A failed chown or chmod is logged and the walk goes
/// on (as upstream's); a directory that cannot be read fails it.
pub fn apply(root: &Path, ownership: &Ownership) -> io::Result<bool> {
    if ownership.policy == ChangePolicy::OnRootMismatch && !root_mismatches(root, ownership) {
        return Ok(false);
    }
    let meta = std::fs::symlink_metadata(root)?;
    walk(root, &meta, ownership)?;
    Ok(true)
}

fn walk(path: &Path, meta: &std::fs::Metadata, ownership: &Ownership) -> io::Result<()> {
    if meta.is_dir() {
        for entry in std::fs::read_dir(path)? {
            let child = entry?.path();
            let child_meta = std::fs::symlink_metadata(&child)?;
            walk(&child, &child_meta, ownership)?;
        }
    }
    change(path, meta, ownership);
    Ok(())
}

fn change(path: &Path, meta: &std::fs::Metadata, ownership: &Ownership) {
    if meta.file_type().is_symlink() {
        return;
    }
    if let Err(e) = std::os::unix::fs::lchown(path, None, Some(ownership.group)) {
        tracing::warn!(path = %path.display(), error = %e, "chown for fsGroup");
    }
    let mask = if meta.is_dir() {
        ownership.dir_mask()
    } else {
        ownership.file_mask()
    };
    let mode = meta.permissions().mode() & 0o7777;
    if mode | mask != mode
        && let Err(e) = std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode | mask))
    {
        tracing::warn!(path = %path.display(), error = %e, "chmod for fsGroup");
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::symlink;

    use super::*;

    fn group_and_mode(path: &Path) -> (u32, u32) {
        let m = std::fs::symlink_metadata(path).unwrap();
        (m.gid(), m.permissions().mode() & 0o7777)
    }

    fn set_mode(path: &Path, mode: u32) {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    /// `root/` 0755 with `a` 0644, `sub/` 0700 with `b` 0600, and `link` → `a`.
    fn volume() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        set_mode(root, 0o755);
        std::fs::write(root.join("a"), "a").unwrap();
        set_mode(&root.join("a"), 0o644);
        std::fs::create_dir(root.join("sub")).unwrap();
        set_mode(&root.join("sub"), 0o700);
        std::fs::write(root.join("sub/b"), "b").unwrap();
        set_mode(&root.join("sub/b"), 0o600);
        symlink("a", root.join("link")).unwrap();
        dir
    }

    #[test]
    fn the_fs_user_is_the_one_user_every_container_runs_as() {
        let fs_user = |pod_sc: serde_json::Value, inits: serde_json::Value| {
            let pod: Pod = serde_json::from_value(serde_json::json!({
                "metadata": {"name": "web"},
                "spec": {"securityContext": pod_sc, "initContainers": inits,
                         "containers": [{"name": "a"},
                                        {"name": "b", "securityContext": {"runAsUser": 1000}}],
                         "ephemeralContainers": [{"name": "debug",
                                                  "securityContext": {"runAsUser": 0}}]}}))
            .unwrap();
            pod_fs_user(&pod)
        };
        let no_inits = serde_json::json!([]);
        assert_eq!(
            fs_user(serde_json::json!({"runAsUser": 1000}), no_inits.clone()),
            Some(1000)
        );
        assert_eq!(
            fs_user(serde_json::json!({}), no_inits.clone()),
            None,
            "a container without a user"
        );
        assert_eq!(
            fs_user(serde_json::json!({"runAsUser": 2000}), no_inits),
            None,
            "two users"
        );
        let init = serde_json::json!([{"name": "i", "securityContext": {"runAsUser": 3000}}]);
        assert_eq!(
            fs_user(serde_json::json!({"runAsUser": 1000}), init),
            None,
            "init containers count"
        );
    }

    fn ownership(read_only: bool, policy: ChangePolicy) -> Ownership {
        Ownership {
            group: 2000,
            read_only,
            policy,
        }
    }

    #[test]
    fn every_file_and_directory_gets_the_group_and_the_read_write_mask_with_setgid_dirs() {
        let dir = volume();
        let root = dir.path();
        let owner = std::fs::metadata(root.join("a")).unwrap().uid();
        assert!(apply(root, &ownership(false, ChangePolicy::Always)).unwrap());
        assert_eq!(group_and_mode(root), (2000, 0o2775));
        assert_eq!(group_and_mode(&root.join("a")), (2000, 0o664));
        assert_eq!(group_and_mode(&root.join("sub")), (2000, 0o2770));
        assert_eq!(group_and_mode(&root.join("sub/b")), (2000, 0o660));
        // the owner is kept; the symlink itself is left alone
        assert_eq!(std::fs::metadata(root.join("a")).unwrap().uid(), owner);
        assert_ne!(
            std::fs::symlink_metadata(root.join("link")).unwrap().gid(),
            2000
        );
    }

    #[test]
    fn a_read_only_volume_gets_the_read_only_mask() {
        let dir = volume();
        let root = dir.path();
        apply(root, &ownership(true, ChangePolicy::Always)).unwrap();
        assert_eq!(group_and_mode(root), (2000, 0o2755));
        assert_eq!(group_and_mode(&root.join("a")), (2000, 0o644));
        assert_eq!(group_and_mode(&root.join("sub")), (2000, 0o2750));
        // a token written 0600 becomes 0640, as upstream's projected volumes expect
        assert_eq!(group_and_mode(&root.join("sub/b")), (2000, 0o640));
    }

    #[test]
    fn on_root_mismatch_leaves_the_volume_alone_when_the_root_matches() {
        let dir = volume();
        let root = dir.path();
        let policy = ChangePolicy::OnRootMismatch;
        // the root matches: group, rw mask with exec, setgid; an inner file that does not
        // match is left as it is
        let inner = group_and_mode(&root.join("sub/b"));
        std::os::unix::fs::lchown(root, None, Some(2000)).unwrap();
        set_mode(root, 0o2770);
        assert!(!root_mismatches(root, &ownership(false, policy)));
        assert!(!apply(root, &ownership(false, policy)).unwrap());
        assert_eq!(group_and_mode(&root.join("sub/b")), inner);
        assert_ne!(inner.0, 2000);
        // without setgid the root mismatches and the whole volume is walked
        set_mode(root, 0o770);
        assert!(apply(root, &ownership(false, policy)).unwrap());
        assert_eq!(group_and_mode(&root.join("sub/b")), (2000, 0o660));
        assert_eq!(group_and_mode(root), (2000, 0o2770));
    }

    #[test]
    fn on_root_mismatch_walks_when_the_group_or_the_mask_differs() {
        let dir = volume();
        let root = dir.path();
        set_mode(root, 0o2770);
        let rw = ownership(false, ChangePolicy::OnRootMismatch);
        // another group
        assert!(root_mismatches(root, &rw));
        std::os::unix::fs::lchown(root, None, Some(2000)).unwrap();
        assert!(!root_mismatches(root, &rw));
        // no group write: a read-write volume mismatches, a read-only one does not
        set_mode(root, 0o2750);
        assert!(root_mismatches(root, &rw));
        assert!(!root_mismatches(
            root,
            &ownership(true, ChangePolicy::OnRootMismatch)
        ));
        // a root that is not a directory always mismatches
        assert!(root_mismatches(&root.join("a"), &rw));
    }

    #[test]
    fn the_pods_fs_group_and_policy_are_read_from_its_security_context() {
        let pod = |sc: serde_json::Value| -> Pod {
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": "p"},
                "spec": {"containers": [{"name": "c"}], "securityContext": sc},
            }))
            .unwrap()
        };
        assert_eq!(pod_fs_group(&pod(serde_json::json!({}))).unwrap(), None);
        assert_eq!(
            pod_fs_group(&pod(serde_json::json!({"fsGroup": 2000}))).unwrap(),
            Some((2000, ChangePolicy::Always))
        );
        assert_eq!(
            pod_fs_group(&pod(serde_json::json!(
                {"fsGroup": 7, "fsGroupChangePolicy": "OnRootMismatch"})))
            .unwrap(),
            Some((7, ChangePolicy::OnRootMismatch))
        );
        assert!(pod_fs_group(&pod(serde_json::json!({"fsGroup": -1}))).is_err());
    }
}
