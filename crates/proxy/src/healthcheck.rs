//! The service health check server (upstream's `pkg/proxy/healthcheck` service health server):
//! for every LoadBalancer with `externalTrafficPolicy: Local`, plain HTTP on its
//! `healthCheckNodePort` (all of this node's addresses) answers any path with 200 while this
//! node has a ready endpoint of the Service and the proxy's last sync succeeded, 503 otherwise,
//! with upstream's JSON body and `X-Load-Balancing-Endpoint-Weight` header. An external load
//! balancer uses it to send traffic only to nodes that keep it local.
//!
//! Listeners follow the table after each sync: one per port, opened when a Service gains one,
//! closed when it goes. A port that cannot be bound is logged and tried again at the next sync,
//! as upstream does. The listeners live in the proxy process's network namespace.

use std::collections::{BTreeSet, HashMap};
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use parking_lot::Mutex;

use crate::dataplane::ServiceTable;
use crate::model::ServiceKey;

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
    /// The last sync of the rules succeeded (upstream's `serviceProxyHealthy`).
    proxy_healthy: Arc<AtomicBool>,
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
    headers.insert(
        "X-Load-Balancing-Endpoint-Weight",
        HeaderValue::from(endpoints),
    );
    response
}

impl ServiceHealth {
    /// Listens on all addresses; listeners run on `runtime`.
    pub fn new(runtime: tokio::runtime::Handle) -> Self {
        ServiceHealth {
            runtime,
            address: Ipv4Addr::UNSPECIFIED,
            services: Arc::default(),
            listeners: Mutex::default(),
            proxy_healthy: Arc::default(),
        }
    }

    /// Listens on `address` only (tests use loopback).
    pub fn with_address(mut self, address: Ipv4Addr) -> Self {
        self.address = address;
        self
    }

    /// After a sync of the rules: whether it succeeded, and the table it programmed.
    pub fn synced(&self, ok: bool, table: &ServiceTable) {
        self.proxy_healthy.store(ok, Ordering::Relaxed);
        if !ok {
            return;
        }
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
        let (services, healthy) = (self.services.clone(), self.proxy_healthy.clone());
        let key = service.clone();
        let handler = move || {
            let endpoints = services.lock().get(&key).map(|e| e.endpoints);
            let healthy = healthy.load(Ordering::Relaxed);
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
        let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .unwrap();
        stream
            .write_all(b"GET /healthz HTTP/1.1\r\nHost: lb\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
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
        let health =
            ServiceHealth::new(tokio::runtime::Handle::current()).with_address(Ipv4Addr::LOCALHOST);
        let s = slice(
            "ns1",
            "web",
            "web-a",
            ("http", "TCP", 8080),
            &[("10.42.0.2", "n1", true), ("10.42.1.2", "n2", true)],
        );
        health.synced(
            true,
            &table("n1", &[local_lb(port.into())], std::slice::from_ref(&s)),
        );
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
        health.synced(
            true,
            &table("n3", &[local_lb(port.into())], std::slice::from_ref(&s)),
        );
        let answer = get(port).await;
        assert!(answer.starts_with("HTTP/1.1 503 "), "{answer}");
        assert!(answer.contains("\"localEndpoints\": 0"), "{answer}");

        // a failed sync makes the proxy unhealthy
        health.synced(
            true,
            &table("n1", &[local_lb(port.into())], std::slice::from_ref(&s)),
        );
        health.synced(false, &ServiceTable::new());
        let answer = get(port).await;
        assert!(answer.starts_with("HTTP/1.1 503 "), "{answer}");
        assert!(
            answer.contains("\"serviceProxyHealthy\": false"),
            "{answer}"
        );

        // the Service gone: its listener is stopped
        health.synced(true, &ServiceTable::new());
        assert!(health.ports().is_empty());
    }
}
