//! `InterPodAffinity`: pod affinity and anti-affinity between the pod and the pods already
//! placed, per topology domain. This file owns the args (`hardPodAffinityWeight`,
//! `ignorePreferredTermsOfExistingPods`), affinity terms as the plugin matches them, and the
//! per-(key, value) counters both halves use.
//!
//! A term selects pods in its `namespaces` and in the namespaces whose labels its
//! `namespaceSelector` matches (the scheduler watches namespaces; the snapshot carries their
//! labels).
//!
//! # Layout
//! - this file: the plugin, its args, [`AffinityTerm`], [`TopologyCounts`].
//! - `filtering`: PreFilter, Filter and the add/remove hooks for required terms.
//! - `scoring`: PreScore, Score and NormalizeScore for preferred terms.

mod filtering;
mod scoring;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, Pod, PodAffinityTerm, WeightedPodAffinityTerm};
use serde_json::Value;
use skiff_apimachinery::labels::Selector;

use super::helper::{arg, label_selector, node_labels, pod_labels, pod_namespace, pod_spec};
use crate::framework::{
    ClusterEvent, FilterPlugin, NamespaceLabels, Plugin, PodInfo, PreFilterPlugin, PreScorePlugin,
    ScorePlugin,
};

pub const NAME: &str = "InterPodAffinity";

/// Upstream's `ErrReasonAffinityRulesNotMatch`.
pub const REASON_AFFINITY: &str = "node(s) didn't match pod affinity rules";
/// Upstream's `ErrReasonAntiAffinityRulesNotMatch`.
pub const REASON_ANTI_AFFINITY: &str = "node(s) didn't match pod anti-affinity rules";
/// Upstream's `ErrReasonExistingAntiAffinityRulesNotMatch`.
pub const REASON_EXISTING_ANTI_AFFINITY: &str =
    "node(s) didn't satisfy existing pods anti-affinity rules";

/// A pod affinity term ready to match pods (upstream's `framework.AffinityTerm`).
#[derive(Debug, Clone)]
struct AffinityTerm {
    namespaces: BTreeSet<String>,
    /// Namespaces by their labels (`{}`: every namespace; none: no namespace).
    namespace_selector: Selector,
    selector: Selector,
    topology_key: String,
}

impl AffinityTerm {
    /// `owner` is the pod the term belongs to: its namespace is the default.
    fn parse(owner: &Pod, term: &PodAffinityTerm) -> Result<AffinityTerm, String> {
        let selector = label_selector(term.label_selector.as_ref()).map_err(|e| e.to_string())?;
        let listed = term.namespaces.as_deref().unwrap_or(&[]);
        let namespaces = if listed.is_empty() && term.namespace_selector.is_none() {
            [pod_namespace(owner).to_string()].into()
        } else {
            listed.iter().cloned().collect()
        };
        let namespace_selector =
            label_selector(term.namespace_selector.as_ref()).map_err(|e| e.to_string())?;
        Ok(AffinityTerm {
            namespaces,
            namespace_selector,
            selector,
            topology_key: term.topology_key.clone(),
        })
    }

    /// Whether `pod` is one of the pods this term selects; `ns` gives namespaces' labels.
    fn matches(&self, pod: &Pod, ns: &NamespaceLabels) -> bool {
        let namespace = pod_namespace(pod);
        let in_namespace = self.namespaces.contains(namespace)
            || (!self.namespace_selector.is_nothing()
                && self
                    .namespace_selector
                    .matches(ns.get(namespace).unwrap_or(&BTreeMap::new())));
        in_namespace && self.selector.matches(pod_labels(pod))
    }
}

/// Whether `pod` matches every term (and there is at least one).
fn matches_all(terms: &[AffinityTerm], pod: &Pod, ns: &NamespaceLabels) -> bool {
    !terms.is_empty() && terms.iter().all(|t| t.matches(pod, ns))
}

/// Which of a pod's term lists to read.
#[derive(Clone, Copy)]
enum Kind {
    Affinity,
    AntiAffinity,
}

fn raw_required(pod: &Pod, kind: Kind) -> &[PodAffinityTerm] {
    let a = pod_spec(pod).affinity.as_ref();
    let terms = match kind {
        Kind::Affinity => a.and_then(|a| a.pod_affinity.as_ref()).and_then(|p| {
            p.required_during_scheduling_ignored_during_execution
                .as_deref()
        }),
        Kind::AntiAffinity => a.and_then(|a| a.pod_anti_affinity.as_ref()).and_then(|p| {
            p.required_during_scheduling_ignored_during_execution
                .as_deref()
        }),
    };
    terms.unwrap_or(&[])
}

fn raw_preferred(pod: &Pod, kind: Kind) -> &[WeightedPodAffinityTerm] {
    let a = pod_spec(pod).affinity.as_ref();
    let terms = match kind {
        Kind::Affinity => a.and_then(|a| a.pod_affinity.as_ref()).and_then(|p| {
            p.preferred_during_scheduling_ignored_during_execution
                .as_deref()
        }),
        Kind::AntiAffinity => a.and_then(|a| a.pod_anti_affinity.as_ref()).and_then(|p| {
            p.preferred_during_scheduling_ignored_during_execution
                .as_deref()
        }),
    };
    terms.unwrap_or(&[])
}

/// The incoming pod's required terms; a bad term is an error.
fn required_terms(pod: &Pod, kind: Kind) -> Result<Vec<AffinityTerm>, String> {
    raw_required(pod, kind)
        .iter()
        .map(|t| AffinityTerm::parse(pod, t))
        .collect()
}

/// The incoming pod's preferred terms with their weights; a bad term is an error.
fn preferred_terms(pod: &Pod, kind: Kind) -> Result<Vec<(i64, AffinityTerm)>, String> {
    raw_preferred(pod, kind)
        .iter()
        .map(|t| {
            Ok((
                i64::from(t.weight),
                AffinityTerm::parse(pod, &t.pod_affinity_term)?,
            ))
        })
        .collect()
}

/// An existing pod's terms, parsed once per `PodInfo`; terms that do not parse are left out.
#[derive(Debug, Default)]
struct ExistingTerms {
    required_affinity: Vec<AffinityTerm>,
    required_anti_affinity: Vec<AffinityTerm>,
    preferred_affinity: Vec<(i64, AffinityTerm)>,
    preferred_anti_affinity: Vec<(i64, AffinityTerm)>,
}

/// Memo key for [`ExistingTerms`] on a `PodInfo`.
const TERMS_MEMO: &str = "InterPodAffinity/terms";

fn existing_terms(pod: &PodInfo) -> Arc<ExistingTerms> {
    pod.memo(TERMS_MEMO, |p| ExistingTerms {
        required_affinity: existing_required(p, Kind::Affinity),
        required_anti_affinity: existing_required(p, Kind::AntiAffinity),
        preferred_affinity: existing_preferred(p, Kind::Affinity),
        preferred_anti_affinity: existing_preferred(p, Kind::AntiAffinity),
    })
}

/// An existing pod's required terms; terms that do not parse are left out.
fn existing_required(pod: &Pod, kind: Kind) -> Vec<AffinityTerm> {
    raw_required(pod, kind)
        .iter()
        .filter_map(|t| AffinityTerm::parse(pod, t).ok())
        .collect()
}

/// An existing pod's preferred terms; terms that do not parse are left out.
fn existing_preferred(pod: &Pod, kind: Kind) -> Vec<(i64, AffinityTerm)> {
    raw_preferred(pod, kind)
        .iter()
        .filter_map(|t| {
            Some((
                i64::from(t.weight),
                AffinityTerm::parse(pod, &t.pod_affinity_term).ok()?,
            ))
        })
        .collect()
}

/// Counts per topology key and value (upstream's `topologyToMatchedTermCount`); entries
/// that drop to zero are removed.
#[derive(Debug, Clone, Default)]
struct TopologyCounts(HashMap<String, HashMap<String, i64>>);

impl TopologyCounts {
    /// Adds `delta` to the node's domain for `key`, if the node has that label.
    fn update(&mut self, node: &Node, key: &str, delta: i64) {
        let Some(value) = node_labels(node).get(key) else {
            return;
        };
        let by_value = self.0.entry(key.to_string()).or_default();
        let count = by_value.entry(value.clone()).or_default();
        *count += delta;
        if *count == 0 {
            by_value.remove(value);
            if by_value.is_empty() {
                self.0.remove(key);
            }
        }
    }

    fn get(&self, key: &str, value: &str) -> i64 {
        self.0
            .get(key)
            .and_then(|m| m.get(value))
            .copied()
            .unwrap_or(0)
    }

    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// For each term `pod` matches, count the node's domain (anti-affinity).
    fn add_matching_terms(
        &mut self,
        terms: &[AffinityTerm],
        pod: &Pod,
        node: &Node,
        delta: i64,
        ns: &NamespaceLabels,
    ) {
        for t in terms {
            if t.matches(pod, ns) {
                self.update(node, &t.topology_key, delta);
            }
        }
    }

    /// If `pod` matches every term, count the node's domain for each (affinity).
    fn add_if_all_match(
        &mut self,
        terms: &[AffinityTerm],
        pod: &Pod,
        node: &Node,
        delta: i64,
        ns: &NamespaceLabels,
    ) {
        if matches_all(terms, pod, ns) {
            for t in terms {
                self.update(node, &t.topology_key, delta);
            }
        }
    }
}

/// The plugin with its `InterPodAffinityArgs`.
pub struct InterPodAffinity {
    hard_pod_affinity_weight: i64,
    ignore_preferred_terms_of_existing_pods: bool,
}

impl Default for InterPodAffinity {
    /// Upstream's v1 defaults: `hardPodAffinityWeight: 1`, existing pods' preferred terms count.
    fn default() -> Self {
        InterPodAffinity {
            hard_pod_affinity_weight: 1,
            ignore_preferred_terms_of_existing_pods: false,
        }
    }
}

impl InterPodAffinity {
    /// From `InterPodAffinityArgs`.
    pub fn from_args(args: Option<&Value>) -> Result<InterPodAffinity, String> {
        let mut pl = InterPodAffinity::default();
        if let Some(w) = arg::<i64>(args, "hardPodAffinityWeight")? {
            if !(0..=100).contains(&w) {
                return Err(format!(
                    "hardPodAffinityWeight: Invalid value: {w}: not in valid range [0, 100]"
                ));
            }
            pl.hard_pod_affinity_weight = w;
        }
        if let Some(b) = arg::<bool>(args, "ignorePreferredTermsOfExistingPods")? {
            pl.ignore_preferred_terms_of_existing_pods = b;
        }
        Ok(pl)
    }
}

impl Plugin for InterPodAffinity {
    fn name(&self) -> &'static str {
        NAME
    }
    /// Pods matching its terms come or go, or nodes' topology labels change (upstream: Pod All, Node Add|UpdateNodeLabel).
    fn events(&self) -> ClusterEvent {
        ClusterEvent::NODE_ADD
            .with(ClusterEvent::NODE_LABEL)
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
    use k8s_openapi::api::core::v1::PodAffinityTerm;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

    /// A term selecting `app=<app>` in the owner's namespace.
    pub fn term(key: &str, app: &str) -> PodAffinityTerm {
        PodAffinityTerm {
            topology_key: key.into(),
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
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
    use serde_json::json;

    #[test]
    fn terms_match_pods_in_their_namespaces() {
        let owner = PodBuilder::new("o").namespace("team").build();
        let web_in = |ns: &str| {
            PodBuilder::new("p")
                .namespace(ns)
                .label("app", "web")
                .build()
        };
        let base = test_support::term("zone", "web");
        let listed = PodAffinityTerm {
            namespaces: Some(vec!["other".into()]),
            ..base.clone()
        };
        let everywhere = PodAffinityTerm {
            namespace_selector: Some(LabelSelector::default()),
            ..base.clone()
        };
        let labelled = PodAffinityTerm {
            namespace_selector: Some(LabelSelector {
                match_labels: Some([("env".to_string(), "prod".to_string())].into()),
                ..Default::default()
            }),
            ..base.clone()
        };
        let cases = [
            ("own namespace by default", &base, "team", true),
            ("not another by default", &base, "other", false),
            ("listed namespace", &listed, "other", true),
            ("listed replaces the default", &listed, "team", false),
            (
                "empty namespace selector is every namespace",
                &everywhere,
                "any",
                true,
            ),
            (
                "a namespace selector matches namespaces by label",
                &labelled,
                "shop",
                true,
            ),
            (
                "and not the others, the owner's own included",
                &labelled,
                "team",
                false,
            ),
            ("nor namespaces it has not seen", &labelled, "new", false),
        ];
        let namespaces: NamespaceLabels = [
            (
                "shop".to_string(),
                [("env".to_string(), "prod".to_string())].into(),
            ),
            (
                "team".to_string(),
                [("env".to_string(), "dev".to_string())].into(),
            ),
        ]
        .into();
        for (name, t, ns, want) in cases {
            let term = AffinityTerm::parse(&owner, t).unwrap();
            assert_eq!(term.matches(&web_in(ns), &namespaces), want, "{name}");
        }
    }

    #[test]
    fn args_check_the_hard_pod_affinity_weight() {
        let pl = InterPodAffinity::from_args(Some(&json!({"hardPodAffinityWeight": 5}))).unwrap();
        assert_eq!(pl.hard_pod_affinity_weight, 5);
        let err = InterPodAffinity::from_args(Some(&json!({"hardPodAffinityWeight": 101})))
            .err()
            .unwrap();
        assert!(err.starts_with("hardPodAffinityWeight"), "{err}");
    }
}
