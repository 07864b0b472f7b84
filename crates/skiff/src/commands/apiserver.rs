//! `skiff apiserver`: the Kubernetes API server on its own, over the embedded store (default) or
//! real etcd (`--datastore-endpoint etcd://host:port,…`).

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use skiff_apiserver::audit::{self, Auditor};
use skiff_apiserver::encryption::{EncryptedStore, Encryption};
use skiff_apiserver::kubelet_client::KubeletClient;
use skiff_apiserver::server::Gates;
use skiff_apiserver::tokens::{DEFAULT_ISSUER, TokenIssuer};
use skiff_apiserver::{ApiServer, Config, Listener, bootstrap};
use skiff_store::{CompactionPolicy, EmbeddedConfig, EmbeddedStore, Store, etcd::EtcdStore};

use super::UsageError;
use super::lifecycle::Lifecycle;

#[derive(Debug, Args)]
pub struct ApiServerArgs {
    /// Directory for certificates, the admin kubeconfig and (embedded store) the data.
    #[arg(long, value_name = "DIR", default_value = "/var/lib/skiff")]
    pub data_dir: PathBuf,

    /// Use real etcd instead of the embedded store: `etcd://host:port[,host:port…]`.
    #[arg(long, value_name = "URL")]
    pub datastore_endpoint: Option<String>,

    /// How often the embedded store compacts its history, each time to the revision it had at
    /// the previous compaction, so between one and two intervals of history are kept
    /// (upstream's flag and default, 5m0s); 0 turns compaction off. Not with
    /// `--datastore-endpoint`: etcd's own `--auto-compaction-*` flags compact it.
    #[arg(long, value_name = "DURATION")]
    pub etcd_compaction_interval: Option<String>,

    /// Address to serve HTTPS on.
    #[arg(long, value_name = "IP", default_value = "127.0.0.1")]
    pub bind_address: IpAddr,

    /// Port to serve HTTPS on (0 picks a free one, printed in the ready line).
    #[arg(long, value_name = "PORT", default_value_t = 6443)]
    pub secure_port: u16,

    /// More names or IPs for the serving certificate (comma-separated, k3s's flag): those
    /// nodes on other hosts reach the server by.
    #[arg(long, value_name = "NAME[,NAME]", value_delimiter = ',')]
    pub tls_san: Vec<String>,

    /// Authorizers to ask, in order (upstream's names: Node, RBAC, AlwaysAllow, AlwaysDeny);
    /// members of `system:masters` are always allowed.
    #[arg(long, value_name = "MODES", default_value = "Node,RBAC")]
    pub authorization_mode: String,

    #[command(flatten)]
    pub gates: GateArgs,

    #[command(flatten)]
    pub authn: AuthnArgs,
}

/// Audit, encryption at rest and overload flags (upstream's names and defaults).
#[derive(Debug, Args)]
pub struct GateArgs {
    /// audit.k8s.io/v1 Policy: which requests are audited at which level (with
    /// --audit-log-path).
    #[arg(long, value_name = "FILE")]
    pub audit_policy_file: Option<PathBuf>,

    /// Where audit events go, one JSON line each; `-` is stdout.
    #[arg(long, value_name = "PATH")]
    pub audit_log_path: Option<PathBuf>,

    /// Megabytes of audit log before it is rotated (0: 100).
    #[arg(long, value_name = "MB", default_value_t = 0)]
    pub audit_log_maxsize: u64,

    /// Rotated audit logs to keep (0: all).
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub audit_log_maxbackup: usize,

    /// Days to keep rotated audit logs (0: regardless of age).
    #[arg(long, value_name = "DAYS", default_value_t = 0)]
    pub audit_log_maxage: u64,

    /// apiserver.config.k8s.io/v1 EncryptionConfiguration: which resources are encrypted in
    /// the store, and with which keys.
    #[arg(long, value_name = "FILE")]
    pub encryption_provider_config: Option<PathBuf>,

    /// Non-mutating requests in flight at once before 429 (0: no limit). Default: upstream's
    /// 400 from six cores, a sixth of it per core below (133 on two).
    #[arg(long, value_name = "N")]
    pub max_requests_inflight: Option<usize>,

    /// Mutating requests in flight at once before 429 (0: no limit). Default: upstream's 200
    /// from six cores, a sixth of it per core below (66 on two).
    #[arg(long, value_name = "N")]
    pub max_mutating_requests_inflight: Option<usize>,

    /// API Priority and Fairness: requests classified by FlowSchemas into priority levels that
    /// share the server's concurrency (the two in-flight limits' sum) and queue fairly; off,
    /// the two in-flight limits apply as they are.
    #[arg(long, value_name = "BOOL", default_value_t = true, action = clap::ArgAction::Set)]
    pub enable_priority_and_fairness: bool,

    /// How long a non-long-running request may take before 504 (a Go duration: 60s, 1m30s).
    #[arg(long, value_name = "DURATION", default_value = "1m0s")]
    pub request_timeout: String,

    /// Admission plugins to turn off (upstream's names, e.g. PodSecurity,LimitRanger); every
    /// plugin is on otherwise.
    #[arg(long, value_name = "PLUGINS", value_delimiter = ',')]
    pub disable_admission_plugins: Vec<String>,

    /// Objects of each resource the lifecycle trace keeps timelines for (`skiff trace`,
    /// `/ui/trace/…`), the least recently written dropped first; 0 turns recording off.
    #[arg(long, value_name = "N", default_value_t = skiff_apiserver::trace::DEFAULT_OBJECTS)]
    pub trace_objects: usize,
}

impl GateArgs {
    /// The gates, and the store wrapped for encryption at rest when configured.
    pub fn build(&self, store: Arc<dyn Store>) -> anyhow::Result<(Gates, Arc<dyn Store>)> {
        let request_timeout = super::kubelet::go_duration(&self.request_timeout).map_err(|_| {
            UsageError(format!(
                "--request-timeout {:?}: expected a positive duration such as 60s",
                self.request_timeout
            ))
        })?;
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        let (readonly, mutating) = skiff_apiserver::overload::default_limits(cores);
        let overload = skiff_apiserver::overload::Limits::new(
            self.max_requests_inflight.unwrap_or(readonly),
            self.max_mutating_requests_inflight.unwrap_or(mutating),
            request_timeout,
        );
        let audit = match (&self.audit_policy_file, &self.audit_log_path) {
            (Some(policy), Some(path)) => Some(Arc::new(Auditor::start(
                policy,
                audit::log::Options {
                    path: path.clone(),
                    max_size_mb: self.audit_log_maxsize,
                    max_backups: self.audit_log_maxbackup,
                    max_age_days: self.audit_log_maxage,
                },
            )?)),
            (Some(_), None) => {
                tracing::warn!("--audit-policy-file without --audit-log-path: nothing is audited");
                None
            }
            _ => None,
        };
        let (encryption, store) = match &self.encryption_provider_config {
            Some(path) => {
                let config = Encryption::load(path)?;
                let wrapped = Arc::new(EncryptedStore::new(store, config));
                (Some(wrapped.clone()), wrapped as Arc<dyn Store>)
            }
            None => (None, store),
        };
        Ok((
            Gates {
                audit,
                encryption,
                overload,
                priority_and_fairness: self.enable_priority_and_fairness,
                disabled_admission: self.disable_admission_plugins.clone(),
                trace: (self.trace_objects > 0).then(|| {
                    Arc::new(skiff_apiserver::trace::Recorder::new(
                        self.trace_objects,
                        skiff_apiserver::trace::ENTRIES_PER_OBJECT,
                    ))
                }),
                // set once the PKI is loaded (`run`)
                aggregation: None,
            },
            store,
        ))
    }
}

/// The authentication flags (upstream's names and defaults, but bootstrap tokens are on).
#[derive(Debug, Args)]
pub struct AuthnArgs {
    /// Requests without credentials are `system:anonymous` (else 401).
    #[arg(long, value_name = "BOOL", default_value_t = true, action = clap::ArgAction::Set)]
    pub anonymous_auth: bool,

    /// Accept bootstrap tokens (Secrets of type bootstrap.kubernetes.io/token in kube-system).
    #[arg(long, value_name = "BOOL", default_value_t = true, action = clap::ArgAction::Set)]
    pub enable_bootstrap_token_auth: bool,

    /// A CSV of bearer tokens: `token,user,uid,"group1,group2"`.
    #[arg(long, value_name = "FILE")]
    pub token_auth_file: Option<PathBuf>,

    /// Audiences the API accepts tokens for (default: the service account issuer).
    #[arg(long, value_name = "AUDIENCES", value_delimiter = ',')]
    pub api_audiences: Vec<String>,

    /// The OpenID Connect issuer (https URL) whose ID tokens are accepted.
    #[arg(long, value_name = "URL")]
    pub oidc_issuer_url: Option<String>,

    /// The client id every ID token must be issued for (its `aud`).
    #[arg(long, value_name = "ID")]
    pub oidc_client_id: Option<String>,

    /// The claim naming the user.
    #[arg(long, value_name = "CLAIM", default_value = "sub")]
    pub oidc_username_claim: String,

    /// Prefix of OIDC user names (default `<issuer>#` unless the claim is `email`; `-` for none).
    #[arg(long, value_name = "PREFIX")]
    pub oidc_username_prefix: Option<String>,

    /// The claim listing the user's groups.
    #[arg(long, value_name = "CLAIM")]
    pub oidc_groups_claim: Option<String>,

    /// Prefix of OIDC group names.
    #[arg(long, value_name = "PREFIX", default_value = "")]
    pub oidc_groups_prefix: String,

    /// The issuer's signing keys as a JWKS document (a Skiff flag). Without it the keys come
    /// from the issuer's `/.well-known/openid-configuration` and its `jwks_uri` over HTTPS,
    /// fetched again when a token names a key not in the set.
    #[arg(long, value_name = "FILE")]
    pub oidc_jwks_file: Option<PathBuf>,

    /// PEM certificates that may sign the issuer's serving certificate (default: the host's
    /// trust roots).
    #[arg(long, value_name = "FILE")]
    pub oidc_ca_file: Option<PathBuf>,
}

impl AuthnArgs {
    /// Loads the files the flags name.
    pub fn options(&self) -> anyhow::Result<skiff_apiserver::authn::Options> {
        use skiff_apiserver::authn::{Options, oidc, token_file::TokenFile};
        let token_file = match &self.token_auth_file {
            Some(path) => Some(TokenFile::load(path, Vec::new())?),
            None => None,
        };
        let oidc = match &self.oidc_issuer_url {
            None => None,
            Some(issuer) => {
                let options = oidc::Options {
                    issuer_url: issuer.clone(),
                    client_id: self.oidc_client_id.clone().unwrap_or_default(),
                    username_claim: self.oidc_username_claim.clone(),
                    username_prefix: self.oidc_username_prefix.clone(),
                    groups_claim: self.oidc_groups_claim.clone(),
                    groups_prefix: self.oidc_groups_prefix.clone(),
                };
                let authenticator = match &self.oidc_jwks_file {
                    Some(jwks) => oidc::OidcAuthenticator::load(options, jwks, Vec::new()),
                    None => oidc::OidcAuthenticator::discover(
                        options,
                        self.oidc_ca_file.as_deref(),
                        Vec::new(),
                    ),
                };
                Some(authenticator.map_err(|e| match e {
                    oidc::Error::Issuer(_) | oidc::Error::ClientId => {
                        anyhow::Error::from(UsageError(e.to_string()))
                    }
                    e => e.into(),
                })?)
            }
        };
        Ok(Options {
            anonymous: self.anonymous_auth,
            bootstrap_tokens: self.enable_bootstrap_token_auth,
            token_file,
            oidc,
            api_audiences: self.api_audiences.clone(),
        })
    }
}

/// The embedded store's compaction for `--etcd-compaction-interval` (upstream's default when
/// absent).
fn compaction_policy(interval: Option<&str>) -> Result<CompactionPolicy, UsageError> {
    let Some(text) = interval else {
        return Ok(CompactionPolicy::default());
    };
    match skiff_apimachinery::duration::parse(text).map(u64::try_from) {
        Ok(Ok(0)) => Ok(CompactionPolicy::Disabled),
        Ok(Ok(nanos)) => Ok(CompactionPolicy::Periodic(Duration::from_nanos(nanos))),
        _ => Err(UsageError(format!(
            "--etcd-compaction-interval {text:?}: expected a duration such as 5m0s, or 0"
        ))),
    }
}

/// The store a `--datastore-endpoint` names, or the embedded one under `data_dir/store`
/// compacting as `compaction_interval` says.
pub async fn open_store(
    data_dir: &std::path::Path,
    endpoint: Option<&str>,
    compaction_interval: Option<&str>,
) -> anyhow::Result<(Arc<dyn Store>, Option<EmbeddedStore>)> {
    if endpoint.is_some() && compaction_interval.is_some() {
        return Err(UsageError(
            "--etcd-compaction-interval applies to the embedded store; etcd is compacted by its \
             own --auto-compaction-mode and --auto-compaction-retention"
                .into(),
        )
        .into());
    }
    match endpoint {
        None => {
            let dir = data_dir.join("store");
            let mut config = EmbeddedConfig::new(&dir);
            config.compaction = compaction_policy(compaction_interval)?;
            let store = EmbeddedStore::open(config)
                .await
                .with_context(|| format!("opening the store in {}", dir.display()))?;
            Ok((Arc::new(store.clone()), Some(store)))
        }
        Some(url) => {
            let Some(list) = url.strip_prefix("etcd://") else {
                return Err(UsageError(format!(
                    "--datastore-endpoint {url:?}: expected etcd://host:port[,host:port…]"
                ))
                .into());
            };
            let endpoints: Vec<String> = list.split(',').map(|h| format!("http://{h}")).collect();
            let store = EtcdStore::connect(&endpoints, "")
                .await
                .with_context(|| format!("connecting to etcd at {list}"))?;
            Ok((Arc::new(store), None))
        }
    }
}

pub async fn run(args: ApiServerArgs, lifecycle: Lifecycle) -> anyhow::Result<()> {
    let modes = skiff_apiserver::authz::parse_modes(&args.authorization_mode)
        .map_err(|e| UsageError(format!("--authorization-mode: {e}")))?;
    let authn = args.authn.options()?;
    let (store, embedded) = open_store(
        &args.data_dir,
        args.datastore_endpoint.as_deref(),
        args.etcd_compaction_interval.as_deref(),
    )
    .await?;
    let (mut gates, store) = args.gates.build(store)?;
    let config = Config {
        data_dir: args.data_dir.clone(),
        listen: SocketAddr::new(args.bind_address, args.secure_port),
        tls_sans: args.tls_san.clone(),
    };
    let listener = Listener::bind(&config).await?;
    let addr = listener.local_addr();
    let advertise = if addr.ip().is_unspecified() {
        SocketAddr::new(IpAddr::from([127, 0, 0, 1]), addr.port())
    } else {
        addr
    };
    bootstrap::run(&store, advertise)
        .await
        .context("creating the bootstrap namespaces, services and RBAC policy")?;
    bootstrap::apf::spawn_upkeep(store.clone());
    let (cert, key) = listener
        .pki
        .kubelet_client()
        .context("the kubelet client certificate")?;
    let kubelet = KubeletClient::new(&cert, &key).context("the kubelet client")?;
    gates.aggregation = Some(skiff_apiserver::aggregator::Options {
        client_ca_pem: listener.pki.ca_cert_pem.clone(),
        front_proxy: listener
            .pki
            .front_proxy()
            .context("the front-proxy CA and client certificate")?,
        recheck: skiff_apiserver::aggregator::DEFAULT_RECHECK,
    });
    let tokens = TokenIssuer::ensure(&listener.pki.dir, DEFAULT_ISSUER)
        .context("loading the service account signing key")?;
    let server =
        ApiServer::with_gates(store, kubelet, Some(Arc::new(tokens)), &modes, authn, gates)
            .await
            .context("starting the watch cache")?;
    let kubeconfig = args.data_dir.join("kubeconfig.yaml");
    lifecycle.ready(format!(
        "skiff apiserver: ready, serving https://{advertise} (kubeconfig {})",
        kubeconfig.display()
    ));
    tracing::info!(%addr, "apiserver serving");
    listener.serve(server, lifecycle.stopped()).await;
    if let Some(store) = embedded {
        store.close().await;
    }
    tracing::info!("apiserver stopped");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_compaction_interval_is_upstreams_flag_with_zero_turning_it_off() {
        assert_eq!(
            compaction_policy(None).unwrap(),
            CompactionPolicy::default()
        );
        assert_eq!(
            compaction_policy(Some("2m30s")).unwrap(),
            CompactionPolicy::Periodic(Duration::from_secs(150))
        );
        assert_eq!(
            compaction_policy(Some("0")).unwrap(),
            CompactionPolicy::Disabled
        );
        for bad in ["5", "-1m", "soon"] {
            let error = compaction_policy(Some(bad)).unwrap_err();
            assert!(error.0.contains("--etcd-compaction-interval"), "{error}");
        }
    }

    #[tokio::test]
    async fn the_compaction_interval_is_refused_with_etcd() {
        let dir = tempfile::tempdir().unwrap();
        let Err(error) = open_store(dir.path(), Some("etcd://127.0.0.1:1"), Some("5m")).await
        else {
            panic!("etcd with --etcd-compaction-interval was accepted");
        };
        assert!(error.to_string().contains("--auto-compaction"), "{error}");
    }
}
