//! The TTL controller (upstream `pkg/controller/ttl`): every Node carries the annotation
//! `node.alpha.kubernetes.io/ttl`, how many seconds its kubelet may serve the configMaps and
//! secrets its pods use from its own cache before reading them again. The more nodes, the
//! longer: 0 s up to 100 nodes, 15 s up to 500, 30 s up to 1,000, 60 s up to 2,000, 300 s
//! beyond, with upstream's overlapping boundaries so that a cluster at a boundary does not
//! flap. Without it every kubelet of a large cluster reads the same objects every few seconds.

use std::collections::BTreeMap;
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

pub const ANNOTATION: &str = "node.alpha.kubernetes.io/ttl";

/// Upstream's `ttlBoundaries`: (fewest nodes, most nodes, TTL seconds). Neighbours overlap:
/// a cluster steps up past a boundary's most and back down below the next one's fewest.
const BOUNDARIES: [(usize, usize, u64); 5] = [
    (0, 100, 0),
    (90, 500, 15),
    (450, 1000, 30),
    (900, 2000, 60),
    (1800, usize::MAX, 300),
];

/// The boundary a cluster of `nodes` is at, coming from boundary `current`.
pub fn step(current: usize, nodes: usize) -> usize {
    let mut i = current.min(BOUNDARIES.len() - 1);
    while nodes > BOUNDARIES[i].1 && i + 1 < BOUNDARIES.len() {
        i += 1;
    }
    while nodes < BOUNDARIES[i].0 && i > 0 {
        i -= 1;
    }
    i
}

/// The TTL of boundary `i`, in seconds.
pub fn ttl_seconds(i: usize) -> u64 {
    BOUNDARIES[i.min(BOUNDARIES.len() - 1)].2
}

pub struct TtlController {
    client: Client,
    nodes: Arc<Informer<Node>>,
    store: Store<Node>,
    queue: Arc<WorkQueue>,
    /// The boundary the cluster is at.
    boundary: Mutex<usize>,
}

impl TtlController {
    pub fn new(factory: &Factory) -> Arc<Self> {
        let nodes = factory.get::<Node>();
        let this = Arc::new(Self {
            client: factory.client(),
            store: nodes.store(),
            nodes,
            queue: WorkQueue::new("ttl"),
            boundary: Mutex::new(0),
        });
        let weak = Arc::downgrade(&this);
        this.nodes.add_handler(move |c| {
            let Some(this) = weak.upgrade() else { return };
            match c {
                Change::Added(n) => this.resize(Some(n.name_any())),
                Change::Updated(_, n) => this.queue.add(n.name_any()),
                Change::Deleted(_) => this.resize(None),
            }
        });
        this
    }

    /// The node count changed: when the boundary moves, every node is annotated again;
    /// otherwise only `added` (a new node).
    fn resize(&self, added: Option<String>) {
        let count = self.store.state().len();
        let moved = {
            let mut b = self.boundary.lock().unwrap();
            let next = step(*b, count);
            let moved = next != *b;
            *b = next;
            moved
        };
        if moved {
            for n in self.store.state() {
                self.queue.add(n.name_any());
            }
        } else if let Some(name) = added {
            self.queue.add(name);
        }
    }

    pub async fn run(self: Arc<Self>, stop: CancellationToken) {
        let nodes = self.nodes.clone();
        let this = self.clone();
        run_controller(
            self.queue.clone(),
            vec![Box::pin(async move { nodes.wait_synced().await })],
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
        let want = ttl_seconds(*self.boundary.lock().unwrap()).to_string();
        let annotations: BTreeMap<String, String> = node.metadata.annotations.clone().unwrap_or_default();
        if annotations.get(ANNOTATION) == Some(&want) {
            return Ok(None);
        }
        let patch = json!({"metadata": {"annotations": {ANNOTATION: want}}});
        let api: Api<Node> = Api::all(self.client.clone());
        match api
            .patch(name, &crate::patch_params(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => Ok(None),
            Err(e) if r8s_client::is_not_found(&e) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ttl_grows_with_the_cluster_and_the_boundaries_overlap() {
        assert_eq!(ttl_seconds(step(0, 3)), 0);
        assert_eq!(ttl_seconds(step(0, 100)), 0);
        assert_eq!(ttl_seconds(step(0, 101)), 15);
        // Back down only below the next boundary's fewest (90), not at 100.
        assert_eq!(step(1, 95), 1);
        assert_eq!(step(1, 89), 0);
        assert_eq!(ttl_seconds(step(0, 1001)), 60);
        assert_eq!(ttl_seconds(step(0, 5000)), 300);
        assert_eq!(ttl_seconds(step(4, 1850)), 300);
        assert_eq!(ttl_seconds(step(4, 1799)), 60);
        assert_eq!(ttl_seconds(step(4, 0)), 0);
    }
}
