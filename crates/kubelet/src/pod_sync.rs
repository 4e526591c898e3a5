//! Carries out a pod's actions (`actions::PodActions`) against a `Runtime` (upstream's
//! `SyncPod`, `killPodWithSyncResult`, `killContainer`, `startContainer`). What needs the
//! API, the node or the filesystem (events, images and container configs, hooks run in the
//! container) goes through `Hooks`, so the executor runs against `FakeRuntime` in tests.

use std::collections::HashMap;
use std::time::{Duration, Instant, SystemTime};

use async_trait::async_trait;
use k8s_cri::v1 as cri;
use k8s_openapi::api::core::v1::{Container, LifecycleHandler, Pod};

use crate::actions::{self, ContainerPlan, PodActions, PodRuntime, SandboxAction};
use crate::runtime::{self, Runtime};
use crate::Error;

/// The shortest stop a grace period leaves a container (upstream `minimumGracePeriodInSeconds`).
const MIN_GRACE: Duration = Duration::from_secs(2);
/// How long a postStart hook may take (upstream waits for ever; a bound keeps the pod's worker
/// from hanging on a hook that never returns).
const POST_START_LIMIT: Duration = Duration::from_secs(300);

/// Where a pod's containers start.
pub struct Place<'a> {
    pub sandbox_id: &'a str,
    pub sandbox_config: &'a cri::PodSandboxConfig,
    pub pod_ip: &'a str,
}

/// What the executor asks of the agent.
#[async_trait]
pub trait Hooks: Send + Sync {
    /// Record an Event about the pod.
    async fn event(&self, pod: &Pod, type_: &str, reason: &str, message: &str);
    /// Before a new sandbox runs: its log directory, the pod's cgroup; the runtime handler of
    /// the pod's RuntimeClass ("" for the runtime's default).
    async fn prepare_sandbox(&self, pod: &Pod, config: &cri::PodSandboxConfig) -> Result<String, Error>;
    /// A new sandbox has its address, and no container of the pod has started yet: what
    /// must police the pod's traffic (network policy) takes it in here.
    async fn sandbox_network_ready(&self, _pod: &Pod, _pod_ip: &str) {}
    /// The CRI config of container `c`'s run `attempt` (its image pulled, its env and mounts
    /// made); or the reason and message it waits with.
    async fn container_config(
        &self,
        pod: &Pod,
        c: &Container,
        attempt: u32,
        place: &Place<'_>,
    ) -> Result<cri::ContainerConfig, (String, String)>;
    /// Container `id` of the pod was created with `config`.
    fn created(&self, pod: &Pod, id: &str, config: &cri::ContainerConfig);
    /// Run a lifecycle hook in container `id` within `limit`; the failure's message.
    async fn run_hook(
        &self,
        pod: &Pod,
        c: &Container,
        hook: &LifecycleHandler,
        id: &str,
        pod_ip: &str,
        limit: Duration,
    ) -> Result<(), String>;
}

/// The grace period a pod's containers get to stop: the deletion's, else the spec's (30 s).
pub fn pod_grace(pod: &Pod) -> i64 {
    pod.metadata
        .deletion_timestamp
        .as_ref()
        .and(pod.metadata.deletion_grace_period_seconds)
        .or_else(|| pod.spec.as_ref().and_then(|s| s.termination_grace_period_seconds))
        .unwrap_or(30)
}

fn spec_container<'p>(pod: &'p Pod, name: &str) -> Option<&'p Container> {
    pod.spec.as_ref().and_then(|s| {
        s.containers
            .iter()
            .chain(s.init_containers.iter().flatten())
            .find(|c| c.name == name)
    })
}

/// Ephemeral container `name` of `pod` as a Container (the fields they share; upstream casts
/// `EphemeralContainerCommon` to `Container` the same way).
pub fn ephemeral_container(pod: &Pod, name: &str) -> Option<Container> {
    let ec = pod
        .spec
        .as_ref()?
        .ephemeral_containers
        .iter()
        .flatten()
        .find(|c| c.name == name)?;
    let mut v = serde_json::to_value(ec).ok()?;
    if let Some(o) = v.as_object_mut() {
        o.remove("targetContainerName");
    }
    serde_json::from_value(v).ok()
}

/// What applying the actions gave.
#[derive(Debug, Default)]
pub struct Applied {
    pub sandbox_id: String,
    pub pod_ip: String,
    /// Every address the sandbox got (one per family on a dual-stack node), `pod_ip` first.
    pub pod_ips: Vec<String>,
    /// Containers that did not start, or wait for their back-off: (reason, message) by name.
    pub waiting: HashMap<String, (String, String)>,
    /// The earliest back-off's end.
    pub wake_at: Option<SystemTime>,
}

pub struct PodSync<'a> {
    pub runtime: &'a dyn Runtime,
    pub hooks: &'a dyn Hooks,
}

impl PodSync<'_> {
    pub async fn snapshot(&self, uid: &str) -> Result<PodRuntime, Error> {
        runtime::pod_runtime(self.runtime, uid).await
    }

    /// Stop container `id` (container `name` of `pod`) as upstream `killContainer`: the
    /// `Killing` event (with `message`, or "Stopping container <name>"), its preStop hook, then
    /// the stop signal with what the hook left of the grace period (`grace`, or the pod's).
    pub async fn kill_container(
        &self,
        pod: Option<&Pod>,
        name: &str,
        id: &str,
        grace: Option<i64>,
        message: Option<&str>,
    ) {
        let secs = grace.or_else(|| pod.map(pod_grace)).unwrap_or(10).max(0);
        let grace = Duration::from_secs(secs as u64);
        let began = Instant::now();
        if let Some((pod, c)) = pod.and_then(|p| spec_container(p, name).map(|c| (p, c))) {
            let message = message
                .map(String::from)
                .unwrap_or_else(|| format!("Stopping container {name}"));
            self.hooks.event(pod, "Normal", "Killing", &message).await;
            if let Some(hook) = c.lifecycle.as_ref().and_then(|l| l.pre_stop.as_ref()) {
                let pod_ip = pod
                    .status
                    .as_ref()
                    .and_then(|s| s.pod_ip.clone())
                    .unwrap_or_default();
                if let Err(m) = self.hooks.run_hook(pod, c, hook, id, &pod_ip, grace).await {
                    self.hooks.event(pod, "Warning", "FailedPreStopHook", &m).await;
                }
            }
        }
        let left = grace.saturating_sub(began.elapsed()).max(MIN_GRACE);
        if let Err(e) = self.runtime.stop_container(id, left.as_secs() as i64).await {
            tracing::warn!(container = %name, error = %e, "agent: could not stop container");
        }
    }

    /// Stop and remove everything the runtime runs for pod `uid`. With the pod at hand, its
    /// containers stop as upstream's `killPod`: all at once, each after its preStop hook,
    /// within the pod's grace period; without it (an orphan, or the agent shutting down), with
    /// 10 s each.
    pub async fn kill_pod(&self, uid: &str, pod: Option<&Pod>) -> Result<(), Error> {
        self.stop_containers(uid, pod).await?;
        for sb in self.runtime.list_sandboxes(Some(uid)).await? {
            for c in self.runtime.list_containers(Some(&sb.id)).await? {
                let _ = self.runtime.remove_container(&c.id).await;
            }
            self.runtime.stop_sandbox(&sb.id).await?;
            self.runtime.remove_sandbox(&sb.id).await?;
        }
        Ok(())
    }

    /// Stop every running container of pod `uid`, all at once, each with its grace period
    /// (and preStop hook); the containers stay, so their final statuses can be read.
    pub async fn stop_containers(&self, uid: &str, pod: Option<&Pod>) -> Result<(), Error> {
        for sb in self.runtime.list_sandboxes(Some(uid)).await? {
            let containers = self.runtime.list_containers(Some(&sb.id)).await?;
            let stops = containers
                .iter()
                .filter(|c| c.state == cri::ContainerState::ContainerRunning as i32)
                .map(|c| {
                    let name = c.metadata.as_ref().map(|m| m.name.clone()).unwrap_or_default();
                    async move { self.kill_container(pod, &name, &c.id, None, None).await }
                });
            futures::future::join_all(stops).await;
        }
        Ok(())
    }

    /// The actions' kills, all at once.
    pub async fn kill(&self, pod: &Pod, actions: &PodActions) {
        let kills = actions.kill.iter().map(|k| async move {
            let message = k.message();
            self.kill_container(Some(pod), &k.name, &k.id, k.grace, message.as_deref())
                .await
        });
        futures::future::join_all(kills).await;
    }

    pub async fn stop_sandboxes(&self, ids: &[String]) -> Result<(), Error> {
        for id in ids {
            self.runtime.stop_sandbox(id).await?;
        }
        Ok(())
    }

    /// Run a syncing pod's actions: kills, then the sandbox, then the containers to start (init
    /// containers first), the back-offs' events; the instances no longer reported go.
    pub async fn apply(
        &self,
        pod: &Pod,
        actions: &PodActions,
        sandbox_config: &cri::PodSandboxConfig,
    ) -> Result<Applied, Error> {
        self.kill(pod, actions).await;
        // A sandbox that changed: the dead ones stop first (their network goes).
        self.stop_sandboxes(&actions.stop_sandboxes).await?;
        let sandbox_id = match &actions.sandbox {
            SandboxAction::Keep { id, .. } => id.clone(),
            SandboxAction::Create { .. } => {
                // The journey's sandbox stage (`r8s trace`): the pause container, and the
                // network CNI gives it inside the runtime's RunPodSandbox.
                let stage = tracing::info_span!(
                    target: "journey::kubelet",
                    "cri.run_pod_sandbox",
                    handler = tracing::field::Empty,
                    ip = tracing::field::Empty,
                    error = tracing::field::Empty,
                );
                let run = async {
                    let handler = self.hooks.prepare_sandbox(pod, sandbox_config).await?;
                    if !handler.is_empty() {
                        tracing::Span::current().record("handler", handler.as_str());
                    }
                    let id = self.runtime.run_sandbox(sandbox_config, &handler).await?;
                    let status = self.runtime.sandbox_status(&id).await?;
                    let ips = runtime::sandbox_ips(status.as_ref().and_then(|s| s.network.as_ref()));
                    if let Some(ip) = ips.first() {
                        tracing::Span::current().record("ip", ip.as_str());
                    }
                    Ok::<_, Error>(id)
                };
                let ran = tracing::Instrument::instrument(run, stage.clone()).await;
                if let Err(e) = &ran {
                    stage.record("error", tracing::field::display(e));
                }
                let id = ran?;
                tracing::Span::current().record("decision", "ran the pod's sandbox");
                id
            }
        };
        let status = self.runtime.sandbox_status(&sandbox_id).await?;
        let pod_ips = runtime::sandbox_ips(status.as_ref().and_then(|s| s.network.as_ref()));
        let pod_ip = pod_ips.first().cloned().unwrap_or_default();
        if matches!(actions.sandbox, SandboxAction::Create { .. }) && !pod_ip.is_empty() {
            self.hooks.sandbox_network_ready(pod, &pod_ip).await;
        }
        let mut applied = Applied {
            sandbox_id,
            pod_ip,
            pod_ips,
            ..Default::default()
        };
        let place = Place {
            sandbox_id: &applied.sandbox_id,
            sandbox_config,
            pod_ip: &applied.pod_ip,
        };
        let mut waiting = HashMap::new();
        let mut wake_at: Option<SystemTime> = None;
        // Ephemeral containers first, so a debugger starts even while an init container fails.
        for plan in &actions.ephemeral {
            let Some(attempt) = plan.start else { continue };
            let Some(c) = ephemeral_container(pod, &plan.name) else {
                continue;
            };
            if let (Some(target), None) = (&plan.target, &plan.target_id) {
                let message = format!("unable to find target container {target}");
                self.hooks
                    .event(pod, "Warning", "Failed", &format!("Error: {message}"))
                    .await;
                waiting.insert(plan.name.clone(), ("CreateContainerConfigError".into(), message));
                continue;
            }
            if let Err(w) = self
                .start_container(pod, &c, attempt, &place, plan.target_id.as_deref())
                .await
            {
                waiting.insert(plan.name.clone(), w);
            }
        }
        for plan in actions.init.iter().chain(&actions.containers) {
            if let Some(b) = plan.back_off {
                wake_at = Some(wake_at.map_or(b.until, |w| w.min(b.until)));
                waiting.insert(plan.name.clone(), self.back_off(pod, plan, b.delay).await);
            }
            let Some(attempt) = plan.start else { continue };
            let Some(c) = spec_container(pod, &plan.name) else {
                continue;
            };
            if let Err(w) = self.start_container(pod, c, attempt, &place, None).await {
                waiting.insert(plan.name.clone(), w);
            }
        }
        for id in &actions.remove {
            let _ = self.runtime.remove_container(id).await;
        }
        applied.waiting = waiting;
        applied.wake_at = wake_at;
        Ok(applied)
    }

    /// A restart that waits: the BackOff event, and the container's CrashLoopBackOff reason.
    async fn back_off(&self, pod: &Pod, plan: &ContainerPlan, delay: Duration) -> (String, String) {
        let pod_ref = crate::lifecycle::pod_ref(pod);
        let message = format!(
            "Back-off restarting failed container {} in pod {pod_ref}",
            plan.name
        );
        self.hooks.event(pod, "Warning", "BackOff", &message).await;
        (
            "CrashLoopBackOff".into(),
            format!(
                "back-off {}s restarting failed container={} pod={pod_ref}",
                delay.as_secs(),
                plan.name,
            ),
        )
    }

    /// Create and start run `attempt` of container `c`, then its postStart hook, whose failure
    /// kills it (upstream `startContainer`); or the reason and message it waits with. An
    /// ephemeral container with a `target` joins that container's process namespace when the
    /// pod's containers each have their own.
    pub async fn start_container(
        &self,
        pod: &Pod,
        c: &Container,
        attempt: u32,
        place: &Place<'_>,
        target: Option<&str>,
    ) -> Result<(), (String, String)> {
        let mut config = self.hooks.container_config(pod, c, attempt, place).await?;
        if let Some(target) = target {
            let ns = config
                .linux
                .as_mut()
                .and_then(|l| l.security_context.as_mut())
                .and_then(|s| s.namespace_options.as_mut());
            if let Some(ns) = ns.filter(|ns| ns.pid == cri::NamespaceMode::Container as i32) {
                ns.pid = cri::NamespaceMode::Target as i32;
                ns.target_id = target.to_owned();
            }
        }
        config
            .annotations
            .insert(actions::CONTAINER_HASH.to_string(), actions::container_hash(c));
        let stage = tracing::info_span!(
            target: "journey::kubelet",
            "cri.create_container",
            container = %c.name,
            error = tracing::field::Empty,
        );
        let created = tracing::Instrument::instrument(
            self.runtime
                .create_container(place.sandbox_id, config.clone(), place.sandbox_config),
            stage.clone(),
        )
        .await
        .map_err(|e| ("CreateContainerError".to_string(), runtime::message(&e)));
        if let Err((_, message)) = &created {
            stage.record("error", message.as_str());
        }
        drop(stage);
        let id = created?;
        self.hooks.created(pod, &id, &config);
        // Upstream's words (kuberuntime's startContainer), which `kubectl describe` shows.
        let created = format!("Created container: {}", c.name);
        self.hooks.event(pod, "Normal", "Created", &created).await;
        let stage = tracing::info_span!(
            target: "journey::kubelet",
            "cri.start_container",
            container = %c.name,
            error = tracing::field::Empty,
        );
        let started = tracing::Instrument::instrument(self.runtime.start_container(&id), stage.clone())
            .await
            .map_err(|e| ("RunContainerError".to_string(), runtime::message(&e)));
        if let Err((_, message)) = &started {
            stage.record("error", message.as_str());
        }
        drop(stage);
        started?;
        tracing::Span::current().record(
            "decision",
            tracing::field::display(format_args!("started container {}", c.name)),
        );
        let started = format!("Started container {}", c.name);
        self.hooks.event(pod, "Normal", "Started", &started).await;
        if let Some(hook) = c.lifecycle.as_ref().and_then(|l| l.post_start.as_ref()) {
            let ran = self
                .hooks
                .run_hook(pod, c, hook, &id, place.pod_ip, POST_START_LIMIT)
                .await;
            if let Err(message) = ran {
                self.hooks
                    .event(pod, "Warning", "FailedPostStartHook", &message)
                    .await;
                self.kill_container(Some(pod), &c.name, &id, None, Some("FailedPostStartHook"))
                    .await;
                return Err(("PostStartHookError".into(), message));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use serde_json::json;

    use super::*;
    use crate::actions::{compute_pod_actions, Context};
    use crate::backoff::Backoff;
    use crate::prober::Kind;
    use crate::runtime::fake::FakeRuntime;

    /// Hooks that record the events and make plain configs.
    #[derive(Default)]
    struct Recorder {
        events: Mutex<Vec<String>>,
    }

    #[async_trait]
    impl Hooks for Recorder {
        async fn event(&self, _pod: &Pod, _type: &str, reason: &str, message: &str) {
            self.events.lock().unwrap().push(format!("{reason}: {message}"));
        }
        async fn prepare_sandbox(
            &self,
            _pod: &Pod,
            _config: &cri::PodSandboxConfig,
        ) -> Result<String, Error> {
            Ok(String::new())
        }
        async fn container_config(
            &self,
            pod: &Pod,
            c: &Container,
            attempt: u32,
            _place: &Place<'_>,
        ) -> Result<cri::ContainerConfig, (String, String)> {
            if c.image.as_deref() == Some("missing") {
                return Err(("ErrImagePull".into(), "not found".into()));
            }
            Ok(cri::ContainerConfig {
                metadata: Some(cri::ContainerMetadata {
                    name: c.name.clone(),
                    attempt,
                }),
                labels: [(
                    crate::spec::POD_UID.to_string(),
                    pod.metadata.uid.clone().unwrap_or_default(),
                )]
                .into(),
                ..Default::default()
            })
        }
        fn created(&self, _pod: &Pod, _id: &str, _config: &cri::ContainerConfig) {}
        async fn run_hook(
            &self,
            _pod: &Pod,
            _c: &Container,
            _hook: &LifecycleHandler,
            _id: &str,
            _pod_ip: &str,
            _limit: Duration,
        ) -> Result<(), String> {
            Ok(())
        }
    }

    fn pod(restart: &str, inits: &[&str], apps: &[&str]) -> Pod {
        let c = |n: &&str| json!({"name": n, "image": "busybox"});
        serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "default", "uid": "u1"},
            "spec": {"restartPolicy": restart,
                "initContainers": inits.iter().map(c).collect::<Vec<_>>(),
                "containers": apps.iter().map(c).collect::<Vec<_>>()},
            "status": {"phase": "Pending"},
        }))
        .unwrap()
    }

    fn sandbox_config(pod: &Pod) -> cri::PodSandboxConfig {
        cri::PodSandboxConfig {
            metadata: Some(cri::PodSandboxMetadata {
                name: "p".into(),
                uid: "u1".into(),
                namespace: "default".into(),
                attempt: 0,
            }),
            labels: [(
                crate::spec::POD_UID.to_string(),
                pod.metadata.uid.clone().unwrap_or_default(),
            )]
            .into(),
            ..Default::default()
        }
    }

    /// One sync of a running pod: snapshot, actions, apply.
    async fn sync(
        exec: &PodSync<'_>,
        pod: &Pod,
        backoff: &mut Backoff,
        probes: &[(&str, Kind)],
    ) -> (PodActions, Applied) {
        let rt = exec.snapshot("u1").await.unwrap();
        let failed = probes.iter().map(|(id, k)| (id.to_string(), *k)).collect();
        let actions = compute_pod_actions(
            pod,
            &rt,
            &mut Context {
                failed_probes: &failed,
                backoff,
                now: SystemTime::now(),
            },
        );
        let applied = exec.apply(pod, &actions, &sandbox_config(pod)).await.unwrap();
        (actions, applied)
    }

    #[tokio::test]
    async fn a_fresh_pod_gets_its_sandbox_then_init_containers_then_containers() {
        let fake = FakeRuntime::default();
        let hooks = Recorder::default();
        let exec = PodSync {
            runtime: &fake,
            hooks: &hooks,
        };
        let p = pod("Always", &["init"], &["app", "side"]);
        let mut backoff = Backoff::default();
        let (_, applied) = sync(&exec, &p, &mut backoff, &[]).await;
        assert_eq!(
            fake.calls(),
            [
                "run_sandbox sb1",
                "create_container init",
                "start_container init-2"
            ]
        );
        assert_eq!(applied.sandbox_id, "sb1");
        assert_eq!(applied.pod_ip, "10.42.0.1");
        // Running: nothing more happens.
        fake.clear_calls();
        let (a, _) = sync(&exec, &p, &mut backoff, &[]).await;
        assert!(!a.initialized);
        assert!(fake.calls().is_empty(), "{:?}", fake.calls());
        // Done: the app containers start in the same sandbox.
        fake.exit("init-2", 0);
        let (a, _) = sync(&exec, &p, &mut backoff, &[]).await;
        assert!(a.initialized);
        assert_eq!(
            fake.calls(),
            [
                "create_container app",
                "start_container app-3",
                "create_container side",
                "start_container side-4"
            ]
        );
        // Each created with the hash of its spec.
        let snapshot = exec.snapshot("u1").await.unwrap();
        let app = snapshot.container("app-3").unwrap();
        assert_eq!(
            app.hash,
            Some(actions::container_hash(&p.spec.as_ref().unwrap().containers[0]))
        );
        assert_eq!(fake.sandbox_count(), 1);
    }

    #[tokio::test]
    async fn an_exited_container_restarts_only_as_its_policy_says() {
        for (policy, restarted) in [("Never", false), ("OnFailure", true), ("Always", true)] {
            let fake = FakeRuntime::default();
            let hooks = Recorder::default();
            let exec = PodSync {
                runtime: &fake,
                hooks: &hooks,
            };
            let p = pod(policy, &[], &["app"]);
            let mut backoff = Backoff::default();
            sync(&exec, &p, &mut backoff, &[]).await;
            let id = fake.id_of("app").unwrap();
            fake.exit(&id, 1);
            fake.clear_calls();
            let (a, _) = sync(&exec, &p, &mut backoff, &[]).await;
            let creates: Vec<String> = fake
                .calls()
                .into_iter()
                .filter(|c| c.starts_with("create_container"))
                .collect();
            assert_eq!(creates.len(), usize::from(restarted), "{policy}");
            assert_eq!(a.containers[0].previous.as_deref(), Some(id.as_str()), "{policy}");
            assert_eq!(fake.container_count(), 1 + usize::from(restarted), "{policy}");
        }
    }

    #[tokio::test]
    async fn a_crash_loop_waits_with_crash_loop_back_off() {
        let fake = FakeRuntime::default();
        let hooks = Recorder::default();
        let exec = PodSync {
            runtime: &fake,
            hooks: &hooks,
        };
        let p = pod("Always", &[], &["app"]);
        let mut backoff = Backoff::default();
        sync(&exec, &p, &mut backoff, &[]).await;
        // The fake's clock is far in the past: the exits are recorded as now.
        let now = SystemTime::now();
        let first = fake.id_of("app").unwrap();
        fake.exit(&first, 1);
        let rt = exec.snapshot("u1").await.unwrap();
        let mut rt2 = rt.clone();
        for c in &mut rt2.containers {
            c.started_at = now.duration_since(SystemTime::UNIX_EPOCH).unwrap().as_nanos() as i64;
            c.finished_at = c.started_at;
        }
        let none = HashMap::new();
        let mut cx = Context {
            failed_probes: &none,
            backoff: &mut backoff,
            now,
        };
        let a = compute_pod_actions(&p, &rt2, &mut cx);
        assert_eq!(a.containers[0].start, Some(1));
        exec.apply(&p, &a, &sandbox_config(&p)).await.unwrap();
        let second = fake.id_of("app").unwrap();
        fake.exit(&second, 1);
        let mut rt3 = exec.snapshot("u1").await.unwrap();
        for c in &mut rt3.containers {
            c.started_at = now.duration_since(SystemTime::UNIX_EPOCH).unwrap().as_nanos() as i64;
            c.finished_at = c.started_at;
        }
        fake.clear_calls();
        let a = compute_pod_actions(&p, &rt3, &mut cx);
        let applied = exec.apply(&p, &a, &sandbox_config(&p)).await.unwrap();
        assert!(
            fake.calls().iter().all(|c| !c.starts_with("create")),
            "{:?}",
            fake.calls()
        );
        let (reason, message) = &applied.waiting["app"];
        assert_eq!(reason, "CrashLoopBackOff");
        assert!(
            message.starts_with("back-off 10s restarting failed container=app"),
            "{message}"
        );
        assert_eq!(applied.wake_at, Some(now + crate::backoff::INITIAL));
        assert!(hooks
            .events
            .lock()
            .unwrap()
            .iter()
            .any(|e| e.starts_with("BackOff: Back-off restarting failed container app")));
    }

    #[tokio::test]
    async fn a_failed_liveness_probe_kills_then_restarts() {
        let fake = FakeRuntime::default();
        let hooks = Recorder::default();
        let exec = PodSync {
            runtime: &fake,
            hooks: &hooks,
        };
        let p = pod("Always", &[], &["app"]);
        let mut backoff = Backoff::default();
        sync(&exec, &p, &mut backoff, &[]).await;
        let id = fake.id_of("app").unwrap();
        fake.clear_calls();
        sync(&exec, &p, &mut backoff, &[(id.as_str(), Kind::Liveness)]).await;
        assert_eq!(
            fake.calls(),
            [
                format!("stop_container {id}"),
                "create_container app".to_string(),
                "start_container app-3".to_string()
            ]
        );
        // Started, killed, started again: each step an event with upstream's words.
        assert_eq!(
            hooks.events.lock().unwrap().as_slice(),
            [
                "Created: Created container: app",
                "Started: Started container app",
                "Killing: Container app failed liveness probe, will be restarted",
                "Created: Created container: app",
                "Started: Started container app"
            ]
        );
    }

    #[tokio::test]
    async fn a_container_that_cannot_start_waits_with_the_reason() {
        let fake = FakeRuntime::default();
        let hooks = Recorder::default();
        let exec = PodSync {
            runtime: &fake,
            hooks: &hooks,
        };
        let mut p = pod("Always", &[], &["app"]);
        p.spec.as_mut().unwrap().containers[0].image = Some("missing".into());
        let (_, applied) = sync(&exec, &p, &mut Backoff::default(), &[]).await;
        assert_eq!(
            applied.waiting["app"],
            ("ErrImagePull".to_string(), "not found".to_string())
        );
        assert_eq!(fake.calls(), ["run_sandbox sb1"]);
    }

    #[tokio::test]
    async fn a_deleted_pod_stops_its_containers_then_its_sandbox() {
        let fake = FakeRuntime::default();
        let hooks = Recorder::default();
        let exec = PodSync {
            runtime: &fake,
            hooks: &hooks,
        };
        let p = pod("Always", &[], &["a", "b"]);
        sync(&exec, &p, &mut Backoff::default(), &[]).await;
        fake.clear_calls();
        exec.kill_pod("u1", Some(&p)).await.unwrap();
        let calls = fake.calls();
        let mut stops: Vec<&str> = calls[..2].iter().map(String::as_str).collect();
        stops.sort();
        assert_eq!(stops, ["stop_container a-2", "stop_container b-3"]);
        assert_eq!(
            &calls[2..],
            [
                "remove_container a-2",
                "remove_container b-3",
                "stop_sandbox sb1",
                "remove_sandbox sb1"
            ]
        );
        assert_eq!((fake.sandbox_count(), fake.container_count()), (0, 0));
        let mut events: Vec<String> = hooks
            .events
            .lock()
            .unwrap()
            .iter()
            .filter(|e| e.starts_with("Killing"))
            .cloned()
            .collect();
        events.sort();
        assert_eq!(
            events,
            ["Killing: Stopping container a", "Killing: Stopping container b"]
        );
    }

    #[tokio::test]
    async fn a_dead_sandbox_is_replaced_and_its_containers_start_again() {
        let fake = FakeRuntime::default();
        let hooks = Recorder::default();
        let exec = PodSync {
            runtime: &fake,
            hooks: &hooks,
        };
        let p = pod("Always", &[], &["app"]);
        let mut backoff = Backoff::default();
        sync(&exec, &p, &mut backoff, &[]).await;
        fake.sandbox_dies("sb1");
        fake.clear_calls();
        let (_, applied) = sync(&exec, &p, &mut backoff, &[]).await;
        assert_eq!(
            fake.calls(),
            [
                "stop_container app-2",
                "stop_sandbox sb1",
                "run_sandbox sb3",
                "create_container app",
                "start_container app-4"
            ]
        );
        assert_eq!(applied.sandbox_id, "sb3");
    }
}
