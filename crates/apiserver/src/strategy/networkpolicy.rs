//! NetworkPolicies (`networking.k8s.io/v1`): upstream's defaults (`policyTypes` from the rules
//! present, port protocol `TCP`) and `ValidateNetworkPolicySpec` (selectors, known policy
//! types, port protocols and ranges, peers with one of their fields, IP blocks with CIDRs).

use serde_json::{Value, json};
use skiff_apimachinery::validation::{FieldError, FieldPath, validate_label_selector};

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
        if let Some(number) = port.get("port").and_then(int)
            && !(1..=65535).contains(&number)
        {
            errs.push(FieldError::invalid(
                &p.child("port"),
                number,
                "must be between 1 and 65535, inclusive",
            ));
        }
        if let Some(end) = port.get("endPort").and_then(int) {
            let start = port.get("port").and_then(int);
            match start {
                None => errs.push(FieldError::required(
                    &p.child("port"),
                    "must specify port when endPort is specified",
                )),
                Some(start) if end < start => errs.push(FieldError::invalid(
                    &p.child("endPort"),
                    end,
                    "must be greater than or equal to `port`",
                )),
                _ => {}
            }
        }
    }
    errs
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
            if !valid_cidr(except) {
                errs.push(FieldError::invalid(
                    &p.child("except").index(i),
                    except,
                    "must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)",
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
        for (i, t) in types.iter().enumerate() {
            if !POLICY_TYPES.contains(t) {
                errs.push(FieldError::not_supported(
                    &path.child("policyTypes").index(i),
                    *t,
                    POLICY_TYPES,
                ));
            }
        }
        if types.len() > 2 {
            errs.push(FieldError::invalid(
                &path.child("policyTypes"),
                spec.get("policyTypes").cloned().unwrap_or(null),
                "may not specify more than two policyTypes",
            ));
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
}
