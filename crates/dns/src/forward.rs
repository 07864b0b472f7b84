//! `forward`: questions outside the cluster domain, sent to upstream resolvers (the host's, from
//! `/etc/resolv.conf`, or `--upstream`) in order until one answers, through a small cache that
//! keeps an answer for its smallest TTL (a negative one for its SOA minimum), at most 30 s as
//! CoreDNS's default Corefile (`cache 30`). The network exchange sits behind [`Exchange`].

use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use hickory_proto::op::{Edns, Message, MessageType, OpCode, Query, ResponseCode};
use hickory_proto::rr::{DNSClass, LowerName, RData, RecordType};
use parking_lot::Mutex;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::Instant;

use crate::{Error, Result};

/// The longest an answer is cached (CoreDNS's default Corefile `cache 30`).
pub const MAX_CACHE_TTL: u32 = 30;

/// How many answers the cache holds at most (CoreDNS's cache default capacity, 9984).
pub const CACHE_CAPACITY: usize = 9984;

/// Questions forwarded at once at most; beyond, new ones are REFUSED at once (CoreDNS's
/// `forward` option `max_concurrent`), so a flood of uncached names to a slow upstream cannot
/// pile up tasks and buffers.
pub const MAX_CONCURRENT: usize = 1000;

/// How long one upstream gets to answer before the next is tried.
pub const UPSTREAM_TIMEOUT: Duration = Duration::from_secs(2);

/// Sends one query to one upstream resolver and returns its response.
#[async_trait::async_trait]
pub trait Exchange: Send + Sync + Unpin + 'static {
    async fn exchange(&self, upstream: SocketAddr, query: &Message) -> io::Result<Message>;
}

/// The real exchange: UDP, then TCP when the UDP answer comes back truncated.
#[derive(Debug, Clone)]
pub struct NetworkExchange {
    pub timeout: Duration,
}

impl Default for NetworkExchange {
    fn default() -> Self {
        NetworkExchange {
            timeout: UPSTREAM_TIMEOUT,
        }
    }
}

#[async_trait::async_trait]
impl Exchange for NetworkExchange {
    async fn exchange(&self, upstream: SocketAddr, query: &Message) -> io::Result<Message> {
        let bytes = query.to_vec().map_err(io::Error::other)?;
        let answer = tokio::time::timeout(self.timeout, async {
            let answer = udp_exchange(upstream, &bytes, query.metadata.id).await?;
            if answer.metadata.truncation {
                tcp_exchange(upstream, &bytes).await
            } else {
                Ok(answer)
            }
        })
        .await
        .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "upstream timed out"))??;
        if answer.metadata.id != query.metadata.id {
            return Err(io::Error::other("upstream answered another query id"));
        }
        Ok(answer)
    }
}

async fn udp_exchange(upstream: SocketAddr, bytes: &[u8], id: u16) -> io::Result<Message> {
    let local: SocketAddr = if upstream.is_ipv4() {
        ([0, 0, 0, 0], 0).into()
    } else {
        (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
    };
    let socket = tokio::net::UdpSocket::bind(local).await?;
    socket.connect(upstream).await?;
    socket.send(bytes).await?;
    let mut buf = vec![0u8; 65535];
    loop {
        let n = socket.recv(&mut buf).await?;
        // a stray or malformed datagram is not the answer: keep waiting (until the timeout)
        if let Ok(answer) = Message::from_vec(&buf[..n])
            && answer.metadata.id == id
            && answer.metadata.message_type == MessageType::Response
        {
            return Ok(answer);
        }
    }
}

async fn tcp_exchange(upstream: SocketAddr, bytes: &[u8]) -> io::Result<Message> {
    let mut stream = tokio::net::TcpStream::connect(upstream).await?;
    let len = u16::try_from(bytes.len()).map_err(io::Error::other)?;
    stream.write_all(&len.to_be_bytes()).await?;
    stream.write_all(bytes).await?;
    let len = stream.read_u16().await?;
    let mut buf = vec![0u8; usize::from(len)];
    stream.read_exact(&mut buf).await?;
    Message::from_vec(&buf).map_err(io::Error::other)
}

/// The nameservers of a resolv.conf (port 53), in order.
pub fn resolv_conf_nameservers(text: &str) -> Vec<SocketAddr> {
    text.lines()
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            if words.next() != Some("nameserver") {
                return None;
            }
            // a scoped IPv6 address (fe80::1%eth0) is not usable from here
            let ip: std::net::IpAddr = words.next()?.parse().ok()?;
            Some(SocketAddr::new(ip, 53))
        })
        .collect()
}

/// Whether `upstream` is this server itself, listening on `listen` (a forwarding loop, which
/// CoreDNS's `loop` plugin detects at run time): the same port on the same address, or on
/// a loopback address when listening on every address.
pub fn loops_back(upstream: SocketAddr, listen: SocketAddr) -> bool {
    if upstream.port() != listen.port() {
        return false;
    }
    let (theirs, ours) = (upstream.ip(), listen.ip());
    theirs == ours || (ours.is_unspecified() && theirs.is_loopback())
}

type CacheKey = (LowerName, RecordType, DNSClass);

struct Cached {
    answer: Message,
    stored: Instant,
    ttl: u32,
}

/// Forwards questions upstream through the cache.
pub struct Forwarder<E = NetworkExchange> {
    upstreams: Vec<SocketAddr>,
    exchange: E,
    /// Permits for questions in flight upstream ([`MAX_CONCURRENT`]).
    in_flight: tokio::sync::Semaphore,
    /// Guards only map operations, never held across an await.
    cache: Mutex<HashMap<CacheKey, Cached>>,
}

impl<E: Exchange> Forwarder<E> {
    pub fn new(upstreams: Vec<SocketAddr>, exchange: E) -> Result<Self> {
        if upstreams.is_empty() {
            return Err(Error::NoUpstream(
                "give --upstream or a nameserver in /etc/resolv.conf".into(),
            ));
        }
        Ok(Forwarder {
            upstreams,
            exchange,
            in_flight: tokio::sync::Semaphore::new(MAX_CONCURRENT),
            cache: Mutex::new(HashMap::new()),
        })
    }

    /// The answer to `query` (its id is the forwarder's, not the client's) and the upstream that
    /// gave it, `None` when it came from the cache.
    pub async fn resolve(&self, query: &Query) -> Result<(Message, Option<SocketAddr>)> {
        let key = (
            LowerName::new(query.name()),
            query.query_type(),
            query.query_class(),
        );
        if let Some(answer) = self.cached(&key, Instant::now()) {
            return Ok((answer, None));
        }
        let Ok(_permit) = self.in_flight.try_acquire() else {
            return Err(Error::Overloaded(MAX_CONCURRENT));
        };
        let mut request = Message::new(fastrand::u16(..), MessageType::Query, OpCode::Query);
        request.metadata.recursion_desired = true;
        request.add_query(query.clone());
        let mut edns = Edns::new();
        edns.set_max_payload(1232);
        request.set_edns(edns);
        let mut last_error = String::from("no upstream tried");
        for upstream in &self.upstreams {
            match self.exchange.exchange(*upstream, &request).await {
                Ok(answer) => {
                    self.store(key, &answer, Instant::now());
                    return Ok((answer, Some(*upstream)));
                }
                Err(error) => last_error = format!("{upstream}: {error}"),
            }
        }
        Err(Error::Forward {
            name: query.name().to_string(),
            qtype: query.query_type().to_string(),
            reason: last_error,
        })
    }

    fn cached(&self, key: &CacheKey, now: Instant) -> Option<Message> {
        let mut cache = self.cache.lock();
        let entry = cache.get(key)?;
        let age = u32::try_from(now.duration_since(entry.stored).as_secs()).unwrap_or(u32::MAX);
        if age >= entry.ttl {
            cache.remove(key);
            return None;
        }
        let mut answer = entry.answer.clone();
        for record in answer
            .answers
            .iter_mut()
            .chain(answer.authorities.iter_mut())
            .chain(answer.additionals.iter_mut())
        {
            record.ttl = record.ttl.saturating_sub(age);
        }
        Some(answer)
    }

    fn store(&self, key: CacheKey, answer: &Message, now: Instant) {
        let Some(ttl) = cache_ttl(answer) else {
            return;
        };
        let mut cache = self.cache.lock();
        if cache.len() >= CACHE_CAPACITY {
            cache.retain(|_, c| now.duration_since(c.stored).as_secs() < u64::from(c.ttl));
            if cache.len() >= CACHE_CAPACITY {
                return;
            }
        }
        cache.insert(
            key,
            Cached {
                answer: answer.clone(),
                stored: now,
                ttl,
            },
        );
    }
}

/// How long an answer may be cached: the smallest answer TTL for a positive answer, the SOA's
/// minimum (or its TTL, if smaller) for NXDOMAIN or NODATA, never longer than
/// [`MAX_CACHE_TTL`]; `None` for failures and negative answers without an SOA.
fn cache_ttl(answer: &Message) -> Option<u32> {
    let ttl = match answer.metadata.response_code {
        ResponseCode::NoError if !answer.answers.is_empty() => {
            answer.answers.iter().map(|r| r.ttl).min()?
        }
        ResponseCode::NoError | ResponseCode::NXDomain => {
            answer.authorities.iter().find_map(|r| match &r.data {
                RData::SOA(soa) => Some(soa.minimum.min(r.ttl)),
                _ => None,
            })?
        }
        _ => return None,
    };
    Some(ttl.min(MAX_CACHE_TTL)).filter(|t| *t > 0)
}

#[cfg(test)]
#[path = "forward_tests.rs"]
mod tests;
