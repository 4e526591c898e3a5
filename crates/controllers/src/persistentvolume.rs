//! The persistent volume controller (upstream's `persistentvolume-binder`): it binds each
//! PersistentVolumeClaim to a PersistentVolume that satisfies it and keeps both phases true.
//!
//! - A pending claim gets the smallest Available volume of its class whose capacity, access
//!   modes, volume mode and labels (the claim's selector) fit, or a volume pre-bound to it
//!   (`spec.claimRef`); the volume is bound first (`claimRef`, phase Bound), then the claim
//!   (`spec.volumeName`, `pv.kubernetes.io/bind-completed`, status Bound with the volume's
//!   capacity and access modes), as upstream orders the writes so a crash leaves a volume that
//!   the next sync completes.
//! - A claim whose class has a provisioner and no volume fits is left to the provisioner,
//!   marked with `volume.kubernetes.io/storage-provisioner`; with `WaitForFirstConsumer`, only
//!   once the scheduler has chosen its node (`volume.kubernetes.io/selected-node`).
//! - A volume whose claim is gone is Released, then, by its reclaim policy, kept (Retain) or
//!   deleted (Delete; the node agent removes the data of the local volumes it no longer has).
//! - r8s's local provisioner (`r8s.io/local-path`, the default `local-path` class) is run here,
//!   as upstream's binder ran the in-tree provisioners: a hostPath volume in the chosen node's
//!   local volume directory, required on that node.
//!   A volume without a claim is Available. A claim whose volume is gone is Lost.
//! - A local volume (reclaim policy Delete) whose node has been deleted for
//!   [`NODE_GONE_GRACE`] is given up: its claim is deleted (so a StatefulSet makes a new one,
//!   provisioned where its replica runs now), and then the volume, as the local static
//!   provisioner's node cleanup controller does upstream. Retained volumes stay, for the node
//!   to come back with their data.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{
    HostPathVolumeSource, Node, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm, ObjectReference,
    PersistentVolume, PersistentVolumeClaim, PersistentVolumeClaimStatus, PersistentVolumeSpec,
    PersistentVolumeStatus, VolumeNodeAffinity,
};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::Api;
use kube::runtime::reflector::Store;
use kube::{Client, ResourceExt};
use r8s_api::quantity::Quantity;
use r8s_client::events::Events;
use r8s_client::informer::{lookup, Change, Factory, Informer};
use r8s_client::queue::{run_controller, WorkQueue};
use tokio_util::sync::CancellationToken;

use crate::SyncResult;

/// Set on a claim once it is bound (upstream's `pv.kubernetes.io/bind-completed`).
pub const BIND_COMPLETED: &str = "pv.kubernetes.io/bind-completed";
/// Set on a claim or volume this controller bound (rather than a user pre-binding it).
pub const BOUND_BY_CONTROLLER: &str = "pv.kubernetes.io/bound-by-controller";
/// The provisioner that is to provision a claim.
pub const STORAGE_PROVISIONER: &str = "volume.kubernetes.io/storage-provisioner";
/// The same, under its beta name, which older provisioners read.
pub const BETA_STORAGE_PROVISIONER: &str = "volume.beta.kubernetes.io/storage-provisioner";
/// The node the scheduler chose for a `WaitForFirstConsumer` claim's first pod.
pub const SELECTED_NODE: &str = "volume.kubernetes.io/selected-node";
/// The provisioner that made a volume.
pub const PROVISIONED_BY: &str = "pv.kubernetes.io/provisioned-by";

pub struct PersistentVolumeController {
    client: Client,
    events: Events,
    pvs: Arc<Informer<PersistentVolume>>,
    pvcs: Arc<Informer<PersistentVolumeClaim>>,
    classes: Arc<Informer<StorageClass>>,
    nodes: Arc<Informer<Node>>,
    node_store: Store<Node>,
    pv_store: Store<PersistentVolume>,
    pvc_store: Store<PersistentVolumeClaim>,
    class_store: Store<StorageClass>,
    queue: Arc<WorkQueue>,
    /// Since when each deleted node has been seen gone (cleared when it registers again).
    gone_since: Arc<Mutex<HashMap<String, Instant>>>,
}

/// How long a node must stay deleted before its local volumes are given up: a node deleted
/// and registered again meanwhile keeps them.
pub const NODE_GONE_GRACE: Duration = Duration::from_secs(30);

/// The node a volume made by r8s's local provisioner lives on (its required
/// `kubernetes.io/hostname In [node]`).
pub fn local_volume_node(pv: &PersistentVolume) -> Option<&str> {
    if annotation(&pv.metadata, PROVISIONED_BY) != Some(r8s_api::local_path::PROVISIONER) {
        return None;
    }
    pv.spec
        .as_ref()?
        .node_affinity
        .as_ref()?
        .required
        .as_ref()?
        .node_selector_terms
        .iter()
        .flat_map(|t| t.match_expressions.iter().flatten())
        .find(|e| e.key == "kubernetes.io/hostname" && e.operator == "In")?
        .values
        .as_ref()?
        .first()
        .map(String::as_str)
}

/// A claim's key in the queue.
fn claim_key(ns: &str, name: &str) -> String {
    format!("claim:{ns}/{name}")
}

fn volume_key(name: &str) -> String {
    format!("volume:{name}")
}

fn annotation<'a>(
    meta: &'a k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    key: &str,
) -> Option<&'a str> {
    meta.annotations.as_ref()?.get(key).map(String::as_str)
}

fn storage(
    resources: Option<&BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>>,
) -> Quantity {
    resources
        .and_then(|r| r.get("storage"))
        .and_then(|q| Quantity::parse(&q.0).ok())
        .unwrap_or_else(|| Quantity::from_units(0))
}

/// The class a claim asks for: its `storageClassName` (`""`: no class).
fn claim_class(pvc: &PersistentVolumeClaim) -> &str {
    pvc.spec
        .as_ref()
        .and_then(|s| s.storage_class_name.as_deref())
        .unwrap_or("")
}

fn volume_class(pv: &PersistentVolume) -> &str {
    pv.spec
        .as_ref()
        .and_then(|s| s.storage_class_name.as_deref())
        .unwrap_or("")
}

fn volume_mode(mode: Option<&String>) -> &str {
    mode.map(String::as_str).unwrap_or("Filesystem")
}

/// Why `pv` cannot serve `pvc`, or `None` when it can (upstream's `checkVolumeSatisfyClaim`
/// and the selector, class and access-mode checks of `findMatchingVolume`).
pub fn mismatch(pv: &PersistentVolume, pvc: &PersistentVolumeClaim) -> Option<String> {
    let (pv_spec, pvc_spec) = (pv.spec.as_ref()?, pvc.spec.as_ref()?);
    let want = storage(pvc_spec.resources.as_ref().and_then(|r| r.requests.as_ref()));
    let have = storage(pv_spec.capacity.as_ref());
    if have < want {
        return Some("requested PV is too small".into());
    }
    if volume_class(pv) != claim_class(pvc) {
        return Some("storageClassName does not match".into());
    }
    if volume_mode(pv_spec.volume_mode.as_ref()) != volume_mode(pvc_spec.volume_mode.as_ref()) {
        return Some("incompatible volumeMode".into());
    }
    let modes = pv_spec.access_modes.as_deref().unwrap_or_default();
    if !pvc_spec.access_modes.iter().flatten().all(|m| modes.contains(m)) {
        return Some("incompatible accessMode".into());
    }
    if let Some(sel) = &pvc_spec.selector {
        match r8s_api::selector::label_selector_as_selector(Some(sel)) {
            Ok(s) if s.matches_labels(pv.metadata.labels.as_ref()) => {}
            _ => return Some("selector does not match".into()),
        }
    }
    None
}

fn phase_of_volume(pv: &PersistentVolume) -> &str {
    pv.status.as_ref().and_then(|s| s.phase.as_deref()).unwrap_or("")
}

fn phase_of_claim(pvc: &PersistentVolumeClaim) -> &str {
    pvc.status.as_ref().and_then(|s| s.phase.as_deref()).unwrap_or("")
}

/// Whether `pv`'s claim reference names `pvc` (by uid when it has one: a pre-bound reference
/// may name only the namespace and name).
fn refers_to(pv: &PersistentVolume, pvc: &PersistentVolumeClaim) -> bool {
    let Some(r) = pv.spec.as_ref().and_then(|s| s.claim_ref.as_ref()) else {
        return false;
    };
    r.name.as_deref() == Some(pvc.name_any().as_str())
        && r.namespace.as_deref() == pvc.namespace().as_deref()
        && (r.uid.as_deref().unwrap_or("").is_empty() || r.uid == pvc.metadata.uid)
}

impl PersistentVolumeController {
    pub fn new(factory: &Factory, events: Events) -> Arc<Self> {
        let pvs = factory.get::<PersistentVolume>();
        let pvcs = factory.get::<PersistentVolumeClaim>();
        let classes = factory.get::<StorageClass>();
        let nodes = factory.get::<Node>();
        let this = Arc::new(Self {
            node_store: nodes.store(),
            nodes,
            client: factory.client(),
            events,
            pv_store: pvs.store(),
            pvc_store: pvcs.store(),
            class_store: classes.store(),
            pvs,
            pvcs,
            classes,
            queue: WorkQueue::new("persistentvolume"),
            gone_since: Arc::default(),
        });
        // A node deleted: its local volumes are looked at (given up after the grace); a node
        // registered again keeps them.
        let q = this.queue.clone();
        let pv_store = this.pv_store.clone();
        let gone = this.gone_since.clone();
        this.nodes.add_handler(move |c| match c {
            Change::Added(n) | Change::Updated(_, n) => {
                gone.lock().unwrap().remove(&n.name_any());
            }
            Change::Deleted(n) => {
                let node = n.name_any();
                for pv in pv_store.state() {
                    if local_volume_node(&pv) == Some(node.as_str()) {
                        q.add(volume_key(&pv.name_any()));
                    }
                }
            }
        });
        let q = this.queue.clone();
        this.pvs.add_handler(move |c| match c {
            Change::Added(pv) | Change::Updated(_, pv) | Change::Deleted(pv) => {
                q.add(volume_key(&pv.name_any()));
                // The claim a volume names learns of it (bound, or gone: Lost).
                if let Some(r) = pv.spec.as_ref().and_then(|s| s.claim_ref.as_ref()) {
                    if let (Some(ns), Some(n)) = (&r.namespace, &r.name) {
                        q.add(claim_key(ns, n));
                    }
                }
            }
        });
        let q = this.queue.clone();
        let pv_store = this.pv_store.clone();
        this.pvcs.add_handler(move |c| match c {
            Change::Added(pvc) | Change::Updated(_, pvc) => {
                q.add(claim_key(&pvc.namespace().unwrap_or_default(), &pvc.name_any()))
            }
            Change::Deleted(pvc) => {
                // Its volume is Released: the one it names, and any this controller's cache
                // shows bound to it (the cache may not have seen the binding yet).
                if let Some(v) = pvc.spec.as_ref().and_then(|s| s.volume_name.as_deref()) {
                    if !v.is_empty() {
                        q.add(volume_key(v));
                    }
                }
                for pv in pv_store.state() {
                    if refers_to(&pv, pvc) {
                        q.add(volume_key(&pv.name_any()));
                    }
                }
            }
        });
        this
    }

    pub async fn run(self: Arc<Self>, workers: usize, stop: CancellationToken) {
        let (a, b, c, d) = (
            self.pvs.clone(),
            self.pvcs.clone(),
            self.classes.clone(),
            self.nodes.clone(),
        );
        let this = self.clone();
        // Every volume and every pending claim is looked at again now and then (upstream's
        // periodic resync of the binder): a volume or class may have come that fits a claim,
        // and a claim's deletion seen before its volume's binding leaves the volume Bound
        // until then.
        let resync = {
            let this = self.clone();
            let stop = stop.clone();
            async move {
                loop {
                    tokio::select! {
                        _ = stop.cancelled() => return,
                        _ = tokio::time::sleep(std::time::Duration::from_secs(15)) => {}
                    }
                    for pv in this.pv_store.state() {
                        this.queue.add(volume_key(&pv.name_any()));
                    }
                    for pvc in this.pvc_store.state() {
                        if phase_of_claim(&pvc) != "Bound" {
                            this.queue
                                .add(claim_key(&pvc.namespace().unwrap_or_default(), &pvc.name_any()));
                        }
                    }
                }
            }
        };
        tokio::spawn(resync);
        run_controller(
            self.queue.clone(),
            vec![a.synced(), b.synced(), c.synced(), d.synced()],
            workers,
            stop,
            move |key| {
                let this = this.clone();
                async move {
                    if let Some(name) = key.strip_prefix("volume:") {
                        this.sync_volume(name).await
                    } else if let Some((ns, name)) =
                        key.strip_prefix("claim:").and_then(|k| k.split_once('/'))
                    {
                        this.sync_claim(ns, name).await
                    } else {
                        Ok(None)
                    }
                }
            },
        )
        .await;
    }

    /// The Available (or pre-bound) volume that serves `pvc` best: one already naming it, else
    /// the smallest that fits.
    fn find_volume(&self, pvc: &PersistentVolumeClaim) -> Option<Arc<PersistentVolume>> {
        let mut best: Option<Arc<PersistentVolume>> = None;
        for pv in self.pv_store.state() {
            if pv.metadata.deletion_timestamp.is_some() {
                continue;
            }
            let claim_ref = pv.spec.as_ref().and_then(|s| s.claim_ref.as_ref());
            if claim_ref.is_some() && !refers_to(&pv, pvc) {
                continue;
            }
            // A volume pre-bound to this claim wins whatever its size (upstream still checks
            // it fits; a user's mistake shows as the claim staying Pending).
            if claim_ref.is_some() {
                return mismatch(&pv, pvc).is_none().then_some(pv);
            }
            if phase_of_volume(&pv) == "Released" || phase_of_volume(&pv) == "Failed" {
                continue;
            }
            if mismatch(&pv, pvc).is_some() {
                continue;
            }
            let size = |v: &PersistentVolume| storage(v.spec.as_ref().and_then(|s| s.capacity.as_ref()));
            if best.as_ref().is_none_or(|b| size(&pv) < size(b)) {
                best = Some(pv);
            }
        }
        best
    }

    async fn sync_claim(&self, ns: &str, name: &str) -> SyncResult {
        let Some(pvc) = lookup(&self.pvc_store, &format!("{ns}/{name}")) else {
            return Ok(None);
        };
        if pvc.metadata.deletion_timestamp.is_some() {
            return Ok(None);
        }
        let volume_name = pvc
            .spec
            .as_ref()
            .and_then(|s| s.volume_name.as_deref())
            .unwrap_or("");
        if !volume_name.is_empty() {
            return self.sync_bound_claim(&pvc, volume_name).await;
        }
        if let Some(pv) = self.find_volume(&pvc) {
            return self.bind(&pv, &pvc).await;
        }
        // No volume fits: the class's provisioner may make one.
        let class_name = claim_class(&pvc);
        let class = (!class_name.is_empty())
            .then(|| lookup(&self.class_store, class_name))
            .flatten();
        match class {
            Some(class) if class.provisioner != "kubernetes.io/no-provisioner" => {
                let waits = class.volume_binding_mode.as_deref() == Some("WaitForFirstConsumer");
                if waits && annotation(&pvc.metadata, SELECTED_NODE).is_none() {
                    self.events.normal(
                        &*pvc,
                        "WaitForFirstConsumer",
                        "waiting for first consumer to be created before binding".into(),
                    );
                    return self.set_claim_phase(&pvc, "Pending").await;
                }
                if annotation(&pvc.metadata, STORAGE_PROVISIONER) != Some(class.provisioner.as_str()) {
                    let api: Api<PersistentVolumeClaim> = Api::namespaced(self.client.clone(), ns);
                    let mut marked = (*pvc).clone();
                    let a = marked.metadata.annotations.get_or_insert_with(Default::default);
                    a.insert(STORAGE_PROVISIONER.into(), class.provisioner.clone());
                    a.insert(BETA_STORAGE_PROVISIONER.into(), class.provisioner.clone());
                    api.replace(name, &crate::post_params(), &marked).await?;
                    if class.provisioner == r8s_api::local_path::PROVISIONER {
                        // Provisioned here, next sync (with the annotated claim).
                        return Ok(None);
                    }
                    self.events.normal(
                        &*pvc,
                        "ExternalProvisioning",
                        format!(
                            "Waiting for a volume to be created either by the external provisioner '{}' or manually by the system administrator. If volume creation is delayed, please verify that the provisioner is running and correctly registered.",
                            class.provisioner
                        ),
                    );
                }
                if class.provisioner == r8s_api::local_path::PROVISIONER {
                    return self.provision_local(&pvc, &class).await;
                }
                self.set_claim_phase(&pvc, "Pending").await
            }
            Some(_) | None => {
                let note = if class_name.is_empty() {
                    "no persistent volumes available for this claim and no storage class is set".to_owned()
                } else if class.is_none() {
                    format!("storageclass.storage.k8s.io \"{class_name}\" not found")
                } else {
                    "no persistent volumes available for this claim".to_owned()
                };
                self.events.normal(&*pvc, "FailedBinding", note);
                self.set_claim_phase(&pvc, "Pending").await
            }
        }
    }

    /// r8s's local provisioner, API side: a hostPath volume in the chosen node's local volume
    /// directory (made by the kubelet when a pod first mounts it), pre-bound to the claim and
    /// required on that node. The node is the scheduler's choice (`WaitForFirstConsumer`) or,
    /// for an `Immediate` class, the first node that keeps local volumes.
    async fn provision_local(&self, pvc: &PersistentVolumeClaim, class: &StorageClass) -> SyncResult {
        let uid = pvc.metadata.uid.clone().unwrap_or_default();
        let pv_name = format!("pvc-{uid}");
        if lookup(&self.pv_store, &pv_name).is_some() {
            return Ok(None);
        }
        let dir_of = |n: &Node| {
            annotation(&n.metadata, r8s_api::local_path::DIR_ANNOTATION)
                .filter(|d| !d.is_empty())
                .map(str::to_owned)
        };
        let node = match annotation(&pvc.metadata, SELECTED_NODE) {
            Some(n) => lookup(&self.node_store, n),
            None => {
                let mut nodes: Vec<Arc<Node>> = self
                    .node_store
                    .state()
                    .into_iter()
                    .filter(|n| dir_of(n).is_some())
                    .collect();
                nodes.sort_by_key(|n| n.name_any());
                nodes.into_iter().next()
            }
        };
        let Some((node, dir)) = node.and_then(|n| dir_of(&n).map(|d| (n.name_any(), d))) else {
            self.events.warning(
                pvc,
                "ProvisioningFailed",
                format!(
                    "failed to provision volume with StorageClass \"{}\": no node keeps local volumes (its agent publishes {})",
                    class.name_any(),
                    r8s_api::local_path::DIR_ANNOTATION
                ),
            );
            self.set_claim_phase(pvc, "Pending").await?;
            return Ok(Some(std::time::Duration::from_secs(5)));
        };
        let ns = pvc.namespace().unwrap_or_default();
        let spec = pvc.spec.clone().unwrap_or_default();
        let path = r8s_api::local_path::volume_dir(&dir, &pv_name, &ns, &pvc.name_any());
        let pv = PersistentVolume {
            metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                name: Some(pv_name.clone()),
                annotations: Some(BTreeMap::from([(
                    PROVISIONED_BY.to_owned(),
                    r8s_api::local_path::PROVISIONER.to_owned(),
                )])),
                ..Default::default()
            },
            spec: Some(PersistentVolumeSpec {
                capacity: spec
                    .resources
                    .as_ref()
                    .and_then(|r| r.requests.clone())
                    .map(|r| r.into_iter().filter(|(k, _)| k == "storage").collect()),
                access_modes: spec.access_modes.clone(),
                volume_mode: spec.volume_mode.clone(),
                storage_class_name: Some(class.name_any()),
                persistent_volume_reclaim_policy: Some(
                    class.reclaim_policy.clone().unwrap_or_else(|| "Delete".into()),
                ),
                mount_options: class.mount_options.clone(),
                claim_ref: Some(ObjectReference {
                    api_version: Some("v1".into()),
                    kind: Some("PersistentVolumeClaim".into()),
                    namespace: Some(ns),
                    name: Some(pvc.name_any()),
                    uid: Some(uid),
                    resource_version: pvc.metadata.resource_version.clone(),
                    ..Default::default()
                }),
                host_path: Some(HostPathVolumeSource {
                    path,
                    type_: Some("DirectoryOrCreate".into()),
                }),
                node_affinity: Some(VolumeNodeAffinity {
                    required: Some(NodeSelector {
                        node_selector_terms: vec![NodeSelectorTerm {
                            match_expressions: Some(vec![NodeSelectorRequirement {
                                key: "kubernetes.io/hostname".into(),
                                operator: "In".into(),
                                values: Some(vec![node.clone()]),
                            }]),
                            match_fields: None,
                        }],
                    }),
                }),
                ..Default::default()
            }),
            status: None,
        };
        let api: Api<PersistentVolume> = Api::all(self.client.clone());
        match api.create(&crate::post_params(), &pv).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 409 => return Ok(None),
            Err(e) => return Err(e.into()),
        }
        self.events.normal(
            pvc,
            "ProvisioningSucceeded",
            format!("Successfully provisioned volume {pv_name} on node {node}"),
        );
        Ok(None)
    }

    /// A claim naming its volume: Bound when the volume names it back (completing a bind
    /// the controller began), Lost when the volume is gone.
    async fn sync_bound_claim(&self, pvc: &PersistentVolumeClaim, volume: &str) -> SyncResult {
        match lookup(&self.pv_store, volume) {
            None => {
                if phase_of_claim(pvc) != "Lost" {
                    self.events.warning(
                        pvc,
                        "ClaimLost",
                        "Bound claim has lost its PersistentVolume. Data on the volume is lost!".into(),
                    );
                }
                self.set_claim_phase(pvc, "Lost").await
            }
            Some(pv) => {
                let claim_ref = pv.spec.as_ref().and_then(|s| s.claim_ref.as_ref());
                if claim_ref.is_none() {
                    // Pre-bound by the user (volumeName only): bind the volume to it.
                    return self.bind(&pv, pvc).await;
                }
                if !refers_to(&pv, pvc) {
                    // The volume is another claim's: upstream keeps this claim Pending.
                    return self.set_claim_phase(pvc, "Pending").await;
                }
                if let Some(grown) = self.expand(&pv, pvc).await? {
                    return self.bind(&grown, pvc).await;
                }
                self.bind(&pv, pvc).await
            }
        }
    }

    /// Expansion (upstream's expand controller with the provisioner's resizer): a bound claim
    /// of r8s's local provisioner asking for more than its volume has grows the volume; the
    /// node grows the file system when its pod's volumes are next set up. The grown volume, or
    /// `None` when there is nothing to grow.
    async fn expand(
        &self,
        pv: &PersistentVolume,
        pvc: &PersistentVolumeClaim,
    ) -> Result<Option<PersistentVolume>, kube::Error> {
        let want = storage(
            pvc.spec
                .as_ref()
                .and_then(|s| s.resources.as_ref())
                .and_then(|r| r.requests.as_ref()),
        );
        let have = storage(pv.spec.as_ref().and_then(|s| s.capacity.as_ref()));
        let ours = annotation(&pv.metadata, PROVISIONED_BY) == Some(r8s_api::local_path::PROVISIONER);
        if want <= have || !ours {
            return Ok(None);
        }
        let requested = pvc
            .spec
            .as_ref()
            .and_then(|s| s.resources.as_ref())
            .and_then(|r| r.requests.as_ref())
            .and_then(|r| r.get("storage"))
            .cloned();
        let mut grown = pv.clone();
        if let (Some(q), Some(spec)) = (requested, grown.spec.as_mut()) {
            spec.capacity
                .get_or_insert_with(Default::default)
                .insert("storage".into(), q);
        }
        let api: Api<PersistentVolume> = Api::all(self.client.clone());
        let grown = api.replace(&pv.name_any(), &crate::post_params(), &grown).await?;
        self.events.normal(
            pvc,
            "VolumeResizeSuccessful",
            format!(
                "resize volume \"{}\" by resizer \"{}\" succeeded",
                pv.name_any(),
                r8s_api::local_path::PROVISIONER
            ),
        );
        Ok(Some(grown))
    }

    /// Bind `pv` to `pvc`: the volume first, then the claim (each write only when it changes
    /// something; updates, as upstream's binder role allows, not patches).
    async fn bind(&self, pv: &PersistentVolume, pvc: &PersistentVolumeClaim) -> SyncResult {
        let pvc_name = pvc.name_any();
        let ns = pvc.namespace().unwrap_or_default();
        let pv_name = pv.name_any();
        let pv_api: Api<PersistentVolume> = Api::all(self.client.clone());
        let mut pv = pv.clone();
        let current = pv.spec.as_ref().and_then(|s| s.claim_ref.as_ref());
        if current.and_then(|r| r.uid.as_deref()) != pvc.metadata.uid.as_deref() {
            if current.is_none() {
                pv.metadata
                    .annotations
                    .get_or_insert_with(Default::default)
                    .insert(BOUND_BY_CONTROLLER.into(), "yes".into());
            }
            pv.spec.get_or_insert_with(Default::default).claim_ref = Some(ObjectReference {
                api_version: Some("v1".into()),
                kind: Some("PersistentVolumeClaim".into()),
                namespace: Some(ns.clone()),
                name: Some(pvc_name.clone()),
                uid: pvc.metadata.uid.clone(),
                resource_version: pvc.metadata.resource_version.clone(),
                ..Default::default()
            });
            pv = pv_api.replace(&pv_name, &crate::post_params(), &pv).await?;
        }
        if phase_of_volume(&pv) != "Bound" {
            self.set_volume_phase(&pv, "Bound").await?;
        }
        let pvc_api: Api<PersistentVolumeClaim> = Api::namespaced(self.client.clone(), &ns);
        let mut pvc = pvc.clone();
        let named = pvc.spec.as_ref().and_then(|s| s.volume_name.as_deref()) == Some(pv_name.as_str());
        if !named || annotation(&pvc.metadata, BIND_COMPLETED) != Some("yes") {
            let a = pvc.metadata.annotations.get_or_insert_with(Default::default);
            a.insert(BIND_COMPLETED.into(), "yes".into());
            if !named {
                a.insert(BOUND_BY_CONTROLLER.into(), "yes".into());
            }
            pvc.spec.get_or_insert_with(Default::default).volume_name = Some(pv_name.clone());
            pvc = pvc_api.replace(&pvc_name, &crate::post_params(), &pvc).await?;
        }
        let spec = pv.spec.clone().unwrap_or_default();
        let status = PersistentVolumeClaimStatus {
            phase: Some("Bound".into()),
            access_modes: spec.access_modes.clone(),
            capacity: spec.capacity.clone(),
            ..pvc.status.clone().unwrap_or_default()
        };
        if pvc.status.as_ref() != Some(&status) {
            pvc.status = Some(status);
            pvc_api
                .replace_status(&pvc_name, &crate::post_params(), &pvc)
                .await?;
        }
        Ok(None)
    }

    async fn set_claim_phase(&self, pvc: &PersistentVolumeClaim, phase: &str) -> SyncResult {
        if phase_of_claim(pvc) == phase {
            return Ok(None);
        }
        let api: Api<PersistentVolumeClaim> =
            Api::namespaced(self.client.clone(), &pvc.namespace().unwrap_or_default());
        let mut pvc = pvc.clone();
        pvc.status.get_or_insert_with(Default::default).phase = Some(phase.into());
        match api
            .replace_status(&pvc.name_any(), &crate::post_params(), &pvc)
            .await
        {
            Ok(_) => Ok(None),
            Err(e) if r8s_client::is_not_found(&e) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    async fn set_volume_phase(&self, pv: &PersistentVolume, phase: &str) -> Result<(), kube::Error> {
        let api: Api<PersistentVolume> = Api::all(self.client.clone());
        let mut pv = pv.clone();
        pv.status = Some(PersistentVolumeStatus {
            phase: Some(phase.into()),
            last_phase_transition_time: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                jiff::Timestamp::now(),
            )),
            ..pv.status.clone().unwrap_or_default()
        });
        match api
            .replace_status(&pv.name_any(), &crate::post_params(), &pv)
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if r8s_client::is_not_found(&e) => Ok(()),
            Err(e) => Err(e),
        }
    }

    async fn sync_volume(&self, name: &str) -> SyncResult {
        let Some(pv) = lookup(&self.pv_store, name) else {
            return Ok(None);
        };
        // A volume being deleted is still synced (as upstream's binder does): its claim
        // deleted first, it must become Released, or the pv-protection finalizer, which waits
        // for a volume no longer Bound, holds it for ever. Nothing is reclaimed for it.
        let deleting = pv.metadata.deletion_timestamp.is_some();
        let policy = pv
            .spec
            .as_ref()
            .and_then(|s| s.persistent_volume_reclaim_policy.as_deref())
            .unwrap_or("Retain");
        if let Some(node) = local_volume_node(&pv).filter(|_| policy == "Delete" && !deleting) {
            if lookup(&self.node_store, node).is_none() {
                return self.give_up_local_volume(&pv, node).await;
            }
        }
        let Some(claim_ref) = pv.spec.as_ref().and_then(|s| s.claim_ref.clone()) else {
            if phase_of_volume(&pv) != "Available" {
                self.set_volume_phase(&pv, "Available").await?;
            }
            return Ok(None);
        };
        let key = format!(
            "{}/{}",
            claim_ref.namespace.as_deref().unwrap_or(""),
            claim_ref.name.as_deref().unwrap_or("")
        );
        let claim = lookup(&self.pvc_store, &key).filter(|c| refers_to(&pv, c));
        match claim {
            Some(pvc) => {
                let uid_known = !claim_ref.uid.as_deref().unwrap_or("").is_empty();
                let names_us = pvc.spec.as_ref().and_then(|s| s.volume_name.as_deref()) == Some(name);
                if names_us && uid_known && phase_of_volume(&pv) != "Bound" {
                    self.set_volume_phase(&pv, "Bound").await?;
                } else if !names_us {
                    // The claim's sync binds it.
                    self.queue.add(claim_key(
                        claim_ref.namespace.as_deref().unwrap_or(""),
                        claim_ref.name.as_deref().unwrap_or(""),
                    ));
                    if phase_of_volume(&pv).is_empty() {
                        self.set_volume_phase(&pv, "Available").await?;
                    }
                }
                Ok(None)
            }
            None if claim_ref.uid.as_deref().unwrap_or("").is_empty() => {
                // Pre-bound to a claim not made yet: Available for it alone.
                if phase_of_volume(&pv).is_empty() {
                    self.set_volume_phase(&pv, "Available").await?;
                }
                Ok(None)
            }
            None => {
                // The claim is gone: Released, then reclaimed.
                if phase_of_volume(&pv) != "Released" && phase_of_volume(&pv) != "Failed" {
                    self.set_volume_phase(&pv, "Released").await?;
                }
                if deleting {
                    return Ok(None);
                }
                match policy {
                    "Delete" => {
                        let api: Api<PersistentVolume> = Api::all(self.client.clone());
                        match api.delete(name, &Default::default()).await {
                            Ok(_) => {}
                            Err(e) if r8s_client::is_not_found(&e) => {}
                            Err(e) => return Err(e.into()),
                        }
                        Ok(None)
                    }
                    "Recycle" => {
                        self.events.warning(
                            &*pv,
                            "VolumeFailedRecycle",
                            "Recycle is not supported (deprecated upstream): use Delete or Retain".into(),
                        );
                        self.set_volume_phase(&pv, "Failed").await?;
                        Ok(None)
                    }
                    _ => Ok(None),
                }
            }
        }
    }
}

impl PersistentVolumeController {
    /// A local volume whose node is deleted: once the node has stayed gone for
    /// [`NODE_GONE_GRACE`], its claim is deleted (pvc-protection holds it until the pods that
    /// used it are collected), and once no claim holds the volume, the volume.
    async fn give_up_local_volume(&self, pv: &PersistentVolume, node: &str) -> SyncResult {
        let since = *self
            .gone_since
            .lock()
            .unwrap()
            .entry(node.to_owned())
            .or_insert_with(Instant::now);
        let waited = since.elapsed();
        if waited < NODE_GONE_GRACE {
            return Ok(Some(NODE_GONE_GRACE - waited));
        }
        let name = pv.name_any();
        let claim = pv
            .spec
            .as_ref()
            .and_then(|s| s.claim_ref.as_ref())
            .and_then(|r| {
                lookup(
                    &self.pvc_store,
                    &format!("{}/{}", r.namespace.as_deref()?, r.name.as_deref()?),
                )
            })
            .filter(|c| refers_to(pv, c));
        if let Some(pvc) = claim {
            if pvc.metadata.deletion_timestamp.is_some() {
                return Ok(None);
            }
            let ns = pvc.namespace().unwrap_or_default();
            self.events.warning(
                pv,
                "NodeDeleted",
                format!(
                    "node {node} was deleted with the volume's data: claim {ns}/{} is deleted so that its workload gets a new volume",
                    pvc.name_any()
                ),
            );
            let api: Api<PersistentVolumeClaim> = Api::namespaced(self.client.clone(), &ns);
            let dp = kube::api::DeleteParams {
                preconditions: Some(kube::api::Preconditions {
                    uid: pvc.metadata.uid.clone(),
                    resource_version: None,
                }),
                ..Default::default()
            };
            return match api.delete(&pvc.name_any(), &dp).await {
                Ok(_) => Ok(None),
                Err(e) if r8s_client::is_not_found(&e) || r8s_client::is_conflict(&e) => Ok(None),
                Err(e) => Err(e.into()),
            };
        }
        self.events.warning(
            pv,
            "NodeDeleted",
            format!("node {node} was deleted with the volume's data: the volume is deleted"),
        );
        // No claim holds it any more: not Bound, so that pv-protection lets it go.
        if phase_of_volume(pv) == "Bound" {
            self.set_volume_phase(pv, "Released").await?;
        }
        let api: Api<PersistentVolume> = Api::all(self.client.clone());
        match api.delete(&name, &Default::default()).await {
            Ok(_) => Ok(None),
            Err(e) if r8s_client::is_not_found(&e) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }
}

/// The default StorageClass `local-path` of r8s's local provisioner (`WaitForFirstConsumer`:
/// the volume goes where the scheduler puts the claim's first pod), created unless one of that
/// name exists.
pub async fn ensure_default_class(client: &Client) -> Result<(), kube::Error> {
    let api: Api<StorageClass> = Api::all(client.clone());
    let class = StorageClass {
        metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
            name: Some(r8s_api::local_path::DEFAULT_CLASS.into()),
            annotations: Some(BTreeMap::from([(
                "storageclass.kubernetes.io/is-default-class".to_owned(),
                "true".to_owned(),
            )])),
            ..Default::default()
        },
        provisioner: r8s_api::local_path::PROVISIONER.into(),
        reclaim_policy: Some("Delete".into()),
        allow_volume_expansion: Some(true),
        volume_binding_mode: Some("WaitForFirstConsumer".into()),
        ..Default::default()
    };
    match api.create(&crate::post_params(), &class).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn pv(name: &str, size: &str, class: &str, modes: &[&str], labels: &[(&str, &str)]) -> PersistentVolume {
        serde_json::from_value(json!({
            "metadata": {"name": name, "labels": labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect::<BTreeMap<_, _>>()},
            "spec": {"capacity": {"storage": size}, "storageClassName": class, "accessModes": modes},
        }))
        .unwrap()
    }

    fn pvc(
        size: &str,
        class: &str,
        modes: &[&str],
        selector: Option<serde_json::Value>,
    ) -> PersistentVolumeClaim {
        serde_json::from_value(json!({
            "metadata": {"name": "c", "namespace": "default", "uid": "u1"},
            "spec": {"resources": {"requests": {"storage": size}}, "storageClassName": class,
                     "accessModes": modes, "selector": selector},
        }))
        .unwrap()
    }

    #[test]
    fn volumes_fit_claims_by_size_class_modes_and_selector() {
        let claim = pvc("1Gi", "", &["ReadWriteOnce"], None);
        assert_eq!(
            mismatch(
                &pv("v", "2Gi", "", &["ReadWriteOnce", "ReadOnlyMany"], &[]),
                &claim
            ),
            None
        );
        assert_eq!(
            mismatch(&pv("v", "512Mi", "", &["ReadWriteOnce"], &[]), &claim).as_deref(),
            Some("requested PV is too small")
        );
        assert_eq!(
            mismatch(&pv("v", "2Gi", "fast", &["ReadWriteOnce"], &[]), &claim).as_deref(),
            Some("storageClassName does not match")
        );
        assert_eq!(
            mismatch(&pv("v", "2Gi", "", &["ReadOnlyMany"], &[]), &claim).as_deref(),
            Some("incompatible accessMode")
        );
        let picky = pvc(
            "1Gi",
            "",
            &["ReadWriteOnce"],
            Some(json!({"matchLabels": {"tier": "db"}})),
        );
        assert_eq!(
            mismatch(
                &pv("v", "2Gi", "", &["ReadWriteOnce"], &[("tier", "web")]),
                &picky
            )
            .as_deref(),
            Some("selector does not match")
        );
        assert_eq!(
            mismatch(&pv("v", "2Gi", "", &["ReadWriteOnce"], &[("tier", "db")]), &picky),
            None
        );
    }

    #[test]
    fn a_claim_reference_names_a_claim_by_uid_once_it_has_one() {
        let claim = pvc("1Gi", "", &[], None);
        let mut v = pv("v", "1Gi", "", &[], &[]);
        v.spec.as_mut().unwrap().claim_ref = Some(ObjectReference {
            namespace: Some("default".into()),
            name: Some("c".into()),
            ..Default::default()
        });
        assert!(refers_to(&v, &claim));
        v.spec.as_mut().unwrap().claim_ref.as_mut().unwrap().uid = Some("other".into());
        assert!(!refers_to(&v, &claim));
        v.spec.as_mut().unwrap().claim_ref.as_mut().unwrap().uid = Some("u1".into());
        assert!(refers_to(&v, &claim));
    }
}
