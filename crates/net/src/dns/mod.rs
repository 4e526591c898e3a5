//! Cluster DNS, served by the agent (the role CoreDNS plays in k3s): the cluster zone from the
//! informers' Services and EndpointSlices ([`zone`]), everything else asked of the node's own
//! resolvers ([`forward`]). UDP and TCP on one address; the wire format is `hickory-proto`'s,
//! the serving loop and the zone are ours (hickory's server and forwarder are a whole resolver
//! stack, with query-loss reports against its forwarder).

pub mod forward;
#[doc(hidden)]
pub mod fuzzing;
pub mod run;
pub mod zone;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hickory_proto::op::{Edns, Message, MessageType, OpCode, Query, ResponseCode};
use hickory_proto::rr::{RData, Record, RecordType};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, UdpSocket};
use tokio_util::sync::CancellationToken;

pub use forward::Forwarder;
pub use run::{run, DnsOptions};
pub use zone::ClusterZone;

/// The UDP payload a client without EDNS gets at most (RFC 1035).
const PLAIN_UDP_SIZE: usize = 512;
/// The UDP payload r8s offers with EDNS (the DNS flag day 2020 value).
const EDNS_UDP_SIZE: u16 = 1232;
/// How many CNAMEs an answer follows.
const MAX_CNAME_CHAIN: usize = 8;
/// How long a TCP connection may stay idle between queries.
const TCP_IDLE: Duration = Duration::from_secs(10);

pub struct DnsServer {
    pub zone: Arc<ClusterZone>,
    pub forwarder: Forwarder,
}

/// How the answer travels: UDP answers are cut to the client's payload size.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    Udp,
    Tcp,
}

impl DnsServer {
    pub fn new(zone: Arc<ClusterZone>, forwarder: Forwarder) -> Arc<Self> {
        Arc::new(Self { zone, forwarder })
    }

    /// The response to one query message, or `None` for what deserves no answer (not a
    /// query, too short to carry an ID).
    pub async fn respond(&self, request: &[u8], transport: Transport) -> Option<Vec<u8>> {
        let query = match Message::from_vec(request) {
            Ok(m) => m,
            Err(_) => {
                // Unparseable: FORMERR to the ID it carries, if it carries one.
                let id = u16::from_be_bytes([*request.first()?, *request.get(1)?]);
                if request.len() < 12 || request[2] & 0x80 != 0 {
                    return None;
                }
                return Message::error_msg(id, OpCode::Query, ResponseCode::FormErr)
                    .to_vec()
                    .ok();
            }
        };
        if query.message_type() != MessageType::Query {
            return None;
        }
        let mut response = Message::new();
        response
            .set_id(query.id())
            .set_message_type(MessageType::Response)
            .set_op_code(query.op_code())
            .set_recursion_desired(query.recursion_desired())
            .set_recursion_available(true)
            .set_checking_disabled(query.checking_disabled());
        response.add_queries(query.queries().iter().cloned());
        if query.extensions().is_some() {
            let mut edns = Edns::new();
            edns.set_max_payload(EDNS_UDP_SIZE);
            response.set_edns(edns);
        }
        match (query.op_code(), query.queries()) {
            (OpCode::Query, [q]) => self.answer(q, &mut response).await,
            (OpCode::Query, _) => {
                response.set_response_code(ResponseCode::FormErr);
            }
            _ => {
                response.set_response_code(ResponseCode::NotImp);
            }
        }
        let bytes = response.to_vec().ok()?;
        let limit = match query.extensions() {
            Some(e) => usize::from(e.max_payload().clamp(512, 4096)),
            None => PLAIN_UDP_SIZE,
        };
        if transport == Transport::Udp && bytes.len() > limit {
            // Too big for the client's datagram: the header and question with TC set, so it
            // asks again over TCP.
            let mut cut = Message::new();
            cut.set_id(response.id())
                .set_message_type(MessageType::Response)
                .set_op_code(response.op_code())
                .set_authoritative(response.authoritative())
                .set_recursion_desired(response.recursion_desired())
                .set_recursion_available(true)
                .set_response_code(response.response_code())
                .set_truncated(true);
            cut.add_queries(response.queries().iter().cloned());
            return cut.to_vec().ok();
        }
        Some(bytes)
    }

    /// Answer one question into `response`: from the zone, else from upstream; CNAMEs are
    /// followed (an ExternalName's target is resolved too, as CoreDNS does).
    async fn answer(&self, q: &Query, response: &mut Message) {
        let mut name = q.name().clone();
        let mut answers: Vec<Record> = Vec::new();
        let mut authoritative = None;
        for _ in 0..MAX_CNAME_CHAIN {
            match self.zone.answer(&name, q.query_type()) {
                zone::Answer::Records(code, records) => {
                    authoritative.get_or_insert(true);
                    let next = follow(&records, q.query_type());
                    answers.extend(records);
                    match next {
                        Some(target) => {
                            name = target;
                            continue;
                        }
                        None => {
                            if answers.is_empty() {
                                response.add_name_server(self.zone.authority());
                            }
                            response.set_response_code(code);
                        }
                    }
                }
                zone::Answer::NotOurs => {
                    authoritative.get_or_insert(false);
                    let asked = Query::query(name.clone(), q.query_type());
                    match self.forwarder.resolve(&asked).await {
                        Ok(upstream) => {
                            answers.extend(upstream.answers().iter().cloned());
                            response.add_name_servers(upstream.name_servers().iter().cloned());
                            response.set_response_code(upstream.response_code());
                        }
                        Err(e) => {
                            tracing::debug!(name = %name, error = %e, "dns: upstream failed");
                            response.set_response_code(ResponseCode::ServFail);
                        }
                    }
                }
            }
            break;
        }
        response.set_authoritative(authoritative.unwrap_or(false));
        response.add_answers(answers);
    }
}

/// The target of a CNAME answer to follow for a question of `qtype`, if the answer is one.
fn follow(records: &[Record], qtype: RecordType) -> Option<hickory_proto::rr::Name> {
    if matches!(qtype, RecordType::CNAME | RecordType::ANY) {
        return None;
    }
    match records {
        [r] => match r.data() {
            RData::CNAME(c) => Some(c.0.clone()),
            _ => None,
        },
        _ => None,
    }
}

/// Serve DNS on `addr` (UDP and TCP) until `stop`. Returns the bound UDP and TCP addresses
/// (the port is chosen when `addr`'s is 0) once both listen.
pub async fn serve(
    server: Arc<DnsServer>,
    addr: SocketAddr,
    stop: CancellationToken,
) -> std::io::Result<(SocketAddr, SocketAddr)> {
    let udp = Arc::new(UdpSocket::bind(addr).await?);
    let tcp = TcpListener::bind(udp.local_addr()?).await?;
    let bound = (udp.local_addr()?, tcp.local_addr()?);
    tokio::spawn(serve_udp(server.clone(), udp, stop.clone()));
    tokio::spawn(serve_tcp(server, tcp, stop));
    Ok(bound)
}

async fn serve_udp(server: Arc<DnsServer>, socket: Arc<UdpSocket>, stop: CancellationToken) {
    let mut buf = vec![0u8; 4096];
    loop {
        let (n, peer) = tokio::select! {
            _ = stop.cancelled() => return,
            r = socket.recv_from(&mut buf) => match r {
                Ok(r) => r,
                // ICMP errors from earlier sends surface here; the socket still serves.
                Err(_) => continue,
            },
        };
        let request = buf[..n].to_vec();
        let (server, socket) = (server.clone(), socket.clone());
        tokio::spawn(async move {
            if let Some(answer) = server.respond(&request, Transport::Udp).await {
                let _ = socket.send_to(&answer, peer).await;
            }
        });
    }
}

async fn serve_tcp(server: Arc<DnsServer>, listener: TcpListener, stop: CancellationToken) {
    loop {
        let (mut conn, _) = tokio::select! {
            _ = stop.cancelled() => return,
            r = listener.accept() => match r {
                Ok(r) => r,
                Err(_) => continue,
            },
        };
        let (server, stop) = (server.clone(), stop.clone());
        tokio::spawn(async move {
            loop {
                let read = async {
                    let n = conn.read_u16().await?;
                    let mut request = vec![0u8; usize::from(n)];
                    conn.read_exact(&mut request).await?;
                    Ok::<_, std::io::Error>(request)
                };
                let request = tokio::select! {
                    _ = stop.cancelled() => return,
                    r = tokio::time::timeout(TCP_IDLE, read) => match r {
                        Ok(Ok(r)) => r,
                        _ => return,
                    },
                };
                let Some(answer) = server.respond(&request, Transport::Tcp).await else {
                    return;
                };
                let Ok(len) = u16::try_from(answer.len()) else {
                    return;
                };
                if conn.write_all(&len.to_be_bytes()).await.is_err() || conn.write_all(&answer).await.is_err()
                {
                    return;
                }
            }
        });
    }
}
