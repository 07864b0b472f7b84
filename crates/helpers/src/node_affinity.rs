//! Node selector terms as upstream's `component-helpers/scheduling/corev1/nodeaffinity`:
//! terms are ORed, a term's requirements ANDed, an empty term matches nothing;
//! `matchExpressions` on labels (In, NotIn, Exists, DoesNotExist, Gt, Lt), `matchFields` on
//! `metadata.name` (In, NotIn, one value). Also a pod's required node affinity together with
//! its `nodeSelector` ([`RequiredNodeAffinity`]), which the scheduler's NodeAffinity and
//! PodTopologySpread, the kubelet's admission and the DaemonSet controller use.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Node, NodeSelector as K8sNodeSelector, NodeSelectorRequirement, NodeSelectorTerm, Pod,
    PreferredSchedulingTerm,
};
use skiff_apimachinery::labels::{Operator, Requirement};

use crate::views::{node_labels, pod_spec};

/// `matchFields` on `metadata.name`.
#[derive(Debug, Clone)]
struct NameRequirement {
    name: String,
    equal: bool,
}

/// One parsed, non-empty term.
#[derive(Debug, Clone)]
struct Term {
    labels: Vec<Requirement>,
    names: Vec<NameRequirement>,
}

impl Term {
    fn parse(term: &NodeSelectorTerm, path: &str) -> Result<Option<Term>, Vec<String>> {
        let exprs = term.match_expressions.as_deref().unwrap_or(&[]);
        let fields = term.match_fields.as_deref().unwrap_or(&[]);
        if exprs.is_empty() && fields.is_empty() {
            return Ok(None);
        }
        let mut errs = Vec::new();
        let mut labels = Vec::new();
        for (i, r) in exprs.iter().enumerate() {
            match label_requirement(r) {
                Ok(req) => labels.push(req),
                Err(e) => errs.push(format!("{path}.matchExpressions[{i}]: {e}")),
            }
        }
        let mut names = Vec::new();
        for (i, r) in fields.iter().enumerate() {
            let p = format!("{path}.matchFields[{i}]");
            if r.key != "metadata.name" {
                errs.push(format!("{p}.key: Unsupported value: {:?}", r.key));
                continue;
            }
            let values = r.values.as_deref().unwrap_or(&[]);
            if values.len() != 1 {
                errs.push(format!("{p}.values: Invalid value: must have one element"));
                continue;
            }
            let equal = match r.operator.as_str() {
                "In" => true,
                "NotIn" => false,
                other => {
                    errs.push(format!("{p}.operator: Unsupported value: {other:?}"));
                    continue;
                }
            };
            names.push(NameRequirement {
                name: values[0].clone(),
                equal,
            });
        }
        if errs.is_empty() {
            Ok(Some(Term { labels, names }))
        } else {
            Err(errs)
        }
    }

    fn matches(&self, labels: &BTreeMap<String, String>, name: &str) -> bool {
        self.labels.iter().all(|r| r.matches(labels))
            && self.names.iter().all(|r| (r.name == name) == r.equal)
    }
}

fn label_requirement(r: &NodeSelectorRequirement) -> Result<Requirement, String> {
    let op = match r.operator.as_str() {
        "In" => Operator::In,
        "NotIn" => Operator::NotIn,
        "Exists" => Operator::Exists,
        "DoesNotExist" => Operator::DoesNotExist,
        "Gt" => Operator::GreaterThan,
        "Lt" => Operator::LessThan,
        other => return Err(format!("{other:?} is not a valid node selector operator")),
    };
    Requirement::new(r.key.as_str(), op, r.values.clone().unwrap_or_default())
        .map_err(|e| e.to_string())
}

/// Required node selector terms (`requiredDuringSchedulingIgnoredDuringExecution`).
#[derive(Debug, Clone, Default)]
pub struct NodeSelector {
    terms: Vec<Term>,
}

impl NodeSelector {
    /// Parses every term, failing on any invalid one (upstream's `NewNodeSelector`, used for
    /// configuration).
    pub fn parse(ns: &K8sNodeSelector) -> Result<NodeSelector, String> {
        let (sel, errs) = Self::parse_lenient(ns);
        if errs.is_empty() {
            Ok(sel)
        } else {
            Err(errs.join(", "))
        }
    }

    /// Keeps the valid terms and reports the others, which match nothing (upstream's
    /// `NewLazyErrorNodeSelector`, used for pods).
    pub fn parse_lenient(ns: &K8sNodeSelector) -> (NodeSelector, Vec<String>) {
        let mut terms = Vec::new();
        let mut errs = Vec::new();
        for (i, t) in ns.node_selector_terms.iter().enumerate() {
            match Term::parse(t, &format!("nodeSelectorTerms[{i}]")) {
                Ok(Some(term)) => terms.push(term),
                Ok(None) => {}
                Err(e) => errs.extend(e),
            }
        }
        (NodeSelector { terms }, errs)
    }

    /// Whether any term matches the node.
    pub fn matches(&self, node: &Node) -> bool {
        let labels = node_labels(node);
        let name = node.metadata.name.as_deref().unwrap_or("");
        self.terms.iter().any(|t| t.matches(labels, name))
    }
}

/// Weighted preferred terms (`preferredDuringSchedulingIgnoredDuringExecution`).
#[derive(Debug, Clone, Default)]
pub struct PreferredTerms {
    terms: Vec<(i64, Term)>,
}

impl PreferredTerms {
    /// Parses the terms, skipping zero weights and empty preferences; any invalid term is an
    /// error (upstream's `NewPreferredSchedulingTerms`).
    pub fn parse(terms: &[PreferredSchedulingTerm]) -> Result<PreferredTerms, String> {
        let mut out = Vec::new();
        let mut errs = Vec::new();
        for (i, t) in terms.iter().enumerate() {
            if t.weight == 0 {
                continue;
            }
            match Term::parse(&t.preference, &format!("[{i}].preference")) {
                Ok(Some(term)) => out.push((i64::from(t.weight), term)),
                Ok(None) => {}
                Err(e) => errs.extend(e),
            }
        }
        if errs.is_empty() {
            Ok(PreferredTerms { terms: out })
        } else {
            Err(errs.join(", "))
        }
    }

    /// The sum of the weights of the terms the node matches.
    pub fn score(&self, node: &Node) -> i64 {
        let labels = node_labels(node);
        let name = node.metadata.name.as_deref().unwrap_or("");
        self.terms
            .iter()
            .filter(|(_, t)| t.matches(labels, name))
            .map(|(w, _)| w)
            .sum()
    }

    pub fn is_empty(&self) -> bool {
        self.terms.is_empty()
    }
}

/// A pod's `nodeSelector` and required node affinity together (upstream's
/// `RequiredNodeAffinity`); invalid affinity terms are ignored as upstream does for pods.
#[derive(Debug, Clone, Default)]
pub struct RequiredNodeAffinity {
    node_selector: Option<BTreeMap<String, String>>,
    required: Option<NodeSelector>,
}

impl RequiredNodeAffinity {
    pub fn of(pod: &Pod) -> RequiredNodeAffinity {
        let spec = pod_spec(pod);
        let required = spec
            .affinity
            .as_ref()
            .and_then(|a| a.node_affinity.as_ref())
            .and_then(|na| {
                na.required_during_scheduling_ignored_during_execution
                    .as_ref()
            })
            .map(|ns| NodeSelector::parse_lenient(ns).0);
        RequiredNodeAffinity {
            node_selector: spec.node_selector.clone(),
            required,
        }
    }

    /// Whether the pod has neither a node selector nor required node affinity (every node
    /// matches).
    pub fn is_empty(&self) -> bool {
        self.node_selector.as_ref().is_none_or(|s| s.is_empty()) && self.required.is_none()
    }

    pub fn matches(&self, node: &Node) -> bool {
        if let Some(sel) = &self.node_selector {
            let labels = node_labels(node);
            if !sel.iter().all(|(k, v)| labels.get(k) == Some(v)) {
                return false;
            }
        }
        self.required.as_ref().is_none_or(|r| r.matches(node))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str, labels: &[(&str, &str)]) -> Node {
        let mut n = Node::default();
        n.metadata.name = Some(name.into());
        n.metadata.labels = Some(
            labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        );
        n
    }

    fn req(key: &str, op: &str, values: &[&str]) -> NodeSelectorRequirement {
        NodeSelectorRequirement {
            key: key.into(),
            operator: op.into(),
            values: (!values.is_empty()).then(|| values.iter().map(|v| v.to_string()).collect()),
        }
    }

    fn term(
        exprs: Vec<NodeSelectorRequirement>,
        fields: Vec<NodeSelectorRequirement>,
    ) -> NodeSelectorTerm {
        NodeSelectorTerm {
            match_expressions: (!exprs.is_empty()).then_some(exprs),
            match_fields: (!fields.is_empty()).then_some(fields),
        }
    }

    #[test]
    fn terms_are_ored_and_requirements_anded() {
        let n = node("n1", &[("zone", "a"), ("cores", "8")]);
        let cases = [
            (
                "In matches",
                vec![term(vec![req("zone", "In", &["a", "b"])], vec![])],
                true,
            ),
            (
                "NotIn excludes",
                vec![term(vec![req("zone", "NotIn", &["a"])], vec![])],
                false,
            ),
            (
                "Exists",
                vec![term(vec![req("zone", "Exists", &[])], vec![])],
                true,
            ),
            (
                "DoesNotExist",
                vec![term(vec![req("gpu", "DoesNotExist", &[])], vec![])],
                true,
            ),
            (
                "Gt",
                vec![term(vec![req("cores", "Gt", &["4"])], vec![])],
                true,
            ),
            (
                "Lt",
                vec![term(vec![req("cores", "Lt", &["4"])], vec![])],
                false,
            ),
            (
                "requirements anded",
                vec![term(
                    vec![req("zone", "In", &["a"]), req("cores", "Lt", &["4"])],
                    vec![],
                )],
                false,
            ),
            (
                "terms ored",
                vec![
                    term(vec![req("zone", "In", &["b"])], vec![]),
                    term(vec![], vec![req("metadata.name", "In", &["n1"])]),
                ],
                true,
            ),
            (
                "name NotIn",
                vec![term(vec![], vec![req("metadata.name", "NotIn", &["n1"])])],
                false,
            ),
            (
                "empty term matches nothing",
                vec![term(vec![], vec![])],
                false,
            ),
            ("no terms match nothing", vec![], false),
            (
                "an invalid term matches nothing but others still count",
                vec![
                    term(vec![req("zone", "Bogus", &["a"])], vec![]),
                    term(vec![req("zone", "In", &["a"])], vec![]),
                ],
                true,
            ),
        ];
        for (name, terms, want) in cases {
            let ns = K8sNodeSelector {
                node_selector_terms: terms,
            };
            let (sel, _) = NodeSelector::parse_lenient(&ns);
            assert_eq!(sel.matches(&n), want, "{name}");
        }
    }

    #[test]
    fn strict_parsing_names_the_bad_requirement() {
        let ns = K8sNodeSelector {
            node_selector_terms: vec![term(vec![], vec![req("metadata.uid", "In", &["x"])])],
        };
        let err = NodeSelector::parse(&ns).unwrap_err();
        assert!(
            err.contains("nodeSelectorTerms[0].matchFields[0].key"),
            "{err}"
        );
    }

    #[test]
    fn preferred_terms_sum_the_weights_that_match() {
        let n = node("n1", &[("zone", "a"), ("disk", "ssd")]);
        let pt = |w, k: &str, v: &str| PreferredSchedulingTerm {
            weight: w,
            preference: term(vec![req(k, "In", &[v])], vec![]),
        };
        let terms = PreferredTerms::parse(&[
            pt(5, "zone", "a"),
            pt(3, "disk", "ssd"),
            pt(7, "zone", "b"),
            pt(0, "zone", "a"),
        ])
        .unwrap();
        assert_eq!(terms.score(&n), 8);
    }
}
