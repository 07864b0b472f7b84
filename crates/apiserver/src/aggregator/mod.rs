//! API aggregation, as upstream's kube-aggregator in front of kube-apiserver: an
//! `apiregistration.k8s.io/v1` APIService names a group version and either says it is served
//! here (Local, no `spec.service`) or names the Service of an aggregated API server
//! (metrics-server, custom metrics adapters, KEDA). Requests under a remote group version's
//! path go to that Service, authenticated here and carrying the user in front-proxy headers;
//! discovery and OpenAPI list the remote group versions next to the local ones, in the order
//! the APIServices' priorities give.
//!
//! # Layout
//! - [`registration`]: APIService objects read into [`ApiService`], upstream's priorities of
//!   the built-in group versions, and the discovery order of group versions.
//! - [`autoregister`]: the Local APIServices the server keeps for its own group versions and
//!   for CustomResourceDefinitions' (upstream's autoregister and crdregistration controllers).
//! - [`available`]: the `Available` condition: the Service, its endpoints and a discovery GET.
//! - [`controller`]: the loop that runs those, publishes the [`State`] and the
//!   `extension-apiserver-authentication` ConfigMap ([`authentication`]).
//! - [`proxy`]: a request for a remote group version, forwarded to its Service.
//! - [`discovery`]: a remote's `APIResourceList` as aggregated discovery's `APIVersionDiscovery`.

pub mod authentication;
pub mod autoregister;
pub mod available;
pub mod controller;
pub mod discovery;
pub mod proxy;
pub mod registration;

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use serde_json::Value;

pub use registration::ApiService;

use crate::https_client::{Identity, TlsConfigs};
use crate::pki::FrontProxy;

/// The group of APIServices.
pub const GROUP: &str = "apiregistration.k8s.io";
/// Their resource.
pub const PLURAL: &str = "apiservices";

/// How often every APIService is checked again without a change that concerns it (upstream's
/// availability controller resyncs every 30 s).
pub const DEFAULT_RECHECK: Duration = Duration::from_secs(30);

/// The aggregation flags (upstream's `--client-ca-file`, `--requestheader-client-ca-file`,
/// `--proxy-client-cert-file`/`--proxy-client-key-file`): the CAs published in
/// `kube-system/extension-apiserver-authentication` and the proxy's client certificate.
#[derive(Debug, Clone)]
pub struct Options {
    /// The CA that signs the cluster's client certificates.
    pub client_ca_pem: String,
    /// The front-proxy CA and the client certificate the proxy presents.
    pub front_proxy: FrontProxy,
    /// How often APIServices are checked again without a change ([`DEFAULT_RECHECK`]).
    pub recheck: Duration,
}

/// What requests, discovery and OpenAPI read: every APIService as last seen, with the remote
/// ones' availability and discovery documents. Replaced whole by the controller.
#[derive(Debug, Default)]
pub struct State {
    /// By name (`v1beta1.metrics.k8s.io`).
    pub services: HashMap<String, ApiService>,
    /// A remote group version's `APIVersionDiscovery`, by APIService name; absent when its
    /// discovery could not be fetched (it is then listed `Stale`, without resources).
    pub discovery: HashMap<String, Value>,
}

impl State {
    /// The remote APIService serving `group/version`, if one does.
    pub fn remote(&self, group: &str, version: &str) -> Option<&ApiService> {
        self.services
            .get(&registration::name_of(group, version))
            .filter(|s| s.service.is_some())
    }
}

/// The aggregator's shared state: the [`State`] the controller publishes, and the TLS
/// configurations (with the front-proxy client certificate) used to reach aggregated servers.
pub struct Aggregator {
    /// A std lock: read per request for an instant, written once per controller pass.
    state: RwLock<Arc<State>>,
    pub(crate) tls: TlsConfigs,
    pub(crate) options: Option<Options>,
}

impl std::fmt::Debug for Aggregator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Aggregator").finish_non_exhaustive()
    }
}

impl Default for Aggregator {
    fn default() -> Self {
        Self {
            state: Default::default(),
            tls: TlsConfigs::new(None),
            options: None,
        }
    }
}

impl Aggregator {
    /// An aggregator presenting `options`' front-proxy client certificate. Without options,
    /// aggregated servers are called without a client certificate (as upstream without
    /// `--proxy-client-cert-file`) and the authentication ConfigMap is not published.
    pub fn new(options: Option<Options>) -> crate::Result<Aggregator> {
        let identity = match &options {
            Some(o) => Some(
                Identity::from_pem(
                    &o.front_proxy.client_cert_pem,
                    &o.front_proxy.client_key_pem,
                )
                .map_err(|e| crate::ApiError::internal(format!("front-proxy client: {e}")))?,
            ),
            None => None,
        };
        Ok(Aggregator {
            state: Default::default(),
            tls: TlsConfigs::new(identity),
            options,
        })
    }

    /// The state as last published.
    pub fn state(&self) -> Arc<State> {
        self.state.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    pub(crate) fn publish(&self, state: State) {
        *self.state.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(state);
    }

    /// How often APIServices are checked again.
    pub fn recheck(&self) -> Duration {
        self.options.as_ref().map_or(DEFAULT_RECHECK, |o| o.recheck)
    }
}
