//! The r8s kubelet: the reference document's kubelet stages, from pod sync to a running
//! container with an IP.
//!
//! - `agent`: the pod watch and the sync of one pod (admission, volumes, then the pod's
//!   actions, then its status), run by the pod workers of `pod_workers` (one per pod UID:
//!   syncing → terminating → terminated, each owning its pod's record), woken by the pod's
//!   changes, the PLEG (`pleg`: the runtime's containers compared once a second) and their own
//!   due times (`wakeups`: activeDeadlineSeconds, back-offs, the status resync); `status` writes
//!   pod statuses in the background. Its submodules: the node's registration, status and Lease
//!   (`node_status`), the orphan sweep and shutdown (`housekeeping`), image pulls
//!   (`image_manager`).
//! - `actions`: what a pod's sync must do, decided from plain data (sandbox, init containers and
//!   sidecars, containers to start or kill, back-offs, the deadline); `pod_sync` carries the
//!   actions out against a `runtime::Runtime` (CRI, or an in-memory fake in tests).
//! - The runtime: `containerd` runs containerd as the agent's child with a configuration r8s
//!   writes, `cri` talks CRI v1 to it with tonic and the k8s-cri protos, `spec` turns pod specs
//!   into CRI configs, `images` and `credentials`/`registries` pull, `cni` writes the network
//!   configuration, `cgroups` and `qos` place pods by QoS class.
//! - Pod features: `volumes`, `prober` (probes and hooks), `lifecycle`, `security`, `logs`,
//!   `backoff`, `admission` (the general predicates of `r8s_api::predicates`).
//! - `server`: the kubelet's HTTPS API (logs, exec, attach, port-forward, metrics, and the
//!   resource metrics `stats` reads from the pods' cgroups);
//!   `bootstrap`: joining a server with a token and a CertificateSigningRequest.

pub mod actions;
pub mod admission;
pub mod agent;
pub mod backoff;
pub mod bootstrap;
pub mod cgroups;
pub mod cni;
pub mod containerd;
pub mod credentials;
pub mod cri;
pub mod images;
pub mod lifecycle;
pub mod logs;
pub mod metrics;
pub mod pleg;
pub mod pod_sync;
pub mod pod_workers;
pub mod prober;
pub mod qos;
pub mod registries;
pub mod runtime;
pub mod runtime_events;
pub mod security;
pub mod server;
pub mod spec;
pub mod stats;
pub mod status;
pub mod translate;
pub mod volumes;
pub mod wakeups;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("CRI: {0}")]
    Transport(#[from] tonic::transport::Error),
    #[error("CRI: {0}")]
    Status(#[from] tonic::Status),
    #[error("{0}")]
    Other(String),
}
