//! The lifecycle trace: for recent pods, what the API server saw happen to each — every write
//! (who, with which user agent, verb, subresource, resourceVersion, a summary of the change),
//! every watch delivery of it (which client's watch, with which selectors, got which event type,
//! when it was handed to the connection) and every pod watch whose server-side filter excluded
//! the change. Writes of other objects that belong to a pod's story land on the pod's timeline:
//! the Binding (the `pods/binding` subresource is a pod write), Events whose involved object is
//! the pod, and Endpoints/EndpointSlices whose `targetRef` names it.
//!
//! Only pods have timelines (`--trace-objects N` of them, least recently recorded first out; 0
//! turns recording off). Hooks cost one uncontended lock per pod write and per pod watch event
//! per pod watcher; other kinds pay a `match` on the resource.
//!
//! # Layout
//! - this file: the recorded types and the hooks the write and watch handlers call.
//! - [`recorder`]: the bounded store of timelines and the live feed.
//! - [`summary`]: what a write changed, in words and as facts the stages are derived from.
//! - [`stages`]: the startup breakdown (queue wait … readiness) derived from a timeline.
//! - [`http`]: `/debug/trace/pods/{ns}/{name}` (JSON, `?watch=1` streams) and the web page
//!   `/ui/trace/pods/{ns}/{name}`.

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

/// Timelines kept by default (`--trace-objects`): enough for a busy node's worth of recent pods;
/// at most [`ENTRIES_PER_OBJECT`] entries each.
pub const DEFAULT_OBJECTS: usize = 500;
/// Entries kept per timeline; the oldest go first (a count of those dropped is kept).
pub const ENTRIES_PER_OBJECT: usize = 256;
/// Watches named in one "filtered" entry; the rest are counted.
pub const FILTERED_NAMED: usize = 8;

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

/// One thing that happened to a pod.
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
    /// A committed write of the pod or of an object about it.
    #[serde(rename_all = "camelCase")]
    Write {
        client: Arc<Client>,
        verb: String,
        /// `pods`, `events`, `endpoints`, `endpointslices`.
        resource: String,
        /// The written object's name (the pod's, an Event's, a Service's).
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
    let targets = summary::targets(&ctx.rt.group, &ctx.rt.plural, old, new);
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
    for target in targets {
        let write = What::Write {
            client: client.clone(),
            verb: ctx.info.verb.clone(),
            resource: ctx.rt.plural.to_string(),
            name: name.clone(),
            subresource: ctx.info.subresource.clone(),
            resource_version: revision,
            received: ctx.received,
            summary: target.summary,
            facts: Box::new(target.facts),
        };
        let key = key(&target.namespace, &target.pod);
        if let Some(stages) = rec.record(&key, target.creates, sent, write) {
            for stage in stages.iter().filter_map(|s| Some((s.name, s.seconds?))) {
                ctx.server.metrics.observe_startup_stage(stage.0, stage.1);
            }
        }
    }
}

/// A timeline's key.
pub fn key(namespace: &str, name: &str) -> String {
    format!("{namespace}/{name}")
}

/// What a pod watch hands the recorder: its identity, and deliveries waiting for their frame to
/// be written (stamped then).
#[derive(Debug)]
pub struct WatchTrace {
    pub recorder: Arc<Recorder>,
    pub watcher: Arc<Watcher>,
    pending: Vec<(String, i64, &'static str)>,
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
        self.pending.push((key(namespace, name), revision, event));
    }

    /// The change at `revision` was not sent: the selectors excluded it.
    pub fn filtered(&self, namespace: &str, name: &str, revision: i64, now: jiff::Timestamp) {
        self.recorder
            .filtered(&key(namespace, name), revision, &self.watcher, now);
    }

    /// The queued events' frame was handed to the connection at `now`.
    pub fn written(&mut self, now: jiff::Timestamp) {
        for (key, revision, event) in self.pending.drain(..) {
            self.recorder
                .delivered(&key, revision, event, &self.watcher, now);
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
}
