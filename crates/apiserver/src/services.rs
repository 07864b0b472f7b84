//! How the API server finds a Service it calls (an admission webhook's `clientConfig.service`,
//! an APIService's `spec.service`): the Service and its EndpointSlices from the watch cache, a
//! ready address of the slice port that matches the Service port (upstream's endpoint routing),
//! else the ClusterIP; an `ExternalName` Service is its external name at the port asked for.
//! Skiff's API server runs on the host, so a ClusterIP works only where the host routes Service
//! IPs (skiff-proxy on the same machine).

use std::sync::Arc;

use serde_json::Value;
use skiff_apimachinery::catalog::ResourceType;

use crate::cache::Cacher;

/// Finds a Service's address.
pub trait ServiceResolver: Send + Sync {
    /// `(ip, port)` serving port `port` of Service `namespace/name`.
    fn resolve(&self, namespace: &str, name: &str, port: u16) -> Result<(String, u16), String>;
}

/// Services and their EndpointSlices from the watch cache.
#[derive(Clone)]
pub struct CachedServices(pub Arc<Cacher>);

fn builtin(group: &str, plural: &str) -> &'static ResourceType {
    skiff_apimachinery::catalog::builtins()
        .iter()
        .find(|r| r.group == group && r.plural == plural)
        .expect("catalog resource")
}

/// The label that ties an EndpointSlice to its Service.
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";

/// The port of `service` whose number is `port`.
pub fn service_port(service: &Value, port: u16) -> Option<&Value> {
    service["spec"]["ports"]
        .as_array()?
        .iter()
        .find(|p| p["port"].as_u64() == Some(u64::from(port)))
}

/// Whether an endpoint may take traffic (`ready` unset counts as ready, as upstream).
fn ready(endpoint: &Value) -> bool {
    endpoint["conditions"]["ready"] != Value::Bool(false)
}

/// The endpoint `(ip, port)` of a Service port in its EndpointSlices: the slice port named as
/// the Service port, at a ready address.
pub fn endpoint_of(service: &Value, slices: &[Value], port: u16) -> Option<(String, u16)> {
    let name = service_port(service, port)?["name"].as_str().unwrap_or("");
    ready_endpoint(slices, name)
}

/// A ready address of the slice port named `port_name` (`""`: the unnamed port).
fn ready_endpoint(slices: &[Value], port_name: &str) -> Option<(String, u16)> {
    for slice in slices {
        let Some(target) = slice["ports"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|p| p["name"].as_str().unwrap_or("") == port_name)
            .and_then(|p| p["port"].as_u64())
            .and_then(|p| u16::try_from(p).ok())
        else {
            continue;
        };
        for ep in slice["endpoints"].as_array().into_iter().flatten() {
            if !ready(ep) {
                continue;
            }
            if let Some(ip) = ep["addresses"][0].as_str() {
                return Some((ip.to_string(), target));
            }
        }
    }
    None
}

/// Where `services/{id}/proxy` goes (upstream's service `ResourceLocation`): a ready endpoint
/// of the Service port named `port`, or numbered `port` (its name then), or the unnamed port
/// when `port` is empty; the error is the 503's message.
pub fn proxy_endpoint(
    service: &Value,
    slices: &[Value],
    port: &str,
) -> Result<(String, u16), String> {
    let name = service["metadata"]["name"].as_str().unwrap_or_default();
    let port_name = match port.parse::<u16>() {
        Ok(number) => service_port(service, number)
            .ok_or_else(|| format!("no service port {number} found for service {name:?}"))?["name"]
            .as_str()
            .unwrap_or(""),
        Err(_) => port,
    };
    ready_endpoint(slices, port_name).ok_or_else(|| {
        let id = if port.is_empty() {
            name.to_string()
        } else {
            format!("{name}:{port}")
        };
        format!("no endpoints available for service {id:?}")
    })
}

impl CachedServices {
    /// The Service `namespace/name`, if it exists.
    pub fn service(&self, namespace: &str, name: &str) -> Option<Value> {
        self.0
            .resource(builtin("", "services"))
            .get(&format!("{namespace}/{name}"))
            .and_then(|s| s.object().ok())
    }

    /// The EndpointSlices of Service `namespace/name`.
    pub fn slices(&self, namespace: &str, name: &str) -> Vec<Value> {
        self.0
            .resource(builtin("discovery.k8s.io", "endpointslices"))
            .list(namespace)
            .objects
            .iter()
            .filter(|c| c.labels.get(SERVICE_NAME_LABEL) == Some(name))
            .filter_map(|c| c.object().ok())
            .collect()
    }
}

impl ServiceResolver for CachedServices {
    fn resolve(&self, namespace: &str, name: &str, port: u16) -> Result<(String, u16), String> {
        let service = self
            .service(namespace, name)
            .ok_or_else(|| format!("service \"{name}\" not found"))?;
        if service["spec"]["type"] == "ExternalName" {
            return match service["spec"]["externalName"].as_str() {
                Some(host) if !host.is_empty() => {
                    Ok((host.trim_end_matches('.').to_string(), port))
                }
                _ => Err(format!("service \"{name}\" has no external name")),
            };
        }
        if let Some(ep) = endpoint_of(&service, &self.slices(namespace, name), port) {
            return Ok(ep);
        }
        match service["spec"]["clusterIP"].as_str() {
            Some(ip) if !ip.is_empty() && ip != "None" => Ok((ip.to_string(), port)),
            _ => Err(format!("service \"{name}\" has no endpoints")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn services_resolve_to_a_ready_endpoint_of_the_named_port() {
        let svc = json!({"spec": {"clusterIP": "10.96.0.9",
            "ports": [{"name": "https", "port": 443, "targetPort": 8443}]}});
        let slices = [json!({"ports": [{"name": "https", "port": 8443}],
            "endpoints": [{"addresses": ["10.1.0.4"], "conditions": {"ready": false}},
                          {"addresses": ["10.1.0.5"], "conditions": {"ready": true}}]})];
        assert_eq!(
            endpoint_of(&svc, &slices, 443),
            Some(("10.1.0.5".to_string(), 8443))
        );
        assert_eq!(endpoint_of(&svc, &slices, 80), None);
    }

    #[test]
    fn a_proxied_service_port_is_found_by_name_number_or_as_the_unnamed_one() {
        let service = json!({"metadata": {"name": "web"},
                             "spec": {"ports": [{"name": "http", "port": 80},
                                                {"name": "", "port": 81}]}});
        let slices = [
            json!({"ports": [{"name": "http", "port": 8080}, {"name": "", "port": 8081}],
                             "endpoints": [{"addresses": ["10.42.0.9"],
                                            "conditions": {"ready": false}},
                                           {"addresses": ["10.42.0.10"]}]}),
        ];
        let ready = |port| Ok(("10.42.0.10".to_string(), port));
        assert_eq!(proxy_endpoint(&service, &slices, "http"), ready(8080));
        assert_eq!(proxy_endpoint(&service, &slices, "80"), ready(8080));
        assert_eq!(proxy_endpoint(&service, &slices, ""), ready(8081));
        assert_eq!(
            proxy_endpoint(&service, &slices, "90"),
            Err("no service port 90 found for service \"web\"".to_string())
        );
        assert_eq!(
            proxy_endpoint(&service, &slices, "grpc"),
            Err("no endpoints available for service \"web:grpc\"".to_string())
        );
        assert_eq!(
            proxy_endpoint(&service, &[], ""),
            Err("no endpoints available for service \"web\"".to_string())
        );
    }
}
