//! The writes of a binding and of phase changes (upstream's `bind`, `updateClaimStatus`,
//! `updateVolumePhase`, `unbindVolume`): each writes only when something changes, and a phase
//! changes with at most one event.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    PersistentVolume, PersistentVolumeClaim, PersistentVolumeClaimStatus, PersistentVolumeStatus,
};
use kube::{Resource, ResourceExt};
use skiff_component_helpers::volume::{
    self as helpers, ANN_BIND_COMPLETED, ANN_BOUND_BY_CONTROLLER,
};

use super::Cluster;
use super::sync::{
    Error, Result, claim_phase, has_annotation, set_annotation, volume_name_of, volume_phase,
};
use crate::events::Note;

/// Upstream's `bind`: the volume points at the claim and is `Bound`, then the claim names the
/// volume and is `Bound`; each write only when something changes.
pub async fn bind(
    c: &dyn Cluster,
    volume: &PersistentVolume,
    claim: &PersistentVolumeClaim,
) -> Result<()> {
    let volume = bind_volume_to_claim(c, volume, claim).await?;
    let volume = update_volume_phase(c, &volume, "Bound", "").await?;
    let claim = bind_claim_to_volume(c, claim, &volume).await?;
    update_claim_status(c, &claim, "Bound", Some(&volume)).await?;
    Ok(())
}

/// The volume's `claimRef` pointed at the claim, written only when that changes (the change
/// itself is the helpers', which the scheduler's volume binding shares).
pub(super) async fn bind_volume_to_claim(
    c: &dyn Cluster,
    volume: &PersistentVolume,
    claim: &PersistentVolumeClaim,
) -> Result<PersistentVolume> {
    match helpers::bind_volume_to_claim(volume, claim) {
        None => Ok(volume.clone()),
        Some(updated) => Ok(c.update_volume(updated).await?),
    }
}

pub(super) async fn bind_claim_to_volume(
    c: &dyn Cluster,
    claim: &PersistentVolumeClaim,
    volume: &PersistentVolume,
) -> Result<PersistentVolumeClaim> {
    let name = volume.name_any();
    let by_controller = volume_name_of(claim) != name;
    let mut updated = claim.clone();
    let mut dirty = false;
    if by_controller {
        updated.spec.get_or_insert_default().volume_name = Some(name);
        dirty = true;
    }
    if by_controller && !has_annotation(&updated, ANN_BOUND_BY_CONTROLLER) {
        set_annotation(&mut updated, ANN_BOUND_BY_CONTROLLER, "yes");
        dirty = true;
    }
    if !has_annotation(&updated, ANN_BIND_COMPLETED) {
        set_annotation(&mut updated, ANN_BIND_COMPLETED, "yes");
        dirty = true;
    }
    if !dirty {
        return Ok(claim.clone());
    }
    Ok(c.update_claim(updated).await?)
}

/// Upstream's `updateClaimStatus`: the phase, and the volume's access modes and (when the claim
/// becomes bound) capacity, or neither without a volume.
pub(super) async fn update_claim_status(
    c: &dyn Cluster,
    claim: &PersistentVolumeClaim,
    phase: &str,
    volume: Option<&PersistentVolume>,
) -> Result<PersistentVolumeClaim> {
    let mut updated = claim.clone();
    let old = claim.status.clone().unwrap_or_default();
    let status = updated
        .status
        .get_or_insert_with(PersistentVolumeClaimStatus::default);
    let mut dirty = false;
    if old.phase.as_deref() != Some(phase) {
        status.phase = Some(phase.into());
        dirty = true;
    }
    match volume {
        None => {
            if old.access_modes.is_some() {
                status.access_modes = None;
                dirty = true;
            }
            if old.capacity.is_some() {
                status.capacity = None;
                dirty = true;
            }
        }
        Some(volume) => {
            let modes = volume.spec.as_ref().and_then(|s| s.access_modes.clone());
            if old.access_modes != modes {
                status.access_modes = modes;
                dirty = true;
            }
            if old.phase.as_deref() != Some(phase) {
                let capacity = volume.spec.as_ref().and_then(|s| s.capacity.as_ref());
                if capacity.and_then(|c| c.get("storage")).is_none() {
                    return Err(Error::NoCapacity(volume.name_any()));
                }
                let storage = |l: Option<&BTreeMap<_, _>>| helpers::storage(l);
                if old
                    .capacity
                    .as_ref()
                    .and_then(|c| c.get("storage"))
                    .is_none()
                    || storage(capacity) != storage(old.capacity.as_ref())
                {
                    status.capacity = capacity.cloned();
                    dirty = true;
                }
            }
        }
    }
    if !dirty {
        return Ok(claim.clone());
    }
    Ok(c.update_claim_status(updated).await?)
}

pub(super) async fn update_claim_status_with_event(
    c: &dyn Cluster,
    claim: &PersistentVolumeClaim,
    phase: &str,
    note: Note,
) -> Result<()> {
    if claim_phase(claim) == phase {
        return Ok(());
    }
    let saved = update_claim_status(c, claim, phase, None).await?;
    c.event(saved.object_ref(&()), note);
    Ok(())
}

/// Upstream's `updateVolumePhase`: the phase and its message, when the phase changes.
pub(super) async fn update_volume_phase(
    c: &dyn Cluster,
    volume: &PersistentVolume,
    phase: &str,
    message: &str,
) -> Result<PersistentVolume> {
    if volume_phase(volume) == phase {
        return Ok(volume.clone());
    }
    let mut updated = volume.clone();
    let status = updated
        .status
        .get_or_insert_with(PersistentVolumeStatus::default);
    status.phase = Some(phase.into());
    status.message = (!message.is_empty()).then(|| message.into());
    Ok(c.update_volume_status(updated).await?)
}

/// A phase change with its event (the message also the volume's `status.message`); nothing
/// when the phase is already that.
pub(super) async fn update_volume_phase_with_event(
    c: &dyn Cluster,
    volume: &PersistentVolume,
    phase: &str,
    note: Note,
) -> Result<PersistentVolume> {
    if volume_phase(volume) == phase {
        return Ok(volume.clone());
    }
    let saved = update_volume_phase(c, volume, phase, &note.note).await?;
    c.event(saved.object_ref(&()), note);
    Ok(saved)
}

/// Upstream's `unbindVolume`: a volume the controller bound forgets its claim; one the user
/// pre-bound keeps the claim's name but not its uid. Either is `Available` again.
pub(super) async fn unbind_volume(c: &dyn Cluster, volume: &PersistentVolume) -> Result<()> {
    let mut updated = volume.clone();
    if has_annotation(volume, ANN_BOUND_BY_CONTROLLER) {
        if let Some(spec) = updated.spec.as_mut() {
            spec.claim_ref = None;
        }
        if let Some(a) = updated.metadata.annotations.as_mut() {
            a.remove(ANN_BOUND_BY_CONTROLLER);
            if a.is_empty() {
                updated.metadata.annotations = None;
            }
        }
    } else if let Some(r) = updated.spec.as_mut().and_then(|s| s.claim_ref.as_mut()) {
        r.uid = None;
    }
    let saved = c.update_volume(updated).await?;
    update_volume_phase(c, &saved, "Available", "").await?;
    Ok(())
}
