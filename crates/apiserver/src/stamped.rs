//! Stored JSON served with its `resourceVersion`, without a second copy. The store keeps an
//! object's JSON without `metadata.resourceVersion` (it is the key's mod_revision, see
//! [`crate::storage`]); readers want it with one. [`Stamped`] keeps the stored bytes — the very
//! buffer the store holds, shared, not copied — and where the `"resourceVersion":"N"` member
//! goes, found by one scan of the bytes, so the served form is written by splicing.
//!
//! The member goes where the object's layout puts it, so for Skiff's own stored JSON the served
//! bytes are exactly those of decoding the object, stamping it and serializing it again with
//! [`crate::storage`]'s writer. Built-in kinds are stored in Go field order (`kind` first, see
//! [`crate::protobuf::order`]), where it follows `uid` and the other identifying fields; other
//! objects (custom resources, and objects stored before Skiff wrote Go order) are sorted, where
//! it goes before the first key that sorts after it.

use bytes::Bytes;

/// An object's stored JSON and where its `resourceVersion` member goes.
#[derive(Debug, Clone)]
pub struct Stamped {
    bytes: Bytes,
    splice: Splice,
}

/// Where and how the `resourceVersion` member is inserted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Splice {
    /// `"resourceVersion":"N",` at this offset (the opening quote of the next key).
    Before(u32),
    /// `,"resourceVersion":"N"` at this offset (the closing brace of `metadata`).
    After(u32),
    /// `"resourceVersion":"N"` at this offset (the closing brace of an empty `metadata`).
    Alone(u32),
    /// The object has no `metadata` object: served as stored, as stamping leaves it unchanged.
    Nowhere,
}

/// Why the bytes cannot be stamped by splicing as they are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unusual {
    /// Not a JSON object, or malformed.
    Malformed,
    /// `metadata` already has a `resourceVersion`, or (checked strictly) a key with an escape.
    NotCanonical,
}

const KEY: &[u8] = b"resourceVersion";

/// The ObjectMeta fields Go's struct puts before `resourceVersion`.
const GO_BEFORE_KEY: &[&[u8]] = &[b"name", b"generateName", b"namespace", b"selfLink", b"uid"];

impl Stamped {
    /// Wraps stored JSON; fails if the bytes are not an object in the stored form (no
    /// `resourceVersion` in `metadata`), in which case the caller re-encodes the object.
    pub fn new(bytes: Bytes) -> Result<Stamped, Unusual> {
        let splice = find_splice(&bytes, true)?;
        Ok(Stamped { bytes, splice })
    }

    /// Wraps JSON that [`crate::storage::encode`] just produced: no `resourceVersion`, so a key
    /// with an escape in it cannot be one.
    pub fn encoded(bytes: Bytes) -> Result<Stamped, Unusual> {
        let splice = find_splice(&bytes, false)?;
        Ok(Stamped { bytes, splice })
    }

    /// The stored bytes (without `resourceVersion`).
    pub fn stored(&self) -> &Bytes {
        &self.bytes
    }

    /// Size of the served form, near enough to reserve buffers.
    pub fn len_hint(&self) -> usize {
        self.bytes.len() + KEY.len() + 26
    }

    /// Appends the served form: the stored JSON with `metadata.resourceVersion` = `revision`.
    pub fn write(&self, revision: i64, out: &mut Vec<u8>) {
        let (at, before, after): (u32, &[u8], &[u8]) = match self.splice {
            Splice::Before(at) => (at, b"", b","),
            Splice::After(at) => (at, b",", b""),
            Splice::Alone(at) => (at, b"", b""),
            Splice::Nowhere => {
                out.extend_from_slice(&self.bytes);
                return;
            }
        };
        let (head, tail) = self.bytes.split_at(at as usize);
        out.extend_from_slice(head);
        out.extend_from_slice(before);
        out.extend_from_slice(b"\"resourceVersion\":\"");
        out.extend_from_slice(itoa::Buffer::new().format(revision).as_bytes());
        out.extend_from_slice(b"\"");
        out.extend_from_slice(after);
        out.extend_from_slice(tail);
    }

    /// The served form as a new buffer.
    pub fn to_vec(&self, revision: i64) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.len_hint());
        self.write(revision, &mut out);
        out
    }
}

/// A cursor over JSON bytes that knows just enough to skip values.
struct Scan<'a> {
    b: &'a [u8],
    i: usize,
}

impl Scan<'_> {
    fn ws(&mut self) {
        while self.i < self.b.len() && matches!(self.b[self.i], b' ' | b'\n' | b'\r' | b'\t') {
            self.i += 1;
        }
    }

    fn peek(&mut self) -> Result<u8, Unusual> {
        self.ws();
        self.b.get(self.i).copied().ok_or(Unusual::Malformed)
    }

    fn expect(&mut self, c: u8) -> Result<(), Unusual> {
        if self.peek()? != c {
            return Err(Unusual::Malformed);
        }
        self.i += 1;
        Ok(())
    }

    /// Skips a string whose opening quote is at the cursor; returns its raw contents and
    /// whether it holds an escape.
    fn string(&mut self) -> Result<(usize, usize, bool), Unusual> {
        self.expect(b'"')?;
        let start = self.i;
        let mut escaped = false;
        loop {
            let rest = self.b.get(self.i..).ok_or(Unusual::Malformed)?;
            let n = memchr::memchr2(b'"', b'\\', rest).ok_or(Unusual::Malformed)?;
            self.i += n;
            if self.b[self.i] == b'"' {
                self.i += 1;
                return Ok((start, self.i - 1, escaped));
            }
            escaped = true;
            self.i += 2;
        }
    }

    /// Skips one value of any kind.
    fn value(&mut self) -> Result<(), Unusual> {
        match self.peek()? {
            b'"' => self.string().map(|_| ()),
            b'{' | b'[' => {
                let mut depth = 0usize;
                loop {
                    match self.peek()? {
                        b'"' => {
                            self.string()?;
                            continue;
                        }
                        b'{' | b'[' => depth += 1,
                        b'}' | b']' => depth -= 1,
                        _ => {}
                    }
                    self.i += 1;
                    if depth == 0 {
                        return Ok(());
                    }
                }
            }
            _ => {
                let start = self.i;
                while self.i < self.b.len()
                    && !matches!(
                        self.b[self.i],
                        b',' | b'}' | b']' | b' ' | b'\n' | b'\r' | b'\t'
                    )
                {
                    self.i += 1;
                }
                if self.i == start {
                    return Err(Unusual::Malformed);
                }
                Ok(())
            }
        }
    }

    /// Walks the members of the object at the cursor, calling `member` with each key (its raw
    /// bytes, where its quote starts, whether it has an escape) with the cursor at its value;
    /// `member` must consume the value. Returns the offset of the closing brace and the count.
    fn object(
        &mut self,
        mut member: impl FnMut(&mut Self, &[u8], usize, bool) -> Result<(), Unusual>,
    ) -> Result<(usize, usize), Unusual> {
        self.expect(b'{')?;
        let mut count = 0;
        if self.peek()? == b'}' {
            let end = self.i;
            self.i += 1;
            return Ok((end, 0));
        }
        loop {
            self.ws();
            let quote = self.i;
            let (start, end, escaped) = self.string()?;
            self.expect(b':')?;
            let b = self.b;
            member(self, &b[start..end], quote, escaped)?;
            count += 1;
            match self.peek()? {
                b',' => self.i += 1,
                b'}' => {
                    let end = self.i;
                    self.i += 1;
                    return Ok((end, count));
                }
                _ => return Err(Unusual::Malformed),
            }
        }
    }
}

/// Finds where `metadata.resourceVersion` goes in a stored object. `strict` refuses keys with
/// escapes in `metadata` (one could spell `resourceVersion`).
fn find_splice(json: &[u8], strict: bool) -> Result<Splice, Unusual> {
    if json.len() > u32::MAX as usize {
        return Err(Unusual::Malformed);
    }
    let mut scan = Scan { b: json, i: 0 };
    let mut splice = Splice::Nowhere;
    // Go order writes `kind` first; sorted order writes `apiVersion` (or `a…`) before it
    let mut go_order = None;
    scan.object(|s, key, _, _| {
        let go_order = *go_order.get_or_insert(key == b"kind");
        if key != b"metadata" || s.peek()? != b'{' {
            return s.value();
        }
        let mut before = None;
        let (close, count) = s.object(|s, key, quote, escaped| {
            if (strict && escaped) || key == KEY {
                return Err(Unusual::NotCanonical);
            }
            let after = if go_order {
                !GO_BEFORE_KEY.contains(&key)
            } else {
                key > KEY
            };
            if before.is_none() && after {
                before = Some(quote);
            }
            s.value()
        })?;
        splice = match (before, count) {
            (Some(at), _) => Splice::Before(at as u32),
            (None, 0) => Splice::Alone(close as u32),
            (None, _) => Splice::After(close as u32),
        };
        Ok(())
    })?;
    scan.ws();
    if scan.i != json.len() {
        return Err(Unusual::Malformed);
    }
    Ok(splice)
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    /// What the splice must equal: decode, stamp, serialize (in Go order where the kind has
    /// one, sorted otherwise).
    fn reference(stored: &[u8], rv: i64) -> Vec<u8> {
        let mut v: Value = serde_json::from_slice(stored).unwrap();
        crate::storage::set_resource_version(&mut v, rv);
        crate::protobuf::order::to_vec(&v)
    }

    fn check(obj: Value) {
        let stored = crate::storage::encode(&obj).to_vec();
        let s = Stamped::new(Bytes::from(stored.clone())).unwrap();
        for rv in [1, 42, 9_876_543_210] {
            assert_eq!(
                String::from_utf8(s.to_vec(rv)).unwrap(),
                String::from_utf8(reference(&stored, rv)).unwrap()
            );
        }
    }

    #[test]
    fn the_spliced_form_equals_stamping_and_serializing_again() {
        check(json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "a", "namespace": "n", "uid": "u",
                         "labels": {"resourceVersion": "x", "z": "{\"}"},
                         "managedFields": [{"fieldsV1": {"f:metadata": {"f:resourceVersion": {}}}}]},
            "spec": {"containers": [{"name": "c", "args": ["]", "}", "\\\""]}], "n": 1.5e3,
                     "t": true, "z": null}}));
    }

    #[test]
    fn built_in_kinds_get_it_in_go_order_after_uid() {
        check(json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "a", "namespace": "n", "uid": "u", "generation": 2,
                         "annotations": {"x": "y"}, "zzz": 1},
            "data": {"k": "v"}}));
        check(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}}));
        check(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"labels": {}}}));
        let stored = crate::storage::encode(&json!({"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": "a", "uid": "u", "creationTimestamp": "t"}}));
        assert_eq!(
            String::from_utf8(Stamped::new(stored).unwrap().to_vec(9)).unwrap(),
            r#"{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"a","uid":"u","resourceVersion":"9","creationTimestamp":"t"}}"#
        );
    }

    #[test]
    fn the_member_goes_last_or_alone_when_no_key_sorts_after_it() {
        check(json!({"metadata": {"name": "a"}, "spec": {}}));
        check(json!({"metadata": {}, "spec": {}}));
        check(json!({"a": [], "metadata": {"zzz": 1}}));
    }

    #[test]
    fn an_object_without_metadata_is_served_as_stored() {
        check(json!({"kind": "Status"}));
        check(json!({"kind": "X", "metadata": 3}));
    }

    #[test]
    fn whitespace_between_tokens_is_tolerated() {
        let stored =
            b" { \"metadata\" : { \"name\" : \"a\" , \"uid\" : \"u\" } , \"x\" : [ 1 , 2 ] } ";
        let s = Stamped::new(Bytes::from_static(stored)).unwrap();
        let v: Value = serde_json::from_slice(&s.to_vec(7)).unwrap();
        assert_eq!(v["metadata"]["resourceVersion"], "7");
        assert_eq!(v["metadata"]["uid"], "u");
    }

    #[test]
    fn stored_json_that_already_has_a_resource_version_is_refused() {
        let stored = br#"{"metadata":{"name":"a","resourceVersion":"3"}}"#;
        assert_eq!(
            Stamped::new(Bytes::from_static(stored)).unwrap_err(),
            Unusual::NotCanonical
        );
    }

    #[test]
    fn keys_with_escapes_are_refused_unless_the_bytes_were_just_encoded() {
        let stored = br#"{"metadata":{"a\"b":1,"name":"a"}}"#;
        assert_eq!(
            Stamped::new(Bytes::from_static(stored)).unwrap_err(),
            Unusual::NotCanonical
        );
        let s = Stamped::encoded(Bytes::from_static(stored)).unwrap();
        assert_eq!(s.to_vec(5), reference(stored, 5));
    }

    #[test]
    fn malformed_bytes_are_refused() {
        for bad in [
            &b""[..],
            b"[]",
            b"{\"metadata\":{\"a\":}",
            b"{\"a\":\"x",
            b"{} x",
        ] {
            assert_eq!(
                Stamped::new(Bytes::copy_from_slice(bad)).unwrap_err(),
                Unusual::Malformed,
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
    }
}
