//! What a pod's sync must do, decided from plain data (the role of upstream's
//! `computePodActions`): the pod, what the runtime runs of it, the failed probes, the restart
//! back-offs and the time. No I/O here; `pod_sync` carries the actions out.

use std::collections::HashMap;
use std::time::{Duration, SystemTime};

use k8s_openapi::api::core::v1::{Container, Pod};

use crate::backoff::{self, Backoff};
use crate::prober::Kind;

/// The annotation holding the hash of the container spec a container was created from.
pub const CONTAINER_HASH: &str = "io.kubernetes.container.hash";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    Created,
    Running,
    Exited,
    Unknown,
}

/// One sandbox of the pod, as the runtime reports it.
#[derive(Clone, Debug, PartialEq)]
pub struct Sandbox {
    pub id: String,
    pub attempt: u32,
    pub ready: bool,
    pub created_at: i64,
}

/// One container of the pod, as the runtime reports it (times in nanoseconds since the epoch).
#[derive(Clone, Debug, PartialEq)]
pub struct RuntimeContainer {
    pub id: String,
    pub sandbox_id: String,
    pub name: String,
    pub attempt: u32,
    pub state: State,
    pub exit_code: i32,
    pub started_at: i64,
    pub finished_at: i64,
    /// The spec hash it was created with (none for containers made before hashes were kept).
    pub hash: Option<String>,
}

/// What the runtime runs of one pod.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PodRuntime {
    pub sandboxes: Vec<Sandbox>,
    pub containers: Vec<RuntimeContainer>,
}

impl PodRuntime {
    /// The ready sandbox the pod's containers run in (the newest, if several).
    pub fn ready_sandbox(&self) -> Option<&Sandbox> {
        self.sandboxes
            .iter()
            .filter(|s| s.ready)
            .max_by_key(|s| (s.created_at, s.attempt))
    }

    pub fn container(&self, id: &str) -> Option<&RuntimeContainer> {
        self.containers.iter().find(|c| c.id == id)
    }
}

/// The inputs of `compute_pod_actions` besides the pod and its runtime.
pub struct Context<'a> {
    /// Failed liveness or startup probes, by container id.
    pub failed_probes: &'a HashMap<String, Kind>,
    /// The pod's restart back-offs, keyed `<pod uid>/<container>`; updated when a restart is let
    /// through.
    pub backoff: &'a mut Backoff,
    pub now: SystemTime,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KillReason {
    LivenessProbe,
    StartupProbe,
    /// The container's spec (its hash) changed.
    SpecChanged,
    /// Its sandbox is gone or not ready; a new one is made.
    SandboxChanged,
    DeadlineExceeded,
}

/// A container to stop.
#[derive(Clone, Debug, PartialEq)]
pub struct Kill {
    pub id: String,
    pub name: String,
    pub reason: KillReason,
    /// The probe's terminationGracePeriodSeconds, when it has one.
    pub grace: Option<i64>,
}

impl Kill {
    /// The Killing event's message (None: the default "Stopping container <name>").
    pub fn message(&self) -> Option<String> {
        let name = &self.name;
        match self.reason {
            KillReason::LivenessProbe => Some(format!(
                "Container {name} failed liveness probe, will be restarted"
            )),
            KillReason::StartupProbe => Some(format!(
                "Container {name} failed startup probe, will be restarted"
            )),
            KillReason::SpecChanged => {
                Some(format!("Container {name} definition changed, will be restarted"))
            }
            KillReason::SandboxChanged | KillReason::DeadlineExceeded => None,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SandboxAction {
    /// The ready sandbox, kept.
    Keep { id: String, attempt: u32 },
    /// None is ready: a new one, with this attempt.
    Create { attempt: u32 },
}

/// A restart that waits (CrashLoopBackOff).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BackOff {
    pub delay: Duration,
    /// When the worker is due to try again.
    pub until: SystemTime,
}

/// The decision for one container of the spec.
#[derive(Clone, Debug, PartialEq)]
pub struct ContainerPlan {
    pub name: String,
    /// A restartable init container (a sidecar).
    pub sidecar: bool,
    /// Start a new instance with this attempt.
    pub start: Option<u32>,
    pub back_off: Option<BackOff>,
    /// An init container that exited 0.
    pub done: bool,
    /// The newest instance in the sandbox, before this sync's actions.
    pub latest: Option<String>,
    /// The instance whose end is the container's lastState.
    pub previous: Option<String>,
    /// The newest instance's attempt.
    pub restarts: u32,
    /// An ephemeral container's target (whose process namespace it joins), by name.
    pub target: Option<String>,
    /// That target's newest instance in the sandbox, if it has one.
    pub target_id: Option<String>,
}

impl ContainerPlan {
    pub(crate) fn new(name: &str, sidecar: bool) -> Self {
        Self {
            name: name.to_string(),
            sidecar,
            start: None,
            back_off: None,
            done: false,
            latest: None,
            previous: None,
            restarts: 0,
            target: None,
            target_id: None,
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct PodActions {
    /// The pod finished (Succeeded or Failed): only these ready sandboxes stop.
    pub finished: bool,
    /// Past its activeDeadlineSeconds: every container is killed, every sandbox stopped.
    pub deadline_exceeded: bool,
    /// Sandboxes to stop (finished pod, deadline, and the dead ones when a new one is made).
    pub stop_sandboxes: Vec<String>,
    pub sandbox: SandboxAction,
    /// Containers to stop before anything starts.
    pub kill: Vec<Kill>,
    /// The init containers considered, in order, up to the one the pod waits for.
    pub init: Vec<ContainerPlan>,
    /// Every init container is done (or, for sidecars, started).
    pub initialized: bool,
    /// The app containers, in order (empty until initialized).
    pub containers: Vec<ContainerPlan>,
    /// The ephemeral containers, in order: each started once, in a sandbox that is ready, and
    /// never again (upstream's `EphemeralContainersToStart`), whether the pod is initialized
    /// or not.
    pub ephemeral: Vec<ContainerPlan>,
    /// Exited instances no longer reported, to remove.
    pub remove: Vec<String>,
}

/// The key of a container's restart back-off.
pub fn backoff_key(uid: &str, name: &str) -> String {
    format!("{uid}/{name}")
}

/// A hash of the container's spec without its resources (which change in place): a running
/// container whose hash differs from its spec's is restarted. FNV-1a over the JSON form.
pub fn container_hash(c: &Container) -> String {
    let mut c = c.clone();
    c.resources = None;
    c.resize_policy = None;
    let bytes = serde_json::to_vec(&c).unwrap_or_default();
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{h:x}")
}

/// How long `pod` may still be active at `now` before its activeDeadlineSeconds (counted from
/// its startTime, as upstream's activeDeadlineHandler): zero once it is past, None without a
/// deadline or before it started.
pub fn deadline_left(pod: &Pod, now: jiff::Timestamp) -> Option<Duration> {
    let deadline = pod.spec.as_ref().and_then(|s| s.active_deadline_seconds)?;
    let start = pod.status.as_ref().and_then(|s| s.start_time.as_ref())?;
    let active = now.duration_since(start.0);
    let left = jiff::SignedDuration::from_secs(deadline) - active;
    Some(Duration::try_from(left).unwrap_or_default())
}

/// Whether `pod` has been active longer than its activeDeadlineSeconds at `now`.
pub fn past_deadline(pod: &Pod, now: jiff::Timestamp) -> bool {
    deadline_left(pod, now).is_some_and(|d| d.is_zero())
}

fn system_time(nanos: i64, now: SystemTime) -> SystemTime {
    if nanos <= 0 {
        return now;
    }
    SystemTime::UNIX_EPOCH + Duration::from_nanos(nanos as u64)
}

fn is_sidecar(c: &Container) -> bool {
    c.restart_policy.as_deref() == Some("Always")
}

/// The pod's actions for this sync of a pod its worker keeps running.
pub fn compute_pod_actions(pod: &Pod, rt: &PodRuntime, cx: &mut Context<'_>) -> PodActions {
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let spec = pod.spec.clone().unwrap_or_default();
    let restart = spec.restart_policy.as_deref().unwrap_or("Always");
    let ready = rt.ready_sandbox();
    let mut actions = PodActions {
        finished: false,
        deadline_exceeded: false,
        stop_sandboxes: Vec::new(),
        sandbox: match ready {
            Some(s) => SandboxAction::Keep {
                id: s.id.clone(),
                attempt: s.attempt,
            },
            None => SandboxAction::Create {
                attempt: rt.sandboxes.len() as u32,
            },
        },
        kill: Vec::new(),
        init: Vec::new(),
        initialized: false,
        containers: Vec::new(),
        ephemeral: Vec::new(),
        remove: Vec::new(),
    };
    let running = |c: &&RuntimeContainer| c.state == State::Running;
    // A finished pod keeps its containers (and their logs) until it is deleted, but not its
    // sandbox (upstream kills the sandboxes of terminal pods).
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref()).unwrap_or("");
    if phase == "Succeeded" || phase == "Failed" {
        actions.finished = true;
        actions.stop_sandboxes = rt
            .sandboxes
            .iter()
            .filter(|s| s.ready)
            .map(|s| s.id.clone())
            .collect();
        return actions;
    }
    let now_ts = jiff::Timestamp::try_from(cx.now).unwrap_or_else(|_| jiff::Timestamp::now());
    if past_deadline(pod, now_ts) {
        actions.deadline_exceeded = true;
        actions.kill = rt
            .containers
            .iter()
            .filter(running)
            .map(|c| Kill {
                id: c.id.clone(),
                name: c.name.clone(),
                reason: KillReason::DeadlineExceeded,
                grace: None,
            })
            .collect();
        actions.stop_sandboxes = rt.sandboxes.iter().map(|s| s.id.clone()).collect();
        return actions;
    }
    let sandbox_id = match ready {
        Some(s) => s.id.clone(),
        None => {
            // What still runs in a sandbox that is gone or not ready stops; the containers
            // start again in the new one.
            actions.kill = rt
                .containers
                .iter()
                .filter(running)
                .map(|c| Kill {
                    id: c.id.clone(),
                    name: c.name.clone(),
                    reason: KillReason::SandboxChanged,
                    grace: None,
                })
                .collect();
            // The dead sandboxes stop (CNI gives their addresses back) before the new one
            // runs, as upstream kills the pod when its sandbox changed.
            actions.stop_sandboxes = rt.sandboxes.iter().map(|s| s.id.clone()).collect();
            String::new()
        }
    };
    // A container's first instance in this sandbox continues the count of the instances in
    // the pod's earlier sandboxes (upstream's restart count is the pod's, across sandboxes):
    // the runtime's names carry the attempt, and a dead sandbox's `app_..._0` still holds
    // its name after a power cut.
    let first_attempt = |name: &str| -> u32 {
        rt.containers
            .iter()
            .filter(|c| c.sandbox_id != sandbox_id && c.name == name)
            .map(|c| c.attempt + 1)
            .max()
            .unwrap_or(0)
    };
    let instances = |name: &str| -> Vec<&RuntimeContainer> {
        let mut v: Vec<&RuntimeContainer> = rt
            .containers
            .iter()
            .filter(|c| c.sandbox_id == sandbox_id && c.name == name)
            .collect();
        v.sort_by_key(|c| std::cmp::Reverse(c.attempt));
        v
    };
    if ready.is_some() {
        for c in spec.ephemeral_containers.iter().flatten() {
            let mut plan = ContainerPlan::new(&c.name, false);
            let mine = instances(&c.name);
            plan.latest = mine.first().map(|l| l.id.clone());
            // Any instance ever, in any sandbox, means it ran: it is not started again.
            if !rt.containers.iter().any(|x| x.name == c.name) {
                plan.start = Some(0);
            }
            if let Some(t) = c.target_container_name.as_deref().filter(|t| !t.is_empty()) {
                plan.target = Some(t.to_owned());
                plan.target_id = instances(t).first().map(|l| l.id.clone());
            }
            actions.ephemeral.push(plan);
        }
    }
    // Init containers in order: a regular one must exit 0 before the next starts; a sidecar
    // must have started. The app containers wait for all of them.
    actions.initialized = true;
    for c in spec.init_containers.iter().flatten() {
        let mine = instances(&c.name);
        let latest = mine.first().copied();
        let sidecar = is_sidecar(c);
        let mut plan = ContainerPlan::new(&c.name, sidecar);
        plan.latest = latest.map(|l| l.id.clone());
        plan.restarts = latest.map(|l| l.attempt).unwrap_or(0);
        let blocks = if sidecar {
            // A sidecar restarts whatever the pod's policy.
            let first = first_attempt(&c.name);
            sidecar_or_app(
                &uid,
                c,
                "Always",
                latest,
                &mine,
                first,
                &mut plan,
                &mut actions,
                cx,
            );
            latest.is_none()
        } else {
            let exited = latest.is_some_and(|l| l.state == State::Exited);
            let code = latest.filter(|_| exited).map(|l| l.exit_code).unwrap_or(0);
            match latest {
                None => plan.start = Some(first_attempt(&c.name)),
                Some(l) if exited && code != 0 && restart != "Never" => {
                    // A failed init container restarts after the same back-off as an app
                    // container (upstream: CrashLoopBackOff, 10 s doubling to 5 min).
                    let started = system_time(l.started_at, cx.now);
                    let finished = system_time(l.finished_at, cx.now);
                    let key = backoff_key(&uid, &c.name);
                    match backoff::restart_delay(cx.backoff, &key, started, finished, cx.now) {
                        Some(delay) => {
                            plan.back_off = Some(BackOff {
                                delay,
                                until: finished + delay,
                            })
                        }
                        None => plan.start = Some(l.attempt + 1),
                    }
                }
                _ => {}
            }
            // Its last state: the failed run it restarts after, else the run before this one.
            let previous = if exited && code != 0 && restart != "Never" {
                latest
            } else {
                mine.iter()
                    .find(|x| plan.restarts > 0 && x.attempt == plan.restarts - 1)
                    .copied()
            };
            plan.previous = previous.map(|p| p.id.clone());
            for old in &mine {
                if previous.is_none_or(|p| p.id != old.id)
                    && latest.is_none_or(|l| l.id != old.id)
                    && old.state == State::Exited
                {
                    actions.remove.push(old.id.clone());
                }
            }
            plan.done = exited && code == 0;
            !plan.done
        };
        actions.init.push(plan);
        if blocks {
            actions.initialized = false;
            break;
        }
    }
    if !actions.initialized {
        return actions;
    }
    for c in &spec.containers {
        let mine = instances(&c.name);
        let latest = mine.first().copied();
        let mut plan = ContainerPlan::new(&c.name, false);
        plan.latest = latest.map(|l| l.id.clone());
        plan.restarts = latest.map(|l| l.attempt).unwrap_or(0);
        let first = first_attempt(&c.name);
        sidecar_or_app(
            &uid,
            c,
            restart,
            latest,
            &mine,
            first,
            &mut plan,
            &mut actions,
            cx,
        );
        actions.containers.push(plan);
    }
    actions
}

/// The decision for a sidecar or an app container: kill it on a failed probe or a changed
/// spec, restart it as its policy says (a sidecar always), after its back-off; older exited
/// instances go. `first`: the attempt of its first instance in this sandbox.
#[allow(clippy::too_many_arguments)]
fn sidecar_or_app(
    uid: &str,
    c: &Container,
    policy: &str,
    latest: Option<&RuntimeContainer>,
    mine: &[&RuntimeContainer],
    first: u32,
    plan: &mut ContainerPlan,
    actions: &mut PodActions,
    cx: &mut Context<'_>,
) {
    let restarts = plan.restarts;
    let mut running = latest.is_some_and(|l| l.state == State::Running);
    let mut killed = false;
    let mut changed = false;
    if let Some(l) = latest.filter(|_| running) {
        if let Some(kind) = cx.failed_probes.get(&l.id) {
            let reason = if *kind == Kind::Liveness {
                KillReason::LivenessProbe
            } else {
                KillReason::StartupProbe
            };
            actions.kill.push(Kill {
                id: l.id.clone(),
                name: c.name.clone(),
                reason,
                grace: kind.of(c).and_then(|p| p.termination_grace_period_seconds),
            });
            running = false;
            killed = true;
        } else if l.hash.as_ref().is_some_and(|h| *h != container_hash(c)) {
            actions.kill.push(Kill {
                id: l.id.clone(),
                name: c.name.clone(),
                reason: KillReason::SpecChanged,
                grace: None,
            });
            running = false;
            changed = true;
        }
    }
    let exited = latest.is_some() && !running;
    // A killed container's exit is not known yet: it is a failure.
    let exit_code = match latest {
        Some(_) if killed || changed => 1,
        Some(l) if exited => l.exit_code,
        _ => 0,
    };
    let wants_restart = exited && (policy == "Always" || (policy == "OnFailure" && exit_code != 0));
    let mut start = latest.is_none();
    if changed {
        // A new definition starts at once, with no back-off.
        start = true;
    } else if wants_restart {
        // Restarts back off as upstream: 10 s doubling to 5 min, counted from the exit.
        let l = latest.expect("exited implies an instance");
        let started = system_time(l.started_at, cx.now);
        let finished = if killed {
            cx.now
        } else {
            system_time(l.finished_at, cx.now)
        };
        let key = backoff_key(uid, &c.name);
        match backoff::restart_delay(cx.backoff, &key, started, finished, cx.now) {
            Some(delay) => {
                plan.back_off = Some(BackOff {
                    delay,
                    until: finished + delay,
                })
            }
            None => start = true,
        }
    }
    if start {
        plan.start = Some(if latest.is_some() { restarts + 1 } else { first });
    }
    let previous = if exited {
        latest
    } else {
        mine.iter()
            .find(|x| restarts > 0 && x.attempt == restarts - 1)
            .copied()
    };
    plan.previous = previous.map(|p| p.id.clone());
    for old in mine {
        if previous.is_none_or(|p| p.id != old.id)
            && latest.is_none_or(|l| l.id != old.id)
            && old.state == State::Exited
        {
            actions.remove.push(old.id.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Seconds after a fixed instant, as the runtime's nanoseconds.
    const T0: i64 = 2_000_000_000;
    fn ns(secs: i64) -> i64 {
        (T0 + secs) * 1_000_000_000
    }
    fn at(secs: i64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs((T0 + secs) as u64)
    }

    /// A pod `u1` with these init containers (name, restartPolicy) and app containers.
    fn pod(restart: &str, inits: &[(&str, Option<&str>)], apps: &[&str]) -> Pod {
        let inits: Vec<_> = inits
            .iter()
            .map(|(n, rp)| json!({"name": n, "image": "busybox", "restartPolicy": rp}))
            .collect();
        let apps: Vec<_> = apps
            .iter()
            .map(|n| json!({"name": n, "image": "busybox"}))
            .collect();
        serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "default", "uid": "u1"},
            "spec": {"restartPolicy": restart, "initContainers": inits, "containers": apps},
            "status": {"phase": "Pending"},
        }))
        .unwrap()
    }

    fn sb(id: &str, attempt: u32, ready: bool) -> Sandbox {
        Sandbox {
            id: id.into(),
            attempt,
            ready,
            created_at: attempt as i64,
        }
    }

    fn running(id: &str, name: &str, attempt: u32) -> RuntimeContainer {
        RuntimeContainer {
            id: id.into(),
            sandbox_id: "sb0".into(),
            name: name.into(),
            attempt,
            state: State::Running,
            exit_code: 0,
            started_at: ns(0),
            finished_at: 0,
            hash: None,
        }
    }

    /// Exited with `code` at second `finished` (started at 0).
    fn exited(id: &str, name: &str, attempt: u32, code: i32, finished: i64) -> RuntimeContainer {
        RuntimeContainer {
            state: State::Exited,
            exit_code: code,
            finished_at: ns(finished),
            ..running(id, name, attempt)
        }
    }

    fn runtime(containers: Vec<RuntimeContainer>) -> PodRuntime {
        PodRuntime {
            sandboxes: vec![sb("sb0", 0, true)],
            containers,
        }
    }

    fn compute_with(
        pod: &Pod,
        rt: &PodRuntime,
        probes: &[(&str, Kind)],
        backoff: &mut Backoff,
        now: SystemTime,
    ) -> PodActions {
        let failed: HashMap<String, Kind> = probes.iter().map(|(id, k)| (id.to_string(), *k)).collect();
        compute_pod_actions(
            pod,
            rt,
            &mut Context {
                failed_probes: &failed,
                backoff,
                now,
            },
        )
    }

    fn compute(pod: &Pod, rt: &PodRuntime) -> PodActions {
        compute_with(pod, rt, &[], &mut Backoff::default(), at(100))
    }

    fn starts(plans: &[ContainerPlan]) -> Vec<(&str, Option<u32>)> {
        plans.iter().map(|p| (p.name.as_str(), p.start)).collect()
    }

    fn kills(a: &PodActions) -> Vec<(&str, KillReason)> {
        a.kill.iter().map(|k| (k.id.as_str(), k.reason)).collect()
    }

    #[test]
    fn ephemeral_containers_start_once_in_a_ready_sandbox_even_before_init() {
        let mut p = pod("Always", &[("init", None)], &["app"]);
        p.spec.as_mut().unwrap().ephemeral_containers = Some(vec![
            serde_json::from_value(json!({"name": "dbg", "image": "busybox", "targetContainerName": "init"}))
                .unwrap(),
            serde_json::from_value(json!({"name": "done", "image": "busybox"})).unwrap(),
        ]);
        // The init container still runs; the debugger targets it and starts; the one that ran
        // (and exited) is not started again.
        let rt = runtime(vec![running("i0", "init", 0), exited("d0", "done", 0, 0, 5)]);
        let a = compute(&p, &rt);
        assert_eq!(starts(&a.ephemeral), [("dbg", Some(0)), ("done", None)]);
        assert_eq!(a.ephemeral[0].target_id.as_deref(), Some("i0"));
        assert!(!a.initialized);
        // Without a ready sandbox nothing ephemeral starts this round.
        let mut no_sandbox = rt.clone();
        no_sandbox.sandboxes[0].ready = false;
        assert!(compute(&p, &no_sandbox).ephemeral.is_empty());
    }

    #[test]
    fn a_fresh_pod_gets_a_sandbox_and_its_first_init_container() {
        let cases = [
            // (init containers, apps, expected init starts, initialized, expected app starts)
            (vec![], vec!["app"], vec![], true, vec![("app", Some(0))]),
            (
                vec![("init", None)],
                vec!["app"],
                vec![("init", Some(0))],
                false,
                vec![],
            ),
            (
                vec![("a", None), ("b", None)],
                vec!["app"],
                vec![("a", Some(0))],
                false,
                vec![],
            ),
            (
                vec![],
                vec!["one", "two"],
                vec![],
                true,
                vec![("one", Some(0)), ("two", Some(0))],
            ),
        ];
        for (inits, apps, want_init, initialized, want_apps) in cases {
            let p = pod("Always", &inits, &apps);
            let a = compute(&p, &PodRuntime::default());
            assert_eq!(a.sandbox, SandboxAction::Create { attempt: 0 }, "{inits:?}");
            assert_eq!(starts(&a.init), want_init, "{inits:?}");
            assert_eq!(a.initialized, initialized, "{inits:?}");
            assert_eq!(starts(&a.containers), want_apps, "{inits:?}");
            assert!(a.kill.is_empty() && a.remove.is_empty());
            assert!(!a.finished && !a.deadline_exceeded);
        }
    }

    #[test]
    fn a_dead_sandbox_is_replaced_and_what_ran_in_it_killed() {
        let p = pod("Always", &[], &["app"]);
        let rt = PodRuntime {
            sandboxes: vec![sb("sb0", 0, false)],
            containers: vec![running("c1", "app", 1), exited("c0", "app", 0, 0, 5)],
        };
        let a = compute(&p, &rt);
        assert_eq!(a.sandbox, SandboxAction::Create { attempt: 1 });
        assert_eq!(kills(&a), vec![("c1", KillReason::SandboxChanged)]);
        // The dead sandbox stops (its address goes back) before the new one runs.
        assert_eq!(a.stop_sandboxes, ["sb0"]);
        // The containers start again in the new sandbox, their count going on: the dead
        // sandbox's instances keep their names (attempts 0 and 1) until they are removed.
        assert_eq!(starts(&a.containers), vec![("app", Some(2))]);
        // So do init containers and sidecars: after a power cut, the pod starts over from its
        // first init container, each one's count going on.
        let p = pod("Always", &[("init", None), ("side", Some("Always"))], &["app"]);
        let rt = PodRuntime {
            sandboxes: vec![sb("sb0", 0, false)],
            containers: vec![
                exited("i0", "init", 0, 0, 5),
                exited("s0", "side", 0, 137, 9),
                exited("a0", "app", 0, 137, 9),
            ],
        };
        let a = compute(&p, &rt);
        assert_eq!(starts(&a.init), vec![("init", Some(1))]);
        assert!(!a.initialized);
        let rt = PodRuntime {
            sandboxes: vec![sb("sb0", 0, false), sb("sb1", 1, true)],
            containers: vec![
                exited("i0", "init", 0, 0, 5),
                exited("s0", "side", 0, 137, 9),
                exited("a0", "app", 0, 137, 9),
                RuntimeContainer {
                    sandbox_id: "sb1".into(),
                    ..exited("i1", "init", 1, 0, 20)
                },
            ],
        };
        let a = compute(&p, &rt);
        assert_eq!(starts(&a.init), vec![("init", None), ("side", Some(1))]);
        assert!(a.stop_sandboxes.is_empty());
        // A ready sandbox among dead ones is kept (the newest ready one).
        let rt = PodRuntime {
            sandboxes: vec![sb("sb0", 0, false), sb("sb1", 1, true), sb("sb2", 2, true)],
            containers: vec![],
        };
        assert_eq!(
            compute(&p, &rt).sandbox,
            SandboxAction::Keep {
                id: "sb2".into(),
                attempt: 2
            }
        );
    }

    #[test]
    fn init_containers_run_in_order_and_fail_as_the_restart_policy_says() {
        // (policy, the first init container's instance, expected: its start, done, the
        // second's start, initialized)
        let cases = [
            ("Never", exited("i0", "a", 0, 1, 5), None, false, None, false),
            (
                "OnFailure",
                exited("i0", "a", 0, 1, 5),
                Some(1),
                false,
                None,
                false,
            ),
            ("Always", exited("i0", "a", 3, 1, 5), Some(4), false, None, false),
            (
                "Never",
                exited("i0", "a", 0, 0, 5),
                None,
                true,
                Some(Some(0)),
                false,
            ),
            ("Always", running("i0", "a", 0), None, false, None, false),
        ];
        for (policy, first, start, done, second, initialized) in cases {
            let p = pod(policy, &[("a", None), ("b", None)], &["app"]);
            let a = compute(&p, &runtime(vec![first.clone()]));
            let case = format!("{policy} {first:?}");
            assert_eq!(a.init[0].start, start, "{case}");
            assert_eq!(a.init[0].done, done, "{case}");
            assert_eq!(a.init.get(1).map(|p| p.start), second, "{case}");
            assert_eq!(a.initialized, initialized, "{case}");
            assert!(a.containers.is_empty(), "{case}");
        }
        // Both done: the app containers start.
        let p = pod("Never", &[("a", None), ("b", None)], &["app"]);
        let a = compute(
            &p,
            &runtime(vec![exited("i0", "a", 0, 0, 5), exited("i1", "b", 0, 0, 6)]),
        );
        assert!(a.initialized);
        assert!(a.init.iter().all(|p| p.done && p.start.is_none()));
        assert_eq!(starts(&a.containers), vec![("app", Some(0))]);
    }

    #[test]
    fn sidecars_start_before_the_next_and_restart_whatever_the_pod_policy() {
        let p = pod("Never", &[("side", Some("Always")), ("init", None)], &["app"]);
        // Not started yet: it starts, and the pod waits for it.
        let a = compute(&p, &runtime(vec![]));
        assert_eq!(starts(&a.init), vec![("side", Some(0))]);
        assert!(a.init[0].sidecar);
        assert!(!a.initialized);
        // Running: the next init container starts.
        let a = compute(&p, &runtime(vec![running("s0", "side", 0)]));
        assert_eq!(starts(&a.init), vec![("side", None), ("init", Some(0))]);
        // Running and the init container done: the app starts.
        let a = compute(
            &p,
            &runtime(vec![running("s0", "side", 0), exited("i0", "init", 0, 0, 5)]),
        );
        assert!(a.initialized);
        assert_eq!(starts(&a.containers), vec![("app", Some(0))]);
        // Exited, under restartPolicy Never: restarted, and the app is not held back.
        let mut backoff = Backoff::default();
        let rt = runtime(vec![
            exited("s0", "side", 0, 0, 50),
            exited("i0", "init", 0, 0, 5),
            running("a0", "app", 0),
        ]);
        let a = compute_with(&p, &rt, &[], &mut backoff, at(60));
        assert_eq!(a.init[0].start, Some(1));
        assert_eq!(a.init[0].previous.as_deref(), Some("s0"));
        assert!(a.initialized);
        assert_eq!(starts(&a.containers), vec![("app", None)]);
        // It exits again soon after: it waits for its back-off.
        let rt = runtime(vec![
            exited("s1", "side", 1, 1, 62),
            exited("i0", "init", 0, 0, 5),
            running("a0", "app", 0),
        ]);
        let a = compute_with(&p, &rt, &[], &mut backoff, at(63));
        assert_eq!(a.init[0].start, None);
        assert_eq!(
            a.init[0].back_off,
            Some(BackOff {
                delay: backoff::INITIAL,
                until: at(62) + backoff::INITIAL
            })
        );
    }

    #[test]
    fn exited_containers_restart_as_the_restart_policy_says() {
        // (policy, exit code, restarted)
        let cases = [
            ("Always", 0, true),
            ("Always", 1, true),
            ("OnFailure", 0, false),
            ("OnFailure", 2, true),
            ("Never", 0, false),
            ("Never", 1, false),
        ];
        for (policy, code, restarted) in cases {
            let p = pod(policy, &[], &["app"]);
            let a = compute(&p, &runtime(vec![exited("c0", "app", 0, code, 50)]));
            let case = format!("{policy} exit {code}");
            assert_eq!(a.containers[0].start, restarted.then_some(1), "{case}");
            assert_eq!(a.containers[0].back_off, None, "{case}");
            // The exited run is the container's last state either way.
            assert_eq!(a.containers[0].previous.as_deref(), Some("c0"), "{case}");
            assert_eq!(a.containers[0].latest.as_deref(), Some("c0"), "{case}");
            assert!(a.kill.is_empty(), "{case}");
        }
    }

    #[test]
    fn restarts_wait_for_their_back_off() {
        let p = pod("Always", &[], &["app"]);
        let mut backoff = Backoff::default();
        // The first exit restarts at once.
        let a = compute_with(
            &p,
            &runtime(vec![exited("c0", "app", 0, 1, 10)]),
            &[],
            &mut backoff,
            at(11),
        );
        assert_eq!(a.containers[0].start, Some(1));
        assert_eq!(backoff.delay("u1/app"), Some(backoff::INITIAL));
        // The second, 2 s later, waits: 10 s from its exit.
        let rt = runtime(vec![exited("c1", "app", 1, 1, 13), exited("c0", "app", 0, 1, 10)]);
        let a = compute_with(&p, &rt, &[], &mut backoff, at(15));
        assert_eq!(a.containers[0].start, None);
        assert_eq!(
            a.containers[0].back_off,
            Some(BackOff {
                delay: backoff::INITIAL,
                until: at(23)
            })
        );
        // The older run is removed; the newest is the last state.
        assert_eq!(a.remove, vec!["c0".to_string()]);
        assert_eq!(a.containers[0].previous.as_deref(), Some("c1"));
        // Once the back-off is over it restarts, and the next delay doubles.
        let a = compute_with(&p, &rt, &[], &mut backoff, at(24));
        assert_eq!(a.containers[0].start, Some(2));
        assert_eq!(a.containers[0].back_off, None);
        assert_eq!(backoff.delay("u1/app"), Some(backoff::INITIAL * 2));
    }

    /// A failing init container of a restarting pod backs off as an app container does
    /// (the conformance spec counts three restarts in CrashLoopBackOff), its failed run is its
    /// last state, and older runs go.
    #[test]
    fn failed_init_containers_wait_for_their_back_off() {
        let p = pod("Always", &[("init", None), ("next", None)], &["app"]);
        let mut backoff = Backoff::default();
        let a = compute_with(
            &p,
            &runtime(vec![exited("i0", "init", 0, 1, 10)]),
            &[],
            &mut backoff,
            at(11),
        );
        assert_eq!(a.init[0].start, Some(1));
        assert_eq!(a.init[0].previous.as_deref(), Some("i0"));
        let rt = runtime(vec![
            exited("i1", "init", 1, 1, 13),
            exited("i0", "init", 0, 1, 10),
        ]);
        let a = compute_with(&p, &rt, &[], &mut backoff, at(15));
        assert_eq!(a.init[0].start, None);
        assert_eq!(
            a.init[0].back_off,
            Some(BackOff {
                delay: backoff::INITIAL,
                until: at(23)
            })
        );
        assert_eq!(a.init[0].previous.as_deref(), Some("i1"));
        assert_eq!(a.remove, vec!["i0".to_string()]);
        assert_eq!(a.init.len(), 1, "the second init container waits");
        assert!(!a.initialized);
        let a = compute_with(&p, &rt, &[], &mut backoff, at(24));
        assert_eq!(a.init[0].start, Some(2));
    }

    #[test]
    fn failed_liveness_and_startup_probes_kill_and_restart_unless_never() {
        // (policy, probe, kill reason, restarted)
        let cases = [
            ("Always", Kind::Liveness, KillReason::LivenessProbe, true),
            ("OnFailure", Kind::Liveness, KillReason::LivenessProbe, true),
            ("Never", Kind::Liveness, KillReason::LivenessProbe, false),
            ("Always", Kind::Startup, KillReason::StartupProbe, true),
        ];
        for (policy, kind, reason, restarted) in cases {
            let p = pod(policy, &[], &["app", "other"]);
            let rt = runtime(vec![running("c0", "app", 0), running("o0", "other", 0)]);
            let a = compute_with(&p, &rt, &[("c0", kind)], &mut Backoff::default(), at(100));
            let case = format!("{policy} {kind:?}");
            assert_eq!(kills(&a), vec![("c0", reason)], "{case}");
            assert_eq!(
                starts(&a.containers),
                vec![("app", restarted.then_some(1)), ("other", None)],
                "{case}"
            );
            assert_eq!(a.containers[0].previous.as_deref(), Some("c0"), "{case}");
            assert!(a.kill[0].message().unwrap().contains("will be restarted"));
        }
        // A probe result for an instance that no longer runs kills nothing.
        let p = pod("Always", &[], &["app"]);
        let rt = runtime(vec![running("c1", "app", 1)]);
        let a = compute_with(
            &p,
            &rt,
            &[("c0", Kind::Liveness)],
            &mut Backoff::default(),
            at(100),
        );
        assert!(a.kill.is_empty());
    }

    #[test]
    fn a_changed_spec_restarts_the_container_at_once() {
        let p = pod("Always", &[], &["app"]);
        let spec_hash = container_hash(&p.spec.as_ref().unwrap().containers[0]);
        // (the running instance's hash, killed)
        let cases = [
            (Some("0".to_string()), true),
            (Some(spec_hash.clone()), false),
            (None, false),
        ];
        for (hash, killed) in cases {
            let c = RuntimeContainer {
                hash: hash.clone(),
                ..running("c3", "app", 3)
            };
            // Even with a back-off running, a changed definition is no crash.
            let mut backoff = Backoff::default();
            backoff.next("u1/app", at(99));
            let a = compute_with(&p, &runtime(vec![c]), &[], &mut backoff, at(100));
            if killed {
                assert_eq!(kills(&a), vec![("c3", KillReason::SpecChanged)]);
                assert_eq!(a.containers[0].start, Some(4));
            } else {
                assert!(a.kill.is_empty(), "{hash:?}");
                assert_eq!(a.containers[0].start, None, "{hash:?}");
            }
        }
        // Resources change in place: not a new definition.
        let mut resized = p.clone();
        resized.spec.as_mut().unwrap().containers[0].resources =
            Some(serde_json::from_value(json!({"limits": {"cpu": "1"}})).unwrap());
        assert_eq!(
            container_hash(&resized.spec.as_ref().unwrap().containers[0]),
            spec_hash
        );
        let mut image = p.clone();
        image.spec.as_mut().unwrap().containers[0].image = Some("nginx".into());
        assert_ne!(
            container_hash(&image.spec.as_ref().unwrap().containers[0]),
            spec_hash
        );
    }

    #[test]
    fn past_its_deadline_everything_stops() {
        let mut p = pod("Always", &[], &["app", "done"]);
        p.spec.as_mut().unwrap().active_deadline_seconds = Some(50);
        p.status.as_mut().unwrap().start_time = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            jiff::Timestamp::from_second(T0).unwrap(),
        ));
        let rt = PodRuntime {
            sandboxes: vec![sb("sb0", 0, true), sb("old", 0, false)],
            containers: vec![running("c0", "app", 0), exited("d0", "done", 0, 0, 5)],
        };
        let a = compute_with(&p, &rt, &[], &mut Backoff::default(), at(49));
        assert!(!a.deadline_exceeded);
        let a = compute_with(&p, &rt, &[], &mut Backoff::default(), at(50));
        assert!(a.deadline_exceeded);
        assert_eq!(kills(&a), vec![("c0", KillReason::DeadlineExceeded)]);
        assert_eq!(a.stop_sandboxes, vec!["sb0".to_string(), "old".to_string()]);
        assert!(a.containers.is_empty() && a.init.is_empty());
    }

    #[test]
    fn a_finished_pod_only_gives_back_its_sandbox() {
        for phase in ["Succeeded", "Failed"] {
            let mut p = pod("Never", &[], &["app"]);
            p.status.as_mut().unwrap().phase = Some(phase.into());
            let rt = PodRuntime {
                sandboxes: vec![sb("sb0", 0, true), sb("old", 0, false)],
                containers: vec![exited("c0", "app", 0, 0, 5)],
            };
            let a = compute(&p, &rt);
            assert!(a.finished, "{phase}");
            assert_eq!(a.stop_sandboxes, vec!["sb0".to_string()]);
            assert!(a.kill.is_empty() && a.containers.is_empty() && a.remove.is_empty());
        }
    }

    #[test]
    fn a_running_container_keeps_its_previous_run_and_older_ones_go() {
        let p = pod("Always", &[], &["app"]);
        let rt = runtime(vec![
            running("c2", "app", 2),
            exited("c1", "app", 1, 1, 20),
            exited("c0", "app", 0, 1, 10),
        ]);
        let a = compute(&p, &rt);
        let plan = &a.containers[0];
        assert_eq!(plan.latest.as_deref(), Some("c2"));
        assert_eq!(plan.previous.as_deref(), Some("c1"));
        assert_eq!(plan.restarts, 2);
        assert_eq!(plan.start, None);
        assert_eq!(a.remove, vec!["c0".to_string()]);
    }

    #[test]
    fn deadline_counts_from_start_time() {
        let pod: Pod = serde_json::from_value(json!({"metadata": {"name": "p"},
            "spec": {"containers": [], "activeDeadlineSeconds": 5},
            "status": {"startTime": "2030-01-01T00:00:00Z"}}))
        .unwrap();
        let at = |s: &str| s.parse::<jiff::Timestamp>().unwrap();
        assert!(!past_deadline(&pod, at("2030-01-01T00:00:04Z")));
        assert!(past_deadline(&pod, at("2030-01-01T00:00:05Z")));
        let mut no_start = pod.clone();
        no_start.status = None;
        assert!(!past_deadline(&no_start, at("2031-01-01T00:00:00Z")));
        assert_eq!(
            deadline_left(&pod, at("2030-01-01T00:00:03.5Z")),
            Some(Duration::from_millis(1500))
        );
        assert_eq!(
            deadline_left(&pod, at("2030-01-01T00:01:00Z")),
            Some(Duration::ZERO)
        );
        assert_eq!(deadline_left(&no_start, at("2030-01-01T00:00:00Z")), None);
    }
}
