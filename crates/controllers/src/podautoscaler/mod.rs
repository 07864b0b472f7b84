//! `horizontal-pod-autoscaler` (upstream's `podautoscaler` package): every HPA is synced each
//! `--horizontal-pod-autoscaler-sync-period` (and on its own changes) against its target's
//! `scale` subresource and the pods' resource metrics from `metrics.k8s.io`.
//!
//! # Layout
//! - [`replicas`]: the replicas a resource metric asks for, from the target's pods and their
//!   metrics (upstream's `ReplicaCalculator`).
//! - [`behavior`]: stabilization windows, scaling policies and bounds applied to that proposal
//!   (upstream's `normalizeDesiredReplicasWithBehaviors`), with the conditions' reasons.
//! - [`controller`]: one HPA's sync: scale, metrics, proposal, rescale, events, status.

pub mod behavior;
pub mod controller;
pub mod replicas;

use std::sync::Arc;

use async_trait::async_trait;
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::autoscaling::v1::Scale;
use k8s_openapi::api::autoscaling::v2::{CrossVersionObjectReference, HorizontalPodAutoscaler};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{DynamicObject, PostParams};
use kube::core::GroupVersionKind;
use kube::{Api, Resource, ResourceExt};
use serde_json::Value;
use skiff_runtime::controller::{Action, Controller};
use skiff_runtime::events::Recorder;

use self::controller::{Autoscaling, Histories, Settings, reconcile};
use self::replicas::Calculator;
use crate::events::Note;
use crate::{Context, triggers};

/// The API server, as the controller uses it.
struct KubeAutoscaling {
    client: kube::Client,
    recorder: Recorder,
}

impl KubeAutoscaling {
    /// The target's API (the served resource of its kind, found by discovery).
    async fn target(
        &self,
        namespace: &str,
        target: &CrossVersionObjectReference,
    ) -> Result<Api<DynamicObject>, String> {
        let api_version = target.api_version.as_deref().unwrap_or("v1");
        let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
        let gvk = GroupVersionKind::gvk(group, version, &target.kind);
        let (resource, _) = kube::discovery::pinned_kind(&self.client, &gvk)
            .await
            .map_err(|e| {
                format!(
                    "unable to find the target's kind {api_version} {}: {e}",
                    target.kind
                )
            })?;
        Ok(Api::namespaced_with(
            self.client.clone(),
            namespace,
            &resource,
        ))
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
        api.get_scale(&target.name).await.map_err(|e| e.to_string())
    }

    async fn set_replicas(
        &self,
        namespace: &str,
        target: &CrossVersionObjectReference,
        replicas: i32,
    ) -> Result<(), String> {
        let api = self.target(namespace, target).await?;
        let mut scale = api
            .get_scale(&target.name)
            .await
            .map_err(|e| e.to_string())?;
        scale.spec.get_or_insert_default().replicas = Some(replicas);
        api.replace_scale(&target.name, &PostParams::default(), &scale)
            .await
            .map(|_| ())
            .map_err(|e| e.to_string())
    }

    async fn pod_metrics(&self, namespace: &str, selector: &str) -> Result<Value, String> {
        let query: String = form_urlencoded::Serializer::new(String::new())
            .append_pair("labelSelector", selector)
            .finish();
        let path = format!("/apis/metrics.k8s.io/v1beta1/namespaces/{namespace}/pods?{query}");
        let request = http::Request::get(path)
            .body(Vec::new())
            .map_err(|e| e.to_string())?;
        self.client
            .request::<Value>(request)
            .await
            .map_err(|e| e.to_string())
    }

    async fn update_status(&self, hpa: &HorizontalPodAutoscaler) -> Result<(), String> {
        let api: Api<HorizontalPodAutoscaler> =
            Api::namespaced(self.client.clone(), &hpa.namespace().unwrap_or_default());
        api.replace_status(&hpa.name_any(), &PostParams::default(), hpa)
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
                let synced = reconcile(&hpa, &pods, api.as_ref(), &histories, &settings, Timestamp::now()).await;
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
