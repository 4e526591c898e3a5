//! What the benchmarks share: arguments, starting a real `r8s server` from the release build on
//! a free loopback port, a kube-rs client for it, and figures (percentiles, RSS).

#![allow(dead_code)] // each benchmark uses part of it

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::Client;

/// `--name N` from the command line, or `default`.
pub fn arg(name: &str, default: usize) -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map(|v| v.parse().expect("a number"))
        .unwrap_or(default)
}

/// The `r8s` binary next to this example.
pub fn r8s_binary() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let r8s = exe.parent().unwrap().parent().unwrap().join("r8s");
    assert!(
        r8s.exists(),
        "build the server first: cargo build --release -p r8s --bins --examples"
    );
    r8s
}

/// `r8s server` on `dir` with `extra` arguments, its output to `log` (or nowhere); returns once
/// it serves, with a client for it.
pub async fn start_server(dir: &Path, extra: &[&str], log: Option<&Path>) -> (Child, Client) {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let (stdout, stderr) = match log {
        Some(path) => {
            let f = std::fs::File::create(path).unwrap();
            (Stdio::from(f.try_clone().unwrap()), Stdio::from(f))
        }
        None => (Stdio::null(), Stdio::inherit()),
    };
    // R8S_BENCH_WRAP: a command to run the server under (a profiler, e.g. `heaptrack`).
    let wrap = std::env::var("R8S_BENCH_WRAP").unwrap_or_default();
    let mut wrap = wrap.split_whitespace();
    let mut server = match wrap.next() {
        Some(program) => {
            let mut c = Command::new(program);
            c.args(wrap).arg(r8s_binary());
            c
        }
        None => Command::new(r8s_binary()),
    };
    let server = server
        .args([
            "server",
            "--data-dir",
            dir.to_str().unwrap(),
            "--bind-address",
            "127.0.0.1",
        ])
        .args(["--https-listen-port", &port.to_string()])
        .args(extra)
        // R8S_BENCH_SERVER_ARGS: more server flags, to compare configurations (split on spaces).
        .args(
            std::env::var("R8S_BENCH_SERVER_ARGS")
                .unwrap_or_default()
                .split_whitespace(),
        )
        .env(
            "R8S_LOG",
            std::env::var("R8S_LOG").unwrap_or_else(|_| "warn".into()),
        )
        .stdout(stdout)
        .stderr(stderr)
        .spawn()
        .unwrap();
    let kubeconfig = dir.join("kubeconfig.yaml");
    while !kubeconfig.exists() || std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    (server, client(&kubeconfig).await)
}

pub async fn client(kubeconfig: &Path) -> Client {
    let kc = Kubeconfig::read_from(kubeconfig).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .unwrap();
    Client::try_from(config).unwrap()
}

/// Whether a pod's Ready condition is True.
pub fn pod_ready(p: &k8s_openapi::api::core::v1::Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// Resident memory of a process.
pub fn rss_mib(pid: u32) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|kb| kb.parse::<f64>().ok()))
        })
        .map(|kb| kb / 1024.0)
        .unwrap_or(0.0)
}

/// CPU time a process has used so far (user + system), from /proc.
pub fn cpu_time(pid: u32) -> Duration {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| user_system(&s))
        .map_or(Duration::ZERO, |(u, s)| u + s)
}

/// The user and system CPU time in a `/proc/.../stat` line.
fn user_system(stat: &str) -> Option<(Duration, Duration)> {
    // The fields after the command name (which may hold spaces) in parentheses.
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // /proc counts in USER_HZ, which Linux fixes at 100 for user space.
    let tick = |i: usize| Some(Duration::from_millis(f.get(i)?.parse::<u64>().ok()? * 10));
    Some((tick(11)?, tick(12)?))
}

/// CPU time by thread name (threads of one name summed): (user, system), from
/// /proc/<pid>/task. For seeing which of a server's threads a workload costs.
pub fn thread_cpu(pid: u32) -> std::collections::BTreeMap<String, (Duration, Duration)> {
    let mut out = std::collections::BTreeMap::new();
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return out;
    };
    for task in tasks.flatten() {
        let Ok(s) = std::fs::read_to_string(task.path().join("stat")) else {
            continue;
        };
        let (Some(open), Some(close), Some((user, system))) = (s.find('('), s.rfind(')'), user_system(&s))
        else {
            continue;
        };
        let e = out
            .entry(s[open + 1..close].to_owned())
            .or_insert((Duration::ZERO, Duration::ZERO));
        e.0 += user;
        e.1 += system;
    }
    out
}

/// What each thread name used between two `thread_cpu` readings, per request in µs, as
/// `name user/system` pairs (the busiest first).
pub fn thread_cpu_delta(
    before: &std::collections::BTreeMap<String, (Duration, Duration)>,
    after: &std::collections::BTreeMap<String, (Duration, Duration)>,
    requests: usize,
) -> String {
    let mut rows: Vec<(String, f64, f64)> = after
        .iter()
        .map(|(name, (u, s))| {
            let (bu, bs) = before.get(name).copied().unwrap_or_default();
            let per = |d: Duration| d.as_secs_f64() * 1e6 / requests as f64;
            (name.clone(), per(u.saturating_sub(bu)), per(s.saturating_sub(bs)))
        })
        .filter(|(_, u, s)| u + s > 0.0)
        .collect();
    rows.sort_by(|a, b| (b.1 + b.2).total_cmp(&(a.1 + a.2)));
    rows.iter()
        .map(|(n, u, s)| format!("{n} {u:.1}/{s:.1}"))
        .collect::<Vec<_>>()
        .join(", ")
}

pub fn pct(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

/// `p50 … p99 … max …` of `took` (sorted here).
pub fn spread(took: &mut [Duration]) -> String {
    took.sort();
    format!(
        "p50 {} p99 {} max {}",
        ms(pct(took, 0.50)),
        ms(pct(took, 0.99)),
        ms(took.last().copied().unwrap_or_default())
    )
}

pub fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1e3)
}

/// The `default` ServiceAccounts the controller manager would create: a benchmark that runs the
/// server without it creates them so pods pass ServiceAccount admission as in a cluster.
pub async fn create_default_service_accounts(client: &Client) {
    use k8s_openapi::api::core::v1::ServiceAccount;
    for ns in ["default", "kube-public", "kube-node-lease"] {
        let sas: kube::Api<ServiceAccount> = kube::Api::namespaced(client.clone(), ns);
        let sa = serde_json::from_value(serde_json::json!({"metadata": {"name": "default"}})).unwrap();
        sas.create(&Default::default(), &sa).await.unwrap();
    }
}

/// The kubelet's test images (target/test-images), built by scripts/build-test-images.sh when
/// missing.
pub fn test_images() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let images = root.join("target").join("test-images");
    if !images.join("pause-image.txt").exists() {
        let ok = Command::new("bash")
            .arg(root.join("scripts/build-test-images.sh"))
            .arg(&images)
            .status()
            .unwrap()
            .success();
        assert!(ok, "building the test images failed");
    }
    images
}

/// `r8s server` with its agent as node `node` (pods on `bridge` in `cidr`, the kubelet API on
/// loopback), on the test images in `images`; returns once the node is Ready. The data
/// directory lives as long as the returned TempDir.
pub async fn start_node(
    images: &Path,
    node: &str,
    bridge: &str,
    cidr: &str,
) -> (tempfile::TempDir, Child, Client) {
    let dir = tempfile::tempdir().unwrap();
    let staged = dir.path().join("agent").join("images");
    std::fs::create_dir_all(&staged).unwrap();
    for e in std::fs::read_dir(images).unwrap().flatten() {
        std::fs::copy(e.path(), staged.join(e.file_name())).unwrap();
    }
    let (server, client) = start_server(
        dir.path(),
        &[
            "--node-name",
            node,
            "--pod-bridge",
            bridge,
            "--cluster-cidr",
            cidr,
            "--kubelet-address",
            "127.0.0.1",
            "--kubelet-port",
            "0",
        ],
        None,
    )
    .await;
    let nodes: kube::Api<k8s_openapi::api::core::v1::Node> = kube::Api::all(client.clone());
    loop {
        let ready = nodes.get_opt(node).await.ok().flatten().is_some_and(|n| {
            n.status
                .and_then(|s| s.conditions)
                .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
        });
        if ready {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    (dir, server, client)
}

/// A bare containerd on the test images, with the CNI bridge and a pod cgroup parent of its
/// own and no control plane: the CRI floor the pod benchmarks compare against. Everything it
/// made goes when it is dropped.
pub struct Floor {
    pub cri: r8s_kubelet::cri::Cri,
    pub node: r8s_kubelet::spec::NodeContext,
    containerd: Option<r8s_kubelet::containerd::Containerd>,
    cgroup_parent: String,
    bridge: String,
    _dir: tempfile::TempDir,
}

impl Floor {
    /// Pods on `bridge` in `subnet`, their cgroups under `cgroup`.
    pub async fn start(images: &Path, bridge: &str, subnet: &str, cgroup: &str) -> Self {
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
            bridge: bridge.into(),
            ip_masq: false,
            mtu: None,
        };
        cni::write(&cni_opts, &[subnet.to_owned()]).unwrap();
        let cgroup_parent = r8s_kubelet::cgroups::pod_parent(cgroup);
        let containerd = Containerd::start(opts).unwrap();
        r8s_kubelet::images::import_dir(&containerd.socket(), images).unwrap();
        let cri = r8s_kubelet::cri::Cri::connect(&containerd.socket())
            .await
            .unwrap();
        let node = r8s_kubelet::spec::NodeContext {
            node_name: "floor".into(),
            log_root: dir.path().join("logs").display().to_string(),
            cgroup_parent: cgroup_parent.clone(),
            ..Default::default()
        };
        Self {
            cri,
            node,
            containerd: Some(containerd),
            cgroup_parent,
            bridge: bridge.into(),
            _dir: dir,
        }
    }

    /// Run `pod`'s sandbox and start its first container, as a kubelet would: (sandbox id,
    /// container id).
    pub async fn run_pod(&self, pod: &k8s_openapi::api::core::v1::Pod) -> (String, String) {
        use k8s_cri::v1 as cri;
        use r8s_kubelet::spec;
        let sc = spec::sandbox_config(pod, 0, &self.node);
        std::fs::create_dir_all(&sc.log_directory).unwrap();
        let mut rt = self.cri.runtime.clone();
        let sb = rt
            .run_pod_sandbox(cri::RunPodSandboxRequest {
                config: Some(sc.clone()),
                runtime_handler: String::new(),
            })
            .await
            .unwrap()
            .into_inner()
            .pod_sandbox_id;
        let (cc, _) = spec::container_config(
            pod,
            &pod.spec.as_ref().unwrap().containers[0],
            0,
            &self.node,
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
        rt.start_container(cri::StartContainerRequest {
            container_id: id.clone(),
        })
        .await
        .unwrap();
        (sb, id)
    }

    /// Stop and remove a sandbox (and its containers).
    pub async fn remove_sandbox(&self, id: &str) {
        use k8s_cri::v1 as cri;
        let mut rt = self.cri.runtime.clone();
        let _ = rt
            .stop_pod_sandbox(cri::StopPodSandboxRequest {
                pod_sandbox_id: id.into(),
            })
            .await;
        let _ = rt
            .remove_pod_sandbox(cri::RemovePodSandboxRequest {
                pod_sandbox_id: id.into(),
            })
            .await;
    }
}

impl Drop for Floor {
    fn drop(&mut self) {
        drop(self.containerd.take());
        r8s_kubelet::cgroups::remove(&self.cgroup_parent);
        r8s_kubelet::cni::remove_bridge(&self.bridge);
    }
}

/// `n` calls of `op(i)` (i in 0..n) from `clients` concurrent tasks taking the next `i` in
/// turn: each call's latency (sorted) and the time all of them took.
pub async fn concurrently<F, Fut>(n: usize, clients: usize, op: F) -> (Vec<Duration>, Duration)
where
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    use std::sync::atomic::{AtomicUsize, Ordering};
    let op = std::sync::Arc::new(op);
    let next = std::sync::Arc::new(AtomicUsize::new(0));
    let started = std::time::Instant::now();
    let tasks: Vec<_> = (0..clients)
        .map(|_| {
            let (op, next) = (op.clone(), next.clone());
            tokio::spawn(async move {
                let mut lat = Vec::new();
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= n {
                        return lat;
                    }
                    let t = std::time::Instant::now();
                    op(i).await;
                    lat.push(t.elapsed());
                }
            })
        })
        .collect();
    let mut lat = Vec::new();
    for t in tasks {
        lat.extend(t.await.unwrap());
    }
    let elapsed = started.elapsed();
    lat.sort();
    (lat, elapsed)
}

/// Create `n` pods, `make(<prefix>-NNNNNN)`, by `writers` concurrent clients taking turns over
/// `apis`: each create's latency (sorted) and the time all of them took.
pub async fn create_pods(
    apis: &[kube::Api<k8s_openapi::api::core::v1::Pod>],
    n: usize,
    writers: usize,
    prefix: &str,
    make: fn(&str) -> k8s_openapi::api::core::v1::Pod,
) -> (Vec<Duration>, Duration) {
    let (apis, prefix) = (apis.to_vec(), prefix.to_string());
    concurrently(n, writers, move |i| {
        let api = apis[i % apis.len()].clone();
        let pod = make(&format!("{prefix}-{i:06}"));
        async move {
            api.create(&kube::api::PostParams::default(), &pod).await.unwrap();
        }
    })
    .await
}
