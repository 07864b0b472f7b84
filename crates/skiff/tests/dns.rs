//! `skiff dns` as a separate process against a real `skiff apiserver`, running as the
//! `kube-system/kube-dns` ServiceAccount with CoreDNS's ClusterRole: Services and
//! EndpointSlices created through the API are answered over UDP and TCP (A, SRV, headless,
//! PTR, NXDOMAIN with SOA), changes arrive through the watch, other names go to a fake upstream
//! on loopback, and malformed packets leave it answering.

mod support;

use std::net::{IpAddr, SocketAddr};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use hickory_proto::op::{Message, MessageType, OpCode, Query, ResponseCode};
use hickory_proto::rr::{Name, RData, Record, RecordType};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use serde_json::json;
use support::cluster::{Process, grant_coredns_role, identity};
use support::{ApiServer, Backend, eventually, kube_client as client, run};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The address the upstream fake answers every A question with.
const UPSTREAM_ANSWER: [u8; 4] = [192, 0, 2, 77];

/// A UDP resolver on loopback answering every question with A 192.0.2.77, counting questions.
async fn fake_upstream() -> (SocketAddr, Arc<AtomicUsize>) {
    let socket = tokio::net::UdpSocket::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = socket.local_addr().expect("addr");
    let asked = Arc::new(AtomicUsize::new(0));
    let count = asked.clone();
    tokio::spawn(async move {
        let mut buf = vec![0u8; 4096];
        while let Ok((n, from)) = socket.recv_from(&mut buf).await {
            let Ok(query) = Message::from_vec(&buf[..n]) else {
                continue;
            };
            count.fetch_add(1, Ordering::SeqCst);
            let mut answer = Message::new(query.metadata.id, MessageType::Response, OpCode::Query);
            answer.metadata.recursion_available = true;
            for q in &query.queries {
                answer.add_query(q.clone());
                let a = RData::A(std::net::Ipv4Addr::from(UPSTREAM_ANSWER).into());
                answer.add_answer(Record::from_rdata(q.name().clone(), 60, a));
            }
            let _ = socket
                .send_to(&answer.to_vec().expect("encode"), from)
                .await;
        }
    });
    (addr, asked)
}

fn question(name: &str, qtype: RecordType) -> Message {
    let mut message = Message::new(fastrand::u16(..), MessageType::Query, OpCode::Query);
    message.metadata.recursion_desired = true;
    message.add_query(Query::query(Name::from_ascii(name).expect("name"), qtype));
    message
}

async fn ask_udp(server: SocketAddr, name: &str, qtype: RecordType) -> Message {
    let socket = tokio::net::UdpSocket::bind("127.0.0.1:0")
        .await
        .expect("bind");
    socket.connect(server).await.expect("connect");
    let query = question(name, qtype);
    let bytes = query.to_vec().expect("encode");
    let mut buf = vec![0u8; 65535];
    for _ in 0..5 {
        socket.send(&bytes).await.expect("send");
        let recv = tokio::time::timeout(std::time::Duration::from_secs(2), socket.recv(&mut buf));
        if let Ok(Ok(n)) = recv.await {
            let answer = Message::from_vec(&buf[..n]).expect("a DNS message");
            assert_eq!(answer.metadata.id, query.metadata.id);
            return answer;
        }
    }
    panic!("no answer for {name} {qtype}");
}

async fn ask_tcp(server: SocketAddr, name: &str, qtype: RecordType) -> Message {
    let mut stream = tokio::net::TcpStream::connect(server)
        .await
        .expect("connect");
    let bytes = question(name, qtype).to_vec().expect("encode");
    stream
        .write_all(&(bytes.len() as u16).to_be_bytes())
        .await
        .expect("write");
    stream.write_all(&bytes).await.expect("write");
    let len = stream.read_u16().await.expect("length");
    let mut buf = vec![0u8; usize::from(len)];
    stream.read_exact(&mut buf).await.expect("message");
    Message::from_vec(&buf).expect("a DNS message")
}

fn addresses(answer: &Message) -> Vec<IpAddr> {
    let mut ips: Vec<IpAddr> = answer
        .answers
        .iter()
        .filter_map(|r| match &r.data {
            RData::A(a) => Some(IpAddr::V4(a.0)),
            RData::AAAA(a) => Some(IpAddr::V6(a.0)),
            _ => None,
        })
        .collect();
    ips.sort();
    ips
}

fn ip(s: &str) -> IpAddr {
    s.parse().expect("ip")
}

fn slice(name: &str, service: &str, endpoints: serde_json::Value) -> EndpointSlice {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"kubernetes.io/service-name": service}},
        "addressType": "IPv4",
        "ports": [{"name": "http", "protocol": "TCP", "port": 8080}],
        "endpoints": endpoints,
    }))
    .expect("slice")
}

/// `skiff dns` as kube-dns, its DNS address and its metrics URL (both from the ready line).
fn start_dns(api: &ApiServer, upstream: SocketAddr) -> (Process, SocketAddr, String) {
    let kubeconfig = identity(
        api,
        "system:serviceaccount:kube-system:kube-dns",
        Some("system:serviceaccounts"),
    );
    let upstream = upstream.to_string();
    let dns = Process::start_as(
        api,
        &kubeconfig,
        "dns",
        &[
            "dns",
            "--listen",
            "127.0.0.1:0",
            "--upstream",
            &upstream,
            "--metrics-bind-address",
            "127.0.0.1:0",
        ],
    );
    let word_after = |marker: &str| {
        let rest = dns.ready.split(marker).nth(1).expect(marker);
        rest.split([' ', ';', ')'])
            .next()
            .expect("a word")
            .to_string()
    };
    let addr: SocketAddr = word_after("udp+tcp ").parse().expect("the DNS address");
    let metrics = word_after("metrics ");
    (dns, addr, metrics)
}

#[test]
fn services_endpoints_and_forwarded_names_are_answered_and_follow_the_watch() {
    run(async {
        let api = ApiServer::start(Backend::Embedded);
        let client = client(&api).await;
        grant_coredns_role(&api);
        let services: Api<Service> = Api::namespaced(client.clone(), "default");
        let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), "default");
        let web: Service = serde_json::from_value(json!({
            "metadata": {"name": "web"},
            "spec": {"ports": [{"name": "http", "port": 80, "protocol": "TCP"}]},
        }))
        .expect("svc");
        let web = services
            .create(&PostParams::default(), &web)
            .await
            .expect("web");
        let web_ip = ip(web
            .spec
            .and_then(|s| s.cluster_ip)
            .as_deref()
            .expect("a ClusterIP"));
        let db: Service = serde_json::from_value(json!({
            "metadata": {"name": "db"},
            "spec": {"clusterIP": "None", "ports": [{"name": "http", "port": 8080}]},
        }))
        .expect("svc");
        services
            .create(&PostParams::default(), &db)
            .await
            .expect("db");
        let endpoints = json!([
            {"addresses": ["10.42.1.5"], "hostname": "db-0", "conditions": {"ready": true}},
            {"addresses": ["10.42.2.6"], "conditions": {"ready": true}},
            {"addresses": ["10.42.3.7"], "conditions": {"ready": false}},
        ]);
        slices
            .create(&PostParams::default(), &slice("db-1", "db", endpoints))
            .await
            .expect("slice");

        let (upstream, upstream_asked) = fake_upstream().await;
        let (_dns, server, metrics) = start_dns(&api, upstream);

        // A for a ClusterIP Service, over UDP and TCP, authoritative with TTL 5
        let answer = ask_udp(server, "web.default.svc.cluster.local.", RecordType::A).await;
        assert_eq!(addresses(&answer), vec![web_ip]);
        assert!(answer.metadata.authoritative);
        assert_eq!(answer.answers[0].ttl, 5);
        let answer = ask_tcp(server, "web.default.svc.cluster.local.", RecordType::A).await;
        assert_eq!(addresses(&answer), vec![web_ip]);

        // SRV for the named port, its target's address in the additional section
        let answer = ask_udp(
            server,
            "_http._tcp.web.default.svc.cluster.local.",
            RecordType::SRV,
        )
        .await;
        let RData::SRV(srv) = &answer.answers[0].data else {
            panic!("an SRV: {answer:?}");
        };
        assert_eq!(
            (srv.port, srv.target.to_ascii()),
            (80, "web.default.svc.cluster.local.".into())
        );
        assert!(answer.additionals.iter().any(|r| r.data
            == RData::A(match web_ip {
                IpAddr::V4(v4) => v4.into(),
                IpAddr::V6(_) => panic!("IPv4 cluster"),
            })));

        // headless: ready endpoints only; endpoint names; PTR for the ClusterIP and endpoints
        let answer = ask_udp(server, "db.default.svc.cluster.local.", RecordType::A).await;
        assert_eq!(addresses(&answer), vec![ip("10.42.1.5"), ip("10.42.2.6")]);
        let answer = ask_udp(server, "db-0.db.default.svc.cluster.local.", RecordType::A).await;
        assert_eq!(addresses(&answer), vec![ip("10.42.1.5")]);
        let reverse = Name::from(web_ip).to_ascii();
        let answer = ask_udp(server, &reverse, RecordType::PTR).await;
        assert_eq!(
            answer.answers[0].data.to_string(),
            "web.default.svc.cluster.local."
        );
        let answer = ask_udp(server, "5.1.42.10.in-addr.arpa.", RecordType::PTR).await;
        assert_eq!(
            answer.answers[0].data.to_string(),
            "db-0.db.default.svc.cluster.local."
        );

        // pod records, NXDOMAIN and NODATA with the zone's SOA
        let answer = ask_udp(
            server,
            "10-42-0-9.default.pod.cluster.local.",
            RecordType::A,
        )
        .await;
        assert_eq!(addresses(&answer), vec![ip("10.42.0.9")]);
        let answer = ask_udp(server, "nope.default.svc.cluster.local.", RecordType::A).await;
        assert_eq!(answer.metadata.response_code, ResponseCode::NXDomain);
        assert!(
            matches!(answer.authorities[0].data, RData::SOA(_)),
            "{answer:?}"
        );
        let answer = ask_udp(server, "web.default.svc.cluster.local.", RecordType::AAAA).await;
        assert_eq!(answer.metadata.response_code, ResponseCode::NoError);
        assert!(answer.answers.is_empty() && matches!(answer.authorities[0].data, RData::SOA(_)));
        assert_eq!(
            upstream_asked.load(Ordering::SeqCst),
            0,
            "cluster names are never forwarded"
        );

        // other names go upstream, then come from the cache
        let answer = ask_udp(server, "example.com.", RecordType::A).await;
        assert_eq!(addresses(&answer), vec![IpAddr::from(UPSTREAM_ANSWER)]);
        assert!(!answer.metadata.authoritative);
        ask_udp(server, "example.com.", RecordType::A).await;
        assert_eq!(upstream_asked.load(Ordering::SeqCst), 1);

        // changes arrive through the watch
        let endpoints = json!([{"addresses": ["10.42.4.8"], "conditions": {"ready": true}}]);
        slices
            .create(&PostParams::default(), &slice("db-2", "db", endpoints))
            .await
            .expect("slice");
        eventually("the new endpoint answered", || async {
            let answer = ask_udp(server, "db.default.svc.cluster.local.", RecordType::A).await;
            addresses(&answer).contains(&ip("10.42.4.8")).then_some(())
        })
        .await;
        services
            .delete("web", &DeleteParams::default())
            .await
            .expect("delete");
        eventually("the deleted Service gone", || async {
            let answer = ask_udp(server, "web.default.svc.cluster.local.", RecordType::A).await;
            (answer.metadata.response_code == ResponseCode::NXDomain).then_some(())
        })
        .await;

        // an answer too big for 512 bytes is truncated over UDP and whole over TCP
        let many: Service = serde_json::from_value(json!({
            "metadata": {"name": "many"},
            "spec": {"clusterIP": "None", "ports": [{"name": "http", "port": 8080}]},
        }))
        .expect("svc");
        services
            .create(&PostParams::default(), &many)
            .await
            .expect("many");
        let endpoints: Vec<_> = (1..=100)
            .map(|i| json!({"addresses": [format!("10.42.9.{i}")], "conditions": {"ready": true}}))
            .collect();
        slices
            .create(
                &PostParams::default(),
                &slice("many-1", "many", json!(endpoints)),
            )
            .await
            .expect("slice");
        let whole = eventually("100 endpoints over TCP", || async {
            let answer = ask_tcp(server, "many.default.svc.cluster.local.", RecordType::A).await;
            (answer.answers.len() == 100).then_some(answer)
        })
        .await;
        assert!(!whole.metadata.truncation);
        let udp = ask_udp(server, "many.default.svc.cluster.local.", RecordType::A).await;
        assert!(udp.metadata.truncation, "{udp:?}");
        assert!(udp.answers.len() < 100);

        // metrics under CoreDNS's names
        let body = http_get(&metrics).await;
        assert!(body.contains("coredns_dns_requests_total{"), "{body}");
        assert!(body.contains("rcode=\"NXDOMAIN\""), "{body}");
        assert!(body.contains("type=\"SRV\""), "{body}");
        let health = http_get(&metrics.replace("/metrics", "/health")).await;
        assert!(
            health.starts_with("HTTP/1.1 200") && health.ends_with("OK"),
            "{health}"
        );
    });
}

#[test]
fn malformed_packets_and_a_flood_leave_it_answering() {
    run(async {
        let api = ApiServer::start(Backend::Embedded);
        grant_coredns_role(&api);
        let (upstream, _) = fake_upstream().await;
        let (_dns, server, _) = start_dns(&api, upstream);

        let socket = tokio::net::UdpSocket::bind("127.0.0.1:0")
            .await
            .expect("bind");
        socket.connect(server).await.expect("connect");
        let mut garbage: Vec<Vec<u8>> = vec![vec![], vec![0xff; 3], vec![0; 12], vec![0xff; 512]];
        // a header claiming 50 questions, then nothing
        garbage.push(vec![0x12, 0x34, 0x01, 0x00, 0x00, 0x32, 0, 0, 0, 0, 0, 0]);
        // a name with a compression pointer to itself
        garbage.push(vec![
            0, 1, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0xc0, 12, 0, 1, 0, 1,
        ]);
        for _ in 0..200 {
            garbage.push(
                (0..fastrand::usize(0..600))
                    .map(|_| fastrand::u8(..))
                    .collect(),
            );
        }
        for packet in &garbage {
            socket.send(packet).await.expect("send");
        }
        // a flood of valid questions without waiting for the answers
        let flood = question("kubernetes.default.svc.cluster.local.", RecordType::A)
            .to_vec()
            .expect("encode");
        for _ in 0..5000 {
            socket.send(&flood).await.expect("send");
        }
        // a TCP client that sends half a message and stays
        let mut half = tokio::net::TcpStream::connect(server)
            .await
            .expect("connect");
        half.write_all(&[0, 40, 1, 2]).await.expect("write");

        let answer = ask_udp(
            server,
            "kubernetes.default.svc.cluster.local.",
            RecordType::A,
        )
        .await;
        assert_eq!(addresses(&answer), vec![ip("10.43.0.1")]);
        let answer = ask_tcp(
            server,
            "kubernetes.default.svc.cluster.local.",
            RecordType::A,
        )
        .await;
        assert_eq!(addresses(&answer), vec![ip("10.43.0.1")]);
    });
}

#[test]
fn a_bad_cluster_domain_is_a_usage_error() {
    let out = support::run_guarded(Command::new(env!("CARGO_BIN_EXE_skiff")).args([
        "dns",
        "--kubeconfig",
        "/nonexistent",
        "--cluster-domain",
        "cluster..local",
    ]));
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("\"cluster..local\""), "{stderr}");
}

#[test]
fn forwarding_to_itself_is_a_usage_error() {
    let out = support::run_guarded(Command::new(env!("CARGO_BIN_EXE_skiff")).args([
        "dns",
        "--kubeconfig",
        "/nonexistent",
        "--listen",
        "0.0.0.0:5399",
        "--upstream",
        "127.0.0.1:5399",
    ]));
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("forwarding loop"), "{stderr}");
}

#[test]
fn dig_resolves_a_service_over_udp_and_tcp() {
    if !std::path::Path::new("/usr/bin/dig").exists() {
        support::skip("dig is not installed (dnsutils, scripts/install-deps)");
        return;
    }
    run(async {
        let api = ApiServer::start(Backend::Embedded);
        grant_coredns_role(&api);
        let (upstream, _) = fake_upstream().await;
        let (_dns, server, _) = start_dns(&api, upstream);
        for transport in ["+notcp", "+tcp"] {
            let out = support::run_guarded(Command::new("dig").args([
                &format!("@{}", server.ip()),
                "-p",
                &server.port().to_string(),
                transport,
                "+short",
                "kubernetes.default.svc.cluster.local",
            ]));
            assert_eq!(
                String::from_utf8_lossy(&out.stdout).trim(),
                "10.43.0.1",
                "{out:?}"
            );
        }
    });
}

/// GET over plain HTTP (the metrics endpoint), body as text.
async fn http_get(url: &str) -> String {
    let rest = url.strip_prefix("http://").expect("http URL");
    let (host, path) = rest.split_once('/').expect("a path");
    let mut stream = tokio::net::TcpStream::connect(host).await.expect("connect");
    let request = format!("GET /{path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.expect("write");
    let mut body = String::new();
    stream.read_to_string(&mut body).await.expect("read");
    body
}
