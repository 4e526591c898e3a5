//! The overlay's dataplane in network namespaces (root only): two "nodes" joined by a veth
//! pair standing for the underlay, each with a "pod" namespace behind it, programmed with
//! the real VXLAN device (or host-gw routes) and checked with real TCP and UDP between the
//! pods. Everything lives in namespaces the test owns and goes with them.

#[path = "common/netns.rs"]
mod netns;

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::process::Command;
use std::time::Duration;

use netns::Netns;
use r8s_net::overlay::dataplane::Dataplane;
use r8s_net::overlay::{Backend, OverlayConfig, Peer};

const CLUSTER: (Ipv4Addr, u8) = (Ipv4Addr::new(10, 244, 0, 0), 16);
const CLUSTER6: (Ipv6Addr, u8) = (Ipv6Addr::new(0xfd44, 0, 0, 0, 0, 0, 0, 0), 48);

struct Node {
    ns: Netns,
    pod: Netns,
    ip: Ipv4Addr,
    subnet: (Ipv4Addr, u8),
    /// The pod's IPv6 subnet (a dual-stack node).
    subnet6: (Ipv6Addr, u8),
}

impl Node {
    fn pod_ip(&self) -> Ipv4Addr {
        let o = self.subnet.0.octets();
        Ipv4Addr::new(o[0], o[1], o[2], 2)
    }

    fn pod_ip6(&self) -> Ipv6Addr {
        Ipv6Addr::from(u128::from(self.subnet6.0) + 2)
    }

    /// The node's IPv6 underlay address (fd77::1 and ::2 beside 192.168.77.1 and .2).
    fn ip6(&self) -> Ipv6Addr {
        Ipv6Addr::new(0xfd77, 0, 0, 0, 0, 0, 0, self.ip.octets()[3] as u16)
    }

    fn cfg(&self, backend: Backend, name: &str) -> OverlayConfig {
        let mut cfg = OverlayConfig::new(backend, name, self.ip, CLUSTER);
        cfg.cluster_cidr6 = Some(CLUSTER6);
        cfg.node_ip6 = Some(self.ip6());
        cfg
    }

    /// Run `f` against this node's dataplane (opened in its namespace, on a runtime of its
    /// own): each call opens it afresh, as an agent restart does.
    fn with_dataplane<T: Send>(
        &self,
        backend: Backend,
        name: &str,
        f: impl FnOnce(Dataplane, Option<[u8; 6]>) -> futures::future::BoxFuture<'static, T> + Send,
    ) -> T {
        self.with_dataplane_at(self.ip, backend, name, f)
    }

    /// The same with the node at another underlay address (a readdressed node).
    fn with_dataplane_at<T: Send>(
        &self,
        ip: Ipv4Addr,
        backend: Backend,
        name: &str,
        f: impl FnOnce(Dataplane, Option<[u8; 6]>) -> futures::future::BoxFuture<'static, T> + Send,
    ) -> T {
        let mut cfg = self.cfg(backend, name);
        cfg.node_ip = ip;
        let (subnet, subnet6) = (self.subnet, self.subnet6);
        self.ns.run(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let (dp, mac) = Dataplane::open(cfg, subnet, Some(subnet6)).await.expect("open");
                f(dp, mac).await
            })
        })
    }
}

/// Two nodes on an underlay veth pair (192.168.77.1 and .2), each with a pod at .2 of its
/// subnet behind a veth (the node side is the pod's gateway, .1).
fn two_nodes(tag: &str) -> Option<(Node, Node)> {
    let n1 = Netns::new(&format!("{tag}n1"))?;
    let n2 = Netns::new(&format!("{tag}n2"))?;
    n1.ip(&[
        "link", "add", "eth0", "type", "veth", "peer", "name", "eth0", "netns", &n2.name,
    ]);
    let mk = |ns: Netns, ip: Ipv4Addr, third: u8| {
        // No duplicate detection on the node's links: a node's bridge is long up when pods
        // talk, but here the first packet would come while its link-local address is still
        // tentative (and the kernel sends no neighbour solicitation without one).
        for conf in ["all", "default", "pod", "eth0"] {
            let _ = Command::new("ip")
                .args(["netns", "exec", &ns.name, "sysctl", "-qw"])
                .arg(format!("net.ipv6.conf.{conf}.accept_dad=0"))
                .stderr(std::process::Stdio::null())
                .status();
        }
        ns.ip(&["addr", "add", &format!("{ip}/24"), "dev", "eth0"]);
        ns.ip(&[
            "-6",
            "addr",
            "add",
            &format!("fd77::{}/64", ip.octets()[3]),
            "dev",
            "eth0",
            "nodad",
        ]);
        ns.ip(&["link", "set", "eth0", "up"]);
        let pod = Netns::new(&format!("{tag}p{third}")).unwrap();
        ns.ip(&[
            "link", "add", "pod", "type", "veth", "peer", "name", "eth0", "netns", &pod.name,
        ]);
        ns.ip(&["addr", "add", &format!("10.244.{third}.1/24"), "dev", "pod"]);
        ns.ip(&["link", "set", "pod", "up"]);
        pod.ip(&["addr", "add", &format!("10.244.{third}.2/24"), "dev", "eth0"]);
        pod.ip(&["link", "set", "eth0", "up"]);
        pod.ip(&["route", "add", "default", "via", &format!("10.244.{third}.1")]);
        ns.ip(&[
            "-6",
            "addr",
            "add",
            &format!("fd44:0:0:{third}::1/64"),
            "dev",
            "pod",
            "nodad",
        ]);
        pod.ip(&[
            "-6",
            "addr",
            "add",
            &format!("fd44:0:0:{third}::2/64"),
            "dev",
            "eth0",
            "nodad",
        ]);
        pod.ip(&[
            "-6",
            "route",
            "add",
            "default",
            "via",
            &format!("fd44:0:0:{third}::1"),
        ]);
        Node {
            ns,
            pod,
            ip,
            subnet: (Ipv4Addr::new(10, 244, third, 0), 24),
            subnet6: (Ipv6Addr::new(0xfd44, 0, 0, third as u16, 0, 0, 0, 0), 64),
        }
    };
    Some((
        mk(n1, Ipv4Addr::new(192, 168, 77, 1), 1),
        mk(n2, Ipv4Addr::new(192, 168, 77, 2), 2),
    ))
}

fn peer(n: &Node, name: &str, mac: Option<[u8; 6]>) -> Peer {
    Peer {
        name: name.into(),
        subnet: n.subnet,
        subnet6: mac.map(|_| n.subnet6),
        public_ip: n.ip,
        public_ip6: None,
        vtep_mac: mac,
    }
}

/// A host-gw peer of a dual-stack node: its IPv6 subnet via its IPv6 underlay address.
fn peer6(n: &Node, name: &str) -> Peer {
    Peer {
        subnet6: Some(n.subnet6),
        public_ip6: Some(n.ip6()),
        ..peer(n, name, None)
    }
}

/// A TCP exchange from `from` to `to:port` (listening in `to_ns`): the address the server
/// saw the client come from, or the error.
fn tcp(from: &Netns, to_ns: &Netns, to: Ipv4Addr, port: u16) -> Result<Ipv4Addr, String> {
    match tcp_ip(from, to_ns, to.into(), port)? {
        IpAddr::V4(a) => Ok(a),
        other => Err(format!("from {other}")),
    }
}

fn tcp_ip(from: &Netns, to_ns: &Netns, to: IpAddr, port: u16) -> Result<IpAddr, String> {
    let listener = to_ns.run(|| TcpListener::bind((to, port)).unwrap());
    let server = std::thread::spawn(move || {
        listener.set_nonblocking(false).unwrap();
        let (mut s, peer) = listener.accept().ok()?;
        let mut buf = [0u8; 4];
        s.read_exact(&mut buf).ok()?;
        s.write_all(b"pong").ok()?;
        Some(peer.ip())
    });
    let client = from.run(|| {
        let mut s = TcpStream::connect_timeout(&SocketAddr::from((to, port)), Duration::from_secs(2))
            .map_err(|e| e.to_string())?;
        s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        s.write_all(b"ping").map_err(|e| e.to_string())?;
        let mut buf = [0u8; 4];
        s.read_exact(&mut buf).map_err(|e| e.to_string())?;
        Ok::<_, String>(buf)
    });
    match client {
        Ok(buf) => {
            assert_eq!(&buf, b"pong");
            server.join().unwrap().ok_or_else(|| "server saw nothing".into())
        }
        Err(e) => {
            // Unblock the accept so the thread ends.
            let _ = to_ns.run(|| {
                TcpStream::connect_timeout(&SocketAddr::from((to, port)), Duration::from_millis(200))
            });
            let _ = server.join();
            Err(e)
        }
    }
}

fn udp(from: &Netns, to_ns: &Netns, to: Ipv4Addr, port: u16) -> Result<Ipv4Addr, String> {
    let server = to_ns.run(|| UdpSocket::bind((to, port)).unwrap());
    server.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    from.run(|| {
        let s = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0)).unwrap();
        s.send_to(b"ping", (to, port)).map_err(|e| e.to_string())
    })?;
    let mut buf = [0u8; 16];
    let (_, src) = server.recv_from(&mut buf).map_err(|e| e.to_string())?;
    match src {
        SocketAddr::V4(a) => Ok(*a.ip()),
        _ => Err("v6".into()),
    }
}

#[test]
fn vxlan_joins_pods_of_two_nodes_and_masquerades_only_what_leaves_the_cluster() {
    let Some((a, b)) = two_nodes("vx") else { return };
    // Each node's side: the device and its MAC.
    let mac_a = a.with_dataplane(Backend::Vxlan, "a", |_, mac| {
        Box::pin(async move { mac.unwrap() })
    });
    let mac_b = b.with_dataplane(Backend::Vxlan, "b", |_, mac| {
        Box::pin(async move { mac.unwrap() })
    });
    let link = a.ns.ip(&["-d", "link", "show", "r8s.1"]);
    assert!(
        link.contains("vxlan id 1") && link.contains("dstport 8472"),
        "{link}"
    );
    assert!(link.contains("mtu 1450"), "underlay MTU less VXLAN's 50: {link}");
    assert!(a.ns.ip(&["addr", "show", "r8s.1"]).contains("10.244.1.0/32"));
    // Before the peers are programmed, the other node's pods are out of reach.
    assert!(tcp(&a.pod, &b.pod, b.pod_ip(), 7001).is_err());

    // A restart keeps the device and so its MAC (what the other nodes know).
    let (pb, pa) = (peer(&b, "b", Some(mac_b)), peer(&a, "a", Some(mac_a)));
    let again = a.with_dataplane(Backend::Vxlan, "a", move |mut dp, mac| {
        Box::pin(async move {
            dp.apply(&[pb]).await.unwrap();
            mac.unwrap()
        })
    });
    assert_eq!(again, mac_a, "the VTEP MAC survives a restart");
    b.with_dataplane(Backend::Vxlan, "b", move |mut dp, _| {
        Box::pin(async move { dp.apply(&[pa]).await.unwrap() })
    });
    let fdb = a.ns.exec(&["bridge", "fdb", "show", "dev", "r8s.1"]);
    assert!(fdb.contains("dst 192.168.77.2"), "{fdb}");
    let routes = a.ns.ip(&["route", "show", "10.244.2.0/24"]);
    assert!(
        routes.contains("via 10.244.2.0 dev r8s.1") && routes.contains("onlink"),
        "{routes}"
    );

    // Pod to pod across the nodes, both ways, TCP and UDP, with the pods' own addresses.
    assert_eq!(tcp(&a.pod, &b.pod, b.pod_ip(), 7002), Ok(a.pod_ip()));
    assert_eq!(tcp(&b.pod, &a.pod, a.pod_ip(), 7003), Ok(b.pod_ip()));
    assert_eq!(udp(&a.pod, &b.pod, b.pod_ip(), 7004), Ok(a.pod_ip()));
    // The node itself reaches the other node's pod (from its device's address, in the
    // cluster range: answered through the tunnel).
    assert!(tcp(&a.ns, &b.pod, b.pod_ip(), 7005).is_ok());
    // A pod reaching outside the cluster (the other node's underlay address) is masqueraded.
    assert_eq!(tcp(&a.pod, &b.ns, b.ip, 7006), Ok(a.ip));
    // IPv6 pods ride the same tunnel over the IPv4 underlay, with their own addresses.
    let routes6 = a.ns.ip(&["-6", "route", "show", "fd44:0:0:2::/64"]);
    let gateway = format!("via {} dev r8s.1", r8s_net::overlay::dataplane::link_local(mac_b));
    assert!(
        routes6.contains(&gateway) && routes6.contains("onlink"),
        "{routes6}"
    );
    assert_eq!(
        tcp_ip(&a.pod, &b.pod, b.pod_ip6().into(), 7008),
        Ok(a.pod_ip6().into())
    );
    assert_eq!(
        tcp_ip(&b.pod, &a.pod, a.pod_ip6().into(), 7009),
        Ok(b.pod_ip6().into())
    );
    assert!(a.ns.nft(&["list", "tables"]).contains("table ip6 r8s-overlay"));
    let listed = a.ns.lists_with_nft();
    assert!(listed.contains("table ip r8s-overlay"), "{listed}");

    // The peer goes: its entries and route go, the pods are apart again.
    let b_mac = mac_b;
    a.with_dataplane(Backend::Vxlan, "a", move |mut dp, _| {
        Box::pin(async move {
            dp.apply(&[peer_static(b_mac)]).await.unwrap();
            dp.apply(&[]).await.unwrap();
        })
    });
    assert!(a.ns.ip(&["route", "show", "10.244.2.0/24"]).trim().is_empty());
    assert!(a
        .ns
        .ip(&["-6", "route", "show", "fd44:0:0:2::/64"])
        .trim()
        .is_empty());
    let neigh = a.ns.ip(&["-6", "neigh", "show", "dev", "r8s.1"]);
    assert!(
        !neigh.contains(&r8s_net::overlay::dataplane::link_local(mac_b).to_string()),
        "{neigh}"
    );
    assert!(tcp_ip(&a.pod, &b.pod, b.pod_ip6().into(), 7010).is_err());
    assert!(!a
        .ns
        .exec(&["bridge", "fdb", "show", "dev", "r8s.1"])
        .contains("192.168.77.2"));
    assert!(tcp(&a.pod, &b.pod, b.pod_ip(), 7007).is_err());

    // Node b readdressed (192.168.77.2 → .3): its agent's restart makes its device anew
    // (a new local address, a new MAC); node a's entries follow the Node's new address and
    // MAC, the old ones go, and the pods reach each other again.
    let b3 = Ipv4Addr::new(192, 168, 77, 3);
    // (The old address first: deleting a primary address takes its secondaries along.)
    b.ns.ip(&["addr", "del", "192.168.77.2/24", "dev", "eth0"]);
    b.ns.ip(&["addr", "add", "192.168.77.3/24", "dev", "eth0"]);
    let pa = peer(&a, "a", Some(mac_a));
    let mac_b3 = b.with_dataplane_at(b3, Backend::Vxlan, "b", move |mut dp, mac| {
        Box::pin(async move {
            dp.apply(&[pa]).await.unwrap();
            mac.unwrap()
        })
    });
    let moved = Peer {
        public_ip: b3,
        ..peer(&b, "b", Some(mac_b3))
    };
    let (old, new) = (peer(&b, "b", Some(mac_b)), moved.clone());
    a.with_dataplane(Backend::Vxlan, "a", move |mut dp, _| {
        Box::pin(async move {
            dp.apply(&[old]).await.unwrap();
            dp.apply(&[new]).await.unwrap();
        })
    });
    let fdb = a.ns.exec(&["bridge", "fdb", "show", "dev", "r8s.1"]);
    assert!(
        fdb.contains("dst 192.168.77.3") && !fdb.contains("dst 192.168.77.2"),
        "{fdb}"
    );
    assert_eq!(tcp(&a.pod, &b.pod, b.pod_ip(), 7011), Ok(a.pod_ip()));
    assert_eq!(
        tcp_ip(&b.pod, &a.pod, a.pod_ip6().into(), 7012),
        Ok(b.pod_ip6().into())
    );
    a.with_dataplane(Backend::Vxlan, "a", move |mut dp, _| {
        Box::pin(async move {
            dp.apply(&[moved]).await.unwrap();
            dp.apply(&[]).await.unwrap();
        })
    });

    // A clean stop removes the device and the masquerade table.
    for (n, ip, name) in [(&a, a.ip, "a"), (&b, b3, "b")] {
        n.with_dataplane_at(ip, Backend::Vxlan, name, |dp, _| {
            Box::pin(async move { dp.close().await.unwrap() })
        });
        let links = n.ns.ip(&["link", "show"]);
        assert!(!links.contains("r8s.1"), "{links}");
        let tables = n.ns.nft(&["list", "tables"]);
        assert!(!tables.contains("r8s-overlay"), "{tables}");
    }
}

/// Node b as node a knows it (the subnet and address `two_nodes` gives it).
fn peer_static(mac: [u8; 6]) -> Peer {
    Peer {
        name: "b".into(),
        subnet: (Ipv4Addr::new(10, 244, 2, 0), 24),
        subnet6: Some((Ipv6Addr::new(0xfd44, 0, 0, 2, 0, 0, 0, 0), 64)),
        public_ip: Ipv4Addr::new(192, 168, 77, 2),
        public_ip6: None,
        vtep_mac: Some(mac),
    }
}

#[test]
fn host_gw_routes_each_subnet_via_its_node() {
    let Some((a, b)) = two_nodes("hg") else { return };
    let (pb, pa) = (peer(&b, "b", None), peer(&a, "a", None));
    a.with_dataplane(Backend::HostGw, "a", move |mut dp, mac| {
        Box::pin(async move {
            assert!(mac.is_none());
            dp.apply(&[pb]).await.unwrap()
        })
    });
    b.with_dataplane(Backend::HostGw, "b", move |mut dp, _| {
        Box::pin(async move { dp.apply(&[pa]).await.unwrap() })
    });
    assert!(
        !a.ns.ip(&["link", "show"]).contains("r8s.1"),
        "host-gw makes no device"
    );
    let routes = a.ns.ip(&["route", "show", "10.244.2.0/24"]);
    assert!(routes.contains("via 192.168.77.2 dev eth0"), "{routes}");
    assert_eq!(tcp(&a.pod, &b.pod, b.pod_ip(), 7101), Ok(a.pod_ip()));
    assert_eq!(udp(&b.pod, &a.pod, a.pod_ip(), 7102), Ok(b.pod_ip()));
    // Dual-stack nodes: the IPv6 subnets routed via the nodes' IPv6 addresses, pods reach
    // each other by IPv6, unmasqueraded.
    let (pb, pa) = (peer6(&b, "b"), peer6(&a, "a"));
    a.with_dataplane(Backend::HostGw, "a", move |mut dp, _| {
        Box::pin(async move { dp.apply(&[pb]).await.unwrap() })
    });
    b.with_dataplane(Backend::HostGw, "b", move |mut dp, _| {
        Box::pin(async move { dp.apply(&[pa]).await.unwrap() })
    });
    let routes6 = a.ns.ip(&["-6", "route", "show", "fd44:0:0:2::/64"]);
    assert!(routes6.contains("via fd77::2"), "{routes6}");
    assert_eq!(
        tcp_ip(&a.pod, &b.pod, IpAddr::V6(b.pod_ip6()), 7103),
        Ok(IpAddr::V6(a.pod_ip6()))
    );
    let pb = peer6(&b, "b");
    a.with_dataplane(Backend::HostGw, "a", move |mut dp, _| {
        Box::pin(async move {
            dp.apply(&[pb]).await.unwrap();
            dp.close().await.unwrap()
        })
    });
    assert!(a
        .ns
        .ip(&["-6", "route", "show", "fd44:0:0:2::/64"])
        .trim()
        .is_empty());
    let pb = peer(&b, "b", None);
    a.with_dataplane(Backend::HostGw, "a", move |mut dp, _| {
        Box::pin(async move {
            dp.apply(&[pb]).await.unwrap();
            dp.close().await.unwrap()
        })
    });
    assert!(a.ns.ip(&["route", "show", "10.244.2.0/24"]).trim().is_empty());
}
