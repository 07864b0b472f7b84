//! `VolumeRestrictions`: a pod cannot share a node with a pod using the same single-writer
//! disk (GCE PD and iSCSI unless both mount read-only, AWS EBS always, RBD unless both
//! read-only). The `ReadWriteOncePod` PVC check needs a PVC lister and is not done here.

use k8s_openapi::api::core::v1::Volume;

use super::helper::pod_spec;
use crate::framework::{
    ClusterEvent, CycleState, FilterPlugin, NodeInfo, Plugin, PodInfo, PreFilterPlugin,
    PreFilterResult, Snapshot, Status,
};

pub const NAME: &str = "VolumeRestrictions";

/// Upstream's `ErrReasonDiskConflict`.
pub const REASON_DISK_CONFLICT: &str = "node(s) had no available disk";

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
    /// The pod using the volume gone (upstream: Pod Delete; PVC events are not served).
    fn events(&self) -> ClusterEvent {
        ClusterEvent::ASSIGNED_POD_DELETE
    }
    fn as_pre_filter(&self) -> Option<&dyn PreFilterPlugin> {
        Some(self)
    }
    fn as_filter(&self) -> Option<&dyn FilterPlugin> {
        Some(self)
    }
}

impl PreFilterPlugin for VolumeRestrictions {
    fn pre_filter(&self, _: &mut CycleState, pod: &PodInfo, _: &Snapshot) -> PreFilterResult {
        let volumes = pod_spec(&pod.pod).volumes.as_deref().unwrap_or(&[]);
        if volumes.iter().any(restricted) {
            Status::success().into()
        } else {
            Status::skip().into()
        }
    }
}

impl FilterPlugin for VolumeRestrictions {
    fn filter(&self, _: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        let volumes = pod_spec(&pod.pod).volumes.as_deref().unwrap_or(&[]);
        for v in volumes.iter().filter(|v| restricted(v)) {
            for other in &node.pods {
                let theirs = pod_spec(&other.pod).volumes.as_deref().unwrap_or(&[]);
                if conflicts(v, theirs) {
                    return Status::unschedulable(REASON_DISK_CONFLICT);
                }
            }
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
        RBDVolumeSource,
    };

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

    #[test]
    fn pods_without_restricted_volumes_skip_the_filter() {
        let p = PodBuilder::new("p").info();
        let got = VolumeRestrictions.pre_filter(&mut CycleState::default(), &p, &snapshot(vec![]));
        assert!(got.status.is_skip());
    }
}
