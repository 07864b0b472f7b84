//! Tables of core/v1 resources other than pods and events: nodes, namespaces, services,
//! endpoints, config maps, secrets, service accounts and resource quotas (upstream's
//! `printNode`, `printService`, `printEndpoints`, … and their column definitions).

use super::format::{host_port, labels, or_none};
use super::value::{age, flag, int, len, list, name, object, scalar, text};
use super::{AGE, Column, NAME, Printer};
use jiff::Timestamp;
use serde_json::Value;
use std::collections::BTreeSet;

pub(super) static NODES: Printer = Printer {
    columns: &[
        NAME,
        Column::new(
            "Status",
            "string",
            0,
            "Whether the node is Ready, and SchedulingDisabled when cordoned.",
        ),
        Column::new(
            "Roles",
            "string",
            0,
            "Roles from the node's node-role.kubernetes.io/ labels.",
        ),
        AGE,
        Column::new("Version", "string", 0, "Version of the node's kubelet."),
        Column::new(
            "Internal-IP",
            "string",
            1,
            "The node's first InternalIP address.",
        ),
        Column::new(
            "External-IP",
            "string",
            1,
            "The node's first ExternalIP address.",
        ),
        Column::new(
            "OS-Image",
            "string",
            1,
            "Operating system image the node reports.",
        ),
        Column::new(
            "Kernel-Version",
            "string",
            1,
            "Kernel version the node reports.",
        ),
        Column::new(
            "Container-Runtime",
            "string",
            1,
            "Container runtime and version the node reports.",
        ),
    ],
    cells: node_cells,
};

fn node_cells(node: &Value, now: Timestamp) -> Vec<Value> {
    // Only the Ready condition counts; a later duplicate wins, as in upstream's map.
    let ready = list(node, "/status/conditions")
        .iter()
        .rfind(|c| text(c, "/type") == "Ready");
    let mut status = vec![match ready {
        Some(c) if text(c, "/status") == "True" => "Ready",
        Some(_) => "NotReady",
        None => "Unknown",
    }];
    if flag(node, "/spec/unschedulable") {
        status.push("SchedulingDisabled");
    }

    let mut roles = BTreeSet::new();
    for (key, value) in object(node, "/metadata/labels").into_iter().flatten() {
        if let Some(role) = key.strip_prefix("node-role.kubernetes.io/") {
            if !role.is_empty() {
                roles.insert(role);
            }
        } else if key == "kubernetes.io/role"
            && let Some(role) = value.as_str().filter(|r| !r.is_empty())
        {
            roles.insert(role);
        }
    }
    let roles = or_none(roles.into_iter().collect::<Vec<_>>().join(","));

    let address = |type_: &str| {
        list(node, "/status/addresses")
            .iter()
            .find(|a| text(a, "/type") == type_)
            .map_or("<none>", |a| text(a, "/address"))
    };
    let info = |field: &str| match text(node, &format!("/status/nodeInfo/{field}")) {
        "" => "<unknown>",
        s => s,
    };
    vec![
        name(node).into(),
        status.join(",").into(),
        roles.into(),
        age(node, now),
        text(node, "/status/nodeInfo/kubeletVersion").into(),
        address("InternalIP").into(),
        address("ExternalIP").into(),
        info("osImage").into(),
        info("kernelVersion").into(),
        info("containerRuntimeVersion").into(),
    ]
}

pub(super) static NAMESPACES: Printer = Printer {
    columns: &[
        NAME,
        Column::new(
            "Status",
            "string",
            0,
            "The namespace's phase: Active or Terminating.",
        ),
        AGE,
    ],
    cells: |ns, now| {
        // SetDefaults_NamespaceStatus: an empty phase decodes as Active.
        let phase = match text(ns, "/status/phase") {
            "" => "Active",
            p => p,
        };
        vec![name(ns).into(), phase.into(), age(ns, now)]
    },
};

pub(super) static SERVICES: Printer = Printer {
    columns: &[
        NAME,
        Column::new(
            "Type",
            "string",
            0,
            "ClusterIP, NodePort, LoadBalancer or ExternalName.",
        ),
        Column::new("Cluster-IP", "string", 0, "The service's first cluster IP."),
        Column::new(
            "External-IP",
            "string",
            0,
            "External IPs and load-balancer ingress points, or the external name.",
        ),
        Column::new(
            "Port(s)",
            "string",
            0,
            "Service ports as port[:nodePort]/protocol.",
        ),
        AGE,
        Column::new(
            "Selector",
            "string",
            1,
            "Labels of the pods the service targets.",
        ),
    ],
    cells: service_cells,
};

fn service_cells(svc: &Value, now: Timestamp) -> Vec<Value> {
    // The decoder defaults `type` to ClusterIP and `protocol` to TCP.
    let type_ = match text(svc, "/spec/type") {
        "" => "ClusterIP",
        t => t,
    };
    // v1 → internal conversion makes `clusterIP` authoritative over `clusterIPs`.
    let cluster_ip = match (text(svc, "/spec/clusterIP"), list(svc, "/spec/clusterIPs")) {
        ("", []) => "<none>",
        ("", ips) => ips[0].as_str().unwrap_or(""),
        (ip, _) => ip,
    };
    let ports: Vec<String> = list(svc, "/spec/ports")
        .iter()
        .map(|p| {
            let protocol = match text(p, "/protocol") {
                "" => "TCP",
                proto => proto,
            };
            match int(p, "/nodePort") {
                np if np > 0 => format!("{}:{np}/{protocol}", int(p, "/port")),
                _ => format!("{}/{protocol}", int(p, "/port")),
            }
        })
        .collect();
    vec![
        name(svc).into(),
        type_.into(),
        cluster_ip.into(),
        external_ip(svc, type_).into(),
        or_none(ports.join(",")).into(),
        age(svc, now),
        labels(object(svc, "/spec/selector")).into(),
    ]
}

/// Upstream's `getServiceExternalIP` as the API server calls it (wide, so never clipped).
fn external_ip(svc: &Value, type_: &str) -> String {
    let external: Vec<&str> = list(svc, "/spec/externalIPs")
        .iter()
        .map(|ip| ip.as_str().unwrap_or(""))
        .collect();
    match type_ {
        "ClusterIP" | "NodePort" => or_none(external.join(",")),
        "LoadBalancer" => {
            let ingress: BTreeSet<&str> = list(svc, "/status/loadBalancer/ingress")
                .iter()
                .filter_map(|i| match (text(i, "/ip"), text(i, "/hostname")) {
                    ("", "") => None,
                    ("", host) => Some(host),
                    (ip, _) => Some(ip),
                })
                .collect();
            let all: Vec<&str> = ingress.into_iter().chain(external).collect();
            if all.is_empty() {
                "<pending>".to_string()
            } else {
                all.join(",")
            }
        }
        "ExternalName" => text(svc, "/spec/externalName").to_string(),
        _ => "<unknown>".to_string(),
    }
}

pub(super) static ENDPOINTS: Printer = Printer {
    columns: &[
        NAME,
        Column::new(
            "Endpoints",
            "string",
            0,
            "The first endpoints as ip:port, and how many more there are.",
        ),
        AGE,
    ],
    cells: |ep, now| vec![name(ep).into(), endpoints(ep).into(), age(ep, now)],
};

/// Upstream's `formatEndpoints` with every port: at most three `ip:port`, then `+ N more...`.
fn endpoints(ep: &Value) -> String {
    const MAX: usize = 3;
    let subsets = list(ep, "/subsets");
    if subsets.is_empty() {
        return "<none>".to_string();
    }
    let mut shown = Vec::new();
    let mut count = 0;
    let mut more = false;
    for subset in subsets {
        let addresses = list(subset, "/addresses");
        let ports = list(subset, "/ports");
        // Headless services may have addresses without ports.
        let ports: Vec<Option<i64>> = if ports.is_empty() {
            vec![None]
        } else {
            ports.iter().map(|p| Some(int(p, "/port"))).collect()
        };
        for port in ports {
            count += addresses.len();
            for address in addresses {
                if shown.len() == MAX {
                    more = true;
                    break;
                }
                let ip = text(address, "/ip");
                shown.push(port.map_or_else(|| ip.to_string(), |p| host_port(ip, p)));
            }
        }
    }
    let joined = shown.join(",");
    if more {
        format!("{joined} + {} more...", count - MAX)
    } else {
        joined
    }
}

pub(super) static CONFIG_MAPS: Printer = Printer {
    columns: &[
        NAME,
        Column::new(
            "Data",
            "string",
            0,
            "Number of keys in data and binaryData.",
        ),
        AGE,
    ],
    cells: |cm, now| {
        let keys = len(cm, "/data") + len(cm, "/binaryData");
        vec![name(cm).into(), (keys as i64).into(), age(cm, now)]
    },
};

pub(super) static SECRETS: Printer = Printer {
    columns: &[
        NAME,
        Column::new("Type", "string", 0, "The secret's type."),
        Column::new("Data", "string", 0, "Number of keys in data."),
        AGE,
    ],
    cells: |secret, now| {
        // Decoding merges stringData into data and defaults the type to Opaque.
        let mut keys: BTreeSet<&str> = BTreeSet::new();
        for field in ["/data", "/stringData"] {
            keys.extend(
                object(secret, field)
                    .into_iter()
                    .flatten()
                    .map(|(k, _)| k.as_str()),
            );
        }
        let type_ = match text(secret, "/type") {
            "" => "Opaque",
            t => t,
        };
        vec![
            name(secret).into(),
            type_.into(),
            (keys.len() as i64).into(),
            age(secret, now),
        ]
    },
};

pub(super) static SERVICE_ACCOUNTS: Printer = Printer {
    columns: &[
        NAME,
        Column::new(
            "Secrets",
            "string",
            0,
            "Number of secrets listed in secrets.",
        ),
        AGE,
    ],
    cells: |sa, now| {
        let secrets = list(sa, "/secrets").len() as i64;
        vec![name(sa).into(), secrets.into(), age(sa, now)]
    },
};

pub(super) static RESOURCE_QUOTAS: Printer = Printer {
    columns: &[
        NAME,
        Column::new(
            "Request",
            "string",
            0,
            "Used and hard amounts of every quota not on limits.*, as name: used/hard.",
        ),
        Column::new(
            "Limit",
            "string",
            0,
            "Used and hard amounts of the limits.* quotas, as name: used/hard.",
        ),
        AGE,
    ],
    cells: |quota, now| {
        let mut request = Vec::new();
        let mut limit = Vec::new();
        let mut hard: Vec<_> = object(quota, "/status/hard")
            .into_iter()
            .flatten()
            .collect();
        hard.sort_by(|a, b| a.0.cmp(b.0));
        for (resource, amount) in hard {
            let used = object(quota, "/status/used").and_then(|u| scalar(u.get(resource)));
            let cell = format!(
                "{resource}: {}/{}",
                used.unwrap_or_else(|| "0".to_string()),
                scalar(Some(amount)).unwrap_or_else(|| "0".to_string())
            );
            let is_limit = matches!(resource.split_once('.'), Some(("limits", _)));
            if is_limit { &mut limit } else { &mut request }.push(cell);
        }
        vec![
            name(quota).into(),
            request.join(", ").into(),
            limit.join(", ").into(),
            age(quota, now),
        ]
    },
};

#[cfg(test)]
#[path = "core_tests.rs"]
mod tests;
