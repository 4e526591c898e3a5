//! The pod lifecycle event generator (upstream's generic PLEG): the runtime is relisted —
//! one ListPodSandbox and one ListContainers — and compared with the previous listing; only the
//! pods whose sandboxes or containers changed (started, exited, appeared, went away) have their
//! workers woken. A relist is how a container's exit is noticed; it costs two calls whatever
//! the number of pods, and no pod is synced because of it unless something of it changed. When
//! the runtime reports its changes (`runtime_events`: CRI's container events, or containerd's
//! task events), a relist follows each report and the every-second relist becomes a
//! once-a-minute safety net.

use std::collections::{BTreeMap, HashMap};

use k8s_cri::v1 as cri;

use crate::spec;

/// What the runtime runs for one pod: its sandboxes' and containers' states, by id.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PodRecord {
    pub namespace: String,
    pub name: String,
    sandboxes: BTreeMap<String, i32>,
    containers: BTreeMap<String, i32>,
}

/// A relisting, by pod uid.
pub type Snapshot = HashMap<String, PodRecord>;

/// The runtime's sandboxes and containers, grouped by pod uid (a container belongs to the pod
/// of its sandbox).
pub fn snapshot(sandboxes: &[cri::PodSandbox], containers: &[cri::Container]) -> Snapshot {
    let mut pods = Snapshot::new();
    let mut sandbox_pod = HashMap::new();
    for sb in sandboxes {
        let label = |k: &str| sb.labels.get(k).cloned().unwrap_or_default();
        let uid = label(spec::POD_UID);
        let rec = pods.entry(uid.clone()).or_insert_with(|| PodRecord {
            namespace: label(spec::POD_NAMESPACE),
            name: label(spec::POD_NAME),
            ..Default::default()
        });
        rec.sandboxes.insert(sb.id.clone(), sb.state);
        sandbox_pod.insert(sb.id.clone(), uid);
    }
    for c in containers {
        let Some(uid) = sandbox_pod.get(&c.pod_sandbox_id) else {
            continue;
        };
        if let Some(rec) = pods.get_mut(uid) {
            rec.containers.insert(c.id.clone(), c.state);
        }
    }
    pods
}

/// The pods (uid and record) whose runtime state differs between two relistings, with the
/// record they were last seen with.
pub fn changed<'a>(old: &'a Snapshot, new: &'a Snapshot) -> Vec<(&'a str, &'a PodRecord)> {
    let mut out: Vec<(&str, &PodRecord)> = new
        .iter()
        .filter(|(uid, rec)| old.get(*uid) != Some(*rec))
        .map(|(uid, rec)| (uid.as_str(), rec))
        .collect();
    out.extend(
        old.iter()
            .filter(|(uid, _)| !new.contains_key(*uid))
            .map(|(uid, rec)| (uid.as_str(), rec)),
    );
    out.sort_by_key(|(uid, _)| *uid);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sandbox(id: &str, uid: &str, name: &str, state: cri::PodSandboxState) -> cri::PodSandbox {
        cri::PodSandbox {
            id: id.into(),
            state: state as i32,
            labels: [
                (spec::POD_UID.to_string(), uid.to_string()),
                (spec::POD_NAME.to_string(), name.to_string()),
                (spec::POD_NAMESPACE.to_string(), "default".to_string()),
            ]
            .into(),
            ..Default::default()
        }
    }

    fn container(id: &str, sandbox: &str, state: cri::ContainerState) -> cri::Container {
        cri::Container {
            id: id.into(),
            pod_sandbox_id: sandbox.into(),
            state: state as i32,
            ..Default::default()
        }
    }

    #[test]
    fn only_pods_whose_runtime_state_changed_are_woken() {
        use cri::ContainerState::*;
        use cri::PodSandboxState::*;
        let sbs = vec![
            sandbox("s1", "u1", "a", SandboxReady),
            sandbox("s2", "u2", "b", SandboxReady),
            sandbox("s3", "u3", "c", SandboxReady),
        ];
        let before = snapshot(
            &sbs,
            &[
                container("c1", "s1", ContainerRunning),
                container("c2", "s2", ContainerRunning),
                container("c3", "s3", ContainerRunning),
            ],
        );
        assert!(changed(&before, &before).is_empty());
        // a's container exited, b's is unchanged, c is gone, d appeared.
        let after = snapshot(
            &[
                sandbox("s1", "u1", "a", SandboxReady),
                sandbox("s2", "u2", "b", SandboxReady),
                sandbox("s4", "u4", "d", SandboxNotready),
            ],
            &[
                container("c1", "s1", ContainerExited),
                container("c2", "s2", ContainerRunning),
                container("stray", "nowhere", ContainerRunning),
            ],
        );
        let names: Vec<(&str, &str)> = changed(&before, &after)
            .into_iter()
            .map(|(uid, rec)| (uid, rec.name.as_str()))
            .collect();
        assert_eq!(names, vec![("u1", "a"), ("u3", "c"), ("u4", "d")]);
    }
}
