//! projected volumes: one directory made of several sources (serviceAccountToken, configMap,
//! secret, downwardAPI) through the atomic writer, on a tmpfs as upstream keeps them (they may
//! hold secrets and tokens); refreshed with their sources, tokens before they expire.

use std::collections::BTreeMap;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Pod, ProjectedVolumeSource};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as ApiQuantity;

use super::atomic_writer::{FileProjection, Payload};
use super::downward_api;
use super::keys::{self, Kind};
use super::ownership;
use super::token::TokenCache;
use crate::api::PodApi;

/// The plugin's directory name under `volumes/`.
pub const PLUGIN: &str = "kubernetes.io~projected";

/// The files of all sources; later sources win a path both write. A token file belongs to the
/// user all the pod's containers run as, if they run as one ([`ownership::pod_fs_user`]), and
/// is `0600` when it has that owner or the pod has an fsGroup (upstream's: the fsGroup change
/// then makes it `0640`, readable by the group and nobody else), else the volume's default
/// mode.
pub async fn payload(
    api: &dyn PodApi,
    pod: &Pod,
    source: &ProjectedVolumeSource,
    allocatable: &BTreeMap<String, ApiQuantity>,
    tokens: &TokenCache,
    now: Timestamp,
) -> Result<Payload, String> {
    let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
    let mode = source.default_mode.unwrap_or(keys::DEFAULT_MODE);
    let mut out = Payload::new();
    for s in source.sources.iter().flatten() {
        let keyed = [
            s.config_map
                .as_ref()
                .map(|c| (Kind::ConfigMap, &c.name, &c.items, c.optional)),
            s.secret
                .as_ref()
                .map(|c| (Kind::Secret, &c.name, &c.items, c.optional)),
        ];
        for (kind, name, items, optional) in keyed.into_iter().flatten() {
            let items = items.as_deref();
            out.extend(
                keys::read_payload(api, namespace, kind, name, items, mode, optional).await?,
            );
        }
        if let Some(d) = &s.downward_api {
            let items = d.items.as_deref().unwrap_or_default();
            out.extend(downward_api::payload(pod, items, mode, allocatable)?);
        }
        if let Some(t) = &s.service_account_token {
            let token = tokens.get(api, pod, t, now).await?;
            let has_fs_group = pod
                .spec
                .as_ref()
                .and_then(|s| s.security_context.as_ref())
                .is_some_and(|sc| sc.fs_group.is_some());
            let fs_user = ownership::pod_fs_user(pod);
            let private = has_fs_group || fs_user.is_some();
            out.insert(
                t.path.clone(),
                FileProjection {
                    data: token.into_bytes(),
                    mode: if private { 0o600 } else { mode as u32 },
                    fs_user,
                },
            );
        }
        if s.cluster_trust_bundle.is_some() {
            return Err("skiff does not support clusterTrustBundle projections".into());
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::api::RecordingPodApi;

    #[tokio::test]
    async fn the_upstream_service_account_volume_has_a_token_the_ca_and_the_namespace() {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": "prod", "uid": "u1"},
            "spec": {"containers": [{"name": "c"}], "volumes": [{"name": "kube-api-access",
                "projected": {"defaultMode": 0o644, "sources": [
                    {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                    {"configMap": {"name": "kube-root-ca.crt",
                        "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                    {"downwardAPI": {"items": [{"path": "namespace",
                        "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}},
                ]}}]},
        }))
        .unwrap();
        let api = RecordingPodApi::default();
        api.config_maps.lock().insert(
            "kube-root-ca.crt".into(),
            BTreeMap::from([("ca.crt".to_string(), "PEM".to_string())]),
        );
        let source = pod.spec.as_ref().unwrap().volumes.as_ref().unwrap()[0]
            .projected
            .clone()
            .unwrap();
        let tokens = TokenCache::default();
        let now = Timestamp::UNIX_EPOCH;
        let p = payload(&api, &pod, &source, &BTreeMap::new(), &tokens, now)
            .await
            .unwrap();
        let text = |k: &str| String::from_utf8(p[k].data.clone()).unwrap();
        assert_eq!(
            (text("token"), text("ca.crt"), text("namespace")),
            ("token-1".into(), "PEM".into(), "prod".into())
        );
        assert!(api.token_requests()[0].spec.audiences.is_empty());
    }

    #[tokio::test]
    async fn a_token_belongs_to_the_pods_one_user_and_is_private_to_it_or_its_fs_group() {
        let token = |pod_sc: serde_json::Value| async move {
            let pod: Pod = serde_json::from_value(json!({
                "metadata": {"name": "web", "namespace": "prod", "uid": "u1"},
                "spec": {"securityContext": pod_sc, "containers": [{"name": "c"}]},
            }))
            .unwrap();
            let source: ProjectedVolumeSource = serde_json::from_value(json!({
                "defaultMode": 0o644, "sources": [{"serviceAccountToken": {"path": "token"}}]}))
            .unwrap();
            let api = RecordingPodApi::default();
            let tokens = TokenCache::default();
            let now = Timestamp::UNIX_EPOCH;
            let p = payload(&api, &pod, &source, &BTreeMap::new(), &tokens, now)
                .await
                .unwrap();
            (p["token"].mode, p["token"].fs_user)
        };
        assert_eq!(token(json!({})).await, (0o644, None));
        assert_eq!(token(json!({"runAsUser": 1000})).await, (0o600, Some(1000)));
        assert_eq!(token(json!({"fsGroup": 2000})).await, (0o600, None));
    }

    #[tokio::test]
    async fn a_missing_non_optional_source_fails_the_volume() {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": "prod", "uid": "u1"},
            "spec": {"containers": [{"name": "c"}]},
        }))
        .unwrap();
        let source: ProjectedVolumeSource = serde_json::from_value(json!({"sources": [
            {"secret": {"name": "absent"}}]}))
        .unwrap();
        let api = RecordingPodApi::default();
        let err = payload(
            &api,
            &pod,
            &source,
            &BTreeMap::new(),
            &TokenCache::default(),
            Timestamp::UNIX_EPOCH,
        )
        .await
        .unwrap_err();
        assert_eq!(err, "secret \"absent\" not found");
    }
}
