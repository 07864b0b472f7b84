//! The Swagger 2.0 document as protobuf: gnostic's `openapi.v2.Document` message, which is what
//! kubectl asks `/openapi/v2` for (`application/com.github.proto-openapi.spec.v2@v1.0+protobuf`)
//! and the only form it can read there: client-go unmarshals the body as protobuf, with no JSON
//! fallback.
//!
//! Field numbers follow gnostic's `openapiv2/OpenAPIv2.proto`. Values of `Any` fields (vendor
//! extensions, `default`, `enum`, `example`) travel as YAML text; JSON text is valid YAML, so
//! they are written as compact JSON, which kubectl's YAML decoder reads back unchanged.

use serde_json::{Map, Value};

/// A protobuf message being written: fields are appended in call order.
#[derive(Default)]
struct Msg(Vec<u8>);

impl Msg {
    fn varint(&mut self, mut value: u64) {
        while value >= 0x80 {
            self.0.push((value as u8) | 0x80);
            value >>= 7;
        }
        self.0.push(value as u8);
    }

    fn key(&mut self, field: u32, wire_type: u8) {
        self.varint(u64::from(field) << 3 | u64::from(wire_type));
    }

    fn bytes(&mut self, field: u32, bytes: &[u8]) {
        self.key(field, 2);
        self.varint(bytes.len() as u64);
        self.0.extend_from_slice(bytes);
    }

    /// A string field; proto3 omits empty strings.
    fn string(&mut self, field: u32, value: &str) {
        if !value.is_empty() {
            self.bytes(field, value.as_bytes());
        }
    }

    fn bool(&mut self, field: u32, value: bool) {
        if value {
            self.key(field, 0);
            self.varint(1);
        }
    }

    fn int64(&mut self, field: u32, value: i64) {
        if value != 0 {
            self.key(field, 0);
            self.varint(value as u64);
        }
    }

    fn double(&mut self, field: u32, value: f64) {
        if value != 0.0 {
            self.key(field, 1);
            self.0.extend_from_slice(&value.to_le_bytes());
        }
    }

    fn message(&mut self, field: u32, child: Msg) {
        self.bytes(field, &child.0);
    }

    /// A sub-message built by `fill`.
    fn with(&mut self, field: u32, fill: impl FnOnce(&mut Msg)) {
        let mut child = Msg::default();
        fill(&mut child);
        self.message(field, child);
    }

    fn str_of(&mut self, field: u32, object: &Map<String, Value>, key: &str) {
        if let Some(Value::String(s)) = object.get(key) {
            self.string(field, s);
        }
    }

    fn strings(&mut self, field: u32, value: Option<&Value>) {
        for s in value.and_then(Value::as_array).into_iter().flatten() {
            if let Some(s) = s.as_str() {
                self.bytes(field, s.as_bytes());
            }
        }
    }

    /// gnostic's `Any { yaml = 2 }`.
    fn any(&mut self, field: u32, value: &Value) {
        let text = serde_json::to_string(value).unwrap_or_default();
        self.with(field, |any| any.string(2, &text));
    }

    /// Repeated `NamedAny { name = 1; value = 2 }` for every `x-` key of `object`.
    fn vendor_extensions(&mut self, field: u32, object: &Map<String, Value>) {
        for (key, value) in object.iter().filter(|(k, _)| k.starts_with("x-")) {
            self.with(field, |named| {
                named.string(1, key);
                named.any(2, value);
            });
        }
    }
}

/// Encodes a Swagger 2.0 document (as built by [`crate::v2`]) as `openapi.v2.Document`.
pub(crate) fn encode_document(doc: &Value) -> Vec<u8> {
    let empty = Map::new();
    let doc = doc.as_object().unwrap_or(&empty);
    let mut out = Msg::default();
    out.str_of(1, doc, "swagger");
    if let Some(Value::Object(info)) = doc.get("info") {
        out.with(2, |m| {
            m.str_of(1, info, "title");
            m.str_of(2, info, "version");
            m.str_of(3, info, "description");
        });
    }
    if let Some(Value::Object(paths)) = doc.get("paths") {
        out.with(8, |m| {
            for (path, item) in paths {
                m.with(2, |named| {
                    named.string(1, path);
                    named.with(2, |p| path_item(p, item));
                });
            }
        });
    }
    if let Some(Value::Object(definitions)) = doc.get("definitions") {
        out.with(9, |m| {
            for (name, schema) in definitions {
                m.with(1, |named| {
                    named.string(1, name);
                    named.with(2, |s| schema_message(s, schema));
                });
            }
        });
    }
    for requirement in doc
        .get("security")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        out.with(12, |m| security_requirement(m, requirement));
    }
    if let Some(Value::Object(definitions)) = doc.get("securityDefinitions") {
        out.with(13, |m| {
            for (name, definition) in definitions {
                m.with(1, |named| {
                    named.string(1, name);
                    named.with(2, |item| security_definition(item, definition));
                });
            }
        });
    }
    out.vendor_extensions(16, doc);
    out.0
}

fn security_requirement(m: &mut Msg, requirement: &Value) {
    for (name, scopes) in requirement.as_object().into_iter().flatten() {
        m.with(1, |named| {
            named.string(1, name);
            named.with(2, |array| array.strings(1, Some(scopes)));
        });
    }
}

/// `SecurityDefinitionsItem`; only the API-key kind (`api_key_security = 2`) is written.
fn security_definition(item: &mut Msg, definition: &Value) {
    let Some(definition) = definition.as_object() else {
        return;
    };
    item.with(2, |key| {
        key.str_of(1, definition, "type");
        key.str_of(2, definition, "name");
        key.str_of(3, definition, "in");
        key.str_of(4, definition, "description");
        key.vendor_extensions(5, definition);
    });
}

/// `PathItem`: get 2, put 3, post 4, delete 5, options 6, head 7, patch 8, parameters 9.
fn path_item(m: &mut Msg, item: &Value) {
    let Some(item) = item.as_object() else {
        return;
    };
    for (method, field) in [
        ("get", 2),
        ("put", 3),
        ("post", 4),
        ("delete", 5),
        ("options", 6),
        ("head", 7),
        ("patch", 8),
    ] {
        if let Some(op) = item.get(method) {
            m.with(field, |o| operation(o, op));
        }
    }
    for param in item
        .get("parameters")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        m.with(9, |p| parameters_item(p, param));
    }
    m.vendor_extensions(10, item);
}

fn operation(m: &mut Msg, op: &Value) {
    let Some(op) = op.as_object() else {
        return;
    };
    m.strings(1, op.get("tags"));
    m.str_of(2, op, "summary");
    m.str_of(3, op, "description");
    m.str_of(5, op, "operationId");
    m.strings(6, op.get("produces"));
    m.strings(7, op.get("consumes"));
    for param in op
        .get("parameters")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        m.with(8, |p| parameters_item(p, param));
    }
    if let Some(Value::Object(responses)) = op.get("responses") {
        m.with(9, |r| {
            for (code, response) in responses {
                r.with(1, |named| {
                    named.string(1, code);
                    // ResponseValue { response = 1 } → Response
                    named.with(2, |value| {
                        value.with(1, |resp| response_message(resp, response))
                    });
                });
            }
        });
    }
    m.strings(10, op.get("schemes"));
    if let Some(Value::Bool(deprecated)) = op.get("deprecated") {
        m.bool(11, *deprecated);
    }
    m.vendor_extensions(13, op);
}

fn response_message(m: &mut Msg, response: &Value) {
    let Some(response) = response.as_object() else {
        return;
    };
    m.str_of(1, response, "description");
    if let Some(schema) = response.get("schema") {
        // SchemaItem { schema = 1 }
        m.with(2, |item| item.with(1, |s| schema_message(s, schema)));
    }
    m.vendor_extensions(5, response);
}

/// `ParametersItem`: a `$ref` (json_reference = 2) or a parameter (parameter = 1), which is a
/// body parameter (1) or a non-body one (2: header 1, formData 2, query 3, path 4).
fn parameters_item(m: &mut Msg, param: &Value) {
    let Some(param) = param.as_object() else {
        return;
    };
    if param.contains_key("$ref") {
        m.with(2, |r| {
            r.str_of(1, param, "$ref");
            r.str_of(2, param, "description");
        });
        return;
    }
    let location = param.get("in").and_then(Value::as_str).unwrap_or_default();
    m.with(1, |p| {
        if location == "body" {
            p.with(1, |body| {
                body.str_of(1, param, "description");
                body.str_of(2, param, "name");
                body.str_of(3, param, "in");
                body.bool(4, flag(param, "required"));
                if let Some(schema) = param.get("schema") {
                    body.with(5, |s| schema_message(s, schema));
                }
                body.vendor_extensions(6, param);
            });
            return;
        }
        p.with(2, |non_body| {
            let variant = match location {
                "header" => 1,
                "formData" => 2,
                "path" => 4,
                _ => 3,
            };
            non_body.with(variant, |sub| simple_parameter(sub, param, variant));
        });
    });
}

/// The four non-body parameter messages share their leading fields; type, format and
/// uniqueItems sit one field later where `allow_empty_value` exists (query and formData).
fn simple_parameter(m: &mut Msg, param: &Map<String, Value>, variant: u32) {
    let shift = u32::from(matches!(variant, 2 | 3));
    m.bool(1, flag(param, "required"));
    m.str_of(2, param, "in");
    m.str_of(3, param, "description");
    m.str_of(4, param, "name");
    m.str_of(5 + shift, param, "type");
    m.str_of(6 + shift, param, "format");
    m.bool(19 + shift, flag(param, "uniqueItems"));
    let extensions_field = if shift == 1 { 23 } else { 22 };
    m.vendor_extensions(extensions_field, param);
}

fn flag(object: &Map<String, Value>, key: &str) -> bool {
    object.get(key).and_then(Value::as_bool).unwrap_or(false)
}

/// gnostic's `Schema` message.
fn schema_message(m: &mut Msg, schema: &Value) {
    let Some(schema) = schema.as_object() else {
        return;
    };
    m.str_of(1, schema, "$ref");
    m.str_of(2, schema, "format");
    m.str_of(3, schema, "title");
    m.str_of(4, schema, "description");
    if let Some(default) = schema.get("default") {
        m.any(5, default);
    }
    let number = |key: &str| schema.get(key).and_then(Value::as_f64).unwrap_or(0.0);
    let integer = |key: &str| schema.get(key).and_then(Value::as_i64).unwrap_or(0);
    m.double(6, number("multipleOf"));
    m.double(7, number("maximum"));
    m.bool(8, flag(schema, "exclusiveMaximum"));
    m.double(9, number("minimum"));
    m.bool(10, flag(schema, "exclusiveMinimum"));
    m.int64(11, integer("maxLength"));
    m.int64(12, integer("minLength"));
    m.str_of(13, schema, "pattern");
    m.int64(14, integer("maxItems"));
    m.int64(15, integer("minItems"));
    m.bool(16, flag(schema, "uniqueItems"));
    m.int64(17, integer("maxProperties"));
    m.int64(18, integer("minProperties"));
    m.strings(19, schema.get("required"));
    for value in schema
        .get("enum")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        m.any(20, value);
    }
    match schema.get("additionalProperties") {
        Some(Value::Bool(allowed)) => m.with(21, |a| {
            // oneof: boolean = 2 (written even when false, to keep the choice)
            a.key(2, 0);
            a.varint(u64::from(*allowed));
        }),
        Some(sub @ Value::Object(_)) => m.with(21, |a| a.with(1, |s| schema_message(s, sub))),
        _ => {}
    }
    match schema.get("type") {
        Some(Value::String(ty)) => m.with(22, |t| t.string(1, ty)),
        Some(types @ Value::Array(_)) => m.with(22, |t| t.strings(1, Some(types))),
        _ => {}
    }
    match schema.get("items") {
        Some(Value::Array(list)) => m.with(23, |items| {
            for sub in list {
                items.with(1, |s| schema_message(s, sub));
            }
        }),
        Some(sub @ Value::Object(_)) => {
            m.with(23, |items| items.with(1, |s| schema_message(s, sub)))
        }
        _ => {}
    }
    for sub in schema
        .get("allOf")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        m.with(24, |s| schema_message(s, sub));
    }
    if let Some(Value::Object(properties)) = schema.get("properties") {
        m.with(25, |props| {
            for (name, sub) in properties {
                props.with(1, |named| {
                    named.string(1, name);
                    named.with(2, |s| schema_message(s, sub));
                });
            }
        });
    }
    m.str_of(26, schema, "discriminator");
    m.bool(27, flag(schema, "readOnly"));
    if let Some(example) = schema.get("example") {
        m.any(30, example);
    }
    m.vendor_extensions(31, schema);
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn varints_and_strings_use_protobuf_wire_format() {
        let mut m = Msg::default();
        m.string(1, "2.0");
        m.int64(11, 300);
        assert_eq!(m.0, vec![0x0a, 3, b'2', b'.', b'0', 0x58, 0xac, 0x02]);
    }

    #[test]
    fn a_document_starts_with_its_swagger_version() {
        let bytes = encode_document(&json!({"swagger": "2.0", "info": {"title": "K"}}));
        assert_eq!(&bytes[..5], &[0x0a, 3, b'2', b'.', b'0']);
        assert_eq!(&bytes[5..], &[0x12, 3, 0x0a, 1, b'K']);
    }
}
