//! Node lifecycle (upstream `nodelifecycle` and the taint-eviction controller): every
//! `MONITOR_PERIOD` each node's last sign of life — its Lease in kube-node-lease or its Ready
//! heartbeat — is checked. What counts is when this controller saw one change, on its own
//! monotonic clock, never the time the kubelet wrote in it (upstream's `probeTimestamp`): a
//! node whose clock is behind is not judged silent while it renews, nor one whose clock is
//! ahead judged alive after it stops. A node silent for longer than the grace period gets its conditions set
//! to Unknown ("Kubelet stopped posting node status.") and the `node.kubernetes.io/unreachable`
//! taints; a node reporting Ready=False gets `node.kubernetes.io/not-ready`; a Ready node loses
//! both. Pods on a node with NoExecute taints they do not tolerate are deleted, at once or after
//! their toleration's `tolerationSeconds`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, NodeCondition, Pod, Taint, Toleration};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, DeleteParams, Patch};
use kube::runtime::reflector::Store;
use kube::{Client, ResourceExt};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use r8s_client::events::Events;
use r8s_client::informer::{lookup, Factory, Informer};

pub const MONITOR_PERIOD: Duration = Duration::from_secs(5);
pub const UNREACHABLE: &str = "node.kubernetes.io/unreachable";
pub const NOT_READY: &str = "node.kubernetes.io/not-ready";
pub const LEASE_NAMESPACE: &str = "kube-node-lease";

pub struct NodeLifecycleController {
    client: Client,
    nodes: Arc<Informer<Node>>,
    leases: Arc<Informer<Lease>>,
    pods: Arc<Informer<Pod>>,
    lease_store: Store<Lease>,
    events: Events,
    grace: Duration,
    health: Mutex<Health>,
}

pub use r8s_api::taints::tolerates;

/// What a node last showed of life: its Lease's resourceVersion and its Ready condition's
/// heartbeat, as written (compared for a change, whatever the clock that wrote them).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Heartbeat {
    pub lease: Option<String>,
    pub ready: Option<String>,
}

/// When each node's heartbeat last changed, on the controller's clock (upstream's
/// `nodeHealthMap` with its `probeTimestamp`). A node first seen counts as seen then: after
/// the controller starts (or takes the lead), every node has a whole grace period.
#[derive(Default)]
pub struct Health(HashMap<String, (Heartbeat, Instant)>);

impl Health {
    /// How long `node` has been silent at `now`, given what it shows now.
    pub fn silence(&mut self, node: &str, seen: Heartbeat, now: Instant) -> Duration {
        match self.0.get_mut(node) {
            Some((last, at)) if *last == seen => now.saturating_duration_since(*at),
            Some(entry) => {
                *entry = (seen, now);
                Duration::ZERO
            }
            None => {
                self.0.insert(node.to_string(), (seen, now));
                Duration::ZERO
            }
        }
    }

    /// Forget the nodes not in `names` (deleted).
    pub fn retain(&mut self, names: &[String]) {
        self.0.retain(|n, _| names.contains(n));
    }
}

/// When a pod on a node with these NoExecute taints must go: `Some(None)` now, `Some(Some(s))`
/// after `s` seconds from the taint, `None` never (tolerated forever or no such taint).
pub fn eviction_delay(
    tolerations: &[Toleration],
    taints: &[Taint],
) -> Option<Option<(i64, Option<jiff::Timestamp>)>> {
    let mut delay: Option<(i64, Option<jiff::Timestamp>)> = None;
    let mut any = false;
    for taint in taints.iter().filter(|t| t.effect == "NoExecute") {
        any = true;
        let matching: Vec<&Toleration> = tolerations.iter().filter(|t| tolerates(t, taint)).collect();
        if matching.is_empty() {
            return Some(None);
        }
        // The shortest limited toleration decides; unlimited ones never evict.
        let secs = matching.iter().filter_map(|t| t.toleration_seconds).min();
        if let Some(s) = secs {
            if matching.iter().all(|t| t.toleration_seconds.is_some()) {
                let added = taint.time_added.as_ref().map(|t| t.0);
                if delay.is_none_or(|(d, _)| s < d) {
                    delay = Some((s.max(0), added));
                }
            }
        }
    }
    if !any {
        return None;
    }
    delay.map(Some)
}

fn unknown(type_: &str, old: Option<&NodeCondition>, now: &Time) -> NodeCondition {
    NodeCondition {
        type_: type_.into(),
        status: "Unknown".into(),
        reason: Some("NodeStatusUnknown".into()),
        message: Some("Kubelet stopped posting node status.".into()),
        last_heartbeat_time: old.and_then(|c| c.last_heartbeat_time.clone()),
        last_transition_time: Some(now.clone()),
    }
}

impl NodeLifecycleController {
    pub fn new(factory: &Factory, events: Events, grace: Duration) -> Arc<Self> {
        let leases = factory.get::<Lease>();
        Arc::new(Self {
            client: factory.client(),
            nodes: factory.get::<Node>(),
            lease_store: leases.store(),
            leases,
            pods: factory.get::<Pod>(),
            events,
            grace,
            health: Mutex::default(),
        })
    }

    pub async fn run(self: Arc<Self>, stop: CancellationToken) {
        let synced = vec![
            self.nodes.clone().synced(),
            self.leases.clone().synced(),
            self.pods.clone().synced(),
        ];
        if !r8s_client::queue::wait_for_sync(synced, &stop).await {
            return;
        }
        // Give kubelets one grace period after a (re)start before judging them.
        let started = tokio::time::Instant::now();
        loop {
            if started.elapsed() >= self.grace.min(Duration::from_secs(5)) {
                if let Err(e) = self.monitor().await {
                    tracing::warn!(error = %e, "node lifecycle pass failed");
                }
            }
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(MONITOR_PERIOD) => {}
            }
        }
    }

    /// One pass over every node and the pods on tainted ones.
    pub async fn monitor(&self) -> Result<(), crate::Error> {
        let now = jiff::Timestamp::now();
        let api: Api<Node> = Api::all(self.client.clone());
        let nodes = self.nodes.store().state();
        self.health
            .lock()
            .unwrap()
            .retain(&nodes.iter().map(|n| n.name_any()).collect::<Vec<_>>());
        for node in nodes {
            let name = node.name_any();
            let status = node.status.clone().unwrap_or_default();
            let conditions = status.conditions.clone().unwrap_or_default();
            let ready = conditions.iter().find(|c| c.type_ == "Ready");
            let lease = lookup(&self.lease_store, &format!("{LEASE_NAMESPACE}/{name}"));
            let seen = Heartbeat {
                lease: lease.as_ref().and_then(|l| l.metadata.resource_version.clone()),
                ready: ready
                    .and_then(|c| c.last_heartbeat_time.as_ref())
                    .map(|t| t.0.to_string()),
            };
            let silence = self.health.lock().unwrap().silence(&name, seen, Instant::now());
            let silent = silence > self.grace;
            // A node that has not reported Ready yet is left alone until its grace period ends.
            let mut ready_status = ready.map(|c| c.status.clone());
            if silent && ready.is_none_or(|c| c.status != "Unknown") {
                let t = Time(now);
                let mut updated = (*node).clone();
                let mut new_conditions: Vec<NodeCondition> = Vec::new();
                for type_ in ["Ready", "MemoryPressure", "DiskPressure", "PIDPressure"] {
                    new_conditions.push(unknown(type_, conditions.iter().find(|c| c.type_ == type_), &t));
                }
                for c in &conditions {
                    if !new_conditions.iter().any(|n| n.type_ == c.type_) {
                        new_conditions.push(c.clone());
                    }
                }
                updated.status.get_or_insert_with(Default::default).conditions = Some(new_conditions);
                match api.replace_status(&name, &crate::post_params(), &updated).await {
                    Ok(_) => {
                        self.events.normal(
                            &*node,
                            "NodeNotReady",
                            format!("Node {name} status is now: NodeNotReady"),
                        );
                        ready_status = Some("Unknown".into());
                    }
                    Err(e) if r8s_client::is_not_found(&e) => continue,
                    Err(e) => return Err(e.into()),
                }
            }
            if let Some(ready) = ready_status {
                self.reconcile_taints(&api, &node, &ready).await?;
            }
        }
        self.evict(now).await
    }

    /// Taints follow the Ready condition.
    async fn reconcile_taints(&self, api: &Api<Node>, node: &Node, ready: &str) -> Result<(), crate::Error> {
        let want: &[&str] = match ready {
            "True" => &[],
            "False" => &[NOT_READY],
            _ => &[UNREACHABLE],
        };
        let current = node
            .spec
            .as_ref()
            .and_then(|s| s.taints.clone())
            .unwrap_or_default();
        let ours = |t: &Taint| t.key == UNREACHABLE || t.key == NOT_READY;
        let mut taints: Vec<Taint> = current
            .iter()
            .filter(|t| !ours(t) || want.contains(&t.key.as_str()))
            .cloned()
            .collect();
        for key in want {
            for effect in ["NoSchedule", "NoExecute"] {
                if !taints.iter().any(|t| t.key == *key && t.effect == effect) {
                    taints.push(Taint {
                        key: key.to_string(),
                        effect: effect.into(),
                        value: None,
                        time_added: (effect == "NoExecute").then(|| Time(jiff::Timestamp::now())),
                    });
                }
            }
        }
        if taints == current {
            return Ok(());
        }
        let patch = json!({
            "metadata": {"resourceVersion": node.resource_version()},
            "spec": {"taints": taints},
        });
        match api
            .patch(&node.name_any(), &crate::patch_params(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if r8s_client::is_not_found(&e) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(()), // next pass
            Err(e) => Err(e.into()),
        }
    }

    /// Delete pods that do not tolerate their node's NoExecute taints (any longer).
    async fn evict(&self, now: jiff::Timestamp) -> Result<(), crate::Error> {
        let node_store = self.nodes.store();
        for pod in self.pods.store().state() {
            if pod.metadata.deletion_timestamp.is_some() {
                continue;
            }
            let Some(node_name) = pod.spec.as_ref().and_then(|s| s.node_name.clone()) else {
                continue;
            };
            let Some(node) = lookup(&node_store, &node_name) else {
                continue;
            };
            let taints = node
                .spec
                .as_ref()
                .and_then(|s| s.taints.clone())
                .unwrap_or_default();
            let tolerations = pod
                .spec
                .as_ref()
                .and_then(|s| s.tolerations.clone())
                .unwrap_or_default();
            let due = match eviction_delay(&tolerations, &taints) {
                None => false,
                Some(None) => true,
                Some(Some((secs, added))) => {
                    let from = added.unwrap_or(now);
                    from.checked_add(jiff::SignedDuration::from_secs(secs))
                        .is_ok_and(|t| t <= now)
                }
            };
            if !due {
                continue;
            }
            let ns = pod.namespace().unwrap_or_default();
            let api: Api<Pod> = Api::namespaced(self.client.clone(), &ns);
            self.events.normal(
                &*pod,
                "TaintManagerEviction",
                format!("Marking for deletion Pod {ns}/{}", pod.name_any()),
            );
            match api.delete(&pod.name_any(), &DeleteParams::default()).await {
                Ok(_) => {}
                Err(e) if r8s_client::is_not_found(&e) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn taint(key: &str, effect: &str) -> Taint {
        Taint {
            key: key.into(),
            effect: effect.into(),
            value: None,
            time_added: None,
        }
    }

    fn toleration(key: &str, op: &str, effect: Option<&str>, secs: Option<i64>) -> Toleration {
        Toleration {
            key: Some(key.into()),
            operator: Some(op.into()),
            effect: effect.map(String::from),
            toleration_seconds: secs,
            value: None,
        }
    }

    #[test]
    fn toleration_matching() {
        let t = taint(UNREACHABLE, "NoExecute");
        assert!(tolerates(
            &toleration(UNREACHABLE, "Exists", Some("NoExecute"), None),
            &t
        ));
        assert!(tolerates(&toleration("", "Exists", None, None), &t));
        assert!(!tolerates(
            &toleration(UNREACHABLE, "Exists", Some("NoSchedule"), None),
            &t
        ));
        assert!(!tolerates(&toleration(NOT_READY, "Exists", None, None), &t));
    }

    fn beat(lease: &str, ready: &str) -> Heartbeat {
        Heartbeat {
            lease: Some(lease.into()),
            ready: Some(ready.into()),
        }
    }

    #[test]
    fn silence_counts_from_when_a_heartbeat_changed_on_the_controllers_clock() {
        let t0 = Instant::now();
        let s = |secs: u64| t0 + Duration::from_secs(secs);
        let mut h = Health::default();
        // First seen: a whole grace period from now, however old its timestamps read.
        assert_eq!(
            h.silence("a", beat("1", "2020-01-01T00:00:00Z"), s(0)),
            Duration::ZERO
        );
        assert_eq!(
            h.silence("a", beat("1", "2020-01-01T00:00:00Z"), s(30)),
            Duration::from_secs(30)
        );
        // A renewal (a new resourceVersion): alive now, whatever time the kubelet wrote.
        assert_eq!(
            h.silence("a", beat("7", "2020-01-01T00:00:00Z"), s(35)),
            Duration::ZERO
        );
        assert_eq!(
            h.silence("a", beat("7", "2020-01-01T00:00:00Z"), s(50)),
            Duration::from_secs(15)
        );
        // A heartbeat whose time went back (the node's clock jumped back) is a change too.
        assert_eq!(
            h.silence("a", beat("7", "2019-12-31T23:55:00Z"), s(55)),
            Duration::ZERO
        );
        // A node whose clock is ahead and then stops: silent from its last change, though the
        // time it wrote is in the future.
        assert_eq!(
            h.silence("b", beat("3", "2999-01-01T00:00:00Z"), s(55)),
            Duration::ZERO
        );
        assert_eq!(
            h.silence("b", beat("3", "2999-01-01T00:00:00Z"), s(96)),
            Duration::from_secs(41)
        );
        // A deleted node is forgotten; made again, it starts over.
        h.retain(&["b".to_string()]);
        assert_eq!(
            h.silence("a", beat("7", "2019-12-31T23:55:00Z"), s(100)),
            Duration::ZERO
        );
    }

    #[test]
    fn eviction_timing() {
        let taints = vec![taint(UNREACHABLE, "NoExecute"), taint(UNREACHABLE, "NoSchedule")];
        // No toleration: evicted now.
        assert_eq!(eviction_delay(&[], &taints), Some(None));
        // The default 300 s toleration that admission adds.
        let limited = [toleration(UNREACHABLE, "Exists", Some("NoExecute"), Some(300))];
        assert_eq!(eviction_delay(&limited, &taints), Some(Some((300, None))));
        // Tolerated forever.
        let forever = [toleration(UNREACHABLE, "Exists", Some("NoExecute"), None)];
        assert_eq!(eviction_delay(&forever, &taints), None);
        // No NoExecute taint: nothing to do.
        assert_eq!(eviction_delay(&[], &[taint(UNREACHABLE, "NoSchedule")]), None);
    }
}
