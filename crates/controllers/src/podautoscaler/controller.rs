//! One HPA's sync (upstream's `reconcileAutoscaler`), every sync period: the target's `scale`
//! subresource gives the current replicas and the pod selector; each metric proposes replicas
//! from the pods' usage in `metrics.k8s.io` ([`super::replicas`]); the largest proposal,
//! normalized ([`super::behavior`]), is written to the target's scale, with upstream's events
//! (`SuccessfulRescale`, `FailedGetScale`, `FailedGetResourceMetric`, …) and conditions
//! (`AbleToScale`, `ScalingActive`, `ScalingLimited`) and the measured metrics in the status.
//! `Pods`, `Object` and `External` metrics are read from `custom.metrics.k8s.io` and
//! `external.metrics.k8s.io` ([`super::custom`]). As upstream's `computeReplicasForMetrics`, a
//! metric that cannot be read gets its own event and the HPA still scales on the others, unless
//! none can be read or the rest would scale down.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use async_trait::async_trait;
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::autoscaling::v1::Scale;
use k8s_openapi::api::autoscaling::v2::{
    ContainerResourceMetricStatus, CrossVersionObjectReference, HPAScalingRules,
    HorizontalPodAutoscaler, HorizontalPodAutoscalerCondition, HorizontalPodAutoscalerStatus,
    MetricSpec, MetricStatus, MetricValueStatus, ResourceMetricStatus,
};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use parking_lot::Mutex;
use serde_json::Value;
use skiff_apimachinery::labels::Selector;
use skiff_apimachinery::quantity::{Format, Quantity as Parsed, format_canonical};

use super::behavior::{self, Behavior, History, Policy, Rules, Select};
use super::custom;
use super::replicas::{Calculator, PodInfo, Sample, Target};
use crate::events::Note;

/// What the controller reads and writes through the API server (a fake in tests).
#[async_trait]
pub trait Autoscaling: Send + Sync {
    /// The target's `scale` subresource.
    async fn scale(
        &self,
        namespace: &str,
        target: &CrossVersionObjectReference,
    ) -> Result<Scale, String>;
    /// Writes `replicas` to the target's `scale` subresource.
    async fn set_replicas(
        &self,
        namespace: &str,
        target: &CrossVersionObjectReference,
        replicas: i32,
    ) -> Result<(), String>;
    /// `metrics.k8s.io/v1beta1` PodMetrics of the pods `selector` selects (a `PodMetricsList`).
    async fn pod_metrics(&self, namespace: &str, selector: &str) -> Result<Value, String>;
    /// `custom.metrics.k8s.io/v1beta2` values of `metric` for the pods `selector` selects,
    /// narrowed by `metric_selector` (a `MetricValueList`).
    async fn pods_metric(
        &self,
        namespace: &str,
        selector: &str,
        metric: &str,
        metric_selector: &str,
    ) -> Result<Value, String>;
    /// `custom.metrics.k8s.io/v1beta2` value of `metric` for `object` in `namespace`, narrowed
    /// by `metric_selector` (a `MetricValueList` of one item).
    async fn object_metric(
        &self,
        namespace: &str,
        object: &CrossVersionObjectReference,
        metric: &str,
        metric_selector: &str,
    ) -> Result<Value, String>;
    /// `external.metrics.k8s.io/v1beta1` values of `metric` that `metric_selector` selects (an
    /// `ExternalMetricValueList`).
    async fn external_metric(
        &self,
        namespace: &str,
        metric: &str,
        metric_selector: &str,
    ) -> Result<Value, String>;
    async fn update_status(&self, hpa: &HorizontalPodAutoscaler) -> Result<(), String>;
    fn event(&self, hpa: &HorizontalPodAutoscaler, note: Note);
}

/// The controller's settings (controller-manager flags).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Settings {
    pub calculator: Calculator,
    /// `--horizontal-pod-autoscaler-downscale-stabilization`: the scale-down window when an
    /// HPA sets none.
    pub downscale_stabilization: SignedDuration,
}

/// The HPAs' recommendation and scale histories, by namespace/name.
#[derive(Default)]
pub struct Histories(Mutex<HashMap<String, History>>);

/// A condition's type, status, reason and message.
type Condition = (&'static str, bool, &'static str, String);

/// What one metric proposes: replicas, the metric's status, and how the metric is named in
/// conditions and events (`cpu resource utilization (percentage of request)`, `pods metric qps`).
pub(super) struct MetricProposal {
    pub replicas: i32,
    pub status: MetricStatus,
    pub describe: String,
}

/// Why one metric proposed nothing: the `ScalingActive=False` reason (`FailedGetPodsMetric`, …),
/// the error (the event's message) and the error as upstream's `computeReplicasForMetric`
/// returns it (`failed to get pods metric value: …`).
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Invalid {
    pub reason: &'static str,
    pub error: String,
    pub wrapped: String,
}

/// What the metrics of one sync read: the target's pods, its replicas, the time.
pub(super) struct Inputs<'a> {
    pub api: &'a dyn Autoscaling,
    pub namespace: &'a str,
    /// The scale's pod selector, as the scale gives it.
    pub selector: &'a str,
    /// The pods it selects.
    pub pods: Vec<&'a Arc<Pod>>,
    /// The scale's `spec.replicas` and `status.replicas`.
    pub spec_replicas: i32,
    pub status_replicas: i32,
    pub settings: &'a Settings,
    pub now: Timestamp,
}

/// The metrics' result: the largest proposal, how its metric is described, every metric's
/// status, and the first error when some metrics could not be read (the HPA scales anyway).
struct Computed {
    replicas: i32,
    describe: String,
    statuses: Vec<MetricStatus>,
    error: Option<String>,
}

/// Why the metrics gave no replica count: the `ScalingActive=False` reason and message, the error
/// (upstream's `FailedComputeMetricsReplicas` event) and the statuses measured.
struct Failure {
    reason: &'static str,
    message: String,
    error: String,
    statuses: Vec<MetricStatus>,
}

/// One sync of `hpa`; `pods` are its namespace's.
pub async fn reconcile(
    hpa: &HorizontalPodAutoscaler,
    pods: &[Arc<Pod>],
    api: &dyn Autoscaling,
    histories: &Histories,
    settings: &Settings,
    now: Timestamp,
) -> Result<(), String> {
    let namespace = hpa.metadata.namespace.clone().unwrap_or_default();
    let key = format!(
        "{namespace}/{}",
        hpa.metadata.name.clone().unwrap_or_default()
    );
    let spec = hpa.spec.clone().unwrap_or_default();
    let target = &spec.scale_target_ref;
    let mut status = hpa.status.clone().unwrap_or_default();
    status.observed_generation = hpa.metadata.generation;
    let mut conditions: Vec<Condition> = Vec::new();
    let scale = match api.scale(&namespace, target).await {
        Ok(scale) => scale,
        Err(e) => {
            let message =
                format!("the HPA controller was unable to get the target's current scale: {e}");
            api.event(hpa, Note::warning("FailedGetScale", e.clone()));
            conditions.push(("AbleToScale", false, "FailedGetScale", message));
            write_status(api, hpa, status, conditions, now).await?;
            return Err(e);
        }
    };
    conditions.push((
        "AbleToScale",
        true,
        "SucceededGetScale",
        "the HPA controller was able to get the target's current scale".into(),
    ));
    let current = scale.spec.as_ref().and_then(|s| s.replicas).unwrap_or(0);
    let selector = scale
        .status
        .as_ref()
        .and_then(|s| s.selector.clone())
        .unwrap_or_default();
    let (min, max) = (spec.min_replicas.unwrap_or(1), spec.max_replicas);
    let behavior = behavior_of(spec.behavior.as_ref(), settings.downscale_stabilization);
    status.current_replicas = Some(current);

    // an error of some metrics while the others scaled (returned once the status is written)
    let mut partial = None;
    let (desired, reason) = if current == 0 && min != 0 {
        conditions.push((
            "ScalingActive",
            false,
            "ScalingDisabled",
            "scaling is disabled since the replica count of the target is zero".into(),
        ));
        (0, None)
    } else if current > max {
        (
            max,
            Some("Current number of replicas above Spec.MaxReplicas".to_string()),
        )
    } else if current < min {
        (
            min,
            Some("Current number of replicas below Spec.MinReplicas".to_string()),
        )
    } else {
        let metrics = spec.metrics.clone().unwrap_or_else(default_metrics);
        let status_replicas = scale.status.as_ref().map_or(0, |s| s.replicas);
        let computed = compute(
            hpa,
            api,
            &namespace,
            &selector,
            (current, status_replicas),
            &metrics,
            pods,
            settings,
            now,
        )
        .await;
        let Computed {
            replicas: proposal,
            describe,
            statuses,
            error,
        } = match computed {
            Ok(found) => found,
            Err(failure) => {
                status.current_metrics = Some(failure.statuses).filter(|s| !s.is_empty());
                conditions.push(("ScalingActive", false, failure.reason, failure.message));
                api.event(
                    hpa,
                    Note::warning("FailedComputeMetricsReplicas", failure.error.clone()),
                );
                write_status(api, hpa, status, conditions, now).await?;
                return Err(failure.error);
            }
        };
        partial = error;
        status.current_metrics = Some(statuses);
        conditions.push((
            "ScalingActive",
            true,
            "ValidMetricFound",
            format!("the HPA was able to successfully calculate a replica count from {describe}"),
        ));
        let decision = {
            let mut histories = histories.0.lock();
            let history = histories.entry(key.clone()).or_default();
            behavior::normalize(history, &behavior, (current, proposal), (min, max), now)
        };
        let (_, reason, message) = decision.able_to_scale;
        conditions[0] = ("AbleToScale", true, reason, message.into());
        let (limited, reason, message) = decision.scaling_limited;
        conditions.push(("ScalingLimited", limited, reason, message.into()));
        let why = if decision.replicas > current {
            format!("{describe} above target")
        } else {
            "All metrics below target".to_string()
        };
        (decision.replicas, Some(why))
    };

    status.desired_replicas = desired;
    if let Some(reason) = reason.filter(|_| desired != current) {
        match api.set_replicas(&namespace, target, desired).await {
            Ok(()) => {
                api.event(
                    hpa,
                    Note::normal(
                        "SuccessfulRescale",
                        format!("New size: {desired}; reason: {reason}"),
                    ),
                );
                conditions[0] = (
                    "AbleToScale",
                    true,
                    "SucceededRescale",
                    format!("the HPA controller was able to update the target scale to {desired}"),
                );
                let mut histories = histories.0.lock();
                let history = histories.entry(key).or_default();
                behavior::record_scale(history, &behavior, current, desired, now);
                status.last_scale_time = Some(Time(now));
            }
            Err(e) => {
                api.event(
                    hpa,
                    Note::warning(
                        "FailedRescale",
                        format!("New size: {desired}; reason: {reason}; error: {e}"),
                    ),
                );
                conditions[0] = (
                    "AbleToScale",
                    false,
                    "FailedUpdateScale",
                    format!("the HPA controller was unable to update the target scale: {e}"),
                );
                write_status(api, hpa, status, conditions, now).await?;
                return Err(e);
            }
        }
    }
    write_status(api, hpa, status, conditions, now).await?;
    partial.map_or(Ok(()), Err)
}

/// Upstream's default metric: 80% of the pods' CPU requests.
fn default_metrics() -> Vec<MetricSpec> {
    serde_json::from_value(serde_json::json!([{"type": "Resource", "resource": {
        "name": "cpu", "target": {"type": "Utilization", "averageUtilization": 80}}}]))
    .expect("a valid metric")
}

/// The largest proposal of `metrics` (upstream's `computeReplicasForMetrics`). A metric that
/// cannot be read records its own event; the HPA scales on the others unless all failed or the
/// rest would scale down, and the first failure then gives the condition.
#[allow(clippy::too_many_arguments)]
async fn compute(
    hpa: &HorizontalPodAutoscaler,
    api: &dyn Autoscaling,
    namespace: &str,
    selector: &str,
    (spec_replicas, status_replicas): (i32, i32),
    metrics: &[MetricSpec],
    pods: &[Arc<Pod>],
    settings: &Settings,
    now: Timestamp,
) -> Result<Computed, Failure> {
    let refused = |reason: &'static str, event: &'static str, error: String, message: String| {
        api.event(hpa, Note::warning(event, error.clone()));
        Failure {
            reason,
            message,
            error,
            statuses: Vec::new(),
        }
    };
    if selector.is_empty() {
        return Err(refused(
            "InvalidSelector",
            "SelectorRequired",
            "selector is required".into(),
            "the HPA target's scale is missing a selector".into(),
        ));
    }
    let parsed = Selector::parse(selector).map_err(|e| {
        let error =
            format!("couldn't convert selector into a corresponding internal selector object: {e}");
        refused("InvalidSelector", "InvalidSelector", error.clone(), error)
    })?;
    let inputs = Inputs {
        api,
        namespace,
        selector,
        pods: pods
            .iter()
            .filter(|p| parsed.matches(&p.metadata.labels.clone().unwrap_or_default()))
            .collect(),
        spec_replicas,
        status_replicas,
        settings,
        now,
    };
    let mut usage: Option<Value> = None;
    let mut best: Option<(i32, String)> = None;
    let mut statuses = Vec::new();
    let mut invalid: Vec<Invalid> = Vec::new();
    for metric in metrics {
        let proposal = match metric.type_.as_str() {
            "Resource" | "ContainerResource" => resource_metric(&inputs, metric, &mut usage).await,
            "Pods" => custom::pods_metric(&inputs, metric.pods.as_ref()).await,
            "Object" => custom::object_metric(&inputs, metric.object.as_ref()).await,
            "External" => custom::external_metric(&inputs, metric.external.as_ref()).await,
            other => Err(Invalid {
                reason: "InvalidMetricSourceType",
                error: format!("unknown metric source type \"{other}\""),
                wrapped: format!("unknown metric source type \"{other}\""),
            }),
        };
        match proposal {
            Ok(p) => {
                statuses.push(p.status);
                if best
                    .as_ref()
                    .is_none_or(|(r, _)| *r == 0 || p.replicas > *r)
                {
                    best = Some((p.replicas, p.describe));
                }
            }
            Err(e) => {
                api.event(hpa, Note::warning(e.reason, e.error.clone()));
                // upstream leaves the failed metric's status empty
                statuses.push(MetricStatus::default());
                invalid.push(e);
            }
        }
    }
    let error = invalid.first().map(|first| {
        format!(
            "invalid metrics ({} invalid out of {}), first error is: {}",
            invalid.len(),
            metrics.len(),
            first.wrapped
        )
    });
    match (best, invalid.first(), error) {
        (Some((replicas, describe)), _, error) if error.is_none() || replicas >= spec_replicas => {
            Ok(Computed {
                replicas,
                describe,
                statuses,
                error,
            })
        }
        (_, Some(first), Some(error)) => Err(Failure {
            reason: first.reason,
            message: format!(
                "the HPA was unable to compute the replica count: {}",
                first.error
            ),
            error,
            statuses,
        }),
        _ => Err(Failure {
            reason: "InvalidMetricSourceType",
            message: "the HPA has no metrics".into(),
            error: "the HPA has no metrics".into(),
            statuses,
        }),
    }
}

/// A `Resource` or `ContainerResource` metric's proposal from the pods' usage in
/// `metrics.k8s.io` (read once per sync into `usage`), as upstream's
/// `computeStatusForResourceMetricGeneric`.
async fn resource_metric(
    inputs: &Inputs<'_>,
    metric: &MetricSpec,
    usage: &mut Option<Value>,
) -> Result<MetricProposal, Invalid> {
    let (resource, target, container) = match (&metric.resource, &metric.container_resource) {
        (Some(r), _) if metric.type_ == "Resource" => (r.name.clone(), r.target.clone(), None),
        (_, Some(c)) if metric.type_ == "ContainerResource" => {
            (c.name.clone(), c.target.clone(), Some(c.container.clone()))
        }
        _ => {
            return Err(Invalid {
                reason: "InvalidMetricSourceType",
                error: format!("invalid {} metric source", metric.type_),
                wrapped: format!("invalid {} metric source", metric.type_),
            });
        }
    };
    let (reason, wrapped) = match &container {
        None => (
            "FailedGetResourceMetric",
            format!("failed to get {resource} resource metric value"),
        ),
        Some(c) => (
            "FailedGetContainerResourceMetric",
            format!("failed to get {c} container metric value"),
        ),
    };
    let invalid = |error: String| Invalid {
        reason,
        wrapped: format!("{wrapped}: {error}"),
        error,
    };
    // an average value is upstream's raw usage path, whatever the target's type says
    let (target, measured) = match (&target.average_value, target.average_utilization) {
        (Some(v), _) => (Target::AverageValue(milli(&v.0)), "usage"),
        (None, Some(u)) => (Target::Utilization(u), "utilization"),
        (None, None) => {
            let error = "invalid resource metric source: neither an average utilization target nor an average value (usage) target was set";
            return Err(Invalid {
                reason,
                error: error.into(),
                wrapped: error.into(),
            });
        }
    };
    let failed = |e: String| invalid(format!("failed to get {resource} {measured}: {e}"));
    if usage.is_none() {
        let list = inputs
            .api
            .pod_metrics(inputs.namespace, inputs.selector)
            .await
            .map_err(|e| {
                failed(format!("unable to get metrics for resource {resource}: unable to fetch metrics from resource metrics API: {e}"))
            })?;
        *usage = Some(list);
    }
    let samples = samples(
        usage.as_ref().expect("fetched"),
        &resource,
        container.as_deref(),
    );
    if samples.is_empty() {
        return Err(failed(format!(
            "unable to get metrics for resource {resource}: no metrics returned from resource metrics API"
        )));
    }
    let infos: Vec<PodInfo> = inputs
        .pods
        .iter()
        .map(|p| pod_info(p, &resource, container.as_deref()))
        .collect();
    let proposal = inputs
        .settings
        .calculator
        .resource_replicas(
            inputs.spec_replicas,
            target,
            resource == "cpu",
            &infos,
            &samples,
            inputs.now,
        )
        .map_err(failed)?;
    let describe = match (target, &container) {
        (Target::Utilization(_), None) => {
            format!("{resource} resource utilization (percentage of request)")
        }
        (Target::Utilization(_), Some(_)) => {
            format!("{resource} container resource utilization (percentage of request)")
        }
        (Target::AverageValue(_), _) => format!("{resource} resource"),
    };
    let current = MetricValueStatus {
        average_utilization: proposal.utilization,
        average_value: Some(milli_quantity(proposal.average_value)),
        value: None,
    };
    let status = match container {
        None => MetricStatus {
            type_: "Resource".into(),
            resource: Some(ResourceMetricStatus {
                name: resource,
                current,
            }),
            ..Default::default()
        },
        Some(container) => MetricStatus {
            type_: "ContainerResource".into(),
            container_resource: Some(ContainerResourceMetricStatus {
                name: resource,
                container,
                current,
            }),
            ..Default::default()
        },
    };
    Ok(MetricProposal {
        replicas: proposal.replicas,
        status,
        describe,
    })
}

/// A quantity in milli-units.
pub(super) fn milli(q: &str) -> i64 {
    Parsed::parse(q).map_or(0, |q| q.milli_value())
}

/// `milli` milli-units as a decimal quantity (upstream's `NewMilliQuantity(…, DecimalSI)`).
pub(super) fn milli_quantity(milli: i64) -> Quantity {
    Quantity(format_canonical(
        i128::from(milli) * 1_000_000,
        Format::DecimalSI,
    ))
}

/// Each pod's usage of `resource` in milli-units (one container's, for a container metric),
/// from a `PodMetricsList`.
fn samples(list: &Value, resource: &str, container: Option<&str>) -> BTreeMap<String, Sample> {
    let mut out = BTreeMap::new();
    for item in list["items"].as_array().into_iter().flatten() {
        let Some(name) = item["metadata"]["name"].as_str() else {
            continue;
        };
        let containers = item["containers"].as_array().into_iter().flatten();
        let mut value = 0;
        let mut found = false;
        for c in containers.filter(|c| container.is_none_or(|want| c["name"] == want)) {
            if let Some(q) = c["usage"][resource].as_str() {
                value += milli(q);
                found = true;
            }
        }
        let timestamp = item["timestamp"].as_str().and_then(|t| t.parse().ok());
        let window = item["window"]
            .as_str()
            .and_then(|w| skiff_apimachinery::duration::parse(w).ok())
            .map_or(SignedDuration::ZERO, SignedDuration::from_nanos);
        if let (true, Some(timestamp)) = (found, timestamp) {
            out.insert(
                name.to_string(),
                Sample {
                    value,
                    timestamp,
                    window,
                },
            );
        }
    }
    out
}

/// What the calculator needs of a pod: phase, readiness, start, and its request of `resource`
/// (the named container's, for a container metric).
pub(super) fn pod_info(pod: &Pod, resource: &str, container: Option<&str>) -> PodInfo {
    let name = pod.metadata.name.clone().unwrap_or_default();
    let status = pod.status.clone().unwrap_or_default();
    let ready = status
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == "Ready")
        .map(|c| {
            (
                c.status == "True",
                c.last_transition_time
                    .as_ref()
                    .map_or(Timestamp::UNIX_EPOCH, |t| t.0),
            )
        });
    let containers = pod.spec.iter().flat_map(|s| s.containers.iter());
    let mut request = Ok(0);
    let mut any = false;
    for c in containers.filter(|c| container.is_none_or(|want| c.name == want)) {
        any = true;
        let asked = c
            .resources
            .as_ref()
            .and_then(|r| r.requests.as_ref())
            .and_then(|r| r.get(resource));
        request = match (request, asked) {
            (Ok(sum), Some(q)) => Ok(sum + milli(&q.0)),
            (Ok(_), None) => Err(format!(
                "missing request for {resource} in container {} of Pod {name}",
                c.name
            )),
            (e, _) => e,
        };
    }
    if !any {
        request = Err(format!(
            "container {} not present in pod {name}",
            container.unwrap_or_default()
        ));
    }
    PodInfo {
        phase: status.phase.clone().unwrap_or_default(),
        deleting: pod.metadata.deletion_timestamp.is_some(),
        ready,
        start_time: status.start_time.as_ref().map(|t| t.0),
        request,
        name,
    }
}

/// The HPA's behavior, each missing part upstream's default.
pub fn behavior_of(
    spec: Option<&k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscalerBehavior>,
    downscale_stabilization: SignedDuration,
) -> Behavior {
    let defaults = Behavior::defaults(downscale_stabilization);
    let rules = |given: Option<&HPAScalingRules>, default: Rules| -> Rules {
        let Some(given) = given else { return default };
        Rules {
            window: given
                .stabilization_window_seconds
                .map_or(default.window, |s| SignedDuration::from_secs(i64::from(s))),
            select: match given.select_policy.as_deref() {
                Some("Min") => Select::Min,
                Some("Disabled") => Select::Disabled,
                Some(_) => Select::Max,
                None => default.select,
            },
            policies: match &given.policies {
                Some(policies) if !policies.is_empty() => policies
                    .iter()
                    .map(|p| {
                        let period = SignedDuration::from_secs(i64::from(p.period_seconds));
                        if p.type_ == "Pods" {
                            Policy::Pods {
                                value: p.value,
                                period,
                            }
                        } else {
                            Policy::Percent {
                                value: p.value,
                                period,
                            }
                        }
                    })
                    .collect(),
                _ => default.policies,
            },
        }
    };
    Behavior {
        up: rules(spec.and_then(|b| b.scale_up.as_ref()), defaults.up.clone()),
        down: rules(
            spec.and_then(|b| b.scale_down.as_ref()),
            defaults.down.clone(),
        ),
    }
}

/// Sets `conditions` on `status` (a transition time changes only with the status) and writes
/// it when it differs from the HPA's.
async fn write_status(
    api: &dyn Autoscaling,
    hpa: &HorizontalPodAutoscaler,
    mut status: HorizontalPodAutoscalerStatus,
    conditions: Vec<Condition>,
    now: Timestamp,
) -> Result<(), String> {
    let mut current = status.conditions.take().unwrap_or_default();
    for (type_, ok, reason, message) in conditions {
        let value = if ok { "True" } else { "False" };
        let since = current
            .iter()
            .find(|c| c.type_ == type_ && c.status == value)
            .and_then(|c| c.last_transition_time.clone())
            .unwrap_or(Time(now));
        current.retain(|c| c.type_ != type_);
        current.push(HorizontalPodAutoscalerCondition {
            type_: type_.into(),
            status: value.into(),
            reason: Some(reason.into()),
            message: Some(message),
            last_transition_time: Some(since),
        });
    }
    let order = |t: &str| {
        ["AbleToScale", "ScalingActive", "ScalingLimited"]
            .iter()
            .position(|o| *o == t)
    };
    current.sort_by_key(|c| order(&c.type_));
    status.conditions = Some(current);
    if hpa.status.as_ref() == Some(&status) {
        return Ok(());
    }
    let mut next = hpa.clone();
    next.status = Some(status);
    api.update_status(&next).await
}

#[cfg(test)]
#[path = "controller_tests.rs"]
mod tests;
