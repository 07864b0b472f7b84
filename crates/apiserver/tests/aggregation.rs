//! API aggregation end to end in process: an aggregated API server run by the test (HTTPS on a
//! loopback port, trusting only the front-proxy CA that `extension-apiserver-authentication`
//! publishes, as a real one does) behind a Service and an EndpointSlice, registered with an
//! APIService. It becomes Available, discovery lists its group, a request through the
//! aggregator reaches it with the user in `X-Remote-User`, and when it goes away the
//! APIService turns unavailable, requests get 503, and deleting the APIService removes the
//! group.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine;
use bytes::Bytes;
use futures::StreamExt;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
use kube::discovery::Discovery;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use serde_json::{Value, json};
use x509_parser::prelude::{FromDer, X509Certificate};

const GROUP: &str = "wardle.example.com";
const VERSION: &str = "v1alpha1";
const NAME: &str = "v1alpha1.wardle.example.com";

/// What the aggregated server saw of one request: path, `X-Remote-User`, `X-Remote-Group`s
/// and the client certificate's common name.
#[derive(Debug, Clone)]
struct Seen {
    path: String,
    user: String,
    groups: Vec<String>,
    proxy_name: String,
}

/// The aggregated server's answer to `path`.
fn answer(path: &str, user: &str) -> (u16, Value) {
    match path {
        "/apis/wardle.example.com/v1alpha1" => (
            200,
            json!({"kind": "APIResourceList", "apiVersion": "v1",
                   "groupVersion": "wardle.example.com/v1alpha1",
                   "resources": [{"name": "flunders", "singularName": "flunder",
                                  "namespaced": true, "kind": "Flunder",
                                  "verbs": ["get", "list"], "shortNames": ["fl"]}]}),
        ),
        "/apis/wardle.example.com/v1alpha1/namespaces/default/flunders" => (
            200,
            json!({"kind": "FlunderList", "apiVersion": "wardle.example.com/v1alpha1",
                   "metadata": {"resourceVersion": "1"},
                   "items": [{"kind": "Flunder", "apiVersion": "wardle.example.com/v1alpha1",
                              "metadata": {"name": "f1", "namespace": "default",
                                           "annotations": {"seen-user": user}}}]}),
        ),
        "/openapi/v3/apis/wardle.example.com/v1alpha1" => (
            200,
            json!({"openapi": "3.0.0", "info": {"title": "wardle", "version": "v1alpha1"},
                   "paths": {}}),
        ),
        _ => (
            404,
            json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                   "reason": "NotFound", "code": 404}),
        ),
    }
}

/// A serving certificate for `wardle.default.svc` and the CA (PEM) that signed it.
fn serving_identity() -> (String, Vec<CertificateDer<'static>>, PrivateKeyDer<'static>) {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(rcgen::DnType::CommonName, "wardle-ca");
    let ca_cert = ca.self_signed(&ca_key).unwrap();
    let issuer = rcgen::Issuer::new(ca, ca_key);
    let key = rcgen::KeyPair::generate().unwrap();
    let leaf = rcgen::CertificateParams::new(vec!["wardle.default.svc".to_string()])
        .unwrap()
        .signed_by(&key, &issuer)
        .unwrap();
    (
        ca_cert.pem(),
        vec![leaf.der().clone()],
        PrivateKeyDer::from_pem_slice(key.serialize_pem().as_bytes()).unwrap(),
    )
}

/// Serves the aggregated API on `listener` until aborted, accepting only client certificates
/// of `front_proxy_ca` and recording every request in `seen`.
async fn serve(
    listener: tokio::net::TcpListener,
    front_proxy_ca: String,
    identity: (Vec<CertificateDer<'static>>, PrivateKeyDer<'static>),
    seen: Arc<Mutex<Vec<Seen>>>,
) {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(front_proxy_ca.as_bytes()) {
        roots.add(cert.unwrap()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
        Arc::new(roots),
        provider.clone(),
    )
    .build()
    .unwrap();
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_client_cert_verifier(verifier)
        .with_single_cert(identity.0, identity.1)
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    loop {
        let (tcp, _) = listener.accept().await.unwrap();
        let acceptor = acceptor.clone();
        let seen = seen.clone();
        tokio::spawn(async move {
            let Ok(tls) = acceptor.accept(tcp).await else {
                return;
            };
            let der = tls.get_ref().1.peer_certificates().unwrap()[0].clone();
            let (_, cert) = X509Certificate::from_der(&der).unwrap();
            let proxy_name = cert
                .subject()
                .iter_common_name()
                .next()
                .unwrap()
                .as_str()
                .unwrap()
                .to_string();
            let service = hyper::service::service_fn(move |req: http::Request<Incoming>| {
                let header = |name: &str| -> Vec<String> {
                    req.headers()
                        .get_all(name)
                        .iter()
                        .map(|v| v.to_str().unwrap().to_string())
                        .collect()
                };
                let user = header("x-remote-user").join(",");
                seen.lock().unwrap().push(Seen {
                    path: req.uri().path().to_string(),
                    user: user.clone(),
                    groups: header("x-remote-group"),
                    proxy_name: proxy_name.clone(),
                });
                let watch = req.uri().query().is_some_and(|q| q.contains("watch=true"));
                let (code, body) = answer(req.uri().path(), &user);
                let body = if watch {
                    // one event, then the stream stays open: only a proxy that streams lets
                    // the client see it
                    let event = json!({"type": "ADDED", "object": body["items"][0]});
                    let first = hyper::body::Frame::data(Bytes::from(format!("{event}\n")));
                    let frames = futures::stream::once(async move { Ok(first) })
                        .chain(futures::stream::pending());
                    BodyExt::boxed(StreamBody::new(frames))
                } else {
                    BodyExt::boxed(Full::new(Bytes::from(body.to_string())))
                };
                let resp = http::Response::builder()
                    .status(code)
                    .header("content-type", "application/json")
                    .body(body)
                    .unwrap();
                async move { Ok::<_, std::convert::Infallible>(resp) }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(tls), service)
                .await;
        });
    }
}

async fn eventually<T>(what: &str, mut probe: impl AsyncFnMut() -> Option<T>) -> T {
    for _ in 0..200 {
        if let Some(v) = probe().await {
            return v;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("timed out waiting for {what}");
}

/// The APIService's `Available` condition: (status, reason, message).
async fn available(client: &kube::Client, name: &str) -> Option<(String, String, String)> {
    let api = api_services(client);
    let s = api.get_opt(name).await.unwrap()?;
    let c = s.data["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "Available")?
        .clone();
    let text = |k: &str| c[k].as_str().unwrap_or("").to_string();
    Some((text("status"), text("reason"), text("message")))
}

fn api_services(client: &kube::Client) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("apiregistration.k8s.io", "v1", "APIService");
    Api::all_with(client.clone(), &ApiResource::from_gvk(&gvk))
}

/// `GET path` through the aggregator: status code and body.
async fn get(client: &kube::Client, path: &str) -> (u16, Value) {
    let req = http::Request::get(path).body(Vec::new()).unwrap();
    let (code, _, body) = common::send_raw(client, req).await;
    (code, serde_json::from_slice(&body).unwrap_or(Value::Null))
}

async fn create(
    client: &kube::Client,
    api_version: &str,
    kind: &str,
    plural: &str,
    ns: Option<&str>,
    obj: Value,
) {
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let gvk = GroupVersionKind::gvk(group, version, kind);
    let ar = ApiResource::from_gvk_with_plural(&gvk, plural);
    let api: Api<DynamicObject> = match ns {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &ar),
        None => Api::all_with(client.clone(), &ar),
    };
    let obj: DynamicObject = serde_json::from_value(obj).unwrap();
    api.create(&PostParams::default(), &obj).await.unwrap();
}

fn slice(port: u16, ready: bool) -> Value {
    json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
           "metadata": {"name": "wardle-x1", "namespace": "default",
                        "uid": "6b0c3c52-52a5-4c8e-9d3a-1d0f8d6f2a11",
                        "creationTimestamp": "2026-01-01T00:00:00Z",
                        "labels": {"kubernetes.io/service-name": "wardle"}},
           "addressType": "IPv4",
           "endpoints": [{"addresses": ["127.0.0.1"], "conditions": {"ready": ready}}],
           "ports": [{"name": "https", "port": port, "protocol": "TCP"}]})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_aggregated_api_server_is_proxied_discovered_and_checked() {
    let running = common::start_with(|gates| {
        gates.aggregation.as_mut().unwrap().recheck = Duration::from_millis(300);
    })
    .await;
    let client = running.client.clone();

    // the server's own group versions are Local APIServices
    let local = eventually("v1.apps to be Available", async || {
        available(&client, "v1.apps")
            .await
            .filter(|c| c.0 == "True")
    })
    .await;
    assert_eq!(
        local,
        (
            "True".into(),
            "Local".into(),
            "Local APIServices are always available".into()
        )
    );
    let apps = api_services(&client).get("v1.apps").await.unwrap();
    assert_eq!(
        apps.metadata.labels.unwrap()["kube-aggregator.kubernetes.io/automanaged"],
        "onstart"
    );
    assert!(
        api_services(&client)
            .get_opt("v1.")
            .await
            .unwrap()
            .is_some()
    );

    // an aggregated server reads the front-proxy CA from the published ConfigMap
    let configmaps: Api<k8s_openapi::api::core::v1::ConfigMap> =
        Api::namespaced(client.clone(), "kube-system");
    let auth = eventually("extension-apiserver-authentication", async || {
        configmaps
            .get_opt("extension-apiserver-authentication")
            .await
            .unwrap()
    })
    .await
    .data
    .unwrap();
    assert_eq!(
        auth["requestheader-allowed-names"],
        "[\"front-proxy-client\"]"
    );
    assert_eq!(
        auth["requestheader-username-headers"],
        "[\"X-Remote-User\"]"
    );
    assert!(auth["client-ca-file"].starts_with("-----BEGIN CERTIFICATE-----"));
    let front_proxy_ca = auth["requestheader-client-ca-file"].clone();

    let (serving_ca, chain, key) = serving_identity();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let wardle = tokio::spawn(serve(listener, front_proxy_ca, (chain, key), seen.clone()));

    create(
        &client,
        "v1",
        "Service",
        "services",
        Some("default"),
        json!({
        "apiVersion": "v1", "kind": "Service", "metadata": {"name": "wardle"},
        "spec": {"ports": [{"name": "https", "port": 443, "targetPort": port}]}}),
    )
    .await;
    // the API refuses loopback addresses in EndpointSlices (as upstream), and the test's
    // server listens on loopback: its slice goes straight to the store
    running
        .put_unvalidated("discovery.k8s.io", "endpointslices", slice(port, true))
        .await;
    let ca_bundle = base64::engine::general_purpose::STANDARD.encode(serving_ca);
    create(
        &client,
        "apiregistration.k8s.io/v1",
        "APIService",
        "apiservices",
        None,
        json!({
        "apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
        "metadata": {"name": NAME},
        "spec": {"group": GROUP, "version": VERSION, "caBundle": ca_bundle,
                 "groupPriorityMinimum": 1000, "versionPriority": 15,
                 "service": {"namespace": "default", "name": "wardle"}}}),
    )
    .await;

    let up = eventually("the APIService to pass its checks", async || {
        available(&client, NAME).await.filter(|c| c.0 == "True")
    })
    .await;
    assert_eq!(
        (up.1.as_str(), up.2.as_str()),
        ("Passed", "all checks passed")
    );
    let probe = seen.lock().unwrap()[0].clone();
    assert_eq!(probe.path, "/apis/wardle.example.com/v1alpha1");
    assert_eq!(probe.user, "system:kube-aggregator");
    assert_eq!(probe.proxy_name, "front-proxy-client");

    // discovery: legacy and aggregated, with the remote's resources
    let discovery = Discovery::new(client.clone()).run().await.unwrap();
    let group = discovery
        .groups()
        .find(|g| g.name() == GROUP)
        .expect("the aggregated group is discovered");
    let (flunders, _) = group
        .recommended_resources()
        .into_iter()
        .find(|(r, _)| r.plural == "flunders")
        .expect("flunders");
    assert_eq!(flunders.kind, "Flunder");
    let req = http::Request::get("/apis")
        .header(
            "accept",
            "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList",
        )
        .body(Vec::new())
        .unwrap();
    let doc: Value = serde_json::from_str(&client.request_text(req).await.unwrap()).unwrap();
    let item = doc["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["metadata"]["name"] == GROUP)
        .unwrap();
    assert_eq!(item["versions"][0]["resources"][0]["resource"], "flunders");
    assert_eq!(item["versions"][0]["freshness"], "Current");

    // OpenAPI v3 lists the group version, and its document is the remote's
    let (_, index) = get(&client, "/openapi/v3").await;
    assert_eq!(
        index["paths"]["apis/wardle.example.com/v1alpha1"]["serverRelativeURL"],
        "/openapi/v3/apis/wardle.example.com/v1alpha1"
    );
    let (code, doc) = get(&client, "/openapi/v3/apis/wardle.example.com/v1alpha1").await;
    assert_eq!((code, doc["info"]["title"].as_str()), (200, Some("wardle")));

    // a request through the aggregator reaches the server as the authenticated user
    let gvk = GroupVersionKind::gvk(GROUP, VERSION, "Flunder");
    let flunders_api: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), "default", &ApiResource::from_gvk(&gvk));
    let list = flunders_api.list(&ListParams::default()).await.unwrap();
    assert_eq!(list.items.len(), 1);
    let annotations = list.items[0].metadata.annotations.clone().unwrap();
    assert_eq!(annotations["seen-user"], "admin");
    let proxied = seen
        .lock()
        .unwrap()
        .iter()
        .rfind(|s| s.path.ends_with("/flunders"))
        .cloned()
        .unwrap();
    assert!(proxied.groups.contains(&"system:masters".to_string()));
    assert_eq!(proxied.proxy_name, "front-proxy-client");

    // a watch streams through the aggregator
    let mut events = flunders_api
        .watch(&kube::api::WatchParams::default(), "0")
        .await
        .unwrap()
        .boxed();
    let first = tokio::time::timeout(Duration::from_secs(10), events.next())
        .await
        .expect("the first event arrives while the watch is open")
        .unwrap()
        .unwrap();
    assert!(
        matches!(&first, kube::api::WatchEvent::Added(f) if f.metadata.name.as_deref() == Some("f1")),
        "{first:?}"
    );
    drop(events);

    // the server goes away: the discovery check fails and requests get 503
    wardle.abort();
    let _ = wardle.await;
    let down = eventually("the APIService to fail its check", async || {
        available(&client, NAME).await.filter(|c| c.0 == "False")
    })
    .await;
    assert_eq!(down.1, "FailedDiscoveryCheck");
    assert!(
        down.2
            .starts_with("failing or missing response from https://127.0.0.1:"),
        "{}",
        down.2
    );
    // (kube-rs would retry a 503 for minutes)
    let no_retries = running.client_without_retries().await;
    let (code, status) = get(
        &no_retries,
        "/apis/wardle.example.com/v1alpha1/namespaces/default/flunders",
    )
    .await;
    assert_eq!(
        (code, status["reason"].as_str()),
        (503, Some("ServiceUnavailable"))
    );
    let table = api_services(&client)
        .list(&ListParams::default())
        .await
        .unwrap();
    assert!(
        table
            .items
            .iter()
            .any(|s| s.metadata.name.as_deref() == Some(NAME))
    );

    // its only endpoint turns unready: MissingEndpoints
    running
        .put_unvalidated("discovery.k8s.io", "endpointslices", slice(port, false))
        .await;
    let missing = eventually("MissingEndpoints", async || {
        available(&client, NAME)
            .await
            .filter(|c| c.1 == "MissingEndpoints")
    })
    .await;
    assert_eq!(
        missing.2,
        "endpointslices for service/wardle in \"default\" have no addresses with port name \"https\""
    );

    // deleting the APIService removes the group everywhere
    api_services(&client)
        .delete(NAME, &DeleteParams::default())
        .await
        .unwrap();
    eventually("the group to leave discovery", async || {
        let (_, groups) = get(&client, "/apis").await;
        let names: Vec<&str> = groups["groups"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|g| g["name"].as_str())
            .collect();
        (!names.contains(&GROUP)).then_some(())
    })
    .await;
    let (code, _) = get(
        &client,
        "/apis/wardle.example.com/v1alpha1/namespaces/default/flunders",
    )
    .await;
    assert_eq!(code, 404);
    running.stop().await;
}

/// `kubectl auth whoami` of `client`: the user name and groups, or the refusal's code.
async fn whoami(client: &kube::Client) -> Result<(String, Vec<String>), u16> {
    let review = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"});
    let req = http::Request::post("/apis/authentication.k8s.io/v1/selfsubjectreviews")
        .header("content-type", "application/json")
        .body(review.to_string().into_bytes())
        .unwrap();
    let (code, _, body) = common::send_raw(client, req).await;
    if code != 201 {
        return Err(code);
    }
    let review: Value = serde_json::from_slice(&body).unwrap();
    let user = &review["status"]["userInfo"];
    Ok((
        user["username"].as_str().unwrap().to_string(),
        serde_json::from_value(user["groups"].clone()).unwrap(),
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_front_proxy_certificate_vouches_for_the_user_in_its_headers() {
    let running = common::start().await;
    let headers = [("x-remote-user", "bob"), ("x-remote-group", "devs")];
    let proxied = running.client_with_headers(true, &headers).await;
    assert_eq!(
        whoami(&proxied).await,
        Ok((
            "bob".to_string(),
            vec!["devs".to_string(), "system:authenticated".to_string()]
        ))
    );
    // the headers mean nothing from a cluster CA certificate
    let admin = running.client_with_headers(false, &headers).await;
    assert_eq!(whoami(&admin).await.unwrap().0, "admin");
    // and the front-proxy certificate names no user of its own
    let bare = running.client_with_headers(true, &[]).await;
    assert_eq!(whoami(&bare).await, Err(401));
    running.stop().await;
}
