//! Programming the overlay into the kernel over rtnetlink: the VXLAN device, and per peer its
//! ARP entry, forwarding-database entry and route (or, for host-gw, a route via the peer's
//! address), kept in memory so each change touches only the peers that changed; and the
//! masquerade table.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use futures::TryStreamExt;
use rtnetlink::packet_route::address::AddressAttribute;
use rtnetlink::packet_route::link::{InfoData, InfoVxlan, LinkAttribute, LinkInfo};
use rtnetlink::packet_route::neighbour::{
    NeighbourAddress, NeighbourAttribute, NeighbourFlags, NeighbourMessage, NeighbourState,
};
use rtnetlink::packet_route::route::RouteMessage;
use rtnetlink::packet_route::AddressFamily;
use rtnetlink::{LinkVxlan, RouteMessageBuilder};

use super::{Backend, OverlayConfig, Peer};
use crate::nft::expr::{m, REG_1};
use crate::nft::{BaseChain, Batch, ChainType, CmpOp, Conn, Expr, Family, Hook, Verdict};

/// VXLAN's overhead on IPv4: outer IP (20) + UDP (8) + VXLAN (8) + inner Ethernet (14).
pub const VXLAN_OVERHEAD: u32 = 50;

pub struct Dataplane {
    handle: rtnetlink::Handle,
    cfg: OverlayConfig,
    /// The VXLAN device (vxlan backend).
    device: Option<u32>,
    /// The underlay link (holding the node's address).
    underlay: u32,
    /// What is programmed, by peer name.
    installed: BTreeMap<String, Peer>,
    /// This node's IPv6 pod subnet (dual-stack, vxlan).
    subnet6: Option<(Ipv6Addr, u8)>,
    /// The masquerade table is ours to remove.
    masq: bool,
}

fn nl(what: &str, e: rtnetlink::Error) -> String {
    format!("{what}: {e}")
}

fn exists(e: &rtnetlink::Error) -> bool {
    matches!(e, rtnetlink::Error::NetlinkError(m) if m.raw_code() == -libc::EEXIST)
}

fn missing(e: &rtnetlink::Error) -> bool {
    matches!(e, rtnetlink::Error::NetlinkError(m)
        if m.raw_code() == -libc::ENOENT || m.raw_code() == -libc::ESRCH || m.raw_code() == -libc::ENODEV)
}

impl Dataplane {
    /// Set up this node's side: for VXLAN the device (an existing one of the same
    /// configuration is kept, so its MAC — what the other nodes know — survives a restart)
    /// with `subnet`'s network address, and for both backends the masquerade table.
    /// Returns the dataplane and the VTEP MAC (vxlan).
    pub async fn open(
        cfg: OverlayConfig,
        subnet: (Ipv4Addr, u8),
        subnet6: Option<(Ipv6Addr, u8)>,
    ) -> Result<(Self, Option<[u8; 6]>), String> {
        // IPv6 pods ride the VXLAN device, or host-gw routes when this node has an IPv6
        // underlay address.
        let subnet6 = subnet6.filter(|_| {
            cfg.cluster_cidr6.is_some()
                && match cfg.backend {
                    Backend::Vxlan => true,
                    Backend::HostGw => cfg.node_ip6.is_some(),
                    Backend::None => false,
                }
        });
        let (connection, handle, _) = rtnetlink::new_connection().map_err(|e| format!("netlink: {e}"))?;
        tokio::spawn(connection);
        let (underlay, underlay_mtu) = link_with_address(&handle, cfg.node_ip).await?;
        let mut dp = Dataplane {
            handle,
            cfg,
            device: None,
            underlay,
            installed: BTreeMap::new(),
            subnet6,
            masq: false,
        };
        let mut mac = None;
        if dp.cfg.backend == Backend::Vxlan {
            let (index, m) = dp
                .ensure_device(underlay_mtu.saturating_sub(VXLAN_OVERHEAD), subnet)
                .await?;
            dp.device = Some(index);
            mac = Some(m);
        }
        if dp.cfg.backend != Backend::None {
            enable_forwarding();
            let conn = Conn::new().map_err(|e| format!("nf_tables: {e}"))?;
            let (cnet, cpre) = dp.cfg.cluster_cidr;
            conn.apply(masquerade_batch(
                &dp.cfg,
                (cnet.into(), cpre),
                (subnet.0.into(), subnet.1),
            ))
            .map_err(|e| format!("the overlay's masquerade table: {e}"))?;
            dp.masq = true;
            if let (Some(s6), Some(c6)) = (dp.subnet6, dp.cfg.cluster_cidr6) {
                enable_forwarding6();
                conn.apply(masquerade_batch(
                    &dp.cfg,
                    (c6.0.into(), c6.1),
                    (s6.0.into(), s6.1),
                ))
                .map_err(|e| format!("the overlay's IPv6 masquerade table: {e}"))?;
            }
        }
        Ok((dp, mac))
    }

    async fn ensure_device(&self, mtu: u32, subnet: (Ipv4Addr, u8)) -> Result<(u32, [u8; 6]), String> {
        let h = &self.handle;
        let existing = h
            .link()
            .get()
            .match_name(self.cfg.device.clone())
            .execute()
            .try_next()
            .await;
        let existing = match existing {
            Ok(found) => found,
            Err(e) if missing(&e) => None,
            Err(e) => return Err(nl("looking up the VXLAN device", e)),
        };
        let mut keep = None;
        if let Some(link) = existing {
            if self.matches(&link.attributes) {
                keep = Some(link);
            } else {
                h.link()
                    .del(link.header.index)
                    .execute()
                    .await
                    .map_err(|e| nl("removing a stale VXLAN device", e))?;
            }
        }
        let link = match keep {
            Some(l) => l,
            None => {
                let msg = LinkVxlan::new(&self.cfg.device, self.cfg.vni)
                    .dev(self.underlay)
                    .local(self.cfg.node_ip)
                    .port(self.cfg.port)
                    .learning(false)
                    .mtu(mtu)
                    .build();
                h.link()
                    .add(msg)
                    .execute()
                    .await
                    .map_err(|e| nl(&format!("creating VXLAN device {}", self.cfg.device), e))?;
                h.link()
                    .get()
                    .match_name(self.cfg.device.clone())
                    .execute()
                    .try_next()
                    .await
                    .map_err(|e| nl("reading the VXLAN device", e))?
                    .ok_or("the VXLAN device vanished")?
            }
        };
        let index = link.header.index;
        let mac: [u8; 6] = link
            .attributes
            .iter()
            .find_map(|a| match a {
                LinkAttribute::Address(m) => m.as_slice().try_into().ok(),
                _ => None,
            })
            .ok_or("the VXLAN device has no MAC")?;
        // The subnet's network address (as flannel), the source for what the node itself
        // sends to other nodes' pods; another address of an earlier subnet goes.
        let mut addrs = h.address().get().set_link_index_filter(index).execute();
        // (IPv6 needs no global address on the device: peers' routes go to their link-local
        // addresses, and what the node sends to other nodes' pods leaves from its bridge's
        // address. Link-local stays.)
        let want: Vec<(IpAddr, u8)> = vec![(IpAddr::V4(subnet.0), 32)];
        let mut have = Vec::new();
        while let Some(a) = addrs
            .try_next()
            .await
            .map_err(|e| nl("listing the device's addresses", e))?
        {
            let ip = a.attributes.iter().find_map(|x| match x {
                AddressAttribute::Address(IpAddr::V6(v6)) if v6.segments()[0] & 0xffc0 == 0xfe80 => None,
                AddressAttribute::Address(ip) => Some(*ip),
                _ => None,
            });
            let Some(ip) = ip else { continue };
            if want.contains(&(ip, a.header.prefix_len)) {
                have.push(ip);
            } else {
                let _ = h.address().del(a).execute().await;
            }
        }
        for (ip, len) in want {
            if have.contains(&ip) {
                continue;
            }
            let mut add = h.address().add(index, ip, len);
            if ip.is_ipv6() {
                // No duplicate detection: the address is this node's alone.
                add.message_mut().attributes.push(AddressAttribute::Flags(
                    rtnetlink::packet_route::address::AddressFlags::Nodad,
                ));
            }
            match add.execute().await {
                Ok(()) => {}
                Err(e) if exists(&e) => {}
                Err(e) => return Err(nl("addressing the VXLAN device", e)),
            }
        }
        h.link()
            .set(rtnetlink::LinkUnspec::new_with_index(index).mtu(mtu).up().build())
            .execute()
            .await
            .map_err(|e| nl("bringing the VXLAN device up", e))?;
        // Kernels before 5.7 corrupt the checksums of VXLAN packets whose source port was
        // rewritten by masquerade with checksum offload on (flannel's issue #1279): there
        // the stack computes them instead, as flannel and Calico do. Later kernels keep the
        // offload, and with it segmentation offload: several times the throughput.
        if checksum_offload_broken() {
            if let Err(e) = tx_checksum_off(&self.cfg.device) {
                tracing::warn!(error = %e, device = %self.cfg.device, "overlay: could not turn off checksum offload");
            }
        }
        Ok((index, mac))
    }

    /// Whether an existing device is the one this configuration would make.
    fn matches(&self, attrs: &[LinkAttribute]) -> bool {
        let Some(data) = attrs.iter().find_map(|a| match a {
            LinkAttribute::LinkInfo(infos) => infos.iter().find_map(|i| match i {
                LinkInfo::Data(InfoData::Vxlan(v)) => Some(v.clone()),
                _ => None,
            }),
            _ => None,
        }) else {
            return false;
        };
        let has = |want: &InfoVxlan| data.iter().any(|d| d == want);
        has(&InfoVxlan::Id(self.cfg.vni))
            && has(&InfoVxlan::Local(self.cfg.node_ip))
            && has(&InfoVxlan::Port(self.cfg.port))
            && has(&InfoVxlan::Link(self.underlay))
    }

    /// Bring the kernel to `peers`: entries of peers gone or changed removed, new ones added.
    /// A peer whose programming fails is left out of what is installed (tried again on the
    /// next call); the first error is returned after the rest are done.
    pub async fn apply(&mut self, peers: &[Peer]) -> Result<(), String> {
        let want: BTreeMap<&str, &Peer> = peers.iter().map(|p| (p.name.as_str(), p)).collect();
        let mut first_err = None;
        let stale: Vec<Peer> = self
            .installed
            .values()
            .filter(|p| want.get(p.name.as_str()) != Some(p))
            .cloned()
            .collect();
        for p in stale {
            if let Err(e) = self.remove_peer(&p).await {
                first_err.get_or_insert(e);
            }
            self.installed.remove(&p.name);
        }
        for p in peers {
            if self.installed.contains_key(&p.name) {
                continue;
            }
            match self.add_peer(p).await {
                Ok(()) => {
                    self.installed.insert(p.name.clone(), p.clone());
                }
                Err(e) => {
                    first_err.get_or_insert(e);
                }
            }
        }
        first_err.map_or(Ok(()), Err)
    }

    pub fn installed(&self) -> impl Iterator<Item = &Peer> {
        self.installed.values()
    }

    fn route(&self, p: &Peer) -> RouteMessage {
        let b = RouteMessageBuilder::<Ipv4Addr>::new().destination_prefix(p.subnet.0, p.subnet.1);
        match self.device {
            // Through the device, to the peer subnet's network address (its VTEP's address,
            // resolved by the ARP entry): `onlink`, since no subnet on the device holds it.
            Some(dev) => b.gateway(p.subnet.0).output_interface(dev).onlink().build(),
            None => b.gateway(p.public_ip).output_interface(self.underlay).build(),
        }
    }

    /// The route to a peer's IPv6 subnet through the device, via the link-local address
    /// the peer's device has from its MAC (resolved by the NDP entry). Not the subnet's
    /// network address as for IPv4: in IPv6 that is the subnet-router anycast address the
    /// node's own bridge answers for.
    /// With host-gw, via the peer's IPv6 underlay address.
    fn route6(&self, p: &Peer) -> Option<RouteMessage> {
        let s6 = p.subnet6.filter(|_| self.subnet6.is_some())?;
        let b = RouteMessageBuilder::<Ipv6Addr>::new().destination_prefix(s6.0, s6.1);
        Some(match self.device {
            Some(dev) => b
                .gateway(link_local(p.vtep_mac?))
                .output_interface(dev)
                .onlink()
                .build(),
            None => b.gateway(p.public_ip6?).build(),
        })
    }

    async fn add_peer(&self, p: &Peer) -> Result<(), String> {
        let h = &self.handle;
        if let Some(route6) = self.route6(p) {
            if let (Some(dev), Some(mac)) = (self.device, p.vtep_mac) {
                h.neighbours()
                    .add(dev, IpAddr::V6(link_local(mac)))
                    .link_layer_address(&mac)
                    .replace()
                    .execute()
                    .await
                    .map_err(|e| nl(&format!("NDP entry for {}", p.name), e))?;
            }
            h.route()
                .add(route6)
                .replace()
                .execute()
                .await
                .map_err(|e| nl(&format!("IPv6 route to {}'s pods", p.name), e))?;
        }
        if let (Some(dev), Some(mac)) = (self.device, p.vtep_mac) {
            h.neighbours()
                .add(dev, IpAddr::V4(p.subnet.0))
                .link_layer_address(&mac)
                .replace()
                .execute()
                .await
                .map_err(|e| nl(&format!("ARP entry for {}", p.name), e))?;
            // NTF_SELF: the entry is the VXLAN device's own (it is no bridge's port).
            h.neighbours()
                .add_bridge(dev, &mac)
                .flags(NeighbourFlags::Own)
                .destination(IpAddr::V4(p.public_ip))
                .replace()
                .execute()
                .await
                .map_err(|e| nl(&format!("forwarding entry for {}", p.name), e))?;
        }
        h.route()
            .add(self.route(p))
            .replace()
            .execute()
            .await
            .map_err(|e| nl(&format!("route to {}'s pods", p.name), e))
    }

    async fn remove_peer(&self, p: &Peer) -> Result<(), String> {
        let h = &self.handle;
        let ok_if_gone = |r: Result<(), rtnetlink::Error>, what: &str| match r {
            Ok(()) => Ok(()),
            Err(e) if missing(&e) => Ok(()),
            Err(e) => Err(nl(what, e)),
        };
        let mut result = ok_if_gone(h.route().del(self.route(p)).execute().await, "removing a route");
        if let Some(route6) = self.route6(p) {
            let r = ok_if_gone(h.route().del(route6).execute().await, "removing an IPv6 route");
            result = result.and(r);
        }
        if let (Some(_), Some(dev), Some(mac)) = (self.route6(p), self.device, p.vtep_mac) {
            let mut ndp = NeighbourMessage::default();
            ndp.header.family = AddressFamily::Inet6;
            ndp.header.ifindex = dev;
            ndp.attributes
                .push(NeighbourAttribute::Destination(NeighbourAddress::Inet6(
                    link_local(mac),
                )));
            let r = ok_if_gone(h.neighbours().del(ndp).execute().await, "removing an NDP entry");
            result = result.and(r);
        }
        if let (Some(dev), Some(mac)) = (self.device, p.vtep_mac) {
            let mut arp = NeighbourMessage::default();
            arp.header.family = AddressFamily::Inet;
            arp.header.ifindex = dev;
            arp.attributes
                .push(NeighbourAttribute::Destination(NeighbourAddress::Inet(
                    p.subnet.0,
                )));
            let r = ok_if_gone(h.neighbours().del(arp).execute().await, "removing an ARP entry");
            result = result.and(r);
            let mut fdb = NeighbourMessage::default();
            fdb.header.family = AddressFamily::Bridge;
            fdb.header.ifindex = dev;
            fdb.header.state = NeighbourState::Permanent;
            fdb.header.flags = NeighbourFlags::Own;
            fdb.attributes
                .push(NeighbourAttribute::LinkLayerAddress(mac.to_vec()));
            fdb.attributes
                .push(NeighbourAttribute::Destination(NeighbourAddress::Inet(
                    p.public_ip,
                )));
            let r = ok_if_gone(
                h.neighbours().del(fdb).execute().await,
                "removing a forwarding entry",
            );
            result = result.and(r);
        }
        result
    }

    /// Remove everything this node programmed: the device (its entries and routes go with
    /// it), host-gw routes, the masquerade table.
    pub async fn close(mut self) -> Result<(), String> {
        let mut result = Ok(());
        if let Some(dev) = self.device.take() {
            self.installed.clear();
            if let Err(e) = self.handle.link().del(dev).execute().await {
                if !missing(&e) {
                    result = Err(nl("removing the VXLAN device", e));
                }
            }
        }
        let peers: Vec<Peer> = std::mem::take(&mut self.installed).into_values().collect();
        for p in peers {
            if let Err(e) = self.remove_peer(&p).await {
                result = result.and(Err(e));
            }
        }
        if self.masq {
            let families = std::iter::once(Family::Ipv4).chain(self.subnet6.map(|_| Family::Ipv6));
            for family in families {
                let mut b = Batch::new(family, &self.cfg.masq_table);
                b.del_table();
                let r = Conn::new()
                    .map_err(|e| e.to_string())
                    .and_then(|c| c.apply(b).map_err(|e| e.to_string()));
                if let Err(e) = r {
                    result = result.and(Err(format!("removing the masquerade table: {e}")));
                }
            }
        }
        result
    }
}

/// The MTU pods get with `backend` on a node whose address is `node_ip`: the underlay
/// link's, less VXLAN's overhead for vxlan.
pub async fn pod_mtu(backend: Backend, node_ip: Ipv4Addr) -> Result<u32, String> {
    let (connection, handle, _) = rtnetlink::new_connection().map_err(|e| format!("netlink: {e}"))?;
    tokio::spawn(connection);
    let (_, mtu) = link_with_address(&handle, node_ip).await?;
    Ok(match backend {
        Backend::Vxlan => mtu.saturating_sub(VXLAN_OVERHEAD),
        _ => mtu,
    })
}

/// The index and MTU of the link holding `ip`.
async fn link_with_address(h: &rtnetlink::Handle, ip: Ipv4Addr) -> Result<(u32, u32), String> {
    let mut addrs = h.address().get().set_address_filter(IpAddr::V4(ip)).execute();
    let a = addrs
        .try_next()
        .await
        .map_err(|e| nl("listing addresses", e))?
        .ok_or_else(|| format!("no link on this node has the node address {ip}"))?;
    let index = a.header.index;
    let link = h
        .link()
        .get()
        .match_index(index)
        .execute()
        .try_next()
        .await
        .map_err(|e| nl("reading the node address's link", e))?
        .ok_or("the node address's link vanished")?;
    let mtu = link
        .attributes
        .iter()
        .find_map(|a| match a {
            LinkAttribute::Mtu(m) => Some(*m),
            _ => None,
        })
        .unwrap_or(1500);
    Ok((index, mtu))
}

/// Routing between the pod bridge and the overlay needs IPv4 forwarding (per network
/// namespace; the bridge CNI plugin turns it on too, but only once a pod starts).
fn enable_forwarding() {
    let path = "/proc/sys/net/ipv4/ip_forward";
    if std::fs::read_to_string(path)
        .map(|v| v.trim() != "1")
        .unwrap_or(false)
    {
        if let Err(e) = std::fs::write(path, "1") {
            tracing::warn!(error = %e, "overlay: could not turn on IPv4 forwarding");
        }
    }
}

/// The link-local address a device with `mac` gives itself (modified EUI-64).
pub fn link_local(mac: [u8; 6]) -> Ipv6Addr {
    let m = mac;
    Ipv6Addr::new(
        0xfe80,
        0,
        0,
        0,
        u16::from_be_bytes([m[0] ^ 0x02, m[1]]),
        u16::from_be_bytes([m[2], 0xff]),
        u16::from_be_bytes([0xfe, m[3]]),
        u16::from_be_bytes([m[4], m[5]]),
    )
}

/// The same for IPv6 (a dual-stack node's pods).
fn enable_forwarding6() {
    let path = "/proc/sys/net/ipv6/conf/all/forwarding";
    if std::fs::read_to_string(path)
        .map(|v| v.trim() != "1")
        .unwrap_or(false)
    {
        if let Err(e) = std::fs::write(path, "1") {
            tracing::warn!(error = %e, "overlay: could not turn on IPv6 forwarding");
        }
    }
}

/// Whether this kernel has the VXLAN checksum offload bug (fixed in 5.7).
fn checksum_offload_broken() -> bool {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    kernel_before(&release, (5, 7))
}

fn kernel_before(release: &str, (major, minor): (u32, u32)) -> bool {
    let mut parts = release.trim().split(['.', '-']);
    let a = parts.next().and_then(|p| p.parse::<u32>().ok());
    let b = parts.next().and_then(|p| p.parse::<u32>().ok());
    match (a, b) {
        (Some(a), Some(b)) => (a, b) < (major, minor),
        // Unknown: assume the bug, the safe side.
        _ => true,
    }
}

/// Turn off transmit checksum offload on `dev` with the ethtool ioctl (ETHTOOL_STXCSUM).
/// No crate wraps this one ioctl without pulling in a netlink ethtool stack, so it is here.
fn tx_checksum_off(dev: &str) -> std::io::Result<()> {
    const SIOCETHTOOL: libc::c_ulong = 0x8946;
    const ETHTOOL_STXCSUM: u32 = 0x17;
    #[repr(C)]
    struct EthtoolValue {
        cmd: u32,
        data: u32,
    }
    #[repr(C)]
    struct IfReq {
        name: [libc::c_char; libc::IFNAMSIZ],
        data: *mut EthtoolValue,
        _pad: [u8; 16],
    }
    if dev.len() >= libc::IFNAMSIZ {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "name too long",
        ));
    }
    let mut value = EthtoolValue {
        cmd: ETHTOOL_STXCSUM,
        data: 0,
    };
    let mut req = IfReq {
        name: [0; libc::IFNAMSIZ],
        data: &mut value,
        _pad: [0; 16],
    };
    for (d, s) in req.name.iter_mut().zip(dev.bytes()) {
        *d = s as libc::c_char;
    }
    // SAFETY: a plain datagram socket, closed below; the ioctl reads the request and the
    // value it points to, both alive for the call.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let rc = libc::ioctl(fd, SIOCETHTOOL as _, &mut req);
        let err = std::io::Error::last_os_error();
        libc::close(fd);
        if rc < 0 {
            return Err(err);
        }
    }
    Ok(())
}

/// The masquerade table (flannel's rules) of one family, `cluster` and `subnet` of it: pod
/// traffic between pods keeps its addresses; pod traffic leaving the cluster CIDR is
/// masqueraded (not multicast); traffic from outside the cluster to other nodes' pods is
/// masqueraded too, so their answers come back here; traffic from outside into this node's own
/// pods keeps its source. The table (`ip`, or `ip6` for a dual-stack cluster's IPv6 pods) is
/// deleted and made again in the same transaction, so an earlier run's rules never linger.
pub fn masquerade_batch(cfg: &OverlayConfig, cluster: (IpAddr, u8), subnet: (IpAddr, u8)) -> Batch {
    let family = crate::nft::AddrFamily::of(&cluster.0);
    let mut b = Batch::new(family.table(), &cfg.masq_table);
    b.add_table();
    b.del_table();
    b.add_table();
    b.add_chain(
        "postrouting",
        Some(BaseChain {
            hook: Hook::Postrouting,
            priority: 100,
            kind: ChainType::Nat,
        }),
    );
    let (cnet, cpre) = cluster;
    let saddr = |op| m::addr_in(m::saddr(family, REG_1), cnet, cpre, op);
    let daddr = |net: IpAddr, pre: u8, op| m::addr_in(m::daddr(family, REG_1), net, pre, op);
    let multicast = match family {
        crate::nft::AddrFamily::V4 => (IpAddr::V4(Ipv4Addr::new(224, 0, 0, 0)), 4),
        crate::nft::AddrFamily::V6 => (IpAddr::V6(Ipv6Addr::new(0xff00, 0, 0, 0, 0, 0, 0, 0)), 8),
    };
    let masq = Expr::Masquerade {
        flags: crate::nft::expr::NAT_PROTO_RANDOM_FULLY,
    };
    let rules: [Vec<Expr>; 4] = [
        [
            saddr(CmpOp::Eq),
            daddr(cnet, cpre, CmpOp::Eq),
            vec![Expr::Verdict(Verdict::Return)],
        ]
        .concat(),
        [
            saddr(CmpOp::Eq),
            daddr(multicast.0, multicast.1, CmpOp::Neq),
            vec![masq.clone()],
        ]
        .concat(),
        [
            saddr(CmpOp::Neq),
            daddr(subnet.0, subnet.1, CmpOp::Eq),
            vec![Expr::Verdict(Verdict::Return)],
        ]
        .concat(),
        [saddr(CmpOp::Neq), daddr(cnet, cpre, CmpOp::Eq), vec![masq]].concat(),
    ];
    for r in &rules {
        b.add_rule("postrouting", r);
    }
    b
}

#[cfg(test)]
mod tests {
    #[test]
    fn kernels_before_5_7_have_the_checksum_bug() {
        use super::kernel_before;
        assert!(kernel_before("4.19.0-21-amd64", (5, 7)));
        assert!(kernel_before("5.6.19", (5, 7)));
        assert!(!kernel_before("5.7.0", (5, 7)));
        assert!(!kernel_before("6.18.44-fc-v782", (5, 7)));
        assert!(kernel_before("garbage", (5, 7)));
    }

    #[test]
    fn link_local_addresses_follow_the_mac() {
        let mac = [0x92, 0xeb, 0x35, 0xea, 0xd9, 0x21];
        assert_eq!(super::link_local(mac).to_string(), "fe80::90eb:35ff:feea:d921");
    }
}
