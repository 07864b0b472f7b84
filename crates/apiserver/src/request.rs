//! What a request asks for, read off its method, path and query as upstream's
//! `RequestInfoFactory` does: the verb, API group and version, namespace, resource, name and
//! subresource — the input of authorization and of routing.

use std::collections::HashMap;

/// A parsed request.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RequestInfo {
    /// Whether the path names a resource (`/api/v1/...`, `/apis/g/v/...`), as opposed to
    /// discovery, `/healthz`, `/openapi/...`.
    pub is_resource_request: bool,
    /// `get`, `list`, `watch`, `create`, `update`, `patch`, `delete`, `deletecollection`; for
    /// non-resource requests the lower-case HTTP method.
    pub verb: String,
    /// The HTTP method (proxied requests keep it).
    pub method: http::Method,
    pub path: String,
    /// `""` for core.
    pub group: String,
    pub version: String,
    pub namespace: String,
    pub resource: String,
    pub subresource: String,
    pub name: String,
    /// The `fieldSelector` of a list or watch (the Node authorizer lets kubelets list only
    /// their own pods through it).
    pub field_selector: String,
    /// The `labelSelector` of a list or watch (the Node authorizer lets kubelets list their
    /// own local-path volumes through it).
    pub label_selector: String,
    /// Path segments after `/api` or `/apis` (discovery uses them).
    pub parts: Vec<String>,
}

impl RequestInfo {
    /// A request for `verb` on a resource (`pods`, or `pods/log` with its subresource), as the
    /// authorizers see it: what impersonation and the tests ask them about.
    pub fn resource_request(
        verb: &str,
        group: &str,
        resource: &str,
        namespace: &str,
        name: &str,
    ) -> Self {
        let (resource, subresource) = resource.split_once('/').unwrap_or((resource, ""));
        RequestInfo {
            is_resource_request: true,
            verb: verb.into(),
            group: group.into(),
            resource: resource.into(),
            subresource: subresource.into(),
            namespace: namespace.into(),
            name: name.into(),
            ..Default::default()
        }
    }
}

/// Sub-paths of a namespace that are its subresources rather than resources in it.
const NAMESPACE_SUBRESOURCES: &[&str] = &["status", "finalize"];

/// Decodes `%xx` escapes (two hex digits) in one path segment or query component; a `%` not
/// followed by two hex digits is kept as it is.
pub fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => {
                // not `u8::from_str_radix`, which takes `+e` for 14
                let hex = &bytes[i + 1..i + 3];
                match std::str::from_utf8(hex)
                    .ok()
                    .filter(|_| hex.iter().all(u8::is_ascii_hexdigit))
                    .and_then(|h| u8::from_str_radix(h, 16).ok())
                {
                    Some(b) => {
                        out.push(b);
                        i += 3;
                    }
                    None => {
                        out.push(b'%');
                        i += 1;
                    }
                }
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Parses a query string into a map (later keys win; `+` is a space as in forms).
pub fn parse_query(query: Option<&str>) -> HashMap<String, String> {
    let mut out = HashMap::new();
    for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        out.insert(
            percent_decode(&k.replace('+', " ")),
            percent_decode(&v.replace('+', " ")),
        );
    }
    out
}

/// Whether a query flag such as `watch` is set: present with any value but `0` or `false` (in
/// any case), as upstream's boolean query parameters (the Python client sends `watch=True`).
pub fn flag(query: &HashMap<String, String>, name: &str) -> bool {
    query
        .get(name)
        .is_some_and(|v| v != "0" && !v.eq_ignore_ascii_case("false"))
}

impl RequestInfo {
    pub fn parse(method: &http::Method, path: &str, query: &HashMap<String, String>) -> Self {
        let mut info = RequestInfo {
            path: path.to_string(),
            method: method.clone(),
            verb: method.as_str().to_lowercase(),
            ..Default::default()
        };
        let segments: Vec<String> = path
            .trim_matches('/')
            .split('/')
            .filter(|s| !s.is_empty())
            .map(percent_decode)
            .collect();
        let (prefix, rest) = match segments.split_first() {
            Some((p, rest)) if p == "api" || p == "apis" => (p.as_str(), rest),
            _ => return info,
        };
        info.parts = rest.to_vec();
        let mut parts: &[String] = rest;
        if prefix == "apis" {
            let [group, version, tail @ ..] = parts else {
                return info;
            };
            info.group = group.clone();
            info.version = version.clone();
            parts = tail;
        } else {
            let [version, tail @ ..] = parts else {
                return info;
            };
            info.version = version.clone();
            parts = tail;
        }
        if parts.is_empty() {
            return info;
        }
        info.is_resource_request = true;
        info.field_selector = query.get("fieldSelector").cloned().unwrap_or_default();
        info.label_selector = query.get("labelSelector").cloned().unwrap_or_default();
        let mut watch_path = false;
        if parts[0] == "watch" {
            watch_path = true;
            parts = &parts[1..];
        }
        if parts.first().map(String::as_str) == Some("namespaces") && parts.len() > 1 {
            info.namespace = parts[1].clone();
            if parts.len() > 2 && !NAMESPACE_SUBRESOURCES.contains(&parts[2].as_str()) {
                parts = &parts[2..];
            }
        }
        info.resource = parts.first().cloned().unwrap_or_default();
        info.name = parts.get(1).cloned().unwrap_or_default();
        info.subresource = parts.get(2).cloned().unwrap_or_default();
        if info.resource == "namespaces" {
            // A namespace's own namespace is not a scope: `namespaces/foo` is cluster-scoped.
            info.namespace.clear();
        }
        info.verb = match *method {
            http::Method::GET | http::Method::HEAD => {
                if watch_path || (info.name.is_empty() && flag(query, "watch")) {
                    "watch"
                } else if info.name.is_empty() {
                    "list"
                } else {
                    "get"
                }
            }
            http::Method::POST => "create",
            http::Method::PUT => "update",
            http::Method::PATCH => "patch",
            http::Method::DELETE if info.name.is_empty() => "deletecollection",
            http::Method::DELETE => "delete",
            _ => info.verb.as_str(),
        }
        .to_string();
        if watch_path && !info.name.is_empty() {
            // `/watch/.../pods/name` watches one object: a list watch narrowed by name.
            info.verb = "watch".into();
        }
        info
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::Method;

    fn parse(method: Method, path: &str, query: &str) -> RequestInfo {
        RequestInfo::parse(&method, path, &parse_query(Some(query)))
    }

    #[test]
    fn namespaced_paths_carry_namespace_resource_name_and_subresource() {
        let i = parse(Method::PUT, "/api/v1/namespaces/ns1/pods/web/status", "");
        assert!(i.is_resource_request);
        assert_eq!(
            (i.verb.as_str(), i.group.as_str(), i.version.as_str()),
            ("update", "", "v1")
        );
        assert_eq!(
            (i.namespace.as_str(), i.resource.as_str(), i.name.as_str()),
            ("ns1", "pods", "web")
        );
        assert_eq!(i.subresource, "status");
    }

    #[test]
    fn namespaces_themselves_are_cluster_scoped() {
        let i = parse(Method::GET, "/api/v1/namespaces/kube-system", "");
        assert_eq!(
            (
                i.verb.as_str(),
                i.resource.as_str(),
                i.name.as_str(),
                i.namespace.as_str()
            ),
            ("get", "namespaces", "kube-system", "")
        );
        let i = parse(Method::PUT, "/api/v1/namespaces/kube-system/finalize", "");
        assert_eq!(
            (i.name.as_str(), i.subresource.as_str()),
            ("kube-system", "finalize")
        );
    }

    #[test]
    fn collection_verbs_depend_on_method_and_watch_flag() {
        assert_eq!(
            parse(Method::GET, "/apis/apps/v1/deployments", "").verb,
            "list"
        );
        assert_eq!(
            parse(Method::GET, "/apis/apps/v1/deployments", "watch=1").verb,
            "watch"
        );
        assert_eq!(
            parse(Method::GET, "/api/v1/watch/namespaces/a/pods", "").verb,
            "watch"
        );
        assert_eq!(
            parse(Method::DELETE, "/api/v1/namespaces/a/pods", "").verb,
            "deletecollection"
        );
        let i = parse(Method::POST, "/apis/apps/v1/namespaces/a/deployments", "");
        assert_eq!((i.verb.as_str(), i.group.as_str()), ("create", "apps"));
    }

    #[test]
    fn discovery_and_other_paths_are_not_resource_requests() {
        assert!(!parse(Method::GET, "/apis/apps/v1", "").is_resource_request);
        assert!(!parse(Method::GET, "/api", "").is_resource_request);
        assert!(!parse(Method::GET, "/healthz", "").is_resource_request);
    }

    #[test]
    fn query_strings_are_percent_decoded() {
        let q = parse_query(Some("labelSelector=app%3Dweb%2Ctier+in+(a)&limit=5"));
        assert_eq!(q["labelSelector"], "app=web,tier in (a)");
        assert_eq!(q["limit"], "5");
    }

    #[test]
    fn a_percent_without_two_hex_digits_is_kept() {
        // `%+e` was read as byte 14 (found by the fuzz tests)
        assert_eq!(percent_decode("%+e%zz%4"), "%+e%zz%4");
        assert_eq!(percent_decode("%2e%2E%C3%A9"), "..é");
    }
}
