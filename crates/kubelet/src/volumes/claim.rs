//! persistentVolumeClaim volumes on hollow nodes. Upstream's kubelet mounts the PersistentVolume
//! bound to the claim; Skiff has no volume binder or provisioner, so claims never become Bound.
//! A hollow node instead checks what it can of upstream's `getPVCExtractPV` (the claim exists
//! and is not being deleted) and gives the volume a directory under the pod's directory, like a
//! disk emptyDir: it lives as long as the pod, not as long as the claim. Real nodes keep
//! refusing these volumes (`docs/compatibility.md`).

use std::path::Path;

use crate::api::PodApi;

/// The plugin's directory name under `volumes/` (Skiff's own: there is no PersistentVolume
/// whose plugin would name it).
pub const PLUGIN: &str = "skiff.io~claim";

/// How a kubelet treats persistentVolumeClaim volumes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Claims {
    /// They fail to set up (`skiff does not support persistentVolumeClaim volumes`); a pod
    /// using one never starts. Real nodes.
    #[default]
    Unsupported,
    /// An existing claim that is not being deleted gets a directory under the pod's directory,
    /// bound or not. Hollow nodes.
    NodeLocal,
}

/// Checks the claim as upstream's volume manager does before mounting (its messages, less the
/// binding checks), then creates the volume's directory at `dir`.
pub async fn set_up(
    api: &dyn PodApi,
    namespace: &str,
    claim: &str,
    dir: &Path,
) -> Result<(), String> {
    let failed = |why: String| format!("error processing PVC {namespace}/{claim}: {why}");
    match api.claim_deleting(namespace, claim).await {
        Err(e) => return Err(failed(format!("failed to fetch PVC from API server: {e}"))),
        Ok(None) => {
            return Err(failed(format!(
                "failed to fetch PVC from API server: persistentvolumeclaims \"{claim}\" not found"
            )));
        }
        Ok(Some(true)) => return Err(failed("PVC is being deleted".into())),
        Ok(Some(false)) => {}
    }
    std::fs::create_dir_all(dir).map_err(|e| format!("mkdir {}: {e}", dir.display()))
}
