//! The HA benchmark (issue 40), all in one run on this machine:
//!
//!   cargo build --release -p r8s --bins --examples && target/release/examples/ha-bench
//!
//! 1. What the quorum costs: pod creates by 64 concurrent clients (`--pods N`, 3,000) on one
//!    server on the embedded datastore, then on three servers made with `--cluster-init` (an
//!    etcd member beside each, mutual TLS), the clients spread over the three; creates/s, p50, p99.
//! 2. Failover, `--rounds N` (3) times: SIGKILL of a server (the one a client behind the agent's
//!    load balancer is using; its etcd member dies with it), then
//!    - the time until a write through another server succeeds (a create every 50 ms), and
//!    - the time until a client behind `r8s_client::lb` (the agent's load balancer, as the
//!      kubelet uses it) gets its first successful request through another server.
//!
//!    The server then starts again on its data before the next round.
//!
//! The servers run as API servers alone (`--disable-agent --disable-controller-manager
//! --disable-scheduler`) on 127.0.0.1, .2 and .3, sharing one port.

#[path = "common/mod.rs"]
mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod};
use kube::api::PostParams;
use kube::{Api, Client};

fn pod(name: &str) -> Pod {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "labels": {"app": "bench"}},
        "spec": {"containers": [{"name": "c", "image": "busybox:1.36", "command": ["sleep", "3600"]}]}
    }))
    .unwrap()
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

struct Server {
    dir: PathBuf,
    bind: String,
    args: Vec<String>,
    child: Option<Child>,
}

impl Server {
    fn spawn(dir: &Path, bind: &str, port: u16, extra: &[String]) -> Server {
        let mut args: Vec<String> = [
            "server",
            "--disable-agent",
            "--disable-controller-manager",
            "--disable-scheduler",
            "--bind-address",
            bind,
            "--https-listen-port",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        args.push(port.to_string());
        args.push("--data-dir".into());
        args.push(dir.display().to_string());
        args.extend(extra.iter().cloned());
        let mut s = Server {
            dir: dir.to_owned(),
            bind: bind.into(),
            args,
            child: None,
        };
        s.start();
        s
    }

    fn start(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("server.log"))
            .unwrap_or_else(|_| {
                std::fs::create_dir_all(&self.dir).unwrap();
                std::fs::File::create(self.dir.join("server.log")).unwrap()
            });
        self.child = Some(
            Command::new(common::r8s_binary())
                .args(&self.args)
                .env("R8S_LOG", "warn")
                .stdout(Stdio::from(log.try_clone().unwrap()))
                .stderr(Stdio::from(log))
                .spawn()
                .unwrap(),
        );
    }

    fn sigkill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    fn kubeconfig(&self) -> PathBuf {
        self.dir.join("kubeconfig.yaml")
    }

    /// A client, once the server answers.
    async fn client(&self) -> Client {
        let deadline = Instant::now() + Duration::from_secs(180);
        loop {
            if self.kubeconfig().exists() {
                let c = common::client(&self.kubeconfig()).await;
                if Api::<Namespace>::all(c.clone()).get("default").await.is_ok() {
                    return c;
                }
            }
            assert!(
                Instant::now() < deadline,
                "server {} did not come up:\n{}",
                self.bind,
                std::fs::read_to_string(self.dir.join("server.log")).unwrap_or_default()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(c) = &mut self.child {
            unsafe {
                libc::kill(c.id() as i32, libc::SIGTERM);
            }
            let _ = c.wait();
        }
    }
}

/// Create `n` pods through `clients` (64 writers, spread over them): creates/s, p50, p99.
async fn creates(clients: &[Client], n: usize, prefix: &str) -> (f64, Duration, Duration) {
    let apis: Vec<Api<Pod>> = clients
        .iter()
        .map(|c| Api::namespaced(c.clone(), "default"))
        .collect();
    let (lat, elapsed) = common::create_pods(&apis, n, 64, prefix, pod).await;
    (
        lat.len() as f64 / elapsed.as_secs_f64(),
        common::pct(&lat, 0.5),
        common::pct(&lat, 0.99),
    )
}

/// Until `f` succeeds (tried every 50 ms, each try at most 2 s); how long from `since`.
async fn first_success<F, Fut>(since: Instant, f: F) -> Duration
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    loop {
        if let Ok(true) = tokio::time::timeout(Duration::from_secs(2), f()).await {
            return since.elapsed();
        }
        assert!(since.elapsed() < Duration::from_secs(120), "no success in 120 s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let pods = common::arg("--pods", 3_000);
    let rounds = common::arg("--rounds", 3);
    let root = tempfile::tempdir().unwrap();
    println!("ha-bench: {pods} pods per setup, {rounds} failover rounds");

    // 1a. One server, embedded datastore.
    let single = {
        let s = Server::spawn(&root.path().join("single"), "127.0.0.1", free_port(), &[]);
        let c = s.client().await;
        common::create_default_service_accounts(&c).await;
        let r = creates(&[c], pods, "p").await;
        println!(
            "one server, embedded:     {:>7.0} creates/s   p50 {}  p99 {}",
            r.0,
            common::ms(r.1),
            common::ms(r.2)
        );
        r
    };

    // 1b. Three servers on etcd members of their own.
    let (port, client_port, peer_port) = (free_port(), free_port(), free_port());
    let etcd = |more: &[&str]| -> Vec<String> {
        let mut v = vec![
            "--etcd-client-port".to_string(),
            client_port.to_string(),
            "--etcd-peer-port".to_string(),
            peer_port.to_string(),
        ];
        v.extend(more.iter().map(|s| s.to_string()));
        v
    };
    let mut servers = vec![Server::spawn(
        &root.path().join("s1"),
        "127.0.0.1",
        port,
        &etcd(&["--cluster-init"]),
    )];
    let first = servers[0].client().await;
    // Written once joining servers can use it (after the server answers).
    let token_file = servers[0].dir.join("server/node-token");
    while !token_file.exists() {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let token = std::fs::read_to_string(token_file).unwrap();
    let url = format!("https://127.0.0.1:{port}");
    for i in 2..=3 {
        let s = Server::spawn(
            &root.path().join(format!("s{i}")),
            &format!("127.0.0.{i}"),
            port,
            &etcd(&["--server", &url, "--token", token.trim()]),
        );
        s.client().await;
        servers.push(s);
    }
    common::create_default_service_accounts(&first).await;
    let mut clients = Vec::new();
    for s in &servers {
        clients.push(s.client().await);
    }
    let ha = creates(&clients, pods, "h").await;
    println!(
        "three servers, etcd:      {:>7.0} creates/s   p50 {}  p99 {}   ({:.2}x the single server's rate, p99 {:.1}x)",
        ha.0,
        common::ms(ha.1),
        common::ms(ha.2),
        ha.0 / single.0,
        ha.2.as_secs_f64() / single.2.as_secs_f64()
    );

    // 2. Failover.
    let stop = tokio_util::sync::CancellationToken::new();
    let addrs: Vec<String> = servers.iter().map(|s| format!("{}:{port}", s.bind)).collect();
    let lb = r8s_client::lb::LoadBalancer::start(0, addrs.clone(), stop.clone())
        .await
        .unwrap();
    let mut config = kube::Config::from_custom_kubeconfig(
        kube::config::Kubeconfig::read_from(servers[0].kubeconfig()).unwrap(),
        &Default::default(),
    )
    .await
    .unwrap();
    config.cluster_url = format!("https://127.0.0.1:{}", lb.local.port()).parse().unwrap();
    let behind_lb = Client::try_from(config).unwrap();
    let mut results = Vec::new();
    for round in 0..rounds {
        // The server the load balancer uses goes.
        Api::<Namespace>::all(behind_lb.clone())
            .get("default")
            .await
            .unwrap();
        let current = lb.servers()[0].clone();
        let victim = addrs.iter().position(|a| *a == current).unwrap();
        let survivor = clients[(victim + 1) % clients.len()].clone();
        servers[victim].sigkill();
        let cut = Instant::now();
        let cms: Api<ConfigMap> = Api::namespaced(survivor, "default");
        let n = AtomicUsize::new(0);
        let (write, lb_read) = tokio::join!(
            first_success(cut, || {
                let cms = cms.clone();
                let i = n.fetch_add(1, Ordering::Relaxed);
                async move {
                    let cm: ConfigMap = serde_json::from_value(serde_json::json!({
                        "metadata": {"name": format!("failover-{round}-{i}")}
                    }))
                    .unwrap();
                    cms.create(&PostParams::default(), &cm).await.is_ok()
                }
            }),
            first_success(cut, || {
                let c = behind_lb.clone();
                async move { Api::<Namespace>::all(c).get("default").await.is_ok() }
            })
        );
        println!(
            "round {}: SIGKILL of {current}: a write through another server after {}, the load-balanced client's first success after {}",
            round + 1,
            common::ms(write),
            common::ms(lb_read)
        );
        results.push((write, lb_read));
        servers[victim].start();
        clients[victim] = servers[victim].client().await;
    }
    let max_w = results.iter().map(|r| r.0).max().unwrap_or_default();
    let max_l = results.iter().map(|r| r.1).max().unwrap_or_default();
    println!(
        "failover, worst of {rounds}: writes {} (goal <= 5 s), load-balanced client {} (goal <= 5 s)",
        common::ms(max_w),
        common::ms(max_l)
    );
    stop.cancel();
}
