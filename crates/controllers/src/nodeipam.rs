//! Node IPAM (upstream `nodeipam` with the range allocator): each node gets a podCIDR — a
//! `/mask` subnet of `--cluster-cidr` — that no other node has. Allocations are rebuilt from the
//! nodes' own spec.podCIDR at start, so nothing else is stored.

use std::collections::BTreeSet;
use std::net::Ipv4Addr;
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

/// An IPv4 CIDR split into equal subnets.
#[derive(Clone, Debug, PartialEq)]
pub struct CidrSet {
    base: u32,
    prefix: u8,
    sub_prefix: u8,
}

impl CidrSet {
    pub fn new(cidr: &str, sub_prefix: u8) -> Result<Self, String> {
        let (addr, prefix) = parse_cidr(cidr)?;
        if sub_prefix < prefix || sub_prefix > 30 {
            return Err(format!(
                "node CIDR mask size {sub_prefix} does not fit in cluster CIDR {cidr}"
            ));
        }
        Ok(Self {
            base: addr,
            prefix,
            sub_prefix,
        })
    }

    pub fn len(&self) -> u32 {
        1u32 << (self.sub_prefix - self.prefix)
    }

    pub fn is_empty(&self) -> bool {
        false
    }

    pub fn subnet(&self, i: u32) -> String {
        let addr = self.base + (i << (32 - self.sub_prefix));
        format!("{}/{}", Ipv4Addr::from(addr), self.sub_prefix)
    }

    /// Index of a subnet of this set, if it is one.
    pub fn index_of(&self, cidr: &str) -> Option<u32> {
        let (addr, prefix) = parse_cidr(cidr).ok()?;
        if prefix != self.sub_prefix {
            return None;
        }
        let offset = addr.checked_sub(self.base)?;
        let i = offset >> (32 - self.sub_prefix);
        (i < self.len()).then_some(i)
    }
}

fn parse_cidr(cidr: &str) -> Result<(u32, u8), String> {
    let bad = || format!("invalid CIDR address: {cidr}");
    let (ip, bits) = cidr.split_once('/').ok_or_else(bad)?;
    let ip: Ipv4Addr = ip.parse().map_err(|_| bad())?;
    let bits: u8 = bits.parse().map_err(|_| bad())?;
    if bits > 32 {
        return Err(bad());
    }
    let mask = if bits == 0 { 0 } else { u32::MAX << (32 - bits) };
    Ok((u32::from(ip) & mask, bits))
}

pub struct NodeIpamController {
    client: Client,
    informer: Arc<Informer<Node>>,
    store: Store<Node>,
    queue: Arc<WorkQueue>,
    set: CidrSet,
    used: Mutex<BTreeSet<u32>>,
}

impl NodeIpamController {
    pub fn new(factory: &Factory, cluster_cidr: &str, mask: u8) -> Result<Arc<Self>, String> {
        let set = CidrSet::new(cluster_cidr, mask)?;
        let informer = factory.get::<Node>();
        let this = Arc::new(Self {
            client: factory.client(),
            store: informer.store(),
            informer,
            queue: WorkQueue::new("nodeipam"),
            set,
            used: Mutex::new(BTreeSet::new()),
        });
        let weak = Arc::downgrade(&this);
        this.informer.add_handler(move |c| {
            let Some(this) = weak.upgrade() else { return };
            match c {
                Change::Added(n) | Change::Updated(_, n) => {
                    this.mark(n, true);
                    this.queue.add(n.name_any());
                }
                Change::Deleted(n) => this.mark(n, false),
            }
        });
        Ok(this)
    }

    fn mark(&self, node: &Node, used: bool) {
        let Some(cidr) = node.spec.as_ref().and_then(|s| s.pod_cidr.as_deref()) else {
            return;
        };
        if let Some(i) = self.set.index_of(cidr) {
            let mut set = self.used.lock().unwrap();
            if used {
                set.insert(i);
            } else {
                set.remove(&i);
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
        let index = {
            let mut used = self.used.lock().unwrap();
            let free = (0..self.set.len()).find(|i| !used.contains(i));
            let Some(i) = free else {
                return Err(crate::Error::Other(format!("no remaining CIDRs for node {name}")));
            };
            used.insert(i);
            i
        };
        let cidr = self.set.subnet(index);
        let api: Api<Node> = Api::all(self.client.clone());
        let patch = json!({"spec": {"podCIDR": cidr, "podCIDRs": [cidr]}});
        match api
            .patch(name, &crate::patch_params(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => {
                tracing::info!(node = name, %cidr, "allocated pod CIDR");
                Ok(None)
            }
            Err(e) => {
                self.used.lock().unwrap().remove(&index);
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
    }
}
