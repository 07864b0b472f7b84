use serde_json::json;

use super::*;

#[test]
fn a_proxy_name_is_scheme_name_and_port_as_upstream_splits_it() {
    assert_eq!(split_scheme_name_port("web"), Some(("", "web", "")));
    assert_eq!(
        split_scheme_name_port("web:8080"),
        Some(("", "web", "8080"))
    );
    assert_eq!(
        split_scheme_name_port("https:web:443"),
        Some(("https", "web", "443"))
    );
    assert_eq!(
        split_scheme_name_port("https:web:"),
        Some(("https", "web", ""))
    );
    for invalid in ["", ":80", "ftp:web:21", "a:b:c:d"] {
        assert_eq!(split_scheme_name_port(invalid), None, "{invalid}");
    }
}

fn pod(ip: &str, ports: serde_json::Value) -> Value {
    json!({"spec": {"containers": [{"name": "a"}, {"name": "b", "ports": ports}]},
           "status": {"podIP": ip}})
}

#[test]
fn a_pod_is_reached_at_the_port_asked_its_first_declared_one_or_80() {
    let plain = |host: &str, port| Backend::Plain {
        https: false,
        host: host.into(),
        port,
    };
    let p = pod(
        "10.42.0.7",
        json!([{"containerPort": 8080}, {"containerPort": 9090}]),
    );
    assert_eq!(
        pod_backend(&p, "p", "", false).unwrap(),
        plain("10.42.0.7", 8080)
    );
    assert_eq!(
        pod_backend(&p, "p", "9090", false).unwrap(),
        plain("10.42.0.7", 9090)
    );
    let bare = pod("10.42.0.7", json!([]));
    assert_eq!(
        pod_backend(&bare, "p", "", false).unwrap(),
        plain("10.42.0.7", 80)
    );
    let e = pod_backend(&p, "p", "http", false).unwrap_err();
    assert_eq!(
        (e.code, e.message.as_str()),
        (400, "invalid port \"http\" for pod p")
    );
    // not yet given an address, or one that is the API server's own host
    let e = pod_backend(&pod("", json!([])), "p", "", false).unwrap_err();
    assert_eq!(
        (e.code, e.message.as_str()),
        (400, "address \"\": invalid IP")
    );
    for ip in ["127.0.0.1", "169.254.1.1", "0.0.0.0", "::1"] {
        let e = pod_backend(&pod(ip, json!([])), "p", "", false).unwrap_err();
        assert_eq!(e.code, 400, "{ip}");
    }
}

#[test]
fn a_node_is_reached_through_its_kubelet_unless_another_port_is_asked() {
    let node = json!({"status": {"addresses": [{"type": "InternalIP", "address": "10.0.0.5"}],
                                  "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}}}});
    let kubelet = Backend::Kubelet {
        host: "10.0.0.5".into(),
        port: 10250,
    };
    assert_eq!(node_backend(&node, "n", "", false).unwrap(), kubelet);
    assert_eq!(node_backend(&node, "n", "10250", false).unwrap(), kubelet);
    assert_eq!(
        node_backend(&node, "n", "9100", false).unwrap(),
        Backend::Plain {
            https: false,
            host: "10.0.0.5".into(),
            port: 9100
        }
    );
    let e = node_backend(&json!({}), "n", "", false).unwrap_err();
    assert_eq!(
        (e.code, e.message.as_str()),
        (
            500,
            "Internal error occurred: node n reports no address for its kubelet"
        )
    );
}
