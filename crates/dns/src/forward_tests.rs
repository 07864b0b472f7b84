//! The forwarder against a fake upstream exchange, with tokio's paused clock.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use hickory_proto::op::{Message, MessageType, OpCode, Query, ResponseCode};
use hickory_proto::rr::rdata::SOA;
use hickory_proto::rr::{Name, RData, Record, RecordType};

use super::{Exchange, Forwarder, MAX_CACHE_TTL, loops_back, resolv_conf_nameservers};

/// Answers A 192.0.2.1 with `ttl` (or NXDOMAIN with an SOA of minimum `ttl` for `missing.`),
/// counting calls; upstreams listed in `down` fail.
#[derive(Clone)]
struct FakeUpstream {
    calls: Arc<AtomicUsize>,
    ttl: u32,
    down: Vec<SocketAddr>,
}

#[async_trait::async_trait]
impl Exchange for FakeUpstream {
    async fn exchange(&self, upstream: SocketAddr, query: &Message) -> io::Result<Message> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        if self.down.contains(&upstream) {
            return Err(io::Error::new(io::ErrorKind::TimedOut, "down"));
        }
        let mut answer = Message::new(query.metadata.id, MessageType::Response, OpCode::Query);
        let q = query.queries[0].clone();
        if q.name().to_ascii() == "missing." {
            answer.metadata.response_code = ResponseCode::NXDomain;
            let soa = SOA::new(Name::root(), Name::root(), 1, 1, 1, 1, self.ttl);
            answer.add_authority(Record::from_rdata(Name::root(), 900, RData::SOA(soa)));
        } else {
            let a = RData::A(
                "192.0.2.1"
                    .parse::<std::net::Ipv4Addr>()
                    .expect("ip")
                    .into(),
            );
            answer.add_answer(Record::from_rdata(q.name().clone(), self.ttl, a));
        }
        answer.add_query(q);
        Ok(answer)
    }
}

fn forwarder(ttl: u32, down: Vec<SocketAddr>) -> (Forwarder<FakeUpstream>, Arc<AtomicUsize>) {
    let calls = Arc::new(AtomicUsize::new(0));
    let fake = FakeUpstream {
        calls: calls.clone(),
        ttl,
        down,
    };
    let upstreams = vec![
        "192.0.2.53:53".parse().expect("addr"),
        "192.0.2.54:53".parse().expect("addr"),
    ];
    (Forwarder::new(upstreams, fake).expect("forwarder"), calls)
}

fn query(name: &str) -> Query {
    Query::query(Name::from_ascii(name).expect("name"), RecordType::A)
}

#[tokio::test(start_paused = true)]
async fn answers_are_cached_for_their_ttl_with_the_ttl_counting_down() {
    let (forwarder, calls) = forwarder(10, vec![]);
    let (first, from) = forwarder
        .resolve(&query("example.com."))
        .await
        .expect("answer");
    assert_eq!(from, Some("192.0.2.53:53".parse().expect("addr")));
    assert_eq!(first.answers[0].ttl, 10);

    tokio::time::advance(Duration::from_secs(4)).await;
    let (cached, from) = forwarder
        .resolve(&query("EXAMPLE.com."))
        .await
        .expect("answer");
    assert_eq!(from, None);
    assert_eq!(cached.answers[0].ttl, 6);
    assert_eq!(calls.load(Ordering::SeqCst), 1);

    tokio::time::advance(Duration::from_secs(6)).await;
    let (_, from) = forwarder
        .resolve(&query("example.com."))
        .await
        .expect("answer");
    assert!(from.is_some(), "expired entries are asked again");
    assert_eq!(calls.load(Ordering::SeqCst), 2);
}

#[tokio::test(start_paused = true)]
async fn long_ttls_are_cached_at_most_30_seconds() {
    let (forwarder, calls) = forwarder(3600, vec![]);
    forwarder
        .resolve(&query("example.com."))
        .await
        .expect("answer");
    tokio::time::advance(Duration::from_secs(u64::from(MAX_CACHE_TTL))).await;
    forwarder
        .resolve(&query("example.com."))
        .await
        .expect("answer");
    assert_eq!(calls.load(Ordering::SeqCst), 2);
}

#[tokio::test(start_paused = true)]
async fn nxdomain_is_cached_for_the_soa_minimum() {
    let (forwarder, calls) = forwarder(5, vec![]);
    let (answer, _) = forwarder.resolve(&query("missing.")).await.expect("answer");
    assert_eq!(answer.metadata.response_code, ResponseCode::NXDomain);
    tokio::time::advance(Duration::from_secs(4)).await;
    let (_, from) = forwarder.resolve(&query("missing.")).await.expect("answer");
    assert_eq!(from, None);
    tokio::time::advance(Duration::from_secs(1)).await;
    forwarder.resolve(&query("missing.")).await.expect("answer");
    assert_eq!(calls.load(Ordering::SeqCst), 2);
}

#[tokio::test(start_paused = true)]
async fn a_failing_upstream_falls_over_to_the_next_and_all_failing_is_an_error() {
    let first: SocketAddr = "192.0.2.53:53".parse().expect("addr");
    let (forwarder, _) = forwarder(5, vec![first]);
    let (_, from) = forwarder
        .resolve(&query("example.com."))
        .await
        .expect("answer");
    assert_eq!(from, Some("192.0.2.54:53".parse().expect("addr")));

    let (forwarder, _) = forwarder_all_down();
    let error = forwarder
        .resolve(&query("example.com."))
        .await
        .expect_err("no upstream");
    assert!(
        error.to_string().contains("forwarding example.com. A"),
        "{error}"
    );
}

fn forwarder_all_down() -> (Forwarder<FakeUpstream>, Arc<AtomicUsize>) {
    forwarder(
        5,
        vec![
            "192.0.2.53:53".parse().expect("addr"),
            "192.0.2.54:53".parse().expect("addr"),
        ],
    )
}

#[test]
fn resolv_conf_nameservers_are_read_in_order() {
    let text = "# generated\nsearch example.com\nnameserver 10.0.0.2\nnameserver fd00::53\n\
                nameserver fe80::1%eth0\noptions ndots:5\n";
    assert_eq!(
        resolv_conf_nameservers(text),
        vec![
            "10.0.0.2:53".parse::<SocketAddr>().expect("addr"),
            "[fd00::53]:53".parse().expect("addr"),
        ]
    );
}

#[test]
fn no_upstream_is_an_error() {
    let fake = FakeUpstream {
        calls: Arc::default(),
        ttl: 5,
        down: vec![],
    };
    assert!(Forwarder::new(vec![], fake).is_err());
}

/// Never answers: every exchange waits until the test ends.
struct SilentUpstream;

#[async_trait::async_trait]
impl Exchange for SilentUpstream {
    async fn exchange(&self, _: SocketAddr, _: &Message) -> io::Result<Message> {
        std::future::pending().await
    }
}

#[tokio::test]
async fn questions_beyond_the_concurrency_limit_are_refused_at_once() {
    let upstream: SocketAddr = "192.0.2.53:53".parse().expect("addr");
    let forwarder = Arc::new(Forwarder::new(vec![upstream], SilentUpstream).expect("forwarder"));
    let mut waiting = Vec::new();
    for i in 0..super::MAX_CONCURRENT {
        let forwarder = forwarder.clone();
        waiting.push(tokio::spawn(async move {
            forwarder.resolve(&query(&format!("n{i}.example."))).await
        }));
    }
    // let every spawned question take its permit
    while forwarder.in_flight.available_permits() > 0 {
        tokio::task::yield_now().await;
    }
    let error = forwarder
        .resolve(&query("one-more.example."))
        .await
        .expect_err("refused");
    assert!(matches!(error, crate::Error::Overloaded(_)), "{error}");
    for task in waiting {
        task.abort();
    }
}

#[test]
fn an_upstream_that_is_this_server_is_a_loop() {
    let addr = |s: &str| s.parse::<SocketAddr>().expect("addr");
    assert!(loops_back(addr("127.0.0.1:53"), addr("0.0.0.0:53")));
    assert!(loops_back(addr("127.0.0.53:53"), addr("0.0.0.0:53")));
    assert!(loops_back(addr("10.0.0.2:53"), addr("10.0.0.2:53")));
    assert!(!loops_back(addr("127.0.0.53:53"), addr("10.43.0.10:53")));
    assert!(!loops_back(addr("127.0.0.53:53"), addr("127.0.0.1:53")));
    assert!(!loops_back(addr("127.0.0.1:5353"), addr("0.0.0.0:53")));
    assert!(!loops_back(addr("10.0.0.2:53"), addr("0.0.0.0:53")));
}
