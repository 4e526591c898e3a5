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
use k8s_cri::v1 as cri;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, PostParams, WatchEvent, WatchParams};
use r8s_kubelet::spec::{self, NodeContext};

fn deployment(name: &str, replicas: usize) -> Deployment {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "nginx", "image": "nginx"}]}}}
    }))
    .unwrap()
}

fn ready(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

async fn control_plane(images: &Path, sizes: &[usize]) -> Vec<(usize, Vec<Duration>, Duration)> {
    let dir = tempfile::tempdir().unwrap();
    let staged = dir.path().join("agent").join("images");
    std::fs::create_dir_all(&staged).unwrap();
    for e in std::fs::read_dir(images).unwrap().flatten() {
        std::fs::copy(e.path(), staged.join(e.file_name())).unwrap();
    }
    let (mut server, client) = common::start_server(
        dir.path(),
        &[
            "--node-name",
            "bench-node",
            "--pod-bridge",
            "r8sbench0",
            "--cluster-cidr",
            "10.195.0.0/16",
            "--kubelet-address",
            "127.0.0.1",
            "--kubelet-port",
            "0",
        ],
        None,
    )
    .await;
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(client.clone());
    loop {
        let ready = nodes.get_opt("bench-node").await.ok().flatten().is_some_and(|n| {
            n.status
                .and_then(|s| s.conditions)
                .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
        });
        if ready {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
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
            if ready(&p) && !latencies.contains_key(&pname) {
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
    use r8s_kubelet::cni::{self, CniOptions};
    use r8s_kubelet::containerd::{Containerd, ContainerdOptions};
    let dir = tempfile::tempdir().unwrap();
    let mut opts = ContainerdOptions::new(dir.path().join("containerd"));
    opts.sandbox_image = std::fs::read_to_string(images.join("pause-image.txt"))
        .unwrap()
        .trim()
        .into();
    let cni_opts = CniOptions {
        conf_dir: opts.cni_conf_dir.clone(),
        ipam_dir: dir.path().join("ipam"),
        bridge: "r8sfloor0".into(),
        ip_masq: false,
        mtu: None,
    };
    cni::write(&cni_opts, "10.194.0.0/24").unwrap();
    let cgroup_parent = r8s_kubelet::cgroups::pod_parent("r8s-floor");
    let containerd = Containerd::start(opts).unwrap();
    r8s_kubelet::images::import_dir(&containerd.socket(), images).unwrap();
    let cri_client = r8s_kubelet::cri::Cri::connect(&containerd.socket())
        .await
        .unwrap();
    let node = NodeContext {
        node_name: "floor".into(),
        log_root: dir.path().join("logs").display().to_string(),
        cgroup_parent: cgroup_parent.clone(),
        ..Default::default()
    };
    let mut results = Vec::new();
    for &n in sizes {
        let started = Instant::now();
        let runs = (0..n).map(|i| {
            let cri_client = cri_client.clone();
            let node = node.clone();
            async move {
                let t = Instant::now();
                let pod: Pod = serde_json::from_value(serde_json::json!({
                    "metadata": {"name": format!("floor-{n}-{i}"), "namespace": "default", "uid": format!("floor-{n}-{i}")},
                    "spec": {"containers": [{"name": "nginx", "image": "nginx"}]}
                }))
                .unwrap();
                let sc = spec::sandbox_config(&pod, 0, &node);
                std::fs::create_dir_all(&sc.log_directory).unwrap();
                let mut rt = cri_client.runtime.clone();
                let sb = rt
                    .run_pod_sandbox(cri::RunPodSandboxRequest { config: Some(sc.clone()), runtime_handler: String::new() })
                    .await
                    .unwrap()
                    .into_inner()
                    .pod_sandbox_id;
                let (cc, _) = spec::container_config(
                    &pod,
                    &pod.spec.as_ref().unwrap().containers[0],
                    0,
                    &node,
                    &spec::ContainerInputs::default(),
                )
                .unwrap();
                let id = rt
                    .create_container(cri::CreateContainerRequest {
                        pod_sandbox_id: sb.clone(),
                        config: Some(cc),
                        sandbox_config: Some(sc),
                    })
                    .await
                    .unwrap()
                    .into_inner()
                    .container_id;
                rt.start_container(cri::StartContainerRequest { container_id: id }).await.unwrap();
                (t.elapsed(), sb)
            }
        });
        let done = futures::future::join_all(runs).await;
        let total = started.elapsed();
        let mut l: Vec<Duration> = done.iter().map(|(d, _)| *d).collect();
        l.sort();
        results.push((n, l, total));
        let mut rt = cri_client.runtime.clone();
        for (_, sb) in done {
            let _ = rt
                .stop_pod_sandbox(cri::StopPodSandboxRequest {
                    pod_sandbox_id: sb.clone(),
                })
                .await;
            let _ = rt
                .remove_pod_sandbox(cri::RemovePodSandboxRequest { pod_sandbox_id: sb })
                .await;
        }
    }
    drop(containerd);
    r8s_kubelet::cgroups::remove(&cgroup_parent);
    cni::remove_bridge("r8sfloor0");
    results
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    common::r8s_binary();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let images = root.join("target").join("test-images");
    if !images.join("pause-image.txt").exists() {
        let ok = std::process::Command::new("bash")
            .arg(root.join("scripts/build-test-images.sh"))
            .arg(&images)
            .status()
            .unwrap()
            .success();
        assert!(ok);
    }
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
