//! Table tests of the Service strategy.

use super::*;

fn service(spec: Value) -> Value {
    json!({"metadata": {"name": "web", "namespace": "default"}, "spec": spec})
}

fn created(spec: Value) -> Value {
    let mut svc = service(spec);
    ServiceStrategy.prepare_for_create(&mut svc);
    svc
}

fn errors(errs: Vec<FieldError>) -> Vec<String> {
    errs.iter().map(ToString::to_string).collect()
}

#[test]
fn a_new_cluster_ip_service_gets_upstreams_defaults() {
    let svc = created(json!({"selector": {"app": "web"}, "ports": [{"port": 80}]}));
    let spec = &svc["spec"];
    assert_eq!(spec["type"], "ClusterIP");
    assert_eq!(spec["sessionAffinity"], "None");
    assert_eq!(spec["internalTrafficPolicy"], "Cluster");
    assert_eq!(spec["ipFamilies"], json!(["IPv4"]));
    assert_eq!(spec["ipFamilyPolicy"], "SingleStack");
    assert_eq!(
        spec["ports"][0],
        json!({"port": 80, "protocol": "TCP", "targetPort": 80})
    );
    assert!(spec.get("externalTrafficPolicy").is_none());
    assert_eq!(svc["status"], json!({"loadBalancer": {}}));
    assert!(ServiceStrategy.validate(&svc).is_empty());
}

#[test]
fn defaults_follow_the_type() {
    let node_port =
        created(json!({"type": "NodePort", "ports": [{"port": 80, "targetPort": "http"}]}));
    assert_eq!(node_port["spec"]["externalTrafficPolicy"], "Cluster");
    assert_eq!(node_port["spec"]["ports"][0]["targetPort"], "http");
    let lb = created(json!({"type": "LoadBalancer", "ports": [{"port": 80}]}));
    assert_eq!(lb["spec"]["allocateLoadBalancerNodePorts"], true);
    let affinity = created(json!({"sessionAffinity": "ClientIP", "ports": [{"port": 80}]}));
    assert_eq!(
        affinity["spec"]["sessionAffinityConfig"],
        json!({"clientIP": {"timeoutSeconds": 10800}})
    );
    let headless = created(json!({"clusterIP": "None"}));
    assert_eq!(headless["spec"]["clusterIPs"], json!(["None"]));
    assert_eq!(headless["spec"]["ipFamilyPolicy"], "RequireDualStack");
    assert!(ServiceStrategy.validate(&headless).is_empty());
    let external = created(json!({"type": "ExternalName", "externalName": "db.example.com"}));
    assert!(external["spec"].get("ipFamilies").is_none());
    assert!(external["spec"].get("internalTrafficPolicy").is_none());
    assert!(ServiceStrategy.validate(&external).is_empty());
}

#[test]
fn invalid_services_are_refused_with_upstreams_messages() {
    let cases: Vec<(&str, Value, Vec<&str>)> = vec![
        ("no ports", json!({}), vec!["spec.ports: Required value"]),
        (
            "unnamed ports among several",
            json!({"ports": [{"port": 80}, {"name": "b", "port": 81}]}),
            vec!["spec.ports[0].name: Required value"],
        ),
        (
            "duplicate port names",
            json!({"ports": [{"name": "a", "port": 80}, {"name": "a", "port": 81}]}),
            vec!["spec.ports[1].name: Duplicate value: \"a\""],
        ),
        (
            "a port out of range",
            json!({"ports": [{"port": 70000, "targetPort": 80}]}),
            vec![
                "spec.ports[0].port: Invalid value: 70000: must be between 1 and 65535, inclusive",
            ],
        ),
        (
            "an unknown protocol",
            json!({"ports": [{"port": 80, "protocol": "HTTP"}]}),
            vec![
                "spec.ports[0].protocol: Unsupported value: \"HTTP\": supported values: \"SCTP\", \"TCP\", \"UDP\"",
            ],
        ),
        (
            "a nodePort on a ClusterIP service",
            json!({"ports": [{"port": 80, "nodePort": 30080}]}),
            vec!["spec.ports[0].nodePort: Forbidden: may not be used when `type` is 'ClusterIP'"],
        ),
        (
            "the same port twice",
            json!({"ports": [{"name": "a", "port": 80}, {"name": "b", "port": 80}]}),
            vec!["spec.ports[1]: Duplicate value: {\"port\":80,\"protocol\":\"TCP\"}"],
        ),
        (
            "an unknown type",
            json!({"type": "Magic", "ports": [{"port": 80}]}),
            vec![
                "spec.type: Unsupported value: \"Magic\": supported values: \"ClusterIP\", \"ExternalName\", \"LoadBalancer\", \"NodePort\"",
            ],
        ),
        (
            "an ExternalName without a name",
            json!({"type": "ExternalName"}),
            vec!["spec.externalName: Required value"],
        ),
        (
            "an IPv6 family on this IPv4 cluster",
            json!({"ipFamilies": ["IPv6"], "ports": [{"port": 80}]}),
            vec!["spec.ipFamilies[0]: Invalid value: \"IPv6\": not configured on this cluster"],
        ),
        (
            "a loopback external IP",
            json!({"externalIPs": ["127.0.0.1"], "ports": [{"port": 80}]}),
            vec![
                "spec.externalIPs[0]: Invalid value: \"127.0.0.1\": may not be in the loopback range (127.0.0.0/8, ::1/128)",
            ],
        ),
        (
            "a headless NodePort",
            json!({"type": "NodePort", "clusterIP": "None", "ports": [{"port": 80}]}),
            vec![
                "spec.clusterIPs[0]: Invalid value: \"None\": may not be set to 'None' for NodePort services",
            ],
        ),
    ];
    for (name, spec, want) in cases {
        let svc = created(spec);
        assert_eq!(errors(ServiceStrategy.validate(&svc)), want, "{name}");
    }
}

#[test]
fn names_must_be_dns_1035_labels() {
    let mut svc = created(json!({"ports": [{"port": 80}]}));
    svc["metadata"]["name"] = json!("1web");
    let errs = errors(ServiceStrategy.validate(&svc));
    assert_eq!(errs.len(), 1);
    assert!(
        errs[0].starts_with("metadata.name: Invalid value: \"1web\": a DNS-1035 label"),
        "{errs:?}"
    );
}

#[test]
fn the_primary_cluster_ip_may_not_change_except_through_external_name() {
    let mut old = created(json!({"clusterIP": "10.43.0.10", "ports": [{"port": 80}]}));
    old["spec"]["clusterIPs"] = json!(["10.43.0.10"]);
    let mut moved = old.clone();
    moved["spec"]["clusterIP"] = json!("10.43.0.11");
    ServiceStrategy.prepare_for_update(&mut moved, &old);
    assert_eq!(
        errors(ServiceStrategy.validate_update(&moved, &old)),
        vec!["spec.clusterIPs[0]: Invalid value: [\"10.43.0.11\"]: may not change once set"]
    );
    let mut external = old.clone();
    external["spec"]["type"] = json!("ExternalName");
    external["spec"]["externalName"] = json!("db.example.com");
    ServiceStrategy.prepare_for_update(&mut external, &old);
    assert!(external["spec"].get("clusterIP").is_none());
    assert!(external["spec"].get("ipFamilies").is_none());
    assert!(ServiceStrategy.validate_update(&external, &old).is_empty());
}

#[test]
fn an_update_that_omits_allocated_values_keeps_them() {
    let mut old = created(json!({"type": "NodePort", "clusterIP": "10.43.0.10",
                                 "ports": [{"name": "http", "port": 80, "nodePort": 30080}]}));
    old["spec"]["clusterIPs"] = json!(["10.43.0.10"]);
    let mut new = service(json!({"type": "NodePort", "ports": [{"name": "http", "port": 80}]}));
    ServiceStrategy.prepare_for_update(&mut new, &old);
    assert_eq!(new["spec"]["clusterIP"], "10.43.0.10");
    assert_eq!(new["spec"]["clusterIPs"], json!(["10.43.0.10"]));
    assert_eq!(new["spec"]["ports"][0]["nodePort"], 30080);
    assert_eq!(new["spec"], old["spec"]);
    let mut cluster_ip = old.clone();
    cluster_ip["spec"]["type"] = json!("ClusterIP");
    ServiceStrategy.prepare_for_update(&mut cluster_ip, &old);
    assert!(cluster_ip["spec"]["ports"][0].get("nodePort").is_none());
    assert!(cluster_ip["spec"].get("externalTrafficPolicy").is_none());
    assert!(
        ServiceStrategy
            .validate_update(&cluster_ip, &old)
            .is_empty()
    );
}

#[test]
fn the_field_set_is_cluster_ip_and_type() {
    let svc = created(json!({"clusterIP": "None"}));
    assert_eq!(
        ServiceStrategy.fields(&svc),
        vec![
            ("spec.clusterIP", "None".to_string()),
            ("spec.type", "ClusterIP".to_string())
        ]
    );
}

#[test]
fn a_load_balancers_class_may_not_change_while_it_stays_one() {
    let old = created(json!({"type": "LoadBalancer", "ports": [{"port": 80}]}));
    let mut classed = old.clone();
    classed["spec"]["loadBalancerClass"] = json!("example.com/lb");
    assert_eq!(
        errors(ServiceStrategy.validate_update(&classed, &old)),
        vec!["spec.loadBalancerClass: Invalid value: \"example.com/lb\": may not change once set"]
    );
    // through another type, as upstream allows
    let mut cluster_ip = old.clone();
    cluster_ip["spec"]["type"] = json!("ClusterIP");
    assert!(
        checks::validate_load_balancer_class_unchanged(&cluster_ip, &old).is_empty()
            && checks::validate_load_balancer_class_unchanged(&classed, &cluster_ip).is_empty()
    );
}

#[test]
fn only_a_load_balancer_has_a_class_and_it_is_a_qualified_name() {
    let mut cluster_ip = created(json!({"ports": [{"port": 80}]}));
    cluster_ip["spec"]["loadBalancerClass"] = json!("example.com/lb");
    assert_eq!(
        errors(ServiceStrategy.validate(&cluster_ip)),
        vec!["spec.loadBalancerClass: Forbidden: may only be used when `type` is 'LoadBalancer'"]
    );
    let mut bad = created(json!({"type": "LoadBalancer", "ports": [{"port": 80}]}));
    bad["spec"]["loadBalancerClass"] = json!("-bad/lb");
    let errs = errors(ServiceStrategy.validate(&bad));
    assert_eq!(errs.len(), 1, "{errs:?}");
    assert!(
        errs[0].starts_with("spec.loadBalancerClass: Invalid value: \"-bad/lb\": "),
        "{errs:?}"
    );
    bad["spec"]["loadBalancerClass"] = json!("example.com/lb");
    assert!(ServiceStrategy.validate(&bad).is_empty());
}

#[test]
fn a_load_balancers_addresses_default_to_vip_mode() {
    let old = created(json!({"type": "LoadBalancer", "ports": [{"port": 80}]}));
    let mut status = old.clone();
    status["status"] = json!({"loadBalancer": {"ingress": [
        {"ip": "10.0.0.1"},
        {"ip": "10.0.0.2", "ipMode": "Proxy"},
        {"hostname": "lb.example.com"},
    ]}});
    ServiceStrategy.prepare_for_update(&mut status, &old);
    assert_eq!(
        status["status"]["loadBalancer"]["ingress"],
        json!([
            {"ip": "10.0.0.1", "ipMode": "VIP"},
            {"ip": "10.0.0.2", "ipMode": "Proxy"},
            {"hostname": "lb.example.com"},
        ])
    );
}
