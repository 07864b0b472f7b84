//! `handler`: hickory's [`RequestHandler`] for the cluster DNS: one question per request, looked
//! up in the cluster records (authoritative: records, NODATA or NXDOMAIN with the zone's SOA) or
//! forwarded upstream; an ExternalName's CNAME is followed upstream for A and AAAA as CoreDNS's
//! does. Every answered request is counted in the metrics. Malformed packets never get here:
//! hickory answers FORMERR (or drops what has no header).

use std::sync::Arc;
use std::time::Instant;

use hickory_proto::op::{
    Edns, Header, HeaderCounts, Message, Metadata, OpCode, Query, ResponseCode,
};
use hickory_proto::rr::{DNSClass, LowerName, RData, Record, RecordType};
use hickory_server::net::runtime::Time;
use hickory_server::net::xfer::Protocol;
use hickory_server::server::{Request, RequestHandler, ResponseHandler, ResponseInfo};
use hickory_server::zone_handler::MessageResponseBuilder;
use parking_lot::RwLock;

use crate::forward::{Exchange, Forwarder, NetworkExchange};
use crate::lookup::{Answer, Zone, lookup};
use crate::metrics::{Metrics, Observation};
use crate::records::ClusterRecords;

/// The largest UDP payload advertised back to EDNS clients (the DNS flag day's 1232).
const MAX_UDP_PAYLOAD: u16 = 1232;

/// Answers cluster names from the records and forwards the rest.
pub struct Handler<E = NetworkExchange> {
    records: Arc<RwLock<ClusterRecords>>,
    zone: Zone,
    forwarder: Forwarder<E>,
    metrics: Arc<Metrics>,
}

/// A response before it is encoded: what the sections hold.
struct Reply {
    code: ResponseCode,
    authoritative: bool,
    recursion_available: bool,
    answers: Vec<Record>,
    authorities: Vec<Record>,
    additionals: Vec<Record>,
}

impl Reply {
    fn error(code: ResponseCode) -> Reply {
        Reply {
            code,
            authoritative: false,
            recursion_available: true,
            answers: Vec::new(),
            authorities: Vec::new(),
            additionals: Vec::new(),
        }
    }
}

impl<E: Exchange> Handler<E> {
    pub fn new(
        records: Arc<RwLock<ClusterRecords>>,
        zone: Zone,
        forwarder: Forwarder<E>,
        metrics: Arc<Metrics>,
    ) -> Self {
        Handler {
            records,
            zone,
            forwarder,
            metrics,
        }
    }

    /// The reply to one question.
    async fn answer(&self, query: &Query, name: &LowerName) -> Reply {
        let qtype = query.query_type();
        let (answer, serial) = if query.query_class() == DNSClass::IN {
            let records = self.records.read();
            let answer = lookup(&records, &self.zone, name, query.name(), qtype);
            (answer, records.generation())
        } else if self.zone.contains(name) {
            return Reply::error(ResponseCode::Refused);
        } else {
            (Answer::NotOurs, 0)
        };
        let negative = |code| Reply {
            code,
            authoritative: true,
            recursion_available: true,
            answers: Vec::new(),
            authorities: vec![self.zone.soa(serial)],
            additionals: Vec::new(),
        };
        match answer {
            Answer::Records {
                mut answers,
                additionals,
            } => {
                if matches!(qtype, RecordType::A | RecordType::AAAA) {
                    self.follow_cname(&mut answers, qtype).await;
                }
                Reply {
                    code: ResponseCode::NoError,
                    authoritative: true,
                    recursion_available: true,
                    answers,
                    authorities: Vec::new(),
                    additionals,
                }
            }
            Answer::NoData => negative(ResponseCode::NoError),
            Answer::NxDomain => negative(ResponseCode::NXDomain),
            Answer::NotOurs => self.forward(query).await,
        }
    }

    /// Appends the upstream's answer for an ExternalName's CNAME target (outside the zone).
    async fn follow_cname(&self, answers: &mut Vec<Record>, qtype: RecordType) {
        let Some(RData::CNAME(target)) = answers.last().map(|r| &r.data) else {
            return;
        };
        let target = target.0.clone();
        if self.zone.contains(&LowerName::new(&target)) {
            return;
        }
        let reply = self.forward(&Query::query(target, qtype)).await;
        answers.extend(reply.answers);
    }

    async fn forward(&self, query: &Query) -> Reply {
        match self.forwarder.resolve(query).await {
            Ok((message, upstream)) => {
                self.count_forward(&message, upstream);
                Reply {
                    code: message.metadata.response_code,
                    authoritative: false,
                    recursion_available: message.metadata.recursion_available,
                    answers: message.answers,
                    authorities: message.authorities,
                    additionals: message.additionals,
                }
            }
            Err(error @ crate::Error::Overloaded(_)) => {
                tracing::debug!(%error, "forwarding refused");
                Reply::error(ResponseCode::Refused)
            }
            Err(error) => {
                tracing::debug!(%error, "forwarding failed");
                Reply::error(ResponseCode::ServFail)
            }
        }
    }

    fn count_forward(&self, message: &Message, upstream: Option<std::net::SocketAddr>) {
        match upstream {
            None => {
                let kind = if message.answers.is_empty() {
                    "denial"
                } else {
                    "success"
                };
                self.metrics.cache(Some(kind));
            }
            Some(upstream) => {
                self.metrics.cache(None);
                self.metrics.forwarded(upstream);
            }
        }
    }
}

#[async_trait::async_trait]
impl<E: Exchange> RequestHandler for Handler<E> {
    async fn handle_request<R: ResponseHandler, T: Time>(
        &self,
        request: &Request,
        mut response_handle: R,
    ) -> ResponseInfo {
        let started = Instant::now();
        let mut metadata = Metadata::response_from_request(&request.metadata);
        let mut edns = Edns::new();
        let builder = match &request.edns {
            Some(theirs) => {
                edns.set_max_payload(theirs.max_payload().clamp(512, MAX_UDP_PAYLOAD));
                let mut builder = MessageResponseBuilder::from_message_request(request);
                builder.edns(&edns);
                builder
            }
            None => MessageResponseBuilder::from_message_request(request),
        };
        let queries = request.queries.queries();
        let reply = if request.metadata.op_code != OpCode::Query {
            Reply::error(ResponseCode::NotImp)
        } else if queries.len() != 1 {
            Reply::error(ResponseCode::FormErr)
        } else {
            self.answer(queries[0].original(), queries[0].name()).await
        };
        metadata.response_code = reply.code;
        metadata.authoritative = reply.authoritative;
        metadata.recursion_available = reply.recursion_available;
        let response = builder.build(
            metadata,
            reply.answers.iter(),
            reply.authorities.iter(),
            std::iter::empty(),
            reply.additionals.iter(),
        );
        let info = match response_handle.send_response(response).await {
            Ok(info) => info,
            Err(error) => {
                tracing::debug!(%error, src = %request.src(), "sending a response failed");
                metadata.response_code = ResponseCode::ServFail;
                ResponseInfo::from(Header {
                    metadata,
                    counts: HeaderCounts::default(),
                })
            }
        };
        self.metrics.observe(Observation {
            proto: match request.protocol() {
                Protocol::Tcp => "tcp",
                _ => "udp",
            },
            family: if request.src().is_ipv4() { "1" } else { "2" },
            qtype: queries
                .first()
                .map_or("other", |q| type_label(q.query_type())),
            rcode: rcode_label(reply.code),
            seconds: started.elapsed().as_secs_f64(),
        });
        info
    }
}

/// The `type` label: common types by name, the rest `other` (as CoreDNS, bounding cardinality).
fn type_label(qtype: RecordType) -> &'static str {
    match qtype {
        RecordType::A => "A",
        RecordType::AAAA => "AAAA",
        RecordType::SRV => "SRV",
        RecordType::PTR => "PTR",
        RecordType::CNAME => "CNAME",
        RecordType::TXT => "TXT",
        RecordType::MX => "MX",
        RecordType::NS => "NS",
        RecordType::SOA => "SOA",
        RecordType::ANY => "ANY",
        RecordType::HTTPS => "HTTPS",
        _ => "other",
    }
}

fn rcode_label(code: ResponseCode) -> &'static str {
    match code {
        ResponseCode::NoError => "NOERROR",
        ResponseCode::FormErr => "FORMERR",
        ResponseCode::ServFail => "SERVFAIL",
        ResponseCode::NXDomain => "NXDOMAIN",
        ResponseCode::NotImp => "NOTIMP",
        ResponseCode::Refused => "REFUSED",
        _ => "OTHER",
    }
}

#[cfg(test)]
#[path = "handler_tests.rs"]
mod tests;
