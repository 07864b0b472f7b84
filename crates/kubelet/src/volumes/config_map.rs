//! configMap volumes: the ConfigMap's keys as files through the atomic writer, refreshed when the
//! ConfigMap changes.

use k8s_openapi::api::core::v1::ConfigMapVolumeSource;

use super::atomic_writer::Payload;
use super::keys::{self, Kind};
use crate::api::PodApi;

/// The plugin's directory name under `volumes/`.
pub const PLUGIN: &str = "kubernetes.io~configmap";

pub async fn payload(
    api: &dyn PodApi,
    namespace: &str,
    source: &ConfigMapVolumeSource,
) -> Result<Payload, String> {
    let mode = source.default_mode.unwrap_or(keys::DEFAULT_MODE);
    let items = source.items.as_deref();
    keys::read_payload(
        api,
        namespace,
        Kind::ConfigMap,
        &source.name,
        items,
        mode,
        source.optional,
    )
    .await
}
