//! The host ports a pod asks for (upstream's `schedutil.GetHostPorts`) and when two uses of a
//! host port collide: the scheduler's `NodePorts` and the kubelet's admission check both ask;
//! and the transport [`Protocol`] of a port as the node's dataplanes (the proxy's Services, the
//! network policy controller's rules) name it.

use k8s_openapi::api::core::v1::Pod;

/// The transport protocol of a Service, container or policy port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Protocol {
    Tcp,
    Udp,
    Sctp,
}

impl Protocol {
    /// Parses the API's `TCP`/`UDP`/`SCTP` (absent means TCP, as the API server defaults it);
    /// `None` for anything else.
    pub fn parse(value: Option<&str>) -> Option<Protocol> {
        match value.unwrap_or("TCP") {
            "TCP" => Some(Protocol::Tcp),
            "UDP" => Some(Protocol::Udp),
            "SCTP" => Some(Protocol::Sctp),
            _ => None,
        }
    }

    /// The lowercase name iptables, nftables, conntrack and the proxy's chain hashes use.
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::Tcp => "tcp",
            Protocol::Udp => "udp",
            Protocol::Sctp => "sctp",
        }
    }
}

/// A host port a pod uses: protocol, port and IP (`0.0.0.0` for all addresses).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct HostPort {
    pub protocol: String,
    pub port: i32,
    pub ip: String,
}

impl HostPort {
    /// Whether two uses of a host port collide: same protocol and port, and the same IP or
    /// either bound to all addresses.
    pub fn conflicts(&self, other: &HostPort) -> bool {
        self.protocol == other.protocol
            && self.port == other.port
            && (self.ip == other.ip || self.ip == "0.0.0.0" || other.ip == "0.0.0.0")
    }
}

/// Whether any of the `wanted` ports collides with one already `used` (upstream's
/// `nodeports.fitsPorts`, negated).
pub fn any_conflict(wanted: &[HostPort], used: &[HostPort]) -> bool {
    wanted.iter().any(|w| used.iter().any(|u| u.conflicts(w)))
}

/// The host ports a pod's containers (and init containers) ask for (upstream's
/// `schedutil.GetHostPorts`): protocol defaults to TCP, the IP to `0.0.0.0`.
pub fn host_ports(pod: &Pod) -> Vec<HostPort> {
    let Some(spec) = &pod.spec else {
        return Vec::new();
    };
    spec.containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
        .flat_map(|c| c.ports.iter().flatten())
        .filter_map(|p| {
            let port = p.host_port.filter(|p| *p > 0)?;
            Some(HostPort {
                protocol: p.protocol.clone().unwrap_or_else(|| "TCP".into()),
                port,
                ip: p
                    .host_ip
                    .clone()
                    .filter(|ip| !ip.is_empty())
                    .unwrap_or_else(|| "0.0.0.0".into()),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_ports_on_all_addresses_conflict_with_any_address() {
        let any = HostPort {
            protocol: "TCP".into(),
            port: 80,
            ip: "0.0.0.0".into(),
        };
        let one = HostPort {
            ip: "10.0.0.1".into(),
            ..any.clone()
        };
        let udp = HostPort {
            protocol: "UDP".into(),
            ..any.clone()
        };
        assert!(any.conflicts(&one));
        assert!(!any.conflicts(&udp));
    }
}
