//! The pod workers' records (upstream `pkg/kubelet/pod_workers.go`): one per pod UID, the only
//! place the kubelet keeps what it knows of a pod — its latest spec from the API, where its
//! worker is in the pod's life, when it was first seen, whether it was admitted.
//!
//! A worker is **syncing** (the pod should run), then **terminating** (its containers are to
//! stop: deleted in the API, gone from it, replaced by a new pod under the same name, or the
//! agent stopping), then **terminated** (nothing of it runs; its record goes once the API no
//! longer has it). A UID never goes back to syncing: a pod deleted and created again under the
//! same name is a new UID, so a new worker, and the old one terminates its own sandbox.
//!
//! Each worker owns its pod's `PodRecord`: restart and pull back-offs, the events recorded, the
//! resources each container was last given. It is emptied when the worker finishes terminating
//! and goes with the worker.
//!
//! Everything here is pure bookkeeping: the agent calls these on watch events and in its
//! workers, and wakes the UIDs they return.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use k8s_cri::v1 as cri;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;

use crate::backoff::Backoff;

/// An Event the kubelet wrote: its name, its count, when it was last written.
#[derive(Clone, Debug)]
pub struct RecordedEvent {
    pub name: String,
    pub count: i32,
    pub at: Instant,
}

/// What the kubelet keeps of one pod besides its spec.
#[derive(Debug, Default)]
pub struct PodRecord {
    /// Restart back-off per `<pod uid>/<container>`, pull back-off per `<pod uid>/pull/<image>`.
    pub backoff: Backoff,
    /// Events recorded, by reason and message (repeats within a while are not written again).
    pub events: HashMap<(String, String), RecordedEvent>,
    /// What each container was last given (CRI resources), by container id: a difference
    /// from what the pod now asks is an in-place resize.
    pub applied: HashMap<String, cri::LinuxContainerResources>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WorkerState {
    Syncing,
    Terminating,
    Terminated,
}

#[derive(Clone, Debug)]
pub struct PodWorker {
    /// The pod as the API last showed it.
    pub pod: Arc<Pod>,
    pub state: WorkerState,
    /// Gone from the API (deleted, or replaced under its name): nothing is written for it any
    /// more, and its record goes once it is terminated.
    pub gone: bool,
    /// When this kubelet first saw the pod not yet running (for the start-up latency).
    pub first_seen: Option<Instant>,
    /// Kubelet admission ran and let it in.
    pub admitted: bool,
    pub record: Arc<Mutex<PodRecord>>,
}

#[derive(Default)]
pub struct PodWorkers {
    by_uid: HashMap<String, PodWorker>,
}

fn uid_of(pod: &Pod) -> String {
    pod.metadata.uid.clone().unwrap_or_default()
}

/// Whether two versions of a pod differ in nothing but status (and the fields every write
/// changes: resourceVersion, managedFields).
pub fn same_but_status(a: &Pod, b: &Pod) -> bool {
    let strip = |p: &Pod| {
        let mut m = p.metadata.clone();
        m.resource_version = None;
        m.managed_fields = None;
        (m, p.spec.clone())
    };
    a.metadata.uid == b.metadata.uid && strip(a) == strip(b)
}

/// Whether the conditions `b`'s readiness gates name differ from `a`'s.
fn gate_conditions_changed(a: &Pod, b: &Pod) -> bool {
    let gates: Vec<&str> = b
        .spec
        .iter()
        .flat_map(|s| s.readiness_gates.iter().flatten())
        .map(|g| g.condition_type.as_str())
        .collect();
    let of = |p: &Pod, t: &str| {
        p.status
            .iter()
            .flat_map(|s| s.conditions.iter().flatten())
            .find(|c| c.type_ == t)
            .map(|c| c.status.clone())
    };
    gates.iter().any(|t| of(a, t) != of(b, t))
}

impl PodWorkers {
    pub fn get(&self, uid: &str) -> Option<&PodWorker> {
        self.by_uid.get(uid)
    }

    pub fn get_mut(&mut self, uid: &str) -> Option<&mut PodWorker> {
        self.by_uid.get_mut(uid)
    }

    pub fn iter(&self) -> impl Iterator<Item = (&String, &PodWorker)> {
        self.by_uid.iter()
    }

    pub fn uids(&self) -> Vec<String> {
        self.by_uid.keys().cloned().collect()
    }

    /// The pod `namespace/name` as this node runs it: the syncing worker's, else the newest.
    pub fn by_name(&self, namespace: &str, name: &str) -> Option<Arc<Pod>> {
        let mut matching: Vec<&PodWorker> = self
            .by_uid
            .values()
            .filter(|w| w.pod.namespace().as_deref() == Some(namespace) && w.pod.name_any() == name)
            .collect();
        matching.sort_by_key(|w| (w.state == WorkerState::Syncing, w.pod.creation_timestamp()));
        matching.last().map(|w| w.pod.clone())
    }

    /// A pod from the API (added or changed). Returns the UIDs whose workers have work: this
    /// pod's unless only its status changed, and that of an older pod under the same name,
    /// which was deleted and replaced and now terminates.
    pub fn update(&mut self, pod: Pod, now: Instant) -> Vec<String> {
        let uid = uid_of(&pod);
        let mut wake = Vec::new();
        let (ns, name) = (pod.namespace(), pod.name_any());
        for (other, w) in self.by_uid.iter_mut() {
            if *other != uid && w.pod.namespace() == ns && w.pod.name_any() == name && !w.gone {
                w.gone = true;
                if w.state == WorkerState::Syncing {
                    w.state = WorkerState::Terminating;
                }
                wake.push(other.clone());
            }
        }
        let pod = Arc::new(pod);
        match self.by_uid.get_mut(&uid) {
            Some(w) => {
                // A status change matters too when it moves a readiness gate's condition (the
                // kubelet's Ready follows it; upstream's HandlePodReconcile).
                let only_status = same_but_status(&w.pod, &pod) && !gate_conditions_changed(&w.pod, &pod);
                w.pod = pod;
                if !only_status {
                    wake.push(uid);
                }
            }
            None => {
                let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref()).unwrap_or("");
                let not_running = phase.is_empty() || phase == "Pending";
                self.by_uid.insert(
                    uid.clone(),
                    PodWorker {
                        pod,
                        state: WorkerState::Syncing,
                        gone: false,
                        first_seen: not_running.then_some(now),
                        admitted: false,
                        record: Default::default(),
                    },
                );
                wake.push(uid);
            }
        }
        wake
    }

    /// The pod is gone from the API: its worker terminates (if it still runs anything); a
    /// terminated one's record goes now.
    pub fn delete(&mut self, uid: &str) -> Option<String> {
        let w = self.by_uid.get_mut(uid)?;
        w.gone = true;
        match w.state {
            WorkerState::Syncing => w.state = WorkerState::Terminating,
            WorkerState::Terminating => {}
            WorkerState::Terminated => {
                self.by_uid.remove(uid);
                return None;
            }
        }
        Some(uid.to_string())
    }

    /// After a full list: the pods not in it were deleted while the watch was away.
    pub fn retain_listed(&mut self, listed: &[String]) -> Vec<String> {
        let gone: Vec<String> = self
            .by_uid
            .keys()
            .filter(|u| !listed.contains(u))
            .cloned()
            .collect();
        gone.iter().filter_map(|u| self.delete(u)).collect()
    }

    /// The pod's worker is to stop its containers (the pod was deleted in the API, or the
    /// agent is stopping).
    pub fn terminate(&mut self, uid: &str) {
        if let Some(w) = self.by_uid.get_mut(uid) {
            if w.state == WorkerState::Syncing {
                w.state = WorkerState::Terminating;
            }
        }
    }

    /// Nothing of the pod runs any more. Its record goes if the API no longer has it; else it
    /// stays, terminated, until the API's deletion arrives.
    pub fn terminated(&mut self, uid: &str) {
        let gone = match self.by_uid.get_mut(uid) {
            Some(w) => {
                w.state = WorkerState::Terminated;
                *w.record.lock().unwrap() = PodRecord::default();
                w.gone
            }
            None => return,
        };
        if gone {
            self.by_uid.remove(uid);
        }
    }

    pub fn remove(&mut self, uid: &str) {
        self.by_uid.remove(uid);
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_readiness_gates_condition_change_wakes_the_worker() {
        let pod = |status: &str| -> Pod {
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": "p", "namespace": "d", "uid": "u"},
                "spec": {"containers": [], "readinessGates": [{"conditionType": "example.com/lb"}]},
                "status": {"conditions": [{"type": "example.com/lb", "status": status},
                    {"type": "Other", "status": status}]}
            }))
            .unwrap()
        };
        assert!(gate_conditions_changed(&pod("False"), &pod("True")));
        assert!(!gate_conditions_changed(&pod("True"), &pod("True")));
        let mut workers = PodWorkers::default();
        workers.update(pod("False"), Instant::now());
        assert_eq!(workers.update(pod("True"), Instant::now()), ["u"]);
        assert!(workers.update(pod("True"), Instant::now()).is_empty());
    }

    use super::*;
    use serde_json::json;

    fn pod(name: &str, uid: &str, image: &str) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "default", "uid": uid},
            "spec": {"containers": [{"name": "app", "image": image}]},
            "status": {"phase": "Pending"},
        }))
        .unwrap()
    }

    #[test]
    fn a_new_pod_syncs_and_a_status_change_alone_wakes_nobody() {
        let mut w = PodWorkers::default();
        let now = Instant::now();
        assert_eq!(w.update(pod("a", "u1", "busybox"), now), vec!["u1"]);
        assert_eq!(w.get("u1").unwrap().state, WorkerState::Syncing);
        assert_eq!(w.get("u1").unwrap().first_seen, Some(now));
        let mut running = pod("a", "u1", "busybox");
        running.status.as_mut().unwrap().phase = Some("Running".into());
        assert!(w.update(running, now).is_empty());
        assert_eq!(
            w.get("u1").unwrap().pod.status.as_ref().unwrap().phase.as_deref(),
            Some("Running")
        );
        assert_eq!(w.update(pod("a", "u1", "nginx"), now), vec!["u1"]);
    }

    #[test]
    fn a_pod_recreated_under_its_name_gets_a_new_worker_and_the_old_one_terminates() {
        let mut w = PodWorkers::default();
        let now = Instant::now();
        w.update(pod("a", "u1", "busybox"), now);
        // Force-deleted and created again: the watch may bring the new pod before (or
        // without) the old one's deletion.
        let mut woken = w.update(pod("a", "u2", "busybox"), now);
        woken.sort();
        assert_eq!(woken, vec!["u1", "u2"]);
        assert_eq!(w.get("u1").unwrap().state, WorkerState::Terminating);
        assert!(w.get("u1").unwrap().gone);
        assert_eq!(w.get("u2").unwrap().state, WorkerState::Syncing);
        assert_eq!(
            w.by_name("default", "a").unwrap().metadata.uid.as_deref(),
            Some("u2")
        );
        // The old one's deletion arriving late changes nothing more; once terminated it goes.
        assert_eq!(w.delete("u1"), Some("u1".to_string()));
        w.terminated("u1");
        assert!(w.get("u1").is_none());
        assert_eq!(w.get("u2").unwrap().state, WorkerState::Syncing);
    }

    #[test]
    fn terminating_never_goes_back_to_syncing() {
        let mut w = PodWorkers::default();
        let now = Instant::now();
        w.update(pod("a", "u1", "busybox"), now);
        w.terminate("u1");
        assert_eq!(w.update(pod("a", "u1", "nginx"), now), vec!["u1"]);
        assert_eq!(w.get("u1").unwrap().state, WorkerState::Terminating);
        // Still in the API (the agent stopping): terminated, and kept, its record emptied.
        w.get("u1")
            .unwrap()
            .record
            .lock()
            .unwrap()
            .backoff
            .next("u1/app", std::time::SystemTime::now());
        w.terminated("u1");
        assert!(w
            .get("u1")
            .unwrap()
            .record
            .lock()
            .unwrap()
            .backoff
            .delay("u1/app")
            .is_none());
        assert_eq!(w.get("u1").unwrap().state, WorkerState::Terminated);
        w.update(pod("a", "u1", "nginx:2"), now);
        assert_eq!(w.get("u1").unwrap().state, WorkerState::Terminated);
        // Its deletion then arrives: nothing left to do, the record goes.
        assert_eq!(w.delete("u1"), None);
        assert!(w.get("u1").is_none());
    }

    #[test]
    fn pods_missing_from_a_full_list_terminate() {
        let mut w = PodWorkers::default();
        let now = Instant::now();
        w.update(pod("a", "u1", "busybox"), now);
        w.update(pod("b", "u2", "busybox"), now);
        assert_eq!(w.retain_listed(&["u2".to_string()]), vec!["u1"]);
        assert_eq!(w.get("u1").unwrap().state, WorkerState::Terminating);
        assert_eq!(w.get("u2").unwrap().state, WorkerState::Syncing);
    }
}
