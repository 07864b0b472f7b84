//! Generic ephemeral volumes (upstream's `k8s.io/component-helpers/storage/ephemeral`): the
//! claim the ephemeral volume controller makes for one is named `<pod>-<volume>`, and a claim of
//! that name serves the pod only if the pod is its controller.

use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, Volume};

/// The claim of a pod's generic ephemeral volume, `<pod>-<volume>` (upstream's
/// `VolumeClaimName`); it says nothing about whether the volume is an ephemeral one.
pub fn volume_claim_name(pod: &Pod, volume: &Volume) -> String {
    format!(
        "{}-{}",
        pod.metadata.name.as_deref().unwrap_or(""),
        volume.name
    )
}

/// The claim of every volume of the pod: a `persistentVolumeClaim`'s `claimName`, or a generic
/// ephemeral volume's [`volume_claim_name`], in the order of the volumes; `true` marks an
/// ephemeral one.
pub fn pod_claims(pod: &Pod) -> impl Iterator<Item = (String, bool)> + '_ {
    let volumes = pod.spec.as_ref().and_then(|s| s.volumes.as_deref());
    volumes.unwrap_or_default().iter().filter_map(move |v| {
        if let Some(source) = &v.persistent_volume_claim {
            Some((source.claim_name.clone(), false))
        } else {
            v.ephemeral
                .as_ref()
                .map(|_| (volume_claim_name(pod, v), true))
        }
    })
}

/// Whether the claim is the one made for the pod's ephemeral volume: in the pod's namespace and
/// controlled by the pod (upstream's `VolumeIsForPod`); the error is upstream's message, complete
/// enough to be shown as it is.
pub fn volume_is_for_pod(pod: &Pod, claim: &PersistentVolumeClaim) -> Result<(), String> {
    let claim_ns = claim.metadata.namespace.as_deref().unwrap_or("");
    let pod_ns = pod.metadata.namespace.as_deref().unwrap_or("");
    // the first controller reference decides, as `metav1.GetControllerOf` reads them
    let controller = claim
        .metadata
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true));
    let controlled = match (controller, pod.metadata.uid.as_deref()) {
        (Some(owner), Some(uid)) => owner.uid == uid,
        _ => false,
    };
    if claim_ns == pod_ns && controlled {
        return Ok(());
    }
    Err(format!(
        "PVC {claim_ns}/{} was not created for pod {pod_ns}/{} (pod is not owner)",
        claim.metadata.name.as_deref().unwrap_or(""),
        pod.metadata.name.as_deref().unwrap_or("")
    ))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn pod() -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": "prod", "uid": "u1"},
            "spec": {"containers": [], "volumes": [
                {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}},
                {"name": "data", "persistentVolumeClaim": {"claimName": "shared"}},
                {"name": "tmp", "emptyDir": {}}]}
        }))
        .unwrap()
    }

    fn claim(namespace: &str, owners: serde_json::Value) -> PersistentVolumeClaim {
        serde_json::from_value(
            json!({"metadata": {"name": "web-scratch", "namespace": namespace,
            "ownerReferences": owners}}),
        )
        .unwrap()
    }

    fn owner(uid: &str, controller: bool) -> serde_json::Value {
        json!({"apiVersion": "v1", "kind": "Pod", "name": "web", "uid": uid,
            "controller": controller})
    }

    #[test]
    fn an_ephemeral_volume_names_the_claim_pod_dash_volume() {
        let claims: Vec<_> = pod_claims(&pod()).collect();
        assert_eq!(
            claims,
            [
                ("web-scratch".to_string(), true),
                ("shared".to_string(), false)
            ]
        );
    }

    #[test]
    fn only_a_claim_the_pod_controls_in_its_namespace_is_for_the_pod() {
        let p = pod();
        assert_eq!(
            volume_is_for_pod(&p, &claim("prod", json!([owner("u1", true)]))),
            Ok(())
        );
        let not_owner =
            Err("PVC prod/web-scratch was not created for pod prod/web (pod is not owner)".into());
        assert_eq!(
            volume_is_for_pod(&p, &claim("prod", json!(null))),
            not_owner
        );
        // an owner that is not the controller, or another pod of the same name, does not do
        assert_eq!(
            volume_is_for_pod(&p, &claim("prod", json!([owner("u1", false)]))),
            not_owner
        );
        assert_eq!(
            volume_is_for_pod(&p, &claim("prod", json!([owner("u0", true)]))),
            not_owner
        );
        assert!(volume_is_for_pod(&p, &claim("dev", json!([owner("u1", true)]))).is_err());
    }
}
