//! Pod startup latency, as the kubelet issue asks: create → Ready for Deployments of 3 and 30
//! nginx replicas through the whole of `r8s server` (API server, controllers, scheduler, agent,
//! containerd, CNI), and in the same run the floor: the same sandboxes and containers started
//! directly through CRI on a bare containerd, with no control plane.
//!
//!   cargo build --release -p r8s --bins --examples && target/release/examples/pod-bench
//!
//! Runs as root; the images come from scripts/build-test-images.sh (target/test-images).

#[path = "common/mod.rs"]
mod common;

use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, PostParams, WatchEvent, WatchParams};

fn deployment(name: &str, replicas: usize) -> Deployment {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "nginx", "image": "nginx"}]}}}
    }))
    .unwrap()
}

async fn control_plane(images: &Path, sizes: &[usize]) -> Vec<(usize, Vec<Duration>, Duration)> {
    let (_dir, mut server, client) =
        common::start_node(images, "bench-node", "r8sbench0", "10.195.0.0/16").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let deploys: Api<Deployment> = Api::namespaced(client.clone(), "default");
    let mut results = Vec::new();
    for &n in sizes {
        let name = format!("web{n}");
        let rv = pods
            .list_metadata(&Default::default())
            .await
            .unwrap()
            .metadata
            .resource_version
            .unwrap();
        let mut watch = pods
            .watch(&WatchParams::default().timeout(120), &rv)
            .await
            .unwrap()
            .boxed();
        let started = Instant::now();
        deploys
            .create(&PostParams::default(), &deployment(&name, n))
            .await
            .unwrap();
        let mut first_seen: HashMap<String, Instant> = HashMap::new();
        let mut latencies: HashMap<String, Duration> = HashMap::new();
        while latencies.len() < n {
            let ev = tokio::time::timeout(Duration::from_secs(120), watch.next())
                .await
                .expect("pods Ready in time");
            let p = match ev {
                Some(Ok(WatchEvent::Added(p))) | Some(Ok(WatchEvent::Modified(p))) => p,
                Some(Ok(_)) => continue,
                other => panic!("watch ended: {other:?}"),
            };
            let pname = p.metadata.name.clone().unwrap_or_default();
            let seen = *first_seen.entry(pname.clone()).or_insert_with(Instant::now);
            if common::pod_ready(&p) && !latencies.contains_key(&pname) {
                latencies.insert(pname, seen.elapsed());
            }
        }
        let total = started.elapsed();
        let mut l: Vec<Duration> = latencies.into_values().collect();
        l.sort();
        results.push((n, l, total));
        deploys.delete(&name, &DeleteParams::default()).await.unwrap();
        while !pods
            .list_metadata(&Default::default())
            .await
            .unwrap()
            .items
            .is_empty()
        {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    let _ = std::process::Command::new("kill")
        .args(["-TERM", &server.id().to_string()])
        .status();
    let _ = server.wait();
    results
}

/// The same pods straight through CRI on a bare containerd: the floor.
async fn cri_floor(images: &Path, sizes: &[usize]) -> Vec<(usize, Vec<Duration>, Duration)> {
    let floor = common::Floor::start(images, "r8sfloor0", "10.194.0.0/24", "r8s-floor").await;
    let mut results = Vec::new();
    for &n in sizes {
        let started = Instant::now();
        let runs = (0..n).map(|i| {
            let floor = &floor;
            async move {
                let t = Instant::now();
                let pod: Pod = serde_json::from_value(serde_json::json!({
                    "metadata": {"name": format!("floor-{n}-{i}"), "namespace": "default", "uid": format!("floor-{n}-{i}")},
                    "spec": {"containers": [{"name": "nginx", "image": "nginx"}]}
                }))
                .unwrap();
                let (sb, _) = floor.run_pod(&pod).await;
                (t.elapsed(), sb)
            }
        });
        let done = futures::future::join_all(runs).await;
        let total = started.elapsed();
        let mut l: Vec<Duration> = done.iter().map(|(d, _)| *d).collect();
        l.sort();
        results.push((n, l, total));
        for (_, sb) in done {
            floor.remove_sandbox(&sb).await;
        }
    }
    results
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    common::r8s_binary();
    let images = common::test_images();
    let sizes = [3usize, 30];
    println!("pod-bench: nginx pods, image present; create → Ready");
    let full = control_plane(&images, &sizes).await;
    let floor = cri_floor(&images, &sizes).await;
    for ((n, l, total), (_, fl, ftotal)) in full.iter().zip(floor.iter()) {
        println!(
            "  {n:>2} replicas: r8s p50 {} p99 {}, all Ready after {} | CRI floor p50 {} p99 {}, all started after {} | ratio {:.2}",
            common::ms(common::pct(l, 0.5)),
            common::ms(common::pct(l, 0.99)),
            common::ms(*total),
            common::ms(common::pct(fl, 0.5)),
            common::ms(common::pct(fl, 0.99)),
            common::ms(*ftotal),
            total.as_secs_f64() / ftotal.as_secs_f64()
        );
    }
}
