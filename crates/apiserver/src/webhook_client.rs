//! The API server as a client of webhooks: admission webhooks and CRD conversion webhooks share
//! one `clientConfig` ([`ClientConfig`]: `url` or `service`, `caBundle`) and one HTTPS caller.
//! A call is a `POST` of a JSON review (HTTP/1.1 over rustls), the serving certificate verified
//! against `caBundle` (the host's trust roots without one), abandoned after the caller's timeout
//! (`?timeout=Ns` in the URL, as upstream sends it).
//!
//! `clientConfig.service` is reached through [`crate::services`], with TLS server name
//! `name.namespace.svc` as upstream.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use base64::Engine;
use http::{Request, Uri, header};
use http_body_util::{BodyExt, Full, Limited};
use serde_json::Value;

use crate::https_client::{TlsConfigs, Trust};
pub use crate::services::{CachedServices, ServiceResolver};

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

/// The HTTPS webhook client.
pub struct HttpsCaller {
    services: Box<dyn ServiceResolver>,
    /// By the hook's caBundle (the host's roots without one); no client certificate.
    configs: TlsConfigs,
}

impl HttpsCaller {
    pub fn new(services: Box<dyn ServiceResolver>) -> HttpsCaller {
        HttpsCaller {
            services,
            configs: TlsConfigs::new(None),
        }
    }

    fn config(&self, client: &ClientConfig) -> Result<Arc<rustls::ClientConfig>, String> {
        self.configs.get(&match &client.ca_bundle {
            Some(pem) => Trust::Bundle(pem.clone()),
            None => Trust::HostRoots,
        })
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
}
