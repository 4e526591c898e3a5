//! `/metrics`: Prometheus metrics with upstream's names, through the `prometheus-client` crate.
//! `apiserver_request_total` counts every request by verb, group, version, resource,
//! subresource, scope, component and code, as kube-apiserver does; the `apiserver_audit_*`
//! counters count audit events, the events the audit log lost, and requests by audit level;
//! `apiserver_request_duration_seconds` is the latency histogram upstream's API call SLOs are
//! measured on (the time until the response starts: for a WATCH or CONNECT, upstream records
//! its whole life instead; both are left out of the SLOs).

use std::sync::Mutex;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use crate::request_info::RequestInfo;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    pub verb: String,
    pub group: String,
    pub version: String,
    pub resource: String,
    pub subresource: String,
    pub scope: String,
    pub component: String,
    pub code: String,
}

/// `apiserver_request_duration_seconds`'s labels: upstream's, without the code.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DurationLabels {
    pub verb: String,
    pub dry_run: String,
    pub group: String,
    pub version: String,
    pub resource: String,
    pub subresource: String,
    pub scope: String,
    pub component: String,
}

/// Upstream's buckets for `apiserver_request_duration_seconds`.
const DURATION_BUCKETS: [f64; 23] = [
    0.005, 0.025, 0.05, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 1.25, 1.5, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0, 15.0,
    20.0, 30.0, 45.0, 60.0,
];

fn duration_histogram() -> Histogram {
    Histogram::new(DURATION_BUCKETS)
}

type DurationFamily = Family<DurationLabels, Histogram, fn() -> Histogram>;

/// Upstream's `apiserver_cache_list_total` labels: the resource's storage prefix and the
/// index used (none here).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CacheListLabels {
    pub resource_prefix: String,
    pub index: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PluginLabels {
    pub plugin: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LevelLabels {
    pub level: String,
}

/// Upstream's audit counters. Clones share the counts.
#[derive(Clone, Debug, Default)]
pub struct AuditMetrics {
    /// `apiserver_audit_event_total`: events generated and sent to the audit backend.
    pub events: Counter,
    /// `apiserver_audit_error_total{plugin}`: events that could not be audited (dropped
    /// because the log's queue was full, or not written).
    pub errors: Family<PluginLabels, Counter>,
    /// `apiserver_audit_level_total{level}`: requests by the policy's level.
    pub levels: Family<LevelLabels, Counter>,
}

/// Another component's metrics in the text format, without `# EOF` (the scheduler's, when it
/// runs in this process).
pub type MetricsSource = Box<dyn Fn() -> String + Send + Sync>;

pub struct Metrics {
    registry: Mutex<Registry>,
    requests: Family<RequestLabels, Counter>,
    durations: DurationFamily,
    /// LIST requests the watch cache answered.
    pub cache_lists: Family<CacheListLabels, Counter>,
    pub audit: AuditMetrics,
    extra: Mutex<Vec<MetricsSource>>,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::default();
        let requests = Family::<RequestLabels, Counter>::default();
        registry.register(
            "apiserver_request",
            "Counter of apiserver requests broken out for each verb, dry run value, group, version, resource, scope, component, and HTTP response code.",
            requests.clone(),
        );
        let durations: DurationFamily = Family::new_with_constructor(duration_histogram);
        registry.register(
            "apiserver_request_duration_seconds",
            "Response latency distribution in seconds for each verb, dry run value, group, version, resource, subresource, scope and component.",
            durations.clone(),
        );
        let cache_lists = Family::<CacheListLabels, Counter>::default();
        registry.register(
            "apiserver_cache_list",
            "Number of LIST requests served from watch cache",
            cache_lists.clone(),
        );
        let audit = AuditMetrics::default();
        registry.register(
            "apiserver_audit_event",
            "Counter of audit events generated and sent to the audit backend.",
            audit.events.clone(),
        );
        registry.register(
            "apiserver_audit_error",
            "Counter of audit events that failed to be audited properly. Plugin identifies the plugin affected by the error.",
            audit.errors.clone(),
        );
        registry.register(
            "apiserver_audit_level",
            "Counter of policy levels for audit events (1 per request).",
            audit.levels.clone(),
        );
        Self {
            registry: Mutex::new(registry),
            requests,
            durations,
            cache_lists,
            audit,
            extra: Mutex::new(Vec::new()),
        }
    }
}

/// Upstream's verb label: the HTTP-ish verb, LIST and WATCH told apart, APPLY for apply patches.
fn verb_label(info: &RequestInfo, apply: bool) -> String {
    match info.verb.as_str() {
        "create" => "POST".into(),
        "update" => "PUT".into(),
        "patch" if apply => "APPLY".into(),
        "deletecollection" => "DELETE".into(),
        v => v.to_ascii_uppercase(),
    }
}

impl Metrics {
    /// A request answered with `code` after `seconds`.
    pub fn observe(&self, info: &RequestInfo, apply: bool, dry_run: bool, code: u16, seconds: f64) {
        let scope = if !info.is_resource_request {
            ""
        } else if !info.name.is_empty() {
            "resource"
        } else if !info.namespace.is_empty() {
            "namespace"
        } else {
            "cluster"
        };
        let verb = verb_label(info, apply);
        self.durations
            .get_or_create(&DurationLabels {
                verb: verb.clone(),
                dry_run: if dry_run { "All".into() } else { String::new() },
                group: info.api_group.clone(),
                version: info.api_version.clone(),
                resource: info.resource.clone(),
                subresource: info.subresource.clone(),
                scope: scope.into(),
                component: "apiserver".into(),
            })
            .observe(seconds);
        self.requests
            .get_or_create(&RequestLabels {
                verb,
                group: info.api_group.clone(),
                version: info.api_version.clone(),
                resource: info.resource.clone(),
                subresource: info.subresource.clone(),
                scope: scope.into(),
                component: "apiserver".into(),
                code: code.to_string(),
            })
            .inc();
    }

    /// API priority and fairness's counters and gauges, with upstream's names.
    pub(crate) fn register_flow_control(&self, m: &crate::flowcontrol::FlowMetrics) {
        let mut r = self.registry.lock().unwrap();
        r.register(
            "apiserver_flowcontrol_dispatched_requests",
            "Number of requests executed by API Priority and Fairness subsystem",
            m.dispatched.clone(),
        );
        r.register(
            "apiserver_flowcontrol_rejected_requests",
            "Number of requests rejected by API Priority and Fairness subsystem",
            m.rejected.clone(),
        );
        r.register(
            "apiserver_flowcontrol_current_executing_requests",
            "Number of requests in initial (for a WATCH) or any (for a non-WATCH) execution stage in the API Priority and Fairness subsystem",
            m.executing.clone(),
        );
        r.register(
            "apiserver_flowcontrol_current_inqueue_requests",
            "Number of requests currently pending in queues of the API Priority and Fairness subsystem",
            m.inqueue.clone(),
        );
        r.register(
            "apiserver_flowcontrol_nominal_limit_seats",
            "Nominal number of execution seats configured for each priority level",
            m.nominal_limit.clone(),
        );
    }

    /// Serve `source`'s metrics after the API server's own.
    pub fn add_source(&self, source: MetricsSource) {
        self.extra.lock().unwrap().push(source);
    }

    /// The text exposition format.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let registry = self.registry.lock().unwrap();
        let _ = prometheus_client::encoding::text::encode(&mut out, &registry);
        let extra = self.extra.lock().unwrap();
        let mut out = out.strip_suffix("# EOF\n").map(str::to_string).unwrap_or(out);
        out.push_str(&trace_rings());
        for source in extra.iter() {
            out.push_str(&source());
        }
        out.push_str("# EOF\n");
        out
    }
}

/// The journey recorder's rings (`r8s trace`): how many stages each component keeps, and
/// the bound.
fn trace_rings() -> String {
    let journal = r8s_trace::journal();
    let mut sizes: Vec<(String, usize)> = journal.sizes().into_iter().collect();
    sizes.sort();
    let mut out = String::from(
        "# HELP r8s_trace_ring_stages Stages of the journey (r8s trace) this process keeps, by component.\n\
         # TYPE r8s_trace_ring_stages gauge\n",
    );
    for (component, n) in sizes {
        out.push_str(&format!(
            "r8s_trace_ring_stages{{component=\"{component}\"}} {n}\n"
        ));
    }
    out.push_str(&format!(
        "# HELP r8s_trace_requests_untold_total Writes the journey did not record because they came faster than its ring holds.\n\
         # TYPE r8s_trace_requests_untold_total counter\nr8s_trace_requests_untold_total {}\n",
        crate::journey::UNTOLD.load(std::sync::atomic::Ordering::Relaxed)
    ));
    out.push_str(&format!(
        "# HELP r8s_trace_ring_capacity The most stages each component's ring keeps (--trace-ring-size).\n\
         # TYPE r8s_trace_ring_capacity gauge\nr8s_trace_ring_capacity {}\n",
        journal.capacity()
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request_info::parse_request;

    #[test]
    fn counts_requests_with_upstream_labels() {
        let m = Metrics::default();
        let create = parse_request(&http::Method::POST, "/api/v1/namespaces/default/pods", None);
        m.observe(&create, false, false, 201, 0.003);
        m.observe(&create, false, false, 201, 0.3);
        let list = parse_request(&http::Method::GET, "/apis/apps/v1/deployments", None);
        m.observe(&list, false, true, 200, 2.5);
        let text = m.render();
        assert!(
            text.contains(r#"apiserver_request_total{verb="POST",group="",version="v1",resource="pods",subresource="",scope="namespace",component="apiserver",code="201"} 2"#),
            "{text}"
        );
        assert!(
            text.contains(r#"verb="LIST",group="apps",version="v1",resource="deployments""#),
            "{text}"
        );
        // The latency histogram, with upstream's buckets: one create under 5 ms, both under
        // 0.4 s; the list (a dry run) between 2 and 3 s.
        let create = r#"verb="POST",dry_run="",group="",version="v1",resource="pods",subresource="",scope="namespace",component="apiserver""#;
        assert!(
            text.contains(&format!(
                r#"apiserver_request_duration_seconds_bucket{{le="0.005",{create}}} 1"#
            )),
            "{text}"
        );
        assert!(
            text.contains(&format!(
                r#"apiserver_request_duration_seconds_bucket{{le="0.4",{create}}} 2"#
            )),
            "{text}"
        );
        assert!(
            text.contains(&format!(
                r#"apiserver_request_duration_seconds_count{{{create}}} 2"#
            )),
            "{text}"
        );
        let list = r#"verb="LIST",dry_run="All",group="apps",version="v1",resource="deployments""#;
        assert!(
            text.contains(&format!(r#"apiserver_request_duration_seconds_bucket{{le="2.0",{list},subresource="",scope="cluster",component="apiserver"}} 0"#)),
            "{text}"
        );
        assert!(
            text.contains(&format!(r#"apiserver_request_duration_seconds_bucket{{le="3.0",{list},subresource="",scope="cluster",component="apiserver"}} 1"#)),
            "{text}"
        );
    }

    #[test]
    fn audit_counters_have_upstream_names() {
        let m = Metrics::default();
        m.audit.events.inc();
        m.audit
            .errors
            .get_or_create(&PluginLabels { plugin: "log".into() })
            .inc();
        let text = m.render();
        assert!(text.contains("apiserver_audit_event_total 1"), "{text}");
        assert!(
            text.contains(r#"apiserver_audit_error_total{plugin="log"} 1"#),
            "{text}"
        );
    }
}
