//! The overlay benchmark (root), in two parts:
//!
//! 1. The dataplane (`r8s_net::overlay::dataplane`, the code the agent runs) between two
//!    "nodes" in network namespaces of the benchmark's own, joined by a veth pair standing for
//!    the underlay, each with pods on a bridge as the CNI bridge plugin makes them (MTU 1450,
//!    the overlay's): TCP round-trip latency (1-byte ping-pong, TCP_NODELAY) and TCP
//!    throughput (a bounded bulk transfer) between two pods on one node and between pods on
//!    the two nodes, over VXLAN and over host-gw routes.
//! 2. The multi-node harness (`scripts/multi-node.sh`, real `r8s server` + agents): the time
//!    until 3 nodes are Ready, then how long a new node's routes take to be live on the other
//!    nodes: a Node with a podCIDR and a published VTEP is created through the API, and the
//!    route to its subnet is watched for on every node.
//!
//!   cargo build --release -p r8s --bins --examples && target/release/examples/overlay-bench
//!
//! Options: --rounds N (round trips per latency run, 20000), --mib N (per throughput run,
//! 2048), --repeats N (same-node/cross-node throughput pairs, alternating, 5; the median
//! ratio is reported), --joins N (new nodes, 20).

#[path = "common/mod.rs"]
mod common;

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use r8s_net::overlay::dataplane::Dataplane;
use r8s_net::overlay::{Backend, OverlayConfig, Peer};

struct Ns(String);

impl Ns {
    fn new(name: &str) -> Ns {
        let name = format!("r8sob-{name}-{}", std::process::id());
        let _ = Command::new("ip").args(["netns", "del", &name]).output();
        assert!(Command::new("ip")
            .args(["netns", "add", &name])
            .status()
            .unwrap()
            .success());
        let ns = Ns(name);
        ns.ip(&["link", "set", "lo", "up"]);
        ns
    }

    fn ip(&self, args: &[&str]) {
        let out = Command::new("ip")
            .arg("-n")
            .arg(&self.0)
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "ip {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    fn enter(&self) {
        let f = std::fs::File::open(format!("/run/netns/{}", self.0)).unwrap();
        assert_eq!(unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) }, 0);
    }

    fn run<T: Send>(&self, f: impl FnOnce() -> T + Send) -> T {
        std::thread::scope(|s| {
            s.spawn(|| {
                self.enter();
                f()
            })
            .join()
            .unwrap()
        })
    }
}

impl Drop for Ns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).output();
    }
}

struct Node {
    ns: Ns,
    ip: Ipv4Addr,
    subnet: (Ipv4Addr, u8),
}

/// A pod on `node`'s bridge with address `.host` of its subnet.
fn pod(node: &Node, name: &str, host: u8) -> (Ns, Ipv4Addr) {
    let p = Ns::new(name);
    let veth = format!("v{name}");
    node.ns.ip(&[
        "link", "add", &veth, "mtu", "1450", "type", "veth", "peer", "name", "eth0", "netns", &p.0,
    ]);
    node.ns.ip(&["link", "set", &veth, "master", "br0", "up"]);
    let o = node.subnet.0.octets();
    let addr = Ipv4Addr::new(o[0], o[1], o[2], host);
    p.ip(&["link", "set", "eth0", "mtu", "1450"]);
    p.ip(&["addr", "add", &format!("{addr}/24"), "dev", "eth0"]);
    p.ip(&["link", "set", "eth0", "up"]);
    p.ip(&[
        "route",
        "add",
        "default",
        "via",
        &format!("{}.{}.{}.1", o[0], o[1], o[2]),
    ]);
    (p, addr)
}

fn node(ns: Ns, ip: Ipv4Addr, third: u8) -> Node {
    ns.ip(&["addr", "add", &format!("{ip}/24"), "dev", "eth0"]);
    ns.ip(&["link", "set", "eth0", "up"]);
    ns.ip(&["link", "add", "br0", "mtu", "1450", "type", "bridge"]);
    ns.ip(&["addr", "add", &format!("10.244.{third}.1/24"), "dev", "br0"]);
    ns.ip(&["link", "set", "br0", "up"]);
    Node {
        ns,
        ip,
        subnet: (Ipv4Addr::new(10, 244, third, 0), 24),
    }
}

/// Run `f` on `n`'s dataplane, opened afresh in its namespace (as an agent start does) on a
/// runtime of its own.
fn with_dataplane<T: Send + 'static>(
    n: &Node,
    backend: Backend,
    f: impl FnOnce(Dataplane, Option<[u8; 6]>) -> futures::future::BoxFuture<'static, T> + Send,
) -> T {
    let cfg = OverlayConfig::new(backend, "x", n.ip, (Ipv4Addr::new(10, 244, 0, 0), 16));
    let subnet = n.subnet;
    n.ns.run(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let (dp, mac) = Dataplane::open(cfg, subnet, None).await.unwrap();
            f(dp, mac).await
        })
    })
}

/// Program both nodes with `backend`, each with the other as its peer.
fn program(a: &Node, b: &Node, backend: Backend) {
    let mac = |n: &Node| with_dataplane(n, backend, |_, mac| Box::pin(async move { mac }));
    let (ma, mb) = (mac(a), mac(b));
    for (n, other, name, vtep_mac) in [(a, b, "b", mb), (b, a, "a", ma)] {
        let peer = Peer {
            subnet6: None,
            name: name.into(),
            subnet: other.subnet,
            public_ip: other.ip,
            public_ip6: None,
            vtep_mac,
        };
        with_dataplane(n, backend, move |mut dp, _| {
            Box::pin(async move { dp.apply(&[peer]).await.unwrap() })
        });
    }
}

fn close(n: &Node, backend: Backend) {
    with_dataplane(n, backend, |dp, _| {
        Box::pin(async move { dp.close().await.unwrap() })
    });
}

/// A listener in `server` on `addr:port` (bound there, served on a thread that stays in
/// the namespace through its socket) and a connected client from `client`.
fn connect(client: &Ns, server: &Ns, addr: Ipv4Addr, port: u16) -> (TcpStream, TcpStream) {
    let l = server.run(|| TcpListener::bind((addr, port)).unwrap());
    let c = client.run(|| TcpStream::connect(SocketAddr::from((addr, port))).unwrap());
    let (s, _) = l.accept().unwrap();
    (c, s)
}

/// Round trips of one byte each way: the sorted durations.
fn rtt(client: &Ns, server: &Ns, addr: Ipv4Addr, port: u16, rounds: usize) -> Vec<Duration> {
    let (mut c, mut s) = connect(client, server, addr, port);
    c.set_nodelay(true).unwrap();
    s.set_nodelay(true).unwrap();
    let echo = std::thread::spawn(move || {
        let mut b = [0u8; 1];
        while s.read_exact(&mut b).is_ok() {
            if s.write_all(&b).is_err() {
                break;
            }
        }
    });
    let mut b = [7u8; 1];
    let mut out = Vec::with_capacity(rounds);
    for i in 0..rounds + 1000 {
        let t = Instant::now();
        c.write_all(&b).unwrap();
        c.read_exact(&mut b).unwrap();
        if i >= 1000 {
            out.push(t.elapsed());
        }
    }
    drop(c);
    echo.join().unwrap();
    out.sort();
    out
}

/// Gbit/s of a `mib` MiB bulk transfer (capped at 15 s).
fn throughput(client: &Ns, server: &Ns, addr: Ipv4Addr, port: u16, mib: usize) -> f64 {
    let (mut c, mut s) = connect(client, server, addr, port);
    let sink = std::thread::spawn(move || {
        let mut buf = vec![0u8; 1 << 16];
        let mut n = 0usize;
        while let Ok(k) = s.read(&mut buf) {
            if k == 0 {
                break;
            }
            n += k;
        }
        n
    });
    let buf = vec![1u8; 1 << 16];
    let start = Instant::now();
    let mut sent = 0usize;
    while sent < mib << 20 && start.elapsed() < Duration::from_secs(15) {
        c.write_all(&buf).unwrap();
        sent += buf.len();
    }
    c.shutdown(std::net::Shutdown::Write).unwrap();
    let got = sink.join().unwrap();
    let secs = start.elapsed().as_secs_f64();
    got as f64 * 8.0 / secs / 1e9
}

fn us(d: Duration) -> String {
    format!("{:.1} µs", d.as_secs_f64() * 1e6)
}

fn dataplane(rounds: usize, mib: usize, repeats: usize) {
    let a = Ns::new("a");
    let b = Ns::new("b");
    a.ip(&[
        "link", "add", "eth0", "type", "veth", "peer", "name", "eth0", "netns", &b.0,
    ]);
    let a = node(a, Ipv4Addr::new(192, 168, 77, 1), 1);
    let b = node(b, Ipv4Addr::new(192, 168, 77, 2), 2);
    let (a1, _) = pod(&a, "a1", 2);
    let (a2, a2_ip) = pod(&a, "a2", 3);
    let (b1, b1_ip) = pod(&b, "b1", 2);
    println!(
        "dataplane: {rounds} round trips per latency run, {mib} MiB per throughput run, {repeats} throughput pairs"
    );
    let mut port = 7000;
    // VXLAN also with GRO on the underlay (what a NIC does; a veth has it off), where ethtool
    // is there to turn it on.
    let ethtool = Command::new("ethtool").arg("--version").output().is_ok();
    let mut runs = vec![(Backend::Vxlan, false)];
    if ethtool {
        runs.push((Backend::Vxlan, true));
    }
    runs.push((Backend::HostGw, false));
    for (backend, gro) in runs {
        program(&a, &b, backend);
        let set_gro = |on: &str| {
            for n in [&a, &b] {
                let ok = Command::new("ip")
                    .args(["netns", "exec", &n.ns.0, "ethtool", "-K", "eth0", "gro", on])
                    .status()
                    .unwrap()
                    .success();
                assert!(ok, "ethtool -K eth0 gro {on}");
            }
        };
        if gro {
            set_gro("on");
        }
        let label = format!("{}{}", backend.as_str(), if gro { "+gro" } else { "" });
        for (what, dst_ns, dst) in [("same node", &a2, a2_ip), ("cross node", &b1, b1_ip)] {
            port += 1;
            let r = rtt(&a1, dst_ns, dst, port, rounds);
            println!(
                "  {label:11} {what:10}: RTT p50 {} p99 {}",
                us(common::pct(&r, 0.5)),
                us(common::pct(&r, 0.99)),
            );
        }
        // Throughput on two shared cores swings by a third from run to run (whatever else the
        // host runs), so same node and cross node alternate `repeats` times and each pair gives
        // a ratio; the median ratio is the figure.
        let mut ratios = Vec::new();
        let (mut sames, mut crosses) = (Vec::new(), Vec::new());
        for _ in 0..repeats {
            port += 1;
            let same = throughput(&a1, &a2, a2_ip, port, mib);
            port += 1;
            let cross = throughput(&a1, &b1, b1_ip, port, mib);
            sames.push(same);
            crosses.push(cross);
            ratios.push(cross / same);
        }
        let list = |v: &[f64]| v.iter().map(|g| format!("{g:.2}")).collect::<Vec<_>>().join(" ");
        let median = |mut v: Vec<f64>| {
            v.sort_by(|a, b| a.total_cmp(b));
            v[v.len() / 2]
        };
        println!(
            "  {label:11} throughput Gbit/s, same node: {}; cross node: {}; cross/same per pair: {}; median {:.0} %",
            list(&sames),
            list(&crosses),
            ratios
                .iter()
                .map(|r| format!("{:.0} %", r * 100.0))
                .collect::<Vec<_>>()
                .join(" "),
            median(ratios.clone()) * 100.0,
        );
        if gro {
            set_gro("off");
        }
        close(&a, backend);
        close(&b, backend);
    }
}

fn kubectl(kubeconfig: &Path, args: &[&str], stdin: Option<&str>) -> bool {
    let mut c = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut input = c.stdin.take().unwrap();
    if let Some(s) = stdin {
        input.write_all(s.as_bytes()).unwrap();
    }
    drop(input);
    c.wait().unwrap().success()
}

fn has_route(ns: &str, cidr: &str) -> bool {
    let out = Command::new("ip")
        .args(["-n", ns, "route", "show", cidr])
        .output()
        .unwrap();
    !out.stdout.is_empty()
}

fn harness(joins: usize) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let dir: PathBuf = std::env::temp_dir().join(format!("r8s-overlay-bench-{}", std::process::id()));
    let script = root.join("scripts/multi-node.sh");
    struct Down(PathBuf, PathBuf);
    impl Drop for Down {
        fn drop(&mut self) {
            let _ = Command::new("bash")
                .arg(&self.0)
                .arg("down")
                .arg(&self.1)
                .output();
        }
    }
    let _down = Down(script.clone(), dir.clone());
    let t = Instant::now();
    let ok = Command::new("bash")
        .arg(&script)
        .args(["up", "3"])
        .arg(&dir)
        .env("R8S_BIN", common::r8s_binary())
        .status()
        .unwrap()
        .success();
    assert!(ok, "multi-node.sh up 3 failed");
    println!(
        "harness: 3 nodes Ready {:.2} s after `up`",
        t.elapsed().as_secs_f64()
    );
    let kubeconfig = dir.join("kubeconfig.yaml");
    let tag = std::fs::read_dir("/run/netns")
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .find(|n| n.starts_with("r8smn-") && n.ends_with("-1"))
        .unwrap();
    let nss: Vec<String> = (1..=3)
        .map(|i| format!("{}-{i}", tag.trim_end_matches("-1")))
        .collect();
    let mut times = Vec::new();
    for i in 0..joins {
        let cidr = format!("10.42.{}.0/24", 200 + i);
        let node = format!(
            r#"{{"apiVersion":"v1","kind":"Node","metadata":{{"name":"joiner-{i}","annotations":{{
              "flannel.alpha.coreos.com/backend-type":"vxlan",
              "flannel.alpha.coreos.com/backend-data":"{{\"VNI\":1,\"VtepMAC\":\"0a:00:00:00:00:{i:02x}\"}}",
              "flannel.alpha.coreos.com/public-ip":"10.213.254.{}"}}}},
              "spec":{{"podCIDR":"{cidr}","podCIDRs":["{cidr}"]}}}}"#,
            i + 1
        );
        let t = Instant::now();
        assert!(
            kubectl(&kubeconfig, &["create", "-f", "-"], Some(&node)),
            "creating joiner-{i}"
        );
        // Every node programs it (the kubectl round trip itself is part of the figure).
        let mut pending: Vec<&String> = nss.iter().collect();
        while !pending.is_empty() {
            assert!(
                t.elapsed() < Duration::from_secs(10),
                "joiner-{i}'s route never appeared"
            );
            pending.retain(|ns| !has_route(ns, &cidr));
        }
        times.push(t.elapsed());
        assert!(kubectl(
            &kubeconfig,
            &["delete", "node", &format!("joiner-{i}")],
            None
        ));
    }
    times.sort();
    println!(
        "harness: a new node's route live on all 3 nodes after its create (kubectl included), {joins} joins: p50 {} p99 {} max {}",
        common::ms(common::pct(&times, 0.5)),
        common::ms(common::pct(&times, 0.99)),
        common::ms(*times.last().unwrap()),
    );
}

fn main() {
    assert_eq!(unsafe { libc::geteuid() }, 0, "the overlay benchmark needs root");
    dataplane(
        common::arg("--rounds", 20_000),
        common::arg("--mib", 2048),
        common::arg("--repeats", 5).max(1),
    );
    harness(common::arg("--joins", 20));
}
