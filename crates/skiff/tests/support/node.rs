//! A real `skiff kubelet` for the end-to-end tests, with the managed containerd it starts:
//! started on its own data dir, by default on this host with its kubelet server on a free
//! loopback port (the Node's InternalIP is 127.0.0.1 so that the API server reaches it there),
//! or in a network namespace of its own ([`Placement`], see [`super::netns`]), with a cgroup
//! root of its own ([`CgroupRoot`]), and torn down with whatever containers and cgroups a
//! failed test left.

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use k8s_openapi::api::core::v1::Pod;
use kube::Api;

use super::ApiServer;

/// Why this host cannot run the test, if it cannot (see [`super::skip`]).
pub fn unsupported() -> Option<String> {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let root = status
        .lines()
        .find(|l| l.starts_with("Uid:"))
        .and_then(|l| l.split_whitespace().nth(1))
        == Some("0");
    if !root {
        return Some("not root: containerd and CNI need root".into());
    }
    for binary in [
        "containerd",
        "ctr",
        "runc",
        "/usr/lib/cni/bridge",
        "/bin/busybox",
    ] {
        let found = if binary.starts_with('/') {
            Path::new(binary).exists()
        } else {
            Command::new("sh")
                .args(["-c", &format!("command -v {binary}")])
                .output()
                .is_ok_and(|o| o.status.success())
        };
        if !found {
            return Some(format!("{binary} is not installed (scripts/install-deps)"));
        }
    }
    None
}

/// [`unsupported`], or why a test that reads cgroup v1 files cannot run here (the host these
/// tests are written for has cgroup v1; the v2 files are unit-tested).
pub fn unsupported_without_cgroup_v1() -> Option<String> {
    unsupported().or_else(|| {
        let v1 = Path::new("/sys/fs/cgroup/memory").is_dir();
        (!v1).then(|| "no cgroup v1 memory hierarchy at /sys/fs/cgroup/memory".to_string())
    })
}

/// A file of a cgroup v1 hierarchy (`cgroup` as `<cgroup root>/kubepods/...`), trimmed.
pub fn cgroup_file(hierarchy: &str, cgroup: &str, file: &str) -> String {
    let path = cgroup_dir(hierarchy, cgroup).join(file);
    std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
        .trim()
        .to_string()
}

/// A cgroup's directory in a cgroup v1 hierarchy.
pub fn cgroup_dir(hierarchy: &str, cgroup: &str) -> PathBuf {
    Path::new("/sys/fs/cgroup")
        .join(hierarchy)
        .join(cgroup.trim_start_matches('/'))
}

/// Where a kubelet runs and how the API server reaches it.
#[derive(Debug, Clone)]
pub struct Placement {
    /// The command the kubelet runs under (`nsenter --net=…`); empty: directly.
    pub prefix: Vec<String>,
    /// The kubelet's kubeconfig (its node identity, the API server's address as it sees it).
    pub kubeconfig: PathBuf,
    /// Its network flags: `--node-ip`, `--address`, `--port`, the pod network.
    pub args: Vec<String>,
}

impl Placement {
    /// On this host: the kubelet server on a free loopback port, InternalIP 127.0.0.1, pod
    /// CIDR 10.42.0.0/24, and no pod network across nodes (so no routes or masquerade rules
    /// on the host; the CNI bridge masquerades as before).
    pub fn loopback(api: &ApiServer, node: &str) -> Placement {
        Placement {
            prefix: Vec::new(),
            kubeconfig: node_kubeconfig(api, node),
            args: [
                "--pod-cidr",
                "10.42.0.0/24",
                "--address",
                "127.0.0.1",
                "--port",
                "0",
                "--node-ip",
                "127.0.0.1",
                "--flannel-backend",
                "none",
            ]
            .map(String::from)
            .to_vec(),
        }
    }
}

/// A cgroup of one test kubelet's own, made in every mounted hierarchy, for its
/// `--cgroup-root`: its `kubepods` and pod cgroups stay apart from those of the kubelets of
/// other tests and of the host. Dropping it kills what is left in it and removes it, what is
/// below it first.
pub struct CgroupRoot {
    driver: skiff_kubelet::cgroups::driver::Cgroupfs,
    name: skiff_kubelet::cgroups::driver::CgroupName,
}

impl CgroupRoot {
    pub fn new() -> CgroupRoot {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let fs = Arc::new(skiff_kubelet::cgroups::fs::RealCgroupFs);
        let driver = skiff_kubelet::cgroups::driver::Cgroupfs::new(fs).expect("cgroup hierarchies");
        let name = skiff_kubelet::cgroups::driver::CgroupName::parse(&format!(
            "/skiff-test-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        driver
            .create(&name, &Default::default())
            .unwrap_or_else(|e| panic!("making cgroup {name}: {e}"));
        CgroupRoot { driver, name }
    }

    /// The cgroupfs form `--cgroup-root` takes (`/skiff-test-…`).
    pub fn name(&self) -> String {
        self.name.to_cgroupfs()
    }
}

impl Drop for CgroupRoot {
    fn drop(&mut self) {
        // killed processes leave their cgroups once they have exited
        for _ in 0..50 {
            match self.driver.destroy(&self.name) {
                Ok(()) => return,
                Err(_) => std::thread::sleep(std::time::Duration::from_millis(100)),
            }
        }
        eprintln!("cgroup {} could not be removed", self.name);
    }
}

/// A `skiff kubelet` child with its data dir and cgroup root. Dropping it kills whatever
/// containers are left (a failed test), stops the kubelet with SIGTERM (which stops its
/// containerd) and removes the data dir and the cgroup root.
pub struct KubeletProcess {
    child: Child,
    node: String,
    placement: Placement,
    /// Extra flags, kept across [`KubeletProcess::restart`]; `--cgroup-root` among them.
    args: Vec<String>,
    dir: tempfile::TempDir,
    /// Dropped after the kubelet's containers are killed (fields drop after `drop`).
    cgroup_root: CgroupRoot,
    kubeconfig: PathBuf,
    /// The kubelet server's port (from the ready line).
    port: u16,
    _lines: std::sync::mpsc::Receiver<String>,
}

impl KubeletProcess {
    pub fn start(api: &ApiServer, node: &str) -> KubeletProcess {
        KubeletProcess::start_with(api, node, &[])
    }

    /// Starts a kubelet with these extra flags.
    pub fn start_with(api: &ApiServer, node: &str, args: &[&str]) -> KubeletProcess {
        KubeletProcess::start_placed(api, node, Placement::loopback(api, node), args)
    }

    /// Starts a kubelet placed as `placement` says, with these extra flags.
    pub fn start_placed(
        api: &ApiServer,
        node: &str,
        placement: Placement,
        extra_args: &[&str],
    ) -> KubeletProcess {
        let dir = tempfile::tempdir().expect("temp dir");
        let cgroup_root = CgroupRoot::new();
        let mut args: Vec<String> = vec!["--cgroup-root".into(), cgroup_root.name()];
        args.extend(extra_args.iter().map(|a| a.to_string()));
        let (child, port, lines) = spawn_kubelet(&placement, node, dir.path(), &args);
        KubeletProcess {
            child,
            node: node.to_string(),
            placement,
            args,
            dir,
            cgroup_root,
            kubeconfig: api.kubeconfig(),
            port,
            _lines: lines,
        }
    }

    /// [`KubeletProcess::restart`] with other extra flags (kept for later restarts).
    pub fn restart_with(&mut self, args: &[&str]) {
        self.args = args.iter().map(|a| a.to_string()).collect();
        self.restart();
    }

    /// Stops the kubelet (SIGTERM: it stops its containerd, the containers keep running) and
    /// starts it again on the same data dir.
    pub fn restart(&mut self) {
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status();
        let _ = self.child.wait();
        let (child, port, lines) =
            spawn_kubelet(&self.placement, &self.node, self.dir.path(), &self.args);
        self.child = child;
        self.port = port;
        self._lines = lines;
    }

    /// The cgroup the kubelet's `kubepods` is under (`/skiff-test-…`).
    pub fn cgroup_root(&self) -> String {
        self.cgroup_root.name()
    }

    /// The kubelet's static pod directory (created on demand).
    pub fn manifests(&self) -> PathBuf {
        self.dir.path().join("manifests")
    }

    /// The kubelet server's port (on 127.0.0.1 when placed on loopback).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The kubelet server's self-signed certificate (PEM).
    pub fn serving_certificate(&self) -> String {
        super::read(&self.data().join("pki/kubelet.crt"))
    }

    pub fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    pub fn socket(&self) -> PathBuf {
        self.data().join("containerd/containerd.sock")
    }

    pub fn log(&self) -> String {
        super::read(&self.dir.path().join("kubelet.log"))
    }

    /// `ctr -n k8s.io <args>` against the managed containerd.
    pub fn ctr(&self, args: &[&str]) -> String {
        let out = super::run_guarded(
            Command::new("ctr")
                .arg("-a")
                .arg(self.socket())
                .args(["-n", "k8s.io"])
                .args(args),
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

impl KubeletProcess {
    /// Kills the kubelet with SIGKILL, as a crash would: its containerd and pods keep running.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for KubeletProcess {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("--- kubelet log ---\n{}", self.log());
            // a failed test: let the kubelet tear its pods down properly (CNI included)
            if matches!(self.child.try_wait(), Ok(None)) {
                super::run_guarded(
                    Command::new(super::KUBECTL_133)
                        .arg("--kubeconfig")
                        .arg(&self.kubeconfig)
                        .args([
                            "delete",
                            "pods",
                            "--all",
                            "--grace-period=1",
                            "--timeout=50s",
                        ]),
                );
            }
        }
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = Command::new("kill")
                .arg("-TERM")
                .arg(self.child.id().to_string())
                .status();
            let _ = self.child.wait();
        }
        clean_up(&self.data());
    }
}

/// Removes what a test's node left on the host under its data dir (pods' processes, network
/// namespaces, veths, CNI rules, mounts), as `skiff killall` does; what fails is printed.
pub fn clean_up(data_dir: &Path) {
    use skiff_kubelet::cleanup::{SystemHost, kill_all};
    let report = kill_all(&SystemHost, data_dir);
    if !report.errors.is_empty() {
        eprintln!("cleaning up {}:\n{report}", data_dir.display());
    }
}

/// The hard eviction thresholds of a test's kubelet unless it sets its own: upstream's memory
/// threshold alone. The test hosts' disks are often nearly full (build directories), and
/// upstream's default disk thresholds (`nodefs.available<10%`, `imagefs.available<15%`) would
/// put every test node under DiskPressure, refusing and evicting its pods.
pub const EVICTION_HARD: &str = "memory.available<100Mi";

/// [`EVICTION_HARD`] as `skiff server`'s and `skiff agent`'s `--kubelet-arg`.
pub fn eviction_hard_arg() -> String {
    format!("eviction-hard={EVICTION_HARD}")
}

/// Starts `skiff kubelet` with its data under `dir` and waits for its ready line; the child,
/// its server's port and its further output.
fn spawn_kubelet(
    placement: &Placement,
    node: &str,
    dir: &Path,
    args: &[String],
) -> (Child, u16, std::sync::mpsc::Receiver<String>) {
    let skiff = env!("CARGO_BIN_EXE_skiff");
    let mut cmd = match placement.prefix.split_first() {
        Some((program, rest)) => {
            let mut cmd = Command::new(program);
            cmd.args(rest).arg(skiff);
            cmd
        }
        None => Command::new(skiff),
    };
    cmd.arg("kubelet")
        .arg("--kubeconfig")
        .arg(&placement.kubeconfig)
        .args(["--node-name", node])
        .args(&placement.args)
        .arg("--data-dir")
        .arg(dir.join("data"))
        // static pods, read every second
        .arg("--pod-manifest-path")
        .arg(dir.join("manifests"))
        .args(["--file-check-frequency", "1s"]);
    if !args.iter().any(|a| a.starts_with("--eviction-hard")) {
        cmd.args(["--eviction-hard", EVICTION_HARD]);
    }
    cmd.args(args);
    let (child, ready, lines) = super::spawn_until_ready(&mut cmd, &dir.join("kubelet.log"));
    assert!(ready.contains("containerd://"), "{ready}");
    let port = ready
        .rsplit(':')
        .next()
        .and_then(|p| p.trim().parse().ok())
        .unwrap_or_else(|| panic!("no server port in {ready:?}"));
    (child, port, lines)
}

/// A kubeconfig with the node's own identity (`system:node:<node>` in `system:nodes`, as
/// kubelet TLS bootstrapping gives upstream's kubelets), so the Node authorizer and
/// NodeRestriction judge what the kubelet does.
pub fn node_kubeconfig(api: &ApiServer, node: &str) -> PathBuf {
    super::cluster::identity(api, &format!("system:node:{node}"), Some("system:nodes"))
}

/// The pod, once it is in `phase`.
pub async fn in_phase(pods: &Api<Pod>, name: &str, phase: &str) -> Option<Pod> {
    let pod = pods.get(name).await.ok()?;
    (pod.status.as_ref()?.phase.as_deref() == Some(phase)).then_some(pod)
}

/// The pod's phase once it has finished (Succeeded or Failed).
pub async fn finished(pods: &Api<Pod>, name: &str) -> Option<String> {
    let phase = pods.get(name).await.ok()?.status?.phase?;
    matches!(phase.as_str(), "Succeeded" | "Failed").then_some(phase)
}
