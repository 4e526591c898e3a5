//! The scale run (issue 41): upstream's scalability envelope on this machine. A real
//! `r8s server` (embedded datastore, scheduler and controller manager on, no agent) and
//! `r8s agent --hollow N` — N hollow nodes in one process, each joined as a node of its own,
//! registering, renewing its Lease and running its pods through the real agent over a runtime in
//! memory. Pods are created through the API as Deployments and run to Ready on the hollow nodes.
//!
//! Measured, against upstream's SLOs (kubernetes/community sig-scalability/slos):
//! - API call latency p99 by verb, resource, subresource and scope, from the server's
//!   `apiserver_request_duration_seconds` histogram over the run: mutating ≤ 1 s, non-list
//!   reads ≤ 1 s, lists ≤ 30 s (WATCH and CONNECT are not measured, as upstream);
//! - pod startup: from the moment a pod is first seen (its create, through a watch) to the
//!   moment it is seen Running and Ready, p50/p90/p99 (SLO: p99 ≤ 5 s);
//! - scheduler throughput (pods bound per second over the run, and the best 10 s);
//! - server and hollow-agent RSS, the datastore's size on disk;
//! - recovery after a server restart (SIGTERM, started again on its data): until it serves,
//!   and until a new Deployment's pods are all Ready on the hollow nodes (every cache and
//!   watch of the scheduler, controllers and kubelets is back), with how many nodes went
//!   NotReady meanwhile.
//!
//!   cargo build --release -p r8s --bins --examples
//!   target/release/examples/scale-bench --nodes 5000 --pods-per-node 30
//!
//! Sizes: --nodes N, --pods-per-node N, --replicas N (per Deployment), --limit SECONDS (for the
//! pods to be Ready; the run reports how far it got if it is reached).

#[path = "common/mod.rs"]
mod common;

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use kube::api::{Api, ListParams, PostParams};
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use serde_json::json;

/// What the watch saw of each pod: first seen, bound, Running and Ready.
#[derive(Default, Clone, Copy)]
struct Seen {
    created: Option<Instant>,
    bound: Option<Instant>,
    ready: Option<Instant>,
}

type Pods = Arc<Mutex<HashMap<String, Seen>>>;

fn pod_ready(p: &Pod) -> bool {
    let status = p.status.as_ref();
    status.and_then(|s| s.phase.as_deref()) == Some("Running")
        && status
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// Watch the pods of `ns`, noting when each is first seen, bound and Ready.
fn watch_pods(client: Client, ns: &str, pods: Pods) -> tokio::task::JoinHandle<()> {
    let api: Api<Pod> = Api::namespaced(client, ns);
    tokio::spawn(async move {
        let mut stream = std::pin::pin!(watcher(api, watcher::Config::default()));
        while let Some(ev) = stream.next().await {
            let pod = match ev {
                Ok(watcher::Event::Apply(p)) | Ok(watcher::Event::InitApply(p)) => p,
                _ => continue,
            };
            let now = Instant::now();
            let mut pods = pods.lock().unwrap();
            let seen = pods.entry(pod.uid().unwrap_or_default()).or_default();
            seen.created.get_or_insert(now);
            if pod.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some() {
                seen.bound.get_or_insert(now);
            }
            if pod_ready(&pod) {
                seen.ready.get_or_insert(now);
            }
        }
    })
}

fn counts(pods: &Pods) -> (usize, usize, usize) {
    let pods = pods.lock().unwrap();
    let bound = pods.values().filter(|s| s.bound.is_some()).count();
    let ready = pods.values().filter(|s| s.ready.is_some()).count();
    (pods.len(), bound, ready)
}

fn deployment(name: &str, replicas: usize) -> Deployment {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name, "group": "scale"}},
                "spec": {"containers": [{
                    "name": "pause",
                    "image": "registry.k8s.io/pause:3.10",
                    "resources": {"requests": {"cpu": "10m", "memory": "10Mi"}}
                }]}
            }
        }
    }))
    .unwrap()
}

/// `r8s server` on `dir` and `port`, its output appended to `log`.
fn spawn_server(dir: &Path, port: u16, log: &Path) -> Child {
    let out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .unwrap();
    Command::new(common::r8s_binary())
        .args(["server", "--data-dir", dir.to_str().unwrap()])
        .args([
            "--bind-address",
            "127.0.0.1",
            "--https-listen-port",
            &port.to_string(),
        ])
        .args(["--disable-agent", "--cluster-cidr", "10.0.0.0/8"])
        .env(
            "R8S_LOG",
            std::env::var("R8S_LOG").unwrap_or_else(|_| "warn".into()),
        )
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        .stdin(Stdio::null())
        .spawn()
        .unwrap()
}

async fn wait_serving(client: &Client) -> Instant {
    loop {
        let req = http::Request::get("/readyz").body(Vec::new()).unwrap();
        if client.request_text(req).await.is_ok() {
            return Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Ready and not-Ready node counts.
async fn node_counts(client: &Client) -> (usize, usize) {
    let api: Api<Node> = Api::all(client.clone());
    let Ok(list) = api.list(&ListParams::default()).await else {
        return (0, 0);
    };
    let ready = list
        .items
        .iter()
        .filter(|n| {
            n.status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
        })
        .count();
    (ready, list.items.len() - ready)
}

/// One histogram of `apiserver_request_duration_seconds`: cumulative counts by upper bound.
#[derive(Default, Clone)]
struct Histogram {
    buckets: Vec<(f64, f64)>,
    count: f64,
}

/// The server's request-latency histograms by (verb, resource, subresource, scope).
async fn latency_histograms(client: &Client) -> BTreeMap<(String, String, String, String), Histogram> {
    let req = http::Request::get("/metrics").body(Vec::new()).unwrap();
    let text = client.request_text(req).await.unwrap_or_default();
    let mut out: BTreeMap<_, Histogram> = BTreeMap::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("apiserver_request_duration_seconds_") else {
            continue;
        };
        let Some((kind, rest)) = rest.split_once('{') else {
            continue;
        };
        let Some((labels, value)) = rest.rsplit_once("} ") else {
            continue;
        };
        let Ok(value) = value.trim().parse::<f64>() else {
            continue;
        };
        let label = |name: &str| {
            labels
                .split(',')
                .find_map(|kv| kv.strip_prefix(&format!("{name}=\"")))
                .map(|v| v.trim_end_matches('"').to_string())
                .unwrap_or_default()
        };
        let key = (
            label("verb"),
            label("resource"),
            label("subresource"),
            label("scope"),
        );
        let h = out.entry(key).or_default();
        match kind {
            "bucket" => {
                let le = label("le");
                let le = if le == "+Inf" {
                    f64::INFINITY
                } else {
                    le.parse().unwrap_or(f64::INFINITY)
                };
                h.buckets.push((le, value));
            }
            "count" => h.count = value,
            _ => {}
        }
    }
    out
}

/// `after - before`, bucket by bucket.
fn delta(after: &Histogram, before: Option<&Histogram>) -> Histogram {
    let Some(before) = before else {
        return after.clone();
    };
    Histogram {
        buckets: after
            .buckets
            .iter()
            .map(|(le, v)| {
                let b = before
                    .buckets
                    .iter()
                    .find(|(l, _)| l == le)
                    .map_or(0.0, |(_, v)| *v);
                (*le, v - b)
            })
            .collect(),
        count: after.count - before.count,
    }
}

/// The `q` quantile as Prometheus's `histogram_quantile` estimates it (linear within a bucket).
fn quantile(h: &Histogram, q: f64) -> f64 {
    if h.count <= 0.0 {
        return 0.0;
    }
    let mut buckets = h.buckets.clone();
    buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
    let rank = q * h.count;
    let (mut lower, mut below) = (0.0, 0.0);
    for (le, cum) in buckets {
        if cum >= rank {
            if le.is_infinite() {
                return lower;
            }
            let within = cum - below;
            return if within <= 0.0 {
                le
            } else {
                lower + (le - lower) * (rank - below) / within
            };
        }
        lower = le;
        below = cum;
    }
    lower
}

fn secs(d: Duration) -> String {
    format!("{:.2} s", d.as_secs_f64())
}

fn dir_size(dir: &Path) -> u64 {
    let Ok(rd) = std::fs::read_dir(dir) else { return 0 };
    rd.flatten()
        .map(|e| match e.file_type() {
            Ok(t) if t.is_dir() => dir_size(&e.path()),
            _ => e.metadata().map_or(0, |m| m.len()),
        })
        .sum()
}

fn raise_open_files(to: u64) {
    let lim = libc::rlimit {
        rlim_cur: to,
        rlim_max: to,
    };
    // SAFETY: setrlimit reads the one struct passed.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) } != 0 {
        eprintln!("scale-bench: could not raise the open-files limit to {to} (not root?)");
    }
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let nodes = common::arg("--nodes", 5_000);
    let per_node = common::arg("--pods-per-node", 30);
    let replicas = common::arg("--replicas", 150);
    let limit = Duration::from_secs(common::arg("--limit", 3_600) as u64);
    let total = nodes * per_node;
    let deployments = total.div_ceil(replicas);
    // Every hollow node holds a few connections to the server (HTTP/1.1: one per watch).
    raise_open_files(1 << 20);
    let dir = tempfile::tempdir().unwrap();
    let server_dir = dir.path().join("server-data");
    let server_log = dir.path().join("server.log");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut server = spawn_server(&server_dir, port, &server_log);
    let kubeconfig = server_dir.join("kubeconfig.yaml");
    while !kubeconfig.exists() || std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let client = common::client(&kubeconfig).await;
    wait_serving(&client).await;
    while !server_dir.join("server/node-token").exists() {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    println!(
        "scale-bench: {nodes} hollow nodes, {total} pods ({deployments} Deployments of {replicas}), r8s server pid {}",
        server.id()
    );

    // The hollow nodes.
    let hollow_log = dir.path().join("hollow.log");
    let out = std::fs::File::create(&hollow_log).unwrap();
    let started = Instant::now();
    let mut hollow = Command::new(common::r8s_binary())
        .args(["agent", "--server", &format!("https://127.0.0.1:{port}")])
        .arg("--token-file")
        .arg(server_dir.join("server/node-token"))
        .arg("--data-dir")
        .arg(dir.path().join("hollow-data"))
        .args(["--hollow", &nodes.to_string(), "--node-ip", "127.0.0.1"])
        .env(
            "R8S_LOG",
            std::env::var("R8S_LOG").unwrap_or_else(|_| "warn".into()),
        )
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    loop {
        let (ready, _) = node_counts(&client).await;
        if ready >= nodes {
            break;
        }
        if let Some(status) = hollow.try_wait().unwrap() {
            panic!(
                "the hollow agent exited ({status}):\n{}",
                std::fs::read_to_string(&hollow_log).unwrap_or_default()
            );
        }
        assert!(
            started.elapsed() < limit,
            "{ready} of {nodes} nodes Ready after {:?}",
            limit
        );
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    let nodes_up = started.elapsed();
    println!(
        "scale-bench: {nodes} nodes Ready in {} (server RSS {:.0} MiB, hollow agent RSS {:.0} MiB)",
        secs(nodes_up),
        common::rss_mib(server.id()),
        common::rss_mib(hollow.id())
    );

    // The pods, as Deployments in a namespace of their own.
    let ns_api: Api<Namespace> = Api::all(client.clone());
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": "scale"}})).unwrap();
    ns_api.create(&PostParams::default(), &ns).await.unwrap();
    let sa: Api<k8s_openapi::api::core::v1::ServiceAccount> = Api::namespaced(client.clone(), "scale");
    while sa.get_opt("default").await.ok().flatten().is_none() {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let pods: Pods = Arc::default();
    let watch = watch_pods(client.clone(), "scale", pods.clone());
    let before = latency_histograms(&client).await;
    let cpu_before = (common::cpu_time(server.id()), common::cpu_time(hollow.id()));
    let dep_api: Api<Deployment> = Api::namespaced(client.clone(), "scale");
    let started = Instant::now();
    futures::stream::iter(0..deployments)
        .map(|i| {
            let api = dep_api.clone();
            let n = replicas.min(total - i * replicas);
            async move {
                api.create(&PostParams::default(), &deployment(&format!("scale-{i:05}"), n))
                    .await
                    .map(|_| ())
            }
        })
        .buffer_unordered(8)
        .try_collect::<Vec<()>>()
        .await
        .unwrap();
    let mut last_print = Instant::now();
    let mut peak_rss = (0.0f64, 0.0f64);
    let finished = loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let (seen, bound, ready) = counts(&pods);
        peak_rss.0 = peak_rss.0.max(common::rss_mib(server.id()));
        peak_rss.1 = peak_rss.1.max(common::rss_mib(hollow.id()));
        if last_print.elapsed() >= Duration::from_secs(10) {
            last_print = Instant::now();
            let (nready, nnot) = node_counts(&client).await;
            println!(
                "  {:>5.0} s: pods {seen} created, {bound} bound, {ready} Ready; nodes {nready} Ready, {nnot} not; server {:.0} MiB, hollow agent {:.0} MiB",
                started.elapsed().as_secs_f64(),
                common::rss_mib(server.id()),
                common::rss_mib(hollow.id())
            );
        }
        if ready >= total {
            break true;
        }
        if started.elapsed() > limit {
            break false;
        }
    };
    let took = started.elapsed();
    let cpu = (
        common::cpu_time(server.id()) - cpu_before.0,
        common::cpu_time(hollow.id()) - cpu_before.1,
    );
    let after = latency_histograms(&client).await;
    let (seen, bound, ready) = counts(&pods);
    println!(
        "scale-bench: {} — {ready} of {total} pods Ready in {} ({seen} created, {bound} bound); CPU server {}, hollow agent {}",
        if finished { "done" } else { "LIMIT REACHED" },
        secs(took),
        secs(cpu.0),
        secs(cpu.1)
    );

    // Pod startup.
    let snapshot: Vec<Seen> = pods.lock().unwrap().values().copied().collect();
    let mut startup: Vec<Duration> = snapshot
        .iter()
        .filter_map(|s| Some(s.ready? - s.created?))
        .collect();
    startup.sort();
    println!(
        "pod startup (first seen → Ready, watched): p50 {} p90 {} p99 {} max {} (SLO p99 ≤ 5 s)",
        secs(common::pct(&startup, 0.50)),
        secs(common::pct(&startup, 0.90)),
        secs(common::pct(&startup, 0.99)),
        secs(startup.last().copied().unwrap_or_default())
    );
    // Scheduler throughput.
    let mut binds: Vec<Instant> = snapshot.iter().filter_map(|s| s.bound).collect();
    binds.sort();
    if let (Some(first), Some(last)) = (binds.first(), binds.last()) {
        let span = (*last - *first).as_secs_f64().max(0.001);
        let mut best = 0;
        let mut j = 0;
        for i in 0..binds.len() {
            while binds[i] - binds[j] > Duration::from_secs(10) {
                j += 1;
            }
            best = best.max(i - j + 1);
        }
        println!(
            "scheduler: {} pods bound in {:.1} s, {:.0} pods/s on average, {:.0} pods/s at best (10 s)",
            binds.len(),
            span,
            binds.len() as f64 / span,
            best as f64 / 10.0
        );
    }
    // API call latency against the SLOs.
    println!(
        "API call latency over the run (p99 of apiserver_request_duration_seconds; the worst of each verb):"
    );
    let mut worst: BTreeMap<String, (f64, String, f64)> = BTreeMap::new();
    for (key, h) in &after {
        let (verb, resource, sub, scope) = key;
        if verb == "WATCH" || verb == "CONNECT" {
            continue;
        }
        let d = delta(h, before.get(key));
        if d.count < 1.0 {
            continue;
        }
        let p99 = quantile(&d, 0.99);
        let name = format!(
            "{resource}{}{} ({scope}, {} calls)",
            if sub.is_empty() { "" } else { "/" },
            sub,
            d.count
        );
        let e = worst.entry(verb.clone()).or_insert((0.0, String::new(), 0.0));
        e.2 += d.count;
        if p99 >= e.0 {
            e.0 = p99;
            e.1 = name;
        }
    }
    // Where the calls went: the busiest (verb, resource) pairs.
    let mut busiest: Vec<(f64, String)> = after
        .iter()
        .filter(|((verb, ..), _)| verb != "WATCH" && verb != "CONNECT")
        .map(|(key, h)| {
            let (verb, resource, sub, _) = key;
            let d = delta(h, before.get(key));
            let sub = if sub.is_empty() {
                String::new()
            } else {
                format!("/{sub}")
            };
            (d.count, format!("{verb} {resource}{sub}"))
        })
        .collect();
    busiest.sort_by(|a, b| b.0.total_cmp(&a.0));
    let busiest: Vec<String> = busiest
        .iter()
        .take(8)
        .map(|(n, k)| format!("{k} {n:.0}"))
        .collect();
    println!("  busiest: {}", busiest.join(", "));
    for (verb, (p99, name, calls)) in &worst {
        let slo = if verb == "LIST" { 30.0 } else { 1.0 };
        println!(
            "  {verb:<7} {calls:>9.0} calls, worst p99 {:.3} s ({name}) — SLO {slo} s: {}",
            p99,
            if *p99 <= slo { "met" } else { "MISSED" }
        );
    }
    let db = dir_size(&server_dir.join("server/db"));
    println!(
        "memory: server RSS {:.0} MiB now ({:.0} MiB at most), hollow agent {:.0} MiB ({:.0} at most); datastore {:.0} MiB on disk",
        common::rss_mib(server.id()),
        peak_rss.0,
        common::rss_mib(hollow.id()),
        peak_rss.1,
        db as f64 / (1 << 20) as f64
    );

    // Recovery after a server restart.
    if finished {
        unsafe { libc::kill(server.id() as i32, libc::SIGTERM) };
        let stopped = Instant::now();
        let _ = tokio::task::spawn_blocking(move || server.wait()).await;
        let stop_took = stopped.elapsed();
        let restarted = Instant::now();
        server = spawn_server(&server_dir, port, &server_log);
        let serving = wait_serving(&client).await - restarted;
        let mut not_ready_max = 0;
        dep_api
            .create(&PostParams::default(), &deployment("after-restart", per_node))
            .await
            .unwrap();
        let probe_api: Api<Pod> = Api::namespaced(client.clone(), "scale");
        let recovered = loop {
            let (_, nnot) = node_counts(&client).await;
            not_ready_max = not_ready_max.max(nnot);
            let list = probe_api
                .list(&ListParams::default().labels("app=after-restart"))
                .await
                .map(|l| l.items)
                .unwrap_or_default();
            if list.len() == per_node && list.iter().all(pod_ready) {
                break Some(restarted.elapsed());
            }
            if restarted.elapsed() > Duration::from_secs(600) {
                break None;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        };
        println!(
            "restart: stopped in {}, serving again {} after start, a new Deployment of {per_node} Ready {} after start; at most {not_ready_max} nodes NotReady meanwhile",
            secs(stop_took),
            secs(serving),
            recovered.map_or("NOT within 600 s".to_string(), secs)
        );
    }
    watch.abort();
    // The hollow nodes stop their pods and end (within the agent's stop limit).
    unsafe { libc::kill(hollow.id() as i32, libc::SIGTERM) };
    let deadline = Instant::now() + Duration::from_secs(90);
    while hollow.try_wait().unwrap().is_none() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let _ = hollow.kill();
    let _ = hollow.wait();
    let _ = server.kill();
    let _ = server.wait();
}
