//! API semantics a client notices, in process, each as upstream answers it: paginated lists
//! say how many items remain, list and watch options that do not go together are a 422
//! `Invalid` naming them, a watch from before the watch cache's window is 410 `Expired`, a
//! short watch gets a bookmark before its deadline, a dry run create of a name in use is 409,
//! no finalizer can be added to an object being deleted, unknown fields are never stored, a
//! LoadBalancer Service's node ports and health check port are allocated as upstream does, and a
//! Binding sets the pod's node once and its annotations on the pod.

mod common;

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{
    Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams,
};

fn config_map(name: &str) -> ConfigMap {
    serde_json::from_value(serde_json::json!({"metadata": {"name": name}})).unwrap()
}

/// The resourceVersion of a list of `api`'s objects.
async fn list_revision<K>(api: &Api<K>) -> String
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let list = api.list(&ListParams::default()).await.unwrap();
    list.metadata.resource_version.unwrap()
}

/// The Status of a request that must fail.
fn status<T: std::fmt::Debug>(result: kube::Result<T>) -> kube::core::Status {
    match result {
        Err(kube::Error::Api(s)) => *s,
        other => panic!("expected an API error, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lists_watches_dry_runs_and_finalizers_answer_as_upstream() {
    let running = common::start().await;
    let api: Api<ConfigMap> = Api::namespaced(running.client.clone(), "default");
    for name in ["a", "b", "c", "d", "e"] {
        api.create(&PostParams::default(), &config_map(name))
            .await
            .unwrap();
    }

    // A page of an unfiltered list says how many objects follow it; a filtered one does not.
    let page = api.list(&ListParams::default().limit(2)).await.unwrap();
    assert_eq!(page.items.len(), 2);
    assert_eq!(page.metadata.remaining_item_count, Some(3));
    let next = api
        .list(
            &ListParams::default()
                .limit(2)
                .continue_token(page.metadata.continue_.as_deref().unwrap()),
        )
        .await
        .unwrap();
    assert_eq!(next.metadata.remaining_item_count, Some(1));
    let filtered = api
        .list(&ListParams::default().limit(2).fields("metadata.name!=zz"))
        .await
        .unwrap();
    assert!(filtered.metadata.continue_.is_some());
    assert_eq!(filtered.metadata.remaining_item_count, None);

    // List options that do not go together.
    // (kube-rs refuses to build this one, so it is sent as is)
    let list = http::Request::get(
        "/api/v1/namespaces/default/configmaps?resourceVersionMatch=NotOlderThan",
    )
    .body(Vec::new())
    .unwrap();
    let s = status(running.client.request_text(list).await);
    assert_eq!((s.code, s.reason.as_str()), (422, "Invalid"));
    assert_eq!(
        s.message,
        r#"ListOptions.meta.k8s.io "" is invalid: resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided"#
    );
    let watch = http::Request::get(
        "/api/v1/namespaces/default/configmaps?watch=1&sendInitialEvents=true&allowWatchBookmarks=true",
    )
    .body(Vec::new())
    .unwrap();
    let s = status(running.client.request_text(watch).await);
    assert_eq!(
        (s.code, s.message.as_str()),
        (
            422,
            r#"ListOptions.meta.k8s.io "" is invalid: resourceVersionMatch: Forbidden: sendInitialEvents requires setting resourceVersionMatch to NotOlderThan"#
        )
    );

    // A watch from before the cache's window: one ERROR event, 410 Expired.
    let mut old = api
        .watch(&WatchParams::default(), "1")
        .await
        .unwrap()
        .boxed();
    match old.next().await.unwrap().unwrap() {
        WatchEvent::Error(e) => {
            assert_eq!((e.code, e.reason.as_str()), (410, "Expired"), "{e:?}");
            assert!(
                e.message.starts_with("too old resource version: 1 ("),
                "{e:?}"
            );
        }
        other => panic!("expected an ERROR event, got {other:?}"),
    }

    // A short watch that asked for bookmarks gets one before its deadline.
    let rv = list_revision(&api).await;
    let mut short = api
        .watch(
            &WatchParams {
                bookmarks: true,
                ..WatchParams::default().timeout(3)
            },
            &rv,
        )
        .await
        .unwrap()
        .boxed();
    let mut bookmarked = false;
    while let Some(event) = short.next().await {
        bookmarked |= matches!(event.unwrap(), WatchEvent::Bookmark(_));
    }
    assert!(bookmarked, "no bookmark before the 3 s deadline");

    // A dry run create of a name in use conflicts, as the real create would.
    let s = status(
        api.create(
            &PostParams {
                dry_run: true,
                ..Default::default()
            },
            &config_map("a"),
        )
        .await,
    );
    assert_eq!((s.code, s.reason.as_str()), (409, "AlreadyExists"));

    // No new finalizers on an object being deleted.
    api.patch(
        "b",
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"metadata": {"finalizers": ["example.com/one"]}})),
    )
    .await
    .unwrap();
    api.delete("b", &DeleteParams::default()).await.unwrap();
    let s = status(
        api.patch(
            "b",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"metadata": {
                "finalizers": ["example.com/one", "example.com/two"]}})),
        )
        .await,
    );
    assert_eq!(s.code, 422);
    assert!(
        s.message.ends_with(r#"metadata.finalizers: Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers []string{"example.com/two"}"#),
        "{}",
        s.message
    );
    // Unknown fields are dropped, whatever the field validation (kube-rs cannot send one).
    for mode in ["Ignore", "Warn"] {
        let name = format!("unknown-{}", mode.to_lowercase());
        let body = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name}, "data": {"a": "1"}, "bogus": {"x": 1}});
        let post = http::Request::post(format!(
            "/api/v1/namespaces/default/configmaps?fieldValidation={mode}"
        ))
        .header("content-type", "application/json")
        .body(serde_json::to_vec(&body).unwrap())
        .unwrap();
        running.client.request_text(post).await.unwrap();
        let get = http::Request::get(format!("/api/v1/namespaces/default/configmaps/{name}"))
            .body(Vec::new())
            .unwrap();
        let stored: serde_json::Value =
            serde_json::from_str(&running.client.request_text(get).await.unwrap()).unwrap();
        assert!(stored.get("bogus").is_none(), "{mode}: {stored}");
        assert_eq!(stored["data"]["a"], "1");
    }
    running.stop().await;
}

/// A watch of a quiet node's pods, while another client writes and reads consistently all
/// along (every such read makes the watch cache ask the store for progress), gets at most one
/// bookmark every 5 seconds before its final one, and its last bookmark is past the other
/// client's writes: a resume point inside the cache's history, without a bookmark per progress.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quiet_watch_is_bookmarked_sparingly_past_the_others_writes() {
    use k8s_openapi::api::core::v1::Pod;
    let running = common::start().await;
    let pods: Api<Pod> = Api::namespaced(running.client.clone(), "default");
    let rv = list_revision(&pods).await;
    let params = WatchParams {
        bookmarks: true,
        ..WatchParams::default()
            .fields("spec.nodeName=quiet")
            .timeout(8)
    };
    let mut quiet = pods.watch(&params, &rv).await.unwrap().boxed();
    let cms: Api<ConfigMap> = Api::namespaced(running.client.clone(), "default");
    let first = cms
        .create(&PostParams::default(), &config_map("busy"))
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    let busy = tokio::spawn(async move {
        for i in 0u32.. {
            let patch = serde_json::json!({"data": {"i": i.to_string()}});
            cms.patch("busy", &PatchParams::default(), &Patch::Merge(patch))
                .await
                .unwrap();
            pods.list(&ListParams::default()).await.unwrap();
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    });
    let mut bookmarks = Vec::new();
    while let Some(event) = quiet.next().await {
        match event.unwrap() {
            WatchEvent::Bookmark(b) => bookmarks.push(b.metadata.resource_version),
            other => panic!("nothing but bookmarks on a quiet node, got {other:?}"),
        }
    }
    busy.abort();
    let revision = |rv: &str| rv.parse::<i64>().unwrap();
    // one at most after 5 s of the 6 before the final one, and the final one
    assert!(
        (1..=2).contains(&bookmarks.len()),
        "bookmarks in 8 s: {bookmarks:?}"
    );
    let last = bookmarks.last().unwrap();
    assert!(
        revision(last) >= revision(&first),
        "the last bookmark ({last}) is from before the first of the other writes ({first})"
    );
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_that_times_out_ends_with_a_bookmark_at_the_present_past_pods_it_never_saw() {
    use k8s_openapi::api::core::v1::Pod;
    let running = common::start().await;
    let pods: Api<Pod> = Api::namespaced(running.client.clone(), "default");
    let rv = list_revision(&pods).await;
    // Pods come and go on node "busy" as fast as they are acknowledged; nothing lists pods, so
    // the watch of node "quiet" hears of them only through its final bookmark.
    let t0 = std::time::Instant::now();
    let writer = pods.clone();
    let busy = tokio::spawn(async move {
        let mut acknowledged = Vec::new();
        for i in 0u32.. {
            let pod: Pod = serde_json::from_value(serde_json::json!({
                "metadata": {"name": format!("busy-{i}")},
                "spec": {"nodeName": "busy", "containers": [{"name": "c", "image": "busybox"}]}}))
            .unwrap();
            let created = writer.create(&PostParams::default(), &pod).await.unwrap();
            let at = created
                .metadata
                .resource_version
                .unwrap()
                .parse::<i64>()
                .unwrap();
            acknowledged.push((t0.elapsed(), at));
            if t0.elapsed() > std::time::Duration::from_secs(3) {
                return acknowledged;
            }
        }
        unreachable!()
    });
    // timeoutSeconds=4: the final bookmark goes 2 s before, 2 s or more after t0
    let params = WatchParams {
        bookmarks: true,
        ..WatchParams::default()
            .fields("spec.nodeName=quiet")
            .timeout(4)
    };
    let mut quiet = pods.watch(&params, &rv).await.unwrap().boxed();
    let mut bookmarks = Vec::new();
    while let Some(event) = quiet.next().await {
        match event.unwrap() {
            WatchEvent::Bookmark(b) => bookmarks.push(b.metadata.resource_version),
            other => panic!("nothing but bookmarks on a quiet node, got {other:?}"),
        }
    }
    let acknowledged = busy.await.unwrap();
    // a second's margin for the watch cache to apply what the store acknowledged
    let before = acknowledged
        .iter()
        .filter(|(at, _)| *at < std::time::Duration::from_secs(1))
        .map(|(_, rv)| *rv)
        .max()
        .expect("pods were written in the first second");
    let last = bookmarks.last().expect("a final bookmark");
    assert!(
        last.parse::<i64>().unwrap() >= before,
        "the final bookmark ({last}) is from before pods written a second before it ({before}): \
         a client resuming from it might find it gone from the history"
    );
    running.stop().await;
}

/// Creates ConfigMap `name` in `default` with data `k: v`.
async fn create_with_data(client: &kube::Client, name: &str) {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let mut cm = config_map(name);
    cm.data = Some([("k".to_string(), "v".to_string())].into());
    api.create(&PostParams::default(), &cm).await.unwrap();
}

/// The raw body of a GET, whatever its status.
async fn raw_get(client: &kube::Client, path: &str, accept: &str) -> (u16, String, Vec<u8>) {
    let req = http::Request::get(path)
        .header("accept", accept)
        .body(Vec::new())
        .unwrap();
    let (code, headers, body) = common::send_raw(client, req).await;
    let content_type = headers["content-type"].to_str().unwrap().to_string();
    (code, content_type, body.to_vec())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_is_written_in_the_go_structs_order() {
    let running = common::start().await;
    create_with_data(&running.client, "ordered").await;

    let (code, _, body) = raw_get(
        &running.client,
        "/api/v1/namespaces/default/configmaps/missing",
        "application/json",
    )
    .await;
    assert_eq!(code, 404);
    assert_eq!(
        String::from_utf8(body).unwrap(),
        r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"configmaps \"missing\" not found","reason":"NotFound","details":{"name":"missing","kind":"configmaps"},"code":404}"#
    );

    let (_, _, body) = raw_get(
        &running.client,
        "/api/v1/namespaces/default/configmaps/ordered",
        "application/json",
    )
    .await;
    let text = String::from_utf8(body).unwrap();
    let at = |key: &str| {
        text.find(&format!("\"{key}\":"))
            .unwrap_or_else(|| panic!("{key} in {text}"))
    };
    assert!(text.starts_with(r#"{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"ordered","namespace":"default","uid":"#), "{text}");
    assert!(at("uid") < at("resourceVersion") && at("resourceVersion") < at("creationTimestamp"));
    assert!(at("creationTimestamp") < at("managedFields") && at("managedFields") < at("data"));

    let (_, _, body) = raw_get(
        &running.client,
        "/api/v1/namespaces/default/configmaps?limit=1",
        "application/json",
    )
    .await;
    let text = String::from_utf8(body).unwrap();
    assert!(
        text.starts_with(
            r#"{"kind":"ConfigMapList","apiVersion":"v1","metadata":{"resourceVersion":""#
        ),
        "{text}"
    );
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn protobuf_is_served_for_built_in_kinds_as_upstream_encodes_it() {
    use k8s_pb::api::core::v1 as core;
    use k8s_pb::apimachinery::pkg::apis::meta::v1 as meta;
    use k8s_pb::apimachinery::pkg::runtime::Unknown;
    use prost::Message;

    const PROTOBUF: &str = "application/vnd.kubernetes.protobuf";
    /// The `runtime.Unknown` after the `k8s\0` magic.
    fn envelope(body: &[u8]) -> Unknown {
        let raw = body.strip_prefix(b"k8s\0").expect("the k8s magic");
        Unknown::decode(raw).unwrap()
    }

    let running = common::start().await;
    create_with_data(&running.client, "proto").await;

    // One object: the envelope names its kind, the message holds the fields.
    let (code, content_type, body) = raw_get(
        &running.client,
        "/api/v1/namespaces/default/configmaps/proto",
        &format!("{PROTOBUF}, application/json"),
    )
    .await;
    assert_eq!((code, content_type.as_str()), (200, PROTOBUF));
    let unknown = envelope(&body);
    let type_meta = unknown.type_meta.unwrap();
    assert_eq!(
        (type_meta.api_version.as_deref(), type_meta.kind.as_deref()),
        (Some("v1"), Some("ConfigMap"))
    );
    let decoded = core::ConfigMap::decode(unknown.raw.unwrap().as_slice()).unwrap();
    let metadata = decoded.metadata.unwrap();
    assert_eq!(metadata.name.as_deref(), Some("proto"));
    assert!(metadata.creation_timestamp.unwrap().seconds.unwrap() > 1_700_000_000);
    assert_eq!(decoded.data.get("k").map(String::as_str), Some("v"));

    // A list, and a metadata-only list (the garbage collector's metadata client asks so).
    let (_, _, body) = raw_get(
        &running.client,
        "/api/v1/namespaces/default/configmaps",
        PROTOBUF,
    )
    .await;
    let list = core::ConfigMapList::decode(envelope(&body).raw.unwrap().as_slice()).unwrap();
    assert!(list.metadata.unwrap().resource_version.is_some());
    assert!(
        list.items
            .iter()
            .any(|i| i.metadata.as_ref().unwrap().name.as_deref() == Some("proto"))
    );
    let (_, content_type, body) = raw_get(
        &running.client,
        "/api/v1/namespaces/default/configmaps",
        &format!("{PROTOBUF};as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json"),
    )
    .await;
    assert_eq!(content_type, PROTOBUF);
    let unknown = envelope(&body);
    assert_eq!(
        unknown.type_meta.unwrap().kind.as_deref(),
        Some("PartialObjectMetadataList")
    );
    let partial = meta::PartialObjectMetadataList::decode(unknown.raw.unwrap().as_slice()).unwrap();
    assert!(
        partial
            .items
            .iter()
            .any(|i| i.metadata.as_ref().unwrap().name.as_deref() == Some("proto"))
    );

    // Errors are protobuf Status objects.
    let (code, content_type, body) = raw_get(
        &running.client,
        "/api/v1/namespaces/default/configmaps/missing",
        PROTOBUF,
    )
    .await;
    assert_eq!((code, content_type.as_str()), (404, PROTOBUF));
    let status = meta::Status::decode(envelope(&body).raw.unwrap().as_slice()).unwrap();
    assert_eq!(
        (status.code, status.reason.as_deref()),
        (Some(404), Some("NotFound"))
    );

    // A watch: frames of a 4-byte length and a WatchEvent holding an enveloped object.
    let req = http::Request::get("/api/v1/namespaces/default/configmaps?watch=1&timeoutSeconds=3")
        .header("accept", PROTOBUF)
        .body(kube::client::Body::empty())
        .unwrap();
    let resp = running.client.send(req).await.unwrap();
    assert_eq!(
        resp.headers()["content-type"],
        "application/vnd.kubernetes.protobuf;stream=watch"
    );
    let body = http_body_util::BodyExt::collect(resp.into_body())
        .await
        .unwrap()
        .to_bytes();
    let len = u32::from_be_bytes(body[..4].try_into().unwrap()) as usize;
    let event = meta::WatchEvent::decode(&body[4..4 + len]).unwrap();
    assert_eq!(event.r#type.as_deref(), Some("ADDED"));
    let raw = event.object.unwrap().raw.unwrap();
    let watched = core::ConfigMap::decode(envelope(&raw).raw.unwrap().as_slice()).unwrap();
    assert!(watched.metadata.unwrap().name.is_some());
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn load_balancers_get_health_check_ports_and_may_go_without_node_ports() {
    use k8s_openapi::api::core::v1::Service;
    let running = common::start().await;
    let api: Api<Service> = Api::namespaced(running.client.clone(), "default");
    let lb = |name: &str, spec: serde_json::Value| -> Service {
        serde_json::from_value(serde_json::json!({"metadata": {"name": name}, "spec": spec}))
            .unwrap()
    };
    let local = api
        .create(
            &PostParams::default(),
            &lb(
                "local",
                serde_json::json!({"type": "LoadBalancer", "externalTrafficPolicy": "Local",
                    "allocateLoadBalancerNodePorts": false,
                    "ports": [{"port": 80}]}),
            ),
        )
        .await
        .unwrap();
    let spec = local.spec.unwrap();
    assert_eq!(
        spec.ports.unwrap()[0].node_port,
        None,
        "no node port asked for"
    );
    let health = spec.health_check_node_port.expect("a health check port");
    assert!((30000..=32767).contains(&health), "{health}");

    // the health check port is held like a node port
    let taken = api
        .create(
            &PostParams::default(),
            &lb(
                "clash",
                serde_json::json!({"type": "NodePort",
                    "ports": [{"port": 80, "nodePort": health}]}),
            ),
        )
        .await;
    let s = status(taken);
    assert_eq!(s.code, 422);
    assert!(
        s.message.contains("provided port is already allocated"),
        "{}",
        s.message
    );

    // a Cluster-policy LoadBalancer gets node ports by default and no health check port
    let cluster = api
        .create(
            &PostParams::default(),
            &lb(
                "cluster",
                serde_json::json!({"type": "LoadBalancer", "ports": [{"port": 81}]}),
            ),
        )
        .await
        .unwrap();
    let spec = cluster.spec.unwrap();
    assert!(spec.ports.unwrap()[0].node_port.is_some());
    assert_eq!(spec.health_check_node_port, None);
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_binding_sets_the_node_once_and_its_annotations_on_the_pod() {
    use k8s_openapi::api::core::v1::{Binding, Pod};
    use serde_json::json;
    let running = common::start().await;
    let pods: Api<Pod> = Api::namespaced(running.client.clone(), "default");
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "web", "annotations": {"keep": "me", "example.com/by": "creator"}},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]}}))
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
    let bind = |node: &str, annotations: serde_json::Value| -> Binding {
        serde_json::from_value(
            json!({"metadata": {"name": "web", "annotations": annotations},
            "target": {"kind": "Node", "name": node}}),
        )
        .unwrap()
    };
    let binding = bind(
        "n1",
        json!({"scheduler.skiff.io/queue-wait-seconds": "0.0123", "example.com/by": "binder"}),
    );
    pods.create_subresource::<_, serde_json::Value>(
        "binding",
        "web",
        &PostParams::default(),
        &binding,
    )
    .await
    .unwrap();
    let bound = pods.get("web").await.unwrap();
    assert_eq!(
        bound.spec.unwrap().node_name.as_deref(),
        Some("n1"),
        "the node is set"
    );
    // upstream's setPodHostAndAnnotations: the Binding's annotations are set on the pod,
    // overriding the pod's own of the same key, the others kept
    let annotations = bound.metadata.annotations.unwrap();
    let got: Vec<(&str, &str)> = annotations
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    assert_eq!(
        got,
        [
            ("example.com/by", "binder"),
            ("keep", "me"),
            ("scheduler.skiff.io/queue-wait-seconds", "0.0123"),
        ]
    );

    // a second Binding is a conflict and changes nothing
    let again = pods
        .create_subresource::<_, serde_json::Value>(
            "binding",
            "web",
            &PostParams::default(),
            &bind("n2", json!({"example.com/by": "late"})),
        )
        .await;
    assert_eq!(status(again).code, 409);
    let after = pods.get("web").await.unwrap();
    assert_eq!(after.spec.unwrap().node_name.as_deref(), Some("n1"));
    assert_eq!(after.metadata.annotations.unwrap(), annotations);

    // a pod without annotations gets the Binding's
    let bare: Pod = serde_json::from_value(json!({"metadata": {"name": "bare"},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]}}))
    .unwrap();
    pods.create(&PostParams::default(), &bare).await.unwrap();
    let mut binding = bind("n1", json!({"scheduler.skiff.io/queue-wait-seconds": "2"}));
    binding.metadata.name = Some("bare".into());
    pods.create_subresource::<_, serde_json::Value>(
        "binding",
        "bare",
        &PostParams::default(),
        &binding,
    )
    .await
    .unwrap();
    let bound = pods.get("bare").await.unwrap();
    assert_eq!(
        bound
            .metadata
            .annotations
            .unwrap()
            .into_iter()
            .collect::<Vec<_>>(),
        [(
            "scheduler.skiff.io/queue-wait-seconds".to_string(),
            "2".to_string()
        )]
    );
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_list_longer_than_a_chunk_is_streamed_whole_from_the_cache_and_the_store() {
    let running = common::start().await;
    let api: Api<ConfigMap> = Api::namespaced(running.client.clone(), "default");
    // Five objects of 100 KiB each: the list is several of the server's 256 KiB chunks.
    let filler = |i: usize| char::from(b'a' + i as u8).to_string().repeat(100 * 1024);
    for i in 0..5 {
        let mut cm = config_map(&format!("big-{i}"));
        cm.data = Some([("filler".to_string(), filler(i))].into());
        api.create(&PostParams::default(), &cm).await.unwrap();
    }
    let revision = list_revision(&api).await;

    // From the watch cache, and at an exact revision (read from the store).
    for query in [
        "",
        &format!("?resourceVersion={revision}&resourceVersionMatch=Exact"),
    ] {
        let req = http::Request::get(format!("/api/v1/namespaces/default/configmaps{query}"))
            .header("accept", "application/json")
            .body(Vec::new())
            .unwrap();
        let (code, headers, body) = common::send_raw(&running.client, req).await;
        assert_eq!(code, 200, "{query}");
        assert!(
            !headers.contains_key("content-length"),
            "a list of {} bytes is streamed, not sent whole: {headers:?}",
            body.len()
        );
        let list: k8s_openapi::List<ConfigMap> = serde_json::from_slice(&body).unwrap();
        let listed_at = list.metadata.resource_version.unwrap();
        if query.is_empty() {
            // The cache answers at its own revision, which the server's own
            // writes elsewhere (leases, events) may have moved past ours.
            let at = |rv: &str| rv.parse::<u64>().unwrap();
            assert!(at(&listed_at) >= at(&revision), "{listed_at} < {revision}");
        } else {
            assert_eq!(listed_at, revision);
        }
        let got: Vec<(String, String)> = list
            .items
            .into_iter()
            .map(|cm| {
                let name = cm.metadata.name.unwrap();
                (name, cm.data.unwrap().remove("filler").unwrap())
            })
            .collect();
        let want: Vec<(String, String)> = (0..5).map(|i| (format!("big-{i}"), filler(i))).collect();
        assert!(got == want, "{query}: the items as created, in order");
    }

    // A short list is sent whole, with its length.
    let req = http::Request::get("/api/v1/namespaces/default/configmaps?limit=1")
        .header("accept", "application/json")
        .body(Vec::new())
        .unwrap();
    let (code, headers, _) = common::send_raw(&running.client, req).await;
    assert_eq!(code, 200);
    assert!(headers.contains_key("content-length"), "{headers:?}");
    running.stop().await;
}
