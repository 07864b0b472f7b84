//! The table of Kubernetes protobuf messages the decoder walks: for each message of the served
//! packages, its fields by tag with their JSON names, types and cardinality. The table is
//! `schema.txt` beside this file, written by `scripts/gen-protobuf-schema` (its header explains
//! the format) and parsed once on first use.

use std::collections::HashMap;
use std::sync::LazyLock;

/// Index of a message in [`Schema::message`].
pub type MessageId = usize;

/// All messages of the served packages.
#[derive(Debug)]
pub struct Schema {
    messages: Vec<Message>,
    packages: Vec<Package>,
}

/// One package (`core`, `apps`, `meta`, …) and the apiVersion its kinds are served under.
#[derive(Debug)]
struct Package {
    name: String,
    api_version: Option<String>,
    by_name: HashMap<String, MessageId>,
}

/// One message: its fields in Go struct order, or a hand-formatted special type.
#[derive(Debug)]
pub struct Message {
    pub special: Option<Special>,
    /// Whether it is a top-level kind (carries TypeMeta in Go).
    pub kind: bool,
    pub fields: Vec<Field>,
}

#[derive(Debug)]
pub struct Field {
    pub tag: u32,
    /// The JSON name; `None` for an inlined message whose fields join the parent's object.
    pub json: Option<String>,
    pub ty: FieldType,
    pub card: Card,
    /// A zero scalar present on the wire stays in the JSON (Go pointer or no `omitempty`);
    /// without it zero scalars are left out, as Go's `omitempty` does for value fields.
    pub keep_zero: bool,
    /// What the JSON holds when the field is absent from the wire (or an empty list or map).
    pub absent: Absent,
}

/// What Go's JSON encoder prints for a field the wire did not carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Absent {
    /// Nothing: `omitempty`.
    Omit,
    /// `null`: a nil pointer, slice or map without `omitempty`.
    Null,
    /// The zero value: a value type without `omitempty`, or a value struct (which `omitempty`
    /// never leaves out).
    Zero,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldType {
    String,
    /// `[]byte`, base64 in JSON.
    Bytes,
    Int32,
    Int64,
    Bool,
    Message(MessageId),
}

impl FieldType {
    /// Scalars encoded as varints (the ones a packed repeated field can hold).
    pub fn is_varint(self) -> bool {
        matches!(self, FieldType::Int32 | FieldType::Int64 | FieldType::Bool)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Card {
    One,
    Repeated,
    /// `map<string, T>`: entries are messages with the key at tag 1 and the value at tag 2.
    Map,
}

/// Messages whose Go type marshals itself to JSON; formatted in [`super::wellknown`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Special {
    /// metav1.Time: RFC 3339 in seconds, `null` when zero.
    Time,
    /// metav1.MicroTime: RFC 3339 with microseconds, `null` when zero.
    MicroTime,
    /// metav1.Duration: a Go duration string.
    Duration,
    /// runtime.RawExtension, metav1.FieldsV1: raw bytes holding JSON.
    Json,
    /// resource.Quantity: its string.
    Quantity,
    /// intstr.IntOrString: a number or a string.
    IntOrString,
    /// A Go named string slice (ExtraValue, Verbs): `repeated string items = 1` as a JSON array.
    Array,
}

static SCHEMA: LazyLock<Schema> = LazyLock::new(|| {
    Schema::parse(include_str!("schema.txt"))
        .unwrap_or_else(|e| panic!("protobuf/schema.txt is generated and parsed by tests: {e}"))
});

/// The embedded table.
pub fn schema() -> &'static Schema {
    &SCHEMA
}

impl Schema {
    pub fn message(&self, id: MessageId) -> &Message {
        &self.messages[id]
    }

    /// How many messages the table has (ids are `0..message_count()`).
    pub fn message_count(&self) -> usize {
        self.messages.len()
    }

    /// The message of a package by name (`("core", "ConfigMap")`).
    pub fn find(&self, package: &str, name: &str) -> Option<MessageId> {
        let p = self.packages.iter().find(|p| p.name == package)?;
        p.by_name.get(name).copied()
    }

    /// The message for a body's TypeMeta: a kind of the package served under `api_version`,
    /// or one of meta.k8s.io's kinds every group version accepts (DeleteOptions, Status, …).
    pub fn kind(&self, api_version: &str, kind: &str) -> Option<MessageId> {
        let package = self
            .packages
            .iter()
            .find(|p| p.api_version.as_deref() == Some(api_version))?;
        let is_kind = |id: &MessageId| self.messages[*id].kind;
        package
            .by_name
            .get(kind)
            .copied()
            .filter(is_kind)
            .or_else(|| self.find("meta", kind).filter(is_kind))
    }

    /// Parses the table; errors name the line.
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut packages: Vec<Package> = Vec::new();
        let mut messages = Vec::new();
        // pass 1: packages and message names, so fields may refer to messages defined later
        for (n, line) in lines(text) {
            if let Some(rest) = line.strip_prefix('@') {
                let mut words = rest.split(' ');
                let name = words.next().unwrap_or_default().to_string();
                let api_version = words.next().filter(|v| *v != "-").map(str::to_string);
                packages.push(Package {
                    name,
                    api_version,
                    by_name: HashMap::new(),
                });
            } else if let Some(rest) = line.strip_prefix('=') {
                let package = packages
                    .last_mut()
                    .ok_or(format!("line {n}: message before any package"))?;
                let mut words = rest.split(' ');
                let name = words.next().unwrap_or_default();
                let mut message = Message {
                    special: None,
                    kind: false,
                    fields: Vec::new(),
                };
                for word in words {
                    match word {
                        "K" => message.kind = true,
                        marker => message.special = Some(special(marker, n)?),
                    }
                }
                package.by_name.insert(name.to_string(), messages.len());
                messages.push(message);
            }
        }
        // pass 2: fields
        let mut schema = Schema {
            messages: Vec::new(),
            packages,
        };
        let (mut package, mut current) = (None::<usize>, None::<MessageId>);
        for (n, line) in lines(text) {
            if line.starts_with('@') {
                package = Some(package.map_or(0, |i| i + 1));
            } else if line.starts_with('=') {
                current = Some(current.map_or(0, |i| i + 1));
            } else {
                let (Some(package), Some(id)) = (package, current) else {
                    return Err(format!("line {n}: field before any message"));
                };
                let field = schema
                    .field(package, line)
                    .map_err(|e| format!("line {n}: {e}"))?;
                messages[id].fields.push(field);
            }
        }
        schema.messages = messages;
        Ok(schema)
    }

    /// Parses `tag json type [flags]`, resolving message names within `package` first.
    fn field(&self, package: usize, line: &str) -> Result<Field, String> {
        let words: Vec<&str> = line.split(' ').collect();
        let [tag, json, ty, rest @ ..] = words.as_slice() else {
            return Err(format!("field {line:?} has too few words"));
        };
        let tag: u32 = tag.parse().map_err(|_| format!("bad tag {tag:?}"))?;
        let flags = rest.first().copied().unwrap_or("");
        let (card, ty) = if let Some(t) = ty.strip_prefix("[]") {
            (Card::Repeated, t)
        } else if let Some(t) = ty.strip_prefix("{}") {
            (Card::Map, t)
        } else {
            (Card::One, *ty)
        };
        let ty = match ty {
            "s" => FieldType::String,
            "y" => FieldType::Bytes,
            "i" => FieldType::Int32,
            "l" => FieldType::Int64,
            "b" => FieldType::Bool,
            name => {
                let found = match name.split_once('.') {
                    Some((pkg, msg)) => self.find(pkg, msg),
                    None => self.packages[package].by_name.get(name).copied(),
                };
                FieldType::Message(found.ok_or(format!("unknown message {name:?}"))?)
            }
        };
        let inline = flags.contains('^');
        if inline && (card != Card::One || !matches!(ty, FieldType::Message(_))) {
            return Err("only a single message field can be inlined".into());
        }
        Ok(Field {
            tag,
            json: (!inline).then(|| json.to_string()),
            ty,
            card,
            keep_zero: flags.contains('+'),
            absent: match (flags.contains('n'), flags.contains('z')) {
                (false, false) => Absent::Omit,
                (true, false) => Absent::Null,
                (false, true) if card == Card::One => Absent::Zero,
                _ => return Err(format!("field {line:?} has conflicting flags")),
            },
        })
    }
}

fn lines(text: &str) -> impl Iterator<Item = (usize, &str)> {
    text.lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l.trim_end()))
        .filter(|(_, l)| !l.is_empty() && !l.starts_with('#'))
}

fn special(marker: &str, line: usize) -> Result<Special, String> {
    Ok(match marker {
        "!time" => Special::Time,
        "!microtime" => Special::MicroTime,
        "!duration" => Special::Duration,
        "!json" => Special::Json,
        "!quantity" => Special::Quantity,
        "!intorstring" => Special::IntOrString,
        "!array" => Special::Array,
        other => return Err(format!("line {line}: unknown marker {other:?}")),
    })
}
