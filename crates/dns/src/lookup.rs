//! `lookup`: one question (name, type) against [`ClusterRecords`], answered as CoreDNS's
//! kubernetes plugin does (with `pods insecure`), following the Kubernetes DNS-Based Service
//! Discovery specification:
//!
//! - `svc.ns.svc.<zone>`: A/AAAA of the ClusterIPs; of each ready endpoint for a headless
//!   Service; a CNAME for an ExternalName Service. `ep.svc.ns.svc.<zone>`: one endpoint, named
//!   by its `hostname` or its dashed address.
//! - `_port._proto.svc.ns.svc.<zone>` (and the bare Service name for every port): SRV to the
//!   Service's name, or to each endpoint's name when headless, the targets' addresses in the
//!   additional section.
//! - `a-b-c-d.ns.pod.<zone>`: A record of the address spelled in the name.
//! - PTR for ClusterIPs and headless endpoint addresses; other reverse names are not ours.
//! - A name that matches nothing is NXDOMAIN, a matching name without records of the type is
//!   NODATA; both carry the zone's SOA, its minimum the records' TTL (CoreDNS's `ttl 5`).

use std::net::IpAddr;

use hickory_proto::rr::rdata::{A, AAAA, CNAME, NS, PTR, SOA, SRV, TXT};
use hickory_proto::rr::{LowerName, Name, RData, Record, RecordType};

use crate::records::{ClusterRecords, ServiceKind, ServiceRecord};

/// The record TTL, and the SOA minimum that negative answers are cached for (CoreDNS's
/// kubernetes plugin default `ttl 5`).
pub const DEFAULT_TTL: u32 = 5;

/// The schema version `dns-version.<zone>` answers with (the specification's 1.1.0).
const SCHEMA_VERSION: &str = "1.1.0";

/// The cluster domain this server is authoritative for.
#[derive(Clone, Debug)]
pub struct Zone {
    origin: Name,
    lower: LowerName,
    ttl: u32,
}

impl Zone {
    /// `domain` such as `cluster.local` (a final dot is optional).
    pub fn new(domain: &str) -> Result<Self, crate::Error> {
        let fqdn = format!("{}.", domain.trim_end_matches('.'));
        let origin = Name::from_ascii(&fqdn)
            .map_err(|e| crate::Error::ClusterDomain(domain.to_string(), e.to_string()))?
            .to_lowercase();
        Ok(Zone {
            lower: LowerName::new(&origin),
            origin,
            ttl: DEFAULT_TTL,
        })
    }

    /// The zone's name, fully qualified and lowercase.
    pub fn origin(&self) -> &Name {
        &self.origin
    }

    /// Whether `name` is the zone or under it (never forwarded).
    pub fn contains(&self, name: &LowerName) -> bool {
        self.lower.zone_of(name)
    }

    /// The SOA record negative answers carry (CoreDNS's: `ns.dns.<zone>`, `hostmaster.<zone>`,
    /// refresh 7200, retry 1800, expire 86400, minimum = TTL).
    pub fn soa(&self, serial: u32) -> Record {
        let soa = SOA::new(
            self.child(&["ns", "dns"]),
            self.child(&["hostmaster"]),
            serial,
            7200,
            1800,
            86400,
            self.ttl,
        );
        Record::from_rdata(self.origin.clone(), self.ttl, RData::SOA(soa))
    }

    /// `labels…<zone>` (labels that failed to form a name fall back to the zone itself).
    fn child(&self, labels: &[&str]) -> Name {
        let relative = Name::from_labels(labels.iter().map(|l| l.as_bytes()));
        relative
            .and_then(|r| r.append_domain(&self.origin))
            .unwrap_or_else(|_| self.origin.clone())
    }

    fn record(&self, owner: &Name, data: RData) -> Record {
        Record::from_rdata(owner.clone(), self.ttl, data)
    }
}

/// The outcome of one question.
#[derive(Debug, PartialEq)]
pub enum Answer {
    /// NOERROR with records (`additionals` are the SRV targets' addresses).
    Records {
        answers: Vec<Record>,
        additionals: Vec<Record>,
    },
    /// NOERROR without records: the name exists, not with this type (SOA in authority).
    NoData,
    /// NXDOMAIN: no such name in the zone (SOA in authority).
    NxDomain,
    /// Not a name this server is authoritative for: forward it upstream.
    NotOurs,
}

/// One endpoint or ClusterIP matched by a question, as CoreDNS's `msg.Service`: its address,
/// its port (`None` for an endpoint of a slice without ports) and the name it is known by.
struct Match {
    ip: IpAddr,
    port: Option<u16>,
    target: Name,
}

/// Answers `qtype` for `qname`; records are owned by `owner` (the question's name as asked).
pub fn lookup(
    records: &ClusterRecords,
    zone: &Zone,
    qname: &LowerName,
    owner: &Name,
    qtype: RecordType,
) -> Answer {
    if !zone.contains(qname) {
        return reverse(records, zone, qname, owner, qtype);
    }
    let all: Vec<&[u8]> = qname.iter().collect();
    let relative_len = all.len() - usize::from(zone.lower.num_labels());
    let mut labels = Vec::with_capacity(relative_len);
    for label in &all[..relative_len] {
        match std::str::from_utf8(label) {
            Ok(label) => labels.push(label),
            Err(_) => return Answer::NxDomain,
        }
    }
    match labels.as_slice() {
        [] => apex(zone, records.generation(), owner, qtype),
        ["dns-version"] => match qtype {
            RecordType::TXT => single(
                zone,
                owner,
                RData::TXT(TXT::new(vec![SCHEMA_VERSION.into()])),
            ),
            _ => Answer::NoData,
        },
        ["svc" | "pod"] => Answer::NoData,
        [namespace, "svc" | "pod"] => {
            if records.namespace_exists(namespace) {
                Answer::NoData
            } else {
                Answer::NxDomain
            }
        }
        [pod, _namespace, "pod"] => pod_record(zone, pod, owner, qtype),
        [service, namespace, "svc"] => {
            let question = ServiceQuestion {
                namespace,
                service,
                endpoint: None,
                port: None,
            };
            service_answer(records, zone, &question, owner, qtype)
        }
        [endpoint, service, namespace, "svc"] => {
            let question = ServiceQuestion {
                namespace,
                service,
                endpoint: Some(endpoint),
                port: None,
            };
            service_answer(records, zone, &question, owner, qtype)
        }
        [port, protocol, service, namespace, "svc"] => {
            let question = ServiceQuestion {
                namespace,
                service,
                endpoint: None,
                port: Some((
                    port.strip_prefix('_').unwrap_or(port),
                    protocol.strip_prefix('_').unwrap_or(protocol),
                )),
            };
            service_answer(records, zone, &question, owner, qtype)
        }
        _ => Answer::NxDomain,
    }
}

fn apex(zone: &Zone, serial: u32, owner: &Name, qtype: RecordType) -> Answer {
    match qtype {
        RecordType::SOA => Answer::Records {
            answers: vec![zone.soa(serial)],
            additionals: Vec::new(),
        },
        RecordType::NS => single(zone, owner, RData::NS(NS(zone.child(&["ns", "dns"])))),
        _ => Answer::NoData,
    }
}

fn single(zone: &Zone, owner: &Name, data: RData) -> Answer {
    Answer::Records {
        answers: vec![zone.record(owner, data)],
        additionals: Vec::new(),
    }
}

/// `a-b-c-d.ns.pod.<zone>` (`pods insecure`: the address is taken from the name, unchecked);
/// IPv6 addresses spell each `:` as `-`.
fn pod_record(zone: &Zone, pod: &str, owner: &Name, qtype: RecordType) -> Answer {
    let spelled = if pod.matches('-').count() == 3 && !pod.contains("--") {
        pod.replace('-', ".")
    } else {
        pod.replace('-', ":")
    };
    let Ok(ip) = spelled.parse::<IpAddr>() else {
        return Answer::NxDomain;
    };
    match address(ip, qtype) {
        Some(data) => single(zone, owner, data),
        None => Answer::NoData,
    }
}

/// The A or AAAA data of `ip` when it is the family `qtype` asks for.
fn address(ip: IpAddr, qtype: RecordType) -> Option<RData> {
    match (ip, qtype) {
        (IpAddr::V4(ip), RecordType::A) => Some(RData::A(A(ip))),
        (IpAddr::V6(ip), RecordType::AAAA) => Some(RData::AAAA(AAAA(ip))),
        _ => None,
    }
}

/// A question about a Service: `[endpoint.]service.namespace.svc` or
/// `_port._protocol.service.namespace.svc`.
struct ServiceQuestion<'a> {
    namespace: &'a str,
    service: &'a str,
    endpoint: Option<&'a str>,
    /// (port name, protocol), underscores stripped.
    port: Option<(&'a str, &'a str)>,
}

fn service_answer(
    records: &ClusterRecords,
    zone: &Zone,
    question: &ServiceQuestion<'_>,
    owner: &Name,
    qtype: RecordType,
) -> Answer {
    let ServiceQuestion {
        namespace,
        service: name,
        endpoint,
        port,
    } = *question;
    let Some(service) = records.service(namespace, name) else {
        return Answer::NxDomain;
    };
    let service_name = zone.child(&[name, namespace, "svc"]);
    if let ServiceKind::ExternalName(target) = &service.kind {
        // no endpoints, ports or protocols under an ExternalName Service
        if endpoint.is_some() || port.is_some() {
            return Answer::NxDomain;
        }
        let Ok(target) = Name::from_ascii(format!("{target}.")) else {
            return Answer::NoData;
        };
        return match qtype {
            RecordType::A | RecordType::AAAA | RecordType::CNAME | RecordType::ANY => {
                single(zone, owner, RData::CNAME(CNAME(target)))
            }
            _ => Answer::NoData,
        };
    }
    let matches = matches(service, &service_name, endpoint, port);
    if matches.is_empty() {
        return Answer::NxDomain;
    }
    let mut answers: Vec<Record> = Vec::new();
    let mut additionals: Vec<Record> = Vec::new();
    match qtype {
        RecordType::A | RecordType::AAAA => {
            for m in &matches {
                if let Some(data) = address(m.ip, qtype)
                    && !answers.iter().any(|r| r.data == data)
                {
                    answers.push(zone.record(owner, data));
                }
            }
        }
        RecordType::SRV => {
            let weight = u16::try_from(100 / matches.len()).unwrap_or(0);
            for m in &matches {
                let Some(port) = m.port else { continue };
                let data = RData::SRV(SRV::new(0, weight, port, m.target.clone()));
                if !answers.iter().any(|r| r.data == data) {
                    answers.push(zone.record(owner, data));
                }
                let family = if m.ip.is_ipv4() {
                    RecordType::A
                } else {
                    RecordType::AAAA
                };
                if let Some(data) = address(m.ip, family)
                    && !additionals
                        .iter()
                        .any(|r| r.name == m.target && r.data == data)
                {
                    additionals.push(zone.record(&m.target, data));
                }
            }
        }
        _ => {}
    }
    if answers.is_empty() {
        Answer::NoData
    } else {
        Answer::Records {
            answers,
            additionals,
        }
    }
}

/// What a question about a ClusterIP or headless Service matches, as CoreDNS's `findServices`:
/// the endpoints when headless or when an endpoint is named, else one match per ClusterIP and
/// port; `port` (name, protocol) filters the ports, an empty name or protocol matching any.
fn matches(
    service: &ServiceRecord,
    service_name: &Name,
    endpoint: Option<&str>,
    port: Option<(&str, &str)>,
) -> Vec<Match> {
    let (port_name, protocol) = port.unwrap_or(("", ""));
    let wanted = |p: &crate::records::Port| {
        (port_name.is_empty() || p.name == port_name)
            && (protocol.is_empty() || p.protocol == protocol)
    };
    let mut out = Vec::new();
    if matches!(service.kind, ServiceKind::Headless) || endpoint.is_some() {
        for ep in &service.endpoints {
            if endpoint.is_some_and(|e| e != ep.name) {
                continue;
            }
            let target = Name::from_labels([ep.name.as_bytes()])
                .and_then(|l| l.append_domain(service_name))
                .unwrap_or_else(|_| service_name.clone());
            if ep.ports.is_empty() {
                // CoreDNS's sentinel port: the address answers A/AAAA, but no SRV
                if port.is_none() {
                    out.push(Match {
                        ip: ep.ip,
                        port: None,
                        target,
                    });
                }
                continue;
            }
            for p in ep.ports.iter().filter(|p| wanted(p)) {
                out.push(Match {
                    ip: ep.ip,
                    port: Some(p.port),
                    target: target.clone(),
                });
            }
        }
        return out;
    }
    let ServiceKind::ClusterIp(ips) = &service.kind else {
        return out;
    };
    for p in service.ports.iter().filter(|p| wanted(p)) {
        for ip in ips {
            out.push(Match {
                ip: *ip,
                port: Some(p.port),
                target: service_name.clone(),
            });
        }
    }
    out
}

/// PTR for a ClusterIP or a headless endpoint's address; any other reverse name (and any name
/// outside the zone) is not ours.
fn reverse(
    records: &ClusterRecords,
    zone: &Zone,
    qname: &LowerName,
    owner: &Name,
    qtype: RecordType,
) -> Answer {
    let Ok(net) = qname.parse_arpa_name() else {
        return Answer::NotOurs;
    };
    if net.prefix_len() != net.max_prefix_len() {
        return Answer::NotOurs;
    }
    let targets = records.reverse(net.addr());
    if targets.is_empty() {
        return Answer::NotOurs;
    }
    if qtype != RecordType::PTR {
        return Answer::NoData;
    }
    let answers = targets
        .iter()
        .map(|t| {
            let mut labels: Vec<&str> = t.endpoint.iter().map(String::as_str).collect();
            labels.extend([t.service.as_str(), t.namespace.as_str(), "svc"]);
            zone.record(owner, RData::PTR(PTR(zone.child(&labels))))
        })
        .collect();
    Answer::Records {
        answers,
        additionals: Vec::new(),
    }
}

#[cfg(test)]
#[path = "lookup_tests.rs"]
mod tests;
