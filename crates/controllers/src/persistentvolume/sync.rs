//! `syncClaim` and `syncVolume` (upstream's `pv_controller.go`): a Pending claim is bound to the
//! volume it names or to the smallest matching one (its access-mode groups tried smallest
//! first), or waits (`WaitForFirstConsumer`), or is handed to its class's provisioner; a bound
//! claim whose volume went away is `Lost`; a volume whose claim went away is `Released` and its
//! reclaim policy applied. Every write goes through the [`Cluster`]; a phase changes with at
//! most one event, as upstream's `update…PhaseWithEvent`.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    ObjectReference, PersistentVolume, PersistentVolumeClaim, PersistentVolumeClaimStatus,
    PersistentVolumeStatus,
};
use kube::{Resource, ResourceExt};
use skiff_component_helpers::volume::{
    self as helpers, ANN_BETA_STORAGE_PROVISIONER, ANN_BIND_COMPLETED, ANN_BOUND_BY_CONTROLLER,
    ANN_DYNAMICALLY_PROVISIONED, ANN_SELECTED_NODE, ANN_STORAGE_PROVISIONER,
};

use super::Cluster;
use crate::events::Note;

/// On a volume migrated to a CSI driver: the PV controller stands down.
const ANN_MIGRATED_TO: &str = "pv.kubernetes.io/migrated-to";

/// Why a sync failed; the key is retried with backoff.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Api(#[from] kube::Error),
    #[error("error finding PV for claim {claim:?}: {message}")]
    FindVolume { claim: String, message: String },
    #[error("VolumeBindingMode not set for StorageClass {0:?}")]
    NoBindingMode(String),
    #[error(
        "invalid binding of claim {claim:?} to volume {volume:?}: volume already claimed by {other:?}"
    )]
    Misbound {
        claim: String,
        volume: String,
        other: String,
    },
    #[error("PersistentVolume {0:?} is without a storage capacity")]
    NoCapacity(String),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

fn has_annotation<K: Resource>(obj: &K, key: &str) -> bool {
    obj.meta()
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(key))
}

fn set_annotation<K: Resource>(obj: &mut K, key: &str, value: &str) {
    obj.meta_mut()
        .annotations
        .get_or_insert_with(BTreeMap::new)
        .insert(key.into(), value.into());
}

fn claim_key(claim: &PersistentVolumeClaim) -> String {
    format!(
        "{}/{}",
        claim.namespace().unwrap_or_default(),
        claim.name_any()
    )
}

fn volume_name_of(claim: &PersistentVolumeClaim) -> &str {
    claim
        .spec
        .as_ref()
        .and_then(|s| s.volume_name.as_deref())
        .unwrap_or("")
}

fn claim_ref(volume: &PersistentVolume) -> Option<&ObjectReference> {
    volume.spec.as_ref().and_then(|s| s.claim_ref.as_ref())
}

fn claim_phase(claim: &PersistentVolumeClaim) -> &str {
    claim
        .status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("")
}

fn volume_phase(volume: &PersistentVolume) -> &str {
    volume
        .status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("")
}

fn reclaim_policy(volume: &PersistentVolume) -> &str {
    volume
        .spec
        .as_ref()
        .and_then(|s| s.persistent_volume_reclaim_policy.as_deref())
        .unwrap_or("")
}

// ---- claims ----

/// Upstream's `syncClaim`.
pub async fn sync_claim(c: &dyn Cluster, claim: &PersistentVolumeClaim) -> Result<()> {
    if has_annotation(claim, ANN_BIND_COMPLETED) {
        sync_bound_claim(c, claim).await
    } else {
        sync_unbound_claim(c, claim).await
    }
}

/// Whether binding the claim waits for a pod (its class is `WaitForFirstConsumer`); an unknown
/// class does not delay.
fn is_delay_binding_mode(c: &dyn Cluster, claim: &PersistentVolumeClaim) -> Result<bool> {
    let class = helpers::claim_class(claim);
    if class.is_empty() {
        return Ok(false);
    }
    let Some(sc) = c.class(class) else {
        return Ok(false);
    };
    if sc.volume_binding_mode.is_none() {
        return Err(Error::NoBindingMode(class.into()));
    }
    Ok(helpers::is_delay_binding(&sc))
}

/// Upstream's `persistentVolumeOrderedIndex.findByClaim`: volumes grouped by their access-mode
/// sets; the groups offering every mode the claim asks for are tried, fewest modes first.
pub fn find_best_match(
    volumes: &[std::sync::Arc<PersistentVolume>],
    claim: &PersistentVolumeClaim,
    delay_binding: bool,
) -> Result<Option<PersistentVolume>, String> {
    let mut groups: BTreeMap<String, (usize, Vec<&PersistentVolume>)> = BTreeMap::new();
    for v in volumes {
        let modes = helpers::volume_modes(v);
        let key = helpers::access_modes_key(modes);
        let count = key.split(',').filter(|s| !s.is_empty()).count();
        groups.entry(key).or_insert((count, Vec::new())).1.push(v);
    }
    let wanted: Vec<String> = claim
        .spec
        .as_ref()
        .and_then(|s| s.access_modes.clone())
        .unwrap_or_default();
    let mut candidates: Vec<(&String, &(usize, Vec<&PersistentVolume>))> = groups
        .iter()
        .filter(|(_, (_, group))| {
            let offered = helpers::volume_modes(group[0]);
            wanted.iter().all(|m| offered.contains(m))
        })
        .collect();
    candidates.sort_by(|a, b| a.1.0.cmp(&b.1.0).then_with(|| a.0.cmp(b.0)));
    for (_, (_, group)) in candidates {
        if let Some(v) = helpers::find_matching_volume(claim, group, None, delay_binding)? {
            return Ok(Some(v.clone()));
        }
    }
    Ok(None)
}

async fn sync_unbound_claim(c: &dyn Cluster, claim: &PersistentVolumeClaim) -> Result<()> {
    let volume_name = volume_name_of(claim);
    if volume_name.is_empty() {
        let delay = is_delay_binding_mode(c, claim)?;
        let found =
            find_best_match(&c.volumes(), claim, delay).map_err(|message| Error::FindVolume {
                claim: claim_key(claim),
                message,
            })?;
        if let Some(volume) = found {
            return bind(c, &volume, claim).await;
        }
        if assign_default_class(c, claim).await? {
            return Ok(());
        }
        if delay && !has_annotation(claim, ANN_SELECTED_NODE) {
            event_for_unbound_delay_binding_claim(c, claim);
        } else if !helpers::claim_class(claim).is_empty() {
            return provision_claim(c, claim).await;
        } else {
            c.event(
                claim.object_ref(&()),
                Note::normal(
                    "FailedBinding",
                    "no persistent volumes available for this claim and no storage class is set"
                        .into(),
                ),
            );
        }
        update_claim_status(c, claim, "Pending", None).await?;
        return Ok(());
    }
    // the user asked for a particular volume
    let Some(volume) = c.volume(volume_name) else {
        update_claim_status(c, claim, "Pending", None).await?;
        return Ok(());
    };
    if claim_ref(&volume).is_none() {
        if let Err(reason) = helpers::check_volume_satisfies_claim(&volume, claim) {
            let message = format!(
                "Cannot bind to requested volume {:?}: {reason}",
                volume.name_any()
            );
            c.event(
                claim.object_ref(&()),
                Note::warning("VolumeMismatch", message),
            );
            update_claim_status(c, claim, "Pending", None).await?;
            return Ok(());
        }
        return bind(c, &volume, claim).await;
    }
    if helpers::is_bound_to_claim(&volume, claim) {
        return bind(c, &volume, claim).await;
    }
    let message = format!(
        "volume {:?} already bound to a different claim.",
        volume.name_any()
    );
    c.event(
        claim.object_ref(&()),
        Note::warning("FailedBinding", message),
    );
    if !has_annotation(claim, ANN_BOUND_BY_CONTROLLER) {
        // the user asked for a volume someone else has: retried on the next sync
        update_claim_status(c, claim, "Pending", None).await?;
        return Ok(());
    }
    let other = claim_ref(&volume).map_or_else(String::new, |r| {
        format!(
            "{}/{}",
            r.namespace.as_deref().unwrap_or(""),
            r.name.as_deref().unwrap_or("")
        )
    });
    Err(Error::Misbound {
        claim: claim_key(claim),
        volume: volume.name_any(),
        other,
    })
}

/// A claim without any class gets the default StorageClass, if there is one (upstream's
/// retroactive default class assignment); true when it was updated.
async fn assign_default_class(c: &dyn Cluster, claim: &PersistentVolumeClaim) -> Result<bool> {
    if helpers::claim_has_class(claim) {
        return Ok(false);
    }
    let classes = c.classes();
    let Some(default) = helpers::default_class(classes.iter().map(|c| c.as_ref())) else {
        return Ok(false);
    };
    let mut updated = claim.clone();
    if let Some(spec) = updated.spec.as_mut() {
        spec.storage_class_name = default.metadata.name.clone();
    }
    c.update_claim(updated).await?;
    Ok(true)
}

/// Upstream's `emitEventForUnboundDelayBindingClaim`.
fn event_for_unbound_delay_binding_claim(c: &dyn Cluster, claim: &PersistentVolumeClaim) {
    let mut waiting: Vec<String> = c
        .pods_using(&claim.namespace().unwrap_or_default(), &claim.name_any())
        .iter()
        .filter(|p| !crate::podutil::is_terminated(p))
        .filter(|p| {
            p.spec
                .as_ref()
                .and_then(|s| s.node_name.as_deref())
                .unwrap_or("")
                .is_empty()
        })
        .map(|p| p.name_any())
        .collect();
    waiting.sort();
    let note = match waiting.len() {
        0 => Note::normal(
            "WaitForFirstConsumer",
            "waiting for first consumer to be created before binding".into(),
        ),
        1 => Note::normal(
            "WaitForPodScheduled",
            format!("waiting for pod {} to be scheduled", waiting[0]),
        ),
        _ => Note::normal(
            "WaitForPodScheduled",
            format!("waiting for pods {} to be scheduled", waiting.join(",")),
        ),
    };
    c.event(claim.object_ref(&()), note);
}

/// Upstream's `provisionClaim` for external provisioners (Skiff has no in-tree provisioning
/// plugin): the claim is annotated with its class's provisioner and an event says it waits.
async fn provision_claim(c: &dyn Cluster, claim: &PersistentVolumeClaim) -> Result<()> {
    let class_name = helpers::claim_class(claim);
    let Some(class) = c.class(class_name) else {
        let message = format!("storageclass.storage.k8s.io {class_name:?} not found");
        c.event(
            claim.object_ref(&()),
            Note::warning("ProvisioningFailed", message),
        );
        return Ok(());
    };
    let provisioner = class.provisioner.as_str();
    if provisioner.starts_with("kubernetes.io/") {
        let message = format!("no volume plugin matched name: {provisioner}");
        c.event(
            claim.object_ref(&()),
            Note::warning("ProvisioningFailed", message),
        );
        return Ok(());
    }
    let annotated = claim
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ANN_STORAGE_PROVISIONER))
        .is_some_and(|p| p == provisioner);
    let claim = if annotated {
        claim.clone()
    } else {
        let mut updated = claim.clone();
        set_annotation(&mut updated, ANN_BETA_STORAGE_PROVISIONER, provisioner);
        set_annotation(&mut updated, ANN_STORAGE_PROVISIONER, provisioner);
        match c.update_claim(updated).await {
            Ok(saved) => saved,
            Err(e) => {
                c.event(
                    claim.object_ref(&()),
                    Note::warning("ProvisioningFailed", format!("Error saving claim: {e}")),
                );
                return Err(e.into());
            }
        }
    };
    let message = format!(
        "Waiting for a volume to be created either by the external provisioner '{provisioner}' \
         or manually by the system administrator. If volume creation is delayed, please verify \
         that the provisioner is running and correctly registered."
    );
    c.event(
        claim.object_ref(&()),
        Note::normal("ExternalProvisioning", message),
    );
    Ok(())
}

async fn sync_bound_claim(c: &dyn Cluster, claim: &PersistentVolumeClaim) -> Result<()> {
    let volume_name = volume_name_of(claim);
    if volume_name.is_empty() {
        let note = Note::warning(
            "ClaimLost",
            "Bound claim has lost reference to PersistentVolume. Data on the volume is lost!"
                .into(),
        );
        update_claim_status_with_event(c, claim, "Lost", note).await?;
        return Ok(());
    }
    let Some(volume) = c.volume(volume_name) else {
        let note = Note::warning(
            "ClaimLost",
            "Bound claim has lost its PersistentVolume. Data on the volume is lost!".into(),
        );
        update_claim_status_with_event(c, claim, "Lost", note).await?;
        return Ok(());
    };
    match claim_ref(&volume) {
        // unbound since (or not seen bound yet): bind again
        None => bind(c, &volume, claim).await,
        Some(r) if r.uid == claim.metadata.uid => bind(c, &volume, claim).await,
        Some(_) => {
            let note = Note::warning(
                "ClaimMisbound",
                "Two claims are bound to the same volume, this one is bound incorrectly".into(),
            );
            update_claim_status_with_event(c, claim, "Lost", note).await?;
            Ok(())
        }
    }
}

// ---- binding ----

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

async fn bind_volume_to_claim(
    c: &dyn Cluster,
    volume: &PersistentVolume,
    claim: &PersistentVolumeClaim,
) -> Result<PersistentVolume> {
    let by_controller = !helpers::is_bound_to_claim(volume, claim);
    let mut updated = volume.clone();
    let mut dirty = false;
    let current = claim_ref(volume);
    if current.is_none_or(|r| {
        r.name != claim.metadata.name
            || r.namespace != claim.metadata.namespace
            || r.uid != claim.metadata.uid
    }) {
        updated.spec.get_or_insert_default().claim_ref = Some(claim.object_ref(&()));
        dirty = true;
    }
    if by_controller && !has_annotation(&updated, ANN_BOUND_BY_CONTROLLER) {
        set_annotation(&mut updated, ANN_BOUND_BY_CONTROLLER, "yes");
        dirty = true;
    }
    if !dirty {
        return Ok(volume.clone());
    }
    Ok(c.update_volume(updated).await?)
}

async fn bind_claim_to_volume(
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
async fn update_claim_status(
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

async fn update_claim_status_with_event(
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
async fn update_volume_phase(
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
async fn update_volume_phase_with_event(
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
async fn unbind_volume(c: &dyn Cluster, volume: &PersistentVolume) -> Result<()> {
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

// ---- volumes ----

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
