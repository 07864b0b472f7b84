//! PersistentVolumeClaims: upstream's defaults (`volumeMode: Filesystem`, `status.phase:
//! Pending`), `ValidatePersistentVolumeClaimSpec` (access modes, a positive storage request,
//! class names, selector, volume mode) and `ValidatePersistentVolumeClaimUpdate` (the spec is
//! immutable but for `volumeName` once, and storage requests and the volume attributes class of
//! bound claims; storage may shrink only down to above `status.capacity`).

use serde_json::{Value, json};
use skiff_apimachinery::validation::{
    FieldError, FieldPath, validate_annotations, validate_label_selector, validate_labels,
};

use super::Strategy;
use super::common::{immutable, object_at, semantic_eq, set_default};
use super::volume::{
    positive_quantity, storage_millis, validate_access_modes, validate_class_name,
    validate_volume_mode,
};

#[derive(Debug)]
pub struct PersistentVolumeClaimStrategy;

/// Upstream's `SetDefaults_PersistentVolumeClaim` and `…ClaimSpec`.
fn defaults(pvc: &mut Value) {
    set_default(object_at(pvc, "spec"), "volumeMode", json!("Filesystem"));
    set_default(object_at(pvc, "status"), "phase", json!("Pending"));
}

/// The storage-class annotation older claims name their class with.
const BETA_CLASS_ANNOTATION: &str = "volume.beta.kubernetes.io/storage-class";

/// Upstream's `ValidatePersistentVolumeClaimSpec` at `spec`.
pub fn validate_claim_spec(spec: &Value, path: &FieldPath) -> Vec<FieldError> {
    let mut errs = validate_access_modes(
        spec.get("accessModes"),
        &path.child("accessModes"),
        Some("at least 1 access mode is required"),
    );
    if let Some(selector) = spec.get("selector").filter(|s| !s.is_null()) {
        errs.extend(validate_label_selector(selector, &path.child("selector")));
    }
    let storage_path = path.child("resources").key("storage");
    match spec.pointer("/resources/requests/storage") {
        None | Some(Value::Null) => errs.push(FieldError::required(&storage_path, "")),
        Some(v) => errs.extend(positive_quantity(v, &storage_path)),
    }
    errs.extend(validate_class_name(
        spec.get("storageClassName"),
        &path.child("storageClassName"),
    ));
    errs.extend(validate_volume_mode(
        spec.get("volumeMode"),
        &path.child("volumeMode"),
    ));
    errs.extend(validate_class_name(
        spec.get("volumeAttributesClassName"),
        &path.child("volumeAttributesClassName"),
    ));
    for source in ["dataSource", "dataSourceRef"] {
        if let Some(src) = spec.get(source).filter(|s| !s.is_null()) {
            let p = path.child(source);
            for field in ["kind", "name"] {
                if src
                    .get(field)
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .is_empty()
                {
                    errs.push(FieldError::required(&p.child(field), ""));
                }
            }
        }
    }
    errs
}

/// The fields of a claim template's metadata in the order of upstream's `ObjectMeta` struct,
/// each with the name its error gives (the Go field name with its first letter lowered); all
/// but labels and annotations must be unset in a generic ephemeral volume's template.
const TEMPLATE_META_FIELDS: &[(&str, &str)] = &[
    ("name", "name"),
    ("generateName", "generateName"),
    ("namespace", "namespace"),
    ("selfLink", "selfLink"),
    ("uid", "uID"),
    ("resourceVersion", "resourceVersion"),
    ("generation", "generation"),
    ("creationTimestamp", "creationTimestamp"),
    ("deletionTimestamp", "deletionTimestamp"),
    ("deletionGracePeriodSeconds", "deletionGracePeriodSeconds"),
    ("ownerReferences", "ownerReferences"),
    ("finalizers", "finalizers"),
    ("managedFields", "managedFields"),
];

/// Whether a JSON value is its Go field's zero value (unset, null, empty or zero).
fn is_zero(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
        Value::Number(n) => n.as_f64() == Some(0.0),
        Value::Bool(b) => !b,
    }
}

/// Upstream's `validateEphemeralVolumeSource` of a pod volume's `ephemeral` at `path`: a
/// `volumeClaimTemplate` is required, its metadata may set only valid labels and annotations,
/// and its spec is validated as a claim's.
pub fn validate_ephemeral_source(source: &Value, path: &FieldPath) -> Vec<FieldError> {
    let template_path = path.child("volumeClaimTemplate");
    let Some(template) = source.get("volumeClaimTemplate").filter(|t| !t.is_null()) else {
        return vec![FieldError::required(&template_path, "")];
    };
    let meta_path = template_path.child("metadata");
    let empty = json!({});
    let meta = template
        .get("metadata")
        .filter(|m| m.is_object())
        .unwrap_or(&empty);
    let mut errs = Vec::new();
    if let Some(annotations) = meta.get("annotations").filter(|a| !a.is_null()) {
        errs.extend(validate_annotations(
            annotations,
            &meta_path.child("annotations"),
        ));
    }
    if let Some(labels) = meta.get("labels").filter(|l| !l.is_null()) {
        errs.extend(validate_labels(labels, &meta_path.child("labels")));
    }
    for (key, go_name) in TEMPLATE_META_FIELDS {
        if meta.get(*key).is_some_and(|v| !is_zero(v)) {
            errs.push(FieldError::forbidden(
                &meta_path.child(*go_name),
                "cannot be set for an ephemeral volume",
            ));
        }
    }
    let spec = template.get("spec").unwrap_or(&empty);
    errs.extend(validate_claim_spec(spec, &template_path.child("spec")));
    errs
}

/// Upstream's `SetDefaults_PersistentVolumeClaimSpec` of the claim template of a pod volume's
/// `ephemeral` source (`volumeMode: Filesystem`).
pub fn default_ephemeral_source(source: &mut Value) {
    if let Some(spec) = source
        .get_mut("volumeClaimTemplate")
        .and_then(|t| t.get_mut("spec"))
        .filter(|s| s.is_object())
    {
        set_default(spec, "volumeMode", json!("Filesystem"));
    }
}

fn spec_of(v: &Value) -> Value {
    v.get("spec").cloned().unwrap_or_else(|| json!({}))
}

impl Strategy for PersistentVolumeClaimStrategy {
    fn prepare_for_create(&self, pvc: &mut Value) {
        defaults(pvc);
    }

    fn prepare_for_update(&self, pvc: &mut Value, _old: &Value) {
        defaults(pvc);
    }

    fn validate(&self, pvc: &Value) -> Vec<FieldError> {
        validate_claim_spec(&spec_of(pvc), &FieldPath::new("spec"))
    }

    fn validate_update(&self, pvc: &Value, old: &Value) -> Vec<FieldError> {
        let mut errs = self.validate(pvc);
        let (mut new_spec, mut old_spec) = (spec_of(pvc), spec_of(old));
        // The volume binder sets `volumeName` once.
        if old_spec
            .get("volumeName")
            .and_then(Value::as_str)
            .unwrap_or("")
            .is_empty()
        {
            match new_spec.get("volumeName") {
                Some(v) => old_spec["volumeName"] = v.clone(),
                None => {
                    if let Some(m) = old_spec.as_object_mut() {
                        m.remove("volumeName");
                    }
                }
            }
        }
        // A claim created without a class may get one later (upstream's retroactive default
        // StorageClass assignment by the PersistentVolume controller), unless the beta
        // annotation named its class.
        let beta = old
            .pointer("/metadata/annotations/volume.beta.kubernetes.io~1storage-class")
            .is_some();
        let unset = |v: Option<&Value>| v.is_none_or(Value::is_null);
        if !beta
            && unset(old_spec.get("storageClassName"))
            && new_spec
                .get("storageClassName")
                .and_then(Value::as_str)
                .is_some_and(|c| !c.is_empty())
        {
            old_spec["storageClassName"] = new_spec["storageClassName"].clone();
        }
        // Claims bound to a volume may ask for more storage and change their attributes class.
        if pvc.pointer("/status/phase").and_then(Value::as_str) == Some("Bound") {
            for (field, ptr) in [
                ("storage", "/resources/requests/storage"),
                ("volumeAttributesClassName", "/volumeAttributesClassName"),
            ] {
                let old_value = old_spec.pointer(ptr).cloned();
                if new_spec.pointer(ptr).is_some() || field == "volumeAttributesClassName" {
                    match old_value {
                        Some(v) => set_pointer(&mut new_spec, ptr, v),
                        None => remove_pointer(&mut new_spec, ptr),
                    }
                }
            }
        }
        if !semantic_eq(Some(&new_spec), Some(&old_spec)) {
            errs.push(FieldError::forbidden(
                &FieldPath::new("spec"),
                "spec is immutable after creation except resources.requests and volumeAttributesClassName for bound claims",
            ));
        }
        let requests = |v: &Value| storage_millis(v.pointer("/spec/resources/requests"));
        let capacity = storage_millis(old.pointer("/status/capacity")).unwrap_or(0);
        if let (Some(new_size), Some(old_size)) = (requests(pvc), requests(old))
            && new_size < old_size
            && new_size <= capacity
        {
            errs.push(FieldError::forbidden(
                &FieldPath::new("spec")
                    .child("resources")
                    .child("requests")
                    .child("storage"),
                "field can not be less than status.capacity",
            ));
        }
        errs.extend(immutable(
            pvc.pointer("/spec/volumeMode"),
            old.pointer("/spec/volumeMode"),
            &FieldPath::new("volumeMode"),
        ));
        let annotation = |v: &Value| {
            v.pointer("/metadata/annotations")
                .and_then(|a| a.get(BETA_CLASS_ANNOTATION))
                .cloned()
        };
        if annotation(old).is_some() || annotation(pvc).is_some() {
            let (new_class, old_class) = (annotation(pvc), annotation(old));
            if new_class != old_class {
                errs.push(FieldError::invalid(
                    &FieldPath::new("metadata")
                        .child("annotations")
                        .key(BETA_CLASS_ANNOTATION),
                    new_class.unwrap_or(json!("")),
                    super::common::IMMUTABLE,
                ));
            }
        }
        errs
    }

    /// `name` as well as `metadata.name`: an upstream bug kept for compatibility.
    fn fields(&self, pvc: &Value) -> Vec<(&'static str, String)> {
        vec![("name", super::string_at(pvc, "metadata.name"))]
    }
}

fn set_pointer(v: &mut Value, ptr: &str, value: Value) {
    let mut cur = v;
    let parts: Vec<&str> = ptr.trim_start_matches('/').split('/').collect();
    for part in &parts[..parts.len() - 1] {
        cur = object_at(cur, part);
    }
    if let Some(m) = cur.as_object_mut() {
        m.insert(parts[parts.len() - 1].to_string(), value);
    }
}

fn remove_pointer(v: &mut Value, ptr: &str) {
    let (parent, last) = ptr.rsplit_once('/').unwrap_or(("", ptr));
    let target = if parent.is_empty() {
        Some(v)
    } else {
        v.pointer_mut(parent)
    };
    if let Some(m) = target.and_then(Value::as_object_mut) {
        m.remove(last);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pvc() -> Value {
        json!({"metadata": {"name": "data"},
               "spec": {"accessModes": ["ReadWriteOnce"],
                        "resources": {"requests": {"storage": "1Gi"}}}})
    }

    fn created() -> Value {
        let mut obj = pvc();
        PersistentVolumeClaimStrategy.prepare_for_create(&mut obj);
        obj
    }

    fn errors(errs: Vec<FieldError>) -> Vec<String> {
        errs.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn a_new_claim_is_a_pending_filesystem_claim() {
        let obj = created();
        assert_eq!(obj["spec"]["volumeMode"], "Filesystem");
        assert_eq!(obj["status"]["phase"], "Pending");
        assert!(PersistentVolumeClaimStrategy.validate(&obj).is_empty());
    }

    #[test]
    fn validation_cases_read_as_upstream_messages() {
        let cases: Vec<crate::strategy::common::Case<&str>> = vec![
            (
                "no access modes",
                Box::new(|o| o["spec"]["accessModes"] = json!([])),
                vec!["spec.accessModes: Required value: at least 1 access mode is required"],
            ),
            (
                "an unknown access mode",
                Box::new(|o| o["spec"]["accessModes"] = json!(["ReadWriteSometimes"])),
                vec![
                    "spec.accessModes: Unsupported value: \"ReadWriteSometimes\": supported values: \"ReadOnlyMany\", \"ReadWriteMany\", \"ReadWriteOnce\", \"ReadWriteOncePod\"",
                ],
            ),
            (
                "no storage request",
                Box::new(|o| o["spec"]["resources"] = json!({})),
                vec!["spec.resources[storage]: Required value"],
            ),
            (
                "a zero storage request",
                Box::new(|o| o["spec"]["resources"]["requests"]["storage"] = json!("0")),
                vec!["spec.resources[storage]: Invalid value: \"0\": must be greater than zero"],
            ),
            (
                "a bad class name",
                Box::new(|o| o["spec"]["storageClassName"] = json!("Fast_SSD")),
                vec![
                    "spec.storageClassName: Invalid value: \"Fast_SSD\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')",
                ],
            ),
            (
                "an unknown volume mode",
                Box::new(|o| o["spec"]["volumeMode"] = json!("Raw")),
                vec![
                    "spec.volumeMode: Unsupported value: \"Raw\": supported values: \"Block\", \"Filesystem\"",
                ],
            ),
        ];
        for (name, change, want) in cases {
            let mut obj = created();
            change(&mut obj);
            assert_eq!(
                errors(PersistentVolumeClaimStrategy.validate(&obj)),
                want,
                "{name}"
            );
        }
    }

    #[test]
    fn a_claim_without_a_class_may_get_one_once() {
        let strategy = PersistentVolumeClaimStrategy;
        let old = created();
        let mut classed = old.clone();
        classed["spec"]["storageClassName"] = json!("local-path");
        assert!(strategy.validate_update(&classed, &old).is_empty());
        let mut changed = classed.clone();
        changed["spec"]["storageClassName"] = json!("other");
        assert_eq!(
            errors(strategy.validate_update(&changed, &classed)),
            [
                "spec: Forbidden: spec is immutable after creation except resources.requests and volumeAttributesClassName for bound claims"
            ]
        );
    }

    #[test]
    fn the_spec_is_immutable_but_for_the_volume_name_once() {
        let old = created();
        let mut bound = old.clone();
        bound["spec"]["volumeName"] = json!("pv-1");
        assert!(
            PersistentVolumeClaimStrategy
                .validate_update(&bound, &old)
                .is_empty()
        );
        let mut rebound = bound.clone();
        rebound["spec"]["volumeName"] = json!("pv-2");
        assert_eq!(
            errors(PersistentVolumeClaimStrategy.validate_update(&rebound, &bound)),
            [
                "spec: Forbidden: spec is immutable after creation except resources.requests and volumeAttributesClassName for bound claims"
            ]
        );
        let mut grown = old.clone();
        grown["spec"]["resources"]["requests"]["storage"] = json!("2Gi");
        assert_eq!(
            PersistentVolumeClaimStrategy
                .validate_update(&grown, &old)
                .len(),
            1,
            "pending claims cannot grow"
        );
    }

    #[test]
    fn bound_claims_may_grow_but_not_shrink_to_their_capacity() {
        let mut old = created();
        old["spec"]["volumeName"] = json!("pv-1");
        old["status"] = json!({"phase": "Bound", "capacity": {"storage": "1Gi"}});
        let mut grown = old.clone();
        grown["spec"]["resources"]["requests"]["storage"] = json!("2Gi");
        assert!(
            PersistentVolumeClaimStrategy
                .validate_update(&grown, &old)
                .is_empty()
        );
        let mut shrunk = grown.clone();
        shrunk["spec"]["resources"]["requests"]["storage"] = json!("512Mi");
        assert_eq!(
            errors(PersistentVolumeClaimStrategy.validate_update(&shrunk, &grown)),
            [
                "spec.resources.requests.storage: Forbidden: field can not be less than status.capacity"
            ]
        );
        let mut block = old.clone();
        block["spec"]["volumeMode"] = json!("Block");
        assert!(
            errors(PersistentVolumeClaimStrategy.validate_update(&block, &old))
                .contains(&"volumeMode: Invalid value: \"Block\": field is immutable".to_string())
        );
    }
}
