//! The DNS server on loopback, asked as a pod's resolver asks: over UDP and TCP, cluster names
//! from the zone, other names through a fake upstream resolver (also on loopback).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use hickory_proto::op::{Edns, Message, MessageType, OpCode, Query, ResponseCode};
use hickory_proto::rr::rdata::A;
use hickory_proto::rr::{Name, RData, Record, RecordType};
use r8s_net::dns::{self, ClusterZone, DnsServer, Forwarder};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

/// An upstream resolver that answers every A question with 192.0.2.7 (TTL 60), and counts
/// what it was asked.
async fn fake_upstream(stop: CancellationToken) -> (SocketAddr, Arc<AtomicUsize>) {
    let socket = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let addr = socket.local_addr().unwrap();
    let asked = Arc::new(AtomicUsize::new(0));
    let count = asked.clone();
    tokio::spawn(async move {
        let mut buf = vec![0u8; 4096];
        loop {
            let (n, peer) = tokio::select! {
                _ = stop.cancelled() => return,
                r = socket.recv_from(&mut buf) => r.unwrap(),
            };
            count.fetch_add(1, Ordering::SeqCst);
            let q = Message::from_vec(&buf[..n]).unwrap();
            let mut a = Message::new();
            a.set_id(q.id())
                .set_message_type(MessageType::Response)
                .set_op_code(OpCode::Query)
                .set_recursion_available(true);
            a.add_queries(q.queries().iter().cloned());
            let question = &q.queries()[0];
            if question.query_type() == RecordType::A {
                a.add_answer(Record::from_rdata(
                    question.name().clone(),
                    60,
                    RData::A(A("192.0.2.7".parse().unwrap())),
                ));
            }
            socket.send_to(&a.to_vec().unwrap(), peer).await.unwrap();
        }
    });
    (addr, asked)
}

fn zone() -> Arc<ClusterZone> {
    let z = ClusterZone::new("cluster.local", 5).unwrap();
    z.set_service(
        &serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"clusterIP": "10.43.0.20", "ports": [{"name": "http", "port": 80}]}
        }))
        .unwrap(),
    );
    z.set_service(
        &serde_json::from_value(serde_json::json!({
            "metadata": {"name": "ext", "namespace": "default"},
            "spec": {"type": "ExternalName", "externalName": "www.example.org"}
        }))
        .unwrap(),
    );
    z.set_service(
        &serde_json::from_value(serde_json::json!({
            "metadata": {"name": "many", "namespace": "default"},
            "spec": {"clusterIP": "None"}
        }))
        .unwrap(),
    );
    let endpoints: Vec<_> = (0..100)
        .map(|i| serde_json::json!({"addresses": [format!("10.42.{}.{}", i / 200, i % 200 + 1)]}))
        .collect();
    z.set_slice(
        &serde_json::from_value(serde_json::json!({
            "metadata": {"name": "many-1", "namespace": "default",
                         "labels": {"kubernetes.io/service-name": "many"}},
            "addressType": "IPv4",
            "endpoints": endpoints,
        }))
        .unwrap(),
    );
    Arc::new(z)
}

fn query(name: &str, qtype: RecordType, edns: bool) -> (u16, Vec<u8>) {
    let id = fastrand_id();
    let mut m = Message::new();
    m.set_id(id)
        .set_message_type(MessageType::Query)
        .set_op_code(OpCode::Query)
        .set_recursion_desired(true)
        .add_query(Query::query(Name::from_ascii(name).unwrap(), qtype));
    if edns {
        let mut e = Edns::new();
        e.set_max_payload(4096);
        m.set_edns(e);
    }
    (id, m.to_vec().unwrap())
}

fn fastrand_id() -> u16 {
    static NEXT: AtomicUsize = AtomicUsize::new(1);
    NEXT.fetch_add(1, Ordering::SeqCst) as u16
}

async fn udp(server: SocketAddr, name: &str, qtype: RecordType, edns: bool) -> Message {
    let (id, bytes) = query(name, qtype, edns);
    let socket = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    socket.send_to(&bytes, server).await.unwrap();
    let mut buf = vec![0u8; 65535];
    let n = tokio::time::timeout(Duration::from_secs(5), socket.recv(&mut buf))
        .await
        .expect("an answer within 5 s")
        .unwrap();
    let m = Message::from_vec(&buf[..n]).unwrap();
    assert_eq!(m.id(), id);
    m
}

async fn tcp(server: SocketAddr, name: &str, qtype: RecordType) -> Message {
    let (id, bytes) = query(name, qtype, false);
    let mut conn = tokio::net::TcpStream::connect(server).await.unwrap();
    conn.write_all(&(bytes.len() as u16).to_be_bytes()).await.unwrap();
    conn.write_all(&bytes).await.unwrap();
    let n = conn.read_u16().await.unwrap();
    let mut buf = vec![0u8; n as usize];
    conn.read_exact(&mut buf).await.unwrap();
    let m = Message::from_vec(&buf).unwrap();
    assert_eq!(m.id(), id);
    m
}

fn addresses(m: &Message) -> Vec<String> {
    m.answers()
        .iter()
        .filter(|r| r.record_type() == RecordType::A)
        .map(|r| r.data().to_string())
        .collect()
}

#[tokio::test]
async fn cluster_names_from_the_zone_and_the_rest_from_upstream() {
    let stop = CancellationToken::new();
    let _guard = stop.clone().drop_guard();
    let (upstream, asked) = fake_upstream(stop.clone()).await;
    let server = DnsServer::new(zone(), Forwarder::new(vec![upstream]));
    let (addr, tcp_addr) = dns::serve(server, "127.0.0.1:0".parse().unwrap(), stop.clone())
        .await
        .unwrap();
    assert_eq!(addr, tcp_addr);

    let m = udp(addr, "web.default.svc.cluster.local.", RecordType::A, false).await;
    assert_eq!(m.response_code(), ResponseCode::NoError);
    assert!(m.authoritative());
    assert_eq!(addresses(&m), vec!["10.43.0.20"]);

    // NXDOMAIN and NODATA carry the zone's SOA.
    let m = udp(addr, "nope.default.svc.cluster.local.", RecordType::A, false).await;
    assert_eq!(m.response_code(), ResponseCode::NXDomain);
    assert_eq!(m.name_servers()[0].record_type(), RecordType::SOA);
    let m = udp(addr, "web.default.svc.cluster.local.", RecordType::AAAA, false).await;
    assert_eq!(m.response_code(), ResponseCode::NoError);
    assert!(m.answers().is_empty());
    assert_eq!(m.name_servers()[0].record_type(), RecordType::SOA);
    assert_eq!(asked.load(Ordering::SeqCst), 0, "cluster names never go upstream");

    // Outside names go upstream once, then come from the cache.
    let m = udp(addr, "www.example.com.", RecordType::A, false).await;
    assert_eq!(addresses(&m), vec!["192.0.2.7"]);
    assert!(!m.authoritative());
    let m = udp(addr, "WWW.example.com.", RecordType::A, false).await;
    assert_eq!(addresses(&m), vec!["192.0.2.7"]);
    assert_eq!(asked.load(Ordering::SeqCst), 1, "the second answer is cached");

    // An ExternalName answers its CNAME and the target's address.
    let m = udp(addr, "ext.default.svc.cluster.local.", RecordType::A, false).await;
    assert_eq!(m.answers()[0].data().to_string(), "www.example.org.");
    assert_eq!(addresses(&m), vec!["192.0.2.7"]);

    // Over TCP too.
    let m = tcp(tcp_addr, "web.default.svc.cluster.local.", RecordType::A).await;
    assert_eq!(addresses(&m), vec!["10.43.0.20"]);
}

#[tokio::test]
async fn big_answers_are_truncated_over_udp_and_whole_over_tcp() {
    let stop = CancellationToken::new();
    let _guard = stop.clone().drop_guard();
    let server = DnsServer::new(zone(), Forwarder::new(Vec::new()));
    let (addr, _) = dns::serve(server, "127.0.0.1:0".parse().unwrap(), stop.clone())
        .await
        .unwrap();
    // 100 A records are about 1.6 KB: more than 512 bytes.
    let m = udp(addr, "many.default.svc.cluster.local.", RecordType::A, false).await;
    assert!(m.truncated());
    assert!(m.answers().is_empty());
    // With EDNS (4096 offered) they fit.
    let m = udp(addr, "many.default.svc.cluster.local.", RecordType::A, true).await;
    assert!(!m.truncated());
    assert_eq!(addresses(&m).len(), 100);
    assert!(m.extensions().is_some(), "EDNS answered with EDNS");
    let m = tcp(addr, "many.default.svc.cluster.local.", RecordType::A).await;
    assert!(!m.truncated());
    assert_eq!(addresses(&m).len(), 100);
    // No upstream to ask: SERVFAIL for an outside name, at once.
    let m = udp(addr, "example.org.", RecordType::A, false).await;
    assert_eq!(m.response_code(), ResponseCode::ServFail);
    // Garbage with an ID gets FORMERR; what is not a query gets nothing.
    let socket = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    socket
        .send_to(&[0x12, 0x34, 0x01, 0x00, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 1], addr)
        .await
        .unwrap();
    let mut buf = vec![0u8; 512];
    let n = tokio::time::timeout(Duration::from_secs(5), socket.recv(&mut buf))
        .await
        .unwrap()
        .unwrap();
    let m = Message::from_vec(&buf[..n]).unwrap();
    assert_eq!((m.id(), m.response_code()), (0x1234, ResponseCode::FormErr));
}
