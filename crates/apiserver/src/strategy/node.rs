//! Nodes: the `spec.unschedulable` field set (`"false"` when unset, as upstream prints the
//! bool), `podCIDR` following `podCIDRs[0]` (the `v1` conversion), upstream's taint and pod
//! CIDR checks, and the update rule that `podCIDRs` and `providerID` change only from unset.
//! The status a kubelet registers with is kept (generic rules).

use serde_json::{Value, json};
use skiff_apimachinery::validation::{
    FieldError, FieldPath, is_qualified_name, is_valid_label_value,
};

use super::Strategy;
use super::common::{object_at, str_at, valid_cidr};

#[derive(Debug)]
pub struct NodeStrategy;

const CIDR_MESSAGE: &str = "must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)";
const POD_CIDR_CHANGE: &str = "node updates may not change podCIDR except from \"\" to valid";

fn sync_pod_cidrs(node: &mut Value) {
    let spec = object_at(node, "spec");
    let cidrs = spec
        .get("podCIDRs")
        .and_then(Value::as_array)
        .filter(|a| !a.is_empty());
    match cidrs.and_then(|a| a.first()).cloned() {
        Some(first) => spec["podCIDR"] = first,
        None => {
            let single = spec
                .get("podCIDR")
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty());
            if let Some(cidr) = single.map(str::to_string) {
                spec["podCIDRs"] = json!([cidr]);
            }
        }
    }
}

fn pod_cidrs(node: &Value) -> Vec<String> {
    node.pointer("/spec/podCIDRs")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|v| v.as_str().map(str::to_string))
        .collect()
}

/// Upstream's `validateNodeTaints`: qualified keys, label-like values, a known effect, and no
/// two taints with one key and effect.
fn validate_taints(node: &Value) -> Vec<FieldError> {
    let path = FieldPath::new("spec").child("taints");
    let mut errs = Vec::new();
    let mut seen: Vec<(String, String)> = Vec::new();
    let taints = node.pointer("/spec/taints").and_then(Value::as_array);
    for (i, taint) in taints.into_iter().flatten().enumerate() {
        let p = path.index(i);
        let key = str_at(taint, "/key");
        for msg in is_qualified_name(key) {
            errs.push(FieldError::invalid(&p.child("key"), key, msg));
        }
        let value = str_at(taint, "/value");
        let value_errs = is_valid_label_value(value);
        if !value_errs.is_empty() {
            errs.push(FieldError::invalid(
                &p.child("value"),
                value,
                value_errs.join(";"),
            ));
        }
        let effect = str_at(taint, "/effect");
        match effect {
            "" => errs.push(FieldError::required(&p.child("effect"), "")),
            "NoSchedule" | "PreferNoSchedule" | "NoExecute" => {}
            other => errs.push(FieldError::not_supported(
                &p.child("effect"),
                other,
                &["NoSchedule", "PreferNoSchedule", "NoExecute"],
            )),
        }
        let pair = (key.to_string(), effect.to_string());
        if seen.contains(&pair) {
            let mut dup = FieldError::duplicate(&p, taint.clone());
            dup.detail = "taints must be unique by key and effect pair".into();
            errs.push(dup);
        } else {
            seen.push(pair);
        }
    }
    errs
}

impl Strategy for NodeStrategy {
    fn prepare_for_create(&self, node: &mut Value) {
        sync_pod_cidrs(node);
    }

    fn prepare_for_update(&self, node: &mut Value, _old: &Value) {
        sync_pod_cidrs(node);
    }

    fn validate(&self, node: &Value) -> Vec<FieldError> {
        let mut errs = validate_taints(node);
        let path = FieldPath::new("spec").child("podCIDRs");
        let cidrs = pod_cidrs(node);
        for (i, cidr) in cidrs.iter().enumerate() {
            if !valid_cidr(cidr) {
                errs.push(FieldError::invalid(
                    &path.index(i),
                    cidr.as_str(),
                    CIDR_MESSAGE,
                ));
            }
        }
        let v6 = |c: &String| c.contains(':');
        if cidrs.len() > 2 || (cidrs.len() == 2 && v6(&cidrs[0]) == v6(&cidrs[1])) {
            errs.push(FieldError::invalid(
                &path,
                json!(cidrs),
                "may specify no more than one CIDR for each IP family",
            ));
        }
        errs
    }

    fn validate_update(&self, node: &Value, old: &Value) -> Vec<FieldError> {
        let mut errs = self.validate(node);
        let old_cidrs = pod_cidrs(old);
        if !old_cidrs.is_empty() && old_cidrs != pod_cidrs(node) {
            errs.push(FieldError::forbidden(
                &FieldPath::new("spec").child("podCIDRs"),
                POD_CIDR_CHANGE,
            ));
        }
        let old_provider = str_at(old, "/spec/providerID");
        if !old_provider.is_empty() && old_provider != str_at(node, "/spec/providerID") {
            errs.push(FieldError::forbidden(
                &FieldPath::new("spec").child("providerID"),
                "node updates may not change providerID except from \"\" to valid",
            ));
        }
        errs
    }

    fn fields(&self, node: &Value) -> Vec<(&'static str, String)> {
        let unschedulable = node.pointer("/spec/unschedulable") == Some(&json!(true));
        vec![("spec.unschedulable", unschedulable.to_string())]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn errors(errs: Vec<FieldError>) -> Vec<String> {
        errs.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn unschedulable_reads_false_when_unset() {
        let cases = [
            (json!({}), "false"),
            (json!({"spec": {"unschedulable": true}}), "true"),
        ];
        for (node, want) in cases {
            assert_eq!(
                NodeStrategy.fields(&node),
                vec![("spec.unschedulable", want.to_string())]
            );
        }
    }

    #[test]
    fn pod_cidr_follows_pod_cidrs_and_may_only_be_set_once() {
        let mut node = json!({"spec": {"podCIDR": "10.42.0.0/24"}});
        NodeStrategy.prepare_for_create(&mut node);
        assert_eq!(node["spec"]["podCIDRs"], json!(["10.42.0.0/24"]));
        let mut moved = json!({"spec": {"podCIDRs": ["10.42.1.0/24"]}});
        NodeStrategy.prepare_for_update(&mut moved, &node);
        assert_eq!(moved["spec"]["podCIDR"], "10.42.1.0/24");
        assert_eq!(
            errors(NodeStrategy.validate_update(&moved, &node)),
            vec![format!("spec.podCIDRs: Forbidden: {POD_CIDR_CHANGE}")]
        );
        let unset = json!({"spec": {}});
        assert!(NodeStrategy.validate_update(&node, &unset).is_empty());
    }

    #[test]
    fn taints_are_validated_as_upstream() {
        let cases = [
            (json!({"key": "gpu", "effect": "NoSchedule"}), vec![]),
            (
                json!({"key": "gpu"}),
                vec!["spec.taints[0].effect: Required value"],
            ),
            (
                json!({"key": "gpu", "effect": "Sometimes"}),
                vec![
                    "spec.taints[0].effect: Unsupported value: \"Sometimes\": supported values: \"NoSchedule\", \"PreferNoSchedule\", \"NoExecute\"",
                ],
            ),
        ];
        for (taint, want) in cases {
            let node = json!({"spec": {"taints": [taint]}});
            assert_eq!(errors(NodeStrategy.validate(&node)), want, "{taint}");
        }
        let twice = json!({"spec": {"taints": [{"key": "a", "effect": "NoExecute"},
                                               {"key": "a", "effect": "NoExecute"}]}});
        assert_eq!(
            errors(NodeStrategy.validate(&twice)),
            vec![
                "spec.taints[1]: Duplicate value: {\"effect\":\"NoExecute\",\"key\":\"a\"}: taints must be unique by key and effect pair"
            ]
        );
    }
}
