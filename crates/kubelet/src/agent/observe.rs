//! A pod's container statuses, built by pure functions from one reading of the runtime taken
//! after the sync's actions (`RuntimeView`): the sandbox's containers, the CRI status of each
//! instance the statuses name, the termination messages of those that exited, and which probes
//! have succeeded. The reading is the only I/O; what the statuses say follows from it alone
//! (upstream's `generateAPIPodStatus` over one `PodStatus` from the runtime cache).

use std::collections::{HashMap, HashSet};

use k8s_cri::v1 as cri;
use k8s_openapi::api::core::v1::{
    Container, ContainerState, ContainerStateRunning, ContainerStateTerminated, ContainerStateWaiting,
    ContainerStatus, Pod,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::{pod_initializing, terminated_reason, Agent, Observed};
use crate::actions::{ContainerPlan, PodActions};
use crate::prober::Kind;
use crate::Error;

/// What the runtime runs of one pod's sandbox, read once.
#[derive(Debug, Default)]
pub(crate) struct RuntimeView {
    /// The sandbox's containers, every instance.
    pub containers: Vec<cri::Container>,
    /// The CRI status of the instances the statuses need, by id: each container's newest, and
    /// the runs whose end is a lastState.
    pub statuses: HashMap<String, cri::ContainerStatus>,
    /// The termination message of each exited instance that has one, by id.
    pub messages: HashMap<String, String>,
    /// The probes that have succeeded, by instance id.
    pub probes_ok: HashSet<(String, Kind)>,
}

impl RuntimeView {
    /// The newest instance of container `name`.
    fn latest(&self, name: &str) -> Option<&cri::Container> {
        self.containers
            .iter()
            .filter(|x| x.metadata.as_ref().is_some_and(|m| m.name == name))
            .max_by_key(|x| x.metadata.as_ref().map(|m| m.attempt).unwrap_or(0))
    }

    fn probe_ok(&self, id: &str, kind: Kind) -> bool {
        self.probes_ok.contains(&(id.to_string(), kind))
    }

    /// How the instance `cs` ended, if it has.
    fn terminated(&self, cs: &cri::ContainerStatus) -> Option<ContainerStateTerminated> {
        (cs.state == cri::ContainerState::ContainerExited as i32).then(|| ContainerStateTerminated {
            exit_code: cs.exit_code,
            reason: Some(terminated_reason(cs)),
            message: self.messages.get(&cs.id).cloned(),
            started_at: Some(time(cs.started_at)),
            finished_at: Some(time(cs.finished_at)),
            container_id: Some(format!("containerd://{}", cs.id)),
            ..Default::default()
        })
    }
}

fn time(nanos: i64) -> Time {
    Time(jiff::Timestamp::from_nanosecond(nanos as i128).unwrap_or(jiff::Timestamp::UNIX_EPOCH))
}

fn waiting_state(reason: &str, message: Option<String>) -> ContainerState {
    ContainerState {
        waiting: Some(ContainerStateWaiting {
            reason: Some(reason.into()),
            message,
        }),
        ..Default::default()
    }
}

/// Container `c`'s status: `waiting` (reason, message) when the sync could not start it, else
/// what its newest instance is doing; started and ready only once its startup and readiness
/// probes (if it has them) have succeeded.
pub(crate) fn container_status(
    c: &Container,
    view: &RuntimeView,
    waiting: Option<(String, String)>,
) -> ContainerStatus {
    let mut status = ContainerStatus {
        name: c.name.clone(),
        image: c.image.clone().unwrap_or_default(),
        ..Default::default()
    };
    if let Some((reason, message)) = waiting {
        status.state = Some(waiting_state(&reason, Some(message)));
        return status;
    }
    let Some(cs) = view.latest(&c.name).and_then(|l| view.statuses.get(&l.id)) else {
        status.state = Some(waiting_state("ContainerCreating", None));
        return status;
    };
    status.container_id = Some(format!("containerd://{}", cs.id));
    status.image_id = cs.image_ref.clone();
    status.restart_count = cs.metadata.as_ref().map(|m| m.attempt as i32).unwrap_or(0);
    let running = cs.state == cri::ContainerState::ContainerRunning as i32;
    // With a probe, only its success counts (before its worker runs there is none).
    let started = running && (c.startup_probe.is_none() || view.probe_ok(&cs.id, Kind::Startup));
    status.started = Some(started);
    status.ready = started && (c.readiness_probe.is_none() || view.probe_ok(&cs.id, Kind::Readiness));
    status.state = Some(if running {
        ContainerState {
            running: Some(ContainerStateRunning {
                started_at: Some(time(cs.started_at)),
            }),
            ..Default::default()
        }
    } else if let Some(t) = view.terminated(cs) {
        ContainerState {
            terminated: Some(t),
            ..Default::default()
        }
    } else {
        waiting_state("ContainerCreating", None)
    });
    status
}

/// The container's last state (the run before this one) and its restart count.
fn last_run(plan: &ContainerPlan, view: &RuntimeView, status: &mut ContainerStatus) {
    if let Some(prev) = &plan.previous {
        if let Some(term) = view.statuses.get(prev).and_then(|cs| view.terminated(cs)) {
            status.last_state = Some(ContainerState {
                terminated: Some(term),
                ..Default::default()
            });
        }
        status.restart_count = plan.restarts as i32 + i32::from(plan.start.is_some());
    }
}

/// The statuses of every container of `pod` after a sync that carried out `actions`
/// (`waiting`: the containers it could not start, by name), and whether the pod is
/// initialized. Before it is, the app containers wait for the init containers.
pub(crate) fn observe(
    pod: &Pod,
    actions: &PodActions,
    view: &RuntimeView,
    waiting: &HashMap<String, (String, String)>,
    pod_ips: Vec<String>,
) -> Observed {
    let spec = pod.spec.clone().unwrap_or_default();
    let waiting = |name: &str| waiting.get(name).cloned();
    // The init containers' statuses, up to the one the pod waits for.
    let mut init_statuses = Vec::new();
    for plan in &actions.init {
        let Some(c) = spec
            .init_containers
            .iter()
            .flatten()
            .find(|c| c.name == plan.name)
        else {
            continue;
        };
        let mut st = container_status(c, view, waiting(&c.name));
        if !plan.sidecar {
            st.ready = plan.done;
        }
        last_run(plan, view, &mut st);
        init_statuses.push(st);
    }
    // Those not reached yet wait for the ones before them (upstream lists them all).
    for c in spec.init_containers.iter().flatten().skip(actions.init.len()) {
        init_statuses.push(pod_initializing(c));
    }
    let ephemeral_statuses = actions
        .ephemeral
        .iter()
        .filter_map(|plan| crate::pod_sync::ephemeral_container(pod, &plan.name))
        .map(|c| ContainerStatus {
            ready: false,
            restart_count: 0,
            ..container_status(&c, view, waiting(&c.name))
        })
        .collect();
    let statuses = if actions.initialized {
        spec.containers
            .iter()
            .zip(&actions.containers)
            .map(|(c, plan)| {
                let mut st = container_status(c, view, waiting(&c.name));
                last_run(plan, view, &mut st);
                st
            })
            .collect()
    } else {
        spec.containers.iter().map(pod_initializing).collect()
    };
    Observed {
        pod_ips,
        statuses,
        init_statuses,
        ephemeral_statuses,
        initialized: actions.initialized,
        failed: None,
        terminal: false,
        resize_pending: None,
    }
}

/// The instance a status shows as running now, with when it started.
pub(crate) fn running_instance(status: &ContainerStatus) -> Option<(&str, std::time::SystemTime)> {
    let at = status.state.as_ref()?.running.as_ref()?.started_at.as_ref()?;
    let id = status
        .container_id
        .as_deref()?
        .trim_start_matches("containerd://");
    Some((id, std::time::SystemTime::from(at.0)))
}

impl Agent {
    /// Read what the runtime runs in `sandbox_id` for pod `pod` (uid `uid`) once: its
    /// containers, the status of each one's newest instance and of the `previous` runs, the
    /// messages of those that exited, and their probes' successes.
    pub(crate) async fn runtime_view(
        &self,
        pod: &Pod,
        uid: &str,
        sandbox_id: &str,
        previous: &[&str],
    ) -> Result<RuntimeView, Error> {
        let mut view = RuntimeView {
            containers: self.runtime.list_containers(Some(sandbox_id)).await?,
            ..Default::default()
        };
        let specs = all_containers(pod);
        let mut ids: Vec<String> = specs
            .iter()
            .filter_map(|c| view.latest(&c.name).map(|l| l.id.clone()))
            .collect();
        ids.extend(previous.iter().map(|p| p.to_string()));
        ids.sort();
        ids.dedup();
        for id in ids {
            let Some(cs) = self.runtime.container_status(&id).await? else {
                continue;
            };
            let name = cs.metadata.as_ref().map(|m| m.name.clone()).unwrap_or_default();
            let c = specs.iter().find(|c| c.name == name);
            if let Some(c) = c {
                if cs.state == cri::ContainerState::ContainerExited as i32 {
                    if let Some(m) = self.termination_message(&cs, c) {
                        view.messages.insert(id.clone(), m);
                    }
                }
                for kind in [Kind::Startup, Kind::Readiness] {
                    if self.probes.probe_succeeded(uid, &c.name, &id, kind) {
                        view.probes_ok.insert((id.clone(), kind));
                    }
                }
            }
            view.statuses.insert(id, cs);
        }
        Ok(view)
    }
}

/// Every container of the pod, init and ephemeral ones too (as `Container`s).
fn all_containers(pod: &Pod) -> Vec<Container> {
    let spec = pod.spec.clone().unwrap_or_default();
    let mut all: Vec<Container> = spec.init_containers.clone().unwrap_or_default();
    all.extend(spec.containers.iter().cloned());
    all.extend(
        spec.ephemeral_containers
            .iter()
            .flatten()
            .filter_map(|e| crate::pod_sync::ephemeral_container(pod, &e.name)),
    );
    all
}

/// Entry point for the fuzz target `cri_results` in `fuzz/` (not an API): what the runtime
/// answers over CRI for one pod — its sandboxes, the sandbox's status with the addresses CNI
/// gave it, its containers and their statuses — read as the protobuf they arrive as, then made
/// into the pod's runtime snapshot, the sync's actions, the container statuses, the phase and
/// the pod IPs. No answer may panic the kubelet. Input: byte 0 picks the pod's shape (restart
/// policy, probes, a second container, init containers, a sidecar), then length-delimited
/// messages: `ListPodSandboxResponse`, `PodSandboxStatus`, `ListContainersResponse`, then any
/// number of `ContainerStatus`.
pub fn fuzz_cri_results(data: &[u8]) {
    use prost::Message;
    let Some((&shape, mut rest)) = data.split_first() else {
        return;
    };
    let Ok(sandboxes) = cri::ListPodSandboxResponse::decode_length_delimited(&mut rest) else {
        return;
    };
    let Ok(sandbox_status) = cri::PodSandboxStatus::decode_length_delimited(&mut rest) else {
        return;
    };
    let Ok(list) = cri::ListContainersResponse::decode_length_delimited(&mut rest) else {
        return;
    };
    let mut statuses = HashMap::new();
    while !rest.is_empty() {
        match cri::ContainerStatus::decode_length_delimited(&mut rest) {
            Ok(s) => statuses.insert(s.id.clone(), s),
            Err(_) => return,
        };
    }

    let pod = fuzz_pod(shape);
    let mut snapshot = crate::actions::PodRuntime::default();
    for sb in &sandboxes.items {
        for c in list.containers.iter().filter(|c| c.pod_sandbox_id == sb.id) {
            snapshot
                .containers
                .push(crate::runtime::runtime_container(&sb.id, c, statuses.get(&c.id)));
        }
        snapshot.sandboxes.push(crate::runtime::sandbox(sb));
    }
    let failed_probes = HashMap::new();
    let mut backoff = crate::backoff::Backoff::default();
    let actions = crate::actions::compute_pod_actions(
        &pod,
        &snapshot,
        &mut crate::actions::Context {
            failed_probes: &failed_probes,
            backoff: &mut backoff,
            now: std::time::SystemTime::now(),
        },
    );
    let view = RuntimeView {
        containers: list.containers,
        messages: statuses
            .iter()
            .map(|(id, s)| (id.clone(), s.message.clone()))
            .collect(),
        statuses,
        probes_ok: HashSet::new(),
    };
    let ips = crate::runtime::sandbox_ips(sandbox_status.network.as_ref());
    let observed = observe(&pod, &actions, &view, &HashMap::new(), ips);
    for ip in crate::runtime::status_pod_ips(&observed.pod_ips, shape & 1 == 1) {
        assert!(ip.parse::<std::net::IpAddr>().is_ok(), "{ip}");
    }
    let restart = pod
        .spec
        .as_ref()
        .and_then(|s| s.restart_policy.as_deref())
        .unwrap_or("Always");
    let _ = super::pod_phase(&observed.statuses, restart);
    let _ = super::terminal_phase(&observed.statuses);
    // The statuses go to the API server as JSON.
    serde_json::to_vec(&observed.statuses).expect("container statuses serialize");
}

/// The pod of shape `shape` (see [`fuzz_cri_results`]).
fn fuzz_pod(shape: u8) -> Pod {
    let probe = serde_json::json!({"exec": {"command": ["true"]}});
    let mut app = serde_json::json!({"name": "app", "image": "app"});
    if shape & 4 != 0 {
        app["readinessProbe"] = probe.clone();
    }
    if shape & 8 != 0 {
        app["startupProbe"] = probe.clone();
    }
    let mut containers = vec![app];
    if shape & 16 != 0 {
        containers.push(serde_json::json!({"name": "second", "image": "second"}));
    }
    let mut inits = Vec::new();
    if shape & 32 != 0 {
        inits.push(serde_json::json!({"name": "init", "image": "init"}));
    }
    if shape & 64 != 0 {
        inits.push(serde_json::json!({"name": "sidecar", "image": "sidecar", "restartPolicy": "Always"}));
    }
    let restart = ["Always", "OnFailure", "Never"][usize::from(shape >> 1 & 3) % 3];
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": "p", "namespace": "default", "uid": "u"},
        "spec": {"containers": containers, "initContainers": inits, "restartPolicy": restart},
    }))
    .expect("a valid pod")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The cri_results fuzz corpus (and every input it once crashed on) goes through again.
    #[test]
    fn the_cri_results_corpus_replays_without_a_panic() {
        assert!(r8s_api::fuzzing::replay("cri_results", fuzz_cri_results) >= 4);
    }

    fn cri_container(id: &str, name: &str, attempt: u32) -> cri::Container {
        cri::Container {
            id: id.into(),
            metadata: Some(cri::ContainerMetadata {
                name: name.into(),
                attempt,
            }),
            ..Default::default()
        }
    }

    fn cri_status(
        id: &str,
        name: &str,
        attempt: u32,
        state: cri::ContainerState,
        exit: i32,
    ) -> cri::ContainerStatus {
        cri::ContainerStatus {
            id: id.into(),
            metadata: Some(cri::ContainerMetadata {
                name: name.into(),
                attempt,
            }),
            state: state as i32,
            exit_code: exit,
            started_at: 1_700_000_000_000_000_000,
            finished_at: if state == cri::ContainerState::ContainerExited {
                1_700_000_005_000_000_000
            } else {
                0
            },
            reason: if exit == 137 {
                "OOMKilled".into()
            } else {
                String::new()
            },
            ..Default::default()
        }
    }

    fn view(instances: &[(&str, &str, u32, cri::ContainerState, i32)]) -> RuntimeView {
        RuntimeView {
            containers: instances
                .iter()
                .map(|(id, name, attempt, ..)| cri_container(id, name, *attempt))
                .collect(),
            statuses: instances
                .iter()
                .map(|(id, name, attempt, state, exit)| {
                    (id.to_string(), cri_status(id, name, *attempt, *state, *exit))
                })
                .collect(),
            ..Default::default()
        }
    }

    fn container(v: serde_json::Value) -> Container {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn a_running_container_is_ready_only_once_its_probes_succeeded() {
        use cri::ContainerState::*;
        let c = container(
            json!({"name": "web", "image": "nginx", "readinessProbe": {"tcpSocket": {"port": 80}}}),
        );
        let mut v = view(&[
            ("old", "web", 0, ContainerExited, 1),
            ("new", "web", 1, ContainerRunning, 0),
        ]);
        let st = container_status(&c, &v, None);
        assert_eq!(st.container_id.as_deref(), Some("containerd://new"));
        assert_eq!(st.restart_count, 1);
        assert!(st.state.as_ref().unwrap().running.is_some());
        assert_eq!((st.started, st.ready), (Some(true), false));
        v.probes_ok.insert(("new".into(), Kind::Readiness));
        // A success of the old instance's probe would not count.
        assert!(container_status(&c, &v, None).ready);
    }

    #[test]
    fn exits_waits_and_last_runs_come_from_the_one_reading() {
        use cri::ContainerState::*;
        let c = container(json!({"name": "job", "image": "busybox"}));
        let mut v = view(&[
            ("a", "job", 0, ContainerExited, 137),
            ("b", "job", 1, ContainerExited, 3),
        ]);
        v.messages.insert("b".into(), "bye".into());
        let mut st = container_status(&c, &v, None);
        let t = st.state.as_ref().unwrap().terminated.clone().unwrap();
        assert_eq!((t.exit_code, t.message.as_deref()), (3, Some("bye")));
        assert!(!st.ready);
        let plan = ContainerPlan {
            previous: Some("a".into()),
            restarts: 1,
            ..ContainerPlan::new("job", false)
        };
        last_run(&plan, &v, &mut st);
        let last = st.last_state.unwrap().terminated.unwrap();
        assert_eq!((last.exit_code, last.reason.as_deref()), (137, Some("OOMKilled")));
        assert_eq!(st.restart_count, 1);
        // What the sync could not start waits with its reason; nothing yet is ContainerCreating.
        let w = container_status(&c, &v, Some(("ErrImagePull".into(), "no registry".into())));
        assert_eq!(
            w.state.unwrap().waiting.unwrap().reason.as_deref(),
            Some("ErrImagePull")
        );
        let none = container_status(&c, &RuntimeView::default(), None);
        assert_eq!(
            none.state.unwrap().waiting.unwrap().reason.as_deref(),
            Some("ContainerCreating")
        );
    }
}
