//! Unmodified kube-rs (kube 5 over k8s-openapi 0.29, Kubernetes 1.33 types) against a real
//! `skiff apiserver` process: typed CRUD and its error statuses, a raw watch that resumes across a
//! server restart without losing or repeating an event, the runtime watcher's list-then-watch and
//! streaming-list protocols, bookmarks, and 410 after etcd compaction. CRUD and resume also run on
//! real etcd.

mod support;

use std::collections::BTreeMap;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Container, Namespace, Pod, PodSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{DeleteParams, ListParams, ObjectList, PostParams, WatchEvent, WatchParams};
use kube::core::Status;
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client, ResourceExt};
use support::{ApiServer, Backend, kube_client as client, run, run_guarded};
use tokio::sync::mpsc;

/// The API status of a request that must fail.
fn status<T: std::fmt::Debug>(result: kube::Result<T>) -> Status {
    match result {
        Err(kube::Error::Api(s)) => *s,
        other => panic!("expected an API error status, got {other:?}"),
    }
}

fn meta(name: &str, labels: &[(&str, &str)]) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.into()),
        labels: (!labels.is_empty()).then(|| {
            labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        }),
        ..ObjectMeta::default()
    }
}

fn data(value: &str) -> Option<BTreeMap<String, String>> {
    Some(BTreeMap::from([("k".to_string(), value.to_string())]))
}

fn config_map(name: &str, labels: &[(&str, &str)], value: &str) -> ConfigMap {
    ConfigMap {
        metadata: meta(name, labels),
        data: data(value),
        ..ConfigMap::default()
    }
}

fn namespace(name: &str) -> Namespace {
    Namespace {
        metadata: meta(name, &[]),
        ..Namespace::default()
    }
}

fn pod(name: &str, labels: &[(&str, &str)]) -> Pod {
    Pod {
        metadata: meta(name, labels),
        spec: Some(PodSpec {
            containers: vec![Container {
                name: "main".into(),
                image: Some("nginx:1.25".into()),
                ..Container::default()
            }],
            ..PodSpec::default()
        }),
        ..Pod::default()
    }
}

fn names<K: ResourceExt + Clone>(list: &ObjectList<K>) -> Vec<String> {
    list.items.iter().map(ResourceExt::name_any).collect()
}

async fn create_namespace(client: &Client, name: &str) {
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &namespace(name))
        .await
        .unwrap_or_else(|e| panic!("create namespace {name}: {e}"));
}

/// Typed CRUD through `Api<T>`: create, get, list with label and field selectors, replace (and
/// 409 Conflict for a stale resourceVersion), delete, and the NotFound and AlreadyExists statuses.
async fn typed_crud(api: &ApiServer) {
    let client = client(api).await;
    let pp = PostParams::default();
    let lp = ListParams::default();

    let namespaces: Api<Namespace> = Api::all(client.clone());
    let ns = namespaces
        .create(&pp, &namespace("crud"))
        .await
        .expect("create namespace crud");
    assert_eq!(
        ns.status.and_then(|s| s.phase).as_deref(),
        Some("Active"),
        "a new namespace is Active"
    );
    let taken = status(namespaces.create(&pp, &namespace("crud")).await);
    assert_eq!(
        (taken.code, taken.reason.as_str(), taken.message.as_str()),
        (409, "AlreadyExists", "namespaces \"crud\" already exists"),
        "{taken:?}"
    );
    assert!(taken.is_already_exists() && taken.is_failure(), "{taken:?}");

    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "crud");
    let a = cms
        .create(&pp, &config_map("a", &[("app", "web")], "1"))
        .await
        .expect("create config map a");
    assert_eq!(a.namespace().as_deref(), Some("crud"));
    assert!(a.uid().is_some() && a.resource_version().is_some(), "{a:?}");
    cms.create(&pp, &config_map("b", &[("app", "db")], "1"))
        .await
        .expect("create config map b");
    let dup = status(cms.create(&pp, &config_map("a", &[], "9")).await);
    assert_eq!(
        (dup.code, dup.reason.as_str(), dup.message.as_str()),
        (409, "AlreadyExists", "configmaps \"a\" already exists"),
        "{dup:?}"
    );

    let got = cms.get("a").await.expect("get config map a");
    assert_eq!(got.uid(), a.uid());
    assert_eq!(got.resource_version(), a.resource_version());
    assert_eq!(got.data, data("1"));
    assert_eq!(got.labels().get("app").map(String::as_str), Some("web"));

    let list = |labels: &str, fields: &str| {
        let mut p = lp.clone();
        if !labels.is_empty() {
            p = p.labels(labels);
        }
        if !fields.is_empty() {
            p = p.fields(fields);
        }
        p
    };
    let all = cms.list(&lp).await.expect("list config maps");
    assert_eq!(names(&all), ["a", "b"]);
    assert!(
        all.metadata
            .resource_version
            .as_deref()
            .is_some_and(|rv| !rv.is_empty()),
        "a list carries its resourceVersion: {:?}",
        all.metadata
    );
    for (labels, fields, want) in [
        ("app=web", "", &["a"][..]),
        ("app!=web", "", &["b"]),
        ("app in (web,db)", "", &["a", "b"]),
        ("app notin (web)", "", &["b"]),
        ("app", "", &["a", "b"]),
        ("!app", "", &[]),
        ("", "metadata.name=b", &["b"]),
        ("", "metadata.name!=b", &["a"]),
        ("", "metadata.namespace=crud", &["a", "b"]),
        ("app=web", "metadata.name=b", &[]),
    ] {
        let got = cms
            .list(&list(labels, fields))
            .await
            .expect("list with selectors");
        assert_eq!(names(&got), want, "labels {labels:?} fields {fields:?}");
    }

    let mut changed = got.clone();
    changed.data = data("2");
    let updated = cms
        .replace("a", &pp, &changed)
        .await
        .expect("replace with the current resourceVersion");
    assert_ne!(updated.resource_version(), got.resource_version());
    assert_eq!(updated.data, data("2"));
    changed.data = data("3");
    let stale = status(cms.replace("a", &pp, &changed).await);
    assert_eq!(
        (stale.code, stale.reason.as_str()),
        (409, "Conflict"),
        "{stale:?}"
    );
    assert!(stale.is_conflict(), "{stale:?}");
    assert_eq!(
        stale.message,
        "Operation cannot be fulfilled on configmaps \"a\": the object has been modified; \
         please apply your changes to the latest version and try again"
    );
    assert_eq!(cms.get("a").await.expect("get a").data, data("2"));

    let pods: Api<Pod> = Api::namespaced(client.clone(), "crud");
    let web = pods
        .create(&pp, &pod("web", &[("app", "web"), ("tier", "front")]))
        .await
        .expect("create pod web");
    let spec = web.spec.as_ref().expect("spec");
    assert_eq!(spec.restart_policy.as_deref(), Some("Always"), "defaulted");
    assert_eq!(
        web.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Pending")
    );
    pods.create(&pp, &pod("db", &[("app", "db")]))
        .await
        .expect("create pod db");
    for (labels, fields, want) in [
        ("tier", "", &["web"][..]),
        ("app in (web,db)", "status.phase=Pending", &["db", "web"]),
        ("", "status.phase=Running", &[]),
        ("", "spec.nodeName=n1", &[]),
        ("app=db", "metadata.name=db,status.phase=Pending", &["db"]),
    ] {
        let got = pods.list(&list(labels, fields)).await.expect("list pods");
        assert_eq!(names(&got), want, "labels {labels:?} fields {fields:?}");
    }
    let bogus = status(pods.list(&list("", "spec.bogus=1")).await);
    assert_eq!(
        (bogus.code, bogus.reason.as_str()),
        (400, "BadRequest"),
        "{bogus:?}"
    );
    assert!(
        bogus
            .message
            .contains("field label not supported: spec.bogus"),
        "{bogus:?}"
    );

    cms.delete("a", &DeleteParams::default())
        .await
        .expect("delete config map a");
    let gone = status(cms.get("a").await);
    assert_eq!(
        (gone.code, gone.reason.as_str(), gone.message.as_str()),
        (404, "NotFound", "configmaps \"a\" not found"),
        "{gone:?}"
    );
    assert!(gone.is_not_found());
    let again = status(cms.delete("a", &DeleteParams::default()).await);
    assert_eq!(
        (again.code, again.reason.as_str()),
        (404, "NotFound"),
        "{again:?}"
    );
    let missing = status(cms.replace("a", &pp, &changed).await);
    assert_eq!(missing.code, 404, "{missing:?}");
    assert_eq!(names(&cms.list(&lp).await.expect("list")), ["b"]);

    pods.delete("web", &DeleteParams::default())
        .await
        .expect("delete pod web");
    let gone = status(pods.get("web").await);
    assert_eq!(
        (gone.code, gone.reason.as_str(), gone.message.as_str()),
        (404, "NotFound", "pods \"web\" not found"),
        "{gone:?}"
    );

    // The namespace has the `kubernetes` finalizer: deleting it starts termination.
    let deleted = namespaces
        .delete("crud", &DeleteParams::default())
        .await
        .expect("delete namespace crud");
    let terminating = deleted.left().expect("the namespace, still finalizing");
    assert!(terminating.metadata.deletion_timestamp.is_some());
    let phase = |ns: Namespace| ns.status.and_then(|s| s.phase);
    assert_eq!(phase(terminating).as_deref(), Some("Terminating"));
    let read = namespaces.get("crud").await.expect("get namespace crud");
    assert_eq!(phase(read).as_deref(), Some("Terminating"));
    let nope = status(namespaces.get("nope").await);
    assert_eq!(
        (nope.code, nope.reason.as_str(), nope.message.as_str()),
        (404, "NotFound", "namespaces \"nope\" not found"),
        "{nope:?}"
    );
}

#[test]
fn typed_crud_answers_conflict_not_found_and_already_exists() {
    let api = ApiServer::start(Backend::Embedded);
    run(typed_crud(&api));
}

#[test]
fn typed_crud_works_on_real_etcd() {
    let api = ApiServer::start(Backend::Etcd);
    run(typed_crud(&api));
}

/// Upstream's generic registry answers the immediate deletion of a kind without
/// `ReturnDeletedObject` (ConfigMaps, Secrets, …; not Pods) with a `Success` Status naming it.
#[test]
fn deleting_a_config_map_answers_with_a_success_status_as_upstream() {
    let api = ApiServer::start(Backend::Embedded);
    run(async {
        let client = client(&api).await;
        let cms: Api<ConfigMap> = Api::default_namespaced(client);
        let created = cms
            .create(&PostParams::default(), &config_map("a", &[], "1"))
            .await
            .expect("create a");
        let answer = cms
            .delete("a", &DeleteParams::default())
            .await
            .expect("delete a");
        let status = answer.right().expect("a Status, not the object");
        assert!(status.is_success(), "{status:?}");
        let details = status.details.expect("details");
        assert_eq!(
            (details.name.as_str(), details.kind.as_str(), details.uid),
            ("a", "configmaps", created.uid().unwrap_or_default())
        );
    });
}

/// What a watcher saw of one write: the event type, the object, and its resourceVersion, except
/// for deletions (upstream answers most deletes with a Status, so a client never learns theirs).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Seen {
    kind: &'static str,
    name: String,
    rv: Option<String>,
}

impl Seen {
    fn of(kind: &'static str, object: &ConfigMap) -> Seen {
        Seen {
            kind,
            name: object.name_any(),
            rv: (kind != "DELETED").then(|| object.resource_version().unwrap_or_default()),
        }
    }
}

/// Forwards a watch's items from a task of their own, so the stream is consumed while the test
/// writes. The channel closes when the stream ends.
async fn consume(
    cms: &Api<ConfigMap>,
    wp: &WatchParams,
    rv: &str,
) -> mpsc::UnboundedReceiver<kube::Result<WatchEvent<ConfigMap>>> {
    let stream = cms
        .watch(wp, rv)
        .await
        .unwrap_or_else(|e| panic!("watch from {rv:?}: {e}"));
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        while let Some(item) = stream.next().await {
            if tx.send(item).is_err() {
                return;
            }
        }
    });
    rx
}

/// Records one watch item; returns false once the stream has failed (the server went away).
fn record(
    item: kube::Result<WatchEvent<ConfigMap>>,
    seen: &mut Vec<Seen>,
    last_rv: &mut String,
) -> bool {
    let (kind, object) = match item {
        Ok(WatchEvent::Added(o)) => ("ADDED", o),
        Ok(WatchEvent::Modified(o)) => ("MODIFIED", o),
        Ok(WatchEvent::Deleted(o)) => ("DELETED", o),
        Ok(WatchEvent::Bookmark(b)) => {
            *last_rv = b.metadata.resource_version;
            return true;
        }
        Ok(WatchEvent::Error(e)) => panic!("the watch failed: {e:?}"),
        Err(_) => return false,
    };
    seen.push(Seen::of(kind, &object));
    *last_rv = object
        .resource_version()
        .expect("an event's resourceVersion");
    true
}

/// Writes that a watch must report: creates of `names`, then an update of every second and a
/// delete of every third.
async fn write(cms: &Api<ConfigMap>, names: &[String], expected: &mut Vec<Seen>) {
    let pp = PostParams::default();
    for (i, name) in names.iter().enumerate() {
        let created = cms
            .create(&pp, &config_map(name, &[], "0"))
            .await
            .unwrap_or_else(|e| panic!("create {name}: {e}"));
        expected.push(Seen::of("ADDED", &created));
        if i % 2 == 1 {
            let mut next = created.clone();
            next.data = data("1");
            let updated = cms.replace(name, &pp, &next).await.expect("replace");
            expected.push(Seen::of("MODIFIED", &updated));
        }
        if i % 3 == 2 {
            cms.delete(name, &DeleteParams::default())
                .await
                .expect("delete");
            expected.push(Seen {
                kind: "DELETED",
                name: name.clone(),
                rv: None,
            });
        }
    }
}

/// A watch is consumed while objects are created, changed and deleted; the server is killed
/// mid-way and restarted, more writes land while nobody watches, and a new watch from the last
/// resourceVersion seen reports exactly the rest: the union is every write once, in order. When
/// that resourceVersion is older than the restarted server's watch cache, the watch gets 410
/// Expired instead, as upstream's; the client then lists (every object the writes left) and
/// watches from the list, which reports exactly the writes after it.
async fn watch_resumes_after_restart(api: &mut ApiServer) {
    let client = client(api).await;
    create_namespace(&client, "resume").await;
    let cms: Api<ConfigMap> = Api::namespaced(client, "resume");
    let wp = WatchParams::default();
    let start = cms.list(&ListParams::default()).await.expect("list");
    let mut last_rv = start
        .metadata
        .resource_version
        .expect("list resourceVersion");
    let mut events = consume(&cms, &wp, &last_rv).await;

    let mut expected = Vec::new();
    let batch =
        |from: usize, to: usize| (from..to).map(|i| format!("cm-{i:02}")).collect::<Vec<_>>();
    write(&cms, &batch(0, 12), &mut expected).await;
    let mut seen = Vec::new();
    while seen.len() < expected.len() / 2 {
        let item = events.recv().await.expect("the watch ended early");
        assert!(
            record(item, &mut seen, &mut last_rv),
            "the watch failed early"
        );
    }

    tokio::task::block_in_place(|| api.restart());
    // Whatever was already on its way is still seen; then the stream ends.
    while let Some(item) = events.recv().await {
        if !record(item, &mut seen, &mut last_rv) {
            break;
        }
    }

    let client = self::client(api).await;
    let cms: Api<ConfigMap> = Api::namespaced(client, "resume");
    write(&cms, &batch(12, 20), &mut expected).await;
    let mut resumed = consume(&cms, &wp, &last_rv).await;
    let first = resumed
        .recv()
        .await
        .expect("the resumed watch sends something");
    if let Ok(WatchEvent::Error(gone)) = &first {
        assert_eq!(
            (gone.code, gone.reason.as_str()),
            (410, "Expired"),
            "{gone:?}"
        );
        // Relist: the state every write so far left, then watch from there.
        let list = cms.list(&ListParams::default()).await.expect("relist");
        let mut alive: Vec<String> = Vec::new();
        for e in &expected {
            match e.kind {
                "DELETED" => alive.retain(|n| *n != e.name),
                _ if !alive.contains(&e.name) => alive.push(e.name.clone()),
                _ => {}
            }
        }
        alive.sort();
        assert_eq!(names(&list), alive);
        last_rv = list
            .metadata
            .resource_version
            .expect("list resourceVersion");
        expected.clear();
        seen.clear();
        resumed = consume(&cms, &wp, &last_rv).await;
    } else {
        assert!(
            record(first, &mut seen, &mut last_rv),
            "the resumed watch failed"
        );
    }
    write(&cms, &batch(20, 24), &mut expected).await;
    // A last write marks the end: anything repeated or extra arrives before it.
    let sentinel = cms
        .create(&PostParams::default(), &config_map("sentinel", &[], "0"))
        .await
        .expect("create sentinel");
    expected.push(Seen::of("ADDED", &sentinel));
    while seen.last().is_none_or(|s| s.name != "sentinel") {
        let item = resumed.recv().await.expect("the resumed watch ended");
        assert!(
            record(item, &mut seen, &mut last_rv),
            "the resumed watch failed"
        );
    }
    if seen != expected {
        let show = |v: &[Seen]| {
            v.iter()
                .map(|s| format!("{} {} {:?}", s.kind, s.name, s.rv))
                .collect::<Vec<_>>()
                .join("\n")
        };
        panic!(
            "the watch saw\n{}\nbut the writes were\n{}",
            show(&seen),
            show(&expected)
        );
    }
}

#[test]
fn a_watch_resumes_after_a_restart_missing_and_repeating_nothing() {
    let mut api = ApiServer::start(Backend::Embedded);
    run(watch_resumes_after_restart(&mut api));
}

#[test]
fn a_watch_resumes_after_a_restart_on_real_etcd() {
    let mut api = ApiServer::start(Backend::Etcd);
    run(watch_resumes_after_restart(&mut api));
}

/// `kube::runtime::watcher` over ConfigMaps `a` and `b`: Init, an InitApply for each, InitDone,
/// then Apply for a create and an update and Delete for a delete.
async fn runtime_watcher(api: &ApiServer, config: watcher::Config) {
    let client = client(api).await;
    create_namespace(&client, "rw").await;
    let cms: Api<ConfigMap> = Api::namespaced(client, "rw");
    let pp = PostParams::default();
    for name in ["a", "b"] {
        cms.create(&pp, &config_map(name, &[], "0"))
            .await
            .expect("create");
    }
    let mut stream = watcher::watcher(cms.clone(), config).boxed();
    let mut next = async || -> Event<ConfigMap> {
        stream
            .try_next()
            .await
            .expect("a watcher error")
            .expect("the watcher ended")
    };
    assert!(matches!(next().await, Event::Init));
    let mut listed = Vec::new();
    loop {
        match next().await {
            Event::InitApply(o) => listed.push(o.name_any()),
            Event::InitDone => break,
            other => panic!("expected InitApply or InitDone, got {other:?}"),
        }
    }
    listed.sort();
    assert_eq!(listed, ["a", "b"]);

    cms.create(&pp, &config_map("c", &[], "0"))
        .await
        .expect("create c");
    match next().await {
        Event::Apply(o) => assert_eq!(o.name_any(), "c"),
        other => panic!("expected Apply(c), got {other:?}"),
    }
    let mut b = cms.get("b").await.expect("get b");
    b.data = data("1");
    cms.replace("b", &pp, &b).await.expect("replace b");
    match next().await {
        Event::Apply(o) => {
            assert_eq!((o.name_any(), o.data), ("b".to_string(), data("1")));
        }
        other => panic!("expected Apply(b), got {other:?}"),
    }
    cms.delete("a", &DeleteParams::default())
        .await
        .expect("delete a");
    match next().await {
        Event::Delete(o) => assert_eq!(o.name_any(), "a"),
        other => panic!("expected Delete(a), got {other:?}"),
    }
}

#[test]
fn the_runtime_watcher_lists_then_watches() {
    let api = ApiServer::start(Backend::Embedded);
    run(runtime_watcher(&api, watcher::Config::default()));
}

#[test]
fn the_runtime_watcher_with_streaming_lists_gets_initial_events_then_changes() {
    let api = ApiServer::start(Backend::Embedded);
    run(runtime_watcher(
        &api,
        watcher::Config::default().streaming_lists(),
    ));
}

/// Waits for a raw watch's next event.
async fn next_event(
    events: &mut mpsc::UnboundedReceiver<kube::Result<WatchEvent<ConfigMap>>>,
) -> WatchEvent<ConfigMap> {
    events
        .recv()
        .await
        .expect("the watch ended")
        .expect("the watch failed")
}

fn revision(rv: &str) -> i64 {
    rv.parse()
        .unwrap_or_else(|_| panic!("Skiff's resourceVersions are revisions: {rv:?}"))
}

/// A watch with `allowWatchBookmarks` gets a BOOKMARK carrying a resourceVersion past a write
/// it does not select (another namespace's); one without gets none before its next event.
#[test]
fn bookmarks_arrive_only_when_allowed() {
    let api = ApiServer::start(Backend::Embedded);
    run(async {
        let client = client(&api).await;
        create_namespace(&client, "marks").await;
        create_namespace(&client, "other").await;
        let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "marks");
        let rv = cms
            .list(&ListParams::default())
            .await
            .expect("list")
            .metadata
            .resource_version
            .expect("list resourceVersion");
        let mut with = consume(&cms, &WatchParams::default(), &rv).await;
        let mut without = consume(&cms, &WatchParams::default().disable_bookmarks(), &rv).await;
        let elsewhere = Api::<ConfigMap>::namespaced(client, "other")
            .create(&PostParams::default(), &config_map("x", &[], "0"))
            .await
            .expect("create other/x");
        let written = revision(&elsewhere.resource_version().expect("rv"));
        // The server sends bookmarks on its periodic store progress (at most every 5 s).
        loop {
            match next_event(&mut with).await {
                WatchEvent::Bookmark(b) => {
                    if revision(&b.metadata.resource_version) >= written {
                        break;
                    }
                }
                other => panic!("only bookmarks before the next write, got {other:?}"),
            }
        }
        let here = cms
            .create(&PostParams::default(), &config_map("y", &[], "0"))
            .await
            .expect("create marks/y");
        for (events, allowed) in [(&mut with, true), (&mut without, false)] {
            loop {
                match next_event(events).await {
                    WatchEvent::Added(o) => {
                        assert_eq!(o.resource_version(), here.resource_version());
                        break;
                    }
                    WatchEvent::Bookmark(_) if allowed => {}
                    other => panic!("expected ADDED y, got {other:?}"),
                }
            }
        }
    });
}

/// The current revision of an etcd, read with etcdctl.
fn etcd_revision(endpoint: &str) -> i64 {
    let out = run_guarded(std::process::Command::new("etcdctl").args([
        "--endpoints",
        endpoint,
        "get",
        "no-such-key",
        "-w",
        "json",
    ]));
    assert!(out.status.success(), "etcdctl get: {out:?}");
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("etcdctl json");
    json["header"]["revision"]
        .as_i64()
        .expect("header.revision")
}

/// After etcd is compacted past a resourceVersion (and the API server restarted, so its watch
/// cache no longer holds that history), a watch from it gets a 410 ERROR event; a relist and a
/// watch from the list's resourceVersion then work.
#[test]
fn a_watch_from_a_compacted_resource_version_is_gone_and_a_relist_recovers() {
    let mut api = ApiServer::start(Backend::Etcd);
    let endpoint = api.etcd_endpoint().expect("etcd endpoint");
    run(async {
        let client = client(&api).await;
        let cms: Api<ConfigMap> = Api::default_namespaced(client);
        let pp = PostParams::default();
        let old = cms
            .list(&ListParams::default())
            .await
            .expect("list")
            .metadata
            .resource_version
            .expect("list resourceVersion");
        for i in 0..5 {
            cms.create(&pp, &config_map(&format!("c{i}"), &[], "0"))
                .await
                .expect("create");
        }
        let rev = etcd_revision(&endpoint);
        let out = run_guarded(std::process::Command::new("etcdctl").args([
            "--endpoints",
            &endpoint,
            "compact",
            &rev.to_string(),
        ]));
        assert!(out.status.success(), "etcdctl compact {rev}: {out:?}");
        tokio::task::block_in_place(|| api.restart());

        let client = self::client(&api).await;
        let cms: Api<ConfigMap> = Api::default_namespaced(client);
        let mut events = consume(&cms, &WatchParams::default(), &old).await;
        let mut gone = None;
        while let Some(item) = events.recv().await {
            match item {
                Ok(WatchEvent::Error(status)) => gone = Some(*status),
                Ok(other) => panic!("a watch from compacted {old} sent {other:?}"),
                Err(e) => panic!("a watch from compacted {old} failed: {e}"),
            }
        }
        let gone = gone.expect("an ERROR event");
        assert_eq!(gone.code, 410, "{gone:?}");
        assert!(
            ["Expired", "Gone"].contains(&gone.reason.as_str()),
            "{gone:?}"
        );

        let relist = cms.list(&ListParams::default()).await.expect("relist");
        assert_eq!(names(&relist), ["c0", "c1", "c2", "c3", "c4"]);
        let rv = relist
            .metadata
            .resource_version
            .expect("list resourceVersion");
        let mut events = consume(&cms, &WatchParams::default(), &rv).await;
        let created = cms
            .create(&pp, &config_map("c5", &[], "0"))
            .await
            .expect("create c5");
        loop {
            match next_event(&mut events).await {
                WatchEvent::Added(o) => {
                    assert_eq!(o.resource_version(), created.resource_version());
                    break;
                }
                WatchEvent::Bookmark(_) => {}
                other => panic!("expected ADDED c5, got {other:?}"),
            }
        }
    });
}
