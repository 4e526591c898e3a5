//! The disruption controller (upstream `pkg/controller/disruption`): keeps each
//! PodDisruptionBudget's status — expected pods, desired and current healthy pods, the
//! disruptions allowed now, and the pods evicted but not yet gone — from the pods its selector
//! picks and the scale of their controllers. The eviction subresource reads this status.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{Pod, ReplicationController};
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector, OwnerReference, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};
use kube::runtime::reflector::Store;
use kube::{Client, ResourceExt};
use tokio_util::sync::CancellationToken;

use crate::{Error, SyncResult};
use r8s_api::owner::controller_of;
use r8s_client::events::Events;
use r8s_client::informer::{key_of, lookup, Change, Factory, Informer};
use r8s_client::queue::{run_controller, WorkQueue};

/// How long an evicted pod may take to go before the budget stops counting it as disrupted.
const DELETION_TIMEOUT: Duration = Duration::from_secs(120);

pub struct DisruptionController {
    client: Client,
    pdbs: Arc<Informer<PodDisruptionBudget>>,
    pods: Arc<Informer<Pod>>,
    pdb_store: Store<PodDisruptionBudget>,
    pod_store: Store<Pod>,
    queue: Arc<WorkQueue>,
    events: Events,
    /// What discovery said of a controller kind (apiVersion, kind): its plural and whether it
    /// has a scale subresource — asked once per kind, as upstream's cached RESTMapper.
    scale_kinds: std::sync::Mutex<std::collections::HashMap<(String, String), (String, bool)>>,
}

/// policy/v1: an empty selector picks every pod of the namespace, a missing one none.
fn selects(pdb: &PodDisruptionBudget, pod: &Pod) -> bool {
    let Some(sel) = pdb.spec.as_ref().and_then(|s| s.selector.as_ref()) else {
        return false;
    };
    r8s_api::selector::label_selector_as_selector(Some(sel))
        .is_ok_and(|m| m.matches_labels(pod.metadata.labels.as_ref()))
}

/// An int, or a percentage of `total` rounded up (upstream's `GetScaledValueFromIntOrPercent`).
fn scaled(v: &IntOrString, total: i32) -> Result<i32, Error> {
    match v {
        IntOrString::Int(n) => Ok(*n),
        IntOrString::String(s) => {
            let p: i64 = s
                .strip_suffix('%')
                .and_then(|n| n.parse().ok())
                .ok_or_else(|| Error::Other(format!("invalid value for IntOrString: invalid value {s:?}")))?;
            Ok(((p * total as i64 + 99) / 100) as i32)
        }
    }
}

impl DisruptionController {
    pub fn new(factory: &Factory, events: Events) -> Arc<Self> {
        let pdbs = factory.get::<PodDisruptionBudget>();
        let pods = factory.get::<Pod>();
        let this = Arc::new(Self {
            client: factory.client(),
            pdb_store: pdbs.store(),
            pod_store: pods.store(),
            pdbs,
            pods,
            queue: WorkQueue::new("disruption"),
            events,
            scale_kinds: Default::default(),
        });
        let q = this.queue.clone();
        this.pdbs.add_handler(move |c| match c {
            Change::Added(o) | Change::Deleted(o) => q.add(key_of(&**o)),
            Change::Updated(_, o) => q.add(key_of(&**o)),
        });
        let weak = Arc::downgrade(&this);
        this.pods.add_handler(move |c| {
            let Some(this) = weak.upgrade() else { return };
            match c {
                Change::Added(p) | Change::Deleted(p) => this.enqueue_for(p),
                Change::Updated(old, new) => {
                    this.enqueue_for(new);
                    if old.metadata.labels != new.metadata.labels {
                        this.enqueue_for(old);
                    }
                }
            }
        });
        this
    }

    fn enqueue_for(&self, pod: &Pod) {
        for pdb in self.pdb_store.state() {
            if pdb.metadata.namespace == pod.metadata.namespace && selects(&pdb, pod) {
                self.queue.add(key_of(&*pdb));
            }
        }
    }

    pub async fn run(self: Arc<Self>, workers: usize, stop: CancellationToken) {
        let this = self.clone();
        run_controller(
            self.queue.clone(),
            vec![self.pdbs.clone().synced(), self.pods.clone().synced()],
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
        let Some(pdb) = lookup(&self.pdb_store, key) else {
            return Ok(None);
        };
        match self.try_sync(&pdb).await {
            Ok(r) => Ok(r),
            Err(e) if e.is_conflict() => Err(e),
            Err(e) => {
                // Fail safe: no disruption is allowed while the budget cannot be computed.
                let mut status = pdb.status.clone().unwrap_or_default();
                status.disruptions_allowed = 0;
                set_condition(&mut status, "False", "SyncFailed", &e.to_string());
                let _ = self.write_status(&pdb, status).await;
                Err(e)
            }
        }
    }

    async fn try_sync(&self, pdb: &PodDisruptionBudget) -> SyncResult {
        let ns = pdb.namespace().unwrap_or_default();
        let pods: Vec<Arc<Pod>> = self
            .pod_store
            .state()
            .into_iter()
            .filter(|p| p.metadata.namespace.as_deref() == Some(ns.as_str()) && selects(pdb, p))
            .collect();
        if pods.is_empty() {
            self.events.normal(pdb, "NoPods", "No matching pods found".into());
        }
        let spec = pdb.spec.clone().unwrap_or_default();
        let expected_scale = || async {
            self.expected_scale(pdb, &pods).await.inspect_err(|e| {
                self.events.warning(
                    pdb,
                    "CalculateExpectedPodCountFailed",
                    format!("Failed to calculate the number of expected pods: {e}"),
                )
            })
        };
        let (expected, desired) = if let Some(max) = &spec.max_unavailable {
            let expected = expected_scale().await?;
            (expected, (expected - scaled(max, expected)?).max(0))
        } else {
            match &spec.min_available {
                Some(IntOrString::Int(n)) => (pods.len() as i32, *n),
                Some(min) => {
                    let expected = expected_scale().await?;
                    (expected, scaled(min, expected)?)
                }
                None => (0, 0),
            }
        };
        // Pods the eviction subresource let go: disrupted until they are deleting, at most
        // two minutes.
        let now = jiff::Timestamp::now();
        let old = pdb.status.clone().unwrap_or_default();
        let mut disrupted = BTreeMap::new();
        let mut recheck: Option<Duration> = None;
        for (name, at) in old.disrupted_pods.clone().unwrap_or_default() {
            let Some(pod) = pods.iter().find(|p| p.name_any() == name) else {
                continue;
            };
            if pod.metadata.deletion_timestamp.is_some() {
                continue;
            }
            let expires = at.0 + DELETION_TIMEOUT;
            if expires < now {
                self.events.warning(
                    &**pod,
                    "NotDeleted",
                    format!(
                        "Pod was expected by PDB {ns}/{} to be deleted but it wasn't",
                        pdb.name_any()
                    ),
                );
                continue;
            }
            let left = Duration::from_secs((expires - now).get_seconds().max(1) as u64);
            recheck = Some(recheck.map_or(left, |r| r.min(left)));
            disrupted.insert(name, at);
        }
        let current = pods
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .filter(|p| !disrupted.contains_key(&p.name_any()))
            .filter(|p| crate::replicaset::pod_ready(p).0)
            .count() as i32;
        let allowed = if expected <= 0 {
            0
        } else {
            (current - desired).max(0)
        };
        let mut status = PodDisruptionBudgetStatus {
            current_healthy: current,
            desired_healthy: desired,
            expected_pods: expected,
            disruptions_allowed: allowed,
            disrupted_pods: (!disrupted.is_empty()).then_some(disrupted),
            observed_generation: pdb.metadata.generation,
            conditions: old.conditions.clone(),
        };
        if allowed > 0 {
            set_condition(&mut status, "True", "SufficientPods", "");
        } else {
            set_condition(&mut status, "False", "InsufficientPods", "");
        }
        if pdb.status.as_ref() != Some(&status) {
            self.write_status(pdb, status).await?;
        }
        Ok(recheck)
    }

    /// The replicas the pods' controllers want, each controller once (upstream's
    /// `getExpectedScale`): pods without a controller are left out, with upstream's warning
    /// event; a pod whose controller cannot be found fails the budget.
    async fn expected_scale(&self, pdb: &PodDisruptionBudget, pods: &[Arc<Pod>]) -> Result<i32, Error> {
        let ns = pdb.namespace().unwrap_or_default();
        let ns = ns.as_str();
        let mut seen = HashSet::new();
        let mut total = 0;
        let mut unmanaged = Vec::new();
        for pod in pods {
            let Some(r) = controller_of(&pod.metadata) else {
                unmanaged.push(pod.name_any());
                continue;
            };
            if seen.contains(&r.uid) {
                continue;
            }
            let same = |uid: Option<&String>| uid == Some(&r.uid);
            let group = r.api_version.split_once('/').map(|(g, _)| g).unwrap_or("");
            let found = match (group, r.kind.as_str()) {
                ("", "ReplicationController") => {
                    Api::<ReplicationController>::namespaced(self.client.clone(), ns)
                        .get_opt(&r.name)
                        .await?
                        .filter(|o| same(o.metadata.uid.as_ref()))
                        .map(|o| (r.uid.clone(), o.spec.and_then(|s| s.replicas).unwrap_or(1)))
                }
                ("apps", "StatefulSet") => Api::<StatefulSet>::namespaced(self.client.clone(), ns)
                    .get_opt(&r.name)
                    .await?
                    .filter(|o| same(o.metadata.uid.as_ref()))
                    .map(|o| (r.uid.clone(), o.spec.and_then(|s| s.replicas).unwrap_or(1))),
                ("apps", "ReplicaSet") => {
                    let rs = Api::<ReplicaSet>::namespaced(self.client.clone(), ns)
                        .get_opt(&r.name)
                        .await?
                        .filter(|o| same(o.metadata.uid.as_ref()));
                    match rs {
                        None => None,
                        // A ReplicaSet of a Deployment counts as its Deployment; one whose
                        // Deployment is gone, as itself.
                        Some(rs) => {
                            let deployment = match controller_of(&rs.metadata)
                                .filter(|d| d.kind == "Deployment")
                            {
                                Some(d) => Api::<Deployment>::namespaced(self.client.clone(), ns)
                                    .get_opt(&d.name)
                                    .await?
                                    .filter(|o| o.metadata.uid.as_deref() == Some(d.uid.as_str()))
                                    .map(|o| (d.uid.clone(), o.spec.and_then(|s| s.replicas).unwrap_or(1))),
                                None => None,
                            };
                            deployment.or_else(|| {
                                Some((r.uid.clone(), rs.spec.and_then(|s| s.replicas).unwrap_or(1)))
                            })
                        }
                    }
                }
                _ => self.scale_of(ns, r).await?.map(|n| (r.uid.clone(), n)),
            };
            let Some((uid, replicas)) = found else {
                let e = format!("found no controllers for pod {:?}", pod.name_any());
                self.events.warning(pdb, "NoControllers", e.clone());
                return Err(Error::Other(e));
            };
            if seen.insert(uid) {
                total += replicas;
            }
            seen.insert(r.uid.clone());
        }
        if !unmanaged.is_empty() {
            tracing::debug!(pods = ?unmanaged, "unmanaged pods under a disruption budget");
            self.events.warning(
                pdb,
                "UnmanagedPods",
                format!(
                    "Pods selected by this PodDisruptionBudget (selector: {}) were found to be unmanaged. \
                     As a result, the status of the PDB cannot be calculated correctly, which may result in \
                     undefined behavior. To account for these pods please set \".spec.minAvailable\" field \
                     of the PDB to an integer value.",
                    go_selector(pdb.spec.as_ref().and_then(|s| s.selector.as_ref()))
                ),
            );
        }
        Ok(total)
    }

    /// The replicas of any other controller through its scale subresource (upstream's
    /// `getScaleController`), found through discovery: a kind the server does not serve is
    /// RESTMapper's "no matches for kind"; one without a scale subresource (a DaemonSet, a Job)
    /// fails the budget with upstream's words, so only an integer minAvailable covers such pods.
    async fn scale_of(&self, ns: &str, r: &OwnerReference) -> Result<Option<i32>, Error> {
        let (group, version) = match r.api_version.split_once('/') {
            Some((g, v)) => (g, v),
            None => ("", r.api_version.as_str()),
        };
        let (plural, has_scale) = self.scale_kind(group, r).await?;
        if !has_scale {
            let resource = if group.is_empty() {
                plural
            } else {
                format!("{plural}.{group}")
            };
            return Err(Error::Other(format!(
                "{resource} does not implement the scale subresource"
            )));
        }
        let gvk = GroupVersionKind::gvk(group, version, &r.kind);
        let ar = ApiResource::from_gvk_with_plural(&gvk, &plural);
        let api: Api<DynamicObject> = Api::namespaced_with(self.client.clone(), ns, &ar);
        match api.get_scale(&r.name).await {
            Ok(scale) if scale.metadata.uid.as_deref() == Some(r.uid.as_str()) => {
                Ok(Some(scale.spec.and_then(|s| s.replicas).unwrap_or(0)))
            }
            Ok(_) => Ok(None),
            Err(kube::Error::Api(e)) if e.code == 404 => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// A kind's plural and whether it has a scale subresource, from discovery (remembered;
    /// a kind the server does not serve is RESTMapper's "no matches", asked again next time).
    async fn scale_kind(&self, group: &str, r: &OwnerReference) -> Result<(String, bool), Error> {
        let key = (r.api_version.clone(), r.kind.clone());
        if let Some(known) = self
            .scale_kinds
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&key)
        {
            return Ok(known.clone());
        }
        let list = if group.is_empty() {
            self.client.list_core_api_resources(&r.api_version).await
        } else {
            self.client.list_api_group_resources(&r.api_version).await
        };
        let no_match = || {
            Error::Other(format!(
                "no matches for kind {:?} in version {:?}",
                r.kind, r.api_version
            ))
        };
        let list = match list {
            Ok(l) => l,
            Err(kube::Error::Api(e)) if e.code == 404 => return Err(no_match()),
            Err(e) => return Err(e.into()),
        };
        let plural = list
            .resources
            .iter()
            .find(|res| res.kind == r.kind && !res.name.contains('/'))
            .map(|res| res.name.clone())
            .ok_or_else(no_match)?;
        let has_scale = list
            .resources
            .iter()
            .any(|res| res.name == format!("{plural}/scale"));
        let known = (plural, has_scale);
        self.scale_kinds
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key, known.clone());
        Ok(known)
    }

    async fn write_status(
        &self,
        pdb: &PodDisruptionBudget,
        status: PodDisruptionBudgetStatus,
    ) -> Result<(), Error> {
        let api: Api<PodDisruptionBudget> =
            Api::namespaced(self.client.clone(), &pdb.namespace().unwrap_or_default());
        let mut updated = pdb.clone();
        updated.status = Some(status);
        match api
            .replace_status(&pdb.name_any(), &crate::post_params(), &updated)
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if r8s_client::is_not_found(&e) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }
}

/// The DisruptionAllowed condition (its transition time kept while its status stays).
/// A label selector as Go's generated `String()` prints it (`%v` of a `*LabelSelector`), which
/// upstream's UnmanagedPods event embeds: `&LabelSelector{MatchLabels:map[string]string{app: web,},
/// MatchExpressions:[]LabelSelectorRequirement{},}`.
fn go_selector(sel: Option<&LabelSelector>) -> String {
    let Some(sel) = sel else {
        return "nil".into();
    };
    let labels: String = sel
        .match_labels
        .iter()
        .flatten()
        .map(|(k, v)| format!("{k}: {v},"))
        .collect();
    let exprs: String = sel
        .match_expressions
        .iter()
        .flatten()
        .map(|e| {
            format!(
                "LabelSelectorRequirement{{Key:{},Operator:{},Values:[{}],}},",
                e.key,
                e.operator,
                e.values.clone().unwrap_or_default().join(" ")
            )
        })
        .collect();
    format!("&LabelSelector{{MatchLabels:map[string]string{{{labels}}},MatchExpressions:[]LabelSelectorRequirement{{{exprs}}},}}")
}

fn set_condition(status: &mut PodDisruptionBudgetStatus, value: &str, reason: &str, message: &str) {
    let conditions = status.conditions.get_or_insert_with(Vec::new);
    let generation = status.observed_generation;
    let now = Time(jiff::Timestamp::now());
    match conditions.iter_mut().find(|c| c.type_ == "DisruptionAllowed") {
        Some(c) => {
            if c.status != value {
                c.last_transition_time = now;
            }
            c.status = value.into();
            c.reason = reason.into();
            c.message = message.into();
            c.observed_generation = generation;
        }
        None => conditions.push(Condition {
            type_: "DisruptionAllowed".into(),
            status: value.into(),
            reason: reason.into(),
            message: message.into(),
            observed_generation: generation,
            last_transition_time: now,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selectors_print_as_go_prints_them() {
        let sel: LabelSelector = serde_json::from_value(serde_json::json!({
            "matchLabels": {"b": "2", "a": "1"},
            "matchExpressions": [{"key": "tier", "operator": "In", "values": ["x", "y"]}]
        }))
        .unwrap();
        assert_eq!(
            go_selector(Some(&sel)),
            "&LabelSelector{MatchLabels:map[string]string{a: 1,b: 2,},MatchExpressions:[]LabelSelectorRequirement{LabelSelectorRequirement{Key:tier,Operator:In,Values:[x y],},},}"
        );
        assert_eq!(go_selector(None), "nil");
    }

    #[test]
    fn percentages_round_up() {
        assert_eq!(scaled(&IntOrString::String("50%".into()), 3).unwrap(), 2);
        assert_eq!(scaled(&IntOrString::String("10%".into()), 10).unwrap(), 1);
        assert_eq!(scaled(&IntOrString::Int(2), 10).unwrap(), 2);
        assert!(scaled(&IntOrString::String("half".into()), 10).is_err());
    }
}
