//! The API's resource catalogue and the rules several components apply to typed objects.
//!
//! The catalogue (`catalogue`): what the API server serves, how each resource is named and
//! scoped, which verbs and subresources it has; discovery, routing and the registry read it.
//! Quantities (`quantity`), Go durations (`duration`), names and labels (`validation`), the one selector model
//! (`selector`), typed decoding and OpenAPI schemas (`typed`), quota accounting (`quota`), the
//! patch-strategy table generated from upstream's OpenAPI (`patch_strategy`: merge keys and list
//! types by type path, shared by strategic merge patch, server-side apply and OpenAPI).
//!
//! The rules several components apply to typed objects, with no I/O (the role of upstream's
//! `k8s.io/component-helpers`): tolerations and taints (`taints`), node selectors and affinity
//! (`node_affinity`), pod requests and limits (`resources`), QoS classes (`qos`), pod
//! readiness (`pod`), owner references (`owner`) and the general predicates the scheduler and the
//! kubelet both check (`predicates`).

pub mod catalogue;
pub mod cron;
pub mod duration;
pub mod features;
/// Entry points for the fuzz targets in `fuzz/` (not an API).
#[doc(hidden)]
pub mod fuzzing;
pub mod local_path;
pub mod node_affinity;
pub mod owner;
pub mod patch_strategy;
pub mod pod;
pub mod predicates;
pub mod qos;
pub mod quantity;
pub mod quota;
pub mod resources;
pub mod selector;
pub mod spdy;
pub mod taints;
pub mod typed;
pub mod upgrade;
pub mod validation;

pub use catalogue::{catalogue, find, group_versions, ResourceDef, Subresource};
