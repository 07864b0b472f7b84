//! Chain names as upstream derives them: iptables `KUBE-SVC-`/`KUBE-SEP-`… plus the first 16
//! characters of the base32 of a SHA-256 (`portProtoHash`), nftables `service-…` names as the
//! first 8 characters of that hash followed by the readable name (`hashAndTruncate`).

use data_encoding::BASE32;
use ring::digest::{SHA256, digest};

use crate::model::{Endpoint, ServicePortName};

fn base32_sha256(input: &str) -> String {
    BASE32.encode(digest(&SHA256, input.as_bytes()).as_ref())
}

/// `portProtoHash`: 16 characters from the service port name and protocol.
fn port_proto_hash(name: &ServicePortName) -> String {
    base32_sha256(&format!("{name}{}", name.protocol.as_str()))[..16].to_string()
}

/// `KUBE-SVC-…`: the cluster-policy chain.
pub fn svc_chain(name: &ServicePortName) -> String {
    format!("KUBE-SVC-{}", port_proto_hash(name))
}

/// `KUBE-SVL-…`: the local-policy chain.
pub fn svl_chain(name: &ServicePortName) -> String {
    format!("KUBE-SVL-{}", port_proto_hash(name))
}

/// `KUBE-EXT-…`: where NodePort and external-IP traffic enters.
pub fn ext_chain(name: &ServicePortName) -> String {
    format!("KUBE-EXT-{}", port_proto_hash(name))
}

/// `KUBE-FW-…`: the `loadBalancerSourceRanges` check on load-balancer IP traffic.
pub fn fw_chain(name: &ServicePortName) -> String {
    format!("KUBE-FW-{}", port_proto_hash(name))
}

/// `KUBE-SEP-…`: one endpoint of one service port.
pub fn sep_chain(name: &ServicePortName, endpoint: &Endpoint) -> String {
    let hash = base32_sha256(&format!("{name}{}{endpoint}", name.protocol.as_str()));
    format!("KUBE-SEP-{}", &hash[..16])
}

/// Whether an iptables chain is one of the per-service chains a sync may delete.
pub fn is_service_chain(chain: &str) -> bool {
    [
        "KUBE-SVC-",
        "KUBE-SVL-",
        "KUBE-EXT-",
        "KUBE-FW-",
        "KUBE-SEP-",
    ]
    .iter()
    .any(|p| chain.starts_with(p))
}

/// `ns/name/proto/port`: the readable part of nftables chain names.
fn nft_base(name: &ServicePortName) -> String {
    format!(
        "{}/{}/{}/{}",
        name.service.namespace,
        name.service.name,
        name.protocol.as_str(),
        name.port
    )
}

/// `hashAndTruncate`: 8 hash characters, a dash, the name, cut to nftables' 256 bytes.
fn hash_and_truncate(name: &str) -> String {
    let mut out = format!("{}-{name}", &base32_sha256(name)[..8]);
    if out.len() > 256 {
        out.truncate(253);
        out.push_str("...");
    }
    out
}

pub fn nft_service_chain(name: &ServicePortName) -> String {
    format!("service-{}", hash_and_truncate(&nft_base(name)))
}

pub fn nft_local_chain(name: &ServicePortName) -> String {
    format!("local-{}", hash_and_truncate(&nft_base(name)))
}

pub fn nft_external_chain(name: &ServicePortName) -> String {
    format!("external-{}", hash_and_truncate(&nft_base(name)))
}

/// The `loadBalancerSourceRanges` check on load-balancer IP traffic.
pub fn nft_firewall_chain(name: &ServicePortName) -> String {
    format!("firewall-{}", hash_and_truncate(&nft_base(name)))
}

fn nft_endpoint_base(name: &ServicePortName, endpoint: &Endpoint) -> String {
    format!("{}__{}/{}", nft_base(name), endpoint.ip, endpoint.port)
}

pub fn nft_endpoint_chain(name: &ServicePortName, endpoint: &Endpoint) -> String {
    format!(
        "endpoint-{}",
        hash_and_truncate(&nft_endpoint_base(name, endpoint))
    )
}

/// The set remembering clients of one endpoint for `sessionAffinity: ClientIP`.
pub fn nft_affinity_set(name: &ServicePortName, endpoint: &Endpoint) -> String {
    format!(
        "affinity-{}",
        hash_and_truncate(&nft_endpoint_base(name, endpoint))
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Protocol, ServiceKey};

    fn name(ns: &str, svc: &str, port: &str, protocol: Protocol) -> ServicePortName {
        ServicePortName {
            service: ServiceKey::new(ns, svc),
            port: port.into(),
            protocol,
        }
    }

    #[test]
    fn service_chains_hash_as_upstream_kube_proxy() {
        // the chain names every kube-proxy in iptables mode gives these two Services
        assert_eq!(
            svc_chain(&name("default", "kubernetes", "https", Protocol::Tcp)),
            "KUBE-SVC-NPX46M4PTMTKRN6Y"
        );
        assert_eq!(
            svc_chain(&name("kube-system", "kube-dns", "dns", Protocol::Udp)),
            "KUBE-SVC-TCOU7JCQXEZGVUNU"
        );
        assert_eq!(
            svc_chain(&name("kube-system", "kube-dns", "dns-tcp", Protocol::Tcp)),
            "KUBE-SVC-ERIFXISQEP7F7OF4"
        );
    }

    #[test]
    fn only_per_service_chains_are_ours_to_delete() {
        assert!(is_service_chain("KUBE-SEP-ABC"));
        assert!(!is_service_chain("KUBE-SERVICES"));
        assert!(!is_service_chain("DOCKER"));
    }
}
