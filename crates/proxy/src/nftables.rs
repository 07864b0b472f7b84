//! nftables mode: one `ip skiff` table applied atomically with `nft -f`, laid out as upstream's
//! nftables proxier lays out its `kube-proxy` table. Services are found through verdict maps keyed
//! on `ip daddr . meta l4proto . th dport` (`service-ips`, `service-nodeports`, and the
//! `no-endpoint-*` maps that reject or drop, and `firewall-ips`, which sends load-balancer IP
//! traffic through a Service's `loadBalancerSourceRanges` check before DNAT), so a partial sync
//! only adds and deletes the changed
//! Services' map elements and rewrites their own chains; a full sync replaces the table.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::sync::Arc;

use crate::Result;
use crate::dataplane::{Context, Dataplane, MASQUERADE_MARK, ServiceTable, cidr_contains};
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
const FIREWALL_IPS: &str = "firewall-ips";

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
         add map {TABLE} {FIREWALL_IPS} {{ type ipv4_addr . inet_proto . inet_service : verdict ; }}\n\
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
         add chain {TABLE} firewall-check\n\
         add rule {TABLE} firewall-check ip daddr . meta l4proto . th dport vmap @{FIREWALL_IPS}\n\
         add chain {TABLE} filter-prerouting-pre-dnat {{ type filter hook prerouting priority -110 ; }}\n\
         add rule {TABLE} filter-prerouting-pre-dnat ct state new jump firewall-check\n\
         add chain {TABLE} filter-output-pre-dnat {{ type filter hook output priority -110 ; }}\n\
         add rule {TABLE} filter-output-pre-dnat ct state new jump firewall-check\n\
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
    let firewall_chain = hash::nft_firewall_chain(name);
    let cidr = &context.cluster_cidr;

    let has_endpoints = cat.any;
    let (internal_chain, has_internal) =
        cat.policy_chain(info.internal_local, &service_chain, &local_chain);
    let (external_policy_chain, has_external) =
        cat.policy_chain(info.external_local, &service_chain, &local_chain);
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
    let uses_firewall = has_endpoints && info.uses_firewall();
    for ip in &info.load_balancer_ips {
        let key = format!("{ip} . {proto} . {}", info.port);
        if has_endpoints {
            element(SERVICE_IPS, key.clone(), format!("goto {external_chain}"));
        }
        if uses_firewall {
            element(FIREWALL_IPS, key.clone(), format!("goto {firewall_chain}"));
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
    if uses_firewall {
        // a node's own request to a load-balancer IP it holds comes from that IP
        let mut allowed = info.source_ranges.clone();
        if info
            .source_ranges
            .iter()
            .any(|r| context.node_ips.iter().any(|ip| cidr_contains(r, *ip)))
        {
            allowed.extend(info.load_balancer_ips.iter().map(|ip| ip.to_string()));
        }
        f.chains.insert(
            firewall_chain,
            vec![format!("ip saddr != {{ {} }} drop", allowed.join(", "))],
        );
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
mod tests;
