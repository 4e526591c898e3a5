//! The StatefulSet controller (upstream `pkg/controller/statefulset`): pods with stable
//! identities — `<set>-<ordinal>`, hostname the pod's name and subdomain the governing Service,
//! so the headless Service gives each a DNS name — created in ordinal order and each only once
//! its predecessors are Running and Ready (OrderedReady), or all at once (Parallel); removed
//! from the highest ordinal down. Templates are recorded as ControllerRevisions; a RollingUpdate
//! replaces pods from the highest ordinal down to `partition`, one at a time, each after its
//! successor is Ready again; OnDelete replaces only pods someone deleted.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{ControllerRevision, StatefulSet, StatefulSetStatus};
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, PersistentVolumeClaimVolumeSource, Pod, Volume};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{Api, DeleteParams};
use kube::runtime::reflector::Store;
use kube::{Client, ResourceExt};
use tokio_util::sync::CancellationToken;

use crate::claim::owner_key;
use crate::history::{self, REVISION_HASH};
use crate::{Error, SyncResult};
use r8s_api::owner::{controller_of, controller_ref};
use r8s_client::events::Events;
use r8s_client::informer::{key_of, lookup, Change, Factory, Informer};
use r8s_client::queue::{run_controller, WorkQueue};

pub const POD_NAME_LABEL: &str = "statefulset.kubernetes.io/pod-name";
pub const POD_INDEX_LABEL: &str = "apps.kubernetes.io/pod-index";

pub struct StatefulSetController {
    client: Client,
    sets: Arc<Informer<StatefulSet>>,
    pods: Arc<Informer<Pod>>,
    revisions: Arc<Informer<ControllerRevision>>,
    set_store: Store<StatefulSet>,
    pod_store: Store<Pod>,
    revision_store: Store<ControllerRevision>,
    claims: Arc<Informer<PersistentVolumeClaim>>,
    claim_store: Store<PersistentVolumeClaim>,
    queue: Arc<WorkQueue>,
    events: Events,
}

/// The ordinal of a pod named `<set>-<n>`.
pub fn ordinal_of(set: &str, pod: &str) -> Option<i32> {
    pod.strip_prefix(set)?
        .strip_prefix('-')?
        .parse()
        .ok()
        .filter(|n: &i32| *n >= 0)
}

/// An int-or-percent of `total`, a percentage rounded down (upstream's
/// `GetScaledValueFromIntOrPercent(…, false)`); a malformed one counts as 1.
fn scaled_down(v: &IntOrString, total: i32) -> i32 {
    match v {
        IntOrString::Int(n) => *n,
        IntOrString::String(s) => s
            .strip_suffix('%')
            .and_then(|n| n.parse::<i64>().ok())
            .map(|pct| (pct * total as i64 / 100) as i32)
            .unwrap_or(1),
    }
}

/// Whether a pod was made from the revision `name` (upstream labels a StatefulSet's pods with
/// the ControllerRevision's name, `<set>-<hash>`; pods made by an older r8s carry the bare
/// hash, which is taken as the same revision rather than rolling every set on an upgrade).
fn at_revision(p: &Pod, name: &str, hash: &str) -> bool {
    p.labels()
        .get(REVISION_HASH)
        .is_some_and(|l| l == name || l == hash)
}

fn phase(p: &Pod) -> &str {
    p.status.as_ref().and_then(|s| s.phase.as_deref()).unwrap_or("")
}

fn running_and_ready(p: &Pod) -> bool {
    phase(p) == "Running" && crate::replicaset::pod_ready(p).0
}

/// The pod for `ordinal` of `set` from the template of `hash`.
pub fn pod_for(
    set: &StatefulSet,
    ordinal: i32,
    template: &k8s_openapi::api::core::v1::PodTemplateSpec,
    hash: &str,
) -> Pod {
    let name = format!("{}-{ordinal}", set.name_any());
    let meta = template.metadata.clone().unwrap_or_default();
    let mut labels = meta.labels.unwrap_or_default();
    labels.insert(REVISION_HASH.into(), hash.into());
    labels.insert(POD_NAME_LABEL.into(), name.clone());
    labels.insert(POD_INDEX_LABEL.into(), ordinal.to_string());
    let spec = set.spec.clone().unwrap_or_default();
    let mut pod_spec = template.spec.clone().unwrap_or_default();
    pod_spec.hostname = Some(name.clone());
    if let Some(service) = spec.service_name.filter(|s| !s.is_empty()) {
        pod_spec.subdomain = Some(service);
    }
    // Each claim template becomes the pod's own claim `<claim>-<set>-<ordinal>`.
    for claim in spec.volume_claim_templates.iter().flatten() {
        let claim_name = claim.metadata.name.clone().unwrap_or_default();
        let volumes = pod_spec.volumes.get_or_insert_with(Vec::new);
        volumes.retain(|v| v.name != claim_name);
        volumes.push(Volume {
            name: claim_name.clone(),
            persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                claim_name: format!("{claim_name}-{name}"),
                read_only: None,
            }),
            ..Default::default()
        });
    }
    Pod {
        metadata: ObjectMeta {
            name: Some(name),
            namespace: set.namespace(),
            labels: Some(labels),
            annotations: meta.annotations,
            finalizers: meta.finalizers,
            owner_references: Some(vec![controller_ref(set)]),
            ..Default::default()
        },
        spec: Some(pod_spec),
        status: None,
    }
}

/// The claims the pod of `ordinal` uses, one per claim template: `<claim>-<set>-<ordinal>`,
/// labelled with the template's labels and the set's selector labels, owned by the set when
/// its retention policy deletes claims with it (upstream's `getPersistentVolumeClaims` and
/// `updateClaimOwnerRefForSetAndPod`).
pub fn claims_for(set: &StatefulSet, ordinal: i32) -> Vec<PersistentVolumeClaim> {
    let spec = set.spec.clone().unwrap_or_default();
    let pod = format!("{}-{ordinal}", set.name_any());
    let delete_with_set = spec
        .persistent_volume_claim_retention_policy
        .as_ref()
        .and_then(|p| p.when_deleted.as_deref())
        == Some("Delete");
    spec.volume_claim_templates
        .iter()
        .flatten()
        .map(|t| {
            let mut claim = t.clone();
            let template_name = t.metadata.name.clone().unwrap_or_default();
            let mut labels = t.metadata.labels.clone().unwrap_or_default();
            labels.extend(spec.selector.match_labels.clone().unwrap_or_default());
            claim.metadata = ObjectMeta {
                name: Some(format!("{template_name}-{pod}")),
                namespace: set.namespace(),
                labels: Some(labels).filter(|l| !l.is_empty()),
                annotations: t.metadata.annotations.clone(),
                owner_references: delete_with_set.then(|| vec![owner_ref(set)]),
                ..Default::default()
            };
            claim.status = None;
            claim
        })
        .collect()
}

/// The owner references a claim of `pod` should have under the set's retention policy, or
/// `None` when it has them already (upstream's `claimOwnerMatchesSetAndPod` and
/// `updateClaimOwnerRefForSetAndPod`): the set owns it when claims go with the set and the pod
/// is in range; the pod owns it, in place of the set, when claims go with a scale-down and the
/// pod is being scaled away; otherwise neither. Other owners are kept.
pub fn claim_owners(
    set: &StatefulSet,
    pod: &Pod,
    claim: &PersistentVolumeClaim,
    scaled_down: bool,
) -> Option<Vec<OwnerReference>> {
    let policy = set
        .spec
        .as_ref()
        .and_then(|s| s.persistent_volume_claim_retention_policy.as_ref());
    let deletes = |f: Option<&String>| f.map(String::as_str) == Some("Delete");
    let when_deleted = deletes(policy.and_then(|p| p.when_deleted.as_ref()));
    let when_scaled = deletes(policy.and_then(|p| p.when_scaled.as_ref()));
    let by_pod = when_scaled && scaled_down;
    let by_set = when_deleted && !by_pod;
    let set_uid = set.metadata.uid.as_deref().unwrap_or_default();
    let pod_uid = pod.metadata.uid.as_deref().unwrap_or_default();
    let refs = claim.metadata.owner_references.clone().unwrap_or_default();
    let has = |uid: &str| refs.iter().any(|r| r.uid == uid);
    if has(set_uid) == by_set && has(pod_uid) == by_pod {
        return None;
    }
    let mut refs: Vec<OwnerReference> = refs
        .iter()
        .filter(|r| r.uid != set_uid && r.uid != pod_uid)
        .cloned()
        .collect();
    if by_set {
        refs.push(owner_ref(set));
    }
    if by_pod {
        refs.push(owner_ref(pod));
    }
    Some(refs)
}

/// A plain (not controller) ownerReference, as upstream's retention policy sets on claims.
fn owner_ref<K: kube::Resource<DynamicType = ()> + k8s_openapi::Metadata<Ty = ObjectMeta>>(
    o: &K,
) -> OwnerReference {
    OwnerReference {
        api_version: K::api_version(&()).into_owned(),
        kind: K::kind(&()).into_owned(),
        name: o.name_any(),
        uid: o.meta().uid.clone().unwrap_or_default(),
        ..Default::default()
    }
}

impl StatefulSetController {
    /// Create the claims of the pod of `ordinal` that do not exist yet (upstream's
    /// `createPersistentVolumeClaims`, before the pod).
    async fn create_claims(&self, set: &StatefulSet, ordinal: i32) -> Result<(), Error> {
        let api: Api<PersistentVolumeClaim> =
            Api::namespaced(self.client.clone(), &set.namespace().unwrap_or_default());
        let pod = format!("{}-{ordinal}", set.name_any());
        for claim in claims_for(set, ordinal) {
            let name = claim.name_any();
            match api.create(&crate::post_params(), &claim).await {
                Ok(_) => self.events.normal(
                    set,
                    "SuccessfulCreate",
                    format!(
                        "create Claim {name} Pod {pod} in StatefulSet {} success",
                        set.name_any()
                    ),
                ),
                Err(kube::Error::Api(e)) if e.code == 409 => {}
                Err(e) => {
                    self.events.warning(
                        set,
                        "FailedCreate",
                        format!(
                            "create Claim {name} for Pod {pod} in StatefulSet {} failed error: {e}",
                            set.name_any()
                        ),
                    );
                    return Err(e.into());
                }
            }
        }
        Ok(())
    }

    /// Keep the claims of a live pod as the set's retention policy wants them (upstream's
    /// `UpdatePodClaimForRetentionPolicy`, run for every pod and every condemned one): a
    /// claim of a pod in range that is missing is created again; an existing one gets the
    /// owners [`claim_owners`] computes — the set for `whenDeleted: Delete`, the pod in place
    /// of the set for a pod being scaled away under `whenScaled: Delete`, and back to the set
    /// when a scale-up takes that pod back in range (an owner left in place would keep a claim:
    /// the garbage collector only drops a missing owner beside a live one).
    async fn fix_claims(&self, set: &StatefulSet, pod: &Pod, scaled_down: bool) -> Result<(), Error> {
        let Some(ordinal) = ordinal_of(&set.name_any(), &pod.name_any()) else {
            return Ok(());
        };
        let ns = set.namespace().unwrap_or_default();
        let api: Api<PersistentVolumeClaim> = Api::namespaced(self.client.clone(), &ns);
        let mut missing = false;
        for claim in claims_for(set, ordinal) {
            let key = format!("{ns}/{}", claim.name_any());
            let Some(current) = lookup(&self.claim_store, &key) else {
                missing = true;
                continue;
            };
            let Some(refs) = claim_owners(set, pod, &current, scaled_down) else {
                continue;
            };
            let mut current = (*current).clone();
            current.metadata.owner_references = Some(refs).filter(|r| !r.is_empty());
            match api
                .replace(&claim.name_any(), &crate::post_params(), &current)
                .await
            {
                Ok(_) => {}
                Err(e) if r8s_client::is_not_found(&e) => {}
                Err(e) => return Err(e.into()),
            }
        }
        if missing && !scaled_down && pod.metadata.deletion_timestamp.is_none() {
            self.create_claims(set, ordinal).await?;
        }
        Ok(())
    }

    pub fn new(factory: &Factory, events: Events) -> Arc<Self> {
        let sets = factory.get::<StatefulSet>();
        let pods = factory.get::<Pod>();
        let revisions = factory.get::<ControllerRevision>();
        let claims = factory.get::<PersistentVolumeClaim>();
        let this = Arc::new(Self {
            client: factory.client(),
            set_store: sets.store(),
            pod_store: pods.store(),
            revision_store: revisions.store(),
            claim_store: claims.store(),
            claims,
            sets,
            pods,
            revisions,
            queue: WorkQueue::new("statefulset"),
            events,
        });
        let q = this.queue.clone();
        this.sets.add_handler(move |c| match c {
            Change::Added(o) | Change::Deleted(o) => q.add(key_of(&**o)),
            Change::Updated(_, o) => q.add(key_of(&**o)),
        });
        let weak = Arc::downgrade(&this);
        this.pods.add_handler(move |c| {
            let Some(this) = weak.upgrade() else { return };
            let pod = match c {
                Change::Added(p) | Change::Deleted(p) => p,
                Change::Updated(_, p) => p,
            };
            match owner_key(&this.set_store, &pod.metadata) {
                Some(key) => this.queue.add(key),
                None if controller_of(&pod.metadata).is_none() => {
                    for set in this.set_store.state() {
                        if set.metadata.namespace == pod.metadata.namespace {
                            this.queue.add(key_of(&*set));
                        }
                    }
                }
                None => {}
            }
        });
        // A claim of a set's pod that goes away is created again by the set's next sync.
        let weak = Arc::downgrade(&this);
        this.claims.add_handler(move |c| {
            let (Some(this), Change::Deleted(claim)) = (weak.upgrade(), c) else {
                return;
            };
            let name = claim.name_any();
            for set in this.set_store.state() {
                if set.metadata.namespace != claim.metadata.namespace {
                    continue;
                }
                let templates = set.spec.as_ref().and_then(|s| s.volume_claim_templates.as_ref());
                let ours = templates.into_iter().flatten().any(|t| {
                    let prefix = format!("{}-", t.metadata.name.as_deref().unwrap_or_default());
                    name.strip_prefix(&prefix)
                        .and_then(|pod| ordinal_of(&set.name_any(), pod))
                        .is_some()
                });
                if ours {
                    this.queue.add(key_of(&*set));
                }
            }
        });
        this
    }

    pub async fn run(self: Arc<Self>, workers: usize, stop: CancellationToken) {
        let this = self.clone();
        run_controller(
            self.queue.clone(),
            vec![
                self.sets.clone().synced(),
                self.pods.clone().synced(),
                self.revisions.clone().synced(),
                self.claims.clone().synced(),
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

    pub async fn sync(&self, key: &str) -> SyncResult {
        let Some(set) = lookup(&self.set_store, key) else {
            return Ok(None);
        };
        let ns = set.namespace().unwrap_or_default();
        let name = set.name_any();
        let spec = set.spec.clone().unwrap_or_default();
        let uid = set.metadata.uid.clone().unwrap_or_default();
        let matcher = crate::selector(Some(&spec.selector))?;
        let sets_api: Api<StatefulSet> = Api::namespaced(self.client.clone(), &ns);
        let pods_api: Api<Pod> = Api::namespaced(self.client.clone(), &ns);
        let candidates: Vec<Arc<Pod>> = self
            .pod_store
            .state()
            .into_iter()
            .filter(|p| p.metadata.namespace.as_deref() == Some(ns.as_str()))
            .collect();
        let pods = crate::claim::claim(&*set, &sets_api, &pods_api, &matcher, candidates).await?;

        let revisions_api: Api<ControllerRevision> = Api::namespaced(self.client.clone(), &ns);
        let ours = history::owned(self.revision_store.state().iter(), &uid);
        let old_status = set.status.clone().unwrap_or_default();
        let (update_revision, update_hash) = history::current(
            &revisions_api,
            controller_ref(&*set),
            &name,
            &ns,
            &spec.template,
            old_status.collision_count,
            &ours,
        )
        .await?;
        let update_name = update_revision.name_any();
        // The current revision: what the pods were made from before this update began.
        let current_name = old_status
            .current_revision
            .clone()
            .filter(|c| !c.is_empty() && ours.iter().any(|r| r.name_any() == *c))
            .unwrap_or_else(|| update_name.clone());
        let current_template = ours
            .iter()
            .find(|r| r.name_any() == current_name)
            .and_then(|r| r.data.as_ref())
            .and_then(|d| serde_json::from_value(d.0["spec"]["template"].clone()).ok())
            .unwrap_or_else(|| spec.template.clone());
        let current_hash = ours
            .iter()
            .find(|r| r.name_any() == current_name)
            .and_then(|r| r.labels().get(REVISION_HASH).cloned())
            .unwrap_or_else(|| update_hash.clone());

        let replicas = spec.replicas.unwrap_or(1).max(0);
        let start = spec.ordinals.as_ref().and_then(|o| o.start).unwrap_or(0).max(0);
        let parallel = spec.pod_management_policy.as_deref() == Some("Parallel");
        let strategy = spec.update_strategy.clone().unwrap_or_default();
        let on_delete = strategy.type_.as_deref() == Some("OnDelete");
        let partition = strategy
            .rolling_update
            .as_ref()
            .and_then(|r| r.partition)
            .unwrap_or(0);

        let mut by_ordinal: BTreeMap<i32, Arc<Pod>> = BTreeMap::new();
        let mut condemned: Vec<Arc<Pod>> = Vec::new();
        for p in &pods {
            match ordinal_of(&name, &p.name_any()) {
                Some(o) if o >= start && o < start + replicas => {
                    by_ordinal.insert(o, p.clone());
                }
                _ => condemned.push(p.clone()),
            }
        }
        condemned.sort_by_key(|p| std::cmp::Reverse(ordinal_of(&name, &p.name_any()).unwrap_or(i32::MAX)));

        let mut err: Option<Error> = None;
        let mut waiting = false;
        if set.metadata.deletion_timestamp.is_none() {
            // Create what is missing, in order; replace failed pods.
            for ordinal in start..start + replicas {
                match by_ordinal.get(&ordinal) {
                    Some(p) if phase(p) == "Failed" && p.metadata.deletion_timestamp.is_none() => {
                        self.events.normal(
                            &*set,
                            "RecreatingFailedPod",
                            format!(
                                "StatefulSet {ns}/{name} is recreating failed Pod {}",
                                p.name_any()
                            ),
                        );
                        if let Err(e) = self.delete_pod(&set, &pods_api, p).await {
                            err.get_or_insert(e);
                        }
                        if !parallel {
                            waiting = true;
                            break;
                        }
                    }
                    Some(p) => {
                        if p.metadata.deletion_timestamp.is_none() {
                            if let Err(e) = self.repair_identity(&set, &pods_api, p, ordinal).await {
                                err.get_or_insert(e);
                            }
                            if let Err(e) = self.fix_claims(&set, p, false).await {
                                err.get_or_insert(e);
                            }
                        }
                        let healthy = running_and_ready(p) && p.metadata.deletion_timestamp.is_none();
                        if !parallel && !healthy {
                            // OrderedReady: nothing after a pod that is not Running and Ready.
                            waiting = true;
                            break;
                        }
                    }
                    None => {
                        // Below the partition (or OnDelete) a new pod still gets the current
                        // revision; at and above it, the update revision.
                        let (template, revision) = if on_delete || ordinal - start < partition {
                            (&current_template, &current_name)
                        } else {
                            (&spec.template, &update_name)
                        };
                        let pod = pod_for(&set, ordinal, template, revision);
                        if let Err(e) = self.create_claims(&set, ordinal).await {
                            err.get_or_insert(e);
                            break;
                        }
                        match pods_api.create(&crate::post_params(), &pod).await {
                            Ok(_) => self.events.normal(
                                &*set,
                                "SuccessfulCreate",
                                format!("create Pod {} in StatefulSet {name} successful", pod.name_any()),
                            ),
                            Err(kube::Error::Api(e)) if e.code == 409 => {}
                            Err(e) => {
                                self.events.warning(
                                    &*set,
                                    "FailedCreate",
                                    format!(
                                        "create Pod {} in StatefulSet {name} failed error: {e}",
                                        pod.name_any()
                                    ),
                                );
                                err.get_or_insert(e.into());
                            }
                        }
                        if !parallel {
                            waiting = true;
                            break;
                        }
                    }
                }
            }
            // Remove pods beyond the replicas: highest first, one at a time when ordered.
            // OrderedReady also waits for every condemned pod to be Running and Ready, but for
            // the first unhealthy pod of the set (upstream's rule: the lowest unhealthy
            // replica, else the lowest unhealthy condemned pod), which may go.
            let healthy = |p: &Pod| running_and_ready(p) && p.metadata.deletion_timestamp.is_none();
            let first_unhealthy = (start..start + replicas)
                .filter_map(|o| by_ordinal.get(&o))
                .chain(condemned.iter().rev())
                .find(|p| !healthy(p))
                .map(|p| p.name_any());
            if !waiting || parallel {
                for p in &condemned {
                    if p.metadata.deletion_timestamp.is_some() {
                        if !parallel {
                            break;
                        }
                        continue;
                    }
                    if !parallel && !healthy(p) && first_unhealthy.as_deref() != Some(&p.name_any()) {
                        break;
                    }
                    if let Err(e) = self.fix_claims(&set, p, true).await {
                        err.get_or_insert(e);
                        break;
                    }
                    if let Err(e) = self.delete_pod(&set, &pods_api, p).await {
                        err.get_or_insert(e);
                    }
                    if !parallel {
                        break;
                    }
                }
            }
            // The rolling update: highest ordinal first, down to the partition, one at a time.
            let all_ready = by_ordinal.len() as i32 == replicas
                && by_ordinal
                    .values()
                    .all(|p| running_and_ready(p) && p.metadata.deletion_timestamp.is_none());
            if !on_delete && condemned.is_empty() && r8s_api::features::max_unavailable_stateful_set() {
                // With the MaxUnavailableStatefulSet gate (upstream's
                // `updateStatefulSetAfterInvariantEstablished`): up to maxUnavailable pods (of
                // the replicas, rounded down, at least 1) may be down at once, counting those
                // that are already; stale pods go from the highest ordinal down.
                let max = strategy
                    .rolling_update
                    .as_ref()
                    .and_then(|r| r.max_unavailable.as_ref())
                    .map(|m| scaled_down(m, replicas))
                    .unwrap_or(1)
                    .max(1);
                let healthy = by_ordinal
                    .values()
                    .filter(|p| running_and_ready(p) && p.metadata.deletion_timestamp.is_none())
                    .count() as i32;
                let budget = max - (replicas - healthy);
                let stale: Vec<&Arc<Pod>> = by_ordinal
                    .iter()
                    .rev()
                    .filter(|(o, _)| **o - start >= partition)
                    .map(|(_, p)| p)
                    .filter(|p| p.metadata.deletion_timestamp.is_none())
                    .filter(|p| !at_revision(p, &update_name, &update_hash))
                    .take(budget.max(0) as usize)
                    .collect();
                for p in stale {
                    self.events.normal(
                        &*set,
                        "SuccessfulDelete",
                        format!("delete Pod {} in StatefulSet {name} successful", p.name_any()),
                    );
                    if let Err(e) = pods_api.delete(&p.name_any(), &DeleteParams::default()).await {
                        if !r8s_client::is_not_found(&e) {
                            err.get_or_insert(e.into());
                        }
                    }
                }
            } else if !on_delete && all_ready && condemned.is_empty() {
                let stale = by_ordinal
                    .iter()
                    .rev()
                    .filter(|(o, _)| **o - start >= partition)
                    .find(|(_, p)| !at_revision(p, &update_name, &update_hash));
                if let Some((_, p)) = stale {
                    self.events.normal(
                        &*set,
                        "SuccessfulDelete",
                        format!("delete Pod {} in StatefulSet {name} successful", p.name_any()),
                    );
                    if let Err(e) = pods_api.delete(&p.name_any(), &DeleteParams::default()).await {
                        if !r8s_client::is_not_found(&e) {
                            err.get_or_insert(e.into());
                        }
                    }
                }
            }
        }

        // Old revisions no pod uses.
        let in_use: HashSet<String> = pods
            .iter()
            .filter_map(|p| p.labels().get(REVISION_HASH).cloned())
            .collect();
        let ours = history::owned(self.revision_store.state().iter(), &uid);
        let keep = [update_name.clone(), current_name.clone()];
        let truncatable: Vec<Arc<ControllerRevision>> = ours
            .into_iter()
            .filter(|r| !keep.contains(&r.name_any()))
            .collect();
        history::truncate(
            &revisions_api,
            &truncatable,
            &update_name,
            &in_use,
            spec.revision_history_limit.unwrap_or(10),
        )
        .await?;

        // Status.
        let live: Vec<&Arc<Pod>> = pods
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .collect();
        let min_ready = spec.min_ready_seconds.unwrap_or(0);
        let now = jiff::Timestamp::now();
        let count = |f: &dyn Fn(&Pod) -> bool| live.iter().filter(|p| f(p)).count() as i32;
        let updated = count(&|p| at_revision(p, &update_name, &update_hash));
        let current = count(&|p| at_revision(p, &current_name, &current_hash));
        let mut status = StatefulSetStatus {
            observed_generation: set.metadata.generation,
            replicas: live.len() as i32,
            ready_replicas: Some(count(&|p| crate::replicaset::pod_ready(p).0)),
            available_replicas: Some(count(&|p| crate::replicaset::pod_available(p, min_ready, now))),
            current_replicas: Some(current),
            updated_replicas: Some(updated),
            current_revision: Some(current_name.clone()),
            update_revision: Some(update_name.clone()),
            collision_count: old_status.collision_count,
            conditions: old_status.conditions.clone(),
        };
        // Every pod at the update revision: the update is done.
        if updated == replicas && live.len() as i32 == replicas {
            status.current_revision = Some(update_name.clone());
            status.current_replicas = Some(updated);
        }
        if set.status.as_ref() != Some(&status) {
            let mut written = (*set).clone();
            written.status = Some(status.clone());
            match sets_api
                .replace_status(&name, &crate::post_params(), &written)
                .await
            {
                Ok(_) => {}
                Err(e) if r8s_client::is_not_found(&e) => return Ok(None),
                Err(e) => return Err(e.into()),
            }
        }
        if let Some(e) = err {
            return Err(e);
        }
        if min_ready > 0 && status.ready_replicas != status.available_replicas {
            return Ok(Some(Duration::from_secs(min_ready as u64)));
        }
        Ok(None)
    }

    /// Upstream's `identityMatches`/`updateIdentity`: a pod whose name or index label was
    /// changed or removed gets it back (the rest of its identity, name and hostname, cannot
    /// change).
    async fn repair_identity(
        &self,
        set: &StatefulSet,
        api: &Api<Pod>,
        p: &Pod,
        ordinal: i32,
    ) -> Result<(), Error> {
        let name = p.name_any();
        let index = ordinal.to_string();
        let labels = p.labels();
        if labels.get(POD_NAME_LABEL) == Some(&name) && labels.get(POD_INDEX_LABEL) == Some(&index) {
            return Ok(());
        }
        let patch =
            serde_json::json!({"metadata": {"labels": {POD_NAME_LABEL: name, POD_INDEX_LABEL: index}}});
        match api
            .patch(&name, &crate::patch_params(), &kube::api::Patch::Merge(&patch))
            .await
        {
            Ok(_) => {
                self.events.normal(
                    set,
                    "SuccessfulUpdate",
                    format!("update Pod {name} in StatefulSet {} successful", set.name_any()),
                );
                Ok(())
            }
            Err(e) if r8s_client::is_not_found(&e) => Ok(()),
            Err(e) => {
                self.events.warning(
                    set,
                    "FailedUpdate",
                    format!(
                        "update Pod {name} in StatefulSet {} failed error: {e}",
                        set.name_any()
                    ),
                );
                Err(e.into())
            }
        }
    }

    async fn delete_pod(&self, set: &StatefulSet, api: &Api<Pod>, p: &Pod) -> Result<(), Error> {
        match api.delete(&p.name_any(), &DeleteParams::default()).await {
            Ok(_) => {
                self.events.normal(
                    set,
                    "SuccessfulDelete",
                    format!(
                        "delete Pod {} in StatefulSet {} successful",
                        p.name_any(),
                        set.name_any()
                    ),
                );
                Ok(())
            }
            Err(e) if r8s_client::is_not_found(&e) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn claim_owners_follow_the_retention_policy() {
        let set = |deleted: &str, scaled: &str| -> StatefulSet {
            serde_json::from_value(json!({
                "metadata": {"name": "web", "namespace": "default", "uid": "set"},
                "spec": {"selector": {}, "template": {},
                         "persistentVolumeClaimRetentionPolicy": {"whenDeleted": deleted, "whenScaled": scaled}}
            }))
            .unwrap()
        };
        let pod: Pod = serde_json::from_value(json!({"metadata": {"name": "web-1", "uid": "pod"}})).unwrap();
        let claim = |owners: &[&str]| -> PersistentVolumeClaim {
            let refs: Vec<_> = owners
                .iter()
                .map(|u| json!({"apiVersion": "v1", "kind": "X", "name": u, "uid": u}))
                .collect();
            serde_json::from_value(json!({"metadata": {"name": "data-web-1", "ownerReferences": refs}}))
                .unwrap()
        };
        let uids = |r: Option<Vec<OwnerReference>>| -> Option<Vec<String>> {
            r.map(|r| r.into_iter().map(|r| r.uid).collect())
        };
        // Retain/Retain: no owner of ours, other owners kept.
        assert_eq!(
            uids(claim_owners(
                &set("Retain", "Retain"),
                &pod,
                &claim(&["set", "other"]),
                false
            )),
            Some(vec!["other".into()])
        );
        assert_eq!(
            claim_owners(&set("Retain", "Retain"), &pod, &claim(&[]), true),
            None
        );
        // Delete with the set: the set owns it, scaled down or not when scaling retains.
        assert_eq!(
            uids(claim_owners(&set("Delete", "Retain"), &pod, &claim(&[]), false)),
            Some(vec!["set".into()])
        );
        assert_eq!(
            claim_owners(&set("Delete", "Retain"), &pod, &claim(&["set"]), true),
            None
        );
        // Delete on scale-down: the pod owns it while it is scaled away, nobody otherwise.
        assert_eq!(
            uids(claim_owners(&set("Retain", "Delete"), &pod, &claim(&[]), true)),
            Some(vec!["pod".into()])
        );
        assert_eq!(
            uids(claim_owners(
                &set("Retain", "Delete"),
                &pod,
                &claim(&["pod"]),
                false
            )),
            Some(vec![])
        );
        // Both: the pod in place of the set on a scale-down, the set back on a scale-up.
        assert_eq!(
            uids(claim_owners(
                &set("Delete", "Delete"),
                &pod,
                &claim(&["set"]),
                true
            )),
            Some(vec!["pod".into()])
        );
        assert_eq!(
            uids(claim_owners(
                &set("Delete", "Delete"),
                &pod,
                &claim(&["pod"]),
                false
            )),
            Some(vec!["set".into()])
        );
        assert_eq!(
            claim_owners(&set("Delete", "Delete"), &pod, &claim(&["set"]), false),
            None
        );
    }

    #[test]
    fn pods_take_their_identity_from_the_set() {
        assert_eq!(ordinal_of("web", "web-2"), Some(2));
        assert_eq!(ordinal_of("web", "web-x"), None);
        assert_eq!(ordinal_of("web", "webby-1"), None);
        let set: StatefulSet = serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": "default", "uid": "u"},
            "spec": {"serviceName": "nginx", "selector": {"matchLabels": {"app": "web"}},
                     "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": "i"}]}},
                     "volumeClaimTemplates": [{"metadata": {"name": "data"}}]}
        }))
        .unwrap();
        let pod = pod_for(&set, 1, &set.spec.as_ref().unwrap().template, "abc");
        assert_eq!(pod.metadata.name.as_deref(), Some("web-1"));
        let labels = pod.metadata.labels.as_ref().unwrap();
        assert_eq!(labels[POD_NAME_LABEL], "web-1");
        assert_eq!(labels[POD_INDEX_LABEL], "1");
        assert_eq!(labels[REVISION_HASH], "abc");
        let spec = pod.spec.unwrap();
        assert_eq!(
            (spec.hostname.as_deref(), spec.subdomain.as_deref()),
            (Some("web-1"), Some("nginx"))
        );
        let claim = spec.volumes.unwrap()[0].persistent_volume_claim.clone().unwrap();
        assert_eq!(claim.claim_name, "data-web-1");
    }
}
