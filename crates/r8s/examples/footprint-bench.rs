//! A node's footprint at rest (issue 41): resident memory and idle CPU of `r8s server` (API
//! server, controllers, scheduler and agent in one process) and the containerd it runs, with the
//! pods' shims counted apart, on the test images:
//!
//! - `empty`: the node Ready, no pods but the system's;
//! - `3 nginx`: a Deployment of 3 nginx pods, Ready (the budget: r8s + containerd
//!   ≤ 100 MiB, idle CPU of r8s + containerd ≤ 0.3 % of a core);
//! - then `--pause 10,100`: a Deployment of pause-only pods scaled to each count (with the 3
//!   nginx pods still there), for the cost per pod.
//!
//! Each phase waits until every pod is Ready, lets the node settle (`--settle` seconds, 20), then
//! samples CPU time over `--idle` seconds (60) and memory at its end: RSS, and PSS (which shares
//! the pages the shims have in common out among them).
//!
//!   cargo build --release -p r8s --bins --examples && target/release/examples/footprint-bench
//!
//! Exits 1 when the `3 nginx` phase is over `--budget-mib` (100) or `--cpu-budget-permille`
//! (3, i.e. 0.3 % of a core). Runs as root; the images come from scripts/build-test-images.sh.
//! `R8S_BENCH_WRAP`/`R8S_BENCH_SERVER_ARGS` (see common/mod.rs) compare binaries or flags.

#[path = "common/mod.rs"]
mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};

fn deployment(name: &str, image: &str, replicas: usize) -> Deployment {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": name, "image": image}],
                    "terminationGracePeriodSeconds": 1}}}
    }))
    .unwrap()
}

/// Wait until `n` pods of the namespace are Ready (and no more pods are there).
async fn wait_ready(pods: &Api<Pod>, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        let list = pods.list(&Default::default()).await.unwrap().items;
        if list.len() == n && list.iter().all(common::pod_ready) {
            return;
        }
        assert!(Instant::now() < deadline, "{n} pods not Ready in 10 minutes");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The processes a phase measures.
struct Procs {
    r8s: u32,
    containerd: Option<u32>,
    shims: Vec<u32>,
}

/// containerd (its pid file under the data dir) and the shims whose `-address` is its socket.
fn procs(server: u32, dir: &Path) -> Procs {
    let cdir = dir.join("agent").join("containerd");
    let containerd = std::fs::read_to_string(cdir.join("containerd.pid"))
        .ok()
        .and_then(|s| s.trim().parse().ok());
    let socket = cdir.join("containerd.sock").display().to_string();
    let mut shims = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
            continue;
        };
        let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
        let is_shim = args
            .first()
            .is_some_and(|a| String::from_utf8_lossy(a).contains("containerd-shim"));
        let ours = args
            .windows(2)
            .any(|w| w[0] == b"-address" && w[1] == socket.as_bytes());
        if is_shim && ours {
            shims.push(pid);
        }
    }
    Procs {
        r8s: server,
        containerd,
        shims,
    }
}

/// Proportional set size (kB in smaps_rollup) of a process, in MiB.
fn pss_mib(pid: u32) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Pss:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
        })
        .map_or(0.0, |kb| kb / 1024.0)
}

#[derive(Clone)]
struct Figures {
    phase: String,
    pods: usize,
    r8s_rss: f64,
    containerd_rss: f64,
    shims: usize,
    shims_rss: f64,
    shims_pss: f64,
    /// Per mille of one core over the idle window.
    r8s_cpu: f64,
    containerd_cpu: f64,
    shims_cpu: f64,
}

async fn measure(phase: &str, pods: usize, server: u32, dir: &Path, settle: u64, idle: u64) -> Figures {
    tokio::time::sleep(Duration::from_secs(settle)).await;
    let p = procs(server, dir);
    let cpu = |p: &Procs| {
        (
            common::cpu_time(p.r8s),
            p.containerd.map_or(Duration::ZERO, common::cpu_time),
            p.shims.iter().map(|&s| common::cpu_time(s)).sum::<Duration>(),
        )
    };
    let before = cpu(&p);
    let t = Instant::now();
    tokio::time::sleep(Duration::from_secs(idle)).await;
    let after = cpu(&p);
    let window = t.elapsed().as_secs_f64();
    let permille = |a: Duration, b: Duration| (a.saturating_sub(b)).as_secs_f64() / window * 1000.0;
    Figures {
        phase: phase.into(),
        pods,
        r8s_rss: common::rss_mib(p.r8s),
        containerd_rss: p.containerd.map_or(0.0, common::rss_mib),
        shims: p.shims.len(),
        shims_rss: p
            .shims
            .iter()
            .map(|&s| common::rss_mib(s))
            .fold(0.0, |a, b| a + b),
        shims_pss: p.shims.iter().map(|&s| pss_mib(s)).fold(0.0, |a, b| a + b),
        r8s_cpu: permille(after.0, before.0),
        containerd_cpu: permille(after.1, before.1),
        shims_cpu: permille(after.2, before.2),
    }
}

fn print(f: &Figures) {
    let per_shim = |v: f64| if f.shims == 0 { 0.0 } else { v / f.shims as f64 };
    println!(
        "| {} | {} | {:.1} | {:.1} | **{:.1}** | {} | {:.1} ({:.2} each) | {:.1} ({:.2} each) | {:.2} % | {:.2} % | **{:.2} %** | {:.2} % |",
        f.phase,
        f.pods,
        f.r8s_rss,
        f.containerd_rss,
        f.r8s_rss + f.containerd_rss,
        f.shims,
        f.shims_rss,
        per_shim(f.shims_rss),
        f.shims_pss,
        per_shim(f.shims_pss),
        f.r8s_cpu / 10.0,
        f.containerd_cpu / 10.0,
        (f.r8s_cpu + f.containerd_cpu) / 10.0,
        f.shims_cpu / 10.0,
    );
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    common::r8s_binary();
    let settle = common::arg("--settle", 20) as u64;
    let idle = common::arg("--idle", 60) as u64;
    let budget_mib = common::arg("--budget-mib", 100) as f64;
    let cpu_budget = common::arg("--cpu-budget-permille", 3) as f64;
    let args: Vec<String> = std::env::args().collect();
    let pause: Vec<usize> = args
        .iter()
        .position(|a| a == "--pause")
        .and_then(|i| args.get(i + 1))
        .map(|v| {
            v.split(',')
                .filter(|s| !s.is_empty())
                .map(|s| s.parse().expect("counts"))
                .collect()
        })
        .unwrap_or_else(|| vec![10, 100]);
    let images = common::test_images();
    let pause_image = std::fs::read_to_string(images.join("pause-image.txt"))
        .unwrap()
        .trim()
        .to_owned();
    let (dir, mut server, client) =
        common::start_node(&images, "footprint", "r8sfoot0", "10.197.0.0/16").await;
    let pid = server.id();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let deploys: Api<Deployment> = Api::namespaced(client.clone(), "default");

    println!(
        "footprint-bench: settle {settle} s, idle window {idle} s; RSS/PSS in MiB, CPU in % of one core"
    );
    println!("| phase | pods | r8s RSS | containerd RSS | r8s + containerd | shims | shims RSS | shims PSS | r8s CPU | containerd CPU | r8s + containerd CPU | shims CPU |");
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|");
    let mut figures = Vec::new();
    let f = measure("empty", 0, pid, dir.path(), settle, idle).await;
    print(&f);
    figures.push(f);

    deploys
        .create(&PostParams::default(), &deployment("nginx", "nginx", 3))
        .await
        .unwrap();
    wait_ready(&pods, 3).await;
    let nginx = measure("3 nginx", 3, pid, dir.path(), settle, idle).await;
    print(&nginx);
    figures.push(nginx.clone());

    let mut created = false;
    for &n in &pause {
        if created {
            let scale = serde_json::json!({"spec": {"replicas": n}});
            deploys
                .patch("pause", &PatchParams::default(), &Patch::Merge(&scale))
                .await
                .unwrap();
        } else {
            deploys
                .create(&PostParams::default(), &deployment("pause", &pause_image, n))
                .await
                .unwrap();
            created = true;
        }
        wait_ready(&pods, 3 + n).await;
        let f = measure(
            &format!("3 nginx + {n} pause"),
            3 + n,
            pid,
            dir.path(),
            settle,
            idle,
        )
        .await;
        print(&f);
        figures.push(f);
    }
    if figures.len() > 2 {
        // The cost of one more pod, from the 3 nginx pods to the last pause phase.
        let (a, b) = (&figures[1], &figures[figures.len() - 1]);
        let pods = (b.pods - a.pods) as f64;
        {
            println!(
                "per pod ({} → {} pods): r8s {:.2} MiB, containerd {:.2} MiB, shims RSS {:.2} / PSS {:.2} MiB",
                a.pods,
                b.pods,
                (b.r8s_rss - a.r8s_rss) / pods,
                (b.containerd_rss - a.containerd_rss) / pods,
                (b.shims_rss - a.shims_rss) / pods,
                (b.shims_pss - a.shims_pss) / pods,
            );
        }
    }

    for name in ["nginx", "pause"] {
        let _ = deploys.delete(name, &DeleteParams::default()).await;
    }
    wait_ready(&pods, 0).await;
    let _ = std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status();
    let _ = server.wait();
    // Removed now: exiting over budget skips destructors.
    drop(dir);

    let memory = nginx.r8s_rss + nginx.containerd_rss;
    let cpu = nginx.r8s_cpu + nginx.containerd_cpu;
    let mut over = false;
    if memory > budget_mib {
        println!(
            "OVER BUDGET: r8s + containerd hold {memory:.1} MiB with 3 nginx pods (budget {budget_mib} MiB)"
        );
        over = true;
    }
    if cpu > cpu_budget {
        println!(
            "OVER BUDGET: r8s + containerd use {:.2} % of a core idle with 3 nginx pods (budget {:.1} %)",
            cpu / 10.0,
            cpu_budget / 10.0
        );
        over = true;
    }
    if over {
        std::process::exit(1);
    }
    println!("within budget: {memory:.1} MiB, {:.2} % of a core", cpu / 10.0);
}
