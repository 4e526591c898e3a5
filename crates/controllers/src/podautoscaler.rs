//! The horizontal pod autoscaler (upstream `pkg/controller/podautoscaler`): every sync period
//! each HorizontalPodAutoscaler's target is read through its `scale` subresource, its pods'
//! usage from `metrics.k8s.io` (served in-process by the API server), and the replica count
//! the metrics ask for is computed as upstream's replica calculator does — utilisation against
//! the pods' requests, a tolerance band, unready and missing pods filled in so that a decision
//! is never made on partial data — then stabilised and rate-limited (the legacy rules, or the
//! `behavior` policies) and written back to the scale. Status, conditions and events use
//! upstream's words.
//!
//! Resource and ContainerResource metrics are served (cpu and memory, Utilization and
//! AverageValue). Pods, Object and External metrics need a custom or external metrics API,
//! which r8s does not serve: they fail as upstream fails without one, and never scale down.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::autoscaling::v1::Scale;
use k8s_openapi::api::autoscaling::v2::{
    ContainerResourceMetricStatus, HPAScalingRules, HorizontalPodAutoscaler,
    HorizontalPodAutoscalerCondition, HorizontalPodAutoscalerStatus, MetricSpec, MetricStatus, MetricTarget,
    MetricValueStatus, ResourceMetricStatus,
};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as ApiQuantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::Api;
use kube::runtime::reflector::Store;
use kube::{Client, ResourceExt};
use r8s_api::quantity::Quantity;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::{Error, SyncResult};
use r8s_client::discovery::DiscoveryCache;
use r8s_client::events::Events;
use r8s_client::informer::{key_of, lookup, Change, Factory, Informer};
use r8s_client::queue::{run_controller, WorkQueue};

/// Upstream's `--horizontal-pod-autoscaler-*` settings.
#[derive(Clone, Debug)]
pub struct HpaOptions {
    /// How often each autoscaler is reconciled (`--horizontal-pod-autoscaler-sync-period`).
    pub sync_period: Duration,
    /// How far from 1.0 the usage ratio must be before anything is scaled.
    pub tolerance: f64,
    /// How long after a pod starts its CPU may be skewed by start-up.
    pub cpu_initialization_period: Duration,
    /// How long after a pod starts its readiness may still be flapping.
    pub initial_readiness_delay: Duration,
    /// The window whose highest recommendation a scale-down may not go below
    /// (`--horizontal-pod-autoscaler-downscale-stabilization`).
    pub downscale_stabilization: Duration,
}

impl Default for HpaOptions {
    fn default() -> Self {
        Self {
            sync_period: Duration::from_secs(15),
            tolerance: 0.1,
            cpu_initialization_period: Duration::from_secs(300),
            initial_readiness_delay: Duration::from_secs(30),
            downscale_stabilization: Duration::from_secs(300),
        }
    }
}

/// What the controller remembers of one autoscaler between syncs (in memory, as upstream).
#[derive(Default)]
struct Memory {
    /// Recent recommendations (replicas, when).
    recommendations: Vec<(i32, Instant)>,
    /// Recent scale changes up and down (how many replicas, when), for the behaviour policies.
    up_events: Vec<(i32, Instant)>,
    down_events: Vec<(i32, Instant)>,
}

pub struct HorizontalController {
    client: Client,
    hpas: Arc<Informer<HorizontalPodAutoscaler>>,
    pods: Arc<Informer<Pod>>,
    hpa_store: Store<HorizontalPodAutoscaler>,
    pod_store: Store<Pod>,
    queue: Arc<WorkQueue>,
    events: Events,
    discovery: Arc<DiscoveryCache>,
    opts: HpaOptions,
    memory: Mutex<HashMap<String, Memory>>,
}

/// A metric's usage of one pod: its value (milli-units), and when and over how long it was read.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct PodMetric {
    pub value: i64,
    pub timestamp: jiff::Timestamp,
    pub window: Duration,
}

/// Why a metric could not be computed: the condition's reason, the error (what the event and
/// the condition say) and what upstream wraps it in for the sync's error.
struct MetricError {
    reason: &'static str,
    message: String,
    /// e.g. "failed to get cpu resource metric value" (empty: not wrapped).
    within: String,
}

impl MetricError {
    fn new(reason: &'static str, message: String) -> Self {
        Self {
            reason,
            message,
            within: String::new(),
        }
    }

    fn within(self, within: String) -> Self {
        Self { within, ..self }
    }

    /// The error as the sync reports it.
    fn full(&self) -> String {
        if self.within.is_empty() {
            self.message.clone()
        } else {
            format!("{}: {}", self.within, self.message)
        }
    }
}

fn milli(q: &ApiQuantity) -> Option<i64> {
    Quantity::parse(&q.0).ok().map(|q| q.milli_value() as i64)
}

/// Quantities as upstream writes milli-values (`NewMilliQuantity(v, DecimalSI)`).
fn milli_quantity(v: i64) -> ApiQuantity {
    ApiQuantity(Quantity::from_milli(v as i128).to_string())
}

/// A duration written as Go's `time.ParseDuration` reads it ("15.012s", "1m0s").
fn parse_window(s: &str) -> Option<Duration> {
    r8s_api::duration::parse(s).ok()
}

/// The PodMetrics list of `metrics.k8s.io`, summed per pod (upstream `getResourceMetric`): a
/// pod counts only if every container has the resource; with `container`, that one alone.
pub(crate) fn pod_metrics(
    list: &Value,
    resource: &str,
    container: Option<&str>,
) -> Result<BTreeMap<String, PodMetric>, String> {
    let items = list["items"].as_array().map(Vec::as_slice).unwrap_or(&[]);
    if items.is_empty() {
        return Err("no metrics returned from resource metrics API".into());
    }
    let mut out = BTreeMap::new();
    for m in items {
        let name = m["metadata"]["name"].as_str().unwrap_or("").to_owned();
        let containers = m["containers"].as_array().map(Vec::as_slice).unwrap_or(&[]);
        let value = match container {
            Some(c) => {
                let Some(found) = containers.iter().find(|x| x["name"] == c) else {
                    return Err(format!(
                        "container {c} not present in metrics for pod {}/{name}",
                        m["metadata"]["namespace"].as_str().unwrap_or("")
                    ));
                };
                found["usage"][resource]
                    .as_str()
                    .and_then(|q| Quantity::parse(q).ok())
                    .map(|q| q.milli_value() as i64)
            }
            None => {
                let values: Option<Vec<i64>> = containers
                    .iter()
                    .map(|x| {
                        x["usage"][resource]
                            .as_str()
                            .and_then(|q| Quantity::parse(q).ok())
                            .map(|q| q.milli_value() as i64)
                    })
                    .collect();
                values.filter(|v| !v.is_empty()).map(|v| v.iter().sum())
            }
        };
        let Some(value) = value else { continue };
        let timestamp = m["timestamp"]
            .as_str()
            .and_then(|t| t.parse().ok())
            .unwrap_or_else(jiff::Timestamp::now);
        let window = m["window"].as_str().and_then(parse_window).unwrap_or_default();
        out.insert(
            name,
            PodMetric {
                value,
                timestamp,
                window,
            },
        );
    }
    Ok(out)
}

/// The requests of `resource` of each pod (milli), or the first container without one.
fn pod_requests(
    pods: &[Arc<Pod>],
    resource: &str,
    container: Option<&str>,
) -> Result<HashMap<String, i64>, String> {
    let mut out = HashMap::new();
    for pod in pods {
        let name = pod.name_any();
        let spec = pod.spec.clone().unwrap_or_default();
        let sidecars = spec
            .init_containers
            .iter()
            .flatten()
            .filter(|c| c.restart_policy.as_deref() == Some("Always"));
        let mut total = 0;
        let mut found = container.is_none();
        for c in spec.containers.iter().chain(sidecars) {
            if container.is_some_and(|want| want != c.name) {
                continue;
            }
            found = true;
            let request = c
                .resources
                .as_ref()
                .and_then(|r| r.requests.as_ref())
                .and_then(|r| r.get(resource))
                .and_then(milli);
            match request {
                Some(v) => total += v,
                None => {
                    return Err(format!(
                        "missing request for {resource} in container {} of Pod {name}",
                        c.name
                    ))
                }
            }
        }
        if !found {
            return Err(format!(
                "container {} not found in Pod {name}",
                container.unwrap_or("")
            ));
        }
        out.insert(name, total);
    }
    Ok(out)
}

/// How the replica calculator sees one pod.
#[derive(Debug, PartialEq, Eq)]
enum Group {
    Ready,
    Unready,
    Missing,
    Ignored,
}

/// Upstream's `groupPods`: deleted and failed pods are ignored, pending ones unready, those
/// without a metric missing; for CPU, a pod still starting up (or never ready) is unready too.
fn group_pod(
    pod: &Pod,
    metric: Option<&PodMetric>,
    resource: &str,
    opts: &HpaOptions,
    now: jiff::Timestamp,
) -> Group {
    let status = pod.status.clone().unwrap_or_default();
    let phase = status.phase.as_deref().unwrap_or("");
    if pod.metadata.deletion_timestamp.is_some() || phase == "Failed" {
        return Group::Ignored;
    }
    if phase == "Pending" {
        return Group::Unready;
    }
    let Some(metric) = metric else {
        return Group::Missing;
    };
    if resource != "cpu" {
        return Group::Ready;
    }
    let ready = status.conditions.iter().flatten().find(|c| c.type_ == "Ready");
    let (Some(cond), Some(start)) = (ready, status.start_time.as_ref()) else {
        return Group::Unready;
    };
    let transition = cond.last_transition_time.as_ref().map(|t| t.0).unwrap_or(start.0);
    let span = |d: Duration| jiff::SignedDuration::try_from(d).unwrap_or_default();
    let unready = if start.0 + span(opts.cpu_initialization_period) > now {
        cond.status == "False" || metric.timestamp < transition + span(metric.window)
    } else {
        cond.status == "False" && start.0 + span(opts.initial_readiness_delay) > transition
    };
    if unready {
        Group::Unready
    } else {
        Group::Ready
    }
}

fn within_tolerance(ratio: f64, tolerance: f64) -> bool {
    (1.0 - tolerance..=1.0 + tolerance).contains(&ratio)
}

/// Upstream's `GetResourceUtilizationRatio`: (usage ratio, utilisation %, average usage).
fn utilization_ratio(
    metrics: &BTreeMap<String, i64>,
    requests: &HashMap<String, i64>,
    target: i32,
) -> Result<(f64, i32, i64), String> {
    let (mut used, mut requested, mut n) = (0i64, 0i64, 0i64);
    for (pod, v) in metrics {
        if let Some(r) = requests.get(pod) {
            used += v;
            requested += r;
            n += 1;
        }
    }
    if requested == 0 {
        return Err("no metrics returned matched known pods".into());
    }
    let utilization = (used * 100 / requested) as i32;
    Ok((utilization as f64 / target as f64, utilization, used / n))
}

/// The inputs of one replica calculation.
pub(crate) struct Calculation<'a> {
    pub current: i32,
    pub resource: &'a str,
    pub pods: &'a [Arc<Pod>],
    pub metrics: &'a BTreeMap<String, PodMetric>,
    pub opts: &'a HpaOptions,
    pub now: jiff::Timestamp,
}

/// The pods sorted into the calculator's groups, with the usable metrics (ready pods only).
struct Grouped {
    ready: i32,
    unready: HashSet<String>,
    missing: HashSet<String>,
    usable: BTreeMap<String, i64>,
}

impl Calculation<'_> {
    fn group(&self) -> Grouped {
        let mut g = Grouped {
            ready: 0,
            unready: HashSet::new(),
            missing: HashSet::new(),
            usable: BTreeMap::new(),
        };
        for pod in self.pods {
            let name = pod.name_any();
            let metric = self.metrics.get(&name);
            match group_pod(pod, metric, self.resource, self.opts, self.now) {
                Group::Ready => {
                    g.ready += 1;
                    if let Some(m) = metric {
                        g.usable.insert(name, m.value);
                    }
                }
                Group::Unready => {
                    g.unready.insert(name);
                }
                Group::Missing => {
                    g.missing.insert(name);
                }
                Group::Ignored => {}
            }
        }
        g
    }

    /// The rebalanced count once missing and unready pods are filled in (upstream's second
    /// pass), or the current count if that flips the direction or lands within tolerance.
    fn rebalance(&self, ratio: f64, new_ratio: f64, entries: usize) -> i32 {
        if within_tolerance(new_ratio, self.opts.tolerance)
            || (ratio < 1.0 && new_ratio > 1.0)
            || (ratio > 1.0 && new_ratio < 1.0)
        {
            return self.current;
        }
        let replicas = (new_ratio * entries as f64).ceil() as i32;
        if (new_ratio < 1.0 && replicas > self.current) || (new_ratio > 1.0 && replicas < self.current) {
            return self.current;
        }
        replicas
    }

    /// Upstream's `GetResourceReplicas`: (replicas, utilisation %, average usage in milli).
    pub fn utilization(&self, target: i32, container: Option<&str>) -> Result<(i32, i32, i64), String> {
        if self.pods.is_empty() {
            return Err("no pods returned by selector while calculating replica count".into());
        }
        let mut g = self.group();
        if g.usable.is_empty() {
            return Err("did not receive metrics for targeted pods (pods might be unready)".into());
        }
        let requests = pod_requests(self.pods, self.resource, container)?;
        let (ratio, utilization, raw) = utilization_ratio(&g.usable, &requests, target)?;
        let scale_up_with_unready = !g.unready.is_empty() && ratio > 1.0;
        if !scale_up_with_unready && g.missing.is_empty() {
            if within_tolerance(ratio, self.opts.tolerance) {
                return Ok((self.current, utilization, raw));
            }
            return Ok(((ratio * g.ready as f64).ceil() as i32, utilization, raw));
        }
        for pod in &g.missing {
            let request = requests.get(pod).copied().unwrap_or(0);
            let value = if ratio < 1.0 {
                request * i64::from(target.max(100)) / 100
            } else {
                0
            };
            g.usable.insert(pod.clone(), value);
        }
        if scale_up_with_unready {
            for pod in &g.unready {
                g.usable.insert(pod.clone(), 0);
            }
        }
        let (new_ratio, _, _) = utilization_ratio(&g.usable, &requests, target)?;
        Ok((self.rebalance(ratio, new_ratio, g.usable.len()), utilization, raw))
    }

    /// Upstream's `GetRawResourceReplicas` (an AverageValue target): (replicas, average usage).
    pub fn average_value(&self, target_milli: i64) -> Result<(i32, i64), String> {
        if self.pods.is_empty() {
            return Err("no pods returned by selector while calculating replica count".into());
        }
        let mut g = self.group();
        if g.usable.is_empty() {
            return Err("did not receive metrics for targeted pods (pods might be unready)".into());
        }
        let usage_ratio = |m: &BTreeMap<String, i64>| {
            let usage = m.values().sum::<i64>() / m.len().max(1) as i64;
            (usage as f64 / target_milli as f64, usage)
        };
        let (ratio, usage) = usage_ratio(&g.usable);
        let scale_up_with_unready = !g.unready.is_empty() && ratio > 1.0;
        if !scale_up_with_unready && g.missing.is_empty() {
            if within_tolerance(ratio, self.opts.tolerance) {
                return Ok((self.current, usage));
            }
            return Ok(((ratio * g.usable.len() as f64).ceil() as i32, usage));
        }
        for pod in &g.missing {
            g.usable
                .insert(pod.clone(), if ratio < 1.0 { target_milli } else { 0 });
        }
        if scale_up_with_unready {
            for pod in &g.unready {
                g.usable.insert(pod.clone(), 0);
            }
        }
        let (new_ratio, _) = usage_ratio(&g.usable);
        Ok((self.rebalance(ratio, new_ratio, g.usable.len()), usage))
    }
}

/// Set condition `type_` (its transition time kept while its status stays).
fn set_condition(
    conditions: &mut Vec<HorizontalPodAutoscalerCondition>,
    type_: &str,
    status: &str,
    reason: &str,
    message: String,
) {
    let now = Time(jiff::Timestamp::now());
    match conditions.iter_mut().find(|c| c.type_ == type_) {
        Some(c) => {
            if c.status != status {
                c.last_transition_time = Some(now);
            }
            c.status = status.into();
            c.reason = Some(reason.into());
            c.message = Some(message);
        }
        None => conditions.push(HorizontalPodAutoscalerCondition {
            type_: type_.into(),
            status: status.into(),
            reason: Some(reason.into()),
            message: Some(message),
            last_transition_time: Some(now),
        }),
    }
}

/// The sum of the changes recorded within the last `period_seconds`.
fn changes_in(events: &[(i32, Instant)], period_seconds: i32, now: Instant) -> i32 {
    let period = Duration::from_secs(period_seconds.max(0) as u64);
    events
        .iter()
        .filter(|(_, at)| now.saturating_duration_since(*at) < period)
        .map(|(n, _)| n)
        .sum()
}

/// Upstream's `calculateScaleUpLimitWithScalingRules` and `…ScaleDownLimitWithBehaviors`.
fn rate_limit(
    current: i32,
    up: &[(i32, Instant)],
    down: &[(i32, Instant)],
    rules: &HPAScalingRules,
    scale_up: bool,
    now: Instant,
) -> i32 {
    let select = rules.select_policy.as_deref().unwrap_or("Max");
    if select == "Disabled" {
        return current;
    }
    // For a scale-up, "Max" picks the policy allowing the most replicas; for a scale-down,
    // the one allowing the fewest.
    let take_highest = (select == "Max") == scale_up;
    let mut result = if take_highest { i32::MIN } else { i32::MAX };
    for p in rules.policies.iter().flatten() {
        let start = current - changes_in(up, p.period_seconds, now) + changes_in(down, p.period_seconds, now);
        let proposed = match (p.type_.as_str(), scale_up) {
            ("Pods", true) => start + p.value,
            ("Pods", false) => start - p.value,
            (_, true) => (start as f64 * (1.0 + p.value as f64 / 100.0)).ceil() as i32,
            (_, false) => (start as f64 * (1.0 - p.value as f64 / 100.0)) as i32,
        };
        result = if take_highest {
            result.max(proposed)
        } else {
            result.min(proposed)
        };
    }
    result
}

const SCALE_UP_LIMIT: &str = "the desired replica count is increasing faster than the maximum scale rate";
const TOO_MANY: &str = "the desired replica count is more than the maximum replica count";
const TOO_FEW: &str = "the desired replica count is less than the minimum replica count";
const WITHIN: &str = "the desired count is within the acceptable range";

/// The legacy limits (no `behavior`): at most double (at least 4) per step, within min and max.
fn limit_legacy(current: i32, desired: i32, min: i32, max: i32) -> (i32, &'static str, &'static str) {
    let scale_up_limit = (2 * current).max(4);
    let (upper, reason, message) = if max > scale_up_limit {
        (scale_up_limit, "ScaleUpLimit", SCALE_UP_LIMIT)
    } else {
        (max, "TooManyReplicas", TOO_MANY)
    };
    if desired < min {
        (min, "TooFewReplicas", TOO_FEW)
    } else if desired > upper {
        (upper, reason, message)
    } else {
        (desired, "DesiredWithinRange", WITHIN)
    }
}

impl HorizontalController {
    pub fn new(factory: &Factory, opts: HpaOptions) -> Arc<Self> {
        let hpas = factory.get::<HorizontalPodAutoscaler>();
        let pods = factory.get::<Pod>();
        let this = Arc::new(Self {
            client: factory.client(),
            hpa_store: hpas.store(),
            pod_store: pods.store(),
            hpas,
            pods,
            queue: WorkQueue::new("horizontalpodautoscaler"),
            events: Events::new(factory.client(), "horizontal-pod-autoscaler"),
            discovery: factory.discovery(),
            opts,
            memory: Mutex::default(),
        });
        let q = this.queue.clone();
        // A new autoscaler or a changed spec is looked at now; after that each is looked at
        // every sync period (the sync asks to be called again), not on its own status writes.
        this.hpas.add_handler(move |c| match c {
            Change::Added(o) | Change::Deleted(o) => q.add(key_of(&**o)),
            Change::Updated(old, new) => {
                if old.metadata.generation != new.metadata.generation {
                    q.add(key_of(&**new))
                }
            }
        });
        this
    }

    pub async fn run(self: Arc<Self>, workers: usize, stop: CancellationToken) {
        let this = self.clone();
        run_controller(
            self.queue.clone(),
            vec![self.hpas.clone().synced(), self.pods.clone().synced()],
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
        let Some(hpa) = lookup(&self.hpa_store, key) else {
            self.memory.lock().unwrap().remove(key);
            return Ok(None);
        };
        match self.reconcile(key, &hpa).await {
            Err(e) if e.is_conflict() => Err(e),
            Err(e) => {
                tracing::debug!(hpa = key, error = %e, "autoscaler sync");
                Ok(Some(self.opts.sync_period))
            }
            Ok(()) => Ok(Some(self.opts.sync_period)),
        }
    }

    /// The target's `scale` subresource URL.
    async fn scale_url(&self, hpa: &HorizontalPodAutoscaler) -> Result<String, String> {
        let r = &hpa.spec.as_ref().ok_or("no spec")?.scale_target_ref;
        let api_version = r.api_version.clone().unwrap_or_default();
        let (group, version) = match api_version.split_once('/') {
            Some((g, v)) => (g.to_owned(), v.to_owned()),
            None => (String::new(), api_version.clone()),
        };
        let served = self
            .discovery
            .select(|ar, _| ar.group == group && ar.kind == r.kind)
            .await
            .map_err(|e| e.to_string())?;
        let Some(ar) = served.first() else {
            return Err(format!("no matches for kind \"{}\" in group \"{group}\"", r.kind));
        };
        let version = if version.is_empty() {
            ar.version.clone()
        } else {
            version
        };
        let base = if group.is_empty() {
            format!("/api/{version}")
        } else {
            format!("/apis/{group}/{version}")
        };
        Ok(format!(
            "{base}/namespaces/{}/{}/{}/scale",
            hpa.namespace().unwrap_or_default(),
            ar.plural,
            r.name
        ))
    }

    async fn get_scale(&self, url: &str) -> Result<Scale, String> {
        let req = http::Request::get(url)
            .body(Vec::new())
            .map_err(|e| e.to_string())?;
        self.client.request::<Scale>(req).await.map_err(|e| e.to_string())
    }

    async fn put_scale(&self, url: &str, scale: &Scale) -> Result<Scale, String> {
        let body = serde_json::to_vec(scale).map_err(|e| e.to_string())?;
        let req = http::Request::put(url)
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(body)
            .map_err(|e| e.to_string())?;
        self.client.request::<Scale>(req).await.map_err(|e| e.to_string())
    }

    /// The PodMetrics of the pods `selector` picks in `ns`.
    async fn list_pod_metrics(&self, ns: &str, selector: &str) -> Result<Value, String> {
        let q: String = form_urlencoded::Serializer::new(String::new())
            .append_pair("labelSelector", selector)
            .finish();
        let url = format!("/apis/metrics.k8s.io/v1beta1/namespaces/{ns}/pods?{q}");
        let req = http::Request::get(url)
            .body(Vec::new())
            .map_err(|e| e.to_string())?;
        self.client.request::<Value>(req).await.map_err(|e| {
            format!(
                "unable to fetch metrics from resource metrics API: {}",
                api_message(&e)
            )
        })
    }

    fn pods_of(&self, ns: &str, selector: &r8s_api::selector::Selector) -> Vec<Arc<Pod>> {
        self.pod_store
            .state()
            .into_iter()
            .filter(|p| {
                p.metadata.namespace.as_deref() == Some(ns)
                    && selector.matches_labels(p.metadata.labels.as_ref())
            })
            .collect()
    }

    /// One Resource or ContainerResource metric: (proposal, metric name, status).
    #[allow(clippy::too_many_arguments)]
    async fn resource_metric(
        &self,
        ns: &str,
        selector_text: &str,
        selector: &r8s_api::selector::Selector,
        current: i32,
        name: &str,
        container: Option<&str>,
        target: &MetricTarget,
    ) -> Result<(i32, String, MetricStatus), MetricError> {
        let reason = if container.is_some() {
            "FailedGetContainerResourceMetric"
        } else {
            "FailedGetResourceMetric"
        };
        let fail = |message: String| MetricError::new(reason, message);
        let utilization = target.average_utilization;
        let wrap = |e: String| {
            if target.average_value.is_some() {
                format!("failed to get {name} usage: {e}")
            } else if utilization.is_some() {
                format!("failed to get {name} utilization: {e}")
            } else {
                e
            }
        };
        if target.average_value.is_none() && utilization.is_none() {
            return Err(fail(
                "invalid resource metric source: neither an average utilization target nor an average value (usage) target was set".into(),
            ));
        }
        let metrics = self
            .list_pod_metrics(ns, selector_text)
            .await
            .and_then(|l| pod_metrics(&l, name, container))
            .map_err(|e| fail(wrap(format!("unable to get metrics for resource {name}: {e}"))))?;
        let pods = self.pods_of(ns, selector);
        let calc = Calculation {
            current,
            resource: name,
            pods: &pods,
            metrics: &metrics,
            opts: &self.opts,
            now: jiff::Timestamp::now(),
        };
        let (replicas, current_value) = if let Some(avg) = target.average_value.as_ref() {
            let target_milli = milli(avg).unwrap_or(0);
            let (r, usage) = calc.average_value(target_milli).map_err(|e| fail(wrap(e)))?;
            (
                r,
                MetricValueStatus {
                    average_value: Some(milli_quantity(usage)),
                    ..Default::default()
                },
            )
        } else {
            let t = utilization.unwrap_or(0);
            let (r, util, raw) = calc.utilization(t, container).map_err(|e| fail(wrap(e)))?;
            (
                r,
                MetricValueStatus {
                    average_utilization: Some(util),
                    average_value: Some(milli_quantity(raw)),
                    ..Default::default()
                },
            )
        };
        let kind = if container.is_some() {
            "container resource"
        } else {
            "resource"
        };
        let metric_name = if target.average_value.is_some() {
            format!("{name} {kind}")
        } else {
            format!("{name} {kind} utilization (percentage of request)")
        };
        let status = match container {
            None => MetricStatus {
                type_: "Resource".into(),
                resource: Some(ResourceMetricStatus {
                    name: name.into(),
                    current: current_value,
                }),
                ..Default::default()
            },
            Some(c) => MetricStatus {
                type_: "ContainerResource".into(),
                container_resource: Some(ContainerResourceMetricStatus {
                    name: name.into(),
                    container: c.into(),
                    current: current_value,
                }),
                ..Default::default()
            },
        };
        Ok((replicas, metric_name, status))
    }

    async fn metric(
        &self,
        ns: &str,
        selector_text: &str,
        selector: &r8s_api::selector::Selector,
        current: i32,
        spec: &MetricSpec,
    ) -> Result<(i32, String, MetricStatus), MetricError> {
        let no_api = |reason: &'static str, what: &str| {
            MetricError::new(
                reason,
                format!(
                    "unable to get {what}: unable to fetch metrics from {} metrics API: the server could not find the requested resource",
                    if reason == "FailedGetExternalMetric" { "external" } else { "custom" }
                ),
            )
        };
        let metric_name = |m: Option<&k8s_openapi::api::autoscaling::v2::MetricIdentifier>| {
            m.map(|m| m.name.clone()).unwrap_or_default()
        };
        match spec.type_.as_str() {
            "Resource" => {
                let r = spec.resource.as_ref().ok_or_else(|| {
                    MetricError::new("FailedGetResourceMetric", "invalid resource metric source".into())
                })?;
                self.resource_metric(ns, selector_text, selector, current, &r.name, None, &r.target)
                    .await
                    .map_err(|e| e.within(format!("failed to get {} resource metric value", r.name)))
            }
            "ContainerResource" => {
                let r = spec.container_resource.as_ref().ok_or_else(|| {
                    MetricError::new(
                        "FailedGetContainerResourceMetric",
                        "invalid container resource metric source".into(),
                    )
                })?;
                self.resource_metric(
                    ns,
                    selector_text,
                    selector,
                    current,
                    &r.name,
                    Some(&r.container),
                    &r.target,
                )
                .await
                .map_err(|e| e.within(format!("failed to get {} container metric value", r.container)))
            }
            "Pods" => {
                let name = metric_name(spec.pods.as_ref().map(|p| &p.metric));
                Err(no_api("FailedGetPodsMetric", &format!("metric {name}"))
                    .within("failed to get pods metric value".into()))
            }
            "Object" => {
                let name = metric_name(spec.object.as_ref().map(|p| &p.metric));
                Err(no_api("FailedGetObjectMetric", &format!("metric {name}"))
                    .within("failed to get object metric value".into()))
            }
            "External" => {
                let name = metric_name(spec.external.as_ref().map(|p| &p.metric));
                Err(
                    no_api("FailedGetExternalMetric", &format!("external metric {name}"))
                        .within(format!("failed to get {name} external metric value")),
                )
            }
            other => Err(MetricError::new(
                "InvalidMetricSourceType",
                format!("unknown metric source type {other:?}"),
            )),
        }
    }

    /// Upstream's `reconcileAutoscaler`.
    async fn reconcile(&self, key: &str, hpa: &HorizontalPodAutoscaler) -> Result<(), Error> {
        let ns = hpa.namespace().unwrap_or_default();
        let spec = hpa.spec.clone().unwrap_or_default();
        let original = hpa.status.clone().unwrap_or_default();
        let mut conditions = original.conditions.clone().unwrap_or_default();
        let reference = format!(
            "{}/{}/{}",
            spec.scale_target_ref.kind, ns, spec.scale_target_ref.name
        );
        let scale = match self.scale_url(hpa).await {
            Ok(url) => self.get_scale(&url).await.map(|s| (url, s)),
            Err(e) => Err(e),
        };
        let (url, scale) = match scale {
            Ok(s) => s,
            Err(e) => {
                self.events.warning(hpa, "FailedGetScale", e.clone());
                set_condition(
                    &mut conditions,
                    "AbleToScale",
                    "False",
                    "FailedGetScale",
                    format!("the HPA controller was unable to get the target's current scale: {e}"),
                );
                let mut status = original.clone();
                status.conditions = Some(conditions);
                self.write_status(hpa, &original, status).await?;
                return Err(Error::Other(format!(
                    "failed to query scale subresource for {reference}: {e}"
                )));
            }
        };
        set_condition(
            &mut conditions,
            "AbleToScale",
            "True",
            "SucceededGetScale",
            "the HPA controller was able to get the target's current scale".into(),
        );
        let current = scale.spec.as_ref().and_then(|s| s.replicas).unwrap_or(0);
        {
            let mut memory = self.memory.lock().unwrap();
            let m = memory.entry(key.to_owned()).or_default();
            if m.recommendations.is_empty() {
                m.recommendations.push((current, Instant::now()));
            }
        }
        let min = spec.min_replicas.unwrap_or(1);
        let max = spec.max_replicas;
        let mut metric_statuses: Option<Vec<MetricStatus>> = None;
        let mut partial_error = None;
        let (mut desired, reason, rescale) = if current == 0 && min != 0 {
            set_condition(
                &mut conditions,
                "ScalingActive",
                "False",
                "ScalingDisabled",
                "scaling is disabled since the replica count of the target is zero".into(),
            );
            (0, String::new(), false)
        } else if current > max {
            (
                max,
                "Current number of replicas above Spec.MaxReplicas".to_owned(),
                true,
            )
        } else if current < min {
            (
                min,
                "Current number of replicas below Spec.MinReplicas".to_owned(),
                true,
            )
        } else {
            let selector_text = scale
                .status
                .as_ref()
                .and_then(|s| s.selector.clone())
                .unwrap_or_default();
            let computed = self
                .compute(
                    hpa,
                    &ns,
                    &selector_text,
                    current,
                    &spec.metrics.clone().unwrap_or_default(),
                    &mut conditions,
                )
                .await;
            let (proposal, metric, statuses, err) = match computed {
                Ok(c) => c,
                Err((statuses, e)) => {
                    let mut status = original.clone();
                    status.current_replicas = Some(current);
                    status.current_metrics = statuses;
                    status.conditions = Some(conditions);
                    self.write_status(hpa, &original, status).await?;
                    self.events
                        .warning(hpa, "FailedComputeMetricsReplicas", e.clone());
                    return Err(Error::Other(format!(
                        "failed to compute desired number of replicas based on listed metrics for {reference}: {e}"
                    )));
                }
            };
            metric_statuses = statuses;
            partial_error = err;
            let reason = if proposal > current {
                format!("{metric} above target")
            } else {
                "All metrics below target".to_owned()
            };
            let desired = self.normalize(key, hpa, current, proposal, min, max, &mut conditions);
            (desired, reason, desired != current)
        };
        let mut last_scale_time = original.last_scale_time.clone();
        if rescale {
            let mut s = scale.clone();
            s.spec.get_or_insert_with(Default::default).replicas = Some(desired);
            match self.put_scale(&url, &s).await {
                Ok(_) => {}
                Err(e) => {
                    self.events.warning(
                        hpa,
                        "FailedRescale",
                        format!("New size: {desired}; reason: {reason}; error: {e}"),
                    );
                    set_condition(
                        &mut conditions,
                        "AbleToScale",
                        "False",
                        "FailedUpdateScale",
                        format!("the HPA controller was unable to update the target scale: {e}"),
                    );
                    let mut status = original.clone();
                    status.conditions = Some(conditions);
                    self.write_status(hpa, &original, status).await?;
                    return Err(Error::Other(format!("failed to rescale {reference}: {e}")));
                }
            }
            set_condition(
                &mut conditions,
                "AbleToScale",
                "True",
                "SucceededRescale",
                format!("the HPA controller was able to update the target scale to {desired}"),
            );
            self.events.normal(
                hpa,
                "SuccessfulRescale",
                format!("New size: {desired}; reason: {reason}"),
            );
            if spec.behavior.is_some() {
                let mut memory = self.memory.lock().unwrap();
                let m = memory.entry(key.to_owned()).or_default();
                let now = Instant::now();
                let longest = |r: Option<&HPAScalingRules>| {
                    r.and_then(|r| r.policies.as_ref())
                        .into_iter()
                        .flatten()
                        .map(|p| p.period_seconds)
                        .max()
                        .unwrap_or(0)
                };
                let b = spec.behavior.as_ref();
                let (events, period) = if desired > current {
                    (&mut m.up_events, longest(b.and_then(|b| b.scale_up.as_ref())))
                } else {
                    (&mut m.down_events, longest(b.and_then(|b| b.scale_down.as_ref())))
                };
                events.retain(|(_, at)| {
                    now.saturating_duration_since(*at) < Duration::from_secs(period.max(0) as u64)
                });
                events.push(((desired - current).abs(), now));
            }
            last_scale_time = Some(Time(jiff::Timestamp::now()));
        } else {
            desired = current;
        }
        let status = HorizontalPodAutoscalerStatus {
            current_replicas: Some(current),
            desired_replicas: desired,
            last_scale_time,
            current_metrics: metric_statuses,
            conditions: Some(conditions),
            observed_generation: original.observed_generation,
        };
        self.write_status(hpa, &original, status).await?;
        match partial_error {
            Some(e) => Err(Error::Other(e)),
            None => Ok(()),
        }
    }

    /// Upstream's `computeReplicasForMetrics`: the largest proposal of the metrics, with their
    /// statuses (an empty one where a metric failed) and the error of a partial failure; or,
    /// when nothing can be decided, the statuses and the error.
    #[allow(clippy::type_complexity)]
    async fn compute(
        &self,
        hpa: &HorizontalPodAutoscaler,
        ns: &str,
        selector_text: &str,
        current: i32,
        specs: &[MetricSpec],
        conditions: &mut Vec<HorizontalPodAutoscalerCondition>,
    ) -> Result<(i32, String, Option<Vec<MetricStatus>>, Option<String>), (Option<Vec<MetricStatus>>, String)>
    {
        if selector_text.is_empty() {
            let e = "selector is required";
            self.events.warning(hpa, "SelectorRequired", e.into());
            set_condition(
                conditions,
                "ScalingActive",
                "False",
                "InvalidSelector",
                "the HPA target's scale is missing a selector".into(),
            );
            return Err((None, e.into()));
        }
        let selector = match r8s_api::selector::parse_label_selector(selector_text) {
            Ok(s) => s,
            Err(e) => {
                let msg =
                    format!("couldn't convert selector into a corresponding internal selector object: {e}");
                self.events.warning(hpa, "InvalidSelector", msg.clone());
                set_condition(
                    conditions,
                    "ScalingActive",
                    "False",
                    "InvalidSelector",
                    msg.clone(),
                );
                return Err((None, msg));
            }
        };
        let mut statuses = vec![MetricStatus::default(); specs.len()];
        let (mut replicas, mut metric) = (0, String::new());
        let mut invalid = 0;
        let mut first: Option<MetricError> = None;
        for (i, spec) in specs.iter().enumerate() {
            match self.metric(ns, selector_text, &selector, current, spec).await {
                Ok((proposal, name, status)) => {
                    statuses[i] = status;
                    if proposal > replicas {
                        replicas = proposal;
                        metric = name;
                    }
                }
                Err(e) => {
                    invalid += 1;
                    // The event carries the inner error, as upstream's does.
                    self.events.warning(hpa, e.reason, e.message.clone());
                    first.get_or_insert(e);
                }
            }
        }
        let statuses = (!statuses.is_empty()).then_some(statuses);
        let partial = first.as_ref().map(|e| {
            format!(
                "invalid metrics ({invalid} invalid out of {}), first error is: {}",
                specs.len(),
                e.full()
            )
        });
        if let (Some(e), Some(err)) = (&first, &partial) {
            if invalid >= specs.len() || replicas < current {
                set_condition(
                    conditions,
                    "ScalingActive",
                    "False",
                    e.reason,
                    format!("the HPA was unable to compute the replica count: {}", e.message),
                );
                return Err((statuses, err.clone()));
            }
        }
        set_condition(
            conditions,
            "ScalingActive",
            "True",
            "ValidMetricFound",
            format!("the HPA was able to successfully calculate a replica count from {metric}"),
        );
        Ok((replicas, metric, statuses, partial))
    }

    /// Stabilise and limit the proposal: upstream's `normalizeDesiredReplicas` without a
    /// behaviour, `normalizeDesiredReplicasWithBehaviors` with one.
    #[allow(clippy::too_many_arguments)]
    fn normalize(
        &self,
        key: &str,
        hpa: &HorizontalPodAutoscaler,
        current: i32,
        proposal: i32,
        min: i32,
        max: i32,
        conditions: &mut Vec<HorizontalPodAutoscalerCondition>,
    ) -> i32 {
        let now = Instant::now();
        let mut memory = self.memory.lock().unwrap();
        let m = memory.entry(key.to_owned()).or_default();
        let behavior = hpa.spec.as_ref().and_then(|s| s.behavior.clone());
        let (stabilized, reason, message) = match &behavior {
            None => {
                let window = self.opts.downscale_stabilization;
                let mut stabilized = proposal;
                let mut slot = None;
                for (i, (r, at)) in m.recommendations.iter().enumerate() {
                    if now.saturating_duration_since(*at) < window {
                        stabilized = stabilized.max(*r);
                    } else {
                        slot = Some(i);
                    }
                }
                match slot {
                    Some(i) => m.recommendations[i] = (proposal, now),
                    None => m.recommendations.push((proposal, now)),
                }
                (
                    stabilized,
                    "ScaleDownStabilized",
                    "recent recommendations were higher than current one, applying the highest recent recommendation",
                )
            }
            Some(b) => {
                let window = |r: Option<&HPAScalingRules>, default: Duration| {
                    r.and_then(|r| r.stabilization_window_seconds)
                        .map_or(default, |s| Duration::from_secs(s.max(0) as u64))
                };
                let up_window = window(b.scale_up.as_ref(), Duration::ZERO);
                let down_window = window(b.scale_down.as_ref(), self.opts.downscale_stabilization);
                let (mut up, mut down) = (proposal, proposal);
                let mut slot = None;
                for (i, (r, at)) in m.recommendations.iter().enumerate() {
                    let age = now.saturating_duration_since(*at);
                    if age < up_window {
                        up = up.min(*r);
                    }
                    if age < down_window {
                        down = down.max(*r);
                    }
                    if age >= up_window && age >= down_window {
                        slot = Some(i);
                    }
                }
                let mut rec = current;
                if rec < up {
                    rec = up;
                }
                if rec > down {
                    rec = down;
                }
                match slot {
                    Some(i) => m.recommendations[i] = (proposal, now),
                    None => m.recommendations.push((proposal, now)),
                }
                if proposal >= current {
                    (
                        rec,
                        "ScaleUpStabilized",
                        "recent recommendations were lower than current one, applying the lowest recent recommendation",
                    )
                } else {
                    (
                        rec,
                        "ScaleDownStabilized",
                        "recent recommendations were higher than current one, applying the highest recent recommendation",
                    )
                }
            }
        };
        if stabilized != proposal {
            set_condition(conditions, "AbleToScale", "True", reason, message.into());
        } else {
            set_condition(
                conditions,
                "AbleToScale",
                "True",
                "ReadyForNewScale",
                "recommended size matches current size".into(),
            );
        }
        let (desired, reason, message) = match &behavior {
            None => limit_legacy(current, stabilized, min, max),
            Some(b) => {
                if stabilized > current {
                    let rules = b.scale_up.clone().unwrap_or_default();
                    let limit =
                        rate_limit(current, &m.up_events, &m.down_events, &rules, true, now).max(current);
                    let (upper, reason, message) = if max > limit {
                        (limit, "ScaleUpLimit", SCALE_UP_LIMIT)
                    } else {
                        (max, "TooManyReplicas", TOO_MANY)
                    };
                    if stabilized > upper {
                        (upper, reason, message)
                    } else {
                        (stabilized, "DesiredWithinRange", WITHIN)
                    }
                } else if stabilized < current {
                    let rules = b.scale_down.clone().unwrap_or_default();
                    let limit =
                        rate_limit(current, &m.up_events, &m.down_events, &rules, false, now).min(current);
                    let (lower, reason, message) = if min < limit {
                        (
                            limit,
                            "ScaleDownLimit",
                            "the desired replica count is decreasing faster than the maximum scale rate",
                        )
                    } else {
                        (min, "TooFewReplicas", TOO_FEW)
                    };
                    if stabilized < lower {
                        (lower, reason, message)
                    } else {
                        (stabilized, "DesiredWithinRange", WITHIN)
                    }
                } else {
                    (stabilized, "DesiredWithinRange", WITHIN)
                }
            }
        };
        let limited = if desired == stabilized { "False" } else { "True" };
        set_condition(conditions, "ScalingLimited", limited, reason, message.into());
        desired
    }

    /// Write `status` if it differs from what the autoscaler has.
    async fn write_status(
        &self,
        hpa: &HorizontalPodAutoscaler,
        original: &HorizontalPodAutoscalerStatus,
        status: HorizontalPodAutoscalerStatus,
    ) -> Result<(), Error> {
        if &status == original {
            return Ok(());
        }
        let api: Api<HorizontalPodAutoscaler> =
            Api::namespaced(self.client.clone(), &hpa.namespace().unwrap_or_default());
        let mut updated = hpa.clone();
        updated.status = Some(status);
        match api
            .replace_status(&hpa.name_any(), &crate::post_params(), &updated)
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if r8s_client::is_not_found(&e) => Ok(()),
            Err(e) => {
                self.events.warning(hpa, "FailedUpdateStatus", e.to_string());
                Err(e.into())
            }
        }
    }
}

/// An API error's message alone (as Go's client prints a StatusError).
fn api_message(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) => s.message.clone(),
        e => e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(name: &str, cpu_request: &str, phase: &str, ready: bool, started_secs_ago: i64) -> Arc<Pod> {
        let now = jiff::Timestamp::now();
        let start = now - jiff::SignedDuration::from_secs(started_secs_ago);
        Arc::new(
            serde_json::from_value(json!({
                "metadata": {"name": name, "namespace": "default"},
                "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu_request}}}]},
                "status": {"phase": phase, "startTime": start.to_string(), "conditions": [
                    {"type": "Ready", "status": if ready { "True" } else { "False" }, "lastTransitionTime": start.to_string()}]}
            }))
            .unwrap(),
        )
    }

    fn metric(value: i64) -> PodMetric {
        PodMetric {
            value,
            timestamp: jiff::Timestamp::now(),
            window: Duration::from_secs(15),
        }
    }

    fn calc<'a>(
        current: i32,
        pods: &'a [Arc<Pod>],
        metrics: &'a BTreeMap<String, PodMetric>,
        opts: &'a HpaOptions,
    ) -> Calculation<'a> {
        Calculation {
            current,
            resource: "cpu",
            pods,
            metrics,
            opts,
            now: jiff::Timestamp::now(),
        }
    }

    #[test]
    fn utilization_scales_by_the_ratio_outside_the_tolerance() {
        let opts = HpaOptions::default();
        // Two pods started long ago, each asking 100m and using 250m: 250% of an 50% target.
        let pods = vec![
            pod("a", "100m", "Running", true, 600),
            pod("b", "100m", "Running", true, 600),
        ];
        let metrics: BTreeMap<_, _> = [("a".into(), metric(250)), ("b".into(), metric(250))].into();
        assert_eq!(
            calc(2, &pods, &metrics, &opts).utilization(50, None),
            Ok((10, 250, 250))
        );
        // Within 10% of the target: no change.
        let metrics: BTreeMap<_, _> = [("a".into(), metric(52)), ("b".into(), metric(53))].into();
        assert_eq!(
            calc(2, &pods, &metrics, &opts).utilization(50, None),
            Ok((2, 52, 52))
        );
        // Below: fewer.
        let metrics: BTreeMap<_, _> = [("a".into(), metric(10)), ("b".into(), metric(10))].into();
        assert_eq!(
            calc(2, &pods, &metrics, &opts).utilization(50, None).unwrap().0,
            1
        );
    }

    #[test]
    fn missing_and_unready_pods_never_push_the_wrong_way() {
        let opts = HpaOptions::default();
        // Scale-down with a pod without metrics: it counts as at 100%, so the three together
        // (10%, 10%, 100% of 50%) still ask for fewer, but not as few.
        let pods = vec![
            pod("a", "100m", "Running", true, 600),
            pod("b", "100m", "Running", true, 600),
            pod("c", "100m", "Running", true, 600),
        ];
        let metrics: BTreeMap<_, _> = [("a".into(), metric(10)), ("b".into(), metric(10))].into();
        let (r, util, _) = calc(3, &pods, &metrics, &opts).utilization(50, None).unwrap();
        assert_eq!(util, 10, "utilisation is of the pods with metrics");
        assert_eq!(r, 3, "(10+10+100)/300 = 40% of 50%: 0.8 * 3 = 2.4 → 3");
        // Scale-up with a pending pod: it counts as idle.
        let pods = vec![
            pod("a", "100m", "Running", true, 600),
            pod("b", "100m", "Pending", false, 5),
        ];
        let metrics: BTreeMap<_, _> = [("a".into(), metric(200))].into();
        let (r, _, _) = calc(2, &pods, &metrics, &opts).utilization(50, None).unwrap();
        assert_eq!(r, 4, "(200 + 0) / 200 = 100% of 50% → 2 × 2");
        // A pod that just became ready, whose sample predates its readiness: unready for CPU.
        let fresh = pod("a", "100m", "Running", true, 5);
        let old_sample = PodMetric {
            value: 500,
            timestamp: jiff::Timestamp::now() - jiff::SignedDuration::from_secs(60),
            window: Duration::from_secs(15),
        };
        assert_eq!(
            group_pod(&fresh, Some(&old_sample), "cpu", &opts, jiff::Timestamp::now()),
            Group::Unready
        );
        assert_eq!(
            group_pod(&fresh, Some(&old_sample), "memory", &opts, jiff::Timestamp::now()),
            Group::Ready
        );
        // Without requests there is no utilisation.
        let bare: Arc<Pod> = Arc::new(
            serde_json::from_value(
                json!({"metadata": {"name": "x"}, "spec": {"containers": [{"name": "c"}]},
                "status": {"phase": "Running"}}),
            )
            .unwrap(),
        );
        let metrics: BTreeMap<_, _> = [("x".into(), metric(10))].into();
        assert_eq!(
            calc(1, &[bare], &metrics, &opts).utilization(50, None),
            Err("did not receive metrics for targeted pods (pods might be unready)".into())
        );
    }

    #[test]
    fn pod_metrics_sum_containers_and_skip_incomplete_pods() {
        let list = json!({"items": [
            {"metadata": {"name": "a", "namespace": "default"}, "timestamp": "2026-01-01T00:00:00Z", "window": "15.5s",
             "containers": [{"name": "x", "usage": {"cpu": "250m", "memory": "1Mi"}}, {"name": "y", "usage": {"cpu": "500000n", "memory": "1Ki"}}]},
            {"metadata": {"name": "b", "namespace": "default"}, "timestamp": "2026-01-01T00:00:00Z", "window": "15s",
             "containers": [{"name": "x", "usage": {"memory": "1Mi"}}]}]});
        let m = pod_metrics(&list, "cpu", None).unwrap();
        assert_eq!(m.len(), 1);
        assert_eq!(m["a"].value, 251);
        assert_eq!(m["a"].window, Duration::from_millis(15_500));
        assert_eq!(
            pod_metrics(&list, "memory", Some("y")).unwrap_err(),
            "container y not present in metrics for pod default/b"
        );
        assert_eq!(
            pod_metrics(&json!({"items": []}), "cpu", None).unwrap_err(),
            "no metrics returned from resource metrics API"
        );
    }

    #[test]
    fn legacy_limits_and_behavior_rates() {
        assert_eq!(limit_legacy(1, 10, 1, 10), (4, "ScaleUpLimit", SCALE_UP_LIMIT));
        assert_eq!(limit_legacy(4, 10, 1, 6), (6, "TooManyReplicas", TOO_MANY));
        assert_eq!(limit_legacy(4, 0, 2, 6), (2, "TooFewReplicas", TOO_FEW));
        assert_eq!(limit_legacy(4, 5, 2, 6), (5, "DesiredWithinRange", WITHIN));
        let now = Instant::now();
        let up: HPAScalingRules = serde_json::from_value(json!({"selectPolicy": "Max", "policies": [
            {"type": "Pods", "value": 4, "periodSeconds": 15}, {"type": "Percent", "value": 100, "periodSeconds": 15}]}))
        .unwrap();
        assert_eq!(
            rate_limit(10, &[], &[], &up, true, now),
            20,
            "100% of 10 beats 4 pods"
        );
        assert_eq!(
            rate_limit(2, &[], &[], &up, true, now),
            6,
            "4 pods beat 100% of 2"
        );
        // A scale-up of 5 within the period counts against it.
        assert_eq!(rate_limit(10, &[(5, now)], &[], &up, true, now), 10);
        let down: HPAScalingRules = serde_json::from_value(json!({"selectPolicy": "Max", "policies": [
            {"type": "Percent", "value": 50, "periodSeconds": 60}, {"type": "Pods", "value": 1, "periodSeconds": 60}]}))
        .unwrap();
        assert_eq!(
            rate_limit(10, &[], &[], &down, false, now),
            5,
            "Max: the policy that allows the most change"
        );
        let disabled: HPAScalingRules =
            serde_json::from_value(json!({"selectPolicy": "Disabled", "policies": []})).unwrap();
        assert_eq!(rate_limit(10, &[], &[], &disabled, false, now), 10);
    }
}
