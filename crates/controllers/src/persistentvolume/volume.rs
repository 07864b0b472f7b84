//! A volume's sync: `Available` until claimed, `Bound` with its claim, `Released` once the
//! claim is gone, then its reclaim policy (with no in-tree plugin to delete or recycle).

use k8s_openapi::api::core::v1::PersistentVolume;
use kube::{Resource, ResourceExt};
use skiff_component_helpers::volume::{self as helpers, ANN_DYNAMICALLY_PROVISIONED};

use super::Cluster;
use super::binding::{unbind_volume, update_volume_phase, update_volume_phase_with_event};
use super::sync::{
    ANN_MIGRATED_TO, Result, claim_ref, has_annotation, reclaim_policy, volume_name_of,
    volume_phase,
};
use crate::events::Note;

/// Upstream's `syncVolume`.
pub async fn sync_volume(c: &dyn Cluster, volume: &PersistentVolume) -> Result<()> {
    let Some(reference) = claim_ref(volume) else {
        update_volume_phase(c, volume, "Available", "").await?;
        return Ok(());
    };
    if reference.uid.as_deref().unwrap_or("").is_empty() {
        // pre-bound to a claim that is not bound yet: the claim's sync binds it
        update_volume_phase(c, volume, "Available", "").await?;
        return Ok(());
    }
    let namespace = reference.namespace.clone().unwrap_or_default();
    let name = reference.name.clone().unwrap_or_default();
    let mut claim = c.claim(&namespace, &name).map(|c| c.as_ref().clone());
    if claim.is_none() && !matches!(volume_phase(volume), "Released" | "Failed") {
        // a claim the cache has not seen yet must not be taken for deleted
        claim = c.fetch_claim(&namespace, &name).await?;
    }
    if claim
        .as_ref()
        .is_some_and(|cl| cl.metadata.uid != reference.uid)
    {
        // the cache may hold an older claim of that name: ask the API
        claim = c
            .fetch_claim(&namespace, &name)
            .await?
            .filter(|cl| cl.metadata.uid == reference.uid);
    }
    let Some(claim) = claim else {
        let volume = if matches!(volume_phase(volume), "Released" | "Failed") {
            volume.clone()
        } else {
            update_volume_phase(c, volume, "Released", "").await?
        };
        return reclaim_volume(c, &volume).await;
    };
    let claimed = volume_name_of(&claim);
    if claimed.is_empty() {
        if helpers::volume_mode_mismatch(&claim, volume) {
            c.event(
                volume.object_ref(&()),
                Note::warning(
                    "VolumeMismatch",
                    format!(
                        "Cannot bind PersistentVolume to requested PersistentVolumeClaim {:?} due to incompatible volumeMode.",
                        claim.name_any()
                    ),
                ),
            );
            c.event(
                claim.object_ref(&()),
                Note::warning(
                    "VolumeMismatch",
                    format!(
                        "Cannot bind PersistentVolume {:?} to requested PersistentVolumeClaim due to incompatible volumeMode.",
                        volume.name_any()
                    ),
                ),
            );
            return Ok(());
        }
        // bound on the volume's side only: the claim's sync finishes it
        c.queue_claim(&namespace, &name);
        return Ok(());
    }
    if claimed == volume.name_any() {
        update_volume_phase(c, volume, "Bound", "").await?;
        return Ok(());
    }
    // the claim is bound to another volume
    if has_annotation(volume, ANN_DYNAMICALLY_PROVISIONED) && reclaim_policy(volume) == "Delete" {
        let volume = if matches!(volume_phase(volume), "Released" | "Failed") {
            volume.clone()
        } else {
            update_volume_phase(c, volume, "Released", "").await?
        };
        return reclaim_volume(c, &volume).await;
    }
    unbind_volume(c, volume).await
}

/// Whether the volume's claim is gone (or bound elsewhere): upstream's `isVolumeReleased`.
fn is_volume_released(c: &dyn Cluster, volume: &PersistentVolume) -> bool {
    let Some(r) = claim_ref(volume) else {
        return false;
    };
    if r.uid.as_deref().unwrap_or("").is_empty() {
        return false;
    }
    let claim = c.claim(
        r.namespace.as_deref().unwrap_or(""),
        r.name.as_deref().unwrap_or(""),
    );
    match claim {
        Some(claim) if claim.metadata.uid == r.uid => {
            let name = volume_name_of(&claim);
            !name.is_empty() && name != volume.name_any()
        }
        _ => true,
    }
}

/// Upstream's `reclaimVolume`, with no in-tree plugin to delete or recycle: `Retain` keeps the
/// volume `Released`; `Delete` leaves a provisioned volume to its provisioner and fails any
/// other; `Recycle` fails.
async fn reclaim_volume(c: &dyn Cluster, volume: &PersistentVolume) -> Result<()> {
    if has_annotation(volume, ANN_MIGRATED_TO) {
        return Ok(());
    }
    match reclaim_policy(volume) {
        "Retain" => Ok(()),
        "Recycle" => recycle_volume(c, volume).await,
        "Delete" => delete_volume(c, volume).await,
        _ => {
            let note = Note::warning(
                "VolumeUnknownReclaimPolicy",
                "Volume has unrecognized PersistentVolumeReclaimPolicy".into(),
            );
            update_volume_phase_with_event(c, volume, "Failed", note).await?;
            Ok(())
        }
    }
}

async fn recycle_volume(c: &dyn Cluster, volume: &PersistentVolume) -> Result<()> {
    let Some(fresh) = c.fetch_volume(&volume.name_any()).await? else {
        return Ok(());
    };
    if !is_volume_released(c, &fresh) {
        return Ok(());
    }
    let r = claim_ref(&fresh).cloned().unwrap_or_default();
    let (namespace, name) = (r.namespace.unwrap_or_default(), r.name.unwrap_or_default());
    let mut users: Vec<String> = c
        .pods_using(&namespace, &name)
        .iter()
        .filter(|p| !crate::podutil::is_terminated(p))
        .map(|p| p.name_any())
        .collect();
    users.sort();
    if !users.is_empty() && c.claim(&namespace, &name).is_none() {
        let note = Note::warning(
            "VolumeFailedRecycle",
            format!("Volume is used by pods: {}", users.join(",")),
        );
        c.event(fresh.object_ref(&()), note);
        return Ok(());
    }
    let note = Note::warning(
        "VolumeFailedRecycle",
        "No recycler plugin found for the volume!".into(),
    );
    update_volume_phase_with_event(c, &fresh, "Failed", note).await?;
    Ok(())
}

/// Why no plugin here deletes the volume, or `None` when an external provisioner does.
pub fn deleter_error(volume: &PersistentVolume) -> Option<String> {
    let provisioner = volume
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ANN_DYNAMICALLY_PROVISIONED))
        .filter(|p| !p.is_empty());
    if let Some(provisioner) = provisioner {
        if !provisioner.starts_with("kubernetes.io/") {
            return None;
        }
        return Some(format!("no volume plugin matched name: {provisioner}"));
    }
    let name = volume.name_any();
    match volume.spec.as_ref().and_then(|s| s.host_path.as_ref()) {
        Some(host_path) => {
            let path = &host_path.path;
            let in_tmp = path
                .strip_prefix("/tmp/")
                .is_some_and(|rest| !rest.is_empty());
            Some(if in_tmp {
                format!(
                    "skiff does not delete hostPath volume {name:?}: the controller manager does not touch a node's disk ({path})"
                )
            } else {
                format!("host_path deleter only supports /tmp/.+ but received provided {path}")
            })
        }
        None => Some(format!(
            "error getting deleter volume plugin for volume {name:?}: no deletable volume plugin matched"
        )),
    }
}

async fn delete_volume(c: &dyn Cluster, volume: &PersistentVolume) -> Result<()> {
    let Some(fresh) = c.fetch_volume(&volume.name_any()).await? else {
        return Ok(());
    };
    if !is_volume_released(c, &fresh) {
        return Ok(());
    }
    let Some(message) = deleter_error(&fresh) else {
        // the external provisioner that made it deletes it
        return Ok(());
    };
    let note = Note::warning("VolumeFailedDelete", message);
    update_volume_phase_with_event(c, &fresh, "Failed", note).await?;
    Ok(())
}
