//! Names outside the cluster: asked of the node's own resolvers (the `nameserver`s of its
//! resolv.conf, never the cluster DNS address itself), over UDP and, when an answer is
//! truncated, TCP; answers cached for their TTL, at most 30 s (k3s's CoreDNS `cache 30`),
//! NXDOMAIN and NODATA for the SOA's minimum within the same bound.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use hickory_proto::op::{Message, MessageType, OpCode, Query, ResponseCode};
use hickory_proto::rr::{DNSClass, Name, RData, RecordType};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The longest an answer is kept.
const MAX_CACHE_TTL: u32 = 30;
/// How many answers are kept at most (then the expired go, and if that is not enough, all).
const MAX_CACHE_ENTRIES: usize = 10_000;
/// How long one upstream has to answer before the next is asked.
const UPSTREAM_TIMEOUT: Duration = Duration::from_secs(2);

type CacheKey = (Name, RecordType, DNSClass);

pub struct Forwarder {
    upstreams: Vec<SocketAddr>,
    cache: Mutex<HashMap<CacheKey, (Message, Instant, Instant)>>,
}

/// The `nameserver` addresses of a resolv.conf, on port 53, without `exclude`.
pub fn nameservers(resolv_conf: &str, exclude: Option<IpAddr>) -> Vec<SocketAddr> {
    resolv_conf
        .lines()
        .filter_map(|l| {
            let mut words = l.split_whitespace();
            (words.next() == Some("nameserver"))
                .then(|| words.next())
                .flatten()
        })
        .filter_map(|a| a.split('%').next().and_then(|a| a.parse::<IpAddr>().ok()))
        .filter(|a| Some(*a) != exclude)
        .map(|a| SocketAddr::new(a, 53))
        .collect()
}

impl Forwarder {
    pub fn new(upstreams: Vec<SocketAddr>) -> Self {
        Self {
            upstreams,
            cache: Mutex::new(HashMap::new()),
        }
    }

    pub fn upstreams(&self) -> &[SocketAddr] {
        &self.upstreams
    }

    /// The answer to `query`, from the cache or an upstream. Its ID is not the client's.
    pub async fn resolve(&self, query: &Query) -> Result<Message, String> {
        let key = (
            query.name().to_lowercase(),
            query.query_type(),
            query.query_class(),
        );
        if let Some(hit) = self.cached(&key) {
            return Ok(hit);
        }
        if self.upstreams.is_empty() {
            return Err("no upstream resolvers".into());
        }
        let mut last_error = String::new();
        for upstream in &self.upstreams {
            match ask(*upstream, query).await {
                Ok(answer) => {
                    self.store(key, &answer);
                    return Ok(answer);
                }
                Err(e) => last_error = format!("{upstream}: {e}"),
            }
        }
        Err(last_error)
    }

    /// A cached answer with its TTLs counted down, if one is still fresh.
    fn cached(&self, key: &CacheKey) -> Option<Message> {
        let cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        let (answer, stored, expires) = cache.get(key)?;
        let now = Instant::now();
        if now >= *expires {
            return None;
        }
        let elapsed = now.duration_since(*stored).as_secs() as u32;
        let mut answer = answer.clone();
        let count_down = |r: &mut hickory_proto::rr::Record| {
            let ttl = r.ttl().saturating_sub(elapsed);
            r.set_ttl(ttl);
        };
        answer.answers_mut().iter_mut().for_each(count_down);
        answer.name_servers_mut().iter_mut().for_each(count_down);
        Some(answer)
    }

    fn store(&self, key: CacheKey, answer: &Message) {
        let ttl = match answer.response_code() {
            ResponseCode::NoError if !answer.answers().is_empty() => {
                answer.answers().iter().map(|r| r.ttl()).min().unwrap_or(0)
            }
            // Negative: the SOA's minimum (RFC 2308), bounded by its own TTL.
            ResponseCode::NoError | ResponseCode::NXDomain => answer
                .name_servers()
                .iter()
                .find_map(|r| match r.data() {
                    RData::SOA(soa) => Some(soa.minimum().min(r.ttl())),
                    _ => None,
                })
                .unwrap_or(0),
            _ => 0,
        }
        .min(MAX_CACHE_TTL);
        if ttl == 0 {
            return;
        }
        let now = Instant::now();
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        if cache.len() >= MAX_CACHE_ENTRIES {
            cache.retain(|_, (_, _, expires)| *expires > now);
            if cache.len() >= MAX_CACHE_ENTRIES {
                cache.clear();
            }
        }
        cache.insert(
            key,
            (answer.clone(), now, now + Duration::from_secs(u64::from(ttl))),
        );
    }
}

/// One query to one upstream: UDP, then TCP if the answer was truncated.
async fn ask(upstream: SocketAddr, query: &Query) -> Result<Message, String> {
    // A random ID (and a fresh source port per query) against spoofed answers.
    let id: u16 = fastrand::u16(..);
    let mut request = Message::new();
    request
        .set_id(id)
        .set_message_type(MessageType::Query)
        .set_op_code(OpCode::Query)
        .set_recursion_desired(true)
        .add_query(query.clone());
    let bytes = request.to_vec().map_err(|e| e.to_string())?;
    let answer = tokio::time::timeout(UPSTREAM_TIMEOUT, ask_udp(upstream, &bytes, id))
        .await
        .map_err(|_| "timed out".to_string())??;
    if !answer.truncated() {
        return Ok(answer);
    }
    tokio::time::timeout(UPSTREAM_TIMEOUT, ask_tcp(upstream, &bytes))
        .await
        .map_err(|_| "timed out over TCP".to_string())?
}

async fn ask_udp(upstream: SocketAddr, bytes: &[u8], id: u16) -> Result<Message, String> {
    let local: SocketAddr = if upstream.is_ipv4() {
        "0.0.0.0:0".parse().expect("address")
    } else {
        "[::]:0".parse().expect("address")
    };
    let socket = tokio::net::UdpSocket::bind(local)
        .await
        .map_err(|e| e.to_string())?;
    socket.connect(upstream).await.map_err(|e| e.to_string())?;
    socket.send(bytes).await.map_err(|e| e.to_string())?;
    let mut buf = vec![0u8; 65535];
    loop {
        let n = socket.recv(&mut buf).await.map_err(|e| e.to_string())?;
        // Anything that is not the answer to this query (late, spoofed) is ignored.
        if let Ok(m) = Message::from_vec(&buf[..n]) {
            if m.id() == id && m.message_type() == MessageType::Response {
                return Ok(m);
            }
        }
    }
}

async fn ask_tcp(upstream: SocketAddr, bytes: &[u8]) -> Result<Message, String> {
    let mut tcp = tokio::net::TcpStream::connect(upstream)
        .await
        .map_err(|e| e.to_string())?;
    let len = u16::try_from(bytes.len()).map_err(|_| "query too long".to_string())?;
    tcp.write_all(&len.to_be_bytes())
        .await
        .map_err(|e| e.to_string())?;
    tcp.write_all(bytes).await.map_err(|e| e.to_string())?;
    let n = tcp.read_u16().await.map_err(|e| e.to_string())?;
    let mut buf = vec![0u8; usize::from(n)];
    tcp.read_exact(&mut buf).await.map_err(|e| e.to_string())?;
    Message::from_vec(&buf).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nameservers_come_from_resolv_conf_without_the_cluster_dns() {
        let conf = "# generated\nsearch example.com\nnameserver 192.0.2.1\nnameserver 10.43.0.10\nnameserver fe80::1%eth0\noptions ndots:2\n";
        let got = nameservers(conf, Some("10.43.0.10".parse().unwrap()));
        assert_eq!(
            got,
            vec![
                "192.0.2.1:53".parse::<SocketAddr>().unwrap(),
                "[fe80::1]:53".parse().unwrap()
            ]
        );
    }
}
