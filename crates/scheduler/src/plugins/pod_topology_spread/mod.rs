//! `PodTopologySpread`: spreads matching pods evenly across topology domains (zones,
//! hostnames): `DoNotSchedule` constraints filter, `ScheduleAnyway` ones score. This file
//! owns the args (`defaultConstraints`, `defaultingType`), turning a pod's (or the default)
//! constraints into [`Constraint`]s, and counting matching pods.
//!
//! # Layout
//! - this file: the plugin, its args, constraints, counting.
//! - `domains`: PreFilter's counts per domain, kept across cycles.
//! - `filtering`: PreFilter (counts per domain, minimum per constraint), Filter, the
//!   add/remove hooks preemption uses.
//! - `scoring`: PreScore, Score and NormalizeScore.

mod domains;
mod filtering;
mod scoring;

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Node, Pod, TopologySpreadConstraint};
use serde_json::Value;
use skiff_apimachinery::labels::{Operator, Requirement, Selector};
use skiff_component_helpers::node_affinity::RequiredNodeAffinity;
use skiff_component_helpers::tolerations::{find_untolerated_taint, is_do_not_schedule};

use super::helper::{arg, is_terminating, label_selector, pod_labels, pod_namespace, pod_spec};
use crate::framework::{
    ClassMemo, ClusterEvent, FilterPlugin, NodeInfo, Plugin, PreFilterPlugin, PreScorePlugin,
    ScorePlugin, Workloads,
};

pub const NAME: &str = "PodTopologySpread";

/// Upstream's `ErrReasonConstraintsNotMatch`.
pub const REASON: &str = "node(s) didn't match pod topology spread constraints";
/// Upstream's `ErrReasonNodeLabelNotMatch`: the node lacks a constraint's topology key.
pub const REASON_LABEL: &str =
    "node(s) didn't match pod topology spread constraints (missing required label)";

const HOSTNAME: &str = "kubernetes.io/hostname";
const ZONE: &str = "topology.kubernetes.io/zone";

/// A constraint as the plugin uses it (upstream's internal `topologySpreadConstraint`).
#[derive(Debug, Clone)]
struct Constraint {
    max_skew: i64,
    topology_key: String,
    selector: Selector,
    min_domains: i64,
    /// `nodeAffinityPolicy: Honor` (the default): only nodes matching the pod's node
    /// affinity and selector count.
    honor_node_affinity: bool,
    /// `nodeTaintsPolicy: Honor` (default Ignore): only nodes whose taints the pod tolerates.
    honor_node_taints: bool,
}

impl Constraint {
    /// Whether `node` takes part in this constraint's counting for `pod`.
    fn includes(&self, pod: &Pod, node: &Node, required: &RequiredNodeAffinity) -> bool {
        if self.honor_node_affinity && !required.matches(node) {
            return false;
        }
        if self.honor_node_taints {
            let taints = node.spec.as_ref().and_then(|s| s.taints.as_deref());
            let tolerations = pod_spec(pod).tolerations.as_deref().unwrap_or(&[]);
            if find_untolerated_taint(taints.unwrap_or(&[]), tolerations, is_do_not_schedule)
                .is_some()
            {
                return false;
            }
        }
        true
    }
}

/// Pods on `node` in `ns`, not being deleted, that `selector` matches; an empty selector
/// counts none. `memo`, when counting across many nodes, keeps the answer per pod class.
fn count_matching(
    node: &NodeInfo,
    selector: &Selector,
    ns: &str,
    mut memo: Option<&mut ClassMemo<bool>>,
) -> i64 {
    if selector.is_empty() {
        return 0;
    }
    node.classes
        .iter()
        .filter(|c| {
            let matches = || {
                let p = &c.pod.pod;
                !is_terminating(p) && pod_namespace(p) == ns && selector.matches(pod_labels(p))
            };
            match memo.as_deref_mut() {
                Some(memo) => *memo.get_or(c.id, matches),
                None => matches(),
            }
        })
        .map(|c| i64::from(c.count))
        .sum()
}

/// Whether the node has every constraint's topology key.
fn has_all_keys(node: &Node, constraints: &[Constraint]) -> bool {
    let labels = super::helper::node_labels(node);
    constraints
        .iter()
        .all(|c| labels.contains_key(&c.topology_key))
}

/// The plugin with its `PodTopologySpreadArgs`.
pub struct PodTopologySpread {
    default_constraints: Vec<TopologySpreadConstraint>,
    /// `defaultingType: System`: the built-in defaults, and nodes need not have every key
    /// when scoring.
    system_defaulted: bool,
    domains: domains::DomainCounts,
}

/// Upstream's system default constraints: hostname maxSkew 3, zone maxSkew 5, both
/// ScheduleAnyway.
fn system_default_constraints() -> Vec<TopologySpreadConstraint> {
    [(HOSTNAME, 3), (ZONE, 5)]
        .iter()
        .map(|(key, skew)| TopologySpreadConstraint {
            topology_key: key.to_string(),
            max_skew: *skew,
            when_unsatisfiable: "ScheduleAnyway".into(),
            ..Default::default()
        })
        .collect()
}

impl Default for PodTopologySpread {
    /// Upstream's v1 default: `defaultingType: System`.
    fn default() -> Self {
        PodTopologySpread {
            default_constraints: system_default_constraints(),
            system_defaulted: true,
            domains: Default::default(),
        }
    }
}

impl PodTopologySpread {
    /// From `PodTopologySpreadArgs` (`defaultConstraints`, `defaultingType`).
    pub fn from_args(args: Option<&Value>) -> Result<PodTopologySpread, String> {
        let defaulting = arg::<String>(args, "defaultingType")?.unwrap_or_else(|| "System".into());
        let constraints =
            arg::<Vec<TopologySpreadConstraint>>(args, "defaultConstraints")?.unwrap_or_default();
        for (i, c) in constraints.iter().enumerate() {
            let path = format!("defaultConstraints[{i}]");
            if c.max_skew <= 0 {
                return Err(format!(
                    "{path}.maxSkew: Invalid value: {}: must be greater than zero",
                    c.max_skew
                ));
            }
            if c.topology_key.is_empty() {
                return Err(format!(
                    "{path}.topologyKey: Required value: can not be empty"
                ));
            }
            if !matches!(
                c.when_unsatisfiable.as_str(),
                "DoNotSchedule" | "ScheduleAnyway"
            ) {
                return Err(format!(
                    "{path}.whenUnsatisfiable: Unsupported value: {:?}",
                    c.when_unsatisfiable
                ));
            }
            if c.label_selector.is_some() {
                return Err(format!(
                    "{path}.labelSelector: Forbidden: constraint must not define a selector, as they deduced for each pod"
                ));
            }
        }
        match defaulting.as_str() {
            "System" if !constraints.is_empty() => Err(
                "defaultingType: Invalid value: \"System\": when .defaultConstraints are not empty"
                    .to_string(),
            ),
            "System" => Ok(PodTopologySpread::default()),
            "List" => Ok(PodTopologySpread {
                default_constraints: constraints,
                system_defaulted: false,
                domains: Default::default(),
            }),
            other => Err(format!(
                "defaultingType: Unsupported value: {other:?}: supported values: \"List\", \"System\""
            )),
        }
    }

    /// The pod's constraints with this `whenUnsatisfiable`, or the defaults when it has none
    /// (spreading the pods selected as `workloads` select this one).
    fn constraints(
        &self,
        pod: &Pod,
        action: &str,
        workloads: &Workloads,
    ) -> Result<Vec<Constraint>, String> {
        let own = pod_spec(pod)
            .topology_spread_constraints
            .as_deref()
            .unwrap_or(&[]);
        if !own.is_empty() {
            return convert(own, pod, action);
        }
        let mut defaults = convert(&self.default_constraints, pod, action)?;
        if defaults.is_empty() {
            return Ok(defaults);
        }
        let selector = default_selector(pod, workloads);
        if selector.is_empty() {
            return Ok(Vec::new());
        }
        for c in &mut defaults {
            c.selector = selector.clone();
        }
        Ok(defaults)
    }
}

/// The selector default constraints spread a pod's siblings by (upstream's `DefaultSelector`):
/// the merged selectors of the Services in its namespace that select it, plus the selector of
/// the ReplicaSet or StatefulSet that controls it. Empty (no spreading) when nothing selects it.
fn default_selector(pod: &Pod, workloads: &Workloads) -> Selector {
    let labels = pod_labels(pod);
    let mut merged = BTreeMap::new();
    let services = workloads.services.get(pod_namespace(pod));
    for selector in services.into_iter().flat_map(|s| s.values()) {
        let selects = !selector.is_empty()
            && selector
                .iter()
                .all(|(k, v)| labels.get(k).is_some_and(|l| l == v));
        if selects {
            merged.extend(selector.iter().map(|(k, v)| (k.clone(), v.clone())));
        }
    }
    let mut selector = Selector::from_set(merged);
    let controller = pod
        .metadata
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true));
    if let Some(owner) = controller
        && matches!(owner.kind.as_str(), "ReplicaSet" | "StatefulSet")
    {
        let key = format!("{}/{}/{}", owner.kind, pod_namespace(pod), owner.name);
        if let Some(own) = workloads.controllers.get(&key) {
            for r in own.requirements() {
                selector = selector.with_requirement(r.clone());
            }
        }
    }
    selector
}

fn convert(
    constraints: &[TopologySpreadConstraint],
    pod: &Pod,
    action: &str,
) -> Result<Vec<Constraint>, String> {
    let labels = pod_labels(pod);
    let mut out = Vec::new();
    for c in constraints
        .iter()
        .filter(|c| c.when_unsatisfiable == action)
    {
        let mut selector = label_selector(c.label_selector.as_ref()).map_err(|e| e.to_string())?;
        for key in c.match_label_keys.iter().flatten() {
            if let Some(v) = labels.get(key) {
                let r = Requirement::new(key.as_str(), Operator::In, vec![v.clone()])
                    .map_err(|e| e.to_string())?;
                selector = selector.with_requirement(r);
            }
        }
        out.push(Constraint {
            max_skew: i64::from(c.max_skew),
            topology_key: c.topology_key.clone(),
            selector,
            min_domains: c.min_domains.map_or(1, i64::from),
            honor_node_affinity: c.node_affinity_policy.as_deref() != Some("Ignore"),
            honor_node_taints: c.node_taints_policy.as_deref() == Some("Honor"),
        });
    }
    Ok(out)
}

impl Plugin for PodTopologySpread {
    fn name(&self) -> &'static str {
        NAME
    }
    /// The counts per domain change (upstream: Pod All, Node Add|Delete|UpdateNodeLabel|UpdateNodeTaint).
    fn events(&self) -> ClusterEvent {
        ClusterEvent::NODE_ADD
            .with(ClusterEvent::NODE_LABEL)
            .with(ClusterEvent::NODE_TAINT)
            .with(ClusterEvent::ASSIGNED_POD_ADD)
            .with(ClusterEvent::ASSIGNED_POD_DELETE)
            .with(ClusterEvent::ASSIGNED_POD_LABEL)
    }
    fn as_pre_filter(&self) -> Option<&dyn PreFilterPlugin> {
        Some(self)
    }
    fn as_filter(&self) -> Option<&dyn FilterPlugin> {
        Some(self)
    }
    fn as_pre_score(&self) -> Option<&dyn PreScorePlugin> {
        Some(self)
    }
    fn as_score(&self) -> Option<&dyn ScorePlugin> {
        Some(self)
    }
}

#[cfg(test)]
mod test_support {
    use k8s_openapi::api::core::v1::TopologySpreadConstraint;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

    /// A constraint selecting `app=<app>`.
    pub fn spread(key: &str, skew: i32, when: &str, app: &str) -> TopologySpreadConstraint {
        TopologySpreadConstraint {
            topology_key: key.into(),
            max_skew: skew,
            when_unsatisfiable: when.into(),
            label_selector: Some(LabelSelector {
                match_labels: Some([("app".to_string(), app.to_string())].into()),
                ..Default::default()
            }),
            ..Default::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::testing::PodBuilder;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
    use serde_json::json;

    #[test]
    fn args_default_to_the_system_constraints_and_name_bad_fields() {
        let pl = PodTopologySpread::from_args(None).unwrap();
        assert!(pl.system_defaulted);
        assert_eq!(pl.default_constraints.len(), 2);
        let list = json!({"defaultingType": "List", "defaultConstraints": [
            {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"}]});
        let pl = PodTopologySpread::from_args(Some(&list)).unwrap();
        assert!(!pl.system_defaulted);
        let bad = [
            (json!({"defaultingType": "Other"}), "defaultingType"),
            (
                json!({"defaultConstraints": [{"maxSkew": 1, "topologyKey": "z", "whenUnsatisfiable": "DoNotSchedule"}]}),
                "defaultingType",
            ),
            (
                json!({"defaultingType": "List", "defaultConstraints": [{"maxSkew": 0, "topologyKey": "z", "whenUnsatisfiable": "DoNotSchedule"}]}),
                "defaultConstraints[0].maxSkew",
            ),
            (json!({"defaultConstraints": 1}), "defaultConstraints"),
        ];
        for (args, field) in bad {
            let err = PodTopologySpread::from_args(Some(&args)).err().unwrap();
            assert!(err.starts_with(field), "{err}");
        }
    }

    #[test]
    fn system_default_constraints_spread_what_services_and_controllers_select() {
        let pl = PodTopologySpread::default();
        let bare = PodBuilder::new("p")
            .label("app", "web")
            .label("tier", "front")
            .build();
        let none = Workloads::default();
        assert!(
            pl.constraints(&bare, "ScheduleAnyway", &none)
                .unwrap()
                .is_empty()
        );

        let mut owned = bare.clone();
        owned.metadata.owner_references = Some(vec![OwnerReference {
            kind: "ReplicaSet".into(),
            name: "web-1".into(),
            controller: Some(true),
            ..Default::default()
        }]);
        let mut workloads = Workloads::default();
        workloads.services.insert(
            "default".into(),
            [
                (
                    "web".to_string(),
                    [("app".to_string(), "web".to_string())].into(),
                ),
                (
                    "other".to_string(),
                    [("app".to_string(), "db".to_string())].into(),
                ),
            ]
            .into(),
        );
        workloads.controllers.insert(
            "ReplicaSet/default/web-1".into(),
            Selector::from_set([("tier", "front")]),
        );
        let got = pl
            .constraints(&owned, "ScheduleAnyway", &workloads)
            .unwrap();
        let keys: Vec<_> = got
            .iter()
            .map(|c| (c.topology_key.as_str(), c.max_skew))
            .collect();
        assert_eq!(keys, [(HOSTNAME, 3), (ZONE, 5)]);
        // the web Service's and the ReplicaSet's selectors, not the db Service's
        let sibling: BTreeMap<String, String> = [
            ("app".to_string(), "web".to_string()),
            ("tier".to_string(), "front".to_string()),
        ]
        .into();
        let other_tier: BTreeMap<String, String> = [
            ("app".to_string(), "web".to_string()),
            ("tier".to_string(), "back".to_string()),
        ]
        .into();
        assert!(got[0].selector.matches(&sibling));
        assert!(!got[0].selector.matches(&other_tier));
        // a Service alone is enough, as upstream
        let served = pl.constraints(&bare, "ScheduleAnyway", &workloads).unwrap();
        assert_eq!(served.len(), 2);
        assert!(
            pl.constraints(&owned, "DoNotSchedule", &workloads)
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn match_label_keys_narrow_the_selector_to_the_pods_values() {
        let mut c = test_support::spread("zone", 1, "DoNotSchedule", "web");
        c.match_label_keys = Some(vec!["rev".into(), "absent".into()]);
        let pod = PodBuilder::new("p")
            .label("app", "web")
            .label("rev", "2")
            .with_spec(|s| s.topology_spread_constraints = Some(vec![c]))
            .build();
        let got = PodTopologySpread::default()
            .constraints(&pod, "DoNotSchedule", &Workloads::default())
            .unwrap();
        let same: std::collections::BTreeMap<String, String> =
            [("app".into(), "web".into()), ("rev".into(), "2".into())].into();
        let older: std::collections::BTreeMap<String, String> =
            [("app".into(), "web".into()), ("rev".into(), "1".into())].into();
        assert!(got[0].selector.matches(&same));
        assert!(!got[0].selector.matches(&older));
    }
}
