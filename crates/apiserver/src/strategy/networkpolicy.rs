//! NetworkPolicies (`networking.k8s.io/v1`): upstream's defaults (`policyTypes` from the rules
//! present, port protocol `TCP`) and `ValidateNetworkPolicySpec` (selectors, known policy
//! types, port protocols, numbers, names and ranges, peers with one of their fields, IP blocks
//! with CIDRs whose `except`s are strict subsets).

use serde_json::{Value, json};
use skiff_apimachinery::validation::{
    FieldError, FieldPath, is_valid_port_name, is_valid_port_num, parse_ip_sloppy,
    validate_label_selector,
};

use super::Strategy;
use super::common::{int, is_empty, object_at, set_default, str_at, strings, valid_cidr};

#[derive(Debug)]
pub struct NetworkPolicyStrategy;

const POLICY_TYPES: &[&str] = &["Egress", "Ingress"];
const PROTOCOLS: &[&str] = &["SCTP", "TCP", "UDP"];

fn defaults(policy: &mut Value) {
    let spec = object_at(policy, "spec");
    for direction in ["ingress", "egress"] {
        for rule in spec
            .get_mut(direction)
            .and_then(Value::as_array_mut)
            .into_iter()
            .flatten()
        {
            for port in rule
                .get_mut("ports")
                .and_then(Value::as_array_mut)
                .into_iter()
                .flatten()
            {
                set_default(port, "protocol", json!("TCP"));
            }
        }
    }
    if is_empty(spec.get("policyTypes")) {
        let mut types = vec![json!("Ingress")];
        if !is_empty(spec.get("egress")) {
            types.push(json!("Egress"));
        }
        spec["policyTypes"] = Value::Array(types);
    }
}

fn validate_ports(rule: &Value, path: &FieldPath) -> Vec<FieldError> {
    let mut errs = Vec::new();
    for (i, port) in rule
        .get("ports")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        let p = path.child("ports").index(i);
        let protocol = str_at(port, "/protocol");
        if !protocol.is_empty() && !PROTOCOLS.contains(&protocol) {
            errs.push(FieldError::not_supported(
                &p.child("protocol"),
                protocol,
                PROTOCOLS,
            ));
        }
        let end = port.get("endPort").and_then(int);
        match port.get("port").filter(|v| !v.is_null()) {
            Some(Value::String(name)) => {
                if let Some(end) = end {
                    errs.push(FieldError::invalid(
                        &p.child("endPort"),
                        end,
                        "may not be specified when `port` is non-numeric",
                    ));
                }
                for msg in is_valid_port_name(name) {
                    errs.push(FieldError::invalid(&p.child("port"), name.as_str(), &msg));
                }
            }
            Some(number) => {
                let number = int(number).unwrap_or_default();
                for msg in is_valid_port_num(number) {
                    errs.push(FieldError::invalid(&p.child("port"), number, &msg));
                }
                if let Some(end) = end {
                    // upstream reports `port`'s value here
                    if end < number {
                        errs.push(FieldError::invalid(
                            &p.child("endPort"),
                            number,
                            "must be greater than or equal to `port`",
                        ));
                    }
                    for msg in is_valid_port_num(end) {
                        errs.push(FieldError::invalid(&p.child("endPort"), end, &msg));
                    }
                }
            }
            None => {
                if let Some(end) = end {
                    errs.push(FieldError::invalid(
                        &p.child("endPort"),
                        end,
                        "may not be specified when `port` is not specified",
                    ));
                }
            }
        }
    }
    errs
}

/// A valid CIDR as its network address (host bits cleared, as Go's `ParseCIDR` returns it) and
/// prefix length, IPv4 addresses mapped into the IPv6 space with their prefix moved along.
fn network(cidr: &str) -> Option<(bool, u128, u32)> {
    let (ip, bits) = cidr.split_once('/')?;
    let bits: u32 = bits.parse().ok()?;
    let (v4, addr, width) = match parse_ip_sloppy(ip)? {
        std::net::IpAddr::V4(a) => (true, u128::from(u32::from(a)), 32),
        std::net::IpAddr::V6(a) => (false, u128::from(a), 128),
    };
    let mask = if bits == 0 {
        0
    } else {
        (u128::MAX >> (128 - width)) & !((1u128 << (width - bits)) - 1)
    };
    Some((v4, addr & mask, bits))
}

/// Upstream's check of an `except`: inside `cidr` and with a longer prefix.
fn strict_subset(except: &str, cidr: &str) -> bool {
    let (Some((v4_outer, outer, outer_bits)), Some((v4_inner, inner, inner_bits))) =
        (network(cidr), network(except))
    else {
        return false;
    };
    let width = if v4_outer { 32 } else { 128 };
    let contained = v4_outer == v4_inner
        && (outer_bits == 0 || inner >> (width - outer_bits) == outer >> (width - outer_bits));
    contained && outer_bits < inner_bits
}

fn validate_peer(peer: &Value, path: &FieldPath) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let mut set = 0;
    for field in ["podSelector", "namespaceSelector"] {
        if let Some(selector) = peer.get(field).filter(|s| !s.is_null()) {
            set += 1;
            errs.extend(validate_label_selector(selector, &path.child(field)));
        }
    }
    if let Some(block) = peer.get("ipBlock").filter(|b| !b.is_null()) {
        set += 1;
        let p = path.child("ipBlock");
        let cidr = str_at(block, "/cidr");
        if cidr.is_empty() {
            errs.push(FieldError::required(&p.child("cidr"), ""));
        } else if !valid_cidr(cidr) {
            errs.push(FieldError::invalid(
                &p.child("cidr"),
                cidr,
                "must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)",
            ));
        }
        for (i, except) in strings(block.get("except")).into_iter().enumerate() {
            let path = p.child("except").index(i);
            if !valid_cidr(except) {
                errs.push(FieldError::invalid(
                    &path,
                    except,
                    "must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)",
                ));
            } else if valid_cidr(cidr) && !strict_subset(except, cidr) {
                errs.push(FieldError::invalid(
                    &path,
                    except,
                    "must be a strict subset of `cidr`",
                ));
            }
        }
    }
    if set == 0 {
        errs.push(FieldError::required(path, "must specify a peer"));
    }
    if peer.get("ipBlock").is_some_and(|b| !b.is_null()) && set > 1 {
        errs.push(FieldError::forbidden(
            path,
            "may not specify both ipBlock and another peer",
        ));
    }
    errs
}

impl Strategy for NetworkPolicyStrategy {
    fn prepare_for_create(&self, policy: &mut Value) {
        defaults(policy);
    }

    fn prepare_for_update(&self, policy: &mut Value, _old: &Value) {
        defaults(policy);
    }

    fn validate(&self, policy: &Value) -> Vec<FieldError> {
        let null = Value::Null;
        let spec = policy.get("spec").unwrap_or(&null);
        let path = FieldPath::new("spec");
        let mut errs = validate_label_selector(
            spec.get("podSelector").unwrap_or(&json!({})),
            &path.child("podSelector"),
        );
        for (direction, peers) in [("ingress", "from"), ("egress", "to")] {
            for (i, rule) in spec
                .get(direction)
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .enumerate()
            {
                let p = path.child(direction).index(i);
                errs.extend(validate_ports(rule, &p));
                for (j, peer) in rule
                    .get(peers)
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .enumerate()
                {
                    errs.extend(validate_peer(peer, &p.child(peers).index(j)));
                }
            }
        }
        let types = strings(spec.get("policyTypes"));
        if types.len() > 2 {
            errs.push(FieldError::invalid(
                &path.child("policyTypes"),
                spec.get("policyTypes").cloned().unwrap_or(null),
                "may not specify more than two policyTypes",
            ));
            return errs;
        }
        for (i, t) in types.iter().enumerate() {
            if !POLICY_TYPES.contains(t) {
                errs.push(FieldError::not_supported(
                    &path.child("policyTypes").index(i),
                    *t,
                    POLICY_TYPES,
                ));
            }
        }
        errs
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn errors(errs: Vec<FieldError>) -> Vec<String> {
        errs.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn policy_types_and_protocols_default_from_the_rules() {
        let mut policy = json!({"metadata": {"name": "p"},
            "spec": {"podSelector": {"matchLabels": {"app": "db"}},
                     "ingress": [{"ports": [{"port": 5432}]}],
                     "egress": [{"to": [{"ipBlock": {"cidr": "10.0.0.0/8"}}]}]}});
        NetworkPolicyStrategy.prepare_for_create(&mut policy);
        assert_eq!(policy["spec"]["policyTypes"], json!(["Ingress", "Egress"]));
        assert_eq!(policy["spec"]["ingress"][0]["ports"][0]["protocol"], "TCP");
        assert!(NetworkPolicyStrategy.validate(&policy).is_empty());
        let mut deny = json!({"spec": {"podSelector": {}}});
        NetworkPolicyStrategy.prepare_for_create(&mut deny);
        assert_eq!(deny["spec"]["policyTypes"], json!(["Ingress"]));
    }

    #[test]
    fn bad_peers_ports_and_types_are_refused() {
        let policy = json!({"spec": {"podSelector": {},
            "ingress": [{"from": [{"ipBlock": {"cidr": "10.0.0.0/33"}}, {}],
                         "ports": [{"protocol": "ICMP", "port": 80}]}],
            "policyTypes": ["Ingress", "Sideways"]}});
        assert_eq!(
            errors(NetworkPolicyStrategy.validate(&policy)),
            [
                "spec.ingress[0].ports[0].protocol: Unsupported value: \"ICMP\": supported values: \"SCTP\", \"TCP\", \"UDP\"",
                "spec.ingress[0].from[0].ipBlock.cidr: Invalid value: \"10.0.0.0/33\": must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)",
                "spec.ingress[0].from[1]: Required value: must specify a peer",
                "spec.policyTypes[1]: Unsupported value: \"Sideways\": supported values: \"Egress\", \"Ingress\"",
            ]
        );
    }

    #[test]
    fn end_ports_named_ports_and_excepts_follow_upstreams_checks() {
        let policy = json!({"spec": {"podSelector": {},
            "ingress": [{"ports": [
                {"port": 90, "endPort": 80},
                {"port": "http", "endPort": 81},
                {"endPort": 82},
                {"port": "Not_A_Name"},
                {"port": 80, "endPort": 70000},
            ]}],
            "egress": [{"to": [{"ipBlock": {"cidr": "10.0.0.0/16",
                                            "except": ["10.0.1.0/24", "10.0.0.0/16", "192.168.0.0/24", "10.0.0.0/8"]}},
                               {"ipBlock": {"cidr": "10.1.2.3/8", "except": ["10.9.0.0/16"]}}]}]}});
        assert_eq!(
            errors(NetworkPolicyStrategy.validate(&policy)),
            [
                "spec.ingress[0].ports[0].endPort: Invalid value: 90: must be greater than or equal to `port`",
                "spec.ingress[0].ports[1].endPort: Invalid value: 81: may not be specified when `port` is non-numeric",
                "spec.ingress[0].ports[2].endPort: Invalid value: 82: may not be specified when `port` is not specified",
                "spec.ingress[0].ports[3].port: Invalid value: \"Not_A_Name\": must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)",
                "spec.ingress[0].ports[4].endPort: Invalid value: 70000: must be between 1 and 65535, inclusive",
                "spec.egress[0].to[0].ipBlock.except[1]: Invalid value: \"10.0.0.0/16\": must be a strict subset of `cidr`",
                "spec.egress[0].to[0].ipBlock.except[2]: Invalid value: \"192.168.0.0/24\": must be a strict subset of `cidr`",
                "spec.egress[0].to[0].ipBlock.except[3]: Invalid value: \"10.0.0.0/8\": must be a strict subset of `cidr`",
            ]
        );
        let ipv6 = json!({"spec": {"podSelector": {}, "ingress": [{"from": [{"ipBlock":
            {"cidr": "fd00::/8", "except": ["fd00:1::/32", "fe00::/16"]}}]}]}});
        assert_eq!(
            errors(NetworkPolicyStrategy.validate(&ipv6)),
            [
                "spec.ingress[0].from[0].ipBlock.except[1]: Invalid value: \"fe00::/16\": must be a strict subset of `cidr`"
            ]
        );
    }

    #[test]
    fn more_than_two_policy_types_is_the_only_error_about_them() {
        let policy =
            json!({"spec": {"podSelector": {}, "policyTypes": ["Ingress", "Egress", "Sideways"]}});
        assert_eq!(
            errors(NetworkPolicyStrategy.validate(&policy)),
            [
                "spec.policyTypes: Invalid value: [\"Ingress\",\"Egress\",\"Sideways\"]: may not specify more than two policyTypes"
            ]
        );
    }
}
