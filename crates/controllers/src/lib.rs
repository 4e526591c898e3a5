//! The r8s controller manager: the reference document's "Control loops". Every controller here
//! talks to the API server only through a kube-rs client, so the manager runs inside `r8s server`
//! or alone as `r8s controller-manager`, against r8s or any conformant cluster.
//!
//! The machinery — shared informers, the work queue and controller runner, expectations,
//! events, leader election, the discovery cache — is `r8s-client`'s; the rules on typed objects
//! (selectors, owner references, pod readiness, tolerations) are `r8s-api`'s. Controllers, one
//! module each: `replicaset` (also the replication manager), `deployment`, `job` (with the TTL-after-finished part), `cronjob`,
//! `daemonset` and `statefulset` (both recording templates through `history`), `disruption`,
//! `podautoscaler` (the horizontal pod autoscaler, on `metrics.k8s.io`),
//! `gc` (garbage collector), `namespace`, `serviceaccount`, `nodeipam`, `nodelifecycle`,
//! `clusterrole_aggregation`, `resourcequota`, `root_ca_cert_publisher`, `certificates`, `ttl`,
//! `endpoints`, `endpointslice`, `endpointslicemirroring`; `claim` (adoption and release of owned objects) and
//! `pod_control` (slow-start creates, deletes, their events) are what the workload controllers
//! share.

pub mod certificates;
pub mod claim;
pub mod clusterrole_aggregation;
pub mod credentials;
pub mod cronjob;
pub mod daemonset;
pub mod deployment;
pub mod disruption;
pub mod endpoints;
pub mod endpointslice;
pub mod endpointslicemirroring;
pub mod ephemeral;
pub mod gc;
pub mod history;
pub mod job;
pub mod namespace;
pub mod nodeipam;
pub mod nodelifecycle;
pub mod persistentvolume;
pub mod pod_control;
pub mod podautoscaler;
pub mod podgc;
pub mod replicaset;
pub mod resourcequota;
pub mod root_ca_cert_publisher;
pub mod serviceaccount;
pub mod servicelb;
pub mod statefulset;
pub mod ttl;
pub mod volume_protection;

use std::time::Duration;

use kube::Client;
use tokio_util::sync::CancellationToken;

pub use tokio_util::sync::CancellationToken as StopToken;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Kube(#[from] kube::Error),
    #[error("{0}")]
    Other(String),
}

impl Error {
    pub fn is_not_found(&self) -> bool {
        matches!(self, Error::Kube(kube::Error::Api(s)) if s.code == 404)
    }
    pub fn is_conflict(&self) -> bool {
        matches!(self, Error::Kube(kube::Error::Api(s)) if s.code == 409)
    }
    pub fn is_already_exists(&self) -> bool {
        matches!(self, Error::Kube(kube::Error::Api(s)) if s.code == 409 && s.reason == "AlreadyExists")
    }
}

impl r8s_client::queue::SyncError for Error {
    fn is_conflict(&self) -> bool {
        Error::is_conflict(self)
    }
}

/// What a controller's sync returns (see [`r8s_client::queue::run_controller`]).
pub type SyncResult = r8s_client::queue::SyncResult<Error>;

/// A selector that is not valid as an error of the sync that read it.
pub(crate) fn selector(
    sel: Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector>,
) -> Result<r8s_api::selector::Selector, Error> {
    r8s_api::selector::label_selector_as_selector(sel)
        .map_err(|e| Error::Other(format!("invalid label selector: {e}")))
}

#[derive(Clone, Debug)]
pub struct Options {
    /// Workers per controller (upstream's `--concurrent-*-syncs`, 5 for most).
    pub workers: usize,
    /// Pod CIDR of the cluster, split into a /24 per node; `None` disables node IPAM.
    pub cluster_cidr: Option<String>,
    pub node_cidr_mask_size: u8,
    /// The IPv6 node mask, for the IPv6 range of a dual-stack cluster CIDR.
    pub node_cidr_mask_size_ipv6: u8,
    pub node_monitor_grace_period: Duration,
    /// Finished pods kept before the oldest are deleted (0: all are kept).
    pub terminated_pod_gc_threshold: usize,
    pub leader_elect: bool,
    /// Identity in the leader-election Lease.
    pub identity: String,
    /// Whose credentials each controller writes with.
    pub credentials: credentials::Credentials,
    /// The CA that signs approved client certificate requests (none: nothing is signed).
    pub signing_ca: Option<certificates::SigningCa>,
    /// The CA bundle (PEM) that verifies the API server, published in every namespace as the
    /// `kube-root-ca.crt` ConfigMap; `None` turns the root-ca-cert-publisher off.
    pub root_ca_pem: Option<String>,
    /// Give LoadBalancer Services the nodes' addresses (k3s's servicelb role; `r8s server`
    /// turns it on unless `--disable servicelb`).
    pub servicelb: bool,
    /// The horizontal pod autoscaler's settings.
    pub hpa: podautoscaler::HpaOptions,
    /// The leader's fence (set by `run` with leader election): every controller's writes go
    /// through it, whatever credentials they use.
    pub fence: Option<r8s_client::leader::Fence>,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            workers: 5,
            cluster_cidr: Some("10.42.0.0/16".into()),
            node_cidr_mask_size: 24,
            node_cidr_mask_size_ipv6: 64,
            node_monitor_grace_period: Duration::from_secs(40),
            terminated_pod_gc_threshold: podgc::DEFAULT_TERMINATED_THRESHOLD,
            leader_elect: true,
            identity: r8s_client::default_identity(),
            credentials: credentials::Credentials::Shared,
            signing_ca: None,
            root_ca_pem: None,
            servicelb: false,
            hpa: podautoscaler::HpaOptions::default(),
            fence: None,
        }
    }
}

/// Run the controller manager until `stop` is cancelled: with leader election on the
/// `kube-system/kube-controller-manager` Lease unless disabled.
pub async fn run(client: Client, opts: Options, stop: CancellationToken) {
    if opts.leader_elect {
        let election =
            r8s_client::leader::LeaderElection::new("kube-controller-manager", opts.identity.clone());
        // The controllers write only while the Lease is surely theirs (the elector's fence),
        // with the controller manager's credentials or their own.
        let fenced = r8s_client::leader::fenced(client.clone(), election.fence.clone());
        let opts = Options {
            fence: Some(election.fence.clone()),
            ..opts
        };
        election
            .run(client, stop, move |leading| {
                run_controllers(fenced.clone(), opts.clone(), leading)
            })
            .await;
    } else {
        run_controllers(client, opts, stop).await;
    }
}

/// Start every controller and run them until `stop` is cancelled.
pub async fn run_controllers(client: Client, opts: Options, stop: CancellationToken) {
    let factory = r8s_client::informer::Factory::new(client.clone(), Some(Duration::from_secs(600)));
    let events = r8s_client::events::Events::new(client.clone(), "r8s-controller-manager");
    // Each controller's view of the factory, writing as upstream's ServiceAccount of that
    // controller when service-account credentials are on.
    let mut views = std::collections::HashMap::new();
    for name in [
        "replicaset-controller",
        "replication-controller",
        "deployment-controller",
        "job-controller",
        "cronjob-controller",
        "daemon-set-controller",
        "statefulset-controller",
        "disruption-controller",
        "horizontal-pod-autoscaler",
        "ttl-after-finished-controller",
        "namespace-controller",
        "service-account-controller",
        "clusterrole-aggregation-controller",
        "node-controller",
        "generic-garbage-collector",
        "certificate-controller",
        "resourcequota-controller",
        "root-ca-cert-publisher",
        "endpoint-controller",
        "endpointslice-controller",
        "endpointslicemirroring-controller",
        "service-controller",
        "persistent-volume-binder",
        "pvc-protection-controller",
        "pv-protection-controller",
        "ephemeral-volume-controller",
        "pod-garbage-collector",
        "ttl-controller",
    ] {
        let c = loop {
            match credentials::client_for(&client, &opts.credentials, opts.fence.as_ref(), name, &stop).await
            {
                Ok(c) => break c,
                Err(e) => {
                    tracing::warn!(controller = name, error = %e, "getting the controller's credentials failed; retrying");
                    tokio::select! {
                        _ = stop.cancelled() => return,
                        _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                    }
                }
            }
        };
        views.insert(name, factory.for_controller(c));
    }
    let rs = replicaset::ReplicaSetController::new(&views["replicaset-controller"], events.clone());
    let rc = replicaset::ReplicationManager::new(&views["replication-controller"], events.clone());
    let deploy = deployment::DeploymentController::new(&views["deployment-controller"], events.clone());
    let jobs = job::JobController::new(
        &views["job-controller"],
        views["ttl-after-finished-controller"].client(),
        events.clone(),
    );
    let cronjobs = cronjob::CronJobController::new(&views["cronjob-controller"], events.clone());
    let daemons = daemonset::DaemonSetController::new(&views["daemon-set-controller"], events.clone());
    let stateful = statefulset::StatefulSetController::new(&views["statefulset-controller"], events.clone());
    let budgets = disruption::DisruptionController::new(&views["disruption-controller"], events.clone());
    let hpa = podautoscaler::HorizontalController::new(&views["horizontal-pod-autoscaler"], opts.hpa.clone());
    let ns = namespace::NamespaceController::new(&views["namespace-controller"]);
    let sa = serviceaccount::ServiceAccountController::new(&views["service-account-controller"]);
    let aggregation =
        clusterrole_aggregation::AggregationController::new(&views["clusterrole-aggregation-controller"]);
    let ipam = opts.cluster_cidr.as_deref().and_then(|c| {
        match nodeipam::NodeIpamController::new(
            &views["node-controller"],
            c,
            opts.node_cidr_mask_size,
            opts.node_cidr_mask_size_ipv6,
        ) {
            Ok(c) => Some(c),
            Err(e) => {
                tracing::error!(error = %e, "node IPAM disabled");
                None
            }
        }
    });
    let csr =
        certificates::CertificateController::new(&views["certificate-controller"], opts.signing_ca.clone());
    let lifecycle = nodelifecycle::NodeLifecycleController::new(
        &views["node-controller"],
        events.clone(),
        opts.node_monitor_grace_period,
    );
    let quota = resourcequota::ResourceQuotaController::new(&views["resourcequota-controller"]);
    let volumes =
        persistentvolume::PersistentVolumeController::new(&views["persistent-volume-binder"], events.clone());
    let pvc_protection = volume_protection::PvcProtectionController::new(&views["pvc-protection-controller"]);
    let pv_protection = volume_protection::PvProtectionController::new(&views["pv-protection-controller"]);
    let ephemeral_volumes =
        ephemeral::EphemeralVolumeController::new(&views["ephemeral-volume-controller"], events.clone());
    let podgc =
        podgc::PodGcController::new(&views["pod-garbage-collector"], opts.terminated_pod_gc_threshold);
    let endpoints = endpoints::EndpointsController::new(&views["endpoint-controller"]);
    let slices = endpointslice::EndpointSliceController::new(&views["endpointslice-controller"]);
    let mirroring =
        endpointslicemirroring::MirroringController::new(&views["endpointslicemirroring-controller"]);
    let root_ca = match &opts.root_ca_pem {
        Some(pem) => Some(root_ca_cert_publisher::RootCaCertPublisher::new(
            &views["root-ca-cert-publisher"],
            pem.clone(),
        )),
        None => {
            tracing::info!("no root CA given: the root-ca-cert-publisher is off");
            None
        }
    };
    let node_ttl = ttl::TtlController::new(&views["ttl-controller"]);
    let informers = factory.start(&stop);
    let mut tasks = vec![
        tokio::spawn(rs.run(opts.workers, stop.clone())),
        tokio::spawn(rc.run(opts.workers, stop.clone())),
        tokio::spawn(deploy.run(opts.workers, stop.clone())),
        tokio::spawn(jobs.run(opts.workers, stop.clone())),
        tokio::spawn(budgets.run(opts.workers, stop.clone())),
        tokio::spawn(hpa.run(opts.workers, stop.clone())),
        tokio::spawn(cronjobs.run(opts.workers, stop.clone())),
        tokio::spawn(daemons.run(opts.workers, stop.clone())),
        tokio::spawn(stateful.run(opts.workers, stop.clone())),
        tokio::spawn(ns.run(opts.workers, stop.clone())),
        tokio::spawn(sa.run(stop.clone())),
        tokio::spawn(aggregation.run(stop.clone())),
        tokio::spawn(csr.run(stop.clone())),
        tokio::spawn(lifecycle.run(stop.clone())),
        tokio::spawn(
            gc::GarbageCollector::new(views["generic-garbage-collector"].client())
                .run(opts.workers, stop.clone()),
        ),
    ];
    tasks.push(tokio::spawn(quota.run(opts.workers, stop.clone())));
    tasks.push(tokio::spawn(volumes.run(opts.workers, stop.clone())));
    tasks.push(tokio::spawn(pvc_protection.run(opts.workers, stop.clone())));
    tasks.push(tokio::spawn(pv_protection.run(opts.workers, stop.clone())));
    tasks.push(tokio::spawn(ephemeral_volumes.run(opts.workers, stop.clone())));
    tasks.push(tokio::spawn(podgc.run(stop.clone())));
    tasks.push(tokio::spawn(node_ttl.run(stop.clone())));
    tasks.push(tokio::spawn(endpoints.run(opts.workers, stop.clone())));
    tasks.push(tokio::spawn(slices.run(opts.workers, stop.clone())));
    tasks.push(tokio::spawn(mirroring.run(opts.workers, stop.clone())));
    if opts.servicelb {
        let lb = servicelb::ServiceLbController::new(&views["service-controller"], events.clone());
        tasks.push(tokio::spawn(lb.run(opts.workers, stop.clone())));
    }
    if let Some(root_ca) = root_ca {
        tasks.push(tokio::spawn(root_ca.run(1, stop.clone())));
    }
    if let Some(ipam) = ipam {
        tasks.push(tokio::spawn(ipam.run(stop.clone())));
    }
    stop.cancelled().await;
    for t in tasks.into_iter().chain(informers) {
        t.abort();
    }
}

/// The field manager of every write the controllers make, as upstream's managedFields show it.
pub const FIELD_MANAGER: &str = "kube-controller-manager";

pub(crate) fn post_params() -> kube::api::PostParams {
    kube::api::PostParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..Default::default()
    }
}

pub(crate) fn patch_params() -> kube::api::PatchParams {
    kube::api::PatchParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..Default::default()
    }
}
