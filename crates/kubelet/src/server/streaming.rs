//! `/exec`, `/attach` and `/portForward`, as upstream's kubelet serves them since it stopped
//! redirecting: the runtime is asked (CRI `Exec`, `Attach`, `PortForward`) for a one-use URL on
//! its streaming server, and the client's request, SPDY or WebSocket upgrade included, is
//! proxied to it. Whichever stream protocols the runtime speaks are the ones served.

use http::request::Parts;
use http::{Response, Uri};
use hyper::upgrade::OnUpgrade;
use skiff_apimachinery::proxy;

use super::pods::{self, has_container};
use super::{Body, ServerState, text};
use crate::cri::{AttachRequest, ExecRequest, PortForwardRequest};

/// The streams a client asked for (upstream's `remotecommand` options, query `input`,
/// `output`, `error`, `tty` set to `1`, and `command` repeated).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StreamOptions {
    pub command: Vec<String>,
    pub stdin: bool,
    pub stdout: bool,
    pub stderr: bool,
    pub tty: bool,
}

impl StreamOptions {
    /// Reads the options; at least one stream is needed. With a TTY, stderr is merged into
    /// stdout, so it is not asked for.
    pub fn from_query(pairs: &[(String, String)]) -> Result<StreamOptions, String> {
        let on = |name: &str| {
            pairs
                .iter()
                .any(|(k, v)| k == name && (v == "1" || v.eq_ignore_ascii_case("true")))
        };
        let tty = on("tty");
        let options = StreamOptions {
            command: pairs
                .iter()
                .filter(|(k, _)| k == "command")
                .map(|(_, v)| v.clone())
                .collect(),
            stdin: on("input"),
            stdout: on("output"),
            stderr: on("error") && !tty,
            tty,
        };
        if !options.stdin && !options.stdout && !options.stderr {
            return Err("you must specify at least 1 of stdin, stdout, stderr".into());
        }
        Ok(options)
    }
}

/// The ports of a port-forward query (`port`, comma-separated as the API server writes it, or
/// repeated); SPDY clients name them per stream instead, so none is fine.
pub fn ports(pairs: &[(String, String)]) -> Result<Vec<i32>, String> {
    pairs
        .iter()
        .filter(|(k, _)| k == "port")
        .flat_map(|(_, v)| v.split(','))
        .map(|v| match v.parse::<u16>() {
            Ok(p) if p > 0 => Ok(i32::from(p)),
            _ => Err(format!("invalid port {v:?}")),
        })
        .collect()
}

/// What the three endpoints ask the runtime for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Exec,
    Attach,
    PortForward,
}

/// Serves `/exec/{ns}/{pod}/{container}`, `/attach/{ns}/{pod}/{container}` and
/// `/portForward/{ns}/{pod}` (`container` empty).
pub async fn serve(
    state: &ServerState,
    mut parts: Parts,
    kind: Kind,
    namespace: &str,
    pod_name: &str,
    container: &str,
) -> Response<Body> {
    let pairs: Vec<(String, String)> =
        form_urlencoded::parse(parts.uri.query().unwrap_or_default().as_bytes())
            .into_owned()
            .collect();
    let pod = match state.pods.get(namespace, pod_name) {
        Ok(p) => p,
        Err(e) => return text(404, &e.to_string()),
    };
    if kind != Kind::PortForward && !has_container(&pod, container) {
        let e = pods::Error::NotInSpec {
            pod: pod_name.into(),
            container: container.into(),
        };
        return text(404, &e.to_string());
    }
    let runtime = state.runtime.as_ref();
    let url = match kind {
        Kind::Exec | Kind::Attach => {
            let o = match StreamOptions::from_query(&pairs) {
                Ok(o) => o,
                Err(e) => return text(400, &e),
            };
            let id = match pods::running_container(runtime, &pod, container).await {
                Ok(id) => id,
                Err(e) => return runtime_error(&e),
            };
            if kind == Kind::Exec {
                runtime
                    .exec(ExecRequest {
                        container_id: id,
                        cmd: o.command,
                        tty: o.tty,
                        stdin: o.stdin,
                        stdout: o.stdout,
                        stderr: o.stderr,
                    })
                    .await
            } else {
                runtime
                    .attach(AttachRequest {
                        container_id: id,
                        stdin: o.stdin,
                        tty: o.tty,
                        stdout: o.stdout,
                        stderr: o.stderr,
                    })
                    .await
            }
        }
        Kind::PortForward => {
            let port = match ports(&pairs) {
                Ok(p) => p,
                Err(e) => return text(400, &e),
            };
            let sandbox = match pods::ready_sandbox(runtime, &pod).await {
                Ok(id) => id,
                Err(e) => return runtime_error(&e),
            };
            runtime
                .port_forward(PortForwardRequest {
                    pod_sandbox_id: sandbox,
                    port,
                })
                .await
        }
    };
    let url = match url {
        Ok(u) => u,
        Err(e) => return runtime_error(&pods::Error::Runtime(e)),
    };
    let upgrade = parts.extensions.remove::<OnUpgrade>();
    match to_streaming_server(&url, &parts, upgrade).await {
        Ok(resp) => resp,
        Err(e) => text(502, &e),
    }
}

/// Upstream's `streaming.WriteError`: 404 when the runtime does not know the object, 500
/// otherwise, the error as text.
fn runtime_error(e: &pods::Error) -> Response<Body> {
    let code = match e {
        pods::Error::Runtime(c) if c.is_not_found() => 404,
        _ => 500,
    };
    text(code, &e.to_string())
}

/// Proxies the request to the runtime's one-use `url` (plain HTTP on loopback).
async fn to_streaming_server(
    url: &str,
    parts: &Parts,
    upgrade: Option<OnUpgrade>,
) -> Result<Response<Body>, String> {
    let uri: Uri = url
        .parse()
        .map_err(|e| format!("the runtime's streaming url {url:?}: {e}"))?;
    let authority = uri
        .authority()
        .ok_or_else(|| format!("the runtime's streaming url {url:?} has no host"))?
        .to_string();
    let tcp = tokio::net::TcpStream::connect(&authority)
        .await
        .map_err(|e| format!("dialing the runtime's streaming server {authority}: {e}"))?;
    let path = uri.path_and_query().map_or("/", |p| p.as_str());
    let headers = proxy::forwarded_headers(&parts.headers, &authority);
    let request = proxy::bodiless(parts.method.clone(), path, headers, upgrade);
    let resp = proxy::forward(tcp, &authority, request)
        .await
        .map_err(|e| e.to_string())?;
    Ok(resp.map(proxy::stream_body))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(q: &str) -> Vec<(String, String)> {
        form_urlencoded::parse(q.as_bytes()).into_owned().collect()
    }

    #[test]
    fn exec_options_keep_the_command_in_order_and_drop_stderr_under_a_tty() {
        let o = StreamOptions::from_query(&pairs(
            "command=sh&command=-c&command=echo+hi&output=1&error=1",
        ))
        .unwrap();
        assert_eq!(o.command, ["sh", "-c", "echo hi"]);
        assert!(o.stdout && o.stderr && !o.stdin && !o.tty);
        let t =
            StreamOptions::from_query(&pairs("command=sh&input=1&output=1&error=1&tty=1")).unwrap();
        assert!(t.tty && t.stdin && !t.stderr);
        assert_eq!(
            StreamOptions::from_query(&pairs("command=ls")).unwrap_err(),
            "you must specify at least 1 of stdin, stdout, stderr"
        );
    }

    #[test]
    fn port_forward_ports_are_read_and_checked() {
        assert_eq!(ports(&pairs("port=80&port=8080")).unwrap(), [80, 8080]);
        assert_eq!(ports(&pairs("port=80%2C8080")).unwrap(), [80, 8080]);
        assert_eq!(ports(&pairs("")).unwrap(), Vec::<i32>::new());
        assert!(ports(&pairs("port=0")).is_err());
        assert!(ports(&pairs("port=http")).is_err());
    }
}
