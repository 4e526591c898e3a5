//! Running cluster DNS on a node: the cluster DNS address made local (on a dummy link of its
//! own, as upstream's NodeLocal DNSCache binds the kube-dns address on the node, so pods reach
//! it through their default route without a Service proxy), Services and EndpointSlices
//! followed by informers into the zone, and the server on port 53 until stopped; then the
//! link goes, if this agent made it.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;

use futures::TryStreamExt;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use r8s_client::informer::{Change, Factory};
use tokio_util::sync::CancellationToken;

use super::{forward, serve, ClusterZone, DnsServer, Forwarder};

/// The link that holds the cluster DNS address when no interface has it.
pub const LINK: &str = "r8s-dns";

pub struct DnsOptions {
    /// The cluster DNS address (`--cluster-dns`).
    pub address: IpAddr,
    pub port: u16,
    /// The cluster domain (`--cluster-domain`).
    pub domain: String,
    /// Where the node's own resolvers are named.
    pub resolv_conf: PathBuf,
    /// TTL of cluster records, in seconds.
    pub ttl: u32,
}

impl DnsOptions {
    pub fn new(address: IpAddr, domain: &str) -> Self {
        Self {
            address,
            port: 53,
            domain: domain.to_owned(),
            resolv_conf: PathBuf::from("/etc/resolv.conf"),
            // CoreDNS's `kubernetes` plugin default.
            ttl: 5,
        }
    }
}

/// Serve cluster DNS until `stop`. Errors are why it could not start.
pub async fn run(client: kube::Client, opts: DnsOptions, stop: CancellationToken) -> Result<(), String> {
    let zone = Arc::new(ClusterZone::new(&opts.domain, opts.ttl)?);
    let resolv = std::fs::read_to_string(&opts.resolv_conf).unwrap_or_default();
    let upstreams = forward::nameservers(&resolv, Some(opts.address));
    if upstreams.is_empty() {
        tracing::warn!(resolv_conf = %opts.resolv_conf.display(), "dns: no upstream nameservers; only cluster names will resolve");
    }
    let made_link = make_local(opts.address).await?;
    let factory = Factory::new(client, None);
    let services = factory.get::<Service>();
    let slices = factory.get::<EndpointSlice>();
    {
        let zone = zone.clone();
        services.add_handler(move |change| match change {
            Change::Added(s) | Change::Updated(_, s) => zone.set_service(s),
            Change::Deleted(s) => {
                let m = &s.metadata;
                zone.remove_service(
                    m.namespace.as_deref().unwrap_or(""),
                    m.name.as_deref().unwrap_or(""),
                );
            }
        });
    }
    {
        let zone = zone.clone();
        slices.add_handler(move |change| match change {
            Change::Added(s) | Change::Updated(_, s) => zone.set_slice(s),
            Change::Deleted(s) => {
                let m = &s.metadata;
                zone.remove_slice(
                    m.namespace.as_deref().unwrap_or(""),
                    m.name.as_deref().unwrap_or(""),
                );
            }
        });
    }
    let tasks = factory.start(&stop);
    // Serve once the first lists are in (briefly: a name missing now would be NXDOMAIN), as
    // CoreDNS waits for its informers.
    let synced = async {
        services.wait_synced().await;
        slices.wait_synced().await;
    };
    if tokio::time::timeout(std::time::Duration::from_secs(5), synced)
        .await
        .is_err()
    {
        tracing::warn!("dns: serving before Services and EndpointSlices are listed");
    }
    let server = DnsServer::new(zone, Forwarder::new(upstreams));
    let served = serve(server, SocketAddr::new(opts.address, opts.port), stop.clone()).await;
    match &served {
        Ok((addr, _)) => tracing::info!(%addr, domain = %opts.domain, "dns: serving the cluster zone"),
        Err(e) => tracing::error!(address = %opts.address, error = %e, "dns: cannot listen"),
    }
    if served.is_ok() {
        stop.cancelled().await;
    }
    for t in tasks {
        t.abort();
    }
    if made_link {
        if let Err(e) = remove_link().await {
            tracing::warn!(link = LINK, error = %e, "dns: could not remove its link");
        }
    }
    served
        .map(|_| ())
        .map_err(|e| format!("listening on {}:{}: {e}", opts.address, opts.port))
}

/// Make `address` local to the node: its own dummy link (found again if an earlier run left
/// it), or nothing when another interface already has the address (a socket can bind it).
/// Returns whether the link is ours to remove.
async fn make_local(address: IpAddr) -> Result<bool, String> {
    let (connection, handle, _) = rtnetlink::new_connection().map_err(|e| format!("netlink: {e}"))?;
    tokio::spawn(connection);
    let existing = handle
        .link()
        .get()
        .match_name(LINK.to_owned())
        .execute()
        .try_next()
        .await;
    let index = match existing {
        Ok(Some(link)) => link.header.index,
        _ if std::net::UdpSocket::bind(SocketAddr::new(address, 0)).is_ok() => return Ok(false),
        _ => {
            handle
                .link()
                .add(rtnetlink::LinkDummy::new(LINK).build())
                .execute()
                .await
                .map_err(|e| format!("creating link {LINK}: {e}"))?;
            handle
                .link()
                .get()
                .match_name(LINK.to_owned())
                .execute()
                .try_next()
                .await
                .map_err(|e| format!("finding link {LINK}: {e}"))?
                .ok_or_else(|| format!("link {LINK} vanished"))?
                .header
                .index
        }
    };
    let prefix = if address.is_ipv4() { 32 } else { 128 };
    handle
        .address()
        .add(index, address, prefix)
        .replace()
        .execute()
        .await
        .map_err(|e| format!("adding {address} to {LINK}: {e}"))?;
    handle
        .link()
        .set(rtnetlink::LinkUnspec::new_with_index(index).up().build())
        .execute()
        .await
        .map_err(|e| format!("setting {LINK} up: {e}"))?;
    Ok(true)
}

async fn remove_link() -> Result<(), String> {
    let (connection, handle, _) = rtnetlink::new_connection().map_err(|e| format!("netlink: {e}"))?;
    tokio::spawn(connection);
    let link = handle
        .link()
        .get()
        .match_name(LINK.to_owned())
        .execute()
        .try_next()
        .await
        .map_err(|e| e.to_string())?;
    if let Some(link) = link {
        handle
            .link()
            .del(link.header.index)
            .execute()
            .await
            .map_err(|e| e.to_string())?;
    }
    Ok(())
}
