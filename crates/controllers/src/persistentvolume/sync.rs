//! `syncClaim` and `syncVolume` (upstream's `pv_controller.go`): a Pending claim is bound to
//! the volume it names or to the smallest matching one (its access-mode groups tried smallest
//! first), or waits (`WaitForFirstConsumer`), or is handed to its class's provisioner; a bound
//! claim whose volume went away is `Lost`; a volume whose claim went away is `Released` and its
//! reclaim policy applied. Every write goes through the [`super::Cluster`]; a phase changes
//! with at most one event, as upstream's `update…PhaseWithEvent`. The work is split by what
//! it acts on ([`super::claim`], [`super::volume`]) and the writes both make
//! ([`super::binding`]); this module holds their errors and accessors.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ObjectReference, PersistentVolume, PersistentVolumeClaim};
use kube::{Resource, ResourceExt};

pub use super::claim::{find_best_match, sync_claim};
pub use super::volume::{deleter_error, sync_volume};

/// On a volume migrated to a CSI driver: the PV controller stands down.
pub(super) const ANN_MIGRATED_TO: &str = "pv.kubernetes.io/migrated-to";

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

pub(super) fn has_annotation<K: Resource>(obj: &K, key: &str) -> bool {
    obj.meta()
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(key))
}

pub(super) fn set_annotation<K: Resource>(obj: &mut K, key: &str, value: &str) {
    obj.meta_mut()
        .annotations
        .get_or_insert_with(BTreeMap::new)
        .insert(key.into(), value.into());
}

pub(super) fn claim_key(claim: &PersistentVolumeClaim) -> String {
    format!(
        "{}/{}",
        claim.namespace().unwrap_or_default(),
        claim.name_any()
    )
}

pub(super) fn volume_name_of(claim: &PersistentVolumeClaim) -> &str {
    claim
        .spec
        .as_ref()
        .and_then(|s| s.volume_name.as_deref())
        .unwrap_or("")
}

pub(super) fn claim_ref(volume: &PersistentVolume) -> Option<&ObjectReference> {
    volume.spec.as_ref().and_then(|s| s.claim_ref.as_ref())
}

pub(super) fn claim_phase(claim: &PersistentVolumeClaim) -> &str {
    claim
        .status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("")
}

pub(super) fn volume_phase(volume: &PersistentVolume) -> &str {
    volume
        .status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("")
}

pub(super) fn reclaim_policy(volume: &PersistentVolume) -> &str {
    volume
        .spec
        .as_ref()
        .and_then(|s| s.persistent_volume_reclaim_policy.as_deref())
        .unwrap_or("")
}
