//! The storage protection controllers (upstream's `pvc-protection-controller` and
//! `pv-protection-controller`): a deleted PersistentVolumeClaim keeps its
//! `kubernetes.io/pvc-protection` finalizer while a scheduled pod that is not finished uses it, and a
//! deleted PersistentVolume keeps `kubernetes.io/pv-protection` while it is Bound; then the
//! finalizer goes and the object with it.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use kube::api::Api;
use kube::runtime::reflector::Store;
use kube::{Client, ResourceExt};
use r8s_client::informer::{lookup, Change, Factory, Informer};
use r8s_client::queue::{run_controller, WorkQueue};
use tokio_util::sync::CancellationToken;

use crate::SyncResult;

pub const PVC_PROTECTION: &str = "kubernetes.io/pvc-protection";
pub const PV_PROTECTION: &str = "kubernetes.io/pv-protection";

fn being_deleted_with(
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    finalizer: &str,
) -> bool {
    meta.deletion_timestamp.is_some() && meta.finalizers.iter().flatten().any(|f| f == finalizer)
}

/// Write `obj` back without `finalizer` (an update, as the protection controllers' roles
/// allow); gone meanwhile is done.
async fn drop_finalizer<K>(api: &Api<K>, obj: &K, finalizer: &str) -> SyncResult
where
    K: kube::Resource + Clone + serde::Serialize + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let mut obj = obj.clone();
    let meta = obj.meta_mut();
    meta.finalizers = meta
        .finalizers
        .take()
        .map(|f| f.into_iter().filter(|f| f != finalizer).collect());
    match api.replace(&obj.name_any(), &crate::post_params(), &obj).await {
        Ok(_) => Ok(None),
        Err(e) if r8s_client::is_not_found(&e) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// The claims `pod` uses: its `persistentVolumeClaim` volumes and the claims of its
/// `ephemeral` volumes (named `<pod>-<volume>`).
pub fn claims_of(pod: &Pod) -> Vec<String> {
    let name = pod.name_any();
    pod.spec
        .as_ref()
        .and_then(|s| s.volumes.as_ref())
        .into_iter()
        .flatten()
        .filter_map(|v| match (&v.persistent_volume_claim, &v.ephemeral) {
            (Some(c), _) => Some(c.claim_name.clone()),
            (None, Some(_)) => Some(format!("{name}-{}", v.name)),
            _ => None,
        })
        .collect()
}

pub struct PvcProtectionController {
    client: Client,
    pvcs: Arc<Informer<PersistentVolumeClaim>>,
    pods: Arc<Informer<Pod>>,
    pvc_store: Store<PersistentVolumeClaim>,
    pod_store: Store<Pod>,
    queue: Arc<WorkQueue>,
}

impl PvcProtectionController {
    pub fn new(factory: &Factory) -> Arc<Self> {
        let pvcs = factory.get::<PersistentVolumeClaim>();
        let pods = factory.get::<Pod>();
        let this = Arc::new(Self {
            client: factory.client(),
            pvc_store: pvcs.store(),
            pod_store: pods.store(),
            pvcs,
            pods,
            queue: WorkQueue::new("pvcprotection"),
        });
        let q = this.queue.clone();
        this.pvcs.add_handler(move |c| match c {
            Change::Added(pvc) | Change::Updated(_, pvc) => {
                if being_deleted_with(&pvc.metadata, PVC_PROTECTION) {
                    q.add(format!(
                        "{}/{}",
                        pvc.namespace().unwrap_or_default(),
                        pvc.name_any()
                    ));
                }
            }
            Change::Deleted(_) => {}
        });
        // A pod that goes (or finishes) may free its claims.
        let q = this.queue.clone();
        this.pods.add_handler(move |c| {
            let pod = match c {
                Change::Deleted(p) => p,
                Change::Updated(_, p) if r8s_api::pod::is_terminal(p) => p,
                _ => return,
            };
            let ns = pod.namespace().unwrap_or_default();
            for claim in claims_of(pod) {
                q.add(format!("{ns}/{claim}"));
            }
        });
        this
    }

    pub async fn run(self: Arc<Self>, workers: usize, stop: CancellationToken) {
        let (a, b) = (self.pvcs.clone(), self.pods.clone());
        let this = self.clone();
        run_controller(
            self.queue.clone(),
            vec![a.synced(), b.synced()],
            workers,
            stop,
            move |key| {
                let this = this.clone();
                async move { this.sync(&key).await }
            },
        )
        .await;
    }

    async fn sync(&self, key: &str) -> SyncResult {
        let Some(pvc) = lookup(&self.pvc_store, key) else {
            return Ok(None);
        };
        if !being_deleted_with(&pvc.metadata, PVC_PROTECTION) {
            return Ok(None);
        }
        let ns = pvc.namespace().unwrap_or_default();
        let name = pvc.name_any();
        // Only a scheduled pod counts (upstream's `podUsesPVC`): the kubelet sees a pod once it
        // is scheduled, and does not start one whose claim is being deleted.
        let in_use = self.pod_store.state().iter().any(|p| {
            p.namespace().as_deref() == Some(ns.as_str())
                && p.spec
                    .as_ref()
                    .and_then(|s| s.node_name.as_deref())
                    .is_some_and(|n| !n.is_empty())
                && !r8s_api::pod::is_terminal(p)
                && claims_of(p).contains(&name)
        });
        if in_use {
            return Ok(None);
        }
        let api: Api<PersistentVolumeClaim> = Api::namespaced(self.client.clone(), &ns);
        drop_finalizer(&api, &pvc, PVC_PROTECTION).await
    }
}

pub struct PvProtectionController {
    client: Client,
    pvs: Arc<Informer<PersistentVolume>>,
    pv_store: Store<PersistentVolume>,
    queue: Arc<WorkQueue>,
}

impl PvProtectionController {
    pub fn new(factory: &Factory) -> Arc<Self> {
        let pvs = factory.get::<PersistentVolume>();
        let this = Arc::new(Self {
            client: factory.client(),
            pv_store: pvs.store(),
            pvs,
            queue: WorkQueue::new("pvprotection"),
        });
        let q = this.queue.clone();
        this.pvs.add_handler(move |c| match c {
            Change::Added(pv) | Change::Updated(_, pv) => {
                if being_deleted_with(&pv.metadata, PV_PROTECTION) {
                    q.add(pv.name_any());
                }
            }
            Change::Deleted(_) => {}
        });
        this
    }

    pub async fn run(self: Arc<Self>, workers: usize, stop: CancellationToken) {
        let a = self.pvs.clone();
        let this = self.clone();
        run_controller(self.queue.clone(), vec![a.synced()], workers, stop, move |key| {
            let this = this.clone();
            async move { this.sync(&key).await }
        })
        .await;
    }

    async fn sync(&self, name: &str) -> SyncResult {
        let Some(pv) = lookup(&self.pv_store, name) else {
            return Ok(None);
        };
        if !being_deleted_with(&pv.metadata, PV_PROTECTION) {
            return Ok(None);
        }
        // Bound: a claim still uses it (upstream's `isBeingUsed`).
        if pv.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound") {
            return Ok(None);
        }
        let api: Api<PersistentVolume> = Api::all(self.client.clone());
        drop_finalizer(&api, &pv, PV_PROTECTION).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pods_use_their_claims_and_ephemeral_volumes_claims() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web"},
            "spec": {"containers": [], "volumes": [
                {"name": "a", "persistentVolumeClaim": {"claimName": "data"}},
                {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}},
                {"name": "tmp", "emptyDir": {}},
            ]},
        }))
        .unwrap();
        assert_eq!(claims_of(&pod), ["data", "web-scratch"]);
        assert!(!r8s_api::pod::is_terminal(&pod));
    }
}
