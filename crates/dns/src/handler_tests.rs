//! The request handler end to end in memory: raw request bytes in, encoded response out, with a
//! fake upstream exchange.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;

use hickory_proto::op::{Message, MessageType, OpCode, Query, ResponseCode};
use hickory_proto::rr::{DNSClass, Name, RData, Record, RecordType};
use hickory_proto::serialize::binary::BinEncoder;
use hickory_server::net::NetError;
use hickory_server::net::runtime::TokioTime;
use hickory_server::net::xfer::Protocol;
use hickory_server::server::{Request, RequestHandler, ResponseHandler, ResponseInfo};
use hickory_server::zone_handler::MessageResponse;
use parking_lot::{Mutex, RwLock};
use serde_json::json;

use super::Handler;
use crate::forward::{Exchange, Forwarder};
use crate::lookup::Zone;
use crate::metrics::Metrics;
use crate::records::ClusterRecords;

/// Answers A 192.0.2.9 (TTL 60) for any name.
struct FakeUpstream;

#[async_trait::async_trait]
impl Exchange for FakeUpstream {
    async fn exchange(&self, _: SocketAddr, query: &Message) -> io::Result<Message> {
        let mut answer = Message::new(query.metadata.id, MessageType::Response, OpCode::Query);
        answer.metadata.recursion_available = true;
        let q = query.queries[0].clone();
        let a = RData::A(
            "192.0.2.9"
                .parse::<std::net::Ipv4Addr>()
                .expect("ip")
                .into(),
        );
        answer.add_answer(Record::from_rdata(q.name().clone(), 60, a));
        answer.add_query(q);
        Ok(answer)
    }
}

/// Keeps the encoded response.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

#[async_trait::async_trait]
impl ResponseHandler for Captured {
    async fn send_response<'a>(
        &mut self,
        response: MessageResponse<
            '_,
            'a,
            impl Iterator<Item = &'a Record> + Send + 'a,
            impl Iterator<Item = &'a Record> + Send + 'a,
            impl Iterator<Item = &'a Record> + Send + 'a,
            impl Iterator<Item = &'a Record> + Send + 'a,
        >,
    ) -> Result<ResponseInfo, NetError> {
        let mut bytes = Vec::new();
        let info = response
            .destructive_emit(&mut BinEncoder::new(&mut bytes))
            .map_err(|e| NetError::from(e.to_string()))?;
        *self.0.lock() = bytes;
        Ok(info)
    }
}

fn handler() -> Handler<FakeUpstream> {
    let mut records = ClusterRecords::default();
    let ext = json!({"metadata": {"namespace": "prod", "name": "ext"},
                     "spec": {"type": "ExternalName", "externalName": "db.example.org"}});
    records.apply_service(&serde_json::from_value(ext).expect("svc"));
    let upstream: SocketAddr = "192.0.2.53:53".parse().expect("addr");
    Handler::new(
        Arc::new(RwLock::new(records)),
        Zone::new("cluster.local").expect("zone"),
        Forwarder::new(vec![upstream], FakeUpstream).expect("forwarder"),
        Arc::new(Metrics::default()),
    )
}

async fn respond(message: &Message) -> Message {
    let request = Request::from_bytes(
        message.to_vec().expect("encode"),
        "127.0.0.1:5353".parse().expect("addr"),
        Protocol::Udp,
    )
    .expect("a request");
    let captured = Captured::default();
    handler()
        .handle_request::<_, TokioTime>(&request, captured.clone())
        .await;
    let bytes = captured.0.lock().clone();
    Message::from_vec(&bytes).expect("a response")
}

fn question(name: &str, qtype: RecordType) -> Query {
    Query::query(Name::from_ascii(name).expect("name"), qtype)
}

fn request(queries: Vec<Query>) -> Message {
    let mut message = Message::new(7, MessageType::Query, OpCode::Query);
    for q in queries {
        message.add_query(q);
    }
    message
}

#[tokio::test]
async fn nxdomain_carries_the_zone_soa_with_the_negative_ttl() {
    let response = respond(&request(vec![question(
        "nope.prod.svc.cluster.local.",
        RecordType::A,
    )]))
    .await;
    assert_eq!(response.metadata.response_code, ResponseCode::NXDomain);
    assert!(response.metadata.authoritative);
    assert_eq!(response.metadata.id, 7);
    let soa = &response.authorities[0];
    assert_eq!(soa.name, Name::from_ascii("cluster.local.").expect("name"));
    assert_eq!(soa.ttl, 5);
}

#[tokio::test]
async fn other_names_are_forwarded_and_not_authoritative() {
    let response = respond(&request(vec![question("example.org.", RecordType::A)])).await;
    assert_eq!(response.metadata.response_code, ResponseCode::NoError);
    assert!(!response.metadata.authoritative);
    assert!(response.metadata.recursion_available);
    assert_eq!(response.answers.len(), 1);
}

#[tokio::test]
async fn an_external_name_cname_is_followed_upstream() {
    let response = respond(&request(vec![question(
        "ext.prod.svc.cluster.local.",
        RecordType::A,
    )]))
    .await;
    let data: Vec<String> = response
        .answers
        .iter()
        .map(|r| r.data.to_string())
        .collect();
    assert_eq!(data, vec!["db.example.org.", "192.0.2.9"]);
}

#[tokio::test]
async fn two_questions_are_formerr_and_other_opcodes_notimp() {
    let two = request(vec![
        question("a.cluster.local.", RecordType::A),
        question("b.cluster.local.", RecordType::A),
    ]);
    assert_eq!(
        respond(&two).await.metadata.response_code,
        ResponseCode::FormErr
    );
    let mut notify = request(vec![question("cluster.local.", RecordType::SOA)]);
    notify.metadata.op_code = OpCode::Notify;
    assert_eq!(
        respond(&notify).await.metadata.response_code,
        ResponseCode::NotImp
    );
}

#[tokio::test]
async fn another_class_under_the_zone_is_refused() {
    let mut chaos = question("kubernetes.default.svc.cluster.local.", RecordType::A);
    chaos.set_query_class(DNSClass::CH);
    let response = respond(&request(vec![chaos])).await;
    assert_eq!(response.metadata.response_code, ResponseCode::Refused);
}
