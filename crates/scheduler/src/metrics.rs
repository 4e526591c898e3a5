//! The scheduler's metrics with upstream's names (a subset of kube-scheduler's), in the
//! Prometheus text format. Inside `r8s server` they are served on the API server's `/metrics`;
//! r8s does not have kube-scheduler's own secure port.

use std::sync::Mutex;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AttemptLabels {
    pub result: String,
    pub profile: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct QueueLabels {
    pub queue: String,
}

pub struct SchedulerMetrics {
    registry: Mutex<Registry>,
    /// `scheduler_schedule_attempts_total{result,profile}`.
    pub attempts: Family<AttemptLabels, Counter>,
    /// `scheduler_scheduling_attempt_duration_seconds{result,profile}`.
    pub attempt_duration: Family<AttemptLabels, Histogram>,
    /// `scheduler_pending_pods{queue}`: active, backoff, unschedulable.
    pub pending: Family<QueueLabels, Gauge>,
    /// `scheduler_preemption_attempts_total`.
    pub preemption_attempts: Counter,
    /// `scheduler_preemption_victims`.
    pub preemption_victims: Histogram,
}

impl std::fmt::Debug for SchedulerMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SchedulerMetrics")
    }
}

impl Default for SchedulerMetrics {
    fn default() -> Self {
        let mut registry = Registry::default();
        let attempts = Family::<AttemptLabels, Counter>::default();
        registry.register(
            "scheduler_schedule_attempts",
            "Number of attempts to schedule pods, by the result. 'unschedulable' means a pod could not be scheduled, while 'error' means an internal scheduler problem.",
            attempts.clone(),
        );
        let attempt_duration = Family::<AttemptLabels, Histogram>::new_with_constructor(|| {
            Histogram::new(exponential_buckets(0.001, 2.0, 15))
        });
        registry.register(
            "scheduler_scheduling_attempt_duration_seconds",
            "Scheduling attempt latency in seconds (scheduling algorithm + binding)",
            attempt_duration.clone(),
        );
        let pending = Family::<QueueLabels, Gauge>::default();
        registry.register(
            "scheduler_pending_pods",
            "Number of pending pods, by the queue type. 'active' means number of pods in activeQ; 'backoff' means number of pods in backoffQ; 'unschedulable' means number of pods in unschedulablePods.",
            pending.clone(),
        );
        let preemption_attempts = Counter::default();
        registry.register(
            "scheduler_preemption_attempts",
            "Total preemption attempts in the cluster till now",
            preemption_attempts.clone(),
        );
        let preemption_victims = Histogram::new(exponential_buckets(1.0, 2.0, 7));
        registry.register(
            "scheduler_preemption_victims",
            "Number of selected preemption victims",
            preemption_victims.clone(),
        );
        Self {
            registry: Mutex::new(registry),
            attempts,
            attempt_duration,
            pending,
            preemption_attempts,
            preemption_victims,
        }
    }
}

impl SchedulerMetrics {
    /// One scheduling attempt's result and duration.
    pub fn attempt(&self, result: &str, profile: &str, seconds: f64) {
        let labels = AttemptLabels {
            result: result.into(),
            profile: profile.into(),
        };
        self.attempts.get_or_create(&labels).inc();
        self.attempt_duration.get_or_create(&labels).observe(seconds);
    }

    pub fn set_pending(&self, active: usize, backoff: usize, unschedulable: usize) {
        for (queue, n) in [
            ("active", active),
            ("backoff", backoff),
            ("unschedulable", unschedulable),
        ] {
            self.pending
                .get_or_create(&QueueLabels { queue: queue.into() })
                .set(n as i64);
        }
    }

    /// The text exposition format, without the closing `# EOF` (so it can be appended to
    /// another registry's output).
    pub fn render(&self) -> String {
        let mut out = String::new();
        let registry = self.registry.lock().unwrap();
        let _ = prometheus_client::encoding::text::encode(&mut out, &registry);
        out.strip_suffix("# EOF\n").map(str::to_string).unwrap_or(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attempts_and_queues_render_with_upstreams_names() {
        let m = SchedulerMetrics::default();
        m.attempt("scheduled", "default-scheduler", 0.0004);
        m.attempt("scheduled", "default-scheduler", 0.002);
        m.attempt("unschedulable", "default-scheduler", 0.001);
        m.set_pending(1, 2, 3);
        m.preemption_attempts.inc();
        m.preemption_victims.observe(2.0);
        let text = m.render();
        assert!(
            text.contains(
                "scheduler_schedule_attempts_total{result=\"scheduled\",profile=\"default-scheduler\"} 2"
            ),
            "{text}"
        );
        assert!(text.contains(
            "scheduler_schedule_attempts_total{result=\"unschedulable\",profile=\"default-scheduler\"} 1"
        ));
        assert!(text.contains(
            "scheduler_scheduling_attempt_duration_seconds_count{result=\"scheduled\",profile=\"default-scheduler\"} 2"
        ));
        assert!(text.contains("scheduler_pending_pods{queue=\"unschedulable\"} 3"));
        assert!(text.contains("scheduler_preemption_attempts_total 1"));
        assert!(text.contains("scheduler_preemption_victims_count 1"));
        assert!(!text.contains("# EOF"));
    }
}
