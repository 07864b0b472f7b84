//! HTTP handlers: routing of a parsed request to discovery, health, OpenAPI or a resource verb,
//! and the shared response builders. Every failure leaves as a `Status` object.
//!
//! # Layout
//! - [`apply`]: server-side apply and the managedFields of every write.
//! - [`system`]: `/version`, `/healthz`, `/livez`, `/readyz`, `/metrics`.
//! - [`discovery`]: `/api`, `/apis`, per-group and per-version lists, aggregated discovery.
//! - [`openapi`]: the OpenAPI v2 and v3 documents.
//! - [`read`]: get and list (from the store or the watch cache), Table and metadata views.
//! - [`reviews`]: the create-only access and identity reviews (`kubectl auth can-i`,
//!   `kubectl auth whoami`), answered by the authorizers, never stored.
//! - [`scale`]: the `scale` subresource of workloads (`autoscaling/v1` Scale).
//! - [`kubelet`]: `pods/{name}/log`, `exec`, `attach` and `portforward`, proxied to the pod's
//!   kubelet.
//! - [`watch`]: streaming watches from the watch cache (or the store for old revisions).
//! - [`write`]: create, update, patch, delete, deletecollection and the write subresources.

pub mod apply;
pub mod discovery;
pub mod kubelet;
pub mod openapi;
pub mod proxy;
pub mod read;
pub mod reviews;
pub mod scale;
pub mod system;
pub mod watch;
pub mod write;

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderValue, Request, Response, StatusCode, header};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use serde_json::Value;
use skiff_apimachinery::catalog::ResourceType;

use crate::authn::UserInfo;
use crate::encoding::{self, MAX_BODY_BYTES, Output};
use crate::error::{ApiError, Result};
use crate::request::RequestInfo;
use crate::server::ApiServer;
use crate::strategy::StrategyRef;

/// Response bodies: whole (most) or streamed (watches).
pub type Body = BoxBody<Bytes, Infallible>;

/// Everything a resource handler needs about its request.
pub struct Ctx {
    pub server: Arc<ApiServer>,
    pub info: RequestInfo,
    pub query: HashMap<String, String>,
    pub headers: http::HeaderMap,
    pub user: UserInfo,
    /// The type, as the registry served it when the request arrived.
    pub rt: Arc<ResourceType>,
    /// The type's strategy (defaults, validation, selectable fields).
    pub strategy: StrategyRef,
    pub output: Output,
    /// `Warning` headers for the response, shared with sub-request copies.
    pub warnings: Warnings,
    /// Audit annotations admission adds, shared with sub-request copies.
    pub audit_annotations: crate::admission::AuditAnnotations,
    /// The query string as sent (repeated keys such as exec's `command` kept).
    pub raw_query: String,
    /// The client's connection once a proxied upgrade (exec, attach, port-forward) switches
    /// protocols.
    pub upgrade: Option<hyper::upgrade::OnUpgrade>,
    /// The request's audit record, which keeps the body once read (`Request` levels).
    pub audit: Option<Arc<crate::audit::Record>>,
    /// When the request reached its handler (the lifecycle trace's binding latency).
    pub received: jiff::Timestamp,
    body: Option<Incoming>,
}

/// Warnings a request collects on its way (e.g. unknown fields under `fieldValidation=Warn`),
/// sent as upstream's `Warning: 299 - "text"` headers. A plain mutex: pushed to a few times per
/// request, never held across an await.
#[derive(Debug, Clone, Default)]
pub struct Warnings(Arc<std::sync::Mutex<Vec<String>>>);

impl Warnings {
    pub fn push(&self, text: String) {
        let mut all = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if !all.contains(&text) {
            all.push(text);
        }
    }

    /// Adds one `Warning` header per collected text, quoted as RFC 7234 asks.
    pub(crate) fn apply(&self, resp: &mut Response<Body>) {
        let all = self.0.lock().unwrap_or_else(|e| e.into_inner());
        for text in all.iter() {
            let quoted = text.replace('\\', "\\\\").replace('"', "\\\"");
            if let Ok(v) = HeaderValue::from_str(&format!("299 - \"{quoted}\"")) {
                resp.headers_mut().append(header::WARNING, v);
            }
        }
    }
}

impl Ctx {
    /// The API server's own `verb` on the cluster-scoped object `name` of the built-in
    /// `group`/v1 `plural` (on its `subresource`, if not empty); see [`Ctx::internal`].
    pub fn internal_on(
        server: &Arc<ApiServer>,
        (group, plural): (&str, &str),
        verb: &str,
        name: &str,
        subresource: &str,
    ) -> Ctx {
        let rt = server
            .registry
            .lookup(group, "v1", plural)
            .unwrap_or_else(|| panic!("{plural}.{group} is built in"));
        let resource = match subresource {
            "" => plural.to_string(),
            sub => format!("{plural}/{sub}"),
        };
        let info = RequestInfo::resource_request(verb, group, &resource, "", name);
        Ctx::internal(server.clone(), rt, info)
    }

    /// A request the API server makes of itself (its in-process controllers), as upstream's
    /// loopback client: user `system:apiserver` in `system:masters`, field manager
    /// `kube-apiserver`.
    pub fn internal(server: Arc<ApiServer>, rt: Arc<ResourceType>, info: RequestInfo) -> Ctx {
        let strategy = server.strategy(&rt);
        let received = server.now();
        Ctx {
            server,
            info,
            query: HashMap::from([("fieldManager".to_string(), "kube-apiserver".to_string())]),
            headers: http::HeaderMap::new(),
            user: UserInfo {
                name: "system:apiserver".into(),
                groups: vec!["system:masters".into()],
                ..Default::default()
            },
            rt,
            strategy,
            output: Output::Json,
            warnings: Warnings::default(),
            audit_annotations: Default::default(),
            raw_query: String::new(),
            upgrade: None,
            audit: None,
            received,
            body: None,
        }
    }

    /// The watch cache of the request's type; a custom resource removed since the request was
    /// routed is not found.
    pub fn cache(&self) -> Result<Arc<crate::cache::ResourceCache>> {
        self.server
            .cache
            .get(&self.rt)
            .ok_or_else(ApiError::path_not_found)
    }

    /// A copy for a sub-request (the body, already read, is not shared).
    pub fn share(&self) -> Ctx {
        Ctx {
            server: self.server.clone(),
            info: self.info.clone(),
            query: self.query.clone(),
            headers: self.headers.clone(),
            user: self.user.clone(),
            rt: self.rt.clone(),
            strategy: self.strategy.clone(),
            output: self.output,
            warnings: self.warnings.clone(),
            audit_annotations: self.audit_annotations.clone(),
            raw_query: self.raw_query.clone(),
            upgrade: None,
            audit: None,
            received: self.received,
            body: None,
        }
    }

    /// The request body, unread, for a handler that streams it on (the proxy subresources).
    pub fn take_body(&mut self) -> Option<Incoming> {
        self.body.take()
    }

    /// Reads the request body, refusing more than 3 MiB with 413.
    pub async fn body(&mut self) -> Result<Bytes> {
        let Some(body) = self.body.take() else {
            return Ok(Bytes::new());
        };
        match Limited::new(body, MAX_BODY_BYTES).collect().await {
            Ok(collected) => {
                crate::timing::step("body read");
                let bytes = collected.to_bytes();
                if let Some(audit) = &self.audit {
                    audit.request_body(&bytes, self.header(header::CONTENT_TYPE));
                }
                Ok(bytes)
            }
            Err(e) if e.is::<http_body_util::LengthLimitError>() => {
                Err(ApiError::too_large("the request body is larger than 3 MiB"))
            }
            Err(e) => Err(ApiError::bad_request(format!(
                "reading the request body: {e}"
            ))),
        }
    }

    pub fn header(&self, name: header::HeaderName) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    pub fn target<'a>(&'a self, name: &'a str) -> crate::error::Target<'a> {
        crate::error::Target {
            group: &self.rt.group,
            resource: &self.rt.plural,
            name,
        }
    }

    pub fn dry_run(&self) -> bool {
        self.query.get("dryRun").is_some_and(|v| v == "All")
    }
}

pub fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into()).boxed()
}

/// A JSON response.
pub fn json(code: u16, value: &Value) -> Response<Body> {
    bytes_response(
        code,
        crate::protobuf::order::to_vec(value),
        "application/json",
    )
}

pub fn bytes_response(code: u16, bytes: impl Into<Bytes>, content_type: &str) -> Response<Body> {
    response(code, full(bytes), content_type)
}

/// A response of `body`, whole or streamed.
pub fn response(code: u16, body: Body, content_type: &str) -> Response<Body> {
    let mut resp = Response::new(body);
    *resp.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_str(content_type).unwrap_or(HeaderValue::from_static("application/json")),
    );
    resp
}

/// An object in the negotiated output.
pub fn object(code: u16, output: Output, value: &Value) -> Response<Body> {
    let (bytes, ct) = encoding::encode(output, value);
    bytes_response(code, bytes, ct)
}

/// The `Status` response of an error.
pub fn error(e: &ApiError) -> Response<Body> {
    retry_after(e, json(e.code, &e.to_status()))
}

/// The `Status` response of an error, as protobuf when the client asked for it.
pub fn error_as(output: Output, e: &ApiError) -> Response<Body> {
    if output.is_protobuf() {
        retry_after(e, object(e.code, Output::Protobuf, &e.to_status()))
    } else {
        error(e)
    }
}

/// As upstream's status writer: an error that says when to retry (`retryAfterSeconds`) says it
/// in `Retry-After` too.
fn retry_after(e: &ApiError, mut resp: Response<Body>) -> Response<Body> {
    let seconds = e
        .details
        .as_ref()
        .and_then(|d| d["retryAfterSeconds"].as_u64());
    if let Some(seconds) = seconds.filter(|&s| s > 0) {
        resp.headers_mut()
            .insert(header::RETRY_AFTER, seconds.into());
    }
    resp
}

/// A success `Status` (upstream returns one for some deletes).
pub fn success_status(details: Value) -> Value {
    serde_json::json!({"kind": "Status", "apiVersion": "v1", "metadata": {},
                       "status": "Success", "details": details})
}

/// Routes a request that passed the gates: a remote APIService's paths to its aggregated
/// server, the rest to discovery, OpenAPI, the system paths or a resource verb.
pub async fn route(
    server: Arc<ApiServer>,
    req: Request<Incoming>,
    info: RequestInfo,
    query: HashMap<String, String>,
    user: UserInfo,
) -> Response<Body> {
    let aggregation = server.aggregator.state();
    let aggregated = crate::aggregator::proxy::target(&aggregation, &info)
        .or_else(|| crate::aggregator::proxy::openapi_target(&aggregation, &info.path))
        .cloned();
    if let Some(api_service) = aggregated {
        return crate::aggregator::proxy::serve(server, req, api_service, &user).await;
    }
    let accept = req
        .headers()
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    if !info.is_resource_request {
        if let Some(resp) = discovery::handle(&server, req.method(), &info, accept.as_deref()) {
            return resp;
        }
        if req.method() == http::Method::GET
            && let Some(resp) = openapi::handle(
                &server.openapi,
                &crate::aggregator::proxy::openapi_paths(&aggregation),
                &info.path,
                &query,
                req.headers(),
            )
        {
            return resp;
        }
        if req.method() == http::Method::GET
            && let Some(resp) = crate::trace::http::handle(&server, &info.path, &query)
        {
            return resp;
        }
        return system::handle(&server, req.method(), &info.path).await;
    }
    if reviews::is_review(&info) {
        // reviews answer JSON (or YAML): no client asks them for protobuf alone
        return match encoding::negotiate(accept.as_deref(), false) {
            Ok(output) => reviews::handle(&server, req, &info, &user, output).await,
            Err(e) => error(&e),
        };
    }
    let Some(rt) = server
        .registry
        .lookup(&info.group, &info.version, &info.resource)
    else {
        return error(&ApiError::path_not_found());
    };
    let protobuf = crate::protobuf::encode::supports(&rt.api_version(), &rt.kind);
    let output = match encoding::negotiate(accept.as_deref(), protobuf) {
        Ok(o) => o,
        Err(e) => return error(&e),
    };
    let (mut parts, body) = req.into_parts();
    let received = server.now();
    let strategy = server.strategy(&rt);
    let ctx = Ctx {
        server,
        info,
        query,
        raw_query: parts.uri.query().unwrap_or_default().to_string(),
        upgrade: parts.extensions.remove::<hyper::upgrade::OnUpgrade>(),
        audit: parts.extensions.remove::<Arc<crate::audit::Record>>(),
        received,
        headers: parts.headers,
        user,
        rt,
        strategy,
        output,
        warnings: Warnings::default(),
        audit_annotations: Default::default(),
        body: Some(body),
    };
    let warnings = ctx.warnings.clone();
    let output = ctx.output;
    let mut resp = match dispatch(ctx).await {
        Ok(resp) => resp,
        Err(e) => error_as(output, &e),
    };
    warnings.apply(&mut resp);
    resp
}

async fn dispatch(ctx: Ctx) -> Result<Response<Body>> {
    let rt = ctx.rt.clone();
    let info = &ctx.info;
    if rt.namespaced
        && info.namespace.is_empty()
        && !matches!(info.verb.as_str(), "list" | "watch" | "deletecollection")
    {
        return Err(ApiError::path_not_found());
    }
    if !rt.namespaced && !info.namespace.is_empty() {
        return Err(ApiError::path_not_found());
    }
    if !info.subresource.is_empty() {
        let Some(sub) = rt.subresource(&info.subresource).cloned() else {
            return Err(ApiError::path_not_found());
        };
        if !sub.supports(&info.verb) {
            return Err(ApiError::method_not_supported(
                &info.verb,
                &format!("{}/{}", rt.plural, sub.name),
            ));
        }
        return write::subresource(ctx, &sub).await;
    }
    if !rt.supports(&info.verb) {
        return Err(ApiError::method_not_supported(&info.verb, &rt.kind));
    }
    match info.verb.as_str() {
        "get" => read::get(ctx).await,
        "list" => read::list(ctx).await,
        "watch" => watch::watch(ctx).await,
        "create" => write::create(ctx).await,
        "update" => write::update(ctx).await,
        "patch" => write::patch(ctx).await,
        "delete" => write::delete(ctx).await,
        "deletecollection" => write::delete_collection(ctx).await,
        _ => Err(ApiError::method_not_supported(&info.verb, &rt.kind)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn warnings_become_quoted_warning_headers_once_each() {
        let warnings = Warnings::default();
        warnings.push(r#"unknown field "spec.x""#.to_string());
        warnings.push(r#"unknown field "spec.x""#.to_string());
        warnings.push(r"a \ b".to_string());
        let mut resp = json(200, &serde_json::json!({}));
        warnings.apply(&mut resp);
        let headers: Vec<_> = resp.headers().get_all(header::WARNING).iter().collect();
        assert_eq!(
            headers,
            [r#"299 - "unknown field \"spec.x\"""#, r#"299 - "a \\ b""#]
        );
    }
}
