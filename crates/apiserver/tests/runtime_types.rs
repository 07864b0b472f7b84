//! The in-process API layer: an [`ApiServer`] over a temporary embedded store, served on a free
//! loopback port inside the test and driven with kube-rs, no child process. Here: a resource
//! type installed while the server runs is served everywhere (routing, discovery, the watch
//! cache, every verb), and once removed it is gone everywhere and its watches end.

mod common;

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams,
    WatchEvent, WatchParams,
};
use kube::discovery::Discovery;
use serde_json::json;
use skiff_apimachinery::catalog::{CRUD, ResourceType, Subresource};
use skiff_apiserver::strategy::{Plain, Strategy};

/// A served version of `widgets.example.com`, with no rules of its own.
fn widget_type(version: &str) -> (ResourceType, Arc<dyn Strategy>) {
    let rt = ResourceType {
        group: "example.com".into(),
        version: version.into(),
        kind: "Widget".into(),
        plural: "widgets".into(),
        singular: "widget".into(),
        namespaced: true,
        short_names: vec!["wd".into()],
        categories: vec!["all".into()],
        verbs: CRUD.iter().map(|v| v.to_string()).collect(),
        subresources: vec![Subresource {
            name: "status".into(),
            group: "example.com".into(),
            version: version.into(),
            kind: "Widget".into(),
            verbs: vec!["get".into(), "patch".into(), "update".into()],
        }],
        builtin: false,
        storage_version: None,
    };
    (rt, Arc::new(Plain))
}

fn widgets(client: &kube::Client, version: &str) -> Api<DynamicObject> {
    let resource = ApiResource {
        group: "example.com".into(),
        version: version.into(),
        api_version: format!("example.com/{version}"),
        kind: "Widget".into(),
        plural: "widgets".into(),
    };
    Api::namespaced_with(client.clone(), "default", &resource)
}

fn widget(name: &str, version: &str) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": format!("example.com/{version}"), "kind": "Widget",
        "metadata": {"name": name}, "spec": {"size": 1},
    }))
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_type_installed_while_serving_is_served_until_removed() {
    let running = common::start().await;
    let client = running.client.clone();
    let api = widgets(&client, "v1");

    // Before: no such path (404 NotFound with a Status), nor in discovery.
    common::assert_unserved(&client, &api, "example.com").await;

    running
        .server
        .install(
            vec![widget_type("v1"), widget_type("v1beta1")],
            Arc::new(Plain),
        )
        .await
        .unwrap();

    // Discovery (kube-rs asks for the aggregated form) lists both versions.
    let discovery = Discovery::new(client.clone()).run().await.unwrap();
    let group = discovery
        .groups()
        .find(|g| g.name() == "example.com")
        .expect("example.com in discovery");
    let mut versions: Vec<_> = group.versions().collect();
    versions.sort();
    assert_eq!(versions, ["v1", "v1beta1"]);
    let (resource, caps) = group
        .recommended_resources()
        .into_iter()
        .find(|(r, _)| r.plural == "widgets")
        .expect("widgets in discovery");
    assert_eq!(resource.kind, "Widget");
    let subresources: Vec<_> = caps
        .subresources
        .iter()
        .map(|(s, _)| s.plural.clone())
        .collect();
    assert!(
        subresources.iter().any(|s| s.ends_with("status")),
        "{subresources:?}"
    );

    // Every verb, through the same handlers as the built-in kinds.
    let mut events = api
        .watch(&WatchParams::default(), "0")
        .await
        .unwrap()
        .boxed();
    let created = api
        .create(&PostParams::default(), &widget("w1", "v1"))
        .await
        .unwrap();
    assert!(created.metadata.uid.is_some());
    assert!(created.metadata.creation_timestamp.is_some());
    let err = api
        .create(&PostParams::default(), &widget("w1", "v1"))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, kube::Error::Api(s) if s.code == 409 && s.reason == "AlreadyExists"),
        "{err:?}"
    );
    let patched = api
        .patch(
            "w1",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"size": 2}})),
        )
        .await
        .unwrap();
    assert_eq!(patched.data["spec"]["size"], 2);
    let got = api.get("w1").await.unwrap();
    assert_eq!(got.data["spec"]["size"], 2);
    // The other version reads the same storage.
    let other = widgets(&client, "v1beta1").get("w1").await.unwrap();
    assert_eq!(other.metadata.uid, created.metadata.uid);
    let listed = api.list(&ListParams::default()).await.unwrap();
    assert_eq!(listed.items.len(), 1);

    let mut seen = Vec::new();
    while seen.len() < 2 {
        let event = tokio::time::timeout(Duration::from_secs(10), events.next())
            .await
            .expect("a watch event within 10 s")
            .expect("the watch still open")
            .unwrap();
        match event {
            WatchEvent::Added(o) => seen.push(("ADDED", o.data["spec"]["size"].clone())),
            WatchEvent::Modified(o) => seen.push(("MODIFIED", o.data["spec"]["size"].clone())),
            WatchEvent::Bookmark(_) => {}
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(seen, [("ADDED", json!(1)), ("MODIFIED", json!(2))]);

    // Removing one version keeps the other, and the objects with it.
    running
        .server
        .remove("example.com", "widgets", |r| r.version == "v1beta1");
    let err = api.get("w1").await.unwrap_err();
    assert!(
        matches!(&err, kube::Error::Api(s) if s.code == 404),
        "{err:?}"
    );
    let beta = widgets(&client, "v1beta1");
    assert_eq!(beta.get("w1").await.unwrap().data["spec"]["size"], 2);

    // Removing the last: gone from routing and discovery, and its watches end.
    let mut beta_events = beta
        .watch(&WatchParams::default(), "0")
        .await
        .unwrap()
        .boxed();
    let first = tokio::time::timeout(Duration::from_secs(10), beta_events.next())
        .await
        .unwrap();
    assert!(matches!(first, Some(Ok(WatchEvent::Added(_)))));
    running.server.remove("example.com", "widgets", |_| false);
    let end = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            match beta_events.next().await {
                Some(Ok(WatchEvent::Bookmark(_))) => continue,
                other => return other,
            }
        }
    })
    .await
    .expect("the watch ends within 10 s of the removal");
    assert!(end.is_none(), "{end:?}");
    common::assert_unserved(&client, &beta, "example.com").await;

    // Installed again, the type's cache is filled from the store: the object is still there.
    running
        .server
        .install(vec![widget_type("v1")], Arc::new(Plain))
        .await
        .unwrap();
    assert_eq!(
        api.list(&ListParams::default()).await.unwrap().items.len(),
        1
    );
    api.delete("w1", &DeleteParams::default()).await.unwrap();
    assert!(
        api.list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );

    running.stop().await;
}
