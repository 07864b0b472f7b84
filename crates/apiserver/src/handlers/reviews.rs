//! The review APIs, create-only and never stored: SubjectAccessReview,
//! LocalSubjectAccessReview, SelfSubjectAccessReview and SelfSubjectRulesReview
//! (authorization.k8s.io/v1; what `kubectl auth can-i` asks) and SelfSubjectReview
//! (authentication.k8s.io, v1 with v1beta1 and v1alpha1 for older kubectl; what `kubectl auth
//! whoami` asks), and TokenReview (authentication.k8s.io/v1: who a bearer token is, for
//! webhooks and aggregated servers). Each answers the posted object with its `status` filled, 201 Created.

use std::sync::Arc;

use http::{Request, Response, header};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use serde_json::{Value, json};
use skiff_apimachinery::validation::{FieldError, FieldPath};

use super::{Body, error, object};
use crate::authn::UserInfo;
use crate::authz::{self, Decision};
use crate::encoding::{self, BodyFormat};
use crate::error::{ApiError, Result};
use crate::request::RequestInfo;
use crate::server::ApiServer;

const AUTHORIZATION: &str = "authorization.k8s.io";
const AUTHENTICATION: &str = "authentication.k8s.io";

/// Which review a path names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Review {
    Subject,
    LocalSubject,
    SelfSubject,
    SelfSubjectRules,
    SelfSubjectIdentity,
    Token,
}

impl Review {
    fn of(info: &RequestInfo) -> Option<(Review, &'static str)> {
        if !info.is_resource_request || !info.name.is_empty() {
            return None;
        }
        let namespaced = !info.namespace.is_empty();
        match (
            info.group.as_str(),
            info.version.as_str(),
            info.resource.as_str(),
            namespaced,
        ) {
            (AUTHORIZATION, "v1", "subjectaccessreviews", false) => {
                Some((Review::Subject, "SubjectAccessReview"))
            }
            (AUTHORIZATION, "v1", "localsubjectaccessreviews", true) => {
                Some((Review::LocalSubject, "LocalSubjectAccessReview"))
            }
            (AUTHORIZATION, "v1", "selfsubjectaccessreviews", false) => {
                Some((Review::SelfSubject, "SelfSubjectAccessReview"))
            }
            (AUTHORIZATION, "v1", "selfsubjectrulesreviews", false) => {
                Some((Review::SelfSubjectRules, "SelfSubjectRulesReview"))
            }
            (AUTHENTICATION, "v1", "tokenreviews", false) => Some((Review::Token, "TokenReview")),
            (AUTHENTICATION, "v1" | "v1beta1" | "v1alpha1", "selfsubjectreviews", false) => {
                Some((Review::SelfSubjectIdentity, "SelfSubjectReview"))
            }
            _ => None,
        }
    }
}

/// Whether the path is one of the review APIs.
pub fn is_review(info: &RequestInfo) -> bool {
    Review::of(info).is_some()
}

/// Answers a review request (a path [`is_review`] accepted).
pub async fn handle(
    server: &Arc<ApiServer>,
    req: Request<Incoming>,
    info: &RequestInfo,
    user: &UserInfo,
    output: encoding::Output,
) -> Response<Body> {
    let Some((review, kind)) = Review::of(info) else {
        return error(&ApiError::path_not_found());
    };
    if info.verb != "create" {
        return error(&ApiError::method_not_supported(&info.verb, kind));
    }
    match answer(server, req, info, user, review, kind).await {
        Ok(v) => object(201, output, &v),
        Err(e) => error(&e),
    }
}

async fn answer(
    server: &ApiServer,
    req: Request<Incoming>,
    info: &RequestInfo,
    user: &UserInfo,
    review: Review,
    kind: &str,
) -> Result<Value> {
    let format = BodyFormat::from_content_type(
        req.headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok()),
    )?;
    let body = Limited::new(req.into_body(), encoding::MAX_BODY_BYTES)
        .collect()
        .await
        .map_err(|e| ApiError::bad_request(format!("reading the request body: {e}")))?
        .to_bytes();
    let mut obj = encoding::expect_object(encoding::decode(format, &body)?)?;
    let group = if matches!(review, Review::SelfSubjectIdentity | Review::Token) {
        AUTHENTICATION
    } else {
        AUTHORIZATION
    };
    obj["apiVersion"] = json!(format!("{group}/{}", info.version));
    obj["kind"] = json!(kind);
    if !obj["metadata"].is_object() {
        obj["metadata"] = json!({});
    }
    obj["metadata"]["creationTimestamp"] = Value::Null;
    let spec = obj["spec"].clone();
    obj["status"] = match review {
        Review::SelfSubjectIdentity => json!({"userInfo": user_info(user)}),
        Review::Token => token(server, &spec)?,
        Review::SelfSubjectRules => rules(server, user, &spec, kind)?,
        Review::SelfSubject => access(server, user, &spec, kind, None)?,
        Review::LocalSubject => {
            let subject = subject(&spec, kind)?;
            access(server, &subject, &spec, kind, Some(&info.namespace))?
        }
        Review::Subject => {
            let subject = subject(&spec, kind)?;
            access(server, &subject, &spec, kind, None)?
        }
    };
    Ok(obj)
}

fn user_info(user: &UserInfo) -> Value {
    let mut v = json!({"username": user.name, "groups": user.groups});
    if !user.uid.is_empty() {
        v["uid"] = json!(user.uid);
    }
    if !user.extra.is_empty() {
        v["extra"] = json!(user.extra);
    }
    v
}

/// TokenReview's status, as upstream's `tokenreview` REST: the token is authenticated for the
/// audiences the review names (the API server's when none); a failure is `error` with
/// `authenticated` and `user` empty.
fn token(server: &ApiServer, spec: &Value) -> Result<Value> {
    let token = spec["token"].as_str().unwrap_or_default();
    if token.is_empty() {
        return Err(ApiError::bad_request(
            "token is required for TokenReview in authentication",
        ));
    }
    let mut audiences: Vec<String> = spec["audiences"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|a| a.as_str().map(str::to_string))
        .collect();
    if audiences.is_empty() {
        audiences = server.authn.api_audiences.clone();
    }
    Ok(match server.authn.authenticate_token(token, &audiences) {
        Ok(r) => {
            if !audiences.is_empty() && crate::authn::intersect(&audiences, &r.audiences).is_empty()
            {
                return Err(ApiError::internal("error validating audience"));
            }
            let mut status = json!({"authenticated": true, "user": user_info(&r.user)});
            if !r.audiences.is_empty() {
                status["audiences"] = json!(r.audiences);
            }
            status
        }
        Err(e) => json!({"user": {}, "error": e}),
    })
}

fn invalid(kind: &str, path: &str, why: &str) -> ApiError {
    let mut field = FieldPath::new("spec");
    for part in path.split('.') {
        field = field.child(part);
    }
    ApiError::invalid(
        kind,
        AUTHORIZATION,
        "",
        &[FieldError::invalid(&field, "", why)],
    )
}

/// The user a SubjectAccessReview asks about.
fn subject(spec: &Value, kind: &str) -> Result<UserInfo> {
    let name = spec["user"].as_str().unwrap_or_default().to_string();
    let groups: Vec<String> = spec["groups"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|g| g.as_str().map(str::to_string))
        .collect();
    if name.is_empty() && groups.is_empty() {
        return Err(invalid(
            kind,
            "user",
            "at least one of user or group must be specified",
        ));
    }
    Ok(UserInfo {
        name,
        uid: spec["uid"].as_str().unwrap_or_default().to_string(),
        groups,
        extra: spec["extra"]
            .as_object()
            .into_iter()
            .flatten()
            .map(|(k, v)| {
                let values = v.as_array().into_iter().flatten();
                (
                    k.clone(),
                    values
                        .filter_map(|s| s.as_str().map(str::to_string))
                        .collect(),
                )
            })
            .collect(),
    })
}

/// The request a review's resource or non-resource attributes describe.
fn attributes(spec: &Value, kind: &str, namespace: Option<&str>) -> Result<RequestInfo> {
    let s = |v: &Value| v.as_str().unwrap_or_default().to_string();
    if let Some(r) = spec.get("resourceAttributes").filter(|r| r.is_object()) {
        if spec
            .get("nonResourceAttributes")
            .is_some_and(Value::is_object)
        {
            return Err(invalid(
                kind,
                "nonResourceAttributes",
                "cannot be specified in combination with resourceAttributes",
            ));
        }
        let ns = s(&r["namespace"]);
        if let Some(expected) = namespace
            && ns != expected
        {
            return Err(invalid(
                kind,
                "resourceAttributes.namespace",
                "must match metadata.namespace",
            ));
        }
        return Ok(RequestInfo {
            is_resource_request: true,
            verb: s(&r["verb"]),
            group: s(&r["group"]),
            version: s(&r["version"]),
            resource: s(&r["resource"]),
            subresource: s(&r["subresource"]),
            name: s(&r["name"]),
            namespace: ns,
            field_selector: s(&r["fieldSelector"]["rawSelector"]),
            ..Default::default()
        });
    }
    if let Some(n) = spec.get("nonResourceAttributes").filter(|n| n.is_object()) {
        return Ok(RequestInfo {
            verb: s(&n["verb"]),
            path: s(&n["path"]),
            ..Default::default()
        });
    }
    Err(invalid(
        kind,
        "resourceAttributes",
        "exactly one of nonResourceAttributes or resourceAttributes must be specified",
    ))
}

fn access(
    server: &ApiServer,
    user: &UserInfo,
    spec: &Value,
    kind: &str,
    namespace: Option<&str>,
) -> Result<Value> {
    let request = attributes(spec, kind, namespace)?;
    Ok(match server.authz.decide(user, &request) {
        Decision::Allow => json!({"allowed": true}),
        Decision::Deny(reason) => json!({"allowed": false, "denied": true, "reason": reason}),
        Decision::NoOpinion(reason) if reason.is_empty() => json!({"allowed": false}),
        Decision::NoOpinion(reason) => json!({"allowed": false, "reason": reason}),
    })
}

/// SelfSubjectRulesReview: what RBAC grants in the namespace; other authorizers cannot list
/// their rules, so the answer is marked incomplete when they may allow more.
fn rules(server: &ApiServer, user: &UserInfo, spec: &Value, kind: &str) -> Result<Value> {
    let Some(namespace) = spec["namespace"].as_str().filter(|n| !n.is_empty()) else {
        return Err(invalid(kind, "namespace", "no namespace on request"));
    };
    let (granted, incomplete) = match &server.rbac {
        Some(rbac) => (
            rbac.rules_for(user, namespace),
            server.authz.authorizers.len() > 1 && crate::authz::node::node_of(user).is_some(),
        ),
        None => (Vec::new(), true),
    };
    let mut resource_rules = Vec::new();
    let mut non_resource_rules = Vec::new();
    for r in granted {
        if !r.non_resource_urls.is_empty() {
            non_resource_rules
                .push(json!({"verbs": r.verbs, "nonResourceURLs": r.non_resource_urls}));
        }
        if !r.resources.is_empty() {
            let mut rule =
                json!({"verbs": r.verbs, "apiGroups": r.api_groups, "resources": r.resources});
            if !r.resource_names.is_empty() {
                rule["resourceNames"] = json!(r.resource_names);
            }
            resource_rules.push(rule);
        }
    }
    if user.groups.iter().any(|g| g == authz::SYSTEM_MASTERS)
        && !resource_rules
            .iter()
            .any(|r| r["resources"] == json!(["*"]))
    {
        // the privileged group is allowed before any authorizer, as a rule would say
        resource_rules.insert(
            0,
            json!({"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}),
        );
        non_resource_rules.insert(0, json!({"verbs": ["*"], "nonResourceURLs": ["*"]}));
    }
    Ok(json!({
        "resourceRules": resource_rules,
        "nonResourceRules": non_resource_rules,
        "incomplete": incomplete,
    }))
}
