//! The factory against a scripted API server: lists answer from a queue, and each watch is a
//! stream the test writes events into.

use std::collections::VecDeque;
use std::convert::Infallible;

use bytes::Bytes;
use futures::StreamExt;
use futures::channel::mpsc;
use futures::stream::BoxStream;
use http_body_util::StreamBody;
use hyper::body::Frame;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::reflector::ObjectRef;
use serde_json::{Value, json};

use super::*;

type Chunk = Result<Frame<Bytes>, Infallible>;

/// The API server's side of the script.
#[derive(Default)]
struct Script {
    /// Request paths and queries, in order.
    requests: Vec<String>,
    /// Their `Accept` headers.
    accepts: Vec<String>,
    /// What the next lists answer (an empty list when none is left).
    lists: VecDeque<Value>,
    /// Where each new watch's event sender goes.
    watches: Option<mpsc::UnboundedSender<mpsc::UnboundedSender<Chunk>>>,
}

struct Fake {
    script: Arc<Mutex<Script>>,
    watches: mpsc::UnboundedReceiver<mpsc::UnboundedSender<Chunk>>,
}

impl Fake {
    fn new(lists: Vec<Value>) -> (Fake, kube::Client) {
        let (watch_tx, watches) = mpsc::unbounded();
        let script = Arc::new(Mutex::new(Script {
            lists: lists.into(),
            watches: Some(watch_tx),
            ..Default::default()
        }));
        let served = script.clone();
        let service = tower::service_fn(move |req: http::Request<kube::client::Body>| {
            let script = served.clone();
            async move {
                let mut script = script.lock();
                let uri = req.uri().to_string();
                script.requests.push(uri.clone());
                let accept = req.headers().get(http::header::ACCEPT);
                let accept = accept.and_then(|a| a.to_str().ok()).unwrap_or_default();
                script.accepts.push(accept.to_string());
                let body: BoxStream<'static, Chunk> = if uri.contains("watch=true") {
                    let (tx, rx) = mpsc::unbounded();
                    let _ = script.watches.as_ref().unwrap().unbounded_send(tx);
                    rx.boxed()
                } else {
                    let list = script.lists.pop_front().unwrap_or_else(|| list("99", &[]));
                    let bytes = Bytes::from(list.to_string());
                    futures::stream::iter([Ok(Frame::data(bytes))]).boxed()
                };
                Ok::<_, Infallible>(http::Response::new(StreamBody::new(body)))
            }
        });
        let fake = Fake { script, watches };
        (fake, kube::Client::new(service, "default"))
    }

    /// The next watch the informer opens.
    async fn watch(&mut self) -> mpsc::UnboundedSender<Chunk> {
        self.watches.next().await.expect("a watch")
    }

    fn lists_of(&self, path: &str) -> usize {
        let script = self.script.lock();
        let is_list = |r: &&String| r.starts_with(path) && !r.contains("watch=true");
        script.requests.iter().filter(is_list).count()
    }

    fn watches_of(&self, path: &str) -> usize {
        let script = self.script.lock();
        let is_watch = |r: &&String| r.starts_with(path) && r.contains("watch=true");
        script.requests.iter().filter(is_watch).count()
    }
}

fn pod(name: &str, rv: &str) -> Value {
    json!({"metadata": {"namespace": "ns", "name": name, "resourceVersion": rv}})
}

fn list(rv: &str, items: &[Value]) -> Value {
    json!({"apiVersion": "v1", "kind": "PodList", "metadata": {"resourceVersion": rv}, "items": items})
}

fn send(watch: &mpsc::UnboundedSender<Chunk>, type_: &str, object: Value) {
    let line = format!("{}\n", json!({"type": type_, "object": object}));
    watch
        .unbounded_send(Ok(Frame::data(Bytes::from(line))))
        .unwrap();
}

/// Ends the watch as an API server does whose history no longer reaches its resourceVersion.
fn expire(watch: &mpsc::UnboundedSender<Chunk>) {
    send(
        watch,
        "ERROR",
        json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
               "reason": "Expired", "message": "too old resource version", "code": 410}),
    );
}

/// What a handler saw, as `kind name rv` lines.
type Seen = Arc<Mutex<Vec<String>>>;

fn recorder() -> (Seen, impl FnMut(&Change<Pod>) + Send + 'static) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let out = seen.clone();
    let handler = move |change: &Change<Pod>| {
        let line = |what: &str, p: &Pod| {
            let rv = p.metadata.resource_version.as_deref().unwrap_or("");
            format!("{what} {} {rv}", p.metadata.name.as_deref().unwrap_or(""))
        };
        out.lock().push(match change {
            Change::Added(p) => line("added", p),
            Change::Updated { old, new } => {
                let old_rv = old.metadata.resource_version.as_deref().unwrap_or("");
                line(&format!("updated(from {old_rv})"), new)
            }
            Change::Deleted {
                last,
                final_state_unknown,
            } => line(
                if *final_state_unknown {
                    "tombstone"
                } else {
                    "deleted"
                },
                last,
            ),
        });
    };
    (seen, handler)
}

async fn settle() {
    for _ in 0..50 {
        tokio::task::yield_now().await;
    }
}

#[tokio::test]
async fn one_list_and_watch_per_type_and_filter_shared_by_every_handle() {
    let (mut fake, client) = Fake::new(vec![list("1", &[pod("a", "1")])]);
    let informers = Informers::new(client);
    let first = informers.get::<Pod>();
    let second = informers.get::<Pod>();
    first.cache().wait_until_ready().await;
    let watch = fake.watch().await;
    assert_eq!(
        second.cache().len(),
        1,
        "the second handle shares the cache"
    );
    assert_eq!(fake.lists_of("/api/v1/pods"), 1);

    send(&watch, "ADDED", pod("b", "2"));
    settle().await;
    assert_eq!(second.cache().len(), 2);

    let on_node = informers.filtered::<Pod>(watcher::Config::default().fields("spec.nodeName=n1"));
    on_node.cache().wait_until_ready().await;
    assert_eq!(
        fake.lists_of("/api/v1/pods"),
        2,
        "a filter is its own informer"
    );
    assert!(on_node.cache().is_empty());
    let again = informers.filtered::<Pod>(watcher::Config::default().fields("spec.nodeName=n1"));
    assert!(Arc::ptr_eq(&again.shared, &on_node.shared));
}

#[tokio::test]
async fn watches_ask_for_five_to_ten_minutes_spread_unless_a_timeout_is_named() {
    let seconds = |config: watcher::Config| config.timeout;
    let unset = || watcher::Config::default();
    assert_eq!(seconds(with_watch_timeout(unset(), 0.0)), Some(300));
    assert_eq!(seconds(with_watch_timeout(unset(), 0.5)), Some(450));
    assert_eq!(seconds(with_watch_timeout(unset(), 1.0)), Some(600));
    assert_eq!(
        seconds(with_watch_timeout(unset().timeout(30), 0.5)),
        Some(30),
        "a timeout the caller named is kept"
    );

    // each informer's watch asks for its own
    let (mut fake, client) = Fake::new(Vec::new());
    let informers = Informers::new(client);
    let nodes: Vec<_> = (0..8)
        .map(|n| informers.filtered::<Pod>(unset().fields(&format!("spec.nodeName=n{n}"))))
        .collect();
    for informer in &nodes {
        informer.cache().wait_until_ready().await;
        fake.watch().await;
    }
    let timeouts: std::collections::BTreeSet<u32> = fake
        .script
        .lock()
        .requests
        .iter()
        .filter(|r| r.contains("watch=true"))
        .map(|r| {
            let (_, rest) = r
                .split_once("timeoutSeconds=")
                .expect("a watch names its timeout");
            rest.split('&').next().unwrap().parse().unwrap()
        })
        .collect();
    assert!(
        timeouts.iter().all(|t| (300..=600).contains(t)),
        "{timeouts:?}"
    );
    assert!(
        timeouts.len() > 1,
        "8 informers' watches end at different times: {timeouts:?}"
    );
}

#[tokio::test]
async fn handlers_see_each_change_after_the_cache_and_late_handlers_a_replay() {
    let (mut fake, client) = Fake::new(vec![list("1", &[pod("a", "1")])]);
    let informers = Informers::new(client);
    let pods = informers.get::<Pod>();
    let (early, handler) = recorder();
    pods.add_handler(handler);
    // the handler reads the cache: it must already hold the change it is told about
    let cache = pods.cache().clone();
    let consistent = Arc::new(Mutex::new(true));
    let flag = consistent.clone();
    pods.add_handler(move |change| {
        let key = ObjectRef::from_obj(change.object().as_ref());
        let cached = cache.get(&key);
        let ok = match change {
            Change::Deleted { .. } => cached.is_none(),
            _ => cached.is_some_and(|c| Arc::ptr_eq(&c, change.object())),
        };
        *flag.lock() &= ok;
    });
    pods.cache().wait_until_ready().await;
    let watch = fake.watch().await;
    send(&watch, "MODIFIED", pod("a", "2"));
    send(&watch, "ADDED", pod("b", "3"));
    settle().await;

    let (late, handler) = recorder();
    let at_replay_end = late.clone();
    pods.add_handler_then(handler, move || {
        at_replay_end.lock().push("replayed".into())
    });
    send(&watch, "DELETED", pod("a", "4"));
    settle().await;

    assert_eq!(
        *early.lock(),
        [
            "added a 1",
            "updated(from 1) a 2",
            "added b 3",
            "deleted a 4"
        ]
    );
    let mut late = late.lock().clone();
    late[..2].sort();
    assert_eq!(late, ["added a 2", "added b 3", "replayed", "deleted a 4"]);
    assert!(
        *consistent.lock(),
        "a handler saw a change the cache did not show yet"
    );
}

#[tokio::test]
async fn cached_objects_carry_no_managed_fields() {
    let owned = |name: &str, rv: &str| {
        let mut p = pod(name, rv);
        p["metadata"]["managedFields"] = json!([{"manager": "kubectl", "operation": "Apply",
            "fieldsType": "FieldsV1", "fieldsV1": {"f:metadata": {"f:labels": {}}}}]);
        p
    };
    let (mut fake, client) = Fake::new(vec![list("1", &[owned("a", "1")])]);
    let informers = Informers::new(client);
    let pods = informers.get::<Pod>();
    pods.cache().wait_until_ready().await;
    let watch = fake.watch().await;
    send(&watch, "ADDED", owned("b", "2"));
    settle().await;
    let cached = pods.cache().state();
    assert_eq!(cached.len(), 2);
    for p in cached {
        assert_eq!(p.metadata.managed_fields, None, "{:?}", p.metadata.name);
    }
}

#[tokio::test(start_paused = true)]
async fn a_410_relists_and_objects_gone_meanwhile_become_tombstones() {
    let (mut fake, client) = Fake::new(vec![
        list("1", &[pod("a", "1"), pod("b", "1"), pod("c", "1")]),
        list("9", &[pod("b", "1"), pod("c", "7"), pod("d", "8")]),
    ]);
    let informers = Informers::new(client);
    let pods = informers.get::<Pod>();
    let (seen, handler) = recorder();
    pods.add_handler(handler);
    let watch = fake.watch().await;
    expire(&watch);
    let _rewatch = fake.watch().await;
    settle().await;

    assert_eq!(
        fake.lists_of("/api/v1/pods"),
        2,
        "the 410 made it list again"
    );
    let mut seen = seen.lock().clone();
    seen[..3].sort();
    seen[3..].sort();
    assert_eq!(
        seen,
        [
            "added a 1",
            "added b 1",
            "added c 1",
            "added d 8",
            "tombstone a 1",
            "updated(from 1) c 7"
        ]
    );
    let mut names: Vec<String> = pods
        .cache()
        .state()
        .iter()
        .map(|p| p.metadata.name.clone().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["b", "c", "d"]);
}

#[tokio::test(start_paused = true)]
async fn a_resync_handler_sees_every_object_each_period_and_the_others_do_not() {
    let (mut fake, client) = Fake::new(vec![list("1", &[pod("a", "1"), pod("b", "1")])]);
    let informers = Informers::new(client);
    let pods = informers.get::<Pod>();
    let (plain, handler) = recorder();
    pods.add_handler(handler);
    let (resynced, handler) = recorder();
    pods.add_handler_with_resync(Duration::from_secs(30), handler);
    pods.cache().wait_until_ready().await;
    let _watch = fake.watch().await;

    tokio::time::sleep(Duration::from_secs(29)).await;
    assert_eq!(resynced.lock().len(), 2, "not yet");
    tokio::time::sleep(Duration::from_secs(2)).await;
    let mut after_one = resynced.lock()[2..].to_vec();
    after_one.sort();
    assert_eq!(after_one, ["updated(from 1) a 1", "updated(from 1) b 1"]);
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert_eq!(resynced.lock().len(), 6);
    assert_eq!(plain.lock().len(), 2);
}

#[tokio::test]
async fn informers_stop_with_their_factory() {
    let (mut fake, client) = Fake::new(vec![list("1", &[])]);
    let informers = Informers::new(client);
    let pods = informers.get::<Pod>();
    let watch = fake.watch().await;
    drop(informers);
    settle().await;
    assert!(watch.is_closed(), "the watch ended with the factory");
    assert!(pods.cache().is_ready(), "what was cached stays readable");
}

fn widgets() -> ApiResource {
    ApiResource {
        group: "example.com".into(),
        version: "v1".into(),
        api_version: "example.com/v1".into(),
        kind: "Widget".into(),
        plural: "widgets".into(),
    }
}

fn widget(name: &str, rv: &str) -> Value {
    json!({"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata",
           "metadata": {"namespace": "ns", "name": name, "resourceVersion": rv}})
}

fn widget_list(rv: &str, items: &[Value]) -> Value {
    json!({"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadataList",
           "metadata": {"resourceVersion": rv}, "items": items})
}

type Meta = PartialObjectMeta<DynamicObject>;

/// A handler that records `kind name` lines of a metadata informer's changes.
fn meta_recorder() -> (Seen, impl FnMut(&Change<Meta>) + Send + 'static) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let out = seen.clone();
    let handler = move |change: &Change<Meta>| {
        let what = match change {
            Change::Added(_) => "added",
            Change::Updated { .. } => "updated",
            Change::Deleted { .. } => "deleted",
        };
        let name = change.object().metadata.name.clone().unwrap_or_default();
        out.lock().push(format!("{what} {name}"));
    };
    (seen, handler)
}

#[tokio::test]
async fn two_users_of_a_metadata_informer_share_one_metadata_only_list_and_watch() {
    let (mut fake, client) = Fake::new(vec![widget_list("1", &[widget("a", "1")])]);
    let informers = Informers::new(client);
    // say, the garbage collector and the quota monitor
    let first = informers.metadata(&widgets());
    let (first_seen, handler) = meta_recorder();
    first.add_handler(handler);
    let second = informers.metadata(&widgets());
    let (second_seen, handler) = meta_recorder();
    let id = second.add_handler_then(handler, || {});
    assert!(Arc::ptr_eq(&first.shared, &second.shared));
    second.cache().wait_until_ready().await;
    let watch = fake.watch().await;
    send(&watch, "ADDED", widget("b", "2"));
    settle().await;
    second.remove_handler(id);
    send(&watch, "DELETED", widget("a", "3"));
    settle().await;

    assert_eq!(fake.lists_of("/apis/example.com/v1/widgets"), 1);
    assert_eq!(fake.watches_of("/apis/example.com/v1/widgets"), 1);
    let accepts = fake.script.lock().accepts.clone();
    assert!(
        accepts
            .iter()
            .all(|a| a.contains("as=PartialObjectMetadata")),
        "metadata only: {accepts:?}"
    );
    assert_eq!(*first_seen.lock(), ["added a", "added b", "deleted a"]);
    assert_eq!(
        *second_seen.lock(),
        ["added a", "added b"],
        "a removed handler sees nothing more"
    );
    let key = ObjectRef::new_with("b", widgets()).within("ns");
    assert!(
        first.cache().get(&key).is_some(),
        "keyed by namespace and name"
    );
    assert!(
        first
            .cache()
            .get(&ObjectRef::new_with("a", widgets()).within("ns"))
            .is_none()
    );

    // another resource is another informer
    let gadgets = ApiResource {
        plural: "gadgets".into(),
        kind: "Gadget".into(),
        ..widgets()
    };
    let other = informers.metadata(&gadgets);
    other.cache().wait_until_ready().await;
    assert!(!Arc::ptr_eq(&first.shared, &other.shared));
    assert_eq!(fake.lists_of("/apis/example.com/v1/gadgets"), 1);
}

#[tokio::test]
async fn a_metadata_informer_stops_with_its_last_handle() {
    let (mut fake, client) = Fake::new(vec![widget_list("1", &[widget("a", "1")])]);
    let informers = Informers::new(client);
    let first = informers.metadata(&widgets());
    let second = first.clone();
    let third = informers.metadata(&widgets());
    third.cache().wait_until_ready().await;
    let watch = fake.watch().await;
    drop((first, second));
    settle().await;
    assert!(!watch.is_closed(), "a handle is left");
    assert!(informers.watches_metadata(&widgets()));

    drop(third);
    settle().await;
    assert!(watch.is_closed(), "the last handle stopped the watch");
    assert!(!informers.watches_metadata(&widgets()));

    // served again (its CRD recreated): a new list and watch
    let again = informers.metadata(&widgets());
    again.cache().wait_until_ready().await;
    let _watch = fake.watch().await;
    assert_eq!(fake.lists_of("/apis/example.com/v1/widgets"), 2);
    assert!(again.cache().is_empty(), "a fresh cache");
}

/// A compact form of a pod, as a transform keeps it: where it is and its `app` label.
#[derive(Debug, PartialEq)]
struct Slim {
    namespace: String,
    name: String,
    app: Option<String>,
}

impl Cached for Slim {
    fn cache_key(&self) -> (Option<&str>, &str) {
        (Some(&self.namespace), &self.name)
    }

    fn cache_version(&self) -> Option<&str> {
        None
    }
}

fn slim(pod: Pod) -> Slim {
    let meta = pod.metadata;
    Slim {
        namespace: meta.namespace.unwrap_or_default(),
        name: meta.name.unwrap_or_default(),
        app: meta.labels.and_then(|mut l| l.remove("app")),
    }
}

/// The informer of slim pods: one transform, so one informer, wherever it is asked for.
fn slim_pods(informers: &Informers) -> Informer<Slim> {
    informers.transformed(watcher::Config::default(), slim)
}

/// A pod with an `app` label and more than a compact form keeps.
fn labelled(name: &str, rv: &str, app: &str) -> Value {
    let mut p = pod(name, rv);
    p["metadata"]["labels"] = json!({"app": app, "tier": "web"});
    p["spec"] = json!({"nodeName": "n1", "containers": [{"name": "c", "image": "busybox"}]});
    p
}

/// What a handler of slim pods saw, as `kind name app` lines.
fn slim_recorder() -> (Seen, impl FnMut(&Change<Slim>) + Send + 'static) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let out = seen.clone();
    let handler = move |change: &Change<Slim>| {
        let what = match change {
            Change::Added(_) => "added",
            Change::Updated { .. } => "updated",
            Change::Deleted { .. } => "deleted",
        };
        let s = change.object();
        out.lock().push(format!(
            "{what} {} {}",
            s.name,
            s.app.as_deref().unwrap_or("-")
        ));
    };
    (seen, handler)
}

#[tokio::test]
async fn a_transformed_informer_caches_and_tells_only_what_its_transform_makes_of_each_object() {
    // the first list comes in two pages
    let mut first_page = list("1", &[labelled("a", "1", "web"), labelled("b", "1", "db")]);
    first_page["metadata"]["continue"] = json!("after-b");
    let (mut fake, client) = Fake::new(vec![first_page, list("2", &[labelled("c", "2", "web")])]);
    let informers = Informers::new(client);
    let transformed = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let calls = transformed.clone();
    let pods = informers.transformed(watcher::Config::default(), move |p: Pod| {
        calls.fetch_add(1, Ordering::Relaxed);
        slim(p)
    });
    let (seen, handler) = slim_recorder();
    pods.add_handler(handler);
    pods.cache().wait_until_ready().await;
    let watch = fake.watch().await;
    send(&watch, "ADDED", labelled("d", "3", "web"));
    send(&watch, "MODIFIED", labelled("a", "4", "api"));
    send(&watch, "DELETED", labelled("b", "5", "db"));
    settle().await;

    let requests = fake.script.lock().requests.clone();
    assert!(requests[0].contains("limit=500"), "paged: {requests:?}");
    assert!(requests[1].contains("continue=after-b"), "{requests:?}");
    let mut cached: Vec<Arc<Slim>> = pods.cache().state();
    cached.sort_by(|x, y| x.name.cmp(&y.name));
    let slim = |name: &str, app: &str| Slim {
        namespace: "ns".into(),
        name: name.into(),
        app: Some(app.into()),
    };
    assert_eq!(
        cached.iter().map(|s| s.as_ref()).collect::<Vec<_>>(),
        [&slim("a", "api"), &slim("c", "web"), &slim("d", "web")]
    );
    assert_eq!(pods.cache().namespaced("ns").len(), 3, "filed by namespace");
    let mut listed = seen.lock()[..3].to_vec();
    listed.sort();
    assert_eq!(listed, ["added a web", "added b db", "added c web"]);
    assert_eq!(
        seen.lock()[3..],
        ["added d web", "updated a api", "deleted b db"]
    );
    assert_eq!(
        transformed.load(Ordering::Relaxed),
        6,
        "once per object as it arrives"
    );
}

#[tokio::test]
async fn a_transform_is_its_own_informer_shared_by_everyone_who_uses_the_same_one() {
    let one = list("1", &[labelled("a", "1", "web")]);
    let (fake, client) = Fake::new(vec![one.clone(), one]);
    let informers = Informers::new(client);
    let whole = informers.get::<Pod>();
    let first = slim_pods(&informers);
    let second = slim_pods(&informers);
    whole.cache().wait_until_ready().await;
    first.cache().wait_until_ready().await;
    assert!(Arc::ptr_eq(&first.shared, &second.shared));
    assert_eq!(
        fake.lists_of("/api/v1/pods"),
        2,
        "the whole pods and the slim ones are listed apart"
    );
    let kept = whole.cache().state();
    assert!(
        kept.len() == 1 && kept[0].spec.is_some(),
        "the untransformed informer keeps whole pods"
    );
    assert_eq!(first.cache().state()[0].app.as_deref(), Some("web"));
}

#[tokio::test(start_paused = true)]
async fn a_relist_reports_each_object_of_a_form_without_versions_as_updated() {
    let (mut fake, client) = Fake::new(vec![
        list("1", &[labelled("a", "1", "web"), labelled("b", "1", "web")]),
        list("9", &[labelled("b", "1", "web")]),
    ]);
    let informers = Informers::new(client);
    let pods = slim_pods(&informers);
    let (seen, handler) = slim_recorder();
    pods.add_handler(handler);
    let watch = fake.watch().await;
    expire(&watch);
    let _rewatch = fake.watch().await;
    settle().await;
    let mut relisted = seen.lock()[2..].to_vec();
    relisted.sort();
    assert_eq!(relisted, ["deleted a web", "updated b web"]);
}

#[tokio::test]
async fn a_transform_of_pods_metadata_lists_and_watches_metadata_only() {
    let item = json!({"metadata": {"namespace": "ns", "name": "a", "resourceVersion": "1",
                                   "labels": {"app": "web"}}});
    let (mut fake, client) = Fake::new(vec![json!({
        "apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadataList",
        "metadata": {"resourceVersion": "1"}, "items": [item]})]);
    let informers = Informers::new(client);
    let pods = informers.transformed(watcher::Config::default(), |p: PartialObjectMeta<Pod>| {
        slim(Pod {
            metadata: p.metadata,
            ..Pod::default()
        })
    });
    pods.cache().wait_until_ready().await;
    assert_eq!(pods.cache().state()[0].app.as_deref(), Some("web"));
    let _watch = fake.watch().await;
    let accepts = fake.script.lock().accepts.clone();
    assert_eq!(accepts.len(), 2);
    assert!(
        accepts
            .iter()
            .all(|a| a.contains("as=PartialObjectMetadata")),
        "{accepts:?}"
    );
    assert_eq!(fake.lists_of("/api/v1/pods"), 1);
}

#[tokio::test]
async fn an_object_informer_follows_one_object_in_its_namespace_until_its_last_handle_goes() {
    let (mut fake, client) = Fake::new(vec![list("1", &[pod("a", "1")])]);
    let informers = Informers::new(client);
    let first = informers.object::<Pod>("ns", "a");
    let second = informers.object::<Pod>("ns", "a");
    second.cache().wait_until_ready().await;
    let watch = fake.watch().await;
    let requests = fake.script.lock().requests.clone();
    assert_eq!(
        requests.len(),
        2,
        "one list and one watch for both: {requests:?}"
    );
    assert!(
        requests
            .iter()
            .all(|r| r.starts_with("/api/v1/namespaces/ns/pods?")
                && r.contains("fieldSelector=metadata.name%3Da")),
        "{requests:?}"
    );
    let a = ObjectRef::new("a").within("ns");
    assert!(first.cache().get(&a).is_some());
    send(&watch, "MODIFIED", pod("a", "2"));
    settle().await;
    let seen = second.cache().get(&a).expect("a");
    assert_eq!(seen.metadata.resource_version.as_deref(), Some("2"));

    drop(first);
    settle().await;
    assert!(!watch.is_closed(), "a handle is left");
    drop(second);
    settle().await;
    assert!(watch.is_closed(), "the last handle stopped the watch");
}
