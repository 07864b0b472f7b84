//! secret volumes: the Secret's keys as files through the atomic writer, on a tmpfs as upstream
//! keeps them (never on disk), refreshed when the Secret changes.

use k8s_openapi::api::core::v1::SecretVolumeSource;

use super::atomic_writer::Payload;
use super::keys::{self, Kind};
use crate::api::PodApi;

/// The plugin's directory name under `volumes/`.
pub const PLUGIN: &str = "kubernetes.io~secret";

pub async fn payload(
    api: &dyn PodApi,
    namespace: &str,
    source: &SecretVolumeSource,
) -> Result<Payload, String> {
    let name = source.secret_name.as_deref().unwrap_or_default();
    let mode = source.default_mode.unwrap_or(keys::DEFAULT_MODE);
    let items = source.items.as_deref();
    keys::read_payload(
        api,
        namespace,
        Kind::Secret,
        name,
        items,
        mode,
        source.optional,
    )
    .await
}
