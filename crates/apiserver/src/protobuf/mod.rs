//! Kubernetes' protobuf encoding (`application/vnd.kubernetes.protobuf`) of built-in kinds, and
//! the Go structs' field order it records. Bodies are the `k8s\0` magic, then a
//! `runtime.Unknown` envelope with the object's TypeMeta and its protobuf-encoded message.
//! [`decode`] turns a request body (kubectl ≥ 1.32 sends them) into the JSON object upstream's
//! JSON encoding gives for the same object, so the rest of the server only sees JSON; [`encode`]
//! writes responses from that JSON; [`order`] writes JSON in Go field order.
//!
//! # Layout
//! - [`schema`]: the message table (`schema.txt`, written by `scripts/gen-protobuf-schema`).
//! - [`wire`]: the wire-format walker that builds JSON with the table.
//! - [`encode`]: the writer of protobuf responses from JSON, with the same table.
//! - [`wellknown`]: Time, MicroTime, Duration, RawExtension, Quantity, IntOrString.
//! - [`order`]: JSON in the Go structs' field order.

pub mod encode;
pub mod order;
mod schema;
mod wellknown;
mod wire;

#[cfg(test)]
pub(crate) mod tests;

use prost::Message as _;
use serde_json::{Map, Value};

use crate::error::ApiError;
use wire::{Decoder, Malformed};

/// The first bytes of every Kubernetes protobuf body.
pub const MAGIC: &[u8] = b"k8s\0";

const PROTOBUF: &str = "application/vnd.kubernetes.protobuf";

/// Why a protobuf body could not be turned into JSON. None is worth retrying unchanged.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The body lacks the `k8s\0` prefix (400).
    #[error("protobuf body does not start with the k8s magic")]
    Magic,
    /// The `runtime.Unknown` envelope is malformed (400).
    #[error("protobuf envelope: {0}")]
    Envelope(#[from] prost::DecodeError),
    /// The envelope says its bytes are compressed, which no client does (415).
    #[error("protobuf envelope with content encoding {0}")]
    ContentEncoding(String),
    /// The envelope holds neither protobuf nor JSON (415).
    #[error("protobuf envelope holding {0}")]
    ContentType(String),
    /// No table for this kind: not a served group version, or not a top-level kind (415).
    #[error("{PROTOBUF} for {api_version}, Kind={kind}")]
    UnknownKind { api_version: String, kind: String },
    /// The typed message is malformed at `path` (JSON path, empty at the top) (400).
    #[error("protobuf body: {}{what}", if path.is_empty() { String::new() } else { format!("{path}: ") })]
    Field { path: String, what: Malformed },
}

impl Error {
    fn into_api(self) -> ApiError {
        match &self {
            Error::ContentEncoding(_) | Error::ContentType(_) | Error::UnknownKind { .. } => {
                ApiError::unsupported_media_type(&self.to_string())
            }
            _ => ApiError::bad_request(self.to_string()),
        }
    }
}

/// Decodes a protobuf body into the object's JSON: 400 for malformed bytes, 415 for a kind
/// (or envelope encoding) it has no table for.
pub fn decode(body: &[u8]) -> crate::error::Result<Value> {
    let mut decoder = Decoder::new(schema::schema());
    decode_object(body, &mut decoder).map_err(Error::into_api)
}

/// One enveloped object: the body, or a RawExtension holding a protobuf object.
fn decode_object(body: &[u8], decoder: &mut Decoder<'_>) -> Result<Value, Error> {
    let rest = body.strip_prefix(MAGIC).ok_or(Error::Magic)?;
    let unknown = k8s_pb::apimachinery::pkg::runtime::Unknown::decode(rest)?;
    let encoding = unknown.content_encoding.unwrap_or_default();
    if !encoding.is_empty() {
        return Err(Error::ContentEncoding(encoding));
    }
    let raw = unknown.raw.unwrap_or_default();
    match unknown.content_type.as_deref().unwrap_or_default() {
        "" | PROTOBUF => {}
        "application/json" => {
            return serde_json::from_slice(&raw).map_err(|e| Error::Field {
                path: String::new(),
                what: Malformed::Value(format!("raw bytes are not JSON: {e}")),
            });
        }
        other => return Err(Error::ContentType(other.to_string())),
    }
    let type_meta = unknown.type_meta.unwrap_or_default();
    let api_version = type_meta.api_version.unwrap_or_default();
    let kind = type_meta.kind.unwrap_or_default();
    let Some(id) = schema::schema().kind(&api_version, &kind) else {
        return Err(Error::UnknownKind { api_version, kind });
    };
    let fields = match decoder.message(id, &raw)? {
        Value::Object(fields) => fields,
        other => return Ok(other),
    };
    let mut object = Map::new();
    object.insert("apiVersion".into(), Value::String(api_version));
    object.insert("kind".into(), Value::String(kind));
    object.extend(fields);
    Ok(Value::Object(object))
}
