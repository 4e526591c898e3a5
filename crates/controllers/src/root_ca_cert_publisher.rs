//! The root CA certificate publisher (upstream `root-ca-cert-publisher`): every namespace has a
//! `kube-root-ca.crt` ConfigMap whose `ca.crt` is the CA bundle that verifies the API server,
//! put back as it was if someone changes or deletes it. Pods read it through the projected
//! volume the ServiceAccount admission plugin gives them.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::Api;
use kube::runtime::reflector::Store;
use kube::{Client, ResourceExt};
use tokio_util::sync::CancellationToken;

use crate::SyncResult;
use r8s_client::informer::{lookup, Change, Factory, Informer};
use r8s_client::queue::{run_controller, WorkQueue};

pub const CONFIGMAP: &str = "kube-root-ca.crt";
pub const KEY: &str = "ca.crt";
pub const DESCRIPTION_ANNOTATION: &str = "kubernetes.io/description";
pub const DESCRIPTION: &str = "Contains a CA bundle that can be used to verify the kube-apiserver when using internal endpoints such as the internal service IP or kubernetes.default.svc. No other usage is guaranteed across distributions of Kubernetes clusters.";

pub struct RootCaCertPublisher {
    client: Client,
    root_ca: String,
    ns_informer: Arc<Informer<Namespace>>,
    cm_informer: Arc<Informer<ConfigMap>>,
    cm_store: Store<ConfigMap>,
    queue: Arc<WorkQueue>,
}

/// Whether a failed create says the namespace is gone or going (nothing to retry).
fn namespace_gone(e: &kube::Error) -> bool {
    match e {
        kube::Error::Api(s) => {
            s.code == 404
                || s.details
                    .as_ref()
                    .is_some_and(|d| d.causes.iter().any(|c| c.reason == "NamespaceTerminating"))
        }
        _ => false,
    }
}

impl RootCaCertPublisher {
    pub fn new(factory: &Factory, root_ca: String) -> Arc<Self> {
        let ns_informer = factory.get::<Namespace>();
        let cm_informer = factory.get::<ConfigMap>();
        let this = Arc::new(Self {
            client: factory.client(),
            root_ca,
            cm_store: cm_informer.store(),
            ns_informer,
            cm_informer,
            queue: WorkQueue::new("root_ca_cert_publisher"),
        });
        let q = this.queue.clone();
        this.ns_informer.add_handler(move |c| match c {
            Change::Added(n) => q.add(n.name_any()),
            Change::Updated(_, n) if n.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Active") => {
                q.add(n.name_any())
            }
            _ => {}
        });
        let q = this.queue.clone();
        this.cm_informer.add_handler(move |c| match c {
            Change::Updated(_, cm) | Change::Deleted(cm) if cm.name_any() == CONFIGMAP => {
                q.add(cm.namespace().unwrap_or_default())
            }
            _ => {}
        });
        this
    }

    pub async fn run(self: Arc<Self>, workers: usize, stop: CancellationToken) {
        let (a, b) = (self.ns_informer.clone(), self.cm_informer.clone());
        let this = self.clone();
        run_controller(
            self.queue.clone(),
            vec![
                Box::pin(async move { a.wait_synced().await }),
                Box::pin(async move { b.wait_synced().await }),
            ],
            workers,
            stop,
            move |key| {
                let this = this.clone();
                async move { this.sync(&key).await }
            },
        )
        .await;
    }

    fn data(&self) -> BTreeMap<String, String> {
        BTreeMap::from([(KEY.to_owned(), self.root_ca.clone())])
    }

    async fn sync(&self, ns: &str) -> SyncResult {
        if ns.is_empty() {
            return Ok(None);
        }
        let api: Api<ConfigMap> = Api::namespaced(self.client.clone(), ns);
        let Some(cm) = lookup(&self.cm_store, &format!("{ns}/{CONFIGMAP}")) else {
            let cm = ConfigMap {
                metadata: ObjectMeta {
                    name: Some(CONFIGMAP.into()),
                    annotations: Some(BTreeMap::from([(
                        DESCRIPTION_ANNOTATION.to_owned(),
                        DESCRIPTION.to_owned(),
                    )])),
                    ..Default::default()
                },
                data: Some(self.data()),
                ..Default::default()
            };
            return match api.create(&crate::post_params(), &cm).await {
                Ok(_) => Ok(None),
                // Created meanwhile: the cache will tell.
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(None),
                Err(e) if namespace_gone(&e) => Ok(None),
                Err(e) => Err(e.into()),
            };
        };
        let described = cm
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(DESCRIPTION_ANNOTATION))
            .is_some_and(|d| !d.is_empty());
        if cm.data.as_ref() == Some(&self.data()) && described {
            return Ok(None);
        }
        let mut cm = (*cm).clone();
        cm.data = Some(self.data());
        cm.metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert(DESCRIPTION_ANNOTATION.into(), DESCRIPTION.into());
        match api.replace(CONFIGMAP, &crate::post_params(), &cm).await {
            Ok(_) => Ok(None),
            Err(e) if r8s_client::is_not_found(&e) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }
}
