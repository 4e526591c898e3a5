//! End-to-end tests of the node: `r8s server` with its agent running real pods on containerd
//! and runc through CRI, with CNI networking, driven by the real kubectl. They run as root and
//! remove every process, mount, bridge, network namespace and cgroup they make. One test binary
//! instead of one per file: the whole tree is linked once.

#[path = "../support/mod.rs"]
mod support;

mod agent;
mod autoscaling;
mod clients;
mod debug;
mod dns;
mod dual_stack;
mod exec;
mod logs;
mod multinode;
mod own_kubectl;
mod pod_workers;
mod probes;
mod proxy;
mod pull_secrets;
mod qos;
mod restart;
mod rolling;
mod runtime_endpoint;
mod security_context;
mod trace;
mod volumes;
mod workloads;
