//! nftables mode: one `ip skiff` table applied atomically with `nft -f`, laid out as upstream's
//! nftables proxier lays out its `kube-proxy` table. Services are found through verdict maps keyed
//! on `ip daddr . meta l4proto . th dport` (`service-ips`, `service-nodeports`, and the
//! `no-endpoint-*` maps that reject or drop), so a partial sync only adds and deletes the changed
//! Services' map elements and rewrites their own chains; a full sync replaces the table.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::sync::Arc;

use crate::Result;
use crate::dataplane::{Context, Dataplane, MASQUERADE_MARK, ServiceTable};
use crate::hash;
use crate::model::{Endpoint, PortEntry, ServiceKey, ServicePortName};
use crate::runner::Runner;

/// The table, as upstream's `kube-proxy` table.
pub const TABLE: &str = "ip skiff";

const SERVICE_IPS: &str = "service-ips";
const SERVICE_NODEPORTS: &str = "service-nodeports";
const NO_ENDPOINT_SERVICES: &str = "no-endpoint-services";
const NO_ENDPOINT_NODEPORTS: &str = "no-endpoint-nodeports";
const MARK_MASQ: &str = "mark-for-masquerade";

/// One service port's chains, affinity sets and map elements.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
struct Fragment {
    chains: BTreeMap<String, Vec<String>>,
    /// Affinity sets by name, with their declaration.
    sets: BTreeMap<String, String>,
    /// (map, key) → verdict.
    elements: BTreeMap<(&'static str, String), String>,
}

pub struct Nftables {
    runner: Arc<dyn Runner>,
    /// What the last successful sync applied, per service port.
    fragments: BTreeMap<ServicePortName, Fragment>,
}

impl Nftables {
    pub fn new(runner: Arc<dyn Runner>) -> Self {
        Nftables {
            runner,
            fragments: BTreeMap::new(),
        }
    }
}

impl Dataplane for Nftables {
    fn sync(
        &mut self,
        table: &ServiceTable,
        changed: &BTreeSet<ServiceKey>,
        context: &Context,
        full: bool,
    ) -> Result<()> {
        if full {
            let fragments: BTreeMap<ServicePortName, Fragment> = table
                .values()
                .flatten()
                .map(|entry| (entry.name.clone(), render_port(entry, context)))
                .collect();
            let mut out = base(context);
            let empty = Fragment::default();
            for fragment in fragments.values() {
                diff(&mut out, &empty, fragment);
            }
            self.runner.run("nft", &["-f", "-"], Some(&out))?;
            self.fragments = fragments;
            return Ok(());
        }
        let mut old = Fragment::default();
        let mut new = Fragment::default();
        let mut replaced = BTreeMap::new();
        for key in changed {
            let of_service = |name: &ServicePortName| &name.service == key;
            for (_, fragment) in self.fragments.iter().filter(|(n, _)| of_service(n)) {
                merge(&mut old, fragment);
            }
            for entry in table.get(key).into_iter().flatten() {
                let fragment = render_port(entry, context);
                merge(&mut new, &fragment);
                replaced.insert(entry.name.clone(), fragment);
            }
        }
        let mut out = String::new();
        diff(&mut out, &old, &new);
        if !out.is_empty() {
            self.runner.run("nft", &["-f", "-"], Some(&out))?;
        }
        self.fragments
            .retain(|name, _| !changed.contains(&name.service));
        self.fragments.extend(replaced);
        Ok(())
    }
}

fn merge(into: &mut Fragment, from: &Fragment) {
    into.chains
        .extend(from.chains.iter().map(|(k, v)| (k.clone(), v.clone())));
    into.sets
        .extend(from.sets.iter().map(|(k, v)| (k.clone(), v.clone())));
    into.elements
        .extend(from.elements.iter().map(|(k, v)| (k.clone(), v.clone())));
}

/// The table's fixed part: replaces any previous table in the same transaction.
fn base(context: &Context) -> String {
    let nodeport_match = if context.node_ips.is_empty() {
        "fib daddr type local ip daddr != 127.0.0.0/8".to_string()
    } else {
        "ip daddr @nodeport-ips".to_string()
    };
    let mut out = format!(
        "add table {TABLE}\n\
         delete table {TABLE}\n\
         add table {TABLE} {{ comment \"rules for skiff proxy\" ; }}\n\
         add chain {TABLE} {MARK_MASQ}\n\
         add rule {TABLE} {MARK_MASQ} mark set mark or {MASQUERADE_MARK}\n\
         add chain {TABLE} masquerading\n\
         add rule {TABLE} masquerading mark and {MASQUERADE_MARK} == 0 return\n\
         add rule {TABLE} masquerading mark set mark xor {MASQUERADE_MARK}\n\
         add rule {TABLE} masquerading masquerade fully-random\n\
         add map {TABLE} {SERVICE_IPS} {{ type ipv4_addr . inet_proto . inet_service : verdict ; }}\n\
         add map {TABLE} {SERVICE_NODEPORTS} {{ type inet_proto . inet_service : verdict ; }}\n\
         add map {TABLE} {NO_ENDPOINT_SERVICES} {{ type ipv4_addr . inet_proto . inet_service : verdict ; }}\n\
         add map {TABLE} {NO_ENDPOINT_NODEPORTS} {{ type inet_proto . inet_service : verdict ; }}\n\
         add set {TABLE} nodeport-ips {{ type ipv4_addr ; }}\n\
         add chain {TABLE} reject-chain\n\
         add rule {TABLE} reject-chain reject\n\
         add chain {TABLE} services\n\
         add rule {TABLE} services ip daddr . meta l4proto . th dport vmap @{SERVICE_IPS}\n\
         add rule {TABLE} services {nodeport_match} meta l4proto . th dport vmap @{SERVICE_NODEPORTS}\n\
         add chain {TABLE} service-endpoints-check\n\
         add rule {TABLE} service-endpoints-check ip daddr . meta l4proto . th dport vmap @{NO_ENDPOINT_SERVICES}\n\
         add chain {TABLE} nodeport-endpoints-check\n\
         add rule {TABLE} nodeport-endpoints-check {nodeport_match} meta l4proto . th dport vmap @{NO_ENDPOINT_NODEPORTS}\n\
         add chain {TABLE} nat-prerouting {{ type nat hook prerouting priority -100 ; }}\n\
         add rule {TABLE} nat-prerouting jump services\n\
         add chain {TABLE} nat-output {{ type nat hook output priority -100 ; }}\n\
         add rule {TABLE} nat-output jump services\n\
         add chain {TABLE} nat-postrouting {{ type nat hook postrouting priority 100 ; }}\n\
         add rule {TABLE} nat-postrouting jump masquerading\n\
         add chain {TABLE} filter-input {{ type filter hook input priority -110 ; }}\n\
         add rule {TABLE} filter-input ct state new jump nodeport-endpoints-check\n\
         add rule {TABLE} filter-input ct state new jump service-endpoints-check\n\
         add chain {TABLE} filter-forward {{ type filter hook forward priority -110 ; }}\n\
         add rule {TABLE} filter-forward ct state new jump service-endpoints-check\n\
         add chain {TABLE} filter-output {{ type filter hook output priority -110 ; }}\n\
         add rule {TABLE} filter-output ct state new jump service-endpoints-check\n"
    );
    for ip in &context.node_ips {
        let _ = writeln!(out, "add element {TABLE} nodeport-ips {{ {ip} }}");
    }
    out
}

/// The commands that turn `old` into `new` in one transaction: new chains and sets first, stale
/// map elements out, changed chains flushed and refilled, new elements in, and last the chains
/// and sets nothing refers to any more.
fn diff(out: &mut String, old: &Fragment, new: &Fragment) {
    for chain in new.chains.keys().filter(|c| !old.chains.contains_key(*c)) {
        let _ = writeln!(out, "add chain {TABLE} {chain}");
    }
    for (set, declaration) in new.sets.iter().filter(|(s, _)| !old.sets.contains_key(*s)) {
        let _ = writeln!(out, "add set {TABLE} {set} {declaration}");
    }
    for ((map, key), verdict) in &old.elements {
        if new.elements.get(&(*map, key.clone())) != Some(verdict) {
            let _ = writeln!(out, "delete element {TABLE} {map} {{ {key} }}");
        }
    }
    for (chain, rules) in &new.chains {
        match old.chains.get(chain) {
            Some(previous) if previous == rules => continue,
            Some(_) => {
                let _ = writeln!(out, "flush chain {TABLE} {chain}");
            }
            None => {}
        }
        for rule in rules {
            let _ = writeln!(out, "add rule {TABLE} {chain} {rule}");
        }
    }
    for ((map, key), verdict) in &new.elements {
        if old.elements.get(&(*map, key.clone())) != Some(verdict) {
            let _ = writeln!(out, "add element {TABLE} {map} {{ {key} : {verdict} }}");
        }
    }
    let removed: Vec<&String> = old
        .chains
        .keys()
        .filter(|c| !new.chains.contains_key(*c))
        .collect();
    for chain in &removed {
        let _ = writeln!(out, "flush chain {TABLE} {chain}");
    }
    for chain in &removed {
        let _ = writeln!(out, "delete chain {TABLE} {chain}");
    }
    for set in old.sets.keys().filter(|s| !new.sets.contains_key(*s)) {
        let _ = writeln!(out, "delete set {TABLE} {set}");
    }
}

/// One service port's chains and elements, as upstream's nftables `syncProxyRules`.
fn render_port(entry: &PortEntry, context: &Context) -> Fragment {
    let mut f = Fragment::default();
    let name = &entry.name;
    let info = &entry.info;
    let proto = info.protocol.as_str();
    let cat = entry.categorize();
    let service_chain = hash::nft_service_chain(name);
    let local_chain = hash::nft_local_chain(name);
    let external_chain = hash::nft_external_chain(name);
    let cidr = &context.cluster_cidr;

    let has_endpoints = cat.any;
    let (internal_chain, has_internal) = if info.internal_local {
        (&local_chain, !cat.local.is_empty())
    } else {
        (&service_chain, has_endpoints)
    };
    let (external_policy_chain, has_external) = if info.external_local {
        (&local_chain, !cat.local.is_empty())
    } else {
        (&service_chain, has_endpoints)
    };
    let no_endpoints = |local: bool| if local { "drop" } else { "goto reject-chain" }.to_string();
    let mut element = |map, key: String, verdict: String| {
        f.elements.insert((map, key), verdict);
    };

    let cluster_key = format!("{} . {proto} . {}", info.cluster_ip, info.port);
    if has_internal {
        element(SERVICE_IPS, cluster_key, format!("goto {internal_chain}"));
    } else {
        element(
            NO_ENDPOINT_SERVICES,
            cluster_key,
            no_endpoints(info.internal_local),
        );
    }
    for ip in &info.external_ips {
        let key = format!("{ip} . {proto} . {}", info.port);
        if has_endpoints {
            element(SERVICE_IPS, key.clone(), format!("goto {external_chain}"));
        }
        if !has_external {
            element(NO_ENDPOINT_SERVICES, key, no_endpoints(info.external_local));
        }
    }
    if let Some(node_port) = info.node_port {
        let key = format!("{proto} . {node_port}");
        if has_endpoints {
            element(
                SERVICE_NODEPORTS,
                key.clone(),
                format!("goto {external_chain}"),
            );
        }
        if !has_external {
            element(
                NO_ENDPOINT_NODEPORTS,
                key,
                no_endpoints(info.external_local),
            );
        }
    }

    if has_internal {
        f.chains
            .entry(internal_chain.clone())
            .or_default()
            .push(format!(
                "ip daddr {} {proto} dport {} ip saddr != {cidr} jump {MARK_MASQ}",
                info.cluster_ip, info.port
            ));
    }
    if has_endpoints && info.externally_accessible() {
        let rules = f.chains.entry(external_chain.clone()).or_default();
        if !info.external_local {
            rules.push(format!("jump {MARK_MASQ}"));
        } else {
            rules.push(format!("ip saddr {cidr} goto {service_chain}"));
            rules.push(format!("fib saddr type local jump {MARK_MASQ}"));
            rules.push(format!("fib saddr type local goto {service_chain}"));
        }
        if has_external {
            rules.push(format!("goto {external_policy_chain}"));
        }
    }
    if !cat.cluster.is_empty() && info.uses_cluster_endpoints() {
        let rules = f.chains.entry(service_chain.clone()).or_default();
        endpoint_jumps(rules, entry, &cat.cluster);
    }
    if !cat.local.is_empty() && info.uses_local_endpoints() {
        let rules = f.chains.entry(local_chain.clone()).or_default();
        endpoint_jumps(rules, entry, &cat.local);
    }
    for endpoint in &cat.reachable {
        let mut rules = vec![format!("ip saddr {} jump {MARK_MASQ}", endpoint.ip)];
        if let Some(seconds) = info.affinity_seconds {
            let set = hash::nft_affinity_set(name, endpoint);
            rules.push(format!("update @{set} {{ ip saddr }}"));
            f.sets.insert(
                set,
                format!("{{ type ipv4_addr ; flags dynamic,timeout ; timeout {seconds}s ; }}"),
            );
        }
        rules.push(format!("meta l4proto {proto} dnat to {endpoint}"));
        f.chains
            .insert(hash::nft_endpoint_chain(name, endpoint), rules);
    }
    f
}

/// Affinity lookups first, then a random pick through an anonymous verdict map.
fn endpoint_jumps(rules: &mut Vec<String>, entry: &PortEntry, endpoints: &[&Endpoint]) {
    if entry.info.affinity_seconds.is_some() {
        for endpoint in endpoints {
            rules.push(format!(
                "ip saddr @{} goto {}",
                hash::nft_affinity_set(&entry.name, endpoint),
                hash::nft_endpoint_chain(&entry.name, endpoint)
            ));
        }
    }
    let picks: Vec<String> = endpoints
        .iter()
        .enumerate()
        .map(|(i, e)| format!("{i} : goto {}", hash::nft_endpoint_chain(&entry.name, e)))
        .collect();
    rules.push(format!(
        "numgen random mod {} vmap {{ {} }}",
        endpoints.len(),
        picks.join(" , ")
    ));
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::Service;
    use k8s_openapi::api::discovery::v1::EndpointSlice;

    use super::*;
    use crate::model::fixtures::{service, slice, table};
    use crate::runner::FakeRunner;

    fn sync(
        nft: &mut Nftables,
        runner: &FakeRunner,
        table: &ServiceTable,
        changed: &[(&str, &str)],
        full: bool,
    ) -> String {
        runner.clear();
        let changed = changed.iter().map(|(n, s)| ServiceKey::new(n, s)).collect();
        nft.sync(table, &changed, &Context::default(), full)
            .unwrap();
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
        let start = input.find("add rule ip skiff filter-output").unwrap();
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
}
