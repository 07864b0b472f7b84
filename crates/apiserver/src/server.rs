//! The API server process: configuration, the shared state every handler reads, the HTTPS
//! listener (HTTP/1.1 and HTTP/2 over rustls, client certificates verified against the cluster
//! CA), and the request pipeline authentication → impersonation → authorization → handler (admission runs inside
//! the write handlers).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use http::{Request, Response};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::RootCertStore;
use rustls::server::WebPkiClientVerifier;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use skiff_store::{Store, StoreExt};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

use crate::admission::priority::{Priority, PriorityClassLookup};
use crate::admission::{self, NamespaceLookup};
use crate::authn::{self, Credentials};
use crate::authz::{self, Decision, Mode};
use crate::cache::Cacher;
use crate::coalesce::GatherWrites;
use crate::error::{ApiError, Result};
use crate::handlers::{self, Body};
use crate::pki::Pki;
use crate::request::{RequestInfo, parse_query};

use crate::storage;
use crate::strategy::{Strategy, StrategyRef};
use skiff_apimachinery::catalog::{Registry, ResourceType};

/// HTTP/2 streams a client may keep open on one connection (kube-apiserver's default).
const MAX_STREAMS_PER_CONNECTION: u32 = 100;

/// How long a client may take over its TLS handshake and its request's head, as
/// kube-apiserver's `ReadHeaderTimeout` (which Go applies to the handshake too): a client that
/// dribbles bytes (slowloris) is disconnected instead of holding a connection forever.
const READ_HEADER_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(32);

/// How to run the API server.
#[derive(Debug, Clone)]
pub struct Config {
    /// Certificates and the admin kubeconfig live here.
    pub data_dir: PathBuf,
    /// Address to listen on (upstream's `--bind-address` + `--secure-port`; default
    /// 127.0.0.1:6443).
    pub listen: SocketAddr,
    /// More names and addresses for the serving certificate (k3s's `--tls-san`): those clients
    /// on other hosts reach the server by.
    pub tls_sans: Vec<String>,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            data_dir: PathBuf::from("/var/lib/skiff"),
            listen: SocketAddr::from(([127, 0, 0, 1], 6443)),
            tls_sans: Vec::new(),
        }
    }
}

/// The gates the command line configures beyond authentication and authorization.
#[derive(Debug, Default)]
pub struct Gates {
    /// `--audit-policy-file` and `--audit-log-path`: events for the requests the policy
    /// selects.
    pub audit: Option<Arc<crate::audit::Auditor>>,
    /// `--encryption-provider-config`: the store wrapper `store` is (kept to ask whether an
    /// object must be rewritten under the current key).
    pub encryption: Option<Arc<crate::encryption::EncryptedStore>>,
    /// In-flight limits and the request timeout.
    pub overload: crate::overload::Limits,
    /// `--enable-priority-and-fairness`: API Priority and Fairness instead of the in-flight
    /// limits (which then only give the server's concurrency limit, their sum).
    pub priority_and_fairness: bool,
    /// `--disable-admission-plugins`: upstream's plugin names left out of the chain.
    pub disabled_admission: Vec<String>,
    /// `--trace-objects`: the lifecycle trace's recorder (none: recording off).
    pub trace: Option<Arc<crate::trace::Recorder>>,
    /// The client and front-proxy CAs and the proxy client certificate of API aggregation.
    pub aggregation: Option<crate::aggregator::Options>,
}

impl Gates {
    /// Whether the object at `key` is stored under another encryption provider or key than a
    /// write would use now.
    pub async fn stale(&self, key: &str) -> bool {
        match &self.encryption {
            Some(e) => e.stale(key.as_bytes()).await,
            None => false,
        }
    }
}

/// A client certificate the TLS handshake verified (DER of the leaf), and whether it chains to
/// the front-proxy CA rather than the cluster CA.
#[derive(Debug)]
pub struct ClientCertificate {
    pub der: Vec<u8>,
    pub front_proxy: bool,
}

/// The client's address, put in each request's extensions by the listener.
#[derive(Debug, Clone, Copy)]
pub struct Peer(pub SocketAddr);

/// What the pipeline needs to start a request's audit record.
struct AuditStart {
    id: http::HeaderValue,
    received: jiff::Timestamp,
    /// Set once the policy records the request; read when it is answered (also on timeout).
    record: Arc<std::sync::OnceLock<Arc<crate::audit::Record>>>,
}

/// Everything a request handler needs.
pub struct ApiServer {
    pub store: Arc<dyn Store>,
    /// The resource types served now: the built-in ones and those installed at run time.
    pub registry: Arc<Registry>,
    /// The strategies of the types in the registry that were installed at run time.
    pub strategies: crate::strategy::Strategies,
    /// The OpenAPI documents served now (custom resources' schemas included).
    pub openapi: crate::handlers::openapi::Published,
    /// Converts objects between their stored, handled and served forms (custom resources'
    /// versions, through their CRDs' webhooks when they have one).
    pub conversion: Arc<crate::conversion::Converter>,
    pub cache: Arc<Cacher>,
    pub authn: authn::Chain,
    pub authz: authz::Chain,
    /// The RBAC authorizer when it is one of the modes (rules reviews list its rules).
    pub rbac: Option<Arc<authz::rbac::Rbac>>,
    pub admission: admission::Chain,
    pub metrics: Arc<crate::metrics::Metrics>,
    /// Where Service ClusterIPs and NodePorts come from.
    pub ranges: crate::allocator::Ranges,
    /// The current time (injected so tests can fix it).
    pub clock: fn() -> jiff::Timestamp,
    /// Dials kubelets for `pods/log`, `exec`, `attach` and `portforward`.
    pub kubelet: crate::kubelet_client::KubeletClient,
    /// Signs service account tokens (`serviceaccounts/{name}/token`); without it that
    /// subresource answers 503.
    pub tokens: Option<Arc<crate::tokens::TokenIssuer>>,
    /// Audit, encryption at rest, in-flight limits and the request timeout.
    pub gates: Gates,
    /// APIServices: what is proxied to aggregated API servers, and how.
    pub aggregator: crate::aggregator::Aggregator,
    /// API Priority and Fairness, when on ([`Gates::priority_and_fairness`]).
    pub flow_control: Option<Arc<crate::flowcontrol::FlowControl>>,
    /// Turns true when the listener stops: watches end then (as upstream's with
    /// `--shutdown-watch-termination-grace-period` 0), so the graceful shutdown does not wait
    /// for clients to close them.
    pub stopping: tokio::sync::watch::Sender<bool>,
}

impl std::fmt::Debug for ApiServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiServer").finish_non_exhaustive()
    }
}

/// NamespaceLifecycle's view of namespaces: the watch cache, then the store (a namespace created
/// a moment ago may not have reached the cache yet).
struct StoreNamespaces {
    store: Arc<dyn Store>,
    cache: Arc<Cacher>,
}

#[async_trait]
impl NamespaceLookup for StoreNamespaces {
    async fn phase(&self, name: &str) -> Result<Option<String>> {
        let rt = skiff_apimachinery::catalog::lookup("", "v1", "namespaces").expect("namespaces");
        if let Some(ns) = self.cache.resource(rt).get(name) {
            return Ok(Some(
                ns.field("status.phase").unwrap_or_default().to_string(),
            ));
        }
        let Some(kv) = self
            .store
            .get(storage::key(rt, "", name).as_bytes())
            .await?
        else {
            return Ok(None);
        };
        let ns = storage::decode(&kv)?;
        Ok(Some(
            ns.pointer("/status/phase")
                .and_then(|p| p.as_str())
                .unwrap_or("Active")
                .to_string(),
        ))
    }
}

/// The Priority plugin's view of PriorityClasses: the watch cache, then the store for one
/// created a moment ago.
struct StorePriorityClasses {
    store: Arc<dyn Store>,
    cache: Arc<Cacher>,
}

fn priority_classes() -> &'static skiff_apimachinery::catalog::ResourceType {
    skiff_apimachinery::catalog::lookup("scheduling.k8s.io", "v1", "priorityclasses")
        .expect("priorityclasses")
}

#[async_trait]
impl PriorityClassLookup for StorePriorityClasses {
    async fn get(&self, name: &str) -> Result<Option<serde_json::Value>> {
        let rt = priority_classes();
        if let Some(c) = self.cache.resource(rt).get(name) {
            return c.object().map(Some);
        }
        match self
            .store
            .get(storage::key(rt, "", name).as_bytes())
            .await?
        {
            Some(kv) => storage::decode(&kv).map(Some),
            None => Ok(None),
        }
    }

    async fn all(&self) -> Result<Vec<serde_json::Value>> {
        let list = self.cache.resource(priority_classes()).list("");
        list.objects.iter().map(|c| c.object()).collect()
    }
}

/// The DefaultStorageClass plugin's view of StorageClasses: the watch cache.
struct CachedStorageClasses {
    cache: Arc<Cacher>,
}

#[async_trait]
impl crate::admission::default_storage_class::StorageClassLookup for CachedStorageClasses {
    async fn all(&self) -> Result<Vec<serde_json::Value>> {
        let rt = skiff_apimachinery::catalog::lookup("storage.k8s.io", "v1", "storageclasses")
            .expect("storageclasses");
        let list = self.cache.resource(rt).list("");
        list.objects.iter().map(|c| c.object()).collect()
    }
}

/// The ResourceQuota plugin's view of quotas: the store itself (so that a charge is compared
/// against the revision it read), asked only when the watch cache knows a quota in the
/// namespace. That shortcut is safe: a quota constrains nothing until the controller has
/// written its `status.hard`, and the controller saw the quota through this cache.
struct StoreQuotas {
    store: Arc<dyn Store>,
    cache: Arc<Cacher>,
}

fn resource_quotas() -> &'static skiff_apimachinery::catalog::ResourceType {
    skiff_apimachinery::catalog::lookup("", "v1", "resourcequotas").expect("resourcequotas")
}

#[async_trait]
impl admission::resource_quota::QuotaStore for StoreQuotas {
    async fn quotas(&self, namespace: &str) -> Result<Vec<serde_json::Value>> {
        if self
            .cache
            .resource(resource_quotas())
            .list(namespace)
            .objects
            .is_empty()
        {
            return Ok(Vec::new());
        }
        let prefix = storage::prefix(resource_quotas(), namespace);
        let resp = self
            .store
            .range(skiff_store::RangeRequest {
                range: skiff_store::KeyRange::prefix(prefix),
                ..Default::default()
            })
            .await?;
        resp.kvs.iter().map(storage::decode).collect()
    }

    async fn update(&self, namespace: &str, quotas: &[serde_json::Value]) -> Result<bool> {
        let mut txn = crate::registry::Txn::new();
        for q in quotas {
            let name = q
                .pointer("/metadata/name")
                .and_then(|n| n.as_str())
                .unwrap_or("");
            let revision: i64 = q
                .pointer("/metadata/resourceVersion")
                .and_then(|v| v.as_str())
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            let key = storage::key(resource_quotas(), namespace, name);
            let guard = crate::registry::Guard::At(revision);
            txn = txn.put(&key, guard, storage::encode(q));
        }
        Ok(txn.commit(&*self.store).await?.is_some())
    }
}

impl ApiServer {
    /// Builds the server state over a store: starts the watch cache, the authorizers of
    /// `modes` (in order) and the default admission chain; `kubelet` reaches the nodes'
    /// kubelets, `tokens` (if any) signs service account tokens.
    pub async fn new(
        store: Arc<dyn Store>,
        kubelet: crate::kubelet_client::KubeletClient,
        tokens: Option<Arc<crate::tokens::TokenIssuer>>,
        modes: &[Mode],
    ) -> Result<Arc<Self>> {
        Self::with_gates(
            store,
            kubelet,
            tokens,
            modes,
            authn::Options::default(),
            Gates::default(),
        )
        .await
    }

    /// The server's state with the authentication flags ([`ApiServer::with_gates`] finishes
    /// it and starts its controllers).
    async fn with_authn(
        store: Arc<dyn Store>,
        kubelet: crate::kubelet_client::KubeletClient,
        tokens: Option<Arc<crate::tokens::TokenIssuer>>,
        modes: &[Mode],
        authn_options: authn::Options,
    ) -> Result<Arc<Self>> {
        let metrics = Arc::<crate::metrics::Metrics>::default();
        let store: Arc<dyn Store> = Arc::new(storage::metered::Metered::new(store, &metrics));
        let cache = Cacher::start(store.clone()).await?;
        let mut chain = authz::Chain::default();
        let mut rbac = None;
        for mode in modes {
            match mode {
                Mode::AlwaysAllow => chain.authorizers.push(Box::new(authz::AlwaysAllow)),
                Mode::AlwaysDeny => chain.authorizers.push(Box::new(authz::AlwaysDeny)),
                Mode::Node => chain
                    .authorizers
                    .push(Box::new(authz::node::NodeAuthorizer::new(Box::new(
                        authz::node::CachedGraph {
                            cache: cache.clone(),
                        },
                    )))),
                Mode::Rbac => {
                    let r = Arc::new(authz::rbac::Rbac::new(Box::new(
                        authz::rbac::CachedPolicy {
                            cache: cache.clone(),
                        },
                    )));
                    chain.authorizers.push(Box::new(r.clone()));
                    rbac = Some(r);
                    authz::aggregation::spawn(cache.clone(), store.clone());
                }
            }
        }
        // Built once here so the first `kubectl apply` does not pay for it.
        skiff_openapi::Documents::global();
        // One webhook client for admission and conversion webhooks.
        let webhooks = Arc::new(crate::webhook_client::HttpsCaller::new(Box::new(
            crate::webhook_client::CachedServices(cache.clone()),
        )));
        let conversion = Arc::new(crate::conversion::Converter::new(webhooks.clone()));
        // shared with the admission plugins that resolve kinds named in objects (param kinds)
        let registry = Arc::new(Registry::new());
        Ok(Arc::new(Self {
            stopping: tokio::sync::watch::Sender::new(false),
            store: store.clone(),
            registry: registry.clone(),
            strategies: Default::default(),
            openapi: Default::default(),
            conversion: conversion.clone(),
            cache: cache.clone(),
            authn: authn::build(authn_options, tokens.as_deref(), cache.clone()),
            authz: chain,
            rbac,
            admission: admission::Chain {
                plugins: vec![
                    Box::new(admission::NamespaceLifecycle {
                        lookup: StoreNamespaces {
                            store: store.clone(),
                            cache: cache.clone(),
                        },
                    }),
                    Box::new(admission::limit_ranger::LimitRanger {
                        lookup: admission::limit_ranger::CachedLimitRanges(cache.clone()),
                    }),
                    Box::new(admission::service_account::ServiceAccount {
                        lookup: admission::service_account::StoreServiceAccounts {
                            store: store.clone(),
                            cache: cache.clone(),
                        },
                        suffix: admission::service_account::random_suffix,
                    }),
                    Box::new(admission::pod_security::PodSecurity {
                        lookup: admission::pod_security::Cached {
                            cache: cache.clone(),
                            store: store.clone(),
                        },
                    }),
                    Box::new(Priority {
                        lookup: StorePriorityClasses {
                            store: store.clone(),
                            cache: cache.clone(),
                        },
                    }),
                    Box::new(admission::tolerations::DefaultTolerationSeconds),
                    Box::new(admission::node_restriction::NodeRestriction),
                    Box::new(admission::default_storage_class::DefaultStorageClass {
                        lookup: CachedStorageClasses {
                            cache: cache.clone(),
                        },
                    }),
                    Box::new(admission::storage_protection::StorageObjectInUseProtection),
                    // webhooks after the built-in plugins, as upstream
                    Box::new(admission::webhook::mutating::MutatingWebhook {
                        configurations: admission::webhook::CachedConfigurations::new(
                            cache.clone(),
                            "mutatingwebhookconfigurations",
                        ),
                        caller: webhooks.clone(),
                        namespaces: admission::webhook::CachedNamespaces {
                            cache: cache.clone(),
                            store: store.clone(),
                        },
                        conversion: conversion.clone(),
                    }),
                    // policies between the two webhook plugins, as upstream orders them
                    Box::new(admission::validating_policy::ValidatingAdmissionPolicy {
                        policies: admission::validating_policy::policy::CachedPolicies::new(
                            cache.clone(),
                        ),
                        params: admission::validating_policy::params::CachedParams {
                            cache: cache.clone(),
                            registry,
                        },
                        namespaces: admission::webhook::CachedNamespaces {
                            cache: cache.clone(),
                            store: store.clone(),
                        },
                        conversion: conversion.clone(),
                    }),
                    Box::new(admission::webhook::validating::ValidatingWebhook {
                        configurations: admission::webhook::CachedConfigurations::new(
                            cache.clone(),
                            "validatingwebhookconfigurations",
                        ),
                        caller: webhooks.clone(),
                        namespaces: admission::webhook::CachedNamespaces {
                            cache: cache.clone(),
                            store: store.clone(),
                        },
                        conversion: conversion.clone(),
                    }),
                    // last, as upstream: only what every other plugin let through is charged
                    Box::new(admission::resource_quota::ResourceQuota {
                        store: StoreQuotas {
                            store,
                            cache: cache.clone(),
                        },
                    }),
                ],
            },
            metrics,
            ranges: crate::allocator::Ranges::default(),
            clock: jiff::Timestamp::now,
            kubelet,
            tokens,
            gates: Gates::default(),
            aggregator: crate::aggregator::Aggregator::default(),
            flow_control: None,
        }))
    }

    /// [`ApiServer::new`] with the authentication flags and the command line's `gates` (its
    /// `encryption`, if any, must be `store`); the admission plugins `gates.disabled_admission`
    /// names are left out of the chain. Starts the server's own controllers (CRDs, APIServices).
    pub async fn with_gates(
        store: Arc<dyn Store>,
        kubelet: crate::kubelet_client::KubeletClient,
        tokens: Option<Arc<crate::tokens::TokenIssuer>>,
        modes: &[Mode],
        authn_options: authn::Options,
        gates: Gates,
    ) -> Result<Arc<Self>> {
        let mut server = Self::with_authn(store, kubelet, tokens, modes, authn_options).await?;
        let building = Arc::get_mut(&mut server).expect("a server being built is not shared yet");
        let plugins = &mut building.admission.plugins;
        if let Some(unknown) = gates
            .disabled_admission
            .iter()
            .find(|name| !plugins.iter().any(|p| p.name() == name.as_str()))
        {
            return Err(ApiError::internal(format!(
                "--disable-admission-plugins: unknown admission plugin {unknown:?}"
            )));
        }
        plugins.retain(|p| !gates.disabled_admission.iter().any(|name| name == p.name()));
        building.aggregator = crate::aggregator::Aggregator::new(gates.aggregation.clone())?;
        if gates.priority_and_fairness {
            let limit = gates.overload.server_limit();
            building.flow_control = Some(crate::flowcontrol::FlowControl::new(
                building.cache.clone(),
                u32::try_from(limit).unwrap_or(u32::MAX),
                &building.metrics,
            ));
        }
        building.gates = gates;
        if let Some(flow_control) = &server.flow_control {
            crate::flowcontrol::status::spawn(Arc::downgrade(&server));
            crate::flowcontrol::FlowControl::spawn_borrowing(Arc::downgrade(flow_control));
        }
        crate::crd::controller::spawn(Arc::downgrade(&server));
        crate::aggregator::controller::spawn(Arc::downgrade(&server));
        Ok(server)
    }

    pub fn now(&self) -> jiff::Timestamp {
        (self.clock)()
    }

    /// Starts serving `types` (versions of one resource installed at run time, a custom
    /// resource) with their strategies: strategy and watch cache first, then the registry, so
    /// that a request that finds the type also finds its rules and its objects. A type already
    /// served at the same group, version and plural is replaced (its names, subresources or
    /// schema changed). The watch cache reads stored objects with `stored`, the strategy of
    /// the version they are stored as.
    pub async fn install(
        &self,
        types: Vec<(ResourceType, Arc<dyn Strategy>)>,
        stored: Arc<dyn Strategy>,
    ) -> Result<()> {
        for (rt, strategy) in &types {
            self.strategies.insert(rt, strategy.clone());
        }
        if let Some((rt, _)) = types.first() {
            self.cache
                .install(rt, StrategyRef::Installed(stored))
                .await?;
        }
        self.registry
            .update(|c| c.with(types.into_iter().map(|(rt, _)| rt).collect::<Vec<_>>()));
        Ok(())
    }

    /// Stops serving the versions of `group`/`plural` that `keep` refuses (all of them when it
    /// always refuses): they leave the registry, and with the last of them the watch cache,
    /// which ends their watches. Built-in types are never removed.
    pub fn remove(&self, group: &str, plural: &str, keep: impl Fn(&ResourceType) -> bool) {
        let before = self.registry.snapshot();
        self.registry.update(|c| c.without(group, plural, &keep));
        let after = self.registry.snapshot();
        let served = |rt: &ResourceType| after.lookup(&rt.group, &rt.version, &rt.plural).is_some();
        for gone in before
            .iter()
            .filter(|r| r.group == group && r.plural == plural && !served(r))
        {
            self.strategies.remove(gone);
        }
        if !after.iter().any(|r| r.group == group && r.plural == plural) {
            self.cache.remove(group, plural);
            self.conversion.remove(group, plural);
        }
    }

    /// The strategy of a served type.
    pub fn strategy(&self, rt: &ResourceType) -> StrategyRef {
        self.strategies.resolve(rt)
    }

    /// One request through the pipeline.
    pub async fn handle(
        self: Arc<Self>,
        req: Request<Incoming>,
        client_certificate: Option<Arc<ClientCertificate>>,
    ) -> Response<Body> {
        let started = std::time::Instant::now();
        let audit = AuditStart {
            id: crate::audit::request_id(req.headers()),
            received: self.now(),
            record: Arc::default(),
        };
        let audit_id = audit.id.clone();
        let record = audit.record.clone();
        let query = parse_query(req.uri().query());
        let info = RequestInfo::parse(req.method(), req.uri().path(), &query);
        // as upstream, the deadline wraps everything after the request is parsed; long-running
        // requests have none
        let work = async {
            match self.gates.overload.deadline(&info, &query) {
                Err(e) => handlers::error(&e),
                Ok(deadline) => {
                    let work = self.clone().pipeline(
                        req,
                        info.clone(),
                        query,
                        deadline,
                        client_certificate,
                        audit,
                    );
                    match deadline {
                        None => work.await,
                        Some(d) => tokio::time::timeout(d, work)
                            .await
                            .unwrap_or_else(|_| handlers::error(&crate::overload::timed_out())),
                    }
                }
            }
        };
        let (mut resp, timing) = crate::timing::timed(started, work).await;
        if let Some(record) = record.get() {
            resp = record
                .clone()
                .finish(resp, crate::overload::is_long_running(&info))
                .await;
        }
        resp.headers_mut()
            .insert(crate::audit::AUDIT_ID_HEADER, audit_id);
        let took = started.elapsed();
        self.metrics
            .observe(&info, resp.status().as_u16(), took, timing.excluded());
        if took >= crate::timing::SLOW && !crate::overload::is_long_running(&info) {
            tracing::info!(
                verb = %info.verb, resource = %info.resource, subresource = %info.subresource,
                namespace = %info.namespace, name = %info.name, status = resp.status().as_u16(),
                took_ms = took.as_millis(), waited_ms = timing.excluded().as_millis(),
                steps = %timing, "slow request"
            );
        }
        resp
    }

    async fn pipeline(
        self: Arc<Self>,
        req: Request<Incoming>,
        info: RequestInfo,
        query: std::collections::HashMap<String, String>,
        deadline: Option<std::time::Duration>,
        client_certificate: Option<Arc<ClientCertificate>>,
        audit: AuditStart,
    ) -> Response<Body> {
        let credentials = Credentials {
            client_certificate: client_certificate.as_deref().map(|c| c.der.as_slice()),
            front_proxy: client_certificate.as_deref().is_some_and(|c| c.front_proxy),
            headers: req.headers(),
        };
        let mut authenticated = self.authn.authenticate(&credentials);
        if authenticated.is_err() && credentials.bearer_token().is_some() {
            // token authenticators read the watch cache: a token for an object written a
            // moment ago (a bootstrap token's Secret, a bound pod) gets one more look once the
            // cache has caught up with the store
            if self.cache.wait_fresh().await.is_ok() {
                authenticated = self.authn.authenticate(&credentials);
            }
        }
        let start = |user| crate::audit::Start {
            audit_id: &audit.id,
            received: audit.received,
            user,
            info: &info,
            uri: req.uri(),
            headers: req.headers(),
            peer: req.extensions().get::<Peer>().map(|p| p.0.ip()),
            clock: self.clock,
        };
        let user = match authenticated {
            Ok(u) => u,
            Err(why) => {
                tracing::debug!(%why, "authentication failed");
                if let Some(a) = &self.gates.audit {
                    let attempted = credentials.attempted(query.contains_key("access_token"));
                    a.failed_authentication(start(&authn::UserInfo::default()), &attempted);
                }
                return handlers::error(&ApiError::unauthorized());
            }
        };
        let record = self
            .gates
            .audit
            .as_ref()
            .and_then(|a| a.begin(start(&user)));
        if let Some(r) = &record {
            let _ = audit.record.set(r.clone());
        }
        let user = match crate::impersonation::resolve(&self.authz, user, req.headers()) {
            Ok(u) => u,
            Err(e) => return handlers::error(&e),
        };
        if let Some(r) = &record
            && req.headers().contains_key(crate::impersonation::USER)
        {
            r.impersonated(&user);
        }
        let (class, admitted) = self.admit(&info, &user, &query, deadline).await;
        crate::timing::step("admitted");
        let mut resp = match admitted {
            // held until the response is built: the in-flight slot, or APF's seats
            Ok(_held) => {
                self.authorize_and_route(req, info, query, user, record)
                    .await
            }
            Err(e) => handlers::error(&e),
        };
        if let Some(class) = class {
            class.label(&mut resp);
        }
        resp
    }

    /// Takes what the request holds while it runs: APF's seats when APF is on (long-running
    /// requests but watches go without), else an in-flight slot; refused, upstream's 429.
    /// With APF, where the request was classified.
    async fn admit(
        &self,
        info: &RequestInfo,
        user: &authn::UserInfo,
        query: &std::collections::HashMap<String, String>,
        deadline: Option<std::time::Duration>,
    ) -> (
        Option<Arc<crate::flowcontrol::Classification>>,
        Result<Held, ApiError>,
    ) {
        let Some(flow_control) = &self.flow_control else {
            let slot = self.gates.overload.admit(info, user);
            return (None, slot.map(Held::Slot));
        };
        if crate::overload::is_long_running(info) && info.verb != "watch" {
            return (None, Ok(Held::Nothing));
        }
        let seats = crate::flowcontrol::seats(info, query, || {
            self.registry
                .lookup(&info.group, &info.version, &info.resource)
                .and_then(|rt| self.cache.get(&rt))
                .map_or(0, |c| c.len())
        });
        // as upstream, a request waits in its queue for at most a quarter of its deadline
        let wait_limit = deadline.unwrap_or(self.gates.overload.request_timeout) / 4;
        let (class, ticket) = flow_control.admit(info, user, seats, wait_limit).await;
        (Some(class), ticket.map(Held::Seats))
    }

    async fn authorize_and_route(
        self: Arc<Self>,
        mut req: Request<Incoming>,
        info: RequestInfo,
        query: std::collections::HashMap<String, String>,
        user: authn::UserInfo,
        record: Option<Arc<crate::audit::Record>>,
    ) -> Response<Body> {
        let decision = self.authz.decide(&user, &info);
        if let Some(r) = &record {
            match &decision {
                Decision::Allow => r.authorized(true, ""),
                Decision::Deny(reason) | Decision::NoOpinion(reason) => r.authorized(false, reason),
            }
        }
        match decision {
            Decision::Allow => {}
            Decision::Deny(reason) | Decision::NoOpinion(reason) => {
                return handlers::error(&authz::forbidden(&user, &info, &reason));
            }
        }
        if let Some(r) = record {
            req.extensions_mut().insert(r);
        }
        let traced = crate::trace::TracedRequest::start(&self, &req, &info, &user);
        let resp = handlers::route(self, req, info, query, user).await;
        if let Some(traced) = traced {
            traced.finish(resp.status().as_u16());
        }
        resp
    }
}

/// What a request holds while it runs (released when dropped; never read).
#[allow(dead_code)]
enum Held {
    Nothing,
    Slot(crate::overload::Admit),
    Seats(crate::flowcontrol::Ticket),
}

/// A bound, not yet serving, API server: the address is known (for port 0) before `serve`.
pub struct Listener {
    listener: TcpListener,
    acceptor: TlsAcceptor,
    /// Tells front-proxy client certificates from the cluster CA's (both pass the handshake).
    front_proxy: Arc<dyn rustls::server::danger::ClientCertVerifier>,
    pub pki: Pki,
}

impl std::fmt::Debug for Listener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Listener")
            .field("addr", &self.listener.local_addr().ok())
            .finish()
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("binding {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error(transparent)]
    Pki(#[from] crate::pki::Error),
    #[error("tls configuration: {0}")]
    Tls(String),
    #[error("writing {path}: {source}")]
    Kubeconfig {
        path: PathBuf,
        source: crate::pki::Error,
    },
}

impl Listener {
    /// Binds `config.listen`, prepares certificates under `config.data_dir/tls` and writes
    /// `config.data_dir/kubeconfig.yaml` for the admin.
    pub async fn bind(config: &Config) -> std::result::Result<Self, ServeError> {
        let listener =
            TcpListener::bind(config.listen)
                .await
                .map_err(|source| ServeError::Bind {
                    addr: config.listen,
                    source,
                })?;
        let addr = listener.local_addr().map_err(|source| ServeError::Bind {
            addr: config.listen,
            source,
        })?;
        let mut hosts = vec![addr.ip().to_string()];
        if addr.ip().is_unspecified() {
            hosts.push("127.0.0.1".into());
        }
        hosts.extend(config.tls_sans.iter().cloned());
        let pki = Pki::ensure(&config.data_dir.join("tls"), &hosts)?;
        let host = if addr.ip().is_unspecified() {
            "127.0.0.1".to_string()
        } else {
            addr.ip().to_string()
        };
        let url = format!("https://{host}:{}", addr.port());
        let kubeconfig = config.data_dir.join("kubeconfig.yaml");
        pki.write_kubeconfig(&kubeconfig, &url, "admin", Some("system:masters"))
            .map_err(|source| ServeError::Kubeconfig {
                path: kubeconfig.clone(),
                source,
            })?;
        let front_proxy_ca = pki.front_proxy()?.ca_cert_pem;
        let acceptor = tls_acceptor(&pki, &front_proxy_ca)?;
        let front_proxy = client_verifier(&front_proxy_ca, false)?;
        Ok(Self {
            listener,
            acceptor,
            front_proxy,
            pki,
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.listener.local_addr().expect("bound listener")
    }

    /// Serves until `shutdown` resolves.
    pub async fn serve(
        self,
        server: Arc<ApiServer>,
        shutdown: impl std::future::Future<Output = ()>,
    ) {
        let graceful = hyper_util::server::graceful::GracefulShutdown::new();
        tokio::pin!(shutdown);
        loop {
            let (tcp, peer) = tokio::select! {
                accepted = self.listener.accept() => match accepted {
                    Ok(a) => a,
                    Err(e) => {
                        tracing::warn!(error = %e, "accept failed");
                        continue;
                    }
                },
                () = &mut shutdown => break,
            };
            let _ = tcp.set_nodelay(true);
            let acceptor = self.acceptor.clone();
            let front_proxy = self.front_proxy.clone();
            let server = server.clone();
            let watcher = graceful.watcher();
            tokio::spawn(async move {
                let tls = match tokio::time::timeout(READ_HEADER_TIMEOUT, acceptor.accept(tcp))
                    .await
                {
                    Ok(Ok(t)) => t,
                    Ok(Err(e)) => {
                        tracing::debug!(%peer, error = %e, "tls handshake failed");
                        return;
                    }
                    Err(_) => {
                        tracing::debug!(%peer, "no tls handshake within the read-header timeout");
                        return;
                    }
                };
                let cert = tls.get_ref().1.peer_certificates().and_then(|chain| {
                    let (leaf, intermediates) = chain.split_first()?;
                    let now = rustls_pki_types::UnixTime::now();
                    Some(Arc::new(ClientCertificate {
                        der: leaf.as_ref().to_vec(),
                        front_proxy: front_proxy
                            .verify_client_cert(leaf, intermediates, now)
                            .is_ok(),
                    }))
                });
                let requested = Arc::new(std::sync::atomic::AtomicBool::new(false));
                let first_request = requested.clone();
                let service = hyper::service::service_fn(move |mut req: Request<Incoming>| {
                    first_request.store(true, std::sync::atomic::Ordering::Relaxed);
                    req.extensions_mut().insert(Peer(peer));
                    let server = server.clone();
                    let cert = cert.clone();
                    async move {
                        let response = server.handle(req, cert).await;
                        Ok::<_, std::convert::Infallible>(response.map(crate::pacing::Paced::new))
                    }
                });
                let mut builder =
                    hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
                // kube-apiserver's limit since CVE-2023-44487; client-go opens another
                // connection per 100 concurrent streams (watches)
                builder
                    .http2()
                    .max_concurrent_streams(MAX_STREAMS_PER_CONNECTION);
                builder
                    .http1()
                    .timer(hyper_util::rt::TokioTimer::new())
                    .header_read_timeout(READ_HEADER_TIMEOUT);
                // HTTP/2 connections gather their writes until the scheduler round ends (see
                // `coalesce`): one event fanned out to 100 watches leaves in one write
                let h2 = tls.get_ref().1.alpn_protocol() == Some(b"h2");
                let io = TokioIo::new(GatherWrites::new(tls, h2));
                let conn = builder.serve_connection_with_upgrades(io, service);
                // boxed, so that the connection's state lives apart from its task's: measured
                // with `skiff bench api --fairness`, a polite client's p99 under a flood of
                // LISTs was 26-30 ms with the connection inline in the task and 5-7 ms boxed
                // (BENCHMARKS.md, session 60); why is not yet known
                let mut conn = Box::pin(watcher.watch(conn.into_owned()));
                // hyper times out a slow HTTP/1 head; a connection whose first request never
                // starts (no HTTP/2 preface, or too few bytes to tell the protocol) is closed here
                let result = match tokio::time::timeout(READ_HEADER_TIMEOUT, &mut conn).await {
                    Ok(result) => result,
                    Err(_) if requested.load(std::sync::atomic::Ordering::Relaxed) => conn.await,
                    Err(_) => {
                        tracing::debug!(%peer, "no request within the read-header timeout");
                        return;
                    }
                };
                if let Err(e) = result {
                    tracing::debug!(%peer, error = %e, "connection ended");
                }
            });
        }
        server.stopping.send_replace(true);
        tokio::select! {
            () = graceful.shutdown() => {}
            () = tokio::time::sleep(std::time::Duration::from_secs(5)) => {}
        }
    }
}

/// A verifier of client certificates chaining to the CAs in `ca_pem`; `optional` lets clients
/// without one through (they are then authenticated otherwise).
fn client_verifier(
    ca_pem: &str,
    optional: bool,
) -> std::result::Result<Arc<dyn rustls::server::danger::ClientCertVerifier>, ServeError> {
    let tls = |e: &dyn std::fmt::Display| ServeError::Tls(e.to_string());
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(cert.map_err(|e| tls(&e))?).map_err(|e| tls(&e))?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider);
    let builder = if optional {
        builder.allow_unauthenticated()
    } else {
        builder
    };
    builder.build().map_err(|e| tls(&e))
}

/// Client certificates of the cluster CA and of the front-proxy CA pass the handshake;
/// authentication tells them apart.
fn tls_acceptor(pki: &Pki, front_proxy_ca: &str) -> std::result::Result<TlsAcceptor, ServeError> {
    let tls = |e: &dyn std::fmt::Display| ServeError::Tls(e.to_string());
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier = client_verifier(&format!("{}\n{front_proxy_ca}", pki.ca_cert_pem), true)?;
    let certs: Vec<CertificateDer<'static>> =
        CertificateDer::pem_slice_iter(pki.serving_cert_pem.as_bytes())
            .collect::<std::result::Result<_, _>>()
            .map_err(|e| tls(&e))?;
    let key = PrivateKeyDer::from_pem_slice(pki.serving_key_pem.as_bytes()).map_err(|e| tls(&e))?;
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| tls(&e))?
        .with_client_cert_verifier(verifier)
        .with_single_cert(certs, key)
        .map_err(|e| tls(&e))?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(TlsAcceptor::from(Arc::new(config)))
}
