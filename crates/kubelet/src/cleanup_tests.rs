//! Unit tests of [`super::kill_all`] on a [`FakeHost`].

use super::*;

const D: &str = "/data/node";
const SOCKET: &str = "/data/node/containerd/containerd.sock";
const BUNDLES: &str = "/data/node/containerd/state/io.containerd.runtime.v2.task/k8s.io";

fn process(pid: u32, ppid: u32, argv: &[&str]) -> Process {
    Process {
        pid,
        ppid,
        argv: argv.iter().map(|a| a.to_string()).collect(),
        cwd: PathBuf::from("/"),
        same_netns: true,
    }
}

fn bundle(netns: &str) -> String {
    serde_json::json!({"linux": {"namespaces": [
        {"type": "pid"},
        {"type": "network", "path": netns},
    ]}})
    .to_string()
}

/// iptables-save's nat table with CNI's rules for sandbox `sb1` (ours) and `sb9` (another
/// node's).
const NAT: &str = r#"*nat
:PREROUTING ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
:CNI-HOSTPORT-DNAT - [0:0]
:CNI-aaa - [0:0]
:CNI-bbb - [0:0]
:CNI-DN-ccc - [0:0]
-A PREROUTING -m addrtype --dst-type LOCAL -j CNI-HOSTPORT-DNAT
-A POSTROUTING -s 10.42.0.5/32 -m comment --comment "name: \"skiff\" id: \"sb1\"" -j CNI-aaa
-A POSTROUTING -s 10.42.0.9/32 -m comment --comment "name: \"skiff\" id: \"sb9\"" -j CNI-bbb
-A CNI-HOSTPORT-DNAT -p tcp -m comment --comment "dnat name: \"skiff\" id: \"sb1\"" -m multiport --dports 8080 -j CNI-DN-ccc
-A CNI-aaa -d 10.42.0.0/24 -m comment --comment "name: \"skiff\" id: \"sb1\"" -j ACCEPT
-A CNI-aaa ! -d 224.0.0.0/4 -m comment --comment "name: \"skiff\" id: \"sb1\"" -j MASQUERADE
-A CNI-bbb ! -d 224.0.0.0/4 -m comment --comment "name: \"skiff\" id: \"sb9\"" -j MASQUERADE
-A CNI-DN-ccc -p tcp -m comment --comment "dnat name: \"skiff\" id: \"sb1\"" -j DNAT --to-destination 10.42.0.5:80
COMMIT
"#;

/// A node on [`D`] whose kubelet was killed: its containerd still runs, one pod (sandbox
/// `sb1`, container `c1`) runs under its shim with a mount, a lease and CNI rules; another
/// node's shim, pod and rules share the host.
fn host_with_a_dead_kubelet() -> FakeHost {
    let host = FakeHost::default();
    *host.processes.lock() = vec![
        process(100, 1, &["/usr/bin/skiff", "kubelet", "--data-dir", D]),
        process(
            101,
            1,
            &[
                "containerd",
                "--config",
                "/data/node/containerd/config.toml",
            ],
        ),
        process(
            200,
            1,
            &[
                "/usr/bin/containerd-shim-runc-v2",
                "-namespace",
                "k8s.io",
                "-id",
                "sb1",
                "-address",
                SOCKET,
            ],
        ),
        process(201, 200, &["/pause"]),
        process(202, 200, &["sleep", "3600"]),
        process(203, 202, &["sh"]),
        // another node's pod
        process(
            300,
            1,
            &[
                "/usr/bin/containerd-shim-runc-v2",
                "-address",
                "/data/other/containerd/containerd.sock",
            ],
        ),
        process(301, 300, &["/pause"]),
    ];
    let files = [
        (
            format!("{BUNDLES}/sb1/config.json"),
            bundle("/var/run/netns/cni-1"),
        ),
        (
            format!("{BUNDLES}/c1/config.json"),
            bundle("/proc/201/ns/net"),
        ),
        ("/var/run/netns/cni-1".into(), String::new()),
        ("/var/run/netns/cni-9".into(), String::new()),
        ("/var/lib/cni/results/skiff-sb1-eth0".into(), "{}".into()),
        ("/var/lib/cni/results/skiff-sb9-eth0".into(), "{}".into()),
        (
            format!("{D}/containerd/cni/ipam/skiff/10.42.0.5"),
            "sb1\neth0".into(),
        ),
        (
            format!("{D}/containerd/cni/ipam/skiff/last_reserved_ip.0"),
            "10.42.0.5".into(),
        ),
        (
            format!("{D}/containerd/cni/net.d/10-skiff.conflist"),
            r#"{"plugins": [{"type": "bridge", "bridge": "cni0"}, {"type": "portmap"}]}"#.into(),
        ),
        ("/sys/class/net/cni0/type".into(), "1".into()),
    ];
    *host.files.lock() = files
        .into_iter()
        .map(|(p, c)| (PathBuf::from(p), c))
        .collect();
    *host.mounts.lock() = [
        "/",
        "/data/node/containerd/root/io.containerd.runtime.v2.task/k8s.io/c1/rootfs",
        "/data/node/pods/u1/volumes/kubernetes.io~empty-dir/cache",
        "/data/node-2/pods/u2/volumes/kubernetes.io~empty-dir/cache",
    ]
    .map(PathBuf::from)
    .to_vec();
    host.outputs
        .lock()
        .insert("iptables-save -t nat".into(), NAT.into());
    host
}

fn alive(host: &FakeHost) -> Vec<u32> {
    host.processes.lock().iter().map(|p| p.pid).collect()
}

#[test]
fn killall_stops_the_nodes_processes_and_removes_its_pods_network_state_and_mounts() {
    let host = host_with_a_dead_kubelet();
    let report = kill_all(&host, Path::new(D));
    assert_eq!(
        report,
        Report {
            skiff_processes: 1,
            containerds: 1,
            shims: 1,
            containers: 2,
            network_namespaces: 1,
            veths: 1,
            cni_rules: 5,
            ip_leases: 1,
            mounts: 2,
            bridges: BTreeMap::from([("cni0".into(), Shared::Removed(1))]),
            host_rules: None,
            errors: Vec::new(),
        }
    );
    // the container's own child dies with its pid namespace's init
    assert_eq!(
        alive(&host),
        [203, 300, 301],
        "another node's shim and pod live on"
    );
    let lines = host.take_lines();
    for line in [
        "kill -TERM 100",
        "kill -TERM 101",
        "kill -KILL 201",
        "kill -KILL 202",
        "kill -KILL 200",
        "ip -n cni-1 link del eth0",
        "ip netns del cni-1",
        "umount -l /data/node/containerd/root/io.containerd.runtime.v2.task/k8s.io/c1/rootfs",
        "umount -l /data/node/pods/u1/volumes/kubernetes.io~empty-dir/cache",
        "ip link del cni0",
    ] {
        assert!(lines.iter().any(|l| l == line), "{line} not in {lines:#?}");
    }
    assert!(
        !lines
            .iter()
            .any(|l| l.contains("cni-9") || l.contains("node-2"))
    );
    let files = host.files.lock();
    assert!(!files.contains_key(Path::new("/var/run/netns/cni-1")));
    assert!(files.contains_key(Path::new("/var/run/netns/cni-9")));
    assert!(!files.contains_key(Path::new("/var/lib/cni/results/skiff-sb1-eth0")));
    assert!(files.contains_key(Path::new("/var/lib/cni/results/skiff-sb9-eth0")));
    assert!(files.contains_key(&PathBuf::from(format!(
        "{D}/containerd/cni/ipam/skiff/last_reserved_ip.0"
    ))));
}

#[test]
fn only_the_sandboxes_cni_rules_and_chains_are_deleted() {
    let host = host_with_a_dead_kubelet();
    kill_all(&host, Path::new(D));
    let restores: Vec<String> = host
        .commands
        .lock()
        .iter()
        .filter(|c| c.program == "iptables-restore")
        .filter_map(|c| c.stdin.clone())
        .collect();
    assert_eq!(
        restores[0],
        "*nat\n\
         -D POSTROUTING -s 10.42.0.5/32 -m comment --comment \"name: \\\"skiff\\\" id: \\\"sb1\\\"\" -j CNI-aaa\n\
         -D CNI-HOSTPORT-DNAT -p tcp -m comment --comment \"dnat name: \\\"skiff\\\" id: \\\"sb1\\\"\" -m multiport --dports 8080 -j CNI-DN-ccc\n\
         :CNI-DN-ccc - [0:0]\n\
         :CNI-aaa - [0:0]\n\
         -X CNI-DN-ccc\n\
         -X CNI-aaa\n\
         COMMIT\n"
    );
}

#[test]
fn a_second_run_finds_nothing_left() {
    let host = host_with_a_dead_kubelet();
    kill_all(&host, Path::new(D));
    // the rules are gone now
    host.outputs.lock().clear();
    let again = kill_all(&host, Path::new(D));
    assert!(again.found_nothing(), "{again:?}");
    assert!(again.errors.is_empty());
    assert!(again.to_string().contains("nothing left"), "{again}");
}

#[test]
fn the_bridge_stays_while_other_nodes_pods_are_attached_to_it() {
    let host = host_with_a_dead_kubelet();
    host.files
        .lock()
        .insert("/sys/class/net/cni0/brif/veth9".into(), String::new());
    let report = kill_all(&host, Path::new(D));
    assert_eq!(report.bridges["cni0"], Shared::Kept(1));
    assert!(!host.take_lines().contains(&"ip link del cni0".to_string()));
    assert!(
        report
            .to_string()
            .contains("kept bridge cni0: 1 other interface is attached")
    );
}

const FILTER_WITH_PROXY: &str = "*filter
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:KUBE-SERVICES - [0:0]
:KUBE-FORWARD - [0:0]
:DOCKER-USER - [0:0]
-A INPUT -m conntrack --ctstate NEW -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES
-A FORWARD -m comment --comment \"kubernetes forwarding rules\" -j KUBE-FORWARD
-A FORWARD -j DOCKER-USER
-A KUBE-FORWARD -m conntrack --ctstate INVALID -j DROP
COMMIT
";

#[test]
fn host_rules_are_removed_when_no_other_skiff_node_runs_here() {
    let host = FakeHost::default();
    host.outputs
        .lock()
        .insert("iptables-save -t filter".into(), FILTER_WITH_PROXY.into());
    host.outputs.lock().insert(
        "iptables-save -t nat".into(),
        "*nat\n:POSTROUTING ACCEPT [0:0]\n:SKIFF-POSTROUTING - [0:0]\n:CNI-HOSTPORT-DNAT - [0:0]\n\
         -A POSTROUTING -m comment --comment \"skiff: pod network masquerade\" -j SKIFF-POSTROUTING\n\
         COMMIT\n"
            .into(),
    );
    host.outputs.lock().insert(
        "nft list tables".into(),
        "table inet filter\ntable ip skiff\ntable inet skiff-netpol\n".into(),
    );
    host.outputs.lock().insert(
        "ip -4 route show proto 83".into(),
        "10.42.1.0/24 via 10.250.0.3 dev eth0 proto 83\n".into(),
    );
    host.outputs.lock().insert(
        "ip -o link show dev flannel.1".into(),
        "7: flannel.1: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 1450 qdisc noqueue state UNKNOWN\n"
            .into(),
    );
    let report = kill_all(&host, Path::new(D));
    // KUBE-SERVICES, KUBE-FORWARD; SKIFF-POSTROUTING, CNI-HOSTPORT-DNAT; the two nft tables;
    // the VXLAN device; a route
    assert_eq!(report.host_rules, Some(Shared::Removed(8)));
    let stdin: Vec<String> = host
        .commands
        .lock()
        .iter()
        .filter_map(|c| c.stdin.clone())
        .collect();
    assert_eq!(
        stdin[0],
        "*filter\n\
         -D INPUT -m conntrack --ctstate NEW -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES\n\
         -D FORWARD -m comment --comment \"kubernetes forwarding rules\" -j KUBE-FORWARD\n\
         :KUBE-FORWARD - [0:0]\n:KUBE-SERVICES - [0:0]\n-X KUBE-FORWARD\n-X KUBE-SERVICES\nCOMMIT\n"
    );
    assert!(
        stdin[1].contains(":CNI-HOSTPORT-DNAT - [0:0]\n"),
        "{}",
        stdin[1]
    );
    let lines = host.take_lines();
    assert!(lines.contains(&"nft delete table ip skiff".to_string()));
    assert!(lines.contains(&"ip link del flannel.1".to_string()));
    assert!(lines.contains(&"nft delete table inet skiff-netpol".to_string()));
    assert!(lines.contains(&"ip -4 route flush proto 83".to_string()));
}

#[test]
fn host_rules_stay_while_another_skiff_node_runs_in_this_network_namespace() {
    let host = FakeHost::default();
    *host.processes.lock() = vec![
        process(
            7,
            1,
            &["/usr/bin/skiff", "server", "--data-dir", "/var/lib/other"],
        ),
        // neither in this namespace, nor a node
        Process {
            same_netns: false,
            ..process(8, 1, &["/usr/bin/skiff", "kubelet", "--data-dir", "/x"])
        },
        process(9, 1, &["/usr/bin/skiff", "apiserver", "--data-dir", "/y"]),
        process(10, 1, &["/usr/bin/skiff", "server", "--disable-agent"]),
    ];
    let report = kill_all(&host, Path::new(D));
    assert_eq!(report.host_rules, Some(Shared::Kept(1)));
    assert_eq!(report.skiff_processes, 0);
    assert!(!host.take_lines().iter().any(|l| l.starts_with("iptables")));
    assert_eq!(alive(&host), [7, 8, 9, 10]);
}

#[test]
fn the_skiff_processes_of_a_data_dir_are_found_in_every_layout() {
    let on = |argv: &[&str], cwd: &str| {
        let p = Process {
            cwd: cwd.into(),
            ..process(1, 1, argv)
        };
        SkiffCommand::of(&p).is_some_and(|c| c.uses(Path::new("/var/lib/skiff")))
    };
    assert!(on(&["skiff", "server"], "/"), "the default data dir");
    assert!(on(
        &["/bin/skiff", "server", "--data-dir=/var/lib/skiff"],
        "/"
    ));
    assert!(on(
        &["skiff", "kubelet", "--data-dir", "/var/lib/skiff/agent"],
        "/"
    ));
    assert!(on(&["skiff", "agent", "--data-dir", "skiff"], "/var/lib"));
    assert!(
        !on(&["skiff", "agent"], "/"),
        "the agent's default is its own"
    );
    assert!(!on(
        &["skiff", "server", "--data-dir", "/var/lib/skiff2"],
        "/"
    ));
    assert!(!on(&["skiffy", "server"], "/"));
    let server_on_parent = process(1, 1, &["skiff", "server", "--data-dir", "/d"]);
    assert!(
        SkiffCommand::of(&server_on_parent)
            .unwrap()
            .uses(Path::new("/d/agent")),
        "a server runs its kubelet in agent/"
    );
}

#[test]
fn a_process_that_ignores_sigterm_is_killed_after_the_grace_period() {
    let host = FakeHost::default();
    *host.processes.lock() = vec![process(5, 1, &["skiff", "kubelet", "--data-dir", D])];
    host.ignoring_term.lock().insert(5);
    let report = kill_all(&host, Path::new(D));
    assert_eq!(report.skiff_processes, 1);
    let lines = host.take_lines();
    assert_eq!(lines[..2], ["kill -TERM 5", "kill -KILL 5"]);
    assert!(alive(&host).is_empty());
}

#[test]
fn a_failed_step_is_reported_and_the_others_still_run() {
    let host = host_with_a_dead_kubelet();
    host.failing.lock().insert("ip netns del cni-1".into());
    let report = kill_all(&host, Path::new(D));
    assert_eq!(report.network_namespaces, 0);
    assert_eq!(report.mounts, 2);
    assert_eq!(report.errors.len(), 1, "{:?}", report.errors);
    assert!(report.errors[0].starts_with("removing network namespace cni-1: "));
    assert!(
        report
            .to_string()
            .contains("failed: removing network namespace cni-1")
    );
}
