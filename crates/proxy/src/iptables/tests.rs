//! Tests of iptables mode's rendering, checked against the restore input a fake runner receives.

use super::*;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;

use crate::model::fixtures::{load_balancer, service, slice, table};
use crate::runner::FakeRunner;

/// Syncs and returns the restore input.
fn sync(
    iptables: &mut Iptables,
    runner: &FakeRunner,
    table: &ServiceTable,
    changed: &[(&str, &str)],
    full: bool,
) -> String {
    sync_in(&Context::default(), iptables, runner, table, changed, full)
}

/// [`sync`] with this context.
fn sync_in(
    context: &Context,
    iptables: &mut Iptables,
    runner: &FakeRunner,
    table: &ServiceTable,
    changed: &[(&str, &str)],
    full: bool,
) -> String {
    runner.clear();
    let changed = changed.iter().map(|(n, s)| ServiceKey::new(n, s)).collect();
    iptables.sync(table, &changed, context, full).unwrap();
    runner
        .calls()
        .into_iter()
        .find(|c| c.program == "iptables-restore")
        .and_then(|c| c.stdin)
        .expect("a restore")
}

/// What `iptables-save` prints once the jumps are in place.
fn saved_jumps() -> String {
    let mut out = String::new();
    for table in ["filter", "nat"] {
        out.push_str(&format!("*{table}\n"));
        for jump in JUMPS.iter().filter(|j| j.table == table) {
            out.push_str(&format!("-A {} {}\n", jump.chain, jump.rule()));
        }
        out.push_str("COMMIT\n");
    }
    out
}

fn new() -> (Iptables, FakeRunner) {
    let runner = FakeRunner::default();
    runner.set_output("iptables-save", &saved_jumps());
    (Iptables::new(Arc::new(runner.clone())), runner)
}

fn web() -> (Service, EndpointSlice) {
    (
        service("ns1", "web", "10.43.0.41", &[("http", "TCP", 80)]),
        slice(
            "ns1",
            "web",
            "web-a",
            ("http", "TCP", 8080),
            &[("10.42.0.2", "n1", true), ("10.42.1.2", "n2", true)],
        ),
    )
}

#[test]
fn a_cluster_ip_service_renders_upstreams_chains_with_random_balancing() {
    let (mut iptables, runner) = new();
    let (svc, s) = web();
    let input = sync(
        &mut iptables,
        &runner,
        &table("n1", &[svc], &[s]),
        &[],
        true,
    );
    let expected = r#"*filter
:KUBE-SERVICES - [0:0]
:KUBE-EXTERNAL-SERVICES - [0:0]
:KUBE-NODEPORTS - [0:0]
:KUBE-FORWARD - [0:0]
:KUBE-PROXY-FIREWALL - [0:0]
-A KUBE-FORWARD -m comment --comment "kubernetes forwarding rules" -m mark --mark 0x4000/0x4000 -j ACCEPT
-A KUBE-FORWARD -m comment --comment "kubernetes forwarding conntrack rule" -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
COMMIT
*nat
:KUBE-SERVICES - [0:0]
:KUBE-NODEPORTS - [0:0]
:KUBE-POSTROUTING - [0:0]
:KUBE-MARK-MASQ - [0:0]
:KUBE-SVC-4LVCYZMTA5CQO6SX - [0:0]
:KUBE-SEP-CK3WAPHGALCNFYIL - [0:0]
:KUBE-SEP-XLNCFND7OJA6ZQ3V - [0:0]
-A KUBE-POSTROUTING -m mark ! --mark 0x4000/0x4000 -j RETURN
-A KUBE-POSTROUTING -j MARK --xor-mark 0x4000
-A KUBE-POSTROUTING -m comment --comment "kubernetes service traffic requiring SNAT" -j MASQUERADE --random-fully
-A KUBE-MARK-MASQ -j MARK --or-mark 0x4000
-A KUBE-SERVICES -m comment --comment "ns1/web:http cluster IP" -m tcp -p tcp -d 10.43.0.41 --dport 80 -j KUBE-SVC-4LVCYZMTA5CQO6SX
-A KUBE-SERVICES -m comment --comment "kubernetes service nodeports; NOTE: this must be the last rule in this chain" -m addrtype --dst-type LOCAL -j KUBE-NODEPORTS
-A KUBE-SVC-4LVCYZMTA5CQO6SX -m comment --comment "ns1/web:http cluster IP" -m tcp -p tcp -d 10.43.0.41 --dport 80 ! -s 10.42.0.0/16 -j KUBE-MARK-MASQ
-A KUBE-SVC-4LVCYZMTA5CQO6SX -m comment --comment "ns1/web:http -> 10.42.0.2:8080" -m statistic --mode random --probability 0.5000000000 -j KUBE-SEP-CK3WAPHGALCNFYIL
-A KUBE-SVC-4LVCYZMTA5CQO6SX -m comment --comment "ns1/web:http -> 10.42.1.2:8080" -j KUBE-SEP-XLNCFND7OJA6ZQ3V
-A KUBE-SEP-CK3WAPHGALCNFYIL -m comment --comment ns1/web:http -s 10.42.0.2 -j KUBE-MARK-MASQ
-A KUBE-SEP-CK3WAPHGALCNFYIL -m comment --comment ns1/web:http -m tcp -p tcp -j DNAT --to-destination 10.42.0.2:8080
-A KUBE-SEP-XLNCFND7OJA6ZQ3V -m comment --comment ns1/web:http -s 10.42.1.2 -j KUBE-MARK-MASQ
-A KUBE-SEP-XLNCFND7OJA6ZQ3V -m comment --comment ns1/web:http -m tcp -p tcp -j DNAT --to-destination 10.42.1.2:8080
COMMIT
"#;
    assert_eq!(input, expected);
}

#[test]
fn affinity_node_port_and_external_ips_render_as_upstream() {
    let (mut iptables, runner) = new();
    let (mut svc, s) = web();
    let spec = svc.spec.as_mut().unwrap();
    spec.type_ = Some("NodePort".into());
    spec.ports.as_mut().unwrap()[0].node_port = Some(30001);
    spec.external_ips = Some(vec!["192.168.99.11".into()]);
    spec.session_affinity = Some("ClientIP".into());
    let input = sync(
        &mut iptables,
        &runner,
        &table("n1", &[svc], &[s]),
        &[],
        true,
    );
    let svc = "KUBE-SVC-4LVCYZMTA5CQO6SX";
    let ext = "KUBE-EXT-4LVCYZMTA5CQO6SX";
    let sep = "KUBE-SEP-CK3WAPHGALCNFYIL";
    for line in [
        format!(
            "-A KUBE-SERVICES -m comment --comment \"ns1/web:http external IP\" -m tcp -p tcp -d 192.168.99.11 --dport 80 -j {ext}"
        ),
        format!(
            "-A KUBE-NODEPORTS -m comment --comment ns1/web:http -m tcp -p tcp --dport 30001 -j {ext}"
        ),
        format!(
            "-A {ext} -m comment --comment \"masquerade traffic for ns1/web:http external destinations\" -j KUBE-MARK-MASQ"
        ),
        format!("-A {ext} -j {svc}"),
        format!(
            "-A {svc} -m comment --comment \"ns1/web:http -> 10.42.0.2:8080\" -m recent --name {sep} --rcheck --seconds 10800 --reap -j {sep}"
        ),
        format!(
            "-A {sep} -m comment --comment ns1/web:http -m recent --name {sep} --set -m tcp -p tcp -j DNAT --to-destination 10.42.0.2:8080"
        ),
    ] {
        assert!(
            input.contains(&format!("{line}\n")),
            "missing {line} in\n{input}"
        );
    }
    // the affinity checks come before the random balancing
    let check = input.find("--rcheck").unwrap();
    assert!(check < input.find("--probability").unwrap());
}

#[test]
fn services_without_endpoints_are_rejected_in_the_filter_table() {
    let (mut iptables, runner) = new();
    let mut svc = service("ns2", "empty", "10.43.0.42", &[("", "UDP", 53)]);
    let spec = svc.spec.as_mut().unwrap();
    spec.type_ = Some("NodePort".into());
    spec.ports.as_mut().unwrap()[0].node_port = Some(30053);
    let input = sync(&mut iptables, &runner, &table("n1", &[svc], &[]), &[], true);
    assert!(input.contains(
        "-A KUBE-SERVICES -m comment --comment \"ns2/empty has no endpoints\" -m udp -p udp -d 10.43.0.42 --dport 53 -j REJECT\n"
    ));
    assert!(input.contains(
        "-A KUBE-EXTERNAL-SERVICES -m comment --comment \"ns2/empty has no endpoints\" -m addrtype --dst-type LOCAL -m udp -p udp --dport 30053 -j REJECT\n"
    ));
    assert!(!input.contains("KUBE-SVC-"), "no service chains: {input}");
}

#[test]
fn external_local_policy_keeps_node_port_traffic_on_this_nodes_endpoints() {
    let (mut iptables, runner) = new();
    let (mut svc, s) = web();
    let spec = svc.spec.as_mut().unwrap();
    spec.type_ = Some("NodePort".into());
    spec.ports.as_mut().unwrap()[0].node_port = Some(30001);
    spec.external_traffic_policy = Some("Local".into());
    let input = sync(
        &mut iptables,
        &runner,
        &table("n2", &[svc], &[s]),
        &[],
        true,
    );
    let ext = "KUBE-EXT-4LVCYZMTA5CQO6SX";
    let svl = "KUBE-SVL-4LVCYZMTA5CQO6SX";
    for line in [
        format!(
            "-A {ext} -s 10.42.0.0/16 -m comment --comment \"pod traffic for ns1/web:http external destinations\" -j KUBE-SVC-4LVCYZMTA5CQO6SX"
        ),
        format!(
            "-A {ext} -m comment --comment \"masquerade LOCAL traffic for ns1/web:http external destinations\" -m addrtype --src-type LOCAL -j KUBE-MARK-MASQ"
        ),
        format!("-A {ext} -j {svl}"),
        // only the endpoint on n2
        format!(
            "-A {svl} -m comment --comment \"ns1/web:http -> 10.42.1.2:8080\" -j KUBE-SEP-XLNCFND7OJA6ZQ3V"
        ),
    ] {
        assert!(
            input.contains(&format!("{line}\n")),
            "missing {line} in\n{input}"
        );
    }
    assert_eq!(input.matches(&format!("-A {svl} ")).count(), 1);

    // no endpoint on n3: external traffic is dropped, cluster traffic still balanced
    let (mut iptables, runner) = new();
    let (mut svc, s) = web();
    let spec = svc.spec.as_mut().unwrap();
    spec.type_ = Some("NodePort".into());
    spec.ports.as_mut().unwrap()[0].node_port = Some(30001);
    spec.external_traffic_policy = Some("Local".into());
    let input = sync(
        &mut iptables,
        &runner,
        &table("n3", &[svc], &[s]),
        &[],
        true,
    );
    assert!(input.contains(
        "-A KUBE-EXTERNAL-SERVICES -m comment --comment \"ns1/web:http has no local endpoints\" -m addrtype --dst-type LOCAL -m tcp -p tcp --dport 30001 -j DROP\n"
    ));
    assert!(!input.contains(&format!("-A {ext} -j {svl}")));
    assert!(input.contains("-j KUBE-SVC-4LVCYZMTA5CQO6SX\n"));
}

#[test]
fn internal_local_policy_sends_cluster_ip_traffic_to_the_local_chain() {
    let (mut iptables, runner) = new();
    let (mut svc, s) = web();
    svc.spec.as_mut().unwrap().internal_traffic_policy = Some("Local".into());
    let input = sync(
        &mut iptables,
        &runner,
        &table("n1", &[svc], &[s]),
        &[],
        true,
    );
    assert!(input.contains("--dport 80 -j KUBE-SVL-4LVCYZMTA5CQO6SX\n"));
    assert!(!input.contains(":KUBE-SVC-"));
    assert!(
        !input.contains("10.42.1.2"),
        "the other node's endpoint: {input}"
    );
}

#[test]
fn headless_and_external_name_services_get_no_rules() {
    let (mut iptables, runner) = new();
    let headless = service("ns", "h", "None", &[("", "TCP", 80)]);
    let mut external = service("ns", "e", "", &[("", "TCP", 80)]);
    external.spec.as_mut().unwrap().type_ = Some("ExternalName".into());
    let s = slice(
        "ns",
        "h",
        "h-1",
        ("", "TCP", 80),
        &[("10.42.0.2", "n1", true)],
    );
    let input = sync(
        &mut iptables,
        &runner,
        &table("n1", &[headless, external], &[s]),
        &[],
        true,
    );
    assert!(!input.contains("ns/h"));
    assert!(!input.contains("ns/e"));
}

#[test]
fn one_endpoint_change_rewrites_only_that_services_chains() {
    let (mut iptables, runner) = new();
    let (web, web_slice) = web();
    let db = service("ns1", "db", "10.43.0.50", &[("", "TCP", 5432)]);
    let db_slice = slice(
        "ns1",
        "db",
        "db-a",
        ("", "TCP", 5432),
        &[("10.42.0.9", "n1", true)],
    );
    let before = table(
        "n1",
        &[web.clone(), db.clone()],
        &[web_slice.clone(), db_slice],
    );
    sync(&mut iptables, &runner, &before, &[], true);
    let db_slice = slice(
        "ns1",
        "db",
        "db-a",
        ("", "TCP", 5432),
        &[("10.42.0.9", "n1", true), ("10.42.0.10", "n1", true)],
    );
    let after = table("n1", &[web, db], &[web_slice, db_slice]);
    let input = sync(&mut iptables, &runner, &after, &[("ns1", "db")], false);
    let declared: Vec<&str> = input
        .lines()
        .filter(|l| l.starts_with(":KUBE-S") && !l.starts_with(":KUBE-SERVICES"))
        .collect();
    assert_eq!(
        declared.len(),
        3,
        "db's service chain and two endpoints: {input}"
    );
    assert!(declared.iter().all(|l| !l.contains("4LVCYZMTA5CQO6SX")));
    // web's jump stays in the rewritten KUBE-SERVICES; its own chains are untouched
    assert!(input.contains("\"ns1/web:http cluster IP\" -m tcp -p tcp -d 10.43.0.41 --dport 80 -j KUBE-SVC-4LVCYZMTA5CQO6SX\n"));
    assert!(!input.contains("-A KUBE-SVC-4LVCYZMTA5CQO6SX"));
    assert!(!input.contains("-X "));
    // a partial sync neither reads the table back nor re-checks the jumps
    assert_eq!(runner.calls().len(), 1);
}

#[test]
fn stale_chains_of_removed_services_and_previous_runs_are_deleted() {
    let (mut iptables, runner) = new();
    runner.set_output(
        "iptables-save",
        &format!("{}*nat\n:PREROUTING ACCEPT [0:0]\n:KUBE-SERVICES - [0:0]\n:KUBE-SVC-OLDOLDOLDOLDOLD1 - [0:0]\n:DOCKER - [0:0]\nCOMMIT\n", saved_jumps()),
    );
    let (web, web_slice) = web();
    let input = sync(
        &mut iptables,
        &runner,
        &table("n1", std::slice::from_ref(&web), &[web_slice]),
        &[],
        true,
    );
    assert!(input.contains(":KUBE-SVC-OLDOLDOLDOLDOLD1 - [0:0]\n"));
    assert!(input.contains("-X KUBE-SVC-OLDOLDOLDOLDOLD1\n"));
    assert!(!input.contains("DOCKER"));
    // the jumps are in place: none inserted
    assert!(!input.contains("-I "));

    // the slice goes away: the service rejects and its chains are deleted
    let input = sync(
        &mut iptables,
        &runner,
        &table("n1", &[web], &[]),
        &[("ns1", "web")],
        false,
    );
    for chain in [
        "KUBE-SVC-4LVCYZMTA5CQO6SX",
        "KUBE-SEP-CK3WAPHGALCNFYIL",
        "KUBE-SEP-XLNCFND7OJA6ZQ3V",
    ] {
        assert!(input.contains(&format!(":{chain} - [0:0]\n")));
        assert!(input.contains(&format!("-X {chain}\n")));
    }
    assert!(
        input.contains("has no endpoints\" -m tcp -p tcp -d 10.43.0.41 --dport 80 -j REJECT\n")
    );
}

#[test]
fn node_ports_answer_on_the_node_addresses_when_known() {
    let (mut iptables, runner) = new();
    let context = Context {
        node_ips: vec!["192.168.1.5".parse().unwrap()],
        ..Context::default()
    };
    iptables
        .sync(&ServiceTable::new(), &BTreeSet::new(), &context, true)
        .unwrap();
    let input = runner.calls().into_iter().find_map(|c| c.stdin).unwrap();
    assert!(input.contains(
        "NOTE: this must be the last rule in this chain\" -d 192.168.1.5 -j KUBE-NODEPORTS\n"
    ));
    assert!(!input.contains("--dst-type LOCAL -j KUBE-NODEPORTS"));
}

#[test]
fn missing_jumps_are_inserted_at_the_top_of_the_built_in_chains_in_the_same_transaction() {
    let runner = FakeRunner::default();
    runner.set_output("iptables-save", "*nat\n-A PREROUTING -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES\nCOMMIT\n");
    let mut iptables = Iptables::new(Arc::new(runner.clone()));
    iptables
        .sync(
            &ServiceTable::new(),
            &BTreeSet::new(),
            &Context::default(),
            true,
        )
        .unwrap();
    let input = runner.calls().into_iter().find_map(|c| c.stdin).unwrap();
    let inserted: Vec<&str> = input.lines().filter(|l| l.starts_with("-I ")).collect();
    assert_eq!(
        inserted.len(),
        JUMPS.len() - 1,
        "all but the one present: {input}"
    );
    assert!(inserted.contains(
        &"-I OUTPUT 1 -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES"
    ));
    assert!(inserted.contains(&"-I INPUT 1 -m conntrack --ctstate NEW -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES"));
    assert!(!inserted.iter().any(|l| l.starts_with("-I PREROUTING")));
    assert_eq!(
        runner.calls().len(),
        2,
        "iptables-save and one iptables-restore"
    );
}

#[test]
fn load_balancer_ips_go_through_the_source_range_firewall_to_the_external_chain() {
    let (mut iptables, runner) = new();
    let (svc, s) = web();
    let mut svc = load_balancer(svc, &["192.168.1.10", "192.168.1.11/Proxy"]);
    let spec = svc.spec.as_mut().unwrap();
    spec.load_balancer_source_ranges = Some(vec!["192.168.1.0/24".into()]);
    spec.external_traffic_policy = Some("Local".into());
    spec.health_check_node_port = Some(31000);
    // allocateLoadBalancerNodePorts: false, so no nodePort
    let context = Context {
        node_ips: vec!["192.168.1.10".parse().unwrap()],
        ..Context::default()
    };
    let input = sync_in(
        &context,
        &mut iptables,
        &runner,
        &table("n1", &[svc], &[s]),
        &[],
        true,
    );
    let fw = "KUBE-FW-4LVCYZMTA5CQO6SX";
    let ext = "KUBE-EXT-4LVCYZMTA5CQO6SX";
    for line in [
        format!(
            "-A KUBE-SERVICES -m comment --comment \"ns1/web:http loadbalancer IP\" -m tcp -p tcp -d 192.168.1.10 --dport 80 -j {fw}"
        ),
        format!(
            "-A KUBE-PROXY-FIREWALL -m comment --comment \"ns1/web:http traffic not accepted by {fw}\" -m tcp -p tcp -d 192.168.1.10 --dport 80 -j DROP"
        ),
        format!(":{fw} - [0:0]"),
        format!(
            "-A {fw} -m comment --comment \"ns1/web:http loadbalancer IP\" -s 192.168.1.0/24 -j {ext}"
        ),
        // the range holds the node: its own requests come from the load-balancer IP
        format!(
            "-A {fw} -m comment --comment \"ns1/web:http loadbalancer IP\" -s 192.168.1.10 -j {ext}"
        ),
        format!(
            "-A {fw} -m comment --comment \"other traffic to ns1/web:http will be dropped by KUBE-PROXY-FIREWALL\""
        ),
        // Local policy: only n1's endpoint, the client address kept
        format!("-A {ext} -j KUBE-SVL-4LVCYZMTA5CQO6SX"),
        "-A KUBE-NODEPORTS -m comment --comment \"ns1/web:http health check node port\" -m tcp -p tcp --dport 31000 -j ACCEPT".into(),
    ] {
        assert!(
            input.contains(&format!("{line}\n")),
            "missing {line} in\n{input}"
        );
    }
    assert!(
        !input.contains("192.168.1.11"),
        "ipMode Proxy is not captured"
    );
    assert!(
        !input.contains("-A KUBE-NODEPORTS -m comment --comment ns1/web:http"),
        "no node port"
    );
}

#[test]
fn a_load_balancer_without_endpoints_rejects_on_its_ip() {
    let (mut iptables, runner) = new();
    let svc = load_balancer(
        service("ns2", "empty", "10.43.0.42", &[("", "TCP", 80)]),
        &["192.168.1.10"],
    );
    let input = sync(&mut iptables, &runner, &table("n1", &[svc], &[]), &[], true);
    assert!(input.contains(
        "-A KUBE-EXTERNAL-SERVICES -m comment --comment \"ns2/empty has no endpoints\" -m tcp -p tcp -d 192.168.1.10 --dport 80 -j REJECT\n"
    ));
    assert!(!input.contains("loadbalancer IP"), "{input}");
}
