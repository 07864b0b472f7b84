//! Conversion between the stored form and another served version of the same objects. Two cases
//! exist: custom resources served in a version other than their storage version (conversion
//! `None`: only `apiVersion` changes, as upstream's `nopConverter`), and `events.k8s.io/v1`
//! Events, stored as core `v1` Events (as upstream, they share one storage), so kubectl
//! describe sees events written through either API. Field mapping as
//! upstream's `events/v1` conversion: regarding ⇄ involvedObject, note ⇄ message,
//! reportingController ⇄ reportingComponent, deprecatedSource/FirstTimestamp/LastTimestamp/Count ⇄
//! source/firstTimestamp/lastTimestamp/count.

use serde_json::{Value, json};
use skiff_apimachinery::catalog::ResourceType;

/// (new API field, core field) pairs that are renamed one to one.
const EVENT_FIELDS: &[(&str, &str)] = &[
    ("regarding", "involvedObject"),
    ("note", "message"),
    ("reportingController", "reportingComponent"),
    ("deprecatedSource", "source"),
    ("deprecatedFirstTimestamp", "firstTimestamp"),
    ("deprecatedLastTimestamp", "lastTimestamp"),
    ("deprecatedCount", "count"),
];

/// Whether objects of `rt` are served in a different form than stored.
pub fn needed(rt: &ResourceType) -> bool {
    rt.storage_version.is_some() || is_events_api(rt)
}

fn is_events_api(rt: &ResourceType) -> bool {
    rt.group == "events.k8s.io" && rt.plural == "events"
}

/// `obj` with its `apiVersion` set to `group/version`.
fn with_version(mut obj: Value, group: &str, version: &str) -> Value {
    if let Some(map) = obj.as_object_mut() {
        map.insert("apiVersion".into(), json!(format!("{group}/{version}")));
    }
    obj
}

fn rename(
    obj: Value,
    pairs: impl Iterator<Item = (&'static str, &'static str)>,
    api_version: &str,
) -> Value {
    let Value::Object(mut map) = obj else {
        return obj;
    };
    for (from, to) in pairs {
        if let Some(v) = map.remove(from) {
            map.insert(to.to_string(), v);
        }
    }
    map.insert("apiVersion".into(), json!(api_version));
    Value::Object(map)
}

/// The stored form of an object received through `rt`.
pub fn to_internal(rt: &ResourceType, obj: Value) -> Value {
    if let Some(storage) = &rt.storage_version {
        return with_version(obj, &rt.group, storage);
    }
    if !is_events_api(rt) {
        return obj;
    }
    let mut out = rename(obj, EVENT_FIELDS.iter().copied(), "v1");
    // Core Events require a source component for old readers; upstream fills it from
    // reportingController when converting.
    if let Some(map) = out.as_object_mut()
        && !map.contains_key("source")
        && let Some(component) = map.get("reportingComponent").cloned()
    {
        map.insert("source".into(), json!({"component": component}));
    }
    out
}

/// The served form of a stored object.
pub fn to_external(rt: &ResourceType, obj: Value) -> Value {
    if rt.storage_version.is_some() {
        return with_version(obj, &rt.group, &rt.version);
    }
    if !is_events_api(rt) {
        return obj;
    }
    rename(
        obj,
        EVENT_FIELDS.iter().map(|(new, core)| (*core, *new)),
        &rt.api_version(),
    )
}

/// Converts serialized stored JSON to the served form (only called when [`needed`]).
pub fn external_bytes(rt: &ResourceType, json: &[u8]) -> Vec<u8> {
    match serde_json::from_slice::<Value>(json) {
        Ok(v) => crate::protobuf::order::to_vec(&to_external(rt, v)),
        Err(_) => json.to_vec(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use skiff_apimachinery::catalog::lookup;

    #[test]
    fn a_new_api_event_round_trips_through_the_core_form() {
        let rt = lookup("events.k8s.io", "v1", "events").unwrap();
        let new = json!({"apiVersion": "events.k8s.io/v1", "kind": "Event",
                         "metadata": {"name": "e1"}, "regarding": {"kind": "Pod", "name": "p"},
                         "note": "Pulled image", "reason": "Pulled",
                         "reportingController": "skiff/kubelet", "type": "Normal"});
        let core = to_internal(rt, new.clone());
        assert_eq!(core["apiVersion"], "v1");
        assert_eq!(core["involvedObject"]["name"], "p");
        assert_eq!(core["message"], "Pulled image");
        assert_eq!(core["source"]["component"], "skiff/kubelet");
        let back = to_external(rt, core);
        assert_eq!(back["regarding"], new["regarding"]);
        assert_eq!(back["note"], new["note"]);
        assert_eq!(back["apiVersion"], "events.k8s.io/v1");
    }

    #[test]
    fn other_resources_pass_through() {
        let rt = lookup("", "v1", "events").unwrap();
        let obj = json!({"message": "m"});
        assert_eq!(to_external(rt, obj.clone()), obj);
    }
}
