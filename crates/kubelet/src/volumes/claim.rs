//! persistentVolumeClaim volumes, and generic ephemeral volumes, which use their claim
//! `<pod>-<volume>` in the same way once the claim is checked to be the pod's own (upstream's
//! desired-state populator, `ephemeral.VolumeIsForPod`). A real node resolves the claim to its bound PersistentVolume
//! as upstream's desired-state populator does (`getPVCExtractPV`, `getPVSpec`, with their
//! messages) and mounts the volume's host directory: a `hostPath` volume is its path itself
//! (after the hostPath type checks; a local-path volume's directory is created `0777`, as k3s's
//! provisioner's helper pod creates it), a `local` volume is bind-mounted at
//! `volumes/kubernetes.io~local-volume/<volume>` in the pod's directory. Other volume sources
//! are refused by name. A volume's `pv.beta.kubernetes.io/gid` annotation is kept with its
//! mount: the pod's processes get that group ([`extra_supplemental_groups`]).
//!
//! A hollow node records instead of making: it checks that the claim exists and is not being
//! deleted, bound or not, and gives the volume a directory under the pod's directory, like a
//! disk emptyDir (`docs/compatibility.md`).

use std::collections::BTreeSet;
use std::path::Path;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod, Volume};
use skiff_component_helpers::ephemeral;
use skiff_component_helpers::local_path::PROVISIONER;

use crate::api::PodApi;

/// The plugin directory of a hollow node's claim volumes (Skiff's own name).
pub const PLUGIN: &str = "skiff.io~claim";
/// The plugin directory of bind-mounted `local` volumes (upstream's).
pub const LOCAL_PLUGIN: &str = "kubernetes.io~local-volume";
/// The finalizer that lets a pod start on a claim being deleted (upstream's
/// `PVCProtectionFinalizer`): the claim stays until its pods are gone.
pub const PVC_PROTECTION: &str = "kubernetes.io/pvc-protection";
/// The mode of a local-path volume's directory (k3s's helper pod runs `mkdir -m 0777`).
pub const LOCAL_PATH_MODE: u32 = 0o777;
/// The annotation of a PersistentVolume whose data belongs to a group: every process of a pod
/// that mounts the volume gets the group (upstream's `VolumeGidAnnotationKey`).
pub const VOLUME_GID_ANNOTATION: &str = "pv.beta.kubernetes.io/gid";

/// How a kubelet treats persistentVolumeClaim volumes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Claims {
    /// The claim's bound volume is mounted (hostPath and local volumes); a claim that is not
    /// bound fails to set up and is retried. Real nodes.
    #[default]
    Bound,
    /// An existing claim that is not being deleted gets a directory under the pod's directory,
    /// bound or not. Hollow nodes.
    NodeLocal,
}

/// Where a bound volume's data is on this host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// A `hostPath` volume: the path, checked (and created) as its `type` says.
    HostPath { path: String, type_: Option<String> },
    /// A `local` volume: the path, which must exist, bind-mounted into the pod's directory.
    Local { path: String },
}

/// A claim resolved to its volume.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    /// The PersistentVolume's name.
    pub volume: String,
    pub source: Source,
    /// The pod's volume source says `readOnly`: every container mounts it read-only.
    pub read_only: bool,
    /// Skiff's local-path provisioner made the volume: its directory is created `0777`.
    pub local_path: bool,
    /// The volume's [`VOLUME_GID_ANNOTATION`], as written.
    pub gid: Option<String>,
}

/// The claim a pod's volume uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimUse {
    /// The claim's name.
    pub name: String,
    /// The volume source says `readOnly` (a generic ephemeral volume never does).
    pub read_only: bool,
    /// A generic ephemeral volume's claim: the pod must control it.
    pub ephemeral: bool,
}

/// The claim the volume uses: a persistentVolumeClaim volume's, or a generic ephemeral
/// volume's `<pod>-<volume>`; None for other volumes.
pub fn claim_use(pod: &Pod, volume: &Volume) -> Option<ClaimUse> {
    if let Some(source) = &volume.persistent_volume_claim {
        return Some(ClaimUse {
            name: source.claim_name.clone(),
            read_only: source.read_only == Some(true),
            ephemeral: false,
        });
    }
    volume.ephemeral.as_ref().map(|_| ClaimUse {
        name: ephemeral::volume_claim_name(pod, volume),
        read_only: false,
        ephemeral: true,
    })
}

fn is_deleting_unprotected(claim: &PersistentVolumeClaim) -> bool {
    claim.metadata.deletion_timestamp.is_some()
        && !claim
            .metadata
            .finalizers
            .iter()
            .flatten()
            .any(|f| f == PVC_PROTECTION)
}

/// The claim's volume name and uid, if it may be mounted (upstream's `getPVCExtractPV`: a
/// claim being deleted without its protection finalizer, or not bound, may not).
pub fn check_claim(
    name: &str,
    claim: Option<&PersistentVolumeClaim>,
) -> Result<(String, String), String> {
    let Some(claim) = claim else {
        return Err(format!(
            "failed to fetch PVC from API server: persistentvolumeclaims \"{name}\" not found"
        ));
    };
    if is_deleting_unprotected(claim) {
        return Err("PVC is being deleted".into());
    }
    let phase = claim.status.as_ref().and_then(|s| s.phase.as_deref());
    if phase != Some("Bound") {
        return Err("PVC is not bound".into());
    }
    let volume = claim
        .spec
        .as_ref()
        .and_then(|s| s.volume_name.clone())
        .unwrap_or_default();
    if volume.is_empty() {
        return Err("PVC has empty pvc.Spec.VolumeName".into());
    }
    Ok((volume, claim.metadata.uid.clone().unwrap_or_default()))
}

/// The volume `name` bound to the claim of uid `claim_uid`, as upstream's `getPVSpec` checks
/// it, and where its data is.
pub fn check_volume(
    name: &str,
    volume: Option<&PersistentVolume>,
    claim_uid: &str,
    read_only: bool,
) -> Result<Resolved, String> {
    let Some(volume) = volume else {
        return Err(format!(
            "failed to fetch PV {name} from API server: persistentvolumes \"{name}\" not found"
        ));
    };
    let spec = volume.spec.clone().unwrap_or_default();
    let Some(claim_ref) = &spec.claim_ref else {
        return Err(format!(
            "found PV object {name} but it has a nil pv.Spec.ClaimRef indicating it is not yet bound to the claim"
        ));
    };
    let bound_uid = claim_ref.uid.as_deref().unwrap_or("");
    if bound_uid != claim_uid {
        return Err(format!(
            "found PV object {name} but its pv.Spec.ClaimRef.UID {bound_uid} does not point to claim.UID {claim_uid}"
        ));
    }
    if spec.volume_mode.as_deref() == Some("Block") {
        return Err(format!(
            "skiff does not support block volumes (persistentvolume {name})"
        ));
    }
    let source = if let Some(h) = spec.host_path {
        Source::HostPath {
            path: h.path,
            type_: h.type_,
        }
    } else if let Some(l) = spec.local {
        Source::Local { path: l.path }
    } else {
        return Err(format!(
            "skiff mounts only hostPath and local persistent volumes, not persistentvolume {name}'s"
        ));
    };
    let annotation = |key: &str| volume.metadata.annotations.as_ref()?.get(key).cloned();
    let local_path = annotation(skiff_component_helpers::volume::ANN_DYNAMICALLY_PROVISIONED)
        .is_some_and(|p| p == PROVISIONER);
    Ok(Resolved {
        volume: name.into(),
        source,
        read_only,
        local_path,
        gid: annotation(VOLUME_GID_ANNOTATION),
    })
}

/// The groups the pod's mounted volumes name in their [`VOLUME_GID_ANNOTATION`] that its
/// `supplementalGroups` do not already have, in the order of their text, each once; a value
/// that is not a number is ignored (upstream's `GetExtraSupplementalGroupsForPod`).
pub fn extra_supplemental_groups<'a>(
    pod: &Pod,
    gids: impl IntoIterator<Item = &'a str>,
) -> Vec<i64> {
    let requested = pod
        .spec
        .as_ref()
        .and_then(|s| s.security_context.as_ref())
        .and_then(|s| s.supplemental_groups.as_ref());
    gids.into_iter()
        .collect::<BTreeSet<&str>>()
        .into_iter()
        .filter_map(|gid| gid.parse::<i64>().ok())
        .filter(|gid| !requested.is_some_and(|r| r.contains(gid)))
        .collect()
}

/// Resolves the pod's claim volume through the API server; an error is upstream's message
/// (`error processing PVC <namespace>/<claim>: …`, or `PVC … was not created for pod …` for an
/// ephemeral volume's claim the pod does not control).
pub async fn resolve(
    api: &dyn PodApi,
    pod: &Pod,
    namespace: &str,
    used: &ClaimUse,
) -> Result<Resolved, String> {
    let name = &used.name;
    let failed = |why: String| format!("error processing PVC {namespace}/{name}: {why}");
    let claim = api.claim(namespace, name).await.map_err(|e| {
        failed(format!(
            "failed to fetch PVC from API server: {}",
            e.api_message()
        ))
    })?;
    let (volume_name, uid) = check_claim(name, claim.as_ref()).map_err(failed)?;
    if used.ephemeral
        && let Some(claim) = &claim
    {
        ephemeral::volume_is_for_pod(pod, claim)?;
    }
    let volume = api.volume(&volume_name).await.map_err(|e| {
        failed(format!(
            "failed to fetch PV {volume_name} from API server: {}",
            e.api_message()
        ))
    })?;
    check_volume(&volume_name, volume.as_ref(), &uid, used.read_only).map_err(failed)
}

/// A hollow node's claim volume: checks the claim as upstream's volume manager does before
/// mounting (its messages, less the binding checks; an ephemeral volume's claim must be the
/// pod's), then creates the directory at `dir`.
pub async fn node_local(
    api: &dyn PodApi,
    pod: &Pod,
    namespace: &str,
    used: &ClaimUse,
    dir: &Path,
) -> Result<(), String> {
    let claim = &used.name;
    let failed = |why: String| format!("error processing PVC {namespace}/{claim}: {why}");
    let found = api.claim(namespace, claim).await.map_err(|e| {
        failed(format!(
            "failed to fetch PVC from API server: {}",
            e.api_message()
        ))
    })?;
    match found {
        None => {
            return Err(failed(format!(
                "failed to fetch PVC from API server: persistentvolumeclaims \"{claim}\" not found"
            )));
        }
        Some(c) if is_deleting_unprotected(&c) => {
            return Err(failed("PVC is being deleted".into()));
        }
        Some(c) if used.ephemeral => ephemeral::volume_is_for_pod(pod, &c)?,
        Some(_) => {}
    }
    std::fs::create_dir_all(dir).map_err(|e| format!("mkdir {}: {e}", dir.display()))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn claim(v: serde_json::Value) -> PersistentVolumeClaim {
        serde_json::from_value(v).unwrap()
    }

    fn volume(v: serde_json::Value) -> PersistentVolume {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn a_claim_is_mountable_once_bound_with_upstreams_messages_until_then() {
        assert_eq!(
            check_claim("data", None).unwrap_err(),
            "failed to fetch PVC from API server: persistentvolumeclaims \"data\" not found"
        );
        let pending = claim(json!({"metadata": {"name": "data", "uid": "u"},
                                   "status": {"phase": "Pending"}}));
        assert_eq!(
            check_claim("data", Some(&pending)).unwrap_err(),
            "PVC is not bound"
        );
        let no_name = claim(json!({"metadata": {"name": "data", "uid": "u"},
                                   "status": {"phase": "Bound"}}));
        assert_eq!(
            check_claim("data", Some(&no_name)).unwrap_err(),
            "PVC has empty pvc.Spec.VolumeName"
        );
        let bound = json!({"metadata": {"name": "data", "uid": "u"},
                           "spec": {"volumeName": "pv-1"}, "status": {"phase": "Bound"}});
        assert_eq!(
            check_claim("data", Some(&claim(bound.clone()))).unwrap(),
            ("pv-1".to_string(), "u".to_string())
        );
        // being deleted: refused unless pvc-protection holds it for its pods
        let mut deleting = bound.clone();
        deleting["metadata"]["deletionTimestamp"] = json!("2024-01-01T00:00:00Z");
        assert_eq!(
            check_claim("data", Some(&claim(deleting.clone()))).unwrap_err(),
            "PVC is being deleted"
        );
        deleting["metadata"]["finalizers"] = json!([PVC_PROTECTION]);
        assert!(check_claim("data", Some(&claim(deleting))).is_ok());
    }

    #[test]
    fn a_volume_must_be_bound_to_this_claim_and_be_host_path_or_local() {
        assert_eq!(
            check_volume("pv-1", None, "u", false).unwrap_err(),
            "failed to fetch PV pv-1 from API server: persistentvolumes \"pv-1\" not found"
        );
        let unbound = volume(json!({"metadata": {"name": "pv-1"},
                                    "spec": {"hostPath": {"path": "/srv"}}}));
        assert_eq!(
            check_volume("pv-1", Some(&unbound), "u", false).unwrap_err(),
            "found PV object pv-1 but it has a nil pv.Spec.ClaimRef indicating it is not yet bound to the claim"
        );
        let other = volume(json!({"metadata": {"name": "pv-1"},
            "spec": {"claimRef": {"uid": "x"}, "hostPath": {"path": "/srv"}}}));
        assert_eq!(
            check_volume("pv-1", Some(&other), "u", false).unwrap_err(),
            "found PV object pv-1 but its pv.Spec.ClaimRef.UID x does not point to claim.UID u"
        );
        let nfs = volume(json!({"metadata": {"name": "pv-1"},
            "spec": {"claimRef": {"uid": "u"}, "nfs": {"server": "s", "path": "/"}}}));
        assert!(
            check_volume("pv-1", Some(&nfs), "u", false)
                .unwrap_err()
                .contains("only hostPath and local")
        );
        let provisioned = volume(json!({
            "metadata": {"name": "pv-1",
                         "annotations": {"pv.kubernetes.io/provisioned-by": PROVISIONER}},
            "spec": {"claimRef": {"uid": "u"},
                     "hostPath": {"path": "/d/storage/pv-1_ns_data", "type": "DirectoryOrCreate"}}}));
        assert_eq!(
            check_volume("pv-1", Some(&provisioned), "u", true).unwrap(),
            Resolved {
                volume: "pv-1".into(),
                source: Source::HostPath {
                    path: "/d/storage/pv-1_ns_data".into(),
                    type_: Some("DirectoryOrCreate".into()),
                },
                read_only: true,
                local_path: true,
                gid: None,
            }
        );
        let local = volume(json!({"metadata": {"name": "pv-2"},
            "spec": {"claimRef": {"uid": "u"}, "local": {"path": "/mnt/disk"}}}));
        let resolved = check_volume("pv-2", Some(&local), "u", false).unwrap();
        assert_eq!(
            resolved.source,
            Source::Local {
                path: "/mnt/disk".into()
            }
        );
        assert!(!resolved.local_path && !resolved.read_only);
        let grouped = volume(json!({
            "metadata": {"name": "pv-3", "annotations": {VOLUME_GID_ANNOTATION: "1234"}},
            "spec": {"claimRef": {"uid": "u"}, "local": {"path": "/mnt/disk"}}}));
        let resolved = check_volume("pv-3", Some(&grouped), "u", false).unwrap();
        assert_eq!(resolved.gid.as_deref(), Some("1234"));
    }

    #[test]
    fn volume_groups_are_added_once_in_text_order_unless_the_pod_asks_for_them() {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "web"},
            "spec": {"securityContext": {"fsGroup": 10, "supplementalGroups": [7]},
                     "containers": [{"name": "c"}]}}))
        .unwrap();
        assert_eq!(
            extra_supplemental_groups(&pod, ["9", "10", "7", "nine", "9", "-1"]),
            [-1, 10, 9],
            "sorted as text, duplicates and non-numbers dropped, 7 already requested; \
             the fsGroup is no reason to leave a volume's group out"
        );
        let bare: Pod = serde_json::from_value(json!({
            "metadata": {"name": "web"}, "spec": {"containers": [{"name": "c"}]}}))
        .unwrap();
        assert_eq!(extra_supplemental_groups(&bare, ["5"]), [5]);
        assert!(extra_supplemental_groups(&bare, []).is_empty());
    }
}
