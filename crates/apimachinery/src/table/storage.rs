//! Tables of the storage kinds: PersistentVolumes and PersistentVolumeClaims (core/v1) and the
//! `storage.k8s.io/v1` kinds: storage classes, volume attachments, CSI drivers, CSI nodes and
//! CSI storage capacities (upstream's `printPersistentVolume`, `printStorageClass`, …).

use super::value::{age, len, list, name, object, opt_bool, present, scalar, text};
use super::{AGE, Column, NAME, Printer};
use jiff::Timestamp;
use serde_json::Value;

/// The annotation older objects name their storage class with (it wins over the field).
const BETA_CLASS_ANNOTATION: &str = "volume.beta.kubernetes.io/storage-class";

/// Upstream's `GetAccessModesAsString`: `RWO`, `ROX`, `RWX`, `RWOP` in that order, each once.
fn access_modes(modes: &[Value]) -> String {
    let has = |m: &str| modes.iter().any(|v| v.as_str() == Some(m));
    [
        ("ReadWriteOnce", "RWO"),
        ("ReadOnlyMany", "ROX"),
        ("ReadWriteMany", "RWX"),
        ("ReadWriteOncePod", "RWOP"),
    ]
    .iter()
    .filter(|(mode, _)| has(mode))
    .map(|(_, short)| *short)
    .collect::<Vec<_>>()
    .join(",")
}

/// The class of a volume or claim: the beta annotation, else `spec.storageClassName`.
fn storage_class(v: &Value) -> String {
    object(v, "/metadata/annotations")
        .and_then(|a| a.get(BETA_CLASS_ANNOTATION))
        .and_then(Value::as_str)
        .unwrap_or_else(|| text(v, "/spec/storageClassName"))
        .to_string()
}

/// A quantity's string, `"0"` when unset (a zero `resource.Quantity`).
fn quantity(v: &Value, ptr: &str) -> String {
    scalar(v.pointer(ptr)).unwrap_or_else(|| "0".to_string())
}

/// An optional string field, `<unset>` when nil.
fn unset_or(v: &Value, ptr: &str) -> String {
    match v.pointer(ptr).and_then(Value::as_str) {
        Some(s) => s.to_string(),
        None => "<unset>".to_string(),
    }
}

/// The phase, `Terminating` once deletion started.
fn phase(v: &Value) -> String {
    if present(v, "/metadata/deletionTimestamp") {
        "Terminating".to_string()
    } else {
        text(v, "/status/phase").to_string()
    }
}

const VOLUME_ATTRIBUTES_CLASS: Column = Column::new(
    "VolumeAttributesClass",
    "string",
    0,
    "The VolumeAttributesClass of the object.",
);
const VOLUME_MODE: Column = Column::new(
    "VolumeMode",
    "string",
    1,
    "Block or Filesystem, as spec.volumeMode says.",
);

pub(super) static PERSISTENT_VOLUMES: Printer = Printer {
    columns: &[
        NAME,
        Column::new(
            "Capacity",
            "string",
            0,
            "The storage capacity of the volume.",
        ),
        Column::new(
            "Access Modes",
            "string",
            0,
            "The ways the volume can be mounted.",
        ),
        Column::new(
            "Reclaim Policy",
            "string",
            0,
            "What happens to the volume when released from its claim.",
        ),
        Column::new("Status", "string", 0, "The phase of the volume."),
        Column::new(
            "Claim",
            "string",
            0,
            "The namespace/name of the claim bound to the volume.",
        ),
        Column::new("StorageClass", "string", 0, "StorageClass of the pv"),
        VOLUME_ATTRIBUTES_CLASS,
        Column::new(
            "Reason",
            "string",
            0,
            "Why the volume is in its phase, if it failed.",
        ),
        AGE,
        VOLUME_MODE,
    ],
    cells: persistent_volume_cells,
};

fn persistent_volume_cells(pv: &Value, now: Timestamp) -> Vec<Value> {
    let claim = if present(pv, "/spec/claimRef") {
        format!(
            "{}/{}",
            text(pv, "/spec/claimRef/namespace"),
            text(pv, "/spec/claimRef/name")
        )
    } else {
        String::new()
    };
    vec![
        name(pv).into(),
        quantity(pv, "/spec/capacity/storage").into(),
        access_modes(list(pv, "/spec/accessModes")).into(),
        text(pv, "/spec/persistentVolumeReclaimPolicy").into(),
        phase(pv).into(),
        claim.into(),
        storage_class(pv).into(),
        unset_or(pv, "/spec/volumeAttributesClassName").into(),
        text(pv, "/status/reason").into(),
        age(pv, now),
        unset_or(pv, "/spec/volumeMode").into(),
    ]
}

pub(super) static PERSISTENT_VOLUME_CLAIMS: Printer = Printer {
    columns: &[
        NAME,
        Column::new("Status", "string", 0, "The phase of the claim."),
        Column::new(
            "Volume",
            "string",
            0,
            "The name of the volume bound to the claim.",
        ),
        Column::new("Capacity", "string", 0, "The capacity of the bound volume."),
        Column::new(
            "Access Modes",
            "string",
            0,
            "The access modes of the bound volume.",
        ),
        Column::new("StorageClass", "string", 0, "StorageClass of the pvc"),
        VOLUME_ATTRIBUTES_CLASS,
        AGE,
        VOLUME_MODE,
    ],
    cells: persistent_volume_claim_cells,
};

fn persistent_volume_claim_cells(pvc: &Value, now: Timestamp) -> Vec<Value> {
    let volume = text(pvc, "/spec/volumeName");
    let (capacity, modes) = if volume.is_empty() {
        (String::new(), String::new())
    } else {
        (
            quantity(pvc, "/status/capacity/storage"),
            access_modes(list(pvc, "/status/accessModes")),
        )
    };
    vec![
        name(pvc).into(),
        phase(pvc).into(),
        volume.into(),
        capacity.into(),
        modes.into(),
        storage_class(pvc).into(),
        unset_or(pvc, "/spec/volumeAttributesClassName").into(),
        age(pvc, now),
        unset_or(pvc, "/spec/volumeMode").into(),
    ]
}

pub(super) static STORAGE_CLASSES: Printer = Printer {
    columns: &[
        NAME,
        Column::new(
            "Provisioner",
            "string",
            0,
            "The driver that provisions volumes of the class.",
        ),
        Column::new(
            "ReclaimPolicy",
            "string",
            0,
            "What happens to provisioned volumes when released.",
        ),
        Column::new(
            "VolumeBindingMode",
            "string",
            0,
            "When volumes are provisioned and bound.",
        ),
        Column::new(
            "AllowVolumeExpansion",
            "string",
            0,
            "Whether claims of the class may grow.",
        ),
        AGE,
    ],
    cells: storage_class_cells,
};

/// Whether a class is marked as the default one (GA or beta annotation).
fn is_default_class(sc: &Value) -> bool {
    let annotations = object(sc, "/metadata/annotations");
    [
        "storageclass.kubernetes.io/is-default-class",
        "storageclass.beta.kubernetes.io/is-default-class",
    ]
    .iter()
    .any(|a| annotations.and_then(|m| m.get(*a)).and_then(Value::as_str) == Some("true"))
}

fn storage_class_cells(sc: &Value, now: Timestamp) -> Vec<Value> {
    let mut shown = name(sc).to_string();
    if is_default_class(sc) {
        shown.push_str(" (default)");
    }
    let or = |ptr: &str, default: &str| match text(sc, ptr) {
        "" => default.to_string(),
        s => s.to_string(),
    };
    vec![
        shown.into(),
        text(sc, "/provisioner").into(),
        or("/reclaimPolicy", "Delete").into(),
        or("/volumeBindingMode", "Immediate").into(),
        opt_bool(sc, "/allowVolumeExpansion")
            .unwrap_or(false)
            .into(),
        age(sc, now),
    ]
}

pub(super) static VOLUME_ATTACHMENTS: Printer = Printer {
    columns: &[
        NAME,
        Column::new(
            "Attacher",
            "string",
            0,
            "The CSI driver that attaches the volume.",
        ),
        Column::new("PV", "string", 0, "The PersistentVolume being attached."),
        Column::new("Node", "string", 0, "The node the volume is attached to."),
        Column::new(
            "Attached",
            "boolean",
            0,
            "Whether the attach operation finished.",
        ),
        AGE,
    ],
    cells: |va, now| {
        vec![
            name(va).into(),
            text(va, "/spec/attacher").into(),
            text(va, "/spec/source/persistentVolumeName").into(),
            text(va, "/spec/nodeName").into(),
            opt_bool(va, "/status/attached").unwrap_or(false).into(),
            age(va, now),
        ]
    },
};

pub(super) static CSI_DRIVERS: Printer = Printer {
    columns: &[
        NAME,
        Column::new(
            "AttachRequired",
            "boolean",
            0,
            "Whether volumes need an attach operation.",
        ),
        Column::new(
            "PodInfoOnMount",
            "boolean",
            0,
            "Whether the driver gets pod information on mount.",
        ),
        Column::new(
            "StorageCapacity",
            "boolean",
            0,
            "Whether the scheduler considers the driver's storage capacity.",
        ),
        Column::new(
            "TokenRequests",
            "string",
            0,
            "Audiences of the service account tokens the driver gets.",
        ),
        Column::new(
            "RequiresRepublish",
            "boolean",
            0,
            "Whether NodePublishVolume is called periodically.",
        ),
        Column::new(
            "Modes",
            "string",
            0,
            "The volume lifecycle modes the driver supports.",
        ),
        AGE,
    ],
    cells: csi_driver_cells,
};

fn csi_driver_cells(driver: &Value, now: Timestamp) -> Vec<Value> {
    let tokens = if present(driver, "/spec/tokenRequests") {
        list(driver, "/spec/tokenRequests")
            .iter()
            .map(|t| text(t, "/audience"))
            .collect::<Vec<_>>()
            .join(",")
    } else {
        "<unset>".to_string()
    };
    let modes = list(driver, "/spec/volumeLifecycleModes")
        .iter()
        .map(|m| m.as_str().unwrap_or(""))
        .collect::<Vec<_>>()
        .join(",");
    vec![
        name(driver).into(),
        opt_bool(driver, "/spec/attachRequired")
            .unwrap_or(true)
            .into(),
        opt_bool(driver, "/spec/podInfoOnMount")
            .unwrap_or(false)
            .into(),
        opt_bool(driver, "/spec/storageCapacity")
            .unwrap_or(false)
            .into(),
        tokens.into(),
        opt_bool(driver, "/spec/requiresRepublish")
            .unwrap_or(false)
            .into(),
        super::format::or_none(modes).into(),
        age(driver, now),
    ]
}

pub(super) static CSI_NODES: Printer = Printer {
    columns: &[
        NAME,
        Column::new(
            "Drivers",
            "integer",
            0,
            "The number of CSI drivers on the node.",
        ),
        AGE,
    ],
    cells: |node, now| {
        vec![
            name(node).into(),
            (len(node, "/spec/drivers") as i64).into(),
            age(node, now),
        ]
    },
};

pub(super) static CSI_STORAGE_CAPACITIES: Printer = Printer {
    columns: &[
        NAME,
        Column::new(
            "StorageClassName",
            "string",
            0,
            "The storage class the capacity is for.",
        ),
        Column::new(
            "Capacity",
            "string",
            0,
            "The capacity available for new volumes.",
        ),
        AGE,
    ],
    cells: |capacity, now| {
        vec![
            name(capacity).into(),
            text(capacity, "/storageClassName").into(),
            scalar(capacity.get("capacity"))
                .unwrap_or_else(|| "<unset>".to_string())
                .into(),
            age(capacity, now),
        ]
    },
};

#[cfg(test)]
mod tests {
    use super::super::{columns, row};
    use serde_json::json;

    fn now() -> jiff::Timestamp {
        "2024-05-01T12:00:00Z".parse().unwrap()
    }

    fn headers(group: &str, plural: &str) -> Vec<&'static str> {
        columns(group, plural)
            .iter()
            .filter(|c| c.priority == 0)
            .map(|c| c.name)
            .collect()
    }

    #[test]
    fn claims_show_their_volume_only_once_bound() {
        assert_eq!(
            headers("", "persistentvolumeclaims"),
            [
                "Name",
                "Status",
                "Volume",
                "Capacity",
                "Access Modes",
                "StorageClass",
                "VolumeAttributesClass",
                "Age"
            ]
        );
        let pending = json!({"metadata": {"name": "data", "creationTimestamp": "2024-05-01T11:00:00Z"},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}},
                     "storageClassName": "fast", "volumeMode": "Filesystem"},
            "status": {"phase": "Pending"}});
        assert_eq!(
            row("", "persistentvolumeclaims", &pending, now()),
            [
                json!("data"),
                json!("Pending"),
                json!(""),
                json!(""),
                json!(""),
                json!("fast"),
                json!("<unset>"),
                json!("60m"),
                json!("Filesystem")
            ]
        );
        let mut bound = pending.clone();
        bound["spec"]["volumeName"] = json!("pv-1");
        bound["status"] = json!({"phase": "Bound", "capacity": {"storage": "2Gi"},
                                 "accessModes": ["ReadWriteMany", "ReadWriteOnce"]});
        bound["metadata"]["deletionTimestamp"] = json!("2024-05-01T11:59:00Z");
        let cells = row("", "persistentvolumeclaims", &bound, now());
        assert_eq!(
            cells[1..5],
            [
                json!("Terminating"),
                json!("pv-1"),
                json!("2Gi"),
                json!("RWO,RWX")
            ]
        );
    }

    #[test]
    fn volumes_show_capacity_policy_and_claim() {
        let pv = json!({"metadata": {"name": "pv-1", "creationTimestamp": "2024-05-01T11:59:00Z"},
            "spec": {"capacity": {"storage": "5Gi"}, "accessModes": ["ReadWriteOncePod"],
                     "persistentVolumeReclaimPolicy": "Retain",
                     "claimRef": {"namespace": "default", "name": "data"},
                     "volumeAttributesClassName": "gold"},
            "status": {"phase": "Bound"}});
        assert_eq!(
            row("", "persistentvolumes", &pv, now()),
            [
                json!("pv-1"),
                json!("5Gi"),
                json!("RWOP"),
                json!("Retain"),
                json!("Bound"),
                json!("default/data"),
                json!(""),
                json!("gold"),
                json!(""),
                json!("60s"),
                json!("<unset>")
            ]
        );
    }

    #[test]
    fn default_classes_say_so_after_their_name() {
        let sc = json!({"metadata": {"name": "standard",
                "annotations": {"storageclass.kubernetes.io/is-default-class": "true"}},
            "provisioner": "rancher.io/local-path", "volumeBindingMode": "WaitForFirstConsumer"});
        let cells = row("storage.k8s.io", "storageclasses", &sc, now());
        assert_eq!(
            cells[..5],
            [
                json!("standard (default)"),
                json!("rancher.io/local-path"),
                json!("Delete"),
                json!("WaitForFirstConsumer"),
                json!(false)
            ]
        );
    }

    #[test]
    fn csi_objects_show_their_defaults() {
        let driver = json!({"metadata": {"name": "csi.example.com"}, "spec": {}});
        assert_eq!(
            row("storage.k8s.io", "csidrivers", &driver, now())[1..7],
            [
                json!(true),
                json!(false),
                json!(false),
                json!("<unset>"),
                json!(false),
                json!("<none>")
            ]
        );
        let node = json!({"metadata": {"name": "n1"}, "spec": {"drivers": [{}, {}]}});
        assert_eq!(row("storage.k8s.io", "csinodes", &node, now())[1], json!(2));
        let capacity = json!({"metadata": {"name": "c"}, "storageClassName": "fast"});
        assert_eq!(
            row("storage.k8s.io", "csistoragecapacities", &capacity, now())[1..3],
            [json!("fast"), json!("<unset>")]
        );
    }
}
