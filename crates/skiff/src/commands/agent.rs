//! `skiff agent`: joins this machine to a cluster as a node, as upstream's kubelet TLS
//! bootstrap does and k3s's agent presents it. With a join token `K10<ca hash>::<id>.<secret>`
//! ([`super::token`]) it fetches the cluster CA from `kube-public/cluster-info` over a
//! connection it does not yet trust and refuses it unless its sha256 is the token's; then, as
//! the bootstrap token, it asks by CertificateSigningRequests for the node's client certificate
//! (`system:node:<name>` in `system:nodes`, signer `kube-apiserver-client-kubelet`) and the
//! proxy's (`system:kube-proxy`, signer `kube-apiserver-client`) and its node controllers'
//! (`system:skiff-controller`, the same signer), which the controller manager's `csrapproving`
//! and `csrsigning` approve and issue. The kubeconfigs it writes under the data dir are reused
//! while their certificates are valid. It reads the node settings the server publishes
//! ([`super::node_config`]: the pod network backend, which node controllers run). Then it runs
//! the kubelet (with its managed containerd), the proxy, the network policy controller and the
//! ingress controller, the same code as `skiff kubelet`, `skiff proxy`, `skiff network-policy`
//! and `skiff ingress`, and prints a `ready` line once its Node is Ready.

use skiff_apimachinery::version::user_agent;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context as _, bail};
use base64::Engine as _;
use clap::Args;
use k8s_openapi::ByteString;
use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequest, CertificateSigningRequestSpec,
};
use k8s_openapi::api::core::v1::{ConfigMap, Node};
use kube::Api;
use kube::api::{ObjectMeta, PostParams};

use super::ingress::IngressArgs;
use super::kubelet::{BackendArg, KubeletArgs};
use super::lifecycle::Lifecycle;
use super::network_policy::NetworkPolicyArgs;
use super::node_config::{self, NodeConfig};
use super::proxy::ProxyArgs;
use super::store::shutdown_signal;
use super::token::{self, JoinToken};

#[derive(Debug, Args)]
pub struct AgentArgs {
    /// The API server to join (`https://IP:6443`).
    #[arg(long, value_name = "URL")]
    pub server: String,

    /// The join token `skiff server` keeps in `D/token` (or `skiff token create` prints).
    #[arg(long, value_name = "TOKEN")]
    pub token: String,

    /// This node's name (default: the host name).
    #[arg(long, value_name = "NAME")]
    pub node_name: Option<String>,

    /// Where the agent keeps its certificates, kubeconfigs and the kubelet's state.
    #[arg(long, value_name = "DIR", default_value = "/var/lib/skiff-agent")]
    pub data_dir: PathBuf,

    /// The node's InternalIP; detected from the default route when not given.
    #[arg(long, value_name = "IP")]
    pub node_ip: Option<IpAddr>,

    /// Cluster DNS servers for ClusterFirst pods (k3s's Service address for it by default).
    #[arg(
        long,
        value_name = "IP[,IP]",
        value_delimiter = ',',
        default_value = "10.43.0.10"
    )]
    pub cluster_dns: Vec<IpAddr>,

    /// How pods reach pods on other nodes (see `skiff server --flannel-backend`); by default
    /// the server's, as k3s's agent takes it.
    #[arg(long, value_name = "BACKEND", value_enum)]
    pub flannel_backend: Option<BackendArg>,

    /// A flag for the kubelet, `name=value` (repeatable), as k3s's.
    #[arg(long, value_name = "FLAG")]
    pub kubelet_arg: Vec<String>,

    /// A flag for the proxy, `name=value` (repeatable), as k3s's.
    #[arg(long, value_name = "FLAG")]
    pub kube_proxy_arg: Vec<String>,
}

/// The kubeconfig files under the data dir.
const KUBELET_KUBECONFIG: &str = "kubelet.kubeconfig";
const PROXY_KUBECONFIG: &str = "kube-proxy.kubeconfig";
const CONTROLLER_KUBECONFIG: &str = "skiff-controller.kubeconfig";
const KUBELET_CLIENT_SIGNER: &str = "kubernetes.io/kube-apiserver-client-kubelet";
const CLIENT_SIGNER: &str = "kubernetes.io/kube-apiserver-client";
/// A certificate with less than this left is asked for again at start.
const RENEW_BEFORE: Duration = Duration::from_secs(3600);

/// One identity the agent obtains: its subject, signer and file.
struct Identity {
    common_name: String,
    organization: Option<&'static str>,
    signer: &'static str,
    /// `generateName` of its request.
    request_prefix: &'static str,
    file: &'static str,
}

pub async fn run(args: AgentArgs) -> anyhow::Result<()> {
    let token: JoinToken = args
        .token
        .parse()
        .map_err(|e: String| super::UsageError(format!("--token: {e}")))?;
    let node = match args.node_name.clone() {
        Some(n) if n.is_empty() => {
            return Err(super::UsageError("--node-name must not be empty".into()).into());
        }
        Some(n) => n,
        None => hostname()?,
    };
    let server = args.server.trim_end_matches('/').to_string();
    std::fs::create_dir_all(&args.data_dir)
        .with_context(|| format!("creating {}", args.data_dir.display()))?;
    ensure_identities(&args.data_dir, &server, &token, &node).await?;

    let kubelet_kubeconfig = args.data_dir.join(KUBELET_KUBECONFIG);
    let node_client = client_from(&std::fs::read_to_string(&kubelet_kubeconfig)?).await?;
    let cluster = match node_config::read(node_client.clone()).await? {
        Some(config) => config,
        None => {
            println!(
                "skiff agent: the server publishes no {}/{}: using the defaults",
                node_config::NAMESPACE,
                node_config::NAME
            );
            NodeConfig::default()
        }
    };
    let disabled = cluster.disabled();
    if !disabled.is_empty() {
        println!(
            "skiff agent: the server disabled {}: not running them",
            disabled.join(", ")
        );
    }
    let flannel_backend = args.flannel_backend.unwrap_or(cluster.flannel_backend);
    let mut kubelet_argv: Vec<String> = vec![
        "--kubeconfig".into(),
        kubelet_kubeconfig.display().to_string(),
        "--node-name".into(),
        node.clone(),
        "--data-dir".into(),
        args.data_dir.display().to_string(),
        "--cluster-dns".into(),
        args.cluster_dns
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(","),
        "--flannel-backend".into(),
        flannel_backend.flag_value(),
    ];
    if let Some(ip) = args.node_ip {
        kubelet_argv.extend(["--node-ip".into(), ip.to_string()]);
    }
    let kubelet_args: KubeletArgs =
        super::server::component_args("kubelet", kubelet_argv, &args.kubelet_arg)?;
    let proxy_argv = vec![
        "--kubeconfig".into(),
        args.data_dir.join(PROXY_KUBECONFIG).display().to_string(),
        "--node-name".into(),
        node.clone(),
    ];
    let proxy_args: ProxyArgs =
        super::server::component_args("proxy", proxy_argv, &args.kube_proxy_arg)?;
    let controller_kubeconfig = args
        .data_dir
        .join(CONTROLLER_KUBECONFIG)
        .display()
        .to_string();
    let controller_argv = vec![
        "--kubeconfig".into(),
        controller_kubeconfig,
        "--node-name".into(),
        node.clone(),
    ];
    let netpol_args: Option<NetworkPolicyArgs> = cluster
        .network_policy
        .then(|| super::server::component_args("network-policy", controller_argv.clone(), &[]))
        .transpose()?;
    let ingress_args: Option<IngressArgs> = cluster
        .ingress
        .then(|| super::server::component_args("ingress", controller_argv, &[]))
        .transpose()?;

    let nodes: Api<Node> = Api::all(node_client);
    let started = jiff::Timestamp::now();
    // all stop on SIGTERM or Ctrl-C; the first error stops the agent
    let components = async {
        tokio::try_join!(
            async {
                super::kubelet::run(kubelet_args, Lifecycle::standalone())
                    .await
                    .context("the kubelet")
            },
            async {
                super::proxy::run(proxy_args, Lifecycle::standalone())
                    .await
                    .context("the proxy")
            },
            // the node controllers the server turned off are not run
            async {
                match netpol_args {
                    Some(args) => super::network_policy::run(args, Lifecycle::standalone())
                        .await
                        .context("the network policy controller"),
                    None => Ok(()),
                }
            },
            async {
                match ingress_args {
                    Some(args) => super::ingress::run(args, Lifecycle::standalone())
                        .await
                        .context("the ingress controller"),
                    None => Ok(()),
                }
            },
        )
    };
    let announce = async {
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        loop {
            tick.tick().await;
            if node_ready(&nodes, &node, started).await {
                break;
            }
        }
        println!("skiff agent ready: node {node} joined {server}");
        std::future::pending::<std::convert::Infallible>().await
    };
    tokio::select! {
        r = components => r.map(|_| ()),
        never = announce => match never {},
    }
}

/// Makes sure the data dir holds the kubelet's, the proxy's and the network policy controller's
/// kubeconfigs with certificates valid for a while: reused if so, otherwise asked for with the
/// join token (the CA checked first, once).
async fn ensure_identities(
    data_dir: &Path,
    server: &str,
    token: &JoinToken,
    node: &str,
) -> anyhow::Result<()> {
    let identities = [
        Identity {
            common_name: format!("system:node:{node}"),
            organization: Some("system:nodes"),
            signer: KUBELET_CLIENT_SIGNER,
            request_prefix: "node-csr-",
            file: KUBELET_KUBECONFIG,
        },
        Identity {
            common_name: "system:kube-proxy".into(),
            organization: None,
            signer: CLIENT_SIGNER,
            request_prefix: "kube-proxy-csr-",
            file: PROXY_KUBECONFIG,
        },
        Identity {
            common_name: skiff_controllers::certificates::approver::SKIFF_CONTROLLER_USER.into(),
            organization: None,
            signer: CLIENT_SIGNER,
            request_prefix: "skiff-controller-csr-",
            file: CONTROLLER_KUBECONFIG,
        },
    ];
    let mut bootstrap: Option<(kube::Client, String)> = None;
    for identity in &identities {
        let path = data_dir.join(identity.file);
        if let Some(left) = still_valid(&path, server)? {
            println!(
                "skiff agent: reusing {} ({}, valid for {}h more)",
                path.display(),
                identity.common_name,
                left.as_secs() / 3600
            );
            continue;
        }
        let (client, ca_pem) = match &bootstrap {
            Some(b) => b.clone(),
            None => {
                let ca_pem = fetch_verified_ca(server, token).await?;
                println!(
                    "skiff agent: the cluster CA from {server} matches the token (sha256 {})",
                    token.ca_hash
                );
                let yaml = kubeconfig(
                    server,
                    &ca_pem,
                    &format!("    token: {}\n", token.bootstrap_token()),
                );
                let b = (client_from(&yaml).await?, ca_pem);
                bootstrap = Some(b.clone());
                b
            }
        };
        let yaml = obtain(&client, identity, server, &ca_pem).await?;
        skiff_apiserver::pki::write_private(&path, &yaml)?;
    }
    Ok(())
}

/// Whether the Node is Ready by a heartbeat of this run's kubelet (one at or after `since`,
/// whole seconds: a restarted agent's Node still shows the last run's).
async fn node_ready(nodes: &Api<Node>, name: &str, since: jiff::Timestamp) -> bool {
    let Ok(Some(node)) = nodes.get_opt(name).await else {
        return false;
    };
    node.status.and_then(|s| s.conditions).is_some_and(|cs| {
        cs.iter().any(|c| {
            c.type_ == "Ready"
                && c.status == "True"
                && c.last_heartbeat_time
                    .as_ref()
                    .is_some_and(|t| t.0.as_second() >= since.as_second())
        })
    })
}

fn hostname() -> anyhow::Result<String> {
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .context("reading the host name (or give --node-name)")?;
    Ok(name.trim().to_ascii_lowercase())
}

/// Fetches the CA from `kube-public/cluster-info` without trusting the connection, and returns
/// it only if its sha256 is the token's.
async fn fetch_verified_ca(server: &str, token: &JoinToken) -> anyhow::Result<String> {
    let url: http::Uri = server
        .parse()
        .map_err(|e| super::UsageError(format!("--server {server}: {e}")))?;
    let mut config = kube::Config::new(url);
    // nothing is trusted yet: the hash below is what makes the answer trustworthy
    config.accept_invalid_certs = true;
    config.connect_timeout = Some(Duration::from_secs(10));
    let client = kube::Client::try_from(config)?;
    let configmaps: Api<ConfigMap> = Api::namespaced(client, token::CLUSTER_INFO_NAMESPACE);
    let info = configmaps.get(token::CLUSTER_INFO).await.with_context(|| {
        format!(
            "reading {}/{} from {server}",
            token::CLUSTER_INFO_NAMESPACE,
            token::CLUSTER_INFO
        )
    })?;
    let text = info
        .data
        .as_ref()
        .and_then(|d| d.get(token::CLUSTER_INFO_KEY))
        .with_context(|| {
            format!(
                "{}: no {} key",
                token::CLUSTER_INFO,
                token::CLUSTER_INFO_KEY
            )
        })?;
    let kubeconfig = kube::config::Kubeconfig::from_yaml(text)
        .with_context(|| format!("{}: its kubeconfig", token::CLUSTER_INFO))?;
    let data = kubeconfig
        .clusters
        .first()
        .and_then(|c| c.cluster.as_ref())
        .and_then(|c| c.certificate_authority_data.clone())
        .with_context(|| format!("{}: no certificate-authority-data", token::CLUSTER_INFO))?;
    let pem = base64::engine::general_purpose::STANDARD
        .decode(data.trim())
        .context("decoding the cluster CA")?;
    let hash = token::ca_hash(&pem);
    if hash != token.ca_hash {
        bail!(
            "the cluster CA served by {server} has sha256 {hash}, but the token is for a CA with sha256 {}: refusing to join (wrong --server, or a wrong or stale token)",
            token.ca_hash
        );
    }
    String::from_utf8(pem).context("the cluster CA is not PEM text")
}

/// A kubeconfig for `server` trusting `ca_pem`, with `user` (indented YAML lines of the user).
fn kubeconfig(server: &str, ca_pem: &str, user: &str) -> String {
    let ca = base64::engine::general_purpose::STANDARD.encode(ca_pem);
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: skiff\n  cluster:\n    server: {server}\n    certificate-authority-data: {ca}\ncontexts:\n- name: skiff\n  context:\n    cluster: skiff\n    user: agent\ncurrent-context: skiff\npreferences: {{}}\nusers:\n- name: agent\n  user:\n{user}"
    )
}

async fn client_from(yaml: &str) -> anyhow::Result<kube::Client> {
    let kubeconfig = kube::config::Kubeconfig::from_yaml(yaml).context("a kubeconfig")?;
    let config = kube::Config::from_custom_kubeconfig(
        kubeconfig,
        &kube::config::KubeConfigOptions::default(),
    )
    .await
    .context("loading a kubeconfig")?;
    Ok(skiff_runtime::http2::client(
        config,
        &user_agent("kubelet"),
    )?)
}

/// How long the client certificate of the kubeconfig at `path` stays valid, if it is for
/// `server` and has more than [`RENEW_BEFORE`] left.
fn still_valid(path: &Path, server: &str) -> anyhow::Result<Option<Duration>> {
    let Ok(text) = std::fs::read_to_string(path) else {
        return Ok(None);
    };
    if !text.contains(&format!("server: {server}\n")) {
        return Ok(None);
    }
    let Ok(kubeconfig) = kube::config::Kubeconfig::from_yaml(&text) else {
        return Ok(None);
    };
    let Some(data) = kubeconfig
        .auth_infos
        .first()
        .and_then(|a| a.auth_info.as_ref())
        .and_then(|a| a.client_certificate_data.clone())
    else {
        return Ok(None);
    };
    let Ok(pem) = base64::engine::general_purpose::STANDARD.decode(data.trim()) else {
        return Ok(None);
    };
    let Ok((_, block)) = x509_parser::pem::parse_x509_pem(&pem) else {
        return Ok(None);
    };
    let Ok(cert) = block.parse_x509() else {
        return Ok(None);
    };
    let now = jiff::Timestamp::now().as_second();
    let left = cert.validity().not_after.timestamp() - now;
    Ok(u64::try_from(left)
        .ok()
        .map(Duration::from_secs)
        .filter(|left| *left > RENEW_BEFORE))
}

/// Asks for `identity`'s certificate and waits until it is issued; its kubeconfig.
async fn obtain(
    client: &kube::Client,
    identity: &Identity,
    server: &str,
    ca_pem: &str,
) -> anyhow::Result<String> {
    let key = rcgen::KeyPair::generate().context("generating a key")?;
    let mut params = rcgen::CertificateParams::default();
    if let Some(o) = identity.organization {
        params
            .distinguished_name
            .push(rcgen::DnType::OrganizationName, o);
    }
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, identity.common_name.as_str());
    let request = params
        .serialize_request(&key)
        .and_then(|r| r.pem())
        .context("making a certificate request")?;
    let csr = CertificateSigningRequest {
        metadata: ObjectMeta {
            generate_name: Some(identity.request_prefix.into()),
            ..Default::default()
        },
        spec: CertificateSigningRequestSpec {
            request: ByteString(request.into_bytes()),
            signer_name: identity.signer.into(),
            // an ECDSA key: no key encipherment (upstream's kubelet asks the same)
            usages: Some(vec!["digital signature".into(), "client auth".into()]),
            ..Default::default()
        },
        status: None,
    };
    let requests: Api<CertificateSigningRequest> = Api::all(client.clone());
    let created = requests
        .create(&PostParams::default(), &csr)
        .await
        .with_context(|| {
            format!(
                "creating a CertificateSigningRequest for {}",
                identity.common_name
            )
        })?;
    let name = created.metadata.name.clone().unwrap_or_default();
    println!(
        "skiff agent: asked for a certificate for {} (CertificateSigningRequest {name}, signer {}); waiting for it to be approved and issued",
        identity.common_name, identity.signer
    );
    let certificate = tokio::select! {
        c = issued(&requests, &name) => c?,
        () = shutdown_signal() => bail!("stopped while waiting for CertificateSigningRequest {name}"),
    };
    println!("skiff agent: CertificateSigningRequest {name} issued");
    let b64 = |s: &[u8]| base64::engine::general_purpose::STANDARD.encode(s);
    let user = format!(
        "    client-certificate-data: {}\n    client-key-data: {}\n",
        b64(&certificate),
        b64(key.serialize_pem().as_bytes())
    );
    Ok(kubeconfig(server, ca_pem, &user))
}

/// The certificate of request `name` once issued; an error if it is denied or fails.
async fn issued(requests: &Api<CertificateSigningRequest>, name: &str) -> anyhow::Result<Vec<u8>> {
    let mut tick = tokio::time::interval(Duration::from_millis(500));
    loop {
        tick.tick().await;
        let csr = match requests.get(name).await {
            Ok(csr) => csr,
            Err(e) => {
                tracing::warn!(csr = name, error = %e, "reading the request; will retry");
                continue;
            }
        };
        let status = csr.status.unwrap_or_default();
        if let Some(cert) = status.certificate.filter(|c| !c.0.is_empty()) {
            return Ok(cert.0);
        }
        for c in status.conditions.unwrap_or_default() {
            if (c.type_ == "Denied" || c.type_ == "Failed") && c.status != "False" {
                bail!(
                    "CertificateSigningRequest {name} {}: {} {}",
                    c.type_.to_lowercase(),
                    c.reason.unwrap_or_default(),
                    c.message.unwrap_or_default()
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kubeconfig_without_a_valid_certificate_for_the_server_is_not_reused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("k");
        assert_eq!(still_valid(&path, "https://x:6443").unwrap(), None);
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::default();
        params.not_before = rcgen::date_time_ymd(2020, 1, 1);
        params.not_after = rcgen::date_time_ymd(2100, 1, 1);
        let cert = params.self_signed(&key).unwrap();
        let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
        let user = format!(
            "    client-certificate-data: {}\n    client-key-data: {}\n",
            b64(&cert.pem()),
            b64(&key.serialize_pem())
        );
        std::fs::write(&path, kubeconfig("https://x:6443", "CA", &user)).unwrap();
        assert!(still_valid(&path, "https://x:6443").unwrap().is_some());
        assert_eq!(still_valid(&path, "https://y:6443").unwrap(), None);
        params.not_after = rcgen::date_time_ymd(2021, 1, 1);
        let expired = params.self_signed(&key).unwrap();
        let user = format!(
            "    client-certificate-data: {}\n    client-key-data: {}\n",
            b64(&expired.pem()),
            b64(&key.serialize_pem())
        );
        std::fs::write(&path, kubeconfig("https://x:6443", "CA", &user)).unwrap();
        assert_eq!(still_valid(&path, "https://x:6443").unwrap(), None);
    }
}
