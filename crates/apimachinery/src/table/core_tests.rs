//! Unit tests of the core/v1 tables: representative objects and the cells upstream prints.

use super::*;
use serde_json::{Value, json};

fn now() -> Timestamp {
    "2024-05-01T12:00:00Z".parse().unwrap()
}

fn meta(name: &str) -> Value {
    json!({"name": name, "creationTimestamp": "2024-04-28T09:00:00Z"})
}

fn strings(cells: &[&str]) -> Vec<Value> {
    cells.iter().map(|s| json!(s)).collect()
}

#[test]
fn nodes_show_readiness_cordon_roles_version_and_system_info() {
    let node = json!({
        "metadata": {"name": "n1", "creationTimestamp": "2024-04-28T09:00:00Z", "labels": {
            "node-role.kubernetes.io/worker": "", "node-role.kubernetes.io/control-plane": "",
            "node-role.kubernetes.io/": "", "kubernetes.io/role": "edge"}},
        "spec": {"unschedulable": true},
        "status": {
            "conditions": [{"type": "MemoryPressure", "status": "False"},
                           {"type": "Ready", "status": "True"}],
            "addresses": [{"type": "Hostname", "address": "n1"},
                          {"type": "InternalIP", "address": "10.0.0.1"},
                          {"type": "InternalIP", "address": "10.0.0.2"}],
            "nodeInfo": {"kubeletVersion": "v1.33.0", "osImage": "Debian GNU/Linux 12",
                         "kernelVersion": "6.1.0", "containerRuntimeVersion": "containerd://1.7.0"}
        }
    });
    assert_eq!(
        (NODES.cells)(&node, now()),
        strings(&[
            "n1",
            "Ready,SchedulingDisabled",
            "control-plane,edge,worker",
            "3d3h",
            "v1.33.0",
            "10.0.0.1",
            "<none>",
            "Debian GNU/Linux 12",
            "6.1.0",
            "containerd://1.7.0"
        ])
    );
}

#[test]
fn nodes_without_a_ready_condition_are_unknown() {
    let not_ready = json!({"metadata": meta("n"), "status": {"conditions": [
        {"type": "Ready", "status": "Unknown"}]}});
    assert_eq!(
        (NODES.cells)(&not_ready, now())[1..3],
        strings(&["NotReady", "<none>"])
    );
    let bare = json!({"metadata": meta("n")});
    assert_eq!(
        (NODES.cells)(&bare, now())[1..],
        strings(&[
            "Unknown",
            "<none>",
            "3d3h",
            "",
            "<none>",
            "<none>",
            "<unknown>",
            "<unknown>",
            "<unknown>"
        ])
    );
}

#[test]
fn namespaces_show_their_phase() {
    let ns = json!({"metadata": meta("kube-system"), "status": {"phase": "Terminating"}});
    assert_eq!(
        (NAMESPACES.cells)(&ns, now()),
        strings(&["kube-system", "Terminating", "3d3h"])
    );
    let fresh = json!({"metadata": meta("x")});
    assert_eq!((NAMESPACES.cells)(&fresh, now())[1], json!("Active"));
}

#[test]
fn services_show_type_ips_and_ports_as_kubectl_does() {
    let cases = [
        (
            json!({"type": "ClusterIP", "clusterIP": "10.96.0.10", "clusterIPs": ["10.96.0.10"],
                "ports": [{"port": 53, "protocol": "UDP"}, {"port": 53, "protocol": "TCP"}],
                "selector": {"k8s-app": "kube-dns"}}),
            json!({}),
            [
                "ClusterIP",
                "10.96.0.10",
                "<none>",
                "53/UDP,53/TCP",
                "k8s-app=kube-dns",
            ],
        ),
        (
            json!({"type": "NodePort", "clusterIP": "10.96.1.1", "externalIPs": ["1.2.3.4"],
                "ports": [{"port": 80, "nodePort": 30080}]}),
            json!({}),
            ["NodePort", "10.96.1.1", "1.2.3.4", "80:30080/TCP", "<none>"],
        ),
        (
            json!({"type": "LoadBalancer", "clusterIPs": ["10.96.2.2"],
                "ports": [{"port": 443, "nodePort": 31443, "protocol": "TCP"}]}),
            json!({}),
            [
                "LoadBalancer",
                "10.96.2.2",
                "<pending>",
                "443:31443/TCP",
                "<none>",
            ],
        ),
        (
            json!({"type": "LoadBalancer", "clusterIP": "10.96.2.3", "externalIPs": ["9.9.9.9"]}),
            json!({"loadBalancer": {"ingress": [{"hostname": "lb.example.com"},
                {"ip": "5.6.7.8", "hostname": "ignored"}, {"ip": "5.6.7.8"}]}}),
            [
                "LoadBalancer",
                "10.96.2.3",
                "5.6.7.8,lb.example.com,9.9.9.9",
                "<none>",
                "<none>",
            ],
        ),
        (
            json!({"type": "ExternalName", "externalName": "db.example.com"}),
            json!({}),
            [
                "ExternalName",
                "<none>",
                "db.example.com",
                "<none>",
                "<none>",
            ],
        ),
        (
            json!({"clusterIP": "None", "ports": [{"port": 5432}]}),
            json!({}),
            ["ClusterIP", "None", "<none>", "5432/TCP", "<none>"],
        ),
        (
            json!({"type": "Weird"}),
            json!({}),
            ["Weird", "<none>", "<unknown>", "<none>", "<none>"],
        ),
    ];
    for (spec, status, want) in cases {
        let svc = json!({"metadata": meta("s"), "spec": spec, "status": status});
        let cells = (SERVICES.cells)(&svc, now());
        let [t, ip, ext, ports, sel] = want;
        assert_eq!(
            cells,
            strings(&["s", t, ip, ext, ports, "3d3h", sel]),
            "{t}"
        );
    }
}

#[test]
fn endpoints_list_three_addresses_then_count_the_rest() {
    let ep = |subsets: Value| json!({"metadata": meta("e"), "subsets": subsets});
    let cases = [
        (json!([]), "<none>"),
        (json!([{}]), ""),
        (
            json!([{"addresses": [{"ip": "10.0.0.1"}, {"ip": "fd00::2"}],
                "ports": [{"port": 80, "name": "http"}]}]),
            "10.0.0.1:80,[fd00::2]:80",
        ),
        (
            json!([{"addresses": [{"ip": "10.0.0.1"}, {"ip": "10.0.0.2"}]}]),
            "10.0.0.1,10.0.0.2",
        ),
        (
            json!([{"addresses": [{"ip": "10.0.0.1"}, {"ip": "10.0.0.2"}],
                "ports": [{"port": 80}, {"port": 443}]},
                {"addresses": [{"ip": "10.0.1.1"}], "ports": [{"port": 8080}]}]),
            "10.0.0.1:80,10.0.0.2:80,10.0.0.1:443 + 2 more...",
        ),
        (
            json!([{"addresses": [{"ip": "a"}, {"ip": "b"}, {"ip": "c"}], "ports": [{"port": 1}]}]),
            "a:1,b:1,c:1",
        ),
    ];
    for (subsets, want) in cases {
        assert_eq!(
            (ENDPOINTS.cells)(&ep(subsets), now()),
            strings(&["e", want, "3d3h"])
        );
    }
}

#[test]
fn config_maps_secrets_and_service_accounts_count_their_entries() {
    let cm =
        json!({"metadata": meta("cm"), "data": {"a": "1", "b": "2"}, "binaryData": {"c": "AA=="}});
    assert_eq!(
        (CONFIG_MAPS.cells)(&cm, now()),
        [json!("cm"), json!(3), json!("3d3h")]
    );

    let secret = json!({"metadata": meta("tls"), "type": "kubernetes.io/tls",
        "data": {"tls.crt": "", "tls.key": ""}, "stringData": {"tls.key": "x", "ca.crt": "y"}});
    assert_eq!(
        (SECRETS.cells)(&secret, now()),
        [
            json!("tls"),
            json!("kubernetes.io/tls"),
            json!(3),
            json!("3d3h")
        ]
    );
    let opaque = json!({"metadata": meta("o")});
    assert_eq!(
        (SECRETS.cells)(&opaque, now())[1..3],
        [json!("Opaque"), json!(0)]
    );

    let sa = json!({"metadata": meta("default"), "secrets": [{"name": "t"}]});
    assert_eq!(
        (SERVICE_ACCOUNTS.cells)(&sa, now()),
        [json!("default"), json!(1), json!("3d3h")]
    );
}

#[test]
fn resource_quotas_split_requests_from_limits_sorted_by_resource() {
    let quota = json!({"metadata": meta("q"), "status": {
        "hard": {"pods": "10", "requests.cpu": "2", "limits.memory": "2Gi", "limits.cpu": "4",
                 "limitsx": "1"},
        "used": {"pods": "3", "requests.cpu": "500m", "limits.cpu": "1"}}});
    assert_eq!(
        (RESOURCE_QUOTAS.cells)(&quota, now()),
        strings(&[
            "q",
            "limitsx: 0/1, pods: 3/10, requests.cpu: 500m/2",
            "limits.cpu: 1/4, limits.memory: 0/2Gi",
            "3d3h"
        ])
    );
    let empty = json!({"metadata": meta("e")});
    assert_eq!(
        (RESOURCE_QUOTAS.cells)(&empty, now()),
        strings(&["e", "", "", "3d3h"])
    );
}

#[test]
fn core_columns_match_upstream_names_and_priorities() {
    let shape = |p: &Printer| -> Vec<(&str, i32)> {
        p.columns.iter().map(|c| (c.name, c.priority)).collect()
    };
    assert_eq!(
        shape(&NODES),
        [
            ("Name", 0),
            ("Status", 0),
            ("Roles", 0),
            ("Age", 0),
            ("Version", 0),
            ("Internal-IP", 1),
            ("External-IP", 1),
            ("OS-Image", 1),
            ("Kernel-Version", 1),
            ("Container-Runtime", 1)
        ]
    );
    assert_eq!(
        shape(&SERVICES),
        [
            ("Name", 0),
            ("Type", 0),
            ("Cluster-IP", 0),
            ("External-IP", 0),
            ("Port(s)", 0),
            ("Age", 0),
            ("Selector", 1)
        ]
    );
    assert_eq!(
        shape(&RESOURCE_QUOTAS),
        [("Name", 0), ("Request", 0), ("Limit", 0), ("Age", 0)]
    );
    assert_eq!(
        shape(&SECRETS),
        [("Name", 0), ("Type", 0), ("Data", 0), ("Age", 0)]
    );
}
