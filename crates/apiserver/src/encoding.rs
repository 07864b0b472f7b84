//! Request and response encodings: JSON, YAML and protobuf (built-in types, through
//! [`crate::protobuf`]) bodies in, and content negotiation out: JSON (in Go field order), YAML,
//! protobuf (built-in kinds, as upstream; custom resources are JSON only), or a `meta.k8s.io`
//! Table (`kubectl get`, JSON) or PartialObjectMetadata view (JSON or protobuf).

use bytes::Bytes;
use serde_json::Value;

use crate::error::{ApiError, Result};

/// Bodies larger than this are refused with 413 (upstream's 3 MiB request limit).
pub const MAX_BODY_BYTES: usize = 3 * 1024 * 1024;

/// How a request body is encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyFormat {
    Json,
    Yaml,
    Protobuf,
}

/// The media type of a `Content-Type` header without parameters, lower-cased.
pub fn media_type(content_type: &str) -> String {
    content_type
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase()
}

impl BodyFormat {
    /// The format of a create/update body (patch bodies have their own media types).
    pub fn from_content_type(content_type: Option<&str>) -> Result<Self> {
        let Some(ct) = content_type else {
            return Ok(BodyFormat::Json);
        };
        match media_type(ct).as_str() {
            "" | "application/json" | "*/*" => Ok(BodyFormat::Json),
            "application/yaml" | "application/x-yaml" | "text/yaml" => Ok(BodyFormat::Yaml),
            "application/vnd.kubernetes.protobuf" => Ok(BodyFormat::Protobuf),
            _ => Err(ApiError::unsupported_media_type(ct)),
        }
    }
}

/// Parses a JSON or YAML body into a JSON value; never panics on bad input.
pub fn decode(format: BodyFormat, body: &[u8]) -> Result<Value> {
    if body.len() > MAX_BODY_BYTES {
        return Err(ApiError::too_large("the request body is too large"));
    }
    match format {
        BodyFormat::Json => serde_json::from_slice(body).map_err(|e| {
            ApiError::bad_request(format!(
                "the body of the request could not be decoded as JSON: {e}"
            ))
        }),
        BodyFormat::Yaml => {
            let v: Value = serde_yaml::from_slice(body).map_err(|e| {
                ApiError::bad_request(format!(
                    "the body of the request could not be decoded as YAML: {e}"
                ))
            })?;
            Ok(v)
        }
        BodyFormat::Protobuf => crate::protobuf::decode(body),
    }
}

/// A request body must be an object (not an array, string, …).
pub fn expect_object(v: Value) -> Result<Value> {
    if v.is_object() {
        Ok(v)
    } else {
        Err(ApiError::bad_request(
            "the body of the request must be a JSON object",
        ))
    }
}

/// What the client asked to receive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Output {
    Json,
    Yaml,
    /// `application/vnd.kubernetes.protobuf`.
    Protobuf,
    /// `as=Table;g=meta.k8s.io;v=v1` (or v1beta1).
    Table,
    /// `as=PartialObjectMetadata` (a single object) or `as=PartialObjectMetadataList`, as JSON or
    /// as protobuf.
    PartialMetadata {
        protobuf: bool,
    },
}

impl Output {
    /// Whether the body is protobuf.
    pub fn is_protobuf(self) -> bool {
        matches!(
            self,
            Output::Protobuf | Output::PartialMetadata { protobuf: true }
        )
    }
}

const PROTOBUF: &str = "application/vnd.kubernetes.protobuf";

/// Picks the first acceptable media type of an `Accept` header, as upstream's negotiation;
/// `protobuf` says whether the resource's objects can be written as protobuf (a metadata view
/// always can).
pub fn negotiate(accept: Option<&str>, protobuf: bool) -> Result<Output> {
    let Some(accept) = accept.filter(|a| !a.trim().is_empty()) else {
        return Ok(Output::Json);
    };
    for clause in accept.split(',') {
        let mut parts = clause.split(';').map(str::trim);
        let media = parts.next().unwrap_or("").to_ascii_lowercase();
        let mut as_ = None;
        let mut group = None;
        for p in parts {
            if let Some((k, v)) = p.split_once('=') {
                match k.trim() {
                    "as" => as_ = Some(v.trim().to_string()),
                    "g" => group = Some(v.trim().to_string()),
                    _ => {}
                }
            }
        }
        let json_like = matches!(
            media.as_str(),
            "application/json" | "*/*" | "application/*" | "application/json-seq"
        );
        let is_protobuf = media == PROTOBUF;
        match (as_.as_deref(), json_like) {
            (Some("Table"), true) if group.as_deref() == Some("meta.k8s.io") => {
                return Ok(Output::Table);
            }
            (Some("PartialObjectMetadata" | "PartialObjectMetadataList"), _)
                if group.as_deref() == Some("meta.k8s.io") && (json_like || is_protobuf) =>
            {
                return Ok(Output::PartialMetadata {
                    protobuf: is_protobuf,
                });
            }
            (Some(_), _) => continue,
            (None, true) => return Ok(Output::Json),
            (None, false) if media == "application/yaml" => return Ok(Output::Yaml),
            (None, false) if is_protobuf && protobuf => return Ok(Output::Protobuf),
            _ => continue,
        }
    }
    Err(ApiError::not_acceptable(accept))
}

/// Serializes a value for the chosen output (Table and metadata views are built by the caller).
/// A value the protobuf table cannot write (not expected of a built-in kind's object) is sent
/// as JSON, which every client decodes by its content type, and logged.
pub fn encode(output: Output, value: &Value) -> (Bytes, &'static str) {
    match output {
        Output::Yaml => (
            Bytes::from(serde_yaml::to_string(value).unwrap_or_default()),
            "application/yaml",
        ),
        out if out.is_protobuf() => match crate::protobuf::encode::object(value) {
            Ok(bytes) => (Bytes::from(bytes), PROTOBUF),
            Err(e) => {
                tracing::warn!(error = %e, kind = %value["kind"], "served as JSON, not protobuf");
                encode(Output::Json, value)
            }
        },
        _ => (
            Bytes::from(crate::protobuf::order::to_vec(value)),
            "application/json",
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kubectl_get_asks_for_a_table() {
        let accept = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json";
        assert_eq!(negotiate(Some(accept), true).unwrap(), Output::Table);
    }

    #[test]
    fn protobuf_is_chosen_where_the_kind_has_it_and_falls_back_to_json_elsewhere() {
        let accept = "application/vnd.kubernetes.protobuf, */*";
        assert_eq!(negotiate(Some(accept), true).unwrap(), Output::Protobuf);
        assert_eq!(negotiate(Some(accept), false).unwrap(), Output::Json);
        assert_eq!(
            negotiate(Some(PROTOBUF), false).unwrap_err().code,
            406,
            "custom resources are not protobuf"
        );
        let metadata = "application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json";
        assert_eq!(
            negotiate(Some(metadata), false).unwrap(),
            Output::PartialMetadata { protobuf: true }
        );
        let table =
            "application/vnd.kubernetes.protobuf;as=Table;g=meta.k8s.io;v=v1,application/json";
        assert_eq!(negotiate(Some(table), true).unwrap(), Output::Json);
        assert_eq!(negotiate(None, true).unwrap(), Output::Json);
        assert!(negotiate(Some("text/html"), true).is_err());
    }

    #[test]
    fn bad_bodies_are_bad_requests_not_panics() {
        for body in [&b"{"[..], b"[1,2", b"\xff\xfe", b"null"] {
            match decode(BodyFormat::Json, body).and_then(expect_object) {
                Err(e) => assert_eq!(e.code, 400),
                Ok(v) => panic!("decoded {v}"),
            }
        }
        let deep = "[".repeat(10_000);
        assert_eq!(
            decode(BodyFormat::Json, deep.as_bytes()).unwrap_err().code,
            400
        );
        let deep_yaml = "a:\n".to_string() + &" [".repeat(5000);
        assert_eq!(
            decode(BodyFormat::Yaml, deep_yaml.as_bytes())
                .unwrap_err()
                .code,
            400
        );
    }

    #[test]
    fn bodies_over_three_mebibytes_are_too_large() {
        let body = vec![b' '; MAX_BODY_BYTES + 1];
        assert_eq!(decode(BodyFormat::Json, &body).unwrap_err().code, 413);
    }

    #[test]
    fn yaml_bodies_become_json() {
        let v = decode(BodyFormat::Yaml, b"kind: Pod\nmetadata:\n  name: a\n").unwrap();
        assert_eq!(v["metadata"]["name"], "a");
    }
}
