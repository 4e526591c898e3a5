//! Backends for the conformance suite: each test gets a fresh store and everything it made is
//! removed when the test ends (the temp dir, or the etcd processes and their data).
#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use r8s_store::embedded::{EmbeddedOptions, EmbeddedStore};
use r8s_store::etcd::{EtcdOptions, EtcdStore};
use r8s_store::etcd_process::EtcdCluster;
use r8s_store::Store;

pub struct Backend {
    // Declared first so the store closes before its files or processes go.
    pub store: Arc<dyn Store>,
    pub guard: Guard,
}

pub enum Guard {
    Dir(tempfile::TempDir),
    Etcd(EtcdCluster),
}

pub fn embedded() -> Backend {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = EmbeddedStore::open(EmbeddedOptions::new(dir.path())).expect("open embedded store");
    Backend {
        store: Arc::new(store),
        guard: Guard::Dir(dir),
    }
}

pub async fn etcd_cluster(size: usize) -> (EtcdCluster, EtcdStore) {
    let cluster = tokio::task::spawn_blocking(move || EtcdCluster::start(size))
        .await
        .unwrap()
        .expect("start etcd (CI installs Debian's etcd-server)");
    let mut opts = EtcdOptions::from_endpoint_list(&cluster.endpoints());
    opts.retry_for = Duration::from_secs(20);
    let store = EtcdStore::connect(opts).await.expect("connect to etcd");
    // Wait for a leader: the first linearizable read succeeds once one is elected.
    store.current_revision().await.expect("etcd answers");
    (cluster, store)
}

pub async fn etcd() -> Backend {
    let (cluster, store) = etcd_cluster(1).await;
    Backend {
        store: Arc::new(store),
        guard: Guard::Etcd(cluster),
    }
}
