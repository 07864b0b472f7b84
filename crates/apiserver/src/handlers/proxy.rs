//! The proxy subresources (upstream's `pods/proxy`, `services/proxy` and `nodes/proxy`, what
//! `kubectl proxy` and `kubectl get --raw …/proxy/…` reach): the request (method, headers
//! without credentials, body, upgrade) is forwarded to the pod's IP, a ready endpoint of the
//! Service's port, or the node's kubelet, and the answer streamed back. The name is
//! `[scheme:]name[:port]`, as upstream's `SplitSchemeNamePort`:
//! - pods: `http` (or `https`, unverified, as upstream's proxy transport) to the pod IP at the
//!   port given, else its first declared container port, else 80;
//! - services: the port by name or number (none: the unnamed port), a ready endpoint of it;
//! - nodes: the kubelet's port (or none) over HTTPS with the API server's kubelet client
//!   certificate, any other port in plain HTTP.
//!
//! Unlike upstream, HTML and `Location` headers in the answers are not rewritten to the proxy
//! path (see docs/compatibility.md).

use std::net::IpAddr;

use http::Response;
use http_body_util::{Either, Empty};
use serde_json::Value;
use skiff_apimachinery::proxy;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

use super::read::fetch;
use super::{Body, Ctx};
use crate::error::{ApiError, Result};
use crate::https_client::Trust;
use crate::kubelet_client::{authority, node_endpoint};
use crate::services::{CachedServices, proxy_endpoint};

/// Where a proxied request goes.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Backend {
    /// The node's kubelet, with the API server's client certificate.
    Kubelet { host: String, port: u16 },
    /// A pod, Service endpoint or other node port.
    Plain {
        https: bool,
        host: String,
        port: u16,
    },
}

/// `[scheme:]name[:port]`: the scheme (`http` or `https`), name and port (maybe empty).
fn split_scheme_name_port(id: &str) -> Option<(&str, &str, &str)> {
    let parts: Vec<&str> = id.split(':').collect();
    let (scheme, name, port) = match parts.as_slice() {
        [name] => ("", *name, ""),
        [name, port] => ("", *name, *port),
        [scheme, name, port] if matches!(*scheme, "http" | "https") => (*scheme, *name, *port),
        _ => return None,
    };
    (!name.is_empty()).then_some((scheme, name, port))
}

/// Requests to `{pods,services,nodes}/{id}/proxy[/path]`.
pub async fn proxy(mut ctx: Ctx) -> Result<Response<Body>> {
    let id = ctx.info.name.clone();
    let resource = ctx.rt.plural.clone();
    let kind = match resource.as_str() {
        "pods" => "pod",
        "services" => "service",
        _ => "node",
    };
    let invalid = || ApiError::bad_request(format!("invalid {kind} request {id:?}"));
    let (scheme, name, port) = split_scheme_name_port(&id).ok_or_else(invalid)?;
    let object = fetch(&ctx, name).await?;
    let https = scheme == "https";
    let backend = match resource.as_str() {
        "pods" => pod_backend(&object, name, port, https)?,
        "services" => {
            let services = CachedServices(ctx.server.cache.clone());
            let slices = services.slices(&ctx.info.namespace, name);
            let (host, port) =
                proxy_endpoint(&object, &slices, port).map_err(ApiError::service_unavailable)?;
            Backend::Plain { https, host, port }
        }
        _ => node_backend(&object, name, port, https)?,
    };
    let path_and_query = backend_path(&ctx);
    forward(&mut ctx, backend, &path_and_query).await
}

/// The pod's address at `port`, else at its first declared container port, else 80; 400 for a
/// pod without an address one may proxy to.
fn pod_backend(pod: &Value, name: &str, port: &str, https: bool) -> Result<Backend> {
    let ip = pod["status"]["podIP"].as_str().unwrap_or_default();
    proxyable(ip).map_err(|e| ApiError::bad_request(format!("address {ip:?}: {e}")))?;
    let declared = || {
        pod["spec"]["containers"]
            .as_array()?
            .iter()
            .find_map(|c| c["ports"][0]["containerPort"].as_u64())
    };
    let port = match port {
        "" => declared().map_or(80, |p| p as u16),
        p => p
            .parse()
            .map_err(|_| ApiError::bad_request(format!("invalid port {p:?} for pod {name}")))?,
    };
    Ok(Backend::Plain {
        https,
        host: ip.to_string(),
        port,
    })
}

/// The node's kubelet for its own port (or none), plain HTTP to the node for any other.
fn node_backend(node: &Value, name: &str, port: &str, https: bool) -> Result<Backend> {
    let (host, kubelet_port) = node_endpoint(node).ok_or_else(|| {
        ApiError::internal(format!("node {name} reports no address for its kubelet"))
    })?;
    if port.is_empty() || port == kubelet_port.to_string() {
        return Ok(Backend::Kubelet {
            host,
            port: kubelet_port,
        });
    }
    let port = port
        .parse()
        .map_err(|_| ApiError::bad_request(format!("invalid port {port:?} for node {name}")))?;
    Ok(Backend::Plain { https, host, port })
}

/// Upstream's `IsProxyableIP`: a parseable address, neither loopback, link-local nor
/// unspecified (the API server's own host is not a backend).
fn proxyable(ip: &str) -> std::result::Result<(), &'static str> {
    let ip: IpAddr = ip.parse().map_err(|_| "invalid IP")?;
    let link_local = match ip {
        IpAddr::V4(v4) => v4.is_link_local(),
        IpAddr::V6(v6) => v6.is_unicast_link_local(),
    };
    if ip.is_loopback() || ip.is_unspecified() || link_local || ip.is_multicast() {
        return Err("address not allowed");
    }
    Ok(())
}

/// What follows `…/{name}/proxy` in the request path (its trailing slash kept; `/` when
/// nothing does), with the query.
fn backend_path(ctx: &Ctx) -> String {
    let path = &ctx.info.path;
    let marker = format!("/{}/proxy", ctx.info.name);
    let rest = path
        .find(&marker)
        .map(|i| &path[i + marker.len()..])
        .unwrap_or("");
    let rest = if rest.starts_with('/') { rest } else { "/" };
    match ctx.raw_query.as_str() {
        "" => rest.to_string(),
        q => format!("{rest}?{q}"),
    }
}

/// Sends the request on to `backend` and streams its answer; 503 naming the error when it
/// cannot be reached, as upstream's proxy.
async fn forward(ctx: &mut Ctx, backend: Backend, path_and_query: &str) -> Result<Response<Body>> {
    let unreachable = |e: &dyn std::fmt::Display| {
        ApiError::service_unavailable(format!("error trying to reach service: {e}"))
    };
    match backend {
        Backend::Kubelet { host, port } => {
            let tls = ctx
                .server
                .kubelet
                .connect(&host, port)
                .await
                .map_err(|e| unreachable(&e))?;
            send(ctx, tls, &authority(&host, port), path_and_query).await
        }
        Backend::Plain { https, host, port } => {
            let addr = authority(&host, port);
            if https {
                let config = ctx
                    .server
                    .aggregator
                    .tls
                    .get(&Trust::Insecure)
                    .map_err(ApiError::internal)?;
                let tls = crate::https_client::dial(&host, &host, port, config)
                    .await
                    .map_err(|e| unreachable(&e))?;
                send(ctx, tls, &addr, path_and_query).await
            } else {
                let tcp = TcpStream::connect(&addr)
                    .await
                    .map_err(|e| unreachable(&format!("dial tcp {addr}: {e}")))?;
                send(ctx, tcp, &addr, path_and_query).await
            }
        }
    }
}

async fn send<IO>(ctx: &mut Ctx, io: IO, addr: &str, path_and_query: &str) -> Result<Response<Body>>
where
    IO: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    let body = match ctx.take_body() {
        Some(body) => Either::Left(body),
        None => Either::Right(Empty::new()),
    };
    let request = proxy::Forward {
        method: ctx.info.method.clone(),
        path_and_query: path_and_query.to_string(),
        headers: proxy::forwarded_headers(&ctx.headers, addr),
        body,
        client: ctx.upgrade.take(),
    };
    let resp = proxy::forward(io, addr, request).await.map_err(|e| {
        ApiError::service_unavailable(format!("error trying to reach service: {e}"))
    })?;
    Ok(resp.map(proxy::stream_body))
}

#[cfg(test)]
#[path = "proxy_tests.rs"]
mod tests;
