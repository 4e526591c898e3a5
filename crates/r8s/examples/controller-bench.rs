//! The controller manager benchmark: a real `r8s server` (embedded datastore, controller manager
//! inside, no scheduler, no kubelet) gets 100 Deployments of 10 replicas each; the time until all 1,000 pods
//! exist, and the API requests the controllers spent per pod, from the server's own
//! `apiserver_request_total`.
//!
//!   cargo build --release -p r8s --bins --examples && target/release/examples/controller-bench
//!
//! Sizes: --deployments N --replicas N.

#[path = "common/mod.rs"]
mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PostParams, WatchEvent, WatchParams};
use kube::Client;

fn deployment(name: &str, replicas: usize) -> Deployment {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "c", "image": "nginx"}]}
            }
        }
    }))
    .unwrap()
}

/// apiserver_request_total by (verb, resource), from /metrics.
async fn requests(client: &Client) -> BTreeMap<(String, String), f64> {
    let req = http::Request::get("/metrics").body(Vec::new()).unwrap();
    let text = client.request_text(req).await.unwrap();
    let mut out = BTreeMap::new();
    for line in text.lines().filter(|l| l.starts_with("apiserver_request_total{")) {
        let (labels, value) = line.rsplit_once(' ').unwrap();
        let label = |k: &str| {
            labels
                .split(&format!("{k}=\""))
                .nth(1)
                .and_then(|r| r.split('"').next())
                .unwrap_or("")
                .to_string()
        };
        let sub = label("subresource");
        let resource = if sub.is_empty() {
            label("resource")
        } else {
            format!("{}/{sub}", label("resource"))
        };
        *out.entry((label("verb"), resource)).or_default() += value.parse::<f64>().unwrap();
    }
    out
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let deployments = common::arg("--deployments", 100);
    let replicas = common::arg("--replicas", 10);
    let total = deployments * replicas;

    let dir = tempfile::tempdir().unwrap();
    // The controllers alone: no scheduler (and no kubelet), so pods stay Pending.
    let (mut server, client) =
        common::start_server(dir.path(), &["--disable-agent", "--disable-scheduler"], None).await;
    // Let the controllers start (leader election, informers) before the clock runs.
    let sa: Api<k8s_openapi::api::core::v1::ServiceAccount> = Api::namespaced(client.clone(), "default");
    while sa.get_opt("default").await.unwrap().is_none() {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    println!(
        "controller-bench: r8s server pid {}, {deployments} deployments x {replicas} replicas",
        server.id()
    );

    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let rv = pods
        .list_metadata(&Default::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    let mut watch = pods
        .watch(&WatchParams::default().timeout(290), &rv)
        .await
        .unwrap()
        .boxed();
    let before = requests(&client).await;

    let started = Instant::now();
    let api: Api<Deployment> = Api::namespaced(client.clone(), "default");
    futures::stream::iter(0..deployments)
        .map(|i| {
            let api = api.clone();
            async move {
                api.create(&PostParams::default(), &deployment(&format!("d{i}"), replicas))
                    .await
                    .map(|_| ())
            }
        })
        .buffer_unordered(16)
        .try_collect::<Vec<()>>()
        .await
        .unwrap();
    let created_deployments = started.elapsed();
    let mut seen = 0;
    while seen < total {
        match tokio::time::timeout(Duration::from_secs(60), watch.next()).await {
            Ok(Some(Ok(WatchEvent::Added(_)))) => seen += 1,
            Ok(Some(Ok(_))) => {}
            other => panic!("pod watch ended early at {seen} pods: {other:?}"),
        }
    }
    let all_pods = started.elapsed();
    // Converged: every Deployment reports all replicas updated.
    loop {
        let list = api.list(&Default::default()).await.unwrap();
        let done = list
            .items
            .iter()
            .filter(|d| d.status.as_ref().and_then(|s| s.updated_replicas) == Some(replicas as i32))
            .count();
        if done == deployments {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let converged = started.elapsed();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after = requests(&client).await;
    let pod_count = pods.list_metadata(&Default::default()).await.unwrap().items.len();

    let mut spent: Vec<((String, String), f64)> = after
        .iter()
        .map(|(k, v)| (k.clone(), v - before.get(k).copied().unwrap_or(0.0)))
        .filter(|(_, d)| *d > 0.0)
        .collect();
    // Take out the benchmark's own requests: the deployment creates, the convergence polls
    // and the /metrics read.
    for ((verb, resource), n) in spent.iter_mut() {
        if verb == "POST" && resource == "deployments" {
            *n -= deployments as f64;
        }
        if verb == "LIST" && resource == "deployments" {
            *n = 0.0;
        }
    }
    spent.retain(|(_, n)| *n > 0.0);
    spent.sort_by(|a, b| b.1.partial_cmp(&a.1).unwrap());
    let controller_requests: f64 = spent.iter().map(|(_, n)| n).sum();

    println!(
        "  {deployments} deployment creates: {:.2} s",
        created_deployments.as_secs_f64()
    );
    println!("  all {total} pods exist after: {:.2} s", all_pods.as_secs_f64());
    println!(
        "  every deployment converged (updatedReplicas) after: {:.2} s",
        converged.as_secs_f64()
    );
    println!("  pods at the end: {pod_count} (expected {total})");
    println!(
        "  controller API requests: {controller_requests:.0}, {:.2} per pod",
        controller_requests / total as f64
    );
    for ((verb, resource), n) in spent.iter().take(8) {
        println!("    {verb:<6} {resource:<24} {n:.0}");
    }
    println!("  server RSS: {:.0} MiB", common::rss_mib(server.id()));
    let _ = server.kill();
    let _ = server.wait();
    assert_eq!(pod_count, total, "duplicate or missing pods");
}
