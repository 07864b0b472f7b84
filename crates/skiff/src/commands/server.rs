//! `skiff server`: a whole cluster on this machine in one process, as k3s's `server`: the store
//! (embedded under `--data-dir`, or etcd), the API server, scheduler, controller manager and,
//! unless `--disable-agent`, a kubelet with its managed containerd, the proxy, the cluster
//! DNS, (unless `--disable ingress`) the ingress controller on ports 80 and 443 and (unless
//! `--disable metrics-server`) the metrics server behind the `metrics.k8s.io` APIService. Each
//! component is a task started through the same run function as its own subcommand,
//! with flags built as its command line would be (plus k3s's `--<component>-arg` extras), and
//! each talks to the API server over HTTPS with its own identity (`D/cred/*.kubeconfig`).
//! SIGTERM or Ctrl-C stops them in reverse order; the kubelet stops its containerd but the
//! pods' shims keep running, so a restart on the same data dir finds its pods as it left them.
//!
//! # Layout
//! - [`addons`]: the `kube-dns` Service, its endpoints and the DNS's role, the default
//!   StorageClass, and metrics-server's registration, applied every start.
//! - [`bootstrap`]: the CA and signing key shared through etcd, sealed with the token.
//! - [`supervisor`]: the component tasks, their failures and their stopping order.

pub mod addons;
pub mod bootstrap;
pub mod supervisor;

use skiff_apimachinery::version::user_agent;
use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context as _;
use clap::Args;
use k8s_openapi::api::core::v1::Node;
use skiff_apiserver::pki::Pki;
use skiff_controllers::certificates::approver::SKIFF_CONTROLLER_USER;

use super::UsageError;
use supervisor::Supervisor;

#[derive(Debug, Args)]
pub struct ServerArgs {
    /// Where the server keeps its state: certificates, the store, kubeconfigs, the agent's
    /// containerd and pods.
    #[arg(long, value_name = "DIR", default_value = "/var/lib/skiff")]
    pub data_dir: PathBuf,

    /// The address the API server listens on (and names in the kubeconfigs).
    #[arg(long, value_name = "IP", default_value = "127.0.0.1")]
    pub bind_address: IpAddr,

    /// The API server's HTTPS port.
    #[arg(long, value_name = "PORT", default_value_t = 6443,
          value_parser = clap::value_parser!(u16).range(1..))]
    pub https_port: u16,

    /// More names or IPs for the API server's certificate (comma-separated).
    #[arg(long, value_name = "NAME[,NAME]", value_delimiter = ',')]
    pub tls_san: Vec<String>,

    /// Use real etcd instead of the embedded store: `etcd://host:port[,host:port…]`. Servers
    /// sharing one etcd and one `--token` form an HA control plane.
    #[arg(long, value_name = "URL")]
    pub datastore_endpoint: Option<String>,

    /// The cluster's shared secret: with `--datastore-endpoint`, the key the CA and signing
    /// key are sealed with in etcd (required there).
    #[arg(long, value_name = "TOKEN")]
    pub token: Option<String>,

    /// Run the control plane only: no kubelet, proxy or cluster DNS on this machine.
    #[arg(long)]
    pub disable_agent: bool,

    /// Do not run a packaged component (comma-separated or repeated, k3s's flag):
    /// `local-storage` (the default StorageClass `local-path`), `servicelb` (addresses for
    /// LoadBalancer Services), `ingress` (the ingress controller; k3s's name `traefik` is
    /// accepted for it), `network-policy` (NetworkPolicy enforcement), `metrics-server` (the
    /// resource metrics API). k3s's `runtimes` is accepted and ignored: Skiff packages none.
    #[arg(long, value_name = "NAME", value_delimiter = ',',
          value_parser = ["local-storage", "servicelb", "ingress", "traefik", "network-policy",
                          "metrics-server", "runtimes"])]
    pub disable: Vec<String>,

    /// k3s's spelling of `--disable network-policy`.
    #[arg(long)]
    pub disable_network_policy: bool,

    /// This machine's Node name (default: the host name).
    #[arg(long, value_name = "NAME")]
    pub node_name: Option<String>,

    /// This node's InternalIP, where the cluster DNS listens (default: the default route's
    /// source address).
    #[arg(long, value_name = "IP")]
    pub node_ip: Option<IpAddr>,

    /// The pod network, cut into one range per node.
    #[arg(long, value_name = "CIDR", default_value = "10.42.0.0/16")]
    pub cluster_cidr: String,

    /// How pods reach pods on other nodes, k3s's flag: `vxlan` (an overlay, the default),
    /// `host-gw` (routes, nodes on one L2 network) or `none`; the agent's kubelet gets it.
    #[arg(long, value_name = "BACKEND", value_enum, default_value = "vxlan")]
    pub flannel_backend: super::kubelet::BackendArg,

    /// The Service network (the API server allocates ClusterIPs from 10.43.0.0/16 only).
    #[arg(long, value_name = "CIDR", default_value = "10.43.0.0/16")]
    pub service_cidr: String,

    /// The `kube-dns` Service's ClusterIP, written into pods' resolv.conf.
    #[arg(long, value_name = "IP", default_value = "10.43.0.10")]
    pub cluster_dns: Ipv4Addr,

    #[command(flatten)]
    pub extra: ExtraArgs,
}

/// k3s's pass-through flags: `--kubelet-arg port=0` gives the kubelet `--port=0`.
#[derive(Debug, Args)]
pub struct ExtraArgs {
    /// A flag for the API server, `name=value` (repeatable).
    #[arg(long, value_name = "FLAG")]
    pub kube_apiserver_arg: Vec<String>,
    /// A flag for the scheduler, `name=value` (repeatable).
    #[arg(long, value_name = "FLAG")]
    pub kube_scheduler_arg: Vec<String>,
    /// A flag for the controller manager, `name=value` (repeatable).
    #[arg(long, value_name = "FLAG")]
    pub kube_controller_manager_arg: Vec<String>,
    /// A flag for the kubelet, `name=value` (repeatable).
    #[arg(long, value_name = "FLAG")]
    pub kubelet_arg: Vec<String>,
    /// A flag for the proxy, `name=value` (repeatable).
    #[arg(long, value_name = "FLAG")]
    pub kube_proxy_arg: Vec<String>,
    /// A flag for the cluster DNS, `name=value` (repeatable).
    #[arg(long, value_name = "FLAG")]
    pub dns_arg: Vec<String>,
    /// A flag for the ingress controller, `name=value` (repeatable), e.g. `http-port=8080`.
    #[arg(long, value_name = "FLAG")]
    pub ingress_arg: Vec<String>,
    /// A flag for the metrics server, `name=value` (repeatable), e.g. `metric-resolution=5s`.
    #[arg(long, value_name = "FLAG")]
    pub metrics_server_arg: Vec<String>,
}

/// A component `--disable` can turn off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Packaged {
    LocalStorage,
    ServiceLb,
    Ingress,
    NetworkPolicy,
    MetricsServer,
}

impl ServerArgs {
    /// Whether `--disable` (or `--disable-network-policy`) turned `component` off.
    pub fn disabled(&self, component: Packaged) -> bool {
        let names: &[&str] = match component {
            Packaged::LocalStorage => &["local-storage"],
            Packaged::ServiceLb => &["servicelb"],
            Packaged::Ingress => &["ingress", "traefik"],
            Packaged::NetworkPolicy => &["network-policy"],
            Packaged::MetricsServer => &["metrics-server"],
        };
        (component == Packaged::NetworkPolicy && self.disable_network_policy)
            || self.disable.iter().any(|d| names.contains(&d.as_str()))
    }
}

/// The component's flags parsed from `argv` (ours, then the user's `--<component>-arg`s, which
/// win), exactly as its own subcommand would parse them.
pub(super) fn component_args<A: clap::Args>(
    name: &'static str,
    argv: Vec<String>,
    extra: &[String],
) -> anyhow::Result<A> {
    let command = A::augment_args(clap::Command::new(name)).args_override_self(true);
    let argv = std::iter::once(name.to_string())
        .chain(argv)
        .chain(extra.iter().map(|flag| format!("--{flag}")));
    let matches = command
        .try_get_matches_from(argv)
        .map_err(|e| UsageError(format!("{name} flags: {e}")))?;
    Ok(A::from_arg_matches(&matches)?)
}

fn path_arg(path: &Path) -> String {
    path.display().to_string()
}

/// The identities the components run as, one kubeconfig each under `D/cred/`.
struct Credentials {
    dir: PathBuf,
    pki: Pki,
    url: String,
}

impl Credentials {
    /// A kubeconfig for `user` (CN) in `group` (O), written unless a valid one is there.
    fn kubeconfig(&self, file: &str, user: &str, group: Option<&str>) -> anyhow::Result<String> {
        let path = self.dir.join(format!("{file}.kubeconfig"));
        self.pki
            .write_kubeconfig(&path, &self.url, user, group)
            .with_context(|| format!("writing {}", path.display()))?;
        Ok(path_arg(&path))
    }
}

/// jemalloc's configuration for the server: dirty pages returned within a second by a
/// background thread instead of jemalloc's 10 s decay (about 14 MB less resident at idle in
/// `skiff bench startup`), with the default arenas, which the API server's request threads use.
const SERVER_MALLOC_CONF: &str = "background_thread:true,dirty_decay_ms:1000,muzzy_decay_ms:0";

/// Re-executes the process with [`SERVER_MALLOC_CONF`] (see [`super::kubelet::use_malloc_conf`]).
pub fn use_small_heap() {
    super::kubelet::use_malloc_conf(SERVER_MALLOC_CONF);
}

fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_lowercase())
        .unwrap_or_else(|_| "skiff".into())
}

pub async fn run(args: ServerArgs) -> anyhow::Result<()> {
    if args.service_cidr != "10.43.0.0/16" {
        return Err(UsageError(format!(
            "--service-cidr {}: the API server allocates ClusterIPs from 10.43.0.0/16 only",
            args.service_cidr
        ))
        .into());
    }
    let mut supervisor = Supervisor::new();
    let started = start(&args, &mut supervisor).await;
    let stopped = supervisor.stop_all().await;
    println!("skiff server: stopped");
    started.and(stopped)
}

/// Starts every component, says `ready`, and serves until interrupted (Ok) or until a
/// component fails (its error).
async fn start(args: &ServerArgs, supervisor: &mut Supervisor) -> anyhow::Result<()> {
    let data_dir = &args.data_dir;
    std::fs::create_dir_all(data_dir)
        .with_context(|| format!("creating {}", data_dir.display()))?;
    let tls_dir = data_dir.join("tls");
    let endpoints = match &args.datastore_endpoint {
        None => None,
        Some(url) => Some(etcd_endpoints(url)?),
    };
    if let Some(endpoints) = &endpoints {
        let token = args
            .token
            .as_deref()
            .filter(|t| !t.is_empty())
            .ok_or_else(|| {
                UsageError("--datastore-endpoint needs --token (the same on every server)".into())
            })?;
        let outcome = supervisor
            .guard(bootstrap::sync(endpoints, token, &tls_dir))
            .await?;
        let Some(outcome) = outcome else {
            return Ok(());
        };
        println!(
            "skiff server: cluster CA {} etcd",
            match outcome {
                bootstrap::Outcome::Stored => "created and stored in",
                bootstrap::Outcome::Loaded => "loaded from",
            }
        );
    }

    // the API server (and the embedded store under it)
    let host = if args.bind_address.is_unspecified() {
        IpAddr::from([127, 0, 0, 1])
    } else {
        args.bind_address
    };
    let url = format!(
        "https://{}",
        std::net::SocketAddr::new(host, args.https_port)
    );
    let mut argv = vec![
        "--data-dir".into(),
        path_arg(data_dir),
        "--bind-address".into(),
        args.bind_address.to_string(),
        "--secure-port".into(),
        args.https_port.to_string(),
    ];
    if let Some(endpoint) = &args.datastore_endpoint {
        argv.extend(["--datastore-endpoint".into(), endpoint.clone()]);
    }
    if !args.tls_san.is_empty() {
        argv.extend(["--tls-san".into(), args.tls_san.join(",")]);
    }
    let apiserver_args = component_args("apiserver", argv, &args.extra.kube_apiserver_arg)?;
    println!("skiff server: starting the API server on {url}");
    supervisor.spawn("apiserver", |lifecycle| {
        super::apiserver::run(apiserver_args, lifecycle)
    });
    let admin_kubeconfig = data_dir.join("kubeconfig.yaml");
    let Some(admin) = supervisor.guard(serving(&admin_kubeconfig, &url)).await? else {
        return Ok(());
    };

    let node = args.node_name.clone().unwrap_or_else(host_name);
    let credentials = Credentials {
        dir: data_dir.join("cred"),
        pki: Pki::load(&tls_dir).context("loading the cluster CA")?,
        url: url.clone(),
    };
    std::fs::create_dir_all(&credentials.dir)
        .with_context(|| format!("creating {}", credentials.dir.display()))?;
    let cluster_dns = IpAddr::V4(args.cluster_dns);
    if supervisor
        .guard(addons::ensure_dns_service(&admin, cluster_dns))
        .await?
        .is_none()
    {
        return Ok(());
    }
    if !args.disabled(Packaged::LocalStorage)
        && supervisor
            .guard(addons::ensure_local_storage(&admin))
            .await?
            .is_none()
    {
        return Ok(());
    }
    if !args.disabled(Packaged::Ingress)
        && supervisor
            .guard(addons::ensure_ingress_class(&admin))
            .await?
            .is_none()
    {
        return Ok(());
    }
    let node_config = super::node_config::NodeConfig {
        flannel_backend: args.flannel_backend,
        network_policy: !args.disabled(Packaged::NetworkPolicy),
        ingress: !args.disabled(Packaged::Ingress),
    };
    if supervisor
        .guard(addons::publish_node_config(&admin, node_config))
        .await?
        .is_none()
    {
        return Ok(());
    }

    let prepared =
        super::token::prepare_joins(admin.clone(), &credentials.pki.ca_cert_pem, data_dir);
    let Some(token) = supervisor.guard(prepared).await? else {
        return Ok(());
    };
    println!(
        "skiff server: join token in {}: skiff agent --server {url} --token {token}",
        data_dir.join("token").display()
    );

    let kubeconfig =
        credentials.kubeconfig("controller-manager", "system:kube-controller-manager", None)?;
    let mut cm_argv: Vec<String> = vec![
        "--kubeconfig".into(),
        kubeconfig,
        "--use-service-account-credentials=true".into(),
        "--allocate-node-cidrs=true".into(),
        "--cluster-cidr".into(),
        args.cluster_cidr.clone(),
        "--cluster-signing-cert-file".into(),
        path_arg(&tls_dir.join("ca.crt")),
        "--cluster-signing-key-file".into(),
        path_arg(&tls_dir.join("ca.key")),
    ];
    // k3s's `--disable servicelb`: the controller that gives LoadBalancers node addresses
    if args.disabled(Packaged::ServiceLb) {
        cm_argv.push("--controllers=*,-servicelb".into());
    }
    let cm_args = component_args(
        "controller-manager",
        cm_argv,
        &args.extra.kube_controller_manager_arg,
    )?;
    supervisor.spawn("controller-manager", |lifecycle| {
        super::controller_manager::run(cm_args, lifecycle)
    });
    let kubeconfig = credentials.kubeconfig("scheduler", "system:kube-scheduler", None)?;
    let scheduler_args = component_args(
        "scheduler",
        vec!["--kubeconfig".into(), kubeconfig],
        &args.extra.kube_scheduler_arg,
    )?;
    supervisor.spawn("scheduler", |lifecycle| {
        super::scheduler::run(scheduler_args, lifecycle)
    });

    if args.disable_agent {
        println!(
            "skiff server: ready: control plane serving {url} (kubeconfig {})",
            admin_kubeconfig.display()
        );
        supervisor
            .guard(std::future::pending::<anyhow::Result<()>>())
            .await?;
        return Ok(());
    }

    let node_ip = args
        .node_ip
        .unwrap_or_else(|| skiff_kubelet::host::HostInfo::read(None, data_dir).ip);
    let kubeconfig = credentials.kubeconfig(
        "kubelet",
        &format!("system:node:{node}"),
        Some("system:nodes"),
    )?;
    let kubelet_args = component_args(
        "kubelet",
        vec![
            "--kubeconfig".into(),
            kubeconfig,
            "--node-name".into(),
            node.clone(),
            "--node-ip".into(),
            node_ip.to_string(),
            "--data-dir".into(),
            path_arg(&data_dir.join("agent")),
            "--cluster-dns".into(),
            cluster_dns.to_string(),
            "--cluster-cidr".into(),
            args.cluster_cidr.clone(),
            "--flannel-backend".into(),
            args.flannel_backend.flag_value(),
        ],
        &args.extra.kubelet_arg,
    )?;
    println!("skiff server: starting the agent: node {node} ({node_ip})");
    supervisor.spawn("kubelet", |lifecycle| {
        super::kubelet::run(kubelet_args, lifecycle)
    });
    let kubeconfig = credentials.kubeconfig(
        "dns",
        "system:serviceaccount:kube-system:kube-dns",
        Some("system:serviceaccounts"),
    )?;
    let dns_args = component_args(
        "dns",
        vec![
            "--kubeconfig".into(),
            kubeconfig,
            "--listen".into(),
            std::net::SocketAddr::new(node_ip, 53).to_string(),
            "--metrics-bind-address".into(),
            std::net::SocketAddr::new(node_ip, 9153).to_string(),
        ],
        &args.extra.dns_arg,
    )?;
    supervisor.spawn("dns", |lifecycle| super::dns::run(dns_args, lifecycle));
    if supervisor
        .guard(addons::ensure_dns_endpoints(&admin, &node, node_ip))
        .await?
        .is_none()
    {
        return Ok(());
    }
    let kubeconfig = credentials.kubeconfig("proxy", "system:kube-proxy", None)?;
    let proxy_args = component_args(
        "proxy",
        vec![
            "--kubeconfig".into(),
            kubeconfig,
            "--node-name".into(),
            node.clone(),
            "--cluster-cidr".into(),
            args.cluster_cidr.clone(),
        ],
        &args.extra.kube_proxy_arg,
    )?;
    supervisor.spawn("proxy", |lifecycle| {
        super::proxy::run(proxy_args, lifecycle)
    });
    if !args.disabled(Packaged::MetricsServer) {
        let kubeconfig = credentials.kubeconfig(
            "metrics-server",
            addons::METRICS_SERVER_USER,
            Some("system:serviceaccounts"),
        )?;
        let metrics_args: super::metrics_server::MetricsServerArgs = component_args(
            "metrics-server",
            vec![
                "--kubeconfig".into(),
                kubeconfig,
                "--bind-address".into(),
                node_ip.to_string(),
            ],
            &args.extra.metrics_server_arg,
        )?;
        let port = metrics_args.secure_port;
        supervisor.spawn("metrics-server", |lifecycle| {
            super::metrics_server::run(metrics_args, lifecycle)
        });
        let registered = addons::ensure_metrics_server(&admin, &node, node_ip, port);
        if supervisor.guard(registered).await?.is_none() {
            return Ok(());
        }
    }
    // the node's own controllers (k3s's run as system:k3s-controller)
    let controller_kubeconfig =
        credentials.kubeconfig("skiff-controller", SKIFF_CONTROLLER_USER, None)?;
    if !args.disabled(Packaged::NetworkPolicy) {
        let netpol_args = component_args(
            "network-policy",
            vec![
                "--kubeconfig".into(),
                controller_kubeconfig.clone(),
                "--node-name".into(),
                node.clone(),
            ],
            &[],
        )?;
        supervisor.spawn("network-policy", |lifecycle| {
            super::network_policy::run(netpol_args, lifecycle)
        });
    }
    if !args.disabled(Packaged::Ingress) {
        let ingress_args = component_args(
            "ingress",
            vec![
                "--kubeconfig".into(),
                controller_kubeconfig,
                "--node-name".into(),
                node.clone(),
            ],
            &args.extra.ingress_arg,
        )?;
        supervisor.spawn("ingress", |lifecycle| {
            super::ingress::run(ingress_args, lifecycle)
        });
    }

    println!("skiff server: waiting for node {node} to report Ready");
    if supervisor.guard(node_ready(&admin, &node)).await?.is_none() {
        return Ok(());
    }
    println!(
        "skiff server: ready: node {node} Ready, serving {url} (kubeconfig {})",
        admin_kubeconfig.display()
    );
    supervisor
        .guard(std::future::pending::<anyhow::Result<()>>())
        .await?;
    Ok(())
}

/// `etcd://host:port[,host:port…]` as etcd client endpoints.
fn etcd_endpoints(url: &str) -> anyhow::Result<Vec<String>> {
    let list = url.strip_prefix("etcd://").ok_or_else(|| {
        UsageError(format!(
            "--datastore-endpoint {url:?}: expected etcd://host:port[,host:port…]"
        ))
    })?;
    Ok(list.split(',').map(|h| format!("http://{h}")).collect())
}

/// How often the server asks whether the API server serves and the node is Ready.
const POLL: Duration = Duration::from_millis(50);

/// An admin client once the API server at `url` answers (the kubeconfig it writes names it).
async fn serving(kubeconfig: &Path, url: &str) -> anyhow::Result<kube::Client> {
    loop {
        let written = std::fs::read_to_string(kubeconfig)
            .is_ok_and(|text| text.contains(&format!("server: {url}\n")));
        if written {
            let config = super::kube_config(kubeconfig).await?;
            let client = skiff_runtime::http2::client(config, &user_agent("skiff-server"))?;
            if client.apiserver_version().await.is_ok() {
                return Ok(client);
            }
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Resolves once the Node's Ready condition is True.
async fn node_ready(client: &kube::Client, name: &str) -> anyhow::Result<()> {
    let nodes = kube::Api::<Node>::all(client.clone());
    loop {
        let node = nodes.get_opt(name).await.ok().flatten();
        let ready = node
            .and_then(|n| n.status?.conditions)
            .is_some_and(|conditions| {
                conditions
                    .iter()
                    .any(|c| c.type_ == "Ready" && c.status == "True")
            });
        if ready {
            return Ok(());
        }
        tokio::time::sleep(POLL).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn component_flags_parse_as_their_subcommand_does_and_extras_win() {
        let args: super::super::scheduler::SchedulerArgs = component_args(
            "scheduler",
            vec!["--kubeconfig".into(), "/d/cred/scheduler.kubeconfig".into()],
            &[
                "metrics-bind-address=127.0.0.1:0".into(),
                "leader-elect=false".into(),
            ],
        )
        .unwrap();
        assert_eq!(args.kubeconfig, Path::new("/d/cred/scheduler.kubeconfig"));
        assert_eq!(args.metrics_bind_address.port(), 0);
        assert!(!args.leader_elect);

        let args: super::super::proxy::ProxyArgs = component_args(
            "proxy",
            vec!["--kubeconfig=k".into(), "--node-name=a".into()],
            &["node-name=b".into()],
        )
        .unwrap();
        assert_eq!(args.node_name, "b");

        // the controller manager's metrics default to upstream's secure port, 10257
        let cm = |extra: &[String]| {
            component_args::<super::super::controller_manager::ControllerManagerArgs>(
                "controller-manager",
                vec!["--kubeconfig=k".into()],
                extra,
            )
            .unwrap()
            .metrics_bind_address
            .to_string()
        };
        assert_eq!(cm(&[]), "127.0.0.1:10257");
        assert_eq!(
            cm(&["metrics-bind-address=127.0.0.1:0".into()]),
            "127.0.0.1:0"
        );

        let bad = component_args::<super::super::proxy::ProxyArgs>(
            "proxy",
            vec!["--kubeconfig=k".into(), "--node-name=a".into()],
            &["no-such-flag=1".into()],
        )
        .unwrap_err();
        assert!(bad.downcast_ref::<UsageError>().is_some(), "{bad}");
    }

    #[test]
    fn datastore_endpoints_are_etcd_urls() {
        assert_eq!(
            etcd_endpoints("etcd://127.0.0.1:2379,10.0.0.2:2379").unwrap(),
            ["http://127.0.0.1:2379", "http://10.0.0.2:2379"]
        );
        assert!(etcd_endpoints("http://127.0.0.1:2379").is_err());
    }

    #[test]
    fn disable_takes_k3s_names() {
        let args = component_args::<ServerArgs>(
            "server",
            vec!["--disable=traefik,servicelb".into()],
            &["disable-network-policy".into()],
        )
        .unwrap();
        assert!(args.disabled(Packaged::Ingress));
        assert!(args.disabled(Packaged::ServiceLb));
        assert!(args.disabled(Packaged::NetworkPolicy));
        assert!(!args.disabled(Packaged::LocalStorage));
        let args = component_args::<ServerArgs>("server", vec![], &[]).unwrap();
        assert!(!args.disabled(Packaged::NetworkPolicy));
        assert!(
            component_args::<ServerArgs>("server", vec!["--disable=nope".into()], &[]).is_err()
        );
    }
}
