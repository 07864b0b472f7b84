//! A StatefulSet's claims under its `persistentVolumeClaimRetentionPolicy` (upstream's
//! StatefulSetAutoDeletePVC, `stateful_set_utils.go`): which controller references a pod's claims
//! should carry so that the garbage collector deletes them when the policy says so. `whenScaled:
//! Delete` puts the pod's reference on the claims of a pod being scaled away; otherwise
//! `whenDeleted: Delete` puts the set's on them. A claim with a reference to
//! an older set or pod of the same name, or with another controller, is left alone; a claim with
//! an older pod's reference blocks the creation of the new pod until the collector has deleted it.

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::ResourceExt;

use crate::podutil;
use crate::statefulset_pods as identity;

/// The two halves of the retention policy: `true` is `Delete`; anything else is `Retain`, as
/// upstream treats an unknown policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    pub delete_when_deleted: bool,
    pub delete_when_scaled: bool,
}

/// The set's retention policy (Retain/Retain when unset).
pub fn policy(set: &StatefulSet) -> Policy {
    let spec = set.spec.as_ref();
    let p = spec.and_then(|s| s.persistent_volume_claim_retention_policy.as_ref());
    let delete = |v: Option<&String>| v.map(String::as_str) == Some("Delete");
    Policy {
        delete_when_deleted: delete(p.and_then(|p| p.when_deleted.as_ref())),
        delete_when_scaled: delete(p.and_then(|p| p.when_scaled.as_ref())),
    }
}

/// The pod a claim belongs to: its name, and its uid once it exists (empty before).
#[derive(Debug, Clone, Copy)]
pub struct ClaimPod<'a> {
    pub name: &'a str,
    pub uid: &'a str,
    /// Whether the pod's ordinal is among the set's replicas (false: it is being scaled away).
    pub in_range: bool,
}

fn refers_to_set(r: &OwnerReference, set: &StatefulSet) -> bool {
    r.api_version == "apps/v1" && r.kind == "StatefulSet" && r.name == set.name_any()
}

fn refers_to_pod(r: &OwnerReference, pod: &ClaimPod) -> bool {
    r.api_version == "v1" && r.kind == "Pod" && r.name == pod.name
}

fn owners(claim: &PersistentVolumeClaim) -> &[OwnerReference] {
    claim
        .metadata
        .owner_references
        .as_deref()
        .unwrap_or_default()
}

fn has_owner(claim: &PersistentVolumeClaim, uid: &str) -> bool {
    owners(claim).iter().any(|r| r.uid == uid)
}

/// Whether the claim's first reference to an object of this name and kind has another uid
/// (upstream's `hasStaleOwnerRef`): an older set or pod of the same name owns it.
fn stale(
    claim: &PersistentVolumeClaim,
    refers: impl Fn(&OwnerReference) -> bool,
    uid: &str,
) -> bool {
    owners(claim)
        .iter()
        .find(|r| refers(r))
        .is_some_and(|r| r.uid != uid)
}

/// Whether a controller other than the set and the pod manages the claim while the policy
/// deletes anything (a reference to the set or pod with another uid counts as one).
pub fn has_unexpected_controller(
    claim: &PersistentVolumeClaim,
    set: &StatefulSet,
    pod: &ClaimPod,
) -> bool {
    let p = policy(set);
    if !p.delete_when_deleted && !p.delete_when_scaled {
        return false;
    }
    let set_uid = set.uid().unwrap_or_default();
    owners(claim).iter().any(|r| {
        if refers_to_set(r, set) {
            r.uid != set_uid
        } else if refers_to_pod(r, pod) {
            r.uid != pod.uid
        } else {
            r.controller == Some(true)
        }
    })
}

/// Whether the set or the pod owns the claim without being its controller.
fn has_non_controller_owner(
    claim: &PersistentVolumeClaim,
    set: &StatefulSet,
    pod: &ClaimPod,
) -> bool {
    let set_uid = set.uid().unwrap_or_default();
    owners(claim)
        .iter()
        .any(|r| (r.uid == set_uid || r.uid == pod.uid) && r.controller != Some(true))
}

/// Whether the claim's references agree with the policy (upstream's `isClaimOwnerUpToDate`).
/// A claim an older set or pod owns, or one another controller manages without the set or pod
/// among its owners, counts as agreeing: it is not touched.
pub fn up_to_date(claim: &PersistentVolumeClaim, set: &StatefulSet, pod: &ClaimPod) -> bool {
    let set_uid = set.uid().unwrap_or_default();
    if stale(claim, |r| refers_to_set(r, set), &set_uid)
        || stale(claim, |r| refers_to_pod(r, pod), pod.uid)
    {
        return true;
    }
    let (by_set, by_pod) = (has_owner(claim, &set_uid), has_owner(claim, pod.uid));
    if has_unexpected_controller(claim, set, pod) {
        return !(by_set || by_pod);
    }
    if has_non_controller_owner(claim, set, pod) {
        return false;
    }
    let p = policy(set);
    let scaled_down = !pod.in_range;
    match (p.delete_when_scaled, p.delete_when_deleted) {
        (false, false) => !by_set && !by_pod,
        (false, true) => by_set && !by_pod,
        (true, false) => !by_set && scaled_down == by_pod,
        (true, true) => scaled_down != by_set && scaled_down == by_pod,
    }
}

/// The claim's owner references as the policy wants them (upstream's
/// `updateClaimOwnerRefForSetAndPod`): its references to the set and pod are dropped, then,
/// unless another controller manages it, the pod's (`whenScaled: Delete`, pod scaled away) or
/// else the set's (`whenDeleted: Delete`) is added as a controller reference.
pub fn wanted_owners(
    claim: &PersistentVolumeClaim,
    set: &StatefulSet,
    pod: &ClaimPod,
) -> Vec<OwnerReference> {
    let unexpected = has_unexpected_controller(claim, set, pod);
    let mut refs: Vec<OwnerReference> = owners(claim)
        .iter()
        .filter(|r| !refers_to_set(r, set) && !refers_to_pod(r, pod))
        .cloned()
        .collect();
    if unexpected {
        return refs;
    }
    let p = policy(set);
    let mut add = |r: OwnerReference| {
        if !refs.iter().any(|o| o.uid == r.uid) {
            refs.push(r);
        }
    };
    if p.delete_when_scaled && !pod.in_range {
        add(podutil::controller_ref_to("v1", "Pod", pod.name, pod.uid));
    } else if p.delete_when_deleted {
        add(identity::owner(set));
    }
    refs
}

/// Whether an existing claim of a pod about to be created still belongs to an older pod of the
/// same name (upstream's `PodClaimIsStale`, only with `whenScaled: Delete`): the garbage
/// collector is about to delete it, so the pod waits.
pub fn is_stale(set: &StatefulSet, claim: &PersistentVolumeClaim, pod: &ClaimPod) -> bool {
    policy(set).delete_when_scaled && stale(claim, |r| refers_to_pod(r, pod), pod.uid)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn set(when_deleted: &str, when_scaled: &str) -> StatefulSet {
        serde_json::from_value(
            json!({"metadata": {"name": "db", "namespace": "ns", "uid": "set"},
            "spec": {"selector": {}, "template": {},
                "persistentVolumeClaimRetentionPolicy":
                    {"whenDeleted": when_deleted, "whenScaled": when_scaled}}}),
        )
        .unwrap()
    }

    fn claim(owners: serde_json::Value) -> PersistentVolumeClaim {
        serde_json::from_value(
            json!({"metadata": {"name": "data-db-1", "ownerReferences": owners}}),
        )
        .unwrap()
    }

    fn set_ref(uid: &str) -> serde_json::Value {
        json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "db", "uid": uid,
            "controller": true, "blockOwnerDeletion": true})
    }

    fn pod_ref(uid: &str) -> serde_json::Value {
        json!({"apiVersion": "v1", "kind": "Pod", "name": "db-1", "uid": uid,
            "controller": true, "blockOwnerDeletion": true})
    }

    const IN: ClaimPod = ClaimPod {
        name: "db-1",
        uid: "pod",
        in_range: true,
    };
    const OUT: ClaimPod = ClaimPod {
        name: "db-1",
        uid: "pod",
        in_range: false,
    };

    fn owner_uids(refs: &[OwnerReference]) -> Vec<&str> {
        refs.iter().map(|r| r.uid.as_str()).collect()
    }

    #[test]
    fn each_policy_wants_the_set_or_the_pod_as_the_claims_controller() {
        let none = claim(json!([]));
        let cases = [
            ("Retain", "Retain", IN, vec![]),
            ("Retain", "Retain", OUT, vec![]),
            ("Delete", "Retain", IN, vec!["set"]),
            ("Delete", "Retain", OUT, vec!["set"]),
            ("Retain", "Delete", IN, vec![]),
            ("Retain", "Delete", OUT, vec!["pod"]),
            ("Delete", "Delete", IN, vec!["set"]),
            ("Delete", "Delete", OUT, vec!["pod"]),
        ];
        for (deleted, scaled, pod, want) in cases {
            let s = set(deleted, scaled);
            let refs = wanted_owners(&none, &s, &pod);
            assert_eq!(
                owner_uids(&refs),
                want,
                "{deleted}/{scaled} {}",
                pod.in_range
            );
            assert!(refs.iter().all(|r| r.controller == Some(true)));
            let mut fixed = none.clone();
            fixed.metadata.owner_references = Some(refs);
            assert!(up_to_date(&fixed, &s, &pod), "{deleted}/{scaled}");
            assert_eq!(up_to_date(&none, &s, &pod), want.is_empty());
        }
    }

    #[test]
    fn a_changed_policy_moves_the_reference_from_the_set_to_the_pod_and_back() {
        let owned_by_set = claim(json!([set_ref("set")]));
        let s = set("Delete", "Delete");
        assert!(!up_to_date(&owned_by_set, &s, &OUT));
        assert_eq!(owner_uids(&wanted_owners(&owned_by_set, &s, &OUT)), ["pod"]);
        let owned_by_pod = claim(json!([pod_ref("pod")]));
        assert_eq!(owner_uids(&wanted_owners(&owned_by_pod, &s, &IN)), ["set"]);
        // back to Retain: the references go
        let retain = set("Retain", "Retain");
        assert!(!up_to_date(&owned_by_set, &retain, &IN));
        assert!(wanted_owners(&owned_by_set, &retain, &IN).is_empty());
        // a plain (non-controller) reference by the set is made a controller reference
        let mut plain = set_ref("set");
        plain["controller"] = json!(false);
        let plain = claim(json!([plain]));
        assert!(!up_to_date(&plain, &s, &IN));
        assert_eq!(wanted_owners(&plain, &s, &IN)[0].controller, Some(true));
    }

    #[test]
    fn claims_of_older_owners_or_other_controllers_are_left_alone() {
        let s = set("Delete", "Delete");
        let older_set = claim(json!([set_ref("old-set")]));
        assert!(up_to_date(&older_set, &s, &IN));
        let older_pod = claim(json!([pod_ref("old-pod")]));
        assert!(up_to_date(&older_pod, &s, &OUT));
        let other = claim(
            json!([{"apiVersion": "v1", "kind": "ConfigMap", "name": "x",
            "uid": "x", "controller": true}]),
        );
        assert!(has_unexpected_controller(&other, &s, &IN));
        assert!(up_to_date(&other, &s, &IN));
        // with the set among its owners too, the set's reference is dropped and none added
        let both = claim(
            json!([{"apiVersion": "v1", "kind": "ConfigMap", "name": "x",
            "uid": "x", "controller": true}, set_ref("set")]),
        );
        assert!(!up_to_date(&both, &s, &IN));
        assert_eq!(owner_uids(&wanted_owners(&both, &s, &IN)), ["x"]);
        // Retain/Retain tolerates any controller
        assert!(!has_unexpected_controller(
            &other,
            &set("Retain", "Retain"),
            &IN
        ));
    }

    #[test]
    fn a_claim_an_older_pod_owns_is_stale_only_when_scaled_claims_are_deleted() {
        let new_pod = ClaimPod {
            name: "db-1",
            uid: "",
            in_range: true,
        };
        let older_pod = claim(json!([pod_ref("old-pod")]));
        assert!(is_stale(&set("Retain", "Delete"), &older_pod, &new_pod));
        assert!(!is_stale(&set("Delete", "Retain"), &older_pod, &new_pod));
        assert!(!is_stale(
            &set("Retain", "Delete"),
            &claim(json!([])),
            &new_pod
        ));
    }
}
