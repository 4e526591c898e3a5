//! The scheduler benchmark, a simulated cluster: a real `r8s server` (embedded datastore,
//! controller manager off) gets 5,000 hollow nodes — Node objects with capacity and no kubelet —
//! and 10,000 pods; measured are the pods bound per second (on a pod watch) and the scheduler's
//! own p99 of a scheduling attempt (filter + score), which it logs. Two phases:
//! 1. concurrent: the scheduler inside the server binds pods while they are being created (the
//!    API server serves the creates, the bindings and the events at once);
//! 2. backlog: the 10,000 pods are created first, then a separate `r8s scheduler` starts and
//!    works through them — the scheduler's own throughput, as scheduler_perf measures it.
//!
//!   cargo build --release -p r8s --bins --examples && target/release/examples/scheduler-bench
//!
//! Sizes: --nodes N --pods N.

#[path = "common/mod.rs"]
mod common;

use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, PostParams, WatchEvent, WatchParams};

fn node(i: usize) -> Node {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": format!("hollow-{i}"), "labels": {"kubernetes.io/hostname": format!("hollow-{i}")}},
        "status": {
            "capacity": {"cpu": "4", "memory": "32Gi", "pods": "110"},
            "allocatable": {"cpu": "4", "memory": "32Gi", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True"}]
        }
    }))
    .unwrap()
}

fn pod(i: usize) -> Pod {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": format!("p-{i}")},
        "spec": {"containers": [{"name": "c", "image": "nginx",
            "resources": {"requests": {"cpu": "100m", "memory": "100Mi"}}}]}
    }))
    .unwrap()
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let nodes = common::arg("--nodes", 5_000);
    let pods = common::arg("--pods", 10_000);
    // The scheduler logs its attempt durations at info.
    if std::env::var_os("R8S_LOG").is_none() {
        std::env::set_var("R8S_LOG", "warn,r8s_scheduler=info");
    }
    println!("scheduler-bench: {nodes} hollow nodes, {pods} pods");
    phase(nodes, pods, false).await;
    phase(nodes, pods, true).await;
}

async fn phase(nodes: usize, pods: usize, backlog: bool) {
    println!(
        "{}",
        if backlog {
            "backlog: all pods created first, then `r8s scheduler` started"
        } else {
            "concurrent: the server's scheduler binds pods as they are created"
        }
    );

    let r8s = common::r8s_binary();
    let dir = tempfile::tempdir().unwrap();
    let log_path = dir.path().join("server.log");
    let mut extra = vec!["--disable-agent", "--disable-controller-manager"];
    if backlog {
        extra.push("--disable-scheduler");
    }
    let (mut server, client) = common::start_server(dir.path(), &extra, Some(&log_path)).await;
    // The controller manager is off: the ServiceAccounts it would create come from here.
    common::create_default_service_accounts(&client).await;
    let kubeconfig = dir.path().join("kubeconfig.yaml");
    println!(
        "scheduler-bench: r8s server pid {}, {nodes} hollow nodes, {pods} pods",
        server.id()
    );

    let node_api: Api<Node> = Api::all(client.clone());
    let started = Instant::now();
    futures::stream::iter(0..nodes)
        .map(|i| {
            let api = node_api.clone();
            async move { api.create(&PostParams::default(), &node(i)).await.map(|_| ()) }
        })
        .buffer_unordered(64)
        .try_collect::<Vec<()>>()
        .await
        .unwrap();
    println!(
        "  {nodes} nodes created in {:.2} s",
        started.elapsed().as_secs_f64()
    );
    // Let the scheduler's node cache catch up before the clock starts.
    tokio::time::sleep(Duration::from_secs(2)).await;

    let pod_api: Api<Pod> = Api::namespaced(client.clone(), "default");
    let rv = pod_api
        .list_metadata(&Default::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    let mut watch = pod_api
        .watch(&WatchParams::default().timeout(290), &rv)
        .await
        .unwrap()
        .boxed();
    let started = Instant::now();
    let mut creator = Some(tokio::spawn({
        let api = pod_api.clone();
        async move {
            futures::stream::iter(0..pods)
                .map(|i| {
                    let api = api.clone();
                    async move { api.create(&PostParams::default(), &pod(i)).await.map(|_| ()) }
                })
                .buffer_unordered(64)
                .try_collect::<Vec<()>>()
                .await
                .unwrap();
            started.elapsed()
        }
    }));
    let mut scheduler = None;
    if backlog {
        let created = creator.take().unwrap().await.unwrap();
        println!("  {pods} pods created in {:.2} s", created.as_secs_f64());
        let slog = std::fs::File::create(dir.path().join("scheduler.log")).unwrap();
        scheduler = Some(
            std::process::Command::new(&r8s)
                .args(["scheduler", "--kubeconfig", kubeconfig.to_str().unwrap()])
                .env("R8S_LOG", "warn,r8s_scheduler=info")
                .stdout(slog.try_clone().unwrap())
                .stderr(slog)
                .spawn()
                .unwrap(),
        );
    }
    let started = if backlog { Instant::now() } else { started };
    let mut bound = std::collections::HashSet::new();
    let mut at_10 = None;
    let mut at_90 = None;
    while bound.len() < pods {
        match tokio::time::timeout(Duration::from_secs(60), watch.next()).await {
            Ok(Some(Ok(WatchEvent::Modified(p)))) => {
                if p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some() {
                    bound.insert(p.metadata.name.unwrap_or_default());
                    if bound.len() == pods / 10 {
                        at_10 = Some(started.elapsed());
                    }
                    if bound.len() == pods * 9 / 10 {
                        at_90 = Some(started.elapsed());
                    }
                }
            }
            Ok(Some(Ok(_))) => {}
            other => panic!("pod watch ended early at {} bound: {other:?}", bound.len()),
        }
    }
    let all_bound = started.elapsed();
    if let Some(c) = creator {
        let created = c.await.unwrap();
        println!(
            "  {pods} pods created in {:.2} s (while being scheduled)",
            created.as_secs_f64()
        );
    }
    let (t10, t90) = (at_10.unwrap(), at_90.unwrap());
    let sustained = (pods * 8 / 10) as f64 / (t90 - t10).as_secs_f64();
    // Let the scheduler log its last window of attempt durations.
    tokio::time::sleep(Duration::from_secs(6)).await;
    let _ = server.kill();
    let _ = server.wait();
    let mut log = std::fs::read_to_string(&log_path).unwrap_or_default();
    if let Some(mut s) = scheduler {
        let _ = s.kill();
        let _ = s.wait();
        log = std::fs::read_to_string(dir.path().join("scheduler.log")).unwrap_or_default();
    }
    let mut p99s = Vec::new();
    let mut p50s = Vec::new();
    for line in log.lines().filter(|l| l.contains("scheduling attempts")) {
        let field = |k: &str| {
            line.split(&format!("{k}="))
                .nth(1)
                .and_then(|r| r.split(|c: char| !c.is_ascii_digit()).next())
                .and_then(|v| v.parse::<u64>().ok())
        };
        if let (Some(p50), Some(p99)) = (field("p50_us"), field("p99_us")) {
            p50s.push(p50);
            p99s.push(p99);
        }
    }
    println!(
        "  all {pods} pods bound after {:.2} s: {:.0} pods/s overall, {sustained:.0} pods/s sustained (10%..90%)",
        all_bound.as_secs_f64(),
        pods as f64 / all_bound.as_secs_f64()
    );
    if !p99s.is_empty() {
        println!(
            "  scheduling attempt (filter + score over the adaptive share of {nodes} nodes), per 5 s window: p50 {:?} us, p99 {:?} us",
            p50s, p99s
        );
    }
}
