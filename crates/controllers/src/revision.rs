//! ControllerRevisions, the history of a workload's pod template (upstream's
//! `controller/history` and `ComputeHash`): the revision data (`{"spec": {"template": …,
//! "$patch": "replace"}}`), its hash (FNV-1a 32, encoded with upstream's safe alphabet) that
//! pods carry in `controller-revision-hash`, and which revision to create or renumber.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use k8s_openapi::apimachinery::pkg::runtime::RawExtension;
use kube::api::ObjectMeta;
use serde_json::json;

/// The label pods and revisions carry with their revision's hash.
pub const HASH_LABEL: &str = "controller-revision-hash";

/// The revision data of a pod template, as upstream's `getPatch` writes it.
pub fn data(template: &PodTemplateSpec) -> serde_json::Value {
    let mut t = serde_json::to_value(template).unwrap_or_default();
    if let Some(o) = t.as_object_mut() {
        o.insert("$patch".into(), json!("replace"));
    }
    json!({"spec": {"template": t}})
}

/// Upstream's `rand.SafeEncodeString`: digits mapped onto consonants and digits that cannot
/// spell words.
fn safe_encode(s: &str) -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    s.bytes()
        .map(|b| ALPHABET[b as usize % ALPHABET.len()] as char)
        .collect()
}

/// The hash of revision data with the workload's collision count.
pub fn hash(data: &serde_json::Value, collision_count: Option<i32>) -> String {
    let mut h: u32 = 0x811c_9dc5;
    let mut eat = |bytes: &[u8]| {
        for b in bytes {
            h ^= u32::from(*b);
            h = h.wrapping_mul(0x0100_0193);
        }
    };
    eat(data.to_string().as_bytes());
    if let Some(c) = collision_count {
        eat(&c.to_le_bytes());
    }
    safe_encode(&h.to_string())
}

/// What to do about the current revision of a workload.
#[derive(Debug, Clone, PartialEq)]
pub enum Current {
    /// A revision with this data exists and is the newest.
    Exists(ControllerRevision),
    /// One exists but is older than another: renumber it to the newest.
    Renumber(ControllerRevision),
    /// None exists: create this one.
    Create(ControllerRevision),
}

impl Current {
    pub fn revision(&self) -> &ControllerRevision {
        match self {
            Current::Exists(r) | Current::Renumber(r) | Current::Create(r) => r,
        }
    }
}

/// The current revision for `template` among the workload's `existing` revisions.
pub fn current(
    owner: OwnerReference,
    namespace: &str,
    name: &str,
    template: &PodTemplateSpec,
    labels: &BTreeMap<String, String>,
    collision_count: Option<i32>,
    existing: &[&ControllerRevision],
) -> Current {
    let data = data(template);
    let newest = existing.iter().map(|r| r.revision).max().unwrap_or(0);
    if let Some(same) = existing
        .iter()
        .find(|r| r.data.as_ref().map(|d| &d.0) == Some(&data))
    {
        let mut r = (*same).clone();
        if r.revision == newest {
            return Current::Exists(r);
        }
        r.revision = newest + 1;
        return Current::Renumber(r);
    }
    let hash = hash(&data, collision_count);
    let mut labels = labels.clone();
    labels.insert(HASH_LABEL.into(), hash.clone());
    Current::Create(ControllerRevision {
        metadata: ObjectMeta {
            name: Some(format!("{name}-{hash}")),
            namespace: Some(namespace.into()),
            labels: Some(labels),
            owner_references: Some(vec![owner]),
            ..Default::default()
        },
        data: Some(RawExtension(data)),
        revision: newest + 1,
    })
}

/// The hash label of a revision (its name's suffix if unlabelled).
pub fn hash_of(r: &ControllerRevision) -> String {
    let labels = r.metadata.labels.as_ref();
    labels
        .and_then(|l| l.get(HASH_LABEL).cloned())
        .unwrap_or_else(|| {
            let name = r.metadata.name.clone().unwrap_or_default();
            name.rsplit('-').next().unwrap_or_default().to_string()
        })
}

/// The revisions beyond `limit` that no live pod uses (oldest first), to delete.
pub fn to_prune<'a>(
    existing: &[&'a ControllerRevision],
    current: &str,
    in_use: &[String],
    limit: usize,
) -> Vec<&'a ControllerRevision> {
    let mut old: Vec<&ControllerRevision> = existing
        .iter()
        .copied()
        .filter(|r| {
            let h = hash_of(r);
            h != current && !in_use.contains(&h)
        })
        .collect();
    old.sort_by_key(|r| r.revision);
    let excess = old.len().saturating_sub(limit);
    old.truncate(excess);
    old
}

/// Writes `current` through the API: creates it (one created meanwhile by another writer is
/// fine), renumbers it, or leaves it.
pub async fn save(client: &kube::Client, current: &Current) -> kube::Result<()> {
    use kube::ResourceExt;
    use kube::api::{Api, PostParams};
    let r = current.revision();
    let api: Api<ControllerRevision> =
        Api::namespaced(client.clone(), &r.namespace().unwrap_or_default());
    match current {
        Current::Create(r) => match api.create(&PostParams::default(), r).await {
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
            other => other.map(|_| ()),
        },
        Current::Renumber(r) => api
            .replace(&r.name_any(), &PostParams::default(), r)
            .await
            .map(|_| ()),
        Current::Exists(_) => Ok(()),
    }
}

/// Deletes a revision; one already gone is fine.
pub async fn delete(client: &kube::Client, namespace: &str, name: &str) -> kube::Result<()> {
    use kube::api::{Api, DeleteParams};
    let api: Api<ControllerRevision> = Api::namespaced(client.clone(), namespace);
    match api.delete(name, &DeleteParams::default()).await {
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        other => other.map(|_| ()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn template(image: &str) -> PodTemplateSpec {
        serde_json::from_value(json!({"spec": {"containers": [{"name": "c", "image": image}]}}))
            .unwrap()
    }

    fn owner() -> OwnerReference {
        OwnerReference {
            api_version: "apps/v1".into(),
            kind: "DaemonSet".into(),
            name: "ds".into(),
            uid: "u".into(),
            controller: Some(true),
            block_owner_deletion: Some(true),
        }
    }

    #[test]
    fn hashes_use_the_safe_alphabet_and_change_with_the_template_and_collisions() {
        let a = hash(&data(&template("a")), None);
        assert!(
            a.chars().all(|c| "bcdfghjklmnpqrstvwxz2456789".contains(c)),
            "{a}"
        );
        assert_ne!(a, hash(&data(&template("b")), None));
        assert_ne!(a, hash(&data(&template("a")), Some(1)));
        assert_eq!(a, hash(&data(&template("a")), None));
    }

    #[test]
    fn a_template_seen_before_is_renumbered_not_recreated() {
        let labels = BTreeMap::new();
        let cur = |existing: &[&ControllerRevision], image: &str| {
            current(
                owner(),
                "ns",
                "ds",
                &template(image),
                &labels,
                None,
                existing,
            )
        };
        let Current::Create(first) = cur(&[], "a") else {
            panic!()
        };
        assert_eq!(first.revision, 1);
        assert!(first.metadata.name.as_ref().unwrap().starts_with("ds-"));
        assert_eq!(cur(&[&first], "a"), Current::Exists(first.clone()));
        let Current::Create(second) = cur(&[&first], "b") else {
            panic!()
        };
        assert_eq!(second.revision, 2);
        let Current::Renumber(back) = cur(&[&first, &second], "a") else {
            panic!()
        };
        assert_eq!(
            (back.metadata.name, back.revision),
            (first.metadata.name.clone(), 3)
        );
    }

    #[test]
    fn old_revisions_beyond_the_limit_and_unused_are_pruned() {
        let rev = |n: i64| ControllerRevision {
            metadata: ObjectMeta {
                name: Some(format!("ds-h{n}")),
                labels: Some([(HASH_LABEL.to_string(), format!("h{n}"))].into()),
                ..Default::default()
            },
            revision: n,
            data: None,
        };
        let all: Vec<ControllerRevision> = (1..=5).map(rev).collect();
        let refs: Vec<&ControllerRevision> = all.iter().collect();
        let pruned = to_prune(&refs, "h5", &["h1".into()], 2);
        let names: Vec<i64> = pruned.iter().map(|r| r.revision).collect();
        assert_eq!(names, vec![2]);
    }
}
