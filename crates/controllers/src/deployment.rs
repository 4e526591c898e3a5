//! The Deployment controller (upstream `pkg/controller/deployment`): a Deployment owns one
//! ReplicaSet per pod template ("revision"), named `<deployment>-<pod-template-hash>`. The
//! ReplicaSet whose template equals the Deployment's is the new one; rollouts move replicas from
//! the old ones to it — RollingUpdate within maxSurge/maxUnavailable, Recreate by scaling the
//! old ones to zero first — and status and the Progressing/Available conditions report it.
//! Rollback (`kubectl rollout undo`) is the client copying an old ReplicaSet's template back,
//! after which that ReplicaSet becomes the new one with the next revision number.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{
    Deployment, DeploymentCondition, DeploymentStatus, ReplicaSet, ReplicaSetSpec,
};
use k8s_openapi::api::core::v1::{Pod, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{Api, DeleteParams, Patch};
use kube::runtime::reflector::Store;
use kube::{Client, ResourceExt};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::Error;
use crate::SyncResult;
use r8s_api::owner::{controller_of, controller_ref};
use r8s_api::selector::{label_selector_as_selector, Selector};
use r8s_client::events::Events;
use r8s_client::informer::{key_of, lookup, Change, Factory, Informer};
use r8s_client::queue::{run_controller, WorkQueue};

pub const REVISION: &str = "deployment.kubernetes.io/revision";
pub const REVISION_HISTORY: &str = "deployment.kubernetes.io/revision-history";
pub const DESIRED_REPLICAS: &str = "deployment.kubernetes.io/desired-replicas";
pub const MAX_REPLICAS: &str = "deployment.kubernetes.io/max-replicas";
pub const POD_TEMPLATE_HASH: &str = "pod-template-hash";
pub const CHANGE_CAUSE: &str = "kubernetes.io/change-cause";

/// Deployment annotations that are not copied onto its ReplicaSets.
const NOT_COPIED: &[&str] = &[
    "kubectl.kubernetes.io/last-applied-configuration",
    REVISION,
    REVISION_HISTORY,
    DESIRED_REPLICAS,
    MAX_REPLICAS,
    "deprecated.deployment.rollback.to",
];

pub struct DeploymentController {
    client: Client,
    d_informer: Arc<Informer<Deployment>>,
    rs_informer: Arc<Informer<ReplicaSet>>,
    pod_informer: Arc<Informer<Pod>>,
    d_store: Store<Deployment>,
    rs_store: Store<ReplicaSet>,
    pod_store: Store<Pod>,
    queue: Arc<WorkQueue>,
    events: Events,
}

// ---------------------------------------------------------------------------------------------
// Helpers (upstream `deployment/util`).

fn replicas(d: &Deployment) -> i32 {
    d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1)
}

fn rs_replicas(rs: &ReplicaSet) -> i32 {
    rs.spec.as_ref().and_then(|s| s.replicas).unwrap_or(0)
}

fn rs_status(rs: &ReplicaSet) -> (i32, i32, i32) {
    rs.status
        .as_ref()
        .map(|s| {
            (
                s.replicas,
                s.ready_replicas.unwrap_or(0),
                s.available_replicas.unwrap_or(0),
            )
        })
        .unwrap_or((0, 0, 0))
}

pub fn revision(meta: &ObjectMeta) -> i64 {
    meta.annotations
        .as_ref()
        .and_then(|a| a.get(REVISION))
        .and_then(|r| r.parse().ok())
        .unwrap_or(0)
}

fn is_rolling(d: &Deployment) -> bool {
    d.spec
        .as_ref()
        .and_then(|s| s.strategy.as_ref())
        .and_then(|s| s.type_.as_deref())
        .unwrap_or("RollingUpdate")
        == "RollingUpdate"
}

/// An int-or-percent against `total`, rounded up or down (apimachinery `GetScaledValueFromIntOrPercent`).
pub fn scaled_value(v: &IntOrString, total: i32, round_up: bool) -> Result<i32, Error> {
    match v {
        IntOrString::Int(i) => Ok(*i),
        IntOrString::String(s) => {
            let pct: i64 = s
                .strip_suffix('%')
                .and_then(|p| p.parse().ok())
                .ok_or_else(|| Error::Other(format!("invalid value for IntOrString: invalid value {s:?}")))?;
            let scaled = pct * total as i64;
            Ok(if round_up {
                (scaled + 99).div_euclid(100)
            } else {
                scaled.div_euclid(100)
            } as i32)
        }
    }
}

/// maxSurge (rounded up) and maxUnavailable (rounded down); both zero would deadlock, so
/// maxUnavailable becomes 1 then (upstream `ResolveFenceposts`).
pub fn fenceposts(d: &Deployment) -> Result<(i32, i32), Error> {
    let desired = replicas(d);
    let ru = d
        .spec
        .as_ref()
        .and_then(|s| s.strategy.as_ref())
        .and_then(|s| s.rolling_update.clone())
        .unwrap_or_default();
    let pct = IntOrString::String("25%".into());
    let surge = scaled_value(ru.max_surge.as_ref().unwrap_or(&pct), desired, true)?;
    let unavailable = scaled_value(ru.max_unavailable.as_ref().unwrap_or(&pct), desired, false)?;
    if surge == 0 && unavailable == 0 {
        return Ok((0, 1));
    }
    Ok((surge, unavailable))
}

fn max_surge(d: &Deployment) -> i32 {
    if !is_rolling(d) {
        return 0;
    }
    fenceposts(d).map(|f| f.0).unwrap_or(0)
}

fn max_unavailable(d: &Deployment) -> i32 {
    if !is_rolling(d) || replicas(d) == 0 {
        return 0;
    }
    fenceposts(d).map(|f| f.1.min(replicas(d))).unwrap_or(0)
}

/// FNV-1a (32 bit) of the template's JSON and the collision count, written with the alphabet
/// upstream uses for generated names (no vowels, no look-alikes). The value differs from
/// upstream's (which hashes a Go struct dump) but serves the same purpose: stable per template.
pub fn pod_template_hash(template: &PodTemplateSpec, collision_count: Option<i32>) -> String {
    let mut h: u32 = 0x811c9dc5;
    let mut feed = |bytes: &[u8]| {
        for b in bytes {
            h ^= *b as u32;
            h = h.wrapping_mul(0x01000193);
        }
    };
    feed(&serde_json::to_vec(template).unwrap_or_default());
    if let Some(c) = collision_count {
        feed(&(c as u32).to_le_bytes());
    }
    const ALPHANUMS: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    h.to_string()
        .bytes()
        .map(|b| ALPHANUMS[b as usize % ALPHANUMS.len()] as char)
        .collect()
}

/// Templates equal once the pod-template-hash label is ignored.
pub fn equal_ignore_hash(a: &PodTemplateSpec, b: &PodTemplateSpec) -> bool {
    let strip = |t: &PodTemplateSpec| {
        let mut t = t.clone();
        if let Some(labels) = t.metadata.as_mut().and_then(|m| m.labels.as_mut()) {
            labels.remove(POD_TEMPLATE_HASH);
        }
        if t.metadata
            .as_ref()
            .is_some_and(|m| m.labels.as_ref().is_some_and(|l| l.is_empty()))
        {
            t.metadata.as_mut().unwrap().labels = None;
        }
        if t.metadata.as_ref() == Some(&ObjectMeta::default()) {
            t.metadata = None;
        }
        t
    };
    strip(a) == strip(b)
}

fn template(d: &Deployment) -> PodTemplateSpec {
    d.spec.as_ref().map(|s| s.template.clone()).unwrap_or_default()
}

fn rs_template(rs: &ReplicaSet) -> PodTemplateSpec {
    rs.spec
        .as_ref()
        .and_then(|s| s.template.clone())
        .unwrap_or_default()
}

fn by_creation(a: &ReplicaSet, b: &ReplicaSet) -> std::cmp::Ordering {
    let t = |r: &ReplicaSet| r.metadata.creation_timestamp.as_ref().map(|t| t.0);
    t(a).cmp(&t(b)).then_with(|| a.name_any().cmp(&b.name_any()))
}

fn condition<'a>(status: &'a DeploymentStatus, type_: &str) -> Option<&'a DeploymentCondition> {
    status.conditions.iter().flatten().find(|c| c.type_ == type_)
}

fn new_condition(type_: &str, status: &str, reason: &str, message: String) -> DeploymentCondition {
    let now = Time(jiff::Timestamp::now());
    DeploymentCondition {
        type_: type_.into(),
        status: status.into(),
        reason: Some(reason.into()),
        message: Some(message),
        last_update_time: Some(now.clone()),
        last_transition_time: Some(now),
    }
}

/// Set a condition unless one with the same status and reason is there; a status that does
/// not change keeps its lastTransitionTime (upstream `SetDeploymentCondition`).
fn set_condition(status: &mut DeploymentStatus, mut c: DeploymentCondition) {
    let conditions = status.conditions.get_or_insert_with(Vec::new);
    if let Some(cur) = conditions.iter().find(|x| x.type_ == c.type_) {
        if cur.status == c.status && cur.reason == c.reason {
            return;
        }
        if cur.status == c.status {
            c.last_transition_time = cur.last_transition_time.clone();
        }
    }
    conditions.retain(|x| x.type_ != c.type_);
    conditions.push(c);
}

fn remove_condition(status: &mut DeploymentStatus, type_: &str) {
    if let Some(cs) = status.conditions.as_mut() {
        cs.retain(|c| c.type_ != type_);
    }
}

fn progress_deadline(d: &Deployment) -> Option<i32> {
    d.spec
        .as_ref()
        .and_then(|s| s.progress_deadline_seconds)
        .filter(|s| *s != i32::MAX)
}

fn paused(d: &Deployment) -> bool {
    d.spec.as_ref().and_then(|s| s.paused).unwrap_or(false)
}

/// Status from the ReplicaSets (upstream `calculateStatus`).
pub fn calculate_status(all: &[ReplicaSet], new_rs: Option<&ReplicaSet>, d: &Deployment) -> DeploymentStatus {
    let available: i32 = all.iter().map(|r| rs_status(r).2).sum();
    let total_spec: i32 = all.iter().map(rs_replicas).sum();
    let old = d.status.clone().unwrap_or_default();
    let mut status = DeploymentStatus {
        observed_generation: d.metadata.generation,
        replicas: Some(all.iter().map(|r| rs_status(r).0).sum()),
        updated_replicas: Some(new_rs.map(|r| rs_status(r).0).unwrap_or(0)),
        ready_replicas: Some(all.iter().map(|r| rs_status(r).1).sum()),
        available_replicas: Some(available),
        unavailable_replicas: Some((total_spec - available).max(0)),
        collision_count: old.collision_count,
        conditions: old.conditions.clone(),
        terminating_replicas: None,
    };
    if available >= replicas(d) - max_unavailable(d) {
        set_condition(
            &mut status,
            new_condition(
                "Available",
                "True",
                "MinimumReplicasAvailable",
                "Deployment has minimum availability.".into(),
            ),
        );
    } else {
        set_condition(
            &mut status,
            new_condition(
                "Available",
                "False",
                "MinimumReplicasUnavailable",
                "Deployment does not have minimum availability.".into(),
            ),
        );
    }
    status
}

/// Every replica updated and available, and the latest spec observed.
pub fn complete(d: &Deployment, s: &DeploymentStatus) -> bool {
    let want = replicas(d);
    s.updated_replicas == Some(want)
        && s.replicas == Some(want)
        && s.available_replicas == Some(want)
        && s.observed_generation >= d.metadata.generation
}

/// Did anything move forward since the last status (upstream `DeploymentProgressing`)?
fn progressing(d: &Deployment, new: &DeploymentStatus) -> bool {
    let old = d.status.clone().unwrap_or_default();
    let v = |x: Option<i32>| x.unwrap_or(0);
    let old_old = v(old.replicas) - v(old.updated_replicas);
    let new_old = v(new.replicas) - v(new.updated_replicas);
    v(new.updated_replicas) > v(old.updated_replicas)
        || new_old < old_old
        || v(new.ready_replicas) > v(old.ready_replicas)
        || v(new.available_replicas) > v(old.available_replicas)
}

fn timed_out(d: &Deployment, s: &DeploymentStatus) -> bool {
    let Some(deadline) = progress_deadline(d) else {
        return false;
    };
    let Some(c) = condition(s, "Progressing") else {
        return false;
    };
    match c.reason.as_deref() {
        Some("NewReplicaSetAvailable") => return false,
        Some("ProgressDeadlineExceeded") => return true,
        _ => {}
    }
    let Some(from) = c.last_update_time.as_ref().map(|t| t.0) else {
        return false;
    };
    from.checked_add(jiff::SignedDuration::from_secs(deadline as i64))
        .is_ok_and(|end| end < jiff::Timestamp::now())
}

/// The number of replicas the new ReplicaSet may have now (upstream `NewRSNewReplicas`).
pub fn new_rs_new_replicas(d: &Deployment, all: &[&ReplicaSet], new_rs_replicas: i32) -> Result<i32, Error> {
    if !is_rolling(d) {
        return Ok(replicas(d));
    }
    let (surge, _) = fenceposts(d)?;
    let current: i32 = all.iter().map(|r| rs_replicas(r)).sum();
    let max_total = replicas(d) + surge;
    if current >= max_total {
        return Ok(new_rs_replicas);
    }
    let up = (max_total - current).min(replicas(d) - new_rs_replicas);
    Ok(new_rs_replicas + up.max(0))
}

/// Set desired-replicas and max-replicas; true if anything changed.
fn set_replicas_annotations(rs: &mut ReplicaSet, desired: i32, max: i32) -> bool {
    let a = rs.metadata.annotations.get_or_insert_with(BTreeMap::new);
    let mut changed = false;
    for (k, v) in [(DESIRED_REPLICAS, desired), (MAX_REPLICAS, max)] {
        let v = v.to_string();
        if a.get(k) != Some(&v) {
            a.insert(k.into(), v);
            changed = true;
        }
    }
    changed
}

/// Copy the Deployment's annotations and the new revision onto its new ReplicaSet; true if
/// anything changed (upstream `SetNewReplicaSetAnnotations`).
fn set_new_rs_annotations(d: &Deployment, rs: &mut ReplicaSet, new_revision: i64, exists: bool) -> bool {
    let mut changed = false;
    let da = d.metadata.annotations.clone().unwrap_or_default();
    let a = rs.metadata.annotations.get_or_insert_with(BTreeMap::new);
    for (k, v) in &da {
        if NOT_COPIED.contains(&k.as_str()) {
            continue;
        }
        if a.get(k) != Some(v) {
            a.insert(k.clone(), v.clone());
            changed = true;
        }
    }
    let old_revision = a.get(REVISION).cloned().unwrap_or_default();
    let old_rev: i64 = old_revision.parse().unwrap_or(0);
    if old_rev < new_revision {
        a.insert(REVISION.into(), new_revision.to_string());
        changed = true;
        if !old_revision.is_empty() {
            let history = match a.get(REVISION_HISTORY) {
                Some(h) if !h.is_empty() => format!("{h},{old_revision}"),
                _ => old_revision.clone(),
            };
            a.insert(REVISION_HISTORY.into(), history);
        }
    }
    if !exists && set_replicas_annotations(rs, replicas(d), replicas(d) + max_surge(d)) {
        changed = true;
    }
    changed
}

/// Proportion of `to_add` that goes to `rs` when a rolling Deployment is scaled mid-rollout
/// (upstream `getReplicaSetProportion`).
fn rs_proportion(rs: &ReplicaSet, d: &Deployment, to_add: i32, added: i32) -> i32 {
    if to_add == 0 || to_add == added {
        return 0;
    }
    let fraction = rs_fraction(rs, d);
    let allowed = to_add - added;
    if to_add > 0 {
        fraction.min(allowed)
    } else {
        fraction.max(allowed)
    }
}

fn rs_fraction(rs: &ReplicaSet, d: &Deployment) -> i32 {
    if replicas(d) == 0 {
        return -rs_replicas(rs);
    }
    let max = replicas(d) + max_surge(d);
    let annotated = rs
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(MAX_REPLICAS))
        .and_then(|v| v.parse::<i32>().ok())
        .unwrap_or_else(|| d.status.as_ref().and_then(|s| s.replicas).unwrap_or(0));
    if annotated == 0 {
        return 0;
    }
    let new_size = (rs_replicas(rs) as f64 * max as f64 / annotated as f64).round() as i32;
    new_size - rs_replicas(rs)
}

// ---------------------------------------------------------------------------------------------

impl DeploymentController {
    pub fn new(factory: &Factory, events: Events) -> Arc<Self> {
        let d_informer = factory.get::<Deployment>();
        let rs_informer = factory.get::<ReplicaSet>();
        let pod_informer = factory.get::<Pod>();
        let this = Arc::new(Self {
            client: factory.client(),
            d_store: d_informer.store(),
            rs_store: rs_informer.store(),
            pod_store: pod_informer.store(),
            d_informer,
            rs_informer,
            pod_informer,
            queue: WorkQueue::new("deployment"),
            events,
        });
        let q = this.queue.clone();
        this.d_informer.add_handler(move |c| match c {
            Change::Added(o) | Change::Deleted(o) | Change::Updated(_, o) => q.add(key_of(&**o)),
        });
        let weak = Arc::downgrade(&this);
        this.rs_informer.add_handler(move |c| {
            let Some(this) = weak.upgrade() else { return };
            match c {
                Change::Added(rs) | Change::Deleted(rs) => this.enqueue_for_rs(rs),
                Change::Updated(old, new) => {
                    if old.metadata.resource_version == new.metadata.resource_version {
                        return;
                    }
                    if controller_of(&old.metadata).map(|r| &r.uid)
                        != controller_of(&new.metadata).map(|r| &r.uid)
                    {
                        this.enqueue_for_rs(old);
                    }
                    this.enqueue_for_rs(new);
                }
            }
        });
        let weak = Arc::downgrade(&this);
        this.pod_informer.add_handler(move |c| {
            let Some(this) = weak.upgrade() else { return };
            // Recreate waits for the old pods to be gone.
            if let Change::Deleted(pod) = c {
                let Some(r) = controller_of(&pod.metadata) else {
                    return;
                };
                let ns = pod.metadata.namespace.clone().unwrap_or_default();
                if let Some(rs) = lookup(&this.rs_store, &format!("{ns}/{}", r.name)) {
                    if let Some(key) = this.owner_key(&rs) {
                        if lookup(&this.d_store, &key).is_some_and(|d| !is_rolling(&d)) {
                            this.queue.add(key);
                        }
                    }
                }
            }
        });
        this
    }

    fn owner_key(&self, rs: &ReplicaSet) -> Option<String> {
        let r = controller_of(&rs.metadata)?;
        if r.kind != "Deployment" {
            return None;
        }
        let key = format!("{}/{}", rs.metadata.namespace.as_deref().unwrap_or(""), r.name);
        let d = lookup(&self.d_store, &key)?;
        (d.metadata.uid.as_deref() == Some(r.uid.as_str())).then_some(key)
    }

    fn enqueue_for_rs(&self, rs: &ReplicaSet) {
        if let Some(key) = self.owner_key(rs) {
            return self.queue.add(key);
        }
        if controller_of(&rs.metadata).is_some() {
            return;
        }
        // An orphan: any Deployment selecting it may adopt it.
        for d in self.d_store.state() {
            if d.metadata.namespace != rs.metadata.namespace {
                continue;
            }
            let sel = d.spec.as_ref().map(|s| &s.selector);
            if label_selector_as_selector(sel).is_ok_and(|m| m.matches_labels(rs.metadata.labels.as_ref())) {
                self.queue.add(key_of(&*d));
            }
        }
    }

    pub async fn run(self: Arc<Self>, workers: usize, stop: CancellationToken) {
        let (a, b, c) = (
            self.d_informer.clone(),
            self.rs_informer.clone(),
            self.pod_informer.clone(),
        );
        let this = self.clone();
        run_controller(
            self.queue.clone(),
            vec![
                Box::pin(async move { a.wait_synced().await }),
                Box::pin(async move { b.wait_synced().await }),
                Box::pin(async move { c.wait_synced().await }),
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

    fn d_api(&self, d: &Deployment) -> Api<Deployment> {
        Api::namespaced(self.client.clone(), &d.namespace().unwrap_or_default())
    }

    fn rs_api(&self, d: &Deployment) -> Api<ReplicaSet> {
        Api::namespaced(self.client.clone(), &d.namespace().unwrap_or_default())
    }

    pub async fn sync(&self, key: &str) -> SyncResult {
        let Some(d) = lookup(&self.d_store, key) else {
            return Ok(None);
        };
        // The journey's `deployment.sync` stage (`r8s trace`), kept when it did something.
        let stage = tracing::info_span!(
            target: "journey::controller-manager",
            "deployment.sync",
            uid = d.metadata.uid.as_deref().unwrap_or(""),
            object = %format_args!("Deployment {key}"),
            decision = tracing::field::Empty,
            error = tracing::field::Empty,
        );
        let result = tracing::Instrument::instrument(self.sync_deployment(d), stage.clone()).await;
        if let Err(e) = &result {
            stage.record("error", tracing::field::display(e));
        }
        result
    }

    async fn sync_deployment(&self, d: Arc<Deployment>) -> SyncResult {
        let mut d = (*d).clone();
        let selector = d.spec.as_ref().map(|s| s.selector.clone()).unwrap_or_default();
        let matcher = crate::selector(Some(&selector))?;
        if matcher.selects_all() {
            self.events.warning(
                &d,
                "SelectingAll",
                "This deployment is selecting all pods. A non-empty selector is required.".into(),
            );
            let mut status = d.status.clone().unwrap_or_default();
            if status.observed_generation < d.metadata.generation {
                status.observed_generation = d.metadata.generation;
                self.update_status(&d, status).await?;
            }
            return Ok(None);
        }
        let mut rs_list = self.claim_replicasets(&d, &matcher).await?;
        if d.metadata.deletion_timestamp.is_some() {
            self.sync_status_only(&mut d, &mut rs_list).await?;
            return Ok(None);
        }
        self.check_paused_conditions(&mut d).await?;
        if paused(&d) {
            self.sync_scale(&mut d, &mut rs_list).await?;
            return Ok(None);
        }
        if self.is_scaling_event(&d, &rs_list) {
            self.sync_scale(&mut d, &mut rs_list).await?;
            return Ok(None);
        }
        if is_rolling(&d) {
            self.rollout_rolling(&mut d, &mut rs_list).await
        } else {
            self.rollout_recreate(&mut d, &mut rs_list).await
        }
    }

    /// The ReplicaSets this Deployment owns after adopting matching orphans and releasing
    /// owned ones that stopped matching.
    async fn claim_replicasets(&self, d: &Deployment, matcher: &Selector) -> Result<Vec<ReplicaSet>, Error> {
        let candidates = self
            .rs_store
            .state()
            .into_iter()
            .filter(|rs| rs.metadata.namespace == d.metadata.namespace);
        let owned = crate::claim::claim(d, &self.d_api(d), &self.rs_api(d), matcher, candidates).await?;
        let mut owned: Vec<ReplicaSet> = owned.into_iter().map(|rs| (*rs).clone()).collect();
        owned.sort_by(by_creation);
        Ok(owned)
    }

    /// Index of the new ReplicaSet (the oldest whose template equals the Deployment's).
    fn find_new(d: &Deployment, rs_list: &[ReplicaSet]) -> Option<usize> {
        let t = template(d);
        rs_list
            .iter()
            .position(|rs| equal_ignore_hash(&rs_template(rs), &t))
    }

    fn is_scaling_event(&self, d: &Deployment, rs_list: &[ReplicaSet]) -> bool {
        rs_list.iter().filter(|rs| rs_replicas(rs) > 0).any(|rs| {
            rs.metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(DESIRED_REPLICAS))
                .and_then(|v| v.parse::<i32>().ok())
                .is_some_and(|desired| desired != replicas(d))
        })
    }

    async fn check_paused_conditions(&self, d: &mut Deployment) -> Result<(), Error> {
        if progress_deadline(d).is_none() {
            return Ok(());
        }
        let mut status = d.status.clone().unwrap_or_default();
        let reason = condition(&status, "Progressing").and_then(|c| c.reason.clone());
        let paused_reason = reason.as_deref() == Some("DeploymentPaused");
        let update = if paused(d) && !paused_reason {
            set_condition(
                &mut status,
                new_condition(
                    "Progressing",
                    "Unknown",
                    "DeploymentPaused",
                    "Deployment is paused".into(),
                ),
            );
            true
        } else if !paused(d) && paused_reason {
            set_condition(
                &mut status,
                new_condition(
                    "Progressing",
                    "Unknown",
                    "DeploymentResumed",
                    "Deployment is resumed".into(),
                ),
            );
            true
        } else {
            false
        };
        if update {
            *d = self.update_status(d, status).await?;
        }
        Ok(())
    }

    async fn update_status(&self, d: &Deployment, status: DeploymentStatus) -> Result<Deployment, Error> {
        let mut updated = d.clone();
        updated.status = Some(status.clone());
        let api = self.d_api(d);
        match api
            .replace_status(&d.name_any(), &crate::post_params(), &updated)
            .await
        {
            Ok(d) => Ok(d),
            Err(kube::Error::Api(e)) if e.code == 409 => {
                // Our cache is behind our own last write: the status is computed from the
                // ReplicaSets, so put it on the current object once.
                let mut fresh = api.get(&d.name_any()).await?;
                if fresh.metadata.uid != d.metadata.uid || fresh.metadata.generation != d.metadata.generation
                {
                    return Err(Error::Other("deployment changed during sync".into()));
                }
                fresh.status = Some(status);
                Ok(api
                    .replace_status(&d.name_any(), &crate::post_params(), &fresh)
                    .await?)
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Record the new revision on the Deployment (an update at the version the controller saw,
    /// as upstream: its role may update deployments but not patch them; a conflict retries).
    async fn set_revision(&self, d: &mut Deployment, revision: &str) -> Result<(), Error> {
        let current = d.metadata.annotations.as_ref().and_then(|a| a.get(REVISION));
        if current.map(String::as_str) == Some(revision) {
            return Ok(());
        }
        let mut updated = d.clone();
        updated
            .metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert(REVISION.to_owned(), revision.to_owned());
        let written = self
            .d_api(d)
            .replace(&d.name_any(), &crate::post_params(), &updated)
            .await?;
        d.metadata = written.metadata;
        Ok(())
    }

    /// The new ReplicaSet (created if `create` and missing, its annotations brought up to date)
    /// and the old ones (upstream `getAllReplicaSetsAndSyncRevision`).
    async fn get_all(
        &self,
        d: &mut Deployment,
        rs_list: &mut Vec<ReplicaSet>,
        create: bool,
    ) -> Result<(Option<usize>, Vec<usize>), Error> {
        let new_idx = Self::find_new(d, rs_list);
        let old: Vec<usize> = (0..rs_list.len()).filter(|i| Some(*i) != new_idx).collect();
        let max_old = old
            .iter()
            .map(|i| revision(&rs_list[*i].metadata))
            .max()
            .unwrap_or(0);
        let new_revision = max_old + 1;
        if let Some(i) = new_idx {
            let mut rs = rs_list[i].clone();
            let min_ready = d.spec.as_ref().and_then(|s| s.min_ready_seconds);
            let changed = set_new_rs_annotations(d, &mut rs, new_revision, true);
            let min_ready_changed = rs.spec.as_ref().and_then(|s| s.min_ready_seconds) != min_ready;
            if changed || min_ready_changed {
                if let Some(spec) = rs.spec.as_mut() {
                    spec.min_ready_seconds = min_ready;
                }
                rs = self
                    .rs_api(d)
                    .replace(&rs.name_any(), &crate::post_params(), &rs)
                    .await?;
                rs_list[i] = rs.clone();
            }
            let rev = revision(&rs.metadata).to_string();
            self.set_revision(d, &rev).await?;
            if progress_deadline(d).is_some() {
                let status = d.status.clone().unwrap_or_default();
                if condition(&status, "Progressing").is_none() {
                    let mut status = status;
                    set_condition(
                        &mut status,
                        new_condition(
                            "Progressing",
                            "True",
                            "FoundNewReplicaSet",
                            format!("Found new replica set \"{}\"", rs.name_any()),
                        ),
                    );
                    *d = self.update_status(d, status).await?;
                }
            }
            return Ok((Some(i), old));
        }
        if !create {
            return Ok((None, old));
        }
        // Create the new ReplicaSet.
        let collision = d.status.as_ref().and_then(|s| s.collision_count);
        let mut tmpl = template(d);
        let hash = pod_template_hash(&tmpl, collision);
        tmpl.metadata
            .get_or_insert_with(Default::default)
            .labels
            .get_or_insert_with(BTreeMap::new)
            .insert(POD_TEMPLATE_HASH.into(), hash.clone());
        let spec = d.spec.clone().unwrap_or_default();
        let mut selector: LabelSelector = spec.selector.clone();
        selector
            .match_labels
            .get_or_insert_with(BTreeMap::new)
            .insert(POD_TEMPLATE_HASH.into(), hash.clone());
        let name = format!("{}-{hash}", d.name_any());
        let mut rs = ReplicaSet {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                namespace: d.metadata.namespace.clone(),
                owner_references: Some(vec![controller_ref(d)]),
                labels: tmpl.metadata.as_ref().and_then(|m| m.labels.clone()),
                ..Default::default()
            },
            spec: Some(ReplicaSetSpec {
                replicas: Some(0),
                min_ready_seconds: spec.min_ready_seconds,
                selector,
                template: Some(tmpl),
            }),
            status: None,
        };
        let olds: Vec<&ReplicaSet> = old.iter().map(|i| &rs_list[*i]).collect();
        let new_replicas = new_rs_new_replicas(d, &olds, 0)?;
        rs.spec.as_mut().unwrap().replicas = Some(new_replicas);
        set_new_rs_annotations(d, &mut rs, new_revision, false);
        let api = self.rs_api(d);
        let created = match api.create(&crate::post_params(), &rs).await {
            Ok(created) => {
                tracing::Span::current().record(
                    "decision",
                    tracing::field::display(format_args!(
                        "created ReplicaSet {name} with {new_replicas} replicas"
                    )),
                );
                if new_replicas > 0 {
                    self.events.normal(
                        d,
                        "ScalingReplicaSet",
                        format!("Scaled up replica set {name} from 0 to {new_replicas}"),
                    );
                }
                created
            }
            Err(kube::Error::Api(s)) if s.code == 409 => {
                // Either ours from a sync whose cache lagged, or a real hash collision.
                let existing = api.get(&name).await?;
                let ours =
                    controller_of(&existing.metadata).map(|r| r.uid.as_str()) == d.metadata.uid.as_deref();
                if ours && equal_ignore_hash(&rs_template(&existing), &template(d)) {
                    existing
                } else {
                    let mut status = d.status.clone().unwrap_or_default();
                    status.collision_count = Some(status.collision_count.unwrap_or(0) + 1);
                    self.update_status(d, status).await?;
                    return Err(Error::Other(format!("hash collision for ReplicaSet {name}")));
                }
            }
            Err(e) => {
                let e = Error::from(e);
                let msg = match &e {
                    Error::Kube(kube::Error::Api(s)) => s.message.clone(),
                    other => other.to_string(),
                };
                self.events.warning(
                    d,
                    "FailedCreate",
                    format!("Failed to create new replica set \"{name}\": {msg}"),
                );
                if progress_deadline(d).is_some() {
                    let mut status = d.status.clone().unwrap_or_default();
                    set_condition(
                        &mut status,
                        new_condition(
                            "Progressing",
                            "False",
                            "ReplicaSetCreateError",
                            format!("Failed to create new replica set \"{name}\": {msg}"),
                        ),
                    );
                    let _ = self.update_status(d, status).await;
                }
                return Err(e);
            }
        };
        self.set_revision(d, &new_revision.to_string()).await?;
        if progress_deadline(d).is_some() {
            let mut status = d.status.clone().unwrap_or_default();
            set_condition(
                &mut status,
                new_condition(
                    "Progressing",
                    "True",
                    "NewReplicaSetCreated",
                    format!("Created new replica set \"{name}\""),
                ),
            );
            *d = self.update_status(d, status).await?;
        }
        rs_list.push(created);
        Ok((Some(rs_list.len() - 1), old))
    }

    /// Scale one ReplicaSet, keeping its replica annotations current; true if its size changed.
    async fn scale_rs(&self, d: &Deployment, rs: &mut ReplicaSet, size: i32) -> Result<bool, Error> {
        let before = rs_replicas(rs);
        let mut copy = rs.clone();
        let annotations_changed =
            set_replicas_annotations(&mut copy, replicas(d), replicas(d) + max_surge(d));
        if before == size && !annotations_changed {
            return Ok(false);
        }
        // A patch, not a whole-object update: the ReplicaSet controller writes its status all
        // the time, and the size and these annotations are only ever ours to set.
        let annotations = copy.metadata.annotations.clone().unwrap_or_default();
        let patch = json!({
            "metadata": {
                "uid": rs.metadata.uid,
                "annotations": {
                    DESIRED_REPLICAS: annotations.get(DESIRED_REPLICAS),
                    MAX_REPLICAS: annotations.get(MAX_REPLICAS),
                },
            },
            "spec": {"replicas": size},
        });
        *rs = self
            .rs_api(d)
            .patch(&rs.name_any(), &crate::patch_params(), &Patch::Merge(&patch))
            .await?;
        if before != size {
            let dir = if size > before { "up" } else { "down" };
            tracing::Span::current().record(
                "decision",
                tracing::field::display(format_args!(
                    "scaled {dir} ReplicaSet {} from {before} to {size}",
                    rs.name_any()
                )),
            );
            self.events.normal(
                d,
                "ScalingReplicaSet",
                format!(
                    "Scaled {dir} replica set {} from {before} to {size}",
                    rs.name_any()
                ),
            );
        }
        Ok(before != size)
    }

    /// Scaling without a template change (upstream `scale`): all replicas to the only active
    /// ReplicaSet, old ones to zero once the new one is saturated, or proportionally.
    async fn scale(
        &self,
        d: &Deployment,
        rs_list: &mut [ReplicaSet],
        new_idx: Option<usize>,
    ) -> Result<(), Error> {
        let want = replicas(d);
        let active: Vec<usize> = (0..rs_list.len())
            .filter(|i| rs_replicas(&rs_list[*i]) > 0)
            .collect();
        let only = match active.len() {
            0 => new_idx.or_else(|| (!rs_list.is_empty()).then(|| rs_list.len() - 1)),
            1 => Some(active[0]),
            _ => None,
        };
        if let Some(i) = only {
            if rs_replicas(&rs_list[i]) != want {
                self.scale_rs(d, &mut rs_list[i], want).await?;
            }
            return Ok(());
        }
        if let Some(n) = new_idx {
            let rs = &rs_list[n];
            let desired_ann = rs
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(DESIRED_REPLICAS))
                .and_then(|v| v.parse::<i32>().ok());
            let saturated = rs_replicas(rs) == want && desired_ann == Some(want) && rs_status(rs).2 == want;
            if saturated {
                for (i, rs) in rs_list.iter_mut().enumerate() {
                    if i != n && rs_replicas(rs) > 0 {
                        self.scale_rs(d, rs, 0).await?;
                    }
                }
                return Ok(());
            }
        }
        if !is_rolling(d) {
            return Ok(());
        }
        // Proportional scaling during a rollout.
        let total: i32 = active.iter().map(|i| rs_replicas(&rs_list[*i])).sum();
        let allowed = if want > 0 { want + max_surge(d) } else { 0 };
        let to_add = allowed - total;
        let mut order = active.clone();
        order.sort_by(|a, b| {
            let (ra, rb) = (&rs_list[*a], &rs_list[*b]);
            let size = rs_replicas(rb).cmp(&rs_replicas(ra));
            if to_add > 0 {
                size.then(by_creation(rb, ra))
            } else {
                size.then(by_creation(ra, rb))
            }
        });
        let mut added = 0;
        let mut sizes: Vec<(usize, i32)> = Vec::new();
        for &i in &order {
            let p = rs_proportion(&rs_list[i], d, to_add, added);
            sizes.push((i, rs_replicas(&rs_list[i]) + p));
            added += p;
        }
        if let Some(first) = sizes.first_mut() {
            let leftover = to_add - added;
            if leftover != 0 {
                first.1 = (first.1 + leftover).max(0);
            }
        }
        for (i, size) in sizes {
            self.scale_rs(d, &mut rs_list[i], size.max(0)).await?;
        }
        Ok(())
    }

    /// Scaling or paused: no rollout, only sizes and status (upstream `sync`).
    async fn sync_scale(&self, d: &mut Deployment, rs_list: &mut Vec<ReplicaSet>) -> Result<(), Error> {
        let (new_idx, old) = self.get_all(d, rs_list, false).await?;
        self.scale(d, rs_list, new_idx).await?;
        if paused(d) {
            self.cleanup(d, rs_list, &old).await?;
        }
        self.sync_status_only_with(d, rs_list, new_idx).await
    }

    async fn sync_status_only(&self, d: &mut Deployment, rs_list: &mut Vec<ReplicaSet>) -> Result<(), Error> {
        let (new_idx, _) = self.get_all(d, rs_list, false).await?;
        self.sync_status_only_with(d, rs_list, new_idx).await
    }

    async fn sync_status_only_with(
        &self,
        d: &Deployment,
        rs_list: &[ReplicaSet],
        new_idx: Option<usize>,
    ) -> Result<(), Error> {
        let status = calculate_status(rs_list, new_idx.map(|i| &rs_list[i]), d);
        if d.status.as_ref() != Some(&status) {
            self.update_status(d, status).await?;
        }
        Ok(())
    }

    async fn rollout_rolling(&self, d: &mut Deployment, rs_list: &mut Vec<ReplicaSet>) -> SyncResult {
        let (new_idx, old) = self.get_all(d, rs_list, true).await?;
        let n = new_idx.expect("created");
        // Scale up the new ReplicaSet as far as maxSurge allows.
        let want = replicas(d);
        let cur = rs_replicas(&rs_list[n]);
        let target = if cur > want {
            want
        } else {
            let all: Vec<&ReplicaSet> = rs_list.iter().collect();
            new_rs_new_replicas(d, &all, cur)?
        };
        if target != cur && self.scale_rs(d, &mut rs_list[n], target).await? {
            return self.sync_rollout_status(d, rs_list, Some(n)).await;
        }
        // Scale down old ones as far as maxUnavailable allows.
        if self.reconcile_old(d, rs_list, n, &old).await? {
            return self.sync_rollout_status(d, rs_list, Some(n)).await;
        }
        let status = calculate_status(rs_list, Some(&rs_list[n]), d);
        if complete(d, &status) {
            self.cleanup(d, rs_list, &old).await?;
        }
        self.sync_rollout_status(d, rs_list, Some(n)).await
    }

    /// Upstream `reconcileOldReplicaSets`: first remove unhealthy old replicas, then scale old
    /// ones down while at least `replicas - maxUnavailable` stay available.
    async fn reconcile_old(
        &self,
        d: &Deployment,
        rs_list: &mut [ReplicaSet],
        n: usize,
        old: &[usize],
    ) -> Result<bool, Error> {
        let old_count: i32 = old.iter().map(|i| rs_replicas(&rs_list[*i])).sum();
        if old_count == 0 {
            return Ok(false);
        }
        let all_count: i32 = rs_list.iter().map(rs_replicas).sum();
        let min_available = replicas(d) - max_unavailable(d);
        let new_unavailable = rs_replicas(&rs_list[n]) - rs_status(&rs_list[n]).2;
        let max_scale_down = all_count - min_available - new_unavailable;
        if max_scale_down <= 0 {
            return Ok(false);
        }
        let mut order: Vec<usize> = old.to_vec();
        order.sort_by(|a, b| by_creation(&rs_list[*a], &rs_list[*b]));
        // Unhealthy replicas first: they do not count towards availability anyway.
        let mut cleaned = 0;
        for &i in &order {
            if cleaned >= max_scale_down {
                break;
            }
            let spec = rs_replicas(&rs_list[i]);
            if spec == 0 {
                continue;
            }
            let unhealthy = spec - rs_status(&rs_list[i]).2;
            if unhealthy <= 0 {
                continue;
            }
            let down = (max_scale_down - cleaned).min(unhealthy);
            self.scale_rs(d, &mut rs_list[i], spec - down).await?;
            cleaned += down;
        }
        // Then healthy ones, as availability allows.
        let available: i32 = rs_list.iter().map(|r| rs_status(r).2).sum();
        let mut scaled = 0;
        if available > min_available {
            let total = available - min_available;
            for &i in &order {
                if scaled >= total {
                    break;
                }
                let spec = rs_replicas(&rs_list[i]);
                if spec == 0 {
                    continue;
                }
                let down = spec.min(total - scaled);
                self.scale_rs(d, &mut rs_list[i], spec - down).await?;
                scaled += down;
            }
        }
        Ok(cleaned + scaled > 0)
    }

    async fn rollout_recreate(&self, d: &mut Deployment, rs_list: &mut Vec<ReplicaSet>) -> SyncResult {
        let (mut new_idx, old) = self.get_all(d, rs_list, false).await?;
        let mut scaled_down = false;
        for &i in &old {
            if rs_replicas(&rs_list[i]) > 0 {
                scaled_down |= self.scale_rs(d, &mut rs_list[i], 0).await?;
            }
        }
        if scaled_down {
            return self.sync_rollout_status(d, rs_list, new_idx).await;
        }
        // Wait until no old pod is running any more.
        let old_uids: Vec<String> = old
            .iter()
            .filter_map(|i| rs_list[*i].metadata.uid.clone())
            .collect();
        let old_running = old.iter().any(|i| rs_status(&rs_list[*i]).0 > 0)
            || self.pod_store.state().iter().any(|p| {
                let phase = p.status.as_ref().and_then(|s| s.phase.as_deref());
                controller_of(&p.metadata).is_some_and(|r| old_uids.contains(&r.uid))
                    && phase != Some("Failed")
                    && phase != Some("Succeeded")
            });
        if old_running {
            return self.sync_rollout_status(d, rs_list, new_idx).await;
        }
        if new_idx.is_none() {
            new_idx = self.get_all(d, rs_list, true).await?.0;
        }
        let n = new_idx.expect("created");
        let want = replicas(d);
        if rs_replicas(&rs_list[n]) != want {
            self.scale_rs(d, &mut rs_list[n], want).await?;
        }
        let status = calculate_status(rs_list, Some(&rs_list[n]), d);
        if complete(d, &status) {
            self.cleanup(d, rs_list, &old).await?;
        }
        self.sync_rollout_status(d, rs_list, Some(n)).await
    }

    /// Delete old ReplicaSets beyond revisionHistoryLimit, oldest revision first, only those
    /// fully scaled down and observed (upstream `cleanupDeployment`).
    async fn cleanup(&self, d: &Deployment, rs_list: &[ReplicaSet], old: &[usize]) -> Result<(), Error> {
        let Some(limit) = d.spec.as_ref().and_then(|s| s.revision_history_limit) else {
            return Ok(());
        };
        let mut cleanable: Vec<&ReplicaSet> = old
            .iter()
            .map(|i| &rs_list[*i])
            .filter(|r| r.metadata.deletion_timestamp.is_none())
            .collect();
        let diff = cleanable.len() as i64 - limit as i64;
        if diff <= 0 {
            return Ok(());
        }
        cleanable.sort_by(|a, b| {
            revision(&a.metadata)
                .cmp(&revision(&b.metadata))
                .then(by_creation(a, b))
        });
        let api = self.rs_api(d);
        for rs in cleanable.into_iter().take(diff as usize) {
            let observed = rs.status.as_ref().and_then(|s| s.observed_generation) >= rs.metadata.generation;
            if rs_status(rs).0 != 0 || rs_replicas(rs) != 0 || !observed {
                continue;
            }
            match api.delete(&rs.name_any(), &DeleteParams::default()).await {
                Ok(_) => {
                    tracing::Span::current().record(
                        "decision",
                        tracing::field::display(format_args!("deleted old ReplicaSet {}", rs.name_any())),
                    );
                }
                Err(e) if r8s_client::is_not_found(&e) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    /// Status with the Progressing condition, and a requeue for the progress deadline
    /// (upstream `syncRolloutStatus` and `requeueStuckDeployment`).
    async fn sync_rollout_status(
        &self,
        d: &Deployment,
        rs_list: &[ReplicaSet],
        new_idx: Option<usize>,
    ) -> SyncResult {
        let new_rs = new_idx.map(|i| &rs_list[i]);
        let mut status = calculate_status(rs_list, new_rs, d);
        let deadline = progress_deadline(d);
        if deadline.is_none() {
            remove_condition(&mut status, "Progressing");
        }
        let cur = condition(&status, "Progressing").cloned();
        let is_complete = complete(d, &status);
        let timed_out_before =
            cur.as_ref().and_then(|c| c.reason.as_deref()) == Some("ProgressDeadlineExceeded");
        if deadline.is_some() && !paused(d) && !timed_out_before {
            let rs_name = new_rs.map(|r| r.name_any());
            if is_complete {
                let msg = match &rs_name {
                    Some(n) => format!("ReplicaSet \"{n}\" has successfully progressed."),
                    None => "Deployment has successfully progressed.".into(),
                };
                set_condition(
                    &mut status,
                    new_condition("Progressing", "True", "NewReplicaSetAvailable", msg),
                );
            } else if progressing(d, &status) {
                let msg = match &rs_name {
                    Some(n) => format!("ReplicaSet \"{n}\" is progressing."),
                    None => format!("Deployment \"{}\" is progressing.", d.name_any()),
                };
                let mut c = new_condition("Progressing", "True", "ReplicaSetUpdated", msg);
                if let Some(cur) = &cur {
                    if cur.status == "True" {
                        c.last_transition_time = cur.last_transition_time.clone();
                    }
                }
                remove_condition(&mut status, "Progressing");
                status.conditions.get_or_insert_with(Vec::new).push(c);
            } else if timed_out(d, &status) {
                let msg = match &rs_name {
                    Some(n) => format!("ReplicaSet \"{n}\" has timed out progressing."),
                    None => format!("Deployment \"{}\" has timed out progressing.", d.name_any()),
                };
                set_condition(
                    &mut status,
                    new_condition("Progressing", "False", "ProgressDeadlineExceeded", msg),
                );
            }
        }
        // ReplicaFailure mirrors the ReplicaSets' own.
        match rs_list.iter().find_map(|rs| {
            rs.status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .and_then(|cs| {
                    cs.iter()
                        .find(|c| c.type_ == "ReplicaFailure" && c.status == "True")
                })
        }) {
            Some(f) => set_condition(
                &mut status,
                new_condition(
                    "ReplicaFailure",
                    "True",
                    f.reason.as_deref().unwrap_or("FailedCreate"),
                    f.message.clone().unwrap_or_default(),
                ),
            ),
            None => remove_condition(&mut status, "ReplicaFailure"),
        }
        if status.conditions.as_ref().is_some_and(|c| c.is_empty()) {
            status.conditions = None;
        }
        if d.status.as_ref() != Some(&status) {
            self.update_status(d, status.clone()).await?;
        }
        // Come back when the deadline would pass.
        if let (Some(secs), Some(c)) = (deadline, condition(&status, "Progressing")) {
            if !is_complete && c.reason.as_deref() != Some("ProgressDeadlineExceeded") && !paused(d) {
                if let Some(from) = c.last_update_time.as_ref().map(|t| t.0) {
                    let end = from
                        .checked_add(jiff::SignedDuration::from_secs(secs as i64))
                        .unwrap_or(from);
                    let left = end.duration_since(jiff::Timestamp::now());
                    let left = Duration::try_from(left).unwrap_or(Duration::ZERO);
                    return Ok(Some(left.max(Duration::from_secs(1))));
                }
            }
        }
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::apps::v1::{
        DeploymentSpec, DeploymentStrategy, ReplicaSetStatus, RollingUpdateDeployment,
    };

    fn deployment(replicas: i32, surge: IntOrString, unavailable: IntOrString) -> Deployment {
        Deployment {
            metadata: ObjectMeta {
                name: Some("web".into()),
                generation: Some(1),
                ..Default::default()
            },
            spec: Some(DeploymentSpec {
                replicas: Some(replicas),
                strategy: Some(DeploymentStrategy {
                    type_: Some("RollingUpdate".into()),
                    rolling_update: Some(RollingUpdateDeployment {
                        max_surge: Some(surge),
                        max_unavailable: Some(unavailable),
                    }),
                }),
                ..Default::default()
            }),
            status: None,
        }
    }

    fn rs(replicas: i32, available: i32) -> ReplicaSet {
        ReplicaSet {
            spec: Some(ReplicaSetSpec {
                replicas: Some(replicas),
                ..Default::default()
            }),
            status: Some(ReplicaSetStatus {
                replicas,
                available_replicas: Some(available),
                ready_replicas: Some(available),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn pct(s: &str) -> IntOrString {
        IntOrString::String(s.into())
    }

    #[test]
    fn fenceposts_round_surge_up_and_unavailable_down() {
        let d = deployment(10, pct("25%"), pct("25%"));
        assert_eq!(fenceposts(&d).unwrap(), (3, 2));
        let d = deployment(3, IntOrString::Int(0), IntOrString::Int(0));
        assert_eq!(fenceposts(&d).unwrap(), (0, 1));
        let d = deployment(3, pct("x%"), IntOrString::Int(0));
        assert!(fenceposts(&d).is_err());
    }

    #[test]
    fn new_replica_set_grows_within_max_surge() {
        // 10 replicas, surge 3: old has 10, the new one may have 3.
        let d = deployment(10, pct("25%"), pct("25%"));
        let old = rs(10, 10);
        assert_eq!(new_rs_new_replicas(&d, &[&old], 0).unwrap(), 3);
        // Already at the maximum total: no growth.
        let new = rs(3, 0);
        assert_eq!(new_rs_new_replicas(&d, &[&old, &new], 3).unwrap(), 3);
        // Never beyond the desired count.
        let d = deployment(2, IntOrString::Int(5), IntOrString::Int(0));
        assert_eq!(new_rs_new_replicas(&d, &[], 0).unwrap(), 2);
    }

    #[test]
    fn status_and_available_condition() {
        let d = deployment(3, IntOrString::Int(1), IntOrString::Int(0));
        let new = rs(3, 3);
        let s = calculate_status(std::slice::from_ref(&new), Some(&new), &d);
        assert_eq!(
            (s.replicas, s.updated_replicas, s.available_replicas),
            (Some(3), Some(3), Some(3))
        );
        assert_eq!(s.unavailable_replicas, Some(0));
        assert!(complete(&d, &s));
        let c = condition(&s, "Available").unwrap();
        assert_eq!(
            (c.status.as_str(), c.reason.as_deref()),
            ("True", Some("MinimumReplicasAvailable"))
        );
        let old = rs(1, 1);
        let half = rs(2, 1);
        let s = calculate_status(&[old, half.clone()], Some(&half), &d);
        assert!(!complete(&d, &s));
        assert_eq!(condition(&s, "Available").unwrap().status, "False");
    }

    #[test]
    fn template_hash_is_stable_and_ignores_its_own_label() {
        let mut t = PodTemplateSpec::default();
        let h1 = pod_template_hash(&t, None);
        assert_eq!(h1, pod_template_hash(&t, None));
        assert_ne!(h1, pod_template_hash(&t, Some(1)));
        assert!(h1.chars().all(|c| "bcdfghjklmnpqrstvwxz2456789".contains(c)));
        let mut labeled = t.clone();
        labeled.metadata = Some(ObjectMeta {
            labels: Some([(POD_TEMPLATE_HASH.to_string(), h1.clone())].into()),
            ..Default::default()
        });
        assert!(equal_ignore_hash(&t, &labeled));
        t.metadata = Some(ObjectMeta {
            labels: Some([("app".to_string(), "web".to_string())].into()),
            ..Default::default()
        });
        assert!(!equal_ignore_hash(&t, &labeled));
    }

    #[test]
    fn new_revision_is_recorded_with_history() {
        let mut d = deployment(1, pct("25%"), pct("25%"));
        d.metadata.annotations = Some(
            [
                (CHANGE_CAUSE.to_string(), "kubectl set image".to_string()),
                (
                    "kubectl.kubernetes.io/last-applied-configuration".to_string(),
                    "{}".to_string(),
                ),
            ]
            .into(),
        );
        let mut r = rs(1, 1);
        r.metadata.annotations = Some([(REVISION.to_string(), "1".to_string())].into());
        assert!(set_new_rs_annotations(&d, &mut r, 3, true));
        let a = r.metadata.annotations.as_ref().unwrap();
        assert_eq!(a[REVISION], "3");
        assert_eq!(a[REVISION_HISTORY], "1");
        assert_eq!(a[CHANGE_CAUSE], "kubectl set image");
        assert!(!a.contains_key("kubectl.kubernetes.io/last-applied-configuration"));
        assert!(!set_new_rs_annotations(&d, &mut r, 3, true));
    }

    #[test]
    fn proportional_share_follows_max_replicas_annotation() {
        // Deployment scaled from 10 to 20 (surge 0): an RS of 5 annotated with max 10 gets +5.
        let d = deployment(20, IntOrString::Int(0), IntOrString::Int(1));
        let mut r = rs(5, 5);
        r.metadata.annotations = Some([(MAX_REPLICAS.to_string(), "10".to_string())].into());
        assert_eq!(rs_proportion(&r, &d, 10, 0), 5);
        assert_eq!(rs_proportion(&r, &d, 10, 8), 2);
        assert_eq!(rs_proportion(&r, &d, 0, 0), 0);
    }
}
