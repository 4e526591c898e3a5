//! API priority and fairness (upstream's `WithPriorityAndFairness` filter): every request,
//! once its user is known, is classified by the FlowSchemas (in matching precedence) into a
//! priority level; a Limited level runs at most its share of the server's concurrency, the
//! rest wait in queues chosen by shuffle sharding of their flow (schema and distinguisher) and
//! are served round-robin across queues, or get 429 when their queue is full, the level
//! rejects, or they waited too long. Exempt levels (system:masters) are never held.
//!
//! Levels lend and borrow seats (`lendablePercent`, `borrowingLimitPercent`): a level always
//! has its nominal seats less those it lends; beyond that it may use seats no other level
//! holds, up to its borrowing limit, as long as every level can still have its unlent seats.
//! Upstream re-divides the seats every 10 s by smoothed demand; here a seat is lent or
//! borrowed when a request starts (and a freed seat goes first to a level below its nominal
//! share), which comes to the same bounds without the period. A request's width is one seat.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use r8s_store::Store;
use serde_json::Value;
use tokio::sync::{oneshot, watch};

use crate::authn::UserInfo;
use crate::follow::{self, Change};
use crate::request_info::RequestInfo;

/// The server's concurrency (upstream's --max-requests-inflight 400 plus
/// --max-mutating-requests-inflight 200), shared out by nominal concurrency shares.
const SERVER_CONCURRENCY: f64 = 600.0;
/// How long a request may wait in a queue (upstream's request wait limit).
const MAX_WAIT: Duration = Duration::from_secs(15);

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FlowLabels {
    pub priority_level: String,
    pub flow_schema: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RejectLabels {
    pub priority_level: String,
    pub flow_schema: String,
    pub reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LevelLabels {
    pub priority_level: String,
}

/// Upstream's `apiserver_flowcontrol_*` metrics.
#[derive(Clone, Default)]
pub struct FlowMetrics {
    pub dispatched: Family<FlowLabels, Counter>,
    pub rejected: Family<RejectLabels, Counter>,
    pub executing: Family<FlowLabels, Gauge>,
    pub inqueue: Family<FlowLabels, Gauge>,
    /// Each level's nominal concurrency limit, in seats (0 for an exempt level): clients
    /// (and upstream's e2e suite) read it to know a new level is in force.
    pub nominal_limit: Family<LevelLabels, Gauge>,
}

impl FlowMetrics {
    /// Report the levels of `config`, and no others.
    fn levels_changed(&self, config: &Config) {
        self.nominal_limit.clear();
        for (name, spec) in &config.levels {
            let limit = if spec.exempt { 0 } else { config.limit(spec) };
            self.nominal_limit
                .get_or_create(&LevelLabels {
                    priority_level: name.clone(),
                })
                .set(limit as i64);
        }
    }
}

/// One rule of a FlowSchema.
struct Rule {
    subjects: Vec<Value>,
    resource_rules: Vec<Value>,
    non_resource_rules: Vec<Value>,
}

struct Schema {
    name: String,
    uid: String,
    precedence: i64,
    level: String,
    by_namespace: bool,
    by_user: bool,
    rules: Vec<Rule>,
}

/// A level's queuing: (queues, hand size, queue length limit).
type Queuing = (usize, usize, usize);

#[derive(Clone)]
struct LevelSpec {
    uid: String,
    exempt: bool,
    shares: f64,
    /// The share of its nominal seats it lends, in percent.
    lendable_percent: f64,
    /// How many seats beyond its nominal ones it may borrow, in percent of them; `None`:
    /// without limit.
    borrowing_percent: Option<f64>,
    /// (queues, hand size, queue length limit); `None`: reject when full.
    queuing: Option<Queuing>,
}

struct Config {
    schemas: Vec<Schema>,
    levels: HashMap<String, LevelSpec>,
    total_shares: f64,
}

fn has(list: &Value, want: &str) -> bool {
    list.as_array()
        .into_iter()
        .flatten()
        .any(|v| v == "*" || v == want)
}

impl Config {
    fn build(schemas: &BTreeMap<String, Value>, levels: &BTreeMap<String, Value>) -> Self {
        let levels: HashMap<String, LevelSpec> = levels
            .values()
            .map(|l| {
                let spec = &l["spec"];
                let limited = &spec["limited"];
                let queuing = (limited["limitResponse"]["type"] == "Queue").then(|| {
                    let q = &limited["limitResponse"]["queuing"];
                    let n = |k: &str, d: u64| q[k].as_u64().filter(|v| *v > 0).unwrap_or(d) as usize;
                    (n("queues", 64), n("handSize", 8), n("queueLengthLimit", 50))
                });
                (
                    l["metadata"]["name"].as_str().unwrap_or("").to_owned(),
                    LevelSpec {
                        uid: l["metadata"]["uid"].as_str().unwrap_or("").to_owned(),
                        exempt: spec["type"] == "Exempt",
                        shares: limited["nominalConcurrencyShares"].as_f64().unwrap_or(30.0),
                        lendable_percent: limited["lendablePercent"].as_f64().unwrap_or(0.0),
                        borrowing_percent: limited["borrowingLimitPercent"].as_f64(),
                        queuing,
                    },
                )
            })
            .collect();
        let total_shares = levels
            .values()
            .filter(|l| !l.exempt)
            .map(|l| l.shares)
            .sum::<f64>()
            .max(1.0);
        let mut schemas: Vec<Schema> = schemas
            .values()
            .map(|s| {
                let spec = &s["spec"];
                let by = spec["distinguisherMethod"]["type"].as_str();
                Schema {
                    name: s["metadata"]["name"].as_str().unwrap_or("").to_owned(),
                    uid: s["metadata"]["uid"].as_str().unwrap_or("").to_owned(),
                    precedence: spec["matchingPrecedence"].as_i64().unwrap_or(1000),
                    level: spec["priorityLevelConfiguration"]["name"]
                        .as_str()
                        .unwrap_or("")
                        .to_owned(),
                    by_namespace: by == Some("ByNamespace"),
                    by_user: by == Some("ByUser"),
                    rules: spec["rules"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .map(|r| Rule {
                            subjects: r["subjects"].as_array().cloned().unwrap_or_default(),
                            resource_rules: r["resourceRules"].as_array().cloned().unwrap_or_default(),
                            non_resource_rules: r["nonResourceRules"].as_array().cloned().unwrap_or_default(),
                        })
                        .collect(),
                }
            })
            .collect();
        schemas.sort_by(|a, b| a.precedence.cmp(&b.precedence).then_with(|| a.name.cmp(&b.name)));
        Self {
            schemas,
            levels,
            total_shares,
        }
    }

    /// A limited level's nominal concurrency limit: its share of the server's.
    fn limit(&self, spec: &LevelSpec) -> usize {
        ((SERVER_CONCURRENCY * spec.shares / self.total_shares).ceil() as usize).max(1)
    }

    /// A limited level's seats: nominal, the fewest it keeps (what it does not lend), the
    /// most it may hold (with what it may borrow).
    fn bounds(&self, spec: &LevelSpec) -> Bounds {
        let nominal = self.limit(spec);
        let lendable = (nominal as f64 * spec.lendable_percent / 100.0).round() as usize;
        let max = match spec.borrowing_percent {
            Some(p) => nominal + (nominal as f64 * p / 100.0).round() as usize,
            None => usize::MAX,
        };
        Bounds {
            nominal,
            min: nominal.saturating_sub(lendable),
            max,
        }
    }

    /// Upstream's classification: the first schema (by precedence) with a rule whose
    /// subjects and resource or non-resource rules match.
    fn classify(&self, user: &UserInfo, info: &RequestInfo) -> Option<&Schema> {
        self.schemas.iter().find(|s| {
            self.levels.contains_key(&s.level)
                && s.rules.iter().any(|r| {
                    r.subjects.iter().any(|sub| subject_matches(sub, user))
                        && if info.is_resource_request {
                            r.resource_rules.iter().any(|rr| resource_rule_matches(rr, info))
                        } else {
                            r.non_resource_rules.iter().any(|nr| {
                                has(&nr["verbs"], &info.verb)
                                    && nr["nonResourceURLs"].as_array().into_iter().flatten().any(|u| {
                                        let u = u.as_str().unwrap_or("");
                                        u == "*"
                                            || u == info.path
                                            || u.strip_suffix('*').is_some_and(|p| info.path.starts_with(p))
                                    })
                            })
                        }
                })
        })
    }
}

fn subject_matches(sub: &Value, user: &UserInfo) -> bool {
    match sub["kind"].as_str() {
        Some("User") => {
            let n = sub["user"]["name"].as_str().unwrap_or("");
            n == "*" || n == user.name
        }
        Some("Group") => {
            let g = sub["group"]["name"].as_str().unwrap_or("");
            g == "*" || user.groups.iter().any(|ug| ug == g)
        }
        Some("ServiceAccount") => {
            let (ns, name) = (
                sub["serviceAccount"]["namespace"].as_str().unwrap_or(""),
                sub["serviceAccount"]["name"].as_str().unwrap_or(""),
            );
            let Some(rest) = user.name.strip_prefix("system:serviceaccount:") else {
                return false;
            };
            let (uns, uname) = rest.split_once(':').unwrap_or(("", ""));
            uns == ns && (name == "*" || name == uname)
        }
        _ => false,
    }
}

fn resource_rule_matches(rr: &Value, info: &RequestInfo) -> bool {
    let resource = if info.subresource.is_empty() {
        info.resource.clone()
    } else {
        format!("{}/{}", info.resource, info.subresource)
    };
    let scope_ok = if info.namespace.is_empty() {
        rr["clusterScope"] == true
    } else {
        has(&rr["namespaces"], &info.namespace)
    };
    has(&rr["verbs"], &info.verb)
        && has(&rr["apiGroups"], &info.api_group)
        && has(&rr["resources"], &resource)
        && scope_ok
}

/// A level's seats (see [`Config::bounds`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Bounds {
    nominal: usize,
    min: usize,
    max: usize,
}

/// The `Dangling` condition of each FlowSchema, as upstream's configuration controller keeps
/// it: `True` while the PriorityLevelConfiguration it names does not exist. Only schemas whose
/// condition is not yet so are written, in the background, each read again first (what is
/// followed carries no resource version); a write that loses a race is made again when the
/// change it lost to comes by.
fn mark_dangling(
    store: &Arc<dyn Store>,
    schemas: &BTreeMap<String, Value>,
    levels: &BTreeMap<String, Value>,
) {
    let dangling = |fs: &Value, status: &str| {
        fs["status"]["conditions"]
            .as_array()
            .and_then(|c| c.iter().find(|c| c["type"] == "Dangling"))
            .is_some_and(|c| c["status"] == status)
    };
    let mut writes = Vec::new();
    for fs in schemas.values() {
        let level = fs["spec"]["priorityLevelConfiguration"]["name"]
            .as_str()
            .unwrap_or("");
        let exists = levels.contains_key(level);
        let status = if exists { "False" } else { "True" };
        if dangling(fs, status) {
            continue;
        }
        let (reason, message) = if exists {
            ("Found", format!("This FlowSchema references the PriorityLevelConfiguration object named {level:?} and it exists"))
        } else {
            ("NotFound", format!("This FlowSchema references the PriorityLevelConfiguration object named {level:?} but there is no such object"))
        };
        let condition = serde_json::json!({"type": "Dangling", "status": status,
            "lastTransitionTime": crate::registry::meta::now_rfc3339(),
            "reason": reason, "message": message});
        writes.push((crate::registry::meta::name(fs).to_owned(), status, condition));
    }
    if writes.is_empty() {
        return;
    }
    let store = store.clone();
    tokio::spawn(async move {
        let Some(def) =
            crate::registry::catalogue::builtin("flowcontrol.apiserver.k8s.io", "v1", "flowschemas")
        else {
            return;
        };
        for (name, status, condition) in writes {
            let Ok(current) = crate::registry::system::get(store.as_ref(), def, "", &name).await else {
                continue;
            };
            if dangling(&current, status) {
                continue;
            }
            let mut next = current.clone();
            let mut conditions: Vec<Value> = current["status"]["conditions"]
                .as_array()
                .cloned()
                .unwrap_or_default()
                .into_iter()
                .filter(|c| c["type"] != "Dangling")
                .collect();
            conditions.push(condition);
            next["status"]["conditions"] = Value::Array(conditions);
            let _ = crate::registry::system::update_status(store.as_ref(), def, &next, &current).await;
        }
    });
}

/// One priority level's seats and queues.
struct LevelState {
    bounds: Bounds,
    queuing: Option<Queuing>,
    executing: usize,
    queues: Vec<VecDeque<oneshot::Sender<()>>>,
    /// Where the round-robin over queues resumes.
    next: usize,
}

/// The seats of every limited level, shared: one lock, as a seat lent or borrowed concerns
/// two levels.
#[derive(Default)]
struct Pool {
    levels: HashMap<String, LevelState>,
}

impl Pool {
    /// Whether a request of `level` may start now: within the seats it keeps, or with one
    /// more beyond them while the seats held (each level counted at least at what it keeps)
    /// stay within all levels' nominal seats together, and within its borrowing limit.
    fn may_start(&self, level: &str) -> bool {
        let Some(l) = self.levels.get(level) else {
            return false;
        };
        if l.executing < l.bounds.min {
            return true;
        }
        if l.executing >= l.bounds.max {
            return false;
        }
        let (held, total) = self.levels.values().fold((0, 0), |(h, t), l| {
            (h + l.executing.max(l.bounds.min), t + l.bounds.nominal)
        });
        held < total
    }

    /// Give freed seats to waiters: first to levels below their nominal seats, then to those
    /// that borrow, each level's queues round-robin.
    fn dispatch(&mut self) {
        loop {
            let mut waiting: Vec<(&String, &LevelState)> = self
                .levels
                .iter()
                .filter(|(_, l)| l.queues.iter().any(|q| !q.is_empty()))
                .collect();
            waiting.sort_by_key(|(name, l)| (l.executing >= l.bounds.nominal, l.executing, (*name).clone()));
            let Some(name) = waiting
                .iter()
                .map(|(name, _)| (*name).clone())
                .find(|name| self.may_start(name))
            else {
                return;
            };
            let l = self.levels.get_mut(&name).expect("a waiting level");
            let n = l.queues.len();
            for i in 0..n {
                let q = (l.next + i) % n;
                if let Some(tx) = l.queues[q].pop_front() {
                    l.next = (q + 1) % n;
                    // A waiter that gave up (timed out) leaves the seat for the next.
                    if tx.send(()).is_ok() {
                        l.executing += 1;
                    }
                    break;
                }
            }
        }
    }

    fn release(&mut self, level: &str) {
        if let Some(l) = self.levels.get_mut(level) {
            l.executing = l.executing.saturating_sub(1);
        }
        self.dispatch();
    }
}

/// A seat held while a request executes; freed when dropped.
pub(crate) struct Seat {
    level: Option<(Arc<Mutex<Pool>>, String)>,
    executing: Option<Gauge>,
    /// The response headers upstream sets: (FlowSchema UID, PriorityLevel UID).
    pub headers: Option<(String, String)>,
}

impl Drop for Seat {
    fn drop(&mut self) {
        if let Some(g) = &self.executing {
            g.dec();
        }
        if let Some((pool, name)) = &self.level {
            pool.lock().unwrap_or_else(PoisonError::into_inner).release(name);
        }
    }
}

/// Why a request was not admitted (upstream's reject reasons).
pub(crate) struct Rejected {
    pub reason: &'static str,
    pub headers: (String, String),
}

pub(crate) struct FlowControl {
    config: watch::Receiver<Option<Arc<Config>>>,
    pool: Arc<Mutex<Pool>>,
    pub metrics: FlowMetrics,
}

impl FlowControl {
    /// No flow control (`--enable-priority-and-fairness=false`): every request is admitted
    /// at once, unclassified.
    pub fn disabled() -> Self {
        let (_tx, rx) = watch::channel(None);
        Self {
            config: rx,
            pool: Arc::default(),
            metrics: FlowMetrics::default(),
        }
    }

    /// Follow the FlowSchemas and PriorityLevelConfigurations in `store`.
    pub fn start(store: Arc<dyn Store>) -> Self {
        const SCHEMAS: &str = "/registry/flowschemas/";
        const LEVELS: &str = "/registry/prioritylevelconfigurations/";
        let (tx, rx) = watch::channel(None);
        let mut schemas: BTreeMap<String, Value> = BTreeMap::new();
        let mut levels: BTreeMap<String, Value> = BTreeMap::new();
        let mut dirty = false;
        let metrics = FlowMetrics::default();
        let reported = metrics.clone();
        let writer = store.clone();
        follow::spawn(
            store,
            &[SCHEMAS, LEVELS],
            "flow control",
            move |change| match change {
                Change::Reset => {
                    schemas.clear();
                    levels.clear();
                    dirty = true;
                }
                Change::Put(key, json) => {
                    if let Ok(obj) = serde_json::from_slice::<Value>(json) {
                        if let Some(n) = key.strip_prefix(SCHEMAS) {
                            schemas.insert(n.to_owned(), obj);
                        } else if let Some(n) = key.strip_prefix(LEVELS) {
                            levels.insert(n.to_owned(), obj);
                        }
                        dirty = true;
                    }
                }
                Change::Delete(key) => {
                    if let Some(n) = key.strip_prefix(SCHEMAS) {
                        schemas.remove(n);
                    } else if let Some(n) = key.strip_prefix(LEVELS) {
                        levels.remove(n);
                    }
                    dirty = true;
                }
                Change::BatchEnd => {
                    if dirty {
                        dirty = false;
                        let config = Config::build(&schemas, &levels);
                        reported.levels_changed(&config);
                        mark_dangling(&writer, &schemas, &levels);
                        tx.send_replace(Some(Arc::new(config)));
                    }
                }
            },
        );
        Self {
            config: rx,
            pool: Arc::default(),
            metrics,
        }
    }

    /// Admit a request: a seat (held until dropped), or why not.
    pub async fn admit(
        &self,
        user: &UserInfo,
        info: &RequestInfo,
        long_running: bool,
    ) -> Result<Seat, Rejected> {
        let config = self.config.borrow().clone();
        let Some(config) = config else {
            return Ok(Seat {
                level: None,
                executing: None,
                headers: None,
            });
        };
        let Some(schema) = config.classify(user, info) else {
            return Ok(Seat {
                level: None,
                executing: None,
                headers: None,
            });
        };
        let spec = config.levels[&schema.level].clone();
        let headers = (schema.uid.clone(), spec.uid.clone());
        let labels = FlowLabels {
            priority_level: schema.level.clone(),
            flow_schema: schema.name.clone(),
        };
        self.metrics.dispatched.get_or_create(&labels).inc();
        // Exempt levels, and watches and other long-running requests once started, hold no
        // seat (upstream counts a watch only while it initialises).
        if spec.exempt || long_running {
            return Ok(Seat {
                level: None,
                executing: None,
                headers: Some(headers),
            });
        }
        let bounds = config.bounds(&spec);
        let reject = |reason: &'static str| {
            self.metrics
                .rejected
                .get_or_create(&RejectLabels {
                    priority_level: labels.priority_level.clone(),
                    flow_schema: labels.flow_schema.clone(),
                    reason: reason.into(),
                })
                .inc();
            Rejected {
                reason,
                headers: headers.clone(),
            }
        };
        let wait = {
            let mut pool = self.pool.lock().unwrap_or_else(PoisonError::into_inner);
            // The level as configured now (a changed queue count starts its queues afresh:
            // their waiters time out).
            let queue_count = spec.queuing.map_or(0, |q| q.0);
            let st = pool
                .levels
                .entry(schema.level.clone())
                .or_insert_with(|| LevelState {
                    bounds,
                    queuing: spec.queuing,
                    executing: 0,
                    queues: Vec::new(),
                    next: 0,
                });
            st.bounds = bounds;
            if st.queuing != spec.queuing || st.queues.len() != queue_count {
                st.queuing = spec.queuing;
                st.queues = (0..queue_count).map(|_| VecDeque::new()).collect();
                st.next = 0;
            }
            let queued = st.queues.iter().any(|q| !q.is_empty());
            if !queued && pool.may_start(&schema.level) {
                if let Some(st) = pool.levels.get_mut(&schema.level) {
                    st.executing += 1;
                }
                None
            } else {
                let Some((queues, hand, max_len)) = spec.queuing else {
                    return Err(reject("concurrency-limit"));
                };
                let st = pool.levels.get_mut(&schema.level).expect("just made");
                // Shuffle sharding: the flow's hand of queues, the shortest taken.
                let flow = if schema.by_user {
                    user.name.as_str()
                } else if schema.by_namespace {
                    info.namespace.as_str()
                } else {
                    ""
                };
                let mut h = std::collections::hash_map::DefaultHasher::new();
                (schema.name.as_str(), flow).hash(&mut h);
                let mut seed = h.finish();
                let mut best: Option<usize> = None;
                for _ in 0..hand.min(queues) {
                    let q = (seed % queues as u64) as usize;
                    seed = seed.rotate_left(13).wrapping_mul(0x9E37_79B9_7F4A_7C15);
                    if best.is_none_or(|b| st.queues[q].len() < st.queues[b].len()) {
                        best = Some(q);
                    }
                }
                let q = best.unwrap_or(0);
                if st.queues[q].len() >= max_len {
                    return Err(reject("queue-full"));
                }
                let (tx, rx) = oneshot::channel();
                st.queues[q].push_back(tx);
                Some(rx)
            }
        };
        if let Some(rx) = wait {
            let inqueue = self.metrics.inqueue.get_or_create(&labels).clone();
            inqueue.inc();
            let got = tokio::time::timeout(MAX_WAIT, rx).await;
            inqueue.dec();
            if !matches!(got, Ok(Ok(()))) {
                return Err(reject("time-out"));
            }
        }
        let executing = self.metrics.executing.get_or_create(&labels).clone();
        executing.inc();
        Ok(Seat {
            level: Some((self.pool.clone(), schema.level.clone())),
            executing: Some(executing),
            headers: Some(headers),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(name: &str, groups: &[&str]) -> UserInfo {
        UserInfo {
            name: name.into(),
            groups: groups.iter().map(|g| g.to_string()).collect(),
            ..Default::default()
        }
    }

    fn config() -> Config {
        let (levels, schemas) = crate::registry::flowcontrol::bootstrap_objects();
        let by_name = |v: Vec<Value>| -> BTreeMap<String, Value> {
            v.into_iter()
                .map(|o| (o["metadata"]["name"].as_str().unwrap().to_owned(), o))
                .collect()
        };
        Config::build(&by_name(schemas), &by_name(levels))
    }

    /// Each level's nominal limit is reported as upstream's
    /// `apiserver_flowcontrol_nominal_limit_seats` (what clients wait for to know a new level
    /// is in force), and only the levels there are.
    #[test]
    fn nominal_limits_are_reported_per_level() {
        let metrics = FlowMetrics::default();
        let config = config();
        metrics.levels_changed(&config);
        let seats = |name: &str| {
            metrics
                .nominal_limit
                .get_or_create(&LevelLabels {
                    priority_level: name.to_owned(),
                })
                .get()
        };
        assert_eq!(seats("exempt"), 0);
        // Upstream's bootstrap shares: workload-low 100 of 245 in all.
        assert_eq!(seats("workload-low"), (600.0_f64 * 100.0 / 245.0).ceil() as i64);
        let mut encoded = String::new();
        let mut registry = prometheus_client::registry::Registry::default();
        registry.register("seats", "", metrics.nominal_limit.clone());
        prometheus_client::encoding::text::encode(&mut encoded, &registry).unwrap();
        assert_eq!(
            encoded.matches("seats{priority_level=").count(),
            config.levels.len(),
            "{encoded}"
        );
    }

    /// A level lends what it does not keep, gets it back before a borrower gets more, and
    /// a borrower stops at what all levels' nominal seats allow.
    #[test]
    fn seats_are_lent_and_borrowed_within_bounds() {
        let level = |nominal, min, max| LevelState {
            bounds: Bounds { nominal, min, max },
            queuing: Some((1, 1, 10)),
            executing: 0,
            queues: vec![VecDeque::new()],
            next: 0,
        };
        let mut pool = Pool::default();
        // `lender` keeps 1 of its 2 seats and borrows none; `borrower` keeps its 2 and may
        // borrow without limit.
        pool.levels.insert("lender".into(), level(2, 1, 2));
        pool.levels.insert("borrower".into(), level(2, 2, usize::MAX));
        let start = |pool: &mut Pool, name: &str| {
            let ok = pool.may_start(name);
            if ok {
                pool.levels.get_mut(name).unwrap().executing += 1;
            }
            ok
        };
        assert!(start(&mut pool, "borrower") && start(&mut pool, "borrower"));
        assert!(start(&mut pool, "borrower"), "the lender's idle lendable seat");
        assert!(
            !start(&mut pool, "borrower"),
            "the lender's kept seat is not lent"
        );
        assert!(start(&mut pool, "lender"), "a kept seat is always there");
        assert!(!start(&mut pool, "lender"), "its lent seat is in use");
        // The lender waits; the borrower's next freed seat is the lender's.
        let (tx, mut rx) = oneshot::channel();
        pool.levels.get_mut("lender").unwrap().queues[0].push_back(tx);
        let (btx, mut brx) = oneshot::channel();
        pool.levels.get_mut("borrower").unwrap().queues[0].push_back(btx);
        pool.release("borrower");
        assert!(rx.try_recv().is_ok(), "the lender got its seat back");
        assert!(brx.try_recv().is_err(), "the borrower waits");
        assert_eq!(pool.levels["lender"].executing, 2);
        assert_eq!(pool.levels["borrower"].executing, 2);
        // A borrowing limit of 0 keeps a level to its nominal seats even with seats idle.
        let mut pool = Pool::default();
        pool.levels.insert("capped".into(), level(1, 1, 1));
        pool.levels.insert("idle".into(), level(5, 0, 5));
        assert!(start(&mut pool, "capped") && !start(&mut pool, "capped"));
    }

    #[test]
    fn requests_are_classified_as_upstreams_bootstrap_configuration_says() {
        let c = config();
        let info =
            crate::request_info::parse_request(&http::Method::GET, "/api/v1/namespaces/default/pods", None);
        let admin = user("admin", &["system:masters", "system:authenticated"]);
        assert_eq!(c.classify(&admin, &info).unwrap().name, "exempt");
        let node = user("system:node:n1", &["system:nodes", "system:authenticated"]);
        assert_eq!(c.classify(&node, &info).unwrap().name, "system-nodes");
        let status =
            crate::request_info::parse_request(&http::Method::PATCH, "/api/v1/nodes/n1/status", None);
        assert_eq!(c.classify(&node, &status).unwrap().name, "system-node-high");
        let sa = user(
            "system:serviceaccount:kube-system:deployment-controller",
            &["system:serviceaccounts", "system:authenticated"],
        );
        assert_eq!(
            c.classify(&sa, &info).unwrap().name,
            "kube-system-service-accounts"
        );
        let someone = user("alice", &["system:authenticated"]);
        assert_eq!(c.classify(&someone, &info).unwrap().name, "global-default");
        let healthz = crate::request_info::parse_request(&http::Method::GET, "/healthz", None);
        assert_eq!(c.classify(&someone, &healthz).unwrap().name, "probes");
    }
}

#[cfg(test)]
mod admit_tests {
    use super::*;
    use serde_json::json;

    #[tokio::test]
    async fn a_limited_level_queues_then_rejects_and_a_freed_seat_goes_to_the_queue() {
        let (mut levels, mut schemas) = crate::registry::flowcontrol::bootstrap_objects();
        levels.push(json!({"metadata": {"name": "flood", "uid": "l"}, "spec": {"type": "Limited", "limited": {
            "nominalConcurrencyShares": 1, "borrowingLimitPercent": 0,
            "limitResponse": {"type": "Queue", "queuing": {"queues": 1, "handSize": 1, "queueLengthLimit": 2}}}}}));
        schemas.push(json!({"metadata": {"name": "flooders", "uid": "s"}, "spec": {"matchingPrecedence": 200,
            "priorityLevelConfiguration": {"name": "flood"}, "distinguisherMethod": {"type": "ByUser"},
            "rules": [{"subjects": [{"kind": "User", "user": {"name": "flooder"}}],
                "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"], "namespaces": ["*"], "clusterScope": true}]}]}}));
        let by_name = |v: Vec<Value>| -> BTreeMap<String, Value> {
            v.into_iter()
                .map(|o| (o["metadata"]["name"].as_str().unwrap().to_owned(), o))
                .collect()
        };
        let config = Config::build(&by_name(schemas), &by_name(levels));
        let (_tx, rx) = watch::channel(Some(Arc::new(config)));
        let fc = Arc::new(FlowControl {
            config: rx,
            pool: Arc::default(),
            metrics: FlowMetrics::default(),
        });
        let user = UserInfo {
            name: "flooder".into(),
            groups: vec!["system:authenticated".into()],
            ..Default::default()
        };
        let info = crate::request_info::parse_request(&http::Method::GET, "/api/v1/configmaps", None);
        let mut seats = Vec::new();
        for _ in 0..3 {
            seats.push(fc.admit(&user, &info, false).await.ok().unwrap());
        }
        assert_eq!(seats[0].headers.as_ref().unwrap().1, "l");
        // The level's seats are taken: two wait, the next is shed.
        let waiting: Vec<_> = (0..2)
            .map(|_| {
                let (fc, user, info) = (fc.clone(), user.clone(), info.clone());
                tokio::spawn(async move { fc.admit(&user, &info, false).await.is_ok() })
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(50)).await;
        let shed = fc.admit(&user, &info, false).await;
        assert!(matches!(
            shed,
            Err(Rejected {
                reason: "queue-full",
                ..
            })
        ));
        seats.clear();
        for w in waiting {
            assert!(w.await.unwrap(), "a freed seat goes to a waiter");
        }
    }
}
