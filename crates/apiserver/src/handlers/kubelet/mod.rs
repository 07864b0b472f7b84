//! The pod subresources the kubelet serves, as upstream's `pod/rest` registry and its
//! `LogLocation` / `streamLocation`: the API server resolves the container (400s naming the
//! pod's containers), finds the node's kubelet, and proxies the request to it with its
//! `apiserver-kubelet-client` certificate.
//!
//! # Layout
//! - [`log`]: `pods/{name}/log`, options validated and the kubelet's body streamed.
//! - [`connect`]: `exec`, `attach`, `portforward`, SPDY and WebSocket upgrades passed through.

pub mod connect;
pub mod log;

use http::{Method, Response};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use serde_json::Value;
use skiff_apimachinery::proxy;
use skiff_store::StoreExt;

use super::Ctx;
use super::read::fetch;
use crate::error::{ApiError, Result};
use crate::kubelet_client::node_endpoint;
use crate::storage;

/// The container a request is about: the one asked for, which must be in the pod's spec, or
/// the pod's only container (upstream's messages otherwise).
pub fn container(pod: &Value, asked: Option<&str>, name: &str) -> Result<String> {
    let names = |field: &str| -> Vec<String> {
        pod["spec"][field]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|c| c["name"].as_str().map(str::to_string))
            .collect()
    };
    let containers = names("containers");
    match asked.filter(|c| !c.is_empty()) {
        Some(c) => {
            let known = containers.iter().any(|n| n == c)
                || names("initContainers").iter().any(|n| n == c)
                || names("ephemeralContainers").iter().any(|n| n == c);
            if known {
                Ok(c.to_string())
            } else {
                Err(ApiError::bad_request(format!(
                    "container {c} is not valid for pod {name}"
                )))
            }
        }
        None => match containers.as_slice() {
            [only] => Ok(only.clone()),
            [] => Err(ApiError::bad_request(format!(
                "a container name must be specified for pod {name}"
            ))),
            many => {
                let mut message = format!(
                    "a container name must be specified for pod {name}, choose one of: [{}]",
                    many.join(" ")
                );
                let init = names("initContainers");
                if !init.is_empty() {
                    message.push_str(&format!(
                        " or one of the init containers: [{}]",
                        init.join(" ")
                    ));
                }
                Err(ApiError::bad_request(message))
            }
        },
    }
}

/// Where the kubelet of the pod's node listens: 400 for a pod not yet scheduled, 404 for a
/// node that does not exist.
pub async fn kubelet_of(ctx: &Ctx, pod: &Value, name: &str) -> Result<(String, u16)> {
    let node_name = pod["spec"]["nodeName"].as_str().unwrap_or_default();
    if node_name.is_empty() {
        return Err(ApiError::bad_request(format!(
            "pod {name} does not have a host assigned"
        )));
    }
    let nodes = skiff_apimachinery::catalog::lookup("", "v1", "nodes").expect("nodes");
    let target = crate::error::Target {
        group: "",
        resource: "nodes",
        name: node_name,
    };
    let node = match ctx
        .server
        .store
        .get(storage::key(nodes, "", node_name).as_bytes())
        .await?
    {
        Some(kv) => storage::decode(&kv)?,
        None => return Err(ApiError::not_found(target)),
    };
    node_endpoint(&node).ok_or_else(|| {
        ApiError::internal(format!(
            "node {node_name} reports no address for its kubelet"
        ))
    })
}

/// The pod the request names, with its container resolved when `with_container`.
pub async fn pod_and_container(ctx: &Ctx, with_container: bool) -> Result<(Value, String)> {
    let name = ctx.info.name.clone();
    let pod = fetch(ctx, &name).await?;
    let container = if with_container {
        container(&pod, ctx.query.get("container").map(String::as_str), &name)?
    } else {
        String::new()
    };
    Ok((pod, container))
}

/// Sends `method path_and_query` to the kubelet at `host:port`, upgrades included.
pub async fn send(
    ctx: &mut Ctx,
    (host, port): (String, u16),
    method: Method,
    path_and_query: &str,
) -> Result<Response<Incoming>> {
    let authority = crate::kubelet_client::authority(&host, port);
    // upstream answers a kubelet it cannot reach with the dial error, code 500 and no reason
    let unreachable = |e: &dyn std::fmt::Display| ApiError::with_code(500, "", e.to_string());
    let tls = ctx
        .server
        .kubelet
        .connect(&host, port)
        .await
        .map_err(|e| unreachable(&e))?;
    let headers = proxy::forwarded_headers(&ctx.headers, &authority);
    let request = proxy::bodiless(method, path_and_query, headers, ctx.upgrade.take());
    proxy::forward(tls, &authority, request)
        .await
        .map_err(|e| unreachable(&e))
}

/// Upstream's `GenericHttpResponseChecker`: a kubelet answer outside 2xx becomes an error
/// whose message is the kubelet's body (400 BadRequest, 500 InternalError, others by code).
pub async fn check(resp: Response<Incoming>, name: &str) -> Result<Response<Incoming>> {
    let code = resp.status().as_u16();
    if (200..=206).contains(&code) {
        return Ok(resp);
    }
    let body = http_body_util::Limited::new(resp.into_body(), 1024 * 1024)
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let text = String::from_utf8_lossy(&body).trim_end().to_string();
    Err(match code {
        400 => ApiError::bad_request(text),
        500 => ApiError::internal(text),
        404 => ApiError {
            details: Some(serde_json::json!({"name": name, "kind": "pods/log"})),
            ..ApiError::with_code(404, "NotFound", text)
        },
        _ => ApiError::with_code(code, "", text),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_container_is_the_one_asked_for_or_the_only_one() {
        let one = json!({"spec": {"containers": [{"name": "app"}]}});
        assert_eq!(container(&one, None, "p").unwrap(), "app");
        assert_eq!(container(&one, Some(""), "p").unwrap(), "app");
        let two = json!({"spec": {"containers": [{"name": "a"}, {"name": "b"}],
                                  "initContainers": [{"name": "setup"}]}});
        assert_eq!(container(&two, Some("setup"), "p").unwrap(), "setup");
        assert_eq!(
            container(&two, None, "p").unwrap_err().message,
            "a container name must be specified for pod p, choose one of: [a b] or one of the init containers: [setup]"
        );
        let e = container(&two, Some("c"), "p").unwrap_err();
        assert_eq!(
            (e.code, e.message.as_str()),
            (400, "container c is not valid for pod p")
        );
    }
}
