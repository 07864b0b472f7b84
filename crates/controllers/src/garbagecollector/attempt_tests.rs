//! Unit tests of the collector's per-item decisions against a recording fake API.

use std::collections::HashMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use parking_lot::Mutex;

use super::*;

#[derive(Default)]
struct Fake {
    /// (kind, name) → metadata.
    objects: HashMap<(String, String), ObjectMeta>,
    calls: Mutex<Vec<String>>,
}

impl Fake {
    fn with(mut self, kind: &str, meta: ObjectMeta) -> Fake {
        self.objects
            .insert((kind.into(), meta.name.clone().unwrap()), meta);
        self
    }
}

#[async_trait]
impl Objects for Fake {
    fn namespaced(&self, _: &str, kind: &str) -> Option<bool> {
        (kind != "Unknown").then_some(kind != "Node")
    }
    async fn get(&self, t: &Target) -> Result<Option<ObjectMeta>> {
        Ok(self.objects.get(&(t.kind.clone(), t.name.clone())).cloned())
    }
    async fn delete(&self, id: &Identity, policy: Policy) -> Result<()> {
        self.calls
            .lock()
            .push(format!("delete {} {:?}", id.name, policy));
        Ok(())
    }
    async fn remove_owner_references(&self, id: &Identity, owners: &[String]) -> Result<()> {
        self.calls
            .lock()
            .push(format!("unown {} from {}", id.name, owners.join(",")));
        Ok(())
    }
    async fn remove_finalizer(&self, id: &Identity, finalizer: &str) -> Result<()> {
        self.calls
            .lock()
            .push(format!("release {} {finalizer}", id.name));
        Ok(())
    }
}

fn meta(name: &str, uid: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.into()),
        namespace: Some("ns".into()),
        uid: Some(uid.into()),
        ..Default::default()
    }
}

fn owned(name: &str, uid: &str, owners: &[(&str, &str)]) -> ObjectMeta {
    let mut m = meta(name, uid);
    m.owner_references = Some(
        owners
            .iter()
            .map(|(n, u)| OwnerReference {
                api_version: "apps/v1".into(),
                kind: "ReplicaSet".into(),
                name: n.to_string(),
                uid: u.to_string(),
                block_owner_deletion: Some(true),
                controller: None,
            })
            .collect(),
    );
    m
}

fn deleting(mut m: ObjectMeta, finalizer: &str) -> ObjectMeta {
    m.deletion_timestamp = Some(Time(jiff::Timestamp::UNIX_EPOCH));
    m.finalizers = Some(vec![finalizer.into()]);
    m
}

fn id(kind: &str, name: &str, uid: &str) -> Identity {
    Identity {
        api_version: if kind == "Pod" { "v1" } else { "apps/v1" }.into(),
        kind: kind.into(),
        namespace: Some("ns".into()),
        name: name.into(),
        uid: uid.into(),
    }
}

fn snapshot(id: Identity) -> Snapshot {
    Snapshot {
        id,
        dependents: vec![],
        blocking: vec![],
    }
}

async fn delete_item(api: &Fake, item: Snapshot) -> Done {
    let work = Work::Delete(item.id.uid.clone());
    attempt(api, &item, &work).await.unwrap()
}

#[tokio::test]
async fn a_dependent_whose_only_owner_is_gone_is_deleted_in_the_background() {
    let api = Fake::default().with("Pod", owned("p", "p1", &[("rs", "rs1")]));
    let done = delete_item(&api, snapshot(id("Pod", "p", "p1"))).await;
    assert_eq!(done, Done::Deleted(Policy::Background));
    assert_eq!(*api.calls.lock(), vec!["delete p Background"]);
}

#[tokio::test]
async fn an_owner_with_the_same_name_but_another_uid_counts_as_gone() {
    let api = Fake::default()
        .with("Pod", owned("p", "p1", &[("rs", "rs1")]))
        .with("ReplicaSet", meta("rs", "rs2"));
    let done = delete_item(&api, snapshot(id("Pod", "p", "p1"))).await;
    assert_eq!(done, Done::Deleted(Policy::Background));
}

#[tokio::test]
async fn a_dependent_with_a_live_owner_only_loses_its_dangling_references() {
    let api = Fake::default()
        .with("Pod", owned("p", "p1", &[("rs", "rs1"), ("old", "gone")]))
        .with("ReplicaSet", meta("rs", "rs1"));
    let done = delete_item(&api, snapshot(id("Pod", "p", "p1"))).await;
    assert_eq!(done, Done::Unowned(vec!["gone".into()]));
    assert_eq!(*api.calls.lock(), vec!["unown p from gone"]);

    let api = Fake::default()
        .with("Pod", owned("p", "p1", &[("rs", "rs1")]))
        .with("ReplicaSet", meta("rs", "rs1"));
    assert_eq!(
        delete_item(&api, snapshot(id("Pod", "p", "p1"))).await,
        Done::Nothing
    );
    assert!(api.calls.lock().is_empty());
}

#[tokio::test]
async fn a_dependent_of_a_foreground_owner_goes_in_the_foreground_when_it_has_dependents() {
    let api = Fake::default()
        .with("ReplicaSet", owned("rs", "rs1", &[("d", "d1")]))
        .with("Deployment", deleting(meta("d", "d1"), FOREGROUND));
    // (the fake's owner kind is ReplicaSet; point the reference at the Deployment)
    let mut api = api;
    let rs = api
        .objects
        .get_mut(&("ReplicaSet".into(), "rs".into()))
        .unwrap();
    rs.owner_references.as_mut().unwrap()[0].kind = "Deployment".into();
    let mut item = snapshot(id("ReplicaSet", "rs", "rs1"));
    item.dependents = vec![id("Pod", "p", "p1")];
    assert_eq!(
        delete_item(&api, item).await,
        Done::Deleted(Policy::Foreground)
    );
    // without dependents of its own it simply goes
    let item = snapshot(id("ReplicaSet", "rs", "rs1"));
    assert_eq!(
        delete_item(&api, item).await,
        Done::Deleted(Policy::Background)
    );
}

#[tokio::test]
async fn a_foreground_owner_waits_for_blocking_dependents_then_loses_its_finalizer() {
    let api = Fake::default().with("ReplicaSet", deleting(meta("rs", "rs1"), FOREGROUND));
    let mut item = snapshot(id("ReplicaSet", "rs", "rs1"));
    item.blocking = vec![(id("Pod", "p", "p1"), false), (id("Pod", "q", "q1"), true)];
    assert_eq!(
        delete_item(&api, item.clone()).await,
        Done::Waiting(vec![Work::Delete("p1".into())])
    );
    assert!(api.calls.lock().is_empty());
    item.blocking.clear();
    item.dependents = vec![id("Pod", "nb", "nb1")];
    assert_eq!(delete_item(&api, item).await, Done::Released(FOREGROUND));
    assert_eq!(*api.calls.lock(), vec!["release rs foregroundDeletion"]);
}

#[tokio::test]
async fn an_object_being_deleted_otherwise_or_replaced_is_left_alone() {
    let api = Fake::default()
        .with(
            "Pod",
            deleting(owned("p", "p1", &[("rs", "rs1")]), "example.com/x"),
        )
        .with("ReplicaSet", meta("rs", "other"));
    assert_eq!(
        delete_item(&api, snapshot(id("Pod", "p", "p1"))).await,
        Done::Nothing
    );
    // the graph's rs1 is not the rs that exists now
    assert_eq!(
        delete_item(&api, snapshot(id("ReplicaSet", "rs", "rs1"))).await,
        Done::Nothing
    );
    assert!(api.calls.lock().is_empty());
}

#[tokio::test]
async fn orphaning_strips_every_dependent_then_releases_the_owner() {
    let api = Fake::default().with("ReplicaSet", deleting(meta("rs", "rs1"), ORPHAN));
    let mut item = snapshot(id("ReplicaSet", "rs", "rs1"));
    item.dependents = vec![id("Pod", "p", "p1"), id("Pod", "q", "q1")];
    let done = attempt(&api, &item, &Work::Orphan("rs1".into()))
        .await
        .unwrap();
    assert_eq!(done, Done::Released(ORPHAN));
    assert_eq!(
        *api.calls.lock(),
        vec!["unown p from rs1", "unown q from rs1", "release rs orphan"]
    );
}

#[tokio::test]
async fn an_owner_of_an_unknown_kind_is_an_error_to_retry() {
    let mut p = owned("p", "p1", &[("x", "x1")]);
    p.owner_references.as_mut().unwrap()[0].kind = "Unknown".into();
    let api = Fake::default().with("Pod", p);
    let item = snapshot(id("Pod", "p", "p1"));
    let err = attempt(&api, &item, &Work::Delete("p1".into()))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Unresolvable { .. }), "{err}");
}
