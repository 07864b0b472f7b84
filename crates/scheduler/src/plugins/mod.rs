//! Upstream's default plugins, one file each, and the registry that builds them by name for
//! a profile.
//!
//! # Layout
//! - [`scheduling_gates`]: `SchedulingGates` (PreEnqueue), pods held back by
//!   `spec.schedulingGates`.
//! - [`priority_sort`]: `PrioritySort` (QueueSort), activeQ's order.
//! - [`node_unschedulable`]: `NodeUnschedulable`, nodes marked `spec.unschedulable`.
//! - [`node_name`]: `NodeName`, pods that name their node.
//! - [`taint_toleration`]: `TaintToleration`, taints the pod must tolerate or prefers to avoid.
//! - [`node_affinity`]: `NodeAffinity`, `nodeSelector` and required/preferred node affinity.
//! - [`node_ports`]: `NodePorts`, host ports already taken on the node.
//! - [`node_resources_fit`]: `NodeResourcesFit`, requests against allocatable, and the
//!   allocation scoring strategies.
//! - [`balanced_allocation`]: `NodeResourcesBalancedAllocation`, evenly used resources.
//! - [`image_locality`]: `ImageLocality`, nodes that already hold the pod's images.
//! - [`pod_topology_spread`]: `PodTopologySpread`, even spreading over zones and hosts.
//! - [`inter_pod_affinity`]: `InterPodAffinity`, pod affinity and anti-affinity by domain.
//! - [`volume_restrictions`]: `VolumeRestrictions`, single-writer disks already in use.
//! - [`node_volume_limits`]: `NodeVolumeLimits`, CSI volumes per node within the CSINode's
//!   limits.
//! - [`volume_binding`]: `VolumeBinding`, claims bound or bindable on the node, bound (and
//!   provisioned) before the pod.
//! - [`volume_zone`]: `VolumeZone`, bound volumes' zone and region labels.
//! - [`default_preemption`]: `DefaultPreemption`, evicting lower-priority pods when none fits.
//! - [`resource_allocation`]: the requested/allocatable scoring both resource plugins share.
//! - [`helper`]: score normalization, borrowed labels, label selectors, plugin args.

pub mod balanced_allocation;
pub mod default_preemption;
pub mod helper;
pub mod image_locality;
pub mod inter_pod_affinity;
pub mod node_affinity;
pub mod node_name;
pub mod node_ports;
pub mod node_resources_fit;
pub mod node_unschedulable;
pub mod node_volume_limits;
pub mod pod_topology_spread;
pub mod priority_sort;
pub mod resource_allocation;
pub mod scheduling_gates;
pub mod taint_toleration;
pub mod volume_binding;
pub mod volume_restrictions;
pub mod volume_zone;

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::Value;

use crate::api::ClusterApi;
use crate::binder::{self, DefaultBinder};
use crate::framework::Plugin;
use crate::volumes::Volumes;

/// What a plugin may use besides its args (upstream's `framework.Handle`): the scheduler's
/// writes, and the storage caches the volume plugins read.
#[derive(Clone)]
pub struct Handle {
    pub api: Arc<dyn ClusterApi>,
    pub volumes: Arc<Volumes>,
}

impl Handle {
    /// With empty storage caches (a scheduler fed without informers, and tests).
    pub fn new(api: Arc<dyn ClusterApi>) -> Handle {
        Handle {
            api,
            volumes: Volumes::empty(),
        }
    }
}

/// Builds a plugin from its `pluginConfig` args (None when the profile gives none) and the
/// handle; a bad argument is an error naming it.
pub type Factory = fn(Option<&Value>, &Handle) -> Result<Arc<dyn Plugin>, String>;

/// Every plugin Skiff knows, by upstream name.
pub fn registry() -> BTreeMap<&'static str, Factory> {
    let mut r: BTreeMap<&'static str, Factory> = BTreeMap::new();
    r.insert(scheduling_gates::NAME, |_, _| {
        Ok(Arc::new(scheduling_gates::SchedulingGates))
    });
    r.insert(priority_sort::NAME, |_, _| {
        Ok(Arc::new(priority_sort::PrioritySort))
    });
    r.insert(node_unschedulable::NAME, |_, _| {
        Ok(Arc::new(node_unschedulable::NodeUnschedulable))
    });
    r.insert(node_name::NAME, |_, _| Ok(Arc::new(node_name::NodeName)));
    r.insert(taint_toleration::NAME, |_, _| {
        Ok(Arc::new(taint_toleration::TaintToleration))
    });
    r.insert(node_affinity::NAME, |args, _| {
        Ok(Arc::new(node_affinity::NodeAffinity::from_args(args)?))
    });
    r.insert(node_ports::NAME, |_, _| Ok(Arc::new(node_ports::NodePorts)));
    r.insert(node_resources_fit::NAME, |args, _| {
        Ok(Arc::new(node_resources_fit::NodeResourcesFit::from_args(
            args,
        )?))
    });
    r.insert(balanced_allocation::NAME, |args, _| {
        Ok(Arc::new(
            balanced_allocation::BalancedAllocation::from_args(args)?,
        ))
    });
    r.insert(image_locality::NAME, |_, _| {
        Ok(Arc::new(image_locality::ImageLocality))
    });
    r.insert(pod_topology_spread::NAME, |args, _| {
        Ok(Arc::new(pod_topology_spread::PodTopologySpread::from_args(
            args,
        )?))
    });
    r.insert(inter_pod_affinity::NAME, |args, _| {
        Ok(Arc::new(inter_pod_affinity::InterPodAffinity::from_args(
            args,
        )?))
    });
    r.insert(volume_restrictions::NAME, |_, _| {
        Ok(Arc::new(volume_restrictions::VolumeRestrictions))
    });
    r.insert(node_volume_limits::NAME, |_, h| {
        Ok(Arc::new(node_volume_limits::NodeVolumeLimits::new(
            h.volumes.clone(),
        )))
    });
    r.insert(volume_binding::NAME, |args, h| {
        Ok(Arc::new(volume_binding::VolumeBinding::from_args(
            args,
            h.volumes.clone(),
            h.api.clone(),
        )?))
    });
    r.insert(volume_zone::NAME, |_, h| {
        Ok(Arc::new(volume_zone::VolumeZone::new(h.volumes.clone())))
    });
    r.insert(binder::NAME, |_, h| {
        Ok(Arc::new(DefaultBinder::new(h.api.clone())))
    });
    r.insert(default_preemption::NAME, |args, _| {
        Ok(Arc::new(default_preemption::DefaultPreemption::from_args(
            args,
        )?))
    });
    r
}

/// The default profile's plugins in upstream's order, with their Score weights (upstream's
/// `getDefaultPlugins` for `kubescheduler.config.k8s.io/v1`); plugins without a Score get 0.
pub fn default_plugins() -> Vec<(&'static str, i64)> {
    vec![
        (scheduling_gates::NAME, 0),
        (priority_sort::NAME, 0),
        (node_unschedulable::NAME, 0),
        (node_name::NAME, 0),
        (taint_toleration::NAME, 3),
        (node_affinity::NAME, 2),
        (node_ports::NAME, 0),
        (node_resources_fit::NAME, 1),
        (volume_restrictions::NAME, 0),
        (node_volume_limits::NAME, 0),
        (volume_binding::NAME, 0),
        (volume_zone::NAME, 0),
        (pod_topology_spread::NAME, 2),
        (inter_pod_affinity::NAME, 2),
        (default_preemption::NAME, 0),
        (balanced_allocation::NAME, 1),
        (image_locality::NAME, 1),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn handle() -> Handle {
        Handle::new(crate::api::RecordingApi::new())
    }

    #[test]
    fn every_default_plugin_is_registered_and_weighted_only_if_it_scores() {
        let r = registry();
        for (name, weight) in default_plugins() {
            let factory = r
                .get(name)
                .unwrap_or_else(|| panic!("{name} not registered"));
            let plugin = factory(None, &handle()).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(plugin.name(), name);
            assert_eq!(plugin.as_score().is_some(), weight > 0, "{name}");
        }
    }

    #[test]
    fn factories_reject_bad_args_naming_the_field() {
        let r = registry();
        let cases = [
            (
                node_affinity::NAME,
                serde_json::json!({"addedAffinity": []}),
                "addedAffinity",
            ),
            (
                node_resources_fit::NAME,
                serde_json::json!({"scoringStrategy": {"type": "Nope"}}),
                "scoringStrategy.type",
            ),
            (
                balanced_allocation::NAME,
                serde_json::json!({"resources": {}}),
                "resources",
            ),
            (
                pod_topology_spread::NAME,
                serde_json::json!({"defaultingType": 1}),
                "defaultingType",
            ),
            (
                inter_pod_affinity::NAME,
                serde_json::json!({"hardPodAffinityWeight": -1}),
                "hardPodAffinityWeight",
            ),
            (
                default_preemption::NAME,
                serde_json::json!({"minCandidateNodesPercentage": 200}),
                "minCandidateNodesPercentage",
            ),
            (
                volume_binding::NAME,
                serde_json::json!({"bindTimeoutSeconds": -1}),
                "bindTimeoutSeconds",
            ),
        ];
        for (name, args, field) in cases {
            let err = r[name](Some(&args), &handle())
                .err()
                .unwrap_or_else(|| panic!("{name} accepted"));
            assert!(err.starts_with(field), "{name}: {err}");
        }
    }
}
