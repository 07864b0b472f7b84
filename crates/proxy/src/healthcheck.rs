//! The proxy's two health servers (upstream's `pkg/proxy/healthcheck`), plain HTTP:
//!
//! - [`ProxyHealth`], `--healthz-bind-address` (port 10256): `/healthz` and `/livez` answer 200
//!   while no change has waited more than [`HEALTH_TIMEOUT`] for a successful sync, 503
//!   otherwise; `/healthz` also 503 while the node is being deleted or tainted
//!   `ToBeDeletedByClusterAutoscaler`, so that load balancers drain it. Upstream's JSON bodies.
//! - [`ServiceHealth`]: for every LoadBalancer with `externalTrafficPolicy: Local`, its
//!   `healthCheckNodePort` (all of this node's addresses) answers any path with 200 while this
//!   node has a ready endpoint of the Service and the proxy is healthy, 503 otherwise, with
//!   upstream's JSON body and `X-Load-Balancing-Endpoint-Weight` header. An external load
//!   balancer uses it to send traffic only to nodes that keep it local.
//!
//! Listeners follow the table after each sync: one per port, opened when a Service gains one,
//! closed when it goes. A port that cannot be bound is logged and tried again at the next sync,
//! as upstream does. The listeners live in the proxy process's network namespace.

use std::collections::{BTreeSet, HashMap};
use std::future::Future;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use k8s_openapi::jiff::Timestamp;
use parking_lot::Mutex;

use crate::dataplane::ServiceTable;
use crate::model::ServiceKey;

/// How long a change may wait for a successful sync before the proxy is unhealthy: upstream's
/// twice the default `--iptables-sync-period` (30 s).
pub const HEALTH_TIMEOUT: Duration = Duration::from_secs(60);

/// How often a health server that could not bind its address tries again (upstream's 5 s).
const BIND_RETRY: Duration = Duration::from_secs(5);

/// The proxy's own health (upstream's `ProxyHealthServer`).
pub struct ProxyHealth {
    timeout: Duration,
    state: Mutex<ProxyState>,
}

struct ProxyState {
    /// The last successful sync.
    last_updated: Option<SystemTime>,
    /// The oldest change not yet synced.
    oldest_queued: Option<Instant>,
    /// Healthy while starting, until the Node says otherwise.
    node_eligible: bool,
}

impl Default for ProxyHealth {
    fn default() -> Self {
        ProxyHealth::new(HEALTH_TIMEOUT)
    }
}

impl ProxyHealth {
    pub fn new(timeout: Duration) -> Self {
        ProxyHealth {
            timeout,
            state: Mutex::new(ProxyState {
                last_updated: None,
                oldest_queued: None,
                node_eligible: true,
            }),
        }
    }

    /// A change arrived at `at` and waits for a sync.
    pub fn queued_update(&self, at: Instant) {
        let mut state = self.state.lock();
        state.oldest_queued = Some(state.oldest_queued.map_or(at, |old| old.min(at)));
    }

    /// A sync succeeded: every change queued before it is programmed.
    pub fn updated(&self) {
        let mut state = self.state.lock();
        state.oldest_queued = None;
        state.last_updated = Some(SystemTime::now());
    }

    pub fn set_node_eligible(&self, eligible: bool) {
        self.state.lock().node_eligible = eligible;
    }

    /// Healthy unless a change has waited longer than the timeout.
    pub fn is_healthy(&self) -> bool {
        self.synced_in_time(&self.state.lock())
    }

    fn synced_in_time(&self, state: &ProxyState) -> bool {
        state
            .oldest_queued
            .is_none_or(|queued| queued.elapsed() < self.timeout)
    }

    /// Upstream's `/healthz` (`node`: with `nodeEligible`) or `/livez` answer.
    fn respond(&self, node: bool) -> Response {
        let (in_time, last_updated, node_eligible) = {
            let state = self.state.lock();
            let in_time = self.synced_in_time(&state);
            (in_time, state.last_updated, state.node_eligible)
        };
        let now = SystemTime::now();
        let healthy = in_time && (node_eligible || !node);
        // as upstream: a healthy answer's lastUpdated is now
        let last_updated = if healthy { Some(now) } else { last_updated };
        let mut body = format!(
            "{{\"lastUpdated\": {:?},\"currentTime\": {:?}",
            go_time(last_updated),
            go_time(Some(now))
        );
        if node {
            body.push_str(&format!(", \"nodeEligible\": {node_eligible}"));
        }
        body.push('}');
        let status = if healthy {
            StatusCode::OK
        } else {
            StatusCode::SERVICE_UNAVAILABLE
        };
        json_response(status, body)
    }

    /// Serves `/healthz` and `/livez` on `addr` until `stopped` ends. A bind that fails is
    /// logged and retried every few seconds (upstream does not stop the proxy for it); the
    /// address bound, when the first try succeeded.
    pub async fn serve(
        self: Arc<Self>,
        addr: SocketAddr,
        stopped: impl Future<Output = ()> + Send + 'static,
    ) -> Option<SocketAddr> {
        let (healthz, livez) = (self.clone(), self);
        let app = axum::Router::new()
            .route(
                "/healthz",
                axum::routing::get(move || std::future::ready(healthz.respond(true))),
            )
            .route(
                "/livez",
                axum::routing::get(move || std::future::ready(livez.respond(false))),
            );
        let first = tokio::net::TcpListener::bind(addr).await;
        let bound = first.as_ref().ok().and_then(|l| l.local_addr().ok());
        tokio::spawn(async move {
            let serving = async move {
                let mut listener = first;
                loop {
                    match listener {
                        Ok(l) => {
                            if let Err(error) = axum::serve(l, app.clone()).await {
                                tracing::warn!(%error, %addr, "serving the proxy's healthz");
                            }
                        }
                        Err(error) => tracing::warn!(
                            %error, %addr, "failed to start the proxy's healthz; retrying"
                        ),
                    }
                    tokio::time::sleep(BIND_RETRY).await;
                    listener = tokio::net::TcpListener::bind(addr).await;
                }
            };
            tokio::select! {
                () = serving => {}
                () = stopped => {}
            }
        });
        bound
    }
}

/// Go's `time.Time.String()` in UTC, as upstream's body prints it; the zero time for none.
fn go_time(at: Option<SystemTime>) -> String {
    match at.and_then(|t| Timestamp::try_from(t).ok()) {
        Some(t) => t.strftime("%Y-%m-%d %H:%M:%S%.f +0000 UTC").to_string(),
        None => "0001-01-01 00:00:00 +0000 UTC".into(),
    }
}

/// A JSON answer with upstream's headers.
fn json_response(status: StatusCode, body: String) -> Response {
    let mut response = (status, body).into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    response
}

/// What a health check port reports: its Service and the local ready endpoints.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Entry {
    port: u16,
    endpoints: usize,
}

/// One listener, stopped when dropped.
struct Listener {
    service: ServiceKey,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The health check ports of this node's proxy.
pub struct ServiceHealth {
    runtime: tokio::runtime::Handle,
    /// Where to listen: all addresses by default (upstream's unset `--nodeport-addresses`).
    address: Ipv4Addr,
    /// Lock order: `services` is never held while `listeners` is taken.
    services: Arc<Mutex<HashMap<ServiceKey, Entry>>>,
    listeners: Mutex<HashMap<u16, Listener>>,
    /// The proxy's health (upstream's `serviceProxyHealthy`).
    proxy: Arc<ProxyHealth>,
}

/// The Services with a health check port in `table`, with their local ready endpoints
/// (upstream's `LocalReadyEndpoints`: each address and port once across the Service's ports).
fn entries(table: &ServiceTable) -> HashMap<ServiceKey, Entry> {
    let mut out = HashMap::new();
    for (key, ports) in table {
        let Some(port) = ports.iter().find_map(|p| p.info.health_check_node_port) else {
            continue;
        };
        let endpoints: BTreeSet<_> = ports
            .iter()
            .flat_map(|p| &p.endpoints)
            .filter(|e| e.local && e.ready)
            .map(|e| (e.ip, e.port))
            .collect();
        out.insert(
            key.clone(),
            Entry {
                port,
                endpoints: endpoints.len(),
            },
        );
    }
    out
}

/// Upstream's response: status, headers and the JSON body as its handler prints it.
fn respond(service: &ServiceKey, endpoints: usize, proxy_healthy: bool) -> Response {
    let status = if endpoints != 0 && proxy_healthy {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    let body = format!(
        "{{\n\t\"service\": {{\n\t\t\"namespace\": {:?},\n\t\t\"name\": {:?}\n\t}},\n\t\"localEndpoints\": {endpoints},\n\t\"serviceProxyHealthy\": {proxy_healthy}\n}}",
        service.namespace, service.name
    );
    let mut response = json_response(status, body);
    response.headers_mut().insert(
        "X-Load-Balancing-Endpoint-Weight",
        HeaderValue::from(endpoints),
    );
    response
}

impl ServiceHealth {
    /// Listens on all addresses; listeners run on `runtime`; answers with `proxy`'s health.
    pub fn new(runtime: tokio::runtime::Handle, proxy: Arc<ProxyHealth>) -> Self {
        ServiceHealth {
            runtime,
            address: Ipv4Addr::UNSPECIFIED,
            services: Arc::default(),
            listeners: Mutex::default(),
            proxy,
        }
    }

    /// The proxy's health these answers include.
    pub fn proxy(&self) -> &ProxyHealth {
        &self.proxy
    }

    /// Listens on `address` only (tests use loopback).
    pub fn with_address(mut self, address: Ipv4Addr) -> Self {
        self.address = address;
        self
    }

    /// After a successful sync of the rules: the table it programmed.
    pub fn synced(&self, table: &ServiceTable) {
        self.proxy.updated();
        let wanted = entries(table);
        let ports: HashMap<u16, ServiceKey> = wanted
            .iter()
            .map(|(key, entry)| (entry.port, key.clone()))
            .collect();
        *self.services.lock() = wanted;
        let mut listeners = self.listeners.lock();
        listeners.retain(|port, l| ports.get(port) == Some(&l.service));
        for (port, service) in ports {
            if listeners.contains_key(&port) {
                continue;
            }
            match self.listen(port, service.clone()) {
                Ok(listener) => {
                    listeners.insert(port, listener);
                }
                Err(error) => tracing::warn!(
                    %error,
                    service = %format!("{}/{}", service.namespace, service.name),
                    port,
                    "failed to start the service health check; retrying at the next sync"
                ),
            }
        }
    }

    /// The ports listened on (for tests and logs).
    pub fn ports(&self) -> Vec<u16> {
        let mut ports: Vec<u16> = self.listeners.lock().keys().copied().collect();
        ports.sort();
        ports
    }

    fn listen(&self, port: u16, service: ServiceKey) -> std::io::Result<Listener> {
        let std_listener = std::net::TcpListener::bind(SocketAddr::from((self.address, port)))?;
        std_listener.set_nonblocking(true)?;
        let _entered = self.runtime.enter();
        let listener = tokio::net::TcpListener::from_std(std_listener)?;
        let (services, proxy) = (self.services.clone(), self.proxy.clone());
        let key = service.clone();
        let handler = move || {
            let endpoints = services.lock().get(&key).map(|e| e.endpoints);
            let healthy = proxy.is_healthy();
            async move {
                match endpoints {
                    Some(endpoints) => respond(&key, endpoints, healthy),
                    // the Service went between the request and the listener's close
                    None => StatusCode::SERVICE_UNAVAILABLE.into_response(),
                }
            }
        };
        let app = axum::Router::new().fallback(handler);
        let task = self.runtime.spawn(async move {
            if let Err(error) = axum::serve(listener, app).await {
                tracing::warn!(%error, port, "serving a service health check");
            }
        });
        Ok(Listener { service, task })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::fixtures::{load_balancer, service, slice, table};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    fn local_lb(port: i32) -> k8s_openapi::api::core::v1::Service {
        let mut svc = load_balancer(
            service("ns1", "web", "10.43.0.41", &[("http", "TCP", 80)]),
            &["192.168.1.10"],
        );
        let spec = svc.spec.as_mut().unwrap();
        spec.external_traffic_policy = Some("Local".into());
        spec.health_check_node_port = Some(port);
        svc
    }

    async fn get(port: u16) -> String {
        get_path(port, "/healthz").await
    }

    async fn get_path(port: u16, path: &str) -> String {
        let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .unwrap();
        let request = format!("GET {path} HTTP/1.1\r\nHost: lb\r\nConnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut out = String::new();
        stream.read_to_string(&mut out).await.unwrap();
        out
    }

    fn free_port() -> u16 {
        std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_local_load_balancer_answers_200_with_local_endpoints_and_503_without() {
        let port = free_port();
        // a change waiting for no time at all is already late
        let proxy = Arc::new(ProxyHealth::new(Duration::ZERO));
        let health = ServiceHealth::new(tokio::runtime::Handle::current(), proxy.clone())
            .with_address(Ipv4Addr::LOCALHOST);
        let s = slice(
            "ns1",
            "web",
            "web-a",
            ("http", "TCP", 8080),
            &[("10.42.0.2", "n1", true), ("10.42.1.2", "n2", true)],
        );
        health.synced(&table(
            "n1",
            &[local_lb(port.into())],
            std::slice::from_ref(&s),
        ));
        assert_eq!(health.ports(), vec![port]);
        let answer = get(port).await;
        assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"), "{answer}");
        assert!(
            answer.contains("content-type: application/json\r\n"),
            "{answer}"
        );
        assert!(
            answer.contains("x-load-balancing-endpoint-weight: 1\r\n"),
            "{answer}"
        );
        assert!(answer.ends_with(
            "{\n\t\"service\": {\n\t\t\"namespace\": \"ns1\",\n\t\t\"name\": \"web\"\n\t},\n\t\"localEndpoints\": 1,\n\t\"serviceProxyHealthy\": true\n}"
        ), "{answer}");

        // on n3 there is no local endpoint
        health.synced(&table(
            "n3",
            &[local_lb(port.into())],
            std::slice::from_ref(&s),
        ));
        let answer = get(port).await;
        assert!(answer.starts_with("HTTP/1.1 503 "), "{answer}");
        assert!(answer.contains("\"localEndpoints\": 0"), "{answer}");

        // a change not synced in time makes the proxy unhealthy
        health.synced(&table(
            "n1",
            &[local_lb(port.into())],
            std::slice::from_ref(&s),
        ));
        proxy.queued_update(Instant::now());
        let answer = get(port).await;
        assert!(answer.starts_with("HTTP/1.1 503 "), "{answer}");
        assert!(
            answer.contains("\"serviceProxyHealthy\": false"),
            "{answer}"
        );

        // the Service gone: its listener is stopped
        health.synced(&ServiceTable::new());
        assert!(health.ports().is_empty());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_proxy_healthz_follows_late_syncs_and_the_node_livez_only_the_syncs() {
        let proxy = Arc::new(ProxyHealth::new(Duration::from_millis(50)));
        let addr = proxy
            .clone()
            .serve("127.0.0.1:0".parse().unwrap(), std::future::pending())
            .await
            .expect("a free port");
        let answer = get_path(addr.port(), "/healthz").await;
        assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"), "{answer}");
        assert!(
            answer.contains("content-type: application/json\r\n"),
            "{answer}"
        );
        assert!(answer.contains(", \"nodeEligible\": true}"), "{answer}");
        assert!(answer.contains("{\"lastUpdated\": \""), "{answer}");

        // a change waits longer than the timeout: both unhealthy, lastUpdated the zero time
        proxy.queued_update(Instant::now() - Duration::from_millis(60));
        let answer = get_path(addr.port(), "/healthz").await;
        assert!(answer.starts_with("HTTP/1.1 503 "), "{answer}");
        assert!(
            answer.contains("\"lastUpdated\": \"0001-01-01 00:00:00 +0000 UTC\""),
            "{answer}"
        );
        let answer = get_path(addr.port(), "/livez").await;
        assert!(answer.starts_with("HTTP/1.1 503 "), "{answer}");
        assert!(!answer.contains("nodeEligible"), "{answer}");

        // synced; then the node is being deleted: /healthz fails, /livez does not
        proxy.updated();
        proxy.set_node_eligible(false);
        let answer = get_path(addr.port(), "/healthz").await;
        assert!(answer.starts_with("HTTP/1.1 503 "), "{answer}");
        assert!(answer.contains(", \"nodeEligible\": false}"), "{answer}");
        let answer = get_path(addr.port(), "/livez").await;
        assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"), "{answer}");
    }

    #[tokio::test]
    async fn a_taken_healthz_address_is_not_fatal() {
        let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = taken.local_addr().unwrap();
        let bound = Arc::new(ProxyHealth::default())
            .serve(addr, std::future::ready(()))
            .await;
        assert_eq!(bound, None);
    }

    #[test]
    fn times_print_as_go_prints_them() {
        let at = SystemTime::UNIX_EPOCH + Duration::new(1_700_000_000, 120_000_000);
        assert_eq!(go_time(Some(at)), "2023-11-14 22:13:20.12 +0000 UTC");
        let whole = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        assert_eq!(go_time(Some(whole)), "2023-11-14 22:13:20 +0000 UTC");
    }
}
