//! End-to-end tests of the API side: a real `r8s server` (most with `--disable-agent`), driven by
//! the real kubectl (1.27 and 1.33), kube-rs and real webhook and OIDC servers. No container
//! runtime is needed. One test binary instead of one per file: the whole tree is linked once.

#[path = "../support/mod.rs"]
mod support;

mod admission;
mod aggregation;
mod audit;
mod controllers;
mod custom_resources;
mod degrade;
mod etcd_backend;
mod faults;
mod fidelity;
mod flowcontrol;
mod hollow;
mod kube_rs;
mod kube_rs_controller;
mod kubectl;
mod kubectl_differential;
mod policies;
mod scheduler;
mod security;
mod server_join;
mod trace;
mod webhooks;
