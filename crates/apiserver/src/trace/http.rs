//! The trace's HTTP endpoints (non-resource paths, authorized as `nonResourceURLs` like
//! `/metrics`): `GET /debug/trace/{resource}/{ns}/{name}` (`/debug/trace/{resource}/{name}` for a
//! cluster-scoped object; `resource` as kubectl qualifies it: `pods`, `deployments.apps`) returns
//! an object's timeline, its descendants and, for a pod, its startup stages as JSON; with
//! `?watch=1` the same document is the first line of a stream of newline-delimited JSON,
//! followed by `{"entry": …}` per new entry of the object and `{"descendant": …}` whenever a
//! descendant's own timeline gets a write. `GET /ui/trace/…` at the same place is the web page
//! (a sequence diagram and the live descendants, drawn from the JSON, found by a URL relative to
//! the page's own, so it works behind `kubectl proxy`).

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use http::Response;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use serde_json::{Value, json};
use skiff_apimachinery::catalog::Catalog;
use tokio::sync::{broadcast, mpsc};

use super::recorder::{Descendant, Timeline};
use super::{ObjectRef, Recorder, What, qualified, stages};
use crate::error::ApiError;
use crate::handlers::{Body, bytes_response, error, json as json_response};
use crate::request::flag;
use crate::server::ApiServer;

const API_PREFIX: &str = "/debug/trace/";
const PAGE_PREFIX: &str = "/ui/trace/";
const PAGE: &str = include_str!("page.html");

/// Answers `path` if it is one of the trace's.
pub fn handle(
    server: &ApiServer,
    path: &str,
    query: &HashMap<String, String>,
) -> Option<Response<Body>> {
    if let Some(rest) = path.strip_prefix(PAGE_PREFIX) {
        return Some(match object_of(&server.registry.snapshot(), rest) {
            Ok(_) => bytes_response(200, PAGE, "text/html; charset=utf-8"),
            Err(e) => error(&e),
        });
    }
    let rest = path.strip_prefix(API_PREFIX)?;
    let object = match object_of(&server.registry.snapshot(), rest) {
        Ok(o) => o,
        Err(e) => return Some(error(&e)),
    };
    let Some(recorder) = &server.gates.trace else {
        return Some(error(&ApiError::with_code(
            404,
            "NotFound",
            "the lifecycle trace is off (--trace-objects 0)",
        )));
    };
    if flag(query, "watch") {
        return Some(stream(recorder, object));
    }
    Some(match recorder.timeline(&object) {
        Some(t) => {
            let children = recorder.descendants(&object);
            json_response(200, &document(&object, &t, &children))
        }
        None => error(&ApiError::with_code(
            404,
            "NotFound",
            format!("no trace of {object} (the API server records the objects it sees written)"),
        )),
    })
}

/// The object a path's rest names: `{resource}/{ns}/{name}` for a namespaced resource,
/// `{resource}/{name}` for a cluster-scoped one, the resource one the API server serves.
fn object_of(catalog: &Catalog, rest: &str) -> Result<ObjectRef, ApiError> {
    let parts: Vec<&str> = rest.trim_end_matches('/').split('/').collect();
    if parts.iter().any(|p| p.is_empty()) || !(2..=3).contains(&parts.len()) {
        return Err(ApiError::path_not_found());
    }
    let Some(t) = catalog
        .iter()
        .find(|t| qualified(&t.group, &t.plural) == parts[0])
    else {
        return Err(ApiError::with_code(
            404,
            "NotFound",
            format!("the server doesn't have a resource type \"{}\"", parts[0]),
        ));
    };
    match (t.namespaced, parts.as_slice()) {
        (true, [resource, ns, name]) => Ok(ObjectRef {
            resource: resource.to_string(),
            namespace: ns.to_string(),
            name: name.to_string(),
        }),
        (false, [resource, name]) => Ok(ObjectRef {
            resource: resource.to_string(),
            namespace: String::new(),
            name: name.to_string(),
        }),
        _ => Err(ApiError::path_not_found()),
    }
}

/// The JSON of one timeline and its descendants.
pub fn document(object: &ObjectRef, timeline: &Timeline, children: &[Descendant]) -> Value {
    let entries = super::recorder::sorted(&timeline.entries);
    let mut doc = json!({
        "kind": "Trace",
        "resource": object.resource,
        "namespace": object.namespace,
        "name": object.name,
        "uid": timeline.uid,
        "dropped": timeline.dropped,
        "entries": entries,
        "children": children,
        "moreChildren": timeline.more_children,
    });
    if object.is_pod() {
        doc["stages"] = json!(stages::derive(&entries));
    }
    doc
}

fn line(value: &Value) -> Frame<Bytes> {
    let mut bytes = serde_json::to_vec(value).unwrap_or_default();
    bytes.push(b'\n');
    Frame::data(Bytes::from(bytes))
}

fn stream(recorder: &Arc<Recorder>, object: ObjectRef) -> Response<Body> {
    let (timeline, children, mut rx) = recorder.follow(&object);
    let (tx, body_rx) = mpsc::channel::<Result<Frame<Bytes>, std::convert::Infallible>>(16);
    let first = line(&document(&object, &timeline, &children));
    let recorder = recorder.clone();
    tokio::spawn(async move {
        if tx.send(Ok(first)).await.is_err() {
            return;
        }
        loop {
            let next = tokio::select! {
                next = rx.recv() => next,
                () = tx.closed() => return,
            };
            let item = match next {
                Ok(item) => item,
                // fell behind or the server is going away: the client reads the document again
                Err(
                    broadcast::error::RecvError::Lagged(_) | broadcast::error::RecvError::Closed,
                ) => return,
            };
            let (about, entry) = (&item.0, &item.1);
            let frame = if *about == object {
                line(&json!({"entry": entry}))
            } else if matches!(&entry.what, What::Write { resource, name, .. }
                    if *resource == about.resource && *name == about.name)
                && recorder.descends_from(about, &object)
            {
                line(&json!({"descendant": recorder.describe(about)}))
            } else {
                continue;
            };
            if tx.send(Ok(frame)).await.is_err() {
                return;
            }
        }
    });
    let body = BodyExt::boxed(StreamBody::new(
        tokio_stream::wrappers::ReceiverStream::new(body_rx),
    ));
    let mut resp = Response::new(body);
    resp.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/x-ndjson"),
    );
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_names_a_namespaced_object_by_three_segments_and_a_cluster_one_by_two() {
        let server = skiff_apimachinery::catalog::Registry::new().snapshot();
        assert_eq!(
            object_of(&server, "pods/ns/web").unwrap(),
            ObjectRef::pod("ns", "web")
        );
        assert_eq!(
            object_of(&server, "deployments.apps/ns/web/").unwrap(),
            ObjectRef::new("apps", "deployments", "ns", "web")
        );
        assert_eq!(
            object_of(&server, "nodes/n1").unwrap(),
            ObjectRef::new("", "nodes", "", "n1")
        );
        for bad in [
            "pods/web",
            "nodes/ns/n1",
            "pods",
            "pods/ns/web/x",
            "pods//web",
        ] {
            assert_eq!(object_of(&server, bad).unwrap_err().code, 404, "{bad}");
        }
        let unknown = object_of(&server, "deployments/ns/web").unwrap_err();
        assert!(
            unknown.message.contains("doesn't have a resource type"),
            "{unknown:?}"
        );
    }
}
