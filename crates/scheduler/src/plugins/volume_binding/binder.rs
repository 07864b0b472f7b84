//! Volume binding's decisions (upstream's `SchedulerVolumeBinder`): a pod's claims sorted out
//! once per cycle, what a node offers them (the node affinity of bound volumes; a static volume
//! or provisioning for each unbound `WaitForFirstConsumer` claim), the assumption at Reserve
//! and its undoing, and at PreBind the writes and the wait until the PersistentVolume
//! controller has bound every claim.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use skiff_component_helpers::volume::{
    self as helpers, ANN_SELECTED_NODE, Candidate, NOT_SUPPORTED_PROVISIONER,
};

use super::super::helper::{claim_is_for_pod, pod_claims};
use crate::api::ClusterApi;
use crate::framework::{PodInfo, Status};
use crate::volumes::{Affinity, CLASS_INDEX, Volumes, key_of};

/// Upstream's `ErrReasonBindConflict`.
pub const REASON_BIND_CONFLICT: &str = "node(s) didn't find available persistent volumes to bind";
/// Upstream's `ErrReasonNodeConflict`.
pub const REASON_NODE_CONFLICT: &str = "node(s) had volume node affinity conflict";
/// Upstream's `ErrReasonNotEnoughSpace` (never given: no storage capacity tracking).
pub const REASON_NOT_ENOUGH_SPACE: &str = "node(s) did not have enough free storage";
/// Upstream's `ErrReasonPVNotExist`.
pub const REASON_PV_NOT_EXIST: &str =
    "node(s) unavailable due to one or more pvc(s) bound to non-existent pv(s)";
/// PreFilter's rejection of a pod whose `Immediate` claims are not bound yet.
pub const REASON_UNBOUND_IMMEDIATE: &str = "pod has unbound immediate PersistentVolumeClaims";

/// The label local volumes pin their node with.
const HOSTNAME_LABEL: &str = "kubernetes.io/hostname";

/// How often a binding cycle looks again even without a change (upstream polls every second).
const POLL: Duration = Duration::from_secs(1);

/// A volume that could take a claim, with its parsed node affinity.
#[derive(Clone)]
pub struct Offer {
    pub volume: Arc<PersistentVolume>,
    pub affinity: Arc<Affinity>,
}

/// A claim bound to a volume, with that volume and its affinity (`None`: the volume does not
/// exist).
#[derive(Clone)]
pub struct BoundClaim {
    pub claim: Arc<PersistentVolumeClaim>,
    pub volume: Option<Offer>,
}

/// An unbound claim of a `WaitForFirstConsumer` class, with what could take it.
#[derive(Clone)]
pub struct DelayedClaim {
    pub claim: Arc<PersistentVolumeClaim>,
    /// A volume pre-bound to the claim: the claim takes it or nothing.
    pre_bound: Option<Offer>,
    /// `Available` volumes that fit the claim, smallest first.
    offers: Vec<Offer>,
    /// Positions in `offers` (ascending) of volumes whose affinity names hostnames, by
    /// hostname, and of the others: a node need only look at its own and the others.
    by_host: HashMap<String, Vec<usize>>,
    anywhere: Vec<usize>,
}

/// A pod's claims, sorted out at PreFilter (upstream's `PodVolumeClaims`, with the volumes of
/// each unbound claim's class looked at once per cycle rather than once per node).
#[derive(Clone, Default)]
pub struct PodVolumeClaims {
    pub bound: Vec<BoundClaim>,
    pub delayed: Vec<DelayedClaim>,
}

/// What the pod's unbound claims get on one node (upstream's `PodVolumes`): static volumes to
/// bind them to, and claims to provision.
#[derive(Clone, Default)]
pub struct PodVolumes {
    pub bindings: Vec<(Arc<PersistentVolume>, Arc<PersistentVolumeClaim>)>,
    pub provisions: Vec<Arc<PersistentVolumeClaim>>,
}

fn annotation<'a>(claim: &'a PersistentVolumeClaim, key: &str) -> Option<&'a str> {
    claim
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .map(String::as_str)
}

fn volume_name(claim: &PersistentVolumeClaim) -> &str {
    claim
        .spec
        .as_ref()
        .and_then(|s| s.volume_name.as_deref())
        .unwrap_or("")
}

/// The hostnames a volume's affinity is pinned to (`kubernetes.io/hostname In …`, intersected
/// within a term, joined over terms), upstream's `GetLocalPersistentVolumeNodeNames`; empty
/// when some term does not pin it.
fn pinned_hosts(volume: &PersistentVolume) -> BTreeSet<String> {
    let terms = volume
        .spec
        .as_ref()
        .and_then(|s| s.node_affinity.as_ref())
        .and_then(|a| a.required.as_ref())
        .map(|r| r.node_selector_terms.as_slice())
        .unwrap_or(&[]);
    let mut hosts = BTreeSet::new();
    for term in terms {
        let mut in_term: Option<BTreeSet<String>> = None;
        for e in term.match_expressions.iter().flatten() {
            if e.key != HOSTNAME_LABEL || e.operator != "In" {
                continue;
            }
            let values: BTreeSet<String> = e.values.iter().flatten().cloned().collect();
            in_term = Some(match in_term {
                None => values,
                Some(prev) => prev.intersection(&values).cloned().collect(),
            });
        }
        match in_term {
            Some(h) => hosts.extend(h),
            // a term that pins no hostname: the volume may be anywhere
            None => return BTreeSet::new(),
        }
    }
    hosts
}

/// Whether binding the claim waits for its first consumer (upstream's `IsDelayBindingMode`):
/// a class without a binding mode is an error, an unknown class does not delay.
fn is_delay_binding(volumes: &Volumes, claim: &PersistentVolumeClaim) -> Result<bool, Status> {
    let class = helpers::claim_class(claim);
    if class.is_empty() {
        return Ok(false);
    }
    let Some(sc) = volumes.class(class) else {
        return Ok(false);
    };
    if sc.volume_binding_mode.is_none() {
        return Err(Status::error(format!(
            "VolumeBindingMode not set for StorageClass {class:?}"
        )));
    }
    Ok(helpers::is_delay_binding(&sc))
}

/// PreFilter's work (upstream's `podHasPVCs` and `GetPodVolumeClaims`): `Ok(None)` when the
/// pod uses no claim; a claim missing, lost, being deleted or not the pod's own ephemeral one
/// is unresolvable, and so is an unbound claim that does not wait for its first consumer.
pub fn pod_volume_claims(
    volumes: &Volumes,
    pod: &PodInfo,
) -> Result<Option<PodVolumeClaims>, Status> {
    let namespace = pod.namespace();
    let mut claims = Vec::new();
    for used in pod_claims(&pod.pod) {
        let Some(claim) = volumes.claims.get(&format!("{namespace}/{}", used.name)) else {
            return Err(Status::unresolvable(if used.ephemeral {
                format!(
                    "waiting for ephemeral volume controller to create the persistentvolumeclaim {:?}",
                    used.name
                )
            } else {
                format!("persistentvolumeclaim {:?} not found", used.name)
            }));
        };
        let phase = claim.status.as_ref().and_then(|s| s.phase.as_deref());
        if phase == Some("Lost") {
            return Err(Status::unresolvable(format!(
                "persistentvolumeclaim {:?} bound to non-existent persistentvolume {:?}",
                used.name,
                volume_name(&claim)
            )));
        }
        if claim.metadata.deletion_timestamp.is_some() {
            return Err(Status::unresolvable(format!(
                "persistentvolumeclaim {:?} is being deleted",
                used.name
            )));
        }
        if used.ephemeral {
            claim_is_for_pod(&pod.pod, &claim).map_err(Status::unresolvable)?;
        }
        claims.push(claim);
    }
    if claims.is_empty() {
        return Ok(None);
    }
    let mut sorted = PodVolumeClaims::default();
    let mut immediate = 0;
    for claim in claims {
        if helpers::is_claim_fully_bound(&claim) {
            let volume = volumes.volumes.get(volume_name(&claim)).map(|v| Offer {
                affinity: volumes.affinity(&v),
                volume: v,
            });
            sorted.bound.push(BoundClaim { claim, volume });
        } else if is_delay_binding(volumes, &claim)? && volume_name(&claim).is_empty() {
            sorted.delayed.push(delayed_claim(volumes, claim)?);
        } else {
            immediate += 1;
        }
    }
    if immediate > 0 {
        return Err(Status::unresolvable(REASON_UNBOUND_IMMEDIATE));
    }
    Ok(Some(sorted))
}

/// The volumes of the claim's class that could take it, node affinity aside.
fn delayed_claim(
    volumes: &Volumes,
    claim: Arc<PersistentVolumeClaim>,
) -> Result<DelayedClaim, Status> {
    let selector = helpers::claim_selector(&claim).map_err(Status::error)?;
    let class = helpers::claim_class(&claim);
    let mut pre_bound = None;
    let mut offers = Vec::new();
    for v in volumes.volumes.by_index(CLASS_INDEX, class) {
        match helpers::volume_candidate(&claim, &v, selector.as_ref(), true, true) {
            Candidate::No => {}
            Candidate::PreBound => {
                pre_bound = Some(Offer {
                    affinity: volumes.affinity(&v),
                    volume: v,
                });
                break;
            }
            Candidate::Fits => offers.push(Offer {
                affinity: volumes.affinity(&v),
                volume: v,
            }),
        }
    }
    // smallest first; among equals by name, so that every node prefers the same one
    offers.sort_by(|a, b| {
        helpers::capacity(&a.volume)
            .cmp(&helpers::capacity(&b.volume))
            .then_with(|| a.volume.metadata.name.cmp(&b.volume.metadata.name))
    });
    let mut by_host: HashMap<String, Vec<usize>> = HashMap::new();
    let mut anywhere = Vec::new();
    for (i, o) in offers.iter().enumerate() {
        let hosts = pinned_hosts(&o.volume);
        if hosts.is_empty() {
            anywhere.push(i);
        }
        for h in hosts {
            by_host.entry(h).or_default().push(i);
        }
    }
    Ok(DelayedClaim {
        claim,
        pre_bound,
        offers,
        by_host,
        anywhere,
    })
}

/// The nodes every bound claim's volume pins by hostname (upstream's `GetEligibleNodes`, which
/// takes hostnames for node names); `None` when no bound volume pins one, or one is missing.
pub fn eligible_nodes(claims: &PodVolumeClaims) -> Option<BTreeSet<String>> {
    let mut eligible: Option<BTreeSet<String>> = None;
    for b in &claims.bound {
        let volume = b.volume.as_ref()?;
        let hosts = pinned_hosts(&volume.volume);
        if hosts.is_empty() {
            continue;
        }
        eligible = Some(match eligible {
            None => hosts,
            Some(prev) => prev.intersection(&hosts).cloned().collect(),
        });
    }
    eligible
}

impl DelayedClaim {
    /// The smallest volume for the claim on `node` not already `chosen` (upstream's
    /// `FindMatchingVolume` with a node).
    fn find(&self, node: &Node, chosen: &HashSet<String>) -> Option<&Offer> {
        let usable = |o: &&Offer| {
            !chosen.contains(o.volume.metadata.name.as_deref().unwrap_or(""))
                && o.affinity.check(node).is_ok()
        };
        if let Some(pb) = &self.pre_bound {
            return Some(pb).filter(usable);
        }
        let hostname = node
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(HOSTNAME_LABEL));
        let pinned = hostname
            .and_then(|h| self.by_host.get(h))
            .map_or(&[][..], Vec::as_slice);
        // both lists ascend, as `offers` does: merge them in order of size
        let (mut i, mut j) = (0, 0);
        while i < pinned.len() || j < self.anywhere.len() {
            let next = match (pinned.get(i), self.anywhere.get(j)) {
                (Some(&a), Some(&b)) if a < b => {
                    i += 1;
                    a
                }
                (_, Some(&b)) => {
                    j += 1;
                    b
                }
                (Some(&a), None) => {
                    i += 1;
                    a
                }
                (None, None) => break,
            };
            let offer = &self.offers[next];
            if usable(&offer) {
                return Some(offer);
            }
        }
        None
    }
}

/// Whether every claim to provision can be provisioned for `node` (upstream's
/// `checkVolumeProvisions`, without storage capacity tracking): `Ok(None)` when some cannot.
fn provisions_for(
    volumes: &Volumes,
    claims: &[&DelayedClaim],
    node: &Node,
) -> Result<Option<Vec<Arc<PersistentVolumeClaim>>>, String> {
    let mut out = Vec::new();
    for d in claims {
        let name = helpers::claim_class(&d.claim);
        if name.is_empty() {
            return Err(format!("no class for claim {:?}", key_of(d.claim.as_ref())));
        }
        let Some(class): Option<Arc<StorageClass>> = volumes.class(name) else {
            return Err(format!("failed to find storage class {name:?}"));
        };
        if class.provisioner.is_empty() || class.provisioner == NOT_SUPPORTED_PROVISIONER {
            return Ok(None);
        }
        if !helpers::class_allows_node(&class, node) {
            return Ok(None);
        }
        out.push(d.claim.clone());
    }
    Ok(Some(out))
}

/// Filter's work for one node (upstream's `FindPodVolumes`): what the node offers the pod's
/// unbound claims, and the reasons it does not fit, in upstream's order.
pub fn find_pod_volumes(
    volumes: &Volumes,
    claims: &PodVolumeClaims,
    node: &Node,
) -> Result<(PodVolumes, Vec<&'static str>), String> {
    let mut found = PodVolumes::default();
    let (mut bound_ok, mut bound_found, mut unbound_ok) = (true, true, true);
    for b in &claims.bound {
        match &b.volume {
            None => {
                bound_found = false;
                break;
            }
            Some(o) if o.affinity.check(node).is_err() => {
                bound_ok = false;
                break;
            }
            Some(_) => {}
        }
    }
    let node_name = node.metadata.name.as_deref().unwrap_or("");
    'unbound: {
        if claims.delayed.is_empty() {
            break 'unbound;
        }
        let mut to_match = Vec::new();
        let mut to_provision = Vec::new();
        for d in &claims.delayed {
            match annotation(&d.claim, ANN_SELECTED_NODE) {
                Some(selected) if selected != node_name => {
                    unbound_ok = false;
                    break 'unbound;
                }
                Some(_) => to_provision.push(d),
                None => to_match.push(d),
            }
        }
        to_match.sort_by_key(|d| helpers::requested(&d.claim));
        let mut chosen = HashSet::new();
        for d in to_match {
            match d.find(node, &chosen) {
                Some(offer) => {
                    let name = offer.volume.metadata.name.clone().unwrap_or_default();
                    chosen.insert(name);
                    found.bindings.push((offer.volume.clone(), d.claim.clone()));
                }
                None => {
                    unbound_ok = false;
                    to_provision.push(d);
                }
            }
        }
        if !to_provision.is_empty() {
            match provisions_for(volumes, &to_provision, node)? {
                Some(p) => {
                    unbound_ok = true;
                    found.provisions = p;
                }
                None => unbound_ok = false,
            }
        }
    }
    let mut reasons = Vec::new();
    if !bound_ok {
        reasons.push(REASON_NODE_CONFLICT);
    }
    if !unbound_ok {
        reasons.push(REASON_BIND_CONFLICT);
    }
    if !bound_found {
        reasons.push(REASON_PV_NOT_EXIST);
    }
    Ok((found, reasons))
}

/// Whether every claim of the pod is fully bound, as the caches (with what is assumed) show
/// (upstream's `arePodVolumesBound`).
fn pod_volumes_bound(volumes: &Volumes, pod: &PodInfo) -> bool {
    pod_claims(&pod.pod).all(|used| {
        volumes
            .claims
            .get(&format!("{}/{}", pod.namespace(), used.name))
            .is_some_and(|c| helpers::is_claim_fully_bound(&c))
    })
}

/// Reserve's work (upstream's `AssumePodVolumes`): `Ok(None)` when every claim is bound
/// already; else the volumes pointed at their claims and the claims annotated with the node,
/// assumed in the caches, as PreBind is to write them.
pub fn assume_pod_volumes(
    volumes: &Volumes,
    pod: &PodInfo,
    node: &str,
    found: &PodVolumes,
) -> Result<Option<PodVolumes>, String> {
    if pod_volumes_bound(volumes, pod) {
        return Ok(None);
    }
    let mut assumed = PodVolumes::default();
    for (volume, claim) in &found.bindings {
        let volume = match helpers::bind_volume_to_claim(volume, claim) {
            Some(updated) => {
                if let Err(e) = volumes.volumes.assume(updated.clone()) {
                    revert(volumes, &assumed);
                    return Err(e);
                }
                Arc::new(updated)
            }
            None => volume.clone(),
        };
        assumed.bindings.push((volume, claim.clone()));
    }
    for claim in &found.provisions {
        let mut updated = (**claim).clone();
        updated
            .metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert(ANN_SELECTED_NODE.into(), node.into());
        if let Err(e) = volumes.claims.assume(updated.clone()) {
            revert(volumes, &assumed);
            return Err(e);
        }
        assumed.provisions.push(Arc::new(updated));
    }
    Ok(Some(assumed))
}

/// Forgets what was assumed for these volumes and claims (upstream's
/// `RevertAssumedPodVolumes`).
pub fn revert(volumes: &Volumes, assumed: &PodVolumes) {
    revert_parts(volumes, &assumed.bindings, &assumed.provisions);
}

fn revert_parts(
    volumes: &Volumes,
    bindings: &[(Arc<PersistentVolume>, Arc<PersistentVolumeClaim>)],
    provisions: &[Arc<PersistentVolumeClaim>],
) {
    for (v, _) in bindings {
        volumes.volumes.restore(&key_of(v.as_ref()));
    }
    for c in provisions {
        volumes.claims.restore(&key_of(c.as_ref()));
    }
}

fn version<K: kube::Resource>(obj: &K) -> u64 {
    obj.meta()
        .resource_version
        .as_deref()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// PreBind's work (upstream's `BindPodVolumes`): the volumes' `claimRef`s and the claims'
/// `selected-node` written (what was not written is no longer assumed), then a wait, woken by
/// every claim or volume change and at least each second, until the PersistentVolume
/// controller has bound every claim, something undoes the binding, or `timeout` passes.
pub async fn bind_pod_volumes(
    volumes: &Volumes,
    api: &dyn ClusterApi,
    pod: &PodInfo,
    node: &str,
    assumed: &PodVolumes,
    timeout: Duration,
) -> Result<(), String> {
    let deadline = tokio::time::Instant::now() + timeout;
    let mut changed = volumes.subscribe();
    let mut bindings = assumed.bindings.clone();
    let mut provisions = assumed.provisions.clone();
    for i in 0..bindings.len() {
        match api.update_volume(&bindings[i].0).await {
            Ok(stored) => bindings[i].0 = Arc::new(stored),
            Err(e) => {
                revert_parts(volumes, &bindings[i..], &provisions);
                return Err(e.to_string());
            }
        }
    }
    for i in 0..provisions.len() {
        match api.update_claim(&provisions[i]).await {
            Ok(stored) => provisions[i] = Arc::new(stored),
            Err(e) => {
                revert_parts(volumes, &[], &provisions[i..]);
                return Err(e.to_string());
            }
        }
    }
    loop {
        match check_bindings(volumes, pod, node, &bindings, &provisions) {
            Ok(true) => return Ok(()),
            Ok(false) => {}
            Err(e) => return Err(format!("binding volumes: {e}")),
        }
        tokio::select! {
            _ = changed.changed() => {}
            () = tokio::time::sleep(POLL) => {}
            () = tokio::time::sleep_until(deadline) => {
                return Err("binding volumes: context deadline exceeded".into());
            }
        }
    }
}

/// Whether every claim the pod's binding wrote is fully bound, as the informers show it; an
/// error when the binding cannot complete any more (upstream's `checkBindings`).
fn check_bindings(
    volumes: &Volumes,
    pod: &PodInfo,
    node_name: &str,
    bindings: &[(Arc<PersistentVolume>, Arc<PersistentVolumeClaim>)],
    provisions: &[Arc<PersistentVolumeClaim>],
) -> Result<bool, String> {
    let Some(node) = volumes.node(node_name) else {
        return Err(format!(
            "failed to get node {node_name:?}: node {node_name:?} not found"
        ));
    };
    if volumes
        .pods
        .get(&kube::runtime::reflector::ObjectRef::new(pod.name()).within(pod.namespace()))
        .is_none()
    {
        return Err(format!(
            "pod does not exist any more: pod {:?} not found",
            pod.name()
        ));
    }
    for (written, claim) in bindings {
        let name = key_of(written.as_ref());
        let Some(volume) = volumes.volumes.get_api(&name) else {
            return Err(format!(
                "failed to check binding: could not find PersistentVolume {name:?}"
            ));
        };
        let claim_key = key_of(claim.as_ref());
        let Some(claim) = volumes.claims.get_api(&claim_key) else {
            return Err(format!(
                "failed to check binding: could not find PersistentVolumeClaim {claim_key:?}"
            ));
        };
        // the informer has not brought our write yet
        if version(written.as_ref()) > version(volume.as_ref()) {
            return Ok(false);
        }
        if let Err(e) = volumes.affinity(&volume).check(&node) {
            return Err(format!(
                "pv {name:?} node affinity doesn't match node {node_name:?}: {e}"
            ));
        }
        let claim_ref = volume.spec.as_ref().and_then(|s| s.claim_ref.as_ref());
        if claim_ref.is_none_or(|r| r.uid.as_deref().unwrap_or("").is_empty()) {
            return Err(format!("ClaimRef got reset for pv {name:?}"));
        }
        if !helpers::is_claim_fully_bound(&claim) {
            return Ok(false);
        }
    }
    for written in provisions {
        let key = key_of(written.as_ref());
        let Some(claim) = volumes.claims.get_api(&key) else {
            return Err(format!(
                "failed to check provisioning pvc: could not find PersistentVolumeClaim {key:?}"
            ));
        };
        if version(written.as_ref()) > version(claim.as_ref()) {
            return Ok(false);
        }
        let name = claim.metadata.name.as_deref().unwrap_or("");
        match annotation(&claim, ANN_SELECTED_NODE) {
            None if claim.metadata.annotations.is_none() => {
                return Err(format!("selectedNode annotation reset for PVC {name:?}"));
            }
            Some(n) if n == node_name => {}
            // the provisioner removes the annotation when it fails, to have the pod rescheduled
            _ => return Err(format!("provisioning failed for PVC {name:?}")),
        }
        let bound_to = volume_name(&claim);
        if !bound_to.is_empty() {
            let Some(volume) = volumes.volumes.get_api(bound_to) else {
                // not seen yet; a deleted volume unbinds the claim eventually
                return Ok(false);
            };
            if let Err(e) = volumes.affinity(&volume).check(&node) {
                return Err(format!(
                    "pv {bound_to:?} node affinity doesn't match node {node_name:?}: {e}"
                ));
            }
        }
        if !helpers::is_claim_fully_bound(&claim) {
            return Ok(false);
        }
    }
    Ok(true)
}
