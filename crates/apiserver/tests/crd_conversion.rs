//! CRD conversion webhooks end to end in process: a CRD whose `v1` (`spec.cronSpec`) and `v2`
//! (`spec.schedule`, the storage version) convert through a webhook this test serves over HTTPS
//! on loopback (its own CA, from the API server's PKI code). Objects are created in one version
//! and read, listed, watched and updated in the other; the store holds the storage version; a
//! storage version changed later leaves older objects converted from their own version; and a
//! webhook that refuses or is down fails requests with upstream's 500 `Status`, storing nothing.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine;
use futures::StreamExt;
use http_body_util::BodyExt;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{
    Api, ApiResource, DynamicObject, ListParams, Patch, PatchParams, PostParams, WatchEvent,
    WatchParams,
};
use kube::runtime::wait::{await_condition, conditions};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use serde_json::{Value, json};
use skiff_apiserver::pki::Pki;
use skiff_apiserver::storage;
use skiff_store::StoreExt;

/// What the test webhook was sent, and whether it refuses.
#[derive(Default)]
struct State {
    /// `(desiredAPIVersion, names of the objects sent)` per review.
    reviews: Vec<(String, Vec<String>)>,
    /// Answer every review with `Failure` and this message.
    refuse: Option<String>,
}

/// The conversion webhook: v1 `spec.cronSpec` ⇄ v2 `spec.schedule`; it also labels what it
/// converts (labels may change) and tries to change `generation` (which must be restored).
fn convert(state: &Mutex<State>, review: &Value) -> Value {
    let request = &review["request"];
    let desired = request["desiredAPIVersion"]
        .as_str()
        .unwrap_or("")
        .to_string();
    let objects = request["objects"].as_array().cloned().unwrap_or_default();
    let mut state = state.lock().unwrap();
    state.reviews.push((
        desired.clone(),
        objects
            .iter()
            .map(|o| o["metadata"]["name"].as_str().unwrap_or("").to_string())
            .collect(),
    ));
    let result = match &state.refuse {
        Some(message) => json!({"status": "Failure", "message": message}),
        None => json!({"status": "Success"}),
    };
    let converted: Vec<Value> = objects
        .into_iter()
        .map(|mut o| {
            let spec = o["spec"].as_object_mut().expect("a spec");
            let (from, to) = if desired.ends_with("/v2") {
                ("cronSpec", "schedule")
            } else {
                ("schedule", "cronSpec")
            };
            if let Some(v) = spec.remove(from) {
                spec.insert(to.into(), v);
            }
            o["apiVersion"] = json!(desired);
            o["metadata"]["labels"]["converted-by"] = json!("test-webhook");
            o["metadata"]["generation"] = json!(1000);
            o
        })
        .collect();
    json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
           "response": {"uid": request["uid"], "result": result, "convertedObjects": converted}})
}

/// The webhook server: HTTPS on a free loopback port with a serving certificate for
/// 127.0.0.1 from its own CA.
struct Webhook {
    port: u16,
    ca_bundle: String,
    state: Arc<Mutex<State>>,
    _dir: tempfile::TempDir,
}

impl Webhook {
    async fn start() -> Webhook {
        let dir = tempfile::tempdir().unwrap();
        let pki = Pki::ensure(dir.path(), &["127.0.0.1".to_string()]).unwrap();
        let certs: Vec<CertificateDer<'static>> =
            CertificateDer::pem_slice_iter(pki.serving_cert_pem.as_bytes())
                .collect::<Result<_, _>>()
                .unwrap();
        let key = PrivateKeyDer::from_pem_slice(pki.serving_key_pem.as_bytes()).unwrap();
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let state = Arc::new(Mutex::new(State::default()));
        let served = state.clone();
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let (acceptor, state) = (acceptor.clone(), served.clone());
                tokio::spawn(async move {
                    let Ok(tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let service = hyper::service::service_fn(
                        move |req: hyper::Request<hyper::body::Incoming>| {
                            let state = state.clone();
                            async move {
                                assert_eq!(req.uri().path(), "/convert");
                                assert_eq!(req.uri().query(), Some("timeout=30s"));
                                let body = req.into_body().collect().await?.to_bytes();
                                let review: Value = serde_json::from_slice(&body).unwrap();
                                let answer = convert(&state, &review).to_string();
                                Ok::<_, hyper::Error>(hyper::Response::new(
                                    http_body_util::Full::new(bytes::Bytes::from(answer)),
                                ))
                            }
                        },
                    );
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(tls), service)
                        .await;
                });
            }
        });
        Webhook {
            port,
            ca_bundle: base64::engine::general_purpose::STANDARD.encode(&pki.ca_cert_pem),
            state,
            _dir: dir,
        }
    }

    fn reviews(&self) -> Vec<(String, Vec<String>)> {
        self.state.lock().unwrap().reviews.clone()
    }

    fn refuse(&self, message: Option<&str>) {
        self.state.lock().unwrap().refuse = message.map(str::to_string);
    }
}

fn version(name: &str, field: &str, storage: bool) -> Value {
    json!({"name": name, "served": true, "storage": storage,
           "schema": {"openAPIV3Schema": {"type": "object", "properties": {
               "spec": {"type": "object", "properties": {field: {"type": "string"}}}}}}})
}

/// The CronTab CRD of `group`, stored as v2, converted by the webhook at `url` (whose
/// certificate `ca_bundle` signs, if given).
fn crd(group: &str, url: &str, ca_bundle: Option<&str>) -> CustomResourceDefinition {
    let mut client_config = json!({"url": url});
    if let Some(ca) = ca_bundle {
        client_config["caBundle"] = json!(ca);
    }
    serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("crontabs.{group}")},
        "spec": {"group": group, "scope": "Namespaced",
                 "names": {"plural": "crontabs", "singular": "crontab", "kind": "CronTab"},
                 "versions": [version("v1", "cronSpec", false), version("v2", "schedule", true)],
                 "conversion": {"strategy": "Webhook", "webhook": {
                     "clientConfig": client_config,
                     "conversionReviewVersions": ["v1"]}}}
    }))
    .unwrap()
}

async fn establish(client: &kube::Client, crd: &CustomResourceDefinition) {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.create(&PostParams::default(), crd).await.unwrap();
    let name = crd.metadata.name.clone().unwrap();
    let established = await_condition(crds, &name, conditions::is_crd_established());
    tokio::time::timeout(Duration::from_secs(5), established)
        .await
        .expect("the CRD is established within 5 s")
        .unwrap();
}

fn api(client: &kube::Client, group: &str, version: &str) -> Api<DynamicObject> {
    let resource = ApiResource {
        group: group.into(),
        version: version.into(),
        api_version: format!("{group}/{version}"),
        kind: "CronTab".into(),
        plural: "crontabs".into(),
    };
    Api::namespaced_with(client.clone(), "default", &resource)
}

fn crontab(group: &str, version: &str, name: &str, field: &str, value: &str) -> DynamicObject {
    serde_json::from_value(
        json!({"apiVersion": format!("{group}/{version}"), "kind": "CronTab",
        "metadata": {"name": name}, "spec": {field: value}}),
    )
    .unwrap()
}

/// What the store holds for `name` (its version and spec), read past the API.
async fn stored(running: &common::Running, group: &str, name: &str) -> Option<Value> {
    let rt = running
        .server
        .registry
        .lookup(group, "v2", "crontabs")
        .expect("crontabs are served");
    let kv = running
        .server
        .store
        .get(storage::key(&rt, "default", name).as_bytes())
        .await
        .unwrap()?;
    Some(storage::decode(&kv).unwrap())
}

fn spec(o: &DynamicObject) -> &Value {
    &o.data["spec"]
}

fn api_error(e: kube::Error) -> kube::core::Status {
    match e {
        kube::Error::Api(s) => *s,
        other => panic!("expected a Status, got {other:?}"),
    }
}

const GROUP: &str = "stable.example.com";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn objects_convert_through_the_webhook_between_versions() {
    let running = common::start().await;
    let client = running.client.clone();
    let hook = Webhook::start().await;
    let url = format!("https://127.0.0.1:{}/convert", hook.port);
    establish(&client, &crd(GROUP, &url, Some(&hook.ca_bundle))).await;
    let (v1, v2) = (api(&client, GROUP, "v1"), api(&client, GROUP, "v2"));
    let pp = PostParams::default();

    // Created in v1: stored as v2, answered in v1.
    let a = v1
        .create(&pp, &crontab(GROUP, "v1", "a", "cronSpec", "*/5 * * * *"))
        .await
        .unwrap();
    assert_eq!(spec(&a), &json!({"cronSpec": "*/5 * * * *"}));
    assert_eq!(
        a.types.as_ref().unwrap().api_version,
        "stable.example.com/v1"
    );
    let raw = stored(&running, GROUP, "a").await.unwrap();
    assert_eq!(raw["apiVersion"], "stable.example.com/v2");
    assert_eq!(raw["spec"], json!({"schedule": "*/5 * * * *"}));
    // The webhook's label is kept, its generation is not.
    assert_eq!(raw["metadata"]["labels"]["converted-by"], "test-webhook");
    assert_eq!(raw["metadata"]["generation"], 1);
    assert_eq!(
        hook.reviews(),
        [("stable.example.com/v2".to_string(), vec!["a".to_string()])]
    );

    // Read in v2 (as stored: no call) and in v1 (converted).
    let got = v2.get("a").await.unwrap();
    assert_eq!(spec(&got), &json!({"schedule": "*/5 * * * *"}));
    assert_eq!(hook.reviews().len(), 1);
    let got = v1.get("a").await.unwrap();
    assert_eq!(spec(&got), &json!({"cronSpec": "*/5 * * * *"}));
    assert_eq!(got.metadata.generation, Some(1));

    // Created in v2, listed in v1: every item in one review.
    v2.create(&pp, &crontab(GROUP, "v2", "b", "schedule", "0 * * * *"))
        .await
        .unwrap();
    let before = hook.reviews().len();
    let list = v1.list(&ListParams::default()).await.unwrap();
    let specs: Vec<&Value> = list.items.iter().map(spec).collect();
    assert_eq!(
        specs,
        [
            &json!({"cronSpec": "*/5 * * * *"}),
            &json!({"cronSpec": "0 * * * *"})
        ]
    );
    assert_eq!(
        hook.reviews()[before..],
        [(
            "stable.example.com/v1".to_string(),
            vec!["a".to_string(), "b".to_string()]
        )]
    );

    // Watched in v1: the initial objects converted.
    let mut watch = v1
        .watch(&WatchParams::default(), "0")
        .await
        .unwrap()
        .boxed();
    for _ in 0..2 {
        match watch.next().await.unwrap().unwrap() {
            WatchEvent::Added(o) => assert!(spec(&o)["cronSpec"].is_string(), "{o:?}"),
            other => panic!("expected ADDED, got {other:?}"),
        }
    }

    // Updated through v2 and patched through v1: both land in v2, and the watch sees them in v1.
    let mut b = v2.get("b").await.unwrap();
    b.data["spec"]["schedule"] = json!("30 * * * *");
    v2.replace("b", &pp, &b).await.unwrap();
    assert_eq!(
        stored(&running, GROUP, "b").await.unwrap()["spec"],
        json!({"schedule": "30 * * * *"})
    );
    match watch.next().await.unwrap().unwrap() {
        WatchEvent::Modified(o) => assert_eq!(spec(&o), &json!({"cronSpec": "30 * * * *"})),
        other => panic!("expected MODIFIED, got {other:?}"),
    }
    let patch = json!({"spec": {"cronSpec": "45 * * * *"}});
    let patched = v1
        .patch("b", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    assert_eq!(spec(&patched), &json!({"cronSpec": "45 * * * *"}));
    assert_eq!(
        stored(&running, GROUP, "b").await.unwrap()["spec"],
        json!({"schedule": "45 * * * *"})
    );

    // A webhook that refuses: its message, a 500, and nothing stored.
    hook.refuse(Some("schedules on Tuesdays are not convertible"));
    let err = api_error(v1.get("a").await.unwrap_err());
    assert_eq!(err.code, 500);
    assert_eq!(
        err.message,
        "conversion webhook for stable.example.com/v2, Kind=CronTab failed: schedules on Tuesdays are not convertible"
    );
    let err = api_error(
        v1.create(&pp, &crontab(GROUP, "v1", "c", "cronSpec", "* * * * *"))
            .await
            .unwrap_err(),
    );
    assert_eq!((err.code, err.reason.as_str()), (500, "InternalError"));
    assert_eq!(
        err.message,
        "Internal error occurred: conversion webhook for stable.example.com/v1, Kind=CronTab failed: schedules on Tuesdays are not convertible"
    );
    assert!(stored(&running, GROUP, "c").await.is_none());
    // A watch of the other version ends with the error.
    let mut failing = v1
        .watch(&WatchParams::default(), "0")
        .await
        .unwrap()
        .boxed();
    match failing.next().await.unwrap().unwrap() {
        WatchEvent::Error(e) => {
            assert_eq!(e.code, 500);
            assert!(e.message.ends_with("not convertible"), "{}", e.message);
        }
        other => panic!("expected ERROR, got {other:?}"),
    }
    assert!(failing.next().await.is_none());
    hook.refuse(None);

    // The storage version moves to v1: new objects are stored as v1, older ones stay v2 and
    // convert from it.
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let storage_v1 = json!({"spec": {"versions": [version("v1", "cronSpec", true),
                                                  version("v2", "schedule", false)]}});
    crds.patch(
        "crontabs.stable.example.com",
        &PatchParams::default(),
        &Patch::Merge(&storage_v1),
    )
    .await
    .unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        let _ = v1.delete("d", &Default::default()).await;
        v1.create(&pp, &crontab(GROUP, "v1", "d", "cronSpec", "15 * * * *"))
            .await
            .unwrap();
        let raw = stored(&running, GROUP, "d").await.unwrap();
        if raw["apiVersion"] == "stable.example.com/v1" {
            assert_eq!(raw["spec"], json!({"cronSpec": "15 * * * *"}));
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the storage version did not change"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let before = hook.reviews().len();
    let list = v2.list(&ListParams::default()).await.unwrap();
    let specs: Vec<&Value> = list.items.iter().map(spec).collect();
    assert_eq!(
        specs,
        [
            &json!({"schedule": "*/5 * * * *"}),
            &json!({"schedule": "45 * * * *"}),
            &json!({"schedule": "15 * * * *"})
        ]
    );
    assert_eq!(
        hook.reviews()[before..],
        [("stable.example.com/v2".to_string(), vec!["d".to_string()])]
    );
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_webhook_that_is_down_fails_writes_with_a_500_and_stores_nothing() {
    let running = common::start().await;
    let client = running.client.clone();
    // A port nothing listens on.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let group = "broken.example.com";
    let url = format!("https://127.0.0.1:{port}/convert");
    establish(&client, &crd(group, &url, None)).await;
    let v1 = api(&client, group, "v1");
    let err = api_error(
        v1.create(
            &PostParams::default(),
            &crontab(group, "v1", "a", "cronSpec", "* * * * *"),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!((err.code, err.reason.as_str()), (500, "InternalError"));
    let expected = format!(
        "Internal error occurred: conversion webhook for broken.example.com/v1, Kind=CronTab failed: Post \"https://127.0.0.1:{port}/convert?timeout=30s\": dial tcp 127.0.0.1:{port}: "
    );
    assert!(err.message.starts_with(&expected), "{}", err.message);
    assert!(stored(&running, group, "a").await.is_none());
    // The storage version needs no webhook.
    let v2 = api(&client, group, "v2");
    v2.create(
        &PostParams::default(),
        &crontab(group, "v2", "b", "schedule", "* * * * *"),
    )
    .await
    .unwrap();
    assert_eq!(
        v2.list(&ListParams::default()).await.unwrap().items.len(),
        1
    );
    running.stop().await;
}
