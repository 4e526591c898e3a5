//! Addresses the agent makes local to the node on the loopback link (as upstream's NodeLocal
//! DNSCache binds the kube-dns address on the node): packets from pods to them are delivered
//! to the node's own sockets through their default route, without a Service proxy. Labelled
//! (IPv4), so a later run knows an address as r8s's.

use std::net::{IpAddr, SocketAddr};

use futures::TryStreamExt;
use rtnetlink::packet_route::address::AddressAttribute;

/// Make `address` local to the node: added to the loopback link (labelled, for IPv4), unless
/// some interface already has it that is not r8s's (a socket can bind it). Returns whether the
/// address is ours to remove. (The loopback link, not a dummy link as NodeLocal DNSCache
/// uses: it exists on every kernel; packets from pods to it are delivered locally the same.)
pub async fn make_local(address: IpAddr, label: &str) -> Result<bool, String> {
    let (connection, handle, _) = rtnetlink::new_connection().map_err(|e| format!("netlink: {e}"))?;
    tokio::spawn(connection);
    let lo = loopback_index(&handle).await?;
    if let Some(labelled) = our_address(&handle, lo, address, label).await? {
        return Ok(labelled);
    }
    if std::net::UdpSocket::bind(SocketAddr::new(address, 0)).is_ok() {
        return Ok(false);
    }
    let prefix = if address.is_ipv4() { 32 } else { 128 };
    let mut add = handle.address().add(lo, address, prefix);
    if address.is_ipv4() {
        add.message_mut()
            .attributes
            .push(AddressAttribute::Label(label.to_owned()));
    }
    add.execute()
        .await
        .map_err(|e| format!("adding {address} to the loopback link: {e}"))?;
    Ok(true)
}

async fn loopback_index(handle: &rtnetlink::Handle) -> Result<u32, String> {
    Ok(handle
        .link()
        .get()
        .match_name("lo".to_owned())
        .execute()
        .try_next()
        .await
        .map_err(|e| format!("finding the loopback link: {e}"))?
        .ok_or("no loopback link")?
        .header
        .index)
}

/// `address` as the loopback link holds it, if it does.
async fn on_loopback(
    handle: &rtnetlink::Handle,
    lo: u32,
    address: IpAddr,
) -> Result<Option<rtnetlink::packet_route::address::AddressMessage>, String> {
    let mut found = handle
        .address()
        .get()
        .set_link_index_filter(lo)
        .set_address_filter(address)
        .execute();
    found
        .try_next()
        .await
        .map_err(|e| format!("listing the loopback link's addresses: {e}"))
}

/// `address` on the loopback link: `Some(true)` when r8s put it there (its label; IPv6
/// addresses have none and count as r8s's), `Some(false)` when someone else did.
async fn our_address(
    handle: &rtnetlink::Handle,
    lo: u32,
    address: IpAddr,
    label: &str,
) -> Result<Option<bool>, String> {
    Ok(on_loopback(handle, lo, address).await?.map(|msg| {
        address.is_ipv6()
            || msg
                .attributes
                .iter()
                .any(|a| matches!(a, AddressAttribute::Label(l) if l == label))
    }))
}

pub async fn remove_local(address: IpAddr) -> Result<(), String> {
    let (connection, handle, _) = rtnetlink::new_connection().map_err(|e| format!("netlink: {e}"))?;
    tokio::spawn(connection);
    let lo = loopback_index(&handle).await?;
    if let Some(msg) = on_loopback(&handle, lo, address).await? {
        handle
            .address()
            .del(msg)
            .execute()
            .await
            .map_err(|e| e.to_string())?;
    }
    Ok(())
}
