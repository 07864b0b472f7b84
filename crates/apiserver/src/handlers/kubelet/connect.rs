//! `pods/{name}/exec`, `attach` and `portforward` (GET and POST, the connect verbs): the
//! options become the kubelet's query as upstream's `streamParams` writes it, and the request
//! is proxied to the kubelet's `/exec`, `/attach` or `/portForward`, the SPDY or WebSocket
//! upgrade passed through: the client ends up speaking to the runtime's streaming server, so
//! the stream protocols served are the ones it speaks (SPDY, and WebSocket `channel.k8s.io`
//! up to v4). A WebSocket client that asks only for v5, or for SPDY tunnelled over WebSocket,
//! gets the streaming server's refusal (not 101), on which kubectl falls back to SPDY.

use http::{Method, Response};
use skiff_apimachinery::proxy;

use super::super::{Body, Ctx};
use crate::error::Result;
use crate::request::flag;

/// The kubelet's path and query for a connect request: `subresource` is `exec`, `attach` or
/// `portforward`; `pairs` the client's query (repeated keys kept).
pub fn kubelet_target(
    subresource: &str,
    namespace: &str,
    pod: &str,
    container: &str,
    pairs: &[(String, String)],
) -> String {
    let on = |name: &str| {
        let map = pairs
            .iter()
            .filter(|(k, _)| k == name)
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        flag(&map, name)
    };
    let mut q = form_urlencoded::Serializer::new(String::new());
    let path = match subresource {
        "portforward" => {
            let ports: Vec<&str> = pairs
                .iter()
                .filter(|(k, _)| k == "ports")
                .map(|(_, v)| v.as_str())
                .collect();
            if !ports.is_empty() {
                q.append_pair("port", &ports.join(","));
            }
            format!("/portForward/{namespace}/{pod}")
        }
        kind => {
            for (stream, param) in [
                ("stdin", "input"),
                ("stdout", "output"),
                ("stderr", "error"),
                ("tty", "tty"),
            ] {
                if on(stream) {
                    q.append_pair(param, "1");
                }
            }
            if kind == "exec" {
                for (_, command) in pairs.iter().filter(|(k, _)| k == "command") {
                    q.append_pair("command", command);
                }
            }
            format!("/{kind}/{namespace}/{pod}/{container}")
        }
    };
    let query = q.finish();
    if query.is_empty() {
        path
    } else {
        format!("{path}?{query}")
    }
}

/// Proxies a connect request to the pod's kubelet; the kubelet's answer (101 and the
/// upgraded stream, or its error) is the client's.
pub async fn connect(mut ctx: Ctx) -> Result<Response<Body>> {
    let name = ctx.info.name.clone();
    let subresource = ctx.info.subresource.clone();
    let (pod, container) = super::pod_and_container(&ctx, subresource != "portforward").await?;
    let kubelet = super::kubelet_of(&ctx, &pod, &name).await?;
    let pairs: Vec<(String, String)> = form_urlencoded::parse(ctx.raw_query.as_bytes())
        .into_owned()
        .collect();
    let target = kubelet_target(&subresource, &ctx.info.namespace, &name, &container, &pairs);
    let method = if ctx.info.verb == "create" {
        Method::POST
    } else {
        Method::GET
    };
    let resp = super::send(&mut ctx, kubelet, method, &target).await?;
    Ok(resp.map(proxy::stream_body))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(q: &str) -> Vec<(String, String)> {
        form_urlencoded::parse(q.as_bytes()).into_owned().collect()
    }

    #[test]
    fn exec_options_become_the_kubelets_stream_flags_and_command() {
        let q = pairs(
            "command=sh&command=-c&command=echo+hi&stdin=true&stdout=true&stderr=false&tty=false&container=c",
        );
        assert_eq!(
            kubelet_target("exec", "ns", "p", "c", &q),
            "/exec/ns/p/c?input=1&output=1&command=sh&command=-c&command=echo+hi"
        );
        let attach = pairs("stdout=true&stderr=true&tty=true");
        assert_eq!(
            kubelet_target("attach", "ns", "p", "c", &attach),
            "/attach/ns/p/c?output=1&error=1&tty=1"
        );
    }

    #[test]
    fn port_forward_ports_are_joined_into_one_port_parameter() {
        assert_eq!(
            kubelet_target("portforward", "ns", "p", "", &pairs("ports=80&ports=8080")),
            "/portForward/ns/p?port=80%2C8080"
        );
        assert_eq!(
            kubelet_target("portforward", "ns", "p", "", &[]),
            "/portForward/ns/p"
        );
    }
}
