//! Tests of nftables mode's rendering, checked against the `nft -f` input a fake runner receives.

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;

use super::*;
use crate::model::fixtures::{load_balancer, service, slice, table};
use crate::runner::FakeRunner;

fn sync(
    nft: &mut Nftables,
    runner: &FakeRunner,
    table: &ServiceTable,
    changed: &[(&str, &str)],
    full: bool,
) -> String {
    sync_in(&Context::default(), nft, runner, table, changed, full)
}

/// [`sync`] with this context.
fn sync_in(
    context: &Context,
    nft: &mut Nftables,
    runner: &FakeRunner,
    table: &ServiceTable,
    changed: &[(&str, &str)],
    full: bool,
) -> String {
    runner.clear();
    let changed = changed.iter().map(|(n, s)| ServiceKey::new(n, s)).collect();
    nft.sync(table, &changed, context, full).unwrap();
    runner
        .calls()
        .into_iter()
        .find_map(|c| c.stdin)
        .unwrap_or_default()
}

fn new() -> (Nftables, FakeRunner) {
    let runner = FakeRunner::default();
    (Nftables::new(Arc::new(runner.clone())), runner)
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

/// The lines after the fixed part of a full sync.
fn service_part(input: &str) -> String {
    let start = input
        .find("add rule ip skiff filter-output ct state new jump service-endpoints-check")
        .unwrap();
    let rest = &input[start..];
    rest[rest.find('\n').unwrap() + 1..].to_string()
}

#[test]
fn a_cluster_ip_service_renders_a_map_element_and_its_chains() {
    let (mut nft, runner) = new();
    let (svc, s) = web();
    let input = sync(&mut nft, &runner, &table("n1", &[svc], &[s]), &[], true);
    assert!(input.starts_with("add table ip skiff\ndelete table ip skiff\n"));
    let svc = "service-DK7ABAZC-ns1/web/tcp/http";
    let ep1 = "endpoint-PSCUA4RZ-ns1/web/tcp/http__10.42.0.2/8080";
    let ep2 = "endpoint-EA37MTXK-ns1/web/tcp/http__10.42.1.2/8080";
    let expected = format!(
        "add chain ip skiff {ep2}\n\
         add chain ip skiff {ep1}\n\
         add chain ip skiff {svc}\n\
         add rule ip skiff {ep2} ip saddr 10.42.1.2 jump mark-for-masquerade\n\
         add rule ip skiff {ep2} meta l4proto tcp dnat to 10.42.1.2:8080\n\
         add rule ip skiff {ep1} ip saddr 10.42.0.2 jump mark-for-masquerade\n\
         add rule ip skiff {ep1} meta l4proto tcp dnat to 10.42.0.2:8080\n\
         add rule ip skiff {svc} ip daddr 10.43.0.41 tcp dport 80 ip saddr != 10.42.0.0/16 jump mark-for-masquerade\n\
         add rule ip skiff {svc} numgen random mod 2 vmap {{ 0 : goto {ep1} , 1 : goto {ep2} }}\n\
         add element ip skiff service-ips {{ 10.43.0.41 . tcp . 80 : goto {svc} }}\n"
    );
    assert_eq!(service_part(&input), expected);
}

#[test]
fn affinity_node_port_and_external_ips_use_sets_and_maps() {
    let (mut nft, runner) = new();
    let (mut svc, s) = web();
    let spec = svc.spec.as_mut().unwrap();
    spec.type_ = Some("NodePort".into());
    spec.ports.as_mut().unwrap()[0].node_port = Some(30001);
    spec.external_ips = Some(vec!["192.168.99.11".into()]);
    spec.session_affinity = Some("ClientIP".into());
    let input = sync(&mut nft, &runner, &table("n1", &[svc], &[s]), &[], true);
    let ext = "external-DK7ABAZC-ns1/web/tcp/http";
    let ep1 = "endpoint-PSCUA4RZ-ns1/web/tcp/http__10.42.0.2/8080";
    for line in [
        format!("add element ip skiff service-nodeports {{ tcp . 30001 : goto {ext} }}"),
        format!("add element ip skiff service-ips {{ 192.168.99.11 . tcp . 80 : goto {ext} }}"),
        format!("add rule ip skiff {ext} jump mark-for-masquerade"),
        format!("add rule ip skiff {ext} goto service-DK7ABAZC-ns1/web/tcp/http"),
        "add set ip skiff affinity-PSCUA4RZ-ns1/web/tcp/http__10.42.0.2/8080 { type ipv4_addr ; flags dynamic,timeout ; timeout 10800s ; }".to_string(),
        format!("add rule ip skiff service-DK7ABAZC-ns1/web/tcp/http ip saddr @affinity-PSCUA4RZ-ns1/web/tcp/http__10.42.0.2/8080 goto {ep1}"),
        format!("add rule ip skiff {ep1} update @affinity-PSCUA4RZ-ns1/web/tcp/http__10.42.0.2/8080 {{ ip saddr }}"),
    ] {
        assert!(input.contains(&format!("{line}\n")), "missing {line} in\n{input}");
    }
}

#[test]
fn services_without_endpoints_reject_and_local_ones_without_local_endpoints_drop() {
    let (mut nft, runner) = new();
    let mut empty = service("ns2", "empty", "10.43.0.42", &[("", "UDP", 53)]);
    let spec = empty.spec.as_mut().unwrap();
    spec.type_ = Some("NodePort".into());
    spec.ports.as_mut().unwrap()[0].node_port = Some(30053);
    let (mut local, s) = web();
    let spec = local.spec.as_mut().unwrap();
    spec.type_ = Some("NodePort".into());
    spec.ports.as_mut().unwrap()[0].node_port = Some(30001);
    spec.external_traffic_policy = Some("Local".into());
    let input = sync(
        &mut nft,
        &runner,
        &table("n3", &[empty, local], &[s]),
        &[],
        true,
    );
    for line in [
        "add element ip skiff no-endpoint-services { 10.43.0.42 . udp . 53 : goto reject-chain }",
        "add element ip skiff no-endpoint-nodeports { udp . 30053 : goto reject-chain }",
        "add element ip skiff no-endpoint-nodeports { tcp . 30001 : drop }",
        // cluster traffic still reaches the endpoints on other nodes
        "add element ip skiff service-ips { 10.43.0.41 . tcp . 80 : goto service-DK7ABAZC-ns1/web/tcp/http }",
        "add rule ip skiff external-DK7ABAZC-ns1/web/tcp/http ip saddr 10.42.0.0/16 goto service-DK7ABAZC-ns1/web/tcp/http",
    ] {
        assert!(
            input.contains(&format!("{line}\n")),
            "missing {line} in\n{input}"
        );
    }
    assert!(
        !input.contains("ns2/empty/udp//"),
        "no chains for ns2/empty: {input}"
    );
}

#[test]
fn headless_services_get_nothing() {
    let (mut nft, runner) = new();
    let headless = service("ns", "h", "None", &[("", "TCP", 80)]);
    let s = slice(
        "ns",
        "h",
        "h-1",
        ("", "TCP", 80),
        &[("10.42.0.2", "n1", true)],
    );
    let input = sync(
        &mut nft,
        &runner,
        &table("n1", &[headless], &[s]),
        &[],
        true,
    );
    assert_eq!(service_part(&input), "");
}

#[test]
fn one_endpoint_change_rewrites_only_that_services_chains() {
    let (mut nft, runner) = new();
    let (web, web_slice) = web();
    let db = service("ns1", "db", "10.43.0.50", &[("", "TCP", 5432)]);
    let one = slice(
        "ns1",
        "db",
        "db-a",
        ("", "TCP", 5432),
        &[("10.42.0.9", "n1", true)],
    );
    sync(
        &mut nft,
        &runner,
        &table("n1", &[web.clone(), db.clone()], &[web_slice.clone(), one]),
        &[],
        true,
    );
    let other = slice(
        "ns1",
        "db",
        "db-a",
        ("", "TCP", 5432),
        &[("10.42.0.10", "n1", true)],
    );
    let after = table("n1", &[web, db], &[web_slice, other]);
    let input = sync(&mut nft, &runner, &after, &[("ns1", "db")], false);
    let svc = "service-EDBERQ36-ns1/db/tcp/";
    let old = "endpoint-L36K7JRS-ns1/db/tcp/__10.42.0.9/5432";
    let new = "endpoint-PWEP4AMQ-ns1/db/tcp/__10.42.0.10/5432";
    let expected = format!(
        "add chain ip skiff {new}\n\
         add rule ip skiff {new} ip saddr 10.42.0.10 jump mark-for-masquerade\n\
         add rule ip skiff {new} meta l4proto tcp dnat to 10.42.0.10:5432\n\
         flush chain ip skiff {svc}\n\
         add rule ip skiff {svc} ip daddr 10.43.0.50 tcp dport 5432 ip saddr != 10.42.0.0/16 jump mark-for-masquerade\n\
         add rule ip skiff {svc} numgen random mod 1 vmap {{ 0 : goto {new} }}\n\
         flush chain ip skiff {old}\n\
         delete chain ip skiff {old}\n"
    );
    assert_eq!(input, expected);
}

#[test]
fn a_deleted_service_loses_its_elements_before_its_chains() {
    let (mut nft, runner) = new();
    let (web, web_slice) = web();
    sync(
        &mut nft,
        &runner,
        &table("n1", &[web], &[web_slice]),
        &[],
        true,
    );
    let input = sync(
        &mut nft,
        &runner,
        &ServiceTable::new(),
        &[("ns1", "web")],
        false,
    );
    let lines: Vec<&str> = input.lines().collect();
    assert_eq!(
        lines[0],
        "delete element ip skiff service-ips { 10.43.0.41 . tcp . 80 }"
    );
    assert_eq!(
        lines
            .iter()
            .filter(|l| l.starts_with("delete chain"))
            .count(),
        3
    );
    assert!(!input.contains("add "));
}

#[test]
fn an_unchanged_service_runs_no_transaction() {
    let (mut nft, runner) = new();
    let (web, web_slice) = web();
    let t = table("n1", &[web], &[web_slice]);
    sync(&mut nft, &runner, &t, &[], true);
    assert_eq!(sync(&mut nft, &runner, &t, &[("ns1", "web")], false), "");
    assert!(runner.calls().is_empty());
}

#[test]
fn load_balancer_ips_are_service_ips_checked_against_their_source_ranges_before_dnat() {
    let (mut nft, runner) = new();
    let (svc, s) = web();
    let mut svc = load_balancer(svc, &["192.168.1.10", "192.168.1.11/Proxy"]);
    let spec = svc.spec.as_mut().unwrap();
    spec.load_balancer_source_ranges = Some(vec!["192.168.1.0/24".into()]);
    spec.external_traffic_policy = Some("Local".into());
    let context = Context {
        node_ips: vec!["192.168.1.10".parse().unwrap()],
        ..Context::default()
    };
    let input = sync_in(
        &context,
        &mut nft,
        &runner,
        &table("n1", &[svc], &[s]),
        &[],
        true,
    );
    let ext = "external-DK7ABAZC-ns1/web/tcp/http";
    let fw = "firewall-DK7ABAZC-ns1/web/tcp/http";
    for line in [
        "add rule ip skiff filter-prerouting-pre-dnat ct state new jump firewall-check".to_string(),
        "add rule ip skiff firewall-check ip daddr . meta l4proto . th dport vmap @firewall-ips"
            .to_string(),
        format!("add element ip skiff service-ips {{ 192.168.1.10 . tcp . 80 : goto {ext} }}"),
        format!("add element ip skiff firewall-ips {{ 192.168.1.10 . tcp . 80 : goto {fw} }}"),
        // the range holds the node: its own requests come from the load-balancer IP
        format!("add rule ip skiff {fw} ip saddr != {{ 192.168.1.0/24, 192.168.1.10 }} drop"),
        format!("add rule ip skiff {ext} goto local-DK7ABAZC-ns1/web/tcp/http"),
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

    // endpoints gone: the load-balancer IP rejects, and no firewall is needed
    let (svc, _) = web();
    let svc = load_balancer(svc, &["192.168.1.10"]);
    let input = sync(
        &mut nft,
        &runner,
        &table("n1", &[svc], &[]),
        &[("ns1", "web")],
        false,
    );
    assert!(input.contains(
        "add element ip skiff no-endpoint-services { 192.168.1.10 . tcp . 80 : goto reject-chain }\n"
    ), "{input}");
    assert!(
        input.contains(&format!("delete chain ip skiff {fw}\n")),
        "{input}"
    );
}
