//! The lifecycle trace: for recent objects of every kind, what the API server saw happen to each
//! — every write (who, with which user agent, verb, subresource, resourceVersion, a summary of
//! the change), the requests made on the object's behalf (a W3C `traceparent` whose trace ID is
//! the object's UID: the HPA controller's metric reads and scale writes), and for pods every
//! watch delivery of a change (which client's watch, with which selectors, got which event type,
//! when it was handed to the connection) and every pod watch whose server-side filter excluded
//! it. Writes of other objects that belong to an object's story land on its timeline too: Events
//! whose involved object it is, a pod's Binding (the `pods/binding` subresource is a pod write),
//! Endpoints/EndpointSlices whose `targetRef` names a pod, and the creation and deletion of the
//! objects it controls (`ownerReferences` with `controller: true`), which makes them its children.
//!
//! Each resource keeps `--trace-objects N` timelines (least recently recorded first out; 0 turns
//! recording off) of at most [`ENTRIES_PER_OBJECT`] entries. Hooks cost one uncontended lock per
//! write and per pod watch event per pod watcher; Events themselves have no timeline.
//!
//! # Layout
//! - this file: the recorded types and the hooks the write, watch and request handlers call.
//! - [`recorder`]: the bounded store of timelines, their parent/child links and the live feed.
//! - [`summary`]: what a write changed, in words and as facts the stages are derived from.
//! - [`stages`]: a pod's startup breakdown (queue wait … readiness) derived from its timeline.
//! - [`http`]: `/debug/trace/{resource}/[{ns}/]{name}` (JSON, `?watch=1` streams) and the web
//!   page `/ui/trace/{resource}/[{ns}/]{name}`.

pub mod http;
pub mod recorder;
pub mod stages;
pub mod summary;

use std::sync::Arc;

use serde::Serialize;
use serde_json::Value;

pub use recorder::Recorder;

use crate::authn::UserInfo;
use crate::handlers::Ctx;

/// Timelines kept per resource by default (`--trace-objects`): enough for a busy node's worth
/// of recent pods; at most [`ENTRIES_PER_OBJECT`] entries each.
pub const DEFAULT_OBJECTS: usize = 500;
/// Entries kept per timeline; the oldest go first (a count of those dropped is kept).
pub const ENTRIES_PER_OBJECT: usize = 256;
/// Watches named in one "filtered" entry; the rest are counted.
pub const FILTERED_NAMED: usize = 8;

/// The object a timeline is about.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct ObjectRef {
    /// The resource as kubectl qualifies it: `pods`, `deployments.apps`, `widgets.example.com`.
    pub resource: String,
    /// Empty for a cluster-scoped object.
    pub namespace: String,
    pub name: String,
}

impl ObjectRef {
    pub fn new(group: &str, plural: &str, namespace: &str, name: &str) -> Self {
        Self {
            resource: qualified(group, plural),
            namespace: namespace.to_string(),
            name: name.to_string(),
        }
    }

    pub fn pod(namespace: &str, name: &str) -> Self {
        Self::new("", "pods", namespace, name)
    }

    pub fn is_pod(&self) -> bool {
        self.resource == "pods"
    }
}

impl std::fmt::Display for ObjectRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.namespace.as_str() {
            "" => write!(f, "{} {}", self.resource, self.name),
            ns => write!(f, "{} {ns}/{}", self.resource, self.name),
        }
    }
}

/// `plural` for the core group, `plural.group` otherwise (kubectl's `deployments.apps`).
pub fn qualified(group: &str, plural: &str) -> String {
    if group.is_empty() {
        plural.to_string()
    } else {
        format!("{plural}.{group}")
    }
}

/// Who made a request.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Client {
    pub user: String,
    pub groups: Vec<String>,
    pub user_agent: String,
    /// The lane this client is drawn in: `scheduler`, `kubelet <node>`, `controller-manager`,
    /// `<name> controller`, or the user's name.
    pub component: String,
}

impl Client {
    pub fn new(user: &UserInfo, user_agent: &str) -> Self {
        Self {
            component: component(&user.name, user_agent),
            user: user.name.clone(),
            groups: user.groups.clone(),
            user_agent: user_agent.to_string(),
        }
    }

    fn of(ctx: &Ctx) -> Self {
        Self::new(
            &ctx.user,
            ctx.header(::http::header::USER_AGENT).unwrap_or(""),
        )
    }
}

/// One watch, as its deliveries name it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Watcher {
    /// Distinguishes two watches of one client.
    pub id: u64,
    #[serde(flatten)]
    pub client: Client,
    pub namespace: String,
    pub label_selector: String,
    pub field_selector: String,
}

/// One thing that happened to an object.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Entry {
    /// Order of recording across all timelines.
    pub seq: u64,
    pub time: jiff::Timestamp,
    #[serde(flatten)]
    pub what: What,
}

/// What an entry records.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum What {
    /// A committed write of the object or of another object about it.
    #[serde(rename_all = "camelCase")]
    Write {
        client: Arc<Client>,
        verb: String,
        /// The written object's resource (`pods`, `events`, `replicasets.apps`).
        resource: String,
        /// The written object's name (the pod's, an Event's, a Service's, a child's).
        name: String,
        subresource: String,
        resource_version: i64,
        /// When the request reached the handler (binding latency is commit − this).
        received: jiff::Timestamp,
        summary: Vec<String>,
        /// Boxed: most entries are deliveries, which are much smaller.
        facts: Box<summary::Facts>,
    },
    /// A pod event handed to one watch's connection.
    #[serde(rename_all = "camelCase")]
    Delivery {
        watch: Arc<Watcher>,
        /// ADDED, MODIFIED or DELETED as this watch saw it through its selectors.
        event: &'static str,
        resource_version: i64,
    },
    /// A request made on the object's behalf (its UID as the `traceparent` trace ID), other than
    /// a write of the object itself (which is a `write`).
    #[serde(rename_all = "camelCase")]
    Request {
        client: Arc<Client>,
        /// The request's verb (`get`, `list`, `update`, …) and its path with the query.
        verb: String,
        path: String,
        /// The response's status code, and how long the API server took to produce it.
        code: u16,
        seconds: f64,
    },
    /// Pod watches offered a change their selectors excluded (nothing was sent to them).
    #[serde(rename_all = "camelCase")]
    Filtered {
        resource_version: i64,
        watches: Vec<Arc<Watcher>>,
        /// Further excluded watches not named.
        more: usize,
    },
}

/// The lane of a client: upstream's component identities, else a controller's service account
/// (`--use-service-account-credentials`), else the user agent's program name, else the user.
pub fn component(user: &str, user_agent: &str) -> String {
    if user == "system:kube-scheduler" {
        return "scheduler".into();
    }
    if let Some(node) = user.strip_prefix("system:node:") {
        return format!("kubelet {node}");
    }
    if user == "system:kube-controller-manager" {
        return "controller-manager".into();
    }
    if user == "system:kube-proxy" {
        return "proxy".into();
    }
    if let Some(sa) = user.strip_prefix("system:serviceaccount:kube-system:") {
        return sa.to_string();
    }
    let program = user_agent.split('/').next().unwrap_or("");
    if (user == "admin" || user.is_empty()) && !program.is_empty() {
        return program.to_string();
    }
    user.to_string()
}

/// The recorder, if tracing is on.
fn recorder(ctx: &Ctx) -> Option<&Arc<Recorder>> {
    ctx.server.gates.trace.as_ref()
}

/// Records a committed write (`old` → `new` at `revision`; `new` absent for a delete) on the
/// timelines it belongs to. Called by every write path after its transaction succeeded; `sent`
/// is when the transaction was sent to the store (the entry's time: a watch may be handed the
/// change before the handler hears back, never before the transaction was sent).
pub fn wrote(
    ctx: &Ctx,
    old: Option<&Value>,
    new: Option<&Value>,
    revision: i64,
    sent: jiff::Timestamp,
) {
    let Some(rec) = recorder(ctx) else { return };
    let resolve = |api_version: &str, kind: &str| {
        let catalog = ctx.server.registry.snapshot();
        let t = catalog.by_kind(api_version, kind)?;
        Some((qualified(&t.group, &t.plural), t.namespaced))
    };
    let targets = summary::targets(&ctx.rt.group, &ctx.rt.plural, old, new, &resolve);
    if targets.is_empty() {
        return;
    }
    let client = Arc::new(Client::of(ctx));
    let name = new
        .or(old)
        .and_then(|o| o.pointer("/metadata/name"))
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let resource = qualified(&ctx.rt.group, &ctx.rt.plural);
    for target in targets {
        let write = What::Write {
            client: client.clone(),
            verb: ctx.info.verb.clone(),
            resource: resource.clone(),
            name: name.clone(),
            subresource: ctx.info.subresource.clone(),
            resource_version: revision,
            received: ctx.received,
            summary: target.summary,
            facts: Box::new(target.facts),
        };
        let stages = rec.record(&target.object, target.creates, sent, write, target.links);
        for stage in stages
            .iter()
            .flatten()
            .filter_map(|s| Some((s.name, s.seconds?)))
        {
            ctx.server.metrics.observe_startup_stage(stage.0, stage.1);
        }
    }
}

/// The trace ID of a W3C `traceparent` header (`00-<32 hex>-<16 hex>-<2 hex>`).
pub fn trace_id(traceparent: &str) -> Option<u128> {
    let mut parts = traceparent.trim().split('-');
    let (version, id, span) = (parts.next()?, parts.next()?, parts.next()?);
    let flags = parts.next()?;
    let hex = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_hexdigit());
    if !(hex(version, 2) && version != "ff" && hex(id, 32) && hex(span, 16) && hex(flags, 2)) {
        return None;
    }
    u128::from_str_radix(id, 16).ok().filter(|id| *id != 0)
}

/// The trace ID that names an object: its UID's 128 bits (a UUID without its dashes).
pub fn trace_id_of_uid(uid: &str) -> Option<u128> {
    let hex: String = uid.chars().filter(|c| *c != '-').collect();
    (hex.len() == 32)
        .then(|| u128::from_str_radix(&hex, 16).ok())
        .flatten()
        .filter(|id| *id != 0)
}

/// A request made on a traced object's behalf, recorded on its timeline when the response is
/// ready.
pub struct TracedRequest {
    recorder: Arc<Recorder>,
    object: ObjectRef,
    client: Arc<Client>,
    verb: String,
    path: String,
    received: jiff::Timestamp,
    started: std::time::Instant,
}

impl TracedRequest {
    /// The request's trace, if its `traceparent` names an object with a timeline and it is not
    /// a write of that object itself (that is recorded as the object's write).
    pub fn start<B>(
        server: &crate::server::ApiServer,
        req: &::http::Request<B>,
        info: &crate::request::RequestInfo,
        user: &UserInfo,
    ) -> Option<Self> {
        let recorder = server.gates.trace.as_ref()?;
        let headers = req.headers();
        let id = trace_id(headers.get("traceparent")?.to_str().ok()?)?;
        let object = recorder.traced(id)?;
        let own = info.is_resource_request
            && qualified(&info.group, &info.resource) == object.resource
            && info.namespace == object.namespace
            && info.name == object.name;
        let writes = !matches!(info.verb.as_str(), "get" | "list" | "watch");
        if own && writes {
            return None;
        }
        let user_agent = headers
            .get(::http::header::USER_AGENT)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        let path = match req.uri().query() {
            None | Some("") => info.path.clone(),
            Some(q) => format!("{}?{q}", info.path),
        };
        Some(Self {
            recorder: recorder.clone(),
            object,
            client: Arc::new(Client::new(user, user_agent)),
            verb: info.verb.clone(),
            path,
            received: server.now(),
            started: std::time::Instant::now(),
        })
    }

    /// Records the request with its response's status `code`.
    pub fn finish(self, code: u16) {
        let what = What::Request {
            client: self.client,
            verb: self.verb,
            path: self.path,
            code,
            seconds: self.started.elapsed().as_secs_f64(),
        };
        self.recorder.request(&self.object, self.received, what);
    }
}

/// What a pod watch hands the recorder: its identity, and deliveries waiting for their frame to
/// be written (stamped then).
#[derive(Debug)]
pub struct WatchTrace {
    pub recorder: Arc<Recorder>,
    pub watcher: Arc<Watcher>,
    pending: Vec<(ObjectRef, i64, &'static str)>,
}

impl WatchTrace {
    /// A trace for a pod watch of `ctx` (none for other kinds or with recording off).
    pub fn for_watch(ctx: &Ctx) -> Option<Self> {
        if !(ctx.rt.group.is_empty() && ctx.rt.plural == "pods") {
            return None;
        }
        let recorder = recorder(ctx)?.clone();
        let q = |k: &str| ctx.query.get(k).cloned().unwrap_or_default();
        let watcher = Arc::new(Watcher {
            id: recorder.next_watch_id(),
            client: Client::of(ctx),
            namespace: ctx.info.namespace.clone(),
            label_selector: q("labelSelector"),
            field_selector: q("fieldSelector"),
        });
        Some(Self {
            recorder,
            watcher,
            pending: Vec::new(),
        })
    }

    /// An event queued for this watch's next frame.
    pub fn queued(&mut self, namespace: &str, name: &str, revision: i64, event: &'static str) {
        self.pending
            .push((ObjectRef::pod(namespace, name), revision, event));
    }

    /// The change at `revision` was not sent: the selectors excluded it.
    pub fn filtered(&self, namespace: &str, name: &str, revision: i64, now: jiff::Timestamp) {
        self.recorder.filtered(
            &ObjectRef::pod(namespace, name),
            revision,
            &self.watcher,
            now,
        );
    }

    /// The queued events' frame was handed to the connection at `now`.
    pub fn written(&mut self, now: jiff::Timestamp) {
        for (pod, revision, event) in self.pending.drain(..) {
            self.recorder
                .delivered(&pod, revision, event, &self.watcher, now);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn components_are_named_after_upstream_identities() {
        assert_eq!(component("system:kube-scheduler", "skiff"), "scheduler");
        assert_eq!(component("system:node:n1", "kubelet/v1"), "kubelet n1");
        assert_eq!(
            component("system:serviceaccount:kube-system:endpoint-controller", ""),
            "endpoint-controller"
        );
        assert_eq!(component("admin", "kubectl/v1.33.0 (linux)"), "kubectl");
        assert_eq!(component("alice", "kubectl/v1.33.0"), "alice");
    }

    #[test]
    fn a_traceparent_names_the_object_whose_uid_is_its_trace_id() {
        let uid = "6e8bc430-9c3a-11d9-9669-0800200c9a66";
        let header = "00-6e8bc4309c3a11d996690800200c9a66-00f067aa0ba902b7-01";
        assert_eq!(trace_id(header), trace_id_of_uid(uid));
        assert!(trace_id(header).is_some());
        for bad in [
            "",
            "00-6e8bc4309c3a11d996690800200c9a66-00f067aa0ba902b7",
            "ff-6e8bc4309c3a11d996690800200c9a66-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-6e8bc4309c3a11d99669-00f067aa0ba902b7-01",
            "00-6e8bc4309c3a11d996690800200c9g66-00f067aa0ba902b7-01",
        ] {
            assert_eq!(trace_id(bad), None, "{bad:?}");
        }
        assert_eq!(trace_id_of_uid("not-a-uid"), None);
    }
}
