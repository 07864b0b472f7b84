//! `/openapi/v2` and `/openapi/v3[/{group-version}]`: the documents kubectl reads for `explain`
//! and for deciding that the server validates fields (`fieldValidation=Strict`), built by
//! `skiff-openapi` (once for the built-in kinds, again as custom resources come and go) and
//! served with its ETag and caching rules, gzip-compressed to a client whose `Accept-Encoding`
//! takes gzip (as upstream compresses large responses). The v3 index also lists the group
//! versions of available remote APIServices, whose documents their aggregated servers serve
//! (the router proxies `/openapi/v3/apis/<group>/<version>` to them).

use std::sync::{Arc, RwLock};

use http::{HeaderValue, Response};
use serde_json::json;
use skiff_openapi::{Custom, Documents, Reply};

use super::{Body, full};

/// The documents served now: the built-in ones until custom resources are published.
#[derive(Debug, Default)]
pub struct Published(RwLock<Option<Arc<Documents>>>);

impl Published {
    /// Serves the built-in documents with `custom` resources added (only the documents of
    /// group versions that changed are built again).
    pub fn publish(&self, custom: Vec<Custom>) {
        let previous = self.0.read().unwrap_or_else(|e| e.into_inner()).clone();
        let next = if custom.is_empty() {
            None
        } else {
            let base = previous.as_deref().unwrap_or_else(|| Documents::global());
            Some(Arc::new(Documents::with_custom(custom, base)))
        };
        *self.0.write().unwrap_or_else(|e| e.into_inner()) = next;
    }

    /// Runs `f` on the current documents.
    fn with<R>(&self, f: impl FnOnce(&Documents) -> R) -> R {
        let current = self.0.read().unwrap_or_else(|e| e.into_inner());
        f(current.as_deref().unwrap_or_else(|| Documents::global()))
    }
}

/// Answers an OpenAPI path, or `None` when the path is not one; `remote` are the v3 index
/// keys (`apis/metrics.k8s.io/v1beta1`) of remote group versions.
pub fn handle(
    published: &Published,
    remote: &[String],
    path: &str,
    query: &std::collections::HashMap<String, String>,
    headers: &http::HeaderMap,
) -> Option<Response<Body>> {
    published.with(|docs| serve(docs, remote, path, query, headers))
}

/// The v3 index with `remote` group versions added (their documents unhashed: the aggregated
/// server owns them), its ETag a hash of the merged index.
fn merged_index(
    docs: &Documents,
    remote: &[String],
    if_none_match: Option<&str>,
) -> Response<Body> {
    use std::hash::{Hash, Hasher};
    let mut index: serde_json::Value =
        serde_json::from_slice(&docs.v3_index_json()).unwrap_or_else(|_| json!({"paths": {}}));
    for key in remote {
        index["paths"][key] = json!({"serverRelativeURL": format!("/openapi/v3/{key}")});
    }
    let bytes = serde_json::to_vec(&index).unwrap_or_default();
    let mut hasher = std::hash::DefaultHasher::new();
    bytes.hash(&mut hasher);
    let etag = format!("\"{:016X}\"", hasher.finish());
    let mut resp = if if_none_match.is_some_and(|t| t.split(',').any(|t| t.trim() == etag)) {
        super::bytes_response(304, Vec::new(), "application/json")
    } else {
        super::bytes_response(200, bytes, "application/json")
    };
    if let Ok(v) = HeaderValue::from_str(&etag) {
        resp.headers_mut().insert(http::header::ETAG, v);
    }
    resp
}

fn serve(
    docs: &Documents,
    remote: &[String],
    path: &str,
    query: &std::collections::HashMap<String, String>,
    headers: &http::HeaderMap,
) -> Option<Response<Body>> {
    let header = |name: http::header::HeaderName| headers.get(name).and_then(|v| v.to_str().ok());
    let accept = header(http::header::ACCEPT);
    let if_none_match = header(http::header::IF_NONE_MATCH);
    let reply = match path.trim_end_matches('/') {
        "/openapi/v2" | "/swagger-2.0.0.pb-v1" => docs.serve_v2(accept, if_none_match),
        "/openapi/v3" if !remote.is_empty() => {
            return Some(merged_index(docs, remote, if_none_match));
        }
        "/openapi/v3" => docs.serve_v3_index(if_none_match),
        p => {
            let gv = p.strip_prefix("/openapi/v3/")?;
            let hash = query.get("hash").map(String::as_str);
            docs.serve_v3(gv, hash, accept, if_none_match)
        }
    };
    Some(respond(
        reply,
        accepts_gzip(header(http::header::ACCEPT_ENCODING)),
    ))
}

/// Whether an `Accept-Encoding` header takes gzip (named, or `*`, without `q=0`).
fn accepts_gzip(accept_encoding: Option<&str>) -> bool {
    accept_encoding.is_some_and(|header| {
        header.split(',').any(|clause| {
            let mut parts = clause.split(';').map(str::trim);
            let coding = parts.next().unwrap_or_default();
            let refused = parts.any(|p| {
                p.strip_prefix("q=")
                    .and_then(|q| q.parse::<f32>().ok())
                    .is_some_and(|q| q <= 0.0)
            });
            (coding.eq_ignore_ascii_case("gzip") || coding == "*") && !refused
        })
    })
}

fn respond(reply: Reply<'_>, gzip: bool) -> Response<Body> {
    let immutable = reply
        .headers
        .iter()
        .any(|(k, v)| k.eq_ignore_ascii_case("cache-control") && v.contains("immutable"));
    let gzip = gzip && !reply.gzip.is_empty();
    let body = if gzip {
        reply.gzip.to_vec()
    } else {
        reply.body()
    };
    let mut resp = Response::new(full(body));
    *resp.status_mut() = http::StatusCode::from_u16(reply.status).unwrap_or(http::StatusCode::OK);
    if gzip {
        resp.headers_mut().insert(
            http::header::CONTENT_ENCODING,
            HeaderValue::from_static("gzip"),
        );
    }
    for (k, v) in &reply.headers {
        if let Ok(v) = HeaderValue::from_str(v) {
            resp.headers_mut().insert(*k, v);
        }
    }
    if !reply.gzip.is_empty() {
        resp.headers_mut().append(
            http::header::VARY,
            HeaderValue::from_static("Accept-Encoding"),
        );
    }
    if immutable {
        let expires = jiff::Timestamp::now()
            .checked_add(jiff::SignedDuration::from_hours(24 * 365))
            .unwrap_or_else(|_| jiff::Timestamp::now());
        let http_date = expires.strftime("%a, %d %b %Y %H:%M:%S GMT").to_string();
        if let Ok(v) = HeaderValue::from_str(&http_date) {
            resp.headers_mut().insert(http::header::EXPIRES, v);
        }
    }
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gzip_is_sent_only_to_a_client_that_takes_it() {
        assert!(accepts_gzip(Some("gzip")));
        assert!(accepts_gzip(Some("deflate, GZIP;q=0.5")));
        assert!(accepts_gzip(Some("*")));
        assert!(!accepts_gzip(None));
        assert!(!accepts_gzip(Some("identity")));
        assert!(!accepts_gzip(Some("gzip;q=0")));
        assert!(!accepts_gzip(Some("br, gzip; q=0.0")));
    }

    #[test]
    fn documents_are_inflated_for_a_client_without_gzip_and_sent_compressed_otherwise() {
        let query = std::collections::HashMap::new();
        let get = |encoding: Option<&'static str>| {
            let mut headers = http::HeaderMap::new();
            if let Some(e) = encoding {
                headers.insert(http::header::ACCEPT_ENCODING, HeaderValue::from_static(e));
            }
            let resp = handle(&Published::default(), &[], "/openapi/v2", &query, &headers)
                .expect("an OpenAPI path");
            let encoding = resp.headers().get(http::header::CONTENT_ENCODING).cloned();
            let vary: Vec<_> = resp
                .headers()
                .get_all(http::header::VARY)
                .iter()
                .cloned()
                .collect();
            let body =
                futures::executor::block_on(http_body_util::BodyExt::collect(resp.into_body()))
                    .expect("a full body")
                    .to_bytes();
            (encoding, vary, body)
        };
        let (encoding, vary, plain) = get(None);
        assert_eq!(encoding, None);
        assert_eq!(vary, ["Accept", "Accept-Encoding"]);
        assert_eq!(plain, Documents::global().v2_json());
        let (encoding, _, compressed) = get(Some("gzip, deflate"));
        assert_eq!(
            encoding.as_ref().map(HeaderValue::as_bytes),
            Some(&b"gzip"[..])
        );
        assert!(
            compressed.len() * 4 < plain.len(),
            "{} of {}",
            compressed.len(),
            plain.len()
        );
        let mut inflated = Vec::new();
        std::io::Read::read_to_end(
            &mut flate2::read::GzDecoder::new(&compressed[..]),
            &mut inflated,
        )
        .expect("valid gzip");
        assert_eq!(inflated, plain);
    }

    #[test]
    fn the_v3_index_lists_remote_group_versions_next_to_the_built_in_ones() {
        let remote = ["apis/metrics.k8s.io/v1beta1".to_string()];
        let resp = merged_index(Documents::global(), &remote, None);
        let etag = resp.headers()[http::header::ETAG].clone();
        let body = futures::executor::block_on(http_body_util::BodyExt::collect(resp.into_body()))
            .expect("a full body")
            .to_bytes();
        let index: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(
            index["paths"]["apis/metrics.k8s.io/v1beta1"]["serverRelativeURL"],
            "/openapi/v3/apis/metrics.k8s.io/v1beta1"
        );
        assert!(
            index["paths"]["apis/apps/v1"]["serverRelativeURL"]
                .as_str()
                .unwrap()
                .starts_with("/openapi/v3/apis/apps/v1?hash=")
        );
        let again = merged_index(Documents::global(), &remote, etag.to_str().ok());
        assert_eq!(again.status(), 304);
    }
}
