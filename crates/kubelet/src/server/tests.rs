//! The server's endpoints over the recording fake runtime and a recording fake of the API
//! server's reviews: authentication (certificates, bearer tokens through TokenReview) and
//! authorization (SubjectAccessReviews for this node, their answers cached), `/pods`,
//! `/containerLogs` reading the container's CRI log file, and `/exec` asking the runtime for a
//! streaming URL and joining the client's upgraded connection to the server behind it.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use http::Request;
use http_body_util::BodyExt;
use hyper_util::rt::TokioIo;
use k8s_openapi::api::core::v1::Pod;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::auth::Auth;
use super::pods::PodRegistry;
use super::reviews::{self, AccessReview, Reviews, User};
use super::{ServerState, handle};
use crate::config::{container_config, sandbox_config};
use crate::cri::ContainerRuntime;
use crate::fake::FakeRuntime;
use crate::stats::{self, Summary, SummaryProvider};

const NODE: &str = "node-1";

/// A summary provider answering `summary` (none: the runtime is down), recording whether
/// each call wanted CPU and memory only.
#[derive(Default)]
struct FixedSummary {
    summary: parking_lot::Mutex<Option<Summary>>,
    calls: parking_lot::Mutex<Vec<bool>>,
}

#[async_trait]
impl SummaryProvider for FixedSummary {
    async fn summary(&self, cpu_and_memory_only: bool) -> Result<Summary, stats::Error> {
        self.calls.lock().push(cpu_and_memory_only);
        self.summary.lock().clone().ok_or_else(|| {
            stats::Error(crate::cri::Error::Call {
                method: "ListContainerStats",
                status: tonic::Status::unavailable("connection refused"),
            })
        })
    }
}

fn node_summary() -> Summary {
    serde_json::from_value(json!({
        "node": {"nodeName": NODE, "startTime": "2026-12-04T10:00:00Z",
                 "cpu": {"time": "2026-12-04T10:00:00Z", "usageCoreNanoSeconds": 2_000_000_000u64}},
        "pods": [],
    }))
    .unwrap()
}

/// A recording fake of the API server's reviews: the tokens it knows, the `(user, verb,
/// subresource)` it allows (`*` for any verb or subresource), and whether it is failing.
#[derive(Default)]
struct FakeReviews {
    tokens: HashMap<String, User>,
    allowed: parking_lot::Mutex<Vec<(String, String, String)>>,
    failing: std::sync::atomic::AtomicBool,
    calls: parking_lot::Mutex<Vec<String>>,
}

impl FakeReviews {
    fn allowing(rules: &[(&str, &str, &str)]) -> FakeReviews {
        let reviews = FakeReviews::default();
        for rule in rules {
            reviews.allow(*rule);
        }
        reviews
    }

    fn allow(&self, (user, verb, subresource): (&str, &str, &str)) {
        self.allowed
            .lock()
            .push((user.into(), verb.into(), subresource.into()));
    }

    fn calls(&self) -> Vec<String> {
        std::mem::take(&mut *self.calls.lock())
    }

    fn fail(&self, failing: bool) {
        self.failing
            .store(failing, std::sync::atomic::Ordering::SeqCst);
    }

    fn check(&self, kind: &'static str) -> reviews::Result<()> {
        if self.failing.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(reviews::Error::Create {
                kind,
                message: "connection refused".into(),
            });
        }
        Ok(())
    }
}

#[async_trait]
impl Reviews for FakeReviews {
    async fn token(&self, token: &str) -> reviews::Result<Option<User>> {
        self.calls.lock().push(format!("TokenReview {token}"));
        self.check("TokenReview")?;
        Ok(self.tokens.get(token).cloned())
    }

    async fn access(&self, r: &AccessReview) -> reviews::Result<bool> {
        self.calls.lock().push(format!(
            "SubjectAccessReview {} {:?} {} nodes/{} {}",
            r.user.name, r.user.groups, r.verb, r.subresource, r.node
        ));
        self.check("SubjectAccessReview")?;
        let matches = |rule: &str, value: &str| rule == "*" || rule == value;
        Ok(self
            .allowed
            .lock()
            .iter()
            .any(|(u, v, s)| *u == r.user.name && matches(v, r.verb) && matches(s, r.subresource)))
    }
}

/// The API server's identity at the kubelet, which the default fake allows everything.
fn admin() -> User {
    user("kube-apiserver-kubelet-client")
}

fn user(name: &str) -> User {
    User {
        name: name.into(),
        groups: vec!["system:authenticated".into()],
        ..User::default()
    }
}

fn pod() -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": "web", "namespace": "ns", "uid": "u1"},
        "spec": {"containers": [{"name": "app", "image": "busybox"}]},
    }))
    .unwrap()
}

/// A server state whose runtime runs `pod()` with its container started (id returned).
async fn state(log_dir: &Path) -> (ServerState, Arc<FakeRuntime>, String) {
    let fake = Arc::new(FakeRuntime::new());
    let pod = pod();
    // the pod's log directory, as the kubelet gives it
    let sandbox = sandbox_config(&pod, 0, &crate::pod_sync::pod_log_dir(log_dir, &pod), &[]);
    let sandbox_id = fake.run_pod_sandbox(sandbox.clone(), "").await.unwrap();
    let container = pod.spec.as_ref().unwrap().containers[0].clone();
    let config = container_config(
        &pod,
        &container,
        "busybox",
        0,
        vec![],
        vec![],
        Default::default(),
    );
    let id = fake
        .create_container(&sandbox_id, config, sandbox)
        .await
        .unwrap();
    fake.start_container(&id).await.unwrap();
    let pods = PodRegistry::default();
    pods.upsert(&Arc::new(pod.clone()));
    let state = ServerState {
        runtime: fake.clone(),
        pods,
        log_dir: log_dir.to_path_buf(),
        clock: jiff::Timestamp::now,
        auth: Auth::new(
            Arc::new(FakeReviews::allowing(&[(&admin().name, "*", "*")])),
            NODE,
        ),
        stats: Arc::new(FixedSummary::default()),
    };
    (state, fake, id)
}

fn get(uri: &str) -> http::request::Parts {
    Request::get(uri).body(()).unwrap().into_parts().0
}

async fn body_text(resp: http::Response<super::Body>) -> String {
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    String::from_utf8(bytes.to_vec()).unwrap()
}

#[tokio::test]
async fn clients_without_credentials_are_unauthorized_and_health_is_ok() {
    let dir = tempfile::tempdir().unwrap();
    let (state, ..) = state(dir.path()).await;
    let resp = handle(&state, get("/healthz"), None).await;
    assert_eq!(resp.status(), 401);
    let resp = handle(&state, get("/healthz"), Some(&admin())).await;
    assert_eq!(
        (resp.status().as_u16(), body_text(resp).await),
        (200, "ok\n".into())
    );
    let resp = handle(&state, get("/nothing"), Some(&admin())).await;
    assert_eq!(resp.status(), 404);
}

/// A server state whose authorizer is `reviews`.
async fn state_asking(log_dir: &Path, reviews: &Arc<FakeReviews>) -> ServerState {
    let (mut state, ..) = state(log_dir).await;
    state.auth = Auth::new(reviews.clone(), NODE);
    state
}

fn get_with_token(uri: &str, token: &str) -> http::request::Parts {
    Request::get(uri)
        .header("authorization", format!("Bearer {token}"))
        .body(())
        .unwrap()
        .into_parts()
        .0
}

#[tokio::test]
async fn a_certificate_user_is_asked_about_for_this_node_and_the_answer_is_kept() {
    let dir = tempfile::tempdir().unwrap();
    let reviews = Arc::new(FakeReviews::allowing(&[("alice", "get", "proxy")]));
    let state = state_asking(dir.path(), &reviews).await;
    let alice = user("alice");
    let resp = handle(&state, get("/containerLogs/ns/gone/app"), Some(&alice)).await;
    assert_eq!(resp.status(), 404, "let in, then not found");
    assert_eq!(
        reviews.calls(),
        [r#"SubjectAccessReview alice ["system:authenticated"] get nodes/proxy node-1"#]
    );
    let resp = handle(&state, get("/containerLogs/ns/gone/app"), Some(&alice)).await;
    assert_eq!(resp.status(), 404);
    assert!(reviews.calls().is_empty(), "the allowed answer is cached");
    // a POST is `create`, another question
    let post = Request::post("/exec/ns/web/app?command=ls&output=1")
        .body(())
        .unwrap()
        .into_parts()
        .0;
    let resp = handle(&state, post, Some(&alice)).await;
    assert_eq!(
        (resp.status().as_u16(), body_text(resp).await),
        (
            403,
            "Forbidden (user=alice, verb=create, resource=nodes, subresource(s)=[proxy])\n".into()
        )
    );
    assert_eq!(
        reviews.calls(),
        [r#"SubjectAccessReview alice ["system:authenticated"] create nodes/proxy node-1"#]
    );
}

#[tokio::test]
async fn fine_grained_paths_try_their_own_subresource_then_proxy_and_403_names_both() {
    let dir = tempfile::tempdir().unwrap();
    let reviews = Arc::new(FakeReviews::allowing(&[
        ("scraper", "get", "pods"),
        ("prober", "get", "proxy"),
    ]));
    let state = state_asking(dir.path(), &reviews).await;
    let resp = handle(&state, get("/pods"), Some(&user("scraper"))).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(reviews.calls().len(), 1, "nodes/pods was enough");
    let resp = handle(&state, get("/healthz"), Some(&user("prober"))).await;
    assert_eq!(resp.status(), 200);
    let asked: Vec<String> = reviews.calls();
    assert!(
        asked[0].ends_with("get nodes/healthz node-1")
            && asked[1].ends_with("get nodes/proxy node-1"),
        "{asked:?}"
    );
    let resp = handle(&state, get("/healthz"), Some(&user("scraper"))).await;
    assert_eq!(
        (resp.status().as_u16(), body_text(resp).await),
        (
            403,
            "Forbidden (user=scraper, verb=get, resource=nodes, subresource(s)=[healthz proxy])\n"
                .into()
        )
    );
    let resp = handle(&state, get("/metrics"), Some(&user("prober"))).await;
    assert_eq!(
        body_text(resp).await,
        "Forbidden (user=prober, verb=get, resource=nodes, subresource(s)=[metrics])\n"
    );
}

#[tokio::test]
async fn bearer_tokens_are_reviewed_once_and_unknown_ones_are_unauthorized() {
    let dir = tempfile::tempdir().unwrap();
    let mut fake =
        FakeReviews::allowing(&[("system:serviceaccount:mon:scraper", "get", "metrics")]);
    fake.tokens.insert(
        "good-token".into(),
        User {
            name: "system:serviceaccount:mon:scraper".into(),
            uid: "u-1".into(),
            groups: vec!["system:serviceaccounts".into()],
            ..User::default()
        },
    );
    let reviews = Arc::new(fake);
    let state = state_asking(dir.path(), &reviews).await;
    let resp = handle(&state, get_with_token("/metrics", "good-token"), None).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(
        reviews.calls(),
        [
            "TokenReview good-token",
            r#"SubjectAccessReview system:serviceaccount:mon:scraper ["system:serviceaccounts", "system:authenticated"] get nodes/metrics node-1"#,
        ]
    );
    let resp = handle(&state, get_with_token("/metrics", "good-token"), None).await;
    assert_eq!(resp.status(), 200);
    assert!(reviews.calls().is_empty(), "token and decision cached");
    let resp = handle(&state, get_with_token("/metrics", "bad-token"), None).await;
    assert_eq!(
        (resp.status().as_u16(), body_text(resp).await),
        (401, "Unauthorized\n".into())
    );
    assert_eq!(reviews.calls(), ["TokenReview bad-token"]);
    let resp = handle(&state, get_with_token("/metrics", "bad-token"), None).await;
    assert_eq!(resp.status(), 401);
    assert!(
        reviews.calls().is_empty(),
        "the unknown token is cached too"
    );
    // a certificate wins over a token, as upstream's x509 authenticator comes first
    let resp = handle(
        &state,
        get_with_token("/metrics", "good-token"),
        Some(&user("bob")),
    )
    .await;
    assert_eq!(resp.status(), 403);
}

#[tokio::test(start_paused = true)]
async fn denials_are_kept_30_seconds_and_permissions_5_minutes() {
    let dir = tempfile::tempdir().unwrap();
    let reviews = Arc::new(FakeReviews::default());
    let state = state_asking(dir.path(), &reviews).await;
    let bob = user("bob");
    let status = |state, bob| async move {
        handle(state, get("/containerLogs/ns/gone/app"), Some(bob))
            .await
            .status()
            .as_u16()
    };
    assert_eq!(status(&state, &bob).await, 403);
    reviews.allow(("bob", "get", "proxy"));
    tokio::time::advance(Duration::from_secs(29)).await;
    assert_eq!(status(&state, &bob).await, 403, "the denial is still kept");
    tokio::time::advance(Duration::from_secs(2)).await;
    assert_eq!(status(&state, &bob).await, 404, "asked again: let in");
    reviews.allowed.lock().clear();
    tokio::time::advance(Duration::from_secs(299)).await;
    assert_eq!(
        status(&state, &bob).await,
        404,
        "the permission is still kept"
    );
    tokio::time::advance(Duration::from_secs(2)).await;
    assert_eq!(status(&state, &bob).await, 403);
    assert_eq!(reviews.calls().len(), 3);
}

#[tokio::test]
async fn an_api_server_that_cannot_answer_gets_500_and_nothing_is_kept() {
    let dir = tempfile::tempdir().unwrap();
    let reviews = Arc::new(FakeReviews::allowing(&[("alice", "get", "proxy")]));
    let state = state_asking(dir.path(), &reviews).await;
    reviews.fail(true);
    let resp = handle(
        &state,
        get("/containerLogs/ns/gone/app"),
        Some(&user("alice")),
    )
    .await;
    assert_eq!(
        (resp.status().as_u16(), body_text(resp).await),
        (
            500,
            "Authorization error (user=alice, verb=get, resource=nodes, subresource=proxy)\n"
                .into()
        )
    );
    let resp = handle(&state, get_with_token("/healthz", "any"), None).await;
    assert_eq!(
        resp.status(),
        401,
        "a failed token review is a failed authentication"
    );
    reviews.fail(false);
    reviews.calls();
    let resp = handle(
        &state,
        get("/containerLogs/ns/gone/app"),
        Some(&user("alice")),
    )
    .await;
    assert_eq!(resp.status(), 404);
    assert_eq!(reviews.calls().len(), 1, "asked again");
}

#[tokio::test]
async fn pods_lists_the_pods_of_this_node() {
    let dir = tempfile::tempdir().unwrap();
    let (state, ..) = state(dir.path()).await;
    let resp = handle(&state, get("/pods"), Some(&admin())).await;
    let list: serde_json::Value = serde_json::from_str(&body_text(resp).await).unwrap();
    assert_eq!(list["kind"], "PodList");
    assert_eq!(list["items"][0]["metadata"]["name"], "web");
}

#[tokio::test]
async fn container_logs_are_read_from_the_containers_log_file() {
    let dir = tempfile::tempdir().unwrap();
    let (state, ..) = state(dir.path()).await;
    let pod_dir = crate::pod_sync::pod_log_dir(dir.path(), &pod());
    std::fs::create_dir_all(pod_dir.join("app")).unwrap();
    std::fs::write(
        pod_dir.join("app/0.log"),
        "2024-01-01T00:00:00Z stdout F a\n2024-01-01T00:00:01Z stderr F b\n",
    )
    .unwrap();
    let resp = handle(
        &state,
        get("/containerLogs/ns/web/app?tailLines=1"),
        Some(&admin()),
    )
    .await;
    assert_eq!(resp.status(), 200);
    assert_eq!(body_text(resp).await, "b\n");
    let resp = handle(&state, get("/containerLogs/ns/web/nope"), Some(&admin())).await;
    assert_eq!(resp.status(), 404);
    assert_eq!(
        body_text(resp).await,
        "container \"nope\" not found in pod \"web\"\n"
    );
    let resp = handle(
        &state,
        get("/containerLogs/ns/web/app?previous=true"),
        Some(&admin()),
    )
    .await;
    assert_eq!(resp.status(), 400);
    let resp = handle(&state, get("/containerLogs/ns/gone/app"), Some(&admin())).await;
    assert_eq!(
        (resp.status().as_u16(), body_text(resp).await),
        (404, "pod \"gone\" does not exist\n".into())
    );
}

#[tokio::test]
async fn previous_logs_are_those_of_the_container_the_status_has_as_last_terminated() {
    let dir = tempfile::tempdir().unwrap();
    let (state, fake, first) = state(dir.path()).await;
    let mut pod = pod();
    let sandbox = sandbox_config(
        &pod,
        0,
        &crate::pod_sync::pod_log_dir(dir.path(), &pod),
        &[],
    );
    let sandbox_id = fake
        .list_pod_sandboxes(HashMap::new())
        .await
        .unwrap()
        .remove(0)
        .id;
    let container = pod.spec.as_ref().unwrap().containers[0].clone();
    let config = container_config(
        &pod,
        &container,
        "busybox",
        1,
        vec![],
        vec![],
        Default::default(),
    );
    fake.exit_container(&first, 1);
    let second = fake
        .create_container(&sandbox_id, config, sandbox)
        .await
        .unwrap();
    fake.start_container(&second).await.unwrap();
    let pod_dir = crate::pod_sync::pod_log_dir(dir.path(), &pod);
    std::fs::create_dir_all(pod_dir.join("app")).unwrap();
    std::fs::write(
        pod_dir.join("app/0.log"),
        "2024-01-01T00:00:00Z stdout F first\n",
    )
    .unwrap();
    std::fs::write(
        pod_dir.join("app/1.log"),
        "2024-01-01T00:00:01Z stdout F second\n",
    )
    .unwrap();
    let previous = || async {
        let resp = handle(
            &state,
            get("/containerLogs/ns/web/app?previous=true"),
            Some(&admin()),
        )
        .await;
        (resp.status().as_u16(), body_text(resp).await)
    };
    assert_eq!(
        previous().await,
        (
            400,
            "previous terminated container \"app\" in pod \"web\" not found\n".into()
        ),
        "no lastState in the status yet"
    );
    pod.status = serde_json::from_value(json!({"containerStatuses": [{
        "name": "app", "image": "busybox", "imageID": "", "ready": true, "restartCount": 1,
        "lastState": {"terminated": {"exitCode": 1, "containerID": format!("containerd://{first}")}},
    }]}))
    .unwrap();
    state.pods.upsert(&Arc::new(pod));
    assert_eq!(previous().await, (200, "first\n".into()));
}

/// A streaming server that switches to any protocol asked for and echoes what it receives.
async fn echo_streaming_server() -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let (tcp, _) = listener.accept().await.unwrap();
        let service = hyper::service::service_fn(|mut req: Request<hyper::body::Incoming>| {
            let upgrade = hyper::upgrade::on(&mut req);
            tokio::spawn(async move {
                let mut io = TokioIo::new(upgrade.await.unwrap());
                let mut buf = [0u8; 4];
                io.read_exact(&mut buf).await.unwrap();
                io.write_all(&buf).await.unwrap();
            });
            let protocol = req.headers()["upgrade"].clone();
            async move {
                let resp = http::Response::builder()
                    .status(101)
                    .header("connection", "Upgrade")
                    .header("upgrade", protocol)
                    .body(http_body_util::Empty::<bytes::Bytes>::new())
                    .unwrap();
                Ok::<_, std::convert::Infallible>(resp)
            }
        });
        hyper::server::conn::http1::Builder::new()
            .serve_connection(TokioIo::new(tcp), service)
            .with_upgrades()
            .await
            .unwrap();
    });
    addr
}

#[tokio::test]
async fn exec_asks_the_runtime_for_a_url_and_joins_the_upgraded_streams() {
    let dir = tempfile::tempdir().unwrap();
    let (state, fake, id) = state(dir.path()).await;
    let backend = echo_streaming_server().await;
    fake.set_streaming_base(&format!("http://{backend}"));
    // the kubelet server, without TLS, on its own port
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let state = Arc::new(state);
    tokio::spawn(async move {
        let (tcp, _) = listener.accept().await.unwrap();
        let service = hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
            let state = state.clone();
            async move {
                let (parts, _) = req.into_parts();
                Ok::<_, std::convert::Infallible>(handle(&state, parts, Some(&admin())).await)
            }
        });
        hyper::server::conn::http1::Builder::new()
            .serve_connection(TokioIo::new(tcp), service)
            .with_upgrades()
            .await
            .unwrap();
    });
    let mut client = tokio::net::TcpStream::connect(addr).await.unwrap();
    client
        .write_all(
            b"POST /exec/ns/web/app?command=sh&command=-c&command=true&input=1&output=1 HTTP/1.1\r\n\
              Host: kubelet\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n\
              X-Stream-Protocol-Version: v4.channel.k8s.io\r\n\r\n",
        )
        .await
        .unwrap();
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        head.push(client.read_u8().await.unwrap());
    }
    let head = String::from_utf8(head).unwrap();
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    client.write_all(b"ping").await.unwrap();
    let mut echoed = [0u8; 4];
    client.read_exact(&mut echoed).await.unwrap();
    assert_eq!(&echoed, b"ping");
    assert!(
        fake.calls()
            .contains(&format!("Exec {id} sh -c true [stdin stdout]")),
        "{:?}",
        fake.calls()
    );
}

#[tokio::test]
async fn the_fake_records_attach_and_port_forward_and_refuses_stopped_containers() {
    let dir = tempfile::tempdir().unwrap();
    let (state, fake, id) = state(dir.path()).await;
    let resp = handle(
        &state,
        get("/attach/ns/web/app?output=1&tty=1"),
        Some(&admin()),
    )
    .await;
    // no streaming server behind the fake's default URL
    assert_eq!(resp.status(), 502);
    let resp = handle(&state, get("/portForward/ns/web?port=8080"), Some(&admin())).await;
    assert_eq!(resp.status(), 502);
    let calls = fake.calls();
    assert!(
        calls.contains(&format!("Attach {id} [tty stdout]")),
        "{calls:?}"
    );
    assert!(
        calls
            .iter()
            .any(|c| c.starts_with("PortForward sandbox-") && c.ends_with(" 8080")),
        "{calls:?}"
    );
    fake.exit_container(&id, 0);
    let resp = handle(
        &state,
        get("/exec/ns/web/app?command=ls&output=1"),
        Some(&admin()),
    )
    .await;
    assert_eq!(
        (resp.status().as_u16(), body_text(resp).await),
        (500, "container not found (\"app\")\n".into())
    );
}

/// A CA and a client certificate it signed for `common_name` in `organization`, as (CA DER,
/// client cert PEM, client key PEM).
fn client_certificate(common_name: &str, organization: &str) -> (Vec<u8>, String, String) {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca = rcgen::CertificateParams::default();
    ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca_cert = ca.self_signed(&ca_key).unwrap();
    let issuer = rcgen::Issuer::new(ca, ca_key);
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::default();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, common_name);
    params
        .distinguished_name
        .push(rcgen::DnType::OrganizationName, organization);
    params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
    let cert = params.signed_by(&key, &issuer).unwrap();
    (ca_cert.der().to_vec(), cert.pem(), key.serialize_pem())
}

/// `GET /healthz` over TLS (trusting the kubelet's self-signed certificate), with a client
/// certificate when given; the status line, or the error if the exchange failed.
async fn healthz_over_tls(
    addr: std::net::SocketAddr,
    serving_cert: &str,
    client: Option<(&str, &str)>,
) -> Result<String, std::io::Error> {
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::{CertificateDer, PrivateKeyDer};
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(serving_cert.as_bytes()).unwrap())
        .unwrap();
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots);
    let config = match client {
        Some((cert, key)) => builder
            .with_client_auth_cert(
                vec![CertificateDer::from_pem_slice(cert.as_bytes()).unwrap()],
                PrivateKeyDer::from_pem_slice(key.as_bytes()).unwrap(),
            )
            .unwrap(),
        None => builder.with_no_client_auth(),
    };
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let tcp = tokio::net::TcpStream::connect(addr).await?;
    let name = rustls_pki_types::ServerName::try_from("127.0.0.1").unwrap();
    let mut tls = connector.connect(name, tcp).await?;
    tls.write_all(b"GET /healthz HTTP/1.1\r\nHost: kubelet\r\nConnection: close\r\n\r\n")
        .await?;
    let mut answer = String::new();
    tls.read_to_string(&mut answer).await?;
    Ok(answer.lines().next().unwrap_or_default().to_string())
}

#[tokio::test]
async fn over_tls_certificates_the_cluster_ca_signed_name_the_user_and_its_groups() {
    let dir = tempfile::tempdir().unwrap();
    let reviews = Arc::new(FakeReviews::allowing(&[(&admin().name, "*", "*")]));
    let state = state_asking(dir.path(), &reviews).await;
    let (ca, cert, key) = client_certificate("kube-apiserver-kubelet-client", "system:masters");
    let (_, stranger_cert, stranger_key) = client_certificate("stranger", "system:masters");
    let (serving_cert, serving_key) = super::tls::ensure_serving_certificate(
        &dir.path().join("pki"),
        "node-1",
        &["127.0.0.1".parse().unwrap()],
    )
    .unwrap();
    let tls = super::tls::server_config(&serving_cert, &serving_key, &[ca]).unwrap();
    let server = super::KubeletServer::bind("127.0.0.1:0".parse().unwrap(), tls, state)
        .await
        .unwrap();
    let addr = server.local_addr();
    tokio::spawn(server.serve());

    let anonymous = healthz_over_tls(addr, &serving_cert, None).await.unwrap();
    assert_eq!(anonymous, "HTTP/1.1 401 Unauthorized");
    let signed = healthz_over_tls(addr, &serving_cert, Some((&cert, &key)))
        .await
        .unwrap();
    assert_eq!(signed, "HTTP/1.1 200 OK");
    assert_eq!(
        reviews.calls(),
        [
            r#"SubjectAccessReview kube-apiserver-kubelet-client ["system:masters", "system:authenticated"] get nodes/healthz node-1"#
        ]
    );
    let stranger =
        healthz_over_tls(addr, &serving_cert, Some((&stranger_cert, &stranger_key))).await;
    assert!(
        !stranger.as_deref().is_ok_and(|l| l.contains("200")),
        "{stranger:?}"
    );
    assert!(reviews.calls().is_empty(), "the stranger never got as far");
}

#[tokio::test]
async fn the_summary_and_resource_metrics_come_from_the_stats_provider() {
    let dir = tempfile::tempdir().unwrap();
    let (mut state, ..) = state(dir.path()).await;
    let provider = Arc::new(FixedSummary::default());
    *provider.summary.lock() = Some(node_summary());
    state.stats = provider.clone();
    let resp = handle(&state, get("/stats/summary"), Some(&admin())).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["content-type"], "application/json");
    let body: Summary = serde_json::from_str(&body_text(resp).await).unwrap();
    assert_eq!(body, node_summary());
    let resp = handle(
        &state,
        get("/stats/summary?only_cpu_and_memory=true"),
        Some(&admin()),
    )
    .await;
    assert_eq!(resp.status(), 200);
    let resp = handle(&state, get("/metrics/resource"), Some(&admin())).await;
    let text = body_text(resp).await;
    assert!(
        text.contains("\nnode_cpu_usage_seconds_total 2 1796378400000\n"),
        "{text}"
    );
    assert!(text.ends_with("resource_scrape_error 0\n"), "{text}");
    // resource metrics need CPU and memory only; cAdvisor's the whole summary
    let resp = handle(&state, get("/metrics/cadvisor"), Some(&admin())).await;
    assert_eq!(resp.status(), 200);
    let text = body_text(resp).await;
    assert!(
        text.contains("# TYPE container_cpu_usage_seconds_total counter\n"),
        "{text}"
    );
    assert_eq!(*provider.calls.lock(), [false, true, true, false]);

    // the runtime down: 500 for the summary, the scrape error for the metrics
    *provider.summary.lock() = None;
    let resp = handle(&state, get("/stats/summary"), Some(&admin())).await;
    assert_eq!(resp.status(), 500);
    let text = body_text(resp).await;
    assert!(
        text.starts_with("Internal Error: failed to list pod stats: cri ListContainerStats: ")
            && text.contains("connection refused"),
        "{text}"
    );
    let resp = handle(&state, get("/metrics/resource"), Some(&admin())).await;
    assert_eq!(resp.status(), 200);
    assert!(body_text(resp).await.ends_with("resource_scrape_error 1\n"));
    let resp = handle(&state, get("/metrics/cadvisor"), Some(&admin())).await;
    assert_eq!(resp.status(), 500);
}

#[tokio::test]
async fn stats_need_nodes_stats_and_resource_metrics_need_nodes_metrics() {
    let dir = tempfile::tempdir().unwrap();
    let reviews = Arc::new(FakeReviews::allowing(&[("scraper", "get", "metrics")]));
    let state = state_asking(dir.path(), &reviews).await;
    let resp = handle(&state, get("/metrics/resource"), Some(&user("scraper"))).await;
    assert_eq!(resp.status(), 200);
    let resp = handle(&state, get("/stats/summary"), Some(&user("scraper"))).await;
    assert_eq!(
        (resp.status().as_u16(), body_text(resp).await),
        (
            403,
            "Forbidden (user=scraper, verb=get, resource=nodes, subresource(s)=[stats])\n"
                .to_string()
        )
    );
}
