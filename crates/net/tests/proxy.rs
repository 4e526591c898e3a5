//! The Service proxy's table against real traffic (root), all inside network namespaces the
//! test makes: `node` (where the proxy programs its table), `pod` (listeners on pod
//! addresses, behind a veth as a CNI bridge would put them) and `outside` (the next hop of
//! the node's default route, counting every packet that reaches it for the Service range).

#[path = "common/netns.rs"]
mod netns;

use std::io::{ErrorKind, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::time::Duration;

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use netns::Netns;
use r8s_net::proxy::{service_rules, Proxier, ProxyConfig, ServiceRules};
use serde_json::json;

struct World {
    node: Netns,
    pod: Netns,
    pod2: Netns,
    outside: Netns,
}

/// `pod` (10.42.0.2) and `pod2` (10.42.0.3) on the node's bridge (10.42.0.1/24), as the CNI
/// bridge plugin puts pods; node ⟷ outside on 192.168.77.0/24 (node .1, outside .2, the
/// node's default route).
fn world(tag: &str) -> Option<World> {
    let node = Netns::new(&format!("{tag}-n"))?;
    let pod = Netns::new(&format!("{tag}-p"))?;
    let pod2 = Netns::new(&format!("{tag}-q"))?;
    let outside = Netns::new(&format!("{tag}-o"))?;
    node.ip(&["link", "add", "br0", "type", "bridge"]);
    node.ip(&["addr", "add", "10.42.0.1/24", "dev", "br0"]);
    node.ip(&["link", "set", "br0", "up"]);
    for (ns, veth, ip) in [(&pod, "vpod", "10.42.0.2/24"), (&pod2, "vpod2", "10.42.0.3/24")] {
        node.ip(&[
            "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", &ns.name,
        ]);
        node.ip(&["link", "set", veth, "master", "br0", "up"]);
        // As the CNI bridge plugin's hairpinMode: a pod can reach itself through a Service.
        node.ip(&["link", "set", veth, "type", "bridge_slave", "hairpin", "on"]);
        ns.ip(&["addr", "add", ip, "dev", "eth0"]);
        ns.ip(&["link", "set", "eth0", "up"]);
        ns.ip(&["route", "add", "default", "via", "10.42.0.1"]);
        // And an IPv6 address of the second family, as a dual-stack bridge gives pods.
        let ip6 = if veth == "vpod" {
            "fd42::2/64"
        } else {
            "fd42::3/64"
        };
        ns.ip(&["-6", "addr", "add", ip6, "dev", "eth0", "nodad"]);
        ns.ip(&["-6", "route", "add", "default", "via", "fd42::1"]);
    }
    node.ip(&["-6", "addr", "add", "fd42::1/64", "dev", "br0", "nodad"]);
    node.ip(&[
        "link",
        "add",
        "vout",
        "type",
        "veth",
        "peer",
        "name",
        "eth0",
        "netns",
        &outside.name,
    ]);
    node.ip(&["addr", "add", "192.168.77.1/24", "dev", "vout"]);
    node.ip(&["link", "set", "vout", "up"]);
    node.ip(&["route", "add", "default", "via", "192.168.77.2"]);
    node.exec(&["sysctl", "-qw", "net.ipv4.ip_forward=1"]);
    node.ip(&["-6", "addr", "add", "fd77::1/64", "dev", "vout", "nodad"]);
    node.ip(&["-6", "route", "add", "default", "via", "fd77::2"]);
    node.exec(&["sysctl", "-qw", "net.ipv6.conf.all.forwarding=1"]);
    outside.ip(&["addr", "add", "192.168.77.2/24", "dev", "eth0"]);
    outside.ip(&["-6", "addr", "add", "fd77::2/64", "dev", "eth0", "nodad"]);
    outside.ip(&["link", "set", "eth0", "up"]);
    outside.exec(&["nft", "add", "table", "ip6", "count"]);
    outside.exec(&[
        "nft",
        "add",
        "chain",
        "ip6",
        "count",
        "pre",
        "{ type filter hook prerouting priority 0; }",
    ]);
    outside.exec(&[
        "nft",
        "add",
        "rule",
        "ip6",
        "count",
        "pre",
        "ip6",
        "daddr",
        "fd42::-fd43::ffff",
        "counter",
    ]);
    // Count what arrives for the Service range and the cluster CIDR.
    outside.exec(&["nft", "add", "table", "ip", "count"]);
    outside.exec(&[
        "nft",
        "add",
        "chain",
        "ip",
        "count",
        "pre",
        "{ type filter hook prerouting priority 0; }",
    ]);
    outside.exec(&[
        "nft",
        "add",
        "rule",
        "ip",
        "count",
        "pre",
        "ip",
        "daddr",
        "10.42.0.0-10.43.255.255",
        "counter",
    ]);
    Some(World {
        node,
        pod,
        pod2,
        outside,
    })
}

impl World {
    /// Packets that reached `outside` for the cluster's ranges.
    fn leaked(&self) -> u64 {
        self.leaked_of("ip")
    }

    /// The same for the IPv6 ranges (`ip6`).
    fn leaked_of(&self, family: &str) -> u64 {
        let listed = self.outside.nft(&["list", "chain", family, "count", "pre"]);
        let at = listed.find("packets ").expect("counter");
        listed[at + 8..]
            .split_whitespace()
            .next()
            .unwrap()
            .parse()
            .unwrap()
    }

    /// A listener in a pod answering each connection with `name`.
    fn serve(&self, pod: &Netns, addr: &str, name: &'static str) {
        let addr: SocketAddr = addr.parse().unwrap();
        let listener = pod.run(|| TcpListener::bind(addr).unwrap());
        std::thread::spawn(move || {
            for c in listener.incoming() {
                let Ok(mut c) = c else { return };
                let _ = c.write_all(name.as_bytes());
            }
        });
    }
}

fn cfg() -> ProxyConfig {
    ProxyConfig {
        table: "r8s".into(),
        family: r8s_net::nft::AddrFamily::V4,
        service_cidrs: vec![(Ipv4Addr::new(10, 43, 0, 0).into(), 16)],
        cluster_cidrs: vec![(Ipv4Addr::new(10, 42, 0, 0).into(), 16)],
        masquerade_bit: 14,
        node_name: "node".into(),
        local_service_ips: vec![],
        keep_on_exit: false,
    }
}

fn service(name: &str, ip: &str, node_port: Option<u16>, affinity: bool) -> Service {
    let mut port = json!({"name": "http", "port": 80, "protocol": "TCP"});
    if let Some(np) = node_port {
        port["nodePort"] = json!(np);
    }
    serde_json::from_value(json!({
        "metadata": {"namespace": "default", "name": name},
        "spec": {"clusterIP": ip, "ports": [port], "type": if node_port.is_some() { "NodePort" } else { "ClusterIP" },
                 "sessionAffinity": if affinity { "ClientIP" } else { "None" }}
    }))
    .unwrap()
}

fn slice(svc: &str, ips: &[&str]) -> EndpointSlice {
    slice_of(svc, ips, "IPv4")
}

fn cfg6() -> ProxyConfig {
    ProxyConfig {
        family: r8s_net::nft::AddrFamily::V6,
        service_cidrs: vec![
            (Ipv4Addr::new(10, 43, 0, 0).into(), 16),
            ("fd43::".parse().unwrap(), 112),
        ],
        cluster_cidrs: vec![
            (Ipv4Addr::new(10, 42, 0, 0).into(), 16),
            ("fd42::".parse().unwrap(), 56),
        ],
        ..cfg()
    }
}

fn slice_of(svc: &str, ips: &[&str], address_type: &str) -> EndpointSlice {
    let eps: Vec<_> = ips
        .iter()
        .map(|ip| json!({"addresses": [ip], "conditions": {"ready": true}, "nodeName": "node"}))
        .collect();
    serde_json::from_value(json!({
        "metadata": {"namespace": "default", "name": format!("{svc}-x"), "labels": {"kubernetes.io/service-name": svc}},
        "addressType": address_type,
        "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
        "endpoints": eps,
    }))
    .unwrap()
}

fn rules(svc: &Service, slices: &[&EndpointSlice]) -> (String, ServiceRules) {
    let key = format!("default/{}", svc.metadata.name.as_deref().unwrap());
    (key, service_rules(&cfg(), svc, slices))
}

/// Connect and read the answer; the error kind when it fails.
fn fetch(ns: &Netns, addr: &str) -> Result<String, ErrorKind> {
    let addr: SocketAddr = addr.parse().unwrap();
    ns.run(|| {
        let mut c = TcpStream::connect_timeout(&addr, Duration::from_millis(700)).map_err(|e| e.kind())?;
        c.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        let mut s = String::new();
        c.read_to_string(&mut s).map_err(|e| e.kind())?;
        Ok(s)
    })
}

#[test]
fn cluster_ips_node_ports_and_the_guard_route_real_traffic() {
    let Some(w) = world("px") else { return };
    w.serve(&w.pod, "10.42.0.2:8080", "pod-a");
    w.serve(&w.pod2, "10.42.0.3:8080", "pod-b");
    let mut proxier = w.node.run(|| {
        let mut p = Proxier::new(cfg()).unwrap();
        p.guard().unwrap();
        p
    });

    // The guard alone: nothing for the Service range leaves, from the node or from a pod.
    assert!(fetch(&w.node, "10.43.0.99:80").is_err());
    assert!(fetch(&w.pod, "10.43.0.99:80").is_err());
    assert_eq!(w.leaked(), 0, "packets for the Service range left the node");

    let web = service("web", "10.43.0.20", Some(30080), false);
    let empty = service("empty", "10.43.0.21", None, false);
    let one = slice("web", &["10.42.0.2"]);
    let stats = w
        .node
        .run(|| proxier.full_sync(vec![rules(&web, &[&one]), rules(&empty, &[])]))
        .unwrap();
    assert!(stats.messages > 0);

    // By cluster IP from the node and from a pod; by node port from outside.
    assert_eq!(fetch(&w.node, "10.43.0.20:80").as_deref(), Ok("pod-a"));
    assert_eq!(fetch(&w.pod, "10.43.0.20:80").as_deref(), Ok("pod-a"));
    assert_eq!(fetch(&w.outside, "192.168.77.1:30080").as_deref(), Ok("pod-a"));
    // No endpoints: refused at once; a port the Service does not have: refused; an address
    // no Service holds: dropped.
    let started = std::time::Instant::now();
    assert_eq!(fetch(&w.node, "10.43.0.21:80"), Err(ErrorKind::ConnectionRefused));
    assert_eq!(fetch(&w.pod, "10.43.0.21:80"), Err(ErrorKind::ConnectionRefused));
    assert!(
        started.elapsed() < Duration::from_millis(600),
        "refusing took {:?}",
        started.elapsed()
    );
    assert_eq!(
        fetch(&w.pod, "10.43.0.20:81"),
        Err(ErrorKind::ConnectionRefused),
        "{}",
        w.node.nft(&["list", "table", "ip", "r8s"])
    );
    assert!(fetch(&w.pod, "10.43.0.98:80").is_err());
    assert_eq!(w.leaked(), 0);

    // Scale up: both endpoints answer; an incremental sync is small.
    let two = slice("web", &["10.42.0.2", "10.42.0.3"]);
    let stats = w.node.run(|| proxier.sync(vec![rules(&web, &[&two])])).unwrap();
    assert!(stats.messages < 12, "{stats:?}");
    let mut seen = std::collections::BTreeSet::new();
    for _ in 0..40 {
        seen.insert(fetch(&w.pod, "10.43.0.20:80").unwrap());
        if seen.len() == 2 {
            break;
        }
    }
    assert_eq!(seen.into_iter().collect::<Vec<_>>(), vec!["pod-a", "pod-b"]);
    let listed = w.node.lists_with_nft();
    assert!(listed.contains("flat-endpoints"), "{listed}");

    // ClientIP affinity sticks to one endpoint.
    let sticky = service("web", "10.43.0.20", Some(30080), true);
    w.node
        .run(|| proxier.sync(vec![rules(&sticky, &[&two])]))
        .unwrap();
    let first = fetch(&w.pod, "10.43.0.20:80").unwrap();
    for _ in 0..10 {
        assert_eq!(fetch(&w.pod, "10.43.0.20:80").unwrap(), first);
    }

    // Endpoints gone: refused; the Service gone: its address is dropped, its chains are
    // deleted a moment later.
    w.node.run(|| proxier.sync(vec![rules(&sticky, &[])])).unwrap();
    assert_eq!(fetch(&w.pod, "10.43.0.20:80"), Err(ErrorKind::ConnectionRefused));
    w.node
        .run(|| proxier.sync(vec![("default/web".into(), ServiceRules::default())]))
        .unwrap();
    assert!(fetch(&w.pod, "10.43.0.20:80").is_err());
    assert!(fetch(&w.outside, "192.168.77.1:30080").is_err());
    std::thread::sleep(Duration::from_millis(2100));
    w.node.run(|| proxier.sync(vec![])).unwrap();
    let listed = w.node.nft(&["list", "table", "ip", "r8s"]);
    assert!(
        !listed.contains("default/web"),
        "chains of a deleted Service remain:\n{listed}"
    );
    assert_eq!(w.leaked(), 0);

    // A clean stop removes the table.
    w.node.run(|| proxier.remove()).unwrap();
    assert!(!w.node.nft(&["list", "tables"]).contains("r8s"));
}

/// The IPv6 table of a dual-stack node (an `ip6` table beside the `ip` one, as kube-proxy
/// runs a proxier per family): cluster IPs, node ports, refusals, affinity, hairpin and the
/// guard, for IPv6 Services and endpoints.
#[test]
fn ipv6_services_route_beside_ipv4_ones() {
    let Some(w) = world("p6") else { return };
    w.serve(&w.pod, "[fd42::2]:8080", "pod-a");
    w.serve(&w.pod2, "[fd42::3]:8080", "pod-b");
    w.serve(&w.pod, "10.42.0.2:8080", "pod-a4");
    let (mut v4, mut v6) = w.node.run(|| {
        let mut v4 = Proxier::new(cfg()).unwrap();
        v4.guard().unwrap();
        let mut v6 = Proxier::new(cfg6()).unwrap();
        v6.guard().unwrap();
        (v4, v6)
    });
    // The guard: nothing for the IPv6 Service range or cluster CIDR leaves.
    assert!(fetch(&w.node, "[fd43::99]:80").is_err());
    assert!(fetch(&w.pod, "[fd43::99]:80").is_err());
    assert_eq!(
        w.leaked_of("ip6"),
        0,
        "packets for the IPv6 Service range left the node"
    );

    // A dual-stack Service: each family's table takes its own address and endpoints.
    let mut web = service("web", "10.43.0.20", Some(30080), false);
    web.spec.as_mut().unwrap().cluster_ips = Some(vec!["10.43.0.20".into(), "fd43::20".into()]);
    let empty = service("empty", "fd43::21", None, false);
    let one6 = slice_of("web", &["fd42::2"], "IPv6");
    let one4 = slice("web", &["10.42.0.2"]);
    let rules6 = |svc: &Service, slices: &[&EndpointSlice]| {
        let key = format!("default/{}", svc.metadata.name.as_deref().unwrap());
        (key, service_rules(&cfg6(), svc, slices))
    };
    // An IPv4 table ignores the IPv6 slice, and the reverse.
    assert_eq!(service_rules(&cfg(), &empty, &[]), ServiceRules::default());
    w.node
        .run(|| {
            v4.full_sync(vec![rules(&web, &[&one4, &one6])])?;
            v6.full_sync(vec![rules6(&web, &[&one4, &one6]), rules6(&empty, &[])])
        })
        .unwrap();
    assert_eq!(fetch(&w.pod, "[fd43::20]:80").as_deref(), Ok("pod-a"));
    assert_eq!(fetch(&w.node, "[fd43::20]:80").as_deref(), Ok("pod-a"));
    assert_eq!(fetch(&w.pod2, "10.43.0.20:80").as_deref(), Ok("pod-a4"));
    assert_eq!(fetch(&w.outside, "[fd77::1]:30080").as_deref(), Ok("pod-a"));
    // Hairpin: pod-a reaches itself through its Service (masqueraded back).
    assert_eq!(fetch(&w.pod, "[fd43::20]:80").as_deref(), Ok("pod-a"));
    let started = std::time::Instant::now();
    assert_eq!(fetch(&w.pod, "[fd43::21]:80"), Err(ErrorKind::ConnectionRefused));
    assert_eq!(
        fetch(&w.pod, "[fd43::20]:81"),
        Err(ErrorKind::ConnectionRefused),
        "{}",
        w.node.nft(&["list", "table", "ip6", "r8s"])
    );
    assert!(
        started.elapsed() < Duration::from_millis(1300),
        "{:?}",
        started.elapsed()
    );
    assert!(fetch(&w.pod, "[fd43::98]:80").is_err());

    // Two endpoints: both answer; with ClientIP affinity one sticks.
    let two = slice_of("web", &["fd42::2", "fd42::3"], "IPv6");
    w.node.run(|| v6.sync(vec![rules6(&web, &[&two])])).unwrap();
    let mut seen = std::collections::BTreeSet::new();
    for _ in 0..40 {
        seen.insert(fetch(&w.node, "[fd43::20]:80").unwrap());
        if seen.len() == 2 {
            break;
        }
    }
    assert_eq!(seen.into_iter().collect::<Vec<_>>(), vec!["pod-a", "pod-b"]);
    let mut sticky = service("web", "10.43.0.20", Some(30080), true);
    sticky.spec.as_mut().unwrap().cluster_ips = web.spec.as_ref().unwrap().cluster_ips.clone();
    w.node.run(|| v6.sync(vec![rules6(&sticky, &[&two])])).unwrap();
    let first = fetch(&w.node, "[fd43::20]:80").unwrap();
    for _ in 0..10 {
        assert_eq!(fetch(&w.node, "[fd43::20]:80").unwrap(), first);
    }
    assert_eq!(w.leaked_of("ip6"), 0);
    assert_eq!(w.leaked(), 0);
    let listed = w.node.lists_with_nft();
    assert!(listed.contains("table ip6 r8s"), "{listed}");

    // Both tables go on a clean stop.
    w.node.run(|| v6.remove().and_then(|_| v4.remove())).unwrap();
    assert!(!w.node.nft(&["list", "tables"]).contains("r8s"));
}

#[test]
fn a_restart_keeps_routing_until_the_full_sync_replaces_the_table() {
    let Some(w) = world("pr") else { return };
    w.serve(&w.pod, "10.42.0.2:8080", "pod-a");
    let web = service("web", "10.43.0.20", None, false);
    let one = slice("web", &["10.42.0.2"]);
    w.node
        .run(|| {
            let mut p = Proxier::new(cfg()).unwrap();
            p.guard().unwrap();
            p.full_sync(vec![rules(&web, &[&one])]).map(|_| ())
        })
        .unwrap();
    // A new proxier (an agent restart): its guard keeps the Service working.
    let mut p = w.node.run(|| {
        let mut p = Proxier::new(cfg()).unwrap();
        p.guard().unwrap();
        p
    });
    assert_eq!(fetch(&w.pod, "10.43.0.20:80").as_deref(), Ok("pod-a"));
    w.node.run(|| p.full_sync(vec![rules(&web, &[&one])])).unwrap();
    assert_eq!(fetch(&w.pod, "10.43.0.20:80").as_deref(), Ok("pod-a"));
}

#[test]
fn adding_one_service_to_many_is_one_small_transaction() {
    let Some(w) = world("pm") else { return };
    let mut p = w.node.run(|| {
        let mut p = Proxier::new(cfg()).unwrap();
        p.guard().unwrap();
        p
    });
    let n: u32 = std::env::var("R8S_PROXY_TEST_SERVICES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    let all: Vec<(String, ServiceRules)> = (0..n)
        .map(|i| {
            let ip = format!("10.43.{}.{}", 1 + i / 250, 1 + i % 250);
            let ep = format!("10.42.{}.{}", 1 + i / 250, 1 + i % 250);
            let s = service(&format!("s{i}"), &ip, None, false);
            rules(&s, &[&slice(&format!("s{i}"), &[&ep])])
        })
        .collect();
    let t = std::time::Instant::now();
    w.node.run(|| p.full_sync(all)).unwrap();
    eprintln!("full sync of {n} Services: {:?}", t.elapsed());
    let s = service("new", "10.43.200.9", None, false);
    let t = std::time::Instant::now();
    let stats = w
        .node
        .run(|| p.sync(vec![rules(&s, &[&slice("new", &["10.42.200.9"])])]))
        .unwrap();
    eprintln!("adding one to {n}: {:?} ({stats:?})", t.elapsed());
    assert!(stats.messages <= 10 && stats.bytes < 4096, "{stats:?}");
    // Only map elements: the kernel need not re-check the table's jumps.
    assert!(stats.messages <= 4, "{stats:?}");
    let listed = w.node.nft(&["list", "map", "ip", "r8s", "flat-counts"]);
    assert!(listed.contains("10.43.200.9 . tcp . 80 : "), "{listed}");
    assert!(
        listed.contains("10.43.4.250 . tcp . 80"),
        "{}",
        &listed[..listed.len().min(2000)]
    );
}
