//! `r8s`: Kubernetes in one binary. This file only parses arguments and composes the crates.

mod cluster_etcd;
mod etcd_members;
mod etcd_snapshot;
mod hollow;
mod join;
mod otlp;
mod server_join;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::{Args, Parser, Subcommand};
use r8s_store::embedded::{EmbeddedOptions, EmbeddedStore};
use r8s_store::etcd::{EtcdOptions, EtcdStore};
use r8s_store::{CompactionPolicy, Store};

#[derive(Parser)]
#[command(
    name = "r8s",
    version,
    about = "Kubernetes, written in Rust, shipped as one binary"
)]
struct Cli {
    /// How many stages of the journey `r8s trace` tells each component keeps in memory (the
    /// oldest go first); 0 records none.
    #[arg(long, global = true, env = "R8S_TRACE_RING_SIZE", default_value_t = r8s_trace::DEFAULT_CAPACITY)]
    trace_ring_size: usize,

    /// Export the journey's stages over OTLP to this OpenTelemetry collector (gRPC, e.g.
    /// http://127.0.0.1:4317), as well as keeping them for `r8s trace`.
    #[arg(long, global = true, env = "R8S_TRACING_ENDPOINT")]
    tracing_endpoint: Option<String>,

    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the control plane of a cluster.
    Server(Box<ServerArgs>),
    /// Run the controllers alone, against any API server.
    ControllerManager(ControllerManagerArgs),
    /// Run the scheduler alone, against any API server.
    Scheduler(SchedulerArgs),
    /// Run a node (kubelet) that joins a server with a join token.
    Agent(Box<AgentCmdArgs>),
    /// Snapshots of a --cluster-init server's etcd member: save, ls, delete, prune, restore.
    EtcdSnapshot(etcd_snapshot::SnapshotArgs),
    /// The journey of an object, told by the running system: `r8s trace deployment/nginx`.
    #[command(disable_help_flag = true)]
    Trace {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// The client: `r8s kubectl get pods` (also this binary invoked as `kubectl`).
    #[command(disable_help_flag = true)]
    Kubectl {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
}

#[derive(Args)]
struct AgentCmdArgs {
    /// The server to join, e.g. https://10.0.0.1:6443.
    #[arg(long, env = "R8S_URL")]
    server: String,

    /// The join token (`K10<ca-hash>::<id>.<secret>`, from the server's
    /// <data-dir>/server/node-token).
    #[arg(long, env = "R8S_TOKEN", conflicts_with = "token_file")]
    token: Option<String>,

    /// A file holding the join token.
    #[arg(long)]
    token_file: Option<PathBuf>,

    /// Where the agent keeps its state (default /var/lib/r8s as root, else ~/.r8s).
    #[arg(long, short = 'd', env = "R8S_DATA_DIR")]
    data_dir: Option<PathBuf>,

    /// The cluster's Service range (the server's --service-cidr): the Service proxy keeps
    /// it from leaving the node.
    #[arg(long, default_value = "10.43.0.0/16", value_parser = r8s_apiserver::ServiceCidrs::parse)]
    service_cidr: r8s_apiserver::ServiceCidrs,

    /// The cluster's pod range (the server's --cluster-cidr): the overlay masquerades what
    /// leaves it, the proxy keeps unassigned addresses in it from leaving the node.
    #[arg(long, default_value = "10.42.0.0/16")]
    cluster_cidr: String,

    /// Do not run the Service proxy on this node.
    #[arg(long)]
    disable_kube_proxy: bool,

    /// Do not serve cluster DNS on this node (pods on it then resolve nothing in the cluster).
    #[arg(long)]
    disable_dns: bool,

    /// Run N hollow nodes instead of this machine's node (kubemark's hollow kubelets, for
    /// scale runs): each joins as a node of its own, named `<--node-name>-<i>` (default
    /// `hollow-<i>`), and runs its pods through the agent over a runtime in memory: Running,
    /// with addresses, and no containers.
    #[arg(long, value_name = "N")]
    hollow: Option<usize>,

    #[command(flatten)]
    agent: AgentArgs,
}

/// Settings of the agent (kubelet).
#[derive(Args, Clone)]
struct AgentArgs {
    /// This node's name (default: the host name).
    #[arg(long)]
    node_name: Option<String>,

    /// This node's address (default: the address of the default route's interface); on a
    /// dual-stack node, one of each family separated by a comma (`10.0.0.5,fd00::5`), the
    /// first the primary.
    #[arg(long)]
    node_ip: Option<String>,

    /// This node's external address (k3s's flag): reported as its ExternalIP, and the address
    /// LoadBalancer Services get on it.
    #[arg(long)]
    node_external_ip: Option<String>,

    /// The cluster DNS service address pods resolve with.
    #[arg(long, default_value = "10.43.0.10")]
    cluster_dns: String,

    /// The cluster's DNS domain.
    #[arg(long, default_value = "cluster.local")]
    cluster_domain: String,

    /// The resolver configuration whose nameservers cluster DNS asks for names outside the
    /// cluster, and that pods with dnsPolicy Default (and host-network pods) get, as the
    /// kubelet's flag.
    #[arg(long, default_value = "/etc/resolv.conf")]
    resolv_conf: PathBuf,

    /// Name of the pod network's bridge.
    #[arg(long, default_value = "r8s0")]
    pod_bridge: String,

    /// Address the kubelet API (logs) listens on (default: the node's address).
    #[arg(long)]
    kubelet_address: Option<String>,

    /// Port of the kubelet API; 0 picks a free one (the Node reports it).
    #[arg(long, default_value_t = 10250)]
    kubelet_port: u16,

    /// On stop, leave the pods running for the next start to adopt (as a kubelet restart
    /// does); by default stopping stops the pods and removes what they used.
    #[arg(long)]
    keep_pods_on_exit: bool,

    /// Use this CRI socket (e.g. unix:///run/containerd/containerd.sock) instead of running
    /// containerd as the agent's child.
    #[arg(long)]
    container_runtime_endpoint: Option<String>,

    /// Where to write the pod network's CNI configuration for that runtime
    /// (default /etc/cni/net.d; with the agent's own containerd, under its data dir).
    #[arg(long)]
    cni_conf_dir: Option<PathBuf>,

    /// Registry mirrors and credentials, in k3s's registries.yaml format (read at start; a
    /// missing file is none).
    #[arg(long, default_value = "/etc/r8s/registries.yaml")]
    private_registry: PathBuf,

    /// How pods reach pods on other nodes (k3s's flag): `vxlan` (an overlay, the default),
    /// `host-gw` (routes via each node's address, for nodes on one link) or `none` (bring
    /// your own network). A node whose address is loopback runs none.
    #[arg(long, default_value = "vxlan")]
    flannel_backend: r8s_net::overlay::Backend,

    /// The cgroup pods go under: from the hierarchies' root if it starts with `/`, else a
    /// name under the agent's own cgroup.
    #[arg(long, default_value = "r8s-pods")]
    cgroup_root: String,

    /// Do not enforce NetworkPolicies on this node (k3s's flag).
    #[arg(long)]
    disable_network_policy: bool,
}

impl AgentArgs {
    fn options(&self, dir: PathBuf) -> anyhow::Result<r8s_kubelet::agent::AgentOptions> {
        let mut o = r8s_kubelet::agent::AgentOptions::new(dir);
        if let Some(n) = &self.node_name {
            o.node_name = n.clone();
        }
        if let Some(ip) = &self.node_ip {
            let (primary, secondary) = parse_node_ips(ip)?;
            o.node_ip = primary;
            o.secondary_node_ip = secondary;
        }
        o.node_external_ip = self.node_external_ip.clone();
        o.cluster_dns = vec![self.cluster_dns.clone()];
        o.cluster_domain = self.cluster_domain.clone();
        o.bridge = self.pod_bridge.clone();
        o.kubelet_address = self.kubelet_address.clone();
        o.kubelet_port = self.kubelet_port;
        o.keep_pods_on_exit = self.keep_pods_on_exit;
        o.runtime_endpoint = self
            .container_runtime_endpoint
            .as_deref()
            .map(|e| PathBuf::from(e.strip_prefix("unix://").unwrap_or(e)));
        o.cni_conf_dir = self.cni_conf_dir.clone();
        o.registries = r8s_kubelet::registries::Registries::load(&self.private_registry)
            .map_err(|e| anyhow::anyhow!("--private-registry: {e}"))?;
        o.cgroup_root = self.cgroup_root.clone();
        o.resolv_conf = self.resolv_conf.clone();
        Ok(o)
    }

    /// The overlay this node runs, if any; with one, the pod bridge leaves masquerading to it
    /// and takes its MTU.
    async fn overlay(
        &self,
        opts: &mut r8s_kubelet::agent::AgentOptions,
        cluster_cidr: &str,
    ) -> anyhow::Result<Option<r8s_net::overlay::OverlayConfig>> {
        use r8s_net::overlay::{Backend, OverlayConfig};
        if self.flannel_backend == Backend::None {
            return Ok(None);
        }
        // The overlay rides IPv4: the node's IPv4 address, primary or not.
        let v4 = std::iter::once(&opts.node_ip)
            .chain(opts.secondary_node_ip.as_ref())
            .find(|ip| ip.parse::<std::net::Ipv4Addr>().is_ok())
            .cloned()
            .unwrap_or_else(|| opts.node_ip.clone());
        let ip: std::net::Ipv4Addr = match v4.parse() {
            Ok(ip) => ip,
            Err(_) => {
                tracing::warn!(node_ip = %opts.node_ip, "overlay: the node's address is not IPv4; no overlay");
                return Ok(None);
            }
        };
        if ip.is_loopback() {
            tracing::info!("overlay: the node's address is loopback (one node alone): no overlay");
            return Ok(None);
        }
        let cidr = parse_v4_cidr(cluster_cidr).context("--cluster-cidr")?;
        opts.cni_mtu = Some(
            r8s_net::overlay::dataplane::pod_mtu(self.flannel_backend, ip)
                .await
                .map_err(|e| anyhow::anyhow!("--flannel-backend {}: {e}", self.flannel_backend.as_str()))?,
        );
        opts.cni_ip_masq = false;
        let mut cfg = OverlayConfig::new(self.flannel_backend, &opts.node_name, ip, cidr);
        // A dual-stack cluster's IPv6 range: its pods ride the same tunnel.
        cfg.cluster_cidr6 = cluster_cidr
            .split(',')
            .find_map(|c| r8s_net::overlay::parse_cidr6(c.trim()));
        // A dual-stack node address: host-gw routes IPv6 pod subnets through it.
        cfg.node_ip6 = std::iter::once(&opts.node_ip)
            .chain(opts.secondary_node_ip.as_ref())
            .find_map(|ip| ip.parse::<std::net::Ipv6Addr>().ok());
        Ok(Some(cfg))
    }
}

/// Network policy for this node's pods (unless turned off): the engine in the background, and
/// the agent's hook that has each new pod policed before its containers start. `client` is
/// the node's own.
fn spawn_network_policy(
    agent: &AgentArgs,
    opts: &mut r8s_kubelet::agent::AgentOptions,
    client: kube::Client,
    stop: &tokio_util::sync::CancellationToken,
) -> Option<tokio::task::JoinHandle<()>> {
    if agent.disable_network_policy {
        return None;
    }
    let handle = r8s_net::policy::handle();
    let hook = handle.clone();
    opts.network_hook = Some(r8s_kubelet::agent::NetworkHook(Arc::new(move |pod, ip| {
        let h = hook.clone();
        Box::pin(async move { h.pod_started(&pod, &ip).await })
    })));
    let cfg = r8s_net::policy::PolicyConfig::new(&opts.node_name);
    let stop = stop.clone();
    Some(tokio::spawn(async move {
        if let Err(e) = r8s_net::policy::run(client, cfg, handle, stop).await {
            tracing::error!(error = %e, "network policy is not enforced on this node");
        }
    }))
}

/// Run the overlay in the background; `client` is the node's own.
fn spawn_overlay(
    client: kube::Client,
    cfg: r8s_net::overlay::OverlayConfig,
    stop: tokio_util::sync::CancellationToken,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        if let Err(e) = r8s_net::overlay::run(client, cfg, stop).await {
            tracing::error!(error = %e, "the overlay is not running; pods on other nodes are out of reach");
        }
    })
}

/// What a node runs for Services: the proxy (`proxy`) and cluster DNS (`dns`), both reading
/// Services and EndpointSlices with `client`.
fn spawn_service_network(
    client: kube::Client,
    proxy: Option<r8s_net::proxy::ProxyConfig>,
    dns: Option<r8s_net::dns::DnsOptions>,
    metrics: Arc<r8s_net::proxy::ProxyMetrics>,
    stop: &tokio_util::sync::CancellationToken,
) -> (
    Option<tokio::task::JoinHandle<()>>,
    Option<tokio::task::JoinHandle<()>>,
) {
    let proxy = proxy.map(|cfg| {
        let (client, stop) = (client.clone(), stop.clone());
        tokio::spawn(async move {
            if let Err(e) = r8s_net::proxy::run(client, cfg, metrics, stop).await {
                tracing::error!(error = %e, "the Service proxy is not running; Service addresses do not route");
            }
        })
    });
    let dns = dns.map(|opts| {
        let stop = stop.clone();
        tokio::spawn(async move {
            if let Err(e) = r8s_net::dns::run(client, opts, stop).await {
                tracing::error!(error = %e, "cluster DNS failed; pods resolve no cluster names");
            }
        })
    });
    (proxy, dns)
}

/// The proxy's settings on a node: the Service ranges it guards (a table per family), the
/// cluster CIDRs it keeps in, and the Service addresses the node serves itself (no proxying
/// to them).
fn proxy_config(
    node_name: &str,
    service_cidrs: &r8s_apiserver::ServiceCidrs,
    cluster_cidr: &str,
    local_service_ips: Vec<std::net::IpAddr>,
) -> anyhow::Result<r8s_net::proxy::ProxyConfig> {
    let cluster_cidrs = cluster_cidr
        .split(',')
        .map(|c| parse_cidr(c.trim()).context("--cluster-cidr"))
        .collect::<anyhow::Result<Vec<_>>>()?;
    Ok(r8s_net::proxy::ProxyConfig {
        table: "r8s".into(),
        family: r8s_net::nft::AddrFamily::of(&service_cidrs.primary().network),
        service_cidrs: service_cidrs.iter().map(|c| (c.network, c.prefix_len)).collect(),
        cluster_cidrs,
        masquerade_bit: 14,
        node_name: node_name.to_owned(),
        local_service_ips,
        keep_on_exit: false,
    })
}

/// An IPv4 or IPv6 CIDR.
/// A comma-separated flag's values without the empty ones (`--flag=""` is an empty list).
fn nonempty(values: &[String]) -> Vec<String> {
    values
        .iter()
        .filter(|v| !v.trim().is_empty())
        .map(|v| v.trim().to_owned())
        .collect()
}

fn parse_cidr(s: &str) -> anyhow::Result<(std::net::IpAddr, u8)> {
    let (ip, len) = s
        .split_once('/')
        .ok_or_else(|| anyhow::anyhow!("{s:?} is not a CIDR (address/prefix length)"))?;
    let ip: std::net::IpAddr = ip.parse().map_err(|_| anyhow::anyhow!("{s:?}: bad address"))?;
    let max = if ip.is_ipv4() { 32 } else { 128 };
    let len: u8 = len
        .parse()
        .ok()
        .filter(|l| *l <= max)
        .ok_or_else(|| anyhow::anyhow!("{s:?}: bad prefix length"))?;
    Ok((ip, len))
}

fn dns_options(agent: &AgentArgs, address: std::net::IpAddr) -> r8s_net::dns::DnsOptions {
    let mut opts = r8s_net::dns::DnsOptions::new(address, &agent.cluster_domain);
    opts.resolv_conf = agent.resolv_conf.clone();
    opts
}

#[derive(Args)]
struct SchedulerArgs {
    /// Kubeconfig with the API server's address and credentials.
    #[arg(long, env = "KUBECONFIG")]
    kubeconfig: PathBuf,

    /// Take the kube-system/kube-scheduler Lease before scheduling, so only one scheduler of
    /// these profiles acts at a time.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    leader_elect: bool,

    /// schedulerName this scheduler serves (repeatable; default default-scheduler).
    #[arg(long = "scheduler-name", default_value = "default-scheduler")]
    scheduler_names: Vec<String>,

    /// A KubeSchedulerConfiguration file (kubescheduler.config.k8s.io/v1): profiles, plugins,
    /// weights, percentageOfNodesToScore. Its profiles replace --scheduler-name.
    #[arg(long)]
    config: Option<PathBuf>,
}

/// Scheduler profiles from a KubeSchedulerConfiguration file.
fn scheduler_config(path: &std::path::Path) -> anyhow::Result<r8s_scheduler::config::SchedulerConfig> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    r8s_scheduler::config::parse(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
}

/// Settings of the controller manager, in `r8s server` and `r8s controller-manager`.
#[derive(Args, Clone)]
struct ControllerArgs {
    /// Pod IP range; each node gets a slice of it as spec.podCIDR. Two ranges, one IPv4 and
    /// one IPv6, separated by a comma, make the pod network dual-stack (each node gets one
    /// of each in spec.podCIDRs).
    #[arg(long, default_value = "10.42.0.0/16")]
    cluster_cidr: String,

    /// Prefix length of each node's pod CIDR (its IPv4 one on a dual-stack cluster).
    #[arg(long, visible_alias = "node-cidr-mask-size-ipv4", default_value_t = 24)]
    node_cidr_mask_size: u8,

    /// Prefix length of each node's IPv6 pod CIDR, when --cluster-cidr has an IPv6 range.
    #[arg(long, default_value_t = 64)]
    node_cidr_mask_size_ipv6: u8,

    /// How long a node may stay silent before it is marked unreachable.
    #[arg(long, default_value = "40s", value_parser = parse_duration)]
    node_monitor_grace_period: Duration,

    /// Finished pods (Succeeded or Failed) kept before the oldest are deleted; 0 keeps all.
    #[arg(long, default_value_t = r8s_controllers::podgc::DEFAULT_TERMINATED_THRESHOLD)]
    terminated_pod_gc_threshold: usize,

    /// Workers per controller.
    #[arg(long, default_value_t = 5)]
    concurrent_syncs: usize,

    /// How often each HorizontalPodAutoscaler is reconciled.
    #[arg(long, default_value = "15s", value_parser = parse_duration)]
    horizontal_pod_autoscaler_sync_period: Duration,

    /// How far the usage ratio may be from 1.0 before the autoscaler scales.
    #[arg(long, default_value_t = 0.1)]
    horizontal_pod_autoscaler_tolerance: f64,

    /// How long after a pod starts its CPU usage may be skewed by start-up.
    #[arg(long, default_value = "5m", value_parser = parse_duration)]
    horizontal_pod_autoscaler_cpu_initialization_period: Duration,

    /// How long after a pod starts its readiness may still be changing.
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    horizontal_pod_autoscaler_initial_readiness_delay: Duration,

    /// The window whose highest recommendation a scale-down may not go below.
    #[arg(long, default_value = "5m", value_parser = parse_duration)]
    horizontal_pod_autoscaler_downscale_stabilization: Duration,

    /// Run each controller as its own ServiceAccount in kube-system with upstream's
    /// system:controller:* role (as kubeadm sets it), rather than as the controller manager.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    use_service_account_credentials: bool,

    /// CA bundle published in every namespace as the kube-root-ca.crt ConfigMap (default: the
    /// CA of the API server the controller manager talks to).
    #[arg(long)]
    root_ca_file: Option<PathBuf>,
}

impl ControllerArgs {
    /// `config`: the controller manager's own client configuration; `token_dir`: where the
    /// controllers' service-account tokens go when they use them.
    fn options(
        &self,
        leader_elect: bool,
        config: &kube::Config,
        token_dir: PathBuf,
    ) -> anyhow::Result<r8s_controllers::Options> {
        let root_ca_pem = match (&self.root_ca_file, &config.root_cert, &config.root_cert_file) {
            (Some(path), _, _) | (None, None, Some(path)) => {
                Some(std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?)
            }
            (None, Some(ders), _) => Some(r8s_apiserver::pki::certs_pem(ders)),
            (None, None, None) => None,
        };
        let credentials = if self.use_service_account_credentials {
            r8s_controllers::credentials::Credentials::ServiceAccounts {
                config: Box::new(config.clone()),
                dir: token_dir,
            }
        } else {
            r8s_controllers::credentials::Credentials::Shared
        };
        Ok(r8s_controllers::Options {
            credentials,
            signing_ca: None,
            workers: self.concurrent_syncs.max(1),
            cluster_cidr: Some(self.cluster_cidr.clone()),
            node_cidr_mask_size: self.node_cidr_mask_size,
            node_cidr_mask_size_ipv6: self.node_cidr_mask_size_ipv6,
            node_monitor_grace_period: self.node_monitor_grace_period,
            terminated_pod_gc_threshold: self.terminated_pod_gc_threshold,
            leader_elect,
            identity: r8s_client::default_identity(),
            root_ca_pem,
            servicelb: false,
            hpa: r8s_controllers::podautoscaler::HpaOptions {
                sync_period: self.horizontal_pod_autoscaler_sync_period,
                tolerance: self.horizontal_pod_autoscaler_tolerance,
                cpu_initialization_period: self.horizontal_pod_autoscaler_cpu_initialization_period,
                initial_readiness_delay: self.horizontal_pod_autoscaler_initial_readiness_delay,
                downscale_stabilization: self.horizontal_pod_autoscaler_downscale_stabilization,
            },
            // Set by the controller manager's leader election when it runs.
            fence: None,
        })
    }
}

#[derive(Args)]
struct ControllerManagerArgs {
    /// Kubeconfig with the API server's address and credentials.
    #[arg(long, env = "KUBECONFIG")]
    kubeconfig: PathBuf,

    /// Take the kube-system/kube-controller-manager Lease before running, so only one
    /// controller manager acts at a time.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    leader_elect: bool,

    #[command(flatten)]
    controllers: ControllerArgs,

    /// Feature gates, e.g. MaxUnavailableStatefulSet=true (as the API server's).
    #[arg(long, default_value = "")]
    feature_gates: String,
}

#[derive(Args)]
struct ServerArgs {
    /// Where r8s keeps its state (default /var/lib/r8s as root, else ~/.r8s).
    #[arg(long, short = 'd', env = "R8S_DATA_DIR")]
    data_dir: Option<PathBuf>,

    /// Store everything in an etcd cluster instead of the embedded datastore: comma-separated
    /// client URLs, e.g. http://127.0.0.1:2379,http://127.0.0.1:22379.
    #[arg(long, env = "R8S_DATASTORE_ENDPOINT")]
    datastore_endpoint: Option<String>,

    /// Start a new cluster whose datastore is etcd, a member beside each server (the
    /// distribution's etcd, run by r8s): other servers join it with --server and --token,
    /// and three servers survive the loss of one.
    #[arg(long)]
    cluster_init: bool,

    /// The etcd member's client port (--cluster-init), on this server's address and loopback.
    #[arg(long, default_value_t = 2379)]
    etcd_client_port: u16,

    /// The etcd member's peer port (--cluster-init).
    #[arg(long, default_value_t = 2380)]
    etcd_peer_port: u16,

    /// Take no scheduled snapshots of this server's etcd member.
    #[arg(long)]
    etcd_disable_snapshots: bool,

    /// When to snapshot this server's etcd member: a cron expression (five fields, or six with
    /// seconds first), in local time.
    #[arg(long, default_value = "0 */12 * * *", value_parser = etcd_snapshot::parse_schedule)]
    etcd_snapshot_schedule_cron: croner::Cron,

    /// How many scheduled snapshots to keep.
    #[arg(long, default_value_t = 5)]
    etcd_snapshot_retention: usize,

    /// Where snapshots go (default <data-dir>/server/db/snapshots).
    #[arg(long)]
    etcd_snapshot_dir: Option<PathBuf>,

    /// Join the cluster of the server at this URL as another server (e.g.
    /// https://10.0.0.1:6443), with --token: it serves with that cluster's CA and
    /// service-account keys, on the cluster's datastore (an etcd member of its own beside it
    /// when the cluster was made with --cluster-init; else the --datastore-endpoint given).
    #[arg(long, env = "R8S_URL", requires = "join_token")]
    server: Option<String>,

    /// The cluster's join token (`K10<ca-hash>::<id>.<secret>`, the first server's
    /// <data-dir>/server/node-token), to join as another server.
    #[arg(
        long = "token",
        id = "join_token",
        env = "R8S_TOKEN",
        conflicts_with = "join_token_file"
    )]
    join_token: Option<String>,

    /// A file holding the join token.
    #[arg(long = "token-file", id = "join_token_file")]
    join_token_file: Option<PathBuf>,

    /// How often kubelets are scraped for resource metrics (`metrics.k8s.io`, `kubectl top`)
    /// while they are in use (metrics-server's --metric-resolution).
    #[arg(long, default_value = "15s", value_parser = parse_duration)]
    metric_resolution: Duration,

    /// How often the datastore's old revisions are compacted (0 turns it off).
    #[arg(long, default_value = "5m", value_parser = parse_duration)]
    datastore_compaction_interval: Duration,

    /// At most how many of the latest revisions each compaction keeps (history older than one
    /// compaction interval goes in any case, as kube-apiserver compacts).
    #[arg(long, default_value_t = 1000)]
    datastore_compaction_retain: i64,

    /// HTTPS port of the API server.
    #[arg(long, default_value_t = 6443)]
    https_listen_port: u16,

    /// Address the API server listens on (0.0.0.0 for every interface; the default keeps it
    /// to this machine).
    #[arg(long, default_value = "127.0.0.1")]
    bind_address: std::net::IpAddr,

    /// Extra host name or IP for the serving certificate (repeatable).
    #[arg(long = "tls-san")]
    tls_san: Vec<String>,

    /// Where to write the admin kubeconfig (default <data-dir>/kubeconfig.yaml), mode 0600.
    #[arg(long, env = "R8S_KUBECONFIG_OUTPUT")]
    write_kubeconfig: Option<PathBuf>,

    /// CA bundle that signs client certificates (default: the cluster CA r8s made).
    #[arg(long)]
    client_ca_file: Option<PathBuf>,

    /// API priority and fairness: classify requests by the FlowSchemas and queue them by their
    /// priority levels (upstream's flag; `=false` admits every request at once).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    enable_priority_and_fairness: bool,

    /// Test hook (hidden): the embedded datastore's commits stall while this file exists, as on
    /// a disk whose sync stalls (the slow-disk tests).
    #[arg(long, hide = true)]
    test_datastore_stall_while: Option<PathBuf>,

    /// Test hook (hidden): every write and sync of the embedded datastore's file fails (EIO)
    /// while this file exists, as on a failing disk (the failing-disk tests).
    #[arg(long, hide = true)]
    test_datastore_fail_while: Option<PathBuf>,

    /// How long a request may take before the server answers 504 Timeout (upstream's
    /// --request-timeout; watches, logs, exec and proxies are exempt; a request's `timeout`
    /// parameter may ask for less).
    #[arg(long, default_value = "1m0s", value_parser = parse_duration)]
    request_timeout: Duration,

    /// CA bundle that signs the client certificates of proxies trusted to name the user in
    /// request headers (the aggregator's, an authenticating proxy's); default: the front-proxy
    /// CA r8s made.
    #[arg(long)]
    requestheader_client_ca_file: Option<PathBuf>,

    /// Common names such a proxy's certificate may have (comma-separated; empty: any the
    /// request-header CA signed).
    #[arg(long, value_delimiter = ',', default_value = "front-proxy-client")]
    requestheader_allowed_names: Vec<String>,

    /// Request headers naming the user (the first present wins).
    #[arg(long, value_delimiter = ',', default_value = "X-Remote-User")]
    requestheader_username_headers: Vec<String>,

    /// Request headers naming the user's UID.
    #[arg(long, value_delimiter = ',')]
    requestheader_uid_headers: Vec<String>,

    /// Request headers naming the user's groups.
    #[arg(long, value_delimiter = ',', default_value = "X-Remote-Group")]
    requestheader_group_headers: Vec<String>,

    /// Prefixes of request headers carrying the user's extra attributes.
    #[arg(long, value_delimiter = ',', default_value = "X-Remote-Extra-")]
    requestheader_extra_headers_prefix: Vec<String>,

    /// The client certificate the aggregator presents to aggregated API servers (default: one
    /// r8s made, signed by its front-proxy CA, for `front-proxy-client`).
    #[arg(long, requires = "proxy_client_key_file")]
    proxy_client_cert_file: Option<PathBuf>,

    /// The key of --proxy-client-cert-file.
    #[arg(long, requires = "proxy_client_cert_file")]
    proxy_client_key_file: Option<PathBuf>,

    /// Static bearer tokens, Kubernetes CSV format: token,user,uid,"group1,group2".
    #[arg(long)]
    token_auth_file: Option<PathBuf>,

    /// Basic auth users, CSV: password,user,uid[,"group1,group2"]. Removed upstream in 1.19 and
    /// kept here only because the reference document tells it: off unless this flag is given.
    #[arg(long)]
    basic_auth_file: Option<PathBuf>,

    /// ABAC policies (one abac.authorization.kubernetes.io/v1beta1 Policy per line), for
    /// --authorization-mode=ABAC.
    #[arg(long)]
    authorization_policy_file: Option<PathBuf>,

    /// OpenID Connect issuer whose ID tokens authenticate users (https).
    #[arg(long)]
    oidc_issuer_url: Option<String>,

    /// The client ID ID tokens must be issued for (their audience).
    #[arg(long)]
    oidc_client_id: Option<String>,

    /// The claim naming the user.
    #[arg(long, default_value = "sub")]
    oidc_username_claim: String,

    /// Prefix of OIDC user names (default: `<issuer>#` unless the claim is email; `-` for none).
    #[arg(long)]
    oidc_username_prefix: Option<String>,

    /// The claim listing the user's groups.
    #[arg(long)]
    oidc_groups_claim: Option<String>,

    /// Prefix of OIDC group names.
    #[arg(long, default_value = "")]
    oidc_groups_prefix: String,

    /// CA of the issuer's serving certificate (default: the system's roots).
    #[arg(long)]
    oidc_ca_file: Option<PathBuf>,

    /// Kubeconfig-format file naming the authorization webhook (--authorization-mode=Webhook).
    #[arg(long)]
    authorization_webhook_config_file: Option<PathBuf>,

    /// How long the webhook's "allowed" answers are cached.
    #[arg(long, default_value = "5m", value_parser = parse_duration)]
    authorization_webhook_cache_authorized_ttl: Duration,

    /// How long the webhook's other answers are cached.
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    authorization_webhook_cache_unauthorized_ttl: Duration,

    /// Key that signs service-account tokens (PEM, ECDSA P-256 or RSA; default: the one r8s
    /// made, <data-dir>/server/tls/service-account.key).
    #[arg(long)]
    service_account_signing_key_file: Option<PathBuf>,

    /// More keys (PEM, public or private) whose service-account tokens are accepted (repeatable).
    #[arg(long = "service-account-key-file")]
    service_account_key_file: Vec<PathBuf>,

    /// Issuer named in service-account tokens; repeat to also accept earlier issuers' tokens.
    #[arg(long = "service-account-issuer")]
    service_account_issuer: Vec<String>,

    /// Audiences API tokens must be meant for (default: the first issuer).
    #[arg(long = "api-audiences", value_delimiter = ',')]
    api_audiences: Vec<String>,

    /// The longest lifetime a TokenRequest may ask for (e.g. 24h; default: no limit).
    #[arg(long, value_parser = parse_duration)]
    service_account_max_token_expiration: Option<Duration>,

    /// Feature gates, e.g. Initializers=true (the reference document's Initializers stage,
    /// alpha and off by default; removed upstream in 1.14) or MaxUnavailableStatefulSet=true
    /// (a StatefulSet's rollingUpdate.maxUnavailable; alpha and off in 1.33).
    #[arg(long, default_value = "")]
    feature_gates: String,

    /// Admission plugins to turn on beside the default ones (comma-separated).
    #[arg(long, value_delimiter = ',')]
    enable_admission_plugins: Vec<String>,

    /// Admission plugins to turn off, default ones included (comma-separated).
    #[arg(long, value_delimiter = ',')]
    disable_admission_plugins: Vec<String>,

    /// Authorizers in order, comma-separated: Node, RBAC, ABAC, Webhook, AlwaysAllow, AlwaysDeny. Members of
    /// system:masters are always allowed, as upstream.
    #[arg(long, default_value = "Node,RBAC", value_delimiter = ',')]
    authorization_mode: Vec<String>,

    /// Let requests without credentials read /healthz, /livez, /readyz and /version as
    /// system:anonymous (everything else stays 401 for them).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    anonymous_auth: bool,

    /// The range Service cluster IPs are allocated from (k3s's default); two ranges, one IPv4
    /// and one IPv6, separated by a comma, make Services dual-stack capable (the first is the
    /// primary family).
    #[arg(long, default_value = "10.43.0.0/16", value_parser = r8s_apiserver::ServiceCidrs::parse)]
    service_cidr: r8s_apiserver::ServiceCidrs,

    /// Audit policy (audit.k8s.io/v1 Policy, YAML or JSON): which requests are recorded and
    /// how much of them. Without it (or without --audit-log-path) nothing is audited.
    #[arg(long)]
    audit_policy_file: Option<PathBuf>,

    /// Where audit events are written, one JSON line each (`-` for standard output).
    #[arg(long)]
    audit_log_path: Option<PathBuf>,

    /// Megabytes the audit log may reach before it is rotated (0: 100).
    #[arg(long, default_value_t = 0)]
    audit_log_maxsize: u64,

    /// Rotated audit logs to keep (0: all).
    #[arg(long, default_value_t = 0)]
    audit_log_maxbackup: usize,

    /// Days to keep rotated audit logs (0: no limit).
    #[arg(long, default_value_t = 0)]
    audit_log_maxage: u64,

    /// Audit events that may wait for the log writer; beyond that new events are dropped (and
    /// counted in apiserver_audit_error_total) rather than slowing requests down.
    #[arg(long, default_value_t = 10000)]
    audit_log_batch_buffer_size: usize,

    /// Do not run the controller manager in this process.
    #[arg(long)]
    disable_controller_manager: bool,

    /// Do not run the scheduler in this process.
    #[arg(long)]
    disable_scheduler: bool,

    /// KubeSchedulerConfiguration for the scheduler in this process.
    #[arg(long)]
    scheduler_config: Option<PathBuf>,

    /// Do not run the agent (kubelet) in this process: a control plane only.
    #[arg(long)]
    disable_agent: bool,

    /// Do not run the Service proxy (k3s's flag): nothing programs Service addresses on this
    /// node, for a cluster that brings its own.
    #[arg(long)]
    disable_kube_proxy: bool,

    /// Do not run these packaged components (k3s's flag; comma-separated or repeated):
    /// `coredns` — the cluster DNS the agent serves on --cluster-dns; `servicelb` — the
    /// nodes' addresses as LoadBalancer Services' ingress; `local-storage` — the default
    /// `local-path` StorageClass (its provisioner stays for classes that name it).
    #[arg(long, value_delimiter = ',')]
    disable: Vec<String>,

    #[command(flatten)]
    agent: AgentArgs,

    #[command(flatten)]
    controllers: ControllerArgs,
}

/// Every admission plugin r8s has, and which run unless turned off: upstream's default set
/// of these (NodeRestriction is not upstream's default but kubeadm's and k3s's, and r8s's).
const ADMISSION_PLUGINS: &[(&str, bool)] = &[
    ("NamespaceLifecycle", true),
    ("LimitRanger", true),
    ("ServiceAccount", true),
    ("Priority", true),
    ("DefaultTolerationSeconds", true),
    ("RuntimeClass", true),
    ("DefaultIngressClass", true),
    ("DefaultStorageClass", true),
    ("StorageObjectInUseProtection", true),
    ("PersistentVolumeClaimResize", true),
    ("NodeRestriction", true),
    ("PodSecurity", true),
    ("ResourceQuota", true),
    ("MutatingAdmissionPolicy", true),
    ("MutatingAdmissionWebhook", true),
    ("ValidatingAdmissionPolicy", true),
    ("ValidatingAdmissionWebhook", true),
];

/// `--node-ip`: one address, or a dual-stack pair (one of each family), as the kubelet's
/// `ParseNodeIPArgument` takes it.
fn parse_node_ips(arg: &str) -> anyhow::Result<(String, Option<String>)> {
    let ips: Vec<std::net::IpAddr> = arg
        .split(',')
        .map(|s| {
            s.trim()
                .parse()
                .map_err(|_| anyhow::anyhow!("--node-ip: could not parse {s:?}"))
        })
        .collect::<anyhow::Result<_>>()?;
    match ips.as_slice() {
        [one] => Ok((one.to_string(), None)),
        [a, b] if a.is_ipv4() != b.is_ipv4() => Ok((a.to_string(), Some(b.to_string()))),
        [_, _] => {
            anyhow::bail!("--node-ip {arg:?}: a dual-stack pair must have one IPv4 and one IPv6 address")
        }
        _ => anyhow::bail!("--node-ip {arg:?}: must contain either a single IP or a dual-stack pair of IPs"),
    }
}

/// What `--disable` can turn off.
const DISABLEABLE: &[&str] = &["coredns", "servicelb", "local-storage"];

/// The plugins that run: the defaults, plus `enable`, minus `disable`.
fn admission_plugins(enable: &[String], disable: &[String]) -> anyhow::Result<Vec<String>> {
    for name in enable.iter().chain(disable) {
        if !ADMISSION_PLUGINS.iter().any(|(n, _)| n == name) {
            let known: Vec<&str> = ADMISSION_PLUGINS.iter().map(|(n, _)| *n).collect();
            anyhow::bail!("unknown admission plugin {name:?} (known: {})", known.join(", "));
        }
    }
    Ok(ADMISSION_PLUGINS
        .iter()
        .filter(|(n, default)| (*default || enable.iter().any(|e| e == n)) && !disable.iter().any(|d| d == n))
        .map(|(n, _)| n.to_string())
        .collect())
}

/// A duration flag in Go's syntax (`1m30s`, `250ms`), as upstream's flags take it.
fn parse_duration(s: &str) -> Result<Duration, String> {
    r8s_api::duration::parse(s)
}

/// SIGINT (Ctrl-C) and SIGTERM (what init systems and `kill` send), caught from the start of
/// a command: one that comes while it is still starting is a clean stop once started (not the
/// default action, an instant exit that leaves the proxy's table, routes and pods behind),
/// unless the start takes 10 s more: then the command exits at once, as before.
struct StopSignals {
    stopping: tokio::sync::watch::Receiver<bool>,
    started: Arc<std::sync::atomic::AtomicBool>,
}

impl StopSignals {
    fn new() -> std::io::Result<Self> {
        use tokio::signal::unix::{signal, SignalKind};
        let (mut term, mut int) = (signal(SignalKind::terminate())?, signal(SignalKind::interrupt())?);
        let (tx, stopping) = tokio::sync::watch::channel(false);
        let started = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let running = started.clone();
        tokio::spawn(async move {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
            let _ = tx.send(true);
            tokio::time::sleep(Duration::from_secs(10)).await;
            if !running.load(std::sync::atomic::Ordering::SeqCst) {
                eprintln!("r8s: asked to stop while starting; the start did not finish within 10 s");
                std::process::exit(143);
            }
        });
        Ok(Self { stopping, started })
    }

    /// The command has started: until a signal arrives (or has arrived since
    /// [`StopSignals::new`]).
    async fn recv(&mut self) {
        self.started.store(true, std::sync::atomic::Ordering::SeqCst);
        let _ = self.stopping.wait_for(|s| *s).await;
    }
}

fn default_data_dir() -> PathBuf {
    // /proc/self belongs to the process's effective user.
    let is_root = std::fs::metadata("/proc/self")
        .map(|m| std::os::unix::fs::MetadataExt::uid(&m) == 0)
        .unwrap_or(false);
    if is_root {
        PathBuf::from("/var/lib/r8s")
    } else {
        std::env::var_os("HOME")
            .map(|h| PathBuf::from(h).join(".r8s"))
            .unwrap_or_else(|| PathBuf::from(".r8s"))
    }
}

async fn open_store(args: &ServerArgs, data_dir: &std::path::Path) -> anyhow::Result<Arc<dyn Store>> {
    if let Some(endpoints) = &args.datastore_endpoint {
        let store = EtcdStore::connect(EtcdOptions::from_endpoint_list(endpoints))
            .await
            .context("connecting to the etcd datastore")?;
        let revision = store.current_revision().await.context("reading from etcd")?;
        tracing::info!(%endpoints, revision, "using etcd datastore");
        return Ok(Arc::new(store));
    }
    let mut opts = EmbeddedOptions::new(data_dir.join("server").join("db"));
    opts.compaction = CompactionPolicy {
        interval: (!args.datastore_compaction_interval.is_zero())
            .then_some(args.datastore_compaction_interval),
        retain_revisions: args.datastore_compaction_retain,
    };
    opts.stall_while = args.test_datastore_stall_while.clone();
    opts.fail_while = args.test_datastore_fail_while.clone();
    let store = tokio::task::spawn_blocking(move || EmbeddedStore::open(opts)).await??;
    Ok(Arc::new(store))
}

/// The audit policy and log, when both are configured.
fn audit_options(args: &ServerArgs) -> anyhow::Result<Option<r8s_apiserver::audit::AuditOptions>> {
    let (policy_file, log_path) = match (&args.audit_policy_file, &args.audit_log_path) {
        (Some(p), Some(l)) => (p, l),
        (None, None) => return Ok(None),
        (Some(_), None) => {
            tracing::warn!("--audit-policy-file without --audit-log-path: nothing is audited");
            return Ok(None);
        }
        (None, Some(_)) => {
            tracing::warn!("--audit-log-path without --audit-policy-file: nothing is audited");
            return Ok(None);
        }
    };
    let text =
        std::fs::read_to_string(policy_file).with_context(|| format!("reading {}", policy_file.display()))?;
    let policy = r8s_apiserver::audit::Policy::parse(&text)
        .map_err(|e| anyhow::anyhow!("{}: {e}", policy_file.display()))?;
    let mut log = r8s_apiserver::audit::LogOptions::new(log_path);
    log.max_size_mb = args.audit_log_maxsize;
    log.max_backups = args.audit_log_maxbackup;
    log.max_age_days = args.audit_log_maxage;
    log.buffer_size = args.audit_log_batch_buffer_size;
    tracing::info!(
        policy = %policy_file.display(),
        log = %log_path.display(),
        rules = policy.rules.len(),
        "auditing"
    );
    Ok(Some(r8s_apiserver::audit::AuditOptions { policy, log }))
}

/// The address this server is reached at: its bind address, or on every interface the node's
/// (the agent's --node-ip, else the default route's interface).
fn advertise_ip(args: &ServerArgs) -> Option<std::net::IpAddr> {
    if !args.bind_address.is_unspecified() {
        return Some(args.bind_address);
    }
    args.agent
        .node_ip
        .as_deref()
        .and_then(|ips| ips.split(',').next().map(str::to_owned))
        .unwrap_or_else(r8s_kubelet::agent::default_ip)
        .parse()
        .ok()
}

/// The host of an `https://host[:port][/…]` URL (an IPv6 address in its brackets).
fn url_host(url: &str) -> Option<&str> {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let authority = rest.split('/').next()?;
    let host = match authority.strip_prefix('[') {
        Some(v6) => &authority[..v6.find(']')? + 2],
        None => authority.split(':').next()?,
    };
    (!host.is_empty()).then_some(host)
}

/// `host:port` of an `https://` URL (port 443 when it names none).
fn url_authority(url: &str) -> Option<String> {
    let host = url_host(url)?;
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let authority = rest.split('/').next()?;
    let port = authority[host.len()..].strip_prefix(':').unwrap_or("443");
    Some(format!("{host}:{port}"))
}

fn host_name() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
}

async fn server(args: ServerArgs) -> anyhow::Result<()> {
    let mut signals = StopSignals::new()?;
    if let Some(unknown) = args.disable.iter().find(|d| !DISABLEABLE.contains(&d.as_str())) {
        anyhow::bail!(
            "--disable: unknown component {unknown:?} (valid items: {})",
            DISABLEABLE.join(", ")
        );
    }
    let data_dir = args.data_dir.clone().unwrap_or_else(default_data_dir);
    let join_token = match (&args.join_token, &args.join_token_file) {
        (Some(t), _) => Some(t.clone()),
        (None, Some(f)) => {
            Some(std::fs::read_to_string(f).with_context(|| format!("reading {}", f.display()))?)
        }
        (None, None) => None,
    }
    .map(|t| r8s_kubelet::bootstrap::JoinToken::parse(&t))
    .transpose()?;
    // The datastore: the embedded one, an external etcd (--datastore-endpoint), or etcd
    // members beside the servers (--cluster-init, and servers that join one with --server).
    // A server whose data is on an etcd member of its own keeps it (as k3s does) even when
    // restarted without the flags that made it.
    let server_dir = data_dir.join("server");
    let has_member = cluster_etcd::data_dir(&server_dir).join("member").is_dir();
    let cluster_etcd =
        args.datastore_endpoint.is_none() && (args.cluster_init || args.server.is_some() || has_member);
    if cluster_etcd && !has_member && server_dir.join("db").join("state.redb").exists() {
        anyhow::bail!(
            "this server's data is in the embedded datastore ({}); an etcd member would start an empty cluster beside it, and moving the data to etcd is not supported yet",
            server_dir.join("db").join("state.redb").display()
        );
    }
    if args.cluster_init && (args.datastore_endpoint.is_some() || args.server.is_some()) {
        anyhow::bail!(
            "--cluster-init starts a new cluster on etcd members of its own: it takes neither --server nor --datastore-endpoint"
        );
    }
    if join_token.is_some() && args.server.is_none() && args.datastore_endpoint.is_none() && !has_member {
        anyhow::bail!("--token joins a cluster: give the server to join with --server (or the shared --datastore-endpoint)");
    }
    let advertise = advertise_ip(&args);

    // PKI: made at first start, reused after.
    let mut sans: Vec<String> = [
        "localhost",
        "127.0.0.1",
        "kubernetes",
        "kubernetes.default",
        "kubernetes.default.svc",
    ]
    .into_iter()
    .map(str::to_owned)
    .collect();
    sans.extend(host_name());
    // In-cluster clients reach the API server by the kubernetes Service: its cluster IP and
    // full name.
    sans.extend(args.service_cidr.iter().map(|c| c.first().to_string()));
    sans.push(format!("kubernetes.default.svc.{}", args.agent.cluster_domain));
    if let Some(ip) = advertise.filter(|ip| !sans.contains(&ip.to_string())) {
        sans.push(ip.to_string());
    }
    sans.extend(args.tls_san.iter().cloned());
    let tls_dir = data_dir.join("server").join("tls");
    // A joining server takes the cluster's CA and keys, once, before it makes its own
    // certificates with them: from the server it joins, or from the shared datastore.
    let joined = tls_dir.join("ca.crt").exists();
    if let (Some(token), Some(url), false) = (&join_token, &args.server, joined) {
        let files = server_join::fetch(url, token)
            .await
            .with_context(|| format!("joining the cluster of {url}"))?;
        server_join::install(&files, &tls_dir, &data_dir.join("server"), token)?;
        println!("r8s server: joined the cluster of {url} (its CA and service-account keys)");
    }
    let mut etcd_member = None;
    // This server's member's name and the client options for it (--cluster-init).
    let mut etcd_identity = None;
    // The PKI, made or loaded once (before the datastore when that is this server's etcd).
    let mut early_pki = None;
    let store: Arc<dyn Store> = if cluster_etcd {
        let ip =
            advertise.context("--cluster-init needs this server's address (--bind-address or --node-ip)")?;
        let pki = {
            let (dir, sans) = (tls_dir.clone(), sans.clone());
            tokio::task::spawn_blocking(move || r8s_apiserver::pki::Pki::ensure(&dir, &sans)).await??
        };
        let mut etcd_sans = vec!["localhost".to_string(), "127.0.0.1".to_string(), ip.to_string()];
        etcd_sans.extend(host_name());
        let etcd_pki = pki.etcd(&etcd_sans)?;
        early_pki = Some(pki);
        let tls = cluster_etcd::tls_of(&etcd_pki);
        let cfg = cluster_etcd::MemberConfig {
            name: cluster_etcd::member_name(
                &args.agent.options(data_dir.join("agent"))?.node_name,
                ip,
                args.etcd_peer_port,
            ),
            ip,
            client_port: args.etcd_client_port,
            peer_port: args.etcd_peer_port,
            data_dir: cluster_etcd::data_dir(&data_dir.join("server")),
            log: data_dir.join("server").join("etcd.log"),
            tls_dir: tls_dir.clone(),
        };
        // The member of the server joined: its etcd client port, on its address.
        let join = match &args.server {
            Some(url) => {
                let host = url_host(url).with_context(|| format!("--server {url:?}: no host"))?;
                Some(format!("https://{host}:{}", args.etcd_client_port))
            }
            None => None,
        };
        let member = cluster_etcd::Member::start(cfg.clone(), tls.clone(), join)
            .await
            .context("starting this server's etcd member")?;
        println!("r8s server: etcd member {} at {}", cfg.name, cfg.peer_url());
        if !args.etcd_disable_snapshots {
            let dir = args
                .etcd_snapshot_dir
                .clone()
                .unwrap_or_else(|| etcd_snapshot::default_dir(&server_dir));
            tokio::spawn(etcd_snapshot::schedule(
                cluster_etcd::local_options(&cfg, tls.clone()),
                cfg.name.clone(),
                dir,
                args.etcd_snapshot_schedule_cron.clone(),
                args.etcd_snapshot_retention,
            ));
        }
        etcd_member = Some(member);
        etcd_identity = Some((cfg.name.clone(), cluster_etcd::local_options(&cfg, tls.clone())));
        let store = EtcdStore::connect(cluster_etcd::local_options(&cfg, tls))
            .await
            .context("connecting to this server's etcd member")?;
        Arc::new(store)
    } else {
        open_store(&args, &data_dir).await?
    };
    tracing::info!(
        backend = store.backend(),
        revision = store.current_revision().await?,
        data_dir = %data_dir.display(),
        "datastore ready"
    );
    if let (Some(token), None, false) = (&join_token, &args.server, joined) {
        match server_join::fetch_from_store(store.as_ref(), token)
            .await
            .context("reading the cluster's bootstrap data from the datastore")?
        {
            Some(files) => {
                server_join::install(&files, &tls_dir, &data_dir.join("server"), token)?;
                println!("r8s server: joined the cluster on the shared datastore (its CA and service-account keys)");
            }
            None => tracing::info!("no server has bootstrapped this datastore yet: this server is the first"),
        }
    }
    let pki = match early_pki {
        Some(pki) => pki,
        None => {
            let sans = sans.clone();
            tokio::task::spawn_blocking(move || r8s_apiserver::pki::Pki::ensure(&tls_dir, &sans)).await??
        }
    };
    let client_ca_pem = match &args.client_ca_file {
        Some(path) => std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?,
        None => pki.ca_cert_pem.clone(),
    };

    // Request-header authentication (upstream's front-proxy authenticator), before the
    // client certificates: a trusted proxy's certificate names no user of its own.
    let read =
        |path: &PathBuf| std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()));
    let front_proxy = pki.front_proxy_client()?;
    let request_header = r8s_apiserver::authn::RequestHeaderConfig {
        client_ca_pem: match &args.requestheader_client_ca_file {
            Some(path) => read(path)?,
            None => front_proxy.ca_pem.clone(),
        },
        allowed_names: nonempty(&args.requestheader_allowed_names),
        username_headers: nonempty(&args.requestheader_username_headers),
        uid_headers: nonempty(&args.requestheader_uid_headers),
        group_headers: nonempty(&args.requestheader_group_headers),
        extra_headers_prefix: nonempty(&args.requestheader_extra_headers_prefix),
    };
    // The authenticators read service accounts, pods and token Secrets through the server's
    // watch cache (as upstream's read informers): a datastore without quorum does not stop
    // tokens that were valid before.
    let lookup = r8s_apiserver::Lookup::new(store.clone());
    let mut authenticators = r8s_apiserver::authn::AuthenticatorChain::default();
    authenticators.push(
        r8s_apiserver::authn::RequestHeaderAuthenticator::new(request_header.clone())
            .map_err(|e| anyhow::anyhow!("--requestheader-client-ca-file: {e}"))?,
    );
    authenticators.push(
        r8s_apiserver::authn::X509Authenticator::with_client_ca(&client_ca_pem)
            .map_err(|e| anyhow::anyhow!("--client-ca-file: {e}"))?,
    );
    if let Some(path) = &args.token_auth_file {
        authenticators
            .push(r8s_apiserver::authn::TokenFileAuthenticator::from_file(path).map_err(anyhow::Error::msg)?);
    }
    let sa_signing_key = match &args.service_account_signing_key_file {
        Some(p) => std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?,
        None => pki.service_account_key_pem.clone(),
    };
    let sa_public_keys = args
        .service_account_key_file
        .iter()
        .map(|p| std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display())))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let mut sa_tokens = r8s_apiserver::authn::service_account::ServiceAccountTokens::new(
        &sa_signing_key,
        &sa_public_keys,
        &args.service_account_issuer,
        &args.api_audiences,
        lookup.clone(),
    )
    .map_err(|e| anyhow::anyhow!("service-account keys: {e}"))?;
    sa_tokens.max_expiration_seconds = args
        .service_account_max_token_expiration
        .map(|d| d.as_secs() as i64);
    let sa_tokens = Arc::new(sa_tokens);
    authenticators
        .push(r8s_apiserver::authn::service_account::ServiceAccountAuthenticator(sa_tokens.clone()));
    authenticators.push(
        r8s_apiserver::authn::bootstrap_token::BootstrapTokenAuthenticator {
            lookup: lookup.clone(),
        },
    );
    if let Some(issuer) = &args.oidc_issuer_url {
        let ca_pem = match &args.oidc_ca_file {
            Some(p) => std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?,
            None => String::new(),
        };
        authenticators.push(
            r8s_apiserver::authn::oidc::OidcAuthenticator::new(r8s_apiserver::authn::oidc::OidcOptions {
                issuer_url: issuer.clone(),
                client_id: args.oidc_client_id.clone().unwrap_or_default(),
                username_claim: args.oidc_username_claim.clone(),
                username_prefix: args.oidc_username_prefix.clone(),
                groups_claim: args.oidc_groups_claim.clone(),
                groups_prefix: args.oidc_groups_prefix.clone(),
                ca_pem,
            })
            .map_err(anyhow::Error::msg)?,
        );
    }
    if let Some(path) = &args.basic_auth_file {
        authenticators.push(
            r8s_apiserver::authn::basic_auth::BasicAuthAuthenticator::from_file(path)
                .map_err(anyhow::Error::msg)?,
        );
    }
    if args.anonymous_auth {
        authenticators.allow_anonymous(r8s_apiserver::authn::PUBLIC_INFO_PATHS);
    }
    let mut authorizers = r8s_apiserver::authz::AuthorizerChain::default();
    authorizers.push(r8s_apiserver::authz::PrivilegedGroups::masters());
    let mut rbac = None;
    for mode in &args.authorization_mode {
        match mode.as_str() {
            "RBAC" => {
                let r = r8s_apiserver::rbac::Rbac::start(store.clone());
                authorizers.push(r.authorizer());
                rbac = Some(r);
            }
            "Node" => authorizers.push(r8s_apiserver::authz::node::NodeAuthorizer::start(store.clone())),
            "ABAC" => {
                let path = args
                    .authorization_policy_file
                    .as_ref()
                    .context("--authorization-mode=ABAC needs --authorization-policy-file")?;
                authorizers.push(r8s_apiserver::authz::abac::AbacAuthorizer::from_file(path).map_err(anyhow::Error::msg)?);
            }
            "Webhook" => {
                let path = args
                    .authorization_webhook_config_file
                    .as_ref()
                    .context("--authorization-mode=Webhook needs --authorization-webhook-config-file")?;
                authorizers.push(
                    r8s_apiserver::authz::webhook::WebhookAuthorizer::from_kubeconfig(
                        path,
                        args.authorization_webhook_cache_authorized_ttl,
                        args.authorization_webhook_cache_unauthorized_ttl,
                    )
                    .map_err(anyhow::Error::msg)?,
                );
            }
            "AlwaysAllow" => authorizers.push(r8s_apiserver::authz::AlwaysAllow),
            "AlwaysDeny" => authorizers.push(r8s_apiserver::authz::AlwaysDeny),
            other => anyhow::bail!(
                "--authorization-mode: unknown authorization mode {other:?} (supported: Node, RBAC, ABAC, Webhook, AlwaysAllow, AlwaysDeny)"
            ),
        }
    }

    let plugins = admission_plugins(&args.enable_admission_plugins, &args.disable_admission_plugins)?;
    r8s_api::features::set(&args.feature_gates).map_err(|e| anyhow::anyhow!("--feature-gates: {e}"))?;
    let on = |name: &str| plugins.iter().any(|p| p == name);
    tracing::info!(plugins = %plugins.join(","), "admission plugins");
    // Upstream's default plugins in upstream's order: each phase runs its plugins in this order,
    // mutating first (NamespaceLifecycle, LimitRanger, ServiceAccount, Priority,
    // DefaultTolerationSeconds, RuntimeClass, DefaultIngressClass, MutatingAdmissionWebhook),
    // then validating (LimitRanger, ServiceAccount, RuntimeClass, NodeRestriction, PodSecurity,
    // ValidatingAdmissionWebhook, ResourceQuota last).
    use r8s_apiserver::admission as adm;
    let mut admission = adm::AdmissionChain::default();
    // What admission reads on every pod create (namespaces, ServiceAccounts, LimitRanges,
    // PriorityClasses, whether there are ResourceQuotas) is read from memory, as upstream's
    // plugins read informers. Quota charges and the webhooks keep their own ways (a charge
    // needs the stored version).
    let lister_store: Arc<dyn r8s_store::Store> =
        adm::listers::ListerStore::start(store.clone(), adm::listers::ADMISSION_PREFIXES);
    let listers = adm::listers::Listers::new(lister_store.clone());
    if r8s_api::features::initializers() {
        admission.push_mutating(adm::initializers::Initializers { store: store.clone() });
    }
    if on("NamespaceLifecycle") {
        admission.push_mutating(adm::namespace_lifecycle::NamespaceLifecycle {
            listers: listers.clone(),
        });
    }
    if on("LimitRanger") {
        admission.push_mutating(adm::limit_ranger::LimitRanger {
            listers: listers.clone(),
        });
    }
    if on("ServiceAccount") {
        admission.push_mutating(adm::service_account::ServiceAccount {
            listers: listers.clone(),
        });
    }
    if on("Priority") {
        admission.push_mutating(adm::priority::Priority {
            listers: listers.clone(),
        });
    }
    if on("DefaultTolerationSeconds") {
        admission.push_mutating(adm::tolerations::DefaultTolerationSeconds::default());
    }
    if on("RuntimeClass") {
        admission.push_mutating(adm::runtime_class::RuntimeClass {
            listers: listers.clone(),
        });
    }
    if on("DefaultStorageClass") {
        admission.push_mutating(adm::default_storage_class::DefaultStorageClass {
            listers: listers.clone(),
        });
    }
    if on("StorageObjectInUseProtection") {
        admission.push_mutating(adm::storage_protection::StorageObjectInUseProtection);
    }
    if on("DefaultIngressClass") {
        admission.push_mutating(adm::default_ingress_class::DefaultIngressClass {
            listers: listers.clone(),
        });
    }
    // Upstream's plugin is on by default and does nothing until its feature gate is.
    if on("MutatingAdmissionPolicy") && r8s_api::features::mutating_admission_policy() {
        admission.push_mutating(adm::policy::MutatingAdmissionPolicy::start(
            store.clone(),
            Some(authorizers.clone()),
        ));
    }
    if on("MutatingAdmissionWebhook") {
        admission.push_mutating(adm::webhook::MutatingWebhook::start(
            store.clone(),
            Some(authorizers.clone()),
        ));
    }
    if on("LimitRanger") {
        admission.push_validating(adm::limit_ranger::LimitRanger {
            listers: listers.clone(),
        });
    }
    if on("ServiceAccount") {
        admission.push_validating(adm::service_account::ServiceAccount {
            listers: listers.clone(),
        });
    }
    if on("RuntimeClass") {
        admission.push_validating(adm::runtime_class::RuntimeClass {
            listers: listers.clone(),
        });
    }
    if on("PersistentVolumeClaimResize") {
        admission.push_validating(adm::pvc_resize::PersistentVolumeClaimResize {
            listers: listers.clone(),
        });
    }
    if on("NodeRestriction") {
        admission.push_validating(adm::node_restriction::NodeRestriction);
    }
    if on("PodSecurity") {
        admission.push_validating(adm::pod_security::PodSecurity {
            listers: listers.clone(),
        });
    }
    if on("ValidatingAdmissionPolicy") {
        admission.push_validating(adm::policy::ValidatingAdmissionPolicy::start(
            store.clone(),
            Some(authorizers.clone()),
        ));
    }
    if on("ValidatingAdmissionWebhook") {
        admission.push_validating(adm::webhook::ValidatingWebhook::start(
            store.clone(),
            Some(authorizers.clone()),
        ));
    }
    if on("ResourceQuota") {
        admission.push_validating(
            adm::resource_quota::ResourceQuota::new(store.clone()).with_lister(lister_store.clone()),
        );
    }

    let audit = audit_options(&args)?;
    // The API server's identity towards kubelets (pods/log).
    let (kubelet_cert, kubelet_key) =
        pki.issue_client_cert("kube-apiserver-kubelet-client", &["system:masters"])?;
    let kubelet =
        r8s_apiserver::KubeletClient::new(&kubelet_cert, &kubelet_key).map_err(anyhow::Error::msg)?;

    // The aggregator's front-proxy identity (upstream's --proxy-client-cert-file), signed by
    // its own CA so that no cluster client certificate can pose as the proxy.
    let proxy_identity = match (&args.proxy_client_cert_file, &args.proxy_client_key_file) {
        (Some(cert), Some(key)) => r8s_apiserver::ProxyIdentity {
            cert_pem: read(cert)?,
            key_pem: read(key)?,
            ca_pem: request_header.client_ca_pem.clone(),
        },
        _ => front_proxy,
    };
    let api = r8s_apiserver::ApiServer::start(r8s_apiserver::ApiServerConfig {
        serving: r8s_apiserver::ServingConfig {
            bind_address: args.bind_address,
            port: args.https_listen_port,
            // The CA goes with the serving certificate, so an agent holding only the CA's hash
            // (in its join token) can verify the server.
            cert_pem: format!("{}{}", pki.serving_cert_pem, pki.ca_cert_pem),
            key_pem: pki.serving_key_pem.clone(),
            client_ca_pem,
        },
        store: store.clone(),
        authenticators,
        authorizers,
        admission,
        service_cidrs: args.service_cidr.clone(),
        rbac,
        service_account_tokens: Some(sa_tokens),
        audit,
        kubelet: Some(kubelet),
        advertise_address: advertise,
        metric_resolution: args.metric_resolution,
        proxy_identity: Some(proxy_identity),
        request_header: Some(request_header),
        priority_and_fairness: args.enable_priority_and_fairness,
        request_timeout: args.request_timeout,
        lookup: Some(lookup),
    })
    .await
    .with_context(|| format!("serving on {}:{}", args.bind_address, args.https_listen_port))?;

    let host = if args.bind_address.is_unspecified() {
        "127.0.0.1".to_owned()
    } else {
        match args.bind_address {
            std::net::IpAddr::V6(v6) => format!("[{v6}]"),
            v4 => v4.to_string(),
        }
    };
    let kubeconfig_path = args
        .write_kubeconfig
        .clone()
        .unwrap_or_else(|| data_dir.join("kubeconfig.yaml"));
    let kubeconfig = pki.admin_kubeconfig(&format!("https://{host}:{}", api.local_addr.port()));
    r8s_apiserver::pki::write_private(&kubeconfig_path, &kubeconfig)?;
    println!("r8s server: API server listening on https://{}", api.local_addr);
    println!("r8s server: wrote kubeconfig {}", kubeconfig_path.display());
    println!(
        "r8s server: try: r8s kubectl --kubeconfig {} get nodes",
        kubeconfig_path.display()
    );
    // Agents on other machines join with the token written here.
    let admin = client_from_kubeconfig(&kubeconfig_path).await?;
    let join = join::ensure(&admin, &data_dir.join("server"), &pki.ca_cert_pem)
        .await
        .context("preparing the join token for agents")?;
    // Other servers join with the same token.
    let bootstrap = r8s_kubelet::bootstrap::JoinToken::parse(&join)?.bootstrap;
    server_join::publish(&admin, &data_dir.join("server").join("tls"), &bootstrap)
        .await
        .context("keeping the cluster's bootstrap data for joining servers")?;
    join::write_node_token(&data_dir.join("server"), &join)?;
    // The packaged default StorageClass (k3s's `local-storage`), made once: a user may change
    // it or take its default mark away.
    if !args.disable.iter().any(|d| d == "local-storage") {
        r8s_controllers::persistentvolume::ensure_default_class(&admin)
            .await
            .context("creating the local-path StorageClass")?;
    }
    println!(
        "r8s server: agents join with: r8s agent --server https://{host}:{} --token-file {}",
        api.local_addr.port(),
        data_dir.join("server").join("node-token").display()
    );
    // The components reach the API server over HTTPS like any client, each with its own
    // certificate and only upstream's permissions: system:kube-controller-manager (and a
    // ServiceAccount per controller), system:kube-scheduler, system:node:<name>.
    let stop = tokio_util::sync::CancellationToken::new();
    let mut components = Vec::new();
    let mut agent = None;
    if let Some((member, etcd)) = etcd_identity {
        // The member of a server whose Node is deleted leaves the etcd cluster.
        components.push(tokio::spawn(etcd_members::run(
            admin.clone(),
            etcd,
            args.agent.options(data_dir.join("agent"))?.node_name,
            member,
            stop.clone(),
        )));
    }
    if !args.disable_controller_manager {
        let (cert, key) = pki.issue_client_cert("system:kube-controller-manager", &[])?;
        let kc = r8s_apiserver::pki::kubeconfig(
            &format!("https://{host}:{}", api.local_addr.port()),
            &pki.ca_cert_pem,
            &cert,
            &key,
        );
        let path = data_dir.join("server").join("cred").join("controller.kubeconfig");
        r8s_apiserver::pki::write_private(&path, &kc)?;
        let config = config_from_kubeconfig(&path).await?;
        let client = r8s_client::http2::client(config.clone())?;
        let token_dir = data_dir.join("server").join("cred").join("controllers");
        let mut opts = args.controllers.options(true, &config, token_dir)?;
        opts.servicelb = !args.disable.iter().any(|d| d == "servicelb");
        opts.signing_ca = Some(r8s_controllers::certificates::SigningCa {
            cert_pem: pki.ca_cert_pem.clone(),
            key_pem: pki.ca_key_pem().to_owned(),
        });
        if args.controllers.root_ca_file.is_none() {
            opts.root_ca_pem = Some(pki.ca_cert_pem.clone());
        }
        components.push(tokio::spawn(r8s_controllers::run(client, opts, stop.clone())));
    }
    if !args.disable_scheduler {
        let (cert, key) = pki.issue_client_cert("system:kube-scheduler", &[])?;
        let kc = r8s_apiserver::pki::kubeconfig(
            &format!("https://{host}:{}", api.local_addr.port()),
            &pki.ca_cert_pem,
            &cert,
            &key,
        );
        let path = data_dir.join("server").join("cred").join("scheduler.kubeconfig");
        r8s_apiserver::pki::write_private(&path, &kc)?;
        let client = client_from_kubeconfig(&path).await?;
        let mut opts = r8s_scheduler::Options::default();
        if let Some(path) = &args.scheduler_config {
            opts.profiles = scheduler_config(path)?.profiles;
        }
        // The scheduler's metrics are served on the API server's /metrics.
        let metrics = opts.metrics.clone();
        api.add_metrics(move || metrics.render());
        components.push(tokio::spawn(r8s_scheduler::run(client, opts, stop.clone())));
    }
    let mut dns = None;
    let mut proxy = None;
    let mut overlay = None;
    let mut policy = None;
    let proxy_metrics = Arc::new(r8s_net::proxy::ProxyMetrics::default());
    let run_dns = !args.disable_agent && !args.disable.iter().any(|d| d == "coredns");
    let run_proxy = !args.disable_agent && !args.disable_kube_proxy;
    // An API server on loopback only is out of pods' reach at its endpoint (127.0.0.1), so
    // the node serves the kubernetes Service's cluster IP itself (put on the loopback link,
    // as cluster DNS's address): pods on this node reach the API without it being exposed
    // beyond the machine. With a bind address pods can reach, the proxy routes the Service
    // to its endpoint as any other.
    let mut api_local = None;
    if !args.disable_agent && args.bind_address.is_loopback() {
        let ip = args.service_cidr.primary().first();
        match r8s_net::local::make_local(ip, API_LOCAL_LABEL).await {
            Ok(ours) => match tokio::net::TcpListener::bind((ip, 443)).await {
                Ok(listener) => {
                    api.serve_also(listener);
                    api_local = Some((ip, ours));
                }
                Err(e) => {
                    tracing::warn!(address = %ip, error = %e, "pods cannot reach the API server: listening on the kubernetes Service's address failed")
                }
            },
            Err(e) => tracing::warn!(address = %ip, error = %e, "pods cannot reach the API server"),
        }
    }
    let cluster_dns: std::net::IpAddr = args
        .agent
        .cluster_dns
        .parse()
        .with_context(|| format!("--cluster-dns {:?} is not an IP address", args.agent.cluster_dns))?;
    if run_dns || run_proxy {
        // Cluster DNS and the Service proxy read Services and EndpointSlices as kube-proxy
        // does: with the system:kube-proxy identity (bound to system:node-proxier), not the
        // node's.
        let (cert, key) = pki.issue_client_cert("system:kube-proxy", &[])?;
        let kc = r8s_apiserver::pki::kubeconfig(
            &format!("https://{host}:{}", api.local_addr.port()),
            &pki.ca_cert_pem,
            &cert,
            &key,
        );
        let path = data_dir.join("agent").join("kube-proxy.kubeconfig");
        std::fs::create_dir_all(data_dir.join("agent"))?;
        r8s_apiserver::pki::write_private(&path, &kc)?;
        let client = client_from_kubeconfig(&path).await?;
        let proxy_cfg = if run_proxy {
            let local: Vec<std::net::IpAddr> =
                [Some(cluster_dns).filter(|_| run_dns), api_local.map(|(ip, _)| ip)]
                    .into_iter()
                    .flatten()
                    .collect();
            let node_name = args.agent.options(data_dir.join("agent"))?.node_name;
            let mut cfg = proxy_config(
                &node_name,
                &args.service_cidr,
                &args.controllers.cluster_cidr,
                local,
            )?;
            cfg.keep_on_exit = args.agent.keep_pods_on_exit;
            Some(cfg)
        } else {
            None
        };
        if run_dns {
            // The kube-dns Service, as k3s's CoreDNS manifest makes it, so what looks for
            // cluster DNS by its Service (and its name in the zone) finds it.
            if let Err(e) = ensure_kube_dns_service(&admin, cluster_dns).await {
                tracing::warn!(error = %e, "could not create the kube-dns Service");
            }
        }
        let dns_opts = run_dns.then(|| dns_options(&args.agent, cluster_dns));
        (proxy, dns) = spawn_service_network(client, proxy_cfg, dns_opts, proxy_metrics.clone(), &stop);
    }
    if !args.disable_agent {
        let mut opts = args.agent.options(data_dir.join("agent"))?;
        let overlay_cfg = args
            .agent
            .overlay(&mut opts, &args.controllers.cluster_cidr)
            .await?;
        if run_proxy {
            // The proxy's metrics on the kubelet's /metrics, as the agent's.
            let m = proxy_metrics.clone();
            opts.metrics_sources
                .push(r8s_kubelet::metrics::MetricsSource(Arc::new(move || m.render())));
        }
        let node_user = format!("system:node:{}", opts.node_name);
        let (cert, key) = pki.issue_client_cert(&node_user, &["system:nodes"])?;
        let kc = r8s_apiserver::pki::kubeconfig(
            &format!("https://{host}:{}", api.local_addr.port()),
            &pki.ca_cert_pem,
            &cert,
            &key,
        );
        let path = data_dir.join("agent").join("kubelet.kubeconfig");
        r8s_apiserver::pki::write_private(&path, &kc)?;
        let config = config_from_kubeconfig(&path).await?;
        // The kubelet API takes client certificates signed by the cluster CA.
        opts.client_ca = config.root_cert.clone().unwrap_or_default();
        let client = r8s_client::http2::client(config)?;
        overlay = overlay_cfg.map(|cfg| spawn_overlay(client.clone(), cfg, stop.clone()));
        policy = spawn_network_policy(&args.agent, &mut opts, client.clone(), &stop);
        // The server's own node is a control-plane node, as k3s labels it. Kubelets may not
        // set node-role labels on themselves (NodeRestriction), so the server does, once the
        // node has registered.
        components.push(tokio::spawn(label_control_plane_node(
            admin.clone(),
            opts.node_name.clone(),
            stop.clone(),
        )));
        let stop = stop.clone();
        agent = Some(tokio::spawn(async move {
            if let Err(e) = r8s_kubelet::agent::Agent::run(client, opts, stop).await {
                tracing::error!(error = %e, "agent failed; this server runs no pods");
            }
        }));
    }
    // SIGINT (Ctrl-C) or SIGTERM (what init systems and `kill` send) stop the server.
    signals.recv().await;
    // Clients are sent to the other servers (if any) from now on.
    api.leave().await;
    stop.cancel();
    // The agent terminates its pods (each within its grace period) before it returns; the
    // API server serves it until then.
    if let Some(agent) = agent {
        let _ = tokio::time::timeout(r8s_kubelet::agent::STOP_LIMIT, agent).await;
    }
    if let Some(dns) = dns {
        let _ = tokio::time::timeout(Duration::from_secs(5), dns).await;
    }
    if let Some(proxy) = proxy {
        let _ = tokio::time::timeout(Duration::from_secs(5), proxy).await;
    }
    for t in [overlay, policy].into_iter().flatten() {
        let _ = tokio::time::timeout(Duration::from_secs(5), t).await;
    }
    if let Some((ip, true)) = api_local {
        api.stop();
        if let Err(e) = r8s_net::local::remove_local(ip).await {
            tracing::warn!(address = %ip, error = %e, "could not remove the kubernetes Service's address");
        }
    }
    for c in components {
        let _ = tokio::time::timeout(Duration::from_secs(15), c).await;
    }
    api.stop();
    // The etcd member last: the components above wrote through it until now.
    if let Some(member) = etcd_member {
        member.stop().await;
    }
    tracing::info!("shutting down");
    Ok(())
}

/// The label of the kubernetes Service's address on the loopback link.
const API_LOCAL_LABEL: &str = "lo:r8s-api";

/// An IPv4 CIDR `a.b.c.d/n`.
/// The IPv4 range of a `--cluster-cidr` (one range, or one per family separated by a comma).
fn parse_v4_cidr(s: &str) -> anyhow::Result<(std::net::Ipv4Addr, u8)> {
    let s = s
        .split(',')
        .map(str::trim)
        .find(|c| !c.contains(':'))
        .ok_or_else(|| anyhow::anyhow!("{s:?} has no IPv4 range"))?;
    let (ip, len) = s
        .split_once('/')
        .ok_or_else(|| anyhow::anyhow!("{s:?} is not a CIDR (a.b.c.d/n)"))?;
    let ip: std::net::Ipv4Addr = ip.parse().map_err(|_| anyhow::anyhow!("{s:?}: bad address"))?;
    let len: u8 = len
        .parse()
        .ok()
        .filter(|l| *l <= 32)
        .ok_or_else(|| anyhow::anyhow!("{s:?}: bad prefix length"))?;
    Ok((ip, len))
}

/// Create `kube-system/kube-dns` (cluster IP `address`; DNS over UDP and TCP, and CoreDNS's
/// metrics port) and its Endpoints unless they exist: k3s's CoreDNS Service, without a
/// selector (the agent serves DNS, no pod does).
async fn ensure_kube_dns_service(admin: &kube::Client, address: std::net::IpAddr) -> anyhow::Result<()> {
    let services: kube::Api<k8s_openapi::api::core::v1::Service> =
        kube::Api::namespaced(admin.clone(), "kube-system");
    let svc: k8s_openapi::api::core::v1::Service = serde_json::from_value(serde_json::json!({
        "metadata": {
            "name": "kube-dns",
            "namespace": "kube-system",
            "labels": {
                "k8s-app": "kube-dns",
                "kubernetes.io/cluster-service": "true",
                "kubernetes.io/name": "CoreDNS",
            },
            "annotations": {"prometheus.io/port": "9153", "prometheus.io/scrape": "true"},
        },
        "spec": {
            "clusterIP": address.to_string(),
            "clusterIPs": [address.to_string()],
            "ports": [
                {"name": "dns", "port": 53, "protocol": "UDP"},
                {"name": "dns-tcp", "port": 53, "protocol": "TCP"},
                {"name": "metrics", "port": 9153, "protocol": "TCP"},
            ],
        },
    }))?;
    match services.create(&kube::api::PostParams::default(), &svc).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(e) => return Err(e.into()),
    }
    // Its Endpoints: where cluster DNS answers. Every node's agent serves the cluster DNS
    // address itself (NodeLocal DNSCache's layout), so that address is the one endpoint, on
    // the DNS ports (the metrics port has no server behind it). The mirroring controller
    // makes the EndpointSlice from it.
    let endpoints: kube::Api<k8s_openapi::api::core::v1::Endpoints> =
        kube::Api::namespaced(admin.clone(), "kube-system");
    let ep: k8s_openapi::api::core::v1::Endpoints = serde_json::from_value(serde_json::json!({
        "metadata": {
            "name": "kube-dns",
            "namespace": "kube-system",
            "labels": svc.metadata.labels,
        },
        "subsets": [{
            "addresses": [{"ip": address.to_string()}],
            "ports": [
                {"name": "dns", "port": 53, "protocol": "UDP"},
                {"name": "dns-tcp", "port": 53, "protocol": "TCP"},
            ],
        }],
    }))?;
    match endpoints.create(&kube::api::PostParams::default(), &ep).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// The labels k3s gives a server's node, so `kubectl get nodes` shows its roles.
const CONTROL_PLANE_LABELS: [&str; 2] = [
    "node-role.kubernetes.io/control-plane",
    "node-role.kubernetes.io/master",
];

/// Label node `name` as a control-plane node once it exists (checked every second, for at
/// most five minutes, until `stop`).
async fn label_control_plane_node(
    admin: kube::Client,
    name: String,
    stop: tokio_util::sync::CancellationToken,
) {
    let nodes: kube::Api<k8s_openapi::api::core::v1::Node> = kube::Api::all(admin);
    let labels: serde_json::Map<String, serde_json::Value> = CONTROL_PLANE_LABELS
        .iter()
        .map(|l| (l.to_string(), serde_json::json!("true")))
        .collect();
    let patch = serde_json::json!({"metadata": {"labels": labels}});
    for _ in 0..300 {
        let done = nodes
            .patch(
                &name,
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(&patch),
            )
            .await;
        match done {
            Ok(_) => return,
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => tracing::debug!(node = %name, error = %e, "labelling the server's node"),
        }
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
        }
    }
    tracing::warn!(node = %name, "the server's node never registered; not labelled control-plane");
}

/// A component's client, over HTTP/2 (`r8s_client::http2`): one connection for all its
/// requests and watches, as client-go's.
async fn client_from_kubeconfig(path: &std::path::Path) -> anyhow::Result<kube::Client> {
    Ok(r8s_client::http2::client(config_from_kubeconfig(path).await?)?)
}

async fn config_from_kubeconfig(path: &std::path::Path) -> anyhow::Result<kube::Config> {
    let kubeconfig = kube::config::Kubeconfig::read_from(path)
        .with_context(|| format!("reading kubeconfig {}", path.display()))?;
    let config =
        kube::Config::from_custom_kubeconfig(kubeconfig, &kube::config::KubeConfigOptions::default())
            .await
            .with_context(|| format!("loading kubeconfig {}", path.display()))?;
    Ok(config)
}

async fn scheduler(args: SchedulerArgs) -> anyhow::Result<()> {
    let mut signals = StopSignals::new()?;
    let mut opts = r8s_scheduler::Options {
        profiles: args
            .scheduler_names
            .iter()
            .map(|n| r8s_scheduler::config::ProfileConfig::default_for(n))
            .collect(),
        leader_elect: args.leader_elect,
        ..Default::default()
    };
    if let Some(path) = &args.config {
        let cfg = scheduler_config(path)?;
        opts.profiles = cfg.profiles;
        if let Some(le) = cfg.leader_elect {
            opts.leader_elect = le;
        }
    }
    // The configuration is checked before anything is contacted.
    let client = client_from_kubeconfig(&args.kubeconfig).await?;
    client
        .apiserver_version()
        .await
        .context("reaching the API server")?;
    let stop = tokio_util::sync::CancellationToken::new();
    let task = tokio::spawn(r8s_scheduler::run(client, opts, stop.clone()));
    signals.recv().await;
    stop.cancel();
    let _ = tokio::time::timeout(Duration::from_secs(5), task).await;
    Ok(())
}

async fn controller_manager(args: ControllerManagerArgs) -> anyhow::Result<()> {
    let mut signals = StopSignals::new()?;
    r8s_api::features::set(&args.feature_gates).map_err(|e| anyhow::anyhow!("--feature-gates: {e}"))?;
    let config = config_from_kubeconfig(&args.kubeconfig).await?;
    let client = r8s_client::http2::client(config.clone())?;
    // The controllers' tokens live only as long as this process.
    let token_dir = std::env::temp_dir().join(format!("r8s-controller-manager-{}", std::process::id()));
    let version = client
        .apiserver_version()
        .await
        .context("reaching the API server")?;
    tracing::info!(server = %version.git_version, "controller manager starting");
    let stop = tokio_util::sync::CancellationToken::new();
    let task = tokio::spawn(r8s_controllers::run(
        client,
        args.controllers
            .options(args.leader_elect, &config, token_dir.clone())?,
        stop.clone(),
    ));
    signals.recv().await;
    stop.cancel();
    let _ = tokio::time::timeout(Duration::from_secs(5), task).await;
    let _ = std::fs::remove_dir_all(&token_dir);
    Ok(())
}

/// The join token of `--token` or `--token-file`, if given.
fn join_token(args: &AgentCmdArgs) -> anyhow::Result<Option<String>> {
    Ok(match (&args.token, &args.token_file) {
        (Some(t), _) => Some(t.clone()),
        (None, Some(f)) => {
            Some(std::fs::read_to_string(f).with_context(|| format!("reading {}", f.display()))?)
        }
        (None, None) => None,
    })
}

async fn agent(args: AgentCmdArgs) -> anyhow::Result<()> {
    let mut signals = StopSignals::new()?;
    let data_dir = args.data_dir.clone().unwrap_or_else(default_data_dir);
    if let Some(count) = args.hollow {
        let mut base = args.agent.options(data_dir.join("agent"))?;
        base.kubelet_port = 0;
        let set = hollow::HollowSet {
            server: args.server.clone(),
            token: join_token(&args)?,
            dir: hollow::dir(&data_dir),
            prefix: args.agent.node_name.clone().unwrap_or_else(|| "hollow".into()),
            count,
            capacity: r8s_kubelet::agent::Hollow::default(),
            base,
        };
        let stop = tokio_util::sync::CancellationToken::new();
        let mut task = tokio::spawn(hollow::run(set, stop.clone()));
        // It ends early only on an error (a node that could not join).
        return tokio::select! {
            _ = signals.recv() => {
                stop.cancel();
                task.await?
            }
            r = &mut task => r?,
        };
    }
    let mut opts = args.agent.options(data_dir.join("agent"))?;
    let kubeconfig = data_dir.join("agent").join("kubelet.kubeconfig");
    if !kubeconfig.exists() {
        // First start: join with the token and get this node's own certificate.
        let token = join_token(&args)?.context(
            "joining needs --token or --token-file (the server writes <data-dir>/server/node-token)",
        )?;
        let token = r8s_kubelet::bootstrap::JoinToken::parse(&token)?;
        let creds =
            r8s_kubelet::bootstrap::join(&args.server, &token, &opts.node_name, Duration::from_secs(300))
                .await?;
        let kc = r8s_apiserver::pki::kubeconfig(&args.server, &creds.ca_pem, &creds.cert_pem, &creds.key_pem);
        r8s_apiserver::pki::write_private(&kubeconfig, &kc)?;
        println!(
            "r8s agent: joined {} as system:node:{}",
            args.server, opts.node_name
        );
    }
    let mut config = config_from_kubeconfig(&kubeconfig).await?;
    opts.client_ca = config.root_cert.clone().unwrap_or_default();
    let stop = tokio_util::sync::CancellationToken::new();
    // Everything of the agent reaches the API servers through a load balancer on loopback that
    // fails over between them (k3s's agent load balancer); it learns them from the kubernetes
    // Service's endpoints.
    let joined =
        url_authority(&args.server).with_context(|| format!("--server {:?}: no host", args.server))?;
    let lb = r8s_client::lb::LoadBalancer::start(0, vec![joined], stop.clone())
        .await
        .context("starting the API server load balancer")?;
    config.cluster_url = format!("https://127.0.0.1:{}", lb.local.port()).parse()?;
    let client = r8s_client::http2::client(config)?;
    tokio::spawn(r8s_client::lb::follow_endpoints(
        lb,
        client.clone(),
        Duration::from_secs(15),
        stop.clone(),
    ));
    let overlay = args
        .agent
        .overlay(&mut opts, &args.cluster_cidr)
        .await?
        .map(|cfg| spawn_overlay(client.clone(), cfg, stop.clone()));
    // The Service proxy and cluster DNS read Services and EndpointSlices with the node's
    // own identity (the server binds system:node-proxier to system:nodes for it).
    let cluster_dns: std::net::IpAddr = args
        .agent
        .cluster_dns
        .parse()
        .with_context(|| format!("--cluster-dns {:?} is not an IP address", args.agent.cluster_dns))?;
    let run_dns = !args.disable_dns;
    let proxy_cfg = if args.disable_kube_proxy {
        None
    } else {
        let local = if run_dns { vec![cluster_dns] } else { vec![] };
        let mut cfg = proxy_config(&opts.node_name, &args.service_cidr, &args.cluster_cidr, local)?;
        cfg.keep_on_exit = args.agent.keep_pods_on_exit;
        Some(cfg)
    };
    let proxy_metrics = Arc::new(r8s_net::proxy::ProxyMetrics::default());
    if proxy_cfg.is_some() {
        let m = proxy_metrics.clone();
        opts.metrics_sources
            .push(r8s_kubelet::metrics::MetricsSource(Arc::new(move || m.render())));
    }
    let dns_opts = run_dns.then(|| dns_options(&args.agent, cluster_dns));
    let (proxy, dns) = spawn_service_network(client.clone(), proxy_cfg, dns_opts, proxy_metrics, &stop);
    let policy = spawn_network_policy(&args.agent, &mut opts, client.clone(), &stop);
    let task = {
        let stop = stop.clone();
        tokio::spawn(async move { r8s_kubelet::agent::Agent::run(client, opts, stop).await })
    };
    signals.recv().await;
    stop.cancel();
    let result = match tokio::time::timeout(r8s_kubelet::agent::STOP_LIMIT, task).await {
        Ok(Ok(Err(e))) => Err(anyhow::anyhow!("agent: {e}")),
        _ => Ok(()),
    };
    for t in [dns, proxy, overlay, policy].into_iter().flatten() {
        let _ = tokio::time::timeout(Duration::from_secs(5), t).await;
    }
    result
}

/// Raise the soft limit of open files to the hard limit, as Go's runtime does for upstream's
/// binaries since Go 1.19: a server holds a connection per watch of every client (thousands
/// with many nodes), and 1,024 is the usual soft limit.
fn raise_open_files_limit() {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit read and write the one rlimit struct passed.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 && lim.rlim_cur < lim.rlim_max {
            lim.rlim_cur = lim.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
    }
}

/// mimalloc instead of glibc's malloc: the API server's requests allocate and free many small
/// JSON values from several threads, where glibc's arenas spent a quarter of the server's time
/// (see BENCHMARKS.md, "Security chains").
#[cfg(feature = "mimalloc")]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The logs (`R8S_LOG`, to standard error) and the journey recorder behind `r8s trace`
/// (spans of target `journey::…`, which the logs leave out), each with its own filter.
fn init_logging(trace_ring_size: usize) {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    use tracing_subscriber::Layer;
    let filter = tracing_subscriber::EnvFilter::try_from_env("R8S_LOG")
        .unwrap_or_else(|_| "info".into())
        .add_directive("journey=off".parse().expect("a valid directive"));
    let logs = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        // Colours only for a terminal: log files stay plain text.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_filter(filter);
    let journey = (trace_ring_size > 0).then(|| {
        let journal = r8s_trace::journal();
        journal.set_capacity(trace_ring_size);
        r8s_trace::JourneyLayer::new(journal).with_filter(r8s_trace::JourneyLayer::filter())
    });
    tracing_subscriber::registry().with(logs).with(journey).init();
}

fn main() -> anyhow::Result<()> {
    // `r8s kubectl …`, or this binary invoked as `kubectl` (the symlink scripts/run.sh
    // installs): the client, with its own argument parsing and exit codes.
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let invoked_as = args
        .first()
        .and_then(|a| std::path::Path::new(a).file_name())
        .and_then(|n| n.to_str())
        .unwrap_or("");
    if invoked_as == "kubectl" {
        std::process::exit(r8s_kubectl::main(args));
    }
    if args.get(1).is_some_and(|a| a == "kubectl") {
        std::process::exit(r8s_kubectl::main(args[1..].to_vec()));
    }
    if args.get(1).is_some_and(|a| a == "trace") {
        std::process::exit(r8s_kubectl::trace::main(args[1..].to_vec()));
    }
    let cli = Cli::parse();
    init_logging(cli.trace_ring_size);
    raise_open_files_limit();
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    runtime.block_on(async {
        if let Some(endpoint) = cli.tracing_endpoint.clone().filter(|_| cli.trace_ring_size > 0) {
            otlp::start(endpoint);
        }
        match cli.command {
            Command::Server(args) => server(*args).await,
            Command::ControllerManager(args) => controller_manager(args).await,
            Command::Scheduler(args) => scheduler(args).await,
            Command::Agent(args) => agent(*args).await,
            Command::EtcdSnapshot(args) => etcd_snapshot::run(args, default_data_dir()).await,
            Command::Kubectl { .. } | Command::Trace { .. } => {
                unreachable!("dispatched before the runtime starts")
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_host_of_a_server_url() {
        assert_eq!(url_host("https://10.0.0.1:6443"), Some("10.0.0.1"));
        assert_eq!(url_host("https://[fd00::1]:6443/x"), Some("[fd00::1]"));
        assert_eq!(url_host("https://server.example"), Some("server.example"));
        assert_eq!(url_host("https://:6443"), None);
        assert_eq!(
            url_authority("https://10.0.0.1:6443/").as_deref(),
            Some("10.0.0.1:6443")
        );
        assert_eq!(
            url_authority("https://[fd00::1]").as_deref(),
            Some("[fd00::1]:443")
        );
    }

    #[test]
    fn node_ips_are_one_or_a_dual_stack_pair() {
        assert_eq!(parse_node_ips("10.0.0.5").unwrap(), ("10.0.0.5".into(), None));
        assert_eq!(
            parse_node_ips("fd00::5,10.0.0.5").unwrap(),
            ("fd00::5".into(), Some("10.0.0.5".into()))
        );
        assert!(parse_node_ips("10.0.0.5,10.0.0.6")
            .unwrap_err()
            .to_string()
            .contains("one IPv4 and one IPv6"));
        assert!(parse_node_ips("a.b")
            .unwrap_err()
            .to_string()
            .contains("could not parse"));
        assert!(parse_node_ips("10.0.0.1,::1,10.0.0.2")
            .unwrap_err()
            .to_string()
            .contains("a single IP or a dual-stack pair"));
    }

    #[test]
    fn durations_parse_like_kubernetes_flags() {
        assert_eq!(parse_duration("5m").unwrap(), Duration::from_secs(300));
        assert_eq!(parse_duration("1m30s").unwrap(), Duration::from_secs(90));
        // As Go's flags: a number needs its unit.
        assert_eq!(
            parse_duration("30").unwrap_err(),
            "time: missing unit in duration \"30\""
        );
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
        assert!(parse_duration("5x").unwrap_err().contains("unknown unit"));
        assert!(parse_duration("m").is_err());
    }
}
