//! A single-node cluster for the kubelet's end-to-end tests: `r8s server` with its agent
//! (containerd, CRI, CNI) on the test images, and what those tests read back — pods, events,
//! container output. Whatever the agent might leave if the server dies goes in any case.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::Server;

pub const V: &str = "1.33";

pub fn wait_for<T>(secs: u64, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The test images (built by the project script if missing), copied where the agent imports.
pub fn stage_images(data_dir: &Path) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let built = root.join("target").join("test-images");
    if !built.join("pause-image.txt").exists() || !built.join("dnsutils.tar").exists() {
        let ok = Command::new("bash")
            .arg(root.join("scripts/build-test-images.sh"))
            .arg(&built)
            .status()
            .unwrap()
            .success();
        assert!(ok, "building the test images failed");
    }
    let dest = data_dir.join("agent").join("images");
    std::fs::create_dir_all(&dest).unwrap();
    for e in std::fs::read_dir(&built).unwrap().flatten() {
        // The dnsutils image is large (bind's libraries): only the tests that run it take it.
        if e.file_name() != "dnsutils.tar" {
            std::fs::copy(e.path(), dest.join(e.file_name())).unwrap();
        }
    }
}

/// Stage one more of the test images (`dnsutils.tar`) in a prepared data directory.
pub fn stage_image(data_dir: &Path, name: &str) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let built = root.join("target").join("test-images").join(name);
    std::fs::copy(built, data_dir.join("agent").join("images").join(name)).unwrap();
}

/// The processes whose command line names `dir` (the test's containerd and shims), by pid.
pub fn processes_under(dir: &Path) -> Vec<i32> {
    let d = dir.display().to_string();
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let pid: i32 = e.file_name().to_str()?.parse().ok()?;
            let cmd = std::fs::read(e.path().join("cmdline")).ok()?;
            let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
            (pid != std::process::id() as i32 && cmd.contains("containerd") && cmd.contains(&d))
                .then_some(pid)
        })
        .collect()
}

/// Whatever the agent might have left if the server died: removed in any case.
pub struct Leftovers {
    pub dir: PathBuf,
    pub bridge: String,
    /// The cluster CIDR (the Service proxy's blackhole route under it).
    pub cluster_cidr: String,
    pub netns_before: Vec<String>,
}

pub fn netns_entries() -> Vec<String> {
    std::fs::read_dir("/var/run/netns")
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().to_string())
                .collect()
        })
        .unwrap_or_default()
}

impl Drop for Leftovers {
    fn drop(&mut self) {
        for ns in netns_entries() {
            if !self.netns_before.contains(&ns) {
                let _ = Command::new("ip").args(["netns", "del", &ns]).status();
            }
        }
        // Containers left running (an agent that kept its pods): deleted with runc first.
        r8s_kubelet::containerd::delete_containers(&self.dir.join("agent").join("containerd"));
        for pid in processes_under(&self.dir) {
            let _ = Command::new("kill").args(["-KILL", &pid.to_string()]).status();
        }
        r8s_kubelet::containerd::unmount_under(&self.dir);
        r8s_kubelet::cni::remove_bridge(&self.bridge);
        // Cluster DNS's address on the loopback link, if the server died before removing it.
        let _ = Command::new("ip")
            .args([
                "addr",
                "del",
                "10.43.0.10/32",
                "dev",
                "lo",
                "label",
                r8s_net::dns::run::LABEL,
            ])
            .stderr(std::process::Stdio::null())
            .status();
        // The kubernetes Service's address the server serves the API on for pods.
        let _ = Command::new("ip")
            .args(["addr", "del", "10.43.0.1/32", "dev", "lo", "label", "lo:r8s-api"])
            .stderr(std::process::Stdio::null())
            .status();
        r8s_kubelet::cgroups::remove(&r8s_kubelet::cgroups::pod_parent("r8s-pods"));
        // The Service proxy's table and its route, if the server died before removing them.
        for family in ["ip", "ip6"] {
            let _ = Command::new("nft")
                .args(["delete", "table", family, "r8s"])
                .stderr(std::process::Stdio::null())
                .status();
        }
        // The overlay's device and masquerade table (a node whose address is not loopback).
        let _ = Command::new("ip")
            .args(["link", "del", "r8s.1"])
            .stderr(std::process::Stdio::null())
            .status();
        for table in ["r8s-overlay", "r8s-policy"] {
            let _ = Command::new("nft")
                .args(["delete", "table", "ip", table])
                .stderr(std::process::Stdio::null())
                .status();
        }
        // One range per family on a dual-stack cluster.
        for cidr in self.cluster_cidr.split(',').filter(|c| !c.is_empty()) {
            let _ = Command::new("ip")
                .args(["route", "del", "blackhole", cidr])
                .stderr(std::process::Stdio::null())
                .status();
            remove_cni_masquerade(cidr);
        }
        // The data directory: its own removal (before these clean-ups) stops at what was
        // still mounted or in use, and leaves the rest behind.
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The masquerade rules and chains the CNI bridge plugin (`ipMasq`) made for pods in `cidr`
/// (IPv4 or IPv6), should a sandbox have been left without its CNI DEL (a server killed
/// mid-way): removed.
pub fn remove_cni_masquerade(cidr: &str) {
    let Some((net, len)) = cidr.split_once('/') else {
        return;
    };
    let (Ok(net), Ok(len)) = (net.parse::<std::net::IpAddr>(), len.parse::<u32>()) else {
        return;
    };
    let (family, bits) = if net.is_ipv4() { ("ip", 32) } else { ("ip6", 128) };
    let num = |ip: std::net::IpAddr| match ip {
        std::net::IpAddr::V4(a) => u32::from(a) as u128,
        std::net::IpAddr::V6(a) => u128::from(a),
    };
    let host = bits - len.min(bits);
    let inside = |ip: std::net::IpAddr| {
        ip.is_ipv4() == net.is_ipv4() && (host == 128 || num(ip) >> host == num(net) >> host)
    };
    let Ok(out) = Command::new("nft")
        .args(["-a", "list", "chain", family, "nat", "POSTROUTING"])
        .stderr(std::process::Stdio::null())
        .output()
    else {
        return;
    };
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        let at = |w: &str| words.iter().position(|x| *x == w).and_then(|i| words.get(i + 1));
        let (Some(saddr), Some(chain), Some(handle)) = (at("saddr"), at("jump"), at("handle")) else {
            continue;
        };
        if !chain.starts_with("CNI-") || !saddr.parse().is_ok_and(inside) {
            continue;
        }
        let _ = Command::new("nft")
            .args(["delete", "rule", family, "nat", "POSTROUTING", "handle", handle])
            .status();
        for verb in ["flush", "delete"] {
            let _ = Command::new("nft")
                .args([verb, "chain", family, "nat", chain])
                .stderr(std::process::Stdio::null())
                .status();
        }
    }
    // The plugin makes the nat table (iptables-nft) and leaves it behind with its empty
    // base chain: removed when it holds no rule.
    if let Ok(out) = Command::new("nft")
        .args(["list", "table", family, "nat"])
        .output()
    {
        let text = String::from_utf8_lossy(&out.stdout);
        let rules = text.lines().map(str::trim).filter(|l| {
            !l.is_empty()
                && !l.starts_with("table ")
                && !l.starts_with("chain ")
                && !l.starts_with("type ")
                && *l != "}"
        });
        if out.status.success() && rules.count() == 0 {
            let _ = Command::new("nft")
                .args(["delete", "table", family, "nat"])
                .status();
        }
    }
}

/// The agents of these tests share the host's pod cgroup parent, the proxy's and policy's nft
/// tables and the cluster DNS address: every test that starts an agent takes this, one at a time.
pub static ONE_AGENT: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// A server with its agent, and the guard that cleans up after it (dropped after the server).
pub struct Cluster {
    pub s: Server,
    pub data: PathBuf,
    /// The server's arguments (for restarts).
    pub args: Vec<String>,
    _leftovers: Leftovers,
}

/// A server with its agent on node `node`, Ready.
pub fn start(node: &str, cidr: &str, bridge_prefix: &str) -> Cluster {
    start_with(node, cidr, bridge_prefix, &[])
}

/// The same with more server arguments. The node's address and its kubelet API are on
/// loopback (the kubelet API on a free port).
pub fn start_with(node: &str, cidr: &str, bridge_prefix: &str, extra: &[&str]) -> Cluster {
    start_prepared(node, cidr, bridge_prefix, extra, |_| {})
}

/// The same, with `prepare` given the data directory before the server starts.
pub fn start_prepared(
    node: &str,
    cidr: &str,
    bridge_prefix: &str,
    extra: &[&str],
    prepare: impl FnOnce(&Path),
) -> Cluster {
    let data = tempfile::tempdir().unwrap();
    stage_images(data.path());
    // Cluster DNS forwards outside names to no one: test traffic stays on the machine.
    let resolv_conf = data.path().join("resolv.conf");
    // A search domain of its own shows that pods with dnsPolicy Default get this file.
    std::fs::write(
        &resolv_conf,
        "# no upstream nameservers in tests\nsearch r8s-node.test\n",
    )
    .unwrap();
    let resolv_conf = resolv_conf.to_string_lossy().to_string();
    prepare(data.path());
    let data_path = data.path().to_path_buf();
    let bridge = format!("{bridge_prefix}{}", std::process::id() % 10000);
    let leftovers = Leftovers {
        dir: data_path.clone(),
        bridge: bridge.clone(),
        cluster_cidr: cidr.to_owned(),
        netns_before: netns_entries(),
    };
    let mut args = vec![
        "--node-name",
        node,
        "--pod-bridge",
        &bridge,
        "--cluster-cidr",
        cidr,
        "--kubelet-address",
        "127.0.0.1",
        "--kubelet-port",
        "0",
        "--resolv-conf",
        &resolv_conf,
    ];
    // The node's address is loopback too, so the API server reaches the kubelet (logs).
    if !extra.contains(&"--node-ip") {
        args.extend(["--node-ip", "127.0.0.1"]);
    }
    args.extend_from_slice(extra);
    let s = Server::start_in(data, &args);
    wait_for(60, "the node to be Ready", || {
        let out = s.kubectl(V, &["get", "node", node, "-o", "json"]);
        let n: Value = serde_json::from_slice(&out.stdout).ok()?;
        let ready = n["status"]["conditions"]
            .as_array()?
            .iter()
            .any(|c| c["type"] == "Ready" && c["status"] == "True");
        ready.then_some(())
    });
    // Every pod mounts its namespace's kube-root-ca.crt (published by the controller manager).
    wait_for(60, "kube-root-ca.crt", || {
        s.kubectl(V, &["get", "configmap", "kube-root-ca.crt"])
            .status
            .success()
            .then_some(())
    });
    let args = args.iter().map(|a| a.to_string()).collect();
    Cluster {
        s,
        args,
        data: data_path,
        _leftovers: leftovers,
    }
}

/// kubectl (of version `V`) with `-o json`, which must succeed, parsed.
pub fn json(s: &Server, args: &[&str]) -> Value {
    let mut full = args.to_vec();
    full.extend(["-o", "json"]);
    serde_json::from_str(&s.ok(V, &full)).unwrap()
}

pub fn pod_json(s: &Server, name: &str) -> Option<Value> {
    serde_json::from_slice(&s.kubectl(V, &["get", "pod", name, "-o", "json"]).stdout).ok()
}

pub fn uid_of(s: &Server, name: &str) -> String {
    pod_json(s, name).unwrap()["metadata"]["uid"]
        .as_str()
        .unwrap()
        .to_string()
}

/// What container `container` of pod `name` (namespace default) wrote to stdout so far.
pub fn log_of(data: &Path, name: &str, uid: &str, container: &str) -> String {
    let dir = data
        .join("agent/pods-logs")
        .join(format!("default_{name}_{uid}"))
        .join(container);
    let mut text = String::new();
    for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
        let raw = std::fs::read_to_string(e.path()).unwrap_or_default();
        // CRI log lines: `<time> <stream> <tag> <text>`.
        for line in raw.lines() {
            text.push_str(line.splitn(4, ' ').nth(3).unwrap_or(""));
            text.push('\n');
        }
    }
    text
}

/// The line of `log` that starts with `prefix`, without it.
pub fn line<'a>(log: &'a str, prefix: &str) -> Option<&'a str> {
    log.lines().find_map(|l| l.strip_prefix(prefix))
}

pub fn events_of(s: &Server, name: &str) -> Vec<(String, String)> {
    let l: Value = serde_json::from_str(&s.ok(V, &["get", "events", "-o", "json"])).unwrap();
    l["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["involvedObject"]["name"] == name)
        .map(|e| {
            (
                e["reason"].as_str().unwrap_or("").to_string(),
                e["message"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

/// A blackhole route for a range, for the length of a test that sends to it (until r8s guards
/// the service range itself): nothing addressed there leaves the machine. Removed when
/// dropped, if this test added it.
pub struct Blackhole(Option<String>);

impl Blackhole {
    pub fn install(cidr: &str) -> Self {
        let added = Command::new("ip")
            .args(["route", "add", "blackhole", cidr])
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        Blackhole(added.then(|| cidr.to_owned()))
    }
}

impl Drop for Blackhole {
    fn drop(&mut self) {
        if let Some(cidr) = &self.0 {
            let _ = Command::new("ip")
                .args(["route", "del", "blackhole", cidr])
                .status();
        }
    }
}
