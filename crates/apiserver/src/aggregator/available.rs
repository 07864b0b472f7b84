//! The `Available` condition of an APIService, as upstream's availability controllers set it:
//! Local ones always are; a remote one is when its Service exists, a ClusterIP Service has
//! EndpointSlices with a ready address on the port's name, and `GET /apis/<group>/<version>`
//! answers 2xx within 5 s (sent as `system:kube-aggregator` in `system:masters`, the server's
//! certificate not checked, as upstream's best-effort probe). The answer of that GET is also
//! the group version's discovery document.

use std::time::Duration;

use bytes::Bytes;
use http::{Request, header};
use http_body_util::{BodyExt, Empty, Limited};
use serde_json::Value;

use super::registration::{ApiService, ServiceRef};
use crate::authn::UserInfo;
use crate::https_client::Trust;
use crate::services::{CachedServices, ServiceResolver, service_port};

/// How long the discovery GET may take (upstream's probe timeout).
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);
/// Largest discovery document read.
const MAX_DISCOVERY_BYTES: usize = 8 * 1024 * 1024;

/// An `Available` condition's status, reason and message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Condition {
    pub status: &'static str,
    pub reason: &'static str,
    pub message: String,
}

impl Condition {
    fn unavailable(reason: &'static str, message: String) -> Condition {
        Condition {
            status: "False",
            reason,
            message,
        }
    }

    /// A Local APIService's.
    pub fn local() -> Condition {
        Condition {
            status: "True",
            reason: "Local",
            message: "Local APIServices are always available".into(),
        }
    }

    fn passed() -> Condition {
        Condition {
            status: "True",
            reason: "Passed",
            message: "all checks passed".into(),
        }
    }
}

/// The identity the probe presents (upstream's: always authorized by the aggregated server).
pub fn probe_user() -> UserInfo {
    UserInfo {
        name: "system:kube-aggregator".into(),
        groups: vec!["system:masters".into()],
        ..Default::default()
    }
}

/// Why `service`'s Service cannot take the APIService's requests, if it cannot: the checks
/// before the discovery GET, on the watch cache's Services and EndpointSlices.
pub fn check_service(services: &CachedServices, s: &ServiceRef) -> Option<Condition> {
    let service = services.service(&s.namespace, &s.name);
    service_condition(service.as_ref(), &services.slices(&s.namespace, &s.name), s)
}

/// [`check_service`] on the Service (if it exists) and its EndpointSlices.
fn service_condition(
    service: Option<&Value>,
    slices: &[Value],
    s: &ServiceRef,
) -> Option<Condition> {
    let (ns, name) = (&s.namespace, &s.name);
    let Some(service) = service else {
        return Some(Condition::unavailable(
            "ServiceNotFound",
            format!("service/{name} in {ns:?} is not present"),
        ));
    };
    let kind = service["spec"]["type"].as_str().unwrap_or("ClusterIP");
    if kind != "ClusterIP" {
        return None;
    }
    let Some(port) = service_port(service, s.port) else {
        return Some(Condition::unavailable(
            "ServicePortError",
            format!(
                "service/{name} in {ns:?} is not listening on port {}",
                s.port
            ),
        ));
    };
    let port_name = port["name"].as_str().unwrap_or("");
    if slices.is_empty() {
        return Some(Condition::unavailable(
            "EndpointsNotFound",
            format!("cannot find endpointslices for service/{name} in {ns:?}"),
        ));
    }
    let serving = slices.iter().any(|slice| {
        let ready = slice["endpoints"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|e| e["conditions"]["ready"] != Value::Bool(false));
        let port = slice["ports"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|p| p["name"].as_str().unwrap_or("") == port_name && p["port"].is_number());
        ready && port
    });
    if serving {
        None
    } else {
        Some(Condition::unavailable(
            "MissingEndpoints",
            format!(
                "endpointslices for service/{name} in {ns:?} have no addresses with port name {port_name:?}"
            ),
        ))
    }
}

/// The TLS server name of a Service (`name.namespace.svc`, as upstream dials it).
pub fn server_name(s: &ServiceRef) -> String {
    format!("{}.{}.svc", s.name, s.namespace)
}

/// Checks a remote APIService; on success also returns its `APIResourceList`.
pub async fn check(
    aggregator: &super::Aggregator,
    services: &CachedServices,
    api_service: &ApiService,
) -> (Condition, Option<Value>) {
    let Some(service) = &api_service.service else {
        return (Condition::local(), None);
    };
    if let Some(failed) = check_service(services, service) {
        return (failed, None);
    }
    let path = format!("/apis/{}/{}", api_service.group, api_service.version);
    let (host, port) = match services.resolve(&service.namespace, &service.name, service.port) {
        Ok(ep) => ep,
        Err(e) => {
            return (
                Condition::unavailable("FailedDiscoveryCheck", format!("{path}: {e}")),
                None,
            );
        }
    };
    let url = format!(
        "https://{}{path}",
        crate::kubelet_client::authority(&host, port)
    );
    let probe = async {
        let config = aggregator.tls.get(&Trust::Insecure)?;
        let mut sender = crate::https_client::connect(&server_name(service), &host, port, config)
            .await
            .map_err(|e| format!("Get {url:?}: {e}"))?;
        let mut req = Request::get(path.as_str())
            .header(header::HOST, server_name(service))
            .header(header::ACCEPT, "application/json")
            .body(Empty::<Bytes>::new())
            .map_err(|e| e.to_string())?;
        super::proxy::set_user_headers(req.headers_mut(), &probe_user());
        let resp = sender
            .send_request(req)
            .await
            .map_err(|e| format!("Get {url:?}: {e}"))?;
        let status = resp.status();
        if !status.is_success() {
            return Err(format!("bad status from {url}: {}", status.as_u16()));
        }
        let body = Limited::new(resp.into_body(), MAX_DISCOVERY_BYTES)
            .collect()
            .await
            .map_err(|e| format!("Get {url:?}: {e}"))?
            .to_bytes();
        // a 2xx that is not a resource list still passes, as upstream's probe; it lists no
        // resources then
        Ok(serde_json::from_slice::<Value>(&body).ok())
    };
    match tokio::time::timeout(PROBE_TIMEOUT, probe).await {
        Ok(Ok(list)) => (Condition::passed(), list),
        Ok(Err(e)) => (
            Condition::unavailable(
                "FailedDiscoveryCheck",
                format!("failing or missing response from {url}: {e}"),
            ),
            None,
        ),
        Err(_) => (
            Condition::unavailable(
                "FailedDiscoveryCheck",
                format!("timed out waiting for {url}"),
            ),
            None,
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_service_checks_give_upstreams_reasons_and_messages() {
        let s = ServiceRef {
            namespace: "kube-system".into(),
            name: "metrics-server".into(),
            port: 443,
        };
        let reason = |svc: Option<&Value>, slices: &[Value]| {
            service_condition(svc, slices, &s).map(|c| (c.reason, c.message))
        };
        assert_eq!(
            reason(None, &[]),
            Some((
                "ServiceNotFound",
                "service/metrics-server in \"kube-system\" is not present".into()
            ))
        );
        let svc = json!({"spec": {"ports": [{"name": "https", "port": 443}]}});
        let other_port = json!({"spec": {"ports": [{"name": "https", "port": 8443}]}});
        assert_eq!(
            reason(Some(&other_port), &[]).unwrap().0,
            "ServicePortError"
        );
        assert_eq!(reason(Some(&svc), &[]).unwrap().0, "EndpointsNotFound");
        let unready = json!({"ports": [{"name": "https", "port": 4443}],
            "endpoints": [{"addresses": ["10.0.0.1"], "conditions": {"ready": false}}]});
        assert_eq!(
            reason(Some(&svc), &[unready]),
            Some((
                "MissingEndpoints",
                "endpointslices for service/metrics-server in \"kube-system\" have no addresses with port name \"https\"".into()
            ))
        );
        let ready = json!({"ports": [{"name": "https", "port": 4443}],
            "endpoints": [{"addresses": ["10.0.0.1"]}]});
        assert_eq!(reason(Some(&svc), &[ready]), None);
        let external = json!({"spec": {"type": "ExternalName", "externalName": "m.example.com"}});
        assert_eq!(reason(Some(&external), &[]), None);
    }

    #[test]
    fn local_and_passed_conditions_carry_upstreams_reasons() {
        assert_eq!(
            (
                Condition::local().reason,
                Condition::local().message.as_str()
            ),
            ("Local", "Local APIServices are always available")
        );
        assert_eq!(
            (
                Condition::passed().reason,
                Condition::passed().message.as_str()
            ),
            ("Passed", "all checks passed")
        );
    }
}
