//! `Pods`, `Object` and `External` metrics (upstream's `computeStatusForPodsMetric`,
//! `computeStatusForObjectMetric` and `computeStatusForExternalMetric`, with the replica
//! calculator's `GetMetricReplicas`, `GetObjectMetricReplicas`, `GetObjectPerPodMetricReplicas`,
//! `GetExternalMetricReplicas` and `GetExternalPerPodMetricReplicas`):
//! - a `Pods` metric is one value per pod from `custom.metrics.k8s.io`, averaged over the pods as
//!   a resource's average value is (upstream's `calcPlainMetricReplicas`);
//! - an `Object` metric is one value of another object (a Service's requests per second, say)
//!   against a `Value` target, which scales the ready pods by the ratio, or an `AverageValue`
//!   target per replica;
//! - an `External` metric is the sum of the values `external.metrics.k8s.io` gives for the
//!   metric's selector, with the same two targets.
//!
//! The errors, condition reasons, statuses and descriptions are upstream's word for word,
//! including its quirks (an `Object` metric with an `AverageValue` target is described as an
//! `external metric` and its status names no object).

use std::collections::BTreeMap;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::autoscaling::v2::{
    ExternalMetricSource, ExternalMetricStatus, MetricStatus, MetricValueStatus,
    ObjectMetricSource, ObjectMetricStatus, PodsMetricSource, PodsMetricStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use serde_json::Value;
use skiff_apimachinery::labels::Selector;

use super::controller::{Inputs, Invalid, MetricProposal, milli, milli_quantity, pod_info};
use super::replicas::{PodInfo, Sample, Target};

/// The window of a custom metric value that gives none (upstream's
/// `metricServerDefaultMetricWindow`).
const DEFAULT_WINDOW: SignedDuration = SignedDuration::from_mins(1);

/// A `Pods` metric's proposal: the pods' values of the metric against the average value target.
pub(super) async fn pods_metric(
    inputs: &Inputs<'_>,
    source: Option<&PodsMetricSource>,
) -> Result<MetricProposal, Invalid> {
    let source = source.ok_or_else(|| missing_source("Pods"))?;
    let name = &source.metric.name;
    let invalid = |error: String| Invalid {
        reason: "FailedGetPodsMetric",
        wrapped: format!("failed to get pods metric value: {error}"),
        error,
    };
    let metric_selector = metric_selector(source.metric.selector.as_ref()).map_err(invalid)?;
    let target = source
        .target
        .average_value
        .as_ref()
        .map(|v| milli(&v.0))
        .ok_or_else(|| {
            invalid("invalid pods metric source: no average value target was set".into())
        })?;
    let unable = |e: String| invalid(format!("unable to get metric {name}: {e}"));
    let list = inputs
        .api
        .pods_metric(inputs.namespace, inputs.selector, name, &metric_selector)
        .await
        .map_err(|e| {
            unable(format!(
                "unable to fetch metrics from custom metrics API: {e}"
            ))
        })?;
    let items = items(&list);
    if items.is_empty() {
        return Err(unable("no metrics returned from custom metrics API".into()));
    }
    let samples: BTreeMap<String, Sample> = items
        .iter()
        .filter_map(|item| {
            let pod = item["describedObject"]["name"].as_str()?;
            Some((pod.to_string(), sample(item)))
        })
        .collect();
    let pods: Vec<PodInfo> = inputs.pods.iter().map(|p| pod_info(p, "", None)).collect();
    let proposal = inputs
        .settings
        .calculator
        .resource_replicas(
            inputs.spec_replicas,
            Target::AverageValue(target),
            false,
            &pods,
            &samples,
            inputs.now,
        )
        .map_err(invalid)?;
    Ok(MetricProposal {
        replicas: proposal.replicas,
        status: MetricStatus {
            type_: "Pods".into(),
            pods: Some(PodsMetricStatus {
                metric: source.metric.clone(),
                current: MetricValueStatus {
                    average_value: Some(milli_quantity(proposal.average_value)),
                    ..Default::default()
                },
            }),
            ..Default::default()
        },
        describe: format!("pods metric {name}"),
    })
}

/// An `Object` metric's proposal: the described object's value against a `Value` target (the
/// ready pods scaled by the ratio) or an `AverageValue` target per replica.
pub(super) async fn object_metric(
    inputs: &Inputs<'_>,
    source: Option<&ObjectMetricSource>,
) -> Result<MetricProposal, Invalid> {
    let source = source.ok_or_else(|| missing_source("Object"))?;
    let (name, object) = (&source.metric.name, &source.described_object);
    let invalid = |error: String, returned: String| Invalid {
        reason: "FailedGetObjectMetric",
        wrapped: format!("failed to get object metric value: {returned}"),
        error,
    };
    let metric_selector =
        metric_selector(source.metric.selector.as_ref()).map_err(|e| invalid(e.clone(), e))?;
    let t = &source.target;
    let target = match (t.type_.as_str(), &t.value, &t.average_value) {
        ("Value", Some(v), _) => ValueTarget::Value(milli(&v.0)),
        ("AverageValue", _, Some(v)) => ValueTarget::AverageValue(milli(&v.0)),
        _ => {
            let e = "invalid object metric source: neither a value target nor an average value target was set";
            return Err(invalid(e.into(), e.into()));
        }
    };
    // upstream returns an average value's error wrapped once more
    let returned = |e: &str| match target {
        ValueTarget::Value(_) => e.to_string(),
        ValueTarget::AverageValue(_) => format!("failed to get {name} object metric: {e}"),
    };
    let list = inputs
        .api
        .object_metric(inputs.namespace, object, name, &metric_selector)
        .await;
    let usage = match list.as_ref().map(items).as_deref() {
        Ok([item]) => Ok(milli(item["value"].as_str().unwrap_or_default())),
        Ok(items) => Err(format!(
            "the custom metrics API server returned {} results when we asked for exactly one",
            items.len()
        )),
        Err(e) => Err(e.to_string()),
    }
    .map_err(|e| {
        // upstream's message puts the error in the object's name
        let e = format!(
            "unable to get metric {name}: {} on {} {}/unable to fetch metrics from custom metrics API: {e}",
            object.kind, inputs.namespace, object.name
        );
        invalid(e.clone(), returned(&e))
    })?;
    let (replicas, current) =
        value_replicas(inputs, usage, target).map_err(|e| invalid(e.clone(), returned(&e)))?;
    // upstream's status of an average value names no object, and its description calls the
    // metric external
    let (described_object, describe) = match target {
        ValueTarget::Value(_) => (object.clone(), format!("{} metric {name}", object.kind)),
        ValueTarget::AverageValue(_) => (
            Default::default(),
            format!(
                "external metric {name}({})",
                go_selector(source.metric.selector.as_ref())
            ),
        ),
    };
    Ok(MetricProposal {
        replicas,
        status: MetricStatus {
            type_: "Object".into(),
            object: Some(ObjectMetricStatus {
                described_object,
                metric: source.metric.clone(),
                current,
            }),
            ..Default::default()
        },
        describe,
    })
}

/// An `External` metric's proposal: the sum of its values against an `AverageValue` target per
/// replica, or a `Value` target (the ready pods scaled by the ratio).
pub(super) async fn external_metric(
    inputs: &Inputs<'_>,
    source: Option<&ExternalMetricSource>,
) -> Result<MetricProposal, Invalid> {
    let source = source.ok_or_else(|| missing_source("External"))?;
    let name = &source.metric.name;
    let selector = source.metric.selector.as_ref();
    let invalid = |error: String, returned: String| Invalid {
        reason: "FailedGetExternalMetric",
        wrapped: format!("failed to get {name} external metric value: {returned}"),
        error,
    };
    // an average value wins over a value, whatever the target's type says
    let t = &source.target;
    let target = match (&t.average_value, &t.value) {
        (Some(v), _) => ValueTarget::AverageValue(milli(&v.0)),
        (None, Some(v)) => ValueTarget::Value(milli(&v.0)),
        (None, None) => {
            let e = "invalid external metric source: neither a value target nor an average value target was set";
            return Err(invalid(e.into(), e.into()));
        }
    };
    let returned = |e: &str| match target {
        ValueTarget::AverageValue(_) => format!("failed to get {name} external metric: {e}"),
        ValueTarget::Value(_) => format!("failed to get external metric {name}: {e}"),
    };
    let metric_selector =
        metric_selector(selector).map_err(|e| invalid(e.clone(), returned(&e)))?;
    let list = inputs
        .api
        .external_metric(inputs.namespace, name, &metric_selector)
        .await;
    let usage = match list.as_ref().map(items) {
        Ok(items) if items.is_empty() => {
            Err("no metrics returned from external metrics API".to_string())
        }
        Ok(items) => Ok(items
            .iter()
            .map(|item| milli(item["value"].as_str().unwrap_or_default()))
            .sum()),
        Err(e) => Err(format!(
            "unable to fetch metrics from external metrics API: {e}"
        )),
    }
    .map_err(|e| {
        let e = format!(
            "unable to get external metric {}/{name}/{}: {e}",
            inputs.namespace,
            go_selector(selector)
        );
        invalid(e.clone(), returned(&e))
    })?;
    let (replicas, current) =
        value_replicas(inputs, usage, target).map_err(|e| invalid(e.clone(), returned(&e)))?;
    Ok(MetricProposal {
        replicas,
        status: MetricStatus {
            type_: "External".into(),
            external: Some(ExternalMetricStatus {
                metric: source.metric.clone(),
                current,
            }),
            ..Default::default()
        },
        describe: format!("external metric {name}({})", go_selector(selector)),
    })
}

/// The target of one value (an `Object` metric's, or an `External` metric's sum), in
/// milli-units.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ValueTarget {
    /// The value itself: the ready pods scale by the ratio to it.
    Value(i64),
    /// The value per replica: the replicas are the value over it.
    AverageValue(i64),
}

/// The replicas one value asks for against `target`, and what the status shows of it: the
/// value, or the average per current replica.
fn value_replicas(
    inputs: &Inputs<'_>,
    usage: i64,
    target: ValueTarget,
) -> Result<(i32, MetricValueStatus), String> {
    let calculator = &inputs.settings.calculator;
    match target {
        ValueTarget::Value(target) => {
            let pods: Vec<PodInfo> = inputs.pods.iter().map(|p| pod_info(p, "", None)).collect();
            let ratio = usage as f64 / target as f64;
            let replicas = calculator.usage_ratio_replicas(inputs.spec_replicas, ratio, &pods)?;
            let current = MetricValueStatus {
                value: Some(milli_quantity(usage)),
                ..Default::default()
            };
            Ok((replicas, current))
        }
        ValueTarget::AverageValue(target) => {
            let (replicas, average) =
                calculator.per_pod_replicas(inputs.status_replicas, usage, target);
            let current = MetricValueStatus {
                average_value: Some(milli_quantity(average)),
                ..Default::default()
            };
            Ok((replicas, current))
        }
    }
}

/// A metric spec without its source (which validation refuses).
fn missing_source(type_: &str) -> Invalid {
    let error = format!("invalid {type_} metric source: the source is missing");
    Invalid {
        reason: "InvalidMetricSourceType",
        wrapped: error.clone(),
        error,
    }
}

/// A list's items.
fn items(list: &Value) -> Vec<&Value> {
    list["items"].as_array().into_iter().flatten().collect()
}

/// One `MetricValue` as the calculator reads it.
fn sample(item: &Value) -> Sample {
    Sample {
        value: milli(item["value"].as_str().unwrap_or_default()),
        timestamp: item["timestamp"]
            .as_str()
            .and_then(|t| t.parse().ok())
            .unwrap_or(Timestamp::UNIX_EPOCH),
        window: item["windowSeconds"]
            .as_i64()
            .map_or(DEFAULT_WINDOW, SignedDuration::from_secs),
    }
}

/// A metric's selector in its query form, as upstream's `LabelSelectorAsSelector(…).String()`:
/// empty when there is none.
fn metric_selector(selector: Option<&LabelSelector>) -> Result<String, String> {
    let value = serde_json::to_value(selector).map_err(|e| e.to_string())?;
    Selector::from_label_selector(&value)
        .map(|s| s.to_string())
        .map_err(|e| e.to_string())
}

/// A selector as Go prints a `*metav1.LabelSelector` with `%+v` (its generated `String()`),
/// which upstream's descriptions and errors carry: `&LabelSelector{MatchLabels:map[string]string{
/// queue: worker,},MatchExpressions:[]LabelSelectorRequirement{},}`, or `nil`.
pub(super) fn go_selector(selector: Option<&LabelSelector>) -> String {
    let Some(selector) = selector else {
        return "nil".into();
    };
    let labels: String = selector
        .match_labels
        .iter()
        .flatten()
        .map(|(k, v)| format!("{k}: {v},"))
        .collect();
    let expressions: String = selector
        .match_expressions
        .iter()
        .flatten()
        .map(|r| {
            format!(
                "LabelSelectorRequirement{{Key:{},Operator:{},Values:[{}],}},",
                r.key,
                r.operator,
                r.values.clone().unwrap_or_default().join(" ")
            )
        })
        .collect();
    format!(
        "&LabelSelector{{MatchLabels:map[string]string{{{labels}}},MatchExpressions:[]LabelSelectorRequirement{{{expressions}}},}}"
    )
}

#[cfg(test)]
#[path = "custom_tests.rs"]
mod tests;
