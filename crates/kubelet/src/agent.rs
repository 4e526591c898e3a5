//! The agent: registers this machine as a Node, renews its Lease (`node_status`), and runs the
//! pods bound to it through containerd. The pod sync is the reference document's: a worker per
//! pod compares the pod's spec with what the runtime reports (`actions::compute_pod_actions`)
//! and acts on the difference through `pod_sync` — sandbox (pause container, CNI network), then
//! each container — and writes the pod's status back through the API. What runs for no pod is
//! swept (`housekeeping`); images are pulled by `image_manager`.
//!
//! Before a pod's sandbox and containers, the volume manager makes its volumes ready (and
//! refreshes configMap, secret, downward-API and token files on every sync); a volume that is
//! not ready keeps the pod's containers in ContainerCreating with a FailedMount event.
//!
//! Probes (`prober`) run in workers of their own and wake the pod worker when a result changes:
//! readiness drives the containers' `ready` and the pod's Ready condition, a failed liveness or
//! startup probe has the container killed and restarted. Lifecycle hooks (`lifecycle`) run
//! around a container's start and stop; restarts back off as upstream (`backoff`), and a pod
//! past its `activeDeadlineSeconds` is stopped and Failed.
//!
//! A pod's worker runs when its pod changes in the API, when the PLEG (`pleg`) sees its
//! sandboxes or containers change, when a probe result changes, and at the instants its
//! wake-ups (`wakeups`) fall due: its deadline, the end of a restart or pull back-off, and its
//! resync every `RESYNC` (`RESYNC_UNSETTLED` until all its containers run). Nothing re-queues
//! every pod on a timer.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use std::time::Instant;

use futures::StreamExt;
use k8s_cri::v1 as cri;
use k8s_openapi::api::core::v1::{
    ContainerState, ContainerStateTerminated, ContainerStateWaiting, ContainerStatus, Event, EventSource,
    ObjectReference, Pod, PodCondition, PodIP,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use r8s_api::resources::{pod_requests, Resources};
use r8s_client::queue::WorkQueue;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::actions::{self, PodActions, SandboxAction};
use crate::admission;
use crate::cgroups::{CgroupManager, Layout};
use crate::cni::{self, CniOptions};
use crate::containerd::{Containerd, ContainerdOptions};
use crate::cri::Cri;
use crate::lifecycle;
use crate::pleg;
use crate::pod_sync::{Hooks, Place, PodSync};
use crate::pod_workers::{PodRecord, PodWorker, PodWorkers, RecordedEvent, WorkerState};
use crate::prober::{self, ProbeEvent, ProbeManager};
use crate::qos::{self, QosClass};
use crate::runtime::{self, CriRuntime, Runtime};
use crate::spec::{self, ContainerInputs, NodeContext};
use crate::status::StatusManager;
use crate::volumes::{HostVolume, Lookup, VolumeManager};
use crate::wakeups::Wakeups;
use crate::Error;

mod housekeeping;
mod image_manager;
mod node_status;
mod observe;

pub use observe::fuzz_cri_results;

pub const FIELD_MANAGER: &str = "kubelet";

#[derive(Clone, Debug)]
pub struct AgentOptions {
    pub node_name: String,
    /// `<data-dir>/agent`.
    pub dir: PathBuf,
    pub node_ip: String,
    /// The node's address of the other family on a dual-stack node (`--node-ip v4,v6`):
    /// a second InternalIP and a second entry of every pod's `status.hostIPs`.
    pub secondary_node_ip: Option<String>,
    /// The node's ExternalIP, if it has one.
    pub node_external_ip: Option<String>,
    pub cluster_dns: Vec<String>,
    pub cluster_domain: String,
    /// Bridge name for the pod network.
    pub bridge: String,
    /// Where the kubelet API listens (`--kubelet-address`; default: the node's address) and
    /// its port (`--kubelet-port`, 10250; 0 picks a free one, reported in the Node's
    /// daemonEndpoints).
    pub kubelet_address: Option<String>,
    pub kubelet_port: u16,
    /// The cluster CA (DER) that signs the client certificates the kubelet API accepts.
    pub client_ca: Vec<Vec<u8>>,
    /// On stop, leave the pods running (containerd stops; the containers stay in their shims)
    /// for the next start to adopt, as a kubelet restart does upstream. Otherwise stopping
    /// the agent stops its pods and removes what they used.
    pub keep_pods_on_exit: bool,
    /// An existing CRI socket (`--container-runtime-endpoint`): no containerd of our own.
    pub runtime_endpoint: Option<PathBuf>,
    /// Where the CNI configuration goes for that runtime (`--cni-conf-dir`); with our own
    /// containerd, its directory under the agent's.
    pub cni_conf_dir: Option<PathBuf>,
    /// The node's registry mirrors and credentials (`--private-registry`, k3s's
    /// registries.yaml format).
    pub registries: crate::registries::Registries,
    /// More metrics served on the kubelet's `/metrics` (the Service proxy's).
    pub metrics_sources: Vec<crate::metrics::MetricsSource>,
    /// The pod bridge masquerades what pods send off their node's subnet (CNI's `ipMasq`);
    /// off where the overlay masquerades only what leaves the cluster CIDR.
    pub cni_ip_masq: bool,
    /// The pods' interface MTU (CNI's `mtu`; the overlay's, less its encapsulation).
    pub cni_mtu: Option<u32>,
    /// The cgroup pods go under (`--cgroup-root`): a path from the hierarchies' root if it
    /// starts with `/`, else a name under the agent's own cgroup (default `r8s-pods`).
    pub cgroup_root: String,
    /// Called when a new sandbox has its address, before the pod's containers start (the
    /// node's network policy takes the pod in).
    pub network_hook: Option<NetworkHook>,
    /// The resolver configuration pods with dnsPolicy Default (and host-network pods) get
    /// (upstream kubelet's `--resolv-conf`).
    pub resolv_conf: PathBuf,
    /// A hollow node (kubemark's idea): the kubelet above the runtime as it is, over a runtime
    /// in memory (`runtime::fake`). No containerd, CNI or cgroups: pods are Running with
    /// addresses from the node's pod CIDR and no processes, and the kubelet API answers logs,
    /// exec, attach and port-forward with 501. For scale runs.
    pub hollow: Option<Hollow>,
}

/// The capacity a hollow node reports.
#[derive(Clone, Debug)]
pub struct Hollow {
    pub cpus: u32,
    pub memory_bytes: u64,
    pub pods: u32,
}

impl Default for Hollow {
    /// Kubemark's hollow node: 4 cpus, 16 GiB, 110 pods.
    fn default() -> Self {
        Self {
            cpus: 4,
            memory_bytes: 16 << 30,
            pods: 110,
        }
    }
}

/// What the agent calls with a pod and its new address before the pod's containers start.
#[derive(Clone)]
pub struct NetworkHook(pub Arc<dyn Fn(Pod, String) -> futures::future::BoxFuture<'static, ()> + Send + Sync>);

impl std::fmt::Debug for NetworkHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("NetworkHook")
    }
}

fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "localhost".into())
}

/// The address of the interface the default route uses (read from the kernel, nothing sent).
pub fn default_ip() -> String {
    let iface = std::fs::read_to_string("/proc/net/route").ok().and_then(|t| {
        t.lines()
            .skip(1)
            .map(|l| l.split_whitespace().collect::<Vec<_>>())
            .find(|f| f.get(1) == Some(&"00000000"))
            .map(|f| f[0].to_string())
    });
    let Some(iface) = iface else {
        return "127.0.0.1".into();
    };
    let out = std::process::Command::new("ip")
        .args(["-4", "-o", "addr", "show", "dev", &iface])
        .output();
    out.ok()
        .and_then(|o| {
            let text = String::from_utf8_lossy(&o.stdout).to_string();
            let word = text
                .split_whitespace()
                .skip_while(|w| *w != "inet")
                .nth(1)?
                .to_string();
            Some(word.split('/').next()?.to_string())
        })
        .unwrap_or_else(|| "127.0.0.1".into())
}

impl AgentOptions {
    pub fn new(dir: PathBuf) -> Self {
        Self {
            node_name: host_name().to_lowercase(),
            dir,
            node_ip: default_ip(),
            secondary_node_ip: None,
            node_external_ip: None,
            cluster_dns: vec!["10.43.0.10".into()],
            cluster_domain: "cluster.local".into(),
            bridge: "r8s0".into(),
            kubelet_address: None,
            kubelet_port: 10250,
            client_ca: Vec::new(),
            keep_pods_on_exit: false,
            runtime_endpoint: None,
            cni_conf_dir: None,
            registries: Default::default(),
            metrics_sources: Vec::new(),
            cni_ip_masq: true,
            cni_mtu: None,
            cgroup_root: "r8s-pods".into(),
            network_hook: None,
            resolv_conf: PathBuf::from("/etc/resolv.conf"),
            hollow: None,
        }
    }
}

fn now() -> Time {
    Time(jiff::Timestamp::now())
}

pub struct Agent {
    client: Client,
    opts: AgentOptions,
    /// CRI, for what goes beyond the pod sync's `runtime`: exec, attach, port-forward, logs
    /// (none on a hollow node).
    cri: Option<Cri>,
    /// The runtime's sandboxes and containers, as the pod sync uses them.
    runtime: Arc<dyn Runtime>,
    node_ctx: Mutex<NodeContext>,
    /// The pods bound to this node: one worker record per pod UID (the work queue's keys).
    workers: Mutex<PodWorkers>,
    /// The port the kubelet API listens on.
    kubelet_port: u16,
    metrics: Arc<crate::metrics::KubeletMetrics>,
    /// The images imported from the air-gap tarballs (containerd's full names): no registry
    /// holds them, so they are used as they are whatever the pull policy.
    airgap_images: HashSet<String>,
    queue: Arc<WorkQueue>,
    runtime_version: String,
    probes: ProbeManager,
    volumes: VolumeManager,
    /// The pods' cgroups, by QoS class.
    cgroups: CgroupManager,
    /// Kubelet admission runs once per pod, one pod at a time.
    admit_lock: tokio::sync::Mutex<()>,
    /// Writes the pods' statuses in the background, and knows them before the informer does.
    status: Arc<StatusManager>,
    /// When each pod's worker is next due without being asked (deadline, back-off, resync).
    wakeups: Wakeups,
    /// Every Service, for the containers' environment variables.
    services: Arc<r8s_client::informer::Informer<k8s_openapi::api::core::v1::Service>>,
}

const EVENT_REPEAT: Duration = Duration::from_secs(30);

/// How often the runtime is relisted for changes (upstream's generic PLEG relists every 1 s).
const RELIST: Duration = Duration::from_secs(1);
/// How often it is relisted while the runtime reports its changes (`Runtime::changes`): a
/// safety net, as upstream's evented PLEG keeps one (every 5 min there).
const EVENTED_RELIST: Duration = Duration::from_secs(60);
/// After a reported change, relists go on every `RELIST` for this long: the runtime's CRI
/// view can lag its event (containerd's CRI plugin learns of a task's exit from the same
/// event), and a relist that came too early would otherwise leave the change unseen for a
/// minute.
const AFTER_CHANGE: Duration = Duration::from_secs(5);
/// How long to wait before asking again for the runtime's change reports, when it had none.
const RESUBSCRIBE: Duration = Duration::from_secs(60);
/// How often a running pod's worker runs when nothing wakes it sooner: its volumes'
/// configMaps and secrets are refreshed and its status written again (upstream's
/// `--sync-frequency`, 1 min: a configMap's update reaches the pod's files within it and the
/// object TTL).
const RESYNC: Duration = Duration::from_secs(60);
/// The same for a pod not yet running all its containers (a volume's or an environment
/// variable's source missing, a sandbox failing): sooner, as upstream's volume manager retries
/// a failed mount within seconds.
const RESYNC_UNSETTLED: Duration = Duration::from_secs(10);
/// How long a stopping agent waits for the syncs in flight to finish before it cancels them.
const DRAIN_LIMIT: Duration = Duration::from_secs(10);
/// How long a stopping agent gives its pods to terminate (each within its grace period).
const TERMINATE_LIMIT: Duration = Duration::from_secs(45);
/// How long a stopping agent may take at most, all told: whoever waits for `Agent::run` to
/// return after `stop` should wait this long.
pub const STOP_LIMIT: Duration = Duration::from_secs(60);
/// The work-queue key that sweeps what the runtime runs for pods no worker knows.
const SWEEP: &str = "/";
const DEADLINE_MESSAGE: &str = "Pod was active on the node longer than the specified deadline";

/// What the agent runs on: the machine's containerd, CNI and cgroups, or a hollow node's
/// runtime in memory.
struct Parts {
    containerd: Option<Containerd>,
    cri: Option<Cri>,
    runtime: Arc<dyn Runtime>,
    /// The same runtime as `runtime`, on a hollow node.
    hollow: Option<Arc<runtime::fake::FakeRuntime>>,
    /// Where the pod network's CNI configuration goes (none on a hollow node).
    cni_opts: Option<CniOptions>,
    cgroups: CgroupManager,
    cgroup_parent: String,
    airgap_images: HashSet<String>,
    /// The kubelet API's listener, TLS configuration and address.
    server: KubeletApi,
    kubelet_port: u16,
    runtime_version: String,
    cpus: usize,
    mem_bytes: u64,
}

type KubeletApi = (tokio::net::TcpListener, Arc<rustls::ServerConfig>, String);

/// The kubelet API's listener, bound now so that the Node can name its port, with its TLS
/// configuration and address; and the port.
async fn kubelet_api(opts: &AgentOptions) -> Result<(KubeletApi, u16), Error> {
    let address = opts
        .kubelet_address
        .clone()
        .unwrap_or_else(|| opts.node_ip.clone());
    let listener = tokio::net::TcpListener::bind((address.as_str(), opts.kubelet_port))
        .await
        .map_err(|e| Error::Other(format!("kubelet API on {address}:{}: {e}", opts.kubelet_port)))?;
    let port = listener.local_addr()?.port();
    let mut names = vec![opts.node_name.clone(), opts.node_ip.clone(), address.clone()];
    names.dedup();
    let (cert, key) = crate::server::serving_cert(&names)?;
    let tls = crate::server::tls_config(&cert, &key, &opts.client_ca)?;
    Ok(((listener, tls, address), port))
}

/// The PLEG: relist the runtime and tell `changed` of each pod whose sandboxes or containers
/// changed (a container that exited, one that appeared). Relists come every `RELIST`, or,
/// while the runtime reports its changes, at each report (then every `RELIST` for
/// `AFTER_CHANGE`) and every `EVENTED_RELIST` besides.
async fn pleg_loop(runtime: &dyn Runtime, changed: impl Fn(&str), stop: CancellationToken) {
    let mut last: Option<pleg::Snapshot> = None;
    let mut changes: Option<crate::runtime_events::Changes> = None;
    let mut subscribe_at = tokio::time::Instant::now();
    let mut fast_until = tokio::time::Instant::now();
    loop {
        let now = tokio::time::Instant::now();
        if changes.is_none() && now >= subscribe_at {
            match runtime.changes().await {
                Ok(stream) => {
                    changes = Some(stream);
                    // Whatever changed while no one listened is found by relisting now.
                    fast_until = now + AFTER_CHANGE;
                }
                Err(e) => {
                    tracing::debug!(error = %runtime::message(&e), "PLEG: relisting every second");
                    subscribe_at = now + RESUBSCRIBE;
                }
            }
        }
        let period = if changes.is_some() && now >= fast_until {
            EVENTED_RELIST
        } else {
            RELIST
        };
        let next_change = async {
            match changes.as_mut() {
                Some(c) => c.next().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(period) => {}
            change = next_change => match change {
                Some(()) => {
                    // One relist for every change already reported.
                    if let Some(c) = changes.as_mut() {
                        while let Some(Some(())) = futures::FutureExt::now_or_never(c.next()) {}
                    }
                    fast_until = tokio::time::Instant::now() + AFTER_CHANGE;
                }
                None => {
                    tracing::info!("PLEG: the runtime's change reports ended; relisting every second");
                    changes = None;
                    subscribe_at = tokio::time::Instant::now() + RELIST;
                    continue;
                }
            },
        }
        let sandboxes = runtime.list_sandboxes(None).await;
        let containers = runtime.list_containers(None).await;
        let (Ok(sandboxes), Ok(containers)) = (sandboxes, containers) else {
            tracing::debug!("agent: relist failed");
            continue;
        };
        let now = pleg::snapshot(&sandboxes, &containers);
        if let Some(before) = &last {
            for (uid, _) in pleg::changed(before, &now) {
                changed(uid);
            }
        }
        last = Some(now);
    }
}

impl Parts {
    async fn hollow(opts: &AgentOptions, h: &Hollow) -> Result<Self, Error> {
        let fake = Arc::new(runtime::fake::FakeRuntime::hollow());
        let (server, kubelet_port) = kubelet_api(opts).await?;
        Ok(Self {
            containerd: None,
            cri: None,
            runtime: fake.clone(),
            hollow: Some(fake),
            cni_opts: None,
            cgroups: CgroupManager::new(None, ""),
            cgroup_parent: String::new(),
            airgap_images: HashSet::new(),
            server,
            kubelet_port,
            runtime_version: "fake://0.1.0".into(),
            cpus: h.cpus as usize,
            mem_bytes: h.memory_bytes,
        })
    }

    /// Start containerd (unless the runtime is given), import the air-gap images, bind the
    /// kubelet API.
    async fn machine(opts: &AgentOptions, ops: crate::metrics::RuntimeOps) -> Result<Self, Error> {
        let images = opts.dir.join("images");
        let mut c_opts = ContainerdOptions::new(opts.dir.join("containerd"));
        if let Ok(name) = std::fs::read_to_string(images.join("pause-image.txt")) {
            c_opts.sandbox_image = name.trim().to_string();
        }
        let external = opts.runtime_endpoint.clone();
        let cni_opts = CniOptions {
            conf_dir: match (&external, &opts.cni_conf_dir) {
                (_, Some(d)) => d.clone(),
                (Some(_), None) => PathBuf::from("/etc/cni/net.d"),
                (None, None) => c_opts.cni_conf_dir.clone(),
            },
            ipam_dir: opts.dir.join("ipam"),
            bridge: opts.bridge.clone(),
            ip_masq: opts.cni_ip_masq,
            mtu: opts.cni_mtu,
        };
        // Registry mirrors and TLS settings, as containerd's host files (only our own
        // containerd reads them; another runtime has its own).
        match &external {
            None => opts.registries.write_hosts(&c_opts.dir.join("certs.d"))?,
            Some(_) if !opts.registries.hosts_files().is_empty() => tracing::warn!(
                "agent: registry mirrors and TLS settings apply only to the agent's own containerd; configure the runtime's"
            ),
            Some(_) => {}
        }
        let cgroup_parent = if opts.cgroup_root.starts_with('/') {
            opts.cgroup_root.clone()
        } else {
            crate::cgroups::pod_parent(&opts.cgroup_root)
        };
        let cgroups = CgroupManager::new(Layout::detect(), &cgroup_parent);
        // Our own containerd, unless the runtime is given.
        let (containerd, socket) = match &external {
            Some(socket) => (None, socket.clone()),
            None => {
                let c = tokio::task::spawn_blocking(move || Containerd::start(c_opts))
                    .await
                    .map_err(|e| Error::Other(e.to_string()))??;
                let socket = c.socket();
                (Some(c), socket)
            }
        };
        // The air-gap images: `ctr` speaks containerd's own API, so another runtime gets none.
        let imported = match crate::images::import_dir(&socket, &images) {
            Ok(v) => v,
            Err(e) if external.is_some() => {
                tracing::warn!(error = %e, "agent: could not import the image tarballs into the runtime");
                Vec::new()
            }
            Err(e) => return Err(e),
        };
        tracing::info!(
            images = imported.len(),
            "agent: containerd running, images imported"
        );
        let cri = Cri::connect_timed(&socket, Some(ops)).await?;
        let (server, kubelet_port) = kubelet_api(opts).await?;
        let version = cri.version().await?;
        let (cpus, mem_kib) = node_status::machine_size();
        Ok(Self {
            containerd,
            runtime: Arc::new(CriRuntime(cri.clone())),
            cri: Some(cri),
            hollow: None,
            cni_opts: Some(cni_opts),
            cgroups,
            cgroup_parent,
            airgap_images: imported.iter().flat_map(|f| crate::images::names_in(f)).collect(),
            server,
            kubelet_port,
            runtime_version: format!("{}://{}", version.runtime_name, version.runtime_version),
            cpus,
            mem_bytes: mem_kib * 1024,
        })
    }
}

impl Agent {
    /// Start containerd, import the air-gap images, register the node; then run until `stop`.
    /// A hollow node (`opts.hollow`) starts none of the machine's parts.
    pub async fn run(client: Client, opts: AgentOptions, stop: CancellationToken) -> Result<(), Error> {
        let metrics = Arc::new(crate::metrics::KubeletMetrics::default());
        for source in &opts.metrics_sources {
            metrics.add_source(source.clone());
        }
        let parts = match &opts.hollow {
            Some(h) => Parts::hollow(&opts, h).await?,
            None => Parts::machine(&opts, metrics.runtime.clone()).await?,
        };
        let Parts {
            containerd,
            cri,
            runtime,
            hollow,
            cni_opts,
            cgroups,
            cgroup_parent,
            airgap_images,
            server,
            kubelet_port,
            runtime_version,
            cpus,
            mem_bytes,
        } = parts;
        if let Err(e) = cgroups.ensure_qos(cpus as i64 * 1000, 0) {
            tracing::warn!(error = %e, "agent: could not set up the QoS cgroups");
        }
        let queue = WorkQueue::new("kubelet");
        let (probe_events, mut probe_events_rx) = tokio::sync::mpsc::unbounded_channel::<ProbeEvent>();
        let informers = r8s_client::informer::Factory::new(client.clone(), None);
        let agent = Arc::new(Agent {
            services: informers.get::<k8s_openapi::api::core::v1::Service>(),
            probes: ProbeManager::new(runtime.clone(), queue.clone(), probe_events),
            client: client.clone(),
            runtime,
            cri,
            node_ctx: Mutex::new(NodeContext {
                node_name: opts.node_name.clone(),
                host_ip: opts.node_ip.clone(),
                cluster_dns: opts.cluster_dns.clone(),
                cluster_domain: opts.cluster_domain.clone(),
                host_dns: host_dns(&opts.resolv_conf),
                log_root: opts.dir.join("pods-logs").display().to_string(),
                cgroup_parent: cgroup_parent.clone(),
                allocatable_cpu_milli: cpus as i128 * 1000,
                allocatable_memory: mem_bytes as i128,
                seccomp_root: opts.dir.join("seccomp").display().to_string(),
            }),
            volumes: {
                let volumes = VolumeManager::new(opts.dir.join("pods"), client.clone());
                if hollow.is_some() {
                    volumes.without_mounts()
                } else {
                    volumes
                }
            },
            cgroups,
            admit_lock: tokio::sync::Mutex::new(()),
            status: StatusManager::new(client.clone(), FIELD_MANAGER),
            opts,
            workers: Mutex::new(PodWorkers::default()),
            queue,
            runtime_version,
            kubelet_port,
            metrics,
            airgap_images,
            wakeups: Wakeups::new(),
        });
        agent.register().await?;
        // The pod network comes from the node's podCIDR (node IPAM).
        let cidr = agent.wait_pod_cidrs(&stop).await;
        if let Some(cidrs) = &cidr {
            if let Some(cni_opts) = &cni_opts {
                cni::write(cni_opts, cidrs)?;
            }
            // A hollow node's sandboxes take their addresses from its IPv4 range.
            if let Some(h) = &hollow {
                if let Some(v4) = cidrs.iter().find(|c| !c.contains(':')) {
                    h.set_pod_cidr(v4)?;
                }
            }
            tracing::info!(node = %agent.opts.node_name, cidrs = %cidrs.join(","), "agent: pod network configured");
        }
        agent.update_node_status(cidr.is_some()).await?;
        let mut tasks = informers.start(&stop);
        let (listener, tls, address) = server;
        tracing::info!(node = %agent.opts.node_name, %address, port = kubelet_port, "agent: kubelet API listening");
        tasks.extend([
            tokio::spawn(crate::server::serve(agent.clone(), listener, tls, stop.clone())),
            tokio::spawn(agent.clone().lease_loop(stop.clone())),
            tokio::spawn(agent.clone().watch_pods(stop.clone())),
            tokio::spawn(agent.clone().relist_loop(stop.clone())),
            tokio::spawn(agent.clone().local_volumes_loop(stop.clone())),
            tokio::spawn({
                let a = agent.clone();
                let stop = stop.clone();
                async move { a.wakeups.run(stop, |key| a.queue.add(key)).await }
            }),
        ]);
        // The status writer outlives the workers: what they set last is written before it goes.
        let status_stop = CancellationToken::new();
        let status_writer = tokio::spawn(agent.status.clone().run(status_stop.clone()));
        // The probe workers' events, recorded as the pod worker's are.
        let a = agent.clone();
        let probe_event_task = tokio::spawn(async move {
            while let Some(e) = probe_events_rx.recv().await {
                a.event(&e.pod, "Warning", &e.reason, &e.message).await;
            }
        });
        let workers = tokio::spawn(agent.clone().work(stop.clone()));
        stop.cancelled().await;
        // Stopping is a state of the workers: nothing new reaches them (no watch, no relist,
        // no wake-ups), the syncs in flight finish (or are cancelled after `DRAIN_LIMIT`), and
        // then every pod is terminated.
        for t in tasks {
            t.abort();
        }
        let _ = workers.await;
        agent.probes.stop_all();
        probe_event_task.abort();
        if agent.opts.keep_pods_on_exit {
            status_stop.cancel();
            let _ = tokio::time::timeout(Duration::from_secs(5), status_writer).await;
            // containerd stops; the pods run on in their shims, with their network, volumes
            // and cgroups, for the next start to adopt.
            tracing::info!("agent: stopping, leaving the pods running");
            if let Some(c) = containerd {
                tokio::task::spawn_blocking(move || c.detach())
                    .await
                    .map_err(|e| Error::Other(e.to_string()))?;
            }
            return Ok(());
        }
        // containerd (and the pods it runs) stop with the agent; the Node stays. Every pod is
        // terminated as a deletion terminates it — preStop hooks and grace periods, containers,
        // sandbox (CNI releases its address, veth and netns), volumes, cgroup — and whatever
        // else the runtime runs goes too.
        agent.terminate_all().await;
        // The pods are gone: their local volumes' file systems are unmounted (mounted again,
        // from their images, when a pod next uses them).
        agent.volumes.unmount_local_volumes();
        status_stop.cancel();
        let _ = tokio::time::timeout(Duration::from_secs(5), status_writer).await;
        drop(containerd);
        // A hollow node made neither.
        if cni_opts.is_some() {
            crate::cgroups::remove(&cgroup_parent);
            cni::remove_bridge(&agent.opts.bridge);
        }
        Ok(())
    }

    /// Watch the pods bound to this node; each change wakes the workers it concerns.
    async fn watch_pods(self: Arc<Self>, stop: CancellationToken) {
        let api: Api<Pod> = Api::all(self.client.clone());
        let config = watcher::Config::default().fields(&format!("spec.nodeName={}", self.opts.node_name));
        let mut stream = std::pin::pin!(watcher(api, config));
        // The uids of a (re)list in progress.
        let mut listed = Vec::new();
        loop {
            let event = tokio::select! {
                _ = stop.cancelled() => return,
                e = stream.next() => e,
            };
            let Some(Ok(event)) = event else {
                tokio::time::sleep(Duration::from_millis(500)).await;
                continue;
            };
            let wake = match event {
                watcher::Event::Apply(p) | watcher::Event::InitApply(p) => {
                    listed.push(p.uid().unwrap_or_default());
                    self.workers.lock().unwrap().update(p, Instant::now())
                }
                watcher::Event::Delete(p) => {
                    let uid = p.uid().unwrap_or_default();
                    self.workers.lock().unwrap().delete(&uid).into_iter().collect()
                }
                watcher::Event::Init => {
                    listed.clear();
                    Vec::new()
                }
                // With the full list known, the pods missing from it were deleted while the
                // watch was away; and what the runtime runs for pods no worker knows is swept
                // (the key SWEEP).
                watcher::Event::InitDone => {
                    let mut gone = self.workers.lock().unwrap().retain_listed(&listed);
                    gone.push(SWEEP.to_string());
                    gone
                }
            };
            for uid in wake {
                self.queue.add(uid);
            }
        }
    }

    /// The PLEG (`pleg_loop`), waking the workers of the pods whose sandboxes or containers
    /// changed.
    async fn relist_loop(self: Arc<Self>, stop: CancellationToken) {
        pleg_loop(&*self.runtime, |uid| self.queue.add(uid), stop).await
    }

    /// The API client the agent uses.
    pub fn client(&self) -> Client {
        self.client.clone()
    }

    pub fn node_name(&self) -> &str {
        &self.opts.node_name
    }

    /// CRI, for exec, attach, port-forward and logs (none on a hollow node).
    pub fn cri(&self) -> Option<&Cri> {
        self.cri.as_ref()
    }

    pub fn metrics(&self) -> &crate::metrics::KubeletMetrics {
        &self.metrics
    }

    /// The pods bound to this node, as the API last showed them.
    pub fn pods(&self) -> Vec<Pod> {
        self.workers
            .lock()
            .unwrap()
            .iter()
            .map(|(_, w)| (*w.pod).clone())
            .collect()
    }

    /// The pod `namespace/name` as this node runs it.
    pub fn pod_by_name(&self, namespace: &str, name: &str) -> Option<Arc<Pod>> {
        self.workers.lock().unwrap().by_name(namespace, name)
    }

    pub(crate) async fn sandboxes_of(&self, uid: &str) -> Result<Vec<cri::PodSandbox>, Error> {
        self.runtime.list_sandboxes(Some(uid)).await
    }

    /// The resource usage of the node, its pods and their running containers, read from the
    /// cgroups now (`/metrics/resource`).
    pub(crate) async fn resource_snapshot(&self) -> crate::stats::Snapshot {
        use crate::stats::{ContainerUsage, PodUsage, Snapshot};
        let mut snap = Snapshot {
            timestamp_ms: jiff::Timestamp::now().as_millisecond(),
            node: crate::stats::host_usage(),
            ..Snapshot::default()
        };
        let containers = match self.runtime.list_containers(None).await {
            Ok(c) => c,
            Err(e) => {
                tracing::debug!(error = %e, "resource metrics: listing containers");
                snap.scrape_error = true;
                return snap;
            }
        };
        let mut pods: std::collections::BTreeMap<String, Option<String>> = Default::default();
        for c in containers
            .iter()
            .filter(|c| c.state == cri::ContainerState::ContainerRunning as i32)
        {
            let label = |k: &str| c.labels.get(k).cloned().unwrap_or_default();
            let (uid, namespace, pod) = (
                label(spec::POD_UID),
                label(spec::POD_NAMESPACE),
                label(spec::POD_NAME),
            );
            let container = c.metadata.as_ref().map(|m| m.name.clone()).unwrap_or_default();
            if uid.is_empty() || container.is_empty() {
                continue;
            }
            let pod_path = pods.entry(uid.clone()).or_insert_with(|| {
                let found = self.cgroups.pod_usage(&uid);
                if let Some((path, usage)) = &found {
                    snap.pods.push(PodUsage {
                        namespace: namespace.clone(),
                        pod: pod.clone(),
                        usage: *usage,
                    });
                    return Some(path.clone());
                }
                None
            });
            let Some(pod_path) = pod_path else {
                snap.scrape_error = true;
                continue;
            };
            match self.cgroups.usage(&format!("{pod_path}/{}", c.id)) {
                Some(usage) => snap.containers.push(ContainerUsage {
                    namespace,
                    pod,
                    container,
                    start_time: c.created_at as f64 / 1e9,
                    usage,
                }),
                None => snap.scrape_error = true,
            }
        }
        snap
    }

    /// `kubelet_running_pods` and `kubelet_running_containers` from what the runtime runs now.
    pub(crate) async fn refresh_running_gauges(&self) {
        if let Ok(items) = self.runtime.list_sandboxes(None).await {
            let ready = items
                .iter()
                .filter(|s| s.state == cri::PodSandboxState::SandboxReady as i32)
                .count();
            self.metrics.running_pods.set(ready as i64);
        }
        if let Ok(items) = self.runtime.list_containers(None).await {
            for (state, name) in [
                (cri::ContainerState::ContainerCreated, "created"),
                (cri::ContainerState::ContainerRunning, "running"),
                (cri::ContainerState::ContainerExited, "exited"),
                (cri::ContainerState::ContainerUnknown, "unknown"),
            ] {
                let n = items.iter().filter(|c| c.state == state as i32).count();
                self.metrics
                    .running_containers
                    .get_or_create(&crate::metrics::StateLabels {
                        container_state: name.into(),
                    })
                    .set(n as i64);
            }
        }
    }

    /// The runtime's instances of container `name` of pod `uid`, newest first.
    pub(crate) async fn instances(&self, uid: &str, name: &str) -> Result<Vec<cri::Container>, Error> {
        let mut all = Vec::new();
        for sb in self.sandboxes_of(uid).await? {
            all.extend(
                self.containers_of(&sb.id)
                    .await?
                    .into_iter()
                    .filter(|c| c.metadata.as_ref().is_some_and(|m| m.name == name)),
            );
        }
        all.sort_by_key(|c| std::cmp::Reverse((c.created_at, c.metadata.as_ref().map(|m| m.attempt))));
        Ok(all)
    }

    async fn containers_of(&self, sandbox: &str) -> Result<Vec<cri::Container>, Error> {
        self.runtime.list_containers(Some(sandbox)).await
    }

    /// The pod workers: every key the queue hands out is synced in a task of its own (upstream's
    /// kubelet runs a goroutine per pod), so a pod whose containers wait out their grace period,
    /// or whose image is being pulled, holds no other pod up. The queue never hands out a key
    /// that is being synced, so one pod's syncs never overlap. When `stop` comes no sync starts;
    /// those in flight get `DRAIN_LIMIT` to finish and are then cancelled.
    async fn work(self: Arc<Self>, stop: CancellationToken) {
        let mut syncs = tokio::task::JoinSet::new();
        loop {
            while syncs.try_join_next().is_some() {}
            let key = tokio::select! {
                _ = stop.cancelled() => break,
                key = self.queue.get() => key,
            };
            let Some(key) = key else { break };
            let agent = self.clone();
            syncs.spawn(async move { agent.sync_key(&key).await });
        }
        let drain = async { while syncs.join_next().await.is_some() {} };
        if tokio::time::timeout(DRAIN_LIMIT, drain).await.is_err() {
            tracing::warn!(
                running = syncs.len(),
                "agent: pod syncs still running at shutdown, cancelled"
            );
            syncs.abort_all();
            while syncs.join_next().await.is_some() {}
        }
    }

    /// Sync one key from the queue; a failure retries it after its back-off.
    async fn sync_key(&self, key: &str) {
        match self.sync(key).await {
            Ok(()) => self.queue.forget(key),
            Err(e) => {
                tracing::info!(%key, error = %e, "agent: pod sync failed; retrying");
                self.queue.add_rate_limited(key);
            }
        }
        self.queue.done(key);
    }

    /// Terminate pod `uid` (upstream `SyncTerminatingPod` then `SyncTerminatedPod`): its
    /// containers stop (preStop hooks, within the grace period), its sandboxes go (CNI DEL),
    /// then its volumes are unmounted and its cgroup removed, and the agent forgets it.
    async fn terminate_pod(&self, uid: &str, pod: Option<&Pod>) -> Result<(), Error> {
        self.kill_pod(uid, pod).await?;
        self.forget_pod(uid)
    }

    /// Stop and remove everything the runtime runs for pod `uid` (see `PodSync::kill_pod`).
    async fn kill_pod(&self, uid: &str, pod: Option<&Pod>) -> Result<(), Error> {
        self.probes.forget_pod(uid);
        let hooks = self.hooks(None);
        self.pod_sync(&hooks).kill_pod(uid, pod).await
    }

    /// The executor of pod actions, on this agent's runtime.
    fn pod_sync<'a>(&'a self, hooks: &'a SyncHooks<'a>) -> PodSync<'a> {
        PodSync {
            runtime: self.runtime.as_ref(),
            hooks,
        }
    }

    /// The executor's hooks; container configs need the node and the pod's volumes.
    fn hooks<'a>(
        &'a self,
        place: Option<(&'a NodeContext, &'a BTreeMap<String, HostVolume>)>,
    ) -> SyncHooks<'a> {
        SyncHooks { agent: self, place }
    }

    /// The pod's record (back-offs, events, applied resources), while its worker exists.
    fn record(&self, uid: &str) -> Option<Arc<Mutex<PodRecord>>> {
        self.workers.lock().unwrap().get(uid).map(|w| w.record.clone())
    }

    /// Reconcile one pod, then ask to be woken when something of it falls due.
    async fn sync(&self, key: &str) -> Result<(), Error> {
        let result = self.sync_once(key).await;
        self.schedule_next(key);
        result
    }

    /// The pod's next wake-ups: its status resync, and its activeDeadlineSeconds (counted from
    /// the startTime this kubelet reported). Back-offs ask for theirs where they are decided.
    fn schedule_next(&self, key: &str) {
        let worker = self.workers.lock().unwrap().get(key).cloned();
        let Some(worker) = worker.filter(|w| w.state == WorkerState::Syncing) else {
            self.wakeups.cancel(key);
            return;
        };
        let pod = worker.pod;
        let status = self.status.status(&pod);
        let phase = status.phase.as_deref().unwrap_or("");
        if pod.metadata.deletion_timestamp.is_some() || phase == "Succeeded" || phase == "Failed" {
            return;
        }
        let settled = phase == "Running"
            && status.container_statuses.as_ref().is_some_and(|cs| {
                !cs.is_empty()
                    && cs
                        .iter()
                        .all(|c| c.state.as_ref().is_some_and(|s| s.running.is_some()))
            });
        self.wakeups
            .after(key, if settled { RESYNC } else { RESYNC_UNSETTLED });
        let known = Pod {
            status: Some(status),
            ..(*pod).clone()
        };
        if let Some(left) = actions::deadline_left(&known, jiff::Timestamp::now()) {
            self.wakeups.after(key, left);
        }
    }

    /// Wake `pod`'s worker at `at` (a back-off's end).
    fn wake_at(&self, pod: &Pod, at: std::time::SystemTime) {
        let key = pod.uid().unwrap_or_default();
        let left = at
            .duration_since(std::time::SystemTime::now())
            .unwrap_or_default();
        self.wakeups.after(&key, left);
    }

    /// Run pod `uid`'s worker once, in its phase of life (upstream's podSyncer): syncing
    /// (`sync_pod`), terminating (`sync_terminating_pod`, which ends in terminated), or
    /// terminated (nothing left to do; the record goes once the API no longer has the pod).
    async fn sync_once(&self, key: &str) -> Result<(), Error> {
        let worker = self.workers.lock().unwrap().get(key).cloned();
        let Some(worker) = worker else {
            return self.sweep(key).await;
        };
        let uid = key.to_string();
        // The pod as the kubelet knows it: its status is the one the status manager holds
        // (what this kubelet set last, even if the watch has not brought it back yet).
        let pod = Arc::new(Pod {
            status: Some(self.status.status(&worker.pod)),
            ..(*worker.pod).clone()
        });
        let mut state = worker.state;
        if state == WorkerState::Syncing && pod.metadata.deletion_timestamp.is_some() {
            self.workers.lock().unwrap().terminate(&uid);
            state = WorkerState::Terminating;
        }
        match state {
            WorkerState::Terminated => Ok(()),
            WorkerState::Terminating => self.sync_terminating_pod(&pod, &uid, worker.gone).await,
            WorkerState::Syncing => self.sync_pod(&worker, pod, &uid).await,
        }
    }

    /// A terminating pod (upstream `SyncTerminatingPod` then `SyncTerminatedPod`): a pod deleted
    /// in the API has its terminal status written, its containers stop within their grace
    /// period, its sandbox, volumes and cgroup go, and a deleted pod is then removed from the
    /// API (the kubelet's final word). Its worker is then terminated.
    async fn sync_terminating_pod(&self, pod: &Arc<Pod>, uid: &str, gone: bool) -> Result<(), Error> {
        let deleted = pod.metadata.deletion_timestamp.is_some() && !gone;
        if deleted {
            self.report_terminated(pod, uid).await?;
        }
        self.terminate_pod(uid, Some(pod)).await?;
        if deleted {
            let api: Api<Pod> = Api::namespaced(self.client.clone(), &pod.namespace().unwrap_or_default());
            let dp = DeleteParams {
                grace_period_seconds: Some(0),
                preconditions: Some(kube::api::Preconditions {
                    uid: Some(uid.to_string()),
                    resource_version: None,
                }),
                ..Default::default()
            };
            match api.delete(&pod.name_any(), &dp).await {
                Ok(_) | Err(kube::Error::Api(_)) => {}
                Err(e) => return Err(Error::Other(e.to_string())),
            }
        }
        self.workers.lock().unwrap().terminated(uid);
        Ok(())
    }

    /// A pod that should run (upstream `SyncPod`): its actions computed from what the runtime
    /// runs of it, admission once, its volumes, the actions carried out, its status written.
    async fn sync_pod(&self, worker: &PodWorker, pod: Arc<Pod>, uid: &str) -> Result<(), Error> {
        // The journey's `kubelet.sync_pod` stage (`r8s trace`), kept when it did something.
        let stage = tracing::info_span!(
            target: "journey::kubelet",
            "kubelet.sync_pod",
            uid = %uid,
            object = %format_args!("Pod {}/{}", pod.namespace().unwrap_or_default(), pod.name_any()),
            node = %self.opts.node_name,
            decision = tracing::field::Empty,
            error = tracing::field::Empty,
        );
        let result =
            tracing::Instrument::instrument(self.sync_running_pod(worker, pod, uid), stage.clone()).await;
        if let Err(e) = &result {
            stage.record("error", tracing::field::display(e));
        }
        result
    }

    async fn sync_running_pod(&self, worker: &PodWorker, pod: Arc<Pod>, uid: &str) -> Result<(), Error> {
        let uid = uid.to_string();
        // What the runtime runs of the pod, and what to do about it. The back-offs are
        // committed only if the actions are carried out.
        let hooks = self.hooks(None);
        let snapshot = self.pod_sync(&hooks).snapshot(&uid).await?;
        let failed_probes: HashMap<String, prober::Kind> = snapshot
            .containers
            .iter()
            .filter(|c| c.state == actions::State::Running)
            .filter_map(|c| {
                self.probes
                    .failed(&uid, &c.name, &c.id)
                    .map(|(kind, _)| (c.id.clone(), kind))
            })
            .collect();
        let mut backoff = worker.record.lock().unwrap().backoff.clone();
        let actions = actions::compute_pod_actions(
            &pod,
            &snapshot,
            &mut actions::Context {
                failed_probes: &failed_probes,
                backoff: &mut backoff,
                now: std::time::SystemTime::now(),
            },
        );
        if actions.finished {
            // A finished pod keeps its containers (and their logs) until it is deleted, but not
            // its sandbox: the pause container stops and CNI gives the address back.
            if !actions.stop_sandboxes.is_empty() {
                self.probes.forget_pod(&uid);
            }
            return self
                .pod_sync(&hooks)
                .stop_sandboxes(&actions.stop_sandboxes)
                .await;
        }
        // activeDeadlineSeconds (upstream's activeDeadlineHandler, a PodSyncHandler).
        if actions.deadline_exceeded {
            return self.deadline_exceeded(&pod, &actions, &snapshot).await;
        }
        // Kubelet admission, once, before anything of the pod starts.
        if !worker.admitted {
            let stage = tracing::info_span!(
                target: "journey::kubelet",
                "kubelet.admit",
                decision = tracing::field::Empty,
                error = tracing::field::Empty,
            );
            let admitted = tracing::Instrument::instrument(self.admit(&pod, &uid), stage.clone()).await?;
            match &admitted {
                Ok(()) => stage.record("decision", "admitted"),
                Err(r) => stage.record("error", tracing::field::debug(r)),
            };
            drop(stage);
            if let Err(r) = admitted {
                return self.reject(&pod, &r).await;
            }
        }
        let node = self.node_ctx.lock().unwrap().clone();
        // The pod's directory (upstream `makePodDataDirs`).
        for sub in ["volumes", "plugins", "containers"] {
            std::fs::create_dir_all(self.volumes.pod_dir(&uid).join(sub))?;
        }
        // The volumes (upstream `WaitForAttachAndMount`), made or refreshed on every sync.
        let stage = tracing::info_span!(
            target: "journey::kubelet",
            "volumes",
            count = pod.spec.as_ref().and_then(|s| s.volumes.as_ref()).map_or(0, Vec::len),
            error = tracing::field::Empty,
        );
        let (volumes, errors) =
            tracing::Instrument::instrument(self.volumes.setup(&pod, &node), stage.clone()).await;
        if let Some(e) = errors.first() {
            stage.record("error", e.event_message().as_str());
        }
        drop(stage);
        for e in &errors {
            self.event(&pod, "Warning", "FailedMount", &e.event_message())
                .await;
        }
        if errors.iter().any(|e| e.blocking) {
            return self.report_not_started(&pod).await;
        }
        worker.record.lock().unwrap().backoff = backoff;
        let attempt = match actions.sandbox {
            SandboxAction::Keep { attempt, .. } | SandboxAction::Create { attempt } => attempt,
        };
        let sandbox_config = spec::sandbox_config(&pod, attempt, &node);
        let hooks = self.hooks(Some((&node, &volumes)));
        let applied = self
            .pod_sync(&hooks)
            .apply(&pod, &actions, &sandbox_config)
            .await?;
        {
            let mut record = worker.record.lock().unwrap();
            for id in &actions.remove {
                record.applied.remove(id);
            }
        }
        if let Some(at) = applied.wake_at {
            self.wake_at(&pod, at);
        }
        // One reading of the runtime after the actions; the statuses follow from it.
        let previous: Vec<&str> = actions
            .init
            .iter()
            .chain(&actions.containers)
            .filter_map(|p| p.previous.as_deref())
            .collect();
        let view = self
            .runtime_view(&pod, &uid, &applied.sandbox_id, &previous)
            .await?;
        let mut observed = observe::observe(&pod, &actions, &view, &applied.waiting, applied.pod_ips.clone());
        // The probe workers follow the instances that run now (sidecars and app containers).
        let spec = pod.spec.clone().unwrap_or_default();
        let sidecars = actions.init.iter().filter(|p| p.sidecar).filter_map(|p| {
            let c = spec.init_containers.iter().flatten().find(|c| c.name == p.name)?;
            let st = observed.init_statuses.iter().find(|s| s.name == p.name)?;
            Some((c, st))
        });
        let apps = spec.containers.iter().zip(&observed.statuses);
        let follow: Vec<_> = if actions.initialized {
            sidecars.chain(apps).collect()
        } else {
            sidecars.collect()
        };
        for (c, st) in follow {
            self.probes
                .update(&pod, c, observe::running_instance(st), &applied.pod_ip);
        }
        // A running app container whose resources changed is resized.
        if actions.initialized {
            for (c, status) in spec.containers.iter().zip(observed.statuses.iter_mut()) {
                let Some((id, _)) = observe::running_instance(status) else {
                    continue;
                };
                let id = id.to_string();
                if let Err(pending) = self.resize_container(&pod, c, &id, &node).await {
                    observed.resize_pending = Some(pending);
                }
                let applied_now = worker.record.lock().unwrap().applied.get(&id).cloned();
                if applied_now == Some(qos::container_resources(&pod, c, node.allocatable_memory as i64)) {
                    status.resources = c.resources.clone();
                    status.allocated_resources = c.resources.as_ref().and_then(|r| r.requests.clone());
                }
            }
        }
        self.report(&pod, observed).await
    }

    fn termination_file(&self, uid: &str, name: &str, attempt: u32) -> PathBuf {
        self.volumes
            .pod_dir(uid)
            .join("containers")
            .join(name)
            .join(attempt.to_string())
    }

    /// Write the pod's managed hosts file (`<pod dir>/etc-hosts`) and return its path.
    fn write_hosts_file(&self, pod: &Pod, place: &Place<'_>, node: &NodeContext) -> std::io::Result<PathBuf> {
        let mut ips = vec![place.pod_ip.to_string()];
        for p in pod
            .status
            .as_ref()
            .and_then(|s| s.pod_ips.as_ref())
            .into_iter()
            .flatten()
        {
            if !ips.contains(&p.ip) {
                ips.push(p.ip.clone());
            }
        }
        let node_hosts = std::fs::read_to_string("/etc/hosts").unwrap_or_default();
        let content = spec::hosts_file(pod, &ips, &place.sandbox_config.hostname, node, &node_hosts);
        let file = self
            .volumes
            .pod_dir(&pod.uid().unwrap_or_default())
            .join("etc-hosts");
        std::fs::create_dir_all(file.parent().unwrap_or(std::path::Path::new("/")))?;
        std::fs::write(&file, content)?;
        std::fs::set_permissions(&file, std::os::unix::fs::PermissionsExt::from_mode(0o644))?;
        Ok(file)
    }

    /// A terminated container's message (upstream): what it wrote to its terminationMessagePath
    /// (at most 4 KiB), else with `FallbackToLogsOnError` and a failure, the end of its log
    /// (80 lines, 2 KiB); else the runtime's.
    fn termination_message(
        &self,
        cs: &cri::ContainerStatus,
        c: &k8s_openapi::api::core::v1::Container,
    ) -> Option<String> {
        let uid = cs.labels.get(spec::POD_UID).cloned().unwrap_or_default();
        let attempt = cs.metadata.as_ref().map(|m| m.attempt).unwrap_or(0);
        let file = self.termination_file(&uid, &c.name, attempt);
        let mut written = std::fs::read(&file).unwrap_or_default();
        written.truncate(4096);
        let written = String::from_utf8_lossy(&written).to_string();
        if !written.is_empty() {
            return Some(written);
        }
        if c.termination_message_policy.as_deref() == Some("FallbackToLogsOnError") && cs.exit_code != 0 {
            let data = std::fs::read(&cs.log_path).unwrap_or_default();
            let tail = crate::logs::render_all(
                &data,
                &crate::logs::LogOptions {
                    tail_lines: Some(80),
                    ..Default::default()
                },
            );
            let tail = &tail[tail.len().saturating_sub(2048)..];
            let tail = String::from_utf8_lossy(tail).to_string();
            if !tail.is_empty() {
                return Some(tail);
            }
        }
        Some(cs.message.clone()).filter(|m| !m.is_empty())
    }

    async fn container_inputs(
        &self,
        pod: &Pod,
        c: &k8s_openapi::api::core::v1::Container,
        volumes: &BTreeMap<String, HostVolume>,
    ) -> ContainerInputs {
        let ns = pod.namespace().unwrap_or_default();
        let (cms, secrets) = spec::env_sources(c);
        let mut inputs = ContainerInputs {
            volumes: volumes.clone(),
            ..Default::default()
        };
        // The Services' variables: the kubernetes Service always (in-cluster clients find
        // the API server by it), the namespace's with enableServiceLinks (default true).
        let links = pod
            .spec
            .as_ref()
            .and_then(|s| s.enable_service_links)
            .unwrap_or(true);
        // From the Service informer, as upstream's lister (never a request per container).
        if tokio::time::timeout(Duration::from_secs(5), self.services.wait_synced())
            .await
            .is_err()
        {
            tracing::warn!(pod = %pod.name_any(), "agent: Services not listed yet; no Service environment variables");
        }
        let services = self.services.store().state();
        inputs.service_env = spec::service_env(&spec::linked_services(
            services.iter().map(|s| s.as_ref()),
            &ns,
            links,
        ));
        for name in cms {
            let data = match self.volumes.config_map(&ns, &name).await {
                Lookup::Found(cm) => Lookup::Found(cm.data.clone().unwrap_or_default()),
                Lookup::NotFound => Lookup::NotFound,
                Lookup::Failed(e) => Lookup::Failed(e),
            };
            inputs.config_maps.insert(name, data);
        }
        for name in secrets {
            let data = match self.volumes.secret(&ns, &name).await {
                Lookup::Found(s) => Lookup::Found(
                    s.data
                        .iter()
                        .flatten()
                        .map(|(k, v)| (k.clone(), String::from_utf8_lossy(&v.0).into_owned()))
                        .collect(),
                ),
                Lookup::NotFound => Lookup::NotFound,
                Lookup::Failed(e) => Lookup::Failed(e),
            };
            inputs.secrets.insert(name, data);
        }
        inputs
    }

    /// Resize container `id` in place when its pod's resources for it changed (upstream's
    /// InPlacePodVerticalScaling): if the node has room, the pod cgroup then the container
    /// (CRI UpdateContainerResources) take the new limits; if not, the resize waits
    /// (PodResizePending: Infeasible when the node could never hold it, else Deferred).
    /// A container this agent did not start (an adopted one) counts as it asks.
    async fn resize_container(
        &self,
        pod: &Arc<Pod>,
        c: &k8s_openapi::api::core::v1::Container,
        id: &str,
        node: &NodeContext,
    ) -> Result<(), (String, String)> {
        let want = qos::container_resources(pod, c, node.allocatable_memory as i64);
        let uid = pod.uid().unwrap_or_default();
        let Some(record) = self.record(&uid) else {
            return Ok(());
        };
        let have = record.lock().unwrap().applied.get(id).cloned();
        let Some(have) = have else {
            record.lock().unwrap().applied.insert(id.to_string(), want);
            return Ok(());
        };
        if have == want {
            return Ok(());
        }
        // Room on the node, with the other admitted pods.
        if let Ok(n) = self.node_api().get(&self.opts.node_name).await {
            let others: Vec<Arc<Pod>> = self
                .workers
                .lock()
                .unwrap()
                .iter()
                .filter(|(u, w)| **u != uid && w.admitted && w.state == WorkerState::Syncing)
                .map(|(_, w)| w.pod.clone())
                .filter(|p| {
                    let phase = p.status.as_ref().and_then(|s| s.phase.as_deref()).unwrap_or("");
                    phase != "Succeeded" && phase != "Failed"
                })
                .collect();
            if let Err(r) = admission::admit(pod, &n, &others) {
                let reason = if admission::admit(pod, &n, &[]).is_err() {
                    "Infeasible"
                } else {
                    "Deferred"
                };
                return Err((reason.to_string(), r.message));
            }
        }
        if let Err(e) = self
            .cgroups
            .ensure_pod(qos::pod_qos(pod), &uid, &qos::pod_resources(pod))
        {
            tracing::warn!(pod = %uid, error = %e, "agent: resizing the pod cgroup");
        }
        match self.runtime.update_container_resources(id, want.clone()).await {
            Ok(()) => {
                record.lock().unwrap().applied.insert(id.to_string(), want);
                tracing::info!(pod = %pod.name_any(), container = %c.name, "agent: resized in place");
                Ok(())
            }
            Err(e) => Err(("Deferred".into(), runtime::message(&e))),
        }
    }

    /// Kubelet admission (upstream `canAdmitPod`): the pod against the Node and the pods already
    /// admitted here. Pods this agent finds already started (a restart) are admitted as they are.
    async fn admit(&self, pod: &Pod, uid: &str) -> Result<Result<(), admission::Rejection>, Error> {
        let _one_at_a_time = self.admit_lock.lock().await;
        let started = pod.status.as_ref().is_some_and(|s| s.start_time.is_some());
        if !started && self.sandboxes_of(uid).await?.is_empty() {
            let node = match self.node_api().get(&self.opts.node_name).await {
                Ok(n) => n,
                Err(e) => {
                    tracing::warn!(error = %e, "agent: cannot get the node for admission");
                    return Ok(Err(admission::Rejection {
                        reason: "InvalidNodeInfo".into(),
                        message: "Kubelet cannot get node info.".into(),
                    }));
                }
            };
            let others: Vec<Arc<Pod>> = self
                .workers
                .lock()
                .unwrap()
                .iter()
                .filter(|(id, w)| {
                    let status = w.pod.status.as_ref();
                    let phase = status.and_then(|s| s.phase.as_deref()).unwrap_or("");
                    *id != uid
                        && w.state == WorkerState::Syncing
                        && phase != "Succeeded"
                        && phase != "Failed"
                        && (w.admitted || status.is_some_and(|s| s.start_time.is_some()))
                })
                .map(|(_, w)| w.pod.clone())
                .collect();
            // Security first (upstream's AppArmor admit handler), then the node's resources.
            if let Err((reason, message)) = crate::security::admit_security(pod) {
                return Ok(Err(admission::Rejection { reason, message }));
            }
            if let Err(r) = admission::admit(pod, &node, &others) {
                return Ok(Err(r));
            }
        }
        if let Some(w) = self.workers.lock().unwrap().get_mut(uid) {
            w.admitted = true;
        }
        Ok(Ok(()))
    }

    /// A pod kubelet admission refused (upstream `rejectPod`): a Warning event and phase Failed
    /// with the reason, "Pod was rejected: <message>".
    async fn reject(&self, pod: &Pod, r: &admission::Rejection) -> Result<(), Error> {
        self.event(pod, "Warning", &r.reason, &r.message).await;
        let status = json!({
            "phase": "Failed",
            "reason": r.reason,
            "message": format!("Pod was rejected: {}", r.message),
            "qosClass": qos::pod_qos(pod).as_str(),
            "startTime": pod.status.as_ref().and_then(|s| s.start_time.clone()).unwrap_or_else(now),
        });
        self.status.set(pod, status);
        Ok(())
    }

    /// The pod's cgroup with its limits (upstream `EnsureExists` of the pod container manager),
    /// and the Burstable parent weighted by what its pods now request.
    fn ensure_pod_cgroup(&self, pod: &Pod, uid: &str) -> Result<(), Error> {
        let class = qos::pod_qos(pod);
        let burstable: i64 = self
            .workers
            .lock()
            .unwrap()
            .iter()
            .filter(|(_, w)| w.state == WorkerState::Syncing)
            .map(|(_, w)| w.pod.clone())
            .filter(|p| qos::pod_qos(p) == QosClass::Burstable)
            .filter(|p| {
                let phase = p.status.as_ref().and_then(|s| s.phase.as_deref()).unwrap_or("");
                phase != "Succeeded" && phase != "Failed"
            })
            .filter_map(|p| {
                p.spec
                    .as_ref()
                    .map(|spec| Resources::from_list(&pod_requests(spec)).milli_cpu)
            })
            .sum();
        let cpus = self.node_ctx.lock().unwrap().allocatable_cpu_milli as i64;
        if let Err(e) = self.cgroups.ensure_qos(cpus, burstable) {
            tracing::warn!(error = %e, "agent: could not update the QoS cgroups");
        }
        self.cgroups
            .ensure_pod(class, uid, &qos::pod_resources(pod))
            .map_err(|e| {
                Error::Other(format!(
                    "failed to ensure that the pod: {uid} cgroups exist and are correctly applied: {e}"
                ))
            })?;
        Ok(())
    }

    /// Pod `uid` is gone from this node: its volumes, cgroup, status and probes are forgotten
    /// (its record goes with its worker).
    fn forget_pod(&self, uid: &str) -> Result<(), Error> {
        self.volumes.teardown(uid)?;
        self.cgroups.remove_pod(uid);
        self.status.forget(uid);
        self.probes.forget_pod(uid);
        Ok(())
    }

    /// Record an Event about `pod` (upstream's recorder, with its repeats counted and written
    /// at most every `EVENT_REPEAT`).
    async fn event(&self, pod: &Pod, type_: &str, reason: &str, message: &str) {
        let uid = pod.uid().unwrap_or_default();
        let ns = pod.namespace().unwrap_or_default();
        let key = (reason.to_string(), message.to_string());
        let api: Api<Event> = Api::namespaced(self.client.clone(), &ns);
        // Without a worker (the pod is forgotten), nothing is kept of the event.
        let record = self.record(&uid).unwrap_or_default();
        let previous = record.lock().unwrap().events.get(&key).cloned();
        let now_t = now();
        let result = match previous {
            Some(e) if e.at.elapsed() < EVENT_REPEAT => return,
            Some(RecordedEvent { name, count, .. }) => {
                let patch = json!({"count": count + 1, "lastTimestamp": now_t});
                record.lock().unwrap().events.insert(
                    key,
                    RecordedEvent {
                        name: name.clone(),
                        count: count + 1,
                        at: Instant::now(),
                    },
                );
                api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                    .map(|_| ())
            }
            None => {
                let nanos = jiff::Timestamp::now().as_nanosecond();
                let name = format!("{}.{:x}", pod.name_any(), nanos);
                record.lock().unwrap().events.insert(
                    key,
                    RecordedEvent {
                        name: name.clone(),
                        count: 1,
                        at: Instant::now(),
                    },
                );
                let ev = Event {
                    metadata: ObjectMeta {
                        name: Some(name),
                        namespace: Some(ns.clone()),
                        ..Default::default()
                    },
                    involved_object: ObjectReference {
                        api_version: Some("v1".into()),
                        kind: Some("Pod".into()),
                        name: pod.metadata.name.clone(),
                        namespace: Some(ns),
                        uid: Some(uid),
                        resource_version: pod.metadata.resource_version.clone(),
                        ..Default::default()
                    },
                    reason: Some(reason.into()),
                    message: Some(message.into()),
                    type_: Some(type_.into()),
                    count: Some(1),
                    first_timestamp: Some(now_t.clone()),
                    last_timestamp: Some(now_t),
                    source: Some(EventSource {
                        component: Some("kubelet".into()),
                        host: Some(self.opts.node_name.clone()),
                    }),
                    reporting_component: Some("kubelet".into()),
                    reporting_instance: Some(self.opts.node_name.clone()),
                    ..Default::default()
                };
                api.create(&PostParams::default(), &ev).await.map(|_| ())
            }
        };
        if let Err(e) = result {
            tracing::debug!(error = %e, reason, "agent: could not record event");
        }
    }

    /// The CRI runtime handler of the pod's RuntimeClass ("" when it names none), as upstream's
    /// runtime class manager looks it up: a class that does not exist fails the sandbox.
    async fn runtime_handler(&self, pod: &Pod) -> Result<String, Error> {
        let Some(name) = pod.spec.as_ref().and_then(|s| s.runtime_class_name.as_deref()) else {
            return Ok(String::new());
        };
        let api: Api<k8s_openapi::api::node::v1::RuntimeClass> = Api::all(self.client.clone());
        match api.get_opt(name).await {
            Ok(Some(rc)) => Ok(rc.handler),
            Ok(None) => Err(Error::Other(format!(
                "runtimeclass.node.k8s.io {name:?} not found"
            ))),
            Err(e) => Err(Error::Other(format!("failed to lookup RuntimeClass {name}: {e}"))),
        }
    }

    /// The pod ran longer than its activeDeadlineSeconds: its containers are stopped (preStop
    /// hooks within the grace period), its sandbox too, and it is Failed with DeadlineExceeded.
    async fn deadline_exceeded(
        &self,
        pod: &Arc<Pod>,
        actions: &PodActions,
        snapshot: &actions::PodRuntime,
    ) -> Result<(), Error> {
        let uid = pod.uid().unwrap_or_default();
        self.event(pod, "Normal", "DeadlineExceeded", DEADLINE_MESSAGE)
            .await;
        self.probes.forget_pod(&uid);
        let old = pod.status.clone().unwrap_or_default();
        let initialized = old
            .conditions
            .iter()
            .flatten()
            .any(|c| c.type_ == "Initialized" && c.status == "True");
        let observed = |statuses: Vec<ContainerStatus>| Observed {
            pod_ips: old.pod_ips.iter().flatten().map(|p| p.ip.clone()).collect(),
            statuses,
            init_statuses: old.init_container_statuses.clone().unwrap_or_default(),
            ephemeral_statuses: old.ephemeral_container_statuses.clone().unwrap_or_default(),
            initialized,
            failed: Some(("DeadlineExceeded", DEADLINE_MESSAGE)),
            terminal: false,
            resize_pending: None,
        };
        // As upstream's kubelet: the sync that finds the deadline passed reports the pod Failed
        // with DeadlineExceeded at once (its containers as last seen, none ready), and only then
        // kills them, which may take the whole grace period for a process that ignores SIGTERM.
        let last_seen = old
            .container_statuses
            .clone()
            .unwrap_or_default()
            .into_iter()
            .map(|st| ContainerStatus { ready: false, ..st })
            .collect();
        self.report(pod, observed(last_seen)).await?;
        let hooks = self.hooks(None);
        let exec = self.pod_sync(&hooks);
        exec.kill(pod, actions).await;
        let spec = pod.spec.clone().unwrap_or_default();
        let newest = snapshot.sandboxes.iter().max_by_key(|s| s.created_at);
        let view = match newest {
            Some(sb) => Some(self.runtime_view(pod, &uid, &sb.id, &[]).await?),
            None => None,
        };
        let mut statuses = Vec::new();
        for c in &spec.containers {
            let st = match &view {
                Some(view) => observe::container_status(c, view, None),
                None => ContainerStatus {
                    name: c.name.clone(),
                    image: c.image.clone().unwrap_or_default(),
                    ..Default::default()
                },
            };
            statuses.push(ContainerStatus { ready: false, ..st });
        }
        exec.stop_sandboxes(&actions.stop_sandboxes).await?;
        self.report(pod, observed(statuses)).await
    }

    /// Upstream's `SyncTerminatingPod` for a deleted pod: its containers stop (each with its
    /// grace period), then the pod is reported terminal — every container terminated, the
    /// phase Failed unless all of them exited 0 (Succeeded) — and that status is written before
    /// the kubelet's final delete. A pod kept by a finalizer (a Job's pod) so shows the
    /// controller it has finished, and the controller lets it go.
    async fn report_terminated(&self, pod: &Arc<Pod>, uid: &str) -> Result<(), Error> {
        self.probes.forget_pod(uid);
        let hooks = self.hooks(None);
        self.pod_sync(&hooks).stop_containers(uid, Some(pod)).await?;
        // A terminal phase is final (upstream's status manager refuses to leave one): a pod
        // that had finished, or was failed by the kubelet, keeps the status it has.
        let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
        if matches!(phase, Some("Succeeded" | "Failed")) {
            self.status.flush_pod(uid).await;
            return Ok(());
        }
        let sandboxes = self.runtime.list_sandboxes(Some(uid)).await?;
        let newest = sandboxes.iter().max_by_key(|s| s.created_at);
        let old = pod.status.clone().unwrap_or_default();
        let spec = pod.spec.clone().unwrap_or_default();
        let view = match newest {
            Some(sb) => Some(self.runtime_view(pod, uid, &sb.id, &[]).await?),
            None => None,
        };
        let mut statuses = Vec::new();
        for c in &spec.containers {
            let st = match &view {
                Some(view) => observe::container_status(c, view, None),
                None => old
                    .container_statuses
                    .iter()
                    .flatten()
                    .find(|s| s.name == c.name)
                    .cloned()
                    .unwrap_or_else(|| ContainerStatus {
                        name: c.name.clone(),
                        image: c.image.clone().unwrap_or_default(),
                        ..Default::default()
                    }),
            };
            statuses.push(terminal_container_status(st));
        }
        let initialized = old
            .conditions
            .iter()
            .flatten()
            .any(|c| c.type_ == "Initialized" && c.status == "True");
        let observed = Observed {
            pod_ips: old.pod_ips.iter().flatten().map(|p| p.ip.clone()).collect(),
            statuses,
            init_statuses: old.init_container_statuses.clone().unwrap_or_default(),
            ephemeral_statuses: old.ephemeral_container_statuses.clone().unwrap_or_default(),
            initialized,
            failed: None,
            terminal: true,
            resize_pending: None,
        };
        self.report(pod, observed).await?;
        self.status.flush_pod(uid).await;
        Ok(())
    }

    /// The pod's conditions of types the kubelet does not write: the informer's copy (what the
    /// API server holds now) first, then any the kubelet's own last status still has.
    fn others_conditions(&self, pod: &Pod) -> Vec<PodCondition> {
        let uid = pod.uid().unwrap_or_default();
        let api = self.workers.lock().unwrap().get(&uid).map(|w| w.pod.clone());
        let mut out: Vec<PodCondition> = Vec::new();
        let sources = api.iter().map(|p| p.as_ref()).chain(std::iter::once(pod));
        for c in sources.flat_map(|p| p.status.iter().flat_map(|s| s.conditions.iter().flatten())) {
            if !KUBELET_CONDITIONS.contains(&c.type_.as_str()) && !out.iter().any(|o| o.type_ == c.type_) {
                out.push(c.clone());
            }
        }
        out
    }

    /// The status of a pod whose volumes are not ready: nothing started, every container
    /// waiting in ContainerCreating (after the init containers, PodInitializing).
    async fn report_not_started(&self, pod: &Pod) -> Result<(), Error> {
        let spec = pod.spec.clone().unwrap_or_default();
        let waiting = |c: &k8s_openapi::api::core::v1::Container, reason: &str| ContainerStatus {
            name: c.name.clone(),
            image: c.image.clone().unwrap_or_default(),
            state: Some(ContainerState {
                waiting: Some(ContainerStateWaiting {
                    reason: Some(reason.into()),
                    message: None,
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        let inits: Vec<ContainerStatus> = spec
            .init_containers
            .iter()
            .flatten()
            .map(|c| waiting(c, "ContainerCreating"))
            .collect();
        let main_reason = if inits.is_empty() {
            "ContainerCreating"
        } else {
            "PodInitializing"
        };
        let statuses = spec.containers.iter().map(|c| waiting(c, main_reason)).collect();
        let initialized = inits.is_empty();
        let observed = Observed {
            pod_ips: Vec::new(),
            statuses,
            init_statuses: inits,
            ephemeral_statuses: pod
                .status
                .as_ref()
                .and_then(|s| s.ephemeral_container_statuses.clone())
                .unwrap_or_default(),
            initialized,
            failed: None,
            terminal: false,
            resize_pending: None,
        };
        self.report(pod, observed).await
    }

    /// Phase, conditions, IPs and container statuses (upstream `generateAPIPodStatus`).
    async fn report(&self, pod: &Pod, observed: Observed) -> Result<(), Error> {
        let Observed {
            pod_ips,
            statuses,
            init_statuses,
            ephemeral_statuses,
            initialized,
            failed,
            terminal,
            resize_pending,
        } = observed;
        let node_ipv6 = self
            .opts
            .node_ip
            .parse::<std::net::IpAddr>()
            .is_ok_and(|a| a.is_ipv6());
        let pod_ips = crate::runtime::status_pod_ips(&pod_ips, node_ipv6);
        let restart = pod
            .spec
            .as_ref()
            .and_then(|s| s.restart_policy.clone())
            .unwrap_or_else(|| "Always".into());
        // An init container that failed and may not be restarted fails the pod.
        let init_failed = restart == "Never"
            && init_statuses.iter().any(|s| {
                s.state
                    .as_ref()
                    .and_then(|st| st.terminated.as_ref())
                    .is_some_and(|t| t.exit_code != 0)
            });
        let phase = if init_failed || failed.is_some() {
            "Failed"
        } else if terminal {
            terminal_phase(&statuses)
        } else if !initialized {
            "Pending"
        } else {
            pod_phase(&statuses, &restart)
        };
        // Ready: every container ready (running, started, its readiness probe passing).
        let unready: Vec<&str> = statuses
            .iter()
            .filter(|s| !s.ready)
            .map(|s| s.name.as_str())
            .collect();
        let containers_ready = !statuses.is_empty() && unready.is_empty() && failed.is_none();
        let ready = if containers_ready { "True" } else { "False" };
        let unready_message = format!("containers with unready status: [{}]", unready.join(" "));
        let old = pod.status.clone().unwrap_or_default();
        let old_cond = |t: &str| old.conditions.iter().flatten().find(|c| c.type_ == t).cloned();
        let cond = |t: &str, status: &str| {
            let prev = old_cond(t);
            PodCondition {
                type_: t.into(),
                status: status.into(),
                last_transition_time: match &prev {
                    Some(p) if p.status == status => p.last_transition_time.clone(),
                    _ => Some(now()),
                },
                reason: (status == "False" && t != "Initialized").then(|| "ContainersNotReady".to_string()),
                message: (status == "False" && t != "Initialized" && !unready.is_empty())
                    .then(|| unready_message.clone()),
                ..Default::default()
            }
        };
        // Not initialized: which init containers keep it so (upstream's
        // GeneratePodInitializedCondition): a regular one until it exits 0, a sidecar until it
        // has started.
        let initialized_cond = if initialized {
            cond("Initialized", "True")
        } else {
            let sidecars: Vec<&str> = pod
                .spec
                .iter()
                .flat_map(|s| s.init_containers.iter().flatten())
                .filter(|c| c.restart_policy.as_deref() == Some("Always"))
                .map(|c| c.name.as_str())
                .collect();
            let incomplete: Vec<&str> = init_statuses
                .iter()
                .filter(|s| {
                    if sidecars.contains(&s.name.as_str()) {
                        s.started != Some(true)
                    } else {
                        s.state
                            .as_ref()
                            .and_then(|st| st.terminated.as_ref())
                            .is_none_or(|t| t.exit_code != 0)
                    }
                })
                .map(|s| s.name.as_str())
                .collect();
            PodCondition {
                reason: Some("ContainersNotInitialized".into()),
                message: Some(format!(
                    "containers with incomplete status: [{}]",
                    incomplete.join(" ")
                )),
                ..cond("Initialized", "False")
            }
        };
        // The conditions others own (PodScheduled, DisruptionTarget, readiness gates' types)
        // stay as the API server has them: the merge patch replaces the whole list.
        let others = self.others_conditions(pod);
        // Ready also waits for the pod's readiness gates (upstream's GeneratePodReadyCondition).
        let gates = readiness_gates_unready(pod, &others);
        let ready_cond = if containers_ready && !gates.is_empty() {
            PodCondition {
                reason: Some("ReadinessGatesNotReady".into()),
                message: Some(gates.join(", ")),
                ..cond("Ready", "False")
            }
        } else {
            cond("Ready", ready)
        };
        let pod_ready = ready_cond.status.clone();
        let mut conditions = vec![
            cond("PodReadyToStartContainers", "True"),
            initialized_cond,
            ready_cond,
            cond("ContainersReady", ready),
        ];
        conditions.extend(others);
        if let Some((reason, message)) = &resize_pending {
            conditions.push(PodCondition {
                type_: "PodResizePending".into(),
                status: "True".into(),
                reason: Some(reason.clone()),
                message: Some(message.clone()),
                last_transition_time: old_cond("PodResizePending")
                    .and_then(|c| c.last_transition_time)
                    .or_else(|| Some(now())),
                ..Default::default()
            });
        }
        let status = json!({"status": {
            "phase": phase,
            "hostIP": self.opts.node_ip,
            "hostIPs": std::iter::once(&self.opts.node_ip)
                .chain(self.opts.secondary_node_ip.as_ref())
                .map(|ip| json!({"ip": ip}))
                .collect::<Vec<_>>(),
            "podIP": pod_ips.first(),
            "podIPs": if pod_ips.is_empty() { None } else { Some(pod_ips.iter().map(|ip| PodIP { ip: ip.clone() }).collect::<Vec<_>>()) },
            "startTime": old.start_time.clone().unwrap_or_else(now),
            "conditions": conditions,
            "containerStatuses": statuses,
            "initContainerStatuses": if init_statuses.is_empty() { None } else { Some(init_statuses) },
            "ephemeralContainerStatuses": if ephemeral_statuses.is_empty() { None } else { Some(ephemeral_statuses) },
            "reason": failed.map(|f| f.0),
            "message": failed.map(|f| f.1),
        }});
        // Only write when something other than timestamps changed.
        let changed = old.phase.as_deref() != Some(phase)
            || old_cond("Ready").map(|c| c.status) != Some(pod_ready)
            || resize_pending.is_some() != old_cond("PodResizePending").is_some()
            || old.reason.as_deref() != failed.map(|f| f.0)
            || old.container_statuses.as_ref().map(|v| v.len()) != Some(statuses_len(&status))
            || serde_json::to_value(&old.container_statuses).ok()
                != Some(status["status"]["containerStatuses"].clone())
            || old.pod_ip.as_deref() != status["status"]["podIP"].as_str()
            || serde_json::to_value(&old.init_container_statuses).ok()
                != Some(status["status"]["initContainerStatuses"].clone())
            || serde_json::to_value(&old.ephemeral_container_statuses).ok()
                != Some(status["status"]["ephemeralContainerStatuses"].clone())
            || old
                .conditions
                .as_ref()
                .and_then(|cs| cs.iter().find(|c| c.type_ == "Initialized"))
                .map(|c| c.status == "True")
                != Some(initialized);
        if phase == "Running" && old.phase.as_deref() != Some("Running") {
            let seen = self
                .workers
                .lock()
                .unwrap()
                .get_mut(&pod.uid().unwrap_or_default())
                .and_then(|w| w.first_seen.take());
            if let Some(t) = seen {
                self.metrics.pod_start.observe(t.elapsed().as_secs_f64());
            }
        }
        if changed {
            self.status.set(pod, status["status"].clone());
        }
        // A pod that has just finished is synced once more, to release its sandbox.
        if (phase == "Succeeded" || phase == "Failed") && old.phase.as_deref() != Some(phase) {
            self.queue.add(pod.uid().unwrap_or_default());
        }
        Ok(())
    }
}

/// The executor's hooks for one sync: the agent, and for container configs the node and the
/// pod's volumes.
struct SyncHooks<'a> {
    agent: &'a Agent,
    place: Option<(&'a NodeContext, &'a BTreeMap<String, HostVolume>)>,
}

#[async_trait::async_trait]
impl Hooks for SyncHooks<'_> {
    async fn event(&self, pod: &Pod, type_: &str, reason: &str, message: &str) {
        self.agent.event(pod, type_, reason, message).await
    }

    async fn prepare_sandbox(&self, pod: &Pod, config: &cri::PodSandboxConfig) -> Result<String, Error> {
        let handler = self.agent.runtime_handler(pod).await?;
        std::fs::create_dir_all(&config.log_directory)?;
        self.agent
            .ensure_pod_cgroup(pod, &pod.uid().unwrap_or_default())?;
        Ok(handler)
    }

    async fn sandbox_network_ready(&self, pod: &Pod, pod_ip: &str) {
        if let Some(hook) = &self.agent.opts.network_hook {
            (hook.0)(pod.clone(), pod_ip.to_owned()).await;
        }
    }

    async fn container_config(
        &self,
        pod: &Pod,
        c: &k8s_openapi::api::core::v1::Container,
        attempt: u32,
        place: &Place<'_>,
    ) -> Result<cri::ContainerConfig, (String, String)> {
        let Some((node, volumes)) = self.place else {
            return Err(("CreateContainerConfigError".into(), "no volumes".into()));
        };
        // The journey's `image` stage (`r8s trace`): present, pulled, or why not.
        let stage = tracing::info_span!(
            target: "journey::kubelet",
            "image",
            container = %c.name,
            image = c.image.as_deref().unwrap_or(""),
            decision = tracing::field::Empty,
            error = tracing::field::Empty,
        );
        let image_info = tracing::Instrument::instrument(
            self.agent.ensure_image(pod, c, place.sandbox_config),
            stage.clone(),
        )
        .await;
        if let Err((reason, message)) = &image_info {
            stage.record(
                "error",
                tracing::field::display(format_args!("{reason}: {message}")),
            );
        }
        drop(stage);
        let image_info = image_info?;
        let mut inputs = self.agent.container_inputs(pod, c, volumes).await;
        inputs.image_user = crate::security::ImageUser::of(image_info.as_ref());
        // The pod's addresses as the sandbox has them: on its first start the pod's status
        // has none yet, and `status.podIP(s)` references must see them (upstream passes the
        // sandbox's IPs into the container's environment).
        let mut pod_now;
        let pod = if place.pod_ip.is_empty()
            || pod.status.as_ref().and_then(|s| s.pod_ip.as_deref()) == Some(place.pod_ip)
        {
            pod
        } else {
            pod_now = pod.clone();
            let status = pod_now.status.get_or_insert_with(Default::default);
            status.pod_ip = Some(place.pod_ip.to_string());
            status.pod_ips = Some(vec![k8s_openapi::api::core::v1::PodIP {
                ip: place.pod_ip.to_string(),
            }]);
            &pod_now
        };
        let (config, warnings) = match spec::container_config(pod, c, attempt, node, &inputs) {
            Ok(v) => v,
            Err(m) => {
                // Upstream's FailedToCreateContainer event.
                self.agent
                    .event(pod, "Warning", "Failed", &format!("Error: {m}"))
                    .await;
                return Err(("CreateContainerConfigError".to_string(), m));
            }
        };
        for w in warnings {
            self.agent
                .event(pod, "Warning", "InvalidEnvironmentVariableNames", &w)
                .await;
        }
        // The termination-message file, empty for this run, where the container may write.
        let mut config = config;
        if let Some(path) = c.termination_message_path.as_deref().filter(|p| !p.is_empty()) {
            let uid = pod.uid().unwrap_or_default();
            let file = self.agent.termination_file(&uid, &c.name, attempt);
            let made = file
                .parent()
                .map(|d| std::fs::create_dir_all(d).and_then(|_| std::fs::write(&file, b"")))
                .unwrap_or(Ok(()))
                .and_then(|_| {
                    std::fs::set_permissions(&file, std::os::unix::fs::PermissionsExt::from_mode(0o666))
                });
            match made {
                Ok(()) => config.mounts.push(cri::Mount {
                    container_path: path.to_string(),
                    host_path: file.display().to_string(),
                    readonly: false,
                    ..Default::default()
                }),
                Err(e) => tracing::warn!(error = %e, "agent: no termination-message file"),
            }
        }
        // The kubelet's /etc/hosts (upstream's makeMounts): once the pod has an address, and
        // unless the container mounts its own. Rewritten for each container it starts.
        if !place.pod_ip.is_empty() && spec::mounts_hosts_file(c) {
            match self.agent.write_hosts_file(pod, place, node) {
                Ok(file) => config.mounts.push(cri::Mount {
                    container_path: "/etc/hosts".into(),
                    host_path: file.display().to_string(),
                    readonly: false,
                    ..Default::default()
                }),
                Err(e) => tracing::warn!(error = %e, "agent: no managed /etc/hosts"),
            }
        }
        Ok(config)
    }

    fn created(&self, pod: &Pod, id: &str, config: &cri::ContainerConfig) {
        let resources = config.linux.as_ref().and_then(|l| l.resources.clone());
        if let (Some(r), Some(record)) = (resources, self.agent.record(&pod.uid().unwrap_or_default())) {
            record.lock().unwrap().applied.insert(id.to_string(), r);
        }
    }

    async fn run_hook(
        &self,
        pod: &Pod,
        c: &k8s_openapi::api::core::v1::Container,
        hook: &k8s_openapi::api::core::v1::LifecycleHandler,
        id: &str,
        pod_ip: &str,
        limit: Duration,
    ) -> Result<(), String> {
        let target = prober::Target {
            container_id: id.to_string(),
            pod_ip: pod_ip.to_string(),
            ports: c.ports.clone().unwrap_or_default(),
        };
        lifecycle::run(&*self.agent.runtime, hook, pod, c, &target, limit).await
    }
}

/// The phase from the app containers' statuses (upstream `getPhase`): a container waiting to
/// restart after it ran counts as stopped, so a crash-looping pod is Running.
fn pod_phase(statuses: &[ContainerStatus], restart: &str) -> &'static str {
    let (mut running, mut waiting, mut stopped, mut succeeded, mut unknown) = (0, 0, 0, 0, 0);
    for s in statuses {
        let state = s.state.clone().unwrap_or_default();
        if state.running.is_some() {
            running += 1;
        } else if let Some(t) = &state.terminated {
            stopped += 1;
            if t.exit_code == 0 {
                succeeded += 1;
            }
        } else if state.waiting.is_some() {
            if s.last_state.as_ref().is_some_and(|l| l.terminated.is_some()) {
                stopped += 1;
            } else {
                waiting += 1;
            }
        } else {
            unknown += 1;
        }
    }
    if statuses.is_empty() || waiting > 0 || unknown > 0 {
        "Pending"
    } else if running > 0 || restart == "Always" {
        "Running"
    } else if stopped == succeeded {
        "Succeeded"
    } else if restart == "Never" {
        "Failed"
    } else {
        "Running"
    }
}

/// Why a container ended: the runtime's reason (OOMKilled), else Completed or Error.
fn terminated_reason(cs: &cri::ContainerStatus) -> String {
    if !cs.reason.is_empty() {
        cs.reason.clone()
    } else if cs.exit_code == 0 {
        "Completed".into()
    } else {
        "Error".into()
    }
}

/// What a sync saw of a pod, for its status.
/// A container waiting for the init containers before it (`PodInitializing`).
fn pod_initializing(c: &k8s_openapi::api::core::v1::Container) -> ContainerStatus {
    ContainerStatus {
        name: c.name.clone(),
        image: c.image.clone().unwrap_or_default(),
        state: Some(ContainerState {
            waiting: Some(ContainerStateWaiting {
                reason: Some("PodInitializing".into()),
                message: None,
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

struct Observed {
    /// The pod's addresses, its podIP first (none before its sandbox has one).
    pod_ips: Vec<String>,
    statuses: Vec<ContainerStatus>,
    init_statuses: Vec<ContainerStatus>,
    /// The ephemeral containers' statuses (never ready; each run once).
    ephemeral_statuses: Vec<ContainerStatus>,
    initialized: bool,
    /// Why the kubelet failed the pod itself (reason, message), as for activeDeadlineSeconds.
    failed: Option<(&'static str, &'static str)>,
    /// The pod is done on this node (deleted, its containers stopped): its phase is terminal.
    terminal: bool,
    /// A resize the node cannot make now (the PodResizePending condition's reason, message).
    resize_pending: Option<(String, String)>,
}

/// The pod conditions the kubelet writes; any other type belongs to someone else.
const KUBELET_CONDITIONS: &[&str] = &[
    "PodReadyToStartContainers",
    "Initialized",
    "Ready",
    "ContainersReady",
    "PodResizePending",
    "PodResizeInProgress",
];

/// Why the pod's readiness gates keep it from Ready, given its `conditions` (upstream's
/// messages); empty when every gate's condition is True.
fn readiness_gates_unready(pod: &Pod, conditions: &[PodCondition]) -> Vec<String> {
    let gates = pod.spec.iter().flat_map(|s| s.readiness_gates.iter().flatten());
    gates
        .filter_map(|g| {
            let t = &g.condition_type;
            match conditions.iter().find(|c| c.type_ == *t) {
                None => Some(format!(
                    "corresponding condition of pod readiness gate \"{t}\" does not exist."
                )),
                Some(c) if c.status != "True" => Some(format!(
                    "the status of pod readiness gate \"{t}\" is not \"True\", but {}",
                    c.status
                )),
                Some(_) => None,
            }
        })
        .collect()
}

/// A container's status once its pod is terminal (upstream's `convertToAPIContainerStatuses`
/// for a terminal pod): never ready; one still waiting ends as it last ended, or, if it never
/// ran, as `ContainerStatusUnknown` with exit code 137.
fn terminal_container_status(st: ContainerStatus) -> ContainerStatus {
    let state = st.state.clone().unwrap_or_default();
    if state.terminated.is_some() {
        return ContainerStatus {
            ready: false,
            started: Some(false),
            ..st
        };
    }
    let terminated = st
        .last_state
        .as_ref()
        .and_then(|l| l.terminated.clone())
        .filter(|_| state.running.is_none())
        .unwrap_or_else(|| ContainerStateTerminated {
            exit_code: 137,
            reason: Some("ContainerStatusUnknown".into()),
            message: Some("The container could not be located when the pod was terminated".into()),
            started_at: state.running.as_ref().and_then(|r| r.started_at.clone()),
            finished_at: Some(now()),
            ..Default::default()
        });
    ContainerStatus {
        ready: false,
        started: Some(false),
        state: Some(ContainerState {
            terminated: Some(terminated),
            ..Default::default()
        }),
        ..st
    }
}

/// The phase of a terminal pod (upstream's `getPhase` with podIsTerminal): Succeeded when
/// every container exited 0, else Failed.
fn terminal_phase(statuses: &[ContainerStatus]) -> &'static str {
    let all_zero = !statuses.is_empty()
        && statuses.iter().all(|s| {
            s.state
                .as_ref()
                .and_then(|st| st.terminated.as_ref())
                .is_some_and(|t| t.exit_code == 0)
        });
    if all_zero {
        "Succeeded"
    } else {
        "Failed"
    }
}

fn statuses_len(status: &serde_json::Value) -> usize {
    status["status"]["containerStatuses"]
        .as_array()
        .map(|a| a.len())
        .unwrap_or(0)
}

/// The host's resolver (for dnsPolicy Default).
/// The node's resolver configuration from `path` (a missing file is an empty one).
fn host_dns(path: &std::path::Path) -> cri::DnsConfig {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let mut cfg = cri::DnsConfig::default();
    for line in text.lines() {
        let mut w = line.split_whitespace();
        match w.next() {
            Some("nameserver") => cfg.servers.extend(w.next().map(String::from)),
            Some("search") => cfg.searches.extend(w.map(String::from)),
            Some("options") => cfg.options.extend(w.map(String::from)),
            _ => {}
        }
    }
    cfg
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn the_pleg_relists_at_the_runtimes_change_reports_and_seldom_otherwise() {
        use runtime::fake::FakeRuntime;
        let fake = Arc::new(FakeRuntime::default());
        let labels: HashMap<String, String> = [(crate::spec::POD_UID.to_string(), "u1".to_string())].into();
        let config = cri::PodSandboxConfig {
            metadata: Some(cri::PodSandboxMetadata {
                name: "p".into(),
                uid: "u1".into(),
                namespace: "ns".into(),
                attempt: 0,
            }),
            labels: labels.clone(),
            ..Default::default()
        };
        let sandbox = fake.run_sandbox(&config, "").await.unwrap();
        let container = cri::ContainerConfig {
            metadata: Some(cri::ContainerMetadata {
                name: "app".into(),
                attempt: 0,
            }),
            labels,
            ..Default::default()
        };
        let app = fake.create_container(&sandbox, container, &config).await.unwrap();
        fake.start_container(&app).await.unwrap();

        let (tx, mut told) = tokio::sync::mpsc::unbounded_channel::<String>();
        let stop = CancellationToken::new();
        let pleg = tokio::spawn({
            let (fake, stop) = (fake.clone(), stop.clone());
            async move {
                pleg_loop(&*fake, |uid| tx.send(uid.to_owned()).unwrap(), stop).await;
            }
        });
        // Settled (subscribed, relisted every second for AFTER_CHANGE), then ten quiet minutes:
        // one relist a minute, where polling would have made six hundred.
        tokio::time::sleep(AFTER_CHANGE * 2).await;
        let settled = fake.relists();
        assert!(settled >= 2, "{settled} relists to begin with");
        tokio::time::sleep(Duration::from_secs(600)).await;
        let quiet = fake.relists() - settled;
        assert!((9..=11).contains(&quiet), "{quiet} relists in 10 quiet minutes");
        assert!(told.try_recv().is_err(), "nothing changed");

        // The container exits: its pod is told at once, not at the next minute's relist.
        let exited = tokio::time::Instant::now();
        fake.exit(&app, 1);
        assert_eq!(told.recv().await.unwrap(), "u1");
        assert!(exited.elapsed() < RELIST, "told after {:?}", exited.elapsed());
        // The change put relisting back on every second for a while.
        let after = fake.relists();
        tokio::time::sleep(AFTER_CHANGE).await;
        assert!(
            fake.relists() - after >= 4,
            "{} relists after the change",
            fake.relists() - after
        );
        stop.cancel();
        pleg.await.unwrap();
    }

    #[test]
    fn the_resolv_conf_given_is_the_nodes_resolver() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("resolv.conf");
        std::fs::write(
            &path,
            "# comment\nnameserver 192.0.2.53\nsearch a.test b.test\noptions ndots:2 edns0\nnameserver 192.0.2.54\n",
        )
        .unwrap();
        let cfg = host_dns(&path);
        assert_eq!(cfg.servers, ["192.0.2.53", "192.0.2.54"]);
        assert_eq!(cfg.searches, ["a.test", "b.test"]);
        assert_eq!(cfg.options, ["ndots:2", "edns0"]);
        assert_eq!(host_dns(&dir.path().join("missing")), cri::DnsConfig::default());
    }

    fn status(state: serde_json::Value, last: serde_json::Value) -> ContainerStatus {
        serde_json::from_value(
            json!({"name": "c", "image": "i", "ready": false, "restartCount": 0,
            "state": state, "lastState": last}),
        )
        .unwrap()
    }

    #[test]
    fn phase_as_upstream_get_phase() {
        let running = status(json!({"running": {}}), json!({}));
        let creating = status(json!({"waiting": {"reason": "ContainerCreating"}}), json!({}));
        let backing_off = status(
            json!({"waiting": {"reason": "CrashLoopBackOff"}}),
            json!({"terminated": {"exitCode": 2}}),
        );
        let ok = status(json!({"terminated": {"exitCode": 0}}), json!({}));
        let bad = status(json!({"terminated": {"exitCode": 1}}), json!({}));
        assert_eq!(pod_phase(std::slice::from_ref(&running), "Always"), "Running");
        assert_eq!(
            pod_phase(&[running.clone(), creating.clone()], "Always"),
            "Pending"
        );
        assert_eq!(
            pod_phase(std::slice::from_ref(&backing_off), "Always"),
            "Running",
            "crash-looping"
        );
        assert_eq!(pod_phase(&[backing_off, running], "OnFailure"), "Running");
        assert_eq!(pod_phase(std::slice::from_ref(&ok), "Never"), "Succeeded");
        assert_eq!(pod_phase(&[ok.clone(), bad.clone()], "Never"), "Failed");
        assert_eq!(pod_phase(&[bad], "OnFailure"), "Running");
        assert_eq!(pod_phase(&[ok], "Always"), "Running");
        assert_eq!(pod_phase(&[], "Always"), "Pending");
    }

    #[test]
    fn a_deleted_pods_containers_and_phase_are_terminal() {
        // Killed by the deletion (SIGKILL after the grace period): Failed, as upstream.
        let killed = terminal_container_status(status(
            json!({"terminated": {"exitCode": 137, "reason": "Error"}}),
            json!({}),
        ));
        assert_eq!(
            killed
                .state
                .as_ref()
                .unwrap()
                .terminated
                .as_ref()
                .unwrap()
                .exit_code,
            137
        );
        assert_eq!(terminal_phase(std::slice::from_ref(&killed)), "Failed");
        // Every container stopped cleanly on SIGTERM: Succeeded, even under restartPolicy Always.
        let clean = terminal_container_status(status(json!({"terminated": {"exitCode": 0}}), json!({})));
        assert_eq!(terminal_phase(std::slice::from_ref(&clean)), "Succeeded");
        assert_eq!(terminal_phase(&[clean.clone(), killed]), "Failed");
        // Never started: ContainerStatusUnknown, exit code 137, not ready.
        let never = terminal_container_status(status(
            json!({"waiting": {"reason": "ContainerCreating"}}),
            json!({}),
        ));
        let t = never.state.as_ref().unwrap().terminated.clone().unwrap();
        assert_eq!(t.exit_code, 137);
        assert_eq!(t.reason.as_deref(), Some("ContainerStatusUnknown"));
        assert!(never.state.as_ref().unwrap().waiting.is_none());
        assert!(!never.ready);
        // Backing off after a crash: it ends as it last ended.
        let crashed = terminal_container_status(status(
            json!({"waiting": {"reason": "CrashLoopBackOff"}}),
            json!({"terminated": {"exitCode": 2, "reason": "Error"}}),
        ));
        assert_eq!(crashed.state.unwrap().terminated.unwrap().exit_code, 2);
        assert_eq!(terminal_phase(&[]), "Failed");
    }

    #[test]
    fn readiness_gates_hold_ready_until_their_conditions_are_true() {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p"},
            "spec": {"containers": [], "readinessGates": [
                {"conditionType": "example.com/lb"}, {"conditionType": "example.com/dns"}]}
        }))
        .unwrap();
        let c = |t: &str, status: &str| PodCondition {
            type_: t.into(),
            status: status.into(),
            ..Default::default()
        };
        assert_eq!(
            readiness_gates_unready(&pod, &[c("example.com/lb", "False")]),
            [
                r#"the status of pod readiness gate "example.com/lb" is not "True", but False"#,
                r#"corresponding condition of pod readiness gate "example.com/dns" does not exist."#,
            ]
        );
        assert!(
            readiness_gates_unready(&pod, &[c("example.com/lb", "True"), c("example.com/dns", "True")])
                .is_empty()
        );
    }
}
