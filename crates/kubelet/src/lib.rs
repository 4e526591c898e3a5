//! The r8s kubelet (the reference document's kubelet stages). This first layer: the container
//! runtime. `containerd` runs containerd as the agent's child with a configuration r8s writes;
//! `cri` talks CRI v1 to it over its unix socket with tonic and the k8s-cri protos.

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
pub mod pod_workers;
pub mod prober;
pub mod qos;
pub mod registries;
pub mod security;
pub mod server;
pub mod spec;
pub mod status;
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
