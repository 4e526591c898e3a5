//! The workload controllers on a simulated cluster: a real `r8s server` (embedded datastore,
//! scheduler and controller manager on, no agent) gets hollow nodes — Node objects with
//! capacity and no kubelet — and this harness plays every kubelet: it marks each bound pod
//! Running and Ready, and removes each deleted pod at once (grace 0) as a kubelet would
//! confirm its end. Measured:
//! 1. a DaemonSet rollout across 1,000 nodes: from the template change until every node runs
//!    an updated, available pod (`updatedNumberScheduled` = `numberAvailable` = 1,000), with
//!    `maxUnavailable` 10 % (`--max-unavailable`);
//! 2. a StatefulSet of 100 with Parallel pod management: from its creation until all 100 pods
//!    exist.
//!
//!   cargo build --release -p r8s --bins --examples && target/release/examples/workload-bench
//!
//! Sizes: --nodes N --replicas N --max-unavailable PERCENT.

#[path = "common/mod.rs"]
mod common;

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::{DaemonSet, StatefulSet};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use kube::{Client, ResourceExt};
use serde_json::json;

fn node(i: usize) -> Node {
    serde_json::from_value(json!({
        "metadata": {"name": format!("hollow-{i}"), "labels": {"kubernetes.io/hostname": format!("hollow-{i}")}},
        "status": {
            "capacity": {"cpu": "4", "memory": "32Gi", "pods": "110"},
            "allocatable": {"cpu": "4", "memory": "32Gi", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True"}]
        }
    }))
    .unwrap()
}

/// The kubelets of every hollow node: bound pods become Running and Ready, deleted pods go.
fn hollow_kubelets(client: Client) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let api: Api<Pod> = Api::namespaced(client, "default");
        let done: Arc<Mutex<HashSet<String>>> = Arc::default();
        let mut rv = "0".to_owned();
        loop {
            let Ok(stream) = api.watch(&WatchParams::default().timeout(290), &rv).await else {
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            };
            let mut stream = stream.boxed();
            while let Some(Ok(ev)) = stream.next().await {
                let pod = match ev {
                    WatchEvent::Added(p) | WatchEvent::Modified(p) => p,
                    WatchEvent::Bookmark(b) => {
                        rv = b.metadata.resource_version;
                        continue;
                    }
                    _ => continue,
                };
                rv = pod.resource_version().unwrap_or_default();
                let name = pod.name_any();
                let uid = pod.metadata.uid.clone().unwrap_or_default();
                let api = api.clone();
                if pod.metadata.deletion_timestamp.is_some() {
                    tokio::spawn(async move {
                        let _ = api.delete(&name, &DeleteParams::default().grace_period(0)).await;
                    });
                    continue;
                }
                let bound = pod.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some();
                if !bound || !done.lock().unwrap().insert(uid) {
                    continue;
                }
                tokio::spawn(async move {
                    let status = json!({"status": {"phase": "Running", "conditions": [
                        {"type": "Ready", "status": "True"}, {"type": "ContainersReady", "status": "True"}]}});
                    let _ = api
                        .patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
                        .await;
                });
            }
        }
    })
}

async fn wait_until<F: Fn(&DaemonSet) -> bool>(api: &Api<DaemonSet>, name: &str, f: F) {
    loop {
        if api.get(name).await.is_ok_and(|d| f(&d)) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let nodes = common::arg("--nodes", 1_000);
    let replicas = common::arg("--replicas", 100);
    let max_unavailable = common::arg("--max-unavailable", 10);
    let dir = tempfile::tempdir().unwrap();
    let log_path = dir.path().join("server.log");
    let (mut server, client) = common::start_server(dir.path(), &["--disable-agent"], Some(&log_path)).await;
    println!(
        "workload-bench: r8s server pid {}, {nodes} hollow nodes",
        server.id()
    );
    let node_api: Api<Node> = Api::all(client.clone());
    futures::stream::iter(0..nodes)
        .map(|i| {
            let api = node_api.clone();
            async move { api.create(&PostParams::default(), &node(i)).await.map(|_| ()) }
        })
        .buffer_unordered(64)
        .try_collect::<Vec<()>>()
        .await
        .unwrap();
    // The default ServiceAccount the pods need.
    let sa: Api<k8s_openapi::api::core::v1::ServiceAccount> = Api::namespaced(client.clone(), "default");
    while sa.get_opt("default").await.ok().flatten().is_none() {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let kubelets = hollow_kubelets(client.clone());
    tokio::time::sleep(Duration::from_secs(2)).await;

    // 1. The DaemonSet: up everywhere, then rolled out.
    let ds_api: Api<DaemonSet> = Api::namespaced(client.clone(), "default");
    let ds: DaemonSet = serde_json::from_value(json!({
        "metadata": {"name": "agent"},
        "spec": {"selector": {"matchLabels": {"app": "agent"}},
                 "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": format!("{max_unavailable}%")}},
                 "template": {"metadata": {"labels": {"app": "agent"}},
                              "spec": {"tolerations": [{"operator": "Exists"}],
                                       "containers": [{"name": "a", "image": "busybox"}]}}}
    }))
    .unwrap();
    let started = Instant::now();
    ds_api.create(&PostParams::default(), &ds).await.unwrap();
    let n = nodes as i32;
    wait_until(&ds_api, "agent", |d| {
        d.status
            .as_ref()
            .is_some_and(|s| s.number_ready == n && s.desired_number_scheduled == n)
    })
    .await;
    println!(
        "  DaemonSet on {nodes} nodes, all ready: {:.2} s",
        started.elapsed().as_secs_f64()
    );
    let patch = json!({"spec": {"template": {"spec": {"containers": [{"name": "a", "image": "busybox", "env": [{"name": "V", "value": "2"}]}]}}}});
    let started = Instant::now();
    ds_api
        .patch("agent", &PatchParams::default(), &Patch::Strategic(&patch))
        .await
        .unwrap();
    wait_until(&ds_api, "agent", |d| {
        let generation = d.metadata.generation;
        d.status.as_ref().is_some_and(|s| {
            s.observed_generation == generation
                && s.updated_number_scheduled == Some(n)
                && s.number_available == Some(n)
                && s.current_number_scheduled == n
        })
    })
    .await;
    let rollout = started.elapsed();
    println!(
        "  DaemonSet rollout across {nodes} nodes (maxUnavailable {max_unavailable}%): {:.2} s (target <= 10 s)",
        rollout.as_secs_f64()
    );
    ds_api.delete("agent", &DeleteParams::background()).await.unwrap();

    // 2. The StatefulSet, Parallel.
    let sts_api: Api<StatefulSet> = Api::namespaced(client.clone(), "default");
    let pod_api: Api<Pod> = Api::namespaced(client.clone(), "default");
    let sts: StatefulSet = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {"replicas": replicas, "podManagementPolicy": "Parallel", "serviceName": "web",
                 "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}},
                              "spec": {"containers": [{"name": "w", "image": "busybox"}]}}}
    }))
    .unwrap();
    let started = Instant::now();
    sts_api.create(&PostParams::default(), &sts).await.unwrap();
    loop {
        let pods = pod_api
            .list_metadata(&kube::api::ListParams::default().labels("app=web"))
            .await
            .unwrap();
        if pods.items.len() >= replicas {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let created = started.elapsed();
    let set_ready = {
        loop {
            let s = sts_api.get("web").await.unwrap();
            if s.status.as_ref().and_then(|s| s.ready_replicas) == Some(replicas as i32) {
                break started.elapsed();
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    println!(
        "  StatefulSet of {replicas}, Parallel: all pods created {:.2} s (target <= 2 s), all ready {:.2} s",
        created.as_secs_f64(),
        set_ready.as_secs_f64()
    );
    kubelets.abort();
    println!("  server RSS {:.0} MiB", common::rss_mib(server.id()));
    let _ = server.kill();
    let _ = server.wait();
}
