//! A private "lan" for multi-node tests, made of network namespaces and always removed (also
//! when the test panics): a namespace holding a Linux bridge, a veth from this host to it (the
//! host end, `skiff<n>`, gets 10.250.<n>.1/24: a link the test owns, no other host setting is
//! touched) and, per node, a namespace with a veth into the bridge (`eth0`, 10.250.<n>.<k>/24,
//! default route via .1). Kubelets run in a node's namespace through `nsenter --net` rather than
//! `ip netns exec`, which would remount /sys and so hide the cgroup hierarchy runc needs; the
//! mount namespace (containerd's shim sockets under /run/containerd/s, pinned pod netns under
//! /var/run/netns) stays shared, which is fine: those paths are unique per containerd and pod.
//! Routes, iptables rules and the `cni0` bridge a kubelet makes stay inside its node's namespace.
//! A [`Router`] (a namespace of its own) joins lans, for nodes on different subnets.

use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::process::{Command, Output};
use std::sync::atomic::{AtomicU32, Ordering};

use super::ApiServer;
use super::cluster::{Process, controller_manager, scheduler};
use super::node::{KubeletProcess, Placement};

/// Lans made by this test process, for unique namespace names.
static LANS: AtomicU32 = AtomicU32::new(0);

/// Why this host cannot build a lan, if it cannot.
pub fn unsupported() -> Option<String> {
    if let Some(why) = super::node::unsupported() {
        return Some(why);
    }
    for binary in ["ip", "nsenter", "iptables", "iptables-restore"] {
        let found = Command::new("sh")
            .args(["-c", &format!("command -v {binary}")])
            .output()
            .is_ok_and(|o| o.status.success());
        if !found {
            return Some(format!("{binary} is not installed (scripts/install-deps)"));
        }
    }
    None
}

/// The lan: removed with its node namespaces on drop. Drop it after the kubelets in it (declare
/// it before them).
pub struct Lan {
    /// The `n` of 10.250.<n>.0/24.
    pub index: u8,
    namespace: String,
    host_link: String,
    nodes: Vec<String>,
}

/// A node's namespace on the lan.
#[derive(Debug, Clone)]
pub struct NodeNet {
    pub namespace: String,
    pub ip: Ipv4Addr,
    /// The lan host's address (the node's default gateway).
    pub gateway: Ipv4Addr,
}

impl Lan {
    /// Creates the bridge namespace and picks a free 10.250.<n>.0/24: the first `n` whose host
    /// link `skiff<n>` can be created (another lan, of this or another test process, holds it
    /// otherwise).
    pub fn create() -> Lan {
        let seq = LANS.fetch_add(1, Ordering::SeqCst);
        let namespace = format!("skiff-lan-{}-{seq}", std::process::id());
        ip(&["netns", "add", &namespace]);
        let mut lan = Lan {
            index: 0,
            namespace,
            host_link: String::new(),
            nodes: Vec::new(),
        };
        let start = (std::process::id() % 200) as u16;
        let index = (0..250u16)
            .map(|i| ((start + i) % 250 + 1) as u8)
            .find(|n| {
                let link = format!("skiff{n}");
                let taken =
                    ip_output(&["-4", "addr", "show"]).contains(&format!("inet 10.250.{n}."));
                !taken
                    && run(Command::new("ip").args([
                        "link",
                        "add",
                        &link,
                        "type",
                        "veth",
                        "peer",
                        "name",
                        "uplink",
                        "netns",
                        &lan.namespace,
                    ]))
                    .status
                    .success()
            })
            .expect("a free 10.250.<n>.0/24 for the test lan");
        lan.index = index;
        lan.host_link = format!("skiff{index}");
        let ns = lan.namespace.clone();
        ip(&["-n", &ns, "link", "set", "lo", "up"]);
        ip(&["-n", &ns, "link", "add", "br0", "type", "bridge"]);
        ip(&["-n", &ns, "link", "set", "br0", "up"]);
        ip(&["-n", &ns, "link", "set", "uplink", "master", "br0", "up"]);
        let host_cidr = format!("{}/24", lan.host_ip());
        ip(&["addr", "add", &host_cidr, "dev", &lan.host_link]);
        ip(&["link", "set", &lan.host_link, "up"]);
        lan
    }

    /// This host's address on the lan (10.250.<n>.1).
    pub fn host_ip(&self) -> Ipv4Addr {
        Ipv4Addr::new(10, 250, self.index, 1)
    }

    /// A new node namespace on the lan, 10.250.<n>.<k> with k = 2, 3, …
    pub fn add_node(&mut self) -> NodeNet {
        let k = self.nodes.len() + 2;
        let namespace = format!("{}-node{k}", self.namespace);
        ip(&["netns", "add", &namespace]);
        self.nodes.push(namespace.clone());
        let port = format!("node{k}");
        ip(&[
            "-n",
            &self.namespace,
            "link",
            "add",
            &port,
            "type",
            "veth",
            "peer",
            "name",
            "eth0",
            "netns",
            &namespace,
        ]);
        ip(&[
            "-n",
            &self.namespace,
            "link",
            "set",
            &port,
            "master",
            "br0",
            "up",
        ]);
        let node_ip = Ipv4Addr::new(10, 250, self.index, k as u8);
        ip(&["-n", &namespace, "link", "set", "lo", "up"]);
        ip(&[
            "-n",
            &namespace,
            "addr",
            "add",
            &format!("{node_ip}/24"),
            "dev",
            "eth0",
        ]);
        ip(&["-n", &namespace, "link", "set", "eth0", "up"]);
        ip(&[
            "-n",
            &namespace,
            "route",
            "add",
            "default",
            "via",
            &self.host_ip().to_string(),
        ]);
        NodeNet {
            namespace,
            ip: node_ip,
            gateway: self.host_ip(),
        }
    }
}

impl Drop for Lan {
    fn drop(&mut self) {
        for ns in &self.nodes {
            let _ = run(Command::new("ip").args(["netns", "del", ns]));
        }
        if !self.host_link.is_empty() {
            let _ = run(Command::new("ip").args(["link", "del", &self.host_link]));
        }
        let _ = run(Command::new("ip").args(["netns", "del", &self.namespace]));
    }
}

impl NodeNet {
    /// Runs `args` in the node's namespace; its output, whatever the exit status.
    pub fn exec(&self, args: &[&str]) -> Output {
        run(Command::new("nsenter")
            .arg(format!("--net=/var/run/netns/{}", self.namespace))
            .args(args))
    }

    /// Runs `args` in the node's namespace until it succeeds with a stdout `done` accepts;
    /// that stdout. Fails the test with `what` and the last stdout after [`super::HANG_GUARD`].
    pub fn exec_until(&self, args: &[&str], what: &str, done: impl Fn(&str) -> bool) -> String {
        let deadline = std::time::Instant::now() + super::HANG_GUARD;
        loop {
            let out = self.exec(args);
            let stdout = super::output_text(&out).0;
            if out.status.success() && done(&stdout) {
                return stdout;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{what} never happened in {}: {stdout}",
                self.namespace
            );
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    }

    /// Runs `args` in the node's namespace, asserts success and returns stdout.
    pub fn exec_ok(&self, args: &[&str]) -> String {
        let out = self.exec(args);
        let (stdout, stderr) = super::output_text(&out);
        assert!(
            out.status.success(),
            "{args:?} in {}: {stderr}",
            self.namespace
        );
        stdout
    }

    /// `skiff <args…> --kubeconfig K` in this namespace, K a certificate for `user` (`group`)
    /// that reaches the API server at the lan host's address; stderr in `<data dir>/<log>.log`.
    pub fn start(
        &self,
        api: &ApiServer,
        (user, group): (&str, Option<&str>),
        log: &str,
        args: &[&str],
    ) -> Process {
        let mut cmd = Command::new("nsenter");
        cmd.arg(format!("--net=/var/run/netns/{}", self.namespace))
            .arg(env!("CARGO_BIN_EXE_skiff"))
            .args(args)
            .arg("--kubeconfig")
            .arg(lan_kubeconfig(api, user, group, self.gateway));
        Process::spawn(&mut cmd, &api.data_dir.join(format!("{log}.log")))
    }

    /// A kubelet for `node` in this namespace: InternalIP the node's lan address, its server on
    /// all addresses (a free port), the host-gw pod network on, and a kubeconfig with the
    /// node's identity that reaches the API server at the lan host's address (start the API
    /// server with [`api_server_flags`]).
    pub fn placement(&self, api: &ApiServer, node: &str) -> Placement {
        self.placement_with(api, node, "host-gw")
    }

    /// [`NodeNet::placement`] with the pod network `--flannel-backend` `backend`.
    pub fn placement_with(&self, api: &ApiServer, node: &str, backend: &str) -> Placement {
        Placement {
            prefix: vec![
                "nsenter".into(),
                format!("--net=/var/run/netns/{}", self.namespace),
            ],
            kubeconfig: lan_kubeconfig(
                api,
                &format!("system:node:{node}"),
                Some("system:nodes"),
                self.gateway,
            ),
            args: [
                "--node-ip",
                &self.ip.to_string(),
                "--address",
                "0.0.0.0",
                "--port",
                "0",
                "--flannel-backend",
                backend,
            ]
            .map(String::from)
            .to_vec(),
        }
    }
}

/// A router between lans: a namespace of its own with a leg on each lan's bridge
/// (10.250.<n>.254/24) and IPv4 forwarding on (in that namespace only). Nodes it serves
/// ([`Router::serve`]) send what is not on their own lan through it, so nodes on different
/// lans reach each other by IP only, as across a routed network; it knows no pod CIDR. Removed
/// on drop.
pub struct Router {
    namespace: String,
    /// Each lan's index with the router's address on it.
    legs: Vec<(u8, Ipv4Addr)>,
}

impl Router {
    /// A router with a leg on each of `lans`.
    pub fn join(lans: &[&Lan]) -> Router {
        let seq = LANS.fetch_add(1, Ordering::SeqCst);
        let namespace = format!("skiff-router-{}-{seq}", std::process::id());
        ip(&["netns", "add", &namespace]);
        let mut router = Router {
            namespace,
            legs: Vec::new(),
        };
        let ns = router.namespace.clone();
        ip(&["-n", &ns, "link", "set", "lo", "up"]);
        for lan in lans {
            let (port, leg) = (format!("router{seq}"), format!("lan{}", lan.index));
            ip(&[
                "-n",
                &lan.namespace,
                "link",
                "add",
                &port,
                "type",
                "veth",
                "peer",
                "name",
                &leg,
                "netns",
                &ns,
            ]);
            ip(&[
                "-n",
                &lan.namespace,
                "link",
                "set",
                &port,
                "master",
                "br0",
                "up",
            ]);
            let address = Ipv4Addr::new(10, 250, lan.index, 254);
            ip(&[
                "-n",
                &ns,
                "addr",
                "add",
                &format!("{address}/24"),
                "dev",
                &leg,
            ]);
            ip(&["-n", &ns, "link", "set", &leg, "up"]);
            router.legs.push((lan.index, address));
        }
        let forwarding = run(Command::new("nsenter")
            .arg(format!("--net=/var/run/netns/{ns}"))
            .args(["sh", "-c", "echo 1 > /proc/sys/net/ipv4/ip_forward"]));
        assert!(
            forwarding.status.success(),
            "turning forwarding on in {ns}: {}",
            super::output_text(&forwarding).1
        );
        router
    }

    /// Makes the router the default gateway of `node` (instead of the lan host, which stays
    /// reachable on the node's own lan).
    pub fn serve(&self, node: &NodeNet) {
        let lan = node.ip.octets()[2];
        let (_, via) = self
            .legs
            .iter()
            .find(|(index, _)| *index == lan)
            .expect("the router has a leg on the node's lan");
        let via = via.to_string();
        ip(&[
            "-n",
            &node.namespace,
            "route",
            "replace",
            "default",
            "via",
            &via,
        ]);
    }
}

impl Drop for Router {
    fn drop(&mut self) {
        // its legs' peers on the lan bridges go with it
        let _ = run(Command::new("ip").args(["netns", "del", &self.namespace]));
    }
}

/// `skiff apiserver` flags that make it reachable from the lan's nodes: all addresses, and the
/// lan host's address in its serving certificate.
pub fn api_server_flags(lan: &Lan) -> Vec<String> {
    vec![
        "--bind-address".into(),
        "0.0.0.0".into(),
        "--tls-san".into(),
        lan.host_ip().to_string(),
    ]
}

/// An API server (embedded store) reachable from the lan's nodes ([`api_server_flags`]).
pub fn api_server(lan: &Lan) -> ApiServer {
    let flags = api_server_flags(lan);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    ApiServer::start_with(super::Backend::Embedded, &flags)
}

/// The cluster most network tests run: on a lan of its own, an API server reachable from it,
/// the controller manager with node IPAM and the test's controllers, the scheduler, and a
/// kubelet in its own node namespace per node (registering its Node and waiting for a pod
/// range). The fields drop in order: the processes, then the API server, then the lan.
pub struct LanCluster {
    pub kubelets: Vec<KubeletProcess>,
    _scheduler: Process,
    _controller_manager: Process,
    /// The nodes' namespaces, in the order of their names.
    pub nets: Vec<NodeNet>,
    pub api: ApiServer,
    _lan: Lan,
}

impl LanCluster {
    /// Starts the cluster with `controllers` (comma-separated, besides `nodeipam`) and a
    /// kubelet for each of `nodes`.
    pub fn start(controllers: &str, nodes: &[&str]) -> LanCluster {
        LanCluster::start_with(controllers, nodes, &[])
    }

    /// [`LanCluster::start`] with extra flags for every kubelet.
    pub fn start_with(controllers: &str, nodes: &[&str], kubelet_args: &[&str]) -> LanCluster {
        let mut lan = Lan::create();
        let api = api_server(&lan);
        let nets: Vec<NodeNet> = nodes.iter().map(|_| lan.add_node()).collect();
        let controllers = format!("nodeipam,{controllers}");
        let controller_manager = controller_manager(
            &api,
            &[
                "--controllers",
                controllers.trim_end_matches(','),
                "--allocate-node-cidrs=true",
            ],
        );
        let scheduler = scheduler(&api);
        let kubelets = nodes
            .iter()
            .zip(&nets)
            .map(|(node, net)| {
                KubeletProcess::start_placed(&api, node, net.placement(&api, node), kubelet_args)
            })
            .collect();
        LanCluster {
            kubelets,
            _scheduler: scheduler,
            _controller_manager: controller_manager,
            nets,
            api,
            _lan: lan,
        }
    }
}

/// A kubeconfig for `user` (`group`) that reaches the API server at `server`.
fn lan_kubeconfig(api: &ApiServer, user: &str, group: Option<&str>, server: Ipv4Addr) -> PathBuf {
    super::cluster::identity_at(api, user, group, &server.to_string(), "-lan")
}

fn ip(args: &[&str]) {
    let out = run(Command::new("ip").args(args));
    let (_, stderr) = super::output_text(&out);
    assert!(out.status.success(), "ip {args:?}: {stderr}");
}

fn ip_output(args: &[&str]) -> String {
    super::output_text(&run(Command::new("ip").args(args))).0
}

fn run(cmd: &mut Command) -> Output {
    super::run_guarded(cmd)
}
