//! JSON written in the Go structs' field order, as upstream's encoder writes built-in kinds:
//! `kind`, `apiVersion` (TypeMeta comes first), then each field in its struct's order (the
//! [`Schema`] table keeps it), with inlined structs' fields in the inlining field's place. Map
//! keys are sorted (Go's encoder sorts them; serde_json's maps already are). Members the table
//! does not name follow in sorted order, and objects of kinds it does not know (custom
//! resources, which upstream handles as unstructured maps) are written sorted, as upstream.
//!
//! Only the order changes: every member of the value is written as it is.

use std::collections::HashMap;
use std::sync::LazyLock;

use serde_json::{Map, Value};

use super::schema::{Card, FieldType, MessageId, Schema, schema};

/// One JSON member of a message, inlined messages expanded.
struct Member {
    name: &'static str,
    ty: FieldType,
    card: Card,
}

/// Each message's members in Go order, and each name's place in that order.
struct Flat {
    members: Vec<Member>,
    places: HashMap<&'static str, usize, foldhash::fast::FixedState>,
}

static FLAT: LazyLock<Vec<Flat>> = LazyLock::new(|| {
    let schema = schema();
    (0..schema.message_count())
        .map(|id| {
            let mut members = Vec::new();
            flatten(schema, id, &mut members);
            let places = members
                .iter()
                .enumerate()
                .map(|(i, m)| (m.name, i))
                .collect();
            Flat { members, places }
        })
        .collect()
});

fn flatten(schema: &'static Schema, id: MessageId, out: &mut Vec<Member>) {
    for field in &schema.message(id).fields {
        match (&field.json, field.ty) {
            (Some(name), ty) => out.push(Member {
                name,
                ty,
                card: field.card,
            }),
            (None, FieldType::Message(inner)) => flatten(schema, inner, out),
            // the table's parser allows only messages to be inlined
            (None, _) => {}
        }
    }
}

/// `value` as JSON in Go order.
pub fn to_vec(value: &Value) -> Vec<u8> {
    let mut out = Vec::with_capacity(256);
    write(value, &mut out);
    out
}

/// Appends `value` as JSON in Go order.
pub fn write(value: &Value, out: &mut Vec<u8>) {
    Writer { out, skip: None }.top(value);
}

/// Appends an object as stored: in Go order, without `metadata.resourceVersion` (see
/// [`crate::storage::encode`]).
pub fn write_stored(value: &Value, out: &mut Vec<u8>) {
    Writer {
        out,
        skip: Some(("metadata", "resourceVersion")),
    }
    .top(value);
}

/// The message of a top-level object of a kind the table knows.
pub fn kind_of(map: &Map<String, Value>) -> Option<MessageId> {
    let api_version = map.get("apiVersion")?.as_str()?;
    let kind = map.get("kind")?.as_str()?;
    schema().kind(api_version, kind)
}

struct Writer<'o> {
    out: &'o mut Vec<u8>,
    /// A member of a top-level member left out: `(outer, inner)`.
    skip: Option<(&'static str, &'static str)>,
}

impl Writer<'_> {
    fn top(&mut self, value: &Value) {
        let Value::Object(map) = value else {
            return self.plain(value);
        };
        let Some(id) = kind_of(map) else {
            return self.unknown(map);
        };
        self.out.push(b'{');
        let mut first = true;
        for name in ["kind", "apiVersion"] {
            if let Some(v) = map.get(name) {
                self.key(&mut first, name);
                self.plain(v);
            }
        }
        let skip = self.skip.take();
        self.members(map, id, &mut first, skip, &["kind", "apiVersion"]);
        self.out.push(b'}');
    }

    /// An object of no known kind: sorted, as serde_json writes it, but `skip` still applies.
    fn unknown(&mut self, map: &Map<String, Value>) {
        let Some((outer, inner)) = self.skip.take() else {
            // writing into a Vec cannot fail
            let _ = serde_json::to_writer(&mut *self.out, map);
            return;
        };
        self.out.push(b'{');
        let mut first = true;
        for (k, v) in map {
            self.key(&mut first, k);
            match v {
                Value::Object(m) if k == outer => {
                    self.out.push(b'{');
                    let mut first = true;
                    for (k, v) in m.iter().filter(|(k, _)| *k != inner) {
                        self.key(&mut first, k);
                        self.plain(v);
                    }
                    self.out.push(b'}');
                }
                _ => self.plain(v),
            }
        }
        self.out.push(b'}');
    }

    /// The members of `map` as message `id`, after `first` and leaving out `written`. The
    /// map's keys are looked up in the message (a pod's spec sets a dozen of its forty fields),
    /// not the message's fields in the map.
    fn members(
        &mut self,
        map: &Map<String, Value>,
        id: MessageId,
        first: &mut bool,
        skip: Option<(&'static str, &'static str)>,
        written: &[&str],
    ) {
        let flat = &FLAT[id];
        let mut known = Vec::with_capacity(map.len());
        let mut unknown = false;
        for (k, v) in map {
            match flat.places.get(k.as_str()) {
                _ if written.contains(&k.as_str()) => {}
                Some(&place) => known.push((place, v)),
                None => unknown = true,
            }
        }
        known.sort_unstable_by_key(|(place, _)| *place);
        for (place, v) in known {
            let m = &flat.members[place];
            self.key(first, m.name);
            match (skip, v, m.ty) {
                (Some((outer, inner)), Value::Object(inner_map), FieldType::Message(inner_id))
                    if outer == m.name && m.card == Card::One =>
                {
                    self.object(inner_map, inner_id, Some(inner));
                }
                _ => self.typed(v, m.ty, m.card),
            }
        }
        if unknown {
            for (k, v) in map {
                if !flat.places.contains_key(k.as_str()) && !written.contains(&k.as_str()) {
                    self.key(first, k);
                    self.plain(v);
                }
            }
        }
    }

    /// A message's object, leaving out member `skip`.
    fn object(&mut self, map: &Map<String, Value>, id: MessageId, skip: Option<&str>) {
        self.out.push(b'{');
        let mut first = true;
        match skip {
            Some(name) => self.members(map, id, &mut first, None, &[name]),
            None => self.members(map, id, &mut first, None, &[]),
        }
        self.out.push(b'}');
    }

    fn typed(&mut self, value: &Value, ty: FieldType, card: Card) {
        match (card, value) {
            (Card::One, v) => self.one(v, ty),
            (Card::Repeated, Value::Array(items)) => {
                self.out.push(b'[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        self.out.push(b',');
                    }
                    self.one(item, ty);
                }
                self.out.push(b']');
            }
            (Card::Map, Value::Object(entries)) => {
                self.out.push(b'{');
                let mut first = true;
                for (k, v) in entries {
                    self.key(&mut first, k);
                    self.one(v, ty);
                }
                self.out.push(b'}');
            }
            (_, v) => self.plain(v),
        }
    }

    fn one(&mut self, value: &Value, ty: FieldType) {
        let FieldType::Message(id) = ty else {
            return self.plain(value);
        };
        match (schema().message(id).special, value) {
            (None, Value::Object(map)) => self.object(map, id, None),
            // a RawExtension may hold an object of a known kind
            (Some(_), Value::Object(_)) => self.top(value),
            _ => self.plain(value),
        }
    }

    fn key(&mut self, first: &mut bool, name: &str) {
        if !std::mem::take(first) {
            self.out.push(b',');
        }
        self.plain_str(name);
        self.out.push(b':');
    }

    fn plain_str(&mut self, s: &str) {
        // writing into a Vec cannot fail
        let _ = serde_json::to_writer(&mut *self.out, s);
    }

    fn plain(&mut self, value: &Value) {
        // writing into a Vec cannot fail, and a Value has no non-string keys
        let _ = serde_json::to_writer(&mut *self.out, value);
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn text(v: &Value) -> String {
        String::from_utf8(to_vec(v)).unwrap()
    }

    #[test]
    fn a_status_is_written_in_upstreams_order() {
        let status = json!({"apiVersion": "v1", "code": 404, "details": {"kind": "pods",
            "name": "p"}, "kind": "Status", "message": "pods \"p\" not found",
            "metadata": {}, "reason": "NotFound", "status": "Failure"});
        assert_eq!(
            text(&status),
            r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"pods \"p\" not found","reason":"NotFound","details":{"name":"p","kind":"pods"},"code":404}"#
        );
    }

    #[test]
    fn objects_follow_their_structs_and_inlined_fields_sit_in_place() {
        let pod = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"uid": "u", "name": "p", "namespace": "ns", "labels": {"b": "2", "a": "1"},
                         "creationTimestamp": "2026-01-01T00:00:00Z", "resourceVersion": "5"},
            "spec": {"volumes": [{"name": "v", "emptyDir": {}}],
                     "containers": [{"name": "c", "image": "busybox"}]},
            "status": {"phase": "Pending"}});
        assert_eq!(
            text(&pod),
            concat!(
                r#"{"kind":"Pod","apiVersion":"v1","metadata":{"name":"p","namespace":"ns","uid":"u","#,
                r#""resourceVersion":"5","creationTimestamp":"2026-01-01T00:00:00Z","labels":{"a":"1","b":"2"}},"#,
                r#""spec":{"volumes":[{"name":"v","emptyDir":{}}],"containers":[{"name":"c","image":"busybox"}]},"#,
                r#""status":{"phase":"Pending"}}"#
            )
        );
        let mut stored = Vec::new();
        write_stored(&pod, &mut stored);
        let stored: Value = serde_json::from_slice(&stored).unwrap();
        assert!(stored["metadata"].get("resourceVersion").is_none());
        assert_eq!(stored["metadata"]["uid"], "u");
    }

    #[test]
    fn unknown_kinds_and_members_are_sorted_and_nothing_is_lost() {
        let cr = json!({"kind": "CronTab", "apiVersion": "example.com/v1",
                        "metadata": {"resourceVersion": "3", "name": "c"}, "spec": {"z": 1, "a": 2}});
        assert_eq!(text(&cr), serde_json::to_string(&cr).unwrap());
        let mut stored = Vec::new();
        write_stored(&cr, &mut stored);
        assert_eq!(
            String::from_utf8(stored).unwrap(),
            r#"{"apiVersion":"example.com/v1","kind":"CronTab","metadata":{"name":"c"},"spec":{"a":2,"z":1}}"#
        );
        let odd = json!({"kind": "ConfigMap", "apiVersion": "v1", "zeta": true, "data": {"k": "v"},
                         "alpha": [1], "metadata": {"name": "m"}});
        assert_eq!(
            text(&odd),
            r#"{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"m"},"data":{"k":"v"},"alpha":[1],"zeta":true}"#
        );
    }

    #[test]
    fn every_builtin_kind_round_trips_to_the_same_value() {
        let list = json!({"kind": "List", "apiVersion": "v1", "metadata": {"resourceVersion": "1"},
            "items": [{"kind": "Service", "apiVersion": "v1", "metadata": {"name": "s"},
                       "spec": {"ports": [{"port": 80, "targetPort": "http", "name": "web"}]}}]});
        let written = to_vec(&list);
        assert_eq!(serde_json::from_slice::<Value>(&written).unwrap(), list);
        assert!(
            String::from_utf8(written)
                .unwrap()
                .contains(r#"{"kind":"Service","apiVersion":"v1","metadata":{"name":"s"},"spec":{"ports":[{"name":"web","port":80,"targetPort":"http"}]}}"#)
        );
    }
}
