//! The configuration build: classes, backends resolved to ready endpoints, TLS problems.

use super::*;
use serde_json::{Value, json};

fn from<K: serde::de::DeserializeOwned>(v: Value) -> Arc<K> {
    Arc::new(serde_json::from_value(v).unwrap())
}

fn class(name: &str, controller: &str, default: bool) -> Arc<IngressClass> {
    from(json!({
        "metadata": {"name": name,
                     "annotations": {DEFAULT_CLASS_ANNOTATION: default.to_string()}},
        "spec": {"controller": controller},
    }))
}

fn ingress(name: &str, created: &str, spec: Value) -> Arc<Ingress> {
    from(json!({
        "metadata": {"name": name, "namespace": "default", "uid": format!("uid-{name}"),
                     "creationTimestamp": created},
        "spec": spec,
    }))
}

fn service(name: &str, ports: Value) -> Arc<Service> {
    from(json!({"metadata": {"name": name, "namespace": "default"}, "spec": {"ports": ports}}))
}

fn slice(
    service: &str,
    port: (&str, u16),
    endpoints: &[(&str, Option<bool>)],
) -> Arc<EndpointSlice> {
    let endpoints: Vec<Value> = endpoints
        .iter()
        .map(|(ip, ready)| json!({"addresses": [ip], "conditions": {"ready": ready}}))
        .collect();
    from(json!({
        "metadata": {"name": format!("{service}-abc"), "namespace": "default",
                     "labels": {SERVICE_NAME_LABEL: service}},
        "addressType": "IPv4",
        "ports": [{"name": port.0, "port": port.1, "protocol": "TCP"}],
        "endpoints": endpoints,
    }))
}

fn rule(host: &str, path: &str, service: &str, port: Value) -> Value {
    json!({"host": host, "http": {"paths": [
        {"path": path, "pathType": "Prefix",
         "backend": {"service": {"name": service, "port": port}}}]}})
}

fn routed(config: &Config, host: &str, path: &str) -> Option<(String, Vec<String>)> {
    let backend = config.table.route(host, path)?;
    let endpoints = backend.endpoints.iter().map(ToString::to_string).collect();
    Some((backend.name.clone(), endpoints))
}

fn web_snapshot(ingresses: Vec<Arc<Ingress>>) -> Snapshot {
    Snapshot {
        ingresses,
        classes: vec![
            class(CLASS, CONTROLLER, true),
            class("other", "example.com/x", false),
        ],
        services: vec![service(
            "web",
            json!([{"name": "http", "port": 80, "targetPort": 8080}]),
        )],
        slices: vec![slice(
            "web",
            ("http", 8080),
            &[
                ("10.42.0.5", Some(true)),
                ("10.42.0.6", None),
                ("10.42.0.7", Some(false)),
            ],
        )],
        secrets: vec![],
    }
}

#[test]
fn ingresses_of_our_class_or_without_one_are_served_when_ours_is_the_default() {
    let spec = |class: Option<&str>| {
        let mut s = json!({"rules": [rule("a.com", "/", "web", json!({"number": 80}))]});
        if let Some(class) = class {
            s["ingressClassName"] = json!(class);
        }
        s
    };
    let snapshot = web_snapshot(vec![
        ingress("ours", "2024-01-01T00:00:00Z", spec(Some(CLASS))),
        ingress("classless", "2024-01-01T00:00:00Z", spec(None)),
        ingress("theirs", "2024-01-01T00:00:00Z", spec(Some("other"))),
        ingress("unknown", "2024-01-01T00:00:00Z", spec(Some("nope"))),
    ]);
    let served: Vec<String> = Config::build(&snapshot)
        .served
        .into_iter()
        .map(|r| r.name)
        .collect();
    assert_eq!(served, ["classless", "ours"]);

    let mut snapshot = snapshot;
    snapshot.classes = vec![class(CLASS, CONTROLLER, false)];
    let served: Vec<String> = Config::build(&snapshot)
        .served
        .into_iter()
        .map(|r| r.name)
        .collect();
    assert_eq!(
        served,
        ["ours"],
        "no default class: class-less Ingresses are not ours"
    );
}

#[test]
fn backends_resolve_by_port_number_or_name_to_ready_endpoints_only() {
    for port in [json!({"number": 80}), json!({"name": "http"})] {
        let snapshot = web_snapshot(vec![ingress(
            "i",
            "2024-01-01T00:00:00Z",
            json!({"rules": [rule("a.com", "/", "web", port.clone())]}),
        )]);
        let config = Config::build(&snapshot);
        let (_, endpoints) = routed(&config, "a.com", "/x").unwrap();
        assert_eq!(endpoints, ["10.42.0.5:8080", "10.42.0.6:8080"], "{port}");
    }
}

#[test]
fn a_service_port_with_the_h2c_app_protocol_makes_an_h2c_backend() {
    let mut snapshot = web_snapshot(vec![ingress(
        "i",
        "2024-01-01T00:00:00Z",
        json!({"rules": [rule("a.com", "/", "web", json!({"number": 80}))]}),
    )]);
    let h2c = |snapshot: &Snapshot| {
        let config = Config::build(snapshot);
        config.table.route("a.com", "/").unwrap().h2c
    };
    assert!(!h2c(&snapshot));
    snapshot.services = vec![service(
        "web",
        json!([{"name": "http", "port": 80, "targetPort": 8080, "appProtocol": H2C}]),
    )];
    assert!(h2c(&snapshot));
}

#[test]
fn a_missing_service_or_port_makes_only_its_route_unavailable() {
    let snapshot = web_snapshot(vec![ingress(
        "i",
        "2024-01-01T00:00:00Z",
        json!({"rules": [
            rule("a.com", "/", "web", json!({"number": 80})),
            rule("a.com", "/gone", "missing", json!({"number": 80})),
            rule("a.com", "/port", "web", json!({"number": 81})),
        ]}),
    )]);
    let config = Config::build(&snapshot);
    let why = |path| {
        config
            .table
            .route("a.com", path)
            .unwrap()
            .unavailable
            .clone()
    };
    assert_eq!(
        why("/gone").as_deref(),
        Some("service default/missing not found")
    );
    assert_eq!(
        why("/port").as_deref(),
        Some("service default/web has no port 81")
    );
    assert_eq!(why("/"), None);
}

#[test]
fn the_older_ingress_wins_a_conflicting_rule_and_the_default_backend() {
    let mut snapshot = web_snapshot(vec![
        ingress(
            "newer",
            "2024-02-01T00:00:00Z",
            json!({"defaultBackend": {"service": {"name": "missing", "port": {"number": 1}}},
                   "rules": [rule("a.com", "/", "missing", json!({"number": 80}))]}),
        ),
        ingress(
            "older",
            "2024-01-01T00:00:00Z",
            json!({"defaultBackend": {"service": {"name": "web", "port": {"number": 80}}},
                   "rules": [rule("a.com", "/", "web", json!({"number": 80}))]}),
        ),
    ]);
    snapshot.services.push(service("missing", json!([])));
    let config = Config::build(&snapshot);
    assert_eq!(routed(&config, "a.com", "/").unwrap().0, "default/web:80");
    assert_eq!(routed(&config, "b.com", "/").unwrap().0, "default/web:80");
}

#[test]
fn tls_secrets_serve_their_hosts_and_broken_ones_become_problems() {
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec!["a.com".to_string()])
        .unwrap()
        .self_signed(&key)
        .unwrap();
    let tls = |name: &str, cert: &str| -> Arc<Secret> {
        from(json!({
            "metadata": {"name": name, "namespace": "default"},
            "type": "kubernetes.io/tls",
            "data": {"tls.crt": k8s_openapi::ByteString(cert.as_bytes().to_vec()),
                     "tls.key": k8s_openapi::ByteString(key.serialize_pem().into_bytes())},
        }))
    };
    let mut snapshot = web_snapshot(vec![ingress(
        "i",
        "2024-01-01T00:00:00Z",
        json!({"tls": [{"hosts": ["a.com"], "secretName": "good"},
                       {"hosts": ["b.com"], "secretName": "broken"},
                       {"secretName": "gone"}],
               "rules": [rule("a.com", "/", "web", json!({"number": 80})),
                         rule("c.com", "/", "web", json!({"number": 80}))]}),
    )]);
    snapshot.secrets = vec![tls("good", &cert.pem()), tls("broken", "garbage")];
    let config = Config::build(&snapshot);
    assert_eq!(config.certs.hosts(), ["a.com"]);
    let notes: Vec<(&str, &str)> = config
        .problems
        .iter()
        .map(|p| (p.reason, p.note.as_str()))
        .collect();
    assert_eq!(
        notes,
        [
            (
                REASON_BAD_TLS,
                "secret default/broken is not a valid TLS certificate: tls.crt: no PEM certificate; \
                 hosts b.com are served with the default certificate"
            ),
            (
                REASON_BAD_TLS,
                "no kubernetes.io/tls secret default/gone; hosts a.com, c.com are served with the default certificate"
            ),
        ]
    );
    assert_eq!(config.problems[0].ingress.uid, "uid-i");
}

#[test]
fn implementation_specific_paths_are_prefixes_and_exact_paths_are_exact() {
    let snapshot = web_snapshot(vec![ingress(
        "i",
        "2024-01-01T00:00:00Z",
        json!({"rules": [{"http": {"paths": [
            {"path": "/impl", "pathType": "ImplementationSpecific",
             "backend": {"service": {"name": "web", "port": {"number": 80}}}},
            {"path": "/exact", "pathType": "Exact",
             "backend": {"service": {"name": "web", "port": {"number": 80}}}},
        ]}}]}),
    )]);
    let config = Config::build(&snapshot);
    assert!(routed(&config, "any", "/impl/x").is_some());
    assert!(routed(&config, "any", "/exact").is_some());
    assert!(routed(&config, "any", "/exact/x").is_none());
}
