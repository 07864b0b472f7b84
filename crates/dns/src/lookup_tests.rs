//! Questions against records built from fake Services and EndpointSlices.

use std::net::IpAddr;
use std::sync::Arc;

use hickory_proto::rr::rdata::{CNAME, PTR, SRV};
use hickory_proto::rr::{LowerName, Name, RData, Record, RecordType};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use serde_json::json;
use skiff_runtime::informer::Change;

use super::{Answer, DEFAULT_TTL, Zone, lookup};
use crate::records::ClusterRecords;

fn service(ns: &str, name: &str, spec: serde_json::Value) -> Service {
    serde_json::from_value(json!({"metadata": {"namespace": ns, "name": name}, "spec": spec}))
        .expect("a Service")
}

fn slice(ns: &str, name: &str, service: &str, endpoints: serde_json::Value) -> EndpointSlice {
    serde_json::from_value(json!({
        "metadata": {"namespace": ns, "name": name,
                     "labels": {"kubernetes.io/service-name": service}},
        "addressType": "IPv4",
        "ports": [{"name": "http", "protocol": "TCP", "port": 8080}],
        "endpoints": endpoints,
    }))
    .expect("an EndpointSlice")
}

/// `web` (ClusterIP, ports http/dns-udp), `db` (headless, two ready endpoints of three, one
/// with a hostname), `ext` (ExternalName) in `prod`; `dual` (two families) in `other`.
fn cluster() -> ClusterRecords {
    let mut records = ClusterRecords::default();
    records.apply_service(&service(
        "prod",
        "web",
        json!({"clusterIP": "10.43.0.20", "clusterIPs": ["10.43.0.20"], "ports": [
            {"name": "http", "protocol": "TCP", "port": 80},
            {"name": "dns-udp", "protocol": "UDP", "port": 53}]}),
    ));
    records.apply_service(&service(
        "prod",
        "db",
        json!({"clusterIP": "None", "ports": [{"name": "http", "port": 8080}]}),
    ));
    records.apply_slice(&slice(
        "prod",
        "db-abc",
        "db",
        json!([
            {"addresses": ["10.42.1.5"], "hostname": "db-0", "conditions": {"ready": true}},
            {"addresses": ["10.42.2.7"], "conditions": {}},
            {"addresses": ["10.42.3.9"], "conditions": {"ready": false}},
        ]),
    ));
    records.apply_service(&service(
        "prod",
        "ext",
        json!({"type": "ExternalName", "externalName": "Example.COM."}),
    ));
    records.apply_service(&service(
        "other",
        "dual",
        json!({"clusterIP": "10.43.0.30", "clusterIPs": ["10.43.0.30", "fd00:43::30"],
               "ports": [{"port": 443}]}),
    ));
    records
}

fn zone() -> Zone {
    Zone::new("cluster.local").expect("zone")
}

fn ask(records: &ClusterRecords, name: &str, qtype: RecordType) -> Answer {
    let owner = Name::from_ascii(name).expect("a name");
    lookup(records, &zone(), &LowerName::new(&owner), &owner, qtype)
}

fn answers(answer: Answer) -> Vec<RData> {
    match answer {
        Answer::Records { answers, .. } => answers.into_iter().map(|r| r.data).collect(),
        other => panic!("expected records, got {other:?}"),
    }
}

fn a(ip: &str) -> RData {
    match ip.parse::<IpAddr>().expect("ip") {
        IpAddr::V4(ip) => RData::A(ip.into()),
        IpAddr::V6(ip) => RData::AAAA(ip.into()),
    }
}

fn name(n: &str) -> Name {
    Name::from_ascii(n).expect("a name")
}

#[test]
fn a_cluster_ip_service_answers_its_cluster_ip_with_ttl_5() {
    let records = cluster();
    let answer = ask(&records, "web.prod.svc.cluster.local.", RecordType::A);
    let Answer::Records { answers, .. } = answer else {
        panic!("records expected");
    };
    assert_eq!(answers.len(), 1);
    assert_eq!(answers[0].data, a("10.43.0.20"));
    assert_eq!(answers[0].ttl, DEFAULT_TTL);
}

#[test]
fn names_match_case_insensitively_and_keep_the_askers_case() {
    let records = cluster();
    let answer = ask(&records, "WEB.Prod.SVC.Cluster.Local.", RecordType::A);
    let Answer::Records { answers, .. } = answer else {
        panic!("records expected");
    };
    assert_eq!(answers[0].name, name("WEB.Prod.SVC.Cluster.Local."));
    assert_eq!(answers[0].data, a("10.43.0.20"));
}

#[test]
fn a_dual_stack_service_answers_a_and_aaaa_by_family() {
    let records = cluster();
    let v4 = ask(&records, "dual.other.svc.cluster.local.", RecordType::A);
    assert_eq!(answers(v4), vec![a("10.43.0.30")]);
    let v6 = ask(&records, "dual.other.svc.cluster.local.", RecordType::AAAA);
    assert_eq!(answers(v6), vec![a("fd00:43::30")]);
}

#[test]
fn a_type_the_service_has_no_records_of_is_nodata() {
    let records = cluster();
    assert_eq!(
        ask(&records, "web.prod.svc.cluster.local.", RecordType::AAAA),
        Answer::NoData
    );
    assert_eq!(
        ask(&records, "web.prod.svc.cluster.local.", RecordType::MX),
        Answer::NoData
    );
}

#[test]
fn unknown_services_and_namespaces_are_nxdomain() {
    let records = cluster();
    assert_eq!(
        ask(&records, "nope.prod.svc.cluster.local.", RecordType::A),
        Answer::NxDomain
    );
    assert_eq!(
        ask(&records, "web.nope.svc.cluster.local.", RecordType::A),
        Answer::NxDomain
    );
    assert_eq!(
        ask(&records, "nope.svc.cluster.local.", RecordType::A),
        Answer::NxDomain
    );
    assert_eq!(
        ask(&records, "web.prod.nope.cluster.local.", RecordType::A),
        Answer::NxDomain
    );
}

#[test]
fn the_zone_and_existing_namespaces_are_nodata() {
    let records = cluster();
    assert_eq!(
        ask(&records, "cluster.local.", RecordType::A),
        Answer::NoData
    );
    assert_eq!(
        ask(&records, "svc.cluster.local.", RecordType::A),
        Answer::NoData
    );
    assert_eq!(
        ask(&records, "prod.svc.cluster.local.", RecordType::A),
        Answer::NoData
    );
}

#[test]
fn search_path_expansions_of_cluster_names_are_nxdomain_not_forwarded() {
    let records = cluster();
    // a pod in `prod` asking `web.prod.svc.cluster.local` with ndots:5 tries these first
    for expanded in [
        "web.prod.svc.cluster.local.prod.svc.cluster.local.",
        "web.prod.svc.cluster.local.svc.cluster.local.",
        "web.prod.svc.cluster.local.cluster.local.",
        "example.com.prod.svc.cluster.local.",
        "example.com.cluster.local.",
    ] {
        assert_eq!(
            ask(&records, expanded, RecordType::A),
            Answer::NxDomain,
            "{expanded}"
        );
    }
}

#[test]
fn a_headless_service_answers_each_ready_endpoint() {
    let records = cluster();
    let answer = ask(&records, "db.prod.svc.cluster.local.", RecordType::A);
    assert_eq!(answers(answer), vec![a("10.42.1.5"), a("10.42.2.7")]);
}

#[test]
fn a_headless_endpoint_is_named_by_its_hostname_or_its_dashed_address() {
    let records = cluster();
    let by_hostname = ask(&records, "db-0.db.prod.svc.cluster.local.", RecordType::A);
    assert_eq!(answers(by_hostname), vec![a("10.42.1.5")]);
    let by_address = ask(
        &records,
        "10-42-2-7.db.prod.svc.cluster.local.",
        RecordType::A,
    );
    assert_eq!(answers(by_address), vec![a("10.42.2.7")]);
    // not ready: no name
    let not_ready = ask(
        &records,
        "10-42-3-9.db.prod.svc.cluster.local.",
        RecordType::A,
    );
    assert_eq!(not_ready, Answer::NxDomain);
}

#[test]
fn a_headless_service_without_ready_endpoints_is_nxdomain() {
    let mut records = cluster();
    records.apply_slice(&slice(
        "prod",
        "db-abc",
        "db",
        json!([{"addresses": ["10.42.1.5"], "conditions": {"ready": false}}]),
    ));
    assert_eq!(
        ask(&records, "db.prod.svc.cluster.local.", RecordType::A),
        Answer::NxDomain
    );
}

#[test]
fn srv_of_a_named_port_targets_the_service_name() {
    let records = cluster();
    let answer = ask(
        &records,
        "_http._tcp.web.prod.svc.cluster.local.",
        RecordType::SRV,
    );
    let Answer::Records {
        answers,
        additionals,
    } = answer
    else {
        panic!("records expected");
    };
    let target = name("web.prod.svc.cluster.local.");
    assert_eq!(
        answers.iter().map(|r| r.data.clone()).collect::<Vec<_>>(),
        vec![RData::SRV(SRV::new(0, 100, 80, target.clone()))]
    );
    assert_eq!(
        additionals,
        vec![Record::from_rdata(target, DEFAULT_TTL, a("10.43.0.20"))]
    );
}

#[test]
fn srv_filters_by_protocol_and_the_bare_name_lists_every_port() {
    let records = cluster();
    let udp = ask(
        &records,
        "_dns-udp._udp.web.prod.svc.cluster.local.",
        RecordType::SRV,
    );
    let target = name("web.prod.svc.cluster.local.");
    assert_eq!(
        answers(udp),
        vec![RData::SRV(SRV::new(0, 100, 53, target.clone()))]
    );
    let wrong = ask(
        &records,
        "_http._udp.web.prod.svc.cluster.local.",
        RecordType::SRV,
    );
    assert_eq!(wrong, Answer::NxDomain);
    let all = ask(&records, "web.prod.svc.cluster.local.", RecordType::SRV);
    assert_eq!(
        answers(all),
        vec![
            RData::SRV(SRV::new(0, 50, 80, target.clone())),
            RData::SRV(SRV::new(0, 50, 53, target)),
        ]
    );
}

#[test]
fn srv_of_a_headless_service_targets_each_endpoint() {
    let records = cluster();
    let answer = ask(
        &records,
        "_http._tcp.db.prod.svc.cluster.local.",
        RecordType::SRV,
    );
    assert_eq!(
        answers(answer),
        vec![
            RData::SRV(SRV::new(
                0,
                50,
                8080,
                name("db-0.db.prod.svc.cluster.local.")
            )),
            RData::SRV(SRV::new(
                0,
                50,
                8080,
                name("10-42-2-7.db.prod.svc.cluster.local.")
            )),
        ]
    );
}

#[test]
fn an_external_name_service_is_a_cname() {
    let records = cluster();
    for qtype in [RecordType::A, RecordType::AAAA, RecordType::CNAME] {
        let answer = ask(&records, "ext.prod.svc.cluster.local.", qtype);
        assert_eq!(
            answers(answer),
            vec![RData::CNAME(CNAME(name("example.com.")))]
        );
    }
    assert_eq!(
        ask(&records, "ext.prod.svc.cluster.local.", RecordType::TXT),
        Answer::NoData
    );
}

#[test]
fn pod_records_take_the_address_from_the_name() {
    let records = cluster();
    let v4 = ask(&records, "10-42-0-5.prod.pod.cluster.local.", RecordType::A);
    assert_eq!(answers(v4), vec![a("10.42.0.5")]);
    let v6 = ask(
        &records,
        "fd00--5.prod.pod.cluster.local.",
        RecordType::AAAA,
    );
    assert_eq!(answers(v6), vec![a("fd00::5")]);
    let family = ask(
        &records,
        "10-42-0-5.prod.pod.cluster.local.",
        RecordType::AAAA,
    );
    assert_eq!(family, Answer::NoData);
    let garbage = ask(&records, "not-an-ip.prod.pod.cluster.local.", RecordType::A);
    assert_eq!(garbage, Answer::NxDomain);
}

#[test]
fn ptr_answers_cluster_ips_and_headless_endpoints() {
    let records = cluster();
    let cluster_ip = ask(&records, "20.0.43.10.in-addr.arpa.", RecordType::PTR);
    assert_eq!(
        answers(cluster_ip),
        vec![RData::PTR(PTR(name("web.prod.svc.cluster.local.")))]
    );
    let endpoint = ask(&records, "5.1.42.10.in-addr.arpa.", RecordType::PTR);
    assert_eq!(
        answers(endpoint),
        vec![RData::PTR(PTR(name("db-0.db.prod.svc.cluster.local.")))]
    );
    let v6 = Name::from(IpAddr::from(
        "fd00:43::30".parse::<std::net::Ipv6Addr>().expect("v6"),
    ));
    let answer = lookup(
        &records,
        &zone(),
        &LowerName::new(&v6),
        &v6,
        RecordType::PTR,
    );
    assert_eq!(
        answers(answer),
        vec![RData::PTR(PTR(name("dual.other.svc.cluster.local.")))]
    );
}

#[test]
fn unknown_reverse_names_and_other_domains_are_not_ours() {
    let records = cluster();
    assert_eq!(
        ask(&records, "1.1.168.192.in-addr.arpa.", RecordType::PTR),
        Answer::NotOurs
    );
    assert_eq!(
        ask(&records, "168.192.in-addr.arpa.", RecordType::PTR),
        Answer::NotOurs
    );
    assert_eq!(
        ask(&records, "example.com.", RecordType::A),
        Answer::NotOurs
    );
    assert_eq!(ask(&records, "local.", RecordType::A), Answer::NotOurs);
}

#[test]
fn updates_and_deletes_change_the_answers() {
    let mut records = cluster();
    records.apply_slice(&slice(
        "prod",
        "db-abc",
        "db",
        json!([{"addresses": ["10.42.4.4"], "conditions": {"ready": true}}]),
    ));
    let answer = ask(&records, "db.prod.svc.cluster.local.", RecordType::A);
    assert_eq!(answers(answer), vec![a("10.42.4.4")]);
    assert_eq!(
        ask(&records, "5.1.42.10.in-addr.arpa.", RecordType::PTR),
        Answer::NotOurs
    );

    let web = service("prod", "web", json!({}));
    records.delete_service(&web);
    assert_eq!(
        ask(&records, "web.prod.svc.cluster.local.", RecordType::A),
        Answer::NxDomain
    );
    assert_eq!(
        ask(&records, "20.0.43.10.in-addr.arpa.", RecordType::PTR),
        Answer::NotOurs
    );
}

#[test]
fn a_relist_drops_what_is_gone() {
    let mut records = cluster();
    // what the informers deliver after a relist that has only `web`, changed: its update, and
    // a tombstone for every other Service and slice
    let web = |spec| Arc::new(service("prod", "web", spec));
    records.service_changed(&Change::Updated {
        old: web(json!({"clusterIP": "10.43.0.20"})),
        new: web(json!({"clusterIP": "10.43.0.21", "ports": [{"name": "http", "port": 80}]})),
    });
    let gone = |last| Change::Deleted {
        last: Arc::new(last),
        final_state_unknown: true,
    };
    for (ns, name) in [("prod", "db"), ("prod", "ext"), ("other", "dual")] {
        records.service_changed(&gone(service(ns, name, json!({}))));
    }
    records.slice_changed(&Change::Deleted {
        last: Arc::new(slice("prod", "db-abc", "db", json!([]))),
        final_state_unknown: true,
    });
    assert_eq!(records.service_count(), 1);
    let answer = ask(&records, "web.prod.svc.cluster.local.", RecordType::A);
    assert_eq!(answers(answer), vec![a("10.43.0.21")]);
    assert_eq!(
        ask(&records, "db.prod.svc.cluster.local.", RecordType::A),
        Answer::NxDomain
    );
    assert_eq!(
        ask(&records, "other.svc.cluster.local.", RecordType::A),
        Answer::NxDomain
    );
}

#[test]
fn odd_service_names_never_panic_and_match_nothing_else() {
    let mut records = ClusterRecords::default();
    for odd in ["UPPER", "with.dot", "", "-", &"x".repeat(300), "ünïcode"] {
        records.apply_service(&service(
            "prod",
            odd,
            json!({"clusterIP": "not-an-ip", "type": "Weird", "ports": [{"port": 99999}]}),
        ));
    }
    records.apply_service(
        &serde_json::from_value(json!({"metadata": {"name": "no-namespace"}})).expect("svc"),
    );
    let answer = ask(&records, "upper.prod.svc.cluster.local.", RecordType::A);
    assert_eq!(answer, Answer::NxDomain);
    assert_eq!(
        ask(&records, "with.dot.prod.svc.cluster.local.", RecordType::A),
        Answer::NxDomain
    );
}

#[test]
fn the_apex_answers_soa_and_ns_and_dns_version_txt() {
    let records = cluster();
    let soa = answers(ask(&records, "cluster.local.", RecordType::SOA));
    let RData::SOA(soa) = &soa[0] else {
        panic!("an SOA");
    };
    assert_eq!(soa.mname, name("ns.dns.cluster.local."));
    assert_eq!(soa.minimum, DEFAULT_TTL);
    let version = answers(ask(&records, "dns-version.cluster.local.", RecordType::TXT));
    assert!(matches!(&version[0], RData::TXT(_)));
    assert_eq!(
        answers(ask(&records, "cluster.local.", RecordType::NS)).len(),
        1
    );
}
