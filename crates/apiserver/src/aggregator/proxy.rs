//! Requests under `/apis/<group>/<version>` of a remote APIService (and for its OpenAPI v3
//! document, `/openapi/v3/apis/<group>/<version>`), forwarded as upstream's proxy handler does: after this server's authentication, impersonation and authorization,
//! to a ready endpoint of the APIService's Service over TLS (its `caBundle`, else the host's
//! roots, or unchecked with `insecureSkipTLSVerify`; server name `<service>.<namespace>.svc`),
//! presenting the front-proxy client certificate and the user in `X-Remote-User`,
//! `X-Remote-Group` and `X-Remote-Extra-*` (the client's credentials and any such headers it
//! sent are dropped). Bodies stream both ways; watches and upgrades (exec through an aggregated
//! server) pass through. An APIService that is not available, or a Service without an
//! endpoint, answers 503 `service unavailable`.

use std::sync::Arc;

use http::{HeaderMap, HeaderValue, Request, Response};
use hyper::body::Incoming;
use skiff_apimachinery::proxy;

use super::State;
use super::available::server_name;
use super::registration::ApiService;
use crate::authn::UserInfo;
use crate::error::ApiError;
use crate::handlers::{self, Body};
use crate::https_client::Trust;
use crate::request::RequestInfo;
use crate::server::ApiServer;
use crate::services::{CachedServices, ServiceResolver};

pub const REMOTE_USER: &str = "X-Remote-User";
pub const REMOTE_GROUP: &str = "X-Remote-Group";
pub const REMOTE_EXTRA_PREFIX: &str = "X-Remote-Extra-";

/// The remote APIService a request's path falls under, if any.
pub fn target<'a>(state: &'a State, info: &RequestInfo) -> Option<&'a ApiService> {
    if !info.path.starts_with("/apis/") {
        return None;
    }
    match info.parts.as_slice() {
        [group, version, ..] => state.remote(group, version),
        _ => None,
    }
}

/// The remote APIService whose OpenAPI v3 document `path` asks for
/// (`/openapi/v3/apis/<group>/<version>`), if any.
pub fn openapi_target<'a>(state: &'a State, path: &str) -> Option<&'a ApiService> {
    let gv = path
        .strip_prefix("/openapi/v3/apis/")?
        .trim_end_matches('/');
    let (group, version) = gv.split_once('/')?;
    if version.contains('/') {
        return None;
    }
    state.remote(group, version)
}

/// The OpenAPI v3 index keys of the available remote group versions.
pub fn openapi_paths(state: &State) -> Vec<String> {
    let mut paths: Vec<String> = state
        .services
        .values()
        .filter(|s| s.service.is_some() && s.available)
        .map(|s| format!("apis/{}/{}", s.group, s.version))
        .collect();
    paths.sort();
    paths
}

/// An `X-Remote-Extra-` key as client-go escapes it: bytes that may not appear in a header
/// name (and `%`) as `%XX`.
fn escape_extra_key(key: &str) -> String {
    let mut out = String::new();
    for b in key.bytes() {
        let token = b.is_ascii_alphanumeric() || b"!#$&'*+-.^_`|~".contains(&b);
        if token {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Replaces any front-proxy and impersonation headers with `user`'s identity.
pub fn set_user_headers(headers: &mut HeaderMap, user: &UserInfo) {
    let names: Vec<http::HeaderName> = headers
        .keys()
        .filter(|k| {
            let k = k.as_str();
            k.starts_with("x-remote-") || k.starts_with("impersonate-")
        })
        .cloned()
        .collect();
    for name in names {
        headers.remove(name);
    }
    let value = |s: &str| HeaderValue::from_str(s).ok();
    if let Some(v) = value(&user.name) {
        headers.insert(REMOTE_USER, v);
    }
    for group in &user.groups {
        if let Some(v) = value(group) {
            headers.append(REMOTE_GROUP, v);
        }
    }
    for (key, values) in &user.extra {
        let Ok(name) = http::HeaderName::from_bytes(
            format!("{REMOTE_EXTRA_PREFIX}{}", escape_extra_key(key)).as_bytes(),
        ) else {
            continue;
        };
        for v in values.iter().filter_map(|v| value(v)) {
            headers.append(name.clone(), v);
        }
    }
}

/// Forwards `req` to `api_service`'s Service.
pub async fn serve(
    server: Arc<ApiServer>,
    req: Request<Incoming>,
    api_service: ApiService,
    user: &UserInfo,
) -> Response<Body> {
    let unavailable = || handlers::error(&ApiError::service_unavailable("service unavailable"));
    let Some(service) = &api_service.service else {
        return handlers::error(&ApiError::path_not_found());
    };
    if !api_service.available {
        return unavailable();
    }
    let services = CachedServices(server.cache.clone());
    let Ok((host, port)) = services.resolve(&service.namespace, &service.name, service.port) else {
        return unavailable();
    };
    let trust = match (&api_service.ca_bundle, api_service.insecure_skip_tls_verify) {
        (_, true) => Trust::Insecure,
        (Some(pem), false) => Trust::Bundle(pem.clone()),
        (None, false) => Trust::HostRoots,
    };
    let unreachable = |e: &dyn std::fmt::Display| {
        handlers::error(&ApiError::service_unavailable(format!(
            "error trying to reach service: {e}"
        )))
    };
    let config = match server.aggregator.tls.get(&trust) {
        Ok(c) => c,
        Err(e) => return handlers::error(&ApiError::internal(e)),
    };
    let tls = match crate::https_client::dial(&server_name(service), &host, port, config).await {
        Ok(tls) => tls,
        Err(e) => return unreachable(&e),
    };
    let (mut parts, body) = req.into_parts();
    let authority = crate::kubelet_client::authority(&host, port);
    let mut headers = proxy::forwarded_headers(&parts.headers, &authority);
    set_user_headers(&mut headers, user);
    let request = proxy::Forward {
        method: parts.method.clone(),
        path_and_query: parts
            .uri
            .path_and_query()
            .map_or("/".to_string(), |p| p.as_str().to_string()),
        headers,
        body,
        client: parts.extensions.remove::<hyper::upgrade::OnUpgrade>(),
    };
    match proxy::forward(tls, &authority, request).await {
        Ok(resp) => resp.map(proxy::stream_body),
        Err(e) => unreachable(&e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_user_replaces_whatever_identity_headers_the_client_sent() {
        let mut headers = HeaderMap::new();
        headers.insert("x-remote-user", HeaderValue::from_static("mallory"));
        headers.insert("impersonate-user", HeaderValue::from_static("root"));
        headers.insert("accept", HeaderValue::from_static("application/json"));
        let user = UserInfo {
            name: "alice".into(),
            groups: vec!["devs".into(), "system:authenticated".into()],
            extra: [(
                "authentication.kubernetes.io/pod-name".to_string(),
                vec!["p1".to_string()],
            )]
            .into(),
            ..Default::default()
        };
        set_user_headers(&mut headers, &user);
        assert_eq!(headers["x-remote-user"], "alice");
        let groups: Vec<_> = headers.get_all("x-remote-group").iter().collect();
        assert_eq!(groups, ["devs", "system:authenticated"]);
        assert_eq!(
            headers["x-remote-extra-authentication.kubernetes.io%2Fpod-name"],
            "p1"
        );
        assert!(headers.get("impersonate-user").is_none());
        assert_eq!(headers["accept"], "application/json");
    }
}
