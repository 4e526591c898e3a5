//! The ReplicaSet controller (upstream `pkg/controller/replicaset`): keeps `spec.replicas` pods
//! matching the selector, owned through a controller ownerReference. The same code keeps
//! ReplicationControllers (upstream's replication manager is this controller over a conversion
//! of each ReplicationController to a ReplicaSet; see [`Replicated`]).
//!
//! Per sync: claim pods (adopt matching orphans, release owned pods that stopped matching),
//! then — if no earlier creates or deletes are still unobserved — create the missing pods in
//! slow-start batches (1, 2, 4, …; a failure stops the rest) or delete the surplus, worst-ranked
//! first; then write status (replicas, fullyLabeled, ready, available, ReplicaFailure).

use std::cmp::Ordering;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{ReplicaSet, ReplicaSetCondition, ReplicaSetSpec, ReplicaSetStatus};
use k8s_openapi::api::core::v1::{
    Pod, ReplicationController, ReplicationControllerCondition, ReplicationControllerStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, Time};
use kube::api::Api;
use kube::runtime::reflector::Store;
use kube::{Client, ResourceExt};
use tokio_util::sync::CancellationToken;

use crate::claim::owner_key;
use crate::Error;
use crate::SyncResult;
use r8s_api::selector::{label_selector_as_selector, Selector};
use r8s_client::events::Events;
use r8s_client::expectations::Expectations;
use r8s_client::informer::{key_of, lookup, Change, Factory, Informer, Object};
use r8s_client::queue::{run_controller, WorkQueue};

/// Upstream's `BurstReplicas`: at most this many creates or deletes per sync.
pub const BURST_REPLICAS: usize = 500;

/// What the controller keeps replicas of: ReplicaSets, and ReplicationControllers seen as
/// ReplicaSets (their map selector as `matchLabels`, their status as a ReplicaSet's).
pub trait Replicated:
    Object
    + kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>
    + k8s_openapi::Resource
    + k8s_openapi::Metadata<Ty = ObjectMeta>
    + serde::Serialize
{
    /// The work queue's name.
    const QUEUE: &'static str;
    /// This object as a ReplicaSet (spec and status; metadata as it is).
    fn as_replica_set(&self) -> ReplicaSet;
    /// This object with the status of `status`.
    fn with_status(&self, status: ReplicaSetStatus) -> Self;
}

impl Replicated for ReplicaSet {
    const QUEUE: &'static str = "replicaset";
    fn as_replica_set(&self) -> ReplicaSet {
        self.clone()
    }
    fn with_status(&self, status: ReplicaSetStatus) -> Self {
        let mut rs = self.clone();
        rs.status = Some(status);
        rs
    }
}

impl Replicated for ReplicationController {
    const QUEUE: &'static str = "replicationmanager";
    fn as_replica_set(&self) -> ReplicaSet {
        let spec = self.spec.clone().unwrap_or_default();
        let status = self.status.clone();
        ReplicaSet {
            metadata: self.metadata.clone(),
            spec: Some(ReplicaSetSpec {
                min_ready_seconds: spec.min_ready_seconds,
                replicas: spec.replicas,
                selector: LabelSelector {
                    match_labels: spec.selector,
                    match_expressions: None,
                },
                template: spec.template,
            }),
            status: status.map(|s| ReplicaSetStatus {
                available_replicas: s.available_replicas,
                fully_labeled_replicas: s.fully_labeled_replicas,
                observed_generation: s.observed_generation,
                ready_replicas: s.ready_replicas,
                replicas: s.replicas,
                terminating_replicas: None,
                conditions: s.conditions.map(|cs| {
                    cs.into_iter()
                        .map(|c| ReplicaSetCondition {
                            last_transition_time: c.last_transition_time,
                            message: c.message,
                            reason: c.reason,
                            status: c.status,
                            type_: c.type_,
                        })
                        .collect()
                }),
            }),
        }
    }
    fn with_status(&self, s: ReplicaSetStatus) -> Self {
        let mut rc = self.clone();
        rc.status = Some(ReplicationControllerStatus {
            available_replicas: s.available_replicas,
            fully_labeled_replicas: s.fully_labeled_replicas,
            observed_generation: s.observed_generation,
            ready_replicas: s.ready_replicas,
            replicas: s.replicas,
            conditions: s.conditions.map(|cs| {
                cs.into_iter()
                    .map(|c| ReplicationControllerCondition {
                        last_transition_time: c.last_transition_time,
                        message: c.message,
                        reason: c.reason,
                        status: c.status,
                        type_: c.type_,
                    })
                    .collect()
            }),
        });
        rc
    }
}

/// The ReplicaSet controller.
pub type ReplicaSetController = Replicas<ReplicaSet>;
/// The replication manager: the same controller over ReplicationControllers.
pub type ReplicationManager = Replicas<ReplicationController>;

pub struct Replicas<K: Replicated> {
    client: Client,
    rs_informer: Arc<Informer<K>>,
    pod_informer: Arc<Informer<Pod>>,
    rs_store: Store<K>,
    pod_store: Store<Pod>,
    queue: Arc<WorkQueue>,
    expectations: Arc<Expectations>,
    events: Events,
}

pub use r8s_api::owner::{controller_of, controller_ref};
pub use r8s_api::pod::{
    is_active as is_pod_active, is_available as pod_available, ready_condition as pod_ready,
};

use crate::pod_control::error_message;

impl<K: Replicated> Replicas<K> {
    pub fn new(factory: &Factory, events: Events) -> Arc<Self> {
        let rs_informer = factory.get::<K>();
        let pod_informer = factory.get::<Pod>();
        let this = Arc::new(Self {
            client: factory.client(),
            rs_store: rs_informer.store(),
            pod_store: pod_informer.store(),
            rs_informer,
            pod_informer,
            queue: WorkQueue::new(K::QUEUE),
            expectations: Arc::new(Expectations::default()),
            events,
        });
        let q = this.queue.clone();
        this.rs_informer.add_handler(move |c| match c {
            Change::Added(o) | Change::Deleted(o) => q.add(key_of(&**o)),
            Change::Updated(_, o) => q.add(key_of(&**o)),
        });
        let weak = Arc::downgrade(&this);
        this.pod_informer.add_handler(move |c| {
            if let Some(this) = weak.upgrade() {
                this.on_pod(c);
            }
        });
        this
    }

    /// Map a pod event to the ReplicaSets to sync, observing expectations on the way.
    fn on_pod(&self, change: Change<'_, Pod>) {
        match change {
            Change::Added(pod) => {
                if pod.metadata.deletion_timestamp.is_some() {
                    if let Some(key) = owner_key(&self.rs_store, &pod.metadata) {
                        self.expectations.observe_del(&key, &pod.name_any());
                        self.queue.add(key);
                    }
                    return;
                }
                match owner_key(&self.rs_store, &pod.metadata) {
                    Some(key) => {
                        self.expectations.observe_add(&key, &pod.name_any());
                        self.queue.add(key);
                    }
                    None if controller_of(&pod.metadata).is_none() => self.enqueue_matching(pod),
                    None => {}
                }
            }
            Change::Updated(old, new) => {
                if old.metadata.resource_version == new.metadata.resource_version {
                    return;
                }
                let new_key = owner_key(&self.rs_store, &new.metadata);
                if new.metadata.deletion_timestamp.is_some() && old.metadata.deletion_timestamp.is_none() {
                    if let Some(k) = &new_key {
                        self.expectations.observe_del(k, &new.name_any());
                    }
                }
                let old_ref = controller_of(&old.metadata).map(|r| &r.uid);
                let new_ref = controller_of(&new.metadata).map(|r| &r.uid);
                if old_ref != new_ref {
                    if let Some(k) = owner_key(&self.rs_store, &old.metadata) {
                        self.queue.add(k);
                    }
                }
                match new_key {
                    Some(k) => self.queue.add(k),
                    None if new_ref.is_none()
                        && (old.metadata.labels != new.metadata.labels || old_ref != new_ref) =>
                    {
                        self.enqueue_matching(new)
                    }
                    None => {}
                }
            }
            Change::Deleted(pod) => {
                if let Some(key) = owner_key(&self.rs_store, &pod.metadata) {
                    self.expectations.observe_del(&key, &pod.name_any());
                    self.queue.add(key);
                }
            }
        }
    }

    /// An orphan pod: every ReplicaSet in its namespace whose selector matches may adopt it.
    fn enqueue_matching(&self, pod: &Pod) {
        let ns = pod.metadata.namespace.as_deref();
        for rs in self.rs_store.state() {
            if rs.meta().namespace.as_deref() != ns {
                continue;
            }
            let sel = rs.as_replica_set().spec.map(|s| s.selector);
            if label_selector_as_selector(sel.as_ref())
                .is_ok_and(|m| m.matches_labels(pod.metadata.labels.as_ref()))
            {
                self.queue.add(key_of(&*rs));
            }
        }
    }

    pub async fn run(self: Arc<Self>, workers: usize, stop: CancellationToken) {
        let this = self.clone();
        run_controller(
            self.queue.clone(),
            vec![
                Box::pin({
                    let i = self.rs_informer.clone();
                    async move { i.wait_synced().await }
                }),
                Box::pin({
                    let i = self.pod_informer.clone();
                    async move { i.wait_synced().await }
                }),
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
        let Some(obj) = lookup(&self.rs_store, key) else {
            self.expectations.forget(key);
            return Ok(None);
        };
        let rs = obj.as_replica_set();
        // The journey's `replicaset.sync` stage (`r8s trace`), kept when it did something.
        let stage = tracing::info_span!(
            target: "journey::controller-manager",
            "replicaset.sync",
            uid = rs.metadata.uid.as_deref().unwrap_or(""),
            owner = r8s_api::owner::controller_of(&rs.metadata).map_or("", |o| o.uid.as_str()),
            object = %format_args!("{} {key}", K::KIND),
            decision = tracing::field::Empty,
            error = tracing::field::Empty,
        );
        let result =
            tracing::Instrument::instrument(self.sync_replicas(key, obj.clone(), rs), stage.clone()).await;
        if let Err(e) = &result {
            stage.record("error", tracing::field::display(e));
        }
        result
    }

    async fn sync_replicas(&self, key: &str, obj: Arc<K>, rs: ReplicaSet) -> SyncResult {
        let spec = rs.spec.clone().unwrap_or_default();
        let matcher = crate::selector(Some(&spec.selector))?;
        let ns = rs.namespace().unwrap_or_default();
        let needs_sync = self.expectations.satisfied(key);
        let candidates: Vec<Arc<Pod>> = self
            .pod_store
            .state()
            .into_iter()
            .filter(|p| p.metadata.namespace.as_deref() == Some(ns.as_str()) && is_pod_active(p))
            .collect();
        let owned = self.claim_pods(&obj, &matcher, candidates).await?;
        let desired = spec.replicas.unwrap_or(1).max(0) as usize;
        let mut manage_err = None;
        if needs_sync && rs.metadata.deletion_timestamp.is_none() {
            manage_err = self.manage_replicas(key, &obj, &owned, desired).await.err();
        }
        let diff = owned.len() as i64 - desired as i64;
        let status = calculate_status(&rs, &owned, manage_err.as_ref().map(|e| (e, diff)));
        let ready = status.ready_replicas.unwrap_or(0);
        let available = status.available_replicas.unwrap_or(0);
        let replicas = status.replicas;
        self.update_status(&obj, status).await?;
        if let Some(e) = manage_err {
            return Err(e);
        }
        let min_ready = spec.min_ready_seconds.unwrap_or(0);
        if min_ready > 0 && ready == replicas && available != replicas {
            return Ok(Some(Duration::from_secs(min_ready as u64)));
        }
        Ok(None)
    }

    async fn claim_pods(
        &self,
        rs: &K,
        matcher: &Selector,
        pods: Vec<Arc<Pod>>,
    ) -> Result<Vec<Arc<Pod>>, Error> {
        let ns = rs.namespace().unwrap_or_default();
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &ns);
        let rs_api: Api<K> = Api::namespaced(self.client.clone(), &ns);
        crate::claim::claim(rs, &rs_api, &api, matcher, pods).await
    }

    async fn manage_replicas(
        &self,
        key: &str,
        rs: &K,
        owned: &[Arc<Pod>],
        desired: usize,
    ) -> Result<(), Error> {
        let ns = rs.namespace().unwrap_or_default();
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &ns);
        if owned.len() < desired {
            let total = (desired - owned.len()).min(BURST_REPLICAS);
            let template = rs
                .as_replica_set()
                .spec
                .and_then(|s| s.template)
                .unwrap_or_default();
            let meta = template.metadata.unwrap_or_default();
            let pod = Pod {
                metadata: ObjectMeta {
                    generate_name: Some(format!("{}-", rs.name_any())),
                    namespace: Some(ns.clone()),
                    labels: meta.labels,
                    annotations: meta.annotations,
                    finalizers: meta.finalizers,
                    owner_references: Some(vec![controller_ref(rs)]),
                    ..Default::default()
                },
                spec: template.spec,
                status: None,
            };
            self.expectations.begin(key);
            let (created, first_err) =
                crate::pod_control::create(&api, &self.events, rs, vec![pod; total]).await;
            tracing::Span::current().record(
                "decision",
                tracing::field::display(format_args!(
                    "created {} of {total} pods: {}",
                    created.len(),
                    created.join(", ")
                )),
            );
            self.expectations.record_adds(key, created);
            self.expectations.end(key);
            if let Some(e) = first_err {
                return Err(e);
            }
        } else if owned.len() > desired {
            let n = (owned.len() - desired).min(BURST_REPLICAS);
            let victims = pods_to_delete(owned, n);
            self.expectations.begin(key);
            let (deleted, first_err) = crate::pod_control::delete(&api, &self.events, rs, &victims).await;
            tracing::Span::current().record(
                "decision",
                tracing::field::display(format_args!(
                    "deleted {} of {n} pods: {}",
                    deleted.len(),
                    deleted.join(", ")
                )),
            );
            self.expectations.record_dels(key, deleted);
            self.expectations.end(key);
            if let Some(e) = first_err {
                return Err(e);
            }
        }
        Ok(())
    }

    async fn update_status(&self, rs: &K, status: ReplicaSetStatus) -> Result<(), Error> {
        if rs.as_replica_set().status.as_ref() == Some(&status) {
            return Ok(());
        }
        let api: Api<K> = Api::namespaced(self.client.clone(), &rs.namespace().unwrap_or_default());
        let updated = rs.with_status(status.clone());
        match api
            .replace_status(&rs.name_any(), &crate::post_params(), &updated)
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if r8s_client::is_not_found(&e) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 409 => {
                // The cache is behind: write the status onto the current object once.
                let Some(fresh) = api.get_opt(&rs.name_any()).await? else {
                    return Ok(());
                };
                if fresh.meta().uid != rs.meta().uid {
                    return Ok(());
                }
                let fresh = fresh.with_status(status);
                api.replace_status(&rs.name_any(), &crate::post_params(), &fresh)
                    .await?;
                Ok(())
            }
            Err(e) => Err(e.into()),
        }
    }
}

/// Status from the owned active pods (upstream `calculateStatus`).
pub fn calculate_status(
    rs: &ReplicaSet,
    pods: &[Arc<Pod>],
    manage_err: Option<(&Error, i64)>,
) -> ReplicaSetStatus {
    let spec = rs.spec.clone().unwrap_or_default();
    let template_labels = spec
        .template
        .as_ref()
        .and_then(|t| t.metadata.as_ref())
        .and_then(|m| m.labels.clone())
        .unwrap_or_default();
    let now = jiff::Timestamp::now();
    let min_ready = spec.min_ready_seconds.unwrap_or(0);
    let mut fully_labeled = 0;
    let mut ready = 0;
    let mut available = 0;
    for p in pods {
        let labels = p.metadata.labels.clone().unwrap_or_default();
        if template_labels.iter().all(|(k, v)| labels.get(k) == Some(v)) {
            fully_labeled += 1;
        }
        if pod_ready(p).0 {
            ready += 1;
            if pod_available(p, min_ready, now) {
                available += 1;
            }
        }
    }
    let old = rs.status.clone().unwrap_or_default();
    let mut conditions: Vec<ReplicaSetCondition> = old
        .conditions
        .clone()
        .unwrap_or_default()
        .into_iter()
        .filter(|c| c.type_ != "ReplicaFailure")
        .collect();
    if let Some((e, diff)) = manage_err {
        let existing = old
            .conditions
            .iter()
            .flatten()
            .find(|c| c.type_ == "ReplicaFailure")
            .cloned();
        let reason = if diff < 0 { "FailedCreate" } else { "FailedDelete" };
        // As upstream, a failure already recorded stays as it was: the next error's message
        // (which names a new random pod) does not rewrite the status, whose update would
        // bring the ReplicaSet straight back, past its back-off.
        conditions.push(match existing {
            Some(c) => c,
            None => ReplicaSetCondition {
                type_: "ReplicaFailure".into(),
                status: "True".into(),
                reason: Some(reason.into()),
                message: Some(error_message(e)),
                last_transition_time: Some(Time(now)),
            },
        });
    }
    ReplicaSetStatus {
        replicas: pods.len() as i32,
        fully_labeled_replicas: Some(fully_labeled),
        ready_replicas: Some(ready),
        available_replicas: Some(available),
        observed_generation: rs.metadata.generation,
        conditions: (!conditions.is_empty()).then_some(conditions),
        terminating_replicas: old.terminating_replicas,
    }
}

/// The `n` pods to delete first, ranked as upstream's `ActivePodsWithRanks`: unassigned before
/// assigned, Pending before Unknown before Running, not ready before ready, more siblings on
/// the same node first, ready for less time first, more restarts first, newer first.
pub fn pods_to_delete(pods: &[Arc<Pod>], n: usize) -> Vec<Arc<Pod>> {
    let mut on_node: HashMap<&str, usize> = HashMap::new();
    for p in pods {
        if let Some(node) = p.spec.as_ref().and_then(|s| s.node_name.as_deref()) {
            *on_node.entry(node).or_default() += 1;
        }
    }
    let rank = |p: &Pod| {
        p.spec
            .as_ref()
            .and_then(|s| s.node_name.as_deref())
            .map(|n| on_node.get(n).copied().unwrap_or(0))
            .unwrap_or(0)
    };
    let mut ranked: Vec<Arc<Pod>> = pods.to_vec();
    ranked.sort_by(|a, b| compare_for_deletion(a, b, rank(a), rank(b)));
    ranked.truncate(n);
    ranked
}

fn phase_rank(p: &Pod) -> u8 {
    match p.status.as_ref().and_then(|s| s.phase.as_deref()) {
        Some("Pending") | None => 0,
        Some("Running") => 2,
        _ => 1,
    }
}

fn restarts(p: &Pod) -> i32 {
    p.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .map(|cs| cs.iter().map(|c| c.restart_count).max().unwrap_or(0))
        .unwrap_or(0)
}

/// `Less` means `a` is deleted before `b`.
fn compare_for_deletion(a: &Pod, b: &Pod, rank_a: usize, rank_b: usize) -> Ordering {
    let assigned = |p: &Pod| {
        p.spec
            .as_ref()
            .and_then(|s| s.node_name.as_ref())
            .is_some_and(|n| !n.is_empty())
    };
    let (ra, ta) = pod_ready(a);
    let (rb, tb) = pod_ready(b);
    assigned(a)
        .cmp(&assigned(b))
        .then(phase_rank(a).cmp(&phase_rank(b)))
        .then(ra.cmp(&rb))
        .then(rank_b.cmp(&rank_a))
        .then(if ra && rb { tb.cmp(&ta) } else { Ordering::Equal })
        .then(restarts(b).cmp(&restarts(a)))
        .then_with(|| {
            let ca = a.metadata.creation_timestamp.as_ref().map(|t| t.0);
            let cb = b.metadata.creation_timestamp.as_ref().map(|t| t.0);
            match (ca, cb) {
                (None, None) => Ordering::Equal,
                (None, _) => Ordering::Less,
                (_, None) => Ordering::Greater,
                (Some(x), Some(y)) => y.cmp(&x),
            }
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{PodCondition, PodSpec, PodStatus};

    fn pod(name: &str, node: Option<&str>, phase: &str, ready: bool, created_s: i64) -> Arc<Pod> {
        Arc::new(Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                creation_timestamp: Some(Time(jiff::Timestamp::from_second(created_s).unwrap())),
                ..Default::default()
            },
            spec: Some(PodSpec {
                node_name: node.map(String::from),
                ..Default::default()
            }),
            status: Some(PodStatus {
                phase: Some(phase.into()),
                conditions: Some(vec![PodCondition {
                    type_: "Ready".into(),
                    status: if ready { "True" } else { "False" }.into(),
                    last_transition_time: Some(Time(jiff::Timestamp::from_second(created_s + 10).unwrap())),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
        })
    }

    fn names(pods: &[Arc<Pod>]) -> Vec<String> {
        pods.iter().map(|p| p.name_any()).collect()
    }

    #[test]
    fn deletion_ranking_follows_upstream_order() {
        let pods = vec![
            pod("running-ready-old", Some("n1"), "Running", true, 100),
            pod("running-ready-new", Some("n2"), "Running", true, 200),
            pod("unscheduled", None, "Pending", false, 50),
            pod("pending", Some("n1"), "Pending", false, 60),
            pod("running-not-ready", Some("n2"), "Running", false, 70),
        ];
        assert_eq!(
            names(&pods_to_delete(&pods, 5)),
            [
                "unscheduled",
                "pending",
                "running-not-ready",
                "running-ready-new",
                "running-ready-old"
            ]
        );
        assert_eq!(names(&pods_to_delete(&pods, 2)), ["unscheduled", "pending"]);
    }

    #[test]
    fn crowded_nodes_lose_pods_first() {
        let pods = vec![
            pod("alone", Some("n1"), "Running", true, 300),
            pod("crowded-a", Some("n2"), "Running", true, 100),
            pod("crowded-b", Some("n2"), "Running", true, 100),
        ];
        assert_eq!(names(&pods_to_delete(&pods, 1)), ["crowded-a"]);
    }

    #[test]
    fn availability_waits_for_min_ready_seconds() {
        let p = pod("p", Some("n"), "Running", true, 0); // ready since t=10s
        let at = |s| jiff::Timestamp::from_second(s).unwrap();
        assert!(pod_available(&p, 0, at(11)));
        assert!(!pod_available(&p, 30, at(20)));
        assert!(pod_available(&p, 30, at(40)));
        let not_ready = pod("q", Some("n"), "Running", false, 0);
        assert!(!pod_available(&not_ready, 0, at(100)));
    }

    #[test]
    fn status_counts_and_replica_failure() {
        let mut rs = ReplicaSet::default();
        rs.metadata.generation = Some(3);
        let pods = vec![
            pod("a", None, "Running", true, 0),
            pod("b", None, "Pending", false, 0),
        ];
        let s = calculate_status(&rs, &pods, None);
        assert_eq!(
            (s.replicas, s.ready_replicas, s.available_replicas),
            (2, Some(1), Some(1))
        );
        assert_eq!(s.observed_generation, Some(3));
        assert!(s.conditions.is_none());
        let err = Error::Other("exceeded quota".into());
        let s = calculate_status(&rs, &pods, Some((&err, -1)));
        let c = &s.conditions.as_ref().unwrap()[0];
        assert_eq!(
            (c.type_.as_str(), c.reason.as_deref()),
            ("ReplicaFailure", Some("FailedCreate"))
        );
        // A later, different error leaves the recorded failure as it was.
        rs.status = Some(s.clone());
        let other = Error::Other("exceeded quota again".into());
        let again = calculate_status(&rs, &pods, Some((&other, -1)));
        assert_eq!(again.conditions, s.conditions);
    }
}
