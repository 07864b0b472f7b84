//! The CSI kinds of `storage.k8s.io/v1`: CSIDrivers (upstream's `SetDefaults_CSIDriver` and
//! `ValidateCSIDriver` spec checks, `attachRequired` and `volumeLifecycleModes` fixed once
//! created), CSINodes (`ValidateCSINode`: named drivers with node IDs, unique, non-negative
//! allocatable counts) and CSIStorageCapacities (`ValidateCSIStorageCapacity`: a class name, a
//! non-negative capacity, a valid node topology; only the capacities change on update).

use serde_json::{Value, json};
use skiff_apimachinery::validation::{
    FieldError, FieldPath, is_dns1123_subdomain, validate_label_selector,
};

use super::Strategy;
use super::common::{NEGATIVE, immutable, int, nonnegative, object_at, set_default, str_at};
use super::volume::quantity;

/// Upstream's `csiNodeIDMaxLength`.
const NODE_ID_MAX: usize = 192;
/// Upstream's `supportedFSGroupPolicies`.
const FS_GROUP_POLICIES: &[&str] = &["File", "None", "ReadWriteOnceWithFSType"];
/// Upstream's `supportedVolumeLifecycleModes`.
const LIFECYCLE_MODES: &[&str] = &["Ephemeral", "Persistent"];

/// Upstream's `ValidateCSIDriverName` (case-insensitive DNS subdomain of at most 63 characters).
fn driver_name(name: &str, path: &FieldPath) -> Vec<FieldError> {
    if name.is_empty() {
        return vec![FieldError::required(path, "")];
    }
    let mut errs = Vec::new();
    if name.len() > 63 {
        errs.push(FieldError::too_long(path, 63));
    }
    errs.extend(
        is_dns1123_subdomain(&name.to_lowercase())
            .into_iter()
            .map(|msg| FieldError::invalid(path, name, msg)),
    );
    errs
}

#[derive(Debug)]
pub struct CsiDriverStrategy;

fn driver_defaults(driver: &mut Value) {
    let spec = object_at(driver, "spec");
    set_default(spec, "attachRequired", json!(true));
    set_default(spec, "podInfoOnMount", json!(false));
    set_default(spec, "storageCapacity", json!(false));
    set_default(spec, "fsGroupPolicy", json!("ReadWriteOnceWithFSType"));
    set_default(spec, "requiresRepublish", json!(false));
    set_default(spec, "seLinuxMount", json!(false));
    if super::common::is_empty(spec.get("volumeLifecycleModes")) {
        spec["volumeLifecycleModes"] = json!(["Persistent"]);
    }
}

impl Strategy for CsiDriverStrategy {
    fn prepare_for_create(&self, driver: &mut Value) {
        driver_defaults(driver);
    }

    fn prepare_for_update(&self, driver: &mut Value, _old: &Value) {
        driver_defaults(driver);
    }

    fn validate(&self, driver: &Value) -> Vec<FieldError> {
        let null = Value::Null;
        let spec = driver.get("spec").unwrap_or(&null);
        let path = FieldPath::new("spec");
        let mut errs = Vec::new();
        for field in ["attachRequired", "podInfoOnMount"] {
            if spec.get(field).is_none_or(Value::is_null) {
                errs.push(FieldError::required(&path.child(field), ""));
            }
        }
        let policy = str_at(spec, "/fsGroupPolicy");
        if !policy.is_empty() && !FS_GROUP_POLICIES.contains(&policy) {
            errs.push(FieldError::not_supported(
                &path.child("fsGroupPolicy"),
                policy,
                FS_GROUP_POLICIES,
            ));
        }
        for mode in super::common::strings(spec.get("volumeLifecycleModes")) {
            if !LIFECYCLE_MODES.contains(&mode) {
                errs.push(FieldError::not_supported(
                    &path.child("volumeLifecycleModes"),
                    mode,
                    LIFECYCLE_MODES,
                ));
            }
        }
        let requests = path.child("tokenRequests");
        let mut audiences: Vec<&str> = Vec::new();
        for (i, request) in spec
            .get("tokenRequests")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .enumerate()
        {
            let audience = str_at(request, "/audience");
            if audiences.contains(&audience) {
                errs.push(FieldError::duplicate(
                    &requests.index(i).child("audience"),
                    audience,
                ));
            }
            audiences.push(audience);
            if let Some(seconds) = request.get("expirationSeconds").and_then(int) {
                let p = requests.index(i).child("expirationSeconds");
                if seconds < 600 {
                    errs.push(FieldError::invalid(
                        &p,
                        seconds,
                        "may not specify a duration less than 10 minutes",
                    ));
                } else if seconds > 1 << 32 {
                    errs.push(FieldError::invalid(
                        &p,
                        seconds,
                        "may not specify a duration larger than 2^32 seconds",
                    ));
                }
            }
        }
        errs
    }

    fn validate_update(&self, driver: &Value, old: &Value) -> Vec<FieldError> {
        let mut errs = self.validate(driver);
        for field in ["attachRequired", "volumeLifecycleModes"] {
            let ptr = format!("/spec/{field}");
            errs.extend(immutable(
                driver.pointer(&ptr),
                old.pointer(&ptr),
                &FieldPath::new("spec").child(field),
            ));
        }
        errs
    }
}

#[derive(Debug)]
pub struct CsiNodeStrategy;

impl Strategy for CsiNodeStrategy {
    fn validate(&self, node: &Value) -> Vec<FieldError> {
        let drivers_path = FieldPath::new("spec").child("drivers");
        let mut errs = Vec::new();
        let mut names: Vec<&str> = Vec::new();
        for (i, driver) in node
            .pointer("/spec/drivers")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .enumerate()
        {
            let path = drivers_path.index(i);
            let name = str_at(driver, "/name");
            errs.extend(driver_name(name, &path.child("name")));
            if names.contains(&name) {
                errs.push(FieldError::duplicate(&path.child("name"), name));
            }
            names.push(name);
            let node_id = str_at(driver, "/nodeID");
            if node_id.is_empty() {
                errs.push(FieldError::required(&path.child("nodeID"), ""));
            } else if node_id.len() > NODE_ID_MAX {
                errs.push(FieldError::too_long(&path.child("nodeID"), NODE_ID_MAX));
            }
            errs.extend(nonnegative(
                driver.pointer("/allocatable/count"),
                &path.child("allocatable").child("count"),
            ));
        }
        errs
    }
}

#[derive(Debug)]
pub struct CsiStorageCapacityStrategy;

impl Strategy for CsiStorageCapacityStrategy {
    fn validate(&self, capacity: &Value) -> Vec<FieldError> {
        let mut errs = Vec::new();
        if let Some(topology) = capacity.get("nodeTopology").filter(|t| !t.is_null()) {
            errs.extend(validate_label_selector(
                topology,
                &FieldPath::new("nodeTopology"),
            ));
        }
        let class = str_at(capacity, "/storageClassName");
        errs.extend(
            is_dns1123_subdomain(class)
                .into_iter()
                .map(|msg| FieldError::invalid(&FieldPath::new("storageClassName"), class, msg)),
        );
        for field in ["capacity", "maximumVolumeSize"] {
            let path = FieldPath::new(field);
            match capacity
                .get(field)
                .filter(|v| !v.is_null())
                .map(|v| (v, quantity(v, &path)))
            {
                Some((_, Err(e))) => errs.push(e),
                Some((v, Ok(q))) if q.milli_value() < 0 => {
                    errs.push(FieldError::invalid(&path, v.clone(), NEGATIVE));
                }
                _ => {}
            }
        }
        errs
    }

    fn validate_update(&self, capacity: &Value, old: &Value) -> Vec<FieldError> {
        let mut errs = self.validate(capacity);
        for field in ["nodeTopology", "storageClassName"] {
            errs.extend(immutable(
                capacity.get(field),
                old.get(field),
                &FieldPath::new(field),
            ));
        }
        errs
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn errors(errs: Vec<FieldError>) -> Vec<String> {
        errs.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn a_new_driver_gets_upstreams_defaults() {
        let mut driver = json!({"metadata": {"name": "csi.example.com"}});
        CsiDriverStrategy.prepare_for_create(&mut driver);
        assert_eq!(
            driver["spec"],
            json!({"attachRequired": true, "podInfoOnMount": false, "storageCapacity": false,
                   "fsGroupPolicy": "ReadWriteOnceWithFSType", "requiresRepublish": false,
                   "seLinuxMount": false, "volumeLifecycleModes": ["Persistent"]})
        );
        assert!(CsiDriverStrategy.validate(&driver).is_empty());
        let mut changed = driver.clone();
        changed["spec"]["attachRequired"] = json!(false);
        changed["spec"]["fsGroupPolicy"] = json!("Sometimes");
        assert_eq!(
            errors(CsiDriverStrategy.validate_update(&changed, &driver)),
            [
                "spec.fsGroupPolicy: Unsupported value: \"Sometimes\": supported values: \"File\", \"None\", \"ReadWriteOnceWithFSType\"",
                "spec.attachRequired: Invalid value: false: field is immutable",
            ]
        );
    }

    #[test]
    fn csi_nodes_name_each_driver_once_with_a_node_id() {
        let node = json!({"spec": {"drivers": [
            {"name": "csi.example.com", "nodeID": "n1", "allocatable": {"count": 3}},
            {"name": "csi.example.com", "nodeID": "", "allocatable": {"count": -1}}]}});
        assert_eq!(
            errors(CsiNodeStrategy.validate(&node)),
            [
                "spec.drivers[1].name: Duplicate value: \"csi.example.com\"",
                "spec.drivers[1].nodeID: Required value",
                "spec.drivers[1].allocatable.count: Invalid value: -1: must be greater than or equal to 0",
            ]
        );
    }

    #[test]
    fn storage_capacities_need_a_class_and_a_non_negative_capacity() {
        let capacity = json!({"storageClassName": "fast", "capacity": "-1Gi"});
        assert_eq!(
            errors(CsiStorageCapacityStrategy.validate(&capacity)),
            ["capacity: Invalid value: \"-1Gi\": must be greater than or equal to 0"]
        );
        let old = json!({"storageClassName": "fast", "capacity": "1Gi"});
        let mut moved = old.clone();
        moved["storageClassName"] = json!("slow");
        moved["capacity"] = json!("2Gi");
        assert_eq!(
            errors(CsiStorageCapacityStrategy.validate_update(&moved, &old)),
            ["storageClassName: Invalid value: \"slow\": field is immutable"]
        );
    }
}
