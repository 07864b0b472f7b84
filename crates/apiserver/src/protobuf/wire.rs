//! The generic protobuf wire-format walker: reads fields off the bytes with [`Reader`] and, with
//! the [`Schema`] table, builds the JSON object upstream's encoding gives ([`Decoder`]).
//! Unknown fields are skipped; malformed bytes give [`Malformed`] with the JSON path where they
//! were found; nesting is capped at [`MAX_DEPTH`] messages.

use base64::Engine;
use serde_json::{Map, Value};

use super::Error;
use super::schema::{Absent, Card, Field, FieldType, Message, MessageId, Schema};
use super::wellknown;

/// Messages nested deeper than this are refused (built-in objects nest about 12 deep; a
/// RawExtension holding a protobuf object continues the count).
pub const MAX_DEPTH: usize = 64;

/// What is wrong with the bytes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Malformed {
    #[error("truncated or overlong varint")]
    Varint,
    #[error("field key {0} is out of range")]
    Key(u64),
    #[error("field number 0")]
    TagZero,
    #[error("wire type {0} is not supported")]
    WireType(u64),
    #[error("length {0} runs past the end of the message")]
    Length(u64),
    #[error("truncated fixed-width value")]
    Fixed,
    #[error("wire type {got} where {expected} was expected")]
    Mismatch {
        got: &'static str,
        expected: &'static str,
    },
    #[error("messages nested deeper than {MAX_DEPTH}")]
    TooDeep,
    /// A special type's value cannot be formatted (time out of range, bad JSON, …).
    #[error("{0}")]
    Value(String),
}

/// The wire types Kubernetes uses (groups are not).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wire {
    Varint,
    Fixed64,
    Len,
    Fixed32,
}

impl Wire {
    fn name(self) -> &'static str {
        match self {
            Wire::Varint => "varint",
            Wire::Fixed64 => "fixed64",
            Wire::Len => "length-delimited",
            Wire::Fixed32 => "fixed32",
        }
    }
}

/// A cursor over one message's bytes.
pub struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        Reader { buf }
    }

    /// The next field's number and wire type, `None` at the end.
    pub fn key(&mut self) -> Result<Option<(u32, Wire)>, Malformed> {
        if self.buf.is_empty() {
            return Ok(None);
        }
        let key = self.varint()?;
        let tag = u32::try_from(key >> 3).map_err(|_| Malformed::Key(key))?;
        if tag == 0 {
            return Err(Malformed::TagZero);
        }
        let wire = match key & 7 {
            0 => Wire::Varint,
            1 => Wire::Fixed64,
            2 => Wire::Len,
            5 => Wire::Fixed32,
            other => return Err(Malformed::WireType(other)),
        };
        Ok(Some((tag, wire)))
    }

    pub fn varint(&mut self) -> Result<u64, Malformed> {
        prost::encoding::decode_varint(&mut self.buf).map_err(|_| Malformed::Varint)
    }

    /// A length-delimited value.
    pub fn bytes(&mut self) -> Result<&'a [u8], Malformed> {
        let len = self.varint()?;
        let n = usize::try_from(len)
            .ok()
            .filter(|n| *n <= self.buf.len())
            .ok_or(Malformed::Length(len))?;
        let (value, rest) = self.buf.split_at(n);
        self.buf = rest;
        Ok(value)
    }

    pub fn skip(&mut self, wire: Wire) -> Result<(), Malformed> {
        let width = match wire {
            Wire::Varint => return self.varint().map(drop),
            Wire::Len => return self.bytes().map(drop),
            Wire::Fixed64 => 8,
            Wire::Fixed32 => 4,
        };
        self.buf = self.buf.get(width..).ok_or(Malformed::Fixed)?;
        Ok(())
    }

    /// Checks that a field has the wire type its type needs.
    pub fn expect(&self, got: Wire, expected: Wire) -> Result<(), Malformed> {
        if got == expected {
            Ok(())
        } else {
            Err(Malformed::Mismatch {
                got: got.name(),
                expected: expected.name(),
            })
        }
    }

    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    /// The unread bytes.
    fn rest(&self) -> &'a [u8] {
        self.buf
    }
}

/// One step of the JSON path, for error messages.
#[derive(Debug)]
enum Seg<'s> {
    Field(&'s str),
    Index(usize),
    Key(String),
}

/// What a message's field collected while walking its bytes.
enum Slot {
    Empty,
    One(Value),
    Many(Vec<Value>),
    Map(Map<String, Value>),
}

/// Turns messages into JSON with the table; tracks depth and the path for errors.
pub struct Decoder<'s> {
    schema: &'s Schema,
    path: Vec<Seg<'s>>,
    depth: usize,
}

impl<'s> Decoder<'s> {
    pub fn new(schema: &'s Schema) -> Self {
        Decoder {
            schema,
            path: Vec::new(),
            depth: 0,
        }
    }

    /// An error at the current path.
    pub fn fail(&self, what: Malformed) -> Error {
        let mut path = String::new();
        for seg in &self.path {
            match seg {
                Seg::Field("") => {}
                Seg::Field(name) if path.is_empty() => path.push_str(name),
                Seg::Field(name) => {
                    path.push('.');
                    path.push_str(name);
                }
                Seg::Index(i) => path.push_str(&format!("[{i}]")),
                Seg::Key(k) => path.push_str(&format!("[{k:?}]")),
            }
        }
        Error::Field { path, what }
    }

    /// The JSON of one message.
    pub fn message(&mut self, id: MessageId, bytes: &[u8]) -> Result<Value, Error> {
        if self.depth >= MAX_DEPTH {
            return Err(self.fail(Malformed::TooDeep));
        }
        self.depth += 1;
        let message = self.schema.message(id);
        let value = match message.special {
            Some(special) => wellknown::decode(special, bytes, self),
            None => self.object(message, bytes),
        };
        self.depth -= 1;
        value
    }

    fn object(&mut self, message: &'s Message, bytes: &[u8]) -> Result<Value, Error> {
        let mut slots: Vec<Slot> = message.fields.iter().map(|_| Slot::Empty).collect();
        let mut r = Reader::new(bytes);
        while let Some((tag, wire)) = r.key().map_err(|m| self.fail(m))? {
            let Some(i) = message.fields.iter().position(|f| f.tag == tag) else {
                r.skip(wire).map_err(|m| self.fail(m))?;
                continue;
            };
            let field = &message.fields[i];
            // an inlined message adds no step: its fields sit in the parent's object
            self.path
                .push(Seg::Field(field.json.as_deref().unwrap_or("")));
            self.field(field, wire, &mut r, &mut slots[i])?;
            self.path.pop();
        }
        let mut object = Map::new();
        for (field, slot) in message.fields.iter().zip(slots) {
            let value = match slot {
                Slot::One(v) => {
                    let message = matches!(field.ty, FieldType::Message(_));
                    (message || field.keep_zero || !is_zero(&v)).then_some(v)
                }
                Slot::Many(items) if !items.is_empty() => Some(Value::Array(items)),
                Slot::Map(entries) if !entries.is_empty() => Some(Value::Object(entries)),
                _ => match field.absent {
                    Absent::Omit => None,
                    Absent::Null => Some(Value::Null),
                    Absent::Zero => Some(self.zero(field.ty)?),
                },
            };
            match (value, &field.json) {
                (Some(Value::Object(inlined)), None) => object.extend(inlined),
                (Some(v), Some(name)) => {
                    object.insert(name.clone(), v);
                }
                _ => {}
            }
        }
        Ok(Value::Object(object))
    }

    fn field(
        &mut self,
        field: &Field,
        wire: Wire,
        r: &mut Reader<'_>,
        slot: &mut Slot,
    ) -> Result<(), Error> {
        match field.card {
            Card::One => *slot = Slot::One(self.value(field.ty, wire, r)?),
            Card::Repeated => {
                let mut items = match std::mem::replace(slot, Slot::Empty) {
                    Slot::Many(items) => items,
                    _ => Vec::new(),
                };
                if wire == Wire::Len && field.ty.is_varint() {
                    // packed
                    let mut packed = Reader::new(r.bytes().map_err(|m| self.fail(m))?);
                    while !packed.is_empty() {
                        let v = packed.varint().map_err(|m| self.fail(m))?;
                        items.push(scalar(field.ty, v));
                    }
                } else {
                    self.path.push(Seg::Index(items.len()));
                    items.push(self.value(field.ty, wire, r)?);
                    self.path.pop();
                }
                *slot = Slot::Many(items);
            }
            Card::Map => {
                let mut entries = match std::mem::replace(slot, Slot::Empty) {
                    Slot::Map(entries) => entries,
                    _ => Map::new(),
                };
                r.expect(wire, Wire::Len).map_err(|m| self.fail(m))?;
                let entry = r.bytes().map_err(|m| self.fail(m))?;
                let (key, value) = self.entry(field.ty, entry)?;
                entries.insert(key, value);
                *slot = Slot::Map(entries);
            }
        }
        Ok(())
    }

    /// A map entry: key (string) at tag 1, value at tag 2; missing ones are zero values.
    fn entry(&mut self, ty: FieldType, bytes: &[u8]) -> Result<(String, Value), Error> {
        let mut r = Reader::new(bytes);
        let (mut key, mut value) = (String::new(), None);
        while let Some((tag, wire)) = r.key().map_err(|m| self.fail(m))? {
            if tag == 1 {
                r.expect(wire, Wire::Len).map_err(|m| self.fail(m))?;
                key = lossy(r.bytes().map_err(|m| self.fail(m))?);
                continue;
            }
            if tag == 2 {
                // decoded once the key is known, for the error path
                value = Some((wire, r.rest()));
            }
            r.skip(wire).map_err(|m| self.fail(m))?;
        }
        self.path.push(Seg::Key(key.clone()));
        let value = match value {
            Some((wire, rest)) => self.value(ty, wire, &mut Reader::new(rest))?,
            None => self.zero(ty)?,
        };
        self.path.pop();
        Ok((key, value))
    }

    /// The value of a scalar or message field.
    fn value(&mut self, ty: FieldType, wire: Wire, r: &mut Reader<'_>) -> Result<Value, Error> {
        let expected = if ty.is_varint() {
            Wire::Varint
        } else {
            Wire::Len
        };
        r.expect(wire, expected).map_err(|m| self.fail(m))?;
        Ok(match ty {
            FieldType::Int32 | FieldType::Int64 | FieldType::Bool => {
                scalar(ty, r.varint().map_err(|m| self.fail(m))?)
            }
            FieldType::String => Value::String(lossy(r.bytes().map_err(|m| self.fail(m))?)),
            FieldType::Bytes => {
                let b = r.bytes().map_err(|m| self.fail(m))?;
                Value::String(base64::engine::general_purpose::STANDARD.encode(b))
            }
            FieldType::Message(id) => {
                let b = r.bytes().map_err(|m| self.fail(m))?;
                self.message(id, b)?
            }
        })
    }

    /// Go's zero value of a type, as its JSON (for a message: that of the empty message).
    fn zero(&mut self, ty: FieldType) -> Result<Value, Error> {
        Ok(match ty {
            FieldType::Int32 | FieldType::Int64 | FieldType::Bool => scalar(ty, 0),
            FieldType::String | FieldType::Bytes => Value::String(String::new()),
            FieldType::Message(id) => self.message(id, &[])?,
        })
    }
}

/// A varint as Go reads it into the field's type (int32 truncates, bool is non-zero).
pub fn scalar(ty: FieldType, v: u64) -> Value {
    match ty {
        FieldType::Bool => Value::Bool(v != 0),
        FieldType::Int32 => Value::from(v as i32),
        _ => Value::from(v as i64),
    }
}

/// Go's JSON encoder turns invalid UTF-8 into U+FFFD, so strings are read the same way.
pub fn lossy(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// What `omitempty` leaves out.
fn is_zero(v: &Value) -> bool {
    match v {
        Value::String(s) => s.is_empty(),
        Value::Number(n) => n.as_i64() == Some(0),
        Value::Bool(b) => !b,
        _ => false,
    }
}
