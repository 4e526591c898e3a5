//! The Service proxy benchmark (root): a real `r8s server` (embedded datastore, no agent) and
//! the proxy (`r8s_net::proxy::run`, the code the agent runs) in a network namespace of their
//! own, so the table, routes and probes never touch the host. Services are selector-less with
//! hand-made EndpointSlices whose endpoints are one local listener (hollow endpoints); a Service
//! is "live" when a TCP connect to its cluster IP reaches that listener.
//!
//!   cargo build --release -p r8s --bins --examples && target/release/examples/proxy-bench
//!
//! Measures: first-packet (connect) latency at 10 and at --services Services; adding one
//! Service at that size, from the API write to the rule being live (--adds times); then a cold
//! full sync of --full-services more Services with --full-endpoints endpoints each, from the
//! proxy's start to every Service live.

#[path = "common/mod.rs"]
mod common;

use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::process::Command;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, PostParams};
use kube::Client;
use tokio_util::sync::CancellationToken;

const ENDPOINT: Ipv4Addr = Ipv4Addr::new(10, 244, 0, 1);
const ENDPOINT_PORT: u16 = 8080;

/// The cluster IP of Service number `i` (chosen, not allocated, so a probe knows it at once).
fn service_ip(i: usize) -> Ipv4Addr {
    let i = i as u32 + 256;
    Ipv4Addr::new(10, 43, (i >> 8) as u8, (i & 0xff) as u8)
}

fn service(name: &str, ip: Ipv4Addr) -> Service {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name},
        "spec": {"clusterIP": ip.to_string(), "ports": [{"name": "http", "port": 80, "protocol": "TCP"}]}
    }))
    .unwrap()
}

fn slice(name: &str, endpoints: usize) -> EndpointSlice {
    // One real endpoint (the listener) and hollow ones after it.
    let eps: Vec<_> = (0..endpoints)
        .map(|i| {
            let ip = if i == 0 {
                ENDPOINT
            } else {
                Ipv4Addr::new(10, 245, (i >> 8) as u8, (i & 0xff) as u8)
            };
            serde_json::json!({"addresses": [ip.to_string()], "conditions": {"ready": true}, "nodeName": "bench"})
        })
        .collect();
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": format!("{name}-1"), "labels": {"kubernetes.io/service-name": name}},
        "addressType": "IPv4",
        "ports": [{"name": "http", "port": ENDPOINT_PORT, "protocol": "TCP"}],
        "endpoints": eps,
    }))
    .unwrap()
}

/// Create Services `from..to` (with their slices), 32 writes in flight.
async fn create(client: &Client, prefix: &str, from: usize, to: usize, endpoints: usize) {
    let services: Api<Service> = Api::default_namespaced(client.clone());
    let slices: Api<EndpointSlice> = Api::default_namespaced(client.clone());
    futures::stream::iter(from..to)
        .map(|i| {
            let (services, slices) = (services.clone(), slices.clone());
            let name = format!("{prefix}{i}");
            async move {
                slices
                    .create(&PostParams::default(), &slice(&name, endpoints))
                    .await
                    .unwrap();
                services
                    .create(&PostParams::default(), &service(&name, service_ip(i)))
                    .await
                    .unwrap();
            }
        })
        .buffer_unordered(32)
        .collect::<Vec<_>>()
        .await;
}

/// Whether a connect to the Service reaches the listener. Before its rules exist the SYN is
/// dropped and the kernel would only retry it a second later, so a probe gives up after 2 ms
/// (a live Service answers in well under that: the listener is local) and the next probe
/// starts afresh: the measure is good to about 2 ms.
fn live(ip: Ipv4Addr) -> bool {
    TcpStream::connect_timeout(&SocketAddr::from((ip, 80)), Duration::from_millis(2)).is_ok()
}

async fn wait_live(ip: Ipv4Addr, limit: Duration) -> Duration {
    let started = Instant::now();
    while !live(ip) {
        assert!(started.elapsed() < limit, "{ip} not live after {limit:?}");
        tokio::task::yield_now().await;
    }
    started.elapsed()
}

/// Median and p99 of `n` connects (first packet through the table, DNAT, accept) to `ip`.
fn connect_latency(ip: Ipv4Addr, n: usize) -> (Duration, Duration) {
    let mut v: Vec<Duration> = (0..n)
        .map(|_| {
            let t = Instant::now();
            let c = TcpStream::connect(SocketAddr::from((ip, 80))).unwrap();
            let d = t.elapsed();
            drop(c);
            d
        })
        .collect();
    v.sort();
    (common::pct(&v, 0.50), common::pct(&v, 0.99))
}

fn config() -> r8s_net::proxy::ProxyConfig {
    r8s_net::proxy::ProxyConfig {
        table: "r8s".into(),
        family: r8s_net::nft::AddrFamily::V4,
        service_cidrs: vec![(Ipv4Addr::new(10, 43, 0, 0).into(), 16)],
        cluster_cidrs: vec![(Ipv4Addr::new(10, 42, 0, 0).into(), 16)],
        masquerade_bit: 14,
        node_name: "bench".into(),
        local_service_ips: vec![],
        keep_on_exit: false,
    }
}

fn sh(args: &[&str]) {
    let ok = Command::new(args[0]).args(&args[1..]).status().unwrap().success();
    assert!(ok, "{args:?}");
}

fn main() {
    // A network namespace of our own, before any thread exists: the server (a child) and the
    // proxy share it; nothing here touches the host's tables or routes.
    assert_eq!(
        unsafe { libc::unshare(libc::CLONE_NEWNET) },
        0,
        "unshare(CLONE_NEWNET): run as root"
    );
    sh(&["ip", "link", "set", "lo", "up"]);
    sh(&["ip", "addr", "add", &format!("{ENDPOINT}/32"), "dev", "lo"]);
    sh(&["ip", "route", "add", "default", "dev", "lo"]);
    let listener = std::net::TcpListener::bind((ENDPOINT, ENDPOINT_PORT)).unwrap();
    std::thread::spawn(move || for _c in listener.incoming() {});
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
        .block_on(run());
}

async fn run() {
    let n = common::arg("--services", 10_000);
    let adds = common::arg("--adds", 100);
    let full_services = common::arg("--full-services", 5_000);
    let full_endpoints = common::arg("--full-endpoints", 50);
    let dir = tempfile::tempdir().unwrap();
    let (mut server, client) = common::start_server(dir.path(), &["--disable-agent"], None).await;

    let stop = CancellationToken::new();
    let proxy = tokio::spawn(r8s_net::proxy::run(
        client.clone(),
        config(),
        Default::default(),
        stop.clone(),
    ));
    create(&client, "s", 0, 10, 1).await;
    wait_live(service_ip(9), Duration::from_secs(30)).await;
    let (p50_10, p99_10) = connect_latency(service_ip(5), 2000);
    println!(
        "first packet at 10 Services: connect p50 {} p99 {}",
        common::ms(p50_10),
        common::ms(p99_10)
    );

    let started = Instant::now();
    create(&client, "s", 10, n, 1).await;
    let made = started.elapsed();
    let caught_up = wait_live(service_ip(n - 1), Duration::from_secs(120)).await;
    println!("{n} Services created in {made:?}; the last live {caught_up:?} after its create returned");
    let (p50_n, p99_n) = connect_latency(service_ip(n / 2), 2000);
    println!(
        "first packet at {n} Services: connect p50 {} p99 {}",
        common::ms(p50_n),
        common::ms(p99_n)
    );

    // One more Service at a time, from the API write (its slice already there) to live.
    let services: Api<Service> = Api::default_namespaced(client.clone());
    let slices: Api<EndpointSlice> = Api::default_namespaced(client.clone());
    let mut took = Vec::new();
    for k in 0..adds {
        let i = n + k;
        let name = format!("add{i}");
        slices
            .create(&PostParams::default(), &slice(&name, 1))
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(20)).await;
        let t = Instant::now();
        services
            .create(&PostParams::default(), &service(&name, service_ip(i)))
            .await
            .unwrap();
        wait_live(service_ip(i), Duration::from_secs(10)).await;
        took.push(t.elapsed());
    }
    println!(
        "add one Service at {n}: API write → live {} ({adds} adds)",
        common::spread(&mut took)
    );
    stop.cancel();
    proxy.await.unwrap().unwrap();

    // Cold full sync: more Services with many endpoints each, then a proxy started afresh.
    let base = n + adds;
    let started = Instant::now();
    create(&client, "f", base, base + full_services, full_endpoints).await;
    println!(
        "{full_services} Services × {full_endpoints} endpoints created in {:?}",
        started.elapsed()
    );
    let total_services = base + full_services;
    let total_endpoints = base + full_services * full_endpoints;
    let stop = CancellationToken::new();
    let started = Instant::now();
    let proxy = tokio::spawn(r8s_net::proxy::run(
        client.clone(),
        config(),
        Default::default(),
        stop.clone(),
    ));
    wait_live(service_ip(base + full_services - 1), Duration::from_secs(600)).await;
    println!(
        "cold full sync of {total_services} Services / {total_endpoints} endpoints: all live {:?} after the proxy's start",
        started.elapsed()
    );
    // (To a Service whose one endpoint is real: the many-endpoint ones are mostly hollow.)
    let (p50_f, p99_f) = connect_latency(service_ip(n / 2), 2000);
    println!(
        "first packet at {total_services} Services: connect p50 {} p99 {}",
        common::ms(p50_f),
        common::ms(p99_f)
    );
    stop.cancel();
    proxy.await.unwrap().unwrap();
    let _ = server.kill();
    let _ = server.wait();
}
