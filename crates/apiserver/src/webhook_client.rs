//! The API server as a client of webhooks: admission webhooks and CRD conversion webhooks share
//! one `clientConfig` ([`ClientConfig`]: `url` or `service`, `caBundle`) and one HTTPS caller.
//! A call is a `POST` of a JSON review (HTTP/1.1 over rustls), the serving certificate verified
//! against `caBundle` (the host's trust roots without one), abandoned after the caller's timeout
//! (`?timeout=Ns` in the URL, as upstream sends it).
//!
//! `clientConfig.service` is reached at a ready address of the Service's EndpointSlices (the
//! port whose name or number matches the Service port), else its ClusterIP, with TLS server
//! name `name.namespace.svc` as upstream. Skiff's API server runs on the host, so a ClusterIP
//! works only where the host routes Service IPs (skiff-proxy on the same machine).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use base64::Engine;
use http::{Request, Uri, header};
use http_body_util::{BodyExt, Full, Limited};
use rustls::RootCertStore;
use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject;
use serde_json::Value;

use crate::cache::Cacher;

/// Largest review answer read (upstream's limit on webhook responses is similar).
const MAX_RESPONSE_BYTES: usize = 3 * 1024 * 1024;

/// Where a webhook is reached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    /// `clientConfig.url`.
    Url(String),
    /// `clientConfig.service`: reached through its endpoints (see [`CachedServices`]).
    Service {
        namespace: String,
        name: String,
        path: String,
        port: u16,
    },
}

/// A webhook's `clientConfig` (admissionregistration's `WebhookClientConfig` and
/// apiextensions' `spec.conversion.webhook.clientConfig` have the same fields).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientConfig {
    pub endpoint: Endpoint,
    /// PEM certificates trusted for the webhook's serving certificate.
    pub ca_bundle: Option<Vec<u8>>,
}

impl ClientConfig {
    /// Reads a `clientConfig` object (a validated one: `url` or `service`; service port 443
    /// unless given, as upstream defaults it).
    pub fn parse(cc: &Value) -> ClientConfig {
        let endpoint = match cc["url"].as_str() {
            Some(url) => Endpoint::Url(url.to_string()),
            None => Endpoint::Service {
                namespace: cc["service"]["namespace"].as_str().unwrap_or("").into(),
                name: cc["service"]["name"].as_str().unwrap_or("").into(),
                path: cc["service"]["path"].as_str().unwrap_or("").into(),
                port: cc["service"]["port"]
                    .as_u64()
                    .and_then(|p| u16::try_from(p).ok())
                    .unwrap_or(443),
            },
        };
        let ca_bundle = cc["caBundle"]
            .as_str()
            .filter(|s| !s.is_empty())
            .and_then(|b| base64::engine::general_purpose::STANDARD.decode(b).ok());
        ClientConfig {
            endpoint,
            ca_bundle,
        }
    }
}

/// Calls webhooks: the HTTPS client, or a recording fake in tests.
#[async_trait]
pub trait Caller: Send + Sync {
    /// POSTs `review` to the webhook at `client` and reads its JSON answer within `timeout`;
    /// `Err` says why the call failed, in Go's words (`Post "https://…": dial tcp …`).
    async fn call(
        &self,
        client: &ClientConfig,
        timeout: Duration,
        review: &Value,
    ) -> Result<Value, String>;
}

/// One caller shared by the admission plugins and the conversion of custom resources.
#[async_trait]
impl<T: Caller + ?Sized> Caller for Arc<T> {
    async fn call(
        &self,
        client: &ClientConfig,
        timeout: Duration,
        review: &Value,
    ) -> Result<Value, String> {
        (**self).call(client, timeout, review).await
    }
}

/// Where a request goes: the address dialled and the name the certificate must carry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub host: String,
    pub port: u16,
    pub server_name: String,
    /// Path and query.
    pub path: String,
}

/// Finds a Service's address.
pub trait ServiceResolver: Send + Sync {
    /// `(ip, port)` serving port `port` of Service `namespace/name`.
    fn resolve(&self, namespace: &str, name: &str, port: u16) -> Result<(String, u16), String>;
}

/// Services and their EndpointSlices from the watch cache.
pub struct CachedServices(pub Arc<Cacher>);

fn lookup(group: &str, plural: &str) -> &'static skiff_apimachinery::catalog::ResourceType {
    skiff_apimachinery::catalog::builtins()
        .iter()
        .find(|r| r.group == group && r.plural == plural)
        .expect("catalog resource")
}

/// The endpoint `(ip, port)` of a Service port in its EndpointSlices: the slice port named as
/// the Service port, at a ready address.
pub fn endpoint_of(service: &Value, slices: &[Value], port: u16) -> Option<(String, u16)> {
    let sp = service["spec"]["ports"]
        .as_array()?
        .iter()
        .find(|p| p["port"].as_u64() == Some(u64::from(port)))?;
    let name = sp["name"].as_str().unwrap_or("");
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
            if ep["conditions"]["ready"] == Value::Bool(false) {
                continue;
            }
            if let Some(ip) = ep["addresses"][0].as_str() {
                return Some((ip.to_string(), target));
            }
        }
    }
    None
}

impl ServiceResolver for CachedServices {
    fn resolve(&self, namespace: &str, name: &str, port: u16) -> Result<(String, u16), String> {
        let service = self
            .0
            .resource(lookup("", "services"))
            .get(&format!("{namespace}/{name}"))
            .and_then(|s| s.object().ok())
            .ok_or_else(|| format!("service \"{name}\" not found"))?;
        let slices: Vec<Value> = self
            .0
            .resource(lookup("discovery.k8s.io", "endpointslices"))
            .list(namespace)
            .objects
            .iter()
            .filter_map(|c| c.object().ok())
            .filter(|s| s["metadata"]["labels"]["kubernetes.io/service-name"] == name)
            .collect();
        if let Some(ep) = endpoint_of(&service, &slices, port) {
            return Ok(ep);
        }
        match service["spec"]["clusterIP"].as_str() {
            Some(ip) if !ip.is_empty() && ip != "None" => Ok((ip.to_string(), port)),
            _ => Err(format!("service \"{name}\" has no endpoints")),
        }
    }
}

/// The HTTPS webhook client.
pub struct HttpsCaller {
    services: Box<dyn ServiceResolver>,
    /// TLS configurations by caBundle (`None`: the host's roots), built once each: reading the
    /// host's roots costs milliseconds. A plain mutex, never held across an await.
    configs: std::sync::Mutex<HashMap<Option<Vec<u8>>, Arc<rustls::ClientConfig>>>,
}

impl HttpsCaller {
    pub fn new(services: Box<dyn ServiceResolver>) -> HttpsCaller {
        HttpsCaller {
            services,
            configs: Default::default(),
        }
    }

    fn config(&self, client: &ClientConfig) -> Result<Arc<rustls::ClientConfig>, String> {
        let mut configs = self.configs.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(c) = configs.get(&client.ca_bundle) {
            return Ok(c.clone());
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_root_certificates(roots(client)?)
            .with_no_client_auth();
        let config = Arc::new(config);
        configs.insert(client.ca_bundle.clone(), config.clone());
        Ok(config)
    }
}

/// Where `client` is reached, its path carrying `?timeout=`.
pub fn target(
    client: &ClientConfig,
    timeout: Duration,
    services: &dyn ServiceResolver,
) -> Result<Target, String> {
    let timeout = format!("timeout={}s", timeout.as_secs());
    match &client.endpoint {
        Endpoint::Url(url) => {
            let uri: Uri = url
                .parse()
                .map_err(|e| format!("invalid url {url:?}: {e}"))?;
            if uri.scheme_str() != Some("https") {
                return Err(format!(
                    "invalid url {url:?}: 'https' is the only allowed URL scheme"
                ));
            }
            let host = uri
                .host()
                .unwrap_or("")
                .trim_matches(['[', ']'])
                .to_string();
            let path = uri.path().to_string();
            let path = match uri.query() {
                Some(q) => format!("{path}?{q}&{timeout}"),
                None => format!("{path}?{timeout}"),
            };
            Ok(Target {
                server_name: host.clone(),
                host,
                port: uri.port_u16().unwrap_or(443),
                path,
            })
        }
        Endpoint::Service {
            namespace,
            name,
            path,
            port,
        } => {
            let (host, port) = services.resolve(namespace, name, *port)?;
            let path = if path.is_empty() { "/" } else { path };
            Ok(Target {
                host,
                port,
                server_name: format!("{name}.{namespace}.svc"),
                path: format!("{path}?{timeout}"),
            })
        }
    }
}

fn roots(client: &ClientConfig) -> Result<RootCertStore, String> {
    let mut roots = RootCertStore::empty();
    match &client.ca_bundle {
        Some(pem) => {
            for cert in CertificateDer::pem_slice_iter(pem) {
                let cert = cert.map_err(|e| format!("invalid caBundle: {e}"))?;
                roots
                    .add(cert)
                    .map_err(|e| format!("invalid caBundle: {e}"))?;
            }
        }
        None => {
            for cert in rustls_native_certs::load_native_certs().certs {
                let _ = roots.add(cert);
            }
        }
    }
    Ok(roots)
}

async fn post(
    target: &Target,
    config: Arc<rustls::ClientConfig>,
    body: Vec<u8>,
) -> Result<Value, String> {
    let mut sender =
        crate::https_client::connect(&target.server_name, &target.host, target.port, config)
            .await?;
    let req = Request::post(target.path.as_str())
        .header(
            header::HOST,
            format!("{}:{}", target.server_name, target.port),
        )
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::ACCEPT, "application/json")
        .body(Full::new(bytes::Bytes::from(body)))
        .map_err(|e| e.to_string())?;
    let resp = sender.send_request(req).await.map_err(|e| e.to_string())?;
    let status = resp.status();
    let bytes = Limited::new(resp.into_body(), MAX_RESPONSE_BYTES)
        .collect()
        .await
        .map_err(|e| e.to_string())?
        .to_bytes();
    if !status.is_success() {
        return Err(format!(
            "the server responded with the status code {} but did not return more information",
            status.as_u16()
        ));
    }
    serde_json::from_slice(&bytes).map_err(|e| format!("decoding the response: {e}"))
}

#[async_trait]
impl Caller for HttpsCaller {
    async fn call(
        &self,
        client: &ClientConfig,
        timeout: Duration,
        review: &Value,
    ) -> Result<Value, String> {
        let target = target(client, timeout, &*self.services)?;
        let url = format!(
            "https://{}:{}{}",
            target.server_name, target.port, target.path
        );
        let body = serde_json::to_vec(review).map_err(|e| e.to_string())?;
        let config = self.config(client)?;
        match tokio::time::timeout(timeout, post(&target, config, body)).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(format!("Post {url:?}: {e}")),
            Err(_) => Err(format!("Post {url:?}: context deadline exceeded")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    struct Fixed;

    impl ServiceResolver for Fixed {
        fn resolve(&self, _ns: &str, _name: &str, port: u16) -> Result<(String, u16), String> {
            Ok(("10.0.0.7".into(), port + 1))
        }
    }

    const THREE: Duration = Duration::from_secs(3);

    fn hook(cc: Value) -> ClientConfig {
        ClientConfig::parse(&cc)
    }

    #[test]
    fn urls_and_services_become_targets_with_the_timeout_in_the_query() {
        let t = target(
            &hook(json!({"url": "https://127.0.0.1:8443/mutate?x=1"})),
            THREE,
            &Fixed,
        )
        .unwrap();
        assert_eq!(
            t,
            Target {
                host: "127.0.0.1".into(),
                port: 8443,
                server_name: "127.0.0.1".into(),
                path: "/mutate?x=1&timeout=3s".into()
            }
        );
        let t = target(
            &hook(json!({"service": {"namespace": "ns", "name": "hooks", "path": "/v"}})),
            THREE,
            &Fixed,
        )
        .unwrap();
        assert_eq!(
            (
                t.host.as_str(),
                t.port,
                t.server_name.as_str(),
                t.path.as_str()
            ),
            ("10.0.0.7", 444, "hooks.ns.svc", "/v?timeout=3s")
        );
        assert!(target(&hook(json!({"url": "http://h/"})), THREE, &Fixed).is_err());
    }

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
