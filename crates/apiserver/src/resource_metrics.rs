//! The resource metrics pipeline in-process (metrics-server's role, without an aggregated API
//! server that can fail discovery): the kubelets' `/metrics/resource` are scraped, the last two
//! points of every node, pod and container kept, and `metrics.k8s.io/v1beta1` answered from them
//! (`endpoints::resource_metrics`).
//!
//! CPU is a rate: the cumulative CPU time's change between the two newest points over the time
//! between them (the `window`); memory is the newest working set. Something with one point so far
//! (a new pod, a restarted container) has no metrics yet, as with metrics-server.
//!
//! Scraping starts with the first metrics request (`kubectl top`, an autoscaler) and stops when
//! none has come for [`IDLE`], so an idle cluster pays nothing. The first request after an idle
//! spell takes two scrapes a second apart before it is answered, so it has rates at once.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::Shared;

/// How long scraping goes on after the last metrics request.
const IDLE: Duration = Duration::from_secs(600);
/// The time between the two scrapes that start a scraping spell.
const FIRST_WINDOW: Duration = Duration::from_secs(1);
/// How long one kubelet may take to answer.
const SCRAPE_TIMEOUT: Duration = Duration::from_secs(5);
/// Kubelets scraped at once.
const PARALLEL: usize = 32;

/// One reading of a cumulative CPU time and a working set, stamped with when it was taken.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct Point {
    pub timestamp_ms: i64,
    pub cpu_seconds: f64,
    pub memory: u64,
}

/// The two newest points of one thing.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct Series {
    pub prev: Option<Point>,
    pub last: Option<Point>,
    /// The container's start time: a change means a new container, whose CPU counts anew.
    pub start_time: f64,
}

/// A usage figure from two points: CPU in nanocores, memory in bytes, when and over how long.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Usage {
    pub nano_cores: u64,
    pub memory: u64,
    pub timestamp_ms: i64,
    pub window_ms: i64,
}

impl Series {
    fn push(&mut self, p: Point, start_time: f64) {
        if start_time != self.start_time {
            self.prev = None;
            self.last = None;
            self.start_time = start_time;
        }
        if self.last.is_some_and(|l| l.timestamp_ms >= p.timestamp_ms) {
            return;
        }
        self.prev = self.last.take();
        self.last = Some(p);
    }

    /// The usage over the two newest points; none while there is one, or when the CPU time went
    /// back (a restart the start time did not show).
    pub fn usage(&self) -> Option<Usage> {
        let (prev, last) = (self.prev?, self.last?);
        let window_ms = last.timestamp_ms - prev.timestamp_ms;
        if window_ms <= 0 || last.cpu_seconds < prev.cpu_seconds {
            return None;
        }
        let rate = (last.cpu_seconds - prev.cpu_seconds) / (window_ms as f64 / 1000.0);
        Some(Usage {
            nano_cores: (rate * 1e9) as u64,
            memory: last.memory,
            timestamp_ms: last.timestamp_ms,
            window_ms,
        })
    }
}

/// What one node's kubelet reported, kept between scrapes.
#[derive(Clone, Debug, Default)]
pub(crate) struct NodeSeries {
    pub node: Series,
    /// (namespace, pod) → container → series.
    pub pods: HashMap<(String, String), HashMap<String, Series>>,
}

/// One scrape of `/metrics/resource`, parsed.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Scrape {
    pub node: Option<Point>,
    /// (namespace, pod, container) → (point, start time).
    pub containers: HashMap<(String, String, String), (Point, f64)>,
}

/// One sample: the metric's name, its labels, value and timestamp.
type Sample<'a> = (&'a str, Vec<(String, String)>, f64, Option<i64>);

/// One line of the Prometheus text format.
fn sample(line: &str) -> Option<Sample<'_>> {
    let line = line.trim();
    if line.is_empty() || line.starts_with('#') {
        return None;
    }
    let name_end = line.find(|c: char| c == '{' || c.is_whitespace())?;
    let name = &line[..name_end];
    let mut rest = &line[name_end..];
    let mut labels = Vec::new();
    if let Some(r) = rest.strip_prefix('{') {
        // label="value" pairs, values with \\, \" and \n escapes.
        let mut chars = r.char_indices().peekable();
        let mut end = None;
        loop {
            while chars.peek().is_some_and(|(_, c)| *c == ',' || c.is_whitespace()) {
                chars.next();
            }
            match chars.peek() {
                Some((i, '}')) => {
                    end = Some(*i);
                    break;
                }
                None => break,
                _ => {}
            }
            let mut key = String::new();
            for (_, c) in chars.by_ref() {
                if c == '=' {
                    break;
                }
                key.push(c);
            }
            if chars.next().map(|(_, c)| c) != Some('"') {
                return None;
            }
            let mut value = String::new();
            let mut closed = false;
            while let Some((_, c)) = chars.next() {
                match c {
                    '\\' => match chars.next().map(|(_, c)| c) {
                        Some('n') => value.push('\n'),
                        Some(c) => value.push(c),
                        None => return None,
                    },
                    '"' => {
                        closed = true;
                        break;
                    }
                    c => value.push(c),
                }
            }
            if !closed {
                return None;
            }
            labels.push((key.trim().to_owned(), value));
        }
        rest = &r[end? + 1..];
    }
    let mut fields = rest.split_whitespace();
    let value = fields.next()?.parse().ok()?;
    let ts = fields.next().and_then(|t| t.parse().ok());
    Some((name, labels, value, ts))
}

/// Parse what a kubelet's `/metrics/resource` served; samples without a timestamp take `now_ms`.
pub(crate) fn parse(text: &str, now_ms: i64) -> Scrape {
    let mut out = Scrape::default();
    let mut node = Point::default();
    let (mut node_cpu, mut node_mem) = (false, false);
    type Key = (String, String, String);
    let mut cpu: HashMap<Key, (f64, i64)> = HashMap::new();
    let mut mem: HashMap<Key, u64> = HashMap::new();
    let mut start: HashMap<Key, f64> = HashMap::new();
    for line in text.lines() {
        let Some((name, labels, value, ts)) = sample(line) else {
            continue;
        };
        let ts = ts.unwrap_or(now_ms);
        let label = |k: &str| {
            labels
                .iter()
                .find(|(l, _)| l == k)
                .map(|(_, v)| v.clone())
                .unwrap_or_default()
        };
        let key = || (label("namespace"), label("pod"), label("container"));
        match name {
            "node_cpu_usage_seconds_total" => {
                node.cpu_seconds = value;
                node.timestamp_ms = ts;
                node_cpu = true;
            }
            "node_memory_working_set_bytes" => {
                node.memory = value as u64;
                node_mem = true;
            }
            "container_cpu_usage_seconds_total" => {
                cpu.insert(key(), (value, ts));
            }
            "container_memory_working_set_bytes" => {
                mem.insert(key(), value as u64);
            }
            "container_start_time_seconds" => {
                start.insert(key(), value);
            }
            _ => {}
        }
    }
    if node_cpu && node_mem {
        out.node = Some(node);
    }
    for (k, (cpu_seconds, timestamp_ms)) in cpu {
        let Some(memory) = mem.get(&k).copied() else {
            continue;
        };
        let started = start.get(&k).copied().unwrap_or(0.0);
        out.containers.insert(
            k,
            (
                Point {
                    timestamp_ms,
                    cpu_seconds,
                    memory,
                },
                started,
            ),
        );
    }
    out
}

impl NodeSeries {
    /// Take in a scrape: pods and containers it no longer has are forgotten.
    pub fn push(&mut self, s: Scrape) {
        match s.node {
            Some(p) => self.node.push(p, 0.0),
            None => self.node = Series::default(),
        }
        let mut pods: HashMap<(String, String), HashMap<String, Series>> = HashMap::new();
        for ((ns, pod, container), (p, started)) in s.containers {
            let key = (ns, pod);
            let mut series = self
                .pods
                .get(&key)
                .and_then(|c| c.get(&container))
                .copied()
                .unwrap_or_default();
            series.push(p, started);
            pods.entry(key).or_default().insert(container, series);
        }
        self.pods = pods;
    }

    /// The usage of each container of pod `ns/name`, if every one of them has it.
    pub fn pod(&self, ns: &str, name: &str) -> Option<Vec<(String, Usage)>> {
        let containers = self.pods.get(&(ns.to_owned(), name.to_owned()))?;
        let mut out = Vec::new();
        for (c, s) in containers {
            out.push((c.clone(), s.usage()?));
        }
        out.sort_by(|a, b| a.0.cmp(&b.0));
        (!out.is_empty()).then_some(out)
    }
}

/// The scraped figures of every node, and the scraper's state.
pub(crate) struct ResourceMetrics {
    nodes: Mutex<HashMap<String, NodeSeries>>,
    /// When a metrics request last came, and whether a scraper is running.
    active: Mutex<(Instant, bool)>,
    /// Wakes the requests waiting for a new spell's first two scrapes.
    primed: tokio::sync::watch::Sender<u64>,
    /// How often kubelets are scraped (metrics-server's `--metric-resolution`).
    resolution: Duration,
}

impl ResourceMetrics {
    pub fn new(resolution: Duration) -> Self {
        Self {
            nodes: Mutex::default(),
            active: Mutex::new((Instant::now(), false)),
            primed: tokio::sync::watch::channel(0).0,
            resolution,
        }
    }

    /// Note a metrics request; start scraping if nothing scrapes, and then wait until the first
    /// two scrapes are in.
    pub async fn touch(self: &Arc<Self>, shared: &Arc<Shared>) {
        let start = {
            let mut a = self.active.lock().unwrap_or_else(|e| e.into_inner());
            a.0 = Instant::now();
            !std::mem::replace(&mut a.1, true)
        };
        let mut primed = self.primed.subscribe();
        if start {
            let (me, shared) = (self.clone(), Arc::downgrade(shared));
            let spell = *primed.borrow() + 1;
            tokio::spawn(async move { me.scrape_loop(shared, spell).await });
            let _ = tokio::time::timeout(
                FIRST_WINDOW + SCRAPE_TIMEOUT * 2,
                primed.wait_for(|v| *v >= spell),
            )
            .await;
        }
    }

    async fn scrape_loop(self: Arc<Self>, shared: std::sync::Weak<Shared>, spell: u64) {
        let mut first = true;
        loop {
            let Some(s) = shared.upgrade() else { break };
            self.scrape_all(&s).await;
            drop(s);
            if first {
                first = false;
                tokio::time::sleep(FIRST_WINDOW).await;
                if let Some(s) = shared.upgrade() {
                    self.scrape_all(&s).await;
                }
                self.primed.send_replace(spell);
            }
            tokio::time::sleep(self.resolution).await;
            let mut a = self.active.lock().unwrap_or_else(|e| e.into_inner());
            if a.0.elapsed() > IDLE {
                a.1 = false;
                self.nodes.lock().unwrap_or_else(|e| e.into_inner()).clear();
                break;
            }
        }
    }

    /// Scrape every Ready node's kubelet once.
    async fn scrape_all(&self, shared: &Arc<Shared>) {
        use futures_util::StreamExt;
        let Some(kubelet) = shared.kubelet.clone() else {
            return;
        };
        let nodes = match ready_nodes(shared).await {
            Ok(n) => n,
            Err(e) => {
                tracing::debug!(error = %e, "resource metrics: listing nodes");
                return;
            }
        };
        let names: Vec<String> = nodes.iter().map(|(n, _, _)| n.clone()).collect();
        let results: Vec<(String, Option<Scrape>)> = futures_util::stream::iter(nodes)
            .map(|(name, host, port)| {
                let kubelet = kubelet.clone();
                async move {
                    let got = tokio::time::timeout(
                        SCRAPE_TIMEOUT,
                        crate::endpoints::kubelet::get_text(&kubelet, &host, port, "/metrics/resource"),
                    )
                    .await;
                    let now = now_ms();
                    let scrape = match got {
                        Ok(Ok(text)) => Some(parse(&text, now)),
                        Ok(Err(e)) => {
                            tracing::debug!(node = %name, error = %e, "resource metrics: scrape failed");
                            None
                        }
                        Err(_) => {
                            tracing::debug!(node = %name, "resource metrics: scrape timed out");
                            None
                        }
                    };
                    (name, scrape)
                }
            })
            .buffer_unordered(PARALLEL)
            .collect()
            .await;
        let mut all = self.nodes.lock().unwrap_or_else(|e| e.into_inner());
        all.retain(|n, _| names.contains(n));
        for (name, scrape) in results {
            match scrape {
                Some(s) => all.entry(name).or_default().push(s),
                None => {
                    all.remove(&name);
                }
            }
        }
    }

    /// Node `name`'s usage.
    pub fn node(&self, name: &str) -> Option<Usage> {
        self.nodes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(name)?
            .node
            .usage()
    }

    /// Pod `ns/name`'s containers' usage (on whichever node it runs).
    pub fn pod(&self, ns: &str, name: &str) -> Option<Vec<(String, Usage)>> {
        self.nodes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .find_map(|n| n.pod(ns, name))
    }
}

/// Milliseconds since the epoch.
pub(crate) fn now_ms() -> i64 {
    (time::OffsetDateTime::now_utc().unix_timestamp_nanos() / 1_000_000) as i64
}

/// The Ready nodes with an address: (name, host, kubelet port).
pub(crate) async fn ready_nodes(shared: &Shared) -> Result<Vec<(String, String, u16)>, String> {
    let resp = shared
        .store
        .range(r8s_store::RangeRequest {
            prefix: "/registry/nodes/".into(),
            ..Default::default()
        })
        .await
        .map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    for kv in resp.kvs {
        let Ok(node) = serde_json::from_slice::<Value>(&kv.value) else {
            continue;
        };
        let ready = node["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| c["type"] == "Ready" && c["status"] == "True");
        let Some(name) = node["metadata"]["name"].as_str() else {
            continue;
        };
        if let (true, Some((host, port))) = (ready, crate::endpoints::kubelet::kubelet_endpoint(&node)) {
            out.push((name.to_owned(), host, port));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = r#"# HELP container_cpu_usage_seconds_total [STABLE] Cumulative cpu time consumed by the container in core-seconds
# TYPE container_cpu_usage_seconds_total counter
container_cpu_usage_seconds_total{container="app",namespace="default",pod="web"} 2.5 1000000
container_cpu_usage_seconds_total{container="odd \"name\", {x}",namespace="default",pod="web"} 1 1000000
container_memory_working_set_bytes{container="app",namespace="default",pod="web"} 4096 1000000
container_memory_working_set_bytes{container="odd \"name\", {x}",namespace="default",pod="web"} 10 1000000
container_start_time_seconds{container="app",namespace="default",pod="web"} 900.5 1000000
node_cpu_usage_seconds_total 100 1000000
node_memory_working_set_bytes 1.048576e+06 1000000
resource_scrape_error 0
"#;

    #[test]
    fn parse_reads_samples_labels_escapes_and_timestamps() {
        let s = parse(TEXT, 5);
        assert_eq!(
            s.node,
            Some(Point {
                timestamp_ms: 1_000_000,
                cpu_seconds: 100.0,
                memory: 1_048_576
            })
        );
        let app = &s.containers[&("default".into(), "web".into(), "app".into())];
        assert_eq!(app.0.cpu_seconds, 2.5);
        assert_eq!(app.0.memory, 4096);
        assert_eq!(app.1, 900.5);
        assert!(s
            .containers
            .contains_key(&("default".into(), "web".into(), "odd \"name\", {x}".into())));
        // Without a timestamp a sample takes the scrape's time.
        let s = parse(
            "node_cpu_usage_seconds_total 1\nnode_memory_working_set_bytes 2\n",
            77,
        );
        assert_eq!(s.node.unwrap().timestamp_ms, 77);
        assert_eq!(parse("garbage{ 1", 0), Scrape::default());
    }

    #[test]
    fn usage_is_the_rate_between_the_two_newest_points() {
        let mut n = NodeSeries::default();
        n.push(parse(TEXT, 0));
        assert_eq!(n.node.usage(), None, "one point has no rate");
        assert_eq!(n.pod("default", "web"), None);
        let later = TEXT
            .replace(" 1000000\n", " 1002000\n")
            .replace("} 2.5 ", "} 3.0 ")
            .replace(
                "node_cpu_usage_seconds_total 100 ",
                "node_cpu_usage_seconds_total 103 ",
            );
        n.push(parse(&later, 0));
        let node = n.node.usage().unwrap();
        assert_eq!(node.nano_cores, 1_500_000_000, "3 s of CPU in 2 s");
        assert_eq!(node.window_ms, 2000);
        let pod = n.pod("default", "web").unwrap();
        assert_eq!(pod[0].0, "app");
        assert_eq!(pod[0].1.nano_cores, 250_000_000);
        assert_eq!(pod[0].1.memory, 4096);
        // A restarted container (new start time) starts over; a pod gone is forgotten.
        let restarted = later
            .replace("} 900.5 ", "} 1001.0 ")
            .replace(" 1002000\n", " 1004000\n");
        n.push(parse(&restarted, 0));
        assert_eq!(n.pod("default", "web"), None);
        n.push(parse(
            "node_cpu_usage_seconds_total 104 1006000\nnode_memory_working_set_bytes 1 1006000\n",
            0,
        ));
        assert!(n.pods.is_empty());
        // CPU time going back gives no rate.
        n.push(parse(
            "node_cpu_usage_seconds_total 1 1008000\nnode_memory_working_set_bytes 1 1008000\n",
            0,
        ));
        assert_eq!(n.node.usage(), None);
    }
}
