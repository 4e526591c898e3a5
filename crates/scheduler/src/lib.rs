//! The r8s scheduler: the reference document's "Scheduler" stage. It watches pods that have no
//! node and name one of its profiles, and nodes; for each pod it runs the Filter plugins over
//! the nodes, the Score plugins over the nodes that pass, and binds the pod to the best one with
//! a Binding (the API server sets spec.nodeName and PodScheduled). A pod that fits nowhere gets
//! PodScheduled=False (Unschedulable) and a FailedScheduling event worded as upstream's.
//!
//! It talks to the API server only through kube-rs, so it runs inside `r8s server` or alone as
//! `r8s scheduler --kubeconfig …`.

pub mod affinity;
pub mod cache;
pub mod config;
pub mod metrics;
pub mod plugins;
pub mod preemption;
pub mod queue;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::{
    Binding, Namespace, Node, ObjectReference, PersistentVolume, PersistentVolumeClaim, Pod, Service,
};
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::events::EventType;
use kube::{Client, Resource, ResourceExt};
use r8s_client::events::Events;

/// The annotation telling a `WaitForFirstConsumer` claim's provisioner the chosen node.
pub const SELECTED_NODE: &str = "volume.kubernetes.io/selected-node";

/// How long binding a pod waits for its claims to be bound (upstream's `bindTimeoutSeconds`
/// is 600; a local provisioner answers within a second).
const BIND_VOLUMES_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(120);
use r8s_client::informer::{Change, Factory};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use cache::{Cache, PodInfo};
use plugins::{Filter, Score};
use queue::{Outcome, SchedulingQueue};

pub const DEFAULT_SCHEDULER: &str = "default-scheduler";
pub const FIELD_MANAGER: &str = "kube-scheduler";

#[derive(Clone, Debug)]
pub struct Options {
    /// The profiles this scheduler serves, one per schedulerName.
    pub profiles: Vec<config::ProfileConfig>,
    pub leader_elect: bool,
    pub identity: String,
    /// Where the scheduler counts its attempts (kept across leadership terms).
    pub metrics: Arc<metrics::SchedulerMetrics>,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            profiles: vec![config::ProfileConfig::default_for(DEFAULT_SCHEDULER)],
            leader_elect: true,
            identity: r8s_client::default_identity(),
            metrics: Arc::new(metrics::SchedulerMetrics::default()),
        }
    }
}

/// One profile's plugins, built from its configuration.
pub struct Profile {
    filters: Vec<Box<dyn Filter>>,
    scores: Vec<(Box<dyn Score>, i64)>,
    cluster_filters: Vec<Box<dyn affinity::ClusterFilter>>,
    cluster_scores: Vec<(Box<dyn affinity::ClusterScore>, i64)>,
    percentage: Option<u32>,
}

impl Profile {
    pub fn new(cfg: &config::ProfileConfig) -> Self {
        let mut p = Profile {
            filters: Vec::new(),
            scores: Vec::new(),
            cluster_filters: Vec::new(),
            cluster_scores: Vec::new(),
            percentage: cfg.percentage_of_nodes_to_score.filter(|p| *p > 0),
        };
        for name in &cfg.filters {
            match name.as_str() {
                "NodeUnschedulable" => p.filters.push(Box::new(plugins::NodeUnschedulable)),
                "NodeName" => p.filters.push(Box::new(plugins::NodeName)),
                "TaintToleration" => p.filters.push(Box::new(plugins::TaintToleration)),
                "NodeAffinity" => p.filters.push(Box::new(plugins::NodeAffinity)),
                "NodePorts" => p.filters.push(Box::new(plugins::NodePorts)),
                "NodeResourcesFit" => p.filters.push(Box::new(plugins::NodeResourcesFit)),
                "PodTopologySpread" => p
                    .cluster_filters
                    .push(Box::new(affinity::PodTopologySpread(cfg.spread_defaults.clone()))),
                "InterPodAffinity" => p.cluster_filters.push(Box::new(affinity::InterPodAffinity)),
                _ => {}
            }
        }
        for (name, w) in &cfg.scores {
            match name.as_str() {
                "TaintToleration" => p.scores.push((Box::new(plugins::TaintToleration), *w)),
                "NodeAffinity" => p.scores.push((Box::new(plugins::NodeAffinity), *w)),
                "NodeResourcesFit" => p
                    .scores
                    .push((Box::new(plugins::FitScore(cfg.fit_scoring.clone())), *w)),
                "NodeResourcesBalancedAllocation" => {
                    p.scores.push((Box::new(plugins::BalancedAllocation), *w))
                }
                "PodTopologySpread" => p.cluster_scores.push((
                    Box::new(affinity::PodTopologySpread(cfg.spread_defaults.clone())),
                    *w,
                )),
                "InterPodAffinity" => p.cluster_scores.push((Box::new(affinity::InterPodAffinity), *w)),
                "ImageLocality" => p.cluster_scores.push((Box::new(affinity::ImageLocality), *w)),
                _ => {}
            }
        }
        p
    }
}

/// Run the scheduler until `stop`, behind the kube-system/kube-scheduler Lease unless disabled.
pub async fn run(client: Client, opts: Options, stop: CancellationToken) {
    if opts.leader_elect {
        // A second scheduler with its own profiles (a custom scheduler) has its own Lease.
        let lease = if opts
            .profiles
            .iter()
            .any(|p| p.scheduler_name == DEFAULT_SCHEDULER)
        {
            "kube-scheduler".to_string()
        } else {
            opts.profiles
                .first()
                .map(|p| p.scheduler_name.clone())
                .unwrap_or_else(|| "kube-scheduler".into())
        };
        let election = r8s_client::leader::LeaderElection::new(&lease, opts.identity.clone());
        // Bindings are written only while the Lease is surely ours (the elector's fence).
        let fenced = r8s_client::leader::fenced(client.clone(), election.fence.clone());
        election
            .run(client, stop, move |leading| {
                let s = Scheduler::new(fenced.clone(), opts.clone());
                async move { s.run(leading).await }
            })
            .await;
    } else {
        Scheduler::new(client, opts).run(stop).await;
    }
}

/// How many feasible nodes to look for before scoring (upstream `numFeasibleNodesToFind` with
/// the adaptive percentage): all of a small cluster, a shrinking share of a large one.
pub fn feasible_nodes_to_find(total: usize) -> usize {
    const MIN: usize = 100;
    if total < MIN {
        return total;
    }
    let pct = (50 - total as i64 / 125).max(5) as usize;
    (total * pct / 100).max(MIN)
}

/// Upstream's FitError message: "0/3 nodes are available: 1 Insufficient cpu, 2 node(s) had
/// untolerated taint {k: v}." — each reason with the number of nodes that gave it, sorted.
pub fn fit_error(total: usize, reasons: &BTreeMap<String, usize>) -> String {
    if total == 0 {
        return "no nodes available to schedule pods".into();
    }
    let mut parts: Vec<String> = reasons.iter().map(|(r, n)| format!("{n} {r}")).collect();
    parts.sort();
    format!("0/{total} nodes are available: {}.", parts.join(", "))
}

pub struct Scheduler {
    client: Client,
    cache: Arc<Mutex<Cache>>,
    queue: Arc<SchedulingQueue>,
    profiles: std::collections::HashMap<String, Profile>,
    events: Events,
    next_start: Mutex<usize>,
    /// At most this many Binding requests in flight.
    binds: Arc<tokio::sync::Semaphore>,
    /// Durations of scheduling attempts (filter + score), in microseconds, since the last report.
    attempts: Mutex<Vec<u64>>,
    metrics: Arc<metrics::SchedulerMetrics>,
}

fn profile_name(pod: &Pod) -> &str {
    pod.spec
        .as_ref()
        .and_then(|s| s.scheduler_name.as_deref())
        .unwrap_or(DEFAULT_SCHEDULER)
}

/// The outcome of one scheduling cycle.
pub enum Decision {
    Node(String),
    Unschedulable(String),
    /// Unschedulable whatever happens to other pods: preemption is not tried.
    Unresolvable(String),
}

impl Scheduler {
    pub fn new(client: Client, opts: Options) -> Arc<Self> {
        let profiles = opts
            .profiles
            .iter()
            .map(|p| (p.scheduler_name.clone(), Profile::new(p)))
            .collect();
        Arc::new(Self {
            events: Events::new(client.clone(), DEFAULT_SCHEDULER),
            client,
            cache: Arc::new(Mutex::new(Cache::default())),
            queue: SchedulingQueue::new(),
            profiles,
            next_start: Mutex::new(0),
            binds: Arc::new(tokio::sync::Semaphore::new(64)),
            attempts: Mutex::new(Vec::new()),
            metrics: opts.metrics.clone(),
        })
    }

    fn ours(&self, pod: &Pod) -> bool {
        self.profiles.contains_key(profile_name(pod))
    }

    fn on_pod(&self, change: Change<'_, Pod>) {
        let (pod, deleted) = match change {
            Change::Added(p) | Change::Updated(_, p) => (p, false),
            Change::Deleted(p) => (p, true),
        };
        let key = format!("{}/{}", pod.namespace().unwrap_or_default(), pod.name_any());
        let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
        let terminal = phase == Some("Succeeded") || phase == Some("Failed");
        let assigned = pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.as_deref())
            .is_some_and(|n| !n.is_empty());
        if assigned {
            self.queue.delete(&key);
            let mut cache = self.cache.lock().unwrap();
            cache.unnominate(&key);
            if deleted || terminal {
                cache.remove_pod(&key);
                drop(cache);
                // Room was freed.
                self.queue.move_all_to_active();
            } else {
                cache.set_pod(pod.clone());
            }
            return;
        }
        if deleted || terminal || pod.metadata.deletion_timestamp.is_some() || !self.ours(pod) {
            self.queue.delete(&key);
            let mut cache = self.cache.lock().unwrap();
            cache.forget(&key);
            cache.unnominate(&key);
            return;
        }
        let nominated = pod.status.as_ref().and_then(|s| s.nominated_node_name.as_deref());
        self.cache
            .lock()
            .unwrap()
            .nominate(Arc::new(PodInfo::new(pod.clone())), nominated);
        // Bound by us but not yet seen bound: leave it alone.
        if self.cache.lock().unwrap().is_assumed(&key) {
            return;
        }
        self.queue.add_or_update(&key, pod.clone());
    }

    fn on_node(&self, change: Change<'_, Node>) {
        match change {
            Change::Added(n) | Change::Updated(_, n) => {
                self.cache.lock().unwrap().set_node(n.clone());
                self.queue.move_all_to_active();
            }
            Change::Deleted(n) => self.cache.lock().unwrap().remove_node(&n.name_any()),
        }
    }

    pub async fn run(self: Arc<Self>, stop: CancellationToken) {
        let factory = Factory::new(self.client.clone(), None);
        let pods = factory.get::<Pod>();
        let nodes = factory.get::<Node>();
        // Services' and ReplicaSets' selectors, for default topology spreading (r8s serves no
        // StatefulSets yet). Best effort: scheduling does not wait for them.
        let services = factory.get::<Service>();
        let weak = Arc::downgrade(&self);
        services.add_handler(move |c| {
            if let Some(s) = weak.upgrade() {
                let mut cache = s.cache.lock().unwrap();
                match c {
                    Change::Added(svc) | Change::Updated(_, svc) => {
                        let ns = svc.namespace().unwrap_or_default();
                        let selector = svc
                            .spec
                            .as_ref()
                            .and_then(|s| s.selector.clone())
                            .unwrap_or_default();
                        cache
                            .services
                            .insert(format!("{ns}/{}", svc.name_any()), (ns, selector));
                    }
                    Change::Deleted(svc) => {
                        cache.services.remove(&format!(
                            "{}/{}",
                            svc.namespace().unwrap_or_default(),
                            svc.name_any()
                        ));
                    }
                }
            }
        });
        let replicasets = factory.get::<ReplicaSet>();
        let weak = Arc::downgrade(&self);
        replicasets.add_handler(move |c| {
            if let Some(s) = weak.upgrade() {
                let mut cache = s.cache.lock().unwrap();
                match c {
                    Change::Added(rs) | Change::Updated(_, rs) => {
                        let key = format!(
                            "ReplicaSet/{}/{}",
                            rs.namespace().unwrap_or_default(),
                            rs.name_any()
                        );
                        let selector = rs.spec.as_ref().map(|s| s.selector.clone()).unwrap_or_default();
                        cache.controllers.insert(key, selector);
                    }
                    Change::Deleted(rs) => {
                        cache.controllers.remove(&format!(
                            "ReplicaSet/{}/{}",
                            rs.namespace().unwrap_or_default(),
                            rs.name_any()
                        ));
                    }
                }
            }
        });
        // Claims, for the volume check: a claim created or bound retries the pods waiting.
        let claims = factory.get::<PersistentVolumeClaim>();
        let weak = Arc::downgrade(&self);
        claims.add_handler(move |c| {
            if let Some(s) = weak.upgrade() {
                let key = |pvc: &PersistentVolumeClaim| {
                    format!("{}/{}", pvc.namespace().unwrap_or_default(), pvc.name_any())
                };
                match c {
                    Change::Added(pvc) | Change::Updated(_, pvc) => {
                        let spec = pvc.spec.as_ref();
                        let info = cache::ClaimInfo {
                            volume: spec.and_then(|s| s.volume_name.clone()).filter(|v| !v.is_empty()),
                            class: spec
                                .and_then(|s| s.storage_class_name.clone())
                                .unwrap_or_default(),
                            selected_node: pvc
                                .metadata
                                .annotations
                                .as_ref()
                                .and_then(|a| a.get(SELECTED_NODE).cloned()),
                        };
                        s.cache.lock().unwrap().claims.insert(key(pvc), info);
                    }
                    Change::Deleted(pvc) => {
                        s.cache.lock().unwrap().claims.remove(&key(pvc));
                    }
                }
                s.queue.move_all_to_active();
            }
        });
        // Volumes' node affinity, for the claims bound to them.
        let volumes = factory.get::<PersistentVolume>();
        let weak = Arc::downgrade(&self);
        volumes.add_handler(move |c| {
            if let Some(s) = weak.upgrade() {
                match c {
                    Change::Added(pv) | Change::Updated(_, pv) => {
                        let sel = pv
                            .spec
                            .as_ref()
                            .and_then(|s| s.node_affinity.as_ref())
                            .and_then(|a| a.required.clone());
                        s.cache.lock().unwrap().volumes.insert(pv.name_any(), sel);
                    }
                    Change::Deleted(pv) => {
                        s.cache.lock().unwrap().volumes.remove(&pv.name_any());
                    }
                }
                s.queue.move_all_to_active();
            }
        });
        // StorageClasses' binding modes.
        let classes = factory.get::<StorageClass>();
        let weak = Arc::downgrade(&self);
        classes.add_handler(move |c| {
            if let Some(s) = weak.upgrade() {
                let mut cache = s.cache.lock().unwrap();
                match c {
                    Change::Added(sc) | Change::Updated(_, sc) => {
                        if sc.volume_binding_mode.as_deref() == Some("WaitForFirstConsumer") {
                            cache.waiting_classes.insert(sc.name_any());
                        } else {
                            cache.waiting_classes.remove(&sc.name_any());
                        }
                    }
                    Change::Deleted(sc) => {
                        cache.waiting_classes.remove(&sc.name_any());
                    }
                }
                drop(cache);
                s.queue.move_all_to_active();
            }
        });
        // Namespaces' labels, for affinity terms' namespaceSelector.
        let namespaces = factory.get::<Namespace>();
        let weak = Arc::downgrade(&self);
        namespaces.add_handler(move |c| {
            if let Some(s) = weak.upgrade() {
                let mut cache = s.cache.lock().unwrap();
                match c {
                    Change::Added(ns) | Change::Updated(_, ns) => {
                        cache
                            .namespace_labels
                            .insert(ns.name_any(), ns.metadata.labels.clone().unwrap_or_default());
                    }
                    Change::Deleted(ns) => {
                        cache.namespace_labels.remove(&ns.name_any());
                    }
                }
            }
        });
        let weak = Arc::downgrade(&self);
        pods.add_handler(move |c| {
            if let Some(s) = weak.upgrade() {
                s.on_pod(c)
            }
        });
        let weak = Arc::downgrade(&self);
        nodes.add_handler(move |c| {
            if let Some(s) = weak.upgrade() {
                s.on_node(c)
            }
        });
        let informers = factory.start(&stop);
        tokio::select! {
            _ = async { nodes.wait_synced().await; pods.wait_synced().await; namespaces.wait_synced().await } => {}
            _ = stop.cancelled() => return,
        }
        tracing::info!(profiles = ?self.profiles.keys().collect::<Vec<_>>(), "scheduler running");
        // Report attempt durations now and then (upstream exports them as
        // scheduler_scheduling_attempt_duration_seconds).
        let this = self.clone();
        let reporter_stop = stop.clone();
        tokio::spawn(async move {
            let mut total = 0usize;
            loop {
                tokio::select! {
                    _ = reporter_stop.cancelled() => return,
                    _ = tokio::time::sleep(std::time::Duration::from_secs(5)) => {}
                }
                let mut window = std::mem::take(&mut *this.attempts.lock().unwrap());
                if window.is_empty() {
                    continue;
                }
                window.sort_unstable();
                total += window.len();
                let pct = |p: f64| window[((window.len() - 1) as f64 * p).round() as usize];
                tracing::info!(
                    attempts = window.len(),
                    total,
                    p50_us = pct(0.5),
                    p99_us = pct(0.99),
                    max_us = window[window.len() - 1],
                    "scheduling attempts"
                );
            }
        });
        let this = self.clone();
        let stopper = stop.clone();
        tokio::spawn(async move {
            stopper.cancelled().await;
            this.queue.close();
        });
        while let Some((key, pod)) = self.queue.pop().await {
            self.schedule_one(key, pod).await;
        }
        for i in informers {
            i.abort();
        }
    }

    /// Filter and score every node for `pod` (upstream `schedulePod`).
    pub fn decide(&self, info: &PodInfo) -> Decision {
        let Some(profile) = self.profiles.get(profile_name(&info.pod)) else {
            return Decision::Unschedulable(format!(
                "no profile for scheduler {:?}",
                profile_name(&info.pod)
            ));
        };
        let cache = self.cache.lock().unwrap();
        let total = cache.order.len();
        if let Some(why) = cache.volume_check(&info.pod).filter(|_| total > 0) {
            // No node can help, nor preemption (upstream's PreFilter failure).
            return Decision::Unresolvable(format!(
                "0/{total} nodes are available: {why}. preemption: 0/{total} nodes are available: {total} Preemption is not helpful for scheduling."
            ));
        }
        let want = match profile.percentage {
            Some(pct) if total >= 100 => (total * pct as usize / 100).clamp(100, total),
            _ => feasible_nodes_to_find(total),
        };
        let mut reasons: BTreeMap<String, usize> = BTreeMap::new();
        let checks: Vec<Box<dyn affinity::NodeCheck>> = profile
            .cluster_filters
            .iter()
            .map(|f| f.prepare(info, &cache))
            .collect();
        let mut feasible: Vec<&cache::NodeInfo> = Vec::new();
        let start = {
            let mut s = self.next_start.lock().unwrap();
            let v = *s;
            *s = if total == 0 { 0 } else { (v + 1) % total };
            v
        };
        for i in 0..total {
            if feasible.len() >= want {
                break;
            }
            let name = &cache.order[(start + i) % total];
            let Some(node) = cache.nodes.get(name) else {
                continue;
            };
            let verdict = match cache.volume_node_conflict(&info.pod, node) {
                Some(r) => Err(vec![r]),
                None => passes(profile, info, node, &checks, &cache),
            };
            match verdict {
                Ok(()) => feasible.push(node),
                Err(rs) => {
                    for r in rs {
                        *reasons.entry(r).or_default() += 1;
                    }
                }
            }
        }
        // The journey's `schedule` stage (`r8s trace`) is told what was found and why.
        let stage = tracing::Span::current();
        let explain = !stage.is_none();
        if feasible.is_empty() {
            return Decision::Unschedulable(fit_error(total, &reasons));
        }
        let found = format!(
            "{} of {total} node{} feasible",
            feasible.len(),
            if total == 1 { "" } else { "s" }
        );
        if feasible.len() == 1 {
            // As upstream, one feasible node is not scored.
            if explain {
                let chose = format!("{found}; chose {} (the only one, not scored)", feasible[0].name);
                stage.record("decision", chose.as_str());
            }
            return Decision::Node(feasible[0].name.clone());
        }
        let mut totals = vec![0i64; feasible.len()];
        // Each plugin's weighted scores, kept for the explanation.
        let mut by_plugin: Vec<(&str, Vec<i64>)> = Vec::new();
        for (plugin, weight) in &profile.scores {
            let mut scores: Vec<i64> = feasible.iter().map(|n| plugin.score(info, n)).collect();
            plugin.normalize(&mut scores);
            for (t, s) in totals.iter_mut().zip(&scores) {
                *t += s * weight;
            }
            if explain {
                by_plugin.push((plugin.name(), scores.iter().map(|s| s * weight).collect()));
            }
        }
        for (plugin, weight) in &profile.cluster_scores {
            let check = plugin.prepare(info, &cache);
            let mut scores: Vec<i64> = feasible.iter().map(|n| check.score(n)).collect();
            check.normalize(&mut scores);
            for (t, s) in totals.iter_mut().zip(&scores) {
                *t += s * weight;
            }
            if explain {
                by_plugin.push((plugin.name(), scores.iter().map(|s| s * weight).collect()));
            }
        }
        // The best score; ties go to the first in round-robin order, which rotates.
        let best = totals
            .iter()
            .enumerate()
            .max_by_key(|(i, s)| (**s, std::cmp::Reverse(*i)))
            .map(|(i, _)| i)
            .unwrap_or(0);
        if explain {
            let plugins: Vec<String> = by_plugin
                .iter()
                .filter(|(_, scores)| scores.iter().any(|s| *s != 0))
                .map(|(name, scores)| format!("{name} {}", scores[best]))
                .collect();
            let runner_up = totals
                .iter()
                .enumerate()
                .filter(|(i, _)| *i != best)
                .map(|(_, t)| *t)
                .max()
                .unwrap_or(0);
            let chose = format!(
                "{found}; chose {}: score {} ({}), next best {runner_up}",
                feasible[best].name,
                totals[best],
                plugins.join(", "),
            );
            stage.record("decision", chose.as_str());
        }
        Decision::Node(feasible[best].name.clone())
    }

    async fn schedule_one(self: &Arc<Self>, key: String, pod: Arc<Pod>) {
        let info = Arc::new(PodInfo::new(pod.clone()));
        let started = std::time::Instant::now();
        let (active, backoff, unschedulable) = self.queue.counts();
        self.metrics.set_pending(active, backoff, unschedulable);
        let profile = profile_name(&pod).to_string();
        // The journey's `schedule` stage (`r8s trace`): the decision, then the binding.
        let stage = tracing::info_span!(
            target: "journey::scheduler",
            "schedule",
            uid = pod.metadata.uid.as_deref().unwrap_or(""),
            object = %format_args!("Pod {key}"),
            decision = tracing::field::Empty,
        );
        let decision = stage.in_scope(|| self.decide(&info));
        if let Decision::Unschedulable(why) | Decision::Unresolvable(why) = &decision {
            stage.record(
                "decision",
                tracing::field::display(format_args!("unschedulable: {why}")),
            );
        }
        self.attempts
            .lock()
            .unwrap()
            .push(started.elapsed().as_micros() as u64);
        let resolvable = !matches!(decision, Decision::Unresolvable(_));
        match decision {
            Decision::Node(node) => {
                {
                    let mut cache = self.cache.lock().unwrap();
                    cache.unnominate(&key);
                    cache.assume(info.clone(), &node);
                }
                // Bind off the scheduling path: the cache already counts the pod.
                let this = self.clone();
                let permit = self.binds.clone().acquire_owned().await;
                let bind_stage = tracing::info_span!(
                    target: "journey::scheduler",
                    parent: &stage,
                    "bind",
                    node = %node,
                    error = tracing::field::Empty,
                );
                tokio::spawn(async move {
                    let _permit = permit;
                    let bound = match this.bind_volumes(&pod, &node).await {
                        Ok(()) => tracing::Instrument::instrument(this.bind(&pod, &node), bind_stage.clone())
                            .await
                            .map_err(|e| e.to_string()),
                        Err(e) => Err(e),
                    };
                    if let Err(e) = &bound {
                        bind_stage.record("error", e.as_str());
                    }
                    drop(bind_stage);
                    match bound {
                        Ok(()) => {
                            this.metrics
                                .attempt("scheduled", &profile, started.elapsed().as_secs_f64());
                            this.queue.done(&key, Outcome::Scheduled);
                            this.events.emit_once(
                                pod.object_ref(&()),
                                EventType::Normal,
                                "Scheduled",
                                format!("Successfully assigned {key} to {node}"),
                            );
                        }
                        Err(e) => {
                            tracing::info!(pod = %key, %node, error = %e, "binding failed");
                            this.metrics
                                .attempt("error", &profile, started.elapsed().as_secs_f64());
                            this.cache.lock().unwrap().forget(&key);
                            this.queue.done(&key, Outcome::Error);
                        }
                    }
                });
            }
            Decision::Unschedulable(mut msg) | Decision::Unresolvable(mut msg) => {
                self.metrics
                    .attempt("unschedulable", &profile, started.elapsed().as_secs_f64());
                // PostFilter: make room by preempting lower-priority pods, if allowed.
                if resolvable && preemption::may_preempt(&info) {
                    self.metrics.preemption_attempts.inc();
                    let plan = {
                        let cache = self.cache.lock().unwrap();
                        match self.profiles.get(profile_name(&pod)) {
                            Some(p) => preemption::find(&info, &cache, &p.filters, &p.cluster_filters),
                            None => Err(String::new()),
                        }
                    };
                    match plan {
                        Ok(plan) => {
                            self.metrics.preemption_victims.observe(plan.victims.len() as f64);
                            self.preempt(&pod, &key, plan).await
                        }
                        Err(why) => msg = format!("{msg} {why}"),
                    }
                }
                self.queue.done(&key, Outcome::Unschedulable);
                self.events.emit(
                    pod.object_ref(&()),
                    EventType::Warning,
                    "FailedScheduling",
                    msg.clone(),
                );
                if let Err(e) = self.mark_unschedulable(&pod, &msg).await {
                    tracing::debug!(pod = %key, error = %e, "could not record PodScheduled=False");
                }
            }
        }
    }

    /// Delete the victims and nominate the node for the preemptor (status.nominatedNodeName);
    /// it is retried when the victims are gone. Until then the room is kept for it.
    async fn preempt(&self, pod: &Pod, key: &str, plan: preemption::Plan) {
        self.cache
            .lock()
            .unwrap()
            .nominate(Arc::new(PodInfo::new(Arc::new(pod.clone()))), Some(&plan.node));
        for v in &plan.victims {
            let api: Api<Pod> = Api::namespaced(
                self.client.clone(),
                v.pod.metadata.namespace.as_deref().unwrap_or(""),
            );
            let name = v.pod.metadata.name.clone().unwrap_or_default();
            // The victim learns why it goes first (upstream's prepareCandidate): a
            // DisruptionTarget condition, which a Job's pod failure policy can match on.
            let marked = v
                .pod
                .status
                .iter()
                .flat_map(|s| s.conditions.iter().flatten())
                .any(|c| {
                    c.type_ == "DisruptionTarget"
                        && c.status == "True"
                        && c.reason.as_deref() == Some("PreemptionByScheduler")
                });
            if !marked {
                let scheduler = pod
                    .spec
                    .as_ref()
                    .and_then(|s| s.scheduler_name.clone())
                    .unwrap_or_else(|| "default-scheduler".into());
                let condition = json!({"status": {"conditions": [{
                    "type": "DisruptionTarget",
                    "status": "True",
                    "reason": "PreemptionByScheduler",
                    "message": format!("{scheduler}: preempting to accommodate a higher priority pod"),
                    "lastTransitionTime": jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
                }]}});
                let pp = PatchParams {
                    field_manager: Some(FIELD_MANAGER.into()),
                    ..Default::default()
                };
                if let Err(e) = api.patch_status(&name, &pp, &Patch::Strategic(&condition)).await {
                    tracing::info!(victim = %v.key, error = %e, "preemption: could not mark victim");
                }
            }
            let dp = kube::api::DeleteParams {
                preconditions: Some(kube::api::Preconditions {
                    uid: v.pod.metadata.uid.clone(),
                    resource_version: None,
                }),
                ..Default::default()
            };
            match api.delete(&name, &dp).await {
                Ok(_) => self.events.emit_once(
                    v.pod.object_ref(&()),
                    EventType::Normal,
                    "Preempted",
                    format!(
                        "Preempted by pod {} on node {}",
                        pod.metadata.uid.as_deref().unwrap_or(key),
                        plan.node
                    ),
                ),
                Err(e) => tracing::info!(victim = %v.key, error = %e, "preemption: could not delete victim"),
            }
        }
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &pod.namespace().unwrap_or_default());
        let patch = json!({"status": {"nominatedNodeName": plan.node}});
        let pp = PatchParams {
            field_manager: Some(FIELD_MANAGER.into()),
            ..Default::default()
        };
        if let Err(e) = api
            .patch_status(&pod.name_any(), &pp, &Patch::Merge(&patch))
            .await
        {
            tracing::debug!(pod = %key, error = %e, "could not set nominatedNodeName");
        }
    }

    /// Upstream's VolumeBinding PreBind: the pod's waiting claims learn the chosen node
    /// (`volume.kubernetes.io/selected-node`, for their class's provisioner), then the pod is
    /// bound only once every claim is (bounded wait, as upstream's bind timeout).
    async fn bind_volumes(&self, pod: &Pod, node: &str) -> Result<(), String> {
        let (to_place, bound) = {
            let cache = self.cache.lock().unwrap();
            (cache.claims_to_place(pod), cache.claims_bound(pod))
        };
        if bound {
            return Ok(());
        }
        for key in &to_place {
            let (ns, name) = key.split_once('/').unwrap_or(("", key));
            let api: Api<PersistentVolumeClaim> = Api::namespaced(self.client.clone(), ns);
            // An update, as upstream's scheduler role allows (not a patch).
            let mut pvc = api.get(name).await.map_err(|e| e.to_string())?;
            pvc.metadata
                .annotations
                .get_or_insert_with(Default::default)
                .insert(SELECTED_NODE.into(), node.into());
            let pp = PostParams {
                field_manager: Some(FIELD_MANAGER.into()),
                ..Default::default()
            };
            api.replace(name, &pp, &pvc).await.map_err(|e| e.to_string())?;
        }
        let deadline = std::time::Instant::now() + BIND_VOLUMES_TIMEOUT;
        loop {
            if self.cache.lock().unwrap().claims_bound(pod) {
                return Ok(());
            }
            if std::time::Instant::now() > deadline {
                return Err("binding volumes: timed out waiting for the condition".into());
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    }

    async fn bind(&self, pod: &Pod, node: &str) -> Result<(), kube::Error> {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &pod.namespace().unwrap_or_default());
        let binding = Binding {
            metadata: ObjectMeta {
                name: pod.metadata.name.clone(),
                namespace: pod.metadata.namespace.clone(),
                uid: pod.metadata.uid.clone(),
                ..Default::default()
            },
            target: ObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Node".into()),
                name: Some(node.to_string()),
                ..Default::default()
            },
        };
        let pp = PostParams {
            field_manager: Some(FIELD_MANAGER.into()),
            ..Default::default()
        };
        api.create_subresource::<_, serde_json::Value>("binding", &pod.name_any(), &pp, &binding)
            .await
            .map(|_| ())
    }

    /// PodScheduled=False, reason Unschedulable, with the FitError message.
    async fn mark_unschedulable(&self, pod: &Pod, msg: &str) -> Result<(), kube::Error> {
        let current = pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|cs| cs.iter().find(|c| c.type_ == "PodScheduled"));
        if current.is_some_and(|c| c.status == "False" && c.message.as_deref() == Some(msg)) {
            return Ok(());
        }
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &pod.namespace().unwrap_or_default());
        let patch = json!({"status": {"conditions": [{
            "type": "PodScheduled",
            "status": "False",
            "reason": "Unschedulable",
            "message": msg,
            "lastProbeTime": null,
            "lastTransitionTime": jiff::Timestamp::now().to_string(),
        }]}});
        let pp = PatchParams {
            field_manager: Some(FIELD_MANAGER.into()),
            ..Default::default()
        };
        api.patch_status(&pod.name_any(), &pp, &Patch::Strategic(&patch))
            .await
            .map(|_| ())
    }

    /// Pods waiting in the queue (for the simulated-cluster benchmark and tests).
    pub fn pending(&self) -> usize {
        self.queue.len()
    }
}

/// Does `info` pass the profile's filters on `node`? Where pods of at least its priority are
/// nominated to the node (waiting for their preemption victims to go), it must fit beside
/// them too (upstream's `RunFilterPluginsWithNominatedPods`).
fn passes(
    profile: &Profile,
    info: &PodInfo,
    node: &cache::NodeInfo,
    checks: &[Box<dyn affinity::NodeCheck>],
    cache: &cache::Cache,
) -> Result<(), plugins::Reasons> {
    let run = |n: &cache::NodeInfo| {
        profile
            .filters
            .iter()
            .try_for_each(|f| f.filter(info, n))
            .and_then(|()| checks.iter().try_for_each(|c| c.filter(n)))
    };
    let nominated: Vec<&Arc<PodInfo>> = cache.nominated_for(&node.name, info).collect();
    if !nominated.is_empty() {
        let mut with = node.clone();
        for p in nominated {
            with.add_pod(p.clone());
        }
        run(&with)?;
    }
    run(node)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fit_error_reads_like_upstream() {
        let mut r = BTreeMap::new();
        r.insert("node(s) had untolerated taint {dedicated: gpu}".to_string(), 2);
        r.insert("Insufficient cpu".to_string(), 1);
        assert_eq!(
            fit_error(3, &r),
            "0/3 nodes are available: 1 Insufficient cpu, 2 node(s) had untolerated taint {dedicated: gpu}."
        );
        assert_eq!(fit_error(0, &r), "no nodes available to schedule pods");
    }

    #[test]
    fn adaptive_share_of_nodes_to_find() {
        assert_eq!(feasible_nodes_to_find(50), 50);
        assert_eq!(feasible_nodes_to_find(100), 100);
        assert_eq!(feasible_nodes_to_find(1000), 420);
        assert_eq!(feasible_nodes_to_find(5000), 500);
        assert_eq!(feasible_nodes_to_find(100_000), 5000);
    }

    #[test]
    fn room_on_a_nominated_node_is_kept_for_the_preemptor() {
        let mut c = cache::Cache::default();
        let node: k8s_openapi::api::core::v1::Node = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "n"},
            "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"}}
        }))
        .unwrap();
        c.set_node(Arc::new(node));
        let pod = |name: &str, prio: i32, cpu: &str| {
            Arc::new(PodInfo::new(Arc::new(
                serde_json::from_value::<Pod>(serde_json::json!({
                    "metadata": {"name": name, "namespace": "default"},
                    "spec": {"priority": prio, "containers": [{"name": "c", "image": "i",
                        "resources": {"requests": {"cpu": cpu}}}]}
                }))
                .unwrap(),
            )))
        };
        let profile = Profile::new(&config::ProfileConfig::default_for(DEFAULT_SCHEDULER));
        let check = |c: &cache::Cache, p: &PodInfo| passes(&profile, p, &c.nodes["n"], &[], c);
        let small_low = pod("small-low", 1, "2");
        assert!(check(&c, &small_low).is_ok());
        // A preemptor of priority 100 waits for n with 3 cpu: a lower pod must leave it room…
        c.nominate(pod("preemptor", 100, "3"), Some("n"));
        assert_eq!(check(&c, &small_low).unwrap_err(), ["Insufficient cpu"]);
        // …a more important one need not, nor does the preemptor count against itself.
        assert!(check(&c, &pod("small-high", 1000, "2")).is_ok());
        assert!(check(&c, &pod("preemptor", 100, "3")).is_ok());
        c.unnominate("default/preemptor");
        assert!(check(&c, &small_low).is_ok());
    }
}
