//! Protobuf responses: the JSON of a built-in object written as upstream's protobuf encoding,
//! walking the same [`Schema`] table as the decoder. Each field the JSON holds is written with its
//! tag (inlined structs as the nested message they are on the wire, repeated scalars unpacked
//! as proto2 writes them, map entries sorted by key); members the table does not name have no
//! tag and are left out, as they would be in a Go struct.
//!
//! The forms a response takes:
//! - [`object`]: `k8s\0` then a `runtime.Unknown` holding the TypeMeta and the message;
//! - [`watch_event`]: one frame of a watch stream: a 4-byte big-endian length, then a
//!   `metav1.WatchEvent` (no magic, no envelope) whose `object` holds an enveloped object.

use prost::Message as _;
use prost::encoding::{WireType, encode_key, encode_varint};
use serde_json::{Map, Value};

use super::schema::{Card, Field, FieldType, MessageId, schema};
use super::wire::Malformed;
use super::{Error, MAGIC, order, wellknown};

/// Whether objects of `kind` served as `api_version` can be written as protobuf.
pub fn supports(api_version: &str, kind: &str) -> bool {
    schema().kind(api_version, kind).is_some()
}

/// An object of a built-in kind as a protobuf response body.
pub fn object(value: &Value) -> Result<Vec<u8>, Error> {
    let Value::Object(map) = value else {
        return Err(Error::Field {
            path: String::new(),
            what: Malformed::Value("not an object".into()),
        });
    };
    let text = |name: &str| map.get(name).and_then(Value::as_str).unwrap_or_default();
    let Some(id) = order::kind_of(map) else {
        return Err(Error::UnknownKind {
            api_version: text("apiVersion").to_string(),
            kind: text("kind").to_string(),
        });
    };
    let mut raw = Vec::with_capacity(256);
    let mut path = Vec::new();
    fields(id, map, &mut raw, &mut path).map_err(|what| Error::Field {
        path: path.join("."),
        what,
    })?;
    let unknown = k8s_pb::apimachinery::pkg::runtime::Unknown {
        type_meta: Some(k8s_pb::apimachinery::pkg::runtime::TypeMeta {
            api_version: Some(text("apiVersion").to_string()),
            kind: Some(text("kind").to_string()),
        }),
        raw: Some(raw),
        content_encoding: Some(String::new()),
        content_type: Some(String::new()),
    };
    let mut out = Vec::with_capacity(MAGIC.len() + unknown.encoded_len());
    out.extend_from_slice(MAGIC);
    unknown.encode_raw(&mut out);
    Ok(out)
}

/// One frame of a protobuf watch stream: `event_type` (`ADDED`, …) and its object.
pub fn watch_event(event_type: &str, value: &Value) -> Result<Vec<u8>, Error> {
    let event = k8s_pb::apimachinery::pkg::apis::meta::v1::WatchEvent {
        r#type: Some(event_type.to_string()),
        object: Some(k8s_pb::apimachinery::pkg::runtime::RawExtension {
            raw: Some(object(value)?),
        }),
    };
    let len = event.encoded_len();
    let mut out = Vec::with_capacity(4 + len);
    out.extend_from_slice(&u32::try_from(len).unwrap_or(u32::MAX).to_be_bytes());
    event.encode_raw(&mut out);
    Ok(out)
}

/// The fields of message `id` found in `map`; `path` names where an error is.
fn fields(
    id: MessageId,
    map: &Map<String, Value>,
    out: &mut Vec<u8>,
    path: &mut Vec<&'static str>,
) -> Result<(), Malformed> {
    for field in &schema().message(id).fields {
        match (&field.json, field.ty) {
            // an inlined struct: a nested message on the wire, its fields in this object
            (None, FieldType::Message(inner)) => {
                let mut sub = Vec::new();
                fields(inner, map, &mut sub, path)?;
                length_delimited(field.tag, &sub, out);
            }
            (None, _) => {}
            (Some(name), _) => {
                let Some(value) = map.get(name).filter(|v| !v.is_null()) else {
                    continue;
                };
                path.push(name);
                self::field(field, value, out, path)?;
                path.pop();
            }
        }
    }
    Ok(())
}

fn field(
    field: &'static Field,
    value: &Value,
    out: &mut Vec<u8>,
    path: &mut Vec<&'static str>,
) -> Result<(), Malformed> {
    match (field.card, value) {
        (Card::One, v) => self::value(field.tag, field.ty, v, out, path),
        (Card::Repeated, Value::Array(items)) => {
            for item in items {
                self::value(field.tag, field.ty, item, out, path)?;
            }
            Ok(())
        }
        (Card::Map, Value::Object(entries)) => {
            for (key, v) in entries {
                let mut entry = Vec::new();
                length_delimited(1, key.as_bytes(), &mut entry);
                if !v.is_null() {
                    self::value(2, field.ty, v, &mut entry, path)?;
                }
                length_delimited(field.tag, &entry, out);
            }
            Ok(())
        }
        (Card::Repeated, _) => Err(expected("an array", value)),
        (Card::Map, _) => Err(expected("an object", value)),
    }
}

/// One scalar or message value at `tag`.
fn value(
    tag: u32,
    ty: FieldType,
    v: &Value,
    out: &mut Vec<u8>,
    path: &mut Vec<&'static str>,
) -> Result<(), Malformed> {
    match ty {
        FieldType::String => {
            let s = v.as_str().ok_or_else(|| expected("a string", v))?;
            length_delimited(tag, s.as_bytes(), out);
        }
        FieldType::Bytes => {
            let s = v.as_str().ok_or_else(|| expected("base64 bytes", v))?;
            let bytes = base64::Engine::decode(&base64::engine::general_purpose::STANDARD, s)
                .map_err(|e| Malformed::Value(format!("bytes are not base64: {e}")))?;
            length_delimited(tag, &bytes, out);
        }
        FieldType::Int32 | FieldType::Int64 => {
            let n = integer(v)?;
            let n = if ty == FieldType::Int32 {
                i64::from(i32::try_from(n).map_err(|_| expected("an int32", v))?)
            } else {
                n
            };
            varint_field(tag, n as u64, out);
        }
        FieldType::Bool => {
            let b = v.as_bool().ok_or_else(|| expected("a boolean", v))?;
            varint_field(tag, u64::from(b), out);
        }
        FieldType::Message(id) => {
            let mut sub = Vec::new();
            match (schema().message(id).special, v) {
                (Some(special), v) => wellknown::encode(special, v, &mut sub)?,
                (None, Value::Object(map)) => fields(id, map, &mut sub, path)?,
                (None, v) => return Err(expected("an object", v)),
            }
            length_delimited(tag, &sub, out);
        }
    }
    Ok(())
}

/// A JSON number as Go reads it into an integer field (whole floats like `2.0` included).
fn integer(v: &Value) -> Result<i64, Malformed> {
    v.as_i64()
        .or_else(|| {
            v.as_f64()
                .filter(|f| f.fract() == 0.0 && f.abs() < 9.0e18)
                .map(|f| f as i64)
        })
        .ok_or_else(|| expected("an integer", v))
}

pub(super) fn expected(what: &str, got: &Value) -> Malformed {
    Malformed::Value(format!("expected {what}, found {got}"))
}

pub(super) fn length_delimited(tag: u32, bytes: &[u8], out: &mut Vec<u8>) {
    encode_key(tag, WireType::LengthDelimited, out);
    encode_varint(bytes.len() as u64, out);
    out.extend_from_slice(bytes);
}

pub(super) fn varint_field(tag: u32, v: u64, out: &mut Vec<u8>) {
    encode_key(tag, WireType::Varint, out);
    encode_varint(v, out);
}
