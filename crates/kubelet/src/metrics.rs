//! The kubelet's `/metrics` (Prometheus text, upstream's names, through `prometheus-client`):
//! how long pods take to start (`kubelet_pod_start_duration_seconds`, from the kubelet first
//! seeing a pod to the pod running), every CRI call's latency, count and errors by operation
//! (`kubelet_runtime_operations_*`), and what runs now (`kubelet_running_pods`,
//! `kubelet_running_containers`).

use std::sync::Mutex;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OperationLabels {
    pub operation_type: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StateLabels {
    pub container_state: String,
}

/// Upstream's buckets for pod start-up (seconds).
const POD_START_BUCKETS: [f64; 25] = [
    0.5, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0, 20.0, 30.0, 45.0, 60.0, 120.0, 180.0, 240.0, 300.0, 360.0,
    480.0, 600.0, 900.0, 1200.0, 1800.0, 2700.0, 3600.0,
];

fn runtime_histogram() -> Histogram {
    // Upstream: ExponentialBuckets(.005, 2.5, 14).
    Histogram::new(exponential_buckets(0.005, 2.5, 14))
}

/// The CRI side: cheap to clone, shared by the timed channel.
#[derive(Clone)]
pub struct RuntimeOps {
    pub duration: Family<OperationLabels, Histogram, fn() -> Histogram>,
    pub total: Family<OperationLabels, Counter>,
    pub errors: Family<OperationLabels, Counter>,
}

impl Default for RuntimeOps {
    fn default() -> Self {
        Self {
            duration: Family::new_with_constructor(runtime_histogram),
            total: Family::default(),
            errors: Family::default(),
        }
    }
}

impl RuntimeOps {
    /// Record one CRI call of `method` (the gRPC method name, e.g. `RunPodSandbox`).
    pub fn observe(&self, method: &str, seconds: f64, failed: bool) {
        let l = OperationLabels {
            operation_type: operation_type(method),
        };
        self.duration.get_or_create(&l).observe(seconds);
        self.total.get_or_create(&l).inc();
        if failed {
            self.errors.get_or_create(&l).inc();
        }
    }
}

/// Upstream's operation names: the method in snake case, "PodSandbox" as one word
/// (`RunPodSandbox` → `run_podsandbox`, `ListContainers` → `list_containers`).
pub fn operation_type(method: &str) -> String {
    let mut out = String::new();
    for (i, ch) in method.replace("PodSandbox", "Podsandbox").chars().enumerate() {
        if ch.is_ascii_uppercase() {
            if i > 0 {
                out.push('_');
            }
            out.push(ch.to_ascii_lowercase());
        } else {
            out.push(ch);
        }
    }
    out
}

/// Metrics of another part of the agent served on the kubelet's `/metrics` (the text
/// exposition of its families, without the closing `# EOF`).
#[derive(Clone)]
pub struct MetricsSource(pub std::sync::Arc<dyn Fn() -> String + Send + Sync>);

impl std::fmt::Debug for MetricsSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MetricsSource")
    }
}

pub struct KubeletMetrics {
    registry: Mutex<Registry>,
    extra: Mutex<Vec<MetricsSource>>,
    pub runtime: RuntimeOps,
    pub pod_start: Histogram,
    pub running_pods: Gauge,
    pub running_containers: Family<StateLabels, Gauge>,
}

impl Default for KubeletMetrics {
    fn default() -> Self {
        let runtime = RuntimeOps::default();
        let pod_start = Histogram::new(POD_START_BUCKETS);
        let running_pods = Gauge::default();
        let running_containers = Family::<StateLabels, Gauge>::default();
        let mut r = Registry::default();
        r.register(
            "kubelet_pod_start_duration_seconds",
            "Duration in seconds from kubelet seeing a pod for the first time to the pod starting to run",
            pod_start.clone(),
        );
        r.register(
            "kubelet_runtime_operations_duration_seconds",
            "Duration in seconds of runtime operations. Broken down by operation type.",
            runtime.duration.clone(),
        );
        r.register(
            "kubelet_runtime_operations",
            "Cumulative number of runtime operations by operation type.",
            runtime.total.clone(),
        );
        r.register(
            "kubelet_runtime_operations_errors",
            "Cumulative number of runtime operation errors by operation type.",
            runtime.errors.clone(),
        );
        r.register(
            "kubelet_running_pods",
            "Number of pods that have a running pod sandbox",
            running_pods.clone(),
        );
        r.register(
            "kubelet_running_containers",
            "Number of containers currently running",
            running_containers.clone(),
        );
        Self {
            registry: Mutex::new(r),
            extra: Mutex::new(Vec::new()),
            runtime,
            pod_start,
            running_pods,
            running_containers,
        }
    }
}

impl KubeletMetrics {
    /// Serve `source`'s metrics after the kubelet's own.
    pub fn add_source(&self, source: MetricsSource) {
        self.extra.lock().unwrap().push(source);
    }

    pub fn render(&self) -> String {
        let mut out = String::new();
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry.lock().unwrap());
        let extra = self.extra.lock().unwrap();
        if extra.is_empty() {
            return out;
        }
        let mut out = out.strip_suffix("# EOF\n").map(str::to_string).unwrap_or(out);
        for source in extra.iter() {
            out.push_str(&(source.0)());
        }
        out.push_str("# EOF\n");
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn other_sources_follow_the_kubelets_own_metrics() {
        let m = KubeletMetrics::default();
        m.add_source(MetricsSource(std::sync::Arc::new(|| {
            "# TYPE other gauge\nother 1\n".to_string()
        })));
        let text = m.render();
        assert!(text.contains("kubelet_running_pods"), "{text}");
        assert!(text.ends_with("other 1\n# EOF\n"), "{text}");
        assert_eq!(text.matches("# EOF").count(), 1);
    }

    #[test]
    fn operation_names_as_upstream() {
        assert_eq!(operation_type("RunPodSandbox"), "run_podsandbox");
        assert_eq!(operation_type("ListPodSandbox"), "list_podsandbox");
        assert_eq!(operation_type("PodSandboxStatus"), "podsandbox_status");
        assert_eq!(operation_type("ListContainers"), "list_containers");
        assert_eq!(operation_type("ExecSync"), "exec_sync");
        assert_eq!(
            operation_type("UpdateContainerResources"),
            "update_container_resources"
        );
        assert_eq!(operation_type("Version"), "version");
    }

    #[test]
    fn rendered_with_upstream_names() {
        let m = KubeletMetrics::default();
        m.runtime.observe("PullImage", 0.2, false);
        m.runtime.observe("PullImage", 0.3, true);
        m.pod_start.observe(1.5);
        m.running_pods.set(3);
        let text = m.render();
        assert!(
            text.contains(r#"kubelet_runtime_operations_total{operation_type="pull_image"} 2"#),
            "{text}"
        );
        assert!(
            text.contains(r#"kubelet_runtime_operations_errors_total{operation_type="pull_image"} 1"#),
            "{text}"
        );
        assert!(
            text.contains(
                r#"kubelet_runtime_operations_duration_seconds_count{operation_type="pull_image"} 2"#
            ),
            "{text}"
        );
        assert!(
            text.contains("kubelet_pod_start_duration_seconds_bucket{le=\"2.0\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("kubelet_pod_start_duration_seconds_bucket{le=\"1.0\"} 0"),
            "{text}"
        );
        assert!(text.contains("kubelet_running_pods 3"), "{text}");
    }
}
