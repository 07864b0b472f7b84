//! `NodeVolumeLimits`: a node takes no more volumes of a CSI driver than its CSINode allows
//! (`spec.drivers[].allocatable.count`), counting the pod's new volumes with those its pods
//! already use, each volume once. A claim's driver is its bound volume's `csi.driver`, or for
//! an unbound claim its class's provisioner (counted as a volume of its own). Nodes without a
//! CSINode, and drivers without a count, have no limit.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::CSINode;
use skiff_component_helpers::volume as helpers;

use super::helper::{claim_is_for_pod, pod_claims, pod_namespace};
use crate::framework::{
    ClusterEvent, CycleState, FilterPlugin, NodeInfo, Plugin, PodInfo, PreFilterPlugin,
    PreFilterResult, Snapshot, Status,
};
use crate::volumes::Volumes;

pub const NAME: &str = "NodeVolumeLimits";

/// Upstream's `ErrReasonMaxVolumeCountExceeded`.
pub const REASON_MAX_VOLUME_COUNT: &str = "node(s) exceed max volume count";

const STATE_KEY: &str = "PreFilterNodeVolumeLimits";

/// The pod's CSI volumes (unique name → driver), or why they cannot be worked out.
type NewVolumes = Result<HashMap<String, String>, Status>;

pub struct NodeVolumeLimits {
    volumes: Arc<Volumes>,
}

impl NodeVolumeLimits {
    pub fn new(volumes: Arc<Volumes>) -> NodeVolumeLimits {
        NodeVolumeLimits { volumes }
    }

    /// The claim's CSI driver and volume handle (upstream's `getCSIDriverInfo`): its bound
    /// volume's, or, unbound (or its volume not seen yet), its class's provisioner with a
    /// handle of its own.
    fn driver_of(&self, claim: &PersistentVolumeClaim) -> Option<(String, String)> {
        let bound = claim
            .spec
            .as_ref()
            .and_then(|s| s.volume_name.as_deref())
            .filter(|v| !v.is_empty());
        if let Some(volume) = bound.and_then(|v| self.volumes.volumes.get_api(v)) {
            let csi = volume.spec.as_ref()?.csi.as_ref()?;
            return Some((csi.driver.clone(), csi.volume_handle.clone()));
        }
        let class = helpers::claim_class(claim);
        if class.is_empty() {
            return None;
        }
        let class = self.volumes.class(class)?;
        let handle = format!(
            "unbound-{}/{}",
            claim.metadata.namespace.as_deref().unwrap_or(""),
            claim.metadata.name.as_deref().unwrap_or("")
        );
        Some((class.provisioner.clone(), handle))
    }

    /// The CSI volumes of `pod`'s claims into `out` (upstream's `filterAttachableVolumes`): a
    /// new pod's missing claim is unresolvable, an existing pod's is not counted.
    fn attachable(
        &self,
        pod: &Pod,
        new_pod: bool,
        out: &mut HashMap<String, String>,
    ) -> Result<(), Status> {
        let namespace = pod_namespace(pod);
        for used in pod_claims(pod) {
            if used.name.is_empty() {
                return Err(Status::error("PersistentVolumeClaim had no name"));
            }
            let key = format!("{namespace}/{}", used.name);
            let Some(claim) = self.volumes.claims.get_api(&key) else {
                if new_pod {
                    return Err(Status::unresolvable(format!(
                        "looking up PVC {key}: persistentvolumeclaim {:?} not found",
                        used.name
                    )));
                }
                continue;
            };
            if used.ephemeral {
                claim_is_for_pod(pod, &claim).map_err(Status::error)?;
            }
            if let Some((driver, handle)) = self.driver_of(&claim)
                && !driver.is_empty()
                && !handle.is_empty()
            {
                out.insert(format!("{driver}/{handle}"), driver);
            }
        }
        Ok(())
    }
}

/// Each driver's volume limit on the node (upstream's `getVolumeLimits`).
fn limits(csi_node: &CSINode) -> BTreeMap<&str, i32> {
    csi_node
        .spec
        .drivers
        .iter()
        .filter_map(|d| Some((d.name.as_str(), d.allocatable.as_ref()?.count?)))
        .collect()
}

impl Plugin for NodeVolumeLimits {
    fn name(&self) -> &'static str {
        NAME
    }
    /// A CSINode added or changed, a pod deleted from a node, a claim added.
    fn events(&self) -> ClusterEvent {
        ClusterEvent::CSI_NODE_CHANGE
            .with(ClusterEvent::ASSIGNED_POD_DELETE)
            .with(ClusterEvent::PVC_CHANGE)
    }
    fn as_pre_filter(&self) -> Option<&dyn PreFilterPlugin> {
        Some(self)
    }
    fn as_filter(&self) -> Option<&dyn FilterPlugin> {
        Some(self)
    }
}

impl PreFilterPlugin for NodeVolumeLimits {
    /// Skips pods without claims; works out the pod's own volumes once for every node.
    fn pre_filter(&self, state: &mut CycleState, pod: &PodInfo, _: &Snapshot) -> PreFilterResult {
        if pod_claims(&pod.pod).next().is_none() {
            return Status::skip().into();
        }
        let mut new = HashMap::new();
        let found: NewVolumes = self.attachable(&pod.pod, true, &mut new).map(|()| new);
        state.write(STATE_KEY, Arc::new(found));
        Status::success().into()
    }
}

impl FilterPlugin for NodeVolumeLimits {
    fn filter(&self, state: &CycleState, _: &PodInfo, node: &NodeInfo) -> Status {
        let Some(found) = state.read::<Arc<NewVolumes>>(STATE_KEY) else {
            return Status::success();
        };
        let new = match found.as_ref() {
            Err(status) => return status.clone(),
            Ok(new) if new.is_empty() => return Status::success(),
            Ok(new) => new,
        };
        let Some(csi_node) = self.volumes.csi_node(node.name()) else {
            return Status::success();
        };
        let limits = limits(&csi_node);
        if limits.is_empty() {
            return Status::success();
        }
        let mut attached = HashMap::new();
        for other in &node.pods {
            if let Err(status) = self.attachable(&other.pod, false, &mut attached) {
                return status;
            }
        }
        let mut attached_count: HashMap<&str, i64> = HashMap::new();
        for driver in attached.values() {
            *attached_count.entry(driver).or_default() += 1;
        }
        let mut new_count: HashMap<&str, i64> = HashMap::new();
        // a volume already in use on the node is not new
        for (_, driver) in new.iter().filter(|(n, _)| !attached.contains_key(*n)) {
            *new_count.entry(driver).or_default() += 1;
        }
        for (driver, count) in new_count {
            let Some(&limit) = limits.get(driver) else {
                continue;
            };
            if attached_count.get(driver).copied().unwrap_or(0) + count > i64::from(limit) {
                return Status::unschedulable(REASON_MAX_VOLUME_COUNT);
            }
        }
        Status::success()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::Code;
    use crate::framework::testing::{PodBuilder, node};
    use crate::volumes::Caches;
    use k8s_openapi::api::core::v1::{PersistentVolume, Volume};
    use k8s_openapi::api::storage::v1::StorageClass;
    use serde_json::json;
    use skiff_runtime::informer::Cache;

    fn parse<K: serde::de::DeserializeOwned>(v: Vec<serde_json::Value>) -> Vec<K> {
        v.into_iter()
            .map(|o| serde_json::from_value(o).unwrap())
            .collect()
    }

    /// Claims `a`…`d` bound to CSI volumes of driver `ebs` (handles `h-a`…), claim `fresh`
    /// unbound of a class provisioned by `ebs`, ephemeral claims `p-scratch` (pod `p`'s) and
    /// `q-scratch` (not pod `q`'s) bound to `c`'s volume, and node `n1` allowed 2 `ebs`
    /// volumes.
    fn plugin() -> NodeVolumeLimits {
        let mut claims = Vec::new();
        let mut volumes = Vec::new();
        for name in ["a", "b", "c", "d"] {
            claims.push(json!({"metadata": {"namespace": "default", "name": name},
                               "spec": {"volumeName": format!("pv-{name}")}}));
            volumes.push(json!({"metadata": {"name": format!("pv-{name}")},
                "spec": {"csi": {"driver": "ebs", "volumeHandle": format!("h-{name}")}}}));
        }
        claims.push(
            json!({"metadata": {"namespace": "default", "name": "fresh"},
                           "spec": {"storageClassName": "gp"}}),
        );
        for (pod, owner) in [("p", "uid-p"), ("q", "uid-other")] {
            claims.push(json!({"metadata": {"namespace": "default",
                "name": format!("{pod}-scratch"),
                "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": pod,
                    "uid": owner, "controller": true}]},
                "spec": {"volumeName": "pv-c"}}));
        }
        let class = json!({"metadata": {"name": "gp"}, "provisioner": "ebs"});
        let csi_node = json!({"metadata": {"name": "n1"}, "spec": {"drivers": [
            {"name": "ebs", "nodeID": "i-1", "allocatable": {"count": 2}},
            {"name": "other", "nodeID": "i-1"}]}});
        NodeVolumeLimits::new(Volumes::new(Caches {
            claims: Cache::from_objects(parse::<PersistentVolumeClaim>(claims)),
            volumes: Cache::from_objects(parse::<PersistentVolume>(volumes)),
            classes: Cache::from_objects(parse::<StorageClass>(vec![class])),
            csi_nodes: Cache::from_objects(parse::<CSINode>(vec![csi_node])),
            ..Caches::default()
        }))
    }

    fn using(name: &str, claims: &[&str]) -> PodBuilder {
        PodBuilder::new(name).claims(claims)
    }

    fn decide(pl: &NodeVolumeLimits, pod: &PodInfo, n: &NodeInfo) -> Status {
        let mut state = CycleState::default();
        let pre = pl.pre_filter(&mut state, pod, &Snapshot::default());
        if pre.status.is_skip() {
            return Status::success();
        }
        pl.filter(&state, pod, n)
    }

    #[test]
    fn new_volumes_and_those_in_use_on_the_node_stay_within_the_drivers_count() {
        let pl = plugin();
        let running = using("e", &["a"]).node_name("n1").info();
        let n1 = node("n1").info(&[running]);
        assert!(decide(&pl, &using("p", &["b"]).info(), &n1).is_success());
        let over = decide(&pl, &using("p", &["b", "c"]).info(), &n1);
        assert_eq!(over.code(), Code::Unschedulable);
        assert_eq!(over.message(), REASON_MAX_VOLUME_COUNT);
        // a volume the node already uses is counted once
        assert!(decide(&pl, &using("p", &["a", "b"]).info(), &n1).is_success());
        // an unbound claim counts under its class's provisioner
        let fresh = decide(&pl, &using("p", &["b", "fresh"]).info(), &n1);
        assert_eq!(fresh.code(), Code::Unschedulable);
        // no CSINode: no limit
        let n2 = node("n2").info(&[]);
        assert!(decide(&pl, &using("p", &["a", "b", "c", "d"]).info(), &n2).is_success());
    }

    #[test]
    fn an_ephemeral_volume_counts_its_own_claim_and_refuses_another_pods() {
        let pl = plugin();
        // b, and c through the ephemeral volume's claim (`p-scratch`, the pod's own)
        let with_scratch = |name: &str| {
            using(name, &["b"])
                .with_spec(|s| {
                    s.volumes.get_or_insert_default().push(Volume {
                        name: "scratch".into(),
                        ephemeral: Some(Default::default()),
                        ..Default::default()
                    })
                })
                .info()
        };
        let running = using("e", &["a"]).node_name("n1").info();
        let n1 = node("n1").info(&[running]);
        // on top of a: over the node's 2
        let over = decide(&pl, &with_scratch("p"), &n1);
        assert_eq!(over.code(), Code::Unschedulable);
        assert_eq!(over.message(), REASON_MAX_VOLUME_COUNT);
        assert!(decide(&pl, &with_scratch("p"), &node("n1").info(&[])).is_success());
        // `q-scratch` is another pod's
        let foreign = decide(&pl, &with_scratch("q"), &n1);
        assert_eq!(foreign.code(), Code::Error);
        assert_eq!(
            foreign.message(),
            "PVC default/q-scratch was not created for pod default/q (pod is not owner)"
        );
    }

    #[test]
    fn a_new_pods_missing_claim_is_unresolvable() {
        let pl = plugin();
        let got = decide(&pl, &using("p", &["nosuch"]).info(), &node("n1").info(&[]));
        assert_eq!(got.code(), Code::UnschedulableAndUnresolvable);
        assert_eq!(
            got.message(),
            "looking up PVC default/nosuch: persistentvolumeclaim \"nosuch\" not found"
        );
    }
}
