//! Cluster DNS over the whole path: a new Service resolvable how long after its create? A
//! real `r8s server` (embedded datastore, no agent) and cluster DNS (`r8s_net::dns::run`, the
//! code the agent runs) on a loopback address; --services Services are made first (the zone's
//! size), then --adds more one at a time, each timed from the create request to the first A
//! answer for its name (asked every 0.5 ms on UDP).
//!
//!   cargo build --release -p r8s --bins --examples && target/release/examples/dns-path-bench

#[path = "common/mod.rs"]
mod common;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use futures::StreamExt;
use hickory_proto::op::{Message, MessageType, OpCode, Query};
use hickory_proto::rr::{Name, RData, RecordType};
use k8s_openapi::api::core::v1::Service;
use kube::api::{Api, PostParams};
use tokio_util::sync::CancellationToken;

const DNS_ADDRESS: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 153);

fn service(name: &str) -> Service {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name},
        "spec": {"ports": [{"name": "http", "port": 80}]}
    }))
    .unwrap()
}

/// Ask for `name`'s A record until it has one: the address.
async fn resolve(socket: &tokio::net::UdpSocket, name: &str, give_up: Duration) -> Option<Ipv4Addr> {
    let query = Name::from_ascii(name).unwrap();
    let started = Instant::now();
    let mut buf = vec![0u8; 2048];
    let mut id: u16 = 0;
    while started.elapsed() < give_up {
        id = id.wrapping_add(1);
        let mut m = Message::new();
        m.set_id(id)
            .set_message_type(MessageType::Query)
            .set_op_code(OpCode::Query)
            .set_recursion_desired(true)
            .add_query(Query::query(query.clone(), RecordType::A));
        socket.send(&m.to_vec().unwrap()).await.unwrap();
        if let Ok(Ok(n)) = tokio::time::timeout(Duration::from_millis(100), socket.recv(&mut buf)).await {
            let a = Message::from_vec(&buf[..n]).unwrap();
            if a.id() == id {
                if let Some(RData::A(ip)) = a.answers().first().map(|r| r.data()) {
                    return Some(ip.0);
                }
            }
        }
        tokio::time::sleep(Duration::from_micros(500)).await;
    }
    None
}

async fn run() {
    let background = common::arg("--services", 1_000);
    let adds = common::arg("--adds", 100);
    let dir = tempfile::tempdir().unwrap();
    let (mut server, client) = common::start_server(dir.path(), &["--disable-agent"], None).await;

    let port = std::net::UdpSocket::bind((DNS_ADDRESS, 0))
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let resolv = dir.path().join("resolv.conf");
    std::fs::write(&resolv, "").unwrap();
    let mut opts = r8s_net::dns::DnsOptions::new(IpAddr::V4(DNS_ADDRESS), "cluster.local");
    opts.port = port;
    opts.resolv_conf = resolv;
    let stop = CancellationToken::new();
    let dns = tokio::spawn(r8s_net::dns::run(client.clone(), opts, stop.clone()));

    let services: Api<Service> = Api::default_namespaced(client.clone());
    let started = Instant::now();
    futures::stream::iter(0..background)
        .map(|i| {
            let services = services.clone();
            async move {
                services
                    .create(&PostParams::default(), &service(&format!("bg-{i}")))
                    .await
                    .unwrap();
            }
        })
        .buffer_unordered(32)
        .collect::<Vec<()>>()
        .await;
    println!("{background} Services created in {:?}", started.elapsed());

    let socket = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    socket
        .connect(SocketAddr::from((DNS_ADDRESS, port)))
        .await
        .unwrap();
    let last = format!("bg-{}.default.svc.cluster.local.", background.saturating_sub(1));
    resolve(&socket, &last, Duration::from_secs(60))
        .await
        .expect("the background Services resolve");

    let mut took = Vec::new();
    for k in 0..adds {
        let name = format!("add-{k}");
        let t = Instant::now();
        let created = services
            .create(&PostParams::default(), &service(&name))
            .await
            .unwrap();
        let want: Ipv4Addr = created.spec.unwrap().cluster_ip.unwrap().parse().unwrap();
        let got = resolve(
            &socket,
            &format!("{name}.default.svc.cluster.local."),
            Duration::from_secs(5),
        )
        .await
        .expect("the new Service resolves");
        took.push(t.elapsed());
        assert_eq!(got, want);
    }
    println!(
        "a new Service resolvable after its create, at {background} Services: {} ({adds} creates)",
        common::spread(&mut took)
    );
    stop.cancel();
    dns.await.unwrap().unwrap();
    let _ = server.kill();
    let _ = server.wait();
}

fn main() {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
        .block_on(run());
}
