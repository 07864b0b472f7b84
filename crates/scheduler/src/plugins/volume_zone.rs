//! `VolumeZone`: the zone and region labels of the volumes bound to a pod's claims
//! (`topology.kubernetes.io/zone`, `…/region`, and their deprecated `failure-domain.beta…`
//! forms; a value may list several zones joined by `__`) must match the node's, unless the node
//! has none of those labels. Unbound claims of `WaitForFirstConsumer` classes are VolumeBinding's
//! business; an unbound claim of any other class is unresolvable here.

use std::collections::BTreeSet;
use std::sync::Arc;

use k8s_openapi::api::core::v1::PersistentVolume;
use skiff_component_helpers::volume as helpers;

use super::helper::pod_spec;
use crate::framework::{
    ClusterEvent, CycleState, FilterPlugin, NodeInfo, Plugin, PodInfo, PreFilterPlugin,
    PreFilterResult, Snapshot, Status,
};
use crate::volumes::Volumes;

pub const NAME: &str = "VolumeZone";

/// Upstream's `ErrReasonConflict`.
pub const REASON_CONFLICT: &str = "node(s) had no available volume zone";

const STATE_KEY: &str = "PreFilterVolumeZone";

const BETA_ZONE: &str = "failure-domain.beta.kubernetes.io/zone";
const BETA_REGION: &str = "failure-domain.beta.kubernetes.io/region";
const ZONE: &str = "topology.kubernetes.io/zone";
const REGION: &str = "topology.kubernetes.io/region";

/// The labels looked at, in upstream's order.
const TOPOLOGY_LABELS: [&str; 4] = [BETA_ZONE, BETA_REGION, ZONE, REGION];

/// The GA form of a deprecated label (a node may carry only that).
fn ga_label(key: &str) -> &str {
    match key {
        BETA_ZONE => ZONE,
        BETA_REGION => REGION,
        other => other,
    }
}

/// One topology label of a bound volume: its key and the values it allows.
#[derive(Debug, Clone, PartialEq, Eq)]
struct TopologyPair {
    key: &'static str,
    values: BTreeSet<String>,
}

/// The zones a label value lists (upstream's `LabelZonesToSet`): `None` when one is empty.
fn zones(value: &str) -> Option<BTreeSet<String>> {
    let set: BTreeSet<String> = value.split("__").map(str::to_string).collect();
    (!set.iter().any(String::is_empty)).then_some(set)
}

fn topologies(volume: &PersistentVolume) -> impl Iterator<Item = TopologyPair> + '_ {
    let labels = volume.metadata.labels.as_ref();
    TOPOLOGY_LABELS.into_iter().filter_map(move |key| {
        let values = zones(labels?.get(key)?)?;
        Some(TopologyPair { key, values })
    })
}

pub struct VolumeZone {
    volumes: Arc<Volumes>,
}

impl VolumeZone {
    pub fn new(volumes: Arc<Volumes>) -> VolumeZone {
        VolumeZone { volumes }
    }

    /// The topology labels of the volumes bound to the pod's claims (upstream's
    /// `getPVbyPod`).
    fn pod_topologies(&self, pod: &PodInfo) -> Result<Vec<TopologyPair>, Status> {
        let mut out = Vec::new();
        let volumes = pod_spec(&pod.pod).volumes.iter().flatten();
        for claim_name in volumes.filter_map(|v| v.persistent_volume_claim.as_ref()) {
            let name = claim_name.claim_name.as_str();
            if name.is_empty() {
                return Err(Status::unresolvable("PersistentVolumeClaim had no name"));
            }
            let key = format!("{}/{name}", pod.namespace());
            let Some(claim) = self.volumes.claims.get_api(&key) else {
                return Err(Status::unresolvable(format!(
                    "persistentvolumeclaim {name:?} not found"
                )));
            };
            let volume_name = claim
                .spec
                .as_ref()
                .and_then(|s| s.volume_name.as_deref())
                .unwrap_or("");
            if volume_name.is_empty() {
                let class = helpers::claim_class(&claim);
                if class.is_empty() {
                    return Err(Status::unresolvable(
                        "PersistentVolumeClaim had no pv name and storageClass name",
                    ));
                }
                let Some(sc) = self.volumes.class(class) else {
                    return Err(Status::unresolvable(format!(
                        "storageclass.storage.k8s.io {class:?} not found"
                    )));
                };
                if sc.volume_binding_mode.is_none() {
                    return Err(Status::unresolvable(format!(
                        "VolumeBindingMode not set for StorageClass {class:?}"
                    )));
                }
                if helpers::is_delay_binding(&sc) {
                    continue;
                }
                return Err(Status::unresolvable("PersistentVolume had no name"));
            }
            let Some(volume) = self.volumes.volumes.get_api(volume_name) else {
                return Err(Status::unresolvable(format!(
                    "persistentvolume {volume_name:?} not found"
                )));
            };
            out.extend(topologies(&volume));
        }
        Ok(out)
    }
}

impl Plugin for VolumeZone {
    fn name(&self) -> &'static str {
        NAME
    }
    /// Classes added; nodes added or relabelled (upstream: and taints); claims and volumes
    /// added or changed.
    fn events(&self) -> ClusterEvent {
        ClusterEvent::STORAGE_CLASS_CHANGE
            .with(ClusterEvent::NODE_ADD)
            .with(ClusterEvent::NODE_LABEL)
            .with(ClusterEvent::NODE_TAINT)
            .with(ClusterEvent::PVC_CHANGE)
            .with(ClusterEvent::PV_CHANGE)
    }
    fn as_pre_filter(&self) -> Option<&dyn PreFilterPlugin> {
        Some(self)
    }
    fn as_filter(&self) -> Option<&dyn FilterPlugin> {
        Some(self)
    }
}

impl PreFilterPlugin for VolumeZone {
    fn pre_filter(&self, state: &mut CycleState, pod: &PodInfo, _: &Snapshot) -> PreFilterResult {
        match self.pod_topologies(pod) {
            Err(status) => status.into(),
            Ok(pairs) if pairs.is_empty() => Status::skip().into(),
            Ok(pairs) => {
                state.write(STATE_KEY, pairs);
                Status::success().into()
            }
        }
    }
}

impl FilterPlugin for VolumeZone {
    fn filter(&self, state: &CycleState, _: &PodInfo, node: &NodeInfo) -> Status {
        let Some(pairs) = state.read::<Vec<TopologyPair>>(STATE_KEY) else {
            return Status::success();
        };
        let Some(labels) = node.node.metadata.labels.as_ref() else {
            return Status::success();
        };
        if !TOPOLOGY_LABELS.iter().any(|l| labels.contains_key(*l)) {
            // the node has no zone constraints
            return Status::success();
        }
        for pair in pairs {
            let value = labels
                .get(pair.key)
                .or_else(|| labels.get(ga_label(pair.key)));
            if value.is_none_or(|v| !pair.values.contains(v)) {
                return Status::unresolvable(REASON_CONFLICT);
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
    use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Volume};
    use k8s_openapi::api::storage::v1::StorageClass;
    use serde_json::json;
    use skiff_runtime::informer::Cache;

    fn plugin(
        claims: Vec<serde_json::Value>,
        volumes: Vec<serde_json::Value>,
        classes: Vec<serde_json::Value>,
    ) -> VolumeZone {
        fn parse<K: serde::de::DeserializeOwned>(v: Vec<serde_json::Value>) -> Vec<K> {
            v.into_iter()
                .map(|o| serde_json::from_value(o).unwrap())
                .collect()
        }
        VolumeZone::new(Volumes::new(Caches {
            claims: Cache::from_objects(parse::<PersistentVolumeClaim>(claims)),
            volumes: Cache::from_objects(parse::<PersistentVolume>(volumes)),
            classes: Cache::from_objects(parse::<StorageClass>(classes)),
            ..Caches::default()
        }))
    }

    fn claim(name: &str, volume: Option<&str>, class: &str) -> serde_json::Value {
        json!({"metadata": {"namespace": "default", "name": name},
               "spec": {"volumeName": volume, "storageClassName": class}})
    }

    fn pv(name: &str, labels: serde_json::Value) -> serde_json::Value {
        json!({"metadata": {"name": name, "labels": labels}})
    }

    fn using(claim: &str) -> Arc<PodInfo> {
        PodBuilder::new("p")
            .with_spec(|s| {
                s.volumes = Some(vec![Volume {
                    name: "data".into(),
                    persistent_volume_claim: Some(
                        k8s_openapi::api::core::v1::PersistentVolumeClaimVolumeSource {
                            claim_name: claim.into(),
                            read_only: None,
                        },
                    ),
                    ..Default::default()
                }])
            })
            .info()
    }

    fn decide(pl: &VolumeZone, pod: &PodInfo, n: &NodeInfo) -> Status {
        let mut state = CycleState::default();
        let pre = pl.pre_filter(&mut state, pod, &Snapshot::default());
        if !pre.status.is_success() {
            return pre.status;
        }
        pl.filter(&state, pod, n)
    }

    #[test]
    fn a_bound_volumes_zone_must_be_the_nodes_unless_the_node_has_no_zone() {
        let pl = plugin(
            vec![claim("data", Some("pv-a"), "")],
            vec![pv(
                "pv-a",
                json!({"topology.kubernetes.io/zone": "a__b", "topology.kubernetes.io/region": "r"}),
            )],
            vec![],
        );
        let pod = using("data");
        let zoned = |zone: &str| {
            node(zone)
                .label("topology.kubernetes.io/zone", zone)
                .label("topology.kubernetes.io/region", "r")
                .info(&[])
        };
        assert!(decide(&pl, &pod, &zoned("a")).is_success());
        assert!(decide(&pl, &pod, &zoned("b")).is_success());
        let c = decide(&pl, &pod, &zoned("c"));
        assert_eq!(c.code(), Code::UnschedulableAndUnresolvable);
        assert_eq!(c.message(), REASON_CONFLICT);
        assert!(decide(&pl, &pod, &node("plain").info(&[])).is_success());
    }

    #[test]
    fn a_deprecated_volume_label_matches_the_nodes_ga_label() {
        let pl = plugin(
            vec![claim("data", Some("old"), "")],
            vec![pv(
                "old",
                json!({"failure-domain.beta.kubernetes.io/zone": "a"}),
            )],
            vec![],
        );
        let pod = using("data");
        let ga = node("n")
            .label("topology.kubernetes.io/zone", "a")
            .info(&[]);
        assert!(decide(&pl, &pod, &ga).is_success());
        let other = node("m")
            .label("topology.kubernetes.io/zone", "b")
            .info(&[]);
        assert!(!decide(&pl, &pod, &other).is_success());
    }

    #[test]
    fn unbound_claims_wait_for_volume_binding_or_are_unresolvable() {
        let classes = vec![
            json!({"metadata": {"name": "wait"}, "provisioner": "p",
                   "volumeBindingMode": "WaitForFirstConsumer"}),
            json!({"metadata": {"name": "now"}, "provisioner": "p",
                   "volumeBindingMode": "Immediate"}),
        ];
        let pl = plugin(
            vec![
                claim("later", None, "wait"),
                claim("now", None, "now"),
                claim("none", None, ""),
            ],
            vec![],
            classes,
        );
        let n = node("n").info(&[]);
        let mut state = CycleState::default();
        let pod = using("later");
        assert!(
            pl.pre_filter(&mut state, &pod, &Snapshot::default())
                .status
                .is_skip()
        );
        for (claim, message) in [
            ("now", "PersistentVolume had no name"),
            (
                "none",
                "PersistentVolumeClaim had no pv name and storageClass name",
            ),
            ("nosuch", "persistentvolumeclaim \"nosuch\" not found"),
        ] {
            let got = decide(&pl, &using(claim), &n);
            assert_eq!(got.code(), Code::UnschedulableAndUnresolvable, "{claim}");
            assert_eq!(got.message(), message);
        }
    }
}
