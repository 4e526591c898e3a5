//! Running cluster DNS on a node: the cluster DNS address made local (as upstream's NodeLocal
//! DNSCache binds the kube-dns address on the node, so pods reach it through their default
//! route without a Service proxy), Services and EndpointSlices followed by informers into the
//! zone, and the server on port 53 until stopped; then the address goes, if this agent put it
//! there.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use r8s_client::informer::{Change, Factory};
use tokio_util::sync::CancellationToken;

use super::{forward, serve, ClusterZone, DnsServer, Forwarder};

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
    let made_local = make_local(opts.address).await?;
    let factory = Factory::new(client, None);
    let services = factory.get::<Service>();
    let slices = factory.get::<EndpointSlice>();
    feed(
        &services,
        &zone,
        ClusterZone::set_service,
        ClusterZone::remove_service,
    );
    feed(&slices, &zone, ClusterZone::set_slice, ClusterZone::remove_slice);
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
    if made_local {
        if let Err(e) = remove_local(opts.address).await {
            tracing::warn!(address = %opts.address, error = %e, "dns: could not remove its address");
        }
    }
    served
        .map(|_| ())
        .map_err(|e| format!("listening on {}:{}: {e}", opts.address, opts.port))
}

/// Keep `zone` following an informer's objects: `set` on add and update, `remove` (by
/// namespace and name) on delete.
fn feed<K: r8s_client::informer::Object>(
    informer: &r8s_client::informer::Informer<K>,
    zone: &Arc<ClusterZone>,
    set: fn(&ClusterZone, &K),
    remove: fn(&ClusterZone, &str, &str),
) where
    kube::runtime::reflector::ObjectRef<K>: std::hash::Hash + Eq,
{
    let zone = zone.clone();
    informer.add_handler(move |change| match change {
        Change::Added(o) | Change::Updated(_, o) => set(&zone, o),
        Change::Deleted(o) => {
            let m = o.meta();
            remove(
                &zone,
                m.namespace.as_deref().unwrap_or(""),
                m.name.as_deref().unwrap_or(""),
            );
        }
    });
}

/// The label r8s gives the cluster DNS address on the loopback link (IPv4), so a later run
/// knows the address as its own.
pub const LABEL: &str = "lo:r8s-dns";

async fn make_local(address: IpAddr) -> Result<bool, String> {
    crate::local::make_local(address, LABEL).await
}

async fn remove_local(address: IpAddr) -> Result<(), String> {
    crate::local::remove_local(address).await
}
