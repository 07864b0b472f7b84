//! `POST serviceaccounts/{name}/token` (TokenRequest, `authentication.k8s.io/v1`), as
//! upstream's `TokenREST`: 404 for a missing ServiceAccount, `expirationSeconds` defaulting to
//! 3600 and at least 600, audiences defaulting to the API server's (its issuer), an optional
//! `boundObjectRef` (a Pod of this service account, with its node; a Secret; a Node) that must
//! exist and match its uid; answers 201 with the request, its defaults and
//! `status.token`/`status.expirationTimestamp`.

use http::Response;
use jiff::{SignedDuration, Timestamp};
use serde_json::{Value, json};
use skiff_apimachinery::catalog;
use skiff_apimachinery::validation::{FieldError, FieldPath};

use super::read_object;
use crate::error::{ApiError, Result, Target};
use crate::handlers::read::fetch;
use crate::handlers::{Body, Ctx};
use crate::storage;
use crate::strategy::generic;
use crate::tokens::{Claims, KubernetesClaim, Ref};
use skiff_store::StoreExt;

/// Upstream's default `expirationSeconds`.
const DEFAULT_EXPIRATION_SECONDS: i64 = 3600;
/// Upstream's shortest token lifetime (10 minutes).
const MIN_EXPIRATION_SECONDS: i64 = 600;

fn str_at<'a>(v: &'a Value, pointer: &str) -> &'a str {
    v.pointer(pointer).and_then(Value::as_str).unwrap_or("")
}

fn object_ref(v: &Value) -> Ref {
    Ref {
        name: str_at(v, "/metadata/name").into(),
        uid: str_at(v, "/metadata/uid").into(),
    }
}

/// A core/v1 object from the store, or 404 as upstream words it.
async fn get_core(ctx: &Ctx, plural: &'static str, namespace: &str, name: &str) -> Result<Value> {
    let rt = catalog::lookup("", "v1", plural)
        .ok_or_else(|| ApiError::internal(format!("no resource type {plural}")))?;
    let key = storage::key(rt, namespace, name);
    match ctx.server.store.get(key.as_bytes()).await? {
        Some(kv) => storage::decode(&kv),
        None => Err(ApiError::not_found(Target {
            group: "",
            resource: plural,
            name,
        })),
    }
}

/// The expiration's validation errors (upstream's `ValidateTokenRequest`).
fn validate_expiration(seconds: i64) -> Result<()> {
    let path = FieldPath::new("spec").child("expirationSeconds");
    let detail = if seconds < MIN_EXPIRATION_SECONDS {
        "may not specify a duration less than 10 minutes"
    } else if seconds > 1 << 32 {
        "may not specify a duration larger than 2^32 seconds"
    } else {
        return Ok(());
    };
    Err(ApiError::invalid(
        "TokenRequest",
        "authentication.k8s.io",
        "",
        &[FieldError::invalid(&path, seconds, detail)],
    ))
}

/// What the token is bound to: the pod (and its node), secret or node of `boundObjectRef`.
#[derive(Debug, Default)]
struct Bound {
    pod: Option<Ref>,
    secret: Option<Ref>,
    node: Option<Ref>,
}

async fn bound_object(
    ctx: &Ctx,
    namespace: &str,
    service_account: &str,
    reference: &Value,
) -> Result<Bound> {
    if reference.is_null() {
        return Ok(Bound::default());
    }
    let kind = str_at(reference, "/kind");
    let api_version = str_at(reference, "/apiVersion");
    let name = str_at(reference, "/name");
    let uid = str_at(reference, "/uid");
    let plural = match (api_version, kind) {
        ("v1", "Pod") => "pods",
        ("v1", "Secret") => "secrets",
        ("v1", "Node") => "nodes",
        _ => {
            return Err(ApiError::bad_request(format!(
                "cannot bind token for object of type {api_version}, Kind={kind}"
            )));
        }
    };
    let ns = if plural == "nodes" { "" } else { namespace };
    let object = get_core(ctx, plural, ns, name).await?;
    let found = object_ref(&object);
    if !uid.is_empty() && uid != found.uid {
        let target = Target {
            group: "",
            resource: plural,
            name,
        };
        return Err(ApiError::conflict(
            target,
            &format!(
                "the UID in the bound object reference ({uid}) does not match the UID in record. The object might have been deleted and then recreated"
            ),
        ));
    }
    Ok(match plural {
        "pods" => {
            let runs_as = match str_at(&object, "/spec/serviceAccountName") {
                "" => "default",
                name => name,
            };
            if runs_as != service_account {
                return Err(ApiError::bad_request(format!(
                    "cannot bind token for serviceaccount \"{service_account}\" to pod running with different serviceaccount name."
                )));
            }
            let node_name = str_at(&object, "/spec/nodeName");
            let node = if node_name.is_empty() {
                None
            } else {
                Some(object_ref(&get_core(ctx, "nodes", "", node_name).await?))
            };
            Bound {
                pod: Some(found),
                node,
                ..Bound::default()
            }
        }
        "secrets" => Bound {
            secret: Some(found),
            ..Bound::default()
        },
        _ => Bound {
            node: Some(found),
            ..Bound::default()
        },
    })
}

/// The claims of a token for `service_account` in `namespace`.
fn claims(
    issuer: &str,
    namespace: &str,
    service_account: &Value,
    audiences: Vec<String>,
    bound: Bound,
    now: Timestamp,
    seconds: i64,
) -> Claims {
    let sa = object_ref(service_account);
    Claims {
        aud: audiences,
        exp: (now + SignedDuration::from_secs(seconds)).as_second(),
        iat: now.as_second(),
        iss: issuer.into(),
        jti: uuid::Uuid::new_v4().to_string(),
        sub: format!("system:serviceaccount:{namespace}:{}", sa.name),
        kubernetes: KubernetesClaim {
            namespace: namespace.into(),
            serviceaccount: sa,
            pod: bound.pod,
            secret: bound.secret,
            node: bound.node,
        },
        nbf: now.as_second(),
    }
}

pub async fn create(mut ctx: Ctx) -> Result<Response<Body>> {
    let Some(issuer) = ctx.server.tokens.clone() else {
        return Err(ApiError::service_unavailable(
            "serviceaccounts/token is not served: this API server has no service account signing key",
        ));
    };
    let mut request = read_object(&mut ctx, "TokenRequest", "authentication.k8s.io/v1").await?;
    let name = ctx.info.name.clone();
    let namespace = ctx.info.namespace.clone();
    let service_account = fetch(&ctx, &name).await?;
    let seconds = request
        .pointer("/spec/expirationSeconds")
        .and_then(Value::as_i64)
        .unwrap_or(DEFAULT_EXPIRATION_SECONDS);
    validate_expiration(seconds)?;
    let reference = &request["spec"]["boundObjectRef"];
    let bound = bound_object(&ctx, &namespace, &name, reference).await?;
    let mut audiences: Vec<String> = request
        .pointer("/spec/audiences")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|a| a.as_str().map(String::from))
        .collect();
    if audiences.is_empty() {
        audiences = vec![issuer.issuer().to_string()];
    }
    let now = ctx.server.now();
    let claims = claims(
        issuer.issuer(),
        &namespace,
        &service_account,
        audiences.clone(),
        bound,
        now,
        seconds,
    );
    let token = issuer
        .sign(&claims)
        .map_err(|e| ApiError::internal(e.to_string()))?;
    request["metadata"]["name"] = json!(name);
    request["metadata"]["namespace"] = json!(namespace);
    request["spec"]["audiences"] = json!(audiences);
    request["spec"]["expirationSeconds"] = json!(seconds);
    request["status"] = json!({
        "token": token,
        "expirationTimestamp": generic::timestamp(now + SignedDuration::from_secs(seconds)),
    });
    Ok(crate::handlers::json(201, &request))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expirations_under_ten_minutes_are_invalid_as_upstream_says() {
        assert!(validate_expiration(600).is_ok());
        let status = validate_expiration(599).unwrap_err().to_status();
        assert_eq!(status["code"], 422);
        assert_eq!(
            status["message"],
            "TokenRequest.authentication.k8s.io \"\" is invalid: spec.expirationSeconds: Invalid value: 599: may not specify a duration less than 10 minutes"
        );
    }

    #[test]
    fn claims_name_the_service_account_and_what_the_token_is_bound_to() {
        let sa = json!({"metadata": {"name": "robot", "uid": "sa-1"}});
        let bound = Bound {
            pod: Some(Ref {
                name: "web".into(),
                uid: "pod-1".into(),
            }),
            node: Some(Ref {
                name: "n1".into(),
                uid: "node-1".into(),
            }),
            secret: None,
        };
        let now = Timestamp::from_second(1_700_000_000).unwrap();
        let c = claims(
            "https://issuer",
            "prod",
            &sa,
            vec!["a".into()],
            bound,
            now,
            3600,
        );
        assert_eq!(c.sub, "system:serviceaccount:prod:robot");
        assert_eq!(
            (c.iat, c.nbf, c.exp),
            (1_700_000_000, 1_700_000_000, 1_700_003_600)
        );
        assert_eq!(c.kubernetes.serviceaccount.uid, "sa-1");
        assert_eq!(c.kubernetes.pod.unwrap().name, "web");
        assert_eq!(c.kubernetes.node.unwrap().uid, "node-1");
        assert_eq!(c.aud, ["a"]);
    }
}
