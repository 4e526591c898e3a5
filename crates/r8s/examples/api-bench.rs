//! The API server benchmark: a real `r8s server` (embedded datastore) driven over TLS through
//! the whole chain (authn, authz, admission, registry, store).
//!
//!   cargo build --release -p r8s --bins --examples && target/release/examples/api-bench
//!
//! The server runs as an API server alone (`--disable-controller-manager --disable-scheduler`;
//! the benchmark creates the `default` ServiceAccounts the controller manager would, so pods go
//! through the same admission as in a cluster). `--control-plane` runs the whole `r8s server`
//! instead: the scheduler then tries every pod created (no node fits: a status write and an
//! event each) and the controllers' informers cache them, all on the same 2 cores.
//!
//! Phases (sizes can be lowered with --pods N --watchers N --updates N):
//! 1. pod creates as fast as 64 concurrent clients go: creates/s, p50/p99;
//! 2. pod creates paced at 500/s for 10 s: p99 of a mutating call at that rate;
//! 3. gets by 64 concurrent clients: gets/s, p50/p99;
//! 4. LIST of every pod created in phase 1 (10,000) in one request: p50/max;
//! 5. watch fan-out: 1,000 watchers on one namespace's pods, then 1,000 pod updates from 64
//!    concurrent clients: the time until every watcher has seen every update.

#[path = "common/mod.rs"]
mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use http_body_util::BodyExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::Api;

fn pod(name: &str) -> Pod {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "labels": {"app": "bench"}},
        "spec": {"containers": [{"name": "c", "image": "busybox:1.36", "command": ["sleep", "3600"]}]}
    }))
    .unwrap()
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let pods = common::arg("--pods", 10_000);
    let watchers = common::arg("--watchers", 1_000);
    let updates = common::arg("--updates", 1_000);
    let writers = 64;

    let control_plane = std::env::args().any(|a| a == "--control-plane");
    let dir = tempfile::tempdir().unwrap();
    let args: &[&str] = if control_plane {
        &["--disable-agent"]
    } else {
        &[
            "--disable-agent",
            "--disable-controller-manager",
            "--disable-scheduler",
        ]
    };
    let (mut server, client) = common::start_server(dir.path(), args, None).await;
    if !control_plane {
        common::create_default_service_accounts(&client).await;
    }
    let kubeconfig = dir.path().join("kubeconfig.yaml");
    println!(
        "api-bench: r8s server pid {} ({}), {pods} pods, {watchers} watchers x {updates} updates",
        server.id(),
        if control_plane {
            "whole control plane"
        } else {
            "API server alone"
        }
    );

    // 1. Creates at full speed.
    let api: Api<Pod> = Api::namespaced(client.clone(), "default");
    let (lat, elapsed) = common::create_pods(std::slice::from_ref(&api), pods, writers, "p", pod).await;
    println!(
        "creates:        {:>8.0} /s   p50 {}  p99 {}",
        lat.len() as f64 / elapsed.as_secs_f64(),
        common::ms(common::pct(&lat, 0.5)),
        common::ms(common::pct(&lat, 0.99))
    );

    // 2. Creates paced at 500/s for 10 s.
    let paced: Api<Pod> = Api::namespaced(client.clone(), "kube-public");
    let mut handles = Vec::new();
    let start = tokio::time::Instant::now();
    for i in 0..5_000 {
        tokio::time::sleep_until(start + Duration::from_millis(2 * i as u64)).await;
        let paced = paced.clone();
        handles.push(tokio::spawn(async move {
            let t = Instant::now();
            paced
                .create(&PostParams::default(), &pod(&format!("paced-{i:05}")))
                .await
                .unwrap();
            t.elapsed()
        }));
    }
    let mut lat = Vec::new();
    for h in handles {
        lat.push(h.await.unwrap());
    }
    lat.sort();
    println!(
        "creates @500/s:              p50 {}  p99 {}",
        common::ms(common::pct(&lat, 0.5)),
        common::ms(common::pct(&lat, 0.99))
    );

    // 3. Gets.
    let getter = api.clone();
    let (lat, elapsed) = common::concurrently(pods, writers, move |i| {
        let api = getter.clone();
        async move {
            api.get(&format!("p-{i:06}")).await.unwrap();
        }
    })
    .await;
    println!(
        "gets:           {:>8.0} /s   p50 {}  p99 {}",
        lat.len() as f64 / elapsed.as_secs_f64(),
        common::ms(common::pct(&lat, 0.5)),
        common::ms(common::pct(&lat, 0.99))
    );

    // 4. LIST of every pod in the namespace, as raw bytes (the client's JSON decoding is not
    // the server's cost): the latest revision (from the datastore) and resourceVersion=0 (from
    // the watch cache, what informers ask for).
    for (what, query) in [("latest", ""), ("rv=0", "?resourceVersion=0")] {
        let mut lat = Vec::new();
        let mut count = 0;
        for _ in 0..5 {
            let t = Instant::now();
            let req = http::Request::get(format!("/api/v1/namespaces/default/pods{query}"))
                .body(Vec::new())
                .unwrap();
            let text = client.request_text(req).await.unwrap();
            lat.push(t.elapsed());
            count = text.matches("\"kind\":\"Pod\"").count();
        }
        lat.sort();
        println!(
            "LIST {count} pods ({what}):  p50 {}  max {}",
            common::ms(common::pct(&lat, 0.5)),
            common::ms(common::pct(&lat, 1.0))
        );
    }

    // 5. Watch fan-out.
    let ns = "kube-node-lease";
    let fan: Api<Pod> = Api::namespaced(client.clone(), ns);
    for i in 0..updates.min(100) {
        fan.create(&PostParams::default(), &pod(&format!("w-{i:03}")))
            .await
            .unwrap();
    }
    let rv = fan
        .list(&ListParams::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    // Watch streams spread over several connections (HTTP/2 caps streams per connection).
    let mut clients = Vec::new();
    for _ in 0..(watchers / 100).max(1) {
        clients.push(common::client(&kubeconfig).await);
    }
    let seen = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(AtomicUsize::new(0));
    let mut streams = Vec::new();
    for w in 0..watchers {
        let c = clients[w % clients.len()].clone();
        let req = http::Request::get(format!(
            "/api/v1/namespaces/{ns}/pods?watch=true&resourceVersion={rv}"
        ))
        .body(kube::client::Body::empty())
        .unwrap();
        let resp = c.send(req).await.unwrap();
        let seen = seen.clone();
        let done = done.clone();
        streams.push(tokio::spawn(async move {
            let mut body = resp.into_body();
            let mut lines = 0;
            while lines < updates {
                match body.frame().await {
                    Some(Ok(f)) => {
                        if let Some(d) = f.data_ref() {
                            let n = d.iter().filter(|b| **b == b'\n').count();
                            lines += n;
                            seen.fetch_add(n, Ordering::Relaxed);
                        }
                    }
                    _ => break,
                }
            }
            done.fetch_add(1, Ordering::Relaxed);
        }));
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let started = Instant::now();
    let next = Arc::new(AtomicUsize::new(0));
    let tasks: Vec<_> = (0..writers)
        .map(|_| {
            let fan = fan.clone();
            let next = next.clone();
            let n = updates.min(100);
            tokio::spawn(async move {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= updates {
                        return;
                    }
                    let patch = serde_json::json!({"metadata": {"labels": {"round": i.to_string()}}});
                    fan.patch(
                        &format!("w-{:03}", i % n),
                        &PatchParams::default(),
                        &Patch::Merge(patch),
                    )
                    .await
                    .unwrap();
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    let writes_done = started.elapsed();
    let deadline = Instant::now() + Duration::from_secs(120);
    while done.load(Ordering::Relaxed) < watchers && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let elapsed = started.elapsed();
    println!(
        "watch fan-out:  {watchers} watchers x {updates} updates: all delivered in {} (writes took {}; {} of {} events seen)",
        common::ms(elapsed),
        common::ms(writes_done),
        seen.load(Ordering::Relaxed),
        watchers * updates
    );
    println!(
        "server RSS after the run: {:.0} MiB",
        common::rss_mib(server.id())
    );
    let _ = server.kill();
    let _ = server.wait();
}
