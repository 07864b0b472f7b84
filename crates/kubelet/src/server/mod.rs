//! The kubelet's HTTPS server (upstream's `pkg/kubelet/server`, port 10250): `/healthz`,
//! `/pods`, `/metrics`, `/containerLogs/{ns}/{pod}/{container}`, and the streaming endpoints
//! `/exec`, `/attach`, `/portForward` proxied to the runtime. Clients authenticate with a
//! certificate signed by the cluster CA (the API server's `apiserver-kubelet-client`) or a
//! bearer token the API server vouches for, and every request is authorized by a
//! SubjectAccessReview for `nodes/proxy` (or `nodes/log`, `nodes/metrics`, …) of this node:
//! 401 and 403 otherwise, as upstream's kubelet in Webhook mode.
//!
//! # Layout
//! - [`tls`]: the self-signed serving certificate and client verification.
//! - [`auth`]: who the client is and whether it may: the request's attributes, cached answers.
//! - [`reviews`]: TokenReview and SubjectAccessReview through the API server, behind a trait.
//! - [`pods`]: the pods this kubelet runs and their containers, as the endpoints look them up.
//! - [`logs`]: CRI log files read, selected and followed.
//! - [`streaming`]: exec, attach and port-forward through the runtime's streaming server.

pub mod auth;
pub mod logs;
pub mod pods;
pub mod reviews;
pub mod streaming;
pub mod tls;

#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use bytes::Bytes;
use http::request::Parts;
use http::{HeaderValue, Method, Response, StatusCode, header};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::Frame;
use hyper_util::rt::{TokioExecutor, TokioIo};
use k8s_openapi::api::core::v1::Pod;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

use crate::cri::{ContainerRuntime, ContainerState, PodSandboxState};
use crate::stats::SummaryProvider;
use auth::Auth;
use pods::PodRegistry;
use reviews::User;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("binding the kubelet server to {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Tls(#[from] tls::Error),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Response bodies: whole, or streamed (followed logs, proxied streams).
pub type Body = BoxBody<Bytes, Infallible>;

/// What the endpoints read.
pub struct ServerState {
    pub runtime: Arc<dyn ContainerRuntime>,
    pub pods: PodRegistry,
    /// The pods' log directories are under here (`<ns>_<name>_<uid>`).
    pub log_dir: PathBuf,
    /// The current time (injected so tests can fix it).
    pub clock: fn() -> jiff::Timestamp,
    /// Who may do what, asked of the API server.
    pub auth: Auth,
    /// The node's and pods' usage (`/stats/summary`, `/metrics/resource`).
    pub stats: Arc<dyn SummaryProvider>,
}

/// A bound, not yet serving, kubelet server: its address is known (port 0) before
/// [`KubeletServer::serve`].
pub struct KubeletServer {
    listener: TcpListener,
    acceptor: TlsAcceptor,
    state: Arc<ServerState>,
}

impl KubeletServer {
    pub async fn bind(
        addr: SocketAddr,
        tls: rustls::ServerConfig,
        state: ServerState,
    ) -> Result<KubeletServer> {
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|source| Error::Bind { addr, source })?;
        Ok(KubeletServer {
            listener,
            acceptor: TlsAcceptor::from(Arc::new(tls)),
            state: Arc::new(state),
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.listener.local_addr().expect("a bound listener")
    }

    /// Serves until dropped (the task running it is aborted).
    pub async fn serve(self) {
        loop {
            let (tcp, peer) = match self.listener.accept().await {
                Ok(a) => a,
                Err(e) => {
                    tracing::warn!(error = %e, "kubelet server accept failed");
                    continue;
                }
            };
            let acceptor = self.acceptor.clone();
            let state = self.state.clone();
            tokio::spawn(async move {
                let tls = match acceptor.accept(tcp).await {
                    Ok(t) => t,
                    Err(e) => {
                        tracing::debug!(%peer, error = %e, "kubelet server tls handshake failed");
                        return;
                    }
                };
                // the handshake verified the chain: the certificate names the user
                let user = tls
                    .get_ref()
                    .1
                    .peer_certificates()
                    .and_then(|chain| chain.first())
                    .and_then(|leaf| auth::certificate_user(leaf));
                let user = Arc::new(user);
                let service = hyper::service::service_fn(move |req: http::Request<_>| {
                    let state = state.clone();
                    let user = user.clone();
                    async move {
                        let (parts, _body) = req.into_parts();
                        Ok::<_, Infallible>(handle(&state, parts, user.as_ref().as_ref()).await)
                    }
                });
                let builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
                let conn = builder.serve_connection_with_upgrades(TokioIo::new(tls), service);
                if let Err(e) = conn.await {
                    tracing::debug!(%peer, error = %e, "kubelet server connection ended");
                }
            });
        }
    }
}

pub fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into()).boxed()
}

fn response(code: u16, body: Body, content_type: &'static str) -> Response<Body> {
    let mut resp = Response::new(body);
    *resp.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    resp.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    resp
}

/// A plain-text answer (upstream's kubelet answers errors as text).
pub fn text(code: u16, message: &str) -> Response<Body> {
    response(
        code,
        full(format!("{message}\n")),
        "text/plain; charset=utf-8",
    )
}

/// One request. `certificate`: the user of the client's certificate (the cluster CA signed it),
/// if it presented one.
pub async fn handle(
    state: &ServerState,
    parts: Parts,
    certificate: Option<&User>,
) -> Response<Body> {
    if let Err(refusal) = state.auth.check(&parts, certificate).await {
        return refusal.response();
    }
    let path = parts.uri.path().to_string();
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    let get = parts.method == Method::GET;
    let get_or_post = get || parts.method == Method::POST;
    use streaming::Kind;
    match segments.as_slice() {
        ["healthz"] if get => text(200, "ok"),
        ["pods"] if get => pod_list(state),
        ["metrics"] if get => metrics(state).await,
        ["metrics", "resource"] if get => resource_metrics(state).await,
        ["metrics", "cadvisor"] if get => cadvisor_metrics(state).await,
        ["stats", "summary"] if get => stats_summary(state, &parts).await,
        ["containerLogs", ns, pod, container] if get => {
            container_logs(state, &parts, ns, pod, container).await
        }
        ["exec", ns, pod, container] | ["exec", ns, pod, _, container] if get_or_post => {
            streaming::serve(state, parts, Kind::Exec, ns, pod, container).await
        }
        ["attach", ns, pod, container] | ["attach", ns, pod, _, container] if get_or_post => {
            streaming::serve(state, parts, Kind::Attach, ns, pod, container).await
        }
        ["portForward", ns, pod] | ["portForward", ns, pod, _] if get_or_post => {
            streaming::serve(state, parts, Kind::PortForward, ns, pod, "").await
        }
        _ => text(404, "404 page not found"),
    }
}

/// `/pods`: this node's pods as a `PodList`.
fn pod_list(state: &ServerState) -> Response<Body> {
    let items: Vec<Pod> = state.pods.list();
    let list = serde_json::json!({
        "kind": "PodList",
        "apiVersion": "v1",
        "metadata": {},
        "items": items,
    });
    response(
        200,
        full(serde_json::to_vec(&list).unwrap_or_default()),
        "application/json",
    )
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, prometheus_client::encoding::EncodeLabelSet)]
struct StateLabel {
    container_state: String,
}

/// `/metrics`: upstream's `kubelet_running_pods` (pods with a ready sandbox) and
/// `kubelet_running_containers` by state, read off the runtime at scrape time, and
/// `kubelet_desired_pods` (the pods bound to this node).
async fn metrics(state: &ServerState) -> Response<Body> {
    let sandboxes = state.runtime.list_pod_sandboxes(HashMap::new()).await;
    let containers = state.runtime.list_containers(HashMap::new()).await;
    let (Ok(sandboxes), Ok(containers)) = (sandboxes, containers) else {
        return text(500, "the runtime did not answer");
    };
    let mut registry = Registry::default();
    let running_pods = Gauge::<i64>::default();
    running_pods.set(
        sandboxes
            .iter()
            .filter(|s| s.state == PodSandboxState::SandboxReady as i32)
            .count() as i64,
    );
    registry.register(
        "kubelet_running_pods",
        "Number of pods that have a running pod sandbox",
        running_pods,
    );
    let by_state = Family::<StateLabel, Gauge>::default();
    for c in &containers {
        let name = match ContainerState::try_from(c.state) {
            Ok(ContainerState::ContainerCreated) => "created",
            Ok(ContainerState::ContainerRunning) => "running",
            Ok(ContainerState::ContainerExited) => "exited",
            _ => "unknown",
        };
        by_state
            .get_or_create(&StateLabel {
                container_state: name.into(),
            })
            .inc();
    }
    registry.register(
        "kubelet_running_containers",
        "Number of containers currently running",
        by_state,
    );
    let desired = Gauge::<i64>::default();
    desired.set(state.pods.list().len() as i64);
    registry.register(
        "kubelet_desired_pods",
        "The number of pods the kubelet is being instructed to run",
        desired,
    );
    let mut out = String::new();
    if encode(&mut out, &registry).is_err() {
        return text(500, "encoding the metrics failed");
    }
    response(200, full(out), "text/plain; version=0.0.4; charset=utf-8")
}

/// `/stats/summary[?only_cpu_and_memory=true]`: the Summary API; 500 when the runtime cannot
/// be read, as upstream.
async fn stats_summary(state: &ServerState, parts: &Parts) -> Response<Body> {
    let only_cpu_and_memory =
        form_urlencoded::parse(parts.uri.query().unwrap_or_default().as_bytes())
            .any(|(k, v)| k == "only_cpu_and_memory" && v == "true");
    match state.stats.summary(only_cpu_and_memory).await {
        Ok(summary) => response(
            200,
            full(serde_json::to_vec(&summary).unwrap_or_default()),
            "application/json",
        ),
        Err(e) => text(500, &format!("Internal Error: {e}")),
    }
}

/// `/metrics/resource`: the resource metrics metrics-server scrapes.
async fn resource_metrics(state: &ServerState) -> Response<Body> {
    let summary = state.stats.summary(true).await;
    if let Err(e) = &summary {
        tracing::warn!(error = %e, "reading the resource metrics");
    }
    let text = crate::stats::resource::render(summary.as_ref().ok());
    response(200, full(text), "text/plain; version=0.0.4; charset=utf-8")
}

/// `/metrics/cadvisor`: the containers' usage under cAdvisor's names (Prometheus scrapes it).
async fn cadvisor_metrics(state: &ServerState) -> Response<Body> {
    match state.stats.summary(false).await {
        Ok(summary) => response(
            200,
            full(crate::stats::cadvisor::render(&summary)),
            "text/plain; version=0.0.4; charset=utf-8",
        ),
        Err(e) => text(500, &format!("Internal Error: {e}")),
    }
}

/// `/containerLogs/{ns}/{pod}/{container}`: the container's log, streamed (chunked) so that
/// `follow` can go on as long as the container runs.
async fn container_logs(
    state: &ServerState,
    parts: &Parts,
    namespace: &str,
    pod_name: &str,
    container: &str,
) -> Response<Body> {
    let query: HashMap<String, String> =
        form_urlencoded::parse(parts.uri.query().unwrap_or_default().as_bytes())
            .into_owned()
            .collect();
    let options = match logs::LogOptions::from_query(&query, (state.clock)()) {
        Ok(o) => o,
        Err(e) => return text(400, &e.to_string()),
    };
    let pod = match state.pods.get(namespace, pod_name) {
        Ok(p) => p,
        Err(e) => return text(404, &e.to_string()),
    };
    if !pods::has_container(&pod, container) {
        let e = pods::Error::NotInSpec {
            pod: pod_name.into(),
            container: container.into(),
        };
        return text(404, &e.to_string());
    }
    let pod_log_dir = crate::pod_sync::pod_log_dir(&state.log_dir, &pod);
    let runtime = state.runtime.clone();
    let (id, path) = match pods::log_file(
        runtime.as_ref(),
        &pod,
        container,
        options.previous,
        &pod_log_dir,
    )
    .await
    {
        Ok(found) => found,
        Err(e) => return text(400, &e.to_string()),
    };
    let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(16);
    tokio::spawn(async move {
        let running = || {
            let runtime = runtime.clone();
            let id = id.clone();
            async move { pods::is_running(runtime.as_ref(), &id).await }
        };
        if let Err(e) = logs::stream(path.clone(), options, tx, running).await {
            tracing::debug!(path = %path.display(), error = %e, "reading a container log");
        }
    });
    let mut rx = rx;
    let frames = futures::stream::poll_fn(move |cx| {
        rx.poll_recv(cx)
            .map(|chunk| chunk.map(|b| Ok::<_, Infallible>(Frame::data(b))))
    });
    response(200, BodyExt::boxed(StreamBody::new(frames)), "text/plain")
}
