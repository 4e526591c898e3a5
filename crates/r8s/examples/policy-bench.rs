//! The network policy benchmark (root): a real `r8s server` (embedded datastore, no agent)
//! and the policy engine (`r8s_net::policy::run`, the code the agent runs) in a network
//! namespace of their own. 1,000 pods (hollow: API objects with addresses, bound to this
//! "node") and 1,000 policies, each isolating one pod and admitting one other; two of the
//! pods are real (network namespaces on a bridge) and a TCP probe between them shows what is
//! in force.
//!
//!   cargo build --release -p r8s --bins --examples && target/release/examples/policy-bench
//!
//! Measures: from the engine's start to the whole program in force (--pods pods, as many
//! policies); then one policy changed through the API, from the write to the probe's
//! connection admitted (--changes times).

#[path = "common/mod.rs"]
mod common;

use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::process::Command;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::Client;
use tokio_util::sync::CancellationToken;

fn pod_ip(i: usize) -> Ipv4Addr {
    Ipv4Addr::new(10, 244, (i / 250) as u8, (i % 250 + 2) as u8)
}

fn policy(i: usize, from: usize) -> NetworkPolicy {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": format!("p{i}")},
        "spec": {
            "podSelector": {"matchLabels": {"app": format!("p{i}")}},
            "ingress": [{"from": [{"podSelector": {"matchLabels": {"app": format!("p{from}")}}}], "ports": [{"port": 8080}]}]
        }
    }))
    .unwrap()
}

fn sh(args: &[&str]) {
    let ok = Command::new(args[0]).args(&args[1..]).status().unwrap().success();
    assert!(ok, "{args:?}");
}

struct Netns(String);

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

/// A connect from pod a to pod b's listener, given up after 2 ms (a dropped SYN would only be
/// retried a second later): whether it is admitted.
fn admitted(a: &std::fs::File) -> bool {
    use std::os::fd::AsRawFd;
    std::thread::scope(|s| {
        s.spawn(|| {
            assert_eq!(unsafe { libc::setns(a.as_raw_fd(), libc::CLONE_NEWNET) }, 0);
            TcpStream::connect_timeout(&SocketAddr::from((pod_ip(1), 8080)), Duration::from_millis(2)).is_ok()
        })
        .join()
        .unwrap()
    })
}

fn main() {
    assert_eq!(
        unsafe { libc::unshare(libc::CLONE_NEWNET) },
        0,
        "unshare(CLONE_NEWNET): run as root"
    );
    sh(&["ip", "link", "set", "lo", "up"]);
    sh(&["ip", "link", "add", "br0", "type", "bridge"]);
    sh(&["ip", "addr", "add", "10.244.0.1/16", "dev", "br0"]);
    sh(&["ip", "link", "set", "br0", "up"]);
    // Pods 0 (a) and 1 (b), real.
    let mut pods = Vec::new();
    for i in 0..2 {
        let name = format!("r8spb-{i}-{}", std::process::id());
        sh(&["ip", "netns", "add", &name]);
        let ns = Netns(name.clone());
        sh(&[
            "ip",
            "link",
            "add",
            &format!("pb{i}"),
            "type",
            "veth",
            "peer",
            "name",
            "eth0",
            "netns",
            &name,
        ]);
        sh(&["ip", "link", "set", &format!("pb{i}"), "master", "br0", "up"]);
        sh(&[
            "ip",
            "-n",
            &name,
            "addr",
            "add",
            &format!("{}/16", pod_ip(i)),
            "dev",
            "eth0",
        ]);
        sh(&["ip", "-n", &name, "link", "set", "eth0", "up"]);
        sh(&["ip", "-n", &name, "link", "set", "lo", "up"]);
        pods.push(ns);
    }
    // b's listener.
    let b = std::fs::File::open(format!("/run/netns/{}", pods[1].0)).unwrap();
    let listener = std::thread::scope(|s| {
        s.spawn(|| {
            use std::os::fd::AsRawFd;
            assert_eq!(unsafe { libc::setns(b.as_raw_fd(), libc::CLONE_NEWNET) }, 0);
            std::net::TcpListener::bind((pod_ip(1), 8080)).unwrap()
        })
        .join()
        .unwrap()
    });
    std::thread::spawn(move || for _c in listener.incoming() {});
    let a = std::fs::File::open(format!("/run/netns/{}", pods[0].0)).unwrap();
    assert!(admitted(&a), "a reaches b before any policy");
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
        .block_on(run(a));
    drop(pods);
}

async fn create_pods(client: &Client, n: usize) {
    let api: Api<Pod> = Api::default_namespaced(client.clone());
    futures::stream::iter(0..n)
        .map(|i| {
            let api = api.clone();
            async move {
                let pod: Pod = serde_json::from_value(serde_json::json!({
                    "metadata": {"name": format!("pod{i}"), "labels": {"app": format!("p{i}")}},
                    "spec": {"nodeName": "bench", "containers": [{"name": "c", "image": "busybox"}]}
                }))
                .unwrap();
                api.create(&PostParams::default(), &pod).await.unwrap();
                let ip = pod_ip(i).to_string();
                let status =
                    serde_json::json!({"status": {"phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}]}});
                api.patch_status(
                    &format!("pod{i}"),
                    &PatchParams::default(),
                    &Patch::Merge(&status),
                )
                .await
                .unwrap();
            }
        })
        .buffer_unordered(32)
        .collect::<Vec<_>>()
        .await;
}

async fn run(a: std::fs::File) {
    let n = common::arg("--pods", 1000);
    let changes = common::arg("--changes", 50);
    let dir = tempfile::tempdir().unwrap();
    let (mut server, client) = common::start_server(dir.path(), &["--disable-agent"], None).await;
    common::create_default_service_accounts(&client).await;
    let t = Instant::now();
    create_pods(&client, n).await;
    let policies: Api<NetworkPolicy> = Api::default_namespaced(client.clone());
    futures::stream::iter(0..n)
        .map(|i| {
            let policies = policies.clone();
            async move {
                policies
                    .create(&PostParams::default(), &policy(i, (i + 1) % n))
                    .await
                    .unwrap();
            }
        })
        .buffer_unordered(32)
        .collect::<Vec<_>>()
        .await;
    println!(
        "{n} pods and {n} policies created through the API in {:?}",
        t.elapsed()
    );

    // The engine from cold: informers list everything, one program, one transaction.
    let stop = CancellationToken::new();
    let handle = r8s_net::policy::handle();
    let started = Instant::now();
    let engine = tokio::spawn(r8s_net::policy::run(
        client.clone(),
        r8s_net::policy::PolicyConfig::new("bench"),
        handle.clone(),
        stop.clone(),
    ));
    handle.programmed().await;
    let programmed = started.elapsed();
    assert!(!admitted(&a), "b admits only p2: a is refused");
    println!(
        "cold start: {n} policies over {n} local pods in force {} after the engine started",
        common::ms(programmed)
    );

    // One policy changed: b's admits a (p0) instead of p2, and back.
    let mut took = Vec::new();
    for k in 0..changes {
        let mut p = policy(1, 0);
        p.metadata.resource_version = policies.get("p1").await.unwrap().metadata.resource_version;
        let t = Instant::now();
        policies.replace("p1", &PostParams::default(), &p).await.unwrap();
        while !admitted(&a) {
            assert!(t.elapsed() < Duration::from_secs(10), "change {k} never in force");
        }
        took.push(t.elapsed());
        let mut back = policy(1, 2);
        back.metadata.resource_version = policies.get("p1").await.unwrap().metadata.resource_version;
        policies
            .replace("p1", &PostParams::default(), &back)
            .await
            .unwrap();
        let t = Instant::now();
        while admitted(&a) {
            assert!(t.elapsed() < Duration::from_secs(10), "change {k} never reverted");
        }
    }
    took.sort();
    println!(
        "one policy changed ({changes} times), from the API write to in force: p50 {} p99 {} max {}",
        common::ms(common::pct(&took, 0.5)),
        common::ms(common::pct(&took, 0.99)),
        common::ms(*took.last().unwrap()),
    );
    stop.cancel();
    let _ = engine.await;
    let _ = server.kill();
    let _ = server.wait();
}
