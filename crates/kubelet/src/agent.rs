//! The agent: registers this machine as a Node, renews its Lease, and runs the pods bound to it
//! through containerd. The pod sync is the reference document's: a worker per pod compares the
//! pod's spec with what CRI reports and acts on the difference — sandbox (pause container, CNI
//! network), then each container — and writes the pod's status back through the API.
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
//! status resync every `RESYNC`. Nothing re-queues every pod on a timer.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use std::time::Instant;

use futures::StreamExt;
use k8s_cri::v1 as cri;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::{
    ContainerState, ContainerStateRunning, ContainerStateTerminated, ContainerStateWaiting, ContainerStatus,
    DaemonEndpoint, Event, EventSource, Node, NodeAddress, NodeCondition, NodeDaemonEndpoints, NodeStatus,
    NodeSystemInfo, ObjectReference, Pod, PodCondition, PodIP,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, OwnerReference, Time};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use r8s_api::resources::{pod_requests, Resources};
use r8s_client::queue::WorkQueue;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::admission;
use crate::backoff::{self, Backoff};
use crate::cgroups::{CgroupManager, Layout};
use crate::cni::{self, CniOptions};
use crate::containerd::{Containerd, ContainerdOptions};
use crate::cri::Cri;
use crate::lifecycle;
use crate::pleg;
use crate::pod_workers::{PodWorkers, WorkerState};
use crate::prober::{self, ProbeEvent, ProbeManager};
use crate::qos::{self, QosClass};
use crate::spec::{self, ContainerInputs, NodeContext};
use crate::status::StatusManager;
use crate::volumes::{HostVolume, Lookup, VolumeManager};
use crate::wakeups::Wakeups;
use crate::Error;

pub const FIELD_MANAGER: &str = "kubelet";

#[derive(Clone, Debug)]
pub struct AgentOptions {
    pub node_name: String,
    /// `<data-dir>/agent`.
    pub dir: PathBuf,
    pub node_ip: String,
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
        }
    }
}

fn read_value(path: &str, key: &str) -> Option<u64> {
    std::fs::read_to_string(path)
        .ok()?
        .lines()
        .find(|l| l.starts_with(key))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// The machine's cpus and memory (KiB): the node's capacity and allocatable.
fn machine_size() -> (usize, u64) {
    let cpus = std::fs::read_to_string("/proc/cpuinfo")
        .map(|t| t.lines().filter(|l| l.starts_with("processor")).count())
        .unwrap_or(1)
        .max(1);
    (cpus, read_value("/proc/meminfo", "MemTotal:").unwrap_or(0))
}

/// The size of the filesystem holding `dir` in bytes (the node's ephemeral-storage, as
/// upstream's kubelet reports its root filesystem).
fn filesystem_size(dir: &std::path::Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `path` is a valid C string and `st` a writable statvfs for the call to fill.
    let rc = unsafe { libc::statvfs(path.as_ptr(), &mut st) };
    (rc == 0).then(|| st.f_blocks as u64 * st.f_frsize as u64)
}

fn os_image() -> String {
    std::fs::read_to_string("/etc/os-release")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("PRETTY_NAME="))
                .map(|l| l.trim_start_matches("PRETTY_NAME=").trim_matches('"').to_string())
        })
        .unwrap_or_else(|| "Linux".into())
}

fn now() -> Time {
    Time(jiff::Timestamp::now())
}

fn condition(type_: &str, status: &str, reason: &str, message: &str) -> NodeCondition {
    NodeCondition {
        type_: type_.into(),
        status: status.into(),
        reason: Some(reason.into()),
        message: Some(message.into()),
        last_heartbeat_time: Some(now()),
        last_transition_time: Some(now()),
    }
}

pub struct Agent {
    pub(crate) client: Client,
    pub(crate) opts: AgentOptions,
    pub(crate) cri: Cri,
    node_ctx: Mutex<NodeContext>,
    /// The pods bound to this node: one worker record per pod UID (the work queue's keys).
    pub(crate) workers: Mutex<PodWorkers>,
    /// The port the kubelet API listens on.
    kubelet_port: u16,
    pub(crate) metrics: Arc<crate::metrics::KubeletMetrics>,
    /// What each container was last given (CRI resources), by container id: a difference
    /// from what its pod now asks is an in-place resize.
    applied: Mutex<HashMap<String, cri::LinuxContainerResources>>,
    /// The images imported from the air-gap tarballs (containerd's full names): no registry
    /// holds them, so they are used as they are whatever the pull policy.
    airgap_images: HashSet<String>,
    queue: Arc<WorkQueue>,
    runtime_version: String,
    /// Restart back-off per `<pod uid>/<container>`, pull back-off per `<pod uid>/pull/<image>`.
    backoff: Mutex<Backoff>,
    probes: ProbeManager,
    volumes: VolumeManager,
    /// The pods' cgroups, by QoS class.
    cgroups: CgroupManager,
    /// Kubelet admission runs once per pod, one pod at a time.
    admit_lock: tokio::sync::Mutex<()>,
    /// Events recorded, by pod uid, reason and message: the event's name, its count and when
    /// it was last written (repeats within `EVENT_REPEAT` are not written again).
    events: Mutex<HashMap<EventKey, RecordedEvent>>,
    /// Writes the pods' statuses in the background, and knows them before the informer does.
    status: Arc<StatusManager>,
    /// When each pod's worker is next due without being asked (deadline, back-off, resync).
    wakeups: Wakeups,
}

/// Pod uid, reason and message.
type EventKey = (String, String, String);

#[derive(Clone)]
struct RecordedEvent {
    name: String,
    count: i32,
    at: Instant,
}

/// Where a pod's containers start: its sandbox, node and volumes.
#[derive(Clone, Copy)]
struct PodPlace<'a> {
    sandbox_id: &'a str,
    sandbox_config: &'a cri::PodSandboxConfig,
    node: &'a NodeContext,
    volumes: &'a BTreeMap<String, HostVolume>,
    pod_ip: &'a str,
}

const EVENT_REPEAT: Duration = Duration::from_secs(30);

/// The shortest stop a grace period leaves a container (upstream `minimumGracePeriodInSeconds`).
const MIN_GRACE: Duration = Duration::from_secs(2);
/// How long a postStart hook may take (upstream waits for ever; a bound keeps the pod's worker
/// from hanging on a hook that never returns).
const POST_START_LIMIT: Duration = Duration::from_secs(300);
/// How often the runtime is relisted for changes (upstream's generic PLEG relists every 1 s).
const RELIST: Duration = Duration::from_secs(1);
/// How often a pod's worker runs when nothing wakes it sooner: its volumes' configMaps and
/// secrets are refreshed and its status written again.
const RESYNC: Duration = Duration::from_secs(10);
/// How long a stopping agent waits for the syncs in flight to finish before it cancels them.
const DRAIN_LIMIT: Duration = Duration::from_secs(10);
/// How long a stopping agent gives its pods to terminate (each within its grace period).
const TERMINATE_LIMIT: Duration = Duration::from_secs(45);
/// How long a stopping agent may take at most, all told: whoever waits for `Agent::run` to
/// return after `stop` should wait this long.
pub const STOP_LIMIT: Duration = Duration::from_secs(60);
/// Pod workers running at once.
const WORKERS: usize = 4;
/// The work-queue key that sweeps what the runtime runs for pods no worker knows.
const SWEEP: &str = "/";
const DEADLINE_MESSAGE: &str = "Pod was active on the node longer than the specified deadline";

impl Agent {
    /// Start containerd, import the air-gap images, register the node; then run until `stop`.
    pub async fn run(client: Client, opts: AgentOptions, stop: CancellationToken) -> Result<(), Error> {
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
            ip_masq: true,
            mtu: None,
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
        let cgroup_parent = crate::cgroups::pod_parent("r8s-pods");
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
        let metrics = Arc::new(crate::metrics::KubeletMetrics::default());
        let cri = Cri::connect_timed(&socket, Some(metrics.runtime.clone())).await?;
        // The kubelet API's listener, bound now so the Node can name its port.
        let kubelet_address = opts
            .kubelet_address
            .clone()
            .unwrap_or_else(|| opts.node_ip.clone());
        let listener = tokio::net::TcpListener::bind((kubelet_address.as_str(), opts.kubelet_port))
            .await
            .map_err(|e| {
                Error::Other(format!(
                    "kubelet API on {kubelet_address}:{}: {e}",
                    opts.kubelet_port
                ))
            })?;
        let kubelet_port = listener.local_addr()?.port();
        let mut names = vec![
            opts.node_name.clone(),
            opts.node_ip.clone(),
            kubelet_address.clone(),
        ];
        names.dedup();
        let (cert, key) = crate::server::serving_cert(&names)?;
        let kubelet_tls = crate::server::tls_config(&cert, &key, &opts.client_ca)?;
        let version = cri.version().await?;
        let (cpus, mem_kib) = machine_size();
        if let Err(e) = cgroups.ensure_qos(cpus as i64 * 1000, 0) {
            tracing::warn!(error = %e, "agent: could not set up the QoS cgroups");
        }
        let queue = WorkQueue::new("kubelet");
        let (probe_events, mut probe_events_rx) = tokio::sync::mpsc::unbounded_channel::<ProbeEvent>();
        let agent = Arc::new(Agent {
            probes: ProbeManager::new(cri.clone(), queue.clone(), probe_events),
            client: client.clone(),
            cri,
            node_ctx: Mutex::new(NodeContext {
                node_name: opts.node_name.clone(),
                host_ip: opts.node_ip.clone(),
                cluster_dns: opts.cluster_dns.clone(),
                cluster_domain: opts.cluster_domain.clone(),
                host_dns: host_dns(),
                log_root: opts.dir.join("pods-logs").display().to_string(),
                cgroup_parent: cgroup_parent.clone(),
                allocatable_cpu_milli: cpus as i128 * 1000,
                allocatable_memory: mem_kib as i128 * 1024,
                seccomp_root: opts.dir.join("seccomp").display().to_string(),
            }),
            volumes: VolumeManager::new(opts.dir.join("pods"), client.clone()),
            cgroups,
            admit_lock: tokio::sync::Mutex::new(()),
            events: Mutex::new(HashMap::new()),
            status: StatusManager::new(client.clone(), FIELD_MANAGER),
            opts,
            workers: Mutex::new(PodWorkers::default()),
            queue,
            backoff: Mutex::new(Backoff::default()),
            runtime_version: format!("{}://{}", version.runtime_name, version.runtime_version),
            kubelet_port,
            metrics,
            applied: Mutex::new(HashMap::new()),
            airgap_images: imported.iter().flat_map(|f| crate::images::names_in(f)).collect(),
            wakeups: Wakeups::new(),
        });
        agent.register().await?;
        // The pod network comes from the node's podCIDR (node IPAM).
        let cidr = agent.wait_pod_cidr(&stop).await;
        if let Some(cidr) = &cidr {
            cni::write(&cni_opts, cidr)?;
            tracing::info!(%cidr, "agent: pod network configured");
        }
        agent.update_node_status(cidr.is_some()).await?;
        tracing::info!(address = %kubelet_address, port = kubelet_port, "agent: kubelet API listening");
        let tasks = vec![
            tokio::spawn(crate::server::serve(
                agent.clone(),
                listener,
                kubelet_tls,
                stop.clone(),
            )),
            tokio::spawn(agent.clone().lease_loop(stop.clone())),
            tokio::spawn(agent.clone().watch_pods(stop.clone())),
            tokio::spawn(agent.clone().relist_loop(stop.clone())),
            tokio::spawn({
                let a = agent.clone();
                let stop = stop.clone();
                async move { a.wakeups.run(stop, |key| a.queue.add(key)).await }
            }),
        ];
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
        let mut workers: Vec<_> = (0..WORKERS)
            .map(|_| tokio::spawn(agent.clone().work(stop.clone())))
            .collect();
        stop.cancelled().await;
        // Stopping is a state of the workers: nothing new reaches them (no watch, no relist,
        // no wake-ups), the syncs in flight finish, and then every pod is terminated.
        for t in tasks {
            t.abort();
        }
        let drain = futures::future::join_all(workers.iter_mut());
        if tokio::time::timeout(DRAIN_LIMIT, drain).await.is_err() {
            tracing::warn!("agent: pod syncs still running at shutdown, cancelled");
            for w in &workers {
                w.abort();
            }
        }
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
        status_stop.cancel();
        let _ = tokio::time::timeout(Duration::from_secs(5), status_writer).await;
        drop(containerd);
        crate::cgroups::remove(&cgroup_parent);
        cni::remove_bridge(&agent.opts.bridge);
        Ok(())
    }

    fn node_api(&self) -> Api<Node> {
        Api::all(self.client.clone())
    }

    fn node_status(&self, network_ready: bool) -> NodeStatus {
        let (cpus, mem_kib) = machine_size();
        let capacity: BTreeMap<String, Quantity> = [
            ("cpu".to_string(), Quantity(cpus.to_string())),
            ("memory".to_string(), Quantity(format!("{mem_kib}Ki"))),
            ("pods".to_string(), Quantity("110".into())),
        ]
        .into();
        let mut capacity = capacity;
        if let Some(bytes) = filesystem_size(&self.opts.dir).filter(|b| *b > 0) {
            capacity.insert(
                "ephemeral-storage".into(),
                Quantity(format!("{}Ki", bytes / 1024)),
            );
        }
        let ready = if network_ready {
            condition("Ready", "True", "KubeletReady", "kubelet is posting ready status")
        } else {
            condition(
                "Ready",
                "False",
                "KubeletNotReady",
                "container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady message:Network plugin returns error: cni plugin not initialized",
            )
        };
        NodeStatus {
            capacity: Some(capacity.clone()),
            allocatable: Some(capacity),
            addresses: Some(vec![
                NodeAddress {
                    type_: "InternalIP".into(),
                    address: self.opts.node_ip.clone(),
                },
                NodeAddress {
                    type_: "Hostname".into(),
                    address: self.opts.node_name.clone(),
                },
            ]),
            conditions: Some(vec![
                condition(
                    "MemoryPressure",
                    "False",
                    "KubeletHasSufficientMemory",
                    "kubelet has sufficient memory available",
                ),
                condition(
                    "DiskPressure",
                    "False",
                    "KubeletHasNoDiskPressure",
                    "kubelet has no disk pressure",
                ),
                condition(
                    "PIDPressure",
                    "False",
                    "KubeletHasSufficientPID",
                    "kubelet has sufficient PID available",
                ),
                ready,
            ]),
            daemon_endpoints: Some(NodeDaemonEndpoints {
                kubelet_endpoint: Some(DaemonEndpoint {
                    port: self.kubelet_port as i32,
                }),
            }),
            node_info: Some(NodeSystemInfo {
                architecture: "amd64".into(),
                boot_id: std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
                    .unwrap_or_default()
                    .trim()
                    .into(),
                container_runtime_version: self.runtime_version.clone(),
                kernel_version: std::fs::read_to_string("/proc/sys/kernel/osrelease")
                    .unwrap_or_default()
                    .trim()
                    .into(),
                kube_proxy_version: String::new(),
                kubelet_version: "v1.33.0".into(),
                machine_id: std::fs::read_to_string("/etc/machine-id")
                    .unwrap_or_default()
                    .trim()
                    .into(),
                operating_system: "linux".into(),
                os_image: os_image(),
                system_uuid: String::new(),
                swap: None,
            }),
            ..Default::default()
        }
    }

    /// Create the Node, or take over the existing one.
    async fn register(&self) -> Result<(), Error> {
        let name = &self.opts.node_name;
        let node = Node {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                labels: Some(
                    [
                        ("kubernetes.io/hostname".to_string(), name.clone()),
                        ("kubernetes.io/os".to_string(), "linux".to_string()),
                        ("kubernetes.io/arch".to_string(), "amd64".to_string()),
                        ("beta.kubernetes.io/os".to_string(), "linux".to_string()),
                        ("beta.kubernetes.io/arch".to_string(), "amd64".to_string()),
                    ]
                    .into(),
                ),
                ..Default::default()
            },
            spec: None,
            status: Some(self.node_status(false)),
        };
        match self.node_api().create(&PostParams::default(), &node).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
            Err(e) => Err(Error::Other(format!("registering node {name}: {e}"))),
        }
    }

    async fn update_node_status(&self, network_ready: bool) -> Result<(), Error> {
        let patch = json!({"status": self.node_status(network_ready)});
        self.node_api()
            .patch_status(
                &self.opts.node_name,
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
            .map_err(|e| Error::Other(format!("node status: {e}")))?;
        Ok(())
    }

    async fn wait_pod_cidr(&self, stop: &CancellationToken) -> Option<String> {
        for _ in 0..300 {
            if let Ok(n) = self.node_api().get(&self.opts.node_name).await {
                if let Some(c) = n.spec.and_then(|s| s.pod_cidr) {
                    return Some(c);
                }
            }
            tokio::select! {
                _ = stop.cancelled() => return None,
                _ = tokio::time::sleep(Duration::from_millis(200)) => {}
            }
        }
        None
    }

    /// Renew `kube-node-lease/<node>` every 10 s (40 s duration), owned by the Node.
    async fn lease_loop(self: Arc<Self>, stop: CancellationToken) {
        let api: Api<Lease> = Api::namespaced(self.client.clone(), "kube-node-lease");
        let name = self.opts.node_name.clone();
        let mut status_tick = 0u32;
        loop {
            let spec = LeaseSpec {
                holder_identity: Some(name.clone()),
                lease_duration_seconds: Some(40),
                renew_time: Some(MicroTime(jiff::Timestamp::now())),
                ..Default::default()
            };
            let result = match api.get_opt(&name).await {
                Ok(Some(mut lease)) => {
                    lease.spec = Some(spec);
                    api.replace(&name, &PostParams::default(), &lease)
                        .await
                        .map(|_| ())
                }
                Ok(None) => {
                    let owner = self.node_api().get(&name).await.ok().map(|n| OwnerReference {
                        api_version: "v1".into(),
                        kind: "Node".into(),
                        name: name.clone(),
                        uid: n.uid().unwrap_or_default(),
                        ..Default::default()
                    });
                    let lease = Lease {
                        metadata: ObjectMeta {
                            name: Some(name.clone()),
                            namespace: Some("kube-node-lease".into()),
                            owner_references: owner.map(|o| vec![o]),
                            ..Default::default()
                        },
                        spec: Some(spec),
                    };
                    api.create(&PostParams::default(), &lease).await.map(|_| ())
                }
                Err(e) => Err(e),
            };
            if let Err(e) = result {
                tracing::debug!(error = %e, "agent: lease renewal failed");
            }
            // Status heartbeat every minute (upstream: on change and at least every 5 minutes).
            status_tick += 1;
            if status_tick.is_multiple_of(6) {
                let _ = self.update_node_status(true).await;
            }
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(Duration::from_secs(10)) => {}
            }
        }
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

    /// The PLEG: relist the runtime every `RELIST` and wake the workers of the pods whose
    /// sandboxes or containers changed (a container that exited, one that appeared).
    async fn relist_loop(self: Arc<Self>, stop: CancellationToken) {
        let mut last: Option<pleg::Snapshot> = None;
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(RELIST) => {}
            }
            let mut rt = self.cri.runtime.clone();
            let sandboxes = rt
                .list_pod_sandbox(cri::ListPodSandboxRequest { filter: None })
                .await;
            let containers = rt
                .list_containers(cri::ListContainersRequest { filter: None })
                .await;
            let (Ok(sandboxes), Ok(containers)) = (sandboxes, containers) else {
                tracing::debug!("agent: relist failed");
                continue;
            };
            let now = pleg::snapshot(&sandboxes.into_inner().items, &containers.into_inner().containers);
            if let Some(before) = &last {
                for (uid, _) in pleg::changed(before, &now) {
                    self.queue.add(uid);
                }
            }
            last = Some(now);
        }
    }

    pub(crate) async fn sandboxes_of(&self, uid: &str) -> Result<Vec<cri::PodSandbox>, Error> {
        let mut rt = self.cri.runtime.clone();
        let filter = cri::PodSandboxFilter {
            label_selector: [(spec::POD_UID.to_string(), uid.to_string())].into(),
            ..Default::default()
        };
        Ok(rt
            .list_pod_sandbox(cri::ListPodSandboxRequest { filter: Some(filter) })
            .await?
            .into_inner()
            .items)
    }

    /// `kubelet_running_pods` and `kubelet_running_containers` from what the runtime runs now.
    pub(crate) async fn refresh_running_gauges(&self) {
        let mut rt = self.cri.runtime.clone();
        if let Ok(r) = rt
            .list_pod_sandbox(cri::ListPodSandboxRequest { filter: None })
            .await
        {
            let ready = r
                .into_inner()
                .items
                .iter()
                .filter(|s| s.state == cri::PodSandboxState::SandboxReady as i32)
                .count();
            self.metrics.running_pods.set(ready as i64);
        }
        if let Ok(r) = rt
            .list_containers(cri::ListContainersRequest { filter: None })
            .await
        {
            let items = r.into_inner().containers;
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
        let mut rt = self.cri.runtime.clone();
        let filter = cri::ContainerFilter {
            pod_sandbox_id: sandbox.to_string(),
            ..Default::default()
        };
        Ok(rt
            .list_containers(cri::ListContainersRequest { filter: Some(filter) })
            .await?
            .into_inner()
            .containers)
    }

    /// One pod worker: syncs the keys the queue hands it until `stop`. A sync in flight when
    /// `stop` comes finishes; none starts after it.
    async fn work(self: Arc<Self>, stop: CancellationToken) {
        loop {
            let key = tokio::select! {
                _ = stop.cancelled() => return,
                key = self.queue.get() => key,
            };
            let Some(key) = key else { return };
            match self.sync(&key).await {
                Ok(()) => self.queue.forget(&key),
                Err(e) => {
                    tracing::info!(%key, error = %e, "agent: pod sync failed; retrying");
                    self.queue.add_rate_limited(&key);
                }
            }
            self.queue.done(&key);
        }
    }

    /// The agent is stopping: every worker turns to terminating and terminates its pod as a
    /// deletion would, all at once; then whatever else the runtime runs is stopped and what is
    /// left of any pod's volumes is unmounted.
    async fn terminate_all(&self) {
        let uids = {
            let mut workers = self.workers.lock().unwrap();
            let uids = workers.uids();
            for uid in &uids {
                workers.terminate(uid);
            }
            uids
        };
        tracing::info!(pods = uids.len(), "agent: stopping the pods");
        let work = async {
            let each = uids.iter().map(|uid| async move {
                if let Err(e) = self.sync(uid).await {
                    tracing::warn!(pod = %uid, error = %e, "agent: could not stop pod at shutdown");
                }
            });
            futures::future::join_all(each).await;
            // Sandboxes of no pod this agent knows (orphans).
            let mut rt = self.cri.runtime.clone();
            let Ok(list) = rt
                .list_pod_sandbox(cri::ListPodSandboxRequest { filter: None })
                .await
            else {
                tracing::warn!("agent: cannot list the pod sandboxes to stop at shutdown");
                return;
            };
            let mut uids: Vec<String> = list
                .into_inner()
                .items
                .iter()
                .map(|sb| sb.labels.get(spec::POD_UID).cloned().unwrap_or_default())
                .collect();
            uids.sort();
            uids.dedup();
            let orphans = uids.iter().map(|uid| async move {
                if let Err(e) = self.kill_pod(uid, None).await {
                    tracing::warn!(pod = %uid, error = %e, "agent: could not stop pod at shutdown");
                }
            });
            futures::future::join_all(orphans).await;
        };
        if tokio::time::timeout(TERMINATE_LIMIT, work).await.is_err() {
            tracing::warn!("agent: pods still stopping at shutdown; removing their volumes anyway");
        }
        // With their containers gone, the pods' volumes go too (tmpfs unmounted); a restarted
        // agent makes them again.
        for uid in self.volumes.pods_on_disk() {
            if let Err(e) = self.forget_pod(&uid) {
                tracing::warn!(pod = %uid, error = %e, "agent: could not remove pod volumes at shutdown");
            }
        }
    }

    /// A key no worker has: the SWEEP stops what the runtime runs for pods no worker knows
    /// and removes their volumes; a pod uid (the PLEG saw something of a pod already
    /// forgotten) has whatever still runs of it stopped.
    async fn sweep(&self, key: &str) -> Result<(), Error> {
        if key != SWEEP {
            if !self.sandboxes_of(key).await?.is_empty() {
                self.kill_pod(key, None).await?;
            }
            return Ok(());
        }
        let live = self.workers.lock().unwrap().uids();
        let mut rt = self.cri.runtime.clone();
        let all = rt
            .list_pod_sandbox(cri::ListPodSandboxRequest { filter: None })
            .await?
            .into_inner()
            .items;
        for sb in all {
            let uid = sb.labels.get(spec::POD_UID).cloned().unwrap_or_default();
            if !live.contains(&uid) {
                self.kill_pod(&uid, None).await?;
            }
        }
        self.probes.retain_pods(&live);
        for uid in self.volumes.pods_on_disk() {
            if !live.contains(&uid) && self.sandboxes_of(&uid).await?.is_empty() {
                self.forget_pod(&uid)?;
            }
        }
        Ok(())
    }

    /// Terminate pod `uid` (upstream `SyncTerminatingPod` then `SyncTerminatedPod`): its
    /// containers stop (preStop hooks, within the grace period), its sandboxes go (CNI DEL),
    /// then its volumes are unmounted and its cgroup removed, and the agent forgets it.
    async fn terminate_pod(&self, uid: &str, pod: Option<&Pod>) -> Result<(), Error> {
        self.kill_pod(uid, pod).await?;
        self.forget_pod(uid)
    }

    /// Stop and remove everything the runtime runs for pod `uid`. With the pod at hand, its
    /// containers stop as upstream's `killPod`: all at once, each after its preStop hook,
    /// within the pod's grace period; without it (an orphan, or the agent shutting down), with
    /// 10 s each.
    async fn kill_pod(&self, uid: &str, pod: Option<&Pod>) -> Result<(), Error> {
        let mut rt = self.cri.runtime.clone();
        self.probes.forget_pod(uid);
        for sb in self.sandboxes_of(uid).await? {
            let containers = self.containers_of(&sb.id).await?;
            let stops = containers
                .iter()
                .filter(|c| c.state == cri::ContainerState::ContainerRunning as i32)
                .map(|c| {
                    let name = c.metadata.as_ref().map(|m| m.name.clone()).unwrap_or_default();
                    async move { self.kill_container(pod, &name, &c.id, None, None).await }
                });
            futures::future::join_all(stops).await;
            for c in containers {
                self.applied.lock().unwrap().remove(&c.id);
                let _ = rt
                    .remove_container(cri::RemoveContainerRequest { container_id: c.id })
                    .await;
            }
            rt.stop_pod_sandbox(cri::StopPodSandboxRequest {
                pod_sandbox_id: sb.id.clone(),
            })
            .await?;
            rt.remove_pod_sandbox(cri::RemovePodSandboxRequest {
                pod_sandbox_id: sb.id,
            })
            .await?;
        }
        Ok(())
    }

    /// Stop container `id` (container `name` of `pod`) as upstream `killContainer`: the
    /// `Killing` event (with `message`, or "Stopping container <name>"), its preStop hook, then
    /// the stop signal with what the hook left of the grace period (`grace`, or the pod's).
    async fn kill_container(
        &self,
        pod: Option<&Pod>,
        name: &str,
        id: &str,
        grace: Option<i64>,
        message: Option<&str>,
    ) {
        let spec_c = pod.and_then(|p| p.spec.as_ref()).and_then(|s| {
            s.containers
                .iter()
                .chain(s.init_containers.iter().flatten())
                .find(|c| c.name == name)
        });
        let secs = grace.or_else(|| pod.map(pod_grace)).unwrap_or(10).max(0);
        let grace = Duration::from_secs(secs as u64);
        let began = Instant::now();
        if let (Some(pod), Some(c)) = (pod, spec_c) {
            let message = message
                .map(String::from)
                .unwrap_or_else(|| format!("Stopping container {name}"));
            self.event(pod, "Normal", "Killing", &message).await;
            if let Some(hook) = c.lifecycle.as_ref().and_then(|l| l.pre_stop.as_ref()) {
                let target = prober::Target {
                    container_id: id.to_string(),
                    pod_ip: pod
                        .status
                        .as_ref()
                        .and_then(|s| s.pod_ip.clone())
                        .unwrap_or_default(),
                    ports: c.ports.clone().unwrap_or_default(),
                };
                if let Err(m) = lifecycle::run(&self.cri, hook, pod, c, &target, grace).await {
                    self.event(pod, "Warning", "FailedPreStopHook", &m).await;
                }
            }
        }
        let left = grace.saturating_sub(began.elapsed()).max(MIN_GRACE);
        let mut rt = self.cri.runtime.clone();
        if let Err(e) = rt
            .stop_container(cri::StopContainerRequest {
                container_id: id.to_string(),
                timeout: left.as_secs() as i64,
            })
            .await
        {
            tracing::warn!(container = %name, error = %e, "agent: could not stop container");
        }
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
        self.wakeups.after(key, RESYNC);
        let known = Pod {
            status: Some(status),
            ..(*pod).clone()
        };
        if let Some(left) = deadline_left(&known, jiff::Timestamp::now()) {
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

    /// Run pod `uid`'s worker once, as its state says: syncing (upstream `SyncPod`, much
    /// simplified), terminating (`SyncTerminatingPod` and `SyncTerminatedPod`), terminated.
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
            WorkerState::Terminated => return Ok(()),
            WorkerState::Terminating => {
                self.terminate_pod(&uid, Some(&pod)).await?;
                if pod.metadata.deletion_timestamp.is_some() && !worker.gone {
                    // The kubelet's final word: the pod is gone from the node, remove it now.
                    let api: Api<Pod> =
                        Api::namespaced(self.client.clone(), &pod.namespace().unwrap_or_default());
                    let dp = DeleteParams {
                        grace_period_seconds: Some(0),
                        preconditions: Some(kube::api::Preconditions {
                            uid: Some(uid.clone()),
                            resource_version: None,
                        }),
                        ..Default::default()
                    };
                    match api.delete(&pod.name_any(), &dp).await {
                        Ok(_) | Err(kube::Error::Api(_)) => {}
                        Err(e) => return Err(Error::Other(e.to_string())),
                    }
                }
                self.workers.lock().unwrap().terminated(&uid);
                return Ok(());
            }
            WorkerState::Syncing => {}
        }
        let phase = pod
            .status
            .as_ref()
            .and_then(|s| s.phase.clone())
            .unwrap_or_default();
        if phase == "Succeeded" || phase == "Failed" {
            // A finished pod keeps its containers (and their logs) until it is deleted, but not
            // its sandbox: the pause container stops and CNI gives the address back (upstream
            // kills the sandboxes of terminal pods).
            let mut rt = self.cri.runtime.clone();
            for sb in self.sandboxes_of(&uid).await? {
                if sb.state == cri::PodSandboxState::SandboxReady as i32 {
                    self.probes.forget_pod(&uid);
                    rt.stop_pod_sandbox(cri::StopPodSandboxRequest {
                        pod_sandbox_id: sb.id,
                    })
                    .await?;
                }
            }
            return Ok(());
        }
        // activeDeadlineSeconds (upstream's activeDeadlineHandler, a PodSyncHandler).
        if past_deadline(&pod, jiff::Timestamp::now()) {
            return self.deadline_exceeded(&pod).await;
        }
        // Kubelet admission, once, before anything of the pod starts.
        if !worker.admitted {
            if let Err(r) = self.admit(&pod, &uid).await? {
                return self.reject(&pod, &r).await;
            }
        }
        let node = self.node_ctx.lock().unwrap().clone();
        let mut rt = self.cri.runtime.clone();
        // The pod's directory (upstream `makePodDataDirs`).
        for sub in ["volumes", "plugins", "containers"] {
            std::fs::create_dir_all(self.volumes.pod_dir(&uid).join(sub))?;
        }
        // The volumes (upstream `WaitForAttachAndMount`), made or refreshed on every sync.
        let (volumes, errors) = self.volumes.setup(&pod, &node).await;
        for e in &errors {
            self.event(&pod, "Warning", "FailedMount", &e.event_message())
                .await;
        }
        if errors.iter().any(|e| e.blocking) {
            return self.report_not_started(&pod).await;
        }
        // The sandbox.
        let sandboxes = self.sandboxes_of(&uid).await?;
        let ready = sandboxes
            .iter()
            .find(|s| s.state == cri::PodSandboxState::SandboxReady as i32)
            .cloned();
        let sandbox_config = spec::sandbox_config(&pod, sandboxes.len() as u32, &node);
        let sandbox_id = match ready {
            Some(s) => s.id,
            None => {
                std::fs::create_dir_all(&sandbox_config.log_directory)?;
                self.ensure_pod_cgroup(&pod, &uid)?;
                rt.run_pod_sandbox(cri::RunPodSandboxRequest {
                    config: Some(sandbox_config.clone()),
                    runtime_handler: String::new(),
                })
                .await?
                .into_inner()
                .pod_sandbox_id
            }
        };
        let sb_status = rt
            .pod_sandbox_status(cri::PodSandboxStatusRequest {
                pod_sandbox_id: sandbox_id.clone(),
                verbose: false,
            })
            .await?
            .into_inner()
            .status;
        let pod_ip = sb_status
            .and_then(|s| s.network)
            .map(|n| n.ip)
            .unwrap_or_default();
        let existing = self.containers_of(&sandbox_id).await?;
        let spec = pod.spec.clone().unwrap_or_default();
        let place = PodPlace {
            sandbox_id: &sandbox_id,
            sandbox_config: &sandbox_config,
            node: &node,
            volumes: &volumes,
            pod_ip: &pod_ip,
        };
        // Init containers, one at a time, in order: each must exit 0 before the next starts,
        // and the app containers wait for all of them.
        let mut init_statuses = Vec::new();
        let mut initialized = true;
        for c in spec.init_containers.iter().flatten() {
            let latest = existing
                .iter()
                .filter(|x| x.metadata.as_ref().is_some_and(|m| m.name == c.name))
                .max_by_key(|x| x.metadata.as_ref().map(|m| m.attempt).unwrap_or(0));
            let attempt = latest
                .and_then(|x| x.metadata.as_ref())
                .map(|m| m.attempt)
                .unwrap_or(0);
            let exited = latest.is_some_and(|x| x.state == cri::ContainerState::ContainerExited as i32);
            let code = match latest {
                Some(x) if exited => self.exit_code(&x.id).await,
                _ => 0,
            };
            let mut waiting = None;
            if latest.is_none() || (exited && code != 0 && spec.restart_policy.as_deref() != Some("Never")) {
                let next = if latest.is_some() { attempt + 1 } else { 0 };
                if let Err(w) = self.start_container(&pod, c, next, &place).await {
                    waiting = Some(w);
                }
            }
            let mut st = self.container_status(c, &sandbox_id, waiting, &uid).await?;
            st.ready = exited && code == 0;
            let done = exited && code == 0 && latest.is_some();
            init_statuses.push(st);
            if !done {
                initialized = false;
                break;
            }
        }
        if !initialized {
            let statuses = spec
                .containers
                .iter()
                .map(|c| ContainerStatus {
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
                })
                .collect();
            return self
                .report(
                    &pod,
                    Observed {
                        pod_ip,
                        statuses,
                        init_statuses,
                        initialized: false,
                        failed: None,
                        resize_pending: None,
                    },
                )
                .await;
        }
        // The app containers.
        let mut statuses = Vec::new();
        let mut resize_pending = None;
        for c in &spec.containers {
            let mine: Vec<&cri::Container> = existing
                .iter()
                .filter(|x| x.metadata.as_ref().is_some_and(|m| m.name == c.name))
                .collect();
            let latest = mine
                .iter()
                .max_by_key(|x| x.metadata.as_ref().map(|m| m.attempt).unwrap_or(0))
                .copied();
            let restarts = latest
                .and_then(|x| x.metadata.as_ref())
                .map(|m| m.attempt)
                .unwrap_or(0);
            let mut running = latest.is_some_and(|x| x.state == cri::ContainerState::ContainerRunning as i32);
            // A failed liveness or startup probe: the container is killed, then restarted as
            // if it had exited (upstream `computePodActions`).
            if let Some(l) = latest.filter(|_| running) {
                if let Some((kind, _)) = self.probes.failed(&uid, &c.name, &l.id) {
                    let probe = if kind == prober::Kind::Liveness {
                        "liveness"
                    } else {
                        "startup"
                    };
                    let message = format!("Container {} failed {probe} probe, will be restarted", c.name);
                    let grace = ProbeManager::grace(c, kind);
                    self.kill_container(Some(&pod), &c.name, &l.id, grace, Some(&message))
                        .await;
                    running = false;
                }
            }
            let exited = latest.is_some() && !running;
            let restart = spec.restart_policy.as_deref().unwrap_or("Always");
            let ended = match latest {
                Some(x) if exited => self.runtime_status(&x.id).await,
                _ => None,
            };
            let exit_code = ended.as_ref().map(|e| e.exit_code).unwrap_or(0);
            let wants_restart = exited && (restart == "Always" || (restart == "OnFailure" && exit_code != 0));
            let mut waiting: Option<(String, String)> = None;
            // Restarts back off as upstream: 10 s doubling to 5 min, counted from the exit
            // (CrashLoopBackOff meanwhile).
            let backoff_key = format!("{uid}/{}", c.name);
            let mut start_new = latest.is_none();
            if wants_restart {
                let (started, finished) = ended
                    .as_ref()
                    .map(|e| (system_time(e.started_at), system_time(e.finished_at)))
                    .unwrap_or((std::time::SystemTime::now(), std::time::SystemTime::now()));
                let delay = backoff::restart_delay(
                    &mut self.backoff.lock().unwrap(),
                    &backoff_key,
                    started,
                    finished,
                    std::time::SystemTime::now(),
                );
                match delay {
                    Some(delay) => {
                        self.wake_at(&pod, finished + delay);
                        waiting = Some((
                            "CrashLoopBackOff".into(),
                            format!(
                                "back-off {}s restarting failed container={} pod={}",
                                delay.as_secs(),
                                c.name,
                                lifecycle::pod_ref(&pod)
                            ),
                        ));
                        let message = format!(
                            "Back-off restarting failed container {} in pod {}",
                            c.name,
                            lifecycle::pod_ref(&pod)
                        );
                        self.event(&pod, "Warning", "BackOff", &message).await;
                    }
                    None => start_new = true,
                }
            }
            if start_new {
                let attempt = if latest.is_some() { restarts + 1 } else { 0 };
                match self.start_container(&pod, c, attempt, &place).await {
                    Ok(()) => {}
                    Err((reason, msg)) => waiting = Some((reason, msg)),
                }
            }
            let mut status = self.container_status(c, &sandbox_id, waiting, &uid).await?;
            // In-place resize: a running container whose resources changed is updated.
            if let Some(id) = status
                .state
                .as_ref()
                .and_then(|s| s.running.as_ref())
                .and(status.container_id.as_deref())
            {
                let id = id.trim_start_matches("containerd://").to_string();
                match self.resize_container(&pod, c, &id, &node).await {
                    Ok(()) => {}
                    Err(pending) => resize_pending = Some(pending),
                }
                if self.applied.lock().unwrap().get(&id)
                    == Some(&qos::container_resources(&pod, c, node.allocatable_memory as i64))
                {
                    status.resources = c.resources.clone();
                    status.allocated_resources = c.resources.as_ref().and_then(|r| r.requests.clone());
                }
            }
            // The probe workers follow the container that runs now.
            let now_running = status
                .state
                .as_ref()
                .and_then(|s| s.running.as_ref())
                .and_then(|r| r.started_at.as_ref())
                .zip(status.container_id.as_deref());
            match now_running {
                Some((at, id)) => {
                    let id = id.trim_start_matches("containerd://");
                    let at = std::time::SystemTime::from(at.0);
                    self.probes.update(&pod, c, Some((id, at)), &pod_ip);
                }
                None => self.probes.update(&pod, c, None, &pod_ip),
            }
            // The previous run's end, as lastState; older runs are removed from the runtime.
            let previous = if exited {
                latest
            } else {
                mine.iter()
                    .find(|x| restarts > 0 && x.metadata.as_ref().map(|m| m.attempt) == Some(restarts - 1))
                    .copied()
            };
            if let Some(prev) = previous {
                if let Ok(Some(term)) = self.terminated_state(&prev.id, c).await {
                    status.last_state = Some(ContainerState {
                        terminated: Some(term),
                        ..Default::default()
                    });
                }
                status.restart_count = restarts as i32 + i32::from(start_new);
            }
            for old in mine.iter().filter(|x| {
                previous.is_none_or(|p| p.id != x.id) && Some(x.id.as_str()) != latest.map(|l| l.id.as_str())
            }) {
                if old.state == cri::ContainerState::ContainerExited as i32 {
                    self.applied.lock().unwrap().remove(&old.id);
                    let _ = rt
                        .remove_container(cri::RemoveContainerRequest {
                            container_id: old.id.clone(),
                        })
                        .await;
                }
            }
            statuses.push(status);
        }
        self.report(
            &pod,
            Observed {
                pod_ip,
                statuses,
                init_statuses,
                initialized: true,
                failed: None,
                resize_pending,
            },
        )
        .await
    }

    async fn exit_code(&self, id: &str) -> i32 {
        self.runtime_status(id).await.map(|s| s.exit_code).unwrap_or(0)
    }

    /// What the runtime says of container `id`.
    async fn runtime_status(&self, id: &str) -> Option<cri::ContainerStatus> {
        let mut rt = self.cri.runtime.clone();
        rt.container_status(cri::ContainerStatusRequest {
            container_id: id.into(),
            verbose: false,
        })
        .await
        .ok()
        .and_then(|r| r.into_inner().status)
    }

    async fn terminated_state(
        &self,
        id: &str,
        c: &k8s_openapi::api::core::v1::Container,
    ) -> Result<Option<ContainerStateTerminated>, Error> {
        let mut rt = self.cri.runtime.clone();
        let cs = rt
            .container_status(cri::ContainerStatusRequest {
                container_id: id.into(),
                verbose: false,
            })
            .await?
            .into_inner()
            .status
            .unwrap_or_default();
        if cs.state != cri::ContainerState::ContainerExited as i32 {
            return Ok(None);
        }
        let ts =
            |n: i64| Time(jiff::Timestamp::from_nanosecond(n as i128).unwrap_or(jiff::Timestamp::UNIX_EPOCH));
        Ok(Some(ContainerStateTerminated {
            exit_code: cs.exit_code,
            reason: Some(terminated_reason(&cs)),
            message: self.termination_message(&cs, c),
            started_at: Some(ts(cs.started_at)),
            finished_at: Some(ts(cs.finished_at)),
            container_id: Some(format!("containerd://{}", cs.id)),
            ..Default::default()
        }))
    }

    /// Where container `name`'s run `attempt` of pod `uid` writes its termination message
    /// (`<agent>/pods/<uid>/containers/<name>/<attempt>`, mounted at terminationMessagePath).
    fn termination_file(&self, uid: &str, name: &str, attempt: u32) -> PathBuf {
        self.volumes
            .pod_dir(uid)
            .join("containers")
            .join(name)
            .join(attempt.to_string())
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

    async fn start_container(
        &self,
        pod: &Pod,
        c: &k8s_openapi::api::core::v1::Container,
        attempt: u32,
        place: &PodPlace<'_>,
    ) -> Result<(), (String, String)> {
        let PodPlace {
            sandbox_id,
            sandbox_config,
            node,
            volumes,
            pod_ip,
        } = *place;
        let image_info = self.ensure_image(pod, c, sandbox_config).await?;
        let mut rt = self.cri.runtime.clone();
        let mut inputs = self.container_inputs(pod, c, volumes).await;
        inputs.image_user = crate::security::ImageUser::of(image_info.as_ref());
        let (config, warnings) = match spec::container_config(pod, c, attempt, node, &inputs) {
            Ok(v) => v,
            Err(m) => {
                // Upstream's FailedToCreateContainer event.
                self.event(pod, "Warning", "Failed", &format!("Error: {m}")).await;
                return Err(("CreateContainerConfigError".to_string(), m));
            }
        };
        for w in warnings {
            self.event(pod, "Warning", "InvalidEnvironmentVariableNames", &w)
                .await;
        }
        // The termination-message file, empty for this run, where the container may write.
        let mut config = config;
        if let Some(path) = c.termination_message_path.as_deref().filter(|p| !p.is_empty()) {
            let uid = pod.uid().unwrap_or_default();
            let file = self.termination_file(&uid, &c.name, attempt);
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
        let applied = config.linux.as_ref().and_then(|l| l.resources.clone());
        let id = rt
            .create_container(cri::CreateContainerRequest {
                pod_sandbox_id: sandbox_id.into(),
                config: Some(config),
                sandbox_config: Some(sandbox_config.clone()),
            })
            .await
            .map_err(|e| ("CreateContainerError".to_string(), e.message().to_string()))?
            .into_inner()
            .container_id;
        if let Some(r) = applied {
            self.applied.lock().unwrap().insert(id.clone(), r);
        }
        rt.start_container(cri::StartContainerRequest {
            container_id: id.clone(),
        })
        .await
        .map_err(|e| ("RunContainerError".to_string(), e.message().to_string()))?;
        // postStart, before the container is reported running; its failure kills the container,
        // which then restarts as its pod's policy says (upstream `startContainer`).
        if let Some(hook) = c.lifecycle.as_ref().and_then(|l| l.post_start.as_ref()) {
            let target = prober::Target {
                container_id: id.clone(),
                pod_ip: pod_ip.to_string(),
                ports: c.ports.clone().unwrap_or_default(),
            };
            if let Err(message) = lifecycle::run(&self.cri, hook, pod, c, &target, POST_START_LIMIT).await {
                self.event(pod, "Warning", "FailedPostStartHook", &message).await;
                self.kill_container(Some(pod), &c.name, &id, None, Some("FailedPostStartHook"))
                    .await;
                return Err(("PostStartHookError".into(), message));
            }
        }
        Ok(())
    }

    /// The volumes and the data of the configMaps and secrets the container's env refers to.
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

    /// The container's image, pulled as its imagePullPolicy says (upstream's image manager
    /// `EnsureImageExists`): Never uses only what is there, IfNotPresent pulls when absent,
    /// Always pulls every time; pulls use the pod's imagePullSecrets, each matching credential
    /// in turn; a failed pull backs off as restarts do (ImagePullBackOff). Returns what the
    /// runtime knows of the image.
    async fn ensure_image(
        &self,
        pod: &Pod,
        c: &k8s_openapi::api::core::v1::Container,
        sandbox_config: &cri::PodSandboxConfig,
    ) -> Result<Option<cri::Image>, (String, String)> {
        let image = c.image.clone().unwrap_or_default();
        let mut images = self.cri.images.clone();
        let spec = || cri::ImageSpec {
            image: image.clone(),
            ..Default::default()
        };
        let status = |mut images: crate::cri::ImageClient| {
            let spec = spec();
            async move {
                images
                    .image_status(cri::ImageStatusRequest {
                        image: Some(spec),
                        verbose: false,
                    })
                    .await
                    .ok()
                    .and_then(|r| r.into_inner().image)
            }
        };
        let present = status(images.clone()).await;
        let policy = c.image_pull_policy.clone().unwrap_or_else(|| {
            let tagged = image.contains('@')
                || image
                    .rsplit('/')
                    .next()
                    .and_then(|l| l.split_once(':'))
                    .is_some_and(|(_, t)| t != "latest");
            if tagged { "IfNotPresent" } else { "Always" }.to_string()
        });
        let pull = match policy.as_str() {
            "Never" => {
                if present.is_none() {
                    let msg = format!("Container image \"{image}\" is not present with pull policy of Never");
                    self.event(pod, "Warning", "ErrImageNeverPull", &msg).await;
                    return Err(("ErrImageNeverPull".into(), msg));
                }
                false
            }
            // An air-gap image is the only copy there is: used as it is (r8s's choice; upstream
            // would pull it and fail where no registry is reachable).
            "Always" => present.is_none() || !self.airgap_images.contains(&crate::images::normalize(&image)),
            _ => present.is_none(),
        };
        if !pull {
            let msg = format!("Container image \"{image}\" already present on machine");
            self.event(pod, "Normal", "Pulled", &msg).await;
            return Ok(present);
        }
        // A failed pull is retried with the same back-off as restarts (ImagePullBackOff).
        let key = format!("{}/pull/{image}", pod.uid().unwrap_or_default());
        let in_backoff = self
            .backoff
            .lock()
            .unwrap()
            .in_backoff_since_update(&key, std::time::SystemTime::now());
        if in_backoff.is_some() {
            let now = std::time::SystemTime::now();
            let left = self.backoff.lock().unwrap().remaining_since_update(&key, now);
            self.wake_at(pod, now + left.unwrap_or_default());
            let msg = format!("Back-off pulling image \"{image}\"");
            self.event(pod, "Normal", "BackOff", &msg).await;
            self.event(pod, "Warning", "Failed", "Error: ImagePullBackOff")
                .await;
            return Err(("ImagePullBackOff".into(), msg));
        }
        // Our own containerd reaches a registry on loopback over plain HTTP.
        if self.opts.runtime_endpoint.is_none() {
            let (host, port, _) = crate::credentials::image_location(&image);
            if crate::containerd::is_loopback_host(&host) {
                let host_port = if port.is_empty() {
                    host
                } else {
                    format!("{host}:{port}")
                };
                let certs_d = self.opts.dir.join("containerd").join("certs.d");
                if let Err(e) = crate::containerd::allow_plain_http(&certs_d, &host_port) {
                    tracing::warn!(error = %e, "agent: could not configure the loopback registry");
                }
            }
        }
        self.event(pod, "Normal", "Pulling", &format!("Pulling image \"{image}\""))
            .await;
        let credentials = self.pull_credentials(pod, &image).await;
        let auths: Vec<Option<cri::AuthConfig>> = if credentials.is_empty() {
            vec![None]
        } else {
            credentials
                .into_iter()
                .map(|cr| {
                    Some(cri::AuthConfig {
                        username: cr.username,
                        password: cr.password,
                        ..Default::default()
                    })
                })
                .collect()
        };
        let began = Instant::now();
        let mut last_error = None;
        for auth in auths {
            let r = images
                .pull_image(cri::PullImageRequest {
                    image: Some(spec()),
                    auth,
                    sandbox_config: Some(sandbox_config.clone()),
                })
                .await;
            match r {
                Ok(_) => {
                    last_error = None;
                    break;
                }
                Err(e) => last_error = Some(e),
            }
        }
        if let Some(e) = last_error {
            self.backoff
                .lock()
                .unwrap()
                .next(&key, std::time::SystemTime::now());
            let err = format!("rpc error: code = {:?} desc = {}", e.code(), e.message());
            self.event(
                pod,
                "Warning",
                "Failed",
                &format!("Failed to pull image \"{image}\": {err}"),
            )
            .await;
            self.event(pod, "Warning", "Failed", "Error: ErrImagePull").await;
            // Back soon to report ImagePullBackOff, then at the back-off's end to pull again.
            self.wake_at(pod, std::time::SystemTime::now() + RELIST);
            return Err(("ErrImagePull".into(), err));
        }
        let took = go_duration(began.elapsed());
        let pulled = status(images).await;
        let size = pulled.as_ref().map(|i| i.size).unwrap_or(0);
        let msg = format!(
            "Successfully pulled image \"{image}\" in {took} ({took} including waiting). Image size: {size} bytes."
        );
        self.event(pod, "Normal", "Pulled", &msg).await;
        Ok(pulled)
    }

    /// The registry credentials of the pod's imagePullSecrets that apply to `image`; a secret
    /// that cannot be read is a warning, and the pull goes on without it (as upstream).
    async fn pull_credentials(&self, pod: &Pod, image: &str) -> Vec<crate::credentials::Credential> {
        let names: Vec<String> = pod
            .spec
            .as_ref()
            .and_then(|s| s.image_pull_secrets.as_ref())
            .into_iter()
            .flatten()
            .map(|r| r.name.clone())
            .filter(|n| !n.is_empty())
            .collect();
        // The node's own credentials come after the pod's (upstream's keyring order).
        let node = self.opts.registries.credentials(image);
        if names.is_empty() {
            return node;
        }
        let api: Api<k8s_openapi::api::core::v1::Secret> =
            Api::namespaced(self.client.clone(), &pod.namespace().unwrap_or_default());
        let mut keyring = crate::credentials::Keyring::default();
        let mut missing = Vec::new();
        for name in names {
            match api.get(&name).await {
                Ok(secret) => {
                    let data = serde_json::to_value(&secret.data).unwrap_or_default();
                    let type_ = secret.type_.unwrap_or_default();
                    if let Err(e) = keyring.add_secret(&type_, &data) {
                        tracing::warn!(secret = %name, error = %e, "agent: unusable image pull secret");
                    }
                }
                Err(_) => missing.push(name),
            }
        }
        if !missing.is_empty() {
            let msg = format!(
                "Unable to retrieve some image pull secrets ({}); attempting to pull the image may not succeed.",
                missing.join(", ")
            );
            self.event(pod, "Warning", "FailedToRetrieveImagePullSecret", &msg)
                .await;
        }
        let mut found = keyring.lookup(image);
        for c in node {
            if !found.contains(&c) {
                found.push(c);
            }
        }
        found
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
        let have = self.applied.lock().unwrap().get(id).cloned();
        let Some(have) = have else {
            self.applied.lock().unwrap().insert(id.to_string(), want);
            return Ok(());
        };
        if have == want {
            return Ok(());
        }
        // Room on the node, with the other admitted pods.
        let uid = pod.uid().unwrap_or_default();
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
        let mut rt = self.cri.runtime.clone();
        match rt
            .update_container_resources(cri::UpdateContainerResourcesRequest {
                container_id: id.to_string(),
                linux: Some(want.clone()),
                ..Default::default()
            })
            .await
        {
            Ok(_) => {
                self.applied.lock().unwrap().insert(id.to_string(), want);
                tracing::info!(pod = %pod.name_any(), container = %c.name, "agent: resized in place");
                Ok(())
            }
            Err(e) => Err(("Deferred".into(), e.message().to_string())),
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

    /// Pod `uid` is gone from this node: its volumes, probes, events and back-offs are
    /// forgotten.
    fn forget_pod(&self, uid: &str) -> Result<(), Error> {
        self.volumes.teardown(uid)?;
        self.cgroups.remove_pod(uid);
        self.status.forget(uid);
        self.probes.forget_pod(uid);
        self.events.lock().unwrap().retain(|k, _| k.0 != uid);
        let prefix = format!("{uid}/");
        self.backoff.lock().unwrap().retain(|k| !k.starts_with(&prefix));
        Ok(())
    }

    /// Record an Event about `pod` (upstream's recorder, with its repeats counted and written
    /// at most every `EVENT_REPEAT`).
    async fn event(&self, pod: &Pod, type_: &str, reason: &str, message: &str) {
        let uid = pod.uid().unwrap_or_default();
        let ns = pod.namespace().unwrap_or_default();
        let key = (uid.clone(), reason.to_string(), message.to_string());
        let api: Api<Event> = Api::namespaced(self.client.clone(), &ns);
        let previous = self.events.lock().unwrap().get(&key).cloned();
        let now_t = now();
        let result = match previous {
            Some(e) if e.at.elapsed() < EVENT_REPEAT => return,
            Some(RecordedEvent { name, count, .. }) => {
                let patch = json!({"count": count + 1, "lastTimestamp": now_t});
                self.events.lock().unwrap().insert(
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
                self.events.lock().unwrap().insert(
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

    /// The pod ran longer than its activeDeadlineSeconds: its containers are stopped (preStop
    /// hooks within the grace period), its sandbox too, and it is Failed with DeadlineExceeded.
    async fn deadline_exceeded(&self, pod: &Arc<Pod>) -> Result<(), Error> {
        let uid = pod.uid().unwrap_or_default();
        self.event(pod, "Normal", "DeadlineExceeded", DEADLINE_MESSAGE)
            .await;
        self.probes.forget_pod(&uid);
        let mut rt = self.cri.runtime.clone();
        let sandboxes = self.sandboxes_of(&uid).await?;
        for sb in &sandboxes {
            let containers = self.containers_of(&sb.id).await?;
            let stops = containers
                .iter()
                .filter(|c| c.state == cri::ContainerState::ContainerRunning as i32)
                .map(|c| {
                    let name = c.metadata.as_ref().map(|m| m.name.clone()).unwrap_or_default();
                    async move { self.kill_container(Some(pod), &name, &c.id, None, None).await }
                });
            futures::future::join_all(stops).await;
        }
        let spec = pod.spec.clone().unwrap_or_default();
        let newest = sandboxes.iter().max_by_key(|s| s.created_at);
        let mut statuses = Vec::new();
        for c in &spec.containers {
            let st = match newest {
                Some(sb) => self.container_status(c, &sb.id, None, &uid).await?,
                None => ContainerStatus {
                    name: c.name.clone(),
                    image: c.image.clone().unwrap_or_default(),
                    ..Default::default()
                },
            };
            statuses.push(ContainerStatus { ready: false, ..st });
        }
        for sb in sandboxes {
            rt.stop_pod_sandbox(cri::StopPodSandboxRequest {
                pod_sandbox_id: sb.id,
            })
            .await?;
        }
        let old = pod.status.clone().unwrap_or_default();
        let initialized = old
            .conditions
            .iter()
            .flatten()
            .any(|c| c.type_ == "Initialized" && c.status == "True");
        let observed = Observed {
            pod_ip: old.pod_ip.clone().unwrap_or_default(),
            statuses,
            init_statuses: old.init_container_statuses.clone().unwrap_or_default(),
            initialized,
            failed: Some(("DeadlineExceeded", DEADLINE_MESSAGE)),
            resize_pending: None,
        };
        self.report(pod, observed).await
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
            pod_ip: String::new(),
            statuses,
            init_statuses: inits,
            initialized,
            failed: None,
            resize_pending: None,
        };
        self.report(pod, observed).await
    }

    async fn container_status(
        &self,
        c: &k8s_openapi::api::core::v1::Container,
        sandbox_id: &str,
        waiting: Option<(String, String)>,
        uid: &str,
    ) -> Result<ContainerStatus, Error> {
        let existing = self.containers_of(sandbox_id).await?;
        let latest = existing
            .iter()
            .filter(|x| x.metadata.as_ref().is_some_and(|m| m.name == c.name))
            .max_by_key(|x| x.metadata.as_ref().map(|m| m.attempt).unwrap_or(0));
        let mut status = ContainerStatus {
            name: c.name.clone(),
            image: c.image.clone().unwrap_or_default(),
            ..Default::default()
        };
        if let Some((reason, message)) = waiting {
            status.state = Some(ContainerState {
                waiting: Some(ContainerStateWaiting {
                    reason: Some(reason),
                    message: Some(message),
                }),
                ..Default::default()
            });
            return Ok(status);
        }
        let Some(latest) = latest else {
            status.state = Some(ContainerState {
                waiting: Some(ContainerStateWaiting {
                    reason: Some("ContainerCreating".into()),
                    message: None,
                }),
                ..Default::default()
            });
            return Ok(status);
        };
        let mut rt = self.cri.runtime.clone();
        let cs = rt
            .container_status(cri::ContainerStatusRequest {
                container_id: latest.id.clone(),
                verbose: false,
            })
            .await?
            .into_inner()
            .status
            .unwrap_or_default();
        let ts = |nanos: i64| {
            Time(jiff::Timestamp::from_nanosecond(nanos as i128).unwrap_or(jiff::Timestamp::UNIX_EPOCH))
        };
        status.container_id = Some(format!("containerd://{}", cs.id));
        status.image_id = cs.image_ref.clone();
        status.restart_count = cs.metadata.as_ref().map(|m| m.attempt as i32).unwrap_or(0);
        let running = cs.state == cri::ContainerState::ContainerRunning as i32;
        // With a probe, only its success counts (before its worker runs there is none).
        let started = running
            && if c.startup_probe.is_some() {
                self.probes
                    .probe_succeeded(uid, &c.name, &cs.id, prober::Kind::Startup)
            } else {
                true
            };
        status.started = Some(started);
        status.ready = started
            && if c.readiness_probe.is_some() {
                self.probes
                    .probe_succeeded(uid, &c.name, &cs.id, prober::Kind::Readiness)
            } else {
                true
            };
        status.state = Some(if running {
            ContainerState {
                running: Some(ContainerStateRunning {
                    started_at: Some(ts(cs.started_at)),
                }),
                ..Default::default()
            }
        } else if cs.state == cri::ContainerState::ContainerExited as i32 {
            ContainerState {
                terminated: Some(ContainerStateTerminated {
                    exit_code: cs.exit_code,
                    reason: Some(terminated_reason(&cs)),
                    message: self.termination_message(&cs, c),
                    started_at: Some(ts(cs.started_at)),
                    finished_at: Some(ts(cs.finished_at)),
                    container_id: Some(format!("containerd://{}", cs.id)),
                    ..Default::default()
                }),
                ..Default::default()
            }
        } else {
            ContainerState {
                waiting: Some(ContainerStateWaiting {
                    reason: Some("ContainerCreating".into()),
                    message: None,
                }),
                ..Default::default()
            }
        });
        Ok(status)
    }

    /// Phase, conditions, IPs and container statuses (upstream `generateAPIPodStatus`).
    async fn report(&self, pod: &Pod, observed: Observed) -> Result<(), Error> {
        let Observed {
            pod_ip,
            statuses,
            init_statuses,
            initialized,
            failed,
            resize_pending,
        } = observed;
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
        let mut conditions = vec![
            cond("PodReadyToStartContainers", "True"),
            cond("Initialized", if initialized { "True" } else { "False" }),
            cond("Ready", ready),
            cond("ContainersReady", ready),
        ];
        if let Some(s) = old_cond("PodScheduled") {
            conditions.push(s);
        }
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
            "hostIPs": [{"ip": self.opts.node_ip}],
            "podIP": if pod_ip.is_empty() { None } else { Some(pod_ip.clone()) },
            "podIPs": if pod_ip.is_empty() { None } else { Some(vec![PodIP { ip: pod_ip }]) },
            "startTime": old.start_time.clone().unwrap_or_else(now),
            "conditions": conditions,
            "containerStatuses": statuses,
            "initContainerStatuses": if init_statuses.is_empty() { None } else { Some(init_statuses) },
            "reason": failed.map(|f| f.0),
            "message": failed.map(|f| f.1),
        }});
        // Only write when something other than timestamps changed.
        let changed = old.phase.as_deref() != Some(phase)
            || resize_pending.is_some() != old_cond("PodResizePending").is_some()
            || old.reason.as_deref() != failed.map(|f| f.0)
            || old.container_statuses.as_ref().map(|v| v.len()) != Some(statuses_len(&status))
            || serde_json::to_value(&old.container_statuses).ok()
                != Some(status["status"]["containerStatuses"].clone())
            || old.pod_ip.as_deref() != status["status"]["podIP"].as_str()
            || serde_json::to_value(&old.init_container_statuses).ok()
                != Some(status["status"]["initContainerStatuses"].clone())
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

/// A duration as upstream's image manager prints one: truncated to the millisecond, in Go's
/// form (`523ms`, `1.5s`, `2m3.004s`, `1h0m0s`).
fn go_duration(d: Duration) -> String {
    r8s_api::duration::format(Duration::from_millis(d.as_millis() as u64))
}

/// How long `pod` may still be active at `now` before its activeDeadlineSeconds (counted from
/// its startTime, as upstream's activeDeadlineHandler): zero once it is past, None without a
/// deadline or before it started.
fn deadline_left(pod: &Pod, now: jiff::Timestamp) -> Option<Duration> {
    let deadline = pod.spec.as_ref().and_then(|s| s.active_deadline_seconds)?;
    let start = pod.status.as_ref().and_then(|s| s.start_time.as_ref())?;
    let active = now.duration_since(start.0);
    let left = jiff::SignedDuration::from_secs(deadline) - active;
    Some(Duration::try_from(left).unwrap_or_default())
}

/// Whether `pod` has been active longer than its activeDeadlineSeconds at `now`.
fn past_deadline(pod: &Pod, now: jiff::Timestamp) -> bool {
    deadline_left(pod, now).is_some_and(|d| d.is_zero())
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

/// The grace period a pod's containers get to stop: the deletion's, else the spec's (30 s).
fn pod_grace(pod: &Pod) -> i64 {
    pod.metadata
        .deletion_timestamp
        .as_ref()
        .and(pod.metadata.deletion_grace_period_seconds)
        .or_else(|| pod.spec.as_ref().and_then(|s| s.termination_grace_period_seconds))
        .unwrap_or(30)
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

fn system_time(nanos: i64) -> std::time::SystemTime {
    if nanos <= 0 {
        return std::time::SystemTime::now();
    }
    std::time::SystemTime::UNIX_EPOCH + Duration::from_nanos(nanos as u64)
}

/// What a sync saw of a pod, for its status.
struct Observed {
    pod_ip: String,
    statuses: Vec<ContainerStatus>,
    init_statuses: Vec<ContainerStatus>,
    initialized: bool,
    /// Why the kubelet failed the pod itself (reason, message), as for activeDeadlineSeconds.
    failed: Option<(&'static str, &'static str)>,
    /// A resize the node cannot make now (the PodResizePending condition's reason, message).
    resize_pending: Option<(String, String)>,
}

fn statuses_len(status: &serde_json::Value) -> usize {
    status["status"]["containerStatuses"]
        .as_array()
        .map(|a| a.len())
        .unwrap_or(0)
}

/// The host's resolver (for dnsPolicy Default).
fn host_dns() -> cri::DnsConfig {
    let text = std::fs::read_to_string("/etc/resolv.conf").unwrap_or_default();
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
    fn pull_durations_print_as_upstream() {
        assert_eq!(go_duration(Duration::from_micros(523_400)), "523ms");
        assert_eq!(go_duration(Duration::from_millis(1500)), "1.5s");
        assert_eq!(go_duration(Duration::from_millis(123_004)), "2m3.004s");
        assert_eq!(go_duration(Duration::from_secs(4500)), "1h15m0s");
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
