//! The trace's HTTP endpoints (non-resource paths, authorized as `nonResourceURLs` like
//! `/metrics`): `GET /debug/trace/pods/{ns}/{name}` returns a pod's timeline and startup stages
//! as JSON; with `?watch=1` the same document is the first line of a stream of newline-delimited
//! JSON, followed by `{"entry": …}` per new entry. `GET /ui/trace/pods/{ns}/{name}` is the web
//! page (a sequence diagram drawn from the JSON, found by a URL relative to the page's own, so it
//! works behind `kubectl proxy`).

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use http::Response;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use serde_json::{Value, json};
use tokio::sync::{broadcast, mpsc};

use super::recorder::Timeline;
use super::{Recorder, stages};
use crate::error::ApiError;
use crate::handlers::{Body, bytes_response, error, json as json_response};
use crate::request::flag;
use crate::server::ApiServer;

const API_PREFIX: &str = "/debug/trace/pods/";
const PAGE_PREFIX: &str = "/ui/trace/pods/";
const PAGE: &str = include_str!("page.html");

/// Answers `path` if it is one of the trace's.
pub fn handle(
    server: &ApiServer,
    path: &str,
    query: &HashMap<String, String>,
) -> Option<Response<Body>> {
    if let Some(rest) = path.strip_prefix(PAGE_PREFIX) {
        return Some(match pod_of(rest) {
            Some(_) => bytes_response(200, PAGE, "text/html; charset=utf-8"),
            None => error(&ApiError::path_not_found()),
        });
    }
    let rest = path.strip_prefix(API_PREFIX)?;
    let Some((namespace, name)) = pod_of(rest) else {
        return Some(error(&ApiError::path_not_found()));
    };
    let Some(recorder) = &server.gates.trace else {
        return Some(error(&ApiError::with_code(
            404,
            "NotFound",
            "the lifecycle trace is off (--trace-objects 0)",
        )));
    };
    let key = super::key(namespace, name);
    if flag(query, "watch") {
        return Some(stream(recorder, namespace, name, key));
    }
    Some(match recorder.timeline(&key) {
        Some(t) => json_response(200, &document(namespace, name, &t)),
        None => error(&ApiError::with_code(
            404,
            "NotFound",
            format!(
                "no trace of pod \"{name}\" in namespace \"{namespace}\" (the API server records pods it sees written)"
            ),
        )),
    })
}

/// `{ns}/{name}` of a path's rest.
fn pod_of(rest: &str) -> Option<(&str, &str)> {
    let (ns, name) = rest.trim_end_matches('/').split_once('/')?;
    (!ns.is_empty() && !name.is_empty() && !name.contains('/')).then_some((ns, name))
}

/// The JSON of one timeline.
pub fn document(namespace: &str, name: &str, timeline: &Timeline) -> Value {
    let entries = super::recorder::sorted(&timeline.entries);
    let stages = stages::derive(&entries);
    json!({
        "kind": "PodTrace",
        "namespace": namespace,
        "name": name,
        "dropped": timeline.dropped,
        "entries": entries,
        "stages": stages,
    })
}

fn stream(recorder: &Arc<Recorder>, namespace: &str, name: &str, key: String) -> Response<Body> {
    let (timeline, mut rx) = recorder.follow(&key);
    let (tx, body_rx) = mpsc::channel::<Result<Frame<Bytes>, std::convert::Infallible>>(16);
    let mut first = serde_json::to_vec(&document(namespace, name, &timeline)).unwrap_or_default();
    first.push(b'\n');
    tokio::spawn(async move {
        if tx.send(Ok(Frame::data(Bytes::from(first)))).await.is_err() {
            return;
        }
        loop {
            let next = tokio::select! {
                next = rx.recv() => next,
                () = tx.closed() => return,
            };
            match next {
                Ok(item) if item.0 == key => {
                    let mut line =
                        serde_json::to_vec(&json!({"entry": item.1})).unwrap_or_default();
                    line.push(b'\n');
                    if tx.send(Ok(Frame::data(Bytes::from(line)))).await.is_err() {
                        return;
                    }
                }
                Ok(_) => {}
                // fell behind or the server is going away: the client reads the document again
                Err(
                    broadcast::error::RecvError::Lagged(_) | broadcast::error::RecvError::Closed,
                ) => {
                    return;
                }
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
    fn only_namespace_and_name_paths_name_a_pod() {
        assert_eq!(pod_of("ns/web"), Some(("ns", "web")));
        assert_eq!(pod_of("ns/web/"), Some(("ns", "web")));
        assert_eq!(pod_of("ns"), None);
        assert_eq!(pod_of("ns/web/x"), None);
    }
}
