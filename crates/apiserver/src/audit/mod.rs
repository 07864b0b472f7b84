//! Auditing, as upstream's audit filter with the log backend: every authenticated request the
//! policy selects becomes `audit.k8s.io/v1` Events (one per stage: `RequestReceived`,
//! `ResponseStarted` for long-running requests, `ResponseComplete`) with who asked, what for,
//! the authorization decision and the response code, plus the request and response bodies at
//! the `Request` and `RequestResponse` levels. A request that fails authentication becomes one
//! `ResponseStarted` event with code 401 and no user, as upstream's failed-authentication
//! audit. Every response carries an `Audit-Id` header, auditing on or off: the client's own
//! `Audit-ID` if it sent one, as upstream.
//!
//! # Layout
//! - this file: the per-request [`Record`] and the events it sends.
//! - [`policy`]: the policy file and its first-match rules.
//! - [`log`]: the queue, the writer task and size-based rotation.

pub mod log;
pub mod policy;

use std::convert::Infallible;
use std::net::IpAddr;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Response, header};
use http_body_util::BodyExt;
use hyper::body::{Frame, SizeHint};
use parking_lot::Mutex;
use serde_json::{Map, Value, json};

use crate::authn::UserInfo;
use crate::encoding::{self, BodyFormat};
use crate::handlers::Body;
use crate::request::RequestInfo;
pub use policy::{Level, Policy, Stage};

/// The response header naming a request's audit ID (upstream's `Audit-ID`, as Go writes it).
pub const AUDIT_ID_HEADER: &str = "audit-id";

/// Annotation keys of the authorization decision, as upstream.
pub const DECISION_ANNOTATION: &str = "authorization.k8s.io/decision";
pub const REASON_ANNOTATION: &str = "authorization.k8s.io/reason";

/// The audit ID of a request: the client's `Audit-ID` header if it sent a usable one, else a
/// new UUID.
pub fn request_id(headers: &HeaderMap) -> HeaderValue {
    headers
        .get(AUDIT_ID_HEADER)
        .filter(|v| !v.is_empty() && v.to_str().is_ok())
        .cloned()
        .unwrap_or_else(|| {
            HeaderValue::from_str(&uuid::Uuid::new_v4().to_string()).expect("a uuid is a header")
        })
}

/// Why auditing cannot start.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Policy(#[from] policy::Error),
    #[error("opening the audit log {path}: {source}")]
    Log {
        path: String,
        source: std::io::Error,
    },
}

/// The policy and the log events go to.
#[derive(Debug)]
pub struct Auditor {
    policy: Policy,
    sink: log::Sink,
}

/// What is known of a request when it is authenticated.
#[derive(Debug)]
pub struct Start<'a> {
    pub audit_id: &'a HeaderValue,
    pub received: jiff::Timestamp,
    pub user: &'a UserInfo,
    pub info: &'a RequestInfo,
    pub uri: &'a http::Uri,
    pub headers: &'a HeaderMap,
    pub peer: Option<IpAddr>,
    pub clock: fn() -> jiff::Timestamp,
}

impl Auditor {
    pub fn new(policy: Policy, sink: log::Sink) -> Self {
        Self { policy, sink }
    }

    /// Loads the policy and opens the log (starting its writer task: call from a runtime).
    pub fn start(policy: &Path, options: log::Options) -> Result<Self, Error> {
        let policy = Policy::load(policy)?;
        let path = options.path.display().to_string();
        let sink = log::start(options).map_err(|source| Error::Log { path, source })?;
        Ok(Self::new(policy, sink))
    }

    /// The record of one authenticated request, having sent its `RequestReceived` event; `None`
    /// when the policy does not record it.
    pub fn begin(&self, s: Start<'_>) -> Option<Arc<Record>> {
        let decision = self.policy.decide(s.user, s.info);
        if decision.level == Level::None {
            return None;
        }
        let record = Arc::new(self.record(&s, decision));
        record.emit(Stage::RequestReceived);
        Some(record)
    }

    /// A request that failed authentication, as upstream's `WithFailedAuthenticationAudit`:
    /// one `ResponseStarted` event with code 401, no user (`s.user` is empty) and the
    /// credentials that were tried in the message, unless the policy does not record it.
    pub fn failed_authentication(&self, s: Start<'_>, attempted: &[&str]) {
        let decision = self.policy.decide(s.user, s.info);
        if decision.level == Level::None {
            return;
        }
        let record = self.record(&s, decision);
        let message = if attempted.is_empty() {
            "Authentication failed, no credentials provided".to_string()
        } else {
            format!("Authentication failed, attempted: {}", attempted.join(", "))
        };
        record.state.lock().event.insert(
            "responseStatus".into(),
            json!({"metadata": {}, "message": message, "code": 401}),
        );
        record.emit(Stage::ResponseStarted);
    }

    /// A request's record: the event fields known when it is authenticated (or not).
    fn record(&self, s: &Start<'_>, decision: policy::Decision) -> Record {
        let mut event = Map::new();
        event.insert("kind".into(), json!("Event"));
        event.insert("apiVersion".into(), json!("audit.k8s.io/v1"));
        event.insert("level".into(), json!(decision.level.as_str()));
        event.insert(
            "auditID".into(),
            json!(s.audit_id.to_str().unwrap_or_default()),
        );
        event.insert("stage".into(), json!(Stage::RequestReceived.as_str()));
        // the path and query only, as upstream (HTTP/2 requests arrive with an absolute URI)
        let uri = s
            .uri
            .path_and_query()
            .map_or_else(|| s.uri.path().to_string(), |pq| pq.to_string());
        event.insert("requestURI".into(), json!(uri));
        event.insert("verb".into(), json!(s.info.verb));
        event.insert("user".into(), user_json(s.user));
        event.insert("sourceIPs".into(), json!(source_ips(s.headers, s.peer)));
        if let Some(ua) = s
            .headers
            .get(header::USER_AGENT)
            .and_then(|v| v.to_str().ok())
        {
            event.insert("userAgent".into(), json!(ua));
        }
        if s.info.is_resource_request {
            event.insert("objectRef".into(), object_ref(s.info));
        }
        event.insert("requestReceivedTimestamp".into(), json!(micros(s.received)));
        Record {
            sink: self.sink.clone(),
            decision,
            clock: s.clock,
            state: Mutex::new(State {
                event,
                annotations: Map::new(),
                request_body: None,
            }),
        }
    }

    /// Events dropped because the writer fell behind.
    pub fn dropped(&self) -> u64 {
        self.sink.dropped()
    }
}

/// One request's audit record; events are sent as its stages pass.
#[derive(Debug)]
pub struct Record {
    sink: log::Sink,
    decision: policy::Decision,
    clock: fn() -> jiff::Timestamp,
    /// A plain mutex: set a few times per request, never held across an await.
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    event: Map<String, Value>,
    annotations: Map<String, Value>,
    /// The body as sent and its `Content-Type`, kept for the `Request` levels (and the name
    /// of a created object).
    request_body: Option<(Bytes, Option<String>)>,
}

fn micros(t: jiff::Timestamp) -> String {
    format!(
        "{}.{:06}Z",
        t.strftime("%Y-%m-%dT%H:%M:%S"),
        t.subsec_microsecond()
    )
}

fn user_json(u: &UserInfo) -> Value {
    let mut m = Map::new();
    if !u.name.is_empty() {
        m.insert("username".into(), json!(u.name));
    }
    if !u.uid.is_empty() {
        m.insert("uid".into(), json!(u.uid));
    }
    if !u.groups.is_empty() {
        m.insert("groups".into(), json!(u.groups));
    }
    Value::Object(m)
}

/// `X-Forwarded-For`, then `X-Real-Ip`, then the connection's peer, without repeats (as
/// upstream's `SourceIPs`).
fn source_ips(headers: &HeaderMap, peer: Option<IpAddr>) -> Vec<String> {
    let mut ips: Vec<String> = Vec::new();
    for v in headers.get_all("x-forwarded-for") {
        for ip in v.to_str().unwrap_or_default().split(',') {
            if let Ok(ip) = ip.trim().parse::<IpAddr>() {
                ips.push(ip.to_string());
            }
        }
    }
    if let Some(ip) = headers
        .get("x-real-ip")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<IpAddr>().ok())
    {
        ips.push(ip.to_string());
    }
    if let Some(ip) = peer {
        ips.push(ip.to_string());
    }
    let mut seen = Vec::new();
    ips.retain(|ip| {
        let new = !seen.contains(ip);
        seen.push(ip.clone());
        new
    });
    ips
}

fn object_ref(info: &RequestInfo) -> Value {
    let mut m = Map::new();
    m.insert("resource".into(), json!(info.resource));
    for (k, v) in [
        ("namespace", &info.namespace),
        ("name", &info.name),
        ("apiGroup", &info.group),
        ("apiVersion", &info.version),
        ("subresource", &info.subresource),
    ] {
        if !v.is_empty() {
            m.insert(k.into(), json!(v));
        }
    }
    Value::Object(m)
}

/// A body as the client sent it, decoded for the log (protobuf and YAML become JSON).
fn decode_body(bytes: &[u8], content_type: Option<&str>) -> Option<Value> {
    let media = encoding::media_type(content_type.unwrap_or("application/json"));
    let format = if media == "application/vnd.kubernetes.protobuf" {
        BodyFormat::Protobuf
    } else if media.ends_with("yaml") {
        BodyFormat::Yaml
    } else {
        BodyFormat::Json
    };
    encoding::decode(format, bytes).ok()
}

/// Drops `metadata.managedFields` from an object or from every item of a list.
fn strip_managed_fields(v: &mut Value) {
    if let Some(m) = v.get_mut("metadata").and_then(Value::as_object_mut) {
        m.remove("managedFields");
    }
    if let Some(items) = v.get_mut("items").and_then(Value::as_array_mut) {
        for item in items {
            strip_managed_fields(item);
        }
    }
}

impl Record {
    pub fn level(&self) -> Level {
        self.decision.level
    }

    /// The user the request runs as after impersonation.
    pub fn impersonated(&self, user: &UserInfo) {
        self.state
            .lock()
            .event
            .insert("impersonatedUser".into(), user_json(user));
    }

    /// The authorizers' answer, as upstream's annotations.
    pub fn authorized(&self, allowed: bool, reason: &str) {
        let mut state = self.state.lock();
        state.annotations.insert(
            DECISION_ANNOTATION.into(),
            json!(if allowed { "allow" } else { "forbid" }),
        );
        state
            .annotations
            .insert(REASON_ANNOTATION.into(), json!(reason));
    }

    /// The request body, once a handler has read it.
    pub fn request_body(&self, body: &Bytes, content_type: Option<&str>) {
        self.state.lock().request_body = Some((body.clone(), content_type.map(str::to_string)));
    }

    /// Sends the event of `stage` unless the policy omits it.
    fn emit(&self, stage: Stage) {
        if self.decision.omit_stages.contains(&stage) {
            return;
        }
        let mut event = {
            let state = self.state.lock();
            let mut event = state.event.clone();
            if stage != Stage::RequestReceived && !state.annotations.is_empty() {
                event.insert(
                    "annotations".into(),
                    Value::Object(state.annotations.clone()),
                );
            }
            event
        };
        event.insert("stage".into(), json!(stage.as_str()));
        event.insert("stageTimestamp".into(), json!(micros((self.clock)())));
        match serde_json::to_vec(&Value::Object(event)) {
            Ok(line) => self.sink.send(line),
            Err(e) => tracing::warn!(error = %e, "encoding an audit event"),
        }
    }

    /// Fills the response fields of the event: the code, the `Status` of a failure, the
    /// request object (levels `Request` and up) and the response object (`RequestResponse`).
    fn respond(&self, code: u16, response: Option<Value>) {
        let mut state = self.state.lock();
        let mut status = Map::new();
        status.insert("metadata".into(), json!({}));
        if let Some(s) = response.as_ref().filter(|r| r["kind"] == "Status") {
            for field in ["status", "message", "reason", "details"] {
                if let Some(v) = s.get(field).filter(|v| !v.is_null()) {
                    status.insert(field.into(), v.clone());
                }
            }
        }
        status.insert("code".into(), json!(code));
        state
            .event
            .insert("responseStatus".into(), Value::Object(status));
        let omit = self.decision.omit_managed_fields;
        if let Some((bytes, ct)) = state.request_body.take()
            && let Some(mut obj) = decode_body(&bytes, ct.as_deref())
        {
            let created = obj
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .map(str::to_string);
            if let (Some(name), Some(r)) = (
                created,
                state
                    .event
                    .get_mut("objectRef")
                    .and_then(Value::as_object_mut),
            ) {
                r.entry("name").or_insert(json!(name));
            }
            if self.decision.level >= Level::Request {
                if omit {
                    strip_managed_fields(&mut obj);
                }
                state.event.insert("requestObject".into(), obj);
            }
        }
        if self.decision.level == Level::RequestResponse
            && let Some(mut obj) = response
        {
            if omit {
                strip_managed_fields(&mut obj);
            }
            state.event.insert("responseObject".into(), obj);
        }
    }

    /// Records the response and sends the remaining events: `ResponseComplete` now, or for a
    /// long-running request `ResponseStarted` now and `ResponseComplete` when its body ends
    /// (or the client goes away).
    pub async fn finish(
        self: Arc<Self>,
        resp: Response<Body>,
        long_running: bool,
    ) -> Response<Body> {
        let code = resp.status().as_u16();
        if long_running && code < 300 {
            self.respond(code, None);
            self.emit(Stage::ResponseStarted);
            let (parts, body) = resp.into_parts();
            let body = Completion {
                inner: body,
                record: Some(self),
            };
            return Response::from_parts(parts, body.boxed());
        }
        // JSON or protobuf (the log has the object as JSON whatever the client asked for)
        let content_type = resp
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let decodable = content_type.as_deref().is_some_and(|ct| {
            matches!(
                encoding::media_type(ct).as_str(),
                "application/json" | "application/vnd.kubernetes.protobuf"
            )
        });
        if decodable && (code >= 400 || self.decision.level == Level::RequestResponse) {
            let (parts, body) = resp.into_parts();
            let bytes = match body.collect().await {
                Ok(c) => c.to_bytes(),
                Err(never) => match never {},
            };
            self.respond(code, decode_body(&bytes, content_type.as_deref()));
            self.emit(Stage::ResponseComplete);
            return Response::from_parts(parts, crate::handlers::full(bytes));
        }
        self.respond(code, None);
        self.emit(Stage::ResponseComplete);
        resp
    }
}

/// A long-running response's body that sends `ResponseComplete` when it ends or is dropped.
struct Completion {
    inner: Body,
    record: Option<Arc<Record>>,
}

impl Completion {
    fn complete(&mut self) {
        if let Some(record) = self.record.take() {
            record.emit(Stage::ResponseComplete);
        }
    }
}

impl hyper::body::Body for Completion {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if let Poll::Ready(None) = polled {
            self.complete();
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl Drop for Completion {
    fn drop(&mut self) {
        self.complete();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const POLICY: &str = r#"
apiVersion: audit.k8s.io/v1
kind: Policy
omitManagedFields: true
rules:
- level: RequestResponse
  resources: [{group: "", resources: [configmaps]}]
- level: Metadata
"#;

    fn fixed() -> jiff::Timestamp {
        "2026-11-30T18:00:00.25Z".parse().unwrap()
    }

    fn auditor() -> (Auditor, tokio::sync::mpsc::Receiver<Vec<u8>>) {
        let (tx, rx) = tokio::sync::mpsc::channel(16);
        let sink = log::Sink {
            tx,
            dropped: Arc::default(),
        };
        (Auditor::new(Policy::parse(POLICY).unwrap(), sink), rx)
    }

    fn next(rx: &mut tokio::sync::mpsc::Receiver<Vec<u8>>) -> Value {
        serde_json::from_slice(&rx.try_recv().expect("an event")).unwrap()
    }

    fn begin(a: &Auditor, info: &RequestInfo, headers: &HeaderMap) -> Option<Arc<Record>> {
        let user = UserInfo {
            name: "alice".into(),
            uid: String::new(),
            groups: vec!["dev".into(), "system:authenticated".into()],
            extra: Default::default(),
        };
        a.begin(Start {
            audit_id: &HeaderValue::from_static("id-1"),
            received: fixed(),
            user: &user,
            info,
            uri: &"/api/v1/namespaces/a/configmaps?fieldManager=kubectl"
                .parse()
                .unwrap(),
            headers,
            peer: Some("127.0.0.1".parse().unwrap()),
            clock: fixed,
        })
    }

    #[tokio::test]
    async fn a_create_records_who_what_the_decision_and_both_bodies() {
        let (a, mut rx) = auditor();
        let mut info = RequestInfo::resource_request("create", "", "configmaps", "a", "");
        info.version = "v1".into();
        let mut headers = HeaderMap::new();
        headers.insert(
            header::USER_AGENT,
            HeaderValue::from_static("kubectl/v1.33.0"),
        );
        headers.insert(
            "x-forwarded-for",
            HeaderValue::from_static("10.0.0.1, 127.0.0.1"),
        );
        let record = begin(&a, &info, &headers).unwrap();
        let received = next(&mut rx);
        assert_eq!(received["stage"], "RequestReceived");
        assert_eq!(received["auditID"], "id-1");
        assert_eq!(received["user"]["username"], "alice");
        assert_eq!(received["sourceIPs"], json!(["10.0.0.1", "127.0.0.1"]));
        assert_eq!(received["userAgent"], "kubectl/v1.33.0");
        assert_eq!(
            received["requestReceivedTimestamp"],
            "2026-11-30T18:00:00.250000Z"
        );
        assert!(received.get("annotations").is_none());
        record.authorized(true, "");
        record.request_body(
            &Bytes::from_static(
                br#"{"metadata":{"name":"cm","managedFields":[{}]},"data":{"k":"v"}}"#,
            ),
            Some("application/json"),
        );
        let resp = crate::handlers::json(
            201,
            &json!({"kind": "ConfigMap", "metadata": {"name": "cm", "managedFields": [{}]}}),
        );
        let resp = record.finish(resp, false).await;
        assert_eq!(resp.status(), 201);
        let done = next(&mut rx);
        assert_eq!(done["stage"], "ResponseComplete");
        assert_eq!(done["level"], "RequestResponse");
        assert_eq!(
            done["objectRef"],
            json!({"resource": "configmaps", "namespace": "a", "name": "cm", "apiVersion": "v1"})
        );
        assert_eq!(done["responseStatus"], json!({"metadata": {}, "code": 201}));
        assert_eq!(done["annotations"][DECISION_ANNOTATION], "allow");
        assert_eq!(done["annotations"][REASON_ANNOTATION], "");
        assert_eq!(done["requestObject"]["data"]["k"], "v");
        assert!(
            done["requestObject"]["metadata"]
                .get("managedFields")
                .is_none()
        );
        assert_eq!(done["responseObject"]["metadata"]["name"], "cm");
        assert!(
            done["responseObject"]["metadata"]
                .get("managedFields")
                .is_none()
        );
    }

    #[test]
    fn a_failed_authentication_is_one_response_started_event_without_a_user() {
        let (a, mut rx) = auditor();
        let info = RequestInfo::resource_request("list", "", "secrets", "a", "");
        a.failed_authentication(
            Start {
                audit_id: &HeaderValue::from_static("id-2"),
                received: fixed(),
                user: &UserInfo::default(),
                info: &info,
                uri: &"/api/v1/namespaces/a/secrets".parse().unwrap(),
                headers: &HeaderMap::new(),
                peer: Some("127.0.0.1".parse().unwrap()),
                clock: fixed,
            },
            &["bearer", "x509"],
        );
        let event = next(&mut rx);
        assert_eq!(event["stage"], "ResponseStarted");
        assert_eq!(event["level"], "Metadata");
        assert_eq!(event["auditID"], "id-2");
        assert_eq!(event["user"], json!({}));
        assert_eq!(event["verb"], "list");
        assert_eq!(event["objectRef"]["resource"], "secrets");
        assert_eq!(
            event["responseStatus"],
            json!({"metadata": {}, "code": 401,
                   "message": "Authentication failed, attempted: bearer, x509"})
        );
        assert!(rx.try_recv().is_err(), "no other stage");
    }

    #[tokio::test]
    async fn a_protobuf_response_is_logged_as_json() {
        let (a, mut rx) = auditor();
        let mut info = RequestInfo::resource_request("create", "", "configmaps", "a", "");
        info.version = "v1".into();
        let record = begin(&a, &info, &HeaderMap::new()).unwrap();
        next(&mut rx);
        record.authorized(true, "");
        let object = json!({"apiVersion": "v1", "kind": "ConfigMap",
                            "metadata": {"name": "cm", "namespace": "a"}, "data": {"k": "v"}});
        let (bytes, content_type) = encoding::encode(encoding::Output::Protobuf, &object);
        assert_eq!(content_type, "application/vnd.kubernetes.protobuf");
        let resp = Response::builder()
            .status(201)
            .header(header::CONTENT_TYPE, content_type)
            .body(crate::handlers::full(bytes))
            .unwrap();
        record.finish(resp, false).await;
        let done = next(&mut rx);
        assert_eq!(done["responseObject"]["metadata"]["name"], "cm");
        assert_eq!(done["responseObject"]["data"]["k"], "v");
    }

    #[tokio::test]
    async fn metadata_level_failures_carry_the_status_but_no_bodies() {
        let (a, mut rx) = auditor();
        let info = RequestInfo::resource_request("get", "", "secrets", "a", "s");
        let record = begin(&a, &info, &HeaderMap::new()).unwrap();
        let _ = next(&mut rx);
        record.authorized(false, "no RBAC policy matched");
        let err = crate::error::ApiError::forbidden("secrets \"s\" is forbidden");
        record.finish(crate::handlers::error(&err), false).await;
        let done = next(&mut rx);
        assert_eq!(done["level"], "Metadata");
        assert_eq!(done["responseStatus"]["code"], 403);
        assert_eq!(done["responseStatus"]["reason"], "Forbidden");
        assert_eq!(done["responseStatus"]["status"], "Failure");
        assert_eq!(done["annotations"][DECISION_ANNOTATION], "forbid");
        assert!(done.get("responseObject").is_none());
    }

    #[tokio::test]
    async fn a_watch_sends_response_started_then_complete_when_its_body_ends() {
        let (a, mut rx) = auditor();
        let info = RequestInfo::resource_request("watch", "", "pods", "", "");
        let record = begin(&a, &info, &HeaderMap::new()).unwrap();
        let _ = next(&mut rx);
        let resp = record
            .finish(crate::handlers::json(200, &json!({})), true)
            .await;
        assert_eq!(next(&mut rx)["stage"], "ResponseStarted");
        assert!(
            rx.try_recv().is_err(),
            "not complete while the body is open"
        );
        let _ = resp.into_body().collect().await;
        assert_eq!(next(&mut rx)["stage"], "ResponseComplete");
        assert!(rx.try_recv().is_err(), "complete only once");
    }

    #[test]
    fn clients_may_name_their_audit_id() {
        let mut h = HeaderMap::new();
        assert_eq!(request_id(&h).len(), 36);
        h.insert("audit-id", HeaderValue::from_static("mine"));
        assert_eq!(request_id(&h), "mine");
    }
}
