//! `VolumeRestrictions`: a pod cannot share a node with a pod using the same single-writer
//! disk (GCE PD and iSCSI unless both mount read-only, AWS EBS always, RBD unless both
//! read-only), and a PersistentVolumeClaim with the `ReadWriteOncePod` access mode is used by
//! one pod in the whole cluster at a time. A claim the pod names that does not exist keeps it
//! Pending (unresolvable) until the claim is created.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::{Pod, Volume};

use super::helper::pod_spec;
use crate::framework::{
    ClusterEvent, CycleState, FilterPlugin, NodeInfo, Plugin, PodInfo, PreFilterPlugin,
    PreFilterResult, Snapshot, Status,
};

pub const NAME: &str = "VolumeRestrictions";

/// Upstream's `ErrReasonDiskConflict`.
pub const REASON_DISK_CONFLICT: &str = "node(s) had no available disk";

/// Upstream's `ErrReasonReadWriteOncePodConflict`.
pub const REASON_RWOP_CONFLICT: &str =
    "node has pod using PersistentVolumeClaim with the same name and ReadWriteOncePod access mode";

const STATE_KEY: &str = "PreFilterVolumeRestrictions";

/// The pod's `ReadWriteOncePod` claims and how many pods in the cluster use them.
#[derive(Clone)]
struct State {
    claims: BTreeSet<String>,
    conflicts: usize,
}

/// The claim names a pod's volumes reference.
fn claim_names(pod: &Pod) -> impl Iterator<Item = &str> {
    pod_spec(pod)
        .volumes
        .iter()
        .flatten()
        .filter_map(|v| v.persistent_volume_claim.as_ref())
        .map(|c| c.claim_name.as_str())
}

impl State {
    /// How many of `other`'s claims are the pod's `ReadWriteOncePod` claims (same namespace).
    fn uses(&self, pod: &PodInfo, other: &PodInfo) -> usize {
        if other.pod.metadata.namespace != pod.pod.metadata.namespace {
            return 0;
        }
        claim_names(&other.pod)
            .filter(|c| self.claims.contains(*c))
            .count()
    }
}

/// The pod's claims with the `ReadWriteOncePod` access mode; a missing claim is unresolvable
/// (upstream's NotFound error from the lister).
fn read_write_once_pod_claims(
    pod: &PodInfo,
    snapshot: &Snapshot,
) -> Result<BTreeSet<String>, Status> {
    let namespace = pod.pod.metadata.namespace.as_deref().unwrap_or("default");
    let mut claims = BTreeSet::new();
    for name in claim_names(&pod.pod) {
        let Some(claim) = snapshot.claim(namespace, name) else {
            return Err(Status::unresolvable(format!(
                "persistentvolumeclaim \"{name}\" not found"
            )));
        };
        let modes = claim.spec.as_ref().and_then(|s| s.access_modes.as_ref());
        if modes.is_some_and(|m| m.iter().any(|m| m == "ReadWriteOncePod")) {
            claims.insert(name.to_string());
        }
    }
    Ok(claims)
}

/// Whether the volume is of a kind that can conflict.
fn restricted(v: &Volume) -> bool {
    v.gce_persistent_disk.is_some()
        || v.aws_elastic_block_store.is_some()
        || v.rbd.is_some()
        || v.iscsi.is_some()
}

/// Whether `v` conflicts with any volume of `other` (upstream's `isVolumeConflict`).
fn conflicts(v: &Volume, other: &[Volume]) -> bool {
    other.iter().any(|e| {
        if let (Some(a), Some(b)) = (&v.gce_persistent_disk, &e.gce_persistent_disk)
            && a.pd_name == b.pd_name
            && !(a.read_only == Some(true) && b.read_only == Some(true))
        {
            return true;
        }
        if let (Some(a), Some(b)) = (&v.aws_elastic_block_store, &e.aws_elastic_block_store)
            && a.volume_id == b.volume_id
        {
            return true;
        }
        if let (Some(a), Some(b)) = (&v.iscsi, &e.iscsi)
            && a.iqn == b.iqn
            && !(a.read_only == Some(true) && b.read_only == Some(true))
        {
            return true;
        }
        if let (Some(a), Some(b)) = (&v.rbd, &e.rbd) {
            let pool = |p: &Option<String>| p.clone().unwrap_or_else(|| "rbd".into());
            let shared_monitor = a.monitors.iter().any(|m| b.monitors.contains(m));
            if shared_monitor
                && pool(&a.pool) == pool(&b.pool)
                && a.image == b.image
                && !(a.read_only == Some(true) && b.read_only == Some(true))
            {
                return true;
            }
        }
        false
    })
}

pub struct VolumeRestrictions;

impl Plugin for VolumeRestrictions {
    fn name(&self) -> &'static str {
        NAME
    }
    /// The pod using the volume gone, a node added, or the claim created.
    fn events(&self) -> ClusterEvent {
        ClusterEvent::ASSIGNED_POD_DELETE
            .with(ClusterEvent::NODE_ADD)
            .with(ClusterEvent::PVC_CHANGE)
    }
    fn as_pre_filter(&self) -> Option<&dyn PreFilterPlugin> {
        Some(self)
    }
    fn as_filter(&self) -> Option<&dyn FilterPlugin> {
        Some(self)
    }
}

impl PreFilterPlugin for VolumeRestrictions {
    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
    ) -> PreFilterResult {
        let volumes = pod_spec(&pod.pod).volumes.as_deref().unwrap_or(&[]);
        let claims = match read_write_once_pod_claims(pod, snapshot) {
            Ok(claims) => claims,
            Err(status) => return status.into(),
        };
        let mut rwop = State {
            claims,
            conflicts: 0,
        };
        if !rwop.claims.is_empty() {
            rwop.conflicts = snapshot
                .nodes()
                .iter()
                .flat_map(|n| n.pods.iter())
                .map(|other| rwop.uses(pod, other))
                .sum();
        }
        if !volumes.iter().any(restricted) && rwop.conflicts == 0 {
            return Status::skip().into();
        }
        state.write(STATE_KEY, rwop);
        Status::success().into()
    }

    fn add_pod(&self, state: &mut CycleState, pod: &PodInfo, other: &PodInfo, _: &NodeInfo) {
        if let Some(s) = state.read_mut::<State>(STATE_KEY) {
            s.conflicts += s.uses(pod, other);
        }
    }

    fn remove_pod(&self, state: &mut CycleState, pod: &PodInfo, other: &PodInfo, _: &NodeInfo) {
        if let Some(s) = state.read_mut::<State>(STATE_KEY) {
            s.conflicts = s.conflicts.saturating_sub(s.uses(pod, other));
        }
    }
}

impl FilterPlugin for VolumeRestrictions {
    fn filter(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        let volumes = pod_spec(&pod.pod).volumes.as_deref().unwrap_or(&[]);
        for v in volumes.iter().filter(|v| restricted(v)) {
            for other in &node.pods {
                let theirs = pod_spec(&other.pod).volumes.as_deref().unwrap_or(&[]);
                if conflicts(v, theirs) {
                    return Status::unschedulable(REASON_DISK_CONFLICT);
                }
            }
        }
        if state
            .read::<State>(STATE_KEY)
            .is_some_and(|s| s.conflicts > 0)
        {
            return Status::unschedulable(REASON_RWOP_CONFLICT);
        }
        Status::success()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::Code;
    use crate::framework::testing::{PodBuilder, node, snapshot};
    use k8s_openapi::api::core::v1::{
        AWSElasticBlockStoreVolumeSource, GCEPersistentDiskVolumeSource, ISCSIVolumeSource,
        PersistentVolumeClaim, PersistentVolumeClaimSpec, PersistentVolumeClaimVolumeSource,
        RBDVolumeSource,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use std::sync::Arc;

    fn gce(name: &str, ro: bool) -> Volume {
        Volume {
            name: "v".into(),
            gce_persistent_disk: Some(GCEPersistentDiskVolumeSource {
                pd_name: name.into(),
                read_only: Some(ro),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn ebs(id: &str) -> Volume {
        Volume {
            name: "v".into(),
            aws_elastic_block_store: Some(AWSElasticBlockStoreVolumeSource {
                volume_id: id.into(),
                read_only: Some(true),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn iscsi(iqn: &str, ro: bool) -> Volume {
        Volume {
            name: "v".into(),
            iscsi: Some(ISCSIVolumeSource {
                iqn: iqn.into(),
                read_only: Some(ro),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn rbd(monitors: &[&str], pool: Option<&str>, image: &str, ro: bool) -> Volume {
        Volume {
            name: "v".into(),
            rbd: Some(RBDVolumeSource {
                monitors: monitors.iter().map(|m| m.to_string()).collect(),
                pool: pool.map(str::to_string),
                image: image.into(),
                read_only: Some(ro),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn with(v: Volume, name: &str) -> PodBuilder {
        PodBuilder::new(name).with_spec(|s| s.volumes = Some(vec![v]))
    }

    #[test]
    fn single_writer_disks_conflict_unless_all_mounts_are_read_only() {
        let cases = [
            (
                "same gce disk",
                gce("d", false),
                gce("d", true),
                Code::Unschedulable,
            ),
            (
                "gce both read-only",
                gce("d", true),
                gce("d", true),
                Code::Success,
            ),
            (
                "other gce disk",
                gce("d", false),
                gce("e", false),
                Code::Success,
            ),
            (
                "same ebs even read-only",
                ebs("vol-1"),
                ebs("vol-1"),
                Code::Unschedulable,
            ),
            (
                "same iscsi",
                iscsi("iqn.a", false),
                iscsi("iqn.a", true),
                Code::Unschedulable,
            ),
            (
                "iscsi both read-only",
                iscsi("iqn.a", true),
                iscsi("iqn.a", true),
                Code::Success,
            ),
            (
                "rbd sharing a monitor, default pool",
                rbd(&["m1", "m2"], None, "img", false),
                rbd(&["m2"], Some("rbd"), "img", false),
                Code::Unschedulable,
            ),
            (
                "rbd in another pool",
                rbd(&["m1"], Some("a"), "img", false),
                rbd(&["m1"], Some("b"), "img", false),
                Code::Success,
            ),
        ];
        for (name, mine, theirs, want) in cases {
            let n = node("n").info(&[with(theirs, "e").info()]);
            let p = with(mine, "p").info();
            let mut state = CycleState::default();
            let pre = VolumeRestrictions.pre_filter(&mut state, &p, &snapshot(vec![]));
            assert!(pre.status.is_success(), "{name}");
            let got = VolumeRestrictions.filter(&state, &p, &n);
            assert_eq!(got.code(), want, "{name}");
            if want != Code::Success {
                assert_eq!(got.message(), REASON_DISK_CONFLICT, "{name}");
            }
        }
    }

    fn claim(name: &str, mode: &str) -> (String, Arc<PersistentVolumeClaim>) {
        let pvc = PersistentVolumeClaim {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("default".into()),
                ..Default::default()
            },
            spec: Some(PersistentVolumeClaimSpec {
                access_modes: Some(vec![mode.into()]),
                ..Default::default()
            }),
            ..Default::default()
        };
        (format!("default/{name}"), Arc::new(pvc))
    }

    fn using(name: &str, claim: &str) -> PodBuilder {
        with(
            Volume {
                name: "data".into(),
                persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                    claim_name: claim.into(),
                    read_only: None,
                }),
                ..Default::default()
            },
            name,
        )
    }

    /// A cluster of two nodes, `holder` (running pod `e`) and `free`, and its claims.
    fn cluster(e: PodBuilder, claims: &[(&str, &str)]) -> (Snapshot, Arc<PodInfo>) {
        let e = e.info();
        let mut snap = snapshot(vec![
            node("holder").info(std::slice::from_ref(&e)),
            node("free").info(&[]),
        ]);
        snap.set_claims(Arc::new(claims.iter().map(|(n, m)| claim(n, m)).collect()));
        (snap, e)
    }

    #[test]
    fn a_read_write_once_pod_claim_in_use_anywhere_rejects_every_node_until_its_pod_goes() {
        let (snap, holder) = cluster(using("e", "data"), &[("data", "ReadWriteOncePod")]);
        let p = using("p", "data").info();
        let mut state = CycleState::default();
        let pre = VolumeRestrictions.pre_filter(&mut state, &p, &snap);
        assert!(pre.status.is_success());
        for n in snap.nodes() {
            let got = VolumeRestrictions.filter(&state, &p, n);
            assert_eq!(got.code(), Code::Unschedulable, "{}", n.name());
            assert_eq!(got.message(), REASON_RWOP_CONFLICT);
        }
        // preemption's what-if: the pod holding the claim is a victim
        VolumeRestrictions.remove_pod(&mut state, &p, &holder, &snap.nodes()[0]);
        assert!(
            VolumeRestrictions
                .filter(&state, &p, &snap.nodes()[1])
                .is_success()
        );
        VolumeRestrictions.add_pod(&mut state, &p, &holder, &snap.nodes()[0]);
        assert!(
            !VolumeRestrictions
                .filter(&state, &p, &snap.nodes()[1])
                .is_success()
        );
    }

    #[test]
    fn shared_claims_and_other_namespaces_do_not_conflict() {
        for (mode, holder) in [
            ("ReadWriteOnce", using("e", "data")),
            ("ReadWriteOncePod", using("e", "data").namespace("other")),
        ] {
            let (snap, _) = cluster(holder, &[("data", mode)]);
            let p = using("p", "data").info();
            let got = VolumeRestrictions.pre_filter(&mut CycleState::default(), &p, &snap);
            assert!(got.status.is_skip(), "{mode}");
        }
    }

    #[test]
    fn a_missing_claim_is_unresolvable_and_names_it() {
        let (snap, _) = cluster(PodBuilder::new("e"), &[]);
        let p = using("p", "nosuch").info();
        let got = VolumeRestrictions.pre_filter(&mut CycleState::default(), &p, &snap);
        assert_eq!(got.status.code(), Code::UnschedulableAndUnresolvable);
        assert_eq!(
            got.status.message(),
            "persistentvolumeclaim \"nosuch\" not found"
        );
    }

    #[test]
    fn pods_without_restricted_volumes_skip_the_filter() {
        let p = PodBuilder::new("p").info();
        let got = VolumeRestrictions.pre_filter(&mut CycleState::default(), &p, &snapshot(vec![]));
        assert!(got.status.is_skip());
    }
}
