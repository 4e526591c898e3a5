//! The Service proxy's metrics, under kube-proxy's names where kube-proxy has the measure
//! (sync durations, network programming latency, last sync time, sync failures) and r8s's for
//! the table's size.

use std::sync::atomic::AtomicU64;
use std::sync::Mutex;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

pub struct ProxyMetrics {
    registry: Mutex<Registry>,
    pub sync: Histogram,
    pub full_sync: Histogram,
    pub partial_sync: Histogram,
    pub programming: Histogram,
    pub last_sync: Gauge<f64, AtomicU64>,
    pub failures: Counter,
    pub services: Gauge,
    pub chains: Gauge,
    pub elements: Gauge,
}

/// kube-proxy's network programming buckets: quarter seconds to 1 s, then seconds to a minute,
/// then coarser to an hour.
fn programming_buckets() -> Vec<f64> {
    let mut b = vec![0.25, 0.5];
    b.extend((1..60).map(f64::from));
    b.extend((12..60).map(|i| f64::from(i) * 5.0));
    b.extend((1..=12).map(|i| f64::from(i) * 300.0));
    b
}

impl Default for ProxyMetrics {
    fn default() -> Self {
        let sync = Histogram::new(exponential_buckets(0.001, 2.0, 15));
        let full_sync = Histogram::new(exponential_buckets(0.001, 2.0, 15));
        let partial_sync = Histogram::new(exponential_buckets(0.001, 2.0, 15));
        let programming = Histogram::new(programming_buckets());
        let last_sync = Gauge::<f64, AtomicU64>::default();
        let failures = Counter::default();
        let services = Gauge::default();
        let chains = Gauge::default();
        let elements = Gauge::default();
        let mut r = Registry::default();
        r.register(
            "kubeproxy_sync_proxy_rules_duration_seconds",
            "SyncProxyRules latency in seconds",
            sync.clone(),
        );
        r.register(
            "kubeproxy_sync_full_proxy_rules_duration_seconds",
            "SyncProxyRules latency in seconds for full resyncs",
            full_sync.clone(),
        );
        r.register(
            "kubeproxy_sync_partial_proxy_rules_duration_seconds",
            "SyncProxyRules latency in seconds for partial resyncs",
            partial_sync.clone(),
        );
        r.register(
            "kubeproxy_network_programming_duration_seconds",
            "In Cluster Network Programming Latency in seconds",
            programming.clone(),
        );
        r.register(
            "kubeproxy_sync_proxy_rules_last_timestamp_seconds",
            "The last time proxy rules were successfully synced",
            last_sync.clone(),
        );
        r.register(
            "kubeproxy_sync_proxy_rules_nftables_sync_failures",
            "Number of nftables transactions the kernel refused",
            failures.clone(),
        );
        r.register(
            "r8s_proxy_services",
            "Services with rules in the proxy's table",
            services.clone(),
        );
        r.register(
            "r8s_proxy_nftables_chains",
            "Per-Service chains in the proxy's table",
            chains.clone(),
        );
        r.register(
            "r8s_proxy_nftables_elements",
            "Map and set elements in the proxy's table",
            elements.clone(),
        );
        ProxyMetrics {
            registry: Mutex::new(r),
            sync,
            full_sync,
            partial_sync,
            programming,
            last_sync,
            failures,
            services,
            chains,
            elements,
        }
    }
}

impl ProxyMetrics {
    /// The text exposition without the closing `# EOF` (to follow another registry's).
    pub fn render(&self) -> String {
        let mut out = String::new();
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry.lock().unwrap());
        out.strip_suffix("# EOF\n").map(str::to_string).unwrap_or(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rendered_under_kube_proxys_names() {
        let m = ProxyMetrics::default();
        m.sync.observe(0.004);
        m.programming.observe(0.3);
        m.services.set(3);
        let text = m.render();
        assert!(
            text.contains("kubeproxy_sync_proxy_rules_duration_seconds_count 1"),
            "{text}"
        );
        assert!(
            text.contains("kubeproxy_network_programming_duration_seconds_bucket{le=\"0.5\"} 1"),
            "{text}"
        );
        assert!(text.contains("r8s_proxy_services 3"), "{text}");
        assert!(!text.contains("# EOF"));
    }
}
