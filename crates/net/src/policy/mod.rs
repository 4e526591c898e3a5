//! NetworkPolicy (networking.k8s.io/v1) enforced by the agent, the role of kube-router's
//! policy controller in k3s: [`model`] compiles the policies that select this node's pods
//! into per-pod chains and address sets, [`table`] writes them into the nf_tables table
//! `ip r8s-policy` in one transaction, [`run`] follows the API and takes new pods in before
//! their containers start.
//!
//! Traffic between a pod and its own node (the kubelet's probes, cluster DNS, which the node
//! serves) is not policed, as upstream keeps node traffic allowed.

pub mod model;
pub mod run;
pub mod table;

pub use run::{handle, run, PolicyConfig, PolicyHandle};
