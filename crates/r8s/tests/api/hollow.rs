//! Hollow nodes (`r8s agent --hollow N`, kubemark's idea): N nodes in one process, each joined
//! with the token as a node of its own, running the pods bound to it through the agent over a
//! runtime in memory. Judged with the real kubectl against a control plane with no agent.

use crate::support;

use std::net::Ipv4Addr;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use support::Server;

const V: &str = "1.33";

/// `r8s agent --hollow`, stopped (and killed if it must be) when dropped.
struct Hollow {
    child: Child,
    log: std::path::PathBuf,
}

impl Hollow {
    fn start(s: &Server, count: usize) -> Self {
        let dir = s.dir.path().join("hollow-agent");
        std::fs::create_dir_all(&dir).unwrap();
        let log = dir.join("agent.log");
        let out = std::fs::File::create(&log).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_r8s"))
            .args(["agent", "--server", &format!("https://127.0.0.1:{}", s.port)])
            .arg("--token-file")
            .arg(s.dir.path().join("server/node-token"))
            .arg("--data-dir")
            .arg(&dir)
            .args(["--hollow", &count.to_string(), "--node-ip", "127.0.0.1"])
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .stdin(Stdio::null())
            .spawn()
            .unwrap();
        Self { child, log }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// SIGTERM, and the exit status within `within`.
    fn stop(&mut self, within: Duration) -> Option<std::process::ExitStatus> {
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if let Some(status) = self.child.try_wait().unwrap() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        None
    }
}

impl Drop for Hollow {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn json(s: &Server, args: &[&str]) -> Value {
    let mut a = args.to_vec();
    a.extend(["-o", "json"]);
    serde_json::from_str(&s.ok(V, &a)).unwrap()
}

fn wait_for<T>(secs: u64, what: &str, log: impl Fn() -> String, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}\n{}",
            log()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn in_cidr(ip: &str, cidr: &str) -> bool {
    let (net, len) = cidr.split_once('/').unwrap();
    let (net, len): (Ipv4Addr, u32) = (net.parse().unwrap(), len.parse().unwrap());
    let mask = u32::MAX << (32 - len);
    ip.parse::<Ipv4Addr>()
        .is_ok_and(|ip| u32::from(ip) & mask == u32::from(net) & mask)
}

/// How many TCP connections process `pid` holds to local port `port`.
fn connections_to(pid: u32, port: u16) -> usize {
    let inodes: std::collections::HashSet<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .flatten()
        .filter_map(|e| std::fs::read_link(e.path()).ok())
        .filter_map(|l| {
            let l = l.to_string_lossy().into_owned();
            l.strip_prefix("socket:[")?.strip_suffix(']').map(str::to_owned)
        })
        .collect();
    let table = std::fs::read_to_string("/proc/net/tcp").unwrap();
    table
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        // remote address (field 2) on `port`, established (state 01), one of pid's sockets.
        .filter(|f| {
            f.len() > 9 && f[2].ends_with(&format!(":{port:04X}")) && f[3] == "01" && inodes.contains(f[9])
        })
        .count()
}

/// Every file under `dir`.
fn walk(dir: &std::path::Path) -> Vec<String> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() && !p.is_symlink() {
            out.extend(walk(&p));
        } else {
            out.push(p.to_string_lossy().into_owned());
        }
    }
    out
}

#[test]
fn hollow_nodes_join_as_nodes_of_their_own_and_run_a_deployment_without_containers() {
    let s = Server::start();
    let mut hollow = Hollow::start(&s, 3);
    let names = ["hollow-0", "hollow-1", "hollow-2"];
    // Three Ready nodes with their pod CIDRs and TTL annotations, the capacity hollow nodes
    // report, and the runtime in memory.
    let nodes = wait_for(
        90,
        "three Ready hollow nodes",
        || hollow.log(),
        || {
            let list = json(&s, &["get", "nodes"]);
            let items = list["items"].as_array()?.clone();
            let ready = items
                .iter()
                .filter(|n| support::condition(n, "Ready")["status"] == "True")
                .filter(|n| n["spec"]["podCIDR"].is_string())
                // The TTL controller's annotation: 0 s for a cluster this small.
                .filter(|n| n["metadata"]["annotations"]["node.alpha.kubernetes.io/ttl"] == "0")
                .count();
            (items.len() == 3 && ready == 3).then_some(items)
        },
    );
    let mut got: Vec<&str> = nodes
        .iter()
        .map(|n| n["metadata"]["name"].as_str().unwrap())
        .collect();
    got.sort();
    assert_eq!(got, names);
    for n in &nodes {
        assert_eq!(n["status"]["capacity"]["cpu"], "4", "{n}");
        assert_eq!(n["status"]["capacity"]["pods"], "110", "{n}");
        assert_eq!(n["status"]["capacity"]["memory"], "16Gi", "{n}");
        assert_eq!(n["status"]["nodeInfo"]["containerRuntimeVersion"], "fake://0.1.0");
        assert_eq!(n["status"]["addresses"][0]["address"], "127.0.0.1");
    }
    // Each joined with its own certificate: one approved node CSR per node, each asked for by
    // the bootstrap token and naming its node.
    let csrs = json(&s, &["get", "csr"]);
    let requesters: Vec<String> = csrs["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["spec"]["signerName"] == "kubernetes.io/kube-apiserver-client-kubelet")
        .filter(|c| support::condition(c, "Approved")["status"] == "True")
        .map(|c| c["spec"]["username"].as_str().unwrap_or("").to_string())
        .collect();
    assert_eq!(requesters.len(), 3, "{csrs}");
    assert!(
        requesters.iter().all(|u| u.starts_with("system:bootstrap:")),
        "{requesters:?}"
    );
    // Each renews its own Lease.
    for name in names {
        let lease = json(&s, &["get", "lease", "-n", "kube-node-lease", name]);
        assert_eq!(lease["spec"]["holderIdentity"], name);
    }

    s.ok(
        V,
        &["create", "deployment", "web", "--image=nginx", "--replicas=9"],
    );
    let pods = wait_for(
        90,
        "nine Running and Ready web pods",
        || hollow.log(),
        || {
            let list = json(&s, &["get", "pods", "-l", "app=web"]);
            let items = list["items"].as_array()?.clone();
            let ready = items
                .iter()
                .filter(|p| p["status"]["phase"] == "Running")
                .filter(|p| support::condition(p, "Ready")["status"] == "True")
                .count();
            (items.len() == 9 && ready == 9).then_some(items)
        },
    );
    // Every pod has an address of its node's pod CIDR, none shared, and a container reported
    // running as a kubelet reports it.
    let cidr_of = |node: &str| {
        nodes
            .iter()
            .find(|n| n["metadata"]["name"] == node)
            .map(|n| n["spec"]["podCIDR"].as_str().unwrap().to_string())
            .unwrap()
    };
    let mut ips = Vec::new();
    for p in &pods {
        let node = p["spec"]["nodeName"].as_str().unwrap();
        let ip = p["status"]["podIP"].as_str().unwrap_or("");
        assert!(
            in_cidr(ip, &cidr_of(node)),
            "pod IP {ip:?} is not in {node}'s {}",
            cidr_of(node)
        );
        assert_eq!(p["status"]["hostIP"], "127.0.0.1");
        let c = &p["status"]["containerStatuses"][0];
        assert_eq!(c["ready"], true, "{c}");
        assert!(c["state"]["running"]["startedAt"].is_string(), "{c}");
        ips.push(ip.to_string());
    }
    ips.sort();
    ips.dedup();
    assert_eq!(ips.len(), 9, "pod IPs shared: {ips:?}");
    // Their volumes (the service-account token) are plain directories: a hollow node mounts
    // nothing.
    let data = s.dir.path().join("hollow-agent");
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(
        !mounts.contains(data.to_str().unwrap()),
        "a hollow node mounted something under {}",
        data.display()
    );
    let tokens = walk(&data)
        .into_iter()
        .filter(|p| p.contains("/volumes/kubernetes.io~projected/") && p.ends_with("/token"))
        .count();
    assert!(tokens >= 9, "no token files under {}", data.display());
    // Each node talks to the server over one HTTP/2 connection, as a kubelet's client-go does
    // (its watches and requests multiplexed on it).
    let conns = connections_to(hollow.child.id(), s.port);
    assert_eq!(
        conns, 3,
        "the hollow nodes hold {conns} connections to the server"
    );
    // The kubelet API answers for its node; what needs a process says there is none.
    let pod = pods[0]["metadata"]["name"].as_str().unwrap();
    let err = s.fails(V, &["logs", pod]);
    assert!(err.contains("no container runtime (a hollow node)"), "{err}");
    let node = pods[0]["spec"]["nodeName"].as_str().unwrap();
    let listed = s.ok(V, &["get", "--raw", &format!("/api/v1/nodes/{node}/proxy/pods")]);
    assert!(
        listed.contains(pod),
        "{node}'s kubelet does not list {pod}: {listed}"
    );

    // Scaled down, the hollow kubelets stop the pods and the pods go.
    s.ok(V, &["scale", "deployment", "web", "--replicas=0"]);
    wait_for(
        60,
        "the web pods gone",
        || hollow.log(),
        || {
            let list = json(&s, &["get", "pods", "-l", "app=web"]);
            list["items"].as_array()?.is_empty().then_some(())
        },
    );
    // Stopped, the agent ends cleanly; the nodes stay registered.
    let status = hollow.stop(Duration::from_secs(30));
    assert!(
        status.is_some_and(|s| s.success()),
        "hollow agent stop: {status:?}\n{}",
        hollow.log()
    );
    assert_eq!(json(&s, &["get", "nodes"])["items"].as_array().unwrap().len(), 3);
}
