//! Jobs on real containers, as the workloads issue asks: 100 Jobs × 10 completions of a trivial
//! container (busybox `true`, parallelism 1 each, so 100 pods run at a time) through the whole
//! of `r8s server` — API server, Job controller with its tracking finalizer, scheduler, agent,
//! containerd, CNI — timed from the first create to the last Job Complete; and in the same run
//! the floor: the same 1,000 pods (sandbox, container, wait for its exit, sandbox removed)
//! straight through CRI on a bare containerd, 100 at a time.
//!
//!   cargo build --release -p r8s --bins --examples && target/release/examples/job-bench
//!
//! `--jobs N` and `--completions N` change the sizes. Runs as root; the images come from
//! scripts/build-test-images.sh (target/test-images).

#[path = "common/mod.rs"]
mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use k8s_cri::v1 as cri;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, ListParams, PostParams, PropagationPolicy};

fn job(name: &str, completions: usize) -> Job {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name},
        "spec": {"completions": completions, "parallelism": 1, "backoffLimit": 6,
            "template": {"spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 1,
                "containers": [{"name": "work", "image": "busybox", "command": ["true"]}]}}}
    }))
    .unwrap()
}

fn complete(j: &Job) -> bool {
    j.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Complete" && c.status == "True"))
}

/// (time to all Complete, pods that ran, server RSS at the end in MiB).
async fn control_plane(images: &Path, jobs: usize, completions: usize) -> (Duration, usize, f64) {
    let (_dir, mut server, client) =
        common::start_node(images, "bench-node", "r8sjobs0", "10.193.0.0/16").await;
    let api: Api<Job> = Api::namespaced(client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let started = Instant::now();
    let creates = (0..jobs).map(|i| {
        let api = api.clone();
        async move {
            api.create(&PostParams::default(), &job(&format!("j{i}"), completions))
                .await
                .unwrap();
        }
    });
    futures::future::join_all(creates).await;
    let deadline = Instant::now() + Duration::from_secs(1800);
    let elapsed = loop {
        let list = api.list(&ListParams::default()).await.unwrap();
        let done = list.items.iter().filter(|j| complete(j)).count();
        if done == jobs {
            break started.elapsed();
        }
        assert!(
            Instant::now() < deadline,
            "only {done} of {jobs} Jobs complete after 30 min"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let ran = pods
        .list_metadata(&ListParams::default())
        .await
        .unwrap()
        .items
        .len();
    let rss = common::rss_mib(server.id());
    // Jobs and their pods go (the pods' containers with them) before the server stops.
    for i in 0..jobs {
        let _ = api
            .delete(
                &format!("j{i}"),
                &DeleteParams {
                    propagation_policy: Some(PropagationPolicy::Background),
                    ..Default::default()
                },
            )
            .await;
    }
    let until = Instant::now() + Duration::from_secs(300);
    while !pods
        .list_metadata(&ListParams::default())
        .await
        .unwrap()
        .items
        .is_empty()
        && Instant::now() < until
    {
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let _ = std::process::Command::new("kill")
        .args(["-TERM", &server.id().to_string()])
        .status();
    let _ = server.wait();
    (elapsed, ran, rss)
}

/// The same pods straight through CRI on a bare containerd, `parallel` at a time: the floor.
async fn cri_floor(images: &Path, total: usize, parallel: usize) -> Duration {
    let floor = common::Floor::start(images, "r8sjfloor0", "10.192.0.0/24", "r8s-job-floor").await;
    let started = Instant::now();
    let workers = (0..parallel).map(|w| {
        let floor = &floor;
        async move {
            let mut rt = floor.cri.runtime.clone();
            for i in (w..total).step_by(parallel) {
                let pod: Pod = serde_json::from_value(serde_json::json!({
                    "metadata": {"name": format!("floor-{i}"), "namespace": "default", "uid": format!("floor-{i}")},
                    "spec": {"restartPolicy": "Never", "containers": [{"name": "work", "image": "busybox", "command": ["true"]}]}
                }))
                .unwrap();
                let (sb, id) = floor.run_pod(&pod).await;
                // Until it has exited, as a kubelet's relist would see it.
                loop {
                    let st = rt
                        .container_status(cri::ContainerStatusRequest {
                            container_id: id.clone(),
                            verbose: false,
                        })
                        .await
                        .unwrap()
                        .into_inner()
                        .status
                        .unwrap_or_default();
                    if st.state == cri::ContainerState::ContainerExited as i32 {
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                floor.remove_sandbox(&sb).await;
            }
        }
    });
    futures::future::join_all(workers).await;
    started.elapsed()
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    common::r8s_binary();
    let images = common::test_images();
    let jobs = common::arg("--jobs", 100);
    let completions = common::arg("--completions", 10);
    let total = jobs * completions;
    println!("job-bench: {jobs} Jobs × {completions} completions of busybox `true`");
    let (elapsed, ran, rss) = control_plane(&images, jobs, completions).await;
    println!(
        "  r8s: all {jobs} Jobs Complete after {} ({ran} pods), {:.1} pods/s, server RSS {rss:.0} MiB",
        common::ms(elapsed),
        total as f64 / elapsed.as_secs_f64()
    );
    let floor = cri_floor(&images, total, jobs).await;
    println!(
        "  CRI floor: {total} pods run to exit after {}, {:.1} pods/s",
        common::ms(floor),
        total as f64 / floor.as_secs_f64()
    );
    println!(
        "  ratio (r8s time / floor time): {:.2}",
        elapsed.as_secs_f64() / floor.as_secs_f64()
    );
}
