//! The DaemonSet controller (upstream `pkg/controller/daemon`): one pod on every node that
//! should run it — the node matches the template's node selector and required affinity, and
//! every NoSchedule/NoExecute taint is tolerated (with the tolerations every daemon pod gets:
//! not-ready, unreachable, the pressures, unschedulable) — scheduled through the scheduler by a
//! required node affinity on `metadata.name`, as upstream does. A pod on a node that should no
//! longer run it is deleted; a failed one is replaced. Templates are recorded as
//! ControllerRevisions; a RollingUpdate replaces old pods at most `maxUnavailable` at a time
//! (or, with `maxSurge`, starts the new pod before the old one goes); OnDelete waits.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{ControllerRevision, DaemonSet, DaemonSetStatus};
use k8s_openapi::api::core::v1::{
    Affinity, Node, NodeAffinity, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm, Pod, PodSpec,
    PodTemplateSpec, Toleration,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::Api;
use kube::runtime::reflector::Store;
use kube::{Client, ResourceExt};
use tokio_util::sync::CancellationToken;

use crate::claim::owner_key;
use crate::history::{self, REVISION_HASH};
use crate::{Error, SyncResult};
use r8s_api::owner::{controller_of, controller_ref};
use r8s_client::events::Events;
use r8s_client::expectations::Expectations;
use r8s_client::informer::{key_of, lookup, Change, Factory, Informer};
use r8s_client::queue::{run_controller, WorkQueue};

const TEMPLATE_GENERATION: &str = "deprecated.daemonset.template.generation";
const POD_TEMPLATE_GENERATION: &str = "pod-template-generation";

pub struct DaemonSetController {
    client: Client,
    sets: Arc<Informer<DaemonSet>>,
    pods: Arc<Informer<Pod>>,
    nodes: Arc<Informer<Node>>,
    revisions: Arc<Informer<ControllerRevision>>,
    set_store: Store<DaemonSet>,
    pod_store: Store<Pod>,
    node_store: Store<Node>,
    revision_store: Store<ControllerRevision>,
    queue: Arc<WorkQueue>,
    expectations: Arc<Expectations>,
    events: Events,
}

/// The tolerations every daemon pod gets (upstream's `AddOrUpdateDaemonPodTolerations`).
pub fn add_daemon_tolerations(spec: &mut PodSpec) {
    let mut wanted = vec![
        ("node.kubernetes.io/not-ready", "NoExecute"),
        ("node.kubernetes.io/unreachable", "NoExecute"),
        ("node.kubernetes.io/disk-pressure", "NoSchedule"),
        ("node.kubernetes.io/memory-pressure", "NoSchedule"),
        ("node.kubernetes.io/pid-pressure", "NoSchedule"),
        ("node.kubernetes.io/unschedulable", "NoSchedule"),
    ];
    if spec.host_network == Some(true) {
        wanted.push(("node.kubernetes.io/network-unavailable", "NoSchedule"));
    }
    let list = spec.tolerations.get_or_insert_with(Vec::new);
    for (key, effect) in wanted {
        let t = Toleration {
            key: Some(key.into()),
            operator: Some("Exists".into()),
            effect: Some(effect.into()),
            ..Default::default()
        };
        let same = |x: &Toleration| {
            x.key == t.key
                && x.operator.as_deref().unwrap_or("Equal") == "Exists"
                && x.effect == t.effect
                && x.value.as_deref().unwrap_or("").is_empty()
        };
        match list.iter_mut().find(|x| same(x)) {
            Some(x) => *x = t,
            None => list.push(t),
        }
    }
}

/// The node affinity that pins a daemon pod to `node` (upstream's
/// `ReplaceDaemonSetPodNodeNameNodeAffinity`: it replaces any required terms, keeps preferred).
pub fn pin_to_node(spec: &mut PodSpec, node: &str) {
    let term = NodeSelectorTerm {
        match_fields: Some(vec![NodeSelectorRequirement {
            key: "metadata.name".into(),
            operator: "In".into(),
            values: Some(vec![node.into()]),
        }]),
        match_expressions: None,
    };
    let affinity = spec.affinity.get_or_insert_with(Affinity::default);
    let node_affinity = affinity.node_affinity.get_or_insert_with(NodeAffinity::default);
    node_affinity.required_during_scheduling_ignored_during_execution = Some(NodeSelector {
        node_selector_terms: vec![term],
    });
}

/// The node a daemon pod is for: its nodeName, else the node its affinity pins it to.
pub fn target_node(p: &Pod) -> Option<String> {
    let spec = p.spec.as_ref()?;
    if let Some(n) = spec.node_name.as_ref().filter(|n| !n.is_empty()) {
        return Some(n.clone());
    }
    let terms = &spec
        .affinity
        .as_ref()?
        .node_affinity
        .as_ref()?
        .required_during_scheduling_ignored_during_execution
        .as_ref()?
        .node_selector_terms;
    terms.iter().find_map(|t| {
        t.match_fields.iter().flatten().find_map(|r| {
            (r.key == "metadata.name" && r.operator == "In")
                .then(|| r.values.as_ref().filter(|v| v.len() == 1).map(|v| v[0].clone()))
                .flatten()
        })
    })
}

/// Whether a daemon pod should run on `node`, and whether one already there may stay
/// (upstream's `NodeShouldRunDaemonPod`).
pub fn should_run(template: &PodTemplateSpec, node: &Node) -> (bool, bool) {
    let mut spec = template.spec.clone().unwrap_or_default();
    add_daemon_tolerations(&mut spec);
    let name = node.name_any();
    if spec
        .node_name
        .as_ref()
        .is_some_and(|n| !n.is_empty() && *n != name)
    {
        return (false, false);
    }
    if !r8s_api::predicates::node_affinity_fits(Some(&spec), node) {
        return (false, false);
    }
    let tolerations = spec.tolerations.as_deref().unwrap_or(&[]);
    let taints = r8s_api::predicates::taints(node);
    if r8s_api::taints::find_untolerated(taints, tolerations, r8s_api::taints::schedule_blocking).is_some() {
        let evicting = r8s_api::taints::find_untolerated(taints, tolerations, r8s_api::taints::no_execute);
        return (false, evicting.is_none());
    }
    (true, true)
}

fn phase(p: &Pod) -> &str {
    p.status.as_ref().and_then(|s| s.phase.as_deref()).unwrap_or("")
}

fn hash_of(p: &Pod) -> Option<&str> {
    p.labels().get(REVISION_HASH).map(String::as_str)
}

/// An int or a percentage of `total`, rounded up.
fn scaled(v: Option<&IntOrString>, total: i32) -> i32 {
    match v {
        None => 0,
        Some(IntOrString::Int(n)) => *n,
        Some(IntOrString::String(s)) => {
            let p: i64 = s.trim_end_matches('%').parse().unwrap_or(0);
            ((p * total as i64 + 99) / 100) as i32
        }
    }
}

impl DaemonSetController {
    pub fn new(factory: &Factory, events: Events) -> Arc<Self> {
        let sets = factory.get::<DaemonSet>();
        let pods = factory.get::<Pod>();
        let nodes = factory.get::<Node>();
        let revisions = factory.get::<ControllerRevision>();
        let this = Arc::new(Self {
            client: factory.client(),
            set_store: sets.store(),
            pod_store: pods.store(),
            node_store: nodes.store(),
            revision_store: revisions.store(),
            sets,
            pods,
            nodes,
            revisions,
            queue: WorkQueue::new("daemonset"),
            expectations: Arc::new(Expectations::default()),
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
            let (pod, gone) = match c {
                Change::Added(p) => (p, false),
                Change::Updated(_, p) => (p, false),
                Change::Deleted(p) => (p, true),
            };
            match owner_key(&this.set_store, &pod.metadata) {
                Some(key) => {
                    if gone || pod.metadata.deletion_timestamp.is_some() {
                        this.expectations.observe_del(&key, &pod.name_any());
                    } else {
                        this.expectations.observe_add(&key, &pod.name_any());
                    }
                    this.queue.add(key);
                }
                None if controller_of(&pod.metadata).is_none() && !gone => {
                    // An orphan a DaemonSet might adopt.
                    for ds in this.set_store.state() {
                        if ds.metadata.namespace == pod.metadata.namespace {
                            this.queue.add(key_of(&*ds));
                        }
                    }
                }
                None => {}
            }
        });
        // Any node change may change where daemons run.
        let weak = Arc::downgrade(&this);
        this.nodes.add_handler(move |c| {
            let Some(this) = weak.upgrade() else { return };
            if let Change::Updated(old, new) = &c {
                if old.metadata.labels == new.metadata.labels
                    && old.spec.as_ref().map(|s| &s.taints) == new.spec.as_ref().map(|s| &s.taints)
                    && old.status.as_ref().map(|s| &s.conditions)
                        == new.status.as_ref().map(|s| &s.conditions)
                {
                    return;
                }
            }
            for ds in this.set_store.state() {
                this.queue.add(key_of(&*ds));
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
                self.nodes.clone().synced(),
                self.revisions.clone().synced(),
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
        let Some(ds) = lookup(&self.set_store, key) else {
            self.expectations.forget(key);
            return Ok(None);
        };
        let ns = ds.namespace().unwrap_or_default();
        let spec = ds.spec.clone().unwrap_or_default();
        let matcher = crate::selector(Some(&spec.selector))?;
        let uid = ds.metadata.uid.clone().unwrap_or_default();
        let pods_api: Api<Pod> = Api::namespaced(self.client.clone(), &ns);
        let sets_api: Api<DaemonSet> = Api::namespaced(self.client.clone(), &ns);
        let candidates: Vec<Arc<Pod>> = self
            .pod_store
            .state()
            .into_iter()
            .filter(|p| p.metadata.namespace.as_deref() == Some(ns.as_str()))
            .collect();
        let pods = crate::claim::claim(&*ds, &sets_api, &pods_api, &matcher, candidates).await?;

        // The template's revision.
        let revisions_api: Api<ControllerRevision> = Api::namespaced(self.client.clone(), &ns);
        let ours = history::owned(self.revision_store.state().iter(), &uid);
        let (current, hash) = history::current(
            &revisions_api,
            controller_ref(&*ds),
            &ds.name_any(),
            &ns,
            &spec.template,
            ds.status.as_ref().and_then(|s| s.collision_count),
            &ours,
        )
        .await?;

        let mut by_node: BTreeMap<String, Vec<Arc<Pod>>> = BTreeMap::new();
        for p in &pods {
            if let Some(n) = target_node(p) {
                by_node.entry(n).or_default().push(p.clone());
            }
        }
        let nodes: Vec<Arc<Node>> = self.node_store.state();
        let min_ready = spec.min_ready_seconds.unwrap_or(0);
        let now = jiff::Timestamp::now();
        let available = |p: &Pod| crate::replicaset::pod_available(p, min_ready, now);
        let mut create_on: Vec<String> = Vec::new();
        let mut delete: Vec<Arc<Pod>> = Vec::new();
        let mut wanted_nodes = Vec::new();
        for node in &nodes {
            let name = node.name_any();
            let (run, keep) = should_run(&spec.template, node);
            let here: Vec<Arc<Pod>> = by_node
                .get(&name)
                .map(|v| {
                    v.iter()
                        .filter(|p| p.metadata.deletion_timestamp.is_none())
                        .cloned()
                        .collect()
                })
                .unwrap_or_default();
            if run {
                wanted_nodes.push(name.clone());
            }
            if run && here.is_empty() {
                create_on.push(name.clone());
            } else if run || keep {
                // Failed pods are replaced; one daemon pod per node (the oldest stays).
                let (failed, mut alive): (Vec<_>, Vec<_>) =
                    here.into_iter().partition(|p| phase(p) == "Failed");
                if !failed.is_empty() {
                    self.events.warning(
                        &*ds,
                        "FailedDaemonPod",
                        format!(
                            "Found failed daemon pod {ns}/{} on node {name}, will try to kill it",
                            failed[0].name_any()
                        ),
                    );
                }
                delete.extend(failed);
                alive.sort_by_key(|p| p.metadata.creation_timestamp.as_ref().map(|t| t.0));
                let surge = matches!(spec.update_strategy.as_ref().and_then(|u| u.rolling_update.as_ref()),
                    Some(ru) if scaled(ru.max_surge.as_ref(), 1) > 0);
                // With surge, an old and a new pod may share the node during the update.
                let keep_n = if surge && alive.iter().any(|p| hash_of(p) == Some(hash.as_str())) {
                    2
                } else {
                    1
                };
                if alive.len() > keep_n {
                    delete.extend(alive.split_off(keep_n));
                }
                if run && alive.is_empty() && !create_on.contains(&name) {
                    create_on.push(name.clone());
                }
            } else {
                delete.extend(here);
            }
        }
        // Pods for nodes that are gone.
        for (n, list) in &by_node {
            if !nodes.iter().any(|node| node.name_any() == *n) {
                delete.extend(
                    list.iter()
                        .filter(|p| p.metadata.deletion_timestamp.is_none())
                        .cloned(),
                );
            }
        }

        // The rolling update.
        let strategy = spec.update_strategy.clone().unwrap_or_default();
        if strategy.type_.as_deref().unwrap_or("RollingUpdate") == "RollingUpdate"
            && self.expectations.satisfied(key)
        {
            let ru = strategy.rolling_update.clone().unwrap_or_default();
            let desired = wanted_nodes.len() as i32;
            let max_unavailable = scaled(ru.max_unavailable.as_ref(), desired);
            let max_surge = scaled(ru.max_surge.as_ref(), desired);
            let mut unavailable = 0;
            let mut old_available = Vec::new();
            let mut old_unavailable = Vec::new();
            let mut surging = 0;
            for n in &wanted_nodes {
                let here: Vec<&Arc<Pod>> = by_node
                    .get(n)
                    .map(|v| {
                        v.iter()
                            .filter(|p| p.metadata.deletion_timestamp.is_none() && phase(p) != "Failed")
                            .collect()
                    })
                    .unwrap_or_default();
                let new = here.iter().find(|p| hash_of(p) == Some(hash.as_str()));
                let old: Vec<&&Arc<Pod>> = here
                    .iter()
                    .filter(|p| hash_of(p) != Some(hash.as_str()))
                    .collect();
                if !here.iter().any(|p| available(p)) {
                    unavailable += 1;
                }
                match (new, old.first()) {
                    (Some(new), Some(old)) => {
                        // A surged node: the old pod goes once the new one is available.
                        if available(new) {
                            delete.push((**old).clone());
                        } else {
                            surging += 1;
                        }
                    }
                    (None, Some(old)) if available(old) => old_available.push((**old).clone()),
                    (None, Some(old)) => old_unavailable.push((**old).clone()),
                    _ => {}
                }
            }
            // Old pods that are not available go at once.
            delete.extend(old_unavailable);
            if max_surge > 0 {
                for old in old_available
                    .into_iter()
                    .take((max_surge - surging).max(0) as usize)
                {
                    if let Some(n) = target_node(&old) {
                        create_on.push(n);
                    }
                }
            } else {
                let budget = (max_unavailable - unavailable).max(0) as usize;
                delete.extend(old_available.into_iter().take(budget));
            }
        }

        let mut err = None;
        if self.expectations.satisfied(key) && ds.metadata.deletion_timestamp.is_none() {
            if let Err(e) = self.create_pods(key, &ds, &pods_api, &create_on, &hash).await {
                err = Some(e);
            }
            if let Err(e) = self.delete_pods(key, &ds, &pods_api, &delete).await {
                err.get_or_insert(e);
            }
        }

        // Old revisions no pod uses.
        let in_use: HashSet<String> = pods.iter().filter_map(|p| hash_of(p).map(String::from)).collect();
        let ours = history::owned(self.revision_store.state().iter(), &uid);
        history::truncate(
            &revisions_api,
            &ours,
            &current.name_any(),
            &in_use,
            spec.revision_history_limit.unwrap_or(10),
        )
        .await?;

        // Status.
        let mut status = DaemonSetStatus {
            observed_generation: ds.metadata.generation,
            collision_count: ds.status.as_ref().and_then(|s| s.collision_count),
            conditions: ds.status.as_ref().and_then(|s| s.conditions.clone()),
            ..Default::default()
        };
        for node in &nodes {
            let name = node.name_any();
            let here: Vec<&Arc<Pod>> = by_node
                .get(&name)
                .map(|v| {
                    v.iter()
                        .filter(|p| p.metadata.deletion_timestamp.is_none())
                        .collect()
                })
                .unwrap_or_default();
            let wanted = wanted_nodes.contains(&name);
            if !wanted {
                if !here.is_empty() {
                    status.number_misscheduled += 1;
                }
                continue;
            }
            status.desired_number_scheduled += 1;
            if here.is_empty() {
                continue;
            }
            status.current_number_scheduled += 1;
            let newest = here
                .iter()
                .max_by_key(|p| p.metadata.creation_timestamp.as_ref().map(|t| t.0))
                .copied();
            if let Some(p) = newest {
                if crate::replicaset::pod_ready(p).0 {
                    status.number_ready += 1;
                    if available(p) {
                        *status.number_available.get_or_insert(0) += 1;
                    }
                }
            }
            if here.iter().any(|p| hash_of(p) == Some(hash.as_str())) {
                *status.updated_number_scheduled.get_or_insert(0) += 1;
            }
        }
        let unavailable = status.desired_number_scheduled - status.number_available.unwrap_or(0);
        status.number_unavailable = (unavailable > 0).then_some(unavailable);
        if ds.status.as_ref() != Some(&status) {
            let mut updated = (*ds).clone();
            updated.status = Some(status.clone());
            match sets_api
                .replace_status(&ds.name_any(), &crate::post_params(), &updated)
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
        // Pods becoming available after minReadySeconds change the status by time alone.
        if min_ready > 0 && status.number_ready != status.number_available.unwrap_or(0) {
            return Ok(Some(Duration::from_secs(min_ready as u64)));
        }
        Ok(None)
    }

    async fn create_pods(
        &self,
        key: &str,
        ds: &DaemonSet,
        api: &Api<Pod>,
        nodes: &[String],
        hash: &str,
    ) -> Result<(), Error> {
        if nodes.is_empty() {
            return Ok(());
        }
        let spec = ds.spec.clone().unwrap_or_default();
        let template = spec.template;
        let meta = template.metadata.clone().unwrap_or_default();
        let mut labels = meta.labels.clone().unwrap_or_default();
        labels.insert(REVISION_HASH.into(), hash.into());
        if let Some(g) = ds.annotations().get(TEMPLATE_GENERATION) {
            labels.insert(POD_TEMPLATE_GENERATION.into(), g.clone());
        }
        let pods = nodes
            .iter()
            .map(|node| {
                let mut pod_spec = template.spec.clone().unwrap_or_default();
                add_daemon_tolerations(&mut pod_spec);
                pin_to_node(&mut pod_spec, node);
                Pod {
                    metadata: ObjectMeta {
                        generate_name: Some(format!("{}-", ds.name_any())),
                        namespace: ds.namespace(),
                        labels: Some(labels.clone()),
                        annotations: meta.annotations.clone(),
                        finalizers: meta.finalizers.clone(),
                        owner_references: Some(vec![controller_ref(ds)]),
                        ..Default::default()
                    },
                    spec: Some(pod_spec),
                    status: None,
                }
            })
            .collect();
        self.expectations.begin(key);
        let (created, first_err) = crate::pod_control::create(api, &self.events, ds, pods).await;
        self.expectations.record_adds(key, created);
        self.expectations.end(key);
        first_err.map_or(Ok(()), Err)
    }

    async fn delete_pods(
        &self,
        key: &str,
        ds: &DaemonSet,
        api: &Api<Pod>,
        pods: &[Arc<Pod>],
    ) -> Result<(), Error> {
        if pods.iter().all(|p| p.metadata.deletion_timestamp.is_some()) {
            return Ok(());
        }
        self.expectations.begin(key);
        let (deleted, first_err) = crate::pod_control::delete(api, &self.events, ds, pods).await;
        self.expectations.record_dels(key, deleted);
        self.expectations.end(key);
        first_err.map_or(Ok(()), Err)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(name: &str, labels: serde_json::Value, taints: serde_json::Value) -> Node {
        serde_json::from_value(
            json!({"metadata": {"name": name, "labels": labels}, "spec": {"taints": taints}}),
        )
        .unwrap()
    }

    fn template(spec: serde_json::Value) -> PodTemplateSpec {
        serde_json::from_value(json!({"spec": spec})).unwrap()
    }

    #[test]
    fn daemons_run_where_selectors_and_taints_allow() {
        let plain = template(json!({"containers": [{"name": "c", "image": "i"}]}));
        assert_eq!(should_run(&plain, &node("n", json!({}), json!([]))), (true, true));
        // Cordoned and not-ready nodes still run daemons (their default tolerations).
        let cordoned = node(
            "n",
            json!({}),
            json!([{"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}]),
        );
        assert_eq!(should_run(&plain, &cordoned), (true, true));
        // Another NoSchedule taint: no new daemon pod, but one already there stays.
        let tainted = node(
            "n",
            json!({}),
            json!([{"key": "dedicated", "value": "db", "effect": "NoSchedule"}]),
        );
        assert_eq!(should_run(&plain, &tainted), (false, true));
        let evicting = node(
            "n",
            json!({}),
            json!([{"key": "dedicated", "value": "db", "effect": "NoExecute"}]),
        );
        assert_eq!(should_run(&plain, &evicting), (false, false));
        let picky =
            template(json!({"nodeSelector": {"disk": "ssd"}, "containers": [{"name": "c", "image": "i"}]}));
        assert_eq!(
            should_run(&picky, &node("n", json!({}), json!([]))),
            (false, false)
        );
        assert_eq!(
            should_run(&picky, &node("n", json!({"disk": "ssd"}), json!([]))),
            (true, true)
        );
    }

    #[test]
    fn daemon_pods_are_pinned_by_affinity_and_tolerate_node_conditions() {
        let mut spec: PodSpec = serde_json::from_value(json!({
            "containers": [], "tolerations": [{"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 5}],
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "x", "operator": "Exists"}]}]}}}
        }))
        .unwrap();
        add_daemon_tolerations(&mut spec);
        pin_to_node(&mut spec, "n2");
        let tolerations = spec.tolerations.as_ref().unwrap();
        assert_eq!(tolerations.len(), 6);
        // The user's own toleration of the same taint gives way to the daemon's (no seconds).
        assert_eq!(tolerations[0].toleration_seconds, None);
        let pod = Pod {
            spec: Some(spec),
            ..Default::default()
        };
        assert_eq!(target_node(&pod).as_deref(), Some("n2"));
    }
}
