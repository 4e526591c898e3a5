//! The overlay between nodes (the reference document's "Inter-host networking"; the role of
//! flannel's kube subnet manager with its `vxlan` and `host-gw` backends, k3s's default):
//! every node has a podCIDR in the API; each agent publishes how to reach its own (its
//! address, and for VXLAN its tunnel endpoint's MAC, in flannel's Node annotations) and keeps
//! the kernel's picture of every other node's subnet from the Node objects.
//!
//! - `vxlan`: one VXLAN device (`r8s.1`, VNI 1, UDP 8472 as flannel) with the subnet's
//!   network address on it; per other node an ARP entry (its subnet's network address → its
//!   VTEP MAC), a forwarding entry (that MAC → its node address) and a route to its subnet
//!   through the device. Encapsulated packets go over the underlay between node addresses.
//! - `host-gw`: a route to each other node's subnet via its address (nodes on one link).
//! - `none`: nothing; a bring-your-own network.
//!
//! Pod traffic leaving the cluster CIDR is masqueraded (and nothing between pods), in a small
//! nf_tables table of the overlay's own ([`dataplane::masquerade_batch`]).
//!
//! On a dual-stack cluster (a node with an IPv6 podCIDR too) the VXLAN device also carries
//! IPv6 pod traffic over the same IPv4 underlay: per other node an NDP entry (its IPv6
//! subnet's network address → its VTEP MAC) and a route to its IPv6 subnet through the
//! device, and an `ip6` masquerade table. (flannel instead runs a second VXLAN device over an
//! IPv6 underlay, which needs every node to have an IPv6 address; an Ethernet tunnel carries
//! either family, so r8s needs none.) host-gw routes IPv4 only.
//!
//! [`peers`] is the pure part (Nodes → what to program), [`dataplane`] programs it over
//! netlink, [`run`] follows the Nodes.

pub mod dataplane;
pub mod run;

use std::net::{Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

use k8s_openapi::api::core::v1::Node;

pub use run::run;

/// flannel's annotations, so tools that know flannel read r8s's nodes.
pub const ANNOTATION_BACKEND_TYPE: &str = "flannel.alpha.coreos.com/backend-type";
pub const ANNOTATION_BACKEND_DATA: &str = "flannel.alpha.coreos.com/backend-data";
pub const ANNOTATION_PUBLIC_IP: &str = "flannel.alpha.coreos.com/public-ip";
pub const ANNOTATION_PUBLIC_IP6: &str = "flannel.alpha.coreos.com/public-ipv6";
pub const ANNOTATION_SUBNET_MANAGER: &str = "flannel.alpha.coreos.com/kube-subnet-manager";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    Vxlan,
    HostGw,
    None,
}

impl Backend {
    pub fn as_str(self) -> &'static str {
        match self {
            Backend::Vxlan => "vxlan",
            Backend::HostGw => "host-gw",
            Backend::None => "none",
        }
    }
}

impl FromStr for Backend {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "vxlan" => Ok(Backend::Vxlan),
            "host-gw" => Ok(Backend::HostGw),
            "none" => Ok(Backend::None),
            other => Err(format!(
                "unknown flannel backend {other:?} (valid: vxlan, host-gw, none)"
            )),
        }
    }
}

#[derive(Clone, Debug)]
pub struct OverlayConfig {
    pub backend: Backend,
    pub node_name: String,
    /// This node's address on the underlay (where other nodes send its pods' packets).
    pub node_ip: Ipv4Addr,
    /// The whole pod range: masquerade for what leaves it, never inside it.
    pub cluster_cidr: (Ipv4Addr, u8),
    /// The IPv6 pod range of a dual-stack cluster.
    pub cluster_cidr6: Option<(Ipv6Addr, u8)>,
    /// This node's IPv6 underlay address (a dual-stack `--node-ip`): host-gw routes IPv6 pod
    /// subnets only between nodes that have one.
    pub node_ip6: Option<Ipv6Addr>,
    /// The VXLAN device's name, network identifier and UDP port.
    pub device: String,
    pub vni: u32,
    pub port: u16,
    /// The nf_tables table (family ip) holding the masquerade rules.
    pub masq_table: String,
}

impl OverlayConfig {
    pub fn new(backend: Backend, node_name: &str, node_ip: Ipv4Addr, cluster_cidr: (Ipv4Addr, u8)) -> Self {
        OverlayConfig {
            backend,
            node_name: node_name.to_owned(),
            node_ip,
            cluster_cidr,
            cluster_cidr6: None,
            node_ip6: None,
            device: "r8s.1".into(),
            vni: 1,
            port: 8472,
            masq_table: "r8s-overlay".into(),
        }
    }
}

/// Another node as the dataplane needs it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Peer {
    pub name: String,
    /// Its pod subnet (network address, prefix length).
    pub subnet: (Ipv4Addr, u8),
    /// Its IPv6 pod subnet, on a dual-stack cluster (vxlan; host-gw between nodes with
    /// IPv6 addresses).
    pub subnet6: Option<(Ipv6Addr, u8)>,
    /// Its address on the underlay.
    pub public_ip: Ipv4Addr,
    /// Its IPv6 underlay address (host-gw's gateway for its IPv6 subnet).
    pub public_ip6: Option<Ipv6Addr>,
    /// Its VXLAN tunnel endpoint's MAC (vxlan backend only).
    pub vtep_mac: Option<[u8; 6]>,
}

/// `a.b.c.d/n` → its network address and prefix length (host bits cleared).
pub fn parse_cidr(s: &str) -> Option<(Ipv4Addr, u8)> {
    let (a, n) = s.split_once('/')?;
    let a: Ipv4Addr = a.parse().ok()?;
    let n: u8 = n.parse().ok()?;
    if n > 32 {
        return None;
    }
    let mask = if n == 0 { 0 } else { u32::MAX << (32 - n) };
    Some((Ipv4Addr::from(u32::from(a) & mask), n))
}

/// An IPv6 CIDR → its network address and prefix length (host bits cleared).
pub fn parse_cidr6(s: &str) -> Option<(Ipv6Addr, u8)> {
    let (a, n) = s.split_once('/')?;
    let a: Ipv6Addr = a.parse().ok()?;
    let n: u8 = n.parse().ok()?;
    if n > 128 {
        return None;
    }
    let mask = if n == 0 { 0 } else { u128::MAX << (128 - n) };
    Some((Ipv6Addr::from(u128::from(a) & mask), n))
}

/// A subnet: network address and prefix length.
pub type Subnet<A> = (A, u8);

/// A node's pod subnets: its IPv4 one (from podCIDRs, or podCIDR) and its IPv6 one.
pub fn node_subnets(node: &Node) -> (Option<Subnet<Ipv4Addr>>, Option<Subnet<Ipv6Addr>>) {
    let Some(spec) = node.spec.as_ref() else {
        return (None, None);
    };
    let all: Vec<&String> = spec
        .pod_cidrs
        .iter()
        .flatten()
        .chain(spec.pod_cidr.iter())
        .collect();
    (
        all.iter().find_map(|c| parse_cidr(c)),
        all.iter().find_map(|c| parse_cidr6(c)),
    )
}

pub fn parse_mac(s: &str) -> Option<[u8; 6]> {
    let parts: Vec<u8> = s
        .split(':')
        .map(|p| u8::from_str_radix(p, 16).ok().filter(|_| p.len() == 2))
        .collect::<Option<_>>()?;
    parts.try_into().ok()
}

pub fn format_mac(m: &[u8]) -> String {
    m.iter().map(|b| format!("{b:02x}")).collect::<Vec<_>>().join(":")
}

/// flannel's backend data for VXLAN: `{"VNI":1,"VtepMAC":"…"}`.
pub fn backend_data(vni: u32, mac: &[u8]) -> String {
    format!("{{\"VNI\":{vni},\"VtepMAC\":\"{}\"}}", format_mac(mac))
}

fn annotation<'a>(node: &'a Node, key: &str) -> Option<&'a str> {
    node.metadata.annotations.as_ref()?.get(key).map(|s| s.as_str())
}

/// The node's underlay address of one family: flannel's public-ip (public-ipv6) annotation,
/// else its InternalIP of that family.
fn underlay_ip<T: std::str::FromStr>(node: &Node, annotation_key: &str) -> Option<T> {
    if let Some(ip) = annotation(node, annotation_key).and_then(|s| s.parse().ok()) {
        return Some(ip);
    }
    node.status
        .as_ref()?
        .addresses
        .as_ref()?
        .iter()
        .filter(|a| a.type_ == "InternalIP")
        .find_map(|a| a.address.parse().ok())
}

fn public_ip(node: &Node) -> Option<Ipv4Addr> {
    underlay_ip(node, ANNOTATION_PUBLIC_IP)
}

fn public_ip6(node: &Node) -> Option<Ipv6Addr> {
    underlay_ip(node, ANNOTATION_PUBLIC_IP6)
}

/// The other nodes this node's dataplane reaches, from the Node objects: those with a pod
/// subnet and an address, and for VXLAN a published VTEP MAC on the same backend (a node
/// that has not published one yet is left out until it does). Sorted by name.
pub fn peers<'a>(cfg: &OverlayConfig, nodes: impl IntoIterator<Item = &'a Node>) -> Vec<Peer> {
    let mut out: Vec<Peer> = nodes
        .into_iter()
        .filter(|n| n.metadata.name.as_deref() != Some(cfg.node_name.as_str()))
        .filter(|n| n.metadata.deletion_timestamp.is_none())
        .filter_map(|n| {
            let name = n.metadata.name.clone()?;
            let (subnet, subnet6) = node_subnets(n);
            let subnet = subnet?;
            let public_ip = public_ip(n)?;
            let vtep_mac = match cfg.backend {
                Backend::Vxlan => {
                    if annotation(n, ANNOTATION_BACKEND_TYPE) != Some("vxlan") {
                        return None;
                    }
                    let data: serde_json::Value =
                        serde_json::from_str(annotation(n, ANNOTATION_BACKEND_DATA)?).ok()?;
                    Some(parse_mac(data.get("VtepMAC")?.as_str()?)?)
                }
                _ => None,
            };
            let public_ip6 =
                public_ip6(n).filter(|_| cfg.backend == Backend::HostGw && cfg.node_ip6.is_some());
            let subnet6 = match cfg.backend {
                Backend::Vxlan => subnet6,
                Backend::HostGw => subnet6.filter(|_| public_ip6.is_some()),
                Backend::None => None,
            };
            Some(Peer {
                name,
                subnet,
                subnet6,
                public_ip,
                public_ip6,
                vtep_mac,
            })
        })
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(name: &str, cidr: Option<&str>, ip: &str, annotations: serde_json::Value) -> Node {
        serde_json::from_value(json!({
            "metadata": {"name": name, "annotations": annotations},
            "spec": {"podCIDR": cidr},
            "status": {"addresses": [{"type": "InternalIP", "address": ip}]}
        }))
        .unwrap()
    }

    fn cfg(backend: Backend) -> OverlayConfig {
        OverlayConfig::new(
            backend,
            "a",
            Ipv4Addr::new(192, 168, 0, 1),
            (Ipv4Addr::new(10, 42, 0, 0), 16),
        )
    }

    #[test]
    fn cidrs_and_macs_parse_strictly() {
        assert_eq!(
            parse_cidr("10.42.3.7/24"),
            Some((Ipv4Addr::new(10, 42, 3, 0), 24))
        );
        assert_eq!(parse_cidr("10.42.3.0/33"), None);
        assert_eq!(parse_cidr("10.42.3.0"), None);
        assert_eq!(
            parse_mac("0a:1b:2c:3d:4e:5f"),
            Some([0x0a, 0x1b, 0x2c, 0x3d, 0x4e, 0x5f])
        );
        assert_eq!(parse_mac("0a:1b:2c:3d:4e"), None);
        assert_eq!(parse_mac("0a:1b:2c:3d:4e:5"), None);
        assert_eq!(format_mac(&[0x0a, 0, 0xff, 1, 2, 3]), "0a:00:ff:01:02:03");
        assert_eq!(
            backend_data(1, &[1, 2, 3, 4, 5, 6]),
            r#"{"VNI":1,"VtepMAC":"01:02:03:04:05:06"}"#
        );
    }

    #[test]
    fn vxlan_peers_need_a_subnet_an_address_and_a_published_mac() {
        let vx = |mac: &str| {
            json!({
                ANNOTATION_BACKEND_TYPE: "vxlan",
                ANNOTATION_BACKEND_DATA: format!("{{\"VNI\":1,\"VtepMAC\":\"{mac}\"}}"),
            })
        };
        let nodes = [
            node("a", Some("10.42.0.0/24"), "192.168.0.1", vx("00:00:00:00:00:01")),
            node("c", Some("10.42.2.0/24"), "192.168.0.3", vx("00:00:00:00:00:03")),
            node("b", Some("10.42.1.0/24"), "192.168.0.2", vx("00:00:00:00:00:02")),
            // No podCIDR yet, no MAC yet, a broken MAC, another backend: all left out.
            node("d", None, "192.168.0.4", vx("00:00:00:00:00:04")),
            node("e", Some("10.42.4.0/24"), "192.168.0.5", json!({})),
            node("f", Some("10.42.5.0/24"), "192.168.0.6", vx("zz")),
            node(
                "g",
                Some("10.42.6.0/24"),
                "192.168.0.7",
                json!({ANNOTATION_BACKEND_TYPE: "host-gw"}),
            ),
        ];
        let got = peers(&cfg(Backend::Vxlan), &nodes);
        let names: Vec<&str> = got.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["b", "c"], "itself and incomplete nodes are not peers");
        assert_eq!(got[0].subnet, (Ipv4Addr::new(10, 42, 1, 0), 24));
        assert_eq!(got[0].public_ip, Ipv4Addr::new(192, 168, 0, 2));
        assert_eq!(got[0].vtep_mac, Some([0, 0, 0, 0, 0, 2]));
        assert_eq!(got[0].subnet6, None);
        // A dual-stack node: its IPv6 subnet from podCIDRs.
        let mut dual = node("h", Some("10.42.7.0/24"), "192.168.0.8", vx("00:00:00:00:00:08"));
        dual.spec.as_mut().unwrap().pod_cidrs = Some(vec!["10.42.7.0/24".into(), "fd42:0:0:7::/64".into()]);
        let got = peers(&cfg(Backend::Vxlan), [&dual]);
        assert_eq!(got[0].subnet6, Some(("fd42:0:0:7::".parse().unwrap(), 64)));
        assert_eq!(parse_cidr6("fd42::7:1/64"), Some(("fd42::".parse().unwrap(), 64)));
        assert_eq!(parse_cidr6("10.42.0.0/16"), None);
    }

    #[test]
    fn the_public_ip_annotation_wins_over_the_internal_ip() {
        let n = node(
            "b",
            Some("10.42.1.0/24"),
            "192.168.0.2",
            json!({ANNOTATION_PUBLIC_IP: "172.16.0.2"}),
        );
        let got = peers(&cfg(Backend::HostGw), [&n]);
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].public_ip, Ipv4Addr::new(172, 16, 0, 2));
        assert_eq!(got[0].vtep_mac, None, "host-gw needs no MAC");
    }

    #[test]
    fn host_gw_routes_ipv6_only_between_nodes_with_ipv6_addresses() {
        let n: Node = serde_json::from_value(json!({
            "metadata": {"name": "b"},
            "spec": {"podCIDR": "10.42.1.0/24", "podCIDRs": ["10.42.1.0/24", "fd42:0:0:1::/64"]},
            "status": {"addresses": [{"type": "InternalIP", "address": "192.168.0.2"}, {"type": "InternalIP", "address": "fd00::2"}]}
        }))
        .unwrap();
        // This node has no IPv6 address: IPv4 only.
        let got = peers(&cfg(Backend::HostGw), [&n]);
        assert_eq!((got[0].subnet6, got[0].public_ip6), (None, None));
        let mut c = cfg(Backend::HostGw);
        c.node_ip6 = Some("fd00::1".parse().unwrap());
        let got = peers(&c, [&n]);
        assert_eq!(got[0].public_ip6, Some("fd00::2".parse().unwrap()));
        assert_eq!(got[0].subnet6, Some(("fd42:0:0:1::".parse().unwrap(), 64)));
        // A peer without one: its IPv6 subnet is not routed.
        let v4_only: Node = serde_json::from_value(json!({
            "metadata": {"name": "c"},
            "spec": {"podCIDRs": ["10.42.2.0/24", "fd42:0:0:2::/64"]},
            "status": {"addresses": [{"type": "InternalIP", "address": "192.168.0.3"}]}
        }))
        .unwrap();
        assert_eq!(peers(&c, [&v4_only])[0].subnet6, None);
    }

    #[test]
    fn backends_parse_by_flannel_names() {
        assert_eq!("vxlan".parse::<Backend>(), Ok(Backend::Vxlan));
        assert_eq!("host-gw".parse::<Backend>(), Ok(Backend::HostGw));
        assert_eq!("none".parse::<Backend>(), Ok(Backend::None));
        let err = "wireguard".parse::<Backend>().unwrap_err();
        assert!(
            err.contains("wireguard") && err.contains("vxlan, host-gw, none"),
            "{err}"
        );
    }
}
