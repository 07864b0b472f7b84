//! The real dataplane: rules rendered from Services and EndpointSlices applied with the real
//! runner inside a network namespace this test creates (`ip netns exec`), read back with
//! `iptables -S` and `nft list table`, then updated, and stale chains removed; a TCP server and
//! client in the namespace check that traffic to a ClusterIP and to a NodePort reaches the
//! endpoint and that a Service without endpoints refuses. Needs root, `ip`, `iptables-restore`,
//! `nft` and `python3`; skips with a message otherwise.

use std::collections::BTreeSet;
use std::process::Command;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointPort, EndpointSlice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use skiff_proxy::dataplane::{Context, Dataplane, ServiceTable};
use skiff_proxy::iptables::Iptables;
use skiff_proxy::model::{ServiceKey, service_ports};
use skiff_proxy::nftables::Nftables;
use skiff_proxy::runner::{OwnedNetns, Runner};

/// A private network namespace for one test.
fn netns() -> OwnedNetns {
    OwnedNetns::create("skiff-proxytest").expect("ip netns add")
}

/// Runs `sh -c script` inside the namespace and returns its standard output.
fn sh(netns: &OwnedNetns, script: &str) -> String {
    netns
        .runner()
        .run("sh", &["-c", script], None)
        .unwrap_or_else(|e| panic!("{script}: {e}"))
}

fn runner(netns: &OwnedNetns) -> Arc<dyn Runner> {
    Arc::new(netns.runner())
}

/// A child process killed on drop.
struct Child(std::process::Child);

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A TCP server on 10.42.0.2:8080 in `netns` (on its loopback) that greets and hangs up, and a
/// route to the Service range through a veth, so that connections to ClusterIPs leave through
/// the nat OUTPUT hook.
fn serve_endpoint(netns: &OwnedNetns) -> Child {
    sh(
        netns,
        "ip link set lo up && ip addr add 10.42.0.2/32 dev lo && \
         ip link add svc0 type veth peer name svc1 && ip addr add 10.43.0.254/16 dev svc0 && \
         ip link set svc0 up && ip link set svc1 up",
    );
    let server = "import socket\n\
        s = socket.socket()\n\
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n\
        s.bind(('10.42.0.2', 8080))\n\
        s.listen()\n\
        print('listening', flush=True)\n\
        while True:\n    c, _ = s.accept()\n    c.sendall(b'hello from 10.42.0.2')\n    c.close()\n";
    let mut child = Command::new("ip")
        .args(["netns", "exec", netns.name(), "python3", "-c", server])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("python3");
    let mut line = String::new();
    let stdout = child.stdout.take().expect("stdout");
    std::io::BufRead::read_line(&mut std::io::BufReader::new(stdout), &mut line).unwrap();
    assert_eq!(line.trim(), "listening");
    Child(child)
}

/// What a TCP client in `netns` gets from `ip:port`: the greeting, or the error's name.
fn connect(netns: &OwnedNetns, ip: &str, port: u16) -> String {
    let client = format!(
        "import socket\n\
         try:\n    print(socket.create_connection(('{ip}', {port}), timeout=5).recv(100).decode())\n\
         except OSError as e:\n    print(type(e).__name__)\n"
    );
    sh(netns, &format!("python3 -c \"{client}\""))
        .trim()
        .to_string()
}

/// Why this host cannot run the test, if it cannot.
fn unsupported() -> Option<String> {
    let uid = Command::new("id").arg("-u").output().ok()?;
    if String::from_utf8_lossy(&uid.stdout).trim() != "0" {
        return Some("not root".into());
    }
    for tool in ["ip", "iptables-restore", "iptables-save", "nft", "python3"] {
        let found = Command::new("sh")
            .args(["-c", &format!("command -v {tool}")])
            .stdout(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !found {
            return Some(format!("{tool} is not installed"));
        }
    }
    None
}

macro_rules! require_dataplane {
    () => {
        if let Some(why) = unsupported() {
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "CI=true and this host cannot run the test: {why}"
            );
            eprintln!("skipping: the real dataplane test needs root, ip, iptables, nft and python3 ({why})");
            return;
        }
    };
}

fn service(name: &str, ip: &str, node_port: Option<i32>) -> Service {
    Service {
        metadata: ObjectMeta {
            namespace: Some("ns1".into()),
            name: Some(name.into()),
            ..Default::default()
        },
        spec: Some(ServiceSpec {
            cluster_ip: Some(ip.into()),
            type_: Some(
                if node_port.is_some() {
                    "NodePort"
                } else {
                    "ClusterIP"
                }
                .into(),
            ),
            session_affinity: Some("ClientIP".into()),
            ports: Some(vec![ServicePort {
                name: Some("http".into()),
                protocol: Some("TCP".into()),
                port: 80,
                node_port,
                ..Default::default()
            }]),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn slice(service: &str, ips: &[&str]) -> EndpointSlice {
    EndpointSlice {
        metadata: ObjectMeta {
            namespace: Some("ns1".into()),
            name: Some(format!("{service}-a")),
            ..Default::default()
        },
        address_type: "IPv4".into(),
        ports: Some(vec![EndpointPort {
            name: Some("http".into()),
            protocol: Some("TCP".into()),
            port: Some(8080),
            ..Default::default()
        }]),
        endpoints: ips
            .iter()
            .map(|ip| Endpoint {
                addresses: vec![ip.to_string()],
                node_name: Some("n1".into()),
                ..Default::default()
            })
            .collect(),
    }
}

/// `web` (NodePort, with `web_ips` as endpoints) and `db` (no endpoints).
fn table(web_ips: &[&str], with_web: bool) -> ServiceTable {
    let mut table = ServiceTable::new();
    if with_web {
        let web = service_ports(
            &service("web", "10.43.0.41", Some(30001)),
            [&slice("web", web_ips)],
            "n1",
        );
        table.insert(ServiceKey::new("ns1", "web"), web);
    }
    let db = service_ports(&service("db", "10.43.0.50", None), [], "n1");
    table.insert(ServiceKey::new("ns1", "db"), db);
    table
}

fn changed(name: &str) -> BTreeSet<ServiceKey> {
    [ServiceKey::new("ns1", name)].into()
}

fn run(runner: &Arc<dyn Runner>, program: &str, args: &[&str]) -> String {
    runner.run(program, args, None).expect(program)
}

fn chains(listing: &str, prefix: &str) -> BTreeSet<String> {
    listing
        .lines()
        .filter_map(|l| l.strip_prefix("-N "))
        .filter(|c| c.starts_with(prefix))
        .map(str::to_string)
        .collect()
}

#[test]
fn iptables_rules_apply_update_and_lose_stale_chains_in_a_netns() {
    require_dataplane!();
    let netns = netns();
    let runner = runner(&netns);
    let context = Context::default();
    let mut iptables = Iptables::new(runner.clone());
    let three = ["10.42.0.2", "10.42.0.3", "10.42.0.4"];
    iptables
        .sync(&table(&three, true), &BTreeSet::new(), &context, true)
        .expect("full sync");
    let nat = run(&runner, "iptables", &["-w", "-t", "nat", "-S"]);
    assert!(nat.contains(
        "-A PREROUTING -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES"
    ));
    assert!(nat.contains(
        "-A POSTROUTING -m comment --comment \"kubernetes postrouting rules\" -j KUBE-POSTROUTING"
    ));
    assert!(nat.contains("-A KUBE-MARK-MASQ -j MARK --set-xmark 0x4000/0x4000"));
    assert!(nat.contains("-d 10.43.0.41/32 -p tcp -m comment --comment \"ns1/web:http cluster IP\" -m tcp --dport 80 -j KUBE-SVC-"));
    assert!(nat.contains("-m statistic --mode random --probability 0.33333333349"));
    assert!(nat.contains("--dport 30001 -j KUBE-EXT-"));
    assert_eq!(chains(&nat, "KUBE-SEP-").len(), 3);
    let filter = run(&runner, "iptables", &["-w", "-t", "filter", "-S"]);
    assert!(filter.contains("-d 10.43.0.50/32 -p tcp -m comment --comment \"ns1/db:http has no endpoints\" -m tcp --dport 80 -j REJECT"));

    // one endpoint goes: only web is rewritten, its stale endpoint chain deleted
    iptables
        .sync(&table(&three[..2], true), &changed("web"), &context, false)
        .expect("partial sync");
    let nat = run(&runner, "iptables", &["-w", "-t", "nat", "-S"]);
    assert_eq!(chains(&nat, "KUBE-SEP-").len(), 2);
    assert!(!nat.contains("10.42.0.4"));
    assert_eq!(
        nat.matches("-j KUBE-SERVICES").count(),
        2,
        "jumps not duplicated"
    );

    // a restarted proxy without web: its full sync deletes web's chains of the previous run
    let mut restarted = Iptables::new(runner.clone());
    restarted
        .sync(&table(&[], false), &BTreeSet::new(), &context, true)
        .expect("full sync after restart");
    let nat = run(&runner, "iptables", &["-w", "-t", "nat", "-S"]);
    assert!(
        chains(&nat, "KUBE-S").iter().all(|c| c == "KUBE-SERVICES"),
        "{nat}"
    );
    assert!(!nat.contains("ns1/web"));
    assert_eq!(
        nat.matches("-j KUBE-SERVICES").count(),
        2,
        "jumps not duplicated"
    );
    let filter = run(&runner, "iptables", &["-w", "-t", "filter", "-S"]);
    assert_eq!(filter.matches("-j KUBE-SERVICES").count(), 3, "{filter}");
    assert_eq!(
        filter.matches("-j KUBE-EXTERNAL-SERVICES").count(),
        2,
        "{filter}"
    );
}

#[test]
fn nftables_table_applies_updates_one_service_and_is_replaced_on_restart_in_a_netns() {
    require_dataplane!();
    let netns = netns();
    let runner = runner(&netns);
    let context = Context::default();
    let mut nft = Nftables::new(runner.clone());
    let three = ["10.42.0.2", "10.42.0.3", "10.42.0.4"];
    nft.sync(&table(&three, true), &BTreeSet::new(), &context, true)
        .expect("full sync");
    let listing = run(&runner, "nft", &["list", "table", "ip", "skiff"]);
    assert!(
        listing.contains("10.43.0.41 . tcp . 80 : goto service-"),
        "{listing}"
    );
    assert!(
        listing.contains("tcp . 30001 : goto external-"),
        "{listing}"
    );
    assert!(
        listing.contains("10.43.0.50 . tcp . 80 : goto reject-chain"),
        "{listing}"
    );
    assert!(listing.contains("numgen random mod 3 vmap"), "{listing}");
    assert!(listing.contains("dnat to 10.42.0.4:8080"), "{listing}");
    assert!(listing.contains("update @affinity-"), "{listing}");

    nft.sync(&table(&three[..2], true), &changed("web"), &context, false)
        .expect("partial sync");
    let listing = run(&runner, "nft", &["list", "table", "ip", "skiff"]);
    assert!(listing.contains("numgen random mod 2 vmap"), "{listing}");
    assert!(!listing.contains("10.42.0.4"), "{listing}");

    // web loses its endpoints: its element moves to the reject map
    nft.sync(&table(&[], true), &changed("web"), &context, false)
        .expect("partial sync to no endpoints");
    let listing = run(&runner, "nft", &["list", "table", "ip", "skiff"]);
    assert!(
        listing.contains("10.43.0.41 . tcp . 80 : goto reject-chain"),
        "{listing}"
    );
    assert!(!listing.contains("chain endpoint-"), "{listing}");

    let mut restarted = Nftables::new(runner.clone());
    restarted
        .sync(&table(&[], false), &BTreeSet::new(), &context, true)
        .expect("full sync after restart");
    let listing = run(&runner, "nft", &["list", "table", "ip", "skiff"]);
    assert!(!listing.contains("10.43.0.41"), "{listing}");
    assert!(
        listing.contains("10.43.0.50 . tcp . 80 : goto reject-chain"),
        "{listing}"
    );
}

fn traffic_follows_the_rules(dataplane: &mut dyn Dataplane, netns: &OwnedNetns) {
    // the test's source address (10.43.0.254) counts as in-cluster: no masquerading on loopback
    let context = Context {
        cluster_cidr: "10.0.0.0/8".into(),
        node_ips: Vec::new(),
    };
    dataplane
        .sync(
            &table(&["10.42.0.2"], true),
            &BTreeSet::new(),
            &context,
            true,
        )
        .expect("full sync");
    assert_eq!(connect(netns, "10.43.0.41", 80), "hello from 10.42.0.2");
    assert_eq!(connect(netns, "10.43.0.50", 80), "ConnectionRefusedError");
    // web's NodePort on a local address
    assert_eq!(connect(netns, "10.43.0.254", 30001), "hello from 10.42.0.2");
    // web loses its endpoint: now it is refused too
    dataplane
        .sync(&table(&[], true), &changed("web"), &context, false)
        .expect("partial sync");
    assert_eq!(connect(netns, "10.43.0.41", 80), "ConnectionRefusedError");
    assert_eq!(
        connect(netns, "10.43.0.254", 30001),
        "ConnectionRefusedError"
    );
}

#[test]
fn iptables_rules_carry_cluster_ip_and_node_port_traffic_to_the_endpoint_and_refuse_without_any() {
    require_dataplane!();
    let netns = netns();
    let _server = serve_endpoint(&netns);
    traffic_follows_the_rules(&mut Iptables::new(runner(&netns)), &netns);
}

#[test]
fn nftables_rules_carry_cluster_ip_and_node_port_traffic_to_the_endpoint_and_refuse_without_any() {
    require_dataplane!();
    let netns = netns();
    let _server = serve_endpoint(&netns);
    traffic_follows_the_rules(&mut Nftables::new(runner(&netns)), &netns);
}
