//! `/openapi/v2` and `/openapi/v3[/{group-version}]`: the documents kubectl reads for `explain`
//! and for deciding that the server validates fields (`fieldValidation=Strict`), built once by
//! `skiff-openapi` and served with its ETag and caching rules.

use http::{HeaderValue, Response};
use skiff_openapi::{Documents, Reply};

use super::{Body, full};

/// Answers an OpenAPI path, or `None` when the path is not one.
pub fn handle(
    path: &str,
    query: &std::collections::HashMap<String, String>,
    headers: &http::HeaderMap,
) -> Option<Response<Body>> {
    let header = |name: http::header::HeaderName| headers.get(name).and_then(|v| v.to_str().ok());
    let accept = header(http::header::ACCEPT);
    let if_none_match = header(http::header::IF_NONE_MATCH);
    let docs = Documents::global();
    let reply = match path.trim_end_matches('/') {
        "/openapi/v2" | "/swagger-2.0.0.pb-v1" => docs.serve_v2(accept, if_none_match),
        "/openapi/v3" => docs.serve_v3_index(if_none_match),
        p => {
            let gv = p.strip_prefix("/openapi/v3/")?;
            let hash = query.get("hash").map(String::as_str);
            docs.serve_v3(gv, hash, accept, if_none_match)
        }
    };
    Some(respond(reply))
}

fn respond(reply: Reply<'_>) -> Response<Body> {
    let immutable = reply
        .headers
        .iter()
        .any(|(k, v)| k.eq_ignore_ascii_case("cache-control") && v.contains("immutable"));
    let mut resp = Response::new(full(reply.body.to_vec()));
    *resp.status_mut() = http::StatusCode::from_u16(reply.status).unwrap_or(http::StatusCode::OK);
    for (k, v) in &reply.headers {
        if let Ok(v) = HeaderValue::from_str(v) {
            resp.headers_mut().insert(*k, v);
        }
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
