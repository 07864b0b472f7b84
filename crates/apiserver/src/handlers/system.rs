//! Health, version and metrics endpoints.

use http::Method;
use serde_json::json;

use super::{Body, bytes_response, error, json};
use crate::error::ApiError;
use crate::server::ApiServer;

use skiff_apimachinery::version::{GIT_VERSION, MAJOR, MINOR, platform};

pub async fn handle(server: &ApiServer, method: &Method, path: &str) -> http::Response<Body> {
    if method != Method::GET && method != Method::HEAD {
        return error(&ApiError::method_not_supported(method.as_str(), path));
    }
    match path {
        "/version" | "/version/" => json(
            200,
            &json!({
                "major": MAJOR, "minor": MINOR, "gitVersion": GIT_VERSION,
                "gitCommit": "", "gitTreeState": "clean", "buildDate": "2026-11-29T00:00:00Z",
                "goVersion": "go1.24 (skiff: rust)", "compiler": "rustc",
                "platform": platform(),
            }),
        ),
        p if is_health(p) => {
            if server.cache.revision() > 0 {
                bytes_response(200, "ok", "text/plain; charset=utf-8")
            } else {
                bytes_response(
                    500,
                    "[-]watch-cache failed: not synced",
                    "text/plain; charset=utf-8",
                )
            }
        }
        "/metrics" => bytes_response(200, metrics(server), "text/plain; version=0.0.4"),
        _ => error(&ApiError::path_not_found()),
    }
}

fn is_health(path: &str) -> bool {
    ["/healthz", "/livez", "/readyz"]
        .iter()
        .any(|p| path == *p || path.starts_with(&format!("{p}/")))
}

fn metrics(server: &ApiServer) -> String {
    let mut counts: Vec<(String, usize)> = Vec::new();
    for rt in server.registry.snapshot().iter() {
        let name = if rt.group.is_empty() {
            rt.plural.clone()
        } else {
            format!("{}.{}", rt.plural, rt.group)
        };
        // Versions of one resource share one count.
        if counts.iter().any(|(n, _)| *n == name) {
            continue;
        }
        if let Some(cache) = server.cache.get(rt) {
            counts.push((name, cache.len()));
        }
    }
    let counts: Vec<(&str, usize)> = counts.iter().map(|(n, c)| (n.as_str(), *c)).collect();
    let (read_only, mutating) = match &server.flow_control {
        Some(flow_control) => flow_control.in_flight(),
        None => server.gates.overload.in_flight(),
    };
    server.metrics.set_inflight(read_only, mutating);
    server.metrics.render(&counts)
}
