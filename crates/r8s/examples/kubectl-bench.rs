//! r8s kubectl against the Go kubectl 1.33 on the same `r8s server` (control plane only): the
//! wall time of `get pods` with a warm discovery cache (both cache in kubectl's layout), run
//! alternately; then, with 10,000 pods, the wall time and peak memory (max RSS from wait4)
//! of `get pods -A`.
//!
//!   cargo build --release -p r8s --bins --examples && target/release/examples/kubectl-bench
//!
//! Sizes: --runs N (each client, default 30), --pods N (default 10000).

#[path = "common/mod.rs"]
mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{Api, PostParams};

fn go_kubectl() -> PathBuf {
    let dirs = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .unwrap_or_default();
    dirs.into_iter()
        .chain([PathBuf::from("/usr/lib/google-cloud-sdk/bin")])
        .map(|d| d.join("kubectl.1.33"))
        .find(|p| p.is_file())
        .expect("kubectl.1.33 (the kubectl package)")
}

/// One run, which must succeed: its wall time and peak RSS in MiB.
fn run(program: &Path, pre: &[&str], kubeconfig: &Path, cache: &Path, args: &[&str]) -> (Duration, f64) {
    let start = Instant::now();
    // Reaped with wait4 below, for its rusage.
    #[allow(clippy::zombie_processes)]
    let child = Command::new(program)
        .args(pre)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .env("KUBECACHEDIR", cache)
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut status = 0;
    // SAFETY: an all-zero rusage is valid; wait4 fills it for this child.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let pid = unsafe { libc::wait4(child.id() as i32, &mut status, 0, &mut usage) };
    let took = start.elapsed();
    assert!(
        pid > 0 && status == 0,
        "{} {args:?} failed ({status})",
        program.display()
    );
    (took, usage.ru_maxrss as f64 / 1024.0)
}

fn pod(name: &str) -> Pod {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "labels": {"app": "bench"}},
        "spec": {"containers": [{"name": "c", "image": "nginx"}]}
    }))
    .unwrap()
}

#[tokio::main]
async fn main() {
    let runs = common::arg("--runs", 30);
    let pods = common::arg("--pods", 10_000);
    let dir = tempfile::tempdir().unwrap();
    let (mut server, client) = common::start_server(
        dir.path(),
        &[
            "--disable-agent",
            "--disable-scheduler",
            "--disable-controller-manager",
        ],
        None,
    )
    .await;
    let kubeconfig = dir.path().join("kubeconfig.yaml");
    let r8s = common::r8s_binary();
    let go = go_kubectl();
    let (r8s_cache, go_cache) = (dir.path().join("cache-r8s"), dir.path().join("cache-go"));

    // The namespace's ServiceAccount, then 20 pods in it.
    let default_pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    common::create_default_service_accounts(&client).await;
    for i in 0..20 {
        default_pods
            .create(&PostParams::default(), &pod(&format!("web-{i}")))
            .await
            .unwrap();
    }
    for _ in 0..2 {
        run(&r8s, &["kubectl"], &kubeconfig, &r8s_cache, &["get", "pods"]);
        run(&go, &[], &kubeconfig, &go_cache, &["get", "pods"]);
    }
    let (mut ours, mut theirs) = (Vec::new(), Vec::new());
    for _ in 0..runs {
        ours.push(run(&r8s, &["kubectl"], &kubeconfig, &r8s_cache, &["get", "pods"]).0);
        theirs.push(run(&go, &[], &kubeconfig, &go_cache, &["get", "pods"]).0);
    }
    let (ours_p50, theirs_p50) = {
        ours.sort();
        theirs.sort();
        (common::pct(&ours, 0.5), common::pct(&theirs, 0.5))
    };
    println!("get pods (20 pods, warm cache), {runs} runs each:");
    println!("  r8s kubectl:  {}", common::spread(&mut ours));
    println!("  kubectl 1.33: {}", common::spread(&mut theirs));
    println!(
        "  r8s kubectl p50 / kubectl p50 = {:.2}",
        ours_p50.as_secs_f64() / theirs_p50.as_secs_f64()
    );

    // Many pods over ten namespaces.
    let namespaces: Vec<String> = (0..10).map(|i| format!("bench-{i}")).collect();
    let ns_api: Api<Namespace> = Api::all(client.clone());
    for ns in &namespaces {
        let n: Namespace = serde_json::from_value(serde_json::json!({"metadata": {"name": ns}})).unwrap();
        ns_api.create(&PostParams::default(), &n).await.unwrap();
    }
    for ns in &namespaces {
        let sas: Api<k8s_openapi::api::core::v1::ServiceAccount> = Api::namespaced(client.clone(), ns);
        let sa = serde_json::from_value(serde_json::json!({"metadata": {"name": "default"}})).unwrap();
        sas.create(&PostParams::default(), &sa).await.unwrap();
    }
    let start = Instant::now();
    let total = pods.saturating_sub(20);
    futures::stream::iter(0..total)
        .map(|i| {
            let api: Api<Pod> = Api::namespaced(client.clone(), &namespaces[i % namespaces.len()]);
            async move {
                api.create(&PostParams::default(), &pod(&format!("p-{i}")))
                    .await
                    .unwrap();
            }
        })
        .buffer_unordered(32)
        .collect::<Vec<()>>()
        .await;
    println!(
        "created {total} more pods in {:.1} s",
        start.elapsed().as_secs_f64()
    );
    let (mut ours, mut theirs) = (Vec::new(), Vec::new());
    for _ in 0..3 {
        ours.push(run(
            &r8s,
            &["kubectl"],
            &kubeconfig,
            &r8s_cache,
            &["get", "pods", "-A"],
        ));
        theirs.push(run(&go, &[], &kubeconfig, &go_cache, &["get", "pods", "-A"]));
    }
    let peak = |v: &[(Duration, f64)]| v.iter().map(|r| r.1).fold(0.0, f64::max);
    let wall = |v: &[(Duration, f64)]| {
        let mut w: Vec<Duration> = v.iter().map(|r| r.0).collect();
        w.sort();
        common::pct(&w, 0.5)
    };
    println!("get pods -A ({pods} pods), 3 runs each:");
    println!(
        "  r8s kubectl:  wall p50 {}  max RSS {:.1} MiB",
        common::ms(wall(&ours)),
        peak(&ours)
    );
    println!(
        "  kubectl 1.33: wall p50 {}  max RSS {:.1} MiB",
        common::ms(wall(&theirs)),
        peak(&theirs)
    );
    println!(
        "  r8s kubectl RSS / kubectl RSS = {:.2}",
        peak(&ours) / peak(&theirs)
    );
    let _ = server.kill();
    let _ = server.wait();
}
