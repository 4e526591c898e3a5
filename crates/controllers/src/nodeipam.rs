//! Node IPAM (upstream `nodeipam` with the range allocator): each node gets a podCIDR — a
//! `/mask` subnet of `--cluster-cidr` — that no other node has; on a dual-stack cluster (two
//! cluster CIDRs, one per family) one of each, in `spec.podCIDRs` in the cluster CIDRs'
//! order. Allocations are rebuilt from the nodes' own spec.podCIDRs at start, so nothing else
//! is stored.

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch};
use kube::runtime::reflector::Store;
use kube::{Client, ResourceExt};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::SyncResult;
use r8s_client::informer::{lookup, Change, Factory, Informer};
use r8s_client::queue::{run_controller, WorkQueue};

/// A CIDR (IPv4 or IPv6) split into equal subnets.
#[derive(Clone, Debug, PartialEq)]
pub struct CidrSet {
    base: u128,
    v6: bool,
    prefix: u8,
    sub_prefix: u8,
}

impl CidrSet {
    pub fn new(cidr: &str, sub_prefix: u8) -> Result<Self, String> {
        let (addr, v6, prefix) = parse_cidr(cidr)?;
        let max = if v6 { 126 } else { 30 };
        if sub_prefix < prefix || sub_prefix > max {
            return Err(format!(
                "node CIDR mask size {sub_prefix} does not fit in cluster CIDR {cidr}"
            ));
        }
        // Upstream's cidrset: at most 2^16 node subnets.
        if sub_prefix - prefix > 16 {
            return Err(format!(
                "node CIDR mask size {sub_prefix} is too big for cluster CIDR {cidr}: at most 65536 node CIDRs"
            ));
        }
        Ok(Self {
            base: addr,
            v6,
            prefix,
            sub_prefix,
        })
    }

    fn bits(&self) -> u8 {
        if self.v6 {
            128
        } else {
            32
        }
    }

    pub fn is_ipv6(&self) -> bool {
        self.v6
    }

    pub fn len(&self) -> u32 {
        1u32 << (self.sub_prefix - self.prefix)
    }

    pub fn is_empty(&self) -> bool {
        false
    }

    pub fn subnet(&self, i: u32) -> String {
        let addr = self.base + ((i as u128) << (self.bits() - self.sub_prefix));
        let ip = if self.v6 {
            IpAddr::V6(Ipv6Addr::from(addr))
        } else {
            IpAddr::V4(Ipv4Addr::from(addr as u32))
        };
        format!("{ip}/{}", self.sub_prefix)
    }

    /// Index of a subnet of this set, if it is one.
    pub fn index_of(&self, cidr: &str) -> Option<u32> {
        let (addr, v6, prefix) = parse_cidr(cidr).ok()?;
        if prefix != self.sub_prefix || v6 != self.v6 {
            return None;
        }
        let offset = addr.checked_sub(self.base)?;
        let i = offset >> (self.bits() - self.sub_prefix);
        (i < self.len() as u128).then_some(i as u32)
    }
}

/// A CIDR's network address (as a number), whether it is IPv6, and its prefix length.
fn parse_cidr(cidr: &str) -> Result<(u128, bool, u8), String> {
    let bad = || format!("invalid CIDR address: {cidr}");
    let (ip, bits) = cidr.split_once('/').ok_or_else(bad)?;
    let ip: IpAddr = ip.parse().map_err(|_| bad())?;
    let prefix: u8 = bits.parse().map_err(|_| bad())?;
    let (n, width) = match ip {
        IpAddr::V4(a) => (u32::from(a) as u128, 32),
        IpAddr::V6(a) => (u128::from(a), 128),
    };
    if prefix > width {
        return Err(bad());
    }
    let host = width - prefix;
    let mask = if host == 128 { 0 } else { !((1u128 << host) - 1) };
    Ok((n & mask, ip.is_ipv6(), prefix))
}

/// The cluster CIDRs of `--cluster-cidr` (one, or one per family separated by a comma), each
/// split by the node mask of its family.
pub fn cidr_sets(cluster_cidr: &str, mask_v4: u8, mask_v6: u8) -> Result<Vec<CidrSet>, String> {
    let sets = cluster_cidr
        .split(',')
        .map(|c| {
            let c = c.trim();
            CidrSet::new(c, if c.contains(':') { mask_v6 } else { mask_v4 })
        })
        .collect::<Result<Vec<_>, _>>()?;
    match sets.as_slice() {
        [_] => Ok(sets),
        [a, b] if a.v6 != b.v6 => Ok(sets),
        _ => Err(format!(
            "--cluster-cidr {cluster_cidr:?}: one range, or two of different IP families"
        )),
    }
}

pub struct NodeIpamController {
    client: Client,
    informer: Arc<Informer<Node>>,
    store: Store<Node>,
    queue: Arc<WorkQueue>,
    /// One per cluster CIDR, each with the indices of its subnets in use.
    sets: Vec<CidrSet>,
    used: Mutex<Vec<BTreeSet<u32>>>,
    /// The nodes (name → uid) given their CIDRs by this controller: until the informer shows
    /// the node's podCIDR, another event of the node must not allocate it a second range (the
    /// node's agent and overlay would each take a different one).
    assigned: Mutex<std::collections::HashMap<String, String>>,
}

impl NodeIpamController {
    pub fn new(factory: &Factory, cluster_cidr: &str, mask_v4: u8, mask_v6: u8) -> Result<Arc<Self>, String> {
        let sets = cidr_sets(cluster_cidr, mask_v4, mask_v6)?;
        let informer = factory.get::<Node>();
        let this = Arc::new(Self {
            client: factory.client(),
            store: informer.store(),
            informer,
            queue: WorkQueue::new("nodeipam"),
            used: Mutex::new(vec![BTreeSet::new(); sets.len()]),
            assigned: Mutex::default(),
            sets,
        });
        let weak = Arc::downgrade(&this);
        this.informer.add_handler(move |c| {
            let Some(this) = weak.upgrade() else { return };
            match c {
                Change::Added(n) | Change::Updated(_, n) => {
                    this.mark(n, true);
                    this.queue.add(n.name_any());
                }
                Change::Deleted(n) => {
                    this.assigned.lock().unwrap().remove(&n.name_any());
                    this.mark(n, false)
                }
            }
        });
        Ok(this)
    }

    fn mark(&self, node: &Node, used: bool) {
        let Some(spec) = node.spec.as_ref() else { return };
        let cidrs = spec.pod_cidrs.iter().flatten().chain(spec.pod_cidr.as_ref());
        let mut sets = self.used.lock().unwrap();
        for cidr in cidrs {
            for (set, in_use) in self.sets.iter().zip(sets.iter_mut()) {
                if let Some(i) = set.index_of(cidr) {
                    if used {
                        in_use.insert(i);
                    } else {
                        in_use.remove(&i);
                    }
                }
            }
        }
    }

    pub async fn run(self: Arc<Self>, stop: CancellationToken) {
        let this = self.clone();
        // One worker: allocation must not race with itself.
        run_controller(
            self.queue.clone(),
            vec![self.informer.clone().synced()],
            1,
            stop,
            move |key| {
                let this = this.clone();
                async move { this.sync(&key).await }
            },
        )
        .await;
    }

    async fn sync(&self, name: &str) -> SyncResult {
        let Some(node) = lookup(&self.store, name) else {
            return Ok(None);
        };
        if node.spec.as_ref().and_then(|s| s.pod_cidr.as_ref()).is_some() {
            return Ok(None);
        }
        let uid = node.metadata.uid.clone().unwrap_or_default();
        if self.assigned.lock().unwrap().get(name) == Some(&uid) {
            // Given its range already; the informer has not seen the write yet.
            return Ok(None);
        }
        // One subnet of each cluster CIDR, all or none.
        let indices = {
            let mut used = self.used.lock().unwrap();
            let mut picked = Vec::new();
            for (set, in_use) in self.sets.iter().zip(used.iter()) {
                match (0..set.len()).find(|i| !in_use.contains(i)) {
                    Some(i) => picked.push(i),
                    None => return Err(crate::Error::Other(format!("no remaining CIDRs for node {name}"))),
                }
            }
            for (in_use, i) in used.iter_mut().zip(&picked) {
                in_use.insert(*i);
            }
            picked
        };
        let cidrs: Vec<String> = self
            .sets
            .iter()
            .zip(&indices)
            .map(|(s, i)| s.subnet(*i))
            .collect();
        let cidr = cidrs[0].clone();
        let api: Api<Node> = Api::all(self.client.clone());
        let patch = json!({"spec": {"podCIDR": cidr, "podCIDRs": cidrs}});
        match api
            .patch(name, &crate::patch_params(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => {
                self.assigned.lock().unwrap().insert(name.to_owned(), uid);
                tracing::info!(node = name, cidrs = %cidrs.join(","), "allocated pod CIDRs");
                Ok(None)
            }
            Err(e) => {
                for (in_use, i) in self.used.lock().unwrap().iter_mut().zip(&indices) {
                    in_use.remove(i);
                }
                if r8s_client::is_not_found(&e) {
                    Ok(None)
                } else {
                    Err(e.into())
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_cluster_cidr_into_node_subnets() {
        let s = CidrSet::new("10.42.0.0/16", 24).unwrap();
        assert_eq!(s.len(), 256);
        assert_eq!(s.subnet(0), "10.42.0.0/24");
        assert_eq!(s.subnet(255), "10.42.255.0/24");
        assert_eq!(s.index_of("10.42.7.0/24"), Some(7));
        assert_eq!(s.index_of("10.43.0.0/24"), None);
        assert_eq!(s.index_of("10.42.7.0/25"), None);
        assert!(CidrSet::new("10.42.0.0/16", 8).is_err());
        assert!(CidrSet::new("10.42.0.0/33", 24).is_err());
        let v6 = CidrSet::new("fd42:0:0:100::/56", 64).unwrap();
        assert_eq!(v6.len(), 256);
        assert_eq!(v6.subnet(0), "fd42:0:0:100::/64");
        assert_eq!(v6.subnet(5), "fd42:0:0:105::/64");
        assert_eq!(v6.index_of("fd42:0:0:105::/64"), Some(5));
        assert_eq!(v6.index_of("10.42.5.0/24"), None);
        assert!(CidrSet::new("fd42::/32", 64).is_err(), "2^32 node subnets");
        let sets = cidr_sets("10.42.0.0/16, fd42::/56", 24, 64).unwrap();
        assert_eq!((sets[0].is_ipv6(), sets[1].is_ipv6()), (false, true));
        assert!(cidr_sets("10.42.0.0/16,10.43.0.0/16", 24, 64).is_err());
    }
}
