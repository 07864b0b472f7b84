//! Stale UDP conntrack entries (upstream's `conntrack` cleanup): when a UDP endpoint goes away,
//! flows NATed to it would keep blackholing; when a UDP Service gains its first endpoint, flows
//! remembered while it rejected must go. Both are deleted with Debian's `conntrack -D` after the
//! rules are applied.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

use crate::model::{PortEntry, Protocol};
use crate::runner::Runner;

/// One `conntrack -D` filter.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Flush {
    /// UDP flows to a Service address (cluster or external IP).
    ServiceIp(Ipv4Addr),
    /// UDP flows to a NodePort.
    NodePort(u16),
    /// UDP flows to a Service address NATed to a removed endpoint.
    Endpoint {
        origin: Ipv4Addr,
        endpoint: Ipv4Addr,
    },
    /// UDP flows to a NodePort NATed to a removed endpoint.
    NodePortEndpoint { port: u16, endpoint: Ipv4Addr },
}

impl Flush {
    /// The `conntrack` arguments, as upstream's `ClearEntriesFor*` build them.
    pub fn args(&self) -> Vec<String> {
        let mut args: Vec<String> = vec!["-D".into()];
        match self {
            Flush::ServiceIp(ip) => args.extend(["--orig-dst".into(), ip.to_string()]),
            Flush::NodePort(port) => args.extend(["--dport".into(), port.to_string()]),
            Flush::Endpoint { origin, endpoint } => args.extend([
                "--orig-dst".into(),
                origin.to_string(),
                "--dst-nat".into(),
                endpoint.to_string(),
            ]),
            Flush::NodePortEndpoint { port, endpoint } => args.extend([
                "--dport".into(),
                port.to_string(),
                "--dst-nat".into(),
                endpoint.to_string(),
            ]),
        }
        args.extend(["-p".into(), "udp".into()]);
        args
    }

    /// Runs it; failures (mostly "0 flow entries have been deleted") only get logged.
    pub fn run(&self, runner: &dyn Runner) {
        let args = self.args();
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        if let Err(error) = runner.run("conntrack", &args, None) {
            tracing::debug!(%error, "conntrack cleanup");
        }
    }
}

/// What to flush when a Service's ports go from `old` to `new`.
pub fn stale(old: &[PortEntry], new: &[PortEntry]) -> Vec<Flush> {
    let new_by_name: BTreeMap<_, _> = new.iter().map(|e| (&e.name, e)).collect();
    let mut out = Vec::new();
    for before in old.iter().filter(|e| e.info.protocol == Protocol::Udp) {
        let after = new_by_name.get(&before.name);
        let still = |ip: Ipv4Addr, port: u16| {
            after.is_some_and(|a| {
                a.categorize()
                    .reachable
                    .iter()
                    .any(|e| e.ip == ip && e.port == port)
            })
        };
        let origins: Vec<Ipv4Addr> = std::iter::once(before.info.cluster_ip)
            .chain(before.info.external_ips.iter().copied())
            .collect();
        for endpoint in before.categorize().reachable {
            if still(endpoint.ip, endpoint.port) {
                continue;
            }
            for origin in &origins {
                out.push(Flush::Endpoint {
                    origin: *origin,
                    endpoint: endpoint.ip,
                });
            }
            if let Some(port) = before.info.node_port {
                out.push(Flush::NodePortEndpoint {
                    port,
                    endpoint: endpoint.ip,
                });
            }
        }
    }
    let old_by_name: BTreeMap<_, _> = old.iter().map(|e| (&e.name, e)).collect();
    for after in new.iter().filter(|e| e.info.protocol == Protocol::Udp) {
        let had = old_by_name
            .get(&after.name)
            .is_some_and(|b| b.categorize().any);
        if had || !after.categorize().any {
            continue;
        }
        out.push(Flush::ServiceIp(after.info.cluster_ip));
        out.extend(
            after
                .info
                .external_ips
                .iter()
                .map(|ip| Flush::ServiceIp(*ip)),
        );
        out.extend(after.info.node_port.map(Flush::NodePort));
    }
    out.sort();
    out.dedup();
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::fixtures::{service, slice};
    use crate::model::service_ports;

    #[test]
    fn a_removed_udp_endpoint_is_flushed_by_service_ip_and_endpoint() {
        let svc = service("kube-system", "dns", "10.43.0.10", &[("dns", "UDP", 53)]);
        let two = slice(
            "kube-system",
            "dns",
            "dns-1",
            ("dns", "UDP", 53),
            &[("10.42.0.2", "n1", true), ("10.42.0.3", "n1", true)],
        );
        let one = slice(
            "kube-system",
            "dns",
            "dns-1",
            ("dns", "UDP", 53),
            &[("10.42.0.2", "n1", true)],
        );
        let old = service_ports(&svc, [&two], "n1");
        let new = service_ports(&svc, [&one], "n1");
        let flushes = stale(&old, &new);
        assert_eq!(
            flushes,
            [Flush::Endpoint {
                origin: "10.43.0.10".parse().unwrap(),
                endpoint: "10.42.0.3".parse().unwrap()
            }]
        );
        assert_eq!(
            flushes[0].args().join(" "),
            "-D --orig-dst 10.43.0.10 --dst-nat 10.42.0.3 -p udp"
        );
    }

    #[test]
    fn a_udp_service_gaining_its_first_endpoint_flushes_its_address() {
        let svc = service("ns", "u", "10.43.0.20", &[("", "UDP", 5000)]);
        let s = slice(
            "ns",
            "u",
            "u-1",
            ("", "UDP", 5000),
            &[("10.42.0.2", "n1", true)],
        );
        let flushes = stale(
            &service_ports(&svc, [], "n1"),
            &service_ports(&svc, [&s], "n1"),
        );
        assert_eq!(flushes, [Flush::ServiceIp("10.43.0.20".parse().unwrap())]);
    }

    #[test]
    fn tcp_changes_flush_nothing() {
        let svc = service("ns", "t", "10.43.0.21", &[("", "TCP", 80)]);
        let s = slice(
            "ns",
            "t",
            "t-1",
            ("", "TCP", 80),
            &[("10.42.0.2", "n1", true)],
        );
        assert!(stale(&service_ports(&svc, [&s], "n1"), &[]).is_empty());
    }
}
