//! Pod garbage collection (upstream's `pod-garbage-collector`), every [`CHECK_PERIOD`]:
//!
//! - orphaned pods: a pod bound to a node that no longer exists (gone from the informer for
//!   [`QUARANTINE`], and a GET of the node says 404) is marked Failed with the condition
//!   `DisruptionTarget` (`DeletionByPodGC`, "PodGC: node no longer exists") and deleted at
//!   once (grace period 0): no kubelet is left to finish it. Its controller makes a new one,
//!   and the claims it held are free again;
//! - terminating pods that were never scheduled are deleted at once;
//! - terminating pods on a node tainted `node.kubernetes.io/out-of-service` (NoExecute) that
//!   is not Ready are deleted at once (the non-graceful node shutdown);
//! - past `--terminated-pod-gc-threshold` finished pods (Succeeded or Failed), the oldest are
//!   deleted.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DeleteParams, Patch};
use kube::{Client, ResourceExt};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use r8s_api::pod::is_terminal;
use r8s_client::informer::{lookup, Factory, Informer};

/// How often pods are looked at (upstream's `gcCheckPeriod`).
pub const CHECK_PERIOD: Duration = Duration::from_secs(20);
/// How long a node must be missing from the informer before its pods are orphans (upstream's
/// `quarantineTime`).
pub const QUARANTINE: Duration = Duration::from_secs(40);
/// Upstream's default `--terminated-pod-gc-threshold`.
pub const DEFAULT_TERMINATED_THRESHOLD: usize = 12500;
/// The taint of a node that was shut down for good (non-graceful node shutdown).
pub const OUT_OF_SERVICE: &str = "node.kubernetes.io/out-of-service";

pub struct PodGcController {
    client: Client,
    pods: Arc<Informer<Pod>>,
    nodes: Arc<Informer<Node>>,
    terminated_threshold: usize,
    /// Since when each node some pod names has been missing from the informer.
    missing_since: Mutex<HashMap<String, Instant>>,
}

fn node_name(pod: &Pod) -> &str {
    pod.spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .unwrap_or("")
}

/// The finished pods past `threshold`, oldest first (upstream orders by creation time).
pub fn terminated_over(pods: &[Arc<Pod>], threshold: usize) -> Vec<Arc<Pod>> {
    let mut done: Vec<Arc<Pod>> = pods.iter().filter(|p| is_terminal(p)).cloned().collect();
    if threshold == 0 || done.len() <= threshold {
        return Vec::new();
    }
    done.sort_by(|a, b| {
        let t = |p: &Pod| p.metadata.creation_timestamp.as_ref().map(|t| t.0);
        t(a).cmp(&t(b)).then_with(|| a.name_any().cmp(&b.name_any()))
    });
    let excess = done.len() - threshold;
    done.truncate(excess);
    done
}

/// Whether `node` has the NoExecute out-of-service taint and is not Ready.
fn out_of_service(node: &Node) -> bool {
    let tainted = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|ts| {
            ts.iter()
                .any(|t| t.key == OUT_OF_SERVICE && t.effect == "NoExecute")
        });
    let ready = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
    tainted && !ready
}

impl PodGcController {
    pub fn new(factory: &Factory, terminated_threshold: usize) -> Arc<Self> {
        Arc::new(Self {
            client: factory.client(),
            pods: factory.get::<Pod>(),
            nodes: factory.get::<Node>(),
            terminated_threshold,
            missing_since: Mutex::default(),
        })
    }

    pub async fn run(self: Arc<Self>, stop: CancellationToken) {
        let synced = vec![self.pods.clone().synced(), self.nodes.clone().synced()];
        if !r8s_client::queue::wait_for_sync(synced, &stop).await {
            return;
        }
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(CHECK_PERIOD) => {}
            }
            self.gc().await;
        }
    }

    async fn gc(&self) {
        let pods = self.pods.store().state();
        for pod in terminated_over(&pods, self.terminated_threshold) {
            self.delete(&pod, None).await;
        }
        let node_store = self.nodes.store();
        // Terminating pods on out-of-service nodes, and never scheduled ones.
        for pod in pods.iter().filter(|p| p.metadata.deletion_timestamp.is_some()) {
            let node = node_name(pod);
            let gone = node.is_empty() || lookup(&node_store, node).is_some_and(|n| out_of_service(&n));
            if gone {
                self.delete(pod, None).await;
            }
        }
        // Orphans: pods of nodes missing for the quarantine and confirmed gone.
        let now = Instant::now();
        let mut orphans_of = Vec::new();
        {
            let mut missing = self.missing_since.lock().unwrap();
            let named: std::collections::HashSet<&str> = pods
                .iter()
                .map(|p| node_name(p))
                .filter(|n| !n.is_empty())
                .collect();
            missing.retain(|n, _| named.contains(n.as_str()) && lookup(&node_store, n).is_none());
            for n in named {
                if lookup(&node_store, n).is_some() {
                    continue;
                }
                let since = *missing.entry(n.to_owned()).or_insert(now);
                if now.duration_since(since) >= QUARANTINE {
                    orphans_of.push(n.to_owned());
                }
            }
        }
        let nodes: Api<Node> = Api::all(self.client.clone());
        for n in orphans_of {
            match nodes.get_opt(&n).await {
                Ok(None) => {}
                Ok(Some(_)) => continue,
                Err(e) => {
                    tracing::debug!(node = %n, error = %e, "podgc: checking a missing node");
                    continue;
                }
            }
            for pod in pods.iter().filter(|p| node_name(p) == n) {
                tracing::info!(pod = %pod.name_any(), node = %n, "podgc: deleting an orphaned pod");
                self.delete(pod, Some("PodGC: node no longer exists")).await;
            }
            self.missing_since.lock().unwrap().remove(&n);
        }
    }

    /// Upstream's `markFailedAndDeletePodWithCondition`: a pod not yet finished is marked
    /// Failed (with the DisruptionTarget condition when there is a `reason` message), then
    /// deleted with grace period 0.
    async fn delete(&self, pod: &Pod, message: Option<&str>) {
        let ns = pod.namespace().unwrap_or_default();
        let name = pod.name_any();
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &ns);
        if !is_terminal(pod) {
            let mut status = json!({"phase": "Failed"});
            if let Some(message) = message {
                status["conditions"] = json!([{
                    "type": "DisruptionTarget",
                    "status": "True",
                    "reason": "DeletionByPodGC",
                    "message": message,
                    "lastTransitionTime": jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
                }]);
            }
            let patch = json!({"status": status});
            if let Err(e) = api
                .patch_status(&name, &crate::patch_params(), &Patch::Strategic(&patch))
                .await
            {
                if !r8s_client::is_not_found(&e) {
                    tracing::debug!(pod = %name, error = %e, "podgc: marking a pod Failed");
                }
            }
        }
        let dp = DeleteParams {
            grace_period_seconds: Some(0),
            preconditions: pod.metadata.uid.clone().map(|uid| kube::api::Preconditions {
                uid: Some(uid),
                resource_version: None,
            }),
            ..Default::default()
        };
        match api.delete(&name, &dp).await {
            Ok(_) => {}
            Err(e) if r8s_client::is_not_found(&e) || r8s_client::is_conflict(&e) => {}
            Err(e) => tracing::warn!(pod = %name, error = %e, "podgc: deleting a pod"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str, phase: &str, created: &str) -> Arc<Pod> {
        Arc::new(
            serde_json::from_value(json!({
                "metadata": {"name": name, "namespace": "default", "creationTimestamp": created},
                "status": {"phase": phase},
            }))
            .unwrap(),
        )
    }

    #[test]
    fn the_oldest_finished_pods_past_the_threshold_go() {
        let pods = vec![
            pod("running", "Running", "2026-01-01T00:00:00Z"),
            pod("new-done", "Succeeded", "2026-01-04T00:00:00Z"),
            pod("old-failed", "Failed", "2026-01-02T00:00:00Z"),
            pod("mid-done", "Succeeded", "2026-01-03T00:00:00Z"),
        ];
        let names = |v: Vec<Arc<Pod>>| v.iter().map(|p| p.name_any()).collect::<Vec<_>>();
        assert_eq!(names(terminated_over(&pods, 1)), ["old-failed", "mid-done"]);
        assert_eq!(names(terminated_over(&pods, 3)), Vec::<String>::new());
        // 0 turns the collection of finished pods off, as upstream's flag.
        assert_eq!(names(terminated_over(&pods, 0)), Vec::<String>::new());
    }

    #[test]
    fn out_of_service_needs_the_taint_and_a_node_not_ready() {
        let node = |taint: bool, ready: &str| -> Node {
            serde_json::from_value(json!({
                "metadata": {"name": "n"},
                "spec": {"taints": if taint { json!([{"key": OUT_OF_SERVICE, "value": "nodeshutdown", "effect": "NoExecute"}]) } else { json!([]) }},
                "status": {"conditions": [{"type": "Ready", "status": ready}]},
            }))
            .unwrap()
        };
        assert!(out_of_service(&node(true, "False")));
        assert!(out_of_service(&node(true, "Unknown")));
        assert!(!out_of_service(&node(true, "True")));
        assert!(!out_of_service(&node(false, "False")));
    }
}
