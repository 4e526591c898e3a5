//! The namespace controller (upstream `pkg/controller/namespace`): a namespace being deleted
//! (Terminating, `kubernetes` in spec.finalizers) is emptied — every namespaced resource the
//! API server serves is deleted with deletecollection — and once nothing is left the
//! `kubernetes` finalizer is removed through the `finalize` subresource, after which the API
//! server removes the namespace.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams};
use kube::discovery::{verbs, ApiResource, Scope};
use kube::runtime::reflector::Store;
use kube::{Client, ResourceExt};
use tokio_util::sync::CancellationToken;

use crate::SyncResult;
use r8s_client::informer::{lookup, Change, Factory, Informer};
use r8s_client::queue::{run_controller, WorkQueue};

pub const FINALIZER: &str = "kubernetes";

pub struct NamespaceController {
    client: Client,
    informer: Arc<Informer<Namespace>>,
    store: Store<Namespace>,
    queue: Arc<WorkQueue>,
    discovery: Arc<r8s_client::discovery::DiscoveryCache>,
}

impl NamespaceController {
    pub fn new(factory: &Factory) -> Arc<Self> {
        let informer = factory.get::<Namespace>();
        let this = Arc::new(Self {
            client: factory.client(),
            store: informer.store(),
            informer,
            queue: WorkQueue::new("namespace"),
            discovery: factory.discovery(),
        });
        let q = this.queue.clone();
        this.informer.add_handler(move |c| match c {
            Change::Added(n) | Change::Updated(_, n) if n.metadata.deletion_timestamp.is_some() => {
                q.add(n.name_any())
            }
            _ => {}
        });
        this
    }

    pub async fn run(self: Arc<Self>, workers: usize, stop: CancellationToken) {
        let this = self.clone();
        run_controller(
            self.queue.clone(),
            vec![self.informer.clone().synced()],
            workers,
            stop,
            move |key| {
                let this = this.clone();
                async move { this.sync(&key).await }
            },
        )
        .await;
    }

    /// Namespaced resources that can be listed and deleted as a collection, from the shared
    /// discovery cache.
    async fn deletable_resources(&self) -> Result<Vec<ApiResource>, crate::Error> {
        Ok(self
            .discovery
            .select(|_, caps| {
                caps.scope == Scope::Namespaced
                    && caps.supports_operation(verbs::DELETE_COLLECTION)
                    && caps.supports_operation(verbs::LIST)
            })
            .await?)
    }

    async fn sync(&self, name: &str) -> SyncResult {
        let Some(ns) = lookup(&self.store, name) else {
            return Ok(None);
        };
        let finalizers = ns
            .spec
            .as_ref()
            .and_then(|s| s.finalizers.clone())
            .unwrap_or_default();
        if ns.metadata.deletion_timestamp.is_none() || !finalizers.iter().any(|f| f == FINALIZER) {
            return Ok(None);
        }
        let mut remaining = 0usize;
        for ar in self.deletable_resources().await?.iter() {
            let api: Api<DynamicObject> = Api::namespaced_with(self.client.clone(), name, ar);
            match api
                .delete_collection(&DeleteParams::background(), &ListParams::default())
                .await
            {
                Ok(_) => {}
                Err(e) if r8s_client::is_not_found(&e) => continue,
                Err(e) => return Err(e.into()),
            }
            remaining += api.list(&ListParams::default()).await.map(|l| l.items.len())?;
        }
        if remaining > 0 {
            // Objects with finalizers or grace periods are still going away.
            tracing::debug!(namespace = name, remaining, "namespace not yet empty");
            return Ok(Some(Duration::from_secs(1)));
        }
        let mut finalized = (*ns).clone();
        if let Some(spec) = finalized.spec.as_mut() {
            spec.finalizers = Some(finalizers.into_iter().filter(|f| f != FINALIZER).collect());
        }
        let api: Api<Namespace> = Api::all(self.client.clone());
        match api
            .replace_subresource("finalize", name, &crate::post_params(), &finalized)
            .await
        {
            Ok(_) => Ok(None),
            Err(e) if r8s_client::is_not_found(&e) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }
}
