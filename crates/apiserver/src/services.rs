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
    for slice in slices {
        let Some(target) = slice["ports"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|p| p["name"].as_str().unwrap_or("") == name)
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
            .filter(|c| c.labels.get(SERVICE_NAME_LABEL).map(String::as_str) == Some(name))
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
}
