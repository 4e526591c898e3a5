//! `/metrics`: Prometheus metrics with upstream's names, through the `prometheus-client` crate.
//! `apiserver_request_total` counts every request by verb, group, version, resource,
//! subresource, scope, component and code, as kube-apiserver does; the `apiserver_audit_*`
//! counters count audit events, the events the audit log lost, and requests by audit level.

use std::sync::Mutex;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
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
    pub fn observe(&self, info: &RequestInfo, apply: bool, code: u16) {
        let scope = if !info.is_resource_request {
            ""
        } else if !info.name.is_empty() {
            "resource"
        } else if !info.namespace.is_empty() {
            "namespace"
        } else {
            "cluster"
        };
        self.requests
            .get_or_create(&RequestLabels {
                verb: verb_label(info, apply),
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
        if extra.is_empty() {
            return out;
        }
        let mut out = out.strip_suffix("# EOF\n").map(str::to_string).unwrap_or(out);
        for source in extra.iter() {
            out.push_str(&source());
        }
        out.push_str("# EOF\n");
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request_info::parse_request;

    #[test]
    fn counts_requests_with_upstream_labels() {
        let m = Metrics::default();
        let create = parse_request(&http::Method::POST, "/api/v1/namespaces/default/pods", None);
        m.observe(&create, false, 201);
        m.observe(&create, false, 201);
        let list = parse_request(&http::Method::GET, "/apis/apps/v1/deployments", None);
        m.observe(&list, false, 200);
        let text = m.render();
        assert!(
            text.contains(r#"apiserver_request_total{verb="POST",group="",version="v1",resource="pods",subresource="",scope="namespace",component="apiserver",code="201"} 2"#),
            "{text}"
        );
        assert!(
            text.contains(r#"verb="LIST",group="apps",version="v1",resource="deployments""#),
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
