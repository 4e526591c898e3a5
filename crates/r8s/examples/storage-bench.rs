//! The claim binding benchmark (issue 39): a real `r8s server` (API server, controllers and
//! scheduler; no agent) with one Node object that keeps local volumes, and N claims of the
//! default class (`local-path`, WaitForFirstConsumer), each used by one pod, all created at
//! once. For each claim, the time from the scheduler's choice of its node (the
//! `volume.kubernetes.io/selected-node` annotation appearing) to the claim being Bound, as a
//! watch of the claims sees them.
//!
//!   cargo build --release -p r8s --bins --examples && target/release/examples/storage-bench [--claims 100]

#[path = "common/mod.rs"]
mod common;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Node, PersistentVolumeClaim, Pod};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use serde_json::json;

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let claims = common::arg("--claims", 100);
    let dir = tempfile::tempdir().unwrap();
    let (mut server, client) = common::start_server(dir.path(), &["--disable-agent"], None).await;
    // The controller manager's ServiceAccount controller makes `default` (pods need it).
    let sas: Api<k8s_openapi::api::core::v1::ServiceAccount> = Api::namespaced(client.clone(), "default");
    while sas.get_opt("default").await.ok().flatten().is_none() {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // A node that keeps local volumes (its agent would publish the directory) and is Ready.
    let nodes: Api<Node> = Api::all(client.clone());
    let node: Node = serde_json::from_value(json!({
        "metadata": {"name": "bench-node", "labels": {"kubernetes.io/hostname": "bench-node"},
                     "annotations": {"r8s.io/local-path-dir": dir.path().join("storage").to_string_lossy()}},
    }))
    .unwrap();
    nodes.create(&PostParams::default(), &node).await.unwrap();
    let status = json!({"status": {
        "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "bench",
                        "lastHeartbeatTime": "2026-01-01T00:00:00Z", "lastTransitionTime": "2026-01-01T00:00:00Z"}],
        "allocatable": {"cpu": "64", "memory": "256Gi", "pods": "1000"},
        "capacity": {"cpu": "64", "memory": "256Gi", "pods": "1000"},
    }});
    nodes
        .patch_status("bench-node", &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap();

    // Watch the claims: when each was given a node, and when it was Bound.
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), "default");
    let watching = {
        let pvcs = pvcs.clone();
        tokio::spawn(async move {
            let mut selected: HashMap<String, Instant> = HashMap::new();
            let mut bound: HashMap<String, Instant> = HashMap::new();
            let mut events = watcher(pvcs, watcher::Config::default()).boxed();
            while let Ok(Some(e)) = events.try_next().await {
                let objects = match e {
                    watcher::Event::Apply(p) | watcher::Event::InitApply(p) => vec![p],
                    _ => continue,
                };
                for p in objects {
                    let name = p.metadata.name.clone().unwrap_or_default();
                    let now = Instant::now();
                    let chosen = p
                        .metadata
                        .annotations
                        .as_ref()
                        .is_some_and(|a| a.contains_key("volume.kubernetes.io/selected-node"));
                    if chosen {
                        selected.entry(name.clone()).or_insert(now);
                    }
                    if p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound") {
                        bound.entry(name).or_insert(now);
                    }
                }
                if bound.len() >= claims {
                    return (selected, bound);
                }
            }
            (selected, bound)
        })
    };

    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let started = Instant::now();
    let creates: Vec<_> = (0..claims)
        .map(|i| {
            let (pvcs, pods) = (pvcs.clone(), pods.clone());
            tokio::spawn(async move {
                let claim: PersistentVolumeClaim = serde_json::from_value(json!({
                    "metadata": {"name": format!("data-{i}")},
                    "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "64Mi"}}},
                }))
                .unwrap();
                pvcs.create(&PostParams::default(), &claim).await.unwrap();
                let pod: Pod = serde_json::from_value(json!({
                    "metadata": {"name": format!("user-{i}")},
                    "spec": {"containers": [{"name": "c", "image": "busybox"}],
                             "volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": format!("data-{i}")}}]},
                }))
                .unwrap();
                pods.create(&PostParams::default(), &pod).await.unwrap();
            })
        })
        .collect();
    for c in creates {
        c.await.unwrap();
    }
    let (selected, bound) = tokio::time::timeout(Duration::from_secs(300), watching)
        .await
        .expect("every claim bound within 5 minutes")
        .unwrap();
    let all_bound = started.elapsed();
    let mut took: Vec<Duration> = bound
        .iter()
        .filter_map(|(name, at)| Some(at.saturating_duration_since(*selected.get(name)?)))
        .collect();
    println!(
        "storage-bench: {claims} claims (local-path, WaitForFirstConsumer), each with a pod, created at once"
    );
    let measured = took.len();
    println!(
        "  node chosen -> claim Bound: {} ({measured} measured)",
        common::spread(&mut took)
    );
    println!(
        "  every claim Bound {} after the first create",
        common::ms(all_bound)
    );
    println!("  server RSS {:.0} MiB", common::rss_mib(server.id()));
    let _ = server.kill();
    let _ = server.wait();
}
