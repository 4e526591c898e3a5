//! The ServiceAccount controller (upstream `serviceaccounts-controller`): every active namespace
//! has a `default` ServiceAccount, recreated if deleted.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::Api;
use kube::runtime::reflector::Store;
use kube::{Client, ResourceExt};
use tokio_util::sync::CancellationToken;

use crate::SyncResult;
use r8s_client::informer::{lookup, Change, Factory, Informer};
use r8s_client::queue::{run_controller, WorkQueue};

pub const DEFAULT: &str = "default";

pub struct ServiceAccountController {
    client: Client,
    ns_informer: Arc<Informer<Namespace>>,
    sa_informer: Arc<Informer<ServiceAccount>>,
    ns_store: Store<Namespace>,
    sa_store: Store<ServiceAccount>,
    queue: Arc<WorkQueue>,
}

impl ServiceAccountController {
    pub fn new(factory: &Factory) -> Arc<Self> {
        let ns_informer = factory.get::<Namespace>();
        let sa_informer = factory.get::<ServiceAccount>();
        let this = Arc::new(Self {
            client: factory.client(),
            ns_store: ns_informer.store(),
            sa_store: sa_informer.store(),
            ns_informer,
            sa_informer,
            queue: WorkQueue::new("serviceaccount"),
        });
        let q = this.queue.clone();
        this.ns_informer.add_handler(move |c| match c {
            Change::Added(n) | Change::Updated(_, n) => q.add(n.name_any()),
            Change::Deleted(_) => {}
        });
        let q = this.queue.clone();
        this.sa_informer.add_handler(move |c| {
            if let Change::Deleted(sa) = c {
                if sa.name_any() == DEFAULT {
                    q.add(sa.namespace().unwrap_or_default());
                }
            }
        });
        this
    }

    pub async fn run(self: Arc<Self>, stop: CancellationToken) {
        let (a, b) = (self.ns_informer.clone(), self.sa_informer.clone());
        let this = self.clone();
        run_controller(
            self.queue.clone(),
            vec![
                Box::pin(async move { a.wait_synced().await }),
                Box::pin(async move { b.wait_synced().await }),
            ],
            1,
            stop,
            move |key| {
                let this = this.clone();
                async move { this.sync(&key).await }
            },
        )
        .await;
    }

    async fn sync(&self, ns: &str) -> SyncResult {
        let Some(namespace) = lookup(&self.ns_store, ns) else {
            return Ok(None);
        };
        if namespace.metadata.deletion_timestamp.is_some() {
            return Ok(None);
        }
        if lookup(&self.sa_store, &format!("{ns}/{DEFAULT}")).is_some() {
            return Ok(None);
        }
        let sa = ServiceAccount {
            metadata: ObjectMeta {
                name: Some(DEFAULT.into()),
                namespace: Some(ns.into()),
                ..Default::default()
            },
            ..Default::default()
        };
        let api: Api<ServiceAccount> = Api::namespaced(self.client.clone(), ns);
        match api.create(&crate::post_params(), &sa).await {
            Ok(_) => Ok(None),
            // Exists (the cache lagged) or the namespace is terminating: nothing to do.
            Err(kube::Error::Api(s)) if s.code == 409 || s.code == 403 => Ok(None),
            Err(e) => Err(e.into()),
        }
    }
}
