//! `GET pods/{name}/log` (upstream's `LogREST`): `PodLogOptions` read off the query and
//! validated as upstream (`ValidatePodLogOptions`, 422), the container resolved, and the
//! kubelet's `/containerLogs` body streamed back as `text/plain` (chunked, so `follow` goes on
//! as long as the kubelet writes).

use std::collections::HashMap;

use http::{HeaderValue, Method, Response, header};
use skiff_apimachinery::proxy;
use skiff_apimachinery::validation::{FieldError, FieldPath};

use super::super::{Body, Ctx};
use crate::error::{ApiError, Result};
use crate::request::flag;

/// The options the kubelet is asked for, as upstream's `streamParams` encodes them.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct LogOptions {
    pub follow: bool,
    pub previous: bool,
    pub timestamps: bool,
    pub since_seconds: Option<i64>,
    /// RFC 3339, as given.
    pub since_time: Option<String>,
    pub tail_lines: Option<i64>,
    pub limit_bytes: Option<i64>,
}

fn integer(query: &HashMap<String, String>, name: &str) -> Result<Option<i64>> {
    query
        .get(name)
        .map(|v| {
            v.parse::<i64>().map_err(|_| {
                ApiError::bad_request(format!(
                    "unable to parse query parameter {name}={v:?}: not an integer"
                ))
            })
        })
        .transpose()
}

impl LogOptions {
    /// Parses the query (400 for what does not parse) and validates it (422).
    pub fn from_query(query: &HashMap<String, String>, pod: &str) -> Result<LogOptions> {
        let since_time = match query.get("sinceTime") {
            Some(t) if t.parse::<jiff::Timestamp>().is_err() => {
                return Err(ApiError::bad_request(format!(
                    "unable to parse query parameter sinceTime={t:?}: not an RFC 3339 time"
                )));
            }
            t => t.cloned(),
        };
        let options = LogOptions {
            follow: flag(query, "follow"),
            previous: flag(query, "previous"),
            timestamps: flag(query, "timestamps"),
            since_seconds: integer(query, "sinceSeconds")?,
            since_time,
            tail_lines: integer(query, "tailLines")?,
            limit_bytes: integer(query, "limitBytes")?,
        };
        let mut errors = Vec::new();
        if let Some(n) = options.tail_lines.filter(|n| *n < 0) {
            errors.push(FieldError::invalid(
                &FieldPath::new("tailLines"),
                n,
                "must be greater than or equal to 0",
            ));
        }
        if let Some(n) = options.limit_bytes.filter(|n| *n < 1) {
            errors.push(FieldError::invalid(
                &FieldPath::new("limitBytes"),
                n,
                "must be greater than 0",
            ));
        }
        match (options.since_seconds, &options.since_time) {
            (Some(_), Some(_)) => errors.push(FieldError::forbidden(
                &FieldPath::new(""),
                "at most one of `sinceTime` or `sinceSeconds` may be specified",
            )),
            (Some(n), None) if n < 1 => errors.push(FieldError::invalid(
                &FieldPath::new("sinceSeconds"),
                n,
                "must be greater than 0",
            )),
            _ => {}
        }
        if !errors.is_empty() {
            return Err(ApiError::invalid("PodLogOptions", "", pod, &errors));
        }
        Ok(options)
    }

    /// The kubelet's query string.
    pub fn kubelet_query(&self) -> String {
        let mut q = form_urlencoded::Serializer::new(String::new());
        for (on, name) in [
            (self.follow, "follow"),
            (self.previous, "previous"),
            (self.timestamps, "timestamps"),
        ] {
            if on {
                q.append_pair(name, "true");
            }
        }
        for (value, name) in [
            (self.since_seconds, "sinceSeconds"),
            (self.tail_lines, "tailLines"),
            (self.limit_bytes, "limitBytes"),
        ] {
            if let Some(v) = value {
                q.append_pair(name, &v.to_string());
            }
        }
        if let Some(t) = &self.since_time {
            q.append_pair("sinceTime", t);
        }
        q.finish()
    }
}

/// `GET pods/{name}/log`.
pub async fn get(mut ctx: Ctx) -> Result<Response<Body>> {
    let name = ctx.info.name.clone();
    let options = LogOptions::from_query(&ctx.query, &name)?;
    let (pod, container) = super::pod_and_container(&ctx, true).await?;
    let kubelet = super::kubelet_of(&ctx, &pod, &name).await?;
    let path = format!(
        "/containerLogs/{}/{}/{}",
        ctx.info.namespace, name, container
    );
    let query = options.kubelet_query();
    let target = if query.is_empty() {
        path
    } else {
        format!("{path}?{query}")
    };
    // a log request is not an upgrade: no client connection to hand over
    ctx.upgrade = None;
    let resp = super::send(&mut ctx, kubelet, Method::GET, &target).await?;
    let resp = super::check(resp, &name).await?;
    let mut out = Response::new(proxy::stream_body(resp.into_body()));
    out.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn query(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn options_become_the_kubelets_query() {
        let o = LogOptions::from_query(
            &query(&[
                ("follow", "true"),
                ("tailLines", "10"),
                ("timestamps", "true"),
                ("container", "c"),
                ("insecureSkipTLSVerifyBackend", "true"),
            ]),
            "p",
        )
        .unwrap();
        assert_eq!(
            o.kubelet_query(),
            "follow=true&timestamps=true&tailLines=10"
        );
        let t = LogOptions::from_query(&query(&[("sinceTime", "2024-01-01T00:00:00Z")]), "p");
        assert_eq!(
            t.unwrap().kubelet_query(),
            "sinceTime=2024-01-01T00%3A00%3A00Z"
        );
        assert_eq!(
            LogOptions::from_query(&query(&[]), "p")
                .unwrap()
                .kubelet_query(),
            ""
        );
    }

    #[test]
    fn invalid_options_are_422_and_unparsable_ones_400() {
        let e = LogOptions::from_query(&query(&[("tailLines", "-1")]), "p").unwrap_err();
        assert_eq!(e.code, 422);
        assert_eq!(
            e.message,
            "PodLogOptions \"p\" is invalid: tailLines: Invalid value: -1: must be greater than or equal to 0"
        );
        let both = query(&[("sinceSeconds", "5"), ("sinceTime", "2024-01-01T00:00:00Z")]);
        assert_eq!(LogOptions::from_query(&both, "p").unwrap_err().code, 422);
        let zero = query(&[("limitBytes", "0")]);
        assert_eq!(LogOptions::from_query(&zero, "p").unwrap_err().code, 422);
        let text = query(&[("tailLines", "ten")]);
        assert_eq!(LogOptions::from_query(&text, "p").unwrap_err().code, 400);
    }
}
