//! Tearing down what a node leaves on this host once its agent is gone, as k3s's
//! `k3s-killall.sh` does: pods outlive `skiff server`, `skiff agent` and `skiff kubelet` by
//! design, so `skiff killall` (and the end-to-end tests' node harnesses) stop them here.
//!
//! [`kill_all`] works on one data dir and touches only what belongs to it, so that several
//! nodes on one machine can be torn down one by one: the Skiff processes started on it, its
//! managed containerd (the one started with its `config.toml`), the shims serving that
//! containerd's socket and the containers under them; the network namespaces its sandboxes
//! were started in (read from their OCI bundles under containerd's state), with their veths,
//! the iptables rules CNI tagged with their sandbox ids (the bridge's masquerading, portmap's
//! DNAT) and CNI's cached results; the pod IPs its host-local IPAM leased; and every mount
//! under the data dir (pod volumes, containerd's overlay rootfs and shm mounts).
//!
//! What the host's nodes share is removed only when nobody else uses it: the CNI bridge when
//! no interface is attached to it any more; the Service rules (`skiff proxy`'s `KUBE-*`
//! chains and `ip skiff` nftables table), `skiff network-policy`'s `inet skiff-netpol` table,
//! the pod network's `SKIFF-POSTROUTING` chain, VXLAN device `flannel.1` and routes
//! (`proto 83`), and portmap's `CNI-HOSTPORT-*` chains (when they map no port) when no other
//! Skiff node process runs in this network namespace.
//!
//! Host access goes through [`Host`]: [`SystemHost`] is this machine, [`FakeHost`] a recorded
//! one for tests. Every step is idempotent: a second run finds nothing and reports so.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use parking_lot::Mutex;

use crate::containerd::{CNI_NETWORK, ContainerdConfig};
use crate::podnet_runner::{self, Cmd};

/// How long a stopped process gets to exit after SIGTERM before SIGKILL.
pub const STOP_GRACE: Duration = Duration::from_secs(20);
/// How often a stopping process is looked for.
const POLL: Duration = Duration::from_millis(50);
/// Where libcni caches each attachment's result (`<network>-<container id>-<ifname>`).
pub const CNI_CACHE_DIR: &str = "/var/lib/cni/results";
/// The pod's interface CRI asks CNI for.
const POD_IFNAME: &str = "eth0";
/// Where `ip netns` (and containerd) pin network namespaces.
const NETNS_DIRS: [&str; 2] = ["/var/run/netns", "/run/netns"];

/// A process as `/proc` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Process {
    pub pid: u32,
    pub ppid: u32,
    pub argv: Vec<String>,
    /// Its working directory (relative `--data-dir`s are relative to it).
    pub cwd: PathBuf,
    /// Whether it runs in the caller's network namespace.
    pub same_netns: bool,
}

/// The host as the clean-up sees and changes it.
pub trait Host {
    /// Every process.
    fn processes(&self) -> Vec<Process>;
    /// Runs a command (`kill`, `ip`, `iptables-save`, `iptables-restore`, `nft`, `umount`); its
    /// stdout.
    fn run(&self, cmd: &Cmd) -> podnet_runner::Result<String>;
    /// A file's contents, if it can be read.
    fn read(&self, path: &Path) -> Option<String>;
    /// The names in a directory (none if it cannot be read).
    fn list(&self, dir: &Path) -> Vec<String>;
    fn exists(&self, path: &Path) -> bool;
    /// Removes a file; whether it was there.
    fn remove_file(&self, path: &Path) -> bool;
    /// Every mount point.
    fn mounts(&self) -> Vec<PathBuf>;
    /// Waits a little while a process stops.
    fn pause(&self, how_long: Duration);
}

/// What the host's shared state was left as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Shared {
    /// Removed: this many items (bridge: 1; host rules: chains, tables, devices and routes).
    Removed(usize),
    /// Kept: still in use, by this many (interfaces on the bridge; other Skiff processes).
    Kept(usize),
}

/// What [`kill_all`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Report {
    /// Skiff processes (server, agent, kubelet) that ran on the data dir, stopped.
    pub skiff_processes: usize,
    /// Managed containerds of the data dir, stopped.
    pub containerds: usize,
    /// containerd shims serving the data dir's containerd, killed.
    pub shims: usize,
    /// Container processes (sandboxes' pause and containers' init) under them, killed.
    pub containers: usize,
    pub network_namespaces: usize,
    pub veths: usize,
    /// iptables rules CNI made for the data dir's sandboxes, deleted.
    pub cni_rules: usize,
    /// Pod IPs released from the data dir's IPAM.
    pub ip_leases: usize,
    /// Mounts under the data dir, unmounted.
    pub mounts: usize,
    /// The CNI bridges the data dir's network config names, by name.
    pub bridges: BTreeMap<String, Shared>,
    /// The host's Service and pod network rules (none: there were none).
    pub host_rules: Option<Shared>,
    /// Steps that failed (what, and why); the others were still taken.
    pub errors: Vec<String>,
}

impl Report {
    /// Whether nothing was left to stop or remove.
    pub fn found_nothing(&self) -> bool {
        let counts = [
            self.skiff_processes,
            self.containerds,
            self.shims,
            self.containers,
            self.network_namespaces,
            self.veths,
            self.cni_rules,
            self.ip_leases,
            self.mounts,
        ];
        counts.iter().all(|n| *n == 0)
            && !self
                .bridges
                .values()
                .chain(&self.host_rules)
                .any(|s| matches!(s, Shared::Removed(_)))
    }
}

fn plural(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut lines = Vec::new();
        if self.skiff_processes + self.containerds > 0 {
            lines.push(format!(
                "stopped {} and {}",
                plural(self.skiff_processes, "Skiff process", "Skiff processes"),
                plural(self.containerds, "containerd", "containerds")
            ));
        }
        if self.shims + self.containers > 0 {
            lines.push(format!(
                "killed {} under {}",
                plural(self.containers, "container process", "container processes"),
                plural(self.shims, "shim", "shims")
            ));
        }
        if self.network_namespaces + self.veths + self.cni_rules + self.ip_leases > 0 {
            lines.push(format!(
                "removed {}, {}, {} and {}",
                plural(
                    self.network_namespaces,
                    "network namespace",
                    "network namespaces"
                ),
                plural(self.veths, "veth", "veths"),
                plural(self.cni_rules, "CNI rule", "CNI rules"),
                plural(self.ip_leases, "pod IP lease", "pod IP leases")
            ));
        }
        if self.mounts > 0 {
            lines.push(format!(
                "unmounted {}",
                plural(self.mounts, "mount", "mounts")
            ));
        }
        for (bridge, state) in &self.bridges {
            lines.push(match state {
                Shared::Removed(_) => format!("removed bridge {bridge}"),
                Shared::Kept(n) => format!(
                    "kept bridge {bridge}: {} attached",
                    plural(*n, "other interface is", "other interfaces are")
                ),
            });
        }
        match self.host_rules {
            Some(Shared::Removed(n)) => lines.push(format!(
                "removed the host's Service and pod network rules ({})",
                plural(
                    n,
                    "chain, table, device or route",
                    "chains, tables, devices and routes"
                )
            )),
            Some(Shared::Kept(n)) => lines.push(format!(
                "kept the host's Service and pod network rules: {} still running here",
                plural(
                    n,
                    "other Skiff node process is",
                    "other Skiff node processes are"
                )
            )),
            None => {}
        }
        if self.found_nothing() {
            lines.push("nothing left".into());
        }
        for e in &self.errors {
            lines.push(format!("failed: {e}"));
        }
        f.write_str(&lines.join("\n"))
    }
}

/// The kubelet data dirs a data dir may hold: itself (`skiff kubelet`, `skiff agent`) and
/// `agent` (`skiff server`'s kubelet).
pub fn kubelet_dirs(data_dir: &Path) -> [PathBuf; 2] {
    [data_dir.to_path_buf(), data_dir.join("agent")]
}

fn containerd_of(kubelet_dir: &Path) -> ContainerdConfig {
    ContainerdConfig {
        dir: kubelet_dir.join("containerd"),
        ..Default::default()
    }
}

/// A Skiff command line, as found among the host's processes.
#[derive(Debug, PartialEq, Eq)]
struct SkiffCommand {
    /// `server`, `agent`, `kubelet`, `proxy`, …
    command: String,
    /// Its data dir (the command's default unless given), absolute.
    data_dir: Option<PathBuf>,
}

impl SkiffCommand {
    fn of(p: &Process) -> Option<SkiffCommand> {
        let exe = Path::new(p.argv.first()?).file_name()?;
        if exe != "skiff" {
            return None;
        }
        let command = p.argv[1..].iter().find(|a| !a.starts_with('-'))?.clone();
        let default = match command.as_str() {
            "server" | "kubelet" => Some("/var/lib/skiff"),
            "agent" => Some("/var/lib/skiff-agent"),
            _ => None,
        };
        let data_dir = flag(&p.argv, "--data-dir")
            .or(default)
            .map(|d| p.cwd.join(d));
        Some(SkiffCommand { command, data_dir })
    }

    /// Whether it runs (part of) a node: the pod network and Service rules are its.
    fn is_node(&self, p: &Process) -> bool {
        let node = matches!(
            self.command.as_str(),
            "server" | "agent" | "kubelet" | "proxy" | "network-policy"
        );
        node && !p
            .argv
            .iter()
            .any(|a| a == "--disable-agent" || a == "--hollow")
    }

    /// Whether it keeps its state in `data_dir` (a server's kubelet runs in `agent` under it).
    fn uses(&self, data_dir: &Path) -> bool {
        self.data_dir.as_deref().is_some_and(|d| {
            d == data_dir || d.join("agent") == data_dir || d == data_dir.join("agent")
        })
    }
}

/// The value of a flag given as `NAME VALUE` or `NAME=VALUE`.
fn flag<'a>(argv: &'a [String], name: &str) -> Option<&'a str> {
    argv.iter().enumerate().find_map(|(i, a)| {
        if a == name {
            return argv.get(i + 1).map(String::as_str);
        }
        a.strip_prefix(name)?.strip_prefix('=')
    })
}

/// A sandbox containerd started: its id (CNI's container id) and the network namespace pin
/// it joined, if it has its own network.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sandbox {
    pub id: String,
    pub netns: PathBuf,
}

/// The sandboxes with a network namespace among the OCI bundles under `bundles`: containers
/// join `/proc/<pid>/ns/net`, sandboxes a pin under `/var/run/netns`.
pub fn sandboxes(host: &dyn Host, bundles: &Path) -> Vec<Sandbox> {
    host.list(bundles)
        .into_iter()
        .filter_map(|id| {
            let text = host.read(&bundles.join(&id).join("config.json"))?;
            let spec: serde_json::Value = serde_json::from_str(&text).ok()?;
            let path = spec["linux"]["namespaces"]
                .as_array()?
                .iter()
                .find(|ns| ns["type"] == "network")?["path"]
                .as_str()?;
            let netns = PathBuf::from(path);
            let pinned = NETNS_DIRS
                .iter()
                .any(|d| netns.parent() == Some(Path::new(d)));
            pinned.then_some(Sandbox { id, netns })
        })
        .collect()
}

/// One run of [`kill_all`].
struct Cleanup<'a> {
    host: &'a dyn Host,
    data_dir: &'a Path,
    report: Report,
}

/// Stops and removes what the node (or nodes) on `data_dir` left on this host (see the
/// module's doc); `data_dir` should be absolute and free of symlinks, as the processes name
/// it. Every step is taken even when an earlier one failed; failures are in the report.
pub fn kill_all(host: &dyn Host, data_dir: &Path) -> Report {
    let mut run = Cleanup {
        host,
        data_dir,
        report: Report::default(),
    };
    run.stop_skiff_processes();
    let mut sandboxes = Vec::new();
    let mut bridges = BTreeSet::new();
    for dir in kubelet_dirs(data_dir) {
        let containerd = containerd_of(&dir);
        run.stop_containerd(&containerd);
        run.kill_shims(&containerd.socket());
        sandboxes.extend(self::sandboxes(host, &containerd.bundles_dir()));
        run.release_ip_leases(&containerd);
        bridges.extend(bridge_names(host, &containerd));
    }
    run.remove_network_namespaces(&sandboxes);
    run.remove_cni_rules(&sandboxes);
    for s in &sandboxes {
        let cached = format!("{CNI_NETWORK}-{}-{POD_IFNAME}", s.id);
        host.remove_file(&Path::new(CNI_CACHE_DIR).join(cached));
    }
    run.unmount();
    for bridge in bridges {
        run.remove_bridge(&bridge);
    }
    run.remove_host_rules();
    run.report
}

/// Lazily unmounts every mount under `dir`, deepest first (what a stopped containerd leaves:
/// overlay rootfs and shm mounts under its root and state), as [`kill_all`] does; for
/// harnesses whose node ran no pods.
pub fn unmount_under(host: &dyn Host, dir: &Path) -> Report {
    let mut run = Cleanup {
        host,
        data_dir: dir,
        report: Report::default(),
    };
    run.unmount();
    run.report
}

impl Cleanup<'_> {
    fn fail(&mut self, what: impl fmt::Display, why: impl fmt::Display) {
        self.report.errors.push(format!("{what}: {why}"));
    }

    fn kill(&mut self, signal: &str, pid: u32) {
        let pid = pid.to_string();
        // a process that is gone by now is what was wanted
        let _ = self.host.run(&Cmd::new("kill", &[signal, &pid]));
    }

    /// SIGTERM, then SIGKILL for those still alive after [`STOP_GRACE`].
    fn stop(&mut self, pids: &[u32]) {
        for pid in pids {
            self.kill("-TERM", *pid);
        }
        let mut waited = Duration::ZERO;
        loop {
            let alive: BTreeSet<u32> = self.host.processes().iter().map(|p| p.pid).collect();
            let left: Vec<u32> = pids.iter().copied().filter(|p| alive.contains(p)).collect();
            if left.is_empty() {
                return;
            }
            if waited >= STOP_GRACE {
                for pid in left {
                    self.kill("-KILL", pid);
                }
                return;
            }
            self.host.pause(POLL);
            waited += POLL;
        }
    }

    /// `skiff server`/`agent`/`kubelet` on this data dir: they would start pods again.
    fn stop_skiff_processes(&mut self) {
        let pids: Vec<u32> = self
            .host
            .processes()
            .iter()
            .filter(|p| {
                SkiffCommand::of(p).is_some_and(|c| {
                    matches!(c.command.as_str(), "server" | "agent" | "kubelet")
                        && c.uses(self.data_dir)
                })
            })
            .map(|p| p.pid)
            .collect();
        self.stop(&pids);
        self.report.skiff_processes += pids.len();
    }

    /// The managed containerd a killed kubelet left running (started with its config).
    fn stop_containerd(&mut self, containerd: &ContainerdConfig) {
        let config = containerd.config_path().display().to_string();
        let pids: Vec<u32> = self
            .host
            .processes()
            .iter()
            .filter(|p| {
                let exe = p.argv.first().map(|a| Path::new(a).file_name());
                exe == Some(Some("containerd".as_ref()))
                    && flag(&p.argv, "--config") == Some(&config)
            })
            .map(|p| p.pid)
            .collect();
        self.stop(&pids);
        self.report.containerds += pids.len();
    }

    /// The shims whose `-address` is this socket, and their children (each the init of a
    /// container's pid namespace, which ends with it).
    fn kill_shims(&mut self, socket: &Path) {
        let socket = socket.display().to_string();
        let procs = self.host.processes();
        let shims: BTreeSet<u32> = procs
            .iter()
            .filter(|p| {
                let exe = p.argv.first().and_then(|a| Path::new(a).file_name());
                exe.is_some_and(|e| e.to_string_lossy().starts_with("containerd-shim"))
                    && flag(&p.argv, "-address") == Some(&socket)
            })
            .map(|p| p.pid)
            .collect();
        let children: Vec<u32> = procs
            .iter()
            .filter(|p| shims.contains(&p.ppid))
            .map(|p| p.pid)
            .collect();
        for pid in children.iter().chain(&shims) {
            self.kill("-KILL", *pid);
        }
        self.report.shims += shims.len();
        self.report.containers += children.len();
    }

    /// The pod's veth pair (deleted from inside, which removes the host's end on the bridge at
    /// once) and the namespace's pin.
    fn remove_network_namespaces(&mut self, sandboxes: &[Sandbox]) {
        for s in sandboxes {
            if !self.host.exists(&s.netns) {
                continue;
            }
            let name = s.netns.file_name().unwrap_or_default().to_string_lossy();
            let del_veth = Cmd::new("ip", &["-n", &name, "link", "del", POD_IFNAME]);
            if self.host.run(&del_veth).is_ok() {
                self.report.veths += 1;
            }
            match self.host.run(&Cmd::new("ip", &["netns", "del", &name])) {
                Ok(_) => self.report.network_namespaces += 1,
                Err(e) => self.fail(format!("removing network namespace {name}"), e),
            }
        }
    }

    /// The nat rules CNI tagged with these sandboxes' ids (`id: "<id>"` in their comments:
    /// the bridge's masquerading, portmap's DNAT) and the per-sandbox chains they jump to.
    fn remove_cni_rules(&mut self, sandboxes: &[Sandbox]) {
        if sandboxes.is_empty() {
            return;
        }
        let saved = match self.host.run(&Cmd::new("iptables-save", &["-t", "nat"])) {
            Ok(s) => parse_save(&s),
            Err(e) => return self.fail("reading the nat table", e),
        };
        let tags: Vec<String> = sandboxes
            .iter()
            .map(|s| format!("id: \\\"{}\\\"", s.id))
            .collect();
        let tagged = |rule: &str| tags.iter().any(|t| rule.contains(t.as_str()));
        let chains: BTreeSet<&str> = saved
            .rules
            .iter()
            .filter(|(_, rule)| tagged(rule))
            .filter_map(|(_, rule)| jump_target(rule))
            .filter(|c| c.starts_with("CNI-") && !c.starts_with("CNI-HOSTPORT-"))
            .collect();
        let deletes: Vec<&(String, String)> = saved
            .rules
            .iter()
            .filter(|(chain, rule)| tagged(rule) && !chains.contains(chain.as_str()))
            .collect();
        let in_chains = saved
            .rules
            .iter()
            .filter(|(chain, _)| chains.contains(chain.as_str()))
            .count();
        if deletes.is_empty() && chains.is_empty() {
            return;
        }
        let input = restore_input("nat", &deletes, &chains);
        let restore = Cmd::new("iptables-restore", &["-w", "--noflush"]).stdin(input);
        match self.host.run(&restore) {
            Ok(_) => self.report.cni_rules += deletes.len() + in_chains,
            Err(e) => self.fail("deleting the sandboxes' CNI rules", e),
        }
    }

    /// Every IP host-local leased for the data dir's pods: none of them runs any more.
    fn release_ip_leases(&mut self, containerd: &ContainerdConfig) {
        let dir = containerd.ipam_dir().join(CNI_NETWORK);
        for name in self.host.list(&dir) {
            if name.parse::<std::net::IpAddr>().is_ok() && self.host.remove_file(&dir.join(&name)) {
                self.report.ip_leases += 1;
            }
        }
    }

    /// Every mount under the data dir, deepest first, lazily (a process that has just been
    /// killed may not have let go yet).
    fn unmount(&mut self) {
        let mut ours: Vec<PathBuf> = self
            .host
            .mounts()
            .into_iter()
            .filter(|m| m.starts_with(self.data_dir))
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        ours.sort_by_key(|m| std::cmp::Reverse(m.components().count()));
        for m in ours {
            let path = m.display().to_string();
            match self.host.run(&Cmd::new("umount", &["-l", &path])) {
                Ok(_) => self.report.mounts += 1,
                Err(e) => self.fail(format!("unmounting {path}"), e),
            }
        }
    }

    /// The bridge, unless other nodes' pods are still attached to it.
    fn remove_bridge(&mut self, bridge: &str) {
        let sys = Path::new("/sys/class/net").join(bridge);
        if !self.host.exists(&sys) {
            return;
        }
        let attached = self.host.list(&sys.join("brif")).len();
        if attached > 0 {
            self.report
                .bridges
                .insert(bridge.into(), Shared::Kept(attached));
            return;
        }
        match self.host.run(&Cmd::new("ip", &["link", "del", bridge])) {
            Ok(_) => {
                self.report
                    .bridges
                    .insert(bridge.into(), Shared::Removed(1));
            }
            Err(e) => self.fail(format!("removing bridge {bridge}"), e),
        }
    }

    /// The host-wide rules and routes, unless another Skiff node process runs in this network
    /// namespace (it programs and needs them).
    fn remove_host_rules(&mut self) {
        let others = self
            .host
            .processes()
            .iter()
            .filter(|p| p.same_netns && SkiffCommand::of(p).is_some_and(|c| c.is_node(p)))
            .count();
        if others > 0 {
            self.report.host_rules = Some(Shared::Kept(others));
            return;
        }
        let mut removed = 0;
        for table in ["filter", "nat"] {
            removed += self.remove_host_chains(table);
        }
        let tables = self
            .host
            .run(&Cmd::new("nft", &["list", "tables"]))
            .unwrap_or_default();
        // the proxy's and the network policy controller's
        for (family, name) in [("ip", "skiff"), ("inet", "skiff-netpol")] {
            if !tables
                .lines()
                .any(|l| l.trim() == format!("table {family} {name}"))
            {
                continue;
            }
            match self
                .host
                .run(&Cmd::new("nft", &["delete", "table", family, name]))
            {
                Ok(_) => removed += 1,
                Err(e) => self.fail(format!("deleting nftables table {family} {name}"), e),
            }
        }
        // the VXLAN device; its routes, neighbour and forwarding entries go with it
        let device = crate::podnet::vxlan::DEVICE;
        let shown = self
            .host
            .run(&Cmd::new("ip", &["-o", "link", "show", "dev", device]))
            .unwrap_or_default();
        if !shown.trim().is_empty() {
            match self.host.run(&Cmd::new("ip", &["link", "del", device])) {
                Ok(_) => removed += 1,
                Err(e) => self.fail(format!("removing the VXLAN device {device}"), e),
            }
        }
        let proto = crate::podnet::ROUTE_PROTOCOL;
        let routes = self
            .host
            .run(&Cmd::new("ip", &["-4", "route", "show", "proto", proto]))
            .unwrap_or_default();
        let count = routes.lines().filter(|l| !l.trim().is_empty()).count();
        if count > 0 {
            match self
                .host
                .run(&Cmd::new("ip", &["-4", "route", "flush", "proto", proto]))
            {
                Ok(_) => removed += count,
                Err(e) => self.fail("flushing the pod network's routes", e),
            }
        }
        if removed > 0 {
            self.report.host_rules = Some(Shared::Removed(removed));
        }
    }

    /// `KUBE-*` and `SKIFF-*` chains of one table, and portmap's `CNI-HOSTPORT-*` ones when
    /// they map no port any more, with the jumps into them; how many chains.
    fn remove_host_chains(&mut self, table: &str) -> usize {
        let saved = match self.host.run(&Cmd::new("iptables-save", &["-t", table])) {
            Ok(s) => parse_save(&s),
            // no iptables on this host: nothing of ours either
            Err(podnet_runner::Error::Spawn { .. }) => return 0,
            Err(e) => {
                self.fail(format!("reading the {table} table"), e);
                return 0;
            }
        };
        let ports_mapped = saved
            .rules
            .iter()
            .any(|(chain, _)| chain == "CNI-HOSTPORT-DNAT");
        let chains: BTreeSet<&str> = saved
            .chains
            .iter()
            .map(String::as_str)
            .filter(|c| {
                c.starts_with("KUBE-")
                    || c.starts_with("SKIFF-")
                    || (!ports_mapped && c.starts_with("CNI-HOSTPORT-"))
            })
            .collect();
        if chains.is_empty() {
            return 0;
        }
        let jumps: Vec<&(String, String)> = saved
            .rules
            .iter()
            .filter(|(chain, rule)| {
                !chains.contains(chain.as_str())
                    && jump_target(rule).is_some_and(|t| chains.contains(t))
            })
            .collect();
        let input = restore_input(table, &jumps, &chains);
        let restore = Cmd::new("iptables-restore", &["-w", "--noflush"]).stdin(input);
        match self.host.run(&restore) {
            Ok(_) => chains.len(),
            Err(e) => {
                self.fail(format!("deleting the {table} table's Skiff chains"), e);
                0
            }
        }
    }
}

/// The bridges the data dir's CNI network config attaches pods to.
fn bridge_names(host: &dyn Host, containerd: &ContainerdConfig) -> Vec<String> {
    let Some(text) = host.read(&containerd.conflist_path()) else {
        return Vec::new();
    };
    let conf: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
    conf["plugins"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| p["type"] == "bridge")
        .filter_map(|p| p["bridge"].as_str().map(String::from))
        .collect()
}

/// One table of `iptables-save`: its chains, and its rules (chain, the rest of the line).
#[derive(Debug, Default, PartialEq, Eq)]
struct Saved {
    chains: Vec<String>,
    rules: Vec<(String, String)>,
}

fn parse_save(text: &str) -> Saved {
    let mut saved = Saved::default();
    for line in text.lines() {
        if let Some(decl) = line.strip_prefix(':') {
            if let Some(name) = decl.split_whitespace().next() {
                saved.chains.push(name.into());
            }
        } else if let Some(rule) = line.strip_prefix("-A ")
            && let Some((chain, rest)) = rule.split_once(' ')
        {
            saved.rules.push((chain.into(), rest.into()));
        }
    }
    saved
}

/// The chain a rule jumps (`-j`) or goes (`-g`) to.
fn jump_target(rule: &str) -> Option<&str> {
    let words: Vec<&str> = rule.split_whitespace().collect();
    words
        .windows(2)
        .find(|w| w[0] == "-j" || w[0] == "-g")
        .map(|w| w[1])
}

/// An `iptables-restore --noflush` transaction deleting `rules` and then removing `chains`
/// (declaring a chain flushes it; a chain is removed once nothing jumps to it).
fn restore_input(table: &str, rules: &[&(String, String)], chains: &BTreeSet<&str>) -> String {
    let mut out = format!("*{table}\n");
    for (chain, rule) in rules {
        out.push_str(&format!("-D {chain} {rule}\n"));
    }
    for chain in chains {
        out.push_str(&format!(":{chain} - [0:0]\n"));
    }
    for chain in chains {
        out.push_str(&format!("-X {chain}\n"));
    }
    out.push_str("COMMIT\n");
    out
}

/// [`Host`] on this machine.
#[derive(Debug, Default)]
pub struct SystemHost;

impl Host for SystemHost {
    fn processes(&self) -> Vec<Process> {
        let own_netns = std::fs::read_link("/proc/self/ns/net").ok();
        let Ok(entries) = std::fs::read_dir("/proc") else {
            return Vec::new();
        };
        entries
            .flatten()
            .filter_map(|e| {
                let pid: u32 = e.file_name().to_str()?.parse().ok()?;
                let dir = e.path();
                let cmdline = std::fs::read(dir.join("cmdline")).ok()?;
                let stat = std::fs::read_to_string(dir.join("stat")).ok()?;
                // the command name in parentheses may hold spaces: the fields follow its ')'
                let ppid = stat.rsplit(')').next()?.split_whitespace().nth(1)?;
                Some(Process {
                    pid,
                    ppid: ppid.parse().ok()?,
                    argv: cmdline
                        .split(|b| *b == 0)
                        .filter(|a| !a.is_empty())
                        .map(|a| String::from_utf8_lossy(a).into_owned())
                        .collect(),
                    cwd: std::fs::read_link(dir.join("cwd")).unwrap_or_default(),
                    same_netns: std::fs::read_link(dir.join("ns/net")).ok() == own_netns,
                })
            })
            .collect()
    }

    fn run(&self, cmd: &Cmd) -> podnet_runner::Result<String> {
        cmd.run_on_host()
    }

    fn read(&self, path: &Path) -> Option<String> {
        std::fs::read_to_string(path).ok()
    }

    fn list(&self, dir: &Path) -> Vec<String> {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return Vec::new();
        };
        entries
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect()
    }

    fn exists(&self, path: &Path) -> bool {
        path.exists()
    }

    fn remove_file(&self, path: &Path) -> bool {
        std::fs::remove_file(path).is_ok()
    }

    fn mounts(&self) -> Vec<PathBuf> {
        crate::volumes::host::mount_points().unwrap_or_default()
    }

    fn pause(&self, how_long: Duration) {
        std::thread::sleep(how_long);
    }
}

/// A recorded host for tests: processes, files and mounts as set up; `kill` ends a process
/// (SIGTERM not those in `ignoring_term`), `umount` a mount, `ip netns del` a pin, `ip link del` a bridge; every command is recorded,
/// answered from `outputs` (by command line, empty otherwise) or failed if in `failing`.
#[derive(Debug, Default)]
pub struct FakeHost {
    pub processes: Mutex<Vec<Process>>,
    pub ignoring_term: Mutex<BTreeSet<u32>>,
    pub files: Mutex<BTreeMap<PathBuf, String>>,
    pub mounts: Mutex<Vec<PathBuf>>,
    pub commands: Mutex<Vec<Cmd>>,
    pub outputs: Mutex<BTreeMap<String, String>>,
    pub failing: Mutex<BTreeSet<String>>,
}

impl FakeHost {
    /// The command lines run so far, and forgets them.
    pub fn take_lines(&self) -> Vec<String> {
        self.commands.lock().drain(..).map(|c| c.line()).collect()
    }
}

impl Host for FakeHost {
    fn processes(&self) -> Vec<Process> {
        self.processes.lock().clone()
    }

    fn run(&self, cmd: &Cmd) -> podnet_runner::Result<String> {
        self.commands.lock().push(cmd.clone());
        let line = cmd.line();
        if self.failing.lock().contains(&line) {
            return Err(podnet_runner::Error::Failed {
                command: line,
                stderr: "told to fail".into(),
            });
        }
        let args: Vec<&str> = cmd.args.iter().map(String::as_str).collect();
        match (cmd.program, args.as_slice()) {
            ("kill", [signal, pid]) => {
                let ignored =
                    |p: &Process| *signal == "-TERM" && self.ignoring_term.lock().contains(&p.pid);
                self.processes
                    .lock()
                    .retain(|p| p.pid.to_string() != *pid || ignored(p));
            }
            ("umount", [_, path]) => self.mounts.lock().retain(|m| m != Path::new(path)),
            ("ip", ["netns", "del", name]) => {
                let mut files = self.files.lock();
                files.retain(|f, _| !NETNS_DIRS.iter().any(|d| Path::new(d).join(name) == *f));
            }
            ("ip", ["link", "del", bridge]) => {
                let sys = Path::new("/sys/class/net").join(bridge);
                self.files.lock().retain(|f, _| !f.starts_with(&sys));
            }
            _ => {}
        }
        Ok(self.outputs.lock().get(&line).cloned().unwrap_or_default())
    }

    fn read(&self, path: &Path) -> Option<String> {
        self.files.lock().get(path).cloned()
    }

    fn list(&self, dir: &Path) -> Vec<String> {
        let names: BTreeSet<String> = self
            .files
            .lock()
            .keys()
            .filter_map(|f| f.strip_prefix(dir).ok()?.components().next())
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .filter(|n| !n.is_empty())
            .collect();
        names.into_iter().collect()
    }

    fn exists(&self, path: &Path) -> bool {
        self.files.lock().keys().any(|f| f.starts_with(path))
    }

    fn remove_file(&self, path: &Path) -> bool {
        self.files.lock().remove(path).is_some()
    }

    fn mounts(&self) -> Vec<PathBuf> {
        self.mounts.lock().clone()
    }

    fn pause(&self, _how_long: Duration) {}
}

#[cfg(test)]
#[path = "cleanup_tests.rs"]
mod tests;
