//! What several plugins share and the framework does not (yet) give them: upstream's
//! `helper.DefaultNormalizeScore`, borrowed label maps without cloning (from the component
//! helpers), `metav1.LabelSelector` to [`Selector`] without a JSON round trip, reading
//! plugin args from `pluginConfig`, and the claims a pod's volumes use.

use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use serde::de::DeserializeOwned;
use serde_json::Value;
use skiff_apimachinery::labels::{Error as LabelError, Operator, Requirement, Selector};
use skiff_component_helpers::ephemeral;
pub use skiff_component_helpers::views::{node_labels, pod_labels, pod_spec};

use crate::framework::{MAX_NODE_SCORE, NodeScore};
pub use crate::framework::{is_terminating, pod_namespace};

/// Scales scores so the highest becomes `max` (upstream's `DefaultNormalizeScore`); with
/// `reverse`, a low raw score is good and the result is `max - scaled`. All zero raw scores
/// stay zero, or become `max` when reversed.
pub fn default_normalize_score(max: i64, reverse: bool, scores: &mut [NodeScore]) {
    let highest = scores.iter().map(|s| s.score).max().unwrap_or(0);
    if highest == 0 {
        if reverse {
            for s in scores.iter_mut() {
                s.score = max;
            }
        }
        return;
    }
    for s in scores.iter_mut() {
        let scaled = max * s.score / highest;
        s.score = if reverse { max - scaled } else { scaled };
    }
}

/// [`default_normalize_score`] onto [`MAX_NODE_SCORE`].
pub fn normalize_to_max(reverse: bool, scores: &mut [NodeScore]) {
    default_normalize_score(MAX_NODE_SCORE, reverse, scores);
}

/// A `metav1.LabelSelector` as a [`Selector`] (upstream's `LabelSelectorAsSelector`): absent
/// matches nothing, one without requirements matches everything.
pub fn label_selector(selector: Option<&LabelSelector>) -> Result<Selector, LabelError> {
    let Some(selector) = selector else {
        return Ok(Selector::nothing());
    };
    let labels = selector.match_labels.iter().flatten();
    let expressions = selector.match_expressions.iter().flatten();
    let mut requirements = Vec::new();
    for (k, v) in labels {
        requirements.push(Requirement::new(
            k.as_str(),
            Operator::Equals,
            vec![v.clone()],
        )?);
    }
    for e in expressions {
        let operator = match e.operator.as_str() {
            "In" => Operator::In,
            "NotIn" => Operator::NotIn,
            "Exists" => Operator::Exists,
            "DoesNotExist" => Operator::DoesNotExist,
            other => return Err(LabelError::UnknownOperator(other.to_string())),
        };
        let values = e.values.clone().unwrap_or_default();
        requirements.push(Requirement::new(e.key.as_str(), operator, values)?);
    }
    Ok(Selector::from_requirements(requirements))
}

/// Reads one field of a plugin's args: absent or null gives `None`; a value of the wrong shape
/// is an error naming the field.
pub fn arg<T: DeserializeOwned>(args: Option<&Value>, field: &str) -> Result<Option<T>, String> {
    let Some(args) = args else { return Ok(None) };
    if args.is_null() {
        return Ok(None);
    }
    let Some(obj) = args.as_object() else {
        return Err("args: must be an object".to_string());
    };
    match obj.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => serde_json::from_value(v.clone())
            .map(Some)
            .map_err(|e| format!("{field}: {e}")),
    }
}

/// A claim one of a pod's volumes uses: a `persistentVolumeClaim` volume's, or the one the
/// ephemeral volume controller makes for a generic ephemeral volume (`<pod>-<volume>`, owned
/// by the pod).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimUse {
    pub name: String,
    pub ephemeral: bool,
}

/// The claims the pod's volumes use, in the order of its volumes.
pub fn pod_claims(pod: &Pod) -> impl Iterator<Item = ClaimUse> + '_ {
    ephemeral::pod_claims(pod).map(|(name, ephemeral)| ClaimUse { name, ephemeral })
}

/// Whether the pod controls the claim made for its ephemeral volume (upstream's
/// `ephemeral.VolumeIsForPod`), with upstream's message when not.
pub fn claim_is_for_pod(pod: &Pod, claim: &PersistentVolumeClaim) -> Result<(), String> {
    ephemeral::volume_is_for_pod(pod, claim)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn scores(raw: &[i64]) -> Vec<NodeScore> {
        raw.iter()
            .enumerate()
            .map(|(i, s)| NodeScore {
                name: format!("n{i}"),
                score: *s,
            })
            .collect()
    }

    #[test]
    fn default_normalize_scales_to_the_highest_and_reverses_when_asked() {
        let cases: [(&str, &[i64], bool, &[i64]); 4] = [
            ("scaled", &[1, 2, 4], false, &[25, 50, 100]),
            ("reversed", &[1, 2, 4], true, &[75, 50, 0]),
            ("all zero", &[0, 0], false, &[0, 0]),
            ("all zero reversed", &[0, 0], true, &[100, 100]),
        ];
        for (name, raw, reverse, want) in cases {
            let mut s = scores(raw);
            normalize_to_max(reverse, &mut s);
            let got: Vec<i64> = s.iter().map(|s| s.score).collect();
            assert_eq!(got, want, "{name}");
        }
    }

    #[test]
    fn a_missing_label_selector_matches_nothing_and_an_empty_one_everything() {
        assert!(label_selector(None).unwrap().is_nothing());
        assert!(
            label_selector(Some(&LabelSelector::default()))
                .unwrap()
                .is_empty()
        );
        let s = LabelSelector {
            match_labels: Some([("app".to_string(), "web".to_string())].into()),
            ..Default::default()
        };
        let sel = label_selector(Some(&s)).unwrap();
        let labels: BTreeMap<String, String> = [("app".to_string(), "web".to_string())].into();
        assert!(sel.matches(&labels));
        assert!(!sel.matches(&BTreeMap::<String, String>::new()));
    }

    #[test]
    fn args_name_the_field_that_does_not_parse() {
        let args = serde_json::json!({"hardPodAffinityWeight": "x"});
        let err = arg::<i32>(Some(&args), "hardPodAffinityWeight").unwrap_err();
        assert!(err.starts_with("hardPodAffinityWeight: "), "{err}");
        assert_eq!(arg::<i32>(None, "hardPodAffinityWeight"), Ok(None));
    }
}
