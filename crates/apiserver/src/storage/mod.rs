//! How objects sit in the store: one key per object (`/registry/{group}/{resource}/{namespace}/
//! {name}`, group `core` for the legacy group), the value the object's JSON without its
//! `resourceVersion`, which is the key's `mod_revision` (so it can never be stale). The server
//! reaches the store through [`metered::Metered`], which times each call.

pub mod metered;

use bytes::Bytes;
use serde_json::Value;
use skiff_apimachinery::catalog::ResourceType;
use skiff_store::KeyValue;

use crate::error::{ApiError, Result};

/// The prefix under which every Kubernetes object lives.
pub const ROOT: &str = "/registry/";

/// Where a resource's objects are stored. `events.k8s.io/v1` Events share core Events' storage,
/// as upstream.
fn storage_type(rt: &ResourceType) -> (&str, &str) {
    match (rt.group.as_str(), rt.plural.as_str()) {
        ("events.k8s.io", "events") | ("", _) => ("core", &rt.plural),
        (g, p) => (g, p),
    }
}

/// `/registry/core/pods/` or `/registry/core/pods/ns1/`: every key of the resource, or of one
/// namespace of it.
pub fn prefix(rt: &ResourceType, namespace: &str) -> String {
    let (g, p) = storage_type(rt);
    if rt.namespaced && !namespace.is_empty() {
        format!("{ROOT}{g}/{p}/{namespace}/")
    } else {
        format!("{ROOT}{g}/{p}/")
    }
}

/// The key of one object.
pub fn key(rt: &ResourceType, namespace: &str, name: &str) -> String {
    let (g, p) = storage_type(rt);
    if rt.namespaced {
        format!("{ROOT}{g}/{p}/{namespace}/{name}")
    } else {
        format!("{ROOT}{g}/{p}/{name}")
    }
}

/// Splits a key into (storage group, resource, namespace, name); namespace is empty for
/// cluster-scoped keys.
pub fn parse_key(key: &str) -> Option<(&str, &str, &str, &str)> {
    let rest = key.strip_prefix(ROOT)?;
    let mut parts = rest.splitn(4, '/');
    let g = parts.next()?;
    let p = parts.next()?;
    let a = parts.next()?;
    match parts.next() {
        Some(name) => Some((g, p, a, name)),
        None => Some((g, p, "", a)),
    }
}

/// The `(storage group, resource)` pair a key belongs to, for routing store events.
pub fn storage_id(rt: &ResourceType) -> (String, String) {
    let (g, p) = storage_type(rt);
    (g.to_string(), p.to_string())
}

/// Serializes an object for the store: JSON without `metadata.resourceVersion`, in the order
/// upstream serves it (Go field order for built-in kinds, sorted for others), so that reads
/// serve the stored bytes as they are.
///
/// The buffer is exactly as long as the JSON: the store (and the watch cache, which shares it)
/// keeps it for the object's lifetime, and a serializer's buffer grows by doubling, so it would
/// otherwise carry up to as much spare capacity as JSON.
pub fn encode(object: &Value) -> Bytes {
    let mut json = Vec::with_capacity(512);
    crate::protobuf::order::write_stored(object, &mut json);
    json.shrink_to_fit();
    Bytes::from(json)
}

/// Reads an object from the store, with `resourceVersion` set to the revision it was written at.
pub fn decode(kv: &KeyValue) -> Result<Value> {
    decode_at(&kv.value, kv.mod_revision, &kv.key)
}

/// A stored value the store layer could not read (encryption at rest: no configured key opens
/// it) arrives as this prefix then the reason, so that one object fails with a 500 naming its
/// key, never the whole watch cache or the server.
pub const UNREADABLE: &[u8] = b"\0skiff:unreadable:";

/// The error of a value the store layer could not read, if it is one.
pub fn check_readable(value: &[u8]) -> Result<()> {
    match value.strip_prefix(UNREADABLE) {
        Some(reason) => Err(ApiError::internal(String::from_utf8_lossy(reason))),
        None => Ok(()),
    }
}

/// Reads stored JSON and stamps `resourceVersion` = `revision`.
pub fn decode_at(value: &[u8], revision: i64, key: &[u8]) -> Result<Value> {
    check_readable(value)?;
    let mut object: Value = serde_json::from_slice(value).map_err(|e| {
        ApiError::internal(format!(
            "decoding object at {}: {e}",
            String::from_utf8_lossy(key)
        ))
    })?;
    set_resource_version(&mut object, revision);
    Ok(object)
}

pub fn set_resource_version(object: &mut Value, revision: i64) {
    if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.insert(
            "resourceVersion".into(),
            Value::String(revision.to_string()),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use skiff_apimachinery::catalog::lookup;

    #[test]
    fn keys_are_per_group_resource_namespace_and_name() {
        let pods = lookup("", "v1", "pods").unwrap();
        assert_eq!(key(pods, "ns1", "web"), "/registry/core/pods/ns1/web");
        assert_eq!(prefix(pods, ""), "/registry/core/pods/");
        let nodes = lookup("", "v1", "nodes").unwrap();
        assert_eq!(key(nodes, "", "n1"), "/registry/core/nodes/n1");
        let deploy = lookup("apps", "v1", "deployments").unwrap();
        assert_eq!(key(deploy, "a", "b"), "/registry/apps/deployments/a/b");
        assert_eq!(
            parse_key("/registry/apps/deployments/a/b"),
            Some(("apps", "deployments", "a", "b"))
        );
        assert_eq!(
            parse_key("/registry/core/nodes/n1"),
            Some(("core", "nodes", "", "n1"))
        );
    }

    #[test]
    fn both_event_apis_share_one_storage() {
        let core = lookup("", "v1", "events").unwrap();
        let new = lookup("events.k8s.io", "v1", "events").unwrap();
        assert_eq!(key(core, "a", "e"), key(new, "a", "e"));
    }

    #[test]
    fn stored_objects_carry_no_resource_version() {
        let obj = serde_json::json!({"metadata": {"name": "a", "resourceVersion": "7"}});
        let bytes = encode(&obj);
        assert!(!String::from_utf8_lossy(&bytes).contains("resourceVersion"));
        let back = decode_at(&bytes, 9, b"k").unwrap();
        assert_eq!(back["metadata"]["resourceVersion"], "9");
    }
}
