//! A StatefulSet's pods and claims by identity (upstream's `stateful_set_utils.go`): pod
//! `<set>-<ordinal>` with the `statefulset.kubernetes.io/pod-name` and `apps.kubernetes.io/pod-index`
//! labels, hostname and subdomain (`serviceName`), volumes from `volumeClaimTemplates` bound to
//! claims `<template>-<pod>`, and the template of a revision.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{ControllerRevision, StatefulSet};
use k8s_openapi::api::core::v1::{
    PersistentVolumeClaim, PersistentVolumeClaimVolumeSource, Pod, PodTemplateSpec, Volume,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::ObjectMeta;
use kube::{Resource, ResourceExt};

use crate::revision::HASH_LABEL;
use crate::statefulset_claims::{self as retention, ClaimPod};

/// The label with a stateful pod's name.
pub const POD_NAME_LABEL: &str = "statefulset.kubernetes.io/pod-name";
/// The label with a stateful pod's ordinal.
pub const POD_INDEX_LABEL: &str = "apps.kubernetes.io/pod-index";

/// The ordinal of a pod named `<set>-<n>`, if it is one of the set's names.
pub fn ordinal(set: &StatefulSet, pod: &Pod) -> Option<i32> {
    let name = pod.name_any();
    let rest = name.strip_prefix(&format!("{}-", set.name_any()))?;
    rest.parse()
        .ok()
        .filter(|n: &i32| *n >= 0 && n.to_string() == rest)
}

/// The name of the pod with ordinal `n`.
pub fn pod_name(set: &StatefulSet, n: i32) -> String {
    format!("{}-{n}", set.name_any())
}

/// The claim of template `template` for pod `pod`.
pub fn claim_name(template: &str, pod: &str) -> String {
    format!("{template}-{pod}")
}

/// The controller owner reference to a StatefulSet.
pub fn owner(set: &StatefulSet) -> OwnerReference {
    OwnerReference {
        api_version: StatefulSet::api_version(&()).into(),
        kind: StatefulSet::kind(&()).into(),
        name: set.name_any(),
        uid: set.uid().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

/// The pod template a revision records.
pub fn revision_template(r: &ControllerRevision) -> Option<PodTemplateSpec> {
    let mut t = r.data.as_ref()?.0.get("spec")?.get("template")?.clone();
    t.as_object_mut()?.remove("$patch");
    serde_json::from_value(t).ok()
}

/// The claims the pod with ordinal `n` needs, as they are created: labelled from their template
/// and the selector, and owned as the retention policy wants while the pod is among the
/// replicas (by the set with `whenDeleted: Delete`), so no update has to follow.
pub fn claims(set: &StatefulSet, n: i32) -> Vec<PersistentVolumeClaim> {
    let spec = set.spec.clone().unwrap_or_default();
    let pod = pod_name(set, n);
    let selector = spec.selector.match_labels.clone().unwrap_or_default();
    spec.volume_claim_templates
        .unwrap_or_default()
        .into_iter()
        .map(|t| {
            let mut labels = t.metadata.labels.clone().unwrap_or_default();
            labels.extend(selector.clone());
            let mut claim = PersistentVolumeClaim {
                metadata: ObjectMeta {
                    name: Some(claim_name(&t.name_any(), &pod)),
                    namespace: set.namespace(),
                    labels: Some(labels),
                    annotations: t.metadata.annotations.clone(),
                    ..Default::default()
                },
                spec: t.spec.clone(),
                status: None,
            };
            let owner = ClaimPod {
                name: &pod,
                uid: "",
                in_range: true,
            };
            let owners = retention::wanted_owners(&claim, set, &owner);
            claim.metadata.owner_references = Some(owners).filter(|o| !o.is_empty());
            claim
        })
        .collect()
}

/// The pod with ordinal `n` from `template` at revision `revision` (its name, upstream's label).
pub fn new_pod(set: &StatefulSet, template: &PodTemplateSpec, n: i32, revision: &str) -> Pod {
    let name = pod_name(set, n);
    let meta = template.metadata.clone().unwrap_or_default();
    let mut labels: BTreeMap<String, String> = meta.labels.unwrap_or_default();
    labels.insert(POD_NAME_LABEL.into(), name.clone());
    labels.insert(POD_INDEX_LABEL.into(), n.to_string());
    labels.insert(HASH_LABEL.into(), revision.into());
    let mut spec = template.spec.clone().unwrap_or_default();
    spec.hostname = Some(name.clone());
    let service = set.spec.as_ref().and_then(|s| s.service_name.clone());
    spec.subdomain = service.filter(|s| !s.is_empty());
    let templates = set
        .spec
        .as_ref()
        .and_then(|s| s.volume_claim_templates.clone())
        .unwrap_or_default();
    if !templates.is_empty() {
        let mut volumes = spec.volumes.take().unwrap_or_default();
        for t in &templates {
            volumes.retain(|v| v.name != t.name_any());
            volumes.push(Volume {
                name: t.name_any(),
                persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                    claim_name: claim_name(&t.name_any(), &name),
                    read_only: None,
                }),
                ..Default::default()
            });
        }
        spec.volumes = Some(volumes);
    }
    Pod {
        metadata: ObjectMeta {
            name: Some(name),
            namespace: set.namespace(),
            labels: Some(labels),
            annotations: meta.annotations,
            owner_references: Some(vec![owner(set)]),
            ..Default::default()
        },
        spec: Some(spec),
        status: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    pub fn set() -> StatefulSet {
        serde_json::from_value(json!({"metadata": {"name": "db", "namespace": "ns", "uid": "u"},
            "spec": {"serviceName": "db-headless", "selector": {"matchLabels": {"app": "db"}},
                "persistentVolumeClaimRetentionPolicy": {"whenDeleted": "Delete", "whenScaled": "Retain"},
                "volumeClaimTemplates": [{"metadata": {"name": "data"},
                    "spec": {"accessModes": ["ReadWriteOnce"],
                        "resources": {"requests": {"storage": "1Gi"}}}}],
                "template": {"metadata": {"labels": {"app": "db"}},
                    "spec": {"containers": [{"name": "c", "image": "i"}]}}}}))
        .unwrap()
    }

    #[test]
    fn a_pod_has_its_identity_labels_hostname_and_claim_volume() {
        let s = set();
        let t = s.spec.as_ref().unwrap().template.clone();
        let pod = new_pod(&s, &t, 2, "h1");
        assert_eq!(pod.name_any(), "db-2");
        let labels = pod.labels();
        assert_eq!(labels[POD_NAME_LABEL], "db-2");
        assert_eq!(labels[POD_INDEX_LABEL], "2");
        assert_eq!(labels[HASH_LABEL], "h1");
        let spec = pod.spec.unwrap();
        assert_eq!(spec.hostname.as_deref(), Some("db-2"));
        assert_eq!(spec.subdomain.as_deref(), Some("db-headless"));
        let v = &spec.volumes.unwrap()[0];
        assert_eq!(
            v.persistent_volume_claim.as_ref().unwrap().claim_name,
            "data-db-2"
        );
        assert_eq!(ordinal(&s, &pod_named("db-2")), Some(2));
        assert_eq!(ordinal(&s, &pod_named("db-02")), None);
        assert_eq!(ordinal(&s, &pod_named("dbx-2")), None);
    }

    fn pod_named(name: &str) -> Pod {
        let mut p = Pod::default();
        p.metadata.name = Some(name.into());
        p
    }

    #[test]
    fn claims_are_named_per_pod_and_owned_by_the_set_only_when_deleted_with_it() {
        let s = set();
        let c = claims(&s, 0);
        assert_eq!(c.len(), 1);
        assert_eq!(c[0].name_any(), "data-db-0");
        assert_eq!(c[0].labels()["app"], "db");
        let owner = &c[0].owner_references()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.controller),
            ("StatefulSet", Some(true))
        );
        let mut retain = set();
        retain
            .spec
            .as_mut()
            .unwrap()
            .persistent_volume_claim_retention_policy = None;
        assert!(claims(&retain, 0)[0].metadata.owner_references.is_none());
    }
}
