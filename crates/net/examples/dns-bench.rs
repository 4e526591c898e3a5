//! Cluster DNS throughput and latency on loopback (issue 20's DNS targets): the server with a
//! zone of `--services` Services, asked for cluster names over UDP by `--clients` clients each
//! keeping one query in flight, for `--queries` queries in all. Reports queries per second,
//! the latency percentiles, and how many queries got no answer within a second (lost).
//! A second phase measures how soon a Service put into the zone is answered.
//!
//!     cargo run --release -p r8s-net --example dns-bench -- --queries 1000000
//!
//! The server and the clients share the machine's cores; `--server-threads` bounds the
//! server's runtime (the anchor is per core).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hickory_proto::op::{Message, MessageType, OpCode, Query, ResponseCode};
use hickory_proto::rr::{Name, RecordType};
use r8s_net::dns::{self, ClusterZone, DnsServer, Forwarder};
use tokio_util::sync::CancellationToken;

struct Args {
    queries: u64,
    clients: u64,
    services: u64,
    server_threads: usize,
}

fn args() -> Args {
    let mut a = Args {
        queries: 200_000,
        clients: 32,
        services: 10_000,
        server_threads: 1,
    };
    let argv: Vec<String> = std::env::args().skip(1).collect();
    for pair in argv.chunks(2) {
        let value = pair
            .get(1)
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or_else(|| {
                eprintln!("usage: dns-bench [--queries N] [--clients N] [--services N] [--server-threads N]");
                std::process::exit(2)
            });
        match pair[0].as_str() {
            "--queries" => a.queries = value,
            "--clients" => a.clients = value,
            "--services" => a.services = value,
            "--server-threads" => a.server_threads = value as usize,
            other => {
                eprintln!("unknown option {other}");
                std::process::exit(2)
            }
        }
    }
    a
}

fn service(i: u64) -> k8s_openapi::api::core::v1::Service {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": format!("svc-{i}"), "namespace": format!("ns-{}", i % 100)},
        "spec": {"clusterIP": format!("10.43.{}.{}", (i / 250) % 256, i % 250 + 1),
                 "ports": [{"name": "http", "port": 80}]}
    }))
    .expect("a Service")
}

fn question(i: u64, services: u64) -> (String, RecordType) {
    let s = i % services;
    (
        format!("svc-{s}.ns-{}.svc.cluster.local.", s % 100),
        RecordType::A,
    )
}

async fn client(
    server: SocketAddr,
    from: u64,
    count: u64,
    services: u64,
    latencies: Arc<std::sync::Mutex<Vec<u32>>>,
    lost: Arc<AtomicU64>,
) {
    let socket = tokio::net::UdpSocket::bind("127.0.0.1:0").await.expect("bind");
    socket.connect(server).await.expect("connect");
    let mut buf = vec![0u8; 4096];
    let mut mine = Vec::with_capacity(count as usize);
    for n in 0..count {
        let (name, qtype) = question(from + n, services);
        let id = (n % 65536) as u16;
        let mut m = Message::new();
        m.set_id(id)
            .set_message_type(MessageType::Query)
            .set_op_code(OpCode::Query)
            .set_recursion_desired(true)
            .add_query(Query::query(Name::from_ascii(&name).expect("name"), qtype));
        let bytes = m.to_vec().expect("encode");
        let sent = Instant::now();
        socket.send(&bytes).await.expect("send");
        let answered = loop {
            match tokio::time::timeout(Duration::from_secs(1), socket.recv(&mut buf)).await {
                Ok(Ok(n)) => {
                    let a = Message::from_vec(&buf[..n]).expect("decode");
                    if a.id() != id {
                        continue; // a late answer to a query counted lost
                    }
                    assert_eq!(a.response_code(), ResponseCode::NoError, "{name}");
                    assert_eq!(a.answers().len(), 1, "{name}");
                    break true;
                }
                _ => break false,
            }
        };
        if answered {
            mine.push(sent.elapsed().as_micros() as u32);
        } else {
            lost.fetch_add(1, Ordering::Relaxed);
        }
    }
    latencies.lock().expect("lock").extend(mine);
}

fn main() {
    let a = args();
    // The server on a runtime of its own, with the threads asked for.
    let server_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(a.server_threads)
        .enable_all()
        .build()
        .expect("runtime");
    let zone = Arc::new(ClusterZone::new("cluster.local", 5).expect("zone"));
    let loaded = Instant::now();
    for i in 0..a.services {
        zone.set_service(&service(i));
    }
    println!(
        "zone: {} Services put in in {:.1} ms",
        a.services,
        loaded.elapsed().as_secs_f64() * 1000.0
    );
    let stop = CancellationToken::new();
    let server = DnsServer::new(zone.clone(), Forwarder::new(Vec::new()));
    let (addr, _) = server_rt
        .block_on(dns::serve(
            server,
            "127.0.0.1:0".parse().expect("addr"),
            stop.clone(),
        ))
        .expect("serve");
    let client_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    let latencies = Arc::new(std::sync::Mutex::new(Vec::with_capacity(a.queries as usize)));
    let lost = Arc::new(AtomicU64::new(0));
    let per_client = a.queries / a.clients;
    let started = Instant::now();
    client_rt.block_on(async {
        let tasks: Vec<_> = (0..a.clients)
            .map(|c| {
                tokio::spawn(client(
                    addr,
                    c * per_client,
                    per_client,
                    a.services,
                    latencies.clone(),
                    lost.clone(),
                ))
            })
            .collect();
        for t in tasks {
            t.await.expect("client");
        }
    });
    let elapsed = started.elapsed();
    let mut l = latencies.lock().expect("lock").clone();
    l.sort_unstable();
    let pct = |p: f64| {
        l.get(((l.len() as f64 * p) as usize).min(l.len().saturating_sub(1)))
            .copied()
            .unwrap_or(0)
    };
    let total = per_client * a.clients;
    println!(
        "cluster names: {total} queries, {} clients, server threads {}: {:.0} queries/s; latency p50 {} µs, p99 {} µs, max {} µs; lost {}",
        a.clients,
        a.server_threads,
        total as f64 / elapsed.as_secs_f64(),
        pct(0.50),
        pct(0.99),
        l.last().copied().unwrap_or(0),
        lost.load(Ordering::Relaxed)
    );

    // A new Service: how soon after it is put in (what an informer event does) it answers.
    let mut waits = Vec::new();
    client_rt.block_on(async {
        let socket = tokio::net::UdpSocket::bind("127.0.0.1:0").await.expect("bind");
        socket.connect(addr).await.expect("connect");
        let mut buf = vec![0u8; 512];
        for k in 0..20u64 {
            let i = a.services + k;
            let put = Instant::now();
            zone.set_service(&service(i));
            let (name, qtype) = question(i, i + 1);
            let mut m = Message::new();
            m.set_id(k as u16)
                .set_message_type(MessageType::Query)
                .set_recursion_desired(true)
                .add_query(Query::query(Name::from_ascii(&name).expect("name"), qtype));
            socket.send(&m.to_vec().expect("encode")).await.expect("send");
            let n = socket.recv(&mut buf).await.expect("recv");
            let answer = Message::from_vec(&buf[..n]).expect("decode");
            assert_eq!(answer.answers().len(), 1);
            waits.push(put.elapsed().as_micros());
        }
    });
    waits.sort_unstable();
    println!(
        "a new Service answered {} µs (median of 20; max {} µs) after it is put in the zone",
        waits[10], waits[19]
    );
    stop.cancel();
}
