//! The ephemeral volume controller (upstream's `ephemeral-volume-controller`): for each
//! `ephemeral` volume of a pod, the PersistentVolumeClaim its `volumeClaimTemplate` describes,
//! named `<pod>-<volume>` and owned by the pod (so it goes with the pod). A claim of that name
//! the pod does not own is left alone; the pod cannot use it, and an event says so.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::Api;
use kube::runtime::reflector::Store;
use kube::{Client, ResourceExt};
use r8s_client::events::Events;
use r8s_client::informer::{lookup, Change, Factory, Informer};
use r8s_client::queue::{run_controller, WorkQueue};
use tokio_util::sync::CancellationToken;

use crate::SyncResult;

pub struct EphemeralVolumeController {
    client: Client,
    events: Events,
    pods: Arc<Informer<Pod>>,
    pvcs: Arc<Informer<PersistentVolumeClaim>>,
    pod_store: Store<Pod>,
    pvc_store: Store<PersistentVolumeClaim>,
    queue: Arc<WorkQueue>,
}

fn has_ephemeral(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.volumes.as_ref())
        .is_some_and(|v| v.iter().any(|v| v.ephemeral.is_some()))
}

/// The claim of `pod`'s ephemeral volume `volume`.
pub fn claim_name(pod: &str, volume: &str) -> String {
    format!("{pod}-{volume}")
}

impl EphemeralVolumeController {
    pub fn new(factory: &Factory, events: Events) -> Arc<Self> {
        let pods = factory.get::<Pod>();
        let pvcs = factory.get::<PersistentVolumeClaim>();
        let this = Arc::new(Self {
            client: factory.client(),
            events,
            pod_store: pods.store(),
            pvc_store: pvcs.store(),
            pods,
            pvcs,
            queue: WorkQueue::new("ephemeral_volume"),
        });
        let q = this.queue.clone();
        this.pods.add_handler(move |c| match c {
            Change::Added(p) | Change::Updated(_, p)
                if has_ephemeral(p) && p.metadata.deletion_timestamp.is_none() =>
            {
                q.add(format!("{}/{}", p.namespace().unwrap_or_default(), p.name_any()))
            }
            _ => {}
        });
        // A claim deleted under a running pod is made again (the pod's owner reference says
        // whose it was).
        let q = this.queue.clone();
        this.pvcs.add_handler(move |c| {
            if let Change::Deleted(pvc) = c {
                for o in pvc.metadata.owner_references.iter().flatten() {
                    if o.kind == "Pod" && o.controller == Some(true) {
                        q.add(format!("{}/{}", pvc.namespace().unwrap_or_default(), o.name));
                    }
                }
            }
        });
        this
    }

    pub async fn run(self: Arc<Self>, workers: usize, stop: CancellationToken) {
        let (a, b) = (self.pods.clone(), self.pvcs.clone());
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
        let Some(pod) = lookup(&self.pod_store, key) else {
            return Ok(None);
        };
        if pod.metadata.deletion_timestamp.is_some() {
            return Ok(None);
        }
        let ns = pod.namespace().unwrap_or_default();
        let api: Api<PersistentVolumeClaim> = Api::namespaced(self.client.clone(), &ns);
        for v in pod
            .spec
            .as_ref()
            .and_then(|s| s.volumes.as_ref())
            .into_iter()
            .flatten()
        {
            let Some(template) = v
                .ephemeral
                .as_ref()
                .and_then(|e| e.volume_claim_template.as_ref())
            else {
                continue;
            };
            let name = claim_name(&pod.name_any(), &v.name);
            if let Some(existing) = lookup(&self.pvc_store, &format!("{ns}/{name}")) {
                let owned = existing
                    .metadata
                    .owner_references
                    .iter()
                    .flatten()
                    .any(|o| Some(&o.uid) == pod.metadata.uid.as_ref());
                if !owned {
                    self.events.warning(
                        &*pod,
                        "FailedBinding",
                        format!(
                            "PVC {ns}/{name} was not created for pod {ns}/{} (pod is not owner)",
                            pod.name_any()
                        ),
                    );
                }
                continue;
            }
            let meta = template.metadata.clone().unwrap_or_default();
            let claim = PersistentVolumeClaim {
                metadata: ObjectMeta {
                    name: Some(name.clone()),
                    labels: meta.labels,
                    annotations: meta.annotations,
                    owner_references: Some(vec![OwnerReference {
                        api_version: "v1".into(),
                        kind: "Pod".into(),
                        name: pod.name_any(),
                        uid: pod.metadata.uid.clone().unwrap_or_default(),
                        controller: Some(true),
                        block_owner_deletion: Some(true),
                    }]),
                    ..Default::default()
                },
                spec: Some(template.spec.clone()),
                status: None,
            };
            match api.create(&crate::post_params(), &claim).await {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 409 => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ephemeral_claims_are_named_after_their_pod_and_volume() {
        assert_eq!(claim_name("web-0", "scratch"), "web-0-scratch");
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p"},
            "spec": {"containers": [], "volumes": [{"name": "s", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}}]},
        }))
        .unwrap();
        assert!(has_ephemeral(&pod));
    }
}
