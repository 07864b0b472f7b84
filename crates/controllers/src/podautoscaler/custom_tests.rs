use serde_json::json;

use super::*;

fn selector(v: serde_json::Value) -> LabelSelector {
    serde_json::from_value(v).unwrap()
}

#[test]
fn a_selector_is_described_as_go_prints_a_label_selector() {
    assert_eq!(go_selector(None), "nil");
    let s = selector(json!({"matchLabels": {"queue": "worker", "az": "a"},
        "matchExpressions": [{"key": "tier", "operator": "In", "values": ["x", "y"]}]}));
    assert_eq!(
        go_selector(Some(&s)),
        "&LabelSelector{MatchLabels:map[string]string{az: a,queue: worker,},\
         MatchExpressions:[]LabelSelectorRequirement{\
         LabelSelectorRequirement{Key:tier,Operator:In,Values:[x y],},},}"
    );
}

#[test]
fn a_metric_selector_is_queried_in_its_string_form() {
    assert_eq!(metric_selector(None).unwrap(), "");
    let s = selector(json!({"matchLabels": {"queue": "worker"},
        "matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["x"]}]}));
    assert_eq!(
        metric_selector(Some(&s)).unwrap(),
        "queue=worker,tier notin (x)"
    );
    let bad = selector(json!({"matchExpressions": [{"key": "tier", "operator": "Near"}]}));
    assert!(metric_selector(Some(&bad)).is_err());
}
