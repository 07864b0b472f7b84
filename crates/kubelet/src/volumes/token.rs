//! Service account tokens for projected `serviceAccountToken` sources, as upstream's kubelet
//! token manager keeps them: requested through TokenRequest (audience, expirationSeconds,
//! bound to the pod), cached per pod, and requested again once 80% of the requested lifetime
//! has passed or the token is 24 hours old.

use std::collections::HashMap;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::authentication::v1::{BoundObjectReference, TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{Pod, ServiceAccountTokenProjection};
use parking_lot::Mutex;

use crate::api::PodApi;

/// Upstream's default `expirationSeconds` of a projected token.
pub const DEFAULT_EXPIRATION_SECONDS: i64 = 3600;
/// The oldest a cached token gets (upstream's `maxTTL`).
const MAX_AGE: SignedDuration = SignedDuration::from_hours(24);

/// (pod uid, service account, audience, expirationSeconds)
type Key = (String, String, String, i64);

/// Tokens by pod and request. The mutex guards the map only; it is never held across a request.
#[derive(Default)]
pub struct TokenCache {
    entries: Mutex<HashMap<Key, TokenRequest>>,
}

/// Whether a token must be requested again: 80% of its requested lifetime or 24 hours passed.
pub fn requires_refresh(token: &TokenRequest, now: Timestamp) -> bool {
    let Some(status) = &token.status else {
        return true;
    };
    let seconds = token
        .spec
        .expiration_seconds
        .unwrap_or(DEFAULT_EXPIRATION_SECONDS);
    let expires = status.expiration_timestamp.0;
    let issued = expires - SignedDuration::from_secs(seconds);
    now > issued + MAX_AGE || now > expires - SignedDuration::from_secs(seconds * 20 / 100)
}

impl TokenCache {
    /// The pod's token for `source`: the cached one unless it needs a refresh.
    pub async fn get(
        &self,
        api: &dyn PodApi,
        pod: &Pod,
        source: &ServiceAccountTokenProjection,
        now: Timestamp,
    ) -> Result<String, String> {
        let m = &pod.metadata;
        let namespace = m.namespace.clone().unwrap_or_else(|| "default".into());
        let uid = m.uid.clone().unwrap_or_default();
        let service_account = pod
            .spec
            .as_ref()
            .and_then(|s| s.service_account_name.clone())
            .unwrap_or_else(|| "default".into());
        let audience = source.audience.clone().unwrap_or_default();
        let seconds = source
            .expiration_seconds
            .unwrap_or(DEFAULT_EXPIRATION_SECONDS);
        let key = (
            uid.clone(),
            service_account.clone(),
            audience.clone(),
            seconds,
        );
        if let Some(cached) = self.entries.lock().get(&key)
            && !requires_refresh(cached, now)
            && let Some(status) = &cached.status
        {
            return Ok(status.token.clone());
        }
        let request = TokenRequest {
            spec: TokenRequestSpec {
                // no audience: the API server's own (its default API audiences)
                audiences: if audience.is_empty() {
                    Vec::new()
                } else {
                    vec![audience]
                },
                expiration_seconds: Some(seconds),
                bound_object_ref: Some(BoundObjectReference {
                    api_version: Some("v1".into()),
                    kind: Some("Pod".into()),
                    name: m.name.clone(),
                    uid: Some(uid),
                }),
            },
            ..Default::default()
        };
        let issued = api
            .token_request(&namespace, &service_account, &request)
            .await
            .map_err(|e| format!("failed to fetch token: {}", e.api_message()))?;
        let token = issued
            .status
            .as_ref()
            .map(|s| s.token.clone())
            .ok_or_else(|| {
                format!(
                    "no token in the TokenRequest of serviceaccount {namespace}/{service_account}"
                )
            })?;
        self.entries.lock().insert(key, issued);
        Ok(token)
    }

    /// Drops the tokens of a pod that is gone.
    pub fn forget(&self, uid: &str) {
        self.entries.lock().retain(|k, _| k.0 != uid);
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::api::RecordingPodApi;

    fn pod() -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": "prod", "uid": "u1"},
            "spec": {"serviceAccountName": "robot", "containers": [{"name": "c"}]},
        }))
        .unwrap()
    }

    fn source() -> ServiceAccountTokenProjection {
        ServiceAccountTokenProjection {
            audience: Some("vault".into()),
            expiration_seconds: Some(1000),
            path: "token".into(),
        }
    }

    #[tokio::test]
    async fn a_token_is_bound_to_the_pod_and_reused_until_80_percent_of_its_lifetime() {
        let api = RecordingPodApi::default();
        let cache = TokenCache::default();
        let t0 = Timestamp::UNIX_EPOCH;
        let at = |s: i64| t0 + SignedDuration::from_secs(s);
        assert_eq!(
            cache.get(&api, &pod(), &source(), t0).await.unwrap(),
            "token-1"
        );
        assert_eq!(
            cache.get(&api, &pod(), &source(), at(800)).await.unwrap(),
            "token-1"
        );
        assert_eq!(
            cache.get(&api, &pod(), &source(), at(801)).await.unwrap(),
            "token-2"
        );

        let requests = api.token_requests();
        let spec = &requests[0].spec;
        assert_eq!(spec.audiences, ["vault"]);
        assert_eq!(spec.expiration_seconds, Some(1000));
        let bound = spec.bound_object_ref.clone().unwrap();
        assert_eq!(
            (
                bound.kind.as_deref(),
                bound.name.as_deref(),
                bound.uid.as_deref()
            ),
            (Some("Pod"), Some("web"), Some("u1"))
        );
    }

    #[tokio::test]
    async fn a_forgotten_pod_gets_a_new_token() {
        let api = RecordingPodApi::default();
        let cache = TokenCache::default();
        let now = Timestamp::UNIX_EPOCH;
        cache.get(&api, &pod(), &source(), now).await.unwrap();
        cache.forget("u1");
        assert_eq!(
            cache.get(&api, &pod(), &source(), now).await.unwrap(),
            "token-2"
        );
    }
}
