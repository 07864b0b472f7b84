//! Rules every kind follows on create and update (upstream's `BeforeCreate`/`BeforeUpdate`):
//! server-owned metadata (uid, creationTimestamp, generation, deletion fields), the status
//! subresource split, and generation bumps on spec changes.

use serde_json::{Map, Value, json};
use skiff_apimachinery::catalog::ResourceType;

/// Upstream's `rfc3339` seconds form of a time, as `metav1.Time` serializes.
pub fn timestamp(now: jiff::Timestamp) -> String {
    now.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// Sets a condition of `status`, its transition time moving only when its status does.
pub fn set_condition(
    status: &mut Value,
    now: jiff::Timestamp,
    type_: &str,
    value: &str,
    reason: &str,
    message: &str,
) {
    if !status.is_object() {
        *status = json!({});
    }
    let conditions = status
        .as_object_mut()
        .expect("made an object above")
        .entry("conditions")
        .or_insert_with(|| json!([]));
    if !conditions.is_array() {
        *conditions = json!([]);
    }
    let list = conditions.as_array_mut().expect("made an array above");
    let now = timestamp(now);
    match list.iter_mut().find(|c| c["type"] == type_) {
        Some(c) => {
            if c["status"] != value {
                c["lastTransitionTime"] = json!(now);
            }
            c["status"] = json!(value);
            c["reason"] = json!(reason);
            c["message"] = json!(message);
        }
        None => list.push(
            json!({"type": type_, "status": value, "lastTransitionTime": now,
                                 "reason": reason, "message": message}),
        ),
    }
}

/// A condition as a controller wants it to read.
#[derive(Debug, Clone, Copy)]
pub struct Condition<'a> {
    pub type_: &'a str,
    pub status: &'a str,
    pub reason: &'a str,
    pub message: &'a str,
}

impl Condition<'_> {
    /// Whether `object`'s status already has this condition.
    pub fn is_in(&self, object: &Value) -> bool {
        object
            .pointer("/status/conditions")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .find(|c| c["type"] == self.type_)
            .is_some_and(|c| {
                c["status"] == self.status
                    && c["reason"] == self.reason
                    && c["message"] == self.message
            })
    }

    /// Sets it in `status` ([`set_condition`]).
    pub fn set(&self, status: &mut Value, now: jiff::Timestamp) {
        set_condition(
            status,
            now,
            self.type_,
            self.status,
            self.reason,
            self.message,
        );
    }
}

fn meta_mut(object: &mut Value) -> &mut Map<String, Value> {
    if !object.get("metadata").is_some_and(Value::is_object) {
        object["metadata"] = json!({});
    }
    object["metadata"]
        .as_object_mut()
        .expect("metadata is an object")
}

/// Whether the kind tracks `metadata.generation`: custom resources always; built-in kinds with
/// a spec and a status subresource (pods only with the alpha PodObservedGenerationTracking, so
/// not here; volumes, their claims, attachments and certificate signing requests never, as
/// upstream's strategies leave it unset).
fn tracks_generation(rt: &ResourceType) -> bool {
    if !rt.builtin {
        return true;
    }
    rt.has_status()
        && !matches!(
            (rt.group.as_str(), rt.plural.as_str()),
            (
                "",
                "pods" | "nodes" | "namespaces" | "persistentvolumeclaims" | "persistentvolumes"
            ) | ("storage.k8s.io", "volumeattachments")
                | ("certificates.k8s.io", "certificatesigningrequests")
        )
}

/// Whether a create resets `.status` (every kind with a status subresource except Nodes, whose
/// kubelet registers them with status).
fn resets_status_on_create(rt: &ResourceType) -> bool {
    rt.has_status() && !(rt.group.is_empty() && rt.plural == "nodes")
}

/// Sets what the server owns on a new object: uid, creationTimestamp, generation; drops what a
/// client may not set.
pub fn prepare_create(rt: &ResourceType, object: &mut Value, now: jiff::Timestamp) {
    let meta = meta_mut(object);
    meta.insert("uid".into(), json!(uuid::Uuid::new_v4().to_string()));
    meta.insert("creationTimestamp".into(), json!(timestamp(now)));
    for field in [
        "resourceVersion",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "selfLink",
    ] {
        meta.remove(field);
    }
    if tracks_generation(rt) {
        meta.insert("generation".into(), json!(1));
    } else {
        meta.remove("generation");
    }
    if !rt.has_status() {
        return;
    }
    if resets_status_on_create(rt)
        && let Some(obj) = object.as_object_mut()
    {
        obj.remove("status");
    }
}

/// Carries server-owned metadata from `old` to `object`, applies the status subresource split
/// (`subresource` is `"status"` for writes to `/status`), and bumps the generation when the spec
/// changed.
pub fn prepare_update(rt: &ResourceType, object: &mut Value, old: &Value, subresource: &str) {
    if subresource == "status" {
        // A status write changes only .status (upstream also keeps metadata but for a few
        // fields; keeping all of it is the strict reading).
        let status = object.get("status").cloned();
        *object = old.clone();
        match status {
            Some(s) => object["status"] = s,
            None => {
                if let Some(o) = object.as_object_mut() {
                    o.remove("status");
                }
            }
        }
        return;
    }
    let old_meta = old.get("metadata").cloned().unwrap_or_else(|| json!({}));
    let meta = meta_mut(object);
    for field in [
        "uid",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "generation",
    ] {
        match old_meta.get(field) {
            Some(v) => meta.insert(field.into(), v.clone()),
            None => meta.remove(field),
        };
    }
    // Writes to the object itself (and to `scale`) keep the stored status; `binding` sets both.
    if rt.has_status() && matches!(subresource, "" | "scale") {
        let old_status = old.get("status").cloned();
        let obj = object.as_object_mut().expect("objects are JSON objects");
        match old_status {
            Some(s) => obj.insert("status".into(), s),
            None => obj.remove("status"),
        };
    }
    // Without a status subresource, a custom resource's status is content like any other.
    let changed = if rt.has_status() {
        spec_changed(object, old)
    } else {
        object.get("status") != old.get("status") || spec_changed(object, old)
    };
    if tracks_generation(rt) && changed {
        let next = old_meta
            .get("generation")
            .and_then(Value::as_i64)
            .unwrap_or(0)
            + 1;
        meta_mut(object).insert("generation".into(), json!(next));
    }
}

/// Undoes the generation bump of [`prepare_update`] when the new object differs from `old` only
/// by what the kind's defaults have since filled in: the generic rules run before the kind's
/// defaulting, so an update that omits defaulted fields looked like a spec change.
pub fn settle_generation(object: &mut Value, old: &Value) {
    let generation = |v: &Value| v.pointer("/metadata/generation").and_then(Value::as_i64);
    if let (Some(old_gen), Some(new_gen)) = (generation(old), generation(object))
        && new_gen == old_gen + 1
        && !spec_changed(object, old)
    {
        object["metadata"]["generation"] = json!(old_gen);
    }
}

/// Whether anything outside `metadata` and `status` differs.
pub(crate) fn spec_changed(a: &Value, b: &Value) -> bool {
    let empty = Map::new();
    let (a, b) = (
        a.as_object().unwrap_or(&empty),
        b.as_object().unwrap_or(&empty),
    );
    !same_except(a, b, &["metadata", "status", "apiVersion", "kind"])
}

/// Whether an update changes nothing the store would keep (so it is not written and keeps its
/// resourceVersion, as upstream: kubectl then says "unchanged"/"no change").
pub fn unchanged(object: &Value, old: &Value) -> bool {
    let (Value::Object(new), Value::Object(old)) = (object, old) else {
        return object == old;
    };
    same_except(new, old, &["metadata"])
        && match (new.get("metadata"), old.get("metadata")) {
            (Some(Value::Object(a)), Some(Value::Object(b))) => {
                same_except(a, b, &["resourceVersion", "managedFields"])
            }
            (a, b) => a == b,
        }
}

/// Whether `a` and `b` have the same members but for those named in `ignored` (compared in
/// place: a pod's status PATCH would otherwise copy both pods to compare them).
fn same_except(a: &Map<String, Value>, b: &Map<String, Value>, ignored: &[&str]) -> bool {
    let kept = |m: &Map<String, Value>| m.keys().filter(|k| !ignored.contains(&k.as_str())).count();
    kept(a) == kept(b)
        && a.iter()
            .filter(|(k, _)| !ignored.contains(&k.as_str()))
            .all(|(k, v)| b.get(k) == Some(v))
}

#[cfg(test)]
mod tests {
    use super::*;
    use skiff_apimachinery::catalog::lookup;

    fn now() -> jiff::Timestamp {
        "2026-11-29T10:00:00Z".parse().unwrap()
    }

    #[test]
    fn a_create_gets_uid_timestamp_and_generation_and_loses_status() {
        let deploy = lookup("apps", "v1", "deployments").unwrap();
        let mut obj = json!({"metadata": {"name": "a", "resourceVersion": "5"},
                             "spec": {}, "status": {"replicas": 3}});
        prepare_create(deploy, &mut obj, now());
        assert_eq!(obj["metadata"]["creationTimestamp"], "2026-11-29T10:00:00Z");
        assert_eq!(obj["metadata"]["generation"], 1);
        assert!(obj["metadata"]["uid"].as_str().unwrap().len() == 36);
        assert!(obj.get("status").is_none());
        assert!(obj["metadata"].get("resourceVersion").is_none());
    }

    #[test]
    fn spec_changes_bump_generation_and_status_is_kept_from_the_old_object() {
        let deploy = lookup("apps", "v1", "deployments").unwrap();
        let old = json!({"metadata": {"name": "a", "uid": "u1", "generation": 3},
                         "spec": {"replicas": 1}, "status": {"replicas": 1}});
        let mut new = json!({"metadata": {"name": "a", "uid": "forged"},
                             "spec": {"replicas": 2}, "status": {"replicas": 9}});
        prepare_update(deploy, &mut new, &old, "");
        assert_eq!(new["metadata"]["uid"], "u1");
        assert_eq!(new["metadata"]["generation"], 4);
        assert_eq!(new["status"]["replicas"], 1);
    }

    #[test]
    fn status_writes_change_only_status() {
        let deploy = lookup("apps", "v1", "deployments").unwrap();
        let old = json!({"metadata": {"name": "a", "generation": 3, "labels": {"x": "1"}},
                         "spec": {"replicas": 1}, "status": {"replicas": 1}});
        let mut new = json!({"metadata": {"name": "a", "labels": {"x": "2"}},
                             "spec": {"replicas": 5}, "status": {"replicas": 2}});
        prepare_update(deploy, &mut new, &old, "status");
        assert_eq!(new["spec"]["replicas"], 1);
        assert_eq!(new["metadata"]["labels"]["x"], "1");
        assert_eq!(new["status"]["replicas"], 2);
        assert_eq!(new["metadata"]["generation"], 3);
    }

    #[test]
    fn an_update_is_unchanged_when_only_its_resource_version_or_managed_fields_differ() {
        let old = json!({"kind": "Pod", "metadata": {"name": "a", "resourceVersion": "5",
                         "managedFields": [{"manager": "x"}]}, "spec": {"n": 1}});
        let same = json!({"kind": "Pod", "metadata": {"name": "a"}, "spec": {"n": 1}});
        assert!(unchanged(&same, &old));
        assert!(unchanged(&old, &same));
        let labelled = json!({"kind": "Pod", "metadata": {"name": "a", "labels": {"l": "1"}},
                              "spec": {"n": 1}});
        assert!(!unchanged(&labelled, &old));
        let more = json!({"kind": "Pod", "metadata": {"name": "a"}, "spec": {"n": 1}, "x": 1});
        assert!(!unchanged(&more, &old) && !unchanged(&old, &more));
        let no_metadata = json!({"kind": "Pod", "spec": {"n": 1}});
        assert!(!unchanged(&no_metadata, &old) && !unchanged(&old, &no_metadata));
        assert!(unchanged(&json!("a"), &json!("a")) && !unchanged(&json!("a"), &old));
    }

    #[test]
    fn the_spec_is_what_is_outside_metadata_status_and_type() {
        let old = json!({"kind": "Pod", "apiVersion": "v1", "metadata": {"name": "a"},
                         "spec": {"n": 1}, "status": {"phase": "Pending"}});
        let status = json!({"metadata": {"name": "b"}, "spec": {"n": 1},
                            "status": {"phase": "Running"}});
        assert!(!spec_changed(&status, &old));
        let spec = json!({"kind": "Pod", "apiVersion": "v1", "spec": {"n": 2}});
        assert!(spec_changed(&spec, &old));
        let more = json!({"spec": {"n": 1}, "data": {}});
        assert!(spec_changed(&more, &old) && spec_changed(&old, &more));
        assert!(!spec_changed(&json!(null), &json!({"status": {}})));
    }
}
