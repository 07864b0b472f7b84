//! The ingress controller end to end (issue 33): a real kubelet with its managed containerd in a
//! network namespace of its own on a private lan ([`support::netns`]), and `skiff ingress` in
//! the same namespace, as `system:skiff-controller`, on ports 80 and 443 of that namespace (never
//! the host's). The lan host is the client, with curl (SNI through `--resolve`).
//!
//! One Ingress routes two hosts and two paths to two Services of busybox httpd pods, serves TLS
//! for one host from a Secret (an rcgen certificate), answers 503 for its route to a missing
//! Service and keeps the others, and follows a scale-up without a failed request; a second
//! Ingress with a broken TLS Secret gets a Warning event while the other hosts keep being
//! served; the served Ingresses' `status.loadBalancer` names the node's address. Needs root
//! (containerd, CNI, network namespaces) and curl; skips otherwise.

mod support;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

use serde_json::json;
use support::cluster::ingress_class;
use support::netns::{self, LanCluster, NodeNet};
use support::{KUBECTL_133, output_text};

const NODE: &str = "ingress-a";

/// busybox httpd on 8080 serving the pod's name at `/` and at `/api/`.
const NAME_SERVER: &str = "mkdir -p /www/api && hostname > /www/index.html && hostname > /www/api/index.html && exec httpd -f -p 8080 -h /www";

/// A Deployment of `replicas` name servers and its Service (port `http` 80 → 8080).
fn web_app(name: &str, replicas: u32) -> serde_json::Value {
    json!({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "apps/v1", "kind": "Deployment",
         "metadata": {"name": name},
         "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                  "template": {"metadata": {"labels": {"app": name}},
                               "spec": {"terminationGracePeriodSeconds": 1,
                                        "containers": [{"name": "httpd", "image": "busybox",
                                                        "imagePullPolicy": "IfNotPresent",
                                                        "command": ["sh", "-c", NAME_SERVER],
                                                        "readinessProbe": {"httpGet": {"path": "/", "port": 8080},
                                                                           "periodSeconds": 1}}]}}}},
        {"apiVersion": "v1", "kind": "Service",
         "metadata": {"name": name},
         "spec": {"selector": {"app": name},
                  "ports": [{"name": "http", "port": 80, "targetPort": 8080}]}},
    ]})
}

fn path(path: &str, service: &str, port: serde_json::Value) -> serde_json::Value {
    json!({"path": path, "pathType": "Prefix",
           "backend": {"service": {"name": service, "port": port}}})
}

/// One request with curl from the lan host to `scheme://host<path>` at the node's address
/// (`--resolve`, so that SNI and Host name `host`): the status code, the HTTP version and the
/// body's first line. `ca`: trust this certificate (else none is checked).
fn curl(
    net: &NodeNet,
    scheme: &str,
    host: &str,
    path: &str,
    ca: Option<&Path>,
) -> (u16, String, String) {
    curl_with(net, scheme, host, path, ca, &[])
}

/// [`curl`] with more curl flags.
fn curl_with(
    net: &NodeNet,
    scheme: &str,
    host: &str,
    path: &str,
    ca: Option<&Path>,
    flags: &[&str],
) -> (u16, String, String) {
    let port = if scheme == "https" { 443 } else { 80 };
    let mut cmd = Command::new("curl");
    cmd.args(flags);
    cmd.args([
        "-sS",
        "--max-time",
        "10",
        "-w",
        "\n%{http_code} %{http_version}",
    ])
    .arg("--resolve")
    .arg(format!("{host}:{port}:{}", net.ip))
    .arg(format!("{scheme}://{host}{path}"));
    match ca {
        Some(ca) => cmd.arg("--cacert").arg(ca),
        None => cmd.arg("--insecure"),
    };
    let out = support::run_guarded(&mut cmd);
    let (stdout, stderr) = output_text(&out);
    assert!(
        out.status.success(),
        "curl {scheme}://{host}{path}: {stderr}"
    );
    let (body, status) = stdout.rsplit_once('\n').expect("curl's status line");
    let (code, version) = status.split_once(' ').expect("code and version");
    let first = body.lines().next().unwrap_or("").to_string();
    (
        code.parse().expect("a status code"),
        version.to_string(),
        first,
    )
}

/// The pod names answering `count` requests, each of which must succeed.
fn answered_by(net: &NodeNet, host: &str, path: &str, count: usize) -> BTreeSet<String> {
    (0..count)
        .map(|_| {
            let (code, _, body) = curl(net, "http", host, path, None);
            assert_eq!(code, 200, "{host}{path}: {body}");
            body
        })
        .collect()
}

/// Waits until `host<path>` answers `code` (the controller has seen the change).
fn until_code(
    net: &NodeNet,
    scheme: &str,
    host: &str,
    path: &str,
    ca: Option<&Path>,
    code: u16,
) -> String {
    let deadline = std::time::Instant::now() + support::HANG_GUARD;
    loop {
        let (got, _, body) = curl(net, scheme, host, path, ca);
        if got == code {
            return body;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{scheme}://{host}{path} never answered {code} (last {got}: {body})"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// A `kubernetes.io/tls` Secret.
fn tls_secret(name: &str, cert: &str, key: &str) -> serde_json::Value {
    json!({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
           "metadata": {"name": name},
           "stringData": {"tls.crt": cert, "tls.key": key}})
}

#[test]
fn an_ingress_routes_hosts_and_paths_serves_tls_by_sni_and_follows_a_scale_up() {
    if let Some(why) = netns::unsupported() {
        support::skip(&why);
        return;
    }
    let cluster = LanCluster::start("deployment,replicaset,endpointslice", &[NODE]);
    let (api, net) = (&cluster.api, &cluster.nets[0]);
    api.apply(ingress_class());
    let ingress = net.start(
        api,
        ("system:skiff-controller", None),
        "ingress",
        &["ingress", "--node-name", NODE],
    );
    assert!(
        ingress.ready.contains("http 0.0.0.0:80, https 0.0.0.0:443"),
        "{}",
        ingress.ready
    );

    // a certificate for a.example, trusted by the client
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec!["a.example".to_string()])
        .unwrap()
        .self_signed(&key)
        .unwrap();
    let ca = api.data_dir.join("a.example.crt");
    std::fs::write(&ca, cert.pem()).unwrap();
    api.apply(tls_secret("a-tls", &cert.pem(), &key.serialize_pem()));

    api.apply(web_app("web", 1));
    api.apply(web_app("api", 1));
    api.apply(
        json!({"apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
        "metadata": {"name": "routes"},
        "spec": {
            "tls": [{"hosts": ["a.example"], "secretName": "a-tls"}],
            "rules": [
                {"host": "a.example", "http": {"paths": [
                    path("/", "web", json!({"number": 80})),
                    path("/api", "api", json!({"name": "http"})),
                    path("/missing", "nope", json!({"number": 80})),
                ]}},
                {"host": "b.example", "http": {"paths": [
                    path("/", "api", json!({"number": 80})),
                ]}},
            ]}}),
    );

    // two hosts, two paths, two Services
    let web = until_code(net, "http", "a.example", "/", None, 200);
    assert!(web.starts_with("web-"), "{web}");
    let api_pod = until_code(net, "http", "a.example", "/api/", None, 200);
    assert!(api_pod.starts_with("api-"), "{api_pod}");
    assert_eq!(curl(net, "http", "b.example", "/api/", None).2, api_pod);
    assert_eq!(curl(net, "http", "b.example", "/", None).2, api_pod);
    assert_eq!(curl(net, "http", "a.example", "/", None).1, "1.1");
    // h2c by prior knowledge on the plain port
    let h2c = curl_with(
        net,
        "http",
        "a.example",
        "/",
        None,
        &["--http2-prior-knowledge"],
    );
    assert_eq!((h2c.0, h2c.1.as_str()), (200, "2"));
    // nothing matches: 404; a missing Service: 503 for its route only
    assert_eq!(curl(net, "http", "c.example", "/", None).0, 404);
    assert_eq!(curl(net, "http", "a.example", "/missing", None).0, 503);
    assert_eq!(curl(net, "http", "a.example", "/", None).0, 200);
    // each request has an access-log line, written within FLUSH_EVERY
    let log = || std::fs::read_to_string(api.data_dir.join("ingress.log")).unwrap();
    let logged = |needle: &str| {
        let deadline = std::time::Instant::now() + support::HANG_GUARD;
        while !log().contains(needle) {
            assert!(
                std::time::Instant::now() < deadline,
                "no {needle:?} in:\n{}",
                log()
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    };
    logged("\"GET /missing HTTP/1.1\" 503 - \"-\" \"curl/");
    logged("\"GET / HTTP/2.0\" 200 - \"-\" \"curl/");
    logged("\"a.example\" 0.0");
    logged(" [default/web:80] 10.42.");

    // TLS by SNI with the Secret's certificate, HTTP/2 by ALPN
    let (code, version, body) = until_code_tls(net, &ca);
    assert_eq!(
        (code, version.as_str(), body.as_str()),
        (200, "2", web.as_str())
    );

    // a scale-up is followed without a failed request
    api.kubectl(KUBECTL_133, &["scale", "deployment", "web", "--replicas=3"]);
    let mut seen = BTreeSet::new();
    let deadline = std::time::Instant::now() + support::HANG_GUARD;
    while seen.len() < 3 {
        seen.extend(answered_by(net, "a.example", "/", 3));
        assert!(
            std::time::Instant::now() < deadline,
            "the scaled-up pods never answered: {seen:?}"
        );
    }
    assert!(seen.iter().all(|p| p.starts_with("web-")), "{seen:?}");

    // a broken TLS Secret: a Warning event, and the other hosts still served
    api.apply(tls_secret(
        "broken-tls",
        "-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydA==\n-----END CERTIFICATE-----\n",
        &key.serialize_pem(),
    ));
    api.apply(
        json!({"apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
        "metadata": {"name": "broken"},
        "spec": {
            "tls": [{"hosts": ["d.example"], "secretName": "broken-tls"}],
            "rules": [{"host": "d.example", "http": {"paths": [
                path("/", "web", json!({"number": 80})),
            ]}}]}}),
    );
    let deadline = std::time::Instant::now() + support::HANG_GUARD;
    let message = loop {
        let message = api.event_message("broken", "InvalidTLSSecret");
        if !message.is_empty() {
            break message;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no InvalidTLSSecret event about ingress broken"
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    };
    assert!(
        message.starts_with("secret default/broken-tls is not a valid TLS certificate"),
        "{message}"
    );
    assert_eq!(curl(net, "https", "a.example", "/", Some(&ca)).0, 200);
    assert_eq!(curl(net, "http", "b.example", "/", None).0, 200);
    // d.example is served, over TLS with the default certificate
    assert_eq!(curl(net, "https", "d.example", "/", None).0, 200);

    // the status names the node
    let status = api.kubectl_until(
        KUBECTL_133,
        &[
            "get",
            "ingress",
            "routes",
            "-o",
            "jsonpath={.status.loadBalancer.ingress[*].ip}",
        ],
        None,
        |out| output_text(out).0 == net.ip.to_string(),
    );
    assert!(status.status.success());
    let describe = api.kubectl(KUBECTL_133, &["get", "ingress", "routes"]);
    assert!(describe.contains(&net.ip.to_string()), "{describe}");

    // handed to another controller's class: no longer served, its status cleared
    api.kubectl(
        KUBECTL_133,
        &[
            "patch",
            "ingress",
            "routes",
            "--type=merge",
            "-p",
            r#"{"spec": {"ingressClassName": "other"}}"#,
        ],
    );
    let cleared = api.kubectl_until(
        KUBECTL_133,
        &[
            "get",
            "ingress",
            "routes",
            "-o",
            "jsonpath={.status.loadBalancer}",
        ],
        None,
        |out| output_text(out).0 == "{}",
    );
    assert!(cleared.status.success());
    assert_eq!(curl(net, "http", "b.example", "/", None).0, 404);
}

/// The first successful TLS request to a.example (the certificate may reach the controller a
/// moment after the route).
fn until_code_tls(net: &NodeNet, ca: &Path) -> (u16, String, String) {
    let deadline = std::time::Instant::now() + support::HANG_GUARD;
    loop {
        let mut cmd = Command::new("curl");
        cmd.args(["-sS", "--max-time", "10", "-o", "/dev/null", "--cacert"])
            .arg(ca)
            .arg("--resolve")
            .arg(format!("a.example:443:{}", net.ip))
            .arg("https://a.example/");
        if support::run_guarded(&mut cmd).status.success() {
            return curl(net, "https", "a.example", "/", Some(ca));
        }
        assert!(
            std::time::Instant::now() < deadline,
            "a.example never served its certificate"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}
