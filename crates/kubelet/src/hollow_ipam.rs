//! Pod addresses of hollow nodes: IPv4 CIDRs, a node's range carved from the cluster's (as the
//! node IPAM controller does) and its pod IPs handed out as CNI's host-local IPAM does.

use std::collections::HashSet;
use std::net::Ipv4Addr;

/// A CIDR that is not IPv4 `a.b.c.d/n`, or a subnet that does not fit in it.
#[derive(Debug, thiserror::Error)]
#[error("cidr {cidr}: {problem}")]
pub struct CidrError {
    pub cidr: String,
    pub problem: String,
}

/// An IPv4 CIDR (hollow nodes are IPv4 only).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    pub network: Ipv4Addr,
    pub prefix: u8,
}

impl Cidr {
    pub fn parse(cidr: &str) -> Result<Cidr, CidrError> {
        let bad = |problem: &str| CidrError {
            cidr: cidr.into(),
            problem: problem.into(),
        };
        let (ip, prefix) = cidr.split_once('/').ok_or_else(|| bad("no /prefix"))?;
        let ip: Ipv4Addr = ip.parse().map_err(|_| bad("not an IPv4 address"))?;
        let prefix: u8 = prefix.parse().map_err(|_| bad("bad prefix length"))?;
        if prefix > 30 {
            return Err(bad("prefix longer than /30 leaves no pod addresses"));
        }
        let mask = u32::MAX << (32 - prefix);
        Ok(Cidr {
            network: Ipv4Addr::from(u32::from(ip) & mask),
            prefix,
        })
    }

    fn size(&self) -> u64 {
        1 << (32 - self.prefix)
    }

    /// The `index`-th subnet of length `prefix` inside this range (a node's pod CIDR carved
    /// from the cluster CIDR, as the node IPAM controller does).
    pub fn subnet(&self, index: usize, prefix: u8) -> Result<Cidr, CidrError> {
        let err = |problem: String| CidrError {
            cidr: self.to_string(),
            problem,
        };
        if prefix < self.prefix || prefix > 30 {
            return Err(err(format!("cannot hold /{prefix} subnets")));
        }
        let count = 1u64 << (prefix - self.prefix);
        if index as u64 >= count {
            return Err(err(format!("has only {count} /{prefix} subnets")));
        }
        let base = u64::from(u32::from(self.network)) + index as u64 * (1 << (32 - prefix));
        Ok(Cidr {
            network: Ipv4Addr::from(base as u32),
            prefix,
        })
    }

    /// The `n`-th address of the range (0 is the network address).
    pub fn host(&self, n: u64) -> Ipv4Addr {
        Ipv4Addr::from((u64::from(u32::from(self.network)) + n) as u32)
    }
}

impl std::fmt::Display for Cidr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.network, self.prefix)
    }
}

/// Pod IPs of one node's range, as host-local hands them out: from `.2` (`.1` is the
/// gateway, and the hollow node's own address) to the last before broadcast, round robin from
/// the last one given, so a released address is not reused at once.
#[derive(Debug)]
pub struct IpPool {
    cidr: Cidr,
    used: HashSet<u64>,
    /// The offset handed out last.
    last: u64,
}

impl IpPool {
    pub fn new(cidr: Cidr) -> IpPool {
        IpPool {
            cidr,
            used: HashSet::new(),
            last: 1,
        }
    }

    /// The next free address, or an error naming the range when all are taken.
    pub fn allocate(&mut self) -> Result<Ipv4Addr, CidrError> {
        let (first, last) = (2, self.cidr.size() - 2);
        let count = last - first + 1;
        for step in 1..=count {
            let n = first + (self.last + step - first) % count;
            if self.used.insert(n) {
                self.last = n;
                return Ok(self.cidr.host(n));
            }
        }
        Err(CidrError {
            cidr: self.cidr.to_string(),
            problem: format!(
                "no IP addresses available in range set: {}-{}",
                self.cidr.host(first),
                self.cidr.host(last)
            ),
        })
    }

    pub fn release(&mut self, ip: Ipv4Addr) {
        let n = u64::from(u32::from(ip)).wrapping_sub(u64::from(u32::from(self.cidr.network)));
        self.used.remove(&n);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_ranges_are_carved_from_the_cluster_cidr_in_order() {
        let cluster = Cidr::parse("10.64.0.0/10").unwrap();
        assert_eq!(cluster.subnet(0, 24).unwrap().to_string(), "10.64.0.0/24");
        assert_eq!(
            cluster.subnet(999, 24).unwrap().to_string(),
            "10.67.231.0/24"
        );
        assert_eq!(
            cluster.subnet(16383, 24).unwrap().to_string(),
            "10.127.255.0/24"
        );
        let err = cluster.subnet(16384, 24).unwrap_err().to_string();
        assert_eq!(err, "cidr 10.64.0.0/10: has only 16384 /24 subnets");
        assert_eq!(
            Cidr::parse("10.42.7.9/24").unwrap().to_string(),
            "10.42.7.0/24"
        );
        assert!(Cidr::parse("fd00::/64").is_err());
    }
}
