//! PersistentVolumes: upstream's defaults (`persistentVolumeReclaimPolicy: Retain`, `volumeMode:
//! Filesystem`, `status.phase: Pending` since the create), `ValidatePersistentVolumeSpec`
//! (access modes, a positive `storage` capacity and nothing else, exactly one volume source, a
//! known reclaim policy) and `ValidatePersistentVolumeUpdate` (the source and volume mode are
//! immutable). Moving `Pending` to `Available` is the volume controller's job.

use serde_json::{Value, json};
use skiff_apimachinery::validation::{FieldError, FieldPath};

use super::Strategy;
use super::common::{immutable, is_empty, object_at, semantic_eq, set_default, str_at};
use super::volume::{
    positive_quantity, validate_access_modes, validate_class_name, validate_volume_mode,
};

#[derive(Debug)]
pub struct PersistentVolumeStrategy;

/// The volume sources of a PersistentVolumeSpec, in the order upstream checks them (the second
/// one found is the one refused).
pub const SOURCES: &[&str] = &[
    "hostPath",
    "gcePersistentDisk",
    "awsElasticBlockStore",
    "glusterfs",
    "flocker",
    "nfs",
    "rbd",
    "quobyte",
    "cephfs",
    "storageos",
    "iscsi",
    "cinder",
    "fc",
    "flexVolume",
    "azureFile",
    "vsphereVolume",
    "photonPersistentDisk",
    "portworxVolume",
    "azureDisk",
    "csi",
    "scaleIO",
    "local",
];

/// Upstream's `supportedReclaimPolicy` of volumes.
const RECLAIM_POLICIES: &[&str] = &["Delete", "Recycle", "Retain"];

fn defaults(pv: &mut Value) {
    let spec = object_at(pv, "spec");
    set_default(spec, "persistentVolumeReclaimPolicy", json!("Retain"));
    set_default(spec, "volumeMode", json!("Filesystem"));
    set_default(object_at(pv, "status"), "phase", json!("Pending"));
}

/// The required string fields of the sources Skiff checks beyond their presence.
fn validate_source(name: &str, source: &Value, path: &FieldPath) -> Vec<FieldError> {
    let required: &[&str] = match name {
        "hostPath" | "local" => &["path"],
        "nfs" => &["server", "path"],
        "csi" => &["driver", "volumeHandle"],
        _ => &[],
    };
    let mut errs: Vec<FieldError> = required
        .iter()
        .filter(|f| str_at(source, &format!("/{f}")).is_empty())
        .map(|f| FieldError::required(&path.child(*f), ""))
        .collect();
    if name == "nfs" {
        let p = str_at(source, "/path");
        if !p.is_empty() && !p.starts_with('/') {
            errs.push(FieldError::invalid(
                &path.child("path"),
                p,
                "must be an absolute path",
            ));
        }
    }
    errs
}

/// Upstream's `ValidatePersistentVolumeSpec` at `spec`.
pub fn validate_volume_spec(spec: &Value, path: &FieldPath) -> Vec<FieldError> {
    let mut errs = validate_access_modes(
        spec.get("accessModes"),
        &path.child("accessModes"),
        Some(""),
    );
    let cap_path = path.child("capacity");
    let capacity = spec.get("capacity").and_then(Value::as_object);
    if capacity.is_none_or(|c| c.is_empty()) {
        errs.push(FieldError::required(&cap_path, ""));
    }
    if let Some(capacity) = capacity
        && (!capacity.contains_key("storage") || capacity.len() > 1)
    {
        errs.push(FieldError::not_supported(
            &cap_path,
            Value::Object(capacity.clone()),
            &["storage"],
        ));
    }
    for (resource, qty) in capacity.into_iter().flatten() {
        errs.extend(positive_quantity(qty, &cap_path.key(resource)));
    }
    errs.extend(validate_class_name(
        spec.get("storageClassName"),
        &path.child("storageClassName"),
    ));
    errs.extend(validate_volume_mode(
        spec.get("volumeMode"),
        &path.child("volumeMode"),
    ));
    let policy = str_at(spec, "/persistentVolumeReclaimPolicy");
    if !policy.is_empty() && !RECLAIM_POLICIES.contains(&policy) {
        errs.push(FieldError::not_supported(
            &path.child("persistentVolumeReclaimPolicy"),
            policy,
            RECLAIM_POLICIES,
        ));
    }
    let mut found = 0;
    for name in SOURCES {
        let Some(source) = spec.get(*name).filter(|s| !s.is_null()) else {
            continue;
        };
        if found > 0 {
            errs.push(FieldError::forbidden(
                &path.child(*name),
                "may not specify more than 1 volume type",
            ));
            continue;
        }
        found += 1;
        errs.extend(validate_source(name, source, &path.child(*name)));
    }
    if found == 0 {
        errs.push(FieldError::required(path, "must specify a volume type"));
    }
    if spec.get("local").is_some_and(|l| !l.is_null()) && is_empty(spec.get("nodeAffinity")) {
        errs.push(FieldError::required(
            &path.child("nodeAffinity"),
            "Local volume requires node affinity",
        ));
    }
    errs
}

/// Upstream's status strategy: `status.lastPhaseTransitionTime` is kept while the phase stays,
/// and set to `now` when the phase changes unless the writer set a new time itself.
fn stamp_phase_transition(pv: &mut Value, old: &Value, now: jiff::Timestamp) {
    let time = |v: &Value| {
        v.pointer("/status/lastPhaseTransitionTime")
            .filter(|t| !t.is_null())
            .cloned()
    };
    let (new_time, old_time) = (time(pv), time(old));
    let same_phase = pv.pointer("/status/phase") == old.pointer("/status/phase");
    if same_phase && new_time.is_none() {
        if let Some(t) = old_time {
            object_at(pv, "status")["lastPhaseTransitionTime"] = t;
        }
    } else if !same_phase && (new_time.is_none() || new_time == old_time) {
        object_at(pv, "status")["lastPhaseTransitionTime"] = json!(super::generic::timestamp(now));
    }
}

/// The volume source fields of a spec (`PersistentVolumeSource`, inlined in the spec).
fn source_of(spec: Option<&Value>) -> Value {
    let mut out = serde_json::Map::new();
    for name in SOURCES {
        if let Some(v) = spec.and_then(|s| s.get(*name)).filter(|v| !v.is_null()) {
            out.insert((*name).to_string(), v.clone());
        }
    }
    Value::Object(out)
}

impl Strategy for PersistentVolumeStrategy {
    fn prepare_for_create(&self, pv: &mut Value) {
        defaults(pv);
        // Upstream stamps the first phase's transition time with the create.
        let created = pv.pointer("/metadata/creationTimestamp").cloned();
        if let Some(t) = created {
            object_at(pv, "status")["lastPhaseTransitionTime"] = t;
        }
    }

    fn prepare_for_update(&self, pv: &mut Value, _old: &Value) {
        defaults(pv);
    }

    fn prepare_for_subresource_update(&self, sub: &str, pv: &mut Value, old: &Value) -> bool {
        if sub == "status" {
            stamp_phase_transition(pv, old, jiff::Timestamp::now());
        }
        false
    }

    fn validate(&self, pv: &Value) -> Vec<FieldError> {
        let null = Value::Null;
        validate_volume_spec(pv.get("spec").unwrap_or(&null), &FieldPath::new("spec"))
    }

    fn validate_update(&self, pv: &Value, old: &Value) -> Vec<FieldError> {
        let mut errs = self.validate(pv);
        let (new_source, old_source) = (source_of(pv.get("spec")), source_of(old.get("spec")));
        if !semantic_eq(Some(&new_source), Some(&old_source)) {
            errs.push(FieldError::forbidden(
                &FieldPath::new("spec").child("persistentvolumesource"),
                "spec.persistentvolumesource is immutable after creation",
            ));
        }
        errs.extend(immutable(
            pv.pointer("/spec/volumeMode"),
            old.pointer("/spec/volumeMode"),
            &FieldPath::new("volumeMode"),
        ));
        if !is_empty(old.pointer("/spec/nodeAffinity")) {
            errs.extend(immutable(
                pv.pointer("/spec/nodeAffinity"),
                old.pointer("/spec/nodeAffinity"),
                &FieldPath::new("nodeAffinity"),
            ));
        }
        errs
    }

    /// `name` as well as `metadata.name`: an upstream bug kept for compatibility.
    fn fields(&self, pv: &Value) -> Vec<(&'static str, String)> {
        vec![("name", super::string_at(pv, "metadata.name"))]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pv() -> Value {
        json!({"metadata": {"name": "pv-1", "creationTimestamp": "2026-11-30T08:00:00Z"},
               "spec": {"accessModes": ["ReadWriteOnce"], "capacity": {"storage": "5Gi"},
                        "hostPath": {"path": "/data/pv-1"}}})
    }

    fn created() -> Value {
        let mut obj = pv();
        PersistentVolumeStrategy.prepare_for_create(&mut obj);
        obj
    }

    fn errors(errs: Vec<FieldError>) -> Vec<String> {
        errs.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn a_new_volume_is_a_pending_retained_filesystem_volume() {
        let obj = created();
        assert_eq!(obj["spec"]["persistentVolumeReclaimPolicy"], "Retain");
        assert_eq!(obj["spec"]["volumeMode"], "Filesystem");
        assert_eq!(obj["status"]["phase"], "Pending");
        assert_eq!(
            obj["status"]["lastPhaseTransitionTime"],
            "2026-11-30T08:00:00Z"
        );
        assert!(PersistentVolumeStrategy.validate(&obj).is_empty());
    }

    #[test]
    fn a_phase_change_through_status_moves_the_transition_time() {
        let old = created();
        let now: jiff::Timestamp = "2026-05-01T10:00:00Z".parse().unwrap();
        let mut bound = old.clone();
        bound["status"] = json!({"phase": "Bound"});
        let mut through_status = bound.clone();
        assert!(!PersistentVolumeStrategy.prepare_for_subresource_update(
            "status",
            &mut through_status,
            &old
        ));
        assert!(through_status["status"]["lastPhaseTransitionTime"].is_string());
        stamp_phase_transition(&mut bound, &old, now);
        assert_eq!(
            bound["status"]["lastPhaseTransitionTime"],
            "2026-05-01T10:00:00Z"
        );
        let mut same = bound.clone();
        same["status"] = json!({"phase": "Bound", "message": "x"});
        stamp_phase_transition(&mut same, &bound, "2026-06-01T00:00:00Z".parse().unwrap());
        assert_eq!(
            same["status"]["lastPhaseTransitionTime"],
            "2026-05-01T10:00:00Z"
        );
    }

    #[test]
    fn validation_cases_read_as_upstream_messages() {
        let cases: Vec<crate::strategy::common::Case<&str>> = vec![
            (
                "no capacity",
                Box::new(|o| o["spec"]["capacity"] = json!({})),
                vec![
                    "spec.capacity: Required value",
                    "spec.capacity: Unsupported value: {}: supported values: \"storage\"",
                ],
            ),
            (
                "a capacity of something else",
                Box::new(|o| o["spec"]["capacity"] = json!({"storage": "1Gi", "cpu": "1"})),
                vec![
                    "spec.capacity: Unsupported value: {\"cpu\":\"1\",\"storage\":\"1Gi\"}: supported values: \"storage\"",
                ],
            ),
            (
                "a zero capacity",
                Box::new(|o| o["spec"]["capacity"]["storage"] = json!("0")),
                vec!["spec.capacity[storage]: Invalid value: \"0\": must be greater than zero"],
            ),
            (
                "no access modes",
                Box::new(|o| o["spec"]["accessModes"] = json!([])),
                vec!["spec.accessModes: Required value"],
            ),
            (
                "no source",
                Box::new(|o| {
                    o["spec"].as_object_mut().unwrap().remove("hostPath");
                }),
                vec!["spec: Required value: must specify a volume type"],
            ),
            (
                "two sources",
                Box::new(|o| o["spec"]["nfs"] = json!({"server": "nfs", "path": "/x"})),
                vec!["spec.nfs: Forbidden: may not specify more than 1 volume type"],
            ),
            (
                "an unknown reclaim policy",
                Box::new(|o| o["spec"]["persistentVolumeReclaimPolicy"] = json!("Keep")),
                vec![
                    "spec.persistentVolumeReclaimPolicy: Unsupported value: \"Keep\": supported values: \"Delete\", \"Recycle\", \"Retain\"",
                ],
            ),
            (
                "a local volume without node affinity",
                Box::new(|o| {
                    let spec = o["spec"].as_object_mut().unwrap();
                    spec.remove("hostPath");
                    spec.insert("local".into(), json!({"path": "/mnt/disk"}));
                }),
                vec!["spec.nodeAffinity: Required value: Local volume requires node affinity"],
            ),
        ];
        for (name, change, want) in cases {
            let mut obj = created();
            change(&mut obj);
            assert_eq!(
                errors(PersistentVolumeStrategy.validate(&obj)),
                want,
                "{name}"
            );
        }
    }

    #[test]
    fn the_source_is_immutable_but_capacity_may_change() {
        let old = created();
        let mut bigger = old.clone();
        bigger["spec"]["capacity"]["storage"] = json!("10Gi");
        assert!(
            PersistentVolumeStrategy
                .validate_update(&bigger, &old)
                .is_empty()
        );
        let mut moved = old.clone();
        moved["spec"]["hostPath"]["path"] = json!("/elsewhere");
        assert_eq!(
            errors(PersistentVolumeStrategy.validate_update(&moved, &old)),
            [
                "spec.persistentvolumesource: Forbidden: spec.persistentvolumesource is immutable after creation"
            ]
        );
    }
}
