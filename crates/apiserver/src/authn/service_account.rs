//! Service account tokens (upstream's `serviceaccount.JWTTokenAuthenticator` with its bound
//! token validator): JWTs whose `iss` is the API server's issuer, signed by its service account
//! key (see [`crate::tokens`]). A token from another issuer is not this authenticator's; one of
//! ours must verify, name an audience the request accepts, be inside `nbf`..`exp` (a minute's
//! leeway, as upstream's JOSE library), and name a service account, and the pod or secret it is
//! bound to, that still exist with the uid it was issued for. The user is
//! `system:serviceaccount:NS:NAME` in `system:serviceaccounts` and
//! `system:serviceaccounts:NS`, with upstream's extra attributes naming the pod and node.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use base64::Engine;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde_json::Value;

use super::{TokenAuthenticator, TokenResponse, UserInfo, intersect};
use crate::tokens::{Claims, Ref};

/// Upstream's leeway on `exp`, `nbf` and `iat` (go-jose's `DefaultLeeway`).
const LEEWAY_SECONDS: i64 = 60;

pub const EXTRA_POD_NAME: &str = "authentication.kubernetes.io/pod-name";
pub const EXTRA_POD_UID: &str = "authentication.kubernetes.io/pod-uid";
pub const EXTRA_NODE_NAME: &str = "authentication.kubernetes.io/node-name";
pub const EXTRA_NODE_UID: &str = "authentication.kubernetes.io/node-uid";
pub const EXTRA_CREDENTIAL_ID: &str = "authentication.kubernetes.io/credential-id";

/// Reads live objects by core/v1 plural, namespace and name (the API server's watch cache).
pub trait ObjectLookup: Send + Sync {
    fn get(&self, plural: &str, namespace: &str, name: &str) -> Option<Value>;
}

/// The watch cache (a token for a pod created a moment ago may name a pod the cache has not
/// seen yet: that request is refused, and the client's retry succeeds).
impl ObjectLookup for crate::cache::Cacher {
    fn get(&self, plural: &str, namespace: &str, name: &str) -> Option<Value> {
        let rt = skiff_apimachinery::catalog::lookup("", "v1", plural)?;
        let path = if namespace.is_empty() {
            name.to_string()
        } else {
            format!("{namespace}/{name}")
        };
        self.resource(rt).get(&path)?.object().ok()
    }
}

/// Tokens whose signature was verified lately, at most this many.
const VERIFIED_TOKENS: usize = 4096;

/// Verifies the API server's own service account tokens.
pub struct ServiceAccountAuthenticator {
    issuer: String,
    key: DecodingKey,
    /// The API server's audiences, asked for when the request names none.
    api_audiences: Vec<String>,
    objects: Arc<dyn ObjectLookup>,
    /// Seconds since the epoch.
    clock: fn() -> i64,
    /// The claims of tokens whose signature verified, by the token's SHA-256. Verifying an
    /// ES256 signature was 4% of the API server's CPU at 150,000 pods, every request of the
    /// controller manager's service accounts paying it again. Upstream caches the whole
    /// answer for 10 s instead, so a token of a deleted pod still works for up to 10 s; here
    /// only the signature's verdict is kept, and the times and the bound objects are checked
    /// on every request.
    verified: parking_lot::Mutex<HashMap<[u8; 32], Arc<Claims>>>,
}

impl ServiceAccountAuthenticator {
    pub fn new(
        issuer: &str,
        key: DecodingKey,
        api_audiences: Vec<String>,
        objects: Arc<dyn ObjectLookup>,
        clock: fn() -> i64,
    ) -> Self {
        Self {
            issuer: issuer.into(),
            key,
            api_audiences,
            objects,
            clock,
            verified: Default::default(),
        }
    }

    /// The token's claims if its signature is ours, verified once per token.
    fn verify(&self, token: &str) -> Result<Arc<Claims>, String> {
        let digest = ring::digest::digest(&ring::digest::SHA256, token.as_bytes());
        let hash: [u8; 32] = digest.as_ref().try_into().expect("SHA-256 is 32 bytes");
        if let Some(claims) = self.verified.lock().get(&hash) {
            return Ok(claims.clone());
        }
        let mut validation = Validation::new(Algorithm::ES256);
        validation.validate_exp = false;
        validation.validate_nbf = false;
        validation.validate_aud = false;
        validation.required_spec_claims.clear();
        let claims = jsonwebtoken::decode::<Claims>(token, &self.key, &validation)
            .map_err(|e| format!("invalid bearer token, {e}"))?
            .claims;
        let claims = Arc::new(claims);
        let mut verified = self.verified.lock();
        if verified.len() >= VERIFIED_TOKENS {
            verified.clear();
        }
        verified.insert(hash, claims.clone());
        Ok(claims)
    }
}

/// The `iss` of a JWT, read without verifying (upstream's `hasCorrectIssuer`): only tokens of
/// our issuer are ours to judge.
pub fn unverified_issuer(token: &str) -> Option<String> {
    let mut parts = token.split('.');
    let (_, payload, _, None) = (parts.next()?, parts.next()?, parts.next()?, parts.next()) else {
        return None;
    };
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload.trim_end_matches('='))
        .ok()?;
    let claims: Value = serde_json::from_slice(&bytes).ok()?;
    claims["iss"].as_str().map(str::to_string)
}

/// Checks `nbf`/`exp` at `now` with upstream's leeway and messages.
pub fn check_times(now: i64, nbf: i64, exp: i64) -> Result<(), String> {
    if now - LEEWAY_SECONDS > exp {
        return Err("service account token has expired".into());
    }
    if now + LEEWAY_SECONDS < nbf {
        return Err("service account token is not valid yet".into());
    }
    Ok(())
}

impl ServiceAccountAuthenticator {
    /// The live object a claim names must exist with the claimed uid and not be deleting.
    fn check_live(&self, plural: &str, what: &str, namespace: &str, r: &Ref) -> Result<(), String> {
        let Some(obj) = self.objects.get(plural, namespace, &r.name) else {
            return Err(format!("{plural} \"{}\" not found", r.name));
        };
        let uid = obj.pointer("/metadata/uid").and_then(Value::as_str);
        if uid != Some(r.uid.as_str()) {
            return Err(format!(
                "{what} UID ({}) does not match claim ({})",
                uid.unwrap_or_default(),
                r.uid
            ));
        }
        if obj
            .pointer("/metadata/deletionTimestamp")
            .is_some_and(|d| !d.is_null())
        {
            return Err(format!("{what} {namespace}/{} has been deleted", r.name));
        }
        Ok(())
    }
}

impl TokenAuthenticator for ServiceAccountAuthenticator {
    fn authenticate_token(
        &self,
        token: &str,
        audiences: &[String],
    ) -> Result<Option<TokenResponse>, String> {
        if unverified_issuer(token).as_deref() != Some(self.issuer.as_str()) {
            return Ok(None);
        }
        let claims = self.verify(token)?;
        if claims.aud.is_empty() {
            return Err("token audiences is empty".into());
        }
        let wanted = if audiences.is_empty() {
            &self.api_audiences
        } else {
            audiences
        };
        let granted = intersect(&claims.aud, wanted);
        if granted.is_empty() && !self.api_audiences.is_empty() {
            return Err(format!(
                "token audiences {} is invalid for the target audiences {}",
                go_quoted(&claims.aud),
                go_quoted(wanted)
            ));
        }
        check_times((self.clock)(), claims.nbf, claims.exp)?;
        let k = &claims.kubernetes;
        self.check_live(
            "serviceaccounts",
            "service account",
            &k.namespace,
            &k.serviceaccount,
        )?;
        if let Some(pod) = &k.pod {
            self.check_live("pods", "pod", &k.namespace, pod)?;
        }
        if let Some(secret) = &k.secret {
            self.check_live("secrets", "secret", &k.namespace, secret)?;
        }
        let mut extra = BTreeMap::new();
        if let Some(pod) = &k.pod {
            extra.insert(EXTRA_POD_NAME.to_string(), vec![pod.name.clone()]);
            extra.insert(EXTRA_POD_UID.to_string(), vec![pod.uid.clone()]);
        }
        if let Some(node) = &k.node {
            extra.insert(EXTRA_NODE_NAME.to_string(), vec![node.name.clone()]);
            if !node.uid.is_empty() {
                extra.insert(EXTRA_NODE_UID.to_string(), vec![node.uid.clone()]);
            }
        }
        if !claims.jti.is_empty() {
            extra.insert(
                EXTRA_CREDENTIAL_ID.to_string(),
                vec![format!("JTI={}", claims.jti)],
            );
        }
        Ok(Some(TokenResponse {
            user: UserInfo {
                name: format!(
                    "system:serviceaccount:{}:{}",
                    k.namespace, k.serviceaccount.name
                ),
                uid: k.serviceaccount.uid.clone(),
                groups: vec![
                    "system:serviceaccounts".into(),
                    format!("system:serviceaccounts:{}", k.namespace),
                ],
                extra,
            },
            audiences: granted,
        }))
    }
}

/// Go's `%q` of a string slice (`["a" "b"]`), as upstream's messages print audiences.
pub fn go_quoted(items: &[String]) -> String {
    let quoted: Vec<String> = items.iter().map(|s| format!("{s:?}")).collect();
    format!("[{}]", quoted.join(" "))
}

#[cfg(test)]
mod tests {

    use serde_json::json;

    use super::*;
    use crate::tokens::{DEFAULT_ISSUER, TokenIssuer};

    const NOW: i64 = 4_000_000_000;

    #[derive(Default)]
    struct Objects(HashMap<(String, String, String), Value>);
    impl ObjectLookup for Objects {
        fn get(&self, plural: &str, namespace: &str, name: &str) -> Option<Value> {
            self.0
                .get(&(plural.into(), namespace.into(), name.into()))
                .cloned()
        }
    }

    fn objects(pod_uid: &str, deleting: bool) -> Arc<Objects> {
        let mut o = Objects::default();
        o.0.insert(
            ("serviceaccounts".into(), "prod".into(), "robot".into()),
            json!({"metadata": {"uid": "sa-uid"}}),
        );
        let mut pod = json!({"metadata": {"uid": pod_uid}});
        if deleting {
            pod["metadata"]["deletionTimestamp"] = json!("2096-01-01T00:00:00Z");
        }
        o.0.insert(("pods".into(), "prod".into(), "web".into()), pod);
        Arc::new(o)
    }

    fn claims() -> Claims {
        crate::tokens::tests::sample_claims(NOW - 10, NOW + 3600)
    }

    struct Fixture {
        _dir: tempfile::TempDir,
        issuer: TokenIssuer,
    }

    fn fixture() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let issuer = TokenIssuer::ensure(dir.path(), DEFAULT_ISSUER).unwrap();
        Fixture { _dir: dir, issuer }
    }

    fn authenticator(f: &Fixture, objects: Arc<Objects>) -> ServiceAccountAuthenticator {
        ServiceAccountAuthenticator::new(
            DEFAULT_ISSUER,
            f.issuer.decoding_key().unwrap(),
            vec![DEFAULT_ISSUER.into()],
            objects,
            || NOW,
        )
    }

    fn check(claims: &Claims, objects: Arc<Objects>) -> Result<Option<TokenResponse>, String> {
        let f = fixture();
        let token = f.issuer.sign(claims).unwrap();
        authenticator(&f, objects).authenticate_token(&token, &[])
    }

    #[test]
    fn a_bound_token_names_the_service_account_its_groups_and_the_pod() {
        let r = check(&claims(), objects("pod-uid", false))
            .unwrap()
            .unwrap();
        assert_eq!(r.user.name, "system:serviceaccount:prod:robot");
        assert_eq!(r.user.uid, "sa-uid");
        assert_eq!(
            r.user.groups,
            vec!["system:serviceaccounts", "system:serviceaccounts:prod"]
        );
        assert_eq!(r.user.extra[EXTRA_POD_NAME], vec!["web"]);
        assert_eq!(r.user.extra[EXTRA_POD_UID], vec!["pod-uid"]);
        assert_eq!(r.user.extra[EXTRA_NODE_NAME], vec!["n1"]);
        assert_eq!(r.user.extra[EXTRA_CREDENTIAL_ID], vec!["JTI=j1"]);
        assert_eq!(r.audiences, vec![DEFAULT_ISSUER]);
    }

    #[test]
    fn a_token_signed_by_another_key_is_rejected() {
        let f = fixture();
        let forger = fixture();
        let token = forger.issuer.sign(&claims()).unwrap();
        let err = authenticator(&f, objects("pod-uid", false))
            .authenticate_token(&token, &[])
            .unwrap_err();
        assert!(err.starts_with("invalid bearer token"), "{err}");
    }

    #[test]
    fn a_token_with_a_tampered_payload_is_rejected() {
        let f = fixture();
        let token = f.issuer.sign(&claims()).unwrap();
        let mut other = claims();
        other.kubernetes.serviceaccount.name = "admin".into();
        let forged_payload = f.issuer.sign(&other).unwrap();
        let parts: Vec<&str> = token.split('.').collect();
        let forged_parts: Vec<&str> = forged_payload.split('.').collect();
        let forged = format!("{}.{}.{}", parts[0], forged_parts[1], parts[2]);
        assert!(
            authenticator(&f, objects("pod-uid", false))
                .authenticate_token(&forged, &[])
                .is_err()
        );
    }

    #[test]
    fn a_token_of_another_issuer_is_not_ours() {
        let mut c = claims();
        c.iss = "https://elsewhere".into();
        assert_eq!(check(&c, objects("pod-uid", false)), Ok(None));
    }

    #[test]
    fn an_expired_token_is_rejected_after_the_leeway() {
        let mut c = claims();
        c.exp = NOW - 30;
        assert!(check(&c, objects("pod-uid", false)).is_ok());
        c.exp = NOW - 61;
        assert_eq!(
            check(&c, objects("pod-uid", false)).unwrap_err(),
            "service account token has expired"
        );
    }

    #[test]
    fn a_token_not_valid_yet_is_rejected() {
        let mut c = claims();
        c.nbf = NOW + 600;
        assert_eq!(
            check(&c, objects("pod-uid", false)).unwrap_err(),
            "service account token is not valid yet"
        );
    }

    #[test]
    fn a_token_for_another_audience_is_rejected() {
        let mut c = claims();
        c.aud = vec!["vault".into()];
        assert_eq!(
            check(&c, objects("pod-uid", false)).unwrap_err(),
            format!(
                "token audiences [\"vault\"] is invalid for the target audiences [\"{DEFAULT_ISSUER}\"]"
            )
        );
        // a TokenReview may ask for that audience
        let f = fixture();
        let token = f.issuer.sign(&c).unwrap();
        let r = authenticator(&f, objects("pod-uid", false))
            .authenticate_token(&token, &["vault".into()])
            .unwrap()
            .unwrap();
        assert_eq!(r.audiences, vec!["vault"]);
    }

    #[test]
    fn a_token_whose_pod_was_replaced_or_deleted_is_rejected() {
        assert_eq!(
            check(&claims(), objects("other-uid", false)).unwrap_err(),
            "pod UID (other-uid) does not match claim (pod-uid)"
        );
        assert_eq!(
            check(&claims(), objects("pod-uid", true)).unwrap_err(),
            "pod prod/web has been deleted"
        );
        assert_eq!(
            check(&claims(), Arc::new(Objects::default())).unwrap_err(),
            "serviceaccounts \"robot\" not found"
        );
    }

    /// Objects that can change between two requests.
    struct Live(parking_lot::Mutex<Arc<Objects>>);
    impl ObjectLookup for Live {
        fn get(&self, plural: &str, namespace: &str, name: &str) -> Option<Value> {
            self.0.lock().get(plural, namespace, name)
        }
    }

    #[test]
    fn a_token_verified_once_is_still_checked_against_its_pod_on_every_request() {
        let f = fixture();
        let token = f.issuer.sign(&claims()).unwrap();
        let live = Arc::new(Live(parking_lot::Mutex::new(objects("pod-uid", false))));
        let authenticator = ServiceAccountAuthenticator::new(
            DEFAULT_ISSUER,
            f.issuer.decoding_key().unwrap(),
            vec![DEFAULT_ISSUER.into()],
            live.clone(),
            || NOW,
        );
        for _ in 0..2 {
            let r = authenticator.authenticate_token(&token, &[]).unwrap();
            assert_eq!(r.unwrap().user.name, "system:serviceaccount:prod:robot");
        }
        assert_eq!(authenticator.verified.lock().len(), 1, "verified once");
        *live.0.lock() = objects("pod-uid", true);
        assert_eq!(
            authenticator.authenticate_token(&token, &[]).unwrap_err(),
            "pod prod/web has been deleted"
        );
        // a tampered token is not the verified one
        let mut parts: Vec<&str> = token.split('.').collect();
        let other = f
            .issuer
            .sign(&crate::tokens::tests::sample_claims(NOW, NOW + 60))
            .unwrap();
        parts[2] = other.split('.').nth(2).unwrap();
        assert!(
            authenticator
                .authenticate_token(&parts.join("."), &[])
                .unwrap_err()
                .starts_with("invalid bearer token")
        );
    }
}
