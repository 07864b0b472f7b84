//! `skiff kubelet`: the node agent on its own, an ordinary API client (seed 000): it registers
//! its Node, watches the pods bound to it and runs them through containerd's CRI (a managed
//! containerd unless `--container-runtime-endpoint` names one). With `--hollow` it runs
//! `--count` simulated nodes instead, as kubemark's hollow nodes: the same kubelet code against
//! an in-memory runtime, no containerd.

use skiff_apimachinery::version::user_agent;
use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use skiff_kubelet::dns::DnsSettings;
use skiff_kubelet::hollow::{self, HollowNodes};
use skiff_kubelet::hollow_runtime::Behaviour;
use skiff_kubelet::kubelet_config::{self, KubeletConfiguration};
use skiff_kubelet::{Config, FlannelBackend, Kubelet};

use super::lifecycle::Lifecycle;

#[derive(Debug, Args)]
pub struct KubeletArgs {
    /// Kubeconfig with the API server's address and the kubelet's credentials.
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: PathBuf,

    /// The Node this kubelet registers and whose pods it runs.
    #[arg(long, value_name = "NAME", required_unless_present = "hollow")]
    pub node_name: Option<String>,

    /// Where the kubelet keeps its state: the managed containerd, container logs, images.
    #[arg(long, value_name = "DIR", default_value = "/var/lib/skiff")]
    pub data_dir: PathBuf,

    /// A CRI endpoint (`unix:///run/containerd/containerd.sock`) to use instead of starting
    /// a managed containerd.
    #[arg(long, value_name = "URL")]
    pub container_runtime_endpoint: Option<String>,

    /// The pod CIDR of this node's CNI bridge, unless the Node already has `spec.podCIDR`;
    /// without it the kubelet waits for the controller manager's node-ipam to assign one.
    #[arg(long, value_name = "CIDR")]
    pub pod_cidr: Option<String>,

    /// The node's InternalIP; detected from the default route when not given.
    #[arg(long, value_name = "IP")]
    pub node_ip: Option<IpAddr>,

    /// A KubeletConfiguration file (`kubelet.config.k8s.io/v1beta1`, YAML or JSON); flags given
    /// on the command line win over it, as upstream's.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,

    /// A directory of static pod manifests, run on this node and mirrored to the API server.
    #[arg(long, value_name = "DIR")]
    pub pod_manifest_path: Option<PathBuf>,

    /// How often the static pod directory is read again, as a Go duration [default: 20s].
    #[arg(long, value_name = "DURATION", value_parser = go_duration)]
    pub file_check_frequency: Option<Duration>,

    /// The address the kubelet server (logs, exec, port-forward) listens on [default: 0.0.0.0].
    #[arg(long, value_name = "IP")]
    pub address: Option<IpAddr>,

    /// The kubelet server's port (0 picks a free one, reported in the Node's status)
    /// [default: 10250].
    #[arg(long, value_name = "PORT")]
    pub port: Option<u16>,

    /// Cluster DNS servers for ClusterFirst pods (comma-separated); without them such pods
    /// use the host's resolv.conf, with a MissingClusterDNS warning.
    #[arg(long, value_name = "IP[,IP]", value_delimiter = ',')]
    pub cluster_dns: Option<Vec<IpAddr>>,

    /// The cluster's DNS domain: pods search `NS.svc.DOMAIN svc.DOMAIN DOMAIN`
    /// [default: cluster.local].
    #[arg(long, value_name = "DOMAIN")]
    pub cluster_domain: Option<String>,

    /// How often pods are synced and volumes from ConfigMaps, Secrets, the downward API and
    /// projections refreshed, as a Go duration [default: 1m0s].
    #[arg(long, value_name = "DURATION", value_parser = go_duration)]
    pub sync_frequency: Option<Duration>,

    /// The host's resolv.conf, for `Default` pods and the host part of the search path
    /// [default: /etc/resolv.conf].
    #[arg(long, value_name = "FILE")]
    pub resolv_conf: Option<PathBuf>,

    /// How many pods this node takes [default: 110].
    #[arg(long, value_name = "N")]
    pub max_pods: Option<u32>,

    /// The most processes a pod may run; -1 for no limit [default: -1].
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub pod_max_pids: Option<i64>,

    /// Pods in upstream's QoS cgroup hierarchy (`kubepods/burstable/pod<uid>`) [default: true].
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
    pub cgroups_per_qos: Option<bool>,

    /// The cgroup `kubepods` is made under [default: /].
    #[arg(long, value_name = "CGROUP")]
    pub cgroup_root: Option<String>,

    /// Resources kept back for Kubernetes' daemons (`cpu=100m,memory=100Mi,pid=1000`).
    #[arg(long, value_name = "RESOURCE=QUANTITY,...", value_parser = pairs)]
    pub kube_reserved: Option<Map>,

    /// Resources kept back for the system's daemons (`cpu=100m,memory=100Mi`).
    #[arg(long, value_name = "RESOURCE=QUANTITY,...", value_parser = pairs)]
    pub system_reserved: Option<Map>,

    /// Hard eviction thresholds [default:
    /// memory.available<100Mi,nodefs.available<10%,nodefs.inodesFree<5%,imagefs.available<15%,imagefs.inodesFree<5%].
    #[arg(long, value_name = "SIGNAL<VALUE,...", value_parser = thresholds)]
    pub eviction_hard: Option<Map>,

    /// Soft eviction thresholds, each with a grace period (`memory.available<1Gi`).
    #[arg(long, value_name = "SIGNAL<VALUE,...", value_parser = thresholds)]
    pub eviction_soft: Option<Map>,

    /// How long each soft threshold must be crossed before pods are evicted
    /// (`memory.available=1m30s`).
    #[arg(long, value_name = "SIGNAL=DURATION,...", value_parser = pairs)]
    pub eviction_soft_grace_period: Option<Map>,

    /// How far past a threshold eviction reclaims (`memory.available=500Mi`).
    #[arg(long, value_name = "SIGNAL=QUANTITY,...", value_parser = pairs)]
    pub eviction_minimum_reclaim: Option<Map>,

    /// How long a pressure condition stays after its threshold stops being crossed, as a Go
    /// duration [default: 5m0s].
    #[arg(long, value_name = "DURATION", value_parser = go_duration)]
    pub eviction_pressure_transition_period: Option<Duration>,

    /// The longest grace period, in seconds, a pod evicted for a soft threshold gets.
    #[arg(long, value_name = "SECONDS")]
    pub eviction_max_pod_grace_period: Option<i64>,

    /// Disk usage (percent) above which unused images are removed [default: 85].
    #[arg(long, value_name = "PERCENT")]
    pub image_gc_high_threshold: Option<i32>,

    /// Disk usage (percent) image garbage collection frees down to [default: 80].
    #[arg(long, value_name = "PERCENT")]
    pub image_gc_low_threshold: Option<i32>,

    /// How old an unused image must be before it is removed, as a Go duration [default: 2m0s].
    #[arg(long, value_name = "DURATION", value_parser = go_duration)]
    pub minimum_image_ttl_duration: Option<Duration>,

    /// A container's log is rotated at this size [default: 10Mi].
    #[arg(long, value_name = "QUANTITY")]
    pub container_log_max_size: Option<String>,

    /// How many log files a container keeps, the live one included [default: 5].
    #[arg(long, value_name = "N")]
    pub container_log_max_files: Option<u32>,

    /// How often images are garbage collected, as a Go duration: upstream's fixed
    /// `ImageGCPeriod` (5m0s), settable for tests only.
    #[arg(long, value_name = "DURATION", value_parser = go_duration, hide = true)]
    pub image_gc_period: Option<Duration>,

    /// How often dead containers are garbage collected, as a Go duration: upstream's fixed
    /// `ContainerGCPeriod` (1m0s), settable for tests only.
    #[arg(long, value_name = "DURATION", value_parser = go_duration, hide = true)]
    pub container_gc_period: Option<Duration>,

    /// Sysctls or `prefix*` patterns outside the safe set that pods may set
    /// (comma-separated).
    #[arg(long, value_name = "SYSCTL[,SYSCTL]", value_delimiter = ',')]
    pub allowed_unsafe_sysctls: Option<Vec<String>>,

    /// Run containers that set no seccomp profile under the runtime's default profile
    /// (`RuntimeDefault`) instead of unconfined [default: false].
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
    pub seccomp_default: Option<bool>,

    /// How pods reach pods on other nodes, as k3s's flag: `vxlan` (k3s's default) an overlay
    /// through the VXLAN device `flannel.1` (UDP 8472) to every Node that publishes flannel's
    /// vxlan annotations, `host-gw` routes via the InternalIPs of the Nodes on a directly
    /// attached network; both masquerade traffic leaving the cluster CIDR. `none` leaves the
    /// network to someone else (the CNI bridge masquerades). Hollow nodes have none.
    #[arg(long, value_name = "BACKEND", value_enum, default_value = "vxlan")]
    pub flannel_backend: BackendArg,

    /// The cluster's pod range (default 10.42.0.0/16, k3s's): the pod network does not
    /// masquerade within it. Hollow node `i` gets the `i`-th /24 of it as its pod CIDR (unless
    /// its Node has one), its InternalIP the range's `.1`, its pods' IPs `.2` onwards (default
    /// 10.64.0.0/10, room for many hollow nodes).
    #[arg(long, value_name = "CIDR")]
    pub cluster_cidr: Option<String>,

    #[command(flatten)]
    pub hollow: HollowArgs,
}

/// A map flag's value.
type Map = std::collections::BTreeMap<String, String>;

fn pairs(text: &str) -> Result<Map, String> {
    kubelet_config::parse_pairs_flag(text).map_err(|e| e.to_string())
}

fn thresholds(text: &str) -> Result<Map, String> {
    kubelet_config::parse_threshold_flag(text).map_err(|e| e.to_string())
}

/// `--flannel-backend`'s values (see [`FlannelBackend`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum BackendArg {
    Vxlan,
    HostGw,
    None,
}

impl BackendArg {
    /// The value as `--flannel-backend` spells it, for the kubelets `skiff server` and
    /// `skiff agent` start.
    pub fn flag_value(self) -> String {
        use clap::ValueEnum;
        self.to_possible_value()
            .expect("no value is skipped")
            .get_name()
            .to_string()
    }
}

/// Hollow mode: simulated nodes for scale tests (kubemark's hollow nodes).
#[derive(Debug, Args)]
pub struct HollowArgs {
    /// Run `--count` hollow nodes in this process: real node registration, heartbeats, pod
    /// watches and pod workers over an in-memory runtime (no containerd, no containers).
    #[arg(long, conflicts_with_all = ["node_name", "container_runtime_endpoint"])]
    pub hollow: bool,

    /// How many hollow nodes.
    #[arg(long, value_name = "K", default_value_t = 1, requires = "hollow")]
    pub count: usize,

    /// Hollow node `i` is named `<prefix>-<i>`.
    #[arg(
        long,
        value_name = "P",
        default_value = "hollow-node",
        requires = "hollow"
    )]
    pub node_name_prefix: String,

    /// How long a hollow pod's sandbox takes to start, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 0, requires = "hollow")]
    pub hollow_startup_delay_ms: u64,

    /// The fraction (0 to 1) of hollow containers that exit with code 1 as soon as they start,
    /// on every attempt (picked by a hash of pod uid and container name).
    #[arg(long, value_name = "F", default_value_t = 0.0, requires = "hollow")]
    pub hollow_failure_rate: f64,

    /// How long a hollow container takes to exit after SIGTERM, in milliseconds; past the
    /// pod's grace period it is killed.
    #[arg(long, value_name = "MS", default_value_t = 0, requires = "hollow")]
    pub hollow_stop_delay_ms: u64,

    /// Serve each hollow node's kubelet API on a free port of IP, which becomes its InternalIP:
    /// the Summary API and resource metrics report synthetic figures (a container uses its
    /// pod's `hollow.skiff.io/cpu-usage` and `memory-usage` annotations, else a tenth of its
    /// CPU and half its memory request), for metrics-server and the HPA at scale.
    #[arg(long, value_name = "IP", requires = "hollow")]
    pub hollow_serve_address: Option<std::net::IpAddr>,

    /// Have each hollow node act as itself, `system:node:<name>` in `system:nodes`, by
    /// impersonation over the shared connections, so that the Node authorizer, NodeRestriction
    /// and API Priority and Fairness treat it as the node it is. The kubeconfig's user must be
    /// allowed to impersonate users and groups (an admin is).
    #[arg(long, requires = "hollow")]
    pub hollow_impersonate_nodes: bool,
}

/// jemalloc's configuration for the kubelet: one arena (its few threads rarely allocate at
/// once) and dirty pages returned within a second by a background thread. The kubelet's heap
/// stays at about a third of what jemalloc's defaults (8 arenas on 2 cores, 10 s decay) keep
/// resident; the API server and the store keep the defaults, which cost less CPU per request.
const KUBELET_MALLOC_CONF: &str =
    "narenas:1,background_thread:true,dirty_decay_ms:1000,muzzy_decay_ms:0";

/// The variable tikv-jemallocator's (prefixed) jemalloc reads its configuration from.
const MALLOC_CONF_VAR: &str = "_RJEM_MALLOC_CONF";

/// Re-executes this process with [`KUBELET_MALLOC_CONF`] (see [`use_malloc_conf`]).
pub fn use_small_heap() {
    use_malloc_conf(KUBELET_MALLOC_CONF);
}

/// Re-executes this process with jemalloc configured as `conf` unless a configuration is
/// already set (by an earlier re-exec or the user): jemalloc reads it before `main`, so the
/// running process cannot change it. Returns (and the command runs with the defaults) if exec
/// fails.
pub fn use_malloc_conf(conf: &str) {
    use std::os::unix::process::CommandExt;
    if std::env::var_os(MALLOC_CONF_VAR).is_some() {
        return;
    }
    let Ok(exe) = std::env::current_exe() else {
        return;
    };
    let err = std::process::Command::new(exe)
        .args(std::env::args_os().skip(1))
        .env(MALLOC_CONF_VAR, conf)
        .exec();
    eprintln!("skiff: warning: re-executing with a smaller heap configuration failed: {err}");
}

pub async fn run(args: KubeletArgs, lifecycle: Lifecycle) -> anyhow::Result<()> {
    let node_name = args.node_name.clone().unwrap_or_default();
    if node_name.is_empty() && !args.hollow.hollow {
        return Err(super::UsageError("--node-name must not be empty".into()).into());
    }
    let kube_config = super::kube_config(&args.kubeconfig).await?;
    // the cluster CA signs the API server's client certificate for the kubelet server
    let client_ca = kube_config.root_cert.clone().unwrap_or_default();
    std::fs::create_dir_all(&args.data_dir)
        .with_context(|| format!("creating {}", args.data_dir.display()))?;
    if args.hollow.hollow {
        return run_hollow(kube_config, client_ca, args, lifecycle).await;
    }
    let client = skiff_runtime::http2::client(kube_config, &user_agent("kubelet"))?;
    let settings = settings(&args)?;
    let config = Config {
        node_name,
        data_dir: args.data_dir,
        pod_cidr: args.pod_cidr,
        node_ip: args.node_ip,
        container_runtime_endpoint: args.container_runtime_endpoint,
        client_ca,
        settings,
        flannel_backend: match args.flannel_backend {
            BackendArg::Vxlan => FlannelBackend::Vxlan,
            BackendArg::HostGw => FlannelBackend::HostGw,
            BackendArg::None => FlannelBackend::None,
        },
        cluster_cidr: args
            .cluster_cidr
            .unwrap_or_else(|| Config::default().cluster_cidr),
        image_gc_period: args
            .image_gc_period
            .unwrap_or(Config::default().image_gc_period),
        container_gc_period: args
            .container_gc_period
            .unwrap_or(Config::default().container_gc_period),
        ..Config::default()
    };
    let kubelet = Kubelet::start(client, config).await?;
    let r = &kubelet.ready;
    lifecycle.ready(format!(
        "skiff kubelet ready: node {} registered ({}, pod CIDR {}); runtime {} at {}; serving https://{}",
        r.node, r.node_ip, r.pod_cidr, r.runtime_version, r.endpoint, r.server
    ));
    kubelet.run(lifecycle.stopped()).await?;
    Ok(())
}

async fn run_hollow(
    kube_config: kube::Config,
    client_ca: Vec<Vec<u8>>,
    args: KubeletArgs,
    lifecycle: Lifecycle,
) -> anyhow::Result<()> {
    let settings = settings(&args)?;
    let h = args.hollow;
    if !(0.0..=1.0).contains(&h.hollow_failure_rate) {
        return Err(
            super::UsageError("--hollow-failure-rate must be between 0 and 1".into()).into(),
        );
    }
    let config = hollow::Config {
        count: h.count,
        prefix: h.node_name_prefix,
        cluster_cidr: args
            .cluster_cidr
            .unwrap_or_else(|| hollow::Config::default().cluster_cidr),
        behaviour: Behaviour {
            startup_delay: Duration::from_millis(h.hollow_startup_delay_ms),
            failure_rate: h.hollow_failure_rate,
            stop_delay: Duration::from_millis(h.hollow_stop_delay_ms),
        },
        log_dir: args.data_dir.join("hollow/logs/pods"),
        pods_dir: args.data_dir.join("hollow/pods"),
        storage_dir: args.data_dir.join("hollow/storage"),
        serve: h.hollow_serve_address.map(|address| hollow::Serve {
            address,
            client_ca,
            pki_dir: args.data_dir.join("hollow/pki"),
        }),
        dns: DnsSettings {
            cluster_dns: settings.cluster_dns,
            cluster_domain: settings.cluster_domain,
            ..DnsSettings::default()
        },
    };
    let agent = user_agent("kubelet");
    let pool = skiff_runtime::http2::Pool::new(&kube_config)?;
    let clients = hollow::Clients {
        shared: skiff_runtime::http2::client_on(&pool, kube_config.clone(), &agent)?,
        per_node: h.hollow_impersonate_nodes.then(|| -> hollow::NodeClient {
            Box::new(move |name| {
                let mut config = kube_config.clone();
                config.auth_info.impersonate = Some(format!("system:node:{name}"));
                config.auth_info.impersonate_groups = Some(vec!["system:nodes".into()]);
                skiff_runtime::http2::client_on(&pool, config, &agent)
            })
        }),
    };
    let nodes = HollowNodes::start(clients, config).await?;
    let names = nodes.names();
    lifecycle.ready(format!(
        "skiff kubelet ready: {} hollow nodes registered ({} … {})",
        names.len(),
        names.first().map_or("", String::as_str),
        names.last().map_or("", String::as_str),
    ));
    nodes.run(lifecycle.stopped()).await;
    Ok(())
}

/// The kubelet's settings: upstream's defaults, then the `--config` file, then the flags given.
fn settings(args: &KubeletArgs) -> anyhow::Result<KubeletConfiguration> {
    let mut c = match &args.config {
        Some(path) => {
            let loaded = KubeletConfiguration::from_file(path)?;
            if !loaded.unknown_fields.is_empty() {
                tracing::warn!(
                    file = %path.display(),
                    fields = ?loaded.unknown_fields,
                    "the kubelet does not take these KubeletConfiguration fields; they have no effect"
                );
            }
            loaded.config
        }
        None => KubeletConfiguration::default(),
    };
    fn set<T: Clone>(field: &mut T, flag: &Option<T>) {
        if let Some(v) = flag {
            *field = v.clone();
        }
    }
    if args.pod_manifest_path.is_some() {
        c.static_pod_path = args.pod_manifest_path.clone();
    }
    set(&mut c.file_check_frequency, &args.file_check_frequency);
    set(&mut c.address, &args.address);
    set(&mut c.port, &args.port);
    set(&mut c.cluster_dns, &args.cluster_dns);
    set(&mut c.cluster_domain, &args.cluster_domain);
    set(&mut c.sync_frequency, &args.sync_frequency);
    set(&mut c.resolv_conf, &args.resolv_conf);
    set(&mut c.max_pods, &args.max_pods);
    set(&mut c.pod_pids_limit, &args.pod_max_pids);
    set(&mut c.cgroups_per_qos, &args.cgroups_per_qos);
    set(&mut c.cgroup_root, &args.cgroup_root);
    set(&mut c.kube_reserved, &args.kube_reserved);
    set(&mut c.system_reserved, &args.system_reserved);
    set(&mut c.eviction_hard, &args.eviction_hard);
    set(&mut c.eviction_soft, &args.eviction_soft);
    set(
        &mut c.eviction_soft_grace_period,
        &args.eviction_soft_grace_period,
    );
    set(
        &mut c.eviction_minimum_reclaim,
        &args.eviction_minimum_reclaim,
    );
    set(
        &mut c.eviction_pressure_transition_period,
        &args.eviction_pressure_transition_period,
    );
    set(
        &mut c.eviction_max_pod_grace_period,
        &args.eviction_max_pod_grace_period,
    );
    set(
        &mut c.image_gc_high_threshold_percent,
        &args.image_gc_high_threshold,
    );
    set(
        &mut c.image_gc_low_threshold_percent,
        &args.image_gc_low_threshold,
    );
    set(
        &mut c.image_minimum_gc_age,
        &args.minimum_image_ttl_duration,
    );
    set(&mut c.container_log_max_size, &args.container_log_max_size);
    set(
        &mut c.container_log_max_files,
        &args.container_log_max_files,
    );
    set(&mut c.allowed_unsafe_sysctls, &args.allowed_unsafe_sysctls);
    set(&mut c.seccomp_default, &args.seccomp_default);
    // at least a second, as before the configuration file
    c.file_check_frequency = c.file_check_frequency.max(Duration::from_secs(1));
    c.sync_frequency = c.sync_frequency.max(Duration::from_secs(1));
    c.validate().map_err(|e| super::UsageError(e.to_string()))?;
    Ok(c)
}

/// A duration as Go's `time.ParseDuration` reads it (`1m0s`, `90s`, `1h30m`); at least a
/// millisecond.
pub(super) fn go_duration(text: &str) -> Result<Duration, String> {
    let nanos = skiff_apimachinery::duration::parse(text)?;
    u64::try_from(nanos)
        .ok()
        .map(Duration::from_nanos)
        .filter(|d| *d >= Duration::from_millis(1))
        .ok_or_else(|| format!("invalid duration {text:?}: it must be at least 1ms"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings_of(argv: &[&str]) -> anyhow::Result<KubeletConfiguration> {
        let argv = ["--kubeconfig", "k", "--node-name", "n"]
            .iter()
            .chain(argv)
            .map(|a| a.to_string())
            .collect();
        settings(&super::super::server::component_args::<KubeletArgs>(
            "kubelet",
            argv,
            &[],
        )?)
    }

    #[test]
    fn flags_win_over_the_config_file_which_wins_over_the_defaults() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("config.yaml");
        std::fs::write(
            &file,
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
             containerLogMaxSize: 2Mi\ncontainerLogMaxFiles: 4\nmaxPods: 20\n",
        )
        .unwrap();
        let c = settings_of(&[
            "--config",
            file.to_str().unwrap(),
            "--container-log-max-size",
            "1Mi",
            "--eviction-hard",
            "memory.available<1Gi",
            "--cgroups-per-qos=false",
            "--seccomp-default",
        ])
        .unwrap();
        assert!(c.seccomp_default);
        assert_eq!(c.container_log_max_size, "1Mi");
        assert_eq!(c.container_log_max_files, 4);
        assert_eq!(c.max_pods, 20);
        assert!(!c.cgroups_per_qos);
        assert_eq!(c.eviction_hard.len(), 1);
        assert_eq!(c.port, 10250);

        let c = settings_of(&[]).unwrap();
        assert_eq!(c, KubeletConfiguration::default());
        let e = settings_of(&["--image-gc-low-threshold", "90"]).unwrap_err();
        assert!(e.to_string().contains("must be less than"), "{e}");
        assert!(settings_of(&["--eviction-hard", "memory.available=1Gi"]).is_err());
    }

    #[test]
    fn go_durations_add_up_their_units() {
        assert_eq!(go_duration("1m0s"), Ok(Duration::from_secs(60)));
        assert_eq!(go_duration("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(go_duration("500ms"), Ok(Duration::from_millis(500)));
        assert!(go_duration("10").is_err());
        assert!(go_duration("0s").is_err());
        assert!(go_duration("5d").is_err());
    }

    #[test]
    fn the_flannel_backend_defaults_to_vxlan_and_round_trips_through_its_flag_value() {
        let backend = |argv: &[&str]| {
            let argv = ["--kubeconfig", "k", "--node-name", "n"]
                .iter()
                .chain(argv)
                .map(|a| a.to_string())
                .collect();
            super::super::server::component_args::<KubeletArgs>("kubelet", argv, &[])
                .unwrap()
                .flannel_backend
                .flag_value()
        };
        assert_eq!(backend(&[]), "vxlan");
        for value in ["vxlan", "host-gw", "none"] {
            assert_eq!(backend(&["--flannel-backend", value]), value);
        }
    }
}
