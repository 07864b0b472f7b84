//! `skiff metrics-server`: metrics-server's role (k3s ships metrics-server), an ordinary API
//! client (seed 001): it watches Nodes and Pods, scrapes every node's kubelet
//! `/metrics/resource` every `--metric-resolution` with its own client certificate (the
//! kubelet authorizes `nodes/metrics` through the API server), and serves
//! `metrics.k8s.io/v1beta1` over HTTPS to the API server's aggregator, which reaches it through
//! the `v1beta1.metrics.k8s.io` APIService. As an aggregated API server it trusts the users the
//! front proxy names (its client certificate, from the CA in
//! `kube-system/extension-apiserver-authentication`, and the `X-Remote-*` headers) and asks the
//! API server whether they may (SubjectAccessReview), as metrics-server's delegated
//! authentication and authorization do. Its serving certificate is self-signed, as
//! metrics-server's without `--tls-cert-file`.

use std::collections::{BTreeMap, HashMap};
use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use base64::Engine as _;
use bytes::Bytes;
use clap::Args;
use futures::StreamExt as _;
use http::{HeaderMap, Response, StatusCode, header};
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::rt::{TokioExecutor, TokioIo};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod};
use kube::Api;
use kube::api::PostParams;
use kube::core::PartialObjectMeta;
use kube::runtime::watcher;
use parking_lot::Mutex;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use serde_json::{Value, json};
use skiff_apimachinery::proxy;
use skiff_apimachinery::version::user_agent;
use skiff_apiserver::kubelet_client::{KubeletClient, authority, node_endpoint};
use skiff_kubelet::server::auth::certificate_user;
use skiff_metrics::api::{self, Request};
use skiff_metrics::scrape;
use skiff_metrics::storage::Storage;
use skiff_runtime::informer::{Cached, Informer, Informers};
use tokio_rustls::{TlsAcceptor, rustls};

use super::kubelet::go_duration;
use super::lifecycle::Lifecycle;

#[derive(Debug, Args)]
pub struct MetricsServerArgs {
    /// Kubeconfig with the API server's address and the metrics server's credentials (a client
    /// certificate, also presented to kubelets).
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: PathBuf,

    /// The address the HTTPS port listens on.
    #[arg(long, value_name = "IP", default_value = "0.0.0.0")]
    pub bind_address: IpAddr,

    /// The HTTPS port (0 picks a free one, printed in the ready line).
    #[arg(long, value_name = "PORT", default_value_t = 10251)]
    pub secure_port: u16,

    /// How often every kubelet is scraped (metrics-server's flag; CPU rates are taken over
    /// this window).
    #[arg(long, value_name = "DURATION", default_value = "15s", value_parser = go_duration)]
    pub metric_resolution: Duration,
}

/// Kubelets scraped at once.
const SCRAPES_AT_ONCE: usize = 64;
/// The longest resource metrics answer read from a kubelet.
const MAX_SCRAPE_BYTES: usize = 64 << 20;
/// How long an authorization answer is kept (metrics-server's delegated authorizer: 10 s).
const AUTHORIZED_TTL: Duration = Duration::from_secs(10);

pub async fn run(args: MetricsServerArgs, lifecycle: Lifecycle) -> anyhow::Result<()> {
    let config = super::kube_config(&args.kubeconfig).await?;
    let kubelet = kubelet_client(&args.kubeconfig)?;
    let client = skiff_runtime::http2::client(config, &user_agent("skiff-metrics-server"))?;
    // held until this returns: dropping the factory ends the watches
    let informers = Informers::new(client.clone());
    // of the nodes, the scrape needs their kubelets' addresses and the answers their labels; of
    // the pods, the answers need their names and labels: only these are kept, each object
    // dropped as it arrives (pods' metadata alone is listed and watched, as upstream's)
    let nodes = informers.transformed(watcher::Config::default(), CachedNode::of);
    let pods = informers.transformed(watcher::Config::default(), CachedPod::of);
    let trust = tokio::select! {
        trust = FrontProxy::read(&client) => trust?,
        () = lifecycle.stopped() => return Ok(()),
    };
    tokio::select! {
        () = async { nodes.cache().wait_until_ready().await; pods.cache().wait_until_ready().await } => {}
        () = lifecycle.stopped() => return Ok(()),
    }
    let acceptor = TlsAcceptor::from(Arc::new(server_tls(&trust.ca_pem)?));
    let addr = SocketAddr::new(args.bind_address, args.secure_port);
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("binding {addr}"))?;
    let bound = listener.local_addr()?;
    let storage = Arc::new(Storage::default());
    let state = Arc::new(State {
        client,
        nodes: nodes.clone(),
        pods,
        storage: storage.clone(),
        trust,
        authorized: Mutex::default(),
    });
    lifecycle.ready(format!(
        "skiff metrics-server ready: https {bound}, resolution {:?}",
        args.metric_resolution
    ));
    tokio::select! {
        () = scrape_forever(nodes, kubelet, storage, args.metric_resolution) => anyhow::bail!("the scraper stopped"),
        () = serve(listener, acceptor, state) => anyhow::bail!("the HTTPS listener stopped"),
        () = lifecycle.stopped() => Ok(()),
    }
}

/// What the metrics server keeps of a node.
#[derive(Debug)]
struct CachedNode {
    name: String,
    labels: BTreeMap<String, String>,
    /// Where its kubelet listens, if the node says.
    kubelet: Option<(String, u16)>,
}

impl CachedNode {
    fn of(node: Node) -> CachedNode {
        let status = node.status.unwrap_or_default();
        let endpoints = json!({"status": {"addresses": status.addresses,
                                          "daemonEndpoints": status.daemon_endpoints}});
        CachedNode {
            name: node.metadata.name.unwrap_or_default(),
            labels: node.metadata.labels.unwrap_or_default(),
            kubelet: node_endpoint(&endpoints),
        }
    }
}

impl Cached for CachedNode {
    fn cache_key(&self) -> (Option<&str>, &str) {
        (None, &self.name)
    }

    fn cache_version(&self) -> Option<&str> {
        None
    }
}

/// What the metrics server keeps of a pod (of its metadata).
#[derive(Debug)]
struct CachedPod {
    namespace: String,
    name: String,
    labels: BTreeMap<String, String>,
}

impl CachedPod {
    fn of(pod: PartialObjectMeta<Pod>) -> CachedPod {
        CachedPod {
            namespace: pod.metadata.namespace.unwrap_or_default(),
            name: pod.metadata.name.unwrap_or_default(),
            labels: pod.metadata.labels.unwrap_or_default(),
        }
    }
}

impl Cached for CachedPod {
    fn cache_key(&self) -> (Option<&str>, &str) {
        (Some(&self.namespace), &self.name)
    }

    fn cache_version(&self) -> Option<&str> {
        None
    }
}

/// The kubelet client presenting the kubeconfig's client certificate.
fn kubelet_client(kubeconfig: &std::path::Path) -> anyhow::Result<KubeletClient> {
    let text = std::fs::read_to_string(kubeconfig)
        .with_context(|| format!("reading {}", kubeconfig.display()))?;
    let parsed = kube::config::Kubeconfig::from_yaml(&text).context("parsing the kubeconfig")?;
    let auth = parsed
        .auth_infos
        .first()
        .and_then(|a| a.auth_info.clone())
        .context("the kubeconfig has no user")?;
    let decode = |data: Option<String>, what: &str| -> anyhow::Result<String> {
        let data = data.with_context(|| format!("the kubeconfig's user has no {what}"))?;
        let pem = base64::engine::general_purpose::STANDARD.decode(data.trim())?;
        Ok(String::from_utf8(pem)?)
    };
    let cert = decode(auth.client_certificate_data, "client-certificate-data")?;
    let key = decode(
        auth.client_key_data
            .map(|k| secrecy::ExposeSecret::expose_secret(&k).to_string()),
        "client-key-data",
    )?;
    Ok(KubeletClient::new(&cert, &key)?)
}

/// Scrapes every node's kubelet every `resolution`, forgetting nodes that are gone.
async fn scrape_forever(
    nodes: Informer<CachedNode>,
    kubelet: KubeletClient,
    storage: Arc<Storage>,
    resolution: Duration,
) {
    let mut tick = tokio::time::interval(resolution);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let current = nodes.cache().state();
        futures::stream::iter(current.iter())
            .for_each_concurrent(SCRAPES_AT_ONCE, |node| {
                let (kubelet, storage) = (&kubelet, &storage);
                async move {
                    let name = &node.name;
                    match tokio::time::timeout(resolution, scrape_node(kubelet, node)).await {
                        Ok(Ok(batch)) => storage.store(name, batch),
                        Ok(Err(e)) => {
                            tracing::warn!(node = %name, error = %e, "scraping the kubelet")
                        }
                        Err(_) => tracing::warn!(node = %name, "scraping the kubelet timed out"),
                    }
                }
            })
            .await;
        let names: std::collections::HashSet<&str> =
            current.iter().map(|n| n.name.as_str()).collect();
        storage.retain(|n| names.contains(n));
    }
}

/// One kubelet's `/metrics/resource`, read.
async fn scrape_node(kubelet: &KubeletClient, node: &CachedNode) -> anyhow::Result<scrape::Batch> {
    let (host, port) = node
        .kubelet
        .as_ref()
        .context("the node reports no address for its kubelet")?;
    let tls = kubelet.connect(host, *port).await?;
    let addr = authority(host, *port);
    let mut headers = HeaderMap::new();
    headers.insert(header::HOST, addr.parse()?);
    let request = proxy::bodiless(http::Method::GET, "/metrics/resource", headers, None);
    let response = proxy::forward(tls, &addr, request).await?;
    let status = response.status();
    let body = Limited::new(response.into_body(), MAX_SCRAPE_BYTES)
        .collect()
        .await
        .map_err(|e| anyhow::anyhow!("reading the answer: {e}"))?
        .to_bytes();
    let text = String::from_utf8_lossy(&body);
    anyhow::ensure!(status.is_success(), "{status}: {}", text.trim());
    Ok(scrape::parse(&text, jiff::Timestamp::now())?)
}

/// Whom the front proxy's certificates come from, as the API server publishes it.
struct FrontProxy {
    ca_pem: String,
    /// Common names a front proxy certificate may have (any, when empty).
    allowed_names: Vec<String>,
    user_headers: Vec<String>,
    group_headers: Vec<String>,
}

impl FrontProxy {
    /// Reads `kube-system/extension-apiserver-authentication`, waiting until it exists.
    async fn read(client: &kube::Client) -> anyhow::Result<FrontProxy> {
        let api: Api<ConfigMap> = Api::namespaced(client.clone(), "kube-system");
        loop {
            match api.get_opt("extension-apiserver-authentication").await {
                Ok(Some(cm)) => {
                    let data = cm.data.unwrap_or_default();
                    let list = |key: &str| -> Vec<String> {
                        data.get(key)
                            .and_then(|v| serde_json::from_str(v).ok())
                            .unwrap_or_default()
                    };
                    let ca_pem = data.get("requestheader-client-ca-file").cloned().context(
                        "extension-apiserver-authentication has no requestheader-client-ca-file",
                    )?;
                    return Ok(FrontProxy {
                        ca_pem,
                        allowed_names: list("requestheader-allowed-names"),
                        user_headers: list("requestheader-username-headers"),
                        group_headers: list("requestheader-group-headers"),
                    });
                }
                Ok(None) => {}
                Err(e) => tracing::warn!(error = %e, "reading extension-apiserver-authentication"),
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }

    /// The user and groups the front proxy names, if the certificate is one of its.
    fn user(
        &self,
        common_name: Option<&str>,
        headers: &HeaderMap,
    ) -> Option<(String, Vec<String>)> {
        let cn = common_name?;
        if !self.allowed_names.is_empty() && !self.allowed_names.iter().any(|n| n == cn) {
            return None;
        }
        let values = |names: &[String]| -> Vec<String> {
            names
                .iter()
                .flat_map(|n| headers.get_all(n.as_str()))
                .filter_map(|v| v.to_str().ok().map(str::to_string))
                .collect()
        };
        let user = values(&self.user_headers).into_iter().next()?;
        Some((user, values(&self.group_headers)))
    }
}

/// The serving TLS: a self-signed certificate, client certificates of the front proxy CA
/// verified when given.
fn server_tls(front_proxy_ca: &str) -> anyhow::Result<rustls::ServerConfig> {
    let key = rcgen::KeyPair::generate()?;
    let mut params = rcgen::CertificateParams::new(vec![
        "metrics-server.kube-system.svc".to_string(),
        "localhost".to_string(),
    ])?;
    params.distinguished_name = rcgen::DistinguishedName::new();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "metrics-server@skiff");
    let cert = params.self_signed(&key)?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    for ca in CertificateDer::pem_slice_iter(front_proxy_ca.as_bytes()) {
        roots.add(ca.context("the front proxy CA")?)?;
    }
    let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
        Arc::new(roots),
        provider.clone(),
    )
    .allow_unauthenticated()
    .build()?;
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_client_cert_verifier(verifier)
        .with_single_cert(
            vec![cert.der().clone()],
            PrivateKeyDer::from_pem_slice(key.serialize_pem().as_bytes())?,
        )?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}

/// What the handlers read.
struct State {
    client: kube::Client,
    nodes: Informer<CachedNode>,
    pods: Informer<CachedPod>,
    storage: Arc<Storage>,
    trust: FrontProxy,
    /// Authorization answers by (user, groups, verb, resource, namespace, name), with when.
    authorized: Mutex<HashMap<String, (bool, Instant)>>,
}

async fn serve(listener: tokio::net::TcpListener, acceptor: TlsAcceptor, state: Arc<State>) {
    loop {
        let (tcp, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                tracing::warn!(error = %e, "accepting a connection");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let (acceptor, state) = (acceptor.clone(), state.clone());
        tokio::spawn(async move {
            let tls = match acceptor.accept(tcp).await {
                Ok(tls) => tls,
                Err(e) => {
                    tracing::debug!(%peer, error = %e, "TLS handshake failed");
                    return;
                }
            };
            let common_name = tls
                .get_ref()
                .1
                .peer_certificates()
                .and_then(|chain| chain.first())
                .and_then(|leaf| certificate_user(leaf))
                .map(|user| user.name);
            let common_name = Arc::new(common_name);
            let service = hyper::service::service_fn(move |req: http::Request<_>| {
                let (state, common_name) = (state.clone(), common_name.clone());
                async move { Ok::<_, Infallible>(handle(&state, req, common_name.as_deref()).await) }
            });
            let builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
            if let Err(e) = builder.serve_connection(TokioIo::new(tls), service).await {
                tracing::debug!(%peer, error = %e, "connection ended");
            }
        });
    }
}

fn json_response(code: u16, body: &Value) -> Response<Full<Bytes>> {
    json_bytes_response(code, body.to_string().into_bytes())
}

fn json_bytes_response(code: u16, body: Vec<u8>) -> Response<Full<Bytes>> {
    let mut resp = Response::new(Full::new(Bytes::from(body)));
    *resp.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    resp
}

async fn handle<B>(
    state: &State,
    req: http::Request<B>,
    common_name: Option<&str>,
) -> Response<Full<Bytes>> {
    let path = req.uri().path().to_string();
    if matches!(path.as_str(), "/healthz" | "/readyz" | "/livez") {
        return Response::new(Full::new(Bytes::from_static(b"ok")));
    }
    let Some((user, groups)) = state.trust.user(common_name, req.headers()) else {
        return json_response(401, &api::status(401, "Unauthorized", "Unauthorized"));
    };
    let Some(request) = Request::parse(&path) else {
        return json_response(
            404,
            &api::status(
                404,
                "NotFound",
                "the server could not find the requested resource",
            ),
        );
    };
    if req.method() != http::Method::GET {
        return json_response(
            405,
            &api::status(
                405,
                "MethodNotAllowed",
                "the server does not allow this method on the requested resource",
            ),
        );
    }
    if let Some((verb, resource, namespace, name)) = request.attributes() {
        match authorize(state, &user, &groups, (verb, resource, namespace, name)).await {
            Ok(true) => {}
            Ok(false) => {
                let scope = match namespace {
                    Some(ns) => format!("in the namespace \"{ns}\""),
                    None => "at the cluster scope".to_string(),
                };
                let message = format!(
                    "{resource}.metrics.k8s.io{} is forbidden: User \"{user}\" cannot {verb} resource \"{resource}\" in API group \"metrics.k8s.io\" {scope}",
                    name.map(|n| format!(" \"{n}\"")).unwrap_or_default()
                );
                return json_response(403, &api::status(403, "Forbidden", &message));
            }
            Err(e) => {
                return json_response(
                    500,
                    &api::status(500, "InternalError", &format!("authorizing: {e}")),
                );
            }
        }
    }
    let selector = req.uri().query().and_then(|q| {
        form_urlencoded::parse(q.as_bytes())
            .find(|(k, _)| k == "labelSelector")
            .map(|(_, v)| v.into_owned())
    });
    // only what the request is about: one kind, one namespace
    let (mut cached_nodes, mut cached_pods) = (Vec::new(), Vec::new());
    match &request {
        Request::Nodes { .. } => cached_nodes = state.nodes.cache().state(),
        Request::Pods { namespace, .. } => {
            let cache = state.pods.cache();
            cached_pods = match namespace {
                Some(ns) => cache.namespaced(ns),
                None => cache.state(),
            };
        }
        Request::Resources => {}
    }
    let nodes: Vec<_> = cached_nodes
        .iter()
        .map(|n| (n.name.as_str(), &n.labels))
        .collect();
    let pods: Vec<_> = cached_pods
        .iter()
        .map(|p| (p.namespace.as_str(), p.name.as_str(), &p.labels))
        .collect();
    let (code, body) = api::answer(
        &request,
        selector.as_deref(),
        &nodes,
        &pods,
        &state.storage,
        jiff::Timestamp::now(),
    );
    json_bytes_response(code, body)
}

/// Whether the API server lets `user` do this (SubjectAccessReview), answers kept a while.
async fn authorize(
    state: &State,
    user: &str,
    groups: &[String],
    (verb, resource, namespace, name): (&str, &str, Option<&str>, Option<&str>),
) -> kube::Result<bool> {
    let key = format!("{user}|{groups:?}|{verb}|{resource}|{namespace:?}|{name:?}");
    if let Some((allowed, at)) = state.authorized.lock().get(&key)
        && at.elapsed() < AUTHORIZED_TTL
    {
        return Ok(*allowed);
    }
    let review = SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: Some(user.to_string()),
            groups: Some(groups.to_vec()),
            resource_attributes: Some(ResourceAttributes {
                group: Some("metrics.k8s.io".into()),
                version: Some("v1beta1".into()),
                resource: Some(resource.into()),
                verb: Some(verb.into()),
                namespace: namespace.map(str::to_string),
                name: name.map(str::to_string),
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    };
    let answer = Api::<SubjectAccessReview>::all(state.client.clone())
        .create(&PostParams::default(), &review)
        .await?;
    let allowed = answer.status.is_some_and(|s| s.allowed);
    let mut cache = state.authorized.lock();
    cache.retain(|_, (_, at)| at.elapsed() < AUTHORIZED_TTL);
    cache.insert(key, (allowed, Instant::now()));
    Ok(allowed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_front_proxys_certificate_names_a_user() {
        let trust = FrontProxy {
            ca_pem: String::new(),
            allowed_names: vec!["front-proxy-client".into()],
            user_headers: vec!["X-Remote-User".into()],
            group_headers: vec!["X-Remote-Group".into()],
        };
        let mut headers = HeaderMap::new();
        headers.insert("x-remote-user", "alice".parse().unwrap());
        headers.append("x-remote-group", "devs".parse().unwrap());
        headers.append("x-remote-group", "system:authenticated".parse().unwrap());
        assert_eq!(
            trust.user(Some("front-proxy-client"), &headers),
            Some((
                "alice".to_string(),
                vec!["devs".to_string(), "system:authenticated".to_string()]
            ))
        );
        // another certificate of that CA, or none: the headers are not believed
        assert_eq!(trust.user(Some("mallory"), &headers), None);
        assert_eq!(trust.user(None, &headers), None);
        // the proxy's certificate without a user header names nobody
        assert_eq!(
            trust.user(Some("front-proxy-client"), &HeaderMap::new()),
            None
        );
    }
}
