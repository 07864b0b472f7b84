//! `claim`: upstream's `ControllerRefManager` (`controller_ref_manager.go`) for the daemonset and
//! statefulset controllers: which of the objects in an owner's namespace it controls, after
//! adopting the orphans its selector matches and releasing the objects it owns but no longer
//! matches. The patches are upstream's: a strategic-merge patch of `ownerReferences` with the
//! object's `uid` as a precondition. The queue side, [`owners_of`] and [`queue_owners`], finds
//! the owners a change of a pod or revision concerns (its controller, or for an orphan, the owners
//! whose selector matches it).

use std::borrow::Cow;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};
use serde_json::json;
use skiff_runtime::cache::Cache;
use skiff_runtime::informer::Informer;
use skiff_runtime::workqueue::WorkQueue;

use crate::podutil;

/// What claiming decides about one object (upstream's `ClaimObject`).
#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    /// The owner controls it and its selector matches: it is the owner's, no write.
    Keep,
    /// An orphan that matches: patch this controller reference in; it is the owner's once that
    /// succeeds (a 404 means it is gone: not claimed, not an error).
    Adopt(serde_json::Value),
    /// The owner controls it but no longer matches: patch the reference out (404 and 422 mean
    /// it is gone or already released: not an error). It is not the owner's either way.
    Release(serde_json::Value),
    /// Controlled by another owner, or an orphan the owner must not adopt: not the owner's.
    Ignore,
}

/// Decides about `object` for `owner` (whose controller reference is `owner_ref`); `matches` is
/// whether the owner's selector (and any filter of the controller) matches it.
pub fn decide(
    owner: &ObjectMeta,
    owner_ref: &OwnerReference,
    object: &ObjectMeta,
    matches: bool,
) -> Decision {
    let deleting = owner.deletion_timestamp.is_some();
    let object_uid = object.uid.clone().unwrap_or_default();
    match podutil::controller_of(object) {
        Some(r) if r.uid != owner_ref.uid => Decision::Ignore,
        Some(_) if matches => Decision::Keep,
        // an owner being deleted releases nothing
        Some(_) if deleting => Decision::Ignore,
        Some(_) => Decision::Release(json!({"metadata": {
            "ownerReferences": [{"$patch": "delete", "uid": owner_ref.uid}],
            "uid": object_uid,
        }})),
        None if deleting || !matches || object.deletion_timestamp.is_some() => Decision::Ignore,
        None if owner.namespace.is_some() && owner.namespace != object.namespace => {
            Decision::Ignore
        }
        None => Decision::Adopt(json!({"metadata": {
            "ownerReferences": [owner_ref],
            "uid": object_uid,
        }})),
    }
}

/// A patch write of a claim: the object's name and the patch.
pub type Patch<'p> = Box<
    dyn Fn(String, serde_json::Value) -> Pin<Box<dyn Future<Output = kube::Result<()>> + Send + 'p>>
        + Send
        + Sync
        + 'p,
>;

/// The objects among `candidates` that `owner` controls after adopting and releasing through
/// `patch` (adopted ones carry `owner_ref` from then on). The first failed patch is the error.
pub async fn claim<'a, T>(
    owner: &ObjectMeta,
    owner_ref: &OwnerReference,
    candidates: &[&'a T],
    matches: impl Fn(&T) -> bool,
    patch: Patch<'_>,
) -> kube::Result<Vec<Cow<'a, T>>>
where
    T: Resource + Clone + 'a,
{
    let mut claimed = Vec::new();
    for &object in candidates {
        match decide(owner, owner_ref, object.meta(), matches(object)) {
            Decision::Keep => claimed.push(Cow::Borrowed(object)),
            Decision::Ignore => {}
            Decision::Adopt(p) => match patch(object.name_any(), p).await {
                Ok(()) => {
                    let mut adopted = object.clone();
                    let refs = adopted.meta_mut().owner_references.get_or_insert_default();
                    refs.push(owner_ref.clone());
                    claimed.push(Cow::Owned(adopted));
                }
                Err(e) if podutil::is_not_found(&e) => {}
                Err(e) => return Err(e),
            },
            Decision::Release(p) => match patch(object.name_any(), p).await {
                Ok(()) => {}
                Err(kube::Error::Api(s)) if s.code == 404 || s.code == 422 => {}
                Err(e) => return Err(e),
            },
        }
    }
    Ok(claimed)
}

/// The object of `K` in `cache` that controls the object with `meta` (its controller
/// reference names `K`'s kind and group, and the cached object has the reference's uid).
pub fn controller_in<K>(meta: &ObjectMeta, cache: &Cache<K>) -> Option<Arc<K>>
where
    K: Resource<DynamicType = ()>,
{
    let r = podutil::controller_of(meta)?;
    let group = K::group(&());
    let same_group = match r.api_version.split_once('/') {
        Some((g, _)) => g == group,
        None => group.is_empty(),
    };
    if r.kind != K::kind(&()) || !same_group {
        return None;
    }
    let ns = meta.namespace.as_deref().unwrap_or("");
    let owner = cache.get(&ObjectRef::new(&r.name).within(ns))?;
    (owner.meta().uid.as_deref() == Some(r.uid.as_str())).then_some(owner)
}

/// The objects of `K` in the namespace of the object with `meta` whose (non-empty) selector
/// matches its labels: the candidates to adopt an orphan.
pub fn selecting<K>(
    meta: &ObjectMeta,
    cache: &Cache<K>,
    selector: impl Fn(&K) -> Option<&LabelSelector>,
) -> Vec<Arc<K>>
where
    K: Resource<DynamicType = ()>,
{
    let labels = podutil::labels(meta);
    let mut owners = cache.namespaced(meta.namespace.as_deref().unwrap_or_default());
    owners.retain(|o| {
        podutil::selector(selector(o)).is_ok_and(|s| !s.is_empty() && s.matches(labels))
    });
    owners
}

/// The owners in `owners` a change of the object with `meta` concerns: its controller of `K`
/// if it has one (and that is cached), else (an orphan) every owner of its namespace whose
/// selector matches it (upstream's `getDaemonSetsForPod`, `getStatefulSetsForPod`).
pub fn owners_of<K>(
    meta: &ObjectMeta,
    owners: &Cache<K>,
    selector: impl Fn(&K) -> Option<&LabelSelector>,
) -> Vec<Arc<K>>
where
    K: Resource<DynamicType = ()>,
{
    if podutil::controller_of(meta).is_some() {
        return controller_in(meta, owners).into_iter().collect();
    }
    selecting(meta, owners, selector)
}

/// Queues into `queue`, for every change `objects` sees, the owners it concerns
/// ([`owners_of`]): how the daemonset and statefulset controllers follow pods and revisions.
pub fn queue_owners<K, T>(
    objects: &Informer<T>,
    owners: &Cache<K>,
    queue: &WorkQueue<ObjectRef<K>>,
    selector: fn(&K) -> Option<&LabelSelector>,
) where
    K: Resource<DynamicType = ()> + Send + Sync + 'static,
    T: Resource<DynamicType = ()> + 'static,
{
    let owners = owners.clone();
    crate::triggers::queue_mapped_keys(objects, queue, move |object: &T| {
        let owners = owners_of(object.meta(), &owners, selector);
        owners.into_iter().map(|o| ObjectRef::from_obj(o.as_ref()))
    });
}

/// `adopt` or `release`: what a claim patch does (for recording fakes).
pub fn patch_kind(patch: &serde_json::Value) -> &'static str {
    if patch["metadata"]["ownerReferences"][0]["$patch"] == "delete" {
        "release"
    } else {
        "adopt"
    }
}

/// The name of the index [`index_by_controller`] adds.
pub const CONTROLLER_INDEX: &str = "controller-uid";

/// Files the objects of `cache` under their controller reference's uid, and those without one
/// under their namespace's orphans (as upstream's `PodControllerUIDIndex`, whose orphans are one
/// key for the whole cluster): an owner's sync then reads its own objects and the orphans it
/// may adopt ([`controlled_in`], [`claimable_in`]), not every object of its namespace. Adding
/// it again to a shared cache files the same values again.
pub fn index_by_controller<K>(cache: &Cache<K>)
where
    K: Resource<DynamicType = ()>,
{
    cache.add_index(CONTROLLER_INDEX, |o: &K| {
        vec![match podutil::controller_of(o.meta()) {
            Some(r) => r.uid.clone(),
            None => orphans_of(o.meta().namespace.as_deref().unwrap_or_default()),
        }]
    });
}

/// The key orphans of `namespace` are filed under (not a uid: those have no space).
fn orphans_of(namespace: &str) -> String {
    format!("orphans of {namespace}")
}

/// The objects of `K` in `cache` (indexed by [`index_by_controller`]) that the object with
/// `owner` controls (in its namespace, their controller reference has its uid): a Job's pods, a
/// CronJob's Jobs.
pub fn controlled_in<K>(owner: &ObjectMeta, cache: &Cache<K>) -> Vec<Arc<K>>
where
    K: Resource<DynamicType = ()>,
{
    let Some(uid) = owner.uid.as_deref() else {
        return Vec::new();
    };
    let namespace = owner.namespace.as_deref();
    let mut owned = cache.by_index(CONTROLLER_INDEX, uid);
    owned.retain(|o| o.meta().namespace.as_deref() == namespace);
    owned
}

/// What [`claim`] may take for `owner` from `cache` (indexed by [`index_by_controller`]): the
/// objects it controls and the orphans of its namespace (upstream's `FilterPodsByOwner`).
pub fn claimable_in<K>(owner: &ObjectMeta, cache: &Cache<K>) -> Vec<Arc<K>>
where
    K: Resource<DynamicType = ()>,
{
    let mut objects = controlled_in(owner, cache);
    let namespace = owner.namespace.as_deref().unwrap_or_default();
    objects.extend(cache.by_index(CONTROLLER_INDEX, &orphans_of(namespace)));
    objects
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Pod;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use parking_lot::Mutex;
    use std::sync::Arc;

    fn owner() -> ObjectMeta {
        serde_json::from_value(json!({"name": "o", "namespace": "ns", "uid": "owner-uid"})).unwrap()
    }

    fn owner_ref() -> OwnerReference {
        podutil::controller_ref("apps/v1", "DaemonSet", &owner())
    }

    fn pod(name: &str, controller: Option<&str>) -> Pod {
        let refs = controller.map(|uid| {
            json!([{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "x", "uid": uid,
                "controller": true}])
        });
        serde_json::from_value(json!({"metadata": {"name": name, "namespace": "ns",
            "uid": format!("{name}-uid"), "ownerReferences": refs}}))
        .unwrap()
    }

    fn deleting(mut meta: ObjectMeta) -> ObjectMeta {
        meta.deletion_timestamp = Some(Time(jiff::Timestamp::UNIX_EPOCH));
        meta
    }

    #[test]
    fn an_owner_reads_its_own_objects_and_its_namespace_orphans_from_the_index() {
        let in_ns = |mut p: Pod, ns: &str| {
            p.metadata.namespace = Some(ns.into());
            p
        };
        let pods = Cache::from_objects([
            pod("mine", Some("owner-uid")),
            pod("orphan", None),
            pod("theirs", Some("other-uid")),
            in_ns(pod("orphan-elsewhere", None), "other"),
            in_ns(pod("mine-elsewhere", Some("owner-uid")), "other"),
        ]);
        index_by_controller(&pods);
        let names = |objects: Vec<Arc<Pod>>| {
            let mut names: Vec<String> = objects.iter().map(|p| p.name_any()).collect();
            names.sort();
            names
        };
        assert_eq!(names(controlled_in(&owner(), &pods)), ["mine"]);
        assert_eq!(names(claimable_in(&owner(), &pods)), ["mine", "orphan"]);
        // the index follows a pod adopted, and one released
        pods.store(pod("orphan", Some("owner-uid")));
        pods.store(pod("mine", None));
        assert_eq!(names(controlled_in(&owner(), &pods)), ["orphan"]);
        assert_eq!(names(claimable_in(&owner(), &pods)), ["mine", "orphan"]);
    }

    #[test]
    fn matching_orphans_are_adopted_with_the_uid_as_precondition() {
        let d = decide(&owner(), &owner_ref(), &pod("p", None).metadata, true);
        let Decision::Adopt(patch) = d else {
            panic!("{d:?}")
        };
        let refs = &patch["metadata"]["ownerReferences"];
        assert_eq!(refs[0]["uid"], "owner-uid");
        assert_eq!(refs[0]["controller"], true);
        assert_eq!(refs[0]["blockOwnerDeletion"], true);
        assert_eq!(patch["metadata"]["uid"], "p-uid");
    }

    #[test]
    fn orphans_are_not_adopted_when_they_or_the_owner_are_being_deleted_or_do_not_match() {
        let orphan = pod("p", None).metadata;
        assert_eq!(
            decide(&deleting(owner()), &owner_ref(), &orphan, true),
            Decision::Ignore
        );
        assert_eq!(
            decide(&owner(), &owner_ref(), &deleting(orphan.clone()), true),
            Decision::Ignore
        );
        assert_eq!(
            decide(&owner(), &owner_ref(), &orphan, false),
            Decision::Ignore
        );
        let mut elsewhere = orphan;
        elsewhere.namespace = Some("other".into());
        assert_eq!(
            decide(&owner(), &owner_ref(), &elsewhere, true),
            Decision::Ignore
        );
    }

    #[test]
    fn owned_objects_that_no_longer_match_are_released_unless_the_owner_is_being_deleted() {
        let owned = pod("p", Some("owner-uid")).metadata;
        assert_eq!(decide(&owner(), &owner_ref(), &owned, true), Decision::Keep);
        assert_eq!(
            decide(&deleting(owner()), &owner_ref(), &owned, true),
            Decision::Keep
        );
        let Decision::Release(patch) = decide(&owner(), &owner_ref(), &owned, false) else {
            panic!()
        };
        assert_eq!(
            patch["metadata"]["ownerReferences"][0],
            json!({"$patch": "delete", "uid": "owner-uid"})
        );
        assert_eq!(
            decide(&deleting(owner()), &owner_ref(), &owned, false),
            Decision::Ignore
        );
        let theirs = pod("p", Some("someone-else")).metadata;
        assert_eq!(
            decide(&owner(), &owner_ref(), &theirs, true),
            Decision::Ignore
        );
    }

    #[tokio::test]
    async fn claim_returns_kept_and_adopted_objects_and_tolerates_vanished_ones() {
        let pods = [
            pod("mine", Some("owner-uid")),
            pod("orphan", None),
            pod("gone", None),
            pod("stale", Some("owner-uid")),
        ];
        let writes = Arc::new(Mutex::new(Vec::new()));
        let seen = writes.clone();
        let patch: Patch = Box::new(move |name, _| {
            seen.lock().push(name.clone());
            Box::pin(async move {
                if name == "gone" {
                    Err(kube::Error::Api(Box::new(
                        kube::core::Status::failure("not found", "NotFound").with_code(404),
                    )))
                } else {
                    Ok(())
                }
            })
        });
        let claimed = claim(
            &owner(),
            &owner_ref(),
            &pods.iter().collect::<Vec<_>>(),
            |p: &Pod| p.name_any() != "stale",
            patch,
        )
        .await
        .unwrap();
        let names: Vec<String> = claimed.iter().map(|p| p.name_any()).collect();
        assert_eq!(names, ["mine", "orphan"]);
        let adopted = podutil::controller_of(&claimed[1].metadata).map(|r| r.uid.as_str());
        assert_eq!(adopted, Some("owner-uid"));
        assert_eq!(*writes.lock(), ["orphan", "gone", "stale"]);
    }

    #[test]
    fn a_change_concerns_its_cached_controller_or_for_an_orphan_every_owner_that_selects_it() {
        use k8s_openapi::api::apps::v1::DaemonSet;
        let ds = |name: &str, ns: &str, app: &str| -> DaemonSet {
            serde_json::from_value(json!({
                "metadata": {"name": name, "namespace": ns, "uid": format!("{name}-uid")},
                "spec": {"selector": {"matchLabels": {"app": app}},
                    "template": {"metadata": {"labels": {"app": app}}}},
            }))
            .unwrap()
        };
        let owners = Cache::from_objects([
            ds("x", "ns", "web"),
            ds("y", "ns", "web"),
            ds("z", "ns", "db"),
            ds("w", "other", "web"),
        ]);
        let selector: fn(&DaemonSet) -> Option<&LabelSelector> =
            |d| d.spec.as_ref().map(|s| &s.selector);
        let names = |owners: Vec<Arc<DaemonSet>>| {
            let mut names: Vec<String> = owners.iter().map(|o| o.name_any()).collect();
            names.sort();
            names
        };
        let labelled = |mut p: Pod| {
            p.metadata.labels = Some([("app".to_string(), "web".to_string())].into());
            p
        };
        let owned = labelled(pod("p", Some("x-uid")));
        assert_eq!(names(owners_of(&owned.metadata, &owners, selector)), ["x"]);
        // controlled by an owner that is gone (another uid): none, not the orphan's owners
        let stale = labelled(pod("p", Some("old-uid")));
        assert!(owners_of(&stale.metadata, &owners, selector).is_empty());
        let orphan = labelled(pod("p", None));
        assert_eq!(
            names(owners_of(&orphan.metadata, &owners, selector)),
            ["x", "y"]
        );
    }
}
