//! `volume`: how PersistentVolumeClaims and PersistentVolumes match, in the role of upstream's
//! `component-helpers/storage/volume` (shared there by the PersistentVolume controller and the
//! scheduler's volume binding): the annotations of binding and provisioning, classes (the beta
//! annotation before the field), access and volume modes, pre-binding, a volume's node
//! affinity, the smallest volume that satisfies a claim (as one check per volume, which the
//! scheduler runs once per cycle), binding a volume to a claim, a claim fully bound, a class's
//! allowed topologies, and the default StorageClass.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Node, ObjectReference, PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use skiff_apimachinery::labels::Selector;
use skiff_apimachinery::quantity::Quantity as Parsed;

use crate::node_affinity::NodeSelector;

/// On a claim: the controller finished binding it (upstream's `AnnBindCompleted`).
pub const ANN_BIND_COMPLETED: &str = "pv.kubernetes.io/bind-completed";
/// On a claim or volume: the binding was made by the controller, not the user.
pub const ANN_BOUND_BY_CONTROLLER: &str = "pv.kubernetes.io/bound-by-controller";
/// On a claim: the node the scheduler picked for a `WaitForFirstConsumer` claim.
pub const ANN_SELECTED_NODE: &str = "volume.kubernetes.io/selected-node";
/// On a claim: the provisioner expected to provision a volume for it.
pub const ANN_STORAGE_PROVISIONER: &str = "volume.kubernetes.io/storage-provisioner";
/// The deprecated beta form of [`ANN_STORAGE_PROVISIONER`], still written beside it.
pub const ANN_BETA_STORAGE_PROVISIONER: &str = "volume.beta.kubernetes.io/storage-provisioner";
/// On a volume: the provisioner that provisioned it (and so deletes it).
pub const ANN_DYNAMICALLY_PROVISIONED: &str = "pv.kubernetes.io/provisioned-by";
/// The deprecated class annotation of claims and volumes, which wins over the field.
pub const ANN_BETA_STORAGE_CLASS: &str = "volume.beta.kubernetes.io/storage-class";
/// On a StorageClass: `"true"` makes it the default class.
pub const ANN_DEFAULT_CLASS: &str = "storageclass.kubernetes.io/is-default-class";
/// The beta form of [`ANN_DEFAULT_CLASS`].
pub const ANN_BETA_DEFAULT_CLASS: &str = "storageclass.beta.kubernetes.io/is-default-class";
/// A StorageClass's `volumeBindingMode` that delays binding until a pod is scheduled.
pub const WAIT_FOR_FIRST_CONSUMER: &str = "WaitForFirstConsumer";

fn annotation<'a>(annotations: Option<&'a BTreeMap<String, String>>, key: &str) -> Option<&'a str> {
    annotations.and_then(|a| a.get(key)).map(String::as_str)
}

/// The class a claim asks for: the beta annotation, else `spec.storageClassName`, else `""`.
pub fn claim_class(claim: &PersistentVolumeClaim) -> &str {
    if let Some(class) = annotation(claim.metadata.annotations.as_ref(), ANN_BETA_STORAGE_CLASS) {
        return class;
    }
    claim
        .spec
        .as_ref()
        .and_then(|s| s.storage_class_name.as_deref())
        .unwrap_or("")
}

/// Whether the claim names a class at all (`""` included): one without may get the default.
pub fn claim_has_class(claim: &PersistentVolumeClaim) -> bool {
    annotation(claim.metadata.annotations.as_ref(), ANN_BETA_STORAGE_CLASS).is_some()
        || claim
            .spec
            .as_ref()
            .is_some_and(|s| s.storage_class_name.is_some())
}

/// The class of a volume, as [`claim_class`].
pub fn volume_class(volume: &PersistentVolume) -> &str {
    if let Some(class) = annotation(volume.metadata.annotations.as_ref(), ANN_BETA_STORAGE_CLASS) {
        return class;
    }
    volume
        .spec
        .as_ref()
        .and_then(|s| s.storage_class_name.as_deref())
        .unwrap_or("")
}

/// The storage amount of a request or capacity list, in nano-units (0 when absent or bad).
pub fn storage(list: Option<&BTreeMap<String, Quantity>>) -> i128 {
    list.and_then(|l| l.get("storage"))
        .and_then(|q| Parsed::parse(&q.0).ok())
        .map_or(0, |q| q.nano_value())
}

/// What the claim requests (`spec.resources.requests.storage`).
pub fn requested(claim: &PersistentVolumeClaim) -> i128 {
    storage(
        claim
            .spec
            .as_ref()
            .and_then(|s| s.resources.as_ref())
            .and_then(|r| r.requests.as_ref()),
    )
}

/// What the volume holds (`spec.capacity.storage`).
pub fn capacity(volume: &PersistentVolume) -> i128 {
    storage(volume.spec.as_ref().and_then(|s| s.capacity.as_ref()))
}

fn claim_modes(claim: &PersistentVolumeClaim) -> &[String] {
    claim
        .spec
        .as_ref()
        .and_then(|s| s.access_modes.as_deref())
        .unwrap_or(&[])
}

/// The volume's access modes.
pub fn volume_modes(volume: &PersistentVolume) -> &[String] {
    volume
        .spec
        .as_ref()
        .and_then(|s| s.access_modes.as_deref())
        .unwrap_or(&[])
}

/// Whether the volume offers every access mode the claim asks for (upstream's
/// `CheckAccessModes`).
pub fn has_access_modes(claim: &PersistentVolumeClaim, volume: &PersistentVolume) -> bool {
    let offered = volume_modes(volume);
    claim_modes(claim).iter().all(|m| offered.contains(m))
}

/// The claim's and the volume's `volumeMode` differ (each `Filesystem` when unset).
pub fn volume_mode_mismatch(claim: &PersistentVolumeClaim, volume: &PersistentVolume) -> bool {
    let claim_mode = claim.spec.as_ref().and_then(|s| s.volume_mode.as_deref());
    let volume_mode = volume.spec.as_ref().and_then(|s| s.volume_mode.as_deref());
    claim_mode.unwrap_or("Filesystem") != volume_mode.unwrap_or("Filesystem")
}

/// Whether the volume's `claimRef` names this claim (by namespace and name, and by uid when it
/// has one: a volume pre-bound by name only matches any claim of that name).
pub fn is_bound_to_claim(volume: &PersistentVolume, claim: &PersistentVolumeClaim) -> bool {
    let Some(r) = volume.spec.as_ref().and_then(|s| s.claim_ref.as_ref()) else {
        return false;
    };
    if r.name != claim.metadata.name || r.namespace != claim.metadata.namespace {
        return false;
    }
    let uid = r.uid.as_deref().unwrap_or("");
    uid.is_empty() || Some(uid) == claim.metadata.uid.as_deref()
}

/// Whether the volume's required node affinity admits `node` (no affinity admits every node).
pub fn check_node_affinity(volume: &PersistentVolume, node: &Node) -> Result<(), String> {
    let required = volume
        .spec
        .as_ref()
        .and_then(|s| s.node_affinity.as_ref())
        .and_then(|a| a.required.as_ref());
    let Some(required) = required else {
        return Ok(());
    };
    let selector = NodeSelector::parse(required)?;
    if selector.matches(node) {
        Ok(())
    } else {
        Err("no matching NodeSelectorTerms".into())
    }
}

/// Why a volume cannot be bound to a claim that names it (`spec.volumeName`), in upstream's
/// words (`checkVolumeSatisfyClaim`).
pub fn check_volume_satisfies_claim(
    volume: &PersistentVolume,
    claim: &PersistentVolumeClaim,
) -> Result<(), String> {
    if volume.metadata.deletion_timestamp.is_some() {
        let name = volume.metadata.name.as_deref().unwrap_or("");
        return Err(format!("the volume is marked for deletion {name:?}"));
    }
    if capacity(volume) < requested(claim) {
        return Err("requested PV is too small".into());
    }
    if volume_class(volume) != claim_class(claim) {
        return Err("storageClassName does not match".into());
    }
    if volume_mode_mismatch(claim, volume) {
        return Err("incompatible volumeMode".into());
    }
    if !has_access_modes(claim, volume) {
        return Err("incompatible accessMode".into());
    }
    Ok(())
}

fn attributes_class_of_claim(claim: &PersistentVolumeClaim) -> &str {
    claim
        .spec
        .as_ref()
        .and_then(|s| s.volume_attributes_class_name.as_deref())
        .unwrap_or("")
}

fn attributes_class_of_volume(volume: &PersistentVolume) -> &str {
    volume
        .spec
        .as_ref()
        .and_then(|s| s.volume_attributes_class_name.as_deref())
        .unwrap_or("")
}

/// What [`volume_candidate`] says about one volume for a claim, node affinity aside.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Candidate {
    /// The volume is pre-bound to the claim (its `claimRef` names it): it is the claim's
    /// volume, or none is, wherever its node affinity admits.
    PreBound,
    /// An `Available` volume of the claim's class that fits it: the smallest wins.
    Fits,
    /// Not for this claim.
    No,
}

/// The claim's label selector, parsed once for [`volume_candidate`].
pub fn claim_selector(claim: &PersistentVolumeClaim) -> Result<Option<Selector>, String> {
    let Some(s) = claim.spec.as_ref().and_then(|s| s.selector.as_ref()) else {
        return Ok(None);
    };
    let value = serde_json::to_value(s).unwrap_or_default();
    let key = format!(
        "{}/{}",
        claim.metadata.namespace.as_deref().unwrap_or(""),
        claim.metadata.name.as_deref().unwrap_or("")
    );
    Selector::from_label_selector(&value)
        .map(Some)
        .map_err(|e| format!("error creating internal label selector for claim: {key}: {e}"))
}

/// Whether `volume` can take `claim`, every check of upstream's `FindMatchingVolume` but the
/// volume's node affinity: capacity, volume mode, no attributes class, no deletion pending,
/// then pre-binding; otherwise (unless `delay_binding` without a node, the controller's case
/// for `WaitForFirstConsumer` claims) the `Available` phase, no `claimRef`, the claim's
/// `selector`, the class, and on the scheduler's path (`for_node`) the access modes.
pub fn volume_candidate(
    claim: &PersistentVolumeClaim,
    volume: &PersistentVolume,
    selector: Option<&Selector>,
    for_node: bool,
    delay_binding: bool,
) -> Candidate {
    if !attributes_class_of_claim(claim).is_empty() {
        return Candidate::No;
    }
    let spec = volume.spec.as_ref();
    if spec.and_then(|s| s.claim_ref.as_ref()).is_some() && !is_bound_to_claim(volume, claim) {
        return Candidate::No;
    }
    if capacity(volume) < requested(claim) || volume_mode_mismatch(claim, volume) {
        return Candidate::No;
    }
    if !attributes_class_of_volume(volume).is_empty()
        || volume.metadata.deletion_timestamp.is_some()
    {
        return Candidate::No;
    }
    if is_bound_to_claim(volume, claim) {
        return Candidate::PreBound;
    }
    if !for_node && delay_binding {
        return Candidate::No;
    }
    let phase = volume.status.as_ref().and_then(|s| s.phase.as_deref());
    if phase != Some("Available") {
        return Candidate::No;
    }
    let empty = BTreeMap::new();
    let labels = volume.metadata.labels.as_ref().unwrap_or(&empty);
    if selector.is_some_and(|s| !s.matches(labels)) || volume_class(volume) != claim_class(claim) {
        return Candidate::No;
    }
    if for_node && !has_access_modes(claim, volume) {
        return Candidate::No;
    }
    Candidate::Fits
}

/// The volume among `volumes` to bind `claim` to (upstream's `FindMatchingVolume`, with the
/// `VolumeAttributesClass` feature off as in 1.33): one pre-bound to the claim (by its
/// `claimRef`) wins; otherwise the smallest `Available` one with enough capacity, the same
/// volume mode and class, labels the claim's selector selects, and no deletion pending.
/// `node` is the scheduler's case (the volume's node affinity must admit it, and access modes
/// are checked here); without it and with `delay_binding` only pre-bound volumes are found.
pub fn find_matching_volume<'a>(
    claim: &PersistentVolumeClaim,
    volumes: &[&'a PersistentVolume],
    node: Option<&Node>,
    delay_binding: bool,
) -> Result<Option<&'a PersistentVolume>, String> {
    if !attributes_class_of_claim(claim).is_empty() {
        return Ok(None);
    }
    let selector = claim_selector(claim)?;
    let mut smallest: Option<(&PersistentVolume, i128)> = None;
    for &volume in volumes {
        let candidate = volume_candidate(
            claim,
            volume,
            selector.as_ref(),
            node.is_some(),
            delay_binding,
        );
        if candidate == Candidate::No {
            continue;
        }
        let affinity_ok = node.is_none_or(|n| check_node_affinity(volume, n).is_ok());
        if candidate == Candidate::PreBound {
            return Ok(affinity_ok.then_some(volume));
        }
        let size = capacity(volume);
        if affinity_ok && smallest.is_none_or(|(_, s)| s > size) {
            smallest = Some((volume, size));
        }
    }
    Ok(smallest.map(|(v, _)| v))
}

/// The volume with its `claimRef` naming `claim` (kind, namespace, name, uid and resource
/// version) and, unless it was already pre-bound to it, annotated `bound-by-controller`
/// (upstream's `GetBindVolumeToClaim`); `None` when it already is.
pub fn bind_volume_to_claim(
    volume: &PersistentVolume,
    claim: &PersistentVolumeClaim,
) -> Option<PersistentVolume> {
    let by_controller = !is_bound_to_claim(volume, claim);
    let mut updated = volume.clone();
    let mut dirty = false;
    let current = volume.spec.as_ref().and_then(|s| s.claim_ref.as_ref());
    if current.is_none_or(|r| {
        r.name != claim.metadata.name
            || r.namespace != claim.metadata.namespace
            || r.uid != claim.metadata.uid
    }) {
        updated.spec.get_or_insert_with(Default::default).claim_ref = Some(ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("PersistentVolumeClaim".into()),
            namespace: claim.metadata.namespace.clone(),
            name: claim.metadata.name.clone(),
            uid: claim.metadata.uid.clone(),
            resource_version: claim.metadata.resource_version.clone(),
            field_path: None,
        });
        dirty = true;
    }
    let annotations = updated
        .metadata
        .annotations
        .get_or_insert_with(BTreeMap::new);
    if by_controller && !annotations.contains_key(ANN_BOUND_BY_CONTROLLER) {
        annotations.insert(ANN_BOUND_BY_CONTROLLER.into(), "yes".into());
        dirty = true;
    }
    dirty.then_some(updated)
}

/// Whether the PersistentVolume controller finished binding the claim: it names its volume
/// and is annotated `bind-completed` (upstream's `isPVCFullyBound`).
pub fn is_claim_fully_bound(claim: &PersistentVolumeClaim) -> bool {
    let volume = claim.spec.as_ref().and_then(|s| s.volume_name.as_deref());
    volume.is_some_and(|v| !v.is_empty())
        && annotation(claim.metadata.annotations.as_ref(), ANN_BIND_COMPLETED).is_some()
}

/// Whether a StorageClass's `allowedTopologies` admit the node (none admit every node):
/// some term whose every expression's key is a label of the node with one of its values
/// (upstream's `MatchTopologySelectorTerms`).
pub fn class_allows_node(class: &StorageClass, node: &Node) -> bool {
    let terms = class.allowed_topologies.as_deref().unwrap_or(&[]);
    if terms.is_empty() {
        return true;
    }
    let labels = node.metadata.labels.as_ref();
    terms.iter().any(|term| {
        term.match_label_expressions.iter().flatten().all(|e| {
            labels
                .and_then(|l| l.get(&e.key))
                .is_some_and(|v| e.values.contains(v))
        })
    })
}

/// The provisioner name of classes whose volumes are made by hand (upstream's
/// `NotSupportedProvisioner`).
pub const NOT_SUPPORTED_PROVISIONER: &str = "kubernetes.io/no-provisioner";

/// The canonical form of a set of access modes (upstream's `GetAccessModesAsString`: each
/// mode once, abbreviated, in a fixed order), under which volumes are grouped.
pub fn access_modes_key(modes: &[String]) -> String {
    [
        ("ReadWriteOnce", "RWO"),
        ("ReadOnlyMany", "ROX"),
        ("ReadWriteMany", "RWX"),
        ("ReadWriteOncePod", "RWOP"),
    ]
    .iter()
    .filter(|(mode, _)| modes.iter().any(|m| m == mode))
    .map(|(_, short)| *short)
    .collect::<Vec<_>>()
    .join(",")
}

/// Whether a StorageClass is annotated as the default.
pub fn is_default_class(class: &StorageClass) -> bool {
    let annotations = class.metadata.annotations.as_ref();
    annotation(annotations, ANN_DEFAULT_CLASS) == Some("true")
        || annotation(annotations, ANN_BETA_DEFAULT_CLASS) == Some("true")
}

/// The default StorageClass: of those annotated default, the newest, then the first by name
/// (upstream's `GetDefaultClass`).
pub fn default_class<'a>(
    classes: impl IntoIterator<Item = &'a StorageClass>,
) -> Option<&'a StorageClass> {
    classes
        .into_iter()
        .filter(|c| is_default_class(c))
        .min_by(|a, b| {
            let created = |c: &StorageClass| c.metadata.creation_timestamp.as_ref().map(|t| t.0);
            created(b)
                .cmp(&created(a))
                .then_with(|| a.metadata.name.cmp(&b.metadata.name))
        })
}

/// Whether binding claims of this class waits for a pod (`WaitForFirstConsumer`).
pub fn is_delay_binding(class: &StorageClass) -> bool {
    class.volume_binding_mode.as_deref() == Some(WAIT_FOR_FIRST_CONSUMER)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn claim(value: serde_json::Value) -> PersistentVolumeClaim {
        let mut base = json!({"metadata": {"name": "c", "namespace": "ns", "uid": "u1"},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}});
        merge(&mut base, value);
        serde_json::from_value(base).unwrap()
    }

    fn volume(name: &str, size: &str, value: serde_json::Value) -> PersistentVolume {
        let mut base = json!({"metadata": {"name": name},
            "spec": {"accessModes": ["ReadWriteOnce"], "capacity": {"storage": size}},
            "status": {"phase": "Available"}});
        merge(&mut base, value);
        serde_json::from_value(base).unwrap()
    }

    fn merge(base: &mut serde_json::Value, patch: serde_json::Value) {
        match (base, patch) {
            (serde_json::Value::Object(b), serde_json::Value::Object(p)) => {
                for (k, v) in p {
                    merge(b.entry(k).or_insert(serde_json::Value::Null), v);
                }
            }
            (b, p) => *b = p,
        }
    }

    fn found<'a>(
        claim: &PersistentVolumeClaim,
        volumes: &[&'a PersistentVolume],
    ) -> Option<&'a str> {
        find_matching_volume(claim, volumes, None, false)
            .unwrap()
            .and_then(|v| v.metadata.name.as_deref())
    }

    #[test]
    fn the_smallest_available_volume_that_is_large_enough_wins() {
        let (small, big, tiny) = (
            volume("small", "2Gi", json!({})),
            volume("big", "10Gi", json!({})),
            volume("tiny", "500Mi", json!({})),
        );
        assert_eq!(
            found(&claim(json!({})), &[&big, &small, &tiny]),
            Some("small")
        );
        let bound = volume("bound", "1Gi", json!({"status": {"phase": "Bound"}}));
        assert_eq!(found(&claim(json!({})), &[&bound, &big]), Some("big"));
    }

    #[test]
    fn class_selector_and_volume_mode_must_match() {
        let fast = volume(
            "fast",
            "1Gi",
            json!({"spec": {"storageClassName": "fast"},
            "metadata": {"labels": {"tier": "gold"}}}),
        );
        let plain = volume("plain", "1Gi", json!({}));
        let block = volume("block", "1Gi", json!({"spec": {"volumeMode": "Block"}}));
        assert_eq!(
            found(&claim(json!({})), &[&fast, &block, &plain]),
            Some("plain")
        );
        let wants_fast = claim(json!({"spec": {"storageClassName": "fast"}}));
        assert_eq!(found(&wants_fast, &[&plain, &fast]), Some("fast"));
        let gold = claim(json!({"spec": {"storageClassName": "fast",
            "selector": {"matchLabels": {"tier": "silver"}}}}));
        assert_eq!(found(&gold, &[&fast]), None);
        let wants_block = claim(json!({"spec": {"volumeMode": "Block"}}));
        assert_eq!(found(&wants_block, &[&plain, &block]), Some("block"));
    }

    #[test]
    fn a_volume_pre_bound_to_the_claim_wins_even_when_delayed() {
        let prebound = volume(
            "pre",
            "5Gi",
            json!({"spec": {"claimRef": {"namespace": "ns", "name": "c"}},
            "status": {"phase": "Available"}}),
        );
        let other = volume(
            "other",
            "5Gi",
            json!({"spec": {"claimRef": {"namespace": "ns", "name": "d"}}}),
        );
        let small = volume("small", "1Gi", json!({}));
        assert_eq!(found(&claim(json!({})), &[&small, &prebound]), Some("pre"));
        assert_eq!(found(&claim(json!({})), &[&other]), None);
        let delayed = find_matching_volume(&claim(json!({})), &[&small], None, true).unwrap();
        assert!(delayed.is_none());
        let wrong_uid = volume(
            "w",
            "5Gi",
            json!({"spec": {"claimRef": {"namespace": "ns", "name": "c", "uid": "u2"}}}),
        );
        assert_eq!(found(&claim(json!({})), &[&wrong_uid]), None);
    }

    #[test]
    fn a_named_volume_is_checked_in_upstream_words() {
        let small = volume("v", "500Mi", json!({}));
        let c = claim(json!({}));
        assert_eq!(
            check_volume_satisfies_claim(&small, &c),
            Err("requested PV is too small".into())
        );
        let rox = volume(
            "v",
            "1Gi",
            json!({"spec": {"accessModes": ["ReadOnlyMany"]}}),
        );
        assert_eq!(
            check_volume_satisfies_claim(&rox, &c),
            Err("incompatible accessMode".into())
        );
        let classy = volume("v", "1Gi", json!({"spec": {"storageClassName": "x"}}));
        assert_eq!(
            check_volume_satisfies_claim(&classy, &c),
            Err("storageClassName does not match".into())
        );
    }

    #[test]
    fn binding_a_volume_points_it_at_the_claim_once_and_marks_who_bound_it() {
        let mut c = claim(json!({}));
        c.metadata.resource_version = Some("7".into());
        let free = volume("v", "1Gi", json!({}));
        let bound = bind_volume_to_claim(&free, &c).expect("a change");
        let r = bound.spec.as_ref().unwrap().claim_ref.as_ref().unwrap();
        assert_eq!(
            (r.kind.as_deref(), r.namespace.as_deref(), r.name.as_deref()),
            (Some("PersistentVolumeClaim"), Some("ns"), Some("c"))
        );
        assert_eq!(
            (r.uid.as_deref(), r.resource_version.as_deref()),
            (Some("u1"), Some("7"))
        );
        assert_eq!(
            bound.metadata.annotations.as_ref().unwrap()[ANN_BOUND_BY_CONTROLLER],
            "yes"
        );
        assert!(bind_volume_to_claim(&bound, &c).is_none());
        // pre-bound by the user (name only): the uid is filled in, no bound-by-controller
        let pre = volume(
            "p",
            "1Gi",
            json!({"spec": {"claimRef": {"namespace": "ns", "name": "c"}}}),
        );
        let filled = bind_volume_to_claim(&pre, &c).expect("the uid");
        assert!(filled.metadata.annotations.unwrap().is_empty());
    }

    #[test]
    fn a_claim_is_fully_bound_with_its_volume_named_and_bind_completed() {
        assert!(!is_claim_fully_bound(&claim(json!({}))));
        let named = claim(json!({"spec": {"volumeName": "v"}}));
        assert!(!is_claim_fully_bound(&named));
        let done = claim(json!({"spec": {"volumeName": "v"},
            "metadata": {"annotations": {ANN_BIND_COMPLETED: "yes"}}}));
        assert!(is_claim_fully_bound(&done));
    }

    #[test]
    fn allowed_topologies_admit_nodes_with_a_matching_label_in_some_term() {
        let class: StorageClass = serde_json::from_value(json!({
            "metadata": {"name": "zonal"}, "provisioner": "p",
            "allowedTopologies": [{"matchLabelExpressions": [
                {"key": "topology.kubernetes.io/zone", "values": ["a", "b"]}]}]}))
        .unwrap();
        let node = |zone: Option<&str>| -> Node {
            let labels = zone.map(|z| json!({"topology.kubernetes.io/zone": z}));
            serde_json::from_value(json!({"metadata": {"name": "n", "labels": labels}})).unwrap()
        };
        assert!(class_allows_node(&class, &node(Some("b"))));
        assert!(!class_allows_node(&class, &node(Some("c"))));
        assert!(!class_allows_node(&class, &node(None)));
        let open: StorageClass =
            serde_json::from_value(json!({"metadata": {"name": "any"}, "provisioner": "p"}))
                .unwrap();
        assert!(class_allows_node(&open, &node(None)));
    }

    #[test]
    fn the_newest_default_class_is_the_default_and_modes_have_one_key() {
        let class = |name: &str, created: &str, default: &str| -> StorageClass {
            serde_json::from_value(
                json!({"metadata": {"name": name, "creationTimestamp": created,
                "annotations": {ANN_DEFAULT_CLASS: default}}, "provisioner": "p"}),
            )
            .unwrap()
        };
        let classes = [
            class("old", "2026-01-01T00:00:00Z", "true"),
            class("new", "2026-02-01T00:00:00Z", "true"),
            class("newest", "2026-03-01T00:00:00Z", "false"),
        ];
        assert_eq!(
            default_class(&classes).and_then(|c| c.metadata.name.as_deref()),
            Some("new")
        );
        let modes = ["ReadWriteMany".to_string(), "ReadWriteOnce".to_string()];
        assert_eq!(access_modes_key(&modes), "RWO,RWX");
    }
}
