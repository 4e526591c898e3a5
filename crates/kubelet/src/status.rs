//! The status manager (upstream `pkg/kubelet/status`): pod workers hand it the status they
//! computed and go on; it writes to the API server in the background.
//!
//! - `set` records the new status fields (a merge patch of `status`) and wakes the writer; a
//!   pod whose earlier status is still unwritten gets one write with both merged.
//! - The writer patches `pods/<name>/status` with the pod's uid in the patch, so a pod deleted
//!   and created again under the same name is never given the old pod's status (the API server
//!   refuses a uid that is not the stored one). It retries failed writes, and also writes
//!   every `RESYNC` in case a write was lost.
//! - `status` answers what the kubelet last said of a pod even before its informer has seen
//!   the write: pod workers compute the next status from it, so fields that must not change
//!   (startTime, a condition's lastTransitionTime) do not change when the watch lags.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Pod, PodStatus};
use kube::api::{Api, Patch, PatchParams};
use kube::{Client, ResourceExt};
use serde_json::{json, Value};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// How often the writer wakes without being asked.
const RESYNC: Duration = Duration::from_secs(10);
/// How long a failed write waits before it is tried again.
const RETRY: Duration = Duration::from_secs(1);
/// Status writes in flight at once.
const PARALLEL_WRITES: usize = 8;

pub struct StatusManager {
    client: Client,
    field_manager: String,
    pods: Mutex<HashMap<String, Entry>>,
    wake: Notify,
}

#[derive(Clone)]
struct Entry {
    namespace: String,
    name: String,
    /// The pod's status as the kubelet knows it: the API's as last read or written back, with
    /// every status set since on top.
    status: Value,
    /// What is not yet written: every `set` since the last successful write, merged.
    pending: Option<Value>,
    /// Counts the sets, so a write that raced a newer set keeps that one pending.
    generation: u64,
    /// The resourceVersion our last write produced: an informer's copy older than it does not
    /// know our status yet.
    written_rv: u64,
}

/// One write to make: the entry's identity and what to send.
struct Write {
    uid: String,
    namespace: String,
    name: String,
    patch: Value,
    generation: u64,
}

/// What a status write says of the pod, in a few words: its phase, its conditions, its
/// address, its containers' states.
fn told(patch: &Value) -> String {
    let status = &patch["status"];
    let mut parts = Vec::new();
    if let Some(phase) = status["phase"].as_str() {
        parts.push(format!("phase {phase}"));
    }
    for c in status["conditions"].as_array().into_iter().flatten() {
        if let (Some(t), Some(v)) = (c["type"].as_str(), c["status"].as_str()) {
            parts.push(format!("{t}={v}"));
        }
    }
    if let Some(ip) = status["podIP"].as_str() {
        parts.push(format!("podIP {ip}"));
    }
    for c in status["containerStatuses"].as_array().into_iter().flatten() {
        let state = c["state"].as_object().and_then(|s| s.keys().next().cloned());
        if let (Some(name), Some(state)) = (c["name"].as_str(), state) {
            parts.push(format!("{name} {state}"));
        }
    }
    if parts.is_empty() {
        "status written".into()
    } else {
        parts.join(", ")
    }
}

impl Entry {
    /// The write of what is pending for pod `uid`, if anything.
    fn pending_write(&self, uid: &str) -> Option<Write> {
        self.pending.as_ref().map(|p| Write {
            uid: uid.to_string(),
            namespace: self.namespace.clone(),
            name: self.name.clone(),
            patch: json!({"metadata": {"uid": uid}, "status": p}),
            generation: self.generation,
        })
    }
}

impl StatusManager {
    pub fn new(client: Client, field_manager: &str) -> Arc<Self> {
        Arc::new(StatusManager {
            client,
            field_manager: field_manager.to_string(),
            pods: Mutex::new(HashMap::new()),
            wake: Notify::new(),
        })
    }

    /// The newest status the kubelet knows for `pod`: its own (set or written) while the
    /// informer's copy has not caught up with it, else the informer's.
    pub fn status(&self, pod: &Pod) -> PodStatus {
        let api = pod.status.clone().unwrap_or_default();
        let Some(uid) = pod.metadata.uid.as_deref() else {
            return api;
        };
        let mut pods = self.pods.lock().unwrap();
        let Some(e) = pods.get_mut(uid) else {
            return api;
        };
        if e.pending.is_none() && resource_version(pod) >= e.written_rv {
            // The informer has seen our last write (and maybe others' since): it is the truth.
            e.status = serde_json::to_value(&api).unwrap_or_else(|_| json!({}));
            return api;
        }
        serde_json::from_value(e.status.clone()).unwrap_or(api)
    }

    /// Record `fields` (the `status` of a merge patch) as the pod's new status and wake the
    /// writer. Fields equal to what is already known are not written again.
    pub fn set(&self, pod: &Pod, fields: Value) {
        let Some(uid) = pod.metadata.uid.clone() else {
            return;
        };
        let current = self.status(pod);
        let mut pods = self.pods.lock().unwrap();
        let e = pods.entry(uid).or_insert_with(|| Entry {
            namespace: pod.namespace().unwrap_or_default(),
            name: pod.name_any(),
            status: serde_json::to_value(&current).unwrap_or_else(|_| json!({})),
            pending: None,
            generation: 0,
            written_rv: 0,
        });
        let mut next = e.status.clone();
        merge(&mut next, &fields);
        if next == e.status {
            return;
        }
        e.status = next;
        match &mut e.pending {
            Some(p) => merge(p, &fields),
            None => e.pending = Some(fields),
        }
        e.generation += 1;
        drop(pods);
        self.wake.notify_one();
    }

    /// Forget a pod that is gone: nothing of it is written any more.
    pub fn forget(&self, uid: &str) {
        self.pods.lock().unwrap().remove(uid);
    }

    /// Whether a status for `uid` waits to be written.
    pub fn pending(&self, uid: &str) -> bool {
        self.pods
            .lock()
            .unwrap()
            .get(uid)
            .is_some_and(|e| e.pending.is_some())
    }

    /// Write what is pending until `stop`, then once more.
    pub async fn run(self: Arc<Self>, stop: CancellationToken) {
        loop {
            tokio::select! {
                _ = self.wake.notified() => {}
                _ = tokio::time::sleep(RESYNC) => {}
                _ = stop.cancelled() => {
                    self.flush().await;
                    return;
                }
            }
            if !self.flush().await {
                // Something failed: try again soon (a set meanwhile wakes the writer sooner).
                tokio::select! {
                    _ = tokio::time::sleep(RETRY) => {}
                    _ = stop.cancelled() => {}
                }
                self.wake.notify_one();
            }
        }
    }

    /// Write every pending status; false if some write failed.
    pub async fn flush(&self) -> bool {
        let writes: Vec<Write> = self
            .pods
            .lock()
            .unwrap()
            .iter()
            .filter_map(|(uid, e)| e.pending_write(uid))
            .collect();
        let results: Vec<bool> = futures::stream::iter(writes)
            .map(|w| self.write(w))
            .buffer_unordered(PARALLEL_WRITES)
            .collect()
            .await;
        results.into_iter().all(|ok| ok)
    }

    /// Write pod `uid`'s pending status now (the kubelet's final status, before its delete);
    /// false if it could not be written.
    pub async fn flush_pod(&self, uid: &str) -> bool {
        let write = self
            .pods
            .lock()
            .unwrap()
            .get(uid)
            .and_then(|e| e.pending_write(uid));
        match write {
            Some(w) => self.write(w).await,
            None => true,
        }
    }

    async fn write(&self, w: Write) -> bool {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &w.namespace);
        let pp = PatchParams {
            field_manager: Some(self.field_manager.clone()),
            ..Default::default()
        };
        // The journey's `kubelet.status` stage (`r8s trace`): what the pod is now.
        let stage = tracing::info_span!(
            target: "journey::kubelet",
            "kubelet.status",
            uid = %w.uid,
            object = %format_args!("Pod {}/{}", w.namespace, w.name),
            decision = %told(&w.patch),
            error = tracing::field::Empty,
        );
        let result = tracing::Instrument::instrument(
            api.patch_status(&w.name, &pp, &Patch::Merge(&w.patch)),
            stage.clone(),
        )
        .await;
        if let Err(e) = &result {
            stage.record("error", tracing::field::display(e));
        }
        drop(stage);
        let mut pods = self.pods.lock().unwrap();
        match result {
            Ok(written) => {
                if let Some(e) = pods.get_mut(&w.uid) {
                    e.written_rv = resource_version(&written);
                    let mut status = serde_json::to_value(written.status.unwrap_or_default())
                        .unwrap_or_else(|_| json!({}));
                    if e.generation == w.generation {
                        e.pending = None;
                    } else if let Some(p) = &e.pending {
                        // Set again while this write was under way: the newer fields stay
                        // pending, on top of what the API server now holds.
                        merge(&mut status, p);
                    }
                    e.status = status;
                }
                true
            }
            Err(kube::Error::Api(s))
                if s.code == 404 || (s.code == 422 && s.message.contains("metadata.uid")) =>
            {
                // The pod is gone, or its name now belongs to another pod.
                tracing::debug!(pod = %w.name, "status: pod gone, its status is dropped");
                pods.remove(&w.uid);
                true
            }
            Err(e) => {
                tracing::warn!(pod = %format!("{}/{}", w.namespace, w.name), error = %e, "status: could not write the pod's status");
                false
            }
        }
    }
}

fn resource_version(pod: &Pod) -> u64 {
    pod.metadata
        .resource_version
        .as_deref()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// RFC 7386 JSON merge patch: what the API server does with a merge patch.
fn merge(target: &mut Value, patch: &Value) {
    match patch {
        Value::Object(p) => {
            if !target.is_object() {
                *target = json!({});
            }
            let t = target.as_object_mut().expect("an object");
            for (k, v) in p {
                if v.is_null() {
                    t.remove(k);
                } else {
                    merge(t.entry(k.clone()).or_insert(Value::Null), v);
                }
            }
        }
        other => *target = other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(uid: &str, rv: &str, phase: &str) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "default", "uid": uid, "resourceVersion": rv},
            "status": {"phase": phase, "startTime": "2026-11-24T10:00:00Z"}
        }))
        .unwrap()
    }

    /// A client that is never used: these tests do not write.
    fn manager() -> Arc<StatusManager> {
        let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
        StatusManager::new(Client::try_from(config).unwrap(), "kubelet")
    }

    #[test]
    fn merge_is_rfc7386() {
        let mut t = json!({"a": 1, "b": {"c": 2, "d": 3}, "l": [1, 2]});
        merge(&mut t, &json!({"b": {"c": null, "e": 4}, "l": [3], "f": "x"}));
        assert_eq!(t, json!({"a": 1, "b": {"d": 3, "e": 4}, "l": [3], "f": "x"}));
    }

    #[tokio::test]
    async fn set_status_is_seen_before_the_informer_catches_up() {
        let m = manager();
        let p = pod("u1", "5", "Pending");
        m.set(&p, json!({"phase": "Running", "podIP": "10.0.0.2"}));
        assert!(m.pending("u1"));
        // The informer still has the old copy: the kubelet's own word wins, and what it did not
        // set (startTime) is kept.
        let s = m.status(&p);
        assert_eq!(s.phase.as_deref(), Some("Running"));
        assert_eq!(s.pod_ip.as_deref(), Some("10.0.0.2"));
        assert!(s.start_time.is_some());
        // A second set before any write merges into the same pending write.
        m.set(&p, json!({"phase": "Succeeded"}));
        let pending = m.pods.lock().unwrap()["u1"].pending.clone().unwrap();
        assert_eq!(pending, json!({"phase": "Succeeded", "podIP": "10.0.0.2"}));
    }

    #[tokio::test]
    async fn the_informer_wins_once_it_has_seen_the_write() {
        let m = manager();
        let p = pod("u1", "5", "Pending");
        m.set(&p, json!({"phase": "Running"}));
        {
            let mut pods = m.pods.lock().unwrap();
            let e = pods.get_mut("u1").unwrap();
            e.pending = None;
            e.written_rv = 7;
        }
        // Older than our write: still ours.
        assert_eq!(
            m.status(&pod("u1", "6", "Pending")).phase.as_deref(),
            Some("Running")
        );
        // As new as our write or newer: the informer's.
        assert_eq!(
            m.status(&pod("u1", "8", "Failed")).phase.as_deref(),
            Some("Failed")
        );
        // Setting what is already known writes nothing.
        m.set(&pod("u1", "8", "Failed"), json!({"phase": "Failed"}));
        assert!(!m.pending("u1"));
        m.forget("u1");
        assert_eq!(
            m.status(&pod("u1", "1", "Pending")).phase.as_deref(),
            Some("Pending")
        );
    }
}
