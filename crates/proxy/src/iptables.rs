//! iptables mode: upstream kube-proxy's chains (KUBE-SERVICES, KUBE-SVC-/SVL-/EXT-/FW-/SEP-…,
//! KUBE-NODEPORTS, KUBE-POSTROUTING, KUBE-MARK-MASQ; filter KUBE-SERVICES and
//! KUBE-EXTERNAL-SERVICES for REJECT/DROP, KUBE-PROXY-FIREWALL for `loadBalancerSourceRanges`,
//! KUBE-NODEPORTS accepting health check ports, KUBE-FORWARD accepting marked and established
//! forwarded traffic), applied with `iptables-restore --noflush` as one
//! transaction over both tables. As upstream's MinimizeIPTablesRestore, a partial sync writes the
//! top-level chains in full but only the changed Services' own chains; stale chains are flushed
//! and deleted.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::sync::Arc;

use crate::Result;
use crate::dataplane::{Context, Dataplane, MASQUERADE_MARK, ServiceTable, cidr_contains};
use crate::hash;
use crate::model::{Endpoint, PortEntry, ServiceKey, ServicePortName};
use crate::runner::Runner;

const SERVICES: &str = "KUBE-SERVICES";
const EXTERNAL_SERVICES: &str = "KUBE-EXTERNAL-SERVICES";
const NODEPORTS: &str = "KUBE-NODEPORTS";
const POSTROUTING: &str = "KUBE-POSTROUTING";
const MARK_MASQ: &str = "KUBE-MARK-MASQ";
const FORWARD: &str = "KUBE-FORWARD";
const PROXY_FIREWALL: &str = "KUBE-PROXY-FIREWALL";

/// A jump from a built-in chain into ours, inserted at its top when missing.
#[derive(Debug)]
struct Jump {
    table: &'static str,
    chain: &'static str,
    /// Matches before the comment, each followed by a space.
    matches: &'static str,
    comment: &'static str,
    target: &'static str,
}

impl Jump {
    /// The rule after `-A CHAIN`, as `iptables-save` prints it.
    fn rule(&self) -> String {
        format!(
            "{}-m comment --comment \"{}\" -j {}",
            self.matches, self.comment, self.target
        )
    }
}

const NEW: &str = "-m conntrack --ctstate NEW ";
const PORTALS: &str = "kubernetes service portals";
const EXTERNAL_PORTALS: &str = "kubernetes externally-visible service portals";
const LB_FIREWALL: &str = "kubernetes load balancer firewall";

/// Upstream's jumps into its chains.
const JUMPS: &[Jump] = &[
    Jump {
        table: "filter",
        chain: "INPUT",
        matches: NEW,
        comment: PORTALS,
        target: SERVICES,
    },
    Jump {
        table: "filter",
        chain: "FORWARD",
        matches: NEW,
        comment: PORTALS,
        target: SERVICES,
    },
    Jump {
        table: "filter",
        chain: "OUTPUT",
        matches: NEW,
        comment: PORTALS,
        target: SERVICES,
    },
    Jump {
        table: "filter",
        chain: "INPUT",
        matches: NEW,
        comment: EXTERNAL_PORTALS,
        target: EXTERNAL_SERVICES,
    },
    Jump {
        table: "filter",
        chain: "FORWARD",
        matches: NEW,
        comment: EXTERNAL_PORTALS,
        target: EXTERNAL_SERVICES,
    },
    Jump {
        table: "filter",
        chain: "INPUT",
        matches: "",
        comment: "kubernetes health check service ports",
        target: NODEPORTS,
    },
    Jump {
        table: "filter",
        chain: "FORWARD",
        matches: "",
        comment: "kubernetes forwarding rules",
        target: FORWARD,
    },
    Jump {
        table: "filter",
        chain: "INPUT",
        matches: NEW,
        comment: LB_FIREWALL,
        target: PROXY_FIREWALL,
    },
    Jump {
        table: "filter",
        chain: "OUTPUT",
        matches: NEW,
        comment: LB_FIREWALL,
        target: PROXY_FIREWALL,
    },
    Jump {
        table: "filter",
        chain: "FORWARD",
        matches: NEW,
        comment: LB_FIREWALL,
        target: PROXY_FIREWALL,
    },
    Jump {
        table: "nat",
        chain: "PREROUTING",
        matches: "",
        comment: PORTALS,
        target: SERVICES,
    },
    Jump {
        table: "nat",
        chain: "OUTPUT",
        matches: "",
        comment: PORTALS,
        target: SERVICES,
    },
    Jump {
        table: "nat",
        chain: "POSTROUTING",
        matches: "",
        comment: "kubernetes postrouting rules",
        target: POSTROUTING,
    },
];

/// What a full sync needs to know of the tables as they are.
#[derive(Debug, Default)]
struct Saved {
    /// Per-service nat chains, a previous run's included.
    chains: BTreeSet<String>,
    missing_jumps: Vec<&'static Jump>,
}

/// One service port's rules: lines for the shared top-level chains, and its own chains.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
struct Fragment {
    nat_services: Vec<String>,
    nat_nodeports: Vec<String>,
    filter_services: Vec<String>,
    filter_external: Vec<String>,
    /// KUBE-PROXY-FIREWALL: load-balancer IP traffic its KUBE-FW chain did not accept.
    filter_firewall: Vec<String>,
    /// filter KUBE-NODEPORTS: the health check port accepted.
    filter_nodeports: Vec<String>,
    /// Its own nat chains, declared before any rule.
    chains: Vec<String>,
    rules: Vec<String>,
}

/// The iptables proxier's dataplane state: every service port's rendered rules.
pub struct Iptables {
    runner: Arc<dyn Runner>,
    fragments: BTreeMap<ServicePortName, Fragment>,
}

impl Iptables {
    pub fn new(runner: Arc<dyn Runner>) -> Self {
        Iptables {
            runner,
            fragments: BTreeMap::new(),
        }
    }

    /// The `iptables-restore` input of one sync; `write` says which ports' own chains to write.
    fn render(
        &self,
        write: &BTreeSet<ServicePortName>,
        stale: &BTreeSet<String>,
        jumps: &[&Jump],
        context: &Context,
    ) -> String {
        let mut out = String::with_capacity(256 * (self.fragments.len() + 1));
        let insert_jumps = |out: &mut String, table: &str| {
            for jump in jumps.iter().filter(|j| j.table == table) {
                let _ = writeln!(out, "-I {} 1 {}", jump.chain, jump.rule());
            }
        };
        out.push_str("*filter\n");
        for chain in [
            SERVICES,
            EXTERNAL_SERVICES,
            NODEPORTS,
            FORWARD,
            PROXY_FIREWALL,
        ] {
            let _ = writeln!(out, ":{chain} - [0:0]");
        }
        insert_jumps(&mut out, "filter");
        for f in self.fragments.values() {
            lines(&mut out, &f.filter_services);
        }
        for f in self.fragments.values() {
            lines(&mut out, &f.filter_external);
        }
        for f in self.fragments.values() {
            lines(&mut out, &f.filter_nodeports);
        }
        for f in self.fragments.values() {
            lines(&mut out, &f.filter_firewall);
        }
        // upstream's: what was marked for masquerading is forwarded even under a DROP policy,
        // and so are its replies
        let _ = writeln!(
            out,
            "-A {FORWARD} -m comment --comment \"kubernetes forwarding rules\" -m mark --mark {MASQUERADE_MARK}/{MASQUERADE_MARK} -j ACCEPT\n\
             -A {FORWARD} -m comment --comment \"kubernetes forwarding conntrack rule\" -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT"
        );
        out.push_str("COMMIT\n*nat\n");
        for chain in [SERVICES, NODEPORTS, POSTROUTING, MARK_MASQ] {
            let _ = writeln!(out, ":{chain} - [0:0]");
        }
        let written = || write.iter().filter_map(|name| self.fragments.get(name));
        for f in written() {
            for chain in &f.chains {
                let _ = writeln!(out, ":{chain} - [0:0]");
            }
        }
        for chain in stale {
            let _ = writeln!(out, ":{chain} - [0:0]");
        }
        insert_jumps(&mut out, "nat");
        let _ = writeln!(
            out,
            "-A {POSTROUTING} -m mark ! --mark {MASQUERADE_MARK}/{MASQUERADE_MARK} -j RETURN\n\
             -A {POSTROUTING} -j MARK --xor-mark {MASQUERADE_MARK}\n\
             -A {POSTROUTING} -m comment --comment \"kubernetes service traffic requiring SNAT\" -j MASQUERADE --random-fully\n\
             -A {MARK_MASQ} -j MARK --or-mark {MASQUERADE_MARK}"
        );
        for f in self.fragments.values() {
            lines(&mut out, &f.nat_services);
        }
        let nodeports_comment = "-m comment --comment \"kubernetes service nodeports; NOTE: this must be the last rule in this chain\"";
        if context.node_ips.is_empty() {
            let _ = writeln!(
                out,
                "-A {SERVICES} {nodeports_comment} -m addrtype --dst-type LOCAL -j {NODEPORTS}"
            );
        }
        for ip in &context.node_ips {
            let _ = writeln!(
                out,
                "-A {SERVICES} {nodeports_comment} -d {ip} -j {NODEPORTS}"
            );
        }
        for f in self.fragments.values() {
            lines(&mut out, &f.nat_nodeports);
        }
        for f in written() {
            lines(&mut out, &f.rules);
        }
        for chain in stale {
            let _ = writeln!(out, "-X {chain}");
        }
        out.push_str("COMMIT\n");
        out
    }

    /// The tables as they are (`iptables-save`): our per-service chains, and which jumps into
    /// our chains are missing.
    fn saved(&self) -> Result<Saved> {
        let text = self.runner.run("iptables-save", &[], None)?;
        let mut saved = Saved::default();
        let mut rules = BTreeSet::new();
        let mut table = "";
        for line in text.lines() {
            if let Some(name) = line.strip_prefix('*') {
                table = name;
            } else if let Some(chain) = line.strip_prefix(':') {
                let chain = chain.split_whitespace().next().unwrap_or_default();
                if table == "nat" && hash::is_service_chain(chain) {
                    saved.chains.insert(chain.to_string());
                }
            } else if line.starts_with("-A ") {
                rules.insert((table, line));
            }
        }
        saved.missing_jumps = JUMPS
            .iter()
            .filter(|j| {
                !rules.contains(&(j.table, format!("-A {} {}", j.chain, j.rule()).as_str()))
            })
            .collect();
        Ok(saved)
    }
}

impl Dataplane for Iptables {
    fn sync(
        &mut self,
        table: &ServiceTable,
        changed: &BTreeSet<ServiceKey>,
        context: &Context,
        full: bool,
    ) -> Result<()> {
        // the per-service chains before this sync: all of them in the table on a full sync (a
        // previous run's too), the changed Services' own otherwise
        let mut previous = BTreeSet::new();
        let mut jumps = Vec::new();
        if full {
            let saved = self.saved()?;
            previous = saved.chains;
            jumps = saved.missing_jumps;
            self.fragments.clear();
        } else {
            self.fragments.retain(|name, fragment| {
                let changed = changed.contains(&name.service);
                if changed {
                    previous.extend(fragment.chains.iter().cloned());
                }
                !changed
            });
        }
        let services: Box<dyn Iterator<Item = &Vec<PortEntry>>> = if full {
            Box::new(table.values())
        } else {
            Box::new(changed.iter().filter_map(|key| table.get(key)))
        };
        let mut write = BTreeSet::new();
        for entry in services.flatten() {
            let fragment = render_port(entry, context);
            for chain in &fragment.chains {
                previous.remove(chain);
            }
            self.fragments.insert(entry.name.clone(), fragment);
            write.insert(entry.name.clone());
        }
        let stale = previous;
        let input = self.render(&write, &stale, &jumps, context);
        // on error nothing of the transaction applied, and the full sync that follows finds the
        // chains to delete with iptables-save
        self.runner.run(
            "iptables-restore",
            &["-w", "--noflush", "--counters"],
            Some(&input),
        )?;
        Ok(())
    }
}

fn lines(out: &mut String, rules: &[String]) {
    for rule in rules {
        out.push_str(rule);
        out.push('\n');
    }
}

/// `-m comment --comment X`, quoted when X has spaces (as iptables-save prints it).
fn comment(text: &str) -> String {
    if text.contains(' ') {
        format!("-m comment --comment \"{text}\"")
    } else {
        format!("-m comment --comment {text}")
    }
}

/// Upstream's `probability`: `1/n` with ten decimals.
fn probability(n: usize) -> String {
    format!("{:.10}", 1.0 / n as f64)
}

/// One service port's rules, as upstream's `syncProxyRules` writes them.
fn render_port(entry: &PortEntry, context: &Context) -> Fragment {
    let mut f = Fragment::default();
    let name = &entry.name;
    let svc = name.to_string();
    let info = &entry.info;
    let proto = info.protocol.as_str();
    let cat = entry.categorize();
    let svc_chain = hash::svc_chain(name);
    let svl_chain = hash::svl_chain(name);
    let ext_chain = hash::ext_chain(name);
    let fw_chain = hash::fw_chain(name);
    let cidr = &context.cluster_cidr;

    let has_endpoints = cat.any;
    let (internal_chain, has_internal) =
        cat.policy_chain(info.internal_local, &svc_chain, &svl_chain);
    let (external_policy_chain, has_external) =
        cat.policy_chain(info.external_local, &svc_chain, &svl_chain);
    let uses_ext = has_endpoints && info.externally_accessible();
    let uses_fw = has_endpoints && info.uses_firewall();
    let lb_chain = if uses_fw { &fw_chain } else { &ext_chain };
    let uses_cluster = !cat.cluster.is_empty() && info.uses_cluster_endpoints();
    let uses_local = !cat.local.is_empty() && info.uses_local_endpoints();
    let no_endpoints = |local: bool| {
        if local {
            (format!("{svc} has no local endpoints"), "DROP")
        } else {
            (format!("{svc} has no endpoints"), "REJECT")
        }
    };

    // the cluster IP
    let cluster_ip_args = format!(
        "{} -m {proto} -p {proto} -d {} --dport {}",
        comment(&format!("{svc} cluster IP")),
        info.cluster_ip,
        info.port
    );
    if has_internal {
        f.nat_services.push(format!(
            "-A {SERVICES} {cluster_ip_args} -j {internal_chain}"
        ));
        f.rules.push(format!(
            "-A {internal_chain} {cluster_ip_args} ! -s {cidr} -j {MARK_MASQ}"
        ));
    } else {
        let (text, target) = no_endpoints(info.internal_local);
        f.filter_services.push(format!(
            "-A {SERVICES} {} -m {proto} -p {proto} -d {} --dport {} -j {target}",
            comment(&text),
            info.cluster_ip,
            info.port
        ));
    }

    // external IPs
    for ip in &info.external_ips {
        if has_endpoints {
            f.nat_services.push(format!(
                "-A {SERVICES} {} -m {proto} -p {proto} -d {ip} --dport {} -j {ext_chain}",
                comment(&format!("{svc} external IP")),
                info.port
            ));
        }
        if !has_external {
            let (text, target) = no_endpoints(info.external_local);
            f.filter_external.push(format!(
                "-A {EXTERNAL_SERVICES} {} -m {proto} -p {proto} -d {ip} --dport {} -j {target}",
                comment(&text),
                info.port
            ));
        }
    }

    // load-balancer IPs
    for ip in &info.load_balancer_ips {
        if has_endpoints {
            f.nat_services.push(format!(
                "-A {SERVICES} {} -m {proto} -p {proto} -d {ip} --dport {} -j {lb_chain}",
                comment(&format!("{svc} loadbalancer IP")),
                info.port
            ));
        }
        if uses_fw {
            f.filter_firewall.push(format!(
                "-A {PROXY_FIREWALL} {} -m {proto} -p {proto} -d {ip} --dport {} -j DROP",
                comment(&format!("{svc} traffic not accepted by {fw_chain}")),
                info.port
            ));
        }
    }
    if !has_external {
        for ip in &info.load_balancer_ips {
            let (text, target) = no_endpoints(info.external_local);
            f.filter_external.push(format!(
                "-A {EXTERNAL_SERVICES} {} -m {proto} -p {proto} -d {ip} --dport {} -j {target}",
                comment(&text),
                info.port
            ));
        }
    }

    // the NodePort
    if let Some(node_port) = info.node_port {
        if has_endpoints {
            f.nat_nodeports.push(format!(
                "-A {NODEPORTS} {} -m {proto} -p {proto} --dport {node_port} -j {ext_chain}",
                comment(&svc)
            ));
        }
        if !has_external {
            let (text, target) = no_endpoints(info.external_local);
            f.filter_external.push(format!(
                "-A {EXTERNAL_SERVICES} {} -m addrtype --dst-type LOCAL -m {proto} -p {proto} --dport {node_port} -j {target}",
                comment(&text)
            ));
        }
    }

    // the health check port, whether or not there are local endpoints
    if let Some(port) = info.health_check_node_port {
        f.filter_nodeports.push(format!(
            "-A {NODEPORTS} {} -m tcp -p tcp --dport {port} -j ACCEPT",
            comment(&format!("{svc} health check node port"))
        ));
    }

    if uses_ext {
        f.chains.push(ext_chain.clone());
        if !info.external_local {
            f.rules.push(format!(
                "-A {ext_chain} {} -j {MARK_MASQ}",
                comment(&format!(
                    "masquerade traffic for {svc} external destinations"
                ))
            ));
        } else {
            f.rules.push(format!(
                "-A {ext_chain} -s {cidr} {} -j {svc_chain}",
                comment(&format!("pod traffic for {svc} external destinations"))
            ));
            f.rules.push(format!(
                "-A {ext_chain} {} -m addrtype --src-type LOCAL -j {MARK_MASQ}",
                comment(&format!(
                    "masquerade LOCAL traffic for {svc} external destinations"
                ))
            ));
            f.rules.push(format!(
                "-A {ext_chain} {} -m addrtype --src-type LOCAL -j {svc_chain}",
                comment(&format!(
                    "route LOCAL traffic for {svc} external destinations"
                ))
            ));
        }
        if has_external {
            f.rules
                .push(format!("-A {ext_chain} -j {external_policy_chain}"));
        }
    }

    if uses_fw {
        // only the source ranges go on to the EXT chain; the rest falls through undNATed
        // and KUBE-PROXY-FIREWALL drops it
        f.chains.push(fw_chain.clone());
        let args = format!(
            "-A {fw_chain} {}",
            comment(&format!("{svc} loadbalancer IP"))
        );
        for range in &info.source_ranges {
            f.rules.push(format!("{args} -s {range} -j {ext_chain}"));
        }
        if info
            .source_ranges
            .iter()
            .any(|r| context.node_ips.iter().any(|ip| cidr_contains(r, *ip)))
        {
            // a node's own request to a load-balancer IP it holds comes from that IP
            for ip in &info.load_balancer_ips {
                f.rules.push(format!("{args} -s {ip} -j {ext_chain}"));
            }
        }
        f.rules.push(format!(
            "-A {fw_chain} {}",
            comment(&format!(
                "other traffic to {svc} will be dropped by KUBE-PROXY-FIREWALL"
            ))
        ));
    }

    if uses_cluster {
        f.chains.push(svc_chain.clone());
        endpoint_jumps(&mut f.rules, entry, &svc_chain, &cat.cluster);
    }
    if uses_local {
        f.chains.push(svl_chain.clone());
        endpoint_jumps(&mut f.rules, entry, &svl_chain, &cat.local);
    }
    for endpoint in &cat.reachable {
        let chain = hash::sep_chain(name, endpoint);
        let args = format!("-A {chain} {}", comment(&svc));
        f.rules
            .push(format!("{args} -s {} -j {MARK_MASQ}", endpoint.ip));
        let affinity = if info.affinity_seconds.is_some() {
            format!(" -m recent --name {chain} --set")
        } else {
            String::new()
        };
        f.rules.push(format!(
            "{args}{affinity} -m {proto} -p {proto} -j DNAT --to-destination {endpoint}"
        ));
        f.chains.push(chain);
    }
    f
}

/// Upstream's `writeServiceToEndpointRules`: affinity checks first, then random balancing.
fn endpoint_jumps(
    rules: &mut Vec<String>,
    entry: &PortEntry,
    chain: &str,
    endpoints: &[&Endpoint],
) {
    let svc = entry.name.to_string();
    if let Some(seconds) = entry.info.affinity_seconds {
        for endpoint in endpoints {
            let sep = hash::sep_chain(&entry.name, endpoint);
            rules.push(format!(
                "-A {chain} {} -m recent --name {sep} --rcheck --seconds {seconds} --reap -j {sep}",
                comment(&format!("{svc} -> {endpoint}"))
            ));
        }
    }
    let n = endpoints.len();
    for (i, endpoint) in endpoints.iter().enumerate() {
        let sep = hash::sep_chain(&entry.name, endpoint);
        let balance = if i + 1 < n {
            format!(
                " -m statistic --mode random --probability {}",
                probability(n - i)
            )
        } else {
            String::new()
        };
        rules.push(format!(
            "-A {chain} {}{balance} -j {sep}",
            comment(&format!("{svc} -> {endpoint}"))
        ));
    }
}

#[cfg(test)]
mod tests;
