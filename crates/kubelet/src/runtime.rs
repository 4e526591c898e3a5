//! The container runtime as the pod sync uses it: sandboxes and containers (upstream's
//! `RuntimeService`). `CriRuntime` speaks CRI v1 to containerd; `fake::FakeRuntime` (tests) keeps
//! them in memory and records the calls.

use async_trait::async_trait;
use k8s_cri::v1 as cri;

use crate::actions::{self, PodRuntime, RuntimeContainer, Sandbox, State};
use crate::cri::Cri;
use crate::spec;
use crate::Error;

#[async_trait]
pub trait Runtime: Send + Sync {
    /// The sandboxes of pod `pod_uid`, or all.
    async fn list_sandboxes(&self, pod_uid: Option<&str>) -> Result<Vec<cri::PodSandbox>, Error>;
    /// The containers of sandbox `sandbox_id`, or all.
    async fn list_containers(&self, sandbox_id: Option<&str>) -> Result<Vec<cri::Container>, Error>;
    async fn sandbox_status(&self, id: &str) -> Result<Option<cri::PodSandboxStatus>, Error>;
    async fn container_status(&self, id: &str) -> Result<Option<cri::ContainerStatus>, Error>;
    /// Run a sandbox; its id.
    /// Run a pod sandbox with the runtime's `handler` (a RuntimeClass's; "" for the default).
    async fn run_sandbox(&self, config: &cri::PodSandboxConfig, handler: &str) -> Result<String, Error>;
    async fn stop_sandbox(&self, id: &str) -> Result<(), Error>;
    async fn remove_sandbox(&self, id: &str) -> Result<(), Error>;
    /// Create a container in a sandbox; its id.
    async fn create_container(
        &self,
        sandbox_id: &str,
        config: cri::ContainerConfig,
        sandbox_config: &cri::PodSandboxConfig,
    ) -> Result<String, Error>;
    async fn start_container(&self, id: &str) -> Result<(), Error>;
    /// Stop a container, killing it after `timeout` seconds.
    async fn stop_container(&self, id: &str, timeout: i64) -> Result<(), Error>;
    async fn remove_container(&self, id: &str) -> Result<(), Error>;
    async fn update_container_resources(
        &self,
        id: &str,
        linux: cri::LinuxContainerResources,
    ) -> Result<(), Error>;
    /// What the runtime holds of `image` (None: not present).
    async fn image_status(&self, image: &str) -> Result<Option<cri::Image>, Error>;
    /// Pull `image` with `auth` for a pod of `sandbox_config`; the image's reference.
    async fn pull_image(
        &self,
        image: &str,
        auth: Option<cri::AuthConfig>,
        sandbox_config: &cri::PodSandboxConfig,
    ) -> Result<String, Error>;
    /// The images the runtime holds.
    async fn list_images(&self) -> Result<Vec<cri::Image>, Error>;
    /// Run a command in container `req.container_id` to its end (probes and hooks).
    async fn exec_sync(&self, req: cri::ExecSyncRequest) -> Result<cri::ExecSyncResponse, Error>;
    /// A stream that yields when the runtime's sandboxes or containers change, for runtimes
    /// that report changes (`runtime_events`); the PLEG then relists on it instead of every
    /// second. An error: relist every second.
    async fn changes(&self) -> Result<crate::runtime_events::Changes, Error> {
        Err(Error::Other("this runtime reports no changes".into()))
    }
}

/// An error's message as the runtime gave it (a gRPC status's message alone).
pub fn message(e: &Error) -> String {
    match e {
        Error::Status(s) => s.message().to_string(),
        e => e.to_string(),
    }
}

/// What the runtime runs of pod `uid`, as plain data: its sandboxes, its containers with the
/// ends of those not running.
pub async fn pod_runtime(rt: &dyn Runtime, uid: &str) -> Result<PodRuntime, Error> {
    let mut out = PodRuntime::default();
    for sb in rt.list_sandboxes(Some(uid)).await? {
        for c in rt.list_containers(Some(&sb.id)).await? {
            // The end of a container that is not running (its exit code and times).
            let status = if c.state == cri::ContainerState::ContainerRunning as i32 {
                None
            } else {
                rt.container_status(&c.id).await.ok().flatten()
            };
            out.containers
                .push(runtime_container(&sb.id, &c, status.as_ref()));
        }
        out.sandboxes.push(sandbox(&sb));
    }
    Ok(out)
}

/// Container `c` of sandbox `sandbox_id` as plain data, with the end `status` reports for one
/// not running.
pub fn runtime_container(
    sandbox_id: &str,
    c: &cri::Container,
    status: Option<&cri::ContainerStatus>,
) -> RuntimeContainer {
    let state = match cri::ContainerState::try_from(c.state) {
        Ok(cri::ContainerState::ContainerCreated) => State::Created,
        Ok(cri::ContainerState::ContainerRunning) => State::Running,
        Ok(cri::ContainerState::ContainerExited) => State::Exited,
        _ => State::Unknown,
    };
    let end = status.filter(|_| state != State::Running);
    RuntimeContainer {
        id: c.id.clone(),
        sandbox_id: sandbox_id.to_string(),
        name: c.metadata.as_ref().map(|m| m.name.clone()).unwrap_or_default(),
        attempt: c.metadata.as_ref().map(|m| m.attempt).unwrap_or(0),
        state,
        exit_code: end.map_or(0, |s| s.exit_code),
        started_at: end.map_or(0, |s| s.started_at),
        finished_at: end.map_or(0, |s| s.finished_at),
        hash: c.annotations.get(actions::CONTAINER_HASH).cloned(),
    }
}

/// Sandbox `sb` as plain data.
pub fn sandbox(sb: &cri::PodSandbox) -> Sandbox {
    Sandbox {
        id: sb.id.clone(),
        attempt: sb.metadata.as_ref().map(|m| m.attempt).unwrap_or(0),
        ready: sb.state == cri::PodSandboxState::SandboxReady as i32,
        created_at: sb.created_at,
    }
}

/// A sandbox's addresses as the runtime reports them (from the CNI result; upstream
/// `determinePodSandboxIPs`): the primary first, then the additional ones. If any of them does
/// not parse as an IP, none is taken (upstream logs and drops them all).
pub fn sandbox_ips(network: Option<&cri::PodSandboxNetworkStatus>) -> Vec<String> {
    let Some(network) = network else {
        return Vec::new();
    };
    let ips: Vec<&str> = std::iter::once(network.ip.as_str())
        .filter(|ip| !ip.is_empty())
        .chain(network.additional_ips.iter().map(|a| a.ip.as_str()))
        .collect();
    if let Some(bad) = ips.iter().find(|ip| ip.parse::<std::net::IpAddr>().is_err()) {
        tracing::info!(ip = %bad, "pod sandbox reported an unparseable IP; none of its IPs is used");
        return Vec::new();
    }
    ips.into_iter().map(str::to_string).collect()
}

/// The pod IPs a status carries (upstream's kubelet `sortPodIPs`): the first address of the
/// node's primary family, then the first of the other family; no more than one of each.
pub fn status_pod_ips(ips: &[String], node_primary_ipv6: bool) -> Vec<String> {
    let of_family = |v6: bool| {
        ips.iter()
            .find(|ip| ip.parse::<std::net::IpAddr>().is_ok_and(|a| a.is_ipv6() == v6))
    };
    of_family(node_primary_ipv6)
        .into_iter()
        .chain(of_family(!node_primary_ipv6))
        .cloned()
        .collect()
}

/// The runtime over CRI.
#[derive(Clone)]
pub struct CriRuntime(pub Cri);

#[async_trait]
impl Runtime for CriRuntime {
    async fn list_sandboxes(&self, pod_uid: Option<&str>) -> Result<Vec<cri::PodSandbox>, Error> {
        let filter = pod_uid.map(|uid| cri::PodSandboxFilter {
            label_selector: [(spec::POD_UID.to_string(), uid.to_string())].into(),
            ..Default::default()
        });
        let mut rt = self.0.runtime.clone();
        Ok(rt
            .list_pod_sandbox(cri::ListPodSandboxRequest { filter })
            .await?
            .into_inner()
            .items)
    }

    async fn list_containers(&self, sandbox_id: Option<&str>) -> Result<Vec<cri::Container>, Error> {
        let filter = sandbox_id.map(|id| cri::ContainerFilter {
            pod_sandbox_id: id.to_string(),
            ..Default::default()
        });
        let mut rt = self.0.runtime.clone();
        Ok(rt
            .list_containers(cri::ListContainersRequest { filter })
            .await?
            .into_inner()
            .containers)
    }

    async fn sandbox_status(&self, id: &str) -> Result<Option<cri::PodSandboxStatus>, Error> {
        let mut rt = self.0.runtime.clone();
        Ok(rt
            .pod_sandbox_status(cri::PodSandboxStatusRequest {
                pod_sandbox_id: id.to_string(),
                verbose: false,
            })
            .await?
            .into_inner()
            .status)
    }

    async fn container_status(&self, id: &str) -> Result<Option<cri::ContainerStatus>, Error> {
        let mut rt = self.0.runtime.clone();
        Ok(rt
            .container_status(cri::ContainerStatusRequest {
                container_id: id.to_string(),
                verbose: false,
            })
            .await?
            .into_inner()
            .status)
    }

    async fn run_sandbox(&self, config: &cri::PodSandboxConfig, handler: &str) -> Result<String, Error> {
        let mut rt = self.0.runtime.clone();
        Ok(rt
            .run_pod_sandbox(cri::RunPodSandboxRequest {
                config: Some(config.clone()),
                runtime_handler: handler.to_string(),
            })
            .await?
            .into_inner()
            .pod_sandbox_id)
    }

    async fn stop_sandbox(&self, id: &str) -> Result<(), Error> {
        let mut rt = self.0.runtime.clone();
        rt.stop_pod_sandbox(cri::StopPodSandboxRequest {
            pod_sandbox_id: id.to_string(),
        })
        .await?;
        Ok(())
    }

    async fn remove_sandbox(&self, id: &str) -> Result<(), Error> {
        let mut rt = self.0.runtime.clone();
        rt.remove_pod_sandbox(cri::RemovePodSandboxRequest {
            pod_sandbox_id: id.to_string(),
        })
        .await?;
        Ok(())
    }

    async fn create_container(
        &self,
        sandbox_id: &str,
        config: cri::ContainerConfig,
        sandbox_config: &cri::PodSandboxConfig,
    ) -> Result<String, Error> {
        let mut rt = self.0.runtime.clone();
        Ok(rt
            .create_container(cri::CreateContainerRequest {
                pod_sandbox_id: sandbox_id.to_string(),
                config: Some(config),
                sandbox_config: Some(sandbox_config.clone()),
            })
            .await?
            .into_inner()
            .container_id)
    }

    async fn start_container(&self, id: &str) -> Result<(), Error> {
        let mut rt = self.0.runtime.clone();
        rt.start_container(cri::StartContainerRequest {
            container_id: id.to_string(),
        })
        .await?;
        Ok(())
    }

    async fn stop_container(&self, id: &str, timeout: i64) -> Result<(), Error> {
        let mut rt = self.0.runtime.clone();
        rt.stop_container(cri::StopContainerRequest {
            container_id: id.to_string(),
            timeout,
        })
        .await?;
        Ok(())
    }

    async fn remove_container(&self, id: &str) -> Result<(), Error> {
        let mut rt = self.0.runtime.clone();
        rt.remove_container(cri::RemoveContainerRequest {
            container_id: id.to_string(),
        })
        .await?;
        Ok(())
    }

    async fn update_container_resources(
        &self,
        id: &str,
        linux: cri::LinuxContainerResources,
    ) -> Result<(), Error> {
        let mut rt = self.0.runtime.clone();
        rt.update_container_resources(cri::UpdateContainerResourcesRequest {
            container_id: id.to_string(),
            linux: Some(linux),
            ..Default::default()
        })
        .await?;
        Ok(())
    }

    async fn image_status(&self, image: &str) -> Result<Option<cri::Image>, Error> {
        let mut images = self.0.images.clone();
        Ok(images
            .image_status(cri::ImageStatusRequest {
                image: Some(cri::ImageSpec {
                    image: image.to_string(),
                    ..Default::default()
                }),
                verbose: false,
            })
            .await?
            .into_inner()
            .image)
    }

    async fn pull_image(
        &self,
        image: &str,
        auth: Option<cri::AuthConfig>,
        sandbox_config: &cri::PodSandboxConfig,
    ) -> Result<String, Error> {
        let mut images = self.0.images.clone();
        Ok(images
            .pull_image(cri::PullImageRequest {
                image: Some(cri::ImageSpec {
                    image: image.to_string(),
                    ..Default::default()
                }),
                auth,
                sandbox_config: Some(sandbox_config.clone()),
            })
            .await?
            .into_inner()
            .image_ref)
    }

    async fn list_images(&self) -> Result<Vec<cri::Image>, Error> {
        let mut images = self.0.images.clone();
        Ok(images
            .list_images(cri::ListImagesRequest { filter: None })
            .await?
            .into_inner()
            .images)
    }

    async fn exec_sync(&self, req: cri::ExecSyncRequest) -> Result<cri::ExecSyncResponse, Error> {
        let mut rt = self.0.runtime.clone();
        Ok(rt.exec_sync(req).await?.into_inner())
    }

    async fn changes(&self) -> Result<crate::runtime_events::Changes, Error> {
        crate::runtime_events::subscribe(&self.0).await
    }
}

/// A runtime in memory, for tests that run without containerd and for hollow nodes
/// (`AgentOptions::hollow`, kubemark's idea): sandboxes and containers as records, containers
/// running until stopped or until a test says they exit (`exit`). A test's runtime logs every
/// call (`calls`); a hollow node's logs none (nothing grows with its age) and gives its
/// sandboxes addresses from the node's pod CIDR.
pub mod fake {
    use std::net::Ipv4Addr;
    use std::sync::Mutex;

    use super::*;

    #[derive(Default)]
    struct Inner {
        sandboxes: Vec<cri::PodSandbox>,
        containers: Vec<cri::ContainerStatus>,
        calls: Vec<String>,
        /// Whether `calls` is kept (a test's runtime).
        record: bool,
        next: u32,
        clock: i64,
        /// Images present, by name.
        images: std::collections::BTreeSet<String>,
        /// Images whose pull fails, with the registry's message.
        unpullable: std::collections::BTreeMap<String, String>,
        /// A hollow node's pod CIDR (its network and prefix length), and each sandbox's address
        /// in it.
        cidr: Option<(Ipv4Addr, u8)>,
        addresses: std::collections::HashMap<String, Ipv4Addr>,
        next_host: u32,
        /// Told of every change, as containerd's events service is (`Runtime::changes`).
        changed: Option<tokio::sync::broadcast::Sender<()>>,
    }

    pub struct FakeRuntime {
        inner: Mutex<Inner>,
        /// Listings of every sandbox (a PLEG's relists).
        relists: std::sync::atomic::AtomicUsize,
    }

    impl Default for FakeRuntime {
        fn default() -> Self {
            Self {
                inner: Mutex::new(Inner {
                    record: true,
                    changed: Some(tokio::sync::broadcast::channel(64).0),
                    ..Default::default()
                }),
                relists: Default::default(),
            }
        }
    }

    fn not_found(id: &str) -> Error {
        Error::Status(tonic::Status::not_found(format!("{id} not found")))
    }

    impl Inner {
        fn tick(&mut self) -> i64 {
            if self.record {
                // A test's clock: one second a call, so that order shows in the times.
                self.clock += 1_000_000_000;
                self.clock
            } else {
                jiff::Timestamp::now().as_nanosecond() as i64
            }
        }
        /// A call that changes what runs: logged (a test's runtime) and reported.
        fn call(&mut self, call: impl FnOnce() -> String) {
            self.log(call);
            self.changed();
        }
        /// A call that changes nothing that runs (a pull, an exec): logged only.
        fn log(&mut self, call: impl FnOnce() -> String) {
            if self.record {
                self.calls.push(call());
            }
        }
        fn changed(&self) {
            if let Some(tx) = &self.changed {
                let _ = tx.send(());
            }
        }
        /// The next free address of the pod CIDR for sandbox `id` (the first host address is
        /// the bridge's, as host-local leaves it to the gateway).
        fn allocate(&mut self, id: &str) {
            let Some((net, prefix)) = self.cidr else { return };
            let hosts = 1u32
                .checked_shl(32 - prefix as u32)
                .unwrap_or(0)
                .saturating_sub(3);
            for _ in 0..hosts {
                self.next_host = self.next_host % hosts + 1;
                let ip = Ipv4Addr::from(u32::from(net) + 1 + self.next_host);
                if !self.addresses.values().any(|a| *a == ip) {
                    self.addresses.insert(id.to_string(), ip);
                    return;
                }
            }
        }
        fn container(&mut self, id: &str) -> Result<&mut cri::ContainerStatus, Error> {
            self.containers
                .iter_mut()
                .find(|c| c.id == id)
                .ok_or_else(|| not_found(id))
        }
    }

    impl FakeRuntime {
        /// A hollow node's runtime: no call log, wall-clock times, addresses from the pod
        /// CIDR once it is known (`set_pod_cidr`).
        pub fn hollow() -> Self {
            Self {
                inner: Mutex::new(Inner {
                    changed: Some(tokio::sync::broadcast::channel(64).0),
                    ..Default::default()
                }),
                relists: Default::default(),
            }
        }

        /// The node's IPv4 pod CIDR (`10.42.3.0/24`), which new sandboxes take addresses from.
        pub fn set_pod_cidr(&self, cidr: &str) -> Result<(), Error> {
            let bad = || Error::Other(format!("pod CIDR {cidr:?} is not an IPv4 CIDR"));
            let (net, prefix) = cidr.split_once('/').ok_or_else(bad)?;
            let net: Ipv4Addr = net.parse().map_err(|_| bad())?;
            let prefix: u8 = prefix.parse().ok().filter(|p| *p <= 30).ok_or_else(bad)?;
            self.inner.lock().unwrap().cidr = Some((net, prefix));
            Ok(())
        }

        /// The calls made, as `method id-or-name`.
        pub fn calls(&self) -> Vec<String> {
            self.inner.lock().unwrap().calls.clone()
        }

        pub fn clear_calls(&self) {
            self.inner.lock().unwrap().calls.clear();
        }

        /// Container `id` exits with `code`.
        pub fn exit(&self, id: &str, code: i32) {
            let mut i = self.inner.lock().unwrap();
            let at = i.tick();
            if let Ok(c) = i.container(id) {
                c.state = cri::ContainerState::ContainerExited as i32;
                c.exit_code = code;
                c.finished_at = at;
            }
            i.changed();
        }

        /// The sandbox `id` stops (its pause container died).
        pub fn sandbox_dies(&self, id: &str) {
            let mut i = self.inner.lock().unwrap();
            if let Some(s) = i.sandboxes.iter_mut().find(|s| s.id == id) {
                s.state = cri::PodSandboxState::SandboxNotready as i32;
            }
            i.changed();
        }

        /// The id of the newest instance of container `name`.
        pub fn id_of(&self, name: &str) -> Option<String> {
            let i = self.inner.lock().unwrap();
            i.containers
                .iter()
                .filter(|c| c.metadata.as_ref().is_some_and(|m| m.name == name))
                .max_by_key(|c| c.created_at)
                .map(|c| c.id.clone())
        }

        /// `image` is present (imported) without a pull.
        pub fn has_image(&self, image: &str) {
            self.inner.lock().unwrap().images.insert(image.to_string());
        }

        /// Pulls of `image` fail with `message`.
        pub fn unpullable(&self, image: &str, message: &str) {
            self.inner
                .lock()
                .unwrap()
                .unpullable
                .insert(image.to_string(), message.to_string());
        }

        /// How many times every sandbox was listed (a PLEG relists so).
        pub fn relists(&self) -> usize {
            self.relists.load(std::sync::atomic::Ordering::Relaxed)
        }

        pub fn sandbox_count(&self) -> usize {
            self.inner.lock().unwrap().sandboxes.len()
        }

        pub fn container_count(&self) -> usize {
            self.inner.lock().unwrap().containers.len()
        }
    }

    #[async_trait]
    impl Runtime for FakeRuntime {
        async fn list_sandboxes(&self, pod_uid: Option<&str>) -> Result<Vec<cri::PodSandbox>, Error> {
            if pod_uid.is_none() {
                self.relists.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            let i = self.inner.lock().unwrap();
            Ok(i.sandboxes
                .iter()
                .filter(|s| {
                    pod_uid.is_none_or(|u| s.labels.get(spec::POD_UID).map(String::as_str) == Some(u))
                })
                .cloned()
                .collect())
        }

        async fn list_containers(&self, sandbox_id: Option<&str>) -> Result<Vec<cri::Container>, Error> {
            let i = self.inner.lock().unwrap();
            Ok(i.containers
                .iter()
                .filter(|c| sandbox_id.is_none_or(|s| c.labels.get("sandbox").map(String::as_str) == Some(s)))
                .map(|c| cri::Container {
                    id: c.id.clone(),
                    pod_sandbox_id: c.labels.get("sandbox").cloned().unwrap_or_default(),
                    metadata: c.metadata.clone(),
                    state: c.state,
                    created_at: c.created_at,
                    labels: c.labels.clone(),
                    annotations: c.annotations.clone(),
                    ..Default::default()
                })
                .collect())
        }

        async fn sandbox_status(&self, id: &str) -> Result<Option<cri::PodSandboxStatus>, Error> {
            let i = self.inner.lock().unwrap();
            let sb = i
                .sandboxes
                .iter()
                .find(|s| s.id == id)
                .ok_or_else(|| not_found(id))?;
            let ip = match (i.cidr, i.addresses.get(id)) {
                (Some(_), Some(ip)) => ip.to_string(),
                (Some(_), None) => String::new(),
                (None, _) => format!("10.42.0.{}", id.trim_start_matches("sb")),
            };
            Ok(Some(cri::PodSandboxStatus {
                id: sb.id.clone(),
                state: sb.state,
                created_at: sb.created_at,
                metadata: sb.metadata.clone(),
                labels: sb.labels.clone(),
                network: Some(cri::PodSandboxNetworkStatus {
                    ip,
                    ..Default::default()
                }),
                ..Default::default()
            }))
        }

        async fn container_status(&self, id: &str) -> Result<Option<cri::ContainerStatus>, Error> {
            let mut i = self.inner.lock().unwrap();
            Ok(Some(i.container(id)?.clone()))
        }

        async fn run_sandbox(&self, config: &cri::PodSandboxConfig, _handler: &str) -> Result<String, Error> {
            let mut i = self.inner.lock().unwrap();
            i.next += 1;
            let id = format!("sb{}", i.next);
            let at = i.tick();
            i.call(|| format!("run_sandbox {id}"));
            i.allocate(&id);
            i.sandboxes.push(cri::PodSandbox {
                id: id.clone(),
                metadata: config.metadata.clone(),
                state: cri::PodSandboxState::SandboxReady as i32,
                created_at: at,
                labels: config.labels.clone(),
                ..Default::default()
            });
            Ok(id)
        }

        async fn stop_sandbox(&self, id: &str) -> Result<(), Error> {
            let mut i = self.inner.lock().unwrap();
            i.call(|| format!("stop_sandbox {id}"));
            let at = i.tick();
            for c in i.containers.iter_mut() {
                if c.labels.get("sandbox").map(String::as_str) == Some(id)
                    && c.state == cri::ContainerState::ContainerRunning as i32
                {
                    c.state = cri::ContainerState::ContainerExited as i32;
                    c.exit_code = 137;
                    c.finished_at = at;
                }
            }
            let sb = i
                .sandboxes
                .iter_mut()
                .find(|s| s.id == id)
                .ok_or_else(|| not_found(id))?;
            sb.state = cri::PodSandboxState::SandboxNotready as i32;
            Ok(())
        }

        async fn remove_sandbox(&self, id: &str) -> Result<(), Error> {
            let mut i = self.inner.lock().unwrap();
            i.call(|| format!("remove_sandbox {id}"));
            i.sandboxes.retain(|s| s.id != id);
            i.addresses.remove(id);
            i.containers
                .retain(|c| c.labels.get("sandbox").map(String::as_str) != Some(id));
            Ok(())
        }

        async fn create_container(
            &self,
            sandbox_id: &str,
            config: cri::ContainerConfig,
            _sandbox_config: &cri::PodSandboxConfig,
        ) -> Result<String, Error> {
            let mut i = self.inner.lock().unwrap();
            let Some(sandbox) = i.sandboxes.iter().find(|s| s.id == sandbox_id) else {
                return Err(not_found(sandbox_id));
            };
            let name = config
                .metadata
                .as_ref()
                .map(|m| m.name.clone())
                .unwrap_or_default();
            // containerd reserves a container's name (its name, attempt and pod) until the
            // container is removed, whatever its sandbox.
            let attempt = config.metadata.as_ref().map_or(0, |m| m.attempt);
            let pod_uid = sandbox
                .metadata
                .as_ref()
                .map(|m| m.uid.clone())
                .unwrap_or_default();
            let sandbox_uid = |id: &str| {
                i.sandboxes
                    .iter()
                    .find(|s| s.id == id)
                    .and_then(|s| s.metadata.as_ref())
                    .map(|m| m.uid.clone())
            };
            if let Some(holder) = i.containers.iter().find(|c| {
                c.metadata
                    .as_ref()
                    .is_some_and(|m| m.name == name && m.attempt == attempt)
                    && c.labels.get("sandbox").and_then(|s| sandbox_uid(s)) == Some(pod_uid.clone())
            }) {
                return Err(Error::Status(tonic::Status::unknown(format!(
                    "failed to reserve container name \"{name}_{attempt}\": name is reserved for \"{}\"",
                    holder.id
                ))));
            }
            i.next += 1;
            let id = format!("{name}-{}", i.next);
            let at = i.tick();
            i.call(|| format!("create_container {name}"));
            let mut labels = config.labels.clone();
            labels.insert("sandbox".into(), sandbox_id.to_string());
            i.containers.push(cri::ContainerStatus {
                id: id.clone(),
                metadata: config.metadata.clone(),
                state: cri::ContainerState::ContainerCreated as i32,
                created_at: at,
                labels,
                annotations: config.annotations.clone(),
                ..Default::default()
            });
            Ok(id)
        }

        async fn start_container(&self, id: &str) -> Result<(), Error> {
            let mut i = self.inner.lock().unwrap();
            i.call(|| format!("start_container {id}"));
            let at = i.tick();
            let c = i.container(id)?;
            c.state = cri::ContainerState::ContainerRunning as i32;
            c.started_at = at;
            Ok(())
        }

        async fn stop_container(&self, id: &str, _timeout: i64) -> Result<(), Error> {
            let mut i = self.inner.lock().unwrap();
            i.call(|| format!("stop_container {id}"));
            let at = i.tick();
            let c = i.container(id)?;
            if c.state == cri::ContainerState::ContainerRunning as i32 {
                c.state = cri::ContainerState::ContainerExited as i32;
                c.exit_code = 137;
                c.finished_at = at;
            }
            Ok(())
        }

        async fn remove_container(&self, id: &str) -> Result<(), Error> {
            let mut i = self.inner.lock().unwrap();
            i.call(|| format!("remove_container {id}"));
            i.containers.retain(|c| c.id != id);
            Ok(())
        }

        async fn update_container_resources(
            &self,
            id: &str,
            _linux: cri::LinuxContainerResources,
        ) -> Result<(), Error> {
            let mut i = self.inner.lock().unwrap();
            i.log(|| format!("update_container_resources {id}"));
            i.container(id).map(|_| ())
        }

        async fn image_status(&self, image: &str) -> Result<Option<cri::Image>, Error> {
            let i = self.inner.lock().unwrap();
            Ok(i.images.contains(image).then(|| cri::Image {
                id: format!("sha256:{image}"),
                repo_tags: vec![image.to_string()],
                size: 1024,
                ..Default::default()
            }))
        }

        async fn pull_image(
            &self,
            image: &str,
            _auth: Option<cri::AuthConfig>,
            _sandbox_config: &cri::PodSandboxConfig,
        ) -> Result<String, Error> {
            let mut i = self.inner.lock().unwrap();
            i.log(|| format!("pull_image {image}"));
            if let Some(m) = i.unpullable.get(image) {
                return Err(Error::Status(tonic::Status::unknown(m.clone())));
            }
            i.images.insert(image.to_string());
            Ok(format!("sha256:{image}"))
        }

        async fn list_images(&self) -> Result<Vec<cri::Image>, Error> {
            let i = self.inner.lock().unwrap();
            Ok(i.images
                .iter()
                .map(|image| cri::Image {
                    id: format!("sha256:{image}"),
                    repo_tags: vec![image.to_string()],
                    size: 1024,
                    ..Default::default()
                })
                .collect())
        }

        async fn changes(&self) -> Result<crate::runtime_events::Changes, Error> {
            let i = self.inner.lock().unwrap();
            let rx = i
                .changed
                .as_ref()
                .ok_or_else(|| Error::Other("no change reports".into()))?
                .subscribe();
            // A receiver that fell behind still saw a change; a closed channel ends the stream.
            Ok(Box::pin(futures::stream::unfold(rx, |mut rx| async move {
                match rx.recv().await {
                    Ok(()) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => Some(((), rx)),
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => None,
                }
            })))
        }

        /// Every command succeeds at once with no output (there is no process to run it in).
        async fn exec_sync(&self, req: cri::ExecSyncRequest) -> Result<cri::ExecSyncResponse, Error> {
            let mut i = self.inner.lock().unwrap();
            i.log(|| format!("exec_sync {}", req.container_id));
            i.container(&req.container_id)?;
            Ok(cri::ExecSyncResponse::default())
        }
    }

    #[cfg(test)]
    #[tokio::test]
    async fn a_hollow_runtime_gives_each_sandbox_a_free_address_of_the_pod_cidr_and_logs_nothing() {
        let rt = FakeRuntime::hollow();
        assert!(rt.set_pod_cidr("10.42.3.0/33").is_err());
        assert!(rt.set_pod_cidr("fd00::/64").is_err());
        rt.set_pod_cidr("10.42.3.0/30").unwrap();
        let config = cri::PodSandboxConfig::default();
        let a = rt.run_sandbox(&config, "").await.unwrap();
        let b = rt.run_sandbox(&config, "").await.unwrap();
        let addr = |id: &str| {
            let id = id.to_string();
            let rt = &rt;
            async move { rt.sandbox_status(&id).await.unwrap().unwrap().network.unwrap().ip }
        };
        // A /30 has one address past the gateway's: the second sandbox gets none.
        assert_eq!(addr(&a).await, "10.42.3.2");
        assert_eq!(addr(&b).await, "");
        rt.remove_sandbox(&a).await.unwrap();
        let c = rt.run_sandbox(&config, "").await.unwrap();
        assert_eq!(
            addr(&c).await,
            "10.42.3.2",
            "a removed sandbox's address is free again"
        );
        // Wider ranges hand out distinct addresses.
        let wide = FakeRuntime::hollow();
        wide.set_pod_cidr("10.42.4.0/24").unwrap();
        let mut seen = std::collections::BTreeSet::new();
        for _ in 0..253 {
            let id = wide.run_sandbox(&config, "").await.unwrap();
            let ip = wide
                .sandbox_status(&id)
                .await
                .unwrap()
                .unwrap()
                .network
                .unwrap()
                .ip;
            assert!(
                ip.starts_with("10.42.4.") && ip != "10.42.4.1" && ip != "10.42.4.255",
                "{ip}"
            );
            assert!(seen.insert(ip));
        }
        let id = wide.run_sandbox(&config, "").await.unwrap();
        assert!(wide
            .exec_sync(cri::ExecSyncRequest {
                container_id: "none".into(),
                ..Default::default()
            })
            .await
            .is_err());
        assert_eq!(wide.sandbox_count(), 254);
        assert_eq!(
            wide.sandbox_status(&id)
                .await
                .unwrap()
                .unwrap()
                .network
                .unwrap()
                .ip,
            ""
        );
        assert!(wide.calls().is_empty(), "a hollow runtime keeps no call log");
    }

    #[cfg(test)]
    #[tokio::test]
    async fn images_are_present_after_a_pull_unless_the_registry_refuses() {
        let rt = FakeRuntime::default();
        let sb = cri::PodSandboxConfig::default();
        assert!(rt.image_status("nginx").await.unwrap().is_none());
        rt.pull_image("nginx", None, &sb).await.unwrap();
        assert!(rt.image_status("nginx").await.unwrap().is_some());
        rt.unpullable("ghost", "not found");
        assert!(rt.pull_image("ghost", None, &sb).await.is_err());
        assert!(rt.image_status("ghost").await.unwrap().is_none());
        assert_eq!(rt.calls(), vec!["pull_image nginx", "pull_image ghost"]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn network(ip: &str, more: &[&str]) -> cri::PodSandboxNetworkStatus {
        cri::PodSandboxNetworkStatus {
            ip: ip.into(),
            additional_ips: more.iter().map(|ip| cri::PodIp { ip: ip.to_string() }).collect(),
        }
    }

    #[test]
    fn sandbox_ips_are_the_primary_then_the_others_and_none_if_one_is_bad() {
        assert!(sandbox_ips(None).is_empty());
        assert_eq!(
            sandbox_ips(Some(&network("10.42.0.5", &["fd00::5"]))),
            ["10.42.0.5", "fd00::5"]
        );
        assert_eq!(sandbox_ips(Some(&network("", &["fd00::5"]))), ["fd00::5"]);
        assert!(sandbox_ips(Some(&network("10.42.0.5", &["fd00::zz"]))).is_empty());
        assert!(sandbox_ips(Some(&network("not-an-ip", &[]))).is_empty());
    }

    #[test]
    fn status_pod_ips_put_the_nodes_family_first_and_keep_one_of_each() {
        let ips: Vec<String> = ["fd00::1", "10.0.0.1", "10.0.0.2", "fd00::2"]
            .map(String::from)
            .into();
        assert_eq!(status_pod_ips(&ips, false), ["10.0.0.1", "fd00::1"]);
        assert_eq!(status_pod_ips(&ips, true), ["fd00::1", "10.0.0.1"]);
        assert_eq!(status_pod_ips(&ips[1..3], true), ["10.0.0.1"]);
        assert!(status_pod_ips(&[], false).is_empty());
    }
}
