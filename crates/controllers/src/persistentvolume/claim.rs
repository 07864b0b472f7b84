//! A claim's sync: a Pending claim is bound to the volume it names or to the smallest match, or
//! waits for its first consumer, or is handed to its class's provisioner; a bound claim whose
//! volume went away (or is someone else's) is `Lost`.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use kube::{Resource, ResourceExt};
use skiff_component_helpers::volume::{
    self as helpers, ANN_BETA_STORAGE_PROVISIONER, ANN_BIND_COMPLETED, ANN_BOUND_BY_CONTROLLER,
    ANN_SELECTED_NODE, ANN_STORAGE_PROVISIONER,
};

use super::Cluster;
use super::binding::{bind, update_claim_status, update_claim_status_with_event};
use super::sync::{
    Error, Result, claim_key, claim_ref, has_annotation, set_annotation, volume_name_of,
};
use crate::events::Note;

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
