//! `horizontal-pod-autoscaler` (upstream's `podautoscaler` package): every HPA is synced each
//! `--horizontal-pod-autoscaler-sync-period` (and on its own changes) against its target's
//! `scale` subresource and its metrics: the pods' resource metrics from `metrics.k8s.io`, custom
//! metrics of the pods or of another object from `custom.metrics.k8s.io/v1beta2`, and external
//! metrics from `external.metrics.k8s.io/v1beta1`, which adapters serve through `APIService`s.
//!
//! # Layout
//! - [`replicas`]: the replicas a metric asks for, from the target's pods and their metrics, or
//!   from one object's or external value (upstream's `ReplicaCalculator`).
//! - [`custom`]: `Pods`, `Object` and `External` metrics: the reads, the proposals, their
//!   statuses and upstream's errors (upstream's `computeStatusFor{Pods,Object,External}Metric`).
//! - [`behavior`]: stabilization windows, scaling policies and bounds applied to that proposal
//!   (upstream's `normalizeDesiredReplicasWithBehaviors`), with the conditions' reasons.
//! - [`controller`]: one HPA's sync: scale, metrics, proposal, rescale, events, status.

pub mod behavior;
pub mod controller;
pub mod custom;
pub mod replicas;

use std::sync::Arc;

use async_trait::async_trait;
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::autoscaling::v1::Scale;
use k8s_openapi::api::autoscaling::v2::{CrossVersionObjectReference, HorizontalPodAutoscaler};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{DynamicObject, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::{Api, Resource, ResourceExt};
use serde_json::Value;
use skiff_runtime::controller::{Action, Controller};
use skiff_runtime::events::Recorder;

use self::controller::{Autoscaling, Histories, Settings, reconcile};
use self::replicas::Calculator;
use crate::events::Note;
use crate::{Context, triggers};

/// The API server, as the controller uses it.
#[derive(Clone)]
struct KubeAutoscaling {
    client: kube::Client,
    recorder: Recorder,
    /// Sent with every request of one HPA's sync: a W3C `traceparent` whose trace ID is the
    /// HPA's UID, so that the API server's lifecycle trace shows the metric reads and scale
    /// writes on the HPA's timeline.
    traceparent: Option<http::HeaderValue>,
}

impl KubeAutoscaling {
    /// This API for the requests of `hpa`'s sync.
    fn for_hpa(&self, hpa: &HorizontalPodAutoscaler) -> KubeAutoscaling {
        KubeAutoscaling {
            traceparent: hpa
                .metadata
                .uid
                .as_deref()
                .and_then(skiff_runtime::trace::traceparent),
            ..self.clone()
        }
    }

    /// Sends `request` with the sync's `traceparent`.
    async fn send<T: serde::de::DeserializeOwned>(
        &self,
        mut request: http::Request<Vec<u8>>,
    ) -> kube::Result<T> {
        if let Some(traceparent) = &self.traceparent {
            request
                .headers_mut()
                .insert("traceparent", traceparent.clone());
        }
        self.client.request(request).await
    }

    /// The served resource of `reference`'s kind, found by discovery.
    async fn resource(
        &self,
        reference: &CrossVersionObjectReference,
    ) -> Result<ApiResource, String> {
        let api_version = reference.api_version.as_deref().unwrap_or("v1");
        let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
        let gvk = GroupVersionKind::gvk(group, version, &reference.kind);
        let (resource, _) = kube::discovery::pinned_kind(&self.client, &gvk)
            .await
            .map_err(|e| {
                format!(
                    "unable to find the kind {api_version} {}: {e}",
                    reference.kind
                )
            })?;
        Ok(resource)
    }

    /// The target's API.
    async fn target(
        &self,
        namespace: &str,
        target: &CrossVersionObjectReference,
    ) -> Result<Api<DynamicObject>, String> {
        let resource = self.resource(target).await?;
        Ok(Api::namespaced_with(
            self.client.clone(),
            namespace,
            &resource,
        ))
    }

    /// GETs `path` with `query`'s non-empty parameters: the body, or the error's message as
    /// client-go gives it (a `Status`'s message).
    async fn get(&self, path: &str, query: &[(&str, &str)]) -> Result<Value, ApiFailure> {
        let query = {
            let mut encoded = form_urlencoded::Serializer::new(String::new());
            for (name, value) in query.iter().filter(|(_, v)| !v.is_empty()) {
                encoded.append_pair(name, value);
            }
            encoded.finish()
        };
        let uri = if query.is_empty() {
            path.to_string()
        } else {
            format!("{path}?{query}")
        };
        let request = http::Request::get(uri)
            .body(Vec::new())
            .map_err(|e| ApiFailure::Other(e.to_string()))?;
        self.send::<Value>(request).await.map_err(|e| match e {
            kube::Error::Api(s) if s.code == 404 => ApiFailure::NotFound(message(&s)),
            kube::Error::Api(s) => ApiFailure::Other(message(&s)),
            e => ApiFailure::Other(e.to_string()),
        })
    }

    /// A `custom.metrics.k8s.io` read, of `v1beta2` or, when the API serves only that, of
    /// `v1beta1` (the fields read of a value are the same in both). Not found because the API
    /// is not registered is upstream's discovery error (its client finds the served version by
    /// discovery first).
    async fn custom(&self, path: &str, query: &[(&str, &str)]) -> Result<Value, String> {
        let root = "/apis/custom.metrics.k8s.io";
        let missing = match self.get(&format!("{root}/v1beta2/{path}"), query).await {
            Ok(list) => return Ok(list),
            Err(ApiFailure::NotFound(m)) => m,
            Err(ApiFailure::Other(m)) => return Err(m),
        };
        let versions = match self.get(root, &[]).await {
            Err(ApiFailure::NotFound(_)) => {
                return Err("no known available metric versions found".into());
            }
            Err(ApiFailure::Other(_)) => return Err(missing),
            Ok(group) => group,
        };
        let served = |v: &str| {
            versions["versions"]
                .as_array()
                .is_some_and(|vs| vs.iter().any(|x| x["version"] == v))
        };
        if served("v1beta2") || !served("v1beta1") {
            return Err(missing);
        }
        self.get(&format!("{root}/v1beta1/{path}"), query)
            .await
            .map_err(ApiFailure::into_message)
    }
}

/// A failed read: not found (which may mean an API that is not registered), or another error.
enum ApiFailure {
    NotFound(String),
    Other(String),
}

impl ApiFailure {
    fn into_message(self) -> String {
        match self {
            ApiFailure::NotFound(m) | ApiFailure::Other(m) => m,
        }
    }
}

/// A `Status`'s message, or client-go's for its code when it has none.
fn message(status: &kube::core::Status) -> String {
    if !status.message.is_empty() {
        return status.message.clone();
    }
    match status.code {
        404 => "the server could not find the requested resource".into(),
        code => format!("the server responded with the status code {code}"),
    }
}

#[async_trait]
impl Autoscaling for KubeAutoscaling {
    async fn scale(
        &self,
        namespace: &str,
        target: &CrossVersionObjectReference,
    ) -> Result<Scale, String> {
        let api = self.target(namespace, target).await?;
        let request = kube::core::Request::new(api.resource_url())
            .get_subresource("scale", &target.name)
            .map_err(|e| e.to_string())?;
        self.send(request).await.map_err(|e| e.to_string())
    }

    async fn set_replicas(
        &self,
        namespace: &str,
        target: &CrossVersionObjectReference,
        replicas: i32,
    ) -> Result<(), String> {
        let mut scale = self.scale(namespace, target).await?;
        scale.spec.get_or_insert_default().replicas = Some(replicas);
        let api = self.target(namespace, target).await?;
        let body = serde_json::to_vec(&scale).map_err(|e| e.to_string())?;
        let request = kube::core::Request::new(api.resource_url())
            .replace_subresource("scale", &target.name, &PostParams::default(), body)
            .map_err(|e| e.to_string())?;
        self.send::<Scale>(request)
            .await
            .map(|_| ())
            .map_err(|e| e.to_string())
    }

    async fn pod_metrics(&self, namespace: &str, selector: &str) -> Result<Value, String> {
        let path = format!("/apis/metrics.k8s.io/v1beta1/namespaces/{namespace}/pods");
        self.get(&path, &[("labelSelector", selector)])
            .await
            .map_err(ApiFailure::into_message)
    }

    async fn pods_metric(
        &self,
        namespace: &str,
        selector: &str,
        metric: &str,
        metric_selector: &str,
    ) -> Result<Value, String> {
        let path = format!("namespaces/{namespace}/pods/*/{metric}");
        let query = [
            ("labelSelector", selector),
            ("metricLabelSelector", metric_selector),
        ];
        self.custom(&path, &query).await
    }

    async fn object_metric(
        &self,
        namespace: &str,
        object: &CrossVersionObjectReference,
        metric: &str,
        metric_selector: &str,
    ) -> Result<Value, String> {
        let resource = self.resource(object).await?;
        // a Namespace's metrics are the root-scoped ones of the HPA's own namespace: a
        // reference may not escape it
        let path = if resource.group.is_empty() && resource.kind == "Namespace" {
            format!("namespaces/{namespace}/metrics/{metric}")
        } else {
            let qualified = if resource.group.is_empty() {
                resource.plural.clone()
            } else {
                format!("{}.{}", resource.plural, resource.group)
            };
            format!(
                "namespaces/{namespace}/{qualified}/{}/{metric}",
                object.name
            )
        };
        self.custom(&path, &[("metricLabelSelector", metric_selector)])
            .await
    }

    async fn external_metric(
        &self,
        namespace: &str,
        metric: &str,
        metric_selector: &str,
    ) -> Result<Value, String> {
        let path = format!("/apis/external.metrics.k8s.io/v1beta1/namespaces/{namespace}/{metric}");
        self.get(&path, &[("labelSelector", metric_selector)])
            .await
            .map_err(ApiFailure::into_message)
    }

    async fn update_status(&self, hpa: &HorizontalPodAutoscaler) -> Result<(), String> {
        let api: Api<HorizontalPodAutoscaler> =
            Api::namespaced(self.client.clone(), &hpa.namespace().unwrap_or_default());
        let body = serde_json::to_vec(hpa).map_err(|e| e.to_string())?;
        let request = kube::core::Request::new(api.resource_url())
            .replace_subresource("status", &hpa.name_any(), &PostParams::default(), body)
            .map_err(|e| e.to_string())?;
        self.send::<HorizontalPodAutoscaler>(request)
            .await
            .map(|_| ())
            .map_err(|e| e.to_string())
    }

    fn event(&self, hpa: &HorizontalPodAutoscaler, note: Note) {
        note.record(&self.recorder, hpa.object_ref(&()));
    }
}

/// Runs the controller: HPAs are the keys, each synced again every sync period.
pub async fn run(ctx: Arc<Context>) -> Result<(), crate::Error> {
    let controller = Controller::new("horizontal-pod-autoscaler");
    let hpas = ctx.informers.get::<HorizontalPodAutoscaler>();
    let pods = ctx.informers.get::<Pod>();
    triggers::queue_own_keys(&hpas, controller.queue());
    hpas.cache().wait_until_ready().await;
    pods.cache().wait_until_ready().await;
    tracing::info!("horizontal-pod-autoscaler: caches synced");
    let config = ctx.config.hpa;
    let settings = Settings {
        calculator: Calculator {
            tolerance: config.tolerance,
            cpu_initialization_period: signed(config.cpu_initialization_period),
            initial_readiness_delay: signed(config.initial_readiness_delay),
        },
        downscale_stabilization: signed(config.downscale_stabilization),
    };
    let api = Arc::new(KubeAutoscaling {
        client: ctx.client.clone(),
        recorder: ctx.recorder("horizontal-pod-autoscaler"),
        traceparent: None,
    });
    let histories = Arc::new(Histories::default());
    let (hpas, pods) = (hpas.cache().clone(), pods.cache().clone());
    controller
        .run(move |key| {
            let (api, histories) = (api.clone(), histories.clone());
            let (hpa, pods) = (hpas.get(&key), pods.clone());
            async move {
                let Some(hpa) = hpa else {
                    return Ok::<_, kube::Error>(Action::AwaitChange);
                };
                let pods = pods.namespaced(&hpa.namespace().unwrap_or_default());
                let api = api.for_hpa(&hpa);
                let synced = reconcile(&hpa, &pods, &api, &histories, &settings, Timestamp::now()).await;
                if let Err(e) = synced {
                    tracing::debug!(hpa = %key, error = %e, "horizontal-pod-autoscaler: sync failed");
                }
                Ok(Action::RequeueAfter(config.sync_period))
            }
        })
        .await;
    Ok(())
}

fn signed(d: std::time::Duration) -> SignedDuration {
    SignedDuration::try_from(d).unwrap_or(SignedDuration::MAX)
}

#[cfg(test)]
#[path = "mod_tests.rs"]
mod tests;
