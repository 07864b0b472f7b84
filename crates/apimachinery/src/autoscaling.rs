//! `autoscaling/v1` HorizontalPodAutoscalers as views of the `autoscaling/v2` objects the server
//! stores and handles (upstream's `autoscaling/v1` conversion).
//!
//! v1 has one metric, a CPU utilisation target (`targetCPUUtilizationPercentage`), and one
//! current value (`currentCPUUtilizationPercentage`). What v2 holds beyond that travels in
//! upstream's round-trip annotations, so that a v1 client reading and writing back an object keeps
//! it whole:
//! - `autoscaling.alpha.kubernetes.io/metrics`: the metrics other than the CPU utilisation
//!   target, in v1's (v2beta1-shaped) `MetricSpec` JSON;
//! - `autoscaling.alpha.kubernetes.io/current-metrics`: every current metric, as `MetricStatus`;
//! - `autoscaling.alpha.kubernetes.io/conditions`: the conditions;
//! - `autoscaling.alpha.kubernetes.io/behavior`: `spec.behavior`.
//!
//! Reading v1 back takes those annotations off again; a v1 object with neither a CPU target nor
//! other metrics gets upstream's implicit 80 % CPU target.

use serde_json::{Map, Value, json};

/// The metrics other than the CPU utilisation target.
pub const METRIC_SPECS_ANNOTATION: &str = "autoscaling.alpha.kubernetes.io/metrics";
/// Every current metric.
pub const METRIC_STATUSES_ANNOTATION: &str = "autoscaling.alpha.kubernetes.io/current-metrics";
/// The conditions.
pub const CONDITIONS_ANNOTATION: &str = "autoscaling.alpha.kubernetes.io/conditions";
/// `spec.behavior`.
pub const BEHAVIOR_ANNOTATION: &str = "autoscaling.alpha.kubernetes.io/behavior";
/// The CPU utilisation a v1 object without metrics targets (upstream's `DefaultCPUUtilization`).
pub const DEFAULT_CPU_UTILIZATION: i64 = 80;

const ROUND_TRIP: [&str; 4] = [
    METRIC_SPECS_ANNOTATION,
    METRIC_STATUSES_ANNOTATION,
    CONDITIONS_ANNOTATION,
    BEHAVIOR_ANNOTATION,
];

/// Each metric type and the key of its source, the same in both versions (the sources' shapes
/// differ, and are mapped by [`spec_to_v1`] and the like).
const SOURCES: [(&str, &str); 5] = [
    ("Object", "object"),
    ("Pods", "pods"),
    ("Resource", "resource"),
    ("ContainerResource", "containerResource"),
    ("External", "external"),
];

/// Copies the fields of `from` named in `pairs` as (from, to) into a new object.
fn pick(from: &Value, pairs: &[(&str, &str)]) -> Map<String, Value> {
    pairs
        .iter()
        .filter_map(|(f, t)| {
            let v = from.pointer(f)?;
            (!v.is_null()).then(|| (t.to_string(), v.clone()))
        })
        .collect()
}

fn source_key(type_: &str) -> Option<&'static str> {
    SOURCES.iter().find(|(t, _)| *t == type_).map(|(_, k)| *k)
}

fn is_cpu_utilization(metric: &Value) -> bool {
    metric["type"] == "Resource"
        && metric["resource"]["name"] == "cpu"
        && !metric["resource"]["target"]["averageUtilization"].is_null()
}

/// A v2 `MetricSpec` in v1's shape (upstream's `Convert_autoscaling_MetricSpec_To_v1_…`).
fn spec_to_v1(metric: &Value) -> Value {
    let type_ = metric["type"].as_str().unwrap_or_default();
    let Some(key) = source_key(type_) else {
        return json!({"type": type_});
    };
    let s = &metric[key];
    let source = match key {
        "object" => pick(
            s,
            &[
                ("/describedObject", "target"),
                ("/metric/name", "metricName"),
                ("/target/value", "targetValue"),
                ("/metric/selector", "selector"),
                ("/target/averageValue", "averageValue"),
            ],
        ),
        "pods" => pick(
            s,
            &[
                ("/metric/name", "metricName"),
                ("/target/averageValue", "targetAverageValue"),
                ("/metric/selector", "selector"),
            ],
        ),
        "external" => pick(
            s,
            &[
                ("/metric/name", "metricName"),
                ("/metric/selector", "metricSelector"),
                ("/target/value", "targetValue"),
                ("/target/averageValue", "targetAverageValue"),
            ],
        ),
        // resource and containerResource
        _ => pick(
            s,
            &[
                ("/name", "name"),
                ("/container", "container"),
                ("/target/averageUtilization", "targetAverageUtilization"),
                ("/target/averageValue", "targetAverageValue"),
            ],
        ),
    };
    json!({"type": type_, key: source})
}

/// A v1 `MetricSpec` in v2's shape (upstream's `Convert_v1_MetricSpec_To_autoscaling_…`): the
/// target type follows from which target is set.
fn spec_from_v1(metric: &Value) -> Value {
    let type_ = metric["type"].as_str().unwrap_or_default();
    let Some(key) = source_key(type_) else {
        return json!({"type": type_});
    };
    let s = &metric[key];
    let set = |field: &str| !s[field].is_null();
    let source = match key {
        "object" => {
            let mut target = pick(
                s,
                &[("/targetValue", "value"), ("/averageValue", "averageValue")],
            );
            let kind = if set("averageValue") {
                "AverageValue"
            } else {
                "Value"
            };
            target.insert("type".into(), json!(kind));
            let mut out = pick(s, &[("/target", "describedObject")]);
            out.insert(
                "metric".into(),
                json!(pick(
                    s,
                    &[("/metricName", "name"), ("/selector", "selector")]
                )),
            );
            out.insert("target".into(), Value::Object(target));
            out
        }
        "pods" => {
            let mut target = pick(s, &[("/targetAverageValue", "averageValue")]);
            target.insert("type".into(), json!("AverageValue"));
            let mut out = Map::new();
            out.insert(
                "metric".into(),
                json!(pick(
                    s,
                    &[("/metricName", "name"), ("/selector", "selector")]
                )),
            );
            out.insert("target".into(), Value::Object(target));
            out
        }
        "external" => {
            let mut target = pick(
                s,
                &[
                    ("/targetValue", "value"),
                    ("/targetAverageValue", "averageValue"),
                ],
            );
            let kind = if set("targetValue") {
                "Value"
            } else {
                "AverageValue"
            };
            target.insert("type".into(), json!(kind));
            let mut out = Map::new();
            out.insert(
                "metric".into(),
                json!(pick(
                    s,
                    &[("/metricName", "name"), ("/metricSelector", "selector")]
                )),
            );
            out.insert("target".into(), Value::Object(target));
            out
        }
        _ => {
            let mut target = pick(
                s,
                &[
                    ("/targetAverageUtilization", "averageUtilization"),
                    ("/targetAverageValue", "averageValue"),
                ],
            );
            let kind = if set("targetAverageUtilization") {
                "Utilization"
            } else {
                "AverageValue"
            };
            target.insert("type".into(), json!(kind));
            let mut out = pick(s, &[("/name", "name"), ("/container", "container")]);
            out.insert("target".into(), Value::Object(target));
            out
        }
    };
    json!({"type": type_, key: source})
}

/// A v2 `MetricStatus` in v1's shape.
fn status_to_v1(metric: &Value) -> Value {
    let type_ = metric["type"].as_str().unwrap_or_default();
    let Some(key) = source_key(type_) else {
        return json!({"type": type_});
    };
    let s = &metric[key];
    let source = match key {
        "object" => pick(
            s,
            &[
                ("/describedObject", "target"),
                ("/metric/name", "metricName"),
                ("/current/value", "currentValue"),
                ("/metric/selector", "selector"),
                ("/current/averageValue", "averageValue"),
            ],
        ),
        "pods" => pick(
            s,
            &[
                ("/metric/name", "metricName"),
                ("/current/averageValue", "currentAverageValue"),
                ("/metric/selector", "selector"),
            ],
        ),
        "external" => pick(
            s,
            &[
                ("/metric/name", "metricName"),
                ("/metric/selector", "metricSelector"),
                ("/current/value", "currentValue"),
                ("/current/averageValue", "currentAverageValue"),
            ],
        ),
        _ => pick(
            s,
            &[
                ("/name", "name"),
                ("/container", "container"),
                ("/current/averageUtilization", "currentAverageUtilization"),
                ("/current/averageValue", "currentAverageValue"),
            ],
        ),
    };
    json!({"type": type_, key: source})
}

/// A v1 `MetricStatus` in v2's shape.
fn status_from_v1(metric: &Value) -> Value {
    let type_ = metric["type"].as_str().unwrap_or_default();
    let Some(key) = source_key(type_) else {
        return json!({"type": type_});
    };
    let s = &metric[key];
    let source = match key {
        "object" => {
            let mut out = pick(s, &[("/target", "describedObject")]);
            out.insert(
                "metric".into(),
                json!(pick(
                    s,
                    &[("/metricName", "name"), ("/selector", "selector")]
                )),
            );
            out.insert(
                "current".into(),
                json!(pick(
                    s,
                    &[
                        ("/currentValue", "value"),
                        ("/averageValue", "averageValue")
                    ]
                )),
            );
            out
        }
        "pods" => {
            let mut out = Map::new();
            out.insert(
                "metric".into(),
                json!(pick(
                    s,
                    &[("/metricName", "name"), ("/selector", "selector")]
                )),
            );
            out.insert(
                "current".into(),
                json!(pick(s, &[("/currentAverageValue", "averageValue")])),
            );
            out
        }
        "external" => {
            let mut out = Map::new();
            out.insert(
                "metric".into(),
                json!(pick(
                    s,
                    &[("/metricName", "name"), ("/metricSelector", "selector")]
                )),
            );
            out.insert(
                "current".into(),
                json!(pick(
                    s,
                    &[
                        ("/currentValue", "value"),
                        ("/currentAverageValue", "averageValue")
                    ]
                )),
            );
            out
        }
        _ => {
            let mut out = pick(s, &[("/name", "name"), ("/container", "container")]);
            out.insert(
                "current".into(),
                json!(pick(
                    s,
                    &[
                        ("/currentAverageUtilization", "averageUtilization"),
                        ("/currentAverageValue", "averageValue"),
                    ]
                )),
            );
            out
        }
    };
    json!({"type": type_, key: source})
}

fn as_array(v: &Value) -> &[Value] {
    v.as_array().map(Vec::as_slice).unwrap_or_default()
}

/// The object's annotations, made an object if they were not one.
fn annotations(obj: &mut Value) -> &mut Map<String, Value> {
    let meta = &mut obj["metadata"];
    if !meta["annotations"].is_object() {
        meta["annotations"] = json!({});
    }
    meta["annotations"]
        .as_object_mut()
        .expect("just made an object")
}

/// Drops empty annotations (upstream omits an empty map).
fn tidy_annotations(obj: &mut Value) {
    if let Some(meta) = obj["metadata"].as_object_mut()
        && meta
            .get("annotations")
            .and_then(Value::as_object)
            .is_some_and(Map::is_empty)
    {
        meta.remove("annotations");
    }
}

/// A stored (v2) HorizontalPodAutoscaler as `autoscaling/v1` serves it.
pub fn hpa_to_v1(v2: &Value) -> Value {
    let spec = &v2["spec"];
    let status = &v2["status"];
    let metrics = as_array(&spec["metrics"]);
    let mut out = json!({
        "apiVersion": "autoscaling/v1",
        "kind": "HorizontalPodAutoscaler",
        "metadata": v2["metadata"].clone(),
        "spec": pick(spec, &[
            ("/scaleTargetRef", "scaleTargetRef"),
            ("/minReplicas", "minReplicas"),
            ("/maxReplicas", "maxReplicas"),
        ]),
    });
    // the first CPU metric decides, as upstream's spec conversion
    if let Some(cpu) = metrics
        .iter()
        .find(|m| m["type"] == "Resource" && m["resource"]["name"] == "cpu")
        && let Some(u) = cpu["resource"]["target"]["averageUtilization"].as_i64()
    {
        out["spec"]["targetCPUUtilizationPercentage"] = json!(u);
    }
    if status.is_object() {
        let mut s = pick(
            status,
            &[
                ("/observedGeneration", "observedGeneration"),
                ("/lastScaleTime", "lastScaleTime"),
                ("/currentReplicas", "currentReplicas"),
                ("/desiredReplicas", "desiredReplicas"),
            ],
        );
        // the last CPU utilisation wins, as upstream's status conversion
        for m in as_array(&status["currentMetrics"]) {
            if m["type"] == "Resource"
                && m["resource"]["name"] == "cpu"
                && let Some(u) = m["resource"]["current"]["averageUtilization"].as_i64()
            {
                s.insert("currentCPUUtilizationPercentage".into(), json!(u));
            }
        }
        // v1's status requires both replica counts
        s.entry("currentReplicas").or_insert(json!(0));
        s.entry("desiredReplicas").or_insert(json!(0));
        out["status"] = Value::Object(s);
    }

    let annotations = annotations(&mut out);
    for key in ROUND_TRIP {
        annotations.remove(key);
    }
    let other: Vec<Value> = metrics
        .iter()
        .filter(|m| !is_cpu_utilization(m))
        .map(spec_to_v1)
        .collect();
    let current: Vec<Value> = as_array(&status["currentMetrics"])
        .iter()
        .map(status_to_v1)
        .collect();
    let conditions = as_array(&status["conditions"]);
    let encoded = [
        (
            METRIC_SPECS_ANNOTATION,
            (!other.is_empty()).then(|| json!(other)),
        ),
        (
            METRIC_STATUSES_ANNOTATION,
            (!current.is_empty()).then(|| json!(current)),
        ),
        (
            CONDITIONS_ANNOTATION,
            (!conditions.is_empty()).then(|| json!(conditions)),
        ),
        (
            BEHAVIOR_ANNOTATION,
            spec["behavior"]
                .is_object()
                .then(|| spec["behavior"].clone()),
        ),
    ];
    for (key, value) in encoded {
        if let Some(value) = value {
            annotations.insert(key.into(), json!(value.to_string()));
        }
    }
    tidy_annotations(&mut out);
    out
}

/// Reads the round-trip annotation `key` as a JSON value, taking it off; an unreadable one is
/// an error naming it (upstream fails the decode).
fn take_annotation(obj: &mut Value, key: &str) -> Result<Option<Value>, String> {
    let Some(text) = obj
        .pointer_mut("/metadata/annotations")
        .and_then(Value::as_object_mut)
        .and_then(|a| a.remove(key))
    else {
        return Ok(None);
    };
    let text = text.as_str().unwrap_or_default();
    serde_json::from_str(text)
        .map(Some)
        .map_err(|e| format!("annotation {key}: {e}"))
}

/// An `autoscaling/v1` HorizontalPodAutoscaler (as a client sent it) as the server handles and
/// stores it, in v2; an error when a round-trip annotation is not the JSON it must be.
pub fn hpa_from_v1(v1: &Value) -> Result<Value, String> {
    let spec = &v1["spec"];
    let status = &v1["status"];
    let mut out = json!({
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": v1["metadata"].clone(),
        "spec": pick(spec, &[
            ("/scaleTargetRef", "scaleTargetRef"),
            ("/minReplicas", "minReplicas"),
            ("/maxReplicas", "maxReplicas"),
        ]),
    });
    let cpu = |utilization: &Value| {
        json!({"type": "Resource", "resource": {"name": "cpu",
               "target": {"type": "Utilization", "averageUtilization": utilization}}})
    };
    let mut metrics: Vec<Value> = match take_annotation(&mut out, METRIC_SPECS_ANNOTATION)? {
        Some(other) => as_array(&other).iter().map(spec_from_v1).collect(),
        None => Vec::new(),
    };
    if !spec["targetCPUUtilizationPercentage"].is_null() {
        metrics.push(cpu(&spec["targetCPUUtilizationPercentage"]));
    }
    if metrics.is_empty() {
        metrics.push(cpu(&json!(DEFAULT_CPU_UTILIZATION)));
    }
    out["spec"]["metrics"] = json!(metrics);
    if let Some(behavior) = take_annotation(&mut out, BEHAVIOR_ANNOTATION)? {
        out["spec"]["behavior"] = behavior;
    }

    let current = take_annotation(&mut out, METRIC_STATUSES_ANNOTATION)?;
    let conditions = take_annotation(&mut out, CONDITIONS_ANNOTATION)?;
    if status.is_object() {
        let mut s = pick(
            status,
            &[
                ("/observedGeneration", "observedGeneration"),
                ("/lastScaleTime", "lastScaleTime"),
                ("/currentReplicas", "currentReplicas"),
                ("/desiredReplicas", "desiredReplicas"),
            ],
        );
        // the annotation holds more than the CPU figure; without it, the figure alone
        let current = match current {
            Some(all) => as_array(&all).iter().map(status_from_v1).collect(),
            None => match status.get("currentCPUUtilizationPercentage") {
                Some(u) if !u.is_null() => vec![json!({"type": "Resource", "resource": {
                    "name": "cpu", "current": {"averageUtilization": u}}})],
                _ => Vec::new(),
            },
        };
        if !current.is_empty() {
            s.insert("currentMetrics".into(), json!(current));
        }
        if let Some(conditions) = conditions.filter(|c| !as_array(c).is_empty()) {
            s.insert("conditions".into(), conditions);
        }
        out["status"] = Value::Object(s);
    }
    tidy_annotations(&mut out);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v2() -> Value {
        json!({
            "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": "web", "namespace": "default", "annotations": {"team": "a"}},
            "spec": {
                "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                "minReplicas": 1, "maxReplicas": 5,
                "metrics": [
                    {"type": "Resource", "resource": {"name": "memory",
                        "target": {"type": "AverageValue", "averageValue": "100Mi"}}},
                    {"type": "Resource", "resource": {"name": "cpu",
                        "target": {"type": "Utilization", "averageUtilization": 50}}},
                    {"type": "Pods", "pods": {"metric": {"name": "qps"},
                        "target": {"type": "AverageValue", "averageValue": "1k"}}},
                    {"type": "Object", "object": {
                        "describedObject": {"apiVersion": "v1", "kind": "Service", "name": "web"},
                        "metric": {"name": "hits"},
                        "target": {"type": "Value", "value": "10"}}},
                    {"type": "External", "external": {"metric": {"name": "queue",
                        "selector": {"matchLabels": {"q": "jobs"}}},
                        "target": {"type": "AverageValue", "averageValue": "30"}}},
                    {"type": "ContainerResource", "containerResource": {"name": "cpu",
                        "container": "app",
                        "target": {"type": "Utilization", "averageUtilization": 60}}}
                ],
                "behavior": {"scaleDown": {"stabilizationWindowSeconds": 30, "selectPolicy": "Max",
                    "policies": [{"type": "Pods", "value": 1, "periodSeconds": 15}]}}
            },
            "status": {
                "observedGeneration": 2, "currentReplicas": 2, "desiredReplicas": 3,
                "lastScaleTime": "2026-12-04T18:00:00Z",
                "currentMetrics": [
                    {"type": "Resource", "resource": {"name": "cpu",
                        "current": {"averageUtilization": 72, "averageValue": "360m"}}},
                    {"type": "Pods", "pods": {"metric": {"name": "qps"},
                        "current": {"averageValue": "900"}}}
                ],
                "conditions": [{"type": "AbleToScale", "status": "True", "reason": "ReadyForNewScale",
                    "lastTransitionTime": "2026-12-04T18:00:00Z", "message": "ok"}]
            }
        })
    }

    #[test]
    fn v1_shows_the_cpu_target_and_keeps_the_rest_in_annotations() {
        let v1 = hpa_to_v1(&v2());
        assert_eq!(v1["apiVersion"], "autoscaling/v1");
        assert_eq!(v1["spec"]["targetCPUUtilizationPercentage"], 50);
        assert!(v1["spec"].get("metrics").is_none());
        assert_eq!(v1["status"]["currentCPUUtilizationPercentage"], 72);
        assert_eq!(v1["status"]["desiredReplicas"], 3);
        let annotations = &v1["metadata"]["annotations"];
        assert_eq!(annotations["team"], "a");
        let other: Value =
            serde_json::from_str(annotations[METRIC_SPECS_ANNOTATION].as_str().unwrap()).unwrap();
        assert_eq!(
            other.as_array().unwrap().len(),
            5,
            "all but the CPU target: {other}"
        );
        assert_eq!(
            other[0],
            json!({"type": "Resource", "resource": {"name": "memory", "targetAverageValue": "100Mi"}})
        );
        assert_eq!(
            other[1],
            json!({"type": "Pods", "pods": {"metricName": "qps", "targetAverageValue": "1k"}})
        );
        assert_eq!(
            other[3],
            json!({"type": "External", "external": {"metricName": "queue",
                "metricSelector": {"matchLabels": {"q": "jobs"}}, "targetAverageValue": "30"}})
        );
        for key in [
            METRIC_STATUSES_ANNOTATION,
            CONDITIONS_ANNOTATION,
            BEHAVIOR_ANNOTATION,
        ] {
            assert!(annotations[key].is_string(), "{key} in {annotations}");
        }
    }

    #[test]
    fn a_v2_object_survives_a_round_trip_through_v1() {
        let original = v2();
        let back = hpa_from_v1(&hpa_to_v1(&original)).unwrap();
        let mut expected = original.clone();
        // the CPU utilisation target moves to the end, as upstream's conversion puts it
        let metrics = expected["spec"]["metrics"].as_array_mut().unwrap();
        let cpu = metrics.remove(1);
        metrics.push(cpu);
        assert_eq!(back, expected);
    }

    #[test]
    fn a_plain_v1_object_becomes_one_cpu_metric_and_gets_the_default_without_one() {
        let v1 = json!({"apiVersion": "autoscaling/v1", "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": "web"},
            "spec": {"scaleTargetRef": {"kind": "Deployment", "name": "web"}, "maxReplicas": 4,
                     "targetCPUUtilizationPercentage": 30},
            "status": {"currentReplicas": 1, "desiredReplicas": 1,
                       "currentCPUUtilizationPercentage": 12}});
        let v2 = hpa_from_v1(&v1).unwrap();
        assert_eq!(
            v2["spec"]["metrics"],
            json!([{"type": "Resource", "resource": {"name": "cpu",
                "target": {"type": "Utilization", "averageUtilization": 30}}}])
        );
        assert_eq!(
            v2["status"]["currentMetrics"][0]["resource"]["current"]["averageUtilization"],
            12
        );
        assert!(v2["metadata"].get("annotations").is_none());

        let mut bare = v1.clone();
        bare["spec"]
            .as_object_mut()
            .unwrap()
            .remove("targetCPUUtilizationPercentage");
        let v2 = hpa_from_v1(&bare).unwrap();
        assert_eq!(
            v2["spec"]["metrics"][0]["resource"]["target"]["averageUtilization"],
            DEFAULT_CPU_UTILIZATION
        );
        assert_eq!(hpa_to_v1(&v2)["spec"]["targetCPUUtilizationPercentage"], 80);
    }

    #[test]
    fn an_unreadable_round_trip_annotation_is_an_error_naming_it() {
        let v1 = json!({"metadata": {"name": "web", "annotations": {METRIC_SPECS_ANNOTATION: "{"}},
                        "spec": {"maxReplicas": 1}});
        let err = hpa_from_v1(&v1).unwrap_err();
        assert!(
            err.starts_with(&format!("annotation {METRIC_SPECS_ANNOTATION}")),
            "{err}"
        );
    }

    #[test]
    fn stale_round_trip_annotations_on_a_stored_object_are_not_served() {
        let mut stored = v2();
        stored["spec"]["behavior"] = Value::Null;
        stored["metadata"]["annotations"][BEHAVIOR_ANNOTATION] = json!("{\"old\":1}");
        let v1 = hpa_to_v1(&stored);
        assert!(
            v1["metadata"]["annotations"]
                .get(BEHAVIOR_ANNOTATION)
                .is_none()
        );
    }
}
